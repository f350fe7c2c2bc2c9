/* kcu.h: the extern "C" launch API of the CUDA kernels in kernels/cuda/ (the .cu files).
 *
 * Every launch function takes device pointers, sizes and a cudaStream_t,
 * enqueues its kernel(s) on that stream and returns the cudaError_t of the
 * launch (cudaGetLastError() after each launch, so a bad configuration is
 * reported here and not at the next synchronisation). Nothing here
 * synchronises the stream or allocates memory; workspaces come from the
 * caller. engine/cuda/backend.c is the only user above kernels/, and no CUDA
 * type travels further up than that file.
 *
 * Layouts are row-major. Activations are FP32 (tokens, width) with a leading
 * dimension; GEMM weights W are (n, k), one output channel per row, in the
 * formats of engine/quant/quant.h, with a row stride ldw.
 *
 * Host-only helpers (the split-K planner, the crossover picker) need no GPU
 * and are unit-tested on CPU-only machines by tests/gpu/test_gpu_kernels.c.
 */
#ifndef MT_KERNELS_CUDA_KCU_H
#define MT_KERNELS_CUDA_KCU_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KCU_W_INT8 = 0, KCU_W_E4M3 = 1 } kcu_wtype;  /* 8-bit weight codes */
typedef enum { KCU_A_F16 = 0, KCU_A_BF16 = 1 } kcu_atype;   /* MMA input type of activations */
typedef enum { KCU_ACT_NONE = 0, KCU_ACT_GELU = 1 } kcu_act; /* GELU: erf form, as BERT */

/* ========================================================================
 * W8A16 fused dequantize-GEMM (gemm_w8a16.cu)
 *
 *   y (m, n) = act(scale[n] * sum_k x[m][k] * dec(w[n][k]) + bias[n])
 *
 * x is FP32 (rounded to f16/bf16 when staged for the tensor cores), w is
 * int8 or E4M3 bytes that stay 8-bit in global memory and are converted in
 * registers right before mma.sync m16n8k16, FP32 accumulation. The
 * per-channel scale, bias (may be NULL) and GELU are applied in the
 * epilogue. Any m, n, k >= 1. Requirements: w 16-byte aligned, ldw a
 * multiple of 16 and >= k (engine/cuda/backend.c pads rows); x with any
 * ldx >= k (16-byte loads when x is 16-byte aligned and ldx % 4 == 0, 4-byte
 * loads otherwise); ldy >= n.
 *
 * Work split: a block owns 128 weight rows x bm tokens; K is split across
 * `splits` blocks when there are too few (m, n) tiles to fill the GPU. Split
 * partials go to ws (FP32) and the last block of a tile to finish (counted in
 * `counters`) sums them in a fixed order, so results are deterministic.
 * ======================================================================== */

typedef struct {
    int bm;               /* tokens per block: 8, 16, 32 or 64 */
    int bn;               /* weight rows per block (128) */
    int grid_m, grid_n;   /* tiles along m and n */
    int nchunks;          /* ceil(k / 64) */
    int splits;           /* K split across blocks (>= 1) */
    int chunks_per_split; /* 64-wide K chunks per split; the last may be shorter */
    size_t ws_floats;     /* FP32 workspace for split partials (0 when splits == 1) */
    int counters;         /* tile counters needed (0 when splits == 1) */
} kcu_w8a16_plan;

/* Which kernel runs a W8A16 GEMM. STAGED: weights and FP32 activations
 * through a cp.async pipeline in shared memory, any m (measured on an H200,
 * bench/results/gpu-2026-11-26.md). DIRECT: for m <= 16 only, weights
 * straight into registers with no barrier per chunk, activations converted
 * once per block (run on an H100 2026-11-27: faster on 4096x4096, slower on
 * the 11008-wide shapes; the backend picks per weight shape). The same
 * plan, workspace and accumulation order: bitwise the same results. */
typedef enum { KCU_W8A16_AUTO = 0, KCU_W8A16_STAGED = 1, KCU_W8A16_DIRECT = 2 } kcu_w8a16_kernel;

/* Planner knobs; zeros mean defaults. */
typedef struct {
    int target_blocks; /* blocks to aim for (default 2 * SMs) */
    int force_splits;  /* > 0: use exactly this many splits (clamped to nchunks) */
    int max_splits;    /* cap (default 32) */
    int kernel;        /* kcu_w8a16_kernel; AUTO is STAGED here (the backend measures per shape) */
} kcu_w8a16_opts;

/* Host only, pure: 1 when the direct kernel runs a GEMM of m tokens under
 * these options (asked for, and m <= 16). */
int kcu_w8a16_direct(int m, const kcu_w8a16_opts *o);

/* Host only, pure: the tiling and split-K plan for (m, n, k) on a GPU with
 * `sms` multiprocessors. Returns 0, or -1 for sizes < 1. */
int kcu_w8a16_make_plan(int m, int n, int k, int sms, const kcu_w8a16_opts *o,
                        kcu_w8a16_plan *p);

/* ws/ws_floats and counters/ncounters: split-K workspace. counters must be
 * zero before the first launch that uses them (each launch leaves them at
 * zero again). If the plan needs more than is given, the launch falls back
 * to fewer splits (splits == 1 needs none), so NULL/0 is always valid.
 * Two launches that share a workspace must be ordered (same stream). */
cudaError_t kcu_w8a16_gemm(const float *x, int ldx, const void *w, int ldw, kcu_wtype wt,
                           const float *scale, const float *bias, kcu_act act, float *y, int ldy,
                           int m, int n, int k, kcu_atype at, const kcu_w8a16_opts *opts,
                           float *ws, size_t ws_floats, int *counters, int ncounters,
                           cudaStream_t stream);

/* The same with activation smoothing: every activation x[m][c] is
 * multiplied by in_mul[c] in FP32 before its f16/bf16 rounding, so the
 * result is bitwise that of kcu_w8a16_gemm on the pre-multiplied x. in_mul:
 * NULL (none), or 16-byte aligned with ceil(k / 64) * 64 finite floats (the
 * kernel reads whole 64-wide chunks; entries past k meet zero activations). */
cudaError_t kcu_w8a16_gemm_mul(const float *x, int ldx, const void *w, int ldw, kcu_wtype wt,
                               const float *scale, const float *bias, kcu_act act, float *y,
                               int ldy, int m, int n, int k, kcu_atype at, const float *in_mul,
                               const kcu_w8a16_opts *opts, float *ws, size_t ws_floats,
                               int *counters, int ncounters, cudaStream_t stream);

/* Host only, pure: the largest split-K workspace (FP32 floats; *counters:
 * tile counters, may be NULL) that kcu_w8a16_make_plan asks for at any m
 * for this (n, k) and device: what a caller allocates once so that no m
 * ever needs a bigger one. */
size_t kcu_w8a16_ws_bound(int n, int k, int sms, const kcu_w8a16_opts *o, int *counters);

/* Loads every W8A16 instantiation and raises its shared-memory limit on the
 * current device (what a first launch would do: not inside a graph capture). */
cudaError_t kcu_w8a16_warm(void);

/* Host only, pure: the smallest m from which the alternative path (cuBLASLt)
 * beat the fused kernel at every measured m from there on, given timings
 * t_fused[i] and t_alt[i] at increasing ms[i]; INT32_MAX when it never did.
 * This is the "measured heuristic" the backend uses per weight shape. */
int kcu_pick_crossover(const int *ms, const double *t_fused, const double *t_alt, int count);

/* ========================================================================
 * elementwise and conversion kernels (ops.cu)
 * ======================================================================== */

/* out (m, ldo) 16-bit = round(x (m, k)), columns k..ldo-1 set to 0; bf16
 * selects bfloat16 over IEEE half. Round to nearest even. */
cudaError_t kcu_f32_to_16(const float *x, int ldx, int m, int k, void *out, int ldo, int bf16,
                          cudaStream_t stream);
/* The same with x[r][c] * mul[c] (FP32) rounded; mul NULL or k floats. */
cudaError_t kcu_f32_to_16_mul(const float *x, int ldx, int m, int k, const float *mul, void *out,
                              int ldo, int bf16, cudaStream_t stream);

/* y (m, n) += bias (may be NULL), then GELU when act says so. */
cudaError_t kcu_bias_act(float *y, int ldy, int m, int n, const float *bias, kcu_act act,
                         cudaStream_t stream);

/* out (n, ldo) IEEE half = dec(w[n][k]) * scale[n], columns k..ldo-1 = 0:
 * the weight of an 8-bit layer as FP16 for cuBLASLt at large m. */
cudaError_t kcu_dequant_to_f16(const void *w, int ldw, kcu_wtype wt, const float *scale, int n,
                               int k, void *out, int ldo, cudaStream_t stream);

/* The same with column c also times mul[c] (FP32, before the rounding;
 * mul NULL or k floats): a 16-bit forward's smoothing folded into the
 * weight, (x * mul) W^T = x (W * mul)^T. */
cudaError_t kcu_dequant_to_f16_mul(const void *w, int ldw, kcu_wtype wt, const float *scale,
                                   const float *mul, int n, int k, void *out, int ldo,
                                   cudaStream_t stream);

/* Per-token (row) FP8 quantization of activations for W8A8:
 * row_scale[r] = max|x[r]| / 448 (1 for an all-zero row) and
 * xq[r][c] = e4m3_satfinite(x[r][c] / row_scale[r]), columns k..ldq-1 = 0. */
cudaError_t kcu_quant_rows_e4m3(const float *x, int ldx, int m, int k, uint8_t *xq, int ldq,
                                float *row_scale, cudaStream_t stream);
/* The same on x[r][c] * mul[c] (FP32; absmax and codes); mul NULL or k floats. */
cudaError_t kcu_quant_rows_e4m3_mul(const float *x, int ldx, int m, int k, const float *mul,
                                    uint8_t *xq, int ldq, float *row_scale, cudaStream_t stream);

/* Deterministic pseudo-random fills (a hash of seed and index), for
 * benchmarks and the backend's GEMM autotuning: timing on zeros would flatter
 * every kernel. f32: uniform in [lo, hi). codes: int8 in [-127, 127], or any
 * E4M3 code but NaN. */
cudaError_t kcu_fill_f32(float *p, size_t n, uint32_t seed, float lo, float hi,
                         cudaStream_t stream);
cudaError_t kcu_fill_codes(uint8_t *p, size_t n, uint32_t seed, kcu_wtype wt, cudaStream_t stream);

/* cudaSuccess when this binary holds code the current device can run
 * (SASS for its architecture or PTX the driver can compile), else the error
 * (cudaErrorNoKernelImageForDevice): for a clear start-up message. */
cudaError_t kcu_check_image(void);

/* Loads every kernel of ops.cu and gemm_w8a16.cu on the current device and
 * sets the W8A16 shared-memory limits (the backend calls it at creation, so
 * that no lazy loading happens inside a CUDA graph capture). attention.cu's
 * kernels load at the eager first run of each graph key. */
cudaError_t kcu_warm(void);

/* ========================================================================
 * encoder kernels (ops.cu, attention.cu). offsets/ids are device arrays of
 * the packed varlen layout of engine/backend.h: sequence s is tokens
 * offsets[s] .. offsets[s+1]-1. The token count is never needed on the host.
 * ======================================================================== */

/* out (t, h) = word[ids[i]] + pos[i - offsets[s]] + type0. */
cudaError_t kcu_embed(const int32_t *ids, const int32_t *offsets, int nseq, const float *word,
                      const float *pos, const float *type0, int h, float *out,
                      cudaStream_t stream);

/* out (t, h) = LayerNorm(x + res) * gamma + beta; res may be NULL; out may
 * alias x or res. Two passes (mean, then centred variance), FP32. */
cudaError_t kcu_layernorm(const float *x, const float *res, const float *gamma, const float *beta,
                          int t, int h, float eps, float *out, cudaStream_t stream);

/* out (nseq, h) = mean over each sequence's rows of x, L2-normalised when
 * normalize (norm clamped at 1e-12, as torch.nn.functional.normalize). */
cudaError_t kcu_mean_pool(const float *x, const int32_t *offsets, int nseq, int h, int normalize,
                          float *out, cudaStream_t stream);

typedef enum {
    KCU_ATTN_FP32 = 0, /* FP32 SIMT: exact path for the fp32 variant; any head_dim <= 128 */
    KCU_ATTN_F16 = 1,  /* tensor cores: Q, K, V and P rounded to f16, FP32 accumulation and
                        * softmax; head_dim 32, 64 or 128 */
} kcu_attn_mode;

/* Whether mode can run this head_dim. */
int kcu_attention_supported(kcu_attn_mode mode, int head_dim);

/* qkv (t, 3*heads*dh) packed [Q | K | V] -> out (t, heads*dh):
 * softmax(Q K^T / sqrt(dh)) V per sequence and head, keys limited to the
 * query's own sequence (the padding mask). Any sequence length is handled;
 * max_len_hint (e.g. 512) only sizes the grid. sms: multiprocessor count,
 * for the same purpose. */
cudaError_t kcu_attention(const float *qkv, const int32_t *offsets, int nseq, int heads, int dh,
                          int max_len_hint, int sms, kcu_attn_mode mode, float *out,
                          cudaStream_t stream);
/* The same with MPNet's relative position bias added to the scores before
 * the softmax: score(i, j) += pos_bias[head * (2*maxrel+1) + (j - i) + maxrel]
 * (device memory; NULL: none). Sequences should be at most maxrel + 1 long;
 * a longer one reads the edge entries (clamped), never past the table. */
cudaError_t kcu_attention_bias(const float *qkv, const int32_t *offsets, int nseq, int heads,
                               int dh, const float *pos_bias, int maxrel, int max_len_hint,
                               int sms, kcu_attn_mode mode, float *out, cudaStream_t stream);

/* ========================================================================
 * the encoder on 16-bit activations (ops16.cu, attention.cu): rows of f16
 * or bf16 between ops, as the 16-bit GEMMs read and write them; every sum,
 * statistic and GELU in FP32, each result rounded once (to nearest even).
 * Parameters, layouts and aliasing as the FP32 launchers above; gamma,
 * beta, the embedding tables and the pooled output stay FP32, a GEMM's
 * bias is of the row type (as cuBLASLt's epilogue takes it beside a 16-bit
 * output).
 * ======================================================================== */

typedef enum { KCU_DT_F32 = 0, KCU_DT_F16 = 1, KCU_DT_BF16 = 2 } kcu_dtype;

/* out (t, h) 16-bit = round(word[ids[i]] + pos[i - offsets[s]] + type0). */
cudaError_t kcu_embed_16(const int32_t *ids, const int32_t *offsets, int nseq, const float *word,
                         const float *pos, const float *type0, int h, void *out, kcu_dtype dt,
                         cudaStream_t stream);

/* out = round(LayerNorm(x + res) * gamma + beta), x, res (may be NULL) and
 * out 16-bit; x + res is summed in FP32 (not rounded first). out may alias
 * x or res. 16-byte loads where h % 8 == 0, h <= 1024 and rows are aligned. */
cudaError_t kcu_layernorm_16(const void *x, const void *res, const float *gamma,
                             const float *beta, int t, int h, float eps, void *out, kcu_dtype dt,
                             cudaStream_t stream);

/* kcu_layernorm_16, and beside out the W8A8 rows of the GEMM that reads it
 * (what kcu_quant_rows_16 would make of out, mul, code and ldq, bit for
 * bit): xq (t, ldq) codes of out * mul (mul per column, may be NULL; code
 * KCU_W_E4M3 or KCU_W_INT8), zero from column h on, row_scale (t) = absmax
 * / 448 (E4M3) or / 127 (int8) per row (1 for a zero row). One kernel, so
 * the GEMM needs no quantization pass. cudaErrorNotSupported (nothing
 * launched) where kcu_layernorm_16 would not take its 16-byte kernel, or
 * ldq % 8, xq 8-byte or mul 16-byte unaligned: then LayerNorm and quantize
 * apart. */
cudaError_t kcu_layernorm_16_q(const void *x, const void *res, const float *gamma,
                               const float *beta, int t, int h, float eps, void *out, kcu_dtype dt,
                               const float *mul, kcu_wtype code, uint8_t *xq, int ldq,
                               float *row_scale, cudaStream_t stream);

/* out (nseq, h) FP32 = mean of each sequence's 16-bit rows of x, L2-normalised
 * when normalize. */
cudaError_t kcu_mean_pool_16(const void *x, kcu_dtype dt, const int32_t *offsets, int nseq, int h,
                             int normalize, float *out, cudaStream_t stream);

/* y (m, n) = round(act(y + bias)), y and bias (n, may be NULL) 16-bit of
 * type dt, the sum and GELU in FP32: the GEMM epilogue where cuBLASLt has
 * none for a plan. */
cudaError_t kcu_bias_act_16(void *y, kcu_dtype dt, int ldy, int m, int n, const void *bias,
                            kcu_act act, cudaStream_t stream);

/* Per-token quantization of 16-bit rows x of type dt (a W8A8 GEMM of a
 * 16-bit forward), absmax and codes of x[r][c] * mul[c] in FP32: code
 * KCU_W_E4M3 as kcu_quant_rows_e4m3_mul (FP8), or KCU_W_INT8 (row_scale =
 * absmax / 127, xq = int8 round-to-nearest-even of x * mul / row_scale,
 * clamped to +-127: the INT8 W8A8 GEMM's rows). */
cudaError_t kcu_quant_rows_16(const void *x, kcu_dtype dt, int ldx, int m, int k,
                              const float *mul, kcu_wtype code, uint8_t *xq, int ldq,
                              float *row_scale, cudaStream_t stream);

/* kcu_w8a16_gemm_mul on 16-bit rows (a 16-bit forward's GEMM of an 8-bit
 * weight): x (m, ldx), y (m, ldy) and bias (n, may be NULL) of type dt,
 * which is also the MMA's type (KCU_DT_F16: f16, KCU_DT_BF16: bf16); the
 * epilogue in FP32, y rounded once. The same MMAs as kcu_w8a16_gemm_mul on
 * x widened to FP32 (with smoothing, x[c] * in_mul[c] is rounded to dt as
 * there), so y is that GEMM's FP32 result (bias widened) rounded to dt.
 * x 8-byte aligned with ldx a multiple of 4 (four values are one 8-byte
 * copy); y and bias are written and read one value at a time. */
cudaError_t kcu_w8a16_gemm_16(const void *x, int ldx, const void *w, int ldw, kcu_wtype wt,
                              const float *scale, const void *bias, kcu_act act, void *y, int ldy,
                              int m, int n, int k, kcu_dtype dt, const float *in_mul,
                              const kcu_w8a16_opts *opts, float *ws, size_t ws_floats,
                              int *counters, int ncounters, cudaStream_t stream);

/* INT8 W8A8 on 8-bit tensor cores (gemm_w8a8_i8.cu): y (m, n) of 16-bit type
 * dt (row stride ldy, 4-byte aligned) = act(acc * xs[r] * ws[c] + bias[c]),
 * acc = sum over k of xq[r][k] * w[c][k] in int32 (exact). xq (m, ldq) and
 * w (n, ldw): int8 codes, 16-byte aligned, ldq and ldw multiples of 16; k
 * (a multiple of 16) covers the zero padding of both. xs: m row scales
 * (kcu_quant_rows_16 with KCU_W_INT8), ws: n channel scales, bias: n values
 * of type dt or NULL; the epilogue in FP32, GELU in erf form. sms: the
 * device's SM count (picks the tile). */
cudaError_t kcu_w8a8_i8_gemm_16(const void *xq, int ldq, const float *xs, const void *w, int ldw,
                                const float *ws, const void *bias, kcu_act act, void *y, int ldy,
                                int m, int n, int k, kcu_dtype dt, int sms, cudaStream_t stream);
/* Sets its kernels' shared-memory limit (kcu_warm calls it). */
cudaError_t kcu_w8a8_i8_warm(void);

/* kcu_attention_bias on qkv and out of type dt (KCU_DT_F32: the same as
 * kcu_attention_bias). 16-bit rows: qkv 8-byte and out 4-byte aligned for
 * the tensor-core mode; K and V are read as they are (f16) or converted to
 * f16 (bf16) into shared memory. */
cudaError_t kcu_attention_t(const void *qkv, kcu_dtype dt, const int32_t *offsets, int nseq,
                            int heads, int dh, const float *pos_bias, int maxrel, int max_len_hint,
                            int sms, kcu_attn_mode mode, void *out, cudaStream_t stream);

/* Loads the kernels of ops16.cu (kcu_warm calls it). */
cudaError_t kcu_warm_16(void);

#ifdef __cplusplus
}
#endif

#endif
