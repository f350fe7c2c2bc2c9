/* trace.h: a request's trace (server/api/trace.c): its W3C trace context,
 * taken from the caller's traceparent or started here, the traceparent of
 * its answer, its id in the log line, and, when it is sampled and
 * server.tracing names an endpoint, its spans (the request's SERVER span
 * and the parse, queue, batch, forward and reply spans made from its job's
 * times) handed to the OTLP exporter (server/net/otlp.h) when the
 * connection is done with it.
 */
#ifndef MT_SERVER_API_TRACE_H
#define MT_SERVER_API_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/status.h"
#include "server/base/sbuf.h"
#include "server/net/http.h"
#include "server/net/tracectx.h"

/* The trace part of a request's record (http_call.trace). */
typedef struct {
    uint8_t trace_id[TC_TRACE_ID_LEN];
    uint8_t span_id[TC_SPAN_ID_LEN];   /* the request's server span */
    uint8_t parent_id[TC_SPAN_ID_LEN]; /* the caller's span (has_parent) */
    bool has_parent;                   /* a valid traceparent came with the request */
    bool sampled;                      /* its spans are exported */
    int status;                        /* the answer's status (sent hook) */
    char tracestate[TC_TRACESTATE_MAX + 1]; /* the caller's, when well formed */
} api_trace;

/* Starts the exporter when server.tracing names an endpoint (app->tracer),
 * and takes the offset from uv_hrtime() to Unix time that spans are
 * stamped with. */
mt_status api_trace_start(http_app *app, mt_err *err);
/* Flushes and stops the exporter (bounded by export_timeout_ms). */
void api_trace_stop(http_app *app);

/* Begin hook: the request's trace context. A valid traceparent continues
 * the caller's trace (sampled as its flag says); else a new trace, sampled
 * at server.tracing.sample_ratio, but for quiet routes (probes, scrapes:
 * HTTP_ROUTE_QUIET), which a traceparent alone has traced. Nothing is
 * sampled without an exporter. */
void api_trace_begin(const http_app *app, api_trace *t, const http_req *req, bool quiet);
/* Sent hook: the answer's traceparent header (the server span, flag 01
 * when its spans are exported) and its status. */
void api_trace_sent(api_trace *t, http_resp *r);
/* Done hook: the request's spans to the exporter, when sampled. */
void api_trace_done(const http_app *app, const http_call *c, bool answered);

/* The exporter's counters in Prometheus text (GET /metrics). */
void api_trace_render(sbuf *b, const http_app *app);

#endif
