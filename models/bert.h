/* bert.h: a BERT encoder with sentence-transformers pooling (mean over the
 * tokens, then L2 normalisation), as all-MiniLM-L6-v2 is served.
 *
 * A model is loaded from a Hugging Face folder (config.json,
 * model.safetensors, vocab.txt, sentence_bert_config.json, 1_Pooling/,
 * modules.json) onto a backend, with its GEMM weights in one precision,
 * and used through the model interface (engine/model.h); what is declared
 * here is what only a BERT model has.
 */
#ifndef MT_MODELS_BERT_H
#define MT_MODELS_BERT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/quant/quant.h"
#include "engine/status.h"

typedef struct bert_model bert_model; /* an mt_model (engine/model.h) of arch "bert" */

typedef struct {
    int vocab, hidden, layers, heads, intermediate, max_positions, type_vocab;
    float eps;
    int max_seq_len;  /* sentence-transformers' max_seq_length (256 for MiniLM) */
    int normalize;    /* modules.json has a Normalize module */
    int pool_cls;     /* 1_Pooling/config.json: CLS pooling (else mean) */
    int mpnet;        /* model_type "mpnet": relative position bias, RoBERTa positions */
    int buckets;      /* MPNet relative_attention_num_buckets (32) */
    int pad_id;       /* MPNet pad_token_id (its position embeddings' padding_idx) */
} bert_config;

/* Loads dir onto be (models/registry.c's entry for model_type "bert" and
 * "mpnet": MPNet shares BERT's layers, see models/mpnet.c).
 * Errors name the file and field or tensor at fault. */
mt_status bert_load_model(const char *dir, mt_backend *be, const mt_model_opts *opts,
                          mt_model **out, mt_err *err);

/* The architecture of m, a model from bert_load_model. */
const bert_config *bert_get_config(const mt_model *m);

/* The hidden states (tokens, hidden) after the embeddings (nlayers = 0) or
 * after the first nlayers encoder layers, before pooling: for checking the
 * forward pass piece by piece against a reference. */
mt_status bert_hidden_states(mt_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                             int nlayers, float *out, mt_err *err);

/* Writes dir's model as a safetensors file whose GEMM weights are already in
 * precision p (int8/fp8 with "<name>_scale" F32 tensors; fp16/bf16 as F16/
 * BF16), everything else FP32, and metadata naming format, precision and
 * calibration. A mix (engine/quant/mix.h; NULL or "" for none) gives some GEMM
 * weights another precision, and is recorded in the metadata.
 * bert_load_model with opts.weights = out_path (and the same mix) loads it
 * without re-quantizing, and refuses it when the metadata does not match. */
mt_status bert_save_quantized(const char *dir, mt_precision p, const mt_calib_opts *calib,
                              const char *mix, const char *out_path, mt_err *err);

#endif
