/* models.c: the models a server holds, their variants' slots, the loading
 * of a config at start, and the routing of a request to a build (see
 * models.h for the object model and the lifetime rules a hot-switch relies
 * on; build.c makes the builds, counts their references and frees them). */
#include "server/core/models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    pthread_mutex_init(&m->probe_lock, NULL);
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
    pthread_mutex_destroy(&m->probe_lock);
    free(m->probe_ref);
    free(m);
}

/* Whether a model of cfg may build on row reg: device "auto", or reg's name. */
static bool device_wanted(const cfg_config *cfg, const mt_backend_reg *reg)
{
    for (int i = 0; i < cfg->nmodels; i++) {
        const mt_backend_reg *want = mt_device_choice_reg(cfg->models[i].device);
        if (!want || want == reg)
            return true;
    }
    return false;
}

/* Row reg's device 0 into s->devices when it has one here ("auto" takes
 * it; a model naming it insists on it, which srv_build checks). */
static void open_device(const mt_backend_reg *reg, srv_models *s)
{
    const char *host = mt_backend_reg_host()->label;
    char desc[256];
    log_line l;
    if (reg->probe(desc, sizeof desc) <= 0) { /* desc says why */
        log_begin(&l, LOG_INFO | LOG_ALWAYS, "no device");
        log_str(&l, "backend", reg->name);
        log_str(&l, "why", desc);
        log_str(&l, "auto_runs_on", host);
        log_words(&l, "no %s device (%s): models with device \"auto\" run on the %s",
                  reg->label, desc, host);
        log_end(&l);
        return;
    }
    mt_err gerr;
    if (reg->describe(0, desc, sizeof desc) != MT_OK)
        snprintf(desc, sizeof desc, "%s device 0", reg->label);
    srv_device *d = &s->devices[s->ndevices];
    if (reg->create(0, 0, &d->be, &gerr) == MT_OK) {
        d->reg = reg;
        s->ndevices++;
        log_begin(&l, LOG_INFO | LOG_ALWAYS, "device");
        log_str(&l, "backend", reg->name);
        log_str(&l, "device", desc);
        log_words(&l, "device auto/%s: using %s", reg->name, desc);
    } else {
        log_begin(&l, LOG_WARN | LOG_ALWAYS, "device unusable");
        log_str(&l, "backend", reg->name);
        log_str(&l, "device", desc);
        log_str(&l, "error", gerr.msg);
        log_str(&l, "auto_runs_on", host);
        log_words(&l, "%s: cannot use it (%s); models with device \"auto\" run on the %s", desc,
                  gerr.msg, host);
    }
    log_end(&l);
}

/* The host's backend (server.engine_threads), then each other row's
 * device 0 where a model may use it. */
static mt_status open_devices(const cfg_config *cfg, srv_models *s, mt_err *err)
{
    const mt_backend_reg *host = mt_backend_reg_host();
    mt_status st = host->create(0, cfg->engine_threads, &s->devices[0].be, err);
    if (st != MT_OK)
        return st;
    s->devices[0].reg = host;
    s->ndevices = 1;
    for (int r = 0; r < mt_backend_reg_count() && s->ndevices < SRV_MAX_DEVICES; r++) {
        const mt_backend_reg *reg = mt_backend_reg_at(r);
        if (!reg->host && device_wanted(cfg, reg))
            open_device(reg, s);
    }
    return MT_OK;
}

/* Builds variant vc of m at start and puts it in its slot: serving, or out
 * of rotation when it missed its gate. *ref gets it when it is the
 * reference. */
static mt_status load_variant(srv_models *s, srv_model *m, const cfg_model *cm, int k,
                              srv_variant **ref, mt_err *err)
{
    const cfg_variant *vc = &cm->variants[k];
    srv_variant *v;
    mt_status st = srv_build(s, m, cm, vc, *ref, &v, err);
    if (st != MT_OK)
        return st;
    srv_slot *sl = srv_slot_get(m, vc->name, true);
    if (!sl) {
        srv_variant_unref(v);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    v->slot = sl;
    sl->present = true;
    sl->want = *vc;
    sl->traffic = vc->traffic;
    sl->drift_floor = vc->drift_floor;
    sl->metrics.builds++;
    sl->gate = v->gate;
    if (vc->gate_probes[0] && !v->gate.passed) {
        sl->state = SRV_VS_GATE_FAILED;
        snprintf(sl->error, sizeof sl->error, "gate: %s", v->gate.why);
        sl->metrics.gate_failures++;
        atomic_fetch_add(&s->gate_failures, 1);
        srv_variant_unref(v);
        return MT_OK;
    }
    sl->state = SRV_VS_READY;
    sl->cur = v;
    if (k == cm->reference)
        *ref = v;
    return MT_OK;
}

mt_status srv_models_load(const cfg_config *cfg, srv_models **out, mt_err *err)
{
    srv_models *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    pthread_mutex_init(&s->reload.lock, NULL);
    s->reload.generation = 1;
    s->memory_budget = (size_t)cfg->memory_budget_mb << 20;
    snprintf(s->reload.source, sizeof s->reload.source, "%s", cfg->source ? cfg->source : "");
    mt_status st = open_devices(cfg, s, err);
    for (int i = 0; st == MT_OK && i < cfg->nmodels; i++) {
        const cfg_model *cm = &cfg->models[i];
        srv_model *m = srv_model_add(s, cm, err);
        if (!m) {
            st = MT_ENOMEM;
            break;
        }
        /* the reference first, so that the others' gates can use it */
        srv_variant *ref = NULL;
        if (cm->reference >= 0)
            st = load_variant(s, m, cm, cm->reference, &ref, err);
        for (int k = 0; st == MT_OK && k < cm->nvariants; k++)
            if (k != cm->reference)
                st = load_variant(s, m, cm, k, &ref, err);
        if (st == MT_OK)
            srv_measure_model(s, m, cm);
        m->loaded = true;
        m->reason[0] = 0;
    }
    if (st != MT_OK) {
        srv_models_free(s);
        return st;
    }
    atomic_store(&s->ready, true);
    *out = s;
    return MT_OK;
}

void srv_models_free(srv_models *s)
{
    if (!s)
        return;
    int n = atomic_load(&s->nmodels);
    for (int i = 0; i < n; i++)
        model_free(s->models[i]);
    pthread_mutex_destroy(&s->reload.lock);
    for (int i = s->ndevices - 1; i >= 0; i--)
        mt_backend_destroy(s->devices[i].be);
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

mt_status srv_forward_kind(srv_variant *v,
                           mt_status (*forward)(mt_model *, const int32_t *, const int32_t *,
                                                const int32_t *, int, float *, float *, mt_err *),
                           const int32_t *ids, const int32_t *offsets, const int32_t *segs,
                           int nseq, float *out, float *norms, mt_err *err)
{
    pthread_mutex_lock(&v->lock);
    mt_status st = forward(v->model, ids, offsets, segs, nseq, out, norms, err);
    pthread_mutex_unlock(&v->lock);
    return st;
}
