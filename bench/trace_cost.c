/* trace_cost.c: the CPU time tracing adds to one request, in its two
 * places: on the loop thread, building the request's span record (ids, the
 * SERVER span with its attributes and the five hops, as server/api/trace.c
 * makes them for an embedding request); on the exporter's thread, encoding
 * records into an OTLP ExportTraceServiceRequest (server/net/otlp_pb.c), in
 * batches of 85 requests (510 spans, under the default max_batch_spans of
 * 512). The POST itself is not timed (it depends on the collector).
 * bench/tracing_ab.py runs it and puts its line in the report.
 *
 *   build/release/bench/trace_cost [requests]     (default 200000)
 *
 * Prints one JSON line: build_us and encode_us per request, bytes per
 * request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "server/net/otlp.h"

#define BATCH 85

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One embedding request's record, as trace.c fills it. */
static otlp_trace *record(void)
{
    static const char *const hops[] = {"parse", "queue", "batch", "forward", "reply"};
    uint8_t tid[TC_TRACE_ID_LEN], sid[TC_SPAN_ID_LEN], id[TC_SPAN_ID_LEN];
    tc_new_id(tid, sizeof tid);
    tc_new_id(sid, sizeof sid);
    otlp_trace *t = otlp_trace_new(tid, NULL);
    if (!t)
        exit(1);
    otlp_span_add(t, "POST /v1/embeddings", OTLP_KIND_SERVER, sid, NULL, true, 1000, 9000);
    otlp_attr_str(t, "http.request.method", "POST");
    otlp_attr_str(t, "url.path", "/v1/embeddings");
    otlp_attr_str(t, "url.scheme", "http");
    otlp_attr_str(t, "http.route", "/v1/embeddings");
    otlp_attr_int(t, "http.response.status_code", 200);
    otlp_attr_str(t, "mantissa.request_id", "mt-2480-123456");
    otlp_attr_str(t, "mantissa.model", "minilm");
    otlp_attr_str(t, "mantissa.variant", "fp32");
    otlp_attr_str(t, "mantissa.precision", "fp32");
    otlp_attr_int(t, "mantissa.inputs", 1);
    otlp_attr_int(t, "mantissa.tokens", 14);
    for (int i = 0; i < 5; i++) {
        tc_new_id(id, sizeof id);
        otlp_span_add(t, hops[i], OTLP_KIND_INTERNAL, id, sid, false, 2000 + i, 3000 + i);
        if (i == 2) {
            otlp_attr_int(t, "mantissa.batch.size", 3);
            otlp_attr_int(t, "mantissa.batch.tokens", 40);
            otlp_attr_int(t, "mantissa.batches", 1);
        }
    }
    return t;
}

int main(int argc, char **argv)
{
    const long n = argc > 1 ? atol(argv[1]) : 200000;
    const otlp_resource res = {.service_name = "mantissa", .service_version = "0.1.0",
                               .host_name = "host", .pid = 1, .scope_name = "mantissa",
                               .scope_version = "0.1.0"};
    otlp_trace *batch[BATCH];
    sbuf b;
    sb_init(&b);
    double build = 0, encode = 0;
    size_t bytes = 0;
    long done = 0;
    while (done < n) {
        const double t0 = now_s();
        for (int k = 0; k < BATCH; k++) {
            batch[k] = record();
            if (k)
                batch[k - 1]->next = batch[k];
        }
        const double t1 = now_s();
        b.len = 0;
        otlp_encode(&b, &res, batch[0], BATCH);
        encode += now_s() - t1;
        build += t1 - t0;
        bytes += b.len;
        for (int k = 0; k < BATCH; k++)
            otlp_trace_free(batch[k]);
        done += BATCH;
    }
    printf("{\"requests\": %ld, \"build_us\": %.3f, \"encode_us\": %.3f, \"bytes\": %.0f}\n",
           done, 1e6 * build / done, 1e6 * encode / done, (double)bytes / done);
    const int failed = b.oom;
    sb_free(&b);
    return failed;
}
