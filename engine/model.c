/* model.c: what every model does the same way on top of its table
 * (engine/model.h): texts -> token ids -> one forward; and the load
 * check's pieces: the probe texts embedded, two sets of vectors compared,
 * a model's bounds. */
#include "engine/model.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant/mix.h"
#include "engine/text/probe_text.h"

mt_status mt_model_embed_texts(mt_model *m, const char *const *texts, const size_t *lens, int n,
                               float *out, long *n_tokens, mt_err *err)
{
    const int maxlen = m->info.max_seq_len;
    if (n <= 0)
        return MT_OK;
    if ((size_t)n > (size_t)INT_MAX / (size_t)maxlen)
        return mt_fail(err, MT_ELIMIT, "too many inputs (%d)", n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * maxlen);
    int32_t *off = malloc(sizeof(int32_t) * ((size_t)n + 1));
    mt_status st = MT_OK;
    if (!ids || !off) {
        st = mt_fail(err, MT_ENOMEM, "out of memory tokenizing %d inputs", n);
        goto done;
    }
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        int got = 0;
        st = mt_model_tokenize(m, texts[i], lens ? lens[i] : strlen(texts[i]), ids + off[i],
                               maxlen, &got, NULL, err);
        if (st != MT_OK) {
            mt_prefix(err, st, "input[%d]: ", i);
            goto done;
        }
        off[i + 1] = off[i] + got;
    }
    if (n_tokens)
        *n_tokens = off[n];
    st = mt_model_forward(m, ids, off, n, out, NULL, err);
done:
    free(ids);
    free(off);
    return st;
}

int mt_probe_count(void)
{
    return mt_probe_texts_n;
}

mt_status mt_model_embed_probes(mt_model *m, float *out, mt_err *err)
{
    return mt_model_embed_texts(m, mt_probe_texts, NULL, mt_probe_texts_n, out, NULL, err);
}

mt_drift mt_drift_between(const float *a, const float *b, int n, int dim)
{
    mt_drift d = {n, 1.0, 1.0};
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const float *x = a + (size_t)i * dim, *y = b + (size_t)i * dim;
        double xy = 0, xx = 0, yy = 0;
        for (int j = 0; j < dim; j++) {
            xy += (double)x[j] * y[j];
            xx += (double)x[j] * x[j];
            yy += (double)y[j] * y[j];
        }
        const double c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : 0.0;
        const double cc = isfinite(c) ? c : -1.0; /* a non-finite vector fails any bound */
        sum += cc;
        d.min_cos = cc < d.min_cos ? cc : d.min_cos;
    }
    d.mean_cos = n > 0 ? sum / n : 1.0;
    return d;
}

/* The bound of one precision, made the looser of it and *b. */
static void loosen(mt_drift *b, mt_precision p)
{
    const mt_precision_traits *t = mt_prec(p);
    b->mean_cos = t->check_mean_cos < b->mean_cos ? t->check_mean_cos : b->mean_cos;
    b->min_cos = t->check_min_cos < b->min_cos ? t->check_min_cos : b->min_cos;
}

bool mt_model_drift_bound(const mt_model *m, mt_drift *bound)
{
    mt_drift b = {mt_probe_texts_n, 1.0, 1.0};
    mt_mix mix = {0};
    mt_err err;
    loosen(&b, m->info.precision);
    if (m->info.mix && m->info.mix[0] && mt_mix_parse(m->info.mix, &mix, &err) == MT_OK)
        for (int i = 0; i < mix.n; i++)
            loosen(&b, mix.rule[i].precision);
    *bound = b;
    return b.mean_cos < 1.0 || b.min_cos < 1.0;
}

const char *mt_pooling_name(mt_pooling p)
{
    return p == MT_POOL_CLS ? "cls" : p == MT_POOL_LAST ? "last_token" : "mean";
}

const char *mt_task_name(mt_task t)
{
    return t == MT_TASK_CLASSIFY ? "classify" : "embed";
}

const char *mt_model_prompt(const mt_model_info *info, const char *name)
{
    for (int i = 0; name && i < info->nprompts; i++)
        if (!strcmp(info->prompt_names[i], name))
            return info->prompt_texts[i];
    return NULL;
}
