/* test_gpu_ops16.c: the encoder kernels on 16-bit activations
 * (kernels/cuda/ops16.cu and attention.cu's 16-bit instantiations), f16 and
 * bf16, against references computed on the host from the same decoded
 * inputs: the embedding bit-exactly (one FP32 sum, one rounding), LayerNorm,
 * pooling, bias + GELU (a 16-bit bias) and attention in FP64, within the rounding of the
 * 16-bit output (half an ulp of the output, plus the FP32 arithmetic's
 * drift). Inputs are fresh random numbers each run, outputs poisoned with
 * NaN codes before every launch; each shape runs aliased and not, with and
 * without the residual, vector and scalar kernels.
 *
 *   test_gpu_ops16 [--seed N] [--quick]
 */
#include "kernels/cpu/numfmt.h"
#include "kernels/cuda/kcu.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/gpu_test16.h"

static int quick;
static int sms = 1;
static cudaStream_t stream;

/* Largest |out - ref| / (|ref| eps16 + abs_tol) over n: <= 1 is within
 * the output's rounding (plus abs_tol for the FP32 arithmetic); NaN or a
 * poisoned element gives +inf. */
static double worst16(const uint16_t *out, const double *ref, size_t n, kcu_dtype dt,
                      double rel_slack, double abs_tol, size_t *at)
{
    double worst = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        const double o = dec16(out[i], dt);
        const double r = fabs(o - ref[i]) / (fabs(ref[i]) * eps16(dt) * rel_slack + abs_tol);
        const double v = o == o ? r : INFINITY;
        if (v > worst) {
            worst = v;
            *at = i;
        }
    }
    return worst;
}


/* ------------------------------------------------------------------------ */

static void embed16_rounds_the_fp32_sum_once(kcu_dtype dt)
{
    const int vocab = 500, maxpos = 520;
    for (int cs = 0; cs < (quick ? 1 : 3); cs++) {
        const int h = cs == 0 ? 384 : gt_randint(1, 800), nseq = gt_randint(1, 30);
        int32_t off[31];
        const int t = gt_make_offsets(off, nseq, 1, cs == 1 ? 512 : 130);
        int32_t *ids = malloc(sizeof(int32_t) * t);
        float *word = malloc(sizeof(float) * (size_t)vocab * h);
        float *pos = malloc(sizeof(float) * (size_t)maxpos * h), *type0 = malloc(sizeof(float) * h);
        uint16_t *out = malloc(sizeof(uint16_t) * (size_t)t * h);
        for (int i = 0; i < t; i++)
            ids[i] = gt_randint(0, vocab - 1);
        for (size_t i = 0; i < (size_t)vocab * h; i++)
            word[i] = gt_unif(-1, 1);
        for (size_t i = 0; i < (size_t)maxpos * h; i++)
            pos[i] = gt_unif(-1, 1);
        for (int i = 0; i < h; i++)
            type0[i] = gt_unif(-1, 1);
        int32_t *dids = gt_dmalloc(sizeof(int32_t) * t), *doff = gt_dmalloc(sizeof(int32_t) * (nseq + 1));
        float *dw = gt_dmalloc(sizeof(float) * (size_t)vocab * h), *dp = gt_dmalloc(sizeof(float) * (size_t)maxpos * h);
        float *dty = gt_dmalloc(sizeof(float) * h);
        void *dout = gt_dmalloc(sizeof(uint16_t) * (size_t)t * h);
        CUDA_OK(cudaMemcpy(dids, ids, sizeof(int32_t) * t, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(doff, off, sizeof(int32_t) * (nseq + 1), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dw, word, sizeof(float) * (size_t)vocab * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dp, pos, sizeof(float) * (size_t)maxpos * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dty, type0, sizeof(float) * h, cudaMemcpyHostToDevice));
        poison16(dout, (size_t)t * h, dt);
        CUDA_OK(kcu_embed_16(dids, doff, nseq, dw, dp, dty, h, dout, dt, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(out, dout, sizeof(uint16_t) * (size_t)t * h, cudaMemcpyDeviceToHost));
        long bad = -1;
        for (int s = 0; s < nseq && bad < 0; s++)
            for (int i = off[s]; i < off[s + 1] && bad < 0; i++)
                for (int c = 0; c < h; c++) {
                    const float sum = word[(size_t)ids[i] * h + c] + pos[(size_t)(i - off[s]) * h + c] + type0[c];
                    if (out[(size_t)i * h + c] != enc16(sum, dt)) {
                        bad = (long)i * h + c;
                        break;
                    }
                }
        CHECK(bad < 0, "embed %s h=%d nseq=%d t=%d: first mismatch at %ld", dt_name(dt), h, nseq, t,
              bad);
        free(ids), free(word), free(pos), free(type0), free(out);
        cudaFree(dids), cudaFree(doff), cudaFree(dw), cudaFree(dp), cudaFree(dty), cudaFree(dout);
    }
}

static void layernorm16_matches_fp64(kcu_dtype dt)
{
    /* 384 / 768 / 1024: the vector kernel (1, 3, 4 steps); 100, 1030, 1536:
     * the block kernel; 8 and 264: vector with a partly idle warp */
    static const int hs[] = {384, 768, 1024, 8, 264, 100, 1030, 1536, 512};
    const int nh = quick ? 3 : (int)(sizeof hs / sizeof *hs);
    for (int i = 0; i < nh; i++) {
        const int h = hs[i], t = gt_randint(1, 300);
        const int with_res = i % 2 == 0 || i == 1, alias = i % 3; /* 0 none, 1 out=x, 2 out=res */
        const size_t n = (size_t)t * h;
        uint16_t *xu = malloc(2 * n), *ru = malloc(2 * n), *ou = malloc(2 * n);
        float *x = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * n);
        float *g = malloc(sizeof(float) * h), *b = malloc(sizeof(float) * h);
        double *ref = malloc(sizeof(double) * n);
        rand16(xu, x, n, 2.f, 8.f, dt); /* an offset: the two-pass variance must cope */
        rand16(ru, r, n, -1.f, 1.f, dt);
        for (int c = 0; c < h; c++) {
            g[c] = gt_unif(0.5f, 1.5f);
            b[c] = gt_unif(-0.5f, 0.5f);
        }
        double max_abs = 0;
        for (int row = 0; row < t; row++) {
            double mean = 0, var = 0;
            for (int c = 0; c < h; c++)
                mean += (double)x[(size_t)row * h + c] + (with_res ? r[(size_t)row * h + c] : 0);
            mean /= h;
            for (int c = 0; c < h; c++) {
                const double d = (double)x[(size_t)row * h + c] + (with_res ? r[(size_t)row * h + c] : 0) - mean;
                var += d * d;
            }
            const double rstd = 1.0 / sqrt(var / h + 1e-12);
            for (int c = 0; c < h; c++) {
                const double v = (double)x[(size_t)row * h + c] + (with_res ? r[(size_t)row * h + c] : 0);
                ref[(size_t)row * h + c] = (v - mean) * rstd * g[c] + b[c];
                max_abs = fabs(ref[(size_t)row * h + c]) > max_abs ? fabs(ref[(size_t)row * h + c]) : max_abs;
            }
        }
        void *dx = gt_dmalloc(2 * n), *dr = gt_dmalloc(2 * n), *dout = gt_dmalloc(2 * n);
        float *dg = gt_dmalloc(sizeof(float) * h), *db = gt_dmalloc(sizeof(float) * h);
        CUDA_OK(cudaMemcpy(dx, xu, 2 * n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dr, ru, 2 * n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dg, g, sizeof(float) * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(db, b, sizeof(float) * h, cudaMemcpyHostToDevice));
        void *o = alias == 1 ? dx : alias == 2 && with_res ? dr : dout;
        if (o == dout)
            poison16(dout, n, dt);
        CUDA_OK(kcu_layernorm_16(dx, with_res ? dr : NULL, dg, db, t, h, 1e-12f, o, dt, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(ou, o, 2 * n, cudaMemcpyDeviceToHost));
        size_t at;
        /* FP32 statistics: a few 1e-6 of the row's scale on top of the rounding */
        const double w = worst16(ou, ref, n, dt, 1.0, 2e-6 * max_abs, &at);
        CHECK(w <= 1.0, "layernorm %s h=%d t=%d res=%d alias=%d: element %zu is %.7g, reference "
              "%.7g (%.3g of the tolerance)", dt_name(dt), h, t, with_res, alias, at,
              dec16(ou[at], dt), ref[at], w);
        free(xu), free(ru), free(ou), free(x), free(r), free(g), free(b), free(ref);
        cudaFree(dx), cudaFree(dr), cudaFree(dout), cudaFree(dg), cudaFree(db);
    }
}

static void mean_pool16_matches_fp64(kcu_dtype dt)
{
    for (int cs = 0; cs < (quick ? 1 : 4); cs++) {
        const int h = cs == 0 ? 384 : gt_randint(1, 1100), nseq = gt_randint(1, 40);
        int32_t off[41];
        const int t = gt_make_offsets(off, nseq, 1, 200);
        const int normalize = cs != 1;
        uint16_t *xu = malloc(2 * (size_t)t * h);
        float *x = malloc(sizeof(float) * (size_t)t * h), *out = malloc(sizeof(float) * (size_t)nseq * h);
        double *ref = malloc(sizeof(double) * (size_t)nseq * h);
        rand16(xu, x, (size_t)t * h, -2.f, 2.f, dt);
        for (int s = 0; s < nseq; s++) {
            double n2 = 0;
            for (int c = 0; c < h; c++) {
                double acc = 0;
                for (int i = off[s]; i < off[s + 1]; i++)
                    acc += x[(size_t)i * h + c];
                ref[(size_t)s * h + c] = acc / (off[s + 1] - off[s]);
                n2 += ref[(size_t)s * h + c] * ref[(size_t)s * h + c];
            }
            if (normalize)
                for (int c = 0; c < h; c++)
                    ref[(size_t)s * h + c] /= fmax(sqrt(n2), 1e-12);
        }
        void *dx = gt_dmalloc(2 * (size_t)t * h);
        float *dout = gt_dmalloc(sizeof(float) * (size_t)nseq * h);
        int32_t *doff = gt_dmalloc(sizeof(int32_t) * (nseq + 1));
        CUDA_OK(cudaMemcpy(dx, xu, 2 * (size_t)t * h, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(doff, off, sizeof(int32_t) * (nseq + 1), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dout, 0xff, sizeof(float) * (size_t)nseq * h));
        CUDA_OK(kcu_mean_pool_16(dx, dt, doff, nseq, h, normalize, dout, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(out, dout, sizeof(float) * (size_t)nseq * h, cudaMemcpyDeviceToHost));
        const double e = gt_rel_l2(out, ref, (size_t)nseq * h);
        CHECK(gt_first_nonfinite(out, (size_t)nseq * h) < 0 && e <= 1e-5,
              "mean pool %s h=%d nseq=%d t=%d normalize=%d: rel err %.3g (<= 1e-5)", dt_name(dt),
              h, nseq, t, normalize, e);
        free(xu), free(x), free(out), free(ref), cudaFree(dx), cudaFree(dout), cudaFree(doff);
    }
}


static void bias_act16_matches_fp64(kcu_dtype dt)
{
    /* n % 8 == 0 takes the vector kernel, others the scalar one */
    static const int ns[] = {1536, 384, 13, 1000, 8};
    for (int i = 0; i < (quick ? 2 : 5); i++) {
        const int n = ns[i], m = gt_randint(1, 200), gelu = i != 1, with_bias = i != 3;
        const size_t len = (size_t)m * n;
        uint16_t *yu = malloc(2 * len), *ou = malloc(2 * len), *bu = malloc(2 * (size_t)n);
        float *y = malloc(sizeof(float) * len), *bias = malloc(sizeof(float) * n);
        double *ref = malloc(sizeof(double) * len);
        rand16(yu, y, len, -4.f, 4.f, dt);
        rand16(bu, bias, n, -1.f, 1.f, dt);
        for (size_t j = 0; j < len; j++) {
            const double v = (double)y[j] + (with_bias ? bias[j % n] : 0);
            ref[j] = gelu ? gt_gelu_ref(v) : v;
        }
        void *dy = gt_dmalloc(2 * len), *db = gt_dmalloc(2 * (size_t)n);
        CUDA_OK(cudaMemcpy(dy, yu, 2 * len, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(db, bu, 2 * (size_t)n, cudaMemcpyHostToDevice));
        CUDA_OK(kcu_bias_act_16(dy, dt, n, m, n, with_bias ? db : NULL,
                                gelu ? KCU_ACT_GELU : KCU_ACT_NONE, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(ou, dy, 2 * len, cudaMemcpyDeviceToHost));
        size_t at;
        const double w = worst16(ou, ref, len, dt, 1.0, 1e-6, &at);
        CHECK(w <= 1.0, "bias+act %s m=%d n=%d gelu=%d bias=%d: element %zu is %.7g, reference %.7g",
              dt_name(dt), m, n, gelu, with_bias, at, dec16(ou[at], dt), ref[at]);
        free(yu), free(ou), free(bu), free(y), free(bias), free(ref), cudaFree(dy), cudaFree(db);
    }
}


static void attention16_matches_fp64(kcu_dtype dt)
{
    static const struct {
        int heads, dh, nseq, lo, hi;
    } cs[] = {
        {12, 32, 3, 1, 130}, {12, 64, 2, 100, 200}, {2, 128, 2, 1, 130}, {3, 48, 3, 1, 90},
        {12, 32, 1, 512, 512}, {12, 32, 40, 120, 128},
    };
    const int ncase = quick ? 2 : (int)(sizeof cs / sizeof *cs);
    for (int i = 0; i < ncase; i++) {
        const int heads = cs[i].heads, dh = cs[i].dh, nseq = cs[i].nseq;
        int32_t off[64];
        const int t = gt_make_offsets(off, nseq, cs[i].lo, cs[i].hi);
        const int H = heads * dh;
        const size_t nq = (size_t)t * 3 * H, no = (size_t)t * H;
        uint16_t *qu = malloc(2 * nq), *ou = malloc(2 * no);
        float *qkv = malloc(sizeof(float) * nq), *out = malloc(sizeof(float) * no);
        double *ref = malloc(sizeof(double) * no);
        rand16(qu, qkv, nq, -2.5f, 2.5f, dt);
        gt_attention_ref(qkv, off, nseq, heads, dh, NULL, ref);
        void *dq = gt_dmalloc(2 * nq), *dout = gt_dmalloc(2 * no);
        int32_t *doff = gt_dmalloc(sizeof(int32_t) * (nseq + 1));
        CUDA_OK(cudaMemcpy(dq, qu, 2 * nq, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(doff, off, sizeof(int32_t) * (nseq + 1), cudaMemcpyHostToDevice));
        for (int mode = 0; mode < 2; mode++) {
            if (!kcu_attention_supported((kcu_attn_mode)mode, dh))
                continue;
            const int hint = gt_randint(0, 1) ? 512 : 1;
            poison16(dout, no, dt);
            CUDA_OK(kcu_attention_t(dq, dt, doff, nseq, heads, dh, NULL, 0, hint, sms,
                                    (kcu_attn_mode)mode, dout, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            CUDA_OK(cudaMemcpy(ou, dout, 2 * no, cudaMemcpyDeviceToHost));
            for (size_t j = 0; j < no; j++)
                out[j] = dec16(ou[j], dt);
            const double e = gt_rel_l2(out, ref, no);
            /* the output's rounding (bf16: 2^-9 relative), and the f16 kernel's own 4e-3 */
            const double tol = (mode == KCU_ATTN_FP32 ? 0.0 : 4e-3) + (dt == KCU_DT_F16 ? 1e-3 : 6e-3);
            CHECK(gt_first_nonfinite(out, no) < 0 && e <= tol,
                  "attention %s on %s heads=%d dh=%d nseq=%d t=%d hint=%d: rel err %.3g (<= %.3g)",
                  mode ? "f16" : "fp32", dt_name(dt), heads, dh, nseq, t, hint, e, tol);
        }
        /* the same values in FP32 through kcu_attention_t(KCU_DT_F32): the
         * launcher's FP32 instantiation is kcu_attention_bias itself */
        float *dq32 = gt_dmalloc(sizeof(float) * nq), *do32 = gt_dmalloc(sizeof(float) * no);
        CUDA_OK(cudaMemcpy(dq32, qkv, sizeof(float) * nq, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(do32, 0xff, sizeof(float) * no));
        CUDA_OK(kcu_attention_t(dq32, KCU_DT_F32, doff, nseq, heads, dh, NULL, 0, 512, sms,
                                KCU_ATTN_FP32, do32, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(out, do32, sizeof(float) * no, cudaMemcpyDeviceToHost));
        const double e32 = gt_rel_l2(out, ref, no);
        CHECK(gt_first_nonfinite(out, no) < 0 && e32 <= 5e-6,
              "attention fp32 through kcu_attention_t heads=%d dh=%d: rel err %.3g", heads, dh, e32);
        free(qu), free(ou), free(qkv), free(out), free(ref);
        cudaFree(dq), cudaFree(dout), cudaFree(doff), cudaFree(dq32), cudaFree(do32);
    }
}

static void refuses_bad_arguments(void)
{
    CHECK(kcu_layernorm_16((void *)16, NULL, (float *)16, (float *)16, 4, 8, 1e-12f, (void *)16,
                           KCU_DT_F32, stream) == cudaErrorInvalidValue,
          "layernorm_16 refuses an FP32 type");
    CHECK(kcu_embed_16(NULL, NULL, 0, NULL, NULL, NULL, 8, NULL, KCU_DT_F16, stream) == cudaSuccess,
          "embed_16 of no sequences does nothing");
    (void)cudaGetLastError();
}

int main(int argc, char **argv)
{
    const char *suite = "gpu ops16";
    setvbuf(stdout, NULL, _IOLBF, 0);
    quick = gt_init(argc, argv, suite);
    if (!gt_device_stream(suite, &sms, &stream))
        return gt_finish(suite);
    CHECK(kcu_warm_16() == cudaSuccess, "the 16-bit kernels load on this device");
    refuses_bad_arguments();
    for (int d = 0; d < 2; d++) {
        const kcu_dtype dt = d ? KCU_DT_BF16 : KCU_DT_F16;
        embed16_rounds_the_fp32_sum_once(dt);
        layernorm16_matches_fp64(dt);
        mean_pool16_matches_fp64(dt);
        bias_act16_matches_fp64(dt);
        attention16_matches_fp64(dt);
    }
    cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "no asynchronous error at the end: %s", cudaGetErrorString(e));
    cudaStreamDestroy(stream);
    return gt_finish(suite);
}
