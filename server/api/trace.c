/* trace.c: OpenTelemetry tracing of requests (see trace.h): the W3C trace
 * context each request takes or starts, the traceparent of its answer, and
 * its spans, built on the loop thread from the record and the job's times
 * when the connection is done with it, and handed to the exporter's queue
 * (server/net/otlp.c encodes and sends them on its own thread).
 *
 *   POST /v1/embeddings                 SERVER  headers in -> answer written
 *     parse                             headers in -> job submitted (body, JSON, tokens)
 *     queue                             submitted -> its first text dispatched
 *     batch                             dispatched -> job ended on the loop
 *       forward                         the forward of its (last) batch, on the worker
 *     reply                             job ended -> answer written
 *
 * Requests that never reach the scheduler (health, metadata, errors) have
 * the SERVER span alone. Probes and scrapes (quiet routes) start no trace of
 * their own: a sampled traceparent alone has them traced. Attributes follow OpenTelemetry's HTTP semantic
 * conventions (http.request.method, url.path, url.scheme, http.route,
 * http.response.status_code, error.type) and add mantissa.* ones (model,
 * variant, precision, request id, inputs, tokens; on batch its size and
 * tokens). A 5xx answer, or none, is an error.
 */
#include "server/api/trace.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "engine/version.h"
#include "server/api/api.h"
#include "server/base/log.h"

/* Unix time (ns) less uv_hrtime(), taken once at the start. */
static int64_t unix_minus_hr;

static uint64_t unix_ns(uint64_t hr)
{
    return (uint64_t)((int64_t)hr + unix_minus_hr);
}

mt_status api_trace_start(http_app *app, mt_err *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unix_minus_hr = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - (int64_t)uv_hrtime();
    const cfg_tracing *tr = &app->cfg->tracing;
    if (!tr->endpoint[0])
        return MT_OK;
    otlp_options o = {
        .endpoint = tr->endpoint,
        .headers = tr->headers,
        .resource = {.service_name = tr->service_name, .service_version = MANTISSA_VERSION,
                     .pid = (int64_t)uv_os_getpid(), .scope_name = "mantissa",
                     .scope_version = MANTISSA_VERSION},
        .max_queue_spans = tr->max_queue_spans,
        .max_batch_spans = tr->max_batch_spans,
        .batch_delay_ms = tr->batch_delay_ms,
        .export_timeout_ms = tr->export_timeout_ms,
    };
    mt_status st = otlp_start(&o, &app->tracer, err);
    if (st != MT_OK)
        return st;
    log_line l;
    log_begin(&l, LOG_INFO | LOG_ALWAYS, "tracing");
    log_str(&l, "endpoint", tr->endpoint);
    log_num(&l, "sample_ratio", tr->sample_ratio, 4);
    log_str(&l, "service_name", tr->service_name);
    log_words(&l, "tracing: spans of sampled requests (ratio %g, or as a traceparent says) "
                  "exported to %s as %s (OTLP/HTTP, protobuf)",
              tr->sample_ratio, tr->endpoint, tr->service_name);
    log_end(&l);
    return MT_OK;
}

void api_trace_stop(http_app *app)
{
    otlp_stop(app->tracer);
    app->tracer = NULL;
}

void api_trace_begin(const http_app *app, api_trace *t, const http_req *req, bool quiet)
{
    uint8_t flags = 0;
    t->tracestate[0] = 0;
    t->has_parent =
        tc_parse_traceparent(http_header(req, "traceparent"), t->trace_id, t->parent_id, &flags);
    if (t->has_parent) {
        t->sampled = app->tracer && (flags & TC_FLAG_SAMPLED);
        const char *state = http_header(req, "tracestate");
        if (state && tc_tracestate_ok(state))
            strcpy(t->tracestate, state);
    } else {
        tc_new_id(t->trace_id, TC_TRACE_ID_LEN);
        t->sampled = app->tracer && !quiet &&
                     tc_ratio_sampled(t->trace_id, app->cfg->tracing.sample_ratio);
    }
    tc_new_id(t->span_id, TC_SPAN_ID_LEN);
}

void api_trace_sent(api_trace *t, http_resp *r)
{
    char tp[TC_TRACEPARENT_LEN + 1];
    tc_format_traceparent(tp, t->trace_id, t->span_id, t->sampled ? TC_FLAG_SAMPLED : 0);
    http_set_header(r, "traceparent", "%s", tp);
    t->status = r->status;
}

/* A route's pattern as OpenTelemetry's http.route: "/v2/models/{model}/infer"
 * (the first {} is the model, the second its version). */
static void route_name(char *out, size_t cap, const char *pattern)
{
    size_t n = 0;
    int holes = 0;
    for (const char *p = pattern; *p && n + 10 < cap; p++) {
        if (p[0] == '{' && p[1] == '}') {
            n += (size_t)snprintf(out + n, cap - n, "%s", holes++ ? "{version}" : "{model}");
            p++;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = 0;
}

/* The SERVER span of a gRPC call (the transport names it method "GRPC",
 * path "/package.Service/Method"): OpenTelemetry's RPC conventions, its
 * name "package.Service/Method". False when the span could not be added. */
static bool grpc_span(otlp_trace *t, const http_call *c, bool answered, uint64_t end)
{
    const api_trace *tr = &c->trace;
    const char *full = c->path[0] == '/' ? c->path + 1 : c->path, *slash = strchr(full, '/');
    if (!otlp_span_add(t, full, OTLP_KIND_SERVER, tr->span_id,
                       tr->has_parent ? tr->parent_id : NULL, true, unix_ns(c->t_start),
                       unix_ns(end)))
        return false;
    char service[160];
    snprintf(service, sizeof service, "%.*s", slash ? (int)(slash - full) : (int)strlen(full),
             full);
    otlp_attr_str(t, "rpc.system", "grpc");
    otlp_attr_str(t, "rpc.service", service);
    otlp_attr_str(t, "rpc.method", slash ? slash + 1 : full);
    if (answered) {
        grpc_front_status st;
        grpc_front_status_of(tr->status, NULL, &st);
        otlp_attr_int(t, "rpc.grpc.status_code", st.code);
    }
    return true;
}

/* The SERVER span: the request from its headers to its answer written. */
static void server_span(otlp_trace *t, const http_app *app, const http_call *c, bool answered,
                        uint64_t end)
{
    const api_trace *tr = &c->trace;
    char route[160] = "", name[192];
    if (c->route)
        route_name(route, sizeof route, c->route->pattern);
    if (!strcmp(c->method, "GRPC")) {
        if (!grpc_span(t, c, answered, end))
            return;
    } else {
        snprintf(name, sizeof name, "%s%s%s", c->method, route[0] ? " " : "", route);
        if (!otlp_span_add(t, name, OTLP_KIND_SERVER, tr->span_id,
                           tr->has_parent ? tr->parent_id : NULL, true, unix_ns(c->t_start),
                           unix_ns(end)))
            return;
        otlp_attr_str(t, "http.request.method", c->method);
        otlp_attr_str(t, "url.path", c->path);
        otlp_attr_str(t, "url.scheme", app->cfg->tls_cert[0] ? "https" : "http");
        if (route[0])
            otlp_attr_str(t, "http.route", route);
        if (answered)
            otlp_attr_int(t, "http.response.status_code", tr->status);
    }
    if (c->id[0])
        otlp_attr_str(t, "mantissa.request_id", c->id);
    if (c->model)
        otlp_attr_str(t, "mantissa.model", c->model->name);
    if (c->variant) {
        otlp_attr_str(t, "mantissa.variant", c->variant->cfg.name);
        otlp_attr_str(t, "mantissa.precision", mt_precision_name(c->variant->cfg.precision));
    }
    if (c->inputs) {
        otlp_attr_int(t, "mantissa.inputs", c->inputs);
        otlp_attr_int(t, "mantissa.tokens", c->tokens);
    }
    if (!answered || tr->status >= 500) {
        char type[16];
        snprintf(type, sizeof type, "%d", tr->status);
        otlp_attr_str(t, "error.type", answered ? type : "cancelled");
        otlp_span_error(t, c->error[0] ? c->error
                                       : answered ? "server error" : "no answer was sent");
    }
}

/* A child span of parent over [a, b] (uv_hrtime); none when either time is
 * unknown or they are out of order. Its id into id. */
static bool child(otlp_trace *t, const char *name, const uint8_t *parent, uint64_t a, uint64_t b,
                  uint8_t id[TC_SPAN_ID_LEN])
{
    if (!a || !b || b < a)
        return false;
    tc_new_id(id, TC_SPAN_ID_LEN);
    return otlp_span_add(t, name, OTLP_KIND_INTERNAL, id, parent, false, unix_ns(a),
                         unix_ns(b)) != NULL;
}

/* The hops of the request's job, from the times the scheduler recorded. */
static void job_spans(otlp_trace *t, const http_call *c, uint64_t end)
{
    const sched_job *j = c->job;
    const uint8_t *server = c->trace.span_id;
    uint8_t id[TC_SPAN_ID_LEN], batch[TC_SPAN_ID_LEN];
    child(t, "parse", server, c->t_start, j->t_submit, id);
    child(t, "queue", server, j->t_submit, j->t_start ? j->t_start : j->t_done, id);
    if (child(t, "batch", server, j->t_start, j->t_done, batch)) {
        otlp_attr_int(t, "mantissa.batch.size", j->run_texts);
        otlp_attr_int(t, "mantissa.batch.tokens", j->run_tokens);
        otlp_attr_int(t, "mantissa.batches", j->batches);
        child(t, "forward", batch, j->t_run, j->t_ran, id);
    }
    child(t, "reply", server, j->t_done, end, id);
}

void api_trace_done(const http_app *app, const http_call *c, bool answered)
{
    if (!c->trace.sampled || !app->tracer)
        return;
    const uint64_t end = uv_hrtime();
    otlp_trace *t = otlp_trace_new(c->trace.trace_id, c->trace.tracestate);
    if (!t)
        return;
    server_span(t, app, c, answered, end);
    if (c->job && c->job->t_submit)
        job_spans(t, c, end);
    otlp_submit(app->tracer, t);
}

/* One counter or gauge line with its HELP and TYPE. */
static void metric(sbuf *b, const char *name, const char *type, const char *help,
                   unsigned long long v)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

void api_trace_render(sbuf *b, const http_app *app)
{
    otlp_counts n = {0};
    if (app->tracer)
        otlp_get_counts(app->tracer, &n);
    metric(b, "mantissa_trace_spans_exported_total", "counter",
           "Spans the OTLP endpoint accepted (server.tracing).", n.exported);
    metric(b, "mantissa_trace_spans_dropped_total", "counter",
           "Spans dropped because the export queue was full (server.tracing.max_queue_spans).",
           n.dropped);
    metric(b, "mantissa_trace_spans_failed_total", "counter",
           "Spans whose export failed (no answer in time, or not 2xx), or that were still "
           "queued when the shutdown's flush ran out of time.",
           n.failed);
    sb_puts(b, "# HELP mantissa_trace_exports_total OTLP export requests, by result.\n"
               "# TYPE mantissa_trace_exports_total counter\n");
    sb_printf(b, "mantissa_trace_exports_total{result=\"ok\"} %llu\n",
              (unsigned long long)n.exports_ok);
    sb_printf(b, "mantissa_trace_exports_total{result=\"failed\"} %llu\n",
              (unsigned long long)n.exports_failed);
    metric(b, "mantissa_trace_queue_spans", "gauge", "Spans waiting for their export now.",
           (unsigned long long)n.queued);
}
