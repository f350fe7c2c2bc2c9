/* bert.c: the BERT encoder forward pass and its loading, written against
 * the backend table (engine/backend.h) so that it runs unchanged on every
 * backend. The forward reads like the paper: embeddings + LayerNorm, then
 * per layer self-attention and a GELU MLP, each followed by residual +
 * LayerNorm, then mean pooling and L2 normalisation (sentence-transformers).
 */
#include "models/bert.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/quant.h"
#include "engine/safetensors.h"

typedef struct {
    mt_weight *qkv, *attn_out, *inter, *out; /* (3h,h) (h,h) (i,h) (h,i) */
    float *b_qkv, *b_attn_out, *b_inter, *b_out;
    float *ln1_g, *ln1_b, *ln2_g, *ln2_b;
} bert_layer;

struct bert_model {
    bert_config cfg;
    mt_backend *be;
    mt_precision prec;
    mt_calib_opts calib;
    tok_t *tok;
    float *word, *pos, *type0, *emb_ln_g, *emb_ln_b; /* backend memory */
    bert_layer *layer;
    size_t gemm_bytes, other_bytes;
};

/* ========================================================================
 * configuration files
 * ====================================================================== */

static mt_status json_int(const cJSON *o, const char *file, const char *key, int lo, int hi,
                          int *out, mt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return mt_fail(err, MT_EFORMAT, "%s: field '%s' missing or not a number", file, key);
    double d = v->valuedouble;
    if (d != (double)(long long)d || d < lo || d > hi)
        return mt_fail(err, MT_EFORMAT, "%s: field '%s' = %g is not an integer in [%d, %d]",
                       file, key, d, lo, hi);
    *out = (int)d;
    return MT_OK;
}

/* Reads config.json (the architecture), sentence_bert_config.json
 * (max_seq_length), 1_Pooling/config.json (must be mean pooling) and
 * modules.json (whether a Normalize module follows). */
static mt_status read_configs(const char *dir, bert_config *c, mt_err *err)
{
    char path[4096];
    cJSON *j = NULL;
    mt_status st;

    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((st = mt_json_load(path, &j, err)) != MT_OK)
        return st;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    const cJSON *pet = cJSON_GetObjectItemCaseSensitive(j, "position_embedding_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "bert") != 0)
        st = mt_fail(err, MT_EUNSUPPORTED, "%s: model_type must be \"bert\"", path);
    else if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu") != 0)
        st = mt_fail(err, MT_EUNSUPPORTED, "%s: hidden_act \"%s\" is not supported (gelu only)",
                     path, act->valuestring);
    else if (pet && (!cJSON_IsString(pet) || strcmp(pet->valuestring, "absolute") != 0))
        st = mt_fail(err, MT_EUNSUPPORTED, "%s: position_embedding_type must be \"absolute\"", path);
    else if ((st = json_int(j, path, "vocab_size", 1, 1 << 22, &c->vocab, err)) ||
             (st = json_int(j, path, "hidden_size", 1, 1 << 16, &c->hidden, err)) ||
             (st = json_int(j, path, "num_hidden_layers", 1, 1024, &c->layers, err)) ||
             (st = json_int(j, path, "num_attention_heads", 1, 1024, &c->heads, err)) ||
             (st = json_int(j, path, "intermediate_size", 1, 1 << 18, &c->intermediate, err)) ||
             (st = json_int(j, path, "max_position_embeddings", 2, 1 << 16, &c->max_positions,
                            err)) ||
             (st = json_int(j, path, "type_vocab_size", 1, 1 << 16, &c->type_vocab, err)))
        ;
    else if (c->hidden % c->heads != 0)
        st = mt_fail(err, MT_EFORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d",
                     path, c->hidden, c->heads);
    c->eps = cJSON_IsNumber(eps) ? (float)eps->valuedouble : 1e-12f;
    cJSON_Delete(j);
    if (st != MT_OK)
        return st;

    c->max_seq_len = c->max_positions;
    snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir);
    if (mt_json_load(path, &j, NULL) == MT_OK) {
        st = json_int(j, path, "max_seq_length", 2, c->max_positions, &c->max_seq_len, err);
        cJSON_Delete(j);
        if (st != MT_OK)
            return st;
    }

    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    if (mt_json_load(path, &j, NULL) == MT_OK) {
        const cJSON *mean = cJSON_GetObjectItemCaseSensitive(j, "pooling_mode_mean_tokens");
        int ok = cJSON_IsTrue(mean);
        static const char *const others[] = {"pooling_mode_cls_token", "pooling_mode_max_tokens",
                                             "pooling_mode_mean_sqrt_len_tokens"};
        for (size_t i = 0; i < sizeof others / sizeof *others; i++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, others[i])))
                ok = 0;
        cJSON_Delete(j);
        if (!ok)
            return mt_fail(err, MT_EUNSUPPORTED, "%s: only mean pooling is supported", path);
    }

    c->normalize = 0;
    snprintf(path, sizeof path, "%s/modules.json", dir);
    if (mt_json_load(path, &j, NULL) == MT_OK) {
        const cJSON *mod;
        cJSON_ArrayForEach(mod, j)
        {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(mod, "type");
            if (cJSON_IsString(type) && strstr(type->valuestring, "Normalize"))
                c->normalize = 1;
        }
        cJSON_Delete(j);
    }
    return MT_OK;
}

/* ========================================================================
 * weights
 * ====================================================================== */

/* Finds name (or "bert." + name) and checks it is F32 of the given shape. */
static mt_status find_f32(const st_file *f, const char *name, int64_t d0, int64_t d1,
                          const float **out, mt_err *err)
{
    const st_tensor *t = st_find(f, name);
    char alt[256];
    if (!t) {
        snprintf(alt, sizeof alt, "bert.%s", name);
        t = st_find(f, alt);
    }
    if (!t)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is missing", st_path(f), name);
    int want_dims = d1 > 0 ? 2 : 1;
    if (t->dtype != ST_F32 || t->ndim != want_dims || t->shape[0] != d0 ||
        (want_dims == 2 && t->shape[1] != d1))
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s' is %s with %d dims, expected F32 [%lld%s%lld]",
                       st_path(f), name, st_dtype_name(t->dtype), t->ndim, (long long)d0,
                       want_dims == 2 ? "," : "", want_dims == 2 ? (long long)d1 : 0LL);
    *out = (const float *)t->data;
    return MT_OK;
}

/* Copies a host FP32 vector/table into backend memory. */
static mt_status to_backend(bert_model *m, const float *src, size_t n, float **out, mt_err *err)
{
    size_t bytes = n * sizeof(float);
    float *p = m->be->ops->alloc(m->be, bytes);
    if (!p)
        return mt_fail(err, MT_ENOMEM, "out of %s memory for %zu bytes", m->be->device, bytes);
    mt_status st = m->be->ops->upload(m->be, p, src, bytes, err);
    if (st != MT_OK) {
        m->be->ops->free(m->be, p);
        return st;
    }
    m->other_bytes += bytes;
    *out = p;
    return MT_OK;
}

static mt_status load_vec(bert_model *m, const st_file *f, const char *name, int64_t n,
                          float **out, mt_err *err)
{
    const float *src;
    mt_status st = find_f32(f, name, n, 0, &src, err);
    return st != MT_OK ? st : to_backend(m, src, (size_t)n, out, err);
}

/* NaN or Inf in a weight is a load error: it would only show up later as
 * NaN embeddings for every request. */
static mt_status check_finite(const st_file *f, const char *name, const float *w, size_t n,
                              mt_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (!(w[i] - w[i] == 0.0f))
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' has a non-finite value at index %zu",
                           st_path(f), name, i);
    return MT_OK;
}

static mt_status make_weight(bert_model *m, const st_file *f, const float *w, const char *name,
                             int n, int k, mt_weight **out, mt_err *err)
{
    mt_status st = check_finite(f, name, w, (size_t)n * k, err);
    if (st == MT_OK)
        st = mt_weight_create(m->be, w, n, k, mt_op_precision(MT_OP_GEMM_WEIGHT, m->prec),
                              &m->calib, out, err);
    if (st != MT_OK)
        return st == MT_EFORMAT ? st : mt_prefix(err, st, "tensor '%s': ", name);
    m->gemm_bytes += (*out)->bytes;
    return MT_OK;
}

/* Q, K and V are packed into one (3h, h) weight so that one GEMM produces
 * the packed qkv rows that the attention op reads. */
static mt_status load_layer(bert_model *m, const st_file *f, int l, mt_err *err)
{
    const int h = m->cfg.hidden, in = m->cfg.intermediate;
    bert_layer *L = &m->layer[l];
    char n1[128], n2[128], n3[128];
    mt_status st;
    const char *p = "encoder.layer";

    /* packed qkv */
    const float *wq, *wk, *wv, *bq, *bk, *bv;
    snprintf(n1, sizeof n1, "%s.%d.attention.self.query.weight", p, l);
    snprintf(n2, sizeof n2, "%s.%d.attention.self.key.weight", p, l);
    snprintf(n3, sizeof n3, "%s.%d.attention.self.value.weight", p, l);
    if ((st = find_f32(f, n1, h, h, &wq, err)) || (st = find_f32(f, n2, h, h, &wk, err)) ||
        (st = find_f32(f, n3, h, h, &wv, err)))
        return st;
    snprintf(n1, sizeof n1, "%s.%d.attention.self.query.bias", p, l);
    snprintf(n2, sizeof n2, "%s.%d.attention.self.key.bias", p, l);
    snprintf(n3, sizeof n3, "%s.%d.attention.self.value.bias", p, l);
    if ((st = find_f32(f, n1, h, 0, &bq, err)) || (st = find_f32(f, n2, h, 0, &bk, err)) ||
        (st = find_f32(f, n3, h, 0, &bv, err)))
        return st;
    size_t hh = (size_t)h * h;
    float *wqkv = malloc(sizeof(float) * (3 * hh + 3 * (size_t)h));
    if (!wqkv)
        return mt_fail(err, MT_ENOMEM, "out of memory packing layer %d qkv", l);
    float *bqkv = wqkv + 3 * hh;
    memcpy(wqkv, wq, hh * sizeof(float));
    memcpy(wqkv + hh, wk, hh * sizeof(float));
    memcpy(wqkv + 2 * hh, wv, hh * sizeof(float));
    memcpy(bqkv, bq, h * sizeof(float));
    memcpy(bqkv + h, bk, h * sizeof(float));
    memcpy(bqkv + 2 * h, bv, h * sizeof(float));
    snprintf(n1, sizeof n1, "%s.%d.attention.self.{query,key,value}.weight", p, l);
    st = make_weight(m, f, wqkv, n1, 3 * h, h, &L->qkv, err);
    if (st == MT_OK)
        st = to_backend(m, bqkv, 3 * (size_t)h, &L->b_qkv, err);
    free(wqkv);
    if (st != MT_OK)
        return st;

    /* the other three GEMMs and two LayerNorms */
    struct {
        const char *w, *b;
        int n, k;
        mt_weight **wt;
        float **bias;
    } g[] = {
        {"attention.output.dense.weight", "attention.output.dense.bias", h, h, &L->attn_out,
         &L->b_attn_out},
        {"intermediate.dense.weight", "intermediate.dense.bias", in, h, &L->inter, &L->b_inter},
        {"output.dense.weight", "output.dense.bias", h, in, &L->out, &L->b_out},
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
        const float *w;
        snprintf(n1, sizeof n1, "%s.%d.%s", p, l, g[i].w);
        snprintf(n2, sizeof n2, "%s.%d.%s", p, l, g[i].b);
        if ((st = find_f32(f, n1, g[i].n, g[i].k, &w, err)) ||
            (st = make_weight(m, f, w, n1, g[i].n, g[i].k, g[i].wt, err)) ||
            (st = load_vec(m, f, n2, g[i].n, g[i].bias, err)))
            return st;
    }
    struct {
        const char *name;
        float **dst;
    } v[] = {
        {"attention.output.LayerNorm.weight", &L->ln1_g},
        {"attention.output.LayerNorm.bias", &L->ln1_b},
        {"output.LayerNorm.weight", &L->ln2_g},
        {"output.LayerNorm.bias", &L->ln2_b},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        snprintf(n1, sizeof n1, "%s.%d.%s", p, l, v[i].name);
        if ((st = load_vec(m, f, n1, h, v[i].dst, err)))
            return st;
    }
    return MT_OK;
}

mt_status bert_load(const char *dir, mt_backend *be, const bert_load_opts *opts,
                    bert_model **out, mt_err *err)
{
    bert_model *m = calloc(1, sizeof *m);
    if (!m)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    m->be = be;
    m->prec = opts ? opts->precision : MT_PREC_FP32;
    m->calib = opts ? opts->calib : (mt_calib_opts){MT_CALIB_ABSMAX, 100.0};
    st_file *f = NULL;
    char path[4096];
    mt_status st = read_configs(dir, &m->cfg, err);
    if (st != MT_OK)
        goto fail;
    if (opts && opts->max_seq_len > 0 && opts->max_seq_len < m->cfg.max_seq_len)
        m->cfg.max_seq_len = opts->max_seq_len;
    if (!be->ops->supports(be, m->prec)) {
        st = mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the %s backend",
                     mt_precision_name(m->prec), be->device);
        goto fail;
    }

    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    tok_options topt = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100};
    if ((st = tok_load(path, &topt, &m->tok, err)) != MT_OK)
        goto fail;
    if (tok_vocab_size(m->tok) != m->cfg.vocab) {
        st = mt_fail(err, MT_EFORMAT, "%s has %d entries but config.json vocab_size is %d", path,
                     tok_vocab_size(m->tok), m->cfg.vocab);
        goto fail;
    }

    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if ((st = st_open(path, &f, err)) != MT_OK)
        goto fail;
    const int h = m->cfg.hidden;
    const float *word, *pos, *type;
    if ((st = find_f32(f, "embeddings.word_embeddings.weight", m->cfg.vocab, h, &word, err)) ||
        (st = find_f32(f, "embeddings.position_embeddings.weight", m->cfg.max_positions, h, &pos,
                       err)) ||
        (st = find_f32(f, "embeddings.token_type_embeddings.weight", m->cfg.type_vocab, h, &type,
                       err)))
        goto fail;
    if ((st = to_backend(m, word, (size_t)m->cfg.vocab * h, &m->word, err)) ||
        (st = to_backend(m, pos, (size_t)m->cfg.max_positions * h, &m->pos, err)) ||
        (st = to_backend(m, type, (size_t)h, &m->type0, err)) ||
        (st = load_vec(m, f, "embeddings.LayerNorm.weight", h, &m->emb_ln_g, err)) ||
        (st = load_vec(m, f, "embeddings.LayerNorm.bias", h, &m->emb_ln_b, err)))
        goto fail;

    m->layer = calloc((size_t)m->cfg.layers, sizeof *m->layer);
    if (!m->layer) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int l = 0; l < m->cfg.layers; l++)
        if ((st = load_layer(m, f, l, err)) != MT_OK)
            goto fail;
    st_close(f);
    *out = m;
    return MT_OK;

fail:
    st_close(f);
    bert_free(m);
    return st;
}

void bert_free(bert_model *m)
{
    if (!m)
        return;
    mt_backend *be = m->be;
    if (m->layer) {
        for (int l = 0; l < m->cfg.layers; l++) {
            bert_layer *L = &m->layer[l];
            mt_weight *w[] = {L->qkv, L->attn_out, L->inter, L->out};
            float *v[] = {L->b_qkv, L->b_attn_out, L->b_inter, L->b_out,
                          L->ln1_g, L->ln1_b,      L->ln2_g,   L->ln2_b};
            for (size_t i = 0; i < sizeof w / sizeof *w; i++)
                if (w[i])
                    be->ops->weight_destroy(be, w[i]);
            for (size_t i = 0; i < sizeof v / sizeof *v; i++)
                if (v[i])
                    be->ops->free(be, v[i]);
        }
        free(m->layer);
    }
    float *v[] = {m->word, m->pos, m->type0, m->emb_ln_g, m->emb_ln_b};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (v[i])
            be->ops->free(be, v[i]);
    tok_free(m->tok);
    free(m);
}

const bert_config *bert_get_config(const bert_model *m) { return &m->cfg; }
const tok_t *bert_tokenizer(const bert_model *m) { return m->tok; }
mt_precision bert_precision(const bert_model *m) { return m->prec; }
size_t bert_gemm_weight_bytes(const bert_model *m) { return m->gemm_bytes; }
size_t bert_resident_bytes(const bert_model *m) { return m->gemm_bytes + m->other_bytes; }

/* ========================================================================
 * forward
 * ====================================================================== */

/* Embeddings, then the first nlayers layers; then either pooling into out
 * (nseq, h) or, when pool is false, the hidden states into out (t, h). */
static mt_status run(bert_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                     int nlayers, bool pool, float *out, mt_err *err)
{
    const bert_config *c = &m->cfg;
    const mt_backend_ops *op = m->be->ops;
    mt_backend *be = m->be;
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
    const int t = offsets[nseq], h = c->hidden, in = c->intermediate;
    for (int i = 0; i < t; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return mt_fail(err, MT_EINVAL, "token id %d out of range [0, %d)", ids[i], c->vocab);

    /* activations, all (tokens, width) */
    size_t sz_ids = sizeof(int32_t) * ((size_t)t + nseq + 1);
    int32_t *d_ids = op->alloc(be, sz_ids);
    float *x = op->alloc(be, sizeof(float) * (size_t)t * h);       /* (t, h)  */
    float *qkv = op->alloc(be, sizeof(float) * (size_t)t * 3 * h); /* (t, 3h) */
    float *ctx = op->alloc(be, sizeof(float) * (size_t)t * h);     /* (t, h)  */
    float *mid = op->alloc(be, sizeof(float) * (size_t)t * in);    /* (t, i)  */
    float *pooled = op->alloc(be, sizeof(float) * (size_t)nseq * h);
    mt_status st = MT_OK;
    if (!d_ids || !x || !qkv || !ctx || !mid || !pooled) {
        st = mt_fail(err, MT_ENOMEM, "out of %s memory for a batch of %d tokens", be->device, t);
        goto done;
    }
    int32_t *d_off = d_ids + t;
    if ((st = op->upload(be, d_ids, ids, sizeof(int32_t) * (size_t)t, err)) ||
        (st = op->upload(be, d_off, offsets, sizeof(int32_t) * ((size_t)nseq + 1), err)))
        goto done;

    /* embeddings */
    if ((st = op->embed(be, d_ids, d_off, nseq, m->word, m->pos, m->type0, h, x, err)) ||
        (st = op->layernorm(be, x, NULL, m->emb_ln_g, m->emb_ln_b, t, h, c->eps, x, err)))
        goto done;

    for (int l = 0; l < nlayers; l++) {
        const bert_layer *L = &m->layer[l];
        /* self-attention, then residual + LayerNorm */
        if ((st = op->gemm(be, x, t, L->qkv, L->b_qkv, MT_ACT_NONE, qkv, err)) ||
            (st = op->attention(be, qkv, d_off, nseq, c->heads, h / c->heads, ctx, err)) ||
            (st = op->gemm(be, ctx, t, L->attn_out, L->b_attn_out, MT_ACT_NONE, qkv, err)) ||
            (st = op->layernorm(be, qkv, x, L->ln1_g, L->ln1_b, t, h, c->eps, x, err)))
            goto done;
        /* MLP, then residual + LayerNorm */
        if ((st = op->gemm(be, x, t, L->inter, L->b_inter, MT_ACT_GELU, mid, err)) ||
            (st = op->gemm(be, mid, t, L->out, L->b_out, MT_ACT_NONE, qkv, err)) ||
            (st = op->layernorm(be, qkv, x, L->ln2_g, L->ln2_b, t, h, c->eps, x, err)))
            goto done;
    }

    if (!pool)
        st = op->download(be, out, x, sizeof(float) * (size_t)t * h, err);
    else if ((st = op->mean_pool(be, x, d_off, nseq, h, c->normalize, pooled, err)) == MT_OK)
        st = op->download(be, out, pooled, sizeof(float) * (size_t)nseq * h, err);

done:
    op->free(be, d_ids);
    op->free(be, x);
    op->free(be, qkv);
    op->free(be, ctx);
    op->free(be, mid);
    op->free(be, pooled);
    return st;
}

mt_status bert_forward(bert_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                       float *out, mt_err *err)
{
    return run(m, ids, offsets, nseq, m->cfg.layers, true, out, err);
}

mt_status bert_hidden_states(bert_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                             int nlayers, float *out, mt_err *err)
{
    if (nlayers < 0 || nlayers > m->cfg.layers)
        return mt_fail(err, MT_EINVAL, "nlayers %d out of range 0..%d", nlayers, m->cfg.layers);
    return run(m, ids, offsets, nseq, nlayers, false, out, err);
}

mt_status bert_embed_texts(bert_model *m, const char *const *texts, const size_t *lens, int n,
                           float *out, long *n_tokens, mt_err *err)
{
    const int maxlen = m->cfg.max_seq_len;
    if (n <= 0)
        return MT_OK;
    if ((size_t)n > (size_t)INT_MAX / (size_t)maxlen)
        return mt_fail(err, MT_ELIMIT, "too many inputs (%d)", n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * maxlen);
    int32_t *off = malloc(sizeof(int32_t) * ((size_t)n + 1));
    mt_status st = MT_OK;
    if (!ids || !off) {
        st = mt_fail(err, MT_ENOMEM, "out of memory tokenizing %d inputs", n);
        goto done;
    }
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        int got = 0;
        st = tok_encode(m->tok, texts[i], lens ? lens[i] : strlen(texts[i]), ids + off[i], maxlen,
                        &got, NULL, err);
        if (st != MT_OK) {
            mt_prefix(err, st, "input[%d]: ", i);
            goto done;
        }
        off[i + 1] = off[i] + got;
    }
    if (n_tokens)
        *n_tokens = off[n];
    st = bert_forward(m, ids, off, n, out, err);
done:
    free(ids);
    free(off);
    return st;
}
