/* http.h: the HTTP front (libmicrohttpd): requests in, routed to the API
 * handlers (server/api_*.c) through one route table, responses out.
 *
 * A handler either answers at once (fills http_resp) or defers: it admits
 * the request with the scheduler, tokenizes, and hands back a job
 * (http_resp.deferred). The front then suspends the connection, submits
 * the job, and when the scheduler has finished it, resumes the connection
 * and calls the deferred's respond() to build the answer. */
#ifndef MT_SERVER_HTTP_H
#define MT_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/core/config.h"
#include "server/core/models.h"
#include "server/base/sbuf.h"
#include "server/core/sched.h"

struct MHD_Connection;

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

#define HTTP_MAX_HEADERS 10

typedef struct http_deferred http_deferred;
typedef struct http_ctx http_ctx;

typedef struct {
    int status;
    const char *content_type; /* default application/json */
    sbuf body;
    struct {
        const char *name;
        char value[256];
    } headers[HTTP_MAX_HEADERS];
    int nheaders;
    /* for the request log and the metrics */
    srv_model *model;         /* the model the request named, once resolved */
    srv_variant *variant;     /* the build it was routed to (alive while held or called) */
    srv_variant *held;        /* a reference to variant the front drops when the
                               * connection is done with the request */
    srv_model *admitted;      /* set when sched_admit took a place (released by the front) */
    char id[128];             /* the request id (KServe "id", X-Request-Id or generated) */
    char error[256];          /* the error message, for the log */
    int inputs;
    long tokens;
    bool quiet;               /* health and metrics: logged at debug level */
    http_deferred *deferred;  /* set: answer later (see above) */
} http_resp;

/* A deferred answer: the handler's state around a scheduler job. The
 * front owns one reference to job until the connection is done. */
struct http_deferred {
    sched_job *job;
    /* Builds the answer into resp once the job has ended (HTTP thread). */
    void (*respond)(const http_ctx *ctx, http_deferred *d, http_resp *resp);
};

typedef struct auth_keys auth_keys;

struct http_ctx {
    const cfg_config *cfg;
    srv_models *models;
    sched *sched;
    const auth_keys *auth; /* NULL: no authentication */
    struct reloader *reload; /* NULL: no hot-switch (tools, fuzzers) */
};

typedef void (*http_handler)(const http_ctx *ctx, const http_req *req, const char *const *params,
                             http_resp *resp);

/* Adds a response header (names are static strings). */
void http_set_header(http_resp *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A request header, or NULL. */
const char *http_header(const http_req *req, const char *name);

typedef struct http_server http_server;
mt_status http_start(const http_ctx *ctx, http_server **out, mt_err *err);
/* The port actually bound (useful with port 0). */
int http_port(const http_server *s);
/* Stops accepting new connections (the listening socket closes); the
 * connections already open are still served. */
void http_quiesce(http_server *s);
void http_stop(http_server *s);

#endif
