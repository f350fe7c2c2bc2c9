/* prom.c: the server's counters (server/core/stats.h) as GET /metrics
 * renders them (Prometheus text format 0.0.4) and as Triton statistics with
 * each variant's figures (GET /v2/models/{m}/stats, which the A/B page
 * polls). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"
#include "server/core/stats.h"

/* ========================================================================
 * Prometheus text format 0.0.4
 * ====================================================================== */

static void head(sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One served variant name as /metrics and the stats endpoint see it:
 * copies taken under the locks, and a reference to the build serving it
 * (NULL when none), so rendering holds no lock. */
typedef struct {
    srv_model *m;
    srv_slot *sl;
    srv_variant *cur;
    stats_variant p;
    srv_vstate state;
    double traffic, share;
    bool rotation, is_reference;
    char error[600];
    srv_gate gate;
    cfg_variant want;
    double switch_s;
    int drift_window;
} row;

/* The rows of every loaded model (or only of `only`); the caller frees
 * them with rows_free. */
static row *rows_collect(srv_models *models, srv_model *only, int *n)
{
    int cap = 0;
    for (int i = 0; i < srv_models_count(models); i++) {
        srv_model *m = srv_models_at(models, i);
        pthread_mutex_lock(&m->lock);
        cap += m->nslots;
        pthread_mutex_unlock(&m->lock);
    }
    cap += 16; /* slots added meanwhile are left for the next scrape */
    row *r = calloc((size_t)cap, sizeof *r);
    *n = 0;
    if (!r)
        return NULL;
    for (int i = 0; i < srv_models_count(models); i++) {
        srv_model *m = srv_models_at(models, i);
        if (only && m != only)
            continue;
        pthread_mutex_lock(&m->lock);
        double total = 0;
        for (int k = 0; k < m->nslots; k++) {
            srv_slot *sl = m->slots[k];
            if (sl->present && sl->cur && sl->traffic > 0 && sl->state != SRV_VS_DEMOTED)
                total += sl->traffic;
        }
        const char *refname = m->cfg.reference >= 0 ? m->cfg.variants[m->cfg.reference].name : "";
        for (int k = 0; k < m->nslots && *n < cap; k++) {
            srv_slot *sl = m->slots[k];
            if (!m->loaded || !sl->present)
                continue;
            row *x = &r[(*n)++];
            x->m = m;
            x->sl = sl;
            x->cur = sl->cur;
            if (x->cur)
                srv_variant_ref(x->cur);
            x->state = sl->state;
            x->traffic = sl->traffic;
            x->rotation = sl->cur && sl->traffic > 0 && sl->state != SRV_VS_DEMOTED;
            x->share = x->rotation && total > 0 ? sl->traffic / total : 0;
            x->is_reference = !strcmp(sl->name, refname);
            memcpy(x->error, sl->error, sizeof x->error);
            x->gate = sl->gate;
            x->want = sl->want;
            x->switch_s = sl->switch_s;
            x->drift_window = m->cfg.drift_window;
        }
        pthread_mutex_unlock(&m->lock);
    }
    for (int k = 0; k < *n; k++) {
        pthread_mutex_lock(&r[k].sl->metrics.lock);
        memcpy(&r[k].p, &r[k].sl->metrics, sizeof r[k].p);
        pthread_mutex_unlock(&r[k].sl->metrics.lock);
    }
    return r;
}

static void rows_free(row *r, int n)
{
    for (int k = 0; k < n; k++)
        srv_variant_unref(r[k].cur);
    free(r);
}

/* Label values are config names (letters, digits, '-', '_', '.'), so they
 * need no escaping. */
static void labels(sbuf *b, const row *x)
{
    sb_printf(b, "{model=\"%s\",variant=\"%s\"", x->m->name, x->sl->name);
}

/* A histogram from per-bucket (non-cumulative) counts. */
static void hist_counts(sbuf *b, const char *name, const row *x, const uint64_t *le_n,
                        uint64_t inf, const double *le, int nle, double sum)
{
    uint64_t cum = 0;
    for (int i = 0; i < nle; i++) {
        cum += le_n[i];
        sb_printf(b, "%s_bucket", name);
        labels(b, x);
        sb_printf(b, ",le=\"%g\"} %llu\n", le[i], (unsigned long long)cum);
    }
    sb_printf(b, "%s_bucket", name);
    labels(b, x);
    sb_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)(cum + inf));
    sb_printf(b, "%s_sum", name);
    labels(b, x);
    sb_printf(b, "} %.9g\n", sum);
    sb_printf(b, "%s_count", name);
    labels(b, x);
    sb_printf(b, "} %llu\n", (unsigned long long)(cum + inf));
}

static void hist(sbuf *b, const char *name, const row *x, const stats_hist *h, const double *le,
                 int nle)
{
    hist_counts(b, name, x, h->le, h->inf, le, nle, h->sum);
}

static void counter(sbuf *b, const char *name, const row *x, uint64_t v)
{
    sb_puts(b, name);
    labels(b, x);
    sb_printf(b, "} %llu\n", (unsigned long long)v);
}

/* Runs its body once per row x (with p, its counters): rows and n in scope. */
#define EACH(...)                                                                             \
    do {                                                                                      \
        for (int kk = 0; kk < n; kk++) {                                                      \
            const row *x = &rows[kk];                                                         \
            const stats_variant *p = &x->p;                                                   \
            (void)p;                                                                          \
            __VA_ARGS__;                                                                      \
        }                                                                                     \
    } while (0)

/* The server: build, readiness, responses by code. */
static void render_server(sbuf *b, srv_models *models, sched *s)
{
    head(b, "mantissa_build_info", "gauge", "Build information; the value is always 1.");
    sb_puts(b, "mantissa_build_info{version=\"" MANTISSA_VERSION "\",commit=\"");
    /* a label value: backslash, quote and newline escaped */
    for (const char *c = mt_build_commit(); *c; c++)
        if (*c == '\\' || *c == '"')
            sb_printf(b, "\\%c", *c);
        else if (*c == '\n')
            sb_puts(b, "\\n");
        else
            sb_putc(b, *c);
    sb_puts(b, "\"} 1\n");
    head(b, "mantissa_ready", "gauge", "1 when the server admits inference requests.");
    sb_printf(b, "mantissa_ready %d\n", atomic_load(&models->ready) && !(s && sched_draining(s)));

    head(b, "mantissa_http_responses_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i <= STATS_HTTP_CODES; i++) {
        unsigned long c = stats_http_count(i);
        if (i < STATS_HTTP_CODES)
            sb_printf(b, "mantissa_http_responses_total{code=\"%d\"} %lu\n", stats_http_codes[i],
                      c);
        else
            sb_printf(b, "mantissa_http_responses_total{code=\"other\"} %lu\n", c);
    }

}

/* Requests, batches and queues per variant; in-flight per model. */
static void render_requests(sbuf *b, const row *rows, int n, srv_models *models, sched *s)
{
    head(b, "mantissa_request_success_total", "counter", "Inference requests answered 200.");
    EACH(counter(b, "mantissa_request_success_total", x, p->success));
    head(b, "mantissa_request_failures_total", "counter",
         "Inference requests that failed, by reason.");
    EACH({
        for (int r = 0; r < STATS_R_COUNT; r++) {
            sb_puts(b, "mantissa_request_failures_total");
            labels(b, x);
            sb_printf(b, ",reason=\"%s\"} %llu\n", stats_reason_names[r],
                      (unsigned long long)p->failures[r]);
        }
    });
    head(b, "mantissa_request_duration_seconds", "histogram",
         "Time from admission to the answer of successful inference requests.");
    EACH(hist(b, "mantissa_request_duration_seconds", x, &p->request, stats_dur_le, STATS_DUR_BUCKETS));
    head(b, "mantissa_queue_duration_seconds", "histogram",
         "Time successful requests waited before their first batch ran.");
    EACH(hist(b, "mantissa_queue_duration_seconds", x, &p->queue, stats_dur_le, STATS_DUR_BUCKETS));
    head(b, "mantissa_compute_duration_seconds", "histogram", "Time of each batch's forward pass.");
    EACH(hist(b, "mantissa_compute_duration_seconds", x, &p->compute, stats_dur_le, STATS_DUR_BUCKETS));
    head(b, "mantissa_batch_size", "histogram", "Texts per batch.");
    EACH(hist(b, "mantissa_batch_size", x, &p->batch, stats_batch_le, STATS_BATCH_BUCKETS));
    head(b, "mantissa_texts_total", "counter", "Texts embedded.");
    EACH(counter(b, "mantissa_texts_total", x, p->texts));
    head(b, "mantissa_tokens_total", "counter", "Tokens processed by the forward pass.");
    EACH(counter(b, "mantissa_tokens_total", x, p->tokens));
    head(b, "mantissa_truncated_texts_total", "counter",
         "Texts of answered requests cut to the model's max_seq_len.");
    EACH(counter(b, "mantissa_truncated_texts_total", x, p->truncated));
    head(b, "mantissa_queue_depth", "gauge", "Texts waiting for a batch.");
    EACH({
        sb_puts(b, "mantissa_queue_depth");
        labels(b, x);
        sb_printf(b, "} %ld\n", s && x->cur ? sched_queue_depth(s, x->cur) : 0L);
    });
    head(b, "mantissa_resident_weight_bytes", "gauge",
         "Bytes of model weights resident for the build serving a variant.");
    EACH({
        if (x->cur) {
            sb_puts(b, "mantissa_resident_weight_bytes");
            labels(b, x);
            sb_printf(b, ",precision=\"%s\"} %zu\n", mt_precision_name(x->cur->cfg.precision),
                      x->cur->model->info.resident_bytes);
        }
    });
    head(b, "mantissa_model_resident_bytes", "gauge",
         "Bytes the builds serving a model keep resident (weights, scales, tables).");
    for (int mi = 0; mi < srv_models_count(models); mi++) {
        srv_model *m = srv_models_at(models, mi);
        sb_printf(b, "mantissa_model_resident_bytes{model=\"%s\"} %zu\n", m->name,
                  srv_resident_bytes(models, m, NULL, NULL));
    }
    head(b, "mantissa_resident_bytes", "gauge", "Bytes the serving builds of every model keep resident.");
    sb_printf(b, "mantissa_resident_bytes %zu\n", srv_resident_bytes(models, NULL, NULL, NULL));
    head(b, "mantissa_memory_budget_bytes", "gauge",
         "server.memory_budget_mb in bytes (0: no budget).");
    sb_printf(b, "mantissa_memory_budget_bytes %zu\n", models->memory_budget);
    head(b, "mantissa_inflight_requests", "gauge",
         "Inference requests admitted and not yet answered.");
    for (int mi = 0; mi < srv_models_count(models); mi++) {
        srv_model *m = srv_models_at(models, mi);
        sb_printf(b, "mantissa_inflight_requests{model=\"%s\"} %ld\n", m->name,
                  s ? sched_inflight(s, m) : 0L);
    }
}

/* The hot-switch: each variant's state, rotation, share, builds. */
/* What each serving build runs on, and its load check's figures. */
static void render_builds(sbuf *b, const row *rows, int n)
{
    head(b, "mantissa_variant_kernel_info", "gauge",
         "What the build serving a variant runs on: backend, ISA level, GEMM kernel (always 1).");
    EACH({
        if (x->cur) {
            sb_puts(b, "mantissa_variant_kernel_info");
            labels(b, x);
            sb_printf(b, ",precision=\"%s\",device=\"%s\",isa=\"%s\",kernel=\"%s\"} 1\n",
                      mt_precision_name(x->cur->cfg.precision), x->cur->be->device,
                      srv_variant_isa(x->cur), srv_variant_kernel(x->cur));
        }
    });
    head(b, "mantissa_load_check_cosine", "gauge",
         "The load check of the build serving a variant: cosine of its vectors of the built-in "
         "probe texts to FP32's, mean and least (absent where every GEMM is FP32).");
    EACH({
        if (x->cur && x->cur->check.probes > 0) {
            sb_puts(b, "mantissa_load_check_cosine");
            labels(b, x);
            sb_printf(b, ",stat=\"mean\"} %.8f\n", x->cur->check.mean_cos);
            sb_puts(b, "mantissa_load_check_cosine");
            labels(b, x);
            sb_printf(b, ",stat=\"min\"} %.8f\n", x->cur->check.min_cos);
        }
    });
}

/* measure's figures of the builds serving variants (absent where not measured). */
static void render_speed(sbuf *b, const row *rows, int n)
{
    head(b, "mantissa_variant_speed_texts_per_second", "gauge",
         "The build serving a variant: texts per second on the built-in probe texts at batch 1 "
         "and 32, timed when it was built (models[].variants[].measure).");
    EACH({
        for (int k = 0; x->cur && x->cur->measured && k < 2; k++) {
            sb_puts(b, "mantissa_variant_speed_texts_per_second");
            labels(b, x);
            sb_printf(b, ",batch=\"%d\"} %.6g\n", x->cur->speed.batch[k],
                      x->cur->speed.tps[k]);
        }
    });
    head(b, "mantissa_variant_speed_vs_fp32", "gauge",
         "The build serving a variant: its speed over FP32's on the same texts at batch 1 and "
         "32, timed when it was built (models[].variants[].measure; under 1: slower).");
    EACH({
        for (int k = 0; x->cur && x->cur->measured && k < 2; k++) {
            sb_puts(b, "mantissa_variant_speed_vs_fp32");
            labels(b, x);
            sb_printf(b, ",batch=\"%d\"} %.6g\n", x->cur->speed.batch[k],
                      x->cur->speed_vs_fp32[k]);
        }
    });
}

static void render_variants(sbuf *b, const row *rows, int n, srv_models *models)
{
    head(b, "mantissa_variant_state", "gauge",
         "1 for the state each variant is in (loading, ready, failed, gate_failed, demoted).");
    EACH({
        for (int st = SRV_VS_LOADING; st <= SRV_VS_DEMOTED; st++) {
            sb_puts(b, "mantissa_variant_state");
            labels(b, x);
            sb_printf(b, ",state=\"%s\"} %d\n", srv_vstate_name((srv_vstate)st),
                      (int)x->state == st);
        }
    });
    head(b, "mantissa_variant_in_rotation", "gauge",
         "1 when unpinned requests may be routed to the variant.");
    EACH(counter(b, "mantissa_variant_in_rotation", x, x->rotation));
    head(b, "mantissa_variant_traffic_share", "gauge",
         "The variant's configured share of unpinned requests (0 to 1).");
    EACH({
        sb_puts(b, "mantissa_variant_traffic_share");
        labels(b, x);
        sb_printf(b, "} %.6g\n", x->share);
    });
    head(b, "mantissa_variant_builds_total", "counter", "Builds of the variant that loaded.");
    EACH(counter(b, "mantissa_variant_builds_total", x, p->builds));
    head(b, "mantissa_variant_build_failures_total", "counter",
         "Builds of the variant that failed to load.");
    EACH(counter(b, "mantissa_variant_build_failures_total", x, p->build_failures));
    head(b, "mantissa_variant_gate_failures_total", "counter",
         "Builds of the variant that missed their promotion gate.");
    EACH(counter(b, "mantissa_variant_gate_failures_total", x, p->gate_failures));
    head(b, "mantissa_variant_demotions_total", "counter",
         "Times the variant was taken out of rotation for live drift under its floor.");
    EACH(counter(b, "mantissa_variant_demotions_total", x, p->demotions));
    head(b, "mantissa_variant_switch_seconds", "gauge",
         "Time from noticing a config change to the new build serving, the last time.");
    EACH({
        sb_puts(b, "mantissa_variant_switch_seconds");
        labels(b, x);
        sb_printf(b, "} %.6g\n", x->switch_s);
    });
    head(b, "mantissa_variant_builds_alive", "gauge",
         "Builds in memory: serving, or swapped out and still finishing requests.");
    sb_printf(b, "mantissa_variant_builds_alive %ld\n", atomic_load(&models->builds_alive));

}

/* Shadow runs and the drift they measure. */
static void render_drift(sbuf *b, const row *rows, int n, srv_models *models, sched *s)
{
    head(b, "mantissa_shadow_texts_total", "counter",
         "Texts also run on the reference: compared, dropped (shadow queue full or "
         "too late) or failed.");
    EACH({
        static const char *const res[] = {"compared", "dropped", "failed"};
        const uint64_t v[] = {p->shadow_compared, p->shadow_dropped, p->shadow_failed};
        for (int r = 0; r < 3; r++) {
            sb_puts(b, "mantissa_shadow_texts_total");
            labels(b, x);
            sb_printf(b, ",result=\"%s\"} %llu\n", res[r], (unsigned long long)v[r]);
        }
    });
    head(b, "mantissa_shadow_queue_depth", "gauge", "Shadow texts waiting for the reference.");
    for (int mi = 0; mi < srv_models_count(models); mi++) {
        srv_model *m = srv_models_at(models, mi);
        sb_printf(b, "mantissa_shadow_queue_depth{model=\"%s\"} %ld\n", m->name,
                  s ? sched_shadow_depth(s, m) : 0L);
    }
    head(b, "mantissa_drift_cosine", "histogram",
         "Cosine similarity of the serving build's vectors to the reference's (shadow runs).");
    EACH({
        if (x->cur) {
            stats_drift *d = &x->cur->drift;
            pthread_mutex_lock(&d->lock);
            uint64_t le[STATS_COS_BUCKETS], inf = d->cos_inf;
            memcpy(le, d->cos_le, sizeof le);
            double sum = d->sum_cos;
            pthread_mutex_unlock(&d->lock);
            hist_counts(b, "mantissa_drift_cosine", x, le, inf, stats_cos_le, STATS_COS_BUCKETS, sum);
        }
    });
    head(b, "mantissa_drift_max_abs_error", "histogram",
         "Largest absolute difference of an element to the reference's vector (shadow runs).");
    EACH({
        if (x->cur) {
            stats_drift *d = &x->cur->drift;
            pthread_mutex_lock(&d->lock);
            uint64_t le[STATS_ERR_BUCKETS], inf = d->err_inf;
            memcpy(le, d->err_le, sizeof le);
            double sum = d->sum_err;
            pthread_mutex_unlock(&d->lock);
            hist_counts(b, "mantissa_drift_max_abs_error", x, le, inf, stats_err_le, STATS_ERR_BUCKETS,
                        sum);
        }
    });

}

/* Config reloads. The last one is ok when its file was applied and every
 * variant of the config in force has built (a failed build counts until a
 * reload builds it or removes it). */
static void render_reloads(sbuf *b, srv_models *models, const row *rows, int n)
{
    srv_reload_status *rs = &models->reload;
    pthread_mutex_lock(&rs->lock);
    uint64_t ok = rs->ok, failed = rs->failed, gen = rs->generation;
    bool last_ok = rs->last_error[0] == 0;
    pthread_mutex_unlock(&rs->lock);
    for (int i = 0; i < n; i++)
        last_ok &= rows[i].state != SRV_VS_FAILED;
    head(b, "mantissa_config_reloads_total", "counter",
         "Config reloads, by result (failed: refused, nothing changed).");
    sb_printf(b, "mantissa_config_reloads_total{result=\"ok\"} %llu\n", (unsigned long long)ok);
    sb_printf(b, "mantissa_config_reloads_total{result=\"failed\"} %llu\n",
              (unsigned long long)failed);
    head(b, "mantissa_config_reload_failures_total", "counter",
         "Config reloads refused (invalid file); the previous config keeps serving.");
    sb_printf(b, "mantissa_config_reload_failures_total %llu\n", (unsigned long long)failed);
    head(b, "mantissa_config_last_reload_ok", "gauge",
         "1 when the last reload was applied and every variant it asks for has built; 0 when "
         "the file was refused or a variant failed to build (mantissa_variant_state).");
    sb_printf(b, "mantissa_config_last_reload_ok %d\n", last_ok);
    head(b, "mantissa_config_generation", "gauge", "Config versions applied since start (1: the first).");
    sb_printf(b, "mantissa_config_generation %llu\n", (unsigned long long)gen);
}
#undef EACH

/* The transport's connections and what its limit did. */
static void render_connections(sbuf *b, http_server *http)
{
    conn_stats c;
    if (!http)
        return;
    http_get_conn_stats(http, &c);
    head(b, "mantissa_http_connections_open", "gauge", "Client connections open now.");
    sb_printf(b, "mantissa_http_connections_open %ld\n", c.open);
    head(b, "mantissa_http_connections_busy", "gauge",
         "Client connections with a request in progress now.");
    sb_printf(b, "mantissa_http_connections_busy %ld\n", c.busy);
    head(b, "mantissa_http_connections_limit", "gauge",
         "server.connection_limit: connections kept open.");
    sb_printf(b, "mantissa_http_connections_limit %ld\n", c.limit);
    head(b, "mantissa_http_connections_accepted_total", "counter", "Client connections admitted.");
    sb_printf(b, "mantissa_http_connections_accepted_total %lu\n", c.accepted);
    head(b, "mantissa_http_connections_evicted_total", "counter",
         "Idle connections closed at the connection limit to admit new ones.");
    sb_printf(b, "mantissa_http_connections_evicted_total %lu\n", c.evicted);
    head(b, "mantissa_http_connections_reserved_total", "counter",
         "Connections admitted over the limit for health probes only (every other one busy).");
    sb_printf(b, "mantissa_http_connections_reserved_total %lu\n", c.reserved);
    head(b, "mantissa_http_connections_refused_total", "counter",
         "Connections closed at once, by reason (limit: the limit and the probes' reserve "
         "full of busy connections; per_ip: server.max_connections_per_ip).");
    sb_printf(b, "mantissa_http_connections_refused_total{reason=\"limit\"} %lu\n",
              c.refused_limit);
    sb_printf(b, "mantissa_http_connections_refused_total{reason=\"per_ip\"} %lu\n",
              c.refused_per_ip);
}

void prom_render(sbuf *b, const http_app *app)
{
    srv_models *models = app->models;
    sched *s = app->sched;
    int n;
    row *rows = rows_collect(models, NULL, &n);
    if (!rows) {
        b->oom = true;
        return;
    }
    render_server(b, models, s);
    render_requests(b, rows, n, models, s);
    render_builds(b, rows, n);
    render_speed(b, rows, n);
    render_variants(b, rows, n, models);
    render_drift(b, rows, n, models, s);
    render_reloads(b, models, rows, n);
    render_connections(b, app->http);
    api_trace_render(b, app);
    rows_free(rows, n);
}

/* ========================================================================
 * Triton statistics, with each variant's figures
 * ====================================================================== */

static void dur(sbuf *b, const char *name, uint64_t count, uint64_t ns)
{
    sb_printf(b, "\"%s\":{\"count\":%llu,\"ns\":%llu}", name, (unsigned long long)count,
              (unsigned long long)ns);
}

/* A JSON number, or null for what is not finite. */
void api_json_num(sbuf *b, double v)
{
    if (isfinite(v))
        sb_printf(b, "%.9g", v);
    else
        sb_puts(b, "null");
}

/* A variant's live drift from the reference (shadow runs), or null. */
static void drift_json(sbuf *b, const row *x, const char *refname)
{
    if (x->cur && !x->is_reference && refname[0]) {
        stats_drift_summary d;
        stats_drift_summarize(&x->cur->drift, x->drift_window, &d);
        sb_puts(b, ",\"drift\":{\"reference\":");
        sb_json_str(b, refname, strlen(refname));
        sb_printf(b, ",\"count\":%llu,\"mean\":", (unsigned long long)d.count);
        api_json_num(b, d.count ? d.mean : NAN);
        sb_puts(b, ",\"p1\":");
        api_json_num(b, d.count ? d.p1 : NAN);
        sb_puts(b, ",\"min\":");
        api_json_num(b, d.count ? d.min : NAN);
        sb_puts(b, ",\"window_mean\":");
        api_json_num(b, d.count ? d.window_mean : NAN);
        sb_puts(b, ",\"mean_max_abs_err\":");
        api_json_num(b, d.count ? d.mean_max_abs_err : NAN);
        sb_puts(b, ",\"max_abs_err\":");
        api_json_num(b, d.count ? d.max_abs_err : NAN);
        sb_puts(b, ",\"floor\":");
        api_json_num(b, x->want.drift_floor > 0 ? x->want.drift_floor : NAN);
        sb_putc(b, '}');
    } else {
        sb_puts(b, ",\"drift\":null");
    }
}

/* A variant's last promotion gate, or null when it has none. */
static void gate_json(sbuf *b, const row *x)
{
    if (x->gate.ran || x->want.gate_probes[0]) {
        const srv_gate *g = &x->gate;
        sb_printf(b, ",\"gate\":{\"ran\":%s,\"passed\":%s,\"probes\":%d,\"mean_cosine\":",
                  g->ran ? "true" : "false", g->passed ? "true" : "false", g->probes);
        api_json_num(b, g->ran ? g->mean_cosine : NAN);
        sb_puts(b, ",\"min_cosine\":");
        api_json_num(b, g->ran ? g->min_cosine : NAN);
        sb_puts(b, ",\"p99_ms\":");
        api_json_num(b, g->ran ? g->p99_ms : NAN);
        sb_puts(b, ",\"reference_p99_ms\":");
        api_json_num(b, g->ran ? g->ref_p99_ms : NAN);
        sb_puts(b, ",\"why\":");
        sb_json_str(b, g->why, strlen(g->why));
        sb_putc(b, '}');
    } else {
        sb_puts(b, ",\"gate\":null");
    }
}

/* One variant's entry of the stats: its state, share of traffic, request
 * counts and latency histogram, its drift from the reference and its gate
 * figures (what the A/B page draws). */
static void variant_json(sbuf *b, const row *x, const char *refname)
{
    const stats_variant *p = &x->p;
    sb_puts(b, "{\"name\":");
    sb_json_str(b, x->sl->name, strlen(x->sl->name));
    sb_printf(b, ",\"state\":\"%s\",\"error\":", srv_vstate_name(x->state));
    sb_json_str(b, x->error, strlen(x->error));
    sb_printf(b, ",\"in_rotation\":%s,\"traffic\":", x->rotation ? "true" : "false");
    api_json_num(b, x->traffic);
    sb_puts(b, ",\"share\":");
    api_json_num(b, x->share);
    sb_printf(b, ",\"reference\":%s,\"precision\":\"%s\"", x->is_reference ? "true" : "false",
              mt_precision_name(x->want.precision));
    if (x->cur) {
        sb_printf(b, ",\"serving\":{\"precision\":\"%s\",\"calibration\":",
                  mt_precision_name(x->cur->cfg.precision));
        sb_json_str(b, x->cur->cfg.calibration, strlen(x->cur->cfg.calibration));
        sb_puts(b, ",\"space_id\":");
        sb_json_str(b, x->cur->space, strlen(x->cur->space));
        sb_printf(b, ",\"weights_checksum\":\"%s\",\"build_s\":", x->cur->checksum);
        api_json_num(b, x->cur->build_s);
        sb_printf(b, ",\"resident_bytes\":%zu}", x->cur->model->info.resident_bytes);
    } else {
        sb_puts(b, ",\"serving\":null");
    }
    sb_puts(b, ",\"switch_s\":");
    api_json_num(b, x->switch_s);
    uint64_t fails = 0;
    for (int r = 0; r < STATS_R_COUNT; r++)
        fails += p->failures[r];
    sb_printf(b, ",\"requests\":{\"success\":%llu,\"failed\":%llu,\"texts\":%llu}",
              (unsigned long long)p->success, (unsigned long long)fails,
              (unsigned long long)p->texts);
    sb_puts(b, ",\"latency\":{\"le_s\":[");
    for (int i = 0; i < STATS_DUR_BUCKETS; i++)
        sb_printf(b, "%s%g", i ? "," : "", stats_dur_le[i]);
    sb_puts(b, "],\"counts\":[");
    for (int i = 0; i <= STATS_DUR_BUCKETS; i++)
        sb_printf(b, "%s%llu", i ? "," : "",
                  (unsigned long long)(i < STATS_DUR_BUCKETS ? p->request.le[i] : p->request.inf));
    sb_puts(b, "],\"sum_s\":");
    api_json_num(b, p->request.sum);
    sb_puts(b, "}");
    sb_printf(b, ",\"shadow\":{\"compared\":%llu,\"dropped\":%llu,\"failed\":%llu}",
              (unsigned long long)p->shadow_compared, (unsigned long long)p->shadow_dropped,
              (unsigned long long)p->shadow_failed);
    drift_json(b, x, refname);
    gate_json(b, x);
    sb_putc(b, '}');
}

/* The counters of every variant of a model, summed into t (failures of
 * every reason into *fails). */
static void sum_rows(const row *rows, int n, stats_variant *t, uint64_t *fails)
{
    memset(t, 0, sizeof *t);
    *fails = 0;
    for (int k = 0; k < n; k++) {
        const stats_variant *p = &rows[k].p;
        t->success += p->success;
        t->ok_ns += p->ok_ns;
        t->fail_ns += p->fail_ns;
        t->queue_ns += p->queue_ns;
        t->infer_ns += p->infer_ns;
        t->infer_count += p->infer_count;
        t->texts += p->texts;
        t->batches += p->batches;
        if (p->last_ms > t->last_ms)
            t->last_ms = p->last_ms;
        for (int r = 0; r < STATS_R_COUNT; r++)
            *fails += p->failures[r];
        for (int i = 0; i < p->nbs; i++) {
            int j = 0;
            while (j < t->nbs && t->bs[j].size != p->bs[i].size)
                j++;
            if (j == t->nbs && t->nbs < STATS_MAX_BATCH_STATS)
                t->bs[t->nbs++].size = p->bs[i].size;
            if (j < t->nbs) {
                t->bs[j].count += p->bs[i].count;
                t->bs[j].ns += p->bs[i].ns;
            }
        }
    }
}

void prom_model_stats_json(sbuf *b, srv_models *models, srv_model *m)
{
    int n;
    row *rows = rows_collect(models, m, &n);
    if (!rows) {
        b->oom = true;
        return;
    }
    stats_variant t;
    uint64_t fails;
    sum_rows(rows, n, &t, &fails);
    sb_puts(b, "{\"name\":");
    sb_json_str(b, m->name, strlen(m->name));
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
    /* not Triton's: each variant's figures (README: "Variant statistics") */
    pthread_mutex_lock(&m->lock);
    char refname[CFG_NAME_MAX] = "";
    if (m->cfg.reference >= 0)
        snprintf(refname, sizeof refname, "%s", m->cfg.variants[m->cfg.reference].name);
    double rate = m->cfg.shadow_rate;
    pthread_mutex_unlock(&m->lock);
    sb_puts(b, "],\"reference\":");
    if (refname[0])
        sb_json_str(b, refname, strlen(refname));
    else
        sb_puts(b, "null");
    sb_puts(b, ",\"shadow_rate\":");
    api_json_num(b, rate);
    sb_puts(b, ",\"variants\":[");
    for (int k = 0; k < n; k++) {
        if (k)
            sb_putc(b, ',');
        variant_json(b, &rows[k], refname);
    }
    sb_puts(b, "]}");
    rows_free(rows, n);
}

