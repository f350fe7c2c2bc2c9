/* engine/cuda/policy.h: the CUDA backend's decisions as pure functions, so that
 * they are unit-tested on machines without a GPU (tests/gpu host parts):
 * which cuBLASLt statuses mean "this FP8 plan is unsupported, use the fused
 * kernel", where FP8 W8A8 with outer-vector scales is enabled at all, the
 * split-K workspace bound, and the CUDA-graph bookkeeping (when a cached
 * graph may be replayed, when a recording may be kept). engine/cuda/gemm.c
 * and engine/cuda/graph.c act on these answers; nothing here touches a
 * device. */
#ifndef MT_ENGINE_CUDA_POLICY_H
#define MT_ENGINE_CUDA_POLICY_H

#include <stddef.h>

#include <cublasLt.h>

/* Whether status s, from cublasLtMatmulAlgoGetHeuristic, from setting the
 * outer-vector scale mode or from cublasLtMatmul itself, says that cuBLASLt
 * cannot run this FP8 plan (NOT_SUPPORTED, INVALID_VALUE, ARCH_MISMATCH):
 * the GEMM then runs in the fused W8A16 kernel. Any other failure is an
 * error. 0 for success. */
int cup_lt_refused(cublasStatus_t s);

/* The cuBLASLt version (cublasLtGetVersion(): major*10000 + minor*100 +
 * patch) from which FP8 matmuls take outer-vector (per-row/per-column)
 * scales. */
enum { CUP_LT_OUTER_VEC_VERSION = 120900 };

/* Whether the backend uses FP8 W8A8 (cuBLASLt, outer-vector scales) for
 * FP8 weights at large m: only on compute capability 9.0 (cc = 90: Hopper;
 * cuBLASLt has no such kernels on 8.9 or on Blackwell's 10.x/12.x), with a
 * cuBLASLt of at least 12.9 at run time (lt_version) and a build whose
 * headers had the scale mode (built_with_outer_vec). */
int cup_fp8_w8a8_enabled(int cc, size_t lt_version, int built_with_outer_vec);

/* Whether an FP8 weight of n rows can take the W8A8 path: cuBLASLt's FP8
 * kernels want the matrix dimensions other than m in multiples of 16 (K is
 * padded to 16 by the upload; the FP32 output's rows are n floats), as
 * PyTorch's scaled_mm checks them too. Odd n (33 and 100 in the backend
 * test) were never tried on a GPU with W8A8: such a weight runs in the
 * fused kernel or the dequantized FP16 path instead. */
int cup_w8a8_shape_ok(int n);

/* The largest m up to which the direct W8A16 kernel runs a weight's GEMMs
 * (kcu_w8a16_kernel AUTO), from median times t_staged[i] and t_direct[i]
 * at increasing ms[i] (all <= 16): the last measured m of the unbroken run,
 * from the first, where the direct kernel took at most (1 - margin) of the
 * staged one's time; 0 (never) when it did not at ms[0] or a time is not
 * finite. The two kernels give the same bits, so this is a choice of speed
 * alone (bench/results/gpu-2026-11-27.md: faster on 4096x4096, slower on the
 * 11008-wide shapes at m <= 4). */
int cup_pick_direct_max_m(const int *ms, const double *t_staged, const double *t_direct,
                          int count, double margin);

/* The faster of two timed cuBLASLt paths (the first: FP8 W8A8, the second:
 * the dequantized FP16 GEMM): 1 when the second is, i.e. when the first's
 * time is not a finite positive number (refused: NaN) or the second's is
 * smaller; ties go to the first. */
int cup_second_faster(double t_first, double t_second);

/* The index of the largest ms[i] <= m in increasing ms[0..count) (the tuned
 * m whose measured choice an m takes); 0 below ms[0]. */
int cup_m_bucket(const int *ms, int count, int m);

/* ---- the split-K workspace ------------------------------------------------
 * Every 8-bit weight upload raises the backend-wide need to
 * kcu_w8a16_ws_bound(n, k); each thread's workspace grows to the need once,
 * outside a recording, and its generation counts the (re)allocations. */
typedef struct {
    size_t have;     /* floats this thread's workspace holds */
    unsigned gen;    /* bumped on every reallocation (graphs remember it) */
} cup_ws;

/* Whether the thread's workspace must grow to need now: only when short and
 * not recording a graph (memory allocated then would belong to the graph). */
int cup_ws_should_grow(const cup_ws *w, size_t need, int capturing);

/* After a successful growth to need: records the size and a new generation. */
void cup_ws_grown(cup_ws *w, size_t need);

/* ---- CUDA graphs ------------------------------------------------------------ */
typedef enum {
    CUP_GRAPH_EAGER,   /* first begin for this key: run the ops eagerly (warms every
                        * kernel and cuBLASLt plan), record nothing */
    CUP_GRAPH_RECORD,  /* record the ops into a new graph */
    CUP_GRAPH_REPLAY,  /* the cached graph is valid: skip the ops, replay it */
    CUP_GRAPH_RERECORD /* the cached graph saw another workspace: drop it, record */
} cup_graph_action;

/* What begin does for a key: cached says whether a graph is cached for it
 * (recorded at workspace generation graph_gen), seen whether the key was
 * begun before on this thread, cur_gen the workspace's generation now, and
 * debug_sync whether MANTISSA_CUDA_DEBUG_SYNC asks for eager ops only. */
cup_graph_action cup_graph_decide(int cached, unsigned graph_gen, unsigned cur_gen, int seen,
                                  int debug_sync);

/* Whether a finished recording may be cached: not when a buffer was freed
 * while it was recorded (the free runs after its first launch, and a replay
 * would touch freed memory), nor when the workspace changed meanwhile. */
int cup_graph_keep(int nfreed, unsigned gen_at_begin, unsigned gen_at_end);

/* A growable list of pointers whose frees wait for the end of a recording. */
typedef struct {
    void **p;
    int n, cap;
} cup_ptr_list;

/* Appends p; -1 when out of memory (then the caller must not free p at all
 * until the graph has run: it synchronises instead). */
int cup_ptr_list_push(cup_ptr_list *l, void *p);
void cup_ptr_list_release(cup_ptr_list *l);

#endif
