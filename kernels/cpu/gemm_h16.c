/* gemm_h16.c: the FP16 GEMM with AVX-512 (qgemm.h kc_h16_*): y = x W^T
 * with W in FP16, widened to FP32 in registers, never in memory.
 *
 * The panel GEMM it replaces (qgemm.c) decodes each panel of W to FP32 in
 * scratch and hands it to sgemm, which packs it again: every call writes
 * and reads the weight twice in FP32, so fp16 ran 25-30% slower than fp32
 * though it reads half the bytes. Here the weight is packed once at load
 * into panels of 32 columns, k-major (for each k the 32 columns' halves
 * are one 64-byte line), the same 2 bytes per value. A block of up to 8
 * rows of x times one panel keeps its 8 x 32 sums in 16 registers; per k
 * it widens one line (vcvtph2ps, two halves), broadcasts each row's x and
 * does two FMAs per row. The sums are FP32, as sgemm's (in another order:
 * results differ from the panel GEMM's by FP32 rounding only).
 *
 * Threads take (panel, row block) tiles, row blocks of at most H16_MB rows
 * so that a thread's x rows stay in L2 while it walks its panels. */
#include "kernels/cpu/qgemm.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/qgemm_amx.h"

#define H16_NR 32 /* columns of a panel */
#define H16_MR 8  /* rows of a register block */
#define H16_MB 64 /* rows of a thread's tile */

struct kc_h16_weight {
    int n, k, np;      /* columns (rows of W), inputs, panels */
    uint16_t *packed;  /* np panels of k x 32 halves, 64-byte aligned */
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define H16_BUILD 1
#define H16_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,f16c")))

static bool h16_ok;
static pthread_once_t h16_once = PTHREAD_ONCE_INIT;

static void h16_probe(void)
{
    unsigned c, d;
    uint64_t xcr0;
    h16_ok = kc_cpu_avx512(&c, &d, &xcr0);
}
#endif

bool kc_h16_available(void)
{
#ifdef H16_BUILD
    if (kc_env_says_no("MANTISSA_NO_H16_KERNEL"))
        return false;
    pthread_once(&h16_once, h16_probe);
    return h16_ok;
#else
    return false;
#endif
}

int kc_h16_weight_create(const uint16_t *w, int n, int k, kc_h16_weight **out)
{
    *out = NULL;
    if (!w || n <= 0 || k <= 0)
        return KC_EINVAL;
    if (!kc_h16_available())
        return KC_EDNNL; /* no kernel for this CPU: the caller keeps the panel GEMM */
    kc_h16_weight *h = calloc(1, sizeof *h);
    if (!h)
        return KC_ENOMEM;
    h->n = n, h->k = k, h->np = (n + H16_NR - 1) / H16_NR;
    const size_t bytes = (size_t)h->np * k * H16_NR * sizeof(uint16_t);
    if (!(h->packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) {
        free(h);
        return KC_ENOMEM;
    }
    for (int p = 0; p < h->np; p++) {
        uint16_t *dst = h->packed + (size_t)p * k * H16_NR;
        for (int kk = 0; kk < k; kk++)
            for (int c = 0; c < H16_NR; c++) {
                const int col = p * H16_NR + c;
                dst[(size_t)kk * H16_NR + c] = col < n ? w[(size_t)col * k + kk] : 0;
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
    return w ? (size_t)w->np * w->k * H16_NR * sizeof(uint16_t) : 0;
}

#ifdef H16_BUILD

/* mr (1..8, a constant where inlined) rows of x (row stride ldx) times
 * panel wp (k x 32) into out (mr x 32, row stride 32). */
static H16_TARGET inline __attribute__((always_inline)) void
h16_block(const float *x, size_t ldx, const uint16_t *wp, int k, const int mr, float *out)
{
    __m512 acc[H16_MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < H16_MR; r++)
        if (r < mr)
            acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int kk = 0; kk < k; kk++) {
        const __m512 w0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wp + 32 * kk)));
        const __m512 w1 =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wp + 32 * kk + 16)));
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

/* One tile: rows m0..m0+mm of x times panel p, + bias, GELU, into y. */
static H16_TARGET void h16_tile(const float *x, int m0, int mm, const kc_h16_weight *w, int p,
                                const float *bias, bool gelu, float *y)
{
    float out[H16_MR * H16_NR] __attribute__((aligned(64)));
    const int k = w->k, c0 = p * H16_NR, nc = w->n - c0 < H16_NR ? w->n - c0 : H16_NR;
    const uint16_t *wp = w->packed + (size_t)p * k * H16_NR;
    for (int r0 = m0; r0 < m0 + mm; r0 += H16_MR) {
        const int mr = m0 + mm - r0 < H16_MR ? m0 + mm - r0 : H16_MR;
        const float *xr = x + (size_t)r0 * k;
        switch (mr) { /* each a copy of the block with its row count fixed */
        case 8: h16_block(xr, (size_t)k, wp, k, 8, out); break;
        case 7: h16_block(xr, (size_t)k, wp, k, 7, out); break;
        case 6: h16_block(xr, (size_t)k, wp, k, 6, out); break;
        case 5: h16_block(xr, (size_t)k, wp, k, 5, out); break;
        case 4: h16_block(xr, (size_t)k, wp, k, 4, out); break;
        case 3: h16_block(xr, (size_t)k, wp, k, 3, out); break;
        case 2: h16_block(xr, (size_t)k, wp, k, 2, out); break;
        default: h16_block(xr, (size_t)k, wp, k, 1, out); break;
        }
        kc_epi_rows(out, H16_NR, y + (size_t)r0 * w->n + c0, (size_t)w->n, mr, nc, NULL, NULL,
                    bias ? bias + c0 : NULL, gelu);
    }
}

int kc_gemm_h16(const float *x, int m, const kc_h16_weight *w, const float *bias, bool gelu,
                float *y)
{
    if (m < 0 || !w || (m > 0 && (!x || !y)))
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
            h16_tile(x, m0, mm, w, p, bias, gelu, y);
    }
    return KC_OK;
}

#else

int kc_gemm_h16(const float *x, int m, const kc_h16_weight *w, const float *bias, bool gelu,
                float *y)
{
    (void)x, (void)m, (void)w, (void)bias, (void)gelu, (void)y;
    return KC_EINVAL; /* never created on this build: kc_h16_available is false */
}

#endif
