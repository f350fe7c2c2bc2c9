/* mix_search.c: the search for a per-layer mixed precision under a cosine
 * budget (mix_search.h says how it works). It uses models only through the
 * model interface and the loader its caller passes, so it serves every
 * architecture with the four encoder GEMM kinds and calls nothing in
 * models/. */
#include "engine/quant/mix_search.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/calib_text.h"

typedef struct {
    const char *dir;
    mt_backend *be;
    const mt_mix_search_opts *o;
    const char **set[2]; /* 0: measure, 1: check */
    int nset[2];
    float *ref[2];       /* FP32 vectors of each set */
    mt_model_info info;  /* of the model (the same whatever its precision) */
    double high_measure; /* all-high: mean cosine on the measuring set */
    mt_mix_search_result *res;
} search;

static void say(const search *s, const char *fmt, ...)
{
    if (!s->o->progress)
        return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->o->progress(s->o->progress_arg, line);
}

/* Loads the model as (precision, mix) and embeds set `which`; with ref,
 * *cos gets the mean cosine to it. The vectors go to out (or are dropped). */
static mt_status embed_as(search *s, mt_precision p, const char *mix, int which, float **out,
                          double *cos, mt_err *err)
{
    mt_model_opts mo = {.precision = p, .calib = s->o->calib, .max_seq_len = s->o->max_seq_len,
                        .mix = mix};
    mt_model *m;
    mt_status st = s->o->load(s->dir, s->be, &mo, &m, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "loading %s%s%s: ", mt_precision_name(p), mix ? " with mix " : "",
                         mix ? mix : "");
    s->res->loads++;
    s->info = *mt_model_get_info(m);
    const int n = s->nset[which], h = s->info.hidden;
    float *v = malloc(sizeof(float) * (size_t)n * h);
    if (!v) {
        mt_model_free(m);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    st = mt_model_embed_texts(m, s->set[which], NULL, n, v, NULL, err);
    mt_model_free(m);
    if (st == MT_OK && cos) {
        double sum = 0;
        for (int i = 0; i < n; i++) {
            const float *a = v + (size_t)i * h, *b = s->ref[which] + (size_t)i * h;
            double ab = 0, aa = 0, bb = 0;
            for (int j = 0; j < h; j++) {
                ab += (double)a[j] * b[j];
                aa += (double)a[j] * a[j];
                bb += (double)b[j] * b[j];
            }
            sum += aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
        }
        *cos = sum / n;
    }
    if (st == MT_OK && out)
        *out = v;
    else
        free(v);
    return st;
}

static void costs(search *s, const mt_model_info *info)
{
    const double h = info->hidden, i = info->intermediate;
    const double per_layer[MT_GEMM_KINDS] = {3 * h * h, h * h, h * i, h * i};
    double total = 0;
    for (int k = 0; k < MT_GEMM_KINDS; k++)
        total += per_layer[k];
    for (int l = 0; l < s->res->layers; l++)
        for (int k = 0; k < MT_GEMM_KINDS; k++)
            s->res->cost[l][k] = per_layer[k] / (total * s->res->layers);
}

/* Each GEMM alone in the low precision: its drop on the measuring set,
 * from where the model is all-high there (1 for fp32; below it for a high
 * precision that drifts itself, such as int8g). */
static mt_status sensitivities(search *s, mt_err *err)
{
    const mt_mix_search_opts *o = s->o;
    double base = 1;
    if (o->high != MT_PREC_FP32) {
        mt_status st = embed_as(s, o->high, NULL, 0, NULL, &base, err);
        if (st != MT_OK)
            return st;
    }
    s->high_measure = base;
    for (int l = 0; l < s->res->layers; l++)
        for (int k = 0; k < MT_GEMM_KINDS; k++) {
            char mix[64];
            double c;
            snprintf(mix, sizeof mix, "%s@%d=%s", mt_gemm_kind_name(k), l,
                     mt_precision_name(o->low));
            mt_status st = embed_as(s, o->high, mix, 0, NULL, &c, err);
            if (st != MT_OK)
                return st;
            s->res->drop[l][k] = base - c;
            say(s, "  layer %d %-8s alone %s: cosine %.6f (cost %.1f%%)", l,
                mt_gemm_kind_name(k), mt_precision_name(o->low), c,
                100 * s->res->cost[l][k]);
        }
    return MT_OK;
}

typedef struct {
    int l, k;
    double ratio;
} cand;

static int by_ratio_desc(const void *a, const void *b)
{
    double x = ((const cand *)a)->ratio, y = ((const cand *)b)->ratio;
    return (x < y) - (x > y);
}

/* The map with the first `up` candidates high, the rest low, as a mix. */
static mt_status mix_of(const search *s, const cand *order, int up, char *out, size_t cap,
                        mt_err *err)
{
    mt_precision map[MT_MIX_MAX_LAYERS * MT_GEMM_KINDS]; /* 2 KiB */
    const int L = s->res->layers;
    for (int i = 0; i < L * MT_GEMM_KINDS; i++)
        map[i] = s->o->low;
    for (int i = 0; i < up; i++)
        map[order[i].l * MT_GEMM_KINDS + order[i].k] = s->o->high;
    mt_mix mix;
    mt_status st = mt_mix_from_map(map, L, &mix, err);
    if (st == MT_OK && !mt_mix_format(&mix, out, cap))
        st = mt_fail(err, MT_ELIMIT, "the chosen mix does not fit in %zu bytes", cap);
    return st;
}

/* From all-low, how many of the ordered candidates must go high for the
 * scaled sum of the remaining drops to meet the budget (drops and the
 * allowance both counted from all-high). */
static int predicted_up(const search *s, const cand *order, int n, double low_drop)
{
    double total = 0;
    for (int i = 0; i < n; i++)
        total += s->res->drop[order[i].l][order[i].k];
    double scale = total > 0 ? low_drop / total : 0, left = total;
    const double allowed = s->high_measure - s->o->budget_cos;
    int up = 0;
    while (up < n && left * scale > allowed) {
        left -= s->res->drop[order[up].l][order[up].k];
        up++;
    }
    return up;
}

/* Chooses and checks the mix (the sets and references are ready). */
static mt_status choose(search *s, mt_err *err)
{
    mt_mix_search_result *r = s->res;
    const int n = r->layers * MT_GEMM_KINDS;
    cand order[MT_MIX_MAX_LAYERS * MT_GEMM_KINDS];
    for (int l = 0, i = 0; l < r->layers; l++)
        for (int k = 0; k < MT_GEMM_KINDS; k++, i++)
            order[i] = (cand){l, k, r->drop[l][k] / r->cost[l][k]};
    qsort(order, (size_t)n, sizeof *order, by_ratio_desc);
    double low_measure;
    mt_status st = embed_as(s, s->o->low, NULL, 0, NULL, &low_measure, err);
    if (st != MT_OK)
        return st;
    int up = predicted_up(s, order, n, s->high_measure - low_measure);
    for (;; up++) {
        if ((st = mix_of(s, order, up, r->mix, sizeof r->mix, err)) != MT_OK ||
            (st = embed_as(s, s->o->high, r->mix, 1, NULL, &r->mixed_cos, err)) != MT_OK)
            return st;
        say(s, "  %d of %d GEMMs %s: held-back cosine %.6f (budget %.6f): %s", up, n,
            mt_precision_name(s->o->high), r->mixed_cos, s->o->budget_cos, r->mix);
        if (r->mixed_cos >= s->o->budget_cos || up == n)
            break;
    }
    r->high_share = 0;
    for (int i = 0; i < up; i++)
        r->high_share += r->cost[order[i].l][order[i].k];
    return MT_OK;
}

/* The texts: the caller's or the built-in calibration sentences, split
 * even/odd into the measuring and the checking set. */
static mt_status split_texts(search *s, mt_err *err)
{
    const char *const *t = s->o->texts ? s->o->texts : mt_calib_sentences;
    int n = s->o->texts ? s->o->ntexts : mt_calib_sentences_n;
    if (n < 4)
        return mt_fail(err, MT_EINVAL, "the mix search needs at least 4 texts (got %d)", n);
    for (int w = 0; w < 2; w++) {
        s->set[w] = malloc(sizeof(char *) * (size_t)(n / 2 + 1));
        if (!s->set[w])
            return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++)
        s->set[i & 1][s->nset[i & 1]++] = t[i];
    return MT_OK;
}

static mt_status run(search *s, mt_err *err)
{
    const mt_mix_search_opts *o = s->o;
    mt_status st = split_texts(s, err);
    for (int w = 0; w < 2 && st == MT_OK; w++)
        st = embed_as(s, MT_PREC_FP32, NULL, w, &s->ref[w], NULL, err);
    if (st != MT_OK)
        return st;
    const mt_model_info info = s->info;
    if (info.layers < 1 || info.layers > MT_MIX_MAX_LAYERS)
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %d layers: the mix search handles 1..%d",
                       s->dir, info.layers, MT_MIX_MAX_LAYERS);
    s->res->layers = info.layers;
    costs(s, &info);
    if ((st = embed_as(s, o->high, NULL, 1, NULL, &s->res->high_cos, err)) != MT_OK ||
        (st = embed_as(s, o->low, NULL, 1, NULL, &s->res->low_cos, err)) != MT_OK)
        return st;
    say(s, "held-back cosine to fp32: all %s %.6f, all %s %.6f; budget %.6f",
        mt_precision_name(o->high), s->res->high_cos, mt_precision_name(o->low),
        s->res->low_cos, o->budget_cos);
    if (s->res->high_cos < o->budget_cos)
        return mt_fail(err, MT_EINVAL, "budget cosine %.6f is above what all-%s reaches (%.6f)",
                       o->budget_cos, mt_precision_name(o->high), s->res->high_cos);
    if (s->res->low_cos >= o->budget_cos) {
        s->res->mixed_cos = s->res->low_cos;
        snprintf(s->res->mix, sizeof s->res->mix, "*=%s", mt_precision_name(o->low));
        return MT_OK;
    }
    if ((st = sensitivities(s, err)) != MT_OK)
        return st;
    return choose(s, err);
}

mt_status mt_mix_resolve(const char *dir, mt_backend *be, mt_mix_load_fn load,
                         const mt_model_opts *o,
                         const char *mix, double budget_cos, mt_precision high,
                         void (*progress)(void *arg, const char *line), void *arg,
                         char *out, size_t cap, mt_err *err)
{
    if (!mix || strcmp(mix, "auto")) {
        snprintf(out, cap, "%s", mix ? mix : "");
        return MT_OK;
    }
    if ((unsigned)high >= MT_PREC_COUNT)
        high = be->ops->mix_high; /* the backend's "default" */
    mt_mix_search_opts so = {.load = load,
                             .low = o->precision,
                             .high = high,
                             .budget_cos = budget_cos, .calib = o->calib,
                             .max_seq_len = o->max_seq_len, .progress = progress,
                             .progress_arg = arg};
    mt_mix_search_result *r = malloc(sizeof *r);
    if (!r)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    mt_status st = mt_mix_search(dir, be, &so, r, err);
    if (st == MT_OK)
        snprintf(out, cap, "%s", r->mix);
    free(r);
    return st != MT_OK ? mt_prefix(err, st, "mix \"auto\": ") : MT_OK;
}

mt_status mt_mix_search(const char *dir, mt_backend *be, const mt_mix_search_opts *o,
                        mt_mix_search_result *res, mt_err *err)
{
    memset(res, 0, sizeof *res);
    if (!o->load)
        return mt_fail(err, MT_EINVAL, "the mix search needs a model loader (mt_model_load)");
    if (!(o->budget_cos > 0 && o->budget_cos <= 1))
        return mt_fail(err, MT_EINVAL, "budget cosine %g is not in (0, 1]", o->budget_cos);
    if (!mt_prec(o->low)->has_scales || o->high == o->low ||
        (mt_prec(o->high)->has_scales && mt_prec(o->high)->group == 0))
        return mt_fail(err, MT_EINVAL, "the mix search needs an 8-bit low precision and a "
                       "higher one: 16/32-bit or int8g (got %s and %s)",
                       mt_precision_name(o->low), mt_precision_name(o->high));
    search s = {.dir = dir, .be = be, .o = o, .res = res};
    mt_status st = run(&s, err);
    for (int w = 0; w < 2; w++) {
        free(s.set[w]);
        free(s.ref[w]);
    }
    return st;
}
