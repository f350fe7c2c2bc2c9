/* quantize.c: mantissa quantize: writes a variant's weights, quantized as
 * its config says, so that a restart loads them without re-quantizing
 * (variants[].weights). */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/model.h"

int cmd_quantize(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa quantize --config FILE --model NAME@VARIANT --out FILE.safetensors\n"
        "Writes the variant's model with its GEMM weights quantized as the variant's\n"
        "precision and calibration say; set variants[].weights to the file to load it\n"
        "without re-quantizing.\n";
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
    if (m) {
        mt_calib_opts c = cmd_calib(v);
        double t0 = cmd_now();
        if (mt_model_save_quantized(m->path, v->precision, &c, o.out, &err) != MT_OK) {
            fprintf(stderr, "mantissa: %s\n", err.msg);
        } else {
            fprintf(stderr, "mantissa: wrote %s (%s, %s) in %.2f s\n", o.out,
                    mt_precision_name(v->precision), mt_calib_name(c.method), cmd_now() - t0);
            rc = 0;
        }
    }
    cfg_free(cfg);
    return rc;
}
