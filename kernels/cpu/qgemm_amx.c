/* qgemm_amx.c: the AMX tile kernel of the grouped int8 GEMM (qgemm_amx.h).
 *
 * Output blocks of 16 rows x 64 columns: for each group of K, four int32
 * tiles (tmm0-3) take the products of one activation tile (tmm4: 16 rows x
 * 64 codes) with the packed weight tiles (tmm5/6: 64 codes x 16 columns in
 * the VNNI order tdpbusd reads), are stored to a 4 KiB buffer, and AVX-512
 * folds them into the block's FP32 sums (16 x 64 floats, also in L1): minus
 * the activation zero point times the group's code sums, times the row's
 * activation scale and the columns' weight scales of that group. After the
 * last group the block gets bias and GELU and goes to y. Nothing of size
 * (groups x rows x n) is ever written, which is what the oneDNN form pays
 * for. Compiled for every x86-64 target, with the AMX and AVX-512 parts
 * behind function target attributes; kc_amx_available says whether they
 * may run.
 */
#include "kernels/cpu/qgemm_amx.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KC_AMX_BUILD 1
#endif

/* Bytes of one tile of either kind here: 16 rows of 64 bytes. */
#define TILE_BYTES 1024

bool kc_amx_available(void)
{
    return kc_isa_get()->amx;
}

int8_t *kc_amx_pack(const int8_t *codes, int n, int k, int g, size_t *bytes)
{
    if (n <= 0 || k <= 0 || g <= 0)
        return NULL;
    const int gp = (g + KC_AMX_KSTEP - 1) / KC_AMX_KSTEP * KC_AMX_KSTEP;
    const int nb = (k + g - 1) / g, ks = gp / KC_AMX_KSTEP, n16 = (n + 15) / 16;
    /* + 3 zero tiles: the 512-bit vector kernels (qgemm_dot.c) read a
     * block's four tiles even where fewer remain at the end of a row of
     * tiles, and drop those columns */
    const size_t sz = ((size_t)nb * ks * n16 + 3) * TILE_BYTES;
    int8_t *p = aligned_alloc(64, sz);
    if (!p)
        return NULL;
    memset(p, 0, sz);
    /* tile (b, s, jb): row qd holds, for each of its 16 columns c, the 4
     * codes of group b at 64 s + 4 qd + 0..3 (the layout tdpbusd reads);
     * codes past the group's g (or past k) stay zero */
    for (int b = 0; b < nb; b++)
        for (int s = 0; s < ks; s++)
            for (int jb = 0; jb < n16; jb++) {
                int8_t *t = p + (((size_t)b * ks + s) * n16 + jb) * TILE_BYTES;
                const int j0 = s * KC_AMX_KSTEP; /* within the group */
                for (int c = 0; c < 16 && jb * 16 + c < n; c++) {
                    const int8_t *row = codes + (size_t)(jb * 16 + c) * k + (size_t)b * g;
                    for (int kk = 0; kk < KC_AMX_KSTEP && j0 + kk < g && b * g + j0 + kk < k;
                         kk++)
                        t[(kk / 4) * 64 + c * 4 + kk % 4] = row[j0 + kk];
                }
            }
    *bytes = sz;
    return p;
}

#ifdef KC_AMX_BUILD

#define AMX_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,amx-tile,amx-int8")))
#define AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

/* The palette-1 tile configuration: tiles 0-6, each 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) amx_cfg;

/* What one output block needs besides its tiles. */
typedef struct {
    int r0, rr;       /* first row, rows that are real (<= 16) */
    int c0, nt;       /* first column, tiles of 16 columns (<= 4) */
    int b;            /* the group being folded */
    const kc_dot_rows *a;
    const kc_dot_weight *w;
} amx_block;

/* The lanes of tile j of the block that hold columns of y. */
static inline __mmask16 amx_lanes(const amx_block *k, int j)
{
    const int left = k->w->n - (k->c0 + 16 * j);
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* Folds group b's four int32 tiles (ibuf, 16 x 16 each) into the block's
 * FP32 sums acc (16 rows x 64 columns), as qgemm_dot.c folds its sums. */
static AVX512_TARGET void amx_fold(const int32_t *ibuf, const amx_block *k, float *acc)
{
    const kc_dot_weight *w = k->w;
    __m512 cs[4], gs[4];
    for (int j = 0; j < k->nt; j++) {
        const int c = k->c0 + 16 * j;
        const __mmask16 m = amx_lanes(k, j);
        cs[j] = _mm512_maskz_loadu_ps(m, w->csf + (size_t)k->b * w->n + c);
        gs[j] = _mm512_maskz_loadu_ps(m, w->gs + (size_t)k->b * w->n + c);
    }
    /* rows outer: a row's zero point and scale broadcast once for its tiles */
    for (int r = 0; r < k->rr; r++) {
        const size_t at = (size_t)(k->r0 + r) * w->nb + k->b;
        const __m512 zp = _mm512_set1_ps((float)k->a->zp[at]), sx = _mm512_set1_ps(k->a->sx[at]);
        for (int j = 0; j < k->nt; j++) {
            __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(ibuf + j * 256 + r * 16));
            v = _mm512_fnmadd_ps(zp, cs[j], v);
            v = _mm512_mul_ps(v, sx);
            float *a = acc + r * 64 + j * 16;
            _mm512_store_ps(a, _mm512_fmadd_ps(v, gs[j], _mm512_load_ps(a)));
        }
    }
}

/* Row r's results of tile j (v, before bias) into y; GELU after a row's
 * last tile. */
static AVX512_TARGET void amx_store(const amx_block *k, int r, int j, __m512 v, float *y,
                                    size_t ldy)
{
    const kc_dot_weight *w = k->w;
    const int cols = w->n - k->c0 < 16 * k->nt ? w->n - k->c0 : 16 * k->nt;
    const __mmask16 m = amx_lanes(k, j);
    float *o = y + (size_t)(k->r0 + r) * ldy + k->c0;
    if (w->bias)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, w->bias + k->c0 + 16 * j));
    _mm512_mask_storeu_ps(o + 16 * j, m, v);
    if (w->gelu && j == k->nt - 1)
        kc_gelu(o, cols);
}

/* The grouped block's sums (acc) + bias into y, then GELU. */
static AVX512_TARGET void amx_emit(const float *acc, const amx_block *k, float *y, size_t ldy)
{
    for (int r = 0; r < k->rr; r++)
        for (int j = 0; j < k->nt; j++)
            amx_store(k, r, j, _mm512_load_ps(acc + r * 64 + j * 16), y, ldy);
}

/* A per-channel block (one group) from its int32 tiles: (sums - zp *
 * colsum) in int32, then * gs * sx, as qgemm_dot.c's block1, bit for bit. */
static AVX512_TARGET void amx_emit1(const int32_t *ibuf, const amx_block *k, float *y,
                                    size_t ldy)
{
    const kc_dot_weight *w = k->w;
    __m512i cs[4];
    __m512 sc[4];
    for (int j = 0; j < k->nt; j++) {
        const __mmask16 m = amx_lanes(k, j);
        cs[j] = _mm512_maskz_loadu_epi32(m, w->colsum + k->c0 + 16 * j);
        sc[j] = _mm512_maskz_loadu_ps(m, w->gs + k->c0 + 16 * j);
    }
    for (int r = 0; r < k->rr; r++) {
        const __m512i zp = _mm512_set1_epi32(k->a->zp[k->r0 + r]);
        const __m512 sx = _mm512_set1_ps(k->a->sx[k->r0 + r]);
        for (int j = 0; j < k->nt; j++) {
            const __m512i s = _mm512_load_si512(ibuf + j * 256 + r * 16);
            const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_mullo_epi32(zp, cs[j])));
            amx_store(k, r, j, _mm512_mul_ps(_mm512_mul_ps(v, sc[j]), sx), y, ldy);
        }
    }
}

/* One block's tiles for group b: tmm0-3 = sum over the group's K steps of
 * activations (tmm4) x weights (tmm5/6), stored to ibuf. The asm barriers
 * tell the compiler that the tile instructions read q and packed and
 * write ibuf (GCC's tile intrinsics carry no memory operands). */
static AMX_TARGET void amx_group(const uint8_t *q, size_t kp, const int8_t *wt, size_t wstride,
                                 int ks, int nt, int32_t *ibuf)
{
    __asm__ volatile("" ::: "memory");
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int s = 0; s < ks; s++) {
        const int8_t *w = wt + (size_t)s * wstride;
        _tile_loadd(4, q + (size_t)s * KC_AMX_KSTEP, kp);
        _tile_loadd(5, w, 64);
        _tile_dpbusd(0, 4, 5);
        if (nt > 1) {
            _tile_loadd(6, w + TILE_BYTES, 64);
            _tile_dpbusd(1, 4, 6);
        }
        if (nt > 2) {
            _tile_loadd(5, w + 2 * TILE_BYTES, 64);
            _tile_dpbusd(2, 4, 5);
        }
        if (nt > 3) {
            _tile_loadd(6, w + 3 * TILE_BYTES, 64);
            _tile_dpbusd(3, 4, 6);
        }
    }
    _tile_stored(0, ibuf, 64);
    if (nt > 1)
        _tile_stored(1, ibuf + 256, 64);
    if (nt > 2)
        _tile_stored(2, ibuf + 512, 64);
    if (nt > 3)
        _tile_stored(3, ibuf + 768, 64);
    __asm__ volatile("" ::: "memory");
}

static AMX_TARGET void amx_config(void)
{
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&cfg);
}

static AMX_TARGET void amx_release(void)
{
    _tile_release();
}

void kc_amx_chunk(const kc_dot_rows *a, const kc_dot_weight *w, int c0, int c1, float *y,
                  size_t ldy)
{
    float acc[16 * 64] __attribute__((aligned(64)));
    int32_t ibuf[4 * 256] __attribute__((aligned(64)));
    const int ks = w->g / KC_AMX_KSTEP, n16 = (w->n + 15) / 16, e16 = (c1 + 15) / 16;
    const size_t kp = (size_t)w->nb * w->g, wstride = (size_t)n16 * TILE_BYTES;
    amx_config();
    /* column blocks outer: a block's weights (64 columns x K) stay in cache
     * while the chunk's rows pass; rows outer streamed the whole weight
     * once per 16 rows (MPNet's 3072 x 768 int8 at 128 rows: 1962 -> 3203
     * GOP/s on 2 cores, bench/results/int8-kernels-2026-11-26.md) */
    for (int jb = c0 / 16; jb < e16; jb += 4)
        for (int r0 = 0; r0 < a->rows; r0 += 16) {
            amx_block k = {r0, a->rows - r0 < 16 ? a->rows - r0 : 16, jb * 16,
                           e16 - jb < 4 ? e16 - jb : 4, 0, a, w};
            const uint8_t *q = a->q + (size_t)r0 * kp;
            const int8_t *wt = w->packed + (size_t)jb * TILE_BYTES;
            if (w->nb == 1) {
                amx_group(q, kp, wt, wstride, ks, k.nt, ibuf);
                amx_emit1(ibuf, &k, y, ldy);
                continue;
            }
            memset(acc, 0, sizeof acc);
            for (int b = 0; b < w->nb; b++) {
                k.b = b;
                amx_group(q + (size_t)b * w->g, kp, wt + (size_t)b * ks * wstride, wstride, ks,
                          k.nt, ibuf);
                amx_fold(ibuf, &k, acc);
            }
            amx_emit(acc, &k, y, ldy);
        }
    amx_release();
}

#else

void kc_amx_chunk(const kc_dot_rows *a, const kc_dot_weight *w, int c0, int c1, float *y,
                  size_t ldy)
{
    abort(); /* never called: kc_amx_available is false on this build */
}

#endif
