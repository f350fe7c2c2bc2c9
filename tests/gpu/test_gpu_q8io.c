/* test_gpu_q8io.c: the kernels of an 8-bit model's forward on 16-bit rows
 * (backend.h act_format: int8 and fp8 weights on f16 activations).
 *
 * - kcu_w8a16_gemm_16 against kcu_w8a16_gemm_mul on the same rows widened
 *   to FP32 (and the bias widened): the same MMAs on the same f16/bf16
 *   operands, so its output must be exactly that kernel's FP32 output
 *   rounded once to the row type, bit for bit. Both kernels (staged,
 *   direct), both weight types, both row types, smoothing on and off,
 *   split-K planned and off, bias and GELU, padded rows.
 * - kcu_dequant_to_f16_mul against the host: f16(code * scale[r] * mul[c]).
 * - kcu_quant_rows_16 (E4M3) against kcu_quant_rows_e4m3_mul on the widened
 *   rows: the same codes and row scales, bit for bit.
 * - kcu_w8a8_i8_gemm_16 (INT8 W8A8 on tensor cores) against the host: exact
 *   int sums, the epilogue in double, within the 16-bit rounding.
 * - kcu_quant_rows_16's int8 codes against the host: s = absmax / 127 and
 *   each code the rounded, clamped x * mul / s, bit for bit.
 * - kcu_layernorm_16_q (LayerNorm writing the W8A8 GEMM's rows too, E4M3
 *   and int8) against kcu_layernorm_16 followed by kcu_quant_rows_16: the
 *   same output, codes and row scales, bit for bit.
 * Inputs are fresh random numbers each run, outputs poisoned before every
 * launch (so an unwritten element fails).
 *
 *   test_gpu_q8io [--seed N] [--quick]
 */
#include "kernels/cpu/numfmt.h"
#include "kernels/cuda/kcu.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/gpu_test16.h"

static int quick;
static int sms = 1;
static cudaStream_t stream;

/* Runs call when every call before it in the function succeeded (e ==
 * cudaSuccess), naming it in what: one check at the end says which failed. */
#define TRY(call) (void)(e == cudaSuccess ? (what = #call, e = (call)) : e)

static int round_up(int v, int a)
{
    return (v + a - 1) / a * a;
}

/* A random weight code: int8 in [-127, 127], or any E4M3 code but NaN. */
static uint8_t rand_code(kcu_wtype wt)
{
    if (wt == KCU_W_INT8)
        return (uint8_t)(int8_t)gt_randint(-127, 127);
    uint8_t b;
    do
        b = (uint8_t)gt_randint(0, 255);
    while ((b & 0x7f) == 0x7f);
    return b;
}

static float dec_code(uint8_t b, kcu_wtype wt)
{
    return wt == KCU_W_INT8 ? (float)(int8_t)b : nf_e4m3_to_f32(b);
}

/* One GEMM both ways: kernel (KCU_W8A16_STAGED or _DIRECT), splits
 * (force_splits; 0: the planner's), ldx k or k + 4 (pad). */
static void gemm16_is_fp32_rounded(kcu_wtype wt, kcu_dtype dt, int sm, int kernel, int splits,
                                   int m, int n, int k, int pad, int bias, int gelu)
{
    const int ldx = k + (pad ? 4 : 0), ldw = round_up(k, 16), kmul = round_up(k, 64);
    const size_t nx = (size_t)m * ldx, ny = (size_t)m * n;
    uint16_t *xh = malloc(2 * nx), *bh = malloc(2 * (size_t)n), *yh = malloc(2 * ny);
    float *xf = malloc(4 * nx), *bf = malloc(4 * (size_t)n), *yf = malloc(4 * ny);
    float *scale = malloc(4 * (size_t)n), *mul = malloc(4 * (size_t)kmul);
    uint8_t *w = malloc((size_t)n * ldw);
    rand16(xh, xf, nx, -2.f, 2.f, dt); /* the pad columns too: never read */
    rand16(bh, bf, (size_t)n, -0.5f, 0.5f, dt);
    for (size_t i = 0; i < (size_t)n * ldw; i++)
        w[i] = rand_code(wt); /* the row padding too: the kernels zero it */
    for (int i = 0; i < n; i++)
        scale[i] = gt_unif(0.002f, 0.02f);
    for (int i = 0; i < kmul; i++)
        mul[i] = gt_unif(0.5f, 2.f);
    const kcu_w8a16_opts o = {0, splits, 0, kernel};
    int ncnt = 0;
    const size_t wsf = kcu_w8a16_ws_bound(n, k, sms, &o, &ncnt);
    void *dxh = gt_dmalloc(2 * nx), *dbh = gt_dmalloc(2 * (size_t)n), *dyh = gt_dmalloc(2 * ny);
    float *dxf = gt_dmalloc(4 * nx), *dbf = gt_dmalloc(4 * (size_t)n), *dyf = gt_dmalloc(4 * ny);
    float *dscale = gt_dmalloc(4 * (size_t)n), *dmul = gt_dmalloc(4 * (size_t)kmul);
    float *ws = gt_dmalloc(4 * (wsf ? wsf : 1));
    int *cnt = gt_dmalloc(sizeof(int) * (size_t)(ncnt ? ncnt : 1));
    uint8_t *dw = gt_dmalloc((size_t)n * ldw);
    const char *what = "";
    if (!dxh || !dbh || !dyh || !dxf || !dbf || !dyf || !dscale || !dmul || !ws || !cnt || !dw) {
        CHECK(0, "device memory");
        goto done;
    }
    cudaError_t e = cudaSuccess;
    TRY(cudaMemcpy(dxh, xh, 2 * nx, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dxf, xf, 4 * nx, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dbh, bh, 2 * (size_t)n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dbf, bf, 4 * (size_t)n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dscale, scale, 4 * (size_t)n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dmul, mul, 4 * (size_t)kmul, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dw, w, (size_t)n * ldw, cudaMemcpyHostToDevice));
    TRY(cudaMemset(cnt, 0, sizeof(int) * (size_t)(ncnt ? ncnt : 1)));
    TRY(cudaMemset(dyf, 0xff, 4 * ny)); /* NaN poison */
    poison16(dyh, ny, dt);
    const kcu_act act = gelu ? KCU_ACT_GELU : KCU_ACT_NONE;
    const kcu_atype at = dt == KCU_DT_F16 ? KCU_A_F16 : KCU_A_BF16;
    TRY(kcu_w8a16_gemm_mul(dxf, ldx, dw, ldw, wt, dscale, bias ? dbf : NULL, act, dyf, n, m, n, k, at,
                           sm ? dmul : NULL, &o, ws, wsf, cnt, ncnt, stream));
    TRY(kcu_w8a16_gemm_16(dxh, ldx, dw, ldw, wt, dscale, bias ? dbh : NULL, act, dyh, n, m, n, k, dt,
                          sm ? dmul : NULL, &o, ws, wsf, cnt, ncnt, stream));
    TRY(cudaStreamSynchronize(stream));
    TRY(cudaMemcpy(yf, dyf, 4 * ny, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(yh, dyh, 2 * ny, cudaMemcpyDeviceToHost));
    if (!CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e)))
        goto done;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ny; i++)
        if (enc16(yf[i], dt) != yh[i] || !isfinite(yf[i]))
            first = bad++ ? first : i;
    CHECK(bad == 0,
          "w8a16 on %s rows, %s weights, %s kernel, smoothing %d, splits %d, m=%d n=%d k=%d "
          "ldx=%d bias %d gelu %d: %zu of %zu outputs are not the FP32 kernel's rounded (first "
          "at %zu: FP32 %.9g -> 0x%04x, 16-bit 0x%04x)",
          dt_name(dt), wt == KCU_W_INT8 ? "int8" : "e4m3",
          kernel == KCU_W8A16_DIRECT ? "direct" : "staged", sm, splits, m, n, k, ldx, bias, gelu,
          bad, ny, first, yf[first], enc16(yf[first], dt), yh[first]);
done:
    cudaFree(dxh), cudaFree(dbh), cudaFree(dyh), cudaFree(dxf), cudaFree(dbf), cudaFree(dyf);
    cudaFree(dscale), cudaFree(dmul), cudaFree(ws), cudaFree(cnt), cudaFree(dw);
    free(xh), free(bh), free(yh), free(xf), free(bf), free(yf), free(scale), free(mul), free(w);
}

static void w8a16_on_16bit_rows(void)
{
    static const int shapes[][3] = {{1, 384, 384},  {5, 200, 72},    {16, 1536, 384},
                                    {12, 128, 1000}, {33, 384, 1536}, {100, 136, 200}};
    int idx = 0;
    for (int wt = 0; wt < 2; wt++)
        for (int d = 0; d < 2; d++)
            for (int sm = 0; sm < 2; sm++)
                for (int s = 0; s < (quick ? 3 : 6); s++, idx++) {
                    const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    const kcu_wtype w = wt ? KCU_W_E4M3 : KCU_W_INT8;
                    const kcu_dtype dt = d ? KCU_DT_BF16 : KCU_DT_F16;
                    for (int splits = 0; splits < 2; splits++) {
                        gemm16_is_fp32_rounded(w, dt, sm, KCU_W8A16_STAGED, splits, m, n, k,
                                               idx & 1, (idx >> 1) & 1 || splits, idx & 4);
                        if (m <= 16)
                            gemm16_is_fp32_rounded(w, dt, sm, KCU_W8A16_DIRECT, splits, m, n, k,
                                                   idx & 1, 1, !(idx & 4));
                    }
                }
}

/* The weight of an 8-bit layer as FP16 with the smoothing multipliers
 * folded in: f16(code * scale[r] * mul[c]), zeros past k. */
static void dequant_mul_matches_host(void)
{
    static const int shapes[][2] = {{37, 100}, {8, 16}, {64, 384}};
    for (int wt = 0; wt < 2; wt++)
        for (int with_mul = 0; with_mul < 2; with_mul++)
            for (int s = 0; s < 3; s++) {
                const kcu_wtype t = wt ? KCU_W_E4M3 : KCU_W_INT8;
                const int n = shapes[s][0], k = shapes[s][1], ldw = round_up(k, 16), ldo = round_up(k, 8) + 8;
                uint8_t *w = malloc((size_t)n * ldw);
                float *scale = malloc(4 * (size_t)n), *mul = malloc(4 * (size_t)k);
                uint16_t *out = malloc(2 * (size_t)n * ldo);
                for (size_t i = 0; i < (size_t)n * ldw; i++)
                    w[i] = rand_code(t);
                for (int i = 0; i < n; i++)
                    scale[i] = gt_unif(0.002f, 0.02f);
                for (int i = 0; i < k; i++)
                    mul[i] = gt_unif(0.5f, 2.f);
                uint8_t *dw = gt_dmalloc((size_t)n * ldw);
                float *ds = gt_dmalloc(4 * (size_t)n), *dm = gt_dmalloc(4 * (size_t)k);
                void *dout = gt_dmalloc(2 * (size_t)n * ldo);
                cudaError_t e = dw && ds && dm && dout ? cudaSuccess : cudaErrorMemoryAllocation;
                const char *what = "device memory";
                TRY(cudaMemcpy(dw, w, (size_t)n * ldw, cudaMemcpyHostToDevice));
                TRY(cudaMemcpy(ds, scale, 4 * (size_t)n, cudaMemcpyHostToDevice));
                TRY(cudaMemcpy(dm, mul, 4 * (size_t)k, cudaMemcpyHostToDevice));
                if (e == cudaSuccess)
                    poison16(dout, (size_t)n * ldo, KCU_DT_F16);
                TRY(kcu_dequant_to_f16_mul(dw, ldw, t, ds, with_mul ? dm : NULL, n, k, dout, ldo,
                                           stream));
                TRY(cudaStreamSynchronize(stream));
                TRY(cudaMemcpy(out, dout, 2 * (size_t)n * ldo, cudaMemcpyDeviceToHost));
                if (CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e))) {
                    size_t bad = 0;
                    for (int r = 0; r < n; r++)
                        for (int c = 0; c < ldo; c++) {
                            float v = 0.f;
                            if (c < k) {
                                v = dec_code(w[(size_t)r * ldw + c], t) * scale[r];
                                if (with_mul)
                                    v *= mul[c];
                            }
                            bad += out[(size_t)r * ldo + c] != nf_f32_to_f16(v);
                        }
                    CHECK(bad == 0, "dequant_to_f16_mul %s mul %d n=%d k=%d ldo=%d: %zu of %d values "
                          "differ from the host's f16(code * scale * mul)",
                          t == KCU_W_INT8 ? "int8" : "e4m3", with_mul, n, k, ldo, bad, n * ldo);
                }
                cudaFree(dw), cudaFree(ds), cudaFree(dm), cudaFree(dout);
                free(w), free(scale), free(mul), free(out);
            }
}

/* Per-token E4M3 quantization of 16-bit rows: the FP32 kernel's codes and
 * scales on the widened rows, bit for bit (vector and scalar forms). */
static void quant_rows_16_matches_fp32(void)
{
    static const int shapes[][3] = {{1, 64, 64}, {7, 200, 200}, {40, 384, 388}, {3, 30, 30},
                                    {65, 1000, 1000}};
    for (int d = 0; d < 2; d++)
        for (int with_mul = 0; with_mul < 2; with_mul++)
            for (int s = 0; s < 5; s++) {
                const kcu_dtype dt = d ? KCU_DT_BF16 : KCU_DT_F16;
                const int m = shapes[s][0], k = shapes[s][1], ldx = shapes[s][2], ldq = round_up(k, 16);
                uint16_t *xh = malloc(2 * (size_t)m * ldx);
                float *xf = malloc(4 * (size_t)m * ldx), *mul = malloc(4 * (size_t)k);
                float *s16 = malloc(4 * (size_t)m), *s32 = malloc(4 * (size_t)m);
                uint8_t *q16 = malloc((size_t)m * ldq), *q32 = malloc((size_t)m * ldq);
                rand16(xh, xf, (size_t)m * ldx, -3.f, 3.f, dt);
                if (m > 2) /* an all-zero row: scale 1, codes 0 */
                    for (int c = 0; c < ldx; c++)
                        xh[ldx + c] = 0, xf[ldx + c] = 0.f;
                for (int i = 0; i < k; i++)
                    mul[i] = gt_unif(0.5f, 2.f);
                void *dxh = gt_dmalloc(2 * (size_t)m * ldx);
                float *dxf = gt_dmalloc(4 * (size_t)m * ldx), *dm = gt_dmalloc(4 * (size_t)k);
                float *ds16 = gt_dmalloc(4 * (size_t)m), *ds32 = gt_dmalloc(4 * (size_t)m);
                uint8_t *dq16 = gt_dmalloc((size_t)m * ldq), *dq32 = gt_dmalloc((size_t)m * ldq);
                cudaError_t e = dxh && dxf && dm && ds16 && ds32 && dq16 && dq32
                                    ? cudaSuccess
                                    : cudaErrorMemoryAllocation;
                const char *what = "device memory";
                TRY(cudaMemcpy(dxh, xh, 2 * (size_t)m * ldx, cudaMemcpyHostToDevice));
                TRY(cudaMemcpy(dxf, xf, 4 * (size_t)m * ldx, cudaMemcpyHostToDevice));
                TRY(cudaMemcpy(dm, mul, 4 * (size_t)k, cudaMemcpyHostToDevice));
                TRY(cudaMemset(dq16, 0x7f, (size_t)m * ldq)); /* E4M3 NaN: poison */
                TRY(cudaMemset(ds16, 0xff, 4 * (size_t)m));
                TRY(kcu_quant_rows_e4m3_mul(dxf, ldx, m, k, with_mul ? dm : NULL, dq32, ldq, ds32,
                                            stream));
                TRY(kcu_quant_rows_16(dxh, dt, ldx, m, k, with_mul ? dm : NULL, KCU_W_E4M3, dq16,
                                      ldq, ds16, stream));
                TRY(cudaStreamSynchronize(stream));
                TRY(cudaMemcpy(q16, dq16, (size_t)m * ldq, cudaMemcpyDeviceToHost));
                TRY(cudaMemcpy(q32, dq32, (size_t)m * ldq, cudaMemcpyDeviceToHost));
                TRY(cudaMemcpy(s16, ds16, 4 * (size_t)m, cudaMemcpyDeviceToHost));
                TRY(cudaMemcpy(s32, ds32, 4 * (size_t)m, cudaMemcpyDeviceToHost));
                if (CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e)))
                    CHECK(!memcmp(q16, q32, (size_t)m * ldq) && !memcmp(s16, s32, 4 * (size_t)m),
                          "quant_rows_16 (e4m3) on %s rows, mul %d, m=%d k=%d ldx=%d: codes or row "
                          "scales differ from the FP32 kernel's on the widened rows",
                          dt_name(dt), with_mul, m, k, ldx);
                cudaFree(dxh), cudaFree(dxf), cudaFree(dm), cudaFree(ds16), cudaFree(ds32);
                cudaFree(dq16), cudaFree(dq32);
                free(xh), free(xf), free(mul), free(s16), free(s32), free(q16), free(q32);
            }
}

/* Per-token int8 codes of 16-bit rows (the INT8 W8A8 GEMM's activations):
 * against the host on the decoded rows, bit for bit: s = absmax / 127 of
 * x * mul (FP32 products), code = round-half-even(x * mul / s) clamped to
 * +-127, pad columns 0, an all-zero row scale 1. */
static void quant_rows_i8_matches_host(void)
{
    static const int shapes[][2] = {{1, 64}, {7, 200}, {40, 384}, {3, 30}, {65, 1000}};
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 5; s++) {
            const kcu_dtype dt = d ? KCU_DT_BF16 : KCU_DT_F16;
            const int m = shapes[s][0], k = shapes[s][1], ldq = round_up(k, 16);
            const int kmul = round_up(k, 64);
            uint16_t *xh = malloc(2 * (size_t)m * k);
            float *xf = malloc(4 * (size_t)m * k), *mul = malloc(4 * (size_t)kmul);
            float *sc = malloc(4 * (size_t)m);
            uint8_t *q = malloc((size_t)m * ldq);
            rand16(xh, xf, (size_t)m * k, -3.f, 3.f, dt);
            if (m > 2)
                for (int c = 0; c < k; c++)
                    xh[k + c] = 0, xf[k + c] = 0.f;
            for (int i = 0; i < kmul; i++)
                mul[i] = gt_unif(0.5f, 2.f);
            void *dx = gt_dmalloc(2 * (size_t)m * k);
            float *dm = gt_dmalloc(4 * (size_t)kmul), *ds = gt_dmalloc(4 * (size_t)m);
            uint8_t *dq = gt_dmalloc((size_t)m * ldq);
            cudaError_t e = dx && dm && ds && dq ? cudaSuccess : cudaErrorMemoryAllocation;
            const char *what = "device memory";
            TRY(cudaMemcpy(dx, xh, 2 * (size_t)m * k, cudaMemcpyHostToDevice));
            TRY(cudaMemcpy(dm, mul, 4 * (size_t)kmul, cudaMemcpyHostToDevice));
            TRY(cudaMemset(dq, 0x80, (size_t)m * ldq)); /* -128: never a code */
            TRY(cudaMemset(ds, 0xff, 4 * (size_t)m));
            TRY(kcu_quant_rows_16(dx, dt, k, m, k, dm, KCU_W_INT8, dq, ldq, ds, stream));
            TRY(cudaStreamSynchronize(stream));
            TRY(cudaMemcpy(q, dq, (size_t)m * ldq, cudaMemcpyDeviceToHost));
            TRY(cudaMemcpy(sc, ds, 4 * (size_t)m, cudaMemcpyDeviceToHost));
            const int ok = CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e));
            size_t bad = 0, big = 0;
            for (int r = 0; ok && r < m; r++) {
                float amax = 0.f;
                for (int c = 0; c < k; c++)
                    amax = fmaxf(amax, fabsf(dec16(xh[(size_t)r * k + c], dt) * mul[c]));
                const float sr = amax > 0.f ? amax / 127.0f : 1.0f;
                bad += memcmp(&sr, &sc[r], 4) != 0;
                for (int c = 0; c < ldq; c++) {
                    long v = 0;
                    if (c < k) {
                        v = lrintf(dec16(xh[(size_t)r * k + c], dt) * mul[c] / sr);
                        v = v < -127 ? -127 : v > 127 ? 127 : v;
                    }
                    bad += (int8_t)q[(size_t)r * ldq + c] != v;
                    big += v == 127 || v == -127;
                }
            }
            CHECK(!ok || (bad == 0 && big >= (size_t)m - (m > 2)),
                  "quant_rows_16 int8 on %s rows, m=%d k=%d: %zu codes or scales differ from the "
                  "host's (%zu at +-127)", dt_name(dt), m, k, bad, big);
            cudaFree(dx), cudaFree(dm), cudaFree(ds), cudaFree(dq);
            free(xh), free(xf), free(mul), free(sc), free(q);
        }
}

/* One shape of ln_q_is_ln_then_quant: ldq = h + pad, out aliasing x when
 * alias (as the encoder's residual LayerNorm does). */
static void ln_q_case(kcu_dtype dt, kcu_wtype code, int t, int h, int pad, int with_res,
                      int with_mul, int alias)
{
    const int ldq = h + pad, kmul = round_up(h, 64);
    const size_t nx = (size_t)t * h, nq = (size_t)t * ldq;
    uint16_t *xh = malloc(2 * nx), *rh = malloc(2 * nx), *o1 = malloc(2 * nx), *o2 = malloc(2 * nx);
    float *tmp = malloc(4 * nx), *g = malloc(4 * (size_t)h), *b = malloc(4 * (size_t)h);
    float *mul = malloc(4 * (size_t)kmul), *s1 = malloc(4 * (size_t)t), *s2 = malloc(4 * (size_t)t);
    uint8_t *q1 = malloc(nq), *q2 = malloc(nq);
    rand16(xh, tmp, nx, -3.f, 3.f, dt);
    rand16(rh, tmp, nx, -1.f, 1.f, dt);
    for (int i = 0; i < h; i++)
        g[i] = gt_unif(0.5f, 1.5f), b[i] = gt_unif(-0.2f, 0.2f);
    for (int i = 0; i < kmul; i++)
        mul[i] = gt_unif(0.5f, 2.f);
    void *dx1 = gt_dmalloc(2 * nx), *dx2 = gt_dmalloc(2 * nx), *dr = gt_dmalloc(2 * nx);
    void *do1 = gt_dmalloc(2 * nx), *do2 = gt_dmalloc(2 * nx);
    float *dg = gt_dmalloc(4 * (size_t)h), *db = gt_dmalloc(4 * (size_t)h);
    float *dm = gt_dmalloc(4 * (size_t)kmul), *ds1 = gt_dmalloc(4 * (size_t)t),
          *ds2 = gt_dmalloc(4 * (size_t)t);
    uint8_t *dq1 = gt_dmalloc(nq), *dq2 = gt_dmalloc(nq);
    cudaError_t e = dx1 && dx2 && dr && do1 && do2 && dg && db && dm && ds1 && ds2 && dq1 && dq2
                        ? cudaSuccess
                        : cudaErrorMemoryAllocation;
    const char *what = "device memory";
    TRY(cudaMemcpy(dx1, xh, 2 * nx, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dx2, xh, 2 * nx, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dr, rh, 2 * nx, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dg, g, 4 * (size_t)h, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(db, b, 4 * (size_t)h, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dm, mul, 4 * (size_t)kmul, cudaMemcpyHostToDevice));
    TRY(cudaMemset(dq1, 0x7f, nq)); /* E4M3 NaN: poison */
    TRY(cudaMemset(dq2, 0x5a, nq));
    TRY(cudaMemset(ds1, 0xff, 4 * (size_t)t));
    TRY(cudaMemset(ds2, 0xff, 4 * (size_t)t));
    if (e == cudaSuccess)
        poison16(do1, nx, dt), poison16(do2, nx, dt);
    void *out1 = alias ? dx1 : do1, *out2 = alias ? dx2 : do2;
    const float *m = with_mul ? dm : NULL;
    /* the reference: LayerNorm, then the quantization pass on its output */
    TRY(kcu_layernorm_16(dx2, with_res ? dr : NULL, dg, db, t, h, 1e-12f, out2, dt, stream));
    TRY(kcu_quant_rows_16(out2, dt, h, t, h, m, code, dq2, ldq, ds2, stream));
    TRY(kcu_layernorm_16_q(dx1, with_res ? dr : NULL, dg, db, t, h, 1e-12f, out1, dt, m, code, dq1,
                           ldq, ds1, stream));
    TRY(cudaStreamSynchronize(stream));
    TRY(cudaMemcpy(o1, out1, 2 * nx, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(o2, out2, 2 * nx, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(q1, dq1, nq, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(q2, dq2, nq, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(s1, ds1, 4 * (size_t)t, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(s2, ds2, 4 * (size_t)t, cudaMemcpyDeviceToHost));
    if (CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e))) {
        size_t nz = 0;
        for (size_t i = 0; i < nq; i++)
            nz += q1[i] != 0;
        CHECK(!memcmp(o1, o2, 2 * nx) && !memcmp(q1, q2, nq) && !memcmp(s1, s2, 4 * (size_t)t) &&
                  nz > nq / 4,
              "layernorm_16_q on %s rows, %s codes, t=%d h=%d ldq=%d res %d mul %d alias %d: "
              "output, codes or row scales differ from layernorm_16 then quant_rows_16 "
              "(%zu of %zu codes nonzero)",
              dt_name(dt), code == KCU_W_INT8 ? "int8" : "e4m3", t, h, ldq, with_res, with_mul,
              alias, nz, nq);
    }
    cudaFree(dx1), cudaFree(dx2), cudaFree(dr), cudaFree(do1), cudaFree(do2), cudaFree(dg);
    cudaFree(db), cudaFree(dm), cudaFree(ds1), cudaFree(ds2), cudaFree(dq1), cudaFree(dq2);
    free(xh), free(rh), free(o1), free(o2), free(tmp), free(g), free(b), free(mul), free(s1);
    free(s2), free(q1), free(q2);
}

/* LayerNorm writing the W8A8 rows of the GEMM after it (kcu_layernorm_16_q,
 * E4M3 and int8 codes) against LayerNorm, then the quantization pass on
 * its output: the same 16-bit output, codes (the pad columns zero) and
 * row scales, bit for bit, at every register-kernel width (h8 <= 32, 64,
 * 96, 128). */
static void ln_q_is_ln_then_quant(void)
{
    static const int shapes[][3] = {{1, 384, 0}, {37, 384, 16}, {130, 768, 8}, {5, 1024, 0},
                                    {9, 40, 24}, {64, 520, 0}};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 6; s++)
            for (int v = 0; v < (quick ? 2 : 8); v++)
                ln_q_case(d & 1 ? KCU_DT_BF16 : KCU_DT_F16, d & 2 ? KCU_W_INT8 : KCU_W_E4M3,
                          shapes[s][0], shapes[s][1], shapes[s][2], v & 1, (v >> 1) & 1,
                          (v >> 2) & 1 || quick);
}

/* One INT8 W8A8 GEMM (kcu_w8a8_i8_gemm_16) against the host: the int32
 * sums exact (int64 on the host), the epilogue in double; each output
 * within the 16-bit rounding of the reference plus FP32's error on the
 * epilogue's terms. Inputs: random int8 codes (zero past k in both),
 * scales as a model's, outputs poisoned first. */
static void w8a8_i8_case(kcu_dtype dt, int m, int n, int k, int bias, int gelu)
{
    const int kp = round_up(k, 16), ldq = kp + (m % 3 == 0 ? 16 : 0), ldw = kp, ldy = n + (n % 2);
    const size_t nq = (size_t)m * ldq, nw = (size_t)n * ldw, ny = (size_t)m * ldy;
    int8_t *xq = calloc(nq, 1), *w = calloc(nw, 1);
    float *xs = malloc(4 * (size_t)m), *ws = malloc(4 * (size_t)n), *bf = malloc(4 * (size_t)n);
    uint16_t *bh = malloc(2 * (size_t)n), *y = malloc(2 * ny);
    for (int r = 0; r < m; r++)
        for (int c = 0; c < k; c++)
            xq[(size_t)r * ldq + c] = (int8_t)gt_randint(-127, 127);
    for (int r = 0; r < n; r++)
        for (int c = 0; c < k; c++)
            w[(size_t)r * ldw + c] = (int8_t)gt_randint(-127, 127);
    for (int r = 0; r < m; r++)
        xs[r] = gt_unif(0.002f, 0.03f);
    for (int c = 0; c < n; c++)
        ws[c] = gt_unif(0.0005f, 0.004f);
    rand16(bh, bf, (size_t)n, -0.5f, 0.5f, dt);
    void *dq = gt_dmalloc(nq), *dw = gt_dmalloc(nw), *db = gt_dmalloc(2 * (size_t)n);
    void *dy = gt_dmalloc(2 * ny);
    float *dxs = gt_dmalloc(4 * (size_t)m), *dws = gt_dmalloc(4 * (size_t)n);
    cudaError_t e = dq && dw && db && dy && dxs && dws ? cudaSuccess : cudaErrorMemoryAllocation;
    const char *what = "device memory";
    TRY(cudaMemcpy(dq, xq, nq, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dw, w, nw, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(db, bh, 2 * (size_t)n, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dxs, xs, 4 * (size_t)m, cudaMemcpyHostToDevice));
    TRY(cudaMemcpy(dws, ws, 4 * (size_t)n, cudaMemcpyHostToDevice));
    if (e == cudaSuccess)
        poison16(dy, ny, dt);
    TRY(kcu_w8a8_i8_gemm_16(dq, ldq, dxs, dw, ldw, dws, bias ? db : NULL,
                            gelu ? KCU_ACT_GELU : KCU_ACT_NONE, dy, ldy, m, n, kp, dt, sms,
                            stream));
    TRY(cudaStreamSynchronize(stream));
    TRY(cudaMemcpy(y, dy, 2 * ny, cudaMemcpyDeviceToHost));
    size_t bad = 0, first = 0;
    double worst = 0, ref_first = 0;
    if (CHECK(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e)))
        for (int r = 0; r < m; r++)
            for (int c = 0; c < n; c++) {
                long long acc = 0;
                for (int i = 0; i < k; i++)
                    acc += (long long)xq[(size_t)r * ldq + i] * w[(size_t)c * ldw + i];
                const double prod = (double)acc * xs[r] * ws[c];
                double ref = prod + (bias ? bf[c] : 0.0);
                if (gelu)
                    ref = 0.5 * ref * (1.0 + erf(ref / sqrt(2.0)));
                const double got = dec16(y[(size_t)r * ldy + c], dt);
                const double tol = eps16(dt) * fabs(ref) + 4e-7 * (fabs(prod) + 1.0);
                const double err = fabs(got - ref);
                if (!(err <= tol)) {
                    if (!bad++)
                        first = (size_t)r * n + c, ref_first = ref;
                }
                worst = err / (fabs(ref) + 1e-3) > worst ? err / (fabs(ref) + 1e-3) : worst;
            }
    CHECK(bad == 0,
          "w8a8_i8 %s m=%d n=%d k=%d bias %d gelu %d: %zu of %zu outputs off the host reference "
          "(first at %zu: reference %.7g; worst relative %.3g)",
          dt_name(dt), m, n, k, bias, gelu, bad, (size_t)m * n, first, ref_first, worst);
    cudaFree(dq), cudaFree(dw), cudaFree(db), cudaFree(dy), cudaFree(dxs), cudaFree(dws);
    free(xq), free(w), free(xs), free(ws), free(bf), free(bh), free(y);
}

/* The INT8 W8A8 GEMM at MiniLM's and odd shapes, both tiles (64x64 below
 * one full wave of 128x128 tiles, else 128x128), both row types. */
static void w8a8_i8_matches_host(void)
{
    static const int shapes[][3] = {{1, 8, 32},     {7, 200, 384},  {64, 64, 64},
                                    {130, 1152, 384}, {33, 1536, 384}, {300, 384, 1536},
                                    {513, 100, 40},  {2048, 1536, 384}};
    const int ns = quick ? 6 : 8;
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < ns; s++)
            w8a8_i8_case(d ? KCU_DT_BF16 : KCU_DT_F16, shapes[s][0], shapes[s][1], shapes[s][2],
                         s % 2 == 0, s % 3 == 1);
}

static void refuses_bad_arguments(void)
{
    const kcu_w8a16_opts o = {0, 0, 0, 0};
    CHECK(kcu_w8a16_gemm_16((void *)16, 64, (void *)16, 64, KCU_W_INT8, (float *)16, NULL,
                            KCU_ACT_NONE, (void *)16, 64, 4, 64, 64, KCU_DT_F32, NULL, &o, NULL, 0,
                            NULL, 0, stream) == cudaErrorInvalidValue,
          "w8a16_gemm_16 refuses FP32 rows");
    CHECK(kcu_w8a16_gemm_16((void *)18, 64, (void *)16, 64, KCU_W_INT8, (float *)16, NULL,
                            KCU_ACT_NONE, (void *)16, 64, 4, 64, 64, KCU_DT_F16, NULL, &o, NULL, 0,
                            NULL, 0, stream) == cudaErrorInvalidValue,
          "w8a16_gemm_16 refuses rows that are not 8-byte aligned");
    CHECK(kcu_w8a16_gemm_16((void *)16, 66, (void *)16, 64, KCU_W_INT8, (float *)16, NULL,
                            KCU_ACT_NONE, (void *)16, 64, 4, 64, 64, KCU_DT_F16, NULL, &o, NULL, 0,
                            NULL, 0, stream) == cudaErrorInvalidValue,
          "w8a16_gemm_16 refuses a row stride that is not a multiple of 4");
    CHECK(kcu_quant_rows_16((void *)16, KCU_DT_F32, 64, 4, 64, NULL, KCU_W_E4M3, (uint8_t *)16,
                            64, (float *)16, stream) == cudaErrorInvalidValue,
          "quant_rows_16 refuses FP32 rows");
    static const struct {
        int h, ldq;
        kcu_dtype dt;
        kcu_wtype code;
        cudaError_t want;
        const char *what;
    } ln[] = {
        {36, 40, KCU_DT_F16, KCU_W_E4M3, cudaErrorNotSupported, "declines a width that is not a multiple of 8"},
        {64, 68, KCU_DT_F16, KCU_W_INT8, cudaErrorNotSupported, "declines a code row stride that is not a multiple of 8"},
        {64, 56, KCU_DT_F16, KCU_W_E4M3, cudaErrorInvalidValue, "refuses code rows narrower than h"},
        {64, 64, KCU_DT_F32, KCU_W_E4M3, cudaErrorInvalidValue, "refuses FP32 rows"},
    };
    for (size_t i = 0; i < sizeof ln / sizeof *ln; i++)
        CHECK(kcu_layernorm_16_q((void *)16, NULL, (float *)16, (float *)16, 4, ln[i].h, 1e-12f,
                                 (void *)16, ln[i].dt, NULL, ln[i].code, (uint8_t *)16, ln[i].ldq,
                                 (float *)16, stream) == ln[i].want,
              "layernorm_16_q %s", ln[i].what);
    CHECK(kcu_quant_rows_16((void *)16, KCU_DT_F16, 64, 4, 64, NULL, (kcu_wtype)7, (uint8_t *)16,
                            64, (float *)16, stream) == cudaErrorInvalidValue,
          "quant_rows_16 refuses an unknown code type");
    CHECK(kcu_w8a8_i8_gemm_16((void *)16, 40, (float *)16, (void *)16, 48, (float *)16, NULL,
                              KCU_ACT_NONE, (void *)16, 64, 4, 64, 40, KCU_DT_F16, 1,
                              stream) == cudaErrorInvalidValue,
          "w8a8_i8_gemm_16 refuses a k that is not a multiple of 16");
    CHECK(kcu_w8a8_i8_gemm_16((void *)24, 48, (float *)16, (void *)16, 48, (float *)16, NULL,
                              KCU_ACT_NONE, (void *)16, 64, 4, 64, 48, KCU_DT_F16, 1,
                              stream) == cudaErrorInvalidValue,
          "w8a8_i8_gemm_16 refuses codes that are not 16-byte aligned");
    (void)cudaGetLastError();
}

int main(int argc, char **argv)
{
    const char *suite = "gpu q8io";
    setvbuf(stdout, NULL, _IOLBF, 0);
    quick = gt_init(argc, argv, suite);
    if (!gt_device_stream(suite, &sms, &stream))
        return gt_finish(suite);
    CHECK(kcu_warm() == cudaSuccess, "every kernel (the 16-bit W8A16 instantiations too) loads");
    refuses_bad_arguments();
    w8a16_on_16bit_rows();
    dequant_mul_matches_host();
    quant_rows_16_matches_fp32();
    quant_rows_i8_matches_host();
    ln_q_is_ln_then_quant();
    w8a8_i8_matches_host();
    cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "no asynchronous error at the end: %s", cudaGetErrorString(e));
    cudaStreamDestroy(stream);
    return gt_finish(suite);
}
