/* quant.c: FP32 GEMM weights -> resident precisions (quant.h), the
 * per-channel calibration of their scales, and the op policy table. */
#include "engine/quant/quant.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
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
    return (unsigned)p < MT_PREC_COUNT && mt_prec(p)->has_scales;
}

size_t mt_quant_data_bytes(mt_precision p, int n, int k)
{
    return (unsigned)p < MT_PREC_COUNT ? (size_t)n * (size_t)k * mt_prec(p)->bytes : 0;
}

size_t mt_quant_scale_groups(mt_precision p, int k)
{
    if (!mt_quant_has_scales(p))
        return 0;
    const int g = mt_prec(p)->group;
    return g > 0 && k > 0 ? (size_t)((k + g - 1) / g) : 1;
}

size_t mt_quant_scale_count(mt_precision p, int n, int k)
{
    return n > 0 ? (size_t)n * mt_quant_scale_groups(p, k) : 0;
}

size_t mt_quant_total_bytes(mt_precision p, int n, int k)
{
    return mt_quant_data_bytes(p, n, k) + mt_quant_scale_count(p, n, k) * sizeof(float);
}

/* ========================================================================
 * calibration: the clip value c of one channel; scale = c / qmax
 * (qmax 127 for int8, 448 for E4M3); values beyond c saturate.
 *
 *   absmax      c = max |w|: nothing saturates.
 *   percentile  c = the given percentile of |w| (numpy's definition, see
 *               percentile_abs): a few large values saturate.
 *   mse         c minimising sum (w - dequant(quant(w)))^2 over a grid of
 *               ratios of absmax, for the format's own grid (see mse_clip).
 *
 * channel_clip returns 0 only for an all-zero channel, and otherwise a clip
 * of at least qmax * FLT_MIN, so that clip_to_scale never gives 0, inf or a
 * denormal scale (a denormal scale would read as 0 under flush-to-zero /
 * denormals-are-zero, as GPU kernels and some BLAS builds run).
 *
 * Every method works per output channel on its own row and needs at most
 * the per-thread scratch below, so mt_quantize can hand channels to OpenMP
 * threads in any order and still get the same bits.
 * ====================================================================== */

/* The largest code magnitude of an 8-bit format: the clip maps onto it. */
static float qmax_of(mt_precision p)
{
    return mt_prec(p)->format == NF_I8 ? 127.0f : 448.0f;
}

/* Scratch one thread needs to calibrate and quantize one channel of k
 * values: f, k floats (the |w| copy percentile selects in, or the row
 * divided by the scale before E4M3 encoding); g, k floats (a decoded row,
 * for mse's exact check); b, k bytes (trial codes, for the same). */
typedef struct {
    float *f;
    float *g;
    uint8_t *b;
} chan_scratch;

/* The one place a clip becomes a scale, so the mse search and the final
 * quantization of a channel use bit-identical scales. The scale is kept a
 * normal float (>= FLT_MIN) and nudged down when qmax * scale would round
 * to inf (clips near FLT_MAX), so the largest code still decodes finite. */
static float clip_to_scale(float clip, mt_precision p)
{
    if (!(clip > 0.f))
        return 1.0f; /* all-zero channel: codes 0, and no 0/0 anywhere */
    float qmax = qmax_of(p);
    float s = clip / qmax;
    if (!(s >= FLT_MIN))
        s = FLT_MIN;
    while (!isfinite(qmax * s))
        s = nextafterf(s, 0.f);
    return s;
}

/* min / max of two non-negative, non-NaN floats, compared as integers
 * (their bit patterns order as their values do). fminf / fmaxf carry
 * NaN rules that keep GCC from vectorising them, and a float ?: is a
 * branch it will not if-convert at -O2 without -fno-trapping-math; the
 * integer forms become vpminud / vpmaxud. */
static inline float min_nonneg(float a, float b)
{
    uint32_t x = nf_bits(a), y = nf_bits(b);
    return nf_float(x < y ? x : y);
}

static inline float max_nonneg(float a, float b)
{
    uint32_t x = nf_bits(a), y = nf_bits(b);
    return nf_float(x > y ? x : y);
}

/* max |w| of a channel, as the largest |w| bit pattern (weights are known
 * finite here, so no NaN pattern can win). */
static float absmax(const float *w, int k)
{
    uint32_t m = 0;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < k; i++) {
        uint32_t u = nf_bits(w[i]) & 0x7fffffffu;
        m = m > u ? m : u;
    }
    return nf_float(m);
}

/* The FP8 encoding of one channel: divide by the scale (as nf_encode does
 * for a scaled E4M3 encode, so the two agree bit for bit), then the
 * saturating E4M3 encoder. tmp holds the k scaled values. */
static void fp8_encode_row(const float *w, int k, float s, float *tmp, uint8_t *dst)
{
#pragma omp simd
    for (int i = 0; i < k; i++)
        tmp[i] = w[i] / s;
    nf_f32_to_e4m3_array(tmp, dst, (size_t)k);
}

/* ---- percentile -------------------------------------------------------- */

/* Exchanges two elements, for select_nth. */
static void swapf(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

/* qsort order for select_nth's fallback (values are finite). */
static int cmp_float(const void *pa, const void *pb)
{
    float a = *(const float *)pa, b = *(const float *)pb;
    return (a > b) - (a < b);
}

/* nth_element: reorders a[0..n) so that a[nth] is the value a full sort
 * would put there, everything before it <= it and everything after >= it.
 * Quickselect with a median-of-three pivot and a Hoare partition (which
 * splits runs of equal values evenly, so rows of ties stay linear too);
 * the expected cost is O(n). After 64 rounds (far more than a reasonable
 * pivot sequence needs for any n here) the remaining range is sorted
 * instead, which bounds an adversarial row at O(n log n). Values are
 * finite (NaN was rejected before). */
static void select_nth(float *a, ptrdiff_t n, ptrdiff_t nth)
{
    ptrdiff_t lo = 0, hi = n - 1;
    for (int round = 0; hi > lo; round++) {
        if (round == 64) {
            qsort(a + lo, (size_t)(hi - lo + 1), sizeof *a, cmp_float);
            return;
        }
        ptrdiff_t mid = lo + (hi - lo) / 2;
        /* order a[lo] <= a[mid] <= a[hi]; the median is the pivot */
        if (a[mid] < a[lo])
            swapf(&a[mid], &a[lo]);
        if (a[hi] < a[lo])
            swapf(&a[hi], &a[lo]);
        if (a[hi] < a[mid])
            swapf(&a[hi], &a[mid]);
        float pivot = a[mid];
        ptrdiff_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j) {
                swapf(&a[i], &a[j]);
                i++;
                j--;
            }
        }
        /* now a[lo..j] <= pivot, a[i..hi] >= pivot, a[j+1..i-1] == pivot */
        if (nth <= j)
            hi = j;
        else if (nth >= i)
            lo = i;
        else
            return;
    }
}

/* The pct-th percentile of |w| over a channel, with numpy's default
 * definition (np.percentile(|w|, pct), method "linear", Hyndman & Fan
 * type 7): sort |w| ascending into a[0..k), take the virtual index
 * h = (k - 1) * pct / 100, and interpolate linearly between a[floor(h)]
 * and a[floor(h) + 1] with weight t = h - floor(h). The lerp is written as
 * numpy writes it (a + (b - a) t for t < 0.5, b - (b - a)(1 - t) above),
 * in double, so both ends are exact: pct 100 is max |w|, pct 0 min |w|.
 * Two selections instead of a sort: a[floor(h)] by select_nth, then
 * a[floor(h) + 1] as the smallest value to its right. */
static double percentile_abs(const float *w, int k, double pct, float *tmp)
{
#pragma omp simd
    for (int i = 0; i < k; i++)
        tmp[i] = fabsf(w[i]);
    double h = (double)(k - 1) * (pct / 100.0);
    ptrdiff_t lo = (ptrdiff_t)floor(h);
    if (lo < 0)
        lo = 0;
    if (lo > k - 1)
        lo = k - 1;
    double t = h - (double)lo;
    select_nth(tmp, k, lo);
    double a = tmp[lo];
    if (lo + 1 > k - 1 || !(t > 0.0))
        return a;
    uint32_t bmin = nf_bits(tmp[lo + 1]);
#pragma omp simd reduction(min : bmin)
    for (ptrdiff_t i = lo + 2; i < k; i++) {
        uint32_t u = nf_bits(tmp[i]);
        bmin = bmin < u ? bmin : u;
    }
    double b = nf_float(bmin), d = b - a;
    return t >= 0.5 ? b - d * (1.0 - t) : a + d * t;
}

/* ---- mse ---------------------------------------------------------------- */

/* Sum over a channel of (w - dequant(quant(w)))^2 at scale s, made with the
 * library's own encoders and decoders (the very calls mt_quantize and
 * mt_dequantize make), so it is exactly the error the stored weight will
 * have. Differences are taken and summed in double: exact for the
 * difference of two nearby floats, and no overflow near FLT_MAX. Used to
 * confirm the search's pick (mse_clip), not inside the search. */
static double channel_sq_error(const float *w, int k, mt_precision p, float s, chan_scratch *sc)
{
    double e = 0.0;
    const float *deq = sc->g;
    if (mt_prec(p)->format == NF_I8) {
        nf_f32_to_i8_array(w, (int8_t *)sc->b, (size_t)k, s);
        nf_i8_to_f32_array((const int8_t *)sc->b, sc->g, (size_t)k, s);
#pragma omp simd reduction(+ : e)
        for (int i = 0; i < k; i++) {
            double d = (double)w[i] - (double)deq[i];
            e += d * d;
        }
    } else {
        fp8_encode_row(w, k, s, sc->f, sc->b);
        nf_e4m3_to_f32_array(sc->b, sc->g, (size_t)k);
#pragma omp simd reduction(+ : e)
        for (int i = 0; i < k; i++) {
            float v = deq[i] * s; /* as mt_dequantize: decode, then times scale */
            double d = (double)w[i] - (double)v;
            e += d * d;
        }
    }
    return e;
}

/* 2^floor(log2 x) for a finite x > 0 of normal magnitude, 0 for 0 and FP32
 * denormals: x with its mantissa bits cleared. */
static inline float pow2_floor(float x)
{
    return nf_float(nf_bits(x) & 0x7f800000u);
}

/* Elements between two looks at the running error of a trial. */
#define MSE_BLOCK 256

/* The same squared error as channel_sq_error in one fused pass, for the
 * search: |w| / s saturated at qmax and rounded to the format's grid in
 * float arithmetic, compared with |w| (the grids are symmetric, so the
 * sign does not change the error). The rounding uses x + M - M, which in
 * round-to-nearest-even leaves x rounded to a multiple of ulp(M):
 *   int8: M = 2^23, so multiples of 1, ties to even, as nf_f32_to_i8;
 *   E4M3: M = max(2^floor(log2 x), 2^-6) * 2^20, so 3 mantissa bits below
 *         the leading one for normals (carry into the next binade
 *         included) and multiples of 2^-9 in the subnormal range, ties to
 *         even, as nf_f32_to_e4m3 after its clamp to 448.
 * Division by s, as the encoders do, so the values are the stored ones;
 * only the order of summation differs (and mse_clip re-checks its pick
 * with channel_sq_error). The loop has no branches and vectorises.
 * Stops early, returning a value > limit, once the running sum passes
 * limit (the best error so far), which cuts the cost of hopeless
 * candidates. Assumes the default rounding mode, as the int8 encoder's
 * scalar twin does not; the re-check keeps the outcome safe regardless. */
static double trial_sq_error(const float *w, int k, mt_precision p, float s, double limit)
{
    double e = 0.0;
    for (int b = 0; b < k; b += MSE_BLOCK) {
        int end = k - b < MSE_BLOCK ? k : b + MSE_BLOCK;
        float eb = 0.0f;
        if (mt_prec(p)->format == NF_I8) {
#pragma omp simd reduction(+ : eb)
            for (int i = b; i < end; i++) {
                float a = fabsf(w[i]);
                float x = min_nonneg(a / s, 127.0f);
                float r = (x + 0x1p23f) - 0x1p23f;
                float d = a - r * s;
                eb += d * d;
            }
        } else {
#pragma omp simd reduction(+ : eb)
            for (int i = b; i < end; i++) {
                float a = fabsf(w[i]);
                float x = min_nonneg(a / s, 448.0f);
                float m = max_nonneg(pow2_floor(x), 0x1p-6f) * 0x1p20f;
                float r = (x + m) - m;
                float d = a - r * s;
                eb += d * d;
            }
        }
        e += eb;
        if (e > limit)
            break;
    }
    return e;
}

/* Candidate clip ratios (of absmax) for the mse search, largest first:
 *   - 101 ratios 1.000, 0.995, ..., 0.500. 1.0 is first, and a candidate
 *     replaces the best only when strictly better, so ties go to the
 *     larger clip (less saturation). Steps of 0.5% of absmax are finer
 *     than either grid's own: one int8 step is 0.8% of the clip, one E4M3
 *     step near the top 12.5% of it. For fp8 the octave [0.5, 1] holds
 *     every alignment of the E4M3 grid (its relative error repeats each
 *     power of two), so lower clips mostly add saturation.
 *   - 12 coarser ratios 0.5 * 2^(-j/4), j = 1..12, down to 1/16: int8's
 *     rounding error grows with the square of the clip, so a channel with
 *     many moderate outliers (a heavy tail, not one spike) can do best far
 *     below half its max. When one of these wins, 14 ratios spaced 2^(1/32)
 *     around it refine the answer (the coarse step is 19%).
 * Every candidate is tried on every value of the channel (no subsampling);
 * early exit in trial_sq_error makes the bad ones cheap. */
#define MSE_FINE 101
#define MSE_COARSE 12

/* The clip of one channel that minimises the squared reconstruction error
 * over the candidates above, for p's own grid. The pick is then checked
 * against absmax with the library's codecs, so that mse is never worse
 * than absmax on the stored weight, whatever the summation order did. */
static float mse_clip(const float *w, int k, mt_precision p, float amax, chan_scratch *sc)
{
    float best_clip = amax;
    double best_err = trial_sq_error(w, k, p, clip_to_scale(amax, p), INFINITY);
    double best_ratio = 1.0;
    for (int j = 1; j < MSE_FINE + MSE_COARSE; j++) {
        double r = j < MSE_FINE ? 1.0 - j / 200.0 : 0.5 * exp2(-(j - MSE_FINE + 1) / 4.0);
        float c = (float)(r * amax);
        double e = trial_sq_error(w, k, p, clip_to_scale(c, p), best_err);
        if (e < best_err) {
            best_err = e;
            best_clip = c;
            best_ratio = r;
        }
    }
    if (best_ratio < 0.5) {
        double r0 = best_ratio;
        for (int j = -7; j <= 7; j++) {
            double r = r0 * exp2(j / 32.0);
            if (j == 0 || r >= 0.5)
                continue;
            float c = (float)(r * amax);
            double e = trial_sq_error(w, k, p, clip_to_scale(c, p), best_err);
            if (e < best_err) {
                best_err = e;
                best_clip = c;
            }
        }
    }
    if (best_clip != amax &&
        !(channel_sq_error(w, k, p, clip_to_scale(best_clip, p), sc) <=
          channel_sq_error(w, k, p, clip_to_scale(amax, p), sc)))
        best_clip = amax;
    return best_clip;
}

/* The clip of one channel by the calibration method asked for. Returns 0
 * only when the channel is all zeros; otherwise at least qmax * FLT_MIN
 * (a percentile can be 0 on a mostly-zero channel, and a clip of 0 there
 * would mean a scale of 0). */
static float channel_clip(const float *w, int k, mt_precision p, const mt_calib_opts *c,
                          chan_scratch *sc)
{
    float amax = absmax(w, k);
    if (amax == 0.f)
        return 0.f;
    float clip;
    switch (c->method) {
    case MT_CALIB_PERCENTILE:
        clip = (float)percentile_abs(w, k, c->percentile, sc->f);
        break;
    case MT_CALIB_MSE:
        clip = mse_clip(w, k, p, amax, sc);
        break;
    default:
        clip = amax;
        break;
    }
    return fmaxf(clip, qmax_of(p) * FLT_MIN);
}

/* ======================================================================== */

/* Below this many elements an absmax quantization is not worth waking the
 * OpenMP team for (it is one or two vectorised passes per channel). */
#define QUANT_PAR_MIN_ELEMS (1 << 16)

/* Rejects calibration options that would make no sense, before any work. */
static mt_status check_calib(const mt_calib_opts *c, mt_err *err)
{
    if ((unsigned)c->method >= MT_CALIB_COUNT)
        return mt_fail(err, MT_EINVAL, "unknown calibration method %d", (int)c->method);
    if (c->method == MT_CALIB_PERCENTILE && !(c->percentile >= 50.0 && c->percentile <= 100.0))
        return mt_fail(err, MT_EINVAL, "calibration percentile %g is outside 50..100",
                       c->percentile);
    return MT_OK;
}

/* One channel's whole job, the body of mt_quantize's parallel loop:
 * calibrate, then encode the row into its k codes at the chosen scale; for
 * a grouped precision each group of the row is calibrated and encoded as
 * if it were a channel of its own, into scale[0 .. groups). */
static void quantize_channel(const float *row, int k, mt_precision p, const mt_calib_opts *calib,
                             void *codes, float *scale, chan_scratch *sc)
{
    const int g = mt_prec(p)->group > 0 ? mt_prec(p)->group : k;
    for (int j0 = 0, b = 0; j0 < k; j0 += g, b++) {
        const int len = k - j0 < g ? k - j0 : g;
        float s = clip_to_scale(channel_clip(row + j0, len, p, calib, sc), p);
        scale[b] = s;
        if (mt_prec(p)->format == NF_I8)
            nf_f32_to_i8_array(row + j0, (int8_t *)codes + j0, (size_t)len, s);
        else
            fp8_encode_row(row + j0, len, s, sc->f, (uint8_t *)codes + j0);
    }
}

mt_status mt_quantize(const float *w, int n, int k, mt_precision p, const mt_calib_opts *calib,
                      void *data, float *scales, mt_err *err)
{
    static const mt_calib_opts absmax_opts = {MT_CALIB_ABSMAX, 100.0};
    if (!calib)
        calib = &absmax_opts;
    if (n < 0 || k < 0)
        return mt_fail(err, MT_EINVAL, "bad weight shape %dx%d", n, k);
    mt_status st = check_calib(calib, err);
    if (st != MT_OK)
        return st;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < k; i++)
            if (!isfinite(w[(size_t)r * k + i]))
                return mt_fail(err, MT_EFORMAT, "non-finite weight in output channel %d (column %d)",
                               r, i);
    size_t e = (size_t)n * k;
    if ((unsigned)p >= MT_PREC_COUNT)
        return mt_fail(err, MT_EINVAL, "unknown precision %d", (int)p);
    if (!mt_prec(p)->has_scales) { /* a plain conversion */
        if (e)
            nf_traits_table[mt_prec(p)->format].from_f32(w, data, e, 1.0f);
        return MT_OK;
    }
    if (!scales)
        return mt_fail(err, MT_EINVAL, "%s weights need a scale array", mt_precision_name(p));
    const size_t groups = mt_quant_scale_groups(p, k);
    if (n == 0 || k == 0) {
        for (size_t r = 0; r < (size_t)n * groups; r++)
            scales[r] = 1.0f;
        return MT_OK;
    }

    /* Channels are independent and each writes only its own codes and
     * scale, so the result is the same bits for any thread count. Scratch
     * is one block per thread the team can have, allocated up front so
     * that running out of memory is reported before any work. */
    int par = e >= QUANT_PAR_MIN_ELEMS || (calib->method != MT_CALIB_ABSMAX && n > 1);
    int nthreads = par ? omp_get_max_threads() : 1;
    size_t stride = (size_t)k * (2 * sizeof(float) + 1);
    stride = (stride + 63) & ~(size_t)63;
    unsigned char *scratch = malloc(stride * (size_t)nthreads);
    if (!scratch)
        return mt_fail(err, MT_ENOMEM, "out of memory quantizing a %dx%d weight", n, k);
#pragma omp parallel num_threads(nthreads) if (par)
    {
        unsigned char *mine = scratch + stride * (size_t)omp_get_thread_num();
        chan_scratch sc = {(float *)mine, (float *)mine + k, mine + 2 * sizeof(float) * (size_t)k};
#pragma omp for schedule(static)
        for (int r = 0; r < n; r++)
            quantize_channel(w + (size_t)r * k, k, p, calib,
                             (unsigned char *)data + (size_t)r * k, &scales[(size_t)r * groups],
                             &sc);
    }
    free(scratch);
    return MT_OK;
}

void mt_dequantize(const void *data, const float *scales, int n, int k, mt_precision p, float *out)
{
    if ((unsigned)p >= MT_PREC_COUNT || n <= 0 || k <= 0)
        return;
    const mt_precision_traits *pt = mt_prec(p);
    const nf_traits *nt = &nf_traits_table[pt->format];
    if (!pt->has_scales) {
        nt->to_f32(data, out, (size_t)n * k, 1.0f);
        return;
    }
    const int g = pt->group > 0 ? pt->group : k;
    const size_t groups = mt_quant_scale_groups(p, k);
    for (int r = 0; r < n; r++)
        for (int j0 = 0, b = 0; j0 < k; j0 += g, b++)
            nt->to_f32((const unsigned char *)data + ((size_t)r * k + j0) * pt->bytes,
                       out + (size_t)r * k + j0, (size_t)(k - j0 < g ? k - j0 : g),
                       scales[(size_t)r * groups + b]);
}

mt_status mt_weight_create(mt_backend *be, const float *w, int n, int k, mt_precision p,
                           const mt_calib_opts *calib, mt_weight **out, mt_err *err)
{
    if (!be->ops->supports(be, p))
        return mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the %s backend",
                       mt_precision_name(p), be->device);
    void *data = malloc(mt_quant_data_bytes(p, n, k));
    float *scales = mt_quant_has_scales(p) ? malloc(sizeof(float) * mt_quant_scale_count(p, n, k))
                                           : NULL;
    mt_status st;
    if (!data || (mt_quant_has_scales(p) && !scales))
        st = mt_fail(err, MT_ENOMEM, "out of memory quantizing a %dx%d weight", n, k);
    else if ((st = mt_quantize(w, n, k, p, calib, data, scales, err)) == MT_OK)
        st = be->ops->weight_upload(be, p, n, k, data, scales, out, err);
    free(data);
    free(scales);
    return st;
}
