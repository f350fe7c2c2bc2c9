/* encoder.c: the shared encoder's forward pass and its loading, written
 * against the backend table (engine/backend.h) so that it runs unchanged on
 * every backend, and against an architecture row (models/arch.h) so that it
 * runs unchanged for every encoder family: it never asks which row it runs.
 * The forward reads like the paper: embeddings + LayerNorm, then per layer
 * self-attention and a GELU MLP, each followed by residual + LayerNorm, then
 * mean (or CLS) pooling and L2 normalisation (sentence-transformers).
 * Here: the configuration files, loading, the model interface's table;
 * encoder_forward.c runs the forward (plain, or recorded and replayed
 * through the backend's graph slots where engine/fwd_graph.h says so),
 * encoder_weights.c reads the weights, encoder_stream.c runs FP32's
 * forward with the weights streamed a layer at a time (int8's calibration,
 * the load check's reference), encoder_save.c writes quantized files.
 */
#include "models/encoder.h"

#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/fwd_graph.h"
#include "engine/jsonfile.h"
#include "engine/quant/mix.h"
#include "engine/quant/quant.h"
#include "engine/weights/safetensors.h"
#include "engine/text/tokenizer.h"
#include "engine/numfmt.h"
#include "models/enc_tokenizer.h"
#include "models/encoder_internal.h"

/* What the model is, for the server (engine/model.h's mt_model_info). */
static void fill_info(enc_model *m)
{
    m->base.info = (mt_model_info){.arch = m->arch->model_type,
                                   .hidden = m->cfg.hidden,
                                   .max_seq_len = m->cfg.max_seq_len,
                                   .vocab = m->cfg.vocab,
                                   .layers = m->cfg.layers,
                                   .intermediate = m->cfg.intermediate,
                                   .precision = m->prec,
                                   .mix = m->mix_text,
                                   .pooling = m->cfg.pool,
                                   .normalize = m->cfg.normalize,
                                   .nprompts = m->nprompts,
                                   .prompt_names = (const char *const *)m->prompt_names,
                                   .prompt_texts = (const char *const *)m->prompt_texts,
                                   .default_prompt = m->prompt_default,
                                   .prompt_pooled = m->cfg.include_prompt,
                                   .task = m->cfg.classify ? MT_TASK_CLASSIFY : MT_TASK_EMBED,
                                   .nlabels = m->cfg.nlabels,
                                   .labels = enc_head_labels(m->head),
                                   .pairs = m->cfg.pairs,
                                   .sparse = enc_outputs_sparse(m->outputs),
                                   .colbert_dim = enc_outputs_colbert_dim(m->outputs),
                                   .gemm_bytes = m->gemm_bytes,
                                   .resident_bytes = m->gemm_bytes + m->other_bytes};
}

static void enc_free(mt_model *base);

/* ========================================================================
 * configuration files
 * ====================================================================== */

mt_status enc_json_int(const cJSON *o, const char *file, const char *key, int lo, int hi,
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

/* The activation config.json must name (when it names one as a string)
 * for the row's MLP kind. */
static const char *mlp_act_name(enc_mlp_kind k)
{
    return k == ENC_MLP_GATED_SILU ? "silu" : "gelu";
}

/* A number of config.json's that may be absent (key NULL or not there:
 * def), else a positive number. */
static mt_status opt_float(const cJSON *j, const char *path, const char *key, float def,
                           float *out, mt_err *err)
{
    const cJSON *v = key ? cJSON_GetObjectItemCaseSensitive(j, key) : NULL;
    if (v && (!cJSON_IsNumber(v) || !(v->valuedouble > 0)))
        return mt_fail(err, MT_EFORMAT, "%s: field '%s' must be a positive number", path, key);
    *out = v ? (float)v->valuedouble : def;
    return MT_OK;
}

/* config.json's numbers every encoder has, under the row's key names. */
static mt_status read_dims(const cJSON *j, const char *path, const enc_arch *a, enc_config *c,
                           mt_err *err)
{
    const enc_config_keys *k = &a->keys;
    const cJSON *act = k->act ? cJSON_GetObjectItemCaseSensitive(j, k->act) : NULL;
    const char *want = mlp_act_name(a->kind.mlp);
    mt_status st;
    if (cJSON_IsString(act) && strcmp(act->valuestring, want) != 0)
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s \"%s\" is not supported (%s only)", path,
                       k->act, act->valuestring, want);
    if ((st = enc_json_int(j, path, k->vocab, 1, 1 << 22, &c->vocab, err)) ||
        (st = enc_json_int(j, path, k->hidden, 1, 1 << 16, &c->hidden, err)) ||
        (st = enc_json_int(j, path, k->layers, 1, 1024, &c->layers, err)) ||
        (st = enc_json_int(j, path, k->heads, 1, 1024, &c->heads, err)) ||
        (st = enc_json_int(j, path, k->intermediate, 1, 1 << 18, &c->intermediate, err)) ||
        (st = enc_json_int(j, path, k->max_positions, 2, 1 << 16, &c->max_positions, err)) ||
        (k->type_vocab &&
         (st = enc_json_int(j, path, k->type_vocab, 1, 1 << 16, &c->type_vocab, err))))
        return st;
    c->kv_heads = c->heads;
    if (k->kv_heads && cJSON_GetObjectItemCaseSensitive(j, k->kv_heads) &&
        (st = enc_json_int(j, path, k->kv_heads, 1, c->heads, &c->kv_heads, err)))
        return st;
    if (c->heads % c->kv_heads != 0)
        return mt_fail(err, MT_EFORMAT, "%s: %s %d does not divide %s %d", path, k->kv_heads,
                       c->kv_heads, k->heads, c->heads);
    if (k->head_dim && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, k->head_dim))) {
        if ((st = enc_json_int(j, path, k->head_dim, 2, 1024, &c->head_dim, err)))
            return st;
    } else if (c->hidden % c->heads != 0) {
        return mt_fail(err, MT_EFORMAT, "%s: %s %d is not a multiple of %s %d", path, k->hidden,
                       c->hidden, k->heads, c->heads);
    } else {
        c->head_dim = c->hidden / c->heads;
    }
    if (a->kind.pos == ENC_POS_ROTARY && c->head_dim % 2)
        return mt_fail(err, MT_EFORMAT, "%s: rotary positions need an even head size, not %d",
                       path, c->head_dim);
    c->gated = a->kind.mlp != ENC_MLP_GELU;
    if ((st = opt_float(j, path, k->rope_theta, 10000.0f, &c->rope_theta, err)))
        return st;
    const cJSON *eps = k->eps ? cJSON_GetObjectItemCaseSensitive(j, k->eps) : NULL;
    c->eps = cJSON_IsNumber(eps) ? (float)eps->valuedouble : 1e-12f;
    return MT_OK;
}

/* config.json: the architecture, as the row reads it (its keys, then its
 * own fields). */
static mt_status read_arch(const char *dir, const enc_arch *a, enc_config *c, mt_err *err)
{
    char path[4096];
    cJSON *j = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    mt_status st = mt_json_load(path, &j, err);
    if (st != MT_OK)
        return st;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, a->model_type) != 0)
        st = mt_fail(err, MT_EUNSUPPORTED, "%s: model_type must be \"%s\"", path, a->model_type);
    else if ((st = read_dims(j, path, a, c, err)) == MT_OK) {
        c->max_seq_len = c->max_positions;
        if (a->read_config)
            st = a->read_config(j, path, c, err);
        if (st == MT_OK)
            st = enc_head_config(j, path, a, c, err);
    }
    cJSON_Delete(j);
    return st;
}

/* 1_Pooling/config.json: mean, CLS or last-token pooling, one of them
 * true; any other mode, an unknown field or a non-bool value is refused,
 * naming the field. Without the file, the row's pooling. */
static mt_status read_pooling(const char *dir, const enc_arch *a, enc_config *c, mt_err *err)
{
    char path[4096];
    cJSON *j = NULL;
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    c->pool = a->pooling;
    c->include_prompt = true;
    if (mt_json_load(path, &j, NULL) != MT_OK)
        return MT_OK;
    /* the modes, in sentence-transformers' order; the ones served first */
    static const char *const modes[] = {"pooling_mode_mean_tokens", "pooling_mode_cls_token",
                                        "pooling_mode_lasttoken",
                                        "pooling_mode_max_tokens",
                                        "pooling_mode_mean_sqrt_len_tokens",
                                        "pooling_mode_weightedmean_tokens"};
    static const mt_pooling served[3] = {MT_POOL_MEAN, MT_POOL_CLS, MT_POOL_LAST};
    int on = -1, non = 0;
    mt_status st = MT_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, j)
    {
        size_t k = 0;
        while (k < 6 && strcmp(it->string, modes[k]) != 0)
            k++;
        if (k == 6 && !strcmp(it->string, "word_embedding_dimension") && cJSON_IsNumber(it))
            continue;
        if (k == 6 && !strcmp(it->string, "include_prompt") && cJSON_IsBool(it)) {
            c->include_prompt = cJSON_IsTrue(it);
            continue;
        }
        if (k == 6)
            st = mt_fail(err, MT_EUNSUPPORTED, "%s: field '%s' is not supported", path, it->string);
        else if (!cJSON_IsBool(it))
            st = mt_fail(err, MT_EFORMAT, "%s: field '%s' must be true or false", path, it->string);
        else if (cJSON_IsTrue(it) && k >= 3)
            st = mt_fail(err, MT_EUNSUPPORTED,
                         "%s: field '%s': only mean, CLS or last-token pooling is supported",
                         path, it->string);
        else if (cJSON_IsTrue(it))
            on = (int)k, non++;
        if (st != MT_OK)
            break;
    }
    cJSON_Delete(j);
    if (st == MT_OK && non != 1)
        st = mt_fail(err, MT_EUNSUPPORTED,
                     "%s: exactly one of pooling_mode_mean_tokens, pooling_mode_cls_token and "
                     "pooling_mode_lasttoken must be true",
                     path);
    if (st == MT_OK)
        c->pool = served[on];
    return st;
}

/* Reads config.json (the architecture), sentence_bert_config.json
 * (max_seq_length), 1_Pooling/config.json (mean or CLS pooling) and
 * modules.json (whether a Normalize module follows). */
mt_status enc_read_configs(const char *dir, const enc_arch *a, enc_config *c, mt_err *err)
{
    char path[4096];
    cJSON *j = NULL;
    mt_status st;
    memset(c, 0, sizeof *c);
    if ((st = read_arch(dir, a, c, err)) != MT_OK)
        return st;

    snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir);
    if (mt_json_load(path, &j, NULL) == MT_OK) {
        st = enc_json_int(j, path, "max_seq_length", 2, c->max_seq_len, &c->max_seq_len, err);
        cJSON_Delete(j);
        if (st != MT_OK)
            return st;
    }
    if ((st = read_pooling(dir, a, c, err)) != MT_OK)
        return st;

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
    if (c->classify) { /* a classifier's head reads the first token, as it is */
        c->pool = MT_POOL_CLS;
        c->normalize = 0;
    }
    return MT_OK;
}

static const mt_model_ops enc_ops;
static atomic_uint graph_ids; /* numbers models for their recorded forwards' keys */

/* The folder's tokenizer, of the kind and casing its own files say
 * (models/enc_tokenizer.c), with the row's special tokens. */
static mt_status load_tokenizer(enc_model *m, const char *dir, mt_err *err)
{
    const enc_arch *a = m->arch;
    return enc_tokenizer_load(dir, a->cls_token, a->sep_token, a->pad_token, a->unk_token,
                              m->cfg.vocab, &m->tok, err);
}

/* Whether the variant loads a pre-quantized file (mantissa quantize). */
static bool prequantized(const mt_model_opts *opts)
{
    return opts && opts->weights && *opts->weights;
}

/* The weights file: the folder's FP32 model, or a pre-quantized file whose
 * metadata must match the variant; a variant that names no mix takes the
 * one the file records. */
static mt_status open_weights(enc_model *m, const char *dir, const mt_model_opts *opts,
                              st_file **f, mt_err *err)
{
    char path[4096];
    if (prequantized(opts)) {
        m->prequant = 1;
        mt_status st = st_open(opts->weights, f, err);
        const char *fmix = st == MT_OK ? st_meta(*f, "mantissa.mix") : NULL;
        if (fmix && *fmix && !(opts->mix && *opts->mix) &&
            (st = enc_setup_mix(m, fmix, err)) != MT_OK)
            return mt_prefix(err, st, "%s: the mix it records: ", opts->weights);
        return st != MT_OK ? st
                           : enc_check_quant_meta(*f, m->prec, &m->calib, m->mix_text, err);
    }
    st_model_path(dir, path, sizeof path);
    return st_open(path, f, err);
}

/* The activation type the backend runs this model's pooled forwards in
 * (backend.h, act_format): 16-bit where the backend keeps them so for the
 * one precision every GEMM weight has, the model pools by mean (CLS
 * pooling downloads rows as they are) and its rows suit the 16-bit GEMMs
 * (widths multiples of 8, whole 16-byte rows); else FP32. */
static mt_act_format pick_act_format(const enc_model *m)
{
    const mt_backend_ops *op = m->be->ops;
    const enc_config *c = &m->cfg;
    const enc_layer_kind *k = &m->arch->kind;
    const bool bert = k->place == ENC_NORM_POST && k->norm == ENC_LAYERNORM &&
                      k->mlp == ENC_MLP_GELU && k->pos == ENC_POS_LEARNED && !k->causal &&
                      c->kv_heads == c->heads && c->head_dim * c->heads == c->hidden;
    if (!op->act_format || !op->set_act_format || c->pool != MT_POOL_MEAN || c->hidden % 8 ||
        c->intermediate % 8 || c->layers < 1 || !bert)
        return MT_ACTF_F32; /* 16-bit rows: BERT-shaped layers only */
    const mt_precision p = m->layer[0].qkv->prec;
    for (int l = 0; l < c->layers; l++) {
        const enc_layer *L = &m->layer[l];
        if (L->qkv->prec != p || L->attn_out->prec != p || L->inter->prec != p ||
            L->out->prec != p)
            return MT_ACTF_F32;
    }
    return op->act_format(m->be, p);
}

/* A 16-bit forward's GEMMs take their bias in the activation type
 * (backend.h): each layer's four biases, rounded once, made at load. */
static mt_status make_bias16(enc_model *m, mt_err *err)
{
    const mt_backend_ops *op = m->be->ops;
    const nf_format fmt = m->actf == MT_ACTF_BF16 ? NF_BF16 : NF_F16;
    const size_t h = (size_t)m->cfg.hidden, in = (size_t)enc_inter_width(&m->cfg);
    const size_t qkv = (size_t)enc_qkv_width(&m->cfg);
    const size_t len[4] = {qkv, h, in, h}, most = qkv > in ? qkv : in;
    float *host = malloc(sizeof(float) * most);
    uint16_t *codes = malloc(sizeof(uint16_t) * most);
    mt_status st = host && codes ? MT_OK : mt_fail(err, MT_ENOMEM, "out of memory");
    for (int l = 0; l < m->cfg.layers && st == MT_OK; l++) {
        enc_layer *L = &m->layer[l];
        const float *b32[4] = {L->b_qkv, L->b_attn_out, L->b_inter, L->b_out};
        for (int g = 0; g < 4 && st == MT_OK; g++) {
            if (!b32[g])
                continue;
            if (!(L->b16[g] = op->alloc(m->be, sizeof(uint16_t) * len[g]))) {
                st = mt_fail(err, MT_ENOMEM, "out of %s memory", m->be->device);
                break;
            }
            m->other_bytes += sizeof(uint16_t) * len[g];
            if ((st = op->download(m->be, host, b32[g], sizeof(float) * len[g], err)) ||
                (st = nf_encode(fmt, host, codes, len[g], 1.0f, err)))
                break;
            st = op->upload(m->be, L->b16[g], codes, sizeof(uint16_t) * len[g], err);
        }
    }
    free(host);
    free(codes);
    return st;
}

/* config_sentence_transformers.json's "prompts" (an object of strings)
 * and "default_prompt_name" (one of them, or null), when the folder has
 * the file; a value of the wrong type is refused naming the file and
 * field. */
static mt_status read_prompts(enc_model *m, const char *dir, mt_err *err)
{
    char path[4096];
    cJSON *j = NULL;
    snprintf(path, sizeof path, "%s/config_sentence_transformers.json", dir);
    if (access(path, F_OK) != 0)
        return MT_OK;
    mt_status st = mt_json_load(path, &j, err);
    const cJSON *p = j ? cJSON_GetObjectItemCaseSensitive(j, "prompts") : NULL, *it;
    const cJSON *d = j ? cJSON_GetObjectItemCaseSensitive(j, "default_prompt_name") : NULL;
    const int n = cJSON_IsObject(p) ? cJSON_GetArraySize(p) : 0;
    if (st == MT_OK && p && !cJSON_IsObject(p) && !cJSON_IsNull(p))
        st = mt_fail(err, MT_EFORMAT, "%s: field 'prompts' must be an object of strings", path);
    if (st == MT_OK && n > 0 &&
        (!(m->prompt_names = calloc((size_t)n, sizeof(char *))) ||
         !(m->prompt_texts = calloc((size_t)n, sizeof(char *)))))
        st = mt_fail(err, MT_ENOMEM, "out of memory");
    const cJSON *each = st == MT_OK && n > 0 ? p : NULL;
    cJSON_ArrayForEach(it, each)
    {
        if (!cJSON_IsString(it)) {
            st = mt_fail(err, MT_EFORMAT, "%s: field 'prompts.%.60s' must be a string", path,
                         it->string);
            break;
        }
        m->prompt_names[m->nprompts] = strdup(it->string);
        m->prompt_texts[m->nprompts] = strdup(it->valuestring);
        if (!m->prompt_names[m->nprompts++] || !m->prompt_texts[m->nprompts - 1]) {
            st = mt_fail(err, MT_ENOMEM, "out of memory");
            break;
        }
    }
    if (st == MT_OK && d && !cJSON_IsNull(d)) {
        const bool known = cJSON_IsString(d) && cJSON_GetObjectItemCaseSensitive(p, d->valuestring);
        if (!known)
            st = mt_fail(err, MT_EFORMAT, "%s: field 'default_prompt_name' must name one of "
                         "'prompts', or be null", path);
        else if (!(m->prompt_default = strdup(d->valuestring)))
            st = mt_fail(err, MT_ENOMEM, "out of memory");
    }
    cJSON_Delete(j);
    return st;
}

/* What was read is in the backend: the file's pages need not stay
 * resident, the FP32 copies of its 16-bit tensors are freed, and so is
 * what glibc would keep of the layer's freed copies (holes between the
 * weights already placed, reused only in part by the next layer's: at
 * Qwen3-0.6B's shapes they grew a bf16 load to 1.25x its model, fp32's to
 * 1.27x). */
static void pages_done(enc_model *m, st_file *f)
{
    st_drop_pages(f);
    enc_conv_release(m);
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* The model in dir; stats: int8's smoothing statistics where the caller
 * has them (NULL: calibrated here when the variant needs them). */
static mt_status load(const char *dir, const enc_arch *a, mt_backend *be,
                      const mt_model_opts *opts, const float *given, enc_model **out,
                      mt_err *err)
{
    enc_model *m = calloc(1, sizeof *m);
    if (!m)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    m->arch = a;
    m->be = be;
    m->graph_id = atomic_fetch_add(&graph_ids, 1) + 1;
    m->prec = opts ? opts->precision : MT_PREC_FP32;
    m->calib = opts ? opts->calib : (mt_calib_opts){MT_CALIB_ABSMAX, 100.0};
    st_file *f = NULL;
    float *stats = NULL;
    mt_status st = enc_read_configs(dir, a, &m->cfg, err);
    if (st != MT_OK)
        goto fail;
    if (opts && opts->max_seq_len > 0 && opts->max_seq_len < m->cfg.max_seq_len)
        m->cfg.max_seq_len = opts->max_seq_len;
    if ((st = enc_prepare_ops(m, err)) != MT_OK)
        goto fail;
    if ((st = enc_setup_mix(m, opts ? opts->mix : NULL, err)) != MT_OK)
        goto fail;

    /* Smoothing's statistics come from the folder's FP32 weights streamed
     * a layer at a time (models/encoder_stream.c), run before this model
     * reads anything: never a whole FP32 model beside this one. */
    if (!prequantized(opts) &&
        (enc_uses_precision(m, MT_PREC_INT8) || enc_uses_precision(m, MT_PREC_INT8G)) &&
        be->ops->weight_set_input_scale) {
        if (!given && (st = enc_calibrate(dir, a, be, m->cfg.max_seq_len, &stats, err)) != MT_OK)
            goto fail;
        m->smooth_stats = given ? given : stats;
    }
    if ((st = load_tokenizer(m, dir, err)) != MT_OK || (st = read_prompts(m, dir, err)) != MT_OK ||
        (st = open_weights(m, dir, opts, &f, err)) != MT_OK ||
        (st = enc_load_embeddings(m, f, NULL, 0, err)) != MT_OK ||
        (st = enc_load_head(m, dir, f, err)) != MT_OK ||
        (st = enc_load_outputs(m, dir, err)) != MT_OK)
        goto fail;
    pages_done(m, f);
    m->layer = calloc((size_t)m->cfg.layers, sizeof *m->layer);
    if (!m->layer) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int l = 0; l < m->cfg.layers && st == MT_OK; l++) {
        st = enc_load_layer(m, f, l, err);
        pages_done(m, f);
    }
    free(stats);
    stats = NULL;
    m->smooth_stats = NULL;
    if (st != MT_OK)
        goto fail;
    st_close(f);
    f = NULL;
    m->actf = pick_act_format(m);
    if (m->actf != MT_ACTF_F32 && (st = make_bias16(m, err)) != MT_OK)
        goto fail;
    m->base.ops = &enc_ops;
    fill_info(m);
    *out = m;
    return MT_OK;

fail:
    free(stats);
    st_close(f);
    enc_free(&m->base);
    return st;
}

mt_status enc_load_model(const char *dir, const enc_arch *a, mt_backend *be,
                         const mt_model_opts *opts, mt_model **out, mt_err *err)
{
    return enc_load_smoothed(dir, a, be, opts, NULL, out, err);
}

mt_status enc_load_smoothed(const char *dir, const enc_arch *a, mt_backend *be,
                            const mt_model_opts *opts, const float *stats, mt_model **out,
                            mt_err *err)
{
    enc_model *m;
    mt_status st = load(dir, a, be, opts, stats, &m, err);
    if (st == MT_OK)
        *out = &m->base;
    return st;
}

void enc_layer_free(mt_backend *be, enc_layer *L)
{
    mt_weight *w[] = {L->qkv, L->attn_out, L->inter, L->out};
    void *v[] = {L->b_qkv,  L->b_attn_out, L->b_inter, L->b_out,  L->ln1_g,
                 L->ln1_b,  L->ln2_g,      L->ln2_b,   L->b16[0], L->b16[1],
                 L->b16[2], L->b16[3],     L->q_norm,  L->k_norm};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        if (w[i])
            be->ops->weight_destroy(be, w[i]);
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (v[i])
            be->ops->free(be, v[i]);
    memset(L, 0, sizeof *L);
}

static void enc_free(mt_model *base)
{
    enc_model_free((enc_model *)base);
}

void enc_model_free(enc_model *m)
{
    if (!m)
        return;
    mt_backend *be = m->be;
    if (m->layer) {
        for (int l = 0; l < m->cfg.layers; l++)
            enc_layer_free(be, &m->layer[l]);
        free(m->layer);
    }
    void *v[] = {m->word,    m->word16,  m->pos,     m->type0,   m->type1,
                 m->emb_ln_g, m->emb_ln_b, m->final_g, m->final_b, (void *)m->attn.pos_bias};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (v[i])
            be->ops->free(be, v[i]);
    enc_tok_free(m->tok);
    enc_head_free(m->head);
    enc_outputs_free(m->outputs);
    for (int i = 0; i < m->nprompts; i++)
        free(m->prompt_names[i]), free(m->prompt_texts[i]);
    free(m->prompt_names);
    free(m->prompt_texts);
    free(m->prompt_default);
    enc_conv_release(m);
    free(m->conv);
    free(m->act_max);
    free(m);
}

const enc_config *enc_get_config(const mt_model *m) { return &((const enc_model *)m)->cfg; }

static mt_status enc_tokenize(const mt_model *base, const char *text, size_t len, int32_t *ids,
                               int max_len, int *n, int *full_len, mt_err *err)
{
    return enc_tok_encode(((const enc_model *)base)->tok, text, len, ids, max_len, n, full_len,
                          err);
}

static mt_status enc_tokenize_offsets(const mt_model *base, const char *text, size_t len,
                                      int32_t *ids, int32_t *offsets, int max_len, int *n,
                                      int *full_len, mt_err *err)
{
    return enc_tok_encode_offsets(((const enc_model *)base)->tok, text, len, ids, offsets, max_len,
                                  n, full_len, err);
}

static const char *enc_token_text(const mt_model *base, int32_t id, bool *special)
{
    return enc_tok_token(((const enc_model *)base)->tok, id, special);
}

static mt_status enc_decode(const mt_model *base, const int32_t *ids, int n, bool skip_special,
                            char **out, mt_err *err)
{
    return enc_tok_decode(((const enc_model *)base)->tok, ids, n, skip_special, out, err);
}

static mt_status enc_forward(mt_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                              float *out, float *norms, mt_err *err)
{
    enc_model *b = (enc_model *)m;
    return enc_run(b, ids, offsets, NULL, nseq, b->cfg.layers, true, out, norms, err);
}

static mt_status enc_forward_tokens(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                   int nseq, float *out, mt_err *err)
{
    enc_model *b = (enc_model *)m;
    return enc_run(b, ids, offsets, NULL, nseq, b->cfg.layers, false, out, NULL, err);
}

mt_status enc_hidden_states(mt_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                             int nlayers, float *out, mt_err *err)
{
    enc_model *b = (enc_model *)m;
    if (nlayers < 0 || nlayers > b->cfg.layers)
        return mt_fail(err, MT_EINVAL, "nlayers %d out of range 0..%d", nlayers, b->cfg.layers);
    return enc_run(b, ids, offsets, NULL, nseq, nlayers, false, out, NULL, err);
}

static mt_status enc_tokenize_pair(const mt_model *base, const char *a, size_t alen,
                                   const char *b, size_t blen, int32_t *ids, int max_len, int *n,
                                   int *seg, int *full_len, mt_err *err)
{
    const enc_model *m = (const enc_model *)base;
    if (!m->cfg.pairs)
        return mt_fail(err, MT_EUNSUPPORTED, "this model (%s) takes no text pairs",
                       m->arch->model_type);
    return enc_tok_encode_pair(m->tok, a, alen, b, blen, ids, max_len, n, seg, full_len, err);
}

/* A classifier's scores: the pooled forward (the first token's hidden
 * state, as it is), then the head on the host. */
static mt_status enc_forward_scores(mt_model *base, const int32_t *ids, const int32_t *offsets,
                                    const int32_t *segs, int nseq, float *out, mt_err *err)
{
    enc_model *m = (enc_model *)base;
    if (!m->head)
        return mt_fail(err, MT_EUNSUPPORTED, "this model (%s) is not a classifier",
                       m->arch->model_type);
    float *first = malloc(sizeof(float) * (size_t)(nseq > 0 ? nseq : 1) * m->cfg.hidden);
    if (!first)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    mt_status st = enc_run(m, ids, offsets, segs, nseq, m->cfg.layers, true, first, NULL, err);
    if (st == MT_OK)
        st = enc_head_scores(m->head, first, nseq, out, err);
    free(first);
    return st;
}

static mt_status enc_forward_outputs(mt_model *base, const int32_t *ids, const int32_t *offsets,
                                     int nseq, float *out, float *norms, mt_err *err)
{
    return enc_outputs_forward((enc_model *)base, ids, offsets, nseq, out, norms, err);
}

static const mt_model_ops enc_ops = {
    .free = enc_free,
    .tokenize = enc_tokenize,
    .token_text = enc_token_text,
    .tokenize_offsets = enc_tokenize_offsets,
    .decode = enc_decode,
    .forward = enc_forward,
    .forward_tokens = enc_forward_tokens,
    .tokenize_pair = enc_tokenize_pair,
    .forward_scores = enc_forward_scores,
    .forward_outputs = enc_forward_outputs,
};
