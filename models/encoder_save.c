/* encoder_save.c: writes an encoder model as a quantized safetensors file
 * (each GEMM weight, named as its architecture row names it, in its
 * precision with its scales and smoothing factors, the mix and calibration
 * in the metadata) that encoder_weights.c loads without re-quantizing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant/quant.h"
#include "engine/registry.h"
#include "models/encoder_internal.h"

/* Layer and GEMM slot (0 qkv, 1 attention output, 2 intermediate, 3
 * output) of an encoder GEMM weight's name under row a's tensor names
 * (with or without the row's prefix); false for other tensors: these are
 * the only tensors the op policy lets take a low precision. */
static bool gemm_slot(const enc_arch *a, const char *name, int *layer, int *g)
{
    const enc_layer_names *nm = &a->layer;
    const struct {
        const char *part;
        int g;
    } slots[] = {{nm->q, 0},     {nm->k, 0},   {nm->v, 0},   {nm->o, 1},
                 {nm->inter, 2}, {nm->out, 3}, {nm->qkv, 0}, {nm->gate, 2}};
    const size_t pl = a->prefix ? strlen(a->prefix) : 0, ll = strlen(a->layers);
    char *end;
    if (pl && !strncmp(name, a->prefix, pl))
        name += pl;
    if (strncmp(name, a->layers, ll) || name[ll] != '.' || name[ll + 1] < '0' ||
        name[ll + 1] > '9')
        return false;
    long l = strtol(name + ll + 1, &end, 10);
    if (*end != '.' || l > 1 << 20)
        return false;
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
        if (!slots[i].part) /* a row without a fused QKV or a gate */
            continue;
        const size_t n = strlen(slots[i].part);
        if (!strncmp(end + 1, slots[i].part, n) && !strcmp(end + 1 + n, ".weight")) {
            *layer = (int)l;
            *g = slots[i].g;
            return true;
        }
    }
    return false;
}

static bool is_gemm_weight(const enc_arch *a, const char *name)
{
    int l, g;
    return gemm_slot(a, name, &l, &g);
}

typedef struct {
    st_tensor t;
    void *owned;
} out_tensor;

static int by_dtype_size_desc(const void *a, const void *b)
{
    const st_tensor *x = &((const out_tensor *)a)->t, *y = &((const out_tensor *)b)->t;
    size_t sx = st_dtype_size(x->dtype), sy = st_dtype_size(y->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The precision tensor `name` is saved in: p, or what the mix gives its
 * (layer, kind). */
static mt_precision save_precision(const enc_arch *a, const char *name, mt_precision p,
                                   const mt_mix *mix)
{
    int l, g;
    return gemm_slot(a, name, &l, &g) ? mt_mix_precision(mix, l, (mt_gemm_kind)g, p) : p;
}

/* What a save builds up: the source, the output tensors and the names
 * and smoothing factors they point into. */
typedef struct {
    const char *dir;
    const enc_arch *arch;
    char path[4096];
    st_file *f;
    mt_precision p;
    const mt_calib_opts *calib;
    mt_mix mix;
    char mixn[1024];   /* the mix's text form for the metadata */
    bool any_int8;
    out_tensor *o;     /* up to 3 per source tensor: codes, scales, smoothing */
    size_t no;
    char (*names)[160], (*snames)[192];
    enc_config cfg;
    int maxk;
    float *stats, *smooth; /* per (layer, gemm): act maxima, then factors */
} saver;

/* INT8 is smoothed as loading smooths it on the CPU backend: calibration
 * maxima, weight column maxima per slot (QKV: the three together), then
 * the factors. */
static mt_status save_smoothing(saver *sv, mt_err *err)
{
    mt_backend *cpu;
    mt_status st;
    if ((st = enc_read_configs(sv->dir, sv->arch, &sv->cfg, err)) != MT_OK ||
        (st = mt_backend_reg_host()->create(0, 0, &cpu, err)) != MT_OK)
        return st;
    st = enc_calibrate(sv->dir, sv->arch, cpu, sv->cfg.max_seq_len, &sv->stats, err);
    mt_backend_destroy(cpu);
    if (st != MT_OK)
        return st;
    const enc_config *c = &sv->cfg;
    sv->maxk = enc_max_k(c);
    if (!(sv->smooth = calloc((size_t)c->layers * GEMMS_PER_LAYER * sv->maxk, sizeof(float))))
        return mt_fail(err, MT_ENOMEM, "out of memory");
    for (size_t i = 0; i < st_count(sv->f); i++) {
        const st_tensor *t = st_get(sv->f, i);
        int l, g;
        if (!gemm_slot(sv->arch, t->name, &l, &g) || l >= c->layers || t->dtype != ST_F32 || t->ndim != 2)
            continue;
        enc_col_absmax(t->data, (int)t->shape[0], (int)t->shape[1],
                        sv->smooth + ((size_t)l * GEMMS_PER_LAYER + g) * sv->maxk);
    }
    for (int l = 0; l < c->layers; l++)
        for (int g = 0; g < GEMMS_PER_LAYER; g++) {
            size_t off = ((size_t)l * GEMMS_PER_LAYER + g) * sv->maxk;
            enc_smooth_finish(sv->stats + off, sv->smooth + off, enc_gemm_k(c, g));
        }
    return MT_OK;
}

/* An int8 weight's smoothing: its factors as a tensor of their own, and
 * *scaled (owned by the caller) the weight with its columns multiplied. */
static mt_status save_smoothed(saver *sv, size_t i, const st_tensor *t, float **scaled,
                               mt_err *err)
{
    int l, g, rows = (int)t->shape[0], cols = (int)t->shape[1];
    if (!gemm_slot(sv->arch, t->name, &l, &g) || l >= sv->cfg.layers)
        return MT_OK;
    const float *s = sv->smooth + ((size_t)l * GEMMS_PER_LAYER + g) * sv->maxk;
    const float *w = t->data;
    if (!(*scaled = malloc(sizeof(float) * (size_t)rows * cols)))
        return mt_fail(err, MT_ENOMEM, "out of memory");
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++)
            (*scaled)[(size_t)r * cols + j] = w[(size_t)r * cols + j] * s[j];
    enc_smooth_name(t->name, sv->snames[i], sizeof sv->snames[i]);
    sv->o[sv->no++].t = (st_tensor){.name = sv->snames[i], .dtype = ST_F32, .ndim = 1,
                                    .shape = {cols}, .data = s,
                                    .nbytes = sizeof(float) * (size_t)cols};
    return MT_OK;
}

/* Source tensor i into the output: as it is, or quantized to the
 * precision its (layer, kind) takes, with its scales and smoothing. */
static mt_status save_tensor(saver *sv, size_t i, mt_err *err)
{
    const st_tensor *t = st_get(sv->f, i);
    const mt_precision tp = save_precision(sv->arch, t->name, sv->p, &sv->mix);
    if (tp == MT_PREC_FP32 || !is_gemm_weight(sv->arch, t->name)) {
        sv->o[sv->no++].t = *t;
        return MT_OK;
    }
    if (t->dtype != ST_F32 || t->ndim != 2)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is not a 2-D F32 weight", sv->path,
                       t->name);
    int rows = (int)t->shape[0], cols = (int)t->shape[1];
    float *scaled = NULL;
    mt_status st = MT_OK;
    if (sv->smooth && mt_prec(tp)->int8_act &&
        (st = save_smoothed(sv, i, t, &scaled, err)) != MT_OK)
        return st;
    void *q = malloc(mt_quant_data_bytes(tp, rows, cols));
    const size_t nsc = mt_quant_scale_count(tp, rows, cols);
    float *sc = nsc ? malloc(sizeof(float) * nsc) : NULL;
    sv->o[sv->no].owned = q;
    if (!q || (mt_prec(tp)->has_scales && !sc))
        st = mt_fail(err, MT_ENOMEM, "out of memory");
    else if ((st = mt_quantize(scaled ? scaled : t->data, rows, cols, tp, sv->calib, q, sc,
                               err)) != MT_OK)
        mt_prefix(err, st, "%s: tensor '%s': ", sv->path, t->name);
    free(scaled);
    if (st != MT_OK) {
        free(sc);
        return st;
    }
    sv->o[sv->no].t = *t;
    sv->o[sv->no].t.dtype = mt_prec(tp)->file_dtype;
    sv->o[sv->no].t.data = q;
    sv->o[sv->no].t.nbytes = mt_quant_data_bytes(tp, rows, cols);
    sv->no++;
    if (sc) {
        enc_scale_name(t->name, sv->names[i], sizeof sv->names[i]);
        sv->o[sv->no].owned = sc;
        const int64_t ng = (int64_t)(nsc / (size_t)rows); /* per group: [rows, groups] */
        sv->o[sv->no].t = (st_tensor){.name = sv->names[i], .dtype = ST_F32,
                                      .ndim = mt_prec(tp)->group ? 2 : 1, .shape = {rows, ng},
                                      .data = sc, .nbytes = sizeof(float) * nsc};
        sv->no++;
    }
    return MT_OK;
}

/* The output file: widest dtypes first (every tensor then starts aligned
 * to its element size), with the metadata loading checks. */
static mt_status save_write(saver *sv, const char *out_path, mt_err *err)
{
    qsort(sv->o, sv->no, sizeof *sv->o, by_dtype_size_desc);
    st_tensor *flat = malloc(sizeof *flat * (sv->no ? sv->no : 1));
    if (!flat)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    char pct[32];
    const mt_calib_opts *calib = sv->calib;
    snprintf(pct, sizeof pct, "%.17g", calib ? calib->percentile : 100.0);
    const char *meta[] = {"mantissa.format", "1",
                          "mantissa.precision", mt_precision_name(sv->p),
                          "mantissa.calibration",
                          mt_prec(sv->p)->has_scales || sv->any_int8 || *sv->mixn
                              ? mt_calib_name(calib ? calib->method : MT_CALIB_ABSMAX) : "none",
                          "mantissa.percentile", pct,
                          "mantissa.source", sv->path,
                          *sv->mixn ? "mantissa.mix" : NULL, sv->mixn,
                          NULL};
    for (size_t i = 0; i < sv->no; i++)
        flat[i] = sv->o[i].t;
    mt_status st = st_write(out_path, flat, sv->no, meta, err);
    free(flat);
    return st;
}

mt_status enc_save_quantized(const char *dir, const enc_arch *a, mt_precision p,
                             const mt_calib_opts *calib, const char *mix_text,
                             const char *out_path, mt_err *err)
{
    saver *sv = calloc(1, sizeof *sv);
    if (!sv)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    *sv = (saver){.dir = dir, .arch = a, .p = p, .calib = calib};
    st_model_path(dir, sv->path, sizeof sv->path);
    mt_status st = mt_mix_parse(mix_text, &sv->mix, err);
    if (st != MT_OK)
        mt_prefix(err, st, "mix: ");
    else if (!mt_mix_format(&sv->mix, sv->mixn, sizeof sv->mixn))
        st = mt_fail(err, MT_ELIMIT, "mix: longer than %zu bytes", sizeof sv->mixn);
    else
        st = st_open(sv->path, &sv->f, err);
    size_t n = sv->f ? st_count(sv->f) : 0;
    if (st == MT_OK) {
        sv->o = calloc(3 * n, sizeof *sv->o);
        sv->names = calloc(n, sizeof *sv->names);
        sv->snames = calloc(n, sizeof *sv->snames);
        if (!sv->o || !sv->names || !sv->snames)
            st = mt_fail(err, MT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; st == MT_OK && i < n; i++)
        sv->any_int8 |= is_gemm_weight(a, st_get(sv->f, i)->name) &&
                        mt_prec(save_precision(a, st_get(sv->f, i)->name, p, &sv->mix))->int8_act;
    if (st == MT_OK && sv->any_int8)
        st = save_smoothing(sv, err);
    for (size_t i = 0; st == MT_OK && i < n; i++)
        st = save_tensor(sv, i, err);
    if (st == MT_OK)
        st = save_write(sv, out_path, err);
    for (size_t i = 0; sv->o && i < 3 * n; i++)
        free(sv->o[i].owned);
    free(sv->o);
    free(sv->names);
    free(sv->snames);
    free(sv->stats);
    free(sv->smooth);
    st_close(sv->f);
    free(sv);
    return st;
}
