/* numfmt.c: checked encode/decode over the format traits (numfmt.h). */
#include "engine/numfmt.h"

#include <math.h>

/* Validation shared by nf_encode and nf_decode. */
static mt_status check(const char *what, nf_format fmt, const void *src, const void *dst,
                       size_t n, float scale, mt_err *err)
{
    if ((unsigned)fmt >= NF_FORMAT_COUNT)
        return mt_fail(err, MT_EINVAL, "%s: unknown number format %d", what, (int)fmt);
    if (!isfinite(scale) || !(scale > 0.0f))
        return mt_fail(err, MT_EINVAL, "%s %s: scale %g is not a finite positive number", what,
                       nf_traits_table[fmt].name, (double)scale);
    if (n > 0 && (!src || !dst))
        return mt_fail(err, MT_EINVAL, "%s %s: NULL buffer for %zu elements", what,
                       nf_traits_table[fmt].name, n);
    return MT_OK;
}

mt_status nf_encode(nf_format fmt, const float *src, void *dst, size_t n, float scale,
                    mt_err *err)
{
    mt_status s = check("encode", fmt, src, dst, n, scale, err);
    if (s == MT_OK)
        nf_traits_table[fmt].from_f32(src, dst, n, scale);
    return s;
}

mt_status nf_decode(nf_format fmt, const void *src, float *dst, size_t n, float scale,
                    mt_err *err)
{
    mt_status s = check("decode", fmt, src, dst, n, scale, err);
    if (s == MT_OK)
        nf_traits_table[fmt].to_f32(src, dst, n, scale);
    return s;
}
