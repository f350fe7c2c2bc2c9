/* quantize.c: mantissa quantize: writes a variant's weights, quantized as
 * its config says, so that a restart loads them without re-quantizing
 * (variants[].weights). With --auto it first chooses a per-layer mixed
 * precision under a cosine budget (engine/quant/mix_search.h) and writes that. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "engine/peak_rss.h"
#include "engine/quant/mix_search.h"
#include "engine/registry.h"

static void progress(void *arg, const char *line)
{
    (void)arg;
    fprintf(stderr, "mantissa quantize: %s\n", line);
}

/* --auto: the mix for variant v (its precision the low one), into mix. */
static int search_mix(const cfg_model *m, const cfg_variant *v, const cmd_opts *o, char *mix,
                      size_t cap)
{
    mt_err err;
    mt_mix_search_opts so = {.load = mt_model_load,
                             .low = v->precision,
                             .budget_cos = o->budget_cos > 0 ? o->budget_cos : v->budget_cos,
                             .calib = cmd_calib(v), .max_seq_len = m->max_seq_len,
                             .progress = progress};
    if (mt_precision_parse(o->high, &so.high) != 0) {
        fprintf(stderr, "mantissa quantize: --high: unknown precision \"%s\"\n", o->high);
        return -1;
    }
    mt_backend *be;
    if (mt_backend_reg_host()->create(0, 0, &be, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return -1;
    }
    static mt_mix_search_result r;
    double t0 = cmd_now();
    mt_status st = mt_mix_search(m->path, be, &so, &r, &err);
    mt_backend_destroy(be);
    if (st != MT_OK) {
        fprintf(stderr, "mantissa quantize: --auto: %s\n", err.msg);
        return -1;
    }
    printf("mix: %s\n", r.mix);
    printf("held-back mean cosine to fp32: %.6f (budget %.6f; all %s %.6f, all %s %.6f)\n",
           r.mixed_cos, so.budget_cos, mt_precision_name(so.low), r.low_cos,
           mt_precision_name(so.high), r.high_cos);
    printf("GEMM work left in %s: %.1f%%; %d models loaded in %.1f s\n",
           mt_precision_name(so.high), 100 * r.high_share, r.loads, cmd_now() - t0);
    snprintf(mix, cap, "%s", r.mix);
    return 0;
}

int cmd_quantize(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa quantize [--config FILE] --model NAME@VARIANT --out FILE.safetensors\n"
        "                         [--auto [--budget-cos C] [--high PRECISION]]\n"
        "--config defaults to config/mantissa.json.\n"
        "Writes the variant's model with its GEMM weights quantized as the variant's\n"
        "precision, mix and calibration say; set variants[].weights to the file to load\n"
        "it without re-quantizing.\n"
        "--auto (or a variant with \"mix\": \"auto\") chooses the variant's mix instead: the\n"
        "fewest GEMMs (by work) in the high precision (default fp32), the rest in the\n"
        "variant's, whose mean cosine to FP32 on held-back calibration text is at least C\n"
        "(default: the variant's budget_cos, 0.9995). It prints the mix to put in\n"
        "variants[].mix with the file.\n";
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    if (!o.model || !strchr(o.model, '@') || !o.out) {
        fprintf(stderr, "mantissa quantize: --model NAME@VARIANT and --out FILE are required\n");
        return 2;
    }
    cfg_config *cfg;
    mt_err err;
    if (cfg_load(o.config, &cfg, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return 1;
    }
    const cfg_variant *v;
    const cfg_model *m = cmd_find(cfg, o.model, &v);
    int rc = 1;
    char mix[1024];
    if (m)
        snprintf(mix, sizeof mix, "%s", v->mix);
    /* a variant with mix "auto" is searched as --auto would */
    bool search = m && (o.autom || !strcmp(v->mix, "auto"));
    if (m && (!search || search_mix(m, v, &o, mix, sizeof mix) == 0)) {
        mt_calib_opts c = cmd_calib(v);
        double t0 = cmd_now();
        if (mt_model_save_quantized(m->path, v->precision, &c, mix, o.out, &err) != MT_OK) {
            fprintf(stderr, "mantissa: %s\n", err.msg);
        } else {
            fprintf(stderr, "mantissa: wrote %s (%s%s%s, %s) in %.2f s, peak RSS %.1f MiB\n",
                    o.out, mt_precision_name(v->precision), *mix ? ", mix " : "", mix,
                    mt_calib_name(c.method), cmd_now() - t0, mt_peak_rss_bytes() / 1048576.0);
            rc = 0;
        }
    }
    cfg_free(cfg);
    return rc;
}
