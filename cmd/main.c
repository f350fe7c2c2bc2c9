/* main.c: the mantissa command line: one binary, several subcommands (one
 * file each in cmd/; serve's wiring is server/main.c).
 *
 *   mantissa serve    [--config FILE] [--listen ADDR:PORT] [--grpc-listen ADDR:PORT]
 *   mantissa embed    [--config FILE] [--model NAME[@VARIANT]] [--jsonl] [--skip-blank] < texts
 *   mantissa eval     [--config FILE] --stsb FILE [--model NAME[@VARIANT]]
 *   mantissa bench    [--config FILE] --ids FILE [--batch 1,32] [--seconds S]
 *   mantissa bench    [--config FILE] [--model NAME] --make-ids TEXTS [--out FILE]
 *   mantissa quantize [--config FILE] --model NAME@VARIANT --out FILE
 *   mantissa compare  [--config FILE] [--model NAME] [--json FILE] [--svg FILE]
 *   (--config: config/mantissa.json by default)
 *   mantissa cpu      [--levels]
 *   mantissa options  [--markdown]
 *   mantissa --version (-V)
 *
 * Only cmd/ prints to stdout or exits; everything below it returns errors
 * as values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "engine/options.h"
#include "engine/version.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mantissa COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  serve     serve the models of a config over HTTP: the OpenAI, KServe v2 and TEI\n"
            "            (text-embeddings-inference) APIs, admin and A/B endpoints\n"
            "  embed     embed texts from stdin (one per line, or JSON strings with --jsonl);\n"
            "            prints one JSON array of floats per line\n"
            "  eval      STS-B Spearman (x100) of a model on the STS Benchmark test file\n"
            "  bench     engine throughput (sentences/s) on given token ids, per batch size\n"
            "  quantize  write a variant's quantized weights (see mantissa quantize --help)\n"
            "  compare   the precision report: every variant against FP32 (mantissa compare --help)\n"
            "  cpu       the CPU's instruction-set level and the kernel of each precision there\n"
            "  options   the environment variables Mantissa reads (MANTISSA_*), values, defaults\n"
            "\n"
            "common options:\n"
            "  --config FILE      config file (default config/mantissa.json)\n"
            "  --model NAME[@V]   model (and variant) for embed/eval/bench (default: the first);\n"
            "                     only it is built\n"
            "serve:  --listen ADDR:PORT   overrides server.listen (an IPv4 or [IPv6] address)\n"
            "        --grpc-listen ADDR:PORT|off  overrides server.grpc_listen (KServe v2 gRPC)\n"
            "embed:  --skip-blank         skip blank lines (default: refuse them, naming the line)\n"
            "eval:   --stsb FILE          the STS-B test split (sts-test.csv)\n"
            "bench:  --ids FILE           JSON list of token-id lists ([CLS] ... [SEP])\n"
            "        --batch LIST         batch sizes, comma-separated (default 1,32; one over\n"
            "                             the file's lists runs them all, with a note)\n"
            "        --seconds S          minimum time per batch size (default 3)\n"
            "        --make-ids TEXTS     write such a file instead: each line of TEXTS\n"
            "                             tokenized (--out FILE, default stdout)\n"
            "\n"
            "mantissa COMMAND --help shows the command's own options;\n"
            "mantissa --version (-V) the version and the git commit it was built from.\n");
}

/* How OpenMP threads wait between parallel regions. A forward is a few
 * hundred short regions, and on a VM an idle vCPU takes tens of
 * microseconds to wake: with threads that sleep at once
 * (OMP_WAIT_POLICY=passive) a 10-token forward took 7.2 ms on the 2-core
 * dev VM, with a short spin 3.8 ms; libgomp's default (a spin of
 * milliseconds) takes the cores from the HTTP threads and from anything
 * else on the node, and added 10 ms to every request beside one busy
 * process (bench/results/openmp-wait-*.md, make bench-openmp).
 *
 * GOMP_SPINCOUNT alone does not set the spin in the server: libgomp counts
 * the threads of every OpenMP pool (the engine worker's, the loader's, the
 * main thread's from the first load), and once they outnumber the CPUs it
 * spins only its "throttled" count: 100 unless OMP_WAIT_POLICY=active
 * raises it to min(1000, GOMP_SPINCOUNT). With GOMP_SPINCOUNT=300 alone
 * (our setting until 2026-11-26, so every spin compared before then was
 * really 100) the team slept between regions: a lone STS-B sentence's fp32
 * forward took 4.1-4.5 ms in the server against 2.1 ms in `mantissa bench`.
 * With both set, a spin of 1000 beat 300 on a quiet machine (1.86 against
 * 2.42 ms) and tied it beside a busy process (3.3 against 3.4 ms; c=64
 * throughput 7% lower): bench/results/openmp-throttle-2026-11-26.md.
 * libgomp reads these when it loads, before main(), so when the user has
 * chosen neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (nor MANTISSA_NO_REEXEC=1)
 * we set both and start again. Their values come from the options module
 * (engine/options.h), which read them already: nothing here reads the
 * environment, it only writes the restart's. */
static void prefer_short_openmp_spin(char **argv)
{
    if (mt_opt_text(MT_OPT_OMP_WAIT_POLICY) || mt_opt_text(MT_OPT_GOMP_SPINCOUNT) ||
        mt_opt_int(MT_OPT_NO_REEXEC))
        return;
    setenv("OMP_WAIT_POLICY", "active", 1);
    setenv("GOMP_SPINCOUNT", "1000", 1);
    setenv("MANTISSA_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: carry on as we are */
}

int main(int argc, char **argv)
{
    mt_err err;
    if (mt_options_init(&err) != MT_OK) { /* the environment, read once; see `mantissa options` */
        fprintf(stderr, "mantissa: %s\n", err.msg);
        return 2;
    }
    prefer_short_openmp_spin(argv);
    /* after the restart: printed once; serve logs them in its log's format */
    if (argc < 2 || strcmp(argv[1], "serve"))
        fputs(mt_options_warnings(), stderr);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("mantissa %s (commit %s)\n", MANTISSA_VERSION, mt_build_commit());
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"serve", cmd_serve}, {"embed", cmd_embed},       {"eval", cmd_eval},
        {"bench", cmd_bench}, {"quantize", cmd_quantize}, {"compare", cmd_compare},
        {"cpu", cmd_cpu},     {"options", cmd_options},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "mantissa: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
