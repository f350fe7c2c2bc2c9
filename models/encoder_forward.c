/* encoder_forward.c: the shared encoder's forward pass, built from the
 * architecture row's layer description (models/arch.h's enc_layer_kind) by
 * three helpers, as llama.cpp's build_* are: build_norm (LayerNorm or
 * RMSNorm, feeding the next GEMM where the backend can), build_attn (QKV,
 * rotary positions where the row has them, attention with the model's
 * parameters, output projection) and build_mlp (GELU, or a gated SiLU/GELU
 * MLP). A layer is post-norm (BERT: x = norm(x + f(x))) or pre-norm
 * (x = x + f(norm(x)), then a final norm). Calibration's recording of GEMM
 * inputs lives in gemm_at, out of the reading line. The forward runs plain
 * (one enc_pass: embeddings, each layer, the end, which
 * models/encoder_stream.c also drives a layer at a time with each layer's
 * weights loaded just before it runs), or recorded and replayed through
 * the backend's graph slots where engine/fwd_graph.h says so; then mean or
 * CLS pooling and L2 normalisation (sentence-transformers).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fwd_graph.h"
#include "models/encoder_internal.h"

/* Calibration: the largest |value| per column of one GEMM's input (t, k),
 * kept in m->act_max. Only runs while calibrating. */
static mt_status record(enc_model *m, int l, int g, const float *x, int t, int k, mt_err *err)
{
    if (!m->act_max)
        return MT_OK;
    const int maxk = enc_max_k(&m->cfg);
    float *host = malloc(sizeof(float) * (size_t)t * k);
    if (!host)
        return mt_fail(err, MT_ENOMEM, "out of memory while calibrating");
    mt_status st = m->be->ops->download(m->be, host, x, sizeof(float) * (size_t)t * k, err);
    float *mx = m->act_max + ((size_t)l * GEMMS_PER_LAYER + g) * maxk;
    for (int i = 0; st == MT_OK && i < t; i++)
        for (int j = 0; j < k; j++) {
            float a = fabsf(host[(size_t)i * k + j]);
            mx[j] = a > mx[j] ? a : mx[j];
        }
    free(host);
    return st;
}

/* The attention's parameters from the config and the row; then the ops a
 * row's layer description needs beyond BERT's, each a backend may lack
 * (backend.h's supports_op). */
mt_status enc_prepare_ops(enc_model *m, mt_err *err)
{
    m->attn = (mt_attn_params){.heads = m->cfg.heads, .kv_heads = m->cfg.kv_heads,
                               .head_dim = m->cfg.head_dim, .causal = m->arch->kind.causal};
    const enc_layer_kind *k = &m->arch->kind;
    const enc_config *c = &m->cfg;
    const bool need[MT_OPK_COUNT] = {
        [MT_OPK_RMSNORM] = k->norm == ENC_RMSNORM,
        [MT_OPK_ADD] = k->place == ENC_NORM_PRE,
        [MT_OPK_GLU] = c->gated != 0,
        [MT_OPK_ROPE] = k->pos == ENC_POS_ROTARY,
        [MT_OPK_CAUSAL] = k->causal,
        [MT_OPK_GQA] = c->kv_heads != c->heads,
        [MT_OPK_NO_POS] = !m->arch->emb.pos,
        [MT_OPK_QK_NORM] = m->arch->layer.q_norm != NULL,
        [MT_OPK_TOKEN_TYPES] = c->pairs && c->type_vocab >= 2,
    };
    const mt_backend_ops *op = m->be->ops;
    for (int i = 0; i < MT_OPK_COUNT; i++)
        if (need[i] && (!op->supports_op || !op->supports_op(m->be, (mt_op_kind)i)))
            return mt_fail(err, MT_EUNSUPPORTED,
                           "model_type \"%s\" needs %s, which the %s backend does not run",
                           m->arch->model_type, mt_op_kind_name((mt_op_kind)i), m->be->device);
    return MT_OK;
}

/* CLS or last-token pooling: each sequence's first or last row, as it is. */
static mt_status row_pool(enc_model *m, const float *x, const int32_t *offsets, int nseq,
                          float *out, mt_err *err)
{
    const int h = m->cfg.hidden;
    const bool last = m->cfg.pool == MT_POOL_LAST;
    mt_status st = MT_OK;
    for (int s = 0; s < nseq && st == MT_OK; s++) {
        const int row = last ? offsets[s + 1] - 1 : offsets[s];
        st = m->be->ops->download(m->be, out + (size_t)s * h, x + (size_t)row * h,
                                  sizeof(float) * h, err);
    }
    return st;
}

/* The pooled rows' L2 norms into norms (may be NULL), and the rows
 * divided by them when the model has a Normalize module: as
 * sentence-transformers (torch's F.normalize, eps 1e-12), in the float
 * arithmetic kernels/cpu/ops.c's kc_mean_pool used, so vectors are the
 * same bits as when the CPU op normalised them. */
void enc_normalize_rows(float *out, int nseq, int h, bool normalize, float *norms)
{
    for (int s = 0; s < nseq; s++) {
        float *o = out + (size_t)s * h, n2 = 0.f;
        for (int c = 0; c < h; c++)
            n2 += o[c] * o[c];
        const float nrm = sqrtf(n2);
        if (norms)
            norms[s] = nrm;
        if (!normalize)
            continue;
        const float k = 1.0f / (nrm > 1e-12f ? nrm : 1e-12f);
        for (int c = 0; c < h; c++)
            o[c] *= k;
    }
}

/* The end of a forward: the hidden states x (t, h) as they are (pool
 * false), or pooled (mean on the backend, or a CLS or last row) into out, with their
 * norms (may be NULL) and normalised as the model says. ready: pooled
 * already holds the means (the recorded forward pools inside its graph). */
static mt_status finish(enc_model *m, const float *x, const int32_t *d_off,
                        const int32_t *offsets, int nseq, int t, bool pool, bool ready,
                        float *pooled, float *out, float *norms, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const int h = m->cfg.hidden;
    mt_status st;
    if (!pool)
        return op->download(m->be, out, x, sizeof(float) * (size_t)t * h, err);
    if (m->cfg.pool != MT_POOL_MEAN)
        st = row_pool(m, x, offsets, nseq, out, err);
    else if (ready || (st = op->mean_pool(m->be, x, d_off, nseq, h, false, pooled, err)) == MT_OK)
        st = op->download(m->be, out, pooled, sizeof(float) * (size_t)nseq * h, err);
    if (st == MT_OK)
        enc_normalize_rows(out, nseq, h, m->cfg.normalize, norms);
    return st;
}

/* The buffers of one forward, backend memory, rows = its token count (the
 * padded one on the recorded path). */
typedef struct {
    int32_t *ids, *off; /* (rows) token ids; nseq + 1 offsets */
    int32_t *segs;      /* nseq: where each text pair's token type 1 starts, or NULL */
    float *x;           /* (rows, h) the hidden states */
    float *qkv;         /* (rows, max(qkv width, h)) qkv rows, then each block's output */
    float *ctx;         /* (rows, max(Q width, h)) attention output; a pre-norm layer's norm */
    float *mid;         /* (rows, intermediate width) the MLP's first GEMM */
    float *pooled;      /* (nseq, h) */
    float *glu;         /* (rows, i) a gated MLP's act(gate) * up, or NULL */
    int act16;          /* rows in the model's 16-bit actf (run) */
    int nseq;
} fwd_bufs;

/* The bytes of each of fwd_bufs' buffers for t rows, ids to glu in order;
 * returns how many there are (glu only for gated MLPs). */
static int buf_sizes(const enc_config *c, size_t t, int nseq, bool segs, size_t sz[7])
{
    const size_t h = (size_t)c->hidden, qkvw = (size_t)enc_qkv_width(c),
                 qw = (size_t)enc_q_width(c);
    sz[0] = sizeof(int32_t) * (t + (size_t)nseq + 1 + (segs ? (size_t)nseq : 0));
    sz[1] = sizeof(float) * t * h;
    sz[2] = sizeof(float) * t * (qkvw > h ? qkvw : h);
    sz[3] = sizeof(float) * t * (qw > h ? qw : h);
    sz[4] = sizeof(float) * t * (size_t)enc_inter_width(c);
    sz[5] = sizeof(float) * (size_t)nseq * h;
    sz[6] = sizeof(float) * t * (size_t)c->intermediate;
    return c->gated ? 7 : 6;
}

/* GEMM g (GEMMS_PER_LAYER's order) of layer l on x (t rows); while
 * calibrating, x's column maxima are recorded first. */
static mt_status gemm_at(enc_model *m, int l, int g, const float *x, int t, const mt_weight *w,
                         const float *bias, mt_act act, float *y, mt_err *err)
{
    mt_status st = record(m, l, g, x, t, enc_gemm_k(&m->cfg, g), err);
    return st != MT_OK ? st : m->be->ops->gemm(m->be, x, t, w, bias, act, y, err);
}

/* out = norm(x + res) (res may be NULL) by the row's norm kind; next: the
 * weight of the GEMM that reads out next (NULL: none), for the backend's
 * layernorm_feed where it has one. */
static mt_status build_norm(enc_model *m, const float *x, const float *res, const float *g,
                            const float *b, int t, float *out, const mt_weight *next,
                            mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const int h = m->cfg.hidden;
    if (m->arch->kind.norm == ENC_RMSNORM)
        return op->rmsnorm(m->be, x, res, g, t, h, m->cfg.eps, out, err);
    if (next && op->layernorm_feed)
        return op->layernorm_feed(m->be, x, res, g, b, t, h, m->cfg.eps, out, next, err);
    return op->layernorm(m->be, x, res, g, b, t, h, m->cfg.eps, out, err);
}

/* Layer l's self-attention on in (t rows) into y (t, h): the packed QKV
 * GEMM, the per-head Q and K norms and rotary positions where the row has
 * them, the attention op with
 * the model's parameters (heads, masks, bias), the output projection. */
static mt_status build_attn(enc_model *m, int l, const float *in, const fwd_bufs *b, int t,
                            float *y, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const enc_layer *L = &m->layer[l];
    /* a 16-bit forward's biases are in its type (backend.h) */
    const float *bq = b->act16 ? L->b16[0] : L->b_qkv, *bo = b->act16 ? L->b16[1] : L->b_attn_out;
    mt_status st;
    if ((st = gemm_at(m, l, 0, in, t, L->qkv, bq, MT_ACT_NONE, b->qkv, err)) ||
        (L->q_norm && (st = op->qk_norm(m->be, b->qkv, t, &m->attn, L->q_norm, L->k_norm,
                                         m->cfg.eps, err))) ||
        (m->arch->kind.pos == ENC_POS_ROTARY &&
         (st = op->rope(m->be, b->qkv, b->off, b->nseq, &m->attn, m->cfg.rope_theta, err))) ||
        (st = op->attention(m->be, b->qkv, b->off, b->nseq, &m->attn, b->ctx, err)))
        return st;
    return gemm_at(m, l, 1, b->ctx, t, L->attn_out, bo, MT_ACT_NONE, y, err);
}

/* Layer l's MLP on in (t rows) into y (t, h): GELU in the first GEMM's
 * epilogue, or a gated MLP's act(gate) * up between the two. */
static mt_status build_mlp(enc_model *m, int l, const float *in, const fwd_bufs *b, int t,
                           float *y, mt_err *err)
{
    const enc_layer *L = &m->layer[l];
    const float *bi = b->act16 ? L->b16[2] : L->b_inter, *bd = b->act16 ? L->b16[3] : L->b_out;
    mt_status st;
    if (!m->cfg.gated) {
        if ((st = gemm_at(m, l, 2, in, t, L->inter, bi, MT_ACT_GELU, b->mid, err)))
            return st;
        return gemm_at(m, l, 3, b->mid, t, L->out, bd, MT_ACT_NONE, y, err);
    }
    const mt_act act = m->arch->kind.mlp == ENC_MLP_GATED_SILU ? MT_ACT_SILU : MT_ACT_GELU;
    if ((st = gemm_at(m, l, 2, in, t, L->inter, bi, MT_ACT_NONE, b->mid, err)) ||
        (st = m->be->ops->glu(m->be, b->mid, t, m->cfg.intermediate, act, b->glu, err)))
        return st;
    return gemm_at(m, l, 3, b->glu, t, L->out, bd, MT_ACT_NONE, y, err);
}

/* Layer l on b->x (t rows), by the row's norm placement. */
static mt_status build_layer(enc_model *m, int l, int nlayers, const fwd_bufs *b, int t,
                             mt_err *err)
{
    const enc_layer *L = &m->layer[l];
    float *x = b->x, *y = b->qkv, *n = b->ctx;
    const size_t th = (size_t)t * m->cfg.hidden;
    mt_status st;
    if (m->arch->kind.place == ENC_NORM_POST) /* x = norm(x + f(x)) */
        return (st = build_attn(m, l, x, b, t, y, err)) ||
                       (st = build_norm(m, y, x, L->ln1_g, L->ln1_b, t, x, L->inter, err)) ||
                       (st = build_mlp(m, l, x, b, t, y, err))
                   ? st
                   : build_norm(m, y, x, L->ln2_g, L->ln2_b, t, x,
                                l + 1 < nlayers ? m->layer[l + 1].qkv : NULL, err);
    const mt_backend_ops *op = m->be->ops; /* x = x + f(norm(x)) */
    if ((st = build_norm(m, x, NULL, L->ln1_g, L->ln1_b, t, n, L->qkv, err)) ||
        (st = build_attn(m, l, n, b, t, y, err)) || (st = op->add(m->be, x, y, th, x, err)) ||
        (st = build_norm(m, x, NULL, L->ln2_g, L->ln2_b, t, n, L->inter, err)) ||
        (st = build_mlp(m, l, n, b, t, y, err)))
        return st;
    return op->add(m->be, x, y, th, x, err);
}

/* The embeddings of a batch into b->x (ids: the host copies the row's
 * embed hook reads; b->ids what the embed op indexes m->word, or m->word16,
 * with), then
 * the embeddings' norm where the row has one. */
static mt_status embed_stage(enc_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                             int t, int nlayers, const fwd_bufs *b, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const int h = m->cfg.hidden;
    const bool post = m->arch->kind.place == ENC_NORM_POST;
    mt_status st;
    if ((st = b->segs ? op->embed_types(m->be, b->ids, b->off, b->segs, nseq, m->word, m->pos,
                                        m->type0, m->type1, h, b->x, err)
              : m->arch->embed
                  ? m->arch->embed(m, ids, offsets, nseq, b->ids, b->off, b->x, err)
              : m->word16 ? op->embed16(m->be, b->ids, b->off, nseq, m->word16, m->word_bf16,
                                        m->pos, m->type0, h, b->x, err)
                          : op->embed(m->be, b->ids, b->off, nseq, m->word, m->pos, m->type0, h,
                                      b->x, err)))
        return st;
    if (m->emb_ln_g)
        st = build_norm(m, b->x, NULL, m->emb_ln_g, m->emb_ln_b, t, b->x,
                        post && nlayers > 0 ? m->layer[0].qkv : NULL, err);
    return st;
}

/* The norm after the last layer, when the row has one and every layer ran. */
static mt_status final_stage(enc_model *m, int nlayers, const fwd_bufs *b, int t, mt_err *err)
{
    if (!m->final_g || nlayers != m->cfg.layers)
        return MT_OK;
    return build_norm(m, b->x, NULL, m->final_g, m->final_b, t, b->x, NULL, err);
}

/* Embeddings, then the first nlayers layers, on `rows` rows of b (ids and
 * offsets already there; host copies in ids / offsets): x ends up holding
 * the hidden states (after the final norm when every layer ran). */
static mt_status encode(enc_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                        int rows, int nlayers, const fwd_bufs *b, mt_err *err)
{
    mt_status st = embed_stage(m, ids, offsets, nseq, rows, nlayers, b, err);
    for (int l = 0; l < nlayers && st == MT_OK; l++)
        st = build_layer(m, l, nlayers, b, rows, err);
    return st != MT_OK ? st : final_stage(m, nlayers, b, rows, err);
}

/* ---- a forward a layer at a time (enc_pass, encoder_internal.h) ---- */

/* The buffers only a layer uses (fwd_bufs' qkv, ctx, mid, glu), by their
 * index in buf_sizes' order. */
#define PASS_SCRATCH ((1u << 2) | (1u << 3) | (1u << 4) | (1u << 6))
#define PASS_ALL 0x7fu

/* The pass's buffers as fwd_bufs (a scratch one NULL while not held). */
static fwd_bufs pass_bufs(const enc_pass *p)
{
    const int t = p->offsets[p->nseq];
    int32_t *in = p->buf[0];
    return (fwd_bufs){.ids = in, .off = in ? in + t : NULL,
                      .segs = p->segs && in ? in + t + p->nseq + 1 : NULL,
                      .x = p->buf[1], .qkv = p->buf[2], .ctx = p->buf[3], .mid = p->buf[4],
                      .pooled = p->buf[5], .glu = p->buf[6], .act16 = p->act16,
                      .nseq = p->nseq};
}

/* Allocates the buffers of mask (bits in buf_sizes' order) the pass lacks. */
static mt_status pass_alloc(enc_model *m, enc_pass *p, unsigned mask, mt_err *err)
{
    size_t sz[7];
    const int t = p->offsets[p->nseq];
    const int nb = buf_sizes(&m->cfg, (size_t)t, p->nseq, p->segs != NULL, sz);
    for (int i = 0; i < nb; i++)
        if ((mask >> i & 1u) && !p->buf[i] && !(p->buf[i] = m->be->ops->alloc(m->be, sz[i])))
            return mt_fail(err, MT_ENOMEM, "out of %s memory for a batch of %d tokens",
                           m->be->device, t);
    return MT_OK;
}

static void pass_release(enc_model *m, enc_pass *p, unsigned mask)
{
    for (int i = 0; i < 7; i++)
        if ((mask >> i & 1u) && p->buf[i]) {
            m->be->ops->free(m->be, p->buf[i]);
            p->buf[i] = NULL;
        }
}

mt_status enc_pass_begin(enc_model *m, enc_pass *p, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const int t = p->offsets[p->nseq], nseq = p->nseq;
    memset(p->buf, 0, sizeof p->buf);
    mt_status st = pass_alloc(m, p, p->keep_scratch ? PASS_ALL : PASS_ALL & ~PASS_SCRATCH, err);
    const fwd_bufs b = pass_bufs(p);
    const int32_t *dev = p->dev_ids ? p->dev_ids : p->ids;
    if (st == MT_OK &&
        !(st = op->upload(m->be, b.ids, dev, sizeof(int32_t) * (size_t)t, err)) &&
        !(st = op->upload(m->be, b.off, p->offsets, sizeof(int32_t) * ((size_t)nseq + 1), err)) &&
        (!p->segs ||
         !(st = op->upload(m->be, b.segs, p->segs, sizeof(int32_t) * (size_t)nseq, err))))
        st = embed_stage(m, p->ids, p->offsets, nseq, t, p->nlayers, &b, err);
    return st;
}

mt_status enc_pass_layer(enc_model *m, enc_pass *p, int l, mt_err *err)
{
    mt_status st = pass_alloc(m, p, PASS_SCRATCH, err);
    if (st == MT_OK) {
        const fwd_bufs b = pass_bufs(p);
        st = build_layer(m, l, p->nlayers, &b, p->offsets[p->nseq], err);
    }
    if (!p->keep_scratch)
        pass_release(m, p, PASS_SCRATCH);
    return st;
}

mt_status enc_pass_end(enc_model *m, enc_pass *p, bool pool, float *out, float *norms,
                       mt_err *err)
{
    const int t = p->offsets[p->nseq];
    const fwd_bufs b = pass_bufs(p);
    mt_status st = final_stage(m, p->nlayers, &b, t, err);
    return st != MT_OK ? st
                       : finish(m, b.x, b.off, p->offsets, p->nseq, t, pool, false, b.pooled, out,
                                norms, err);
}

void enc_pass_free(enc_model *m, enc_pass *p)
{
    pass_release(m, p, PASS_ALL);
}

/* The plain forward: one pass (buffers allocated for these tokens, inputs
 * uploaded, the ops issued as they come, the buffers freed). */
static mt_status run_eager(enc_model *m, const int32_t *ids, const int32_t *offsets,
                           const int32_t *segs, int nseq, int nlayers, bool pool, int act16,
                           float *out, float *norms, mt_err *err)
{
    enc_pass p = {.ids = ids, .offsets = offsets, .segs = segs, .nseq = nseq,
                  .nlayers = nlayers, .act16 = act16, .keep_scratch = true};
    mt_status st = enc_pass_begin(m, &p, err);
    for (int l = 0; l < nlayers && st == MT_OK; l++)
        st = enc_pass_layer(m, &p, l, err);
    if (st == MT_OK)
        st = enc_pass_end(m, &p, pool, out, norms, err);
    enc_pass_free(m, &p);
    return st;
}

/* Whether this forward may be recorded (engine/fwd_graph.h says when it
 * is): a backend with the graph slots, the whole pooled forward, not
 * calibrating (record() downloads between ops), and ids the row's embed
 * hook takes in one go (MPNet: no literal <pad>, models/mpnet.c). */
static int capturable(const enc_model *m, const int32_t *ids, int t, int nlayers, bool pool)
{
    const mt_backend_ops *op = m->be->ops;
    if (!op->graph_begin || !op->graph_end || !pool || nlayers != m->cfg.layers || m->act_max)
        return 0;
    return !m->arch->recordable || m->arch->recordable(m, ids, t);
}

/* The recorded forward (graph_begin / graph_end, backend.h): the buffers
 * are carved out of the backend's arena at places fixed by the key, the
 * ids are padded with id 0 to p->t_cap rows no sequence owns (exact: see
 * engine/fwd_graph.h), the ops are issued on the key's first two uses and
 * replayed after; pooling and the download run after the replay. *ran is
 * false when the backend records nothing now (then run the plain one). */
static mt_status run_graph(enc_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                           int t, const mt_fwd_plan *p, int act16, float *out, float *norms,
                           bool *ran, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const size_t h = (size_t)m->cfg.hidden, tc = p->t_cap;
    const size_t n_in = tc + (size_t)nseq + 1; /* int32: ids (padded), then offsets */
    size_t sz[7], at[7] = {0};
    const size_t total = mt_fwd_layout(sz, buf_sizes(&m->cfg, tc, nseq, false, sz), at);
    int32_t *host = calloc(n_in, sizeof *host);
    if (!host)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    memcpy(host, ids, sizeof *host * (size_t)t);
    memcpy(host + tc, offsets, sizeof *host * ((size_t)nseq + 1));
    void *arena = NULL;
    bool replay = false;
    mt_status st = op->graph_begin(m->be, p->key, total, host, sz[0], &arena, &replay, err);
    free(host);
    *ran = st == MT_OK && arena;
    if (!*ran)
        return st;
    char *a = arena;
    const fwd_bufs b = {(int32_t *)a, (int32_t *)a + tc, NULL, (float *)(a + at[1]), (float *)(a + at[2]),
                        (float *)(a + at[3]), (float *)(a + at[4]), (float *)(a + at[5]),
                        m->cfg.gated ? (float *)(a + at[6]) : NULL, act16, nseq};
    /* mean pooling is part of the recording (one launch fewer per replay;
     * nseq is in the key, the offsets in the arena); CLS and last-token
     * pooling download rows after it */
    const bool mean = m->cfg.pool == MT_POOL_MEAN;
    if (!replay &&
        ((st = encode(m, ids, offsets, nseq, p->t_cap, m->cfg.layers, &b, err)) ||
         (mean && (st = op->mean_pool(m->be, b.x, b.off, nseq, (int)h, false, b.pooled, err))))) {
        op->graph_end(m->be, true, NULL); /* drops the recording; keeps err */
        return st;
    }
    if ((st = op->graph_end(m->be, false, err)) != MT_OK)
        return st;
    return finish(m, b.x, b.off, offsets, nseq, t, true, mean, b.pooled, out, norms, err);
}

mt_status enc_run(enc_model *m, const int32_t *ids, const int32_t *offsets, const int32_t *segs,
                  int nseq, int nlayers, bool pool, float *out, float *norms, mt_err *err)
{
    const enc_config *c = &m->cfg;
    if (nseq <= 0)
        return MT_OK;
    if (offsets[0] != 0)
        return mt_fail(err, MT_EINVAL, "offsets must start at 0");
    for (int s = 0; s < nseq; s++) {
        int len = offsets[s + 1] - offsets[s];
        if (len < 1 || len > c->max_seq_len)
            return mt_fail(err, MT_EINVAL, "sequence %d has %d tokens; allowed 1..%d", s, len,
                           c->max_seq_len);
    }
    for (int s = 0; segs && s < nseq; s++)
        if (segs[s] < 1 || segs[s] > offsets[s + 1] - offsets[s])
            return mt_fail(err, MT_EINVAL, "sequence %d: its second text starts at %d, outside "
                           "its %d tokens", s, segs[s], offsets[s + 1] - offsets[s]);
    if (!m->type1) /* one token type: every token has it */
        segs = NULL;
    const int t = offsets[nseq];
    for (int i = 0; i < t; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return mt_fail(err, MT_EINVAL, "token id %d out of range [0, %d)", ids[i], c->vocab);

    /* 16-bit activations (pick_act_format) for the whole pooled forward
     * only: the hidden states and calibration read FP32 rows, and an
     * embed hook that writes runs of rows (MPNet with a literal <pad>)
     * steps through x as floats */
    const mt_backend_ops *op = m->be->ops;
    const int act16 = m->actf != MT_ACTF_F32 && pool && nlayers == c->layers && !m->act_max &&
                      (!m->arch->recordable || m->arch->recordable(m, ids, t));
    if (act16)
        op->set_act_format(m->be, m->actf);
    const mt_fwd_plan p =
        mt_fwd_choose(m->graph_id, nseq, t, !segs && capturable(m, ids, t, nlayers, pool));
    bool ran = false;
    mt_status st = MT_OK;
    if (p.graph)
        st = run_graph(m, ids, offsets, nseq, t, &p, act16, out, norms, &ran, err);
    if (st == MT_OK && !ran)
        st = run_eager(m, ids, offsets, segs, nseq, nlayers, pool, act16, out, norms, err);
    if (act16)
        op->set_act_format(m->be, MT_ACTF_F32);
    return st;
}
