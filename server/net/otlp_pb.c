/* otlp_pb.c: OTLP trace records (otlp.h) encoded as the protobuf of
 * opentelemetry-proto's ExportTraceServiceRequest, written with the
 * protobuf wire format's few rules (server/base/pbwire.h: varints,
 * fixed64/fixed32, length-delimited strings and bytes), so that the exporter
 * needs no generated code. A nested message is written in place and its length
 * put in front of it afterwards (the bytes moved by the length's size), so
 * every length is the canonical shortest varint.
 *
 *   ExportTraceServiceRequest { ResourceSpans resource_spans = 1 }
 *   ResourceSpans { Resource resource = 1; ScopeSpans scope_spans = 2 }
 *   Resource      { KeyValue attributes = 1 }
 *   ScopeSpans    { InstrumentationScope scope = 1; Span spans = 2 }
 *   InstrumentationScope { string name = 1; string version = 2 }
 *   Span { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3;
 *          bytes parent_span_id = 4; string name = 5; SpanKind kind = 6;
 *          fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
 *          KeyValue attributes = 9; Status status = 15; fixed32 flags = 16 }
 *   Status   { string message = 2; StatusCode code = 3 }
 *   KeyValue { string key = 1; AnyValue value = 2 }
 *   AnyValue { string string_value = 1 | bool bool_value = 2 |
 *              int64 int_value = 3 | double double_value = 4 }
 */
#include <string.h>

#include "server/base/pbwire.h"
#include "server/net/otlp.h"

/* Span.flags: the W3C trace flags in bits 0-7; bit 8 says whether bit 9
 * (the parent is remote) is known. */
#define SPAN_FLAGS_HAS_IS_REMOTE 0x100u
#define SPAN_FLAGS_IS_REMOTE 0x200u

/* Opens a nested message: its tag now, its length when it is closed. */
static size_t open_msg(sbuf *b, unsigned field)
{
    pb_key(b, field, PB_WT_LEN);
    return b->len;
}

/* Closes the message opened at start: its length goes in front of it. */
static void close_msg(sbuf *b, size_t start)
{
    if (b->oom)
        return;
    const size_t n = b->len - start;
    uint8_t buf[10];
    size_t k = 0;
    for (uint64_t v = n;; v >>= 7) {
        buf[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        if (v <= 0x7f)
            break;
    }
    sb_reserve(b, k);
    if (b->oom)
        return;
    memmove(b->data + start + k, b->data + start, n);
    memcpy(b->data + start, buf, k);
    b->len += k;
}

static const char *str_at(const otlp_trace *t, otlp_str s)
{
    return t->strings + s.off;
}

/* A KeyValue whose value is a string. */
static void kv_str(sbuf *b, unsigned field, const char *key, const char *v, size_t n)
{
    size_t kv = open_msg(b, field);
    pb_len(b, 1, key, strlen(key));
    size_t any = open_msg(b, 2);
    pb_len(b, 1, v, n);
    close_msg(b, any);
    close_msg(b, kv);
}

static void kv_int(sbuf *b, unsigned field, const char *key, int64_t v)
{
    size_t kv = open_msg(b, field);
    pb_len(b, 1, key, strlen(key));
    size_t any = open_msg(b, 2);
    pb_key(b, 3, PB_WT_VARINT);
    pb_varint(b, (uint64_t)v); /* int64: two's complement, ten bytes when negative */
    close_msg(b, any);
    close_msg(b, kv);
}

static void attr(sbuf *b, const otlp_trace *t, const otlp_attr *a)
{
    switch (a->type) {
    case OTLP_STR:
        kv_str(b, 9, a->key, str_at(t, a->v.s), a->v.s.len);
        return;
    case OTLP_INT:
        kv_int(b, 9, a->key, a->v.i);
        return;
    case OTLP_DOUBLE:
    case OTLP_BOOL: {
        size_t kv = open_msg(b, 9);
        pb_len(b, 1, a->key, strlen(a->key));
        size_t any = open_msg(b, 2);
        if (a->type == OTLP_BOOL) {
            pb_key(b, 2, PB_WT_VARINT);
            pb_varint(b, a->v.b);
        } else {
            uint64_t bits;
            memcpy(&bits, &a->v.d, 8);
            pb_fixed64(b, 4, bits);
        }
        close_msg(b, any);
        close_msg(b, kv);
        return;
    }
    }
}

static void span(sbuf *b, const otlp_trace *t, const otlp_span *s)
{
    size_t m = open_msg(b, 2);
    pb_len(b, 1, t->trace_id, TC_TRACE_ID_LEN);
    pb_len(b, 2, s->span_id, TC_SPAN_ID_LEN);
    if (t->tracestate.len)
        pb_len(b, 3, str_at(t, t->tracestate), t->tracestate.len);
    if (s->has_parent)
        pb_len(b, 4, s->parent_id, TC_SPAN_ID_LEN);
    pb_len(b, 5, str_at(t, s->name), s->name.len);
    pb_key(b, 6, PB_WT_VARINT);
    pb_varint(b, (uint64_t)s->kind);
    pb_fixed64(b, 7, s->start_ns);
    pb_fixed64(b, 8, s->end_ns);
    for (int i = 0; i < s->nattrs; i++)
        attr(b, t, &t->attrs[s->attr0 + i]);
    if (s->status != OTLP_STATUS_UNSET) {
        size_t st = open_msg(b, 15);
        if (s->status_msg.len)
            pb_len(b, 2, str_at(t, s->status_msg), s->status_msg.len);
        pb_key(b, 3, PB_WT_VARINT);
        pb_varint(b, (uint64_t)s->status);
        close_msg(b, st);
    }
    /* every span exported here was sampled */
    pb_fixed32(b, 16, TC_FLAG_SAMPLED | SPAN_FLAGS_HAS_IS_REMOTE |
                       (s->has_parent && s->remote_parent ? SPAN_FLAGS_IS_REMOTE : 0));
    close_msg(b, m);
}

int otlp_encode(sbuf *b, const otlp_resource *r, const otlp_trace *traces, int n)
{
    int spans = 0;
    size_t rs = open_msg(b, 1);
    size_t res = open_msg(b, 1);
    kv_str(b, 1, "service.name", r->service_name, strlen(r->service_name));
    if (r->service_version)
        kv_str(b, 1, "service.version", r->service_version, strlen(r->service_version));
    if (r->host_name && *r->host_name)
        kv_str(b, 1, "host.name", r->host_name, strlen(r->host_name));
    if (r->pid > 0)
        kv_int(b, 1, "process.pid", r->pid);
    close_msg(b, res);
    size_t ss = open_msg(b, 2);
    size_t scope = open_msg(b, 1);
    pb_len(b, 1, r->scope_name, strlen(r->scope_name));
    if (r->scope_version)
        pb_len(b, 2, r->scope_version, strlen(r->scope_version));
    close_msg(b, scope);
    for (const otlp_trace *t = traces; t && n-- > 0; t = t->next)
        for (int i = 0; i < t->nspans; i++, spans++)
            span(b, t, &t->spans[i]);
    close_msg(b, ss);
    close_msg(b, rs);
    return spans;
}
