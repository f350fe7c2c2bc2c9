/* otlp.h: OpenTelemetry spans exported over OTLP/HTTP, off the request path.
 *
 * The application builds each request's finished spans into one record
 * (otlp_trace: up to OTLP_SPANS_MAX spans of one trace, their attributes
 * and strings in the record itself, one allocation) and hands it to
 * otlp_submit, which only appends it to a bounded queue under a mutex: a
 * full queue drops the record and counts its spans. The exporter's own
 * thread takes batches off the queue (max_batch_spans spans, or whatever is
 * queued once batch_delay_ms has passed), encodes them as an OTLP
 * ExportTraceServiceRequest in protobuf (otlp_pb.c; Content-Type
 * application/x-protobuf, OTLP/HTTP's default) and POSTs them to the
 * endpoint with libcurl, one connection kept alive. An export that fails
 * (no answer within export_timeout_ms, a status other than 2xx) is dropped
 * and counted, never retried, and logged at most once a minute; requests
 * never wait for it. otlp_stop flushes what is queued, an export under way
 * included, bounded by export_timeout_ms in all (libcurl looks at the bound
 * about once a second while a collector says nothing).
 */
#ifndef MT_SERVER_NET_OTLP_H
#define MT_SERVER_NET_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"
#include "server/base/sbuf.h"
#include "server/net/tracectx.h"

#define OTLP_SPANS_MAX 8
#define OTLP_ATTRS_MAX 40   /* per record, over its spans */
#define OTLP_STRINGS_MAX 3072

/* OTLP's Span.SpanKind and Status.StatusCode values. */
typedef enum { OTLP_KIND_INTERNAL = 1, OTLP_KIND_SERVER = 2 } otlp_kind;
typedef enum { OTLP_STATUS_UNSET = 0, OTLP_STATUS_OK = 1, OTLP_STATUS_ERROR = 2 } otlp_status;

typedef enum { OTLP_STR, OTLP_INT, OTLP_DOUBLE, OTLP_BOOL } otlp_attr_type;

/* A string in a record's arena: its offset and length. */
typedef struct {
    uint16_t off, len;
} otlp_str;

typedef struct {
    const char *key; /* a static string (a semantic-convention name) */
    otlp_attr_type type;
    union {
        otlp_str s;
        int64_t i;
        double d;
        bool b;
    } v;
} otlp_attr;

typedef struct {
    uint8_t span_id[TC_SPAN_ID_LEN];
    uint8_t parent_id[TC_SPAN_ID_LEN];
    bool has_parent, remote_parent; /* remote: the parent is the caller's (traceparent) */
    otlp_str name, status_msg;
    otlp_kind kind;
    otlp_status status;
    uint64_t start_ns, end_ns;      /* Unix time, ns */
    int attr0, nattrs;              /* its attributes: the record's attrs[attr0 ...] */
} otlp_span;

/* One request's finished spans (all of one trace). */
typedef struct otlp_trace {
    struct otlp_trace *next;        /* the queue's */
    uint8_t trace_id[TC_TRACE_ID_LEN];
    otlp_str tracestate;            /* W3C tracestate, passed on; may be empty */
    int nspans, nattrs;
    otlp_span spans[OTLP_SPANS_MAX];
    otlp_attr attrs[OTLP_ATTRS_MAX];
    uint16_t used;                  /* bytes of strings used */
    char strings[OTLP_STRINGS_MAX];
} otlp_trace;

/* ---- building a record (any thread; the record is the caller's until
 * otlp_submit) ---- */

/* A new record for trace_id (tracestate may be NULL); NULL without memory. */
otlp_trace *otlp_trace_new(const uint8_t trace_id[TC_TRACE_ID_LEN], const char *tracestate);
void otlp_trace_free(otlp_trace *t);
/* Adds a span (parent NULL: a root span; remote: the parent is a caller's);
 * the attributes added next are this span's. NULL when the record is full. */
otlp_span *otlp_span_add(otlp_trace *t, const char *name, otlp_kind kind,
                         const uint8_t span_id[TC_SPAN_ID_LEN], const uint8_t *parent,
                         bool remote, uint64_t start_ns, uint64_t end_ns);
/* Attributes of the last span added (key: a static string). A string that
 * no longer fits the record's arena is cut; an attribute past
 * OTLP_ATTRS_MAX is left out. */
void otlp_attr_str(otlp_trace *t, const char *key, const char *v);
void otlp_attr_int(otlp_trace *t, const char *key, int64_t v);
void otlp_attr_double(otlp_trace *t, const char *key, double v);
void otlp_attr_bool(otlp_trace *t, const char *key, bool v);
/* The last span's status: error, with a message (may be NULL). */
void otlp_span_error(otlp_trace *t, const char *msg);

/* ---- the encoding (otlp_pb.c) ---- */

/* What every exported span comes from: the resource's attributes (service
 * name and version, host, process) and the instrumentation scope. */
typedef struct {
    const char *service_name, *service_version, *host_name;
    int64_t pid;
    const char *scope_name, *scope_version;
} otlp_resource;

/* An ExportTraceServiceRequest (protobuf) of the first n records of the
 * list traces (linked by next) under one resource and scope, appended to
 * b. Returns the number of spans written. */
int otlp_encode(sbuf *b, const otlp_resource *r, const otlp_trace *traces, int n);

/* ---- the exporter ---- */

typedef struct otlp_exporter otlp_exporter;

typedef struct {
    const char *endpoint;       /* the full URL the POSTs go to */
    const char *headers;        /* more request headers, "Name: value\n" each; may be NULL */
    otlp_resource resource;
    int max_queue_spans;        /* spans waiting at most; more are dropped */
    int max_batch_spans;        /* spans per export at most */
    int batch_delay_ms;         /* the longest a queued span waits for its export */
    int export_timeout_ms;      /* one export at most; and the flush at otlp_stop */
} otlp_options;

/* Starts the exporter's thread (libcurl initialised first). */
mt_status otlp_start(const otlp_options *o, otlp_exporter **out, mt_err *err);
/* Queues a record (the exporter owns it from here, queued or dropped).
 * False: the queue was full and its spans were dropped. */
bool otlp_submit(otlp_exporter *e, otlp_trace *t);
/* Flushes what is queued (bounded by export_timeout_ms, as above), stops
 * the thread and frees everything. NULL: nothing. */
void otlp_stop(otlp_exporter *e);

typedef struct {
    uint64_t exported;     /* spans the endpoint took (2xx) */
    uint64_t dropped;      /* spans dropped because the queue was full */
    uint64_t failed;       /* spans whose export failed */
    uint64_t exports_ok, exports_failed; /* POSTs */
    long queued;           /* spans waiting now */
} otlp_counts;

void otlp_get_counts(otlp_exporter *e, otlp_counts *out);

#endif
