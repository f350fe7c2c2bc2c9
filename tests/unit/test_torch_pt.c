/* test_torch_pt.c: check suite for the PyTorch checkpoint reader
 * (engine/weights/torch_pt.c, pt_zip.c, pt_pickle.c, pt_unpickle.c) through
 * st_open / st_parse.
 *
 * Reads the files real torch.save wrote (tests/fixtures/torch/, made by
 * tools/make-torch-fixtures.py): every dtype, 0-dim and empty tensors, an
 * FP16 Linear state dict as bge-m3's heads are saved, views and tied
 * tensors on one storage, a Parameter, pickle protocol 4, the dtypes torch
 * saves with _rebuild_tensor_v3, ZIP64 records with unaligned data, a
 * sharded pytorch_model.bin folder; each value is recomputed here from the
 * formula the script used. Then what must be refused: a non-contiguous
 * tensor, a nested state dict, the legacy format, and hostile images made
 * here by editing a good file's bytes (truncations, the central directory
 * out of range, a compressed entry, a forbidden global, a storage without
 * its entry, a tensor past its storage, big-endian byteorder) or by
 * assembling pickles by hand into a small zip (bad and refused opcodes,
 * deep MARK nesting, every limit and type check of the unpickler); each
 * must fail with the status and a message naming the problem. Last, a
 * seeded mutation loop over the fixtures, meant for ASan too.
 */
#include "engine/weights/safetensors.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX "tests/fixtures/torch/"
#define LABEL "bad.pt"

/* ======================================================================
 * helpers
 * ====================================================================== */

/* The file's bytes in an exactly sized buffer (so ASan sees any over-read). */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "%s: cannot open", path);
    ck_assert_int_eq(fseek(fp, 0, SEEK_END), 0);
    long n = ftell(fp);
    ck_assert_int_ge(n, 0);
    rewind(fp);
    unsigned char *b = malloc(n ? (size_t)n : 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return b;
}

static st_file *open_ok(const char *path)
{
    st_file *f = NULL;
    mt_err err = {{0}};
    ck_assert_msg(st_open(path, &f, &err) == MT_OK, "%s: %s", path, err.msg);
    return f;
}

static const st_tensor *get(const st_file *f, const char *name, st_dtype dt, int ndim, ...)
{
    const st_tensor *t = st_find(f, name);
    ck_assert_msg(t != NULL, "tensor '%s' missing", name);
    ck_assert_msg(t->dtype == dt, "%s: dtype %s, want %s", name, st_dtype_name(t->dtype),
                  st_dtype_name(dt));
    ck_assert_int_eq(t->ndim, ndim);
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++)
        ck_assert_int_eq(t->shape[i], va_arg(ap, int));
    va_end(ap);
    ck_assert_uint_eq(t->nbytes, (size_t)st_numel(t) * st_dtype_size(dt));
    ck_assert_msg((uintptr_t)t->data % st_dtype_size(dt) == 0, "%s: unaligned data", name);
    return t;
}

/* IEEE half to float, written here (not engine/numfmt.c). */
static float half(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

static float bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Element i of a float tensor of any float dtype, as a double. */
static double elem(const st_tensor *t, size_t i)
{
    const unsigned char *p = (const unsigned char *)t->data + i * st_dtype_size(t->dtype);
    uint16_t h;
    float f;
    double d;
    switch (t->dtype) {
    case ST_F16: memcpy(&h, p, 2); return half(h);
    case ST_BF16: memcpy(&h, p, 2); return bf16(h);
    case ST_F32: memcpy(&f, p, 4); return f;
    case ST_F64: memcpy(&d, p, 8); return d;
    default: ck_abort_msg("not a float tensor"); return 0;
    }
}

/* Every element is a + b*i, computed as the script did (in double, then
 * exact in the dtype). */
static void expect_ramp(const st_tensor *t, double a, double b)
{
    for (int64_t i = 0; i < st_numel(t); i++) {
        double want = (double)i * b + a;
        if (t->dtype == ST_F32)
            want = (float)want;
        ck_assert_msg(elem(t, (size_t)i) == want, "%s[%lld] = %.17g, want %.17g", t->name,
                      (long long)i, elem(t, (size_t)i), want);
    }
}

/* Parses buf and asserts status want and a message naming LABEL and
 * holding needle. */
static void expect_reject(const unsigned char *buf, size_t len, mt_status want,
                          const char *needle, const char *what)
{
    st_file *f = (st_file *)1;
    mt_err err = {{0}};
    mt_status st = st_parse(buf, len, LABEL, &f, &err);
    ck_assert_msg(st == want, "%s: status '%s', want '%s' (message: %s)", what, mt_strerror(st),
                  mt_strerror(want), err.msg);
    ck_assert_msg(f == NULL, "%s: out not cleared on failure", what);
    ck_assert_msg(!strncmp(err.msg, LABEL ": ", strlen(LABEL) + 2),
                  "%s: message does not name the file: %s", what, err.msg);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, err.msg,
                  needle);
}

/* Where pat (n bytes) is in buf; it must be there exactly once. */
static size_t find_once(const unsigned char *buf, size_t len, const void *pat, size_t n)
{
    const unsigned char *hit = memmem(buf, len, pat, n);
    ck_assert_msg(hit != NULL, "pattern not found");
    ck_assert_msg(!memmem(hit + 1, len - (size_t)(hit - buf) - 1, pat, n), "pattern twice");
    return (size_t)(hit - buf);
}

/* The last place of pat in buf. */
static size_t find_last(const unsigned char *buf, size_t len, const void *pat, size_t n)
{
    for (size_t i = len - n + 1; i-- > 0;)
        if (!memcmp(buf + i, pat, n))
            return i;
    ck_abort_msg("pattern not found");
    return 0;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* ---- a zip writer (stored entries, data 64-byte aligned as torch's) ------ */

typedef struct {
    unsigned char *b;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->b = realloc(b->b, b->cap);
        ck_assert_ptr_nonnull(b->b);
    }
    if (n)
        memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put_n(bytes *b, uint64_t v, int n)
{
    unsigned char t[8];
    put_le(t, v, n);
    put(b, t, (size_t)n);
}

typedef struct {
    const char *name;
    const void *data;
    size_t len;
} zent;

/* A zip image of the entries, no ZIP64, exactly sized (malloc'd). */
static unsigned char *zip_build(const zent *e, size_t n, size_t *len)
{
    bytes b = {0}, cd = {0};
    for (size_t i = 0; i < n; i++) {
        const size_t nl = strlen(e[i].name), off = b.n;
        const size_t pad = (64 - (b.n + 30 + nl + 4) % 64) % 64;
        put_n(&b, 0x04034b50, 4), put_n(&b, 20, 2), put_n(&b, 0, 2), put_n(&b, 0, 2);
        put_n(&b, 0, 4), put_n(&b, 0, 4); /* time, date; crc */
        put_n(&b, e[i].len, 4), put_n(&b, e[i].len, 4), put_n(&b, nl, 2), put_n(&b, 4 + pad, 2);
        put(&b, e[i].name, nl), put_n(&b, 0x4246, 2), put_n(&b, pad, 2);
        for (size_t k = 0; k < pad; k++)
            put(&b, "Z", 1);
        put(&b, e[i].data, e[i].len);
        put_n(&cd, 0x02014b50, 4), put_n(&cd, 20, 2), put_n(&cd, 20, 2), put_n(&cd, 0, 4);
        put_n(&cd, 0, 4), put_n(&cd, 0, 4), put_n(&cd, e[i].len, 4), put_n(&cd, e[i].len, 4);
        put_n(&cd, nl, 2), put_n(&cd, 0, 4), put_n(&cd, 0, 4), put_n(&cd, 0, 4);
        put_n(&cd, off, 4), put(&cd, e[i].name, nl);
    }
    const size_t cd_off = b.n;
    put(&b, cd.b, cd.n);
    put_n(&b, 0x06054b50, 4), put_n(&b, 0, 4), put_n(&b, n, 2), put_n(&b, n, 2);
    put_n(&b, cd.n, 4), put_n(&b, cd_off, 4), put_n(&b, 0, 2);
    free(cd.b);
    unsigned char *out = malloc(b.n);
    ck_assert_ptr_nonnull(out);
    memcpy(out, b.b, b.n);
    free(b.b);
    *len = b.n;
    return out;
}

/* 4 floats, 1.5 + i, for the hand-made archives' storage "0". */
static const float four[4] = {1.5f, 2.5f, 3.5f, 4.5f};

/* An archive t/ with the pickle (n bytes) as data.pkl and storage 0. */
static unsigned char *pickle_zip(const void *pkl, size_t n, size_t *len)
{
    const zent e[] = {{"t/data.pkl", pkl, n}, {"t/byteorder", "little", 6},
                      {"t/data/0", four, sizeof four}, {"t/version", "3\n", 2}};
    return zip_build(e, 4, len);
}

/* ======================================================================
 * reading what torch.save wrote
 * ====================================================================== */

/* dtypes.pt and zip64_unaligned.pt hold the same tensors. */
static void check_dtypes(const st_file *f)
{
    ck_assert_uint_eq(st_count(f), 12);
    expect_ramp(get(f, "f32", ST_F32, 2, 2, 3), -1.0, 0.5);
    expect_ramp(get(f, "f16", ST_F16, 1, 5), -2.0, 0.75);
    expect_ramp(get(f, "bf16", ST_BF16, 2, 2, 2), 1.0, -0.5);
    expect_ramp(get(f, "f64", ST_F64, 1, 3), 0.1, 0.2);
    const int64_t *i64 = get(f, "i64", ST_I64, 1, 4)->data;
    const int32_t *i32 = get(f, "i32", ST_I32, 1, 3)->data;
    const int16_t *i16 = get(f, "i16", ST_I16, 1, 3)->data;
    const int8_t *i8 = get(f, "i8", ST_I8, 1, 5)->data;
    const uint8_t *u8 = get(f, "u8", ST_U8, 1, 4)->data;
    const uint8_t *b = get(f, "bool", ST_BOOL, 1, 5)->data;
    for (int i = 0; i < 5; i++) {
        if (i < 4)
            ck_assert_int_eq(i64[i], (i - 2) * 3000000000LL);
        if (i < 3)
            ck_assert_int_eq(i32[i], i * 100000 - 7);
        if (i < 3)
            ck_assert_int_eq(i16[i], i * 300 - 500);
        ck_assert_int_eq(i8[i], i * 50 - 100);
        if (i < 4)
            ck_assert_uint_eq(u8[i], (unsigned)(i * 60 + 10));
        ck_assert_uint_eq(b[i], i % 3 == 0);
    }
    const st_tensor *s = get(f, "scalar", ST_F32, 0);
    ck_assert_int_eq(st_numel(s), 1);
    ck_assert(elem(s, 0) == 3.5);
    const st_tensor *e = get(f, "empty", ST_F32, 2, 0, 4);
    ck_assert_uint_eq(e->nbytes, 0);
    ck_assert_ptr_null(st_meta(f, "format"));
    ck_assert_ptr_null(st_find(f, "missing"));
    for (size_t i = 0; i < st_count(f); i++)
        ck_assert_ptr_eq(st_find(f, st_get(f, i)->name), st_get(f, i));
    ck_assert_ptr_null(st_get(f, st_count(f)));
}

START_TEST(pt_reads_every_dtype)
{
    st_file *f = open_ok(FIX "dtypes.pt");
    ck_assert_str_eq(st_path(f), FIX "dtypes.pt");
    check_dtypes(f);
    /* in file order: the entries are data/0..11 in insertion order */
    const char *order[] = {"f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "bool",
                           "scalar", "empty"};
    for (size_t i = 0; i < 12; i++)
        ck_assert_str_eq(st_get(f, i)->name, order[i]);
    st_close(f);
}
END_TEST

START_TEST(pt_reads_the_v3_dtypes)
{
    st_file *f = open_ok(FIX "v3_dtypes.pt");
    ck_assert_uint_eq(st_count(f), 5);
    static const unsigned char e4[] = {0xc0, 0xb8, 0x00, 0x30, 0x3c};
    static const unsigned char e5[] = {0xc0, 0xbc, 0x00, 0x38, 0x3e};
    ck_assert_mem_eq(get(f, "e4m3", ST_F8_E4M3, 1, 5)->data, e4, 5);
    ck_assert_mem_eq(get(f, "e5m2", ST_F8_E5M2, 1, 5)->data, e5, 5);
    const uint16_t *u16 = get(f, "u16", ST_U16, 1, 3)->data;
    const uint32_t *u32 = get(f, "u32", ST_U32, 1, 3)->data;
    const uint64_t *u64 = get(f, "u64", ST_U64, 1, 3)->data;
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_uint_eq(u16[i], i * 20000 + 7);
        ck_assert_uint_eq(u32[i], i * 1000000000u + 5);
        ck_assert_uint_eq(u64[i], ((uint64_t)i << 62) + 9);
    }
    st_close(f);
}
END_TEST

/* bge-m3's sparse_linear.pt / colbert_linear.pt shape: a Linear's FP16
 * state dict (OrderedDict with _metadata). */
START_TEST(pt_reads_an_fp16_linear_state_dict)
{
    st_file *f = open_ok(FIX "linear_fp16.pt");
    ck_assert_uint_eq(st_count(f), 2);
    expect_ramp(get(f, "weight", ST_F16, 2, 8, 16), -4.0, 0.0625);
    expect_ramp(get(f, "bias", ST_F16, 1, 8), -2.0, 0.5);
    ck_assert_str_eq(st_get(f, 0)->name, "weight");
    /* the mapping stays readable after its pages are dropped */
    const st_tensor *w = st_find(f, "weight");
    st_drop_pages(f);
    expect_ramp(w, -4.0, 0.0625);
    st_close(f);
}
END_TEST

START_TEST(pt_reads_views_tied_tensors_and_a_parameter)
{
    st_file *f = open_ok(FIX "shared.pt");
    ck_assert_uint_eq(st_count(f), 8);
    const st_tensor *base = get(f, "base", ST_F32, 1, 12);
    expect_ramp(base, -3.0, 1.5);
    const float *b = base->data;
    const st_tensor *tail = get(f, "tail", ST_F32, 1, 10);
    ck_assert_ptr_eq(tail->data, b + 2);
    expect_ramp(tail, 0.0, 1.5);
    const st_tensor *grid = get(f, "grid", ST_F32, 2, 2, 3);
    ck_assert_ptr_eq(grid->data, b + 4);
    expect_ramp(grid, 3.0, 1.5);
    const st_tensor *row = get(f, "one_row", ST_F32, 2, 1, 4); /* stride (4, 1) */
    ck_assert_ptr_eq(row->data, b + 4);
    const st_tensor *sv = get(f, "scalar_view", ST_F32, 0);
    ck_assert_ptr_eq(sv->data, b + 5);
    ck_assert(elem(sv, 0) == 4.5);
    ck_assert_ptr_eq(get(f, "tied_a", ST_F32, 1, 12)->data, b);
    ck_assert_ptr_eq(get(f, "tied_b", ST_F32, 1, 12)->data, b);
    expect_ramp(get(f, "param", ST_F32, 2, 2, 2), 0.25, 1.0);
    /* st_get by start in the file, then size, then name */
    for (size_t i = 1; i < st_count(f); i++) {
        const st_tensor *p = st_get(f, i - 1), *q = st_get(f, i);
        ck_assert((const char *)p->data <= (const char *)q->data);
    }
    st_close(f);
}
END_TEST

START_TEST(pt_reads_pickle_protocol_4)
{
    st_file *f = open_ok(FIX "proto4.pt");
    ck_assert_uint_eq(st_count(f), 2);
    expect_ramp(get(f, "weight", ST_F32, 2, 2, 3), -1.0, 0.25);
    expect_ramp(get(f, "bias", ST_F32, 1, 2), 0.5, -1.0);
    st_close(f);
}
END_TEST

/* ZIP64 records and extra fields everywhere, top folder "archive", no
 * byteorder, data at odd offsets: the multi-byte tensors are copied
 * (aligned), the 1-byte ones point into the image. */
START_TEST(pt_reads_zip64_and_copies_unaligned_tensors)
{
    size_t len;
    unsigned char *img = slurp(FIX "zip64_unaligned.pt", &len);
    st_file *f = NULL;
    mt_err err = {{0}};
    ck_assert_msg(st_parse(img, len, "z.pt", &f, &err) == MT_OK, "%s", err.msg);
    check_dtypes(f);
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_get(f, i);
        const unsigned char *d = t->data;
        bool inside = d >= img && d < img + len;
        if (t->nbytes && st_dtype_size(t->dtype) > 1)
            ck_assert_msg(!inside, "%s: unaligned in the file, not copied", t->name);
        else if (t->nbytes)
            ck_assert_msg(inside && (d - img) % 8 == 1, "%s: copied or misplaced", t->name);
    }
    st_close(f);
    free(img);
    st_close(open_ok(FIX "zip64_unaligned.pt")); /* and through the mapping */
}
END_TEST

START_TEST(pt_reads_a_sharded_pytorch_model_bin_folder)
{
    char path[256];
    st_model_path(FIX "sharded", path, sizeof path);
    ck_assert_str_eq(path, FIX "sharded/pytorch_model.bin.index.json");
    st_file *f = open_ok(path);
    ck_assert_uint_eq(st_count(f), 4);
    expect_ramp(get(f, "embeddings.weight", ST_F32, 2, 4, 3), 0.5, 0.25);
    expect_ramp(get(f, "layer.0.weight", ST_F32, 2, 3, 3), -1.0, 0.125);
    expect_ramp(get(f, "layer.0.bias", ST_F32, 1, 3), 2.0, -1.0);
    expect_ramp(get(f, "head.weight", ST_F16, 2, 2, 3), -0.5, 0.25);
    ck_assert_ptr_null(st_meta(f, "format"));
    st_drop_pages(f);
    st_close(f);
}
END_TEST

/* st_model_path: the first of the four names the folder has. */
START_TEST(pt_model_path_falls_back_in_transformers_order)
{
    static const char *const names[] = {"model.safetensors", "model.safetensors.index.json",
                                        "pytorch_model.bin", "pytorch_model.bin.index.json"};
    char dir[64], p[256], want[256];
    snprintf(dir, sizeof dir, "/tmp/pt_test_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    st_model_path(dir, p, sizeof p);
    snprintf(want, sizeof want, "%s/model.safetensors", dir); /* none: named for the message */
    ck_assert_str_eq(p, want);
    for (int first = 3; first >= 0; first--) { /* add them last to first */
        snprintf(p, sizeof p, "%s/%s", dir, names[first]);
        FILE *fp = fopen(p, "w");
        ck_assert_ptr_nonnull(fp);
        fclose(fp);
        st_model_path(dir, p, sizeof p);
        snprintf(want, sizeof want, "%s/%s", dir, names[first]);
        ck_assert_str_eq(p, want);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}
END_TEST

/* ======================================================================
 * refused files
 * ====================================================================== */

static void expect_file_refused(const char *name, const char *n1, const char *n2)
{
    st_file *f = (st_file *)1;
    mt_err err = {{0}};
    char path[256];
    snprintf(path, sizeof path, FIX "%s", name);
    ck_assert_int_eq(st_open(path, &f, &err), MT_EFORMAT);
    ck_assert_ptr_null(f);
    ck_assert_msg(!strncmp(err.msg, path, strlen(path)), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, n1) && strstr(err.msg, n2), "'%s' lacks '%s' or '%s'",
                  err.msg, n1, n2);
}

START_TEST(pt_refuses_non_contiguous_nested_and_legacy_files)
{
    expect_file_refused("noncontig.pt", "tensor 'wt'", "not contiguous");
    expect_file_refused("nested.pt", "key 'state_dict'", "nested state dict");
    expect_file_refused("legacy.pt", "legacy format", "torch >= 1.6");
}
END_TEST

/* Every prefix of a good file is refused, with a message naming it. */
START_TEST(pt_refuses_truncated_files)
{
    size_t len;
    unsigned char *img = slurp(FIX "linear_fp16.pt", &len);
    for (size_t cut = 0; cut < len; cut++) {
        unsigned char *c = malloc(cut ? cut : 1);
        ck_assert_ptr_nonnull(c);
        memcpy(c, img, cut);
        st_file *f = NULL;
        mt_err err = {{0}};
        mt_status st = st_parse(c, cut, LABEL, &f, &err);
        ck_assert_msg(st == MT_EFORMAT, "cut at %zu: %s (%s)", cut, mt_strerror(st), err.msg);
        ck_assert_msg(!strncmp(err.msg, LABEL ": ", 8), "cut at %zu: %s", cut, err.msg);
        free(c);
    }
    /* the last byte gone: the end record's comment no longer fits */
    expect_reject(img, len - 1, MT_EFORMAT, "no end of central directory record", "cut by 1");
    free(img);
}
END_TEST

START_TEST(pt_refuses_a_central_directory_out_of_range)
{
    size_t len;
    unsigned char *img = slurp(FIX "linear_fp16.pt", &len);
    /* torch writes ZIP64 records: the directory's offset is in that one */
    size_t z64 = find_last(img, len, "PK\6\6", 4);
    put_le(img + z64 + 48, len, 8);
    expect_reject(img, len, MT_EFORMAT, "central directory", "ZIP64 offset past the end");
    put_le(img + z64 + 48, UINT64_MAX - 3, 8);
    expect_reject(img, len, MT_EFORMAT, "out of range", "ZIP64 offset overflowing");
    free(img);
    /* a plain zip: the end record's */
    size_t n;
    unsigned char *z = pickle_zip("\x80\x02}.", 4, &n);
    size_t eocd = find_last(z, n, "PK\5\6", 4);
    put_le(z + eocd + 16, n - 10, 4);
    expect_reject(z, n, MT_EFORMAT, "out of range", "plain offset past the end");
    put_le(z + eocd + 16, 0, 4);
    put_le(z + eocd + 12, 0xFFFFFFF0u, 4);
    expect_reject(z, n, MT_EFORMAT, "out of range", "plain size past the end");
    free(z);
}
END_TEST

/* Edits of linear_fp16.pt, each refused with a message naming it: at the
 * only place of pat (first: its first place), put written at offset at. */
typedef struct {
    const char *what, *pat;
    size_t npat;
    bool first;
    size_t at;
    const char *put;
    size_t nput;
    const char *needle;
} ed_case;
#define ED(w, pat, first, at, put, needle) \
    {w, pat, sizeof(pat) - 1, first, at, put, sizeof(put) - 1, needle}

static const ed_case ed_cases[] = {
    /* the first central directory entry's method: deflate */
    ED("compressed data.pkl", "PK\1\2", true, 10, "\x08\0",
       "entry 'linear_fp16/data.pkl' is compressed (method 8)"),
    ED("subprocess.check_output", "collections\nOrderedDict\n", false, 0,
       "subprocess\ncheck_output\n", /* same length */
       "linear_fp16/data.pkl: at byte 2, GLOBAL: global subprocess.check_output is not allowed"),
    /* bias's storage key '1' */
    ED("key 7", "X\1\0\0\0" "1", false, 5, "7",
       "tensor 'bias': its storage '7' has no entry 'linear_fp16/data/7'"),
    /* bias: storage offset 0, size (8,) -> (9,), then offset 1 */
    ED("size 9", "K\0K\x08\x85", false, 3, "\x09",
       "tensor 'bias': 9 elements of F16 from offset 0 run past its storage '1' (16 bytes)"),
    ED("offset 1", "K\0K\x08\x85", false, 1, "\x01", "run past its storage"),
    ED("byteorder", "little", false, 0, "bigend",
       "linear_fp16/byteorder says 'bigend': only little-endian"),
};

START_TEST(pt_refuses_edited_files)
{
    const ed_case *c = &ed_cases[_i];
    size_t len, at;
    unsigned char *img = slurp(FIX "linear_fp16.pt", &len);
    if (c->first) {
        const unsigned char *hit = memmem(img, len, c->pat, c->npat);
        ck_assert_msg(hit != NULL, "%s: pattern not found", c->what);
        at = (size_t)(hit - img);
    } else {
        at = find_once(img, len, c->pat, c->npat);
    }
    memcpy(img + at + c->at, c->put, c->nput);
    expect_reject(img, len, MT_EFORMAT, c->needle, c->what);
    free(img);
}
END_TEST

START_TEST(pt_refuses_zip_structure_errors)
{
    size_t n;
    unsigned char *z = pickle_zip("\x80\x02}.", 4, &n);
    st_file *f = NULL;
    mt_err err = {{0}};
    ck_assert_msg(st_parse(z, n, "ok.pt", &f, &err) == MT_OK, "%s", err.msg);
    ck_assert_uint_eq(st_count(f), 0); /* an empty state dict */
    st_close(f);
    size_t cd = (size_t)((unsigned char *)memmem(z, n, "PK\1\2", 4) - z);
    put_le(z + cd + 42, 1, 4); /* data.pkl's local header offset */
    expect_reject(z, n, MT_EFORMAT, "entry 't/data.pkl': no local header at 1", "local offset");
    put_le(z + cd + 42, 0, 4);
    put_le(z + cd + 8, 1, 2);
    expect_reject(z, n, MT_EFORMAT, "entry 't/data.pkl' is encrypted", "encrypted");
    put_le(z + cd + 8, 0, 2);
    put_le(z + cd + 24, 5, 4); /* size != compressed size */
    expect_reject(z, n, MT_EFORMAT, "stored, but its sizes differ", "sizes");
    put_le(z + cd + 20, 0xFFFFFFFFu, 4);
    put_le(z + cd + 24, 0xFFFFFFFFu, 4);
    expect_reject(z, n, MT_EFORMAT, "sizes say ZIP64 but it has no ZIP64 extra field", "zip64");
    put_le(z + cd + 20, 4000, 4);
    put_le(z + cd + 24, 4000, 4);
    expect_reject(z, n, MT_EFORMAT, "run past the central directory", "size");
    free(z);
    /* the first entry names the top folder; no data.pkl under it */
    const zent e1[] = {{"x/version", "3\n", 2}, {"t/data.pkl", "\x80\x02}.", 4}};
    z = zip_build(e1, 2, &n);
    expect_reject(z, n, MT_EFORMAT, "no entry 'x/data.pkl'", "other top");
    free(z);
    const zent e2[] = {{"data.pkl", "\x80\x02}.", 4}};
    z = zip_build(e2, 1, &n);
    expect_reject(z, n, MT_EFORMAT, "is not in a folder", "no folder");
    free(z);
    const zent e3[] = {{"t/data.pkl", "\x80\x02}.", 4}, {"t/data.pkl", "", 0}};
    z = zip_build(e3, 2, &n);
    expect_reject(z, n, MT_EFORMAT, "entry 't/data.pkl' is in the zip twice", "twice");
    free(z);
}
END_TEST

/* ======================================================================
 * hand-assembled pickles
 * ====================================================================== */

/* Pieces of pickles (adjacent literals keep each \x escape apart). */
#define P2 "\x80\x02"
#define STR1(s) "X\x01\0\0\0" s /* a 1-byte BINUNICODE */
#define G_V2 "ctorch._utils\n_rebuild_tensor_v2\n"
#define G_OD "ccollections\nOrderedDict\n"
#define PID(cls, numel) "(X\x07\0\0\0storage" "ctorch\n" cls "\n" STR1("0") "X\x03\0\0\0cpu" \
                        "K" numel "tQ"
#define HOOKS "\x89" G_OD ")R"
/* _rebuild_tensor_v2 of storage 0 (4 floats): offset, size, stride */
#define TENSOR(off, size, stride) G_V2 "(" PID("FloatStorage", "\x04") off size stride HOOKS "tR"
#define T4 TENSOR("K\0", "K\x04\x85", "K\x01\x85")
#define DICT_W(value) P2 "}" STR1("w") value "s."

typedef struct {
    const char *what, *pkl;
    size_t len;
    mt_status st;
    const char *needle; /* NULL: accepted, with a tensor "w" of elems 4-byte */
    int elems;          /* elements whose first is first (when F32) */
    float first;
} pk_case;
#define PK(w, p, s, n) {w, p, sizeof(p) - 1, s, n, 0, 0}
#define PKOK(w, p, elems, first) {w, p, sizeof(p) - 1, MT_OK, NULL, elems, first}

static const pk_case pk_cases[] = {
    PKOK("good", DICT_W(T4), 4, 1.5f),
    /* FRAME, MEMOIZE, BINUNICODE8, SHORT_BINUNICODE, STACK_GLOBAL, BININT,
     * LONG1, NEWTRUE, BINFLOAT, lists, metadata None, LONG_BINPUT/GET */
    PKOK("protocol 4 pieces", "\x80\x04" "\x95\x10\0\0\0\0\0\0\0" "}\x94" "("
         "\x8d\x01\0\0\0\0\0\0\0" "w" "\x8c\x0c" "torch._utils" "\x8c\x12"
         "_rebuild_tensor_v2" "\x93" "(" PID("FloatStorage", "\x04") "J\0\0\0\0"
         "\x8a\x01\x04\x85" "\x8a\x01\x01\x85" "\x88" "}G\x3f\xf8\0\0\0\0\0\0" "]K\x01"
         "a(K\x02K\x03" "es" "N" "tR" "r\x05\0\0\0" "X\x01\0\0\0" "v" "j\x05\0\0\0" "u.",
         4, 1.5f),
    PKOK("LONG1 and BININT2 offsets", DICT_W(TENSOR("\x8a\x01\x02", "M\x02\0\x85",
         "K\x01\x85")), 2, 3.5f),
    PKOK("OrderedDict + SETITEMS + BUILD", P2 G_OD ")R(" STR1("w") T4 "u}b.", 4, 1.5f),
    PK("POP", P2 "}K\x01" "0.", MT_EFORMAT, "at byte 5, POP: not one of the opcodes"),
    PK("memo", P2 "}q\x00(" STR1("w") "q\x01" T4 STR1("v") "h\x00" "u.", MT_EFORMAT,
       "key 'v' holds a dict"),
    PK("os.system", P2 "cos\nsystem\n" STR1("x") "\x85R.", MT_EFORMAT,
       "global os.system is not allowed"),
    PK("builtins.eval by STACK_GLOBAL", "\x80\x04\x8c\x08" "builtins" "\x8c\x04" "eval" "\x93.",
       MT_EFORMAT, "global builtins.eval is not allowed"),
    PK("bad opcode", P2 "}\xff.", MT_EFORMAT, "at byte 3, opcode: 0xff is not a pickle opcode"),
    PK("refused opcode", P2 "(iposix\nsystem\n.", MT_EFORMAT,
       "at byte 3, INST: not one of the opcodes torch.save writes"),
    PK("protocol 1", "\x80\x01}.", MT_EFORMAT, "protocol 1 (2 to 5 are read)"),
    PK("no STOP", P2 "}", MT_EFORMAT, "ends at byte 3 without STOP"),
    PK("cut operand", P2 "X\x05\0\0\0ab", MT_EFORMAT, "BINUNICODE: cut short"),
    PK("cut GLOBAL", P2 "ctorch", MT_EFORMAT, "GLOBAL: no end of line"),
    PK("frame too long", "\x80\x04\x95\xff\0\0\0\0\0\0\0}.", MT_EFORMAT, "FRAME: a 255-byte frame"),
    PK("stack underflow", P2 "s.", MT_EFORMAT, "SETITEM: stack underflow"),
    PK("pop across a MARK", P2 "}(s.", MT_EFORMAT, "SETITEM: stack underflow"),
    PK("TUPLE without MARK", P2 "t.", MT_EFORMAT, "TUPLE: no MARK to close"),
    PK("odd SETITEMS", P2 "}(K\x01u.", MT_EFORMAT, "an odd number of values"),
    PK("APPEND to a dict", P2 "}K\x01" "a.", MT_EFORMAT, "adds to a dict, not a list"),
    PK("memo never set", P2 "h\x05.", MT_EFORMAT, "memo index 5 was never set"),
    PK("memo index too big", P2 "}r\xff\xff\xff\x7f.", MT_ELIMIT, "memo index 2147483647 over"),
    PK("LONG1 of 9 bytes", P2 "\x8a\x09\0\0\0\0\0\0\0\0\0.", MT_EFORMAT, "more than 64 bits"),
    PK("string over the limit", P2 "\x8d\0\0\x11\0\0\0\0\0.", MT_ELIMIT,
       "a 1114112-byte string, over the 1048576-byte limit"),
    PK("two values left", P2 "}}.", MT_EFORMAT, "ends with 2 values"),
    PK("a list saved", P2 "].", MT_EFORMAT, "the saved object is a list, not a dict"),
    PK("int key", P2 "}K\x01" T4 "s.", MT_EFORMAT, "a key of the saved dict is an int"),
    PK("int value", DICT_W("K\x03"), MT_EFORMAT, "key 'w' holds an int, not a tensor"),
    PK("REDUCE a storage class", P2 "ctorch\nFloatStorage\n)R.", MT_EFORMAT,
       "torch.FloatStorage is not callable here"),
    PK("REDUCE a str", P2 STR1("a") ")R.", MT_EFORMAT, "calls a str, not a global"),
    PK("OrderedDict with arguments", P2 G_OD "K\x01\x85R.", MT_EFORMAT, "with 1 arguments"),
    PK("persid not a tuple", P2 "K\x01Q.", MT_EFORMAT, "the persistent id is an int, not"),
    PK("persid of 4", P2 "(K\x01K\x01K\x01K\x01tQ.", MT_EFORMAT,
       "the persistent id is a tuple of another length"),
    PK("persid not storage", P2 "(X\x03\0\0\0mod" "ctorch\nFloatStorage\n" STR1("0") STR1("c")
       "K\x01tQ.", MT_EFORMAT, "persistent id 'mod': only 'storage' ids"),
    PK("persid with a dtype for class", P2 "(X\x07\0\0\0storage" "ctorch\nfloat32\n" STR1("0")
       STR1("c") "K\x01tQ.", MT_EFORMAT, "the storage's class is a global, not a torch storage"),
    PK("negative size", DICT_W(TENSOR("K\0", "J\xff\xff\xff\xff\x85", "K\x01\x85")), MT_EFORMAT,
       "size is negative"),
    PK("9 dims", DICT_W(TENSOR("K\0", "(K\1K\1K\1K\1K\1K\1K\1K\1K\4t", "K\x01\x85")), MT_ELIMIT,
       "the size has 9 dims"),
    PK("stride of another rank", DICT_W(TENSOR("K\0", "K\x04\x85", "K\x01K\x01\x86")),
       MT_EFORMAT, "the size has 1 dims but the stride 2"),
    PK("5 arguments", DICT_W(G_V2 "(" PID("FloatStorage", "\x04") "K\0K\x04\x85K\x01\x85\x89tR"),
       MT_EFORMAT, "_rebuild_tensor_v2 with 5 arguments"),
    PK("requires_grad an int", DICT_W(G_V2 "(" PID("FloatStorage", "\x04")
       "K\0K\x04\x85K\x01\x85K\x00" G_OD ")RtR"), MT_EFORMAT, "requires_grad is an int"),
    PK("tensor metadata", DICT_W(G_V2 "(" PID("FloatStorage", "\x04")
       "K\0K\x04\x85K\x01\x85" HOOKS "}" STR1("a") "K\x01stR"), MT_EFORMAT,
       "tensor metadata (a dict) is not read"),
    PK("untyped storage with v2", DICT_W(G_V2 "(" "(X\x07\0\0\0storage"
       "ctorch.storage\nUntypedStorage\n" STR1("0") "X\x03\0\0\0cpu" "K\x10tQ"
       "K\0K\x04\x85K\x01\x85" HOOKS "tR"), MT_EFORMAT, "untyped storage without"),
    PKOK("v3 with an untyped storage", DICT_W("ctorch._utils\n_rebuild_tensor_v3\n((X\x07\0\0\0"
         "storage" "ctorch.storage\nUntypedStorage\n" STR1("0") "X\x03\0\0\0cpu" "K\x10tQ"
         "K\0K\x04\x85K\x01\x85" HOOKS "ctorch\nint32\n" "tR"), 4, 0),
    PK("v3 dtype against a typed storage", DICT_W("ctorch._utils\n_rebuild_tensor_v3\n("
       PID("FloatStorage", "\x04") "K\0K\x04\x85K\x01\x85" HOOKS "ctorch\nint32\n" "tR"),
       MT_EFORMAT, "a tensor of I32 on a storage of F32"),
    PK("parameter of an int", DICT_W("ctorch._utils\n_rebuild_parameter\nK\x01\x88" G_OD ")R"
       "\x87R"), MT_EFORMAT, "_rebuild_parameter's arguments are not"),
    PK("BUILD on a tensor", DICT_W(T4 "}b"), MT_EFORMAT, "sets the state of a tensor"),
    PK("storage numel two ways", P2 "}(" STR1("a") T4 STR1("b") G_V2 "(" PID("FloatStorage",
       "\x03") "K\0K\x03\x85K\x01\x85" HOOKS "tRu.", MT_EFORMAT, "described two ways"),
    PK("storage longer than its entry", DICT_W(G_V2 "(" PID("FloatStorage", "\x05")
       "K\0K\x04\x85K\x01\x85" HOOKS "tR"), MT_EFORMAT, "storage '0' is 20 bytes but its "
       "entry 't/data/0' holds 16"),
    PK("duplicate key", P2 "}(" STR1("w") T4 STR1("w") T4 "u.", MT_EFORMAT,
       "tensor 'w': duplicate tensor name"),
    PK("empty name", P2 "}X\0\0\0\0" T4 "s.", MT_EFORMAT, "tensor with an empty name"),
    PK("name with a NUL", P2 "}X\x02\0\0\0a\0" T4 "s.", MT_EFORMAT,
       "tensor 'a?': its name is not UTF-8"),
    PK("name not UTF-8", P2 "}X\x02\0\0\0a\xff" T4 "s.", MT_EFORMAT, "its name is not UTF-8"),
    PK("storage key with a NUL", P2 "}" STR1("w") G_V2 "((X\x07\0\0\0storage"
       "ctorch\nFloatStorage\n" "X\x02\0\0\0" "0\0" "X\x03\0\0\0cpu" "K\x04tQ"
       "K\0K\x04\x85K\x01\x85" HOOKS "tRs.", MT_EFORMAT, "holds a NUL byte"),
};

START_TEST(pt_hand_made_pickles)
{
    const pk_case *c = &pk_cases[_i];
    size_t n;
    unsigned char *z = pickle_zip(c->pkl, c->len, &n);
    if (c->needle) {
        expect_reject(z, n, c->st, c->needle, c->what);
    } else {
        st_file *f = NULL;
        mt_err err = {{0}};
        ck_assert_msg(st_parse(z, n, LABEL, &f, &err) == MT_OK, "%s: %s", c->what, err.msg);
        const st_tensor *t = st_find(f, "w");
        ck_assert_msg(t && t->ndim == 1 && t->shape[0] == c->elems &&
                      t->nbytes == 4 * (size_t)c->elems, "%s: tensor w", c->what);
        if (t->dtype == ST_F32)
            ck_assert_msg(((const float *)t->data)[0] == c->first, "%s: value", c->what);
        st_close(f);
    }
    free(z);
}
END_TEST

/* MARKs nested past the limit: refused, never a deep stack. */
START_TEST(pt_refuses_deep_mark_nesting)
{
    static unsigned char pkl[2 + 100000];
    memcpy(pkl, "\x80\x02", 2);
    memset(pkl + 2, '(', sizeof pkl - 2);
    size_t n;
    unsigned char *z = pickle_zip(pkl, sizeof pkl, &n);
    expect_reject(z, n, MT_ELIMIT, "at byte 66, MARK: more than 64 nested MARKs", "marks");
    free(z);
    /* a deep chain of one-item tuples is no trouble: nothing recurses */
    memset(pkl + 2, '\x85', sizeof pkl - 3);
    pkl[2] = '}';
    pkl[sizeof pkl - 1] = '.';
    z = pickle_zip(pkl, sizeof pkl, &n);
    expect_reject(z, n, MT_EFORMAT, "the saved object is a tuple", "tuples");
    free(z);
}
END_TEST

/* ======================================================================
 * mutations
 * ====================================================================== */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Parses a copy of b (exact size); an accepted image's tensors lie in it or
 * in the file's own copies, and every byte of each is read. */
static int mutant_ok(const unsigned char *b, size_t len)
{
    unsigned char *copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, b, len);
    st_file *f = NULL;
    mt_err err = {{0}};
    mt_status st = st_parse(copy, len, "m", &f, &err);
    if (st == MT_OK) {
        unsigned sum = 0;
        for (size_t i = 0; i < st_count(f); i++) {
            const st_tensor *t = st_get(f, i);
            const unsigned char *d = t->data;
            ck_assert((uint64_t)st_numel(t) * st_dtype_size(t->dtype) == t->nbytes);
            if (d >= copy && d < copy + len)
                ck_assert(t->nbytes <= (size_t)(copy + len - d));
            for (size_t k = 0; k < t->nbytes; k++)
                sum += d[k];
            ck_assert_ptr_eq(st_find(f, t->name), t);
        }
        (void)sum;
        st_close(f);
    } else {
        ck_assert_ptr_null(f);
        ck_assert_msg(!strncmp(err.msg, "m: ", 3), "unnamed error: %s", err.msg);
    }
    free(copy);
    return st == MT_OK;
}

START_TEST(pt_parse_survives_mutation)
{
    static const char *const files[] = {"linear_fp16.pt", "shared.pt", "proto4.pt",
                                        "zip64_unaligned.pt", "v3_dtypes.pt"};
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s", files[fi]);
        size_t len;
        unsigned char *img = slurp(path, &len), *m = malloc(len);
        ck_assert_ptr_nonnull(m);
        ck_assert_int_eq(mutant_ok(img, len), 1);
        int accepted = 0;
        for (int iter = 0; iter < 1500; iter++) {
            memcpy(m, img, len);
            for (int e = 1 + (int)(rng_next(&seed) % 3); e > 0; e--) {
                uint64_t r = rng_next(&seed);
                size_t at = (size_t)(r >> 8) % len;
                if (r % 3 == 0)
                    m[at] = (unsigned char)(r >> 40);
                else if (r % 3 == 1)
                    m[at] ^= (unsigned char)(1u << ((r >> 32) % 8));
                else
                    m[at] = (unsigned char)(m[at] + (r >> 40) % 5 - 2); /* small steps */
            }
            accepted += mutant_ok(m, len);
        }
        ck_assert_int_gt(accepted, 0); /* mutations of the tensors' bytes stay valid */
        free(m);
        free(img);
    }
}
END_TEST

/* ======================================================================
 * runner
 * ====================================================================== */

static Suite *test_suite(void)
{
    Suite *s = suite_create("torch_pt");
    TCase *rd = tcase_create("read");
    tcase_add_test(rd, pt_reads_every_dtype);
    tcase_add_test(rd, pt_reads_the_v3_dtypes);
    tcase_add_test(rd, pt_reads_an_fp16_linear_state_dict);
    tcase_add_test(rd, pt_reads_views_tied_tensors_and_a_parameter);
    tcase_add_test(rd, pt_reads_pickle_protocol_4);
    tcase_add_test(rd, pt_reads_zip64_and_copies_unaligned_tensors);
    tcase_add_test(rd, pt_reads_a_sharded_pytorch_model_bin_folder);
    tcase_add_test(rd, pt_model_path_falls_back_in_transformers_order);
    suite_add_tcase(s, rd);

    TCase *rj = tcase_create("refuse");
    tcase_add_test(rj, pt_refuses_non_contiguous_nested_and_legacy_files);
    tcase_add_test(rj, pt_refuses_truncated_files);
    tcase_add_test(rj, pt_refuses_a_central_directory_out_of_range);
    tcase_add_loop_test(rj, pt_refuses_edited_files, 0, (int)(sizeof ed_cases / sizeof ed_cases[0]));
    tcase_add_test(rj, pt_refuses_zip_structure_errors);
    tcase_add_loop_test(rj, pt_hand_made_pickles, 0, (int)(sizeof pk_cases / sizeof pk_cases[0]));
    tcase_add_test(rj, pt_refuses_deep_mark_nesting);
    suite_add_tcase(s, rj);

    TCase *fz = tcase_create("mutation");
    tcase_set_timeout(fz, 120);
    tcase_add_test(fz, pt_parse_survives_mutation);
    suite_add_tcase(s, fz);
    return s;
}

#include "tests/unit/check_main.h"
