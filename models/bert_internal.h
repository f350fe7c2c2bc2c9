/* bert_internal.h: what the BERT model's three files share: bert.c (the
 * configuration files, loading, calibration and the forward pass),
 * bert_weights.c (each weight read into the backend in its GEMM's
 * precision) and bert_save.c (quantized files). Nothing outside
 * models/bert*.c includes it. */
#ifndef MT_MODELS_BERT_INTERNAL_H
#define MT_MODELS_BERT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/quant/mix.h"
#include "engine/weights/safetensors.h"
#include "engine/text/tokenizer.h"
#include "models/bert.h"

typedef struct {
    mt_weight *qkv, *attn_out, *inter, *out; /* (3h,h) (h,h) (i,h) (h,i) */
    float *b_qkv, *b_attn_out, *b_inter, *b_out;
    float *ln1_g, *ln1_b, *ln2_g, *ln2_b;
} bert_layer;

struct bert_model {
    mt_model base; /* first: a bert_model is an mt_model */
    bert_config cfg;
    mt_backend *be;
    mt_precision prec;
    mt_mix mix;          /* per-layer precisions over prec (engine/quant/mix.h) */
    char mix_text[1024]; /* its text form, "" when none */
    mt_calib_opts calib;
    int prequant; /* weights come from a bert_save_quantized file */
    float *act_max; /* calibration: per (layer, gemm) max |input| per column, or NULL */
    const float *smooth_stats; /* while loading int8: another model's act_max */
    tok_t *tok;
    float *word, *pos, *type0, *emb_ln_g, *emb_ln_b; /* backend memory */
    float *pos_bias; /* MPNet: (heads, 2*maxrel+1) relative position bias, or NULL */
    int maxrel;
    bert_layer *layer;
    size_t gemm_bytes, other_bytes;
    unsigned graph_id; /* this model's part of its recorded forwards' keys (fwd_graph.h) */
};

#define GEMMS_PER_LAYER 4 /* qkv, attention output, intermediate, output */

/* bert.c */
mt_status bert_read_configs(const char *dir, bert_config *c, mt_err *err);
/* Per-column activation maxima of every GEMM input of dir's FP32 model on
 * the built-in calibration text: *out gets layers x 4 x max(h, i) floats. */
mt_status bert_calibrate(const char *dir, mt_backend *be, int max_seq_len, float **out,
                         mt_err *err);

/* mpnet.c: what MPNet adds to BERT's layers */
#include <cJSON.h>
/* config.json's MPNet fields (relative_attention_num_buckets, pad_token_id). */
mt_status mpnet_read_config(const cJSON *j, const char *path, bert_config *c, mt_err *err);
/* transformers' MPNet relative_position_bucket (bidirectional, max distance 128). */
int mpnet_bucket(int rel, int buckets, int max_distance);
/* The relative position bias table (encoder.relative_attention_bias) and a
 * zero token-type row. */
mt_status mpnet_load_extras(bert_model *m, const st_file *f, mt_err *err);
/* Embeddings with RoBERTa's position ids: position pad_id + 1 + (non-pad
 * tokens before) for each non-pad token, pad_id for a <pad> in the text.
 * ids / offsets on the host, d_ids / d_off their backend copies. */
mt_status mpnet_embed(bert_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                      const int32_t *d_ids, const int32_t *d_off, float *x, mt_err *err);
/* The names of a layer's tensors: BERT's or MPNet's. */
typedef struct {
    const char *q, *k, *v, *o, *ln1, *inter, *out, *ln2;
} bert_names;
const bert_names *bert_layer_names(const bert_model *m);

/* bert_weights.c */
mt_status bert_find_f32(const st_file *f, const char *name, int64_t d0, int64_t d1,
                        const float **out, mt_err *err);
mt_status bert_to_backend(bert_model *m, const float *src, size_t n, float **out, mt_err *err);
mt_status bert_load_vec(bert_model *m, const st_file *f, const char *name, int64_t n,
                        float **out, mt_err *err);
mt_status bert_load_layer(bert_model *m, const st_file *f, int l, mt_err *err);
/* The word, position and first token-type tables and the embedding LayerNorm. */
mt_status bert_load_embeddings(bert_model *m, const st_file *f, mt_err *err);
mt_status bert_check_quant_meta(const st_file *f, mt_precision p, const mt_calib_opts *c,
                                const char *mix, mt_err *err);
bool bert_uses_precision(const bert_model *m, mt_precision p);
mt_status bert_setup_mix(bert_model *m, const char *text, mt_err *err);
void bert_scale_name(const char *weight, char *out, size_t cap);
void bert_smooth_name(const char *weight, char *out, size_t cap);
void bert_col_absmax(const float *w, int n, int k, float *colmax);
void bert_smooth_finish(const float *act_max, float *s, int k);

#endif
