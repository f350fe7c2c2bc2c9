/* http.h: the HTTP transport, on libmicrohttpd: listening (TLS too),
 * connections and their limits, request bodies under a size cap, API keys,
 * routing a request to a handler by method and path, suspending a
 * connection while its answer is being computed and resuming it, and
 * sending the answer.
 *
 * It knows no endpoint's meaning, no protocol's error shape and no model.
 * The application (server/api) hands it a route table and hooks when it
 * starts it, and the transport calls them:
 *
 *   headers in:   route matched; hooks.begin makes the application's record
 *                 of the request (http_call, opaque here)
 *   body in:      the handler runs (or hooks.error for 401/404/405/413;
 *                 hooks.options for OPTIONS on a path routes have)
 *   handler:      answers in http_resp at once, or defers: the transport
 *                 suspends the connection and calls deferred->start; the
 *                 application calls http_resume when its work is done, and
 *                 deferred->respond then builds the answer
 *   answer:       hooks.sent (the application adds headers, logs, counts),
 *                 then the transport queues it
 *   done:         hooks.done when the connection has finished with the
 *                 request, answered or not: the application releases what
 *                 the request held. The transport never releases
 *                 application state itself.
 *
 * One thread: the transport is driven by the libuv loop it is given
 * (http_options.loop, the scheduler's), and every hook, handler and
 * http_resume runs on that loop's thread, one at a time.
 */
#ifndef MT_SERVER_NET_HTTP_H
#define MT_SERVER_NET_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"
#include "server/base/sbuf.h"
#include "server/net/auth.h"
#include "server/net/conns.h"

struct MHD_Connection;
struct uv_loop_s;

typedef struct http_app http_app;   /* the application: opaque here */
typedef struct http_call http_call; /* the application's record of one request: opaque here */

typedef struct {
    const char *method;
    const char *path;       /* without the query string */
    const char *body;       /* NUL-terminated copy; body_len bytes */
    size_t body_len;
    const char *content_type;
    struct MHD_Connection *conn;
    uint64_t t_start;       /* uv_hrtime() when the headers were in */
    /* Without a connection (fuzzers, tests): the request headers as
     * name, value, name, value, ..., NULL; http_header reads them. */
    const char *const *headers;
} http_req;

#define HTTP_MAX_HEADERS 16

typedef struct http_deferred http_deferred;

typedef struct {
    int status;
    const char *content_type; /* default application/json */
    sbuf body;
    struct {
        const char *name;
        char value[256];
    } headers[HTTP_MAX_HEADERS];
    int nheaders;
    http_call *call;          /* the application's record (hooks.begin) */
    http_deferred *deferred;  /* set by a handler: answer later */
} http_resp;

typedef struct http_server http_server;

/* A deferred answer (the application embeds it in its own state). */
struct http_deferred {
    /* The connection is suspended: start the work. When it is done, call
     * http_resume(d) on the loop thread. fd is the client socket (-1 if
     * unknown), for noticing a hang-up meanwhile. */
    void (*start)(const http_app *app, http_deferred *d, int fd);
    /* After http_resume, on the loop thread: build the answer. */
    void (*respond)(const http_app *app, http_deferred *d, http_resp *resp);
    /* Optional (NULL: none), loop thread: the client went away in a way
     * only the transport sees (a cancelled gRPC call), so the work may stop
     * early; http_resume still follows. */
    void (*cancel)(const http_app *app, http_deferred *d);
    /* the transport's, set when it suspends the request: how http_resume
     * reaches it, and its state (HTTP: the suspended connection) */
    void (*resume)(http_deferred *d);
    void *transport;
    http_server *srv;
    struct MHD_Connection *conn;
    http_deferred *next;
};

typedef void (*http_handler)(const http_app *app, const http_req *req, const char *const *params,
                             http_resp *resp);

enum {
    HTTP_ROUTE_QUIET = 1,   /* probes and scrapes (the application logs them at debug) */
    HTTP_ROUTE_NO_AUTH = 2, /* served without an API key (health probes) */
    HTTP_ROUTE_PROBE = 4,   /* a health probe: served on the connections reserved for
                             * probes when every other one is busy (net/conns.h) */
};

/* One endpoint. "{}" in a pattern matches one path segment, handed to the
 * handler as params[i]. style is the application's (its error shape);
 * the transport only passes the route back to the hooks. */
typedef struct {
    const char *method, *pattern;
    http_handler handler;
    int style;
    unsigned flags;
} http_route;

/* A route found for a method and path (http_route_match). */
#define HTTP_MAX_PARAMS 4
#define HTTP_PARAM_MAX 256
typedef struct {
    const http_route *route;      /* NULL: none matches (404, or 405 when path_matched) */
    char params[HTTP_MAX_PARAMS][HTTP_PARAM_MAX];
    int nparams;
    bool path_matched;            /* some route has the path, with another method */
    char allow[64];               /* those methods ("GET, POST"), for 405's Allow */
} http_match;

/* Finds the route of method + path among routes (HTTP and gRPC route
 * through it alike). */
void http_route_match(const http_route *routes, int n, const char *method, const char *path,
                      http_match *m);

typedef struct {
    /* Headers are in (route NULL: no route matches the path, or the method
     * is not allowed): the application's record of the request, or NULL
     * when it has no memory (the transport then answers 500 itself). */
    http_call *(*begin)(const http_app *app, const http_req *req, const http_route *route);
    /* An error the transport found (401, 404, 405, 413): write the answer
     * into resp in the shape of route's protocol (or the path's, with no
     * route). param names the field or limit at fault, or NULL. */
    void (*error)(const http_app *app, const http_req *req, const http_route *route,
                  http_resp *resp, int status, const char *param, const char *msg);
    /* An OPTIONS request for a path that has routes, none of them for
     * OPTIONS (allow: their methods, "GET, POST"): a CORS preflight, if the
     * application serves CORS. It answers it in resp and returns true (sent
     * as is, without an API key: browsers send none with a preflight), or
     * returns false (the transport answers 405, as for any method the path
     * does not have). NULL: always 405. */
    bool (*options)(const http_app *app, const http_req *req, const char *allow,
                    http_resp *resp);
    /* The answer is final and about to be queued. */
    void (*sent)(const http_app *app, http_call *call, http_resp *resp);
    /* The connection has finished with the request; answered is false
     * when the client went away before its answer was queued. */
    void (*done)(const http_app *app, http_call *call, bool answered);
} http_hooks;

typedef struct {
    const char *host;            /* an IPv4 or IPv6 address */
    int port;                    /* 0: any free port (see http_port) */
    int listen_fd;               /* > 0: the socket http_bind reserved for host:port (the
                                  * transport owns it from http_start); 0: it binds there */
    struct uv_loop_s *loop;      /* the loop that drives the transport (its thread runs
                                  * every hook); http_start is called on that thread */
    size_t max_body_bytes;
    int connection_limit;        /* connections kept open (see net/conns.h) */
    int probe_connections;       /* more, for health probes, when all are busy */
    int max_connections_per_ip;  /* 0: none */
    int connection_timeout_s;
    const char *tls_cert, *tls_key; /* PEM files; both set: HTTPS */
    const auth_keys *auth;       /* NULL: no API keys */
    const http_route *routes;
    int nroutes;
    const http_hooks *hooks;
    const http_app *app;
} http_options;

/* Reserves host:port before anything slow (building the models): a socket
 * bound there, not yet listening (a client that connects meanwhile is
 * refused, as with nothing bound), so that a port in use or an address
 * not this machine's is said at once. http_start listens on it. */
mt_status http_bind(const char *host, int port, int *fd, mt_err *err);
mt_status http_start(const http_options *o, http_server **out, mt_err *err);
/* The port actually bound (useful with port 0). */
int http_port(const http_server *s);

/* The connections: open, busy, and what the limit did (net/conns.h). */
void http_get_conn_stats(http_server *s, conn_stats *out);
/* Stops accepting new connections (the listening socket closes); the
 * connections already open are still served. */
void http_quiesce(http_server *s);
/* Takes the transport off its loop (closes its handles there; the loop
 * must still run for their close callbacks): nothing is served after it. */
void http_detach(http_server *s);
/* Detaches if needed and closes every connection. Every suspended
 * connection must have been resumed and answered before. */
void http_stop(http_server *s);

/* The work of a deferred request is done: its connection (or gRPC call)
 * may answer (loop thread; the answer is built on the loop's next turn). */
void http_resume(http_deferred *d);

/* Adds a response header (names are static strings). */
void http_set_header(http_resp *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A request header, or NULL. */
const char *http_header(const http_req *req, const char *name);

#endif
