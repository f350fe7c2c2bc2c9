/* encoder_weights.c: the shared encoder's weights read into the backend,
 * under the tensor names of its architecture row (models/arch.h): FP32
 * vectors and tables as they are, each GEMM weight in the precision its
 * variant (and mix) gives it, quantized at load or taken as stored from a
 * file written by encoder_save.c, with int8's activation smoothing; and the
 * checks that a file and a variant agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/numfmt.h"
#include "engine/quant/quant.h"
#include "models/encoder_internal.h"

/* ========================================================================
 * weights
 * ====================================================================== */

const st_tensor *enc_find(const enc_arch *a, const st_file *f, const char *name)
{
    const st_tensor *t = st_find(f, name);
    char alt[256];
    if (!t && a->prefix) {
        snprintf(alt, sizeof alt, "%s%s", a->prefix, name);
        t = st_find(f, alt);
    }
    return t;
}

/* Whether a file tensor of dtype d can be read as FP32 values: F32 as it
 * is, F16 and BF16 (LLM checkpoints) converted exactly. */
bool enc_f32_readable(st_dtype d)
{
    return d == ST_F32 || d == ST_F16 || d == ST_BF16;
}

/* The one widening of a file tensor (F32, F16 or BF16: enc_f32_readable)
 * to FP32 values, into dst (st_numel(t) floats): F32 copied, F16 and BF16
 * converted exactly. The loader's copies and mantissa quantize's (one
 * tensor at a time, encoder_save.c) both come from here. */
mt_status enc_widen_f32(const st_tensor *t, float *dst, mt_err *err)
{
    const size_t n = (size_t)st_numel(t);
    if (!enc_f32_readable(t->dtype))
        return mt_fail(err, MT_EFORMAT, "tensor '%s' is %s, not F32, F16 or BF16", t->name,
                       st_dtype_name(t->dtype));
    if (t->dtype == ST_F32) {
        memcpy(dst, t->data, sizeof(float) * n);
        return MT_OK;
    }
    return nf_decode(t->dtype == ST_BF16 ? NF_BF16 : NF_F16, t->data, dst, n, 1.0f, err);
}

/* t's values as FP32: the file's own F32 data, or an exact FP32 copy of a
 * 16-bit tensor, kept in m->conv until enc_conv_release. */
static mt_status as_f32(enc_model *m, const st_tensor *t, const float **out, mt_err *err)
{
    if (t->dtype == ST_F32) {
        *out = (const float *)t->data;
        return MT_OK;
    }
    const size_t n = (size_t)st_numel(t);
    float *copy = malloc(sizeof(float) * (n ? n : 1));
    if (m->nconv == m->conv_cap) {
        const int cap = m->conv_cap ? 2 * m->conv_cap : 16;
        void **grown = realloc(m->conv, sizeof *m->conv * (size_t)cap);
        if (grown)
            m->conv = grown, m->conv_cap = cap;
    }
    if (!copy || m->nconv == m->conv_cap) {
        free(copy);
        return mt_fail(err, MT_ENOMEM, "out of memory converting tensor '%s' to FP32", t->name);
    }
    mt_status st = enc_widen_f32(t, copy, err);
    if (st != MT_OK) {
        free(copy);
        return st;
    }
    m->conv[m->nconv++] = copy;
    *out = copy;
    return MT_OK;
}

void enc_conv_release(enc_model *m)
{
    for (int i = 0; i < m->nconv; i++)
        free(m->conv[i]);
    m->nconv = 0;
}

/* Finds name (or the row's prefix + name) and checks it is F32 (or F16,
 * BF16) of the given shape (d1 0: a vector). */
static mt_status find_checked(const enc_model *m, const st_file *f, const char *name, int64_t d0,
                              int64_t d1, const st_tensor **out, mt_err *err)
{
    const st_tensor *t = enc_find(m->arch, f, name);
    if (!t)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is missing", st_path(f), name);
    int want_dims = d1 > 0 ? 2 : 1;
    if (!enc_f32_readable(t->dtype) || t->ndim != want_dims || t->shape[0] != d0 ||
        (want_dims == 2 && t->shape[1] != d1))
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s' is %s with %d dims, expected F32 [%lld%s%lld]",
                       st_path(f), name, st_dtype_name(t->dtype), t->ndim, (long long)d0,
                       want_dims == 2 ? "," : "", want_dims == 2 ? (long long)d1 : 0LL);
    *out = t;
    return MT_OK;
}

/* The same, its values as FP32 (F16, BF16 converted). */
mt_status enc_find_f32(enc_model *m, const st_file *f, const char *name, int64_t d0, int64_t d1,
                       const float **out, mt_err *err)
{
    const st_tensor *t;
    mt_status st = find_checked(m, f, name, d0, d1, &t, err);
    return st != MT_OK ? st : as_f32(m, t, out, err);
}

/* The (d0, d1) table name in backend memory as FP32, copied a block of
 * rows at a time (16-bit rows converted per block): never a whole FP32
 * copy of it on the host beside the backend's (a Qwen3 word table is
 * 594 MiB in FP32). */
static mt_status table_to_backend(enc_model *m, const st_file *f, const char *name, int64_t d0,
                                  int64_t d1, float **out, mt_err *err)
{
    enum { BLOCK = 4096 }; /* rows */
    const st_tensor *t;
    mt_status st = find_checked(m, f, name, d0, d1, &t, err);
    if (st != MT_OK)
        return st;
    if (t->dtype == ST_F32)
        return enc_to_backend(m, t->data, (size_t)(d0 * d1), out, err);
    const size_t w = (size_t)d1, bytes = sizeof(float) * w * (size_t)d0;
    const size_t block = (size_t)(d0 < BLOCK ? d0 : BLOCK);
    float *dev = m->be->ops->alloc(m->be, bytes), *host = malloc(sizeof(float) * w * block);
    if (!dev || !host)
        st = mt_fail(err, MT_ENOMEM, "out of %s memory for tensor '%s'",
                     dev ? "host" : m->be->device, name);
    const nf_format fmt = t->dtype == ST_BF16 ? NF_BF16 : NF_F16;
    for (size_t r = 0; st == MT_OK && r < (size_t)d0; r += block) {
        const size_t n = (size_t)d0 - r < block ? (size_t)d0 - r : block;
        const uint16_t *src = (const uint16_t *)t->data + r * w;
        if ((st = nf_decode(fmt, src, host, n * w, 1.0f, err)) == MT_OK)
            st = m->be->ops->upload(m->be, dev + r * w, host, sizeof(float) * n * w, err);
    }
    free(host);
    if (st != MT_OK) {
        if (dev)
            m->be->ops->free(m->be, dev);
        return st;
    }
    m->other_bytes += bytes;
    *out = dev;
    return MT_OK;
}

/* Rows rows[0..n) (each in [0, d0)) of the (d0, d1) table name, as FP32
 * (16-bit rows converted one at a time, exactly), copied into backend
 * memory: the rest of the table is never read or copied. */
static mt_status gather_rows(enc_model *m, const st_file *f, const char *name, int64_t d0,
                             int64_t d1, const int32_t *rows, int n, float **out, mt_err *err)
{
    const st_tensor *t;
    mt_status st = find_checked(m, f, name, d0, d1, &t, err);
    if (st != MT_OK)
        return st;
    const size_t w = (size_t)d1, esz = st_dtype_size(t->dtype);
    float *host = malloc(sizeof(float) * w * (size_t)(n > 0 ? n : 1));
    if (!host)
        return mt_fail(err, MT_ENOMEM, "out of memory gathering rows of '%s'", name);
    for (int i = 0; i < n && st == MT_OK; i++) {
        if (rows[i] < 0 || rows[i] >= d0) {
            st = mt_fail(err, MT_EINVAL, "row %d of tensor '%s' out of range [0, %lld)",
                         rows[i], name, (long long)d0);
            break;
        }
        const char *src = (const char *)t->data + (size_t)rows[i] * w * esz;
        if (t->dtype == ST_F32)
            memcpy(host + (size_t)i * w, src, sizeof(float) * w);
        else
            st = nf_decode(t->dtype == ST_BF16 ? NF_BF16 : NF_F16, src, host + (size_t)i * w, w,
                           1.0f, err);
    }
    if (st == MT_OK)
        st = enc_to_backend(m, host, w * (size_t)n, out, err);
    free(host);
    return st;
}

/* Copies a host FP32 vector/table into backend memory. */
mt_status enc_to_backend(enc_model *m, const float *src, size_t n, float **out, mt_err *err)
{
    size_t bytes = n * sizeof(float);
    float *p = m->be->ops->alloc(m->be, bytes);
    if (!p)
        return mt_fail(err, MT_ENOMEM, "out of %s memory for %zu bytes", m->be->device, bytes);
    mt_status st = m->be->ops->upload(m->be, p, src, bytes, err);
    if (st != MT_OK) {
        m->be->ops->free(m->be, p);
        return st;
    }
    m->other_bytes += bytes;
    *out = p;
    return MT_OK;
}

mt_status enc_load_vec(enc_model *m, const st_file *f, const char *name, int64_t n,
                          float **out, mt_err *err)
{
    const float *src;
    mt_status st = enc_find_f32(m, f, name, n, 0, &src, err);
    return st != MT_OK ? st : enc_to_backend(m, src, (size_t)n, out, err);
}

/* NaN or Inf in a weight is a load error: it would only show up later as
 * NaN embeddings for every request. */
static mt_status check_finite(const st_file *f, const char *name, const float *w, size_t n,
                              mt_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (!(w[i] - w[i] == 0.0f))
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' has a non-finite value at index %zu",
                           st_path(f), name, i);
    return MT_OK;
}

/* "x.weight" -> "x.weight_scale": where a pre-quantized file keeps the
 * per-channel scales of a weight. */
void enc_scale_name(const char *weight, char *out, size_t cap)
{
    snprintf(out, cap, "%s_scale", weight);
}

/* SmoothQuant's migration strength: s_j = max|x_j|^a / max|w_j|^(1-a). */
#define SMOOTH_ALPHA 0.5

/* The smoothing factors of one GEMM input: activation outliers (a few
 * hidden dimensions of BERT are 10-100x the others after LayerNorm) make
 * per-token int8 scales coarse for every other dimension; dividing x by s
 * per column and multiplying W's columns by s moves that range into the
 * weights, which per-channel scales absorb better. */
void enc_col_absmax(const float *w, int n, int k, float *colmax)
{
    for (int r = 0; r < n; r++)
        for (int j = 0; j < k; j++) {
            float a = fabsf(w[(size_t)r * k + j]);
            colmax[j] = a > colmax[j] ? a : colmax[j];
        }
}

/* s from the activation maxima and the weight's column maxima (in place). */
void enc_smooth_finish(const float *act_max, float *s, int k)
{
    for (int j = 0; j < k; j++) {
        double a = act_max[j] > 1e-5f ? act_max[j] : 1e-5, b = s[j] > 1e-5f ? s[j] : 1e-5;
        s[j] = (float)(pow(a, SMOOTH_ALPHA) / pow(b, 1.0 - SMOOTH_ALPHA));
    }
}

static void smooth_factors(const float *act_max, const float *w, int n, int k, float *s)
{
    memset(s, 0, sizeof(float) * (size_t)k);
    enc_col_absmax(w, n, k, s);
    enc_smooth_finish(act_max, s, k);
}

void enc_smooth_name(const char *weight, char *out, size_t cap)
{
    snprintf(out, cap, "%s_input_smooth", weight);
}

typedef struct {
    mt_precision p;
    const void *src[4];   /* each part's codes (or FP32 values) in the file */
    const float *ssrc[4]; /* each part's stored scales (pre-quantized int8/fp8) */
    const void *data;     /* all parts together */
    const float *scales;
    void *packed;         /* owned: the parts packed, or the smoothed FP32 copy */
    float *pscales;       /* owned: the scales packed */
    float *smooth;        /* owned: the smoothing factors, or NULL */
} gemm_src;

/* Finds and checks every part of a GEMM weight (and its stored scales). */
static mt_status gemm_find(enc_model *m, const st_file *f, const char *const *names,
                           const int *rows, int nparts, int k, gemm_src *g, mt_err *err)
{
    const st_dtype want = m->prequant ? mt_prec(g->p)->file_dtype : ST_F32;
    for (int i = 0; i < nparts; i++) {
        const st_tensor *t = enc_find(m->arch, f, names[i]);
        if (!t)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is missing", st_path(f), names[i]);
        const bool dtype_ok = m->prequant ? t->dtype == want : enc_f32_readable(t->dtype);
        if (!dtype_ok || t->ndim != 2 || t->shape[0] != rows[i] || t->shape[1] != k)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' is %s [%lld,%lld], expected %s [%d,%d]",
                           st_path(f), names[i], st_dtype_name(t->dtype),
                           (long long)t->shape[0], t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                           st_dtype_name(want), rows[i], k);
        g->src[i] = t->data;
        if (!m->prequant) {
            const float *v;
            mt_status st = as_f32(m, t, &v, err);
            if (st == MT_OK)
                st = check_finite(f, names[i], v, (size_t)rows[i] * k, err);
            if (st != MT_OK)
                return st;
            g->src[i] = v;
        } else if (!nf_all_finite(mt_prec(g->p)->format, t->data, (size_t)rows[i] * k)) {
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s' holds a NaN or Inf code",
                           st_path(f), names[i]);
        }
        if (m->prequant && mt_prec(g->p)->has_scales) {
            char sn[160];
            enc_scale_name(names[i], sn, sizeof sn);
            const float *sc;
            /* one scale per channel: [rows]; per group of K: [rows, groups] */
            const int64_t ng = mt_prec(g->p)->group ? (int64_t)mt_quant_scale_groups(g->p, k) : 0;
            mt_status st = enc_find_f32(m, f, sn, rows[i], ng, &sc, err);
            if (st != MT_OK)
                return st;
            for (int64_t r = 0; r < rows[i] * (ng ? ng : 1); r++)
                if (!(sc[r] > 0.f) || sc[r] > 3.0e38f)
                    return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': scale %lld is %g, not a "
                                   "positive finite number", st_path(f), sn, (long long)r, (double)sc[r]);
            g->ssrc[i] = sc;
        }
    }
    return MT_OK;
}

/* Packs the parts into one (a single part is used in place). */
static mt_status gemm_pack(enc_model *m, const char *name, const int *rows, int nparts, int n,
                           int k, gemm_src *g, mt_err *err)
{
    g->data = g->src[0];
    g->scales = g->ssrc[0];
    if (nparts == 1)
        return MT_OK;
    const size_t esz = st_dtype_size(m->prequant ? mt_prec(g->p)->file_dtype : ST_F32);
    const bool scaled = m->prequant && mt_prec(g->p)->has_scales;
    const size_t ng = scaled ? mt_quant_scale_groups(g->p, k) : 0;
    g->packed = malloc(esz * (size_t)n * k);
    g->pscales = scaled ? malloc(sizeof(float) * (size_t)n * ng) : NULL;
    if (!g->packed || (scaled && !g->pscales))
        return mt_fail(err, MT_ENOMEM, "out of memory packing '%s'", name);
    size_t off = 0;
    for (int i = 0; i < nparts; i++) {
        memcpy((char *)g->packed + off * k * esz, g->src[i], esz * (size_t)rows[i] * k);
        if (g->pscales)
            memcpy(g->pscales + off * ng, g->ssrc[i], sizeof(float) * (size_t)rows[i] * ng);
        off += (size_t)rows[i];
    }
    g->data = g->packed;
    g->scales = g->pscales;
    return MT_OK;
}

/* The smoothing factors: stored with a pre-quantized weight, or computed
 * for int8 from the calibration maxima (then W's columns are scaled). */
static mt_status gemm_smooth(enc_model *m, const st_file *f, const char *name, int n, int k,
                             const float *act_max, gemm_src *g, mt_err *err)
{
    char smn[192];
    enc_smooth_name(name, smn, sizeof smn);
    if (m->prequant && enc_find(m->arch, f, smn)) {
        const float *fs;
        mt_status st = enc_find_f32(m, f, smn, k, 0, &fs, err);
        if (st != MT_OK)
            return st;
        if (!(g->smooth = malloc(sizeof(float) * (size_t)k)))
            return mt_fail(err, MT_ENOMEM, "out of memory");
        memcpy(g->smooth, fs, sizeof(float) * (size_t)k);
    } else if (!m->prequant && act_max && mt_prec(g->p)->int8_act) {
        g->smooth = malloc(sizeof(float) * (size_t)k);
        float *scaled = malloc(sizeof(float) * (size_t)n * k);
        if (!g->smooth || !scaled) {
            free(scaled);
            return mt_fail(err, MT_ENOMEM, "out of memory smoothing '%s'", name);
        }
        smooth_factors(act_max, g->data, n, k, g->smooth);
        for (int r = 0; r < n; r++)
            for (int j = 0; j < k; j++)
                scaled[(size_t)r * k + j] = ((const float *)g->data)[(size_t)r * k + j] * g->smooth[j];
        free(g->packed);
        g->packed = scaled;
        g->data = scaled;
    }
    if (g->smooth && !m->be->ops->weight_set_input_scale)
        return mt_fail(err, MT_EUNSUPPORTED, "%s: '%s' uses activation smoothing, which the %s "
                       "backend does not support", st_path(f), name, m->be->device);
    return MT_OK;
}

/* Places the weight in the backend (as stored, or quantized now), with
 * the inverse smoothing factors as its input scale. */
static mt_status gemm_place(enc_model *m, int n, int k, const gemm_src *g, mt_weight **out,
                            mt_err *err)
{
    mt_status st = m->prequant
                       ? m->be->ops->weight_upload(m->be, g->p, n, k, g->data, g->scales, out, err)
                       : mt_weight_create(m->be, g->data, n, k, g->p, &m->calib, out, err);
    if (st != MT_OK || !g->smooth)
        return st;
    float *inv = malloc(sizeof(float) * (size_t)k);
    if (!inv) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
    } else {
        for (int j = 0; j < k; j++)
            inv[j] = 1.0f / g->smooth[j];
        st = m->be->ops->weight_set_input_scale(m->be, *out, inv, err);
        free(inv);
    }
    if (st != MT_OK) {
        m->be->ops->weight_destroy(m->be, *out);
        *out = NULL;
    }
    return st;
}

/* Loads one GEMM weight made of nparts tensors stacked along the output
 * dimension (parts of rows[i] x k each; QKV is three parts), and places it
 * in the backend in the precision its variant and mix give its (layer,
 * kind). From an FP32 file it packs then quantizes (per-channel scales do
 * not mix across rows, so packing first is the same as quantizing each
 * part); from a pre-quantized file it packs the stored codes and scales as
 * they are, with no re-quantization. */
static mt_status load_gemm(enc_model *m, const st_file *f, const char *const *names,
                           const int *rows, int nparts, int k, const float *act_max,
                           int layer, mt_gemm_kind kind, mt_weight **out, mt_err *err)
{
    gemm_src g = {.p = mt_op_precision(MT_OP_GEMM_WEIGHT,
                                       mt_mix_precision(&m->mix, layer, kind, m->prec))};
    int n = 0;
    for (int i = 0; i < nparts; i++)
        n += rows[i];
    mt_status st;
    if ((st = gemm_find(m, f, names, rows, nparts, k, &g, err)) == MT_OK &&
        (st = gemm_pack(m, names[0], rows, nparts, n, k, &g, err)) == MT_OK &&
        (st = gemm_smooth(m, f, names[0], n, k, act_max, &g, err)) == MT_OK) {
        st = gemm_place(m, n, k, &g, out, err);
        if (st != MT_OK)
            mt_prefix(err, st, "tensor '%s': ", names[0]);
        else
            m->gemm_bytes += (*out)->bytes;
    }
    free(g.smooth);
    free(g.packed);
    free(g.pscales);
    return st;
}

/* The biases of a GEMM made of nparts tensors (weight names in names,
 * ".weight" at the end), packed like the weight into one backend vector
 * of n; each part's bias is required unless the row makes biases
 * optional, where a missing one is zero and all missing is none (*out NULL). */
static mt_status load_bias(enc_model *m, const st_file *f, char names[][128], const int *rows,
                           int nparts, float **out, mt_err *err)
{
    const float *src[3] = {NULL};
    char bn[3][128];
    int n = 0, found = 0;
    mt_status st;
    for (int i = 0; i < nparts; i++) {
        const size_t len = strlen(names[i]) - strlen(".weight");
        snprintf(bn[i], sizeof bn[i], "%.*s.bias", (int)len, names[i]);
        if (m->arch->kind.optional_bias && !enc_find(m->arch, f, bn[i]))
            continue;
        if ((st = enc_find_f32(m, f, bn[i], rows[i], 0, &src[i], err)))
            return st;
        found++;
    }
    for (int i = 0; i < nparts; i++)
        n += rows[i];
    *out = NULL;
    if (!found)
        return MT_OK;
    if (nparts == 1)
        return enc_to_backend(m, src[0], (size_t)n, out, err);
    float *packed = calloc((size_t)n, sizeof(float));
    if (!packed)
        return mt_fail(err, MT_ENOMEM, "out of memory packing the bias of '%s'", bn[0]);
    for (int i = 0, at = 0; i < nparts; at += rows[i], i++)
        if (src[i])
            memcpy(packed + at, src[i], sizeof(float) * (size_t)rows[i]);
    st = enc_to_backend(m, packed, (size_t)n, out, err);
    free(packed);
    return st;
}

/* A norm's gamma (and, for LayerNorm, beta) of layer l, or of the model
 * when l < 0 (name then is the whole name). */
static mt_status load_norm(enc_model *m, const st_file *f, int l, const char *name, float **g,
                           float **b, mt_err *err)
{
    char n1[160], n2[160];
    const char *p = m->arch->layers;
    if (l >= 0) {
        snprintf(n1, sizeof n1, "%s.%d.%s.weight", p, l, name);
        snprintf(n2, sizeof n2, "%s.%d.%s.bias", p, l, name);
    } else {
        snprintf(n1, sizeof n1, "%s.weight", name);
        snprintf(n2, sizeof n2, "%s.bias", name);
    }
    mt_status st = enc_load_vec(m, f, n1, m->cfg.hidden, g, err);
    if (st != MT_OK || m->arch->kind.norm == ENC_RMSNORM)
        return st;
    return enc_load_vec(m, f, n2, m->cfg.hidden, b, err);
}

/* One GEMM weight of layer l from nparts tensors (layer-relative names
 * parts[i] of rows[i] x k each) stacked along the output dimension, with
 * its biases packed alike; kind g as GEMMS_PER_LAYER counts. */
static mt_status load_layer_gemm(enc_model *m, const st_file *f, int l, int g,
                                 const char *const *parts, const int *rows, int nparts,
                                 mt_weight **w, float **bias, mt_err *err)
{
    char names[3][128];
    const char *np[3];
    const int k = enc_gemm_k(&m->cfg, g), maxk = enc_max_k(&m->cfg);
    for (int i = 0; i < nparts; i++) {
        snprintf(names[i], sizeof names[i], "%s.%d.%s.weight", m->arch->layers, l, parts[i]);
        np[i] = names[i];
    }
    const float *sm = m->smooth_stats
                          ? m->smooth_stats + ((size_t)l * GEMMS_PER_LAYER + g) * maxk
                          : NULL;
    mt_status st = load_gemm(m, f, np, rows, nparts, k, sm, l, (mt_gemm_kind)g, w, err);
    if (st == MT_OK)
        st = load_bias(m, f, names, rows, nparts, bias, err);
    enc_conv_release(m); /* what they converted is placed: one GEMM's FP32 copies at a time */
    return st;
}

/* Q, K and V are packed into one weight (fused in the file, or three
 * tensors) so that one GEMM produces the packed qkv rows that the
 * attention op reads; a gated MLP's gate and up projections likewise into
 * one [gate | up] weight. */
mt_status enc_load_layer(enc_model *m, const st_file *f, int l, mt_err *err)
{
    const enc_config *c = &m->cfg;
    const int h = c->hidden, in = c->intermediate, qw = enc_q_width(c);
    const int kvw = c->kv_heads * c->head_dim;
    enc_layer *L = &m->layer[l];
    const enc_layer_names *nm = &m->arch->layer;
    mt_status st;

    const char *qkv[3] = {nm->q, nm->k, nm->v}, *fused[1] = {nm->qkv};
    const int qkv_rows[3] = {qw, kvw, kvw}, qkv_all = enc_qkv_width(c);
    if ((st = nm->qkv ? load_layer_gemm(m, f, l, 0, fused, &qkv_all, 1, &L->qkv, &L->b_qkv, err)
                      : load_layer_gemm(m, f, l, 0, qkv, qkv_rows, 3, &L->qkv, &L->b_qkv, err)))
        return st;
    const char *o[1] = {nm->o}, *up[2] = {nm->gate, nm->inter}, *down[1] = {nm->out};
    const int up_rows[2] = {in, in}, inw = enc_inter_width(c);
    const bool split = c->gated && nm->gate;
    if ((st = load_layer_gemm(m, f, l, 1, o, &h, 1, &L->attn_out, &L->b_attn_out, err)) ||
        (st = split ? load_layer_gemm(m, f, l, 2, up, up_rows, 2, &L->inter, &L->b_inter, err)
                    : load_layer_gemm(m, f, l, 2, up + 1, &inw, 1, &L->inter, &L->b_inter, err)) ||
        (st = load_layer_gemm(m, f, l, 3, down, &h, 1, &L->out, &L->b_out, err)))
        return st;
    if ((st = load_norm(m, f, l, nm->ln1, &L->ln1_g, &L->ln1_b, err)) ||
        (st = load_norm(m, f, l, nm->ln2, &L->ln2_g, &L->ln2_b, err)) || !nm->q_norm)
        return st;
    char n1[160];
    snprintf(n1, sizeof n1, "%s.%d.%s.weight", m->arch->layers, l, nm->q_norm);
    if ((st = enc_load_vec(m, f, n1, c->head_dim, &L->q_norm, err)))
        return st;
    snprintf(n1, sizeof n1, "%s.%d.%s.weight", m->arch->layers, l, nm->k_norm);
    return enc_load_vec(m, f, n1, c->head_dim, &L->k_norm, err);
}

/* A pre-quantized file says in its metadata how it was made; refuse one
 * that does not match what the variant asks for, so a config edit can never
 * silently serve other weights than it names. */
mt_status enc_check_quant_meta(const st_file *f, mt_precision p, const mt_calib_opts *c,
                                  const char *mix, mt_err *err)
{
    const char *fmt = st_meta(f, "mantissa.format");
    const char *fmix = st_meta(f, "mantissa.mix");
    if (strcmp(fmix ? fmix : "", mix))
        return mt_fail(err, MT_EINVAL, "%s: quantized with mix \"%s\", but the variant asks for "
                       "\"%s\"", st_path(f), fmix ? fmix : "", mix);
    const char *prec = st_meta(f, "mantissa.precision");
    const char *cal = st_meta(f, "mantissa.calibration");
    if (!fmt || strcmp(fmt, "1") != 0 || !prec)
        return mt_fail(err, MT_EFORMAT, "%s: not a mantissa quantized file (metadata "
                       "mantissa.format/mantissa.precision missing; make one with mantissa quantize)",
                       st_path(f));
    if (strcmp(prec, mt_precision_name(p)) != 0)
        return mt_fail(err, MT_EINVAL, "%s: quantized as %s, but the variant asks for %s",
                       st_path(f), prec, mt_precision_name(p));
    if ((mt_prec(p)->has_scales || *mix) && (!cal || strcmp(cal, mt_calib_name(c->method)) != 0))
        return mt_fail(err, MT_EINVAL, "%s: calibrated with %s, but the variant asks for %s",
                       st_path(f), cal ? cal : "(none)", mt_calib_name(c->method));
    if ((mt_prec(p)->has_scales || *mix) && c->method == MT_CALIB_PERCENTILE) {
        const char *pc = st_meta(f, "mantissa.percentile");
        if (!pc || fabs(atof(pc) - c->percentile) > 1e-9)
            return mt_fail(err, MT_EINVAL, "%s: calibrated at percentile %s, but the variant asks "
                           "for %g", st_path(f), pc ? pc : "(none)", c->percentile);
    }
    return MT_OK;
}

/* Whether any GEMM weight of the model is in precision p. */
bool enc_uses_precision(const enc_model *m, mt_precision p)
{
    for (int l = 0; l < m->cfg.layers; l++)
        for (int k = 0; k < MT_GEMM_KINDS; k++)
            if (mt_op_precision(MT_OP_GEMM_WEIGHT, mt_mix_precision(&m->mix, l, k, m->prec)) == p)
                return true;
    return false;
}

/* Parses the variant's mix (kept in its normalised text form, which a
 * quantized file's metadata must match) and checks that the backend runs
 * every precision it gives. */
mt_status enc_setup_mix(enc_model *m, const char *text, mt_err *err)
{
    mt_status st = mt_mix_parse(text, &m->mix, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "mix: ");
    if (!mt_mix_format(&m->mix, m->mix_text, sizeof m->mix_text))
        return mt_fail(err, MT_ELIMIT, "mix: longer than %zu bytes", sizeof m->mix_text);
    for (int p = 0; p < MT_PREC_COUNT; p++)
        if ((p == (int)m->prec || enc_uses_precision(m, (mt_precision)p)) &&
            !m->be->ops->supports(m->be, (mt_precision)p))
            return mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the %s backend",
                           mt_precision_name((mt_precision)p), m->be->device);
    return MT_OK;
}

/* The tables before the layers, under the row's names (no position table
 * for a row without one); a zero row stands for the token types of a row
 * without them (the embed op adds one row); the second token type too
 * where the model takes text pairs and has two; the embeddings' norm and the
 * final norm where the row has them. rows (n of them; NULL: every row):
 * the word table's rows to keep, in the order the embed op is then to
 * index them. */
/* The word table kept as the file's 16-bit codes (m->word16) where the
 * file has it in BF16 or F16 and the backend's embed16 can read it for
 * every forward of this model: no row hook of its own over the table, no
 * second token type. Sets *kept; false *kept: load it in FP32. */
static mt_status word_table16(enc_model *m, const st_file *f, const char *name, bool *kept,
                              mt_err *err)
{
    const st_tensor *t;
    *kept = false;
    mt_status st = find_checked(m, f, name, m->cfg.vocab, m->cfg.hidden, &t, err);
    if (st != MT_OK || !m->be->ops->embed16 || m->arch->embed ||
        (m->cfg.pairs && m->cfg.type_vocab >= 2) || (t->dtype != ST_BF16 && t->dtype != ST_F16))
        return st;
    const size_t bytes = sizeof(uint16_t) * (size_t)m->cfg.vocab * (size_t)m->cfg.hidden;
    uint16_t *dev = m->be->ops->alloc(m->be, bytes);
    if (!dev)
        return mt_fail(err, MT_ENOMEM, "out of %s memory for tensor '%s'", m->be->device, name);
    if ((st = m->be->ops->upload(m->be, dev, t->data, bytes, err)) != MT_OK) {
        m->be->ops->free(m->be, dev);
        return st;
    }
    m->other_bytes += bytes;
    m->word16 = dev;
    m->word_bf16 = t->dtype == ST_BF16;
    *kept = true;
    return MT_OK;
}

mt_status enc_load_embeddings(enc_model *m, const st_file *f, const int32_t *rows, int n,
                              mt_err *err)
{
    const enc_embed_names *e = &m->arch->emb;
    const int h = m->cfg.hidden;
    const float *type = NULL;
    float *zero = NULL;
    mt_status st;
    bool w16 = false;
    if ((!rows && (st = word_table16(m, f, e->word, &w16, err))) ||
        (!rows && !w16 && (st = table_to_backend(m, f, e->word, m->cfg.vocab, h, &m->word, err))) ||
        (rows && (st = gather_rows(m, f, e->word, m->cfg.vocab, h, rows, n, &m->word, err))) ||
        (e->pos && (st = table_to_backend(m, f, e->pos, m->cfg.max_positions, h, &m->pos, err))) ||
        (e->type && (st = enc_find_f32(m, f, e->type, m->cfg.type_vocab, h, &type, err))))
        return st;
    if (!type && !(type = zero = calloc((size_t)h, sizeof(float))))
        return mt_fail(err, MT_ENOMEM, "out of memory");
    if (!(st = enc_to_backend(m, type, (size_t)h, &m->type0, err)) &&
        !(m->cfg.pairs && zero == NULL && m->cfg.type_vocab >= 2 &&
          (st = enc_to_backend(m, type + h, (size_t)h, &m->type1, err))) &&
        !(m->arch->load_extras && (st = m->arch->load_extras(m, f, err))) &&
        !(e->ln && (st = load_norm(m, f, -1, e->ln, &m->emb_ln_g, &m->emb_ln_b, err))))
        st = e->final ? load_norm(m, f, -1, e->final, &m->final_g, &m->final_b, err) : MT_OK;
    free(zero);
    return st;
}
