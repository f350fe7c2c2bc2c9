/* sched.c: the scheduler (see sched.h): per-build queues, dynamic
 * batching, engine workers, deadlines, disconnects, shadow runs on the
 * reference, control jobs and the SIGTERM drain, all owned by one libuv
 * loop thread.
 *
 * Builds come and go with config reloads (server/core/reload.c): a queue is
 * made for a build when its first text arrives, holds a reference to the
 * build, and is dropped once the build is retired and nothing of it is
 * queued or running; every batch holds its own reference while a worker
 * runs it, so a swapped-out build is freed only after its last batch.
 *
 * Threads and what they touch:
 *   - the loop thread: everything, HTTP included (sched_submit queues a
 *     job at once when called there).
 *   - workers: their own slot (w->mu/w->cv), the rows of the jobs in
 *     their batch, and the done list (inbox_mu).
 *   - any other thread (none in serving; tests): sched_admit/sched_release
 *     (atomics) and sched_submit (the inbox, under inbox_mu, then
 *     uv_async_send). uv_async_send coalesces, so the async callback
 *     drains both lists whole.
 * Every uv_async_send happens under inbox_mu after checking s->closing, so
 * no thread sends on a handle the loop has begun to close.
 */
#include "server/core/sched_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "engine/metrics.h"
#include "server/base/log.h"

/* ========================================================================
 * jobs
 * ====================================================================== */

void sched_job_ref(sched_job *j)
{
    atomic_fetch_add(&j->refs, 1);
}

void sched_job_unref(sched_job *j)
{
    if (j && atomic_fetch_sub(&j->refs, 1) == 1 && j->on_free)
        j->on_free(j);
}

const char *sched_result_name(sched_result r)
{
    switch (r) {
    case SCHED_OK: return "ok";
    case SCHED_TIMEOUT: return "timeout";
    case SCHED_CANCELLED: return "cancelled";
    case SCHED_SHUTDOWN: return "shutdown";
    case SCHED_FAILED: return "failed";
    }
    return "?";
}

void sc_watch_closed(uv_handle_t *h)
{
    free(h);
}

/* The end of a job on the loop: stop watching its socket (before the
 * connection is resumed, so the descriptor is ours no longer), tell the
 * submitter, draw a shadow run, and drop the scheduler's reference. */
void sc_end_job(sched *s, sched_job *j)
{
    if (j->ended)
        return;
    j->ended = true;
    j->t_done = uv_hrtime();
    if (j->watch) {
        uv_close((uv_handle_t *)j->watch, sc_watch_closed);
        j->watch = NULL;
    }
    if (j->on_done)
        j->on_done(j);
    if (j->shadowable && sched_kinds[j->kind].shadowable && j->result == SCHED_OK)
        sc_shadow_maybe(s, j);
    sched_job_unref(j);
}

/* Publishes q's length (after a change of q->n): the build's gauge, or
 * the model's shadow count. */
void sc_set_depth(sched *s, vq *q)
{
    long d = (long)q->n - q->published;
    q->published = (long)q->n;
    atomic_store(&q->depth, (long)q->n);
    if (sched_kinds[q->kind].background) {
        atomic_fetch_add(&s->shadow_depth[q->m->index], d);
        return;
    }
    long client = 0; /* the build's client queues together */
    for (int k = 0; k < SCHED_KINDS; k++) {
        const vq *o = q->v->q[k];
        client += o && !sched_kinds[k].background ? (long)o->n : 0;
    }
    atomic_store(&q->v->queue_depth, client);
}

/* Removes j's items from its queue (they will not run). */
static void unqueue_job(sched *s, vq *q, sched_job *j)
{
    size_t k = 0;
    for (size_t i = 0; i < q->n; i++) {
        if (q->items[i].job == j)
            q->ntokens -= q->items[i].ntok;
        else
            q->items[k++] = q->items[i];
    }
    q->n = k;
    sc_set_depth(s, q);
    j->queued = 0;
}

/* Ends j with a failure: its queued texts are dropped; if none is running
 * it ends now, else when its running batch comes back. */
void sc_fail_job(sched *s, sched_job *j, sched_result r, const char *msg)
{
    if (j->ended)
        return;
    if (j->result == SCHED_OK) {
        j->result = r;
        snprintf(j->msg, sizeof j->msg, "%s", msg);
    }
    if (j->queued)
        unqueue_job(s, (vq *)j->q, j);
    if (!j->running)
        sc_end_job(s, j);
}

/* The client socket of a waiting job hung up: nobody is left to answer,
 * so its queued texts are dropped. */
static void on_watch(uv_poll_t *h, int status, int events)
{
    sched_job *j = h->data;
    sched *s = h->loop->data;
    uv_poll_stop(h);
    j->cancel = true;
    sc_fail_job(s, j, SCHED_CANCELLED, "the client closed the connection");
    sc_schedule(s);
}

/* ========================================================================
 * admission and submission
 * ====================================================================== */

sched_admission sched_admit(sched *s, srv_model *m)
{
    if (atomic_load(&s->draining) || !atomic_load(&s->models->ready))
        return SCHED_UNAVAILABLE;
    long n = atomic_fetch_add(&m->inflight, 1) + 1;
    atomic_fetch_add(&s->inflight_total, 1);
    if (atomic_load(&s->draining)) {
        sched_release(s, m);
        return SCHED_UNAVAILABLE;
    }
    if (n > atomic_load(&m->max_queue)) {
        sched_release(s, m);
        return SCHED_QUEUE_FULL;
    }
    return SCHED_ADMITTED;
}

void sched_release(sched *s, srv_model *m)
{
    atomic_fetch_sub(&m->inflight, 1);
    long left = atomic_fetch_sub(&s->inflight_total, 1) - 1;
    if (left == 0 && atomic_load(&s->draining)) {
        pthread_mutex_lock(&s->inbox_mu);
        if (!s->closing)
            uv_async_send(&s->wake);
        pthread_mutex_unlock(&s->inbox_mu);
    }
}

/* The loop's next turn after jobs were submitted on it: decide. */
static void on_kick(uv_idle_t *h)
{
    uv_idle_stop(h);
    sc_schedule(h->loop->data);
}

/* A submitted job, on the loop: run (control), queued, or refused when
 * the grace period of a shutdown is over. */
static void take_job(sched *s, sched_job *j)
{
    if (s->phase >= 3)
        sc_fail_job(s, j, SCHED_SHUTDOWN, "the server is shutting down");
    else if (j->control)
        j->control(s, j);
    else
        sc_enqueue(s, j);
}

void sched_submit(sched *s, sched_job *j)
{
    sched_job_ref(j); /* the scheduler's */
    j->t_submit = uv_hrtime();
    j->next = NULL;
    if (pthread_equal(pthread_self(), s->loop_thread) && s->phase < 4) {
        take_job(s, j);
        uv_idle_start(&s->kick, on_kick); /* no-op when already started */
        return;
    }
    pthread_mutex_lock(&s->inbox_mu);
    if (s->inbox_tail)
        s->inbox_tail->next = j;
    else
        s->inbox = j;
    s->inbox_tail = j;
    if (!s->closing)
        uv_async_send(&s->wake);
    pthread_mutex_unlock(&s->inbox_mu);
}

bool sched_draining(const sched *s)
{
    return atomic_load(&s->unready) || atomic_load(&s->draining);
}

long sched_inflight(const sched *s, const srv_model *m)
{
    return atomic_load(&m->inflight);
}

long sched_queue_depth(const sched *s, const srv_variant *v)
{
    return v ? atomic_load(&v->queue_depth) : 0;
}

long sched_shadow_depth(const sched *s, const srv_model *m)
{
    return atomic_load(&s->shadow_depth[m->index]);
}

/* A batch's pooled forward: a vector per text, and its norm. */
static mt_status forward_pooled(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                const int32_t *segs, int nseq, float *out, float *norms,
                                mt_err *err)
{
    return mt_model_forward(m, ids, offsets, nseq, out, norms, err);
}

/* A token-row batch's forward: the hidden states, no pooling, no norms. */
static mt_status forward_tokens(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                const int32_t *segs, int nseq, float *out, float *norms,
                                mt_err *err)
{
    return mt_model_forward_tokens(m, ids, offsets, nseq, out, err);
}

/* A classifier's batch: nlabels raw scores per text or pair. */
static mt_status forward_scores(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                const int32_t *segs, int nseq, float *out, float *norms,
                                mt_err *err)
{
    return mt_model_forward_scores(m, ids, offsets, segs, nseq, out, err);
}

/* A batch of a model with token heads: every output, a row per token. */
static mt_status forward_outputs(mt_model *m, const int32_t *ids, const int32_t *offsets,
                                 const int32_t *segs, int nseq, float *out, float *norms,
                                 mt_err *err)
{
    return mt_model_forward_outputs(m, ids, offsets, nseq, out, norms, err);
}

/* The job kinds (server/core/kinds.h), one row each. */
const sched_kind_row sched_kinds[SCHED_KINDS] = {
    [SCHED_KIND_EMBED] = {.name = "embed", .forward = forward_pooled, .shadowable = true},
    [SCHED_KIND_TOKENS] = {.name = "tokens", .forward = forward_tokens, .per_token = true},
    [SCHED_KIND_SHADOW] = {.name = "shadow", .forward = forward_pooled, .background = true,
                           .late = "shadow run waited too long"},
    [SCHED_KIND_SCORE] = {.name = "score", .forward = forward_scores, .scores = true},
    [SCHED_KIND_OUTPUTS] = {.name = "outputs", .forward = forward_outputs, .per_token = true,
                            .outputs = true},
};

int sched_row_width(sched_kind k, const srv_variant *v)
{
    return sched_kinds[k].scores    ? v->nlabels
           : sched_kinds[k].outputs ? v->outputs_width
                                    : v->hidden;
}

/* ========================================================================
 * the loop
 * ====================================================================== */

vq *sc_vq_get(sched *s, srv_variant *v, sched_kind kind)
{
    void **slot = &v->q[kind];
    if (*slot)
        return *slot;
    vq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->m = v->m;
    q->v = v;
    q->kind = kind;
    srv_variant_ref(v);
    q->next = s->qs;
    s->qs = q;
    *slot = q;
    return q;
}

/* Frees the queues of retired builds that have nothing queued or running
 * (each drops its reference to its build). */
void sc_reap(sched *s)
{
    for (vq **pp = &s->qs; *pp;) {
        vq *q = *pp;
        if (!atomic_load(&q->v->retired) || q->n || q->running) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        q->v->q[q->kind] = NULL;
        free(q->items);
        srv_variant_unref(q->v);
        free(q);
    }
}

/* Queues the texts of a newly submitted job and starts watching its socket. */
void sc_enqueue(sched *s, sched_job *j)
{
    vq *q = j->q ? j->q : sc_vq_get(s, j->v, j->kind);
    uint64_t now = uv_hrtime();
    if (!q) {
        sc_fail_job(s, j, SCHED_FAILED, "out of memory queueing the request");
        return;
    }
    j->q = q;
    j->t_queued = now;
    if (q->n + (size_t)j->n > q->cap) {
        size_t cap = q->cap ? q->cap : 256;
        while (cap < q->n + (size_t)j->n)
            cap *= 2;
        item *ni = realloc(q->items, sizeof *ni * cap);
        if (!ni) {
            sc_fail_job(s, j, SCHED_FAILED, "out of memory queueing the request");
            return;
        }
        q->items = ni;
        q->cap = cap;
    }
    for (int i = 0; i < j->n; i++) {
        int nt = j->off[i + 1] - j->off[i];
        q->items[q->n++] = (item){j, i, nt, now};
        q->ntokens += nt;
    }
    j->queued = j->n;
    sc_set_depth(s, q);
    /* the gap between arrivals, averaged over the last few (a request of
     * n texts counts as n arrivals) */
    if (q->last_arrival) {
        double g = (double)(now - q->last_arrival) / j->n;
        q->gap = q->gap > 0 ? 0.75 * q->gap + 0.25 * g : g;
    }
    q->last_arrival = now;
    if (j->fd >= 0) {
        uv_poll_t *p = malloc(sizeof *p);
        if (p && uv_poll_init_socket(&s->loop, p, j->fd) == 0) {
            p->data = j;
            uv_poll_start(p, UV_DISCONNECT, on_watch);
            j->watch = p;
        } else {
            free(p); /* no watch: a disconnect is then noticed at the answer */
        }
    }
}

static void on_timer(uv_timer_t *t)
{
    sc_schedule(t->loop->data);
}

/* The scheduler's one decision point: fails what is past its deadline,
 * gives due batches to idle workers, and arms the timer for the next due
 * batch or deadline. */
void sc_schedule(sched *s)
{
    if (s->phase >= 4)
        return;
    uint64_t now = uv_hrtime(), next = UINT64_MAX;
    for (vq *q = s->qs; q; q = q->next) {
        for (size_t k = 0; k < q->n;) {
            sched_job *j = q->items[k].job;
            if (j->deadline && j->deadline <= now) {
                char msg[160];
                snprintf(msg, sizeof msg,
                         "the request waited longer than request_timeout_ms (%d ms) in the queue",
                         s->cfg->request_timeout_ms);
                const char *late = sched_kinds[q->kind].late;
                sc_fail_job(s, j, SCHED_TIMEOUT, late ? late : msg);
                k = 0; /* the queue was compacted */
                continue;
            }
            if (j->deadline && j->deadline < next)
                next = j->deadline;
            k++;
        }
    }
    for (int wi = 0; wi < s->nworkers; wi++) {
        worker *w = &s->workers[wi];
        if (w->busy)
            continue;
        /* client queues first; background ones (shadow texts) only when no
         * client batch is sc_due, so that they use idle time (and wait while
         * clients do not) */
        vq *best = NULL, *best_shadow = NULL;
        bool client_waiting = false;
        for (vq *q = s->qs; q; q = q->next) {
            uint64_t d = sc_worker_takes(s, w, q) ? sc_due(s, q, now) : 0;
            if (!d)
                continue;
            const bool bg = sched_kinds[q->kind].background;
            client_waiting |= !bg;
            vq **b = bg ? &best_shadow : &best;
            if (d <= now) {
                if (!*b || q->items[0].t < (*b)->items[0].t)
                    *b = q;
            } else if (d < next) {
                next = d;
            }
        }
        if (!best && !client_waiting)
            best = best_shadow;
        if (!best) /* nothing due on its device: another device's worker may have */
            continue;
        sc_dispatch(s, best, w);
    }
    sc_reap(s);
    /* a due batch left for a busy worker needs no timer: the worker's
     * completion calls schedule */
    uv_timer_stop(&s->timer);
    if (next != UINT64_MAX) {
        uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 0;
        uv_timer_start(&s->timer, on_timer, ms, 0);
    }
    if (s->phase >= 2)
        sc_drain_check(s);
}

static void on_wake(uv_async_t *a)
{
    sched *s = a->loop->data;
    pthread_mutex_lock(&s->inbox_mu);
    sched_job *jobs = s->inbox;
    batch *done = s->done;
    s->inbox = s->inbox_tail = NULL;
    s->done = NULL;
    pthread_mutex_unlock(&s->inbox_mu);
    while (done) {
        batch *next = done->next;
        sc_batch_done(s, done);
        done = next;
    }
    while (jobs) {
        sched_job *next = jobs->next;
        take_job(s, jobs);
        jobs = next;
    }
    sc_schedule(s);
}

/* ========================================================================
 * control jobs and hooks
 * ====================================================================== */

void sched_job_end(sched *s, sched_job *j, sched_result r, const char *msg)
{
    if (r != SCHED_OK)
        sc_fail_job(s, j, r, msg ? msg : sched_result_name(r));
    else
        sc_end_job(s, j);
}

void sched_cancel(sched *s, sched_job *j)
{
    if (j->ended)
        return;
    j->cancel = true;
    sc_fail_job(s, j, SCHED_CANCELLED, "the client cancelled the call");
    sc_schedule(s);
}

void sched_enqueue(sched *s, sched_job *j)
{
    sched_job_ref(j); /* the scheduler's */
    j->t_submit = uv_hrtime();
    sc_enqueue(s, j);
    sc_schedule(s);
}

uv_loop_t *sched_loop(sched *s)
{
    return &s->loop;
}

void sched_set_close_hook(sched *s, void (*on_close)(void *), void *arg)
{
    s->on_close = on_close;
    s->close_arg = arg;
}

void sched_kick(sched *s)
{
    sc_schedule(s);
}

bool sched_stopping(const sched *s)
{
    return s->phase > 0;
}

/* ========================================================================
 * create / run / destroy
 * ====================================================================== */

void sched_set_hooks(sched *s, void (*on_drain_start)(void *), void (*on_drained)(void *),
                     void *arg)
{
    s->on_drain_start = on_drain_start;
    s->on_drained = on_drained;
    s->hook_arg = arg;
}

bool sc_worker_takes(const sched *s, const worker *w, const vq *q)
{
    const srv_models *ms = s->models;
    if (!ms || ms->ndevices == 0 || q->v->be == w->be)
        return true;
    if (w->dev != 0)
        return false;
    for (int d = 0; d < ms->ndevices; d++) /* a build on no known device: the host's */
        if (ms->devices[d].be == q->v->be)
            return false;
    return true;
}

mt_status sched_create(const cfg_config *cfg, srv_models *models, sched **out, mt_err *err)
{
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    s->cfg = cfg;
    s->models = models;
    pthread_mutex_init(&s->inbox_mu, NULL);
    /* engine_workers for each device (srv_models.devices) */
    const int per = cfg->engine_workers > 0 ? cfg->engine_workers : 1;
    const int ndev = models && models->ndevices > 0 ? models->ndevices : 1;
    int nw = per * ndev;
    s->workers = calloc((size_t)nw, sizeof *s->workers);
    if (!s->workers) {
        sched_destroy(s);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    if (uv_loop_init(&s->loop) != 0) {
        free(s->workers);
        pthread_mutex_destroy(&s->inbox_mu);
        free(s);
        return mt_fail(err, MT_EINTERNAL, "uv_loop_init failed");
    }
    s->loop.data = s;
    s->loop_thread = pthread_self();
    uv_async_init(&s->loop, &s->wake, on_wake);
    uv_timer_init(&s->loop, &s->timer);
    uv_timer_init(&s->loop, &s->drain_timer);
    uv_signal_init(&s->loop, &s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    uv_idle_init(&s->loop, &s->kick);
    s->nhandles_open = 6;
    uv_signal_start(&s->sigterm, sc_on_signal, SIGTERM);
    uv_signal_start(&s->sigint, sc_on_signal, SIGINT);

    for (int i = 0; i < nw; i++) {
        worker *w = &s->workers[i];
        w->s = s;
        w->dev = i / per;
        w->be = models && models->ndevices > 0 ? models->devices[w->dev].be : NULL;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        s->nworkers = i + 1;
        if (pthread_create(&w->th, NULL, sc_worker_main, w) != 0) {
            sched_destroy(s);
            return mt_fail(err, MT_EINTERNAL, "cannot start engine worker %d", i);
        }
        w->started = true;
    }
    *out = s;
    return MT_OK;
}

int sched_run(sched *s)
{
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return 0;
}

void sched_destroy(sched *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nworkers; i++) {
        worker *w = &s->workers[i];
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        if (w->started)
            pthread_join(w->th, NULL);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    if (s->loop.data) {
        sc_close_all(s);
        uv_run(&s->loop, UV_RUN_DEFAULT); /* runs the close callbacks */
        /* what the workers posted after the loop stopped */
        while (s->done) {
            batch *b = s->done;
            s->done = b->next;
            b->q->running--;
            srv_variant_unref(b->q->v);
            sc_batch_free(b);
        }
        int rc = uv_loop_close(&s->loop);
        if (rc != 0)
            log_msg(LOG_WARN, "uv_loop_close: %s (a handle was left open)", uv_strerror(rc));
    }
    while (s->qs) {
        vq *q = s->qs;
        s->qs = q->next;
        q->v->q[q->kind] = NULL;
        free(q->items);
        srv_variant_unref(q->v);
        free(q);
    }
    free(s->workers);
    pthread_mutex_destroy(&s->inbox_mu);
    free(s);
}
