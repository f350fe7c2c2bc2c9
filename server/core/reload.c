/* reload.c: the hot-switch (see reload.h): watch the config, validate,
 * diff, build changed variants on a loader thread, swap them in.
 *
 * Threads: everything here runs on the scheduler's loop thread except
 * loader_main, which takes tasks from `todo` and puts results on `done`
 * (both under r->mu) and wakes the loop with uv_async_send. Slots are
 * changed only on the loop, under their model's lock.
 */
#include "server/core/reload_internal.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <uv.h>

#include "engine/jsonfile.h"
#include "server/base/log.h"

static void arm_file_watch(reloader *r);

/* Wall-clock seconds, for the times the config view shows. */
double rl_unix_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* Frees a task and drops the builds it still holds (a result not swapped in). */
void rl_task_free(task *t)
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
            else if (!t->vc.gate_probes[0] || t->out->gate.passed)
                srv_measure(r->models, t->m, &t->mc, t->out); /* before it is shared */
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
void rl_post_task(reloader *r, task *t)
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
        rl_apply_result(r, rev);
        rev = next;
    }
    sched_kick(r->s); /* frees the queues of retired builds */
    rl_wake_waiters(r);
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
    rl_reload_now(r, NULL, false, msg, sizeof msg);
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
    rl_reload_now(r, NULL, true, msg, sizeof msg);
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
            rl_unload_model(r, m, "unloaded through the repository API", true);
            sched_kick(s);
            snprintf(q->msg, sizeof q->msg, "model %s unloaded", q->model);
        }
        sched_job_end(s, j, SCHED_OK, NULL);
        return;
    }
    bool ok = rl_reload_now(r, q->kind == RELOAD_LOAD ? q->model : NULL, true, q->msg, sizeof q->msg);
    arm_file_watch(r);
    if (!ok) {
        q->status = strstr(q->msg, "is not in the config file") ? 404 : 400;
        sched_job_end(s, j, SCHED_OK, NULL);
        return;
    }
    j->next = r->waiters;
    r->waiters = j;
    rl_wake_waiters(r);
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
        rl_task_free(t);
    }
    while (r->done) {
        task *t = r->done;
        r->done = t->next;
        rl_task_free(t);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->last_text);
    free(r->path);
    free(r->dir);
    free(r->base);
    free(r);
}
