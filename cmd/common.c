/* common.c: what the subcommands share (cmd.h). */
#include "cmd/cmd.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/main.h"

int cmd_parse(int argc, char **argv, cmd_opts *o, const char *usage)
{
    static const struct option lo[] = {
        {"config", required_argument, 0, 'c'},  {"listen", required_argument, 0, 'l'},
        {"model", required_argument, 0, 'm'},   {"stsb", required_argument, 0, 's'},
        {"ids", required_argument, 0, 'i'},     {"batch", required_argument, 0, 'b'},
        {"seconds", required_argument, 0, 't'}, {"jsonl", no_argument, 0, 'j'},
        {"out", required_argument, 0, 'o'},     {"json", required_argument, 0, 'J'},
        {"svg", required_argument, 0, 'g'},     {"help", no_argument, 0, 'h'},
        {"auto", no_argument, 0, 'a'},          {"budget-cos", required_argument, 0, 'B'},
        {"high", required_argument, 0, 'H'},    {"levels", no_argument, 0, 'L'},
        {"skip-blank", no_argument, 0, 'K'},   {"make-ids", required_argument, 0, 'M'},
        {"log-format", required_argument, 0, 'F'},
        {"grpc-listen", required_argument, 0, 'G'}, {"measure", no_argument, 0, 'E'},
        {0, 0, 0, 0},
    };
    *o = (cmd_opts){.config = "config/mantissa.json", .batches = "1,32", .seconds = 3,
                    .batch = 32, .high = "fp32"};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'c': o->config = optarg; break;
        case 'l': o->listen = optarg; break;
        case 'm': o->model = optarg; break;
        case 's': o->stsb = optarg; break;
        case 'i': o->ids = optarg; break;
        case 'b': o->batches = optarg; o->batch = atoi(optarg); break;
        case 't': o->seconds = atof(optarg); break;
        case 'j': o->jsonl = 1; break;
        case 'o': o->out = optarg; break;
        case 'J': o->json = optarg; break;
        case 'g': o->svg = optarg; break;
        case 'a': o->autom = 1; break;
        case 'B': o->budget_cos = atof(optarg); break;
        case 'H': o->high = optarg; break;
        case 'L': o->levels = 1; break;
        case 'K': o->skip_blank = 1; break;
        case 'M': o->make_ids = optarg; break;
        case 'F': o->log_format = optarg; break;
        case 'G': o->grpc_listen = optarg; break;
        case 'E': o->measure = 1; break;
        case 'h': printf("%s", usage); exit(0);
        default: fprintf(stderr, "%s", usage); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mantissa %s: unexpected argument '%s'\n%s", argv[0], argv[optind], usage);
        return -1;
    }
    return 0;
}

srv_variant *cmd_pick(srv_models *s, const char *spec, srv_model **mo)
{
    char buf[256] = "";
    if (spec)
        snprintf(buf, sizeof buf, "%s", spec);
    char *pin = srv_split_pin(buf);
    srv_model *m = spec ? srv_models_find(s, buf) : srv_models_at(s, 0);
    if (!m) {
        fprintf(stderr, "mantissa: --model: no model \"%s\" in the config\n", buf);
        return NULL;
    }
    *mo = m;
    if (!pin) /* the first variant of the config */
        pin = m->cfg.variants[0].name;
    srv_variant *v = NULL;
    char why[400];
    if (srv_acquire(m, pin, NULL, &v, why, sizeof why) != SRV_OK) {
        fprintf(stderr, "mantissa: --model: %s\n", why);
        return NULL;
    }
    srv_variant_unref(v);
    return v;
}

const cfg_model *cmd_find(const cfg_config *cfg, const char *spec, const cfg_variant **v)
{
    char buf[256] = "";
    *v = NULL;
    if (!spec)
        return &cfg->models[0];
    snprintf(buf, sizeof buf, "%s", spec);
    char *at = strchr(buf, '@');
    if (at)
        *at++ = 0;
    const cfg_model *m = cfg_find_model(cfg, buf);
    if (!m) {
        fprintf(stderr, "mantissa: --model: no model \"%s\" in the config\n", buf);
        return NULL;
    }
    if (at && !(*v = cfg_find_variant(m, at))) {
        fprintf(stderr, "mantissa: --model: model \"%s\" has no variant \"%s\"\n", buf, at);
        return NULL;
    }
    return m;
}

/* Appends name to a ", "-separated list. */
static void list_add(char *list, size_t cap, const char *name)
{
    size_t len = strlen(list);
    snprintf(list + len, cap - len, "%s%s", len ? ", " : "", name);
}

/* Keeps in cfg only the model spec names and its variant (the first when
 * spec names none; spec NULL: the first model), and the reference when
 * that variant's gate is measured against it. False after printing why. */
static bool keep_only(cfg_config *cfg, const char *spec)
{
    char name[256], list[512] = "";
    snprintf(name, sizeof name, "%s", spec ? spec : cfg->models[0].name);
    char *vname = strchr(name, '@');
    if (vname)
        *vname++ = 0;
    const cfg_model *found = cfg_find_model(cfg, name);
    for (int i = 0; !found && i < cfg->nmodels; i++)
        list_add(list, sizeof list, cfg->models[i].name);
    if (!found) {
        fprintf(stderr, "mantissa: --model: no model \"%s\" in %s (it has %s)\n", name,
                cfg->source, list);
        return false;
    }
    cfg_model *m = &cfg->models[found - cfg->models];
    const cfg_variant *v = vname ? cfg_find_variant(m, vname) : &m->variants[0];
    for (int k = 0; !v && k < m->nvariants; k++)
        list_add(list, sizeof list, m->variants[k].name);
    if (!v) {
        fprintf(stderr, "mantissa: --model: model \"%s\" has no variant \"%s\" in %s (it has %s)\n",
                name, vname, cfg->source, list);
        return false;
    }
    const int vi = (int)(v - m->variants), ref = m->reference;
    const bool with_ref = ref >= 0 && ref != vi && v->gate_probes[0];
    cfg_variant keep[2] = {*v, with_ref ? m->variants[ref] : *v};
    memcpy(m->variants, keep, sizeof keep[0] * (with_ref ? 2 : 1));
    m->nvariants = with_ref ? 2 : 1;
    m->reference = ref == vi ? 0 : with_ref ? 1 : -1;
    if (m->reference < 0)
        m->shadow_rate = 0;
    for (int i = 0; i < cfg->nmodels; i++)
        if (&cfg->models[i] != m) {
            free(cfg->models[i].path);
            free(cfg->models[i].variants);
        }
    cfg->models[0] = *m;
    cfg->nmodels = 1;
    return true;
}

srv_models *cmd_load(const cmd_opts *o, cfg_config **cfg)
{
    mt_err err;
    if (cfg_load(o->config, cfg, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        *cfg = NULL;
        return NULL;
    }
    srv_models *s = keep_only(*cfg, o->model) ? mt_load_models(*cfg) : NULL;
    if (!s) {
        cfg_free(*cfg);
        *cfg = NULL;
    }
    return s;
}

mt_calib_opts cmd_calib(const cfg_variant *v)
{
    mt_calib_opts c = {MT_CALIB_ABSMAX, v->percentile};
    mt_calib_parse(v->calibration, &c.method);
    return c;
}

double cmd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
