/* qgemm_s8_internal.h: what qgemm_s8.c takes from qgemm_s8_rows.c (the
 * activation quantizer and the epilogues of the INT8 GEMM), internal to
 * kernels/cpu. */
#ifndef MT_KERNELS_CPU_QGEMM_S8_INTERNAL_H
#define MT_KERNELS_CPU_QGEMM_S8_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Per-token (g = k) or per-group asymmetric UINT8 quantization of m rows
 * of x (m, k), one thread: group b of row r to q + b * gstride + r *
 * rstride, its scale and zero point to sx / zp [r * nb + b]; smoothing
 * multiplies by in_div first (tmp: k floats). wide: with AVX-512 (only
 * where kc_s8_quant_wide() says so), else AVX2; both give the same codes. */
void kc_s8_quant_rows(const float *x, int m, int k, int g, size_t gstride, size_t rstride,
                      uint8_t *q, float *sx, int32_t *zp, const float *in_div, float *tmp,
                      bool wide);

/* Whether this CPU (and OS) runs AVX-512 F/DQ/BW/VL, for kc_s8_quant_rows. */
bool kc_s8_quant_wide(void);

/* Per-channel epilogue: y = (acc - zp[r] * colsum) * cs * sx[r] (+ bias,
 * GELU) over m rows. */
void kc_s8_epi_rows(const int32_t *acc, size_t lda, float *y, size_t ldy, int m, int n,
                    const float *cs, const float *sx, const int32_t *zp, const int32_t *colsum,
                    const float *bias, bool gelu);

/* Grouped epilogue: nb planes of int32 sums (plane stride pstride) summed
 * in FP32, each times its group's activation and weight scales. */
void kc_s8_epi_rows_g(const int32_t *acc, size_t pstride, int nb, float *y, size_t ldy, int m,
                      int n, const float *gs, const float *sx, const int32_t *zp,
                      const float *csf, const float *bias, bool gelu);

#endif
