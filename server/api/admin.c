/* api_admin.c: the hot-switch's endpoints: Triton's model repository
 * extension (index, load, unload), a read-only view of the config in
 * force with each variant's state, a reload trigger, compare (one
 * request's texts through every loaded variant), and the A/B page.
 *
 * load, unload and reload run on the scheduler's loop as control jobs
 * (server/reload.c): the connection is suspended until the builds they
 * started have finished, then answered with the outcome. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "engine/metrics.h"
#include "server/api/api.h"
#include "server/core/reload.h"

/* ========================================================================
 * the repository index and the config view
 * ====================================================================== */

/* A model's Triton state: READY when a variant serves, LOADING while its
 * first builds run, UNAVAILABLE when unloaded or nothing serves. */
static const char *model_state(srv_model *m, char *reason, size_t cap)
{
    const char *state = "UNAVAILABLE";
    reason[0] = 0;
    pthread_mutex_lock(&m->lock);
    if (!m->loaded) {
        snprintf(reason, cap, "%s", m->reason[0] ? m->reason : "unloaded");
    } else {
        bool serving = false, loading = false;
        for (int i = 0; i < m->nslots; i++) {
            srv_slot *sl = m->slots[i];
            if (!sl->present)
                continue;
            serving |= sl->cur && sl->traffic > 0 && sl->state != SRV_VS_DEMOTED;
            loading |= sl->state == SRV_VS_LOADING;
        }
        state = serving ? "READY" : loading ? "LOADING" : "UNAVAILABLE";
        if (!serving && !loading)
            snprintf(reason, cap, "no variant is in rotation");
    }
    pthread_mutex_unlock(&m->lock);
    return state;
}

void api_repository_index(const http_ctx *ctx, const http_req *req, const char *const *p,
                          http_resp *r)
{
    bool only_ready = false;
    if (req->body_len) {
        cJSON *j = api_parse_body(ctx, req, false, r);
        if (!j)
            return;
        const cJSON *rd = cJSON_GetObjectItemCaseSensitive(j, "ready");
        only_ready = cJSON_IsTrue(rd);
        cJSON_Delete(j);
    }
    srv_reload_status *rs = &ctx->models->reload;
    char reload_err[700] = "";
    pthread_mutex_lock(&rs->lock);
    if (rs->last_error[0])
        snprintf(reload_err, sizeof reload_err,
                 "the last config reload failed (the previous config serves): %.600s",
                 rs->last_error);
    pthread_mutex_unlock(&rs->lock);
    sb_putc(&r->body, '[');
    int first = 1;
    for (int i = 0; i < srv_models_count(ctx->models); i++) {
        srv_model *m = srv_models_at(ctx->models, i);
        char reason[400];
        const char *state = model_state(m, reason, sizeof reason);
        if (only_ready && strcmp(state, "READY"))
            continue;
        sb_puts(&r->body, first ? "{\"name\":" : ",{\"name\":");
        first = 0;
        sb_json_str(&r->body, m->name, strlen(m->name));
        sb_printf(&r->body, ",\"version\":\"1\",\"state\":\"%s\",\"reason\":", state);
        const char *why = reason[0] ? reason : reload_err;
        sb_json_str(&r->body, why, strlen(why));
        sb_putc(&r->body, '}');
    }
    sb_putc(&r->body, ']');
}

/* A JSON number, or null for what is not finite (unset figures). */
static void num(sbuf *b, double v)
{
    if (isfinite(v))
        sb_printf(b, "%.9g", v);
    else
        sb_puts(b, "null");
}

/* A JSON string of a C string. */
static void str(sbuf *b, const char *s)
{
    sb_json_str(b, s, strlen(s));
}

/* GET /v2/admin/config: the config in force, as the server holds it, with
 * each variant's state and the build serving it; and the last reload. */
void api_admin_config(const http_ctx *ctx, const http_req *req, const char *const *p,
                      http_resp *r)
{
    sbuf *b = &r->body;
    srv_reload_status *rs = &ctx->models->reload;
    pthread_mutex_lock(&rs->lock);
    sb_puts(b, "{\"source\":");
    str(b, rs->source);
    sb_printf(b, ",\"generation\":%llu,\"reloads\":{\"ok\":%llu,\"failed\":%llu,\"last_error\":",
              (unsigned long long)rs->generation, (unsigned long long)rs->ok,
              (unsigned long long)rs->failed);
    str(b, rs->last_error);
    sb_puts(b, ",\"last_ok_unix\":");
    num(b, rs->last_ok_unix > 0 ? rs->last_ok_unix : NAN);
    sb_puts(b, ",\"last_failed_unix\":");
    num(b, rs->last_failed_unix > 0 ? rs->last_failed_unix : NAN);
    pthread_mutex_unlock(&rs->lock);
    sb_printf(b, "},\"builds_alive\":%ld,\"models\":[", atomic_load(&ctx->models->builds_alive));
    for (int i = 0; i < srv_models_count(ctx->models); i++) {
        srv_model *m = srv_models_at(ctx->models, i);
        char reason[400];
        const char *state = model_state(m, reason, sizeof reason);
        pthread_mutex_lock(&m->lock);
        const cfg_model *c = &m->cfg;
        sb_puts(b, i ? ",{\"name\":" : "{\"name\":");
        str(b, m->name);
        sb_printf(b, ",\"state\":\"%s\",\"loaded\":%s,\"reason\":", state,
                  m->loaded ? "true" : "false");
        str(b, reason);
        sb_puts(b, ",\"path\":");
        str(b, c->path);
        sb_printf(b,
                  ",\"device\":\"%s\",\"max_seq_len\":%d,\"truncate\":%s,\"batching\":{"
                  "\"max_batch_size\":%d,\"max_batch_tokens\":%d,\"max_queue_delay_us\":",
                  c->device == CFG_DEVICE_CPU ? "cpu" : c->device == CFG_DEVICE_CUDA ? "cuda" : "auto",
                  c->max_seq_len, c->truncate ? "true" : "false", c->max_batch_size,
                  c->max_batch_tokens);
        if (c->delay_auto)
            sb_puts(b, "\"auto\"");
        else
            sb_printf(b, "%d", c->max_queue_delay_us);
        sb_printf(b, ",\"latency_target_ms\":%d,\"max_queue\":%d},\"reference\":",
                  c->latency_target_ms, c->max_queue);
        if (c->reference >= 0) {
            sb_puts(b, "{\"variant\":");
            str(b, c->variants[c->reference].name);
            sb_puts(b, ",\"shadow_rate\":");
            num(b, c->shadow_rate);
            sb_printf(b, ",\"shadow_queue\":%d,\"drift_window\":%d}", c->shadow_queue,
                      c->drift_window);
        } else {
            sb_puts(b, "null");
        }
        sb_puts(b, ",\"variants\":[");
        int first = 1;
        for (int k = 0; k < m->nslots; k++) {
            const srv_slot *sl = m->slots[k];
            if (!sl->present)
                continue;
            const cfg_variant *v = &sl->want;
            sb_puts(b, first ? "{\"name\":" : ",{\"name\":");
            first = 0;
            str(b, sl->name);
            sb_printf(b, ",\"precision\":\"%s\",\"calibration\":", mt_precision_name(v->precision));
            str(b, v->calibration);
            sb_puts(b, ",\"traffic\":");
            num(b, sl->traffic);
            sb_puts(b, ",\"weights\":");
            str(b, v->weights);
            sb_puts(b, ",\"drift_floor\":");
            num(b, v->drift_floor > 0 ? v->drift_floor : NAN);
            sb_puts(b, ",\"gate\":");
            if (v->gate_probes[0]) {
                sb_puts(b, "{\"probes\":");
                str(b, v->gate_probes);
                sb_puts(b, ",\"min_cosine\":");
                num(b, v->gate_min_cosine);
                sb_puts(b, ",\"max_p99_ratio\":");
                num(b, v->gate_max_p99_ratio > 0 ? v->gate_max_p99_ratio : NAN);
                sb_puts(b, ",\"last\":");
                if (sl->gate.ran) {
                    sb_printf(b, "{\"passed\":%s,\"probes\":%d,\"mean_cosine\":",
                              sl->gate.passed ? "true" : "false", sl->gate.probes);
                    num(b, sl->gate.mean_cosine);
                    sb_puts(b, ",\"min_cosine\":");
                    num(b, sl->gate.min_cosine);
                    sb_puts(b, ",\"p99_ms\":");
                    num(b, sl->gate.p99_ms);
                    sb_puts(b, ",\"reference_p99_ms\":");
                    num(b, sl->gate.ref_p99_ms);
                    sb_puts(b, "}");
                } else {
                    sb_puts(b, "null");
                }
                sb_putc(b, '}');
            } else {
                sb_puts(b, "null");
            }
            sb_printf(b, ",\"state\":\"%s\",\"error\":", srv_vstate_name(sl->state));
            str(b, sl->error);
            sb_puts(b, ",\"serving\":");
            if (sl->cur) {
                sb_printf(b, "{\"precision\":\"%s\",\"space_id\":",
                          mt_precision_name(sl->cur->cfg.precision));
                str(b, sl->cur->space);
                sb_puts(b, ",\"build_s\":");
                num(b, sl->cur->build_s);
                sb_puts(b, "}");
            } else {
                sb_puts(b, "null");
            }
            sb_puts(b, ",\"switch_s\":");
            num(b, sl->switch_s > 0 ? sl->switch_s : NAN);
            sb_putc(b, '}');
        }
        sb_puts(b, "]}");
        pthread_mutex_unlock(&m->lock);
    }
    sb_puts(b, "]}");
}

/* ========================================================================
 * load, unload, reload: control jobs on the loop
 * ====================================================================== */

typedef struct {
    http_deferred d;
    reload_request rq;
} admin_call;

/* Frees an admin call when its last reference goes. */
static void admin_free(sched_job *j)
{
    free((char *)j - offsetof(admin_call, rq.job));
}

/* The answer of load, unload or reload once the loop has ended the job. */
static void admin_respond(const http_ctx *ctx, http_deferred *d, http_resp *r)
{
    admin_call *c = (admin_call *)d;
    const reload_request *q = &c->rq;
    if (q->job.result != SCHED_OK) {
        api_error(r, false, 503, NULL, "%s", q->job.msg);
        return;
    }
    if (q->status != 200) {
        api_error(r, false, q->status, NULL, "%s", q->msg);
        return;
    }
    if (q->kind == RELOAD_FILE) {
        sb_puts(&r->body, "{\"result\":\"ok\",\"message\":");
        sb_json_str(&r->body, q->msg, strlen(q->msg));
        sb_putc(&r->body, '}');
    } else {
        sb_puts(&r->body, "{}"); /* Triton answers load/unload with an empty object */
    }
}

/* What an admin request may carry. The config file is the only source of a
 * model's settings, so nothing in a body may name a file or a config:
 * reload takes an empty object; load and unload take Triton's
 * {"parameters": {"unload_dependents": bool}} (what tritonclient sends),
 * nothing else. False (with the 400 written) when the body is refused. */
static bool admin_body_ok(const http_ctx *ctx, const http_req *req, reload_kind kind,
                          http_resp *r)
{
    cJSON *j = api_parse_body(ctx, req, false, r);
    if (!j)
        return false;
    const cJSON *e, *q;
    cJSON_ArrayForEach(e, j)
    {
        if (kind == RELOAD_FILE) {
            api_error(r, false, 400, NULL,
                      "unknown field \"%s\": reload takes no arguments (it reads the config "
                      "file the server was started with)",
                      e->string);
            goto refused;
        }
        if (strcmp(e->string, "parameters") != 0 || !cJSON_IsObject(e)) {
            api_error(r, false, 400, NULL,
                      "unknown field \"%s\" (expected \"parameters\", an object)", e->string);
            goto refused;
        }
        cJSON_ArrayForEach(q, e)
        {
            if (strcmp(q->string, "unload_dependents") != 0 || !cJSON_IsBool(q)) {
                api_error(r, false, 400, NULL,
                          "parameter \"%s\" is not supported: a model's settings and files "
                          "come from the config file only (edit it, then load)",
                          q->string);
                goto refused;
            }
        }
    }
    cJSON_Delete(j);
    return true;
refused:
    cJSON_Delete(j);
    return false;
}

/* Starts an admin request of kind on model (may be NULL). */
static void admin_start(const http_ctx *ctx, const http_req *req, reload_kind kind,
                        const char *model, http_resp *r)
{
    if (!ctx->reload || !ctx->sched) {
        api_error(r, false, 503, NULL, "the hot-switch is not running in this process");
        return;
    }
    if (req->body_len && !admin_body_ok(ctx, req, kind, r))
        return;
    admin_call *c = calloc(1, sizeof *c);
    if (!c) {
        api_error(r, false, 500, NULL, "out of memory");
        return;
    }
    c->rq.kind = kind;
    if (model)
        snprintf(c->rq.model, sizeof c->rq.model, "%s", model);
    sched_job *j = &c->rq.job;
    atomic_init(&j->refs, 1); /* the front's */
    j->fd = -1;
    j->control = reload_control;
    j->control_arg = ctx->reload;
    j->on_free = admin_free;
    c->d.job = j;
    c->d.respond = admin_respond;
    r->deferred = &c->d;
}

void api_repository_load(const http_ctx *ctx, const http_req *req, const char *const *p,
                         http_resp *r)
{
    admin_start(ctx, req, RELOAD_LOAD, p[0], r);
}

void api_repository_unload(const http_ctx *ctx, const http_req *req, const char *const *p,
                           http_resp *r)
{
    admin_start(ctx, req, RELOAD_UNLOAD, p[0], r);
}

void api_admin_reload(const http_ctx *ctx, const http_req *req, const char *const *p,
                      http_resp *r)
{
    admin_start(ctx, req, RELOAD_FILE, NULL, r);
}

/* ========================================================================
 * compare: one request's texts through every loaded variant
 * ====================================================================== */

#define COMPARE_MAX_INPUTS 16

typedef struct cmp_call cmp_call;

/* One variant's run: a job of texts on its build. */
typedef struct {
    sched_job job;
    cmp_call *parent;
    srv_variant *v;   /* a reference */
    bool reference, in_rotation;
    char state[16];
} cmp_sub;

struct cmp_call {
    http_deferred d;
    sched_job job; /* the control job the connection waits on */
    sched *s;
    srv_model *m;
    cmp_sub *subs;
    int nsubs, ntexts, left;
    bool embeddings;
};

/* Frees a compare call, its runs and their builds (its last reference). */
static void cmp_free(sched_job *j)
{
    cmp_call *c = (cmp_call *)((char *)j - offsetof(cmp_call, job));
    for (int i = 0; i < c->nsubs; i++) {
        free(c->subs[i].job.ids);
        free(c->subs[i].job.off);
        free(c->subs[i].job.out);
        srv_variant_unref(c->subs[i].v);
    }
    free(c->subs);
    free(c);
}

/* A variant's run is over (its last reference, on the loop): when it was
 * the last, the compare call ends and its connection resumes. */
static void cmp_sub_free(sched_job *j)
{
    cmp_sub *sub = (cmp_sub *)j;
    cmp_call *c = sub->parent;
    if (--c->left == 0)
        sched_job_end(c->s, &c->job, SCHED_OK, NULL);
}

/* On the loop: queue every variant's run. */
static void cmp_control(sched *s, sched_job *j)
{
    cmp_call *c = (cmp_call *)((char *)j - offsetof(cmp_call, job));
    c->s = s;
    c->left = c->nsubs;
    for (int i = 0; i < c->nsubs; i++)
        sched_enqueue(s, &c->subs[i].job);
}

/* The answer once every variant ran: per variant its figures against the
 * reference run of the same texts. */
static void cmp_respond(const http_ctx *ctx, http_deferred *d, http_resp *r)
{
    cmp_call *c = (cmp_call *)d;
    if (c->job.result != SCHED_OK) {
        api_error(r, false, c->job.result == SCHED_TIMEOUT ? 504 : 503, NULL, "%s", c->job.msg);
        return;
    }
    const cmp_sub *ref = NULL;
    for (int i = 0; i < c->nsubs; i++)
        if (c->subs[i].reference && c->subs[i].job.result == SCHED_OK)
            ref = &c->subs[i];
    sbuf *b = &r->body;
    sb_puts(b, "{\"model\":");
    str(b, c->m->name);
    sb_puts(b, ",\"reference\":");
    if (ref)
        str(b, ref->v->cfg.name);
    else
        sb_puts(b, "null");
    sb_printf(b, ",\"inputs\":%d,\"variants\":[", c->ntexts);
    for (int i = 0; i < c->nsubs; i++) {
        const cmp_sub *sub = &c->subs[i];
        const sched_job *j = &sub->job;
        const int h = sub->v->hidden;
        sb_puts(b, i ? ",{\"name\":" : "{\"name\":");
        str(b, sub->v->cfg.name);
        sb_printf(b, ",\"precision\":\"%s\",\"space_id\":", mt_precision_name(sub->v->cfg.precision));
        str(b, sub->v->space);
        sb_printf(b, ",\"state\":\"%s\",\"in_rotation\":%s,\"reference\":%s", sub->state,
                  sub->in_rotation ? "true" : "false", sub->reference ? "true" : "false");
        if (j->result != SCHED_OK) {
            sb_puts(b, ",\"error\":");
            str(b, j->msg);
            sb_putc(b, '}');
            continue;
        }
        sb_printf(b, ",\"latency_ms\":%.3f,\"compute_ms\":%.3f",
                  (double)(j->t_done - j->t_submit) * 1e-6, (double)j->compute_ns * 1e-6);
        if (ref && ref->v->hidden == h) {
            double sum = 0;
            sb_puts(b, ",\"cosine_to_reference\":[");
            for (int t = 0; t < c->ntexts; t++) {
                double cs = mt_cosine(j->out + (size_t)t * h, ref->job.out + (size_t)t * h, h);
                sum += cs;
                sb_printf(b, "%s%.9g", t ? "," : "", cs);
            }
            sb_puts(b, "],\"max_abs_err\":[");
            for (int t = 0; t < c->ntexts; t++)
                sb_printf(b, "%s%.6g", t ? "," : "",
                          mt_max_abs_diff(j->out + (size_t)t * h, ref->job.out + (size_t)t * h,
                                          (size_t)h));
            sb_printf(b, "],\"mean_cosine\":%.9g", sum / c->ntexts);
        }
        if (c->embeddings) {
            sb_puts(b, ",\"embeddings\":[");
            for (int t = 0; t < c->ntexts; t++) {
                if (t)
                    sb_putc(b, ',');
                sb_float_array(b, j->out + (size_t)t * h, (size_t)h);
            }
            sb_putc(b, ']');
        }
        sb_putc(b, '}');
    }
    sb_puts(b, "]}");
}

/* Tokenizes the texts for build v into sub's job (ids, offsets, output).
 * False (after answering) on invalid input or no memory. */
static bool cmp_tokenize(cmp_sub *sub, const char *const *texts, int n, int64_t deadline,
                         http_resp *r)
{
    srv_variant *v = sub->v;
    const int maxlen = v->max_seq_len;
    sched_job *j = &sub->job;
    j->ids = malloc(sizeof(int32_t) * (size_t)n * (size_t)maxlen);
    j->off = malloc(sizeof(int32_t) * ((size_t)n + 1));
    j->out = malloc(sizeof(float) * (size_t)n * (size_t)v->hidden);
    if (!j->ids || !j->off || !j->out) {
        api_error(r, false, 500, NULL, "out of memory");
        return false;
    }
    j->off[0] = 0;
    for (int i = 0; i < n; i++) {
        mt_err err;
        int got = 0, full = 0;
        mt_status ts = mt_model_tokenize(v->model, texts[i], strlen(texts[i]),
                                         j->ids + j->off[i], maxlen, &got, &full, &err);
        if (ts != MT_OK) {
            api_error(r, false, ts == MT_EUTF8 ? 400 : 500, "input", "input[%d]: %s", i, err.msg);
            return false;
        }
        j->off[i + 1] = j->off[i] + got;
    }
    atomic_init(&j->refs, 0); /* only the scheduler's, from sched_enqueue */
    j->m = v->m;
    j->v = v;
    j->n = n;
    j->fd = -1;
    j->deadline = (uint64_t)deadline;
    j->on_free = cmp_sub_free;
    return true;
}

void api_compare(const http_ctx *ctx, const http_req *req, const char *const *p, http_resp *r)
{
    srv_model *m = srv_models_find(ctx->models, p[0]);
    if (!m) {
        api_error(r, false, 404, "model", "model \"%s\" is not served here", p[0]);
        return;
    }
    if (!ctx->sched) {
        api_error(r, false, 503, NULL, "compare needs the scheduler");
        return;
    }
    cJSON *j = api_parse_body(ctx, req, false, r);
    if (!j)
        return;
    const char *texts[COMPARE_MAX_INPUTS];
    int n = 0;
    cmp_call *c = NULL;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(j, "embeddings");
    for (const cJSON *it = j->child; it; it = it->next)
        if (strcmp(it->string, "input") && strcmp(it->string, "embeddings")) {
            api_error(r, false, 400, it->string, "unknown field \"%s\" (expected input, "
                                                 "embeddings)",
                      it->string);
            goto done;
        }
    if (cJSON_IsString(in)) {
        texts[n++] = in->valuestring;
    } else if (cJSON_IsArray(in) && cJSON_GetArraySize(in) >= 1) {
        const cJSON *it;
        cJSON_ArrayForEach(it, in)
        {
            if (!cJSON_IsString(it)) {
                api_error(r, false, 400, "input", "input[%d] must be a string", n);
                goto done;
            }
            if (n == COMPARE_MAX_INPUTS) {
                api_error(r, false, 413, "input", "compare takes at most %d texts",
                          COMPARE_MAX_INPUTS);
                goto done;
            }
            texts[n++] = it->valuestring;
        }
    } else {
        api_error(r, false, 400, "input",
                  "\"input\" must be a string or a non-empty array of strings");
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (strlen(texts[i]) > (size_t)ctx->cfg->max_input_bytes) {
            api_error(r, false, 413, "max_input_bytes", "input[%d] is over max_input_bytes", i);
            goto done;
        }
    if (emb && !cJSON_IsBool(emb)) {
        api_error(r, false, 400, "embeddings", "\"embeddings\" must be true or false");
        goto done;
    }
    if (!(c = calloc(1, sizeof *c))) {
        api_error(r, false, 500, NULL, "out of memory");
        goto done;
    }
    c->m = m;
    c->ntexts = n;
    c->embeddings = cJSON_IsTrue(emb);
    /* every build serving a variant of m, with its state, in slot order */
    pthread_mutex_lock(&m->lock);
    const char *refname = m->cfg.reference >= 0 ? m->cfg.variants[m->cfg.reference].name : "";
    c->subs = calloc((size_t)(m->nslots ? m->nslots : 1), sizeof *c->subs);
    for (int k = 0; c->subs && m->loaded && k < m->nslots; k++) {
        srv_slot *sl = m->slots[k];
        if (!sl->present || !sl->cur)
            continue;
        cmp_sub *sub = &c->subs[c->nsubs++];
        sub->v = sl->cur;
        srv_variant_ref(sl->cur);
        sub->parent = c;
        sub->reference = !strcmp(sl->name, refname);
        sub->in_rotation = sl->traffic > 0 && sl->state != SRV_VS_DEMOTED;
        snprintf(sub->state, sizeof sub->state, "%s", srv_vstate_name(sl->state));
    }
    pthread_mutex_unlock(&m->lock);
    if (!c->subs) {
        api_error(r, false, 500, NULL, "out of memory");
        goto fail;
    }
    if (c->nsubs == 0) {
        api_error(r, false, 503, "model", "model \"%s\" has no variant loaded", m->name);
        goto fail;
    }
    int64_t deadline = (int64_t)(req->t_start + (uint64_t)ctx->cfg->request_timeout_ms * 1000000ull);
    for (int i = 0; i < c->nsubs; i++)
        if (!cmp_tokenize(&c->subs[i], texts, n, deadline, r))
            goto fail;
    atomic_init(&c->job.refs, 1); /* the front's */
    c->job.fd = -1;
    c->job.m = m;
    c->job.control = cmp_control;
    c->job.on_free = cmp_free;
    c->job.deadline = (uint64_t)deadline;
    c->d.job = &c->job;
    c->d.respond = cmp_respond;
    r->model = m;
    r->deferred = &c->d;
    cJSON_Delete(j);
    return;
fail:
    cmp_free(&c->job);
done:
    cJSON_Delete(j);
}

/* ========================================================================
 * the A/B page
 * ====================================================================== */

void api_ab_page(const http_ctx *ctx, const http_req *req, const char *const *p, http_resp *r)
{
    r->content_type = "text/html; charset=utf-8";
    sb_puts(&r->body, api_ab_html);
}
