/* options.c: the runtime options table and its one read of the
 * environment (options.h), which also hands the kernels their settings. */
#include "engine/options.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/qgemm.h"

/* oneDNN's names for its ISA cap (it reads the variable itself, without
 * regard to case, and ignores a name it does not know: we refuse one). The
 * list is every name oneDNN 2.6 to 3.x knows on the architecture, and on
 * aarch64 also our own top level's (`mantissa cpu --levels`), which oneDNN
 * ignores: the level is then the CPU's, as that name asks. */
#if defined(__aarch64__)
#define ISA_VALUES "ALL|ASIMD|ASIMD_DOTPROD|SVE_128|SVE_256|SVE_384|SVE_512"
#else
#define ISA_VALUES                                                                        \
    "ALL|SSE41|AVX|AVX2|AVX2_VNNI|AVX2_VNNI_2|AVX512_MIC|AVX512_MIC_4OPS|AVX512_CORE|"   \
    "AVX512_CORE_VNNI|AVX512_CORE_BF16|AVX512_CORE_FP16|AVX512_CORE_AMX|AVX512_CORE_AMX_FP16"
#endif

/* The table. The CHOICE rows' value orders are the enums their readers
 * use: mt_cuda_gemm_path, mt_cuda_attn, kcu_w8a16_kernel, kc_s8_kernel. */
static const mt_opt_def table[MT_OPT_COUNT] = {
    [MT_OPT_CUDA_GEMM] = {"MANTISSA_CUDA_GEMM", "MT_CUDA_GEMM", MT_OPT_CHOICE,
                          "auto|fused|library", 0, 0, "auto",
                          "GPU: the 8-bit GEMMs' path: fused W8A16 kernel, cuBLASLt, or the "
                          "fastest measured per m"},
    [MT_OPT_CUDA_ATTN] = {"MANTISSA_CUDA_ATTN", "MT_CUDA_ATTN", MT_OPT_CHOICE, "auto|fp32|f16", 0,
                          0, "auto", "GPU: the attention kernel (auto: fp32 after an fp32 GEMM)"},
    [MT_OPT_CUDA_CROSSOVER] = {"MANTISSA_CUDA_CROSSOVER", "MT_CUDA_CROSSOVER", MT_OPT_INT,
                               "0..1000000", 0, 1000000, "0",
                               "GPU: a fixed row count from which 8-bit GEMMs use cuBLASLt "
                               "(0: measured or built in)"},
    [MT_OPT_CUDA_AUTOTUNE] = {"MANTISSA_CUDA_AUTOTUNE", "MT_CUDA_AUTOTUNE", MT_OPT_BOOL, "0|1", 0,
                              1, "1",
                              "GPU: time the 8-bit GEMM paths per weight shape and m at load "
                              "(0: a fixed crossover)"},
    [MT_OPT_CUDA_W8A16_BF16] = {"MANTISSA_CUDA_W8A16_BF16", "MT_CUDA_W8A16_BF16", MT_OPT_BOOL,
                                "0|1", 0, 1, "0",
                                "GPU: feed the W8A16 tensor cores bf16 (0: f16)"},
    [MT_OPT_CUDA_W8A16_KERNEL] = {"MANTISSA_CUDA_W8A16_KERNEL", "MT_CUDA_W8A16_KERNEL",
                                  MT_OPT_CHOICE, "auto|staged|direct", 0, 0, "auto",
                                  "GPU: the fused kernel for m <= 16 (auto: direct, weights "
                                  "into registers, up to the m the load measured it faster at "
                                  "per weight shape, else staged)"},
    [MT_OPT_CUDA_GELU] = {"MANTISSA_CUDA_GELU", "MT_CUDA_GELU", MT_OPT_CHOICE, "erf|tanh", 0, 0,
                          "tanh",
                          "GPU: GELU after a 16-bit GEMM: tanh (cuBLASLt's epilogue, the tanh "
                          "approximation) or erf (a pass)"},
    [MT_OPT_CUDA_ACT16] = {"MANTISSA_CUDA_ACT16", NULL, MT_OPT_BOOL, "0|1", 0, 1, "1",
                           "GPU: fp16/bf16 models keep their activations in 16 bits between "
                           "ops, int8/fp8 models in f16 (0: FP32, converted before each GEMM)"},
    [MT_OPT_CUDA_LN_QUANT] = {"MANTISSA_CUDA_LN_QUANT", NULL, MT_OPT_BOOL, "0|1", 0, 1, "1",
                              "GPU: a LayerNorm writes the E4M3 rows of the FP8 W8A8 GEMM after "
                              "it where the load measured that fastest (0: the GEMM quantizes "
                              "its rows in a pass)"},
    [MT_OPT_CUDA_INT8_W8A8] = {"MANTISSA_CUDA_INT8_W8A8", NULL, MT_OPT_BOOL, "0|1", 0, 1, "0",
                               "GPU: 1: int8 weights on f16 activations may also take INT8 "
                               "W8A8 on 8-bit tensor cores (our kernel, activations quantized "
                               "per token), where the load measures it fastest; 0 until a GPU "
                               "run has measured it"},
    [MT_OPT_CUDA_DEBUG_SYNC] = {"MANTISSA_CUDA_DEBUG_SYNC", "MT_CUDA_DEBUG_SYNC", MT_OPT_BOOL,
                                "0|1", 0, 1, "0",
                                "GPU: synchronise and check after every op, record no graphs "
                                "(slow; finds a failing kernel)"},
    [MT_OPT_CUDA_GRAPHS] = {"MANTISSA_CUDA_GRAPHS", "MT_CUDA_GRAPHS", MT_OPT_INT, "0|1|2", 0, 2,
                            "1",
                            "GPU: record forwards as CUDA graphs (0: plain forwards; 2, tests: "
                            "padded, always eager)"},
    [MT_OPT_CUDA_MODULE] = {"MANTISSA_CUDA_MODULE", NULL, MT_OPT_TEXT, "a path", 0, 0,
                            "next to the binary, then ../lib",
                            "GPU: the CUDA backend module (libmantissa_cuda.so) to load"},
    [MT_OPT_CUDA_DRIVER] = {"MANTISSA_CUDA_DRIVER", NULL, MT_OPT_TEXT, "a library", 0, 0,
                            "libcuda.so.1",
                            "GPU: the driver library probed before loading the module (tests: "
                            "a stand-in)"},
    [MT_OPT_INT8_KERNEL] = {"MANTISSA_INT8_KERNEL", NULL, MT_OPT_CHOICE,
                            "auto|onednn|amx|avx512_vnni|avx512_i16|avx2_vnni|avx2_i16|"
                            "avx2_sign|avx2_w16|avx2_panel|avx2_signc|neon_sdot|neon_i16",
                            0, 0, "auto",
                            "CPU: force the int8 GEMM kernel (tests; onednn even where it is not "
                            "exact)"},
    [MT_OPT_NO_H16_KERNEL] = {"MANTISSA_NO_H16_KERNEL", NULL, MT_OPT_BOOL, "0|1", 0, 1, "0",
                              "CPU: 1: fp16/bf16/fp8 weights decoded into sgemm, not our "
                              "AVX-512 or AVX2 kernel"},
    [MT_OPT_NO_BF16_MATMUL] = {"MANTISSA_NO_BF16_MATMUL", NULL, MT_OPT_BOOL, "0|1", 0, 1, "0",
                               "CPU: 1: bf16 weights as fp16's path, not oneDNN's bf16 matmul"},
    [MT_OPT_MAX_CPU_ISA] = {"ONEDNN_MAX_CPU_ISA", NULL, MT_OPT_CHOICE, ISA_VALUES, 0, 0,
                            "the CPU's",
                            "CPU: cap the instruction set, oneDNN's and our kernels' alike "
                            "(oneDNN's variable; any case)"},
    [MT_OPT_NO_REEXEC] = {"MANTISSA_NO_REEXEC", NULL, MT_OPT_BOOL, "0|1", 0, 1, "0",
                          "1: do not restart with OMP_WAIT_POLICY=active GOMP_SPINCOUNT=1000 "
                          "(set by that restart)"},
    [MT_OPT_OMP_NUM_THREADS] = {"OMP_NUM_THREADS", NULL, MT_OPT_OUTSIDE, "libgomp's", 0, 0,
                                "libgomp's",
                                "libgomp's; the CPU backend sets its own team (engine_threads, else every CPU)"},
    [MT_OPT_OMP_WAIT_POLICY] = {"OMP_WAIT_POLICY", NULL, MT_OPT_OUTSIDE, "libgomp's", 0, 0,
                                "active (by the restart)",
                                "libgomp's; set, it stops the restart"},
    [MT_OPT_GOMP_SPINCOUNT] = {"GOMP_SPINCOUNT", NULL, MT_OPT_OUTSIDE, "libgomp's", 0, 0,
                               "1000 (by the restart)", "libgomp's; set, it stops the restart"},
};

static struct {
    pthread_once_t once;
    mt_status status;
    mt_err err;
    char warnings[2048];
    const char *text[MT_OPT_COUNT]; /* as set; NULL: unset */
    int value[MT_OPT_COUNT];
} st = {.once = PTHREAD_ONCE_INIT};

/* The index of v among a CHOICE row's values (any case), or -1. */
static int choice_index(const char *values, const char *v)
{
    const size_t n = strlen(v);
    int i = 0;
    for (const char *p = values; *p; i++) {
        const char *bar = strchr(p, '|');
        const size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncasecmp(p, v, n))
            return i;
        if (!bar)
            break;
        p = bar + 1;
    }
    return -1;
}

/* The default's value: a row's dflt where it is a number or one of its values. */
static int default_value(const mt_opt_def *d)
{
    if (d->type == MT_OPT_CHOICE) {
        const int i = choice_index(d->values, d->dflt);
        return i < 0 ? 0 : i;
    }
    return d->type == MT_OPT_BOOL || d->type == MT_OPT_INT ? atoi(d->dflt) : 0;
}

/* v parsed for row d into *out; false when it is not an allowed value. */
static bool parse_value(const mt_opt_def *d, const char *v, int *out)
{
    if (d->type == MT_OPT_CHOICE) {
        *out = choice_index(d->values, v);
        return *out >= 0;
    }
    if (d->type == MT_OPT_BOOL || d->type == MT_OPT_INT) {
        char *end;
        errno = 0;
        const long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < d->min || x > d->max)
            return false;
        *out = (int)x;
        return true;
    }
    *out = 0;
    return true;
}

/* The value of one row: its name's, else its old name's (with a warning). */
static void read_one(mt_opt id)
{
    const mt_opt_def *d = &table[id];
    const char *v = getenv(d->name), *old = d->old ? getenv(d->old) : NULL;
    const char *used = d->name;
    if (old && *old) {
        const size_t w = strlen(st.warnings);
        snprintf(st.warnings + w, sizeof st.warnings - w,
                 v && *v ? "mantissa: %s is the old name of %s, which is also set: %s ignored\n"
                         : "mantissa: %s is the old name of %s: honoured for now, please "
                           "rename it\n",
                 d->old, d->name, d->old);
        if (!v || !*v) {
            v = old;
            used = d->old;
        }
    }
    st.value[id] = default_value(d);
    if (!v || !*v)
        return;
    st.text[id] = v;
    int x;
    if (!parse_value(d, v, &x)) {
        if (st.status == MT_OK)
            st.status = mt_fail(&st.err, MT_EINVAL, "%s=%s: not allowed; %s takes %s (%s)", used,
                                v, used, d->values, d->help);
        return;
    }
    st.value[id] = x;
}

/* The kernels' settings (kernels/ reads no variable). */
static void hand_to_kernels(void)
{
    kc_isa_set_cap(st.text[MT_OPT_MAX_CPU_ISA]);
    kc_s8_force((kc_s8_kernel)st.value[MT_OPT_INT8_KERNEL]);
    kc_h16_set_enabled(!st.value[MT_OPT_NO_H16_KERNEL]);
    kc_bf16_matmul_set_enabled(!st.value[MT_OPT_NO_BF16_MATMUL]);
}

static void read_all(void)
{
    st.status = MT_OK;
    for (int i = 0; i < MT_OPT_COUNT; i++)
        read_one((mt_opt)i);
    hand_to_kernels();
}

mt_status mt_options_init(mt_err *err)
{
    pthread_once(&st.once, read_all);
    if (st.status != MT_OK && err)
        *err = st.err;
    return st.status;
}

const char *mt_options_warnings(void)
{
    pthread_once(&st.once, read_all);
    return st.warnings;
}

const mt_opt_def *mt_opt_def_of(mt_opt id)
{
    return (unsigned)id < MT_OPT_COUNT ? &table[id] : NULL;
}

int mt_opt_int(mt_opt id)
{
    pthread_once(&st.once, read_all);
    return (unsigned)id < MT_OPT_COUNT ? st.value[id] : 0;
}

const char *mt_opt_text(mt_opt id)
{
    pthread_once(&st.once, read_all);
    return (unsigned)id < MT_OPT_COUNT ? st.text[id] : NULL;
}

const char *mt_opt_choice(mt_opt id, int i)
{
    if ((unsigned)id >= MT_OPT_COUNT || table[id].type != MT_OPT_CHOICE || i < 0)
        return NULL;
    static __thread char buf[64];
    const char *p = table[id].values;
    for (int k = 0; k < i; k++) {
        if (!(p = strchr(p, '|')))
            return NULL;
        p++;
    }
    const char *bar = strchr(p, '|');
    const size_t len = bar ? (size_t)(bar - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s", (int)len, p);
    return buf;
}
