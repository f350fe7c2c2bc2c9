/* quant.c: FP32 GEMM weights -> resident precisions (quant.h), the
 * per-channel calibration of their scales, and the op policy table. */
#include "engine/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/numfmt.h"

/* ========================================================================
 * the op policy: one table, as AMP's op lists. Only GEMM weights follow
 * the variant; the rest stays FP32 whatever the variant.
 * ====================================================================== */

static const struct {
    const char *name;
    int follows_variant;
} op_policy[MT_OP_COUNT] = {
    [MT_OP_GEMM_WEIGHT] = {"gemm_weight", 1},
    [MT_OP_EMBEDDING_TABLE] = {"embedding_table", 0},
    [MT_OP_LAYERNORM] = {"layernorm", 0},
    [MT_OP_BIAS] = {"bias", 0},
    [MT_OP_SOFTMAX] = {"softmax", 0},
    [MT_OP_GELU] = {"gelu", 0},
    [MT_OP_RESIDUAL] = {"residual", 0},
    [MT_OP_POOLING] = {"pooling", 0},
};

const char *mt_op_name(mt_op op)
{
    return (unsigned)op < MT_OP_COUNT ? op_policy[op].name : "?";
}

mt_precision mt_op_precision(mt_op op, mt_precision variant)
{
    return (unsigned)op < MT_OP_COUNT && op_policy[op].follows_variant ? variant : MT_PREC_FP32;
}

/* ========================================================================
 * names and sizes
 * ====================================================================== */

static const char *const calib_names[MT_CALIB_COUNT] = {"absmax", "percentile", "mse"};

const char *mt_calib_name(mt_calib c)
{
    return (unsigned)c < MT_CALIB_COUNT ? calib_names[c] : "?";
}

int mt_calib_parse(const char *s, mt_calib *out)
{
    for (int i = 0; i < MT_CALIB_COUNT; i++)
        if (s && !strcmp(s, calib_names[i])) {
            *out = (mt_calib)i;
            return 0;
        }
    return -1;
}

int mt_quant_has_scales(mt_precision p)
{
    return p == MT_PREC_INT8 || p == MT_PREC_FP8;
}

size_t mt_quant_data_bytes(mt_precision p, int n, int k)
{
    size_t e = (size_t)n * (size_t)k;
    switch (p) {
    case MT_PREC_FP32: case MT_PREC_TF32: return e * 4;
    case MT_PREC_FP16: case MT_PREC_BF16: return e * 2;
    case MT_PREC_INT8: case MT_PREC_FP8: return e;
    default: return 0;
    }
}

size_t mt_quant_total_bytes(mt_precision p, int n, int k)
{
    return mt_quant_data_bytes(p, n, k) + (mt_quant_has_scales(p) ? (size_t)n * sizeof(float) : 0);
}

/* ========================================================================
 * calibration: the clip value c of one channel; scale = c / qmax
 * ====================================================================== */

static float qmax_of(mt_precision p)
{
    return p == MT_PREC_INT8 ? 127.0f : 448.0f;
}

static float absmax(const float *w, int k)
{
    float m = 0.f;
    for (int i = 0; i < k; i++)
        m = fabsf(w[i]) > m ? fabsf(w[i]) : m;
    return m;
}

static float channel_clip(const float *w, int k, mt_precision p, const mt_calib_opts *c)
{
    (void)p;
    (void)c;
    return absmax(w, k);
}

/* ======================================================================== */

mt_status mt_quantize(const float *w, int n, int k, mt_precision p, const mt_calib_opts *calib,
                      void *data, float *scales, mt_err *err)
{
    static const mt_calib_opts absmax_opts = {MT_CALIB_ABSMAX, 100.0};
    if (!calib)
        calib = &absmax_opts;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < k; i++)
            if (!isfinite(w[(size_t)r * k + i]))
                return mt_fail(err, MT_EFORMAT, "non-finite weight in output channel %d (column %d)",
                               r, i);
    size_t e = (size_t)n * k;
    switch (p) {
    case MT_PREC_FP32:
    case MT_PREC_TF32:
        memcpy(data, w, e * sizeof(float));
        return MT_OK;
    case MT_PREC_FP16:
        nf_f32_to_f16_array(w, data, e);
        return MT_OK;
    case MT_PREC_BF16:
        nf_f32_to_bf16_array(w, data, e);
        return MT_OK;
    case MT_PREC_INT8:
    case MT_PREC_FP8:
        break;
    default:
        return mt_fail(err, MT_EINVAL, "unknown precision %d", (int)p);
    }
    if (!scales)
        return mt_fail(err, MT_EINVAL, "%s weights need a scale array", mt_precision_name(p));
    float *tmp = p == MT_PREC_FP8 ? malloc(sizeof(float) * (size_t)k) : NULL;
    if (p == MT_PREC_FP8 && !tmp)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    for (int r = 0; r < n; r++) {
        const float *row = w + (size_t)r * k;
        float clip = channel_clip(row, k, p, calib);
        /* an all-zero channel gets scale 1 and codes 0: no 0/0 anywhere */
        float s = clip > 0.f ? clip / qmax_of(p) : 1.0f;
        if (!(s > 0.f) || !isfinite(s))
            s = 1.0f;
        scales[r] = s;
        if (p == MT_PREC_INT8) {
            nf_f32_to_i8_array(row, (int8_t *)data + (size_t)r * k, (size_t)k, s);
        } else {
            float inv = 1.0f / s;
            for (int i = 0; i < k; i++)
                tmp[i] = row[i] * inv;
            nf_f32_to_e4m3_array(tmp, (uint8_t *)data + (size_t)r * k, (size_t)k);
        }
    }
    free(tmp);
    return MT_OK;
}

void mt_dequantize(const void *data, const float *scales, int n, int k, mt_precision p, float *out)
{
    size_t e = (size_t)n * k;
    switch (p) {
    case MT_PREC_FP32:
    case MT_PREC_TF32:
        memcpy(out, data, e * sizeof(float));
        break;
    case MT_PREC_FP16:
        nf_f16_to_f32_array(data, out, e);
        break;
    case MT_PREC_BF16:
        nf_bf16_to_f32_array(data, out, e);
        break;
    case MT_PREC_INT8:
        for (int r = 0; r < n; r++)
            nf_i8_to_f32_array((const int8_t *)data + (size_t)r * k, out + (size_t)r * k,
                               (size_t)k, scales[r]);
        break;
    case MT_PREC_FP8:
        for (int r = 0; r < n; r++) {
            nf_e4m3_to_f32_array((const uint8_t *)data + (size_t)r * k, out + (size_t)r * k,
                                 (size_t)k);
            for (int i = 0; i < k; i++)
                out[(size_t)r * k + i] *= scales[r];
        }
        break;
    default:
        break;
    }
}

mt_status mt_weight_create(mt_backend *be, const float *w, int n, int k, mt_precision p,
                           const mt_calib_opts *calib, mt_weight **out, mt_err *err)
{
    if (!be->ops->supports(be, p))
        return mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the %s backend",
                       mt_precision_name(p), be->device);
    void *data = malloc(mt_quant_data_bytes(p, n, k));
    float *scales = mt_quant_has_scales(p) ? malloc(sizeof(float) * (size_t)n) : NULL;
    mt_status st;
    if (!data || (mt_quant_has_scales(p) && !scales))
        st = mt_fail(err, MT_ENOMEM, "out of memory quantizing a %dx%d weight", n, k);
    else if ((st = mt_quantize(w, n, k, p, calib, data, scales, err)) == MT_OK)
        st = be->ops->weight_upload(be, p, n, k, data, scales, out, err);
    free(data);
    free(scales);
    return st;
}
