/* test_quant.c: engine/quant/quant.c, the FP32 -> resident precision step of a
 * GEMM weight: sizes, round-trip error bounds per format, the three
 * calibration methods (absmax, percentile, mse) and their edge cases
 * (all-zero, denormal-only, outlier and non-finite channels), the
 * dequantize twin, the op policy table, calibration names, and
 * mt_weight_create on the CPU backend. Prints how long mse calibration of
 * a 1536x384 matrix takes.
 *
 * Random weights come from a generator seeded per run (printed; set
 * QUANT_TEST_SEED to replay one); the bounds checked on them hold for any
 * seed. Tests whose point is a particular shape of channel (heavy tails)
 * use fixed seeds.
 *
 * Loops over many values count failures and assert once at the end: check's
 * ck_assert records a mark point per call, which is slow in a hot loop.
 */
#include "engine/quant/quant.h"
#include "kernels/cpu/qgemm.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/numfmt.h"

/* ======================================================================== */
/* helpers                                                                  */
/* ======================================================================== */

static uint64_t run_seed;

/* splitmix64: small, good enough, and the same on every platform. */
typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_u64(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so logs of it are finite. */
static double rng_unit(rng *r)
{
    return ((double)(rng_u64(r) >> 11) + 0.5) * 0x1p-53;
}

/* Standard normal, Box-Muller. */
static double rng_normal(rng *r)
{
    double u = rng_unit(r), v = rng_unit(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* A generator for one test: the run's seed mixed with a per-test salt, so
 * tests do not share a stream. */
static rng rng_for(uint64_t salt)
{
    rng r = {run_seed ^ (salt * 0x2545f4914f6cdd1dULL)};
    return r;
}

/* n x k weights like a trained layer's: normal, each channel with its own
 * spread 10^U(-3, 0.5) so that scales differ from row to row. */
static float *random_weights(rng *r, int n, int k)
{
    float *w = malloc(sizeof(float) * (size_t)n * (size_t)k);
    ck_assert_ptr_nonnull(w);
    for (int i = 0; i < n; i++) {
        double spread = pow(10.0, -3.0 + 3.5 * rng_unit(r));
        for (int j = 0; j < k; j++)
            w[(size_t)i * k + j] = (float)(spread * rng_normal(r));
    }
    return w;
}

/* A quantized weight in host memory, with its dequantized twin. */
typedef struct {
    mt_precision p;
    int n, k;
    void *data;
    float *scales;
    float *deq;
} qw;

/* Quantizes w and dequantizes the result; fails the test on an error. */
static qw quantize_ok(const float *w, int n, int k, mt_precision p, const mt_calib_opts *c)
{
    qw q = {p, n, k, malloc(mt_quant_data_bytes(p, n, k) + 1),
            malloc(sizeof(float) * (mt_quant_scale_count(p, n, k) + 1)),
            malloc(sizeof(float) * (size_t)n * (size_t)k + 1)};
    ck_assert(q.data && q.scales && q.deq);
    mt_err err = {{0}};
    mt_status st = mt_quantize(w, n, k, p, c, q.data, q.scales, &err);
    ck_assert_msg(st == MT_OK, "mt_quantize(%s, %dx%d): %s", mt_precision_name(p), n, k, err.msg);
    mt_dequantize(q.data, q.scales, n, k, p, q.deq);
    return q;
}

static void qw_free(qw *q)
{
    free(q->data);
    free(q->scales);
    free(q->deq);
}

/* Sum of squared reconstruction errors of channel r. */
static double channel_err(const float *w, const qw *q, int r)
{
    double e = 0;
    for (int i = 0; i < q->k; i++) {
        double d = (double)w[(size_t)r * q->k + i] - (double)q->deq[(size_t)r * q->k + i];
        e += d * d;
    }
    return e;
}

static double total_err(const float *w, const qw *q)
{
    double e = 0;
    for (int r = 0; r < q->n; r++)
        e += channel_err(w, q, r);
    return e;
}

static mt_calib_opts calib(mt_calib m, double pct)
{
    mt_calib_opts c = {m, pct};
    return c;
}

/* The E4M3 NaN code never appears in a quantized weight (the encoder
 * saturates); checked wherever fp8 weights are made. */
static int fp8_nan_codes(const qw *q)
{
    int bad = 0;
    const uint8_t *c = q->data;
    for (size_t i = 0; i < (size_t)q->n * q->k; i++)
        bad += (c[i] & 0x7f) == 0x7f;
    return bad;
}

static const mt_precision scaled_precs[] = {MT_PREC_INT8, MT_PREC_FP8};

/* ======================================================================== */
/* sizes                                                                    */
/* ======================================================================== */

/* MiniLM's GEMM shapes: the 8-bit formats with their per-channel scales
 * are close to a quarter of FP32, the 16-bit ones exactly half. */
START_TEST(quant_sizes_per_precision)
{
    static const int shapes[][2] = {{384, 384}, {1536, 384}, {384, 1536}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int n = shapes[i][0], k = shapes[i][1];
        size_t e = (size_t)n * k, f32 = mt_quant_total_bytes(MT_PREC_FP32, n, k);
        ck_assert_uint_eq(f32, 4 * e);
        ck_assert_uint_eq(mt_quant_data_bytes(MT_PREC_FP32, n, k), 4 * e);
        ck_assert_uint_eq(mt_quant_total_bytes(MT_PREC_TF32, n, k), 4 * e);
        for (mt_precision p = MT_PREC_FP16; p <= MT_PREC_BF16; p++) {
            ck_assert_uint_eq(mt_quant_data_bytes(p, n, k), 2 * e);
            ck_assert_uint_eq(mt_quant_total_bytes(p, n, k), 2 * e);
            ck_assert_uint_eq(2 * mt_quant_total_bytes(p, n, k), f32);
        }
        for (size_t j = 0; j < 2; j++) {
            mt_precision p = scaled_precs[j];
            ck_assert_uint_eq(mt_quant_data_bytes(p, n, k), e);
            ck_assert_uint_eq(mt_quant_total_bytes(p, n, k), e + 4 * (size_t)n);
            double ratio = (double)mt_quant_total_bytes(p, n, k) / (double)f32;
            ck_assert_msg(ratio <= 0.27, "%s %dx%d: %.4f of fp32", mt_precision_name(p), n, k,
                          ratio);
        }
    }
    for (mt_precision p = 0; p < MT_PREC_COUNT; p++)
        ck_assert_int_eq(mt_quant_has_scales(p),
                         p == MT_PREC_INT8 || p == MT_PREC_FP8 || p == MT_PREC_INT8G);
    /* int8g: one scale per 128 inputs, the last group short */
    for (int k = 1; k <= 1536; k += 97) {
        size_t groups = (size_t)(k + 127) / 128;
        ck_assert_uint_eq(mt_quant_scale_groups(MT_PREC_INT8G, k), groups);
        ck_assert_uint_eq(mt_quant_total_bytes(MT_PREC_INT8G, 384, k),
                          (size_t)384 * k + 4 * 384 * groups);
        ck_assert_uint_eq(mt_quant_scale_count(MT_PREC_INT8, 384, k), 384);
    }
    ck_assert_uint_eq(mt_quant_scale_count(MT_PREC_FP16, 384, 384), 0);
    ck_assert(mt_quant_total_bytes(MT_PREC_INT8G, 1536, 384) <=
              0.26 * mt_quant_total_bytes(MT_PREC_FP32, 1536, 384));
}
END_TEST

/* The precision traits table agrees with itself and with the number
 * formats and file dtypes it names; names round-trip through parse. */
START_TEST(precision_traits_are_consistent)
{
    for (mt_precision p = 0; p < MT_PREC_COUNT; p++) {
        const mt_precision_traits *t = mt_prec(p);
        mt_precision back;
        ck_assert_int_eq(mt_precision_parse(t->name, &back), 0);
        ck_assert_int_eq(back, p);
        ck_assert_str_eq(mt_precision_name(p), t->name);
        ck_assert_uint_eq(st_dtype_size(t->file_dtype), t->bytes);
        ck_assert_uint_eq(nf_traits_table[t->format].bits, 8 * t->bytes);
        /* the GEMM columns: tf32 is GPU-only, int8g CPU-only */
        ck_assert_int_eq(mt_prec_gemm(p, MT_BK_CPU) == MT_GEMM_NONE, p == MT_PREC_TF32);
        ck_assert_int_eq(mt_prec_gemm(p, MT_BK_CUDA) == MT_GEMM_NONE, p == MT_PREC_INT8G);
        ck_assert_int_eq(t->tf32, p == MT_PREC_TF32);
    }
    mt_precision out;
    ck_assert_int_ne(mt_precision_parse("int4", &out), 0);
    ck_assert_int_ne(mt_precision_parse(NULL, &out), 0);
    ck_assert_str_eq(mt_precision_name(MT_PREC_COUNT), "?");
}
END_TEST

/* ======================================================================== */
/* round trips                                                              */
/* ======================================================================== */

/* Absmax on random weights, each format against the error its grid
 * allows: int8 half a step (scale / 2); E4M3 half an ulp of a 3-bit
 * mantissa (2^-4 relative) while w / scale is in the normal range, and
 * half the subnormal step (2^-10 scale) below it; fp16 2^-11 and bf16
 * 2^-8 relative for normal values. The 8-bit encoders divide by the scale
 * in FP32 first, and that rounding can carry a value just past a midpoint
 * onto it (then ties-to-even may pick the far side): hence the slack of
 * half an ulp of w / scale (2^-18 steps at most, as |w / scale| <= 127)
 * and the FP32 rounding of code * scale. The 16-bit bounds are exact. */
START_TEST(quant_round_trip_error_bounded_per_format)
{
    rng r = rng_for(1);
    const int n = 96, k = 384;
    float *w = random_weights(&r, n, k);
    long bad = 0;
    char first[256] = "";

    qw q8 = quantize_ok(w, n, k, MT_PREC_INT8, NULL);
    qw qf8 = quantize_ok(w, n, k, MT_PREC_FP8, NULL);
    qw q16 = quantize_ok(w, n, k, MT_PREC_FP16, NULL);
    qw qb16 = quantize_ok(w, n, k, MT_PREC_BF16, NULL);
    qw q32 = quantize_ok(w, n, k, MT_PREC_FP32, NULL);
    for (int i = 0; i < n; i++) {
        float s8 = q8.scales[i], sf8 = qf8.scales[i];
        for (int j = 0; j < k; j++) {
            size_t at = (size_t)i * k + j;
            double x = w[at], ax = fabs(x);
            double e8 = fabs(x - q8.deq[at]), ef8 = fabs(x - qf8.deq[at]);
            double e16 = fabs(x - q16.deq[at]), eb16 = fabs(x - qb16.deq[at]);
            double v = ax / sf8;
            int ok = e8 <= s8 * (0.5 + 0x1p-18) + ax * 0x1p-23 &&
                     abs(((int8_t *)q8.data)[at]) <= 127;
            if (v >= 0x1p-6)
                ok &= ef8 <= ax * (0x1p-4 + 0x1p-22);
            else
                ok &= ef8 <= sf8 * (0x1p-10 + 0x1p-30) + ax * 0x1p-23;
            if (ax >= 0x1p-14)
                ok &= e16 <= ax * 0x1p-11;
            else
                ok &= e16 <= 0x1p-25;
            ok &= eb16 <= ax * 0x1p-8;
            ok &= q32.deq[at] == w[at];
            if (!ok && !bad++)
                snprintf(first, sizeof first,
                         "(%d,%d) w=%a int8 %a (scale %a) fp8 %a (scale %a) fp16 %a bf16 %a", i, j,
                         x, (double)q8.deq[at], (double)s8, (double)qf8.deq[at], (double)sf8,
                         (double)q16.deq[at], (double)qb16.deq[at]);
        }
        /* absmax puts the channel's largest value on the top code */
        float amax = 0;
        for (int j = 0; j < k; j++)
            amax = fmaxf(amax, fabsf(w[(size_t)i * k + j]));
        bad += s8 != amax / 127.0f || sf8 != amax / 448.0f;
    }
    ck_assert_int_eq(fp8_nan_codes(&qf8), 0);
    ck_assert_msg(bad == 0, "seed %llu: %ld errors out of bound; first %s",
                  (unsigned long long)run_seed, bad, first);
    qw_free(&q8);
    qw_free(&qf8);
    qw_free(&q16);
    qw_free(&qb16);
    qw_free(&q32);
    free(w);
}
END_TEST

/* ======================================================================== */
/* edge cases                                                               */
/* ======================================================================== */

/* A channel of zeros (of either sign) must give scale 1 and codes that
 * decode to 0 under every method: no 0/0, no NaN, and the neighbouring
 * channels quantized as if it were not there. */
START_TEST(quant_all_zero_channel_gets_zero_codes_and_finite_scale)
{
    const int n = 4, k = 100;
    float w[4 * 100];
    for (int j = 0; j < k; j++) {
        w[j] = 0.0f;
        w[k + j] = (float)(j - 50) / 16.0f;
        w[2 * k + j] = -0.0f;
        w[3 * k + j] = j % 2 ? 0.0f : -0.0f;
    }
    for (size_t pi = 0; pi < 2; pi++)
        for (mt_calib m = 0; m < MT_CALIB_COUNT; m++) {
            mt_calib_opts c = calib(m, 99.0);
            qw q = quantize_ok(w, n, k, scaled_precs[pi], &c);
            for (int r = 0; r < n; r++) {
                if (r == 1)
                    continue;
                ck_assert_msg(q.scales[r] == 1.0f, "%s/%s row %d scale %a",
                              mt_precision_name(q.p), mt_calib_name(m), r, (double)q.scales[r]);
                for (int j = 0; j < k; j++) {
                    uint8_t code = ((uint8_t *)q.data)[r * k + j];
                    ck_assert_msg((code & 0x7f) == 0 && q.deq[r * k + j] == 0.0f,
                                  "%s/%s (%d,%d): code 0x%x", mt_precision_name(q.p),
                                  mt_calib_name(m), r, j, code);
                    if (r == 0)
                        ck_assert_int_eq(code, 0);
                }
            }
            ck_assert(isfinite(q.scales[1]) && q.scales[1] > 0.0f && q.scales[1] != 1.0f);
            qw_free(&q);
        }
}
END_TEST

/* Channels whose values are all FP32 denormals (down to the smallest,
 * 2^-149) must get a positive, finite, normal scale (a denormal scale is
 * 0 to flush-to-zero hardware), and decode to finite values no further
 * from the weights than the weights are from 0. */
START_TEST(quant_denormal_channel_has_positive_finite_scale)
{
    const int n = 3, k = 64;
    float w[3 * 64];
    for (int j = 0; j < k; j++) {
        w[j] = (j % 3 - 1) * 0x1p-149f;                     /* the smallest denormal */
        w[k + j] = (float)((j - 32) * 0x1p-136);            /* denormals, varied */
        w[2 * k + j] = j == 7 ? -0x1.fffffcp-127f : 0x1p-140f; /* largest denormal */
    }
    for (size_t pi = 0; pi < 2; pi++)
        for (mt_calib m = 0; m < MT_CALIB_COUNT; m++) {
            mt_calib_opts c = calib(m, 50.0);
            qw q = quantize_ok(w, n, k, scaled_precs[pi], &c);
            for (int r = 0; r < n; r++) {
                float s = q.scales[r];
                ck_assert_msg(isfinite(s) && s >= FLT_MIN, "%s/%s row %d: scale %a",
                              mt_precision_name(q.p), mt_calib_name(m), r, (double)s);
                for (int j = 0; j < k; j++) {
                    float x = w[r * k + j], d = q.deq[r * k + j];
                    ck_assert_msg(isfinite(d) && fabsf(x - d) <= fmaxf(fabsf(x), s),
                                  "%s/%s (%d,%d): %a -> %a", mt_precision_name(q.p),
                                  mt_calib_name(m), r, j, (double)x, (double)d);
                }
            }
            qw_free(&q);
        }
}
END_TEST

/* One spike in an otherwise small channel: absmax keeps it (scale = spike
 * / qmax, spike decodes to itself within rounding), percentile clips it
 * (smaller scale, the spike saturates to the top code), and the spike at
 * FP32's largest value still decodes finite. Then on heavy-tailed
 * channels mse finds clips whose total squared error is below absmax's. */
START_TEST(quant_single_outlier_channel)
{
    rng r = {0x5eed0001};
    const int k = 1536;
    float *w = malloc(sizeof(float) * k);
    for (int j = 0; j < k; j++)
        w[j] = (float)(0.02 * rng_normal(&r));
    const float spike = 1.5f;
    w[321] = -spike;
    for (size_t pi = 0; pi < 2; pi++) {
        mt_precision p = scaled_precs[pi];
        float qmax = p == MT_PREC_INT8 ? 127.0f : 448.0f;
        mt_calib_opts ca = calib(MT_CALIB_ABSMAX, 100), cp = calib(MT_CALIB_PERCENTILE, 99.9);
        qw qa = quantize_ok(w, 1, k, p, &ca), qp = quantize_ok(w, 1, k, p, &cp);
        ck_assert_float_eq(qa.scales[0], spike / qmax);
        ck_assert_float_eq_tol(qa.deq[321], -spike, spike * 1e-6f);
        ck_assert_float_lt(qp.scales[0], qa.scales[0] * 0.5f);
        ck_assert_float_eq(qp.deq[321], -qmax * qp.scales[0]); /* saturated */
        /* the bulk is better resolved once the spike no longer sets the grid */
        double bulk_a = 0, bulk_p = 0;
        for (int j = 0; j < k; j++)
            if (j != 321) {
                bulk_a += pow(w[j] - qa.deq[j], 2);
                bulk_p += pow(w[j] - qp.deq[j], 2);
            }
        ck_assert_msg(bulk_p < bulk_a, "%s: %g vs %g", mt_precision_name(p), bulk_p, bulk_a);
        qw_free(&qa);
        qw_free(&qp);
    }

    /* a spike at FLT_MAX: the top code times the scale must not round to inf */
    float big[4] = {FLT_MAX, -1.0f, 0.5f, -FLT_MAX};
    for (size_t pi = 0; pi < 2; pi++)
        for (mt_calib m = 0; m < MT_CALIB_COUNT; m++) {
            mt_calib_opts c = calib(m, 99.0);
            qw q = quantize_ok(big, 1, 4, scaled_precs[pi], &c);
            for (int j = 0; j < 4; j++)
                ck_assert_msg(isfinite(q.deq[j]), "%s/%s: %a", mt_precision_name(q.p),
                              mt_calib_name(m), (double)q.deq[j]);
            if (m == MT_CALIB_ABSMAX)
                ck_assert_float_eq_tol(q.deq[0], FLT_MAX, FLT_MAX * 1e-6f);
            qw_free(&q);
        }

    /* heavy tails: 64 channels of Student's t with 3 degrees of freedom
     * (normal / sqrt(chi2_3 / 3)), the tails of trained weights. At 8 bits
     * clipping gains a few percent on such channels (absmax is already
     * near the optimum), so the check is on the total, strictly below. */
    const int n = 64;
    float *t3 = malloc(sizeof(float) * n * k);
    for (int j = 0; j < n * k; j++) {
        double z = rng_normal(&r), c = 0;
        for (int d = 0; d < 3; d++) {
            double y = rng_normal(&r);
            c += y * y;
        }
        t3[j] = (float)(0.05 * z / sqrt(c / 3));
    }
    for (size_t pi = 0; pi < 2; pi++) {
        mt_precision p = scaled_precs[pi];
        mt_calib_opts ca = calib(MT_CALIB_ABSMAX, 100), cm = calib(MT_CALIB_MSE, 100);
        qw qa = quantize_ok(t3, n, k, p, &ca), qm = quantize_ok(t3, n, k, p, &cm);
        double ea = total_err(t3, &qa), em = total_err(t3, &qm);
        printf("t3 channels, %s: squared error absmax %.5g, mse %.5g (%.1f%% less)\n",
               mt_precision_name(p), ea, em, 100 * (1 - em / ea));
        ck_assert_msg(em < 0.995 * ea, "%s: mse %g, absmax %g", mt_precision_name(p), em, ea);
        qw_free(&qa);
        qw_free(&qm);
    }
    free(t3);
    free(w);
}
END_TEST

/* ======================================================================== */
/* percentile                                                               */
/* ======================================================================== */

/* numpy's percentile, method "linear", written the plain way: full sort,
 * virtual index (k - 1) q, numpy's two-sided lerp. The twin the
 * quickselect in quant.c is checked against. */
static double ref_percentile_abs(const float *w, int k, double pct)
{
    double *a = malloc(sizeof(double) * k);
    for (int i = 0; i < k; i++)
        a[i] = fabs((double)w[i]);
    for (int i = 1; i < k; i++) /* insertion sort: k is small here */
        for (int j = i; j > 0 && a[j - 1] > a[j]; j--) {
            double t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
    double h = (k - 1) * (pct / 100.0);
    int lo = (int)floor(h);
    double t = h - lo, v = a[lo];
    if (lo + 1 < k && t > 0) {
        double d = a[lo + 1] - a[lo];
        v = t >= 0.5 ? a[lo + 1] - d * (1 - t) : a[lo] + d * t;
    }
    free(a);
    return v;
}

/* A hand-checked vector: |w| sorted is 1 1 2 3 3 4 5 5 6 9 (k = 10), so
 * the virtual index of percentile p is 9p/100, and
 *   p = 50   -> h = 4.5   -> between 3 and 4 -> 3.5
 *   p = 62.5 -> h = 5.625 -> 4 + 0.625 (5 - 4) = 4.625
 *   p = 75   -> h = 6.75  -> between 5 and 5 -> 5
 *   p = 90   -> h = 8.1   -> 6 + 0.1 (9 - 6) = 6.3
 *   p = 99   -> h = 8.91  -> 6 + 0.91 * 3 = 8.73
 *   p = 100  -> h = 9     -> 9 (= absmax)
 * (np.percentile(np.abs(w), p) gives the same: 3.5, 4.625, 5.0,
 * 6.299999999999999, 8.73, 9.0). The scale is that clip / 127. */
START_TEST(quant_percentile_matches_numpy_definition)
{
    const float w[10] = {-3, 1, 4, -1, 5, -9, 2, 6, -5, 3};
    static const struct {
        double pct, want;
    } cases[] = {{50, 3.5}, {62.5, 4.625}, {75, 5.0}, {90, 6.299999999999999}, {99, 8.73},
                 {100, 9.0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mt_calib_opts c = calib(MT_CALIB_PERCENTILE, cases[i].pct);
        qw q = quantize_ok(w, 1, 10, MT_PREC_INT8, &c);
        float want = (float)cases[i].want / 127.0f;
        ck_assert_msg(q.scales[0] == want, "p%g: scale %a, want %a", cases[i].pct,
                      (double)q.scales[0], (double)want);
        qw_free(&q);
    }

    /* the quickselect against a full sort, on many shapes of channel:
     * random, many ties (values on a coarse grid), all equal, sorted,
     * reversed, odd and tiny lengths */
    rng r = rng_for(2);
    static const double pcts[] = {50, 63.7, 90, 99, 99.9, 99.99, 100};
    static const int ks[] = {1, 2, 3, 7, 64, 383, 384, 1000, 1536};
    long bad = 0;
    char first[200] = "";
    float *v = malloc(sizeof(float) * 1536);
    for (int shape = 0; shape < 5; shape++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            int k = ks[ki];
            for (int j = 0; j < k; j++) {
                double x = rng_normal(&r);
                v[j] = shape == 0   ? (float)x
                       : shape == 1 ? (float)round(x * 4)
                       : shape == 2 ? -0.75f
                       : shape == 3 ? (float)j
                                    : (float)(k - j);
            }
            for (size_t pi = 0; pi < sizeof pcts / sizeof pcts[0]; pi++) {
                mt_calib_opts c = calib(MT_CALIB_PERCENTILE, pcts[pi]);
                qw q = quantize_ok(v, 1, k, MT_PREC_FP8, &c);
                /* a percentile of 0 on a channel that is not all zeros
                 * still gets the smallest normal scale, never 0 */
                double ref = ref_percentile_abs(v, k, pcts[pi]);
                double amax = ref_percentile_abs(v, k, 100);
                float want = amax > 0 ? fmaxf((float)ref, 448.0f * FLT_MIN) / 448.0f : 1.0f;
                if (q.scales[0] != want && !bad++)
                    snprintf(first, sizeof first, "shape %d k %d p%g: %a, want %a", shape, k,
                             pcts[pi], (double)q.scales[0], (double)want);
                qw_free(&q);
            }
        }
    free(v);
    ck_assert_msg(bad == 0, "%ld mismatches; first %s", bad, first);
}
END_TEST

/* Percentiles outside the 50..100 the header and the config allow, and
 * unknown methods, are refused before anything is written. */
START_TEST(quant_bad_calibration_options_are_rejected)
{
    float w[4] = {1, 2, 3, 4}, scales[1];
    int8_t codes[4];
    mt_err err = {{0}};
    mt_calib_opts c = calib(MT_CALIB_PERCENTILE, 20);
    ck_assert_int_eq(mt_quantize(w, 1, 4, MT_PREC_INT8, &c, codes, scales, &err), MT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "percentile"));
    c.percentile = NAN;
    ck_assert_int_eq(mt_quantize(w, 1, 4, MT_PREC_INT8, &c, codes, scales, &err), MT_EINVAL);
    c.percentile = 100.5;
    ck_assert_int_eq(mt_quantize(w, 1, 4, MT_PREC_INT8, &c, codes, scales, &err), MT_EINVAL);
    c = calib((mt_calib)MT_CALIB_COUNT, 100);
    ck_assert_int_eq(mt_quantize(w, 1, 4, MT_PREC_INT8, &c, codes, scales, &err), MT_EINVAL);
    /* the percentile is only looked at when it is the method */
    c = calib(MT_CALIB_MSE, 0);
    ck_assert_int_eq(mt_quantize(w, 1, 4, MT_PREC_INT8, &c, codes, scales, &err), MT_OK);
    ck_assert_int_eq(mt_quantize(w, 1, 4, MT_PREC_INT8, NULL, codes, NULL, &err), MT_EINVAL);
}
END_TEST

/* ======================================================================== */
/* mse                                                                      */
/* ======================================================================== */

/* Ratio 1.0 (absmax) is one of mse's candidates and the error it
 * minimises is the stored weight's own, so on any channel mse's error is
 * at most absmax's: checked on many channels of several shapes, for both
 * 8-bit formats. The tolerance is only for summing in a different order. */
START_TEST(quant_mse_never_worse_than_absmax)
{
    rng r = rng_for(3);
    const int n = 240, k = 384;
    float *w = malloc(sizeof(float) * n * k);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++) {
            double x;
            switch (i % 6) {
            case 0: x = rng_normal(&r); break;
            case 1: x = 2 * rng_unit(&r) - 1; break;
            case 2: x = log(rng_unit(&r)) * (rng_unit(&r) < 0.5 ? 1 : -1); break; /* Laplace */
            case 3: x = tan(3.141592653589793 * (rng_unit(&r) - 0.5)); break;   /* Cauchy */
            case 4: x = rng_unit(&r) < 0.9 ? 0 : rng_normal(&r); break;        /* sparse */
            default: x = rng_normal(&r) * (j == i % k ? 60 : 1); break;        /* one spike */
            }
            w[(size_t)i * k + j] = (float)(x * pow(10.0, -2.0 + 2.0 * rng_unit(&r)));
        }
    for (size_t pi = 0; pi < 2; pi++) {
        mt_calib_opts ca = calib(MT_CALIB_ABSMAX, 100), cm = calib(MT_CALIB_MSE, 100);
        qw qa = quantize_ok(w, n, k, scaled_precs[pi], &ca);
        qw qm = quantize_ok(w, n, k, scaled_precs[pi], &cm);
        int worse = 0, better = 0;
        for (int i = 0; i < n; i++) {
            double ea = channel_err(w, &qa, i), em = channel_err(w, &qm, i);
            worse += em > ea * (1 + 1e-12);
            better += em < ea;
            if (qm.scales[i] > qa.scales[i])
                worse++; /* the clip never goes above absmax */
        }
        printf("mse vs absmax, %s: better on %d of %d channels, total error %.4g vs %.4g\n",
               mt_precision_name(qa.p), better, n, total_err(w, &qm), total_err(w, &qa));
        ck_assert_msg(worse == 0, "seed %llu %s: mse worse than absmax on %d channels",
                      (unsigned long long)run_seed, mt_precision_name(qa.p), worse);
        ck_assert_int_gt(better, n / 4);
        if (qm.p == MT_PREC_FP8)
            ck_assert_int_eq(fp8_nan_codes(&qm), 0);
        qw_free(&qa);
        qw_free(&qm);
    }
    free(w);
}
END_TEST

/* The result does not depend on how many OpenMP threads quantize. */
START_TEST(quant_is_deterministic_across_thread_counts)
{
    rng r = rng_for(4);
    const int n = 200, k = 384, was = omp_get_max_threads();
    float *w = random_weights(&r, n, k);
    for (size_t pi = 0; pi < 2; pi++)
        for (mt_calib m = 0; m < MT_CALIB_COUNT; m++) {
            mt_calib_opts c = calib(m, 99.9);
            omp_set_num_threads(1);
            qw a = quantize_ok(w, n, k, scaled_precs[pi], &c);
            omp_set_num_threads(4);
            qw b = quantize_ok(w, n, k, scaled_precs[pi], &c);
            ck_assert(!memcmp(a.data, b.data, (size_t)n * k));
            ck_assert(!memcmp(a.scales, b.scales, sizeof(float) * n));
            qw_free(&a);
            qw_free(&b);
        }
    omp_set_num_threads(was);
    free(w);
}
END_TEST

/* How long mse calibration takes on MiniLM's largest GEMM shape (the FFN's
 * 1536x384), on one thread and on all. The model's 24 GEMM weights hold
 * 10.6M values, 18 of these matrices' worth. The bound asserted is loose
 * (a regression guard, not a benchmark) and skipped under sanitizers. */
START_TEST(quant_mse_calibration_time_1536x384)
{
    rng r = rng_for(5);
    const int n = 1536, k = 384;
    float *w = random_weights(&r, n, k);
    int all = omp_get_max_threads();
    for (size_t pi = 0; pi < 2; pi++) {
        mt_precision p = scaled_precs[pi];
        double secs[2];
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t == 0 ? 1 : all);
            mt_calib_opts c = calib(MT_CALIB_MSE, 100);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            qw q = quantize_ok(w, n, k, p, &c);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            secs[t] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            qw_free(&q);
        }
        printf("mse calibration, %s 1536x384: %.3f s on 1 thread, %.3f s on %d "
               "(whole MiniLM-L6 at this rate: %.2f s on 1 thread)\n",
               mt_precision_name(p), secs[0], secs[1], all, secs[0] * 10.6e6 / (n * k));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        ck_assert_msg(secs[0] < 1.5, "%s: %.3f s", mt_precision_name(p), secs[0]);
#endif
    }
    omp_set_num_threads(all);
    free(w);
}
END_TEST

/* ======================================================================== */
/* errors, twins, policy, names                                             */
/* ======================================================================== */

/* A NaN or an infinity anywhere in a weight is MT_EFORMAT, whatever the
 * precision, and the message says which output channel and column. */
START_TEST(quant_nan_or_inf_weight_is_a_clear_error_naming_the_channel)
{
    const int n = 8, k = 32;
    static const struct {
        int r, c;
        float v;
    } bad[] = {{5, 17, NAN}, {0, 0, INFINITY}, {7, 31, -INFINITY}, {3, 9, -NAN}};
    float w[8 * 32];
    for (mt_precision p = 0; p < MT_PREC_COUNT; p++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
            for (mt_calib m = 0; m < MT_CALIB_COUNT; m++) {
                for (int i = 0; i < n * k; i++)
                    w[i] = (float)i / 64.0f;
                w[bad[b].r * k + bad[b].c] = bad[b].v;
                void *data = malloc(mt_quant_data_bytes(p, n, k));
                float scales[8];
                mt_err err = {{0}};
                mt_calib_opts c = calib(m, 99);
                mt_status st = mt_quantize(w, n, k, p, &c, data, scales, &err);
                char want[64];
                snprintf(want, sizeof want, "channel %d (column %d)", bad[b].r, bad[b].c);
                ck_assert_msg(st == MT_EFORMAT && strstr(err.msg, want) &&
                                  strstr(err.msg, "non-finite"),
                              "%s %g at (%d,%d): status %d, \"%s\"", mt_precision_name(p),
                              (double)bad[b].v, bad[b].r, bad[b].c, (int)st, err.msg);
                free(data);
            }
}
END_TEST

/* mt_dequantize is the reference twin: element for element the numfmt
 * decoder times the channel's scale, bit for bit, for every precision; and
 * the codes are the numfmt encoders' (int8: nf_f32_to_i8 at the scale;
 * fp8: the scaled nf_encode, which divides by the scale). */
START_TEST(quant_dequantize_is_the_reference_twin)
{
    rng r = rng_for(6);
    const int n = 40, k = 200;
    float *w = random_weights(&r, n, k);
    float *ref = malloc(sizeof(float) * k);
    uint8_t *codes = malloc(k);
    long bad = 0;
    for (mt_precision p = 0; p < MT_PREC_COUNT; p++)
        for (mt_calib m = 0; m < MT_CALIB_COUNT; m++) {
            mt_calib_opts c = calib(m, 99.5);
            qw q = quantize_ok(w, n, k, p, &c);
            for (int i = 0; i < n; i++) {
                const float *row = w + (size_t)i * k;
                const size_t ng = mt_quant_scale_groups(p, k);
                for (int j = 0; j < k; j++) {
                    size_t at = (size_t)i * k + j;
                    /* int8g: the scale of j's group of 128 */
                    float s = !ng ? 1.0f : ng == 1 ? q.scales[i] : q.scales[i * ng + j / 128];
                    float want;
                    switch (p) {
                    case MT_PREC_FP16: want = nf_f16_to_f32(((uint16_t *)q.data)[at]); break;
                    case MT_PREC_BF16: want = nf_bf16_to_f32(((uint16_t *)q.data)[at]); break;
                    case MT_PREC_INT8:
                    case MT_PREC_INT8G:
                        want = nf_i8_to_f32(((int8_t *)q.data)[at], s);
                        bad += ((int8_t *)q.data)[at] != nf_f32_to_i8(row[j], s);
                        break;
                    case MT_PREC_FP8: want = nf_e4m3_to_f32(((uint8_t *)q.data)[at]) * s; break;
                    default: want = ((float *)q.data)[at]; break;
                    }
                    bad += memcmp(&want, &q.deq[at], sizeof want) != 0;
                }
                if (p == MT_PREC_FP8) {
                    const float s = q.scales[i];
                    mt_err err;
                    ck_assert_int_eq(nf_encode(NF_E4M3, row, codes, (size_t)k, s, &err), MT_OK);
                    bad += memcmp(codes, (uint8_t *)q.data + (size_t)i * k, (size_t)k) != 0;
                    ck_assert_int_eq(nf_decode(NF_E4M3, codes, ref, (size_t)k, s, &err), MT_OK);
                    bad += memcmp(ref, q.deq + (size_t)i * k, sizeof(float) * k) != 0;
                }
            }
            ck_assert_msg(bad == 0, "%s/%s: %ld mismatches", mt_precision_name(p),
                          mt_calib_name(m), bad);
            qw_free(&q);
        }
    free(codes);
    free(ref);
    free(w);
}
END_TEST

/* Only GEMM weights follow the variant's precision; every other op runs in
 * FP32 whatever the variant, and names are distinct. */
START_TEST(quant_op_policy_keeps_everything_but_gemm_weights_fp32)
{
    for (mt_op op = 0; op < MT_OP_COUNT; op++) {
        ck_assert_str_ne(mt_op_name(op), "?");
        for (mt_op o2 = 0; o2 < op; o2++)
            ck_assert_str_ne(mt_op_name(op), mt_op_name(o2));
        for (mt_precision p = 0; p < MT_PREC_COUNT; p++) {
            mt_precision want = op == MT_OP_GEMM_WEIGHT ? p : MT_PREC_FP32;
            ck_assert_msg(mt_op_precision(op, p) == want, "%s under %s -> %s", mt_op_name(op),
                          mt_precision_name(p), mt_precision_name(mt_op_precision(op, p)));
        }
    }
    ck_assert_str_eq(mt_op_name(MT_OP_GEMM_WEIGHT), "gemm_weight");
    ck_assert_str_eq(mt_op_name(MT_OP_COUNT), "?");
    ck_assert_int_eq(mt_op_precision(MT_OP_COUNT, MT_PREC_INT8), MT_PREC_FP32);
}
END_TEST

/* Calibration names round-trip and nothing else parses. */
START_TEST(quant_calib_names_parse)
{
    static const char *names[] = {"absmax", "percentile", "mse"};
    for (mt_calib c = 0; c < MT_CALIB_COUNT; c++) {
        mt_calib got = MT_CALIB_COUNT;
        ck_assert_str_eq(mt_calib_name(c), names[c]);
        ck_assert_int_eq(mt_calib_parse(names[c], &got), 0);
        ck_assert_int_eq(got, c);
    }
    static const char *bad[] = {"", "ABSMAX", "max", "mse ", "entropy", "percentile99"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mt_calib got = MT_CALIB_MSE;
        ck_assert_int_ne(mt_calib_parse(bad[i], &got), 0);
        ck_assert_int_eq(got, MT_CALIB_MSE);
    }
    mt_calib got;
    ck_assert_int_ne(mt_calib_parse(NULL, &got), 0);
    ck_assert_str_eq(mt_calib_name(MT_CALIB_COUNT), "?");
}
END_TEST

/* mt_weight_create on the CPU backend: FP32 is made, resident bytes and
 * data as expected. The other precisions are being added to the CPU
 * backend separately: where ->supports says no, MT_EUNSUPPORTED (and no
 * weight) is the right answer; where it says yes, the weight must hold
 * exactly what mt_quantize makes. */
/* int8g: each group of 128 inputs of a channel gets its own absmax scale,
 * so a spike in one group leaves the others' grids (and errors) as if it
 * were not there; every value within half a step of its own group's grid;
 * a short last group (k = 300: 128 + 128 + 44) is a group like the others. */
START_TEST(quant_int8g_scales_each_group_of_128_alone)
{
    rng r = rng_for(11);
    const int n = 8, k = 300, groups = 3;
    float *w = random_weights(&r, n, k);
    float amax1 = 0; /* channel 1's largest |w|, then a spike 8 times that in its group 0 */
    for (int j = 0; j < k; j++)
        amax1 = fmaxf(amax1, fabsf(w[1 * k + j]));
    const float spike = 8 * amax1;
    w[1 * k + 5] = spike;
    mt_calib_opts c = calib(MT_CALIB_ABSMAX, 100);
    qw g = quantize_ok(w, n, k, MT_PREC_INT8G, &c), pc = quantize_ok(w, n, k, MT_PREC_INT8, &c);
    for (int i = 0; i < n; i++)
        for (int b = 0; b < groups; b++) {
            const int j0 = b * 128, len = b == 2 ? 44 : 128;
            float amax = 0;
            for (int j = j0; j < j0 + len; j++)
                amax = fmaxf(amax, fabsf(w[(size_t)i * k + j]));
            const float s = g.scales[(size_t)i * groups + b];
            ck_assert_msg(s == amax / 127.0f, "channel %d group %d: scale %a, absmax/127 %a", i,
                          b, (double)s, (double)(amax / 127.0f));
            for (int j = j0; j < j0 + len; j++) {
                const size_t at = (size_t)i * k + j;
                ck_assert(fabs(w[at] - g.deq[at]) <= s * (0.5 + 0x1p-18) + fabs(w[at]) * 0x1p-23);
            }
        }
    /* the spike sets channel 1's one per-channel scale, but only group 0's here */
    ck_assert_float_eq(pc.scales[1], spike / 127.0f);
    ck_assert_float_eq(g.scales[1 * groups + 0], spike / 127.0f);
    ck_assert_float_lt(g.scales[1 * groups + 1], pc.scales[1] / 4);
    double eg = 0, ep = 0;
    for (int j = 128; j < k; j++) {
        eg += pow(w[1 * k + j] - g.deq[1 * k + j], 2);
        ep += pow(w[1 * k + j] - pc.deq[1 * k + j], 2);
    }
    ck_assert_msg(eg < ep / 16, "groups 1-2 of the spiked channel: error %g vs %g per channel",
                  eg, ep);
    qw_free(&g);
    qw_free(&pc);
    free(w);
}
END_TEST

START_TEST(quant_weight_create_on_cpu_backend)
{
    mt_backend *be = NULL;
    mt_err err = {{0}};
    ck_assert_int_eq(mt_backend_cpu_create(1, &be, &err), MT_OK);
    rng r = rng_for(7);
    const int n = 48, k = 64;
    float *w = random_weights(&r, n, k);
    ck_assert(be->ops->supports(be, MT_PREC_FP32));
    for (mt_precision p = 0; p < MT_PREC_COUNT; p++) {
        mt_weight *wt = NULL;
        mt_calib_opts c = calib(MT_CALIB_MSE, 100);
        mt_status st = mt_weight_create(be, w, n, k, p, &c, &wt, &err);
        if (!be->ops->supports(be, p)) {
            ck_assert_msg(st == MT_EUNSUPPORTED && !wt, "%s: status %d", mt_precision_name(p),
                          (int)st);
            continue;
        }
        ck_assert_msg(st == MT_OK && wt, "%s: %s", mt_precision_name(p), err.msg);
        ck_assert_int_eq(wt->prec, p);
        ck_assert_int_eq(wt->n, n);
        ck_assert_int_eq(wt->k, k);
        qw q = quantize_ok(w, n, k, p, &c);
        /* weights live in backend memory; the CPU backend's is host memory,
         * except where it keeps only a blocked copy of its own (fp32, and
         * bf16 on a CPU with AVX512_BF16: the layout oneDNN's matmul reads,
         * padded to its column blocks; fp16, fp8 and bf16 on a CPU with
         * AVX-512: panels of 32 columns; int8g, and int8 without VNNI:
         * the codes packed for our int8 kernels) */
        if (wt->data) {
            ck_assert_uint_eq(wt->bytes, mt_quant_total_bytes(p, n, k));
            ck_assert(!memcmp(wt->data, q.data, mt_quant_data_bytes(p, n, k)));
        } else {
            ck_assert_msg(p == MT_PREC_FP32 || p == MT_PREC_INT8G || p == MT_PREC_INT8 ||
                              (p == MT_PREC_BF16 && kc_bf16_matmul_available()) ||
                              ((p == MT_PREC_FP16 || p == MT_PREC_BF16 || p == MT_PREC_FP8) &&
                               kc_h16_available()),
                          "%s: no data", mt_precision_name(p));
            ck_assert_uint_ge(wt->bytes, mt_quant_total_bytes(p, n, k));
        }
        if (mt_quant_has_scales(p))
            ck_assert(!memcmp(wt->scales, q.scales, sizeof(float) * n));
        else
            ck_assert_ptr_null(wt->scales);
        qw_free(&q);
        be->ops->weight_destroy(be, wt);
    }
    /* a non-finite weight is refused before anything is uploaded */
    w[3 * k + 5] = NAN;
    mt_weight *wt = NULL;
    ck_assert_int_eq(mt_weight_create(be, w, n, k, MT_PREC_FP32, NULL, &wt, &err), MT_EFORMAT);
    ck_assert_ptr_null(wt);
    ck_assert_ptr_nonnull(strstr(err.msg, "channel 3 (column 5)"));
    free(w);
    mt_backend_destroy(be);
}
END_TEST

/* ======================================================================== */

static Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quant_sizes_per_precision);
    tcase_add_test(tc, precision_traits_are_consistent);
    tcase_add_test(tc, quant_round_trip_error_bounded_per_format);
    tcase_add_test(tc, quant_all_zero_channel_gets_zero_codes_and_finite_scale);
    tcase_add_test(tc, quant_denormal_channel_has_positive_finite_scale);
    tcase_add_test(tc, quant_single_outlier_channel);
    tcase_add_test(tc, quant_percentile_matches_numpy_definition);
    tcase_add_test(tc, quant_bad_calibration_options_are_rejected);
    tcase_add_test(tc, quant_mse_never_worse_than_absmax);
    tcase_add_test(tc, quant_is_deterministic_across_thread_counts);
    tcase_add_test(tc, quant_mse_calibration_time_1536x384);
    tcase_add_test(tc, quant_nan_or_inf_weight_is_a_clear_error_naming_the_channel);
    tcase_add_test(tc, quant_dequantize_is_the_reference_twin);
    tcase_add_test(tc, quant_op_policy_keeps_everything_but_gemm_weights_fp32);
    tcase_add_test(tc, quant_calib_names_parse);
    tcase_add_test(tc, quant_weight_create_on_cpu_backend);
    tcase_add_test(tc, quant_int8g_scales_each_group_of_128_alone);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *test_suite(void)
{
    const char *env = getenv("QUANT_TEST_SEED");
    run_seed = env && *env ? strtoull(env, NULL, 0)
                           : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("quant test seed %llu (QUANT_TEST_SEED replays it)\n", (unsigned long long)run_seed);
    fflush(stdout);
    return quant_suite();
}

#include "tests/unit/check_main.h"
