/* cpu_bench.h: what the CPU kernel benchmarks (bench/int8_kernels.c,
 * bench/int8_avx2_ab.c) share: a clock in seconds, deterministic inputs,
 * and the weight shapes of the two encoders served. Header-only: each
 * benchmark is one program. */
#ifndef MT_BENCH_CPU_BENCH_H
#define MT_BENCH_CPU_BENCH_H

#include <stdlib.h>
#include <time.h>

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

#endif
