/* otlp.c: the span records and the OTLP/HTTP exporter (see otlp.h): a
 * bounded queue filled by the loop thread, emptied by the exporter's own
 * thread, which encodes batches (otlp_pb.c) and POSTs them with libcurl. */
#include "server/net/otlp.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/version.h"
#include "server/base/log.h"

/* At most one warning line about failed exports this often (ns). */
#define WARN_EVERY_NS (60ull * 1000000000ull)

/* ========================================================================
 * records
 * ====================================================================== */

/* Copies at most n bytes of s into t's arena (cut to what is left). */
static otlp_str put_str(otlp_trace *t, const char *s, size_t n)
{
    otlp_str r = {t->used, 0};
    const size_t room = OTLP_STRINGS_MAX - t->used;
    if (n > room)
        n = room;
    memcpy(t->strings + t->used, s, n);
    t->used = (uint16_t)(t->used + n);
    r.len = (uint16_t)n;
    return r;
}

otlp_trace *otlp_trace_new(const uint8_t trace_id[TC_TRACE_ID_LEN], const char *tracestate)
{
    otlp_trace *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    t->next = NULL;
    memcpy(t->trace_id, trace_id, TC_TRACE_ID_LEN);
    t->nspans = t->nattrs = 0;
    t->used = 0;
    t->tracestate = put_str(t, tracestate ? tracestate : "", tracestate ? strlen(tracestate) : 0);
    return t;
}

void otlp_trace_free(otlp_trace *t)
{
    free(t);
}

otlp_span *otlp_span_add(otlp_trace *t, const char *name, otlp_kind kind,
                         const uint8_t span_id[TC_SPAN_ID_LEN], const uint8_t *parent,
                         bool remote, uint64_t start_ns, uint64_t end_ns)
{
    if (t->nspans == OTLP_SPANS_MAX)
        return NULL;
    otlp_span *s = &t->spans[t->nspans++];
    memcpy(s->span_id, span_id, TC_SPAN_ID_LEN);
    s->has_parent = parent != NULL;
    s->remote_parent = parent && remote;
    if (parent)
        memcpy(s->parent_id, parent, TC_SPAN_ID_LEN);
    s->name = put_str(t, name, strlen(name));
    s->status_msg = (otlp_str){0, 0};
    s->kind = kind;
    s->status = OTLP_STATUS_UNSET;
    s->start_ns = start_ns;
    s->end_ns = end_ns < start_ns ? start_ns : end_ns;
    s->attr0 = t->nattrs;
    s->nattrs = 0;
    return s;
}

/* The next attribute of the last span, or NULL when there is no room. */
static otlp_attr *next_attr(otlp_trace *t, const char *key, otlp_attr_type type)
{
    if (!t->nspans || t->nattrs == OTLP_ATTRS_MAX)
        return NULL;
    t->spans[t->nspans - 1].nattrs++;
    otlp_attr *a = &t->attrs[t->nattrs++];
    a->key = key;
    a->type = type;
    return a;
}

void otlp_attr_str(otlp_trace *t, const char *key, const char *v)
{
    otlp_attr *a = next_attr(t, key, OTLP_STR);
    if (a)
        a->v.s = put_str(t, v, strlen(v));
}

void otlp_attr_int(otlp_trace *t, const char *key, int64_t v)
{
    otlp_attr *a = next_attr(t, key, OTLP_INT);
    if (a)
        a->v.i = v;
}

void otlp_attr_double(otlp_trace *t, const char *key, double v)
{
    otlp_attr *a = next_attr(t, key, OTLP_DOUBLE);
    if (a)
        a->v.d = v;
}

void otlp_attr_bool(otlp_trace *t, const char *key, bool v)
{
    otlp_attr *a = next_attr(t, key, OTLP_BOOL);
    if (a)
        a->v.b = v;
}

void otlp_span_error(otlp_trace *t, const char *msg)
{
    if (!t->nspans)
        return;
    otlp_span *s = &t->spans[t->nspans - 1];
    s->status = OTLP_STATUS_ERROR;
    if (msg)
        s->status_msg = put_str(t, msg, strlen(msg));
}

/* ========================================================================
 * the exporter
 * ====================================================================== */

struct otlp_exporter {
    otlp_options o;
    char *endpoint, *service_name;
    char host_name[256];
    CURL *curl;
    struct curl_slist *headers;
    pthread_t thread;
    bool started, curl_global;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    otlp_trace *head, *tail;
    long queued;  /* spans */
    bool stopping;
    /* the exporter thread's */
    uint64_t last_warn, failed_since_warn;
    bool failing;
    /* set by otlp_stop: the flush ends then, an export under way too (ns) */
    atomic_ullong flush_end;
    atomic_ullong exported, dropped, failed, exports_ok, exports_failed;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* libcurl's progress callback: ends an export still under way when the
 * flush's time is up. */
static int progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                    curl_off_t ulnow)
{
    otlp_exporter *e = arg;
    const uint64_t end = atomic_load(&e->flush_end);
    return end && mono_ns() >= end;
}

/* A failed export's warning, at most once a minute (with how many failed
 * since the last one); and a line when exports work again. */
static void note_result(otlp_exporter *e, bool ok, const char *why)
{
    const uint64_t now = mono_ns();
    if (ok) {
        if (e->failing)
            log_msg(LOG_INFO, "tracing: exports to %s work again", e->endpoint);
        e->failing = false;
        return;
    }
    e->failing = true;
    e->failed_since_warn++;
    if (e->last_warn && now - e->last_warn < WARN_EVERY_NS)
        return;
    log_msg(LOG_WARN,
            "tracing: export to %s failed: %s (%llu export%s failed since the last such line; "
            "their spans are dropped, requests are not affected)",
            e->endpoint, why, (unsigned long long)e->failed_since_warn,
            e->failed_since_warn == 1 ? "" : "s");
    e->last_warn = now;
    e->failed_since_warn = 0;
}

static void free_list(otlp_trace *t)
{
    while (t) {
        otlp_trace *next = t->next;
        free(t);
        t = next;
    }
}

/* POSTs the n records of list (spans in all; the last one ends the list),
 * then frees them. */
static void export_batch(otlp_exporter *e, otlp_trace *list, int n, int spans, long timeout_ms)
{
    sbuf b;
    sb_init(&b);
    otlp_encode(&b, &e->o.resource, list, n);
    char errbuf[CURL_ERROR_SIZE] = "";
    long code = 0;
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    if (!b.oom) {
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, b.data);
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)b.len);
        curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, timeout_ms < 1 ? 1L : timeout_ms);
        curl_easy_setopt(e->curl, CURLOPT_ERRORBUFFER, errbuf);
        rc = curl_easy_perform(e->curl);
        curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &code);
    }
    const bool ok = rc == CURLE_OK && code >= 200 && code < 300;
    atomic_fetch_add(ok ? &e->exported : &e->failed, (unsigned long long)spans);
    atomic_fetch_add(ok ? &e->exports_ok : &e->exports_failed, 1);
    char why[CURL_ERROR_SIZE + 64];
    if (rc != CURLE_OK)
        snprintf(why, sizeof why, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    else
        snprintf(why, sizeof why, "HTTP status %ld", code);
    note_result(e, ok, why);
    sb_free(&b);
    free_list(list);
}

/* Under mu: takes records off the queue, at most max_batch_spans spans
 * (one record at least); their count and spans into *n, *spans. */
static otlp_trace *take(otlp_exporter *e, int *n, int *spans)
{
    otlp_trace *first = e->head, *last = NULL;
    *n = *spans = 0;
    for (otlp_trace *t = e->head; t; t = t->next) {
        if (*n && *spans + t->nspans > e->o.max_batch_spans)
            break;
        *spans += t->nspans;
        (*n)++;
        last = t;
    }
    if (!last)
        return NULL;
    e->head = last->next;
    if (!e->head)
        e->tail = NULL;
    last->next = NULL;
    e->queued -= *spans;
    return first;
}

/* Waits (under mu) until a batch is full, batch_delay_ms has passed since
 * the last export, or the exporter stops. */
static void wait_for_batch(otlp_exporter *e, uint64_t since)
{
    const uint64_t due = since + (uint64_t)e->o.batch_delay_ms * 1000000ull;
    while (!e->stopping && e->queued < e->o.max_batch_spans) {
        if (mono_ns() >= due)
            return;
        struct timespec ts = {(time_t)(due / 1000000000ull), (long)(due % 1000000000ull)};
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
}

/* The exporter's thread: a batch at a time until the exporter stops, then
 * what is left, until the flush's time is up. */
static void *exporter_main(void *arg)
{
    otlp_exporter *e = arg;
    uint64_t since = mono_ns();
    pthread_mutex_lock(&e->mu);
    for (;;) {
        wait_for_batch(e, since);
        const uint64_t flush_end = atomic_load(&e->flush_end);
        int n, spans;
        otlp_trace *batch = take(e, &n, &spans);
        since = mono_ns();
        if (!batch && e->stopping)
            break;
        if (!batch)
            continue;
        if (flush_end && since >= flush_end) { /* the flush ran out of time */
            atomic_fetch_add(&e->failed, (unsigned long long)(spans + e->queued));
            free_list(batch);
            free_list(e->head);
            e->head = e->tail = NULL;
            e->queued = 0;
            break;
        }
        long timeout = e->o.export_timeout_ms;
        if (flush_end && (long)((flush_end - since) / 1000000ull) < timeout)
            timeout = (long)((flush_end - since) / 1000000ull);
        pthread_mutex_unlock(&e->mu);
        export_batch(e, batch, n, spans, timeout);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Appends the first n bytes of line (a header, "Name: value") to e's
 * request headers; false without memory. */
static bool add_header(otlp_exporter *e, const char *line, size_t n)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s", n < sizeof buf ? (int)n : (int)sizeof buf - 1, line);
    struct curl_slist *h = curl_slist_append(e->headers, buf);
    if (h)
        e->headers = h;
    return h != NULL;
}

mt_status otlp_start(const otlp_options *o, otlp_exporter **out, mt_err *err)
{
    otlp_exporter *e = calloc(1, sizeof *e);
    if (!e)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    e->o = *o;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = e;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        goto oom;
    e->curl_global = true;
    e->endpoint = strdup(o->endpoint);
    e->service_name = strdup(o->resource.service_name);
    if (!(e->curl = curl_easy_init()) || !e->endpoint || !e->service_name)
        goto oom;
    if (gethostname(e->host_name, sizeof e->host_name - 1) != 0)
        e->host_name[0] = 0;
    e->o.endpoint = e->endpoint;
    e->o.resource.service_name = e->service_name;
    e->o.resource.host_name = e->host_name;
    e->o.headers = NULL; /* read once, below */
    /* every export: protobuf, no 100-continue round trip, then the config's */
    if (!add_header(e, "Content-Type: application/x-protobuf", SIZE_MAX) ||
        !add_header(e, "Expect:", SIZE_MAX))
        goto oom;
    for (const char *p = o->headers; p && *p;) {
        const size_t n = strcspn(p, "\n");
        if (n && !add_header(e, p, n))
            goto oom;
        p += n + (p[n] == '\n');
    }
    CURL *c = e->curl;
    curl_easy_setopt(c, CURLOPT_URL, e->endpoint);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->headers);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "mantissa/" MANTISSA_VERSION);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)o->export_timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, e);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (pthread_create(&e->thread, NULL, exporter_main, e) != 0) {
        otlp_stop(e);
        *out = NULL;
        return mt_fail(err, MT_EIO, "tracing: cannot start the exporter thread");
    }
    e->started = true;
    return MT_OK;
oom:
    otlp_stop(e);
    *out = NULL;
    return mt_fail(err, MT_ENOMEM, "tracing: cannot set up the OTLP exporter (libcurl)");
}

bool otlp_submit(otlp_exporter *e, otlp_trace *t)
{
    const long n = t->nspans;
    pthread_mutex_lock(&e->mu);
    if (e->stopping || e->queued + n > e->o.max_queue_spans) {
        pthread_mutex_unlock(&e->mu);
        atomic_fetch_add(&e->dropped, (unsigned long long)n);
        free(t);
        return false;
    }
    t->next = NULL;
    if (e->tail)
        e->tail->next = t;
    else
        e->head = t;
    e->tail = t;
    e->queued += n;
    /* wake the exporter when this record fills a batch (only then) */
    const bool full = e->queued >= e->o.max_batch_spans && e->queued - n < e->o.max_batch_spans;
    pthread_mutex_unlock(&e->mu);
    if (full)
        pthread_cond_signal(&e->cv);
    return true;
}

void otlp_stop(otlp_exporter *e)
{
    if (!e)
        return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        atomic_store(&e->flush_end, mono_ns() + (uint64_t)e->o.export_timeout_ms * 1000000ull);
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        otlp_counts c;
        otlp_get_counts(e, &c);
        log_msg(LOG_INFO, "tracing: exporter stopped: %llu spans exported, %llu dropped (queue "
                          "full), %llu failed",
                (unsigned long long)c.exported, (unsigned long long)c.dropped,
                (unsigned long long)c.failed);
    }
    free_list(e->head);
    if (e->curl)
        curl_easy_cleanup(e->curl);
    if (e->curl_global)
        curl_global_cleanup();
    curl_slist_free_all(e->headers);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e->endpoint);
    free(e->service_name);
    free(e);
}

void otlp_get_counts(otlp_exporter *e, otlp_counts *out)
{
    out->exported = atomic_load(&e->exported);
    out->dropped = atomic_load(&e->dropped);
    out->failed = atomic_load(&e->failed);
    out->exports_ok = atomic_load(&e->exports_ok);
    out->exports_failed = atomic_load(&e->exports_failed);
    pthread_mutex_lock(&e->mu);
    out->queued = e->queued;
    pthread_mutex_unlock(&e->mu);
}
