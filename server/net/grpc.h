/* grpc.h: the gRPC transport, on gRPC's C core: listening (TLS too), calls,
 * their metadata and deadlines, message size caps, API keys, and sending
 * a message or a status back.
 *
 * It serves the application's REST routes over gRPC: each gRPC method of
 * the application's table turns its request message into the REST request
 * it stands for (method, path, JSON body, headers); the transport routes
 * that through the same route table, hooks and handlers as HTTP (so limits,
 * admission, scheduling, logging and counting are the same), and the
 * method turns the REST answer into its response message or a status.
 * It knows no message's meaning and no endpoint's.
 *
 * Threads: gRPC's own threads do the network; one thread of ours waits on
 * the completion queue and hands each event to the libuv loop
 * (grpc_front_options.loop, the scheduler's), where everything else runs:
 * every method, hook and handler, and http_resume of a deferred answer,
 * as with HTTP.
 */
#ifndef MT_SERVER_NET_GRPC_H
#define MT_SERVER_NET_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"
#include "server/base/sbuf.h"
#include "server/net/auth.h"
#include "server/net/http.h"

struct uv_loop_s;

/* gRPC status codes (the protocol's numbers). */
enum {
    GRPC_FRONT_OK = 0,
    GRPC_FRONT_CANCELLED = 1,
    GRPC_FRONT_INVALID_ARGUMENT = 3,
    GRPC_FRONT_DEADLINE_EXCEEDED = 4,
    GRPC_FRONT_NOT_FOUND = 5,
    GRPC_FRONT_PERMISSION_DENIED = 7,
    GRPC_FRONT_RESOURCE_EXHAUSTED = 8,
    GRPC_FRONT_FAILED_PRECONDITION = 9,
    GRPC_FRONT_UNIMPLEMENTED = 12,
    GRPC_FRONT_INTERNAL = 13,
    GRPC_FRONT_UNAVAILABLE = 14,
    GRPC_FRONT_UNAUTHENTICATED = 16,
};

/* A call's outcome when it is not a message: its status and message. */
typedef struct {
    int code;
    char msg[512];
} grpc_front_status;

#define GRPC_FRONT_MAX_HEADERS 24

/* The REST request a gRPC message stands for, filled by a method's
 * request function. */
typedef struct {
    char method[8];          /* "GET", "POST" */
    char path[320];
    sbuf body;               /* the transport frees it */
    const char *content_type;
    /* more request headers (name, value), after the call's metadata */
    const char *header_names[4];
    char header_values[4][64];
    int nheaders;
    void *state;             /* the method's, for its reply (freed by free_state) */
    void (*free_state)(void *state);
    uint64_t deadline_us;    /* from the call: microseconds left, 0 if none */
} grpc_front_rest;

/* One gRPC method of the application. */
typedef struct {
    const char *path; /* "/inference.GRPCInferenceService/ModelInfer" */
    /* The request message (len bytes) -> the REST request. False: answer
     * *st instead (a message that does not parse, say). */
    bool (*request)(const http_app *app, const uint8_t *msg, size_t len, grpc_front_rest *rest,
                    grpc_front_status *st);
    /* The REST answer -> the response message in out, or false and *st. */
    bool (*reply)(const http_app *app, const grpc_front_rest *rest, const http_resp *resp,
                  sbuf *out, grpc_front_status *st);
} grpc_front_method;

typedef struct {
    const char *host;            /* an IPv4 or IPv6 address */
    int port;                    /* 0: any free port (see grpc_front_port) */
    struct uv_loop_s *loop;      /* the loop that runs the application; grpc_front_start
                                  * is called on its thread */
    size_t max_message_bytes;    /* the cap on a request message */
    int max_streams;             /* concurrent calls on one connection */
    const char *tls_cert, *tls_key; /* PEM files; both set: TLS */
    const auth_keys *auth;       /* NULL: no API keys ("authorization: Bearer KEY") */
    const http_route *routes;
    int nroutes;
    const http_hooks *hooks;
    const http_app *app;
    const grpc_front_method *methods; /* the first is the most called (more of its
                                       * calls are asked for ahead) */
    int nmethods;
} grpc_front_options;

typedef struct grpc_front grpc_front;

/* Whether this build has gRPC (else grpc_front_bind says so). */
bool grpc_front_available(void);
/* Makes the server and binds host:port (before anything slow, so that a
 * port in use is said at once); nothing is served before grpc_front_start. */
mt_status grpc_front_bind(const grpc_front_options *o, grpc_front **out, mt_err *err);
/* Starts serving, on o->loop (the options given to bind, whose pointers
 * must outlive the server; the loop, routes and app may be set now). */
mt_status grpc_front_start(grpc_front *g, const grpc_front_options *o, mt_err *err);
int grpc_front_port(const grpc_front *g);
/* Stops taking new calls; the calls in progress are answered. */
void grpc_front_quiesce(grpc_front *g);
/* Takes the transport off its loop (calls still open are cancelled). */
void grpc_front_detach(grpc_front *g);
/* Detaches if needed and frees everything (NULL: nothing). */
void grpc_front_stop(grpc_front *g);

/* The gRPC status of a REST answer that is not a 200: its code from the
 * HTTP status, msg the message given. */
void grpc_front_status_of(int http_status, const char *msg, grpc_front_status *st);

#endif
