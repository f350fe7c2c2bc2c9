/* engine/cuda/backend.c: the CUDA implementation of the backend table (backend.h).
 *
 * What goes where:
 *   - GEMMs: fp32 / tf32 / fp16 / bf16 weights go to cuBLASLt (bias in its
 *     epilogue, GELU after it in our erf form: cuBLASLt's GELU epilogue is
 *     the tanh approximation, which BERT does not use). int8 / fp8 weights go
 *     to the fused W8A16 kernel (kernels/cuda/gemm_w8a16.cu) at small m, and
 *     from a crossover m on to the weight dequantized to an FP16 scratch and
 *     a cuBLASLt FP16 GEMM, or W8A8 with per-channel weight and per-token
 *     activation scales (cuBLASLt FP8 on sm_90, our INT8 kernel; gemm.c).
 *     When a weight is uploaded the paths are timed per (precision, n, k) at
 *     m = 16 .. 4096, each inside a CUDA graph as a forward replays them:
 *     the crossover (kcu_pick_crossover) and, per m from it on, the faster
 *     path (engine/cuda/tune.c tune_weight).
 *   - the rest of the encoder: kernels/cuda/ops.cu and attention.cu.
 *   - memory: a per-backend stream-ordered pool (cudaMallocFromPoolAsync) that
 *     keeps what it has, so the per-forward allocations of models/encoder.c cost
 *     no cudaMalloc and no synchronisation.
 *   - CUDA graphs (engine/cuda/graph.c): the graph_begin / graph_end slots record
 *     a model's forward per shape key and replay it; op calls that launch at
 *     once are counted (mt_cuda_counts.ops) to show the difference.
 *   - threads: each calling thread gets a context (stream, cuBLASLt plans and
 *     workspace, split-K workspace) found through a pthread key; see
 *     engine/cuda/backend.h for what that means for callers.
 *
 * Every CUDA and cuBLASLt call is checked; a failure becomes an mt_status
 * whose message names this file, the line, the call and the CUDA error.
 */
#include "engine/cuda/internal.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/options.h"
#include "engine/quant/quant.h"
#include "kernels/cuda/kcu.h"

/* ========================================================================
 * devices
 * ====================================================================== */

/* engine/cuda/backend.h: never fails loudly; no driver reads as no device. */
int mt_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

mt_status mt_cuda_describe(int dev, char *buf, size_t cap)
{
    int n = 0, drv = 0, rt = 0;
    char dummy[1];
    if (!buf || !cap)
        buf = dummy, cap = sizeof dummy;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, cap, "no CUDA device: %s", cudaGetErrorString(e));
        return MT_EUNSUPPORTED;
    }
    if (dev < 0 || dev >= n) {
        snprintf(buf, cap, "no CUDA device %d (this machine has %d)", dev, n);
        return MT_EINVAL;
    }
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, cap, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        return MT_EINTERNAL;
    }
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, cap, "%s (sm_%d%d, %d SMs, %.1f GiB, driver %d.%d, runtime %d.%d)", p.name,
             p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30),
             drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    return MT_OK;
}

/* ========================================================================
 * per-thread contexts
 * ====================================================================== */

/* Runs when a thread that used the backend exits: its context (and stream)
 * goes to the free list for the next new thread. */
static void ctx_release(void *p)
{
    cu_ctx *c = p;
    cu_backend *b = c->be;
    c->act = KCU_DT_F32; /* a thread ended inside a 16-bit forward: not the next one's */
    pthread_mutex_lock(&b->mu);
    c->next_free = b->free_list;
    b->free_list = c;
    pthread_mutex_unlock(&b->mu);
}

/* Releases a cached cuBLASLt plan's descriptors (also a half-made one). */
void plan_clear(lt_plan *p)
{
    if (p->state != 0) {
        if (p->desc)
            cublasLtMatmulDescDestroy(p->desc);
        if (p->a)
            cublasLtMatrixLayoutDestroy(p->a);
        if (p->b)
            cublasLtMatrixLayoutDestroy(p->b);
        if (p->d)
            cublasLtMatrixLayoutDestroy(p->d);
    }
    memset(p, 0, sizeof *p);
}

/* Tears a context down once nothing runs on its stream any more (backend
 * destruction, or a failed creation). */
static void ctx_destroy(cu_ctx *c)
{
    for (int i = 0; i < PLAN_SLOTS; i++)
        plan_clear(&c->plans[i]);
    graph_ctx_release(c);
    if (c->stream) {
        cudaStreamSynchronize(c->stream);
        if (c->skw)
            cudaFreeAsync(c->skw, c->stream);
        if (c->counters)
            cudaFreeAsync(c->counters, c->stream);
        if (c->lt_ws)
            cudaFreeAsync(c->lt_ws, c->stream);
        cudaStreamSynchronize(c->stream);
        cudaStreamDestroy(c->stream);
    }
    if (c->ev0)
        cudaEventDestroy(c->ev0);
    if (c->ev1)
        cudaEventDestroy(c->ev1);
    free(c);
}

/* A fresh context: a non-blocking stream (no implicit ordering with other
 * threads' work or the legacy default stream) and two timing events. */
static mt_status ctx_new(cu_backend *b, cu_ctx **out, mt_err *err)
{
    mt_status st = MT_OK;
    cu_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return mt_fail(err, MT_ENOMEM, "out of memory for a CUDA context");
    c->be = b;
    c->last_prec = MT_PREC_FP32;
    CU_GOTO(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), fail);
    CU_GOTO(cudaEventCreate(&c->ev0), fail);
    CU_GOTO(cudaEventCreate(&c->ev1), fail);
    *out = c; /* the cuBLASLt workspace comes with the first GEMM (lt_gemm) */
    return MT_OK;
fail:
    ctx_destroy(c);
    return st;
}

/* The calling thread's context, made on its first call; also makes the
 * backend's device current for this thread. */
mt_status ctx_get(cu_backend *b, cu_ctx **out, mt_err *err)
{
    CU(cudaSetDevice(b->dev));
    cu_ctx *c = pthread_getspecific(b->key);
    if (c) {
        *out = c;
        return MT_OK;
    }
    pthread_mutex_lock(&b->mu);
    c = b->free_list;
    if (c)
        b->free_list = c->next_free;
    pthread_mutex_unlock(&b->mu);
    if (!c) {
        mt_status st = ctx_new(b, &c, err);
        if (st != MT_OK)
            return st;
        pthread_mutex_lock(&b->mu);
        c->next_all = b->all;
        b->all = c;
        pthread_mutex_unlock(&b->mu);
    }
    if (pthread_setspecific(b->key, c) != 0) {
        ctx_release(c);
        return mt_fail(err, MT_ENOMEM, "pthread_setspecific failed for a CUDA context");
    }
    *out = c;
    return MT_OK;
}

/* Stream-ordered scratch from the backend's pool: no synchronisation, and
 * the pool keeps the memory for the next request. While a CUDA graph is
 * recorded the allocation becomes a node of the graph (graph memory), which
 * is what cudaMallocAsync records; such scratch must be freed before end. */
cudaError_t scratch(cu_ctx *c, size_t bytes, void **out)
{
    *out = NULL;
    const cudaError_t e =
        c->capturing ? cudaMallocAsync(out, bytes ? bytes : 16, c->stream)
                     : cudaMallocFromPoolAsync(out, bytes ? bytes : 16, c->be->pool, c->stream);
    if (e != cudaSuccess)
        *out = NULL;
    return e; /* the caller's cu_fail clears it and keeps its cause */
}

/* Returns scratch to the pool once the stream has passed this point. */
void scratch_free(cu_ctx *c, void *p)
{
    if (p)
        cudaFreeAsync(p, c->stream);
}

/* ========================================================================
 * memory ops
 * ====================================================================== */

/* ctx_get for every op but gemm: rows a LayerNorm quantized for the GEMM
 * after it (c->preq) are for that GEMM only, so any other op drops them. */
static mt_status op_ctx(mt_backend *be, cu_ctx **c, mt_err *err)
{
    mt_status st = ctx_get((cu_backend *)be, c, err);
    if (st == MT_OK)
        preq_drop(*c);
    return st;
}

static void *cu_alloc(mt_backend *be, size_t bytes)
{
    cu_ctx *c;
    mt_err err;
    void *p = NULL;
    if (ctx_get((cu_backend *)be, &c, &err) != MT_OK || c->capturing)
        return NULL; /* recorded memory would only exist inside the graph */
    /* 256 bytes at least, so that every buffer is as aligned as cuBLASLt assumes */
    if (scratch(c, bytes < 256 ? 256 : bytes, &p) != cudaSuccess)
        (void)cudaGetLastError(); /* the op table's alloc says NULL, nothing more */
    return p;
}

static void cu_free(mt_backend *be, void *p)
{
    cu_ctx *c;
    mt_err err;
    if (!p || op_ctx(be, &c, &err) != MT_OK)
        return;
    if (c->capturing) {
        graph_defer_free(c, p); /* a recorded free would run on every replay */
        return;
    }
    scratch_free(c, p);
}

/* Synchronous: when it returns the bytes are on the device, so src may be
 * freed and any thread's stream may read dst (weights are uploaded on the
 * loading thread and read by the workers). The stream is idle at the start
 * of a forward, so the wait is one copy's latency. */
static mt_status cu_upload(mt_backend *be, void *dst, const void *src, size_t bytes, mt_err *err)
{
    cu_ctx *c;
    mt_status st = op_ctx(be, &c, err);
    if (st != MT_OK || bytes == 0)
        return st;
    if (c->capturing)
        return mt_fail(err, MT_EINVAL, "upload while a CUDA graph is being recorded");
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    return MT_OK;
}

/* The one wait of a forward: the result (and any error of the kernels
 * queued before it) reaches the host here. */
static mt_status cu_download(mt_backend *be, void *dst, const void *src, size_t bytes,
                             mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK || bytes == 0)
        return st;
    if (c->capturing)
        return mt_fail(err, MT_EINVAL, "download while a CUDA graph is being recorded");
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    return MT_OK;
}

/* ========================================================================
 * weights
 * ====================================================================== */

/* Frees a weight made by cu_weight_upload (stream-ordered on this thread). */
static void cu_weight_destroy(mt_backend *be, mt_weight *pw)
{
    if (!pw)
        return;
    cu_free(be, pw->data);
    cu_free(be, pw->scales);
    cu_free(be, ((cu_weight *)pw)->in_mul);
    free(pw);
}

static bool cu_supports(const mt_backend *be, mt_precision p);

/* Copies a weight in quant.h layout into device rows padded to 16 bytes
 * (zeros in the padding: the fused kernel and FP8 cuBLASLt read them), and
 * measures the 8-bit crossover. */
static mt_status cu_weight_upload(mt_backend *be, mt_precision prec, int n, int k,
                                  const void *data, const float *scales, mt_weight **out,
                                  mt_err *err)
{
    cu_backend *b = (cu_backend *)be;
    cu_ctx *c;
    mt_status st = ctx_get(b, &c, err);
    if (st != MT_OK)
        return st;
    if (c->capturing)
        return mt_fail(err, MT_EINVAL, "weight upload while a CUDA graph is being recorded");
    if (n < 1 || k < 1 || !data)
        return mt_fail(err, MT_EINVAL, "bad weight shape %dx%d", n, k);
    if ((unsigned)prec >= MT_PREC_COUNT)
        return mt_fail(err, MT_EINVAL, "unknown weight precision %d", (int)prec);
    if (!cu_supports(be, prec))
        return mt_fail(err, MT_EUNSUPPORTED, "%s weights have no CUDA kernel (one scale per %d "
                       "inputs): use int8 or fp8 on a GPU", mt_precision_name(prec),
                       mt_prec(prec)->group);
    const size_t es = mt_prec(prec)->bytes;
    const int has_scales = mt_prec(prec)->has_scales;
    if (has_scales && !scales)
        return mt_fail(err, MT_EINVAL, "%s weight %dx%d without scales", mt_precision_name(prec),
                       n, k);
    cu_weight *w = calloc(1, sizeof *w);
    if (!w)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    w->ld = round_up(k, (int)(16 / es));
    const bool codes8 = mt_prec_gemm(prec, MT_BK_CUDA) == MT_GEMM_CODES8;
    w->w8a8 = codes8 && (codes_type(prec) == KCU_W_E4M3
                             ? b->fp8_w8a8 && cup_w8a8_shape_ok(n)
                             : b->opts.int8_w8a8 && cu_act_format(be, prec) == MT_ACTF_F16 &&
                                   n % 8 == 0 && k % 8 == 0); /* as tune_weight's f16 rows */
    w->q.crossover = INT_MAX;
    memset(w->q.alt, w->w8a8 ? P_W8A8 : P_DEQUANT, sizeof w->q.alt);
    const size_t bytes = es * (size_t)n * w->ld;
    w->pub.prec = prec;
    w->pub.n = n;
    w->pub.k = k;
    w->pub.bytes = bytes + (has_scales ? sizeof(float) * (size_t)n : 0);
    CU_GOTO(scratch(c, bytes, &w->pub.data), fail);
    if (has_scales)
        CU_GOTO(scratch(c, sizeof(float) * (size_t)n, (void **)&w->pub.scales), fail);
    CU_GOTO(cudaMemsetAsync(w->pub.data, 0, bytes, c->stream), fail);
    CU_GOTO(cudaMemcpy2DAsync(w->pub.data, es * w->ld, data, es * k, es * k, n,
                              cudaMemcpyHostToDevice, c->stream),
            fail);
    if (has_scales)
        CU_GOTO(cudaMemcpyAsync(w->pub.scales, scales, sizeof(float) * (size_t)n,
                                cudaMemcpyHostToDevice, c->stream),
                fail);
    CU_GOTO(cudaStreamSynchronize(c->stream), fail); /* see cu_upload */
    if (has_scales)
        ws_raise(b, n, k); /* before tuning: its fused runs use the workspace */
    if (has_scales && (st = tune_weight(b, c, w, err)) != MT_OK)
        goto fail;
    *out = &w->pub;
    return MT_OK;
fail:
    cu_weight_destroy(be, &w->pub);
    return st;
}

/* Activation smoothing (SmoothQuant), as the CPU int8 path: the 8-bit
 * weight was quantized from W diag(s), and every GEMM with it multiplies its
 * input by inv_s (k floats) in FP32 before rounding it (to f16/bf16 in the
 * fused kernel and the dequantized path, to E4M3 in W8A8). A multiplier
 * that is zero, negative, NaN or infinite is refused. */
static mt_status cu_weight_set_input_scale(mt_backend *be, mt_weight *pw, const float *inv_s,
                                           mt_err *err)
{
    cu_weight *w = (cu_weight *)pw;
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    if (mt_prec_gemm(pw->prec, MT_BK_CUDA) != MT_GEMM_CODES8)
        return mt_fail(err, MT_EUNSUPPORTED, "activation smoothing is for int8 and fp8 weights "
                       "only, not %s", mt_precision_name(pw->prec));
    if (c->capturing)
        return mt_fail(err, MT_EINVAL, "smoothing set while a CUDA graph is being recorded");
    if (!inv_s)
        return mt_fail(err, MT_EINVAL, "no smoothing multipliers");
    for (int j = 0; j < pw->k; j++)
        if (!(inv_s[j] > 0.f) || inv_s[j] > 3.0e38f)
            return mt_fail(err, MT_EINVAL, "smoothing multiplier %d is %g, not a positive finite "
                           "number", j, (double)inv_s[j]);
    const int kp = round_up(pw->k, 64);
    float *h = malloc(sizeof(float) * (size_t)kp);
    if (!h)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    memcpy(h, inv_s, sizeof(float) * (size_t)pw->k);
    for (int j = pw->k; j < kp; j++)
        h[j] = 1.f;
    float *d = NULL;
    cudaError_t e = scratch(c, sizeof(float) * (size_t)kp, (void **)&d);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(d, h, sizeof(float) * (size_t)kp, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream); /* h is freed next; see cu_upload */
    free(h);
    if (e != cudaSuccess) {
        scratch_free(c, d);
        return cu_fail(err, e, "uploading smoothing multipliers", __FILE__, __LINE__);
    }
    if (!w->in_mul)
        pw->bytes += sizeof(float) * (size_t)kp;
    scratch_free(c, w->in_mul);
    w->in_mul = d;
    return MT_OK;
}

/* ========================================================================
 * the encoder ops
 * ====================================================================== */

/* MANTISSA_CUDA_DEBUG_SYNC=1: waits for the op just issued and reports its error
 * (or that of an earlier op not checked this way: the attention op is
 * checked by the op after it) with the op's name. Off: nothing. */
static mt_status op_done(cu_ctx *c, const char *op, mt_err *err)
{
    if (!c->be->opts.debug_sync)
        return MT_OK;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e == cudaSuccess)
        return MT_OK;
    (void)cudaGetLastError();
    return mt_fail(err, e == cudaErrorMemoryAllocation ? MT_ENOMEM : MT_EINTERNAL,
                   "MANTISSA_CUDA_DEBUG_SYNC: after the %s op: %s (%s)", op, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

/* Counts an op call that launches its work now (not into a recording):
 * mt_cuda_counts.ops, the launch count of a forward with and without graphs. */
static void count_op(cu_ctx *c)
{
    if (!c->capturing)
        atomic_fetch_add(&c->be->n_ops, 1);
}

/* The table's gemm: cu_gemm (engine/cuda/gemm.c), checked under MANTISSA_CUDA_DEBUG_SYNC. */
static mt_status cu_gemm_op(mt_backend *be, const float *x, int m, const mt_weight *w,
                            const float *bias, mt_act act, float *y, mt_err *err)
{
    cu_ctx *c;
    mt_status st = cu_gemm(be, x, m, w, bias, act, y, err);
    if (st == MT_OK && (st = ctx_get((cu_backend *)be, &c, err)) == MT_OK) {
        count_op(c);
        st = op_done(c, "gemm", err);
    }
    return st;
}

/* The op table's entries below are thin: they find the thread's stream and
 * launch the kernel of kernels/cuda with it. */
static mt_status cu_embed(mt_backend *be, const int32_t *ids, const int32_t *offsets, int nseq,
                          const float *word, const float *pos, const float *type0, int h,
                          float *out, mt_err *err)
{
    cu_ctx *c;
    mt_status st = op_ctx(be, &c, err);
    if (st != MT_OK)
        return st;
    if (c->act != KCU_DT_F32)
        CU(kcu_embed_16(ids, offsets, nseq, word, pos, type0, h, out, (kcu_dtype)c->act,
                        c->stream));
    else
        CU(kcu_embed(ids, offsets, nseq, word, pos, type0, h, out, c->stream));
    count_op(c);
    return op_done(c, "embed", err);
}

static mt_status cu_layernorm(mt_backend *be, const float *x, const float *res, const float *gamma,
                              const float *beta, int t, int h, float eps, float *out, mt_err *err)
{
    cu_ctx *c;
    mt_status st = op_ctx(be, &c, err);
    if (st != MT_OK)
        return st;
    if (c->act != KCU_DT_F32)
        CU(kcu_layernorm_16(x, res, gamma, beta, t, h, eps, out, (kcu_dtype)c->act, c->stream));
    else
        CU(kcu_layernorm(x, res, gamma, beta, t, h, eps, out, c->stream));
    count_op(c);
    return op_done(c, "layernorm", err);
}

/* backend.h's layernorm_feed: cu_layernorm, and where next's GEMM on out
 * takes W8A8 (q8_feed_wanted) the 8-bit rows (E4M3 or int8, as the weight)
 * and row scales of out in the same kernel, kept in c->preq for that GEMM, which then skips its
 * quantization pass. Shapes the kernel declines take the plain LayerNorm. */
static mt_status cu_layernorm_feed(mt_backend *be, const float *x, const float *res,
                                   const float *gamma, const float *beta, int t, int h, float eps,
                                   float *out, const mt_weight *next, mt_err *err)
{
    cu_ctx *c;
    mt_status st = op_ctx(be, &c, err);
    const cu_weight *w = (const cu_weight *)next;
    if (st != MT_OK || !w || t <= 0 || w->pub.k != h || !q8_feed_wanted(c, w, t))
        return st != MT_OK ? st : cu_layernorm(be, x, res, gamma, beta, t, h, eps, out, err);
    uint8_t *xq;
    float *xs;
    CU(w8a8_rows_alloc(c, w, t, &xq, &xs));
    cudaError_t e = kcu_layernorm_16_q(x, res, gamma, beta, t, h, eps, out, (kcu_dtype)c->act,
                                       w->in_mul, codes_type(w->pub.prec), xq, w->ld, xs,
                                       c->stream);
    if (e != cudaSuccess)
        scratch_free(c, xq);
    if (e == cudaErrorNotSupported)
        return cu_layernorm(be, x, res, gamma, beta, t, h, eps, out, err);
    CU(e);
    c->preq.x = out, c->preq.w = w, c->preq.m = t, c->preq.xq = xq, c->preq.xs = xs;
    count_op(c);
    return op_done(c, "layernorm", err);
}

/* The fp32 variant gets the FP32 kernel (its vectors must match the CPU
 * FP32 path); every other variant the tensor-core one. The op has no
 * precision argument, so the precision of this thread's last GEMM (the QKV
 * projection just before) stands in for it. Either reads and writes the
 * activation type of set_act_format. */
static mt_status cu_attention(mt_backend *be, const float *qkv, const int32_t *offsets, int nseq,
                              const mt_attn_params *p, float *out, mt_err *err)
{
    cu_backend *b = (cu_backend *)be;
    cu_ctx *c;
    const int head_dim = p->head_dim;
    mt_status st = op_ctx(be, &c, err);
    if (st == MT_OK && (p->causal || p->kv_heads != p->heads)) /* supports_op says no */
        st = mt_fail(err, MT_EUNSUPPORTED, "causal and grouped-query attention are not on CUDA");
    if (st != MT_OK)
        return st;
    kcu_attn_mode mode = b->opts.attn == MT_CUDA_ATTN_FP32  ? KCU_ATTN_FP32
                         : b->opts.attn == MT_CUDA_ATTN_F16 ? KCU_ATTN_F16
                         : c->last_prec == MT_PREC_FP32     ? KCU_ATTN_FP32
                                                            : KCU_ATTN_F16;
    if (mode == KCU_ATTN_F16 && !kcu_attention_supported(KCU_ATTN_F16, head_dim))
        mode = KCU_ATTN_FP32;
    if (!kcu_attention_supported(mode, head_dim))
        return mt_fail(err, MT_EUNSUPPORTED, "attention head size %d is not supported on CUDA",
                       head_dim);
    CU(kcu_attention_t(qkv, (kcu_dtype)c->act, offsets, nseq, p->heads, head_dim, p->pos_bias,
                       p->maxrel, b->opts.max_len_hint, b->sms, mode, out, c->stream));
    count_op(c);
    return MT_OK;
}

static mt_status cu_mean_pool(mt_backend *be, const float *x, const int32_t *offsets, int nseq,
                              int h, bool normalize, float *out, mt_err *err)
{
    cu_ctx *c;
    mt_status st = op_ctx(be, &c, err);
    if (st != MT_OK)
        return st;
    if (c->act != KCU_DT_F32)
        CU(kcu_mean_pool_16(x, (kcu_dtype)c->act, offsets, nseq, h, normalize, out, c->stream));
    else
        CU(kcu_mean_pool(x, offsets, nseq, h, normalize, out, c->stream));
    count_op(c);
    return op_done(c, "mean_pool", err);
}

/* backend.h's act_format: 16-bit activations for a model whose GEMMs are
 * all fp16 (f16) or all bf16 (bf16), and f16 for one whose GEMMs are all of
 * one 8-bit precision (int8, fp8: the W8A16 kernel's MMAs are f16 anyway;
 * not with MANTISSA_CUDA_W8A16_BF16, whose MMAs are bf16), unless
 * MANTISSA_CUDA_ACT16=0. */
mt_act_format cu_act_format(const mt_backend *be, mt_precision p)
{
    const cu_backend *b = (const cu_backend *)be;
    const mt_precision_traits *t = mt_prec(p);
    const mt_gemm_form f = mt_prec_gemm(p, MT_BK_CUDA);
    if (!b->opts.act16)
        return MT_ACTF_F32;
    if (f == MT_GEMM_CODES8 && cu_supports(be, p))
        return b->opts.w8a16_bf16 ? MT_ACTF_F32 : MT_ACTF_F16;
    if (f != MT_GEMM_FLOAT || t->bytes != 2)
        return MT_ACTF_F32;
    return t->format == NF_BF16 ? MT_ACTF_BF16 : MT_ACTF_F16;
}

/* The calling thread's activation type from now on (the values of
 * mt_act_format are kcu_dtype's). */
static void cu_set_act_format(mt_backend *be, mt_act_format f)
{
    cu_ctx *c;
    if (op_ctx(be, &c, NULL) == MT_OK)
        c->act = f == MT_ACTF_F16 ? KCU_DT_F16 : f == MT_ACTF_BF16 ? KCU_DT_BF16 : KCU_DT_F32;
}

/* ========================================================================
 * the backend object
 * ====================================================================== */

/* The precisions the traits' CUDA column names (engine/precision.c): every
 * one with per-channel (or no) scales. TF32 needs sm_80 and FP8 W8A16
 * converts in software on sm_80, and the backend refuses older GPUs at
 * creation. Group-scaled int8 ("int8g") has no CUDA kernel yet. */
static bool cu_supports(const mt_backend *be, mt_precision p)
{
    /* the forms cu_gemm has; its 8-bit paths read one scale per channel,
     * so a grouped precision given CODES8 here would run on wrong scales */
    const mt_gemm_form f = mt_prec_gemm(p, MT_BK_CUDA);
    return f == MT_GEMM_FLOAT || (f == MT_GEMM_CODES8 && mt_prec(p)->group == 0);
}

/* Destroys the backend; no thread may still be using it. */
static void cu_destroy(mt_backend *be)
{
    cu_backend *b = (cu_backend *)be;
    if (!b)
        return;
    cudaSetDevice(b->dev);
    pthread_key_delete(b->key);
    for (cu_ctx *c = b->all, *next; c; c = next) {
        next = c->next_all;
        ctx_destroy(c);
    }
    if (b->lt)
        cublasLtDestroy(b->lt);
    if (b->pool)
        cudaMemPoolDestroy(b->pool);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* The table models/ call. Of backend.h's optional slots, the ops of the
 * layer kinds beyond BERT's (supports_op, rmsnorm, add, glu, rope,
 * qk_norm) and a text pair's two token types (embed_types) are not written
 * for CUDA yet: a model that needs one is refused at load. */
static const mt_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cu_destroy,
    .supports = cu_supports,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .weight_upload = cu_weight_upload,
    .weight_destroy = cu_weight_destroy,
    .weight_set_input_scale = cu_weight_set_input_scale,
    .gemm = cu_gemm_op,
    .embed = cu_embed,
    .layernorm = cu_layernorm,
    .layernorm_feed = cu_layernorm_feed,
    .attention = cu_attention,
    .mean_pool = cu_mean_pool,
    .act_format = cu_act_format,
    .set_act_format = cu_set_act_format,
    .graph_begin = cu_graph_begin_op, /* engine/cuda/graph.c */
    .graph_end = cu_graph_end_op,
    .mix_high = MT_PREC_FP16,
};

/* Checks the device (present, sm_80+, our kernels load), then makes the
 * memory pool and the cuBLASLt handle; contexts come per thread later. */
mt_status mt_backend_cuda_create_opts(int device, const mt_cuda_opts *o, mt_backend **out,
                                      mt_err *err)
{
    int n = 0;
    *out = NULL;
    if (mt_options_init(err) != MT_OK) /* a bad MANTISSA_* value */
        return MT_EINVAL;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return mt_fail(err, MT_EUNSUPPORTED, "no CUDA device found (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    }
    if (device < 0 || device >= n)
        return mt_fail(err, MT_EINVAL, "CUDA device %d does not exist (this machine has %d)",
                       device, n);
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 8)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "CUDA device %d (%s) has compute capability %d.%d; Mantissa's kernels "
                       "need 8.0 or newer",
                       device, prop.name, prop.major, prop.minor);
    CU(cudaSetDevice(device));
    if ((e = kcu_check_image()) != cudaSuccess) {
        (void)cudaGetLastError();
        return mt_fail(err, MT_EUNSUPPORTED,
                       "this build has no kernels for CUDA device %d (%s, sm_%d%d): %s; rebuild "
                       "with its architecture in CUDA_GENCODE",
                       device, prop.name, prop.major, prop.minor, cudaGetErrorString(e));
    }

    cu_backend *b = calloc(1, sizeof *b);
    if (!b)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    if (o)
        b->opts = *o;
    else
        mt_cuda_opts_default(&b->opts);
    if (b->opts.max_len_hint <= 0)
        b->opts.max_len_hint = 512;
    b->dev = device;
    b->sms = prop.multiProcessorCount;
    b->cc = prop.major * 10 + prop.minor;
    b->fp8_w8a8 = cup_fp8_w8a8_enabled(b->cc, cublasLtGetVersion(), HAVE_OUTER_VEC);
    snprintf(b->name, sizeof b->name, "cuda:%d", device);
    b->pub.ops = &cuda_ops;
    b->pub.device = b->name;
    b->pub.threads = 1;
    b->pub.impl = b;
    pthread_mutex_init(&b->mu, NULL);
    if (pthread_key_create(&b->key, ctx_release) != 0) {
        pthread_mutex_destroy(&b->mu);
        free(b);
        return mt_fail(err, MT_ENOMEM, "pthread_key_create failed");
    }
    mt_status st = MT_OK;
    struct cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes = cudaMemHandleTypeNone;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = device;
    CU_GOTO(cudaMemPoolCreate(&b->pool, &pp), fail);
    uint64_t keep = UINT64_MAX; /* never hand memory back at a synchronisation */
    CU_GOTO(cudaMemPoolSetAttribute(b->pool, cudaMemPoolAttrReleaseThreshold, &keep), fail);
    cublasStatus_t ls = cublasLtCreate(&b->lt);
    if (ls != CUBLAS_STATUS_SUCCESS) {
        st = lt_fail(err, ls, "cublasLtCreate", __FILE__, __LINE__);
        goto fail;
    }
    /* every kernel loaded and every W8A16 shared-memory limit set now, not
     * lazily at a first launch that might be inside a graph capture */
    CU_GOTO(kcu_warm(), fail);
    *out = &b->pub;
    return MT_OK;
fail:
    cu_destroy(&b->pub);
    return st;
}

/* The entry point the server uses: default knobs plus the environment. */
mt_status mt_backend_cuda_create(int device, mt_backend **out, mt_err *err)
{
    return mt_backend_cuda_create_opts(device, NULL, out, err);
}

/* Relaxed reads: the counts are for tests and logs, not for decisions. */
void mt_cuda_get_counts(const mt_backend *be, mt_cuda_counts *out)
{
    const cu_backend *b = (const cu_backend *)be;
    out->fused = atomic_load(&b->n_fused);
    out->fused_direct = atomic_load(&b->n_fused_direct);
    out->lt_gelu_epi = atomic_load(&b->n_lt_gelu_epi);
    out->lt_dequant = atomic_load(&b->n_lt_dequant);
    out->lt_w8a8 = atomic_load(&b->n_lt_w8a8);
    out->lt_16 = atomic_load(&b->n_lt_16);
    out->lt_16_io = atomic_load(&b->n_lt_16_io);
    out->bias_pass = atomic_load(&b->n_bias_pass);
    out->q8_io = atomic_load(&b->n_q8_io);
    out->lt_32 = atomic_load(&b->n_lt_32);
    out->w8a8_refused = atomic_load(&b->n_w8a8_refused);
    out->w8a8_ln = atomic_load(&b->n_w8a8_ln);
    out->w8a8_i8 = atomic_load(&b->n_w8a8_i8);
    out->ws_grows = atomic_load(&b->n_ws_grows);
    out->ops = atomic_load(&b->n_ops);
    out->graph_records = atomic_load(&b->n_graph_records);
    out->graph_replays = atomic_load(&b->n_graph_replays);
    out->graph_nodes = atomic_load(&b->graph_nodes);
    out->graph_kernels = atomic_load(&b->graph_kernels);
}
