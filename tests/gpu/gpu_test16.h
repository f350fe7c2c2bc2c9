/* gpu_test16.h: the 16-bit row helpers of the tests/gpu programs that feed
 * kernels f16 or bf16 rows (test_gpu_ops16, test_gpu_q8io): the format's
 * name, encode and decode (kernels/cpu/numfmt.h, round to nearest even), its
 * NaN code for poisoning device buffers, its unit roundoff, and random
 * codes with their decoded values. */
#ifndef MT_TESTS_GPU_TEST16_H
#define MT_TESTS_GPU_TEST16_H

#include "kernels/cpu/numfmt.h"
#include "kernels/cuda/kcu.h"
#include "tests/gpu/gpu_test.h"

static inline const char *dt_name(kcu_dtype dt)
{
    return dt == KCU_DT_F16 ? "f16" : "bf16";
}

static inline uint16_t enc16(float x, kcu_dtype dt)
{
    return dt == KCU_DT_F16 ? nf_f32_to_f16(x) : nf_f32_to_bf16(x);
}

static inline float dec16(uint16_t u, kcu_dtype dt)
{
    return dt == KCU_DT_F16 ? nf_f16_to_f32(u) : nf_bf16_to_f32(u);
}

/* the NaN code each format is poisoned with */
static inline uint16_t nan16(kcu_dtype dt)
{
    return dt == KCU_DT_F16 ? 0x7e00 : 0x7fc0;
}

/* Unit roundoff of the 16-bit format: half an ulp, relative. */
static inline double eps16(kcu_dtype dt)
{
    return dt == KCU_DT_F16 ? 0x1p-11 : 0x1p-8;
}

/* n 16-bit NaN codes into device memory d (written on the legacy stream:
 * see gt_blocking_stream_note). */
static inline void poison16(void *d, size_t n, kcu_dtype dt)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = nan16(dt);
    (void)cudaMemcpy(d, h, sizeof(uint16_t) * n, cudaMemcpyHostToDevice);
    free(h);
}

/* Random 16-bit codes of values in [lo, hi) and their decoded floats. */
static inline void rand16(uint16_t *u, float *f, size_t n, float lo, float hi, kcu_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        u[i] = enc16(gt_unif(lo, hi), dt);
        f[i] = dec16(u[i], dt);
    }
}

#endif
