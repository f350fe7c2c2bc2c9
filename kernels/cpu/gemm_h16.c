/* gemm_h16.c: the GEMM of 16-bit and FP8 weights (qgemm.h kc_h16_*): y =
 * x W^T with W in FP16, BF16 or FP8 (E4M3, per-channel scales), widened to
 * FP32 in registers, never in memory; an AVX-512 form and an AVX2 + FMA +
 * F16C form, chosen by the ISA level in force (cpu_isa.h) when the weight
 * is packed.
 *
 * The panel GEMM it replaces (qgemm.c) decodes each panel of W to FP32 in
 * scratch and hands it to sgemm, which packs it again: every call writes
 * and reads the weight twice in FP32, so fp16 ran 25-30% slower than fp32
 * though it reads half the bytes. Here the weight is packed once at load
 * into panels of NR columns, k-major (for each k the NR columns' codes are
 * adjacent), the same bytes per value.
 *
 * AVX-512 (NR 32: a 64-byte line of halves, or 32 bytes of E4M3 per k): a
 * block of up to 8 rows of x times one panel keeps its 8 x 32 sums in 16
 * registers; per k it widens the panel's 32 codes (FP16: vcvtph2ps; BF16:
 * a 16-bit shift; E4M3: its bits moved into a half, which reads as the
 * value / 256: kc_e4m3_halves_div256, as qgemm.c's decoder), broadcasts
 * each row's x and does two FMAs per row.
 *
 * AVX2 (NR 16: 32 bytes of halves, or 16 of E4M3 per k; 16 ymm registers):
 * a block of up to 6 rows keeps its 6 x 16 sums in 12 ymm, the two widened
 * halves of the line and the broadcast x take 3 more. A tile's rows are
 * split into blocks as evenly as may be; blocks of 1 or 2 rows (tiles of 1
 * or 2), whose 2 or 4 sums alone would wait on the FMA latency, keep a
 * second set of sums for the odd k and add the two at the end. BF16 lines
 * hold columns j and j + 8 in one 32-bit lane, so that a shift and a mask
 * widen the 16 of them from one load. A tile of few rows widens the panel
 * in every block: the weight streams once from memory, as 16 bits, and the
 * widening is cheap beside the FMAs of a few rows. With many rows (48 and
 * up; FP8, whose widening costs more: 8) the widening would be paid once
 * per 6 rows: there the tile widens a slice of H16A_KC lines at a time
 * into an L1 buffer of FP32 (16 KiB; never more of the weight) and every
 * block multiplies that slice, as sgemm's micro-kernel does.
 *
 * The sums are FP32, as sgemm's (in another order: results differ from the
 * panel GEMM's by FP32 rounding only); FP8's 256 and channel scales are
 * applied in the epilogue.
 *
 * Threads take (panel, row block) tiles, row blocks of at most H16_MB rows
 * so that a thread's x rows stay in L2 while it walks its panels. */
#include "kernels/cpu/qgemm.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"

#define H16_NR 32  /* columns of a panel (AVX-512) */
#define H16_MR 8   /* rows of a register block (AVX-512) */
#define H16_MB 64  /* rows of a thread's tile */
#define H16A_NR 16 /* columns of a panel (AVX2) */
#define H16A_MR 6  /* rows of a register block (AVX2) */
#define H16A_KC 256 /* lines of a widened panel slice (AVX2): 256 x 16 FP32, 16 KiB, in L1 */
/* A tile of this many rows and more widens its panel by slices (AVX2):
 * measured (bench/results/h16-avx2-2026-11-29.md), E4M3's costlier
 * widening pays for the slice at fewer rows than FP16's and BF16's. */
#define H16A_WIDE_ROWS 48
#define H16A_WIDE_ROWS_FP8 8

struct kc_h16_weight {
    int n, k, np;      /* columns (rows of W), inputs, panels */
    int nr;            /* columns of a panel: H16_NR (AVX-512) or H16A_NR (AVX2) */
    kc_h16_fmt fmt;
    size_t esz;        /* bytes per code: 2, or 1 for E4M3 */
    uint8_t *packed;   /* np panels of k x 32 codes, 64-byte aligned */
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define H16_BUILD 1
#define H16_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,f16c")))
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define H16A_BUILD 1 /* the build's floor (x86-64-v3) has the AVX2 form's instructions */
#endif
#endif

/* kc_h16_set_enabled's switch (engine/options.c: MANTISSA_NO_H16_KERNEL). */
static _Atomic bool h16_off;

void kc_h16_set_enabled(bool on)
{
    h16_off = !on;
}

/* Whether the AVX2 form runs here: the level in force is below AVX-512
 * and the CPU has AVX2, FMA and F16C (the binary's floor; asked anyway,
 * through cpu_isa.c's CPUID: gcc and clang both build it, where clang 14
 * refuses __builtin_cpu_supports("f16c")). */
static bool h16_avx2(void)
{
#ifdef H16A_BUILD
    const kc_isa *isa = kc_isa_get();
    return !isa->avx512 && isa->avx2;
#else
    return false;
#endif
}

bool kc_h16_available(void)
{
#ifdef H16_BUILD
    return !h16_off && (kc_isa_get()->avx512 || h16_avx2());
#else
    return false;
#endif
}

const char *kc_h16_kernel_name(void)
{
    if (!kc_h16_available())
        return NULL;
    return kc_isa_get()->avx512 ? "avx512_h16" : "avx2_h16";
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
    const int nr = kc_isa_get()->avx512 ? H16_NR : H16A_NR;
    h->n = n, h->k = k, h->nr = nr, h->np = (n + nr - 1) / nr, h->fmt = fmt;
    h->esz = fmt == KC_H16_E4M3 ? 1 : 2;
    const size_t bytes = (size_t)h->np * k * nr * h->esz;
    if (!(h->packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) {
        free(h);
        return KC_ENOMEM;
    }
    const uint8_t *src = w;
    const bool pairs = nr == H16A_NR && fmt == KC_H16_BF16;
    for (int p = 0; p < h->np; p++) {
        uint8_t *dst = h->packed + (size_t)p * k * nr * h->esz;
        for (int kk = 0; kk < k; kk++)
            for (int c = 0; c < nr; c++) {
                const int col = p * nr + c, at = pairs ? (c % 8) * 2 + c / 8 : c;
                uint8_t *d = dst + ((size_t)kk * nr + at) * h->esz;
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
    return w ? (size_t)w->np * w->k * w->nr * w->esz : 0;
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

#ifdef H16A_BUILD

/* The 16 values of the codes at c (16 codes of format fmt) as FP32 in two
 * ymm (columns 0..7, 8..15); E4M3 as the value / 256. */
static inline __attribute__((always_inline)) void h16a_widen(const uint8_t *c, const int fmt,
                                                             __m256 *w0, __m256 *w1)
{
    if (fmt == KC_H16_F16) {
        *w0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)c));
        *w1 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(c + 16)));
    } else if (fmt == KC_H16_BF16) { /* the pairs (column j, column j + 8) of a 32-bit lane */
        const __m256i v = _mm256_load_si256((const __m256i *)c);
        *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        *w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
    } else {
        const __m256i h =
            kc_e4m3_halves_div256(_mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)c)));
        *w0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
        *w1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    }
}

/* mr (1..6) rows of x (row stride ldx) times panel wp (k x 16 codes of
 * fmt) into out (mr x 16, row stride 16); mr and fmt constants where
 * inlined. One or two rows: a second set of sums takes the odd k. */
static inline __attribute__((always_inline)) void
h16a_block(const float *x, size_t ldx, const uint8_t *wp, int k, const int mr, const int fmt,
           float *out)
{
    const size_t line = fmt == KC_H16_E4M3 ? 16 : 32;
    __m256 acc[H16A_MR][2], odd[2][2], w0, w1;
#pragma GCC unroll 6
    for (int r = 0; r < H16A_MR; r++)
        if (r < mr)
            acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    int kk = 0;
    if (mr <= 2) {
        odd[0][0] = odd[0][1] = odd[1][0] = odd[1][1] = _mm256_setzero_ps();
        for (; kk + 1 < k; kk += 2) {
            h16a_widen(wp + line * kk, fmt, &w0, &w1);
#pragma GCC unroll 2
            for (int r = 0; r < 2; r++)
                if (r < mr) {
                    const __m256 xb = _mm256_broadcast_ss(x + (size_t)r * ldx + kk);
                    acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
                }
            h16a_widen(wp + line * (kk + 1), fmt, &w0, &w1);
#pragma GCC unroll 2
            for (int r = 0; r < 2; r++)
                if (r < mr) {
                    const __m256 xb = _mm256_broadcast_ss(x + (size_t)r * ldx + kk + 1);
                    odd[r][0] = _mm256_fmadd_ps(xb, w0, odd[r][0]);
                    odd[r][1] = _mm256_fmadd_ps(xb, w1, odd[r][1]);
                }
        }
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++)
            if (r < mr) {
                acc[r][0] = _mm256_add_ps(acc[r][0], odd[r][0]);
                acc[r][1] = _mm256_add_ps(acc[r][1], odd[r][1]);
            }
    }
    for (; kk < k; kk++) {
        h16a_widen(wp + line * kk, fmt, &w0, &w1);
#pragma GCC unroll 6
        for (int r = 0; r < H16A_MR; r++)
            if (r < mr) {
                const __m256 xb = _mm256_broadcast_ss(x + (size_t)r * ldx + kk);
                acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
            }
    }
#pragma GCC unroll 6
    for (int r = 0; r < H16A_MR; r++)
        if (r < mr) {
            _mm256_store_ps(out + 16 * r, acc[r][0]);
            _mm256_store_ps(out + 16 * r + 8, acc[r][1]);
        }
}

/* The AVX2 block of mr rows in format fmt: each (mr, fmt) a copy with both fixed. */
#define H16A_ROWS(fmt)                                                                          \
    switch (mr) {                                                                              \
    case 6: h16a_block(xr, ldx, wp, k, 6, fmt, out); break;                                    \
    case 5: h16a_block(xr, ldx, wp, k, 5, fmt, out); break;                                    \
    case 4: h16a_block(xr, ldx, wp, k, 4, fmt, out); break;                                    \
    case 3: h16a_block(xr, ldx, wp, k, 3, fmt, out); break;                                    \
    case 2: h16a_block(xr, ldx, wp, k, 2, fmt, out); break;                                    \
    default: h16a_block(xr, ldx, wp, k, 1, fmt, out); break;                                   \
    }

static void h16a_rows(const float *xr, size_t ldx, const uint8_t *wp, int k, int mr,
                      kc_h16_fmt fmt, float *out)
{
    if (fmt == KC_H16_F16) {
        H16A_ROWS(KC_H16_F16)
    } else if (fmt == KC_H16_BF16) {
        H16A_ROWS(KC_H16_BF16)
    } else {
        H16A_ROWS(KC_H16_E4M3)
    }
}

/* kc lines of panel codes wp (format fmt) widened into wb (kc x 16 FP32):
 * a slice of the panel, in L1, for the many-row form. */
static inline __attribute__((always_inline)) void h16a_slice_fmt(const uint8_t *wp, int kc,
                                                                 const int fmt, float *wb)
{
    const size_t line = fmt == KC_H16_E4M3 ? 16 : 32;
    __m256 w0, w1;
    for (int kk = 0; kk < kc; kk++) {
        h16a_widen(wp + line * kk, fmt, &w0, &w1);
        _mm256_store_ps(wb + 16 * kk, w0);
        _mm256_store_ps(wb + 16 * kk + 8, w1);
    }
}

static void h16a_slice(const uint8_t *wp, int kc, kc_h16_fmt fmt, float *wb)
{
    if (fmt == KC_H16_F16)
        h16a_slice_fmt(wp, kc, KC_H16_F16, wb);
    else if (fmt == KC_H16_BF16)
        h16a_slice_fmt(wp, kc, KC_H16_BF16, wb);
    else
        h16a_slice_fmt(wp, kc, KC_H16_E4M3, wb);
}

/* mr (1..6) rows of x (row stride ldx) times a widened slice wb (kc x 16
 * FP32) added to the sums c (mr x 16, row stride 16; set instead when
 * first): the FP32 register block, as sgemm's, the slice read from L1. */
static inline __attribute__((always_inline)) void
h16a_fblock(const float *x, size_t ldx, const float *wb, int kc, const int mr, bool first,
            float *c)
{
    __m256 acc[H16A_MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < H16A_MR; r++)
        if (r < mr) {
            acc[r][0] = first ? _mm256_setzero_ps() : _mm256_load_ps(c + 16 * r);
            acc[r][1] = first ? _mm256_setzero_ps() : _mm256_load_ps(c + 16 * r + 8);
        }
    for (int kk = 0; kk < kc; kk++) {
        const __m256 w0 = _mm256_load_ps(wb + 16 * kk), w1 = _mm256_load_ps(wb + 16 * kk + 8);
#pragma GCC unroll 6
        for (int r = 0; r < H16A_MR; r++)
            if (r < mr) {
                const __m256 xb = _mm256_broadcast_ss(x + (size_t)r * ldx + kk);
                acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
            }
    }
#pragma GCC unroll 6
    for (int r = 0; r < H16A_MR; r++)
        if (r < mr) {
            _mm256_store_ps(c + 16 * r, acc[r][0]);
            _mm256_store_ps(c + 16 * r + 8, acc[r][1]);
        }
}

static void h16a_frows(const float *x, size_t ldx, const float *wb, int kc, int mr, bool first,
                       float *c)
{
    switch (mr) {
    case 6: h16a_fblock(x, ldx, wb, kc, 6, first, c); break;
    case 5: h16a_fblock(x, ldx, wb, kc, 5, first, c); break;
    case 4: h16a_fblock(x, ldx, wb, kc, 4, first, c); break;
    case 3: h16a_fblock(x, ldx, wb, kc, 3, first, c); break;
    case 2: h16a_fblock(x, ldx, wb, kc, 2, first, c); break;
    default: h16a_fblock(x, ldx, wb, kc, 1, first, c); break;
    }
}

/* Row r0 of block b of nb, the blocks of mm rows split as evenly as may
 * be (at most H16A_MR rows each, and at least 3 where mm >= 6, so that a
 * block's sums cover the FMA latency). */
static inline int h16a_split(int mm, int nb, int b)
{
    return (int)((long)mm * b / nb);
}

/* Rows m0..m0+mm of x times 16-column panel p: sums in out (mm x 16).
 * Few rows: each register block widens the panel's codes itself (the
 * weight streams from memory once and is read as 16 bits by every
 * block). Many rows (H16A_WIDE_ROWS and up): the panel is widened a slice
 * of H16A_KC lines at a time into an L1 buffer that every block of the
 * tile then reads in FP32, so the widening is paid once per tile, not
 * once per 6 rows; only that slice is ever FP32. */
static void h16a_sums(const float *x, int m0, int mm, const kc_h16_weight *w, int p, float *out)
{
    const int k = w->k, nb = (mm + H16A_MR - 1) / H16A_MR;
    const uint8_t *wp = w->packed + (size_t)p * k * H16A_NR * w->esz;
    if (mm < (w->fmt == KC_H16_E4M3 ? H16A_WIDE_ROWS_FP8 : H16A_WIDE_ROWS)) {
        for (int b = 0; b < nb; b++) {
            const int r0 = h16a_split(mm, nb, b), r1 = h16a_split(mm, nb, b + 1);
            h16a_rows(x + (size_t)(m0 + r0) * k, (size_t)k, wp, k, r1 - r0, w->fmt,
                      out + H16A_NR * r0);
        }
        return;
    }
    float wb[H16A_KC * H16A_NR] __attribute__((aligned(32)));
    for (int k0 = 0; k0 < k; k0 += H16A_KC) {
        const int kc = k - k0 < H16A_KC ? k - k0 : H16A_KC;
        h16a_slice(wp + (size_t)k0 * H16A_NR * w->esz, kc, w->fmt, wb);
        for (int b = 0; b < nb; b++) {
            const int r0 = h16a_split(mm, nb, b), r1 = h16a_split(mm, nb, b + 1);
            h16a_frows(x + (size_t)(m0 + r0) * k + k0, (size_t)k, wb, kc, r1 - r0, k0 == 0,
                       out + H16A_NR * r0);
        }
    }
}

/* One AVX2 tile: rows m0..m0+mm (mm <= H16_MB) of x times 16-column panel
 * p, then the epilogue (FP8: x 256 and the channel scales cs; bias, GELU)
 * into y. */
static void h16a_tile(const float *x, int m0, int mm, const kc_h16_weight *w, int p,
                      const float *cs, const float *bias, bool gelu, float *y)
{
    float out[H16_MB * H16A_NR] __attribute__((aligned(32))), k256[H16_MB];
    const int c0 = p * H16A_NR, nc = w->n - c0 < H16A_NR ? w->n - c0 : H16A_NR;
    const bool fp8 = w->fmt == KC_H16_E4M3;
    h16a_sums(x, m0, mm, w, p, out);
    if (fp8)
        for (int r = 0; r < mm; r++)
            k256[r] = 256;
    kc_epi_rows(out, H16A_NR, y + (size_t)m0 * w->n + c0, (size_t)w->n, mm, nc,
                fp8 ? cs + c0 : NULL, fp8 ? k256 : NULL, bias ? bias + c0 : NULL, gelu);
}

#endif

int kc_gemm_h16(const float *x, int m, const kc_h16_weight *w, const float *scale,
                const float *bias, bool gelu, float *y)
{
    if (m < 0 || !w || (m > 0 && (!x || !y)) || (w->fmt == KC_H16_E4M3 && !scale))
        return KC_EINVAL;
    if (m == 0)
        return KC_OK;
    const bool avx2 = w->nr == H16A_NR;
    const int nm = (m + H16_MB - 1) / H16_MB, mb = (m + nm - 1) / nm;
    const long ntiles = (long)nm * w->np;
    /* row-block major: a thread's consecutive tiles share x's rows */
#pragma omp parallel for schedule(static) if (ntiles > 1)
    for (long t = 0; t < ntiles; t++) {
        const int b = (int)(t / w->np), p = (int)(t % w->np);
        const int m0 = b * mb, mm = m - m0 < mb ? m - m0 : mb;
        if (mm <= 0)
            continue;
#ifdef H16A_BUILD
        if (avx2) {
            h16a_tile(x, m0, mm, w, p, scale, bias, gelu, y);
            continue;
        }
#endif
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
