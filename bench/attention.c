/* attention.c: the CPU attention op alone (kernels/cpu/ops.c
 * kc_attention_bias, no position bias) at the shapes that matter: a batch
 * of sentences and one passage, MiniLM's and MPNet's head sizes, 12 heads,
 * on the OpenMP threads in force and the ISA level in force
 * (ONEDNN_MAX_CPU_ISA). Each point: 41 slices of 50 ms of back-to-back
 * calls, the median time per call. To compare two commits, build this at
 * each and run them in turn.
 *
 *   build/release/bench/attention [nseq len dh ...]
 *       (default: 32 12 32, 1 180 32, 32 12 64, 1 180 64)
 *
 * Prints one JSON line per shape: nseq, len, dh, median_us.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench/cpu_bench.h"
#include "kernels/cpu/ops.h"

static int point(int nseq, int len, int dh)
{
    const int heads = 12, t = nseq * len, hid = heads * dh;
    int32_t *off = malloc(sizeof(int32_t) * (size_t)(nseq + 1));
    float *qkv = fill((size_t)t * 3 * hid, 1.0f, 7), *out = malloc(sizeof(float) * t * hid);
    if (!off || !qkv || !out)
        return 1;
    for (int s = 0; s <= nseq; s++)
        off[s] = s * len;
    double slice[41];
    for (int r = 0; r < 41; r++) {
        const double t0 = now_s();
        int calls = 0;
        do {
            if (kc_attention(qkv, off, nseq, heads, dh, out) != 0)
                return 1;
            calls++;
        } while (now_s() - t0 < 0.05);
        slice[r] = (now_s() - t0) / calls * 1e6;
    }
    printf("{\"nseq\":%d,\"len\":%d,\"dh\":%d,\"median_us\":%.1f}\n", nseq, len, dh,
           bench_median(slice, 41));
    free(off), free(qkv), free(out);
    return 0;
}

int main(int argc, char **argv)
{
    static const int deflt[][3] = {{32, 12, 32}, {1, 180, 32}, {32, 12, 64}, {1, 180, 64}};
    if (argc > 1 && (argc - 1) % 3 == 0) {
        for (int i = 1; i < argc; i += 3)
            if (point(atoi(argv[i]), atoi(argv[i + 1]), atoi(argv[i + 2])))
                return 1;
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: %s [nseq len dh ...]\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof deflt / sizeof *deflt; i++)
        if (point(deflt[i][0], deflt[i][1], deflt[i][2]))
            return 1;
    return 0;
}
