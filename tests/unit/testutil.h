/* testutil.h: helpers the numeric unit tests share: a seeded PRNG, random
 * and NaN-poisoned buffers, and the error measure of a kernel against its
 * double-precision twin (a float's bits: nf_bits / nf_float, from
 * kernels/cpu/numfmt.h). Header-only (static): each test is one program. */
#ifndef MT_TESTS_TESTUTIL_H
#define MT_TESTS_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/numfmt.h"

static unsigned long long tu_rng = 0x9e3779b97f4a7c15ULL;

/* Uniform in [-1, 1). */
static inline float frand(void)
{
    tu_rng = tu_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((tu_rng >> 40) / 8388608.0 - 1.0);
}

static inline float *rand_vec(size_t n, float scale)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

/* A buffer of NaN, so that an element a kernel leaves unwritten fails. */
static inline float *poisoned(size_t n)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = NAN;
    return v;
}

/* max |a-b| / max(max |b|, floor): the error relative to the output's scale
 * (FP32 rounding is relative to the magnitudes summed, not to each result,
 * which may cancel to near zero). NaN anywhere -> inf. */
static inline double rel_err(const float *a, const double *b, size_t n, double floor_)
{
    double m = 0, scale = floor_;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e == e))
            return INFINITY;
        if (e > m)
            m = e;
        if (fabs(b[i]) > scale)
            scale = fabs(b[i]);
    }
    return m / scale;
}

#endif
