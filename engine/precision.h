/* precision.h: the precisions a GEMM weight can be resident in, and one
 * traits table holding everything that differs between them: the name a
 * config or a file uses, the bytes per element, whether it carries
 * per-output-channel scales, the safetensors dtype a quantized file stores
 * it as, the number format of its elements (kernels/cpu/numfmt.h), and
 * for "int8g" the group of inputs each scale covers.
 * Code asks the table instead of switching on the precision. */
#ifndef MT_ENGINE_PRECISION_H
#define MT_ENGINE_PRECISION_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/weights/safetensors.h"
#include "kernels/cpu/numfmt.h"

typedef enum {
    MT_PREC_FP32,
    MT_PREC_TF32, /* FP32 weights, TF32 tensor-core GEMMs: GPU only */
    MT_PREC_FP16,
    MT_PREC_BF16,
    MT_PREC_INT8,
    MT_PREC_FP8, /* E4M3 (OCP FN) */
    MT_PREC_INT8G, /* int8 codes, one scale per 128 inputs of each output channel: CPU */
    MT_PREC_COUNT
} mt_precision;

typedef struct {
    const char *name;     /* "fp32", "tf32", "fp16", "bf16", "int8", "fp8", "int8g" */
    unsigned bytes;       /* per resident element */
    bool has_scales;      /* FP32 scales per output channel */
    int group;            /* with scales: one scale per this many inputs (0: per channel) */
    bool int8_act;        /* its CPU GEMM quantizes activations to 8 bits (W8A8: per token,
                           * or per group for int8g), so the models smooth them
                           * (SmoothQuant) */
    bool gpu_only;        /* no CPU GEMM for it */
    st_dtype file_dtype;  /* its elements in a quantized safetensors file */
    nf_format format;     /* its elements' number format */
    double check_mean_cos; /* the load check (engine/model.h): a build's vectors of the */
    double check_min_cos;  /* probe texts against FP32's, mean and least cosine at least */
} mt_precision_traits;

/* The traits of p; p must be a valid mt_precision. */
const mt_precision_traits *mt_prec(mt_precision p);

/* p's name, or "?" for a value that is not an mt_precision. */
const char *mt_precision_name(mt_precision p);
/* 0 when s names a precision. */
int mt_precision_parse(const char *s, mt_precision *out);

#endif
