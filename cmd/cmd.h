/* cmd.h: the subcommands of the mantissa binary (one file each in cmd/)
 * and what they share: one option parser, the model and variant a
 * --model spec names, and a clock. Only cmd/ prints to stdout or exits. */
#ifndef MT_CMD_CMD_H
#define MT_CMD_CMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/model.h"
#include "engine/quant/quant.h"
#include "server/core/config.h"
#include "server/core/models.h"

/* Every option of every subcommand (each reads those it documents). */
typedef struct {
    const char *config, *listen, *model, *stsb, *ids, *batches, *out, *json, *svg;
    const char *high;  /* quantize --auto: the precision of the sensitive GEMMs */
    const char *make_ids; /* bench --make-ids: a text file to tokenize */
    const char *log_format; /* serve --log-format: json or text */
    const char *grpc_listen; /* serve --grpc-listen: ADDR:PORT or off */
    double seconds;
    double budget_cos; /* quantize --auto; 0: the variant's budget_cos */
    int batch;
    int jsonl;
    int skip_blank;    /* embed --skip-blank */
    int autom;         /* quantize --auto */
    int levels;        /* cpu --levels */
    int measure;       /* cpu --measure */
} cmd_opts;

/* Parses argv (argv[0] is the subcommand) into o with the defaults; prints
 * usage on --help (and exits 0) or on a bad option (and returns -1). */
int cmd_parse(int argc, char **argv, cmd_opts *o, const char *usage);

/* Reads the config (--config) and builds only the model and variant that
 * --model names ("name[@variant]"; none: the first model, its first
 * variant), printing what it built; on failure prints why and returns NULL
 * with *cfg NULL. The caller frees both. */
srv_models *cmd_load(const cmd_opts *o, cfg_config **cfg);

/* The build --model names in a loaded server ("name[@variant]"; NULL: the
 * first model and its first variant), borrowed from its slot (the tools
 * swap nothing). Prints why and returns NULL when there is none. */
srv_variant *cmd_pick(srv_models *s, const char *spec, srv_model **m);

/* The model of the config named by spec ("name" or "name@variant"; NULL:
 * the first), and the variant when one is named; prints why and returns
 * NULL when there is none. */
const cfg_model *cmd_find(const cfg_config *cfg, const char *spec, const cfg_variant **v);

/* A variant's calibration settings. */
mt_calib_opts cmd_calib(const cfg_variant *v);

/* Monotonic seconds. */
double cmd_now(void);

/* mantissa cpu --measure (cmd/cpu_measure.c): each precision's speed
 * against FP32 at batch 1 and 32 on the probe texts, its resident memory
 * and its drift, for the model folder --model on be. */
int cmd_cpu_measure(const cmd_opts *o, mt_backend *be, double seconds);

int cmd_serve(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_cpu(int argc, char **argv);
int cmd_options(int argc, char **argv);

/* The runtime options table (engine/options.h): text for --help, or the
 * README's Markdown table (cmd/options.c). */
void cmd_options_print(FILE *f, int markdown);

#endif
