/* health.c: the KServe v2 health and metadata endpoints (liveness,
 * readiness, server and model metadata, Triton's model configuration and
 * statistics) and GET /metrics. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "server/api/api.h"

void api_model_dims(srv_model *m, int *hidden, int *max_seq_len)
{
    *hidden = *max_seq_len = 0;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->nslots && !*hidden; i++)
        if (m->slots[i]->cur) {
            *hidden = m->slots[i]->cur->hidden;
            *max_seq_len = m->slots[i]->cur->max_seq_len;
        }
    pthread_mutex_unlock(&m->lock);
}

/* A classifier's label count from a build serving m (0: an embedder, or
 * none serving). */
static int model_labels(srv_model *m)
{
    int n = 0;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->nslots && !n; i++)
        if (m->slots[i]->cur)
            n = m->slots[i]->cur->nlabels;
    pthread_mutex_unlock(&m->lock);
    return n;
}

/* ========================================================================
 * health and metadata (KServe v2)
 * ====================================================================== */

API_HANDLER(api_health_live)
{
    sb_puts(&r->body, "{\"live\":true}");
}

API_HANDLER(api_health_ready)
{
    bool ready = app->models && atomic_load(&app->models->ready) &&
                 !(app->sched && sched_draining(app->sched));
    r->status = ready ? 200 : 503;
    sb_printf(&r->body, "{\"ready\":%s}", ready ? "true" : "false");
}

API_HANDLER(api_server_metadata)
{
    sb_puts(&r->body, "{\"name\":\"mantissa\",\"version\":\"" MANTISSA_VERSION
                      "\",\"extensions\":[\"binary_tensor_data\",\"statistics\","
                      "\"model_configuration\",\"model_repository\"],\"commit\":");
    sb_json_str(&r->body, mt_build_commit(), strlen(mt_build_commit()));
    sb_putc(&r->body, '}');
}

/* The model of a /v2/models/{m}[/versions/{v}] path, or NULL after a 404. */
static srv_model *path_model(const http_app *app, const char *const *p, http_resp *r)
{
    srv_model *m = srv_models_find(app->models, p[0]);
    if (!m) {
        api_error(r, 404, "model", "model \"%s\" is not served here", p[0]);
        return NULL;
    }
    if (p[1] && strcmp(p[1], "1") != 0) {
        api_error(r, 404, "version", "model \"%s\" has no version \"%s\" (only \"1\")",
                  p[0], p[1]);
        return NULL;
    }
    return m;
}

API_HANDLER(api_model_metadata)
{
    srv_model *m = path_model(app, p, r);
    if (!m)
        return;
    sbuf *b = &r->body;
    int hidden, maxlen;
    api_model_dims(m, &hidden, &maxlen);
    sb_puts(b, "{\"name\":");
    sb_json_str(b, m->name, strlen(m->name));
    if (model_labels(m) > 0) /* a reranker: api_kserve_rerank */
        sb_puts(b, ",\"versions\":[\"1\"],\"platform\":\"mantissa_bert\",\"inputs\":["
                   "{\"name\":\"query\",\"datatype\":\"BYTES\",\"shape\":[1]},"
                   "{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[-1]}],"
                   "\"outputs\":[{\"name\":\"score\",\"datatype\":\"FP32\",\"shape\":[-1]}]");
    else
        sb_printf(b,
                  ",\"versions\":[\"1\"],\"platform\":\"mantissa_bert\","
                  "\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[-1]}],"
                  "\"outputs\":[{\"name\":\"embedding\",\"datatype\":\"FP32\","
                  "\"shape\":[-1,%d]}]",
                  hidden);
    sb_printf(b, ",\"parameters\":{\"max_seq_len\":%d,\"variants\":[", maxlen);
    pthread_mutex_lock(&m->lock);
    int first = 1;
    for (int k = 0; k < m->nslots; k++) {
        const srv_slot *sl = m->slots[k];
        if (!sl->present)
            continue;
        sb_printf(b, "%s{\"name\":", first ? "" : ",");
        first = 0;
        sb_json_str(b, sl->name, strlen(sl->name));
        sb_printf(b, ",\"precision\":\"%s\",\"traffic\":%g,\"state\":\"%s\"",
                  mt_precision_name(sl->want.precision), sl->traffic,
                  srv_vstate_name(sl->state));
        if (sl->cur) {
            sb_puts(b, ",\"space_id\":");
            sb_json_str(b, sl->cur->space, strlen(sl->cur->space));
        }
        sb_putc(b, '}');
    }
    pthread_mutex_unlock(&m->lock);
    sb_puts(b, "]}}");
}

API_HANDLER(api_model_ready)
{
    srv_model *m = path_model(app, p, r);
    if (!m)
        return;
    bool ready = atomic_load(&app->models->ready) && !(app->sched && sched_draining(app->sched)) &&
                 srv_model_serving(m);
    r->status = ready ? 200 : 503;
    sb_puts(&r->body, "{\"name\":");
    sb_json_str(&r->body, m->name, strlen(m->name));
    sb_printf(&r->body, ",\"ready\":%s}", ready ? "true" : "false");
}

/* Triton's model configuration, consistent with the metadata: no batch
 * dimension in the shapes (max_batch_size 0), one BYTES input of any
 * length and an FP32 output (n, hidden); the server batches requests
 * itself (dynamic_batching). */
API_HANDLER(api_model_config)
{
    srv_model *m = path_model(app, p, r);
    if (!m)
        return;
    int hidden, maxlen;
    api_model_dims(m, &hidden, &maxlen);
    pthread_mutex_lock(&m->lock);
    const int max_batch = m->cfg.max_batch_size, max_tokens = m->cfg.max_batch_tokens,
              delay = m->cfg.max_queue_delay_us;
    const bool delay_auto = m->cfg.delay_auto;
    pthread_mutex_unlock(&m->lock);
    sbuf *b = &r->body;
    sb_puts(b, "{\"name\":");
    sb_json_str(b, m->name, strlen(m->name));
    sb_printf(b,
              ",\"platform\":\"mantissa_bert\",\"backend\":\"mantissa\",\"version_policy\":"
              "{\"latest\":{\"num_versions\":1}},\"max_batch_size\":0,"
              "\"input\":[{\"name\":\"text\",\"data_type\":\"TYPE_STRING\",\"format\":"
              "\"FORMAT_NONE\",\"dims\":[-1],\"is_shape_tensor\":false,\"allow_ragged_batch\":"
              "false,\"optional\":false}],"
              "\"output\":[{\"name\":\"embedding\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1,%d],"
              "\"label_filename\":\"\",\"is_shape_tensor\":false}],"
              "\"dynamic_batching\":{\"preferred_batch_size\":[],"
              "\"max_queue_delay_microseconds\":%d,\"preserve_ordering\":true},"
              "\"instance_group\":[{\"name\":\"%s\",\"kind\":\"KIND_CPU\",\"count\":%d}],"
              "\"parameters\":{\"max_batch_size\":{\"string_value\":\"%d\"},"
              "\"max_batch_tokens\":{\"string_value\":\"%d\"},"
              "\"max_queue_delay_us\":{\"string_value\":\"%s\"},"
              "\"max_seq_len\":{\"string_value\":\"%d\"}}}",
              hidden, delay_auto ? 0 : delay, m->name, app->cfg->engine_workers, max_batch,
              max_tokens, delay_auto ? "auto" : "fixed", maxlen);
}

/* Triton's statistics extension: one model, or all when the path names
 * none. */
API_HANDLER(api_model_stats)
{
    srv_model *only = NULL;
    if (p[0] && !(only = path_model(app, p, r)))
        return;
    sb_puts(&r->body, "{\"model_stats\":[");
    int first = 1;
    for (int i = 0; i < srv_models_count(app->models); i++) {
        srv_model *m = srv_models_at(app->models, i);
        if (only && m != only)
            continue;
        if (!first)
            sb_putc(&r->body, ',');
        first = 0;
        prom_model_stats_json(&r->body, app->models, m);
    }
    sb_puts(&r->body, "]}");
}

API_HANDLER(api_metrics)
{
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    prom_render(&r->body, app);
}
