/* backend.h: the table of operations a model's forward pass is written in.
 *
 * models/ call only these ops; engine/cpu/backend.c (and later
 * engine/cuda/backend.c) fill the same table. Buffers passed to ops live in
 * the backend's memory (host memory for the CPU backend, device memory for
 * CUDA): get them from ->alloc and move data with ->upload / ->download.
 *
 * Activations use a packed "varlen" layout: the tokens of all sequences of a
 * batch are concatenated, (tokens, hidden), and offsets[b]..offsets[b+1]
 * delimit sequence b. Attention only ever looks at keys of the query's own
 * sequence, which is the padding mask with the padding left out.
 */
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/precision.h"
#include "engine/status.h"

/* An activation: in a GEMM's epilogue (NONE, GELU) or on the gate of a
 * gated MLP (glu below: GELU, SILU). */
typedef enum { MT_ACT_NONE, MT_ACT_GELU, MT_ACT_SILU } mt_act;

/* The ops beyond BERT's that an architecture row may need (models/arch.h's
 * layer description), for supports_op: a backend that lacks one refuses
 * the model at load, naming it (mt_op_kind_name). */
typedef enum {
    MT_OPK_RMSNORM,  /* rmsnorm */
    MT_OPK_ADD,      /* add: the pre-norm layers' residual */
    MT_OPK_GLU,      /* glu: gated MLPs */
    MT_OPK_ROPE,     /* rope: rotary positions */
    MT_OPK_CAUSAL,   /* attention with causal set */
    MT_OPK_GQA,      /* attention with kv_heads < heads */
    MT_OPK_NO_POS,   /* embed without a position table (rotary rows) */
    MT_OPK_QK_NORM,  /* qk_norm: RMSNorm of each Q and K head (Qwen3) */
    MT_OPK_TOKEN_TYPES, /* embed_types: a text pair's two token types (cross-encoders) */
    MT_OPK_COUNT
} mt_op_kind;

/* "rmsnorm", "add", ... for messages. */
const char *mt_op_kind_name(mt_op_kind k);

/* The attention op's parameters. qkv rows are packed [Q | K | V] with Q
 * heads x head_dim wide and K, V kv_heads x head_dim each; kv_heads
 * divides heads (kv_heads < heads: grouped-query attention, query head hd
 * reads K/V head hd / (heads / kv_heads)). causal: query i sees keys j <= i
 * of its sequence only (else all of them). pos_bias: a relative position
 * bias added to the scores (MPNet), B(i, j) = pos_bias[head * (2*maxrel+1)
 * + (j - i) + maxrel], backend memory; NULL (BERT): none. Callers keep
 * sequences at most maxrel + 1 long where there is a bias (the model
 * refuses longer texts first). A longer one is refused where the backend
 * sees the lengths (the CPU); where they live on the device (CUDA) it reads
 * the table's edge entries, never past it. */
typedef struct mt_attn_params {
    int heads, kv_heads, head_dim;
    bool causal;
    const float *pos_bias;
    int maxrel;
} mt_attn_params;

/* The element type of a forward's activation buffers (act_format below). */
typedef enum { MT_ACTF_F32 = 0, MT_ACTF_F16 = 1, MT_ACTF_BF16 = 2 } mt_act_format;

/* A GEMM weight resident in a backend: y = x W^T with W (n, k), in the
 * precision the variant asked for. scales: one per output channel (int8g:
 * per group of inputs, engine/quant/quant.h) for the 8-bit precisions, NULL
 * otherwise. data is NULL where the backend keeps the codes only in a
 * layout of its own (the CPU backend's int8g and fp32); bytes then counts
 * that copy, padding included. */
typedef struct mt_weight {
    mt_precision prec;
    int n, k;
    void *data;
    float *scales;
    size_t bytes; /* resident bytes, scales included */
} mt_weight;

typedef struct mt_backend mt_backend;

typedef struct mt_backend_ops {
    const char *name;
    void (*destroy)(mt_backend *be);
    /* Whether weights of precision p can be made and multiplied here. */
    bool (*supports)(const mt_backend *be, mt_precision p);
    /* Optional (NULL: none of them): whether the op (or the op's mode) k
     * runs here. A model whose row needs one that is not is refused at
     * load with the op named; the ops themselves may be NULL where this
     * says no. */
    bool (*supports_op)(const mt_backend *be, mt_op_kind k);

    /* ---- memory ---------------------------------------------------- */
    void *(*alloc)(mt_backend *be, size_t bytes); /* NULL when out of memory */
    void (*free)(mt_backend *be, void *p);
    mt_status (*upload)(mt_backend *be, void *dst, const void *src, size_t bytes, mt_err *err);
    mt_status (*download)(mt_backend *be, void *dst, const void *src, size_t bytes, mt_err *err);

    /* ---- weights --------------------------------------------------- */
    /* Makes a resident weight (n, k) from host data already in precision
     * prec, laid out as engine/quant/quant.h describes (scales: n floats for int8
     * and fp8, else NULL). engine/quant/quant.c's mt_weight_create quantizes FP32
     * and calls this. */
    mt_status (*weight_upload)(mt_backend *be, mt_precision prec, int n, int k,
                               const void *data, const float *scales, mt_weight **out,
                               mt_err *err);
    void (*weight_destroy)(mt_backend *be, mt_weight *w);
    /* Optional (NULL where unsupported): activation smoothing (SmoothQuant)
     * for an int8 weight quantized from W diag(s): every GEMM with w then
     * quantizes its input times inv_s (k floats, host memory, copied). */
    mt_status (*weight_set_input_scale)(mt_backend *be, mt_weight *w, const float *inv_s,
                                        mt_err *err);

    /* Optional (NULL where it means nothing): how many threads the ops the
     * calling thread runs next may use, 1..be->threads (0: be->threads).
     * A forward of a few tokens can be faster on one thread than on a team
     * that must wake and meet for each of its hundreds of short ops. */
    void (*set_threads)(mt_backend *be, int threads);

    /* Optional (NULL: not known): the instruction-set level its kernels run
     * at (the CPU: "avx2" ... "avx512_core_amx", kernels/cpu/cpu_isa.h), and
     * the kernel that multiplies GEMMs of precision p there ("avx2_sign",
     * "onednn_f32", ...; NULL for a precision it does not support), for
     * the start-up log, the load check's message and /metrics. */
    const char *(*isa)(const mt_backend *be);
    const char *(*gemm_kernel)(const mt_backend *be, mt_precision p);
    /* Optional (NULL: activations are always FP32). act_format: the element
     * type this backend keeps a forward's activations in when every GEMM
     * weight of the model has precision p (CUDA: f16 for fp16, bf16 for
     * bf16, f16 for int8 and fp8; FP32 otherwise, or with
     * MANTISSA_CUDA_ACT16=0). set_act_format:
     * the type of the buffers the ops the calling thread issues next take:
     * embed writes, layernorm, gemm and attention read and write, mean_pool
     * reads (its output stays FP32) rows of that type, and gemm's bias is
     * of that type too (LayerNorm's gamma and beta stay FP32). The pointers keep
     * their float * type and the ops their element counts, so buffers sized
     * for FP32 are large enough; in a 16-bit forward gemm refuses weights of
     * another precision (but the 8-bit ones act_format names f16 for). A forward sets it before its first op and sets
     * MT_ACTF_F32 back after its last. */
    mt_act_format (*act_format)(const mt_backend *be, mt_precision p);
    void (*set_act_format)(mt_backend *be, mt_act_format f);
    /* The precision mix "auto" lifts a model's sensitive GEMMs to where the
     * config leaves it to the backend (mix_high "default", engine/quant/
     * mix_search.h): FP32 on the CPU, FP16 on a GPU. Not set: FP32. */
    mt_precision mix_high;

    /* ---- ops (all buffers backend memory) -------------------------- */
    /* y (m, n) = act(x (m, k) W^T + bias (n)); bias may be NULL. */
    mt_status (*gemm)(mt_backend *be, const float *x, int m, const mt_weight *w,
                      const float *bias, mt_act act, float *y, mt_err *err);
    /* out (t, h) = word[ids[i]] + pos[i - offsets[b]] + type0, per token i of
     * sequence b; pos NULL (where supports_op(MT_OPK_NO_POS)): no position term. */
    mt_status (*embed)(mt_backend *be, const int32_t *ids, const int32_t *offsets, int nseq,
                       const float *word, const float *pos, const float *type0, int h,
                       float *out, mt_err *err);
    /* Optional (NULL: a model keeps its word table in FP32): embed from a
     * table of 16-bit codes (bf16: BF16, else FP16) as an LLM checkpoint
     * has it, bitwise embed's result on the same values in FP32; word16 is
     * backend memory. */
    mt_status (*embed16)(mt_backend *be, const int32_t *ids, const int32_t *offsets, int nseq,
                         const uint16_t *word16, bool bf16, const float *pos,
                         const float *type0, int h, float *out, mt_err *err);
    /* Optional (MT_OPK_TOKEN_TYPES): embed, but token i of sequence b adds
     * type1 instead of type0 from its index segs[b] in the sequence on (a
     * cross-encoder's second text); segs: nseq ints of backend memory. */
    mt_status (*embed_types)(mt_backend *be, const int32_t *ids, const int32_t *offsets,
                             const int32_t *segs, int nseq, const float *word, const float *pos,
                             const float *type0, const float *type1, int h, float *out,
                             mt_err *err);
    /* out (t, h) = LayerNorm(x + res) * gamma + beta; res may be NULL; out may alias x. */
    mt_status (*layernorm)(mt_backend *be, const float *x, const float *res, const float *gamma,
                           const float *beta, int t, int h, float eps, float *out, mt_err *err);
    /* Optional (NULL: call layernorm). layernorm, when the next op this thread
     * issues is gemm(out, t, next, ...): the backend may then also write out
     * in the form that GEMM reads (CUDA: the E4M3 rows and row scales of FP8
     * W8A8), sparing it a pass over out. Same results as layernorm then
     * gemm; any other op in between only loses the saving. */
    mt_status (*layernorm_feed)(mt_backend *be, const float *x, const float *res,
                                const float *gamma, const float *beta, int t, int h, float eps,
                                float *out, const mt_weight *next, mt_err *err);
    /* qkv (t, (heads + 2 kv_heads) head_dim) packed [Q | K | V] per token ->
     * out (t, heads head_dim), softmax(Q K^T / sqrt(head_dim) + B) V per head
     * over each sequence's own tokens (mt_attn_params: masks, bias). */
    mt_status (*attention)(mt_backend *be, const float *qkv, const int32_t *offsets, int nseq,
                           const mt_attn_params *p, float *out, mt_err *err);
    /* Optional (supports_op(MT_OPK_RMSNORM)): out (t, h) = (x + res) /
     * sqrt(mean((x + res)^2) + eps) * gamma; res may be NULL; out may alias x. */
    mt_status (*rmsnorm)(mt_backend *be, const float *x, const float *res, const float *gamma,
                         int t, int h, float eps, float *out, mt_err *err);
    /* Optional (MT_OPK_ADD): out (n floats) = x + y; out may alias x or y. */
    mt_status (*add)(mt_backend *be, const float *x, const float *y, size_t n, float *out,
                     mt_err *err);
    /* Optional (MT_OPK_GLU): a gated MLP's middle: x (t, 2n) holds [gate | up]
     * per row; out (t, n) = act(gate) * up, act GELU (erf) or SILU. out must
     * not overlap x. */
    mt_status (*glu)(mt_backend *be, const float *x, int t, int n, mt_act act, float *out,
                     mt_err *err);
    /* Optional (MT_OPK_ROPE): rotary position embedding in place on the Q
     * and K heads of qkv (laid out as attention reads it, p's heads,
     * kv_heads, head_dim): each head's pairs (d, d + head_dim/2) rotated by
     * angle pos * theta^(-2d/head_dim), pos the token's index in its
     * sequence (the rotate-half layout of GPT-NeoX, Llama, Qwen). */
    mt_status (*rope)(mt_backend *be, float *qkv, const int32_t *offsets, int nseq,
                      const mt_attn_params *p, float theta, mt_err *err);
    /* Optional (MT_OPK_QK_NORM): in place on t rows of qkv (laid out as
     * attention reads it), each Q head RMS-normalised over its head_dim
     * values and scaled by q_gamma (head_dim), each K head likewise by
     * k_gamma; V as it is. */
    mt_status (*qk_norm)(mt_backend *be, float *qkv, int t, const mt_attn_params *p,
                         const float *q_gamma, const float *k_gamma, float eps, mt_err *err);
    /* out (nseq, h) = L2-normalised (if normalize) mean over each sequence's tokens. */
    mt_status (*mean_pool)(mt_backend *be, const float *x, const int32_t *offsets, int nseq,
                           int h, bool normalize, float *out, mt_err *err);

    /* ---- recorded forwards (optional: NULL where unsupported, e.g. the CPU) ----
     * A forward whose shapes repeat can be recorded once and replayed (CUDA
     * Graphs on the CUDA backend), which removes the per-op launch cost:
     *
     *   void *arena; bool replay;
     *   graph_begin(be, key, bytes, in, in_bytes, &arena, &replay, err);
     *   if arena is NULL: nothing is recorded now (e.g. MANTISSA_CUDA_DEBUG_SYNC=1):
     *       run the forward as usual; no graph_end.
     *   else: in (in_bytes of pageable host memory, free to reuse on return)
     *       is copied to the start of
     *       arena (bytes of backend memory, the calling thread's); take every
     *       buffer of the forward from arena; if !replay, issue the ops;
     *       graph_end(be, failed, err), also after a failed op (failed true:
     *       the recording is dropped); then download the results.
     *
     * key: the caller's, one per model and shape: the ops, their arguments
     * and the buffers' places in arena must be the same for a key. A key's
     * first begin on a thread runs the ops eagerly (warm-up), its second
     * records them, later ones replay (*replay true: skip the ops). arena
     * keeps its address as long as a recording made with it is replayed.
     * Between begin and end: no alloc, upload or download (free is deferred). */
    mt_status (*graph_begin)(mt_backend *be, unsigned long long key, size_t bytes,
                             const void *in, size_t in_bytes, void **arena, bool *replay,
                             mt_err *err);
    mt_status (*graph_end)(mt_backend *be, bool failed, mt_err *err);
} mt_backend_ops;

struct mt_backend {
    const mt_backend_ops *ops;
    const char *device; /* "cpu", "cuda:0" ... for logs and metadata */
    int threads;
    void *impl;
};

/* CPU backend: threads <= 0 means all cores. */
mt_status mt_backend_cpu_create(int threads, mt_backend **out, mt_err *err);

/* The instruction-set levels this CPU can run its kernels at, lowest
 * first (oneDNN's names, lower case: each one a value ONEDNN_MAX_CPU_ISA
 * takes, which steps oneDNN and our kernels down together): up to cap of
 * them into names; returns the count. */
int mt_cpu_isa_levels(const char **names, int cap);

static inline void mt_backend_destroy(mt_backend *be)
{
    if (be)
        be->ops->destroy(be);
}

#endif
