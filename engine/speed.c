/* speed.c: a model's speed on the probe texts against FP32's, and the
 * warning for a precision slower than FP32 at both batch sizes (see
 * speed.h). */
#include "engine/speed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/text/probe_text.h"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One forward of the b sequences from start (offsets rebased into boff);
 * *dt gets its seconds. */
static mt_status forward_at(mt_model *m, const int32_t *ids, const int32_t *off, int start,
                            int b, int32_t *boff, float *out, double *dt, mt_err *err)
{
    for (int k = 0; k <= b; k++)
        boff[k] = off[start + k] - off[start];
    const double t0 = mono_s();
    mt_status st = mt_model_forward(m, ids + off[start], boff, b, out, NULL, err);
    *dt = mono_s() - t0;
    return st;
}

mt_status mt_model_median_run(mt_model *m, const int32_t *ids, const int32_t *off, int nseq,
                              int b, mt_timing t, double *median, size_t *runs, mt_err *err)
{
    float *out = malloc(sizeof(float) * (size_t)b * m->info.hidden);
    int32_t *boff = malloc(sizeof(int32_t) * ((size_t)b + 1));
    size_t cap = 1024, nt = 0;
    double *times = malloc(sizeof(double) * cap), el = 0, dt;
    mt_status st = out && boff && times ? MT_OK : mt_fail(err, MT_ENOMEM, "out of memory");
    /* run i takes the batch from (i * b) % span: in turn, wrapping */
    const int span = nseq - b + 1, warm = t.warmup + (t.warm_each ? span : 0);
    for (int w = 0; st == MT_OK && w < warm; w++) {
        const int start = w < t.warmup ? 0 : (int)((long long)(w - t.warmup) * b % span);
        st = forward_at(m, ids, off, start, b, boff, out, &dt, err);
    }
    for (int it = 0; st == MT_OK && (it < t.min_runs || el < t.seconds); it++) {
        st = forward_at(m, ids, off, (int)((long long)it * b % span), b, boff, out, &dt, err);
        if (st == MT_OK && nt == cap) {
            double *more = realloc(times, sizeof(double) * (cap *= 2));
            if (!more)
                st = mt_fail(err, MT_ENOMEM, "out of memory");
            times = more ? more : times;
        }
        if (st == MT_OK) {
            times[nt++] = dt;
            el += dt;
        }
    }
    if (st == MT_OK) {
        qsort(times, nt, sizeof *times, cmp_double);
        *median = nt % 2 ? times[nt / 2] : (times[nt / 2 - 1] + times[nt / 2]) / 2;
        if (runs)
            *runs = nt;
    }
    free(times);
    free(out);
    free(boff);
    return st;
}

mt_status mt_probe_tokens(const mt_model *m, int32_t **ids, int32_t **off, int *n, mt_err *err)
{
    const int cap = m->info.max_seq_len, ns = mt_probe_texts_n;
    *ids = malloc(sizeof **ids * (size_t)ns * (size_t)cap);
    *off = malloc(sizeof **off * ((size_t)ns + 1));
    mt_status st = *ids && *off ? MT_OK : mt_fail(err, MT_ENOMEM, "out of memory");
    if (st == MT_OK)
        (*off)[0] = 0;
    for (int i = 0; st == MT_OK && i < ns; i++) {
        int got = 0;
        const char *t = mt_probe_texts[i];
        st = mt_model_tokenize(m, t, strlen(t), *ids + (*off)[i], cap, &got, NULL, err);
        if (st != MT_OK)
            mt_prefix(err, st, "probe text %d: ", i);
        else
            (*off)[i + 1] = (*off)[i] + got;
    }
    if (st != MT_OK) {
        free(*ids);
        free(*off);
        *ids = *off = NULL;
        return st;
    }
    *n = ns;
    return MT_OK;
}

mt_status mt_model_probe_speed(mt_model *m, mt_timing t, mt_speed *out, mt_err *err)
{
    int32_t *ids, *off;
    int n = 0;
    mt_status st = mt_probe_tokens(m, &ids, &off, &n, err);
    if (st != MT_OK)
        return st;
    out->batch[0] = 1;
    out->batch[1] = MT_SPEED_BIG_BATCH < n ? MT_SPEED_BIG_BATCH : n;
    for (int k = 0; k < 2 && st == MT_OK; k++) {
        double med = 0;
        st = mt_model_median_run(m, ids, off, n, out->batch[k], t, &med, NULL, err);
        out->tps[k] = st == MT_OK && med > 0 ? out->batch[k] / med : 0;
    }
    free(ids);
    free(off);
    return st;
}

void mt_speed_vs(const mt_speed *x, const mt_speed *fp32, double ratio[2])
{
    for (int k = 0; k < 2; k++)
        ratio[k] = fp32->tps[k] > 0 ? x->tps[k] / fp32->tps[k] : 0;
}

void mt_speed_warning(char *buf, size_t cap, const char *prec, const char *isa,
                      const double ratio[2], int big_batch, double mib, double fp32_mib)
{
    snprintf(buf, cap,
             "%s is slower than fp32 on this CPU at ISA %s (%.2fx at batch 1, %.2fx at batch "
             "%d); what it buys here is memory: %.1f MiB against fp32's %.1f",
             prec, isa, ratio[0], ratio[1], big_batch, mib, fp32_mib);
}
