/* encoder_internal.h: what the shared encoder's files share, and what an
 * architecture row's hooks (models/arch.h) see of a model: encoder.c (the
 * configuration files and loading), encoder_forward.c (the forward pass,
 * and a pass a layer at a time), encoder_stream.c (FP32's forward with the
 * weights streamed a layer at a time: calibration, the load check's
 * reference), encoder_weights.c (each weight read into the backend in its
 * GEMM's precision) and encoder_save.c (quantized files). Nothing outside
 * models/ includes it but tests/unit/test_stream_ref.c, which records a
 * whole model's calibration as the loader did before streaming, to compare. */
#ifndef MT_MODELS_ENCODER_INTERNAL_H
#define MT_MODELS_ENCODER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/quant/mix.h"
#include "engine/weights/safetensors.h"
#include "engine/text/tokenizer.h"
#include "models/arch.h"
#include "models/enc_tokenizer.h"
#include "models/encoder.h"

typedef struct enc_head enc_head;       /* models/enc_head.c */
typedef struct enc_outputs enc_outputs; /* models/enc_outputs.c */

typedef struct {
    mt_weight *qkv, *attn_out, *inter, *out; /* (3h,h) (h,h) (i,h) (h,i) */
    float *b_qkv, *b_attn_out, *b_inter, *b_out;
    void *b16[4]; /* the four biases in the 16-bit activation type (actf), or NULL */
    float *ln1_g, *ln1_b, *ln2_g, *ln2_b;
    float *q_norm, *k_norm; /* per-head Q and K RMSNorm gammas (head_dim), or NULL */
} enc_layer;

struct enc_model {
    mt_model base; /* first: an enc_model is an mt_model */
    const enc_arch *arch;
    enc_config cfg;
    mt_backend *be;
    mt_precision prec;
    mt_mix mix;          /* per-layer precisions over prec (engine/quant/mix.h) */
    char mix_text[1024]; /* its text form, "" when none */
    mt_calib_opts calib;
    int prequant; /* weights come from an enc_save_quantized file */
    float *act_max; /* calibration: per (layer, gemm) max |input| per column, or NULL */
    const float *smooth_stats; /* while loading int8: another model's act_max */
    enc_tok *tok; /* models/enc_tokenizer.h: WordPiece or BPE */
    /* config_sentence_transformers.json's prompts (info.prompt_names/texts
     * point here), owned; prompt_default its default_prompt_name */
    char **prompt_names, **prompt_texts;
    int nprompts;
    char *prompt_default;
    float *word, *pos, *type0, *emb_ln_g, *emb_ln_b; /* backend memory; pos, the norm: or NULL */
    /* The word table as the file's 16-bit codes (backend memory; word NULL)
     * where the file has it so and the backend's embed16 reads it: an LLM
     * checkpoint's table at half the FP32 copy's memory, the same values.
     * NULL: word. word_bf16: BF16 codes, else FP16. */
    uint16_t *word16;
    bool word_bf16;
    float *type1; /* the second token type (a classifier's pairs; backend memory), or NULL */
    enc_head *head; /* a classifier's head (models/enc_head.c), or NULL */
    enc_outputs *outputs; /* token heads (models/enc_outputs.c: bge-m3's sparse and
                           * ColBERT), or NULL */
    float *final_g, *final_b; /* the norm after the last layer (pre-norm rows), or NULL */
    /* every layer's attention op's parameters: heads, masks, and a row's
     * relative position bias (heads, 2*maxrel+1; pos_bias backend memory, or NULL) */
    mt_attn_params attn;
    enc_layer *layer;
    size_t gemm_bytes, other_bytes;
    unsigned graph_id; /* this model's part of its recorded forwards' keys (fwd_graph.h) */
    /* FP32 copies of 16-bit tensors read from the file (LLM checkpoints are
     * BF16 on disk), alive until enc_conv_release: one layer's at a time */
    void **conv;
    int nconv, conv_cap;
    mt_act_format actf; /* the backend's activation type for this model's pooled forwards */
};

#define GEMMS_PER_LAYER 4 /* qkv, attention output, intermediate, output */

/* A layer's widths: the Q part of the packed qkv rows (= the attention's
 * output), all of them, the intermediate GEMM's output (gate and up for a
 * gated MLP), GEMM g's input (g as GEMMS_PER_LAYER counts), and the widest
 * GEMM input (calibration's per-column maxima are that far apart). */
static inline int enc_q_width(const enc_config *c) { return c->heads * c->head_dim; }
static inline int enc_qkv_width(const enc_config *c)
{
    return (c->heads + 2 * c->kv_heads) * c->head_dim;
}
static inline int enc_inter_width(const enc_config *c)
{
    return c->gated ? 2 * c->intermediate : c->intermediate;
}
static inline int enc_gemm_k(const enc_config *c, int g)
{
    return g == 1 ? enc_q_width(c) : g == 3 ? c->intermediate : c->hidden;
}
static inline int enc_max_k(const enc_config *c)
{
    int k = c->hidden;
    for (int g = 1; g < GEMMS_PER_LAYER; g++)
        k = enc_gemm_k(c, g) > k ? enc_gemm_k(c, g) : k;
    return k;
}

/* encoder_forward.c: the forward of nlayers layers (every one: pooled, or
 * nlayers < layers: hidden states) through the backend table; pool false
 * gives the hidden states (t, h) into out. */
mt_status enc_run(enc_model *m, const int32_t *ids, const int32_t *offsets, const int32_t *segs,
                  int nseq, int nlayers, bool pool, float *out, float *norms, mt_err *err);
/* One forward of a batch taken a layer at a time (encoder_forward.c): the
 * plain forward is begin, every layer, end; a caller that loads each
 * layer's weights into m->layer[l] just before enc_pass_layer and frees
 * them after (models/encoder_stream.c) runs the same ops in the same order
 * with one layer resident. The caller sets the inputs; enc_pass_begin
 * allocates the backend buffers, uploads the inputs and runs the
 * embeddings (and their norm); enc_pass_end the final norm (when nlayers
 * is every layer) and pooling into out (pool false: the hidden states);
 * enc_pass_free frees the buffers, whatever failed. */
typedef struct {
    const int32_t *ids;     /* (t) host ids, as the row's embed hook reads them */
    const int32_t *dev_ids; /* (t) what the embed op indexes m->word with; NULL: ids */
    const int32_t *offsets; /* nseq + 1, from 0 */
    const int32_t *segs;    /* nseq token-type 1 starts, or NULL */
    int nseq, nlayers;
    int act16;              /* rows in m->actf (run) */
    bool keep_scratch;      /* the layers' buffers held from begin to end (else each
                             * enc_pass_layer allocates and frees its own) */
    void *buf[7];           /* enc_pass_begin's: backend buffers */
} enc_pass;
mt_status enc_pass_begin(enc_model *m, enc_pass *p, mt_err *err);
mt_status enc_pass_layer(enc_model *m, enc_pass *p, int l, mt_err *err);
mt_status enc_pass_end(enc_model *m, enc_pass *p, bool pool, float *out, float *norms,
                       mt_err *err);
void enc_pass_free(enc_model *m, enc_pass *p);
/* m->attn from m's config and row (MPNet's load_extras adds its bias
 * later); then whether m's backend runs every op m's row needs, else an
 * error naming the op, the row and the backend. */
mt_status enc_prepare_ops(enc_model *m, mt_err *err);
/* The pooled rows' L2 norms into norms (may be NULL), and the rows
 * divided by them when normalize (sentence-transformers' Normalize). */
void enc_normalize_rows(float *out, int nseq, int h, bool normalize, float *norms);

/* encoder.c */
mt_status enc_read_configs(const char *dir, const enc_arch *a, enc_config *c, mt_err *err);
/* enc_load_model with int8's smoothing statistics given (enc_calibrate's
 * layout; NULL: calibrated while loading, as enc_load_model does): for
 * tests that compare two ways of calibrating. */
mt_status enc_load_smoothed(const char *dir, const enc_arch *a, mt_backend *be,
                            const mt_model_opts *opts, const float *stats, mt_model **out,
                            mt_err *err);
/* Frees layer L's weights and vectors on be and zeroes it. */
void enc_layer_free(mt_backend *be, enc_layer *L);
/* Frees m and everything it holds (m may be partly loaded, or NULL). */
void enc_model_free(enc_model *m);

/* encoder_stream.c */
/* Per-column activation maxima of every GEMM input of dir's FP32 model on
 * the built-in calibration text, in batches of 16 sentences as a whole
 * FP32 model's forward would record them, with the weights streamed a
 * layer at a time: *out gets layers x 4 x max(h, i) floats. */
mt_status enc_calibrate(const char *dir, const enc_arch *a, mt_backend *be, int max_seq_len,
                        float **out, mt_err *err);

/* enc_head.c: a sequence classifier's head. enc_head_config reads from
 * config.json (j, at path) whether the folder is one and its label count
 * into c (c->classify, nlabels, pairs); enc_load_head its labels and the
 * row's head tensors from f into m->head (nothing for an embedder);
 * enc_head_scores the labels' raw scores (nseq, nlabels) from each
 * sequence's first-token hidden state (nseq, hidden), on the host. */
mt_status enc_head_config(const cJSON *j, const char *path, const enc_arch *a, enc_config *c,
                          mt_err *err);
mt_status enc_load_head(enc_model *m, const char *dir, const st_file *f, mt_err *err);
mt_status enc_head_scores(const enc_head *hd, const float *first, int nseq, float *out,
                          mt_err *err);
const char *const *enc_head_labels(const enc_head *hd);
void enc_head_free(enc_head *hd);
/* A linear layer's name.weight (rows, hidden) and name.bias (rows) from f
 * as new FP32 host copies *w and *b (name NULL: "weight" and "bias", a
 * Linear's own state dict); *rows 0: as many rows as the file's weight
 * has (1..65536; hidden where it has no 2-dim weight, so that the error
 * says what is wanted). */
mt_status enc_host_linear(enc_model *m, const st_file *f, const char *name, int *rows,
                          float **w, float **b, mt_err *err);
/* w . x (k each) as the heads add it: each product in float into lane
 * c % 8 (as a vectorised GEMM adds), then the lanes in pairs. */
float enc_dot8(const float *w, const float *x, int k);

/* enc_outputs.c: token heads beside the pooled vector (bge-m3's
 * sparse_linear and colbert_linear files in the folder). enc_load_outputs
 * reads them into m->outputs where the folder has them (an embedder only);
 * enc_outputs_forward is mt_model_ops.forward_outputs. */
mt_status enc_load_outputs(enc_model *m, const char *dir, mt_err *err);
mt_status enc_outputs_forward(enc_model *m, const int32_t *ids, const int32_t *offsets,
                              int nseq, float *out, float *norms, mt_err *err);
bool enc_outputs_sparse(const enc_outputs *o);
int enc_outputs_colbert_dim(const enc_outputs *o);
void enc_outputs_free(enc_outputs *o);

/* roberta_pos.c: RoBERTa's position ids (pad_id + 1 + index, <pad> at
 * pad_id) as a row's embed and recordable hooks (MPNet, XLM-RoBERTa). */
mt_status enc_roberta_embed(enc_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                            const int32_t *d_ids, const int32_t *d_off, float *x, mt_err *err);
bool enc_roberta_recordable(const enc_model *m, const int32_t *ids, int t);
/* config.json's pad_token_id into c->pad_id, and the longest text the
 * positions after it allow into c->max_seq_len; errors name the field. */
mt_status enc_roberta_pad(const cJSON *j, const char *path, enc_config *c, mt_err *err);

/* encoder_weights.c */
/* The tensor name, or the row's prefix + name; NULL when neither is there. */
const st_tensor *enc_find(const enc_arch *a, const st_file *f, const char *name);
mt_status enc_load_vec(enc_model *m, const st_file *f, const char *name, int64_t n,
                       float **out, mt_err *err);
/* Frees the FP32 copies of 16-bit file tensors made since the last call
 * (the loader calls it after the embeddings and after each layer, once
 * what they held is in the backend). */
void enc_conv_release(enc_model *m);
/* Whether a file tensor of dtype d reads as FP32 values (F32, F16, BF16),
 * and its values widened to FP32 into dst (st_numel(t) floats: F32
 * copied, F16 and BF16 converted exactly; another dtype is an error). */
bool enc_f32_readable(st_dtype d);
mt_status enc_widen_f32(const st_tensor *t, float *dst, mt_err *err);
mt_status enc_load_layer(enc_model *m, const st_file *f, int l, mt_err *err);
/* The word, position and first token-type tables (or a zero row) and the
 * embedding LayerNorm; rows (n; NULL: all): the only word-table rows to
 * read, which the embed op then indexes 0..n-1 (encoder_stream.c). */
mt_status enc_load_embeddings(enc_model *m, const st_file *f, const int32_t *rows, int n,
                              mt_err *err);
mt_status enc_check_quant_meta(const st_file *f, mt_precision p, const mt_calib_opts *c,
                               const char *mix, mt_err *err);
bool enc_uses_precision(const enc_model *m, mt_precision p);
mt_status enc_setup_mix(enc_model *m, const char *text, mt_err *err);
void enc_scale_name(const char *weight, char *out, size_t cap);
void enc_smooth_name(const char *weight, char *out, size_t cap);
void enc_col_absmax(const float *w, int n, int k, float *colmax);
void enc_smooth_finish(const float *act_max, float *s, int k);

#endif
