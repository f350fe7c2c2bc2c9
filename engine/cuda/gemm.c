/* engine/cuda/gemm.c: the CUDA backend's GEMMs (see engine/cuda/backend.c for the whole):
 * cuBLASLt plans cached per context, the paths (fp32/tf32/fp16/bf16 through
 * cuBLASLt; int8/fp8 through the fused W8A16 kernel at small m, and from a
 * crossover m on through a dequantized FP16 GEMM, cuBLASLt FP8 W8A8 or our
 * INT8 W8A8 kernel, on rows quantized per token here or by the LayerNorm
 * before; in a forward on 16-bit activations, fp16/bf16 straight from and
 * into them), and which of them an 8-bit weight takes at m
 * (engine/cuda/tune.c measured it at load). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/internal.h"
#include "engine/quant/quant.h"

static const char *const lt_kind_name[] = {"fp32", "tf32", "fp16", "bf16", "fp8 w8a8"};

/* ========================================================================
 * cuBLASLt
 *
 * Our y (m, n) row-major is y^T (n, m) column-major, and W (n, ld) row-major
 * is a column-major (k, n) matrix with leading dimension ld. So
 *   y^T = op(A) B   with A = W (TRANSA = T, k x n, lda = ld),
 *                        B = x (TRANSB = N, k x m, ldb),
 *                        D = y (n x m, ldd = n),
 * the "TN" layout that FP8 GEMMs require. The bias epilogue adds bias[row of
 * D] = bias[n]; outer-vector scales multiply row i of D by a_scale[i] (the
 * weight's channel) and column j by b_scale[j] (the token).
 * ====================================================================== */

/* The outer-vector scale mode of an FP8 plan; a refusal (cup_lt_refused)
 * is returned as is, for the caller to record. */
static cublasStatus_t lt_set_outer_vec(lt_plan *p, const float *a_scale, const float *b_scale)
{
#if HAVE_OUTER_VEC
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                      &mode, sizeof mode);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                           sizeof mode);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                           sizeof a_scale);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                           sizeof b_scale);
    return s;
#else
    (void)p, (void)a_scale, (void)b_scale;
    return CUBLAS_STATUS_NOT_SUPPORTED;
#endif
}

/* The best algorithm for the plan's layouts (16-byte alignment, our
 * workspace); CUBLAS_STATUS_NOT_SUPPORTED when there is none. */
static cublasStatus_t lt_heuristic(cu_ctx *c, lt_plan *p)
{
    cublasLtMatmulPreference_t pref;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    const size_t ws = LT_WORKSPACE;
    const uint32_t align = 16; /* what every buffer here is guaranteed; the default assumes 256 */
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws);
    static const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(c->be->lt, p->desc, p->a, p->b, p->d, p->d, pref, 1,
                                           &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && nres == 0)
        s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (s == CUBLAS_STATUS_SUCCESS)
        p->algo = res.algo;
    return s;
}

/* Makes plan p for key. "No algorithm" (state -1) and, for FP8, a refusal
 * (state -2, cup_lt_refused) are answers the caller falls back on, not
 * errors. */
static mt_status lt_plan_make(cu_ctx *c, lt_plan *p, const lt_key *key, const float *a_scale,
                              const float *b_scale, mt_err *err)
{
    static const cudaDataType_t types[] = {CUDA_R_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF,
                                           CUDA_R_8F_E4M3};
    static const cudaDataType_t dtypes[] = {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}; /* kcu_dtype */
    const cudaDataType_t ab = types[key->kind], dt = dtypes[key->dt];
    const cublasComputeType_t ct =
        key->kind == LK_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    p->key = *key;
    p->state = -1; /* until an algorithm is found */
    LT(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (key->epi) {
        const cublasLtEpilogue_t epi = key->epi == LT_EPI_BIAS   ? CUBLASLT_EPILOGUE_BIAS
                                       : key->epi == LT_EPI_GELU ? CUBLASLT_EPILOGUE_GELU
                                                                 : CUBLASLT_EPILOGUE_GELU_BIAS;
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    }
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (key->kind == LK_E4M3 && (s = lt_set_outer_vec(p, a_scale, b_scale)) != CUBLAS_STATUS_SUCCESS)
        goto answer;
    LT(cublasLtMatrixLayoutCreate(&p->a, ab, key->k, key->n, key->lda));
    LT(cublasLtMatrixLayoutCreate(&p->b, ab, key->k, key->m, key->ldb));
    LT(cublasLtMatrixLayoutCreate(&p->d, dt, key->n, key->m, key->n));
    s = lt_heuristic(c, p);
answer:
    if (s == CUBLAS_STATUS_SUCCESS)
        p->state = 1;
    else if (key->kind == LK_E4M3 && cup_lt_refused(s))
        p->state = -2;
    else if (s != CUBLAS_STATUS_NOT_SUPPORTED)
        return lt_fail(err, s, "making a cuBLASLt plan", __FILE__, __LINE__);
    return MT_OK;
}

/* The context's cached plan for key (made on first use, least recently used
 * slot replaced); *out NULL when cuBLASLt has no algorithm for it. */
static mt_status lt_plan_get(cu_ctx *c, const lt_key *key, const float *a_scale,
                             const float *b_scale, lt_plan **out, mt_err *err)
{
    lt_plan *victim = &c->plans[0];
    for (int i = 0; i < PLAN_SLOTS; i++) {
        lt_plan *p = &c->plans[i];
        if (p->state != 0 && !memcmp(&p->key, key, sizeof *key)) {
            p->used = ++c->clock;
            *out = p->state == 1 ? p : NULL;
            return MT_OK;
        }
        if (p->state == 0 || (victim->state != 0 && p->used < victim->used))
            victim = p;
    }
    plan_clear(victim);
    mt_status st = lt_plan_make(c, victim, key, a_scale, b_scale, err);
    if (st != MT_OK) {
        plan_clear(victim);
        return st;
    }
    victim->used = ++c->clock;
    *out = victim->state == 1 ? victim : NULL;
    return MT_OK;
}

/* cuBLASLt refused an FP8 plan when it ran (reported for small m and large
 * k on H100): the plan is kept as refused for this m, so the next GEMM of
 * this shape goes to the fused kernel at once. */
static mt_status lt_refuse(lt_plan *p, cublasStatus_t s, int m, int n, int k, mt_err *err)
{
    p->state = -2;
    return mt_fail(err, MT_EUNSUPPORTED, "cuBLASLt refused FP8 W8A8 at m=%d n=%d k=%d: %s", m, n,
                   k, cublasLtGetStatusName(s));
}

/* y (m, n) = x B-side (m, k, ldb) times W A-side (n, k, lda)^T [+ bias]
 * [then cuBLASLt's GELU, the tanh approximation, when gelu], y and bias of
 * type yt (kcu_dtype); MT_EUNSUPPORTED when cuBLASLt has no algorithm
 * (callers may fall back). */
static mt_status lt_gemm_t(cu_ctx *c, lt_kind kind, const void *w, int lda, const void *x,
                           int ldb, int m, int n, int k, const void *bias, int gelu,
                           const float *a_scale, const float *b_scale, void *y, int yt,
                           mt_err *err)
{
    const lt_key key = {kind, n, k, m, lda, ldb,
                        (bias ? LT_EPI_BIAS : 0) | (gelu ? LT_EPI_GELU : 0), yt};
    lt_plan *p;
    if (!c->lt_ws)
        CU(scratch(c, LT_WORKSPACE, &c->lt_ws));
    mt_status st = lt_plan_get(c, &key, a_scale, b_scale, &p, err);
    if (st != MT_OK)
        return st;
    if (!p)
        return mt_fail(err, MT_EUNSUPPORTED, "cuBLASLt has no %s algorithm for m=%d n=%d k=%d",
                       lt_kind_name[kind], m, n, k);
    if (kind == LK_E4M3 && m < c->be->opts.fake_w8a8_refusal_below_m)
        return lt_refuse(p, CUBLAS_STATUS_NOT_SUPPORTED, m, n, k, err); /* the test knob */
    if (bias)
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof bias));
#if HAVE_OUTER_VEC
    if (kind == LK_E4M3) {
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                          sizeof a_scale));
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                          sizeof b_scale));
    }
#endif
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t s = cublasLtMatmul(c->be->lt, p->desc, &one, w, p->a, x, p->b, &zero, y,
                                            p->d, y, p->d, &p->algo, c->lt_ws, LT_WORKSPACE,
                                            c->stream);
    if (s != CUBLAS_STATUS_SUCCESS && kind == LK_E4M3 && cup_lt_refused(s))
        return lt_refuse(p, s, m, n, k, err);
    if (s != CUBLAS_STATUS_SUCCESS)
        return lt_fail(err, s, "cublasLtMatmul", __FILE__, __LINE__);
    return MT_OK;
}

/* lt_gemm_t with an FP32 y. */
static mt_status lt_gemm(cu_ctx *c, lt_kind kind, const void *w, int lda, const void *x, int ldb,
                         int m, int n, int k, const float *bias, int gelu, const float *a_scale,
                         const float *b_scale, float *y, mt_err *err)
{
    return lt_gemm_t(c, kind, w, lda, x, ldb, m, n, k, bias, gelu, a_scale, b_scale, y,
                     KCU_DT_F32, err);
}

/* ========================================================================
 * GEMM paths
 * ====================================================================== */

/* The split-K workspace: every 8-bit weight upload raises the backend's
 * need to the largest any m's plan can ask for (kcu_w8a16_ws_bound), and a
 * thread's workspace grows to it once, outside any recording, so a graph
 * never holds a workspace that a later m frees. */
void ws_raise(cu_backend *b, int n, int k)
{
    int cnt = 0;
    const size_t need = kcu_w8a16_ws_bound(n, k, b->sms, NULL, &cnt);
    pthread_mutex_lock(&b->mu);
    b->ws_need = need > b->ws_need ? need : b->ws_need;
    b->cnt_need = cnt > b->cnt_need ? cnt : b->cnt_need;
    pthread_mutex_unlock(&b->mu);
}

mt_status ws_ensure(cu_ctx *c, mt_err *err)
{
    cu_backend *b = c->be;
    pthread_mutex_lock(&b->mu);
    const size_t need = b->ws_need;
    const int cnt = b->cnt_need;
    pthread_mutex_unlock(&b->mu);
    if (!cup_ws_should_grow(&c->ws, need, c->capturing) && (c->capturing || cnt <= c->ncounters))
        return MT_OK;
    /* the old buffers go back stream-ordered; graphs that hold them carry
     * the old generation and are re-recorded (cup_graph_decide) */
    scratch_free(c, c->skw);
    scratch_free(c, c->counters);
    c->skw = NULL, c->counters = NULL, c->skw_floats = 0, c->ncounters = 0;
    cup_ws_grown(&c->ws, 0);
    CU(scratch(c, sizeof(float) * (need ? need : 1), (void **)&c->skw));
    CU(scratch(c, sizeof(int) * (size_t)(cnt ? cnt : 1), (void **)&c->counters));
    CU(cudaMemsetAsync(c->counters, 0, sizeof(int) * (size_t)(cnt ? cnt : 1), c->stream));
    c->skw_floats = need;
    c->ncounters = cnt;
    c->ws.have = need;
    atomic_fetch_add_explicit(&b->n_ws_grows, 1, memory_order_relaxed);
    return MT_OK;
}

/* Which W8A16 kernel runs this weight at m: MANTISSA_CUDA_W8A16_KERNEL when
 * it names one, else (auto) the direct kernel up to the m the load measured
 * it faster at (tune_weight), the staged one above. */
static int fused_kernel(const cu_ctx *c, const cu_weight *w, int m)
{
    const int k = c->be->opts.w8a16_kernel;
    if (k != KCU_W8A16_AUTO)
        return k;
    return m <= w->q.direct_max_m ? KCU_W8A16_DIRECT : KCU_W8A16_STAGED;
}

/* The W8A16 kernel (kcu_w8a16_kernel kernel; < 0: fused_kernel's choice),
 * with this thread's split-K workspace. x, bias and y are FP32, or in a
 * forward on 16-bit rows (c->act) of that type, which is then also the
 * MMA's. */
static mt_status gemm_fused(cu_ctx *c, const cu_weight *w, const void *x, int m, const void *bias,
                            mt_act act, void *y, int kernel, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    mt_status st = ws_ensure(c, err);
    if (st != MT_OK)
        return st;
    const kcu_w8a16_opts ko = {.kernel = kernel < 0 ? fused_kernel(c, w, m) : kernel};
    const kcu_act ka = act == MT_ACT_GELU ? KCU_ACT_GELU : KCU_ACT_NONE;
    if (c->act != KCU_DT_F32)
        CU(kcu_w8a16_gemm_16(x, pw->k, pw->data, w->ld, codes_type(pw->prec), pw->scales, bias, ka,
                             y, pw->n, m, pw->n, pw->k, (kcu_dtype)c->act, w->in_mul, &ko, c->skw,
                             c->skw_floats, c->counters, c->ncounters, c->stream));
    else
        CU(kcu_w8a16_gemm_mul(x, pw->k, pw->data, w->ld, codes_type(pw->prec), pw->scales, bias,
                              ka, y, pw->n, m, pw->n, pw->k,
                              c->be->opts.w8a16_bf16 ? KCU_A_BF16 : KCU_A_F16, w->in_mul, &ko,
                              c->skw, c->skw_floats, c->counters, c->ncounters, c->stream));
    atomic_fetch_add_explicit(&c->be->n_fused, 1, memory_order_relaxed);
    if (kcu_w8a16_direct(m, &ko))
        atomic_fetch_add_explicit(&c->be->n_fused_direct, 1, memory_order_relaxed);
    return MT_OK;
}

/* cuBLASLt on 16-bit rows: y (m, n) = x (m, k) W^T with y and bias of
 * type yt, x and W (kind, leading dimension ldw) of the same 16-bit type, or
 * for LK_E4M3 E4M3 codes with outer-vector scales a_scale (n) and b_scale
 * (m); bias and GELU (MANTISSA_CUDA_GELU=tanh, the default) in the
 * epilogue; where cuBLASLt has no such algorithm, the plain GEMM and one
 * pass for bias and GELU (erf) over y, counted as bias_pass. */
static mt_status lt_io(cu_ctx *c, lt_kind kind, const void *wdata, int ldw, const void *x, int m,
                       int n, int k, const void *bias, mt_act act, const float *a_scale,
                       const float *b_scale, void *y, int yt, mt_err *err)
{
    cu_backend *b = c->be;
    const int epi_gelu = act == MT_ACT_GELU && b->opts.gelu_tanh;
    mt_status st = lt_gemm_t(c, kind, wdata, ldw, x, k, m, n, k, bias, epi_gelu, a_scale,
                             b_scale, y, yt, err);
    if (st == MT_EUNSUPPORTED && (bias || epi_gelu)) {
        st = lt_gemm_t(c, kind, wdata, ldw, x, k, m, n, k, NULL, 0, a_scale, b_scale, y, yt,
                       err);
        if (st == MT_OK) {
            CU(kcu_bias_act_16(y, (kcu_dtype)yt, n, m, n, bias,
                               act == MT_ACT_GELU ? KCU_ACT_GELU : KCU_ACT_NONE, c->stream));
            atomic_fetch_add_explicit(&b->n_bias_pass, 1, memory_order_relaxed);
        }
    } else if (st == MT_OK && epi_gelu) {
        atomic_fetch_add_explicit(&b->n_lt_gelu_epi, 1, memory_order_relaxed);
    } else if (st == MT_OK && act == MT_ACT_GELU) {
        CU(kcu_bias_act_16(y, (kcu_dtype)yt, n, m, n, NULL, KCU_ACT_GELU, c->stream));
    }
    return st;
}

/* 8-bit weight -> FP16 scratch (scale folded in), activations -> FP16,
 * cuBLASLt FP16 with the bias epilogue, GELU after. In a forward on f16
 * rows the activations are already FP16: the smoothing multipliers go into
 * the weight's copy instead, bias and GELU as lt_io does them. */
static mt_status gemm_dequant(cu_ctx *c, const cu_weight *w, const void *x, int m,
                              const void *bias, mt_act act, void *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    const int n = pw->n, k = pw->k, ld = round_up(k, 8);
    const bool io = c->act != KCU_DT_F32;
    mt_status st = MT_OK;
    void *wf = NULL, *xh = NULL;
    CU_GOTO(scratch(c, sizeof(uint16_t) * (size_t)n * ld, &wf), done);
    if (io) {
        if (c->act != KCU_DT_F16 || k != ld) { /* cu_gemm lets only these through */
            st = mt_fail(err, MT_EINVAL, "an 8-bit weight on 16-bit rows needs f16 rows and k %% 8 == 0");
            goto done;
        }
        CU_GOTO(kcu_dequant_to_f16_mul(pw->data, w->ld, codes_type(pw->prec), pw->scales,
                                       w->in_mul, n, k, wf, ld, c->stream),
                done);
        st = lt_io(c, LK_F16, wf, ld, x, m, n, k, bias, act, NULL, NULL, y, KCU_DT_F16, err);
    } else {
        CU_GOTO(scratch(c, sizeof(uint16_t) * (size_t)m * ld, &xh), done);
        CU_GOTO(kcu_dequant_to_f16(pw->data, w->ld, codes_type(pw->prec),
                                   pw->scales, n, k, wf, ld, c->stream),
                done);
        CU_GOTO(kcu_f32_to_16_mul(x, k, m, k, w->in_mul, xh, ld, 0, c->stream), done);
        if ((st = lt_gemm(c, LK_F16, wf, ld, xh, ld, m, n, k, bias, 0, NULL, NULL, y, err)) != MT_OK)
            goto done;
        if (act == MT_ACT_GELU)
            CU_GOTO(kcu_bias_act(y, n, m, n, NULL, KCU_ACT_GELU, c->stream), done);
    }
    if (st == MT_OK)
        atomic_fetch_add_explicit(&c->be->n_lt_dequant, 1, memory_order_relaxed);
done:
    scratch_free(c, wf);
    scratch_free(c, xh);
    return st;
}

cudaError_t w8a8_rows_alloc(cu_ctx *c, const cu_weight *w, int m, uint8_t **xq, float **xs)
{
    const size_t qbytes = ((size_t)m * w->ld + 255) / 256 * 256;
    cudaError_t e = scratch(c, qbytes + sizeof(float) * (size_t)m, (void **)xq);
    *xs = e == cudaSuccess ? (float *)(*xq + qbytes) : NULL;
    return e;
}

/* W8A8 on 16-bit rows already quantized (xq codes, w->ld a row, xs row
 * scales): FP8 through lt_io, bias and GELU in its epilogue where cuBLASLt
 * has such an FP8 plan; INT8 through our kernel, which has them. */
static mt_status w8a8_on_rows(cu_ctx *c, const cu_weight *w, const uint8_t *xq, const float *xs,
                              int m, const void *bias, mt_act act, void *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    if (codes_type(pw->prec) == KCU_W_INT8) { /* our kernel: cuBLASLt has no such int8 form */
        CU(kcu_w8a8_i8_gemm_16(xq, w->ld, xs, pw->data, w->ld, pw->scales, bias,
                               act == MT_ACT_GELU ? KCU_ACT_GELU : KCU_ACT_NONE, y, pw->n, m,
                               pw->n, w->ld, (kcu_dtype)c->act, c->be->sms, c->stream));
        atomic_fetch_add_explicit(&c->be->n_w8a8_i8, 1, memory_order_relaxed);
        return MT_OK;
    }
    mt_status st = lt_io(c, LK_E4M3, pw->data, w->ld, xq, m, pw->n, w->ld, bias, act, pw->scales,
                         xs, y, c->act, err);
    if (st == MT_OK)
        atomic_fetch_add_explicit(&c->be->n_lt_w8a8, 1, memory_order_relaxed);
    return st;
}

/* W8A8: per-token 8-bit activations (fused absmax + quantize kernel), then
 * FP8: cuBLASLt FP8 with outer-vector scales (weight channel x token); on
 * FP32 rows cuBLASLt writes FP32 and one pass adds bias and GELU; on
 * 16-bit rows the quantization reads them and w8a8_on_rows writes them.
 * MT_EUNSUPPORTED when cuBLASLt cannot. INT8 (16-bit rows only, q8_pick):
 * int8 codes and kcu_w8a8_i8_gemm_16. */
static mt_status gemm_w8a8(cu_ctx *c, const cu_weight *w, const void *x, int m,
                           const void *bias, mt_act act, void *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    const int n = pw->n, k = pw->k, kq = w->ld; /* padded K, zeros on both sides */
    mt_status st = MT_OK;
    uint8_t *xq = NULL;
    float *xs = NULL;
    CU(w8a8_rows_alloc(c, w, m, &xq, &xs));
    if (c->act != KCU_DT_F32) {
        CU_GOTO(kcu_quant_rows_16(x, (kcu_dtype)c->act, k, m, k, w->in_mul, codes_type(pw->prec),
                                  xq, kq, xs, c->stream),
                done);
        st = w8a8_on_rows(c, w, xq, xs, m, bias, act, y, err);
    } else if (codes_type(pw->prec) == KCU_W_INT8) {
        st = mt_fail(err, MT_EUNSUPPORTED, "INT8 W8A8 takes 16-bit rows only");
    } else {
        CU_GOTO(kcu_quant_rows_e4m3_mul(x, k, m, k, w->in_mul, xq, kq, xs, c->stream), done);
        if ((st = lt_gemm_t(c, LK_E4M3, pw->data, w->ld, xq, kq, m, n, kq, NULL, 0, pw->scales,
                            xs, y, KCU_DT_F32, err)) != MT_OK)
            goto done;
        CU_GOTO(kcu_bias_act(y, n, m, n, bias, act == MT_ACT_GELU ? KCU_ACT_GELU : KCU_ACT_NONE,
                             c->stream),
                done);
        atomic_fetch_add_explicit(&c->be->n_lt_w8a8, 1, memory_order_relaxed);
    }
done:
    scratch_free(c, xq);
    return st;
}

void preq_drop(cu_ctx *c)
{
    if (c->preq.xq)
        scratch_free(c, c->preq.xq);
    memset(&c->preq, 0, sizeof c->preq);
}

bool q8_feed_wanted(const cu_ctx *c, const cu_weight *w, int m)
{
    const cu_backend *b = c->be;
    if (!b->opts.ln_quant || !w->w8a8 || c->act != KCU_DT_F16) /* w8a8: 8-bit weights only */
        return false;
    return b->opts.gemm == MT_CUDA_GEMM_LIBRARY ||
           (b->opts.gemm == MT_CUDA_GEMM_AUTO && q8_tuned_pre(w, m));
}

/* The cuBLASLt path an 8-bit weight takes at large m. */
static q8_path alt_path(const cu_weight *w)
{
    return w->w8a8 ? P_W8A8 : P_DEQUANT; /* w8a8: E4M3 on sm_90, int8 where enabled */
}

mt_status q8_run_path(cu_ctx *c, cu_weight *w, q8_path pth, const void *x, int m,
                      const void *bias, mt_act act, void *y, int kernel, mt_err *err)
{
    if (pth == P_FUSED)
        return gemm_fused(c, w, x, m, bias, act, y, kernel, err);
    if (pth == P_W8A8)
        return gemm_w8a8(c, w, x, m, bias, act, y, err);
    if (pth == P_W8A8_PRE)
        return w8a8_on_rows(c, w, c->preq.xq, c->preq.xs, m, bias, act, y, err);
    return gemm_dequant(c, w, x, m, bias, act, y, err);
}

/* The path an 8-bit weight takes at m: q8_tuned_path's, unless
 * MANTISSA_CUDA_GEMM forces one (library: alt_path's). INT8 W8A8 needs
 * 16-bit rows: on FP32 ones (a mixed-precision forward) the dequantized
 * path instead. */
static q8_path q8_pick(const cu_ctx *c, const cu_weight *w, int m)
{
    const cu_backend *b = c->be;
    const q8_path p = b->opts.gemm == MT_CUDA_GEMM_FUSED     ? P_FUSED
                      : b->opts.gemm == MT_CUDA_GEMM_LIBRARY ? alt_path(w)
                                                             : q8_tuned_path(w, m);
    return p == P_W8A8 && c->act == KCU_DT_F32 && codes_type(w->pub.prec) == KCU_W_INT8
               ? P_DEQUANT
               : p;
}

/* Runs path pth; a W8A8 plan that cuBLASLt refuses (its plan for this m
 * remembers it) runs in the fused W8A16 kernel instead, and is counted. */
static mt_status gemm_q8(cu_ctx *c, cu_weight *w, q8_path pth, const void *x, int m,
                         const void *bias, mt_act act, void *y, mt_err *err)
{
    mt_status st = q8_run_path(c, w, pth, x, m, bias, act, y, -1, err);
    if (pth == P_W8A8_PRE) {
        preq_drop(c); /* stream-ordered: after the GEMM that read them */
        if (st == MT_OK)
            atomic_fetch_add_explicit(&c->be->n_w8a8_ln, 1, memory_order_relaxed);
    }
    if (st == MT_EUNSUPPORTED && (pth == P_W8A8 || pth == P_W8A8_PRE)) {
        atomic_fetch_add_explicit(&c->be->n_w8a8_refused, 1, memory_order_relaxed);
        st = gemm_fused(c, w, x, m, bias, act, y, -1, err);
    }
    if (st == MT_OK && c->act != KCU_DT_F32)
        atomic_fetch_add_explicit(&c->be->n_q8_io, 1, memory_order_relaxed);
    return st;
}

/* A 16-bit float weight (bf: bf16, else fp16): activations to 16 bits,
 * cuBLASLt with the bias epilogue. MANTISSA_CUDA_GELU=tanh: GELU in the
 * epilogue; where cuBLASLt has no such algorithm, the plain GEMM and the
 * erf pass after. */
static mt_status gemm_16(cu_ctx *c, const cu_weight *w, bool bf, const float *x, int m,
                         const float *bias, mt_act act, float *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    cu_backend *b = c->be;
    const int n = pw->n, k = pw->k, epi_gelu = act == MT_ACT_GELU && b->opts.gelu_tanh;
    mt_status st = MT_OK;
    void *xh = NULL;
    CU(scratch(c, sizeof(uint16_t) * (size_t)m * w->ld, &xh));
    CU_GOTO(kcu_f32_to_16(x, k, m, k, xh, w->ld, bf, c->stream), done);
    st = lt_gemm(c, bf ? LK_BF16 : LK_F16, pw->data, w->ld, xh, w->ld, m, n, k, bias, epi_gelu,
                 NULL, NULL, y, err);
    if (st == MT_EUNSUPPORTED && epi_gelu)
        st = lt_gemm(c, bf ? LK_BF16 : LK_F16, pw->data, w->ld, xh, w->ld, m, n, k, bias, 0, NULL,
                     NULL, y, err);
    else if (st == MT_OK && epi_gelu) {
        atomic_fetch_add_explicit(&b->n_lt_gelu_epi, 1, memory_order_relaxed);
        act = MT_ACT_NONE; /* done */
    }
    if (st == MT_OK)
        atomic_fetch_add_explicit(&b->n_lt_16, 1, memory_order_relaxed);
done:
    scratch_free(c, xh);
    if (st == MT_OK && act == MT_ACT_GELU)
        CU(kcu_bias_act(y, n, m, n, NULL, KCU_ACT_GELU, c->stream));
    return st;
}

/* A 16-bit weight on 16-bit activations (a forward in set_act_format's
 * f16 or bf16, the weight of the same type): x (m, k), y (m, n) and the
 * bias (n) in that type, as the ops between GEMMs keep them, so nothing is
 * converted (lt_io). */
static mt_status gemm_16_io(cu_ctx *c, const cu_weight *w, bool bf, const void *x, int m,
                            const void *bias, mt_act act, void *y, mt_err *err)
{
    const mt_weight *pw = &w->pub;
    cu_backend *b = c->be;
    mt_status st = lt_io(c, bf ? LK_BF16 : LK_F16, pw->data, w->ld, x, m, pw->n, pw->k, bias, act,
                         NULL, NULL, y, bf ? KCU_DT_BF16 : KCU_DT_F16, err);
    if (st == MT_OK) {
        atomic_fetch_add_explicit(&b->n_lt_16, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->n_lt_16_io, 1, memory_order_relaxed);
    }
    return st;
}

/* y = act(x W^T + bias) by precision: see the top of this file. */
mt_status cu_gemm(mt_backend *be, const float *x, int m, const mt_weight *pw,
                         const float *bias, mt_act act, float *y, mt_err *err)
{
    cu_backend *b = (cu_backend *)be;
    cu_weight *w = (cu_weight *)pw;
    cu_ctx *c;
    mt_status st = ctx_get(b, &c, err);
    if (st != MT_OK || m <= 0)
        return st;
    const int n = pw->n, k = pw->k;
    c->last_prec = pw->prec;
    /* the rows of this GEMM quantized by its LayerNorm (layernorm_feed), or stale ones */
    const bool pre = c->preq.xq && c->preq.x == x && c->preq.w == w && c->preq.m == m;
    if (c->preq.xq && !pre)
        preq_drop(c);
    const mt_precision_traits *t = mt_prec(pw->prec);
    if (c->act != KCU_DT_F32) { /* a 16-bit forward: weights of its type, or 8-bit on f16 */
        const bool bf = c->act == KCU_DT_BF16;
        const mt_gemm_form gk = mt_prec_gemm(pw->prec, MT_BK_CUDA);
        const bool same16 = gk == MT_GEMM_FLOAT && t->bytes == 2 && (t->format == NF_BF16) == bf;
        if (!same16 && !(gk == MT_GEMM_CODES8 && !bf))
            return mt_fail(err, MT_EINVAL,
                           "a forward on %s activations met a %s weight (%dx%d): 16-bit "
                           "activations go with weights of their own type, or 8-bit weights "
                           "on f16 activations",
                           bf ? "bf16" : "f16", t->name, n, k);
        if (k % 8 || n % 8)
            return mt_fail(err, MT_EINVAL,
                           "16-bit activations need GEMM widths that are multiples of 8 (n=%d k=%d)",
                           n, k);
        if (same16)
            return gemm_16_io(c, w, bf, x, m, bias, act, y, err);
        return gemm_q8(c, w, pre ? P_W8A8_PRE : q8_pick(c, w, m), x, m, bias, act, y, err);
    }
    switch (mt_prec_gemm(pw->prec, MT_BK_CUDA)) {
    case MT_GEMM_FLOAT:
        if (t->bytes == 2) /* fp16, bf16 */
            return gemm_16(c, w, t->format == NF_BF16, x, m, bias, act, y, err);
        st = lt_gemm(c, t->tf32 ? LK_TF32 : LK_F32, pw->data, w->ld, x, k, m, n, k, bias, 0,
                     NULL, NULL, y, err);
        if (st == MT_OK)
            atomic_fetch_add_explicit(&b->n_lt_32, 1, memory_order_relaxed);
        break;
    case MT_GEMM_CODES8:
        return gemm_q8(c, w, q8_pick(c, w, m), x, m, bias, act, y, err);
    default:
        return mt_fail(err, MT_EINVAL, "unknown weight precision %d", (int)pw->prec);
    }
    if (st == MT_OK && act == MT_ACT_GELU)
        CU(kcu_bias_act(y, n, m, n, NULL, KCU_ACT_GELU, c->stream));
    return st;
}

bool mt_cuda_fp8_w8a8_enabled(const mt_backend *be)
{
    return be && ((const cu_backend *)be)->fp8_w8a8;
}
