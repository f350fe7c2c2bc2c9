/* http.h: the HTTP front (libmicrohttpd): requests in, routed to the API
 * handlers (server/api_*.c) through one route table, responses out. */
#ifndef MT_SERVER_HTTP_H
#define MT_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "server/config.h"
#include "server/models.h"
#include "server/sbuf.h"

struct MHD_Connection;

typedef struct {
    const char *method;
    const char *path;       /* without the query string */
    const char *body;       /* NUL-terminated copy; body_len bytes */
    size_t body_len;
    const char *content_type;
    struct MHD_Connection *conn;
} http_req;

#define HTTP_MAX_HEADERS 4

typedef struct {
    int status;
    const char *content_type; /* default application/json */
    sbuf body;
    struct {
        const char *name;
        char value[128];
    } headers[HTTP_MAX_HEADERS];
    int nheaders;
} http_resp;

typedef struct {
    const cfg_config *cfg;
    srv_models *models;
} http_ctx;

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
void http_stop(http_server *s);

#endif
