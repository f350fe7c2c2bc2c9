/* fuzz_torch_pt.c: libFuzzer harness for the PyTorch checkpoint reader
 * (engine/weights/torch_pt.c, pt_zip.c, pt_pickle.c, pt_unpickle.c, through
 * st_parse) on arbitrary bytes as a whole .pt file. Inputs that do not start
 * as a zip file does ("PK\3\4") are left to fuzz_safetensors.
 *
 * Beyond "no crash, no sanitizer report", for a file it accepts it checks
 * what safetensors.h promises of a PyTorch checkpoint: each tensor's rank
 * and dtype are valid, its byte count is its shape times its dtype size,
 * its data are aligned to its element size and lie inside the input or in
 * the file's own copy (every byte is read, so ASan sees a range that
 * points elsewhere), st_find finds each by name, and st_meta is NULL. A
 * refused file leaves *out NULL and the message names the file. An
 * accepted file is then written with st_write and read back with st_open:
 * the same names, dtypes, shapes and bytes (a .pt converted to safetensors).
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
    snprintf(roundtrip_path, sizeof roundtrip_path, "%s/fuzz_torch_pt.%d.safetensors", dir,
             (int)getpid());
    return 0;
}

/* The accepted tensors, written as safetensors and read back, are the same. */
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
    if (size < 4 || memcmp(data, "PK\3\4", 4) != 0)
        return 0;
    st_file *f = NULL;
    mt_err err = {{0}};
    mt_status s = st_parse(data, size, "fuzz.pt", &f, &err);
    if (s != MT_OK) {
        FUZZ_CHECK(f == NULL, "failure left *out set");
        FUZZ_CHECK(!strncmp(err.msg, "fuzz.pt: ", 9), "error does not name the file: \"%s\"",
                   err.msg);
        return 0;
    }
    const uint8_t *end = data + size;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_get(f, i);
        FUZZ_CHECK(t && t->name && *t->name, "st_get(%zu) is NULL or unnamed", i);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "%s: ndim %d", t->name, t->ndim);
        FUZZ_CHECK((unsigned)t->dtype < ST_DTYPE_COUNT, "%s: dtype %d", t->name, t->dtype);
        int64_t numel = st_numel(t);
        FUZZ_CHECK(numel >= 0, "%s: numel %lld", t->name, (long long)numel);
        FUZZ_CHECK((uint64_t)numel * st_dtype_size(t->dtype) == t->nbytes,
                   "%s: %lld elements of %zu bytes but nbytes %zu", t->name, (long long)numel,
                   st_dtype_size(t->dtype), t->nbytes);
        const uint8_t *p = t->data;
        FUZZ_CHECK(t->nbytes == 0 || (uintptr_t)p % st_dtype_size(t->dtype) == 0,
                   "%s: data not aligned to its element size", t->name);
        if (p >= data && p < end)
            FUZZ_CHECK(t->nbytes <= (size_t)(end - p), "%s: runs past the input", t->name);
        volatile uint8_t acc = 0; /* touch every byte: ASan checks copies too */
        for (size_t k = 0; k < t->nbytes; k++)
            acc ^= p[k];
        (void)acc;
        FUZZ_CHECK(st_find(f, t->name) == t, "st_find(\"%s\") is not st_get(%zu)", t->name, i);
    }
    FUZZ_CHECK(st_meta(f, "format") == NULL, "a PyTorch checkpoint has metadata");
    check_roundtrip(f);
    st_close(f);
    return 0;
}
