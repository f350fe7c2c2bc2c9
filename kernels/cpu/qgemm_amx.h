/* qgemm_amx.h: the AMX tile kernel behind the grouped int8 GEMM ("int8g",
 * kernels/cpu/qgemm_s8.c), internal to kernels/cpu. oneDNN's int8 matmul
 * has no per-K-group scales, so with it each group of K is a batch whose
 * int32 result goes through memory; this kernel keeps each 16 x 64 output
 * block's FP32 sums in L1 and folds every group's int32 tile into them as
 * soon as the tiles have it (AMX for the products, AVX-512 for the
 * scales). Used only where the CPU has AMX-INT8 and AVX-512 and the kernel
 * grants the tile state (kc_amx_available); everywhere else qgemm_s8.c
 * runs the oneDNN form, with the same results to FP32 rounding. */
#ifndef MT_KERNELS_CPU_QGEMM_AMX_H
#define MT_KERNELS_CPU_QGEMM_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* K steps of one tile product, and output columns of one tile. */
#define KC_AMX_KSTEP 64
#define KC_AMX_NCOL 16

/* Whether this CPU and OS run AMX-INT8 and AVX-512 here (checked once;
 * asks the kernel for the tile state). MANTISSA_NO_AMX=1 in the
 * environment says no (tests compare both forms). */
bool kc_amx_available(void);
/* Whether the environment variable name is set to other than "" or "0". */
bool kc_env_says_no(const char *name);

/* The weight's codes (n, k) row-major repacked for the tile kernel, with
 * groups of g (a multiple of KC_AMX_KSTEP) along K: K padded to nb * g and
 * N to a multiple of KC_AMX_NCOL with zero codes. *bytes gets its size.
 * NULL when out of memory. */
int8_t *kc_amx_pack(const int8_t *codes, int n, int k, int g, size_t *bytes);

/* One chunk of rows: y (rows, n; row stride ldy) = for each row r and
 * column c, sum over groups b of (acc_b[r][c] - zp[r][b] * csf[b][c]) *
 * sx[r][b] * gs[b][c], + bias[c] (may be NULL), then GELU when gelu; where
 * acc_b is the int32 product of the uint8 activation codes q (rows padded
 * to a multiple of 16 with any codes; row stride kp = nb * g) and the
 * packed weight's group b. sx / zp are (rows, nb), gs / csf (nb, n). */
void kc_amx_chunk(const uint8_t *q, int rows, int nb, int g, const int8_t *packed, int n,
                  const float *sx, const int32_t *zp, const float *gs, const float *csf,
                  const float *bias, bool gelu, float *y, size_t ldy);

#if defined(__x86_64__) && defined(__GNUC__)
/* Whether AVX-512 F/DQ/BW/VL run here (CPUID and the OS's XCR0), with
 * CPUID leaf 7's ECX / EDX and XCR0 for further feature bits. */
bool kc_cpu_avx512(unsigned *ecx7, unsigned *edx7, uint64_t *xcr0);
#endif
/* kc_cpu_avx512's answer, asked once (false off x86-64). */
bool kc_cpu_has_avx512(void);

/* The same chunk on AVX-512 VNNI (qgemm_vnni.c), from the same packed
 * weight, for CPUs without AMX; n a multiple of 64; kc_vnni_available says whether it may run
 * (MANTISSA_NO_VNNI=1 says no). */
bool kc_vnni_available(void);
void kc_vnni_chunk(const uint8_t *q, int rows, int nb, int g, const int8_t *packed, int n,
                   const float *sx, const int32_t *zp, const float *gs, const float *csf,
                   const float *bias, bool gelu, float *y, size_t ldy);

#endif
