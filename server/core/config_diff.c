/* config_diff.c: comparing and copying configured models and variants,
 * what the hot-switch's diff (server/core/apply.c) asks of a config (see
 * config.h). Parsing and validation are in config.c.
 */
#include "server/core/config.h"

#include <stdlib.h>
#include <string.h>

#include "engine/precision.h"

mt_precision cfg_variant_mix_high(const cfg_variant *v)
{
    mt_precision p;
    return mt_precision_parse(v->mix_high, &p) == 0 ? p : MT_PREC_COUNT;
}

bool cfg_variant_same_build(const cfg_variant *a, const cfg_variant *b)
{
    return a->precision == b->precision && !strcmp(a->calibration, b->calibration) &&
           a->percentile == b->percentile && !strcmp(a->weights, b->weights) &&
           !strcmp(a->mix, b->mix) && a->budget_cos == b->budget_cos &&
           !strcmp(a->mix_high, b->mix_high) &&
           !strcmp(a->gate_probes, b->gate_probes) && a->gate_min_cosine == b->gate_min_cosine &&
           a->gate_max_p99_ratio == b->gate_max_p99_ratio && a->measure == b->measure;
}

bool cfg_model_same_base(const cfg_model *a, const cfg_model *b)
{
    return !strcmp(a->path, b->path) && a->device == b->device &&
           a->max_seq_len == b->max_seq_len && !strcmp(a->prompt_name, b->prompt_name) &&
           a->matryoshka_min_dim == b->matryoshka_min_dim;
}

const cfg_variant *cfg_find_variant(const cfg_model *m, const char *name)
{
    for (int k = 0; k < m->nvariants; k++)
        if (!strcmp(m->variants[k].name, name))
            return &m->variants[k];
    return NULL;
}

mt_status cfg_model_copy(const cfg_model *m, cfg_model *out, mt_err *err)
{
    *out = *m;
    out->path = strdup(m->path);
    out->variants = malloc(sizeof *out->variants * (size_t)(m->nvariants ? m->nvariants : 1));
    if (!out->path || !out->variants) {
        cfg_model_clear(out);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    memcpy(out->variants, m->variants, sizeof *out->variants * (size_t)m->nvariants);
    return MT_OK;
}

void cfg_model_clear(cfg_model *m)
{
    free(m->path);
    free(m->variants);
    m->path = NULL;
    m->variants = NULL;
    m->nvariants = 0;
}
