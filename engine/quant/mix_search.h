/* mix_search.h: chooses a per-layer mixed precision (engine/quant/mix.h) for a
 * model: the cheapest assignment of a low precision (int8, fp8) and a high
 * one (fp32, fp16, bf16, int8g) to its encoder GEMMs whose mean cosine to
 * FP32 on held-back text meets a budget. `mantissa quantize --auto` runs it.
 *
 * How: every GEMM's sensitivity is measured alone (the model in the high
 * precision with only that GEMM low: the mean cosine drop to FP32 on the
 * calibration half of the texts); its cost is its share of the multiply-
 * adds per token. Starting from all-low, the GEMMs with the largest drop
 * per cost go high until the drops left, scaled so that all-low predicts
 * what all-low measured, meet the budget; then the chosen mix is loaded and
 * measured on the held-back half, and while that misses the budget the
 * next GEMM goes high and it is measured again. Drops of small errors add
 * up nearly linearly, which is what makes one pass of single-GEMM
 * measurements enough; the final check does not rely on it.
 *
 * The search loads the model many times, but engine/ sits below models/:
 * it never calls the registry itself. Its caller (cmd/, server/core/)
 * passes the loader, mt_model_load (engine/model.h, in models/registry.c).
 */
#ifndef MT_ENGINE_MIX_SEARCH_H
#define MT_ENGINE_MIX_SEARCH_H

#include <stddef.h>

#include "engine/backend.h"
#include "engine/quant/mix.h"
#include "engine/model.h"

/* Loads the model in dir onto be as o says: mt_model_load's shape. */
typedef mt_status (*mt_mix_load_fn)(const char *dir, mt_backend *be, const mt_model_opts *o,
                                    mt_model **out, mt_err *err);

typedef struct {
    mt_mix_load_fn load;   /* required: mt_model_load, from the caller */
    mt_precision low;      /* the cheap precision most GEMMs get (int8, fp8) */
    mt_precision high;     /* the precision of the sensitive ones (fp32, fp16, bf16, or
                            * int8g: group scales, near int8's speed on the CPU) */
    double budget_cos;     /* held-back mean cosine to FP32 at least this */
    mt_calib_opts calib;   /* how low-precision scales are chosen */
    int max_seq_len;       /* 0: the model's own */
    const char *const *texts; /* NULL: the built-in calibration sentences */
    int ntexts;            /* even-indexed ones measure, odd-indexed ones check */
    /* progress lines (may be NULL) */
    void (*progress)(void *arg, const char *line);
    void *progress_arg;
} mt_mix_search_opts;

typedef struct {
    int layers;
    double drop[MT_MIX_MAX_LAYERS][MT_GEMM_KINDS]; /* alone low: 1 - mean cosine */
    double cost[MT_MIX_MAX_LAYERS][MT_GEMM_KINDS]; /* share of the GEMM work, sums to 1 */
    double low_cos, high_cos; /* all-low, all-high: held-back mean cosine */
    double mixed_cos;         /* the chosen mix: held-back mean cosine */
    double high_share;        /* share of the GEMM work left in the high precision */
    int loads;                /* models loaded by the search */
    char mix[1024];           /* the chosen mix, text form */
} mt_mix_search_result;

/* Runs the search for the model in dir on be, loading it with o->load. A
 * budget that even all-high misses is MT_EINVAL naming both figures. */
mt_status mt_mix_search(const char *dir, mt_backend *be, const mt_mix_search_opts *o,
                        mt_mix_search_result *res, mt_err *err);

/* A variant's mix as loadable rules: mix itself, or for "auto" the search's
 * choice for o->precision (the low one) under budget_cos, with high as the
 * high precision; high MT_PREC_COUNT: fp32 on the CPU backend and fp16
 * elsewhere (where 16-bit GEMMs run on tensor cores). load is the search's
 * loader (mt_mix_search_opts.load; unused when mix is not "auto"); progress
 * may be NULL. */
mt_status mt_mix_resolve(const char *dir, mt_backend *be, mt_mix_load_fn load,
                         const mt_model_opts *o,
                         const char *mix, double budget_cos, mt_precision high,
                         void (*progress)(void *arg, const char *line), void *arg,
                         char *out, size_t cap, mt_err *err);

#endif
