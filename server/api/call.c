/* api_common.c: what the OpenAI and KServe handlers share (errors, body
 * parsing, model/variant resolution, the text -> vector path) and the
 * health and metadata endpoints. */
#include "server/api/api.h"
#include "server/net/json_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <strings.h>
#include <unistd.h>
#include <uv.h>

#include "server/core/stats.h"

/* ========================================================================
 * errors
 * ====================================================================== */

static const char *status_code(int status)
{
    switch (status) {
    case 400: return "invalid_request";
    case 401: return "unauthorized";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 413: return "payload_too_large";
    case 415: return "unsupported_media_type";
    case 422: return "unprocessable_input";
    case 429: return "too_many_requests";
    case 499: return "client_closed_request";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return status >= 500 ? "internal_error" : "invalid_request";
    }
}

void api_error(http_resp *r, bool openai, int status, const char *param, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sb_free(&r->body);
    r->status = status;
    r->content_type = NULL;
    size_t ml = strlen(msg) < sizeof r->error - 1 ? strlen(msg) : sizeof r->error - 1;
    memcpy(r->error, msg, ml);
    r->error[ml] = 0;
    if (openai) {
        sb_puts(&r->body, "{\"error\":{\"message\":");
        sb_json_str(&r->body, msg, strlen(msg));
        sb_printf(&r->body, ",\"type\":\"%s\",\"param\":",
                  status >= 500 ? "server_error" : "invalid_request_error");
        if (param)
            sb_json_str(&r->body, param, strlen(param));
        else
            sb_puts(&r->body, "null");
        sb_printf(&r->body, ",\"code\":\"%s\"}}", status_code(status));
    } else {
        sb_puts(&r->body, "{\"error\":");
        sb_json_str(&r->body, msg, strlen(msg));
        sb_putc(&r->body, '}');
    }
}

/* ========================================================================
 * request bodies
 * ====================================================================== */

/* Content types a JSON body may come with: JSON itself, none, and what curl
 * -d and simple clients send by default. Anything else is a 415. */
static bool json_content_type(const char *ct)
{
    if (!ct || !*ct)
        return true;
    static const char *const ok[] = {"application/json", "text/plain",
                                     "application/x-www-form-urlencoded"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        size_t n = strlen(ok[i]);
        if (!strncasecmp(ct, ok[i], n) && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' '))
            return true;
    }
    const char *semi = strchr(ct, ';');
    size_t n = semi ? (size_t)(semi - ct) : strlen(ct);
    return n >= 5 && !strncasecmp(ct + n - 5, "+json", 5);
}


static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that appears twice in one object, anywhere in j. Each
 * object's keys are sorted, so a body of many keys costs n log n, not n^2
 * (a 1 MB body of 80k keys took 24 s of an HTTP thread with pairwise
 * compares). *oom is set when the scratch could not be had. */
static const char *duplicate_key(const cJSON *j, bool *oom)
{
    if (!j || (!cJSON_IsObject(j) && !cJSON_IsArray(j)))
        return NULL;
    size_t n = 0;
    for (const cJSON *c = j->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(j) && n > 1) {
        const char **keys = malloc(sizeof *keys * n);
        if (!keys) {
            *oom = true;
            return NULL;
        }
        size_t i = 0;
        for (const cJSON *c = j->child; c; c = c->next)
            keys[i++] = c->string;
        qsort(keys, n, sizeof *keys, cmp_keys);
        const char *dup = NULL;
        for (i = 1; i < n && !dup; i++)
            if (!strcmp(keys[i - 1], keys[i]))
                dup = keys[i];
        free(keys);
        if (dup)
            return dup;
    }
    for (const cJSON *c = j->child; c; c = c->next) {
        const char *k = duplicate_key(c, oom);
        if (k || *oom)
            return k;
    }
    return NULL;
}

cJSON *api_parse_body(const http_ctx *ctx, const http_req *req, bool openai, http_resp *resp)
{
    if (!json_content_type(req->content_type)) {
        api_error(resp, openai, 415, "Content-Type",
                  "Content-Type \"%s\" is not supported; send application/json",
                  req->content_type);
        return NULL;
    }
    return api_parse_json(ctx, req->body, req->body_len, openai, resp);
}

cJSON *api_parse_json(const http_ctx *ctx, const char *text, size_t len, bool openai,
                      http_resp *resp)
{
    const int max_depth = ctx->cfg->max_json_depth;
    if (len == 0) {
        api_error(resp, openai, 400, NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    json_check_error je;
    if (json_check(text, len, max_depth, &je) != 0) {
        if (strstr(je.why, "deeper"))
            api_error(resp, openai, 400, "max_json_depth",
                      "JSON nesting is deeper than the limit of %d (server.max_json_depth)",
                      max_depth);
        else
            api_error(resp, openai, 400, NULL,
                      "the request body is not valid JSON: %s (at byte %zu)", je.why, je.offset);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        api_error(resp, openai, 400, NULL, "the request body is not valid JSON (near byte %zu)",
                  off);
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        api_error(resp, openai, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    bool oom = false;
    const char *dup = duplicate_key(j, &oom);
    if (oom) {
        api_error(resp, openai, 500, NULL, "out of memory checking the request");
        cJSON_Delete(j);
        return NULL;
    }
    if (dup) {
        api_error(resp, openai, 400, dup, "duplicate key \"%s\" in the request", dup);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ========================================================================
 * models, variants and the embedding path
 * ====================================================================== */

bool api_resolve(const http_ctx *ctx, const http_req *req, const char *name, const char *key,
                 bool openai, srv_model **m, srv_variant **v, http_resp *resp)
{
    char buf[256];
    if (strlen(name) >= sizeof buf) {
        api_error(resp, openai, 404, "model", "model name is too long");
        return false;
    }
    strcpy(buf, name);
    const char *pin = srv_split_pin(buf);
    const char *hdr = http_header(req, "X-Mantissa-Variant");
    if (!pin || !*pin)
        pin = hdr;
    if (!key || !*key)
        key = http_header(req, "X-Mantissa-Route-Key");
    if (!(*m = srv_models_find(ctx->models, buf))) {
        api_error(resp, openai, 404, "model", "model \"%s\" is not served here", buf);
        return false;
    }
    char why[400];
    switch (srv_acquire(*m, pin, key, v, why, sizeof why)) {
    case SRV_OK:
        resp->model = *m;
        resp->variant = *v;
        if (ctx->sched)
            resp->held = *v;
        else /* tools and fuzzers: nothing swaps builds, the slot keeps it alive */
            srv_variant_unref(*v);
        return true;
    case SRV_NO_VARIANT:
        api_error(resp, openai, 404, "model", "%s", why);
        return false;
    case SRV_NOT_SERVING:
    case SRV_UNLOADED:
        break;
    }
    api_error(resp, openai, 503, "model", "%s", why);
    http_set_header(resp, "Retry-After", "%d", 1);
    return false;
}

void api_model_dims(srv_model *m, int *hidden, int *max_seq_len)
{
    *hidden = *max_seq_len = 0;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->nslots && !*hidden; i++)
        if (m->slots[i]->cur) {
            *hidden = m->slots[i]->cur->hidden;
            *max_seq_len = m->slots[i]->cur->max_seq_len;
        }
    pthread_mutex_unlock(&m->lock);
}

/* Frees an embedding call when its last reference goes. */
static void call_free(sched_job *j)
{
    api_call *c = (api_call *)((char *)j - offsetof(api_call, job));
    free(j->ids);
    free(j->off);
    free(j->out);
    free(c->model_name);
    srv_variant_unref(c->v);
    free(c);
}

void api_request_id(const http_req *req, http_resp *resp)
{
    static atomic_ulong counter;
    const char *h = http_header(req, "X-Request-Id");
    if (h && *h && strlen(h) < sizeof resp->id) {
        bool ok = true;
        for (const char *p = h; *p; p++)
            ok &= *p > 0x20 && *p < 0x7f && *p != '"' && *p != '\\';
        if (ok) {
            strcpy(resp->id, h);
            return;
        }
    }
    snprintf(resp->id, sizeof resp->id, "mt-%lx-%lu", (unsigned long)getpid(),
             atomic_fetch_add(&counter, 1) + 1);
}

api_call *api_submit_texts(const http_ctx *ctx, const http_req *req, srv_model *m,
                           srv_variant *v, const char *const *texts, const size_t *lens, int n,
                           bool openai, double timeout_us, http_resp *resp)
{
    const int maxlen = v->max_seq_len;
    const cfg_config *cfg = ctx->cfg;
    resp->model = m;
    resp->variant = v;
    resp->inputs = n;
    if (n > cfg->max_inputs) {
        api_error(resp, openai, 413, "max_inputs",
                  "%d inputs in one request; the limit (server.max_inputs) is %d", n,
                  cfg->max_inputs);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (lens[i] > (size_t)cfg->max_input_bytes) {
            api_error(resp, openai, 413, "max_input_bytes",
                      "input[%d] is %zu bytes; the limit (server.max_input_bytes) is %d", i,
                      lens[i], cfg->max_input_bytes);
            return NULL;
        }
    int retry = 1;
    int st = ctx->sched ? sched_admit(ctx->sched, m, &retry) : 0;
    if (st == 429) {
        api_error(resp, openai, 429, "max_queue",
                  "model %s has %d requests in progress, its limit (batching.max_queue); "
                  "retry later",
                  m->name, atomic_load(&m->max_queue));
        http_set_header(resp, "Retry-After", "%d", retry);
        return NULL;
    }
    if (st) {
        api_error(resp, openai, 503, "ready",
                  "the server is not ready or is shutting down; retry on another replica");
        http_set_header(resp, "Retry-After", "%d", 1);
        return NULL;
    }
    if (ctx->sched)
        resp->admitted = m;

    api_call *c = calloc(1, sizeof *c);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * (size_t)maxlen);
    int32_t *off = malloc(sizeof(int32_t) * ((size_t)n + 1));
    float *vec = malloc(sizeof(float) * (size_t)n * (size_t)v->hidden);
    mt_err err;
    if (!c || !ids || !off || !vec) {
        api_error(resp, openai, 500, NULL, "out of memory for %d inputs", n);
        goto fail;
    }
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        int got = 0, full = 0;
        mt_status ts =
            mt_model_tokenize(v->model, texts[i], lens[i], ids + off[i], maxlen, &got, &full, &err);
        if (ts == MT_EUTF8) {
            api_error(resp, openai, 400, "input", "input[%d]: %s", i, err.msg);
            goto fail;
        }
        if (ts != MT_OK) {
            api_error(resp, openai, 500, NULL, "input[%d]: %s", i, err.msg);
            goto fail;
        }
        if (full > maxlen && !atomic_load(&m->truncate)) {
            api_error(resp, openai, 422, "max_seq_len",
                      "input[%d] is %d tokens, more than the model's max_seq_len of %d "
                      "(and truncation is off for this model)",
                      i, full, maxlen);
            goto fail;
        }
        off[i + 1] = off[i] + got;
    }
    c->m = m;
    c->v = v;
    srv_variant_ref(v); /* the call's own, until call_free */
    c->openai = openai;
    c->tokens = off[n];
    snprintf(c->id, sizeof c->id, "%s", resp->id);
    c->d.job = &c->job;
    sched_job *j = &c->job;
    atomic_init(&j->refs, 1); /* the front's */
    j->m = m;
    j->v = v;
    j->n = n;
    j->ids = ids;
    j->off = off;
    j->out = vec;
    j->fd = -1;
    j->shadowable = true;
    j->on_free = call_free;
    double ms = cfg->request_timeout_ms;
    if (timeout_us > 0 && timeout_us / 1000.0 < ms)
        ms = timeout_us / 1000.0;
    j->deadline = req->t_start + (uint64_t)(ms * 1e6);
    resp->tokens = c->tokens;
    resp->deferred = &c->d;
    return c;
fail:
    free(c);
    free(ids);
    free(off);
    free(vec);
    return NULL;
}

void api_dispatch(const http_ctx *ctx, api_call *c, http_resp *resp)
{
    if (ctx->sched)
        return;
    sched_job *j = &c->job;
    mt_err err;
    j->t_submit = j->t_start = uv_hrtime();
    if (srv_forward(c->v, j->ids, j->off, j->n, j->out, &err) != MT_OK) {
        j->result = SCHED_FAILED;
        snprintf(j->msg, sizeof j->msg, "inference failed: %.200s", err.msg);
    }
    for (size_t i = 0; j->result == SCHED_OK && i < (size_t)j->n * (size_t)c->v->hidden; i++)
        if (!isfinite(j->out[i])) {
            j->result = SCHED_FAILED;
            snprintf(j->msg, sizeof j->msg,
                     "variant %s produced a non-finite value (input %zu); no output sent",
                     c->v->cfg.name, i / (size_t)c->v->hidden);
        }
    j->t_done = uv_hrtime();
    j->compute_ns = j->t_done - j->t_start;
    resp->deferred = NULL;
    c->d.respond(ctx, &c->d, resp);
    sched_job_unref(j);
}

bool api_call_result(api_call *c, http_resp *resp)
{
    sched_job *j = &c->job;
    resp->model = c->m;
    resp->variant = c->v;
    resp->inputs = j->n;
    resp->tokens = c->tokens;
    snprintf(resp->id, sizeof resp->id, "%s", c->id);
    http_set_header(resp, "X-Mantissa-Variant", "%s", c->v->cfg.name);
    http_set_header(resp, "X-Mantissa-Precision", "%s", mt_precision_name(c->v->cfg.precision));
    http_set_header(resp, "X-Mantissa-Space", "%s", c->v->space);
    switch (j->result) {
    case SCHED_OK:
        http_set_header(resp, "X-Queue-Time-Ms", "%.3f",
                        (double)(j->t_start - j->t_submit) * 1e-6);
        http_set_header(resp, "X-Inference-Time-Ms", "%.3f", (double)j->compute_ns * 1e-6);
        return true;
    case SCHED_TIMEOUT:
        api_error(resp, c->openai, 504, "request_timeout_ms", "%s", j->msg);
        return false;
    case SCHED_SHUTDOWN:
        api_error(resp, c->openai, 503, "shutdown_grace_ms", "%s", j->msg);
        return false;
    case SCHED_CANCELLED:
        api_error(resp, c->openai, 499, NULL, "%s", j->msg);
        return false;
    case SCHED_FAILED:
        api_error(resp, c->openai, 500, NULL, "%s", j->msg);
        return false;
    }
    return false;
}

/* ========================================================================
 * health and metadata (KServe v2)
 * ====================================================================== */

void api_health_live(const http_ctx *ctx, const http_req *req, const char *const *p,
                     http_resp *r)
{
    sb_puts(&r->body, "{\"live\":true}");
}

void api_health_ready(const http_ctx *ctx, const http_req *req, const char *const *p,
                      http_resp *r)
{
    bool ready = ctx->models && atomic_load(&ctx->models->ready) &&
                 !(ctx->sched && sched_draining(ctx->sched));
    r->status = ready ? 200 : 503;
    sb_printf(&r->body, "{\"ready\":%s}", ready ? "true" : "false");
}

void api_server_metadata(const http_ctx *ctx, const http_req *req, const char *const *p,
                         http_resp *r)
{
    sb_puts(&r->body, "{\"name\":\"mantissa\",\"version\":\"" MANTISSA_VERSION
                      "\",\"extensions\":[\"binary_tensor_data\",\"statistics\","
                      "\"model_configuration\",\"model_repository\"]}");
}

/* The model of a /v2/models/{m}[/versions/{v}] path, or NULL after a 404. */
static srv_model *path_model(const http_ctx *ctx, const char *const *p, http_resp *r)
{
    srv_model *m = srv_models_find(ctx->models, p[0]);
    if (!m) {
        api_error(r, false, 404, "model", "model \"%s\" is not served here", p[0]);
        return NULL;
    }
    if (p[1] && strcmp(p[1], "1") != 0) {
        api_error(r, false, 404, "version", "model \"%s\" has no version \"%s\" (only \"1\")",
                  p[0], p[1]);
        return NULL;
    }
    return m;
}

void api_model_metadata(const http_ctx *ctx, const http_req *req, const char *const *p,
                        http_resp *r)
{
    srv_model *m = path_model(ctx, p, r);
    if (!m)
        return;
    sbuf *b = &r->body;
    int hidden, maxlen;
    api_model_dims(m, &hidden, &maxlen);
    sb_puts(b, "{\"name\":");
    sb_json_str(b, m->name, strlen(m->name));
    sb_printf(b,
              ",\"versions\":[\"1\"],\"platform\":\"mantissa_bert\","
              "\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[-1]}],"
              "\"outputs\":[{\"name\":\"embedding\",\"datatype\":\"FP32\",\"shape\":[-1,%d]}],"
              "\"parameters\":{\"max_seq_len\":%d,\"variants\":[",
              hidden, maxlen);
    pthread_mutex_lock(&m->lock);
    int first = 1;
    for (int k = 0; k < m->nslots; k++) {
        const srv_slot *sl = m->slots[k];
        if (!sl->present)
            continue;
        sb_printf(b, "%s{\"name\":", first ? "" : ",");
        first = 0;
        sb_json_str(b, sl->name, strlen(sl->name));
        sb_printf(b, ",\"precision\":\"%s\",\"traffic\":%g,\"state\":\"%s\"",
                  mt_precision_name(sl->want.precision), sl->traffic,
                  srv_vstate_name(sl->state));
        if (sl->cur) {
            sb_puts(b, ",\"space_id\":");
            sb_json_str(b, sl->cur->space, strlen(sl->cur->space));
        }
        sb_putc(b, '}');
    }
    pthread_mutex_unlock(&m->lock);
    sb_puts(b, "]}}");
}

void api_model_ready(const http_ctx *ctx, const http_req *req, const char *const *p,
                     http_resp *r)
{
    srv_model *m = path_model(ctx, p, r);
    if (!m)
        return;
    bool ready = atomic_load(&ctx->models->ready) && !(ctx->sched && sched_draining(ctx->sched)) &&
                 srv_model_serving(m);
    r->status = ready ? 200 : 503;
    sb_puts(&r->body, "{\"name\":");
    sb_json_str(&r->body, m->name, strlen(m->name));
    sb_printf(&r->body, ",\"ready\":%s}", ready ? "true" : "false");
}

/* Triton's model configuration, consistent with the metadata: no batch
 * dimension in the shapes (max_batch_size 0), one BYTES input of any
 * length and an FP32 output (n, hidden); the server batches requests
 * itself (dynamic_batching). */
void api_model_config(const http_ctx *ctx, const http_req *req, const char *const *p,
                      http_resp *r)
{
    srv_model *m = path_model(ctx, p, r);
    if (!m)
        return;
    int hidden, maxlen;
    api_model_dims(m, &hidden, &maxlen);
    pthread_mutex_lock(&m->lock);
    const int max_batch = m->cfg.max_batch_size, max_tokens = m->cfg.max_batch_tokens,
              delay = m->cfg.max_queue_delay_us;
    const bool delay_auto = m->cfg.delay_auto;
    pthread_mutex_unlock(&m->lock);
    sbuf *b = &r->body;
    sb_puts(b, "{\"name\":");
    sb_json_str(b, m->name, strlen(m->name));
    sb_printf(b,
              ",\"platform\":\"mantissa_bert\",\"backend\":\"mantissa\",\"version_policy\":"
              "{\"latest\":{\"num_versions\":1}},\"max_batch_size\":0,"
              "\"input\":[{\"name\":\"text\",\"data_type\":\"TYPE_STRING\",\"format\":"
              "\"FORMAT_NONE\",\"dims\":[-1],\"is_shape_tensor\":false,\"allow_ragged_batch\":"
              "false,\"optional\":false}],"
              "\"output\":[{\"name\":\"embedding\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1,%d],"
              "\"label_filename\":\"\",\"is_shape_tensor\":false}],"
              "\"dynamic_batching\":{\"preferred_batch_size\":[],"
              "\"max_queue_delay_microseconds\":%d,\"preserve_ordering\":true},"
              "\"instance_group\":[{\"name\":\"%s\",\"kind\":\"KIND_CPU\",\"count\":%d}],"
              "\"parameters\":{\"max_batch_size\":{\"string_value\":\"%d\"},"
              "\"max_batch_tokens\":{\"string_value\":\"%d\"},"
              "\"max_queue_delay_us\":{\"string_value\":\"%s\"},"
              "\"max_seq_len\":{\"string_value\":\"%d\"}}}",
              hidden, delay_auto ? 0 : delay, m->name, ctx->cfg->engine_workers, max_batch,
              max_tokens, delay_auto ? "auto" : "fixed", maxlen);
}

/* Triton's statistics extension: one model, or all when the path names
 * none. */
void api_model_stats(const http_ctx *ctx, const http_req *req, const char *const *p,
                     http_resp *r)
{
    srv_model *only = NULL;
    if (p[0] && !(only = path_model(ctx, p, r)))
        return;
    sb_puts(&r->body, "{\"model_stats\":[");
    int first = 1;
    for (int i = 0; i < srv_models_count(ctx->models); i++) {
        srv_model *m = srv_models_at(ctx->models, i);
        if (only && m != only)
            continue;
        if (!first)
            sb_putc(&r->body, ',');
        first = 0;
        prom_model_stats_json(&r->body, ctx->models, m);
    }
    sb_puts(&r->body, "]}");
}

void api_metrics(const http_ctx *ctx, const http_req *req, const char *const *p, http_resp *r)
{
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    prom_render(&r->body, ctx->models, ctx->sched);
}
