/* mpnet.c: what all-mpnet-base-v2 (model_type "mpnet") adds to the BERT
 * encoder in bert.c: its config fields, its tensor names, RoBERTa-style
 * position ids (padding_idx = pad_token_id) without token types, and the
 * relative position bias that every layer adds to its attention scores
 * (one table of relative_attention_num_buckets x heads, bucketed as
 * transformers' MPNetEncoder.relative_position_bucket does).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/bert_internal.h"

#define MPNET_MAX_DISTANCE 128

mt_status mpnet_read_config(const cJSON *j, const char *path, bert_config *c, mt_err *err)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "relative_attention_num_buckets");
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(j, "pad_token_id");
    if (!cJSON_IsNumber(b) || b->valuedouble != 32)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: field 'relative_attention_num_buckets' must be 32 (the only value served)",
                       path);
    if (!cJSON_IsNumber(pad) || pad->valuedouble < 0 || pad->valuedouble != (int)pad->valuedouble ||
        pad->valuedouble >= c->vocab || pad->valuedouble + 2 >= c->max_positions)
        return mt_fail(err, MT_EFORMAT, "%s: field 'pad_token_id' missing or out of range", path);
    c->buckets = 32;
    c->pad_id = (int)pad->valuedouble;
    c->type_vocab = 0;
    return MT_OK;
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

mt_status mpnet_load_extras(bert_model *m, const st_file *f, mt_err *err)
{
    const bert_config *c = &m->cfg;
    const float *tab;
    mt_status st = bert_find_f32(f, "encoder.relative_attention_bias.weight", c->buckets,
                                 c->heads, &tab, err);
    if (st != MT_OK)
        return st;
    m->maxrel = c->max_seq_len - 1;
    const size_t w = 2 * (size_t)m->maxrel + 1;
    float *pb = malloc(sizeof(float) * w * (size_t)c->heads);
    float *zero = calloc((size_t)c->hidden, sizeof(float));
    if (!pb || !zero) {
        free(pb);
        free(zero);
        return mt_fail(err, MT_ENOMEM, "out of memory for the relative position bias");
    }
    for (int r = -m->maxrel; r <= m->maxrel; r++) {
        int b = mpnet_bucket(r, c->buckets, MPNET_MAX_DISTANCE);
        for (int hd = 0; hd < c->heads; hd++)
            pb[(size_t)hd * w + (size_t)(r + m->maxrel)] = tab[(size_t)b * c->heads + hd];
    }
    st = bert_to_backend(m, pb, w * (size_t)c->heads, &m->pos_bias, err);
    if (st == MT_OK)
        st = bert_to_backend(m, zero, (size_t)c->hidden, &m->type0, err);
    free(pb);
    free(zero);
    return st;
}

/* One run of tokens that share a position base: embed's pos[i - start]
 * then reads position base + i - start. */
static mt_status embed_run(bert_model *m, const int32_t *d_ids, int start, int len, int base,
                           int32_t *d_pair, float *x, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const int h = m->cfg.hidden;
    int32_t pair[2] = {0, len};
    mt_status st = op->upload(m->be, d_pair, pair, sizeof pair, err);
    if (st == MT_OK)
        st = op->embed(m->be, d_ids + start, d_pair, 1, m->word, m->pos + (size_t)base * h,
                       m->type0, h, x + (size_t)start * h, err);
    return st;
}

mt_status mpnet_embed(bert_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                      const int32_t *d_ids, const int32_t *d_off, float *x, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const int pad = m->cfg.pad_id, t = offsets[nseq];
    int any = 0;
    for (int i = 0; i < t && !any; i++)
        any = ids[i] == pad;
    if (!any) /* every position is pad + 1 + index: one call for the batch */
        return op->embed(m->be, d_ids, d_off, nseq, m->word,
                         m->pos + (size_t)(pad + 1) * m->cfg.hidden, m->type0, m->cfg.hidden, x,
                         err);
    /* a literal <pad> in some text: runs of non-pad tokens, pads alone */
    int32_t *d_pair = op->alloc(m->be, 2 * sizeof(int32_t));
    if (!d_pair)
        return mt_fail(err, MT_ENOMEM, "out of %s memory", m->be->device);
    mt_status st = MT_OK;
    for (int s = 0; s < nseq && st == MT_OK; s++) {
        int seen = 0; /* non-pad tokens before i in this sequence */
        for (int i = offsets[s]; i < offsets[s + 1] && st == MT_OK;) {
            if (ids[i] == pad) {
                st = embed_run(m, d_ids, i, 1, pad, d_pair, x, err);
                i++;
                continue;
            }
            int j = i;
            while (j < offsets[s + 1] && ids[j] != pad)
                j++;
            st = embed_run(m, d_ids, i, j - i, pad + 1 + seen, d_pair, x, err);
            seen += j - i;
            i = j;
        }
    }
    op->free(m->be, d_pair);
    return st;
}

static const bert_names bert_n = {
    "attention.self.query", "attention.self.key", "attention.self.value",
    "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
    "output.dense", "output.LayerNorm",
};
static const bert_names mpnet_n = {
    "attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o",
    "attention.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm",
};

const bert_names *bert_layer_names(const bert_model *m)
{
    return m->cfg.mpnet ? &mpnet_n : &bert_n;
}
