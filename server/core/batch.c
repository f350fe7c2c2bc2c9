/* batch.c: the scheduler's batches: which texts go together (size, tokens,
 * similar lengths), when a queue's batch is due (fixed delay, or "auto"
 * from the fitted service time and the arrival rate), the engine workers
 * that run them, and what comes back. See sched.h for the whole. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/sched_internal.h"

/* ========================================================================
 * workers
 * ====================================================================== */

/* Checks one text's rows of a batch that ran (count rows from row from)
 * and copies them into its job at dst; false (nothing copied) when one is
 * not finite. */
static bool take_rows(const float *from, size_t rows, int h, float *dst)
{
    for (size_t k = 0; k < rows * (size_t)h; k++)
        if (!isfinite(from[k]))
            return false;
    memcpy(dst, from, sizeof(float) * rows * (size_t)h);
    return true;
}

/* The forward of batch b (its kind's: pooled, or a row per token), and
 * its rows into the jobs (b->bad marks a text with a non-finite value). */
static void run_batch(batch *b)
{
    mt_err err;
    const srv_variant *v = b->q->v;
    const sched_kind_row *k = &sched_kinds[b->q->kind];
    const int h = sched_row_width(b->q->kind, v);
    b->st = k->forward(v->model, b->ids, b->off, b->segs, b->n, b->out, b->norms, &err);
    b->t_end = uv_hrtime();
    if (b->st != MT_OK)
        snprintf(b->err, sizeof b->err, "inference failed: %.200s", err.msg);
    for (int i = 0; i < b->n && b->st == MT_OK; i++) {
        sched_job *j = b->items[i].job;
        const int idx = b->items[i].idx;
        if (k->per_token) /* the text's tokens, at its place among the job's */
            b->bad[i] = !take_rows(b->out + (size_t)b->off[i] * h,
                                   (size_t)(b->off[i + 1] - b->off[i]), h,
                                   j->out + (size_t)j->off[idx] * h);
        else
            b->bad[i] = !take_rows(b->out + (size_t)i * h, 1, h, j->out + (size_t)idx * h);
        if (!b->bad[i] && j->norms)
            j->norms[idx] = b->norms[i];
    }
}

/* One engine worker: runs the batches the loop assigns, one at a time,
 * and hands each back with its rows already copied into the jobs. One per
 * backend by default: a CPU forward already uses every core (and a CUDA
 * worker will own one stream). */
void *sc_worker_main(void *arg)
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

        b->t_start = uv_hrtime();
        const srv_variant *v = b->q->v;
        if (v->be->ops->set_threads) /* one thread for a batch of a few tokens (team.c) */
            v->be->ops->set_threads(v->be, b->tokens <= v->solo_tokens ? 1 : 0);
        run_batch(b);
        /* counted before any job of the batch is answered, so that a client
         * that reads the statistics after its answer finds its batch */
        if (b->st == MT_OK && !sched_kinds[b->q->kind].background)
            stats_observe_batch(&b->q->v->slot->metrics, b->n, b->tokens, b->t_end - b->t_start);

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

void sc_batch_free(batch *b)
{
    if (!b)
        return;
    free(b->items);
    free(b->ids);
    free(b->off);
    free(b->out);
    free(b->norms);
    free(b->bad);
    free(b->segs);
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

/* When the head of a queue should go, under "auto" (times in ns).
 *
 * The worker is idle and n texts wait, the oldest since in->oldest.
 * Waiting is only worth it when another text is expected soon enough to
 * pay for the wait, and when the oldest text would still meet the latency
 * target:
 *   - the service time of a batch is fitted online as a + b * tokens
 *     (a: the fixed cost of a batch, b: the cost per token), from the
 *     batches that ran. A text that arrives just after a batch left waits
 *     for that batch to run, so the oldest text never waits longer than
 *     the predicted service time of its batch with one more text (the
 *     rule of renting skis: the wait costs no more than what it saves the
 *     next text). Arrivals extend the wait only through that bound: under
 *     a steady stream at utilisation u the wait ends after about
 *     a / (1 - u), while a closed-loop burst (clients answered together
 *     send again together) is gathered whole. Before this bound the wait
 *     grew with every arrival up to the latency budget: at half load
 *     p50 was 29 ms against 12 ms with a fixed 2 ms delay
 *     (bench/results/auto-delay-2026-11-24.md);
 *   - arrivals are tracked as a short average of the gaps between them
 *     (gap) and the time of the last one. The next is expected at
 *     last + gap; once 2 * gap has passed without one, the burst is over
 *     (in a closed loop, clients only send again after their answers)
 *     and the batch goes;
 *   - the oldest text must finish by oldest + 0.7 * latency target (the
 *     target is a p99 and the fit a mean, hence the margin): the batch
 *     goes when waiting longer would pass that, counting the predicted
 *     service time of the batch with one more text.
 * Until the fit has batches of a few sizes (they form on their own while
 * the worker is busy), and at low load (gaps longer than a), it does not
 * wait: a lone request gets batch-1 latency. */
uint64_t sc_auto_due(const sc_auto_in *in)
{
    const uint64_t now = in->now;
    if (!in->fitted || in->gap <= 0 || in->n == 0)
        return now;
    double since = (double)(now - in->last_arrival);
    if (since >= 2 * in->gap || in->gap > in->a)
        return now;
    double service = in->a + in->b * in->tok_per_text * ((double)in->n + 1);
    double by_target = (double)in->oldest + 0.7 * in->target_ns - service;
    double due_at = (double)in->last_arrival + 2 * in->gap;
    if (due_at > (double)in->oldest + service)
        due_at = (double)in->oldest + service;
    if (due_at > by_target)
        due_at = by_target;
    return due_at <= (double)now ? now : (uint64_t)due_at;
}

static uint64_t auto_due(const vq *q, uint64_t now)
{
    sc_auto_in in = {.now = now, .oldest = q->items[0].t, .last_arrival = q->last_arrival,
                     .gap = q->gap, .n = q->n,
                     .tok_per_text = (double)q->ntokens / (double)q->n,
                     .target_ns = q->m->cfg.latency_target_ms * 1e6};
    in.fitted = fit_get(q, &in.a, &in.b);
    return sc_auto_due(&in);
}

/* When q's batch is due (ns); 0 when nothing waits. */
uint64_t sc_due(sched *s, const vq *q, uint64_t now)
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
    const int maxb = sched_kinds[q->kind].background && q->m->cfg.max_batch_size > SHADOW_MAX_BATCH
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

/* Takes the next batch off q and gives it to the idle worker w. On an
 * allocation failure the chosen texts' jobs fail (500) instead. */
void sc_dispatch(sched *s, vq *q, worker *w)
{
    unsigned char *take = malloc(q->n ? q->n : 1);
    batch *b = calloc(1, sizeof *b);
    long tokens = 0;
    int n = take ? choose(q, take, &tokens) : 0;
    const int h = sched_row_width(q->kind, q->v);
    if (b && take) {
        b->items = malloc(sizeof *b->items * (size_t)n);
        b->ids = malloc(sizeof *b->ids * (size_t)(tokens ? tokens : 1));
        b->off = malloc(sizeof *b->off * (size_t)(n + 1));
        b->out = malloc(sizeof *b->out * (size_t)(sched_kinds[q->kind].per_token ? tokens : n) *
                        (size_t)h);
        b->norms = malloc(sizeof *b->norms * (size_t)n);
        b->bad = calloc((size_t)n, 1);
        if (sched_kinds[q->kind].scores)
            b->segs = malloc(sizeof *b->segs * (size_t)n);
    }
    if (!take || !b || !b->items || !b->ids || !b->off || !b->out || !b->norms || !b->bad ||
        (sched_kinds[q->kind].scores && !b->segs)) {
        sched_job *victim = q->items[0].job;
        free(take);
        sc_batch_free(b);
        sc_fail_job(s, victim, SCHED_FAILED, "out of memory forming a batch");
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
        if (b->segs)
            b->segs[bi] = j->segs ? j->segs[it->idx] : it->ntok;
        b->items[bi++] = *it;
        j->queued--;
        j->running++;
        if (!j->t_start)
            j->t_start = now;
        q->ntokens -= it->ntok;
    }
    q->n = k;
    sc_set_depth(s, q);
    free(take);
    q->running++;
    srv_variant_ref(q->v); /* the batch's own, until batch_done */
    w->busy = true;
    pthread_mutex_lock(&w->mu);
    w->b = b;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* A batch came back: account it, and end the jobs it finished. */
void sc_batch_done(sched *s, batch *b)
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
         * back */
        if (first_in_batch) {
            j->compute_ns += ns;
            j->batches++;
            j->t_run = b->t_start;
            j->t_ran = b->t_end;
            j->run_texts = b->n;
            j->run_tokens = b->tokens;
        }
        j->running--;
        if (b->st != MT_OK)
            sc_fail_job(s, j, SCHED_FAILED, b->err);
        else if (b->bad[i]) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "variant %s produced a non-finite value (input %d); no output sent",
                     q->v->cfg.name, b->items[i].idx);
            sc_fail_job(s, j, SCHED_FAILED, msg);
        }
        if (!j->queued && !j->running)
            sc_end_job(s, j);
    }
    q->running--; /* only now may sc_reap() free q */
    srv_variant_unref(q->v);
    sc_batch_free(b);
}

