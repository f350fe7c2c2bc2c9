/* mpnet.c: the MPNet row (model_type "mpnet", as all-mpnet-base-v2) on the
 * shared encoder (models/encoder.c): its config fields, its tensor names,
 * its tokenizer's <s> </s> <pad>, RoBERTa-style position ids (padding_idx =
 * pad_token_id; models/roberta_pos.c) without token types, and the relative position bias that
 * every layer adds to its attention scores (one table of
 * relative_attention_num_buckets x heads, bucketed as transformers'
 * MPNetEncoder.relative_position_bucket does), which the attention op is
 * given as m->attn.pos_bias.
 */
#include "models/mpnet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/encoder_internal.h"

#define MPNET_MAX_DISTANCE 128

/* config.json's MPNet fields (relative_attention_num_buckets, pad_token_id);
 * the longest text is what the positions after the padding index allow. */
static mt_status mpnet_read_config(const cJSON *j, const char *path, enc_config *c, mt_err *err)
{
    const cJSON *pet = cJSON_GetObjectItemCaseSensitive(j, "position_embedding_type");
    if (pet && (!cJSON_IsString(pet) || strcmp(pet->valuestring, "absolute") != 0))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: position_embedding_type must be \"absolute\"",
                       path);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "relative_attention_num_buckets");
    if (!cJSON_IsNumber(b) || b->valuedouble != MPNET_BUCKETS)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: field 'relative_attention_num_buckets' must be 32 (the only value served)",
                       path);
    return enc_roberta_pad(j, path, c, err);
}

/* relative = key position - query position. Half the buckets for each
 * sign; exact up to 8, then logarithmic up to max_distance, computed in
 * float as PyTorch does. */
int mpnet_bucket(int rel, int buckets, int max_distance)
{
    int ret = 0, n = -rel;
    buckets /= 2;
    if (n < 0)
        ret += buckets;
    n = abs(n);
    int max_exact = buckets / 2;
    if (n < max_exact)
        return ret + n;
    float v = logf((float)n / (float)max_exact) / logf((float)max_distance / (float)max_exact) *
              (float)(buckets - max_exact);
    int large = max_exact + (int)v;
    return ret + (large < buckets - 1 ? large : buckets - 1);
}

/* The relative position bias table (encoder.relative_attention_bias),
 * expanded to one bias per head and relative distance up to the longest
 * text (the attention op's pos_bias, maxrel). */
static mt_status mpnet_load_extras(enc_model *m, const st_file *f, mt_err *err)
{
    const enc_config *c = &m->cfg;
    const float *tab;
    mt_status st = enc_find_f32(m, f, "encoder.relative_attention_bias.weight", MPNET_BUCKETS,
                                c->heads, &tab, err);
    if (st != MT_OK)
        return st;
    m->attn.maxrel = c->max_seq_len - 1;
    const size_t w = 2 * (size_t)m->attn.maxrel + 1;
    float *pb = malloc(sizeof(float) * w * (size_t)c->heads);
    if (!pb)
        return mt_fail(err, MT_ENOMEM, "out of memory for the relative position bias");
    for (int r = -m->attn.maxrel; r <= m->attn.maxrel; r++) {
        int b = mpnet_bucket(r, MPNET_BUCKETS, MPNET_MAX_DISTANCE);
        for (int hd = 0; hd < c->heads; hd++)
            pb[(size_t)hd * w + (size_t)(r + m->attn.maxrel)] = tab[(size_t)b * c->heads + hd];
    }
    float *dev = NULL;
    st = enc_to_backend(m, pb, w * (size_t)c->heads, &dev, err);
    m->attn.pos_bias = dev;
    free(pb);
    return st;
}

const enc_arch enc_arch_mpnet = {
    .model_type = "mpnet",
    .prefix = "mpnet.",
    .keys = {.vocab = "vocab_size", .hidden = "hidden_size", .layers = "num_hidden_layers",
             .heads = "num_attention_heads", .intermediate = "intermediate_size",
             .max_positions = "max_position_embeddings", .act = "hidden_act",
             .eps = "layer_norm_eps"},
    .emb = {.word = "embeddings.word_embeddings.weight",
            .pos = "embeddings.position_embeddings.weight", .ln = "embeddings.LayerNorm"},
    .layers = "encoder.layer",
    .layer = {.q = "attention.attn.q", .k = "attention.attn.k", .v = "attention.attn.v",
              .o = "attention.attn.o", .ln1 = "attention.LayerNorm",
              .inter = "intermediate.dense", .out = "output.dense", .ln2 = "output.LayerNorm"},
    /* MPNetTokenizer: <s> A </s>, <pad>, WordPiece's [UNK] */
    .cls_token = "<s>",
    .sep_token = "</s>",
    .pad_token = "<pad>",
    .unk_token = "[UNK]",
    .read_config = mpnet_read_config,
    .load_extras = mpnet_load_extras,
    .embed = enc_roberta_embed,
    .recordable = enc_roberta_recordable,
};
