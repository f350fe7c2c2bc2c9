/* engine/cuda/no_cuda.h: the answers of the CUDA entry points where there is
 * no CUDA backend (engine/cuda/entry_points.h's last column), shared by
 * engine/cuda/dl.c (no driver, no module) and engine/cuda/none.c (a build
 * without CUDA). why: the reason, for messages. */
#ifndef MT_CUDA_NO_CUDA_H
#define MT_CUDA_NO_CUDA_H

#include <stdio.h>
#include <string.h>

#include "engine/cuda/backend.h"

/* describe: the reason in buf; MT_EUNSUPPORTED. */
static inline mt_status cuda_no_describe(const char *why, char *buf, size_t cap)
{
    if (buf && cap)
        snprintf(buf, cap, "%s", why);
    return MT_EUNSUPPORTED;
}

/* create: no backend, MT_EUNSUPPORTED with the reason. */
static inline mt_status cuda_no_backend(const char *why, mt_backend **out, mt_err *err)
{
    if (out)
        *out = NULL;
    return mt_fail(err, MT_EUNSUPPORTED, "%s", why);
}

/* The options' defaults without the module (nothing reads them there). */
static inline void cuda_no_opts(mt_cuda_opts *o)
{
    memset(o, 0, sizeof *o);
    o->autotune = 1;
    o->max_len_hint = 512;
    o->graphs = 1;
}

#endif
