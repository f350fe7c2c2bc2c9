/* reload.c: the hot-switch (see reload.h): watch the config, validate,
 * diff, build changed variants on a loader thread, swap them in.
 *
 * Threads: everything here runs on the scheduler's loop thread except
 * loader_main, which takes tasks from `todo` and puts results on `done`
 * (both under r->mu) and wakes the loop with uv_async_send. Slots are
 * changed only on the loop, under their model's lock.
 */
#include "server/core/reload.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <uv.h>

#include "engine/jsonfile.h"
#include "server/base/log.h"

/* ========================================================================
 * types
 * ====================================================================== */

/* Builds one apply can take out of their slots: a model's present
 * variants (at most 65 with the reference) and as many just removed. */
#define OLD_MAX 160

/* One build to make: a variant of a model, as the config asked at gen. */
typedef struct task {
    struct task *next;
    srv_model *m;
    srv_slot *sl;
    uint64_t gen;       /* sl->want_gen when asked; older results are dropped */
    cfg_model mc;       /* a deep copy of the model's settings */
    cfg_variant vc;
    srv_variant *ref;   /* the reference build for a gate (a reference) or NULL */
    uint64_t t_noticed; /* uv_hrtime() when the change was noticed */
    /* result */
    srv_variant *out;
    mt_status st;
    bool skipped;       /* stale before it started */
    char err[512];
} task;

struct reloader {
    sched *s;
    srv_models *models;
    const cfg_config *boot;
    char *path, *dir, *base;
    uv_fs_event_t ev_file, ev_dir;
    uv_timer_t debounce;
    uv_signal_t sighup;
    uv_async_t wake;
    int nhandles;
    bool file_watched, dir_watched;
    bool closed;
    uint64_t t_noticed;  /* first event of the current debounce window; 0: none */
    char *last_text;     /* the file as last applied (an unchanged file is skipped) */
    size_t last_len;

    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *todo, *todo_tail, *done;
    bool quit, closing;

    int pending;          /* tasks out (loop) */
    sched_job *waiters;   /* control jobs waiting for pending == 0 (linked by job.next) */
};

static void arm_file_watch(reloader *r);

/* Wall-clock seconds, for the times the config view shows. */
static double unix_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* Frees a task and drops the builds it still holds (a result not swapped in). */
static void task_free(task *t)
{
    cfg_model_clear(&t->mc);
    srv_variant_unref(t->ref);
    srv_variant_unref(t->out);
    free(t);
}

/* ========================================================================
 * the loader thread
 * ====================================================================== */

/* Whether t's slot still wants what t would build. */
static bool task_current(const task *t)
{
    pthread_mutex_lock(&t->m->lock);
    bool cur = t->sl->want_gen == t->gen;
    pthread_mutex_unlock(&t->m->lock);
    return cur;
}

/* Makes the builds the loop asks for, one at a time (a build already
 * uses every core for quantization), skipping those a newer config has
 * made stale, and hands each result back to the loop. */
static void *loader_main(void *arg)
{
    reloader *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (!r->todo && !r->quit)
            pthread_cond_wait(&r->cv, &r->mu);
        task *t = r->todo;
        if (!t) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
        r->todo = t->next;
        if (!r->todo)
            r->todo_tail = NULL;
        bool quit = r->quit;
        pthread_mutex_unlock(&r->mu);

        if (quit || !task_current(t)) {
            t->skipped = true;
        } else {
            mt_err err = {{0}};
            t->st = srv_build(r->models, t->m, &t->mc, &t->vc, t->ref, &t->out, &err);
            if (t->st != MT_OK)
                snprintf(t->err, sizeof t->err, "%s", err.msg);
        }
        pthread_mutex_lock(&r->mu);
        t->next = r->done;
        r->done = t;
        if (!r->closing)
            uv_async_send(&r->wake);
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

/* Hands a build to the loader thread (loop thread); counted until it comes back. */
static void post_task(reloader *r, task *t)
{
    r->pending++;
    t->next = NULL;
    pthread_mutex_lock(&r->mu);
    if (r->todo_tail)
        r->todo_tail->next = t;
    else
        r->todo = t;
    r->todo_tail = t;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

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
    int nt = 0;
    srv_variant *old[OLD_MAX];
    int nold = 0;

    pthread_mutex_lock(&m->lock);
    bool was_loaded = m->loaded;
    bool base_changed = !cfg_model_same_base(&m->cfg, nc);
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
            if ((k == nc->reference) != (pass == 0))
                continue;
            const cfg_variant *vc = &nc->variants[k];
            srv_slot *sl = srv_slot_get(m, vc->name, true);
            if (!sl)
                continue;
            bool rebuild = !was_loaded || base_changed || !sl->present ||
                           !cfg_variant_same_build(&sl->want, vc) ||
                           sl->state == SRV_VS_FAILED ||
                           (force && sl->state != SRV_VS_READY && sl->state != SRV_VS_LOADING);
            if (!sl->present || !was_loaded)
                sl->gate = (srv_gate){0};
            sl->present = true;
            sl->leaving = false;
            sl->traffic = vc->traffic;
            sl->drift_floor = vc->drift_floor;
            if (!rebuild) {
                sl->want = *vc;
                continue;
            }
            if (!was_loaded && sl->cur) { /* left from before an unload */
                old[nold++] = sl->cur;
                sl->cur = NULL;
            }
            if (sl->state == SRV_VS_DEMOTED)
                sl->state = SRV_VS_LOADING;
            task *t = want_build(r, m, sl, vc, t_noticed);
            if (t)
                tasks[nt++] = t;
        }
    /* variants no longer in the config: when none that stays can serve
     * unpinned traffic yet and builds are coming, the removed ones keep
     * serving ("leaving") until a new build is in rotation */
    bool others = false;
    for (int i = 0; i < m->nslots; i++) {
        const srv_slot *sl = m->slots[i];
        if (sl->present && cfg_find_variant(nc, sl->name) && sl->cur && sl->traffic > 0 &&
            sl->state != SRV_VS_DEMOTED)
            others = true;
    }
    for (int i = 0; i < m->nslots; i++) {
        srv_slot *sl = m->slots[i];
        if (!sl->present || cfg_find_variant(nc, sl->name) || nold == OLD_MAX)
            continue;
        sl->present = false;
        sl->want_gen++;
        if (sl->cur && !others && nt > 0) {
            sl->leaving = true;
            continue;
        }
        if (sl->cur)
            old[nold++] = sl->cur;
        sl->cur = NULL;
    }
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
        post_task(r, tasks[i]);
    }
    return nt;
}

/* Takes m out of service (its builds go once their requests are done). */
static void unload_model(reloader *r, srv_model *m, const char *why, bool admin)
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
    st->last_failed_unix = unix_now();
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
    DIFF(strcmp(b->listen_host, c->listen_host) || b->listen_port != c->listen_port, "listen");
    DIFF(b->http_threads != c->http_threads, "http_threads");
    DIFF(b->max_body_bytes != c->max_body_bytes, "max_body_bytes");
    DIFF(b->max_inputs != c->max_inputs, "max_inputs");
    DIFF(b->engine_threads != c->engine_threads, "engine_threads");
    DIFF(b->engine_workers != c->engine_workers, "engine_workers");
    DIFF(b->request_timeout_ms != c->request_timeout_ms, "request_timeout_ms");
    DIFF(strcmp(b->api_keys_file, c->api_keys_file), "api_keys_file");
    DIFF(strcmp(b->tls_cert, c->tls_cert) || strcmp(b->tls_key, c->tls_key), "tls");
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
static bool reload_now(reloader *r, const char *only, bool force, char *msg, size_t msgcap)
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
                unload_model(r, m, "removed from the config", false);
        }
    srv_reload_status *rs = &r->models->reload;
    pthread_mutex_lock(&rs->lock);
    rs->ok++;
    rs->generation++;
    rs->last_error[0] = 0;
    rs->last_ok_unix = unix_now();
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
static void wake_waiters(reloader *r)
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

/* A build came back: swap it in if its slot still wants it and it passed
 * its gate; else keep what serves and record why. */
static void apply_result(reloader *r, task *t)
{
    srv_model *m = t->m;
    srv_slot *sl = t->sl;
    srv_variant *old = NULL;
    if (t->skipped) {
        task_free(t);
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
        old = sl->cur;
        t->out->slot = sl;
        sl->cur = t->out;
        t->out = NULL;
        sl->state = SRV_VS_READY;
        sl->error[0] = 0;
        sl->gate = sl->cur->gate;
        sl->switch_s = switch_s;
        snprintf(line, sizeof line,
                 "variant %s@%s now serves %s (built in %.2f s; %.2f s after the change was "
                 "noticed)",
                 m->name, sl->name, sl->cur->space, sl->cur->build_s, switch_s);
    }
    /* a variant in rotation again: removed ones that stayed to serve can go */
    srv_variant *gone[OLD_MAX];
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
    retire(old);
    task_free(t); /* drops a build the slot did not take */
}

/* The loader thread finished builds: apply them in the order they were made. */
static void on_wake(uv_async_t *a)
{
    reloader *r = a->data;
    pthread_mutex_lock(&r->mu);
    task *t = r->done;
    r->done = NULL;
    pthread_mutex_unlock(&r->mu);
    /* oldest first, as they were built */
    task *rev = NULL;
    while (t) {
        task *next = t->next;
        t->next = rev;
        rev = t;
        t = next;
    }
    while (rev) {
        task *next = rev->next;
        r->pending--;
        apply_result(r, rev);
        rev = next;
    }
    sched_kick(r->s); /* frees the queues of retired builds */
    wake_waiters(r);
}

/* ========================================================================
 * triggers: file events, SIGHUP, admin requests
 * ====================================================================== */

static void on_debounce(uv_timer_t *t)
{
    reloader *r = t->data;
    if (sched_stopping(r->s))
        return;
    char msg[1024];
    reload_now(r, NULL, false, msg, sizeof msg);
    arm_file_watch(r); /* a replaced file is a new inode */
}

/* A change to the file or its directory: (re)start the debounce timer. */
static void on_fs_event(uv_fs_event_t *h, const char *filename, int events, int status)
{
    reloader *r = h->data;
    if (r->closed || sched_stopping(r->s))
        return;
    /* the directory: only our file, or a ConfigMap's "..data" swap */
    if (h == &r->ev_dir && filename && strcmp(filename, r->base) && strcmp(filename, "..data"))
        return;
    if (!r->t_noticed)
        r->t_noticed = uv_hrtime();
    uv_timer_start(&r->debounce, on_debounce, (uint64_t)r->boot->reload_debounce_ms, 0);
}

/* SIGHUP: reload now, even an unchanged file (it retries what failed). */
static void on_sighup(uv_signal_t *h, int sig)
{
    reloader *r = h->data;
    if (sched_stopping(r->s))
        return;
    log_msg(LOG_INFO, "SIGHUP: reloading %s", r->path);
    char msg[1024];
    reload_now(r, NULL, true, msg, sizeof msg);
    arm_file_watch(r);
}

/* (Re)starts the watch on the file itself: after a rename-replace the old
 * watch follows the old inode, which no longer matters. */
static void arm_file_watch(reloader *r)
{
    if (!r->boot->watch || r->closed)
        return;
    if (r->file_watched)
        uv_fs_event_stop(&r->ev_file);
    r->file_watched = uv_fs_event_start(&r->ev_file, on_fs_event, r->path, 0) == 0;
}

void reload_control(sched *s, sched_job *j)
{
    reloader *r = j->control_arg;
    reload_request *q = (reload_request *)j;
    q->status = 200;
    if (sched_stopping(s)) {
        q->status = 503;
        snprintf(q->msg, sizeof q->msg, "the server is shutting down");
        sched_job_end(s, j, SCHED_OK, NULL);
        return;
    }
    if (q->kind == RELOAD_UNLOAD) {
        srv_model *m = srv_models_find(r->models, q->model);
        if (!m) {
            q->status = 404;
            snprintf(q->msg, sizeof q->msg, "model \"%s\" is not served here", q->model);
        } else {
            unload_model(r, m, "unloaded through the repository API", true);
            sched_kick(s);
            snprintf(q->msg, sizeof q->msg, "model %s unloaded", q->model);
        }
        sched_job_end(s, j, SCHED_OK, NULL);
        return;
    }
    bool ok = reload_now(r, q->kind == RELOAD_LOAD ? q->model : NULL, true, q->msg, sizeof q->msg);
    arm_file_watch(r);
    if (!ok) {
        q->status = strstr(q->msg, "is not in the config file") ? 404 : 400;
        sched_job_end(s, j, SCHED_OK, NULL);
        return;
    }
    j->next = r->waiters;
    r->waiters = j;
    wake_waiters(r);
}

/* ========================================================================
 * create / close / destroy
 * ====================================================================== */

static void handle_closed(uv_handle_t *h)
{
    reloader *r = h->data;
    r->nhandles--;
}

/* The scheduler's loop is closing: stop watching, and answer the admin
 * requests still waiting for builds. */
static void on_loop_close(void *arg)
{
    reloader *r = arg;
    if (r->closed)
        return;
    r->closed = true;
    pthread_mutex_lock(&r->mu);
    r->closing = true;
    pthread_mutex_unlock(&r->mu);
    sched_job *w = r->waiters;
    r->waiters = NULL;
    while (w) {
        sched_job *next = w->next;
        reload_request *q = (reload_request *)w;
        q->status = 503;
        snprintf(q->msg, sizeof q->msg, "the server is shutting down");
        sched_job_end(r->s, w, SCHED_OK, NULL);
        w = next;
    }
    uv_handle_t *hs[] = {(uv_handle_t *)&r->ev_file, (uv_handle_t *)&r->ev_dir,
                         (uv_handle_t *)&r->debounce, (uv_handle_t *)&r->sighup,
                         (uv_handle_t *)&r->wake};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++)
        if (!uv_is_closing(hs[i]))
            uv_close(hs[i], handle_closed);
}

mt_status reload_create(sched *s, srv_models *models, const cfg_config *boot, const char *path,
                        reloader **out, mt_err *err)
{
    reloader *r = calloc(1, sizeof *r);
    char *d = strdup(path), *b = strdup(path);
    if (!r || !d || !b || !(r->path = strdup(path))) {
        free(d);
        free(b);
        free(r);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    r->s = s;
    r->models = models;
    r->boot = boot;
    r->dir = strdup(dirname(d));
    r->base = strdup(basename(b));
    free(d);
    free(b);
    if (!r->dir || !r->base) {
        free(r->dir);
        free(r->base);
        free(r->path);
        free(r);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    size_t len;
    if (mt_read_file(path, 16u << 20, &r->last_text, &len, NULL) == MT_OK)
        r->last_len = len;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    uv_loop_t *loop = sched_loop(s);
    uv_fs_event_init(loop, &r->ev_file);
    uv_fs_event_init(loop, &r->ev_dir);
    uv_timer_init(loop, &r->debounce);
    uv_signal_init(loop, &r->sighup);
    uv_async_init(loop, &r->wake, on_wake);
    r->ev_file.data = r->ev_dir.data = r->debounce.data = r->sighup.data = r->wake.data = r;
    r->nhandles = 5;
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    if (boot->watch) {
        arm_file_watch(r);
        r->dir_watched = uv_fs_event_start(&r->ev_dir, on_fs_event, r->dir, 0) == 0;
        if (!r->file_watched && !r->dir_watched)
            log_msg(LOG_WARN, "cannot watch %s for changes; reload with SIGHUP or "
                                  "POST /v2/admin/reload",
                    path);
    }
    sched_set_close_hook(s, on_loop_close, r);
    if (pthread_create(&r->th, NULL, loader_main, r) != 0) {
        on_loop_close(r);
        *out = r;
        return mt_fail(err, MT_EINTERNAL, "cannot start the loader thread");
    }
    r->started = true;
    *out = r;
    return MT_OK;
}

void reload_destroy(reloader *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    r->closing = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->started)
        pthread_join(r->th, NULL);
    while (r->todo) {
        task *t = r->todo;
        r->todo = t->next;
        task_free(t);
    }
    while (r->done) {
        task *t = r->done;
        r->done = t->next;
        task_free(t);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->last_text);
    free(r->path);
    free(r->dir);
    free(r->base);
    free(r);
}
