/* qgemm_vnni.c: the AVX-512 VNNI kernel of the grouped int8 GEMM (int8g,
 * qgemm_amx.h), for CPUs with AVX512-VNNI but no AMX.
 *
 * It reads the weight packed as for the AMX kernel (kc_amx_pack): a tile
 * row holds 16 columns x 4 consecutive codes of K, which is what vpdpbusd
 * multiplies against 4 broadcast activation codes. Output blocks of 4 rows
 * x 64 columns (n must be a multiple of 64, kc_vnni_chunk's caller checks;
 * rows are read in fours, so the chunk's codes are padded to a multiple of
 * 4 rows): for each group of K the 16 int32 sums stay in registers,
 * and are then folded into the block's FP32 sums (in L1) as the AMX kernel
 * folds its tiles: minus the activation zero point times the group's code
 * sums, times the row's activation scale and the columns' weight scales.
 * The oneDNN form it replaces writes every group's int32 sums for the
 * whole chunk and reads them back (bench/results/int8g-vnni-*.md).
 */
#include "kernels/cpu/qgemm_amx.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KC_VNNI_BUILD 1
#endif

#define TILE_BYTES 1024 /* one packed tile: 16 K-quads x 16 columns x 4 codes */
#define VROWS 4         /* rows of a block */
#define VTILES 4        /* tiles of 16 columns of a block */

#ifdef KC_VNNI_BUILD

static bool vnni_ok;
static pthread_once_t vnni_once = PTHREAD_ONCE_INIT;

/* AVX-512 usable (kc_cpu_avx512) and CPUID says VNNI. */
static void vnni_probe(void)
{
    unsigned c, d;
    uint64_t xcr0;
    vnni_ok = kc_cpu_avx512(&c, &d, &xcr0) && (c & (1u << 11));
}

bool kc_vnni_available(void)
{
    if (kc_env_says_no("MANTISSA_NO_VNNI"))
        return false;
    pthread_once(&vnni_once, vnni_probe);
    return vnni_ok;
}

#define VNNI_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni")))

/* What a block needs besides its sums. */
typedef struct {
    int r0, rr;   /* first row, rows that are real (<= VROWS) */
    int c0;       /* first column */
    int n, nb;    /* columns of y, groups */
    size_t kp;    /* activation row stride (nb * g) */
    const float *sx, *gs, *csf;
    const int32_t *zp;
} vblock;

/* Folds group b's int32 sums of the block into its FP32 sums (acc, VROWS x
 * 64): per row r and tile j, acc += (sums - zp * cs) * sx * gs, where the
 * columns' code sums cs and group scales gs are loaded once per tile and
 * the row's zero point and scale once per row. */
static VNNI_TARGET inline void fold(const __m512i sums[VROWS][VTILES], int b, const vblock *k,
                                    float *restrict acc)
{
    const float *restrict csb = k->csf + (size_t)b * k->n + k->c0;
    const float *restrict gsb = k->gs + (size_t)b * k->n + k->c0;
    __m512 cs[VTILES], gs[VTILES];
    for (int j = 0; j < VTILES; j++) {
        cs[j] = _mm512_loadu_ps(csb + 16 * j);
        gs[j] = _mm512_loadu_ps(gsb + 16 * j);
    }
    for (int r = 0; r < k->rr; r++) {
        const size_t at = (size_t)(k->r0 + r) * k->nb + b;
        const __m512 zp = _mm512_set1_ps((float)k->zp[at]), sx = _mm512_set1_ps(k->sx[at]);
        for (int j = 0; j < VTILES; j++) {
            __m512 v = _mm512_fnmadd_ps(zp, cs[j], _mm512_cvtepi32_ps(sums[r][j]));
            float *o = acc + r * 64 + j * 16;
            _mm512_store_ps(o, _mm512_fmadd_ps(_mm512_mul_ps(v, sx), gs[j], _mm512_load_ps(o)));
        }
    }
}

/* One row's four tiles: sums += 4 activation codes x the K-quad's weights. */
#define ROW_DP(r, s0, s1, s2, s3)                                                        \
    do {                                                                                 \
        const __m512i av = _mm512_set1_epi32(*(const int32_t *)(a + (size_t)(r) * kp)); \
        s0 = _mm512_dpbusd_epi32(s0, av, w0);                                            \
        s1 = _mm512_dpbusd_epi32(s1, av, w1);                                            \
        s2 = _mm512_dpbusd_epi32(s2, av, w2);                                            \
        s3 = _mm512_dpbusd_epi32(s3, av, w3);                                            \
    } while (0)

/* Group b of a block: the int32 sums of VROWS rows x VTILES tiles over the
 * group's K (ks steps of 64), in sixteen named registers, folded into acc
 * (VROWS x 64 floats). Rows past rr read the chunk's padding codes and are
 * not folded. */
static VNNI_TARGET void vnni_group(const uint8_t *q, const int8_t *wt, size_t wstride, int ks,
                                   int b, const vblock *k, float *acc)
{
    __m512i s00 = _mm512_setzero_si512(), s01 = s00, s02 = s00, s03 = s00;
    __m512i s10 = s00, s11 = s00, s12 = s00, s13 = s00, s20 = s00, s21 = s00, s22 = s00;
    __m512i s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
    const size_t kp = k->kp;
    for (int st = 0; st < ks; st++)
        for (int qd = 0; qd < 16; qd++) {
            const int8_t *w = wt + (size_t)st * wstride + (size_t)qd * 64;
            const uint8_t *a = q + (size_t)st * KC_AMX_KSTEP + (size_t)qd * 4;
            const __m512i w0 = _mm512_load_si512(w), w1 = _mm512_load_si512(w + TILE_BYTES);
            const __m512i w2 = _mm512_load_si512(w + 2 * TILE_BYTES);
            const __m512i w3 = _mm512_load_si512(w + 3 * TILE_BYTES);
            ROW_DP(0, s00, s01, s02, s03);
            ROW_DP(1, s10, s11, s12, s13);
            ROW_DP(2, s20, s21, s22, s23);
            ROW_DP(3, s30, s31, s32, s33);
        }
    const __m512i sums[VROWS][VTILES] = {
        {s00, s01, s02, s03}, {s10, s11, s12, s13}, {s20, s21, s22, s23}, {s30, s31, s32, s33}};
    fold(sums, b, k, acc);
}

/* The block's sums + bias into y, then GELU on each row's columns. */
static VNNI_TARGET void vnni_emit(const float *acc, const vblock *k, const float *bias,
                                  bool gelu, float *y, size_t ldy)
{
    for (int r = 0; r < k->rr; r++) {
        float *o = y + (size_t)(k->r0 + r) * ldy + k->c0;
        for (int j = 0; j < VTILES; j++) {
            __m512 v = _mm512_load_ps(acc + r * 64 + j * 16);
            if (bias)
                v = _mm512_add_ps(v, _mm512_loadu_ps(bias + k->c0 + 16 * j));
            _mm512_storeu_ps(o + 16 * j, v);
        }
        if (gelu)
            kc_gelu(o, 16 * VTILES);
    }
}

void kc_vnni_chunk(const uint8_t *q, int rows, int nb, int g, const int8_t *packed, int n,
                   const float *sx, const int32_t *zp, const float *gs, const float *csf,
                   const float *bias, bool gelu, float *y, size_t ldy)
{
    float acc[VROWS * 64] __attribute__((aligned(64)));
    const int ks = g / KC_AMX_KSTEP, n16 = (n + 15) / 16;
    const size_t kp = (size_t)nb * g, wstride = (size_t)n16 * TILE_BYTES;
    for (int jb = 0; jb < n16; jb += VTILES)
        for (int r0 = 0; r0 < rows; r0 += VROWS) {
            vblock k = {r0, rows - r0 < VROWS ? rows - r0 : VROWS, jb * 16, n, nb, kp, sx, gs,
                        csf, zp};
            memset(acc, 0, sizeof acc);
            for (int b = 0; b < nb; b++)
                vnni_group(q + (size_t)r0 * kp + (size_t)b * g,
                           packed + (size_t)b * ks * wstride + (size_t)jb * TILE_BYTES, wstride,
                           ks, b, &k, acc);
            vnni_emit(acc, &k, bias, gelu, y, ldy);
        }
}

#else

bool kc_vnni_available(void)
{
    return false;
}

void kc_vnni_chunk(const uint8_t *q, int rows, int nb, int g, const int8_t *packed, int n,
                   const float *sx, const int32_t *zp, const float *gs, const float *csf,
                   const float *bias, bool gelu, float *y, size_t ldy)
{
    abort(); /* never called: kc_vnni_available is false on this build */
}

#endif
