/* test_safetensors.c: check suite for engine/weights/safetensors.c.
 *
 * Pins the reader against the real MiniLM weights, the writer by round trip,
 * every rejection the reference reader makes (each malformed file is built
 * here, in memory or in a temp dir, and each test asserts the status and that
 * the message names the file and the tensor at fault), and a seeded fuzz loop
 * over truncations and byte mutations, meant to be run under ASan as well.
 */
#include "engine/weights/safetensors.h"

#include <check.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LABEL "bad.safetensors"
#define MODEL "models/all-MiniLM-L6-v2/model.safetensors"

/* ======================================================================
 * helpers
 * ====================================================================== */

/* An exactly sized image: 8-byte length field (hlen_field), hlen header
 * bytes, then data_len zero bytes. Exact size so ASan sees any over-read. */
static unsigned char *img_raw(uint64_t hlen_field, const char *header, size_t hlen,
                              size_t data_len, size_t *len)
{
    *len = 8 + hlen + data_len;
    unsigned char *b = calloc(1, *len ? *len : 1);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, header, hlen);
    return b;
}

/* An image whose header is the C string header, correctly sized. */
static unsigned char *img(const char *header, size_t data_len, size_t *len)
{
    return img_raw(strlen(header), header, strlen(header), data_len, len);
}

/* Parses buf and asserts failure with status want and a message naming
 * LABEL and, when needle is not NULL, containing needle. */
static void expect_reject_buf(const unsigned char *buf, size_t len, mt_status want,
                              const char *needle, const char *what)
{
    st_file *f = (st_file *)1;
    mt_err err = {{0}};
    mt_status st = st_parse(buf, len, LABEL, &f, &err);
    ck_assert_msg(st == want, "%s: status '%s', want '%s' (message: %s)", what,
                  mt_strerror(st), mt_strerror(want), err.msg);
    ck_assert_msg(f == NULL, "%s: out not cleared on failure", what);
    ck_assert_msg(strncmp(err.msg, LABEL ": ", strlen(LABEL) + 2) == 0,
                  "%s: message does not name the file: %s", what, err.msg);
    if (needle)
        ck_assert_msg(strstr(err.msg, needle) != NULL, "%s: message '%s' lacks '%s'", what,
                      err.msg, needle);
}

/* expect_reject_buf on an img_raw image. */
static void expect_reject_raw(uint64_t hlen_field, const char *header, size_t hlen,
                              size_t data_len, mt_status want, const char *needle,
                              const char *what)
{
    size_t len;
    unsigned char *buf = img_raw(hlen_field, header, hlen, data_len, &len);
    expect_reject_buf(buf, len, want, needle, what);
    free(buf);
}

/* expect_reject_buf on an img image, named by its header. */
static void expect_reject(const char *header, size_t data_len, mt_status want, const char *needle)
{
    expect_reject_raw(strlen(header), header, strlen(header), data_len, want, needle, header);
}

/* Parses header + data_len bytes and asserts success; returns the file. */
static st_file *expect_accept(const char *header, size_t data_len, unsigned char **keep)
{
    size_t len;
    unsigned char *buf = img(header, data_len, &len);
    st_file *f = NULL;
    mt_err err = {{0}};
    mt_status st = st_parse(buf, len, LABEL, &f, &err);
    ck_assert_msg(st == MT_OK, "%s: rejected: %s", header, err.msg);
    ck_assert_ptr_nonnull(f);
    *keep = buf;
    return f;
}

/* A fresh empty directory under /tmp for writer tests. */
static void make_tmpdir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/st_test_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Number of entries in dir other than . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Removes dir and the files in it (flat). */
static void rm_tmpdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char p[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(data, 1, len, fp), len);
    ck_assert_int_eq(fclose(fp), 0);
}

/* ======================================================================
 * reading
 * ====================================================================== */

START_TEST(st_reads_real_model)
{
    ck_assert_msg(access(MODEL, R_OK) == 0, "%s missing: run `make model` first", MODEL);
    st_file *f = NULL;
    mt_err err = {{0}};
    ck_assert_msg(st_open(MODEL, &f, &err) == MT_OK, "%s", err.msg);
    ck_assert_str_eq(st_path(f), MODEL);
    /* 104: 6 layers x 16, 5 embedding tensors, pooler weight and bias,
     * plus embeddings.position_ids. */
    ck_assert_uint_eq(st_count(f), 104);
    ck_assert_str_eq(st_meta(f, "format"), "pt");
    ck_assert_ptr_null(st_meta(f, "nope"));

    const st_tensor *w = st_find(f, "embeddings.word_embeddings.weight");
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->dtype, ST_F32);
    ck_assert_int_eq(w->ndim, 2);
    ck_assert_int_eq(w->shape[0], 30522);
    ck_assert_int_eq(w->shape[1], 384);
    ck_assert_uint_eq(w->nbytes, (size_t)30522 * 384 * 4);
    ck_assert_int_eq(st_numel(w), 30522 * 384);
    ck_assert_ptr_null(st_find(f, "embeddings.word_embeddings"));

    /* st_get is in data order, contiguous, and agrees with st_find. */
    const unsigned char *prev_end = NULL;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_get(f, i);
        ck_assert_ptr_nonnull(t);
        ck_assert_ptr_eq(st_find(f, t->name), t);
        if (prev_end)
            ck_assert_ptr_eq(t->data, prev_end);
        prev_end = (const unsigned char *)t->data + t->nbytes;
    }
    ck_assert_ptr_null(st_get(f, st_count(f)));
    st_close(f);
}
END_TEST

/* Resident kB of the mapping that holds p (/proc/self/smaps), -1 if none. */
static long mapping_rss_kb(const void *p)
{
    FILE *fp = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(fp);
    char line[512];
    long rss = -1;
    bool in = false;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
            break;
    }
    fclose(fp);
    return rss;
}

static double sum_floats(const st_tensor *t)
{
    double s = 0;
    const float *v = t->data;
    for (size_t i = 0; i < t->nbytes / sizeof(float); i++)
        s += v[i];
    return s;
}

/* st_drop_pages takes what a loader read out of the process's RSS (the
 * mapping's Rss in smaps falls from the 45 MiB read to almost nothing), and
 * the data read afterwards are the same. */
START_TEST(st_drop_pages_releases_what_was_read_and_keeps_the_data)
{
    st_file *f = NULL;
    mt_err err = {{0}};
    ck_assert_msg(st_open(MODEL, &f, &err) == MT_OK, "%s", err.msg);
    const st_tensor *w = st_find(f, "embeddings.word_embeddings.weight");
    ck_assert_ptr_nonnull(w);
    const double sum = sum_floats(w);
    const long before = mapping_rss_kb(w->data);
    ck_assert_msg(before >= (long)(w->nbytes / 1024) - 8, "mapping Rss %ld kB after reading %zu",
                  before, w->nbytes);
    st_drop_pages(f);
    const long after = mapping_rss_kb(w->data);
    ck_assert_msg(after >= 0 && after < 1024, "mapping Rss %ld kB after st_drop_pages", after);
    ck_assert(sum_floats(w) == sum);
    st_drop_pages(NULL); /* no-ops */
    st_close(f);
}
END_TEST

START_TEST(st_accepts_edge_cases)
{
    unsigned char *buf;
    /* No tensors and no data. */
    st_file *f = expect_accept("{}", 0, &buf);
    ck_assert_uint_eq(st_count(f), 0);
    ck_assert_ptr_null(st_find(f, "x"));
    ck_assert_ptr_null(st_meta(f, "format"));
    st_close(f);
    free(buf);

    /* Trailing padding spaces, as the reference writer leaves. */
    f = expect_accept("{\"__metadata__\":{}}     ", 0, &buf);
    st_close(f);
    free(buf);

    /* "__metadata__": null means none, as in the reference reader. */
    f = expect_accept("{\"__metadata__\":null}", 0, &buf);
    ck_assert_ptr_null(st_meta(f, "format"));
    st_close(f);
    free(buf);

    /* Zero-size tensors sharing an offset with a scalar, listed out of order;
     * st_get comes back in data order. */
    const char *hdr = "{\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]},"
                      "\"z1\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                      "\"z0\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    f = expect_accept(hdr, 8, &buf);
    ck_assert_uint_eq(st_count(f), 4);
    ck_assert_str_eq(st_get(f, 0)->name, "z0");
    ck_assert_str_eq(st_get(f, 1)->name, "b");
    ck_assert_str_eq(st_get(f, 2)->name, "z1");
    ck_assert_str_eq(st_get(f, 3)->name, "s");
    const st_tensor *s = st_find(f, "s");
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_int_eq(st_numel(s), 1);
    ck_assert_ptr_eq(s->data, buf + 8 + strlen(hdr) + 4);
    ck_assert_int_eq(st_numel(st_find(f, "z1")), 0);
    st_close(f);
    free(buf);

    /* Escapes in names are decoded; non-ASCII names are fine. */
    f = expect_accept("{\"a\\\"b\\u00e9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"\xc3\xa9\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                      2, &buf);
    ck_assert_ptr_nonnull(st_find(f, "a\"b\xc3\xa9"));
    ck_assert_ptr_nonnull(st_find(f, "\xc3\xa9\xf0\x9f\x98\x80"));
    st_close(f);
    free(buf);
}
END_TEST

START_TEST(st_dtype_table_round_trips)
{
    static const size_t sizes[ST_DTYPE_COUNT] = {1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8, 1, 1};
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
        st_dtype back;
        ck_assert_int_eq(st_dtype_parse(st_dtype_name((st_dtype)d), &back), 0);
        ck_assert_int_eq(back, d);
        ck_assert_uint_eq(st_dtype_size((st_dtype)d), sizes[d]);
    }
    ck_assert_str_eq(st_dtype_name(ST_F8_E4M3), "F8_E4M3");
    ck_assert_int_ne(st_dtype_parse("f32", NULL), 0);
    ck_assert_int_ne(st_dtype_parse("F8_E4M3FN", NULL), 0);
    ck_assert_int_ne(st_dtype_parse(NULL, NULL), 0);
}
END_TEST

/* ======================================================================
 * writing
 * ====================================================================== */

START_TEST(st_write_then_read_round_trips)
{
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out.safetensors", dir);

    float f32[6] = {1, -2, 3.5f, 4, 5, 6};
    unsigned char e4m3[5] = {0x00, 0x38, 0x7e, 0xb8, 0xff};
    uint16_t bf16[3] = {0x3f80, 0xc000, 0x7f80};
    int64_t scalar = -1234567890123LL;
    unsigned char bools[3] = {1, 0, 1};
    double f64[2] = {3.141592653589793, -0.0};
    uint16_t f16[2] = {0x3c00, 0xbc00};
    st_tensor t[] = {
        {.name = "enc.w", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = f32, .nbytes = sizeof f32},
        {.name = "enc.w_fp8", .dtype = ST_F8_E4M3, .ndim = 1, .shape = {5}, .data = e4m3, .nbytes = 5},
        {.name = "bf", .dtype = ST_BF16, .ndim = 2, .shape = {3, 1}, .data = bf16, .nbytes = 6},
        {.name = "step", .dtype = ST_I64, .ndim = 0, .data = &scalar, .nbytes = 8},
        {.name = "empty", .dtype = ST_U8, .ndim = 2, .shape = {0, 4}, .data = NULL, .nbytes = 0},
        {.name = "mask", .dtype = ST_BOOL, .ndim = 1, .shape = {3}, .data = bools, .nbytes = 3},
        {.name = "pi \"quoted\"\n", .dtype = ST_F64, .ndim = 1, .shape = {2}, .data = f64, .nbytes = 16},
        {.name = "h", .dtype = ST_F16, .ndim = 3, .shape = {1, 1, 2}, .data = f16, .nbytes = 4},
    };
    size_t n = sizeof t / sizeof t[0];
    const char *note = "quote \" backslash \\ newline \n tab \t ctl \x01 \xc3\xa9 \xe2\x9c\x93";
    const char *meta[] = {"format", "pt", "note", note, NULL};
    mt_err err = {{0}};
    ck_assert_msg(st_write(path, t, n, meta, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(dir_entries(dir), 1); /* no temp file left */

    st_file *f = NULL;
    ck_assert_msg(st_open(path, &f, &err) == MT_OK, "%s", err.msg);
    ck_assert_uint_eq(st_count(f), n);
    ck_assert_str_eq(st_meta(f, "format"), "pt");
    ck_assert_str_eq(st_meta(f, "note"), note);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *r = st_get(f, i); /* written in the given order */
        ck_assert_str_eq(r->name, t[i].name);
        ck_assert_ptr_eq(st_find(f, t[i].name), r);
        ck_assert_int_eq(r->dtype, t[i].dtype);
        ck_assert_int_eq(r->ndim, t[i].ndim);
        for (int d = 0; d < r->ndim; d++)
            ck_assert_int_eq(r->shape[d], t[i].shape[d]);
        ck_assert_uint_eq(r->nbytes, t[i].nbytes);
        if (r->nbytes)
            ck_assert_int_eq(memcmp(r->data, t[i].data, r->nbytes), 0);
    }
    st_close(f);

    /* The header is space-padded so the data starts 8-byte aligned. */
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    unsigned char len8[8];
    ck_assert_uint_eq(fread(len8, 1, 8, fp), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len8[i];
    ck_assert_uint_eq((8 + hlen) % 8, 0);
    char *hdr = malloc(hlen + 1);
    ck_assert_ptr_nonnull(hdr);
    ck_assert_uint_eq(fread(hdr, 1, hlen, fp), hlen);
    hdr[hlen] = 0;
    fclose(fp);
    char *close = strrchr(hdr, '}');
    ck_assert_ptr_nonnull(close);
    for (char *c = close + 1; *c; c++)
        ck_assert_int_eq(*c, ' ');
    ck_assert_uint_lt(hlen - (size_t)(close + 1 - hdr), 8);
    /* Numbers are plain integers, metadata comes first. */
    ck_assert_ptr_nonnull(strstr(hdr, "\"shape\":[2,3]"));
    ck_assert_ptr_eq(strstr(hdr, "{\"__metadata__\""), hdr);
    free(hdr);

    /* Writing again replaces the file atomically. */
    float one = 7;
    st_tensor t2 = {.name = "only", .dtype = ST_F32, .ndim = 1, .shape = {1}, .data = &one, .nbytes = 4};
    ck_assert_msg(st_write(path, &t2, 1, NULL, &err) == MT_OK, "%s", err.msg);
    ck_assert_msg(st_open(path, &f, &err) == MT_OK, "%s", err.msg);
    ck_assert_uint_eq(st_count(f), 1);
    ck_assert_ptr_null(st_meta(f, "format"));
    ck_assert(*(const float *)st_find(f, "only")->data == 7.0f);
    st_close(f);
    ck_assert_int_eq(dir_entries(dir), 1);
    rm_tmpdir(dir);
}
END_TEST

/* What a fill hands over: tensor 1 (of 3) in pieces of `piece` bytes, out
 * of order with tensor 2, or short by `short_by`; fail: the fill fails. */
typedef struct {
    const st_tensor *t;
    size_t piece, short_by;
    bool fail, twice;
} fill_plan;

static mt_status test_fill(void *arg, st_writer *w, mt_err *err)
{
    const fill_plan *fp = arg;
    mt_status st = st_writer_put(w, 2, fp->t[2].data, fp->t[2].nbytes, err);
    const size_t want = fp->t[1].nbytes - fp->short_by;
    for (size_t off = 0; st == MT_OK && off < want; off += fp->piece) {
        const size_t len = want - off < fp->piece ? want - off : fp->piece;
        st = st_writer_put(w, 1, (const char *)fp->t[1].data + off, len, err);
    }
    if (st == MT_OK && fp->twice)
        st = st_writer_put(w, 2, fp->t[2].data, 1, err); /* past its end */
    if (st == MT_OK && fp->fail)
        st = mt_fail(err, MT_EIO, "the fill failed");
    return st;
}

/* st_write_fill: tensors without data handed over while the file is
 * written, whole or in pieces, in any order, the file the same as
 * st_write's; a tensor not handed over whole, bytes past a tensor's end,
 * or a failing fill fail the write, naming the file, and leave nothing. */
START_TEST(st_write_fill_takes_data_as_it_is_made)
{
    char dir[64], path[128], whole[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    snprintf(whole, sizeof whole, "%s/whole.safetensors", dir);
    float a[3] = {1, 2, 3}, b[10];
    uint16_t c[4] = {1, 2, 3, 4};
    for (int i = 0; i < 10; i++)
        b[i] = (float)i * 0.5f;
    const st_tensor t[3] = {
        {.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = a, .nbytes = sizeof a},
        {.name = "b", .dtype = ST_F32, .ndim = 2, .shape = {2, 5}, .data = b, .nbytes = sizeof b},
        {.name = "c", .dtype = ST_BF16, .ndim = 1, .shape = {4}, .data = c, .nbytes = sizeof c}};
    st_tensor lazy[3] = {t[0], t[1], t[2]};
    lazy[1].data = lazy[2].data = NULL;
    mt_err err = {{0}};
    ck_assert_msg(st_write(whole, t, 3, NULL, &err) == MT_OK, "%s", err.msg);
    const size_t pieces[3] = {sizeof b, 7, 1};
    for (int k = 0; k < 3; k++) {
        fill_plan fp = {.t = t, .piece = pieces[k]};
        ck_assert_msg(st_write_fill(path, lazy, 3, NULL, test_fill, &fp, &err) == MT_OK, "%s",
                      err.msg);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, whole);
        ck_assert_msg(system(cmd) == 0, "pieces of %zu: not st_write's file", pieces[k]);
        ck_assert_int_eq(unlink(path), 0);
    }
    ck_assert_int_eq(unlink(whole), 0);
    const struct {
        fill_plan fp;
        mt_status want;
        const char *needle;
    } bad[3] = {{{.t = t, .piece = 8, .short_by = 4}, MT_EINVAL, "tensor 'b': 36 of its 40 bytes"},
                {{.t = t, .piece = 8, .twice = true}, MT_EINVAL, "tensor 'c': 1 bytes handed over"},
                {{.t = t, .piece = 8, .fail = true}, MT_EIO, "the fill failed"}};
    for (int k = 0; k < 3; k++) {
        fill_plan fp = bad[k].fp;
        ck_assert_int_eq(st_write_fill(path, lazy, 3, NULL, test_fill, &fp, &err), bad[k].want);
        ck_assert_msg(strstr(err.msg, bad[k].needle) && (k == 2 || strstr(err.msg, path)),
                      "message \"%s\"", err.msg);
        ck_assert_int_eq(dir_entries(dir), 0);
    }
    rm_tmpdir(dir);
}
END_TEST

/* Calls st_write with t and asserts it fails with want, names path and
 * needle, and leaves the directory empty. */
static void expect_write_reject(const char *dir, const st_tensor *t, size_t n,
                                const char *const *meta, mt_status want, const char *needle)
{
    char path[128];
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    mt_err err = {{0}};
    mt_status st = st_write(path, t, n, meta, &err);
    ck_assert_msg(st == want, "status '%s', want '%s': %s", mt_strerror(st), mt_strerror(want), err.msg);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message does not name the file: %s", err.msg);
    if (needle)
        ck_assert_msg(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    ck_assert_int_eq(dir_entries(dir), 0);
}

START_TEST(st_write_rejects_bad_inputs_and_leaves_no_file)
{
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    float d[6] = {0};
    st_tensor ok = {.name = "w", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = d, .nbytes = 24};

    st_tensor bad = ok;
    bad.nbytes = 20;
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "tensor 'w': nbytes is 20 but shape [2,3] x F32 is 24");

    st_tensor dup[2] = {ok, ok};
    expect_write_reject(dir, dup, 2, NULL, MT_EINVAL, "tensor 'w': duplicate");

    bad = ok;
    bad.shape[1] = -3;
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "tensor 'w'");

    bad = ok;
    bad.dtype = ST_DTYPE_COUNT;
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "tensor 'w'");

    bad = ok;
    bad.ndim = ST_MAX_DIMS + 1;
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "tensor 'w'");

    bad = ok;
    bad.data = NULL;
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "tensor 'w'");

    bad = ok;
    bad.name = "";
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "no name");

    bad = ok;
    bad.name = "__metadata__";
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "__metadata__");

    bad = ok;
    bad.name = "bad\xff";
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "UTF-8");

    bad = ok;
    bad.ndim = 3;
    bad.shape[0] = INT64_C(1) << 40;
    bad.shape[1] = INT64_C(1) << 40;
    bad.shape[2] = 1;
    expect_write_reject(dir, &bad, 1, NULL, MT_EINVAL, "overflows");

    const char *meta_noval[] = {"k", NULL, NULL};
    expect_write_reject(dir, &ok, 1, meta_noval, MT_EINVAL, "'k'");
    const char *meta_dup[] = {"k", "1", "k", "2", NULL};
    expect_write_reject(dir, &ok, 1, meta_dup, MT_EINVAL, "duplicate metadata key 'k'");

    /* A directory that does not exist: the error names the path. */
    char path[160];
    snprintf(path, sizeof path, "%s/missing/out.safetensors", dir);
    mt_err err = {{0}};
    ck_assert_int_eq(st_write(path, &ok, 1, NULL, &err), MT_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    ck_assert_int_eq(dir_entries(dir), 0);
    rm_tmpdir(dir);
}
END_TEST

/* ======================================================================
 * rejections
 * ====================================================================== */

#define ONE(name, dtype, shape, offs) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

START_TEST(st_rejects_file_shorter_than_8_bytes)
{
    for (size_t len = 0; len < 8; len++) {
        unsigned char *b = calloc(1, len ? len : 1);
        ck_assert_ptr_nonnull(b);
        expect_reject_buf(b, len, MT_EFORMAT, "too short", "short buffer");
        free(b);
    }
    /* Through st_open, empty and 3-byte files, named by path. */
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    static const unsigned char seven[7] = {2, 0, 0, 0, 0, 0, 0};
    for (size_t len = 0; len < 8; len += 3 + (len == 3)) { /* 0, 3, 7 bytes */
        write_file(path, seven, len);
        st_file *f = (st_file *)1;
        mt_err err = {{0}};
        ck_assert_int_eq(st_open(path, &f, &err), MT_EFORMAT);
        ck_assert_ptr_null(f);
        ck_assert_ptr_nonnull(strstr(err.msg, path));
        ck_assert_ptr_nonnull(strstr(err.msg, "too short"));
    }
    rm_tmpdir(dir);
}
END_TEST

START_TEST(st_open_reports_missing_and_unreadable_files)
{
    st_file *f = (st_file *)1;
    mt_err err = {{0}};
    ck_assert_int_eq(st_open("/nonexistent/x.safetensors", &f, &err), MT_ENOTFOUND);
    ck_assert_ptr_null(f);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/x.safetensors"));
    ck_assert_int_eq(st_open("/tmp", &f, &err), MT_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "/tmp: not a regular file"));
}
END_TEST

START_TEST(st_rejects_header_length_beyond_file)
{
    expect_reject_raw(100, "{}", 2, 0, MT_EFORMAT,
                      "header length 100 runs past the end of the file (10 bytes)", "N=100");
    /* One byte short. */
    expect_reject_raw(3, "{}", 2, 0, MT_EFORMAT, "runs past", "N=3");
}
END_TEST

START_TEST(st_rejects_header_length_over_100MB)
{
    expect_reject_raw(ST_MAX_HEADER + 1ull, "{}", 2, 0, MT_ELIMIT, "over the 104857600-byte limit",
                      "N=100MB+1");
    /* 8 + N would overflow u64: still a limit error, not a wrap-around. */
    expect_reject_raw(UINT64_MAX, "{}", 2, 0, MT_ELIMIT, "limit", "N=2^64-1");
}
END_TEST

START_TEST(st_rejects_header_not_json)
{
    expect_reject("{\"a\":", 0, MT_EFORMAT, "not valid JSON");
    expect_reject("{\"a\":{},}", 0, MT_EFORMAT, "tensor 'a': header is not valid JSON");
    expect_reject("{'a':1}", 0, MT_EFORMAT, "not valid JSON");
    expect_reject("{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1,
                  MT_EFORMAT, "tensor 'a'");
    expect_reject("{\"a\":\"x\x01y\"}", 0, MT_EFORMAT, "control character");
    expect_reject("{\"a\xff\":{}}", 0, MT_EFORMAT, "UTF-8");
    expect_reject("{\"a\xc0\xaf\":{}}", 0, MT_EFORMAT, "UTF-8");      /* overlong */
    expect_reject("{\"a\xed\xa0\x80\":{}}", 0, MT_EFORMAT, "UTF-8");  /* surrogate */
    expect_reject("{\"a\\u0000b\":{}}", 0, MT_EFORMAT, "\\u0000");
    expect_reject("{\"a\\ud800\":{}}", 0, MT_EFORMAT, "surrogate");
    expect_reject("{\"a\\q\":{}}", 0, MT_EFORMAT, "escape");
    expect_reject("{\"a\":tru}", 0, MT_EFORMAT, "tensor 'a'");
    /* Deep nesting is refused before cJSON sees it. */
    char deep[200] = "{\"a\":";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    for (int i = 0; i < 40; i++)
        strcat(deep, "]");
    strcat(deep, "}");
    expect_reject(deep, 0, MT_EFORMAT, "nested");
    /* The header is not NUL-terminated: a string running to its end. */
    size_t len;
    unsigned char *b = img_raw(7, "{\"a\":\"x", 7, 4, &len);
    memset(b + 15, '"', 4); /* the data area must not be read as header */
    expect_reject_buf(b, len, MT_EFORMAT, "unterminated string", "unterminated");
    free(b);
}
END_TEST

START_TEST(st_rejects_header_json_not_object)
{
    expect_reject("[]", 0, MT_EFORMAT, "header is not a JSON object");
    expect_reject("\"x\"", 0, MT_EFORMAT, "header is not a JSON object");
    expect_reject("123", 0, MT_EFORMAT, "header is not a JSON object");
    /* The format says the header MUST begin with '{'; the reference reader
     * lets leading whitespace through, we follow the format. */
    expect_reject(" {}", 0, MT_EFORMAT, "must begin with '{'");
    expect_reject("", 0, MT_EFORMAT, "header is not a JSON object");
}
END_TEST

START_TEST(st_rejects_trailing_garbage_after_json)
{
    expect_reject("{}x", 0, MT_EFORMAT, "1 trailing bytes");
    expect_reject("{}{}", 0, MT_EFORMAT, "trailing");
    expect_reject("{}  ,", 0, MT_EFORMAT, "trailing");
    /* NUL is not whitespace */
    expect_reject_raw(4, "{}\0 ", 4, 0, MT_EFORMAT, "trailing", "NUL after JSON");
}
END_TEST

START_TEST(st_rejects_unknown_dtype)
{
    expect_reject("{" ONE("w", "F4", "[1]", "[0,1]") "}", 1, MT_EFORMAT, "tensor 'w': unknown dtype 'F4'");
    expect_reject("{" ONE("w", "f32", "[1]", "[0,4]") "}", 4, MT_EFORMAT, "tensor 'w': unknown dtype 'f32'");
    expect_reject("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MT_EFORMAT,
                  "tensor 'w': dtype is 4, not a string");
}
END_TEST

START_TEST(st_rejects_bad_shape_dims)
{
    expect_reject("{" ONE("neg", "U8", "[-1]", "[0,1]") "}", 1, MT_EFORMAT,
                  "tensor 'neg': number -1 at header byte");
    expect_reject("{" ONE("frac", "U8", "[1.5]", "[0,1]") "}", 1, MT_EFORMAT,
                  "tensor 'frac': number 1.5");
    expect_reject("{" ONE("onept0", "U8", "[1.0]", "[0,1]") "}", 1, MT_EFORMAT,
                  "tensor 'onept0': number 1.0");
    expect_reject("{" ONE("exp", "U8", "[1e300]", "[0,1]") "}", 1, MT_EFORMAT, "tensor 'exp'");
    expect_reject("{" ONE("negz", "U8", "[-0]", "[0,0]") "}", 0, MT_EFORMAT, "tensor 'negz'");
    expect_reject("{" ONE("str", "U8", "[\"1\"]", "[0,1]") "}", 1, MT_EFORMAT,
                  "tensor 'str': shape[0] is a string");
    expect_reject("{\"obj\":{\"dtype\":\"U8\",\"shape\":{},\"data_offsets\":[0,1]}}", 1, MT_EFORMAT,
                  "tensor 'obj': shape is an object");
    /* 2^53 and beyond cannot be held exactly. */
    expect_reject("{" ONE("big", "U8", "[0,9007199254740993]", "[0,0]") "}", 0, MT_EFORMAT,
                  "tensor 'big': shape[1]");
    expect_reject("{" ONE("big", "U8", "[99999999999999999999]", "[0,0]") "}", 0, MT_EFORMAT,
                  "tensor 'big': shape[0] is 1e+20");
    /* Product overflowing u64 elements, then bytes. */
    expect_reject("{" ONE("huge", "F32", "[4294967296,4294967296,16]", "[0,4]") "}", 4, MT_EFORMAT,
                  "tensor 'huge': shape [4294967296,4294967296,16] has more elements than fit in 64 bits");
    expect_reject("{" ONE("huge", "F64", "[4294967296,536870912]", "[0,8]") "}", 8, MT_EFORMAT,
                  "tensor 'huge': shape [4294967296,536870912] x F64 is more bytes than fit in 64 bits");
}
END_TEST

START_TEST(st_rejects_too_many_dims)
{
    expect_reject("{" ONE("w", "U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]") "}", 1, MT_ELIMIT,
                  "tensor 'w': shape has 9 dims");
    /* 8 is fine. */
    unsigned char *buf;
    st_file *f = expect_accept("{" ONE("w", "U8", "[1,1,1,1,1,1,1,2]", "[0,2]") "}", 2, &buf);
    ck_assert_int_eq(st_get(f, 0)->ndim, 8);
    st_close(f);
    free(buf);
}
END_TEST

START_TEST(st_rejects_reversed_data_offsets)
{
    expect_reject("{" ONE("w", "U8", "[0]", "[8,0]") "}", 8, MT_EFORMAT,
                  "tensor 'w': data_offsets [8,0] are reversed");
    expect_reject("{" ONE("w", "U8", "[1]", "[0]") "}", 1, MT_EFORMAT, "tensor 'w': data_offsets is not");
    expect_reject("{" ONE("w", "U8", "[1]", "[0,1,2]") "}", 1, MT_EFORMAT, "tensor 'w': data_offsets is not");
    expect_reject("{" ONE("w", "U8", "[1]", "[-1,0]") "}", 1, MT_EFORMAT, "tensor 'w': number -1");
    expect_reject("{" ONE("w", "U8", "[1]", "[0,null]") "}", 1, MT_EFORMAT,
                  "tensor 'w': data_offsets end is null");
}
END_TEST

START_TEST(st_rejects_data_offsets_beyond_file)
{
    expect_reject("{" ONE("w", "U8", "[16]", "[0,16]") "}", 8, MT_EFORMAT,
                  "tensor 'w': data_offsets [0,16] end past the data area (8 bytes)");
    expect_reject("{" ONE("w", "U8", "[0]", "[4503599627370496,4503599627370496]") "}", 0,
                  MT_EFORMAT, "tensor 'w': data_offsets [4503599627370496,4503599627370496] end past");
}
END_TEST

START_TEST(st_rejects_overlapping_ranges)
{
    expect_reject("{" ONE("a", "U8", "[8]", "[0,8]") "," ONE("b", "U8", "[8]", "[4,12]") "}", 12,
                  MT_EFORMAT, "tensor 'b': data_offsets [4,12] overlap tensor 'a' [0,8]");
    /* Two tensors on the same bytes. */
    expect_reject("{" ONE("a", "U8", "[8]", "[0,8]") "," ONE("b", "U8", "[8]", "[0,8]") "}", 8,
                  MT_EFORMAT, "overlap tensor");
    /* A zero-size tensor inside another's range. */
    expect_reject("{" ONE("a", "U8", "[8]", "[0,8]") "," ONE("z", "U8", "[0]", "[4,4]") "}", 8,
                  MT_EFORMAT, "tensor 'z': data_offsets [4,4] overlap tensor 'a'");
}
END_TEST

START_TEST(st_rejects_gap_between_ranges)
{
    expect_reject("{" ONE("a", "U8", "[4]", "[0,4]") "," ONE("b", "U8", "[4]", "[8,12]") "}", 12,
                  MT_EFORMAT, "tensor 'b': data_offsets begin at 8, leaving a gap of 4 bytes after tensor 'a'");
    expect_reject("{" ONE("a", "U8", "[4]", "[4,8]") "}", 8, MT_EFORMAT,
                  "tensor 'a': data_offsets begin at 4, leaving a gap at the start");
    /* Bytes after the last tensor. */
    expect_reject("{" ONE("a", "U8", "[4]", "[0,4]") "}", 12, MT_EFORMAT,
                  "(last is 'a') but the data area is 12 bytes: 8 bytes not covered");
    expect_reject("{}", 3, MT_EFORMAT, "no tensors but the data area is 3 bytes");
}
END_TEST

START_TEST(st_rejects_size_mismatch_shape_vs_range)
{
    expect_reject("{" ONE("encoder.layer.0.attention.self.query.weight", "F32", "[384,384]", "[0,589820]") "}",
                  589820, MT_EFORMAT,
                  "bad.safetensors: tensor 'encoder.layer.0.attention.self.query.weight': "
                  "shape [384,384] x F32 is 589824 bytes but data_offsets span 589820");
    expect_reject("{" ONE("s", "F16", "[]", "[0,4]") "}", 4, MT_EFORMAT,
                  "tensor 's': shape [] x F16 is 2 bytes but data_offsets span 4");
}
END_TEST

START_TEST(st_rejects_duplicate_tensor_names)
{
    expect_reject("{" ONE("w", "U8", "[4]", "[0,4]") "," ONE("w", "U8", "[4]", "[4,8]") "}", 8,
                  MT_EFORMAT, "tensor 'w': duplicate tensor name");
    expect_reject("{\"__metadata__\":{},\"__metadata__\":{}}", 0, MT_EFORMAT, "duplicate __metadata__");
    expect_reject("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, MT_EFORMAT,
                  "__metadata__ has duplicate key 'k'");
    expect_reject("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                  MT_EFORMAT, "tensor 'w': duplicate field 'dtype'");
}
END_TEST

START_TEST(st_rejects_empty_tensor_name)
{
    expect_reject("{" ONE("", "U8", "[1]", "[0,1]") "}", 1, MT_EFORMAT, "tensor with an empty name");
}
END_TEST

START_TEST(st_messages_show_names_safely)
{
    /* Control bytes from a name become '?', long names are cut. */
    expect_reject("{" ONE("a\\u001b[31mred\\n", "F4", "[1]", "[0,1]") "}", 1, MT_EFORMAT,
                  "tensor 'a?[31mred?': unknown dtype 'F4'");
    char hdr[1200], name[601];
    memset(name, 'n', 600);
    name[600] = 0;
    snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
    expect_reject(hdr, 1, MT_EFORMAT, "nnn...': unknown dtype 'F4'");
}
END_TEST

START_TEST(st_rejects_metadata_non_string_value)
{
    expect_reject("{\"__metadata__\":{\"format\":1}}", 0, MT_EFORMAT,
                  "__metadata__ 'format' is 1, not a string");
    expect_reject("{\"__metadata__\":{\"format\":-1.5}}", 0, MT_EFORMAT,
                  "bad.safetensors: __metadata__: number -1.5 at header byte 26 is not");
    expect_reject("{\"__metadata__\":{\"format\":[\"pt\"]}}", 0, MT_EFORMAT,
                  "__metadata__ 'format' is an array, not a string");
    expect_reject("{\"__metadata__\":{\"format\":null}}", 0, MT_EFORMAT, "__metadata__ 'format' is null");
    expect_reject("{\"__metadata__\":{\"bad\\u0007key\":2}}", 0, MT_EFORMAT, "__metadata__ 'bad?key' is 2");
    expect_reject("{\"__metadata__\":\"pt\"}", 0, MT_EFORMAT, "__metadata__ is a string, not an object");
}
END_TEST

START_TEST(st_rejects_missing_fields)
{
    expect_reject("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, MT_EFORMAT, "tensor 'w': missing 'dtype'");
    expect_reject("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, MT_EFORMAT, "tensor 'w': missing 'shape'");
    expect_reject("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, MT_EFORMAT, "tensor 'w': missing 'data_offsets'");
    expect_reject("{\"w\":[]}", 0, MT_EFORMAT, "tensor 'w': entry is an array, not an object");
}
END_TEST

START_TEST(st_rejects_extra_fields)
{
    expect_reject("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":\"x\"}}", 1,
                  MT_EFORMAT, "tensor 'w': unexpected field 'extra'");
}
END_TEST

/* ======================================================================
 * fuzz
 * ====================================================================== */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Parses an exactly sized copy of b[0..len); on success, every tensor must
 * lie inside the buffer and be findable by name. Returns 1 when accepted. */
static int fuzz_one(const unsigned char *b, size_t len)
{
    unsigned char *copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, b, len);
    st_file *f = NULL;
    mt_err err = {{0}};
    mt_status st = st_parse(copy, len, "fuzz", &f, &err);
    int ok = st == MT_OK;
    if (ok) {
        unsigned sum = 0;
        for (size_t i = 0; i < st_count(f); i++) {
            const st_tensor *t = st_get(f, i);
            const unsigned char *d = t->data;
            ck_assert(d >= copy + 8 && d + t->nbytes <= copy + len);
            for (size_t k = 0; k < t->nbytes; k++)
                sum += d[k];
            ck_assert_ptr_eq(st_find(f, t->name), t);
        }
        (void)st_meta(f, "format");
        (void)sum;
        st_close(f);
    } else {
        ck_assert_ptr_null(f);
        ck_assert_msg(strncmp(err.msg, "fuzz: ", 6) == 0, "unnamed error: %s", err.msg);
    }
    free(copy);
    return ok;
}

START_TEST(st_parse_survives_truncation_and_mutation)
{
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\",\"k\\n\":\"v\\u00e9\"},"
                      ONE("a", "F32", "[2,2]", "[0,16]") "," ONE("b", "F8_E4M3", "[3]", "[16,19]") ","
                      ONE("c", "I64", "[]", "[19,27]") "," ONE("z", "U8", "[0,2]", "[27,27]") "}  ";
    size_t len;
    unsigned char *base = img(hdr, 27, &len);
    for (size_t i = 0; i < 27; i++)
        base[len - 27 + i] = (unsigned char)(i * 37);
    ck_assert_int_eq(fuzz_one(base, len), 1);

    int accepted = 0;
    for (size_t cut = 0; cut <= len; cut++)
        accepted += fuzz_one(base, cut);
    ck_assert_int_eq(accepted, 1); /* only the whole file */

    static const char syntax[] = "0123456789-.,:[]{}\"eE \\u";
    unsigned char *m = malloc(len);
    ck_assert_ptr_nonnull(m);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    accepted = 0;
    for (int iter = 0; iter < 6000; iter++) {
        memcpy(m, base, len);
        size_t mlen = len;
        int edits = 1 + (int)(rng_next(&seed) % 4);
        for (int e = 0; e < edits; e++) {
            uint64_t r = rng_next(&seed);
            size_t at = (size_t)(r >> 8) % mlen;
            switch (r % 5) {
            case 0: m[at] = (unsigned char)(r >> 40); break;           /* any byte */
            case 1: m[at] ^= (unsigned char)(1u << ((r >> 32) % 8)); break; /* one bit */
            case 2: case 3: /* a JSON-significant byte inside the header */
                at = 8 + (size_t)(r >> 8) % strlen(hdr);
                m[at] = (unsigned char)syntax[(r >> 40) % (sizeof syntax - 1)];
                break;
            default: /* the length field, small values */
                m[(r >> 8) % 2] = (unsigned char)(r >> 40);
                break;
            }
        }
        if (rng_next(&seed) % 8 == 0)
            mlen = (size_t)(rng_next(&seed) % (len + 1));
        accepted += fuzz_one(m, mlen);
    }
    ck_assert_int_gt(accepted, 0); /* mutations of the data area stay valid */
    free(m);
    free(base);
}
END_TEST

/* ======================================================================
 * runner
 * ====================================================================== */

static Suite *st_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *rd = tcase_create("read");
    tcase_add_test(rd, st_reads_real_model);
    tcase_add_test(rd, st_drop_pages_releases_what_was_read_and_keeps_the_data);
    tcase_add_test(rd, st_accepts_edge_cases);
    tcase_add_test(rd, st_dtype_table_round_trips);
    tcase_add_test(rd, st_open_reports_missing_and_unreadable_files);
    suite_add_tcase(s, rd);

    TCase *wr = tcase_create("write");
    tcase_add_test(wr, st_write_then_read_round_trips);
    tcase_add_test(wr, st_write_rejects_bad_inputs_and_leaves_no_file);
    tcase_add_test(wr, st_write_fill_takes_data_as_it_is_made);
    suite_add_tcase(s, wr);

    TCase *rj = tcase_create("reject");
    tcase_add_test(rj, st_rejects_file_shorter_than_8_bytes);
    tcase_add_test(rj, st_rejects_header_length_beyond_file);
    tcase_add_test(rj, st_rejects_header_length_over_100MB);
    tcase_add_test(rj, st_rejects_header_not_json);
    tcase_add_test(rj, st_rejects_header_json_not_object);
    tcase_add_test(rj, st_rejects_trailing_garbage_after_json);
    tcase_add_test(rj, st_rejects_unknown_dtype);
    tcase_add_test(rj, st_rejects_bad_shape_dims);
    tcase_add_test(rj, st_rejects_too_many_dims);
    tcase_add_test(rj, st_rejects_reversed_data_offsets);
    tcase_add_test(rj, st_rejects_data_offsets_beyond_file);
    tcase_add_test(rj, st_rejects_overlapping_ranges);
    tcase_add_test(rj, st_rejects_gap_between_ranges);
    tcase_add_test(rj, st_rejects_size_mismatch_shape_vs_range);
    tcase_add_test(rj, st_rejects_duplicate_tensor_names);
    tcase_add_test(rj, st_rejects_empty_tensor_name);
    tcase_add_test(rj, st_messages_show_names_safely);
    tcase_add_test(rj, st_rejects_metadata_non_string_value);
    tcase_add_test(rj, st_rejects_missing_fields);
    tcase_add_test(rj, st_rejects_extra_fields);
    suite_add_tcase(s, rj);

    TCase *fz = tcase_create("fuzz");
    tcase_set_timeout(fz, 120);
    tcase_add_test(fz, st_parse_survives_truncation_and_mutation);
    suite_add_tcase(s, fz);
    return s;
}

static Suite *test_suite(void)
{
    return st_suite();
}

#include "tests/unit/check_main.h"
