/* encoder_save.c: writes an encoder model as a quantized safetensors file
 * (each GEMM weight, named as its architecture row names it, in its
 * precision with its scales and smoothing factors, the mix and calibration
 * in the metadata) that encoder_weights.c loads without re-quantizing.
 * The source is the folder's weights as the loader reads them (one file or
 * shards; F32, F16 or BF16): each GEMM weight is widened to FP32
 * (enc_widen_f32) just before it is quantized, and the output is written a
 * tensor at a time (st_write_fill), so at most one weight's FP32 values
 * and codes are held, never a whole FP32 model. Other tensors (embeddings,
 * norms, biases) are copied as the source has them: BF16 stays BF16, which
 * the loader reads as it reads the folder's. */
#include <limits.h>
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

/* What an output tensor holds of its source tensor: the tensor as it is,
 * a GEMM weight's codes (in its precision; FP32 for a 16-bit weight that
 * stays FP32), their scales, their smoothing factors. The main output
 * (as is, or codes) and its scales and smoothing are a source's 3 slots. */
typedef enum { OUT_AS_IS, OUT_CODES, OUT_SCALES, OUT_SMOOTH } out_role;
#define OUT_SLOT(r) ((r) == OUT_SCALES ? 1 : (r) == OUT_SMOOTH ? 2 : 0)
#define OUT_NONE SIZE_MAX

typedef struct {
    st_tensor t; /* its data NULL: made and handed over while the file is written */
    size_t src;  /* its source tensor */
    out_role role;
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

/* What a save builds up: the source, the output tensors (their shapes,
 * the data made later) and the names and smoothing factors they point
 * into. */
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
    size_t *at;        /* each source tensor's 3 slots: where in o (sorted), or OUT_NONE */
    char (*names)[160], (*snames)[192];
    enc_config cfg;
    int maxk;
    float *stats, *smooth; /* per (layer, gemm): act maxima, then factors */
} saver;

/* Whether GEMM weight `name`, saved in tp, is smoothed (int8 is, as
 * loading smooths it), and where its factors are in sv->smooth (made by
 * save_smoothing, after the plan). */
static bool smoothed(const saver *sv, const char *name, mt_precision tp, size_t *at)
{
    int l, g;
    if (!sv->any_int8 || !mt_prec(tp)->int8_act || !gemm_slot(sv->arch, name, &l, &g) ||
        l >= sv->cfg.layers)
        return false;
    *at = ((size_t)l * GEMMS_PER_LAYER + g) * (size_t)enc_max_k(&sv->cfg);
    return true;
}

/* Each GEMM weight's column maxima, widened one at a time (the pages of
 * the source read dropped after each). */
static mt_status save_col_absmax(saver *sv, mt_err *err)
{
    float *buf = NULL;
    size_t cap = 0;
    mt_status st = MT_OK;
    for (size_t i = 0; st == MT_OK && i < st_count(sv->f); i++) {
        const st_tensor *t = st_get(sv->f, i);
        int l, g;
        if (!gemm_slot(sv->arch, t->name, &l, &g) || l >= sv->cfg.layers ||
            !enc_f32_readable(t->dtype) || t->ndim != 2)
            continue;
        const float *v = t->data;
        const size_t n = (size_t)st_numel(t);
        if (t->dtype != ST_F32) {
            if (n > cap) {
                free(buf);
                if (!(buf = malloc(sizeof(float) * n)))
                    return mt_fail(err, MT_ENOMEM, "out of memory widening '%s'", t->name);
                cap = n;
            }
            if ((st = enc_widen_f32(t, buf, err)) != MT_OK)
                break;
            v = buf;
        }
        enc_col_absmax(v, (int)t->shape[0], (int)t->shape[1],
                       sv->smooth + ((size_t)l * GEMMS_PER_LAYER + g) * sv->maxk);
        st_drop_pages(sv->f);
    }
    free(buf);
    return st;
}

/* INT8 is smoothed as loading smooths it on the CPU backend: calibration
 * maxima (the folder's FP32 forward, streamed a layer at a time), weight
 * column maxima per slot (QKV: the three together), then the factors. */
static mt_status save_smoothing(saver *sv, mt_err *err)
{
    mt_backend *cpu;
    mt_status st;
    if ((st = mt_backend_reg_host()->create(0, 0, &cpu, err)) != MT_OK)
        return st;
    st = enc_calibrate(sv->dir, sv->arch, cpu, sv->cfg.max_seq_len, &sv->stats, err);
    mt_backend_destroy(cpu);
    if (st != MT_OK)
        return st;
    const enc_config *c = &sv->cfg;
    sv->maxk = enc_max_k(c);
    if (!(sv->smooth = calloc((size_t)c->layers * GEMMS_PER_LAYER * sv->maxk, sizeof(float))))
        return mt_fail(err, MT_ENOMEM, "out of memory");
    if ((st = save_col_absmax(sv, err)) != MT_OK)
        return st;
    for (int l = 0; l < c->layers; l++)
        for (int g = 0; g < GEMMS_PER_LAYER; g++) {
            size_t off = ((size_t)l * GEMMS_PER_LAYER + g) * sv->maxk;
            enc_smooth_finish(sv->stats + off, sv->smooth + off, enc_gemm_k(c, g));
        }
    return MT_OK;
}

static void plan_add(saver *sv, size_t src, out_role role, st_tensor t)
{
    t.data = NULL;
    sv->o[sv->no++] = (out_tensor){.t = t, .src = src, .role = role};
}

/* Source tensor i's outputs, their data left for save_one: the tensor as
 * it is, or (a GEMM weight) its codes in the precision its (layer, kind)
 * takes, with their scales and smoothing factors. A GEMM weight must read
 * as FP32 values: a 2-D F32, F16 or BF16 tensor. */
static mt_status save_plan(saver *sv, size_t i, mt_err *err)
{
    const st_tensor *t = st_get(sv->f, i);
    const mt_precision tp = save_precision(sv->arch, t->name, sv->p, &sv->mix);
    if (!is_gemm_weight(sv->arch, t->name) || (tp == MT_PREC_FP32 && t->dtype == ST_F32)) {
        plan_add(sv, i, OUT_AS_IS, *t);
        return MT_OK;
    }
    if (!enc_f32_readable(t->dtype) || t->ndim != 2 || t->shape[0] > INT_MAX ||
        t->shape[1] > INT_MAX)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is %s with %d dims: a GEMM weight is "
                       "quantized from a 2-D F32, F16 or BF16 tensor", sv->path, t->name,
                       st_dtype_name(t->dtype), t->ndim);
    const int rows = (int)t->shape[0], cols = (int)t->shape[1];
    st_tensor c = *t;
    c.dtype = mt_prec(tp)->file_dtype;
    c.nbytes = mt_quant_data_bytes(tp, rows, cols);
    plan_add(sv, i, OUT_CODES, c);
    const size_t nsc = mt_quant_scale_count(tp, rows, cols);
    if (nsc) { /* one per channel: [rows]; per group of K: [rows, groups] */
        enc_scale_name(t->name, sv->names[i], sizeof sv->names[i]);
        plan_add(sv, i, OUT_SCALES,
                 (st_tensor){.name = sv->names[i], .dtype = ST_F32,
                             .ndim = mt_prec(tp)->group ? 2 : 1,
                             .shape = {rows, (int64_t)(nsc / (size_t)rows)},
                             .nbytes = sizeof(float) * nsc});
    }
    size_t sat;
    if (smoothed(sv, t->name, tp, &sat)) {
        enc_smooth_name(t->name, sv->snames[i], sizeof sv->snames[i]);
        plan_add(sv, i, OUT_SMOOTH,
                 (st_tensor){.name = sv->snames[i], .dtype = ST_F32, .ndim = 1, .shape = {cols},
                             .nbytes = sizeof(float) * (size_t)cols});
    }
    return MT_OK;
}

/* A tensor copied as the source has it (a BF16 word table is 297 MiB in
 * Qwen3-0.6B, 1.2 GiB in the 8B), in pieces, the pages read dropped after
 * each: never the whole of it resident. */
static mt_status save_as_is(saver *sv, st_writer *w, size_t j, const st_tensor *t, mt_err *err)
{
    enum { PIECE = 16 << 20 };
    mt_status st = MT_OK;
    for (size_t off = 0; st == MT_OK && off < t->nbytes; off += PIECE) {
        const size_t len = t->nbytes - off < PIECE ? t->nbytes - off : PIECE;
        st = st_writer_put(w, j, (const char *)t->data + off, len, err);
        st_drop_pages(sv->f);
    }
    return st;
}

/* Source tensor i's outputs into the file: copied from the source as it
 * is, or its FP32 values (a 16-bit weight widened now), smoothed (int8)
 * and quantized, with their scales and smoothing factors. */
static mt_status save_one(saver *sv, st_writer *w, size_t i, mt_err *err)
{
    const st_tensor *t = st_get(sv->f, i);
    const size_t *at = sv->at + 3 * i;
    if (sv->o[at[0]].role == OUT_AS_IS)
        return save_as_is(sv, w, at[0], t, err);
    const mt_precision tp = save_precision(sv->arch, t->name, sv->p, &sv->mix);
    const int rows = (int)t->shape[0], cols = (int)t->shape[1];
    const size_t n = (size_t)rows * cols, nsc = mt_quant_scale_count(tp, rows, cols);
    const size_t qbytes = sv->o[at[0]].t.nbytes;
    size_t sat = 0;
    const float *sm = at[2] != OUT_NONE && smoothed(sv, t->name, tp, &sat) ? sv->smooth + sat : NULL;
    const bool copy = t->dtype != ST_F32 || sm; /* widened, or scaled by the smoothing */
    float *v = copy ? malloc(sizeof(float) * (n ? n : 1)) : NULL;
    float *sc = nsc ? malloc(sizeof(float) * nsc) : NULL;
    void *q = malloc(qbytes ? qbytes : 1);
    mt_status st = MT_OK;
    if (!q || (nsc && !sc) || (copy && !v))
        st = mt_fail(err, MT_ENOMEM, "out of memory quantizing '%s'", t->name);
    else if (copy && (st = enc_widen_f32(t, v, err)) != MT_OK)
        mt_prefix(err, st, "%s: ", sv->path);
    for (int r = 0; st == MT_OK && sm && r < rows; r++)
        for (int j = 0; j < cols; j++)
            v[(size_t)r * cols + j] *= sm[j];
    if (st == MT_OK && (st = mt_quantize(copy ? v : t->data, rows, cols, tp, sv->calib, q, sc,
                                         err)) != MT_OK)
        mt_prefix(err, st, "%s: tensor '%s': ", sv->path, t->name);
    free(v);
    if (st == MT_OK)
        st = st_writer_put(w, at[0], q, qbytes, err);
    if (st == MT_OK && nsc)
        st = st_writer_put(w, at[1], sc, sizeof(float) * nsc, err);
    if (st == MT_OK && sm)
        st = st_writer_put(w, at[2], sm, sizeof(float) * (size_t)cols, err);
    free(q);
    free(sc);
    return st;
}

/* The file's data, a source tensor at a time (its pages then dropped from
 * the resident set, as the loader drops them). */
static mt_status save_fill(void *arg, st_writer *w, mt_err *err)
{
    saver *sv = arg;
    mt_status st = MT_OK;
    for (size_t i = 0; st == MT_OK && i < st_count(sv->f); i++) {
        st = save_one(sv, w, i, err);
        st_drop_pages(sv->f);
    }
    return st;
}

/* The output file: widest dtypes first (every tensor then starts aligned
 * to its element size), with the metadata loading checks; the data made
 * as it is written (save_fill). */
static mt_status save_write(saver *sv, const char *out_path, mt_err *err)
{
    qsort(sv->o, sv->no, sizeof *sv->o, by_dtype_size_desc);
    st_tensor *flat = malloc(sizeof *flat * (sv->no ? sv->no : 1));
    if (!flat)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    for (size_t j = 0; j < sv->no; j++) {
        flat[j] = sv->o[j].t;
        sv->at[3 * sv->o[j].src + OUT_SLOT(sv->o[j].role)] = j;
    }
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
    mt_status st = st_write_fill(out_path, flat, sv->no, meta, save_fill, sv, err);
    free(flat);
    return st;
}

/* The source opened, the mix parsed, room for the outputs; with an int8
 * weight, the config the smoothing needs. */
static mt_status save_open(saver *sv, const char *mix_text, mt_err *err)
{
    st_model_path(sv->dir, sv->path, sizeof sv->path);
    mt_status st = mt_mix_parse(mix_text, &sv->mix, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "mix: ");
    if (!mt_mix_format(&sv->mix, sv->mixn, sizeof sv->mixn))
        return mt_fail(err, MT_ELIMIT, "mix: longer than %zu bytes", sizeof sv->mixn);
    if ((st = st_open(sv->path, &sv->f, err)) != MT_OK)
        return st;
    const size_t n = st_count(sv->f);
    sv->o = calloc(3 * n + 1, sizeof *sv->o);
    sv->at = malloc(sizeof *sv->at * (3 * n + 1));
    sv->names = calloc(n + 1, sizeof *sv->names);
    sv->snames = calloc(n + 1, sizeof *sv->snames);
    if (!sv->o || !sv->at || !sv->names || !sv->snames)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    for (size_t i = 0; i < 3 * n; i++)
        sv->at[i] = OUT_NONE;
    for (size_t i = 0; i < n; i++) {
        const char *name = st_get(sv->f, i)->name;
        sv->any_int8 |= is_gemm_weight(sv->arch, name) &&
                        mt_prec(save_precision(sv->arch, name, sv->p, &sv->mix))->int8_act;
    }
    return sv->any_int8 ? enc_read_configs(sv->dir, sv->arch, &sv->cfg, err) : MT_OK;
}

mt_status enc_save_quantized(const char *dir, const enc_arch *a, mt_precision p,
                             const mt_calib_opts *calib, const char *mix_text,
                             const char *out_path, mt_err *err)
{
    saver *sv = calloc(1, sizeof *sv);
    if (!sv)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    *sv = (saver){.dir = dir, .arch = a, .p = p, .calib = calib};
    mt_status st = save_open(sv, mix_text, err);
    /* every tensor checked (and a GEMM weight the save cannot read
     * refused) before the calibration's forward runs */
    for (size_t i = 0; st == MT_OK && i < st_count(sv->f); i++)
        st = save_plan(sv, i, err);
    if (st == MT_OK && sv->any_int8)
        st = save_smoothing(sv, err);
    if (st == MT_OK)
        st = save_write(sv, out_path, err);
    free(sv->o);
    free(sv->at);
    free(sv->names);
    free(sv->snames);
    free(sv->stats);
    free(sv->smooth);
    st_close(sv->f);
    free(sv);
    return st;
}
