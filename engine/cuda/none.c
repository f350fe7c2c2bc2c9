/* engine/cuda/none.c: the CUDA entry points of engine/cuda/backend.h for
 * builds without CUDA (make CUDA=0, or no nvcc on the PATH), so that the
 * server links the same way either way and can say why there is no GPU. */
#include "engine/cuda/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NO_CUDA "this build has no CUDA backend (built with CUDA=0 or without nvcc)"

int mt_cuda_device_count(void)
{
    return 0;
}

mt_status mt_cuda_describe(int dev, char *buf, size_t cap)
{
    if (buf && cap)
        snprintf(buf, cap, "%s", NO_CUDA);
    return MT_EUNSUPPORTED;
}

mt_status mt_backend_cuda_create(int device, mt_backend **out, mt_err *err)
{
    if (out)
        *out = NULL;
    return mt_fail(err, MT_EUNSUPPORTED, NO_CUDA);
}

void mt_cuda_opts_default(mt_cuda_opts *o)
{
    memset(o, 0, sizeof *o);
    o->autotune = 1;
    o->max_len_hint = 512;
    o->graphs = 1;
}

mt_status mt_backend_cuda_create_opts(int device, const mt_cuda_opts *o, mt_backend **out,
                                      mt_err *err)
{
    return mt_backend_cuda_create(device, out, err);
}

void mt_cuda_get_counts(const mt_backend *be, mt_cuda_counts *out)
{
    memset(out, 0, sizeof *out);
}

bool mt_cuda_fp8_w8a8_enabled(const mt_backend *be)
{
    return false;
}

int mt_cuda_weight_crossover(const mt_weight *w)
{
    return -1;
}

mt_status mt_cuda_graph_begin(mt_backend *be, unsigned long long key, bool *replay, mt_err *err)
{
    return mt_fail(err, MT_EUNSUPPORTED, NO_CUDA);
}

mt_status mt_cuda_graph_end(mt_backend *be, mt_err *err)
{
    return mt_fail(err, MT_EUNSUPPORTED, NO_CUDA);
}
