/* cpu_bench.h: what the CPU kernel benchmarks (bench/int8_kernels.c,
 * bench/int8_avx2_ab.c, bench/attention.c) share: a clock in seconds, a
 * median, deterministic inputs, the weight shapes of the two encoders
 * served, and a weight quantized to int8 and int8g. Header-only: each
 * benchmark is one program. */
#ifndef MT_BENCH_CPU_BENCH_H
#define MT_BENCH_CPU_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/quant/quant.h"

static inline double bench_clock_s(clockid_t clk)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline double now_s(void)
{
    return bench_clock_s(CLOCK_MONOTONIC);
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* count deterministic values in [-a, a), from seed (an LCG: the same on
 * every machine, so runs compare). */
static inline float *fill(size_t count, float a, unsigned seed)
{
    float *v = malloc(sizeof(float) * (count + 1));
    unsigned s = seed;
    for (size_t i = 0; i < count; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * a;
    }
    return v;
}

/* A weight's shape (n outputs, k inputs) and which GEMM it is. */
typedef struct {
    int n, k;
    const char *what;
} bench_shape;

#define BENCH_MINILM_SHAPES                                                                 \
    {1152, 384, "MiniLM qkv"}, {384, 384, "MiniLM attn out"}, {1536, 384, "MiniLM ffn in"}, \
        {384, 1536, "MiniLM ffn out"}
#define BENCH_MPNET_SHAPES                                                                  \
    {2304, 768, "MPNet qkv"}, {768, 768, "MPNet attn out"}, {3072, 768, "MPNet ffn in"},    \
        {768, 3072, "MPNet ffn out"}

/* One weight of n x k deterministic values, quantized to int8 (codes c8,
 * per-channel scales s8) and to int8g (cg, group scales sg). */
typedef struct {
    float *wf, *s8, *sg;
    int8_t *c8, *cg;
} bench_weight;

/* Makes w; false (the reason on stderr, prefixed by who) when quantizing
 * fails. */
static inline bool bench_weight_make(bench_weight *w, int n, int k, const char *who)
{
    w->wf = fill((size_t)n * k, 0.1f, 7);
    w->c8 = malloc((size_t)n * k), w->cg = malloc((size_t)n * k);
    w->s8 = malloc(sizeof(float) * n);
    w->sg = malloc(sizeof(float) * mt_quant_scale_count(MT_PREC_INT8G, n, k));
    mt_err err;
    if (mt_quantize(w->wf, n, k, MT_PREC_INT8, NULL, w->c8, w->s8, &err) != MT_OK ||
        mt_quantize(w->wf, n, k, MT_PREC_INT8G, NULL, w->cg, w->sg, &err) != MT_OK) {
        fprintf(stderr, "%s: %s\n", who, err.msg);
        return false;
    }
    return true;
}

static inline void bench_weight_free(bench_weight *w)
{
    free(w->wf), free(w->c8), free(w->cg), free(w->s8), free(w->sg);
}

#endif
