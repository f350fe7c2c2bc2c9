/* qgemm_dot.h: the vector kernels of the INT8 GEMM (qgemm_s8.c) for CPUs
 * without AMX, internal to kernels/cpu: int8 (one scale per output
 * channel) and int8g (one per channel and group of K) on the weight packed
 * for the AMX kernel (kc_amx_pack) or a copy of it (kc_dot_relayout), in
 * eight forms:
 *
 *   KC_DOT_VNNI512  AVX512_VNNI: vpdpbusd on 16 columns a vector
 *   KC_DOT_I16_512  AVX-512 without VNNI: 16-bit products (vpmaddwd)
 *   KC_DOT_VNNI256  AVX-VNNI: 256-bit vpdpbusd on 8 columns a vector
 *   KC_DOT_SIGN256  AVX2: vpmaddubsw on the codes shifted to int8 with
 *                   their sign moved onto the weight, as llama.cpp's Q8_0
 *                   dot product does (|a| <= 128, so pairs fit in 16 bits)
 *   KC_DOT_SIGNC256 AVX2: the sign form on the codes column tile major
 *                   (kc_dot_relayout: the same bytes, a column block's
 *                   codes contiguous, read as one stream with a software
 *                   prefetch 4 KiB ahead)
 *   KC_DOT_I16_256  AVX2: 16-bit products (vpmaddwd)
 *   KC_DOT_W16_256  AVX2: the same products on a weight widened to 16 bits
 *                   once at load (kc_dot_relayout: twice int8's bytes,
 *                   column tile major, prefetched as avx2_signc), so the
 *                   inner loop is vpmaddwd and vpaddd alone
 *   KC_DOT_PANEL256 AVX2: the same on the int8 packed weight, each column
 *                   tile widened per chunk into a panel (kc_dot_rows.panel)
 *                   that the chunk's row blocks share; a chunk of one row
 *                   block runs KC_DOT_I16_256's loop instead
 *
 * Every form's int32 sums are exact and equal: where there is no VNNI the
 * products never go through vpmaddubsw on the uint8 codes themselves,
 * whose 16-bit pair sums saturate (255 x 127 x 2 > 32767: what oneDNN's
 * int8 matmul does on such CPUs, and why the int8 GEMM gave wrong results
 * there). The epilogues are the same float operations in every form, so
 * the forms' outputs are bitwise equal (tests/unit/test_qgemm.c checks
 * it). On AVX2 the sign form measured 10-15% faster than the 16-bit one
 * on a Sapphire Rapids core stepped down to AVX2
 * (bench/results/int8-kernels-2026-11-26.md), and the sign form on
 * column-block-major, prefetched codes (avx2_signc, the AVX2 level's
 * choice) as fast or faster than either, 5-16% end to end, where the
 * weight kept 16-bit lost (bench/results/avx2-int16-2026-11-27.md); all
 * stay, and bench/int8_avx2_ab.c compares them on any CPU.
 */
#ifndef MT_KERNELS_CPU_QGEMM_DOT_H
#define MT_KERNELS_CPU_QGEMM_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KC_DOT_VNNI512,
    KC_DOT_I16_512,
    KC_DOT_VNNI256,
    KC_DOT_I16_256,
    KC_DOT_SIGN256,
    KC_DOT_W16_256,
    KC_DOT_PANEL256,
    KC_DOT_SIGNC256,
    KC_DOT_NEON_SDOT, /* aarch64 with the dot product: sdot on the codes shifted to int8 */
    KC_DOT_NEON_I16,  /* any aarch64: 16-bit products */
    KC_DOT_COUNT
} kc_dot_form;

/* The packed weight and what the epilogue needs of it. */
typedef struct {
    const int8_t *packed;  /* kc_amx_pack's layout, groups of g (a multiple of 64), or
                              kc_dot_relayout's copy for the forms that read one */
    int n, nb, g;          /* columns, groups, group size */
    const float *gs;       /* nb > 1: (nb, n) group scales; nb == 1: n channel scales */
    const float *csf;      /* nb > 1: (nb, n) code sums per group, as floats */
    const int32_t *colsum; /* nb == 1: n code sums per channel */
    const float *bias;     /* n, or NULL */
    bool gelu;
} kc_dot_weight;

/* A chunk's activations: rows (padded with any codes to a multiple of 4)
 * of kp = nb * g uint8 codes each, in the layout kc_dot_prepare made for
 * the form; sx / zp (rows, nb) their scales and zero points; panel: the
 * calling thread's kc_dot_panel_bytes of 64-byte aligned scratch for the
 * forms that widen the weight per chunk (else NULL). */
typedef struct {
    const uint8_t *q;
    int rows;
    const float *sx;
    const int32_t *zp;
    int8_t *panel;
} kc_dot_rows;

/* Whether the form may run at the ISA level in force (kernels/cpu/cpu_isa.h). */
bool kc_dot_available(kc_dot_form form);
/* "avx512_vnni", "avx512_i16", "avx2_vnni", "avx2_i16", "avx2_sign",
 * "avx2_w16", "avx2_panel", "avx2_signc", "neon_sdot", "neon_i16". */
const char *kc_dot_name(kc_dot_form form);

/* Whether the form reads its own copy of kc_amx_pack's codes
 * (kc_dot_relayout), not the packed codes themselves. */
bool kc_dot_relayout_needed(kc_dot_form form);
/* That copy, of kc_amx_pack's codes of n columns in nb groups of gp (a
 * multiple of 64), into a new 64-byte aligned buffer (free: free()),
 * *bytes its size; NULL when out of memory. Its tiles are column tile
 * major (a tile's nb * gp / 64 K steps one after the other), so that a
 * column block's codes are contiguous; KC_DOT_W16_256's are also widened
 * to 16 bits (2048 bytes a tile): each 32-byte vector (8 columns x 4 codes
 * of K) becomes its even codes (0, 2 of each quad) then its odd ones (1,
 * 3), 16 int16 each. */
int8_t *kc_dot_relayout(kc_dot_form form, const int8_t *packed, int n, int nb, int gp,
                        size_t *bytes);
/* Scratch bytes of a chunk's panel (kc_dot_rows.panel) for kp codes of K
 * (a multiple of 64): 32 kp for KC_DOT_PANEL256, else 0. */
size_t kc_dot_panel_bytes(kc_dot_form form, size_t kp);

/* Bytes per activation code in the form's layout (1 or 2). */
int kc_dot_code_bytes(kc_dot_form form);
/* The form's activation layout, from plain uint8 rows (rows x kp codes,
 * kp a multiple of 64) into dst (rows x kp x kc_dot_code_bytes): the
 * 16-bit forms want each quad (a0, a1, a2, a3) as the 16-bit words (a0,
 * a2, a1, a3); the sign form each quad as s = a - 128 (int8) then |s|.
 * For the VNNI forms (1 byte) the plain rows are the layout and nothing
 * is done. */
void kc_dot_prepare(kc_dot_form form, const uint8_t *q, int rows, size_t kp, uint8_t *dst);

/* y (rows x columns [c0, c1) of n; row stride ldy) = the chunk's rows
 * times the weight, with the epilogue: per group b, (sums_b - zp * csf_b)
 * * sx * gs_b summed in FP32 (nb > 1), or (sums - zp * colsum) in int32,
 * then * gs * sx in FP32 (nb == 1, kc_s8_epi_rows's order), + bias, then
 * GELU. c0 is a multiple of 64; c1 is a multiple of 64 or n. */
void kc_dot_chunk(kc_dot_form form, const kc_dot_rows *a, const kc_dot_weight *w, int c0,
                  int c1, float *y, size_t ldy);

#endif
