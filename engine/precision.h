/* precision.h: the precisions a GEMM weight can be resident in, and one
 * traits table holding everything that differs between them: the name a
 * config or a file uses, the bytes per element, whether it carries
 * per-output-channel scales, the safetensors dtype a quantized file stores
 * it as, the number format of its elements (kernels/cpu/numfmt.h), and
 * for "int8g" the group of inputs each scale covers, and, per backend, the
 * form its GEMM takes there (none: that backend has no kernel for it).
 * Code asks the table instead of switching on the precision: a precision
 * is one row here (and its number format in kernels/cpu/numfmt.h). */
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

/* The backends that have a column in the table (engine/registry.c has a
 * row for each). */
typedef enum { MT_BK_CPU, MT_BK_CUDA, MT_BK_COUNT } mt_backend_kind;

/* The form a backend's GEMM of a precision takes: how it keeps the weight
 * and which family of kernels multiplies it. A backend picks the kernel
 * of the family from the precision's format (and .tf32). */
typedef enum {
    MT_GEMM_NONE,  /* no GEMM for it on that backend (0: a column left out is none) */
    MT_GEMM_FLOAT, /* the library's matmul in the element type: the CPU's oneDNN matmul on
                    * a reordered copy (f32; bf16 where the CPU has AVX512_BF16, else as
                    * PANEL), cuBLASLt on a GPU (f32, tf32 math, f16, bf16) */
    MT_GEMM_PANEL, /* the CPU's 16-bit panels (AVX-512, or decoded into sgemm): f16, bf16, e4m3 */
    MT_GEMM_CODES8 /* 8-bit codes with scales: the CPU's W8A8 kernels (per channel, or per
                    * group); on a GPU the fused W8A16 kernel, dequantized FP16 or FP8 W8A8 */
} mt_gemm_form;

typedef struct {
    const char *name;     /* "fp32", "tf32", "fp16", "bf16", "int8", "fp8", "int8g" */
    unsigned bytes;       /* per resident element */
    bool has_scales;      /* FP32 scales per output channel */
    int group;            /* with scales: one scale per this many inputs (0: per channel) */
    bool int8_act;        /* its CPU GEMM quantizes activations to 8 bits (W8A8: per token,
                           * or per group for int8g), so the models smooth them
                           * (SmoothQuant) */
    st_dtype file_dtype;  /* its elements in a quantized safetensors file */
    nf_format format;     /* its elements' number format */
    double check_mean_cos; /* the load check (engine/model.h): a build's vectors of the */
    double check_min_cos;  /* probe texts against FP32's, mean and least cosine at least */
    mt_gemm_form gemm[MT_BK_COUNT]; /* per backend: its GEMM's form (NONE: unsupported) */
    bool tf32;             /* FP32 elements multiplied in TF32 (a FLOAT form's math) */
} mt_precision_traits;

/* The traits of p; p must be a valid mt_precision. */
const mt_precision_traits *mt_prec(mt_precision p);

/* The form of p's GEMM on backend kind bk; MT_GEMM_NONE for a value of p
 * that is not an mt_precision. */
mt_gemm_form mt_prec_gemm(mt_precision p, mt_backend_kind bk);

/* p's name, or "?" for a value that is not an mt_precision. */
const char *mt_precision_name(mt_precision p);
/* 0 when s names a precision. */
int mt_precision_parse(const char *s, mt_precision *out);

#endif
