/* speed.h: what a precision buys on this machine, timed: a model's
 * forward on the load check's built-in probe texts (engine/text/
 * probe_text.h) at batch 1 and 32, the median of short runs, against
 * FP32's; and the warning for a precision slower than FP32 at both batch
 * sizes, which names the ISA level and what it buys instead (memory).
 * `mantissa cpu --measure` (cmd/cpu_measure.c) and the server's
 * models[].variants[].measure (server/core/measure.c) both use it; `mantissa
 * bench` times its own token ids with mt_model_median_run. */
#ifndef MT_ENGINE_SPEED_H
#define MT_ENGINE_SPEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

/* The larger of the two batch sizes (the smaller is 1). */
#define MT_SPEED_BIG_BATCH 32

/* A model's speed on the probe texts. */
typedef struct {
    int batch[2];  /* 1, and MT_SPEED_BIG_BATCH (fewer if there were fewer texts) */
    double tps[2]; /* texts per second at each: batch / the median run time */
} mt_speed;

/* How a figure is timed: warmup runs of the first batch, and with
 * warm_each one run of every batch the timed runs will take (the first
 * forward of a token count makes its GEMM primitives: oneDNN's FP32
 * matmul has one per row count), none of them timed; then timed runs
 * until `seconds` have passed and at least min_runs were made. */
typedef struct {
    int warmup, min_runs;
    double seconds;
    bool warm_each;
} mt_timing;

/* bench's and cpu --measure's: 3 warm-up runs, at least 5 timed. */
static inline mt_timing mt_timing_for(double seconds)
{
    return (mt_timing){3, 5, seconds, false};
}

/* Runs m's forward on batches of b of the nseq packed sequences (ids,
 * off; b <= nseq), in turn, as t says; *median gets the median run time
 * in seconds, *runs (may be NULL) the timed runs. A forward's error is
 * returned as it is. */
mt_status mt_model_median_run(mt_model *m, const int32_t *ids, const int32_t *off, int nseq,
                              int b, mt_timing t, double *median, size_t *runs, mt_err *err);

/* The probe texts as m's token ids, packed (free() both): *n texts. */
mt_status mt_probe_tokens(const mt_model *m, int32_t **ids, int32_t **off, int *n, mt_err *err);

/* m's speed on the probe texts at batch 1 and MT_SPEED_BIG_BATCH, each
 * timed as t says (mt_model_median_run). */
mt_status mt_model_probe_speed(mt_model *m, mt_timing t, mt_speed *out, mt_err *err);

/* x's speed over fp32's, at batch 1 and the big batch, into ratio. */
void mt_speed_vs(const mt_speed *x, const mt_speed *fp32, double ratio[2]);

/* Whether ratio (mt_speed_vs) says slower than FP32 at both batch sizes. */
static inline bool mt_speed_slower(const double ratio[2])
{
    return ratio[0] < 1.0 && ratio[1] < 1.0;
}

/* The warning's sentence for precision prec at ISA level isa, into buf:
 * "int8 is slower than fp32 on this CPU at ISA avx2 (0.88x at batch 1,
 * 0.86x at batch 32); what it buys here is memory: 55.9 MiB against
 * fp32's 86.1". */
void mt_speed_warning(char *buf, size_t cap, const char *prec, const char *isa,
                      const double ratio[2], int big_batch, double mib, double fp32_mib);

#endif
