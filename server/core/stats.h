/* stats.h: what the server counts, per model variant: requests by outcome,
 * their latency histograms, batches, shadow comparisons and drift, builds;
 * and responses by status code for every route. server/api/prom.c renders
 * them (GET /metrics, GET /v2/models/{m}/stats).
 *
 * Counters live in each variant's slot (stats_variant) behind a small
 * mutex: they are touched a few times per request and per batch, never per
 * token. Durations are recorded in nanoseconds and exported in seconds.
 */
#ifndef MT_SERVER_METRICS_H
#define MT_SERVER_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>


#define STATS_DUR_BUCKETS 16
#define STATS_BATCH_BUCKETS 11
#define STATS_MAX_BATCH_STATS 64

typedef struct {
    uint64_t count;
    double sum;
    uint64_t le[STATS_DUR_BUCKETS]; /* non-cumulative; one past the last is +Inf */
    uint64_t inf;
} stats_hist;

/* Why a request failed (the reason label of mantissa_request_failures_total). */
typedef enum {
    STATS_R_INVALID,     /* 400, 404, 405, 415, 422 */
    STATS_R_UNAUTHORIZED,/* 401 */
    STATS_R_LIMIT,       /* 413, and a 422 the handler says is a limit (TEI's max_inputs) */
    STATS_R_QUEUE_FULL,  /* 429 */
    STATS_R_CANCELLED,   /* the client went away */
    STATS_R_INTERNAL,    /* 500 */
    STATS_R_UNAVAILABLE, /* 503 */
    STATS_R_TIMEOUT,     /* 504 */
    STATS_R_EMPTY_INPUT, /* a text that is an empty string (the handler says so) */
    STATS_R_TOO_LONG,    /* a text over max_seq_len with truncation off (the handler says so) */
    STATS_R_COUNT
} stats_reason;

typedef struct {
    pthread_mutex_t lock;
    uint64_t success, failures[STATS_R_COUNT];
    stats_hist request, queue, compute; /* request and queue per request; compute per batch */
    stats_hist batch;                   /* texts per batch (bucket bounds are counts) */
    uint64_t texts, tokens, batches;
    uint64_t truncated;                 /* texts of answered requests cut to max_seq_len */
    /* Triton statistics (ns sums) */
    uint64_t ok_ns, fail_ns, queue_ns, infer_ns, infer_count, last_ms;
    struct {
        int size;
        uint64_t count, ns;
    } bs[STATS_MAX_BATCH_STATS];
    int nbs;
    /* shadow comparisons of this variant to its model's reference */
    uint64_t shadow_compared, shadow_dropped, shadow_failed;
    uint64_t demotions, gate_failures, builds, build_failures;
} stats_variant;

/* Drift of one build from its model's reference on live traffic: one
 * sample per text that was also run on the reference (shadow). count,
 * mean and min are over every sample since the build started serving;
 * p1 and the window mean over the latest STATS_DRIFT_RING. */
#define STATS_DRIFT_RING 4096
#define STATS_COS_BUCKETS 11
#define STATS_ERR_BUCKETS 11
typedef struct {
    pthread_mutex_t lock;
    uint64_t count;
    double sum_cos, min_cos, sum_err, max_err;
    uint64_t cos_le[STATS_COS_BUCKETS], cos_inf;
    uint64_t err_le[STATS_ERR_BUCKETS], err_inf;
    double ring[STATS_DRIFT_RING]; /* latest cosines */
    int ring_n, ring_pos;
} stats_drift;

typedef struct {
    uint64_t count;
    double mean, p1, min, window_mean, mean_max_abs_err, max_abs_err;
} stats_drift_summary;

void stats_drift_init(stats_drift *d);
void stats_drift_destroy(stats_drift *d);
/* One text: cosine and max abs error of a build's vector to the reference's. */
void stats_drift_add(stats_drift *d, double cosine, double max_abs_err);
/* The figures; window_mean over the latest `window` samples (0 when fewer). */
void stats_drift_summarize(stats_drift *d, int window, stats_drift_summary *out);

void stats_variant_init(stats_variant *p);
void stats_variant_destroy(stats_variant *p);

/* A finished inference request: its HTTP status, the reason it failed (a
 * stats_reason, or -1: the one its status implies), and (for 200) its
 * texts, tokens, time queued and time in batches. */
void stats_observe_request(stats_variant *p, int status, int reason, bool cancelled,
                           uint64_t total_ns, uint64_t queue_ns, uint64_t compute_ns, long texts,
                           long tokens);
/* n texts of an answered request were cut to the model's max_seq_len. */
void stats_observe_truncated(stats_variant *p, int n);
/* A finished batch of n texts and tokens tokens that took ns. */
void stats_observe_batch(stats_variant *p, int n, long tokens, uint64_t ns);

/* Requests answered before any model was resolved (bad path, bad JSON...). */
void stats_observe_http(int status);

/* Bucket upper bounds of the histograms (one past the last is +Inf), and
 * the reason labels. */
extern const double stats_dur_le[STATS_DUR_BUCKETS];
extern const double stats_batch_le[STATS_BATCH_BUCKETS];
extern const double stats_cos_le[STATS_COS_BUCKETS];
extern const double stats_err_le[STATS_ERR_BUCKETS];
extern const char *const stats_reason_names[STATS_R_COUNT];

/* The status codes counted by name; others count as one "other". */
#define STATS_HTTP_CODES 12
extern const int stats_http_codes[STATS_HTTP_CODES];
/* Responses so far with code stats_http_codes[i], or (i == STATS_HTTP_CODES)
 * with any other code. */
unsigned long stats_http_count(int i);

#endif
