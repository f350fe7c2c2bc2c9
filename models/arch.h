/* arch.h: what an architecture row is. Each encoder family (BERT, MPNet,
 * DistilBERT, ...) is one const enc_arch in its own file (models/arch_bert.c,
 * models/mpnet.c, models/distilbert.c), listed once in models/registry.c;
 * the shared encoder (models/encoder*.c) reads config.json, names tensors,
 * embeds, attends and pools through the row alone, in the manner of
 * llama.cpp's per-architecture key and tensor-name tables and hooks.
 *
 * A row gives data (config.json's key names, the tensor names, the
 * tokenizer's special tokens, the default pooling) and optional hooks
 * (NULL: the BERT-shaped default): its own config fields, extra weights
 * (an attention bias: m->pos_bias / m->maxrel, passed to every attention
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

/* config.json's key for each number every encoder has. act, eps and
 * type_vocab may be NULL: then no activation is checked, eps is 1e-12 and
 * the model has no token types. */
typedef struct {
    const char *vocab, *hidden, *layers, *heads, *intermediate, *max_positions;
    const char *act;        /* its value, when a string, must be "gelu" */
    const char *eps;        /* the LayerNorm epsilon */
    const char *type_vocab; /* token-type rows */
} enc_config_keys;

/* The tensors before the layers. type NULL: no token types (a zero row is
 * added in their place). ln is the LayerNorm's name, without
 * ".weight"/".bias". */
typedef struct {
    const char *word, *pos, *type, *ln;
} enc_embed_names;

/* One layer's tensors, each without ".weight"/".bias": layer l's tensor
 * is "<layers>.<l>.<name>.weight" (enc_arch.layers). The order is the
 * forward's: Q, K, V, attention output, post-attention LayerNorm, MLP in,
 * MLP out, post-MLP LayerNorm. */
typedef struct {
    const char *q, *k, *v, *o, *ln1, *inter, *out, *ln2;
} enc_layer_names;

struct enc_arch {
    const char *model_type; /* config.json "model_type"; also info.arch */
    /* Tried in front of every tensor name the file lacks ("bert." for
     * BertFor* checkpoints); NULL: none. */
    const char *prefix;
    enc_config_keys keys;
    enc_embed_names emb;
    const char *layers; /* "encoder.layer" */
    enc_layer_names layer;
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
     * position bias into m->pos_bias / m->maxrel, which every layer's
     * attention op is given). Runs after the embeddings are loaded. */
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
/* Tensor name (or the row's prefix + name), F32 of shape (d0) or (d0, d1). */
mt_status enc_find_f32(const enc_model *m, const st_file *f, const char *name, int64_t d0,
                       int64_t d1, const float **out, mt_err *err);
/* A host FP32 vector/table copied into backend memory (counted in the
 * model's resident bytes). */
mt_status enc_to_backend(enc_model *m, const float *src, size_t n, float **out, mt_err *err);

#endif
