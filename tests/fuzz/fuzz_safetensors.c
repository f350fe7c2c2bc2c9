/* fuzz_safetensors.c: libFuzzer harness for the safetensors reader
 * (engine/weights/safetensors.c, st_parse) on arbitrary bytes as a whole file.
 *
 * Beyond "no crash, no sanitizer report", for a file it accepts it checks
 * what safetensors.h promises: every tensor lies inside the data area, its
 * byte count is its shape times its dtype size, the tensors (in st_get
 * order, i.e. by offset) tile the data area exactly, and st_find finds
 * each by name. Every tensor byte is read, so ASan sees any range that
 * points outside the buffer. An accepted file is then written back with
 * st_write, reopened with st_open, and must come back the same (names,
 * dtypes, shapes, bytes): the writer and the mmap path get fuzzed too.
 * Inputs that start as a zip file does ("PK\3\4"), which st_parse reads
 * as PyTorch checkpoints, are fuzz_torch_pt's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/weights/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

static char roundtrip_path[256];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(roundtrip_path, sizeof roundtrip_path, "%s/fuzz_safetensors.%d.safetensors", dir,
             (int)getpid());
    return 0;
}

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void check_roundtrip(const st_file *f)
{
    size_t n = st_count(f);
    st_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    FUZZ_CHECK(ts, "out of memory");
    for (size_t i = 0; i < n; i++)
        ts[i] = *st_get(f, i);
    mt_err err = {{0}};
    mt_status s = st_write(roundtrip_path, ts, n, NULL, &err);
    if (s == MT_EIO || s == MT_ENOMEM) { /* a full disk is not a finding */
        free(ts);
        return;
    }
    FUZZ_CHECK(s == MT_OK, "st_write refused what st_parse accepted: %s", err.msg);
    st_file *g = NULL;
    s = st_open(roundtrip_path, &g, &err);
    unlink(roundtrip_path);
    FUZZ_CHECK(s == MT_OK, "st_open refused what st_write wrote: %s", err.msg);
    FUZZ_CHECK(st_count(g) == n, "%zu tensors written, %zu read back", n, st_count(g));
    for (size_t i = 0; i < n; i++) {
        const st_tensor *a = &ts[i], *b = st_find(g, a->name);
        FUZZ_CHECK(b, "tensor \"%s\" lost in the round trip", a->name);
        FUZZ_CHECK(a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes,
                   "tensor \"%s\" changed dtype, rank or size in the round trip", a->name);
        FUZZ_CHECK(!memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim),
                   "tensor \"%s\" changed shape in the round trip", a->name);
        FUZZ_CHECK(a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes),
                   "tensor \"%s\" changed bytes in the round trip", a->name);
    }
    st_close(g);
    free(ts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 4 && !memcmp(data, "PK\3\4", 4)) /* a PyTorch checkpoint */
        return 0;
    st_file *f = NULL;
    mt_err err = {{0}};
    mt_status s = st_parse(data, size, "fuzz.safetensors", &f, &err);
    if (s != MT_OK) {
        FUZZ_CHECK(f == NULL, "failure left *out set");
        FUZZ_CHECK(!strncmp(err.msg, "fuzz.safetensors", 16),
                   "error does not name the file: \"%s\"", err.msg);
        return 0;
    }
    FUZZ_CHECK(size >= 8, "accepted %zu bytes", size);
    const uint64_t hlen = load_u64le(data);
    FUZZ_CHECK(hlen <= size - 8, "accepted a header of %llu bytes in a %zu-byte file",
               (unsigned long long)hlen, size);
    const uint8_t *base = data + 8 + hlen, *end = data + size;

    const uint8_t *next = base; /* where the next tensor must begin */
    uint64_t sum = 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_get(f, i);
        FUZZ_CHECK(t && t->name, "st_get(%zu) is NULL", i);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "%s: ndim %d", t->name, t->ndim);
        FUZZ_CHECK((unsigned)t->dtype < ST_DTYPE_COUNT, "%s: dtype %d", t->name, t->dtype);
        int64_t numel = st_numel(t);
        FUZZ_CHECK(numel >= 0, "%s: numel %lld", t->name, (long long)numel);
        FUZZ_CHECK((uint64_t)numel * st_dtype_size(t->dtype) == t->nbytes,
                   "%s: %lld elements of %zu bytes but nbytes %zu", t->name, (long long)numel,
                   st_dtype_size(t->dtype), t->nbytes);
        const uint8_t *p = t->data;
        FUZZ_CHECK(t->nbytes == 0 || (p >= base && p <= end && t->nbytes <= (size_t)(end - p)),
                   "%s: data outside the data area", t->name);
        FUZZ_CHECK(t->nbytes == 0 || p == next, "%s: does not start where the previous ended",
                   t->name);
        if (t->nbytes)
            next = p + t->nbytes;
        sum += t->nbytes;
        /* Touch every byte, so ASan checks the range. */
        volatile uint8_t acc = 0;
        for (size_t k = 0; k < t->nbytes; k++)
            acc ^= p[k];
        (void)acc;
        FUZZ_CHECK(st_find(f, t->name) == t, "st_find(\"%s\") is not st_get(%zu)", t->name, i);
        st_dtype back;
        FUZZ_CHECK(st_dtype_parse(st_dtype_name(t->dtype), &back) == 0 && back == t->dtype,
                   "%s: dtype name %s does not parse back", t->name, st_dtype_name(t->dtype));
    }
    FUZZ_CHECK(sum == (uint64_t)(end - base), "tensors cover %llu of %zu data bytes",
               (unsigned long long)sum, (size_t)(end - base));
    (void)st_meta(f, "format");

    check_roundtrip(f);
    st_close(f);
    return 0;
}
