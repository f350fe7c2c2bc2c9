/* main.c: the serve subcommand's wiring: the config and its models, API
 * keys, the scheduler, the hot-switch, and the HTTP transport with the
 * API's routes and hooks; then the scheduler's loop on this thread until a
 * shutdown has drained; then everything in reverse, on one unwind path.
 *
 *   cmd/main.c -> mt_serve -> server/core (models, sched, reload)
 *                          -> server/net (http) with server/api (routes, hooks)
 */
#include "server/main.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/options.h"
#include "engine/peak_rss.h"
#include "engine/version.h"
#include "server/api/api.h"
#include "server/base/log.h"
#include "server/core/reload.h"
#include "server/core/sched.h"
#include "server/net/auth.h"
#include "server/net/http.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* How v's batches use its backend's threads, in words: all of them, or one
 * thread for batches of up to solo_tokens tokens (team.c measured that one
 * thread is faster there). */
static void team_words(char *buf, size_t n, const srv_variant *v)
{
    const int threads = v->be->threads;
    if (threads <= 1)
        snprintf(buf, n, "1 thread");
    else if (v->solo_tokens <= 0)
        snprintf(buf, n, "%d threads for every batch", threads);
    else
        snprintf(buf, n, "%d threads; batches of up to %d tokens on one thread", threads,
                 v->solo_tokens);
}

/* The line of a variant that serves: precision, backend, threads, the load
 * check, its speed against FP32's (measure), resident size, space. */
static void log_loaded(const srv_model *m, const srv_variant *v)
{
    const double resident = v->model->info.resident_bytes / 1048576.0,
                 gemm = v->model->info.gemm_bytes / 1048576.0;
    const double peak = mt_peak_rss_bytes() / 1048576.0; /* this process's own (VmHWM) */
    log_line l;
    log_begin(&l, LOG_INFO | LOG_ALWAYS, "loaded");
    log_str(&l, "model", m->name);
    log_str(&l, "variant", v->cfg.name);
    log_str(&l, "precision", mt_precision_name(v->cfg.precision));
    log_str(&l, "device", v->be->device);
    log_str(&l, "isa", srv_variant_isa(v));
    log_str(&l, "kernel", srv_variant_kernel(v));
    log_int(&l, "threads", v->be->threads);
    log_int(&l, "solo_tokens", v->be->threads > 1 && v->solo_tokens > 0 ? v->solo_tokens : 0);
    if (v->check.probes > 0) {
        log_int(&l, "check_probes", v->check.probes);
        log_num(&l, "check_mean_cos", v->check.mean_cos, 6);
        log_num(&l, "check_min_cos", v->check.min_cos, 6);
    }
    if (v->measured) {
        log_num(&l, "speed_b1_texts_per_s", v->speed.tps[0], 1);
        log_num(&l, "speed_b32_texts_per_s", v->speed.tps[1], 1);
        log_num(&l, "speed_b1_vs_fp32", v->speed_vs_fp32[0], 2);
        log_num(&l, "speed_b32_vs_fp32", v->speed_vs_fp32[1], 2);
        log_num(&l, "measure_s", v->measure_s, 2);
    }
    log_num(&l, "resident_mib", resident, 1);
    log_num(&l, "gemm_mib", gemm, 1);
    log_num(&l, "load_s", v->build_s, 2);
    log_num(&l, "peak_rss_mib", peak, 1);
    log_str(&l, "space", v->space);
    char team[96];
    team_words(team, sizeof team, v);
    log_words(&l, "loaded %s@%s (%s on the %s backend, ISA %s, kernel %s; %s; built in %.2f s, "
              "process peak RSS %.1f MiB so far", m->name, v->cfg.name,
              mt_precision_name(v->cfg.precision), v->be->device, srv_variant_isa(v),
              srv_variant_kernel(v), team, v->build_s, peak);
    if (v->check.probes > 0)
        log_words(&l, "; load check: cosine to FP32 %.6f mean, %.6f least on %d probes",
                  v->check.mean_cos, v->check.min_cos, v->check.probes);
    if (v->measured)
        log_words(&l, "; measured in %.2f s: %.1f texts/s at batch 1 (%.2fx fp32), %.1f at "
                  "batch %d (%.2fx)", v->measure_s, v->speed.tps[0], v->speed_vs_fp32[0],
                  v->speed.tps[1], v->speed.batch[1], v->speed_vs_fp32[1]);
    log_words(&l, "): %.1f MiB resident, %.1f MiB GEMM weights, space %s", resident, gemm,
              v->space);
    log_end(&l);
}

/* One line per variant: loaded (precision, backend, resident size, space)
 * or out of rotation (why). */
static void print_loaded(const srv_models *s)
{
    for (int i = 0; i < srv_models_count(s); i++) {
        srv_model *m = s->models[i];
        for (int k = 0; k < m->nslots; k++) {
            const srv_slot *sl = m->slots[k];
            if (sl->cur) {
                log_loaded(m, sl->cur);
                srv_log_speed_warning(m, sl->cur, LOG_WARN | LOG_ALWAYS);
                continue;
            }
            log_line l;
            log_begin(&l, LOG_WARN | LOG_ALWAYS, "out of rotation");
            log_str(&l, "model", m->name);
            log_str(&l, "variant", sl->name);
            log_str(&l, "error", sl->error);
            log_words(&l, "%s@%s is out of rotation: %s", m->name, sl->name, sl->error);
            log_end(&l);
        }
    }
}

/* Each model's resident size, then the total (and the budget). */
static void print_ready(srv_models *s, double seconds)
{
    for (int i = 0; i < srv_models_count(s); i++) {
        srv_model *m = srv_models_at(s, i);
        const double mib = srv_resident_bytes(s, m, NULL, NULL) / 1048576.0;
        log_line l;
        log_begin(&l, LOG_INFO | LOG_ALWAYS, "model resident");
        log_str(&l, "model", m->name);
        log_num(&l, "resident_mib", mib, 1);
        log_words(&l, "model %s: %.1f MiB resident", m->name, mib);
        log_end(&l);
    }
    const double mib = srv_resident_bytes(s, NULL, NULL, NULL) / 1048576.0;
    log_line l;
    log_begin(&l, LOG_INFO | LOG_ALWAYS, "models ready");
    log_num(&l, "seconds", seconds, 2);
    log_num(&l, "resident_mib", mib, 1);
    if (s->memory_budget)
        log_int(&l, "memory_budget_mb", (long long)(s->memory_budget >> 20));
    log_words(&l, "models ready in %.2f s: %.1f MiB resident in all", seconds, mib);
    if (s->memory_budget)
        log_words(&l, " (server.memory_budget_mb %zu)", s->memory_budget >> 20);
    log_end(&l);
}

/* An error that stops the start (or a CLI command): written at every
 * log_level, as "mantissa: ..." in text. */
#define FATAL(...) log_msg(LOG_ERROR | LOG_ALWAYS, __VA_ARGS__)

srv_models *mt_load_config_models(const char *path, cfg_config **cfg)
{
    mt_err err;
    if (cfg_load(path, cfg, &err) != MT_OK) {
        FATAL("%s", err.msg);
        return NULL;
    }
    srv_models *s = mt_load_models(*cfg);
    if (!s) {
        cfg_free(*cfg);
        *cfg = NULL; /* the caller frees what it holds on every path */
    }
    return s;
}

srv_models *mt_load_models(const cfg_config *cfg)
{
    mt_err err;
    srv_models *s = NULL;
    double t0 = now_s();
    if (srv_models_load(cfg, &s, &err) != MT_OK) {
        FATAL("%s: %s", cfg->source, err.msg);
        return NULL;
    }
    print_loaded(s);
    print_ready(s, now_s() - t0);
    return s;
}

/* What serve holds, released in reverse order by serve_free. */
typedef struct {
    cfg_config *cfg;
    srv_models *models;
    auth_keys *keys;
    sched *sched;
    reloader *reload;
    int listen_fd; /* reserved before the models are built; http owns it once started */
    http_server *http;
    grpc_front *grpc; /* bound before the models are built; NULL: no gRPC */
    http_app app;
} serving;

/* The scheduler's shutdown hooks: stop accepting connections and calls;
 * once every request is answered, take HTTP and gRPC off the loop so that
 * the loop can end. */
static void serve_quiesce(void *arg)
{
    serving *v = arg;
    http_quiesce(v->http);
    grpc_front_quiesce(v->grpc);
}

static void serve_detach(void *arg)
{
    serving *v = arg;
    http_detach(v->http);
    grpc_front_detach(v->grpc);
}

/* Asynchronous signals are handled by the scheduler's loop thread only.
 * Every other thread (engine workers, the reload loader, the OpenMP teams
 * they start) inherits a mask that blocks them, because a
 * handler must never run on a thread inside a GEMM: oneDNN's JIT GEMM
 * kernels (2.x, up to 3.11) point rsp into a heap buffer while they run,
 * and a signal frame pushed there corrupts the heap (oneDNN issue 4845,
 * fixed upstream in PR 4855). Faults (SEGV, BUS, FPE, ILL, TRAP, ABRT,
 * SYS) stay deliverable: they are raised by the faulting thread itself. */
static void block_async_signals(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    static const int sync_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof sync_sigs / sizeof sync_sigs[0]; i++)
        sigdelset(&all, sync_sigs[i]);
    pthread_sigmask(SIG_BLOCK, &all, old);
}

static void serve_free(serving *v)
{
    if (v->sched) /* the hooks name the HTTP and gRPC servers, which go first */
        sched_set_hooks(v->sched, NULL, NULL, NULL);
    http_stop(v->http);
    grpc_front_stop(v->grpc);
    api_trace_stop(&v->app); /* after the last request's spans */
    if (!v->http && v->listen_fd > 0)
        close(v->listen_fd);
    sched_destroy(v->sched); /* before the reloader: closing the loop calls its close hook */
    reload_destroy(v->reload);
    auth_free(v->keys);
    srv_models_free(v->models);
    cfg_free(v->cfg);
}

/* The runtime options' warnings ("mantissa: ..." lines, engine/options.c),
 * which cmd/main.c leaves to serve: written in the log's format. */
static void log_option_warnings(void)
{
    static const char prefix[] = "mantissa: ";
    for (const char *w = mt_options_warnings(); *w;) {
        size_t n = strcspn(w, "\n");
        const char *line = w;
        w += n + (w[n] == '\n');
        if (!strncmp(line, prefix, sizeof prefix - 1)) {
            line += sizeof prefix - 1;
            n -= sizeof prefix - 1;
        }
        if (n)
            log_msg(LOG_WARN | LOG_ALWAYS, "%.*s", (int)n, line);
    }
}

/* "serving on": the version, its commit and the address (and gRPC's). */
static void log_serving(const cfg_config *c, int port, int grpc_port)
{
    const bool tls = c->tls_cert[0] != 0, v6 = strchr(c->listen_host, ':') != NULL;
    char address[300];
    snprintf(address, sizeof address, "%s%s%s:%d", v6 ? "[" : "", c->listen_host,
             v6 ? "]" : "", port);
    log_line l;
    log_begin(&l, LOG_INFO | LOG_ALWAYS, "serving on");
    log_str(&l, "version", MANTISSA_VERSION);
    log_str(&l, "commit", mt_build_commit());
    log_str(&l, "address", address);
    log_int(&l, "port", port);
    log_bool(&l, "tls", tls);
    char grpc[300] = "";
    if (grpc_port > 0) {
        const bool g6 = strchr(c->grpc_host, ':') != NULL;
        snprintf(grpc, sizeof grpc, "%s%s%s:%d", g6 ? "[" : "", c->grpc_host, g6 ? "]" : "",
                 grpc_port);
        log_str(&l, "grpc_address", grpc);
        log_int(&l, "grpc_port", grpc_port);
    }
    log_words(&l, "version %s (commit %s), serving on %s%s:%d%s%s", MANTISSA_VERSION,
              mt_build_commit(), tls ? "https://" : "", c->listen_host, port,
              *grpc ? ", KServe v2 gRPC on " : "", grpc);
    log_end(&l);
}

/* The config, with the command line's overrides; the log's format and
 * level from it. */
static int serve_config(serving *v, const char *path, const mt_serve_opts *o)
{
    const char *listen = o->listen, *format = o->log_format;
    mt_err err;
    if (format) /* known before the file is read: its errors follow it too */
        log_set_format(log_format_parse(format));
    if (cfg_load(path, &v->cfg, &err) != MT_OK) {
        log_option_warnings();
        FATAL("%s", err.msg);
        return 1;
    }
    if (format && cfg_override_log_format(v->cfg, format) != 0) {
        FATAL("--log-format: \"%s\" is not json or text", format);
        return 1;
    }
    log_set_format(v->cfg->log_format);
    log_set_level(v->cfg->log_level);
    log_option_warnings();
    if (listen && cfg_override_listen(v->cfg, listen) != 0) {
        FATAL("--listen: \"%s\" is not ADDR:PORT", listen);
        return 1;
    }
    if (o->grpc_listen && cfg_override_grpc_listen(v->cfg, o->grpc_listen) != 0) {
        FATAL("--grpc-listen: \"%s\" is not ADDR:PORT or off", o->grpc_listen);
        return 1;
    }
    return 0;
}

/* gRPC's options (the loop, routes and app are set when it starts). */
static grpc_front_options grpc_options(serving *v)
{
    const cfg_config *c = v->cfg;
    grpc_front_options o = {.host = c->grpc_host, .port = c->grpc_port,
                            .max_message_bytes = c->max_body_bytes,
                            .max_streams = c->grpc_max_streams, .tls_cert = c->tls_cert,
                            .tls_key = c->tls_key, .auth = v->keys, .hooks = api_hooks(),
                            .app = &v->app};
    o.methods = api_grpc_methods(&o.nmethods);
    o.routes = api_routes(&o.nroutes);
    if (v->sched)
        o.loop = sched_loop(v->sched);
    return o;
}

/* Everything but the loop; logs the error and returns 1 on failure. */
static int serve_start(serving *v, const char *path, const mt_serve_opts *so)
{
    mt_err err;
    if (serve_config(v, path, so) != 0)
        return 1;
    const cfg_config *c = v->cfg;
    /* what can fail fast, before the models take their seconds to build */
    if (c->api_keys_file[0] && auth_load(c->api_keys_file, &v->keys, &err) != MT_OK) {
        FATAL("%s: %s", path, err.msg);
        return 1;
    }
    if (http_bind(c->listen_host, c->listen_port, &v->listen_fd, &err) != MT_OK) {
        FATAL("%s", err.msg);
        return 1;
    }
    grpc_front_options go = grpc_options(v);
    if (c->grpc_port >= 0 && grpc_front_bind(&go, &v->grpc, &err) != MT_OK) {
        FATAL("%s", err.msg);
        return 1;
    }
    if (!(v->models = mt_load_models(v->cfg)))
        return 1;
    if (sched_create(c, v->models, &v->sched, &err) != MT_OK ||
        reload_create(v->sched, v->models, c, path, &v->reload, &err) != MT_OK) {
        FATAL("%s", err.msg);
        return 1;
    }
    v->app = (http_app){.cfg = c, .models = v->models, .sched = v->sched, .reload = v->reload};
    if (api_trace_start(&v->app, &err) != MT_OK) {
        FATAL("%s", err.msg);
        return 1;
    }
    http_options o = {.host = c->listen_host, .port = c->listen_port,
                      .listen_fd = v->listen_fd, .loop = sched_loop(v->sched),
                      .max_body_bytes = c->max_body_bytes,
                      .connection_limit = c->connection_limit,
                      .probe_connections = c->probe_connections,
                      .max_connections_per_ip = c->max_connections_per_ip,
                      .connection_timeout_s = c->connection_timeout_s, .tls_cert = c->tls_cert,
                      .tls_key = c->tls_key, .auth = v->keys, .hooks = api_hooks(),
                      .app = &v->app};
    o.routes = v->app.routes = api_routes(&o.nroutes);
    v->app.nroutes = o.nroutes;
    if (http_start(&o, &v->http, &err) != MT_OK) {
        FATAL("%s", err.msg);
        return 1;
    }
    v->app.http = v->http; /* for the connection counts in /metrics */
    go = grpc_options(v);
    if (v->grpc && grpc_front_start(v->grpc, &go, &err) != MT_OK) {
        FATAL("%s", err.msg);
        return 1;
    }
    sched_set_hooks(v->sched, serve_quiesce, serve_detach, v);
    log_serving(c, http_port(v->http), v->grpc ? grpc_front_port(v->grpc) : 0);
    return 0;
}

int mt_serve(const char *path, const mt_serve_opts *o)
{
    signal(SIGPIPE, SIG_IGN);
    /* Blocked from here, before the first thread exists, so every thread
     * inherits the mask; this thread unblocks them when its loop starts (a
     * SIGTERM during the load waits until then and drains as usual). */
    sigset_t old_mask;
    block_async_signals(&old_mask);
    serving v = {0};
    int rc = serve_start(&v, path, o);
    if (rc == 0) {
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        rc = sched_run(v.sched);
    }
    serve_free(&v);
    if (rc == 0) {
        log_line l;
        log_begin(&l, LOG_INFO | LOG_ALWAYS, "stopped");
        log_end(&l);
    }
    return rc;
}
