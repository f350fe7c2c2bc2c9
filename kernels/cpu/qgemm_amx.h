/* qgemm_amx.h: the AMX tile kernel behind the grouped int8 GEMM ("int8g",
 * kernels/cpu/qgemm_s8.c), and the packed weight layout it shares with the
 * vector kernels (qgemm_dot.h), internal to kernels/cpu. oneDNN's int8
 * matmul has no per-K-group scales, so with it each group of K is a batch
 * whose int32 result goes through memory; this kernel keeps each 16 x 64
 * output block's FP32 sums in L1 and folds every group's int32 tile into
 * them as soon as the tiles have it (AMX for the products, AVX-512 for the
 * scales). Used only where the ISA level in force has AMX-INT8
 * (kc_amx_available); elsewhere qgemm_s8.c runs the vector kernels, with
 * the same results bit for bit. */
#ifndef MT_KERNELS_CPU_QGEMM_AMX_H
#define MT_KERNELS_CPU_QGEMM_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/qgemm_dot.h"

/* K steps of one tile product, and output columns of one tile. */
#define KC_AMX_KSTEP 64
#define KC_AMX_NCOL 16

/* Whether the ISA level in force (kernels/cpu/cpu_isa.h) has AMX-INT8
 * with the tile state granted. */
bool kc_amx_available(void);

/* The weight's codes (n, k) row-major repacked for the tile kernel, in
 * nb = ceil(k / g) groups of g codes along K, each padded with zero codes
 * to gp = g rounded up to KC_AMX_KSTEP (so K becomes nb * gp), N padded to
 * a multiple of KC_AMX_NCOL, and three zero tiles after the last. *bytes
 * gets its size. NULL when out of memory. */
int8_t *kc_amx_pack(const int8_t *codes, int n, int k, int g, size_t *bytes);

/* One chunk of rows, columns [c0, c1) (c0 a multiple of 64, c1 of 64 or
 * n), on AMX tiles: what kc_dot_chunk computes (qgemm_dot.h), with the
 * same epilogues and the same results bit for bit; the chunk's rows are
 * padded to a multiple of 16 with any codes, in plain uint8 rows. */
void kc_amx_chunk(const kc_dot_rows *a, const kc_dot_weight *w, int c0, int c1, float *y,
                  size_t ldy);

#endif
