/* bert.c: the BERT encoder forward pass and its loading, written against
 * the backend table (engine/backend.h) so that it runs unchanged on every
 * backend. The forward reads like the paper: embeddings + LayerNorm, then
 * per layer self-attention and a GELU MLP, each followed by residual +
 * LayerNorm, then mean pooling and L2 normalisation (sentence-transformers).
 */
#include "models/bert.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/calib_text.h"
#include "engine/jsonfile.h"
#include "engine/mix.h"
#include "engine/quant.h"
#include "engine/safetensors.h"
#include "engine/tokenizer.h"

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
    mt_mix mix;          /* per-layer precisions over prec (engine/mix.h) */
    char mix_text[1024]; /* its text form, "" when none */
    mt_calib_opts calib;
    int prequant; /* weights come from a bert_save_quantized file */
    float *act_max; /* calibration: per (layer, gemm) max |input| per column, or NULL */
    const float *smooth_stats; /* while loading int8: another model's act_max */
    tok_t *tok;
    float *word, *pos, *type0, *emb_ln_g, *emb_ln_b; /* backend memory */
    bert_layer *layer;
    size_t gemm_bytes, other_bytes;
};

static mt_status load(const char *dir, mt_backend *be, const mt_model_opts *opts,
                      bert_model **out, mt_err *err);
static void bert_free(mt_model *base);

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

/* "x.weight" -> "x.weight_scale": where a pre-quantized file keeps the
 * per-channel scales of a weight. */
static void scale_name(const char *weight, char *out, size_t cap)
{
    snprintf(out, cap, "%s_scale", weight);
}

/* SmoothQuant's migration strength: s_j = max|x_j|^a / max|w_j|^(1-a). */
#define SMOOTH_ALPHA 0.5
#define GEMMS_PER_LAYER 4 /* qkv, attention output, intermediate, output */

/* The smoothing factors of one GEMM input: activation outliers (a few
 * hidden dimensions of BERT are 10-100x the others after LayerNorm) make
 * per-token int8 scales coarse for every other dimension; dividing x by s
 * per column and multiplying W's columns by s moves that range into the
 * weights, which per-channel scales absorb better. */
static void col_absmax(const float *w, int n, int k, float *colmax)
{
    for (int r = 0; r < n; r++)
        for (int j = 0; j < k; j++) {
            float a = fabsf(w[(size_t)r * k + j]);
            colmax[j] = a > colmax[j] ? a : colmax[j];
        }
}

/* s from the activation maxima and the weight's column maxima (in place). */
static void smooth_finish(const float *act_max, float *s, int k)
{
    for (int j = 0; j < k; j++) {
        double a = act_max[j] > 1e-5f ? act_max[j] : 1e-5, b = s[j] > 1e-5f ? s[j] : 1e-5;
        s[j] = (float)(pow(a, SMOOTH_ALPHA) / pow(b, 1.0 - SMOOTH_ALPHA));
    }
}

static void smooth_factors(const float *act_max, const float *w, int n, int k, float *s)
{
    memset(s, 0, sizeof(float) * (size_t)k);
    col_absmax(w, n, k, s);
    smooth_finish(act_max, s, k);
}

static void smooth_name(const char *weight, char *out, size_t cap)
{
    snprintf(out, cap, "%s_input_smooth", weight);
}

/* Loads one GEMM weight made of nparts tensors stacked along the output
 * dimension (parts of rows[i] x k each; QKV is three parts), and places it
 * in the backend in the variant's precision. From an FP32 file it packs then
 * quantizes (per-channel scales do not mix across rows, so packing first is
 * the same as quantizing each part); from a pre-quantized file it packs the
 * stored codes and scales as they are, with no re-quantization. */
static mt_status load_gemm(bert_model *m, const st_file *f, const char *const *names,
                           const int *rows, int nparts, int k, const float *act_max,
                           int layer, mt_gemm_kind kind, mt_weight **out, mt_err *err)
{
    const mt_precision p =
        mt_op_precision(MT_OP_GEMM_WEIGHT, mt_mix_precision(&m->mix, layer, kind, m->prec));
    const st_dtype want = m->prequant ? mt_prec(p)->file_dtype : ST_F32;
    const size_t esz = st_dtype_size(want);
    int n = 0;
    for (int i = 0; i < nparts; i++)
        n += rows[i];
    const void *src[4];
    const float *ssrc[4] = {0};
    float *smooth = NULL;
    for (int i = 0; i < nparts; i++) {
        const st_tensor *t = st_find(f, names[i]);
        if (!t)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is missing", st_path(f), names[i]);
        if (t->dtype != want || t->ndim != 2 || t->shape[0] != rows[i] || t->shape[1] != k)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is %s [%lld,%lld], expected %s [%d,%d]",
                           st_path(f), names[i], st_dtype_name(t->dtype),
                           (long long)t->shape[0], t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                           st_dtype_name(want), rows[i], k);
        src[i] = t->data;
        if (!m->prequant) {
            mt_status st = check_finite(f, names[i], t->data, (size_t)rows[i] * k, err);
            if (st != MT_OK)
                return st;
        } else if (!nf_all_finite(mt_prec(p)->format, t->data, (size_t)rows[i] * k)) {
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' holds a NaN or Inf code",
                           st_path(f), names[i]);
        }
        if (m->prequant && mt_prec(p)->has_scales) {
            char sn[160];
            scale_name(names[i], sn, sizeof sn);
            const float *sc;
            mt_status st = find_f32(f, sn, rows[i], 0, &sc, err);
            if (st != MT_OK)
                return st;
            for (int r = 0; r < rows[i]; r++)
                if (!(sc[r] > 0.f) || sc[r] > 3.0e38f)
                    return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': scale %d is %g, not a "
                                   "positive finite number", st_path(f), sn, r, (double)sc[r]);
            ssrc[i] = sc;
        }
    }

    /* pack (a single part is used in place) */
    const void *data = src[0];
    const float *scales = ssrc[0];
    void *packed = NULL;
    float *pscales = NULL;
    mt_status st = MT_OK;
    if (nparts > 1) {
        packed = malloc(esz * (size_t)n * k);
        pscales = m->prequant && mt_prec(p)->has_scales ? malloc(sizeof(float) * (size_t)n) : NULL;
        if (!packed || (m->prequant && mt_prec(p)->has_scales && !pscales)) {
            st = mt_fail(err, MT_ENOMEM, "out of memory packing '%s'", names[0]);
            goto done;
        }
        size_t off = 0;
        for (int i = 0; i < nparts; i++) {
            memcpy((char *)packed + off * k * esz, src[i], esz * (size_t)rows[i] * k);
            if (pscales)
                memcpy(pscales + off, ssrc[i], sizeof(float) * (size_t)rows[i]);
            off += (size_t)rows[i];
        }
        data = packed;
        scales = pscales;
    }
    char smn[192];
    smooth_name(names[0], smn, sizeof smn);
    if (m->prequant && st_find(f, smn)) {
        const float *fs;
        if ((st = find_f32(f, smn, k, 0, &fs, err)) != MT_OK)
            goto done;
        if (!(smooth = malloc(sizeof(float) * (size_t)k))) {
            st = mt_fail(err, MT_ENOMEM, "out of memory");
            goto done;
        }
        memcpy(smooth, fs, sizeof(float) * (size_t)k);
    } else if (!m->prequant && act_max && p == MT_PREC_INT8) {
        smooth = malloc(sizeof(float) * (size_t)k);
        float *scaled = malloc(sizeof(float) * (size_t)n * k);
        if (!smooth || !scaled) {
            free(scaled);
            st = mt_fail(err, MT_ENOMEM, "out of memory smoothing '%s'", names[0]);
            goto done;
        }
        smooth_factors(act_max, data, n, k, smooth);
        for (int r = 0; r < n; r++)
            for (int j = 0; j < k; j++)
                scaled[(size_t)r * k + j] = ((const float *)data)[(size_t)r * k + j] * smooth[j];
        free(packed);
        packed = scaled;
        data = scaled;
    }
    if (smooth && !m->be->ops->weight_set_input_scale) {
        st = mt_fail(err, MT_EUNSUPPORTED, "%s: '%s' uses activation smoothing, which the %s "
                     "backend does not support", st_path(f), names[0], m->be->device);
        goto done;
    }
    if (m->prequant)
        st = m->be->ops->weight_upload(m->be, p, n, k, data, scales, out, err);
    else
        st = mt_weight_create(m->be, data, n, k, p, &m->calib, out, err);
    if (st == MT_OK && smooth) {
        float *inv = malloc(sizeof(float) * (size_t)k);
        if (!inv) {
            st = mt_fail(err, MT_ENOMEM, "out of memory");
        } else {
            for (int j = 0; j < k; j++)
                inv[j] = 1.0f / smooth[j];
            st = m->be->ops->weight_set_input_scale(m->be, *out, inv, err);
            free(inv);
        }
        if (st != MT_OK) {
            m->be->ops->weight_destroy(m->be, *out);
            *out = NULL;
        }
    }
    if (st != MT_OK)
        mt_prefix(err, st, "tensor '%s': ", names[0]);
    else
        m->gemm_bytes += (*out)->bytes;
done:
    free(smooth);
    free(packed);
    free(pscales);
    return st;
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
    const float *bq, *bk, *bv;
    snprintf(n1, sizeof n1, "%s.%d.attention.self.query.weight", p, l);
    snprintf(n2, sizeof n2, "%s.%d.attention.self.key.weight", p, l);
    snprintf(n3, sizeof n3, "%s.%d.attention.self.value.weight", p, l);
    const char *qkv_names[3] = {n1, n2, n3};
    const int qkv_rows[3] = {h, h, h};
    const int maxk = in > h ? in : h;
    const float *sm = m->smooth_stats ? m->smooth_stats + (size_t)l * GEMMS_PER_LAYER * maxk : NULL;
    if ((st = load_gemm(m, f, qkv_names, qkv_rows, 3, h, sm, l, MT_GEMM_QKV, &L->qkv, err)))
        return st;
    snprintf(n1, sizeof n1, "%s.%d.attention.self.query.bias", p, l);
    snprintf(n2, sizeof n2, "%s.%d.attention.self.key.bias", p, l);
    snprintf(n3, sizeof n3, "%s.%d.attention.self.value.bias", p, l);
    if ((st = find_f32(f, n1, h, 0, &bq, err)) || (st = find_f32(f, n2, h, 0, &bk, err)) ||
        (st = find_f32(f, n3, h, 0, &bv, err)))
        return st;
    float *bqkv = malloc(sizeof(float) * 3 * (size_t)h);
    if (!bqkv)
        return mt_fail(err, MT_ENOMEM, "out of memory packing layer %d qkv bias", l);
    memcpy(bqkv, bq, h * sizeof(float));
    memcpy(bqkv + h, bk, h * sizeof(float));
    memcpy(bqkv + 2 * h, bv, h * sizeof(float));
    st = to_backend(m, bqkv, 3 * (size_t)h, &L->b_qkv, err);
    free(bqkv);
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
        snprintf(n1, sizeof n1, "%s.%d.%s", p, l, g[i].w);
        snprintf(n2, sizeof n2, "%s.%d.%s", p, l, g[i].b);
        const char *names[1] = {n1};
        if ((st = load_gemm(m, f, names, &g[i].n, 1, g[i].k, sm ? sm + (i + 1) * maxk : NULL,
                            l, (mt_gemm_kind)(i + 1), g[i].wt, err)) ||
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

/* Per-column activation maxima of every GEMM input of dir's FP32 model on
 * the built-in calibration text (engine/calib_text.c): the statistics that
 * INT8 activation smoothing needs. *out: layers x 4 x max(h, i) floats. */
static mt_status calibrate(const char *dir, mt_backend *be, int max_seq_len, float **out,
                           mt_err *err)
{
    bert_model *ref;
    mt_model_opts o = {.precision = MT_PREC_FP32, .max_seq_len = max_seq_len};
    mt_status st = load(dir, be, &o, &ref, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "calibration model: ");
    const bert_config *c = &ref->cfg;
    const int maxk = c->intermediate > c->hidden ? c->intermediate : c->hidden;
    ref->act_max = calloc((size_t)c->layers * GEMMS_PER_LAYER * maxk, sizeof(float));
    float *vec = malloc(sizeof(float) * 16 * (size_t)c->hidden);
    if (!ref->act_max || !vec)
        st = mt_fail(err, MT_ENOMEM, "out of memory while calibrating");
    for (int i = 0; st == MT_OK && i < mt_calib_sentences_n; i += 16) {
        int nb = mt_calib_sentences_n - i < 16 ? mt_calib_sentences_n - i : 16;
        st = mt_model_embed_texts(&ref->base, mt_calib_sentences + i, NULL, nb, vec, NULL, err);
    }
    free(vec);
    if (st == MT_OK) {
        *out = ref->act_max;
        ref->act_max = NULL;
    }
    bert_free(&ref->base);
    return st;
}

/* A pre-quantized file says in its metadata how it was made; refuse one
 * that does not match what the variant asks for, so a config edit can never
 * silently serve other weights than it names. */
static mt_status check_quant_meta(const st_file *f, mt_precision p, const mt_calib_opts *c,
                                  const char *mix, mt_err *err)
{
    const char *fmt = st_meta(f, "mantissa.format");
    const char *fmix = st_meta(f, "mantissa.mix");
    if (strcmp(fmix ? fmix : "", mix))
        return mt_fail(err, MT_EINVAL, "%s: quantized with mix \"%s\", but the variant asks for "
                       "\"%s\"", st_path(f), fmix ? fmix : "", mix);
    const char *prec = st_meta(f, "mantissa.precision");
    const char *cal = st_meta(f, "mantissa.calibration");
    if (!fmt || strcmp(fmt, "1") != 0 || !prec)
        return mt_fail(err, MT_EFORMAT, "%s: not a mantissa quantized file (metadata "
                       "mantissa.format/mantissa.precision missing; make one with mantissa quantize)",
                       st_path(f));
    if (strcmp(prec, mt_precision_name(p)) != 0)
        return mt_fail(err, MT_EINVAL, "%s: quantized as %s, but the variant asks for %s",
                       st_path(f), prec, mt_precision_name(p));
    if ((mt_prec(p)->has_scales || *mix) && (!cal || strcmp(cal, mt_calib_name(c->method)) != 0))
        return mt_fail(err, MT_EINVAL, "%s: calibrated with %s, but the variant asks for %s",
                       st_path(f), cal ? cal : "(none)", mt_calib_name(c->method));
    if ((mt_prec(p)->has_scales || *mix) && c->method == MT_CALIB_PERCENTILE) {
        const char *pc = st_meta(f, "mantissa.percentile");
        if (!pc || fabs(atof(pc) - c->percentile) > 1e-9)
            return mt_fail(err, MT_EINVAL, "%s: calibrated at percentile %s, but the variant asks "
                           "for %g", st_path(f), pc ? pc : "(none)", c->percentile);
    }
    return MT_OK;
}

static const mt_model_ops bert_ops;

/* Whether any GEMM weight of the model is in precision p. */
static bool uses_precision(const bert_model *m, mt_precision p)
{
    for (int l = 0; l < m->cfg.layers; l++)
        for (int k = 0; k < MT_GEMM_KINDS; k++)
            if (mt_op_precision(MT_OP_GEMM_WEIGHT, mt_mix_precision(&m->mix, l, k, m->prec)) == p)
                return true;
    return false;
}

/* Parses the variant's mix (kept in its normalised text form, which a
 * quantized file's metadata must match) and checks that the backend runs
 * every precision it gives. */
static mt_status setup_mix(bert_model *m, const char *text, mt_err *err)
{
    mt_status st = mt_mix_parse(text, &m->mix, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "mix: ");
    if (!mt_mix_format(&m->mix, m->mix_text, sizeof m->mix_text))
        return mt_fail(err, MT_ELIMIT, "mix: longer than %zu bytes", sizeof m->mix_text);
    for (int p = 0; p < MT_PREC_COUNT; p++)
        if ((p == (int)m->prec || uses_precision(m, (mt_precision)p)) &&
            !m->be->ops->supports(m->be, (mt_precision)p))
            return mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the %s backend",
                           mt_precision_name((mt_precision)p), m->be->device);
    return MT_OK;
}

static mt_status load(const char *dir, mt_backend *be, const mt_model_opts *opts,
                      bert_model **out, mt_err *err)
{
    bert_model *m = calloc(1, sizeof *m);
    if (!m)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    m->be = be;
    m->prec = opts ? opts->precision : MT_PREC_FP32;
    m->calib = opts ? opts->calib : (mt_calib_opts){MT_CALIB_ABSMAX, 100.0};
    st_file *f = NULL;
    float *stats = NULL;
    char path[4096];
    mt_status st = read_configs(dir, &m->cfg, err);
    if (st != MT_OK)
        goto fail;
    if (opts && opts->max_seq_len > 0 && opts->max_seq_len < m->cfg.max_seq_len)
        m->cfg.max_seq_len = opts->max_seq_len;
    if ((st = setup_mix(m, opts ? opts->mix : NULL, err)) != MT_OK)
        goto fail;

    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    tok_options topt = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100};
    if ((st = tok_load(path, &topt, &m->tok, err)) != MT_OK)
        goto fail;
    if (tok_vocab_size(m->tok) != m->cfg.vocab) {
        st = mt_fail(err, MT_EFORMAT, "%s has %d entries but config.json vocab_size is %d", path,
                     tok_vocab_size(m->tok), m->cfg.vocab);
        goto fail;
    }

    if (opts && opts->weights && *opts->weights) {
        m->prequant = 1;
        if ((st = st_open(opts->weights, &f, err)) != MT_OK ||
            (st = check_quant_meta(f, m->prec, &m->calib, m->mix_text, err)) != MT_OK)
            goto fail;
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if ((st = st_open(path, &f, err)) != MT_OK)
            goto fail;
    }
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

    if (!m->prequant && uses_precision(m, MT_PREC_INT8) && be->ops->weight_set_input_scale) {
        if ((st = calibrate(dir, be, m->cfg.max_seq_len, &stats, err)) != MT_OK)
            goto fail;
        m->smooth_stats = stats;
    }
    m->layer = calloc((size_t)m->cfg.layers, sizeof *m->layer);
    if (!m->layer) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int l = 0; l < m->cfg.layers && st == MT_OK; l++)
        st = load_layer(m, f, l, err);
    free(stats);
    stats = NULL;
    m->smooth_stats = NULL;
    if (st != MT_OK)
        goto fail;
    st_close(f);
    m->base.ops = &bert_ops;
    m->base.info = (mt_model_info){.arch = "bert",
                                   .hidden = m->cfg.hidden,
                                   .max_seq_len = m->cfg.max_seq_len,
                                   .vocab = m->cfg.vocab,
                                   .layers = m->cfg.layers,
                                   .intermediate = m->cfg.intermediate,
                                   .precision = m->prec,
                                   .mix = m->mix_text,
                                   .pooling = MT_POOL_MEAN,
                                   .normalize = m->cfg.normalize,
                                   .gemm_bytes = m->gemm_bytes,
                                   .resident_bytes = m->gemm_bytes + m->other_bytes};
    *out = m;
    return MT_OK;

fail:
    free(stats);
    st_close(f);
    bert_free(&m->base);
    return st;
}

mt_status bert_load_model(const char *dir, mt_backend *be, const mt_model_opts *opts,
                          mt_model **out, mt_err *err)
{
    bert_model *m;
    mt_status st = load(dir, be, opts, &m, err);
    if (st == MT_OK)
        *out = &m->base;
    return st;
}

static void bert_free(mt_model *base)
{
    bert_model *m = (bert_model *)base;
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
    free(m->act_max);
    free(m);
}

const bert_config *bert_get_config(const mt_model *m) { return &((const bert_model *)m)->cfg; }

static mt_status bert_tokenize(const mt_model *base, const char *text, size_t len, int32_t *ids,
                               int max_len, int *n, int *full_len, mt_err *err)
{
    return tok_encode(((const bert_model *)base)->tok, text, len, ids, max_len, n, full_len, err);
}

static const char *bert_token_text(const mt_model *base, int32_t id, bool *special)
{
    const tok_t *t = ((const bert_model *)base)->tok;
    *special = id == tok_cls_id(t) || id == tok_sep_id(t); /* the ones the template adds */
    return tok_token(t, id);
}

/* ========================================================================
 * forward
 * ====================================================================== */

/* Calibration: the largest |value| per column of one GEMM's input (t, k),
 * kept in m->act_max. Only runs while calibrating. */
static mt_status record(bert_model *m, int l, int g, const float *x, int t, int k, mt_err *err)
{
    if (!m->act_max)
        return MT_OK;
    const int maxk = m->cfg.intermediate > m->cfg.hidden ? m->cfg.intermediate : m->cfg.hidden;
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
        if ((st = record(m, l, 0, x, t, h, err)) ||
            (st = op->gemm(be, x, t, L->qkv, L->b_qkv, MT_ACT_NONE, qkv, err)) ||
            (st = op->attention(be, qkv, d_off, nseq, c->heads, h / c->heads, ctx, err)) ||
            (st = record(m, l, 1, ctx, t, h, err)) ||
            (st = op->gemm(be, ctx, t, L->attn_out, L->b_attn_out, MT_ACT_NONE, qkv, err)) ||
            (st = op->layernorm(be, qkv, x, L->ln1_g, L->ln1_b, t, h, c->eps, x, err)))
            goto done;
        /* MLP, then residual + LayerNorm */
        if ((st = record(m, l, 2, x, t, h, err)) ||
            (st = op->gemm(be, x, t, L->inter, L->b_inter, MT_ACT_GELU, mid, err)) ||
            (st = record(m, l, 3, mid, t, in, err)) ||
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

static mt_status bert_forward(mt_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                              float *out, mt_err *err)
{
    bert_model *b = (bert_model *)m;
    return run(b, ids, offsets, nseq, b->cfg.layers, true, out, err);
}

mt_status bert_hidden_states(mt_model *m, const int32_t *ids, const int32_t *offsets, int nseq,
                             int nlayers, float *out, mt_err *err)
{
    bert_model *b = (bert_model *)m;
    if (nlayers < 0 || nlayers > b->cfg.layers)
        return mt_fail(err, MT_EINVAL, "nlayers %d out of range 0..%d", nlayers, b->cfg.layers);
    return run(b, ids, offsets, nseq, nlayers, false, out, err);
}

static const mt_model_ops bert_ops = {
    .free = bert_free,
    .tokenize = bert_tokenize,
    .token_text = bert_token_text,
    .forward = bert_forward,
};

/* ========================================================================
 * saving a quantized model
 * ====================================================================== */

/* Layer and GEMM slot (0 qkv, 1 attention output, 2 intermediate, 3
 * output) of an encoder GEMM weight's name; false for other tensors. */
static bool gemm_slot(const char *name, int *layer, int *g)
{
    static const struct {
        const char *suffix;
        int g;
    } slots[] = {
        {"attention.self.query.weight", 0}, {"attention.self.key.weight", 0},
        {"attention.self.value.weight", 0}, {"attention.output.dense.weight", 1},
        {"intermediate.dense.weight", 2},   {"output.dense.weight", 3},
    };
    int l, at = 0;
    if (!strncmp(name, "bert.", 5))
        name += 5;
    if (sscanf(name, "encoder.layer.%d.%n", &l, &at) != 1 || at == 0 || l < 0)
        return false;
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++)
        if (!strcmp(name + at, slots[i].suffix)) {
            *layer = l;
            *g = slots[i].g;
            return true;
        }
    return false;
}

/* Whether a tensor of the HF BERT file is one of the encoder's GEMM weights
 * (the only tensors the op policy lets take a low precision). */
static bool is_gemm_weight(const char *name)
{
    static const char *const suffix[] = {
        ".attention.self.query.weight", ".attention.self.key.weight",
        ".attention.self.value.weight", ".attention.output.dense.weight",
        ".intermediate.dense.weight",   ".output.dense.weight",
    };
    if (strncmp(name, "encoder.layer.", 14) && strncmp(name, "bert.encoder.layer.", 19))
        return false;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        size_t sl = strlen(suffix[i]);
        if (n > sl && !strcmp(name + n - sl, suffix[i]))
            return true;
    }
    return false;
}

typedef struct {
    st_tensor t;
    void *owned;
} out_tensor;

static int by_dtype_size_desc(const void *a, const void *b)
{
    const st_tensor *x = &((const out_tensor *)a)->t, *y = &((const out_tensor *)b)->t;
    size_t sx = st_dtype_size(x->dtype), sy = st_dtype_size(y->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The precision tensor `name` is saved in: p, or what the mix gives its
 * (layer, kind). */
static mt_precision save_precision(const char *name, mt_precision p, const mt_mix *mix)
{
    int l, g;
    return gemm_slot(name, &l, &g) ? mt_mix_precision(mix, l, (mt_gemm_kind)g, p) : p;
}

mt_status bert_save_quantized(const char *dir, mt_precision p, const mt_calib_opts *calib,
                              const char *mix_text, const char *out_path, mt_err *err)
{
    char path[4096], mixn[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    mt_mix mix;
    mt_status st = mt_mix_parse(mix_text, &mix, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "mix: ");
    if (!mt_mix_format(&mix, mixn, sizeof mixn))
        return mt_fail(err, MT_ELIMIT, "mix: longer than %zu bytes", sizeof mixn);
    st_file *f;
    if ((st = st_open(path, &f, err)) != MT_OK)
        return st;
    size_t n = st_count(f), no = 0;
    out_tensor *o = calloc(3 * n, sizeof *o);
    char (*names)[160] = calloc(n, sizeof *names);
    char (*snames)[192] = calloc(n, sizeof *snames);
    float *stats = NULL, *smooth = NULL; /* per (layer, gemm): act maxima, then factors */
    bert_config cfg;
    int maxk = 0;
    if (!o || !names || !snames) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto done;
    }
    /* INT8 is smoothed as load() smooths it on the CPU backend */
    bool any_int8 = false;
    for (size_t i = 0; i < n; i++)
        any_int8 |= is_gemm_weight(st_get(f, i)->name) &&
                    save_precision(st_get(f, i)->name, p, &mix) == MT_PREC_INT8;
    if (any_int8) {
        mt_backend *cpu;
        if ((st = read_configs(dir, &cfg, err)) != MT_OK ||
            (st = mt_backend_cpu_create(0, &cpu, err)) != MT_OK)
            goto done;
        st = calibrate(dir, cpu, cfg.max_seq_len, &stats, err);
        mt_backend_destroy(cpu);
        if (st != MT_OK)
            goto done;
        maxk = cfg.intermediate > cfg.hidden ? cfg.intermediate : cfg.hidden;
        if (!(smooth = calloc((size_t)cfg.layers * GEMMS_PER_LAYER * maxk, sizeof(float)))) {
            st = mt_fail(err, MT_ENOMEM, "out of memory");
            goto done;
        }
        /* weight column maxima per slot (QKV: the three together), then s */
        for (size_t i = 0; i < n; i++) {
            const st_tensor *t = st_get(f, i);
            int l, g;
            if (!gemm_slot(t->name, &l, &g) || l >= cfg.layers || t->dtype != ST_F32 || t->ndim != 2)
                continue;
            col_absmax(t->data, (int)t->shape[0], (int)t->shape[1],
                       smooth + ((size_t)l * GEMMS_PER_LAYER + g) * maxk);
        }
        for (int l = 0; l < cfg.layers; l++)
            for (int g = 0; g < GEMMS_PER_LAYER; g++) {
                size_t off = ((size_t)l * GEMMS_PER_LAYER + g) * maxk;
                smooth_finish(stats + off, smooth + off, g == 3 ? cfg.intermediate : cfg.hidden);
            }
    }
    for (size_t i = 0; i < n && st == MT_OK; i++) {
        const st_tensor *t = st_get(f, i);
        const mt_precision tp = save_precision(t->name, p, &mix);
        if (tp == MT_PREC_FP32 || !is_gemm_weight(t->name)) {
            o[no++].t = *t;
            continue;
        }
        if (t->dtype != ST_F32 || t->ndim != 2) {
            st = mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is not a 2-D F32 weight", path, t->name);
            break;
        }
        int rows = (int)t->shape[0], cols = (int)t->shape[1], l, g;
        const float *wsrc = t->data;
        float *scaled = NULL;
        if (smooth && tp == MT_PREC_INT8 && gemm_slot(t->name, &l, &g) && l < cfg.layers) {
            const float *sv = smooth + ((size_t)l * GEMMS_PER_LAYER + g) * maxk;
            if (!(scaled = malloc(sizeof(float) * (size_t)rows * cols))) {
                st = mt_fail(err, MT_ENOMEM, "out of memory");
                break;
            }
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < cols; j++)
                    scaled[(size_t)r * cols + j] = wsrc[(size_t)r * cols + j] * sv[j];
            wsrc = scaled;
            smooth_name(t->name, snames[i], sizeof snames[i]);
            o[no].t = (st_tensor){.name = snames[i], .dtype = ST_F32, .ndim = 1, .shape = {cols},
                                  .data = sv, .nbytes = sizeof(float) * (size_t)cols};
            no++;
        }
        void *q = malloc(mt_quant_data_bytes(tp, rows, cols));
        float *sc = mt_prec(tp)->has_scales ? malloc(sizeof(float) * (size_t)rows) : NULL;
        o[no].owned = q;
        if (!q || (mt_prec(tp)->has_scales && !sc)) {
            free(sc);
            st = mt_fail(err, MT_ENOMEM, "out of memory");
            break;
        }
        st = mt_quantize(wsrc, rows, cols, tp, calib, q, sc, err);
        free(scaled);
        if (st != MT_OK) {
            free(sc);
            mt_prefix(err, st, "%s: tensor '%s': ", path, t->name);
            break;
        }
        o[no].t = *t;
        o[no].t.dtype = mt_prec(tp)->file_dtype;
        o[no].t.data = q;
        o[no].t.nbytes = mt_quant_data_bytes(tp, rows, cols);
        no++;
        if (sc) {
            scale_name(t->name, names[i], sizeof names[i]);
            o[no].owned = sc;
            o[no].t = (st_tensor){.name = names[i], .dtype = ST_F32, .ndim = 1,
                                  .shape = {rows}, .data = sc,
                                  .nbytes = sizeof(float) * (size_t)rows};
            no++;
        }
    }
    if (st == MT_OK) {
        /* widest dtypes first: every tensor then starts aligned to its element size */
        qsort(o, no, sizeof *o, by_dtype_size_desc);
        st_tensor *flat = malloc(sizeof *flat * (no ? no : 1));
        char pct[32];
        snprintf(pct, sizeof pct, "%.17g", calib ? calib->percentile : 100.0);
        const char *meta[] = {"mantissa.format", "1",
                              "mantissa.precision", mt_precision_name(p),
                              "mantissa.calibration",
                              mt_prec(p)->has_scales || any_int8 || *mixn
                                  ? mt_calib_name(calib ? calib->method : MT_CALIB_ABSMAX) : "none",
                              "mantissa.percentile", pct,
                              "mantissa.source", path,
                              *mixn ? "mantissa.mix" : NULL, mixn,
                              NULL};
        if (!flat) {
            st = mt_fail(err, MT_ENOMEM, "out of memory");
        } else {
            for (size_t i = 0; i < no; i++)
                flat[i] = o[i].t;
            st = st_write(out_path, flat, no, meta, err);
        }
        free(flat);
    }
done:
    if (o)
        for (size_t i = 0; i < 3 * n; i++)
            free(o[i].owned);
    free(o);
    free(names);
    free(snames);
    free(stats);
    free(smooth);
    st_close(f);
    return st;
}
