/* engine/cuda/backend.h: the CUDA backend (engine/cuda/backend.c) and the device
 * queries the server needs to choose between it and the CPU.
 *
 * Builds without CUDA (make CUDA=0, or no nvcc) link engine/cuda/none.c
 * instead: no devices, and creating the backend fails with MT_EUNSUPPORTED.
 * A CUDA build's mantissa binary links engine/cuda/dl.c, which opens
 * the backend as a module (libmantissa_cuda.so) where a CUDA driver is and
 * forwards these functions to it; tests/gpu and bench/gpu link it directly.
 * No CUDA type appears here; callers need no CUDA headers.
 *
 * Threads and streams: a backend may be used from many threads at once. Each
 * OS thread that calls into it gets its own CUDA stream and workspaces (made
 * on its first call, reused by a later thread once it exits), so one worker
 * thread is one stream. Within a forward nothing waits for the GPU except
 * ->upload (which returns once the bytes are on the device, so the source may
 * be freed and every thread may use the data) and ->download (which returns
 * when the result is on the host).
 *
 * The entry points are one list, engine/cuda/entry_points.h (their
 * signatures): this header documents them, each by name where its comment
 * is, and declares them from the list at its end.
 *
 * Note: mt_cuda_device_count() initialises the CUDA driver. Call it (and
 * everything else here) only after any fork().
 */
#ifndef MT_BACKEND_CUDA_H
#define MT_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/backend.h"
#include "engine/cuda/entry_points.h"
#include "engine/status.h"

/* CUDA devices this process can use; 0 when there is no device, no driver,
 * or the build has no CUDA. Never fails loudly. */
/* entry point: mt_cuda_device_count() */

/* One line about device dev, e.g. "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs,
 * 79.1 GiB, driver 13.0, runtime 13.0)". On failure buf gets the reason and
 * the status says what kind of failure it was. */
/* entry point: mt_cuda_describe() */

/* The CUDA backend on device `device` (0-based), or MT_EUNSUPPORTED /
 * MT_EINVAL with a message saying why not (no device, no such device,
 * compute capability below 8.0, no kernel image for it, build without CUDA). */
/* entry point: mt_backend_cuda_create() */

/* ---- CUDA Graphs ---------------------------------------------------------
 * A forward whose shapes repeat can be recorded once and replayed, which
 * removes the per-launch CPU cost (~80 launches per MiniLM forward):
 *
 *   bool replay;
 *   mt_cuda_graph_begin(be, key, &replay, err);  // key: the caller's shape key
 *   if (!replay)
 *       ... issue the ops (gemm, attention, layernorm, ...) ...
 *   mt_cuda_graph_end(be, err);                  // launches the graph
 *
 * The first begin for a key on a thread runs the ops eagerly (so every
 * kernel, cuBLASLt plan and workspace exists before any capture), the second
 * records them (they do not run yet; end instantiates, caches and launches
 * the graph). Later begins with that key answer replay = true: the caller
 * skips the ops and end replays. A graph recorded before this thread's
 * split-K workspace grew (a larger 8-bit weight was uploaded) is recorded
 * again, never replayed; a recording during which ->free was called runs
 * once and is not kept.
 * Rules between begin and end: no ->alloc, ->upload or ->download (they
 * fail; ->free is deferred until after the graph's launch), and every
 * buffer must be the same one on each replay (keep them per key; upload new
 * inputs into them before begin). Always call end after a begin, also on an error path. Per thread;
 * the least recently used of GRAPH_SLOTS graphs is dropped. backend.h's
 * graph_begin / graph_end slots (what models/encoder.c calls) are this protocol
 * plus a per-thread forward arena that holds the key's buffers
 * (engine/cuda/graph.c). */
/* entry points: mt_cuda_graph_begin(), mt_cuda_graph_end() */

/* ---- knobs for tests and benchmarks ------------------------------------
 * mt_backend_cuda_create takes them from the runtime options (engine/options.h;
 * `mantissa options` lists each with its values and default):
 *   MANTISSA_CUDA_GEMM=auto|fused|library   8-bit GEMM path (default auto)
 *   MANTISSA_CUDA_CROSSOVER=M               fixed m from which 8-bit GEMMs use cuBLASLt
 *   MANTISSA_CUDA_AUTOTUNE=0|1              time the 8-bit paths per weight shape and m at
 *                                     load, in CUDA graphs, and keep the fastest (1)
 *   MANTISSA_CUDA_ATTN=auto|fp32|f16        attention kernel (auto: fp32 after an fp32 GEMM)
 *   MANTISSA_CUDA_W8A16_BF16=0|1            feed the W8A16 tensor cores bf16 (default f16)
 *   MANTISSA_CUDA_GELU=erf|tanh             GELU after a 16-bit GEMM: tanh (default: cuBLASLt's
 *                                     GELU_BIAS epilogue, the tanh approximation, no pass
 *                                     over the FFN output; on an H100 MiniLM's fp16 vectors
 *                                     kept mean cosine 0.99999905 to the CPU's FP32, 1.14x
 *                                     at batch 256) or erf (BERT's own, a separate pass)
 *   MANTISSA_CUDA_ACT16=0|1                 fp16/bf16 models keep their activations in 16
 *                                     bits between ops, int8/fp8 models in f16 (1, default;
 *                                     backend.h act_format)
 *   MANTISSA_CUDA_W8A16_KERNEL=auto|staged|direct  the fused kernel for m <= 16: staged
 *                                     or direct (weights into registers; bitwise the same
 *                                     results); auto: direct up to the m at which the load
 *                                     measured it faster for the weight's shape (H100: faster
 *                                     on 4096x4096, slower on the 11008-wide shapes)
 *   MANTISSA_CUDA_LN_QUANT=0|1              1 (default): a LayerNorm before a W8A8 GEMM
 *                                     writes its 8-bit rows and row scales too, where the load
 *                                     measured W8A8 on such rows fastest (layernorm_feed)
 *   MANTISSA_CUDA_INT8_W8A8=0|1             1: int8 weights on f16 activations may take INT8
 *                                     W8A8 (kcu_w8a8_i8_gemm_16, per-token int8 activations)
 *                                     where the load measures it fastest (default 0: not yet
 *                                     run on a GPU)
 *   MANTISSA_CUDA_DEBUG_SYNC=0|1            1: synchronise and check after every op (an
 *                                     asynchronous error names the op that caused it)
 *                                     and record no CUDA graphs (begin/end run the ops
 *                                     eagerly, the graph_begin slot answers "not now"
 *                                     so models run their plain forward); slow, for
 *                                     finding a failing kernel
 *   MANTISSA_CUDA_GRAPHS=0|1                model forwards recorded as CUDA graphs (1)
 * (the old MT_CUDA_* names are still honoured, with a warning). */
typedef enum { MT_CUDA_GEMM_AUTO, MT_CUDA_GEMM_FUSED, MT_CUDA_GEMM_LIBRARY } mt_cuda_gemm_path;
typedef enum { MT_CUDA_ATTN_AUTO, MT_CUDA_ATTN_FP32, MT_CUDA_ATTN_F16 } mt_cuda_attn;

typedef struct {
    mt_cuda_gemm_path gemm; /* int8/fp8 weights: fused W8A16 kernel, cuBLASLt, or by crossover */
    int crossover;          /* > 0: fixed crossover m (no tuning) */
    int autotune;           /* measure the crossover per (precision, n, k) at weight upload */
    mt_cuda_attn attn;
    int w8a16_bf16;
    int w8a16_kernel; /* kcu_w8a16_kernel: MANTISSA_CUDA_W8A16_KERNEL (0: auto) */
    int gelu_tanh;    /* MANTISSA_CUDA_GELU=tanh: fp16/bf16 GELU in cuBLASLt's epilogue */
    int act16;        /* MANTISSA_CUDA_ACT16: fp16/bf16 (int8/fp8: f16) models keep 16-bit activations */
    int ln_quant;     /* MANTISSA_CUDA_LN_QUANT: LayerNorm quantizes the W8A8 GEMM's rows */
    int int8_w8a8;    /* MANTISSA_CUDA_INT8_W8A8: int8 weights may take INT8 W8A8 */
    int max_len_hint; /* attention grid sizing; any length still works (default 512) */
    /* Tests only: FP8 W8A8 GEMMs with m below this are refused as if
     * cuBLASLt had refused them at cublasLtMatmul (0: off), so the fallback
     * to the fused kernel can be checked on any GPU. */
    int fake_w8a8_refusal_below_m;
    int debug_sync; /* MANTISSA_CUDA_DEBUG_SYNC */
    /* MANTISSA_CUDA_GRAPHS: 1 (default) the graph_begin slot records and replays
     * forwards; 0 it answers "not now" (the plain, unpadded forward); 2
     * (tests only) padded forwards in the arena, always eager, never
     * recorded: the bitwise reference for a replay. */
    int graphs;
} mt_cuda_opts;

/* The defaults, overridden by the options above. */
/* entry points: mt_cuda_opts_default(), mt_backend_cuda_create_opts() */

/* How many GEMMs went down each path since the backend was made. */
typedef struct {
    long fused;      /* W8A16 fused kernel */
    long fused_direct; /* of which the direct kernel (m <= 16: measured faster, or asked for) */
    long lt_gelu_epi;  /* of lt_16 and lt_dequant, GEMMs whose GELU ran in cuBLASLt's epilogue
                        * (MANTISSA_CUDA_GELU=tanh) */
    long lt_dequant; /* 8-bit weight -> f16 scratch, cuBLASLt FP16 */
    long lt_w8a8;    /* FP8 weights and per-token FP8 activations, cuBLASLt */
    long lt_16;      /* fp16 / bf16 weights, cuBLASLt */
    long lt_16_io;   /* of lt_16, on 16-bit activations in and out (MANTISSA_CUDA_ACT16) */
    long bias_pass;  /* of lt_16_io and the 8-bit dequant path on 16-bit activations, GEMMs
                      * whose bias (and GELU) ran as a pass after cuBLASLt: it had no
                      * algorithm with that epilogue */
    long q8_io;      /* GEMMs of 8-bit weights (fused, lt_dequant, lt_w8a8) on 16-bit
                      * activations in and out (MANTISSA_CUDA_ACT16) */
    long lt_32;      /* fp32 / tf32 weights, cuBLASLt */
    long w8a8_refused; /* FP8 W8A8 plans cuBLASLt refused (the GEMM ran fused instead) */
    long w8a8_ln;      /* of lt_w8a8 and w8a8_i8, GEMMs on 8-bit rows their LayerNorm wrote
                        * (layernorm_feed, MANTISSA_CUDA_LN_QUANT): no quantization pass */
    long w8a8_i8;      /* INT8 weights and per-token int8 activations, our tensor-core
                        * kernel (MANTISSA_CUDA_INT8_W8A8) */
    long ws_grows;     /* split-K workspace reallocations, any thread (cached graphs are
                        * re-recorded after one, never replayed) */
    /* launch accounting (CUDA graphs) */
    long ops;           /* op calls (gemm, embed, layernorm, attention, mean_pool) that
                         * launched work at once, i.e. not while recording */
    long graph_records; /* graphs recorded (each also launched once) */
    long graph_replays; /* cached graphs launched */
    long graph_nodes;   /* nodes of the last graph recorded */
    long graph_kernels; /* of which kernel launches */
} mt_cuda_counts;
/* entry point: mt_cuda_get_counts() */

/* Whether FP8 weights take cuBLASLt FP8 W8A8 (outer-vector scales) at
 * large m on this backend: only compute capability 9.0 with cuBLASLt >= 12.9
 * (cup_fp8_w8a8_enabled); else they take the dequantized FP16 GEMM. false
 * without CUDA. */
/* entry point: mt_cuda_fp8_w8a8_enabled() */

/* The m from which GEMMs with this 8-bit weight leave the fused kernel for
 * cuBLASLt (INT32_MAX: never); -1 for other weights. */
/* entry point: mt_cuda_weight_crossover() */

/* The path GEMMs with this 8-bit weight take at m when MANTISSA_CUDA_GEMM
 * is auto: the fused W8A16 kernel below the crossover, from it on the
 * cuBLASLt path the load measured faster there (MT_CUDA_PATH_*); -1 for
 * other weights. */
enum { MT_CUDA_PATH_FUSED = 0, MT_CUDA_PATH_DEQUANT = 1, MT_CUDA_PATH_W8A8 = 2 };
/* entry point: mt_cuda_weight_path() */

/* The declarations of the entry points above: one list, entry_points.h. */
#define MT_CUDA_DECLARE(ret, name, params, args, answer) ret name params;
#define MT_CUDA_DECLARE_V(name, params, args, answer) void name params;
MT_CUDA_ENTRY_POINTS(MT_CUDA_DECLARE, MT_CUDA_DECLARE_V)
#undef MT_CUDA_DECLARE
#undef MT_CUDA_DECLARE_V

/* The module's one loading entry point: a table of every entry point (a
 * pointer each, in entry_points.h's order), which engine/cuda/dl.c looks
 * up by the one name MT_CUDA_MODULE_ENTRY (engine/cuda/module.c defines
 * it); size is the table's, so that a module built from another list is
 * refused rather than called wrongly. */
#define MT_CUDA_ENTRY_PTR(ret, name, params, args, answer) ret(*name) params;
#define MT_CUDA_ENTRY_PTR_V(name, params, args, answer) void(*name) params;
typedef struct {
    size_t size;
    MT_CUDA_ENTRY_POINTS(MT_CUDA_ENTRY_PTR, MT_CUDA_ENTRY_PTR_V)
} mt_cuda_entries;
#undef MT_CUDA_ENTRY_PTR
#undef MT_CUDA_ENTRY_PTR_V
#define MT_CUDA_MODULE_ENTRY "mt_cuda_module_entries"
extern const mt_cuda_entries mt_cuda_module_entries;

#endif
