/* test_cpu_layer_ops.c: the CPU kernels of the layer kinds beyond BERT's
 * (kernels/cpu/ops_layer.c: RMSNorm, add, the gated MLP's activations,
 * rotary positions, the per-head Q/K RMSNorm; kernels/cpu/ops.c: causal and grouped-query attention)
 * against plain double-precision twins written here, on fresh random
 * inputs, outputs poisoned with NaN first so that an element left unwritten
 * fails. Both attention kernels are taken (the own micro-kernel below 64
 * tokens at AVX2, 256 at AVX-512, for head sizes of whole vectors; oneDNN's
 * sgemm past them and for other head sizes); the ISA matrix runs this at
 * every level. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "tests/unit/testutil.h"

/* Attention over qkv rows (heads + 2 kv heads) * dh wide, causal or not. */
static void ref_attention(const float *qkv, const int32_t *off, int nseq, int heads, int kvh,
                          int dh, bool causal, double *out)
{
    const int hid = heads * dh, stride = (heads + 2 * kvh) * dh, grp = heads / kvh;
    for (int s = 0; s < nseq; s++)
        for (int h = 0; h < heads; h++)
            for (int i = off[s]; i < off[s + 1]; i++) {
                const int len = causal ? i - off[s] + 1 : off[s + 1] - off[s];
                const float *q = qkv + (size_t)i * stride + h * dh;
                double *p = malloc(sizeof(double) * len), mx = -INFINITY, sum = 0;
                for (int j = 0; j < len; j++) {
                    const float *k = qkv + (size_t)(off[s] + j) * stride + hid + (h / grp) * dh;
                    double d = 0;
                    for (int c = 0; c < dh; c++)
                        d += (double)q[c] * k[c];
                    p[j] = d / sqrt((double)dh);
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int j = 0; j < len; j++)
                    sum += (p[j] = exp(p[j] - mx));
                for (int c = 0; c < dh; c++) {
                    double o = 0;
                    for (int j = 0; j < len; j++)
                        o += p[j] * qkv[(size_t)(off[s] + j) * stride + hid + kvh * dh +
                                        (h / grp) * dh + c];
                    out[(size_t)i * hid + h * dh + c] = o / sum;
                }
                free(p);
            }
}

/* Causal and not, grouped (12 heads on 4, 2 and 1 key/value heads) and
 * not, on ragged batches with lengths on both sides of the kernel switch. */
START_TEST(causal_and_grouped_attention_match_double_reference)
{
    static const int lens[] = {1, 7, 70, 3, 300};
    static const int dhs[] = {16, 32, 24, 20};
    static const int kvs[] = {12, 4, 2, 1};
    int32_t off[6] = {0};
    for (int s = 0; s < 5; s++)
        off[s + 1] = off[s] + lens[s];
    const int t = off[5], heads = 12;
    for (int c = 0; c < 4 * 4 * 2; c++) {
        const int dh = dhs[c % 4], kvh = kvs[(c / 4) % 4];
        const bool causal = c / 16;
        float *qkv = rand_vec((size_t)t * (heads + 2 * kvh) * dh, 2.0f);
        float *out = poisoned((size_t)t * heads * dh);
        double *ref = malloc(sizeof(double) * t * heads * dh);
        const kc_attn a = {.heads = heads, .kv_heads = kvh, .dh = dh, .causal = causal};
        ck_assert_int_eq(kc_attention_ex(qkv, off, 5, &a, out), 0);
        ref_attention(qkv, off, 5, heads, kvh, dh, causal, ref);
        const double e = rel_err(out, ref, (size_t)t * heads * dh, 1e-2);
        ck_assert_msg(e < 1e-5, "head size %d, %d kv heads, causal %d: relative error %g", dh,
                      kvh, causal, e);
        free(qkv), free(out), free(ref);
    }
    /* kv heads that do not divide the heads are refused */
    float x[64 * 3] = {0}, o[64];
    const int32_t off1[2] = {0, 1};
    const kc_attn bad = {.heads = 4, .kv_heads = 3, .dh = 16};
    ck_assert_int_eq(kc_attention_ex(x, off1, 1, &bad, o), -3);
}
END_TEST

START_TEST(rmsnorm_with_and_without_residual_matches_double)
{
    static const int hs[] = {1, 7, 48, 384, 1024};
    for (int c = 0; c < 10; c++) {
        const int h = hs[c % 5], t = 5;
        const bool with_res = c / 5;
        float *x = rand_vec((size_t)t * h, 3.0f), *r = rand_vec((size_t)t * h, 1.0f);
        float *g = rand_vec((size_t)h, 2.0f), *out = poisoned((size_t)t * h);
        double *ref = malloc(sizeof(double) * t * h);
        for (int i = 0; i < t; i++) {
            double ss = 0;
            for (int k = 0; k < h; k++) {
                double v = (double)x[i * h + k] + (with_res ? r[i * h + k] : 0.0f);
                ss += v * v;
            }
            const double inv = 1.0 / sqrt(ss / h + 1e-6);
            for (int k = 0; k < h; k++)
                ref[i * h + k] =
                    ((double)x[i * h + k] + (with_res ? r[i * h + k] : 0.0f)) * inv * g[k];
        }
        kc_rmsnorm(x, with_res ? r : NULL, g, t, h, 1e-6f, out);
        double e = rel_err(out, ref, (size_t)t * h, 1e-3);
        ck_assert_msg(e < 1e-6, "h %d, residual %d: relative error %g", h, with_res, e);
        /* in place: out aliasing x */
        kc_rmsnorm(x, with_res ? r : NULL, g, t, h, 1e-6f, x);
        ck_assert_msg(rel_err(x, ref, (size_t)t * h, 1e-3) < 1e-6, "in place, h %d", h);
        free(x), free(r), free(g), free(out), free(ref);
    }
}
END_TEST

START_TEST(add_and_gated_activations_match_double)
{
    const int t = 6, n = 37;
    float *x = rand_vec((size_t)t * 2 * n, 6.0f), *out = poisoned((size_t)t * n);
    double *ref = malloc(sizeof(double) * t * n);
    for (int silu = 0; silu < 2; silu++) {
        for (int i = 0; i < t; i++)
            for (int k = 0; k < n; k++) {
                const double gt = x[(size_t)i * 2 * n + k], up = x[(size_t)i * 2 * n + n + k];
                const double f = silu ? gt / (1.0 + exp(-gt)) : 0.5 * gt * (1.0 + erf(gt / sqrt(2.0)));
                ref[i * n + k] = f * up;
            }
        kc_glu(x, t, n, silu, out);
        const double e = rel_err(out, ref, (size_t)t * n, 1e-3);
        ck_assert_msg(e < 1e-6, "%s: relative error %g", silu ? "SiLU" : "GELU", e);
    }
    float *y = rand_vec((size_t)t * n, 1.0f), *s = poisoned((size_t)t * n);
    kc_add(x, y, (size_t)t * n, s);
    for (int i = 0; i < t * n; i++)
        ck_assert(s[i] == x[i] + y[i]);
    free(x), free(out), free(ref), free(y), free(s);
}
END_TEST

/* Rotary positions on Q and K heads (V untouched), positions restarting
 * per sequence, against cos and sin in double. */
START_TEST(rope_rotates_q_and_k_by_position_in_each_sequence)
{
    static const int lens[] = {3, 40, 1};
    int32_t off[4] = {0};
    for (int s = 0; s < 3; s++)
        off[s + 1] = off[s] + lens[s];
    const int heads = 4, kvh = 2, dh = 16, t = off[3], w = (heads + 2 * kvh) * dh;
    const double theta = 10000.0;
    float *qkv = rand_vec((size_t)t * w, 1.0f), *orig = malloc(sizeof(float) * t * w);
    memcpy(orig, qkv, sizeof(float) * t * w);
    ck_assert_int_eq(kc_rope(qkv, off, 3, heads, kvh, dh, (float)theta), 0);
    double worst = 0;
    for (int s = 0; s < 3; s++)
        for (int i = off[s]; i < off[s + 1]; i++)
            for (int hd = 0; hd < heads + 2 * kvh; hd++)
                for (int d = 0; d < dh / 2; d++) {
                    const size_t a = (size_t)i * w + hd * dh + d, b = a + dh / 2;
                    double want_a = orig[a], want_b = orig[b];
                    if (hd < heads + kvh) { /* Q and K heads; V as it was */
                        const double ang = (i - off[s]) * pow(theta, -2.0 * d / dh);
                        want_a = orig[a] * cos(ang) - orig[b] * sin(ang);
                        want_b = orig[b] * cos(ang) + orig[a] * sin(ang);
                    }
                    worst = fmax(worst, fmax(fabs(qkv[a] - want_a), fabs(qkv[b] - want_b)));
                }
    ck_assert_msg(worst < 1e-5, "largest error %g", worst);
    ck_assert_int_eq(kc_rope(qkv, off, 3, heads, kvh, 15, (float)theta), -1);
    free(qkv), free(orig);
}
END_TEST

/* Qwen3's per-head query/key RMSNorm: Q and K heads, each with its gamma,
 * V untouched. */
START_TEST(qk_rmsnorm_normalises_each_q_and_k_head)
{
    const int heads = 4, kvh = 2, dh = 24, t = 9, w = (heads + 2 * kvh) * dh;
    float *qkv = rand_vec((size_t)t * w, 3.0f), *orig = malloc(sizeof(float) * t * w);
    float *qg = rand_vec(dh, 2.0f), *kg = rand_vec(dh, 2.0f);
    memcpy(orig, qkv, sizeof(float) * t * w);
    kc_qk_rmsnorm(qkv, t, heads, kvh, dh, qg, kg, 1e-6f);
    double worst = 0;
    for (int i = 0; i < t; i++)
        for (int hd = 0; hd < heads + 2 * kvh; hd++) {
            const float *o = orig + (size_t)i * w + hd * dh, *g = hd < heads ? qg : kg;
            double ss = 0;
            for (int d = 0; d < dh; d++)
                ss += (double)o[d] * o[d];
            const double inv = 1.0 / sqrt(ss / dh + 1e-6);
            for (int d = 0; d < dh; d++) {
                const double want = hd < heads + kvh ? o[d] * inv * g[d] : o[d];
                worst = fmax(worst, fabs(qkv[(size_t)i * w + hd * dh + d] - want));
            }
        }
    ck_assert_msg(worst < 1e-5, "largest error %g", worst);
    free(qkv), free(orig), free(qg), free(kg);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("cpu_layer_ops");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, causal_and_grouped_attention_match_double_reference);
    tcase_add_test(tc, rmsnorm_with_and_without_residual_matches_double);
    tcase_add_test(tc, add_and_gated_activations_match_double);
    tcase_add_test(tc, rope_rotates_q_and_k_by_position_in_each_sequence);
    tcase_add_test(tc, qk_rmsnorm_normalises_each_q_and_k_head);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
