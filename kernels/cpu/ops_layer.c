/* ops_layer.c: FP32 CPU kernels for the layer kinds beyond BERT's
 * (models/arch.h's layer description): RMSNorm, the residual add of
 * pre-norm layers, the gated MLP's activation (SwiGLU, GeGLU), rotary
 * position embeddings and the per-head query/key RMSNorm (Qwen3), and the
 * embedding gather from a 16-bit word table (LLM checkpoints' BF16). Plain
 * loops that GCC vectorises, threaded with
 * OpenMP over rows; tests/unit/test_cpu_ops.c checks each against a double
 * twin. The attention's causal and grouped-query modes are in ops.c.
 */
#include "kernels/cpu/ops.h"
#include "kernels/cpu/numfmt.h"

#include <math.h>
#include <stddef.h>

void kc_rmsnorm(const float *x, const float *res, const float *g, int t, int h, float eps,
                float *out)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < t; r++) {
        const float *a = x + (size_t)r * h, *b = res ? res + (size_t)r * h : NULL;
        float *o = out + (size_t)r * h;
        double ss = 0.0; /* in double: the mean square of a few thousand values */
        for (int c = 0; c < h; c++) {
            const float v = b ? a[c] + b[c] : a[c];
            o[c] = v;
            ss += (double)v * v;
        }
        const float inv = (float)(1.0 / sqrt(ss / h + (double)eps));
        for (int c = 0; c < h; c++)
            o[c] = o[c] * inv * g[c];
    }
}

void kc_add(const float *x, const float *y, size_t n, float *out)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] + y[i];
}

void kc_glu(const float *x, int t, int n, bool silu, float *out)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < t; r++) {
        const float *gate = x + (size_t)r * 2 * n, *up = gate + n;
        float *o = out + (size_t)r * n;
        for (int c = 0; c < n; c++) {
            const float a = gate[c];
            const float f = silu ? a / (1.0f + expf(-a)) : kc_gelu1(a);
            o[c] = f * up[c];
        }
    }
}

/* One row of n values: v / sqrt(mean(v^2) + eps) * g, in place. */
static void rms_row(float *v, int n, const float *g, float eps)
{
    double ss = 0.0;
    for (int c = 0; c < n; c++)
        ss += (double)v[c] * v[c];
    const float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int c = 0; c < n; c++)
        v[c] = v[c] * inv * g[c];
}

void kc_qk_rmsnorm(float *qkv, int t, int heads, int kv_heads, int dh, const float *qg,
                   const float *kg, float eps)
{
    const size_t stride = (size_t)(heads + 2 * kv_heads) * dh;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < t; r++) {
        float *row = qkv + (size_t)r * stride;
        for (int hd = 0; hd < heads + kv_heads; hd++) /* Q's heads, then K's */
            rms_row(row + (size_t)hd * dh, dh, hd < heads ? qg : kg, eps);
    }
}

/* The rotation of one head's dh values (pairs d, d + dh/2) by the angles
 * whose cosines and sines are cs, sn. */
static void rotate(float *v, int half, const float *cs, const float *sn)
{
    for (int d = 0; d < half; d++) {
        const float a = v[d], b = v[d + half];
        v[d] = a * cs[d] - b * sn[d];
        v[d + half] = b * cs[d] + a * sn[d];
    }
}

int kc_rope(float *qkv, const int32_t *offsets, int nseq, int heads, int kv_heads, int dh,
            float theta)
{
    if (dh % 2 || dh > 1024)
        return -1;
    const int half = dh / 2, stride = (heads + 2 * kv_heads) * dh;
    /* inv_freq and the angle in float, as transformers computes them (its
     * rotary embedding's FP32 inv_freq times the FP32 position); cos and
     * sin of that float angle in double, then rounded */
    float inv[512];
    for (int d = 0; d < half; d++)
        inv[d] = (float)(1.0 / pow((double)theta, (double)(2 * d) / (double)dh));
#pragma omp parallel for schedule(static)
    for (int s = 0; s < nseq; s++) {
        float cs[512], sn[512];
        for (int i = offsets[s]; i < offsets[s + 1]; i++) {
            const float pos = (float)(i - offsets[s]);
            for (int d = 0; d < half; d++) {
                const float ang = pos * inv[d];
                cs[d] = (float)cos((double)ang);
                sn[d] = (float)sin((double)ang);
            }
            float *row = qkv + (size_t)i * stride;
            for (int hd = 0; hd < heads + kv_heads; hd++) /* Q's heads, then K's */
                rotate(row + (size_t)hd * dh, half, cs, sn);
        }
    }
    return 0;
}

void kc_embed16(const int32_t *ids, const int32_t *offsets, int nseq, const uint16_t *word,
                bool bf16, const float *pos, const float *type0, int h, float *out)
{
#pragma omp parallel for schedule(static)
    for (int s = 0; s < nseq; s++) {
        for (int i = offsets[s]; i < offsets[s + 1]; i++) {
            const uint16_t *w = word + (size_t)ids[i] * h;
            const float *p = pos ? pos + (size_t)(i - offsets[s]) * h : NULL;
            float *o = out + (size_t)i * h;
            for (int c = 0; c < h; c++) {
                const float v = bf16 ? nf_bf16_to_f32(w[c]) : nf_f16_to_f32(w[c]);
                o[c] = p ? v + p[c] + type0[c] : v + type0[c]; /* kc_embed's order */
            }
        }
    }
}
