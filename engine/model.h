/* model.h: the model interface: all that the server and the command-line
 * tools know of a model, whatever its architecture.
 *
 * A model is a table of operations (like the backend table in
 * engine/backend.h) and a few facts about it. The shared encoder in models/
 * (encoder.c) fills the table for every architecture row; models/registry.c
 * picks the row of a folder from its config.json "model_type" and loads it.
 * Nothing above engine/ names an architecture: a new one is added in models/
 * alone.
 *
 * Texts become vectors in two steps, so that a scheduler can batch the
 * second: tokenize (per text, any thread) then forward (a batch of packed
 * token ids -> one pooled, possibly normalised vector per text). Pooling is
 * part of forward; info.pooling says which one the model does.
 * forward_tokens is the same forward stopped before pooling: one vector
 * per token.
 */
#ifndef MT_ENGINE_MODEL_H
#define MT_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/quant/quant.h"
#include "engine/status.h"

typedef struct mt_model mt_model;

/* How a sequence's rows become its vector (sentence-transformers'
 * 1_Pooling): their mean, the first (CLS) row, or the last token's row
 * (decoder embedders: Qwen3-Embedding). */
typedef enum { MT_POOL_MEAN, MT_POOL_CLS, MT_POOL_LAST } mt_pooling;

/* What a model answers: a vector per text (an embedder), or scores per
 * text or text pair (a sequence classifier: a cross-encoder reranker has
 * one label, its relevance score). */
typedef enum { MT_TASK_EMBED = 0, MT_TASK_CLASSIFY } mt_task;

/* "embed", "classify". */
const char *mt_task_name(mt_task t);

/* "mean", "cls", "last_token" (TEI's names). */
const char *mt_pooling_name(mt_pooling p);

/* How to load a model. */
typedef struct {
    mt_precision precision;
    mt_calib_opts calib; /* how int8/fp8 scales are chosen */
    int max_seq_len;     /* 0: the model's own; else a lower cap */
    const char *weights; /* NULL/"": the folder's FP32 model.safetensors, quantized at
                          * load; else a file from mt_model_save_quantized, as is */
    const char *mix;     /* NULL/"": every GEMM in precision (with a weights file: the
                          * rules it records); else per-layer rules (engine/quant/mix.h)
                          * over it; a weights file must have been written with them */
} mt_model_opts;

/* What a loaded model is: set by its loader, constant afterwards. */
typedef struct {
    const char *arch;       /* "bert", ... */
    int hidden;             /* size of one output vector */
    int max_seq_len;        /* tokens per text, special tokens included */
    int vocab;
    int layers;             /* encoder layers */
    int intermediate;       /* feed-forward width */
    mt_precision precision; /* of the GEMM weights (where the mix gives none other) */
    const char *mix;        /* the per-layer rules over it ("" when uniform) */
    mt_pooling pooling;
    bool normalize;         /* output vectors have unit L2 norm */
    /* The prompts of config_sentence_transformers.json ("prompts": name ->
     * text put before each input, as sentence-transformers' encode does),
     * nprompts of them; default_prompt: "default_prompt_name"'s name, or
     * NULL. prompt_pooled: 1_Pooling's include_prompt (false: the prompt's
     * tokens would be left out of the pooling, which is not done here, so
     * such a model's prompts are refused where asked for). */
    int nprompts;
    const char *const *prompt_names, *const *prompt_texts;
    const char *default_prompt;
    bool prompt_pooled;
    /* A classifier (task MT_TASK_CLASSIFY): nlabels scores per input, named
     * by labels (config.json's id2label); pairs: its inputs may be text
     * pairs (a cross-encoder: tokenize_pair). An embedder: 0, NULL, false. */
    mt_task task;
    int nlabels;
    const char *const *labels;
    bool pairs;
    /* Token heads beside the pooled vector (bge-m3's sparse_linear.pt and
     * colbert_linear.pt): sparse, a lexical weight per token; colbert_dim >
     * 0, a ColBERT vector of that width per token. forward_outputs gives
     * them with the pooled vector, from one forward. None: false, 0. */
    bool sparse;
    int colbert_dim;
    size_t gemm_bytes;      /* resident GEMM weights, scales included */
    size_t resident_bytes;  /* everything the model keeps in its backend */
} mt_model_info;

/* The text of the prompt named name, or NULL when the model has none so
 * named. */
const char *mt_model_prompt(const mt_model_info *info, const char *name);

typedef struct mt_model_ops {
    void (*free)(mt_model *m);
    /* len bytes of UTF-8 -> token ids with the model's special tokens
     * (capacity max_len >= 2, keeping the first max_len - 2 pieces when
     * longer). *n gets the count, full_len (may be NULL) the count without
     * truncation. Invalid UTF-8 is MT_EUTF8. Thread-safe. */
    mt_status (*tokenize)(const mt_model *m, const char *text, size_t len, int32_t *ids,
                          int max_len, int *n, int *full_len, mt_err *err);
    /* The vocabulary entry of token id (NUL-terminated; "##"-style pieces as
     * the vocabulary spells them), or NULL for an id out of range;
     * *special says whether it is a special token the tokenizer adds around
     * a text ([CLS], [SEP]). */
    const char *(*token_text)(const mt_model *m, int32_t id, bool *special);
    /* tokenize, and each token's byte span [start, end) in text into
     * offsets (2 per token, room for 2 * max_len), as Hugging Face
     * tokenizers aligns it through normalization; the special tokens the
     * template adds get 0, 0. Truncation as tokenize. NULL, or
     * MT_EUNSUPPORTED, where the tokenizer gives no offsets. */
    mt_status (*tokenize_offsets)(const mt_model *m, const char *text, size_t len, int32_t *ids,
                                  int32_t *offsets, int max_len, int *n, int *full_len,
                                  mt_err *err);
    /* Token ids back into text, as the model's Hugging Face tokenizer
     * decodes them (WordPiece: "##" pieces glued on, no space before
     * . , ? !), special tokens left out when skip_special. *out gets a new
     * string (free() it). An id out of range is MT_EINVAL naming its
     * index. */
    mt_status (*decode)(const mt_model *m, const int32_t *ids, int n, bool skip_special,
                        char **out, mt_err *err);
    /* Embeds nseq packed sequences: ids[offsets[s] .. offsets[s+1]) are
     * sequence s (from tokenize; lengths 1..max_seq_len); out gets
     * (nseq, hidden) host floats. norms (may be NULL) gets each vector's L2
     * norm as pooled, before the model's own normalisation (info.normalize):
     * out row * norm is the raw pooled vector (TEI's "normalize": false).
     * Thread-safe on a shared model: every call has its own activations. */
    mt_status (*forward)(mt_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                         float *out, float *norms, mt_err *err);
    /* The same forward without pooling (TEI's /embed_all): out gets
     * (offsets[nseq], hidden) host floats, the last hidden state of every
     * token of every sequence, in order, as the model computes them before
     * pooling (not normalised); their mean over a sequence is its pooled
     * vector for a mean-pooling model. NULL: the model has none.
     * Thread-safe like forward. */
    mt_status (*forward_tokens)(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                int nseq, float *out, mt_err *err);
    /* A classifier's input: the text pair (a, b) with the model's pair
     * template (BERT: [CLS] a [SEP] b [SEP]), cut longest first to max_len;
     * *seg gets the index where token type 1 starts (*n where every token
     * has type 0). NULL: the model takes no pairs. Thread-safe. */
    mt_status (*tokenize_pair)(const mt_model *m, const char *a, size_t alen, const char *b,
                               size_t blen, int32_t *ids, int max_len, int *n, int *seg,
                               int *full_len, mt_err *err);
    /* A classifier's forward: nseq packed sequences as forward takes them,
     * segs[s] sequence s's seg from tokenize_pair (NULL, or offsets' length
     * for a single text: all type 0); out gets (nseq, info.nlabels) raw
     * scores (logits). NULL: not a classifier. Thread-safe like forward. */
    mt_status (*forward_scores)(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                const int32_t *segs, int nseq, float *out, mt_err *err);
    /* A model with token heads (info.sparse or info.colbert_dim): one
     * forward of nseq packed sequences (as forward takes them) gives every
     * output. out gets offsets[nseq] rows of mt_outputs_width(info) floats,
     * one per token t: out[t][0] its sparse weight (the ReLU of
     * sparse_linear on its hidden state; 0 for a special token, and 0 with
     * no sparse head), out[t][1 ..] its ColBERT vector (colbert_linear of
     * its hidden state, L2-normalised; colbert_dim floats, zero with no
     * such head), except each sequence's first token (CLS, which has no
     * ColBERT vector): its row holds 0 then the sequence's pooled vector
     * (hidden floats), as forward gives it, and norms[s] (may be NULL) its
     * norm before normalisation. The rest of a row is zero. NULL: the
     * model has no token heads. Thread-safe like forward. */
    mt_status (*forward_outputs)(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                 int nseq, float *out, float *norms, mt_err *err);
} mt_model_ops;

struct mt_model {
    const mt_model_ops *ops;
    mt_model_info info;
};

/* The floats of one row of forward_outputs: the sparse weight, then the
 * wider of the ColBERT vector and the pooled vector. */
static inline int mt_outputs_width(const mt_model_info *info)
{
    return 1 + (info->colbert_dim > info->hidden ? info->colbert_dim : info->hidden);
}

/* ---- by folder (models/registry.c) ---------------------------------- */

/* Loads the model in dir onto be, with the architecture its config.json
 * names. Errors name the file and field or tensor at fault. */
mt_status mt_model_load(const char *dir, mt_backend *be, const mt_model_opts *o, mt_model **out,
                        mt_err *err);
/* Writes dir's model as a safetensors file whose GEMM weights are already
 * in precision p (or, with a mix, in what its rules give each one), with
 * the scales and metadata that mt_model_load (with o->weights = out_path
 * and the same mix) checks and loads without re-quantizing (on the CPU
 * backend to the very vectors of loading dir at p). dir's weights may be F32, F16 or BF16, in
 * one file or shards; one GEMM weight at a time is widened to FP32, never
 * the whole model. */
mt_status mt_model_save_quantized(const char *dir, mt_precision p, const mt_calib_opts *calib,
                                  const char *mix, const char *out_path, mt_err *err);

/* FP32's vectors of the load check's probe texts for the model in dir
 * (what mt_model_embed_probes gives from a whole FP32 model of dir loaded
 * with this max_seq_len, the same bits on the CPU backend), computed on be
 * without a whole FP32 model: the probes' hidden states stay between
 * layers and the FP32 weights are read one layer at a time, run and freed;
 * of the embedding table only the rows of the probes' token ids are read.
 * *out gets mt_probe_count() x *hidden floats (free() them), NaN before
 * the forward writes them (a row left unwritten fails any drift bound). */
mt_status mt_model_reference_probes(const char *dir, mt_backend *be, int max_seq_len,
                                    float **out, int *hidden, mt_err *err);

/* ---- any model (engine/model.c) --------------------------------------- */

static inline void mt_model_free(mt_model *m)
{
    if (m)
        m->ops->free(m);
}

static inline const mt_model_info *mt_model_get_info(const mt_model *m)
{
    return &m->info;
}

static inline mt_status mt_model_tokenize(const mt_model *m, const char *text, size_t len,
                                          int32_t *ids, int max_len, int *n, int *full_len,
                                          mt_err *err)
{
    return m->ops->tokenize(m, text, len, ids, max_len, n, full_len, err);
}

static inline mt_status mt_model_tokenize_offsets(const mt_model *m, const char *text,
                                                  size_t len, int32_t *ids, int32_t *offsets,
                                                  int max_len, int *n, int *full_len, mt_err *err)
{
    if (!m->ops->tokenize_offsets)
        return mt_fail(err, MT_EUNSUPPORTED, "this model (%s) gives no token offsets",
                       m->info.arch);
    return m->ops->tokenize_offsets(m, text, len, ids, offsets, max_len, n, full_len, err);
}

static inline mt_status mt_model_forward(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                         int nseq, float *out, float *norms, mt_err *err)
{
    return m->ops->forward(m, ids, offsets, nseq, out, norms, err);
}

static inline mt_status mt_model_forward_tokens(mt_model *m, const int32_t *ids,
                                                const int32_t *offsets, int nseq, float *out,
                                                mt_err *err)
{
    if (!m->ops->forward_tokens)
        return mt_fail(err, MT_EUNSUPPORTED, "this model (%s) has no token-level output",
                       m->info.arch);
    return m->ops->forward_tokens(m, ids, offsets, nseq, out, err);
}

static inline mt_status mt_model_tokenize_pair(const mt_model *m, const char *a, size_t alen,
                                               const char *b, size_t blen, int32_t *ids,
                                               int max_len, int *n, int *seg, int *full_len,
                                               mt_err *err)
{
    if (!m->ops->tokenize_pair)
        return mt_fail(err, MT_EUNSUPPORTED, "this model (%s) takes no text pairs", m->info.arch);
    return m->ops->tokenize_pair(m, a, alen, b, blen, ids, max_len, n, seg, full_len, err);
}

static inline mt_status mt_model_forward_scores(mt_model *m, const int32_t *ids,
                                                const int32_t *offsets, const int32_t *segs,
                                                int nseq, float *out, mt_err *err)
{
    if (!m->ops->forward_scores)
        return mt_fail(err, MT_EUNSUPPORTED, "this model (%s) is not a classifier", m->info.arch);
    return m->ops->forward_scores(m, ids, offsets, segs, nseq, out, err);
}

static inline mt_status mt_model_forward_outputs(mt_model *m, const int32_t *ids,
                                                 const int32_t *offsets, int nseq, float *out,
                                                 float *norms, mt_err *err)
{
    if (!m->ops->forward_outputs)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "this model (%s) has no sparse or ColBERT head", m->info.arch);
    return m->ops->forward_outputs(m, ids, offsets, nseq, out, norms, err);
}

/* ---- the load check ---------------------------------------------------
 * A build whose GEMMs are not all FP32 embeds the built-in probe texts
 * (engine/text/probe_text.h) and is compared with FP32's vectors of the same
 * texts: its drift must be within its precisions' bounds (the traits
 * table's check_mean_cos and check_min_cos), or it does not serve. A
 * kernel that computes wrong sums (an int8 GEMM whose 16-bit pair sums
 * saturate, as oneDNN's does on CPUs without VNNI) fails it by far. */

/* Figures of one set of vectors against another. */
typedef struct {
    int probes;
    double mean_cos, min_cos;
} mt_drift;

/* How many probe texts there are (rows of mt_model_embed_probes). */
int mt_probe_count(void);
/* Embeds the probe texts with m into out (mt_probe_count() x hidden). */
mt_status mt_model_embed_probes(mt_model *m, float *out, mt_err *err);
/* The mean and the least cosine between the rows of a and b (n rows of
 * dim floats); a row that is zero or not finite counts as -1. */
mt_drift mt_drift_between(const float *a, const float *b, int n, int dim);
/* The bounds m's drift must keep: the loosest of its precision's and its
 * mix's precisions'. False when m has none (every GEMM FP32). */
bool mt_model_drift_bound(const mt_model *m, mt_drift *bound);

/* The whole path from text to vector: tokenizes n texts (truncating at
 * max_seq_len; lens may be NULL for NUL-terminated texts) and embeds them
 * in one forward. n_tokens (may be NULL) gets the total token count.
 * Errors name the input index. */
mt_status mt_model_embed_texts(mt_model *m, const char *const *texts, const size_t *lens, int n,
                               float *out, long *n_tokens, mt_err *err);

#endif
