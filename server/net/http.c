/* http.c: the HTTP front on libmicrohttpd.
 *
 * Threading. MHD runs its own epoll thread pool (server.http_threads): the
 * handlers parse and validate JSON, tokenize and serialise responses on
 * those threads, in parallel. Work for the engine is not done there: a
 * handler hands a job to the scheduler (server/sched.c, the libuv loop
 * thread) and the connection is suspended (MHD_ALLOW_SUSPEND_RESUME); when
 * the job ends, the loop (or the engine worker that ran the job whole in
 * one batch) resumes the connection and an MHD thread builds the answer.
 *
 * Why MHD's own threads rather than driving MHD from the libuv loop
 * (MHD_USE_EPOLL without a thread, its epoll fd watched by a uv_poll_t):
 * then every handler would run on the loop thread, and JSON parsing,
 * tokenization and float formatting (a 64 x 384 response is ~300 KB of
 * text) would block the scheduler for milliseconds at a time, which is
 * what the loop must never do. With MHD's pool those run in parallel and
 * the loop only schedules; the two sides meet through the scheduler's
 * locked inbox + uv_async_send one way, and MHD_resume_connection (which
 * MHD allows from any thread) the other way.
 *
 * Suspended connections never time out in MHD, so each job carries its
 * own deadline (server.request_timeout_ms), and the loop watches each
 * waiting client socket for a hang-up to cancel its queued work. Every
 * suspended connection is resumed (its job ended) before MHD_stop_daemon:
 * the scheduler's drain ends only when every admitted request has been
 * answered.
 *
 * Bodies are read in pieces and the size cap is enforced while reading (and
 * up front from Content-Length), so an oversized body never sits in memory.
 */
#include "server/net/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "engine/jsonfile.h"
#include "server/api/api.h"
#include "server/net/auth.h"
#include "server/base/log.h"

struct http_server {
    struct MHD_Daemon *d;
    http_ctx ctx;
    int port;
    MHD_socket quiesced_fd;
    char *tls_cert, *tls_key;
};

/* ========================================================================
 * the route table: every endpoint in one place
 * ====================================================================== */

typedef struct {
    const char *method;
    const char *pattern; /* "{}" matches one path segment */
    http_handler handler;
    bool quiet;          /* probes and scrapes: logged at debug level */
} route;

static const route routes[] = {
    {"GET", "/v2/health/live", api_health_live, true},
    {"GET", "/v2/health/ready", api_health_ready, true},
    {"GET", "/v2", api_server_metadata, false},
    {"GET", "/v2/models/stats", api_model_stats, false},
    {"GET", "/v2/models/{}", api_model_metadata, false},
    {"GET", "/v2/models/{}/versions/{}", api_model_metadata, false},
    {"GET", "/v2/models/{}/ready", api_model_ready, true},
    {"GET", "/v2/models/{}/versions/{}/ready", api_model_ready, true},
    {"GET", "/v2/models/{}/config", api_model_config, false},
    {"GET", "/v2/models/{}/versions/{}/config", api_model_config, false},
    {"GET", "/v2/models/{}/stats", api_model_stats, false},
    {"GET", "/v2/models/{}/versions/{}/stats", api_model_stats, false},
    {"POST", "/v2/models/{}/infer", api_kserve_infer, false},
    {"POST", "/v2/models/{}/versions/{}/infer", api_kserve_infer, false},
    {"POST", "/v2/repository/index", api_repository_index, false},
    {"POST", "/v2/repository/models/{}/load", api_repository_load, false},
    {"POST", "/v2/repository/models/{}/unload", api_repository_unload, false},
    {"GET", "/v2/admin/config", api_admin_config, false},
    {"POST", "/v2/admin/reload", api_admin_reload, false},
    {"POST", "/v2/models/{}/compare", api_compare, false},
    {"GET", "/ab", api_ab_page, false},
    {"POST", "/v1/embeddings", api_openai_embeddings, false},
    {"GET", "/v1/models", api_openai_models, false},
    {"GET", "/metrics", api_metrics, true},
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
    if (req->conn)
        return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
    for (const char *const *h = req->headers; h && h[0] && h[1]; h += 2)
        if (!strcasecmp(h[0], name))
            return h[1];
    return NULL;
}

/* Per connection request state (MHD's con_cls). */
typedef struct {
    sbuf body;
    bool too_large;
    uint64_t t_start;
    char method[16];
    char path[256];
    http_deferred *deferred; /* a job is out (or done) */
    srv_model *admitted;     /* released when the connection is done */
    srv_variant *held;       /* the build the request was routed to, until it is done */
    bool quiet;
    bool answered;           /* send_resp ran */
} req_state;

/* Logs the request, counts it, and queues the answer. */
static enum MHD_Result send_resp(http_server *s, struct MHD_Connection *conn, req_state *rs,
                                 http_resp *r)
{
    size_t len;
    rs->answered = true;
    if (r->body.oom) {
        sb_free(&r->body);
        r->status = 500;
        r->nheaders = 0;
        r->content_type = NULL;
        sb_puts(&r->body, "{\"error\":\"out of memory building the response\"}");
    }
    const sched_job *j = rs->deferred ? rs->deferred->job : NULL;
    bool cancelled = j && j->result == SCHED_CANCELLED;
    uint64_t now = uv_hrtime();
    uint64_t total = now - rs->t_start;
    uint64_t queue = j && j->t_start ? j->t_start - j->t_submit
                     : j          ? (j->t_done ? j->t_done - j->t_submit : 0)
                                  : 0;
    uint64_t compute = j ? j->compute_ns : 0;
    prom_observe_http(r->status);
    if (r->model && r->variant)
        prom_observe_request(&r->variant->slot->metrics, r->status, cancelled, total, queue,
                             compute, r->inputs, r->tokens);
    int level = r->status >= 500 ? LOG_WARN : rs->quiet ? LOG_DEBUG : LOG_INFO;
    if (log_enabled(level)) {
        log_request_fields f = {.id = r->id[0] ? r->id : NULL,
                                .method = rs->method,
                                .path = rs->path,
                                .model = r->model ? r->model->name : NULL,
                                .variant = r->variant ? r->variant->cfg.name : NULL,
                                .error = r->error[0] ? r->error : NULL,
                                .status = cancelled ? 499 : r->status,
                                .inputs = r->inputs,
                                .tokens = r->tokens,
                                .queue_ms = (double)queue * 1e-6,
                                .compute_ms = (double)compute * 1e-6,
                                .total_ms = (double)total * 1e-6};
        log_request(level, &f);
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
    if (r->id[0])
        MHD_add_response_header(resp, "X-Request-Id", r->id);
    bool named = false;
    for (int i = 0; i < r->nheaders; i++) {
        MHD_add_response_header(resp, r->headers[i].name, r->headers[i].value);
        named |= !strcmp(r->headers[i].name, "X-Mantissa-Variant");
    }
    if (r->variant && !named) /* errors after routing name the variant too */
        MHD_add_response_header(resp, "X-Mantissa-Variant", r->variant->cfg.name);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ========================================================================
 * request handling
 * ====================================================================== */

/* The job of a suspended connection has ended: on the loop thread, or on
 * the engine worker that ran it whole (MHD allows resuming from any
 * thread). */
static void job_done(sched_job *j)
{
    MHD_resume_connection(j->owner);
}

/* Hands the handler's job to the scheduler and suspends the connection
 * until it ends. */
static enum MHD_Result defer(http_server *s, struct MHD_Connection *conn, req_state *rs,
                             http_resp *resp)
{
    sched_job *j = resp->deferred->job;
    rs->deferred = resp->deferred;
    j->owner = conn;
    j->on_done = job_done;
    j->on_done_any_thread = true;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    MHD_suspend_connection(conn);
    sched_submit(s->ctx.sched, j);
    sb_free(&resp->body);
    return MHD_YES;
}

static bool is_openai(const char *url)
{
    return strncmp(url, "/v1/", 4) == 0;
}

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
        rs->t_start = uv_hrtime();
        snprintf(rs->method, sizeof rs->method, "%s", method);
        snprintf(rs->path, sizeof rs->path, "%s", url);
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
    http_req req = {.method = method, .path = url, .conn = conn, .t_start = rs->t_start,
                    .body = rs->body.data ? rs->body.data : "", .body_len = rs->body.len,
                    .content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                MHD_HTTP_HEADER_CONTENT_TYPE)};
    bool openai = is_openai(url);

    if (rs->deferred) { /* resumed: the job has ended */
        rs->deferred->respond(&s->ctx, rs->deferred, &resp);
        return send_resp(s, conn, rs, &resp);
    }

    if (rs->too_large || rs->body.oom) {
        api_error(&resp, openai, 413, "max_body_bytes",
                  "request body is larger than max_body_bytes (%zu bytes)", cap);
        return send_resp(s, conn, rs, &resp);
    }
    if (s->ctx.auth && !auth_exempt(url) &&
        !auth_check(s->ctx.auth, http_header(&req, MHD_HTTP_HEADER_AUTHORIZATION))) {
        api_error(&resp, openai, 401, "api_key",
                  "a valid API key is required: send \"Authorization: Bearer KEY\"");
        http_set_header(&resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        return send_resp(s, conn, rs, &resp);
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
        rs->quiet = routes[i].quiet;
        routes[i].handler(&s->ctx, &req, pp, &resp);
        rs->admitted = resp.admitted;
        rs->held = resp.held;
        if (resp.deferred)
            return defer(s, conn, rs, &resp);
        return send_resp(s, conn, rs, &resp);
    }
    if (path_matched) {
        api_error(&resp, openai, 405, "method", "method %s is not allowed on %s (allowed: %s)",
                  method, url, allow);
        http_set_header(&resp, MHD_HTTP_HEADER_ALLOW, "%s", allow);
    } else {
        api_error(&resp, openai, 404, "path", "no endpoint %s %s", method, url);
    }
    return send_resp(s, conn, rs, &resp);
}

/* The connection is done with this request (answered, or gone): drop the
 * job and give back the admission place. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *s = cls;
    req_state *rs = *con_cls;
    if (!rs)
        return;
    const sched_job *j = rs->deferred ? rs->deferred->job : NULL;
    if (j && !rs->answered && j->m && j->v) {
        /* resumed after the client had gone: MHD may close the connection
         * without asking for the answer; it still counts as cancelled */
        uint64_t total = uv_hrtime() - rs->t_start;
        prom_observe_http(499);
        prom_observe_request(&j->v->slot->metrics, 499, true, total, 0, 0, j->n, 0);
        if (log_enabled(LOG_INFO)) {
            log_request_fields f = {.method = rs->method,
                                    .path = rs->path,
                                    .model = j->m->name,
                                    .variant = j->v->cfg.name,
                                    .error = "the client closed the connection",
                                    .status = 499,
                                    .inputs = j->n,
                                    .total_ms = (double)total * 1e-6};
            log_request(LOG_INFO, &f);
        }
    }
    if (rs->deferred)
        sched_job_unref(rs->deferred->job);
    if (rs->admitted)
        sched_release(s->ctx.sched, rs->admitted);
    srv_variant_unref(rs->held);
    sb_free(&rs->body);
    free(rs);
    *con_cls = NULL;
}

/* ========================================================================
 * start and stop
 * ====================================================================== */

static void free_server(http_server *s)
{
    free(s->tls_cert);
    free(s->tls_key);
    free(s);
}

mt_status http_start(const http_ctx *ctx, http_server **out, mt_err *err)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    s->ctx = *ctx;
    s->quiesced_fd = MHD_INVALID_SOCKET;
    const cfg_config *c = ctx->cfg;

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
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
        free_server(s);
        return mt_fail(err, MT_EINVAL, "server.listen: \"%s\" is not an IPv4 or IPv6 address",
                       c->listen_host);
    }
    bool tls = c->tls_cert[0] && c->tls_key[0];
    if (tls) {
        size_t n;
        mt_status st = mt_read_file(c->tls_cert, 1u << 20, &s->tls_cert, &n, err);
        if (st == MT_OK)
            st = mt_read_file(c->tls_key, 1u << 20, &s->tls_key, &n, err);
        if (st != MT_OK) {
            free_server(s);
            return mt_prefix(err, st, "server.tls_cert/tls_key: ");
        }
        flags |= MHD_USE_TLS;
    }

    s->d = MHD_start_daemon(
        flags, (uint16_t)c->listen_port, NULL, NULL, on_request, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)c->http_threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)c->connection_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)c->connection_limit,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, s->tls_cert,
        MHD_OPTION_HTTPS_MEM_KEY, s->tls_key,
        MHD_OPTION_END);
    if (!s->d) {
        free_server(s);
        return mt_fail(err, MT_EIO,
                       tls ? "cannot listen on %s:%d (address in use, or the TLS certificate "
                             "or key is not valid PEM)"
                           : "cannot listen on %s:%d (address in use or not permitted)",
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

void http_quiesce(http_server *s)
{
    if (s && s->quiesced_fd == MHD_INVALID_SOCKET)
        s->quiesced_fd = MHD_quiesce_daemon(s->d);
}

void http_stop(http_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d);
    if (s->quiesced_fd != MHD_INVALID_SOCKET)
        close(s->quiesced_fd);
    free_server(s);
}
