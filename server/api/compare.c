/* compare.c: POST /v2/models/{m}/compare: one request's texts through
 * every loaded variant of a model, each as its own job on the scheduler,
 * answered with each variant's latency and its drift from the reference
 * run of the same texts (cosine, max abs error), and the vectors if asked. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/metrics.h"
#include "server/api/api.h"

/* A JSON string of a C string. */
static void str(sbuf *b, const char *s)
{
    sb_json_str(b, s, strlen(s));
}

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
    api_deferred d;
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
static void cmp_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    cmp_call *c = (cmp_call *)d;
    if (c->job.result != SCHED_OK) {
        api_error(r, c->job.result == SCHED_TIMEOUT ? 504 : 503, NULL, "%s", c->job.msg);
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
        api_error(r, 500, NULL, "out of memory");
        return false;
    }
    j->off[0] = 0;
    for (int i = 0; i < n; i++) {
        mt_err err;
        int got = 0, full = 0;
        mt_status ts = mt_model_tokenize(v->model, texts[i], strlen(texts[i]),
                                         j->ids + j->off[i], maxlen, &got, &full, &err);
        if (ts != MT_OK) {
            api_error(r, ts == MT_EUTF8 ? 400 : 500, "input", "input[%d]: %s", i, err.msg);
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

/* The texts of a compare body ({"input": text or [texts], "embeddings":
 * bool}) into texts (at most COMPARE_MAX_INPUTS); -1 after answering. */
static int compare_texts(const http_app *app, const cJSON *j, const char **texts, bool *emb_out,
                         http_resp *r)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(j, "embeddings");
    int n = 0;
    for (const cJSON *it = j->child; it; it = it->next)
        if (strcmp(it->string, "input") && strcmp(it->string, "embeddings")) {
            api_error(r, 400, it->string, "unknown field \"%s\" (expected input, embeddings)",
                      it->string);
            return -1;
        }
    if (cJSON_IsString(in)) {
        texts[n++] = in->valuestring;
    } else if (cJSON_IsArray(in) && cJSON_GetArraySize(in) >= 1) {
        const cJSON *it;
        cJSON_ArrayForEach(it, in)
        {
            if (!cJSON_IsString(it)) {
                api_error(r, 400, "input", "input[%d] must be a string", n);
                return -1;
            }
            if (n == COMPARE_MAX_INPUTS) {
                api_error(r, 413, "input", "compare takes at most %d texts", COMPARE_MAX_INPUTS);
                return -1;
            }
            texts[n++] = it->valuestring;
        }
    } else {
        api_error(r, 400, "input", "\"input\" must be a string or a non-empty array of strings");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (strlen(texts[i]) > (size_t)app->cfg->max_input_bytes) {
            api_error(r, 413, "max_input_bytes", "input[%d] is over max_input_bytes", i);
            return -1;
        }
    if (!api_no_empty_text("input", texts, NULL, n, r))
        return -1;
    if (emb && !cJSON_IsBool(emb)) {
        api_error(r, 400, "embeddings", "\"embeddings\" must be true or false");
        return -1;
    }
    *emb_out = cJSON_IsTrue(emb);
    return n;
}

/* One run per build serving a variant of m, with its state, in slot
 * order. False when out of memory. */
static bool collect_builds(cmp_call *c, srv_model *m)
{
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
    return c->subs != NULL;
}

API_HANDLER(api_compare)
{
    srv_model *m = srv_models_find(app->models, p[0]);
    if (!m) {
        api_error(r, 404, "model", "model \"%s\" is not served here", p[0]);
        return;
    }
    if (!app->sched) {
        api_error(r, 503, NULL, "compare needs the scheduler");
        return;
    }
    r->call->model = m;
    cJSON *j = api_parse_body(app, req, r);
    const char *texts[COMPARE_MAX_INPUTS];
    bool embeddings;
    int n = j ? compare_texts(app, j, texts, &embeddings, r) : -1;
    cmp_call *c = n < 0 ? NULL : calloc(1, sizeof *c);
    if (n >= 0 && !c)
        api_error(r, 500, NULL, "out of memory");
    if (!c)
        goto done;
    c->m = m;
    c->ntexts = n;
    c->embeddings = embeddings;
    if (!collect_builds(c, m)) {
        api_error(r, 500, NULL, "out of memory");
        goto fail;
    }
    if (c->nsubs == 0) {
        api_error(r, 503, "model", "model \"%s\" has no variant loaded", m->name);
        goto fail;
    }
    int64_t deadline = (int64_t)(req->t_start + (uint64_t)app->cfg->request_timeout_ms * 1000000ull);
    for (int i = 0; i < c->nsubs; i++)
        if (!cmp_tokenize(&c->subs[i], texts, n, deadline, r))
            goto fail;
    atomic_init(&c->job.refs, 1); /* the request's */
    c->job.fd = -1;
    c->job.m = m;
    c->job.control = cmp_control;
    c->job.on_free = cmp_free;
    c->job.deadline = (uint64_t)deadline;
    c->d.job = &c->job;
    api_defer(r, &c->d, cmp_respond);
    cJSON_Delete(j);
    return;
fail:
    cmp_free(&c->job);
done:
    cJSON_Delete(j);
}
