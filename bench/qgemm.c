/* bench/qgemm.c: microbenchmark of the CPU GEMM of every resident precision
 * (kernels/cpu/qgemm.c through the CPU backend) on the model's shapes.
 * Prints the fastest of many single calls, since the machine is shared.
 *   cc -O2 -march=x86-64-v3 -fopenmp -I. bench/qgemm.c build/release/libmantissa.a \
 *      -ldnnl -lmvec -lm -lpthread  (plus the libraries the Makefile links, if any)
 *   ./a.out [rounds] [M,M,...]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/qgemm.h"

/* Wall-clock seconds. */
static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Times one GEMM shape in one precision: best seconds per call. (The int8
 * kernels' forms side by side: bench/int8_kernels.c.) */
static double time_gemm(mt_backend *be, mt_precision p, int m, int n, int k, int rounds)
{
    float *w = malloc(sizeof(float) * n * k), *x = malloc(sizeof(float) * m * k);
    float *b = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * m * n);
    for (size_t i = 0; i < (size_t)n * k; i++)
        w[i] = (float)((i * 2654435761u) % 1000) / 5000.0f - 0.1f;
    for (size_t i = 0; i < (size_t)m * k; i++)
        x[i] = (float)((i * 40503u) % 1000) / 250.0f - 2.0f;
    for (int i = 0; i < n; i++)
        b[i] = 0.01f * i;
    mt_weight *wt = NULL;
    mt_err err;
    if (mt_weight_create(be, w, n, k, p, NULL, &wt, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
#define CALL() (void)be->ops->gemm(be, x, m, wt, b, MT_ACT_NONE, y, &err)
    CALL();
    /* the fastest single call: on a shared machine the minimum is the
     * least disturbed measurement */
    double flop = 2.0 * m * n * k, best = INFINITY;
    int reps = flop > 2e9 ? 4 : flop > 1e8 ? 20 : 100;
    for (int r = 0; r < rounds * reps; r++) {
        double t0 = now_s();
        CALL();
        double dt = now_s() - t0;
        best = dt < best ? dt : best;
    }
    be->ops->weight_destroy(be, wt);
    free(w), free(x), free(b), free(y);
    return best;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    int ms[16] = {9, 128, 4096}, nm = 3;
    if (argc > 2) {
        nm = 0;
        for (char *s = strtok(argv[2], ","); s && nm < 16; s = strtok(NULL, ","))
            ms[nm++] = atoi(s);
    }
    static const int shapes[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};
    static const mt_precision precs[] = {MT_PREC_FP32, MT_PREC_FP16, MT_PREC_BF16, MT_PREC_FP8,
                                         MT_PREC_INT8, MT_PREC_INT8G};
    mt_backend *be;
    mt_err err;
    if (mt_backend_cpu_create(0, &be, &err) != MT_OK)
        return 1;
    printf("GOP/s (ms per call), fastest call of %d rounds, %d threads\n", rounds, be->threads);
    for (int mi = 0; mi < nm; mi++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int m = ms[mi], n = shapes[s][0], k = shapes[s][1];
            printf("M=%-5d N=%-5d K=%-5d", m, n, k);
            for (size_t p = 0; p < sizeof precs / sizeof *precs; p++) {
                double t = time_gemm(be, precs[p], m, n, k, rounds);
                printf("  %s %7.1f (%7.3f)", mt_precision_name(precs[p]),
                       2.0 * m * n * k / t * 1e-9, t * 1e3);
                fflush(stdout);
            }
            printf("\n");
        }
    mt_backend_destroy(be);
    return 0;
}
