/* cpu.c: mantissa cpu: what the CPU backend runs on here: the CPU's
 * model name, the instruction-set level in force (ONEDNN_MAX_CPU_ISA
 * lowers it, for oneDNN and our kernels alike), the levels this CPU can
 * be stepped down to, and the kernel of each precision's GEMMs at the
 * level in force. --levels prints the levels alone, one per line, for
 * scripts (tests/run.sh runs the numeric tests at each); --measure what
 * each precision buys on this CPU (cpu_measure.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "engine/backend.h"
#include "engine/options.h"
#include "engine/registry.h"

static const char usage[] =
    "usage: mantissa cpu [--levels] [--measure [--model DIR] [--seconds S]]\n"
    "The CPU the engine runs on: its instruction-set level (ONEDNN_MAX_CPU_ISA=LEVEL\n"
    "steps it down, for oneDNN and Mantissa's own kernels alike), the levels this CPU\n"
    "can run, and the kernel each precision's GEMMs run on at the level in force.\n"
    "  --levels   only the levels this CPU can run, lowest first, one per line\n"
    "  --measure  then what each precision buys here: its speed against fp32 at\n"
    "             batch 1 and 32 on the built-in probe texts, its resident memory and\n"
    "             its drift from fp32, for the model folder DIR (default\n"
    "             models/all-MiniLM-L6-v2), S seconds a figure (default 0.5); a warning\n"
    "             for a precision slower than fp32 at both batch sizes\n";

/* The "model name" line of /proc/cpuinfo, or "unknown". */
static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *c = strchr(line, ':');
        if (c && !strncmp(line, "model name", 10)) {
            snprintf(buf, cap, "%s", c + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    }
    fclose(f);
}

int cmd_cpu(int argc, char **argv)
{
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    const char *levels[16];
    const int n = mt_cpu_isa_levels(levels, 16);
    if (o.levels) {
        for (int i = 0; i < n; i++)
            printf("%s\n", levels[i]);
        return 0;
    }
    mt_backend *be;
    mt_err err;
    if (mt_backend_reg_host()->create(0, 0, &be, &err) != MT_OK) {
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return 1;
    }
    char model[256];
    cpu_model(model, sizeof model);
    const char *cap = mt_opt_text(MT_OPT_MAX_CPU_ISA);
    printf("cpu: %s, %d threads\n", model, be->threads);
    printf("isa: %s%s%s%s\n", be->ops->isa(be), cap ? " (ONEDNN_MAX_CPU_ISA=" : "",
           cap ? cap : "", cap ? ")" : "");
    printf("levels:");
    for (int i = 0; i < n; i++)
        printf(" %s", levels[i]);
    printf("\ngemm kernels:\n");
    for (int p = 0; p < MT_PREC_COUNT; p++) {
        const char *k = be->ops->gemm_kernel(be, (mt_precision)p);
        printf("  %-6s %s\n", mt_precision_name((mt_precision)p), k ? k : "- (not on the CPU)");
    }
    int rc = 0;
    if (o.measure) {
        bool timed = false; /* --seconds given: else half a second a figure */
        for (int i = 1; i < argc; i++)
            timed |= !strncmp(argv[i], "--seconds", 9);
        printf("\n");
        rc = cmd_cpu_measure(&o, be, timed ? o.seconds : 0.5);
    }
    mt_backend_destroy(be);
    return rc;
}
