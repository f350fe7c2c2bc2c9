/* qgemm_s8_internal.h: the INT8 GEMM's weight object, shared by
 * qgemm_s8.c (the object, the choice of kernel, our kernels' driver) and
 * qgemm_s8_dnnl.c (oneDNN's form), and what both take from
 * qgemm_s8_rows.c (the activation quantizer and the epilogues); internal
 * to kernels/cpu. */
#ifndef MT_KERNELS_CPU_QGEMM_S8_INTERNAL_H
#define MT_KERNELS_CPU_QGEMM_S8_INTERNAL_H

#include <dnnl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/qgemm.h"

#define KC_S8_CHUNK 128
#define KC_S8_MAX_K 66000
#define KC_S8G_MIN_GROUP 16  /* at most KC_S8_MAX_K / 16 groups */
#define KC_S8G_MAX_GROUP 512 /* 255 * 127 * 512 < 2^24: a group's sum is exact in float */
#define KC_S8_NBUCKET 16     /* oneDNN's form: row counts with a primitive (qgemm_s8_dnnl.c) */

struct kc_s8_weight {
    int n, k;
    int g, nb;               /* group size along K and group count; g = k, nb = 1: per channel */
    int gp;                  /* our kernels: codes per group when packed (g rounded up to 64) */
    int max_rows;            /* the largest chunk (a bucket) */
    kc_s8_kernel kernel;     /* which kernel multiplies (never KC_S8_AUTO) */
    dnnl_engine_t eng;
    dnnl_memory_desc_t wmd;  /* the layout the primitives read the codes in */
    const int8_t *codes;     /* borrowed: (n, k) row-major */
    const float *scale;      /* borrowed: n, or (n, nb) for groups */
    int8_t *padded;          /* groups with k % g != 0: the codes padded to (n, nb * g) */
    int8_t *packed;          /* our kernels: the codes packed by kc_amx_pack, else NULL */
    float *gscale;           /* groups only: the scales transposed, (nb, n) */
    void *wbuf;              /* the codes reordered into wmd, or NULL: used in place */
    float *in_div;           /* k: activation smoothing 1/s per input channel, or NULL */
    int32_t *colsum;         /* (nb, n): sum of each output channel's codes in each group */
    float *csf;              /* groups only: colsum as floats */
    size_t wbytes;           /* its size */
    char impl[80];
    pthread_mutex_t mu; /* guards the three arrays below (each slot is written once) */
    dnnl_primitive_t prim[KC_S8_NBUCKET]; /* by bucket; NULL until first needed */
    dnnl_memory_desc_t spmd[KC_S8_NBUCKET]; /* each one's scratchpad */
    size_t scratch[KC_S8_NBUCKET];          /* and its size in bytes */
};

/* Scratch bytes for one smoothed activation row (0 without smoothing). */
static inline size_t kc_s8_xbytes(const kc_s8_weight *w)
{
    return w->in_div ? (sizeof(float) * (size_t)w->k + 63) & ~(size_t)63 : 0;
}

/* Rows per chunk for m rows on maxthr threads, chunks of at most
 * max_rows: a multiple of align, the chunk count a multiple of the thread
 * count where m allows. */
static inline int kc_s8_chunk_rows(int m, int maxthr, int max_rows, int align)
{
    const int per_thr = (m + maxthr * max_rows - 1) / (maxthr * max_rows);
    int crows = (m + maxthr * per_thr - 1) / (maxthr * per_thr);
    crows = (crows + align - 1) / align * align;
    return crows > max_rows ? max_rows : crows;
}

/* oneDNN's form (qgemm_s8_dnnl.c): the largest chunk for nb groups of n
 * columns; the primitives and the weight's layout for it (codes read in
 * place, or copied reordered when reorder is set or oneDNN prefers);
 * the GEMM; and freeing what the form made (the object itself stays). */
int kc_s8_dnnl_max_rows(int nb, int n);
int kc_s8_dnnl_prepare(kc_s8_weight *w, const int8_t *codes, bool reorder);
int kc_s8_dnnl_gemm(const float *x, int m, kc_s8_weight *w, const float *bias, bool gelu,
                    float *y);
void kc_s8_dnnl_release(kc_s8_weight *w);

/* Per-token (g = k) or per-group asymmetric UINT8 quantization of m rows
 * of x (m, k), one thread: group b of row r to q + b * gstride + r *
 * rstride, pad codes (>= g; the tail of a short group and the codes past
 * g are zero), its scale and zero point to sx / zp [r * nb + b];
 * smoothing multiplies by in_div first (tmp: k floats). wide: with
 * AVX-512 (only where kc_s8_quant_wide() says so), else AVX2; both give
 * the same codes. */
void kc_s8_quant_rows(const float *x, int m, int k, int g, size_t gstride, size_t rstride,
                      int pad, uint8_t *q, float *sx, int32_t *zp, const float *in_div,
                      float *tmp, bool wide);

/* Whether the ISA level in force has AVX-512 F/DQ/BW/VL, for kc_s8_quant_rows. */
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
