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
 *   - HTTP threads: sched_admit/sched_release (atomics), and
 *     sched_submit (the inbox, under inbox_mu, then uv_async_send).
 *   - workers: their own slot (w->mu/w->cv), the done list (inbox_mu),
 *     and the results of the jobs their batch holds whole, which they end
 *     (end_whole_jobs) before handing the batch back.
 *   - the loop thread: everything else. uv_async_send coalesces, so the
 *     async callback drains both lists whole.
 * Every uv_async_send happens under inbox_mu after checking s->closing, so
 * no thread sends on a handle the loop has begun to close.
 */
#include "server/core/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "engine/metrics.h"
#include "server/base/log.h"

/* ========================================================================
 * types
 * ====================================================================== */

typedef struct {
    sched_job *job;
    int idx;      /* text index in the job */
    int ntok;
    uint64_t t;   /* when it was queued */
} item;

typedef struct vq {
    srv_model *m;
    srv_variant *v;  /* a reference */
    bool shadow;     /* shadow texts for the reference: runs only on idle workers */
    int running;     /* batches of it on workers */
    struct vq *next;
    item *items;
    size_t n, cap;
    long ntokens;
    atomic_long depth; /* n, readable from other threads */
    long published;    /* n as last published by set_depth */
    /* auto delay: arrivals (ns between them, averaged; the last one) and
     * the service-time fit */
    double gap;
    uint64_t last_arrival;
    double sw, sx, sy, sxx, sxy; /* decayed sums for ns = a + b * tokens */
} vq;

typedef struct worker worker;

/* Shadow batches are kept small, so that a client request that arrives
 * while one runs waits little. */
#define SHADOW_MAX_BATCH 8

typedef struct batch {
    vq *q;
    worker *w;
    int n;
    item *items;
    int32_t *ids, *off;
    float *out;
    unsigned char *bad; /* per text: a non-finite output */
    /* per text: the first of a job whose texts are all in this batch and
     * whose on_done may run on the worker (it ends the job there) */
    unsigned char *whole;
    long tokens;
    uint64_t t_start, t_end;
    mt_status st;
    char err[256];
    struct batch *next;
} batch;

struct worker {
    sched *s;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    batch *b; /* assigned (worker's until it posts it back) */
    bool quit, started;
    bool busy; /* the loop's view */
};

struct sched {
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t timer, drain_timer;
    uv_signal_t sigterm, sigint;
    int nhandles_open;

    pthread_mutex_t inbox_mu;
    sched_job *inbox, *inbox_tail;
    batch *done;
    bool closing; /* under inbox_mu */

    const cfg_config *cfg;
    srv_models *models;
    vq *qs;        /* every queue, linked */
    worker *workers;
    int nworkers;

    atomic_bool unready, draining;
    atomic_long inflight_total;
    atomic_long shadow_depth[CFG_MAX_MODELS * 4]; /* per model index */
    int phase;             /* 0 serving, 1 drain delay, 2 draining, 3 grace over, 4 closing */
    long dropped;

    void (*on_drain_start)(void *);
    void (*on_drained)(void *);
    void *hook_arg;
    void (*on_close)(void *);
    void *close_arg;
};

static void schedule(sched *s);
static void drain_check(sched *s);
static void shadow_maybe(sched *s, sched_job *j);
static void enqueue(sched *s, sched_job *j);

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

static void watch_closed(uv_handle_t *h)
{
    free(h);
}

/* The loop's last part in an ended job (ended here, or on its worker by
 * end_whole_jobs): the shadow draw, then the scheduler's reference. */
static void release_job(sched *s, sched_job *j)
{
    if (j->shadowable && j->result == SCHED_OK)
        shadow_maybe(s, j);
    sched_job_unref(j);
}

/* The end of a job on the loop: stop watching its socket (before the
 * connection is resumed, so the descriptor is ours no longer), tell the
 * submitter, release it. */
static void end_job(sched *s, sched_job *j)
{
    if (j->ended)
        return;
    j->ended = true;
    j->t_done = uv_hrtime();
    if (j->watch) {
        uv_close((uv_handle_t *)j->watch, watch_closed);
        j->watch = NULL;
    }
    if (j->on_done)
        j->on_done(j);
    release_job(s, j);
}

/* Publishes q's length (after a change of q->n): the build's gauge, or
 * the model's shadow count. */
static void set_depth(sched *s, vq *q)
{
    long d = (long)q->n - q->published;
    q->published = (long)q->n;
    atomic_store(&q->depth, (long)q->n);
    if (q->shadow)
        atomic_fetch_add(&s->shadow_depth[q->m->index], d);
    else
        atomic_store(&q->v->queue_depth, (long)q->n);
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
    set_depth(s, q);
    j->queued = 0;
}

/* Ends j with a failure: its queued texts are dropped; if none is running
 * it ends now, else when its running batch comes back. */
static void fail_job(sched *s, sched_job *j, sched_result r, const char *msg)
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
        end_job(s, j);
}

/* The client socket of a waiting job hung up: nobody is left to answer,
 * so its queued texts are dropped. */
static void on_watch(uv_poll_t *h, int status, int events)
{
    sched_job *j = h->data;
    sched *s = h->loop->data;
    uv_poll_stop(h);
    j->cancel = true;
    fail_job(s, j, SCHED_CANCELLED, "the client closed the connection");
    schedule(s);
}

/* ========================================================================
 * admission (HTTP threads)
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

void sched_submit(sched *s, sched_job *j)
{
    sched_job_ref(j); /* the scheduler's */
    j->t_submit = uv_hrtime();
    j->next = NULL;
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

/* ========================================================================
 * workers
 * ====================================================================== */

/* On the worker, once a batch's rows are in: ends each job that the batch
 * holds whole (marked by dispatch, which also stopped watching its socket)
 * and whose rows are all finite, by calling its on_done here, so that its
 * connection is resumed without waiting for the loop thread to wake. The
 * loop touches none of such a job's results meanwhile: it is in no queue,
 * has no watch, and its batch is not back; batch_done then only gives the
 * scheduler's reference back (after a shadow run, if drawn). */
static void end_whole_jobs(batch *b)
{
    const uint64_t ns = b->t_end - b->t_start, now = uv_hrtime();
    for (int i = 0; i < b->n; i++) {
        if (!b->whole[i])
            continue;
        sched_job *j = b->items[i].job;
        bool finite = true;
        for (int k = i; k < b->n && finite; k++)
            finite = b->items[k].job != j || !b->bad[k];
        if (!finite)
            continue;
        j->compute_ns += ns;
        j->batches++;
        j->t_done = now;
        j->ended = true;
        j->on_done(j);
    }
}

/* One engine worker: runs the batches the loop assigns, one at a time,
 * and hands each back with its rows already copied into the jobs. One per
 * backend by default: a CPU forward already uses every core (and a CUDA
 * worker will own one stream). */
static void *worker_main(void *arg)
{
    worker *w = arg;
    sched *s = w->s;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->b && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        batch *b = w->b;
        bool quit = w->quit && !b;
        pthread_mutex_unlock(&w->mu);
        if (quit)
            break;

        mt_err err;
        const int h = b->q->v->hidden;
        b->t_start = uv_hrtime();
        b->st = mt_model_forward(b->q->v->model, b->ids, b->off, b->n, b->out, &err);
        b->t_end = uv_hrtime();
        if (b->st != MT_OK)
            snprintf(b->err, sizeof b->err, "inference failed: %.200s", err.msg);
        for (int i = 0; i < b->n && b->st == MT_OK; i++) {
            const float *row = b->out + (size_t)i * h;
            for (int k = 0; k < h; k++)
                if (!isfinite(row[k])) {
                    b->bad[i] = 1;
                    break;
                }
            sched_job *j = b->items[i].job;
            if (!b->bad[i])
                memcpy(j->out + (size_t)b->items[i].idx * h, row, sizeof(float) * (size_t)h);
        }
        /* counted before any job of the batch is answered, so that a client
         * that reads the statistics after its answer finds its batch */
        if (b->st == MT_OK && !b->q->shadow)
            stats_observe_batch(&b->q->v->slot->metrics, b->n, b->tokens, b->t_end - b->t_start);
        if (b->st == MT_OK)
            end_whole_jobs(b);

        pthread_mutex_lock(&w->mu);
        w->b = NULL;
        pthread_mutex_unlock(&w->mu);
        pthread_mutex_lock(&s->inbox_mu);
        b->next = s->done;
        s->done = b;
        if (!s->closing)
            uv_async_send(&s->wake);
        pthread_mutex_unlock(&s->inbox_mu);
    }
    return NULL;
}

static void batch_free(batch *b)
{
    if (!b)
        return;
    free(b->items);
    free(b->ids);
    free(b->off);
    free(b->out);
    free(b->bad);
    free(b->whole);
    free(b);
}

/* ========================================================================
 * the service-time model and the "auto" delay
 * ====================================================================== */

/* Folds a finished batch into the variant's fit of service time against
 * tokens (ns = a + b * tokens), by least squares with exponential
 * forgetting so that it follows changes in load and machine. */
static void fit_add(vq *q, long tokens, uint64_t ns)
{
    const double keep = 0.97;
    double x = (double)tokens, y = (double)ns;
    q->sw = q->sw * keep + 1;
    q->sx = q->sx * keep + x;
    q->sy = q->sy * keep + y;
    q->sxx = q->sxx * keep + x * x;
    q->sxy = q->sxy * keep + x * y;
}

/* The fitted (a, b); false until the batches seen vary enough in size. */
static bool fit_get(const vq *q, double *a, double *b)
{
    if (q->sw < 3)
        return false;
    double mx = q->sx / q->sw, my = q->sy / q->sw;
    double vxx = q->sxx / q->sw - mx * mx, vxy = q->sxy / q->sw - mx * my;
    if (vxx < 1e-9 * (mx * mx + 1) || vxx <= 0)
        return false;
    *b = vxy / vxx;
    *a = my - *b * mx;
    if (*b <= 0)
        return false;
    if (*a < 0)
        *a = 0;
    return true;
}

/* When the head of q should go, under "auto".
 *
 * The worker is idle and n texts wait, the oldest since t0. Waiting is
 * only worth it when another text is expected soon enough to pay for the
 * wait, and when the oldest text would still meet the latency target:
 *   - the service time of a batch is fitted online as a + b * tokens
 *     (a: the fixed cost of a batch, b: the cost per token), from the
 *     batches that ran. Joining a batch that goes anyway saves a new
 *     text the fixed cost a, so we never wait longer than a for the next
 *     arrival;
 *   - arrivals are tracked as a short average of the gaps between them
 *     (gap) and the time of the last one. The next is expected at
 *     last + gap; once 2 * gap has passed without one, the burst is over
 *     (in a closed loop, clients only send again after their answers)
 *     and the batch goes;
 *   - the oldest text must finish by t0 + 0.7 * latency_target_ms (the
 *     target is a p99 and the fit a mean, hence the margin): the batch
 *     goes when waiting longer would pass that, counting the predicted
 *     service time of the batch with one more text.
 * Every arrival and every finished batch decides again, so under a steady
 * stream a batch grows until max_batch_size, max_batch_tokens, the
 * latency budget or a pause in arrivals. Until the fit has batches of
 * a few sizes (they form on their own while the worker is busy), and at
 * low load (gaps longer than a), it does not wait: a lone request gets
 * batch-1 latency. bench/results/server-*.md compares it with fixed
 * delays. */
static uint64_t auto_due(const vq *q, uint64_t now)
{
    const cfg_model *c = &q->m->cfg;
    double a, b;
    if (!fit_get(q, &a, &b) || q->gap <= 0)
        return now;
    double since = (double)(now - q->last_arrival);
    if (since >= 2 * q->gap || q->gap > a)
        return now;
    double tok = (double)q->ntokens / (double)q->n; /* per text */
    double by_target = (double)q->items[0].t + 0.7 * c->latency_target_ms * 1e6 -
                       (a + b * tok * ((double)q->n + 1));
    double due_at = (double)q->last_arrival + 2 * q->gap;
    if (due_at > (double)now + a)
        due_at = (double)now + a;
    if (due_at > by_target)
        due_at = by_target;
    return due_at <= (double)now ? now : (uint64_t)due_at;
}

/* When q's batch is due (ns); 0 when nothing waits. */
static uint64_t due(sched *s, const vq *q, uint64_t now)
{
    if (!q->n)
        return 0;
    const cfg_model *c = &q->m->cfg;
    if (s->phase >= 2 || (long)q->n >= c->max_batch_size || q->ntokens >= c->max_batch_tokens)
        return now;
    if (c->delay_auto)
        return auto_due(q, now);
    return q->items[0].t + (uint64_t)c->max_queue_delay_us * 1000;
}

/* ========================================================================
 * batches
 * ====================================================================== */

typedef struct {
    const item *items;
    size_t i;
} by_len;

static int cmp_len(const void *a, const void *b)
{
    const by_len *x = a, *y = b;
    int d = x->items[x->i].ntok - y->items[y->i].ntok;
    return d ? d : (x->i > y->i) - (x->i < y->i);
}

/* Chooses the texts of the next batch of q into take[] (flags): the oldest
 * first, then in arrival order while max_batch_size and max_batch_tokens
 * allow; when the tokens would overflow, texts of lengths close to the
 * oldest's from a window of the queue instead, so a batch holds similar
 * lengths (little padding for a padded backend). Returns the count. */
static int choose(const vq *q, unsigned char *take, long *tokens)
{
    const int maxb = q->shadow && q->m->cfg.max_batch_size > SHADOW_MAX_BATCH
                         ? SHADOW_MAX_BATCH
                         : q->m->cfg.max_batch_size;
    const long maxt = q->m->cfg.max_batch_tokens;
    size_t cnt = q->n < (size_t)maxb ? q->n : (size_t)maxb;
    long sum = 0;
    for (size_t i = 0; i < cnt; i++)
        sum += q->items[i].ntok;
    memset(take, 0, q->n);
    if (sum <= maxt) {
        memset(take, 1, cnt);
        *tokens = sum;
        return (int)cnt;
    }
    size_t win = q->n < 4 * (size_t)maxb ? q->n : 4 * (size_t)maxb;
    by_len *o = malloc(sizeof *o * win);
    if (!o) { /* no memory for sorting: the oldest alone still goes */
        take[0] = 1;
        *tokens = q->items[0].ntok;
        return 1;
    }
    size_t p = 0;
    for (size_t i = 0; i < win; i++)
        o[i] = (by_len){q->items, i};
    qsort(o, win, sizeof *o, cmp_len);
    while (o[p].i != 0)
        p++;
    size_t lo = p, hi = p;
    int n = 1;
    long t = q->items[0].ntok;
    take[0] = 1;
    const int head = q->items[0].ntok;
    for (bool lo_ok = true, hi_ok = true; n < maxb && (lo_ok || hi_ok);) {
        lo_ok = lo_ok && lo > 0;
        hi_ok = hi_ok && hi + 1 < win;
        if (!lo_ok && !hi_ok)
            break;
        bool use_lo = lo_ok && (!hi_ok || head - q->items[o[lo - 1].i].ntok <=
                                              q->items[o[hi + 1].i].ntok - head);
        size_t cand = use_lo ? o[lo - 1].i : o[hi + 1].i;
        if (t + q->items[cand].ntok > maxt) {
            if (use_lo)
                lo_ok = false;
            else
                hi_ok = false;
            continue;
        }
        if (use_lo)
            lo--;
        else
            hi++;
        take[cand] = 1;
        t += q->items[cand].ntok;
        n++;
    }
    free(o);
    *tokens = t;
    return n;
}

/* Marks in b the jobs it holds whole (nothing of them queued or in
 * another batch) whose on_done may run on the worker, and stops watching
 * their sockets: the worker will end them (end_whole_jobs), and a hang-up
 * now could not stop the batch anyway; MHD sees it when it answers. */
static void mark_whole_jobs(batch *b)
{
    for (int i = 0; i < b->n; i++) {
        sched_job *j = b->items[i].job;
        if (!j->on_done_any_thread || j->queued || j->result != SCHED_OK)
            continue;
        int here = 0;
        bool first = true;
        for (int k = 0; k < b->n; k++)
            if (b->items[k].job == j) {
                first &= k >= i;
                here++;
            }
        if (!first || here != j->running)
            continue;
        b->whole[i] = 1;
        if (j->watch) {
            uv_close((uv_handle_t *)j->watch, watch_closed);
            j->watch = NULL;
        }
    }
}

/* Takes the next batch off q and gives it to the idle worker w. On an
 * allocation failure the chosen texts' jobs fail (500) instead. */
static void dispatch(sched *s, vq *q, worker *w)
{
    unsigned char *take = malloc(q->n ? q->n : 1);
    batch *b = calloc(1, sizeof *b);
    long tokens = 0;
    int n = take ? choose(q, take, &tokens) : 0;
    const int h = q->v->hidden;
    if (b && take) {
        b->items = malloc(sizeof *b->items * (size_t)n);
        b->ids = malloc(sizeof *b->ids * (size_t)(tokens ? tokens : 1));
        b->off = malloc(sizeof *b->off * (size_t)(n + 1));
        b->out = malloc(sizeof *b->out * (size_t)n * (size_t)h);
        b->bad = calloc((size_t)n, 1);
        b->whole = calloc((size_t)n, 1);
    }
    if (!take || !b || !b->items || !b->ids || !b->off || !b->out || !b->bad || !b->whole) {
        sched_job *victim = q->items[0].job;
        free(take);
        batch_free(b);
        fail_job(s, victim, SCHED_FAILED, "out of memory forming a batch");
        return;
    }
    uint64_t now = uv_hrtime();
    b->q = q;
    b->w = w;
    b->n = n;
    b->tokens = tokens;
    b->off[0] = 0;
    size_t k = 0;
    int bi = 0;
    for (size_t i = 0; i < q->n; i++) {
        item *it = &q->items[i];
        if (!take[i]) {
            q->items[k++] = *it;
            continue;
        }
        sched_job *j = it->job;
        const int32_t *src = j->ids + j->off[it->idx];
        memcpy(b->ids + b->off[bi], src, sizeof(int32_t) * (size_t)it->ntok);
        b->off[bi + 1] = b->off[bi] + it->ntok;
        b->items[bi++] = *it;
        j->queued--;
        j->running++;
        if (!j->t_start)
            j->t_start = now;
        q->ntokens -= it->ntok;
    }
    q->n = k;
    set_depth(s, q);
    free(take);
    mark_whole_jobs(b);
    q->running++;
    srv_variant_ref(q->v); /* the batch's own, until batch_done */
    w->busy = true;
    pthread_mutex_lock(&w->mu);
    w->b = b;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* A batch came back: account it, and end the jobs it finished. */
static void batch_done(sched *s, batch *b)
{
    vq *q = b->q;
    b->w->busy = false;
    uint64_t ns = b->t_end - b->t_start;
    if (b->st == MT_OK)
        fit_add(q, b->tokens, ns);
    for (int i = 0; i < b->n; i++) {
        sched_job *j = b->items[i].job;
        bool first_in_batch = true;
        for (int k = 0; k < i; k++)
            if (b->items[k].job == j) {
                first_in_batch = false;
                break;
            }
        /* a job with texts in a running batch ends only when they come
         * back, unless the worker ended it (end_whole_jobs) */
        const bool worker_ended = j->ended;
        if (first_in_batch && !worker_ended) {
            j->compute_ns += ns;
            j->batches++;
        }
        j->running--;
        if (worker_ended) {
            if (!j->running)
                release_job(s, j);
            continue;
        }
        if (b->st != MT_OK)
            fail_job(s, j, SCHED_FAILED, b->err);
        else if (b->bad[i]) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "variant %s produced a non-finite value (input %d); no output sent",
                     q->v->cfg.name, b->items[i].idx);
            fail_job(s, j, SCHED_FAILED, msg);
        }
        if (!j->queued && !j->running)
            end_job(s, j);
    }
    q->running--; /* only now may reap() free q */
    srv_variant_unref(q->v);
    batch_free(b);
}

/* ========================================================================
 * the loop
 * ====================================================================== */

/* The queue of build v (its shadow queue when shadow), made on first use. */
static vq *vq_get(sched *s, srv_variant *v, bool shadow)
{
    void **slot = shadow ? &v->shadow_q : &v->sched_q;
    if (*slot)
        return *slot;
    vq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->m = v->m;
    q->v = v;
    q->shadow = shadow;
    srv_variant_ref(v);
    q->next = s->qs;
    s->qs = q;
    *slot = q;
    return q;
}

/* Frees the queues of retired builds that have nothing queued or running
 * (each drops its reference to its build). */
static void reap(sched *s)
{
    for (vq **pp = &s->qs; *pp;) {
        vq *q = *pp;
        if (!atomic_load(&q->v->retired) || q->n || q->running) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        if (q->shadow)
            q->v->shadow_q = NULL;
        else
            q->v->sched_q = NULL;
        free(q->items);
        srv_variant_unref(q->v);
        free(q);
    }
}

/* Queues the texts of a newly submitted job and starts watching its socket. */
static void enqueue(sched *s, sched_job *j)
{
    vq *q = j->q ? j->q : vq_get(s, j->v, false);
    uint64_t now = uv_hrtime();
    if (!q) {
        fail_job(s, j, SCHED_FAILED, "out of memory queueing the request");
        return;
    }
    j->q = q;
    if (q->n + (size_t)j->n > q->cap) {
        size_t cap = q->cap ? q->cap : 256;
        while (cap < q->n + (size_t)j->n)
            cap *= 2;
        item *ni = realloc(q->items, sizeof *ni * cap);
        if (!ni) {
            fail_job(s, j, SCHED_FAILED, "out of memory queueing the request");
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
    set_depth(s, q);
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
    schedule(t->loop->data);
}

/* The scheduler's one decision point: fails what is past its deadline,
 * gives due batches to idle workers, and arms the timer for the next due
 * batch or deadline. */
static void schedule(sched *s)
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
                fail_job(s, j, SCHED_TIMEOUT, q->shadow ? "shadow run waited too long" : msg);
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
        /* client queues first; shadow texts only when no client batch is
         * due, so that they use idle time (and wait while clients do not) */
        vq *best = NULL, *best_shadow = NULL;
        bool client_waiting = false;
        for (vq *q = s->qs; q; q = q->next) {
            uint64_t d = due(s, q, now);
            if (!d)
                continue;
            client_waiting |= !q->shadow;
            vq **b = q->shadow ? &best_shadow : &best;
            if (d <= now) {
                if (!*b || q->items[0].t < (*b)->items[0].t)
                    *b = q;
            } else if (d < next) {
                next = d;
            }
        }
        if (!best && !client_waiting)
            best = best_shadow;
        if (!best)
            break;
        dispatch(s, best, w);
    }
    reap(s);
    /* a due batch left for a busy worker needs no timer: the worker's
     * completion calls schedule */
    uv_timer_stop(&s->timer);
    if (next != UINT64_MAX) {
        uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 0;
        uv_timer_start(&s->timer, on_timer, ms, 0);
    }
    if (s->phase >= 2)
        drain_check(s);
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
        batch_done(s, done);
        done = next;
    }
    while (jobs) {
        sched_job *next = jobs->next;
        if (s->phase >= 3)
            fail_job(s, jobs, SCHED_SHUTDOWN, "the server is shutting down");
        else if (jobs->control)
            jobs->control(s, jobs);
        else
            enqueue(s, jobs);
        jobs = next;
    }
    schedule(s);
}

/* ========================================================================
 * shadow runs: a fraction of client requests run again on the reference
 * ====================================================================== */

/* A client job's texts again, on the model's reference build, with the
 * client's vectors kept to compare to. It owns copies of everything, so
 * the client's request may be answered and freed meanwhile. */
typedef struct {
    sched_job job;
    srv_variant *primary; /* the build the client was served by (a reference) */
    srv_variant *ref;     /* the reference build (a reference) */
    float *primary_out;   /* (n, hidden) */
} shadow_job;

/* Frees a shadow run and drops its two builds (its last reference). */
static void shadow_free(sched_job *j)
{
    shadow_job *sj = (shadow_job *)j;
    srv_variant_unref(sj->primary);
    srv_variant_unref(sj->ref);
    free(j->ids);
    free(j->off);
    free(j->out);
    free(sj->primary_out);
    free(sj);
}

/* The shadow draw: xorshift on the loop thread (spread, not secrecy). */
static double loop_uniform(void)
{
    static unsigned long long x = 0x2545F4914F6CDD1Dull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (double)(x >> 11) / 9007199254740992.0;
}

/* The reference's answer is in: drift per text, into the client build's
 * figures; a build whose window mean falls under its floor is taken out
 * of rotation (srv_drift_check). */
static void shadow_done(sched_job *j)
{
    shadow_job *sj = (shadow_job *)j;
    stats_variant *pm = &sj->primary->slot->metrics;
    if (j->result != SCHED_OK) {
        pthread_mutex_lock(&pm->lock);
        if (j->result == SCHED_FAILED)
            pm->shadow_failed++;
        else
            pm->shadow_dropped++;
        pthread_mutex_unlock(&pm->lock);
        return;
    }
    const int h = sj->primary->hidden;
    for (int i = 0; i < j->n; i++) {
        const float *a = sj->primary_out + (size_t)i * h, *b = j->out + (size_t)i * h;
        stats_drift_add(&sj->primary->drift, mt_cosine(a, b, h), mt_max_abs_diff(a, b, (size_t)h));
    }
    pthread_mutex_lock(&pm->lock);
    pm->shadow_compared += (uint64_t)j->n;
    pthread_mutex_unlock(&pm->lock);
    srv_drift_check((srv_models *)j->owner, sj->primary);
}

/* Called as a client job ends well: with probability shadow_rate, queue
 * its texts on the reference's shadow queue, or count them dropped when
 * that queue is full (shadow_queue). */
static void shadow_maybe(sched *s, sched_job *j)
{
    const cfg_model *c = &j->m->cfg;
    if (c->reference < 0 || c->shadow_rate <= 0 || s->phase >= 2 ||
        loop_uniform() >= c->shadow_rate)
        return;
    srv_variant *ref = srv_reference(j->m);
    if (!ref || ref == j->v || ref->hidden != j->v->hidden) {
        srv_variant_unref(ref);
        return;
    }
    stats_variant *pm = &j->v->slot->metrics;
    vq *q = vq_get(s, ref, true);
    shadow_job *sj = NULL;
    if (q && (long)q->n + j->n <= c->shadow_queue)
        sj = calloc(1, sizeof *sj);
    const size_t nf = (size_t)j->n * (size_t)j->v->hidden;
    const size_t nt = (size_t)j->off[j->n];
    if (sj) {
        sj->job.ids = malloc(sizeof(int32_t) * (nt ? nt : 1));
        sj->job.off = malloc(sizeof(int32_t) * ((size_t)j->n + 1));
        sj->job.out = malloc(sizeof(float) * nf);
        sj->primary_out = malloc(sizeof(float) * nf);
    }
    if (!sj || !sj->job.ids || !sj->job.off || !sj->job.out || !sj->primary_out) {
        if (sj) {
            free(sj->job.ids);
            free(sj->job.off);
            free(sj->job.out);
            free(sj->primary_out);
            free(sj);
        }
        srv_variant_unref(ref);
        pthread_mutex_lock(&pm->lock);
        pm->shadow_dropped += (uint64_t)j->n;
        pthread_mutex_unlock(&pm->lock);
        return;
    }
    memcpy(sj->job.ids, j->ids, sizeof(int32_t) * nt);
    memcpy(sj->job.off, j->off, sizeof(int32_t) * ((size_t)j->n + 1));
    memcpy(sj->primary_out, j->out, sizeof(float) * nf);
    sj->primary = j->v;
    srv_variant_ref(j->v);
    sj->ref = ref;
    sched_job *sh = &sj->job;
    atomic_init(&sh->refs, 0);
    sh->m = j->m;
    sh->v = ref;
    sh->n = j->n;
    sh->fd = -1;
    sh->q = q;
    sh->owner = s->models;
    sh->deadline = uv_hrtime() + (uint64_t)s->cfg->request_timeout_ms * 1000000ull;
    sh->on_done = shadow_done;
    sh->on_free = shadow_free;
    /* queued without scheduling: every path that ends a job schedules next */
    sched_job_ref(sh);
    sh->t_submit = uv_hrtime();
    enqueue(s, sh);
}

/* ========================================================================
 * control jobs and hooks
 * ====================================================================== */

void sched_job_end(sched *s, sched_job *j, sched_result r, const char *msg)
{
    if (r != SCHED_OK)
        fail_job(s, j, r, msg ? msg : sched_result_name(r));
    else
        end_job(s, j);
}

void sched_enqueue(sched *s, sched_job *j)
{
    sched_job_ref(j); /* the scheduler's */
    j->t_submit = uv_hrtime();
    enqueue(s, j);
    schedule(s);
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
    schedule(s);
}

bool sched_stopping(const sched *s)
{
    return s->phase > 0;
}

/* ========================================================================
 * shutdown: SIGTERM/SIGINT -> unready -> (drain_delay_ms) -> stop
 * admitting -> finish in-flight work within shutdown_grace_ms -> exit
 * ====================================================================== */

static void handle_closed(uv_handle_t *h)
{
    sched *s = h->loop->data;
    s->nhandles_open--;
}

static void close_all(sched *s)
{
    if (s->phase >= 4)
        return;
    s->phase = 4;
    pthread_mutex_lock(&s->inbox_mu);
    s->closing = true;
    pthread_mutex_unlock(&s->inbox_mu);
    uv_handle_t *hs[] = {(uv_handle_t *)&s->wake, (uv_handle_t *)&s->timer,
                         (uv_handle_t *)&s->drain_timer, (uv_handle_t *)&s->sigterm,
                         (uv_handle_t *)&s->sigint};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++)
        if (!uv_is_closing(hs[i]))
            uv_close(hs[i], handle_closed);
    if (s->on_close)
        s->on_close(s->close_arg);
    if (s->on_drained)
        s->on_drained(s->hook_arg);
}

static bool workers_idle(const sched *s)
{
    for (int i = 0; i < s->nworkers; i++)
        if (s->workers[i].busy)
            return false;
    return true;
}

/* Closes the loop once nothing admitted is left unanswered (or, after the
 * grace period, once the workers are idle). */
static void drain_check(sched *s)
{
    if (s->phase < 2 || s->phase >= 4 || !workers_idle(s))
        return;
    for (vq *q = s->qs; q; q = q->next)
        if (q->n)
            return;
    pthread_mutex_lock(&s->inbox_mu);
    bool pending = s->inbox || s->done;
    pthread_mutex_unlock(&s->inbox_mu);
    if (pending)
        return;
    if (atomic_load(&s->inflight_total) > 0)
        return; /* on_final ends the wait after the grace period */
    close_all(s);
}

/* The last wait after the grace period: answers already written get this
 * long to go out; a running batch is always waited for (its jobs must be
 * answered before the HTTP front stops). */
static void on_final(uv_timer_t *t)
{
    sched *s = t->loop->data;
    if (workers_idle(s))
        close_all(s);
    else
        uv_timer_start(&s->drain_timer, on_final, 50, 0);
}

static void on_grace_over(uv_timer_t *t)
{
    sched *s = t->loop->data;
    s->phase = 3;
    long dropped = 0;
    for (vq *q = s->qs; q; q = q->next)
        while (q->n) {
            dropped += !q->shadow;
            fail_job(s, q->items[0].job, SCHED_SHUTDOWN,
                     "the server is shutting down (shutdown_grace_ms is over)");
        }
    if (dropped)
        log_msg(LOG_WARN, "shutdown: grace period over: %ld queued requests answered 503",
                dropped);
    uv_timer_stop(&s->drain_timer);
    uv_timer_start(&s->drain_timer, on_final, 1000, 0);
    drain_check(s);
}

static void start_draining(sched *s)
{
    s->phase = 2;
    atomic_store(&s->draining, true);
    if (s->on_drain_start)
        s->on_drain_start(s->hook_arg);
    log_msg(LOG_INFO, "shutdown: not admitting; draining %ld in-flight requests (grace %d ms)",
            atomic_load(&s->inflight_total), s->cfg->shutdown_grace_ms);
    /* shadow runs have no client waiting: they are dropped, not drained */
    for (vq *q = s->qs; q; q = q->next)
        while (q->shadow && q->n)
            fail_job(s, q->items[0].job, SCHED_SHUTDOWN, "shutting down");
    uv_timer_stop(&s->drain_timer);
    uv_timer_start(&s->drain_timer, on_grace_over, (uint64_t)s->cfg->shutdown_grace_ms, 0);
    schedule(s);
}

static void on_drain_delay_over(uv_timer_t *t)
{
    start_draining(t->loop->data);
}

static void on_signal(uv_signal_t *h, int sig)
{
    sched *s = h->loop->data;
    if (s->phase == 0) {
        atomic_store(&s->unready, true);
        log_msg(LOG_INFO, "signal %d: readiness off, shutting down", sig);
        fprintf(stderr, "mantissa: signal %d: stopping\n", sig);
        if (s->cfg->drain_delay_ms > 0) {
            s->phase = 1;
            uv_timer_start(&s->drain_timer, on_drain_delay_over,
                           (uint64_t)s->cfg->drain_delay_ms, 0);
        } else {
            start_draining(s);
        }
    } else if (s->phase < 3) { /* a second signal: do not wait any longer */
        log_msg(LOG_WARN, "signal %d again: ending the grace period now", sig);
        if (s->phase == 1)
            start_draining(s);
        uv_timer_stop(&s->drain_timer);
        on_grace_over(&s->drain_timer);
    }
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

mt_status sched_create(const cfg_config *cfg, srv_models *models, sched **out, mt_err *err)
{
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    s->cfg = cfg;
    s->models = models;
    pthread_mutex_init(&s->inbox_mu, NULL);
    int nw = cfg->engine_workers > 0 ? cfg->engine_workers : 1;
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
    uv_async_init(&s->loop, &s->wake, on_wake);
    uv_timer_init(&s->loop, &s->timer);
    uv_timer_init(&s->loop, &s->drain_timer);
    uv_signal_init(&s->loop, &s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    s->nhandles_open = 5;
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);

    for (int i = 0; i < nw; i++) {
        worker *w = &s->workers[i];
        w->s = s;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        s->nworkers = i + 1;
        if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
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
        close_all(s);
        uv_run(&s->loop, UV_RUN_DEFAULT); /* runs the close callbacks */
        /* what the workers posted after the loop stopped */
        while (s->done) {
            batch *b = s->done;
            s->done = b->next;
            b->q->running--;
            srv_variant_unref(b->q->v);
            batch_free(b);
        }
        int rc = uv_loop_close(&s->loop);
        if (rc != 0)
            log_msg(LOG_WARN, "uv_loop_close: %s (a handle was left open)", uv_strerror(rc));
    }
    while (s->qs) {
        vq *q = s->qs;
        s->qs = q->next;
        if (q->shadow)
            q->v->shadow_q = NULL;
        else
            q->v->sched_q = NULL;
        free(q->items);
        srv_variant_unref(q->v);
        free(q);
    }
    free(s->workers);
    pthread_mutex_destroy(&s->inbox_mu);
    free(s);
}
