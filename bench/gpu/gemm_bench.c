/* gemm_bench.c: the GEMM microbenchmark behind bench/results/gpu-*.md.
 *
 * For the model's shapes (all-MiniLM-L6-v2: n x k = 1152x384, 384x384,
 * 1536x384, 384x1536) and LLM-sized ones (4096x4096, 11008x4096,
 * 4096x11008), at m = 1 .. 4096, in one run on one GPU:
 *   fp16     cuBLASLt FP16 (A, B, D fp16, FP32 accumulation): the peer
 *   int8     our fused W8A16 kernel, int8 weights (x and y FP32)
 *   fp8      our fused W8A16 kernel, E4M3 weights
 *   int8lib  the backend's large-m int8 path: dequantize to FP16 + cuBLASLt
 *   w8a8     cuBLASLt FP8 E4M3 x E4M3 -> FP32 with outer-vector scales
 *            (per-channel weight, per-token activation), activations already
 *            quantized; w8a8+q adds our per-token quantization kernel
 *   int8d, fp8d  the fused kernel's direct variant (weights straight into
 *            registers, KCU_W8A16_DIRECT), m <= 16 only ("-" above)
 *   i8w8a8   our INT8 W8A8 tensor-core kernel (kcu_w8a8_i8_gemm_16: int8
 *            activations already quantized per token, f16 out); i8w8a8+q
 *            adds the int8 quantization of the f16 rows (kcu_quant_rows_16)
 *   fp16*, w8a8*  with --algos, at m >= 256: the best of the first 8
 *            algorithms cuBLASLt's heuristic offers for the fp16 and w8a8
 *            points (the other columns take its first): would timing them
 *            at load, as the backend times its crossover, pay?
 * plus a measured device-to-device copy bandwidth (bytes read + written), and
 * for the fused kernels the bandwidth they achieve on the bytes they must
 * move (weights once, x, y, scales).
 *
 * Method (METHOD.md): inputs are pseudo-random (never zeros); LLM-sized
 * weights rotate among enough copies to exceed 3x the L2 so each launch reads
 * DRAM, while the model's small weights stay L2-resident as they do in the
 * model; each point is a CUDA graph of back-to-back launches, replayed
 * several times, timed with events, median per launch.
 *
 * A point cuBLASLt refuses (FP8 outer-vector scales are refused for some
 * m and k, reported on H100) or that fails is a row saying so ("refused",
 * "failed"; null time and a note in JSON), and the run goes on. The JSON
 * file is rewritten whole (temporary file + rename) after every row, so it
 * stays valid when `timeout` cuts the run; "complete": true marks a full one.
 *
 *   gemm_bench [--json FILE] [--quick] [--shapes llm|model|all|NxK] [--ms 1,16,..]
 *              [--target-blocks N] [--algos]
 * prints a markdown table per shape; --json writes every number;
 * --shapes NxK benches that one shape (weights rotated through DRAM when
 * they are larger than 8 MiB), --ms the given m (at most 16 of them), for a
 * profiler run on one point; --target-blocks sets the fused kernel's
 * split-K planner target (default 2 x SMs), for tuning without a rebuild.
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/kcu.h"

#define DIE_IF(cond, ...)                                                                   \
    do {                                                                                    \
        if (cond) {                                                                         \
            fprintf(stderr, "gemm_bench: " __VA_ARGS__);                                    \
            fputc('\n', stderr);                                                            \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)
#define CK(call)                                                                            \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        DIE_IF(e_ != cudaSuccess, "%s:%d: %s: %s", __FILE__, __LINE__, #call,               \
               cudaGetErrorString(e_));                                                     \
    } while (0)
#define LK(call)                                                                            \
    do {                                                                                    \
        cublasStatus_t s_ = (call);                                                         \
        DIE_IF(s_ != CUBLAS_STATUS_SUCCESS, "%s:%d: %s: %s", __FILE__, __LINE__, #call,     \
               cublasLtGetStatusString(s_));                                                \
    } while (0)
/* In a point: a failed cuBLASLt call ends the point with its status. */
#define LQ(call)                                                                            \
    do {                                                                                    \
        cublasStatus_t s_ = (call);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return s_;                                                                      \
    } while (0)

enum {
    K_FP16, K_INT8, K_FP8, K_INT8LIB, K_W8A8, K_W8A8Q, K_INT8D, K_FP8D, K_FP16B, K_W8A8B,
    K_I8W8A8, K_I8W8A8Q, NKERN
};
static const char *const kname[NKERN] = {"fp16", "int8", "fp8", "int8lib", "w8a8", "w8a8+q",
                                         "int8d", "fp8d", "fp16*", "w8a8*", "i8w8a8", "i8w8a8+q"};
enum { MAX_ALGOS = 8, ALGOS_FROM_M = 256 };
static int try_algos; /* --algos */

static cudaStream_t stream;
static cublasLtHandle_t lt;
static void *lt_ws;
static const size_t LT_WS = 32 << 20;
static int sms, l2_bytes;
static kcu_w8a16_opts fused_opts, direct_opts;

/* ------------------------------------------------------------------------
 * cuBLASLt, "TN" as in engine/cuda/backend.c: y^T (n, m) = W (k x n)^T x (k x m)
 * ---------------------------------------------------------------------- */

typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t alts[MAX_ALGOS]; /* the heuristic's first algorithms, best first */
    int nalts;
    int ok;
    cublasStatus_t why; /* when !ok: the status that refused the plan */
} lt_op;

/* The descriptors and algorithm of one plan; a refusal is returned. */
static cublasStatus_t lt_build(lt_op *o, cudaDataType_t ab, cudaDataType_t dt, int n, int m,
                               int k, int lda, int ldb, const float *a_scale,
                               const float *b_scale)
{
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LQ(cublasLtMatmulDescCreate(&o->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LQ(cublasLtMatmulDescSetAttribute(o->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LQ(cublasLtMatmulDescSetAttribute(o->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (ab == CUDA_R_8F_E4M3) {
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LQ(cublasLtMatmulDescSetAttribute(o->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
        LQ(cublasLtMatmulDescSetAttribute(o->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
        LQ(cublasLtMatmulDescSetAttribute(o->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
        LQ(cublasLtMatmulDescSetAttribute(o->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
#else
        return CUBLAS_STATUS_NOT_SUPPORTED;
#endif
    }
    LQ(cublasLtMatrixLayoutCreate(&o->a, ab, k, n, lda));
    LQ(cublasLtMatrixLayoutCreate(&o->b, ab, k, m, ldb));
    LQ(cublasLtMatrixLayoutCreate(&o->d, dt, n, m, n));
    cublasLtMatmulPreference_t pref;
    LQ(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &LT_WS, sizeof LT_WS);
    cublasLtMatmulHeuristicResult_t r[MAX_ALGOS];
    int nr = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(lt, o->desc, o->a, o->b, o->d, o->d, pref,
                                           try_algos ? MAX_ALGOS : 1, r, &nr);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && nr == 0)
        s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (s == CUBLAS_STATUS_SUCCESS) {
        o->algo = r[0].algo;
        o->nalts = nr;
        for (int i = 0; i < nr; i++)
            o->alts[i] = r[i].algo;
    }
    return s;
}

static lt_op lt_make(cudaDataType_t ab, cudaDataType_t dt, int n, int m, int k, int lda, int ldb,
                     const float *a_scale, const float *b_scale)
{
    lt_op o;
    memset(&o, 0, sizeof o);
    o.why = lt_build(&o, ab, dt, n, m, k, lda, ldb, a_scale, b_scale);
    o.ok = o.why == CUBLAS_STATUS_SUCCESS;
    return o;
}

static void lt_free(lt_op *o)
{
    if (o->desc)
        cublasLtMatmulDescDestroy(o->desc);
    if (o->a)
        cublasLtMatrixLayoutDestroy(o->a);
    if (o->b)
        cublasLtMatrixLayoutDestroy(o->b);
    if (o->d)
        cublasLtMatrixLayoutDestroy(o->d);
}

/* Why the current point stopped ("" while it runs). */
static char point_note[160];

static int lt_run(lt_op *o, const void *w, const void *x, void *y)
{
    const float one = 1.f, zero = 0.f;
    const cublasStatus_t s = cublasLtMatmul(lt, o->desc, &one, w, o->a, x, o->b, &zero, y, o->d,
                                            y, o->d, &o->algo, lt_ws, LT_WS, stream);
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    snprintf(point_note, sizeof point_note, "%s: cublasLtMatmul: %s",
             s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE ||
                     s == CUBLAS_STATUS_ARCH_MISMATCH
                 ? "refused"
                 : "failed",
             cublasLtGetStatusName(s));
    return -1;
}

/* A kernel launch in a point: its error ends the point. */
static int kq(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    snprintf(point_note, sizeof point_note, "failed: %s: %s", what, cudaGetErrorName(e));
    (void)cudaGetLastError();
    return -1;
}

/* ------------------------------------------------------------------------
 * timing
 * ---------------------------------------------------------------------- */

typedef struct {
    int kind, n, k, m, ld16, ld8, copies;
    void **w16, **w8, **w8e; /* rotated weight copies */
    float *scale;
    float *x, *y;
    void *x16, *y16, *xq, *wdeq, *xq8; /* xq8: int8 activation codes */
    float *xs, *xs8;
    float *ws;
    int *counters;
    size_t ws_floats;
    int ncounters;
    lt_op op;
} point;

/* One GEMM of the point's kind; -1 (point_note says why) when it failed. */
static int launch(point *p, int i)
{
    const int c = i % p->copies;
    switch (p->kind) {
    case K_FP16:
    case K_FP16B:
        return lt_run(&p->op, p->w16[c], p->x16, p->y16);
    case K_INT8:
    case K_FP8:
    case K_INT8D:
    case K_FP8D: {
        const int i8 = p->kind == K_INT8 || p->kind == K_INT8D;
        const int d = p->kind == K_INT8D || p->kind == K_FP8D;
        return kq(kcu_w8a16_gemm(p->x, p->k, i8 ? p->w8[c] : p->w8e[c], p->ld8,
                                 i8 ? KCU_W_INT8 : KCU_W_E4M3, p->scale, NULL, KCU_ACT_NONE, p->y,
                                 p->n, p->m, p->n, p->k, KCU_A_F16, d ? &direct_opts : &fused_opts,
                                 p->ws, p->ws_floats, p->counters, p->ncounters, stream),
                  "kcu_w8a16_gemm");
    }
    case K_INT8LIB:
        if (kq(kcu_dequant_to_f16(p->w8[c], p->ld8, KCU_W_INT8, p->scale, p->n, p->k, p->wdeq,
                                  p->ld16, stream), "kcu_dequant_to_f16") ||
            kq(kcu_f32_to_16(p->x, p->k, p->m, p->k, p->x16, p->ld16, 0, stream), "kcu_f32_to_16"))
            return -1;
        return lt_run(&p->op, p->wdeq, p->x16, p->y);
    case K_W8A8:
    case K_W8A8B:
        return lt_run(&p->op, p->w8e[c], p->xq, p->y);
    case K_W8A8Q:
        if (kq(kcu_quant_rows_e4m3(p->x, p->k, p->m, p->k, p->xq, p->ld8, p->xs, stream),
               "kcu_quant_rows_e4m3"))
            return -1;
        return lt_run(&p->op, p->w8e[c], p->xq, p->y);
    case K_I8W8A8Q:
        if (kq(kcu_quant_rows_16(p->x16, KCU_DT_F16, p->ld16, p->m, p->k, NULL, KCU_W_INT8, p->xq8,
                                 p->ld8, p->xs8, stream), "kcu_quant_rows_16"))
            return -1;
        /* fall through */
    case K_I8W8A8:
        return kq(kcu_w8a8_i8_gemm_16(p->xq8, p->ld8, p->xs8, p->w8[c], p->ld8, p->scale, NULL,
                                      KCU_ACT_NONE, p->y16, p->n, p->m, p->n, p->ld8, KCU_DT_F16,
                                      sms, stream),
                  "kcu_w8a8_i8_gemm_16");
    }
    return -1;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Launches of the point into a graph of `per` of them; NULL when a launch
 * failed during the recording (the recording is then discarded). */
static cudaGraphExec_t record_point(point *p, int per)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    if (kq(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture"))
        return NULL;
    int bad = 0;
    for (int i = 0; i < per && !bad; i++)
        bad = launch(p, i);
    const cudaError_t e = cudaStreamEndCapture(stream, &g);
    if (!bad && !kq(e, "end capture"))
        bad = kq(cudaGraphInstantiate(&ge, g, 0), "graph instantiate");
    if (g)
        cudaGraphDestroy(g);
    return bad ? NULL : ge;
}

/* Median microseconds per launch (a graph of `per` launches, replayed), or
 * NaN with point_note saying why (refused by cuBLASLt, or failed). */
static double time_point(point *p, int quick)
{
    cudaEvent_t e0, e1;
    point_note[0] = 0;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double us = NAN;
    float est = 0, t[16];
    int bad = 0;
    for (int i = 0; i < 3 && !bad; i++) /* warm-up: module load, smem attributes, cuBLASLt init */
        bad = launch(p, i);
    bad = bad || kq(cudaEventRecord(e0, stream), "event");
    for (int i = 0; i < 3 && !bad; i++)
        bad = launch(p, i);
    bad = bad || kq(cudaEventRecord(e1, stream), "event") ||
          kq(cudaEventSynchronize(e1), "synchronize") || kq(cudaEventElapsedTime(&est, e0, e1), "timing");
    cudaGraphExec_t ge = NULL;
    if (!bad) {
        est /= 3; /* ms per launch, rough */
        int per = (int)(20.0 / (est > 1e-4 ? est : 1e-4)); /* ~20 ms per replay */
        per = per < 4 ? 4 : per > 2000 ? 2000 : per;
        const int reps = quick ? 3 : 7;
        bad = !(ge = record_point(p, per)) || kq(cudaGraphLaunch(ge, stream), "graph launch");
        for (int r = 0; r < reps && !bad; r++)
            bad = kq(cudaEventRecord(e0, stream), "event") || kq(cudaGraphLaunch(ge, stream), "graph launch") ||
                  kq(cudaEventRecord(e1, stream), "event") || kq(cudaEventSynchronize(e1), "synchronize") ||
                  kq(cudaEventElapsedTime(&t[r], e0, e1), "timing");
        if (!bad) {
            qsort(t, reps, sizeof *t, cmp_f);
            us = t[reps / 2] * 1000.0 / per;
        }
    }
    if (ge)
        cudaGraphExecDestroy(ge);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return us;
}

/* Device-to-device copy bandwidth, bytes read + written, GB/s. */
static double copy_bandwidth(void)
{
    const size_t bytes = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(kcu_fill_f32(a, bytes / 4, 1, -1, 1, stream));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[9];
    for (int r = -2; r < 9; r++) {
        CK(cudaEventRecord(e0, stream));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        if (r >= 0)
            CK(cudaEventElapsedTime(&t[r], e0, e1));
    }
    qsort(t, 9, sizeof *t, cmp_f);
    cudaFree(a);
    cudaFree(b);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 2.0 * bytes / (t[4] * 1e-3) / 1e9;
}

static int round_up(int v, int to) { return (v + to - 1) / to * to; }

/* ------------------------------------------------------------------------
 * gemm.json, rewritten whole after every row
 * ---------------------------------------------------------------------- */

static struct {
    const char *path;
    char head[512];
    char *rows; /* the points so far, comma-separated */
    size_t len;
} js;

/* A number, or null for NaN/Inf (JSON has neither). */
static void jnum(FILE *f, const char *key, double v, int prec)
{
    if (isfinite(v))
        fprintf(f, ", \"%s\": %.*f", key, prec, v);
    else
        fprintf(f, ", \"%s\": null", key);
}

/* Writes the header, the rows and "complete" to a temporary file, then
 * renames it over the target: a reader never sees half a file. */
static void json_flush(int complete)
{
    if (!js.path)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", js.path);
    FILE *f = fopen(tmp, "w");
    DIE_IF(!f, "cannot write %s", tmp);
    fprintf(f, "%s\"points\": [\n%s\n], \"complete\": %s}\n", js.head, js.rows ? js.rows : "",
            complete ? "true" : "false");
    DIE_IF(fclose(f) != 0 || rename(tmp, js.path) != 0, "cannot write %s", js.path);
}

/* Appends one point (a JSON object) and rewrites the file. */
static void json_row(const char *obj)
{
    const size_t add = strlen(obj) + 3;
    js.rows = realloc(js.rows, js.len + add + 1);
    DIE_IF(!js.rows, "out of memory");
    js.len += (size_t)sprintf(js.rows + js.len, "%s%s", js.len ? ",\n" : "", obj);
    json_flush(0);
}

/* A table cell: the time, or why there is none. */
static void cell_us(double us, const char *note)
{
    if (isfinite(us))
        printf(" %.2f |", us);
    else
        printf(" %s |", note && !strncmp(note, "refused", 7) ? "refused"
                        : note && !strncmp(note, "n/a", 3)   ? "-"
                                                             : "failed");
}

/* The fastest of the plan's alternative algorithms (--algos), in us. */
static double time_best_algo(point *p, int quick)
{
    double best = NAN;
    for (int i = 0; i < p->op.nalts; i++) {
        p->op.algo = p->op.alts[i];
        const double t = time_point(p, quick);
        best = isfinite(t) && !(t >= best) ? t : best;
    }
    if (!isfinite(best))
        snprintf(point_note, sizeof point_note, "failed: no algorithm ran");
    return best;
}

/* Times kind kd at the point's m: us, or NaN with point_note saying why
 * (refused, failed, or n/a where the kind does not apply). */
static double time_kind(point *p, int kd, int quick)
{
    const int n = p->n, m = p->m, k = p->k;
    const int best = kd == K_FP16B || kd == K_W8A8B;
    if ((kd == K_INT8D || kd == K_FP8D) && !kcu_w8a16_direct(m, &direct_opts)) {
        snprintf(point_note, sizeof point_note, "n/a: the direct kernel is for m <= 16");
        return NAN;
    }
    if (best && (!try_algos || m < ALGOS_FROM_M)) {
        snprintf(point_note, sizeof point_note, "n/a: --algos, m >= %d only", ALGOS_FROM_M);
        return NAN;
    }
    p->kind = kd;
    memset(&p->op, 0, sizeof p->op);
    if (kd == K_FP16 || kd == K_FP16B)
        p->op = lt_make(CUDA_R_16F, CUDA_R_16F, n, m, k, p->ld16, p->ld16, NULL, NULL);
    else if (kd == K_INT8LIB)
        p->op = lt_make(CUDA_R_16F, CUDA_R_32F, n, m, k, p->ld16, p->ld16, NULL, NULL);
    else if (kd == K_W8A8 || kd == K_W8A8Q || kd == K_W8A8B)
        p->op = lt_make(CUDA_R_8F_E4M3, CUDA_R_32F, n, m, p->ld8, p->ld8, p->ld8, p->scale, p->xs);
    else
        p->op.ok = 1; /* our own kernels */
    double us = NAN;
    if (!p->op.ok)
        snprintf(point_note, sizeof point_note, "refused: plan: %s", cublasLtGetStatusName(p->op.why));
    else
        us = best ? time_best_algo(p, quick) : time_point(p, quick);
    if (kd != K_INT8 && kd != K_FP8 && kd != K_INT8D && kd != K_FP8D && kd != K_I8W8A8 &&
        kd != K_I8W8A8Q)
        lt_free(&p->op);
    return us;
}

/* Times every kind at (m, n, k); one markdown row and one JSON point. */
static void bench_row(point *p, const char *what, int m, double copy_gbs, int quick)
{
    const int n = p->n, k = p->k;
    double us[NKERN];
    char notes[NKERN][160];
    p->m = m;
    kcu_w8a16_plan pl;
    kcu_w8a16_make_plan(m, n, k, sms, &fused_opts, &pl);
    p->ws_floats = pl.ws_floats;
    p->ncounters = pl.counters;
    p->ws = NULL;
    p->counters = NULL;
    if (pl.splits > 1) {
        CK(cudaMalloc((void **)&p->ws, sizeof(float) * pl.ws_floats));
        CK(cudaMalloc((void **)&p->counters, sizeof(int) * pl.counters));
        CK(cudaMemsetAsync(p->counters, 0, sizeof(int) * pl.counters, stream));
    }
    for (int kd = 0; kd < NKERN; kd++) {
        us[kd] = time_kind(p, kd, quick);
        snprintf(notes[kd], sizeof notes[kd], "%s", isfinite(us[kd]) ? "" : point_note);
    }
    cudaFree(p->ws);
    cudaFree(p->counters);
    /* bytes the fused kernels must move: weights once, x, y, scales */
    const double bytes = (double)n * k + 4.0 * m * k + 4.0 * m * n + 4.0 * n;
    const double gb8 = bytes / (us[K_INT8] * 1e-6) / 1e9, gbe = bytes / (us[K_FP8] * 1e-6) / 1e9;
    const double gb8d = bytes / (us[K_INT8D] * 1e-6) / 1e9, gbed = bytes / (us[K_FP8D] * 1e-6) / 1e9;
    printf("| %d |", m);
    for (int kd = 0; kd < NKERN; kd++)
        cell_us(us[kd], notes[kd]);
    printf(" %.2fx | %.2fx | %.0f (%.0f%%) | %.0f (%.0f%%) | %.2fx |", us[K_FP16] / us[K_INT8],
           us[K_FP16] / us[K_FP8], gb8, 100 * gb8 / copy_gbs, gbe, 100 * gbe / copy_gbs,
           us[K_FP16] / us[K_W8A8]);
    if (isfinite(us[K_INT8D]))
        printf(" %.2fx | %.0f (%.0f%%) |", us[K_FP16] / us[K_INT8D], gb8d, 100 * gb8d / copy_gbs);
    else
        printf(" - | - |");
    printf(" %.2fx | %.2fx |", us[K_FP16] / us[K_I8W8A8], us[K_FP16] / us[K_I8W8A8Q]);
    if (try_algos && isfinite(us[K_W8A8B]))
        printf(" %.2fx |", us[K_FP16B] / us[K_W8A8B]);
    else if (try_algos)
        printf(" - |");
    printf("\n");
    fflush(stdout);
    char *obj = NULL;
    size_t olen = 0;
    FILE *f = open_memstream(&obj, &olen);
    DIE_IF(!f, "out of memory");
    fprintf(f, "{\"shape\": \"%s\", \"n\": %d, \"k\": %d, \"m\": %d, \"splits\": %d", what, n, k, m,
            pl.splits);
    for (int kd = 0; kd < NKERN; kd++) {
        char key[32];
        snprintf(key, sizeof key, "%s_us", kname[kd]);
        jnum(f, key, us[kd], 3);
    }
    jnum(f, "int8_gbs", gb8, 1);
    jnum(f, "fp8_gbs", gbe, 1);
    jnum(f, "int8d_gbs", gb8d, 1);
    jnum(f, "fp8d_gbs", gbed, 1);
    fprintf(f, ", \"notes\": {");
    for (int kd = 0, c = 0; kd < NKERN; kd++)
        if (notes[kd][0])
            fprintf(f, "%s\"%s\": \"%s\"", c++ ? ", " : "", kname[kd], notes[kd]);
    fprintf(f, "}}");
    fclose(f);
    json_row(obj);
    free(obj);
}

/* One shape: weights (rotated through DRAM for the LLM ones), inputs, a
 * table of every m. */
static void bench_shape(int n, int k, int llm, const char *what, const int *ms, int nm,
                        double copy_gbs, int quick)
{
    const int ld16 = round_up(k, 8), ld8 = round_up(k, 16);
    const size_t wbytes16 = (size_t)n * ld16 * 2, wbytes8 = (size_t)n * ld8;
    /* rotate LLM weights through > 3x L2 so every launch reads DRAM */
    int copies = 1;
    if (llm) {
        copies = (int)((3.0 * l2_bytes) / wbytes8) + 1;
        copies = copies < 2 ? 2 : copies > 64 ? 64 : copies;
    }
    point p;
    memset(&p, 0, sizeof p);
    p.n = n, p.k = k, p.ld16 = ld16, p.ld8 = ld8, p.copies = copies;
    p.w16 = calloc(copies, sizeof(void *));
    p.w8 = calloc(copies, sizeof(void *));
    p.w8e = calloc(copies, sizeof(void *));
    float *tmp;
    CK(cudaMalloc((void **)&tmp, sizeof(float) * (size_t)n * ld16));
    for (int c = 0; c < copies; c++) {
        CK(cudaMalloc(&p.w16[c], wbytes16));
        CK(cudaMalloc(&p.w8[c], wbytes8));
        CK(cudaMalloc(&p.w8e[c], wbytes8));
        CK(kcu_fill_f32(tmp, (size_t)n * ld16, 100 + c, -0.05f, 0.05f, stream));
        CK(kcu_f32_to_16(tmp, ld16, n, ld16, p.w16[c], ld16, 0, stream));
        CK(kcu_fill_codes(p.w8[c], wbytes8, 200 + c, KCU_W_INT8, stream));
        CK(kcu_fill_codes(p.w8e[c], wbytes8, 300 + c, KCU_W_E4M3, stream));
    }
    cudaFree(tmp);
    const int mmax = ms[nm - 1];
    CK(cudaMalloc((void **)&p.scale, sizeof(float) * n));
    CK(kcu_fill_f32(p.scale, n, 7, 0.001f, 0.01f, stream));
    CK(cudaMalloc((void **)&p.x, sizeof(float) * (size_t)mmax * k));
    CK(kcu_fill_f32(p.x, (size_t)mmax * k, 9, -1.f, 1.f, stream));
    CK(cudaMalloc((void **)&p.y, sizeof(float) * (size_t)mmax * n));
    CK(cudaMalloc(&p.x16, 2 * (size_t)mmax * ld16));
    CK(cudaMalloc(&p.y16, 2 * (size_t)mmax * n));
    CK(cudaMalloc(&p.xq, (size_t)mmax * ld8));
    CK(cudaMalloc((void **)&p.xs, sizeof(float) * mmax));
    CK(cudaMalloc(&p.xq8, (size_t)mmax * ld8));
    CK(cudaMalloc((void **)&p.xs8, sizeof(float) * mmax));
    CK(cudaMalloc(&p.wdeq, wbytes16));
    CK(kcu_f32_to_16(p.x, k, mmax, k, p.x16, ld16, 0, stream));
    CK(kcu_quant_rows_e4m3(p.x, k, mmax, k, p.xq, ld8, p.xs, stream));
    CK(kcu_quant_rows_16(p.x16, KCU_DT_F16, ld16, mmax, k, NULL, KCU_W_INT8, p.xq8, ld8, p.xs8,
                         stream));

    printf("## %s (n=%d, k=%d)%s\n\n", what, n, k,
           llm ? ", weights rotated through DRAM" : ", weights L2-resident (as in the model)");
    printf("| m | fp16 us | int8 us | fp8 us | int8lib us | w8a8 us | w8a8+q us | int8d us | "
           "fp8d us | fp16* us | w8a8* us | i8w8a8 us | i8w8a8+q us | int8 x | fp8 x | "
           "int8 GB/s (%% copy) | fp8 GB/s (%% copy) | w8a8 x | int8d x | int8d GB/s (%% copy) | "
           "i8w8a8 x | i8w8a8+q x |%s\n", try_algos ? " w8a8* x fp16* |" : "");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n",
           try_algos ? "---|" : "");
    for (int mi = 0; mi < nm; mi++)
        bench_row(&p, what, ms[mi], copy_gbs, quick);
    printf("\n");
    for (int c = 0; c < copies; c++) {
        cudaFree(p.w16[c]);
        cudaFree(p.w8[c]);
        cudaFree(p.w8e[c]);
    }
    free(p.w16), free(p.w8), free(p.w8e);
    cudaFree(p.scale), cudaFree(p.x), cudaFree(p.y), cudaFree(p.x16), cudaFree(p.y16);
    cudaFree(p.xq), cudaFree(p.xs), cudaFree(p.wdeq), cudaFree(p.xq8), cudaFree(p.xs8);
}

/* The shapes asked for (--shapes, --ms), one table each. */
static void run_shapes(const char *which, const char *mlist, int quick, double copy_gbs)
{
    static const struct {
        int n, k, llm;
        const char *what;
    } shapes[] = {
        {1152, 384, 0, "MiniLM QKV"},        {384, 384, 0, "MiniLM attn out"},
        {1536, 384, 0, "MiniLM MLP up"},     {384, 1536, 0, "MiniLM MLP down"},
        {4096, 4096, 1, "LLM 4096x4096"},    {11008, 4096, 1, "LLM up 11008x4096"},
        {4096, 11008, 1, "LLM down 4096x11008"},
    };
    static const int ms_full[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
    static const int ms_quick[] = {1, 16, 64, 1024};
    const int *ms = quick ? ms_quick : ms_full;
    int nm = quick ? 4 : 11, ms_given[16];
    if (mlist) {
        nm = 0;
        for (const char *c = mlist; *c && nm < 16; c = strchr(c, ',') ? strchr(c, ',') + 1 : "")
            DIE_IF((ms_given[nm++] = atoi(c)) < 1, "--ms: \"%s\" is not a list of m >= 1", mlist);
        ms = ms_given;
    }
    int sn = 0, sk = 0;
    if (sscanf(which, "%dx%d", &sn, &sk) == 2) {
        DIE_IF(sn < 1 || sk < 1, "--shapes: bad shape \"%s\"", which);
        char what[64];
        snprintf(what, sizeof what, "%dx%d", sn, sk);
        bench_shape(sn, sk, (size_t)sn * sk > ((size_t)8 << 20), what, ms, nm, copy_gbs, quick);
        return;
    }
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        if ((!strcmp(which, "llm") && !shapes[si].llm) || (!strcmp(which, "model") && shapes[si].llm))
            continue;
        bench_shape(shapes[si].n, shapes[si].k, shapes[si].llm, shapes[si].what, ms, nm, copy_gbs,
                    quick);
    }
}

int main(int argc, char **argv)
{
    const char *json = NULL, *which = "all", *mlist = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc)
            which = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc)
            mlist = argv[++i];
        else if (!strcmp(argv[i], "--target-blocks") && i + 1 < argc)
            fused_opts.target_blocks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--algos"))
            try_algos = 1;
    }
    direct_opts = fused_opts;
    direct_opts.kernel = KCU_W8A16_DIRECT;
    fused_opts.kernel = KCU_W8A16_STAGED;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("gemm_bench: SKIP: no CUDA device\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    sms = prop.multiProcessorCount;
    l2_bytes = prop.l2CacheSize;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    LK(cublasLtCreate(&lt));
    CK(cudaMalloc(&lt_ws, LT_WS));
    const double copy_gbs = copy_bandwidth();
    js.path = json;
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("# GEMM microbenchmark\n\n- device: %s (sm_%d%d, %d SMs, L2 %d MiB)\n- date: %s\n"
           "- measured device-to-device copy: %.0f GB/s (bytes read + written)\n"
           "- times: median microseconds per GEMM; speedups vs cuBLASLt FP16 in the same run\n\n",
           prop.name, prop.major, prop.minor, sms, l2_bytes >> 20, date, copy_gbs);
    snprintf(js.head, sizeof js.head,
             "{\"device\": \"%s\", \"sm\": \"%d%d\", \"date\": \"%s\", \"copy_gbs\": %.1f, ",
             prop.name, prop.major, prop.minor, date, copy_gbs);
    json_flush(0);

    run_shapes(which, mlist, quick, copy_gbs);
    json_flush(1);
    CK(cudaDeviceSynchronize());
    return 0;
}
