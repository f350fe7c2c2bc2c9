/* test_gpu_kernels.c: every kernel of kernels/cuda (through its extern "C"
 * launcher) against a plain C reference, on fresh random inputs of many
 * shapes: FP64 references where there is arithmetic, bit-exact comparisons
 * where a kernel only converts. Outputs are poisoned with NaN bytes before
 * each launch; padding that must stay untouched is checked too.
 *
 * The host-only pieces (the split-K planner, the crossover picker) are
 * tested first and run on machines without a GPU as well.
 *
 *   test_gpu_kernels [--seed N] [--quick]
 * --quick runs a short list of shapes: that is what compute-sanitizer runs.
 */
#include "engine/numfmt.h"
#include "kernels/cuda/kcu.h"
#include "tests/gpu/gpu_test.h"

#include <limits.h>

static int quick;
static int sms = 1;
static cudaStream_t stream;

static int round_up(int v, int to) { return (v + to - 1) / to * to; }

/* ========================================================================
 * host-only
 * ====================================================================== */

static void planner_covers_k_without_empty_splits(void)
{
    static const int ms[] = {1, 2, 8, 9, 16, 17, 33, 64, 65, 1000, 4096, 100000};
    static const int ns[] = {1, 127, 128, 129, 384, 1152, 4096, 11008};
    static const int ks[] = {1, 15, 63, 64, 65, 384, 1536, 4096, 11008};
    static const int sm_list[] = {1, 108, 132};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
                for (size_t d = 0; d < 3; d++) {
                    const int m = ms[a], n = ns[b], k = ks[c];
                    kcu_w8a16_plan p;
                    int ok = kcu_w8a16_make_plan(m, n, k, sm_list[d], NULL, &p) == 0;
                    const int want_bm = m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : 64;
                    ok = ok && p.bm == want_bm && p.bn == 128 && (long)p.grid_m * p.bm >= m &&
                         (long)(p.grid_m - 1) * p.bm < m && (long)p.grid_n * 128 >= n &&
                         p.nchunks == (k + 63) / 64 && p.splits >= 1 && p.splits <= 32 &&
                         (long)p.splits * p.chunks_per_split >= p.nchunks &&
                         (long)(p.splits - 1) * p.chunks_per_split < p.nchunks;
                    if (ok && p.splits > 1)
                        ok = p.ws_floats == (size_t)p.grid_m * p.grid_n * p.splits * 256 * 4 *
                                                (p.bm / 8) &&
                             p.counters == p.grid_m * p.grid_n;
                    if (ok && p.splits == 1)
                        ok = p.ws_floats == 0 && p.counters == 0;
                    if (!CHECK(ok, "plan m=%d n=%d k=%d sms=%d: bm %d grid %dx%d splits %d cps %d",
                               m, n, k, sm_list[d], p.bm, p.grid_m, p.grid_n, p.splits,
                               p.chunks_per_split))
                        return;
                }
    kcu_w8a16_plan p;
    CHECK(kcu_w8a16_make_plan(0, 1, 1, 1, NULL, &p) == -1, "m = 0 is refused");
    CHECK(kcu_w8a16_make_plan(1, 1, 0, 1, NULL, &p) == -1, "k = 0 is refused");
}

static void planner_fills_the_gpu_and_obeys_knobs(void)
{
    kcu_w8a16_plan p;
    /* LLM decode shape: 32 tiles on 132 SMs must be split */
    kcu_w8a16_make_plan(1, 4096, 4096, 132, NULL, &p);
    CHECK(p.splits > 1 && (long)p.grid_n * p.splits >= 132,
          "m=1 4096x4096 on 132 SMs: %d tiles x %d splits", p.grid_n, p.splits);
    /* enough tiles: no split */
    kcu_w8a16_make_plan(4096, 4096, 4096, 132, NULL, &p);
    CHECK(p.splits == 1, "m=4096: %d splits", p.splits);
    kcu_w8a16_opts o = {.force_splits = 5};
    kcu_w8a16_make_plan(1, 100, 64 * 20, 132, &o, &p);
    CHECK(p.splits == 5 && p.chunks_per_split == 4, "forced 5 splits of 20 chunks: %d x %d",
          p.splits, p.chunks_per_split);
    o.force_splits = 7; /* 20 chunks: 3 per split leaves 7 splits */
    kcu_w8a16_make_plan(1, 100, 64 * 20, 132, &o, &p);
    CHECK(p.splits == 7 && p.chunks_per_split == 3, "forced 7 splits: %d x %d", p.splits,
          p.chunks_per_split);
    o.force_splits = 100;
    kcu_w8a16_make_plan(1, 100, 64 * 3, 132, &o, &p);
    CHECK(p.splits == 3, "forced splits are capped by the chunks: %d", p.splits);
    kcu_w8a16_opts cap = {.max_splits = 2};
    kcu_w8a16_make_plan(1, 128, 4096, 132, &cap, &p);
    CHECK(p.splits == 2, "max_splits 2: %d", p.splits);
}

static void crossover_picker_takes_the_last_unbroken_run(void)
{
    const int ms[] = {16, 32, 64, 128, 256};
    const double f[] = {1, 2, 3, 4, 5};
    const double never[] = {2, 3, 4, 5, 6}, always[] = {0.5, 1, 2, 3, 4};
    const double late[] = {2, 3, 2, 5, 4};   /* wins at 64, loses at 128, wins at 256 */
    const double tail[] = {2, 3, 4, 3, 4};   /* wins from 128 on */
    CHECK(kcu_pick_crossover(ms, f, never, 5) == INT_MAX, "never");
    CHECK(kcu_pick_crossover(ms, f, always, 5) == 16, "always");
    CHECK(kcu_pick_crossover(ms, f, late, 5) == 256, "a lone early win does not count");
    CHECK(kcu_pick_crossover(ms, f, tail, 5) == 128, "tail");
    const double nan[] = {2, 3, 4, NAN, 4};
    CHECK(kcu_pick_crossover(ms, f, nan, 5) == 256, "NaN timing is a loss");
    CHECK(kcu_pick_crossover(ms, f, f, 0) == INT_MAX, "no points");
}

/* ========================================================================
 * device helpers
 * ====================================================================== */


static float round16(float x, int bf16)
{
    return bf16 ? nf_bf16_to_f32(nf_f32_to_bf16(x)) : nf_f16_to_f32(nf_f32_to_f16(x));
}

/* round16 to f16, as the tensor-core attention rounds its inputs */
static float round_f16(float x) { return round16(x, 0); }

static float dec8(uint8_t b, kcu_wtype wt)
{
    return wt == KCU_W_INT8 ? (float)(int8_t)b : nf_e4m3_to_f32(b);
}

static uint8_t rand_code(kcu_wtype wt)
{
    if (wt == KCU_W_INT8)
        return (uint8_t)(int8_t)gt_randint(-127, 127);
    uint8_t b;
    do
        b = (uint8_t)gt_next();
    while ((b & 0x7f) == 0x7f);
    return b;
}

/* ========================================================================
 * W8A16
 * ====================================================================== */

typedef struct {
    int m, n, k;
    kcu_wtype wt;
    kcu_atype at;
    int bias, gelu, force_splits, x_misalign, ldy_extra;
} w8_case;

/* The direct kernel on the inputs the staged one just ran on (output
 * poisoned again): the same plan and MMA order, so the same bits, padding
 * included. y: the staged kernel's output (m x ldy). */
static void w8a16_direct_same_bits(const w8_case *c, const float *dx, int ldx, const uint8_t *dw,
                                   int ldw, const float *ds, const float *db, float *dy, int ldy,
                                   const kcu_w8a16_opts *staged, float *ws,
                                   const kcu_w8a16_plan *p, int *cnt, const float *y)
{
    const int m = c->m, n = c->n, k = c->k;
    kcu_w8a16_opts o = *staged;
    o.kernel = KCU_W8A16_DIRECT;
    float *yd = malloc(sizeof(float) * (size_t)m * ldy);
    if (!CHECK(yd, "allocation"))
        return;
    CUDA_OK(cudaMemset(dy, 0xff, sizeof(float) * (size_t)m * ldy));
    cudaError_t e = kcu_w8a16_gemm(dx, ldx, dw, ldw, c->wt, ds, c->bias ? db : NULL,
                                   c->gelu ? KCU_ACT_GELU : KCU_ACT_NONE, dy, ldy, m, n, k, c->at,
                                   &o, ws, p->ws_floats, cnt, p->counters, stream);
    if (CHECK(e == cudaSuccess, "direct launch m=%d n=%d k=%d: %s", m, n, k, cudaGetErrorString(e))) {
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(yd, dy, sizeof(float) * (size_t)m * ldy, cudaMemcpyDeviceToHost));
        size_t first = (size_t)-1;
        for (size_t i = 0; i < (size_t)m * ldy && first == (size_t)-1; i++)
            if (memcmp(&yd[i], &y[i], sizeof(float)))
                first = i;
        CHECK(first == (size_t)-1,
              "w8a16 direct %s/%s m=%d n=%d k=%d splits=%d misalign=%d: bitwise the staged "
              "kernel's output (first difference at %zd: %.9g vs %.9g)",
              c->wt == KCU_W_INT8 ? "int8" : "e4m3", c->at == KCU_A_BF16 ? "bf16" : "f16", m, n,
              k, p->splits, c->x_misalign, first == (size_t)-1 ? (ssize_t)-1 : (ssize_t)first,
              first == (size_t)-1 ? 0.0 : yd[first], first == (size_t)-1 ? 0.0 : y[first]);
    }
    free(yd);
}

static void w8a16_case(const w8_case *c)
{
    const int m = c->m, n = c->n, k = c->k, ldw = round_up(k, 16), ldx = k + c->x_misalign,
              ldy = n + c->ldy_extra;
    const int bf = c->at == KCU_A_BF16;
    uint8_t *w = malloc((size_t)n * ldw);
    float *x = malloc(sizeof(float) * ((size_t)m * ldx + 4));
    float *scale = malloc(sizeof(float) * n), *bias = malloc(sizeof(float) * n);
    float *y = malloc(sizeof(float) * (size_t)m * ldy);
    double *ref = malloc(sizeof(double) * (size_t)m * n), *ref2 = malloc(sizeof(double) * (size_t)m * n);
    float *yc = malloc(sizeof(float) * (size_t)m * n);
    uint8_t *dw = gt_dmalloc((size_t)n * ldw);
    float *dx0 = gt_dmalloc(sizeof(float) * ((size_t)m * ldx + 4));
    float *ds = gt_dmalloc(sizeof(float) * n), *db = gt_dmalloc(sizeof(float) * n);
    float *dy = gt_dmalloc(sizeof(float) * (size_t)m * ldy);
    float *ws = NULL;
    int *cnt = NULL;
    if (!CHECK(w && x && scale && bias && y && ref && ref2 && yc && dw && dx0 && ds && db && dy,
               "allocation for m=%d n=%d k=%d", m, n, k))
        goto out;
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < ldw; i++) /* padding holds junk the kernel must not read */
            w[(size_t)r * ldw + i] = i < k ? rand_code(c->wt) : 0x7f; /* e4m3 NaN, int8 127 */
        scale[r] = c->wt == KCU_W_INT8 ? gt_unif(0.002f, 0.02f) : gt_unif(0.0005f, 0.004f);
        bias[r] = gt_unif(-1.f, 1.f);
    }
    for (size_t i = 0; i < (size_t)m * ldx + 4; i++)
        x[i] = (i % ldx) < (size_t)k ? gt_unif(-2.f, 2.f) : NAN; /* columns >= k: NaN */
    const int off = c->x_misalign ? 1 : 0; /* x pointer 4-byte aligned only */
    float *dx = dx0 + off;
    CUDA_OK(cudaMemcpy(dw, w, (size_t)n * ldw, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dx, x, sizeof(float) * (size_t)m * ldx, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ds, scale, sizeof(float) * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db, bias, sizeof(float) * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dy, 0xff, sizeof(float) * (size_t)m * ldy)); /* NaN poison */

    kcu_w8a16_opts o = {.force_splits = c->force_splits};
    kcu_w8a16_plan p;
    kcu_w8a16_make_plan(m, n, k, sms, &o, &p);
    if (p.splits > 1) {
        ws = gt_dmalloc(sizeof(float) * p.ws_floats);
        cnt = gt_dmalloc(sizeof(int) * p.counters);
        if (!CHECK(ws && cnt, "workspace"))
            goto out;
        CUDA_OK(cudaMemset(cnt, 0, sizeof(int) * p.counters));
    }
    cudaError_t e = kcu_w8a16_gemm(dx, ldx, dw, ldw, c->wt, ds, c->bias ? db : NULL,
                                   c->gelu ? KCU_ACT_GELU : KCU_ACT_NONE, dy, ldy, m, n, k, c->at,
                                   &o, ws, p.ws_floats, cnt, p.counters, stream);
    if (!CHECK(e == cudaSuccess, "launch: %s", cudaGetErrorString(e)))
        goto out;
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(y, dy, sizeof(float) * (size_t)m * ldy, cudaMemcpyDeviceToHost));
    if (p.splits > 1) {
        int *hc = malloc(sizeof(int) * p.counters), zero = 1;
        CUDA_OK(cudaMemcpy(hc, cnt, sizeof(int) * p.counters, cudaMemcpyDeviceToHost));
        for (int i = 0; i < p.counters; i++)
            zero &= hc[i] == 0;
        free(hc);
        CHECK(zero, "split-K counters are back at zero after m=%d n=%d k=%d", m, n, k);
    }

    /* reference: exactly the kernel's inputs (x rounded to the MMA type), FP64 sums */
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            double acc = 0, acc2 = 0;
            const uint8_t *wr = w + (size_t)j * ldw;
            const float *xr = x + (size_t)r * ldx;
            for (int i = 0; i < k; i++) {
                const double wv = dec8(wr[i], c->wt);
                acc += (double)round16(xr[i], bf) * wv;
                acc2 += (double)xr[i] * wv;
            }
            double v = acc * scale[j] + (c->bias ? bias[j] : 0);
            double v2 = acc2 * scale[j] + (c->bias ? bias[j] : 0);
            ref[(size_t)r * n + j] = c->gelu ? gt_gelu_ref(v) : v;
            ref2[(size_t)r * n + j] = c->gelu ? gt_gelu_ref(v2) : v2;
            yc[(size_t)r * n + j] = y[(size_t)r * ldy + j];
        }
    if (m <= 16)
        w8a16_direct_same_bits(c, dx, ldx, dw, ldw, ds, db, dy, ldy, &o, ws, &p, cnt, y);
    long bad = gt_first_nonfinite(yc, (size_t)m * n);
    int pad_ok = 1;
    for (int r = 0; r < m && c->ldy_extra; r++)
        for (int j = n; j < ldy; j++)
            pad_ok &= isnan(y[(size_t)r * ldy + j]);
    const double e1 = gt_rel_l2(yc, ref, (size_t)m * n), e2 = gt_rel_l2(yc, ref2, (size_t)m * n);
    const double tol2 = bf ? 1.5e-2 : 2e-3;
    CHECK(bad < 0 && pad_ok && e1 <= 3e-5 && e2 <= tol2,
          "w8a16 %s/%s m=%d n=%d k=%d bias=%d gelu=%d splits=%d(forced %d) misalign=%d ldy+%d: "
          "first unwritten %ld, pad %s, rel err %.3g vs same-rounding ref (<= 3e-5), %.3g vs FP32 "
          "x (<= %.g)",
          c->wt == KCU_W_INT8 ? "int8" : "e4m3", bf ? "bf16" : "f16", m, n, k, c->bias, c->gelu,
          p.splits, c->force_splits, c->x_misalign, c->ldy_extra, bad, pad_ok ? "ok" : "WRITTEN",
          e1, e2, tol2);
out:
    free(w), free(x), free(scale), free(bias), free(y), free(ref), free(ref2), free(yc);
    cudaFree(dw), cudaFree(dx0), cudaFree(ds), cudaFree(db), cudaFree(dy), cudaFree(ws),
        cudaFree(cnt);
}

static void w8a16_matches_fp64_reference_on_many_shapes(void)
{
    static const int ms_full[] = {1,  2,  3,  4,  5,  7,  8,   9,   12,  15,  16,  17,  24,  31,
                                  32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 200, 256, 300, 512};
    static const int ms_quick[] = {1, 8, 17, 64, 65, 129};
    static const int nk_full[][2] = {{1, 1},     {3, 5},      {7, 13},     {16, 16},
                                     {17, 31},   {33, 64},    {64, 65},    {127, 129},
                                     {128, 128}, {129, 200},  {384, 384},  {1152, 384},
                                     {384, 1536}, {1536, 384}, {257, 1000}, {1000, 257}};
    static const int nk_quick[][2] = {{1, 1}, {7, 13}, {129, 200}, {257, 1000}};
    const int *ms = quick ? ms_quick : ms_full;
    const int nm = quick ? 6 : (int)(sizeof ms_full / sizeof *ms_full);
    const int (*nk)[2] = quick ? nk_quick : nk_full;
    const int nnk = quick ? 4 : 16;
    const int per_m = quick ? 2 : 4;
    int idx = 0;
    for (int i = 0; i < nm; i++)
        for (int j = 0; j < per_m; j++, idx++) {
            w8_case c = {
                .m = ms[i],
                .n = nk[idx % nnk][0],
                .k = nk[idx % nnk][1],
                .wt = (kcu_wtype)(j & 1),
                .at = (kcu_atype)((j >> 1) & 1),
                .bias = gt_randint(0, 3) != 0,
                .gelu = gt_randint(0, 1),
                .force_splits = gt_randint(0, 3) == 0 ? gt_randint(1, 7) : 0,
                .x_misalign = j == 3 || gt_randint(0, 7) == 0,
                .ldy_extra = gt_randint(0, 3) == 0 ? 3 : 0,
            };
            w8a16_case(&c);
        }
    if (quick)
        return;
    /* LLM-sized layers at decode batch sizes */
    const w8_case big[] = {
        {1, 4096, 4096, KCU_W_INT8, KCU_A_F16, 1, 0, 0, 0, 0},
        {3, 4096, 4096, KCU_W_E4M3, KCU_A_F16, 1, 1, 0, 0, 0},
        {16, 4096, 11008, KCU_W_INT8, KCU_A_BF16, 0, 0, 0, 0, 0},
        {8, 11008, 4096, KCU_W_E4M3, KCU_A_BF16, 1, 0, 0, 0, 0},
        {33, 4096, 4096, KCU_W_INT8, KCU_A_F16, 1, 1, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof big / sizeof *big; i++)
        w8a16_case(&big[i]);
}

/* Split-K sums its partials in a fixed order: two runs give the same bits. */
static void w8a16_split_k_is_deterministic(void)
{
    const int m = 16, n = 1000, k = 4096, ldw = k;
    uint8_t *w = malloc((size_t)n * ldw);
    float *x = malloc(sizeof(float) * m * k), *s = malloc(sizeof(float) * n);
    float *y1 = malloc(sizeof(float) * m * n), *y2 = malloc(sizeof(float) * m * n);
    for (size_t i = 0; i < (size_t)n * ldw; i++)
        w[i] = rand_code(KCU_W_INT8);
    for (int i = 0; i < m * k; i++)
        x[i] = gt_unif(-1, 1);
    for (int i = 0; i < n; i++)
        s[i] = 0.01f;
    uint8_t *dw = gt_dmalloc((size_t)n * ldw);
    float *dx = gt_dmalloc(sizeof(float) * m * k), *ds = gt_dmalloc(sizeof(float) * n),
          *dy = gt_dmalloc(sizeof(float) * m * n);
    kcu_w8a16_opts o = {.force_splits = 16};
    kcu_w8a16_plan p;
    kcu_w8a16_make_plan(m, n, k, sms, &o, &p);
    float *ws = gt_dmalloc(sizeof(float) * p.ws_floats);
    int *cnt = gt_dmalloc(sizeof(int) * p.counters);
    CUDA_OK(cudaMemcpy(dw, w, (size_t)n * ldw, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dx, x, sizeof(float) * m * k, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ds, s, sizeof(float) * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(cnt, 0, sizeof(int) * p.counters));
    for (int run = 0; run < 2; run++) {
        CUDA_OK(cudaMemset(dy, 0xff, sizeof(float) * m * n));
        CUDA_OK(kcu_w8a16_gemm(dx, k, dw, ldw, KCU_W_INT8, ds, NULL, KCU_ACT_NONE, dy, n, m, n, k,
                               KCU_A_F16, &o, ws, p.ws_floats, cnt, p.counters, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(run ? y2 : y1, dy, sizeof(float) * m * n, cudaMemcpyDeviceToHost));
    }
    CHECK(p.splits == 16 && !memcmp(y1, y2, sizeof(float) * m * n),
          "split-K (%d splits) gives the same bits twice", p.splits);
    free(w), free(x), free(s), free(y1), free(y2);
    cudaFree(dw), cudaFree(dx), cudaFree(ds), cudaFree(dy), cudaFree(ws), cudaFree(cnt);
}

static void w8a16_refuses_unaligned_weights_and_falls_back_without_workspace(void)
{
    uint8_t *dw = gt_dmalloc(64 * 48);
    float *dx = gt_dmalloc(sizeof(float) * 64 * 40), *ds = gt_dmalloc(sizeof(float) * 64),
          *dy = gt_dmalloc(sizeof(float) * 64 * 64);
    CUDA_OK(cudaMemset(dw, 1, 64 * 48));
    CUDA_OK(cudaMemset(dx, 0, sizeof(float) * 64 * 40));
    CUDA_OK(cudaMemset(ds, 0, sizeof(float) * 64));
    cudaError_t e = kcu_w8a16_gemm(dx, 40, dw, 40, KCU_W_INT8, ds, NULL, KCU_ACT_NONE, dy, 64, 4,
                                   64, 40, KCU_A_F16, NULL, NULL, 0, NULL, 0, stream);
    CHECK(e == cudaErrorInvalidValue, "ldw 40 (not a multiple of 16): %s", cudaGetErrorString(e));
    e = kcu_w8a16_gemm(dx, 40, dw + 1, 48, KCU_W_INT8, ds, NULL, KCU_ACT_NONE, dy, 64, 4, 64, 40,
                       KCU_A_F16, NULL, NULL, 0, NULL, 0, stream);
    CHECK(e == cudaErrorInvalidValue, "misaligned w: %s", cudaGetErrorString(e));
    CHECK(cudaGetLastError() == cudaSuccess, "a refused launch leaves no error behind");
    e = kcu_w8a16_gemm(dx, 40, dw, 48, KCU_W_INT8, ds, NULL, KCU_ACT_NONE, dy, 64, 0, 64, 40,
                       KCU_A_F16, NULL, NULL, 0, NULL, 0, stream);
    CHECK(e == cudaSuccess, "m = 0 is a no-op: %s", cudaGetErrorString(e));
    /* a plan that wants split-K, given no workspace, still runs (one split) */
    kcu_w8a16_opts o = {.force_splits = 4};
    CUDA_OK(cudaMemset(dy, 0xff, sizeof(float) * 64 * 64));
    e = kcu_w8a16_gemm(dx, 40, dw, 48, KCU_W_INT8, ds, NULL, KCU_ACT_NONE, dy, 64, 4, 64, 40,
                       KCU_A_F16, &o, NULL, 0, NULL, 0, stream);
    CUDA_OK(cudaStreamSynchronize(stream));
    float y[4 * 64];
    CUDA_OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    int zeros = 1;
    for (int i = 0; i < 4 * 64; i++)
        zeros &= y[i] == 0.f; /* scale 0, x 0 */
    CHECK(e == cudaSuccess && zeros, "no workspace: %s, all written %d", cudaGetErrorString(e), zeros);
    cudaFree(dw), cudaFree(dx), cudaFree(ds), cudaFree(dy);
}

/* ========================================================================
 * conversions and elementwise kernels
 * ====================================================================== */

static float special_or_random(void)
{
    static const float sp[] = {0.f, -0.f, 1.f, -1.f, 65504.f, 65520.f, -70000.f, 1e-8f, -6e-8f,
                               3e38f, INFINITY, -INFINITY, 1.00048828125f, 0.333333f};
    int r = gt_randint(0, 40);
    return r < (int)(sizeof sp / sizeof *sp) ? sp[r] : gt_unif(-100.f, 100.f);
}

static void f32_to_16_is_bit_exact_with_zero_padding(void)
{
    const int cases = quick ? 4 : 24;
    for (int cs = 0; cs < cases; cs++) {
        /* every other case with ldx a multiple of 4: the vectorized kernel */
        const int m = gt_randint(1, 300), k = gt_randint(1, 700),
                  ldx = cs & 2 ? round_up(k, 4) : k + gt_randint(0, 3),
                  ldo = round_up(k, 8) + gt_randint(0, 1) * 8, bf = cs & 1;
        float *x = malloc(sizeof(float) * (size_t)m * ldx);
        uint16_t *o = malloc(2 * (size_t)m * ldo);
        for (size_t i = 0; i < (size_t)m * ldx; i++)
            x[i] = special_or_random();
        float *dx = gt_dmalloc(sizeof(float) * (size_t)m * ldx);
        uint16_t *dout = gt_dmalloc(2 * (size_t)m * ldo);
        CUDA_OK(cudaMemcpy(dx, x, sizeof(float) * (size_t)m * ldx, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dout, 0xff, 2 * (size_t)m * ldo));
        CUDA_OK(kcu_f32_to_16(dx, ldx, m, k, dout, ldo, bf, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(o, dout, 2 * (size_t)m * ldo, cudaMemcpyDeviceToHost));
        long bad = -1;
        for (int r = 0; r < m && bad < 0; r++)
            for (int c = 0; c < ldo && bad < 0; c++) {
                const float v = x[(size_t)r * ldx + (c < k ? c : 0)];
                const uint16_t want = c >= k ? 0 : bf ? nf_f32_to_bf16(v) : nf_f32_to_f16(v);
                if (o[(size_t)r * ldo + c] != want)
                    bad = (long)r * ldo + c;
            }
        CHECK(bad < 0, "f32 -> %s m=%d k=%d ldo=%d: first mismatch at %ld", bf ? "bf16" : "f16", m,
              k, ldo, bad);
        free(x), free(o), cudaFree(dx), cudaFree(dout);
    }
}

static void bias_act_matches_fp64(void)
{
    const int cases = quick ? 3 : 12;
    for (int cs = 0; cs < cases; cs++) {
        /* every other case with n and ldy multiples of 4: the vectorized kernel */
        const int m = gt_randint(1, 200), n = cs & 2 ? 4 * gt_randint(1, 400) : gt_randint(1, 1600),
                  ldy = cs & 2 ? n + 4 * gt_randint(0, 2) : n + gt_randint(0, 5);
        const int gelu = cs & 1, with_bias = (cs >> 1) & 1 || !gelu;
        float *y = malloc(sizeof(float) * (size_t)m * ldy), *out = malloc(sizeof(float) * (size_t)m * ldy);
        float *b = malloc(sizeof(float) * n);
        for (size_t i = 0; i < (size_t)m * ldy; i++)
            y[i] = gt_unif(-6.f, 6.f);
        for (int i = 0; i < n; i++)
            b[i] = gt_unif(-1.f, 1.f);
        float *dy = gt_dmalloc(sizeof(float) * (size_t)m * ldy), *dbias = gt_dmalloc(sizeof(float) * n);
        CUDA_OK(cudaMemcpy(dy, y, sizeof(float) * (size_t)m * ldy, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dbias, b, sizeof(float) * n, cudaMemcpyHostToDevice));
        CUDA_OK(kcu_bias_act(dy, ldy, m, n, with_bias ? dbias : NULL,
                             gelu ? KCU_ACT_GELU : KCU_ACT_NONE, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(out, dy, sizeof(float) * (size_t)m * ldy, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int r = 0; r < m; r++)
            for (int c = 0; c < ldy; c++) {
                const size_t i = (size_t)r * ldy + c;
                double want = y[i];
                if (c < n) {
                    want = (double)(float)(y[i] + (with_bias ? b[c] : 0.f));
                    want = gelu ? gt_gelu_ref(want) : want;
                }
                const double d = fabs(out[i] - want) / (1.0 + fabs(want));
                worst = d > worst || d != d ? d : worst;
            }
        CHECK(worst <= 2e-6, "bias_act m=%d n=%d gelu=%d bias=%d: worst rel err %.3g", m, n, gelu,
              with_bias, worst);
        free(y), free(out), free(b), cudaFree(dy), cudaFree(dbias);
    }
}

static void dequant_to_f16_is_bit_exact(void)
{
    for (int cs = 0; cs < (quick ? 2 : 8); cs++) {
        const kcu_wtype wt = (kcu_wtype)(cs & 1);
        const int n = gt_randint(1, 500), k = gt_randint(1, 900), ldw = round_up(k, 16),
                  ldo = round_up(k, 8);
        uint8_t *w = malloc((size_t)n * ldw);
        float *s = malloc(sizeof(float) * n);
        uint16_t *o = malloc(2 * (size_t)n * ldo);
        for (size_t i = 0; i < (size_t)n * ldw; i++)
            w[i] = rand_code(wt);
        for (int i = 0; i < n; i++)
            s[i] = gt_unif(0.0005f, 0.02f);
        uint8_t *dw = gt_dmalloc((size_t)n * ldw);
        float *ds = gt_dmalloc(sizeof(float) * n);
        uint16_t *dout = gt_dmalloc(2 * (size_t)n * ldo);
        CUDA_OK(cudaMemcpy(dw, w, (size_t)n * ldw, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(ds, s, sizeof(float) * n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dout, 0xff, 2 * (size_t)n * ldo));
        CUDA_OK(kcu_dequant_to_f16(dw, ldw, wt, ds, n, k, dout, ldo, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(o, dout, 2 * (size_t)n * ldo, cudaMemcpyDeviceToHost));
        long bad = -1;
        for (int r = 0; r < n && bad < 0; r++)
            for (int c = 0; c < ldo && bad < 0; c++) {
                const uint16_t want =
                    c < k ? nf_f32_to_f16(dec8(w[(size_t)r * ldw + c], wt) * s[r]) : 0;
                if (o[(size_t)r * ldo + c] != want)
                    bad = (long)r * ldo + c;
            }
        CHECK(bad < 0, "dequant %s n=%d k=%d: first mismatch at %ld",
              wt == KCU_W_INT8 ? "int8" : "e4m3", n, k, bad);
        free(w), free(s), free(o), cudaFree(dw), cudaFree(ds), cudaFree(dout);
    }
}

static void quant_rows_e4m3_matches_numfmt(void)
{
    for (int cs = 0; cs < (quick ? 2 : 8); cs++) {
        /* odd cases: rows 16-byte aligned (the kernel's four-at-a-time path);
         * cs % 4 == 2: code rows not 4-byte aligned (byte stores) */
        const int m = gt_randint(1, 300), k = gt_randint(1, 3000),
                  ldx = cs & 1 ? round_up(k, 4) : k + gt_randint(0, 2),
                  ldq = cs % 4 == 2 ? k + 1 + (k % 4 == 3) : round_up(k, 16);
        float *x = malloc(sizeof(float) * (size_t)m * ldx), *s = malloc(sizeof(float) * m);
        uint8_t *q = malloc((size_t)m * ldq);
        for (int r = 0; r < m; r++) {
            const float mag = r == 0 ? 0.f : powf(10.f, gt_unif(-3.f, 3.f)); /* row 0 all zero */
            for (int c = 0; c < ldx; c++)
                x[(size_t)r * ldx + c] = gt_unif(-mag, mag);
        }
        float *dx = gt_dmalloc(sizeof(float) * (size_t)m * ldx), *dsc = gt_dmalloc(sizeof(float) * m);
        uint8_t *dq = gt_dmalloc((size_t)m * ldq);
        CUDA_OK(cudaMemcpy(dx, x, sizeof(float) * (size_t)m * ldx, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dq, 0x7f, (size_t)m * ldq));
        CUDA_OK(cudaMemset(dsc, 0xff, sizeof(float) * m));
        CUDA_OK(kcu_quant_rows_e4m3(dx, ldx, m, k, dq, ldq, dsc, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(q, dq, (size_t)m * ldq, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(s, dsc, sizeof(float) * m, cudaMemcpyDeviceToHost));
        long bad = -1;
        for (int r = 0; r < m && bad < 0; r++) {
            float amax = 0.f;
            for (int c = 0; c < k; c++)
                amax = fmaxf(amax, fabsf(x[(size_t)r * ldx + c]));
            const float want_s = amax > 0.f ? amax / 448.0f : 1.0f;
            if (s[r] != want_s)
                bad = -2 - r;
            for (int c = 0; c < ldq && bad == -1; c++) {
                const uint8_t want = c < k ? nf_f32_to_e4m3(x[(size_t)r * ldx + c] / want_s) : 0;
                if (q[(size_t)r * ldq + c] != want)
                    bad = (long)r * ldq + c;
            }
        }
        CHECK(bad == -1, "quant rows m=%d k=%d: mismatch %ld (<= -2: scale of row -2-v)", m, k, bad);
        free(x), free(s), free(q), cudaFree(dx), cudaFree(dsc), cudaFree(dq);
    }
}

/* ========================================================================
 * encoder kernels
 * ====================================================================== */


static void embed_is_exact(void)
{
    const int vocab = 1000, maxpos = 512;
    for (int cs = 0; cs < (quick ? 1 : 4); cs++) {
        const int h = cs == 0 ? 384 : gt_randint(1, 800), nseq = gt_randint(1, 40);
        int32_t off[41];
        const int t = gt_make_offsets(off, nseq, 1, cs == 1 ? 512 : 130);
        int32_t *ids = malloc(sizeof(int32_t) * t);
        float *word = malloc(sizeof(float) * (size_t)vocab * h), *pos = malloc(sizeof(float) * (size_t)maxpos * h);
        float *type0 = malloc(sizeof(float) * h), *out = malloc(sizeof(float) * (size_t)t * h);
        for (int i = 0; i < t; i++)
            ids[i] = gt_randint(0, vocab - 1);
        for (size_t i = 0; i < (size_t)vocab * h; i++)
            word[i] = gt_unif(-1, 1);
        for (size_t i = 0; i < (size_t)maxpos * h; i++)
            pos[i] = gt_unif(-1, 1);
        for (int i = 0; i < h; i++)
            type0[i] = gt_unif(-1, 1);
        int32_t *dids = gt_dmalloc(sizeof(int32_t) * t), *doff = gt_dmalloc(sizeof(int32_t) * (nseq + 1));
        float *dw = gt_dmalloc(sizeof(float) * (size_t)vocab * h), *dp = gt_dmalloc(sizeof(float) * (size_t)maxpos * h);
        float *dt = gt_dmalloc(sizeof(float) * h), *dout = gt_dmalloc(sizeof(float) * (size_t)t * h);
        CUDA_OK(cudaMemcpy(dids, ids, sizeof(int32_t) * t, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(doff, off, sizeof(int32_t) * (nseq + 1), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dw, word, sizeof(float) * (size_t)vocab * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dp, pos, sizeof(float) * (size_t)maxpos * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dt, type0, sizeof(float) * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)t * h));
        CUDA_OK(kcu_embed(dids, doff, nseq, dw, dp, dt, h, dout, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(out, dout, sizeof(float) * (size_t)t * h, cudaMemcpyDeviceToHost));
        long bad = -1;
        for (int s = 0; s < nseq && bad < 0; s++)
            for (int i = off[s]; i < off[s + 1] && bad < 0; i++)
                for (int c = 0; c < h; c++)
                    if (out[(size_t)i * h + c] !=
                        word[(size_t)ids[i] * h + c] + pos[(size_t)(i - off[s]) * h + c] + type0[c]) {
                        bad = (long)i * h + c;
                        break;
                    }
        CHECK(bad < 0, "embed h=%d nseq=%d t=%d: first mismatch %ld", h, nseq, t, bad);
        free(ids), free(word), free(pos), free(type0), free(out);
        cudaFree(dids), cudaFree(doff), cudaFree(dw), cudaFree(dp), cudaFree(dt), cudaFree(dout);
    }
}

static void layernorm_matches_fp64(void)
{
    static const int hs[] = {1, 31, 32, 100, 128, 129, 384, 512, 768, 1000, 1024, 1025, 4096};
    const int nh = quick ? 4 : (int)(sizeof hs / sizeof *hs);
    for (int i = 0; i < nh; i++) {
        const int h = quick ? hs[i * 3] : hs[i], t = gt_randint(1, 300);
        const int with_res = i & 1, alias = (i >> 1) & 1;
        const size_t n = (size_t)t * h;
        float *x = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
        float *g = malloc(sizeof(float) * h), *b = malloc(sizeof(float) * h);
        double *ref = malloc(sizeof(double) * n);
        for (size_t j = 0; j < n; j++) {
            x[j] = gt_unif(-3, 3) + 5.f; /* an offset: the two-pass variance must cope */
            r[j] = gt_unif(-1, 1);
        }
        for (int j = 0; j < h; j++) {
            g[j] = gt_unif(0.5f, 1.5f);
            b[j] = gt_unif(-0.5f, 0.5f);
        }
        const float eps = 1e-12f;
        for (int row = 0; row < t; row++) {
            double mean = 0, var = 0;
            for (int c = 0; c < h; c++)
                mean += (double)x[(size_t)row * h + c] + (with_res ? r[(size_t)row * h + c] : 0);
            mean /= h;
            for (int c = 0; c < h; c++) {
                double d = (double)x[(size_t)row * h + c] + (with_res ? r[(size_t)row * h + c] : 0) - mean;
                var += d * d;
            }
            const double rstd = 1.0 / sqrt(var / h + eps);
            for (int c = 0; c < h; c++)
                ref[(size_t)row * h + c] =
                    ((double)x[(size_t)row * h + c] + (with_res ? r[(size_t)row * h + c] : 0) - mean) *
                        rstd * g[c] + b[c];
        }
        float *dx = gt_dmalloc(sizeof(float) * n), *dr = gt_dmalloc(sizeof(float) * n),
              *dout0 = gt_dmalloc(sizeof(float) * (n + 1));
        float *dg = gt_dmalloc(sizeof(float) * h), *dbeta = gt_dmalloc(sizeof(float) * h);
        CUDA_OK(cudaMemcpy(dx, x, sizeof(float) * n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dr, r, sizeof(float) * n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dg, g, sizeof(float) * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dbeta, b, sizeof(float) * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dout0, 0xff, sizeof(float) * (n + 1)));
        /* h % 4 == 0 with aligned rows takes the float4 kernel; an output
         * off by one float (every fourth case) keeps the scalar one */
        float *dout = dout0 + (i % 4 == 0 ? 1 : 0);
        float *dst = alias ? dx : dout;
        CUDA_OK(kcu_layernorm(dx, with_res ? dr : NULL, dg, dbeta, t, h, eps, dst, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(out, dst, sizeof(float) * n, cudaMemcpyDeviceToHost));
        const double e = gt_rel_l2(out, ref, n);
        CHECK(gt_first_nonfinite(out, n) < 0 && e <= 2e-6,
              "layernorm t=%d h=%d res=%d alias=%d out+%d: rel err %.3g", t, h, with_res, alias,
              (int)(dout - dout0), e);
        free(x), free(r), free(out), free(g), free(b), free(ref);
        cudaFree(dx), cudaFree(dr), cudaFree(dout0), cudaFree(dg), cudaFree(dbeta);
    }
}

/* Mean pooling against FP64, widths below, at and above one thread per
 * column (1024); unnormalised, bit for bit the in-order FP32 sum that
 * kc_mean_pool takes on the CPU (the kernel loads rows in batches but adds
 * them in order). */
static void mean_pool_matches_fp64(void)
{
    static const int hs[] = {1, 33, 384, 1000, 2000};
    for (int i = 0; i < (quick ? 2 : 10); i++) {
        const int h = hs[i % 5], nseq = gt_randint(1, 64), norm = i & 1;
        int32_t off[65];
        const int t = gt_make_offsets(off, nseq, 1, 300);
        float *x = malloc(sizeof(float) * (size_t)t * h), *out = malloc(sizeof(float) * (size_t)nseq * h);
        double *ref = malloc(sizeof(double) * (size_t)nseq * h);
        for (size_t j = 0; j < (size_t)t * h; j++)
            x[j] = gt_unif(-2, 2);
        for (int s = 0; s < nseq; s++) {
            double n2 = 0;
            for (int c = 0; c < h; c++) {
                double acc = 0;
                for (int r = off[s]; r < off[s + 1]; r++)
                    acc += x[(size_t)r * h + c];
                ref[(size_t)s * h + c] = acc / (off[s + 1] - off[s]);
                n2 += ref[(size_t)s * h + c] * ref[(size_t)s * h + c];
            }
            for (int c = 0; c < h && norm; c++)
                ref[(size_t)s * h + c] /= fmax(sqrt(n2), 1e-12);
        }
        float *dx = gt_dmalloc(sizeof(float) * (size_t)t * h), *dout = gt_dmalloc(sizeof(float) * (size_t)nseq * h);
        int32_t *doff = gt_dmalloc(sizeof(int32_t) * (nseq + 1));
        CUDA_OK(cudaMemcpy(dx, x, sizeof(float) * (size_t)t * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(doff, off, sizeof(int32_t) * (nseq + 1), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)nseq * h));
        CUDA_OK(kcu_mean_pool(dx, doff, nseq, h, norm, dout, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(out, dout, sizeof(float) * (size_t)nseq * h, cudaMemcpyDeviceToHost));
        const double e = gt_rel_l2(out, ref, (size_t)nseq * h);
        long differ = 0; /* elements not bitwise the in-order FP32 sum (norm = 0) */
        for (int s = 0; s < nseq && !norm; s++)
            for (int c = 0; c < h; c++) {
                float acc = 0.f;
                for (int r = off[s]; r < off[s + 1]; r++)
                    acc += x[(size_t)r * h + c];
                acc *= 1.0f / (float)(off[s + 1] - off[s]);
                differ += memcmp(&acc, &out[(size_t)s * h + c], sizeof acc) != 0;
            }
        CHECK(gt_first_nonfinite(out, (size_t)nseq * h) < 0 && e <= 2e-6 && differ == 0,
              "mean_pool h=%d nseq=%d norm=%d: rel err %.3g, %ld not the in-order FP32 sum",
              h, nseq, norm, e, differ);
        free(x), free(out), free(ref), cudaFree(dx), cudaFree(dout), cudaFree(doff);
    }
}


static void attention_matches_fp64(void)
{
    static const struct {
        int heads, dh, nseq, lo, hi;
    } cs_full[] = {
        {12, 32, 1, 1, 1},   {12, 32, 3, 17, 17}, {12, 32, 2, 64, 65}, {12, 32, 5, 1, 200},
        {4, 64, 2, 100, 300}, {2, 128, 3, 1, 130}, {12, 32, 1, 512, 512}, {3, 48, 3, 1, 90},
        {1, 8, 4, 1, 40},    {2, 128, 1, 512, 512}, {12, 32, 40, 120, 128},
    }, cs_quick[] = {{12, 32, 2, 1, 70}, {2, 64, 2, 60, 140}, {3, 48, 2, 1, 40}};
    const int ncase = quick ? 3 : (int)(sizeof cs_full / sizeof *cs_full);
    for (int i = 0; i < ncase; i++) {
        const int heads = quick ? cs_quick[i].heads : cs_full[i].heads;
        const int dh = quick ? cs_quick[i].dh : cs_full[i].dh;
        const int nseq = quick ? cs_quick[i].nseq : cs_full[i].nseq;
        int32_t off[64];
        const int t = gt_make_offsets(off, nseq, quick ? cs_quick[i].lo : cs_full[i].lo,
                                   quick ? cs_quick[i].hi : cs_full[i].hi);
        const int H = heads * dh;
        float *qkv = malloc(sizeof(float) * (size_t)t * 3 * H), *out = malloc(sizeof(float) * (size_t)t * H);
        double *ref = malloc(sizeof(double) * (size_t)t * H), *ref16 = malloc(sizeof(double) * (size_t)t * H);
        for (size_t j = 0; j < (size_t)t * 3 * H; j++)
            qkv[j] = gt_unif(-2.5f, 2.5f);
        gt_attention_ref(qkv, off, nseq, heads, dh, NULL, ref);
        gt_attention_ref(qkv, off, nseq, heads, dh, round_f16, ref16);
        float *dq = gt_dmalloc(sizeof(float) * (size_t)t * 3 * H), *dout = gt_dmalloc(sizeof(float) * (size_t)t * H);
        int32_t *doff = gt_dmalloc(sizeof(int32_t) * (nseq + 1));
        CUDA_OK(cudaMemcpy(dq, qkv, sizeof(float) * (size_t)t * 3 * H, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(doff, off, sizeof(int32_t) * (nseq + 1), cudaMemcpyHostToDevice));
        for (int mode = 0; mode < 2; mode++) {
            if (!kcu_attention_supported((kcu_attn_mode)mode, dh))
                continue;
            /* a small length hint forces blocks to loop over query tiles */
            const int hint = gt_randint(0, 1) ? 512 : 1;
            CUDA_OK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)t * H));
            CUDA_OK(kcu_attention(dq, doff, nseq, heads, dh, hint, sms, (kcu_attn_mode)mode, dout,
                                  stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            CUDA_OK(cudaMemcpy(out, dout, sizeof(float) * (size_t)t * H, cudaMemcpyDeviceToHost));
            const double e = gt_rel_l2(out, ref, (size_t)t * H);
            const double e16 = gt_rel_l2(out, ref16, (size_t)t * H);
            const double tol = mode == KCU_ATTN_FP32 ? 5e-6 : 4e-3;
            CHECK(gt_first_nonfinite(out, (size_t)t * H) < 0 && e <= tol,
                  "attention %s heads=%d dh=%d nseq=%d t=%d hint=%d: rel err %.3g (<= %.g), vs "
                  "f16-rounded inputs %.3g",
                  mode ? "f16" : "fp32", heads, dh, nseq, t, hint, e, tol, e16);
        }
        free(qkv), free(out), free(ref), free(ref16), cudaFree(dq), cudaFree(dout), cudaFree(doff);
    }
}

static void fills_are_deterministic_and_in_range(void)
{
    const size_t n = 100003;
    float *d = gt_dmalloc(sizeof(float) * n), *h1 = malloc(sizeof(float) * n), *h2 = malloc(sizeof(float) * n);
    uint8_t *dc = gt_dmalloc(n), *hc = malloc(n);
    CUDA_OK(kcu_fill_f32(d, n, 42, -3.f, 5.f, stream));
    CUDA_OK(cudaMemcpyAsync(h1, d, sizeof(float) * n, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(kcu_fill_f32(d, n, 42, -3.f, 5.f, stream));
    CUDA_OK(cudaMemcpyAsync(h2, d, sizeof(float) * n, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(kcu_fill_codes(dc, n, 7, KCU_W_E4M3, stream));
    CUDA_OK(cudaMemcpyAsync(hc, dc, n, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    int ok = !memcmp(h1, h2, sizeof(float) * n);
    double mean = 0;
    for (size_t i = 0; i < n; i++) {
        ok &= h1[i] >= -3.f && h1[i] < 5.f;
        mean += h1[i] / n;
    }
    for (size_t i = 0; i < n; i++)
        ok &= (hc[i] & 0x7f) != 0x7f;
    CHECK(ok && fabs(mean - 1.0) < 0.05, "fills: deterministic, in range, mean %.3f", mean);
    cudaFree(d), cudaFree(dc), free(h1), free(h2), free(hc);
}

/* The direct kernel runs only when asked for and only for m <= 16. */
static void direct_kernel_choice(void)
{
    const kcu_w8a16_opts d = {.kernel = KCU_W8A16_DIRECT}, s = {.kernel = KCU_W8A16_STAGED},
                         a = {0};
    CHECK(kcu_w8a16_direct(1, &d) && kcu_w8a16_direct(16, &d), "direct at m = 1 and 16 when asked");
    CHECK(!kcu_w8a16_direct(17, &d) && !kcu_w8a16_direct(0, &d), "not at m = 17 or 0");
    CHECK(!kcu_w8a16_direct(1, &s) && !kcu_w8a16_direct(1, &a) && !kcu_w8a16_direct(1, NULL),
          "staged when not asked for (auto is staged until direct is measured)");
}

int main(int argc, char **argv)
{
    const char *suite = "gpu kernels";
    setvbuf(stdout, NULL, _IOLBF, 0);
    quick = gt_init(argc, argv, suite);
    planner_covers_k_without_empty_splits();
    planner_fills_the_gpu_and_obeys_knobs();
    crossover_picker_takes_the_last_unbroken_run();
    direct_kernel_choice();
    if (!gt_device_stream(suite, &sms, &stream))
        return gt_finish(suite);
    CHECK(kcu_check_image() == cudaSuccess, "kernel image loads on this device");
    fills_are_deterministic_and_in_range();
    w8a16_refuses_unaligned_weights_and_falls_back_without_workspace();
    w8a16_matches_fp64_reference_on_many_shapes();
    w8a16_split_k_is_deterministic();
    f32_to_16_is_bit_exact_with_zero_padding();
    bias_act_matches_fp64();
    dequant_to_f16_is_bit_exact();
    quant_rows_e4m3_matches_numfmt();
    embed_is_exact();
    layernorm_matches_fp64();
    mean_pool_matches_fp64();
    attention_matches_fp64();
    cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "no asynchronous error at the end: %s", cudaGetErrorString(e));
    cudaStreamDestroy(stream);
    return gt_finish(suite);
}
