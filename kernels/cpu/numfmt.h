/* numfmt.h: conversions between FP32 and the number formats Mantissa keeps
 * weights in (FP16, BF16, FP8 E4M3, FP8 E5M2, symmetric INT8).
 *
 * Every converter exists twice: a scalar one (plain C, the reference) and an
 * array one for speed. The array ones use AVX2/F16C when the compiler targets
 * them (-march=x86-64-v3) and otherwise loop over the scalar ones; either way
 * they give the same bits as the scalar ones, NaN payloads included, and
 * tests/unit/test_numfmt.c checks that. The scalar encoders use integer
 * arithmetic only, so they do not depend on the FPU rounding mode or on
 * flush-to-zero / denormals-are-zero flags.
 *
 * Encoding (FP32 -> format) rounds to nearest, ties to even, everywhere.
 * Per format:
 *   FP16  IEEE binary16. Overflow -> +/-inf (|x| >= 65520, the midpoint
 *         between 65504 and 65536, rounds to inf). Subnormals kept, signed
 *         zero kept, NaN -> quiet NaN with the sign and the top payload bits.
 *   BF16  top half of FP32. Overflow -> inf as IEEE; FP32 subnormals kept;
 *         NaN -> quiet NaN (never rounded up into inf).
 *   E4M3  OCP FP8 "FN" variant (as ml_dtypes float8_e4m3fn): bias 7, max
 *         finite 448, no infinities, NaN = S.1111.111. We SATURATE: finite
 *         values beyond the range and +/-inf become +/-448. ml_dtypes maps
 *         them to NaN instead; for weights a clipped value is far better than
 *         a NaN that poisons every dot product it touches. NaN -> S.1111.111.
 *   E5M2  IEEE-like FP8: bias 15, inf and NaN exist, max finite 57344.
 *         nf_f32_to_e5m2 overflows to inf like ml_dtypes float8_e5m2;
 *         nf_f32_to_e5m2_sat clamps finite overflow AND +/-inf to +/-57344
 *         (as NVIDIA's __NV_SATFINITE and the OCP spec's saturating mode do).
 *         NaN -> quiet NaN S.11111.10 in both.
 *   INT8  symmetric: q = clamp(round_half_even(x / scale), -127, 127),
 *         x = q * scale. -128 is left out so that the grid is symmetric about
 *         zero: q(-x) == -q(x), and absmax calibration (scale = max|x| / 127)
 *         puts both ends of a channel on the grid; using -128 would only give
 *         the negative side one extra step no positive value can have. A -128
 *         found in a file still decodes (to -128 * scale). NaN encodes to 0
 *         (INT8 has no NaN; a NaN weight is a bug upstream, and 0 is the code
 *         that does least harm).
 *   UINT8 asymmetric (activations only, never stored): x = (q - zp) * scale,
 *         q in [0, 255], zp an integer in [0, 255]; the encoder takes
 *         rcp = 1 / scale (rounded to FP32 once by the caller) and gives
 *         q = clamp(rne(x * rcp) + zp, 0, 255), NaN -> zp (the code of 0):
 *         a multiply, not a divide, since it runs on every activation of
 *         every int8 GEMM (vdivps made it 40% of such a GEMM). Used per token for the
 *         W8A8 GEMM's activations, whose range is often lopsided (GELU
 *         outputs lie in [-0.17, max]): a symmetric grid would spend half
 *         its codes on values that never occur.
 */
#ifndef MT_KERNELS_CPU_NUMFMT_H
#define MT_KERNELS_CPU_NUMFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { NF_F32, NF_F16, NF_BF16, NF_E4M3, NF_E5M2, NF_I8 } nf_format;
#define NF_FORMAT_COUNT 6

/* ---- a float's bits ---------------------------------------------------- */

/* Type-punning through memcpy: the one way C11 allows, which compilers turn
 * into a register move. The one copy of it in the C code. */
static inline uint32_t nf_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float nf_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- scalar conversions (the reference) ------------------------------- */

uint16_t nf_f32_to_f16(float x);
float    nf_f16_to_f32(uint16_t h);

uint16_t nf_f32_to_bf16(float x);
float    nf_bf16_to_f32(uint16_t b);

uint8_t  nf_f32_to_e4m3(float x);      /* saturating, see above */
float    nf_e4m3_to_f32(uint8_t b);

uint8_t  nf_f32_to_e5m2(float x);      /* overflow -> inf */
uint8_t  nf_f32_to_e5m2_sat(float x);  /* overflow and inf -> +/-57344 */
float    nf_e5m2_to_f32(uint8_t b);

int8_t   nf_f32_to_i8(float x, float scale);
float    nf_i8_to_f32(int8_t q, float scale);

uint8_t  nf_f32_to_u8_asym(float x, float rcp, int zp);

/* ---- array conversions (same results, faster) -------------------------- */
/* src and dst must not overlap; any alignment is fine; n may be 0. */

void nf_f32_to_f16_array(const float *src, uint16_t *dst, size_t n);
void nf_f16_to_f32_array(const uint16_t *src, float *dst, size_t n);
void nf_f32_to_bf16_array(const float *src, uint16_t *dst, size_t n);
void nf_bf16_to_f32_array(const uint16_t *src, float *dst, size_t n);
void nf_f32_to_e4m3_array(const float *src, uint8_t *dst, size_t n);
void nf_e4m3_to_f32_array(const uint8_t *src, float *dst, size_t n);
void nf_f32_to_e5m2_array(const float *src, uint8_t *dst, size_t n);
void nf_f32_to_e5m2_sat_array(const float *src, uint8_t *dst, size_t n);
void nf_e5m2_to_f32_array(const uint8_t *src, float *dst, size_t n);
void nf_f32_to_i8_array(const float *src, int8_t *dst, size_t n, float scale);
void nf_i8_to_f32_array(const int8_t *src, float *dst, size_t n, float scale);
void nf_f32_to_u8_asym_array(const float *src, uint8_t *dst, size_t n, float rcp, int zp);

/* "avx2+f16c" or "portable": which array path this build compiled. */
const char *nf_simd_path(void);

/* ---- traits table ------------------------------------------------------ */

/* Decode n elements of src to FP32 and multiply by scale; 1.0f is a plain
 * conversion (bit-exact, no multiply done). */
typedef void (*nf_to_f32_fn)(const void *src, float *dst, size_t n, float scale);
/* Encode src[i] / scale for n elements; 1.0f is a plain conversion. */
typedef void (*nf_from_f32_fn)(const float *src, void *dst, size_t n, float scale);

typedef struct {
    const char    *name;        /* "fp16", "fp8_e4m3", "int8", ... */
    unsigned       bits;        /* bits per element */
    float          max_finite;  /* largest finite value (INT8: 127, in scale steps) */
    bool           has_inf;
    bool           has_nan;
    uint32_t       nonfinite;   /* a code c is NaN or inf iff (c & nonfinite) == nonfinite;
                                 * 0: every code is a number (INT8) */
    nf_to_f32_fn   to_f32;
    nf_from_f32_fn from_f32;    /* E5M2: the IEEE (overflow -> inf) encoder */
} nf_traits;

/* Indexed by nf_format. */
extern const nf_traits nf_traits_table[NF_FORMAT_COUNT];

/* The traits of fmt, or NULL when fmt is not an nf_format. */
const nf_traits *nf_traits_of(nf_format fmt);

/* Whether all n codes of fmt at src are numbers (no NaN, no inf). */
bool nf_all_finite(nf_format fmt, const void *src, size_t n);

#endif
