/* qgemm.h: CPU GEMMs for the low-precision resident weights (DESIGN.md,
 * "Precision"): y (m, n) = x (m, k) . deq(W)^T with x and y FP32 and W laid
 * out as engine/quant/quant.h describes ((n, k) row-major codes, per-output-channel
 * scales for the 8-bit formats).
 *
 *   fp16, bf16  W is decoded a panel of rows at a time into a bounded FP32
 *               scratch and multiplied with oneDNN's sgemm; activations stay
 *               FP32. No FP32 copy of the whole weight ever exists.
 *   fp8 (E4M3)  the same panels; the per-channel scale is applied in the
 *               epilogue, never to the decoded weights.
 *   fp32        W reordered once into oneDNN's blocked layout, multiplied by
 *               its f32 matmul (gemm_f32.c: sgemm packs W on every call).
 *   int8        W8A8: activations are quantized per token (row) on the fly,
 *               the int8 x int8 product accumulates in int32, exactly, on
 *               every ISA level (oneDNN's matmul where the CPU has VNNI or
 *               AMX, our kernels elsewhere: qgemm_s8.c), and the epilogue
 *               applies the token and channel scales.
 *
 * Every GEMM ends with the same epilogue: y = y * col_scale[n] (optional)
 * * row_scale[m] (optional) + bias[n] (optional), then GELU (optional, erf
 * form as kernels/cpu/ops.h). Functions return 0, or a negative KC_E* value;
 * they never print and never abort. tests/unit/test_qgemm.c checks them
 * against double-precision twins.
 */
#ifndef MT_KERNELS_CPU_QGEMM_H
#define MT_KERNELS_CPU_QGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KC_OK 0
#define KC_EINVAL (-1)  /* bad argument (negative size, NULL buffer, NaN code) */
#define KC_ENOMEM (-2)  /* scratch or weight memory could not be allocated */
#define KC_EDNNL (-3)   /* oneDNN refused or failed */
#define KC_ENOKERNEL (-4) /* the kernel asked for cannot run at the ISA level in force */

/* In place over y (m, n), rows in parallel: y = y * col_scale[c] * row_scale[r]
 * + bias[c], then GELU when gelu. Each of the three vectors may be NULL. */
int kc_epilogue(float *y, int m, int n, const float *col_scale, const float *row_scale,
                const float *bias, bool gelu);

/* The same epilogue on a block of m rows x n columns, on the calling
 * thread: reads src (row stride lds), writes y (row stride ldy; may be
 * src). For the GEMMs of kernels/cpu, inside their parallel regions. */
void kc_epi_rows(const float *src, size_t lds, float *y, size_t ldy, int m, int n,
                 const float *col_scale, const float *row_scale, const float *bias, bool gelu);

/* y = x . deq(W)^T (+ bias, GELU) for FP16 / BF16 weights (uint16 bits, (n, k)). */
int kc_gemm_f16(const float *x, int m, const uint16_t *w, int n, int k, const float *bias,
                bool gelu, float *y);
int kc_gemm_bf16(const float *x, int m, const uint16_t *w, int n, int k, const float *bias,
                 bool gelu, float *y);

/* The same for FP8 E4M3 codes (n, k) with one scale per output channel.
 * Codes must not be NaN (0x7f / 0xff): kc_e4m3_has_nan tells. */
int kc_gemm_fp8(const float *x, int m, const uint8_t *w, const float *scale, int n, int k,
                const float *bias, bool gelu, float *y);
bool kc_e4m3_has_nan(const uint8_t *w, size_t count);

#if defined(__AVX2__)
#include <immintrin.h>
/* 16 E4M3 codes (widened to 16 bits) as IEEE halves that read as value /
 * 256: sign to bit 15, exponent and mantissa to bits 13..7, exact for
 * normals and subnormals alike. NaN codes would read as 1.875: callers
 * refuse them first (kc_e4m3_has_nan). Shared by qgemm.c's panel decoder
 * and gemm_h16.c's kernel. */
static inline __m256i kc_e4m3_halves_div256(__m256i codes)
{
    return _mm256_or_si256(
        _mm256_slli_epi16(_mm256_and_si256(codes, _mm256_set1_epi16(0x7f)), 7),
        _mm256_slli_epi16(_mm256_and_si256(codes, _mm256_set1_epi16(0x80)), 8));
}
#endif

/* Per-token asymmetric UINT8 quantization of x (m, k): lo = min(x[r], 0),
 * hi = max(x[r], 0), sx[r] = (hi - lo) / 255 (1 for an all-zero row),
 * zp[r] = round(-lo / sx[r]) in [0, 255], q = clamp(round_half_even(x *
 * (1 / sx[r])) + zp[r], 0, 255) (numfmt.h's nf_f32_to_u8_asym), so x ~
 * (q - zp) * sx. Rows in parallel. This is what kc_gemm_s8 does to its
 * input for a per-channel weight; for a grouped one, the same per group of
 * the weight's group size within each row. */
int kc_quantize_rows_u8(const float *x, int m, int k, uint8_t *q, float *sx, int32_t *zp);

/* An INT8 weight (symmetric codes (n, k) + scale[n]) ready for the int8
 * GEMM: oneDNN's matmul primitives and the codes in the layout they read,
 * or the codes packed for one of our kernels (kc_s8_kernel). One object
 * may be used by several threads at once. The codes and scales are
 * BORROWED: they must stay valid and unchanged until kc_s8_weight_destroy,
 * unless kc_s8_weight_bytes > 0 (then the object has its own copy of the
 * codes, and for groups of the scales too).
 *
 * reorder false: the primitives read the borrowed codes in place, unless
 * oneDNN would run a lesser kernel on that layout than on its preferred
 * one (then as true). reorder true: the codes are copied once into the
 * blocked layout oneDNN prefers (when that differs), kept by the object.
 * Measured with the AMX kernel (one core, CPU time): the blocked copy is
 * as fast at N=1536 K=384, 5-15% faster at N=384 K=1536 and M = 128..4096,
 * and ~1.8x faster at M <= 16, where the in-place kernel's per-call packing
 * of the weight dominates; it costs a second copy of the codes. */
typedef struct kc_s8_weight kc_s8_weight;

/* k must be at most 66000 (the int32 sums must not overflow): KC_EINVAL. */

int kc_s8_weight_create(const int8_t *w, const float *scale, int n, int k, bool reorder,
                        kc_s8_weight **out);
void kc_s8_weight_destroy(kc_s8_weight *w);
/* The same with one scale per (output channel, group of `group` inputs):
 * scale is (n, ceil(k / group)) row-major, w ~ q * scale[ch][i / group]
 * ("int8g", engine/quant/quant.h). group in 1..512 (larger: KC_EINVAL), or
 * group >= k for one group (the per-channel form). The codes are read in
 * place or, when k is not a multiple of group or oneDNN prefers it, from a
 * reordered copy the object keeps (kc_s8_weight_bytes counts it); with that
 * copy (bytes > 0) neither the codes nor the scales are read after this
 * call returns, and the caller may free them. */
int kc_s8_weight_create_grouped(const int8_t *w, const float *scale, int n, int k, int group,
                                kc_s8_weight **out);

/* The kernels an INT8 weight can run on (qgemm_s8.c has the table of
 * which KC_S8_AUTO takes at each ISA level); every one gives exact int32
 * sums, and ours give bitwise the same outputs. */
typedef enum {
    KC_S8_AUTO,    /* the fastest exact kernel at the ISA level in force */
    KC_S8_ONEDNN,  /* oneDNN's int8 matmul: only where the CPU has VNNI or AMX */
    KC_S8_AMX,     /* our AMX tile kernel (groups only) */
    KC_S8_VNNI512, /* our AVX512_VNNI kernel */
    KC_S8_I16_512, /* our AVX-512 kernel on 16-bit products (no VNNI) */
    KC_S8_VNNI256, /* our AVX-VNNI kernel (256-bit) */
    KC_S8_I16_256,  /* our AVX2 kernel on 16-bit products */
    KC_S8_SIGN256,  /* our AVX2 kernel on sign-moved codes (vpmaddubsw) */
    KC_S8_W16_256,  /* our AVX2 kernel on 16-bit products, the weight kept 16-bit */
    KC_S8_PANEL256, /* the same, the weight int8 and widened per chunk into a panel */
    KC_S8_SIGNC256, /* the sign kernel on the codes laid out column block by column block */
    KC_S8_NEON_SDOT, /* our aarch64 kernel on the dot product (ARMv8.2 sdot) */
    KC_S8_NEON_I16,  /* our aarch64 kernel on 16-bit products (any ARMv8) */
    KC_S8_KERNEL_COUNT
} kc_s8_kernel;

/* Whether the kernel can run (exactly) at the ISA level in force. */
bool kc_s8_kernel_available(kc_s8_kernel kernel);
/* "auto", "onednn", "amx", "avx512_vnni", "avx512_i16", "avx2_vnni",
 * "avx2_i16", "avx2_sign", "avx2_w16", "avx2_panel", "avx2_signc", "neon_sdot",
 * "neon_i16". */
const char *kc_s8_kernel_name(kc_s8_kernel kernel);
/* kc_s8_weight_create_grouped (group >= k: per channel) on the kernel
 * given; KC_ENOKERNEL where it cannot run here (AMX: groups only). */
int kc_s8_weight_create_with(const int8_t *w, const float *scale, int n, int k, int group,
                             kc_s8_kernel kernel, kc_s8_weight **out);
/* The kernel the weight runs on (never KC_S8_AUTO). */
kc_s8_kernel kc_s8_weight_kernel(const kc_s8_weight *w);
/* The kernel KC_S8_AUTO takes at the ISA level in force (or the one
 * kc_s8_force gave: tests force oneDNN's, inexact without VNNI, to show
 * the load check refusing it). */
kc_s8_kernel kc_s8_kernel_auto(void);
/* Makes KC_S8_AUTO take kernel (KC_S8_AUTO: the level's own choice again),
 * for weights made from now on; the engine's options call it with
 * MANTISSA_INT8_KERNEL (engine/options.c). kc_s8_forced answers it. */
void kc_s8_force(kc_s8_kernel kernel);
kc_s8_kernel kc_s8_forced(void);

/* Resident bytes the object adds to the borrowed codes and scales: a copy
 * of the codes reordered into a blocked layout (with any compensation
 * oneDNN keeps with them) when the kernel needs one, else 0. Primitives and
 * per-call scratch are not counted. */
size_t kc_s8_weight_bytes(const kc_s8_weight *w);
/* Activation smoothing (SmoothQuant): the codes were made from W diag(s);
 * each call then quantizes x diag(1/s) per token. in_div holds 1/s (k
 * floats, copied). */
int kc_s8_weight_set_smooth(kc_s8_weight *w, const float *in_div);
/* The implementation the weight's GEMM runs: "onednn:" and oneDNN's name
 * ("onednn:brg:avx512_core_amx_int8"), or our kernel and the format
 * ("avx2:int8", "amx:int8g"). */
const char *kc_s8_weight_impl(const kc_s8_weight *w);

/* y = ((q(x) - zp[row]) . W^T) * sx[row] * scale[col] (+ bias, GELU), W8A8
 * with q(x) as kc_quantize_rows_u8. */
int kc_gemm_s8(const float *x, int m, kc_s8_weight *w, const float *bias, bool gelu, float *y);

/* An FP32 weight (n, k) ready for oneDNN's f32 matmul: W copied into
 * `threads`-wise column blocks in the blocked layout the primitives read
 * (so the caller may free w), the primitives shared by every weight of the
 * same shape. Where oneDNN cannot give one layout for every row count, the
 * object keeps a plain copy and multiplies with sgemm. One object may be
 * used by several threads at once. */
#define KC_F32_CHUNK 128     /* rows per matmul call */
#define KC_F32_SHAPES_MAX 32 /* shapes with primitives; later ones run on sgemm */
typedef struct kc_f32_weight kc_f32_weight;
int kc_f32_weight_create(const float *w, int n, int k, int threads, kc_f32_weight **out);
void kc_f32_weight_destroy(kc_f32_weight *w);
/* Resident bytes of the object's copy of W. */
size_t kc_f32_weight_bytes(const kc_f32_weight *w);
/* Whether the weight runs on the blocked matmul (else on sgemm). */
bool kc_f32_weight_blocked(const kc_f32_weight *w);
/* y = x . W^T (+ bias, GELU). */
int kc_gemm_f32(const float *x, int m, const kc_f32_weight *w, const float *bias, bool gelu,
                float *y);

/* The same object for a BF16 weight (w: n x k BF16 codes), multiplied by
 * oneDNN's bf16 matmul (VDPBF16PS: twice the FP32 rate) with FP32 sums and
 * output; kc_gemm_f32 rounds each call's x to BF16 (nearest even) first, as
 * the GPU's BF16 GEMM does. Only where the CPU has AVX512_BF16
 * (kc_bf16_matmul_available; kc_bf16_matmul_set_enabled(false), the
 * engine's MANTISSA_NO_BF16_MATMUL=1, says no), and only
 * for shapes oneDNN gives one blocked layout: else KC_EDNNL, and the
 * caller keeps kc_gemm_bf16 (FP32 x, weights decoded per call). */
bool kc_bf16_matmul_available(void);
void kc_bf16_matmul_set_enabled(bool on);
int kc_bf16_weight_create(const uint16_t *w, int n, int k, int threads, kc_f32_weight **out);

/* FP16, BF16 and FP8 (E4M3) weights (gemm_h16.c): W packed once into
 * panels (k-major, the same bytes per value), widened in registers by the
 * GEMM; FP32 activations and sums. Two forms, by the ISA level in force
 * when the weight is created: AVX-512 (32-column panels) and AVX2 + FMA +
 * F16C (16-column panels, at the avx2 and avx2_vnni levels).
 * kc_h16_available: one of the two runs here (kc_h16_set_enabled(false),
 * the engine's MANTISSA_NO_H16_KERNEL=1, says no); elsewhere create returns
 * KC_EDNNL and callers keep the panel GEMMs (kc_gemm_f16, kc_gemm_bf16,
 * kc_gemm_fp8). kc_h16_kernel_name: "avx512_h16", "avx2_h16", or NULL where
 * none is available. scale: FP8's per-channel scales (n), NULL for the
 * 16-bit formats. FP8 codes must hold no NaN (kc_e4m3_has_nan), as for
 * kc_gemm_fp8. */
typedef enum { KC_H16_F16, KC_H16_BF16, KC_H16_E4M3 } kc_h16_fmt;
typedef struct kc_h16_weight kc_h16_weight;
bool kc_h16_available(void);
const char *kc_h16_kernel_name(void);
void kc_h16_set_enabled(bool on);
int kc_h16_weight_create(const void *w, int n, int k, kc_h16_fmt fmt, kc_h16_weight **out);
void kc_h16_weight_destroy(kc_h16_weight *w);
size_t kc_h16_weight_bytes(const kc_h16_weight *w);
int kc_gemm_h16(const float *x, int m, const kc_h16_weight *w, const float *scale,
                const float *bias, bool gelu, float *y);

#endif
