/* cpu_isa.c: the instruction-set level of the CPU kernels (cpu_isa.h):
 * what CPUID and the OS allow, capped by oneDNN's effective ISA, so that
 * one setting (ONEDNN_MAX_CPU_ISA, read by oneDNN and by engine/options.c,
 * which hands it here) steps oneDNN and our kernels down together. */
#include "kernels/cpu/cpu_isa.h"

#include <dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KC_ISA_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <strings.h>
#include <sys/auxv.h>
#define KC_ISA_ARM 1
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

/* The cap the engine handed over (kc_isa_set_cap); "" when none. */
static char isa_cap[32];

static const char *const isa_names[KC_ISA_COUNT] = {
    "avx2",           "avx2_vnni",       "avx512_core", "avx512_core_vnni",
    "avx512_core_bf16", "avx512_core_amx", "asimd",       "asimd_dotprod",
};

const char *kc_isa_name(kc_isa_level level)
{
    return (unsigned)level < KC_ISA_COUNT ? isa_names[level] : "?";
}

#ifdef KC_ISA_X86

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* What the CPU and the OS offer, before any cap. */
static kc_isa cpu_features(void)
{
    kc_isa f = {0};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return f;
    const unsigned avx_fma_f16c = (1u << 28) | (1u << 12) | (1u << 29), ecx1 = c;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const uint64_t xcr0 = ((uint64_t)hi << 32) | lo;
    if ((xcr0 & 0x6) != 0x6 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return f;
    const unsigned ebx7 = b, ecx7 = c, edx7 = d;
    f.avx2 = (ecx1 & avx_fma_f16c) == avx_fma_f16c && (ebx7 & (1u << 5));
    unsigned eax7_1 = 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d))
        eax7_1 = a;
    const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); /* F DQ BW VL */
    f.avx512 = (ebx7 & avx512) == avx512 && (xcr0 & 0xe0) == 0xe0;
    f.vnni256 = eax7_1 & (1u << 4);
    f.vnni512 = f.avx512 && (ecx7 & (1u << 11));
    f.bf16 = f.vnni512 && (eax7_1 & (1u << 5));
    const unsigned amx = (1u << 24) | (1u << 25); /* AMX-TILE, AMX-INT8 */
    f.amx = f.bf16 && (edx7 & amx) == amx && (xcr0 & (3ull << 17)) == (3ull << 17) &&
            syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return f;
}

#elif defined(KC_ISA_ARM)

static kc_isa cpu_features(void)
{
    kc_isa f = {0};
    f.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    return f;
}

#else

static kc_isa cpu_features(void)
{
    kc_isa f = {0};
    return f;
}

#endif

static kc_isa isa;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

/* Whether oneDNN's effective ISA (a bit set) holds all of level's bits. */
static bool onednn_allows(dnnl_cpu_isa_t eff, dnnl_cpu_isa_t level)
{
    return ((unsigned)eff & (unsigned)level) == (unsigned)level;
}

static void isa_probe(void)
{
    const kc_isa f = cpu_features();
#ifdef KC_ISA_ARM
    isa.dotprod = f.dotprod && strcasecmp(isa_cap, "ASIMD") != 0;
    isa.level = isa.dotprod ? KC_ISA_ASIMD_DOTPROD : KC_ISA_ASIMD;
    return;
#endif
    const dnnl_cpu_isa_t eff = dnnl_get_effective_cpu_isa();
    isa.avx2 = f.avx2; /* the floor: no cap takes our kernels below it */
    isa.avx512 = f.avx512 && onednn_allows(eff, dnnl_cpu_isa_avx512_core);
    isa.vnni512 = isa.avx512 && f.vnni512 && onednn_allows(eff, dnnl_cpu_isa_avx512_core_vnni);
    isa.bf16 = isa.vnni512 && f.bf16 && onednn_allows(eff, dnnl_cpu_isa_avx512_core_bf16);
    isa.amx = isa.bf16 && f.amx && onednn_allows(eff, dnnl_cpu_isa_avx512_core_amx);
    /* oneDNN's AVX-512 levels do not carry its avx2_vnni bit: a CPU with
     * AVX-VNNI keeps it wherever the level allows AVX-512 VNNI */
    isa.vnni256 = f.vnni256 && (onednn_allows(eff, dnnl_cpu_isa_avx2_vnni) || isa.vnni512);
    isa.level = isa.amx       ? KC_ISA_AVX512_CORE_AMX
                : isa.bf16    ? KC_ISA_AVX512_CORE_BF16
                : isa.vnni512 ? KC_ISA_AVX512_CORE_VNNI
                : isa.avx512  ? KC_ISA_AVX512_CORE
                : isa.vnni256 ? KC_ISA_AVX2_VNNI
                              : KC_ISA_AVX2;
}

const kc_isa *kc_isa_get(void)
{
    pthread_once(&isa_once, isa_probe);
    return &isa;
}

void kc_isa_set_cap(const char *cap)
{
    snprintf(isa_cap, sizeof isa_cap, "%s", cap ? cap : "");
}

int kc_isa_levels(kc_isa_level *out)
{
    const kc_isa f = cpu_features();
#ifdef KC_ISA_ARM
    const bool has[KC_ISA_COUNT] = {[KC_ISA_ASIMD] = true, [KC_ISA_ASIMD_DOTPROD] = f.dotprod};
#else
    const bool has[KC_ISA_COUNT] = {true, f.vnni256, f.avx512, f.vnni512, f.bf16, f.amx};
#endif
    int n = 0;
    for (int l = 0; l < KC_ISA_COUNT; l++)
        if (has[l])
            out[n++] = (kc_isa_level)l;
    return n;
}
