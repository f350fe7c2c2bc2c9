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
#include <string.h>

#include "engine/weights/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

static char roundtrip_path[256];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_st_tmp_path(roundtrip_path, sizeof roundtrip_path, "fuzz_torch_pt");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4 || memcmp(data, "PK\3\4", 4) != 0)
        return 0;
    st_file *f = fuzz_st_parse(data, size, "fuzz.pt", "fuzz.pt: ");
    if (!f)
        return 0;
    const uint8_t *end = data + size;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_get(f, i);
        FUZZ_CHECK(t && t->name && *t->name, "st_get(%zu) is NULL or unnamed", i);
        fuzz_st_check_size(t);
        const uint8_t *p = t->data;
        FUZZ_CHECK(t->nbytes == 0 || (uintptr_t)p % st_dtype_size(t->dtype) == 0,
                   "%s: data not aligned to its element size", t->name);
        if (p >= data && p < end)
            FUZZ_CHECK(t->nbytes <= (size_t)(end - p), "%s: runs past the input", t->name);
        fuzz_st_check_reach(f, i, t); /* copies too */
    }
    FUZZ_CHECK(st_meta(f, "format") == NULL, "a PyTorch checkpoint has metadata");
    fuzz_st_roundtrip(f, roundtrip_path);
    st_close(f);
    return 0;
}
