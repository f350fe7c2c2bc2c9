/* test_qgemm.c: the CPU GEMMs of every resident precision (kernels/cpu/qgemm.c,
 * reached through the CPU backend's ->gemm) against double-precision twins
 * written here. The twins multiply the weights as mt_dequantize gives them
 * and, for INT8, the activations quantized per token exactly as the kernel
 * must (so the only difference left is FP32 rounding: the kernels' integer
 * accumulation must be exact). Outputs are poisoned with NaN before each
 * call so that an element left unwritten fails. Also: thread safety of the
 * INT8 primitive cache, the epilogue and the activation quantizer alone,
 * the resident byte counts, the AVX2 int8 forms against the sign form on
 * inputs fresh each run (the seed is printed; QGEMM_TEST_SEED replays it),
 * and (printed, never asserted) throughput. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/options.h"
#include "tests/unit/testutil.h"
#include "kernels/cpu/numfmt.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/qgemm.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/qgemm_s8_internal.h"

static const mt_precision precs[] = {MT_PREC_FP32, MT_PREC_FP16, MT_PREC_BF16, MT_PREC_FP8,
                                     MT_PREC_INT8, MT_PREC_INT8G};
#define NPRECS ((int)(sizeof precs / sizeof *precs))

/* ---- helpers ------------------------------------------------------------- */

/* Under an emulator (tests/arm64.sh sets MANTISSA_EMULATED) a GEMM is ~50x
 * slower: the grids below keep their small shapes and row counts there. */
static bool emulated(void)
{
    return getenv("MANTISSA_EMULATED") != NULL;
}

/* How many of a grid's entries to take: all, or under an emulator the
 * first `few`. */
static size_t grid(size_t all, size_t few)
{
    return emulated() && few < all ? few : all;
}

static double gelu_d(double v)
{
    return 0.5 * v * (1 + erf(v / sqrt(2.0)));
}

/* A weight of precision p made from w (n, k) with absmax scales, and the
 * FP32 values it stands for (mt_dequantize of the same codes). */
static mt_weight *make_weight(mt_backend *be, const float *w, int n, int k, mt_precision p,
                              float *deq)
{
    void *data = malloc(mt_quant_data_bytes(p, n, k));
    float *sc = mt_quant_has_scales(p) ? malloc(sizeof(float) * mt_quant_scale_count(p, n, k))
                                       : NULL;
    mt_err err;
    ck_assert_msg(mt_quantize(w, n, k, p, NULL, data, sc, &err) == MT_OK, "%s", err.msg);
    mt_dequantize(data, sc, n, k, p, deq);
    mt_weight *wt = NULL;
    ck_assert_msg(be->ops->weight_upload(be, p, n, k, data, sc, &wt, &err) == MT_OK, "%s",
                  err.msg);
    free(data);
    free(sc);
    return wt;
}

/* A row's asymmetric UINT8 grid as qgemm.h defines it: [min(x, 0),
 * max(x, 0)] in 255 steps, zero point the code of 0. */
static void u8_grid(const float *xr, int k, float *sx, int *zp)
{
    float lo = 0.f, hi = 0.f;
    for (int c = 0; c < k; c++) {
        lo = xr[c] < lo ? xr[c] : lo;
        hi = xr[c] > hi ? xr[c] : hi;
    }
    float s = (hi - lo) / 255.0f;
    if (!(s > 0.f))
        s = 1.0f;
    float z = rintf(-lo / s); /* in float, as the definition says */
    *sx = s;
    *zp = z < 0 ? 0 : z > 255 ? 255 : (int)z;
}

/* Whether p's GEMM quantizes its activations (W8A8): int8 and int8g. */
static bool w8a8(mt_precision p)
{
    return p == MT_PREC_INT8 || p == MT_PREC_INT8G;
}

/* Whether p's GEMM of an (n, k) weight rounds its activations to BF16:
 * bf16 where the CPU has AVX512_BF16 and oneDNN's bf16 matmul takes the
 * shape (kernels/cpu/gemm_f32.c; with AMX it refuses some, n = 64 among
 * them, which then run with FP32 activations). */
static bool a_bf16(mt_precision p, int n, int k)
{
    if (p != MT_PREC_BF16 || !kc_bf16_matmul_available())
        return false;
    uint16_t *w = calloc((size_t)n * k, sizeof(uint16_t));
    kc_f32_weight *fw = NULL;
    const bool takes = kc_bf16_weight_create(w, n, k, 2, &fw) == KC_OK;
    kc_f32_weight_destroy(fw);
    free(w);
    return takes;
}

/* The activations the twin multiplies: x itself (BF16-rounded for a_bf16), or for the W8A8
 * precisions x quantized with the scalar reference encoder and dequantized
 * in double: per token (int8), or per group of the weight's group size
 * within each token (int8g). */
static double *twin_inputs(const float *x, int m, int n, int k, mt_precision p)
{
    double *xd = malloc(sizeof(double) * ((size_t)m * k + 1));
    const bool bf = a_bf16(p, n, k);
    const int g = mt_prec(p)->group > 0 ? mt_prec(p)->group : k;
    for (int r = 0; r < m; r++)
        for (int j0 = 0; j0 < k; j0 += g) {
            const float *xr = x + (size_t)r * k + j0;
            const int len = k - j0 < g ? k - j0 : g;
            float sx;
            int zp;
            u8_grid(xr, len, &sx, &zp);
            for (int c = 0; c < len; c++)
                xd[(size_t)r * k + j0 + c] =
                    w8a8(p)    ? ((double)nf_f32_to_u8_asym(xr[c], 1.0f / sx, zp) - zp) * sx
                    : bf       ? (double)nf_bf16_to_f32(nf_f32_to_bf16(xr[c]))
                                : (double)xr[c];
        }
    return xd;
}

/* acc (m, n) = xd (m, k) . deq (n, k)^T in double. */
static double *twin_gemm(const double *xd, int m, const float *deq, int n, int k)
{
    double *acc = malloc(sizeof(double) * ((size_t)m * n + 1));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const double *a = xd + (size_t)i * k;
            const float *b = deq + (size_t)j * k;
            double s = 0;
            for (int q = 0; q < k; q++)
                s += a[q] * b[q];
            acc[(size_t)i * n + j] = s;
        }
    return acc;
}

/* The relative error of ya against yb (count values; yb the reference). */
static double agree_err(const float *ya, const float *yb, size_t count)
{
    double *yd = malloc(sizeof(double) * (count + 1));
    for (size_t i = 0; i < count; i++)
        yd[i] = yb[i];
    const double e = rel_err(ya, yd, count, 1e-3);
    free(yd);
    return e;
}

/* ---- every precision against its twin ------------------------------------ */

START_TEST(each_precision_matches_its_double_twin_with_or_without_epilogue)
{
    const mt_precision p = precs[_i];
    static const int shapes[][2] = {{13, 17}, {1, 1}, {37, 129}, {64, 300}, {384, 384},
                                    {1536, 384}, {384, 1536}, {1152, 384}};
    static const int ms[] = {1, 2, 7, 16, 33, 128, 129, 300};
    /* INT8's integer sums are exact: only the FP32 epilogue rounds (int8g:
     * also its FP32 sum over the groups) */
    const double tol = w8a8(p) ? 1e-6 : 1e-5;
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(0, &be, &err), MT_OK);
    ck_assert(be->ops->supports(be, p));
    for (size_t s = 0; s < grid(sizeof shapes / sizeof *shapes, 4); s++) {
        const int n = shapes[s][0], k = shapes[s][1];
        float *w = rand_vec((size_t)n * k, 0.1f), *deq = malloc(sizeof(float) * n * k);
        float *bias = rand_vec(n, 0.5f);
        mt_weight *wt = make_weight(be, w, n, k, p, deq);
        for (size_t mi = 0; mi < grid(sizeof ms / sizeof *ms, 5); mi++) {
            const int m = ms[mi];
            float *x = rand_vec((size_t)m * k, 2.0f);
            if (m >= 3) /* an all-zero token: INT8 gives it scale 1 and zero point 0 */
                memset(x + k, 0, sizeof(float) * k);
            double *xd = twin_inputs(x, m, n, k, p);
            double *acc = twin_gemm(xd, m, deq, n, k);
            double *ref = malloc(sizeof(double) * m * n);
            for (int v = 0; v < 4; v++) { /* bias no/yes x GELU no/yes */
                const bool with_bias = v & 1, gelu = v & 2;
                for (size_t i = 0; i < (size_t)m * n; i++) {
                    double a = acc[i] + (with_bias ? bias[i % n] : 0.0);
                    ref[i] = gelu ? gelu_d(a) : a;
                }
                float *y = poisoned((size_t)m * n);
                ck_assert_msg(be->ops->gemm(be, x, m, wt, with_bias ? bias : NULL,
                                            gelu ? MT_ACT_GELU : MT_ACT_NONE, y, &err) == MT_OK,
                              "%s", err.msg);
                double e = rel_err(y, ref, (size_t)m * n, 1e-3);
                ck_assert_msg(e <= tol, "%s m=%d n=%d k=%d bias=%d gelu=%d: relative error %g",
                              mt_precision_name(p), m, n, k, with_bias, gelu, e);
                free(y);
            }
            free(x), free(xd), free(acc), free(ref);
        }
        be->ops->weight_destroy(be, wt);
        free(w), free(deq), free(bias);
    }
    mt_backend_destroy(be);
}
END_TEST

/* ---- the pieces alone ---------------------------------------------------- */

START_TEST(fp8_decoder_is_exact_for_every_code_but_nan)
{
    /* W (3, 254) holds every non-NaN E4M3 code in each row (rotated), x is
     * the identity: y[i][j] = W[j][i] * scale[j] with one rounding, the
     * same one mt_dequantize makes, so the two must agree bit for bit */
    enum { K = 254, N = 3 };
    uint8_t codes[N * K];
    const float scales[N] = {1.0f, 0.5f, 3.1f};
    for (int j = 0; j < N; j++)
        for (int i = 0; i < K; i++) {
            int c = (i + 37 * j) % K; /* 0..253 -> codes 0x00..0x7e, 0x80..0xfe */
            codes[j * K + i] = (uint8_t)(c < 127 ? c : c + 1);
        }
    float *x = calloc((size_t)K * K, sizeof(float)), *deq = malloc(sizeof(float) * N * K);
    float *y = poisoned((size_t)K * N);
    for (int i = 0; i < K; i++)
        x[(size_t)i * K + i] = 1.0f;
    mt_dequantize(codes, scales, N, K, MT_PREC_FP8, deq);
    mt_backend *be;
    mt_err err;
    mt_weight *wt;
    ck_assert_int_eq(mt_backend_cpu_create(0, &be, &err), MT_OK);
    ck_assert_int_eq(be->ops->weight_upload(be, MT_PREC_FP8, N, K, codes, scales, &wt, &err),
                     MT_OK);
    ck_assert_int_eq(be->ops->gemm(be, x, K, wt, NULL, MT_ACT_NONE, y, &err), MT_OK);
    for (int i = 0; i < K; i++)
        for (int j = 0; j < N; j++)
            ck_assert_msg(y[i * N + j] == deq[j * K + i] ||
                              (y[i * N + j] == 0 && deq[j * K + i] == 0),
                          "code 0x%02x scale %g: %g, want %g", codes[j * K + i], scales[j],
                          y[i * N + j], deq[j * K + i]);
    be->ops->weight_destroy(be, wt);
    mt_backend_destroy(be);
    free(x), free(deq), free(y);
}
END_TEST

START_TEST(activation_quantizer_is_per_token_asymmetric_half_even_and_keeps_zero_exact)
{
    const int m = 7, k = 37;
    float *x = rand_vec((size_t)m * k, 3.0f);
    memset(x + 2 * k, 0, sizeof(float) * k); /* row 2: all zero */
    /* row 3: range [0, 255] (scale 1, zero point 0), with exact halves */
    for (int c = 0; c < k; c++)
        x[3 * k + c] = (float)(c % 7) * 0.25f;
    x[3 * k] = 255.0f;
    x[3 * k + 1] = 2.5f, x[3 * k + 2] = 1.5f, x[3 * k + 4] = 0.5f;
    /* row 4: a GELU-like row, [-0.17, 4]: the grid must start at -0.17 */
    for (int c = 0; c < k; c++)
        x[4 * k + c] = -0.17f + 4.17f * (float)c / (float)(k - 1);
    /* row 5: all positive; row 6: all negative (0 is still on the grid) */
    for (int c = 0; c < k; c++)
        x[5 * k + c] = 1.0f + fabsf(x[5 * k + c]), x[6 * k + c] = -1.0f - fabsf(x[6 * k + c]);
    uint8_t q[7 * 37];
    float sx[7];
    int32_t zp[7];
    ck_assert_int_eq(kc_quantize_rows_u8(x, m, k, q, sx, zp), KC_OK);
    for (int r = 0; r < m; r++) {
        float want_s;
        int want_z;
        u8_grid(x + r * k, k, &want_s, &want_z);
        ck_assert_msg(sx[r] == want_s && zp[r] == want_z, "row %d: scale %g zp %d, want %g %d",
                      r, sx[r], zp[r], want_s, want_z);
        double worst = 0;
        for (int c = 0; c < k; c++) {
            uint8_t e = nf_f32_to_u8_asym(x[r * k + c], 1.0f / want_s, want_z);
            ck_assert_msg(q[r * k + c] == e, "row %d col %d: %d, want %d", r, c, q[r * k + c], e);
            double d = fabs(((double)q[r * k + c] - zp[r]) * sx[r] - x[r * k + c]);
            worst = d > worst ? d : worst;
        }
        /* every value is within half a step of its code's value */
        ck_assert_msg(worst <= 0.5 * sx[r] * (1 + 1e-5), "row %d: error %g, step %g", r, worst,
                      sx[r]);
    }
    ck_assert(sx[2] == 1.0f && zp[2] == 0 && q[2 * k] == 0);
    ck_assert(sx[3] == 1.0f && zp[3] == 0);
    ck_assert_int_eq(q[3 * k + 1], 2); /* 2.5 -> 2 (ties to even) */
    ck_assert_int_eq(q[3 * k + 2], 2); /* 1.5 -> 2 */
    ck_assert_int_eq(q[3 * k + 4], 0); /* 0.5 -> 0 */
    ck_assert_int_eq(q[3 * k], 255);
    /* the GELU-like row gets a step of (4 + 0.17) / 255, not 2 * 4 / 254 */
    ck_assert(fabsf(sx[4] - 4.17f / 255.0f) < 1e-6f);
    ck_assert(q[4 * k] == 0 && q[4 * k + k - 1] == 255);
    ck_assert(zp[5] == 0 && q[5 * k] > 0);
    ck_assert(zp[6] == 255);
    free(x);
}
END_TEST

/* The activation quantizer's two forms (AVX2, and AVX-512 where the ISA
 * level has it) give the same scales, zero points and codes, per token and
 * per group, on rows whose lengths leave every kind of tail, with the codes
 * laid out as our kernels want them (each group padded with zero codes to
 * a multiple of 64), with and without smoothing's divisors; and both match
 * the scalar nf_f32_to_u8_asym. */
START_TEST(activation_quantizer_forms_agree_per_token_and_per_group)
{
    static const int ks[] = {1, 15, 16, 17, 37, 128, 300, 384, 1536};
    const bool wide = kc_s8_quant_wide();
    printf("activation quantizer: %s\n", wide ? "AVX-512 and AVX2 compared" : "AVX2 only");
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (int g = 128, pass = 0; pass < 2; pass++, g = ks[ki]) {
            const int m = 5, k = ks[ki], nb = (k + g - 1) / g, gp = (g + 63) / 64 * 64;
            const size_t kp = (size_t)nb * gp;
            float *x = rand_vec((size_t)m * k, 4.0f), *tmp = malloc(sizeof(float) * k);
            float *dv = rand_vec((size_t)k, 1.0f); /* smoothing's divisors, 0.5 to 1.5 */
            for (int c = 0; c < k; c++)
                dv[c] = 1.0f + 0.5f * dv[c];
            for (int c = 0; c < k; c++) /* row 1 all positive, row 2 all zero */
                x[k + c] = fabsf(x[k + c]) + 0.5f, x[2 * k + c] = 0.f;
            uint8_t *qa = malloc((size_t)m * kp), *qb = malloc((size_t)m * kp);
            float sa[5 * 12], sb[5 * 12];
            int32_t za[5 * 12], zb[5 * 12];
            for (int smooth = 0; smooth < 2; smooth++) {
                const float *div = smooth ? dv : NULL;
                memset(qa, 0xAB, (size_t)m * kp), memset(qb, 0xCD, (size_t)m * kp);
                kc_s8_quant_rows(x, m, k, g, (size_t)gp, kp, gp, qa, sa, za, div, tmp, false);
                kc_s8_quant_rows(x, m, k, g, (size_t)gp, kp, gp, qb, sb, zb, div, tmp, wide);
                for (int r = 0; r < m; r++)
                    for (int b = 0; b < nb; b++) {
                        const int at = r * nb + b;
                        ck_assert_msg(sa[at] == sb[at] && za[at] == zb[at],
                                      "k=%d g=%d smooth %d row %d group %d: %g/%d against %g/%d", k,
                                      g, smooth, r, b, sa[at], za[at], sb[at], zb[at]);
                        for (int c = 0; c < gp; c++) {
                            const size_t i = (size_t)r * kp + (size_t)b * gp + c;
                            const int col = b * g + c;
                            const int want = c < g && col < k
                                                 ? nf_f32_to_u8_asym(x[(size_t)r * k + col] *
                                                                         (div ? div[col] : 1.0f),
                                                                     1.0f / sa[at], za[at])
                                                 : 0; /* the padding */
                            ck_assert_msg(qa[i] == want && qb[i] == want,
                                          "k=%d g=%d smooth %d row %d col %d: %d and %d, want %d", k,
                                          g, smooth, r, col, qa[i], qb[i], want);
                        }
                    }
            }
            free(x), free(tmp), free(dv), free(qa), free(qb);
            if (g == k)
                break;
        }
}
END_TEST

START_TEST(epilogue_applies_column_and_row_scales_bias_and_gelu)
{
    const int m = 9, n = 23;
    float *y = rand_vec((size_t)m * n, 2.0f), *cs = rand_vec(n, 1.0f), *rs = rand_vec(m, 1.0f);
    float *b = rand_vec(n, 1.0f), *y0 = malloc(sizeof(float) * m * n);
    memcpy(y0, y, sizeof(float) * m * n);
    double ref[9 * 23];
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++)
            ref[r * n + c] = gelu_d((double)y0[r * n + c] * cs[c] * rs[r] + b[c]);
    ck_assert_int_eq(kc_epilogue(y, m, n, cs, rs, b, true), KC_OK);
    ck_assert(rel_err(y, ref, (size_t)m * n, 1e-3) < 1e-6);
    memcpy(y, y0, sizeof(float) * m * n);
    ck_assert_int_eq(kc_epilogue(y, m, n, NULL, NULL, NULL, false), KC_OK);
    ck_assert(memcmp(y, y0, sizeof(float) * m * n) == 0);
    ck_assert_int_eq(kc_epilogue(y, -1, n, NULL, NULL, NULL, false), KC_EINVAL);
    free(y), free(cs), free(rs), free(b), free(y0);
}
END_TEST

START_TEST(resident_bytes_are_honest_and_bad_weights_are_refused)
{
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(0, &be, &err), MT_OK);
    const int n = 1536, k = 384;
    float *w = rand_vec((size_t)n * k, 0.1f), *deq = malloc(sizeof(float) * n * k);
    for (int i = 0; i < NPRECS; i++) {
        mt_weight *wt = make_weight(be, w, n, k, precs[i], deq);
        size_t want = mt_quant_total_bytes(precs[i], n, k);
        if (w8a8(precs[i]) && wt->data) /* plus a blocked copy, where oneDNN wants one */
            ck_assert_msg(wt->bytes == want || (wt->bytes >= want + (size_t)n * k &&
                                                wt->bytes <= 2 * want + want / 4),
                          "%s: %zu bytes", mt_precision_name(precs[i]), wt->bytes);
        else if (w8a8(precs[i])) /* the codes packed for our kernels, in their place */
            ck_assert_msg(wt->bytes >= want && wt->bytes <= want + (size_t)n * k / 8,
                          "%s: %zu bytes, want %zu + padding", mt_precision_name(precs[i]),
                          wt->bytes, want);
        else
            ck_assert_msg(wt->bytes == want, "%s: %zu bytes, want %zu",
                          mt_precision_name(precs[i]), wt->bytes, want);
        /* M = 0 writes nothing */
        float y = 42.0f;
        ck_assert_int_eq(be->ops->gemm(be, w, 0, wt, NULL, MT_ACT_NONE, &y, &err), MT_OK);
        ck_assert(y == 42.0f);
        be->ops->weight_destroy(be, wt);
    }
    /* an E4M3 NaN code (S.1111.111) has no value: refused at upload */
    uint8_t codes[6] = {0x00, 0x38, 0x7f, 0x01, 0xb8, 0x10};
    float sc[2] = {1.0f, 1.0f};
    mt_weight *wt = NULL;
    ck_assert_int_eq(be->ops->weight_upload(be, MT_PREC_FP8, 2, 3, codes, sc, &wt, &err),
                     MT_EFORMAT);
    ck_assert_ptr_null(wt);
    codes[2] = 0xff;
    ck_assert_int_eq(be->ops->weight_upload(be, MT_PREC_FP8, 2, 3, codes, sc, &wt, &err),
                     MT_EFORMAT);
    codes[2] = 0x7e; /* 448: fine */
    ck_assert_int_eq(be->ops->weight_upload(be, MT_PREC_FP8, 2, 3, codes, sc, &wt, &err), MT_OK);
    be->ops->weight_destroy(be, wt);
    ck_assert(!be->ops->supports(be, MT_PREC_TF32));
    kc_s8_weight *none = NULL;
    ck_assert_int_eq(kc_s8_weight_create(NULL, sc, 2, 3, false, &none), KC_EINVAL);
    ck_assert_ptr_null(none);
    free(w), free(deq);
    mt_backend_destroy(be);
}
END_TEST

START_TEST(int8_in_place_and_reordered_weights_give_identical_results)
{
    /* oneDNN's form (where the ISA level has VNNI: elsewhere it is not
     * exact), its codes read in place or reordered: both layouts
     * accumulate exactly in int32 and share the epilogue */
    if (!kc_s8_kernel_available(KC_S8_ONEDNN)) {
        printf("int8 oneDNN layouts: skipped (no VNNI at this ISA level)\n");
        return;
    }
    const kc_s8_kernel saved = kc_s8_forced(); /* MANTISSA_INT8_KERNEL's, through the engine */
    kc_s8_force(KC_S8_ONEDNN);
    static const int shapes[][2] = {{1536, 384}, {384, 1536}, {13, 17}};
    static const int ms[] = {1, 16, 33, 128, 300};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int n = shapes[s][0], k = shapes[s][1];
        float *w = rand_vec((size_t)n * k, 0.1f), *sc = malloc(sizeof(float) * n);
        float *bias = rand_vec(n, 0.5f);
        int8_t *codes = malloc((size_t)n * k);
        mt_err err;
        ck_assert_int_eq(mt_quantize(w, n, k, MT_PREC_INT8, NULL, codes, sc, &err), MT_OK);
        kc_s8_weight *a, *b;
        ck_assert_int_eq(kc_s8_weight_create(codes, sc, n, k, false, &a), KC_OK);
        ck_assert_int_eq(kc_s8_weight_create(codes, sc, n, k, true, &b), KC_OK);
        ck_assert_str_eq(kc_s8_weight_impl(a), kc_s8_weight_impl(b));
        ck_assert_int_eq(kc_s8_weight_kernel(a), KC_S8_ONEDNN);
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            const int m = ms[mi];
            float *x = rand_vec((size_t)m * k, 2.0f);
            float *ya = poisoned((size_t)m * n), *yb = poisoned((size_t)m * n);
            ck_assert_int_eq(kc_gemm_s8(x, m, a, bias, true, ya), KC_OK);
            ck_assert_int_eq(kc_gemm_s8(x, m, b, bias, true, yb), KC_OK);
            for (size_t i = 0; i < (size_t)m * n; i++)
                ck_assert_msg(ya[i] == yb[i], "n=%d k=%d m=%d element %zu: %g vs %g", n, k, m, i,
                              ya[i], yb[i]);
            free(x), free(ya), free(yb);
        }
        kc_s8_weight_destroy(a);
        kc_s8_weight_destroy(b);
        free(w), free(sc), free(bias), free(codes);
    }
    kc_s8_force(saved);
}
END_TEST

/* MANTISSA_INT8_KERNEL's values (engine/options.c's table) are the kernels'
 * names in kc_s8_kernel's order: the option hands the kernels its index. */
START_TEST(int8_kernel_option_values_are_the_kernel_names_in_order)
{
    int i = 0;
    for (; mt_opt_choice(MT_OPT_INT8_KERNEL, i); i++)
        ck_assert_str_eq(mt_opt_choice(MT_OPT_INT8_KERNEL, i), kc_s8_kernel_name((kc_s8_kernel)i));
    ck_assert_int_eq(i, KC_S8_KERNEL_COUNT);
}
END_TEST

/* The int8 kernels the ISA level in force can run, KC_S8_AUTO excluded. */
static int kernels_here(kc_s8_kernel *out)
{
    int nk = 0;
    for (int i = KC_S8_ONEDNN; i < KC_S8_KERNEL_COUNT; i++)
        if (kc_s8_kernel_available((kc_s8_kernel)i))
            out[nk++] = (kc_s8_kernel)i;
    return nk;
}

/* Every int8 kernel the ISA level has, per channel and per group: ours
 * (AMX, VNNI and 16-bit-product forms) give bitwise the same output, and
 * oneDNN's (where the CPU has VNNI) the same to FP32 rounding, on shapes
 * that leave partial tiles, partial groups and partial row blocks. The
 * twin test above checks the values; this one that no form differs. */
START_TEST(int8_kernels_agree_bitwise_on_every_form_the_isa_level_has)
{
    static const int shapes[][2] = {{13, 300}, {37, 129}, {13, 17}, {64, 256}, {128, 300},
                                    {1536, 384}, {384, 1536}};
    static const int ms[] = {1, 7, 16, 33, 300};
    kc_s8_kernel ks[KC_S8_KERNEL_COUNT];
    const int nk = kernels_here(ks);
    printf("int8 kernels at %s:", kc_isa_name(kc_isa_get()->level));
    for (int i = 0; i < nk; i++)
        printf(" %s", kc_s8_kernel_name(ks[i]));
    printf("\n");
    ck_assert_int_ge(nk, 1);
    for (size_t s = 0; s < grid(sizeof shapes / sizeof *shapes, 5); s++)
        for (int grouped = 0; grouped < 2; grouped++) {
            const int n = shapes[s][0], k = shapes[s][1];
            const mt_precision p = grouped ? MT_PREC_INT8G : MT_PREC_INT8;
            const int g = grouped ? mt_prec(MT_PREC_INT8G)->group : k;
            float *w = rand_vec((size_t)n * k, 0.1f), *bias = rand_vec(n, 0.5f);
            float *sc = malloc(sizeof(float) * mt_quant_scale_count(p, n, k));
            int8_t *codes = malloc((size_t)n * k);
            mt_err err;
            ck_assert_int_eq(mt_quantize(w, n, k, p, NULL, codes, sc, &err), MT_OK);
            kc_s8_weight *wk[KC_S8_KERNEL_COUNT] = {NULL};
            for (int i = 0; i < nk; i++) {
                const int rc = kc_s8_weight_create_with(codes, sc, n, k, g, ks[i], &wk[i]);
                ck_assert_int_eq(rc, KC_OK);
            }
            for (size_t mi = 0; mi < grid(sizeof ms / sizeof *ms, 4); mi++) {
                const int m = ms[mi];
                float *x = rand_vec((size_t)m * k, 2.0f), *y[KC_S8_KERNEL_COUNT] = {NULL};
                int ref = -1; /* the first of our kernels: the others of ours equal it */
                for (int i = 0; i < nk; i++)
                    if (wk[i]) {
                        y[i] = poisoned((size_t)m * n);
                        ck_assert_int_eq(kc_gemm_s8(x, m, wk[i], bias, true, y[i]), KC_OK);
                        if (ref < 0 && ks[i] != KC_S8_ONEDNN)
                            ref = i;
                    }
                ck_assert_int_ge(ref, 0);
                for (int i = 0; i < nk; i++) {
                    if (!wk[i] || i == ref)
                        continue;
                    const char *a = kc_s8_weight_impl(wk[i]), *b = kc_s8_weight_impl(wk[ref]);
                    if (ks[i] == KC_S8_ONEDNN) {
                        const double e = agree_err(y[i], y[ref], (size_t)m * n);
                        ck_assert_msg(e <= 1e-6, "%s against %s n=%d k=%d m=%d: %g", a, b, n,
                                      k, m, e);
                        continue;
                    }
                    for (size_t e = 0; e < (size_t)m * n; e++)
                        ck_assert_msg(!memcmp(&y[i][e], &y[ref][e], sizeof(float)),
                                      "%s against %s n=%d k=%d m=%d element %zu: %a vs %a", a,
                                      b, n, k, m, e, y[i][e], y[ref][e]);
                }
                for (int i = 0; i < nk; i++)
                    free(y[i]);
                free(x);
            }
            for (int i = 0; i < nk; i++)
                kc_s8_weight_destroy(wk[i]);
            free(w), free(sc), free(bias), free(codes);
        }
}
END_TEST

/* The inputs that break a GEMM whose u8 x s8 pair sums go through 16 bits
 * (vpmaddubsw: 255 x 127 x 2 > 32767): every activation code 255 and
 * every weight code +127 or -127 (x all equal and positive, W's columns
 * constant). Each kernel at this level, and the backend's choice, must
 * give the exact sum; a saturating one is ~50% off. */
START_TEST(int8_pairs_of_largest_codes_do_not_saturate)
{
    const int n = 64, k = 384, m = 3;
    float *w = malloc(sizeof(float) * n * k), *x = malloc(sizeof(float) * m * k);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < k; i++)
            w[(size_t)j * k + i] = j % 2 ? 0.5f : -0.25f;
    for (int i = 0; i < m * k; i++)
        x[i] = 1.0f + (float)(i / k); /* row r: all 1 + r */
    kc_s8_kernel ks[KC_S8_KERNEL_COUNT];
    const int nk = kernels_here(ks);
    for (int grouped = 0; grouped < 2; grouped++) {
        const mt_precision p = grouped ? MT_PREC_INT8G : MT_PREC_INT8;
        const int g = grouped ? mt_prec(p)->group : k;
        float *sc = malloc(sizeof(float) * mt_quant_scale_count(p, n, k));
        int8_t *codes = malloc((size_t)n * k);
        mt_err err;
        ck_assert_int_eq(mt_quantize(w, n, k, p, NULL, codes, sc, &err), MT_OK);
        ck_assert_int_eq(abs(codes[0]), 127);
        for (int i = -1; i < nk; i++) { /* -1: KC_S8_AUTO */
            const kc_s8_kernel kern = i < 0 ? KC_S8_AUTO : ks[i];
            kc_s8_weight *wt = NULL;
            if (kc_s8_weight_create_with(codes, sc, n, k, g, kern, &wt) == KC_ENOKERNEL)
                continue;
            ck_assert_ptr_nonnull(wt);
            float *y = poisoned((size_t)m * n);
            ck_assert_int_eq(kc_gemm_s8(x, m, wt, NULL, false, y), KC_OK);
            for (int r = 0; r < m; r++)
                for (int j = 0; j < n; j++) {
                    const double want = (1.0 + r) * k * (j % 2 ? 0.5 : -0.25);
                    const double got = y[(size_t)r * n + j];
                    ck_assert_msg(fabs(got - want) <= 1e-5 * fabs(want),
                                  "%s row %d col %d: %.6f, want %.6f", kc_s8_weight_impl(wt), r,
                                  j, got, want);
                }
            free(y);
            kc_s8_weight_destroy(wt);
        }
        free(sc), free(codes);
    }
    free(w), free(x);
}
END_TEST

/* ---- the AVX2 forms on fresh inputs ---------------------------------------- */

/* The AVX2 int8 forms that must give the sign form's outputs (avx2_sign,
 * the AVX2 level's kernel before them) bit for bit: the 16-bit products on
 * a widened weight, on a panel widened per chunk, and the sign form on
 * column-block-major codes (avx2_signc, the AVX2 level's kernel now). All
 * run at every x86 level (AVX2 is the build's floor), so the ISA matrix
 * runs these tests at each. */
static const kc_s8_kernel avx2_forms[] = {KC_S8_W16_256, KC_S8_PANEL256, KC_S8_SIGNC256};
#define NAVX2 ((int)(sizeof avx2_forms / sizeof *avx2_forms))

/* This run's seed of the fresh inputs below (printed; QGEMM_TEST_SEED
 * replays one). */
static unsigned long long fresh_seed;

/* One of count, at random. */
static int pick(int count)
{
    const int i = (int)((frand() + 1.0f) * 0.5f * (float)count);
    return i < 0 ? 0 : i >= count ? count - 1 : i;
}

/* kc_gemm_s8 of m rows into a fresh output poisoned with NaN, with a
 * poisoned guard row after it: every element of the m x n must be written
 * (x is finite, so none may stay NaN) and the guard row must not be. */
static float *s8_call_checked(kc_s8_weight *w, const float *x, int m, int n, const float *bias,
                              bool gelu)
{
    float *y = poisoned((size_t)(m + 1) * n);
    ck_assert_int_eq(kc_gemm_s8(x, m, w, bias, gelu, y), KC_OK);
    for (size_t e = 0; e < (size_t)m * n; e++)
        ck_assert_msg(!isnan(y[e]), "%s m=%d n=%d: element %zu not written (seed %llu)",
                      kc_s8_weight_impl(w), m, n, e, fresh_seed);
    for (int c = 0; c < n; c++)
        ck_assert_msg(isnan(y[(size_t)m * n + c]), "%s m=%d n=%d: wrote past row %d (seed %llu)",
                      kc_s8_weight_impl(w), m, n, m, fresh_seed);
    return y;
}

/* The codes and scales of a fresh random (n, k) weight of precision p. */
static int8_t *fresh_codes(int n, int k, mt_precision p, float **sc)
{
    float *w = rand_vec((size_t)n * k, 0.1f);
    int8_t *codes = malloc((size_t)n * k);
    *sc = malloc(sizeof(float) * mt_quant_scale_count(p, n, k));
    mt_err err;
    ck_assert_msg(mt_quantize(w, n, k, p, NULL, codes, *sc, &err) == MT_OK, "%s", err.msg);
    free(w);
    return codes;
}

/* One shape: every AVX2 form against the sign form, element by element. */
static void avx2_forms_on(int n, int k, int m, mt_precision p, bool with_bias, bool gelu)
{
    const int g = p == MT_PREC_INT8G ? mt_prec(p)->group : k;
    float *sc, *bias = rand_vec(n, 0.5f), *x = rand_vec((size_t)m * k, 2.0f);
    int8_t *codes = fresh_codes(n, k, p, &sc);
    if (m >= 3) /* an all-zero token */
        memset(x + k, 0, sizeof(float) * k);
    kc_s8_weight *ref = NULL;
    ck_assert_int_eq(kc_s8_weight_create_with(codes, sc, n, k, g, KC_S8_SIGN256, &ref), KC_OK);
    float *yr = s8_call_checked(ref, x, m, n, with_bias ? bias : NULL, gelu);
    for (int f = 0; f < NAVX2; f++) {
        kc_s8_weight *wf = NULL;
        ck_assert_int_eq(kc_s8_weight_create_with(codes, sc, n, k, g, avx2_forms[f], &wf), KC_OK);
        float *y = s8_call_checked(wf, x, m, n, with_bias ? bias : NULL, gelu);
        for (size_t e = 0; e < (size_t)m * n; e++)
            ck_assert_msg(!memcmp(&y[e], &yr[e], sizeof(float)),
                          "%s n=%d k=%d m=%d element %zu: %a, avx2_sign %a (seed %llu)",
                          kc_s8_weight_impl(wf), n, k, m, e, y[e], yr[e], fresh_seed);
        free(y);
        kc_s8_weight_destroy(wf);
    }
    kc_s8_weight_destroy(ref);
    free(sc), free(bias), free(x), free(codes), free(yr);
}

/* Fresh random inputs (seeded per run) on odd shapes: n, k and m mostly
 * not multiples of the vector width (8), the register block (16 columns,
 * 4 rows) or a K step (64), per channel and per group, with and without
 * bias and GELU; the edge shapes first. */
START_TEST(avx2_forms_equal_the_sign_form_bitwise_on_fresh_odd_shapes)
{
    static const int ns[] = {1, 3, 8, 15, 17, 31, 33, 47, 64, 65, 130};
    static const int ks[] = {1, 5, 8, 31, 33, 63, 64, 65, 127, 129, 200, 257, 385};
    static const int ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 17, 63, 65, 130};
    static const int edge[][3] = {{1, 1, 1}, {17, 129, 5}, {130, 385, 130}, {3, 257, 2}};
    tu_rng = fresh_seed;
    const int trials = emulated() ? 8 : 48;
    for (int t = 0; t < trials; t++) {
        const bool fixed = t < (int)(sizeof edge / sizeof *edge);
        const int n = fixed ? edge[t][0] : ns[pick((int)(sizeof ns / sizeof *ns))];
        const int k = fixed ? edge[t][1] : ks[pick((int)(sizeof ks / sizeof *ks))];
        const int m = fixed ? edge[t][2] : ms[pick((int)(sizeof ms / sizeof *ms))];
        avx2_forms_on(n, k, m, t % 2 ? MT_PREC_INT8G : MT_PREC_INT8, t % 3 != 0, t % 4 >= 2);
    }
}
END_TEST

typedef struct {
    kc_s8_weight *w;
    const float *x, *bias;
    int n;
    const int *ms;
    float *const *refs; /* the sign form's output for each of ms */
    int failed;
} avx2_job;

/* Calls one weight with its list of m (the other thread's differ) over and
 * over, each output against the sign form's, bit for bit. */
static void *avx2_worker(void *arg)
{
    avx2_job *j = arg;
    for (int rep = 0; rep < 4; rep++)
        for (int i = 0; i < 5; i++) {
            const int m = j->ms[(i + rep) % 5];
            float *y = poisoned((size_t)(m + 1) * j->n);
            if (kc_gemm_s8(j->x, m, j->w, j->bias, true, y) != KC_OK ||
                memcmp(y, j->refs[(i + rep) % 5], sizeof(float) * (size_t)m * j->n) ||
                !isnan(y[(size_t)m * j->n]))
                j->failed = m;
            free(y);
        }
    return NULL;
}

/* Two threads on one weight of each AVX2 form, each with its own row
 * counts (few rows split columns over the threads; many go in chunks; the
 * panel form's scratch is each caller's own), per channel and per group. */
START_TEST(avx2_forms_are_the_sign_form_under_concurrent_calls_with_different_m)
{
    const mt_precision p = _i ? MT_PREC_INT8G : MT_PREC_INT8;
    const int n = 130, k = emulated() ? 129 : 385, maxm = 513;
    const int g = _i ? mt_prec(p)->group : k;
    static const int msa[] = {1, 300, 7, 65, 130}, msb[] = {33, 2, 513, 16, 5};
    tu_rng = fresh_seed ^ 0x5bd1e995ULL;
    float *sc, *x = rand_vec((size_t)maxm * k, 2.0f), *bias = rand_vec(n, 0.5f);
    int8_t *codes = fresh_codes(n, k, p, &sc);
    kc_s8_weight *ref = NULL;
    ck_assert_int_eq(kc_s8_weight_create_with(codes, sc, n, k, g, KC_S8_SIGN256, &ref), KC_OK);
    float *ra[5], *rb[5];
    for (int i = 0; i < 5; i++) {
        ra[i] = s8_call_checked(ref, x, msa[i], n, bias, true);
        rb[i] = s8_call_checked(ref, x, msb[i], n, bias, true);
    }
    for (int f = 0; f < NAVX2; f++) {
        kc_s8_weight *wf = NULL;
        ck_assert_int_eq(kc_s8_weight_create_with(codes, sc, n, k, g, avx2_forms[f], &wf), KC_OK);
        avx2_job jobs[2] = {{wf, x, bias, n, msa, ra, 0}, {wf, x, bias, n, msb, rb, 0}};
        pthread_t th[2];
        for (int t = 0; t < 2; t++)
            ck_assert_int_eq(pthread_create(&th[t], NULL, avx2_worker, &jobs[t]), 0);
        for (int t = 0; t < 2; t++)
            pthread_join(th[t], NULL);
        for (int t = 0; t < 2; t++)
            ck_assert_msg(!jobs[t].failed, "%s thread %d m=%d: differs from avx2_sign (seed %llu)",
                          kc_s8_weight_impl(wf), t, jobs[t].failed, fresh_seed);
        kc_s8_weight_destroy(wf);
    }
    for (int i = 0; i < 5; i++)
        free(ra[i]), free(rb[i]);
    kc_s8_weight_destroy(ref);
    free(sc), free(x), free(bias), free(codes);
}
END_TEST

/* FP16, BF16 and FP8: the AVX-512 kernel (panels of 32 columns, where the
 * CPU has it) and the panel GEMM (decoded panels into sgemm, which
 * kc_h16_set_enabled(false), the engine's MANTISSA_NO_H16_KERNEL=1, selects)
 * agree to FP32 rounding, on shapes that leave partial panels and partial
 * register blocks (BF16 with the bf16 matmul off, MANTISSA_NO_BF16_MATMUL=1,
 * else oneDNN's bf16 matmul takes it). */
START_TEST(h16_kernel_and_panel_gemm_agree)
{
    static const mt_precision ps[] = {MT_PREC_FP16, MT_PREC_BF16, MT_PREC_FP8};
    static const int shapes[][2] = {{1536, 384}, {384, 1536}, {13, 17}, {33, 129}, {64, 300}};
    static const int ms[] = {1, 5, 8, 9, 63, 64, 65, 300};
    kc_h16_set_enabled(true);
    kc_bf16_matmul_set_enabled(false);
    printf("fp16/bf16/fp8: kernel form %s\n",
           kc_h16_available() ? kc_h16_kernel_name() : "none (panel GEMM)");
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(0, &be, &err), MT_OK);
    for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const mt_precision p = ps[pi];
            const int n = shapes[s][0], k = shapes[s][1];
            float *w = rand_vec((size_t)n * k, 0.1f), *deq = malloc(sizeof(float) * n * k);
            float *bias = rand_vec(n, 0.5f);
            mt_weight *a = make_weight(be, w, n, k, p, deq);
            kc_h16_set_enabled(false);
            mt_weight *b = make_weight(be, w, n, k, p, deq);
            kc_h16_set_enabled(true);
            ck_assert_ptr_nonnull(b->data); /* the panel GEMM reads the plain codes */
            ck_assert(kc_h16_available() ? a->data == NULL : a->data != NULL);
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
                const int m = ms[mi];
                float *x = rand_vec((size_t)m * k, 2.0f);
                float *ya = poisoned((size_t)m * n), *yb = poisoned((size_t)m * n);
                ck_assert_int_eq(be->ops->gemm(be, x, m, a, bias, MT_ACT_GELU, ya, &err), MT_OK);
                ck_assert_int_eq(be->ops->gemm(be, x, m, b, bias, MT_ACT_GELU, yb, &err), MT_OK);
                double e = agree_err(ya, yb, (size_t)m * n);
                ck_assert_msg(e <= 1e-5, "%s n=%d k=%d m=%d: relative error %g",
                              mt_precision_name(p), n, k, m, e);
                free(x), free(ya), free(yb);
            }
            be->ops->weight_destroy(be, a);
            be->ops->weight_destroy(be, b);
            free(w), free(deq), free(bias);
        }
    mt_backend_destroy(be);
    /* back to the options' settings (engine/options.c handed them over) */
    kc_h16_set_enabled(!mt_opt_int(MT_OPT_NO_H16_KERNEL));
    kc_bf16_matmul_set_enabled(!mt_opt_int(MT_OPT_NO_BF16_MATMUL));
}
END_TEST

/* The codes of format fmt for w (n, k), and in deq the values they stand
 * for in double (FP8: code times its channel scale cs[c] = absmax / 448). */
static void *h16_codes(const float *w, int n, int k, kc_h16_fmt fmt, float *cs, double *deq)
{
    const size_t count = (size_t)n * k;
    uint16_t *h = fmt == KC_H16_E4M3 ? NULL : malloc(sizeof(uint16_t) * count);
    uint8_t *b = fmt == KC_H16_E4M3 ? malloc(count) : NULL;
    for (int c = 0; c < n; c++) {
        float amax = 0;
        for (int i = 0; i < k; i++)
            amax = fmaxf(amax, fabsf(w[(size_t)c * k + i]));
        cs[c] = amax > 0 ? amax / 448.0f : 1.0f;
        for (int i = 0; i < k; i++) {
            const size_t e = (size_t)c * k + i;
            if (fmt == KC_H16_F16)
                h[e] = nf_f32_to_f16(w[e]), deq[e] = nf_f16_to_f32(h[e]);
            else if (fmt == KC_H16_BF16)
                h[e] = nf_f32_to_bf16(w[e]), deq[e] = nf_bf16_to_f32(h[e]);
            else
                b[e] = nf_f32_to_e4m3(w[e] / cs[c]), deq[e] = (double)nf_e4m3_to_f32(b[e]) * cs[c];
        }
    }
    return h ? (void *)h : (void *)b;
}

/* One shape of kc_gemm_h16 against the double twin: y poisoned with a
 * guard row (every element written, none past row m), bias and GELU as
 * asked, relative error within the twin test's bound. */
static void h16_twin_on(kc_h16_fmt fmt, int n, int k, int m, bool with_bias, bool gelu)
{
    float *w = rand_vec((size_t)n * k, 0.1f), *x = rand_vec((size_t)m * k, 2.0f);
    float *bias = rand_vec(n, 0.5f), *cs = malloc(sizeof(float) * n);
    double *deq = malloc(sizeof(double) * n * k), *ref = malloc(sizeof(double) * m * n);
    void *codes = h16_codes(w, n, k, fmt, cs, deq);
    kc_h16_weight *hw = NULL;
    ck_assert_int_eq(kc_h16_weight_create(codes, n, k, fmt, &hw), KC_OK);
    for (int i = 0; i < m; i++)
        for (int c = 0; c < n; c++) {
            double a = with_bias ? bias[c] : 0.0;
            for (int e = 0; e < k; e++)
                a += (double)x[(size_t)i * k + e] * deq[(size_t)c * k + e];
            ref[(size_t)i * n + c] = gelu ? gelu_d(a) : a;
        }
    float *y = poisoned((size_t)(m + 1) * n);
    ck_assert_int_eq(kc_gemm_h16(x, m, hw, fmt == KC_H16_E4M3 ? cs : NULL,
                                 with_bias ? bias : NULL, gelu, y), KC_OK);
    for (size_t e = 0; e < (size_t)m * n; e++)
        ck_assert_msg(!isnan(y[e]), "%s fmt %d n=%d k=%d m=%d: element %zu not written (seed %llu)",
                      kc_h16_kernel_name(), fmt, n, k, m, e, fresh_seed);
    for (int c = 0; c < n; c++)
        ck_assert_msg(isnan(y[(size_t)m * n + c]), "%s n=%d m=%d: wrote past row %d",
                      kc_h16_kernel_name(), n, m, m);
    const double e = rel_err(y, ref, (size_t)m * n, 1e-3);
    ck_assert_msg(e <= 1e-5, "%s fmt %d n=%d k=%d m=%d bias=%d gelu=%d: relative error %g (seed %llu)",
                  kc_h16_kernel_name(), fmt, n, k, m, with_bias, gelu, e, fresh_seed);
    kc_h16_weight_destroy(hw);
    free(w), free(x), free(bias), free(cs), free(deq), free(ref), free(codes), free(y);
}

/* The 16-bit kernel of the ISA level in force (AVX-512's 32-column panels
 * or AVX2's 16-column ones: tests/run.sh runs this at every level) against
 * the double twin, each format, every m from 1 to 44 (every register block
 * and its remainders, one and two tiles of rows) on n and k picked per m
 * (n off the panel widths, k odd or 1), with and without bias and GELU;
 * then tiles on both sides of the AVX2 form's row threshold (47 and 48
 * rows for FP16 and BF16; FP8's 8 falls in the loop), and widened slices
 * of 256 lines with a last one of 1 and of 88. */
START_TEST(h16_kernel_matches_the_double_twin_on_odd_shapes_and_every_small_m)
{
    static const int ns[] = {1, 5, 8, 15, 16, 17, 31, 33, 47, 64, 100};
    static const int ks[] = {1, 2, 7, 16, 33, 129, 385};
    const kc_h16_fmt fmt = (kc_h16_fmt)_i;
    kc_h16_set_enabled(true);
    if (!kc_h16_available()) {
        printf("h16 kernel: none at this level; nothing to test\n");
        return;
    }
    printf("h16 kernel: %s (fmt %d)\n", kc_h16_kernel_name(), fmt);
    tu_rng = fresh_seed ^ (0x2545f4914f6cdd1dULL * (unsigned)(_i + 1));
    for (int m = 1; m <= (emulated() ? 14 : 44); m++)
        h16_twin_on(fmt, ns[pick((int)(sizeof ns / sizeof *ns))],
                    ks[pick((int)(sizeof ks / sizeof *ks))], m, m % 2, m % 4 >= 2);
    h16_twin_on(fmt, 130, 385, 130, true, true); /* three row tiles of the thread split */
    h16_twin_on(fmt, 768, 64, 7, false, true);   /* many panels over the threads */
    h16_twin_on(fmt, 33, 300, 47, true, false);  /* the last tile that widens per block */
    h16_twin_on(fmt, 47, 257, 48, false, true);  /* the first by slices; a slice of 1 line */
    h16_twin_on(fmt, 17, 600, 64, true, true);   /* slices of 256, 256, 88 */
    h16_twin_on(fmt, 40, 129, 200, true, false); /* four tiles of 50 rows */
    kc_h16_set_enabled(!mt_opt_int(MT_OPT_NO_H16_KERNEL));
}
END_TEST

/* The CPU backend names the 16-bit form of the level in force (the same
 * test at ONEDNN_MAX_CPU_ISA=AVX2 must say avx2_h16), and an FP16 weight
 * uploaded there keeps no plain codes (the panels hold them); with the
 * kernel switched off it is the decoding sgemm again. */
START_TEST(backend_names_the_h16_kernel_of_the_isa_level)
{
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(0, &be, &err), MT_OK);
    const kc_isa *isa = kc_isa_get();
    kc_h16_set_enabled(true);
#if defined(__x86_64__)
    ck_assert(isa->avx2); /* CPUID's AVX2, FMA, F16C: the binary's floor, at every level */
    const char *want = isa->avx512 ? "avx512_h16" : "avx2_h16";
    if (isa->level == KC_ISA_AVX2 || isa->level == KC_ISA_AVX2_VNNI) {
        ck_assert_str_eq(want, "avx2_h16");
        ck_assert(!kc_bf16_matmul_available()); /* bf16 takes the panels too */
    }
#else
    const char *want = "decode_sgemm";
#endif
    printf("isa %s: fp16 %s, bf16 %s, fp8 %s\n", kc_isa_name(isa->level),
           be->ops->gemm_kernel(be, MT_PREC_FP16), be->ops->gemm_kernel(be, MT_PREC_BF16),
           be->ops->gemm_kernel(be, MT_PREC_FP8));
    ck_assert_str_eq(be->ops->gemm_kernel(be, MT_PREC_FP16), want);
    ck_assert_str_eq(be->ops->gemm_kernel(be, MT_PREC_FP8), want);
    ck_assert_str_eq(be->ops->gemm_kernel(be, MT_PREC_BF16),
                     kc_bf16_matmul_available() ? "onednn_bf16" : want);
    float *w = rand_vec(40 * 24, 0.1f), *deq = malloc(sizeof(float) * 40 * 24);
    mt_weight *a = make_weight(be, w, 40, 24, MT_PREC_FP16, deq);
    ck_assert(kc_h16_available() ? a->data == NULL : a->data != NULL);
    be->ops->weight_destroy(be, a);
    kc_h16_set_enabled(false);
    ck_assert_str_eq(be->ops->gemm_kernel(be, MT_PREC_FP16), "decode_sgemm");
    kc_h16_set_enabled(!mt_opt_int(MT_OPT_NO_H16_KERNEL));
    mt_backend_destroy(be);
    free(w), free(deq);
}
END_TEST

/* More FP32 shapes than gemm_f32.c's table holds: the first are blocked for
 * the matmul, the rest keep a plain copy on sgemm; all must be right. */
START_TEST(fp32_weights_past_the_shape_table_fall_back_to_sgemm_and_agree)
{
    const int k = 40, m = 19, nshapes = 40;
    int blocked = 0, plain = 0;
    float *x = rand_vec((size_t)m * k, 2.0f);
    double *xd = twin_inputs(x, m, 1, k, MT_PREC_FP32);
    for (int i = 0; i < nshapes; i++) {
        const int n = 8 * (i + 1) + 3; /* no shape of any other test */
        float *w = rand_vec((size_t)n * k, 0.1f), *bias = rand_vec(n, 0.5f);
        kc_f32_weight *fw = NULL;
        ck_assert_int_eq(kc_f32_weight_create(w, n, k, 2, &fw), KC_OK);
        ck_assert_uint_ge(kc_f32_weight_bytes(fw), sizeof(float) * (size_t)n * k);
        blocked += kc_f32_weight_blocked(fw);
        plain += !kc_f32_weight_blocked(fw);
        double *acc = twin_gemm(xd, m, w, n, k);
        for (size_t e = 0; e < (size_t)m * n; e++)
            acc[e] = gelu_d(acc[e] + bias[e % n]);
        float *y = poisoned((size_t)m * n);
        ck_assert_int_eq(kc_gemm_f32(x, m, fw, bias, true, y), KC_OK);
        double e = rel_err(y, acc, (size_t)m * n, 1e-3);
        ck_assert_msg(e <= 1e-5, "n=%d blocked=%d: relative error %g", n,
                      kc_f32_weight_blocked(fw), e);
        kc_f32_weight_destroy(fw);
        free(w), free(bias), free(acc), free(y);
    }
    ck_assert_int_ge(blocked, 1);
    ck_assert_int_ge(plain, nshapes - KC_F32_SHAPES_MAX);
    free(x), free(xd);
}
END_TEST

/* ---- thread safety ---------------------------------------------------------- */

typedef struct {
    mt_backend *be;
    const mt_weight *wt;
    const float *x, *bias;
    int k, n;
    const int *ms;
    int nms;
    double **refs;
    double worst;
    int failed;
} conc_job;

/* Calls one weight with several M (new primitive buckets among them) over
 * and over, checking each result against its precomputed twin. */
static void *conc_worker(void *arg)
{
    conc_job *j = arg;
    for (int rep = 0; rep < 6; rep++)
        for (int i = 0; i < j->nms; i++) {
            int m = j->ms[(i + rep) % j->nms];
            int ri = (i + rep) % j->nms;
            float *y = poisoned((size_t)m * j->n);
            mt_err err;
            if (j->be->ops->gemm(j->be, j->x, m, j->wt, j->bias, MT_ACT_GELU, y, &err) != MT_OK)
                j->failed = 1;
            double e = rel_err(y, j->refs[ri], (size_t)m * j->n, 1e-3);
            if (e > j->worst)
                j->worst = e;
            free(y);
        }
    return NULL;
}

START_TEST(concurrent_calls_on_one_weight_with_different_m_are_correct)
{
    static const mt_precision cprecs[] = {MT_PREC_INT8, MT_PREC_FP8, MT_PREC_INT8G, MT_PREC_FP32};
    const mt_precision p = cprecs[_i];
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(2, &be, &err), MT_OK);
    const int n = emulated() ? 128 : 384, k = n;
    static const int msa[] = {300, 7, 33, 130, 1}, msb[] = {17, 256, 65, 2, 513};
    const int maxm = 513;
    float *w = rand_vec((size_t)n * k, 0.1f), *deq = malloc(sizeof(float) * n * k);
    float *x = rand_vec((size_t)maxm * k, 2.0f), *bias = rand_vec(n, 0.5f);
    mt_weight *wt = make_weight(be, w, n, k, p, deq); /* fresh: no primitive made yet */
    conc_job jobs[2] = {{be, wt, x, bias, k, n, msa, 5, NULL, 0, 0},
                        {be, wt, x, bias, k, n, msb, 5, NULL, 0, 0}};
    for (int t = 0; t < 2; t++) {
        jobs[t].refs = malloc(sizeof(double *) * 5);
        for (int i = 0; i < 5; i++) {
            int m = jobs[t].ms[i];
            double *xd = twin_inputs(x, m, n, k, p);
            double *acc = twin_gemm(xd, m, deq, n, k);
            for (size_t e = 0; e < (size_t)m * n; e++)
                acc[e] = gelu_d(acc[e] + bias[e % n]);
            jobs[t].refs[i] = acc;
            free(xd);
        }
    }
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, conc_worker, &jobs[t]), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++) {
        ck_assert_msg(!jobs[t].failed, "thread %d: a call failed", t);
        ck_assert_msg(jobs[t].worst <= 1e-5, "thread %d: relative error %g", t, jobs[t].worst);
        for (int i = 0; i < 5; i++)
            free(jobs[t].refs[i]);
        free(jobs[t].refs);
    }
    be->ops->weight_destroy(be, wt);
    free(w), free(deq), free(x), free(bias);
    mt_backend_destroy(be);
}
END_TEST

/* ---- throughput (printed only) ------------------------------------------- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

START_TEST(print_gemm_throughput_of_each_precision)
{
    if (getenv("MANTISSA_EMULATED")) { /* under an emulator (tests/arm64.sh) */
        printf("GEMM throughput: not timed (MANTISSA_EMULATED)\n");
        return;
    }
    mt_backend *be;
    mt_err err;
    ck_assert_int_eq(mt_backend_cpu_create(0, &be, &err), MT_OK);
    static const int shapes[][3] = {{4096, 1536, 384}, {128, 1536, 384}, {128, 384, 1536}};
    printf("GEMM throughput, %d threads, y = x W^T + bias: GOP/s of the fastest call, of the\n"
           "median call, and the fastest call's time\n",
           be->threads);
    printf("  %-6s", "prec");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        char h[48];
        snprintf(h, sizeof h, "M=%d N=%d K=%d", shapes[s][0], shapes[s][1], shapes[s][2]);
        printf("  %-28s", h);
    }
    printf("\n");
    for (int i = 0; i < NPRECS; i++) {
        printf("  %-6s", mt_precision_name(precs[i]));
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            float *w = rand_vec((size_t)n * k, 0.1f), *deq = malloc(sizeof(float) * n * k);
            float *x = rand_vec((size_t)m * k, 2.0f), *bias = rand_vec(n, 0.5f);
            float *y = malloc(sizeof(float) * m * n);
            mt_weight *wt = make_weight(be, w, n, k, precs[i], deq);
            ck_assert_int_eq(be->ops->gemm(be, x, m, wt, bias, MT_ACT_NONE, y, &err), MT_OK);
            /* the fastest single call and the median: the machine may be
             * shared, and the minimum is the least disturbed measurement */
            const double flop = 2.0 * m * n * k;
            const int reps = flop > 1e9 ? 9 : 99;
            double t[99];
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                be->ops->gemm(be, x, m, wt, bias, MT_ACT_NONE, y, &err);
                t[r] = now_s() - t0;
            }
            qsort(t, reps, sizeof *t, cmp_double);
            const double best = t[0], med = t[reps / 2];
            printf("  %7.1f %7.1f (%7.3f ms)", flop / best * 1e-9, flop / med * 1e-9, best * 1e3);
            be->ops->weight_destroy(be, wt);
            free(w), free(deq), free(x), free(bias), free(y);
        }
        printf("\n");
    }
    fflush(stdout);
    mt_backend_destroy(be);
}
END_TEST

static Suite *test_suite(void)
{
    const char *seed = getenv("QGEMM_TEST_SEED");
    fresh_seed = seed && *seed ? strtoull(seed, NULL, 0)
                               : (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    printf("qgemm test seed %llu (QGEMM_TEST_SEED replays it)\n", fresh_seed);
    fflush(stdout);
    Suite *s = suite_create("qgemm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, each_precision_matches_its_double_twin_with_or_without_epilogue,
                        0, NPRECS);
    tcase_add_test(tc, fp8_decoder_is_exact_for_every_code_but_nan);
    tcase_add_test(tc, activation_quantizer_is_per_token_asymmetric_half_even_and_keeps_zero_exact);
    tcase_add_test(tc, activation_quantizer_forms_agree_per_token_and_per_group);
    tcase_add_test(tc, epilogue_applies_column_and_row_scales_bias_and_gelu);
    tcase_add_test(tc, resident_bytes_are_honest_and_bad_weights_are_refused);
    tcase_add_test(tc, int8_in_place_and_reordered_weights_give_identical_results);
    tcase_add_loop_test(tc, concurrent_calls_on_one_weight_with_different_m_are_correct, 0, 4);
    tcase_add_test(tc, int8_kernels_agree_bitwise_on_every_form_the_isa_level_has);
    tcase_add_test(tc, int8_pairs_of_largest_codes_do_not_saturate);
    tcase_add_test(tc, avx2_forms_equal_the_sign_form_bitwise_on_fresh_odd_shapes);
    tcase_add_loop_test(tc, avx2_forms_are_the_sign_form_under_concurrent_calls_with_different_m,
                        0, 2);
    tcase_add_test(tc, h16_kernel_and_panel_gemm_agree);
    tcase_add_loop_test(tc, h16_kernel_matches_the_double_twin_on_odd_shapes_and_every_small_m, 0, 3);
    tcase_add_test(tc, backend_names_the_h16_kernel_of_the_isa_level);
    tcase_add_test(tc, int8_kernel_option_values_are_the_kernel_names_in_order);
    tcase_add_test(tc, fp32_weights_past_the_shape_table_fall_back_to_sgemm_and_agree);
    tcase_add_test(tc, print_gemm_throughput_of_each_precision);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
