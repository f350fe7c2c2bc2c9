/* quant.h: turning FP32 GEMM weights into the resident precisions, and
 * the policy of which ops take the low precision at all.
 *
 * Layouts (row-major, W is (n, k): n output channels of k inputs):
 *   fp32        float[n*k]                      no scales
 *   fp16, bf16  uint16_t[n*k] (IEEE half / bfloat16 bits)   no scales
 *   int8        int8_t[n*k], symmetric, q in [-127, 127]    float scale[n]: w ~ q * scale
 *   fp8         uint8_t[n*k] E4M3 (OCP FN)                  float scale[n]: w ~ e4m3(q) * scale
 *   int8g       int8_t[n*k] as int8, with scale[n][G], G = ceil(k / 128): input i of channel
 *               c is q * scale[c][i / 128] (one scale per group of 128 inputs, as
 *               llama.cpp's Q8_0 has one per 32)
 * Scales are chosen per output channel (per group) by a calibration method.
 */
#ifndef MT_QUANT_H
#define MT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/status.h"

typedef enum { MT_CALIB_ABSMAX, MT_CALIB_PERCENTILE, MT_CALIB_MSE, MT_CALIB_COUNT } mt_calib;

typedef struct {
    mt_calib method;
    double percentile; /* for MT_CALIB_PERCENTILE: the |w| percentile (50..100) kept unclipped */
} mt_calib_opts;

const char *mt_calib_name(mt_calib c);
int mt_calib_parse(const char *s, mt_calib *out); /* 0 on success */

/* Bytes of the quantized data alone, and with the scales. */
size_t mt_quant_data_bytes(mt_precision p, int n, int k);
size_t mt_quant_total_bytes(mt_precision p, int n, int k);
/* Whether p carries per-channel scales. */
int mt_quant_has_scales(mt_precision p);
/* Scales per output channel of a (n, k) weight of p (0, 1, or the group
 * count), and in all. */
size_t mt_quant_scale_groups(mt_precision p, int k);
size_t mt_quant_scale_count(mt_precision p, int n, int k);

/* Quantizes w (n, k) into data (mt_quant_data_bytes) and scales
 * (mt_quant_scale_count floats, for int8, int8g and fp8; may be NULL
 * otherwise). fp32/tf32 copy. Rejects non-finite weights naming the
 * channel. calib may be NULL (absmax). */
mt_status mt_quantize(const float *w, int n, int k, mt_precision p, const mt_calib_opts *calib,
                      void *data, float *scales, mt_err *err);

/* The FP32 values a quantized weight stands for (reference twin and tests). */
void mt_dequantize(const void *data, const float *scales, int n, int k, mt_precision p,
                   float *out);

/* The AMP-style op policy: which precision each op of a variant runs in.
 * Only GEMM weights take the variant's precision; everything else is FP32. */
typedef enum {
    MT_OP_GEMM_WEIGHT,
    MT_OP_EMBEDDING_TABLE,
    MT_OP_LAYERNORM,
    MT_OP_BIAS,
    MT_OP_SOFTMAX,
    MT_OP_GELU,
    MT_OP_RESIDUAL,
    MT_OP_POOLING,
    MT_OP_COUNT
} mt_op;

const char *mt_op_name(mt_op op);
mt_precision mt_op_precision(mt_op op, mt_precision variant);

/* Quantizes a host FP32 weight (n, k) and places it in backend be. */
mt_status mt_weight_create(mt_backend *be, const float *w, int n, int k, mt_precision p,
                           const mt_calib_opts *calib, mt_weight **out, mt_err *err);

#endif
