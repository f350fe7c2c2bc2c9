/* drain.c: the scheduler's shutdown: SIGTERM/SIGINT turn readiness off,
 * then (after drain_delay_ms) admission stops and everything admitted is
 * run and answered within shutdown_grace_ms; what is still queued after
 * that is answered 503; then the loop closes. */
#include <stdio.h>

#include "server/base/log.h"
#include "server/core/sched_internal.h"

/* ========================================================================
 * shutdown: SIGTERM/SIGINT -> unready -> (drain_delay_ms) -> stop
 * admitting -> finish in-flight work within shutdown_grace_ms -> exit
 * ====================================================================== */

static void handle_closed(uv_handle_t *h)
{
    sched *s = h->loop->data;
    s->nhandles_open--;
}

void sc_close_all(sched *s)
{
    if (s->phase >= 4)
        return;
    s->phase = 4;
    pthread_mutex_lock(&s->inbox_mu);
    s->closing = true;
    pthread_mutex_unlock(&s->inbox_mu);
    uv_handle_t *hs[] = {(uv_handle_t *)&s->wake, (uv_handle_t *)&s->timer,
                         (uv_handle_t *)&s->drain_timer, (uv_handle_t *)&s->sigterm,
                         (uv_handle_t *)&s->sigint, (uv_handle_t *)&s->kick};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++)
        if (!uv_is_closing(hs[i]))
            uv_close(hs[i], handle_closed);
    if (s->on_close)
        s->on_close(s->close_arg);
    if (s->on_drained)
        s->on_drained(s->hook_arg);
}

bool sc_workers_idle(const sched *s)
{
    for (int i = 0; i < s->nworkers; i++)
        if (s->workers[i].busy)
            return false;
    return true;
}

/* Closes the loop once nothing admitted is left unanswered (or, after the
 * grace period, once the workers are idle). */
void sc_drain_check(sched *s)
{
    if (s->phase < 2 || s->phase >= 4 || !sc_workers_idle(s))
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
    sc_close_all(s);
}

/* The last wait after the grace period: answers already written get this
 * long to go out; a running batch is always waited for (its jobs must be
 * answered before the HTTP front stops). */
static void on_final(uv_timer_t *t)
{
    sched *s = t->loop->data;
    if (sc_workers_idle(s))
        sc_close_all(s);
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
            dropped += !sched_kinds[q->kind].background;
            sc_fail_job(s, q->items[0].job, SCHED_SHUTDOWN,
                     "the server is shutting down (shutdown_grace_ms is over)");
        }
    if (dropped)
        log_msg(LOG_WARN, "shutdown: grace period over: %ld queued requests answered 503",
                dropped);
    uv_timer_stop(&s->drain_timer);
    uv_timer_start(&s->drain_timer, on_final, 1000, 0);
    sc_drain_check(s);
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
        while (sched_kinds[q->kind].background && q->n)
            sc_fail_job(s, q->items[0].job, SCHED_SHUTDOWN, "shutting down");
    uv_timer_stop(&s->drain_timer);
    uv_timer_start(&s->drain_timer, on_grace_over, (uint64_t)s->cfg->shutdown_grace_ms, 0);
    sc_schedule(s);
}

static void on_drain_delay_over(uv_timer_t *t)
{
    start_draining(t->loop->data);
}

void sc_on_signal(uv_signal_t *h, int sig)
{
    sched *s = h->loop->data;
    if (s->phase == 0) {
        /* without a drain delay, admission stops before readiness goes:
         * once a probe or client has seen the server unready, no request
         * is admitted (both flags are atomics, for sched_admit may run on
         * another thread than the loop's: tests do) */
        if (s->cfg->drain_delay_ms <= 0)
            atomic_store(&s->draining, true);
        atomic_store(&s->unready, true);
        log_line l; /* written at every log_level, as the start-up lines are */
        log_begin(&l, LOG_INFO | LOG_ALWAYS, "stopping");
        log_int(&l, "signal", sig);
        log_int(&l, "drain_delay_ms", s->cfg->drain_delay_ms);
        log_words(&l, "signal %d: stopping", sig);
        log_end(&l);
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

