/* numfmt.h: the number formats (kernels/cpu/numfmt.h has the conversions
 * and their rules) with checked entry points for callers that take the
 * format and scale from a file or a config, and errors as mt_status. */
#ifndef MT_ENGINE_NUMFMT_H
#define MT_ENGINE_NUMFMT_H

#include "engine/status.h"
#include "kernels/cpu/numfmt.h"

/* MT_EINVAL for an unknown format, a scale that is not finite and > 0, or
 * NULL buffers with n > 0; else the traits' encoder / decoder. */
mt_status nf_encode(nf_format fmt, const float *src, void *dst, size_t n, float scale,
                    mt_err *err);
mt_status nf_decode(nf_format fmt, const void *src, float *dst, size_t n, float scale,
                    mt_err *err);

#endif
