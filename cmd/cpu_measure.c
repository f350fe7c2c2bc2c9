/* cpu_measure.c: mantissa cpu --measure: what each precision buys on this
 * CPU, measured here and now: for the model folder --model (default
 * all-MiniLM-L6-v2), every precision the CPU backend runs is loaded in
 * turn and times its forward on the load check's built-in probe texts at
 * batch 1 and batch 32 (the median of runs for --seconds each, default
 * 0.5), against FP32's in the same run; with its resident memory and its
 * drift from FP32 on the same texts (the load check's figures). A
 * precision slower than FP32 at both batch sizes gets a warning that names
 * the ISA level and says what it buys instead: memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/text/probe_text.h"

#define BIG_BATCH 32

/* One precision's figures. */
typedef struct {
    double tps[2]; /* texts per second at batch 1 and BIG_BATCH */
    double mib;
    mt_drift drift;
} measured;

/* The probe texts as m's token ids, packed; *n of them. NULL after
 * printing why. */
static int32_t *probe_ids(const mt_model *m, int32_t **off, int *n)
{
    const int cap = m->info.max_seq_len, ns = mt_probe_texts_n;
    int32_t *ids = malloc(sizeof *ids * (size_t)ns * (size_t)cap);
    *off = malloc(sizeof **off * ((size_t)ns + 1));
    mt_err err;
    if (!ids || !*off) {
        fprintf(stderr, "mantissa cpu: out of memory\n");
        free(ids);
        return NULL;
    }
    (*off)[0] = 0;
    for (int i = 0; i < ns; i++) {
        int got = 0;
        const char *t = mt_probe_texts[i];
        if (mt_model_tokenize(m, t, strlen(t), ids + (*off)[i], cap, &got, NULL, &err) != MT_OK) {
            fprintf(stderr, "mantissa cpu: probe text %d: %s\n", i, err.msg);
            free(ids);
            return NULL;
        }
        (*off)[i + 1] = (*off)[i] + got;
    }
    *n = ns;
    return ids;
}

/* Loads dir at p and measures it into *out; ref: FP32's probe vectors
 * (NULL for FP32 itself, whose vectors it then writes into *ref_out). */
static int measure(const char *dir, mt_backend *be, mt_precision p, double seconds,
                   const float *ref, float **ref_out, measured *out)
{
    mt_model_opts mo = {.precision = p, .calib = {MT_CALIB_ABSMAX, 100.0}};
    mt_model *m = NULL;
    mt_err err;
    if (mt_model_load(dir, be, &mo, &m, &err) != MT_OK) {
        fprintf(stderr, "mantissa cpu: %s at %s: %s\n", dir, mt_precision_name(p), err.msg);
        return -1;
    }
    int32_t *off = NULL;
    int n = 0, rc = -1;
    int32_t *ids = probe_ids(m, &off, &n);
    const int h = m->info.hidden;
    float *vec = malloc(sizeof *vec * (size_t)mt_probe_count() * h);
    if (ids && vec && mt_model_embed_probes(m, vec, &err) == MT_OK) {
        const int batch[2] = {1, BIG_BATCH < n ? BIG_BATCH : n};
        rc = 0;
        for (int k = 0; k < 2 && !rc; k++) {
            size_t runs = 0;
            const double t = cmd_median_run(m, ids, off, n, batch[k], seconds, &runs);
            rc = t > 0 ? 0 : -1;
            out->tps[k] = t > 0 ? batch[k] / t : 0;
        }
        out->mib = (double)m->info.resident_bytes / (1 << 20);
        if (ref)
            out->drift = mt_drift_between(vec, ref, mt_probe_count(), h);
        else
            out->drift = (mt_drift){.probes = mt_probe_count(), .mean_cos = 1, .min_cos = 1};
    } else if (ids && vec) {
        fprintf(stderr, "mantissa cpu: %s at %s: %s\n", dir, mt_precision_name(p), err.msg);
    }
    if (!rc && !ref) {
        *ref_out = vec;
        vec = NULL;
    }
    free(vec);
    free(ids);
    free(off);
    mt_model_free(m);
    return rc;
}

int cmd_cpu_measure(const cmd_opts *o, mt_backend *be, double seconds)
{
    const char *dir = o->model ? o->model : "models/all-MiniLM-L6-v2";
    const char *isa = be->ops->isa(be);
    measured r[MT_PREC_COUNT];
    memset(r, 0, sizeof r);
    float *ref = NULL;
    if (measure(dir, be, MT_PREC_FP32, seconds, NULL, &ref, &r[MT_PREC_FP32]) != 0)
        return 1;
    printf("model: %s; isa %s; probe texts: %d, batch 1 and %d; %.2f s a figure\n", dir, isa,
           mt_probe_count(), BIG_BATCH, seconds);
    printf("%-6s %14s %8s %14s %8s %12s %10s %10s\n", "prec", "batch1 texts/s", "x fp32",
           "batch32 texts/s", "x fp32", "resident MiB", "mean cos", "min cos");
    int rc = 0;
    for (int p = 0; p < MT_PREC_COUNT; p++) {
        if (!be->ops->supports(be, (mt_precision)p))
            continue;
        measured *x = &r[p];
        if (p != MT_PREC_FP32 && measure(dir, be, (mt_precision)p, seconds, ref, NULL, x) != 0) {
            rc = 1;
            continue;
        }
        const measured *f = &r[MT_PREC_FP32];
        const double s1 = x->tps[0] / f->tps[0], s32 = x->tps[1] / f->tps[1];
        printf("%-6s %14.1f %7.2fx %14.1f %7.2fx %12.1f %10.6f %10.6f\n",
               mt_precision_name((mt_precision)p), x->tps[0], s1, x->tps[1], s32, x->mib,
               x->drift.mean_cos, x->drift.min_cos);
        if (p != MT_PREC_FP32 && s1 < 1.0 && s32 < 1.0)
            printf("warning: %s is slower than fp32 on this CPU at ISA %s (%.2fx at batch 1, "
                   "%.2fx at batch %d); what it buys here is memory: %.1f MiB against fp32's "
                   "%.1f\n",
                   mt_precision_name((mt_precision)p), isa, s1, s32, BIG_BATCH, x->mib, f->mib);
    }
    free(ref);
    return rc;
}
