/* engine/cuda/tune.c: the CUDA backend's tuner. When an 8-bit weight is
 * uploaded it times the GEMM paths of engine/cuda/gemm.c on pseudo-random
 * rows, per (precision, n, k) and cached: the direct W8A16 kernel against
 * the staged one at m <= 16, then the fused kernel against the cuBLASLt
 * paths (the dequantized FP16 GEMM, and W8A8 where the weight has it: FP8
 * on sm_90, INT8 with MANTISSA_CUDA_INT8_W8A8) at m = 16 .. 4096, each
 * recorded into a CUDA graph as a forward replays it. It keeps the
 * crossover m and, from it on, the faster of those paths per m; for W8A8
 * also where it wins on rows its LayerNorm quantized (q.pre). */
#include <math.h>

#include "engine/cuda/internal.h"
#include "engine/quant/quant.h"

/* The m the tuner times the paths at; an m between two takes the choice of
 * the smaller (cup_m_bucket), one past the last that of the last. */
static const int tune_ms[TUNE_MS] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};

q8_path q8_tuned_path(const cu_weight *w, int m)
{
    return m < w->q.crossover ? P_FUSED : (q8_path)w->q.alt[cup_m_bucket(tune_ms, TUNE_MS, m)];
}

bool q8_tuned_pre(const cu_weight *w, int m)
{
    return m >= tune_ms[0] && w->q.pre[cup_m_bucket(tune_ms, TUNE_MS, m)];
}

/* The median of three of t[0..3). */
static double median3(const float *t)
{
    const float lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    return t[2] < lo ? lo : t[2] > hi ? hi : t[2];
}

/* Times one launch of graph exec ge, three times, median in ms. */
static mt_status time_graph_exec(cu_ctx *c, cudaGraphExec_t ge, double *ms, mt_err *err)
{
    float t[3];
    CU(cudaGraphLaunch(ge, c->stream)); /* warm: graph memory, caches */
    for (int r = 0; r < 3; r++) {
        CU(cudaEventRecord(c->ev0, c->stream));
        CU(cudaGraphLaunch(ge, c->stream));
        CU(cudaEventRecord(c->ev1, c->stream));
        CU(cudaEventSynchronize(c->ev1));
        CU(cudaEventElapsedTime(&t[r], c->ev0, c->ev1));
    }
    *ms = median3(t);
    return MT_OK;
}

/* Path pth at m, TUNE_REPS times recorded into one CUDA graph, its launch
 * timed (time_graph_exec): per run, in ms. A forward replays such graphs,
 * so this leaves out the host's launch and cuBLASLt costs that an eager
 * timing would charge the paths of two launches (run 1 of 2026-11-28: the
 * eager tuner kept the fused kernel at MiniLM's m = 128, where gemm_bench,
 * which times graphs too, puts the dequantized path 1.7x ahead). The
 * caller has run the path once eagerly, so plans, workspaces and the
 * cuBLASLt workspace exist before the recording. */
static mt_status time_graph(cu_ctx *c, cu_weight *w, q8_path pth, int kernel, const void *x,
                            int m, const void *bias, void *y, double *ms_out, mt_err *err)
{
    enum { TUNE_REPS = 8 };
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    mt_status st = MT_OK;
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = 1;
    for (int r = 0; r < TUNE_REPS && st == MT_OK; r++)
        st = q8_run_path(c, w, pth, x, m, bias, MT_ACT_NONE, y, kernel, err);
    c->capturing = 0;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (st == MT_OK && e == cudaSuccess)
        e = cudaGraphInstantiate(&ge, g, 0);
    if (g)
        cudaGraphDestroy(g);
    if (st == MT_OK && e != cudaSuccess)
        st = cu_fail(err, e, "recording the tuner's CUDA graph", __FILE__, __LINE__);
    if (st == MT_OK)
        st = time_graph_exec(c, ge, ms_out, err);
    if (ge)
        cudaGraphExecDestroy(ge);
    if (st == MT_OK)
        *ms_out /= TUNE_REPS;
    return st;
}

/* Path pth at m timed after one untimed eager run, in ms: as a CUDA graph
 * (time_graph) where forwards are recorded (MANTISSA_CUDA_GRAPHS=1, not
 * debug-sync), else the median of 3 eager runs. NaN (kcu_pick_crossover:
 * "fused wins") when cuBLASLt refuses the plan. kernel: the W8A16 kernel of
 * P_FUSED (< 0: fused_kernel's choice). */
static mt_status time_path(cu_ctx *c, cu_weight *w, q8_path pth, int kernel, const void *x,
                           int m, const void *bias, void *y, double *ms_out, mt_err *err)
{
    float t[3];
    mt_status st = q8_run_path(c, w, pth, x, m, bias, MT_ACT_NONE, y, kernel, err);
    if (st == MT_EUNSUPPORTED && (pth == P_W8A8 || pth == P_W8A8_PRE)) {
        atomic_fetch_add_explicit(&c->be->n_w8a8_refused, 1, memory_order_relaxed);
        *ms_out = NAN;
        return MT_OK;
    }
    if (st != MT_OK)
        return st;
    if (c->be->opts.graphs == 1 && !c->be->opts.debug_sync && !c->capturing)
        return time_graph(c, w, pth, kernel, x, m, bias, y, ms_out, err);
    for (int r = 0; r < 3; r++) {
        CU(cudaEventRecord(c->ev0, c->stream));
        if ((st = q8_run_path(c, w, pth, x, m, bias, MT_ACT_NONE, y, kernel, err)) != MT_OK)
            return st;
        CU(cudaEventRecord(c->ev1, c->stream));
        CU(cudaEventSynchronize(c->ev1));
        CU(cudaEventElapsedTime(&t[r], c->ev0, c->ev1));
    }
    *ms_out = median3(t);
    return MT_OK;
}

/* The tuner's pseudo-random x (mmax, k) and bias (n), and room for y
 * (mmax, n): f16 rows when io (FP32 fills rounded once), else FP32. The
 * caller frees *x, *y and *bias, whatever this returns. */
static mt_status tune_rows(cu_ctx *c, bool io, int mmax, int n, int k, void **x, void **y,
                           void **bias, mt_err *err)
{
    const size_t es = io ? sizeof(uint16_t) : sizeof(float);
    mt_status st = MT_OK;
    float *xf = NULL, *bf = NULL;
    CU_GOTO(scratch(c, es * (size_t)mmax * k, x), out);
    CU_GOTO(scratch(c, es * (size_t)mmax * n, y), out);
    CU_GOTO(scratch(c, es * (size_t)n, bias), out);
    if (io) {
        CU_GOTO(scratch(c, sizeof(float) * (size_t)mmax * k, (void **)&xf), out);
        CU_GOTO(scratch(c, sizeof(float) * (size_t)n, (void **)&bf), out);
    }
    CU_GOTO(kcu_fill_f32(io ? xf : *x, (size_t)mmax * k, 12345u, -1.f, 1.f, c->stream), out);
    CU_GOTO(kcu_fill_f32(io ? bf : *bias, (size_t)n, 777u, -0.1f, 0.1f, c->stream), out);
    if (io) {
        CU_GOTO(kcu_f32_to_16(xf, k, mmax, k, *x, k, 0, c->stream), out);
        CU_GOTO(kcu_f32_to_16(bf, n, 1, n, *bias, n, 0, c->stream), out);
    }
out:
    scratch_free(c, xf); /* stream-ordered: after the conversions */
    scratch_free(c, bf);
    return st;
}

/* The direct W8A16 kernel against the staged one at m = 1, 4, 16: the
 * largest m of the unbroken run where the direct one was at least
 * DIRECT_MARGIN faster (the same bits either way), so that the crossover
 * after it times the fused kernel this weight will run. */
static mt_status tune_direct(cu_ctx *c, cu_weight *w, const void *x, const void *bias, void *y,
                             mt_err *err)
{
    static const int dms[] = {1, 4, 16};
    double ts[3], td[3];
    mt_status st;
    for (int i = 0; i < 3; i++)
        if ((st = time_path(c, w, P_FUSED, KCU_W8A16_STAGED, x, dms[i], bias, y, &ts[i], err)) ||
            (st = time_path(c, w, P_FUSED, KCU_W8A16_DIRECT, x, dms[i], bias, y, &td[i], err)))
            return st;
    w->q.direct_max_m = cup_pick_direct_max_m(dms, ts, td, 3, DIRECT_MARGIN);
    return MT_OK;
}

/* W8A8 at m on rows quantized beforehand (as a LayerNorm that feeds
 * the GEMM writes them, layernorm_feed): the GEMM alone, in ms; NaN when
 * cuBLASLt refuses the plan. */
static mt_status time_w8a8_pre(cu_ctx *c, cu_weight *w, const void *x, int m, const void *bias,
                               void *y, double *ms, mt_err *err)
{
    uint8_t *xq;
    float *xs;
    CU(w8a8_rows_alloc(c, w, m, &xq, &xs));
    c->preq.xq = xq, c->preq.xs = xs, c->preq.x = x, c->preq.w = w, c->preq.m = m;
    cudaError_t e = kcu_quant_rows_16(x, KCU_DT_F16, w->pub.k, m, w->pub.k, w->in_mul,
                                      codes_type(w->pub.prec), xq, w->ld, xs, c->stream);
    mt_status st = e == cudaSuccess
                       ? time_path(c, w, P_W8A8_PRE, -1, x, m, bias, y, ms, err)
                       : cu_fail(err, e, "quantizing the tuner's rows", __FILE__, __LINE__);
    preq_drop(c);
    return st;
}

/* The fused kernel against the cuBLASLt paths at tune_ms[0 .. cnt): the
 * dequantized FP16 GEMM, and W8A8 where the weight has it (w8a8), the
 * faster of the two kept per m in w->q.alt (cup_second_faster). Stops after
 * three m in a row where cuBLASLt won (assumed to keep winning: the larger
 * m take the last choice), and keeps the crossover (kcu_pick_crossover).
 * On f16 rows with MANTISSA_CUDA_LN_QUANT, W8A8 is also timed without its
 * quantization pass (time_w8a8_pre): q.pre says where that beats both. */
static mt_status tune_crossover(cu_ctx *c, cu_weight *w, int cnt, const void *x,
                                const void *bias, void *y, mt_err *err)
{
    double tf[TUNE_MS], ta[TUNE_MS];
    int done = 0, alt_wins = 0;
    const bool pre = w->w8a8 && c->act == KCU_DT_F16 && c->be->opts.ln_quant;
    mt_status st;
    for (; done < cnt; done++) {
        const int m = tune_ms[done];
        double tw = NAN, td, tp = NAN;
        if ((st = time_path(c, w, P_FUSED, -1, x, m, bias, y, &tf[done], err)) ||
            (st = time_path(c, w, P_DEQUANT, -1, x, m, bias, y, &td, err)) ||
            (w->w8a8 && (st = time_path(c, w, P_W8A8, -1, x, m, bias, y, &tw, err))) ||
            (pre && (st = time_w8a8_pre(c, w, x, m, bias, y, &tp, err))))
            return st;
        const int deq = !w->w8a8 || cup_second_faster(tw, td);
        w->q.alt[done] = deq ? P_DEQUANT : P_W8A8;
        ta[done] = deq ? td : tw;
        w->q.pre[done] = tp < ta[done] && tp < tf[done]; /* false when NaN */
        alt_wins = ta[done] < tf[done] ? alt_wins + 1 : 0;
        if (alt_wins == 3) {
            done++;
            break;
        }
    }
    for (int i = done; i < TUNE_MS; i++)
        w->q.alt[i] = w->q.alt[done - 1], w->q.pre[i] = w->q.pre[done - 1];
    w->q.crossover = kcu_pick_crossover(tune_ms, tf, ta, done);
    return MT_OK;
}

/* Times the paths of an 8-bit weight at load (tune_direct, tune_crossover)
 * on pseudo-random data, as far as 64 MiB of activations allow. The paths
 * are timed on the rows a forward gives them: f16 where cu_act_format puts
 * 8-bit models on f16 activations (and the widths allow), FP32 otherwise.
 * Shapes repeat across layers, so results are cached per (precision, n, k). */
mt_status tune_weight(cu_backend *b, cu_ctx *c, cu_weight *w, mt_err *err)
{
    const int prec = w->pub.prec, n = w->pub.n, k = w->pub.k;
    if (b->opts.crossover > 0) {
        w->q.crossover = b->opts.crossover;
        return MT_OK;
    }
    if (!b->opts.autotune) {
        w->q.crossover = DEFAULT_CROSSOVER;
        return MT_OK;
    }
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < b->ntune; i++)
        if (b->tune[i].prec == prec && b->tune[i].n == n && b->tune[i].k == k) {
            w->q = b->tune[i].q;
            pthread_mutex_unlock(&b->mu);
            return MT_OK;
        }
    pthread_mutex_unlock(&b->mu);

    const size_t cap = (size_t)64 << 20;
    int cnt = 0;
    while (cnt < TUNE_MS && (size_t)tune_ms[cnt] * k * 4 <= cap &&
           (size_t)tune_ms[cnt] * n * 4 <= cap)
        cnt++;
    if (cnt == 0) {
        w->q.crossover = DEFAULT_CROSSOVER;
        return MT_OK;
    }
    const bool io = cu_act_format(&b->pub, (mt_precision)prec) == MT_ACTF_F16 && n % 8 == 0 &&
                    k % 8 == 0;
    const int act_was = c->act;
    void *x = NULL, *y = NULL, *bias = NULL;
    mt_status st = tune_rows(c, io, tune_ms[cnt - 1], n, k, &x, &y, &bias, err);
    if (st != MT_OK)
        goto out;
    if (io)
        c->act = KCU_DT_F16; /* until out: the paths take f16 rows */
    if (b->opts.w8a16_kernel == KCU_W8A16_AUTO && (st = tune_direct(c, w, x, bias, y, err)))
        goto out;
    if ((st = tune_crossover(c, w, cnt, x, bias, y, err)) != MT_OK)
        goto out;
    pthread_mutex_lock(&b->mu);
    if (b->ntune < TUNE_SLOTS)
        b->tune[b->ntune++] = (tune_entry){prec, n, k, w->q};
    pthread_mutex_unlock(&b->mu);
out:
    c->act = act_was;
    scratch_free(c, x);
    scratch_free(c, y);
    scratch_free(c, bias);
    if (st == MT_OK)
        CU(cudaStreamSynchronize(c->stream));
    return st;
}

int mt_cuda_weight_crossover(const mt_weight *w)
{
    if (!w || mt_prec_gemm(w->prec, MT_BK_CUDA) != MT_GEMM_CODES8)
        return -1;
    return ((const cu_weight *)w)->q.crossover;
}

int mt_cuda_weight_path(const mt_weight *w, int m)
{
    if (!w || mt_prec_gemm(w->prec, MT_BK_CUDA) != MT_GEMM_CODES8)
        return -1;
    return (int)q8_tuned_path((const cu_weight *)w, m); /* q8_path is MT_CUDA_PATH_* */
}

