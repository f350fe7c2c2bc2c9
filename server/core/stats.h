/* metrics.h: what the server counts, per model variant, and the two ways it
 * is read: GET /metrics (Prometheus text format 0.0.4) and the Triton-shaped
 * statistics of GET /v2/models/{m}/stats.
 *
 * Counters live in each srv_variant (prom_variant) behind a small mutex:
 * they are touched a few times per request and per batch, never per token.
 * Durations are recorded in nanoseconds and exported in seconds.
 */
#ifndef MT_SERVER_METRICS_H
#define MT_SERVER_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/base/sbuf.h"

#define PROM_DUR_BUCKETS 16
#define PROM_BATCH_BUCKETS 11
#define PROM_MAX_BATCH_STATS 64

typedef struct {
    uint64_t count;
    double sum;
    uint64_t le[PROM_DUR_BUCKETS]; /* non-cumulative; one past the last is +Inf */
    uint64_t inf;
} prom_hist;

/* Why a request failed (the reason label of mantissa_request_failures_total). */
typedef enum {
    PROM_R_INVALID,     /* 400, 404, 405, 415 */
    PROM_R_UNAUTHORIZED,/* 401 */
    PROM_R_LIMIT,       /* 413, 422 */
    PROM_R_QUEUE_FULL,  /* 429 */
    PROM_R_CANCELLED,   /* the client went away */
    PROM_R_INTERNAL,    /* 500 */
    PROM_R_UNAVAILABLE, /* 503 */
    PROM_R_TIMEOUT,     /* 504 */
    PROM_R_COUNT
} prom_reason;

typedef struct {
    pthread_mutex_t lock;
    uint64_t success, failures[PROM_R_COUNT];
    prom_hist request, queue, compute; /* request and queue per request; compute per batch */
    prom_hist batch;                   /* texts per batch (bucket bounds are counts) */
    uint64_t texts, tokens, batches;
    /* Triton statistics (ns sums) */
    uint64_t ok_ns, fail_ns, queue_ns, infer_ns, infer_count, last_ms;
    struct {
        int size;
        uint64_t count, ns;
    } bs[PROM_MAX_BATCH_STATS];
    int nbs;
    /* shadow comparisons of this variant to its model's reference */
    uint64_t shadow_compared, shadow_dropped, shadow_failed;
    uint64_t demotions, gate_failures, builds, build_failures;
} prom_variant;

/* Drift of one build from its model's reference on live traffic: one
 * sample per text that was also run on the reference (shadow). count,
 * mean and min are over every sample since the build started serving;
 * p1 and the window mean over the latest PROM_DRIFT_RING. */
#define PROM_DRIFT_RING 4096
#define PROM_COS_BUCKETS 11
#define PROM_ERR_BUCKETS 11
typedef struct {
    pthread_mutex_t lock;
    uint64_t count;
    double sum_cos, min_cos, sum_err, max_err;
    uint64_t cos_le[PROM_COS_BUCKETS], cos_inf;
    uint64_t err_le[PROM_ERR_BUCKETS], err_inf;
    double ring[PROM_DRIFT_RING]; /* latest cosines */
    int ring_n, ring_pos;
} prom_drift;

typedef struct {
    uint64_t count;
    double mean, p1, min, window_mean, mean_max_abs_err, max_abs_err;
} prom_drift_summary;

void prom_drift_init(prom_drift *d);
void prom_drift_destroy(prom_drift *d);
/* One text: cosine and max abs error of a build's vector to the reference's. */
void prom_drift_add(prom_drift *d, double cosine, double max_abs_err);
/* The figures; window_mean over the latest `window` samples (0 when fewer). */
void prom_drift_summarize(prom_drift *d, int window, prom_drift_summary *out);

void prom_variant_init(prom_variant *p);
void prom_variant_destroy(prom_variant *p);

/* A finished inference request: its HTTP status, and (for 200) its texts,
 * tokens, time queued and time in batches. */
void prom_observe_request(prom_variant *p, int status, bool cancelled, uint64_t total_ns,
                          uint64_t queue_ns, uint64_t compute_ns, long texts, long tokens);
/* A finished batch of n texts and tokens tokens that took ns. */
void prom_observe_batch(prom_variant *p, int n, long tokens, uint64_t ns);

/* Requests answered before any model was resolved (bad path, bad JSON...). */
void prom_observe_http(int status);

struct srv_models;
struct sched;
struct srv_model;
/* GET /metrics. */
void prom_render(sbuf *b, struct srv_models *models, struct sched *s);
/* The Triton statistics object of one model (all its variants summed),
 * plus "reference", "shadow_rate" and "variants" (each variant's state,
 * share, requests, latency histogram, drift and gate figures). */
void prom_model_stats_json(sbuf *b, struct srv_models *models, struct srv_model *m);

#endif
