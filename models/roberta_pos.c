/* roberta_pos.c: RoBERTa's position ids as an architecture row's embed
 * hook (MPNet, XLM-RoBERTa): each token that is not <pad> takes position
 * pad_id + 1 + (non-pad tokens before it in its text), a literal <pad>
 * position pad_id (transformers' create_position_ids_from_input_ids), so
 * the position table is read from row pad_id + 1 on. cfg.pad_id is the
 * row's read_config's. */
#include "models/encoder_internal.h"

mt_status enc_roberta_pad(const cJSON *j, const char *path, enc_config *c, mt_err *err)
{
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(j, "pad_token_id");
    if (!cJSON_IsNumber(pad) || pad->valuedouble < 0 || pad->valuedouble != (int)pad->valuedouble ||
        pad->valuedouble >= c->vocab || pad->valuedouble + 2 >= c->max_positions)
        return mt_fail(err, MT_EFORMAT, "%s: field 'pad_token_id' missing or out of range", path);
    c->pad_id = (int)pad->valuedouble;
    c->max_seq_len = c->max_positions - c->pad_id - 1;
    return MT_OK;
}

/* One run of tokens that share a position base: embed's pos[i - start]
 * then reads position base + i - start. */
static mt_status embed_run(enc_model *m, const int32_t *d_ids, int start, int len, int base,
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

/* Embeddings with RoBERTa's position ids: position pad_id + 1 + (non-pad
 * tokens before) for each non-pad token, pad_id for a <pad> in the text. */
mt_status enc_roberta_embed(enc_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
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

/* A literal <pad> makes enc_roberta_embed upload between its embed calls: such
 * a batch runs plain, not recorded. */
bool enc_roberta_recordable(const enc_model *m, const int32_t *ids, int t)
{
    for (int i = 0; i < t; i++)
        if (ids[i] == m->cfg.pad_id)
            return false;
    return true;
}
