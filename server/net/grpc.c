/* grpc.c: the gRPC transport on gRPC's C core (see grpc.h): its calls.
 * The server, its start and its shutdown are in grpc_server.c.
 *
 * A call's life, every step on the loop thread but the waiting:
 *   new      a call asked for ahead arrived: for one of the application's
 *            methods (registered) with its message, for another without
 *            (its receive is started, and it is answered UNIMPLEMENTED); a
 *            close-notification is started, and the next call asked for
 *   recv     the message is in: the application's method makes the REST
 *            request; it is routed and handled as HTTP would (begin hook,
 *            API key, handler); a deferred answer waits for http_resume
 *   answer   hooks.sent, then the method's reply: initial metadata (the
 *            answer's headers), the message and the status, in one batch
 *   closed   the call is over (answered, or cancelled by the client)
 *   freed    when nothing of it is in flight: hooks.done, then unref.
 * The completion-queue thread only moves each event (a tag and whether
 * it succeeded) into a locked list and wakes the loop.
 */
#include "server/net/grpc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "server/net/grpc_internal.h"

/* ========================================================================
 * events: the completion-queue thread -> the loop
 * ====================================================================== */

void gf_push(grpc_front *g, gtag *tag, bool ok)
{
    pthread_mutex_lock(&g->lock);
    if (g->nev == g->capev) {
        size_t cap = g->capev ? 2 * g->capev : 64;
        gevent *e = realloc(g->ev, cap * sizeof *e);
        if (!e) { /* cannot happen in practice; losing an event would hang a call */
            pthread_mutex_unlock(&g->lock);
            abort();
        }
        g->ev = e;
        g->capev = cap;
    }
    g->ev[g->nev++] = (gevent){tag, ok};
    pthread_cond_signal(&g->cond);
    if (g->async) /* under the lock: stop may be closing it */
        uv_async_send(g->async);
    pthread_mutex_unlock(&g->lock);
}

void *gf_cq_main(void *arg)
{
    grpc_front *g = arg;
    for (;;) {
        grpc_event e = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (e.type == GRPC_QUEUE_SHUTDOWN) {
            gf_push(g, &g->t_queue_done, true);
            return NULL;
        }
        if (e.type == GRPC_OP_COMPLETE)
            gf_push(g, e.tag, e.success != 0);
    }
}

/* ========================================================================
 * calls
 * ====================================================================== */

static void handle(grpc_front *g, gtag *t, bool ok);
static void on_sent(gcall *c, bool ok);
static void on_recv(gcall *c, bool ok);

/* Asks gRPC for the next call of registered method reg (-1: of any method
 * not registered). */
void gf_request_call(grpc_front *g, int reg)
{
    gcall *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->g = g;
    c->reg = reg;
    c->t_new = (gtag){OP_NEW, c};
    c->t_recv = (gtag){OP_RECV, c};
    c->t_sent = (gtag){OP_SENT, c};
    c->t_closed = (gtag){OP_CLOSED, c};
    c->t_resume = (gtag){OP_RESUME, c};
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    grpc_call_error e =
        reg >= 0 ? grpc_server_request_registered_call(g->server, g->registered[reg], &c->call,
                                                       &c->deadline, &c->md, &c->recv, g->cq,
                                                       g->cq, &c->t_new)
                 : grpc_server_request_call(g->server, &c->call, &c->details, &c->md, g->cq,
                                            g->cq, &c->t_new);
    if (e != GRPC_CALL_OK) {
        grpc_call_details_destroy(&c->details);
        grpc_metadata_array_destroy(&c->md);
        free(c);
        return;
    }
    g->pending++;
}

void gf_free_call(gcall *c)
{
    grpc_front *g = c->g;
    if (c->app_call)
        g->o.hooks->done(g->o.app, c->app_call, c->answered && c->sent_ok);
    if (c->prev)
        c->prev->next = c->next;
    else if (g->live == c)
        g->live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    sb_free(&c->rest.body);
    if (c->rest.free_state)
        c->rest.free_state(c->rest.state);
    free(c->msg);
    free(c->hbuf);
    free(c);
}

/* Frees c once nothing of it is in flight and its answer is settled. */
static void maybe_free(gcall *c)
{
    if (c->in_flight == 0 && c->closed && (!c->deferred || c->answered))
        gf_free_call(c);
}

static bool start_batch(gcall *c, const grpc_op *ops, size_t n, gtag *tag)
{
    if (grpc_call_start_batch(c->call, ops, n, tag, NULL) != GRPC_CALL_OK)
        return false;
    c->in_flight++;
    return true;
}

/* Sends the answer: the headers as initial metadata, the message (when
 * st is OK) and the status. out is taken. */
static void send_answer(gcall *c, const http_resp *resp, sbuf *out, const grpc_front_status *st)
{
    c->answered = true;
    if (c->closed) { /* the client is gone: nothing to send */
        sb_free(out);
        return;
    }
    for (int i = 0; resp && i < resp->nheaders && c->nsend_md < HTTP_MAX_HEADERS; i++) {
        char *n = c->md_names[c->nsend_md];
        snprintf(n, sizeof c->md_names[0], "%s", resp->headers[i].name);
        for (char *p = n; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        if (!strcmp(n, "connection") || !strcmp(n, "content-type"))
            continue;
        c->send_md[c->nsend_md++] = (grpc_metadata){
            .key = grpc_slice_from_static_string(n),
            .value = grpc_slice_from_copied_string(resp->headers[i].value)};
    }
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].data.send_initial_metadata.count = c->nsend_md;
    ops[n++].data.send_initial_metadata.metadata = c->send_md;
    grpc_byte_buffer *bb = NULL;
    if (st->code == GRPC_FRONT_OK) {
        size_t len;
        char *data = sb_take(out, &len);
        grpc_slice s = data ? grpc_slice_new(data, len, free) : grpc_empty_slice();
        bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
    } else {
        sb_free(out);
    }
    c->status_details = grpc_slice_from_copied_string(st->code ? st->msg : "");
    const char *retry = NULL;
    for (int i = 0; resp && i < resp->nheaders; i++)
        if (!strcmp(resp->headers[i].name, "Retry-After"))
            retry = resp->headers[i].value;
    if (retry && st->code) { /* gRPC's own form of Retry-After, in ms */
        char ms[32];
        snprintf(ms, sizeof ms, "%ld", strtol(retry, NULL, 10) * 1000);
        c->trailer = (grpc_metadata){.key = grpc_slice_from_static_string("grpc-retry-pushback-ms"),
                                     .value = grpc_slice_from_copied_string(ms)};
        c->has_trailer = true;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)st->code;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
    ops[n].data.send_status_from_server.trailing_metadata_count = c->has_trailer;
    ops[n++].data.send_status_from_server.trailing_metadata = &c->trailer;
    c->sent_ok = start_batch(c, ops, n, &c->t_sent);
    if (bb)
        grpc_byte_buffer_destroy(bb); /* the batch holds its own reference */
    if (!c->sent_ok)
        on_sent(c, false);
}

/* The answer is final: the sent hook (headers, log, counters), then the
 * method's message. */
static void finish(gcall *c, http_resp *resp)
{
    grpc_front *g = c->g;
    if (resp->body.oom) {
        sb_free(&resp->body);
        resp->status = 500;
        resp->nheaders = 0;
        sb_puts(&resp->body, "{\"error\":\"out of memory building the response\"}");
    }
    if (c->closed) { /* the client cancelled: done logs it as such */
        c->answered = true;
        sb_free(&resp->body);
        return;
    }
    if (c->app_call)
        g->o.hooks->sent(g->o.app, c->app_call, resp);
    grpc_front_status st = {GRPC_FRONT_OK, ""};
    sbuf out;
    sb_init(&out);
    if (!c->method->reply(g->o.app, &c->rest, resp, &out, &st) && st.code == GRPC_FRONT_OK)
        st.code = GRPC_FRONT_INTERNAL;
    if (out.oom) {
        st.code = GRPC_FRONT_INTERNAL;
        snprintf(st.msg, sizeof st.msg, "out of memory building the response");
    }
    send_answer(c, resp, &out, &st);
    sb_free(&resp->body);
}

void gf_send_status(gcall *c, int code, const char *msg)
{
    grpc_front_status st = {code, ""};
    snprintf(st.msg, sizeof st.msg, "%s", msg);
    sbuf none;
    sb_init(&none);
    send_answer(c, NULL, &none, &st);
}

/* http_resume of a deferred answer: built on the loop's next turn. */
static void resume(http_deferred *d)
{
    gcall *c = d->transport;
    gf_push(c->g, &c->t_resume, true);
}

/* The call's metadata as request headers (name, value, ..., NULL), then
 * the REST request's own. */
static bool copy_headers(gcall *c)
{
    size_t need = 1;
    for (size_t i = 0; i < c->md.count && i < MAX_MD; i++)
        need += GRPC_SLICE_LENGTH(c->md.metadata[i].key) + GRPC_SLICE_LENGTH(c->md.metadata[i].value) + 2;
    if (!(c->hbuf = malloc(need)))
        return false;
    char *p = c->hbuf;
    int k = 0;
    for (size_t i = 0; i < c->md.count && i < MAX_MD; i++) {
        const grpc_slice *s[2] = {&c->md.metadata[i].key, &c->md.metadata[i].value};
        size_t klen = GRPC_SLICE_LENGTH(*s[0]);
        if (klen >= 4 && !memcmp(GRPC_SLICE_START_PTR(*s[0]) + klen - 4, "-bin", 4))
            continue; /* binary metadata is no header */
        for (int j = 0; j < 2; j++) {
            size_t n = GRPC_SLICE_LENGTH(*s[j]);
            memcpy(p, GRPC_SLICE_START_PTR(*s[j]), n);
            p[n] = 0;
            c->headers[k++] = p;
            p += n + 1;
        }
    }
    for (int i = 0; i < c->rest.nheaders; i++) {
        c->headers[k++] = c->rest.header_names[i];
        c->headers[k++] = c->rest.header_values[i];
    }
    c->headers[k] = NULL;
    return true;
}

/* Microseconds left before the call's deadline; 0: none. */
static uint64_t deadline_us(const gcall *c)
{
    gpr_timespec d = c->reg >= 0 ? c->deadline : c->details.deadline;
    if (gpr_time_cmp(d, gpr_inf_future(d.clock_type)) == 0)
        return 0;
    double us = gpr_timespec_to_micros(gpr_time_sub(d, gpr_now(d.clock_type)));
    return us < 1 ? 1 : (uint64_t)us;
}

static const grpc_front_method *find_method(const grpc_front *g, const grpc_slice *name)
{
    size_t n = GRPC_SLICE_LENGTH(*name);
    for (int i = 0; i < g->o.nmethods; i++)
        if (strlen(g->o.methods[i].path) == n &&
            !memcmp(g->o.methods[i].path, GRPC_SLICE_START_PTR(*name), n))
            return &g->o.methods[i];
    return NULL;
}

/* The message is in: its REST request, routed and handled. */
static void dispatch(gcall *c)
{
    grpc_front *g = c->g;
    c->dispatched = true;
    c->method = c->reg >= 0 ? &g->o.methods[c->reg] : find_method(g, &c->details.method);
    if (!c->method) {
        char m[300];
        snprintf(m, sizeof m, "unknown method %.*s", (int)GRPC_SLICE_LENGTH(c->details.method),
                 (const char *)GRPC_SLICE_START_PTR(c->details.method));
        gf_send_status(c, GRPC_FRONT_UNIMPLEMENTED, m);
        return;
    }
    grpc_front_status st = {GRPC_FRONT_OK, ""};
    sb_init(&c->rest.body);
    c->rest.deadline_us = deadline_us(c);
    if (!c->method->request(g->o.app, (const uint8_t *)c->msg, c->msg_len, &c->rest, &st)) {
        gf_send_status(c, st.code ? st.code : GRPC_FRONT_INVALID_ARGUMENT, st.msg);
        return;
    }
    if (c->rest.body.oom || !copy_headers(c)) {
        gf_send_status(c, GRPC_FRONT_INTERNAL, "out of memory");
        return;
    }
    http_match m;
    http_route_match(g->o.routes, g->o.nroutes, c->rest.method, c->rest.path, &m);
    http_req req = {.method = c->rest.method, .path = c->rest.path,
                    .body = c->rest.body.data ? c->rest.body.data : "",
                    .body_len = c->rest.body.len, .content_type = c->rest.content_type,
                    .t_start = c->t_start, .headers = c->headers};
    /* the log and the counters name the gRPC method */
    snprintf(c->log_path, sizeof c->log_path, "%s", c->method->path);
    http_req named = req;
    named.method = "GRPC";
    named.path = c->log_path;
    if (!(c->app_call = g->o.hooks->begin(g->o.app, &named, m.route))) {
        gf_send_status(c, GRPC_FRONT_INTERNAL, "out of memory");
        return;
    }
    http_resp resp = {.status = 200, .call = c->app_call};
    sb_init(&resp.body);
    if (g->o.auth && !(m.route && (m.route->flags & HTTP_ROUTE_NO_AUTH)) &&
        !auth_check(g->o.auth, http_header(&req, "authorization"))) {
        g->o.hooks->error(g->o.app, &req, m.route, &resp, 401, "api_key",
                          "a valid API key is required: send the metadata "
                          "\"authorization: Bearer KEY\"");
        finish(c, &resp);
        return;
    }
    if (!m.route) {
        char msg[400];
        snprintf(msg, sizeof msg, "no endpoint %s %s", c->rest.method, c->rest.path);
        g->o.hooks->error(g->o.app, &req, NULL, &resp, 404, "path", msg);
        finish(c, &resp);
        return;
    }
    const char *pp[HTTP_MAX_PARAMS + 1] = {0};
    for (int k = 0; k < m.nparams; k++)
        pp[k] = m.params[k];
    m.route->handler(g->o.app, &req, pp, &resp);
    if (!resp.deferred) {
        finish(c, &resp);
        return;
    }
    c->deferred = resp.deferred;
    c->deferred->resume = resume;
    c->deferred->transport = c;
    sb_free(&resp.body);
    c->deferred->start(g->o.app, c->deferred, -1);
}

/* A call arrived: receive its message, hear of its end, ask for the next. */
static void on_new(grpc_front *g, gcall *c, bool ok)
{
    g->pending--;
    if (!ok) { /* the server is shutting down */
        if (c->recv)
            grpc_byte_buffer_destroy(c->recv);
        grpc_call_details_destroy(&c->details);
        grpc_metadata_array_destroy(&c->md);
        free(c);
        return;
    }
    c->t_start = uv_hrtime();
    c->next = g->live;
    if (g->live)
        g->live->prev = c;
    g->live = c;
    if (!g->shutdown_sent)
        gf_request_call(g, c->reg);
    grpc_op close = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER,
                     .data.recv_close_on_server.cancelled = &c->cancelled};
    if (!start_batch(c, &close, 1, &c->t_closed))
        c->closed = true;
    if (c->reg >= 0) { /* a registered method: its message came with it */
        on_recv(c, true);
    } else {
        grpc_op recv = {.op = GRPC_OP_RECV_MESSAGE, .data.recv_message.recv_message = &c->recv};
        if (!start_batch(c, &recv, 1, &c->t_recv))
            gf_send_status(c, GRPC_FRONT_INTERNAL, "could not receive the message");
    }
    maybe_free(c);
}

static void on_recv(gcall *c, bool ok)
{
    if (c->answered) /* refused meanwhile (a shutdown): the message is not read */
        return;
    if (!ok || !c->recv) {
        if (!c->closed)
            gf_send_status(c, GRPC_FRONT_INVALID_ARGUMENT, "no request message");
        return;
    }
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, c->recv)) {
        gf_send_status(c, GRPC_FRONT_INVALID_ARGUMENT, "the request message could not be read");
        return;
    }
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    c->msg_len = GRPC_SLICE_LENGTH(s);
    c->msg = malloc(c->msg_len + 1);
    if (c->msg)
        memcpy(c->msg, GRPC_SLICE_START_PTR(s), c->msg_len);
    grpc_slice_unref(s);
    grpc_byte_buffer_destroy(c->recv);
    c->recv = NULL;
    if (!c->msg) {
        gf_send_status(c, GRPC_FRONT_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    dispatch(c);
}

static void on_resume(gcall *c)
{
    grpc_front *g = c->g;
    http_resp resp = {.status = 200, .call = c->app_call};
    sb_init(&resp.body);
    c->deferred->respond(g->o.app, c->deferred, &resp);
    finish(c, &resp);
}

static void on_sent(gcall *c, bool ok)
{
    c->sent_ok = c->sent_ok && ok;
    for (size_t i = 0; i < c->nsend_md; i++)
        grpc_slice_unref(c->send_md[i].value);
    c->nsend_md = 0;
    grpc_slice_unref(c->status_details);
    if (c->has_trailer)
        grpc_slice_unref(c->trailer.value);
    c->has_trailer = false;
}

static void handle(grpc_front *g, gtag *t, bool ok)
{
    gcall *c = t->c;
    switch (t->kind) {
    case OP_NEW:
        on_new(g, c, ok);
        break;
    case OP_RECV:
        c->in_flight--;
        on_recv(c, ok);
        maybe_free(c);
        break;
    case OP_SENT:
        c->in_flight--;
        on_sent(c, ok);
        maybe_free(c);
        break;
    case OP_CLOSED:
        c->in_flight--;
        c->closed = true;
        if (c->cancelled && c->deferred && !c->answered && c->deferred->cancel)
            c->deferred->cancel(g->o.app, c->deferred); /* its texts need not run */
        maybe_free(c);
        break;
    case OP_RESUME:
        on_resume(c);
        maybe_free(c);
        break;
    case OP_SHUTDOWN:
        g->shutdown_done = true;
        break;
    case OP_QUEUE_DONE:
        pthread_join(g->cq_thread, NULL);
        g->thread_running = false;
        if (g->async) {
            uv_close((uv_handle_t *)g->async, gf_free_handle);
            g->async = NULL;
        }
        return;
    }
    gf_maybe_end_queue(g);
}

/* Takes the events the queue thread left, and handles them in order. */
bool gf_drain_events(grpc_front *g)
{
    pthread_mutex_lock(&g->lock);
    gevent *ev = g->ev;
    size_t n = g->nev;
    g->ev = NULL;
    g->nev = g->capev = 0;
    pthread_mutex_unlock(&g->lock);
    for (size_t i = 0; i < n; i++)
        handle(g, ev[i].tag, ev[i].ok);
    free(ev);
    return n > 0;
}

void gf_on_async(uv_async_t *a)
{
    gf_drain_events(a->data);
}
