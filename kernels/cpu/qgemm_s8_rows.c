/* qgemm_s8_rows.c: the row-wise halves of the INT8 GEMM (qgemm_s8.c): the
 * activation quantizer (per token, or per group of K within each token for
 * int8g) before the int8 product, and the epilogues that turn its int32
 * sums back into FP32 after it. Declared in qgemm_s8_internal.h. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#define KC_QG_SIMD 1
#endif

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/numfmt.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/cpu/qgemm_s8_internal.h"

/* The INT8 form, one thread: acc holds the exact int32 sums of (u8 code) x
 * (s8 code); removing the zero point in int32 (|zp * colsum| <= 255 * 127 *
 * k fits: k <= KC_S8_MAX_K) leaves the exact sum of (q - zp) x code, which is
 * then scaled as above. */
void kc_s8_epi_rows(const int32_t *acc, size_t lda, float *y, size_t ldy, int m, int n,
                    const float *cs, const float *sx, const int32_t *zp, const int32_t *colsum,
                    const float *bias, bool gelu)
{
    for (int r = 0; r < m; r++) {
        const int32_t *a = acc + (size_t)r * lda, z = zp[r];
        float *o = y + (size_t)r * ldy;
        const float t = sx[r];
        if (bias)
            for (int c = 0; c < n; c++)
                o[c] = (float)(a[c] - z * colsum[c]) * cs[c] * t + bias[c];
        else
            for (int c = 0; c < n; c++)
                o[c] = (float)(a[c] - z * colsum[c]) * cs[c] * t;
        if (gelu)
            kc_gelu(o, n);
    }
}

/* The grouped form: acc holds nb planes (one per group of K) of (rows, n)
 * int32 sums, plane stride pstride; gs the (nb, n) group scales, csf the
 * (nb, n) code sums as floats, sx / zp the (rows, nb) activation scales and
 * zero points. Each group's zero-point-free sum acc - zp * colsum is exact
 * in float (both terms are integers below 2^24 for g <= KC_S8G_MAX_GROUP,
 * and so is their difference), then scaled by its group's two scales and
 * summed in FP32 in registers, 16 columns at a time, so that y is written
 * once. */
void kc_s8_epi_rows_g(const int32_t *acc, size_t pstride, int nb, float *y, size_t ldy, int m,
                      int n, const float *gs, const float *sx, const int32_t *zp,
                      const float *csf, const float *bias, bool gelu)
{
    for (int r = 0; r < m; r++) {
        const int32_t *zr = zp + (size_t)r * nb;
        const float *tr = sx + (size_t)r * nb;
        const int32_t *ar = acc + (size_t)r * n;
        float *o = y + (size_t)r * ldy;
        int c = 0;
#ifdef KC_QG_SIMD
        for (; c + 16 <= n; c += 16) {
            __m256 f0 = _mm256_setzero_ps(), f1 = f0;
            for (int b = 0; b < nb; b++) {
                const int32_t *a = ar + (size_t)b * pstride + c;
                const float *s = gs + (size_t)b * n + c, *cs = csf + (size_t)b * n + c;
                const __m256 vz = _mm256_set1_ps((float)zr[b]), vt = _mm256_broadcast_ss(tr + b);
                __m256 a0 = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)a));
                __m256 a1 = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a + 8)));
                a0 = _mm256_mul_ps(_mm256_fnmadd_ps(vz, _mm256_loadu_ps(cs), a0), vt);
                a1 = _mm256_mul_ps(_mm256_fnmadd_ps(vz, _mm256_loadu_ps(cs + 8), a1), vt);
                f0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(s), f0);
                f1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(s + 8), f1);
            }
            if (bias) {
                f0 = _mm256_add_ps(f0, _mm256_loadu_ps(bias + c));
                f1 = _mm256_add_ps(f1, _mm256_loadu_ps(bias + c + 8));
            }
            _mm256_storeu_ps(o + c, f0);
            _mm256_storeu_ps(o + c + 8, f1);
        }
#endif
        for (; c < n; c++) {
            float f = 0.0f;
            for (int b = 0; b < nb; b++)
                f += ((float)ar[(size_t)b * pstride + c] - (float)zr[b] * csf[(size_t)b * n + c]) *
                     tr[b] * gs[(size_t)b * n + c];
            o[c] = f + (bias ? bias[c] : 0.0f);
        }
        if (gelu)
            kc_gelu(o, n);
    }
}

/* min and max of x[0..n) and 0 (so the grid always holds 0: a constant
 * row, an all-zero row and the GEMM's zero padding stay exact); 4 vector
 * accumulators each so the compare chains do not serialise (the plain loop
 * cannot be vectorised by the compiler without -ffast-math). A NaN may or
 * may not propagate: such a row's result is garbage either way, but never
 * a crash. */
static void minmax0(const float *x, int n, float *lo_out, float *hi_out)
{
    int i = 0;
    float lo = 0.f, hi = 0.f;
#ifdef KC_QG_SIMD
    __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0;
    __m256 h0 = l0, h1 = l0, h2 = l0, h3 = l0;
    for (; i + 32 <= n; i += 32) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
        l0 = _mm256_min_ps(l0, a), h0 = _mm256_max_ps(h0, a);
        l1 = _mm256_min_ps(l1, b), h1 = _mm256_max_ps(h1, b);
        l2 = _mm256_min_ps(l2, c), h2 = _mm256_max_ps(h2, c);
        l3 = _mm256_min_ps(l3, d), h3 = _mm256_max_ps(h3, d);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i);
        l0 = _mm256_min_ps(l0, a), h0 = _mm256_max_ps(h0, a);
    }
    l0 = _mm256_min_ps(_mm256_min_ps(l0, l1), _mm256_min_ps(l2, l3));
    h0 = _mm256_max_ps(_mm256_max_ps(h0, h1), _mm256_max_ps(h2, h3));
    __m128 l = _mm_min_ps(_mm256_castps256_ps128(l0), _mm256_extractf128_ps(l0, 1));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(h0), _mm256_extractf128_ps(h0, 1));
    l = _mm_min_ps(l, _mm_movehl_ps(l, l));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    l = _mm_min_ss(l, _mm_shuffle_ps(l, l, 1));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    lo = _mm_cvtss_f32(l);
    hi = _mm_cvtss_f32(h);
#endif
    for (; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *lo_out = lo;
    *hi_out = hi;
}

/* The asymmetric uint8 grid of a run whose min(x, 0) and max(x, 0) are lo
 * and hi: from lo to hi in 255 steps, *sx = (hi - lo) / 255 (1 when all
 * zero), *zp = rne(-lo / sx) (the code of 0). */
static void u8_grid(float lo, float hi, float *sx, int32_t *zp)
{
    float s = (hi - lo) / 255.0f;
    if (!(s > 0.f) || !isfinite(s)) /* all zero, or no usable range: codes = zp */
        s = 1.0f;
    float z = rintf(-lo / s);
    if (!(z >= 0.f)) /* NaN too (a NaN in the row) */
        z = 0.f;
    else if (z > 255.f)
        z = 255.f;
    *sx = s;
    *zp = (int32_t)z;
}

/* One run of n values onto its grid (u8_grid), codes as numfmt's
 * nf_f32_to_u8_asym (with the reciprocal 1 / sx); the codes beyond n up to
 * pad are zero. */
static void quant_run(const float *x, int n, int pad, uint8_t *q, float *sx, int32_t *zp)
{
    float lo, hi;
    minmax0(x, n, &lo, &hi);
    u8_grid(lo, hi, sx, zp);
    nf_f32_to_u8_asym_array(x, q, (size_t)n, 1.0f / *sx, (int)*zp);
    if (n < pad)
        memset(q + n, 0, (size_t)(pad - n));
}

#ifdef KC_QG_SIMD
#define Q512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

/* quant_run with AVX-512, 16 values a step (the tail masked): the same
 * grid and the same codes (min and max are exact; each code is the same
 * multiply, NaN to 0, clamp to +-256, round half to even, add zp, clamp to
 * 0..255 as nf_f32_to_u8_asym). */
static Q512 void quant_run_512(const float *x, int n, int pad, uint8_t *q, float *sx,
                               int32_t *zp)
{
    __m512 l0 = _mm512_setzero_ps(), l1 = l0, h0 = l0, h1 = l0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        l0 = _mm512_min_ps(l0, a), h0 = _mm512_max_ps(h0, a);
        l1 = _mm512_min_ps(l1, b), h1 = _mm512_max_ps(h1, b);
    }
    for (; i < n; i += 16) { /* masked-off lanes load 0, which the grid holds anyway */
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 a = _mm512_maskz_loadu_ps(m, x + i);
        l0 = _mm512_min_ps(l0, a), h0 = _mm512_max_ps(h0, a);
    }
    u8_grid(_mm512_reduce_min_ps(_mm512_min_ps(l0, l1)),
            _mm512_reduce_max_ps(_mm512_max_ps(h0, h1)), sx, zp);
    const __m512 rcp = _mm512_set1_ps(1.0f / *sx), vzp = _mm512_set1_ps((float)*zp);
    const __m512 lo = _mm512_set1_ps(-256.0f), hi = _mm512_set1_ps(256.0f);
    const __m512 qlo = _mm512_setzero_ps(), qhi = _mm512_set1_ps(255.0f);
    for (i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), rcp);
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v); /* NaN -> 0 */
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, vzp), qlo), qhi);
        _mm512_mask_cvtepi32_storeu_epi8(q + i, m, _mm512_cvtps_epi32(v));
    }
    if (n < pad)
        memset(q + n, 0, (size_t)(pad - n));
}
#endif

bool kc_s8_quant_wide(void)
{
#ifdef KC_QG_SIMD
    return kc_isa_get()->avx512;
#else
    return false;
#endif
}

/* Per-token asymmetric quantization of m rows, one thread (kc_quantize_rows_u8
 * is the threaded form), each row onto its own grid (quant_run); g = k: the
 * codes plain row-major (m, k), one scale and zero point per row. With
 * groups (g < k) each group of g values of a row has its own grid, as the
 * weight has (Q8_0 does the same to activations): group b of row r goes to
 * q + b * gstride + r * rstride (a short tail padded with zero codes; the
 * oneDNN form wants the groups as planes, the AMX kernel plain rows), its
 * scale and zero point to sx / zp [r * nb + b]. */
void kc_s8_quant_rows(const float *x, int m, int k, int g, size_t gstride, size_t rstride,
                      int pad, uint8_t *q, float *sx, int32_t *zp, const float *in_div,
                      float *tmp, bool wide)
{
    const int nb = (k + g - 1) / g;
    void (*run)(const float *, int, int, uint8_t *, float *, int32_t *) = quant_run;
#ifdef KC_QG_SIMD
    if (wide)
        run = quant_run_512;
#else
    (void)wide;
#endif
    for (int r = 0; r < m; r++) {
        const float *xr = x + (size_t)r * k;
        if (in_div) { /* smoothing: the weight holds W diag(s), the activation x / s */
            for (int j = 0; j < k; j++)
                tmp[j] = xr[j] * in_div[j];
            xr = tmp;
        }
        for (int j0 = 0, b = 0; j0 < k; j0 += g, b++)
            run(xr + j0, k - j0 < g ? k - j0 : g, pad, q + (size_t)b * gstride + (size_t)r * rstride,
                sx + (size_t)r * nb + b, zp + (size_t)r * nb + b);
    }
}

/* The threaded quantizer, for callers outside kc_gemm_s8 (and its tests). */
int kc_quantize_rows_u8(const float *x, int m, int k, uint8_t *q, float *sx, int32_t *zp)
{
    if (m < 0 || k < 0 || (m > 0 && (!sx || !zp || (k > 0 && (!x || !q)))))
        return KC_EINVAL;
#pragma omp parallel for schedule(static) if (m > 1)
    for (int r = 0; r < m; r++)
        kc_s8_quant_rows(x + (size_t)r * k, 1, k, k, 0, (size_t)k, k, q + (size_t)r * k, sx + r,
                         zp + r, NULL, NULL, kc_s8_quant_wide());
    return KC_OK;
}

