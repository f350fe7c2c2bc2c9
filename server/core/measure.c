/* measure.c: models[].variants[].measure: what a variant's precision buys
 * on this machine, timed when its build is made: its forward on the
 * built-in probe texts at batch 1 and 32 against FP32's (engine/speed.h,
 * the timing `mantissa cpu --measure` does, in shorter runs), for the
 * `loaded` line, /metrics and a warning where it is slower than FP32 at
 * both batch sizes. FP32's figures are taken once per model (path and
 * max_seq_len) and kept: from a uniform FP32 build of the model on the
 * host (the build being measured, or one serving), else from a transient
 * FP32 build freed at once. Builds on other backends are not measured. */
#include <stdio.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "server/base/log.h"
#include "server/core/models.h"

/* Shorter than cpu --measure's: every probe batch run once first (its
 * GEMM primitives made), then at least three timed runs a figure, for some
 * 50 ms at batch 1; MiniLM's batch-32 figure is four forwards. */
static const mt_timing timing = {0, 3, 0.05, true};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether every GEMM of model is FP32. */
static bool all_fp32(const mt_model *model)
{
    return model->info.precision == MT_PREC_FP32 && !(model->info.mix && model->info.mix[0]);
}

/* Whether model (on be) is FP32 in every GEMM on the host's backend. */
static bool uniform_fp32(const srv_models *s, const mt_backend *be, const mt_model *model)
{
    return be == s->devices[0].be && all_fp32(model);
}

/* A serving uniform FP32 build of m on the host made from base (a
 * reference taken), or NULL. */
static srv_variant *serving_fp32(const srv_models *s, srv_model *m, uint64_t base)
{
    srv_variant *f = NULL;
    pthread_mutex_lock(&m->lock);
    for (int k = 0; k < m->nslots && !f; k++) {
        srv_variant *c = m->slots[k]->cur;
        if (c && c->base == base && uniform_fp32(s, c->be, c->model))
            f = c;
    }
    if (f)
        srv_variant_ref(f);
    pthread_mutex_unlock(&m->lock);
    return f;
}

/* FP32's figures measured on a transient FP32 build of mc, freed at once. */
static mt_status transient_fp32(srv_models *s, const srv_model *m, const cfg_model *mc,
                                const srv_variant *v, mt_speed *out, double *mib, mt_err *err)
{
    mt_model_opts o = {.precision = MT_PREC_FP32, .max_seq_len = mc->max_seq_len};
    mt_model *f = NULL;
    mt_status st = mt_model_load(mc->path, s->devices[0].be, &o, &f, err);
    if (st == MT_OK) {
        *mib = f->info.resident_bytes / 1048576.0;
        st = mt_model_probe_speed(f, timing, out, err);
        log_msg(LOG_INFO, "model %s: an FP32 build (%.1f MiB) made to time variant %s "
                "against, and freed", m->name, *mib, v->cfg.name);
    }
    mt_model_free(f);
#ifdef __GLIBC__
    malloc_trim(0); /* its pages back to the system (see build.c) */
#endif
    return st == MT_OK ? MT_OK : mt_prefix(err, st, "FP32's figures: ");
}

/* FP32's figures for v (whose own are mine) into *base and *mib: v's own
 * when it is a uniform FP32 build (kept for the model's other variants),
 * else the model's kept ones, else a serving FP32 build's, else a
 * transient build's. Called with m->probe_lock held. */
static mt_status fp32_figures(srv_models *s, srv_model *m, const cfg_model *mc,
                              const srv_variant *v, const mt_speed *mine, mt_speed *base,
                              double *mib, mt_err *err)
{
    mt_status st = MT_OK;
    if (uniform_fp32(s, v->be, v->model)) {
        *base = *mine;
        *mib = v->model->info.resident_bytes / 1048576.0;
    } else if (m->speed_base == v->base) {
        *base = m->fp32_speed;
        *mib = m->fp32_mib;
        return MT_OK;
    } else {
        srv_variant *f = serving_fp32(s, m, v->base);
        if (f) {
            *mib = f->model->info.resident_bytes / 1048576.0;
            st = mt_model_probe_speed(f->model, timing, base, err);
            srv_variant_unref(f);
        } else {
            st = transient_fp32(s, m, mc, v, base, mib, err);
        }
    }
    if (st == MT_OK) {
        m->fp32_speed = *base;
        m->fp32_mib = *mib;
        m->speed_base = v->base;
    }
    return st;
}

void srv_measure(srv_models *s, srv_model *m, const cfg_model *mc, srv_variant *v)
{
    v->measured = false;
    if (!v->cfg.measure)
        return;
    if (v->be != s->devices[0].be) {
        log_msg(LOG_INFO, "model %s, variant %s: not measured: it runs on the %s backend, and "
                "measure times builds on the %s against FP32 there", m->name, v->cfg.name,
                v->be->device, s->devices[0].reg->label);
        return;
    }
    const double t0 = mono_s();
    mt_speed mine, base;
    double mib = 0;
    mt_err err = {{0}};
    mt_status st = mt_model_probe_speed(v->model, timing, &mine, &err);
    if (st == MT_OK) {
        pthread_mutex_lock(&m->probe_lock);
        st = fp32_figures(s, m, mc, v, &mine, &base, &mib, &err);
        pthread_mutex_unlock(&m->probe_lock);
    }
    if (st != MT_OK) {
        log_msg(LOG_WARN, "model %s, variant %s: not measured: %s", m->name, v->cfg.name,
                err.msg);
        return;
    }
    v->speed = mine;
    mt_speed_vs(&mine, &base, v->speed_vs_fp32);
    v->fp32_mib = mib;
    v->measured = true;
    v->measure_s = mono_s() - t0;
}

void srv_measure_model(srv_models *s, srv_model *m, const cfg_model *mc)
{
    for (int pass = 0; pass < 2; pass++) /* FP32's own first: its figures become the model's */
        for (int k = 0; k < m->nslots; k++) {
            srv_variant *v = m->slots[k]->cur;
            if (v && uniform_fp32(s, v->be, v->model) == (pass == 0))
                srv_measure(s, m, mc, v);
        }
}

bool srv_speed_warning(const srv_variant *v, char *buf, size_t cap)
{
    if (!v->measured || all_fp32(v->model) || !mt_speed_slower(v->speed_vs_fp32))
        return false;
    mt_speed_warning(buf, cap, mt_precision_name(v->cfg.precision), srv_variant_isa(v),
                     v->speed_vs_fp32, v->speed.batch[1],
                     v->model->info.resident_bytes / 1048576.0, v->fp32_mib);
    return true;
}

void srv_log_speed_warning(const srv_model *m, const srv_variant *v, int level)
{
    char why[320];
    if (!srv_speed_warning(v, why, sizeof why))
        return;
    log_line l;
    log_begin(&l, level, "slower than fp32");
    log_str(&l, "model", m->name);
    log_str(&l, "variant", v->cfg.name);
    log_str(&l, "precision", mt_precision_name(v->cfg.precision));
    log_str(&l, "isa", srv_variant_isa(v));
    log_num(&l, "speed_b1_vs_fp32", v->speed_vs_fp32[0], 2);
    log_num(&l, "speed_b32_vs_fp32", v->speed_vs_fp32[1], 2);
    log_num(&l, "resident_mib", v->model->info.resident_bytes / 1048576.0, 1);
    log_num(&l, "fp32_resident_mib", v->fp32_mib, 1);
    log_str(&l, "warning", why);
    log_words(&l, "%s@%s: %s", m->name, v->cfg.name, why);
    log_end(&l);
}
