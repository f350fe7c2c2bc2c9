/* call.c: one request, from its headers to the end of its connection.
 *
 * Its record (http_call, api.h) is made when the headers are in and owns
 * everything the request takes on the way: the build it was routed to (a
 * reference), its admission place, and its scheduler job (a reference).
 * Handlers only fill the record; the transport's done hook releases all of
 * it here, whichever way the request ended. The sent hook writes the
 * request's log line and counters, in one place for every endpoint.
 *
 * The text -> vector job both inference protocols use is here too:
 * limits, admission, tokenization, the job and its deadline, and the
 * outcome as an answer.
 */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "server/api/api.h"
#include "server/base/log.h"
#include "server/core/stats.h"

/* ========================================================================
 * the record and the transport's hooks
 * ====================================================================== */

/* Whether path is one of pattern's ({} stands for one segment). */
static bool pattern_matches(const char *pat, const char *path)
{
    while (*pat && *path) {
        if (pat[0] == '{' && pat[1] == '}') {
            pat += 2;
            while (*path && *path != '/')
                path++;
        } else if (*pat++ != *path++) {
            return false;
        }
    }
    return !*pat && !*path;
}

/* The error shape of a path no route took (a method it does not allow):
 * that of the routes it has; else OpenAI's under /v1/, KServe's elsewhere. */
static int path_style(const http_app *app, const char *path)
{
    for (int i = 0; app->routes && i < app->nroutes; i++)
        if (pattern_matches(app->routes[i].pattern, path))
            return app->routes[i].style;
    return strncmp(path, "/v1/", 4) == 0 ? API_OPENAI : API_KSERVE;
}

static http_call *call_begin(const http_app *app, const http_req *req, const http_route *route)
{
    http_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->route = route;
    c->style = route ? route->style : path_style(app, req->path);
    snprintf(c->method, sizeof c->method, "%s", req->method);
    snprintf(c->path, sizeof c->path, "%s", req->path);
    c->t_start = req->t_start;
    c->reason = -1;
    api_trace_begin(app, &c->trace, req, route && (route->flags & HTTP_ROUTE_QUIET));
    const char *origin = api_cors_on(app) ? http_header(req, "Origin") : NULL;
    if (origin && strlen(origin) < sizeof c->origin)
        strcpy(c->origin, origin);
    return c;
}

/* The request's times: total, queued, in batches (ns). */
static void call_times(const http_call *c, uint64_t *total, uint64_t *queue, uint64_t *compute)
{
    const sched_job *j = c->job;
    *total = uv_hrtime() - c->t_start;
    *queue = !j ? 0 : j->t_start ? j->t_start - j->t_submit : j->t_done ? j->t_done - j->t_submit : 0;
    *compute = j ? j->compute_ns : 0;
}

/* Its log line. */
static void call_log(const http_call *c, int status)
{
    bool quiet = c->route && (c->route->flags & HTTP_ROUTE_QUIET);
    int level = status >= 500 ? LOG_WARN : quiet ? LOG_DEBUG : LOG_INFO;
    if (!log_enabled(level))
        return;
    uint64_t total, queue, compute;
    call_times(c, &total, &queue, &compute);
    char trace_id[2 * TC_TRACE_ID_LEN + 1], span_id[2 * TC_SPAN_ID_LEN + 1];
    tc_hex(trace_id, c->trace.trace_id, TC_TRACE_ID_LEN);
    tc_hex(span_id, c->trace.span_id, TC_SPAN_ID_LEN);
    log_request_fields f = {.id = c->id[0] ? c->id : NULL,
                            .trace_id = trace_id,
                            .span_id = span_id,
                            .method = c->method,
                            .path = c->path,
                            .model = c->model ? c->model->name : NULL,
                            .variant = c->variant ? c->variant->cfg.name : NULL,
                            .error = c->error[0] ? c->error : NULL,
                            .status = status,
                            .inputs = c->inputs,
                            .tokens = c->tokens,
                            .queue_ms = (double)queue * 1e-6,
                            .compute_ms = (double)compute * 1e-6,
                            .total_ms = (double)total * 1e-6};
    log_request(level, &f);
}

/* The answer is final: its headers, its counters, its log line. */
static void call_sent(const http_app *app, http_call *c, http_resp *r)
{
    bool cancelled = c->job && c->job->result == SCHED_CANCELLED;
    if (c->id[0])
        http_set_header(r, "X-Request-Id", "%s", c->id);
    bool named = false;
    for (int i = 0; i < r->nheaders; i++)
        named |= !strcmp(r->headers[i].name, "X-Mantissa-Variant");
    if (c->variant && !named) /* errors after routing name the variant too */
        http_set_header(r, "X-Mantissa-Variant", "%s", c->variant->cfg.name);
    if (!c->preflight)
        api_cors_headers(app, c->origin, r);
    api_trace_sent(&c->trace, r);
    stats_observe_http(r->status);
    if (c->model && c->variant) {
        uint64_t total, queue, compute;
        call_times(c, &total, &queue, &compute);
        stats_observe_request(&c->variant->slot->metrics, r->status, c->reason, cancelled, total,
                              queue, compute, c->inputs, c->tokens);
        if (r->status == 200 && !cancelled && c->truncated)
            stats_observe_truncated(&c->variant->slot->metrics, c->truncated);
    }
    call_log(c, cancelled ? 499 : r->status);
}

/* The connection is done with the request: a request whose answer never
 * went out (the client left) still counts as cancelled; then everything
 * it holds goes back. */
static void call_done(const http_app *app, http_call *c, bool answered)
{
    if (!answered && c->job && c->model && c->variant) {
        uint64_t total = uv_hrtime() - c->t_start;
        stats_observe_http(499);
        stats_observe_request(&c->variant->slot->metrics, 499, -1, true, total, 0, 0, c->inputs,
                              0);
        snprintf(c->error, sizeof c->error, "the client closed the connection");
        c->tokens = 0;
        call_log(c, 499);
    }
    api_trace_done(app, c, answered);
    sched_job_unref(c->job);
    if (c->admitted)
        sched_release(app->sched, c->admitted);
    srv_variant_unref(c->variant);
    free(c);
}

const http_hooks *api_hooks(void)
{
    static const http_hooks hooks = {
        .begin = call_begin,
        .error = api_transport_error,
        .options = api_cors_preflight,
        .sent = call_sent,
        .done = call_done,
    };
    return &hooks;
}

/* ========================================================================
 * deferring on a scheduler job
 * ====================================================================== */

/* The job has ended (on the loop thread): the connection answers. */
static void job_ended(sched_job *j)
{
    http_resume(j->owner);
}

/* The connection is suspended: the job goes to the scheduler. */
static void job_start(const http_app *app, http_deferred *d, int fd)
{
    sched_job *j = ((api_deferred *)d)->job;
    j->owner = d;
    j->fd = fd;
    j->on_done = job_ended;
    sched_submit(app->sched, j);
}

void api_defer(http_resp *resp, api_deferred *d,
               void (*respond)(const http_app *, http_deferred *, http_resp *))
{
    d->http.start = job_start;
    d->http.respond = respond;
    resp->deferred = &d->http;
    resp->call->job = d->job;
}

/* ========================================================================
 * ids and routing
 * ====================================================================== */

void api_request_id(const http_req *req, http_resp *resp)
{
    static atomic_ulong counter;
    http_call *c = resp->call;
    const char *h = http_header(req, "X-Request-Id");
    if (h && *h && strlen(h) < sizeof c->id) {
        bool ok = true;
        for (const char *p = h; *p; p++)
            ok &= *p > 0x20 && *p < 0x7f && *p != '"' && *p != '\\';
        if (ok) {
            strcpy(c->id, h);
            return;
        }
    }
    snprintf(c->id, sizeof c->id, "mt-%lx-%lu", (unsigned long)getpid(),
             atomic_fetch_add(&counter, 1) + 1);
}

bool api_resolve(const http_app *app, const http_req *req, const char *name, const char *key,
                 srv_model **m, srv_variant **v, http_resp *resp)
{
    char buf[256];
    if (strlen(name) >= sizeof buf) {
        api_error(resp, 404, "model", "model name is too long");
        return false;
    }
    strcpy(buf, name);
    const char *pin = srv_split_pin(buf);
    const char *hdr = http_header(req, "X-Mantissa-Variant");
    if (!pin || !*pin)
        pin = hdr;
    if (!key || !*key)
        key = http_header(req, "X-Mantissa-Route-Key");
    if (!(*m = srv_models_find(app->models, buf))) {
        api_error(resp, 404, "model", "model \"%s\" is not served here", buf);
        return false;
    }
    char why[400];
    srv_acq a = srv_acquire(*m, pin, key, v, why, sizeof why);
    if (a == SRV_OK) {
        resp->call->model = *m;
        resp->call->variant = *v; /* the request's reference, dropped at done */
        return true;
    }
    if (a == SRV_NO_VARIANT) {
        api_error(resp, 404, "model", "%s", why);
        return false;
    }
    api_error(resp, 503, "model", "%s", why);
    http_set_header(resp, "Retry-After", "%d", 1);
    return false;
}

/* ========================================================================
 * texts in a request
 * ====================================================================== */

/* Refuses n texts over server.max_inputs: 413, or on the TEI routes 422
 * Validation as TEI answers a batch over its max_client_batch_size; a
 * limit either way (reason "limit"). */
static void too_many_inputs(http_resp *r, int n, int max)
{
    const bool tei = r->call && r->call->style == API_TEI;
    api_error(r, tei ? 422 : 413, "max_inputs",
              "%d inputs in one request; the limit (server.max_inputs) is %d", n, max);
    if (r->call)
        r->call->reason = STATS_R_LIMIT;
}

int api_text_inputs(const http_app *app, const cJSON *in, const char *field, int bad_status,
                    const char ***texts, size_t **lens, http_resp *r)
{
    int n = cJSON_IsString(in) ? 1 : cJSON_GetArraySize(in);
    if (!cJSON_IsString(in) && !cJSON_IsArray(in)) {
        api_error(r, bad_status, field, "\"%s\" must be a string or an array of strings", field);
        return -1;
    }
    if (n == 0) { /* TEI: 400 with its error_type Empty */
        api_error_typed(r, 400, "Empty", field, "\"%s\" is an empty array; send at least one text",
                        field);
        return -1;
    }
    if (n > app->cfg->max_inputs) {
        too_many_inputs(r, n, app->cfg->max_inputs);
        return -1;
    }
    *texts = malloc(sizeof **texts * (size_t)n);
    *lens = malloc(sizeof **lens * (size_t)n);
    if (!*texts || !*lens) {
        api_error(r, 500, NULL, "out of memory");
        return -1;
    }
    int i = 0;
    const cJSON *it;
    if (cJSON_IsString(in))
        (*texts)[i++] = in->valuestring;
    else
        cJSON_ArrayForEach(it, in)
        {
            if (!cJSON_IsString(it)) {
                api_error(r, bad_status, field,
                          cJSON_IsNumber(it) || cJSON_IsArray(it)
                              ? "%s[%d]: token-id inputs are not supported; send text"
                              : "%s[%d] must be a string",
                          field, i);
                return -1;
            }
            (*texts)[i++] = it->valuestring;
        }
    for (i = 0; i < n; i++)
        (*lens)[i] = strlen((*texts)[i]);
    return n;
}

/* How errors name text i of a request: o's hook, else field[i]. */
static void name_text(const char *field, const api_embed_opts *o, int i, char *buf, size_t cap)
{
    if (o && o->text_name)
        o->text_name(i, buf, cap);
    else
        snprintf(buf, cap, "%s[%d]", field, i);
}

/* api_no_empty_text, naming the texts as name_text does. */
static bool no_empty_text(const char *field, const api_embed_opts *o, const char *const *texts,
                          const size_t *lens, int n, http_resp *r)
{
    int first = -1, count = 0;
    for (int i = 0; i < n; i++)
        if (lens ? lens[i] == 0 : texts[i][0] == 0) {
            first = first < 0 ? i : first;
            count++;
        }
    if (!count)
        return true;
    const int status = r->call && r->call->style == API_TEI ? 422 : 400;
    char also[64] = "", name[96];
    if (n > 1)
        snprintf(also, sizeof also, " (%d of %d inputs are empty)", count, n);
    name_text(field, o, first, name, sizeof name);
    api_error(r, status, o && o->text_name ? name : field,
              "%s is an empty string: there is no text to embed%s", name, also);
    if (r->call)
        r->call->reason = STATS_R_EMPTY_INPUT;
    return false;
}

bool api_no_empty_text(const char *field, const char *const *texts, const size_t *lens, int n,
                       http_resp *r)
{
    return no_empty_text(field, NULL, texts, lens, n, r);
}

/* ========================================================================
 * the text -> vector job
 * ====================================================================== */

/* How a request's protocol names its texts in errors (field[i]). */
static const char *text_field(const http_resp *resp)
{
    switch (resp->call ? resp->call->style : API_KSERVE) {
    case API_OPENAI: return "input";
    case API_TEI: return "inputs";
    default: return "text";
    }
}

/* Frees an embedding job when its last reference goes. */
static void embed_free(sched_job *j)
{
    api_embed *e = (api_embed *)((char *)j - offsetof(api_embed, job));
    free(j->ids);
    free(j->off);
    free(j->segs);
    free(j->out);
    free(j->norms);
    free(e->model_name);
    for (int i = 0; e->texts && i < j->n; i++)
        free(e->texts[i]);
    free(e->texts);
    free(e->spans);
    srv_variant_unref(e->v);
    free(e);
}

/* The limits on n texts, and none empty; false after answering 413 (or
 * what api_no_empty_text answers). */
static bool within_limits(const cfg_config *cfg, const char *const *texts, const size_t *lens,
                          int n, const api_embed_opts *o, http_resp *resp)
{
    if (n > cfg->max_inputs) {
        too_many_inputs(resp, n, cfg->max_inputs);
        return false;
    }
    for (int i = 0; i < n; i++)
        if (lens[i] > (size_t)cfg->max_input_bytes) {
            char name[96];
            name_text(text_field(resp), o, i, name, sizeof name);
            api_error(resp, 413, "max_input_bytes",
                      "%s is %zu bytes; the limit (server.max_input_bytes) is %d", name, lens[i],
                      cfg->max_input_bytes);
            return false;
        }
    return no_empty_text(text_field(resp), o, texts, lens, n, resp);
}

/* An admission place for a request of m (none without a scheduler); false
 * after answering 429 or 503. */
static bool admit(const http_app *app, srv_model *m, http_resp *resp)
{
    if (!app->sched)
        return true;
    switch (sched_admit(app->sched, m)) {
    case SCHED_ADMITTED:
        resp->call->admitted = m;
        return true;
    case SCHED_QUEUE_FULL:
        api_error(resp, 429, "max_queue",
                  "model %s has %d requests in progress, its limit (batching.max_queue); "
                  "retry later",
                  m->name, atomic_load(&m->max_queue));
        break;
    case SCHED_UNAVAILABLE:
        api_error(resp, 503, "ready",
                  "the server is not ready or is shutting down; retry on another replica");
        break;
    }
    http_set_header(resp, "Retry-After", "%d", 1);
    return false;
}

/* The last max - 2 pieces of a text whose full encoding is full tokens
 * long, between its first and last special tokens, into ids (capacity max):
 * the text truncated on the left. */
static mt_status tail_pieces(srv_variant *v, const char *text, size_t len, int full, int32_t *ids,
                             int max, mt_err *err)
{
    int32_t *all = malloc(sizeof(int32_t) * (size_t)full);
    int got = 0;
    if (!all)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    mt_status st = mt_model_tokenize(v->model, text, len, all, full, &got, NULL, err);
    if (st == MT_OK) {
        ids[0] = all[0];
        memcpy(ids + 1, all + got - (max - 1), sizeof(int32_t) * (size_t)(max - 2));
        ids[max - 1] = all[got - 1];
    }
    free(all);
    return st;
}

/* Refuses text i of full tokens, over the limit maxlen with truncation
 * off: 422 on the TEI routes (TEI's Validation), else 400 (OpenAI's and
 * Triton's status for a bad input). */
static void too_long(http_resp *resp, const api_embed_opts *o, int i, int full, int maxlen)
{
    const int style = resp->call->style;
    char name[96];
    name_text(text_field(resp), o, i, name, sizeof name);
    api_error(resp, style == API_TEI ? 422 : 400, "max_seq_len",
              "%s is %d tokens, more than the model's max_seq_len of %d, and truncation is "
              "off for this %s (%s\"truncate\": true cuts it to %d tokens)",
              name, full, maxlen, o->truncate >= 0 ? "request" : "model",
              style == API_KSERVE ? "the parameter " : "", maxlen);
    resp->call->reason = STATS_R_TOO_LONG;
}

/* The prompt the texts get: the request's prompt_name, else the build's
 * default (v->prompt); NULL: none. False after answering 400 (422 on
 * TEI's routes): a name the model does not have, or a model that pools
 * without its prompt. */
static bool pick_prompt(const srv_variant *v, const api_embed_opts *o, const char **prompt,
                        http_resp *resp)
{
    const mt_model_info *in = &v->model->info;
    const int status = resp->call->style == API_TEI ? 422 : 400;
    *prompt = v->prompt;
    if (!o->prompt_name)
        return true;
    if (!(*prompt = mt_model_prompt(in, o->prompt_name))) {
        char names[256] = "";
        for (int i = 0; i < in->nprompts && strlen(names) < 200; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s\"%.40s\"",
                     i ? ", " : "", in->prompt_names[i]);
        api_error(resp, status, "prompt_name",
                  "\"prompt_name\": \"%.64s\" is not one of this model's prompts (%s)",
                  o->prompt_name, in->nprompts ? names : "it has none");
        return false;
    }
    if (!in->prompt_pooled) {
        api_error(resp, status, "prompt_name", "\"prompt_name\": this model pools without its "
                  "prompt (include_prompt false), which is not supported");
        return false;
    }
    return true;
}

/* Text i with the prompt before it (a copy in *own) or as it is. */
static mt_status prompted(const char *prompt, const char *text, size_t len, const char **out,
                          size_t *out_len, char **own, mt_err *err)
{
    *own = NULL;
    *out = text;
    *out_len = len;
    if (!prompt)
        return MT_OK;
    const size_t pl = strlen(prompt);
    if (!(*own = malloc(pl + len + 1)))
        return mt_fail(err, MT_ENOMEM, "out of memory");
    memcpy(*own, prompt, pl);
    memcpy(*own + pl, text, len);
    (*own)[pl + len] = 0;
    *out = *own;
    *out_len = pl + len;
    return MT_OK;
}

/* Text i for e's build: a pair's tokens (o->pair_b) with where its second
 * text starts into *seg, or the text's (after the prompt, if any) with
 * *seg = its length; *got and *full as mt_model_tokenize gives them. */
static mt_status tokenize_one(api_embed *e, const char *prompt, const char *const *texts,
                              const size_t *lens, int i, const api_embed_opts *o, bool truncate,
                              int32_t *ids, int *got, int *full, int *seg, mt_err *err)
{
    srv_variant *v = e->v;
    const int maxlen = v->max_seq_len;
    if (o->pair_b && o->pair_b[i])
        return mt_model_tokenize_pair(v->model, texts[i], lens[i], o->pair_b[i],
                                      o->pair_blens[i], ids, maxlen, got, seg, full, err);
    const char *t;
    size_t tl;
    char *own;
    mt_status ts = prompted(prompt, texts[i], lens[i], &t, &tl, &own, err);
    if (ts == MT_OK)
        ts = mt_model_tokenize(v->model, t, tl, ids, maxlen, got, full, err);
    if (ts == MT_OK && *full > maxlen && truncate && o->truncate_left)
        ts = tail_pieces(v, t, tl, *full, ids, maxlen, err);
    free(own);
    *seg = *got;
    return ts;
}

/* Tokenizes n texts (each after the prompt, if any) or pairs for e's
 * build into ids/off (and segs, where not NULL), counting the texts cut
 * in e->truncated; false after answering 400, 422 or 500. */
static bool tokenize(api_embed *e, const char *const *texts, const size_t *lens, int n,
                     const api_embed_opts *o, int32_t *ids, int32_t *off, int32_t *segs,
                     http_resp *resp)
{
    srv_variant *v = e->v;
    const int maxlen = v->max_seq_len;
    const bool truncate = o->truncate < 0 ? atomic_load(&e->m->truncate) : o->truncate;
    const char *prompt = NULL;
    if (!o->scores && !o->no_prompt && !pick_prompt(v, o, &prompt, resp))
        return false;
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        int got = 0, full = 0, seg = 0;
        mt_err err;
        mt_status ts = tokenize_one(e, prompt, texts, lens, i, o, truncate, ids + off[i], &got,
                                    &full, &seg, &err);
        if (ts != MT_OK) {
            char name[96];
            name_text(text_field(resp), o, i, name, sizeof name);
            api_error(resp, ts == MT_EUTF8 ? 400 : ts == MT_EUNSUPPORTED ? 422 : 500,
                      ts == MT_EUTF8 ? "input" : NULL, "%s: %s", name, err.msg);
            return false;
        }
        if (segs)
            segs[i] = seg;
        if (full > maxlen && !truncate) {
            too_long(resp, o, i, full, maxlen);
            return false;
        }
        e->truncated += full > maxlen;
        off[i + 1] = off[i] + got;
    }
    return true;
}

/* A vector per token answers some 4.6 KB of JSON a token (MiniLM): the
 * tokens of such a request are capped at the model's max_batch_tokens (a
 * batch it would run anyway), so that a body of short texts cannot ask for
 * gigabytes. False after answering 422 (on TEI's route), a limit. */
static bool token_rows_fit(srv_model *m, long tokens, http_resp *resp)
{
    pthread_mutex_lock(&m->lock);
    const int max = m->cfg.max_batch_tokens;
    pthread_mutex_unlock(&m->lock);
    if (tokens <= max)
        return true;
    api_error(resp, resp->call->style == API_TEI ? 422 : 413, "max_batch_tokens",
              "these inputs are %ld tokens; a request for a vector per token may have at most "
              "the model's batching.max_batch_tokens (%d)",
              tokens, max);
    resp->call->reason = STATS_R_LIMIT;
    return false;
}

api_embed *api_embed_new(const http_app *app, const http_req *req, srv_model *m, srv_variant *v,
                         const char *const *texts, const size_t *lens, int n,
                         const api_embed_opts *o, http_resp *resp)
{
    static const api_embed_opts defaults = {.truncate = -1};
    if (!o)
        o = &defaults;
    http_call *call = resp->call;
    call->inputs = n;
    if (!o->scores && mt_model_get_info(v->model)->task == MT_TASK_CLASSIFY) {
        api_error(resp, call->style == API_TEI ? 424 : 400, "model",
                  "model %s is a classifier with %d label%s (a cross-encoder): it answers "
                  "/rerank, /v1/rerank and /predict, not embeddings",
                  m->name, v->nlabels, v->nlabels == 1 ? "" : "s");
        return NULL;
    }
    if (!within_limits(app->cfg, texts, lens, n, o, resp) ||
        (o->pair_b && !within_limits(app->cfg, o->pair_b, o->pair_blens, n, o, resp)) ||
        !admit(app, m, resp))
        return NULL;
    api_embed *e = calloc(1, sizeof *e);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * (size_t)v->max_seq_len);
    int32_t *off = malloc(sizeof(int32_t) * ((size_t)n + 1));
    int32_t *segs = o->scores ? malloc(sizeof(int32_t) * (size_t)n) : NULL;
    float *vec = NULL, *norms = o->norms ? malloc(sizeof(float) * (size_t)n) : NULL;
    const sched_kind kind = o->scores       ? SCHED_KIND_SCORE
                            : o->outputs    ? SCHED_KIND_OUTPUTS
                            : o->token_rows ? SCHED_KIND_TOKENS
                                            : SCHED_KIND_EMBED;
    const bool per_token = sched_kinds[kind].per_token;
    if (!e || !ids || !off || (o->norms && !norms) || (o->scores && !segs)) {
        api_error(resp, 500, NULL, "out of memory for %d inputs", n);
        goto fail;
    }
    e->m = m;
    e->v = v;
    e->outputs = o->outputs;
    if (!tokenize(e, texts, lens, n, o, ids, off, segs, resp))
        goto fail;
    if (per_token && !token_rows_fit(m, off[n], resp))
        goto fail;
    /* a vector per text, or per token */
    const size_t rows = (size_t)(per_token ? off[n] : n);
    if (!(vec = malloc(sizeof(float) * rows * (size_t)sched_row_width(kind, v)))) {
        api_error(resp, 500, NULL, "out of memory for %d inputs", n);
        goto fail;
    }
    srv_variant_ref(v); /* the job's own, until embed_free */
    e->tokens = call->tokens = off[n];
    call->truncated = e->truncated;
    snprintf(e->id, sizeof e->id, "%s", call->id);
    sched_job *j = &e->job;
    atomic_init(&j->refs, 1); /* the request's (api_embed_run hands it to the call) */
    j->m = m;
    j->v = v;
    j->n = n;
    j->ids = ids;
    j->off = off;
    j->segs = segs;
    j->out = vec;
    j->norms = norms;
    j->kind = kind;
    j->fd = -1;
    j->shadowable = sched_kinds[j->kind].shadowable; /* the reference compares pooled vectors */
    j->on_free = embed_free;
    double ms = app->cfg->request_timeout_ms;
    if (o->timeout_us > 0 && o->timeout_us / 1000.0 < ms)
        ms = o->timeout_us / 1000.0;
    j->deadline = req->t_start + (uint64_t)(ms * 1e6);
    e->d.job = j;
    return e;
fail:
    free(e);
    free(ids);
    free(off);
    free(segs);
    free(vec);
    free(norms);
    return NULL;
}

/* Without a scheduler: the forward, and the checks a batch would make. */
static void run_inline(api_embed *e)
{
    sched_job *j = &e->job;
    mt_err err;
    j->t_submit = j->t_start = uv_hrtime();
    const sched_kind_row *k = &sched_kinds[j->kind];
    const size_t rows = (size_t)(k->per_token ? j->off[j->n] : j->n);
    const size_t w = (size_t)sched_row_width(j->kind, e->v);
    if (srv_forward_kind(e->v, k->forward, j->ids, j->off, j->segs, j->n, j->out, j->norms,
                         &err) != MT_OK) {
        j->result = SCHED_FAILED;
        snprintf(j->msg, sizeof j->msg, "inference failed: %.200s", err.msg);
    }
    for (size_t i = 0; j->result == SCHED_OK && i < rows * w; i++)
        if (!isfinite(j->out[i])) {
            j->result = SCHED_FAILED;
            snprintf(j->msg, sizeof j->msg,
                     "variant %s produced a non-finite value (%s %zu); no output sent",
                     e->v->cfg.name, k->per_token ? "token" : "input", i / w);
        }
    j->t_done = uv_hrtime();
    j->compute_ns = j->t_done - j->t_start;
}

/* The client of an embedding job went away (a cancelled gRPC call): its
 * texts still queued need not run. */
static void job_cancel(const http_app *app, http_deferred *d)
{
    sched_cancel(app->sched, ((api_deferred *)d)->job);
}

void api_embed_run(const http_app *app, api_embed *e, http_resp *resp,
                   void (*respond)(const http_app *, http_deferred *, http_resp *))
{
    api_defer(resp, &e->d, respond);
    e->d.http.cancel = job_cancel;
    if (app->sched)
        return;
    resp->deferred = NULL;
    run_inline(e);
    respond(app, &e->d.http, resp);
}

void api_embed_run_named(const http_app *app, api_embed *e, const char *model, http_resp *resp,
                         void (*respond)(const http_app *, http_deferred *, http_resp *))
{
    if (!(e->model_name = strdup(model))) {
        sched_job_unref(&e->job); /* not run: the request answers now */
        api_error(resp, 500, NULL, "out of memory");
        return;
    }
    api_embed_run(app, e, resp, respond);
}

/* Server-Timing (W3C): where the request's time went, hop by hop, in ms:
 * parse (headers in -> job submitted: body, tokenizer), inbox (-> the loop
 * queued it), queue (-> its first batch dispatched), dispatch (-> the
 * worker began the forward of its last batch), forward (that forward; its
 * desc: the batch's texts and tokens, which say whether a long forward was
 * a big batch or a slow one), resume (-> this thread began the answer). */
static void server_timing(http_resp *resp, const sched_job *j)
{
    if (!j->t_queued || !j->t_run || !resp->call) /* no scheduler: run inline */
        return;
    const uint64_t now = uv_hrtime();
    const double ms = 1e-6;
    http_set_header(resp, "Server-Timing",
                    "parse;dur=%.3f, inbox;dur=%.3f, queue;dur=%.3f, dispatch;dur=%.3f, "
                    "forward;dur=%.3f;desc=\"batch of %d (%ld tokens)\", resume;dur=%.3f",
                    (double)(j->t_submit - resp->call->t_start) * ms,
                    (double)(j->t_queued - j->t_submit) * ms,
                    (double)(j->t_start - j->t_queued) * ms, (double)(j->t_run - j->t_start) * ms,
                    (double)(j->t_ran - j->t_run) * ms, j->run_texts, j->run_tokens,
                    (double)(now - j->t_ran) * ms);
}

bool api_embed_result(api_embed *e, http_resp *resp)
{
    sched_job *j = &e->job;
    http_set_header(resp, "X-Mantissa-Variant", "%s", e->v->cfg.name);
    http_set_header(resp, "X-Mantissa-Precision", "%s", mt_precision_name(e->v->cfg.precision));
    http_set_header(resp, "X-Mantissa-Space", "%s", e->v->space);
    switch (j->result) {
    case SCHED_OK:
        http_set_header(resp, "X-Mantissa-Truncated-Inputs", "%d", e->truncated);
        http_set_header(resp, "X-Queue-Time-Ms", "%.3f",
                        (double)(j->t_start - j->t_submit) * 1e-6);
        http_set_header(resp, "X-Inference-Time-Ms", "%.3f", (double)j->compute_ns * 1e-6);
        server_timing(resp, j);
        return true;
    case SCHED_TIMEOUT:
        api_error(resp, 504, "request_timeout_ms", "%s", j->msg);
        return false;
    case SCHED_SHUTDOWN:
        api_error(resp, 503, "shutdown_grace_ms", "%s", j->msg);
        return false;
    case SCHED_CANCELLED:
        api_error(resp, 499, NULL, "%s", j->msg);
        return false;
    case SCHED_FAILED:
        api_error(resp, 500, NULL, "%s", j->msg);
        return false;
    }
    return false;
}
