/* admin.c: the hot-switch's endpoints: Triton's model repository
 * extension (index, load, unload), a read-only view of the config in
 * force with each variant's state, and a reload trigger.
 *
 * load, unload and reload run on the scheduler's loop as control jobs
 * (server/core/reload.c): the connection is suspended until the builds
 * they started have finished, then answered with the outcome. */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/registry.h"
#include "server/api/api.h"

/* ========================================================================
 * the repository index and the config view
 * ====================================================================== */

/* Why m's variants that failed to build or missed their gate are not
 * serving as the config asks, into buf ("" when none; m's lock held). */
static void variant_faults(const srv_model *m, char *buf, size_t cap)
{
    buf[0] = 0;
    for (int i = 0; i < m->nslots; i++) {
        const srv_slot *sl = m->slots[i];
        const size_t len = strlen(buf);
        if (!sl->present || len + 1 >= cap ||
            (sl->state != SRV_VS_FAILED && sl->state != SRV_VS_GATE_FAILED))
            continue;
        snprintf(buf + len, cap - len, "%svariant %s %s: %s", len ? "; " : "", sl->name,
                 sl->state == SRV_VS_FAILED ? "failed to build" : "missed its gate",
                 sl->state == SRV_VS_FAILED ? sl->error : sl->gate.why);
    }
}

/* A model's Triton state: READY when a variant serves, LOADING while its
 * first builds run, UNAVAILABLE when unloaded or nothing serves. The reason
 * says why, and names the variants that failed to build or missed their
 * gate (a READY model serves its other variants). */
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
        char faults[1024];
        variant_faults(m, faults, sizeof faults);
        if (!serving && !loading)
            snprintf(reason, cap, "no variant is in rotation%s%s", *faults ? ": " : "", faults);
        else
            snprintf(reason, cap, "%s", faults);
    }
    pthread_mutex_unlock(&m->lock);
    return state;
}

API_HANDLER(api_repository_index)
{
    bool only_ready = false;
    if (req->body_len) {
        cJSON *j = api_parse_body(app, req, r);
        if (!j)
            return;
        const cJSON *rd = cJSON_GetObjectItemCaseSensitive(j, "ready");
        only_ready = cJSON_IsTrue(rd);
        cJSON_Delete(j);
    }
    srv_reload_status *rs = &app->models->reload;
    char reload_err[700] = "";
    pthread_mutex_lock(&rs->lock);
    if (rs->last_error[0])
        snprintf(reload_err, sizeof reload_err,
                 "the last config reload failed (the previous config serves): %.600s",
                 rs->last_error);
    pthread_mutex_unlock(&rs->lock);
    sb_putc(&r->body, '[');
    int first = 1;
    for (int i = 0; i < srv_models_count(app->models); i++) {
        srv_model *m = srv_models_at(app->models, i);
        char reason[1024];
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

/* A JSON string of a C string. */
static void str(sbuf *b, const char *s)
{
    sb_json_str(b, s, strlen(s));
}

#define num api_json_num

/* A variant's promotion gate: its settings and its last run. */
static void gate_json(sbuf *b, const srv_slot *sl)
{
    const cfg_variant *v = &sl->want;
    if (!v->gate_probes[0]) {
        sb_puts(b, "null");
        return;
    }
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
}

/* A build's measure figures (null: not measured): the batch sizes, texts
 * per second and speed over FP32's at each. */
static void speed_json(sbuf *b, const srv_variant *v)
{
    if (!v->measured) {
        sb_puts(b, "null");
        return;
    }
    sb_printf(b, "{\"batch\":[%d,%d],\"texts_per_s\":[", v->speed.batch[0], v->speed.batch[1]);
    num(b, v->speed.tps[0]);
    sb_putc(b, ',');
    num(b, v->speed.tps[1]);
    sb_puts(b, "],\"vs_fp32\":[");
    num(b, v->speed_vs_fp32[0]);
    sb_putc(b, ',');
    num(b, v->speed_vs_fp32[1]);
    sb_puts(b, "]}");
}

/* One variant of the config view: what the config asks, its state, and
 * the build serving it (the model's lock held). */
static void variant_json(sbuf *b, const srv_slot *sl)
{
    const cfg_variant *v = &sl->want;
    sb_puts(b, "{\"name\":");
    str(b, sl->name);
    sb_printf(b, ",\"precision\":\"%s\",\"calibration\":", mt_precision_name(v->precision));
    str(b, v->calibration);
    sb_puts(b, ",\"traffic\":");
    num(b, sl->traffic);
    sb_puts(b, ",\"weights\":");
    str(b, v->weights);
    sb_puts(b, ",\"mix\":");
    str(b, v->mix);
    sb_puts(b, ",\"drift_floor\":");
    num(b, v->drift_floor > 0 ? v->drift_floor : NAN);
    sb_printf(b, ",\"measure\":%s,\"gate\":", v->measure ? "true" : "false");
    gate_json(b, sl);
    sb_printf(b, ",\"state\":\"%s\",\"error\":", srv_vstate_name(sl->state));
    str(b, sl->error);
    sb_puts(b, ",\"serving\":");
    if (sl->cur) {
        const char *mix = sl->cur->model->info.mix;
        sb_printf(b, "{\"precision\":\"%s\",\"mix\":", mt_precision_name(sl->cur->cfg.precision));
        str(b, mix ? mix : "");
        sb_puts(b, ",\"space_id\":");
        str(b, sl->cur->space);
        sb_puts(b, ",\"build_s\":");
        num(b, sl->cur->build_s);
        sb_printf(b, ",\"solo_tokens\":%d,\"speed\":", sl->cur->solo_tokens);
        speed_json(b, sl->cur);
        sb_putc(b, '}');
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, ",\"switch_s\":");
    num(b, sl->switch_s > 0 ? sl->switch_s : NAN);
    sb_putc(b, '}');
}

/* A model's settings in the config view (the model's lock held). */
static void model_settings_json(sbuf *b, const cfg_model *c)
{
    sb_puts(b, ",\"path\":");
    str(b, c->path);
    sb_printf(b,
              ",\"device\":\"%s\",\"max_seq_len\":%d,\"truncate\":%s,\"batching\":{"
              "\"max_batch_size\":%d,\"max_batch_tokens\":%d,\"max_queue_delay_us\":",
              mt_device_choices[c->device], c->max_seq_len, c->truncate ? "true" : "false",
              c->max_batch_size, c->max_batch_tokens);
    if (c->delay_auto)
        sb_puts(b, "\"auto\"");
    else
        sb_printf(b, "%d", c->max_queue_delay_us);
    sb_printf(b, ",\"latency_target_ms\":%d,\"max_queue\":%d},\"reference\":",
              c->latency_target_ms, c->max_queue);
    if (c->reference < 0) {
        sb_puts(b, "null");
        return;
    }
    sb_puts(b, "{\"variant\":");
    str(b, c->variants[c->reference].name);
    sb_puts(b, ",\"shadow_rate\":");
    num(b, c->shadow_rate);
    sb_printf(b, ",\"shadow_queue\":%d,\"drift_window\":%d}", c->shadow_queue, c->drift_window);
}

/* One model of the config view. */
static void model_json(sbuf *b, srv_model *m)
{
    char reason[1024];
    const char *state = model_state(m, reason, sizeof reason);
    pthread_mutex_lock(&m->lock);
    sb_puts(b, "{\"name\":");
    str(b, m->name);
    sb_printf(b, ",\"state\":\"%s\",\"loaded\":%s,\"reason\":", state,
              m->loaded ? "true" : "false");
    str(b, reason);
    model_settings_json(b, &m->cfg);
    sb_puts(b, ",\"variants\":[");
    int first = 1;
    for (int k = 0; k < m->nslots; k++) {
        if (!m->slots[k]->present)
            continue;
        if (!first)
            sb_putc(b, ',');
        first = 0;
        variant_json(b, m->slots[k]);
    }
    sb_puts(b, "]}");
    pthread_mutex_unlock(&m->lock);
}

/* GET /v2/admin/config: the config in force, as the server holds it, with
 * each variant's state and the build serving it; and the last reload. */
API_HANDLER(api_admin_config)
{
    sbuf *b = &r->body;
    srv_reload_status *rs = &app->models->reload;
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
    sb_printf(b, "},\"builds_alive\":%ld,\"models\":[", atomic_load(&app->models->builds_alive));
    for (int i = 0; i < srv_models_count(app->models); i++) {
        if (i)
            sb_putc(b, ',');
        model_json(b, srv_models_at(app->models, i));
    }
    sb_puts(b, "]}");
}

/* ========================================================================
 * load, unload, reload: control jobs on the loop
 * ====================================================================== */

typedef struct {
    api_deferred d;
    reload_request rq;
} admin_call;

/* Frees an admin call when its last reference goes. */
static void admin_free(sched_job *j)
{
    free((char *)j - offsetof(admin_call, rq.job));
}

/* The answer of load, unload or reload once the loop has ended the job. */
static void admin_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    admin_call *c = (admin_call *)d;
    const reload_request *q = &c->rq;
    if (q->job.result != SCHED_OK) {
        api_error(r, 503, NULL, "%s", q->job.msg);
        return;
    }
    if (q->status != 200) {
        api_error(r, q->status, NULL, "%s", q->msg);
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
static bool admin_body_ok(const http_app *app, const http_req *req, reload_kind kind,
                          http_resp *r)
{
    cJSON *j = api_parse_body(app, req, r);
    if (!j)
        return false;
    const cJSON *e, *q;
    cJSON_ArrayForEach(e, j)
    {
        if (kind == RELOAD_FILE) {
            api_error(r, 400, NULL,
                      "unknown field \"%s\": reload takes no arguments (it reads the config "
                      "file the server was started with)",
                      e->string);
            goto refused;
        }
        if (strcmp(e->string, "parameters") != 0 || !cJSON_IsObject(e)) {
            api_error(r, 400, NULL,
                      "unknown field \"%s\" (expected \"parameters\", an object)", e->string);
            goto refused;
        }
        cJSON_ArrayForEach(q, e)
        {
            if (strcmp(q->string, "unload_dependents") != 0 || !cJSON_IsBool(q)) {
                api_error(r, 400, NULL,
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
static void admin_start(const http_app *app, const http_req *req, reload_kind kind,
                        const char *model, http_resp *r)
{
    if (!app->reload || !app->sched) {
        api_error(r, 503, NULL, "the hot-switch is not running in this process");
        return;
    }
    if (req->body_len && !admin_body_ok(app, req, kind, r))
        return;
    admin_call *c = calloc(1, sizeof *c);
    if (!c) {
        api_error(r, 500, NULL, "out of memory");
        return;
    }
    c->rq.kind = kind;
    if (model)
        snprintf(c->rq.model, sizeof c->rq.model, "%s", model);
    sched_job *j = &c->rq.job;
    atomic_init(&j->refs, 1); /* the front's */
    j->fd = -1;
    j->control = reload_control;
    j->control_arg = app->reload;
    j->on_free = admin_free;
    c->d.job = j;
    api_defer(r, &c->d, admin_respond);
}

API_HANDLER(api_repository_load)
{
    admin_start(app, req, RELOAD_LOAD, p[0], r);
}

API_HANDLER(api_repository_unload)
{
    admin_start(app, req, RELOAD_UNLOAD, p[0], r);
}

API_HANDLER(api_admin_reload)
{
    admin_start(app, req, RELOAD_FILE, NULL, r);
}
