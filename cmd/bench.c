/* bench.c: mantissa bench: the engine's throughput on given token ids, per
 * batch size (median of timed runs after a warm-up), as one JSON object on
 * stdout, in the shape bench/peer_ort.py prints for the peer. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/jsonfile.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Reads a JSON list of token-id lists into packed ids + offsets. */
static int read_ids(const char *path, int32_t **ids, int32_t **off, int *n)
{
    cJSON *j;
    mt_err err;
    if (mt_json_load(path, &j, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return -1;
    }
    int ns = cJSON_GetArraySize(j);
    size_t total = 0;
    const cJSON *s, *t;
    cJSON_ArrayForEach(s, j) total += (size_t)cJSON_GetArraySize(s);
    *ids = malloc(sizeof(int32_t) * (total ? total : 1));
    *off = malloc(sizeof(int32_t) * ((size_t)ns + 1));
    if (!cJSON_IsArray(j) || ns == 0 || !*ids || !*off) {
        fprintf(stderr, "mantissa: %s: expected a non-empty JSON list of lists of ids\n", path);
        cJSON_Delete(j);
        return -1;
    }
    int i = 0;
    size_t k = 0;
    (*off)[0] = 0;
    cJSON_ArrayForEach(s, j)
    {
        cJSON_ArrayForEach(t, s)(*ids)[k++] = (int32_t)t->valuedouble;
        (*off)[++i] = (int32_t)k;
    }
    *n = ns;
    cJSON_Delete(j);
    return 0;
}

/* Runs batches of b sequences (3 warm-up runs, then until `seconds` have
 * passed, at least 5) and gives the median run time; -1 on failure. */
static double median_run(mt_model *m, const int32_t *ids, const int32_t *off, int nseq, int b,
                         double seconds, size_t *runs)
{
    float *out = malloc(sizeof(float) * (size_t)b * m->info.hidden);
    int32_t *boff = malloc(sizeof(int32_t) * ((size_t)b + 1));
    size_t cap = 1024, nt = 0;
    double *times = malloc(sizeof(double) * cap), el = 0, med = -1;
    mt_err err;
    bool ok = out && boff && times;
    for (int it = -3; ok && (it < 5 || el < seconds); it++) {
        int start = (it < 0 ? 0 : it * b) % (nseq - b + 1);
        for (int k = 0; k <= b; k++)
            boff[k] = off[start + k] - off[start];
        double t0 = cmd_now();
        if (mt_model_forward(m, ids + off[start], boff, b, out, NULL, &err) != MT_OK) {
            fprintf(stderr, "mantissa bench: %s\n", err.msg);
            ok = false;
        }
        double dt = cmd_now() - t0;
        if (it >= 0 && nt == cap) {
            double *more = realloc(times, sizeof(double) * (cap *= 2));
            ok = ok && more;
            times = more ? more : times;
        }
        if (it >= 0 && ok) {
            times[nt++] = dt;
            el += dt;
        }
    }
    if (ok) {
        qsort(times, nt, sizeof *times, cmp_double);
        med = nt % 2 ? times[nt / 2] : (times[nt / 2 - 1] + times[nt / 2]) / 2;
        *runs = nt;
    }
    free(times);
    free(out);
    free(boff);
    return med;
}

int cmd_bench(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa bench [--config FILE] --ids FILE [--model NAME[@VARIANT]]\n"
        "                      [--batch 1,32] [--seconds S]\n"
        "Engine throughput (sentences/s = batch / median run time) on the token-id lists\n"
        "of FILE (a JSON list of lists, [CLS] ... [SEP]), per batch size.\n";
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    if (!o.ids) {
        fprintf(stderr, "mantissa bench: --ids FILE is required\n");
        return 2;
    }
    int32_t *ids = NULL, *off = NULL;
    int nseq;
    cfg_config *cfg;
    srv_models *s = read_ids(o.ids, &ids, &off, &nseq) ? NULL : cmd_load(&o, &cfg);
    srv_model *m = NULL;
    srv_variant *v = s ? cmd_pick(s, o.model, &m) : NULL;
    int rc = v ? 0 : 1;
    printf("{\"engine\":\"mantissa\",\"model\":\"%s\",\"variant\":\"%s\",\"precision\":\"%s\","
           "\"threads\":%d,\"results\":[",
           m ? m->name : "", v ? v->cfg.name : "", v ? mt_precision_name(v->cfg.precision) : "",
           v ? v->be->threads : 0);
    char list[256];
    snprintf(list, sizeof list, "%s", o.batches);
    for (char *save, *tok = strtok_r(list, ",", &save); tok && !rc;
         tok = strtok_r(NULL, ",", &save)) {
        int b = atoi(tok);
        double med;
        size_t runs = 0;
        if (b < 1 || b > nseq) {
            fprintf(stderr, "mantissa bench: batch %s: must be 1..%d (the ids file size)\n", tok,
                    nseq);
            rc = 1;
        } else if ((med = median_run(v->model, ids, off, nseq, b, o.seconds, &runs)) < 0) {
            rc = 1;
        } else {
            printf("%s{\"batch\":%d,\"runs\":%zu,\"median_s\":%.6f,\"sentences_per_s\":%.2f}",
                   tok == list ? "" : ",", b, runs, med, b / med);
        }
    }
    printf("]}\n");
    free(ids);
    free(off);
    if (s) {
        srv_models_free(s);
        cfg_free(cfg);
    }
    return rc;
}
