/* precision.c: the precision traits table (precision.h). */
#include "engine/precision.h"

#include <string.h>

/* The load check's bounds (the last two fields; engine/model.h), set from
 * the drift measured on the probe texts, MiniLM and MPNet, AVX2 to AMX
 * (1 - mean cosine / 1 - least): fp16 1e-7 / 3e-7, bf16 1e-5 / 2.5e-5, fp8
 * 1.7e-3 / 5.1e-3, int8 1.0e-3 / 2.7e-3, int8g 2.7e-4 / 8.2e-4; an int8
 * GEMM whose pair sums saturate gave MiniLM 1.8e-3 / 4.1e-3 (int8) and
 * 1.0e-2 / 2.7e-2 (int8g), MPNet 9e-2 / 0.16 (int8). Each bound leaves the
 * measured drift 1.5x (int8) to 20x (bf16) room and refuses those. */
/* The GEMM columns: which backends multiply each precision, in which form
 * (a backend left out of a row has none for it). A new backend: its
 * mt_backend_kind, a macro here, and an entry in the rows it supports. */
#define CPU(form) [MT_BK_CPU] = MT_GEMM_##form
#define CUDA(form) [MT_BK_CUDA] = MT_GEMM_##form

static const mt_precision_traits traits[MT_PREC_COUNT] = {
    [MT_PREC_FP32] = {"fp32", 4, false, 0, false, ST_F32, NF_F32, 1.0, 1.0,
                      .gemm = {CPU(FLOAT), CUDA(FLOAT)}},
    [MT_PREC_TF32] = {"tf32", 4, false, 0, false, ST_F32, NF_F32, 0.9999, 0.9995,
                      .gemm = {CUDA(FLOAT)}, .tf32 = true},
    [MT_PREC_FP16] = {"fp16", 2, false, 0, false, ST_F16, NF_F16, 0.99995, 0.9998,
                      .gemm = {CPU(PANEL), CUDA(FLOAT)}},
    [MT_PREC_BF16] = {"bf16", 2, false, 0, false, ST_BF16, NF_BF16, 0.9998, 0.9995,
                      .gemm = {CPU(FLOAT), CUDA(FLOAT)}},
    [MT_PREC_INT8] = {"int8", 1, true, 0, true, ST_I8, NF_I8, 0.9985, 0.996,
                      .gemm = {CPU(CODES8), CUDA(CODES8)}},
    [MT_PREC_FP8] = {"fp8", 1, true, 0, false, ST_F8_E4M3, NF_E4M3, 0.996, 0.985,
                     .gemm = {CPU(PANEL), CUDA(CODES8)}},
    /* Q8_0-like, 128 wide rather than 32: two 64-deep AMX tile products per
     * group (kernels/cpu/qgemm_amx.c), and already less drift than Q8_0
     * (bench/results/int8g-2026-11-25.md). No CUDA kernel yet. */
    [MT_PREC_INT8G] = {"int8g", 1, true, 128, true, ST_I8, NF_I8, 0.999, 0.997,
                       .gemm = {CPU(CODES8)}},
};

const mt_precision_traits *mt_prec(mt_precision p)
{
    return &traits[p];
}

mt_gemm_form mt_prec_gemm(mt_precision p, mt_backend_kind bk)
{
    return (unsigned)p < MT_PREC_COUNT && (unsigned)bk < MT_BK_COUNT ? traits[p].gemm[bk]
                                                                       : MT_GEMM_NONE;
}

const char *mt_precision_name(mt_precision p)
{
    return (unsigned)p < MT_PREC_COUNT ? traits[p].name : "?";
}

int mt_precision_parse(const char *s, mt_precision *out)
{
    for (int p = 0; p < MT_PREC_COUNT; p++)
        if (s && strcmp(s, traits[p].name) == 0) {
            *out = (mt_precision)p;
            return 0;
        }
    return -1;
}
