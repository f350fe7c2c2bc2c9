/* bert.h: a BERT encoder with sentence-transformers pooling (mean over the
 * tokens, then L2 normalisation), as all-MiniLM-L6-v2 is served.
 *
 * A model is loaded from a Hugging Face folder (config.json,
 * model.safetensors, vocab.txt, sentence_bert_config.json, 1_Pooling/,
 * modules.json) onto a backend, with its GEMM weights in one precision.
 * bert_forward is thread-safe on a shared model: every call has its own
 * activations.
 */
#ifndef MT_MODELS_BERT_H
#define MT_MODELS_BERT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/quant.h"
#include "engine/status.h"
#include "engine/tokenizer.h"

typedef struct bert_model bert_model;

typedef struct {
    int vocab, hidden, layers, heads, intermediate, max_positions, type_vocab;
    float eps;
    int max_seq_len;  /* sentence-transformers' max_seq_length (256 for MiniLM) */
    int normalize;    /* modules.json has a Normalize module */
} bert_config;

typedef struct {
    mt_precision precision;
    mt_calib_opts calib; /* how int8/fp8 scales are chosen */
    int max_seq_len;     /* 0: the model's own; else a lower cap */
    const char *weights; /* NULL/"": dir/model.safetensors (FP32, quantized at load);
                          * else a file from bert_save_quantized, loaded as is */
} bert_load_opts;

/* Loads dir onto be. Errors name the file and field or tensor at fault. */
mt_status bert_load(const char *dir, mt_backend *be, const bert_load_opts *opts,
                    bert_model **out, mt_err *err);
void bert_free(bert_model *m);

const bert_config *bert_get_config(const bert_model *m);
const tok_t *bert_tokenizer(const bert_model *m);
mt_precision bert_precision(const bert_model *m);
/* Resident bytes of the GEMM weights (scales included) and of everything. */
size_t bert_gemm_weight_bytes(const bert_model *m);
size_t bert_resident_bytes(const bert_model *m);

/* Embeds nseq packed sequences: ids[offsets[s] .. offsets[s+1]) are the
 * token ids of sequence s (with [CLS] and [SEP]); out gets (nseq, hidden)
 * host floats. Every length must be in 1..max_seq_len and every id < vocab. */
mt_status bert_forward(bert_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                       float *out, mt_err *err);

/* The hidden states (tokens, hidden) after the embeddings (nlayers = 0) or
 * after the first nlayers encoder layers, before pooling: for checking the
 * forward pass piece by piece against a reference. */
mt_status bert_hidden_states(bert_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                             int nlayers, float *out, mt_err *err);

/* Tokenizes texts with the model's tokenizer (truncating at max_seq_len) and
 * embeds them: the whole path from text to vector. n_tokens (may be NULL)
 * gets the total token count. MT_EUTF8 names the input index. */
mt_status bert_embed_texts(bert_model *m, const char *const *texts, const size_t *lens, int n,
                           float *out, long *n_tokens, mt_err *err);

/* Writes dir's model as a safetensors file whose GEMM weights are already in
 * precision p (int8/fp8 with "<name>_scale" F32 tensors; fp16/bf16 as F16/
 * BF16), everything else FP32, and metadata naming format, precision and
 * calibration. bert_load with opts.weights = out_path loads it without
 * re-quantizing, and refuses it when the metadata does not match. */
mt_status bert_save_quantized(const char *dir, mt_precision p, const mt_calib_opts *calib,
                              const char *out_path, mt_err *err);

#endif
