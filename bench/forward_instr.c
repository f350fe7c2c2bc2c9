/* forward_instr.c: a model's forward, one sentence at a time, for counting
 * its instructions with callgrind (bench/forward_instr_ab.sh), which is
 * repeatable on a shared machine where timings are not: two builds of the
 * same forward compared this way differ only by what they execute.
 *
 *   forward_instr MODEL_DIR [PRECISION] [ROUNDS]
 *
 * Loads MODEL_DIR at PRECISION (fp32) on one CPU thread, then runs ROUNDS
 * (5) times four STS-B sentences, one forward each, and prints the sum of
 * the vectors' first values (so that both builds can be seen to compute
 * the same). Count the forwards alone with callgrind's
 * --toggle-collect=enc_forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/options.h"
#include "engine/precision.h"

int main(int argc, char **argv)
{
    mt_err err;
    mt_backend *be = NULL;
    mt_model *m = NULL;
    if (argc < 2 || mt_options_init(&err) != MT_OK) {
        fprintf(stderr, "usage: forward_instr MODEL_DIR [PRECISION] [ROUNDS]\n");
        return 2;
    }
    mt_model_opts o = {.precision = MT_PREC_FP32, .calib = {MT_CALIB_ABSMAX, 100.0}};
    if (argc > 2 && mt_precision_parse(argv[2], &o.precision) != 0) {
        fprintf(stderr, "forward_instr: unknown precision \"%s\"\n", argv[2]);
        return 2;
    }
    const int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (mt_backend_cpu_create(1, &be, &err) != MT_OK ||
        mt_model_load(argv[1], be, &o, &m, &err) != MT_OK) {
        fprintf(stderr, "forward_instr: %s\n", err.msg);
        return 1;
    }
    static const char *const texts[] = {
        "A girl is styling her hair.", "A group of men play soccer on the beach.",
        "One woman is measuring another woman's ankle.", "A man is cutting up a cucumber."};
    const int h = mt_model_get_info(m)->hidden;
    float *out = malloc(sizeof(float) * (size_t)h);
    double sum = 0;
    for (int r = 0; r < rounds && out; r++)
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            int32_t ids[64], off[2] = {0, 0};
            if (mt_model_tokenize(m, texts[i], strlen(texts[i]), ids, 64, &off[1], NULL, &err) ||
                mt_model_forward(m, ids, off, 1, out, NULL, &err)) {
                fprintf(stderr, "forward_instr: %s\n", err.msg);
                return 1;
            }
            sum += out[0];
        }
    printf("%.9g\n", sum);
    free(out);
    mt_model_free(m);
    mt_backend_destroy(be);
    return 0;
}
