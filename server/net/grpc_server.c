/* grpc_server.c: the gRPC transport's server (see grpc.h): gRPC's C core
 * set up with our limits, TLS and log, the methods registered, the port
 * bound early, serving started on the loop; the shutdown: new calls
 * refused, those still waiting for a message refused as a draining server
 * refuses, connections closed once the last answer is out, the queue and
 * its thread ended. The calls themselves are in grpc.c. */
#include "server/net/grpc.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "engine/jsonfile.h"
#include "server/base/log.h"
#include "server/net/grpc_internal.h"

/* The grace after the last call is over: the connections still open are
 * closed. */
static void on_grace(uv_timer_t *t)
{
    grpc_front *g = t->data;
    grpc_server_cancel_all_calls(g->server);
}

/* After a shutdown, once the last call is gone (its answer written) and
 * every call asked for ahead has come back (so none was matched to a client
 * and is still on its way here): the shutdown completes when the clients
 * have closed their connections, which busy ones do at once (the server's
 * GOAWAY); an idle client would answer gRPC's closing ping only after 20 s,
 * so what is still open after GRACE_MS is closed. Then the queue ends. */
#define GRACE_MS 1000
void gf_maybe_end_queue(grpc_front *g)
{
    if (!g->detaching || g->live || g->pending)
        return;
    if (!g->grace && !g->shutdown_done && (g->grace = malloc(sizeof *g->grace))) {
        uv_timer_init(g->o.loop, g->grace);
        g->grace->data = g;
        uv_timer_start(g->grace, on_grace, GRACE_MS, 0);
    }
    if (g->shutdown_done && !g->queue_done) {
        if (g->grace) {
            uv_close((uv_handle_t *)g->grace, gf_free_handle);
            g->grace = NULL;
        }
        g->queue_done = true;
        grpc_completion_queue_shutdown(g->cq);
    }
}

void gf_free_handle(uv_handle_t *h)
{
    free(h);
}

/* ========================================================================
 * the server
 * ====================================================================== */

/* gRPC's own messages, in our log's format. */
static void grpc_log(gpr_log_func_args *a)
{
    int level = a->severity == GPR_LOG_SEVERITY_ERROR ? LOG_WARN : LOG_DEBUG;
    log_msg(level, "grpc: %s", a->message);
}

bool grpc_front_available(void)
{
    return true;
}

mt_status grpc_front_bind(const grpc_front_options *o, grpc_front **out, mt_err *err)
{
    *out = NULL;
    char *cert = NULL, *key = NULL;
    size_t n;
    mt_status rs = MT_OK;
    if (o->tls_cert && *o->tls_cert &&
        ((rs = mt_read_file(o->tls_cert, 1 << 20, &cert, &n, err)) != MT_OK ||
         (rs = mt_read_file(o->tls_key, 1 << 20, &key, &n, err)) != MT_OK)) {
        free(cert);
        return rs;
    }
    gpr_set_log_function(grpc_log);
    gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
    grpc_init();
    grpc_front *g = calloc(1, sizeof *g);
    if (!g) {
        free(cert);
        free(key);
        grpc_shutdown_blocking();
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    g->o = *o;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->t_shutdown = (gtag){OP_SHUTDOWN, NULL};
    g->t_queue_done = (gtag){OP_QUEUE_DONE, NULL};
    grpc_arg args[3] = {
        {.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = o->max_message_bytes > INT_MAX ? INT_MAX : (int)o->max_message_bytes},
        {.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS,
         .value.integer = o->max_streams > 0 ? o->max_streams : 100},
        /* two servers on one port would share it silently: refuse, as HTTP does */
        {.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_ALLOW_REUSEPORT, .value.integer = 0},
    };
    grpc_channel_args ca = {.num_args = 3, .args = args};
    g->server = grpc_server_create(&ca, NULL);
    g->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(g->server, g->cq, NULL);
    for (int m = 0; m < o->nmethods && m < MAX_METHODS; m++)
        g->registered[m] = grpc_server_register_method(
            g->server, o->methods[m].path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    grpc_server_credentials *creds;
    if (cert) {
        grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
        creds = grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL);
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    char addr[300];
    const bool v6 = strchr(o->host, ':') != NULL;
    snprintf(addr, sizeof addr, "%s%s%s:%d", v6 ? "[" : "", o->host, v6 ? "]" : "", o->port);
    g->port = grpc_server_add_http2_port(g->server, addr, creds);
    grpc_server_credentials_release(creds);
    free(cert);
    free(key);
    *out = g;
    if (g->port <= 0) {
        grpc_front_stop(g);
        *out = NULL;
        return mt_fail(err, MT_EIO,
                       "server.grpc_listen: cannot listen on %s for gRPC (the port is in use, "
                       "or the address is not this machine's)",
                       addr);
    }
    return MT_OK;
}

mt_status grpc_front_start(grpc_front *g, const grpc_front_options *o, mt_err *err)
{
    g->o = *o;
    if (!(g->async = malloc(sizeof *g->async)) || uv_async_init(o->loop, g->async, gf_on_async)) {
        free(g->async);
        g->async = NULL;
        return mt_fail(err, MT_ENOMEM, "gRPC: cannot add to the loop");
    }
    g->async->data = g;
    if (pthread_create(&g->cq_thread, NULL, gf_cq_main, g) != 0)
        return mt_fail(err, MT_EIO, "gRPC: cannot start its thread");
    g->thread_running = true;
    grpc_server_start(g->server);
    g->started = true;
    for (int m = -1; m < g->o.nmethods && m < MAX_METHODS; m++)
        for (int i = 0; i < (m == 0 ? PENDING_FIRST : PENDING_OTHERS); i++)
            gf_request_call(g, m);
    return MT_OK;
}

int grpc_front_port(const grpc_front *g)
{
    return g->port;
}

void grpc_front_quiesce(grpc_front *g)
{
    if (!g || g->shutdown_sent || !g->started)
        return;
    g->shutdown_sent = true;
    grpc_server_shutdown_and_notify(g->server, g->cq, &g->t_shutdown);
}

void grpc_front_detach(grpc_front *g)
{
    if (!g || g->detaching || !g->started)
        return;
    grpc_front_quiesce(g);
    g->detaching = true;
    /* every admitted request is answered by now (the drain waited for
     * them): a call still waiting for its message, or just read, is
     * refused as a draining server refuses, not cancelled */
    for (gcall *c = g->live; c; c = c->next)
        if (!c->answered && !c->deferred)
            gf_send_status(c, GRPC_FRONT_UNAVAILABLE, "the server is shutting down; retry");
    gf_maybe_end_queue(g);
}

void grpc_front_stop(grpc_front *g)
{
    if (!g)
        return;
    if (g->started) {
        grpc_front_detach(g);
        grpc_server_cancel_all_calls(g->server); /* the loop is gone: nothing may wait */
        if (g->grace) {
            uv_close((uv_handle_t *)g->grace, gf_free_handle);
            g->grace = NULL;
        }
        pthread_mutex_lock(&g->lock); /* the loop is gone: the events are handled here */
        uv_async_t *a = g->async;
        g->async = NULL;
        pthread_mutex_unlock(&g->lock);
        if (a)
            uv_close((uv_handle_t *)a, gf_free_handle);
        while (g->thread_running) {
            pthread_mutex_lock(&g->lock);
            while (!g->nev)
                pthread_cond_wait(&g->cond, &g->lock);
            pthread_mutex_unlock(&g->lock);
            gf_drain_events(g);
        }
        while (g->live) /* cannot be left, but never leak a call */
            gf_free_call(g->live);
    } else if (g->server) {
        grpc_server_shutdown_and_notify(g->server, g->cq, &g->t_shutdown);
        grpc_server_cancel_all_calls(g->server);
        grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        grpc_completion_queue_shutdown(g->cq);
        while (grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
    }
    grpc_server_destroy(g->server);
    grpc_completion_queue_destroy(g->cq);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g->ev);
    free(g);
    grpc_shutdown_blocking();
}
