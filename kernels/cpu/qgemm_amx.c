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

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KC_AMX_BUILD 1
#endif

/* Whether the environment variable name is set to something other than
 * "" or "0" (MANTISSA_NO_AMX, MANTISSA_NO_VNNI). */
bool kc_env_says_no(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* Bytes of one tile of either kind here: 16 rows of 64 bytes. */
#define TILE_BYTES 1024

#ifdef KC_AMX_BUILD

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static bool amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

/* CPUID says AVX-512 F/DQ/BW/VL and XCR0 that the OS saves their state
 * (and SSE's and AVX's); *ecx7 / *edx7 get CPUID leaf 7's ECX and EDX for
 * the caller's own feature bits, *xcr0 the register. Shared with
 * qgemm_vnni.c. */
bool kc_cpu_avx512(unsigned *ecx7, unsigned *edx7, uint64_t *xcr0)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    if ((b & avx512) != avx512)
        return false;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    *xcr0 = ((uint64_t)hi << 32) | lo;
    *ecx7 = c;
    *edx7 = d;
    return (*xcr0 & 0xe6) == 0xe6; /* SSE, AVX, the three AVX-512 states */
}

static bool avx512_ok;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void avx512_probe(void)
{
    unsigned c, d;
    uint64_t xcr0;
    avx512_ok = kc_cpu_avx512(&c, &d, &xcr0);
}

bool kc_cpu_has_avx512(void)
{
    pthread_once(&avx512_once, avx512_probe);
    return avx512_ok;
}

/* AVX-512 as above, CPUID says AMX-TILE and AMX-INT8, XCR0 has XTILECFG
 * and XTILEDATA, and Linux grants this process the tile data state (it is
 * off until asked for). */
static void amx_probe(void)
{
    unsigned c, d;
    uint64_t xcr0;
    const unsigned amx = (1u << 24) | (1u << 25);
    if (!kc_cpu_avx512(&c, &d, &xcr0) || (d & amx) != amx ||
        (xcr0 & (3ull << 17)) != (3ull << 17))
        return;
    amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

bool kc_amx_available(void)
{
    if (kc_env_says_no("MANTISSA_NO_AMX"))
        return false;
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

#else

bool kc_amx_available(void)
{
    return false;
}

bool kc_cpu_has_avx512(void)
{
    return false;
}

#endif

int8_t *kc_amx_pack(const int8_t *codes, int n, int k, int g, size_t *bytes)
{
    if (n <= 0 || k <= 0 || g <= 0 || g % KC_AMX_KSTEP)
        return NULL;
    const int nb = (k + g - 1) / g, ks = g / KC_AMX_KSTEP, n16 = (n + 15) / 16;
    const size_t sz = (size_t)nb * ks * n16 * TILE_BYTES;
    int8_t *p = aligned_alloc(64, sz);
    if (!p)
        return NULL;
    memset(p, 0, sz);
    /* tile (b, s, jb): row qd holds, for each of its 16 columns c, the 4
     * codes at K = b g + 64 s + 4 qd + 0..3 (the layout tdpbusd reads) */
    for (int b = 0; b < nb; b++)
        for (int s = 0; s < ks; s++)
            for (int jb = 0; jb < n16; jb++) {
                int8_t *t = p + (((size_t)b * ks + s) * n16 + jb) * TILE_BYTES;
                const int k0 = b * g + s * KC_AMX_KSTEP;
                for (int c = 0; c < 16 && jb * 16 + c < n; c++) {
                    const int8_t *row = codes + (size_t)(jb * 16 + c) * k;
                    for (int kk = 0; kk < KC_AMX_KSTEP && k0 + kk < k; kk++)
                        t[(kk / 4) * 64 + c * 4 + kk % 4] = row[k0 + kk];
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
    int n, nb, b;     /* columns of y, groups, this group */
    const float *sx, *gs, *csf;
    const int32_t *zp;
} amx_block;

/* Folds group b's four int32 tiles (ibuf, 16 x 16 each) into the block's
 * FP32 sums acc (16 rows x 64 columns). */
static AVX512_TARGET void amx_fold(const int32_t *ibuf, const amx_block *k, float *acc)
{
    for (int j = 0; j < k->nt; j++) {
        const int c = k->c0 + 16 * j, left = k->n - c;
        const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        const __m512 cs = _mm512_maskz_loadu_ps(m, k->csf + (size_t)k->b * k->n + c);
        const __m512 gs = _mm512_maskz_loadu_ps(m, k->gs + (size_t)k->b * k->n + c);
        for (int r = 0; r < k->rr; r++) {
            const size_t at = (size_t)(k->r0 + r) * k->nb + k->b;
            __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(ibuf + j * 256 + r * 16));
            v = _mm512_fnmadd_ps(_mm512_set1_ps((float)k->zp[at]), cs, v);
            v = _mm512_mul_ps(v, _mm512_set1_ps(k->sx[at]));
            float *a = acc + r * 64 + j * 16;
            _mm512_store_ps(a, _mm512_fmadd_ps(v, gs, _mm512_load_ps(a)));
        }
    }
}

/* The block's sums + bias into y, then GELU on each row's columns. */
static AVX512_TARGET void amx_emit(const float *acc, const amx_block *k, const float *bias,
                                   bool gelu, float *y, size_t ldy)
{
    const int cols = k->n - k->c0 < 16 * k->nt ? k->n - k->c0 : 16 * k->nt;
    for (int r = 0; r < k->rr; r++) {
        float *o = y + (size_t)(k->r0 + r) * ldy + k->c0;
        for (int j = 0; j < k->nt; j++) {
            const int left = cols - 16 * j;
            const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __m512 v = _mm512_load_ps(acc + r * 64 + j * 16);
            if (bias)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + k->c0 + 16 * j));
            _mm512_mask_storeu_ps(o + 16 * j, m, v);
        }
        if (gelu)
            kc_gelu(o, cols);
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

void kc_amx_chunk(const uint8_t *q, int rows, int nb, int g, const int8_t *packed, int n,
                  const float *sx, const int32_t *zp, const float *gs, const float *csf,
                  const float *bias, bool gelu, float *y, size_t ldy)
{
    float acc[16 * 64] __attribute__((aligned(64)));
    int32_t ibuf[4 * 256] __attribute__((aligned(64)));
    const int ks = g / KC_AMX_KSTEP, n16 = (n + 15) / 16;
    const size_t kp = (size_t)nb * g, wstride = (size_t)n16 * TILE_BYTES;
    amx_config();
    for (int r0 = 0; r0 < rows; r0 += 16)
        for (int jb = 0; jb < n16; jb += 4) {
            amx_block k = {r0, rows - r0 < 16 ? rows - r0 : 16, jb * 16,
                           n16 - jb < 4 ? n16 - jb : 4, n, nb, 0, sx, gs, csf, zp};
            memset(acc, 0, sizeof acc);
            for (int b = 0; b < nb; b++) {
                k.b = b;
                amx_group(q + (size_t)r0 * kp + (size_t)b * g, kp,
                          packed + (size_t)b * ks * wstride + (size_t)jb * TILE_BYTES, wstride,
                          ks, k.nt, ibuf);
                amx_fold(ibuf, &k, acc);
            }
            amx_emit(acc, &k, bias, gelu, y, ldy);
        }
    amx_release();
}

#else

void kc_amx_chunk(const uint8_t *q, int rows, int nb, int g, const int8_t *packed, int n,
                  const float *sx, const int32_t *zp, const float *gs, const float *csf,
                  const float *bias, bool gelu, float *y, size_t ldy)
{
    abort(); /* never called: kc_amx_available is false on this build */
}

#endif
