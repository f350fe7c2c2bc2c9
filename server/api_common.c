/* api_common.c: what the OpenAI and KServe handlers share (errors, body
 * parsing, model/variant resolution, the text -> vector path) and the
 * health and metadata endpoints. */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_JSON_DEPTH 64

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
    case 503: return "unavailable";
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

/* Deepest nesting of [ and { outside strings; stops counting past cap. */
static int json_depth(const char *s, size_t n, int cap)
{
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max && (max = depth) > cap)
                return max;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return max;
}

static const char *duplicate_key(const cJSON *j)
{
    for (const cJSON *c = j ? j->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(j))
            for (const cJSON *d = c->next; d; d = d->next)
                if (!strcmp(c->string, d->string))
                    return c->string;
        const char *k = duplicate_key(c);
        if (k)
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
    if (req->body_len == 0) {
        api_error(resp, openai, 400, NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    if (json_depth(req->body, req->body_len, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) {
        api_error(resp, openai, 400, "max_json_depth",
                  "JSON nesting is deeper than the limit of %d", MAX_JSON_DEPTH);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(req->body, req->body_len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - req->body) : 0;
        api_error(resp, openai, 400, NULL, "the request body is not valid JSON (near byte %zu)",
                  off);
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        api_error(resp, openai, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    const char *dup = duplicate_key(j);
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

bool api_resolve(const http_ctx *ctx, const http_req *req, const char *name, bool openai,
                 srv_model **m, srv_variant **v, http_resp *resp)
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
    if (!(*m = srv_models_find(ctx->models, buf))) {
        api_error(resp, openai, 404, "model", "model \"%s\" is not served here", buf);
        return false;
    }
    if (!(*v = srv_pick_variant(*m, pin))) {
        api_error(resp, openai, 404, "model", "model \"%s\" has no variant \"%s\"", buf, pin);
        return false;
    }
    return true;
}

bool api_embed(const http_ctx *ctx, srv_model *m, srv_variant *v, const char *const *texts,
               const size_t *lens, int n, bool openai, float **out, long *tokens,
               http_resp *resp)
{
    const int maxlen = m->max_seq_len, h = m->hidden;
    const tok_t *tok = bert_tokenizer(v->model);
    if (n > ctx->cfg->max_inputs) {
        api_error(resp, openai, 413, "max_inputs",
                  "%d inputs in one request; the limit (server.max_inputs) is %d", n,
                  ctx->cfg->max_inputs);
        return false;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * maxlen);
    int32_t *off = malloc(sizeof(int32_t) * ((size_t)n + 1));
    float *vec = malloc(sizeof(float) * (size_t)n * h);
    bool ok = false;
    mt_err err;
    if (!ids || !off || !vec) {
        api_error(resp, openai, 500, NULL, "out of memory for %d inputs", n);
        goto done;
    }
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        int got = 0, full = 0;
        mt_status st = tok_encode(tok, texts[i], lens[i], ids + off[i], maxlen, &got, &full, &err);
        if (st == MT_EUTF8) {
            api_error(resp, openai, 400, "input", "input[%d]: %s", i, err.msg);
            goto done;
        }
        if (st != MT_OK) {
            api_error(resp, openai, 500, NULL, "input[%d]: %s", i, err.msg);
            goto done;
        }
        if (full > maxlen && !m->cfg.truncate) {
            api_error(resp, openai, 422, "max_seq_len",
                      "input[%d] is %d tokens, more than the model's max_seq_len of %d "
                      "(and truncation is off for this model)",
                      i, full, maxlen);
            goto done;
        }
        off[i + 1] = off[i] + got;
    }
    if (srv_forward(v, ids, off, n, vec, &err) != MT_OK) {
        api_error(resp, openai, 500, NULL, "inference failed: %s", err.msg);
        goto done;
    }
    for (size_t i = 0; i < (size_t)n * h; i++)
        if (!isfinite(vec[i])) {
            api_error(resp, openai, 500, NULL,
                      "variant %s produced a non-finite value (input %zu); no output sent",
                      v->cfg.name, i / h);
            goto done;
        }
    *tokens = off[n];
    *out = vec;
    vec = NULL;
    http_set_header(resp, "X-Mantissa-Variant", "%s", v->cfg.name);
    ok = true;
done:
    free(ids);
    free(off);
    free(vec);
    return ok;
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
    bool ready = ctx->models && ctx->models->ready;
    r->status = ready ? 200 : 503;
    sb_printf(&r->body, "{\"ready\":%s}", ready ? "true" : "false");
}

void api_server_metadata(const http_ctx *ctx, const http_req *req, const char *const *p,
                         http_resp *r)
{
    sb_puts(&r->body, "{\"name\":\"mantissa\",\"version\":\"" MANTISSA_VERSION
                      "\",\"extensions\":[]}");
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
    sb_puts(b, "{\"name\":");
    sb_json_str(b, m->cfg.name, strlen(m->cfg.name));
    sb_printf(b,
              ",\"versions\":[\"1\"],\"platform\":\"mantissa_bert\","
              "\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[-1]}],"
              "\"outputs\":[{\"name\":\"embedding\",\"datatype\":\"FP32\",\"shape\":[-1,%d]}],"
              "\"parameters\":{\"max_seq_len\":%d,\"variants\":[",
              m->hidden, m->max_seq_len);
    for (int k = 0; k < m->nvariants; k++) {
        const cfg_variant *v = &m->variants[k].cfg;
        sb_printf(b, "%s{\"name\":", k ? "," : "");
        sb_json_str(b, v->name, strlen(v->name));
        sb_printf(b, ",\"precision\":\"%s\",\"traffic\":%g}", mt_precision_name(v->precision),
                  v->traffic);
    }
    sb_puts(b, "]}}");
}

void api_model_ready(const http_ctx *ctx, const http_req *req, const char *const *p,
                     http_resp *r)
{
    srv_model *m = path_model(ctx, p, r);
    if (!m)
        return;
    sb_puts(&r->body, "{\"name\":");
    sb_json_str(&r->body, m->cfg.name, strlen(m->cfg.name));
    sb_puts(&r->body, ",\"ready\":true}");
}
