/* test_cpu_ops.c: the CPU kernels (kernels/cpu/ops.c) and the CPU backend's
 * GEMM against plain double-precision twins written here, on fresh random
 * inputs, outputs poisoned with NaN before each run so that an element left
 * unwritten fails the comparison. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "tests/unit/testutil.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/ops.h"


/* ---- plain twins --------------------------------------------------------- */

/* pb: relative position bias (heads, 2*maxrel+1), or NULL. */
static void ref_attention(const float *qkv, const int32_t *off, int nseq, int heads, int dh,
                          const float *pb, int maxrel, double *out)
{
    int hid = heads * dh, stride = 3 * hid;
    for (int s = 0; s < nseq; s++)
        for (int h = 0; h < heads; h++)
            for (int i = off[s]; i < off[s + 1]; i++) {
                int len = off[s + 1] - off[s];
                double *p = malloc(sizeof(double) * len), mx = -INFINITY, sum = 0;
                for (int j = 0; j < len; j++) {
                    double d = 0;
                    for (int k = 0; k < dh; k++)
                        d += (double)qkv[(size_t)i * stride + h * dh + k] *
                             qkv[(size_t)(off[s] + j) * stride + hid + h * dh + k];
                    p[j] = d / sqrt((double)dh);
                    if (pb)
                        p[j] += pb[(size_t)h * (2 * maxrel + 1) + j - (i - off[s]) + maxrel];
                    if (p[j] > mx)
                        mx = p[j];
                }
                for (int j = 0; j < len; j++)
                    sum += (p[j] = exp(p[j] - mx));
                for (int k = 0; k < dh; k++) {
                    double o = 0;
                    for (int j = 0; j < len; j++)
                        o += p[j] * qkv[(size_t)(off[s] + j) * stride + 2 * hid + h * dh + k];
                    out[(size_t)i * hid + h * dh + k] = o / sum;
                }
                free(p);
            }
}

/* ---- tests --------------------------------------------------------------- */

/* Head sizes 32 (MiniLM) and 64 (MPNet) run on the own micro-kernel at
 * AVX2 and AVX-512 (the ISA matrix runs both), 24 and 48 on it with a last
 * block of one vector (24: AVX2; 48: AVX-512), and on oneDNN's sgemm at
 * the other width; 20 on oneDNN's at both; lengths around the kernel's
 * blocks of rows (4, 8), vectors (8, 16) and transposed blocks (8), on both
 * sides of the length from which oneDNN's takes over (64 at AVX2, 256 at
 * AVX-512), and sequences of different lengths in one call. */
START_TEST(attention_matches_double_reference_on_ragged_batches)
{
    static const int lens_sets[][5] = {{1, 0},      {7, 0},      {128, 0}, {3, 17, 1, 64, 0},
                                       {256, 5, 0}, {33, 9, 0}, {180, 0}};
    static const int dhs[] = {32, 64, 24, 48, 20};
    for (size_t c = 0; c < 5 * sizeof lens_sets / sizeof *lens_sets; c++) {
        const int *lens = lens_sets[c % (sizeof lens_sets / sizeof *lens_sets)];
        int32_t off[6] = {0};
        int nseq = 0;
        for (; lens[nseq]; nseq++)
            off[nseq + 1] = off[nseq] + lens[nseq];
        const int heads = 12, dh = dhs[c / (sizeof lens_sets / sizeof *lens_sets)], t = off[nseq];
        float *qkv = rand_vec((size_t)t * 3 * heads * dh, 2.0f);
        float *out = poisoned((size_t)t * heads * dh);
        double *ref = malloc(sizeof(double) * t * heads * dh);
        ck_assert_int_eq(kc_attention(qkv, off, nseq, heads, dh, out), 0);
        ref_attention(qkv, off, nseq, heads, dh, NULL, 0, ref);
        double e = rel_err(out, ref, (size_t)t * heads * dh, 1e-2);
        ck_assert_msg(e < 1e-5, "case %zu (head size %d): relative error %g", c, dh, e);
        free(qkv);
        free(out);
        free(ref);
    }
}
END_TEST

/* MPNet's relative position bias, added to the scores before the softmax. */
START_TEST(attention_with_position_bias_matches_double_reference)
{
    static const int lens[] = {5, 1, 300, 37};
    int32_t off[5] = {0};
    for (int s = 0; s < 4; s++)
        off[s + 1] = off[s] + lens[s];
    const int heads = 12, dh = 64, t = off[4], maxrel = 383;
    float *qkv = rand_vec((size_t)t * 3 * heads * dh, 1.0f);
    float *pb = rand_vec((size_t)heads * (2 * maxrel + 1), 4.0f);
    float *out = poisoned((size_t)t * heads * dh);
    double *ref = malloc(sizeof(double) * t * heads * dh);
    ck_assert_int_eq(kc_attention_bias(qkv, off, 4, heads, dh, pb, maxrel, out), 0);
    ref_attention(qkv, off, 4, heads, dh, pb, maxrel, ref);
    double e = rel_err(out, ref, (size_t)t * heads * dh, 1e-2);
    ck_assert_msg(e < 1e-5, "relative error %g", e);
    /* a sequence longer than the bias table is refused */
    ck_assert_int_eq(kc_attention_bias(qkv, off, 4, heads, dh, pb, 200, out), -2);
    free(qkv), free(pb), free(out), free(ref);
}
END_TEST

START_TEST(layernorm_with_residual_matches_reference)
{
    const int t = 33, h = 384;
    float *x = rand_vec((size_t)t * h, 3), *res = rand_vec((size_t)t * h, 3);
    float *g = rand_vec(h, 1), *b = rand_vec(h, 1), *out = poisoned((size_t)t * h);
    double *ref = malloc(sizeof(double) * t * h);
    for (int r = 0; r < t; r++) {
        double mean = 0, var = 0;
        for (int c = 0; c < h; c++)
            mean += (double)x[r * h + c] + res[r * h + c];
        mean /= h;
        for (int c = 0; c < h; c++) {
            double d = (double)x[r * h + c] + res[r * h + c] - mean;
            var += d * d;
        }
        var /= h;
        for (int c = 0; c < h; c++)
            ref[r * h + c] = ((double)x[r * h + c] + res[r * h + c] - mean) / sqrt(var + 1e-12) * g[c] + b[c];
    }
    kc_layernorm(x, res, g, b, t, h, 1e-12f, out);
    double e = rel_err(out, ref, (size_t)t * h, 1e-2);
    ck_assert_msg(e < 1e-5, "relative error %g", e);
    /* in place (out aliases x), as the forward pass uses it */
    kc_layernorm(x, res, g, b, t, h, 1e-12f, x);
    ck_assert_msg(rel_err(x, ref, (size_t)t * h, 1e-2) < 1e-5, "in-place differs");
    free(x), free(res), free(g), free(b), free(out), free(ref);
}
END_TEST

START_TEST(gelu_and_exp_match_libm_in_double_on_every_tail_length)
{
    for (int n = 0; n < 40; n++) {
        float *x = rand_vec((size_t)n + 1, 8), *y = malloc(sizeof(float) * (n + 1));
        memcpy(y, x, sizeof(float) * (n + 1));
        kc_gelu(y, n);
        for (int i = 0; i < n; i++) {
            double r = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
            /* erf's absolute error (at most 3.5e-7) times x / 2: for
             * x << 0, 1 + erf(x) cancels, so the bound scales with |x| and
             * not with the result */
            ck_assert_msg(fabs(y[i] - r) <= 4e-7 * fabs(x[i]), "gelu(%g)=%g, want %g", x[i], y[i], r);
        }
        ck_assert(y[n] == x[n]); /* nothing past n touched */
        memcpy(y, x, sizeof(float) * (n + 1));
        kc_exp(y, n);
        for (int i = 0; i < n; i++)
            ck_assert_msg(fabs(y[i] - exp(x[i])) <= 1.5e-7 * exp(x[i]), "exp(%g)", x[i]);
        ck_assert(y[n] == x[n]);
        free(x), free(y);
    }
}
END_TEST

/* n inputs for an elementwise kernel: half fresh random values in
 * [-scale, scale), half a dense sweep of [lo, hi). */
static float *random_and_sweep(int n, float scale, float lo, float hi)
{
    float *x = malloc(sizeof(float) * n), *rnd = rand_vec((size_t)n / 2, scale);
    for (int i = 0; i < n / 2; i++)
        x[i] = rnd[i];
    for (int i = n / 2; i < n; i++)
        x[i] = lo + (hi - lo) * (float)(i - n / 2) / (float)(n - n / 2);
    free(rnd);
    return x;
}

/* The first i where y[i] (a run of the vector forms over x) is not
 * scalar(x[i]) bit for bit, or -1. */
static int first_unlike_scalar(const float *x, const float *y, int n, float (*scalar)(float))
{
    for (int i = 0; i < n; i++) {
        const float one = scalar(x[i]);
        if (memcmp(&one, y + i, sizeof one) != 0)
            return i;
    }
    return -1;
}

/* GELU's own erf (kernels/cpu/ops.c): on fresh random inputs and a dense
 * sweep of [-12, 12], within 4e-7 |x| of GELU in double (the error its fit
 * was measured to), and the same bits from the vector forms (AVX2, AVX-512:
 * the ISA matrix runs both) as from the scalar one. */
START_TEST(gelu_is_within_its_bound_everywhere_and_the_same_at_every_width)
{
    const int n = 1 << 20;
    float *x = random_and_sweep(n, 6, -12.0f, 12.0f), *y = malloc(sizeof(float) * n);
    memcpy(y, x, sizeof(float) * n);
    kc_gelu(y, n);
    double worst = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        const double r = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
        const double e = fabs(y[i] - r) / (fabs(x[i]) + 1e-30);
        if (e > worst)
            worst = e, at = i;
    }
    ck_assert_msg(worst <= 4e-7, "gelu(%.9g) = %.9g: error %.3g |x|", x[at], y[at], worst);
    const int d = first_unlike_scalar(x, y, n, kc_gelu1); /* the vector forms */
    if (d >= 0)
        ck_abort_msg("gelu(%.9g): %.9g in a run, %.9g by the scalar form", x[d], y[d], kc_gelu1(x[d]));
    /* the ends: 0 stays 0, large |x| gives x and -0 (or 0) */
    float ends[3] = {0.0f, 30.0f, -30.0f};
    kc_gelu(ends, 3);
    ck_assert(ends[0] == 0.0f && ends[1] == 30.0f && ends[2] == 0.0f);
    free(x), free(y);
}
END_TEST

/* The softmax's own exp (kernels/cpu/ops.c): on a dense sweep of its
 * range [-87, 88] and fresh random inputs, within 1.5e-7 of exp in double
 * relative (measured: 7.7e-8, under an ulp; the series' truncation is under
 * 2e-9, the rest is rounding); the vector forms (the ISA matrix runs AVX2
 * and AVX-512) give the scalar form's bits; outside the range it clamps
 * rather than overflows. */
START_TEST(exp_is_within_its_bound_everywhere_and_the_same_at_every_width)
{
    const int n = 1 << 20;
    float *x = random_and_sweep(n, 20, -87.0f, 88.0f), *y = malloc(sizeof(float) * n);
    memcpy(y, x, sizeof(float) * n);
    kc_exp(y, n);
    double worst = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        const double e = fabs(y[i] - exp((double)x[i])) / exp((double)x[i]);
        if (e > worst)
            worst = e, at = i;
    }
    ck_assert_msg(worst <= 1.5e-7, "exp(%.9g) = %.9g: relative error %.3g", x[at], y[at], worst);
    const int d = first_unlike_scalar(x, y, n, kc_exp1); /* the vector forms */
    if (d >= 0)
        ck_abort_msg("exp(%.9g): %.9g in a run, %.9g by the scalar form", x[d], y[d], kc_exp1(x[d]));
    float ends[4] = {0.0f, -200.0f, 200.0f, -INFINITY};
    kc_exp(ends, 4);
    ck_assert(ends[0] == 1.0f);
    ck_assert(ends[1] == kc_exp1(-87.0f) && ends[1] > 0.0f && ends[1] < 2e-38f);
    ck_assert(ends[2] == kc_exp1(88.0f) && isfinite(ends[2]));
    ck_assert(ends[3] == ends[1]);
    free(x), free(y);
}
END_TEST

/* The softmax of a row plus a bias against double, every tail length of
 * both vector widths and MiniLM's and MPNet's longest rows; entries far
 * below the row's largest (down to -200 from it) give their tiny share,
 * not NaN; the bias is left as it was. */
START_TEST(softmax_matches_double_on_every_tail_length_with_and_without_bias)
{
    static const int extra[] = {180, 384, 512};
    for (int c = 0; c < 70 + 3; c++) {
        const int len = c < 70 ? c + 1 : extra[c - 70];
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            float *row = rand_vec((size_t)len + 1, 12), *bias = rand_vec((size_t)len, 4);
            float *keep = malloc(sizeof(float) * len);
            double *ref = malloc(sizeof(double) * len), *arg = malloc(sizeof(double) * len);
            double mx = -INFINITY, sum = 0;
            if (len > 3)
                row[len / 2] = -200.0f; /* exp underflows: clamped in the row */
            const float past = row[len];
            memcpy(keep, bias, sizeof(float) * len);
            for (int j = 0; j < len; j++) {
                arg[j] = ref[j] = (double)row[j] + (with_bias ? bias[j] : 0.0);
                mx = ref[j] > mx ? ref[j] : mx;
            }
            for (int j = 0; j < len; j++)
                sum += (ref[j] = exp(ref[j] - mx));
            for (int j = 0; j < len; j++)
                ref[j] /= sum;
            kc_softmax(row, len, with_bias ? bias : NULL);
            /* exp's own 1.5e-7, the sum's and the division's rounding, and the
             * FP32 rounding of row + bias and of its distance to the largest
             * (half an ulp of each magnitude, exp's relative error) */
            for (int j = 0; j < len; j++) {
                const double tol = 6e-7 + 1.2e-7 * (fabs(arg[j]) + fabs(mx) + fabs(arg[j] - mx));
                ck_assert_msg(fabs(row[j] - ref[j]) <= tol * ref[j] + 1e-37,
                              "len %d bias %d: p[%d] = %.9g, want %.9g", len, with_bias, j,
                              row[j], ref[j]);
            }
            ck_assert(row[len] == past); /* nothing past len touched */
            ck_assert(memcmp(keep, bias, sizeof(float) * len) == 0);
            free(row), free(bias), free(keep), free(ref), free(arg);
        }
    }
}
END_TEST

START_TEST(mean_pool_normalises_each_sequence_over_its_own_tokens)
{
    const int32_t off[4] = {0, 1, 9, 40};
    const int h = 384;
    float *x = rand_vec((size_t)40 * h, 1), *out = poisoned((size_t)3 * h);
    kc_mean_pool(x, off, 3, h, true, out);
    for (int s = 0; s < 3; s++) {
        double mean[384], n2 = 0;
        for (int c = 0; c < h; c++) {
            mean[c] = 0;
            for (int i = off[s]; i < off[s + 1]; i++)
                mean[c] += x[(size_t)i * h + c];
            mean[c] /= off[s + 1] - off[s];
            n2 += mean[c] * mean[c];
        }
        for (int c = 0; c < h; c++)
            mean[c] /= sqrt(n2);
        ck_assert_msg(rel_err(out + (size_t)s * h, mean, h, 1e-3) < 1e-5, "sequence %d", s);
    }
    free(x), free(out);
}
END_TEST

START_TEST(cpu_backend_gemm_with_bias_and_gelu_matches_reference_on_odd_shapes)
{
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(0, &be, &err), MT_OK);
    static const int shapes[][3] = {{1, 384, 384}, {7, 1536, 384}, {33, 13, 17}, {5, 1, 1}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int m = shapes[c][0], n = shapes[c][1], k = shapes[c][2];
        float *x = rand_vec((size_t)m * k, 1), *w = rand_vec((size_t)n * k, 1);
        float *bias = rand_vec(n, 1), *y = poisoned((size_t)m * n);
        double *ref = malloc(sizeof(double) * m * n);
        mt_weight *wt;
        ck_assert_int_eq(mt_weight_create(be, w, n, k, MT_PREC_FP32, NULL, &wt, &err), MT_OK);
        ck_assert_int_eq(be->ops->gemm(be, x, m, wt, bias, MT_ACT_GELU, y, &err), MT_OK);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double a = bias[j];
                for (int q = 0; q < k; q++)
                    a += (double)x[i * k + q] * w[(size_t)j * k + q];
                ref[i * n + j] = 0.5 * a * (1 + erf(a / sqrt(2.0)));
            }
        double e = rel_err(y, ref, (size_t)m * n, 1e-2);
        ck_assert_msg(e < 1e-5, "shape %dx%dx%d: relative error %g", m, n, k, e);
        be->ops->weight_destroy(be, wt);
        free(x), free(w), free(bias), free(y), free(ref);
    }
    mt_backend_destroy(be);
}
END_TEST

START_TEST(cpu_backend_refuses_precisions_it_cannot_run)
{
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(1, &be, &err), MT_OK);
    ck_assert(!be->ops->supports(be, MT_PREC_TF32));
    float w[4] = {1, 2, 3, 4};
    mt_weight *wt = NULL;
    ck_assert_int_eq(mt_weight_create(be, w, 2, 2, MT_PREC_TF32, NULL, &wt, &err), MT_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "tf32"));
    mt_backend_destroy(be);
}
END_TEST

/* server.engine_threads: a forward runs on an engine worker thread, not on
 * the thread that made the backend, and OpenMP's team size is per thread.
 * The backend must apply its own count on whichever thread calls it. */
typedef struct {
    mt_backend *be;
    int team_after; /* omp_get_max_threads() on the thread after a GEMM */
    int team_before;
    int team_solo;  /* after set_threads(1) and a GEMM */
    int team_back;  /* after set_threads(0) and a GEMM */
    mt_status st;
} thread_probe;

static void *gemm_on_fresh_thread(void *arg)
{
    thread_probe *p = arg;
    enum { M = 3, N = 5, K = 7 };
    float *x = rand_vec(M * K, 1), *w = rand_vec(N * K, 1), *y = poisoned(M * N);
    mt_weight *wt = NULL;
    mt_err err;
    p->team_before = omp_get_max_threads();
    p->st = mt_weight_create(p->be, w, N, K, MT_PREC_FP32, NULL, &wt, &err);
    if (p->st == MT_OK)
        p->st = p->be->ops->gemm(p->be, x, M, wt, NULL, MT_ACT_NONE, y, &err);
    p->team_after = omp_get_max_threads();
    /* a batch of a few tokens: one thread, then the backend's count again */
    p->be->ops->set_threads(p->be, 1);
    if (p->st == MT_OK)
        p->st = p->be->ops->gemm(p->be, x, M, wt, NULL, MT_ACT_NONE, y, &err);
    p->team_solo = omp_get_max_threads();
    p->be->ops->set_threads(p->be, 0);
    if (p->st == MT_OK)
        p->st = p->be->ops->gemm(p->be, x, M, wt, NULL, MT_ACT_NONE, y, &err);
    p->team_back = omp_get_max_threads();
    if (wt)
        p->be->ops->weight_destroy(p->be, wt);
    free(x), free(w), free(y);
    return NULL;
}

START_TEST(cpu_backend_applies_its_thread_count_on_the_calling_thread)
{
    /* a count other than a fresh thread's default (all processors) */
    const int procs = omp_get_num_procs(), want = procs > 1 ? 1 : 2;
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(want, &be, &err), MT_OK);
    thread_probe p = {.be = be};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, gemm_on_fresh_thread, &p), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(p.st, MT_OK);
    ck_assert_int_ne(p.team_before, want); /* else this test proves nothing */
    ck_assert_int_eq(p.team_after, want);
    mt_backend_destroy(be);
    /* set_threads: one thread for the next ops, then the backend's count */
    ck_assert_int_eq(mt_backend_cpu_create(2, &be, &err), MT_OK);
    p = (thread_probe){.be = be};
    ck_assert_int_eq(pthread_create(&th, NULL, gemm_on_fresh_thread, &p), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(p.st, MT_OK);
    ck_assert_int_eq(p.team_after, 2);
    ck_assert_int_eq(p.team_solo, 1);
    ck_assert_int_eq(p.team_back, 2);
    mt_backend_destroy(be);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("cpu_ops");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, attention_matches_double_reference_on_ragged_batches);
    tcase_add_test(tc, attention_with_position_bias_matches_double_reference);
    tcase_add_test(tc, layernorm_with_residual_matches_reference);
    tcase_add_test(tc, gelu_and_exp_match_libm_in_double_on_every_tail_length);
    tcase_add_test(tc, gelu_is_within_its_bound_everywhere_and_the_same_at_every_width);
    tcase_add_test(tc, exp_is_within_its_bound_everywhere_and_the_same_at_every_width);
    tcase_add_test(tc, softmax_matches_double_on_every_tail_length_with_and_without_bias);
    tcase_add_test(tc, mean_pool_normalises_each_sequence_over_its_own_tokens);
    tcase_add_test(tc, cpu_backend_gemm_with_bias_and_gelu_matches_reference_on_odd_shapes);
    tcase_add_test(tc, cpu_backend_refuses_precisions_it_cannot_run);
    tcase_add_test(tc, cpu_backend_applies_its_thread_count_on_the_calling_thread);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
