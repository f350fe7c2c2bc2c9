/* models.c: the models a server holds, builds of their variants, and the
 * routing of a request to a build (see models.h for the object model and
 * the lifetime rules a hot-switch relies on). */
#include "server/core/models.h"

#include "engine/backend_cuda.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/jsonfile.h"
#include "engine/metrics.h"
#include "server/base/log.h"

const char *srv_vstate_name(srv_vstate s)
{
    switch (s) {
    case SRV_VS_LOADING: return "loading";
    case SRV_VS_READY: return "ready";
    case SRV_VS_FAILED: return "failed";
    case SRV_VS_GATE_FAILED: return "gate_failed";
    case SRV_VS_DEMOTED: return "demoted";
    }
    return "?";
}

/* Monotonic seconds, for build and probe timings. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ========================================================================
 * the weights checksum (part of the embedding space id)
 * ====================================================================== */

typedef struct {
    char *path;
    off_t size;
    struct timespec mtime;
    ino_t ino;
    char hex[17];
} sum_entry;

static pthread_mutex_t sum_mu = PTHREAD_MUTEX_INITIALIZER;
static sum_entry sum_cache[32];
static int sum_n;

/* FNV-1a over the file's bytes, eight interleaved lanes folded at the end
 * so that it runs at memory speed instead of one multiply per byte; the
 * result only has to change when the bytes do. */
static mt_status fnv_file(const char *path, uint64_t *out, mt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(errno));
    const uint64_t prime = 0x100000001b3ull;
    uint64_t lane[8];
    for (int i = 0; i < 8; i++)
        lane[i] = 0xcbf29ce484222325ull ^ (uint64_t)i;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    size_t n, total = 0;
    while ((n = fread(buf, 1, CHUNK, f)) > 0) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++)
                lane[l] = (lane[l] ^ buf[i + l]) * prime;
        for (; i < n; i++)
            lane[0] = (lane[0] ^ buf[i]) * prime;
        total += n;
    }
    bool bad = ferror(f);
    free(buf);
    fclose(f);
    if (bad)
        return mt_fail(err, MT_EIO, "%s: read error", path);
    uint64_t h = 0xcbf29ce484222325ull ^ total;
    for (int l = 0; l < 8; l++)
        for (int b = 0; b < 8; b++)
            h = (h ^ ((lane[l] >> (8 * b)) & 0xff)) * prime;
    *out = h;
    return MT_OK;
}

mt_status srv_file_checksum(const char *path, char out[17], mt_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(errno));
    pthread_mutex_lock(&sum_mu);
    for (int i = 0; i < sum_n; i++) {
        sum_entry *e = &sum_cache[i];
        if (!strcmp(e->path, path) && e->size == st.st_size && e->ino == st.st_ino &&
            e->mtime.tv_sec == st.st_mtim.tv_sec && e->mtime.tv_nsec == st.st_mtim.tv_nsec) {
            memcpy(out, e->hex, 17);
            pthread_mutex_unlock(&sum_mu);
            return MT_OK;
        }
    }
    pthread_mutex_unlock(&sum_mu);
    uint64_t h = 0;
    mt_status s = fnv_file(path, &h, err);
    if (s != MT_OK)
        return s;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    char *p = strdup(path);
    if (!p)
        return MT_OK; /* not cached: computed again next time */
    pthread_mutex_lock(&sum_mu);
    int slot = -1;
    for (int i = 0; i < sum_n && slot < 0; i++)
        if (!strcmp(sum_cache[i].path, path))
            slot = i;
    if (slot < 0)
        slot = sum_n < (int)(sizeof sum_cache / sizeof *sum_cache) ? sum_n++ : 0;
    free(sum_cache[slot].path);
    sum_cache[slot] = (sum_entry){p, st.st_size, st.st_mtim, st.st_ino, ""};
    memcpy(sum_cache[slot].hex, out, 17);
    pthread_mutex_unlock(&sum_mu);
    return MT_OK;
}

/* ========================================================================
 * builds
 * ====================================================================== */

void srv_variant_ref(srv_variant *v)
{
    atomic_fetch_add(&v->refs, 1);
}

/* The end of a build: its weights go back to the backend. */
static void build_free(srv_variant *v)
{
    atomic_fetch_sub(v->alive, 1);
    mt_model_free(v->model);
    pthread_mutex_destroy(&v->lock);
    stats_drift_destroy(&v->drift);
    free(v);
}

void srv_variant_unref(srv_variant *v)
{
    if (v && atomic_fetch_sub(&v->refs, 1) == 1)
        build_free(v);
}

/* The embedding space id: what a stored vector must match to be compared
 * with a new one: the model, the precision and calibration its GEMM
 * weights were made with, and the checksum of the weights file. */
static void space_id(srv_variant *v, const char *model)
{
    char calib[32] = "none";
    if (mt_prec(v->cfg.precision)->has_scales) {
        if (!strcmp(v->cfg.calibration, "percentile"))
            snprintf(calib, sizeof calib, "percentile%g", v->cfg.percentile);
        else
            snprintf(calib, sizeof calib, "%s", v->cfg.calibration);
    }
    snprintf(v->space, sizeof v->space, "%s/%s-%s/fnv1a64-%s", model,
             mt_precision_name(v->cfg.precision), calib, v->checksum);
}

/* qsort order for the probe latencies. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The 99th percentile of n latencies (sorts them). */
static double p99_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    int i = (int)ceil(0.99 * n) - 1;
    return t[i < 0 ? 0 : i];
}

mt_status srv_run_gate(srv_variant *v, srv_variant *ref, mt_err *err)
{
    srv_gate *g = &v->gate;
    memset(g, 0, sizeof *g);
    if (!ref) {
        snprintf(g->why, sizeof g->why, "no reference build is serving to compare with");
        return MT_OK;
    }
    char *text;
    size_t len;
    mt_status st = mt_read_file(v->cfg.gate_probes, 16u << 20, &text, &len, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "gate.probes: ");
    /* one probe per line; blank lines and lines starting with '#' are skipped */
    int cap = 0, n = 0;
    for (size_t i = 0; i < len; i++)
        cap += text[i] == '\n';
    cap++;
    char **probes = malloc(sizeof *probes * (size_t)cap);
    const int h = v->hidden;
    float *a = malloc(sizeof(float) * (size_t)h), *b = malloc(sizeof(float) * (size_t)h);
    double *ta = malloc(sizeof(double) * (size_t)cap), *tb = malloc(sizeof(double) * (size_t)cap);
    if (!probes || !a || !b || !ta || !tb) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto done;
    }
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r')
            line[--l] = 0;
        if (l && line[0] != '#')
            probes[n++] = line;
    }
    if (n == 0) {
        st = mt_fail(err, MT_EINVAL, "gate.probes: %s has no probe texts", v->cfg.gate_probes);
        goto done;
    }
    double sum = 0, min = 2;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(probes[i]);
        const char *p = probes[i];
        /* interleaved, so that both see the same machine load */
        double t0 = mono_s();
        st = mt_model_embed_texts(v->model, &p, &l, 1, a, NULL, err);
        double t1 = mono_s();
        if (st == MT_OK)
            st = mt_model_embed_texts(ref->model, &p, &l, 1, b, NULL, err);
        double t2 = mono_s();
        if (st != MT_OK) {
            mt_prefix(err, st, "gate: probe %d: ", i + 1);
            goto done;
        }
        ta[i] = (t1 - t0) * 1e3;
        tb[i] = (t2 - t1) * 1e3;
        double c = mt_cosine(a, b, h);
        sum += c;
        if (c < min)
            min = c;
    }
    g->ran = true;
    g->probes = n;
    g->mean_cosine = sum / n;
    g->min_cosine = min;
    g->p99_ms = p99_of(ta, n);
    g->ref_p99_ms = p99_of(tb, n);
    double ratio = g->ref_p99_ms > 0 ? g->p99_ms / g->ref_p99_ms : 0;
    g->passed = true;
    if (g->mean_cosine < v->cfg.gate_min_cosine) {
        g->passed = false;
        snprintf(g->why, sizeof g->why,
                 "mean cosine to the reference %.6f is under gate.min_cosine %.6f (%d probes)",
                 g->mean_cosine, v->cfg.gate_min_cosine, n);
    } else if (v->cfg.gate_max_p99_ratio > 0 && ratio > v->cfg.gate_max_p99_ratio) {
        g->passed = false;
        snprintf(g->why, sizeof g->why,
                 "p99 latency %.2f ms is %.2fx the reference's %.2f ms, over gate.max_p99_ratio %g",
                 g->p99_ms, ratio, g->ref_p99_ms, v->cfg.gate_max_p99_ratio);
    }
done:
    free(text);
    free(probes);
    free(a);
    free(b);
    free(ta);
    free(tb);
    return st;
}

mt_status srv_build(srv_models *s, srv_model *m, const cfg_model *mc, const cfg_variant *vc,
                    srv_variant *ref, srv_variant **out, mt_err *err)
{
    mt_backend *be = mc->device == CFG_DEVICE_CPU ? s->cpu : s->gpu ? s->gpu : s->cpu;
    if (mc->device == CFG_DEVICE_CUDA && !s->gpu)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "model %s, variant %s: device \"cuda\" asked for, but no CUDA device is "
                       "usable here (%d found)",
                       mc->name, vc->name, mt_cuda_device_count());
    srv_variant *v = calloc(1, sizeof *v);
    if (!v)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    atomic_init(&v->refs, 1);
    v->m = m;
    v->be = be;
    v->cfg = *vc;
    mt_model_opts o = {.precision = vc->precision,
                        .calib = {MT_CALIB_ABSMAX, vc->percentile},
                        .max_seq_len = mc->max_seq_len,
                        .weights = vc->weights};
    mt_calib_parse(vc->calibration, &o.calib.method);
    double t0 = mono_s();
    mt_status st = mt_model_load(mc->path, be, &o, &v->model, err);
    if (st != MT_OK) {
        free(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    v->build_s = mono_s() - t0;
    v->hidden = v->model->info.hidden;
    v->max_seq_len = v->model->info.max_seq_len;
    pthread_mutex_init(&v->lock, NULL);
    stats_drift_init(&v->drift);
    v->alive = &s->builds_alive;
    atomic_fetch_add(&s->builds_alive, 1);

    char wpath[4200];
    if (vc->weights[0])
        snprintf(wpath, sizeof wpath, "%s", vc->weights);
    else
        snprintf(wpath, sizeof wpath, "%s/model.safetensors", mc->path);
    if ((st = srv_file_checksum(wpath, v->checksum, err)) != MT_OK) {
        srv_variant_unref(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    space_id(v, mc->name);
    if (vc->gate_probes[0] && (st = srv_run_gate(v, ref, err)) != MT_OK) {
        srv_variant_unref(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    *out = v;
    return MT_OK;
}

/* ========================================================================
 * models and slots
 * ====================================================================== */

int srv_models_count(const srv_models *s)
{
    return atomic_load(&s->nmodels);
}

srv_model *srv_models_at(srv_models *s, int i)
{
    return s->models[i];
}

srv_model *srv_models_find(srv_models *s, const char *name)
{
    int n = atomic_load(&s->nmodels);
    for (int i = 0; i < n; i++)
        if (!strcmp(s->models[i]->name, name))
            return s->models[i];
    return NULL;
}

srv_model *srv_model_add(srv_models *s, const cfg_model *c, mt_err *err)
{
    int n = atomic_load(&s->nmodels);
    if (n >= (int)(sizeof s->models / sizeof *s->models)) {
        mt_fail(err, MT_ELIMIT, "too many models over the server's life (%d)", n);
        return NULL;
    }
    srv_model *m = calloc(1, sizeof *m);
    if (!m || cfg_model_copy(c, &m->cfg, err) != MT_OK) {
        free(m);
        mt_fail(err, MT_ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(m->name, sizeof m->name, "%s", c->name);
    m->index = n;
    pthread_mutex_init(&m->lock, NULL);
    atomic_init(&m->max_queue, c->max_queue);
    atomic_init(&m->truncate, c->truncate);
    snprintf(m->reason, sizeof m->reason, "loading");
    s->models[n] = m;
    atomic_store(&s->nmodels, n + 1); /* published once complete */
    return m;
}

srv_slot *srv_slot_get(srv_model *m, const char *name, bool create)
{
    for (int i = 0; i < m->nslots; i++)
        if (!strcmp(m->slots[i]->name, name))
            return m->slots[i];
    if (!create)
        return NULL;
    if (m->nslots == m->capslots) {
        int cap = m->capslots ? 2 * m->capslots : 4;
        srv_slot **ns = realloc(m->slots, sizeof *ns * (size_t)cap);
        if (!ns)
            return NULL;
        m->slots = ns;
        m->capslots = cap;
    }
    srv_slot *sl = calloc(1, sizeof *sl);
    if (!sl)
        return NULL;
    snprintf(sl->name, sizeof sl->name, "%s", name);
    stats_variant_init(&sl->metrics);
    m->slots[m->nslots++] = sl;
    return sl;
}

/* Frees a model and what its slots hold (at the end only). */
static void model_free(srv_model *m)
{
    for (int i = 0; i < m->nslots; i++) {
        srv_variant_unref(m->slots[i]->cur);
        stats_variant_destroy(&m->slots[i]->metrics);
        free(m->slots[i]);
    }
    free(m->slots);
    cfg_model_clear(&m->cfg);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

mt_status srv_models_load(const cfg_config *cfg, srv_models **out, mt_err *err)
{
    srv_models *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    pthread_mutex_init(&s->reload.lock, NULL);
    s->reload.generation = 1;
    snprintf(s->reload.source, sizeof s->reload.source, "%s", cfg->source ? cfg->source : "");
    mt_status st = mt_backend_cpu_create(cfg->engine_threads, &s->cpu, err);
    if (st != MT_OK)
        goto fail;
    /* device "auto" takes the GPU when there is one; "cuda" insists on it */
    bool want_gpu = false;
    for (int i = 0; i < cfg->nmodels; i++)
        want_gpu |= cfg->models[i].device != CFG_DEVICE_CPU;
    if (want_gpu && mt_cuda_device_count() > 0) {
        char desc[256];
        mt_err gerr;
        if (mt_cuda_describe(0, desc, sizeof desc) != MT_OK)
            snprintf(desc, sizeof desc, "CUDA device 0");
        if (mt_backend_cuda_create(0, &s->gpu, &gerr) == MT_OK)
            fprintf(stderr, "mantissa: device auto/cuda: using %s\n", desc);
        else
            fprintf(stderr, "mantissa: %s: cannot use it (%s); models with device \"auto\" run "
                            "on the CPU\n", desc, gerr.msg);
    } else if (want_gpu) {
        fprintf(stderr, "mantissa: no CUDA device: models with device \"auto\" run on the CPU\n");
    }
    for (int i = 0; i < cfg->nmodels; i++) {
        const cfg_model *cm = &cfg->models[i];
        srv_model *m = srv_model_add(s, cm, err);
        if (!m) {
            st = MT_ENOMEM;
            goto fail;
        }
        /* the reference first, so that the others' gates can use it */
        srv_variant *ref = NULL;
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < cm->nvariants; k++) {
                if ((k == cm->reference) != (pass == 0))
                    continue;
                const cfg_variant *vc = &cm->variants[k];
                srv_variant *v;
                if ((st = srv_build(s, m, cm, vc, ref, &v, err)) != MT_OK)
                    goto fail;
                srv_slot *sl = srv_slot_get(m, vc->name, true);
                if (!sl) {
                    srv_variant_unref(v);
                    st = mt_fail(err, MT_ENOMEM, "out of memory");
                    goto fail;
                }
                v->slot = sl;
                sl->present = true;
                sl->want = *vc;
                sl->traffic = vc->traffic;
                sl->drift_floor = vc->drift_floor;
                sl->metrics.builds++;
                if (vc->gate_probes[0] && !v->gate.passed) {
                    sl->state = SRV_VS_GATE_FAILED;
                    sl->gate = v->gate;
                    snprintf(sl->error, sizeof sl->error, "gate: %s", v->gate.why);
                    sl->metrics.gate_failures++;
                    atomic_fetch_add(&s->gate_failures, 1);
                    srv_variant_unref(v);
                    continue;
                }
                sl->gate = v->gate;
                sl->state = SRV_VS_READY;
                sl->cur = v;
                if (k == cm->reference)
                    ref = v;
            }
        m->loaded = true;
        m->reason[0] = 0;
    }
    atomic_store(&s->ready, true);
    *out = s;
    return MT_OK;
fail:
    srv_models_free(s);
    return st;
}

void srv_models_free(srv_models *s)
{
    if (!s)
        return;
    int n = atomic_load(&s->nmodels);
    for (int i = 0; i < n; i++)
        model_free(s->models[i]);
    pthread_mutex_destroy(&s->reload.lock);
    mt_backend_destroy(s->gpu);
    mt_backend_destroy(s->cpu);
    free(s);
}

/* ========================================================================
 * routing
 * ====================================================================== */

char *srv_split_pin(char *model_name)
{
    char *at = strchr(model_name, '@');
    if (!at)
        return NULL;
    *at = 0;
    return at + 1;
}

/* xorshift per thread: routing needs spread, not cryptographic quality. */
static double uniform01(void)
{
    static _Thread_local unsigned long long x;
    if (!x)
        x = (unsigned long long)(uintptr_t)&x ^ 0x9E3779B97F4A7C15ull ^
            (unsigned long long)time(NULL);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (double)(x >> 11) / 9007199254740992.0;
}

double srv_route_hash(const char *key, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull; /* a separator no UTF-8 text contains */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    /* splitmix64's finaliser: FNV's low bits alone are not uniform enough */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return ((double)(h >> 11) + 0.5) / 9007199254740992.0;
}

/* Whether unpinned requests may go to sl (the model's lock held). */
static bool in_rotation(const srv_slot *sl)
{
    return (sl->present || sl->leaving) && sl->cur && sl->traffic > 0 &&
           sl->state != SRV_VS_DEMOTED;
}

srv_acq srv_acquire(srv_model *m, const char *pin, const char *key, srv_variant **out,
                    char *why, size_t whycap)
{
    char dummy[8];
    if (!why) {
        why = dummy;
        whycap = sizeof dummy;
    }
    srv_acq r = SRV_OK;
    srv_slot *pick = NULL;
    pthread_mutex_lock(&m->lock);
    if (!m->loaded) {
        snprintf(why, whycap, "model \"%s\" is not loaded (%s)", m->name,
                 m->reason[0] ? m->reason : "unloaded");
        r = SRV_UNLOADED;
    } else if (pin && *pin) {
        pick = srv_slot_get(m, pin, false);
        if (!pick || !pick->present) {
            snprintf(why, whycap, "model \"%s\" has no variant \"%s\"", m->name, pin);
            r = SRV_NO_VARIANT;
        } else if (!pick->cur) {
            snprintf(why, whycap, "variant %s@%s is not serving (%s%s%s)", m->name, pin,
                     srv_vstate_name(pick->state), pick->error[0] ? ": " : "", pick->error);
            r = SRV_NOT_SERVING;
        }
    } else if (key && *key) {
        /* weighted rendezvous: the highest w / -ln(u) wins */
        double best = -1;
        for (int i = 0; i < m->nslots; i++) {
            srv_slot *sl = m->slots[i];
            if (!in_rotation(sl))
                continue;
            double score = sl->traffic / -log(srv_route_hash(key, sl->name));
            if (score > best) {
                best = score;
                pick = sl;
            }
        }
    } else {
        double total = 0;
        for (int i = 0; i < m->nslots; i++)
            if (in_rotation(m->slots[i]))
                total += m->slots[i]->traffic;
        double x = uniform01() * total;
        for (int i = 0; i < m->nslots && total > 0; i++) {
            srv_slot *sl = m->slots[i];
            if (!in_rotation(sl))
                continue;
            pick = sl;
            if ((x -= sl->traffic) < 0)
                break;
        }
    }
    if (r == SRV_OK && !pick) {
        snprintf(why, whycap, "no variant of model \"%s\" is in rotation", m->name);
        r = SRV_NOT_SERVING;
    }
    if (r == SRV_OK) {
        srv_variant_ref(pick->cur);
        *out = pick->cur;
    }
    pthread_mutex_unlock(&m->lock);
    return r;
}

srv_variant *srv_reference(srv_model *m)
{
    srv_variant *v = NULL;
    pthread_mutex_lock(&m->lock);
    if (m->loaded && m->cfg.reference >= 0) {
        srv_slot *sl = srv_slot_get(m, m->cfg.variants[m->cfg.reference].name, false);
        if (sl && sl->present && sl->cur) {
            v = sl->cur;
            srv_variant_ref(v);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return v;
}

bool srv_model_serving(srv_model *m)
{
    bool ok = false;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; m->loaded && i < m->nslots && !ok; i++)
        ok = in_rotation(m->slots[i]);
    pthread_mutex_unlock(&m->lock);
    return ok;
}

bool srv_drift_check(srv_models *s, srv_variant *v)
{
    srv_model *m = v->m;
    srv_slot *sl = v->slot;
    bool demoted = false;
    pthread_mutex_lock(&m->lock);
    int window = m->cfg.drift_window;
    if (sl->cur == v && sl->drift_floor > 0 && sl->state != SRV_VS_DEMOTED) {
        stats_drift_summary d;
        stats_drift_summarize(&v->drift, window, &d);
        if (d.count >= (uint64_t)window && d.window_mean < sl->drift_floor) {
            sl->state = SRV_VS_DEMOTED;
            snprintf(sl->error, sizeof sl->error,
                     "live drift: mean cosine to the reference %.6f over the latest %d "
                     "comparisons is under drift_floor %.6f",
                     d.window_mean, window, sl->drift_floor);
            demoted = true;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (demoted) {
        pthread_mutex_lock(&sl->metrics.lock);
        sl->metrics.demotions++;
        pthread_mutex_unlock(&sl->metrics.lock);
        atomic_fetch_add(&s->demotions, 1);
        log_msg(LOG_WARN, "variant %s@%s taken out of rotation: %s", m->name, sl->name,
                sl->error);
    }
    return demoted;
}

mt_status srv_forward(srv_variant *v, const int32_t *ids, const int32_t *offsets, int nseq,
                      float *out, mt_err *err)
{
    pthread_mutex_lock(&v->lock);
    mt_status st = mt_model_forward(v->model, ids, offsets, nseq, out, err);
    pthread_mutex_unlock(&v->lock);
    return st;
}
