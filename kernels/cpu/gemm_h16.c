/* gemm_h16.c: the GEMM of 16-bit and FP8 weights with AVX-512 (qgemm.h
 * kc_h16_*): y = x W^T with W in FP16, BF16 or FP8 (E4M3, per-channel
 * scales), widened to FP32 in registers, never in memory.
 *
 * The panel GEMM it replaces (qgemm.c) decodes each panel of W to FP32 in
 * scratch and hands it to sgemm, which packs it again: every call writes
 * and reads the weight twice in FP32, so fp16 ran 25-30% slower than fp32
 * though it reads half the bytes. Here the weight is packed once at load
 * into panels of 32 columns, k-major (for each k the 32 columns' codes are
 * adjacent: a 64-byte line of halves, or 32 bytes of E4M3), the same bytes
 * per value. A block of up to 8 rows of x times one panel keeps its 8 x 32
 * sums in 16 registers; per k it widens the panel's 32 codes (FP16:
 * vcvtph2ps; BF16: a 16-bit shift; E4M3: its bits moved into a half, which
 * reads as the value / 256: kc_e4m3_halves_div256, as qgemm.c's decoder), broadcasts each
 * row's x and does two FMAs per row. The sums are FP32, as sgemm's (in
 * another order: results differ from the panel GEMM's by FP32 rounding
 * only); FP8's 256 and channel scales are applied in the epilogue.
 *
 * Threads take (panel, row block) tiles, row blocks of at most H16_MB rows
 * so that a thread's x rows stay in L2 while it walks its panels. */
#include "kernels/cpu/qgemm.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"

#define H16_NR 32 /* columns of a panel */
#define H16_MR 8  /* rows of a register block */
#define H16_MB 64 /* rows of a thread's tile */

struct kc_h16_weight {
    int n, k, np;      /* columns (rows of W), inputs, panels */
    kc_h16_fmt fmt;
    size_t esz;        /* bytes per code: 2, or 1 for E4M3 */
    uint8_t *packed;   /* np panels of k x 32 codes, 64-byte aligned */
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define H16_BUILD 1
#define H16_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,f16c")))
#endif

/* kc_h16_set_enabled's switch (engine/options.c: MANTISSA_NO_H16_KERNEL). */
static _Atomic bool h16_off;

void kc_h16_set_enabled(bool on)
{
    h16_off = !on;
}

bool kc_h16_available(void)
{
#ifdef H16_BUILD
    return !h16_off && kc_isa_get()->avx512;
#else
    return false;
#endif
}

int kc_h16_weight_create(const void *w, int n, int k, kc_h16_fmt fmt, kc_h16_weight **out)
{
    *out = NULL;
    if (!w || n <= 0 || k <= 0 || (unsigned)fmt > KC_H16_E4M3)
        return KC_EINVAL;
    if (!kc_h16_available())
        return KC_EDNNL; /* no kernel for this CPU: the caller keeps the panel GEMM */
    kc_h16_weight *h = calloc(1, sizeof *h);
    if (!h)
        return KC_ENOMEM;
    h->n = n, h->k = k, h->np = (n + H16_NR - 1) / H16_NR, h->fmt = fmt;
    h->esz = fmt == KC_H16_E4M3 ? 1 : 2;
    const size_t bytes = (size_t)h->np * k * H16_NR * h->esz;
    if (!(h->packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) {
        free(h);
        return KC_ENOMEM;
    }
    const uint8_t *src = w;
    for (int p = 0; p < h->np; p++) {
        uint8_t *dst = h->packed + (size_t)p * k * H16_NR * h->esz;
        for (int kk = 0; kk < k; kk++)
            for (int c = 0; c < H16_NR; c++) {
                const int col = p * H16_NR + c;
                uint8_t *d = dst + ((size_t)kk * H16_NR + c) * h->esz;
                if (col < n)
                    memcpy(d, src + ((size_t)col * k + kk) * h->esz, h->esz);
                else
                    memset(d, 0, h->esz); /* a zero in every format */
            }
    }
    *out = h;
    return KC_OK;
}

void kc_h16_weight_destroy(kc_h16_weight *w)
{
    if (!w)
        return;
    free(w->packed);
    free(w);
}

size_t kc_h16_weight_bytes(const kc_h16_weight *w)
{
    return w ? (size_t)w->np * w->k * H16_NR * w->esz : 0;
}

#ifdef H16_BUILD

/* The 16 values of codes c (16 codes of format fmt) as FP32; E4M3 as the
 * value / 256. */
static H16_TARGET inline __attribute__((always_inline)) __m512 h16_widen(const uint8_t *c,
                                                                         const int fmt)
{
    if (fmt == KC_H16_F16)
        return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)c));
    if (fmt == KC_H16_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)c)), 16));
    return _mm512_cvtph_ps(
        kc_e4m3_halves_div256(_mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)c))));
}

/* mr (1..8) rows of x (row stride ldx) times panel wp (k x 32 codes of
 * fmt) into out (mr x 32, row stride 32); mr and fmt constants where
 * inlined. */
static H16_TARGET inline __attribute__((always_inline)) void
h16_block(const float *x, size_t ldx, const uint8_t *wp, int k, const int mr, const int fmt,
          float *out)
{
    const size_t line = fmt == KC_H16_E4M3 ? 32 : 64, half = line / 2;
    __m512 acc[H16_MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < H16_MR; r++)
        if (r < mr)
            acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int kk = 0; kk < k; kk++) {
        const __m512 w0 = h16_widen(wp + line * kk, fmt);
        const __m512 w1 = h16_widen(wp + line * kk + half, fmt);
#pragma GCC unroll 8
        for (int r = 0; r < H16_MR; r++)
            if (r < mr) {
                const __m512 xb = _mm512_set1_ps(x[(size_t)r * ldx + kk]);
                acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
            }
    }
#pragma GCC unroll 8
    for (int r = 0; r < H16_MR; r++)
        if (r < mr) {
            _mm512_store_ps(out + 32 * r, acc[r][0]);
            _mm512_store_ps(out + 32 * r + 16, acc[r][1]);
        }
}

/* The block of mr rows in format fmt: each (mr, fmt) a copy with both fixed. */
#define H16_ROWS(fmt)                                                                           \
    switch (mr) {                                                                              \
    case 8: h16_block(xr, ldx, wp, k, 8, fmt, out); break;                                     \
    case 7: h16_block(xr, ldx, wp, k, 7, fmt, out); break;                                     \
    case 6: h16_block(xr, ldx, wp, k, 6, fmt, out); break;                                     \
    case 5: h16_block(xr, ldx, wp, k, 5, fmt, out); break;                                     \
    case 4: h16_block(xr, ldx, wp, k, 4, fmt, out); break;                                     \
    case 3: h16_block(xr, ldx, wp, k, 3, fmt, out); break;                                     \
    case 2: h16_block(xr, ldx, wp, k, 2, fmt, out); break;                                     \
    default: h16_block(xr, ldx, wp, k, 1, fmt, out); break;                                    \
    }

static H16_TARGET void h16_rows(const float *xr, size_t ldx, const uint8_t *wp, int k, int mr,
                                kc_h16_fmt fmt, float *out)
{
    if (fmt == KC_H16_F16) {
        H16_ROWS(KC_H16_F16)
    } else if (fmt == KC_H16_BF16) {
        H16_ROWS(KC_H16_BF16)
    } else {
        H16_ROWS(KC_H16_E4M3)
    }
}

/* One tile: rows m0..m0+mm of x times panel p, then the epilogue (FP8: x
 * 256 and the channel scales cs; bias, GELU) into y. */
static void h16_tile(const float *x, int m0, int mm, const kc_h16_weight *w, int p,
                     const float *cs, const float *bias, bool gelu, float *y)
{
    static const float k256[H16_MR] = {256, 256, 256, 256, 256, 256, 256, 256};
    float out[H16_MR * H16_NR] __attribute__((aligned(64)));
    const int k = w->k, c0 = p * H16_NR, nc = w->n - c0 < H16_NR ? w->n - c0 : H16_NR;
    const uint8_t *wp = w->packed + (size_t)p * k * H16_NR * w->esz;
    const bool fp8 = w->fmt == KC_H16_E4M3;
    for (int r0 = m0; r0 < m0 + mm; r0 += H16_MR) {
        const int mr = m0 + mm - r0 < H16_MR ? m0 + mm - r0 : H16_MR;
        h16_rows(x + (size_t)r0 * k, (size_t)k, wp, k, mr, w->fmt, out);
        kc_epi_rows(out, H16_NR, y + (size_t)r0 * w->n + c0, (size_t)w->n, mr, nc,
                    fp8 ? cs + c0 : NULL, fp8 ? k256 : NULL, bias ? bias + c0 : NULL, gelu);
    }
}

int kc_gemm_h16(const float *x, int m, const kc_h16_weight *w, const float *scale,
                const float *bias, bool gelu, float *y)
{
    if (m < 0 || !w || (m > 0 && (!x || !y)) || (w->fmt == KC_H16_E4M3 && !scale))
        return KC_EINVAL;
    if (m == 0)
        return KC_OK;
    const int nm = (m + H16_MB - 1) / H16_MB, mb = (m + nm - 1) / nm;
    const long ntiles = (long)nm * w->np;
    /* row-block major: a thread's consecutive tiles share x's rows */
#pragma omp parallel for schedule(static) if (ntiles > 1)
    for (long t = 0; t < ntiles; t++) {
        const int b = (int)(t / w->np), p = (int)(t % w->np);
        const int m0 = b * mb, mm = m - m0 < mb ? m - m0 : mb;
        if (mm > 0)
            h16_tile(x, m0, mm, w, p, scale, bias, gelu, y);
    }
    return KC_OK;
}

#else

int kc_gemm_h16(const float *x, int m, const kc_h16_weight *w, const float *scale,
                const float *bias, bool gelu, float *y)
{
    (void)x, (void)m, (void)w, (void)scale, (void)bias, (void)gelu, (void)y;
    return KC_EINVAL; /* never created on this build: kc_h16_available is false */
}

#endif
