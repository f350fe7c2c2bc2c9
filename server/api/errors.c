/* errors.c: errors in each protocol's own shape (KServe {"error": "..."},
 * OpenAI {"error": {"message", "type", "param", "code"}}), for the handlers
 * and for the transport's own refusals; and request bodies, checked
 * strictly before a handler reads them: JSON, and the BYTES elements of
 * KServe's binary tensors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/api/api.h"
#include "engine/json_check.h"

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
    case 429: return "rate_limit_exceeded"; /* OpenAI's own 429 (with type "requests") */
    case 499: return "client_closed_request";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return status >= 500 ? "internal_error" : "invalid_request";
    }
}

/* OpenAI's error type for a status. A 429 is OpenAI's refusal of a request
 * over a rate limit, {"type": "requests", "code": "rate_limit_exceeded"}
 * (its error-codes guide: "429 - Rate limit reached for requests"; the
 * bodies clients see carry that type and code); ours is the same kind of
 * refusal: too many requests in progress for the model. */
static const char *openai_type(int status)
{
    if (status == 429)
        return "requests";
    return status >= 500 ? "server_error" : "invalid_request_error";
}

/* TEI's error_type for a status (what its clients switch on). */
static const char *tei_error_type(int status)
{
    switch (status) {
    case 429: return "Overloaded";
    case 503: return "Unhealthy";
    default: return status >= 500 ? "Backend" : "Validation";
    }
}

static void error_v(http_resp *r, int status, const char *tei_type, const char *param,
                    const char *fmt, va_list ap)
{
    const int style = r->call ? r->call->style : API_KSERVE;
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    sb_free(&r->body);
    r->status = status;
    r->content_type = NULL;
    if (r->call) { /* for the log line, cut to fit */
        size_t ml = strlen(msg) < sizeof r->call->error - 1 ? strlen(msg) : sizeof r->call->error - 1;
        memcpy(r->call->error, msg, ml);
        r->call->error[ml] = 0;
    }
    if (style == API_OPENAI) {
        sb_puts(&r->body, "{\"error\":{\"message\":");
        sb_json_str(&r->body, msg, strlen(msg));
        sb_printf(&r->body, ",\"type\":\"%s\",\"param\":", openai_type(status));
        if (param)
            sb_json_str(&r->body, param, strlen(param));
        else
            sb_puts(&r->body, "null");
        sb_printf(&r->body, ",\"code\":\"%s\"}}", status_code(status));
    } else {
        sb_puts(&r->body, "{\"error\":");
        sb_json_str(&r->body, msg, strlen(msg));
        if (style == API_TEI)
            sb_printf(&r->body, ",\"error_type\":\"%s\"",
                      tei_type ? tei_type : tei_error_type(status));
        sb_putc(&r->body, '}');
    }
}

void api_error(http_resp *r, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_v(r, status, NULL, param, fmt, ap);
    va_end(ap);
}

void api_error_typed(http_resp *r, int status, const char *tei_type, const char *param,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_v(r, status, tei_type, param, fmt, ap);
    va_end(ap);
}


void api_transport_error(const http_app *app, const http_req *req, const http_route *route,
                         http_resp *resp, int status, const char *param, const char *msg)
{
    api_error(resp, status, param, "%s", msg);
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

cJSON *api_parse_body(const http_app *app, const http_req *req, http_resp *resp)
{
    if (!json_content_type(req->content_type)) {
        api_error(resp, 415, "Content-Type",
                  "Content-Type \"%s\" is not supported; send application/json",
                  req->content_type);
        return NULL;
    }
    return api_parse_json(app, req->body, req->body_len, resp);
}

cJSON *api_parse_json(const http_app *app, const char *text, size_t len, http_resp *resp)
{
    const int max_depth = app->cfg->max_json_depth;
    if (len == 0) {
        api_error(resp, 400, NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    json_check_error je;
    if (json_check(text, len, max_depth, &je) != 0) {
        if (strstr(je.why, "deeper"))
            api_error(resp, 400, "max_json_depth",
                      "JSON nesting is deeper than the limit of %d (server.max_json_depth)",
                      max_depth);
        else
            api_error(resp, 400, NULL,
                      "the request body is not valid JSON: %s (at byte %zu)", je.why, je.offset);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        api_error(resp, 400, NULL, "the request body is not valid JSON (near byte %zu)",
                  off);
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        api_error(resp, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    bool oom = false;
    const char *dup = duplicate_key(j, &oom);
    if (oom) {
        api_error(resp, 500, NULL, "out of memory checking the request");
        cJSON_Delete(j);
        return NULL;
    }
    if (dup) {
        api_error(resp, 400, dup, "duplicate key \"%s\" in the request", dup);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

bool api_only_fields(const cJSON *j, const char *const *known, size_t n, http_resp *r)
{
    for (const cJSON *it = j->child; it; it = it->next) {
        size_t k = 0;
        while (k < n && strcmp(known[k], it->string))
            k++;
        if (k == n) {
            api_error(r, 400, it->string, "unknown field \"%s\"", it->string);
            return false;
        }
    }
    return true;
}

/* ---- KServe's binary tensors ---------------------------------------- */

bool api_split_bytes(const unsigned char *p, size_t size, long n, const char *name,
                     const char **texts, size_t *lens, http_resp *r)
{
    size_t at = 0;
    for (long i = 0; i < n; i++) {
        if (size - at < 4) {
            api_error(r, 400, "binary_data_size",
                      "input \"%s\": binary data ends inside element %ld's length", name, i);
            return false;
        }
        uint32_t len = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 | (uint32_t)p[at + 2] << 16 |
                       (uint32_t)p[at + 3] << 24;
        at += 4;
        if (len > size - at) {
            api_error(r, 400, "binary_data_size",
                      "input \"%s\": element %ld says %u bytes but only %zu remain", name, i,
                      len, size - at);
            return false;
        }
        texts[i] = (const char *)p + at;
        lens[i] = len;
        at += len;
    }
    if (at != size) {
        api_error(r, 400, "binary_data_size",
                  "input \"%s\": %zu bytes of binary data are left after %ld elements",
                  name, size - at, n);
        return false;
    }
    return true;
}
