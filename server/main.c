/* main.c: the mantissa command line: one binary, several subcommands.
 *
 *   mantissa serve --config FILE [--listen ADDR:PORT]
 *   mantissa embed --config FILE [--model NAME[@VARIANT]] [--jsonl]   < texts
 *   mantissa eval  --config FILE --stsb FILE [--model NAME[@VARIANT]]
 *   mantissa bench --config FILE --ids FILE [--batch 1,32] [--seconds S]
 *
 * Only this file prints to stdout or exits; everything below it returns
 * errors as values.
 */
#include <cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/metrics.h"
#include "server/api/api.h"
#include "server/net/auth.h"
#include "cmd/cmds.h"
#include "server/core/config.h"
#include "server/net/http.h"
#include "server/base/log.h"
#include "server/core/models.h"
#include "server/core/reload.h"
#include "server/core/sched.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mantissa COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  serve   serve the models of a config over HTTP (OpenAI and KServe v2 APIs)\n"
            "  embed   embed texts from stdin (one per line, or JSON strings with --jsonl);\n"
            "          prints one JSON array of floats per line\n"
            "  eval    STS-B Spearman (x100) of a model on the STS Benchmark test file\n"
            "  bench   engine throughput (sentences/s) on given token ids, per batch size\n"
            "  quantize  write a variant's quantized weights (see mantissa quantize --help)\n"
            "  compare   the precision report: every variant against FP32 (mantissa compare --help)\n"
            "\n"
            "common options:\n"
            "  --config FILE      config file (default config/mantissa.json)\n"
            "  --model NAME[@V]   model (and variant) for embed/eval/bench (default: the first)\n"
            "serve:  --listen ADDR:PORT   overrides server.listen\n"
            "eval:   --stsb FILE          the STS-B test split (sts-test.csv)\n"
            "bench:  --ids FILE           JSON list of token-id lists ([CLS] ... [SEP])\n"
            "        --batch LIST         batch sizes, comma-separated (default 1,32)\n"
            "        --seconds S          minimum time per batch size (default 3)\n"
            "\n"
            "mantissa COMMAND --help shows this text.\n");
}

typedef struct {
    const char *config, *listen, *model, *stsb, *ids, *batches;
    double seconds;
    int jsonl;
} opts;

static int parse_opts(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"config", required_argument, 0, 'c'}, {"listen", required_argument, 0, 'l'},
        {"model", required_argument, 0, 'm'},  {"stsb", required_argument, 0, 's'},
        {"ids", required_argument, 0, 'i'},    {"batch", required_argument, 0, 'b'},
        {"seconds", required_argument, 0, 't'}, {"jsonl", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    *o = (opts){.config = "config/mantissa.json", .batches = "1,32", .seconds = 3};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'c': o->config = optarg; break;
        case 'l': o->listen = optarg; break;
        case 'm': o->model = optarg; break;
        case 's': o->stsb = optarg; break;
        case 'i': o->ids = optarg; break;
        case 'b': o->batches = optarg; break;
        case 't': o->seconds = atof(optarg); break;
        case 'j': o->jsonl = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mantissa: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Loads the config and its models; prints the error and returns NULL. */
static srv_models *load_all(const char *path, cfg_config **cfg)
{
    mt_err err;
    srv_models *s = NULL;
    if (cfg_load(path, cfg, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return NULL;
    }
    double t0 = now_s();
    if (srv_models_load(*cfg, &s, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s: %s\n", path, err.msg);
        cfg_free(*cfg);
        return NULL;
    }
    for (int i = 0; i < srv_models_count(s); i++) {
        srv_model *m = srv_models_at(s, i);
        for (int k = 0; k < m->nslots; k++) {
            const srv_slot *sl = m->slots[k];
            const srv_variant *v = sl->cur;
            if (!v) {
                fprintf(stderr, "mantissa: %s@%s is out of rotation: %s\n", m->name, sl->name,
                        sl->error);
                continue;
            }
            fprintf(stderr,
                    "mantissa: loaded %s@%s (%s, %s backend, %d threads): %.1f MiB resident, "
                    "%.1f MiB GEMM weights, space %s\n",
                    m->name, v->cfg.name, mt_precision_name(v->cfg.precision), s->cpu->device,
                    s->cpu->threads, v->model->info.resident_bytes / 1048576.0,
                    v->model->info.gemm_bytes / 1048576.0, v->space);
        }
    }
    fprintf(stderr, "mantissa: models ready in %.2f s\n", now_s() - t0);
    return s;
}

/* The build named by --model (default: first model, its first variant).
 * Borrowed: the tools swap nothing, so the slot keeps it alive. */
static srv_variant *pick(srv_models *s, const char *spec, srv_model **mo)
{
    char buf[256] = "";
    if (spec)
        snprintf(buf, sizeof buf, "%s", spec);
    char *pin = srv_split_pin(buf);
    srv_model *m = spec ? srv_models_find(s, buf) : srv_models_at(s, 0);
    if (!m) {
        fprintf(stderr, "mantissa: --model: no model \"%s\" in the config\n", buf);
        return NULL;
    }
    *mo = m;
    if (!pin) /* the first variant of the config */
        pin = m->cfg.variants[0].name;
    srv_variant *v = NULL;
    char why[400];
    if (srv_acquire(m, pin, NULL, &v, why, sizeof why) != SRV_OK) {
        fprintf(stderr, "mantissa: --model: %s\n", why);
        return NULL;
    }
    srv_variant_unref(v);
    return v;
}

/* ======================================================================== */

/* The scheduler's shutdown hook: stop accepting connections. */
static void serve_quiesce(void *arg)
{
    http_quiesce(arg);
}

/* Asynchronous signals are handled by the scheduler's loop thread only.
 * Every other thread (engine workers, the reload loader, the OpenMP teams
 * they start, MHD's threads) inherits a mask that blocks them, because a
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

/* Serves until SIGTERM/SIGINT has drained: the scheduler's loop runs on
 * this thread (it owns the signals), MHD's threads serve HTTP. */
static int cmd_serve(const opts *o)
{
    cfg_config *cfg;
    mt_err err;
    signal(SIGPIPE, SIG_IGN);
    /* Blocked from here, before the first thread exists, so every thread
     * inherits the mask; this thread unblocks them when its loop starts (a
     * SIGTERM during the load waits until then and drains as usual). */
    sigset_t old_mask;
    block_async_signals(&old_mask);
    srv_models *s = load_all(o->config, &cfg);
    if (!s)
        return 1;
    log_set_level(cfg->log_level);
    if (o->listen && cfg_parse_listen(o->listen, cfg->listen_host, sizeof cfg->listen_host,
                                      &cfg->listen_port) != 0) {
        fprintf(stderr, "mantissa: --listen: \"%s\" is not ADDR:PORT\n", o->listen);
        srv_models_free(s);
        cfg_free(cfg);
        return 1;
    }
    auth_keys *keys = NULL;
    if (cfg->api_keys_file[0] && auth_load(cfg->api_keys_file, &keys, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s: %s\n", o->config, err.msg);
        srv_models_free(s);
        cfg_free(cfg);
        return 1;
    }
    sched *sc;
    if (sched_create(cfg, s, &sc, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        auth_free(keys);
        srv_models_free(s);
        cfg_free(cfg);
        return 1;
    }
    reloader *rl = NULL;
    if (reload_create(sc, s, cfg, o->config, &rl, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        sched_destroy(sc);
        reload_destroy(rl);
        auth_free(keys);
        srv_models_free(s);
        cfg_free(cfg);
        return 1;
    }
    http_ctx ctx = {.cfg = cfg, .models = s, .sched = sc, .auth = keys, .reload = rl};
    http_server *h;
    if (http_start(&ctx, &h, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        sched_destroy(sc);
        reload_destroy(rl);
        auth_free(keys);
        srv_models_free(s);
        cfg_free(cfg);
        return 1;
    }
    sched_set_hooks(sc, serve_quiesce, NULL, h);
    fprintf(stderr, "mantissa: serving on %s%s:%d\n", cfg->tls_cert[0] ? "https://" : "",
            cfg->listen_host, http_port(h));
    fflush(stderr);

    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    int rc = sched_run(sc);
    http_stop(h);
    reload_destroy(rl);
    sched_destroy(sc);
    auth_free(keys);
    srv_models_free(s);
    cfg_free(cfg);
    fprintf(stderr, "mantissa: stopped\n");
    return rc;
}

static int cmd_embed(const opts *o)
{
    cfg_config *cfg;
    srv_models *s = load_all(o->config, &cfg);
    if (!s)
        return 1;
    srv_model *m;
    srv_variant *v = pick(s, o->model, &m);
    int rc = v ? 0 : 1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    float *vec = malloc(sizeof(float) * (size_t)(v ? v->hidden : 1));
    sbuf b;
    sb_init(&b);
    for (int lineno = 1; v && (n = getline(&line, &cap, stdin)) >= 0; lineno++) {
        if (n && line[n - 1] == '\n')
            line[--n] = 0;
        const char *text = line;
        size_t len = (size_t)n;
        cJSON *j = NULL;
        if (o->jsonl) {
            j = cJSON_ParseWithLength(line, (size_t)n);
            if (!cJSON_IsString(j)) {
                fprintf(stderr, "mantissa: stdin line %d: not a JSON string\n", lineno);
                cJSON_Delete(j);
                rc = 1;
                break;
            }
            text = j->valuestring;
            len = strlen(text);
        }
        mt_err err;
        if (mt_model_embed_texts(v->model, &text, &len, 1, vec, NULL, &err) != MT_OK) {
            fprintf(stderr, "mantissa: stdin line %d: %s\n", lineno, err.msg);
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        cJSON_Delete(j);
        b.len = 0;
        sb_float_array(&b, vec, (size_t)v->hidden);
        printf("%s\n", b.data);
    }
    sb_free(&b);
    free(line);
    free(vec);
    srv_models_free(s);
    cfg_free(cfg);
    return rc;
}

static int cmd_eval(const opts *o)
{
    if (!o->stsb) {
        fprintf(stderr, "mantissa eval: --stsb FILE is required\n");
        return 2;
    }
    mt_sts sts;
    mt_err err;
    if (mt_sts_load(o->stsb, &sts, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return 1;
    }
    cfg_config *cfg;
    srv_models *s = load_all(o->config, &cfg);
    if (!s) {
        mt_sts_free(&sts);
        return 1;
    }
    srv_model *m;
    srv_variant *v = pick(s, o->model, &m);
    int rc = 1;
    const int h = v ? v->hidden : 0, batch = 32;
    float *e1 = malloc(sizeof(float) * (size_t)batch * h), *e2 = malloc(sizeof(float) * (size_t)batch * h);
    double *cos = malloc(sizeof(double) * sts.n);
    size_t *l1 = malloc(sizeof(size_t) * batch), *l2 = malloc(sizeof(size_t) * batch);
    double t0 = now_s();
    if (v && e1 && e2 && cos && l1 && l2) {
        rc = 0;
        for (size_t i = 0; i < sts.n && !rc; i += batch) {
            int nb = (int)(sts.n - i < (size_t)batch ? sts.n - i : (size_t)batch);
            for (int k = 0; k < nb; k++) {
                l1[k] = strlen(sts.s1[i + k]);
                l2[k] = strlen(sts.s2[i + k]);
            }
            if (mt_model_embed_texts(v->model, (const char *const *)sts.s1 + i, l1, nb, e1, NULL, &err) ||
                mt_model_embed_texts(v->model, (const char *const *)sts.s2 + i, l2, nb, e2, NULL, &err)) {
                fprintf(stderr, "mantissa: %s\n", err.msg);
                rc = 1;
            }
            for (int k = 0; k < nb && !rc; k++)
                cos[i + k] = mt_cosine(e1 + (size_t)k * h, e2 + (size_t)k * h, h);
        }
    }
    if (!rc) {
        double rho = mt_spearman(cos, sts.score, sts.n);
        printf("STS-B test Spearman x100: %.2f  (%s@%s, %zu pairs, %.1f s)\n", rho * 100,
               m->name, v->cfg.name, sts.n, now_s() - t0);
    }
    free(e1);
    free(e2);
    free(cos);
    free(l1);
    free(l2);
    mt_sts_free(&sts);
    srv_models_free(s);
    cfg_free(cfg);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Reads a JSON list of token-id lists into packed ids + offsets. */
static int read_ids(const char *path, int32_t **ids, int32_t **off, int *n)
{
    cJSON *j;
    mt_err err;
    if (mt_json_load(path, &j, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return -1;
    }
    int ns = cJSON_GetArraySize(j);
    size_t total = 0;
    const cJSON *s, *t;
    cJSON_ArrayForEach(s, j) total += (size_t)cJSON_GetArraySize(s);
    *ids = malloc(sizeof(int32_t) * (total ? total : 1));
    *off = malloc(sizeof(int32_t) * ((size_t)ns + 1));
    if (!cJSON_IsArray(j) || ns == 0 || !*ids || !*off) {
        fprintf(stderr, "mantissa: %s: expected a non-empty JSON list of lists of ids\n", path);
        cJSON_Delete(j);
        return -1;
    }
    int i = 0;
    size_t k = 0;
    (*off)[0] = 0;
    cJSON_ArrayForEach(s, j)
    {
        cJSON_ArrayForEach(t, s)(*ids)[k++] = (int32_t)t->valuedouble;
        (*off)[++i] = (int32_t)k;
    }
    *n = ns;
    cJSON_Delete(j);
    return 0;
}

static int cmd_bench(const opts *o)
{
    if (!o->ids) {
        fprintf(stderr, "mantissa bench: --ids FILE is required\n");
        return 2;
    }
    int32_t *ids = NULL, *off = NULL;
    int nseq;
    if (read_ids(o->ids, &ids, &off, &nseq) != 0)
        return 1;
    cfg_config *cfg;
    srv_models *s = load_all(o->config, &cfg);
    if (!s)
        return 1;
    srv_model *m;
    srv_variant *v = pick(s, o->model, &m);
    int rc = v ? 0 : 1;
    printf("{\"engine\":\"mantissa\",\"model\":\"%s\",\"variant\":\"%s\",\"precision\":\"%s\","
           "\"threads\":%d,\"results\":[",
           m ? m->name : "", v ? v->cfg.name : "", v ? mt_precision_name(v->cfg.precision) : "",
           s->cpu->threads);
    char list[256];
    snprintf(list, sizeof list, "%s", o->batches);
    int first = 1;
    for (char *save, *tok = strtok_r(list, ",", &save); tok && !rc;
         tok = strtok_r(NULL, ",", &save)) {
        int b = atoi(tok);
        if (b < 1 || b > nseq) {
            fprintf(stderr, "mantissa bench: batch %s: must be 1..%d (the ids file size)\n", tok,
                    nseq);
            rc = 1;
            break;
        }
        float *out = malloc(sizeof(float) * (size_t)b * v->hidden);
        int32_t *boff = malloc(sizeof(int32_t) * ((size_t)b + 1));
        mt_err err;
        /* warm up (3 runs), then runs until --seconds have passed (at least
         * 5); sentences/s = batch / median run time, as the peer reports */
        size_t cap = 1024, nt = 0;
        double *times = malloc(sizeof(double) * cap), el = 0;
        for (int it = -3; rc == 0 && (it < 5 || el < o->seconds); it++) {
            int start = (it < 0 ? 0 : it * b) % (nseq - b + 1);
            for (int k = 0; k <= b; k++)
                boff[k] = off[start + k] - off[start];
            double t0 = now_s();
            if (mt_model_forward(v->model, ids + off[start], boff, b, out, &err) != MT_OK) {
                fprintf(stderr, "mantissa bench: %s\n", err.msg);
                rc = 1;
            }
            double dt = now_s() - t0;
            if (it >= 0) {
                if (nt == cap)
                    times = realloc(times, sizeof(double) * (cap *= 2));
                times[nt++] = dt;
                el += dt;
            }
        }
        if (!rc) {
            qsort(times, nt, sizeof *times, cmp_double);
            double med = nt % 2 ? times[nt / 2] : (times[nt / 2 - 1] + times[nt / 2]) / 2;
            printf("%s{\"batch\":%d,\"runs\":%zu,\"median_s\":%.6f,\"sentences_per_s\":%.2f}",
                   first ? "" : ",", b, nt, med, b / med);
        }
        free(times);
        first = 0;
        free(out);
        free(boff);
    }
    printf("]}\n");
    free(ids);
    free(off);
    srv_models_free(s);
    cfg_free(cfg);
    return rc;
}

/* How OpenMP threads wait between parallel regions. A forward is a few
 * hundred short regions, and on a VM an idle vCPU takes tens of
 * microseconds to wake: with threads that sleep at once
 * (OMP_WAIT_POLICY=passive) a 10-token forward took 7.2 ms on the 2-core
 * dev VM, with a short spin (GOMP_SPINCOUNT=300, a few microseconds) 3.8 ms.
 * Longer spins are faster alone (1000: 2.7 ms; libgomp's default 300,000:
 * 2.6 ms) but take the cores from the HTTP threads and from anything else
 * on the node: beside one busy process the forward took 5.2 ms passive,
 * 6.0 ms with 300, 7.6 ms with 1000, and libgomp's default added 10 ms to
 * every request. bench/results/openmp-wait-*.md (make bench-openmp).
 * libgomp reads these when it loads, before main(), so when the user has
 * chosen neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT we set the spin count
 * and start again. */
static void prefer_short_openmp_spin(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("MANTISSA_NO_REEXEC"))
        return;
    setenv("GOMP_SPINCOUNT", "300", 1);
    setenv("MANTISSA_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
}

int main(int argc, char **argv)
{
    prefer_short_openmp_spin(argv);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static const struct {
        const char *name;
        int (*fn)(const opts *);
    } cmds[] = {
        {"serve", cmd_serve}, {"embed", cmd_embed}, {"eval", cmd_eval}, {"bench", cmd_bench},
    };
    if (!strcmp(argv[1], "quantize"))
        return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "compare"))
        return cmd_compare(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(argv[1], cmds[i].name)) {
            opts o;
            if (parse_opts(argc - 1, argv + 1, &o) != 0)
                return 2;
            return cmds[i].fn(&o);
        }
    fprintf(stderr, "mantissa: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
