/* shadow.c: shadow runs: a fraction (shadow_rate) of client requests run
 * again on the model's reference build when the engine is idle, and each
 * text's cosine and max abs error to the reference go into the serving
 * build's drift figures (and may take it out of rotation, drift_floor). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/metrics.h"
#include "server/core/sched_internal.h"

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
void sc_shadow_maybe(sched *s, sched_job *j)
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
    vq *q = sc_vq_get(s, ref, SCHED_KIND_SHADOW);
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
    sc_enqueue(s, sh);
}

