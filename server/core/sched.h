/* sched.h: the serving core's scheduler. One libuv loop thread owns every
 * queue and timer, and drives the HTTP transport too (server/net/http.c),
 * so requests are admitted and submitted (already tokenized) on the loop
 * itself; engine workers (one thread each, per backend) run the batches it
 * forms and hand them back through a locked list and uv_async_send.
 *
 *   loop thread: sched_admit -> (suspend connection) -> sched_submit
 *   loop thread: per-variant queues -> batch (size, tokens, delay) -> worker
 *   worker:      mt_model_forward on the batch -> rows into each job's output
 *   loop thread: batch back -> job done -> job->on_done (resumes the connection)
 *
 * A job's texts are queued one item per text, so a request may be split
 * across batches; its output rows are written in place, so they join back
 * in order. A job is refcounted: the submitter holds one reference, the
 * scheduler another until it has finished with it.
 */
#ifndef MT_SERVER_SCHED_H
#define MT_SERVER_SCHED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/status.h"
#include "server/core/config.h"
#include "server/core/models.h"

typedef struct sched sched;
typedef struct sched_job sched_job;

/* How a job ended (sched_job.result). */
typedef enum {
    SCHED_OK = 0,
    SCHED_TIMEOUT,   /* its deadline passed while it was queued (504) */
    SCHED_CANCELLED, /* the client went away (nobody to answer) */
    SCHED_SHUTDOWN,  /* the grace period of a shutdown ran out (503) */
    SCHED_FAILED,    /* the engine failed (500); msg says why */
} sched_result;

struct sched_job {
    /* ---- filled by the submitter before sched_submit ---- */
    srv_model *m;
    srv_variant *v;
    int n;              /* texts */
    int32_t *ids;       /* packed token ids of the n texts */
    int32_t *off;       /* n + 1 offsets into ids */
    int32_t *segs;      /* NULL, or n: where text pair i's second text starts (its
                         * tokenize_pair seg; off[i + 1] - off[i]: a single text) */
    float *out;         /* (n, hidden): filled in place; with tokens (off[n], hidden);
                         * scores: (n, nlabels) */
    float *norms;       /* NULL, or n: each vector's norm before the model's normalisation */
    sched_kind kind;    /* what its texts' forward is (server/core/kinds.h): a pooled
                         * vector each (0), a row per token, ...; batched by kind */
    uint64_t deadline;  /* uv_hrtime() ns; 0: none */
    int fd;             /* client socket to watch for a disconnect; -1: none */
    void *owner;        /* the submitter's (the HTTP connection) */
    bool shadowable;    /* a client request: may be also run on the reference (shadow) */
    /* Set: not texts but a control request (admin, compare): the loop
     * calls it instead of queueing the job, and whoever it hands the job
     * to ends it with sched_job_end. */
    void (*control)(sched *s, sched_job *j);
    void *control_arg;
    /* Called once, on the loop thread, when the job has ended either way. */
    void (*on_done)(sched_job *j);
    /* Called when the last reference goes: frees the job's memory. */
    void (*on_free)(sched_job *j);

    /* ---- results, valid once on_done has run ---- */
    sched_result result;
    char msg[256];
    uint64_t t_submit, t_start, t_done; /* ns: submitted, first text dispatched, ended */
    uint64_t t_queued;                  /* ns: the loop queued its texts */
    uint64_t t_run, t_ran;              /* ns: the forward of its last batch began, ended */
    int run_texts;                      /* that batch's texts and tokens */
    long run_tokens;
    uint64_t compute_ns;                /* summed over the batches it was in */
    int batches;

    /* ---- the scheduler's ---- */
    atomic_int refs;
    int queued, running; /* texts waiting, texts in a running batch */
    bool ended, cancel;
    void *watch;         /* uv_poll_t on fd while queued or running */
    void *q;             /* the queue its texts wait in */
    sched_job *next;     /* inbox link */
};

/* Creates the scheduler and its loop on the calling thread (which then runs
 * sched_run), and starts the engine workers. Queues are made per build as
 * requests for it arrive, and dropped once the build is retired and idle. */
mt_status sched_create(const cfg_config *cfg, srv_models *models, sched **out, mt_err *err);
/* Runs the loop until a shutdown (SIGTERM/SIGINT or sched_stop) has drained.
 * Returns 0 when everything admitted was answered. */
int sched_run(sched *s);
/* Stops workers, closes every handle; uv_loop_close must then succeed. */
void sched_destroy(sched *s);

/* Called (from the loop) when a shutdown starts, so the front can stop
 * accepting; and once the drain is over. */
void sched_set_hooks(sched *s, void (*on_drain_start)(void *), void (*on_drained)(void *),
                     void *arg);

/* Why a request was or was not admitted. */
typedef enum {
    SCHED_ADMITTED,    /* a place is taken: give it back with sched_release */
    SCHED_QUEUE_FULL,  /* the model has batching.max_queue requests admitted */
    SCHED_UNAVAILABLE, /* not ready, or shutting down */
} sched_admission;

/* Admission (any thread; the loop's in serving): takes a place for one request of m, or says
 * why not. Once admitted, the caller must sched_release after it has
 * answered (whether or not it submitted a job). */
sched_admission sched_admit(sched *s, srv_model *m);
/* Hands an admitted job to the scheduler: queued at once on the loop
 * thread, through the locked inbox from any other. Takes the scheduler's
 * reference itself. */
void sched_submit(sched *s, sched_job *j);

/* Marks an answered request as gone (the response was sent or dropped), so
 * a drain knows when every admitted request has been answered. */
void sched_release(sched *s, srv_model *m);

void sched_job_ref(sched_job *j);
void sched_job_unref(sched_job *j);

/* Loop thread: ends a control job (or fails it with r and msg when r is
 * not SCHED_OK), which resumes its connection. */
void sched_job_end(sched *s, sched_job *j, sched_result r, const char *msg);
/* Loop thread: the client of a submitted job went away without closing a
 * socket the scheduler watches (a cancelled gRPC call): its queued texts are
 * dropped and it ends as SCHED_CANCELLED, at once or when its running batch
 * does. */
void sched_cancel(sched *s, sched_job *j);
/* Loop thread: queues a job of texts made by a control job (compare). */
void sched_enqueue(sched *s, sched_job *j);

/* The loop, for modules that add handles to it (server/core/reload.c), and a
 * hook called (on the loop) when the loop begins to close, so that they
 * close theirs. */
struct uv_loop_s *sched_loop(sched *s);
void sched_set_close_hook(sched *s, void (*on_close)(void *), void *arg);
/* Loop thread: decide again now (dispatch due batches, free the queues of
 * retired builds); after a swap. */
void sched_kick(sched *s);
/* Whether a shutdown has begun (the loop's view; loop thread). */
bool sched_stopping(const sched *s);

bool sched_draining(const sched *s);
/* Requests admitted and not yet released (the inflight gauge). */
long sched_inflight(const sched *s, const srv_model *m);
/* Texts queued (not yet in a batch) for a build. */
long sched_queue_depth(const sched *s, const srv_variant *v);
/* Shadow texts queued for the reference, per model (the loop's count). */
long sched_shadow_depth(const sched *s, const srv_model *m);

const char *sched_result_name(sched_result r);

#endif
