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
#include <string.h>

#include "engine/weights/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

static char roundtrip_path[256];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_st_tmp_path(roundtrip_path, sizeof roundtrip_path, "fuzz_safetensors");
    return 0;
}

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 4 && !memcmp(data, "PK\3\4", 4)) /* a PyTorch checkpoint */
        return 0;
    st_file *f = fuzz_st_parse(data, size, "fuzz.safetensors", "fuzz.safetensors");
    if (!f)
        return 0;
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
        fuzz_st_check_size(t);
        const uint8_t *p = t->data;
        FUZZ_CHECK(t->nbytes == 0 || (p >= base && p <= end && t->nbytes <= (size_t)(end - p)),
                   "%s: data outside the data area", t->name);
        FUZZ_CHECK(t->nbytes == 0 || p == next, "%s: does not start where the previous ended",
                   t->name);
        if (t->nbytes)
            next = p + t->nbytes;
        sum += t->nbytes;
        fuzz_st_check_reach(f, i, t);
        st_dtype back;
        FUZZ_CHECK(st_dtype_parse(st_dtype_name(t->dtype), &back) == 0 && back == t->dtype,
                   "%s: dtype name %s does not parse back", t->name, st_dtype_name(t->dtype));
    }
    FUZZ_CHECK(sum == (uint64_t)(end - base), "tensors cover %llu of %zu data bytes",
               (unsigned long long)sum, (size_t)(end - base));
    (void)st_meta(f, "format");

    fuzz_st_roundtrip(f, roundtrip_path);
    st_close(f);
    return 0;
}
