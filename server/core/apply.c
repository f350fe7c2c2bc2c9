/* apply.c: applying a config while serving: what changed (settings that
 * apply at once; variants to rebuild; variants removed, which keep serving
 * until another is in rotation; models removed), the builds it asks the
 * loader thread for, and swapping each result into its slot when it
 * arrives (or keeping what serves, with the reason). See reload.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "server/base/log.h"
#include "server/core/reload_internal.h"

/* ========================================================================
 * applying a config (loop thread)
 * ====================================================================== */

/* A build leaves its slot: the scheduler frees its queue once idle, and
 * the build goes with its last request. */
static void retire(srv_variant *v)
{
    if (!v)
        return;
    atomic_store(&v->retired, true);
    srv_variant_unref(v);
}

/* Asks for a build of sl (m's lock held). */
static task *want_build(reloader *r, srv_model *m, srv_slot *sl, const cfg_variant *vc,
                        uint64_t t_noticed)
{
    task *t = calloc(1, sizeof *t);
    if (!t || cfg_model_copy(&m->cfg, &t->mc, NULL) != MT_OK) {
        free(t);
        sl->state = SRV_VS_FAILED;
        snprintf(sl->error, sizeof sl->error, "out of memory");
        return NULL;
    }
    sl->want = *vc;
    sl->want_gen++;
    sl->state = SRV_VS_LOADING;
    sl->error[0] = 0;
    t->m = m;
    t->sl = sl;
    t->gen = sl->want_gen;
    t->vc = *vc;
    t->t_noticed = t_noticed;
    return t;
}

/* The reference build serving now (a reference) for m, m's lock held. */
static srv_variant *reference_locked(srv_model *m)
{
    if (m->cfg.reference < 0)
        return NULL;
    srv_slot *sl = srv_slot_get(m, m->cfg.variants[m->cfg.reference].name, false);
    if (!sl || !sl->present || !sl->cur)
        return NULL;
    srv_variant_ref(sl->cur);
    return sl->cur;
}

/* Whether slot sl must be rebuilt for vc (m's lock held). */
static bool needs_build(const srv_slot *sl, const cfg_variant *vc, bool was_loaded,
                        bool base_changed, bool force)
{
    return !was_loaded || base_changed || !sl->present || !cfg_variant_same_build(&sl->want, vc) ||
           sl->state == SRV_VS_FAILED ||
           (force && sl->state != SRV_VS_READY && sl->state != SRV_VS_LOADING);
}

/* Brings slot sl of m to vc (m's lock held): live settings now; a build
 * asked for (returned) when needs_build says so. A build left from before
 * an unload goes to old[]. */
static task *plan_variant(reloader *r, srv_model *m, srv_slot *sl, const cfg_variant *vc,
                          bool was_loaded, bool rebuild, srv_variant **old, int *nold,
                          uint64_t t_noticed)
{
    if (!sl->present || !was_loaded)
        sl->gate = (srv_gate){0};
    sl->present = true;
    sl->leaving = false;
    sl->traffic = vc->traffic;
    sl->drift_floor = vc->drift_floor;
    if (!rebuild) {
        sl->want = *vc;
        return NULL;
    }
    if (!was_loaded && sl->cur) { /* left from before an unload */
        old[(*nold)++] = sl->cur;
        sl->cur = NULL;
    }
    if (sl->state == SRV_VS_DEMOTED)
        sl->state = SRV_VS_LOADING;
    return want_build(r, m, sl, vc, t_noticed);
}

/* Variants of m no longer in nc (m's lock held): when none that stays can
 * serve unpinned traffic yet and builds are coming, the removed ones keep
 * serving ("leaving") until a new build is in rotation; the others' builds
 * go to old[]. */
static void drop_removed(srv_model *m, const cfg_model *nc, bool builds_coming,
                         srv_variant **old, int *nold)
{
    bool others = false;
    for (int i = 0; i < m->nslots; i++) {
        const srv_slot *sl = m->slots[i];
        if (sl->present && cfg_find_variant(nc, sl->name) && sl->cur && sl->traffic > 0 &&
            sl->state != SRV_VS_DEMOTED)
            others = true;
    }
    for (int i = 0; i < m->nslots; i++) {
        srv_slot *sl = m->slots[i];
        if (!sl->present || cfg_find_variant(nc, sl->name) || *nold == OLD_MAX)
            continue;
        sl->present = false;
        sl->want_gen++;
        if (sl->cur && !others && builds_coming) {
            sl->leaving = true;
            continue;
        }
        if (sl->cur)
            old[(*nold)++] = sl->cur;
        sl->cur = NULL;
    }
}

/* Brings model m to nc: settings that need no build apply now, builds are
 * asked for what changed (force: also for variants that failed their gate
 * or were demoted). Returns how many builds it asked for. */
static int apply_model(reloader *r, srv_model *m, const cfg_model *nc, bool force,
                       uint64_t t_noticed)
{
    cfg_model copy;
    if (cfg_model_copy(nc, &copy, NULL) != MT_OK) {
        log_msg(LOG_ERROR, "reload: model %s: out of memory", nc->name);
        return 0;
    }
    task *tasks[66] = {0};
    srv_variant *old[OLD_MAX];
    int nt = 0, nold = 0;
    pthread_mutex_lock(&m->lock);
    const bool was_loaded = m->loaded, base_changed = !cfg_model_same_base(&m->cfg, nc);
    cfg_model prev = m->cfg;
    m->cfg = copy;
    atomic_store(&m->max_queue, nc->max_queue);
    atomic_store(&m->truncate, nc->truncate);
    m->loaded = true;
    m->admin_unloaded = false;
    m->reason[0] = 0;
    /* the reference first, so that the others' gates find it built */
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < nc->nvariants; k++) {
            srv_slot *sl = (k == nc->reference) == (pass == 0)
                               ? srv_slot_get(m, nc->variants[k].name, true)
                               : NULL;
            bool rebuild = sl && needs_build(sl, &nc->variants[k], was_loaded, base_changed, force);
            task *t = sl ? plan_variant(r, m, sl, &nc->variants[k], was_loaded, rebuild, old,
                                        &nold, t_noticed)
                         : NULL;
            if (t)
                tasks[nt++] = t;
        }
    drop_removed(m, nc, nt > 0, old, &nold);
    /* the gates compare with the reference serving now */
    for (int i = 0; i < nt; i++)
        if (tasks[i]->vc.gate_probes[0])
            tasks[i]->ref = reference_locked(m);
    pthread_mutex_unlock(&m->lock);
    cfg_model_clear(&prev);
    for (int i = 0; i < nold; i++)
        retire(old[i]);
    for (int i = 0; i < nt; i++) {
        log_msg(LOG_INFO, "reload: building %s@%s (%s%s%s)", m->name, tasks[i]->vc.name,
                mt_precision_name(tasks[i]->vc.precision),
                tasks[i]->vc.weights[0] ? ", weights " : "", tasks[i]->vc.weights);
        rl_post_task(r, tasks[i]);
    }
    return nt;
}

/* Takes m out of service (its builds go once their requests are done). */
void rl_unload_model(reloader *r, srv_model *m, const char *why, bool admin)
{
    srv_variant *old[OLD_MAX];
    int nold = 0;
    pthread_mutex_lock(&m->lock);
    m->loaded = false;
    m->admin_unloaded = admin;
    snprintf(m->reason, sizeof m->reason, "%s", why);
    for (int i = 0; i < m->nslots && nold < OLD_MAX; i++) {
        srv_slot *sl = m->slots[i];
        sl->want_gen++;
        sl->leaving = false;
        if (sl->cur)
            old[nold++] = sl->cur;
        sl->cur = NULL;
    }
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < nold; i++)
        retire(old[i]);
    log_msg(LOG_INFO, "model %s unloaded: %s", m->name, why);
}

/* Records a refused reload: nothing changed; the message says why. */
static void reload_failed(reloader *r, const char *msg)
{
    srv_reload_status *st = &r->models->reload;
    pthread_mutex_lock(&st->lock);
    st->failed++;
    snprintf(st->last_error, sizeof st->last_error, "%s", msg);
    st->last_failed_unix = rl_unix_now();
    pthread_mutex_unlock(&st->lock);
    log_msg(LOG_WARN, "config reload refused, still serving the previous config: %s", msg);
}

/* Warns about server settings that changed: they need a restart. */
static void note_server_changes(reloader *r, const cfg_config *c)
{
    const cfg_config *b = r->boot;
    char what[256] = "";
#define DIFF(cond, name)                                                                      \
    if (cond)                                                                                 \
        snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", *what ? ", " : "",  \
                 name)
    /* under --listen the file's address applies at no restart either */
    DIFF(!b->listen_overridden &&
             (strcmp(b->listen_host, c->listen_host) || b->listen_port != c->listen_port),
         "listen");
    DIFF(!b->grpc_overridden &&
             (strcmp(b->grpc_host, c->grpc_host) || b->grpc_port != c->grpc_port ||
              b->grpc_max_streams != c->grpc_max_streams),
         "grpc_listen");
    DIFF(b->max_body_bytes != c->max_body_bytes, "max_body_bytes");
    DIFF(b->max_inputs != c->max_inputs, "max_inputs");
    DIFF(b->connection_limit != c->connection_limit ||
             b->probe_connections != c->probe_connections ||
             b->max_connections_per_ip != c->max_connections_per_ip ||
             b->connection_timeout_s != c->connection_timeout_s,
         "connection limits");
    DIFF(b->memory_budget_mb != c->memory_budget_mb, "memory_budget_mb");
    DIFF(b->engine_threads != c->engine_threads, "engine_threads");
    DIFF(b->engine_workers != c->engine_workers, "engine_workers");
    DIFF(b->request_timeout_ms != c->request_timeout_ms, "request_timeout_ms");
    DIFF(strcmp(b->api_keys_file, c->api_keys_file), "api_keys_file");
    DIFF(strcmp(b->tls_cert, c->tls_cert) || strcmp(b->tls_key, c->tls_key), "tls");
    /* one format a run: a change waits for the restart (under --log-format
     * the file's does not apply) */
    DIFF(!b->log_format_overridden && b->log_format != c->log_format, "log_format");
    DIFF(strcmp(b->cors_allow_origins, c->cors_allow_origins), "cors_allow_origins");
    DIFF(!cfg_tracing_same(&b->tracing, &c->tracing), "tracing");
#undef DIFF
    if (*what)
        log_msg(LOG_WARN, "reload: server settings changed (%s): they take effect at the "
                              "next restart",
                what);
    log_set_level(c->log_level);
}

/* Reads, validates and applies the file. only: a model name (admin load)
 * or NULL (all). force: rebuild what is out of rotation too; also apply
 * an unchanged file. On an invalid file, fills msg and returns false. */
bool rl_reload_now(reloader *r, const char *only, bool force, char *msg, size_t msgcap)
{
    uint64_t t_noticed = r->t_noticed ? r->t_noticed : uv_hrtime();
    r->t_noticed = 0;
    char *text = NULL;
    size_t len = 0;
    mt_err err = {{0}};
    cfg_config *c = NULL;
    mt_status st = mt_read_file(r->path, 16u << 20, &text, &len, &err);
    if (st == MT_OK && !force && !only && r->last_text && len == r->last_len &&
        !memcmp(text, r->last_text, len)) {
        free(text);
        snprintf(msg, msgcap, "the config file is unchanged");
        return true;
    }
    if (st == MT_OK)
        st = cfg_parse(text, len, r->path, &c, &err);
    if (st != MT_OK) {
        free(text);
        reload_failed(r, err.msg);
        snprintf(msg, msgcap, "%s", err.msg);
        return false;
    }
    if (only && !cfg_find_model(c, only)) {
        snprintf(msg, msgcap, "model \"%s\" is not in the config file %s", only, r->path);
        free(text);
        cfg_free(c);
        return false;
    }
    note_server_changes(r, c);
    int builds = 0;
    for (int i = 0; i < c->nmodels; i++) {
        const cfg_model *nc = &c->models[i];
        if (only && strcmp(only, nc->name))
            continue;
        srv_model *m = srv_models_find(r->models, nc->name);
        if (!m && !(m = srv_model_add(r->models, nc, &err))) {
            log_msg(LOG_ERROR, "reload: model %s: %s", nc->name, err.msg);
            continue;
        }
        pthread_mutex_lock(&m->lock);
        bool skip = m->admin_unloaded && !only;
        pthread_mutex_unlock(&m->lock);
        if (skip) {
            log_msg(LOG_INFO, "reload: model %s stays unloaded (load it through the API)",
                    m->name);
            continue;
        }
        builds += apply_model(r, m, nc, force, t_noticed);
    }
    if (!only)
        for (int i = 0; i < srv_models_count(r->models); i++) {
            srv_model *m = srv_models_at(r->models, i);
            pthread_mutex_lock(&m->lock);
            bool loaded = m->loaded;
            pthread_mutex_unlock(&m->lock);
            if (loaded && !cfg_find_model(c, m->name))
                rl_unload_model(r, m, "removed from the config", false);
        }
    srv_reload_status *rs = &r->models->reload;
    pthread_mutex_lock(&rs->lock);
    rs->ok++;
    rs->generation++;
    rs->last_error[0] = 0;
    rs->last_ok_unix = rl_unix_now();
    pthread_mutex_unlock(&rs->lock);
    log_msg(LOG_INFO, "config reloaded from %s: %d variant build%s started", r->path, builds,
            builds == 1 ? "" : "s");
    snprintf(msg, msgcap, "config applied: %d build%s", builds, builds == 1 ? "" : "s");
    if (!only) {
        free(r->last_text);
        r->last_text = text;
        r->last_len = len;
    } else {
        free(text);
    }
    cfg_free(c);
    sched_kick(r->s);
    return true;
}

/* ========================================================================
 * results of builds (loop thread)
 * ====================================================================== */

/* Writes the outcome of the builds into a finished admin request: the
 * state of every variant of the model it named (or of all). */
static void finish_request(reloader *r, reload_request *q)
{
    if (q->status != 200)
        return;
    char bad[800] = "";
    for (int i = 0; i < srv_models_count(r->models); i++) {
        srv_model *m = srv_models_at(r->models, i);
        if (q->model[0] && strcmp(q->model, m->name))
            continue;
        pthread_mutex_lock(&m->lock);
        for (int k = 0; k < m->nslots; k++) {
            srv_slot *sl = m->slots[k];
            if (m->loaded && sl->present &&
                (sl->state == SRV_VS_FAILED || sl->state == SRV_VS_GATE_FAILED))
                snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%s%s@%s: %.300s",
                         *bad ? "; " : "", m->name, sl->name, sl->error);
        }
        pthread_mutex_unlock(&m->lock);
    }
    if (*bad && q->kind == RELOAD_LOAD) {
        q->status = 400;
        snprintf(q->msg, sizeof q->msg, "failed to load: %.900s", bad);
    } else if (*bad) {
        snprintf(q->msg + strlen(q->msg), sizeof q->msg - strlen(q->msg),
                 "; not serving as asked: %.800s", bad);
    }
}

/* Ends the admin requests waiting for builds, once none is out. */
void rl_wake_waiters(reloader *r)
{
    if (r->pending > 0)
        return;
    sched_job *w = r->waiters;
    r->waiters = NULL;
    while (w) {
        sched_job *next = w->next;
        finish_request(r, (reload_request *)w);
        sched_job_end(r->s, w, SCHED_OK, NULL);
        w = next;
    }
}

/* t's build becomes sl's (m's lock held); the line says so, with its
 * measured speed (measure). Returns the build it replaces (or NULL). */
static srv_variant *swap_in(srv_model *m, srv_slot *sl, task *t, double switch_s, char *line,
                            size_t cap)
{
    srv_variant *old = sl->cur, *v = t->out;
    v->slot = sl;
    sl->cur = v;
    t->out = NULL;
    sl->state = SRV_VS_READY;
    sl->error[0] = 0;
    sl->gate = v->gate;
    sl->switch_s = switch_s;
    snprintf(line, cap,
             "variant %s@%s now serves %s (built in %.2f s; %.2f s after the change was "
             "noticed)",
             m->name, sl->name, v->space, v->build_s, switch_s);
    if (v->measured)
        snprintf(line + strlen(line), cap - strlen(line),
                 "; measured: %.1f texts/s at batch 1 (%.2fx fp32), %.1f at batch %d (%.2fx)",
                 v->speed.tps[0], v->speed_vs_fp32[0], v->speed.tps[1], v->speed.batch[1],
                 v->speed_vs_fp32[1]);
    return old;
}

/* A variant of m in rotation again: removed ones that stayed to serve can
 * go; their builds into gone[] (m's lock held). Returns how many. */
static int take_leaving(srv_model *m, srv_variant **gone)
{
    int ngone = 0;
    bool serving = false;
    for (int i = 0; i < m->nslots; i++) {
        const srv_slot *s2 = m->slots[i];
        serving |= s2->present && s2->cur && s2->traffic > 0 && s2->state != SRV_VS_DEMOTED;
    }
    for (int i = 0; serving && i < m->nslots && ngone < OLD_MAX; i++)
        if (m->slots[i]->leaving) {
            m->slots[i]->leaving = false;
            if (m->slots[i]->cur)
                gone[ngone++] = m->slots[i]->cur;
            m->slots[i]->cur = NULL;
        }
    return ngone;
}

/* A build came back: swap it in if its slot still wants it and it passed
 * its gate; else keep what serves and record why. */
void rl_apply_result(reloader *r, task *t)
{
    srv_model *m = t->m;
    srv_slot *sl = t->sl;
    srv_variant *old = NULL, *fresh = NULL; /* fresh: the build swapped in */
    if (t->skipped) {
        rl_task_free(t);
        return;
    }
    double switch_s = (double)(uv_hrtime() - t->t_noticed) * 1e-9;
    pthread_mutex_lock(&m->lock);
    bool current = sl->want_gen == t->gen && m->loaded;
    int level = LOG_INFO;
    char line[700] = "";
    if (!current) {
        /* asked for by a config that is no longer in force */
    } else if (t->st != MT_OK) {
        sl->state = SRV_VS_FAILED;
        snprintf(sl->error, sizeof sl->error, "%s", t->err);
        level = LOG_WARN;
        snprintf(line, sizeof line, "variant %s@%s failed to build%s: %s", m->name, sl->name,
                 sl->cur ? " (the previous build keeps serving)" : "", t->err);
    } else if (t->vc.gate_probes[0] && !t->out->gate.passed) {
        sl->state = SRV_VS_GATE_FAILED;
        sl->gate = t->out->gate;
        snprintf(sl->error, sizeof sl->error, "gate: %s", t->out->gate.why);
        level = LOG_WARN;
        snprintf(line, sizeof line, "variant %s@%s missed its gate%s: %s", m->name, sl->name,
                 sl->cur ? " (the previous build keeps serving)" : " (kept out of rotation)",
                 t->out->gate.why);
    } else {
        old = swap_in(m, sl, t, switch_s, line, sizeof line);
        fresh = sl->cur;
        srv_variant_ref(fresh);
    }
    srv_variant *gone[OLD_MAX];
    int ngone = take_leaving(m, gone);
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < ngone; i++)
        retire(gone[i]);
    if (current) {
        stats_variant *pm = &sl->metrics;
        pthread_mutex_lock(&pm->lock);
        if (t->st != MT_OK)
            pm->build_failures++;
        else if (t->out) /* still ours: the gate kept it out */
            pm->gate_failures++;
        else
            pm->builds++;
        pthread_mutex_unlock(&pm->lock);
        if (t->st == MT_OK && t->out)
            atomic_fetch_add(&r->models->gate_failures, 1);
        log_msg(level, "%s", line);
    }
    if (fresh) {
        srv_log_speed_warning(m, fresh, LOG_WARN);
        srv_variant_unref(fresh);
    }
    retire(old);
    rl_task_free(t); /* drops a build the slot did not take */
}

