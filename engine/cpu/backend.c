/* engine/cpu/backend.c: the CPU implementation of the backend table (backend.h).
 *
 * FP32 GEMMs (and BF16 ones where the CPU has AVX512_BF16) go to oneDNN's
 * matmul on weights reordered once (kernels/cpu/gemm_f32.c; threaded with the
 * same OpenMP pool as our own kernels, so the two never fight over cores);
 * FP16, BF16 elsewhere, FP8 and INT8 weights to kernels/cpu/qgemm.c; the rest
 * to the OpenMP kernels in kernels/cpu/ops.c. Weights are copied out of the
 * model file into aligned host memory in the quant.h layout (INT8 also gets
 * qgemm's oneDNN matmul object, which reads those codes in place, or keeps
 * a reordered copy where its kernel needs one). TF32 is a GPU mode and is
 * refused here.
 */
#include "engine/backend.h"

#include <dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/options.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/qgemm.h"

/* ------------------------------------------------------------------------ */

/* The OpenMP team size is a per-thread setting (omp_set_num_threads sets
 * the calling thread's ICV only): a forward on an engine worker or a
 * reload thread would otherwise run with the process default, all cores,
 * whatever server.engine_threads says. Every op that runs OpenMP or oneDNN
 * code sets it for its calling thread first (a TLS read when it is set). */
static _Thread_local int team; /* cpu_set_threads; 0: be->threads */

static void bind_threads(const mt_backend *be)
{
    const int want = team > 0 && team < be->threads ? team : be->threads;
    if (omp_get_max_threads() != want)
        omp_set_num_threads(want);
}

static void cpu_set_threads(mt_backend *be, int threads)
{
    team = threads;
}

static void cpu_destroy(mt_backend *be)
{
    free(be);
}

/* The form of p's GEMM here: the precision traits' CPU column. */
static mt_gemm_form form_of(mt_precision p)
{
    return mt_prec_gemm(p, MT_BK_CPU);
}

static bool cpu_supports(const mt_backend *be, mt_precision p)
{
    return form_of(p) != MT_GEMM_NONE;
}

/* 64-byte aligned so vector loads never split cache lines. */
static void *cpu_alloc(mt_backend *be, size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}

static void cpu_free(mt_backend *be, void *p)
{
    free(p);
}

static mt_status cpu_copy(mt_backend *be, void *dst, const void *src, size_t bytes, mt_err *err)
{
    memcpy(dst, src, bytes);
    return MT_OK;
}

/* What the CPU backend keeps of a weight: the public part (data and scales
 * in the quant.h layout), and for INT8 the qgemm object with the matmul
 * primitives, which borrows data and scales. */
typedef struct {
    mt_weight pub;
    kc_s8_weight *s8;
    kc_f32_weight *f32; /* FP32, and BF16 where the CPU has AVX512_BF16: W reordered for
                         * oneDNN's matmul, the only copy */
    kc_h16_weight *h16; /* FP16, FP8, and BF16 where oneDNN's bf16 matmul is not, on a CPU
                         * with AVX-512 or AVX2 (+ FMA, F16C): W in panels, the only copy */
} cpu_weight;

/* A qgemm status as an mt_status with a message naming the shape. */
static mt_status kc_fail(mt_err *err, int rc, const char *what, int m, int n, int k)
{
    if (rc == KC_ENOMEM)
        return mt_fail(err, MT_ENOMEM, "out of memory in the %s GEMM (%dx%dx%d)", what, m, n, k);
    if (rc == KC_EINVAL)
        return mt_fail(err, MT_EINVAL, "bad arguments to the %s GEMM (%dx%dx%d)", what, m, n, k);
    return mt_fail(err, MT_EINTERNAL, "oneDNN failed in the %s GEMM (%dx%dx%d)", what, m, n, k);
}

/* FP32, and BF16 where the CPU has AVX512_BF16: W reordered for oneDNN's
 * matmul (kernels/cpu/gemm_f32.c), which then holds the one copy the GEMM
 * reads. A BF16 weight the matmul cannot take keeps ->data for the
 * decoding GEMM (kc_gemm_bf16); an FP32 one cannot fail that way. */
static mt_status matmul_copy(mt_backend *be, cpu_weight *cw, mt_err *err)
{
    mt_weight *wt = &cw->pub;
    const int n = wt->n, k = wt->k;
    const nf_format fmt = mt_prec(wt->prec)->format;
    if (fmt != NF_F32 && fmt != NF_BF16)
        return MT_OK; /* no matmul of its elements: the panels */
    const bool f32 = fmt == NF_F32;
    int rc = f32 ? kc_f32_weight_create(wt->data, n, k, be->threads, &cw->f32)
                 : kc_bf16_weight_create(wt->data, n, k, be->threads, &cw->f32);
    if (rc != KC_OK && !f32)
        return MT_OK;
    free(wt->data);
    wt->data = NULL;
    if (rc != KC_OK)
        return rc == KC_ENOMEM
                   ? mt_fail(err, MT_ENOMEM, "out of memory for a %dx%d fp32 weight", n, k)
                   : mt_fail(err, MT_EINTERNAL, "oneDNN could not prepare a %dx%d fp32 weight",
                             n, k);
    wt->bytes = kc_f32_weight_bytes(cw->f32);
    return MT_OK;
}

/* FP16, FP8, and BF16 that oneDNN's matmul did not take: W packed into the
 * panels of kernels/cpu/gemm_h16.c (its AVX-512 or AVX2 form, by the ISA
 * level), which then hold the one copy (bytes: ->data's). Where neither
 * runs (MANTISSA_NO_H16_KERNEL=1, or memory is short) ->data stays for the
 * panel GEMMs of qgemm.c. */
static void panel_copy(cpu_weight *cw, size_t bytes)
{
    mt_weight *wt = &cw->pub;
    const nf_format f = mt_prec(wt->prec)->format;
    const kc_h16_fmt fmt = f == NF_F16 ? KC_H16_F16 : f == NF_BF16 ? KC_H16_BF16 : KC_H16_E4M3;
    if (kc_h16_weight_create(wt->data, wt->n, wt->k, fmt, &cw->h16) != KC_OK)
        return;
    free(wt->data);
    wt->data = NULL;
    wt->bytes += kc_h16_weight_bytes(cw->h16) - bytes;
}

static mt_status cpu_weight_upload(mt_backend *be, mt_precision prec, int n, int k,
                                   const void *data, const float *scales, mt_weight **out,
                                   mt_err *err)
{
    bind_threads(be);
    if (!cpu_supports(be, prec))
        return mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the cpu backend",
                       mt_precision_name(prec));
    if (n <= 0 || k <= 0 || !data || (mt_quant_has_scales(prec) && !scales))
        return mt_fail(err, MT_EINVAL, "bad %s weight %dx%d%s", mt_precision_name(prec), n, k,
                       mt_quant_has_scales(prec) && !scales ? " (no scales)" : "");
    size_t bytes = mt_quant_data_bytes(prec, n, k);
    if (mt_prec(prec)->format == NF_E4M3 && kc_e4m3_has_nan(data, bytes))
        return mt_fail(err, MT_EFORMAT, "fp8 weight %dx%d holds a NaN code", n, k);
    cpu_weight *cw = calloc(1, sizeof *cw);
    if (!cw)
        return mt_fail(err, MT_ENOMEM, "out of memory for a %dx%d weight", n, k);
    mt_weight *wt = &cw->pub;
    wt->prec = prec;
    wt->n = n;
    wt->k = k;
    if (!(wt->data = cpu_alloc(be, bytes))) {
        free(cw);
        return mt_fail(err, MT_ENOMEM, "out of memory for a %dx%d weight", n, k);
    }
    memcpy(wt->data, data, bytes);
    const size_t nsc = mt_quant_scale_count(prec, n, k);
    if (nsc) {
        if (!(wt->scales = malloc(sizeof(float) * nsc))) {
            free(wt->data);
            free(cw);
            return mt_fail(err, MT_ENOMEM, "out of memory for %zu scales", nsc);
        }
        memcpy(wt->scales, scales, sizeof(float) * nsc);
    }
    wt->bytes = mt_quant_total_bytes(prec, n, k);
    const mt_gemm_form form = form_of(prec);
    if (form == MT_GEMM_FLOAT) {
        mt_status st = matmul_copy(be, cw, err);
        if (st != MT_OK) {
            free(cw);
            return st;
        }
    }
    if (form == MT_GEMM_PANEL || (form == MT_GEMM_FLOAT && !cw->f32))
        panel_copy(cw, bytes);
    if (form == MT_GEMM_CODES8) {
        /* oneDNN's int8 per channel reads ->data in place (the quant.h
         * layout, no second copy); our kernels (int8g, and int8 where the
         * CPU has no VNNI) read their own packed copy, and ->data goes */
        int rc = mt_prec(prec)->group == 0
                     ? kc_s8_weight_create(wt->data, wt->scales, n, k, false, &cw->s8)
                     : kc_s8_weight_create_grouped(wt->data, wt->scales, n, k,
                                                   mt_prec(prec)->group, &cw->s8);
        if (rc != KC_OK) {
            free(wt->data);
            free(wt->scales);
            free(cw);
            return rc == KC_ENOMEM
                       ? mt_fail(err, MT_ENOMEM, "out of memory for a %dx%d int8 weight", n, k)
                       : mt_fail(err, MT_EINTERNAL, "could not prepare a %dx%d %s weight (%s)",
                                 n, k, mt_precision_name(prec),
                                 rc == KC_ENOKERNEL ? "no exact kernel on this CPU" : "oneDNN");
        }
        wt->bytes += kc_s8_weight_bytes(cw->s8);
        if (kc_s8_weight_bytes(cw->s8) > 0) {
            /* the object's copy is all the GEMM reads: keep one copy */
            free(wt->data);
            wt->data = NULL;
            wt->bytes -= bytes;
        }
    }
    *out = wt;
    return MT_OK;
}

static void cpu_weight_destroy(mt_backend *be, mt_weight *w)
{
    if (!w)
        return;
    cpu_weight *cw = (cpu_weight *)w;
    kc_s8_weight_destroy(cw->s8); /* first: it borrows data and scales */
    kc_f32_weight_destroy(cw->f32);
    kc_h16_weight_destroy(cw->h16);
    free(w->data);
    free(w->scales);
    free(cw);
}

static mt_status cpu_weight_set_input_scale(mt_backend *be, mt_weight *w, const float *inv_s,
                                            mt_err *err)
{
    cpu_weight *cw = (cpu_weight *)w;
    if (!cw->s8)
        return mt_fail(err, MT_EUNSUPPORTED, "activation smoothing is for int8 weights only");
    int rc = kc_s8_weight_set_smooth(cw->s8, inv_s);
    if (rc != KC_OK)
        return kc_fail(err, rc, "int8 smoothing", 0, w->n, w->k);
    w->bytes += sizeof(float) * (size_t)w->k;
    return MT_OK;
}

/* The panel GEMMs of qgemm.c on ->data, decoded by the element format. */
static int gemm_decode(const float *x, int m, const mt_weight *w, const float *bias, bool gelu,
                       float *y)
{
    switch (mt_prec(w->prec)->format) {
    case NF_F16: return kc_gemm_f16(x, m, w->data, w->n, w->k, bias, gelu, y);
    case NF_BF16: return kc_gemm_bf16(x, m, w->data, w->n, w->k, bias, gelu, y);
    case NF_E4M3: return kc_gemm_fp8(x, m, w->data, w->scales, w->n, w->k, bias, gelu, y);
    default: return KC_EINVAL;
    }
}

static mt_status cpu_gemm(mt_backend *be, const float *x, int m, const mt_weight *w,
                          const float *bias, mt_act act, float *y, mt_err *err)
{
    bind_threads(be);
    if (m <= 0)
        return MT_OK;
    const bool gelu = act == MT_ACT_GELU;
    const cpu_weight *cw = (const cpu_weight *)w;
    int rc;
    switch (form_of(w->prec)) {
    case MT_GEMM_FLOAT:
        if (cw->f32) {
            rc = kc_gemm_f32(x, m, cw->f32, bias, gelu, y);
            break;
        }
        /* fall through - a bf16 weight that oneDNN's matmul did not take */
    case MT_GEMM_PANEL:
        rc = cw->h16 ? kc_gemm_h16(x, m, cw->h16, w->scales, bias, gelu, y)
                     : gemm_decode(x, m, w, bias, gelu, y);
        break;
    case MT_GEMM_CODES8:
        rc = kc_gemm_s8(x, m, cw->s8, bias, gelu, y);
        break;
    default:
        return mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the cpu backend",
                       mt_precision_name(w->prec));
    }
    return rc == KC_OK ? MT_OK : kc_fail(err, rc, mt_precision_name(w->prec), m, w->n, w->k);
}

static mt_status cpu_embed(mt_backend *be, const int32_t *ids, const int32_t *offsets, int nseq,
                           const float *word, const float *pos, const float *type0, int h,
                           float *out, mt_err *err)
{
    bind_threads(be);
    kc_embed(ids, offsets, NULL, nseq, word, pos, type0, NULL, h, out);
    return MT_OK;
}

static mt_status cpu_embed16(mt_backend *be, const int32_t *ids, const int32_t *offsets,
                             int nseq, const uint16_t *word16, bool bf16, const float *pos,
                             const float *type0, int h, float *out, mt_err *err)
{
    bind_threads(be);
    kc_embed16(ids, offsets, nseq, word16, bf16, pos, type0, h, out);
    return MT_OK;
}

static mt_status cpu_embed_types(mt_backend *be, const int32_t *ids, const int32_t *offsets,
                                 const int32_t *segs, int nseq, const float *word,
                                 const float *pos, const float *type0, const float *type1, int h,
                                 float *out, mt_err *err)
{
    bind_threads(be);
    kc_embed(ids, offsets, segs, nseq, word, pos, type0, type1, h, out);
    return MT_OK;
}

static mt_status cpu_layernorm(mt_backend *be, const float *x, const float *res,
                               const float *gamma, const float *beta, int t, int h, float eps,
                               float *out, mt_err *err)
{
    bind_threads(be);
    kc_layernorm(x, res, gamma, beta, t, h, eps, out);
    return MT_OK;
}

static mt_status cpu_attention(mt_backend *be, const float *qkv, const int32_t *offsets,
                               int nseq, const mt_attn_params *p, float *out, mt_err *err)
{
    bind_threads(be);
    const kc_attn a = {.heads = p->heads, .kv_heads = p->kv_heads, .dh = p->head_dim,
                       .causal = p->causal, .pos_bias = p->pos_bias, .maxrel = p->maxrel};
    int rc = kc_attention_ex(qkv, offsets, nseq, &a, out);
    if (rc == -2)
        return mt_fail(err, MT_EINVAL, "a sequence is longer than the position bias (%d)",
                       p->maxrel + 1);
    if (rc == -3)
        return mt_fail(err, MT_EINVAL, "attention: %d key/value heads do not divide %d heads",
                       p->kv_heads, p->heads);
    if (rc != 0)
        return mt_fail(err, MT_ENOMEM, "out of memory for attention scratch");
    return MT_OK;
}

/* ---- the layer kinds beyond BERT's (kernels/cpu/ops_layer.c) ---- */

static bool cpu_supports_op(const mt_backend *be, mt_op_kind k)
{
    return k < MT_OPK_COUNT; /* every one */
}

static mt_status cpu_rmsnorm(mt_backend *be, const float *x, const float *res, const float *gamma,
                             int t, int h, float eps, float *out, mt_err *err)
{
    bind_threads(be);
    kc_rmsnorm(x, res, gamma, t, h, eps, out);
    return MT_OK;
}

static mt_status cpu_add(mt_backend *be, const float *x, const float *y, size_t n, float *out,
                         mt_err *err)
{
    bind_threads(be);
    kc_add(x, y, n, out);
    return MT_OK;
}

static mt_status cpu_glu(mt_backend *be, const float *x, int t, int n, mt_act act, float *out,
                         mt_err *err)
{
    bind_threads(be);
    if (act != MT_ACT_GELU && act != MT_ACT_SILU)
        return mt_fail(err, MT_EINVAL, "glu: the gate's activation must be GELU or SiLU");
    kc_glu(x, t, n, act == MT_ACT_SILU, out);
    return MT_OK;
}

static mt_status cpu_qk_norm(mt_backend *be, float *qkv, int t, const mt_attn_params *p,
                             const float *q_gamma, const float *k_gamma, float eps, mt_err *err)
{
    bind_threads(be);
    kc_qk_rmsnorm(qkv, t, p->heads, p->kv_heads, p->head_dim, q_gamma, k_gamma, eps);
    return MT_OK;
}

static mt_status cpu_rope(mt_backend *be, float *qkv, const int32_t *offsets, int nseq,
                          const mt_attn_params *p, float theta, mt_err *err)
{
    bind_threads(be);
    if (kc_rope(qkv, offsets, nseq, p->heads, p->kv_heads, p->head_dim, theta) != 0)
        return mt_fail(err, MT_EUNSUPPORTED, "rotary positions: head size %d is not even or "
                       "over 1024", p->head_dim);
    return MT_OK;
}

static mt_status cpu_mean_pool(mt_backend *be, const float *x, const int32_t *offsets, int nseq,
                               int h, bool normalize, float *out, mt_err *err)
{
    bind_threads(be);
    kc_mean_pool(x, offsets, nseq, h, normalize, out);
    return MT_OK;
}

static const char *cpu_isa(const mt_backend *be)
{
    return kc_isa_name(kc_isa_get()->level);
}

/* What multiplies p's GEMMs at the ISA level in force (the same choices
 * as cpu_weight_upload makes; a shape oneDNN's blocked layouts refuse
 * falls back, which this does not name). */
static const char *cpu_gemm_kernel(const mt_backend *be, mt_precision p)
{
    const char *panels = kc_h16_available() ? kc_h16_kernel_name() : "decode_sgemm";
    switch (form_of(p)) {
    case MT_GEMM_FLOAT:
        if (mt_prec(p)->format == NF_F32)
            return "onednn_f32";
        return kc_bf16_matmul_available() ? "onednn_bf16" : panels;
    case MT_GEMM_PANEL:
        return panels;
    case MT_GEMM_CODES8:
        return kc_s8_kernel_name(kc_s8_kernel_auto());
    default:
        return NULL;
    }
}

int mt_cpu_isa_levels(const char **names, int cap)
{
    kc_isa_level lv[KC_ISA_COUNT];
    const int n = kc_isa_levels(lv);
    for (int i = 0; i < n && i < cap; i++)
        names[i] = kc_isa_name(lv[i]);
    return n < cap ? n : cap;
}

static const mt_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .supports = cpu_supports,
    .supports_op = cpu_supports_op,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .weight_upload = cpu_weight_upload,
    .weight_destroy = cpu_weight_destroy,
    .weight_set_input_scale = cpu_weight_set_input_scale,
    .set_threads = cpu_set_threads,
    .isa = cpu_isa,
    .gemm_kernel = cpu_gemm_kernel,
    .mix_high = MT_PREC_FP32,
    .gemm = cpu_gemm,
    .embed = cpu_embed,
    .embed16 = cpu_embed16,
    .embed_types = cpu_embed_types,
    .layernorm = cpu_layernorm,
    .attention = cpu_attention,
    .mean_pool = cpu_mean_pool,
    .rmsnorm = cpu_rmsnorm,
    .add = cpu_add,
    .glu = cpu_glu,
    .rope = cpu_rope,
    .qk_norm = cpu_qk_norm,
};

mt_status mt_backend_cpu_create(int threads, mt_backend **out, mt_err *err)
{
    *out = NULL;
    if (mt_options_init(err) != MT_OK) /* a bad MANTISSA_* value; also hands the kernels theirs */
        return MT_EINVAL;
    mt_backend *be = calloc(1, sizeof *be);
    if (!be)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    if (threads <= 0)
        threads = omp_get_num_procs();
    omp_set_num_threads(threads);
    be->ops = &cpu_ops;
    be->device = "cpu";
    be->threads = threads;
    *out = be;
    return MT_OK;
}
