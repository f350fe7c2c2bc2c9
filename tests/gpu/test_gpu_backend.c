/* test_gpu_backend.c: the CUDA backend table (engine/cuda/backend.c) op by
 * op: GEMMs of every precision down every path (fused W8A16, cuBLASLt after
 * dequantization, FP8 W8A8, FP16/BF16, FP32/TF32) against an FP64 product
 * of the dequantized weights; the encoder ops against their CPU twins in
 * kernels/cpu/ops.c; memory ops; several threads sharing one backend; and
 * the device queries and creation errors. CUDA graphs through the table:
 * test_gpu_graph_ops.c.
 *
 *   test_gpu_backend [--seed N] [--quick]
 */
#include "engine/cuda/backend.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/numfmt.h"
#include "kernels/cpu/ops.h"
#include "tests/gpu/gpu_test.h"

#include <pthread.h>

static int quick;

#define MT_OK_OR(st, err) CHECK((st) == MT_OK, "%s", (err).msg)

/* ========================================================================
 * device queries
 * ====================================================================== */

static void device_queries_describe_and_refuse_bad_indices(void)
{
    char buf[256];
    const int n = mt_cuda_device_count();
    CHECK(n >= 1, "device count %d", n);
    CHECK(mt_cuda_describe(0, buf, sizeof buf) == MT_OK && strstr(buf, "sm_"), "describe: %s", buf);
    printf("gpu backend: %s\n", buf);
    CHECK(mt_cuda_describe(n, buf, sizeof buf) == MT_EINVAL, "describe(%d): %s", n, buf);
    mt_backend *be = NULL;
    mt_err err = {{0}};
    CHECK(mt_backend_cuda_create(n + 3, &be, &err) == MT_EINVAL && !be && strstr(err.msg, "does not exist"),
          "create(no such device): %s", err.msg);
}

/* ========================================================================
 * GEMM
 * ====================================================================== */

typedef struct {
    mt_backend *be;
    const char *name;
    mt_cuda_gemm_path path;
    int expect_refusal; /* the fake refusal knob covers this case */
} gemm_backend;

/* The FP64 reference of every GEMM check: ref (m, n) = act(x (m, k) . w
 * (n, k)^T + bias), w the dequantized weight, GELU in BERT's erf form. */
static void gemm_ref(const float *x, const float *w, const float *bias, int m, int n, int k,
                     int gelu, double *ref)
{
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            double acc = bias[j];
            for (int c = 0; c < k; c++)
                acc += (double)x[(size_t)r * k + c] * w[(size_t)j * k + c];
            ref[(size_t)r * n + j] = gelu ? gt_gelu_ref(acc) : acc;
        }
}

/* One GEMM of precision prec on backend gb at (m, n, k) against FP64. */
static void gemm_case(const gemm_backend *gb, mt_precision prec, int m, int n, int k, int gelu)
{
    mt_backend *be = gb->be;
    const mt_backend_ops *op = be->ops;
    mt_err err = {{0}};
    float *w = malloc(sizeof(float) * (size_t)n * k), *x = malloc(sizeof(float) * (size_t)m * k);
    float *bias = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * (size_t)m * n);
    float *deq = malloc(sizeof(float) * (size_t)n * k);
    double *ref = malloc(sizeof(double) * (size_t)m * n);
    void *q = malloc(mt_quant_data_bytes(prec, n, k) + 16);
    float *scales = malloc(sizeof(float) * n);
    for (size_t i = 0; i < (size_t)n * k; i++)
        w[i] = gt_unif(-0.08f, 0.08f) * (1.f + (float)(i % 7)); /* channels of different range */
    for (size_t i = 0; i < (size_t)m * k; i++)
        x[i] = gt_unif(-2.f, 2.f);
    for (int i = 0; i < n; i++)
        bias[i] = gt_unif(-0.5f, 0.5f);
    mt_status st = mt_quantize(w, n, k, prec, NULL, q, scales, &err);
    if (!MT_OK_OR(st, err))
        goto out;
    mt_dequantize(q, scales, n, k, prec, deq);
    gemm_ref(x, deq, bias, m, n, k, gelu, ref);

    mt_weight *wt = NULL;
    st = op->weight_upload(be, prec, n, k, q, mt_quant_has_scales(prec) ? scales : NULL, &wt, &err);
    if (!MT_OK_OR(st, err))
        goto out;
    float *dx = op->alloc(be, sizeof(float) * (size_t)m * k);
    float *db = op->alloc(be, sizeof(float) * n), *dy = op->alloc(be, sizeof(float) * (size_t)m * n);
    for (size_t i = 0; i < (size_t)m * n; i++)
        y[i] = NAN;
    mt_cuda_counts c0, c1;
    mt_cuda_get_counts(be, &c0);
    if ((st = op->upload(be, dx, x, sizeof(float) * (size_t)m * k, &err)) ||
        (st = op->upload(be, db, bias, sizeof(float) * n, &err)) ||
        (st = op->upload(be, dy, y, sizeof(float) * (size_t)m * n, &err)) ||
        (st = op->gemm(be, dx, m, wt, db, gelu ? MT_ACT_GELU : MT_ACT_NONE, dy, &err)) ||
        (st = op->download(be, y, dy, sizeof(float) * (size_t)m * n, &err))) {
        /* st says which step failed; reported below */
    }
    mt_cuda_get_counts(be, &c1);
    if (MT_OK_OR(st, err)) {
        const long fused = c1.fused - c0.fused, deq16 = c1.lt_dequant - c0.lt_dequant,
                   w8a8 = c1.lt_w8a8 - c0.lt_w8a8, lt16 = c1.lt_16 - c0.lt_16,
                   lt32 = c1.lt_32 - c0.lt_32, refused = c1.w8a8_refused - c0.w8a8_refused;
        const char *path = fused ? "fused" : deq16 ? "dequant+lt" : w8a8 ? "w8a8" : lt16 ? "lt16" : lt32 ? "lt32" : "?";
        int path_ok = fused + deq16 + w8a8 + lt16 + lt32 == 1;
        double tol;
        switch (prec) {
        case MT_PREC_FP32: tol = 1e-5, path_ok &= lt32 == 1; break;
        case MT_PREC_TF32: tol = 3e-3, path_ok &= lt32 == 1; break;
        case MT_PREC_FP16: tol = 2e-3, path_ok &= lt16 == 1; break;
        case MT_PREC_BF16: tol = 1e-2, path_ok &= lt16 == 1; break;
        default:
            tol = w8a8 ? 8e-2 : 3e-3;
            if (gb->path == MT_CUDA_GEMM_FUSED)
                path_ok &= fused == 1;
            else if (gb->path == MT_CUDA_GEMM_LIBRARY) /* or cuBLASLt refused W8A8 */
                path_ok &= fused == 0 || (refused == 1 && prec == MT_PREC_FP8);
            if (gb->expect_refusal)
                path_ok &= refused == 1 && fused == 1;
        }
        const double e = gt_rel_l2(y, ref, (size_t)m * n);
        CHECK(path_ok && gt_first_nonfinite(y, (size_t)m * n) < 0 && e <= tol,
              "gemm %s on %s backend m=%d n=%d k=%d gelu=%d: path %s, rel err %.3g (<= %.g)",
              mt_precision_name(prec), gb->name, m, n, k, gelu, path, e, tol);
    }
    op->free(be, dx);
    op->free(be, db);
    op->free(be, dy);
    op->weight_destroy(be, wt);
out:
    free(w), free(x), free(bias), free(y), free(deq), free(ref), free(q), free(scales);
}

/* cuBLASLt refusing FP8 W8A8 (faked below m = 64 through the test knob)
 * runs the GEMM in the fused kernel, counted; a load that autotunes with
 * every m refused still succeeds and never chooses W8A8 (the dequantized
 * FP16 GEMM, timed beside it, or the fused kernel instead). */
static void w8a8_refusal_falls_back_to_fused(void)
{
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.gemm = MT_CUDA_GEMM_LIBRARY;
    o.autotune = 0;
    o.fake_w8a8_refusal_below_m = 64;
    gemm_backend gb = {NULL, "library+refusal", MT_CUDA_GEMM_LIBRARY, 1};
    mt_err err = {{0}};
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &gb.be, &err), err))
        return;
    if (!mt_cuda_fp8_w8a8_enabled(gb.be)) {
        printf("gpu backend: SKIP w8a8 refusal: FP8 W8A8 is off on this GPU (sm_90 + cuBLASLt 12.9 only)\n");
        gt_skip++;
        mt_backend_destroy(gb.be);
        return;
    }
    gemm_case(&gb, MT_PREC_FP8, 16, 1152, 384, 0);
    gemm_case(&gb, MT_PREC_FP8, 1, 4096, 4096, 1);
    gb.expect_refusal = 0;
    gemm_case(&gb, MT_PREC_FP8, 200, 384, 1536, 0); /* above the knob: W8A8 */
    mt_backend_destroy(gb.be);

    o.gemm = MT_CUDA_GEMM_AUTO;
    o.autotune = 1;
    o.fake_w8a8_refusal_below_m = 1 << 30;
    mt_backend *be = NULL;
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
        return;
    const int n = 384, k = 384;
    uint8_t *q = calloc((size_t)n * k, 1);
    float *sc = malloc(sizeof(float) * n);
    for (int i = 0; i < n * k; i++)
        q[i] = (uint8_t)gt_randint(0, 0x7e); /* positive E4M3 codes, no NaN */
    for (int i = 0; i < n; i++)
        sc[i] = 0.01f;
    mt_weight *w = NULL;
    mt_status st = be->ops->weight_upload(be, MT_PREC_FP8, n, k, q, sc, &w, &err);
    mt_cuda_counts c;
    mt_cuda_get_counts(be, &c);
    int w8a8_at = 0; /* a tuned m whose choice is the refused W8A8 */
    for (int m = 1; w && m <= 1 << 16; m *= 2)
        if (mt_cuda_weight_path(w, m) == MT_CUDA_PATH_W8A8)
            w8a8_at = m;
    CHECK(st == MT_OK && c.w8a8_refused > 0 && w8a8_at == 0,
          "autotune with every W8A8 refused: load %s, refusals %ld, crossover %d, W8A8 chosen "
          "at m = %d (0: nowhere; the dequantized FP16 GEMM or the fused kernel instead)",
          err.msg, c.w8a8_refused, w ? mt_cuda_weight_crossover(w) : -1, w8a8_at);
    if (w)
        be->ops->weight_destroy(be, w);
    free(q), free(sc);
    mt_backend_destroy(be);
}

/* A precision the backend has no kernel for (int8g) is refused at upload,
 * naming it, not accepted and failed at the first GEMM. */
static void weight_refused(mt_backend *be, mt_precision p)
{
    const int n = 64, k = 256;
    uint8_t *q = calloc((size_t)n * k, 1);
    float *sc = malloc(sizeof(float) * (size_t)n * (k / 128 + 1));
    for (int i = 0; i < n * (k / 128 + 1); i++)
        sc[i] = 0.01f;
    mt_weight *w = NULL;
    mt_err err = {{0}};
    const mt_status st = be->ops->weight_upload(be, p, n, k, q, sc, &w, &err);
    CHECK(st == MT_EUNSUPPORTED && !w && strstr(err.msg, mt_precision_name(p)),
          "%s weight upload refused: %s", mt_precision_name(p), err.msg);
    if (w)
        be->ops->weight_destroy(be, w);
    free(q), free(sc);
}

static void gemm_every_precision_and_path_matches_fp64(void)
{
    static const int ms_full[] = {1, 7, 16, 33, 64, 65, 128, 300, 1000};
    static const int ms_quick[] = {1, 33, 300};
    static const int nk[][2] = {{384, 384}, {1152, 384}, {1536, 384}, {384, 1536}, {100, 77}, {33, 1000}};
    const int *ms = quick ? ms_quick : ms_full;
    const int nm = quick ? 3 : 9;
    gemm_backend bs[3] = {{NULL, "auto", MT_CUDA_GEMM_AUTO, 0},
                          {NULL, "fused", MT_CUDA_GEMM_FUSED, 0},
                          {NULL, "library", MT_CUDA_GEMM_LIBRARY, 0}};
    mt_err err = {{0}};
    for (int i = 0; i < 3; i++) {
        mt_cuda_opts o;
        mt_cuda_opts_default(&o);
        o.gemm = bs[i].path;
        o.autotune = i == 0; /* the auto backend measures its crossovers */
        o.crossover = 0;
        if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &bs[i].be, &err), err))
            return;
    }
    int idx = 0;
    for (int p = 0; p < MT_PREC_COUNT; p++) {
        if (!bs[0].be->ops->supports(bs[0].be, (mt_precision)p)) {
            weight_refused(bs[0].be, (mt_precision)p);
            continue;
        }
        for (int b = 0; b < 3; b++) {
            const int q8 = p == MT_PREC_INT8 || p == MT_PREC_FP8;
            if (b > 0 && !q8)
                continue; /* the path knob only concerns 8-bit weights */
            for (int i = 0; i < nm; i++, idx++)
                gemm_case(&bs[b], (mt_precision)p, ms[i], nk[idx % 6][0], nk[idx % 6][1], idx & 1);
        }
    }
    for (int b = 0; b < 3; b++) {
        mt_cuda_counts c;
        mt_cuda_get_counts(bs[b].be, &c);
        printf("gpu backend: %s backend paths: fused %ld, dequant+lt %ld, w8a8 %ld, lt16 %ld, "
               "lt32 %ld, w8a8 refused %ld\n",
               bs[b].name, c.fused, c.lt_dequant, c.lt_w8a8, c.lt_16, c.lt_32, c.w8a8_refused);
        mt_backend_destroy(bs[b].be);
    }
}

/* MANTISSA_CUDA_GELU=tanh: fp16/bf16 GEMMs with GELU take cuBLASLt's GELU_BIAS
 * epilogue (the tanh approximation, within the 16-bit tolerances of the
 * erf reference), the others and GEMMs without GELU are unchanged. */
static void gelu_epilogue_within_tolerance(void)
{
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.gelu_tanh = 1;
    o.autotune = 0;
    gemm_backend gb = {NULL, "gelu-tanh", MT_CUDA_GEMM_AUTO, 0};
    mt_err err = {{0}};
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &gb.be, &err), err))
        return;
    static const int cases[][3] = {{1, 1536, 384}, {33, 1536, 384}, {300, 100, 77}, {7, 33, 1000}};
    for (int p = MT_PREC_FP16; p <= MT_PREC_BF16; p++)
        for (int i = 0; i < 4; i++) {
            gemm_case(&gb, (mt_precision)p, cases[i][0], cases[i][1], cases[i][2], 1);
            gemm_case(&gb, (mt_precision)p, cases[i][0], cases[i][1], cases[i][2], 0);
        }
    gemm_case(&gb, MT_PREC_FP32, 33, 1536, 384, 1);
    mt_cuda_counts c;
    mt_cuda_get_counts(gb.be, &c);
    CHECK(c.lt_gelu_epi == 8 && c.lt_16 == 16,
          "gelu-tanh backend: %ld of the 8 fp16/bf16 GEMMs with GELU ran it in the epilogue (%ld "
          "16-bit GEMMs in all; fewer means cuBLASLt had no GELU_BIAS algorithm: fell back)",
          c.lt_gelu_epi, c.lt_16);
    mt_backend_destroy(gb.be);
}

/* One GEMM of a forward on 16-bit rows (f16, or bf16 for a bf16 weight):
 * x, bias and y in that type, against FP64 on the decoded inputs and the
 * dequantized weight; counted as on 16-bit activations (lt_16_io for a
 * 16-bit weight, q8_io for an 8-bit one). tol: relative L2 error. */
static void act16_case(mt_backend *be, const char *bname, mt_precision p, int m, int n, int k,
                       int gelu, double tol)
{
    const mt_backend_ops *op = be->ops;
    const int bf = p == MT_PREC_BF16, q8 = p == MT_PREC_INT8 || p == MT_PREC_FP8;
    mt_err err = {{0}};
    float *w = malloc(sizeof(float) * (size_t)n * k), *deq = malloc(sizeof(float) * (size_t)n * k);
    float *xf = malloc(sizeof(float) * (size_t)m * k), *bias = malloc(sizeof(float) * n);
    float *scales = q8 ? malloc(sizeof(float) * n) : NULL;
    uint16_t *xh = malloc(2 * (size_t)m * k), *yh = malloc(2 * (size_t)m * n);
    uint16_t *bh = malloc(2 * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)m * n);
    double *ref = malloc(sizeof(double) * (size_t)m * n);
    void *q = malloc(mt_quant_data_bytes(p, n, k) + 16);
    for (size_t j = 0; j < (size_t)n * k; j++)
        w[j] = gt_unif(-0.08f, 0.08f);
    for (size_t j = 0; j < (size_t)m * k; j++) {
        const float v = gt_unif(-2.f, 2.f);
        xh[j] = bf ? nf_f32_to_bf16(v) : nf_f32_to_f16(v);
        xf[j] = bf ? nf_bf16_to_f32(xh[j]) : nf_f16_to_f32(xh[j]);
    }
    for (int j = 0; j < n; j++) { /* the bias in the activation type (backend.h) */
        bh[j] = bf ? nf_f32_to_bf16(gt_unif(-0.5f, 0.5f)) : nf_f32_to_f16(gt_unif(-0.5f, 0.5f));
        bias[j] = bf ? nf_bf16_to_f32(bh[j]) : nf_f16_to_f32(bh[j]);
    }
    mt_weight *wt = NULL;
    mt_status st = mt_quantize(w, n, k, p, NULL, q, scales, &err);
    if (st == MT_OK) {
        mt_dequantize(q, scales, n, k, p, deq);
        st = op->weight_upload(be, p, n, k, q, scales, &wt, &err);
    }
    gemm_ref(xf, deq, bias, m, n, k, gelu, ref);
    void *dx = op->alloc(be, 2 * (size_t)m * k), *dy = op->alloc(be, 2 * (size_t)m * n);
    void *db = op->alloc(be, 2 * (size_t)n);
    for (size_t j = 0; j < (size_t)m * n; j++)
        yh[j] = bf ? 0x7fc0 : 0x7e00; /* NaN: poison */
    mt_cuda_counts c0, c1;
    mt_cuda_get_counts(be, &c0);
    if (st == MT_OK && !(st = op->upload(be, dx, xh, 2 * (size_t)m * k, &err)) &&
        !(st = op->upload(be, dy, yh, 2 * (size_t)m * n, &err)) &&
        !(st = op->upload(be, db, bh, 2 * (size_t)n, &err))) {
        op->set_act_format(be, bf ? MT_ACTF_BF16 : MT_ACTF_F16);
        st = op->gemm(be, dx, m, wt, db, gelu ? MT_ACT_GELU : MT_ACT_NONE, dy, &err);
        op->set_act_format(be, MT_ACTF_F32);
        if (st == MT_OK)
            st = op->download(be, yh, dy, 2 * (size_t)m * n, &err);
    }
    mt_cuda_get_counts(be, &c1);
    if (MT_OK_OR(st, err)) {
        for (size_t j = 0; j < (size_t)m * n; j++)
            y[j] = bf ? nf_bf16_to_f32(yh[j]) : nf_f16_to_f32(yh[j]);
        const double e = gt_rel_l2(y, ref, (size_t)m * n);
        const long counted = q8 ? c1.q8_io - c0.q8_io : c1.lt_16_io - c0.lt_16_io;
        CHECK(gt_first_nonfinite(y, (size_t)m * n) < 0 && e <= tol && counted == 1,
              "%s backend, %s GEMM on 16-bit activations m=%d n=%d k=%d gelu=%d: rel err %.3g "
              "(<= %.3g), counted on 16-bit activations %ld (paths: fused %ld, dequant %ld, "
              "w8a8 %ld, 16-bit %ld; bias in a pass %ld)",
              bname, mt_precision_name(p), m, n, k, gelu, e, tol, counted, c1.fused - c0.fused,
              c1.lt_dequant - c0.lt_dequant, c1.lt_w8a8 - c0.lt_w8a8, c1.lt_16 - c0.lt_16,
              c1.bias_pass - c0.bias_pass);
    }
    op->free(be, dx), op->free(be, dy), op->free(be, db);
    if (wt)
        op->weight_destroy(be, wt);
    free(w), free(deq), free(xf), free(bias), free(scales), free(xh), free(yh), free(bh), free(y),
        free(ref), free(q);
}

/* A forward on 16-bit activations (backend.h set_act_format): fp16 and bf16
 * GEMMs read and write 16-bit rows, int8 and fp8 ones f16 rows on each of
 * their paths (fused W8A16, dequantized FP16, FP8 W8A8), the bias of that
 * type and GELU (tanh, in the epilogue, or erf in the fallback pass)
 * included, against FP64 on the decoded inputs; every such GEMM is counted
 * as on 16-bit activations; a weight of another type, an 8-bit one on bf16
 * rows, or widths that are not multiples of 8, are refused with a message;
 * FP32 set back, GEMMs take FP32 rows again. */
static void act16_gemm_matches_fp64(void)
{
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.autotune = 0;
    mt_backend *be = NULL, *by_path[2] = {NULL, NULL};
    mt_err err = {{0}};
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
        return;
    for (int i = 0; i < 2; i++) { /* the 8-bit paths one by one */
        mt_cuda_opts po = o;
        po.gemm = i ? MT_CUDA_GEMM_LIBRARY : MT_CUDA_GEMM_FUSED;
        if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &po, &by_path[i], &err), err))
            goto out;
    }
    const mt_backend_ops *op = be->ops;
    CHECK(op->act_format && op->set_act_format && op->act_format(be, MT_PREC_FP16) == MT_ACTF_F16 &&
              op->act_format(be, MT_PREC_BF16) == MT_ACTF_BF16 &&
              op->act_format(be, MT_PREC_FP32) == MT_ACTF_F32 &&
              op->act_format(be, MT_PREC_TF32) == MT_ACTF_F32 &&
              op->act_format(be, MT_PREC_INT8) == MT_ACTF_F16 &&
              op->act_format(be, MT_PREC_FP8) == MT_ACTF_F16,
          "act_format: f16 for fp16, int8 and fp8, bf16 for bf16, FP32 for fp32 and tf32");
    static const int cases[][3] = {{1, 1536, 384}, {33, 384, 1536}, {300, 1152, 384}, {7, 8, 16}};
    static const mt_precision ps[] = {MT_PREC_FP16, MT_PREC_BF16, MT_PREC_INT8, MT_PREC_FP8};
    /* FP8 W8A8 quantizes the activations to E4M3 per token: 8-bit error */
    const double w8a8_tol = mt_cuda_fp8_w8a8_enabled(be) ? 6e-2 : 3e-3;
    for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++) {
        const mt_precision p = ps[pi];
        const int q8 = p == MT_PREC_INT8 || p == MT_PREC_FP8;
        const double tol = p == MT_PREC_BF16 ? 1.2e-2 : p == MT_PREC_FP8 ? w8a8_tol : 3e-3;
        for (int i = 0; i < (quick ? 2 : 4); i++)
            for (int gelu = 0; gelu < 2; gelu++) {
                act16_case(be, "auto", p, cases[i][0], cases[i][1], cases[i][2], gelu,
                           p == MT_PREC_FP16 ? 2.5e-3 : tol);
                for (int b = 0; q8 && b < 2; b++)
                    act16_case(by_path[b], b ? "library" : "fused", p, cases[i][0], cases[i][1],
                               cases[i][2], gelu, b ? tol : 3e-3);
            }
    }
    /* refusals: another weight type in an f16 forward, a width not a multiple of 8 */
    static const struct {
        mt_precision p;
        mt_act_format rows;
        int n, k;
        const char *want;
    } bad[] = {{MT_PREC_BF16, MT_ACTF_F16, 64, 64, "bf16 weight"},
               {MT_PREC_FP32, MT_ACTF_F16, 64, 64, "fp32 weight"},
               {MT_PREC_FP16, MT_ACTF_F16, 64, 20, "multiples of 8"},
               {MT_PREC_INT8, MT_ACTF_BF16, 64, 64, "int8 weight"},
               {MT_PREC_INT8, MT_ACTF_F16, 64, 20, "multiples of 8"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const int n = bad[i].n, k = bad[i].k;
        float *w = calloc((size_t)n * k, sizeof(float));
        float *scales = calloc((size_t)n, sizeof(float));
        void *q = calloc(1, mt_quant_data_bytes(bad[i].p, n, k) + 16);
        mt_weight *wt = NULL;
        void *dx = op->alloc(be, 4 * (size_t)4 * k), *dy = op->alloc(be, 4 * (size_t)4 * n);
        mt_status st = mt_quantize(w, n, k, bad[i].p, NULL, q, scales, &err);
        if (st == MT_OK)
            st = op->weight_upload(be, bad[i].p, n, k, q, scales, &wt, &err);
        if (MT_OK_OR(st, err)) {
            op->set_act_format(be, bad[i].rows);
            st = op->gemm(be, dx, 4, wt, NULL, MT_ACT_NONE, dy, &err);
            op->set_act_format(be, MT_ACTF_F32);
            CHECK(st == MT_EINVAL && strstr(err.msg, bad[i].want),
                  "an %s forward refuses a %s %dx%d weight: %s",
                  bad[i].rows == MT_ACTF_BF16 ? "bf16" : "f16", mt_precision_name(bad[i].p), n, k,
                  err.msg);
            /* and in FP32 the same weight multiplies again */
            st = op->gemm(be, dx, 4, wt, NULL, MT_ACT_NONE, dy, &err);
            CHECK(st == MT_OK, "after set_act_format(FP32) the %s weight multiplies: %s",
                  mt_precision_name(bad[i].p), err.msg);
        }
        if (wt)
            op->weight_destroy(be, wt);
        op->free(be, dx), op->free(be, dy);
        free(w), free(scales), free(q);
    }
out:
    for (int i = 0; i < 2; i++)
        if (by_path[i])
            mt_backend_destroy(by_path[i]);
    mt_backend_destroy(be);
}

/* ========================================================================
 * encoder ops against the CPU twins
 * ====================================================================== */

/* The attention inputs shared by the bias checks: qkv on the device and the
 * host, the offsets, the output and the buffers to compare through. */
typedef struct {
    mt_backend *be;
    const float *dqkv, *qkv;
    const int32_t *doff, *off;
    int nseq, heads, dh, mode; /* mode: 0 FP32 kernel, 1 f16 */
    float *dbias, *dout, *cpu, *gpu;
    double *ref;
} bias_case;

/* The GPU attention with table tab (maxrel) against the CPU twin with
 * cpu_tab (cpu_maxrel): relative L2 error, or -1 after reporting a failed op. */
static double bias_rel_err(const bias_case *c, const float *tab, int maxrel, const float *cpu_tab,
                           int cpu_maxrel)
{
    const mt_backend_ops *op = c->be->ops;
    const size_t th = (size_t)c->off[c->nseq] * c->heads * c->dh;
    mt_err err = {{0}};
    CHECK(kc_attention_bias(c->qkv, c->off, c->nseq, c->heads, c->dh, cpu_tab, cpu_maxrel, c->cpu) == 0,
          "CPU attention with bias");
    mt_status st;
    if ((st = op->upload(c->be, c->dbias, tab, sizeof(float) * (size_t)c->heads * (2 * maxrel + 1), &err)) ||
        (st = op->attention(c->be, c->dqkv, c->doff, c->nseq,
                            &(mt_attn_params){c->heads, c->heads, c->dh, false, c->dbias, maxrel},
                            c->dout, &err)) ||
        (st = op->download(c->be, c->gpu, c->dout, sizeof(float) * th, &err))) {
        MT_OK_OR(st, err);
        return -1;
    }
    for (size_t i = 0; i < th; i++)
        c->ref[i] = c->cpu[i];
    return gt_rel_l2(c->gpu, c->ref, th);
}

/* A sequence longer than the table allows (maxrel - 1 given for sequences
 * up to maxrel + 1 long): the offsets live on the device, so the op cannot
 * refuse it; the far pairs must read the table's edge entries, never past
 * it. Reference: the CPU twin with a table of maxrel whose ends repeat the
 * short table's edges. */
static void attention_bias_clamps(const bias_case *c, int maxrel)
{
    const int ms = maxrel - 1, ws = 2 * ms + 1, wl = 2 * maxrel + 1;
    float *sh = malloc(sizeof(float) * (size_t)c->heads * ws), *lg = malloc(sizeof(float) * (size_t)c->heads * wl);
    for (int i = 0; i < c->heads * ws; i++)
        sh[i] = gt_unif(-2, 2);
    for (int hd = 0; hd < c->heads; hd++)
        for (int r = -maxrel; r <= maxrel; r++)
            lg[hd * wl + r + maxrel] = sh[hd * ws + (r < -ms ? -ms : r > ms ? ms : r) + ms];
    const double e = bias_rel_err(c, sh, ms, lg, maxrel);
    if (e >= 0)
        CHECK(e <= (c->mode ? 4e-3 : 5e-6), "attention with a sequence past the bias table (%s, "
              "maxrel %d): the edge entries, rel err %.3g", c->mode ? "f16" : "fp32", ms, e);
    free(sh);
    free(lg);
}

/* MPNet's attention: the relative position bias table (heads x (2 maxrel +
 * 1), random, on the device) added to the scores, against the CPU twin. */
static void attention_bias_matches_cpu(bias_case *c)
{
    int maxrel = 0;
    for (int s = 0; s < c->nseq; s++)
        maxrel = c->off[s + 1] - c->off[s] - 1 > maxrel ? c->off[s + 1] - c->off[s] - 1 : maxrel;
    const size_t nb = (size_t)c->heads * (2 * maxrel + 1);
    float *bias = malloc(sizeof(float) * nb);
    c->dbias = c->be->ops->alloc(c->be, sizeof(float) * nb);
    for (size_t i = 0; i < nb; i++)
        bias[i] = gt_unif(-2, 2);
    const double e = bias_rel_err(c, bias, maxrel, bias, maxrel);
    if (e >= 0) {
        CHECK(e <= (c->mode ? 4e-3 : 5e-6), "attention with position bias (%s, maxrel %d) vs CPU: "
              "rel err %.3g", c->mode ? "f16" : "fp32", maxrel, e);
        if (maxrel > 0)
            attention_bias_clamps(c, maxrel);
    }
    c->be->ops->free(c->be, c->dbias);
    free(bias);
}

static void encoder_ops_match_cpu_twins(void)
{
    mt_err err = {{0}};
    for (int mode = 0; mode < 2; mode++) {
        mt_cuda_opts o;
        mt_cuda_opts_default(&o);
        o.attn = mode ? MT_CUDA_ATTN_F16 : MT_CUDA_ATTN_FP32;
        mt_backend *be = NULL;
        if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
            return;
        const mt_backend_ops *op = be->ops;
        const int heads = 12, dh = 32, h = heads * dh, nseq = quick ? 3 : 9, vocab = 500;
        int32_t off[16];
        off[0] = 0;
        for (int s = 0; s < nseq; s++)
            off[s + 1] = off[s] + gt_randint(1, s == 0 ? 256 : 80);
        const int t = off[nseq];
        int32_t *ids = malloc(sizeof(int32_t) * t);
        float *word = malloc(sizeof(float) * (size_t)vocab * h), *pos = malloc(sizeof(float) * 256 * h);
        float *g = malloc(sizeof(float) * h), *b = malloc(sizeof(float) * h);
        float *qkv = malloc(sizeof(float) * (size_t)t * 3 * h);
        float *cpu = malloc(sizeof(float) * (size_t)t * 3 * h), *gpu = malloc(sizeof(float) * (size_t)t * 3 * h);
        double *ref = malloc(sizeof(double) * (size_t)t * 3 * h);
        for (int i = 0; i < t; i++)
            ids[i] = gt_randint(0, vocab - 1);
        for (size_t i = 0; i < (size_t)vocab * h; i++)
            word[i] = gt_unif(-1, 1);
        for (size_t i = 0; i < (size_t)256 * h; i++)
            pos[i] = gt_unif(-0.5f, 0.5f);
        for (int i = 0; i < h; i++) {
            g[i] = gt_unif(0.5f, 1.5f);
            b[i] = gt_unif(-0.2f, 0.2f);
        }
        for (size_t i = 0; i < (size_t)t * 3 * h; i++)
            qkv[i] = gt_unif(-2, 2);

        int32_t *dids = op->alloc(be, sizeof(int32_t) * (t + nseq + 1)), *doff = dids + t;
        float *dword = op->alloc(be, sizeof(float) * (size_t)vocab * h);
        float *dpos = op->alloc(be, sizeof(float) * 256 * h);
        float *dg = op->alloc(be, sizeof(float) * h), *dbeta = op->alloc(be, sizeof(float) * h);
        float *dx = op->alloc(be, sizeof(float) * (size_t)t * h);
        float *dqkv = op->alloc(be, sizeof(float) * (size_t)t * 3 * h);
        float *dout = op->alloc(be, sizeof(float) * (size_t)t * h);
        mt_status st;
        if ((st = op->upload(be, dids, ids, sizeof(int32_t) * t, &err)) ||
            (st = op->upload(be, doff, off, sizeof(int32_t) * (nseq + 1), &err)) ||
            (st = op->upload(be, dword, word, sizeof(float) * (size_t)vocab * h, &err)) ||
            (st = op->upload(be, dpos, pos, sizeof(float) * 256 * h, &err)) ||
            (st = op->upload(be, dg, g, sizeof(float) * h, &err)) ||
            (st = op->upload(be, dbeta, b, sizeof(float) * h, &err)) ||
            (st = op->upload(be, dqkv, qkv, sizeof(float) * (size_t)t * 3 * h, &err))) {
            MT_OK_OR(st, err);
            goto done;
        }
        /* embed (type0 = word row 0) then LayerNorm in place, as models/encoder.c does */
        kc_embed(ids, off, NULL, nseq, word, pos, word, NULL, h, cpu);
        kc_layernorm(cpu, NULL, g, b, t, h, 1e-12f, cpu);
        if ((st = op->embed(be, dids, doff, nseq, dword, dpos, dword, h, dx, &err)) ||
            (st = op->layernorm(be, dx, NULL, dg, dbeta, t, h, 1e-12f, dx, &err)) ||
            (st = op->download(be, gpu, dx, sizeof(float) * (size_t)t * h, &err))) {
            MT_OK_OR(st, err);
            goto done;
        }
        for (size_t i = 0; i < (size_t)t * h; i++)
            ref[i] = cpu[i];
        double e = gt_rel_l2(gpu, ref, (size_t)t * h);
        CHECK(e <= 2e-6, "embed + layernorm vs CPU: rel err %.3g", e);
        /* residual LayerNorm: out = LN(qkv[:, :h] rows... use dx as residual) */
        kc_layernorm(qkv, cpu, g, b, t, h, 1e-5f, cpu); /* reads qkv with stride h: fine, it is data */
        if ((st = op->layernorm(be, dqkv, dx, dg, dbeta, t, h, 1e-5f, dx, &err)) ||
            (st = op->download(be, gpu, dx, sizeof(float) * (size_t)t * h, &err))) {
            MT_OK_OR(st, err);
            goto done;
        }
        for (size_t i = 0; i < (size_t)t * h; i++)
            ref[i] = cpu[i];
        e = gt_rel_l2(gpu, ref, (size_t)t * h);
        CHECK(e <= 5e-6, "residual layernorm vs CPU: rel err %.3g", e);
        /* attention */
        CHECK(kc_attention(qkv, off, nseq, heads, dh, cpu) == 0, "CPU attention");
        if ((st = op->attention(be, dqkv, doff, nseq, &(mt_attn_params){heads, heads, dh, false, NULL, 0},
                                dout, &err)) ||
            (st = op->download(be, gpu, dout, sizeof(float) * (size_t)t * h, &err))) {
            MT_OK_OR(st, err);
            goto done;
        }
        for (size_t i = 0; i < (size_t)t * h; i++)
            ref[i] = cpu[i];
        e = gt_rel_l2(gpu, ref, (size_t)t * h);
        CHECK(e <= (mode ? 4e-3 : 5e-6), "attention (%s) vs CPU: rel err %.3g", mode ? "f16" : "fp32", e);
        st = op->attention(be, dqkv, doff, nseq, &(mt_attn_params){1, 1, 3 * h, false, NULL, 0}, dout,
                           &err);
        CHECK(st == MT_EUNSUPPORTED && strstr(err.msg, "head size"), "head size %d: %s", 3 * h, err.msg);
        bias_case bc = {.be = be, .dqkv = dqkv, .qkv = qkv, .doff = doff, .off = off, .nseq = nseq,
                        .heads = heads, .dh = dh, .mode = mode, .dout = dout, .cpu = cpu, .gpu = gpu,
                        .ref = ref};
        attention_bias_matches_cpu(&bc);
        /* the plain attention again: what the mean pool below reads */
        if ((st = op->attention(be, dqkv, doff, nseq, &(mt_attn_params){heads, heads, dh, false, NULL, 0},
                                dout, &err))) {
            MT_OK_OR(st, err);
            goto done;
        }
        CHECK(kc_attention(qkv, off, nseq, heads, dh, cpu) == 0, "CPU attention");
        /* mean pool + normalise */
        kc_mean_pool(cpu, off, nseq, h, true, cpu + (size_t)t * h);
        if ((st = op->mean_pool(be, dout, doff, nseq, h, true, dx, &err)) ||
            (st = op->download(be, gpu, dx, sizeof(float) * (size_t)nseq * h, &err))) {
            MT_OK_OR(st, err);
            goto done;
        }
        for (size_t i = 0; i < (size_t)nseq * h; i++)
            ref[i] = cpu[(size_t)t * h + i];
        e = gt_rel_l2(gpu, ref, (size_t)nseq * h);
        CHECK(e <= (mode ? 4e-3 : 5e-6), "mean pool after attention (%s) vs CPU: rel err %.3g",
              mode ? "f16" : "fp32", e);
    done:
        op->free(be, dids), op->free(be, dword), op->free(be, dpos), op->free(be, dg);
        op->free(be, dbeta), op->free(be, dx), op->free(be, dqkv), op->free(be, dout);
        free(ids), free(word), free(pos), free(g), free(b), free(qkv), free(cpu), free(gpu), free(ref);
        mt_backend_destroy(be);
    }
}

/* ========================================================================
 * memory and threads
 * ====================================================================== */

static void memory_ops_round_trip_and_survive_oom(void)
{
    mt_backend *be = NULL;
    mt_err err = {{0}};
    if (!MT_OK_OR(mt_backend_cuda_create(0, &be, &err), err))
        return;
    const mt_backend_ops *op = be->ops;
    CHECK(op->alloc(be, (size_t)1 << 52) == NULL, "a 4 PiB allocation fails cleanly");
    const size_t sizes[] = {0, 1, 3, 255, 256, 4097, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const size_t n = sizes[i];
        unsigned char *src = malloc(n + 1), *dst = malloc(n + 1);
        for (size_t j = 0; j < n; j++)
            src[j] = (unsigned char)gt_next();
        void *d = op->alloc(be, n);
        mt_status st = d ? op->upload(be, d, src, n, &err) : MT_ENOMEM;
        if (st == MT_OK)
            st = op->download(be, dst, d, n, &err);
        CHECK(d && st == MT_OK && !memcmp(src, dst, n), "round trip of %zu bytes: %s", n,
              st == MT_OK ? "ok" : err.msg);
        op->free(be, d);
        free(src), free(dst);
    }
    CHECK(op->supports(be, MT_PREC_TF32) && op->supports(be, MT_PREC_FP8), "supports tf32 and fp8");
    /* a weight too large for the GPU: ENOMEM with the CUDA error's own name
     * (nothing is read from the host buffers before the allocation fails) */
    int8_t dummy[16] = {0};
    float dscale[1] = {1.f};
    mt_weight *w = NULL;
    mt_status st = op->weight_upload(be, MT_PREC_INT8, 1 << 20, 1 << 20, dummy, dscale, &w, &err);
    CHECK(st == MT_ENOMEM && !w && strstr(err.msg, "cudaErrorMemoryAllocation"),
          "a 1 TiB weight: %s", err.msg);
    mt_backend_destroy(be);
}

typedef struct {
    mt_backend *be;
    mt_weight *w;
    const float *x;
    int m, iters;
    float *y;
    mt_status st;
    mt_err err;
} thread_job;

/* A worker: its own activations, the shared weight, many forward-like
 * rounds of upload, GEMM, download. */
static void *thread_main(void *p)
{
    thread_job *j = p;
    const mt_backend_ops *op = j->be->ops;
    const int n = j->w->n, k = j->w->k;
    float *dx = op->alloc(j->be, sizeof(float) * (size_t)j->m * k);
    float *dy = op->alloc(j->be, sizeof(float) * (size_t)j->m * n);
    j->st = dx && dy ? MT_OK : MT_ENOMEM;
    for (int it = 0; it < j->iters && j->st == MT_OK; it++)
        if ((j->st = op->upload(j->be, dx, j->x, sizeof(float) * (size_t)j->m * k, &j->err)) ||
            (j->st = op->gemm(j->be, dx, j->m, j->w, NULL, MT_ACT_GELU, dy, &j->err)) ||
            (j->st = op->download(j->be, j->y, dy, sizeof(float) * (size_t)j->m * n, &j->err)))
            break;
    op->free(j->be, dx);
    op->free(j->be, dy);
    return NULL;
}

static void threads_share_a_backend_with_a_stream_each(void)
{
    enum { T = 4 };
    mt_backend *be = NULL;
    mt_err err = {{0}};
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.gemm = MT_CUDA_GEMM_FUSED;
    o.autotune = 0;
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
        return;
    const int n = 1536, k = 384, m = 24;
    float *w = malloc(sizeof(float) * n * k), *scales = malloc(sizeof(float) * n);
    int8_t *q = malloc((size_t)n * k);
    for (int i = 0; i < n * k; i++)
        w[i] = gt_unif(-0.1f, 0.1f);
    mt_weight *wt = NULL;
    if (!MT_OK_OR(mt_quantize(w, n, k, MT_PREC_INT8, NULL, q, scales, &err), err) ||
        !MT_OK_OR(be->ops->weight_upload(be, MT_PREC_INT8, n, k, q, scales, &wt, &err), err))
        goto out;
    thread_job jobs[T];
    pthread_t th[T];
    float *xs = malloc(sizeof(float) * T * m * k);
    for (int i = 0; i < T * m * k; i++)
        xs[i] = gt_unif(-1, 1);
    /* single-threaded answers first */
    for (int i = 0; i < T; i++) {
        jobs[i] = (thread_job){be, wt, xs + (size_t)i * m * k, m, 1, malloc(sizeof(float) * m * n), MT_OK, {{0}}};
        thread_main(&jobs[i]);
    }
    float *want = malloc(sizeof(float) * T * m * n);
    for (int i = 0; i < T; i++) {
        memcpy(want + (size_t)i * m * n, jobs[i].y, sizeof(float) * m * n);
        memset(jobs[i].y, 0xff, sizeof(float) * m * n);
        jobs[i].iters = quick ? 5 : 50;
    }
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], NULL, thread_main, &jobs[i]);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++) {
        CHECK(jobs[i].st == MT_OK && !memcmp(want + (size_t)i * m * n, jobs[i].y, sizeof(float) * m * n),
              "thread %d: %s, same bits as alone", i, jobs[i].st == MT_OK ? "ok" : jobs[i].err.msg);
        free(jobs[i].y);
    }
    free(want), free(xs);
    be->ops->weight_destroy(be, wt);
out:
    free(w), free(scales), free(q);
    mt_backend_destroy(be);
}

int main(int argc, char **argv)
{
    const char *suite = "gpu backend";
    setvbuf(stdout, NULL, _IOLBF, 0);
    quick = gt_init(argc, argv, suite);
    if (!gt_have_device(suite)) {
        mt_backend *be = NULL;
        mt_err err = {{0}};
        /* without a device, creation must fail with a reason, not crash */
        CHECK(mt_cuda_device_count() == 0, "no device: count 0");
        CHECK(mt_backend_cuda_create(0, &be, &err) == MT_EUNSUPPORTED && !be && err.msg[0],
              "no device: create says %s", err.msg);
        gt_skip++;
        return gt_finish(suite);
    }
    device_queries_describe_and_refuse_bad_indices();
    memory_ops_round_trip_and_survive_oom();
    encoder_ops_match_cpu_twins();
    gemm_every_precision_and_path_matches_fp64();
    gelu_epilogue_within_tolerance();
    act16_gemm_matches_fp64();
    w8a8_refusal_falls_back_to_fused();
    threads_share_a_backend_with_a_stream_each();
    return gt_finish(suite);
}
