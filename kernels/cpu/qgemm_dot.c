/* qgemm_dot.c: the vector int8 kernels of qgemm_dot.h: the x86 forms and
 * the aarch64 NEON forms, each qgemm_dot_body.h compiled with its own
 * target attribute and vector width, the activation layouts of the 16-bit
 * and sign forms, the weight widened to 16 bits (the W16 and panel forms),
 * and the dispatch by form. */
#include "kernels/cpu/qgemm_dot.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KC_DOT_BUILD 1
#elif defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
#define KC_DOT_NEON 1
/* the sdot form: built for the ARMv8.2 dot product by a target attribute
 * where the compiler takes one (GCC), or where the whole build targets it */
#if defined(__ARM_FEATURE_DOTPROD)
#define KC_DOT_SDOT_TARGET
#elif !defined(__clang__)
#define KC_DOT_SDOT_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#endif

static const char *const dot_names[KC_DOT_COUNT] = {
    "avx512_vnni", "avx512_i16", "avx2_vnni", "avx2_i16",
    "avx2_sign",   "avx2_w16",   "avx2_panel", "avx2_signc", "neon_sdot", "neon_i16"};

const char *kc_dot_name(kc_dot_form form)
{
    return (unsigned)form < KC_DOT_COUNT ? dot_names[form] : "?";
}

bool kc_dot_available(kc_dot_form form)
{
#ifdef KC_DOT_BUILD
    const kc_isa *isa = kc_isa_get();
    switch (form) {
    case KC_DOT_VNNI512:
        return isa->vnni512;
    case KC_DOT_I16_512:
        return isa->avx512;
    case KC_DOT_VNNI256:
        return isa->vnni256;
    case KC_DOT_I16_256:
    case KC_DOT_SIGN256:
    case KC_DOT_W16_256:
    case KC_DOT_PANEL256:
    case KC_DOT_SIGNC256:
        return true; /* the build's floor */
    default:
        return false;
    }
#elif defined(KC_DOT_NEON)
#ifdef KC_DOT_SDOT_TARGET
    if (form == KC_DOT_NEON_SDOT)
        return kc_isa_get()->dotprod;
#endif
    return form == KC_DOT_NEON_I16;
#else
    (void)form;
    return false;
#endif
}

int kc_dot_code_bytes(kc_dot_form form)
{
    return form == KC_DOT_I16_512 || form == KC_DOT_I16_256 || form == KC_DOT_SIGN256 ||
                   form == KC_DOT_W16_256 || form == KC_DOT_PANEL256 ||
                   form == KC_DOT_SIGNC256 || form == KC_DOT_NEON_I16
               ? 2
               : 1;
}

bool kc_dot_relayout_needed(kc_dot_form form)
{
    return form == KC_DOT_W16_256 || form == KC_DOT_SIGNC256;
}

size_t kc_dot_panel_bytes(kc_dot_form form, size_t kp)
{
    return form == KC_DOT_PANEL256 ? 32 * kp : 0;
}

/* The widening of kc_dot_relayout: per 32 bytes of codes, the 16 even
 * codes then the 16 odd ones as int16 (the 16-bit forms' EVEN16 and ODD16
 * of the vector). */
static inline void dot_widen16(const int8_t *src, size_t bytes, int8_t *dst)
{
#if defined(__AVX2__)
    for (size_t i = 0; i < bytes; i += 32) {
        const __m256i v = _mm256_load_si256((const __m256i *)(src + i));
        _mm256_store_si256((__m256i *)(dst + 2 * i),
                           _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8));
        _mm256_store_si256((__m256i *)(dst + 2 * i + 32), _mm256_srai_epi16(v, 8));
    }
#else
    for (size_t i = 0; i < bytes; i += 32) {
        int16_t *d = (int16_t *)(void *)(dst + 2 * i);
        for (int l = 0; l < 16; l++)
            d[l] = src[i + 2 * l], d[16 + l] = src[i + 2 * l + 1];
    }
#endif
}

int8_t *kc_dot_relayout(kc_dot_form form, const int8_t *packed, int n, int nb, int gp,
                        size_t *bytes)
{
    const size_t n16 = (size_t)(n + 15) / 16, steps = (size_t)nb * (size_t)(gp / 64);
    const size_t tb = form == KC_DOT_W16_256 ? 2048 : 1024;
    int8_t *dst = aligned_alloc(64, n16 * steps * tb);
    if (!dst)
        return NULL;
    for (size_t jb = 0; jb < n16; jb++)
        for (size_t st = 0; st < steps; st++) {
            const int8_t *src = packed + (st * n16 + jb) * 1024;
            if (tb == 2048)
                dot_widen16(src, 1024, dst + (jb * steps + st) * tb);
            else
                memcpy(dst + (jb * steps + st) * tb, src, 1024);
        }
    *bytes = n16 * steps * tb;
    return dst;
}

/* 4 bytes at p as one int32 (any alignment), for the broadcasts. */
static inline int32_t kc_dot_ld32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#define DOT_PROD_VNNI 0
#define DOT_PROD_I16 1
#define DOT_PROD_SIGN 2
#define DOT_PROD_W16 3

#ifdef KC_DOT_BUILD

#define DOT_TARGET
#define DOT_W 256
#define DOT_PROD DOT_PROD_SIGN
#define DOT_FN(x) x##_sign256
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_W
#undef DOT_PROD
#undef DOT_FN
#undef DOT_TARGET

#define DOT_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni")))
#define DOT_W 512
#define DOT_PROD DOT_PROD_VNNI
#define DOT_FN(x) x##_vnni512
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_W
#undef DOT_PROD
#undef DOT_FN
#undef DOT_TARGET

#define DOT_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#define DOT_W 512
#define DOT_PROD DOT_PROD_I16
#define DOT_FN(x) x##_i16_512
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_W
#undef DOT_PROD
#undef DOT_FN
#undef DOT_TARGET

#define DOT_TARGET __attribute__((target("avx2,fma,avxvnni")))
#define DOT_W 256
#define DOT_PROD DOT_PROD_VNNI
#define DOT_FN(x) x##_vnni256
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_W
#undef DOT_PROD
#undef DOT_FN
#undef DOT_TARGET

#define DOT_TARGET
#define DOT_W 256
#define DOT_PROD DOT_PROD_I16
#define DOT_FN(x) x##_i16_256
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_W
#undef DOT_PROD
#undef DOT_FN
#undef DOT_TARGET

#define DOT_TARGET
#define DOT_W 256
#define DOT_PROD DOT_PROD_W16
#define DOT_COLS 1
#define DOT_PF 4096
#define DOT_FN(x) x##_w16_256
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_PF
#undef DOT_W
#undef DOT_PROD
#undef DOT_FN
#undef DOT_TARGET

#define DOT_TARGET
#define DOT_W 256
#define DOT_PROD DOT_PROD_SIGN
#define DOT_COLS 1
#define DOT_PF 4096
#define DOT_FN(x) x##_signc256
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_PF
#undef DOT_W
#undef DOT_PROD
#undef DOT_FN
#undef DOT_TARGET

/* The 16-bit forms' layout: each quad of codes (a0, a1, a2, a3) becomes
 * the 16-bit words (a0, a2, a1, a3), the two pairs the kernel broadcasts
 * against the weight's even and odd bytes. kp is a multiple of 64. */
static void prepare_i16(const uint8_t *q, int rows, size_t kp, uint8_t *dst)
{
    const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15,
                                           0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
    const size_t total = (size_t)rows * kp;
    for (size_t i = 0; i < total; i += 16) {
        const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q + i)));
        _mm256_storeu_si256((__m256i *)(dst + 2 * i), _mm256_shuffle_epi8(w, order));
    }
}

static void prepare_sign(const uint8_t *q, int rows, size_t kp, uint8_t *dst)
{
    const size_t total = (size_t)rows * kp;
    const __m128i bias = _mm_set1_epi8((char)0x80);
    for (size_t i = 0; i < total; i += 16) {
        const __m128i s = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(q + i)), bias);
        const __m128i a = _mm_abs_epi8(s);
        _mm_storeu_si128((__m128i *)(dst + 2 * i), _mm_unpacklo_epi32(s, a));
        _mm_storeu_si128((__m128i *)(dst + 2 * i + 16), _mm_unpackhi_epi32(s, a));
    }
}

void kc_dot_prepare(kc_dot_form form, const uint8_t *q, int rows, size_t kp, uint8_t *dst)
{
    if (form == KC_DOT_SIGN256 || form == KC_DOT_SIGNC256)
        prepare_sign(q, rows, kp, dst);
    else if (kc_dot_code_bytes(form) == 2)
        prepare_i16(q, rows, kp, dst);
}

void kc_dot_chunk(kc_dot_form form, const kc_dot_rows *a, const kc_dot_weight *w, int c0,
                  int c1, float *y, size_t ldy)
{
    switch (form) {
    case KC_DOT_VNNI512:
        chunk_vnni512(a, w, c0, c1, y, ldy);
        break;
    case KC_DOT_I16_512:
        chunk_i16_512(a, w, c0, c1, y, ldy);
        break;
    case KC_DOT_VNNI256:
        chunk_vnni256(a, w, c0, c1, y, ldy);
        break;
    case KC_DOT_I16_256:
        chunk_i16_256(a, w, c0, c1, y, ldy);
        break;
    case KC_DOT_SIGN256:
        chunk_sign256(a, w, c0, c1, y, ldy);
        break;
    case KC_DOT_W16_256:
        chunk_w16_256(a, w, c0, c1, y, ldy);
        break;
    case KC_DOT_SIGNC256:
        chunk_signc256(a, w, c0, c1, y, ldy);
        break;
    case KC_DOT_PANEL256: /* one row block: widening in registers costs less */
        if (a->rows > 4)
            chunk_panel_w16_256(a, w, c0, c1, y, ldy);
        else
            chunk_i16_256(a, w, c0, c1, y, ldy);
        break;
    default:
        abort(); /* callers pass a form kc_dot_available allowed */
    }
}

#elif defined(KC_DOT_NEON)

/* vpmaddwd's work on NEON: pairs of 16-bit products summed into 32 bits. */
static inline int32x4_t kc_neon_madd16(int32x4_t a, int32x4_t b)
{
    const int16x8_t x = vreinterpretq_s16_s32(a), y = vreinterpretq_s16_s32(b);
    return vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(y)), vmull_high_s16(x, y));
}

/* The first cnt (1..4, or more for all) lanes of p; the rest zero. */
static inline float32x4_t kc_neon_loadf_n(const float *p, int cnt)
{
    if (cnt >= 4)
        return vld1q_f32(p);
    float t[4] = {0, 0, 0, 0};
    memcpy(t, p, sizeof(float) * (size_t)cnt);
    return vld1q_f32(t);
}

static inline int32x4_t kc_neon_loadi_n(const int32_t *p, int cnt)
{
    if (cnt >= 4)
        return vld1q_s32(p);
    int32_t t[4] = {0, 0, 0, 0};
    memcpy(t, p, sizeof(int32_t) * (size_t)cnt);
    return vld1q_s32(t);
}

static inline void kc_neon_storef_n(float *p, float32x4_t v, int cnt)
{
    if (cnt >= 4) {
        vst1q_f32(p, v);
        return;
    }
    float t[4];
    vst1q_f32(t, v);
    memcpy(p, t, sizeof(float) * (size_t)cnt);
}

/* sdot on the codes shifted to int8 (a - 128): exact, sums of (a - 128) w */
#ifdef KC_DOT_SDOT_TARGET
#define DOT_TARGET KC_DOT_SDOT_TARGET
#define DOT_W 128
#define DOT_PROD DOT_PROD_VNNI
#define DOT_SIGNED_CODES 1
#define DOT_BCAST_XOR 0x80808080u
#define DOT_FN(x) x##_neon_sdot
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_W
#undef DOT_PROD
#undef DOT_SIGNED_CODES
#undef DOT_BCAST_XOR
#undef DOT_FN
#undef DOT_TARGET
#endif

/* every ARMv8 core: 16-bit products, as the x86 16-bit forms */
#define DOT_TARGET
#define DOT_W 128
#define DOT_PROD DOT_PROD_I16
#define DOT_BCAST_XOR 0u
#define DOT_FN(x) x##_neon_i16
#include "kernels/cpu/qgemm_dot_body.h"
#undef DOT_W
#undef DOT_PROD
#undef DOT_BCAST_XOR
#undef DOT_FN
#undef DOT_TARGET

void kc_dot_prepare(kc_dot_form form, const uint8_t *q, int rows, size_t kp, uint8_t *dst)
{
    if (form != KC_DOT_NEON_I16)
        return;
    const size_t total = (size_t)rows * kp; /* quads (a0 a1 a2 a3) -> words (a0 a2 a1 a3) */
    uint16_t *d = (uint16_t *)(void *)dst;
    for (size_t i = 0; i < total; i += 4) {
        d[i] = q[i], d[i + 1] = q[i + 2], d[i + 2] = q[i + 1], d[i + 3] = q[i + 3];
    }
}

void kc_dot_chunk(kc_dot_form form, const kc_dot_rows *a, const kc_dot_weight *w, int c0,
                  int c1, float *y, size_t ldy)
{
#ifdef KC_DOT_SDOT_TARGET
    if (form == KC_DOT_NEON_SDOT) {
        chunk_neon_sdot(a, w, c0, c1, y, ldy);
        return;
    }
#endif
    if (form == KC_DOT_NEON_I16)
        chunk_neon_i16(a, w, c0, c1, y, ldy);
    else
        abort(); /* callers pass a form kc_dot_available allowed */
}

#else

void kc_dot_prepare(kc_dot_form form, const uint8_t *q, int rows, size_t kp, uint8_t *dst)
{
    abort(); /* never called: no form is available on this build */
}

void kc_dot_chunk(kc_dot_form form, const kc_dot_rows *a, const kc_dot_weight *w, int c0,
                  int c1, float *y, size_t ldy)
{
    abort();
}

#endif
