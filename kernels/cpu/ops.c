/* ops.c: FP32 CPU kernels for layernorm, attention, GELU, embeddings and
 * pooling. Plain loops where GCC vectorises them for AVX2/AVX-512; GELU's
 * erf and the softmax's exp are our own approximations, written once per
 * width (scalar, AVX2, AVX-512) with the same operations in the same order,
 * so every width gives the same bits; the attention's two GEMMs per head run
 * on a micro-kernel of ours (oneDNN's sgemm for other head sizes).
 */
#include "kernels/cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>
#include <omp.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/scratch.h"

/* ------------------------------------------------------------------------
 * elementwise
 * ---------------------------------------------------------------------- */

/* GELU, 0.5 x (1 + erf(x / sqrt 2)), with erf(u) = u P(t) / Q(t), t = u^2 / 16,
 * P of degree 5 and Q of degree 5, |u| clamped at 3.925 (past it erf is 1 in
 * FP32), fitted here (tools/fit-erf.py) to erf in double. In FP32 with FMA
 * its error is at most 3.5e-7 (6 ulp of values near 1), so GELU's is at
 * most 4e-7 |x| (tests/unit/test_cpu_ops.c); glibc's libmvec erff, used
 * before, cost 9% of an int8g forward on AVX-512 (perf, c=64). Every form
 * (scalar, AVX2, AVX-512) does the same IEEE operations in the same order,
 * so their results are the same bit for bit. */
#define GELU_RSQRT2 0.70710678118654752f
#define ERF_CLAMP 3.925f
#define ERF_P0 1.12837899f
#define ERF_P1 3.08754063f
#define ERF_P2 13.5895519f
#define ERF_P3 15.8772202f
#define ERF_P4 18.8410244f
#define ERF_P5 2.12953305f
#define ERF_Q1 8.06956768f
#define ERF_Q2 29.4827366f
#define ERF_Q3 62.2110672f
#define ERF_Q4 77.9706573f
#define ERF_Q5 39.8789406f

float kc_gelu1(float x)
{
    const float u = x * GELU_RSQRT2;
    const float a = fminf(fabsf(u), ERF_CLAMP);
    const float t = a * a * 0.0625f;
    float p = fmaf(ERF_P5, t, ERF_P4), q = fmaf(ERF_Q5, t, ERF_Q4);
    p = fmaf(p, t, ERF_P3), q = fmaf(q, t, ERF_Q3);
    p = fmaf(p, t, ERF_P2), q = fmaf(q, t, ERF_Q2);
    p = fmaf(p, t, ERF_P1), q = fmaf(q, t, ERF_Q1);
    p = fmaf(p, t, ERF_P0), q = fmaf(q, t, 1.0f);
    const float e = copysignf(fminf(a * p / q, 1.0f), u);
    return 0.5f * x * (1.0f + e);
}

#if defined(__AVX2__) && defined(__FMA__)
/* _mm256_op or _mm512_op. */
#define GV(W, op) _mm##W##_##op

/* kc_gelu1 on one vector of W bits (256: 8 lanes, 512: 16), as
 * gelu256 / gelu512. */
#define GELU_VEC(W, TARGET)                                                                \
    static TARGET inline __m##W gelu##W(__m##W x)                                          \
    {                                                                                      \
        const __m##W sign = GV(W, set1_ps)(-0.0f);                                         \
        const __m##W u = GV(W, mul_ps)(x, GV(W, set1_ps)(GELU_RSQRT2));                    \
        const __m##W a = GV(W, min_ps)(GV(W, andnot_ps)(sign, u), GV(W, set1_ps)(ERF_CLAMP)); \
        const __m##W t = GV(W, mul_ps)(GV(W, mul_ps)(a, a), GV(W, set1_ps)(0.0625f));      \
        __m##W p = GV(W, fmadd_ps)(GV(W, set1_ps)(ERF_P5), t, GV(W, set1_ps)(ERF_P4));     \
        __m##W q = GV(W, fmadd_ps)(GV(W, set1_ps)(ERF_Q5), t, GV(W, set1_ps)(ERF_Q4));     \
        p = GV(W, fmadd_ps)(p, t, GV(W, set1_ps)(ERF_P3));                                 \
        q = GV(W, fmadd_ps)(q, t, GV(W, set1_ps)(ERF_Q3));                                 \
        p = GV(W, fmadd_ps)(p, t, GV(W, set1_ps)(ERF_P2));                                 \
        q = GV(W, fmadd_ps)(q, t, GV(W, set1_ps)(ERF_Q2));                                 \
        p = GV(W, fmadd_ps)(p, t, GV(W, set1_ps)(ERF_P1));                                 \
        q = GV(W, fmadd_ps)(q, t, GV(W, set1_ps)(ERF_Q1));                                 \
        p = GV(W, fmadd_ps)(p, t, GV(W, set1_ps)(ERF_P0));                                 \
        q = GV(W, fmadd_ps)(q, t, GV(W, set1_ps)(1.0f));                                   \
        __m##W e = GV(W, min_ps)(GV(W, div_ps)(GV(W, mul_ps)(a, p), q), GV(W, set1_ps)(1.0f)); \
        e = GV(W, or_ps)(e, GV(W, and_ps)(sign, u));                                       \
        return GV(W, mul_ps)(GV(W, mul_ps)(GV(W, set1_ps)(0.5f), x),                       \
                             GV(W, add_ps)(GV(W, set1_ps)(1.0f), e));                      \
    }

#define G512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

/* The mask of the first min(left, 16) lanes of a 16-lane step. */
static inline __mmask16 tail16(int left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

GELU_VEC(256, )
GELU_VEC(512, G512)

/* gelu512 over x, the tail masked. */
static G512 void gelu_512(float *x, int n)
{
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = tail16(n - i);
        _mm512_mask_storeu_ps(x + i, m, gelu512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}
#define KC_GELU_SIMD 1
#endif

void kc_gelu(float *x, int n)
{
    int i = 0;
#ifdef KC_GELU_SIMD
    if (kc_isa_get()->avx512) {
        gelu_512(x, n);
        return;
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, gelu256(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++)
        x[i] = kc_gelu1(x[i]);
}

void kc_bias_act(float *y, int m, int n, const float *bias, bool gelu)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m; r++) {
        float *row = y + (size_t)r * n;
        if (bias)
            for (int c = 0; c < n; c++)
                row[c] += bias[c];
        if (gelu)
            kc_gelu(row, n);
    }
}

/* ------------------------------------------------------------------------
 * exp and the softmax of a row. exp(x) = 2^n p(r): x clamped to
 * [-87, 88] (2^n and the result stay normal floats; past 88 FP32
 * overflows, and below -87 a softmax term is under 1e-37 of the row's
 * largest, which is 1), n = x log2(e) rounded to nearest, r = x - n ln 2 in
 * two steps (Cody and Waite: ln 2's high part ends in 9 zero bits, so n
 * times it is exact), |r| <= ln2 / 2, and p(r) the Taylor series to r^7,
 * whose truncation error is under 2e-9 there: what is left is rounding,
 * at most 7.7e-8 relative, under an ulp (measured on 2^20 values,
 * tests/unit/test_cpu_ops.c). The softmax used glibc's
 * libmvec expf (AVX2 only) inside scalar loops that GCC does not
 * vectorise (float max and sum reductions): with 180-token passages that
 * was 19% of an int8g forward on AVX-512.
 * ---------------------------------------------------------------------- */
#define EXP_LO -87.0f
#define EXP_HI 88.0f
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693145751953125f
#define EXP_LN2_LO 1.42860682030941723e-6f
#define EXP_C2 0.5f
#define EXP_C3 0.166666666666666667f
#define EXP_C4 0.0416666666666666667f
#define EXP_C5 0.00833333333333333333f
#define EXP_C6 0.00138888888888888889f
#define EXP_C7 0.000198412698412698413f

float kc_exp1(float x)
{
    x = fminf(fmaxf(x, EXP_LO), EXP_HI);
    const float n = rintf(x * EXP_LOG2E);
    float r = fmaf(n, -EXP_LN2_HI, x);
    r = fmaf(n, -EXP_LN2_LO, r);
    float p = fmaf(EXP_C7, r, EXP_C6);
    p = fmaf(p, r, EXP_C5);
    p = fmaf(p, r, EXP_C4);
    p = fmaf(p, r, EXP_C3);
    p = fmaf(p, r, EXP_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#if defined(__AVX2__) && defined(__FMA__)
/* kc_exp1 on one vector of W bits, as exp256 / exp512 (the round to
 * nearest is roundscale's or round's mode 0, rintf's in the default
 * rounding mode). */
#define EXP_ROUND256(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define EXP_ROUND512(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define EXP_VEC(W, TARGET)                                                                  \
    static TARGET inline __m##W exp##W(__m##W x)                                            \
    {                                                                                       \
        x = GV(W, min_ps)(GV(W, max_ps)(x, GV(W, set1_ps)(EXP_LO)), GV(W, set1_ps)(EXP_HI)); \
        const __m##W n = EXP_ROUND##W(GV(W, mul_ps)(x, GV(W, set1_ps)(EXP_LOG2E)));         \
        __m##W r = GV(W, fmadd_ps)(n, GV(W, set1_ps)(-EXP_LN2_HI), x);                      \
        r = GV(W, fmadd_ps)(n, GV(W, set1_ps)(-EXP_LN2_LO), r);                             \
        __m##W p = GV(W, fmadd_ps)(GV(W, set1_ps)(EXP_C7), r, GV(W, set1_ps)(EXP_C6));      \
        p = GV(W, fmadd_ps)(p, r, GV(W, set1_ps)(EXP_C5));                                  \
        p = GV(W, fmadd_ps)(p, r, GV(W, set1_ps)(EXP_C4));                                  \
        p = GV(W, fmadd_ps)(p, r, GV(W, set1_ps)(EXP_C3));                                  \
        p = GV(W, fmadd_ps)(p, r, GV(W, set1_ps)(EXP_C2));                                  \
        p = GV(W, fmadd_ps)(p, r, GV(W, set1_ps)(1.0f));                                    \
        p = GV(W, fmadd_ps)(p, r, GV(W, set1_ps)(1.0f));                                    \
        const __m##W##i e = GV(W, slli_epi32)(                                              \
            GV(W, add_epi32)(GV(W, cvtps_epi32)(n), GV(W, set1_epi32)(127)), 23);          \
        return GV(W, mul_ps)(p, GV(W, castsi##W##_ps)(e));                                  \
    }

EXP_VEC(256, )
EXP_VEC(512, G512)

/* exp(row + bias - the largest of them) in place (bias may be NULL) at 512
 * bits, tails masked, the largest and the sum taken in lanes; returns 1 /
 * the sum, the factor that makes the row a softmax. The first pass only
 * reads (row + bias is formed again in the second): a masked store read
 * back at once cannot be forwarded, and that stall was a third of a short
 * row's time. */
static G512 inline float softexp_512(float *row, int len, const float *bias)
{
    if (len <= 16) { /* one vector: kept in a register throughout */
        const __mmask16 m = tail16(len);
        __m512 v = _mm512_maskz_loadu_ps(m, row);
        if (bias)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias));
        const float top = _mm512_mask_reduce_max_ps(m, v);
        const __m512 e = exp512(_mm512_sub_ps(v, _mm512_set1_ps(top)));
        _mm512_mask_storeu_ps(row, m, e);
        return 1.0f / _mm512_mask_reduce_add_ps(m, e);
    }
    __m512 mx = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
    for (int j = 0; j < len; j += 16) {
        const __mmask16 m = tail16(len - j);
        __m512 v = _mm512_maskz_loadu_ps(m, row + j);
        if (bias)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
        mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    for (int j = 0; j < len; j += 16) {
        const __mmask16 m = tail16(len - j);
        __m512 v = _mm512_maskz_loadu_ps(m, row + j);
        if (bias)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
        const __m512 e = exp512(_mm512_sub_ps(v, top));
        _mm512_mask_storeu_ps(row + j, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    return 1.0f / _mm512_reduce_add_ps(sum);
}

/* The horizontal sum and largest of 8 lanes. */
static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline float hmax256(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* The same at 256 bits, the tail (under 8) by the scalar form. */
static inline float softexp_256(float *row, int len, const float *bias)
{
    const int full = len & ~7;
    __m256 mx = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
    for (int j = 0; j < full; j += 8) {
        __m256 v = _mm256_loadu_ps(row + j);
        if (bias)
            v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
        mx = _mm256_max_ps(mx, v);
    }
    float top = hmax256(mx);
    for (int j = full; j < len; j++)
        top = fmaxf(top, row[j] + (bias ? bias[j] : 0.0f));
    const __m256 topv = _mm256_set1_ps(top);
    for (int j = 0; j < full; j += 8) {
        __m256 v = _mm256_loadu_ps(row + j);
        if (bias)
            v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
        const __m256 e = exp256(_mm256_sub_ps(v, topv));
        _mm256_storeu_ps(row + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = hsum256(sum);
    for (int j = full; j < len; j++)
        total += (row[j] = kc_exp1(row[j] + (bias ? bias[j] : 0.0f) - top));
    return 1.0f / total;
}
/* exp512 on 16 floats in place. */
static G512 void exp_store512(float *x)
{
    _mm512_storeu_ps(x, exp512(_mm512_loadu_ps(x)));
}
/* softexp_512 / _256 over rows [0, rows) of sc (row stride ld), row i's
 * bias at pb - i (pb NULL: none), 1 / its sum to inv[i]: one call and one
 * choice of width per head, not per row (with sentences' rows of ~12
 * scores, the per-row calls cost more than the row). */
static G512 void softexp_rows_512(float *sc, size_t ld, int len, int rows, const float *pb,
                                  float *inv)
{
    for (int i = 0; i < rows; i++)
        inv[i] = softexp_512(sc + (size_t)i * ld, len, pb ? pb - i : NULL);
}

static void softexp_rows_256(float *sc, size_t ld, int len, int rows, const float *pb,
                             float *inv)
{
    for (int i = 0; i < rows; i++)
        inv[i] = softexp_256(sc + (size_t)i * ld, len, pb ? pb - i : NULL);
}
#define KC_EXP_SIMD 1
#endif

void kc_exp(float *x, int n)
{
    int i = 0;
#ifdef KC_EXP_SIMD
    const bool wide = kc_isa_get()->avx512;
    for (; wide && i + 16 <= n; i += 16)
        exp_store512(x + i);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, exp256(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++)
        x[i] = kc_exp1(x[i]);
}

/* exp(row + bias - the largest of them) in place for rows [0, rows) of sc
 * (row stride ld), row i's bias at pb - i (pb NULL: none); inv[i] = 1 / row
 * i's sum (the attention scales its output rows by it instead of the
 * scores). */
static void softexp_rows(float *sc, size_t ld, int len, int rows, const float *pb, float *inv)
{
#ifdef KC_EXP_SIMD
    if (kc_isa_get()->avx512)
        softexp_rows_512(sc, ld, len, rows, pb, inv);
    else
        softexp_rows_256(sc, ld, len, rows, pb, inv);
#else
    for (int i = 0; i < rows; i++) {
        float *row = sc + (size_t)i * ld, top = -INFINITY, total = 0.0f;
        for (int j = 0; j < len; j++) {
            row[j] += pb ? pb[j - i] : 0.0f;
            top = fmaxf(top, row[j]);
        }
        for (int j = 0; j < len; j++)
            total += (row[j] = kc_exp1(row[j] - top));
        inv[i] = 1.0f / total;
    }
#endif
}

/* softexp_rows with, when causal, row i's scores past column i left out
 * (zero after: the product with V reads them as weights). */
static void softexp_mask(float *sc, size_t ld, int len, int rows, const float *pb, bool causal,
                         float *inv)
{
    if (!causal) {
        softexp_rows(sc, ld, len, rows, pb, inv);
        return;
    }
    for (int i = 0; i < rows; i++) {
        float *row = sc + (size_t)i * ld;
        softexp_rows(row, ld, i + 1 < len ? i + 1 : len, 1, pb ? pb - i : NULL, inv + i);
        for (int j = i + 1; j < len; j++)
            row[j] = 0.0f;
    }
}

void kc_softmax(float *row, int len, const float *bias)
{
    if (len <= 0)
        return;
    float inv;
    softexp_rows(row, 0, len, 1, bias, &inv);
    for (int j = 0; j < len; j++)
        row[j] *= inv;
}

/* ------------------------------------------------------------------------
 * layernorm: two passes per row (mean, then variance of the centred values)
 * for accuracy; eps inside the square root as BERT.
 * ---------------------------------------------------------------------- */

/* The sum of n floats in 8 lanes (the compiler may not reorder a scalar
 * sum, and a chain of 384 dependent adds cost more than the rest of the
 * LayerNorm: 7% of an int8g forward at batch 16 before this). */
#ifdef __AVX2__
static float sum8(const float *v, int n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= n; c += 16) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(v + c));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(v + c + 8));
    }
    float lanes[8], s = 0.f;
    _mm256_storeu_ps(lanes, _mm256_add_ps(a0, a1));
    for (int i = 0; i < 8; i++)
        s += lanes[i];
    for (; c < n; c++)
        s += v[c];
    return s;
}

/* The sum of (v[c] - mean)^2, in 8 lanes as sum8. */
static float sqdev8(const float *v, int n, float mean)
{
    const __m256 mu = _mm256_set1_ps(mean);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= n; c += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(v + c), mu);
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(v + c + 8), mu);
        a0 = _mm256_fmadd_ps(d0, d0, a0);
        a1 = _mm256_fmadd_ps(d1, d1, a1);
    }
    float lanes[8], s = 0.f;
    _mm256_storeu_ps(lanes, _mm256_add_ps(a0, a1));
    for (int i = 0; i < 8; i++)
        s += lanes[i];
    for (; c < n; c++)
        s += (v[c] - mean) * (v[c] - mean);
    return s;
}
#else
static float sum8(const float *v, int n)
{
    float s = 0.f;
    for (int c = 0; c < n; c++)
        s += v[c];
    return s;
}

static float sqdev8(const float *v, int n, float mean)
{
    float s = 0.f;
    for (int c = 0; c < n; c++)
        s += (v[c] - mean) * (v[c] - mean);
    return s;
}
#endif

void kc_layernorm(const float *x, const float *res, const float *g, const float *b,
                  int t, int h, float eps, float *out)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < t; r++) {
        const float *xr = x + (size_t)r * h;
        const float *rr = res ? res + (size_t)r * h : NULL;
        float *o = out + (size_t)r * h;
        for (int c = 0; c < h; c++)
            o[c] = xr[c] + (rr ? rr[c] : 0.f);
        const float mean = sum8(o, h) / (float)h;
        const float rstd = 1.0f / sqrtf(sqdev8(o, h, mean) / (float)h + eps);
        for (int c = 0; c < h; c++)
            o[c] = (o[c] - mean) * rstd * g[c] + b[c];
    }
}

/* ------------------------------------------------------------------------
 * attention: one (sequence, head) pair per OpenMP task: scores = Q K^T
 * scaled, a row softmax (its exps, then 1 / their sum), out = E V with each
 * row times its 1 / sum. Q, K, V are read in place from the packed qkv rows
 * (leading dimension 3h).
 *
 * The two GEMMs run on one micro-kernel of our own where the head size is
 * a whole number of vectors (MiniLM's 32, MPNet's 64): C (R rows x 2
 * vectors) = A (R x k) B (k x 2 vectors), A's entries broadcast, B's rows
 * loaded, 2R FMAs per step of k (AVX-512: R = 8, 16 accumulators; AVX2:
 * R = 4, 8), and a one-vector form for an odd last vector. For the scores
 * B is K transposed into the thread's scratch, zero-padded to a whole
 * number of vectors; for the output B is V in place and A the exps.
 * oneDNN's sgemm, called twice per head, spent more on each call and on
 * packing these tiny matrices than on the products; it stays for other
 * head sizes and for builds without AVX2. Figures:
 * bench/results/attention-2026-11-27.md (bench/attention.c).
 * ---------------------------------------------------------------------- */

#if defined(__AVX2__) && defined(__FMA__)
/* C = A B as above for NV = 2 vectors of columns (att_mk2_W) or 1
 * (att_mk1_W, a last block of one vector), row r of C times alpha, or
 * times rs[r] where rs is not NULL; rows <= R: the rows past them read A's
 * last row and are not stored. */
#define ATT_MK(W, TARGET, R, NV)                                                           \
    static TARGET void att_mk##NV##_##W(const float *a, size_t lda, const float *b,        \
                                        size_t ldb, int k, float *c, size_t ldc, int rows, \
                                        float alpha, const float *rs)                      \
    {                                                                                      \
        const int lanes = W / 32;                                                          \
        __m##W c0[R], c1[R];                                                               \
        const float *ar[R];                                                                \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                \
        {                                                                                  \
            c0[r] = c1[r] = GV(W, setzero_ps)();                                           \
            ar[r] = a + (size_t)(r < rows ? r : rows - 1) * lda;                           \
        }                                                                                  \
        for (int p = 0; p < k; p++) {                                                      \
            const __m##W b0 = GV(W, loadu_ps)(b + (size_t)p * ldb);                        \
            const __m##W b1 = NV > 1 ? GV(W, loadu_ps)(b + (size_t)p * ldb + lanes) : b0;  \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                            \
            {                                                                              \
                const __m##W av = GV(W, set1_ps)(ar[r][p]);                                \
                c0[r] = GV(W, fmadd_ps)(av, b0, c0[r]);                                    \
                if (NV > 1)                                                                \
                    c1[r] = GV(W, fmadd_ps)(av, b1, c1[r]);                                \
            }                                                                              \
        }                                                                                  \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                \
        {                                                                                  \
            if (r >= rows)                                                                 \
                break;                                                                     \
            const __m##W f = GV(W, set1_ps)(rs ? rs[r] : alpha);                           \
            GV(W, storeu_ps)(c + (size_t)r * ldc, GV(W, mul_ps)(c0[r], f));                \
            if (NV > 1)                                                                    \
                GV(W, storeu_ps)(c + (size_t)r * ldc + lanes, GV(W, mul_ps)(c1[r], f));    \
        }                                                                                  \
    }

ATT_MK(256, , 4, 2)
ATT_MK(256, , 4, 1)
ATT_MK(512, G512, 8, 2)
ATT_MK(512, G512, 8, 1)

/* C (rows x cols, cols a multiple of the vector) = A B: blocks of two
 * vectors, the last of one where cols is odd in vectors. */
static void att_gemm(const float *a, size_t lda, const float *b, size_t ldb, int k, float *c,
                     size_t ldc, int rows, size_t cols, float alpha, const float *rs, bool wide)
{
    const size_t lanes = wide ? 16 : 8;
    size_t j = 0;
    for (; j + 2 * lanes <= cols; j += 2 * lanes)
        (wide ? att_mk2_512 : att_mk2_256)(a, lda, b + j, ldb, k, c + j, ldc, rows, alpha, rs);
    if (j < cols)
        (wide ? att_mk1_512 : att_mk1_256)(a, lda, b + j, ldb, k, c + j, ldc, rows, alpha, rs);
}
#define KC_ATT_OWN 1
#endif

/* The scratch one task of the own kernel needs, in floats: K transposed
 * (dh x lp), the scores (len x lp), the 1 / sums (len); lp = len rounded up
 * to whole vectors. */
static size_t att_lp(int len, bool wide)
{
    const int lanes = wide ? 16 : 8;
    return (size_t)((len + lanes - 1) / lanes * lanes);
}

#ifdef KC_ATT_OWN
/* kt (dh x lp) = k (len x dh, row stride ks) transposed, columns len..lp
 * zero; dh a multiple of 8: 8 x 8 blocks through registers (unpack,
 * shuffle, permute: 24 instructions a block), the last len % 8 rows one by
 * one. Scalar, it was about a tenth of a passage's attention. */
static void att_transpose(const float *k, size_t ks, int len, int dh, float *kt, size_t lp)
{
    int j = 0;
    for (; j + 8 <= len; j += 8)
        for (int d = 0; d < dh; d += 8) {
            __m256 r[8], t[8];
            for (int a = 0; a < 8; a++)
                r[a] = _mm256_loadu_ps(k + (size_t)(j + a) * ks + d);
            for (int a = 0; a < 8; a += 2) {
                t[a] = _mm256_unpacklo_ps(r[a], r[a + 1]);
                t[a + 1] = _mm256_unpackhi_ps(r[a], r[a + 1]);
            }
            for (int a = 0; a < 8; a += 4) {
                r[a] = _mm256_shuffle_ps(t[a], t[a + 2], 0x44);
                r[a + 1] = _mm256_shuffle_ps(t[a], t[a + 2], 0xee);
                r[a + 2] = _mm256_shuffle_ps(t[a + 1], t[a + 3], 0x44);
                r[a + 3] = _mm256_shuffle_ps(t[a + 1], t[a + 3], 0xee);
            }
            for (int a = 0; a < 4; a++) {
                t[a] = _mm256_permute2f128_ps(r[a], r[a + 4], 0x20);
                t[a + 4] = _mm256_permute2f128_ps(r[a], r[a + 4], 0x31);
            }
            for (int a = 0; a < 8; a++)
                _mm256_storeu_ps(kt + (size_t)(d + a) * lp + j, t[a]);
        }
    for (; j < len; j++)
        for (int d = 0; d < dh; d++)
            kt[(size_t)d * lp + j] = k[(size_t)j * ks + d];
    for (int d = 0; d < dh; d++)
        for (size_t c = (size_t)len; c < lp; c++)
            kt[(size_t)d * lp + c] = 0.0f;
}
#endif

/* One (sequence, head) on the own kernel: q, k, v at the head's first
 * row, pb the head's bias row at offset 0 for query 0 (pb[j - i]) or NULL. */
static void att_task_own(const float *q, const float *k, const float *v, float *o, int len,
                         int dh, int stride, int hid, float scale, const float *pb, bool causal,
                         float *scratch, bool wide)
{
#ifdef KC_ATT_OWN
    const int rb = wide ? 8 : 4;
    const size_t lp = att_lp(len, wide);
    float *kt = scratch, *sc = kt + (size_t)dh * lp, *inv = sc + (size_t)len * lp;
    att_transpose(k, (size_t)stride, len, dh, kt, lp);
    for (int i0 = 0; i0 < len; i0 += rb)
        att_gemm(q + (size_t)i0 * stride, (size_t)stride, kt, lp, dh, sc + (size_t)i0 * lp, lp,
                 len - i0 < rb ? len - i0 : rb, lp, scale, NULL, wide);
    softexp_mask(sc, lp, len, len, pb, causal, inv);
    for (int i0 = 0; i0 < len; i0 += rb)
        att_gemm(sc + (size_t)i0 * lp, lp, v, (size_t)stride, len, o + (size_t)i0 * hid,
                 (size_t)hid, len - i0 < rb ? len - i0 : rb, (size_t)dh, 1.0f, inv + i0, wide);
#else
    (void)q, (void)k, (void)v, (void)o, (void)len, (void)dh, (void)stride, (void)hid;
    (void)scale, (void)pb, (void)causal, (void)scratch, (void)wide;
#endif
}

/* The same on oneDNN's sgemm (row-major); scratch: the scores (len x len)
 * and the 1 / sums. Returns 0, or -1 when oneDNN fails. */
static int att_task_dnnl(const float *q, const float *k, const float *v, float *o, int len,
                         int dh, int stride, int hid, float scale, const float *pb, bool causal,
                         float *scratch)
{
    float *sc = scratch, *inv = sc + (size_t)len * len;
    if (dnnl_sgemm('N', 'T', len, len, dh, scale, q, stride, k, stride, 0.0f, sc, len) !=
        dnnl_success)
        return -1;
    softexp_mask(sc, (size_t)len, len, len, pb, causal, inv);
    if (dnnl_sgemm('N', 'N', len, dh, len, 1.0f, sc, len, v, stride, 0.0f, o, hid) !=
        dnnl_success)
        return -1;
    for (int i = 0; i < len; i++)
        for (int d = 0; d < dh; d++)
            o[(size_t)i * hid + d] *= inv[i];
    return 0;
}

/* A task's work, roughly: its two GEMMs (len^2 dh each) and its softmax
 * and transposition. */
static double att_cost(int len, int dh)
{
    return (double)len * ((double)len * (2.0 * dh + 16.0) + dh);
}

int kc_attention(const float *qkv, const int32_t *offsets, int nseq, int heads, int dh,
                 float *out)
{
    return kc_attention_bias(qkv, offsets, nseq, heads, dh, NULL, 0, out);
}

int kc_attention_bias(const float *qkv, const int32_t *offsets, int nseq, int heads, int dh,
                      const float *pos_bias, int maxrel, float *out)
{
    const kc_attn a = {.heads = heads, .kv_heads = heads, .dh = dh, .pos_bias = pos_bias,
                       .maxrel = maxrel};
    return kc_attention_ex(qkv, offsets, nseq, &a, out);
}

int kc_attention_ex(const float *qkv, const int32_t *offsets, int nseq, const kc_attn *a,
                    float *out)
{
    const int heads = a->heads, dh = a->dh, maxrel = a->maxrel, grp = heads / a->kv_heads;
    const float *pos_bias = a->pos_bias;
    const int hid = heads * dh, kvw = a->kv_heads * dh, stride = hid + 2 * kvw;
    if (a->kv_heads < 1 || heads % a->kv_heads)
        return -3;
    const float scale = 1.0f / sqrtf((float)dh);
    int maxlen = 0, failed = 0;
    double total = 0.0;
    for (int s = 0; s < nseq; s++) {
        const int len = offsets[s + 1] - offsets[s];
        maxlen = len > maxlen ? len : maxlen;
        total += heads * att_cost(len, dh);
    }
    if (maxlen == 0)
        return 0;
    if (pos_bias && maxlen > maxrel + 1)
        return -2;
#ifdef KC_ATT_OWN
    const bool wide = kc_isa_get()->avx512, own = dh % (wide ? 16 : 8) == 0;
#else
    const bool wide = false, own = false;
#endif
    /* the own kernel up to this length; past it oneDNN's sgemm was as fast
     * or faster (AVX-512: even at 256 tokens; AVX2: 7-15% faster from 64;
     * bench/results/attention-2026-11-27.md) */
    const int own_below = wide ? 256 : 64;
    const size_t lp = att_lp(maxlen, wide);
    const size_t own_floats = (size_t)dh * lp + (size_t)maxlen * lp + (size_t)maxlen;
    const size_t dnnl_floats = (size_t)maxlen * maxlen + (size_t)maxlen;
    const size_t floats = own && own_floats > dnnl_floats ? own_floats : dnnl_floats;

    /* Each thread takes a run of tasks of about equal cost (att_cost), as a
     * static schedule does but for ragged batches too: libgomp's dynamic
     * schedule cost more than the work itself with sentences (32 x 12
     * tokens: 200 us a call against 85 us static, 2 threads). */
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), me = omp_get_thread_num();
        float *scratch = (float *)(void *)kc_scratch(sizeof(float) * floats);
        double before = 0.0;
        for (int task = 0; task < nseq * heads; task++) {
            const int s = task / heads, hd = task % heads;
            const int base = offsets[s], len = offsets[s + 1] - base;
            const double c = att_cost(len, dh);
            const int owner = (int)((before + c / 2) * nt / total);
            before += c;
            if (len == 0 || (owner < nt ? owner : nt - 1) != me)
                continue;
            const float *q = qkv + (size_t)base * stride + hd * dh;
            const float *k = qkv + (size_t)base * stride + hid + (hd / grp) * dh;
            const float *pb =
                pos_bias ? pos_bias + (size_t)hd * (2 * maxrel + 1) + maxrel : NULL;
            float *o = out + (size_t)base * hid + hd * dh;
            if (!scratch) {
#pragma omp atomic write
                failed = 1;
            } else if (own && len < own_below) {
                att_task_own(q, k, k + kvw, o, len, dh, stride, hid, scale, pb, a->causal,
                             scratch, wide);
            } else if (att_task_dnnl(q, k, k + kvw, o, len, dh, stride, hid, scale, pb, a->causal,
                                     scratch) != 0) {
#pragma omp atomic write
                failed = 1;
            }
        }
    }
    return failed ? -1 : 0;
}

/* ------------------------------------------------------------------------
 * embeddings and pooling
 * ---------------------------------------------------------------------- */

void kc_embed(const int32_t *ids, const int32_t *offsets, const int32_t *segs, int nseq,
              const float *word, const float *pos, const float *type0, const float *type1, int h,
              float *out)
{
#pragma omp parallel for schedule(static)
    for (int s = 0; s < nseq; s++) {
        for (int i = offsets[s]; i < offsets[s + 1]; i++) {
            const float *w = word + (size_t)ids[i] * h;
            const float *ty = segs && i - offsets[s] >= segs[s] ? type1 : type0;
            float *o = out + (size_t)i * h;
            if (!pos) { /* rotary rows: positions enter in the attention */
                for (int c = 0; c < h; c++)
                    o[c] = w[c] + ty[c];
                continue;
            }
            const float *p = pos + (size_t)(i - offsets[s]) * h;
            for (int c = 0; c < h; c++)
                o[c] = w[c] + p[c] + ty[c];
        }
    }
}

void kc_mean_pool(const float *x, const int32_t *offsets, int nseq, int h, bool normalize,
                  float *out)
{
#pragma omp parallel for schedule(static)
    for (int s = 0; s < nseq; s++) {
        float *o = out + (size_t)s * h;
        int len = offsets[s + 1] - offsets[s];
        for (int c = 0; c < h; c++)
            o[c] = 0.f;
        for (int i = offsets[s]; i < offsets[s + 1]; i++) {
            const float *r = x + (size_t)i * h;
            for (int c = 0; c < h; c++)
                o[c] += r[c];
        }
        /* sentence-transformers divides by the mask sum clamped at 1e-9 */
        float inv = 1.0f / (len > 0 ? (float)len : 1e-9f);
        for (int c = 0; c < h; c++)
            o[c] *= inv;
        if (normalize) {
            float n2 = 0.f;
            for (int c = 0; c < h; c++)
                n2 += o[c] * o[c];
            float nrm = sqrtf(n2);
            float k = 1.0f / (nrm > 1e-12f ? nrm : 1e-12f);
            for (int c = 0; c < h; c++)
                o[c] *= k;
        }
    }
}
