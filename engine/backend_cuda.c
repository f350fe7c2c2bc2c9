/* backend_cuda.c: the CUDA implementation of the backend table (backend.h).
 *
 * What goes where:
 *   - GEMMs: fp32 / tf32 / fp16 / bf16 weights go to cuBLASLt (bias in its
 *     epilogue, GELU after it in our erf form: cuBLASLt's GELU epilogue is
 *     the tanh approximation, which BERT does not use). int8 / fp8 weights go
 *     to the fused W8A16 kernel (kernels/cuda/gemm_w8a16.cu) at small m, and
 *     from a crossover m on to cuBLASLt: FP8 W8A8 with per-channel weight and
 *     per-token activation scales (outer-vector scaling) where the GPU and
 *     cuBLASLt can, else the weight dequantized to an FP16 scratch and an
 *     FP16 GEMM. The crossover is measured per (precision, n, k) when the
 *     weight is uploaded (kcu_pick_crossover over timed runs of both paths).
 *   - the rest of the encoder: kernels/cuda/ops.cu and attention.cu.
 *   - memory: a per-backend stream-ordered pool (cudaMallocFromPoolAsync) that
 *     keeps what it has, so the per-forward allocations of models/bert.c cost
 *     no cudaMalloc and no synchronisation.
 *   - threads: each calling thread gets a context (stream, cuBLASLt plans and
 *     workspace, split-K workspace) found through a pthread key; see
 *     backend_cuda.h for what that means for callers.
 *
 * Every CUDA and cuBLASLt call is checked; a failure becomes an mt_status
 * whose message names this file, the line, the call and the CUDA error.
 */
#include "engine/backend_cuda.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "kernels/cuda/kcu.h"

#if CUDART_VERSION >= 12090
#define HAVE_OUTER_VEC 1 /* CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F */
#else
#define HAVE_OUTER_VEC 0
#endif

enum {
    LT_WORKSPACE = 32 << 20, /* cuBLASLt workspace per context (Hopper wants 32 MiB) */
    PLAN_SLOTS = 256,        /* cached cuBLASLt plans per context (one per m seen) */
    TUNE_SLOTS = 128,        /* measured crossovers per backend */
    GRAPH_SLOTS = 16,        /* cached CUDA graphs per context */
    DEFERRED_FREES = 64,     /* ->free calls held while a graph is recorded */
    DEFAULT_CROSSOVER = 128, /* when autotuning is off (unmeasured guess) */
};

/* ========================================================================
 * errors
 * ====================================================================== */

/* A failed CUDA call as an mt_status: file:line, the call, the error. */
static mt_status cu_fail(mt_err *err, cudaError_t e, const char *what, const char *file, int line)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return mt_fail(err, e == cudaErrorMemoryAllocation ? MT_ENOMEM : MT_EINTERNAL,
                   "%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

/* The same for cuBLASLt statuses. */
static mt_status lt_fail(mt_err *err, cublasStatus_t s, const char *what, const char *file,
                         int line)
{
    return mt_fail(err, s == CUBLAS_STATUS_ALLOC_FAILED ? MT_ENOMEM : MT_EINTERNAL,
                   "%s:%d: %s: %s (%s)", file, line, what, cublasLtGetStatusString(s),
                   cublasLtGetStatusName(s));
}

#define CU(call)                                                                  \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess)                                                    \
            return cu_fail(err, e_, #call, __FILE__, __LINE__);                   \
    } while (0)

/* The same, for paths that must release resources: sets st and jumps. */
#define CU_GOTO(call, label)                                                      \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) {                                                  \
            st = cu_fail(err, e_, #call, __FILE__, __LINE__);                     \
            goto label;                                                           \
        }                                                                         \
    } while (0)

#define LT(call)                                                                  \
    do {                                                                          \
        cublasStatus_t s_ = (call);                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                          \
            return lt_fail(err, s_, #call, __FILE__, __LINE__);                   \
    } while (0)

/* ========================================================================
 * types
 * ====================================================================== */

typedef enum { LK_F32, LK_TF32, LK_F16, LK_BF16, LK_E4M3 } lt_kind;

static const char *const lt_kind_name[] = {"fp32", "tf32", "fp16", "bf16", "fp8 w8a8"};

/* One cuBLASLt problem: y^T (n, m) = op(A)^T-style "TN" GEMM, see lt_plan_get. */
typedef struct {
    int kind, n, k, m, lda, ldb, bias;
} lt_key;

typedef struct {
    lt_key key;
    int state; /* 0 empty, 1 ready, -1 no algorithm */
    unsigned used;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

typedef struct cu_backend cu_backend;

/* Per calling thread. */
typedef struct cu_ctx {
    cu_backend *be;
    cudaStream_t stream;
    cudaEvent_t ev0, ev1;
    void *lt_ws;       /* cuBLASLt workspace, LT_WORKSPACE bytes, made on first use */
    float *skw;        /* split-K partials */
    size_t skw_floats;
    int *counters;     /* split-K tile counters, zero between launches */
    int ncounters;
    lt_plan plans[PLAN_SLOTS];
    unsigned clock;
    mt_precision last_prec; /* of the last GEMM: picks the attention kernel */
    /* CUDA graphs (mt_cuda_graph_begin / _end) */
    struct {
        unsigned long long key;
        cudaGraphExec_t exec;
        unsigned used;
    } graphs[GRAPH_SLOTS];
    int capturing;               /* between begin and end, recording */
    unsigned long long cur_key;  /* the key being recorded */
    cudaGraphExec_t pending;     /* begin found a graph: end launches it */
    void *deferred[DEFERRED_FREES];
    int ndeferred;
    struct cu_ctx *next_all, *next_free;
} cu_ctx;

typedef struct {
    int prec, n, k, crossover;
} tune_entry;

struct cu_backend {
    mt_backend pub;
    char name[32];
    int dev, sms, cc;
    cudaMemPool_t pool;
    cublasLtHandle_t lt;
    pthread_key_t key;
    pthread_mutex_t mu; /* contexts and the tuning cache */
    cu_ctx *all, *free_list;
    mt_cuda_opts opts;
    int fp8_w8a8; /* sm_89+ and a cuBLASLt with outer-vector scales */
    tune_entry tune[TUNE_SLOTS];
    int ntune;
    atomic_long n_fused, n_lt_dequant, n_lt_w8a8, n_lt_16, n_lt_32;
};

/* A resident weight: the public part first, so an mt_weight * is a cu_weight *. */
typedef struct {
    mt_weight pub;
    int ld;        /* row stride in elements: rows start 16-byte aligned, padding is zero */
    int crossover; /* 8-bit: m from which cuBLASLt is used */
    int w8a8;      /* fp8: cuBLASLt W8A8 still believed possible for this weight */
} cu_weight;

typedef enum { P_FUSED, P_DEQUANT, P_W8A8 } q8_path;

static int round_up(int v, int to) { return (v + to - 1) / to * to; }

/* ========================================================================
 * devices
 * ====================================================================== */

/* backend_cuda.h: never fails loudly; no driver reads as no device. */
int mt_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

mt_status mt_cuda_describe(int dev, char *buf, size_t cap)
{
    int n = 0, drv = 0, rt = 0;
    char dummy[1];
    if (!buf || !cap)
        buf = dummy, cap = sizeof dummy;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, cap, "no CUDA device: %s", cudaGetErrorString(e));
        return MT_EUNSUPPORTED;
    }
    if (dev < 0 || dev >= n) {
        snprintf(buf, cap, "no CUDA device %d (this machine has %d)", dev, n);
        return MT_EINVAL;
    }
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, cap, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        return MT_EINTERNAL;
    }
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, cap, "%s (sm_%d%d, %d SMs, %.1f GiB, driver %d.%d, runtime %d.%d)", p.name,
             p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30),
             drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    return MT_OK;
}

/* ========================================================================
 * per-thread contexts
 * ====================================================================== */

/* Runs when a thread that used the backend exits: its context (and stream)
 * goes to the free list for the next new thread. */
static void ctx_release(void *p)
{
    cu_ctx *c = p;
    cu_backend *b = c->be;
    pthread_mutex_lock(&b->mu);
    c->next_free = b->free_list;
    b->free_list = c;
    pthread_mutex_unlock(&b->mu);
}

/* Releases a cached cuBLASLt plan's descriptors (also a half-made one). */
static void plan_clear(lt_plan *p)
{
    if (p->state != 0) {
        if (p->desc)
            cublasLtMatmulDescDestroy(p->desc);
        if (p->a)
            cublasLtMatrixLayoutDestroy(p->a);
        if (p->b)
            cublasLtMatrixLayoutDestroy(p->b);
        if (p->d)
            cublasLtMatrixLayoutDestroy(p->d);
    }
    memset(p, 0, sizeof *p);
}

/* Tears a context down once nothing runs on its stream any more (backend
 * destruction, or a failed creation). */
static void ctx_destroy(cu_ctx *c)
{
    for (int i = 0; i < PLAN_SLOTS; i++)
        plan_clear(&c->plans[i]);
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].exec)
            cudaGraphExecDestroy(c->graphs[i].exec);
    if (c->stream) {
        cudaStreamSynchronize(c->stream);
        if (c->skw)
            cudaFreeAsync(c->skw, c->stream);
        if (c->counters)
            cudaFreeAsync(c->counters, c->stream);
        if (c->lt_ws)
            cudaFreeAsync(c->lt_ws, c->stream);
        cudaStreamSynchronize(c->stream);
        cudaStreamDestroy(c->stream);
    }
    if (c->ev0)
        cudaEventDestroy(c->ev0);
    if (c->ev1)
        cudaEventDestroy(c->ev1);
    free(c);
}

/* A fresh context: a non-blocking stream (no implicit ordering with other
 * threads' work or the legacy default stream) and two timing events. */
static mt_status ctx_new(cu_backend *b, cu_ctx **out, mt_err *err)
{
    mt_status st = MT_OK;
    cu_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return mt_fail(err, MT_ENOMEM, "out of memory for a CUDA context");
    c->be = b;
    c->last_prec = MT_PREC_FP32;
    CU_GOTO(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), fail);
    CU_GOTO(cudaEventCreate(&c->ev0), fail);
    CU_GOTO(cudaEventCreate(&c->ev1), fail);
    *out = c; /* the cuBLASLt workspace comes with the first GEMM (lt_gemm) */
    return MT_OK;
fail:
    ctx_destroy(c);
    return st;
}

/* The calling thread's context, made on its first call; also makes the
 * backend's device current for this thread. */
static mt_status ctx_get(cu_backend *b, cu_ctx **out, mt_err *err)
{
    CU(cudaSetDevice(b->dev));
    cu_ctx *c = pthread_getspecific(b->key);
    if (c) {
        *out = c;
        return MT_OK;
    }
    pthread_mutex_lock(&b->mu);
    c = b->free_list;
    if (c)
        b->free_list = c->next_free;
    pthread_mutex_unlock(&b->mu);
    if (!c) {
        mt_status st = ctx_new(b, &c, err);
        if (st != MT_OK)
            return st;
        pthread_mutex_lock(&b->mu);
        c->next_all = b->all;
        b->all = c;
        pthread_mutex_unlock(&b->mu);
    }
    if (pthread_setspecific(b->key, c) != 0) {
        ctx_release(c);
        return mt_fail(err, MT_ENOMEM, "pthread_setspecific failed for a CUDA context");
    }
    *out = c;
    return MT_OK;
}

/* Stream-ordered scratch from the backend's pool: no synchronisation, and
 * the pool keeps the memory for the next request. While a CUDA graph is
 * recorded the allocation becomes a node of the graph (graph memory), which
 * is what cudaMallocAsync records; such scratch must be freed before end. */
static void *scratch(cu_ctx *c, size_t bytes)
{
    void *p = NULL;
    const cudaError_t e =
        c->capturing ? cudaMallocAsync(&p, bytes ? bytes : 16, c->stream)
                     : cudaMallocFromPoolAsync(&p, bytes ? bytes : 16, c->be->pool, c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

/* Returns scratch to the pool once the stream has passed this point. */
static void scratch_free(cu_ctx *c, void *p)
{
    if (p)
        cudaFreeAsync(p, c->stream);
}

/* ========================================================================
 * memory ops
 * ====================================================================== */

static void *cu_alloc(mt_backend *be, size_t bytes)
{
    cu_ctx *c;
    mt_err err;
    if (ctx_get((cu_backend *)be, &c, &err) != MT_OK || c->capturing)
        return NULL; /* recorded memory would only exist inside the graph */
    /* 256 bytes at least, so that every buffer is as aligned as cuBLASLt assumes */
    return scratch(c, bytes < 256 ? 256 : bytes);
}

static void cu_free(mt_backend *be, void *p)
{
    cu_ctx *c;
    mt_err err;
    if (!p || ctx_get((cu_backend *)be, &c, &err) != MT_OK)
        return;
    if (c->capturing && c->ndeferred < DEFERRED_FREES) {
        c->deferred[c->ndeferred++] = p; /* a recorded free would run on every replay */
        return;
    }
    scratch_free(c, p);
}

/* Synchronous: when it returns the bytes are on the device, so src may be
 * freed and any thread's stream may read dst (weights are uploaded on the
 * loading thread and read by the workers). The stream is idle at the start
 * of a forward, so the wait is one copy's latency. */
static mt_status cu_upload(mt_backend *be, void *dst, const void *src, size_t bytes, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK || bytes == 0)
        return st;
    if (c->capturing)
        return mt_fail(err, MT_EINVAL, "upload while a CUDA graph is being recorded");
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    return MT_OK;
}

/* The one wait of a forward: the result (and any error of the kernels
 * queued before it) reaches the host here. */
static mt_status cu_download(mt_backend *be, void *dst, const void *src, size_t bytes,
                             mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK || bytes == 0)
        return st;
    if (c->capturing)
        return mt_fail(err, MT_EINVAL, "download while a CUDA graph is being recorded");
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    return MT_OK;
}

/* ========================================================================
 * cuBLASLt
 *
 * Our y (m, n) row-major is y^T (n, m) column-major, and W (n, ld) row-major
 * is a column-major (k, n) matrix with leading dimension ld. So
 *   y^T = op(A) B   with A = W (TRANSA = T, k x n, lda = ld),
 *                        B = x (TRANSB = N, k x m, ldb),
 *                        D = y (n x m, ldd = n),
 * the "TN" layout that FP8 GEMMs require. The bias epilogue adds bias[row of
 * D] = bias[n]; outer-vector scales multiply row i of D by a_scale[i] (the
 * weight's channel) and column j by b_scale[j] (the token).
 * ====================================================================== */

static mt_status lt_plan_make(cu_ctx *c, lt_plan *p, const lt_key *key, const float *a_scale,
                              const float *b_scale, mt_err *err)
{
    static const cudaDataType_t types[] = {CUDA_R_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF,
                                           CUDA_R_8F_E4M3};
    const cudaDataType_t ab = types[key->kind];
    const cublasComputeType_t ct =
        key->kind == LK_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    p->key = *key;
    p->state = -1; /* until an algorithm is found */
    LT(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (key->bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    }
    if (key->kind == LK_E4M3) {
#if HAVE_OUTER_VEC
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                          sizeof mode));
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                          sizeof mode));
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                          sizeof a_scale));
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                          sizeof b_scale));
#else
        return MT_OK; /* stays "no algorithm" */
#endif
    }
    LT(cublasLtMatrixLayoutCreate(&p->a, ab, key->k, key->n, key->lda));
    LT(cublasLtMatrixLayoutCreate(&p->b, ab, key->k, key->m, key->ldb));
    LT(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, key->n, key->m, key->n));

    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = LT_WORKSPACE;
    const uint32_t align = 16; /* what every buffer here is guaranteed; the default assumes 256 */
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    static const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(c->be->lt, p->desc, p->a, p->b, p->d, p->d, pref, 1,
                                           &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    /* "not supported" is an answer (the caller falls back), not an error */
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && nres == 0))
        return MT_OK;
    if (s != CUBLAS_STATUS_SUCCESS)
        return lt_fail(err, s, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    p->algo = res.algo;
    p->state = 1;
    return MT_OK;
}

/* The context's cached plan for key (made on first use, least recently used
 * slot replaced); *out NULL when cuBLASLt has no algorithm for it. */
static mt_status lt_plan_get(cu_ctx *c, const lt_key *key, const float *a_scale,
                             const float *b_scale, lt_plan **out, mt_err *err)
{
    lt_plan *victim = &c->plans[0];
    for (int i = 0; i < PLAN_SLOTS; i++) {
        lt_plan *p = &c->plans[i];
        if (p->state != 0 && !memcmp(&p->key, key, sizeof *key)) {
            p->used = ++c->clock;
            *out = p->state == 1 ? p : NULL;
            return MT_OK;
        }
        if (p->state == 0 || (victim->state != 0 && p->used < victim->used))
            victim = p;
    }
    plan_clear(victim);
    mt_status st = lt_plan_make(c, victim, key, a_scale, b_scale, err);
    if (st != MT_OK) {
        plan_clear(victim);
        return st;
    }
    victim->used = ++c->clock;
    *out = victim->state == 1 ? victim : NULL;
    return MT_OK;
}

/* y (m, n) = x B-side (m, k, ldb) times W A-side (n, k, lda)^T [+ bias];
 * MT_EUNSUPPORTED when cuBLASLt has no algorithm (callers may fall back). */
static mt_status lt_gemm(cu_ctx *c, lt_kind kind, const void *w, int lda, const void *x, int ldb,
                         int m, int n, int k, const float *bias, const float *a_scale,
                         const float *b_scale, float *y, mt_err *err)
{
    const lt_key key = {kind, n, k, m, lda, ldb, bias != NULL};
    lt_plan *p;
    if (!c->lt_ws && !(c->lt_ws = scratch(c, LT_WORKSPACE)))
        return mt_fail(err, MT_ENOMEM, "out of GPU memory for the cuBLASLt workspace");
    mt_status st = lt_plan_get(c, &key, a_scale, b_scale, &p, err);
    if (st != MT_OK)
        return st;
    if (!p)
        return mt_fail(err, MT_EUNSUPPORTED, "cuBLASLt has no %s algorithm for m=%d n=%d k=%d",
                       lt_kind_name[kind], m, n, k);
    if (bias)
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof bias));
#if HAVE_OUTER_VEC
    if (kind == LK_E4M3) {
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                          sizeof a_scale));
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                          sizeof b_scale));
    }
#endif
    const float one = 1.0f, zero = 0.0f;
    LT(cublasLtMatmul(c->be->lt, p->desc, &one, w, p->a, x, p->b, &zero, y, p->d, y, p->d,
                      &p->algo, c->lt_ws, LT_WORKSPACE, c->stream));
    return MT_OK;
}

/* ========================================================================
 * GEMM paths
 * ====================================================================== */

/* Split-K workspace for the fused kernel, grown (stream-ordered) as needed.
 * On failure the kernel simply runs without split-K. */
static void ensure_splitk(cu_ctx *c, int m, int n, int k)
{
    kcu_w8a16_plan pl;
    /* not while recording: memory allocated then belongs to the graph */
    if (c->capturing || kcu_w8a16_make_plan(m, n, k, c->be->sms, NULL, &pl) != 0 ||
        pl.splits <= 1)
        return;
    if (pl.ws_floats > c->skw_floats) {
        scratch_free(c, c->skw);
        c->skw_floats = pl.ws_floats + pl.ws_floats / 2;
        if (!(c->skw = scratch(c, c->skw_floats * sizeof(float))))
            c->skw_floats = 0;
    }
    if (pl.counters > c->ncounters) {
        scratch_free(c, c->counters);
        c->ncounters = pl.counters * 2;
        if (!(c->counters = scratch(c, sizeof(int) * (size_t)c->ncounters)) ||
            cudaMemsetAsync(c->counters, 0, sizeof(int) * (size_t)c->ncounters, c->stream) !=
                cudaSuccess) {
            (void)cudaGetLastError();
            scratch_free(c, c->counters);
            c->counters = NULL;
            c->ncounters = 0;
        }
    }
}

/* The W8A16 kernel, with this thread's split-K workspace. */
static mt_status gemm_fused(cu_ctx *c, const cu_weight *w, const float *x, int m,
                            const float *bias, mt_act act, float *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    ensure_splitk(c, m, pw->n, pw->k);
    CU(kcu_w8a16_gemm(x, pw->k, pw->data, w->ld, pw->prec == MT_PREC_INT8 ? KCU_W_INT8 : KCU_W_E4M3,
                      pw->scales, bias, act == MT_ACT_GELU ? KCU_ACT_GELU : KCU_ACT_NONE, y, pw->n,
                      m, pw->n, pw->k, c->be->opts.w8a16_bf16 ? KCU_A_BF16 : KCU_A_F16, NULL,
                      c->skw, c->skw_floats, c->counters, c->ncounters, c->stream));
    atomic_fetch_add_explicit(&c->be->n_fused, 1, memory_order_relaxed);
    return MT_OK;
}

/* 8-bit weight -> FP16 scratch (scale folded in), activations -> FP16,
 * cuBLASLt FP16 with the bias epilogue, GELU after. */
static mt_status gemm_dequant(cu_ctx *c, const cu_weight *w, const float *x, int m,
                              const float *bias, mt_act act, float *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    const int n = pw->n, k = pw->k, ld = round_up(k, 8);
    mt_status st = MT_OK;
    void *wf = scratch(c, sizeof(uint16_t) * (size_t)n * ld);
    void *xh = scratch(c, sizeof(uint16_t) * (size_t)m * ld);
    if (!wf || !xh) {
        st = mt_fail(err, MT_ENOMEM, "out of GPU memory for a %dx%d FP16 weight scratch", n, k);
        goto done;
    }
    CU_GOTO(kcu_dequant_to_f16(pw->data, w->ld, pw->prec == MT_PREC_INT8 ? KCU_W_INT8 : KCU_W_E4M3,
                               pw->scales, n, k, wf, ld, c->stream),
            done);
    CU_GOTO(kcu_f32_to_16(x, k, m, k, xh, ld, 0, c->stream), done);
    if ((st = lt_gemm(c, LK_F16, wf, ld, xh, ld, m, n, k, bias, NULL, NULL, y, err)) != MT_OK)
        goto done;
    if (act == MT_ACT_GELU)
        CU_GOTO(kcu_bias_act(y, n, m, n, NULL, KCU_ACT_GELU, c->stream), done);
    atomic_fetch_add_explicit(&c->be->n_lt_dequant, 1, memory_order_relaxed);
done:
    scratch_free(c, wf);
    scratch_free(c, xh);
    return st;
}

/* FP8 W8A8: per-token E4M3 activations (fused absmax + quantize kernel),
 * cuBLASLt FP8 with outer-vector scales (weight channel x token), then bias
 * and GELU in FP32. MT_EUNSUPPORTED when cuBLASLt cannot. */
static mt_status gemm_w8a8(cu_ctx *c, const cu_weight *w, const float *x, int m,
                           const float *bias, mt_act act, float *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    const int n = pw->n, k = pw->k, kq = w->ld; /* padded K, zeros on both sides */
    mt_status st = MT_OK;
    const size_t qbytes = (size_t)m * kq, sbytes = sizeof(float) * (size_t)m;
    uint8_t *xq = scratch(c, (qbytes + 255) / 256 * 256 + sbytes);
    if (!xq)
        return mt_fail(err, MT_ENOMEM, "out of GPU memory for %d FP8 activation rows", m);
    float *xs = (float *)(xq + (qbytes + 255) / 256 * 256);
    CU_GOTO(kcu_quant_rows_e4m3(x, k, m, k, xq, kq, xs, c->stream), done);
    if ((st = lt_gemm(c, LK_E4M3, pw->data, w->ld, xq, kq, m, n, kq, NULL, pw->scales, xs, y,
                      err)) != MT_OK)
        goto done;
    CU_GOTO(kcu_bias_act(y, n, m, n, bias, act == MT_ACT_GELU ? KCU_ACT_GELU : KCU_ACT_NONE,
                         c->stream),
            done);
    atomic_fetch_add_explicit(&c->be->n_lt_w8a8, 1, memory_order_relaxed);
done:
    scratch_free(c, xq);
    return st;
}

/* The cuBLASLt path an 8-bit weight takes at large m. */
static q8_path alt_path(const cu_weight *w)
{
    return w->pub.prec == MT_PREC_FP8 && w->w8a8 ? P_W8A8 : P_DEQUANT;
}

/* Runs path pth; a W8A8 that cuBLASLt cannot do falls back to the dequant
 * path, and the weight remembers not to try again. */
static mt_status gemm_q8(cu_ctx *c, cu_weight *w, q8_path pth, const float *x, int m,
                         const float *bias, mt_act act, float *y, mt_err *err)
{
    if (pth == P_FUSED)
        return gemm_fused(c, w, x, m, bias, act, y, err);
    if (pth == P_W8A8) {
        mt_status st = gemm_w8a8(c, w, x, m, bias, act, y, err);
        if (st != MT_EUNSUPPORTED)
            return st;
        w->w8a8 = 0; /* benign race: every thread would write the same */
    }
    return gemm_dequant(c, w, x, m, bias, act, y, err);
}

/* y = act(x W^T + bias) by precision: see the top of this file. */
static mt_status cu_gemm(mt_backend *be, const float *x, int m, const mt_weight *pw,
                         const float *bias, mt_act act, float *y, mt_err *err)
{
    cu_backend *b = (cu_backend *)be;
    cu_weight *w = (cu_weight *)pw;
    cu_ctx *c;
    mt_status st = ctx_get(b, &c, err);
    if (st != MT_OK || m <= 0)
        return st;
    const int n = pw->n, k = pw->k;
    c->last_prec = pw->prec;
    switch (pw->prec) {
    case MT_PREC_FP32:
    case MT_PREC_TF32:
        st = lt_gemm(c, pw->prec == MT_PREC_TF32 ? LK_TF32 : LK_F32, pw->data, w->ld, x, k, m, n,
                     k, bias, NULL, NULL, y, err);
        if (st == MT_OK)
            atomic_fetch_add_explicit(&b->n_lt_32, 1, memory_order_relaxed);
        break;
    case MT_PREC_FP16:
    case MT_PREC_BF16: {
        const int bf = pw->prec == MT_PREC_BF16;
        void *xh = scratch(c, sizeof(uint16_t) * (size_t)m * w->ld);
        if (!xh)
            return mt_fail(err, MT_ENOMEM, "out of GPU memory for %d x %d activations", m, k);
        CU_GOTO(kcu_f32_to_16(x, k, m, k, xh, w->ld, bf, c->stream), h16_done);
        st = lt_gemm(c, bf ? LK_BF16 : LK_F16, pw->data, w->ld, xh, w->ld, m, n, k, bias, NULL,
                     NULL, y, err);
        if (st == MT_OK)
            atomic_fetch_add_explicit(&b->n_lt_16, 1, memory_order_relaxed);
    h16_done:
        scratch_free(c, xh);
        break;
    }
    case MT_PREC_INT8:
    case MT_PREC_FP8: {
        q8_path pth = b->opts.gemm == MT_CUDA_GEMM_FUSED     ? P_FUSED
                      : b->opts.gemm == MT_CUDA_GEMM_LIBRARY ? alt_path(w)
                      : m >= w->crossover                    ? alt_path(w)
                                                             : P_FUSED;
        return gemm_q8(c, w, pth, x, m, bias, act, y, err);
    }
    default:
        return mt_fail(err, MT_EINVAL, "unknown weight precision %d", (int)pw->prec);
    }
    if (st == MT_OK && act == MT_ACT_GELU)
        CU(kcu_bias_act(y, n, m, n, NULL, KCU_ACT_GELU, c->stream));
    return st;
}

/* ========================================================================
 * the measured crossover
 * ====================================================================== */

/* Median of 3 timed runs of path pth at m (after one untimed run), in ms. */
static mt_status time_path(cu_ctx *c, cu_weight *w, q8_path pth, const float *x, int m,
                           const float *bias, float *y, double *ms_out, mt_err *err)
{
    float t[3];
    mt_status st = gemm_q8(c, w, pth, x, m, bias, MT_ACT_NONE, y, err);
    for (int r = 0; r < 3 && st == MT_OK; r++) {
        CU(cudaEventRecord(c->ev0, c->stream));
        if ((st = gemm_q8(c, w, pth, x, m, bias, MT_ACT_NONE, y, err)) != MT_OK)
            break;
        CU(cudaEventRecord(c->ev1, c->stream));
        CU(cudaEventSynchronize(c->ev1));
        CU(cudaEventElapsedTime(&t[r], c->ev0, c->ev1));
    }
    if (st != MT_OK)
        return st;
    float lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    *ms_out = t[2] < lo ? lo : t[2] > hi ? hi : t[2];
    return MT_OK;
}

/* Times the fused kernel and the cuBLASLt path of this weight at m = 16,
 * 32, ... (as far as 64 MiB of activations allow), on pseudo-random data,
 * and keeps the crossover (kcu_pick_crossover). Shapes repeat across layers,
 * so results are cached per (precision, n, k). */
static mt_status tune_weight(cu_backend *b, cu_ctx *c, cu_weight *w, mt_err *err)
{
    static const int ms[] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    enum { NMS = sizeof ms / sizeof *ms };
    const int prec = w->pub.prec, n = w->pub.n, k = w->pub.k;
    if (b->opts.crossover > 0) {
        w->crossover = b->opts.crossover;
        return MT_OK;
    }
    if (!b->opts.autotune) {
        w->crossover = DEFAULT_CROSSOVER;
        return MT_OK;
    }
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < b->ntune; i++)
        if (b->tune[i].prec == prec && b->tune[i].n == n && b->tune[i].k == k) {
            w->crossover = b->tune[i].crossover;
            pthread_mutex_unlock(&b->mu);
            return MT_OK;
        }
    pthread_mutex_unlock(&b->mu);

    const size_t cap = (size_t)64 << 20;
    int cnt = 0;
    while (cnt < NMS && (size_t)ms[cnt] * k * 4 <= cap && (size_t)ms[cnt] * n * 4 <= cap)
        cnt++;
    if (cnt == 0) {
        w->crossover = DEFAULT_CROSSOVER;
        return MT_OK;
    }
    const int mmax = ms[cnt - 1];
    mt_status st = MT_OK;
    float *x = scratch(c, sizeof(float) * (size_t)mmax * k);
    float *y = scratch(c, sizeof(float) * (size_t)mmax * n);
    float *bias = scratch(c, sizeof(float) * (size_t)n);
    double tf[NMS], ta[NMS];
    int done = 0, alt_wins = 0;
    if (!x || !y || !bias) {
        st = mt_fail(err, MT_ENOMEM, "out of GPU memory tuning a %dx%d weight", n, k);
        goto out;
    }
    CU_GOTO(kcu_fill_f32(x, (size_t)mmax * k, 12345u, -1.f, 1.f, c->stream), out);
    CU_GOTO(kcu_fill_f32(bias, (size_t)n, 777u, -0.1f, 0.1f, c->stream), out);
    for (; done < cnt; done++) {
        if ((st = time_path(c, w, P_FUSED, x, ms[done], bias, y, &tf[done], err)) ||
            (st = time_path(c, w, alt_path(w), x, ms[done], bias, y, &ta[done], err)))
            goto out;
        alt_wins = ta[done] < tf[done] ? alt_wins + 1 : 0;
        if (alt_wins == 3) { /* assume it keeps winning at larger m */
            done++;
            break;
        }
    }
    w->crossover = kcu_pick_crossover(ms, tf, ta, done);
    pthread_mutex_lock(&b->mu);
    if (b->ntune < TUNE_SLOTS)
        b->tune[b->ntune++] = (tune_entry){prec, n, k, w->crossover};
    pthread_mutex_unlock(&b->mu);
out:
    scratch_free(c, x);
    scratch_free(c, y);
    scratch_free(c, bias);
    if (st == MT_OK)
        CU(cudaStreamSynchronize(c->stream));
    return st;
}

int mt_cuda_weight_crossover(const mt_weight *w)
{
    if (!w || (w->prec != MT_PREC_INT8 && w->prec != MT_PREC_FP8))
        return -1;
    return ((const cu_weight *)w)->crossover;
}

/* ========================================================================
 * weights
 * ====================================================================== */

/* Frees a weight made by cu_weight_upload (stream-ordered on this thread). */
static void cu_weight_destroy(mt_backend *be, mt_weight *pw)
{
    if (!pw)
        return;
    cu_free(be, pw->data);
    cu_free(be, pw->scales);
    free(pw);
}

/* Copies a weight in quant.h layout into device rows padded to 16 bytes
 * (zeros in the padding: the fused kernel and FP8 cuBLASLt read them), and
 * measures the 8-bit crossover. */
static mt_status cu_weight_upload(mt_backend *be, mt_precision prec, int n, int k,
                                  const void *data, const float *scales, mt_weight **out,
                                  mt_err *err)
{
    cu_backend *b = (cu_backend *)be;
    cu_ctx *c;
    mt_status st = ctx_get(b, &c, err);
    if (st != MT_OK)
        return st;
    if (c->capturing)
        return mt_fail(err, MT_EINVAL, "weight upload while a CUDA graph is being recorded");
    if (n < 1 || k < 1 || !data)
        return mt_fail(err, MT_EINVAL, "bad weight shape %dx%d", n, k);
    if ((unsigned)prec >= MT_PREC_COUNT)
        return mt_fail(err, MT_EINVAL, "unknown weight precision %d", (int)prec);
    const size_t es = mt_prec(prec)->bytes;
    const int has_scales = mt_prec(prec)->has_scales;
    if (has_scales && !scales)
        return mt_fail(err, MT_EINVAL, "%s weight %dx%d without scales", mt_precision_name(prec),
                       n, k);
    cu_weight *w = calloc(1, sizeof *w);
    if (!w)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    w->ld = round_up(k, (int)(16 / es));
    w->w8a8 = prec == MT_PREC_FP8 && b->fp8_w8a8;
    w->crossover = INT_MAX;
    const size_t bytes = es * (size_t)n * w->ld;
    w->pub.prec = prec;
    w->pub.n = n;
    w->pub.k = k;
    w->pub.bytes = bytes + (has_scales ? sizeof(float) * (size_t)n : 0);
    w->pub.data = scratch(c, bytes);
    if (has_scales)
        w->pub.scales = scratch(c, sizeof(float) * (size_t)n);
    if (!w->pub.data || (has_scales && !w->pub.scales)) {
        st = mt_fail(err, MT_ENOMEM, "out of GPU memory for a %dx%d %s weight", n, k,
                     mt_precision_name(prec));
        goto fail;
    }
    CU_GOTO(cudaMemsetAsync(w->pub.data, 0, bytes, c->stream), fail);
    CU_GOTO(cudaMemcpy2DAsync(w->pub.data, es * w->ld, data, es * k, es * k, n,
                              cudaMemcpyHostToDevice, c->stream),
            fail);
    if (has_scales)
        CU_GOTO(cudaMemcpyAsync(w->pub.scales, scales, sizeof(float) * (size_t)n,
                                cudaMemcpyHostToDevice, c->stream),
                fail);
    CU_GOTO(cudaStreamSynchronize(c->stream), fail); /* see cu_upload */
    if (has_scales && (st = tune_weight(b, c, w, err)) != MT_OK)
        goto fail;
    *out = &w->pub;
    return MT_OK;
fail:
    cu_weight_destroy(be, &w->pub);
    return st;
}

/* ========================================================================
 * the encoder ops
 * ====================================================================== */

/* The op table's entries below are thin: they find the thread's stream and
 * launch the kernel of kernels/cuda with it. */
static mt_status cu_embed(mt_backend *be, const int32_t *ids, const int32_t *offsets, int nseq,
                          const float *word, const float *pos, const float *type0, int h,
                          float *out, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    CU(kcu_embed(ids, offsets, nseq, word, pos, type0, h, out, c->stream));
    return MT_OK;
}

static mt_status cu_layernorm(mt_backend *be, const float *x, const float *res, const float *gamma,
                              const float *beta, int t, int h, float eps, float *out, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    CU(kcu_layernorm(x, res, gamma, beta, t, h, eps, out, c->stream));
    return MT_OK;
}

/* The fp32 variant gets the FP32 kernel (its vectors must match the CPU
 * FP32 path); every other variant the tensor-core one. The op has no
 * precision argument, so the precision of this thread's last GEMM (the QKV
 * projection just before) stands in for it. */
static mt_status cu_attention(mt_backend *be, const float *qkv, const int32_t *offsets, int nseq,
                              int heads, int head_dim, float *out, mt_err *err)
{
    cu_backend *b = (cu_backend *)be;
    cu_ctx *c;
    mt_status st = ctx_get(b, &c, err);
    if (st != MT_OK)
        return st;
    kcu_attn_mode mode = b->opts.attn == MT_CUDA_ATTN_FP32  ? KCU_ATTN_FP32
                         : b->opts.attn == MT_CUDA_ATTN_F16 ? KCU_ATTN_F16
                         : c->last_prec == MT_PREC_FP32     ? KCU_ATTN_FP32
                                                            : KCU_ATTN_F16;
    if (mode == KCU_ATTN_F16 && !kcu_attention_supported(KCU_ATTN_F16, head_dim))
        mode = KCU_ATTN_FP32;
    if (!kcu_attention_supported(mode, head_dim))
        return mt_fail(err, MT_EUNSUPPORTED, "attention head size %d is not supported on CUDA",
                       head_dim);
    CU(kcu_attention(qkv, offsets, nseq, heads, head_dim, b->opts.max_len_hint, b->sms, mode, out,
                     c->stream));
    return MT_OK;
}

static mt_status cu_mean_pool(mt_backend *be, const float *x, const int32_t *offsets, int nseq,
                              int h, bool normalize, float *out, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    CU(kcu_mean_pool(x, offsets, nseq, h, normalize, out, c->stream));
    return MT_OK;
}

/* ========================================================================
 * CUDA graphs
 * ====================================================================== */

/* backend_cuda.h explains the protocol: a cached graph is remembered for
 * end to launch; else this thread's stream starts recording. */
mt_status mt_cuda_graph_begin(mt_backend *be, unsigned long long key, bool *replay, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    if (c->capturing || c->pending)
        return mt_fail(err, MT_EINVAL, "mt_cuda_graph_begin inside another begin/end pair");
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].exec && c->graphs[i].key == key) {
            c->graphs[i].used = ++c->clock;
            c->pending = c->graphs[i].exec;
            *replay = true;
            return MT_OK;
        }
    /* everything a recorded op could allocate lazily must exist first */
    if (!c->lt_ws && !(c->lt_ws = scratch(c, LT_WORKSPACE)))
        return mt_fail(err, MT_ENOMEM, "out of GPU memory for the cuBLASLt workspace");
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = 1;
    c->cur_key = key;
    c->ndeferred = 0;
    *replay = false;
    return MT_OK;
}

/* Launches the remembered graph, or finishes the recording: instantiate,
 * cache (evicting the least recently used), launch; frees deferred during
 * the recording happen now. */
mt_status mt_cuda_graph_end(mt_backend *be, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    if (c->pending) {
        cudaGraphExec_t g = c->pending;
        c->pending = NULL;
        CU(cudaGraphLaunch(g, c->stream));
        return MT_OK;
    }
    if (!c->capturing)
        return MT_OK; /* end without begin: nothing to do */
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    c->capturing = 0;
    for (int i = 0; i < c->ndeferred; i++)
        scratch_free(c, c->deferred[i]);
    c->ndeferred = 0;
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (e != cudaSuccess)
        return cu_fail(err, e, "recording a CUDA graph (an op between begin and end waited on the GPU?)",
                       __FILE__, __LINE__);
    int slot = 0;
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        if (!c->graphs[i].exec) {
            slot = i;
            break;
        }
        if (c->graphs[i].used < c->graphs[slot].used)
            slot = i;
    }
    if (c->graphs[slot].exec)
        cudaGraphExecDestroy(c->graphs[slot].exec);
    c->graphs[slot].key = c->cur_key;
    c->graphs[slot].exec = exec;
    c->graphs[slot].used = ++c->clock;
    CU(cudaGraphLaunch(exec, c->stream));
    return MT_OK;
}

/* ========================================================================
 * the backend object
 * ====================================================================== */

/* Every precision: TF32 needs sm_80 and FP8 W8A16 converts in software on
 * sm_80, and the backend refuses older GPUs at creation. */
static bool cu_supports(const mt_backend *be, mt_precision p)
{
    return (unsigned)p < MT_PREC_COUNT; /* all six, on sm_80+ (checked at creation) */
}

/* Destroys the backend; no thread may still be using it. */
static void cu_destroy(mt_backend *be)
{
    cu_backend *b = (cu_backend *)be;
    if (!b)
        return;
    cudaSetDevice(b->dev);
    pthread_key_delete(b->key);
    for (cu_ctx *c = b->all, *next; c; c = next) {
        next = c->next_all;
        ctx_destroy(c);
    }
    if (b->lt)
        cublasLtDestroy(b->lt);
    if (b->pool)
        cudaMemPoolDestroy(b->pool);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* The table models/ call; optional slots of backend.h are all filled. */
static const mt_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cu_destroy,
    .supports = cu_supports,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .weight_upload = cu_weight_upload,
    .weight_destroy = cu_weight_destroy,
    .gemm = cu_gemm,
    .embed = cu_embed,
    .layernorm = cu_layernorm,
    .attention = cu_attention,
    .mean_pool = cu_mean_pool,
};

/* An integer environment knob, or dflt when unset or empty. */
static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* Defaults, then the MT_CUDA_* environment overrides (backend_cuda.h). */
void mt_cuda_opts_default(mt_cuda_opts *o)
{
    memset(o, 0, sizeof *o);
    o->autotune = 1;
    o->max_len_hint = 512;
    const char *g = getenv("MT_CUDA_GEMM"), *a = getenv("MT_CUDA_ATTN");
    if (g && !strcmp(g, "fused"))
        o->gemm = MT_CUDA_GEMM_FUSED;
    else if (g && !strcmp(g, "library"))
        o->gemm = MT_CUDA_GEMM_LIBRARY;
    if (a && !strcmp(a, "fp32"))
        o->attn = MT_CUDA_ATTN_FP32;
    else if (a && !strcmp(a, "f16"))
        o->attn = MT_CUDA_ATTN_F16;
    o->crossover = env_int("MT_CUDA_CROSSOVER", 0);
    o->autotune = env_int("MT_CUDA_AUTOTUNE", 1);
    o->w8a16_bf16 = env_int("MT_CUDA_W8A16_BF16", 0);
}

/* Checks the device (present, sm_80+, our kernels load), then makes the
 * memory pool and the cuBLASLt handle; contexts come per thread later. */
mt_status mt_backend_cuda_create_opts(int device, const mt_cuda_opts *o, mt_backend **out,
                                      mt_err *err)
{
    int n = 0;
    *out = NULL;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return mt_fail(err, MT_EUNSUPPORTED, "no CUDA device found (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    }
    if (device < 0 || device >= n)
        return mt_fail(err, MT_EINVAL, "CUDA device %d does not exist (this machine has %d)",
                       device, n);
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 8)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "CUDA device %d (%s) has compute capability %d.%d; Mantissa's kernels "
                       "need 8.0 or newer",
                       device, prop.name, prop.major, prop.minor);
    CU(cudaSetDevice(device));
    if ((e = kcu_check_image()) != cudaSuccess) {
        (void)cudaGetLastError();
        return mt_fail(err, MT_EUNSUPPORTED,
                       "this build has no kernels for CUDA device %d (%s, sm_%d%d): %s; rebuild "
                       "with its architecture in CUDA_GENCODE",
                       device, prop.name, prop.major, prop.minor, cudaGetErrorString(e));
    }

    cu_backend *b = calloc(1, sizeof *b);
    if (!b)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    if (o)
        b->opts = *o;
    else
        mt_cuda_opts_default(&b->opts);
    if (b->opts.max_len_hint <= 0)
        b->opts.max_len_hint = 512;
    b->dev = device;
    b->sms = prop.multiProcessorCount;
    b->cc = prop.major * 10 + prop.minor;
    b->fp8_w8a8 = HAVE_OUTER_VEC && b->cc >= 89;
    snprintf(b->name, sizeof b->name, "cuda:%d", device);
    b->pub.ops = &cuda_ops;
    b->pub.device = b->name;
    b->pub.threads = 1;
    b->pub.impl = b;
    pthread_mutex_init(&b->mu, NULL);
    if (pthread_key_create(&b->key, ctx_release) != 0) {
        pthread_mutex_destroy(&b->mu);
        free(b);
        return mt_fail(err, MT_ENOMEM, "pthread_key_create failed");
    }
    mt_status st = MT_OK;
    struct cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes = cudaMemHandleTypeNone;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = device;
    CU_GOTO(cudaMemPoolCreate(&b->pool, &pp), fail);
    uint64_t keep = UINT64_MAX; /* never hand memory back at a synchronisation */
    CU_GOTO(cudaMemPoolSetAttribute(b->pool, cudaMemPoolAttrReleaseThreshold, &keep), fail);
    cublasStatus_t ls = cublasLtCreate(&b->lt);
    if (ls != CUBLAS_STATUS_SUCCESS) {
        st = lt_fail(err, ls, "cublasLtCreate", __FILE__, __LINE__);
        goto fail;
    }
    *out = &b->pub;
    return MT_OK;
fail:
    cu_destroy(&b->pub);
    return st;
}

/* The entry point the server uses: default knobs plus the environment. */
mt_status mt_backend_cuda_create(int device, mt_backend **out, mt_err *err)
{
    return mt_backend_cuda_create_opts(device, NULL, out, err);
}

/* Relaxed reads: the counts are for tests and logs, not for decisions. */
void mt_cuda_get_counts(const mt_backend *be, mt_cuda_counts *out)
{
    const cu_backend *b = (const cu_backend *)be;
    out->fused = atomic_load(&b->n_fused);
    out->lt_dequant = atomic_load(&b->n_lt_dequant);
    out->lt_w8a8 = atomic_load(&b->n_lt_w8a8);
    out->lt_16 = atomic_load(&b->n_lt_16);
    out->lt_32 = atomic_load(&b->n_lt_32);
}
