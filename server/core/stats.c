/* stats.c: the server's counters and histograms per variant, responses by
 * status code, and the drift figures of shadow runs (see stats.h). Their
 * renderers (Prometheus text, Triton statistics) are in server/api/prom.c. */
#include "server/core/stats.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>


const double stats_dur_le[STATS_DUR_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                                5,      10,    30,     60};
const double stats_batch_le[STATS_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
/* drift: cosine buckets dense near 1, where the precisions differ */
const double stats_cos_le[STATS_COS_BUCKETS] = {0.9,   0.95,  0.98,   0.99,    0.995, 0.998,
                                                0.999, 0.9995, 0.9999, 0.99999, 1};
const double stats_err_le[STATS_ERR_BUCKETS] = {1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3,
                                                1e-2, 3e-2, 0.1,  0.3,  1};

const char *const stats_reason_names[STATS_R_COUNT] = {
    "invalid", "unauthorized", "limit", "queue_full", "cancelled", "internal", "unavailable",
    "timeout", "empty_input", "too_long"};

/* ========================================================================
 * recording
 * ====================================================================== */

void stats_variant_init(stats_variant *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
}

void stats_variant_destroy(stats_variant *p)
{
    pthread_mutex_destroy(&p->lock);
}

static void hist_add(stats_hist *h, const double *le, int nle, double v)
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

static stats_reason reason_of(int status, bool cancelled)
{
    if (cancelled)
        return STATS_R_CANCELLED;
    switch (status) {
    case 401: return STATS_R_UNAUTHORIZED;
    case 413: return STATS_R_LIMIT;
    /* 422 (TEI's Validation): invalid, but where the handler names a limit
     * (too many inputs), an empty text or one too long */
    case 429: return STATS_R_QUEUE_FULL;
    case 503: return STATS_R_UNAVAILABLE;
    case 504: return STATS_R_TIMEOUT;
    default: return status >= 500 ? STATS_R_INTERNAL : STATS_R_INVALID;
    }
}

static uint64_t now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

void stats_observe_request(stats_variant *p, int status, int reason, bool cancelled,
                           uint64_t total_ns, uint64_t queue_ns, uint64_t compute_ns, long texts,
                           long tokens)
{
    pthread_mutex_lock(&p->lock);
    if (status == 200 && !cancelled) {
        p->success++;
        p->ok_ns += total_ns;
        p->queue_ns += queue_ns;
        p->infer_ns += compute_ns;
        p->infer_count++;
        p->last_ms = now_ms();
        hist_add(&p->request, stats_dur_le, STATS_DUR_BUCKETS, (double)total_ns * 1e-9);
        hist_add(&p->queue, stats_dur_le, STATS_DUR_BUCKETS, (double)queue_ns * 1e-9);
    } else {
        const bool named = !cancelled && reason >= 0 && reason < STATS_R_COUNT;
        p->failures[named ? reason : (int)reason_of(status, cancelled)]++;
        p->fail_ns += total_ns;
    }
    pthread_mutex_unlock(&p->lock);
}

void stats_observe_truncated(stats_variant *p, int n)
{
    pthread_mutex_lock(&p->lock);
    p->truncated += (uint64_t)n;
    pthread_mutex_unlock(&p->lock);
}

void stats_observe_batch(stats_variant *p, int n, long tokens, uint64_t ns)
{
    pthread_mutex_lock(&p->lock);
    hist_add(&p->compute, stats_dur_le, STATS_DUR_BUCKETS, (double)ns * 1e-9);
    hist_add(&p->batch, stats_batch_le, STATS_BATCH_BUCKETS, (double)n);
    p->texts += (uint64_t)n;
    p->tokens += (uint64_t)tokens;
    p->batches++;
    int i = 0;
    while (i < p->nbs && p->bs[i].size != n)
        i++;
    if (i == p->nbs && p->nbs < STATS_MAX_BATCH_STATS)
        p->bs[p->nbs++].size = n;
    if (i < p->nbs) {
        p->bs[i].count++;
        p->bs[i].ns += ns;
    }
    pthread_mutex_unlock(&p->lock);
}

/* Responses by status code, for every route (the model-labelled counters
 * only see requests that named a served model). */
const int stats_http_codes[STATS_HTTP_CODES] = {200, 400, 401, 404, 405, 413,
                                                 415, 422, 429, 500, 503, 504};
static atomic_ulong http_count[STATS_HTTP_CODES + 1];

void stats_observe_http(int status)
{
    size_t i = 0;
    while (i < STATS_HTTP_CODES && stats_http_codes[i] != status)
        i++;
    atomic_fetch_add(&http_count[i], 1);
}

unsigned long stats_http_count(int i)
{
    return atomic_load(&http_count[i]);
}

/* ========================================================================
 * drift figures
 * ====================================================================== */

void stats_drift_init(stats_drift *d)
{
    memset(d, 0, sizeof *d);
    d->min_cos = 2;
    pthread_mutex_init(&d->lock, NULL);
}

void stats_drift_destroy(stats_drift *d)
{
    pthread_mutex_destroy(&d->lock);
}

void stats_drift_add(stats_drift *d, double cosine, double max_abs_err)
{
    pthread_mutex_lock(&d->lock);
    d->count++;
    d->sum_cos += cosine;
    d->sum_err += max_abs_err;
    if (cosine < d->min_cos)
        d->min_cos = cosine;
    if (max_abs_err > d->max_err)
        d->max_err = max_abs_err;
    int i = 0;
    while (i < STATS_COS_BUCKETS && cosine > stats_cos_le[i])
        i++;
    if (i < STATS_COS_BUCKETS)
        d->cos_le[i]++;
    else
        d->cos_inf++;
    i = 0;
    while (i < STATS_ERR_BUCKETS && max_abs_err > stats_err_le[i])
        i++;
    if (i < STATS_ERR_BUCKETS)
        d->err_le[i]++;
    else
        d->err_inf++;
    d->ring[d->ring_pos] = cosine;
    d->ring_pos = (d->ring_pos + 1) % STATS_DRIFT_RING;
    if (d->ring_n < STATS_DRIFT_RING)
        d->ring_n++;
    pthread_mutex_unlock(&d->lock);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void stats_drift_summarize(stats_drift *d, int window, stats_drift_summary *out)
{
    memset(out, 0, sizeof *out);
    double *tmp = malloc(sizeof(double) * STATS_DRIFT_RING);
    pthread_mutex_lock(&d->lock);
    out->count = d->count;
    if (d->count) {
        out->mean = d->sum_cos / (double)d->count;
        out->min = d->min_cos;
        out->mean_max_abs_err = d->sum_err / (double)d->count;
        out->max_abs_err = d->max_err;
    }
    int n = d->ring_n;
    if (window > 0 && n >= window) {
        double s = 0;
        for (int i = 1; i <= window; i++)
            s += d->ring[(d->ring_pos - i + STATS_DRIFT_RING) % STATS_DRIFT_RING];
        out->window_mean = s / window;
    }
    if (tmp && n)
        memcpy(tmp, d->ring, sizeof(double) * (size_t)n);
    pthread_mutex_unlock(&d->lock);
    if (tmp && n) {
        /* the latest n samples are the first n of the ring until it wraps,
         * then all of it: either way ring[0..n) */
        qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
        int i = (int)floor(0.01 * (n - 1));
        out->p1 = tmp[i];
    } else {
        out->p1 = out->min;
    }
    free(tmp);
}
