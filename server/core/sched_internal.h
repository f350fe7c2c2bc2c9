/* sched_internal.h: what the scheduler's files share (sched.c: jobs,
 * admission, the loop and its queues; batch.c: batches, the auto delay and
 * the engine workers; shadow.c: shadow runs; drain.c: the shutdown). The
 * rest of the server sees only sched.h. Everything here belongs to the
 * loop thread unless it says otherwise. */
#ifndef MT_SERVER_CORE_SCHED_INTERNAL_H
#define MT_SERVER_CORE_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "server/core/sched.h"

typedef struct {
    sched_job *job;
    int idx;      /* text index in the job */
    int ntok;
    uint64_t t;   /* when it was queued */
} item;

typedef struct vq {
    srv_model *m;
    srv_variant *v;  /* a reference */
    sched_kind kind; /* its texts' kind: sched_kinds[kind] says how they run */
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
    int32_t *segs;      /* a scores queue's: per text, where its pair's second text starts */
    float *out;         /* (n, width): hidden, or nlabels for a scores queue; for a
                         * tokens queue (tokens, hidden) */
    float *norms;       /* per text: its vector's norm as pooled (mt_model_forward) */
    unsigned char *bad; /* per text: a non-finite output */
    long tokens;
    uint64_t t_start, t_end;
    mt_status st;
    char err[256];
    struct batch *next;
} batch;

struct worker {
    sched *s;
    /* the device whose builds' batches it runs (srv_models.devices[dev]);
     * each device has its own engine_workers, so a batch on one never
     * waits for a worker busy on another */
    const mt_backend *be;
    int dev;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    batch *b; /* assigned (worker's until it posts it back) */
    bool quit, started;
    bool busy; /* the loop's view */
};

struct sched {
    uv_loop_t loop;
    pthread_t loop_thread; /* the thread that made the loop and runs it */
    uv_async_t wake;
    uv_timer_t timer, drain_timer;
    uv_signal_t sigterm, sigint;
    /* jobs submitted on the loop are scheduled at the loop's next turn,
     * so that the requests read in one pass of the HTTP transport go out
     * in one batch */
    uv_idle_t kick;
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


/* ---- sched.c ---- */
void sc_watch_closed(uv_handle_t *h);
/* Ends j on the loop: stops watching its socket, tells the submitter,
 * releases it. */
void sc_end_job(sched *s, sched_job *j);
/* Ends j with a failure: its queued texts are dropped; if none is running
 * it ends now, else when its running batch comes back. */
void sc_fail_job(sched *s, sched_job *j, sched_result r, const char *msg);
/* Publishes q's length after a change of q->n. */
void sc_set_depth(sched *s, vq *q);
/* Build v's queue of texts of that kind, made on first use. */
vq *sc_vq_get(sched *s, srv_variant *v, sched_kind kind);
/* Queues the texts of a newly submitted job and starts watching its socket. */
void sc_enqueue(sched *s, sched_job *j);
/* Whether worker w runs q's batches: q's build is on w's device (or, on
 * no device the server made, the host's: devices[0]). */
bool sc_worker_takes(const sched *s, const worker *w, const vq *q);
/* The one decision point: deadlines, due batches to idle workers, the timer. */
void sc_schedule(sched *s);

/* ---- batch.c ---- */
/* When q's batch is due (ns); 0 when nothing waits. */
uint64_t sc_due(sched *s, const vq *q, uint64_t now);

/* The "auto" delay's decision, a pure function of what the loop knows
 * (times in ns; batch.c says the rule). Returns when the batch should go,
 * never before now. */
typedef struct {
    uint64_t now, oldest, last_arrival; /* the oldest waiting text's arrival; the last one's */
    double gap;                         /* mean time between arrivals; <= 0: unknown */
    bool fitted;                        /* a and b hold a service-time fit */
    double a, b;                        /* a batch of t tokens takes a + b * t */
    double tok_per_text;                /* mean tokens of the waiting texts */
    size_t n;                           /* texts waiting */
    double target_ns;                   /* the model's latency_target_ms */
} sc_auto_in;
uint64_t sc_auto_due(const sc_auto_in *in);
/* Takes the next batch off q and gives it to the idle worker w. */
void sc_dispatch(sched *s, vq *q, worker *w);
/* A batch came back: account it, and end the jobs it finished. */
void sc_batch_done(sched *s, batch *b);
void sc_batch_free(batch *b);
void *sc_worker_main(void *arg);

/* ---- shadow.c ---- */
/* A client job ended well: with probability shadow_rate, queue its texts
 * on the reference's shadow queue. */
void sc_shadow_maybe(sched *s, sched_job *j);

/* ---- drain.c ---- */
void sc_on_signal(uv_signal_t *h, int sig);
/* Closes the loop once nothing admitted is left unanswered. */
void sc_drain_check(sched *s);
void sc_close_all(sched *s);

#endif
