/* backend_cpu.c: the CPU implementation of the backend table (backend.h).
 *
 * GEMMs go to oneDNN's sgemm (JIT kernels for AVX2/AVX-512/AMX, threaded
 * with the same OpenMP pool as our own kernels, so the two never fight over
 * cores); the rest to the OpenMP kernels in kernels/cpu/ops.c. FP32 weights are copied out of the model
 * file into aligned host memory.
 */
#include "engine/backend.h"

#include <dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "kernels/cpu/ops.h"

static const char *const prec_names[MT_PREC_COUNT] = {
    [MT_PREC_FP32] = "fp32", [MT_PREC_TF32] = "tf32", [MT_PREC_FP16] = "fp16",
    [MT_PREC_BF16] = "bf16", [MT_PREC_INT8] = "int8", [MT_PREC_FP8] = "fp8",
};

const char *mt_precision_name(mt_precision p)
{
    return (unsigned)p < MT_PREC_COUNT ? prec_names[p] : "?";
}

int mt_precision_parse(const char *s, mt_precision *out)
{
    for (int p = 0; p < MT_PREC_COUNT; p++)
        if (s && strcmp(s, prec_names[p]) == 0) {
            *out = (mt_precision)p;
            return 0;
        }
    return -1;
}

/* ------------------------------------------------------------------------ */

static void cpu_destroy(mt_backend *be)
{
    free(be);
}

static bool cpu_supports(const mt_backend *be, mt_precision p)
{
    return p == MT_PREC_FP32;
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

static mt_status cpu_weight_upload(mt_backend *be, mt_precision prec, int n, int k,
                                   const void *data, const float *scales, mt_weight **out,
                                   mt_err *err)
{
    if (!cpu_supports(be, prec))
        return mt_fail(err, MT_EUNSUPPORTED, "precision %s is not supported on the cpu backend",
                       mt_precision_name(prec));
    mt_weight *wt = calloc(1, sizeof *wt);
    size_t bytes = mt_quant_data_bytes(prec, n, k);
    if (!wt || !(wt->data = cpu_alloc(be, bytes))) {
        free(wt);
        return mt_fail(err, MT_ENOMEM, "out of memory for a %dx%d weight", n, k);
    }
    memcpy(wt->data, data, bytes);
    if (mt_quant_has_scales(prec)) {
        if (!(wt->scales = malloc(sizeof(float) * (size_t)n))) {
            free(wt->data);
            free(wt);
            return mt_fail(err, MT_ENOMEM, "out of memory for %d scales", n);
        }
        memcpy(wt->scales, scales, sizeof(float) * (size_t)n);
    }
    wt->prec = prec;
    wt->n = n;
    wt->k = k;
    wt->bytes = mt_quant_total_bytes(prec, n, k);
    *out = wt;
    return MT_OK;
}

static void cpu_weight_destroy(mt_backend *be, mt_weight *w)
{
    if (!w)
        return;
    free(w->data);
    free(w->scales);
    free(w);
}

static mt_status cpu_gemm(mt_backend *be, const float *x, int m, const mt_weight *w,
                          const float *bias, mt_act act, float *y, mt_err *err)
{
    if (m <= 0)
        return MT_OK;
    dnnl_status_t ds = dnnl_sgemm('N', 'T', m, w->n, w->k, 1.0f, x, w->k,
                                  (const float *)w->data, w->k, 0.0f, y, w->n);
    if (ds != dnnl_success)
        return mt_fail(err, MT_EINTERNAL, "oneDNN sgemm failed (status %d) for %dx%dx%d", (int)ds,
                       m, w->n, w->k);
    if (bias || act != MT_ACT_NONE)
        kc_bias_act(y, m, w->n, bias, act == MT_ACT_GELU);
    return MT_OK;
}

static mt_status cpu_embed(mt_backend *be, const int32_t *ids, const int32_t *offsets, int nseq,
                           const float *word, const float *pos, const float *type0, int h,
                           float *out, mt_err *err)
{
    kc_embed(ids, offsets, nseq, word, pos, type0, h, out);
    return MT_OK;
}

static mt_status cpu_layernorm(mt_backend *be, const float *x, const float *res,
                               const float *gamma, const float *beta, int t, int h, float eps,
                               float *out, mt_err *err)
{
    kc_layernorm(x, res, gamma, beta, t, h, eps, out);
    return MT_OK;
}

static mt_status cpu_attention(mt_backend *be, const float *qkv, const int32_t *offsets,
                               int nseq, int heads, int head_dim, float *out, mt_err *err)
{
    if (kc_attention(qkv, offsets, nseq, heads, head_dim, out) != 0)
        return mt_fail(err, MT_ENOMEM, "out of memory for attention scratch");
    return MT_OK;
}

static mt_status cpu_mean_pool(mt_backend *be, const float *x, const int32_t *offsets, int nseq,
                               int h, bool normalize, float *out, mt_err *err)
{
    kc_mean_pool(x, offsets, nseq, h, normalize, out);
    return MT_OK;
}

static const mt_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .weight_upload = cpu_weight_upload,
    .weight_destroy = cpu_weight_destroy,
    .gemm = cpu_gemm,
    .embed = cpu_embed,
    .layernorm = cpu_layernorm,
    .attention = cpu_attention,
    .mean_pool = cpu_mean_pool,
};

mt_status mt_backend_cpu_create(int threads, mt_backend **out, mt_err *err)
{
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
