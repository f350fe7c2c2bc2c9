/* compare.c: mantissa compare, the precision report: every variant of a
 * model against FP32 on the STS-B test sentences: resident weight bytes,
 * sentences/s, cosine to FP32 (min, mean), max abs error, STS-B Spearman,
 * top-10 neighbour overlap with FP32; printed, and written as JSON and an
 * SVG chart (speed against drift). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/metrics.h"
#include "engine/quant/mix_search.h"
#include "engine/model.h"
#include "engine/registry.h"

typedef struct {
    char name[CFG_NAME_MAX];
    mt_precision prec;
    char calib[16];
    size_t gemm_bytes;
    int h;
    double load_s, sps, cos_min, cos_mean, max_abs, spearman, nn_overlap;
    float *emb; /* (nsent, h) */
} variant_result;

/* Distinct sentences of the STS-B pairs, and for each pair the indices of
 * its two sentences among them. */
typedef struct {
    char **s;
    size_t *len;
    int n;
    int *i1, *i2;
} sentence_set;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int index_of(char **sorted, int n, const char *s)
{
    char *const *hit = bsearch(&s, sorted, (size_t)n, sizeof *sorted, cmp_str);
    return hit ? (int)(hit - sorted) : -1;
}

static int build_sentences(const mt_sts *sts, sentence_set *ss)
{
    size_t n = 2 * sts->n;
    ss->s = malloc(sizeof(char *) * n);
    ss->len = malloc(sizeof(size_t) * n);
    ss->i1 = malloc(sizeof(int) * sts->n);
    ss->i2 = malloc(sizeof(int) * sts->n);
    if (!ss->s || !ss->len || !ss->i1 || !ss->i2)
        return -1;
    for (size_t i = 0; i < sts->n; i++) {
        ss->s[2 * i] = sts->s1[i];
        ss->s[2 * i + 1] = sts->s2[i];
    }
    qsort(ss->s, n, sizeof *ss->s, cmp_str);
    int u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || strcmp(ss->s[u - 1], ss->s[i]) != 0)
            ss->s[u++] = ss->s[i];
    ss->n = u;
    for (int i = 0; i < u; i++)
        ss->len[i] = strlen(ss->s[i]);
    for (size_t i = 0; i < sts->n; i++) {
        ss->i1[i] = index_of(ss->s, u, sts->s1[i]);
        ss->i2[i] = index_of(ss->s, u, sts->s2[i]);
    }
    return 0;
}

/* Loads one variant, embeds every sentence (timed), and frees the model. */
static int run_variant(const cfg_model *cm, const cfg_variant *v, mt_backend *be,
                       const sentence_set *ss, int batch, variant_result *r)
{
    mt_err err;
    mt_model *m;
    mt_model_opts lo = {.precision = v->precision, .calib = cmd_calib(v),
                         .max_seq_len = cm->max_seq_len, .weights = v->weights};
    char mix[sizeof v->mix];
    if (mt_mix_resolve(cm->path, be, mt_model_load, &lo, v->mix, v->budget_cos,
                       cfg_variant_mix_high(v), NULL, NULL, mix, sizeof mix, &err) != MT_OK) {
        fprintf(stderr, "mantissa: variant %s: %s\n", v->name, err.msg);
        return -1;
    }
    if (!strcmp(v->mix, "auto"))
        fprintf(stderr, "mantissa compare: %s: mix \"auto\" (budget %g) chose \"%s\"\n", v->name,
                v->budget_cos, mix);
    lo.mix = mix;
    snprintf(r->name, sizeof r->name, "%s", v->name);
    r->prec = v->precision;
    snprintf(r->calib, sizeof r->calib, "%s",
             mt_quant_has_scales(v->precision) ? mt_calib_name(lo.calib.method) : "-");
    double t0 = cmd_now();
    if (mt_model_load(cm->path, be, &lo, &m, &err) != MT_OK) {
        fprintf(stderr, "mantissa: variant %s: %s\n", v->name, err.msg);
        return -1;
    }
    r->load_s = cmd_now() - t0;
    r->gemm_bytes = m->info.gemm_bytes;
    int h = r->h = m->info.hidden;
    r->emb = malloc(sizeof(float) * (size_t)ss->n * h);
    if (!r->emb) {
        mt_model_free(m);
        return -1;
    }
    /* one warm-up batch, then the timed pass over every sentence */
    mt_model_embed_texts(m, (const char *const *)ss->s, ss->len, batch < ss->n ? batch : ss->n,
                     r->emb, NULL, &err);
    t0 = cmd_now();
    for (int i = 0; i < ss->n; i += batch) {
        int nb = ss->n - i < batch ? ss->n - i : batch;
        if (mt_model_embed_texts(m, (const char *const *)ss->s + i, ss->len + i, nb,
                             r->emb + (size_t)i * h, NULL, &err) != MT_OK) {
            fprintf(stderr, "mantissa: variant %s: %s\n", v->name, err.msg);
            mt_model_free(m);
            return -1;
        }
    }
    r->sps = ss->n / (cmd_now() - t0);
    mt_model_free(m);
    return 0;
}

static void write_json(FILE *f, const char *model, const sentence_set *ss, size_t pairs,
                       const variant_result *r, int nr, size_t ref_bytes)
{
    fprintf(f, "{\"model\":\"%s\",\"sentences\":%d,\"sts_pairs\":%zu,\"variants\":[", model,
            ss->n, pairs);
    for (int i = 0; i < nr; i++)
        fprintf(f,
                "%s\n {\"name\":\"%s\",\"precision\":\"%s\",\"calibration\":\"%s\","
                "\"gemm_weight_bytes\":%zu,\"bytes_vs_fp32\":%.4f,\"load_s\":%.3f,"
                "\"sentences_per_s\":%.2f,\"cosine_min\":%.8f,\"cosine_mean\":%.8f,"
                "\"max_abs_error\":%.3e,\"stsb_spearman_x100\":%.3f,\"top10_overlap\":%.4f}",
                i ? "," : "", r[i].name, mt_precision_name(r[i].prec), r[i].calib,
                r[i].gemm_bytes, (double)r[i].gemm_bytes / ref_bytes, r[i].load_s, r[i].sps,
                r[i].cos_min, r[i].cos_mean, r[i].max_abs, r[i].spearman, r[i].nn_overlap);
    fprintf(f, "\n]}\n");
}

/* Speed (y) against drift from FP32 (x = 1 - mean cosine, log scale), one
 * labelled point per variant: a chart a person can open in a browser. */
static void write_svg(FILE *f, const char *model, const variant_result *r, int nr)
{
    const double W = 720, H = 440, L = 80, R = 30, T = 50, B = 60;
    double ymax = 0;
    for (int i = 0; i < nr; i++)
        ymax = r[i].sps > ymax ? r[i].sps : ymax;
    ymax = ymax > 0 ? ymax * 1.15 : 1;
    const double xlo = -9, xhi = -1; /* log10(1 - cosine) */
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%g\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">%s: speed vs drift "
               "from FP32, per variant</text>\n", W / 2, model);
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", L, T, L, H - B);
    for (int e = (int)xlo; e <= (int)xhi; e++) {
        double x = L + (e - xlo) / (xhi - xlo) * (W - L - R);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>"
                   "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">1e%d</text>\n",
                x, T, x, H - B, x, H - B + 18, e);
    }
    for (int k = 0; k <= 5; k++) {
        double v = ymax * k / 5, y = H - B - (v / ymax) * (H - T - B);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#eee\"/>"
                   "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.0f</text>\n",
                L, y, W - R, y, L - 6, y + 4, v);
    }
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">drift: 1 - mean cosine to FP32 "
               "(log scale; FP32 itself drawn at the left edge)</text>\n", (L + W - R) / 2, H - 18);
    fprintf(f, "<text x=\"18\" y=\"%g\" text-anchor=\"middle\" transform=\"rotate(-90 18 %g)\">"
               "sentences/s (STS-B sentences, batch 32)</text>\n", (T + H - B) / 2, (T + H - B) / 2);
    for (int i = 0; i < nr; i++) {
        double d = 1 - r[i].cos_mean;
        double lx = d > 0 ? log10(d) : xlo;
        lx = lx < xlo ? xlo : lx > xhi ? xhi : lx;
        double x = L + (lx - xlo) / (xhi - xlo) * (W - L - R);
        double y = H - B - (r[i].sps / ymax) * (H - T - B);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"#2a6fdb\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">%s (%s)</text>\n",
                x, y, x + 9, y - 8, r[i].name, mt_precision_name(r[i].prec));
    }
    fprintf(f, "</svg>\n");
}

/* The FP32 reference first (the config's fp32 variant without a weights
 * file, or one made here into *made), then the model's other variants. */
static int variant_order(const cfg_model *cm, cfg_variant *made, const cfg_variant **order)
{
    *made = (cfg_variant){.name = "fp32-reference", .precision = MT_PREC_FP32, .traffic = 0};
    strcpy(made->calibration, "absmax");
    int nv = 0, ref_i = -1;
    for (int i = 0; i < cm->nvariants; i++)
        if (cm->variants[i].precision == MT_PREC_FP32 && !cm->variants[i].weights[0] && ref_i < 0)
            ref_i = i;
    order[nv++] = ref_i >= 0 ? &cm->variants[ref_i] : made;
    for (int i = 0; i < cm->nvariants; i++)
        if (i != ref_i)
            order[nv++] = &cm->variants[i];
    return nv;
}

/* Each result's drift from res[0] (the FP32 reference) and its STS-B
 * figures; false when out of memory. */
static bool score(variant_result *res, int nr, const sentence_set *ss, const mt_sts *sts)
{
    const int h = res[0].h; /* all variants share the model's width */
    for (int i = 0; i < nr; i++) {
        variant_result *r = &res[i];
        double sum = 0;
        r->cos_min = 1;
        for (int s = 0; s < ss->n; s++) {
            double c = mt_cosine(r->emb + (size_t)s * h, res[0].emb + (size_t)s * h, h);
            sum += c;
            r->cos_min = c < r->cos_min ? c : r->cos_min;
        }
        r->cos_mean = sum / ss->n;
        r->max_abs = mt_max_abs_diff(r->emb, res[0].emb, (size_t)ss->n * h);
        double *cs = malloc(sizeof(double) * sts->n);
        if (!cs)
            return false;
        for (size_t p = 0; p < sts->n; p++)
            cs[p] = mt_cosine(r->emb + (size_t)ss->i1[p] * h, r->emb + (size_t)ss->i2[p] * h, h);
        r->spearman = 100 * mt_spearman(cs, sts->score, sts->n);
        free(cs);
        r->nn_overlap = mt_topk_overlap(r->emb, res[0].emb, ss->n, h, 10);
    }
    return true;
}

/* The report on stdout, and as JSON and SVG files when asked. */
static void report(const cmd_opts *o, const cfg_model *cm, const sentence_set *ss,
                   const mt_sts *sts, const variant_result *res, int nr, int threads)
{
    printf("precision report: %s, %d STS-B test sentences (%zu pairs), batch %d, %d threads\n\n",
           cm->name, ss->n, sts->n, o->batch, threads);
    printf("%-16s %-5s %-10s %10s %6s %9s %11s %11s %9s %8s %7s\n", "variant", "prec", "calib",
           "gemm MiB", "x fp32", "sent/s", "cos min", "cos mean", "max abs", "STS-B", "top10");
    for (int i = 0; i < nr; i++)
        printf("%-16s %-5s %-10s %10.2f %6.3f %9.1f %11.8f %11.8f %9.2e %8.2f %7.4f\n",
               res[i].name, mt_precision_name(res[i].prec), res[i].calib,
               res[i].gemm_bytes / 1048576.0, (double)res[i].gemm_bytes / res[0].gemm_bytes,
               res[i].sps, res[i].cos_min, res[i].cos_mean, res[i].max_abs, res[i].spearman,
               res[i].nn_overlap);
    FILE *f;
    if (o->json && (f = fopen(o->json, "w"))) {
        write_json(f, cm->name, ss, sts->n, res, nr, res[0].gemm_bytes);
        fclose(f);
        fprintf(stderr, "mantissa compare: wrote %s\n", o->json);
    }
    if (o->svg && (f = fopen(o->svg, "w"))) {
        write_svg(f, cm->name, res, nr);
        fclose(f);
        fprintf(stderr, "mantissa compare: wrote %s\n", o->svg);
    }
}

int cmd_compare(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa compare [--config FILE] [--model NAME] [--stsb FILE] [--json FILE]\n"
        "                        [--svg FILE] [--batch N]\n"
        "--config defaults to config/mantissa.json.\n"
        "Runs the STS-B test sentences through every variant of the model and prints,\n"
        "per variant: resident GEMM weight bytes, sentences/s, cosine to FP32 (min, mean),\n"
        "max abs error, STS-B Spearman x100 and top-10 neighbour overlap with FP32.\n"
        "An FP32 reference is loaded when the config has no fp32 variant.\n";
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0 || o.batch < 1)
        return 2;
    if (!o.stsb)
        o.stsb = "../shared/data/stsb/sts-test.csv";
    cfg_config *cfg = NULL;
    mt_err err;
    mt_sts sts = {0};
    sentence_set ss = {0};
    mt_backend *be = NULL;
    variant_result *res = NULL;
    int rc = 1, nr = 0, nv = 0;
    if (cfg_load(o.config, &cfg, &err) != MT_OK || mt_sts_load(o.stsb, &sts, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        goto done;
    }
    const cfg_variant *pinned, *order[65];
    cfg_variant made;
    const cfg_model *cm = cmd_find(cfg, o.model, &pinned);
    if (!cm || build_sentences(&sts, &ss) != 0 ||
        mt_backend_reg_host()->create(0, cfg->engine_threads, &be, &err) != MT_OK)
        goto done;
    nv = variant_order(cm, &made, order);
    if (!(res = calloc((size_t)nv, sizeof *res)))
        goto done;
    fprintf(stderr, "mantissa compare: %d distinct sentences from %zu STS-B pairs, %d variants\n",
            ss.n, sts.n, nv);
    for (int i = 0; i < nv; i++) {
        fprintf(stderr, "mantissa compare: %s (%s) ...\n", order[i]->name,
                mt_precision_name(order[i]->precision));
        /* a variant this backend cannot run is reported and skipped */
        nr += run_variant(cm, order[i], be, &ss, o.batch, &res[nr]) == 0;
    }
    if (nr == 0 || res[0].prec != MT_PREC_FP32) {
        fprintf(stderr, "mantissa compare: the FP32 reference could not be computed\n");
        goto done;
    }
    if (!score(res, nr, &ss, &sts))
        goto done;
    report(&o, cm, &ss, &sts, res, nr, be->threads);
    rc = nr == nv ? 0 : 1;
done:
    for (int i = 0; res && i < nv; i++)
        free(res[i].emb);
    free(res);
    free(ss.s);
    free(ss.len);
    free(ss.i1);
    free(ss.i2);
    mt_sts_free(&sts);
    mt_backend_destroy(be);
    cfg_free(cfg);
    return rc;
}
