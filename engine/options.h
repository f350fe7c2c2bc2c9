/* options.h: Mantissa's runtime options, the one place the process
 * environment is read. Every option is a row of one table (options.c):
 * its variable (all under MANTISSA_, but ONEDNN_MAX_CPU_ISA, oneDNN's own,
 * which our kernels follow too), the old name it replaces if any, its type
 * and allowed values, its default and a line of help. `mantissa serve
 * --help` and `mantissa options` print the table; the README's list of
 * options is `mantissa options --markdown`.
 *
 * The environment is read once: main() calls mt_options_init first, and
 * anything else that reads an option (the backends, the unit tests' main)
 * starts the same read lazily (pthread_once). A bad value is an error that
 * names the variable and its allowed values: main() exits with it, the
 * backends' create functions return it, the getters answer the default
 * meanwhile. An old name (MT_CUDA_GEMM) is still honoured, with a warning
 * naming the new one (mt_options_warnings); where both are set the new
 * name wins and the warning says so.
 *
 * The read hands the kernels their settings (kernels/ reads no variable):
 * the ISA cap (kc_isa_set_cap), a forced int8 kernel (kc_s8_force), and
 * the FP16 kernel and BF16 matmul switches. Rows of type MT_OPT_OUTSIDE
 * belong to other libraries (libgomp's OMP_* and GOMP_*): listed in the
 * help, never checked, readable for cmd/main.c's re-exec. */
#ifndef MT_ENGINE_OPTIONS_H
#define MT_ENGINE_OPTIONS_H

#include <stdbool.h>

#include "engine/status.h"

typedef enum {
    MT_OPT_CUDA_GEMM,
    MT_OPT_CUDA_ATTN,
    MT_OPT_CUDA_CROSSOVER,
    MT_OPT_CUDA_AUTOTUNE,
    MT_OPT_CUDA_W8A16_BF16,
    MT_OPT_CUDA_W8A16_KERNEL,
    MT_OPT_CUDA_GELU,
    MT_OPT_CUDA_ACT16,
    MT_OPT_CUDA_LN_QUANT,
    MT_OPT_CUDA_INT8_W8A8,
    MT_OPT_CUDA_DEBUG_SYNC,
    MT_OPT_CUDA_GRAPHS,
    MT_OPT_CUDA_MODULE,
    MT_OPT_CUDA_DRIVER,
    MT_OPT_INT8_KERNEL,
    MT_OPT_NO_H16_KERNEL,
    MT_OPT_NO_BF16_MATMUL,
    MT_OPT_MAX_CPU_ISA, /* ONEDNN_MAX_CPU_ISA */
    MT_OPT_NO_REEXEC,
    MT_OPT_OMP_NUM_THREADS, /* the rest: other libraries' (MT_OPT_OUTSIDE) */
    MT_OPT_OMP_WAIT_POLICY,
    MT_OPT_GOMP_SPINCOUNT,
    MT_OPT_COUNT
} mt_opt;

typedef enum {
    MT_OPT_BOOL,    /* 0 or 1 */
    MT_OPT_INT,     /* a decimal integer in [min, max] */
    MT_OPT_CHOICE,  /* one of values ("a|b|c"); mt_opt_int answers its index */
    MT_OPT_TEXT,    /* any text (a path, a library name) */
    MT_OPT_OUTSIDE, /* another library's variable: listed, not checked */
} mt_opt_type;

typedef struct {
    const char *name;   /* the variable */
    const char *old;    /* the old name still honoured, or NULL */
    mt_opt_type type;
    const char *values; /* allowed values, as the help shows them */
    long min, max;      /* MT_OPT_INT's range */
    const char *dflt;   /* the default, as the help shows it */
    const char *help;   /* one line */
} mt_opt_def;

/* Reads and checks every option (once per process; later calls answer the
 * same). MT_EINVAL with the first bad value's message in err. */
mt_status mt_options_init(mt_err *err);

/* The warning lines of the read ("" if none), one per old name used. */
const char *mt_options_warnings(void);

/* The table's row of an option. */
const mt_opt_def *mt_opt_def_of(mt_opt id);

/* The value: BOOL 0/1, INT the number, CHOICE the index in values; the
 * default where unset (or bad). TEXT and OUTSIDE rows: 0. */
int mt_opt_int(mt_opt id);

/* The text as set (whichever name set it), or NULL where unset or empty. */
const char *mt_opt_text(mt_opt id);

/* The i-th value of a CHOICE row ("auto"...), or NULL past the last; the
 * tests check the kernels' names against these. */
const char *mt_opt_choice(mt_opt id, int i);

#endif
