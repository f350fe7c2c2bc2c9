/* qgemm_dot_body.h: one form of the vector int8 kernels (qgemm_dot.h),
 * included by qgemm_dot.c once per form with DOT_W (256 or 512: the x86
 * vector width; 128: aarch64 NEON, where DOT_PROD_VNNI is sdot on the codes
 * shifted to int8, DOT_SIGNED_CODES and DOT_BCAST_XOR 0x80808080 defined
 * for it), DOT_PROD (DOT_PROD_VNNI: vpdpbusd; DOT_PROD_I16: 16-bit
 * products; DOT_PROD_SIGN: vpmaddubsw on sign-moved codes, 256 only;
 * DOT_PROD_W16: the 16-bit products on a weight already widened to 16
 * bits (kc_dot_relayout's layout), 256 only), DOT_COLS (1: the weight is
 * kc_dot_relayout's column tile major copy, 256 only; else absent or 0:
 * kc_amx_pack's K-step major codes; with DOT_PF, the loop prefetches the
 * codes DOT_PF x WB bytes ahead of those it reads, which on that layout
 * are the ones it reads next: without it a weight streamed from memory,
 * a few rows at a time, ran at the memory's latency), DOT_TARGET (the
 * form's target attribute) and DOT_FN(name) (the form's names) defined.
 * Internal to qgemm_dot.c; it undefines what it defines.
 *
 * A block is VR = 4 rows x VT vectors of VL columns (512: 4 x 16 = 64
 * columns, four packed tiles side by side; 256: 2 x 8 = 16 columns, one
 * tile's two halves). Per group of K the block's int32 sums stay in
 * registers; each K-quad step loads the VT weight vectors once and
 * multiplies them with each row's 4 activation codes, broadcast:
 *   VNNI: s += vpdpbusd(a, w), a the 4 uint8 codes;
 *   I16:  s += vpmaddwd(lo, even(w)) + vpmaddwd(hi, odd(w)), where lo and
 *         hi are the codes (a0, a2) and (a1, a3) as 16-bit pairs
 *         (kc_dot_prepare's layout) and even(w) / odd(w) the weight's
 *         bytes 0, 2 / 1, 3 of each quad sign-extended to 16 bits by two
 *         shifts: a0 w0 + a2 w2 and a1 w1 + a3 w3 are exact in 32 bits;
 *   W16:  the same products, even(w) and odd(w) loaded as they are from a
 *         weight widened once (at load, or per column block into a panel
 *         the chunk's row blocks share: kc_dot_relayout), no shifts;
 *   SIGN: s += vpmaddwd(vpmaddubsw(|c|, sign(w, c)), 1) with c = a - 128
 *         (int8) and |c| (kc_dot_prepare's layout): |c| <= 128 and |w| <=
 *         127, so a pair is at most 32512 and vpmaddubsw never saturates;
 *         the sums are of (a - 128) w, and the fold takes zp - 128 for zp.
 * Then the sums are folded as the AMX kernel folds its tiles (grouped) or
 * finished as kc_s8_epi_rows finishes oneDNN's (per channel). */

#define VR 4

#if DOT_W == 512
#define VI __m512i
#define VF __m512
#define VL 16
#define VT 4
#define W_OFF(t) ((size_t)(t) * 1024) /* vector t: the block's tile t */
#define LOADW(p) _mm512_load_si512((const void *)(p))
#define BCAST(p) _mm512_set1_epi32(kc_dot_ld32(p))
#define ZEROI() _mm512_setzero_si512()
#define ADDI(a, b) _mm512_add_epi32(a, b)
#define SUBI(a, b) _mm512_sub_epi32(a, b)
#define MULLOI(a, b) _mm512_mullo_epi32(a, b)
#define SET1I(x) _mm512_set1_epi32(x)
#define MADD16(a, b) _mm512_madd_epi16(a, b)
#define EVEN16(w) _mm512_srai_epi16(_mm512_slli_epi16(w, 8), 8)
#define ODD16(w) _mm512_srai_epi16(w, 8)
#define DPBUSD(s, a, w) _mm512_dpbusd_epi32(s, a, w)
#define CVTF(v) _mm512_cvtepi32_ps(v)
#define SET1F(x) _mm512_set1_ps(x)
#define ZEROF() _mm512_setzero_ps()
#define MULF(a, b) _mm512_mul_ps(a, b)
#define ADDF(a, b) _mm512_add_ps(a, b)
#define FMADDF(a, b, c) _mm512_fmadd_ps(a, b, c)
#define FNMADDF(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define LOADA(p) _mm512_load_ps(p)
#define STOREA(p, v) _mm512_store_ps(p, v)
#define MASK(cnt) ((__mmask16)((cnt) >= 16 ? 0xffff : (1u << (cnt)) - 1))
#define LOADF_N(p, cnt) _mm512_maskz_loadu_ps(MASK(cnt), p)
#define LOADI_N(p, cnt) _mm512_maskz_loadu_epi32(MASK(cnt), p)
#define STOREF_N(p, v, cnt) _mm512_mask_storeu_ps(p, MASK(cnt), v)
#elif DOT_W == 128 /* aarch64 NEON: the helpers these use are in qgemm_dot.c */
#define VI int32x4_t
#define VF float32x4_t
#define VL 4
#define VT 4
#define W_OFF(t) ((size_t)(t) * 16) /* vector t: quarter t of the tile's row */
#define LOADW(p) vreinterpretq_s32_s8(vld1q_s8((const int8_t *)(p)))
#define BCAST(p) vdupq_n_s32((int32_t)((uint32_t)kc_dot_ld32(p) ^ DOT_BCAST_XOR))
#define ZEROI() vdupq_n_s32(0)
#define ADDI(a, b) vaddq_s32(a, b)
#define SUBI(a, b) vsubq_s32(a, b)
#define MULLOI(a, b) vmulq_s32(a, b)
#define SET1I(x) vdupq_n_s32(x)
#define MADD16(a, b) kc_neon_madd16(a, b)
#define EVEN16(w) vreinterpretq_s32_s16(vshrq_n_s16(vshlq_n_s16(vreinterpretq_s16_s32(w), 8), 8))
#define ODD16(w) vreinterpretq_s32_s16(vshrq_n_s16(vreinterpretq_s16_s32(w), 8))
#define DPBUSD(s, a, w) vdotq_s32(s, vreinterpretq_s8_s32(a), vreinterpretq_s8_s32(w))
#define CVTF(v) vcvtq_f32_s32(v)
#define SET1F(x) vdupq_n_f32(x)
#define ZEROF() vdupq_n_f32(0.0f)
#define MULF(a, b) vmulq_f32(a, b)
#define ADDF(a, b) vaddq_f32(a, b)
#define FMADDF(a, b, c) vfmaq_f32(c, a, b)
#define FNMADDF(a, b, c) vfmsq_f32(c, a, b)
#define LOADA(p) vld1q_f32(p)
#define STOREA(p, v) vst1q_f32(p, v)
#define LOADF_N(p, cnt) kc_neon_loadf_n(p, cnt)
#define LOADI_N(p, cnt) kc_neon_loadi_n(p, cnt)
#define STOREF_N(p, v, cnt) kc_neon_storef_n(p, v, cnt)
#else
#define VI __m256i
#define VF __m256
#define VL 8
#define VT 2
#define W_OFF(t) ((size_t)(t) * 32) /* vector t: half t of the tile's row */
#define LOADW(p) _mm256_load_si256((const __m256i *)(p))
#define BCAST(p) _mm256_set1_epi32(kc_dot_ld32(p))
#define ZEROI() _mm256_setzero_si256()
#define ADDI(a, b) _mm256_add_epi32(a, b)
#define SUBI(a, b) _mm256_sub_epi32(a, b)
#define MULLOI(a, b) _mm256_mullo_epi32(a, b)
#define SET1I(x) _mm256_set1_epi32(x)
#define MADD16(a, b) _mm256_madd_epi16(a, b)
#define EVEN16(w) _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8)
#define ODD16(w) _mm256_srai_epi16(w, 8)
#define DPBUSD(s, a, w) _mm256_dpbusd_avx_epi32(s, a, w)
#define CVTF(v) _mm256_cvtepi32_ps(v)
#define SET1F(x) _mm256_set1_ps(x)
#define ZEROF() _mm256_setzero_ps()
#define MULF(a, b) _mm256_mul_ps(a, b)
#define ADDF(a, b) _mm256_add_ps(a, b)
#define FMADDF(a, b, c) _mm256_fmadd_ps(a, b, c)
#define FNMADDF(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define LOADA(p) _mm256_load_ps(p)
#define STOREA(p, v) _mm256_store_ps(p, v)
#define MASK(cnt) \
    _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define LOADF_N(p, cnt) _mm256_maskload_ps(p, MASK(cnt))
#define LOADI_N(p, cnt) _mm256_maskload_epi32((const int *)(p), MASK(cnt))
#define STOREF_N(p, v, cnt) _mm256_maskstore_ps(p, MASK(cnt), v)
#endif

#if DOT_PROD == DOT_PROD_SIGN || defined(DOT_SIGNED_CODES)
#define ZP_OFF 128 /* the sums are of (a - 128) w: the fold takes zp - 128 */
#else
#define ZP_OFF 0
#endif
#if DOT_PROD == DOT_PROD_VNNI
#define CB 1 /* bytes per activation code in the layout the form reads */
#else
#define CB 2
#endif
#if DOT_PROD == DOT_PROD_W16
#define WB 2 /* bytes per weight code in the layout the form reads */
#else
#define WB 1
#endif
#if !defined(DOT_COLS)
#define DOT_COLS 0
#endif
#if (DOT_PROD == DOT_PROD_W16 || DOT_COLS) && DOT_W != 256
#error "the widened and column tile major layouts are 256-bit only"
#endif

/* What a block needs: the chunk, the weight, its first row and column,
 * its real rows and columns, and where its weight codes are: the first
 * packed step of its column tile (wb) and the stride of K steps (ws). */
typedef struct {
    const kc_dot_rows *a;
    const kc_dot_weight *w;
    int r0, rr, c0, cols;
    const int8_t *wb;
    size_t ws;
} DOT_FN(blk);

/* Whether the block prefetches its codes: the first row block of its
 * column block, in the forms with DOT_PF. */
#if DOT_COLS && defined(DOT_PF)
#define PF_BLOCK(k) ((k)->r0 == 0)
#else
#define PF_BLOCK(k) false
#endif

/* Vector t's part of a step, present when the block has vector t. */
#if VT >= 2
#define T1(...) __VA_ARGS__
#else
#define T1(...)
#endif
#if VT >= 4
#define T23(...) __VA_ARGS__
#else
#define T23(...)
#endif

#if DOT_PROD == DOT_PROD_VNNI
/* One row's step: its 4 codes, broadcast, times each vector's codes. */
#define ROW_STEP(r, S0, S1, S2, S3)                                                        \
    do {                                                                               \
        const VI av = BCAST(ap + (size_t)(r) * rs);                                    \
        S0 = DPBUSD(S0, av, w0);                                                       \
        T1(S1 = DPBUSD(S1, av, w1);)                                                   \
        T23(S2 = DPBUSD(S2, av, w2); S3 = DPBUSD(S3, av, w3);)                         \
    } while (0)
#elif DOT_PROD == DOT_PROD_SIGN
/* One row's step: c = a - 128 and |c|, broadcast; c's signs moved onto
 * each vector's codes, |c| times those, pairs summed into 32 bits. */
#define ROW_STEP(r, S0, S1, S2, S3)                                                        \
    do {                                                                               \
        const VI as = BCAST(ap + (size_t)(r) * rs), ab = BCAST(ap + (size_t)(r) * rs + 4); \
        S0 = ADDI(S0, MADD16(_mm256_maddubs_epi16(ab, _mm256_sign_epi8(w0, as)), ones));   \
        T1(S1 = ADDI(S1,                                                               \
                     MADD16(_mm256_maddubs_epi16(ab, _mm256_sign_epi8(w1, as)), ones));)   \
    } while (0)
#else
/* One row's step: its codes (a0, a2) and (a1, a3) as 16-bit pairs,
 * broadcast, times each vector's even and odd codes. */
#define ROW_STEP(r, S0, S1, S2, S3)                                                        \
    do {                                                                               \
        const VI lo = BCAST(ap + (size_t)(r) * rs), hi = BCAST(ap + (size_t)(r) * rs + 4); \
        S0 = ADDI(S0, ADDI(MADD16(lo, e0), MADD16(hi, o0)));                           \
        T1(S1 = ADDI(S1, ADDI(MADD16(lo, e1), MADD16(hi, o1)));)                       \
        T23(S2 = ADDI(S2, ADDI(MADD16(lo, e2), MADD16(hi, o2)));                       \
            S3 = ADDI(S3, ADDI(MADD16(lo, e3), MADD16(hi, o3)));)                      \
    } while (0)
#endif

/* One group's int32 sums of the block, VR rows x VT vectors over ks steps
 * of 64 codes of K, into s; q the block's first row at the group's first
 * code (row stride rs bytes), wt the group's first packed step at the
 * block's first column (step stride ws bytes); pf (a constant where it is
 * inlined: see DOT_FN(group)): prefetch the codes ahead (DOT_PF). The sums
 * live in named registers (an array of them in the loop made GCC copy
 * registers around every step). */
static inline __attribute__((always_inline)) DOT_TARGET void
DOT_FN(group_pf)(const uint8_t *q, size_t rs, const int8_t *wt, size_t ws, int ks, VI s[VR][VT],
                 const bool pf)
{
    VI s00 = ZEROI(), s10 = s00, s20 = s00, s30 = s00;
    T1(VI s01 = s00, s11 = s00, s21 = s00, s31 = s00;)
    T23(VI s02 = s00, s12 = s00, s22 = s00, s32 = s00, s03 = s00, s13 = s00, s23 = s00,
        s33 = s00;)
    for (int st = 0; st < ks; st++)
        for (int qd = 0; qd < 16; qd++) {
            const int8_t *wp = wt + (size_t)st * ws + (size_t)qd * 64 * WB;
            const uint8_t *ap = q + ((size_t)st * 64 + (size_t)qd * 4) * CB;
#if DOT_COLS && defined(DOT_PF)
            if (pf) { /* the codes are one sequential stream: fetch ahead */
                _mm_prefetch((const char *)wp + DOT_PF * WB, _MM_HINT_T0);
                if (WB == 2)
                    _mm_prefetch((const char *)wp + DOT_PF * WB + 64, _MM_HINT_T0);
            }
#else
            (void)pf;
#endif
#if DOT_PROD == DOT_PROD_W16 /* vector t: its even then its odd halves */
            const VI e0 = LOADW(wp), o0 = LOADW(wp + 32);
            T1(const VI e1 = LOADW(wp + 2 * W_OFF(1)), o1 = LOADW(wp + 2 * W_OFF(1) + 32);)
#else
            const VI w0 = LOADW(wp);
            T1(const VI w1 = LOADW(wp + W_OFF(1));)
            T23(const VI w2 = LOADW(wp + W_OFF(2)), w3 = LOADW(wp + W_OFF(3));)
#endif
#if DOT_PROD == DOT_PROD_W16
#elif DOT_PROD == DOT_PROD_SIGN
            const VI ones = _mm256_set1_epi16(1);
#elif DOT_PROD != DOT_PROD_VNNI
            const VI e0 = EVEN16(w0), o0 = ODD16(w0);
            T1(const VI e1 = EVEN16(w1), o1 = ODD16(w1);)
            T23(const VI e2 = EVEN16(w2), o2 = ODD16(w2), e3 = EVEN16(w3), o3 = ODD16(w3);)
#endif
            ROW_STEP(0, s00, s01, s02, s03);
            ROW_STEP(1, s10, s11, s12, s13);
            ROW_STEP(2, s20, s21, s22, s23);
            ROW_STEP(3, s30, s31, s32, s33);
        }
    s[0][0] = s00, s[1][0] = s10, s[2][0] = s20, s[3][0] = s30;
    T1(s[0][1] = s01, s[1][1] = s11, s[2][1] = s21, s[3][1] = s31;)
    T23(s[0][2] = s02, s[1][2] = s12, s[2][2] = s22, s[3][2] = s32;)
    T23(s[0][3] = s03, s[1][3] = s13, s[2][3] = s23, s[3][3] = s33;)
}

/* DOT_FN(group_pf) with the prefetch or without, each a loop of its own:
 * the first row block of a column block prefetches (the codes may come
 * from memory), the others read what it left in cache. */
static inline __attribute__((always_inline)) DOT_TARGET void
DOT_FN(group)(const uint8_t *q, size_t rs, const int8_t *wt, size_t ws, int ks, VI s[VR][VT],
              bool pf)
{
    if (pf)
        DOT_FN(group_pf)(q, rs, wt, ws, ks, s, true);
    else
        DOT_FN(group_pf)(q, rs, wt, ws, ks, s, false);
}

/* Folds group b's sums into the block's FP32 sums acc (VR x VT*VL), as
 * the AMX kernel: acc += (sums - zp * csf) * sx * gs (exact integers
 * until the scales: both terms are below 2^24 for groups <= 512). */
static inline __attribute__((always_inline)) DOT_TARGET void
DOT_FN(fold)(VI s[VR][VT], int b, const DOT_FN(blk) * k, float *acc)
{
    const kc_dot_weight *w = k->w;
    const float *csb = w->csf + (size_t)b * w->n + k->c0, *gsb = w->gs + (size_t)b * w->n + k->c0;
    VF cs[VT], gs[VT];
    for (int t = 0; t < VT; t++) {
        const int left = k->cols - t * VL;
        cs[t] = left > 0 ? LOADF_N(csb + t * VL, left) : ZEROF();
        gs[t] = left > 0 ? LOADF_N(gsb + t * VL, left) : ZEROF();
    }
    for (int r = 0; r < k->rr; r++) {
        const size_t at = (size_t)(k->r0 + r) * w->nb + b;
        const VF zp = SET1F((float)(k->a->zp[at] - ZP_OFF)), sx = SET1F(k->a->sx[at]);
        for (int t = 0; t < VT; t++) {
            const VF v = FNMADDF(zp, cs[t], CVTF(s[r][t]));
            float *o = acc + r * VT * VL + t * VL;
            STOREA(o, FMADDF(MULF(v, sx), gs[t], LOADA(o)));
        }
    }
}

/* Row r's VT vectors of results (+ bias) into y, then GELU over them. */
static inline __attribute__((always_inline)) DOT_TARGET void
DOT_FN(store)(const DOT_FN(blk) * k, int r, VF v[VT], float *y, size_t ldy)
{
    float *o = y + (size_t)(k->r0 + r) * ldy + k->c0;
    for (int t = 0; t < VT; t++) {
        const int left = k->cols - t * VL;
        if (left <= 0)
            break;
        if (k->w->bias)
            v[t] = ADDF(v[t], LOADF_N(k->w->bias + k->c0 + t * VL, left));
        STOREF_N(o + t * VL, v[t], left);
    }
    if (k->w->gelu)
        kc_gelu(o, k->cols);
}

/* A per-channel block (nb == 1): y = (float)(sums - zp * colsum) * gs *
 * sx (+ bias), the order of kc_s8_epi_rows, so that the result is the
 * oneDNN form's bit for bit. */
static DOT_TARGET void DOT_FN(block1)(const DOT_FN(blk) * k, float *y, size_t ldy)
{
    const kc_dot_weight *w = k->w;
    const size_t rs = (size_t)w->g * CB;
    VI s[VR][VT];
    DOT_FN(group)(k->a->q + (size_t)k->r0 * rs, rs, k->wb, k->ws, w->g / 64, s, PF_BLOCK(k));
    VI cs[VT];
    VF sc[VT];
    for (int t = 0; t < VT; t++) {
        const int left = k->cols - t * VL;
        cs[t] = left > 0 ? LOADI_N(w->colsum + k->c0 + t * VL, left) : ZEROI();
        sc[t] = left > 0 ? LOADF_N(w->gs + k->c0 + t * VL, left) : ZEROF();
    }
    for (int r = 0; r < k->rr; r++) {
        const VI zp = SET1I(k->a->zp[k->r0 + r] - ZP_OFF);
        const VF sx = SET1F(k->a->sx[k->r0 + r]);
        VF v[VT];
        for (int t = 0; t < VT; t++)
            v[t] = MULF(MULF(CVTF(SUBI(s[r][t], MULLOI(zp, cs[t]))), sc[t]), sx);
        DOT_FN(store)(k, r, v, y, ldy);
    }
}

/* A grouped block (nb > 1): each group's sums folded into FP32 sums kept
 * in L1, then bias and GELU. */
static DOT_TARGET void DOT_FN(blockg)(const DOT_FN(blk) * k, float *y, size_t ldy)
{
    const kc_dot_weight *w = k->w;
    const int ks = w->g / 64;
    const size_t rs = (size_t)w->nb * w->g * CB;
    float acc[VR * VT * VL] __attribute__((aligned(64)));
    memset(acc, 0, sizeof acc);
    for (int b = 0; b < w->nb; b++) {
        VI s[VR][VT];
        DOT_FN(group)(k->a->q + (size_t)k->r0 * rs + (size_t)b * w->g * CB, rs,
                      k->wb + (size_t)b * ks * k->ws, k->ws, ks, s, PF_BLOCK(k));
        DOT_FN(fold)(s, b, k, acc);
    }
    for (int r = 0; r < k->rr; r++) {
        VF v[VT];
        for (int t = 0; t < VT; t++)
            v[t] = LOADA(acc + r * VT * VL + t * VL);
        DOT_FN(store)(k, r, v, y, ldy);
    }
}

/* The chunk's row blocks on columns [c, c + VT * VL) of c1, the weight
 * codes of that column block at wb, K steps ws bytes apart. */
static DOT_TARGET void DOT_FN(rows)(const kc_dot_rows *a, const kc_dot_weight *w, int c, int c1,
                                    const int8_t *wb, size_t ws, float *y, size_t ldy)
{
    for (int r0 = 0; r0 < a->rows; r0 += VR) {
        const DOT_FN(blk) k = {a, w, r0, a->rows - r0 < VR ? a->rows - r0 : VR, c,
                               c1 - c < VT * VL ? c1 - c : VT * VL, wb, ws};
        if (w->nb == 1)
            DOT_FN(block1)(&k, y, ldy);
        else
            DOT_FN(blockg)(&k, y, ldy);
    }
}

/* The form's kc_dot_chunk: column blocks outer (a block's weights stay in
 * cache while the rows pass), blocks of VR rows inner. kc_amx_pack's codes
 * are K-step major (a step's tiles side by side, n / 16 KiB apart);
 * kc_dot_relayout's column tile major (a tile's steps one after the other,
 * 1024 WB bytes each). */
static DOT_TARGET void DOT_FN(chunk)(const kc_dot_rows *a, const kc_dot_weight *w, int c0,
                                     int c1, float *y, size_t ldy)
{
#if DOT_PROD == DOT_PROD_W16 || DOT_COLS
    const size_t steps = (size_t)w->nb * (w->g / 64), tb = 1024 * WB;
    for (int c = c0; c < c1; c += VT * VL)
        DOT_FN(rows)(a, w, c, c1, w->packed + (size_t)(c / 16) * steps * tb, tb, y, ldy);
#else
    const size_t ws = (size_t)((w->n + 15) / 16) * 1024;
    for (int c = c0; c < c1; c += VT * VL)
        DOT_FN(rows)(a, w, c, c1, w->packed + (size_t)(c / 16) * 1024, ws, y, ldy);
#endif
}

#if DOT_PROD == DOT_PROD_W16
/* The panel form's kc_dot_chunk, on the int8 packed weight: each column
 * tile (16 columns, all of K) widened once into a->panel (kc_dot_relayout's
 * layout for one tile), which all the chunk's row blocks then read. */
static DOT_TARGET void DOT_FN(chunk_panel)(const kc_dot_rows *a, const kc_dot_weight *w, int c0,
                                           int c1, float *y, size_t ldy)
{
    const size_t n16 = (size_t)(w->n + 15) / 16, steps = (size_t)w->nb * (w->g / 64);
    for (int c = c0; c < c1; c += VT * VL) {
        for (size_t st = 0; st < steps; st++)
            dot_widen16(w->packed + (st * n16 + (size_t)c / 16) * 1024, 1024,
                         a->panel + st * 2048);
        DOT_FN(rows)(a, w, c, c1, a->panel, 2048, y, ldy);
    }
}
#endif

#undef VR
#undef VI
#undef VF
#undef VL
#undef VT
#undef W_OFF
#undef LOADW
#undef BCAST
#undef ZEROI
#undef ADDI
#undef SUBI
#undef MULLOI
#undef SET1I
#undef MADD16
#undef EVEN16
#undef ODD16
#undef DPBUSD
#undef CVTF
#undef SET1F
#undef ZEROF
#undef MULF
#undef ADDF
#undef FMADDF
#undef FNMADDF
#undef LOADA
#undef STOREA
#undef MASK
#undef LOADF_N
#undef LOADI_N
#undef STOREF_N
#undef CB
#undef PF_BLOCK
#undef WB
#undef DOT_COLS
#undef ZP_OFF
#undef T1
#undef T23
#undef ROW_STEP
