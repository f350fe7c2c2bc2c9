/* engine/cuda/internal.h: what the CUDA backend's two files share: engine/cuda/backend.c
 * (devices, per-thread contexts, memory, weights, the encoder ops, CUDA
 * graphs, the table) and engine/cuda/gemm.c (cuBLASLt plans, the GEMM paths, the
 * measured W8A16 / cuBLASLt crossover): error checking, types, and the few
 * functions one calls in the other. */
#ifndef MT_ENGINE_CUDA_INTERNAL_H
#define MT_ENGINE_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>

#include "engine/cuda/backend.h"
#include "engine/cuda/policy.h"
#include "engine/precision.h"
#include "kernels/cuda/kcu.h"

/* CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: a property of the cuBLAS
 * headers (CUBLAS_VERSION), not of the CUDA runtime's version; the library
 * found at run time is checked too (cup_fp8_w8a8_enabled). */
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
#define HAVE_OUTER_VEC 1
#else
#define HAVE_OUTER_VEC 0
#endif

enum {
    LT_WORKSPACE = 32 << 20, /* cuBLASLt workspace per context (Hopper wants 32 MiB) */
    PLAN_SLOTS = 256,        /* cached cuBLASLt plans per context (one per m seen) */
    TUNE_SLOTS = 128,        /* measured crossovers per backend */
    GRAPH_SLOTS = 64,        /* cached CUDA graphs (and keys seen) per context: a model's
                              * forward has up to 8 batch sizes x 8 token buckets */
    DEFAULT_CROSSOVER = 128, /* when autotuning is off (unmeasured guess) */
    TUNE_MS = 9,             /* the m the tuner times the paths at (tune_ms in tune.c) */
};
/* The direct W8A16 kernel runs a weight's small-m GEMMs where it measured at
 * least this much faster than the staged one (tune_weight) */
#define DIRECT_MARGIN 0.03

/* ========================================================================
 * errors
 * ====================================================================== */

/* A failed CUDA call as an mt_status: file:line, the call, the error. */
static inline mt_status cu_fail(mt_err *err, cudaError_t e, const char *what, const char *file, int line)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return mt_fail(err, e == cudaErrorMemoryAllocation ? MT_ENOMEM : MT_EINTERNAL,
                   "%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

/* The same for cuBLASLt statuses. */
static inline mt_status lt_fail(mt_err *err, cublasStatus_t s, const char *what, const char *file,
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


/* One cuBLASLt problem: y^T (n, m) = op(A)^T-style "TN" GEMM, see lt_plan_get. */
typedef struct {
    int kind, n, k, m, lda, ldb;
    int epi; /* epilogue: LT_EPI_BIAS and/or LT_EPI_GELU bits */
    int dt;  /* D's (and the bias's) type, kcu_dtype */
} lt_key;
enum { LT_EPI_BIAS = 1, LT_EPI_GELU = 2 };

typedef struct {
    lt_key key;
    int state; /* 0 empty, 1 ready, -1 no algorithm, -2 FP8 plan refused (cup_lt_refused) */
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
    float *skw;        /* split-K partials: the backend's ws_need floats once grown */
    size_t skw_floats;
    int *counters;     /* split-K tile counters, zero between launches */
    int ncounters;
    cup_ws ws;         /* its size and generation (engine/cuda/policy.h) */
    lt_plan plans[PLAN_SLOTS];
    unsigned clock;
    mt_precision last_prec; /* of the last GEMM: picks the attention kernel */
    int act;                /* kcu_dtype of the activations the ops take (set_act_format) */
    /* CUDA graphs (engine/cuda/graph.c): a slot per key seen, with its graph once recorded */
    struct {
        unsigned long long key;
        cudaGraphExec_t exec; /* NULL: seen (ran eagerly) but not recorded */
        unsigned gen;         /* the workspace generation it was recorded with */
        unsigned used;
        int seen;
    } graphs[GRAPH_SLOTS];
    int capturing;               /* between begin and end, recording */
    int eager;                   /* between begin and end, ops running eagerly */
    unsigned long long cur_key;  /* the key being recorded */
    unsigned gen_at_begin;
    cudaGraphExec_t pending;     /* begin found a graph: end launches it */
    cup_ptr_list deferred;       /* ->free calls held while recording */
    void *arena;                 /* the forward arena of the graph_begin slot (grow-only) */
    size_t arena_bytes;
    unsigned arena_gen;          /* bumped when it moves: graphs using it are re-recorded */
    /* 8-bit rows a LayerNorm wrote for the GEMM after it (backend.h's
     * layernorm_feed): taken by the next gemm when its x, weight and m are
     * these, dropped by any other op (preq_drop). One scratch: xq (m,
     * w->ld) codes, then xs (m) row scales. */
    struct {
        const void *x;
        const struct cu_weight *w;
        int m;
        uint8_t *xq;
        float *xs;
    } preq;
    struct cu_ctx *next_all, *next_free;
} cu_ctx;

/* What the load's tuner (engine/cuda/tune.c) decided for an 8-bit weight. */
typedef struct {
    int crossover;    /* m from which cuBLASLt is used */
    int direct_max_m; /* m up to which the direct W8A16 kernel runs (AUTO; 0: never) */
    unsigned char alt[TUNE_MS]; /* from the crossover on: the cuBLASLt path (q8_path)
                                 * measured faster at each tuned m */
    unsigned char pre[TUNE_MS]; /* W8A8: 1 where W8A8 on rows a LayerNorm quantized
                                 * (no quantization pass) beat the fused and alt paths */
} q8_tuning;

typedef struct {
    int prec, n, k;
    q8_tuning q;
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
    size_t ws_need;  /* split-K floats: the largest kcu_w8a16_ws_bound of any 8-bit weight */
    int cnt_need;    /* and tile counters (both under mu) */
    int fp8_w8a8; /* cup_fp8_w8a8_enabled: sm_90 and cuBLASLt >= 12.9 with outer-vector scales */
    tune_entry tune[TUNE_SLOTS];
    int ntune;
    atomic_long n_fused, n_fused_direct, n_lt_gelu_epi, n_lt_dequant, n_lt_w8a8, n_lt_16, n_lt_32;
    atomic_long n_lt_16_io, n_bias_pass;
    atomic_long n_q8_io;        /* 8-bit weights' GEMMs on 16-bit activations (gemm_q8) */
    atomic_long n_w8a8_refused; /* W8A8 GEMMs cuBLASLt refused, run fused instead */
    atomic_long n_w8a8_ln;      /* W8A8 GEMMs on rows their LayerNorm quantized */
    atomic_long n_w8a8_i8;      /* INT8 W8A8 GEMMs (kcu_w8a8_i8_gemm_16) */
    atomic_long n_ws_grows;     /* split-K workspace reallocations (ws_ensure) */
    atomic_long n_ops;          /* op calls that launched at once (not recorded) */
    atomic_long n_graph_records, n_graph_replays, graph_nodes, graph_kernels;
};

/* A resident weight: the public part first, so an mt_weight * is a cu_weight *. */
typedef struct cu_weight {
    mt_weight pub;
    int ld;        /* row stride in elements: rows start 16-byte aligned, padding is zero */
    q8_tuning q;   /* 8-bit: the paths the load chose per m */
    int w8a8;      /* fp8: cuBLASLt W8A8 possible for this weight (sm_90, shape); int8:
                    * our INT8 W8A8 kernel (MANTISSA_CUDA_INT8_W8A8, f16 forwards) */
    float *in_mul; /* activation smoothing: 1/s per input channel, padded to whole 64-wide
                    * chunks with ones (kcu_w8a16_gemm_mul), or NULL */
} cu_weight;

/* The 8-bit GEMM paths; the values are backend.h's MT_CUDA_PATH_*. */
typedef enum {
    P_FUSED = MT_CUDA_PATH_FUSED,
    P_DEQUANT = MT_CUDA_PATH_DEQUANT,
    P_W8A8 = MT_CUDA_PATH_W8A8,
    P_W8A8_PRE = 3 /* W8A8 on the rows in c->preq (a LayerNorm's, or the tuner's), no
                    * quantization; never a tuned choice, so not in MT_CUDA_PATH_* */
} q8_path;

static inline int round_up(int v, int to) { return (v + to - 1) / to * to; }

/* The kernels' name for an 8-bit precision's codes. */
static inline kcu_wtype codes_type(mt_precision p)
{
    return mt_prec(p)->format == NF_E4M3 ? KCU_W_E4M3 : KCU_W_INT8;
}

/* ---- engine/cuda/backend.c ---- */
/* The calling thread's context on b (made on first use, device current). */
mt_status ctx_get(cu_backend *b, cu_ctx **out, mt_err *err);
/* Stream-ordered scratch from the backend's pool: the CUDA error, whose
 * cause cu_fail keeps (ENOMEM only for cudaErrorMemoryAllocation). */
cudaError_t scratch(cu_ctx *c, size_t bytes, void **out);
void scratch_free(cu_ctx *c, void *p);
/* Raises the backend's split-K workspace need to an (n, k) weight's bound. */
void ws_raise(cu_backend *b, int n, int k);
/* Grows this thread's split-K workspace to the backend's need, unless a
 * graph is being recorded; a new generation invalidates cached graphs. */
mt_status ws_ensure(cu_ctx *c, mt_err *err);

/* ---- engine/cuda/graph.c ---- */
/* Holds a ->free made while recording until the graph has launched. */
void graph_defer_free(cu_ctx *c, void *p);
/* Destroys the context's cached graphs, its deferred list and its forward
 * arena (the stream must be idle). */
void graph_ctx_release(cu_ctx *c);
/* The table's graph_begin / graph_end (backend.h). */
mt_status cu_graph_begin_op(mt_backend *be, unsigned long long key, size_t bytes, const void *in,
                            size_t in_bytes, void **arena, bool *replay, mt_err *err);
mt_status cu_graph_end_op(mt_backend *be, bool failed, mt_err *err);

/* ---- engine/cuda/gemm.c ---- */
/* The backend table's gemm. */
mt_status cu_gemm(mt_backend *be, const float *x, int m, const mt_weight *pw, const float *bias,
                  mt_act act, float *y, mt_err *err);
/* Runs 8-bit path pth as asked (kernel: the W8A16 kernel of P_FUSED, < 0
 * the launcher's choice): MT_EUNSUPPORTED when cuBLASLt refuses W8A8.
 * x, bias and y in the context's row type. */
mt_status q8_run_path(cu_ctx *c, cu_weight *w, q8_path pth, const void *x, int m,
                      const void *bias, mt_act act, void *y, int kernel, mt_err *err);

/* Scratch for m 8-bit rows of w's W8A8 (w->ld codes each) and their m scales. */
cudaError_t w8a8_rows_alloc(cu_ctx *c, const cu_weight *w, int m, uint8_t **xq, float **xs);
/* Whether LayerNorm should write the 8-bit rows of w's GEMM at m (W8A8, FP8
 * or INT8, on f16 rows, MANTISSA_CUDA_LN_QUANT, and W8A8 the path taken on
 * such rows: always with MANTISSA_CUDA_GEMM=library, where the load
 * measured it fastest with auto). */
bool q8_feed_wanted(const cu_ctx *c, const cu_weight *w, int m);
/* Frees c->preq's rows, if any (every op but the GEMM that takes them). */
void preq_drop(cu_ctx *c);

/* ---- engine/cuda/tune.c ---- */
/* Times an 8-bit weight's paths (cached per precision and shape): its
 * crossover, the faster cuBLASLt path per m, the direct kernel's reach. */
mt_status tune_weight(cu_backend *b, cu_ctx *c, cu_weight *w, mt_err *err);
/* The path the load chose for an 8-bit weight at m: the fused kernel below
 * the measured crossover, from it on the cuBLASLt path measured faster at
 * the tuned m nearest below (alt_path's where nothing was measured). */
q8_path q8_tuned_path(const cu_weight *w, int m);
/* Whether the load measured W8A8 on already quantized rows fastest at
 * m (q8_tuning.pre at the tuned m nearest below; never below the first). */
bool q8_tuned_pre(const cu_weight *w, int m);
/* backend.h's act_format (backend.c): the rows a forward of precision p takes */
mt_act_format cu_act_format(const mt_backend *be, mt_precision p);
/* Frees a cached cuBLASLt plan. */
void plan_clear(lt_plan *p);

#endif
