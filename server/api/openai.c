/* api_openai.c: the OpenAI embeddings API (POST /v1/embeddings, GET
 * /v1/models), so the OpenAI SDKs work with base_url pointed here. The SDKs
 * ask for base64 (little-endian float32) by default; float is the other
 * encoding. Token-id inputs are refused with a clear message. Fields
 * OpenAI does not have (the SDKs send them with extra_body): "truncate",
 * "prompt_name", and "outputs" (a model with token heads, bge-m3: any of
 * "dense", "sparse", "colbert", all from one forward; each data item then
 * has "embedding", "sparse_embedding" and "colbert_embedding" as asked,
 * outputs.c; base64 applies to "embedding" alone). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"

/* With dimensions (a Matryoshka model's shorter vectors), each vector's
 * first dims values, renormalised where the model's vectors are unit. */
static void shorten(api_embed *c, int dims)
{
    const int h = c->v->hidden;
    for (int i = 0; dims < h && c->v->model->info.normalize && i < c->job.n; i++) {
        float *e = (float *)api_dense_row(c, i);
        double ss = 0;
        for (int k = 0; k < dims; k++)
            ss += (double)e[k] * e[k];
        const float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
        for (int k = 0; k < dims; k++)
            e[k] *= inv;
    }
}

/* Text i's sparse and ColBERT outputs where the request asked for them
 * (as ,"key":value; nothing else); false when out of memory. */
static bool extra_outputs(sbuf *b, const api_embed *c, int i)
{
    if (c->outputs & API_OUT_SPARSE) {
        sb_puts(b, ",\"sparse_embedding\":");
        if (!api_write_sparse(b, c, i, false))
            return false;
    }
    if (c->outputs & API_OUT_COLBERT) {
        sb_puts(b, ",\"colbert_embedding\":");
        api_write_colbert(b, c, i);
    }
    return true;
}

/* The answer once the job has run: the vectors (the first dimensions of
 * each, where the request asked) as float arrays or base64. */
static void respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *c = (api_embed *)d;
    if (!api_embed_result(c, r))
        return;
    const srv_variant *v = c->v;
    const int n = c->job.n, h = v->hidden, hidden = c->dimensions ? c->dimensions : h;
    const bool dense = !c->outputs || (c->outputs & API_OUT_DENSE);
    shorten(c, hidden);
    sbuf *b = &r->body;
    sb_reserve(b, (size_t)n * (c->base64 ? (size_t)hidden * 6 : (size_t)hidden * 12) + 512);
    sb_puts(b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < n; i++) {
        sb_printf(b, "%s{\"object\":\"embedding\",\"index\":%d", i ? "," : "", i);
        const float *e = api_dense_row(c, i);
        if (dense && c->base64) {
            sb_puts(b, ",\"embedding\":\"");
            sb_base64(b, e, sizeof(float) * (size_t)hidden); /* x86: already little-endian */
            sb_putc(b, '"');
        } else if (dense) {
            sb_puts(b, ",\"embedding\":");
            sb_float_array(b, e, (size_t)hidden);
        }
        if (!extra_outputs(b, c, i)) {
            b->len = 0;
            api_error(r, 500, NULL, "out of memory");
            return;
        }
        sb_putc(b, '}');
    }
    sb_puts(b, "],\"model\":");
    sb_json_str(b, c->model_name, strlen(c->model_name));
    sb_printf(b, ",\"usage\":{\"prompt_tokens\":%ld,\"total_tokens\":%ld}", c->tokens,
              c->tokens);
    /* an extra field (the SDKs keep unknown fields): the space the vectors
     * live in, so that callers who store them see when a switch changed it */
    sb_puts(b, ",\"mantissa\":{\"variant\":");
    sb_json_str(b, v->cfg.name, strlen(v->cfg.name));
    sb_puts(b, ",\"space_id\":");
    sb_json_str(b, v->space, strlen(v->space));
    sb_printf(b, ",\"space\":{\"model\":");
    sb_json_str(b, c->m->name, strlen(c->m->name));
    sb_printf(b, ",\"precision\":\"%s\",\"calibration\":", mt_precision_name(v->cfg.precision));
    bool q8 = mt_prec(v->cfg.precision)->has_scales;
    if (q8)
        sb_json_str(b, v->cfg.calibration, strlen(v->cfg.calibration));
    else
        sb_puts(b, "null");
    const char *mix = v->model->info.mix;
    sb_puts(b, ",\"mix\":");
    if (mix && *mix)
        sb_json_str(b, mix, strlen(mix));
    else
        sb_puts(b, "null");
    sb_printf(b, ",\"weights_checksum\":\"fnv1a64:%s\"},\"truncated_inputs\":%d}}", v->checksum,
              c->truncated);
}

/* The request's fields other than input: only known ones; "user" a
 * string; "model" a string; "encoding_format" float or base64; "truncate"
 * true, false or null (null or absent: the model's setting, in *truncate
 * as -1); "prompt_name" (an extension, as TEI's) a string or null. */
static bool read_fields(const cJSON *j, bool *base64, api_embed_opts *o, http_resp *r)
{
    static const char *const known[] = {"input",    "model",       "encoding_format", "dimensions",
                                        "user",     "truncate",    "prompt_name",     "outputs"};
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(j, "prompt_name");
    if (pn && !cJSON_IsNull(pn) && !cJSON_IsString(pn)) {
        api_error(r, 400, "prompt_name", "\"prompt_name\" must be a string naming one of the "
                  "model's prompts, or null");
        return false;
    }
    o->prompt_name = cJSON_IsString(pn) ? pn->valuestring : NULL;
    int *truncate = &o->truncate;
    if (!api_only_fields(j, known, sizeof known / sizeof *known, r))
        return false;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "encoding_format");
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(j, "user");
    const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(j, "truncate");
    if (trunc && !cJSON_IsNull(trunc) && !cJSON_IsBool(trunc)) {
        api_error(r, 400, "truncate", "\"truncate\" must be true or false");
        return false;
    }
    *truncate = cJSON_IsBool(trunc) ? cJSON_IsTrue(trunc) : -1;
    if (user && !cJSON_IsNull(user) && !cJSON_IsString(user)) {
        api_error(r, 400, "user", "\"user\" must be a string");
        return false;
    }
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "model"))) {
        api_error(r, 400, "model", "\"model\" must be a string naming a served model");
        return false;
    }
    *base64 = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "base64");
    if (fmt && !cJSON_IsNull(fmt) && !*base64 &&
        (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "float") != 0)) {
        api_error(r, 400, "encoding_format", "\"encoding_format\" must be \"float\" or \"base64\"");
        return false;
    }
    return true;
}

API_HANDLER(api_openai_embeddings)
{
    api_request_id(req, r);
    cJSON *j = api_parse_body(app, req, r);
    const char **texts = NULL;
    size_t *lens = NULL;
    bool base64;
    api_embed_opts o = {0};
    srv_model *m;
    srv_variant *v;
    if (!j || !read_fields(j, &base64, &o, r))
        goto done;
    const char *model = cJSON_GetObjectItemCaseSensitive(j, "model")->valuestring;
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(j, "user");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(j, "dimensions");
    if (!api_resolve(app, req, model, cJSON_IsString(user) ? user->valuestring : NULL, &m, &v, r))
        goto done;
    const int lo = v->min_dims > 0 ? v->min_dims : v->hidden;
    if (dims && !cJSON_IsNull(dims) &&
        (!cJSON_IsNumber(dims) || dims->valuedouble != floor(dims->valuedouble) ||
         dims->valuedouble < lo || dims->valuedouble > v->hidden)) {
        if (v->min_dims > 0)
            api_error(r, 400, "dimensions", "\"dimensions\" must be an integer in %d..%d for "
                      "this model (its Matryoshka range)", lo, v->hidden);
        else
            api_error(r, 400, "dimensions", "\"dimensions\" must be %d for this model (it cannot "
                      "shorten embeddings: its config declares no matryoshka_min_dim)", v->hidden);
        goto done;
    }
    if (!api_outputs_parse(cJSON_GetObjectItemCaseSensitive(j, "outputs"), v, model, &o.outputs,
                           r))
        goto done;
    if (o.outputs == API_OUT_DENSE) /* the pooled vector alone: the plain forward */
        o.outputs = 0;
    int n = api_text_inputs(app, cJSON_GetObjectItemCaseSensitive(j, "input"), "input", 400, &texts,
                            &lens, r);
    api_embed *c = n < 0 ? NULL : api_embed_new(app, req, m, v, texts, lens, n, &o, r);
    if (!c)
        goto done;
    c->base64 = base64;
    c->dimensions = cJSON_IsNumber(dims) ? (int)dims->valuedouble : 0;
    api_embed_run_named(app, c, model, r, respond);
done:
    free(texts);
    free(lens);
    cJSON_Delete(j);
}

API_HANDLER(api_openai_models)
{
    sbuf *b = &r->body;
    sb_puts(b, "{\"object\":\"list\",\"data\":[");
    int first = 1;
    for (int i = 0; i < srv_models_count(app->models); i++) {
        srv_model *m = srv_models_at(app->models, i);
        pthread_mutex_lock(&m->lock);
        /* the model itself, then each variant as model@variant */
        for (int k = -1; m->loaded && k < m->nslots; k++) {
            if (k >= 0 && !m->slots[k]->present)
                continue;
            char id[2 * CFG_NAME_MAX + 2];
            snprintf(id, sizeof id, "%s%s%s", m->name, k < 0 ? "" : "@",
                     k < 0 ? "" : m->slots[k]->name);
            sb_puts(b, first ? "{\"id\":" : ",{\"id\":");
            first = 0;
            sb_json_str(b, id, strlen(id));
            sb_puts(b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"mantissa\"}");
        }
        pthread_mutex_unlock(&m->lock);
    }
    sb_puts(b, "]}");
}
