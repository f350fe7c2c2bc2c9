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
#include "engine/speed.h"

#define BIG_BATCH MT_SPEED_BIG_BATCH

/* One precision's figures. */
typedef struct {
    mt_speed speed; /* texts per second at batch 1 and BIG_BATCH */
    double mib;
    mt_drift drift;
} measured;

/* Loads dir at p and measures it into *out (engine/speed.h: the server's
 * models[].variants[].measure times a build the same way); ref: FP32's
 * probe vectors (NULL for FP32 itself, whose vectors it then writes into
 * *ref_out). */
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
    int rc = -1;
    const int h = m->info.hidden;
    float *vec = malloc(sizeof *vec * (size_t)mt_probe_count() * h);
    if (!vec) {
        fprintf(stderr, "mantissa cpu: out of memory\n");
    } else if (mt_model_embed_probes(m, vec, &err) != MT_OK ||
               mt_model_probe_speed(m, mt_timing_for(seconds), &out->speed, &err) != MT_OK) {
        fprintf(stderr, "mantissa cpu: %s at %s: %s\n", dir, mt_precision_name(p), err.msg);
    } else {
        rc = 0;
        out->mib = (double)m->info.resident_bytes / (1 << 20);
        if (ref)
            out->drift = mt_drift_between(vec, ref, mt_probe_count(), h);
        else
            out->drift = (mt_drift){.probes = mt_probe_count(), .mean_cos = 1, .min_cos = 1};
    }
    if (!rc && !ref) {
        *ref_out = vec;
        vec = NULL;
    }
    free(vec);
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
        double ratio[2];
        mt_speed_vs(&x->speed, &f->speed, ratio);
        printf("%-6s %14.1f %7.2fx %14.1f %7.2fx %12.1f %10.6f %10.6f\n",
               mt_precision_name((mt_precision)p), x->speed.tps[0], ratio[0], x->speed.tps[1],
               ratio[1], x->mib, x->drift.mean_cos, x->drift.min_cos);
        if (p != MT_PREC_FP32 && mt_speed_slower(ratio)) {
            char why[320];
            mt_speed_warning(why, sizeof why, mt_precision_name((mt_precision)p), isa, ratio,
                             x->speed.batch[1], x->mib, f->mib);
            printf("warning: %s\n", why);
        }
    }
    free(ref);
    return rc;
}
