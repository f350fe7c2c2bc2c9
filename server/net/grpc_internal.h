/* grpc_internal.h: what the two files of the gRPC transport share
 * (server/net/grpc.c: calls and their events; grpc_server.c: the server,
 * its start and its shutdown): the state of a call and of the server, and
 * the functions one calls in the other. See grpc.h. */
#ifndef MT_SERVER_NET_GRPC_INTERNAL_H
#define MT_SERVER_NET_GRPC_INTERNAL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <uv.h>

#include "server/net/grpc.h"

typedef enum { OP_NEW, OP_RECV, OP_SENT, OP_CLOSED, OP_RESUME, OP_SHUTDOWN, OP_QUEUE_DONE } op_kind;

typedef struct gcall gcall;

/* A completion-queue tag: what completed, for which call. */
typedef struct {
    op_kind kind;
    gcall *c;
} gtag;

typedef struct {
    gtag *tag;
    bool ok;
} gevent;

#define MAX_MD 32 /* request metadata copied into headers */
#define MAX_METHODS 32
/* calls asked for ahead, per method: ModelInfer (the first method of the
 * table that is called most) more, so that a burst finds them waiting */
#define PENDING_FIRST 8
#define PENDING_OTHERS 2

struct gcall {
    grpc_front *g;
    grpc_call *call;
    grpc_call_details details;  /* an unregistered method's (its name, deadline) */
    gpr_timespec deadline;      /* a registered method's */
    int reg;                    /* the index of its registered method; -1: unregistered */
    grpc_metadata_array md;
    grpc_byte_buffer *recv;
    int cancelled;
    gtag t_new, t_recv, t_sent, t_closed, t_resume;
    int in_flight;              /* batches started and not completed */
    bool closed, answered, sent_ok, dispatched;
    uint64_t t_start;
    /* the request */
    const grpc_front_method *method;
    grpc_front_rest rest;
    char *msg;
    size_t msg_len;
    const char *headers[2 * (MAX_MD + 4) + 1];
    char *hbuf;
    char log_path[128];
    http_call *app_call;
    http_deferred *deferred;
    /* the answer, kept until its batch completes */
    grpc_metadata send_md[HTTP_MAX_HEADERS];
    size_t nsend_md;
    char md_names[HTTP_MAX_HEADERS][48];
    grpc_slice status_details;
    grpc_metadata trailer;
    bool has_trailer;
    gcall *prev, *next;         /* the live list */
};

struct grpc_front {
    grpc_front_options o;
    grpc_server *server;
    grpc_completion_queue *cq;
    int port;
    pthread_t cq_thread;
    bool thread_running;
    uv_async_t *async;          /* malloc'd: freed by its close callback */
    pthread_mutex_t lock;       /* the event list, between the two threads */
    pthread_cond_t cond;        /* (stop without a loop waits on it) */
    gevent *ev;
    size_t nev, capev;
    gtag t_shutdown, t_queue_done;
    gcall *live;
    int pending;                /* request_call tags out */
    /* the application's methods, registered with gRPC so that a call
     * arrives with its message (no receive step); others come unregistered
     * and are answered UNIMPLEMENTED */
    void *registered[MAX_METHODS];
    uv_timer_t *grace;          /* after the last call of a shutdown (malloc'd) */
    bool started, shutdown_sent, shutdown_done, detaching, queue_done;
};

/* ---- grpc.c ---- */

/* The completion-queue thread's event for the loop (any thread). */
void gf_push(grpc_front *g, gtag *tag, bool ok);
/* The completion-queue thread: each event into the list, the loop woken. */
void *gf_cq_main(void *arg);
/* Asks gRPC for the next call of registered method reg (-1: unregistered). */
void gf_request_call(grpc_front *g, int reg);
/* Releases a call (its done hook first). */
void gf_free_call(gcall *c);
/* Answers a call with a status and no message. */
void gf_send_status(gcall *c, int code, const char *msg);
/* Handles the events the queue thread left; false when there were none. */
bool gf_drain_events(grpc_front *g);
void gf_on_async(uv_async_t *a);

/* ---- grpc_server.c ---- */

/* After a shutdown: the connections closed, then the queue ended, once the
 * last call is gone. */
void gf_maybe_end_queue(grpc_front *g);
/* A malloc'd handle's close callback. */
void gf_free_handle(uv_handle_t *h);

#endif
