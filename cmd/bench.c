/* bench.c: mantissa bench: the engine's throughput on given token ids, per
 * batch size (the median of timed runs after a warm-up, engine/speed.c),
 * as one JSON object on stdout, in the shape bench/peer_ort.py prints for
 * the peer; and --make-ids, which writes such ids from a text file. */
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/jsonfile.h"
#include "engine/model.h"
#include "engine/registry.h"
#include "engine/speed.h"

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

/* The batch sizes of list (comma-separated) into out, those over nseq
 * (the lists of the ids file) replaced by nseq with a note, without
 * repeats; 0 after printing why. */
static int batch_sizes(const char *list, int nseq, const char *ids_path, int *out, int cap)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    int n = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long b = strtol(tok, &end, 10);
        if (*end || end == tok || b < 1 || b > 1 << 20 || n == cap) {
            fprintf(stderr, "mantissa bench: --batch: \"%s\" is not a batch size (1 or more; "
                    "at most %d of them)\n", tok, cap);
            return 0;
        }
        if (b > nseq) {
            fprintf(stderr, "mantissa bench: batch %ld is more than the %d token-id lists of %s: "
                    "batch %d instead\n", b, nseq, ids_path, nseq);
            b = nseq;
        }
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen |= out[i] == b;
        if (!seen)
            out[n++] = (int)b;
    }
    if (!n)
        fprintf(stderr, "mantissa bench: --batch: no batch size in \"%s\"\n", list);
    return n;
}

/* Nothing but spaces, tabs and a CR. */
static bool blank(const char *s)
{
    return s[strspn(s, " \t\r")] == 0;
}

/* Each non-blank line of in (text_path) as a list of the model's token ids,
 * one per line of out: the JSON --ids reads. False after printing why. */
static bool write_ids(const mt_model *m, FILE *in, const char *text_path, FILE *out,
                      const char *out_name)
{
    const int cap = m->info.max_seq_len;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    char *line = NULL;
    size_t lcap = 0, tokens = 0;
    ssize_t len;
    int lineno = 0, lists = 0, blanks = 0, longest = 0, nt;
    mt_err err;
    bool ok = ids != NULL;
    fputs("[", out);
    while (ok && (len = getline(&line, &lcap, in)) >= 0) {
        lineno++;
        if (len && line[len - 1] == '\n')
            line[--len] = 0;
        if (blank(line)) {
            blanks++;
            continue;
        }
        if (mt_model_tokenize(m, line, (size_t)len, ids, cap, &nt, NULL, &err) != MT_OK) {
            fprintf(stderr, "mantissa bench: %s line %d: %s\n", text_path, lineno, err.msg);
            ok = false;
            break;
        }
        fprintf(out, "%s\n[", lists++ ? "," : "");
        for (int k = 0; k < nt; k++)
            fprintf(out, "%s%d", k ? "," : "", (int)ids[k]);
        fputc(']', out);
        tokens += (size_t)nt;
        longest = nt > longest ? nt : longest;
    }
    fputs("\n]\n", out);
    if (ok && !lists) {
        fprintf(stderr, "mantissa bench: %s has no text (one text a line)\n", text_path);
        ok = false;
    }
    if (ok)
        fprintf(stderr, "mantissa bench: wrote %d token-id lists (%zu tokens, %d at most; cut at "
                "%d) from %s to %s", lists, tokens, longest, cap, text_path, out_name);
    if (ok && blanks)
        fprintf(stderr, "; %d blank line%s skipped", blanks, blanks == 1 ? "" : "s");
    if (ok)
        fputc('\n', stderr);
    free(line);
    free(ids);
    return ok;
}

/* --make-ids: the lines of a text file tokenized by the --model's
 * tokenizer (its FP32 build on the CPU: the ids do not depend on the
 * precision), to --out or stdout. */
static int make_ids(const cmd_opts *o)
{
    cfg_config *cfg;
    mt_err err;
    if (cfg_load(o->config, &cfg, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return 1;
    }
    const cfg_variant *v;
    const cfg_model *cm = cmd_find(cfg, o->model, &v);
    FILE *in = cm ? fopen(o->make_ids, "r") : NULL, *out = NULL;
    mt_backend *be = NULL;
    mt_model *m = NULL;
    mt_model_opts lo = {.precision = MT_PREC_FP32, .max_seq_len = cm ? cm->max_seq_len : 0};
    int rc = 1;
    if (cm && !in)
        fprintf(stderr, "mantissa bench: --make-ids: %s: %s\n", o->make_ids, strerror(errno));
    else if (in && (mt_backend_reg_host()->create(0, 0, &be, &err) != MT_OK ||
                    mt_model_load(cm->path, be, &lo, &m, &err) != MT_OK))
        fprintf(stderr, "mantissa: model %s: %s\n", cm->name, err.msg);
    else if (m && !(out = o->out ? fopen(o->out, "w") : stdout))
        fprintf(stderr, "mantissa bench: --out: %s: %s\n", o->out, strerror(errno));
    else if (out && write_ids(m, in, o->make_ids, out, o->out ? o->out : "stdout"))
        rc = 0;
    if (out && out != stdout && fclose(out) != 0 && rc == 0) {
        fprintf(stderr, "mantissa bench: --out: %s: %s\n", o->out, strerror(errno));
        rc = 1;
    }
    if (in)
        fclose(in);
    if (m)
        mt_model_free(m);
    mt_backend_destroy(be);
    cfg_free(cfg);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa bench [--config FILE] --ids FILE [--model NAME[@VARIANT]]\n"
        "                      [--batch 1,32] [--seconds S]\n"
        "       mantissa bench [--config FILE] [--model NAME] --make-ids TEXTS [--out FILE]\n"
        "Engine throughput (sentences/s = batch / median run time) on the token-id lists\n"
        "of FILE (a JSON list of lists, [CLS] ... [SEP]), per batch size; a batch larger\n"
        "than the file's lists runs as one of all of them (with a note).\n"
        "--make-ids writes such a file: each non-blank line of TEXTS tokenized by the\n"
        "model's tokenizer (cut at its max_seq_len), to --out (default stdout).\n";
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    if (o.make_ids)
        return make_ids(&o);
    if (!o.ids) {
        fprintf(stderr, "mantissa bench: --ids FILE is required (--make-ids TEXTS makes one)\n");
        return 2;
    }
    int32_t *ids = NULL, *off = NULL;
    int nseq, batches[64], nb = 0;
    if (read_ids(o.ids, &ids, &off, &nseq) == 0 &&
        !(nb = batch_sizes(o.batches, nseq, o.ids, batches, 64))) {
        free(ids);
        free(off);
        return 2;
    }
    cfg_config *cfg;
    srv_models *s = nb ? cmd_load(&o, &cfg) : NULL;
    srv_model *m = NULL;
    srv_variant *v = s ? cmd_pick(s, o.model, &m) : NULL;
    int rc = v ? 0 : 1;
    printf("{\"engine\":\"mantissa\",\"model\":\"%s\",\"variant\":\"%s\",\"precision\":\"%s\","
           "\"threads\":%d,\"results\":[",
           m ? m->name : "", v ? v->cfg.name : "", v ? mt_precision_name(v->cfg.precision) : "",
           v ? v->be->threads : 0);
    for (int i = 0; i < nb && !rc; i++) {
        size_t runs = 0;
        double med = 0;
        mt_err err;
        if (mt_model_median_run(v->model, ids, off, nseq, batches[i], mt_timing_for(o.seconds),
                                &med, &runs, &err) != MT_OK) {
            fprintf(stderr, "mantissa bench: %s\n", err.msg);
            rc = 1;
        } else {
            printf("%s{\"batch\":%d,\"runs\":%zu,\"median_s\":%.6f,\"sentences_per_s\":%.2f}",
                   i ? "," : "", batches[i], runs, med, batches[i] / med);
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
