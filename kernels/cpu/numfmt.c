/* numfmt.c: FP32 <-> FP16 / BF16 / FP8 (E4M3, E5M2) / INT8 conversions and
 * the format traits table. The rules per format are in numfmt.h.
 *
 * Layout: constants, the scalar reference converters, the array converters
 * (an AVX2/F16C body with a scalar tail when the target has them, else a
 * plain loop over the scalar converter), then the traits table.
 *
 * The scalar encoders use one integer rounding routine for every format with
 * a narrower exponent than FP32 (FP16, E4M3, E5M2): it needs no FPU state, and
 * the AVX2 encoders are the same arithmetic lane by lane, so the two paths
 * agree bit for bit. The FP16 array path uses the F16C instructions instead,
 * which makes the FP16 array-vs-scalar test a check of that routine against
 * the hardware.
 */
#include "kernels/cpu/numfmt.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define NF_X86_SIMD 1
#else
#define NF_X86_SIMD 0
#endif

/* ======================================================================== */
/* bit helpers                                                              */
/* ======================================================================== */

#define NF_F32_ABS   0x7fffffffu
#define NF_F32_INF   0x7f800000u
#define NF_F32_QNAN  0x7fc00000u

/* Clamp points, as FP32 bit patterns of the magnitude. Clamping |x| to them
 * before rounding gives the right code for everything above: 2^16 rounds to
 * the inf code of FP16 / E5M2, 448 and 57344 are the saturation values. */
#define NF_F32_65536   0x47800000u  /* 65536.0f  */
#define NF_F32_448     0x43e00000u  /* 448.0f    */
#define NF_F32_57344   0x47600000u  /* 57344.0f  */

/* Rounds a non-negative, non-NaN FP32 magnitude (bits a) to nearest-even in
 * a binary format with m explicit mantissa bits and exponent bias `bias`
 * (whose exponent range is inside FP32's), returning the code exp<<m | mant.
 * A carry out of the mantissa moves to the next exponent, which is how
 * rounding up to the next binade, and to inf, happens; the caller clamps a
 * first so that the result stays within the format's codes. Shared by FP16,
 * E4M3 and E5M2 so that there is one rounding routine to get right. */
static inline uint32_t nf__round_mag(uint32_t a, uint32_t m, uint32_t bias)
{
    const uint32_t sh = 23u - m;                         /* mantissa bits dropped */
    const uint32_t min_normal = (128u - bias) << 23;     /* FP32 bits of 2^(1-bias) */

    if (a >= min_normal) {
        /* Rebias the exponent, then add half an ulp (minus one, plus the
         * kept lsb: so an exact tie carries only when the lsb is odd). */
        uint32_t odd = (a >> sh) & 1u;
        a -= (127u - bias) << 23;
        return (a + (1u << (sh - 1)) - 1u + odd) >> sh;
    }
    /* Below the smallest normal: the code is |x| / 2^(1-bias-m), rounded.
     * With the implicit bit, |x| = mant * 2^(e-150), so that is mant shifted
     * right by (128-bias-e) + sh. Beyond 24 bits everything is under half
     * the smallest subnormal (FP32 zero and subnormals land here too). */
    uint32_t e = a >> 23;
    uint32_t shift = (128u - bias - e) + sh;
    if (shift > 24u)
        return 0;
    uint32_t mant = (a & 0x007fffffu) | 0x00800000u;
    uint32_t odd = (mant >> shift) & 1u;
    return (mant + (1u << (shift - 1)) - 1u + odd) >> shift;
}

/* ======================================================================== */
/* scalar converters                                                        */
/* ======================================================================== */

/* FP32 -> FP16. NaN keeps its sign and top payload bits and gets the quiet
 * bit, which is what the F16C instruction does, so both paths agree. */
uint16_t nf_f32_to_f16(float x)
{
    uint32_t u = nf_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & NF_F32_ABS;

    if (a > NF_F32_INF)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
    if (a > NF_F32_65536)
        a = NF_F32_65536;
    return (uint16_t)(sign | nf__round_mag(a, 10, 15));
}

/* FP16 -> FP32, exact. NaN gets the quiet bit (as F16C's vcvtph2ps). */
float nf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x03ffu;

    if (e == 0x1fu)
        return nf_float(sign | (m ? NF_F32_QNAN | (m << 13) : NF_F32_INF));
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in FP32 (and normal there) */
        return nf_float(sign | nf_bits((float)m * 0x1p-24f));
    }
    return nf_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* FP32 -> BF16: keep the top 16 bits, rounded. BF16 has FP32's exponent
 * range, so no subnormal or clamp logic: adding half an ulp carries into the
 * exponent and, past the largest finite value, into inf, as IEEE rounding
 * wants. NaN is handled first so that a payload in the low bits cannot be
 * rounded up into the inf pattern. */
uint16_t nf_f32_to_bf16(float x)
{
    uint32_t u = nf_bits(x);

    if ((u & NF_F32_ABS) > NF_F32_INF)
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* BF16 -> FP32: exact, bit patterns (NaN payloads included) carried over. */
float nf_bf16_to_f32(uint16_t b)
{
    return nf_float((uint32_t)b << 16);
}

/* FP32 -> E4M3 (OCP FN), saturating: |x| (inf included) is clamped to 448
 * before rounding; see numfmt.h for why we clamp where ml_dtypes gives NaN. */
uint8_t nf_f32_to_e4m3(float x)
{
    uint32_t u = nf_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & NF_F32_ABS;

    if (a > NF_F32_INF)
        return (uint8_t)(sign | 0x7fu);
    if (a > NF_F32_448)
        a = NF_F32_448;
    return (uint8_t)(sign | nf__round_mag(a, 3, 7));
}

/* E4M3 -> FP32, exact. S.1111.111 is NaN (there is no inf). */
float nf_e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t r = b & 0x7fu;

    if (r == 0x7fu)
        return nf_float(sign | NF_F32_QNAN);
    if (r < 8u)   /* zero or subnormal: r * 2^-9 */
        return nf_float(sign | nf_bits((float)r * 0x1p-9f));
    return nf_float(sign | ((r << 20) + (120u << 23)));
}

/* Shared body of the two E5M2 encoders; clamp_bits decides what overflow
 * becomes (65536 rounds to the inf code, 57344 is the largest finite). */
static inline uint8_t nf__f32_to_e5m2_clamped(float x, uint32_t clamp_bits)
{
    uint32_t u = nf_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & NF_F32_ABS;

    if (a > NF_F32_INF)
        return (uint8_t)(sign | 0x7eu);
    if (a > clamp_bits)
        a = clamp_bits;
    return (uint8_t)(sign | nf__round_mag(a, 2, 15));
}

/* FP32 -> E5M2 with IEEE overflow to inf, as ml_dtypes float8_e5m2. */
uint8_t nf_f32_to_e5m2(float x)
{
    return nf__f32_to_e5m2_clamped(x, NF_F32_65536);
}

/* FP32 -> E5M2 for quantisation: overflow and inf clamp to +/-57344. */
uint8_t nf_f32_to_e5m2_sat(float x)
{
    return nf__f32_to_e5m2_clamped(x, NF_F32_57344);
}

/* E5M2 -> FP32: E5M2 is the top byte of an FP16, so decode it as one. */
float nf_e5m2_to_f32(uint8_t b)
{
    return nf_f16_to_f32((uint16_t)(b << 8));
}

/* Round half to even of v for |v| <= 256 (the INT8 encoders clamp first),
 * with floorf rather than rintf so that the result does not depend on the
 * FPU rounding mode (the AVX2 paths name theirs in the instruction);
 * v - floorf(v) is exact there. */
static inline float nf__rne_small(float v)
{
    float r = floorf(v);
    float d = v - r;
    if (d > 0.5f || (d == 0.5f && ((int32_t)r & 1)))
        r += 1.0f;
    return r;
}

/* FP32 -> asymmetric UINT8 activation code (numfmt.h). */
uint8_t nf_f32_to_u8_asym(float x, float rcp, int zp)
{
    float v = x * rcp;

    if (v != v)
        return (uint8_t)zp;
    /* clamp before rounding, to the range that can reach a code at all */
    if (v > 256.0f)
        v = 256.0f;
    if (v < -256.0f)
        v = -256.0f;
    float q = nf__rne_small(v) + (float)zp;
    if (q > 255.0f)
        q = 255.0f;
    if (q < 0.0f)
        q = 0.0f;
    return (uint8_t)(int32_t)q;
}

/* FP32 -> symmetric INT8 code. */
int8_t nf_f32_to_i8(float x, float scale)
{
    float v = x / scale;

    if (v != v)
        return 0;
    if (v > 127.0f)
        v = 127.0f;
    if (v < -127.0f)
        v = -127.0f;
    return (int8_t)(int32_t)nf__rne_small(v);
}

/* INT8 code -> FP32 value. */
float nf_i8_to_f32(int8_t q, float scale)
{
    return (float)q * scale;
}

/* ======================================================================== */
/* array converters                                                         */
/* ======================================================================== */

#if NF_X86_SIMD

/* Lets tests and logs say which array path was compiled in. */
const char *nf_simd_path(void)
{
    return "avx2+f16c";
}

/* nf__round_mag on 8 lanes: both branches computed, the subnormal one
 * chosen where a < the smallest normal. Shifts of 32 or more give 0 in
 * srlv/sllv, which keeps the unused branch harmless. */
static inline __m256i nf__round_mag_v(__m256i a, uint32_t m, uint32_t bias)
{
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i vsh = _mm256_set1_epi32((int)(23u - m));
    const __m256i min_normal = _mm256_set1_epi32((int)((128u - bias) << 23));

    __m256i odd = _mm256_and_si256(_mm256_srlv_epi32(a, vsh), one);
    __m256i nrm = _mm256_sub_epi32(a, _mm256_set1_epi32((int)((127u - bias) << 23)));
    nrm = _mm256_add_epi32(nrm, _mm256_set1_epi32((int)((1u << (22u - m)) - 1u)));
    nrm = _mm256_srlv_epi32(_mm256_add_epi32(nrm, odd), vsh);

    __m256i shift = _mm256_sub_epi32(_mm256_set1_epi32((int)(128u - bias + 23u - m)),
                                     _mm256_srli_epi32(a, 23));
    __m256i mant = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x007fffff)),
                                   _mm256_set1_epi32(0x00800000));
    __m256i sodd = _mm256_and_si256(_mm256_srlv_epi32(mant, shift), one);
    __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one));
    __m256i sub = _mm256_add_epi32(mant, _mm256_sub_epi32(half, one));
    sub = _mm256_srlv_epi32(_mm256_add_epi32(sub, sodd), shift);

    __m256i is_sub = _mm256_cmpgt_epi32(min_normal, a);
    return _mm256_blendv_epi8(nrm, sub, is_sub);
}

/* Stores the low byte of each of 8 int32 lanes as 8 consecutive bytes. */
static inline void nf__store_low_bytes(void *dst, __m256i v)
{
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1,
                                          -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i b = _mm256_shuffle_epi8(v, pick);
    __m128i lo = _mm256_castsi256_si128(b);
    __m128i hi = _mm256_extracti128_si256(b, 1);
    _mm_storel_epi64((__m128i *)dst, _mm_unpacklo_epi32(lo, hi));
}

/* The FP8 encoders' vector body: the scalar ones lane by lane (clamp, NaN
 * code, sign). Returns how many elements it did (a multiple of 8). */
static inline size_t nf__enc8_v(const float *src, uint8_t *dst, size_t n, uint32_t m,
                                uint32_t bias, uint32_t clamp_bits, uint32_t nan_code)
{
    const __m256i absmask = _mm256_set1_epi32((int)NF_F32_ABS);
    const __m256i inf = _mm256_set1_epi32((int)NF_F32_INF);
    const __m256i clamp = _mm256_set1_epi32((int)clamp_bits);
    const __m256i nan = _mm256_set1_epi32((int)nan_code);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i a = _mm256_and_si256(u, absmask);
        __m256i is_nan = _mm256_cmpgt_epi32(a, inf);
        __m256i r = nf__round_mag_v(_mm256_min_epi32(a, clamp), m, bias);
        r = _mm256_blendv_epi8(r, nan, is_nan);
        r = _mm256_or_si256(r, _mm256_srli_epi32(_mm256_andnot_si256(absmask, u), 24));
        nf__store_low_bytes(dst + i, r);
    }
    return i;
}

/* F16C does FP32 -> FP16 in hardware with the rounding named in the
 * instruction (nearest-even), independent of MXCSR. */
void nf_f32_to_f16_array(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = nf_f32_to_f16(src[i]);
}

/* F16C decode: exact, 8 per instruction. */
void nf_f16_to_f32_array(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = nf_f16_to_f32(src[i]);
}

/* x86-64-v3 has no BF16 instructions: the scalar integer rounding on 8
 * lanes. */
void nf_f32_to_bf16_array(const float *src, uint16_t *dst, size_t n)
{
    const __m256i absmask = _mm256_set1_epi32((int)NF_F32_ABS);
    const __m256i inf = _mm256_set1_epi32((int)NF_F32_INF);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i round = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(round, _mm256_and_si256(hi, one)));
        r = _mm256_srli_epi32(r, 16);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), is_nan);
        /* 8 x u32 (each < 2^16) -> 8 x u16: packus works per 128-bit lane,
         * so gather qwords 0 and 2 afterwards. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; i++)
        dst[i] = nf_f32_to_bf16(src[i]);
}

/* Widen and shift: BF16 is the top half of an FP32. */
void nf_bf16_to_f32_array(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    for (; i < n; i++)
        dst[i] = nf_bf16_to_f32(src[i]);
}

/* The hot loop of FP8 quantisation. */
void nf_f32_to_e4m3_array(const float *src, uint8_t *dst, size_t n)
{
    size_t i = nf__enc8_v(src, dst, n, 3, 7, NF_F32_448, 0x7f);
    for (; i < n; i++)
        dst[i] = nf_f32_to_e4m3(src[i]);
}

/* Dequantisation of FP8 weights: normals by moving the bits into FP32
 * position and rebiasing, subnormals as r * 2^-9, NaN patched in. */
void nf_e4m3_to_f32_array(const uint8_t *src, float *dst, size_t n)
{
    const __m256i signmask = _mm256_set1_epi32(0x80);
    const __m256i restmask = _mm256_set1_epi32(0x7f);
    const __m256i rebias = _mm256_set1_epi32((int)(120u << 23));
    const __m256i eight = _mm256_set1_epi32(8);
    const __m256i qnan = _mm256_set1_epi32((int)NF_F32_QNAN);
    const __m256 sub_ulp = _mm256_set1_ps(0x1p-9f);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(src + i)));
        __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, signmask), 24);
        __m256i r = _mm256_and_si256(b, restmask);
        __m256i v = _mm256_add_epi32(_mm256_slli_epi32(r, 20), rebias);
        __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(r), sub_ulp));
        v = _mm256_blendv_epi8(v, sub, _mm256_cmpgt_epi32(eight, r));
        v = _mm256_blendv_epi8(v, qnan, _mm256_cmpeq_epi32(r, restmask));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_or_si256(v, sign));
    }
    for (; i < n; i++)
        dst[i] = nf_e4m3_to_f32(src[i]);
}

/* E5M2 encoders: the shared FP8 body with E5M2's clamp points. */
void nf_f32_to_e5m2_array(const float *src, uint8_t *dst, size_t n)
{
    size_t i = nf__enc8_v(src, dst, n, 2, 15, NF_F32_65536, 0x7e);
    for (; i < n; i++)
        dst[i] = nf_f32_to_e5m2(src[i]);
}

void nf_f32_to_e5m2_sat_array(const float *src, uint8_t *dst, size_t n)
{
    size_t i = nf__enc8_v(src, dst, n, 2, 15, NF_F32_57344, 0x7e);
    for (; i < n; i++)
        dst[i] = nf_f32_to_e5m2_sat(src[i]);
}

/* E5M2 is the top byte of an FP16, so F16C decodes it exactly. */
void nf_e5m2_to_f32_array(const uint8_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(src + i))), 8);
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        dst[i] = nf_e5m2_to_f32(src[i]);
}

/* INT8 quantisation: the same divide, NaN-to-0, clamp and round as the
 * scalar one, with the rounding mode fixed in the instruction. */
void nf_f32_to_i8_array(const float *src, int8_t *dst, size_t n, float scale)
{
    const __m256 vscale = _mm256_set1_ps(scale);
    const __m256 lo = _mm256_set1_ps(-127.0f);
    const __m256 hi = _mm256_set1_ps(127.0f);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_div_ps(_mm256_loadu_ps(src + i), vscale);
        v = _mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), v);  /* NaN -> 0 */
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        nf__store_low_bytes(dst + i, _mm256_cvtps_epi32(v));
    }
    for (; i < n; i++)
        dst[i] = nf_f32_to_i8(src[i], scale);
}

/* INT8 dequantisation, q * scale. */
void nf_i8_to_f32_array(const int8_t *src, float *dst, size_t n, float scale)
{
    const __m256 vscale = _mm256_set1_ps(scale);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtepi32_ps(q), vscale));
    }
    for (; i < n; i++)
        dst[i] = nf_i8_to_f32(src[i], scale);
}

/* UINT8 asymmetric quantisation, as nf_f32_to_u8_asym. */
void nf_f32_to_u8_asym_array(const float *src, uint8_t *dst, size_t n, float rcp, int zp)
{
    const __m256 vrcp = _mm256_set1_ps(rcp);
    const __m256 vzp = _mm256_set1_ps((float)zp);
    const __m256 lo = _mm256_set1_ps(-256.0f), hi = _mm256_set1_ps(256.0f);
    const __m256 qlo = _mm256_setzero_ps(), qhi = _mm256_set1_ps(255.0f);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + i), vrcp);
        v = _mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), v); /* NaN -> 0 -> zp */
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, vzp), qlo), qhi);
        nf__store_low_bytes(dst + i, _mm256_cvtps_epi32(v));
    }
    for (; i < n; i++)
        dst[i] = nf_f32_to_u8_asym(src[i], rcp, zp);
}

#else /* portable: the same array API on any target, as loops over the
       * scalar converters (inlined and branch-light, so the compiler may
       * vectorise them where it can) */

/* Lets tests and logs say which array path was compiled in. */
const char *nf_simd_path(void)
{
    return "portable";
}

void nf_f32_to_f16_array(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f32_to_f16(src[i]);
}

void nf_f16_to_f32_array(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f16_to_f32(src[i]);
}

void nf_f32_to_bf16_array(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f32_to_bf16(src[i]);
}

void nf_bf16_to_f32_array(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_bf16_to_f32(src[i]);
}

void nf_f32_to_e4m3_array(const float *src, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f32_to_e4m3(src[i]);
}

void nf_e4m3_to_f32_array(const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_e4m3_to_f32(src[i]);
}

void nf_f32_to_e5m2_array(const float *src, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f32_to_e5m2(src[i]);
}

void nf_f32_to_e5m2_sat_array(const float *src, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f32_to_e5m2_sat(src[i]);
}

void nf_e5m2_to_f32_array(const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_e5m2_to_f32(src[i]);
}

void nf_f32_to_i8_array(const float *src, int8_t *dst, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f32_to_i8(src[i], scale);
}

void nf_i8_to_f32_array(const int8_t *src, float *dst, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_i8_to_f32(src[i], scale);
}

void nf_f32_to_u8_asym_array(const float *src, uint8_t *dst, size_t n, float rcp, int zp)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = nf_f32_to_u8_asym(src[i], rcp, zp);
}

#endif /* NF_X86_SIMD */

/* ======================================================================== */
/* traits table                                                             */
/* ======================================================================== */

/* Elements converted per step when a scale has to be applied before
 * encoding (the scaled copy lives on the stack). */
#define NF_SCALE_CHUNK 256

/* Encodes n values that need no scaling with fmt's array encoder. */
static void nf__encode_plain(nf_format fmt, const float *src, void *dst, size_t n)
{
    switch (fmt) {
    case NF_F32:  memcpy(dst, src, n * sizeof(float)); break;
    case NF_F16:  nf_f32_to_f16_array(src, dst, n); break;
    case NF_BF16: nf_f32_to_bf16_array(src, dst, n); break;
    case NF_E4M3: nf_f32_to_e4m3_array(src, dst, n); break;
    case NF_E5M2: nf_f32_to_e5m2_array(src, dst, n); break;
    case NF_I8:   nf_f32_to_i8_array(src, dst, n, 1.0f); break;
    }
}

/* Decodes n values with fmt's array decoder, no scaling. */
static void nf__decode_plain(nf_format fmt, const void *src, float *dst, size_t n)
{
    switch (fmt) {
    case NF_F32:  memcpy(dst, src, n * sizeof(float)); break;
    case NF_F16:  nf_f16_to_f32_array(src, dst, n); break;
    case NF_BF16: nf_bf16_to_f32_array(src, dst, n); break;
    case NF_E4M3: nf_e4m3_to_f32_array(src, dst, n); break;
    case NF_E5M2: nf_e5m2_to_f32_array(src, dst, n); break;
    case NF_I8:   nf_i8_to_f32_array(src, dst, n, 1.0f); break;
    }
}

/* The traits encoders share this: a scale of 1 goes straight to the array
 * encoder (bit-exact, NaN payloads untouched); otherwise each chunk is
 * divided by the scale first. INT8 divides inside its own encoder. */
static void nf__encode_scaled(nf_format fmt, const float *src, void *dst, size_t n,
                              float scale)
{
    if (fmt == NF_I8) {
        nf_f32_to_i8_array(src, dst, n, scale);
        return;
    }
    if (scale == 1.0f) {
        nf__encode_plain(fmt, src, dst, n);
        return;
    }
    size_t esize = nf_traits_table[fmt].bits / 8;
    float tmp[NF_SCALE_CHUNK];
    for (size_t i = 0; i < n; i += NF_SCALE_CHUNK) {
        size_t k = n - i < NF_SCALE_CHUNK ? n - i : NF_SCALE_CHUNK;
        for (size_t j = 0; j < k; j++)
            tmp[j] = src[i + j] / scale;
        nf__encode_plain(fmt, tmp, (unsigned char *)dst + i * esize, k);
    }
}

/* The traits decoders share this: decode, then multiply unless scale is 1. */
static void nf__decode_scaled(nf_format fmt, const void *src, float *dst, size_t n,
                              float scale)
{
    if (fmt == NF_I8) {
        nf_i8_to_f32_array(src, dst, n, scale);
        return;
    }
    nf__decode_plain(fmt, src, dst, n);
    if (scale != 1.0f)
        for (size_t i = 0; i < n; i++)
            dst[i] *= scale;
}

/* One pair of wrappers per format, so that the table holds plain function
 * pointers of one type (as ggml's type traits do). */
#define NF_TRAITS_FNS(tag, fmt)                                                      \
    static void nf__##tag##_to_f32(const void *src, float *dst, size_t n, float s)   \
    { nf__decode_scaled(fmt, src, dst, n, s); }                                      \
    static void nf__##tag##_from_f32(const float *src, void *dst, size_t n, float s) \
    { nf__encode_scaled(fmt, src, dst, n, s); }

NF_TRAITS_FNS(f32, NF_F32)
NF_TRAITS_FNS(f16, NF_F16)
NF_TRAITS_FNS(bf16, NF_BF16)
NF_TRAITS_FNS(e4m3, NF_E4M3)
NF_TRAITS_FNS(e5m2, NF_E5M2)
NF_TRAITS_FNS(i8, NF_I8)

const nf_traits nf_traits_table[NF_FORMAT_COUNT] = {
    [NF_F32]  = { "fp32",     32, FLT_MAX,     true,  true,  0x7f800000u, nf__f32_to_f32,  nf__f32_from_f32 },
    [NF_F16]  = { "fp16",     16, 65504.0f,    true,  true,  0x7c00u,     nf__f16_to_f32,  nf__f16_from_f32 },
    [NF_BF16] = { "bf16",     16, 0x1.fep127f, true,  true,  0x7f80u,     nf__bf16_to_f32, nf__bf16_from_f32 },
    [NF_E4M3] = { "fp8_e4m3",  8, 448.0f,      false, true,  0x7fu,       nf__e4m3_to_f32, nf__e4m3_from_f32 },
    [NF_E5M2] = { "fp8_e5m2",  8, 57344.0f,    true,  true,  0x7cu,       nf__e5m2_to_f32, nf__e5m2_from_f32 },
    [NF_I8]   = { "int8",      8, 127.0f,      false, false, 0,           nf__i8_to_f32,   nf__i8_from_f32 },
};

_Static_assert(NF_I8 + 1 == NF_FORMAT_COUNT, "NF_FORMAT_COUNT must follow the nf_format enum");

/* Bounds-checked lookup, for a format number that came from outside. */
const nf_traits *nf_traits_of(nf_format fmt)
{
    if ((unsigned)fmt >= NF_FORMAT_COUNT)
        return NULL;
    return &nf_traits_table[fmt];
}

bool nf_all_finite(nf_format fmt, const void *src, size_t n)
{
    const uint32_t mask = nf_traits_table[fmt].nonfinite;
    if (!mask)
        return true;
    for (size_t i = 0; i < n; i++) {
        uint32_t c;
        switch (nf_traits_table[fmt].bits) {
        case 8: c = ((const uint8_t *)src)[i]; break;
        case 16: c = ((const uint16_t *)src)[i]; break;
        default: c = ((const uint32_t *)src)[i]; break;
        }
        if ((c & mask) == mask)
            return false;
    }
    return true;
}
