/* eval.c: mantissa eval: the STS-B test split's Spearman correlation (x100)
 * between cosine similarity and the human scores, for one variant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/metrics.h"

/* cos[i] for every pair, embedding in batches; false after printing why. */
static bool pair_cosines(mt_model *m, int h, const mt_sts *sts, double *cos)
{
    enum { BATCH = 32 };
    float *e1 = malloc(sizeof(float) * BATCH * (size_t)h), *e2 = malloc(sizeof(float) * BATCH * (size_t)h);
    size_t l1[BATCH], l2[BATCH];
    mt_err err;
    bool ok = e1 && e2;
    for (size_t i = 0; ok && i < sts->n; i += BATCH) {
        int nb = (int)(sts->n - i < BATCH ? sts->n - i : BATCH);
        for (int k = 0; k < nb; k++) {
            l1[k] = strlen(sts->s1[i + k]);
            l2[k] = strlen(sts->s2[i + k]);
        }
        if (mt_model_embed_texts(m, (const char *const *)sts->s1 + i, l1, nb, e1, NULL, &err) ||
            mt_model_embed_texts(m, (const char *const *)sts->s2 + i, l2, nb, e2, NULL, &err)) {
            fprintf(stderr, "mantissa: %s\n", err.msg);
            ok = false;
        }
        for (int k = 0; k < nb && ok; k++)
            cos[i + k] = mt_cosine(e1 + (size_t)k * h, e2 + (size_t)k * h, h);
    }
    free(e1);
    free(e2);
    return ok;
}

int cmd_eval(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa eval [--config FILE] --stsb FILE [--model NAME[@VARIANT]]\n"
        "STS-B Spearman (x100) of the model on the STS Benchmark test file (sts-test.csv).\n";
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    if (!o.stsb) {
        fprintf(stderr, "mantissa eval: --stsb FILE is required\n");
        return 2;
    }
    mt_sts sts;
    mt_err err;
    if (mt_sts_load(o.stsb, &sts, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return 1;
    }
    cfg_config *cfg;
    srv_models *s = cmd_load(&o, &cfg);
    srv_model *m;
    srv_variant *v = s ? cmd_pick(s, o.model, &m) : NULL;
    double *cos = malloc(sizeof(double) * (sts.n ? sts.n : 1));
    double t0 = cmd_now();
    int rc = v && cos && pair_cosines(v->model, v->hidden, &sts, cos) ? 0 : 1;
    if (!rc)
        printf("STS-B test Spearman x100: %.2f  (%s@%s, %zu pairs, %.1f s)\n",
               mt_spearman(cos, sts.score, sts.n) * 100, m->name, v->cfg.name, sts.n,
               cmd_now() - t0);
    free(cos);
    mt_sts_free(&sts);
    if (s) {
        srv_models_free(s);
        cfg_free(cfg);
    }
    return rc;
}
