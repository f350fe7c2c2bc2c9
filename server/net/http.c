/* http.c: the HTTP transport on libmicrohttpd (see http.h for what it does
 * and what it leaves to the application).
 *
 * Threading: one. MHD runs without threads of its own (external polling,
 * MHD_USE_EPOLL): its epoll descriptor is watched by a uv_poll_t on the
 * libuv loop it is given (the scheduler's), a uv_timer_t follows
 * MHD_get_timeout, and a uv_idle_t runs MHD again on the loop's next turn
 * when a connection has been resumed. So a request goes loop (headers,
 * body, handler: parse, tokenize, submit) -> engine worker (the batch) ->
 * loop (resume, answer), and a client's hang-up while its job waits is
 * seen by the same loop (the scheduler's uv_poll_t on the client socket).
 * A handler that answers at once (health, metadata, metrics) answers from
 * the loop.
 *
 * Suspended connections never time out in MHD, so the application gives
 * each deferred request its own deadline, and watches the client socket
 * (the fd given to deferred->start) for a hang-up. Every suspended
 * connection must be resumed before http_stop.
 *
 * Bodies are read in pieces and the size cap is enforced while reading (and
 * up front from Content-Length), so an oversized body never sits in memory.
 */
#include "server/net/http.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "engine/jsonfile.h"
#include "server/base/log.h"

struct http_server {
    struct MHD_Daemon *d;
    conn_table *conns;
    http_options o;
    int port;
    MHD_socket quiesced_fd;
    char *tls_cert, *tls_key;
    /* on the loop: MHD's epoll fd, its next timeout, a run on the next
     * turn (each malloc'd: freed by its close callback, which may run
     * after http_stop) */
    uv_poll_t *poll;
    uv_timer_t *timer;
    uv_idle_t *idle;
    pthread_t loop_thread;
    bool attached;
    /* MHD_run is on the stack (a handler is running): resumes wait in
     * this list until it returns, for MHD loses a resume of a connection
     * whose suspending callback has not yet returned */
    bool in_run;
    http_deferred *resume_later;
};

/* ========================================================================
 * routes
 * ====================================================================== */

/* Matches path against pattern; captured segments go to params. */
static bool match(const char *pattern, const char *path, char params[][HTTP_PARAM_MAX], int *np)
{
    *np = 0;
    while (*pattern && *path) {
        if (pattern[0] == '{' && pattern[1] == '}') {
            const char *end = strchr(path, '/');
            size_t n = end ? (size_t)(end - path) : strlen(path);
            if (n == 0 || n >= HTTP_PARAM_MAX || *np >= HTTP_MAX_PARAMS)
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

void http_route_match(const http_route *routes, int n, const char *method, const char *path,
                      http_match *m)
{
    int np;
    char params[HTTP_MAX_PARAMS][HTTP_PARAM_MAX];
    memset(m, 0, sizeof *m);
    for (int i = 0; i < n; i++) {
        const http_route *r = &routes[i];
        if (!match(r->pattern, path, params, &np))
            continue;
        m->path_matched = true;
        if (strcmp(r->method, method) != 0) {
            if (!strstr(m->allow, r->method))
                snprintf(m->allow + strlen(m->allow), sizeof m->allow - strlen(m->allow),
                         "%s%s", *m->allow ? ", " : "", r->method);
            continue;
        }
        m->route = r;
        m->nparams = np;
        memcpy(m->params, params, sizeof params);
        return;
    }
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
    http_match m;                 /* the route (m.route NULL: none, 404 or 405) */
    http_call *call;              /* the application's record */
    http_deferred *deferred;      /* a deferred answer is out (or done) */
    bool answered;                /* send_resp ran */
} req_state;

/* Hands the answer to the application's sent hook, then queues it. */
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
    if (rs->call)
        s->o.hooks->sent(s->o.app, rs->call, r);
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
 * driving MHD from the loop
 * ====================================================================== */

static void on_mhd_timer(uv_timer_t *t);
static void on_mhd_idle(uv_idle_t *h);

/* Lets MHD do what is ready (accept, read, call the handlers, write, time
 * out), then arms the loop for what comes next: now (pending work), at
 * MHD's next timeout, or when its epoll fd is readable (always watched). */
static void pump(http_server *s)
{
    s->in_run = true;
    MHD_run(s->d);
    s->in_run = false;
    bool resumed = s->resume_later;
    while (s->resume_later) {
        http_deferred *d = s->resume_later;
        s->resume_later = d->next;
        MHD_resume_connection(d->conn);
    }
    if (!s->attached) /* a handler's work closed the loop (the drain's end) */
        return;
    MHD_UNSIGNED_LONG_LONG ms;
    if (resumed) {
        uv_idle_start(s->idle, on_mhd_idle);
    } else if (MHD_get_timeout(s->d, &ms) != MHD_YES) {
        uv_timer_stop(s->timer);
        uv_idle_stop(s->idle);
    } else if (ms == 0) {
        uv_idle_start(s->idle, on_mhd_idle);
    } else {
        uv_idle_stop(s->idle);
        uv_timer_start(s->timer, on_mhd_timer, (uint64_t)ms, 0);
    }
}

static void on_mhd_poll(uv_poll_t *p, int status, int events)
{
    pump(p->data);
}

static void on_mhd_timer(uv_timer_t *t)
{
    pump(t->data);
}

static void on_mhd_idle(uv_idle_t *h)
{
    pump(h->data);
}

void http_resume(http_deferred *d)
{
    d->resume(d);
}

/* http_resume of a suspended connection. */
static void resume_connection(http_deferred *d)
{
    http_server *s = d->srv;
    assert(pthread_equal(pthread_self(), s->loop_thread));
    if (s->in_run) {
        d->next = s->resume_later;
        s->resume_later = d;
        return; /* pump resumes it, then arms the idle */
    }
    MHD_resume_connection(d->conn);
    /* MHD answers it when it next runs: on the loop's next turn (not from
     * here, which may be inside one of MHD's own callbacks) */
    if (s->attached)
        uv_idle_start(s->idle, on_mhd_idle);
}

/* Suspends the connection and starts the handler's deferred work. */
static enum MHD_Result defer(http_server *s, struct MHD_Connection *conn, req_state *rs,
                             http_resp *resp)
{
    rs->deferred = resp->deferred;
    rs->deferred->resume = resume_connection;
    rs->deferred->srv = s;
    rs->deferred->conn = conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    MHD_suspend_connection(conn);
    rs->deferred->start(s->o.app, rs->deferred, ci ? ci->connect_fd : -1);
    sb_free(&resp->body);
    return MHD_YES;
}

/* An error the transport answers itself, in the application's shape. */
static enum MHD_Result transport_error(http_server *s, struct MHD_Connection *conn,
                                       req_state *rs, const http_req *req, http_resp *resp,
                                       int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static enum MHD_Result transport_error(http_server *s, struct MHD_Connection *conn,
                                       req_state *rs, const http_req *req, http_resp *resp,
                                       int status, const char *param, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->o.hooks->error(s->o.app, req, rs->m.route, resp, status, param, msg);
    return send_resp(s, conn, rs, resp);
}

/* The first call for a request, with its headers: state, route, the
 * application's record, and the Content-Length check. */
static enum MHD_Result request_begins(http_server *s, struct MHD_Connection *conn,
                                      const char *url, const char *method, void **con_cls)
{
    req_state *rs = calloc(1, sizeof *rs);
    if (!rs)
        return MHD_NO;
    *con_cls = rs;
    rs->t_start = uv_hrtime();
    http_route_match(s->o.routes, s->o.nroutes, method, url, &rs->m);
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes)
        rs->too_large = true;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_entry *ce = ci ? ci->socket_context : NULL;
    conns_request(s->conns, ce, true);
    http_req req = {.method = method, .path = url, .conn = conn, .t_start = rs->t_start};
    rs->call = s->o.hooks->begin(s->o.app, &req, rs->m.route);
    if (!rs->call)
        return MHD_YES; /* answered 500 once the body is in */
    http_resp resp = {.status = 200, .call = rs->call};
    sb_init(&resp.body);
    if (conns_reserved(ce) && !(rs->m.route && (rs->m.route->flags & HTTP_ROUTE_PROBE))) {
        http_set_header(&resp, "Connection", "close");
        http_set_header(&resp, "Retry-After", "1");
        return transport_error(s, conn, rs, &req, &resp, 503, "connection_limit",
                               "the server is at its connection limit (%d) with every "
                               "connection busy; retry",
                               s->o.connection_limit);
    }
    /* A client that asked "Expect: 100-continue" waits for our word before
     * it sends the body: an oversized one is refused now, with no 100
     * Continue. Others are already sending: their body is read (and
     * dropped past the cap) so that they can read the 413 at its end. */
    const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (rs->too_large && expect && strcasestr(expect, "100-continue")) {
        http_set_header(&resp, "Connection", "close");
        return transport_error(s, conn, rs, &req, &resp, 413, "max_body_bytes",
                               "request body is larger than max_body_bytes (%zu bytes)",
                               s->o.max_body_bytes);
    }
    return MHD_YES;
}

/* The body is in: check the body cap, the API key and the route, then
 * run the handler (or, resumed, build the deferred answer). */
static enum MHD_Result request_complete(http_server *s, struct MHD_Connection *conn,
                                        req_state *rs, const char *url, const char *method)
{
    http_resp resp = {.status = 200, .call = rs->call};
    sb_init(&resp.body);
    http_req req = {.method = method, .path = url, .conn = conn, .t_start = rs->t_start,
                    .body = rs->body.data ? rs->body.data : "", .body_len = rs->body.len,
                    .content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                MHD_HTTP_HEADER_CONTENT_TYPE)};
    if (rs->deferred) { /* resumed: the work has ended */
        rs->deferred->respond(s->o.app, rs->deferred, &resp);
        return send_resp(s, conn, rs, &resp);
    }
    if (!rs->call) {
        sb_puts(&resp.body, "{\"error\":\"out of memory\"}");
        resp.status = 500;
        return send_resp(s, conn, rs, &resp);
    }
    if (rs->too_large || rs->body.oom)
        return transport_error(s, conn, rs, &req, &resp, 413, "max_body_bytes",
                               "request body is larger than max_body_bytes (%zu bytes)",
                               s->o.max_body_bytes);
    if (!rs->m.route && rs->m.path_matched && !strcmp(method, "OPTIONS") && s->o.hooks->options &&
        s->o.hooks->options(s->o.app, &req, rs->m.allow, &resp))
        return send_resp(s, conn, rs, &resp);
    if (s->o.auth && !(rs->m.route && (rs->m.route->flags & HTTP_ROUTE_NO_AUTH)) &&
        !auth_check(s->o.auth, http_header(&req, MHD_HTTP_HEADER_AUTHORIZATION))) {
        http_set_header(&resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        return transport_error(s, conn, rs, &req, &resp, 401, "api_key",
                               "a valid API key is required: send \"Authorization: Bearer KEY\"");
    }
    if (!rs->m.route && rs->m.path_matched) {
        http_set_header(&resp, MHD_HTTP_HEADER_ALLOW, "%s", rs->m.allow);
        return transport_error(s, conn, rs, &req, &resp, 405, "method",
                               "method %s is not allowed on %s (allowed: %s)", method, url,
                               rs->m.allow);
    }
    if (!rs->m.route)
        return transport_error(s, conn, rs, &req, &resp, 404, "path", "no endpoint %s %s",
                               method, url);
    const char *pp[HTTP_MAX_PARAMS + 1] = {0};
    for (int k = 0; k < rs->m.nparams; k++)
        pp[k] = rs->m.params[k];
    rs->m.route->handler(s->o.app, &req, pp, &resp);
    if (resp.deferred)
        return defer(s, conn, rs, &resp);
    return send_resp(s, conn, rs, &resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    http_server *s = cls;
    req_state *rs = *con_cls;
    if (!rs) /* headers are in; the body (if any) follows */
        return request_begins(s, conn, url, method, con_cls);
    if (*upload_size) {
        if (!rs->too_large && rs->body.len + *upload_size <= s->o.max_body_bytes)
            sb_putn(&rs->body, upload_data, *upload_size);
        else
            rs->too_large = true;
        *upload_size = 0;
        return MHD_YES;
    }
    return request_complete(s, conn, rs, url, method);
}

/* The connection is done with this request (answered, or gone): the
 * application releases what the request held. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *s = cls;
    req_state *rs = *con_cls;
    if (!rs)
        return;
    if (rs->call)
        s->o.hooks->done(s->o.app, rs->call, rs->answered);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conns_request(s->conns, ci ? ci->socket_context : NULL, false);
    sb_free(&rs->body);
    free(rs);
    *con_cls = NULL;
}

/* A connection was accepted, or is closing (before its socket is). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conns_close(s->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ad = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    *socket_context = fd ? conns_open(s->conns, fd->connect_fd, ad ? ad->client_addr : NULL) : NULL;
}

void http_get_conn_stats(http_server *s, conn_stats *out)
{
    conns_get_stats(s->conns, out);
}

/* ========================================================================
 * start and stop
 * ====================================================================== */

static void free_server(http_server *s)
{
    conns_destroy(s->conns);
    free(s->tls_cert);
    free(s->tls_key);
    free(s);
}

/* Open files: the soft limit goes up to the hard one (a default soft limit
 * of 1024 would cap the connections below server.connection_limit), with a
 * warning when even that leaves too few for the connections allowed. */
static void raise_fd_limit(unsigned connections)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)connections + 256)
        log_msg(LOG_WARN,
                "open-file limit %llu is low for %u connections (server.connection_limit and "
                "probe_connections): raise it (ulimit -n) or lower the limit",
                (unsigned long long)rl.rlim_cur, connections);
}

/* The listening address of host:port into ss. */
static mt_status listen_addr(const char *host, int port, struct sockaddr_storage *ss,
                             mt_err *err)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
    } else {
        return mt_fail(err, MT_EINVAL, "server.listen: \"%s\" is not an IPv4 or IPv6 address",
                       host);
    }
    return MT_OK;
}

mt_status http_bind(const char *host, int port, int *fd, mt_err *err)
{
    struct sockaddr_storage ss;
    mt_status st = listen_addr(host, port, &ss, err);
    if (st != MT_OK)
        return st;
    const bool v6 = ss.ss_family == AF_INET6;
    int s = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return mt_fail(err, MT_EIO, "cannot listen on %s:%d: socket: %s", host, port,
                       strerror(errno));
    const int on = 1;
    /* as libmicrohttpd sets up its own: a restart may bind while old
     * connections linger in TIME_WAIT, and IPv6 means IPv6 only */
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (v6)
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (bind(s, (struct sockaddr *)&ss, v6 ? sizeof(struct sockaddr_in6)
                                           : sizeof(struct sockaddr_in)) != 0) {
        const int e = errno;
        close(s);
        return mt_fail(err, MT_EIO, "cannot listen on %s:%d: %s%s", host, port, strerror(e),
                       e == EADDRINUSE ? " (another process has it: stop it, or choose "
                                         "another port with server.listen or --listen)"
                                       : "");
    }
    *fd = s;
    return MT_OK;
}

/* The port the daemon is bound to. */
static int bound_port(struct MHD_Daemon *d, int fallback)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (!info || getsockname(info->listen_fd, (struct sockaddr *)&bound, &bl) != 0)
        return fallback;
    return bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&bound)->sin_port);
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* Puts MHD on the loop: its epoll fd watched, its timer and idle ready. */
static int attach(http_server *s)
{
    const union MHD_DaemonInfo *ep = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
    s->loop_thread = pthread_self();
    s->poll = calloc(1, sizeof *s->poll);
    s->timer = calloc(1, sizeof *s->timer);
    s->idle = calloc(1, sizeof *s->idle);
    if (!ep || !s->poll || !s->timer || !s->idle ||
        uv_poll_init(s->o.loop, s->poll, ep->epoll_fd) != 0) {
        free(s->poll);
        free(s->timer);
        free(s->idle);
        s->poll = NULL;
        s->timer = NULL;
        s->idle = NULL;
        return -1;
    }
    uv_timer_init(s->o.loop, s->timer);
    uv_idle_init(s->o.loop, s->idle);
    s->poll->data = s->timer->data = s->idle->data = s;
    s->attached = true;
    uv_poll_start(s->poll, UV_READABLE, on_mhd_poll);
    pump(s); /* the first timeout */
    return 0;
}

void http_detach(http_server *s)
{
    if (!s || !s->attached)
        return;
    s->attached = false;
    uv_close((uv_handle_t *)s->poll, free_handle);
    uv_close((uv_handle_t *)s->timer, free_handle);
    uv_close((uv_handle_t *)s->idle, free_handle);
}

mt_status http_start(const http_options *o, http_server **out, mt_err *err)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    s->o = *o;
    s->quiesced_fd = MHD_INVALID_SOCKET;
    conn_limits cl = {.limit = o->connection_limit, .reserve = o->probe_connections,
                      .per_ip = o->max_connections_per_ip};
    if (conns_create(&cl, &s->conns, err) != MT_OK) {
        free_server(s);
        return MT_ENOMEM;
    }
    /* libmicrohttpd's own cap: ours, the probes' reserve, and room for the
     * connections we have shut down and it has not closed yet */
    const unsigned mhd_limit =
        (unsigned)o->connection_limit + (unsigned)o->probe_connections + 64 +
        (unsigned)o->connection_limit / 8;
    raise_fd_limit(mhd_limit);
    /* (no MHD_USE_IPv6: MHD takes the family from the socket http_bind made) */
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    int fd = o->listen_fd;
    mt_status st = fd > 0 ? MT_OK : http_bind(o->host, o->port, &fd, err);
    if (st == MT_OK && listen(fd, 1024) != 0)
        st = mt_fail(err, MT_EIO, "cannot listen on %s:%d: %s", o->host, o->port,
                     strerror(errno));
    bool tls = o->tls_cert && o->tls_cert[0] && o->tls_key && o->tls_key[0];
    if (st == MT_OK && tls) {
        size_t n;
        st = mt_read_file(o->tls_cert, 1u << 20, &s->tls_cert, &n, err);
        if (st == MT_OK)
            st = mt_read_file(o->tls_key, 1u << 20, &s->tls_key, &n, err);
        if (st != MT_OK)
            mt_prefix(err, st, "server.tls_cert/tls_key: ");
        flags |= MHD_USE_TLS;
    }
    if (st != MT_OK) {
        if (fd > 0 && fd != o->listen_fd)
            close(fd);
        free_server(s);
        return st;
    }
    MHD_LogCallback mhd_log = log_mhd; /* server/base/log.c: its messages as log lines */
    s->d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first, as MHD asks */
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)o->connection_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, s->tls_cert,
        MHD_OPTION_HTTPS_MEM_KEY, s->tls_key,
        MHD_OPTION_END);
    if (!s->d) {
        free_server(s);
        return mt_fail(err, MT_EIO,
                       tls ? "cannot serve on %s:%d (is the TLS certificate or key valid "
                             "PEM?)"
                           : "cannot serve on %s:%d",
                       o->host, o->port);
    }
    s->port = bound_port(s->d, o->port);
    if (attach(s) != 0) {
        http_stop(s);
        return mt_fail(err, MT_EINTERNAL, "cannot watch the HTTP server on the event loop");
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
    http_detach(s);
    MHD_stop_daemon(s->d);
    if (s->quiesced_fd != MHD_INVALID_SOCKET)
        close(s->quiesced_fd);
    free_server(s);
}
