/* enc_head.c: a sequence classifier's head (BertForSequenceClassification,
 * DistilBertFor..., XLMRobertaFor...: a cross-encoder reranker has one
 * label, its relevance score). config.json says whether a folder is one
 * (a "...ForSequenceClassification" in architectures) and names its
 * labels (id2label, else num_labels); the row names the head's tensors
 * (models/arch.h's enc_head_names): a dense layer with its activation on
 * the first token's hidden state (BERT's pooler, RoBERTa's
 * classifier.dense), then the projection to the labels. The head is kept
 * on the host in FP32 whatever the model's precision: (h + labels) x h
 * weights, under 1% of a 6-layer encoder's, run once per sequence. The
 * token heads (enc_outputs.c) read their files and add their dot
 * products with the same two functions, enc_host_linear and enc_dot8. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "models/encoder_internal.h"

struct enc_head {
    int h, nlabels;
    float *dense_w, *dense_b; /* (h, h) and h, or NULL: no dense layer */
    float *out_w, *out_b;     /* (nlabels, h) and nlabels */
    enc_head_act act;
    char **labels; /* nlabels names */
};

/* Whether config.json's architectures name a sequence classifier. */
static bool names_classifier(const cJSON *j)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "architectures"), *it;
    cJSON_ArrayForEach(it, a)
    {
        const char *s = cJSON_IsString(it) ? it->valuestring : "";
        const char *tail = "ForSequenceClassification";
        const size_t n = strlen(s), k = strlen(tail);
        if (n > k && !strcmp(s + n - k, tail))
            return true;
    }
    return false;
}

mt_status enc_head_config(const cJSON *j, const char *path, const enc_arch *a, enc_config *c,
                          mt_err *err)
{
    if (!names_classifier(j))
        return MT_OK;
    if (!a->head.out)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: architectures: a %s sequence classifier is not supported",
                       path, a->model_type);
    const cJSON *id2 = cJSON_GetObjectItemCaseSensitive(j, "id2label");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(j, "num_labels");
    mt_status st = MT_OK;
    if (id2 && !cJSON_IsObject(id2))
        return mt_fail(err, MT_EFORMAT, "%s: field 'id2label' must be an object", path);
    if (cJSON_IsObject(id2) && cJSON_GetArraySize(id2) > 0)
        c->nlabels = cJSON_GetArraySize(id2);
    else if (nl && (!cJSON_IsNumber(nl) || nl->valuedouble != (int)nl->valuedouble ||
                    nl->valuedouble < 1 || nl->valuedouble > 1 << 16))
        st = mt_fail(err, MT_EFORMAT, "%s: field 'num_labels' must be an integer in [1, 65536]",
                     path);
    else if (nl)
        c->nlabels = (int)nl->valuedouble;
    else
        c->nlabels = 2; /* transformers' PretrainedConfig default */
    c->classify = true;
    c->pairs = true;
    return st;
}

/* Label i's name: id2label["i"], else "LABEL_i" (transformers' default). */
static mt_status label_name(const cJSON *id2, const char *path, int i, char **out, mt_err *err)
{
    char key[16], def[32];
    snprintf(key, sizeof key, "%d", i);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(id2, key);
    if (cJSON_GetArraySize(id2) > 0 && !v)
        return mt_fail(err, MT_EFORMAT, "%s: id2label has no label \"%s\" (ids must be 0..%d)",
                       path, key, cJSON_GetArraySize(id2) - 1);
    if (v && !cJSON_IsString(v))
        return mt_fail(err, MT_EFORMAT, "%s: field 'id2label.%s' must be a string", path, key);
    snprintf(def, sizeof def, "LABEL_%d", i);
    if (!(*out = strdup(v ? v->valuestring : def)))
        return mt_fail(err, MT_ENOMEM, "out of memory");
    return MT_OK;
}

/* A layer's weight and bias, host copies (encoder_internal.h). */
mt_status enc_host_linear(enc_model *m, const st_file *f, const char *name, int *rows,
                          float **w, float **b, mt_err *err)
{
    char wn[256], bn[256];
    const int h = m->cfg.hidden;
    snprintf(wn, sizeof wn, "%s%sweight", name ? name : "", name ? "." : "");
    snprintf(bn, sizeof bn, "%s%sbias", name ? name : "", name ? "." : "");
    const st_tensor *t = st_find(f, wn);
    if (!*rows && t && t->ndim == 2 && (t->shape[0] < 1 || t->shape[0] > 1 << 16))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' has %lld rows; allowed 1..65536",
                       st_path(f), wn, (long long)t->shape[0]);
    if (!*rows)
        *rows = t && t->ndim == 2 ? (int)t->shape[0] : h;
    const float *sw, *sb;
    mt_status st = enc_find_f32(m, f, wn, *rows, h, &sw, err);
    if (st == MT_OK)
        st = enc_find_f32(m, f, bn, *rows, 0, &sb, err);
    if (st != MT_OK)
        return st;
    const size_t n = (size_t)*rows * (size_t)h;
    *w = malloc(sizeof(float) * n);
    *b = malloc(sizeof(float) * (size_t)*rows);
    if (!*w || !*b)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    memcpy(*w, sw, sizeof(float) * n);
    memcpy(*b, sb, sizeof(float) * (size_t)*rows);
    return MT_OK;
}

mt_status enc_load_head(enc_model *m, const char *dir, const st_file *f, mt_err *err)
{
    if (!m->cfg.classify)
        return MT_OK;
    const enc_head_names *hn = &m->arch->head;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *j = NULL;
    mt_status st = mt_json_load(path, &j, err);
    enc_head *hd = st == MT_OK ? calloc(1, sizeof *hd) : NULL;
    if (st == MT_OK && hd)
        hd->labels = calloc((size_t)m->cfg.nlabels, sizeof *hd->labels);
    if (st == MT_OK && (!hd || !hd->labels))
        st = mt_fail(err, MT_ENOMEM, "out of memory");
    m->head = hd;
    if (st != MT_OK) {
        cJSON_Delete(j);
        return st;
    }
    hd->h = m->cfg.hidden;
    hd->nlabels = m->cfg.nlabels;
    hd->act = hn->act;
    const cJSON *id2 = cJSON_GetObjectItemCaseSensitive(j, "id2label");
    for (int i = 0; i < hd->nlabels && st == MT_OK; i++)
        st = label_name(id2, path, i, &hd->labels[i], err);
    cJSON_Delete(j);
    if (st == MT_OK && hn->dense)
        st = enc_host_linear(m, f, hn->dense, &hd->h, &hd->dense_w, &hd->dense_b, err);
    if (st == MT_OK)
        st = enc_host_linear(m, f, hn->out, &hd->nlabels, &hd->out_w, &hd->out_b, err);
    if (st == MT_OK)
        m->other_bytes += sizeof(float) * ((size_t)(hn->dense ? hd->h : 0) * (hd->h + 1) +
                                           (size_t)hd->nlabels * (hd->h + 1));
    return st;
}

void enc_head_free(enc_head *hd)
{
    if (!hd)
        return;
    for (int i = 0; hd->labels && i < hd->nlabels; i++)
        free(hd->labels[i]);
    free(hd->labels);
    free(hd->dense_w);
    free(hd->dense_b);
    free(hd->out_w);
    free(hd->out_b);
    free(hd);
}

const char *const *enc_head_labels(const enc_head *hd)
{
    return hd ? (const char *const *)hd->labels : NULL;
}

/* w . x over 8 lanes (encoder_internal.h). */
float enc_dot8(const float *w, const float *x, int k)
{
    float acc[8] = {0};
    int c = 0;
    for (; c + 8 <= k; c += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += w[c + l] * x[c + l];
    for (; c < k; c++)
        acc[c % 8] += w[c] * x[c];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* y (rows) = W (rows, k) x + b, each row's sum enc_dot8's. */
static void linear(const float *w, const float *b, const float *x, int rows, int k, float *y)
{
#pragma omp parallel for schedule(static) if (rows >= 256)
    for (int r = 0; r < rows; r++)
        y[r] = b[r] + enc_dot8(w + (size_t)r * k, x, k);
}

mt_status enc_head_scores(const enc_head *hd, const float *first, int nseq, float *out,
                          mt_err *err)
{
    const int h = hd->h;
    float *mid = malloc(sizeof(float) * (size_t)h);
    if (!mid)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    for (int s = 0; s < nseq; s++) {
        const float *x = first + (size_t)s * h;
        if (hd->dense_w) {
            linear(hd->dense_w, hd->dense_b, x, h, h, mid);
            for (int i = 0; i < h; i++)
                mid[i] = hd->act == ENC_HEAD_RELU ? (mid[i] > 0.f ? mid[i] : 0.f) : tanhf(mid[i]);
            x = mid;
        }
        linear(hd->out_w, hd->out_b, x, hd->nlabels, h, out + (size_t)s * hd->nlabels);
    }
    free(mid);
    return MT_OK;
}
