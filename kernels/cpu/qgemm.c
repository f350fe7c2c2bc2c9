/* qgemm.c: the CPU GEMMs for FP16, BF16, FP8 (E4M3) and INT8 resident
 * weights (qgemm.h), and the epilogue all of them share.
 *
 * 16-bit and FP8 weights: "decode a panel, sgemm it". The output is cut
 * into tiles of (MB rows of x) x (a panel of P rows of W); OpenMP threads
 * take tiles, decode the tile's panel of W into their own FP32 scratch
 * (P x k floats, about 192 KiB, or 16 rows when k is large; freed after the
 * call: no FP32 copy of a weight outlives a call or exceeds that bound),
 * multiply it with a single-threaded oneDNN sgemm (oneDNN runs sequentially
 * inside a parallel region), and apply the epilogue to the tile while it is
 * still in cache. Activations stay FP32, so the only error is the weight's
 * own rounding.
 *
 * INT8 (W8A8) is in qgemm_s8.c.
 */
#include "kernels/cpu/qgemm.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define KC_QG_SIMD 1
#endif

#include "kernels/cpu/numfmt.h"
#include "kernels/cpu/ops.h"

/* ------------------------------------------------------------------------
 * epilogue
 * ---------------------------------------------------------------------- */

/* The epilogue on a block of rows, one thread: reads src (m, n; row stride
 * lds), writes y (row stride ldy; may be src). Used on whole outputs by
 * kc_epilogue, on tiles inside the panel GEMM's parallel region, and on
 * the FP32 matmul's tiles (gemm_f32.c). */
void kc_epi_rows(const float *src, size_t lds, float *y, size_t ldy, int m, int n,
                     const float *cs, const float *rs, const float *bias, bool gelu)
{
    for (int r = 0; r < m; r++) {
        const float *s = src + (size_t)r * lds;
        float *o = y + (size_t)r * ldy;
        const float t = rs ? rs[r] : 1.0f;
        if (cs && bias)
            for (int c = 0; c < n; c++)
                o[c] = s[c] * cs[c] * t + bias[c];
        else if (cs)
            for (int c = 0; c < n; c++)
                o[c] = s[c] * cs[c] * t;
        else if (bias)
            for (int c = 0; c < n; c++)
                o[c] = s[c] * t + bias[c];
        else if (rs || o != s)
            for (int c = 0; c < n; c++)
                o[c] = s[c] * t;
        if (gelu)
            kc_gelu(o, n);
    }
}

/* Whole-output form of the epilogue, rows split over the OpenMP threads. */
int kc_epilogue(float *y, int m, int n, const float *col_scale, const float *row_scale,
                const float *bias, bool gelu)
{
    if (m < 0 || n < 0 || (!y && m > 0 && n > 0))
        return KC_EINVAL;
    if (m == 0 || n == 0 || (!col_scale && !row_scale && !bias && !gelu))
        return KC_OK;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; r++)
        kc_epi_rows(y + (size_t)r * n, (size_t)n, y + (size_t)r * n, (size_t)n, 1, n, col_scale,
                 row_scale ? row_scale + r : NULL, bias, gelu);
    return KC_OK;
}

/* ------------------------------------------------------------------------
 * panel decoders: rows [r0, r0 + rows) of W (n, k) -> FP32 (rows, k)
 * ---------------------------------------------------------------------- */

typedef void (*panel_decode_fn)(const void *w, size_t first, size_t count, float *dst);

/* IEEE half: F16C through numfmt's array converter (exact). */
static void dec_f16(const void *w, size_t first, size_t count, float *dst)
{
    nf_f16_to_f32_array((const uint16_t *)w + first, dst, count);
}

/* bfloat16: a 16-bit shift, also exact. */
static void dec_bf16(const void *w, size_t first, size_t count, float *dst)
{
    nf_bf16_to_f32_array((const uint16_t *)w + first, dst, count);
}

/* E4M3 decoded to value / 256: the code's bits moved into an IEEE half
 * (sign to bit 15, exponent and mantissa to bits 13..7) read as a half are
 * exactly the E4M3 value times 2^-8, subnormals included, so one F16C
 * conversion decodes 8 codes. The 256 goes into the sgemm's alpha (exact:
 * a power of two). NaN codes would decode to 1.875 and are refused before
 * any GEMM (kc_e4m3_has_nan). */
static void dec_e4m3_div256(const void *w, size_t first, size_t count, float *dst)
{
    const uint8_t *src = (const uint8_t *)w + first;
    size_t i = 0;
#ifdef KC_QG_SIMD
    for (; i + 16 <= count; i += 16) {
        const __m256i h = kc_e4m3_halves_div256(
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(src + i))));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
        _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
    }
#endif
    for (; i < count; i++)
        dst[i] = nf_e4m3_to_f32(src[i]) * (1.0f / 256.0f);
}

/* Upload-time guard: the F16C decoder above has no NaN, so NaN codes must
 * never reach it. */
bool kc_e4m3_has_nan(const uint8_t *w, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if ((w[i] & 0x7f) == 0x7f)
            return true;
    return false;
}

/* ------------------------------------------------------------------------
 * the panel GEMM
 * ---------------------------------------------------------------------- */

/* Tile sizes. A panel of P rows of W is decoded once per tile; MB rows of
 * x share it. P keeps the FP32 panel near 192 KiB (it is reread by every
 * row block of the sgemm, so it should sit in L2); MB bounds the tile of y
 * the epilogue revisits. Small outputs get smaller panels so that both
 * threads have tiles. */
#define PANEL_BYTES (192 * 1024)
#define PANEL_MIN 16
#define PANEL_MAX 256
#define TILE_M 256

/* The panel height P for an (m, n, k) call: rows of W per decoded panel. */
static int panel_rows(int n, int k, int m, int nthr)
{
    int p = PANEL_BYTES / (4 * (k > 0 ? k : 1));
    p = p < PANEL_MIN ? PANEL_MIN : p > PANEL_MAX ? PANEL_MAX : p;
    if (m <= TILE_M) {
        /* one row block: split n so that each thread gets >= 2 panels */
        int want = (n + 2 * nthr - 1) / (2 * nthr);
        want = (want + 15) & ~15;
        if (want < PANEL_MIN)
            want = PANEL_MIN;
        if (want < p)
            p = want;
    }
    return p & ~15 ? p & ~15 : PANEL_MIN;
}

/* y (m, n) = alpha * x (m, k) . dec(W)^T, then the epilogue with col_scale,
 * bias and gelu; W decoded by dec a panel at a time. */
static int panel_gemm(const float *x, int m, const void *w, panel_decode_fn dec, int n, int k,
                      float alpha, const float *col_scale, const float *bias, bool gelu,
                      float *y)
{
    if (m < 0 || n < 0 || k < 0 || (m > 0 && n > 0 && (!y || !w || (k > 0 && !x))))
        return KC_EINVAL;
    if (m == 0 || n == 0)
        return KC_OK;
    if (k == 0) { /* an empty sum: y = epilogue(0) */
        for (int r = 0; r < m; r++)
            memset(y + (size_t)r * n, 0, sizeof(float) * (size_t)n);
        return kc_epilogue(y, m, n, NULL, NULL, bias, gelu);
    }
    const int nthr = omp_get_max_threads();
    const int P = panel_rows(n, k, m, nthr);
    const int MB = m <= TILE_M ? m : TILE_M;
    const int np = (n + P - 1) / P, nm = (m + MB - 1) / MB;
    const long ntiles = (long)np * nm;
    int failed = 0;

#pragma omp parallel if (ntiles > 1)
    {
        float *panel = aligned_alloc(64, ((sizeof(float) * (size_t)P * k) + 63) & ~(size_t)63);
        int have = -1; /* the panel now decoded in this thread's scratch */
        /* row-block major: a thread's consecutive tiles share x's rows */
#pragma omp for schedule(static)
        for (long t = 0; t < ntiles; t++) {
            const int mb = (int)(t / np), p = (int)(t % np);
            const int r0 = p * P, rows = n - r0 < P ? n - r0 : P;
            const int m0 = mb * MB, mm = m - m0 < MB ? m - m0 : MB;
            if (!panel) {
#pragma omp atomic write
                failed = KC_ENOMEM;
                continue;
            }
            if (p != have) {
                dec(w, (size_t)r0 * k, (size_t)rows * k, panel);
                have = p;
            }
            float *yt = y + (size_t)m0 * n + r0;
            if (dnnl_sgemm('N', 'T', mm, rows, k, alpha, x + (size_t)m0 * k, k, panel, k, 0.0f,
                           yt, n) != dnnl_success) {
#pragma omp atomic write
                failed = KC_EDNNL;
                continue;
            }
            if (col_scale || bias || gelu)
                kc_epi_rows(yt, (size_t)n, yt, (size_t)n, mm, rows, col_scale ? col_scale + r0 : NULL,
                         NULL, bias ? bias + r0 : NULL, gelu);
        }
        free(panel);
    }
    return failed;
}

/* FP16 weights: the panel GEMM with the F16C decoder. */
int kc_gemm_f16(const float *x, int m, const uint16_t *w, int n, int k, const float *bias,
                bool gelu, float *y)
{
    return panel_gemm(x, m, w, dec_f16, n, k, 1.0f, NULL, bias, gelu, y);
}

/* BF16 weights: the panel GEMM with the shift decoder. */
int kc_gemm_bf16(const float *x, int m, const uint16_t *w, int n, int k, const float *bias,
                 bool gelu, float *y)
{
    return panel_gemm(x, m, w, dec_bf16, n, k, 1.0f, NULL, bias, gelu, y);
}

/* FP8 weights: the panel GEMM with codes decoded to value / 256, alpha 256,
 * and the channel scales as the epilogue's column scale. */
int kc_gemm_fp8(const float *x, int m, const uint8_t *w, const float *scale, int n, int k,
                const float *bias, bool gelu, float *y)
{
    if (!scale && n > 0)
        return KC_EINVAL;
    return panel_gemm(x, m, w, dec_e4m3_div256, n, k, 256.0f, scale, bias, gelu, y);
}

