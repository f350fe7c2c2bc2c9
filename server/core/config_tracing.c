/* config_tracing.c: the checks of server.tracing that a field table cannot
 * make (config.c reads its fields): the OTLP/HTTP endpoint URL and the
 * collector's extra headers; and whether two configs trace alike. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/core/config.h"

/* OTLP/HTTP's path for traces, appended to an endpoint given without one. */
#define TRACES_PATH "/v1/traces"

bool cfg_tracing_endpoint(char *url, size_t cap, char *why, size_t whycap)
{
    if (!*url)
        return true;
    const char *host = !strncmp(url, "http://", 7)    ? url + 7
                       : !strncmp(url, "https://", 8) ? url + 8
                                                      : NULL;
    if (!host) {
        snprintf(why, whycap, "\"%s\" must be an http:// or https:// URL: the collector's "
                              "OTLP/HTTP traces endpoint (\"http://127.0.0.1:4318/v1/traces\")",
                 url);
        return false;
    }
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) {
            snprintf(why, whycap, "\"%s\" has a space or a control character", url);
            return false;
        }
    const size_t hl = strcspn(host, "/?#");
    /* the port: after the last ':' not inside an IPv6 literal's brackets */
    const char *colon = NULL;
    for (const char *p = host; p < host + hl; p++)
        colon = *p == ':' ? p : *p == ']' ? NULL : colon;
    const size_t name = colon ? (size_t)(colon - host) : hl;
    char *end = NULL;
    const long port = colon ? strtol(colon + 1, &end, 10) : 1;
    if (!name || (colon && (end == colon + 1 || end != host + hl || port < 1 || port > 65535))) {
        snprintf(why, whycap, "\"%s\" needs a host and, if it names a port, one in 1-65535", url);
        return false;
    }
    if (!host[hl] || !strcmp(host + hl, "/")) { /* no path: OTLP's for traces */
        if (hl + (size_t)(host - url) + sizeof TRACES_PATH > cap) {
            snprintf(why, whycap, "longer than %zu characters", cap - 1);
            return false;
        }
        strcpy(url + (host - url) + hl, TRACES_PATH);
    }
    return true;
}

/* An HTTP header name (RFC 9110's token). */
static bool token(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("!#$%&'*+-.^_`|~", *s)))
            return false;
    return true;
}

bool cfg_tracing_headers(const struct cJSON *json, char *out, size_t cap, char *why,
                         size_t whycap)
{
    static const char *const reserved[] = {"Content-Type", "Content-Length", "Host", "Expect",
                                           "Transfer-Encoding", "Connection"};
    out[0] = 0;
    if (!json)
        return true;
    if (!cJSON_IsObject(json)) {
        snprintf(why, whycap, "must be an object of header names to values "
                              "({\"Authorization\": \"Bearer ...\"})");
        return false;
    }
    size_t len = 0;
    for (const cJSON *h = json->child; h; h = h->next) {
        if (!token(h->string)) {
            snprintf(why, whycap, "\"%.64s\" is not a header name", h->string);
            return false;
        }
        for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
            if (!strcasecmp(h->string, reserved[i])) {
                snprintf(why, whycap, "%s is set by the exporter itself", reserved[i]);
                return false;
            }
        bool ok = cJSON_IsString(h);
        for (const char *p = ok ? h->valuestring : ""; ok && *p; p++)
            ok = (unsigned char)*p >= 0x20 && *p != 0x7f;
        if (!ok) {
            snprintf(why, whycap, "%.64s: the value must be a string without control characters",
                     h->string);
            return false;
        }
        const int n = snprintf(out + len, cap - len, "%s: %s\n", h->string, h->valuestring);
        if (n < 0 || (size_t)n >= cap - len) {
            out[len] = 0;
            snprintf(why, whycap, "longer than %zu characters in all", cap - 1);
            return false;
        }
        len += (size_t)n;
    }
    return true;
}

bool cfg_tracing_same(const cfg_tracing *a, const cfg_tracing *b)
{
    return !strcmp(a->endpoint, b->endpoint) && a->sample_ratio == b->sample_ratio &&
           !strcmp(a->service_name, b->service_name) && !strcmp(a->headers, b->headers) &&
           a->max_queue_spans == b->max_queue_spans && a->max_batch_spans == b->max_batch_spans &&
           a->batch_delay_ms == b->batch_delay_ms && a->export_timeout_ms == b->export_timeout_ms;
}
