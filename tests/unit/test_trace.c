/* test_trace.c: OpenTelemetry tracing's pure parts and its queue.
 *
 * - W3C traceparent read strictly (server/net/tracectx.c): the
 *   specification's example, then each way a header is invalid (length,
 *   separators, upper-case or non-hex digits, version ff, all-zero ids), a
 *   later version with more fields; written back; tracestate kept or not.
 * - New ids are never zero and do not repeat; the ratio sampler keeps
 *   every trace at 1, none at 0, and about the ratio's share of random ids.
 * - The OTLP protobuf (server/net/otlp_pb.c) decoded back by a wire-format
 *   reader written here from the protobuf encoding rules: every field of
 *   the request, resource, scope, spans, attributes (string, int with a
 *   negative value, double, bool), status and flags, with lengths over 127
 *   (two-byte varints) where a message is moved to make room for its
 *   length; and what a full record does with more spans and strings.
 * - The exporter (server/net/otlp.c): a full queue drops and counts what
 *   does not fit, and stopping with a collector that never answers is
 *   bounded by export_timeout_ms.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/net/otlp.h"
#include "server/net/tracectx.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define PID "00f067aa0ba902b7"

static bool parse(const char *h, uint8_t *flags)
{
    uint8_t tid[16], pid[8];
    return tc_parse_traceparent(h, tid, pid, flags);
}

START_TEST(traceparent_reads_the_specifications_example)
{
    uint8_t tid[16], pid[8], flags = 0;
    ck_assert(tc_parse_traceparent("00-" TID "-" PID "-01", tid, pid, &flags));
    ck_assert_uint_eq(flags, 1);
    char hex[33];
    tc_hex(hex, tid, 16);
    ck_assert_str_eq(hex, TID);
    tc_hex(hex, pid, 8);
    ck_assert_str_eq(hex, PID);
    ck_assert(parse("00-" TID "-" PID "-00", &flags));
    ck_assert_uint_eq(flags, 0);
    /* written back the same */
    char out[TC_TRACEPARENT_LEN + 1];
    tc_format_traceparent(out, tid, pid, 1);
    ck_assert_str_eq(out, "00-" TID "-" PID "-01");
}
END_TEST

START_TEST(traceparent_refuses_every_malformed_header)
{
    static const char *const bad[] = {
        NULL,
        "",
        "00-" TID "-" PID "-0",                         /* short */
        "00-" TID "-" PID "-011",                       /* version 00 is exactly 55 */
        "00-" TID "-" PID "-01-",                       /* even with a dash */
        "00_" TID "-" PID "-01",                        /* separators */
        "00-" TID "_" PID "-01",
        "00-" TID "-" PID "_01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-" PID "-01", /* upper case */
        "00-" TID "-00F067AA0BA902B7-01",
        "00-" TID "-" PID "-0A",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-" PID "-01", /* not hex */
        "ff-" TID "-" PID "-01",                         /* version ff */
        "0g-" TID "-" PID "-01",
        "00-00000000000000000000000000000000-" PID "-01", /* zero trace id */
        "00-" TID "-0000000000000000-01",                 /* zero parent id */
        " 00-" TID "-" PID "-01",
        "01-" TID "-" PID "-01x",                        /* a later version: '-' must follow */
    };
    uint8_t flags;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!parse(bad[i], &flags), "accepted [%s]", bad[i] ? bad[i] : "(null)");
}
END_TEST

START_TEST(traceparent_of_a_later_version_reads_its_first_fields)
{
    uint8_t flags = 0;
    ck_assert(parse("01-" TID "-" PID "-01", &flags));
    ck_assert(parse("cc-" TID "-" PID "-03-what-the-future-adds", &flags));
    ck_assert_uint_eq(flags, 3);
}
END_TEST

START_TEST(tracestate_kept_only_when_well_formed)
{
    ck_assert(tc_tracestate_ok("rojo=00f067aa0ba902b7"));
    ck_assert(tc_tracestate_ok("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
    ck_assert(tc_tracestate_ok("a=1 , ,b@tenant=2\t"));
    ck_assert(!tc_tracestate_ok(""));
    ck_assert(!tc_tracestate_ok(NULL));
    ck_assert(!tc_tracestate_ok("novalue"));
    ck_assert(!tc_tracestate_ok("Upper=1"));
    ck_assert(!tc_tracestate_ok("a=b=c"));
    ck_assert(!tc_tracestate_ok("a=1\n"));
    char big[600];
    memset(big, 'a', sizeof big - 1);
    big[0] = 'k';
    big[1] = '=';
    big[sizeof big - 1] = 0;
    ck_assert(!tc_tracestate_ok(big)); /* over 512 */
    char many[400] = "";
    for (int i = 0; i < 33; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sk%d=v", i ? "," : "", i);
    ck_assert(!tc_tracestate_ok(many)); /* 33 members */
}
END_TEST

START_TEST(new_ids_are_non_zero_and_distinct)
{
    enum { N = 2000 };
    static uint8_t ids[N][8];
    for (int i = 0; i < N; i++) {
        tc_new_id(ids[i], 8);
        uint64_t v;
        memcpy(&v, ids[i], 8);
        ck_assert(v != 0);
        for (int k = 0; k < i; k++)
            ck_assert(memcmp(ids[i], ids[k], 8) != 0);
    }
}
END_TEST

START_TEST(ratio_sampler_keeps_its_share)
{
    uint8_t tid[16];
    int kept = 0, n = 20000;
    for (int i = 0; i < n; i++) {
        tc_new_id(tid, 16);
        ck_assert(tc_ratio_sampled(tid, 1.0));
        ck_assert(!tc_ratio_sampled(tid, 0.0));
        kept += tc_ratio_sampled(tid, 0.25);
    }
    ck_assert_msg(kept > n * 0.23 && kept < n * 0.27, "kept %d of %d at 0.25", kept, n);
    /* the last 8 bytes decide, as the OpenTelemetry SDKs' sampler does */
    memset(tid, 0xff, 8);
    memset(tid + 8, 0, 8);
    tid[15] = 1;
    ck_assert(tc_ratio_sampled(tid, 1e-9));
    memset(tid + 8, 0xff, 8);
    ck_assert(!tc_ratio_sampled(tid, 0.999));
}
END_TEST

/* ---- a protobuf wire-format reader, for the encoder's output ---------- */

typedef struct {
    const uint8_t *p, *end;
} rd;

static uint64_t rd_varint(rd *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        ck_assert_msg(r->p < r->end, "varint runs past the end");
        const uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    ck_abort_msg("varint longer than 10 bytes");
    return 0;
}

/* One field: its number, wire type, and value (varint, fixed) or bytes. */
typedef struct {
    unsigned field, wt;
    uint64_t v;
    rd sub;
} fld;

static bool rd_next(rd *r, fld *f)
{
    if (r->p == r->end)
        return false;
    const uint64_t tag = rd_varint(r);
    f->field = (unsigned)(tag >> 3);
    f->wt = (unsigned)(tag & 7);
    switch (f->wt) {
    case 0: f->v = rd_varint(r); break;
    case 1:
    case 5: {
        const int n = f->wt == 1 ? 8 : 4;
        ck_assert(r->end - r->p >= n);
        f->v = 0;
        for (int i = n - 1; i >= 0; i--)
            f->v = f->v << 8 | r->p[i];
        r->p += n;
        break;
    }
    case 2: {
        const uint64_t n = rd_varint(r);
        ck_assert_msg((uint64_t)(r->end - r->p) >= n, "length %llu past the end",
                      (unsigned long long)n);
        f->sub = (rd){r->p, r->p + n};
        r->p += n;
        break;
    }
    default: ck_abort_msg("wire type %u", f->wt);
    }
    return true;
}

/* The only field `field` of message m (asserted to be there once). */
static fld one(rd m, unsigned field)
{
    fld f, got = {0};
    int n = 0;
    while (rd_next(&m, &f))
        if (f.field == field) {
            got = f;
            n++;
        }
    ck_assert_msg(n == 1, "field %u appears %d times", field, n);
    return got;
}

static bool bytes_are(fld f, const void *p, size_t n)
{
    return f.wt == 2 && (size_t)(f.sub.end - f.sub.p) == n && !memcmp(f.sub.p, p, n);
}

/* The AnyValue of attribute key among message m's KeyValues (field kvf). */
static fld attr_value(rd m, unsigned kvf, const char *key)
{
    fld f;
    while (rd_next(&m, &f))
        if (f.field == kvf && bytes_are(one(f.sub, 1), key, strlen(key)))
            return one(f.sub, 2);
    ck_abort_msg("no attribute %s", key);
    return f;
}

static void fill(uint8_t *p, size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v + i);
}

START_TEST(encoder_writes_an_export_request_a_reader_gets_back)
{
    uint8_t tid[16], sid[8], parent[8], kid[8];
    fill(tid, 16, 0x10);
    fill(sid, 8, 0x40);
    fill(parent, 8, 0x60);
    fill(kid, 8, 0x80);
    char path[301];
    memset(path, 'p', 300); /* a string over 127 bytes: two-byte lengths */
    path[0] = '/';
    path[300] = 0;
    otlp_trace *t = otlp_trace_new(tid, "rojo=1");
    ck_assert_ptr_nonnull(otlp_span_add(t, "POST /v1/embeddings", OTLP_KIND_SERVER, sid, parent,
                                        true, 1000, 5000));
    otlp_attr_str(t, "url.path", path);
    otlp_attr_int(t, "http.response.status_code", 503);
    otlp_attr_int(t, "neg", -5);
    otlp_attr_double(t, "ratio", 0.25);
    otlp_attr_bool(t, "flag", true);
    otlp_span_error(t, "engine failed");
    ck_assert_ptr_nonnull(
        otlp_span_add(t, "batch", OTLP_KIND_INTERNAL, kid, sid, false, 2000, 1500));
    otlp_attr_int(t, "mantissa.batch.size", 3);
    const otlp_resource res = {.service_name = "svc", .service_version = "1.2",
                               .host_name = "h", .pid = 42, .scope_name = "mantissa",
                               .scope_version = "1.2"};
    sbuf b;
    sb_init(&b);
    ck_assert_int_eq(otlp_encode(&b, &res, t, 1), 2);
    ck_assert(!b.oom);
    rd all = {(const uint8_t *)b.data, (const uint8_t *)b.data + b.len};
    fld rs = one(all, 1); /* ResourceSpans */
    rd resource = one(rs.sub, 1).sub;
    ck_assert(bytes_are(one(attr_value(resource, 1, "service.name").sub, 1), "svc", 3));
    ck_assert(bytes_are(one(attr_value(resource, 1, "service.version").sub, 1), "1.2", 3));
    ck_assert(bytes_are(one(attr_value(resource, 1, "host.name").sub, 1), "h", 1));
    ck_assert_uint_eq(one(attr_value(resource, 1, "process.pid").sub, 3).v, 42);
    rd ss = one(rs.sub, 2).sub; /* ScopeSpans */
    ck_assert(bytes_are(one(one(ss, 1).sub, 1), "mantissa", 8));
    ck_assert(bytes_are(one(one(ss, 1).sub, 2), "1.2", 3));
    fld spans[3];
    int n = 0;
    for (fld f; rd_next(&ss, &f);)
        if (f.field == 2) {
            ck_assert_int_lt(n, 2);
            spans[n++] = f;
        }
    ck_assert_int_eq(n, 2);
    rd s = spans[0].sub;
    ck_assert(bytes_are(one(s, 1), tid, 16));
    ck_assert(bytes_are(one(s, 2), sid, 8));
    ck_assert(bytes_are(one(s, 3), "rojo=1", 6));
    ck_assert(bytes_are(one(s, 4), parent, 8));
    ck_assert(bytes_are(one(s, 5), "POST /v1/embeddings", 19));
    ck_assert_uint_eq(one(s, 6).v, 2); /* SPAN_KIND_SERVER */
    ck_assert_uint_eq(one(s, 7).wt, 1);
    ck_assert_uint_eq(one(s, 7).v, 1000);
    ck_assert_uint_eq(one(s, 8).v, 5000);
    ck_assert_uint_eq(one(s, 16).wt, 5);
    ck_assert_uint_eq(one(s, 16).v, 0x301); /* sampled, remote parent known and true */
    ck_assert(bytes_are(one(attr_value(s, 9, "url.path").sub, 1), path, 300));
    ck_assert_uint_eq(one(attr_value(s, 9, "http.response.status_code").sub, 3).v, 503);
    ck_assert_int_eq((int64_t)one(attr_value(s, 9, "neg").sub, 3).v, -5);
    const uint64_t bits = one(attr_value(s, 9, "ratio").sub, 4).v;
    double d;
    memcpy(&d, &bits, 8);
    ck_assert_double_eq(d, 0.25);
    ck_assert_uint_eq(one(attr_value(s, 9, "flag").sub, 2).v, 1);
    rd status = one(s, 15).sub;
    ck_assert_uint_eq(one(status, 3).v, 2); /* STATUS_CODE_ERROR */
    ck_assert(bytes_are(one(status, 2), "engine failed", 13));
    rd k = spans[1].sub;
    ck_assert(bytes_are(one(k, 4), sid, 8));
    ck_assert_uint_eq(one(k, 6).v, 1); /* SPAN_KIND_INTERNAL */
    ck_assert_uint_eq(one(k, 8).v, 2000); /* an end before the start is the start */
    ck_assert_uint_eq(one(k, 16).v, 0x101);
    ck_assert_uint_eq(one(attr_value(k, 9, "mantissa.batch.size").sub, 3).v, 3);
    fld f;
    for (rd m = k; rd_next(&m, &f);)
        ck_assert_uint_ne(f.field, 15); /* unset status: no Status message */
    sb_free(&b);
    otlp_trace_free(t);
}
END_TEST

START_TEST(record_has_room_for_its_spans_and_cuts_long_strings)
{
    uint8_t tid[16], id[8];
    fill(tid, 16, 1);
    fill(id, 8, 1);
    otlp_trace *t = otlp_trace_new(tid, NULL);
    for (int i = 0; i < OTLP_SPANS_MAX; i++)
        ck_assert_ptr_nonnull(otlp_span_add(t, "s", OTLP_KIND_INTERNAL, id, NULL, false, 1, 2));
    ck_assert_ptr_null(otlp_span_add(t, "s", OTLP_KIND_INTERNAL, id, NULL, false, 1, 2));
    char big[OTLP_STRINGS_MAX + 100];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    otlp_attr_str(t, "big", big);
    ck_assert_uint_le(t->used, OTLP_STRINGS_MAX);
    for (int i = 0; i < OTLP_ATTRS_MAX + 5; i++)
        otlp_attr_int(t, "n", i);
    ck_assert_int_eq(t->nattrs, OTLP_ATTRS_MAX);
    sbuf b;
    sb_init(&b);
    ck_assert_int_eq(otlp_encode(&b, &(otlp_resource){.service_name = "s", .scope_name = "m"},
                                 t, 1),
                     OTLP_SPANS_MAX);
    sb_free(&b);
    otlp_trace_free(t);
}
END_TEST

/* A loopback port with a socket listening that never accepts: a
 * collector that takes the connection and never answers. */
static int silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

START_TEST(full_queue_drops_and_counts_and_stop_is_bounded)
{
    int port;
    int fd = silent_listener(&port);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/traces", port);
    otlp_options o = {.endpoint = url,
                      .headers = "X-Token: abc\n",
                      .resource = {.service_name = "t", .scope_name = "t"},
                      .max_queue_spans = 16,
                      .max_batch_spans = 64,
                      .batch_delay_ms = 60000, /* nothing leaves before the stop */
                      .export_timeout_ms = 300};
    otlp_exporter *e;
    mt_err err;
    ck_assert_int_eq(otlp_start(&o, &e, &err), MT_OK);
    uint8_t tid[16], id[8];
    fill(tid, 16, 1);
    fill(id, 8, 1);
    int accepted = 0;
    for (int i = 0; i < 5; i++) {
        otlp_trace *t = otlp_trace_new(tid, NULL);
        for (int k = 0; k < 4; k++)
            otlp_span_add(t, "s", OTLP_KIND_INTERNAL, id, NULL, false, 1, 2);
        accepted += otlp_submit(e, t);
    }
    ck_assert_int_eq(accepted, 4);
    otlp_counts c;
    otlp_get_counts(e, &c);
    ck_assert_uint_eq(c.dropped, 4);
    ck_assert_int_eq(c.queued, 16);
    ck_assert_uint_eq(c.exported + c.failed, 0);
    const double t0 = now_s();
    otlp_stop(e); /* the flush: one POST that gets no answer, cut at 300 ms */
    const double took = now_s() - t0;
    ck_assert_msg(took < 2.0, "stop took %.2f s with export_timeout_ms 300", took);
    close(fd);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, traceparent_reads_the_specifications_example);
    tcase_add_test(tc, traceparent_refuses_every_malformed_header);
    tcase_add_test(tc, traceparent_of_a_later_version_reads_its_first_fields);
    tcase_add_test(tc, tracestate_kept_only_when_well_formed);
    tcase_add_test(tc, new_ids_are_non_zero_and_distinct);
    tcase_add_test(tc, ratio_sampler_keeps_its_share);
    tcase_add_test(tc, encoder_writes_an_export_request_a_reader_gets_back);
    tcase_add_test(tc, record_has_room_for_its_spans_and_cuts_long_strings);
    tcase_add_test(tc, full_queue_drops_and_counts_and_stop_is_bounded);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
