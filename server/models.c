/* models.c: load the configured models and route requests to variants. */
#include "server/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mt_status srv_models_load(const cfg_config *cfg, srv_models **out, mt_err *err)
{
    srv_models *s = calloc(1, sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    mt_status st = mt_backend_cpu_create(cfg->engine_threads, &s->cpu, err);
    if (st != MT_OK)
        goto fail;
    if (!(s->models = calloc((size_t)cfg->nmodels, sizeof *s->models))) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < cfg->nmodels; i++) {
        const cfg_model *cm = &cfg->models[i];
        srv_model *m = &s->models[i];
        m->cfg = *cm;
        m->index = i;
        s->nmodels = i + 1;
        if (cm->device == CFG_DEVICE_CUDA) {
            st = mt_fail(err, MT_EUNSUPPORTED,
                         "model %s: device \"cuda\" asked for, but this build has no CUDA backend",
                         cm->name);
            goto fail;
        }
        if (!(m->variants = calloc((size_t)cm->nvariants, sizeof *m->variants))) {
            st = mt_fail(err, MT_ENOMEM, "out of memory");
            goto fail;
        }
        for (int k = 0; k < cm->nvariants; k++) {
            srv_variant *v = &m->variants[k];
            v->cfg = cm->variants[k];
            bert_load_opts o = {.precision = v->cfg.precision,
                                .calib = {MT_CALIB_ABSMAX, v->cfg.percentile},
                                .max_seq_len = cm->max_seq_len,
                                .weights = v->cfg.weights};
            mt_calib_parse(v->cfg.calibration, &o.calib.method);
            st = bert_load(cm->path, s->cpu, &o, &v->model, err);
            if (st != MT_OK) {
                mt_prefix(err, st, "model %s, variant %s: ", cm->name, v->cfg.name);
                goto fail;
            }
            pthread_mutex_init(&v->lock, NULL);
            prom_variant_init(&v->metrics);
            m->nvariants = k + 1;
            m->traffic_total += v->cfg.traffic;
            m->hidden = bert_get_config(v->model)->hidden;
            m->max_seq_len = bert_get_config(v->model)->max_seq_len;
        }
    }
    s->ready = true;
    *out = s;
    return MT_OK;
fail:
    srv_models_free(s);
    return st;
}

void srv_models_free(srv_models *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nmodels; i++) {
        srv_model *m = &s->models[i];
        for (int k = 0; k < m->nvariants; k++) {
            bert_free(m->variants[k].model);
            pthread_mutex_destroy(&m->variants[k].lock);
            prom_variant_destroy(&m->variants[k].metrics);
        }
        free(m->variants);
    }
    free(s->models);
    mt_backend_destroy(s->cpu);
    free(s);
}

srv_model *srv_models_find(srv_models *s, const char *name)
{
    for (int i = 0; i < s->nmodels; i++)
        if (!strcmp(s->models[i].cfg.name, name))
            return &s->models[i];
    return NULL;
}

char *srv_split_pin(char *model_name)
{
    char *at = strchr(model_name, '@');
    if (!at)
        return NULL;
    *at = 0;
    return at + 1;
}

/* xorshift per thread: routing needs spread, not cryptographic quality. */
static double uniform01(void)
{
    static _Thread_local unsigned long long x;
    if (!x)
        x = (unsigned long long)(uintptr_t)&x ^ 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (double)(x >> 11) / 9007199254740992.0;
}

srv_variant *srv_pick_variant(srv_model *m, const char *pin)
{
    if (pin && *pin) {
        for (int k = 0; k < m->nvariants; k++)
            if (!strcmp(m->variants[k].cfg.name, pin))
                return &m->variants[k];
        return NULL;
    }
    double r = uniform01() * m->traffic_total;
    for (int k = 0; k < m->nvariants; k++) {
        r -= m->variants[k].cfg.traffic;
        if (r < 0)
            return &m->variants[k];
    }
    for (int k = m->nvariants - 1; k >= 0; k--)
        if (m->variants[k].cfg.traffic > 0)
            return &m->variants[k];
    return &m->variants[0];
}

mt_status srv_forward(srv_variant *v, const int32_t *ids, const int32_t *offsets, int nseq,
                      float *out, mt_err *err)
{
    pthread_mutex_lock(&v->lock);
    mt_status st = bert_forward(v->model, ids, offsets, nseq, out, err);
    pthread_mutex_unlock(&v->lock);
    return st;
}
