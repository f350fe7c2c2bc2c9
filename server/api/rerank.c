/* rerank.c: the routes of classifier models (engine/model.h's
 * MT_TASK_CLASSIFY: a cross-encoder reranker has one label, its relevance
 * score; a sequence classifier several): TEI's POST /rerank and /predict,
 * and the Cohere/Jina POST /v1/rerank. Each text or (query, document) pair
 * is one input of a score job (api_embed_opts.scores), batched with the
 * build's other score inputs into one forward. Scores are the model's
 * logits through a sigmoid (one label) or a softmax over the labels
 * (several), or as they are with raw_scores, as TEI gives them; Cohere's
 * relevance_score is the sigmoid. A model of the wrong kind is refused
 * naming its kind: TEI's 424 (error_type Backend) on TEI's routes, 400 on
 * /v1/rerank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"

/* A classifier with one label: what the rerank routes serve. */
static bool is_reranker(const srv_variant *v)
{
    const mt_model_info *in = mt_model_get_info(v->model);
    return in->task == MT_TASK_CLASSIFY && in->nlabels == 1;
}

/* What the model is, for the refusals: "an embedding model", or "a
 * classifier with N labels". */
static void kind_text(const srv_variant *v, char *buf, size_t cap)
{
    const mt_model_info *in = mt_model_get_info(v->model);
    if (in->task == MT_TASK_CLASSIFY)
        snprintf(buf, cap, "a classifier with %d labels", in->nlabels);
    else
        snprintf(buf, cap, "an embedding model");
}

/* Score k of a row of n logits: sigmoid (one label) or softmax, or the
 * logit itself when raw. */
static double squash(const float *row, int n, int k, bool raw)
{
    if (raw)
        return row[k];
    if (n == 1)
        return 1.0 / (1.0 + exp(-(double)row[0]));
    double mx = row[0], sum = 0;
    for (int i = 1; i < n; i++)
        mx = row[i] > mx ? row[i] : mx;
    for (int i = 0; i < n; i++)
        sum += exp((double)row[i] - mx);
    return exp((double)row[k] - mx) / sum;
}

typedef struct {
    int index;
    double score;
} ranked;

/* Highest score first; equal scores in input order. */
static int by_score_desc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->index - y->index;
}

/* The job's inputs ranked by their first label's score. NULL when out of
 * memory. */
static ranked *rank(const api_embed *e, bool raw)
{
    const int n = e->job.n, nl = e->v->nlabels;
    ranked *r = malloc(sizeof *r * (size_t)(n ? n : 1));
    for (int i = 0; r && i < n; i++)
        r[i] = (ranked){i, squash(e->job.out + (size_t)i * nl, nl, 0, raw)};
    if (r)
        qsort(r, (size_t)n, sizeof *r, by_score_desc);
    return r;
}

/* Copies of the n texts, kept for the answer (the body is gone by then). */
static bool keep_texts(api_embed *e, const char *const *t, const size_t *lens, int n,
                       http_resp *r)
{
    if (!(e->texts = calloc((size_t)n, sizeof *e->texts))) {
        api_error(r, 500, NULL, "out of memory");
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!(e->texts[i] = strndup(t[i], lens[i]))) {
            api_error(r, 500, NULL, "out of memory");
            return false;
        }
    return true;
}

/* The query against each of n documents: the pair job, or NULL after
 * answering. The query's own limits are checked here (the pairs' texts
 * are the documents, named by text_name in errors). */
static api_embed *pair_job(const http_app *app, const http_req *req, srv_model *m,
                           srv_variant *v, const char *query, size_t ql, const char *const *docs,
                           const size_t *lens, int n, api_embed_opts *o, http_resp *r)
{
    const int bad = r->call->style == API_TEI ? 422 : 400;
    if (ql == 0) {
        api_error(r, bad, "query", "\"query\" is empty");
        return NULL;
    }
    if (ql > (size_t)app->cfg->max_input_bytes) {
        api_error(r, 413, "max_input_bytes",
                  "\"query\" is %zu bytes; the limit (server.max_input_bytes) is %d", ql,
                  app->cfg->max_input_bytes);
        return NULL;
    }
    const char **qs = malloc(sizeof *qs * (size_t)n);
    size_t *qls = malloc(sizeof *qls * (size_t)n);
    api_embed *e = NULL;
    if (!qs || !qls) {
        api_error(r, 500, NULL, "out of memory");
    } else {
        for (int i = 0; i < n; i++)
            qs[i] = query, qls[i] = ql;
        o->scores = true;
        o->pair_b = docs;
        o->pair_blens = lens;
        e = api_embed_new(app, req, m, v, qs, qls, n, o, r);
    }
    free(qs);
    free(qls);
    return e;
}

/* ---- TEI: POST /rerank ------------------------------------------------- */

static void tei_text_name(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "texts[%d]", i);
}

/* [{"index", "score", "text"?}], highest score first. */
static void tei_rerank_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *e = (api_embed *)d;
    if (!api_embed_result(e, r))
        return;
    ranked *rk = rank(e, e->raw_scores);
    if (!rk) {
        api_error(r, 500, NULL, "out of memory");
        return;
    }
    sb_putc(&r->body, '[');
    for (int i = 0; i < e->job.n; i++) {
        sb_printf(&r->body, "%s{\"index\":%d,\"score\":", i ? "," : "", rk[i].index);
        sb_float(&r->body, (float)rk[i].score);
        if (e->texts) {
            sb_puts(&r->body, ",\"text\":");
            sb_json_str(&r->body, e->texts[rk[i].index], strlen(e->texts[rk[i].index]));
        }
        sb_putc(&r->body, '}');
    }
    sb_putc(&r->body, ']');
    free(rk);
}

/* TEI's RerankRequest: query, texts, truncate, truncation_direction,
 * raw_scores, return_text. */
static void tei_rerank(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    static const char *const keys[] = {"query", "texts", "truncate", "truncation_direction",
                                       "raw_scores", "return_text"};
    const cJSON *texts = cJSON_GetObjectItemCaseSensitive(j, "texts");
    const cJSON *query = cJSON_GetObjectItemCaseSensitive(j, "query");
    const char **t = NULL;
    size_t *lens = NULL;
    api_embed_opts o = {.text_name = tei_text_name};
    int raw = 0, ret = 0, n = 0;
    srv_model *m;
    srv_variant *v;
    bool ok = tei_known_fields(j, "", keys, sizeof keys / sizeof *keys, r) &&
              tei_text_options(j, "", &o, r) &&
              (raw = tei_bool_field(j, "", "raw_scores", 0, r)) != -2 &&
              (ret = tei_bool_field(j, "", "return_text", 0, r)) != -2;
    if (ok && !cJSON_IsString(query)) {
        api_error(r, 422, "query", "\"query\" must be a string");
        ok = false;
    }
    if (ok && !cJSON_IsArray(texts)) {
        api_error(r, 422, "texts", "\"texts\" must be an array of strings");
        ok = false;
    }
    if (ok && (n = api_text_inputs(app, texts, "texts", 422, &t, &lens, r)) > 0 &&
        tei_resolve(app, req, &m, &v, r)) {
        api_embed *e;
        if (!is_reranker(v)) /* TEI's words (X-Mantissa-Model picks another model) */
            api_error_typed(r, 424, "Backend", NULL, "Backend error: model is not a re-ranker "
                            "model");
        else if (o.prompt_name)
            api_error(r, 422, "prompt_name", "a re-ranker takes no prompt_name");
        else if ((e = pair_job(app, req, m, v, query->valuestring, strlen(query->valuestring), t,
                                 lens, n, &o, r))) {
            e->raw_scores = raw;
            if (!ret || keep_texts(e, t, lens, n, r))
                api_embed_run(app, e, r, tei_rerank_respond);
            else
                sched_job_unref(&e->job);
        }
    }
    free(t);
    free(lens);
}

API_HANDLER(api_tei_rerank)
{
    tei_with_body(app, req, r, tei_rerank);
}

/* ---- TEI: POST /predict ------------------------------------------------ */

/* One input's labels, highest score first: [{"score", "label"}]. */
static void predict_row(const api_embed *e, int i, sbuf *b)
{
    const int nl = e->v->nlabels;
    const float *row = e->job.out + (size_t)i * nl;
    const char *const *labels = mt_model_get_info(e->v->model)->labels;
    ranked *rk = malloc(sizeof *rk * (size_t)nl);
    sb_putc(b, '[');
    for (int k = 0; rk && k < nl; k++)
        rk[k] = (ranked){k, squash(row, nl, k, e->raw_scores)};
    if (rk)
        qsort(rk, (size_t)nl, sizeof *rk, by_score_desc);
    for (int k = 0; rk && k < nl; k++) {
        sb_puts(b, k ? ",{\"score\":" : "{\"score\":");
        sb_float(b, (float)rk[k].score);
        sb_puts(b, ",\"label\":");
        sb_json_str(b, labels[rk[k].index], strlen(labels[rk[k].index]));
        sb_putc(b, '}');
    }
    sb_putc(b, ']');
    free(rk);
}

static void predict_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *e = (api_embed *)d;
    if (!api_embed_result(e, r))
        return;
    if (e->batch)
        sb_putc(&r->body, '[');
    for (int i = 0; i < e->job.n; i++) {
        if (i)
            sb_putc(&r->body, ',');
        predict_row(e, i, &r->body);
    }
    if (e->batch)
        sb_putc(&r->body, ']');
}

/* Whether it is a pair: an array of two strings. */
static bool is_pair(const cJSON *it)
{
    return cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
           cJSON_IsString(it->child->next);
}

/* TEI's PredictInput: a text, a pair [a, b], or a list of texts or of
 * pairs (not mixed). *n inputs into a / b (b NULL for texts), pointing into
 * in; *batch: a list. False after answering 422 (or 413, too many). */
static bool predict_inputs(const http_app *app, const cJSON *in, const char ***a,
                           const char ***b, int *n, bool *batch, http_resp *r)
{
    const bool one = cJSON_IsString(in) || is_pair(in);
    const int count = one ? 1 : cJSON_GetArraySize(in);
    if (!one && (!cJSON_IsArray(in) || count == 0)) {
        api_error(r, 422, "inputs", "\"inputs\" must be a text, a pair of texts [a, b], or a "
                  "non-empty list of texts or of pairs");
        return false;
    }
    if (count > app->cfg->max_inputs) {
        api_error(r, 422, "max_inputs", "%d inputs; the limit (server.max_inputs) is %d", count,
                  app->cfg->max_inputs);
        return false;
    }
    const cJSON *first = one ? in : in->child;
    const bool pairs = is_pair(first);
    *a = calloc((size_t)count, sizeof **a);
    *b = pairs ? calloc((size_t)count, sizeof **b) : NULL;
    if (!*a || (pairs && !*b)) {
        api_error(r, 500, NULL, "out of memory");
        return false;
    }
    int i = 0;
    for (const cJSON *it = first; it && i < count; it = one ? NULL : it->next, i++) {
        if (pairs ? !is_pair(it) : !cJSON_IsString(it)) {
            api_error(r, 422, "inputs", "inputs[%d] must be %s, as inputs[0] is", i,
                      pairs ? "a pair of texts [a, b]" : "a text");
            return false;
        }
        (*a)[i] = pairs ? it->child->valuestring : it->valuestring;
        if (pairs)
            (*b)[i] = it->child->next->valuestring;
    }
    *n = count;
    *batch = !one;
    return true;
}

static void predict_text_name(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "inputs[%d]", i);
}

/* TEI's PredictRequest: inputs, truncate, truncation_direction,
 * raw_scores. */
static void predict(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    static const char *const keys[] = {"inputs", "truncate", "truncation_direction",
                                       "raw_scores"};
    const char **a = NULL, **b = NULL;
    size_t *al = NULL, *bl = NULL;
    api_embed_opts o = {.scores = true, .text_name = predict_text_name};
    int raw = 0, n = 0;
    bool batch = false;
    srv_model *m;
    srv_variant *v;
    if (tei_known_fields(j, "", keys, sizeof keys / sizeof *keys, r) &&
        tei_text_options(j, "", &o, r) && (raw = tei_bool_field(j, "", "raw_scores", 0, r)) != -2 &&
        predict_inputs(app, cJSON_GetObjectItemCaseSensitive(j, "inputs"), &a, &b, &n, &batch,
                       r) &&
        tei_resolve(app, req, &m, &v, r)) {
        api_embed *e;
        al = malloc(sizeof *al * (size_t)n);
        bl = malloc(sizeof *bl * (size_t)n);
        for (int i = 0; al && bl && i < n; i++)
            al[i] = strlen(a[i]), bl[i] = b ? strlen(b[i]) : 0;
        o.pair_b = b;
        o.pair_blens = bl;
        if (mt_model_get_info(v->model)->task != MT_TASK_CLASSIFY)
            api_error_typed(r, 424, "Backend", NULL, "Backend error: model is not a classifier "
                            "model");
        else if (!al || !bl)
            api_error(r, 500, NULL, "out of memory");
        else if (o.prompt_name)
            api_error(r, 422, "prompt_name", "a classifier takes no prompt_name");
        else if ((e = api_embed_new(app, req, m, v, a, al, n, &o, r))) {
            e->raw_scores = raw;
            e->batch = batch;
            api_embed_run(app, e, r, predict_respond);
        }
    }
    free(a);
    free(b);
    free(al);
    free(bl);
}

API_HANDLER(api_tei_predict)
{
    tei_with_body(app, req, r, predict);
}

/* ---- Cohere / Jina: POST /v1/rerank ------------------------------------ */

/* {"id", "model", "results": [{"index", "relevance_score", "document"?}],
 * "usage": {"total_tokens"}}, highest score first, top_n of them. */
static void v1_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *e = (api_embed *)d;
    if (!api_embed_result(e, r))
        return;
    ranked *rk = rank(e, false);
    if (!rk) {
        api_error(r, 500, NULL, "out of memory");
        return;
    }
    const int keep = e->top_n > 0 && e->top_n < e->job.n ? e->top_n : e->job.n;
    sbuf *b = &r->body;
    sb_puts(b, "{\"id\":");
    sb_json_str(b, e->id, strlen(e->id));
    sb_puts(b, ",\"model\":");
    sb_json_str(b, e->model_name, strlen(e->model_name));
    sb_puts(b, ",\"results\":[");
    for (int i = 0; i < keep; i++) {
        sb_printf(b, "%s{\"index\":%d,\"relevance_score\":", i ? "," : "", rk[i].index);
        sb_float(b, (float)rk[i].score);
        if (e->texts) {
            sb_puts(b, ",\"document\":{\"text\":");
            sb_json_str(b, e->texts[rk[i].index], strlen(e->texts[rk[i].index]));
            sb_putc(b, '}');
        }
        sb_putc(b, '}');
    }
    sb_printf(b, "],\"usage\":{\"total_tokens\":%ld}}", e->tokens);
    free(rk);
}

/* documents: strings, or objects with a string "text" (Cohere's and
 * Jina's); into *docs (pointing into j) and *lens. 0 after answering. */
static int v1_documents(const http_app *app, const cJSON *d, const char ***docs, size_t **lens,
                        http_resp *r)
{
    const int n = cJSON_IsArray(d) ? cJSON_GetArraySize(d) : -1;
    if (n <= 0) {
        api_error(r, 400, "documents", "\"documents\" must be a non-empty array of strings or "
                  "of objects with a \"text\"");
        return 0;
    }
    if (n > app->cfg->max_inputs) {
        api_error(r, 413, "max_inputs", "%d documents; the limit (server.max_inputs) is %d", n,
                  app->cfg->max_inputs);
        return 0;
    }
    *docs = calloc((size_t)n, sizeof **docs);
    *lens = calloc((size_t)n, sizeof **lens);
    if (!*docs || !*lens) {
        api_error(r, 500, NULL, "out of memory");
        return 0;
    }
    int i = 0;
    for (const cJSON *it = d->child; it; it = it->next, i++) {
        const cJSON *t = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "text") : it;
        if (!cJSON_IsString(t)) {
            api_error(r, 400, "documents", "documents[%d] must be a string or an object with a "
                      "string \"text\"", i);
            return 0;
        }
        (*docs)[i] = t->valuestring;
        (*lens)[i] = strlen(t->valuestring);
    }
    return n;
}

static void v1_text_name(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "documents[%d]", i);
}

/* The request's fields: model (else the config's first model), query,
 * documents, top_n, return_documents. False after answering 400. */
static bool v1_fields(const cJSON *j, const char **model, const char **query, int *top_n,
                      bool *ret, http_resp *r)
{
    static const char *const keys[] = {"model", "query", "documents", "top_n",
                                       "return_documents"};
    if (!api_only_fields(j, keys, sizeof keys / sizeof *keys, r))
        return false;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "query");
    const cJSON *tn = cJSON_GetObjectItemCaseSensitive(j, "top_n");
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(j, "return_documents");
    if (mo && !cJSON_IsNull(mo) && !cJSON_IsString(mo)) {
        api_error(r, 400, "model", "\"model\" must be a string naming a model");
        return false;
    }
    if (!cJSON_IsString(q)) {
        api_error(r, 400, "query", "\"query\" must be a string");
        return false;
    }
    if (tn && !cJSON_IsNull(tn) &&
        (!cJSON_IsNumber(tn) || tn->valuedouble != floor(tn->valuedouble) || tn->valuedouble < 1)) {
        api_error(r, 400, "top_n", "\"top_n\" must be a positive integer");
        return false;
    }
    if (rd && !cJSON_IsNull(rd) && !cJSON_IsBool(rd)) {
        api_error(r, 400, "return_documents", "\"return_documents\" must be true or false");
        return false;
    }
    *model = cJSON_IsString(mo) ? mo->valuestring : NULL;
    *query = q->valuestring;
    *top_n = cJSON_IsNumber(tn) ? (tn->valuedouble > 1e9 ? 1000000000 : (int)tn->valuedouble) : 0;
    *ret = cJSON_IsTrue(rd);
    return true;
}

static void v1_rerank(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    const char *model = NULL, *query = NULL, **docs = NULL;
    size_t *lens = NULL;
    int top_n = 0, n = 0;
    bool ret = false;
    srv_model *m;
    srv_variant *v;
    api_embed_opts o = {.truncate = -1, .text_name = v1_text_name};
    if (!v1_fields(j, &model, &query, &top_n, &ret, r) ||
        !(n = v1_documents(app, cJSON_GetObjectItemCaseSensitive(j, "documents"), &docs, &lens,
                           r)))
        goto done;
    if (!model && srv_models_count(app->models) > 0)
        model = srv_models_at(app->models, 0)->name;
    if (!model) {
        api_error(r, 503, "model", "no model is configured");
        goto done;
    }
    if (api_resolve(app, req, model, NULL, &m, &v, r)) {
        char kind[64];
        api_embed *e;
        kind_text(v, kind, sizeof kind);
        if (!is_reranker(v))
            api_error(r, 400, "model", "model %s is %s, not a reranker (a cross-encoder with "
                      "one label)", m->name, kind);
        else if ((e = pair_job(app, req, m, v, query, strlen(query), docs, lens, n, &o, r))) {
            e->top_n = top_n;
            if (ret && !keep_texts(e, docs, lens, n, r))
                sched_job_unref(&e->job);
            else
                api_embed_run_named(app, e, model, r, v1_respond);
        }
    }
done:
    free(docs);
    free(lens);
}

API_HANDLER(api_v1_rerank)
{
    api_request_id(req, r);
    cJSON *j = api_parse_body(app, req, r);
    if (j)
        v1_rerank(app, req, j, r);
    cJSON_Delete(j);
}

/* ---- KServe v2: POST /v2/models/{m}/infer on a reranker ---------------- */

/* {"model_name", "model_version", "id"?, "parameters", "outputs":
 * [{"name": "score", "datatype": "FP32", "shape": [n], "data"}]}, in the
 * documents' order; with binary_data_output, the scores as raw
 * little-endian floats after the JSON header (the binary extension). */
static void kserve_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *e = (api_embed *)d;
    if (!api_embed_result(e, r))
        return;
    sbuf *b = &r->body;
    sb_puts(b, "{\"model_name\":");
    sb_json_str(b, e->m->name, strlen(e->m->name));
    sb_puts(b, ",\"model_version\":\"1\"");
    if (e->has_id) {
        sb_puts(b, ",\"id\":");
        sb_json_str(b, e->id, strlen(e->id));
    }
    sb_printf(b, ",\"parameters\":{\"variant\":\"%s\",\"precision\":\"%s\",\"prompt_tokens\":%ld,"
              "\"truncated_inputs\":%d}",
              e->v->cfg.name, mt_precision_name(e->v->cfg.precision), e->tokens, e->truncated);
    sb_printf(b, ",\"outputs\":[{\"name\":\"score\",\"datatype\":\"FP32\",\"shape\":[%d]",
              e->job.n);
    float *s = malloc(sizeof *s * (size_t)(e->job.n > 0 ? e->job.n : 1));
    if (!s) {
        b->len = 0;
        api_error(r, 500, NULL, "out of memory");
        return;
    }
    for (int i = 0; i < e->job.n; i++)
        s[i] = (float)squash(e->job.out + (size_t)i * e->v->nlabels, 1, 0, e->raw_scores);
    if (e->binary_out) {
        sb_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}]}", sizeof *s * (size_t)e->job.n);
        const size_t json_len = b->len;
        sb_putn(b, s, sizeof *s * (size_t)e->job.n); /* x86: already little-endian */
        http_set_header(r, "Inference-Header-Content-Length", "%zu", json_len);
        r->content_type = "application/octet-stream";
    } else {
        sb_puts(b, ",\"data\":");
        sb_float_array(b, s, (size_t)e->job.n);
        sb_puts(b, "}]}");
    }
    free(s);
}

/* Where a request's binary tensor data stands: the bytes after its JSON
 * header, and how many of them the inputs read so far took. */
typedef struct {
    const unsigned char *p;
    size_t len, at;
} kserve_bin;

/* The element count of input in's shape ([n] or [n, 1]); -1 when it is not
 * one of those. */
static long shape_rows(const cJSON *in)
{
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(in, "shape");
    const int dims = cJSON_GetArraySize(sh);
    const cJSON *d0 = cJSON_GetArrayItem(sh, 0), *d1 = cJSON_GetArrayItem(sh, 1);
    if (!cJSON_IsArray(sh) || dims < 1 || dims > 2 || !cJSON_IsNumber(d0) ||
        d0->valuedouble < 1 || d0->valuedouble > 1 << 20 ||
        d0->valuedouble != (long)d0->valuedouble || (dims == 2 && (!cJSON_IsNumber(d1) ||
                                                                   d1->valuedouble != 1)))
        return -1;
    return (long)d0->valuedouble;
}

/* Input in's elements from the binary tensor data (its binary_data_size
 * bytes, next in bin), as many as its shape says, into t and lens. False
 * after answering 400. */
static bool binary_bytes(const cJSON *in, const cJSON *bds, const char *name, kserve_bin *bin,
                         int n, const char **t, size_t *lens, http_resp *r)
{
    if (cJSON_GetObjectItemCaseSensitive(in, "data")) {
        api_error(r, 400, "data", "input \"%s\" has both \"data\" and binary_data_size", name);
        return false;
    }
    if (!cJSON_IsNumber(bds) || bds->valuedouble < 0 ||
        bds->valuedouble != (double)(size_t)bds->valuedouble || !bin->p ||
        bds->valuedouble > (double)(bin->len - bin->at)) {
        api_error(r, 400, "binary_data_size",
                  "input \"%s\": binary_data_size must be a byte count within the %zu bytes of "
                  "binary data left after the JSON header (Inference-Header-Content-Length)",
                  name, bin->p ? bin->len - bin->at : 0);
        return false;
    }
    const size_t size = (size_t)bds->valuedouble;
    if (!api_split_bytes(bin->p + bin->at, size, n, name, t, lens, r))
        return false;
    bin->at += size;
    return true;
}

/* The strings of BYTES input `name` of inputs (JSON data, flat or one per
 * row, or binary tensor data): *n of them into *t / *lens (pointing into j
 * or the body). False after 400. */
static bool kserve_bytes(const cJSON *inputs, const char *name, kserve_bin *bin,
                         const char ***t, size_t **lens, int *n, int max, http_resp *r)
{
    const cJSON *in = NULL, *it;
    cJSON_ArrayForEach(it, inputs)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name))
            in = it;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
    const cJSON *bds = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(in, "parameters"), "binary_data_size");
    const long rows = bds ? shape_rows(in) : (long)cJSON_GetArraySize(data);
    if (!in || !cJSON_IsString(dt) || strcmp(dt->valuestring, "BYTES") ||
        (!bds && !cJSON_IsArray(data)) || rows < 1) {
        api_error(r, 400, name, "a reranker takes two BYTES inputs, \"query\" (one string) and "
                  "\"text\" (the documents), as JSON data or binary tensors of shape [n] or "
                  "[n, 1]: input \"%s\" is missing or not that", name);
        return false;
    }
    if (rows > max) {
        api_error(r, 413, "max_inputs", "input \"%s\" has %ld elements; the limit is %d", name,
                  rows, max);
        return false;
    }
    *n = (int)rows;
    *t = calloc((size_t)*n, sizeof **t);
    *lens = calloc((size_t)*n, sizeof **lens);
    if (!*t || !*lens) {
        api_error(r, 500, NULL, "out of memory");
        return false;
    }
    if (bds)
        return binary_bytes(in, bds, name, bin, *n, *t, *lens, r);
    int i = 0;
    cJSON_ArrayForEach(it, data)
    {
        const cJSON *s = cJSON_IsArray(it) && cJSON_GetArraySize(it) == 1 ? it->child : it;
        if (!cJSON_IsString(s)) {
            api_error(r, 400, "data", "input \"%s\": data[%d] must be a string", name, i);
            return false;
        }
        (*t)[i] = s->valuestring;
        (*lens)[i++] = strlen(s->valuestring);
    }
    return true;
}

/* A reranker's outputs: only "score", its parameters.binary_data into
 * *binary. False after answering 400. */
static bool score_outputs(const cJSON *outputs, bool *binary, http_resp *r)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, outputs)
    {
        const cJSON *on = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *bd = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(o, "parameters"), "binary_data");
        if (!cJSON_IsString(on) || strcmp(on->valuestring, "score")) {
            api_error(r, 400, "outputs", "unknown output \"%s\"; a reranker has \"score\"",
                      cJSON_IsString(on) ? on->valuestring : "(no name)");
            return false;
        }
        if (bd && !cJSON_IsBool(bd)) {
            api_error(r, 400, "binary_data", "parameter \"binary_data\" must be true or false");
            return false;
        }
        if (bd)
            *binary = cJSON_IsTrue(bd);
    }
    return true;
}

void api_kserve_rerank(const http_app *app, const http_req *req, const cJSON *j, srv_model *m,
                       srv_variant *v, const api_kserve_opts *k, http_resp *r)
{
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    const char **q = NULL, **docs = NULL;
    size_t *ql = NULL, *lens = NULL;
    int nq = 0, n = 0;
    bool binary_out = k->binary_out;
    kserve_bin bin = {k->bin, k->bin_len, 0};
    if (!score_outputs(cJSON_GetObjectItemCaseSensitive(j, "outputs"), &binary_out, r))
        return;
    if (!is_reranker(v)) {
        char kind[64];
        kind_text(v, kind, sizeof kind);
        api_error(r, 400, "model", "model %s is %s, not a reranker", m->name, kind);
    } else if (!cJSON_IsArray(inputs) || cJSON_GetArraySize(inputs) != 2) {
        api_error(r, 400, "inputs", "a reranker takes two inputs, \"query\" and \"text\"");
    } else if (kserve_bytes(inputs, "query", &bin, &q, &ql, &nq, 1, r) &&
               kserve_bytes(inputs, "text", &bin, &docs, &lens, &n, app->cfg->max_inputs, r)) {
        api_embed_opts eo = {.timeout_us = k->timeout_us, .truncate = k->truncate};
        api_embed *e = NULL;
        if (bin.at != bin.len)
            api_error(r, 400, "Inference-Header-Content-Length",
                      "%zu bytes of binary data after the JSON header, but the inputs' "
                      "binary_data_size add up to %zu", bin.len, bin.at);
        else if ((e = pair_job(app, req, m, v, q[0], ql[0], docs, lens, n, &eo, r))) {
            e->has_id = k->has_id;
            e->raw_scores = k->raw_scores;
            e->binary_out = binary_out;
            api_embed_run(app, e, r, kserve_respond);
        }
    }
    free(q);
    free(ql);
    free(docs);
    free(lens);
}
