/* arch.h: what an architecture row is. Each encoder family (BERT, MPNet,
 * DistilBERT, ...) is one const enc_arch in its own file (models/arch_bert.c,
 * models/mpnet.c, models/distilbert.c), listed once in models/registry.c;
 * the shared encoder (models/encoder*.c) reads config.json, names tensors,
 * embeds, attends and pools through the row alone, in the manner of
 * llama.cpp's per-architecture key and tensor-name tables and hooks.
 *
 * A row gives data (config.json's key names, the tensor names, how a
 * layer is built: norm placement and kind, MLP kind, positions, causal
 * attention, optional biases; the tokenizer's special tokens, the default
 * pooling) and optional hooks
 * (NULL: the BERT-shaped default): its own config fields, extra weights
 * (an attention bias: m->attn.pos_bias / maxrel, passed to every attention
 * op), its embeddings and positions, and whether a batch may be recorded.
 * Hooks see the model through models/encoder_internal.h.
 */
#ifndef MT_MODELS_ARCH_H
#define MT_MODELS_ARCH_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/model.h"
#include "engine/status.h"
#include "engine/weights/safetensors.h"
#include "models/encoder.h"

typedef struct enc_model enc_model; /* models/encoder_internal.h */

/* config.json's key for each number every encoder has. act, eps,
 * type_vocab, kv_heads, head_dim and rope_theta may be NULL: then no
 * activation is checked, eps is 1e-12, the model has no token types, as
 * many key/value heads as heads, heads of hidden / heads, and theta 10000. */
typedef struct {
    const char *vocab, *hidden, *layers, *heads, *intermediate, *max_positions;
    const char *act;        /* its value, when a string, must name the MLP's
                             * activation: "gelu" (GELU MLPs), "silu" (gated SiLU) */
    const char *eps;        /* the norms' epsilon */
    const char *type_vocab; /* token-type rows */
    const char *kv_heads;   /* key/value heads (grouped-query attention) */
    const char *head_dim;   /* each head's width, where it is not hidden / heads */
    const char *rope_theta; /* the rotary positions' base */
} enc_config_keys;

/* How a layer is built (models/encoder_forward.c); the zero value of each
 * is BERT's, so a row that says nothing is a BERT-shaped encoder. */
typedef enum {
    ENC_NORM_POST = 0, /* x = norm(x + f(x)) (BERT) */
    ENC_NORM_PRE,      /* x = x + f(norm(x)), and a final norm after the layers */
} enc_norm_place;
typedef enum { ENC_LAYERNORM = 0, ENC_RMSNORM } enc_norm_kind;
typedef enum {
    ENC_MLP_GELU = 0,   /* out(GELU(inter(x))) */
    ENC_MLP_GATED_SILU, /* out(SiLU(gate(x)) * inter(x)): SwiGLU (Llama, Qwen) */
    ENC_MLP_GATED_GELU, /* out(GELU(gate(x)) * inter(x)): GeGLU */
} enc_mlp_kind;
typedef enum {
    ENC_POS_LEARNED = 0, /* a position table added to the embeddings (and any bias a
                          * load_extras hook gives the attention: MPNet) */
    ENC_POS_ROTARY,      /* rotary positions on Q and K (keys.rope_theta); no table */
} enc_pos_kind;

typedef struct {
    enc_norm_place place;
    enc_norm_kind norm;
    enc_mlp_kind mlp;
    enc_pos_kind pos;
    bool causal;         /* each token attends to those before it only (decoders) */
    bool optional_bias;  /* each GEMM's bias where the file has it, none where not
                          * (else every GEMM bias is required, as BERT's) */
} enc_layer_kind;

/* The tensors before and after the layers. type NULL: no token types (a
 * zero row is added in their place); pos NULL: no position table (rotary
 * rows). ln is the embeddings' norm, final the norm after the last layer
 * (pre-norm rows), each without ".weight"/".bias"; NULL: none. */
typedef struct {
    const char *word, *pos, *type, *ln, *final;
} enc_embed_names;

/* One layer's tensors, each without ".weight"/".bias": layer l's tensor
 * is "<layers>.<l>.<name>.weight" (enc_arch.layers). Q, K, V (or qkv: one
 * fused [Q | K | V] tensor, then q, k and v are not read), attention
 * output, the attention's norm (ln1: after the attention when post-norm,
 * before it when pre-norm), MLP in (inter; for a gated MLP the up
 * projection, with gate its gate; gate NULL in a gated row: inter is one
 * fused [gate | up] tensor), MLP out, the MLP's norm (ln2). RMSNorm has no
 * ".bias". */
typedef struct {
    const char *q, *k, *v, *o, *ln1, *inter, *out, *ln2;
    const char *qkv, *gate;
    const char *q_norm, *k_norm; /* per-head RMSNorms of Q and K before the
                                  * positions (Qwen3), gamma head_dim wide; NULL: none */
} enc_layer_names;

/* A sequence classifier's head (config.json's architectures name a
 * "...ForSequenceClassification"; models/enc_head.c): on each sequence's
 * first token, an optional dense layer (dense; NULL: none) with its
 * activation, then the projection to the labels (out), each without
 * ".weight"/".bias" (also found under the prefix). out NULL: the row has
 * no classifier, and such a folder is refused. */
typedef enum { ENC_HEAD_TANH = 0, ENC_HEAD_RELU } enc_head_act;
typedef struct {
    const char *dense, *out;
    enc_head_act act;
} enc_head_names;

struct enc_arch {
    const char *model_type; /* config.json "model_type"; also info.arch */
    /* Tried in front of every tensor name the file lacks ("bert." for
     * BertFor* checkpoints); NULL: none. */
    const char *prefix;
    enc_config_keys keys;
    enc_embed_names emb;
    const char *layers; /* "encoder.layer" */
    enc_layer_names layer;
    enc_layer_kind kind; /* how a layer is built; {0}: BERT's */
    enc_head_names head; /* a sequence classifier's head; {0}: none */
    /* The tokenizer's roles (engine/text/tokenizer.h); NULL: BERT's
     * "[CLS]" "[SEP]" "[PAD]" "[UNK]". */
    const char *cls_token, *sep_token, *pad_token, *unk_token;
    /* The pooling of a folder without 1_Pooling/config.json (which, when
     * there, decides); 0 is MT_POOL_MEAN, sentence-transformers' default. */
    mt_pooling pooling;

    /* ---- hooks, each optional ---- */

    /* config.json's fields beyond keys (path names the file in errors).
     * Runs after the keys are read, with c->max_seq_len = max_positions,
     * which it may lower. */
    mt_status (*read_config)(const cJSON *j, const char *path, enc_config *c, mt_err *err);
    /* Weights beyond the embeddings and the layers (MPNet: the relative
     * position bias into m->attn.pos_bias / m->attn.maxrel, the attention
     * parameters every layer's attention op is given). Runs after the
     * embeddings are loaded. */
    mt_status (*load_extras)(enc_model *m, const st_file *f, mt_err *err);
    /* The embeddings of a batch into x (t, h), before the embedding
     * LayerNorm; ids / offsets on the host, d_ids / d_off their backend
     * copies. NULL: word + position (0, 1, ...) + m->type0 per sequence. */
    mt_status (*embed)(enc_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                       const int32_t *d_ids, const int32_t *d_off, float *x, mt_err *err);
    /* Whether a forward of these t ids may be recorded as a graph (no
     * upload between ops; engine/fwd_graph.h). NULL: always. */
    bool (*recordable)(const enc_model *m, const int32_t *ids, int t);
};

/* ---- what rows may call (models/encoder*.c) ---- */

/* config.json's integer `key` in [lo, hi] into *out; errors name file and key. */
mt_status enc_json_int(const cJSON *o, const char *file, const char *key, int lo, int hi,
                       int *out, mt_err *err);
/* Tensor name (or the row's prefix + name), F32 of shape (d0) or (d0, d1)
 * (F16 and BF16 tensors converted; the copy lives until the loader is done
 * with the layer). */
mt_status enc_find_f32(enc_model *m, const st_file *f, const char *name, int64_t d0, int64_t d1,
                       const float **out, mt_err *err);
/* A host FP32 vector/table copied into backend memory (counted in the
 * model's resident bytes). */
mt_status enc_to_backend(enc_model *m, const float *src, size_t n, float **out, mt_err *err);

#endif
