/* encoder.h: the shared sentence encoder (a BERT-shaped stack of
 * post-LayerNorm transformer layers) with sentence-transformers pooling
 * (mean or CLS, then L2 normalisation where modules.json says so), run for
 * every architecture row of models/registry.c (models/arch.h says what a
 * row gives: config keys, tensor names, hooks). The encoder never asks
 * which row it runs.
 *
 * A model is loaded from a Hugging Face folder (config.json,
 * model.safetensors, vocab.txt, sentence_bert_config.json, 1_Pooling/,
 * modules.json) onto a backend, with its GEMM weights in one precision,
 * and used through the model interface (engine/model.h); what is declared
 * here is what the registry and the tests reach beyond that interface.
 */
#ifndef MT_MODELS_ENCODER_H
#define MT_MODELS_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/quant/quant.h"
#include "engine/status.h"

typedef struct enc_arch enc_arch; /* one architecture's row (models/arch.h) */

typedef struct {
    int vocab, hidden, layers, heads, intermediate, max_positions;
    int kv_heads;     /* key/value heads (= heads but for grouped-query attention) */
    int head_dim;     /* each head's width (hidden / heads unless config.json says) */
    float rope_theta; /* the rotary positions' base, where the row has them */
    int gated;        /* the row's MLP is gated: the intermediate GEMM is 2 x intermediate wide */
    int type_vocab;   /* token-type rows; 0 where the row has no token types */
    float eps;
    int max_seq_len;  /* sentence-transformers' max_seq_length (256 for MiniLM) */
    int normalize;    /* modules.json has a Normalize module */
    mt_pooling pool;  /* 1_Pooling/config.json: mean, CLS or last-token pooling */
    bool include_prompt; /* 1_Pooling/config.json's include_prompt (default true) */
    int pad_id;       /* the pad token id, where the row's hooks use it (MPNet's positions) */
    bool classify;    /* config.json's architectures name a *ForSequenceClassification:
                       * a head of nlabels scores on the first token (models/enc_head.c) */
    int nlabels;
    bool pairs;       /* it scores text pairs (every classifier does: a cross-encoder) */
} enc_config;

/* Loads dir onto be as an architecture of row a (models/registry.c picks
 * the row by config.json's model_type). Errors name the file and field or
 * tensor at fault. */
mt_status enc_load_model(const char *dir, const enc_arch *a, mt_backend *be,
                         const mt_model_opts *opts, mt_model **out, mt_err *err);

/* FP32's vectors of the built-in probe texts for dir (of row a), with the
 * weights streamed a layer at a time (models/encoder_stream.c;
 * engine/model.h's mt_model_reference_probes says the contract). */
mt_status enc_reference_probes(const char *dir, const enc_arch *a, mt_backend *be,
                               int max_seq_len, float **out, int *hidden, mt_err *err);

/* The architecture of m, a model from enc_load_model. */
const enc_config *enc_get_config(const mt_model *m);

/* The hidden states (tokens, hidden) after the embeddings (nlayers = 0) or
 * after the first nlayers encoder layers, before pooling: for checking the
 * forward pass piece by piece against a reference. */
mt_status enc_hidden_states(mt_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                            int nlayers, float *out, mt_err *err);

/* Writes dir's model (of row a) as a safetensors file whose GEMM weights are
 * already in precision p (int8/fp8 with "<name>_scale" F32 tensors; fp16/
 * bf16 as F16/BF16; fp32 as F32), everything else as dir's weights have it
 * (F32, or a 16-bit checkpoint's F16/BF16), and metadata naming format,
 * precision and calibration. dir's weights are one file or shards, F32,
 * F16 or BF16: each GEMM weight is widened to FP32 just before it is
 * quantized, and the file written a tensor at a time (one output file,
 * whatever the shards); a GEMM weight of another dtype is refused, naming
 * it. A mix (engine/quant/mix.h; NULL or "" for none)
 * gives some GEMM weights another precision, and is recorded in the
 * metadata. enc_load_model with opts.weights = out_path (and the same mix)
 * loads it without re-quantizing, and refuses it when the metadata does not
 * match. */
mt_status enc_save_quantized(const char *dir, const enc_arch *a, mt_precision p,
                             const mt_calib_opts *calib, const char *mix, const char *out_path,
                             mt_err *err);

#endif
