/* cpu_isa.h: the x86-64 instruction-set level the CPU kernels run at: one
 * answer for oneDNN and for our own kernels, so that stepping a machine
 * down (ONEDNN_MAX_CPU_ISA=AVX2, say) makes every numeric path of
 * kernels/cpu take the form a CPU of that level would take.
 *
 * On x86-64 the level is the highest of the list below that both this CPU
 * (CPUID, the OS's saved register state, the AMX tile grant) and oneDNN's
 * effective ISA allow; oneDNN's effective ISA is the CPU's, capped by the
 * ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) environment variable, which it
 * reads once. The binary itself needs AVX2, FMA and F16C (the Makefile's
 * x86-64-v3), so AVX2 is the floor: a cap below it leaves oneDNN's own
 * kernels lower and ours at AVX2. On aarch64 it is ASIMD, with the dot
 * product where the CPU has it (HWCAP_ASIMDDP) and the cap handed over
 * (kc_isa_set_cap, ONEDNN_MAX_CPU_ISA) is not "ASIMD". Computed once per
 * process. */
#ifndef MT_KERNELS_CPU_CPU_ISA_H
#define MT_KERNELS_CPU_CPU_ISA_H

#include <stdbool.h>
#include <stdint.h>

/* The levels, by oneDNN's names; AVX2_VNNI and AVX512_CORE are not
 * ordered between themselves (each has what the other lacks). */
typedef enum {
    KC_ISA_AVX2,             /* AVX2, FMA, F16C (Zen 2/3, Haswell to Comet Lake) */
    KC_ISA_AVX2_VNNI,        /* + AVX-VNNI, 256-bit vpdpbusd (Alder Lake and later clients) */
    KC_ISA_AVX512_CORE,      /* AVX-512 F/DQ/BW/VL, no VNNI (Skylake-SP) */
    KC_ISA_AVX512_CORE_VNNI, /* + AVX512_VNNI (Cascade Lake, Ice Lake, Zen 4) */
    KC_ISA_AVX512_CORE_BF16, /* + AVX512_BF16 (Cooper Lake, Zen 4) */
    KC_ISA_AVX512_CORE_AMX,  /* + AMX-TILE, AMX-INT8, AMX-BF16 (Sapphire Rapids) */
    KC_ISA_ASIMD,            /* aarch64: Advanced SIMD (NEON), the ARMv8.0 floor */
    KC_ISA_ASIMD_DOTPROD,    /* + the ARMv8.2 dot product (sdot: Neoverse, Graviton 2+) */
    KC_ISA_COUNT
} kc_isa_level;

/* What the kernels may use at the level in force. */
typedef struct {
    kc_isa_level level;
    bool avx2;    /* AVX2, FMA and F16C with the OS saving the ymm state (CPUID; the
                   * binary's x86-64-v3 floor, asked anyway by the kernels that need it) */
    bool avx512;  /* AVX-512 F/DQ/BW/VL */
    bool vnni256; /* 256-bit vpdpbusd (VEX AVX-VNNI) */
    bool vnni512; /* 512-bit vpdpbusd (AVX512_VNNI) */
    bool bf16;    /* AVX512_BF16 */
    bool amx;     /* AMX-INT8 with the tile state granted to this process */
    bool dotprod; /* aarch64: sdot / udot */
} kc_isa;

/* The level in force (computed on the first call, thread-safe). */
const kc_isa *kc_isa_get(void);

/* The levels this CPU (and OS) can run, whatever the cap, lowest first
 * (AVX2 first, the build's floor): into out (KC_ISA_COUNT at most);
 * returns how many. Each can be chosen with ONEDNN_MAX_CPU_ISA. */
int kc_isa_levels(kc_isa_level *out);

/* "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni",
 * "avx512_core_bf16", "avx512_core_amx" (oneDNN's names, lower case). */
const char *kc_isa_name(kc_isa_level level);

/* The ISA cap oneDNN was given (ONEDNN_MAX_CPU_ISA's value, or NULL), from
 * the engine's options (engine/options.c): kernels/ reads no environment.
 * On x86-64 oneDNN applies the cap itself and the level follows oneDNN's
 * effective ISA; on aarch64 "ASIMD" (any case) leaves out the dot product.
 * Call before the first kc_isa_get (the level is computed once). */
void kc_isa_set_cap(const char *cap);

#endif
