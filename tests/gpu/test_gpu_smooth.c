/* test_gpu_smooth.c: activation smoothing (SmoothQuant) on the CUDA backend,
 * the twin of the CPU int8 path's (engine/backend.h weight_set_input_scale).
 *
 * Host part (no GPU needed): the GPU's math, emulated in C (each activation
 * times its multiplier in FP32, rounded to f16, times the exact 8-bit code,
 * FP64 sums, the channel scale), against the CPU backend's smoothed int8
 * GEMM on the same codes: the two backends must mean the same thing by a
 * multiplier (a divide instead of a multiply is caught).
 * Device part: every kernel with multipliers is bitwise equal to the same
 * kernel on pre-multiplied input (fused W8A16 for int8/E4M3 x f16/bf16 with
 * split-K, FP32 -> f16/bf16, per-token E4M3 quantization); the backend op
 * refuses bad multipliers and its GEMMs (fused, dequantized + cuBLASLt, FP8
 * W8A8) match FP64 on every path.
 *
 *   test_gpu_smooth [--seed N] [--quick]
 */
#include "engine/backend.h"
#include "engine/cuda/backend.h"
#include "engine/numfmt.h"
#include "engine/quant/quant.h"
#include "kernels/cuda/kcu.h"
#include "tests/gpu/gpu_test.h"

static int quick;

#define MT_OK_OR(st, err) CHECK((st) == MT_OK, "%s", (err).msg)

/* A smoothed layer: activations with outlier channels, multipliers 1/s,
 * and int8 (or E4M3) codes of W diag(s). */
typedef struct {
    int m, n, k;
    mt_precision prec;
    float *x, *inv, *scales, *deq; /* deq: the codes' values (no scale) */
    void *q;
} layer;

static void layer_make(layer *L, int m, int n, int k, mt_precision prec)
{
    mt_err err = {{0}};
    L->m = m, L->n = n, L->k = k, L->prec = prec;
    L->x = malloc(sizeof(float) * (size_t)m * k);
    L->inv = malloc(sizeof(float) * (size_t)k);
    L->scales = malloc(sizeof(float) * (size_t)n);
    L->deq = malloc(sizeof(float) * (size_t)n * k);
    L->q = malloc(mt_quant_data_bytes(prec, n, k) + 16);
    float *w = malloc(sizeof(float) * (size_t)n * k);
    for (int j = 0; j < k; j++) {
        const float s = gt_randint(0, 9) == 0 ? gt_unif(4.f, 16.f) : gt_unif(0.5f, 2.f);
        L->inv[j] = 1.f / s;
        for (int r = 0; r < m; r++) /* outlier channels carry large activations */
            L->x[(size_t)r * k + j] = gt_unif(-2.f, 2.f) * s;
        for (int r = 0; r < n; r++)
            w[(size_t)r * k + j] = gt_unif(-0.08f, 0.08f) * s;
    }
    CHECK(mt_quantize(w, n, k, prec, NULL, L->q, L->scales, &err) == MT_OK, "quantize: %s", err.msg);
    float *ones = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < n; r++)
        ones[r] = 1.f;
    mt_dequantize(L->q, ones, n, k, prec, L->deq);
    free(ones), free(w);
}

static void layer_free(layer *L)
{
    free(L->x), free(L->inv), free(L->scales), free(L->deq), free(L->q);
}

/* The fused kernel's math on the host: f16(x * mul) . code, FP64 sums,
 * times the channel scale. divide: the wrong reading of the multipliers. */
static void gpu_math(const layer *L, int divide, double *y)
{
    float *xr = malloc(sizeof(float) * (size_t)L->k);
    for (int r = 0; r < L->m; r++) {
        for (int j = 0; j < L->k; j++) {
            const float v = divide ? L->x[(size_t)r * L->k + j] / L->inv[j]
                                   : L->x[(size_t)r * L->k + j] * L->inv[j];
            xr[j] = nf_f16_to_f32(nf_f32_to_f16(v));
        }
        for (int c = 0; c < L->n; c++) {
            double acc = 0;
            for (int j = 0; j < L->k; j++)
                acc += (double)xr[j] * L->deq[(size_t)c * L->k + j];
            y[(size_t)r * L->n + c] = acc * L->scales[c];
        }
    }
    free(xr);
}

/* The CPU backend's smoothed int8 GEMM of the same codes. */
static mt_status cpu_twin(const layer *L, float *y, mt_err *err)
{
    mt_backend *be = NULL;
    mt_weight *w = NULL;
    mt_status st = mt_backend_cpu_create(1, &be, err);
    if (st == MT_OK)
        st = be->ops->weight_upload(be, MT_PREC_INT8, L->n, L->k, L->q, L->scales, &w, err);
    if (st == MT_OK)
        st = be->ops->weight_set_input_scale(be, w, L->inv, err);
    if (st == MT_OK)
        st = be->ops->gemm(be, L->x, L->m, w, NULL, MT_ACT_NONE, y, err);
    if (w)
        be->ops->weight_destroy(be, w);
    mt_backend_destroy(be);
    return st;
}

static void host_math_matches_the_cpu_int8_twin(void)
{
    static const int shapes[][3] = {{1, 384, 384}, {7, 100, 77}, {33, 1152, 384}, {16, 384, 1536}};
    for (int s = 0; s < 4; s++) {
        layer L;
        layer_make(&L, shapes[s][0], shapes[s][1], shapes[s][2], MT_PREC_INT8);
        const size_t mn = (size_t)L.m * L.n;
        double *ref = malloc(sizeof(double) * mn), *wrong = malloc(sizeof(double) * mn);
        float *y = malloc(sizeof(float) * mn), *wf = malloc(sizeof(float) * mn);
        mt_err err = {{0}};
        for (size_t i = 0; i < mn; i++)
            y[i] = NAN;
        gpu_math(&L, 0, ref);
        gpu_math(&L, 1, wrong);
        for (size_t i = 0; i < mn; i++)
            wf[i] = (float)wrong[i];
        if (MT_OK_OR(cpu_twin(&L, y, &err), err)) {
            const double e = gt_rel_l2(y, ref, mn), e_wrong = gt_rel_l2(wf, ref, mn);
            printf("gpu smooth: m=%d n=%d k=%d: CPU int8 twin vs GPU math %.3g, a divide %.3g\n",
                   L.m, L.n, L.k, e, e_wrong);
            CHECK(gt_first_nonfinite(y, mn) < 0 && e <= 1e-2 && e_wrong > 10 * e,
                  "smoothing m=%d n=%d k=%d: CPU int8 twin vs GPU math rel err %.3g (<= 1e-2); a "
                  "divide would be %.3g off", L.m, L.n, L.k, e, e_wrong);
        }
        free(ref), free(wrong), free(y), free(wf);
        layer_free(&L);
    }
}

/* ---- device ------------------------------------------------------------------ */

static cudaStream_t stream;

static void *dput(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess)
        return NULL;
    if (h && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* Runs the fused kernel (o: which one) on (x with mul) and on (x * mul); 1
 * when bitwise equal. */
static int fused_pair(const layer *L, kcu_wtype wt, kcu_atype at, const kcu_w8a16_opts *o,
                      const float *dmul, const float *dx, const float *dxs, const void *dq,
                      int ldq, const float *dsc, float *dy1, float *dy2, float *ws, size_t wsf,
                      int *cnt, int ncnt)
{
    const size_t mn = (size_t)L->m * L->n;
    float *h1 = malloc(sizeof(float) * mn), *h2 = malloc(sizeof(float) * mn);
    int ok = cudaMemset(dy1, 0xff, sizeof(float) * mn) == cudaSuccess &&
             cudaMemset(dy2, 0xff, sizeof(float) * mn) == cudaSuccess &&
             kcu_w8a16_gemm_mul(dx, L->k, dq, ldq, wt, dsc, NULL, KCU_ACT_NONE, dy1, L->n, L->m, L->n,
                                L->k, at, dmul, o, ws, wsf, cnt, ncnt, stream) == cudaSuccess &&
             kcu_w8a16_gemm(dxs, L->k, dq, ldq, wt, dsc, NULL, KCU_ACT_NONE, dy2, L->n, L->m, L->n,
                            L->k, at, o, ws, wsf, cnt, ncnt, stream) == cudaSuccess &&
             cudaStreamSynchronize(stream) == cudaSuccess &&
             cudaMemcpy(h1, dy1, sizeof(float) * mn, cudaMemcpyDeviceToHost) == cudaSuccess &&
             cudaMemcpy(h2, dy2, sizeof(float) * mn, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok = ok && gt_first_nonfinite(h1, mn) < 0 && !memcmp(h1, h2, sizeof(float) * mn);
    free(h1), free(h2);
    return ok;
}

/* Bitwise: fused W8A16 (both weight and activation types, split-K, the
 * staged and, at m <= 16, the direct kernel), the f16/bf16 conversion and
 * the E4M3 row quantization, with multipliers vs on pre-multiplied input. */
static void kernels_with_multipliers_equal_premultiplied_input(void)
{
    const int cases = quick ? 2 : 6;
    int sms = 1;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    for (int cs = 0; cs < cases; cs++) {
        layer L;
        layer_make(&L, cs & 1 ? gt_randint(1, 16) : gt_randint(1, 70), gt_randint(1, 700),
                   gt_randint(1, 1500), MT_PREC_INT8);
        const int ldq = (L.k + 15) / 16 * 16, kp = (L.k + 63) / 64 * 64;
        float *mul = malloc(sizeof(float) * kp), *xs = malloc(sizeof(float) * (size_t)L.m * L.k);
        uint8_t *q = calloc((size_t)L.n * ldq, 1);
        for (int j = 0; j < kp; j++)
            mul[j] = j < L.k ? L.inv[j] : 1.f;
        for (int r = 0; r < L.m; r++)
            for (int j = 0; j < L.k; j++)
                xs[(size_t)r * L.k + j] = L.x[(size_t)r * L.k + j] * mul[j];
        for (int r = 0; r < L.n; r++) /* random codes: int8 and E4M3 alike (no NaN: 0x7f masked) */
            for (int j = 0; j < L.k; j++)
                q[(size_t)r * ldq + j] = (uint8_t)(gt_randint(0, 255) & 0xf7);
        int cnt = 0;
        const size_t wsf = kcu_w8a16_ws_bound(L.n, L.k, sms, NULL, &cnt);
        const size_t mn = (size_t)L.m * L.n;
        float *dx = dput(L.x, sizeof(float) * (size_t)L.m * L.k), *dxs = dput(xs, sizeof(float) * (size_t)L.m * L.k);
        float *dmul = dput(mul, sizeof(float) * kp), *dsc = dput(L.scales, sizeof(float) * L.n);
        void *dq = dput(q, (size_t)L.n * ldq);
        float *dy1 = dput(NULL, sizeof(float) * mn), *dy2 = dput(NULL, sizeof(float) * mn);
        float *ws = dput(NULL, sizeof(float) * (wsf ? wsf : 1));
        int *dcnt = dput(NULL, sizeof(int) * (cnt ? cnt : 1));
        CUDA_OK(cudaMemset(dcnt, 0, sizeof(int) * (cnt ? cnt : 1)));
        for (int v = 0; v < 8; v++) {
            const kcu_w8a16_opts ko = {.kernel = v & 4 ? KCU_W8A16_DIRECT : KCU_W8A16_STAGED};
            CHECK(fused_pair(&L, v & 1 ? KCU_W_E4M3 : KCU_W_INT8, v & 2 ? KCU_A_BF16 : KCU_A_F16,
                             &ko, dmul, dx, dxs, dq, ldq, dsc, dy1, dy2, ws, wsf, dcnt, cnt),
                  "fused %s/%s (%s kernel) m=%d n=%d k=%d: with multipliers == on pre-multiplied x",
                  v & 1 ? "e4m3" : "int8", v & 2 ? "bf16" : "f16",
                  kcu_w8a16_direct(L.m, &ko) ? "direct" : "staged", L.m, L.n, L.k);
        }
        /* the conversion and the row quantization */
        const size_t half = 2 * (size_t)L.m * ldq;
        uint16_t *h1 = malloc(half), *h2 = malloc(half);
        uint8_t *c1 = malloc((size_t)L.m * ldq), *c2 = malloc((size_t)L.m * ldq);
        float *s1 = malloc(sizeof(float) * L.m), *s2 = malloc(sizeof(float) * L.m);
        void *o1 = dput(NULL, half), *o2 = dput(NULL, half);
        float *ds1 = dput(NULL, sizeof(float) * L.m), *ds2 = dput(NULL, sizeof(float) * L.m);
        CUDA_OK(kcu_f32_to_16_mul(dx, L.k, L.m, L.k, dmul, o1, ldq, cs & 1, stream));
        CUDA_OK(kcu_f32_to_16(dxs, L.k, L.m, L.k, o2, ldq, cs & 1, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(h1, o1, half, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(h2, o2, half, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(h1, h2, half), "f32 -> %s with multipliers == on pre-multiplied x", cs & 1 ? "bf16" : "f16");
        CUDA_OK(kcu_quant_rows_e4m3_mul(dx, L.k, L.m, L.k, dmul, o1, ldq, ds1, stream));
        CUDA_OK(kcu_quant_rows_e4m3(dxs, L.k, L.m, L.k, o2, ldq, ds2, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(c1, o1, (size_t)L.m * ldq, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(c2, o2, (size_t)L.m * ldq, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(s1, ds1, sizeof(float) * L.m, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(s2, ds2, sizeof(float) * L.m, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(c1, c2, (size_t)L.m * ldq) && !memcmp(s1, s2, sizeof(float) * L.m),
              "e4m3 rows with multipliers == on pre-multiplied x (m=%d k=%d)", L.m, L.k);
        free(h1), free(h2), free(c1), free(c2), free(s1), free(s2);
        cudaFree(o1), cudaFree(o2), cudaFree(ds1), cudaFree(ds2);
        cudaFree(dx), cudaFree(dxs), cudaFree(dmul), cudaFree(dsc), cudaFree(dq);
        cudaFree(dy1), cudaFree(dy2), cudaFree(ws), cudaFree(dcnt);
        free(mul), free(xs), free(q);
        layer_free(&L);
    }
}

/* One smoothed GEMM on backend be (path knob gp) against FP64 of
 * (x * inv) . dequantized W. */
static void backend_case(mt_backend *be, const char *name, int library, mt_precision prec, int m,
                         int n, int k)
{
    const mt_backend_ops *op = be->ops;
    layer L;
    layer_make(&L, m, n, k, prec);
    mt_err err = {{0}};
    const size_t mn = (size_t)m * n;
    double *ref = malloc(sizeof(double) * mn);
    float *y = malloc(sizeof(float) * mn);
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) {
            double acc = 0;
            for (int j = 0; j < k; j++)
                acc += (double)(L.x[(size_t)r * k + j] * L.inv[j]) * L.deq[(size_t)c * k + j];
            ref[(size_t)r * n + c] = acc * L.scales[c];
        }
    mt_weight *w = NULL;
    float *dx = op->alloc(be, sizeof(float) * (size_t)m * k), *dy = op->alloc(be, sizeof(float) * mn);
    for (size_t i = 0; i < mn; i++)
        y[i] = NAN;
    mt_cuda_counts c0, c1;
    mt_cuda_get_counts(be, &c0);
    mt_status st;
    if ((st = op->weight_upload(be, prec, n, k, L.q, L.scales, &w, &err)) ||
        (st = op->weight_set_input_scale(be, w, L.inv, &err)) ||
        (st = op->upload(be, dx, L.x, sizeof(float) * (size_t)m * k, &err)) ||
        (st = op->upload(be, dy, y, sizeof(float) * mn, &err)) ||
        (st = op->gemm(be, dx, m, w, NULL, MT_ACT_NONE, dy, &err)) ||
        (st = op->download(be, y, dy, sizeof(float) * mn, &err))) {
    }
    mt_cuda_get_counts(be, &c1);
    if (MT_OK_OR(st, err)) {
        const long w8a8 = c1.lt_w8a8 - c0.lt_w8a8, fused = c1.fused - c0.fused;
        const double e = gt_rel_l2(y, ref, mn), tol = w8a8 ? 8e-2 : 3e-3;
        CHECK(gt_first_nonfinite(y, mn) < 0 && e <= tol && (library ? fused == 0 || c1.w8a8_refused > c0.w8a8_refused : fused == 1),
              "smoothed %s gemm on %s m=%d n=%d k=%d: rel err %.3g (<= %.g), fused %ld w8a8 %ld",
              mt_precision_name(prec), name, m, n, k, e, tol, fused, w8a8);
    }
    if (w)
        op->weight_destroy(be, w);
    op->free(be, dx), op->free(be, dy);
    free(ref), free(y);
    layer_free(&L);
}

static void backend_smoothing_on_every_path(void)
{
    mt_err err = {{0}};
    for (int path = 0; path < 3; path++) { /* fused, library, fused with the direct kernel */
        const int library = path == 1;
        mt_cuda_opts o;
        mt_cuda_opts_default(&o);
        o.gemm = library ? MT_CUDA_GEMM_LIBRARY : MT_CUDA_GEMM_FUSED;
        o.w8a16_kernel = path == 2 ? KCU_W8A16_DIRECT : KCU_W8A16_STAGED;
        o.autotune = 0;
        mt_backend *be = NULL;
        if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
            return;
        const char *name = path == 2 ? "fused-direct" : library ? "library" : "fused";
        backend_case(be, name, library, MT_PREC_INT8, 5, 384, 384);
        backend_case(be, name, library, MT_PREC_INT8, 70, 100, 1000);
        backend_case(be, name, library, MT_PREC_FP8, 33, 1152, 384);
        backend_case(be, name, library, MT_PREC_FP8, 300, 384, 1536);
        backend_case(be, name, library, MT_PREC_FP8, 16, 1000, 700);
        mt_cuda_counts n;
        mt_cuda_get_counts(be, &n);
        CHECK(path == 2 ? n.fused_direct == 2 : n.fused_direct == 0,
              "%s: %ld GEMMs ran the direct kernel (m = 5 and 16 only on fused-direct)", name,
              n.fused_direct);
        mt_backend_destroy(be);
    }
}

/* Zero, negative, NaN and infinite multipliers, and 16-bit weights, are refused. */
static void backend_refuses_bad_multipliers(void)
{
    mt_backend *be = NULL;
    mt_err err = {{0}};
    if (!MT_OK_OR(mt_backend_cuda_create(0, &be, &err), err))
        return;
    const int n = 16, k = 40;
    layer L;
    layer_make(&L, 1, n, k, MT_PREC_INT8);
    mt_weight *w = NULL;
    if (MT_OK_OR(be->ops->weight_upload(be, MT_PREC_INT8, n, k, L.q, L.scales, &w, &err), err)) {
        const float bad[] = {0.f, -1.f, NAN, INFINITY};
        for (int i = 0; i < 4; i++) {
            const float keep = L.inv[7];
            L.inv[7] = bad[i];
            const mt_status st = be->ops->weight_set_input_scale(be, w, L.inv, &err);
            CHECK(st == MT_EINVAL && strstr(err.msg, "multiplier 7"), "multiplier %g: %s",
                  (double)bad[i], err.msg);
            L.inv[7] = keep;
        }
        be->ops->weight_destroy(be, w);
    }
    uint16_t h[16 * 40] = {0};
    w = NULL;
    if (MT_OK_OR(be->ops->weight_upload(be, MT_PREC_FP16, n, k, h, NULL, &w, &err), err)) {
        CHECK(be->ops->weight_set_input_scale(be, w, L.inv, &err) == MT_EUNSUPPORTED,
              "fp16 weight: %s", err.msg);
        be->ops->weight_destroy(be, w);
    }
    layer_free(&L);
    mt_backend_destroy(be);
}

int main(int argc, char **argv)
{
    const char *suite = "gpu smooth";
    setvbuf(stdout, NULL, _IOLBF, 0);
    quick = gt_init(argc, argv, suite);
    host_math_matches_the_cpu_int8_twin();
    if (!gt_have_device(suite)) {
        gt_skip++;
        return gt_finish(suite);
    }
    /* a blocking stream: see gt_blocking_stream_note in gpu_test.h */
    if (!CHECK(cudaStreamCreate(&stream) == cudaSuccess, "stream"))
        return gt_finish(suite);
    kernels_with_multipliers_equal_premultiplied_input();
    backend_refuses_bad_multipliers();
    backend_smoothing_on_every_path();
    const cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "no asynchronous error at the end: %s", cudaGetErrorString(e));
    cudaStreamDestroy(stream);
    return gt_finish(suite);
}
