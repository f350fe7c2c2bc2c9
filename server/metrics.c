/* metrics.c: counters and histograms per variant, rendered as Prometheus
 * text (GET /metrics) and as Triton statistics (GET /v2/models/{m}/stats).
 * See metrics.h. */
#include "server/metrics.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "server/api.h"
#include "server/models.h"
#include "server/sched.h"

static const double dur_le[PROM_DUR_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                                5,      10,    30,     60};
static const double batch_le[PROM_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

static const char *const reason_names[PROM_R_COUNT] = {
    "invalid", "unauthorized", "limit", "queue_full", "cancelled", "internal", "unavailable",
    "timeout"};

/* ========================================================================
 * recording
 * ====================================================================== */

void prom_variant_init(prom_variant *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
}

void prom_variant_destroy(prom_variant *p)
{
    pthread_mutex_destroy(&p->lock);
}

static void hist_add(prom_hist *h, const double *le, int nle, double v)
{
    h->count++;
    h->sum += v;
    for (int i = 0; i < nle; i++)
        if (v <= le[i]) {
            h->le[i]++;
            return;
        }
    h->inf++;
}

static prom_reason reason_of(int status, bool cancelled)
{
    if (cancelled)
        return PROM_R_CANCELLED;
    switch (status) {
    case 401: return PROM_R_UNAUTHORIZED;
    case 413: case 422: return PROM_R_LIMIT;
    case 429: return PROM_R_QUEUE_FULL;
    case 503: return PROM_R_UNAVAILABLE;
    case 504: return PROM_R_TIMEOUT;
    default: return status >= 500 ? PROM_R_INTERNAL : PROM_R_INVALID;
    }
}

static uint64_t now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

void prom_observe_request(prom_variant *p, int status, bool cancelled, uint64_t total_ns,
                          uint64_t queue_ns, uint64_t compute_ns, long texts, long tokens)
{
    pthread_mutex_lock(&p->lock);
    if (status == 200 && !cancelled) {
        p->success++;
        p->ok_ns += total_ns;
        p->queue_ns += queue_ns;
        p->infer_ns += compute_ns;
        p->infer_count++;
        p->last_ms = now_ms();
        hist_add(&p->request, dur_le, PROM_DUR_BUCKETS, (double)total_ns * 1e-9);
        hist_add(&p->queue, dur_le, PROM_DUR_BUCKETS, (double)queue_ns * 1e-9);
    } else {
        p->failures[reason_of(status, cancelled)]++;
        p->fail_ns += total_ns;
    }
    pthread_mutex_unlock(&p->lock);
}

void prom_observe_batch(prom_variant *p, int n, long tokens, uint64_t ns)
{
    pthread_mutex_lock(&p->lock);
    hist_add(&p->compute, dur_le, PROM_DUR_BUCKETS, (double)ns * 1e-9);
    hist_add(&p->batch, batch_le, PROM_BATCH_BUCKETS, (double)n);
    p->texts += (uint64_t)n;
    p->tokens += (uint64_t)tokens;
    p->batches++;
    int i = 0;
    while (i < p->nbs && p->bs[i].size != n)
        i++;
    if (i == p->nbs && p->nbs < PROM_MAX_BATCH_STATS)
        p->bs[p->nbs++].size = n;
    if (i < p->nbs) {
        p->bs[i].count++;
        p->bs[i].ns += ns;
    }
    pthread_mutex_unlock(&p->lock);
}

/* Responses by status code, for every route (the model-labelled counters
 * only see requests that named a served model). */
static const int http_codes[] = {200, 400, 401, 404, 405, 413, 415, 422, 429, 500, 503, 504};
#define N_CODES (sizeof http_codes / sizeof *http_codes)
static atomic_ulong http_count[N_CODES + 1];

void prom_observe_http(int status)
{
    size_t i = 0;
    while (i < N_CODES && http_codes[i] != status)
        i++;
    atomic_fetch_add(&http_count[i], 1);
}

/* ========================================================================
 * Prometheus text format 0.0.4
 * ====================================================================== */

static void head(sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values are config names (letters, digits, '-', '_', '.'), so they
 * need no escaping. */
static void labels(sbuf *b, const srv_model *m, const srv_variant *v)
{
    sb_printf(b, "{model=\"%s\",variant=\"%s\"", m->cfg.name, v->cfg.name);
}

static void hist(sbuf *b, const char *name, const srv_model *m, const srv_variant *v,
                 const prom_hist *h, const double *le, int nle)
{
    uint64_t cum = 0;
    for (int i = 0; i < nle; i++) {
        cum += h->le[i];
        sb_printf(b, "%s_bucket", name);
        labels(b, m, v);
        sb_printf(b, ",le=\"%g\"} %llu\n", le[i], (unsigned long long)cum);
    }
    sb_printf(b, "%s_bucket", name);
    labels(b, m, v);
    sb_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)(cum + h->inf));
    sb_printf(b, "%s_sum", name);
    labels(b, m, v);
    sb_printf(b, "} %.9g\n", h->sum);
    sb_printf(b, "%s_count", name);
    labels(b, m, v);
    sb_printf(b, "} %llu\n", (unsigned long long)h->count);
}

/* A copy of a variant's counters, taken under its lock. */
static void snapshot(srv_variant *v, prom_variant *out)
{
    pthread_mutex_lock(&v->metrics.lock);
    memcpy(out, &v->metrics, sizeof *out);
    pthread_mutex_unlock(&v->metrics.lock);
}

#define FOR_VARIANTS(models)                                                                  \
    for (int mi = 0; mi < (models)->nmodels; mi++)                                            \
        for (int vi = 0; vi < (models)->models[mi].nvariants; vi++)

void prom_render(sbuf *b, srv_models *models, sched *s)
{
    int nv = 0;
    FOR_VARIANTS(models) nv++;
    prom_variant *snap = malloc(sizeof *snap * (size_t)(nv ? nv : 1));
    if (!snap) {
        b->oom = true;
        return;
    }
    int k = 0;
    FOR_VARIANTS(models) snapshot(&models->models[mi].variants[vi], &snap[k++]);

#define EACH(body)                                                                            \
    do {                                                                                      \
        int kk = 0;                                                                           \
        FOR_VARIANTS(models)                                                                  \
        {                                                                                     \
            srv_model *m = &models->models[mi];                                               \
            srv_variant *v = &m->variants[vi];                                                \
            prom_variant *p = &snap[kk++];                                                    \
            (void)p;                                                                          \
            body;                                                                             \
        }                                                                                     \
    } while (0)

    head(b, "mantissa_build_info", "gauge", "Build information; the value is always 1.");
    sb_puts(b, "mantissa_build_info{version=\"" MANTISSA_VERSION "\"} 1\n");
    head(b, "mantissa_ready", "gauge", "1 when the server admits inference requests.");
    sb_printf(b, "mantissa_ready %d\n", models->ready && !(s && sched_draining(s)));

    head(b, "mantissa_http_responses_total", "counter", "HTTP responses by status code.");
    for (size_t i = 0; i <= N_CODES; i++) {
        unsigned long n = atomic_load(&http_count[i]);
        if (i < N_CODES)
            sb_printf(b, "mantissa_http_responses_total{code=\"%d\"} %lu\n", http_codes[i], n);
        else
            sb_printf(b, "mantissa_http_responses_total{code=\"other\"} %lu\n", n);
    }

    head(b, "mantissa_request_success_total", "counter", "Inference requests answered 200.");
    EACH({
        sb_puts(b, "mantissa_request_success_total");
        labels(b, m, v);
        sb_printf(b, "} %llu\n", (unsigned long long)p->success);
    });
    head(b, "mantissa_request_failures_total", "counter",
         "Inference requests that failed, by reason.");
    EACH({
        for (int r = 0; r < PROM_R_COUNT; r++) {
            sb_puts(b, "mantissa_request_failures_total");
            labels(b, m, v);
            sb_printf(b, ",reason=\"%s\"} %llu\n", reason_names[r],
                      (unsigned long long)p->failures[r]);
        }
    });
    head(b, "mantissa_request_duration_seconds", "histogram",
         "Time from admission to the answer of successful inference requests.");
    EACH(hist(b, "mantissa_request_duration_seconds", m, v, &p->request, dur_le,
              PROM_DUR_BUCKETS));
    head(b, "mantissa_queue_duration_seconds", "histogram",
         "Time successful requests waited before their first batch ran.");
    EACH(hist(b, "mantissa_queue_duration_seconds", m, v, &p->queue, dur_le, PROM_DUR_BUCKETS));
    head(b, "mantissa_compute_duration_seconds", "histogram", "Time of each batch's forward pass.");
    EACH(hist(b, "mantissa_compute_duration_seconds", m, v, &p->compute, dur_le,
              PROM_DUR_BUCKETS));
    head(b, "mantissa_batch_size", "histogram", "Texts per batch.");
    EACH(hist(b, "mantissa_batch_size", m, v, &p->batch, batch_le, PROM_BATCH_BUCKETS));
    head(b, "mantissa_texts_total", "counter", "Texts embedded.");
    EACH({
        sb_puts(b, "mantissa_texts_total");
        labels(b, m, v);
        sb_printf(b, "} %llu\n", (unsigned long long)p->texts);
    });
    head(b, "mantissa_tokens_total", "counter", "Tokens processed by the forward pass.");
    EACH({
        sb_puts(b, "mantissa_tokens_total");
        labels(b, m, v);
        sb_printf(b, "} %llu\n", (unsigned long long)p->tokens);
    });
    head(b, "mantissa_queue_depth", "gauge", "Texts waiting for a batch.");
    EACH({
        sb_puts(b, "mantissa_queue_depth");
        labels(b, m, v);
        sb_printf(b, "} %ld\n", s ? sched_queue_depth(s, v) : 0L);
    });
    head(b, "mantissa_resident_weight_bytes", "gauge",
         "Bytes of model weights resident for a variant.");
    EACH({
        sb_puts(b, "mantissa_resident_weight_bytes");
        labels(b, m, v);
        sb_printf(b, ",precision=\"%s\"} %zu\n", mt_precision_name(v->cfg.precision),
                  bert_resident_bytes(v->model));
    });
    head(b, "mantissa_inflight_requests", "gauge",
         "Inference requests admitted and not yet answered.");
    for (int mi = 0; mi < models->nmodels; mi++)
        sb_printf(b, "mantissa_inflight_requests{model=\"%s\"} %ld\n",
                  models->models[mi].cfg.name, s ? sched_inflight(s, &models->models[mi]) : 0L);
#undef EACH
    free(snap);
}

/* ========================================================================
 * Triton statistics
 * ====================================================================== */

static void dur(sbuf *b, const char *name, uint64_t count, uint64_t ns)
{
    sb_printf(b, "\"%s\":{\"count\":%llu,\"ns\":%llu}", name, (unsigned long long)count,
              (unsigned long long)ns);
}

void prom_model_stats_json(sbuf *b, srv_model *m)
{
    prom_variant t, p;
    memset(&t, 0, sizeof t);
    uint64_t fails = 0;
    for (int k = 0; k < m->nvariants; k++) {
        snapshot(&m->variants[k], &p);
        t.success += p.success;
        t.ok_ns += p.ok_ns;
        t.fail_ns += p.fail_ns;
        t.queue_ns += p.queue_ns;
        t.infer_ns += p.infer_ns;
        t.infer_count += p.infer_count;
        t.texts += p.texts;
        t.batches += p.batches;
        if (p.last_ms > t.last_ms)
            t.last_ms = p.last_ms;
        for (int r = 0; r < PROM_R_COUNT; r++)
            fails += p.failures[r];
        for (int i = 0; i < p.nbs; i++) {
            int j = 0;
            while (j < t.nbs && t.bs[j].size != p.bs[i].size)
                j++;
            if (j == t.nbs && t.nbs < PROM_MAX_BATCH_STATS)
                t.bs[t.nbs++].size = p.bs[i].size;
            if (j < t.nbs) {
                t.bs[j].count += p.bs[i].count;
                t.bs[j].ns += p.bs[i].ns;
            }
        }
    }
    sb_puts(b, "{\"name\":");
    sb_json_str(b, m->cfg.name, strlen(m->cfg.name));
    sb_printf(b, ",\"version\":\"1\",\"last_inference\":%llu,\"inference_count\":%llu,"
                 "\"execution_count\":%llu,\"inference_stats\":{",
              (unsigned long long)t.last_ms, (unsigned long long)t.texts,
              (unsigned long long)t.batches);
    dur(b, "success", t.success, t.ok_ns);
    sb_putc(b, ',');
    dur(b, "fail", fails, t.fail_ns);
    sb_putc(b, ',');
    dur(b, "queue", t.success, t.queue_ns);
    sb_putc(b, ',');
    dur(b, "compute_input", t.success, 0);
    sb_putc(b, ',');
    dur(b, "compute_infer", t.success, t.infer_ns);
    sb_putc(b, ',');
    dur(b, "compute_output", t.success, 0);
    sb_putc(b, ',');
    dur(b, "cache_hit", 0, 0);
    sb_putc(b, ',');
    dur(b, "cache_miss", 0, 0);
    sb_puts(b, "},\"batch_stats\":[");
    for (int i = 0; i < t.nbs; i++) {
        sb_printf(b, "%s{\"batch_size\":%d,", i ? "," : "", t.bs[i].size);
        dur(b, "compute_input", t.bs[i].count, 0);
        sb_putc(b, ',');
        dur(b, "compute_infer", t.bs[i].count, t.bs[i].ns);
        sb_putc(b, ',');
        dur(b, "compute_output", t.bs[i].count, 0);
        sb_putc(b, '}');
    }
    sb_puts(b, "]}");
}
