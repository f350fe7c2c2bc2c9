/* bench/int8_kernels.c: the int8 GEMM kernels of kernels/cpu at the ISA
 * level in force (ONEDNN_MAX_CPU_ISA steps it down), side by side on
 * MiniLM's and MPNet's GEMM shapes: every kernel of ours that the level
 * has (kc_s8_weight_create_with), per channel (int8) and per group
 * (int8g), against two peers measured in the same run: oneDNN's u8 x s8
 * GEMM (dnnl_gemm_u8s8s32, on the same uint8 activations and weight codes;
 * without VNNI its pair sums saturate, so it stands for the speed of the
 * 7-bit remedies, which run the same instructions on smaller codes) and
 * our FP32 GEMM. Each figure is GOP/s (2 m n k / time) of the fastest of
 * many calls (the machine is shared); our kernels' time includes their
 * activation quantization, oneDNN's does not.
 *
 *   make build/release/bench/int8_kernels
 *   ONEDNN_MAX_CPU_ISA=AVX2 build/release/bench/int8_kernels [seconds per point]
 */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/precision.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/qgemm.h"

#include "bench/cpu_bench.h"

static const bench_shape shapes[] = {
    BENCH_MINILM_SHAPES, {3072, 768, "MPNet ffn in"}, {768, 3072, "MPNet ffn out"}};
static const int ms[] = {1, 16, 128};

/* What one timed call runs. */
typedef struct {
    const float *x;
    int m, n, k;
    kc_s8_weight *s8;
    kc_f32_weight *f32;
    const uint8_t *a;
    const int8_t *b;
    float *y;
    int32_t *c;
} call;

static void run_s8(const call *c)
{
    kc_gemm_s8(c->x, c->m, c->s8, NULL, false, c->y);
}

static void run_f32(const call *c)
{
    kc_gemm_f32(c->x, c->m, c->f32, NULL, false, c->y);
}

static void run_u8s8(const call *c)
{
    const int32_t co = 0;
    dnnl_gemm_u8s8s32('N', 'T', 'F', c->m, c->n, c->k, 1.0f, c->a, c->k, 0, c->b, c->k, 0, 0.0f,
                      c->c, c->n, &co);
}

/* GOP/s of the fastest of the calls made over secs seconds (at least 5). */
static double gops(void (*fn)(const call *), const call *c, double secs)
{
    double best = 1e30;
    const double t0 = now_s();
    for (int it = 0; it < 5 || now_s() - t0 < secs; it++) {
        const double a = now_s();
        fn(c);
        const double d = now_s() - a;
        best = d < best ? d : best;
    }
    return 2.0 * c->m * c->n * c->k / best * 1e-9;
}

/* One kernel of ours on one shape and m: GOP/s, or 0 where it cannot run. */
static double ours(kc_s8_kernel kern, bool grouped, const int8_t *codes, const float *sc,
                   call c, double secs)
{
    const int g = grouped ? mt_prec(MT_PREC_INT8G)->group : c.k;
    if (kc_s8_weight_create_with(codes, sc, c.n, c.k, g, kern, &c.s8) != KC_OK)
        return 0;
    const double r = gops(run_s8, &c, secs);
    kc_s8_weight_destroy(c.s8);
    return r;
}

static double fp32(const float *wf, call c, double secs)
{
    if (kc_f32_weight_create(wf, c.n, c.k, omp_get_max_threads(), &c.f32) != KC_OK)
        return 0;
    const double r = gops(run_f32, &c, secs);
    kc_f32_weight_destroy(c.f32);
    return r;
}

int main(int argc, char **argv)
{
    const double secs = argc > 1 ? atof(argv[1]) : 0.3;
    static const kc_s8_kernel ks[] = {KC_S8_ONEDNN, KC_S8_AMX,     KC_S8_VNNI512, KC_S8_I16_512,
                                      KC_S8_VNNI256, KC_S8_I16_256, KC_S8_SIGN256, KC_S8_W16_256,
                                      KC_S8_PANEL256, KC_S8_SIGNC256};
    const int nks = (int)(sizeof ks / sizeof *ks);
    printf("ISA level %s, %d threads; GOP/s of the fastest call (%.1f s a point)\n\n",
           kc_isa_name(kc_isa_get()->level), omp_get_max_threads(), secs);
    printf("| shape | m | fp32 | onednn u8s8 gemm |");
    for (int i = 0; i < nks; i++)
        if (kc_s8_kernel_available(ks[i]))
            printf(" %s int8 | %s int8g |", kc_s8_kernel_name(ks[i]), kc_s8_kernel_name(ks[i]));
    printf("\n|---|---|---|---|");
    for (int i = 0; i < nks; i++)
        if (kc_s8_kernel_available(ks[i]))
            printf("---|---|");
    printf("\n");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int n = shapes[s].n, k = shapes[s].k;
        bench_weight w;
        if (!bench_weight_make(&w, n, k, "int8_kernels"))
            return 1;
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            const int m = ms[mi];
            float *x = fill((size_t)m * k, 2.0f, 11), *y = malloc(sizeof(float) * m * n);
            uint8_t *xa = malloc((size_t)m * k);
            int32_t *c = malloc(sizeof(int32_t) * m * n);
            for (size_t i = 0; i < (size_t)m * k; i++)
                xa[i] = (uint8_t)(x[i] * 60.0f + 128.0f);
            const call cl = {x, m, n, k, NULL, NULL, xa, w.c8, y, c};
            printf("| %s %dx%d | %d | %.0f | %.0f |", shapes[s].what, n, k, m,
                   fp32(w.wf, cl, secs), gops(run_u8s8, &cl, secs));
            for (int i = 0; i < nks; i++)
                if (kc_s8_kernel_available(ks[i])) {
                    const double a = ours(ks[i], false, w.c8, w.s8, cl, secs);
                    const double b = ours(ks[i], true, w.cg, w.sg, cl, secs);
                    printf(a > 0 ? " %.0f |" : " - |", a);
                    printf(b > 0 ? " %.0f |" : " - |", b);
                }
            printf("\n");
            fflush(stdout);
            free(x), free(y), free(xa), free(c);
        }
        bench_weight_free(&w);
    }
    return 0;
}
