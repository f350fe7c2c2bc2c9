/* http.c: the HTTP front on libmicrohttpd.
 *
 * Threading: MHD runs its own epoll thread pool (server.http_threads) and
 * calls the handlers on those threads. The handlers run a request to the end
 * there: the variant's lock serialises forwards (each already uses every
 * core). The serving-core work replaces this with a libuv scheduler that
 * batches requests and suspends connections while they wait; the route
 * table and the handlers stay as they are.
 *
 * Bodies are read in pieces and the size cap is enforced while reading (and
 * up front from Content-Length), so an oversized body never sits in memory.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/api.h"

struct http_server {
    struct MHD_Daemon *d;
    http_ctx ctx;
    int port;
};

/* ========================================================================
 * the route table: every endpoint in one place
 * ====================================================================== */

typedef struct {
    const char *method;
    const char *pattern; /* "{}" matches one path segment */
    http_handler handler;
} route;

static const route routes[] = {
    {"GET", "/v2/health/live", api_health_live},
    {"GET", "/v2/health/ready", api_health_ready},
    {"GET", "/v2", api_server_metadata},
    {"GET", "/v2/models/{}", api_model_metadata},
    {"GET", "/v2/models/{}/versions/{}", api_model_metadata},
    {"GET", "/v2/models/{}/ready", api_model_ready},
    {"GET", "/v2/models/{}/versions/{}/ready", api_model_ready},
    {"POST", "/v2/models/{}/infer", api_kserve_infer},
    {"POST", "/v2/models/{}/versions/{}/infer", api_kserve_infer},
    {"POST", "/v1/embeddings", api_openai_embeddings},
    {"GET", "/v1/models", api_openai_models},
};

#define MAX_PARAMS 4
#define PARAM_MAX 256

/* Matches path against pattern; captured segments go to params. */
static bool match(const char *pattern, const char *path, char params[][PARAM_MAX], int *np)
{
    *np = 0;
    while (*pattern && *path) {
        if (pattern[0] == '{' && pattern[1] == '}') {
            const char *end = strchr(path, '/');
            size_t n = end ? (size_t)(end - path) : strlen(path);
            if (n == 0 || n >= PARAM_MAX || *np >= MAX_PARAMS)
                return false;
            memcpy(params[*np], path, n);
            params[*np][n] = 0;
            (*np)++;
            path += n;
            pattern += 2;
        } else if (*pattern++ != *path++) {
            return false;
        }
    }
    return !*pattern && !*path;
}

/* ========================================================================
 * responses
 * ====================================================================== */

void http_set_header(http_resp *r, const char *name, const char *fmt, ...)
{
    if (r->nheaders >= HTTP_MAX_HEADERS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->headers[r->nheaders].value, sizeof r->headers[r->nheaders].value, fmt, ap);
    va_end(ap);
    r->headers[r->nheaders++].name = name;
}

const char *http_header(const http_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

static enum MHD_Result send_resp(struct MHD_Connection *conn, http_resp *r)
{
    size_t len;
    if (r->body.oom) {
        sb_free(&r->body);
        r->status = 500;
        r->nheaders = 0;
        sb_puts(&r->body, "{\"error\":\"out of memory building the response\"}");
    }
    char *data = sb_take(&r->body, &len);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, data ? data : (char *)"", data ? MHD_RESPMEM_MUST_FREE
                                                                            : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
    for (int i = 0; i < r->nheaders; i++)
        MHD_add_response_header(resp, r->headers[i].name, r->headers[i].value);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ========================================================================
 * request handling
 * ====================================================================== */

typedef struct {
    sbuf body;
    bool too_large;
} req_state;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    http_server *s = cls;
    size_t cap = s->ctx.cfg->max_body_bytes;
    req_state *rs = *con_cls;

    if (!rs) { /* headers are in; the body (if any) follows */
        if (!(rs = calloc(1, sizeof *rs)))
            return MHD_NO;
        *con_cls = rs;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > cap)
            rs->too_large = true;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rs->too_large && rs->body.len + *upload_size <= cap)
            sb_putn(&rs->body, upload_data, *upload_size);
        else
            rs->too_large = true;
        *upload_size = 0;
        return MHD_YES;
    }

    http_resp resp = {.status = 200};
    sb_init(&resp.body);
    http_req req = {.method = method, .path = url, .conn = conn,
                    .body = rs->body.data ? rs->body.data : "", .body_len = rs->body.len,
                    .content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                MHD_HTTP_HEADER_CONTENT_TYPE)};
    bool openai = strncmp(url, "/v1/", 4) == 0;

    if (rs->too_large || rs->body.oom) {
        api_error(&resp, openai, 413, "max_body_bytes",
                  "request body is larger than max_body_bytes (%zu bytes)", cap);
        return send_resp(conn, &resp);
    }

    char params[MAX_PARAMS][PARAM_MAX];
    const char *pp[MAX_PARAMS + 1] = {0};
    int np, path_matched = 0;
    char allow[64] = "";
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        if (!match(routes[i].pattern, url, params, &np))
            continue;
        path_matched = 1;
        if (strcmp(routes[i].method, method) != 0) {
            if (!strstr(allow, routes[i].method))
                snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s",
                         *allow ? ", " : "", routes[i].method);
            continue;
        }
        for (int k = 0; k < np; k++)
            pp[k] = params[k];
        routes[i].handler(&s->ctx, &req, pp, &resp);
        return send_resp(conn, &resp);
    }
    if (path_matched) {
        api_error(&resp, openai, 405, "method", "method %s is not allowed on %s (allowed: %s)",
                  method, url, allow);
        http_set_header(&resp, MHD_HTTP_HEADER_ALLOW, "%s", allow);
    } else {
        api_error(&resp, openai, 404, "path", "no endpoint %s %s", method, url);
    }
    return send_resp(conn, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    req_state *rs = *con_cls;
    if (rs) {
        sb_free(&rs->body);
        free(rs);
        *con_cls = NULL;
    }
}

/* ========================================================================
 * start and stop
 * ====================================================================== */

mt_status http_start(const http_ctx *ctx, http_server **out, mt_err *err)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    s->ctx = *ctx;
    const cfg_config *c = ctx->cfg;

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, c->listen_host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)c->listen_port);
    } else if (inet_pton(AF_INET6, c->listen_host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)c->listen_port);
        flags |= MHD_USE_IPv6;
    } else {
        free(s);
        return mt_fail(err, MT_EINVAL, "server.listen: \"%s\" is not an IPv4 or IPv6 address",
                       c->listen_host);
    }

    s->d = MHD_start_daemon(
        flags, (uint16_t)c->listen_port, NULL, NULL, on_request, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)c->http_threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)30,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1000,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_END);
    if (!s->d) {
        free(s);
        return mt_fail(err, MT_EIO, "cannot listen on %s:%d (address in use or not permitted)",
                       c->listen_host, c->listen_port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_LISTEN_FD);
    s->port = c->listen_port;
    if (info) {
        struct sockaddr_storage bound;
        socklen_t bl = sizeof bound;
        if (getsockname(info->listen_fd, (struct sockaddr *)&bound, &bl) == 0)
            s->port = bound.ss_family == AF_INET6
                          ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                          : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    }
    *out = s;
    return MT_OK;
}

int http_port(const http_server *s)
{
    return s->port;
}

void http_stop(http_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d);
    free(s);
}
