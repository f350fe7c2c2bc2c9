/* bench/int8_remedies.c: what each remedy for int8 on CPUs without VNNI
 * does to the vectors, measured on a real model: the int8 (or int8g)
 * variant's mean and least cosine to FP32, and STS-B Spearman, over the
 * STS-B test sentences, with its GEMMs computed as each remedy computes
 * them:
 *
 *   exact      our kernels: uint8 activations (asymmetric, 255 steps per
 *              token or group) x int8 weights, exact int32 sums
 *   saturate   what oneDNN's int8 matmul computed without VNNI: the same
 *              codes, but each pair of products summed into 16 bits with
 *              saturation (vpmaddubsw), as int8 ran on AVX2 before
 *   act7       7-bit activations (127 steps): vpmaddubsw cannot saturate
 *   sym8       symmetric int8 activations (absmax / 127, no zero point) with
 *              the sign moved onto the weight, as llama.cpp's Q8_0 does
 *   w7         7-bit weights (codes halved to +-64, scale doubled): the
 *              remedy oneDNN applies to its int8 convolutions
 *
 * Each remedy's GEMM is computed here, in exact integer arithmetic on the
 * remedy's codes (plus the saturation for "saturate"), through a backend
 * that wraps the CPU backend's int8 weights; everything else is the CPU
 * backend's. The speed of each remedy is bench/int8_kernels.c's: act7 and
 * w7 run oneDNN's u8 x s8 GEMM, sym8 the sign form of our AVX2 kernel.
 *
 *   make build/release/bench/int8_remedies
 *   build/release/bench/int8_remedies MODEL_DIR STS_FILE [int8|int8g] [remedy ...] [-nN]
 *   (-nN: the first N sentences only, for a large model)
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/metrics.h"
#include "engine/model.h"
#include "engine/quant/quant.h"

typedef enum { R_EXACT, R_SATURATE, R_ACT7, R_SYM8, R_W7, R_COUNT } remedy;
static const char *const rnames[R_COUNT] = {"exact", "saturate", "act7", "sym8", "w7"};

/* An int8 weight as this backend keeps it: the codes (the remedy's), the
 * scales, the smoothing, and the CPU backend's weight for nothing else. */
typedef struct {
    mt_weight pub;
    int g, nb;          /* group size along K, groups */
    int8_t *codes;      /* (n, k) */
    float *scale;       /* (n, nb) */
    float *in_div;      /* k, or NULL */
} rweight;

static const mt_backend_ops *cpu_ops;
static remedy cur;

static bool mine(const mt_weight *w)
{
    return w->prec == MT_PREC_INT8 || w->prec == MT_PREC_INT8G;
}

static mt_status r_upload(mt_backend *be, mt_precision p, int n, int k, const void *data,
                          const float *scales, mt_weight **out, mt_err *err)
{
    if (p != MT_PREC_INT8 && p != MT_PREC_INT8G)
        return cpu_ops->weight_upload(be, p, n, k, data, scales, out, err);
    rweight *w = calloc(1, sizeof *w);
    const int g = mt_prec(p)->group > 0 && mt_prec(p)->group < k ? mt_prec(p)->group : k;
    w->pub = (mt_weight){p, n, k, NULL, NULL, (size_t)n * k};
    w->g = g, w->nb = (k + g - 1) / g;
    w->codes = malloc((size_t)n * k);
    w->scale = malloc(sizeof(float) * (size_t)n * w->nb);
    memcpy(w->codes, data, (size_t)n * k);
    memcpy(w->scale, scales, sizeof(float) * (size_t)n * w->nb);
    if (cur == R_W7) /* halve the codes to +-64, double the scales */
        for (size_t i = 0; i < (size_t)n * k; i++)
            w->codes[i] = (int8_t)lrintf(w->codes[i] * 0.5f);
    if (cur == R_W7)
        for (size_t i = 0; i < (size_t)n * w->nb; i++)
            w->scale[i] *= 2.0f;
    *out = &w->pub;
    return MT_OK;
}

static void r_destroy(mt_backend *be, mt_weight *wt)
{
    if (!wt || !mine(wt)) {
        cpu_ops->weight_destroy(be, wt);
        return;
    }
    rweight *w = (rweight *)wt;
    free(w->codes), free(w->scale), free(w->in_div), free(w);
}

static mt_status r_smooth(mt_backend *be, mt_weight *wt, const float *inv_s, mt_err *err)
{
    rweight *w = (rweight *)wt;
    w->in_div = malloc(sizeof(float) * wt->k);
    memcpy(w->in_div, inv_s, sizeof(float) * wt->k);
    return MT_OK;
}

/* One run of len values onto the remedy's activation grid: codes a[] (the
 * value is (a - zp) * s) and their scale and zero point. */
static void quant_run(const float *x, int len, int16_t *a, float *s, int *zp)
{
    float lo = 0, hi = 0, amax = 0;
    for (int i = 0; i < len; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    }
    if (cur == R_SYM8) {
        *s = amax > 0 ? amax / 127.0f : 1.0f;
        *zp = 0;
        for (int i = 0; i < len; i++)
            a[i] = (int16_t)lrintf(x[i] / *s);
        return;
    }
    const float steps = cur == R_ACT7 ? 127.0f : 255.0f;
    float sc = (hi - lo) / steps;
    if (!(sc > 0))
        sc = 1.0f;
    float z = rintf(-lo / sc);
    z = z < 0 ? 0 : z > steps ? steps : z;
    *s = sc, *zp = (int)z;
    for (int i = 0; i < len; i++) {
        float q = rintf(x[i] * (1.0f / sc)) + z;
        a[i] = (int16_t)(q < 0 ? 0 : q > steps ? steps : q);
    }
}

/* The int32 sum of one group: a (codes, zero point removed after) times w;
 * for "saturate", pairs of u8 x s8 products summed into 16 bits first. */
static long group_sum(const int16_t *a, const int8_t *w, int len, int zp)
{
    long acc = 0, wsum = 0;
    if (cur == R_SATURATE) {
        for (int i = 0; i < len; i += 2) {
            long t = (long)a[i] * w[i] + (i + 1 < len ? (long)a[i + 1] * w[i + 1] : 0);
            acc += t > 32767 ? 32767 : t < -32768 ? -32768 : t;
        }
    } else {
        for (int i = 0; i < len; i++)
            acc += (long)a[i] * w[i];
    }
    for (int i = 0; i < len; i++)
        wsum += w[i];
    return acc - (long)zp * wsum;
}

static float gelu(float v)
{
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

static mt_status r_gemm(mt_backend *be, const float *x, int m, const mt_weight *wt,
                        const float *bias, mt_act act, float *y, mt_err *err)
{
    if (!mine(wt))
        return cpu_ops->gemm(be, x, m, wt, bias, act, y, err);
    const rweight *w = (const rweight *)wt;
    const int n = wt->n, k = wt->k;
#pragma omp parallel for schedule(dynamic, 1)
    for (int r = 0; r < m; r++) {
        float *xr = malloc(sizeof(float) * k), *sx = malloc(sizeof(float) * w->nb);
        int16_t *a = malloc(sizeof(int16_t) * k);
        int *zp = malloc(sizeof(int) * w->nb);
        for (int j = 0; j < k; j++)
            xr[j] = x[(size_t)r * k + j] * (w->in_div ? w->in_div[j] : 1.0f);
        for (int b = 0; b < w->nb; b++) {
            const int j0 = b * w->g, len = k - j0 < w->g ? k - j0 : w->g;
            quant_run(xr + j0, len, a + j0, sx + b, zp + b);
        }
        for (int c = 0; c < n; c++) {
            float acc = 0;
            for (int b = 0; b < w->nb; b++) {
                const int j0 = b * w->g, len = k - j0 < w->g ? k - j0 : w->g;
                const long s = group_sum(a + j0, w->codes + (size_t)c * k + j0, len, zp[b]);
                acc += (float)s * sx[b] * w->scale[(size_t)c * w->nb + b];
            }
            acc += bias ? bias[c] : 0.0f;
            y[(size_t)r * n + c] = act == MT_ACT_GELU ? gelu(acc) : acc;
        }
        free(xr), free(sx), free(a), free(zp);
    }
    return MT_OK;
}

/* The unique sentences of an STS-B file, in order of first sight. */
static int unique_sentences(const mt_sts *s, const char ***out)
{
    const char **u = malloc(sizeof(char *) * 2 * s->n);
    int n = 0;
    for (size_t i = 0; i < 2 * s->n; i++) {
        const char *t = i % 2 ? s->s2[i / 2] : s->s1[i / 2];
        int seen = 0;
        for (int j = 0; j < n && !seen; j++)
            seen = !strcmp(u[j], t);
        if (!seen)
            u[n++] = t;
    }
    *out = u;
    return n;
}

/* Embeds texts in batches of 32 into out (n x hidden). */
static int embed_all(mt_model *m, const char **texts, int n, float *out)
{
    mt_err err;
    const int h = m->info.hidden;
    for (int i = 0; i < n; i += 32) {
        const int b = n - i < 32 ? n - i : 32;
        if (mt_model_embed_texts(m, texts + i, NULL, b, out + (size_t)i * h, NULL, &err) !=
            MT_OK) {
            fprintf(stderr, "int8_remedies: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* STS-B Spearman (x100) of vectors of the pairs, looked up among texts. */
static double spearman(const mt_sts *s, const char **texts, int n, const float *v, int h)
{
    double *pred = malloc(sizeof(double) * s->n);
    for (size_t i = 0; i < s->n; i++) {
        int a = 0, b = 0;
        while (strcmp(texts[a], s->s1[i]))
            a++;
        while (strcmp(texts[b], s->s2[i]))
            b++;
        pred[i] = mt_cosine(v + (size_t)a * h, v + (size_t)b * h, h);
    }
    (void)n;
    const double r = mt_spearman(pred, s->score, s->n) * 100;
    free(pred);
    return r;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR STS_FILE [int8|int8g] [remedy ...]\n", argv[0]);
        return 2;
    }
    mt_err err;
    mt_sts sts;
    if (mt_sts_load(argv[2], &sts, &err) != MT_OK) {
        fprintf(stderr, "int8_remedies: %s\n", err.msg);
        return 1;
    }
    const mt_precision p = argc > 3 && !strcmp(argv[3], "int8g") ? MT_PREC_INT8G : MT_PREC_INT8;
    const char **texts;
    int n = unique_sentences(&sts, &texts), limit = 0;
    for (int i = 4; i < argc; i++)
        if (!strncmp(argv[i], "-n", 2))
            limit = atoi(argv[i] + 2);
    if (limit > 0 && limit < n)
        n = limit;
    mt_backend *cpu;
    if (mt_backend_cpu_create(0, &cpu, &err) != MT_OK)
        return 1;
    cpu_ops = cpu->ops;
    mt_backend_ops ops = *cpu->ops;
    ops.weight_upload = r_upload, ops.weight_destroy = r_destroy;
    ops.weight_set_input_scale = r_smooth, ops.gemm = r_gemm;
    mt_backend wrapped = *cpu;
    wrapped.ops = &ops;
    mt_model_opts o = {.precision = MT_PREC_FP32};
    mt_model *ref;
    if (mt_model_load(argv[1], cpu, &o, &ref, &err) != MT_OK) {
        fprintf(stderr, "int8_remedies: %s\n", err.msg);
        return 1;
    }
    const int h = ref->info.hidden;
    float *vref = malloc(sizeof(float) * (size_t)n * h), *v = malloc(sizeof(float) * n * h);
    if (embed_all(ref, texts, n, vref))
        return 1;
    if (limit)
        printf("%s, %s, the first %d STS-B sentences (no Spearman: not every pair)\n\n", argv[1],
               mt_precision_name(p), n);
    else
        printf("%s, %s, %d STS-B sentences; FP32 Spearman %.2f\n\n", argv[1],
               mt_precision_name(p), n, spearman(&sts, texts, n, vref, h));
    printf("| remedy | mean cosine to FP32 | least | STS-B Spearman x100 |\n|---|---|---|---|\n");
    for (int r = 0; r < R_COUNT; r++) {
        bool want = true, named = false;
        for (int i = 4; i < argc; i++)
            if (strncmp(argv[i], "-n", 2)) {
                named = true;
                want = false;
            }
        for (int i = 4; named && i < argc; i++)
            want |= !strcmp(argv[i], rnames[r]);
        if (!want)
            continue;
        cur = (remedy)r;
        o.precision = p;
        mt_model *m;
        if (mt_model_load(argv[1], &wrapped, &o, &m, &err) != MT_OK) {
            fprintf(stderr, "int8_remedies: %s\n", err.msg);
            return 1;
        }
        if (embed_all(m, texts, n, v))
            return 1;
        const mt_drift d = mt_drift_between(v, vref, n, h);
        if (limit)
            printf("| %s | %.6f | %.6f | - |\n", rnames[r], d.mean_cos, d.min_cos);
        else
            printf("| %s | %.6f | %.6f | %.2f |\n", rnames[r], d.mean_cos, d.min_cos,
                   spearman(&sts, texts, n, v, h));
        fflush(stdout);
        mt_model_free(m);
    }
    mt_model_free(ref);
    free(vref), free(v), free(texts);
    mt_sts_free(&sts);
    mt_backend_destroy(cpu);
    return 0;
}
