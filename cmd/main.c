/* main.c: the mantissa command line: one binary, several subcommands (one
 * file each in cmd/; serve's wiring is server/main.c).
 *
 *   mantissa serve    --config FILE [--listen ADDR:PORT]
 *   mantissa embed    --config FILE [--model NAME[@VARIANT]] [--jsonl]   < texts
 *   mantissa eval     --config FILE --stsb FILE [--model NAME[@VARIANT]]
 *   mantissa bench    --config FILE --ids FILE [--batch 1,32] [--seconds S]
 *   mantissa quantize --config FILE --model NAME@VARIANT --out FILE
 *   mantissa compare  --config FILE [--model NAME] [--json FILE] [--svg FILE]
 *
 * Only cmd/ prints to stdout or exits; everything below it returns errors
 * as values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mantissa COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  serve     serve the models of a config over HTTP (OpenAI and KServe v2 APIs)\n"
            "  embed     embed texts from stdin (one per line, or JSON strings with --jsonl);\n"
            "            prints one JSON array of floats per line\n"
            "  eval      STS-B Spearman (x100) of a model on the STS Benchmark test file\n"
            "  bench     engine throughput (sentences/s) on given token ids, per batch size\n"
            "  quantize  write a variant's quantized weights (see mantissa quantize --help)\n"
            "  compare   the precision report: every variant against FP32 (mantissa compare --help)\n"
            "\n"
            "common options:\n"
            "  --config FILE      config file (default config/mantissa.json)\n"
            "  --model NAME[@V]   model (and variant) for embed/eval/bench (default: the first)\n"
            "serve:  --listen ADDR:PORT   overrides server.listen\n"
            "eval:   --stsb FILE          the STS-B test split (sts-test.csv)\n"
            "bench:  --ids FILE           JSON list of token-id lists ([CLS] ... [SEP])\n"
            "        --batch LIST         batch sizes, comma-separated (default 1,32)\n"
            "        --seconds S          minimum time per batch size (default 3)\n"
            "\n"
            "mantissa COMMAND --help shows the command's own options.\n");
}

/* How OpenMP threads wait between parallel regions. A forward is a few
 * hundred short regions, and on a VM an idle vCPU takes tens of
 * microseconds to wake: with threads that sleep at once
 * (OMP_WAIT_POLICY=passive) a 10-token forward took 7.2 ms on the 2-core
 * dev VM, with a short spin (GOMP_SPINCOUNT=300, a few microseconds) 3.8 ms.
 * Longer spins are faster alone (1000: 2.7 ms; libgomp's default 300,000:
 * 2.6 ms) but take the cores from the HTTP threads and from anything else
 * on the node: beside one busy process the forward took 5.2 ms passive,
 * 6.0 ms with 300, 7.6 ms with 1000, and libgomp's default added 10 ms to
 * every request. bench/results/openmp-wait-*.md (make bench-openmp).
 * libgomp reads these when it loads, before main(), so when the user has
 * chosen neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT we set the spin count
 * and start again. */
static void prefer_short_openmp_spin(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("MANTISSA_NO_REEXEC"))
        return;
    setenv("GOMP_SPINCOUNT", "300", 1);
    setenv("MANTISSA_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
}

int main(int argc, char **argv)
{
    prefer_short_openmp_spin(argv);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"serve", cmd_serve}, {"embed", cmd_embed},       {"eval", cmd_eval},
        {"bench", cmd_bench}, {"quantize", cmd_quantize}, {"compare", cmd_compare},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "mantissa: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
