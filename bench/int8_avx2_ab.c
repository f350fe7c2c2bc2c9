/* bench/int8_avx2_ab.c: the AVX2 int8 GEMM forms (kernels/cpu/qgemm_dot.h:
 * avx2_sign, avx2_w16, avx2_panel, avx2_signc, avx2_i16) against each
 * other and our FP32 GEMM in alternating rounds of one run, on MiniLM's and
 * MPNet's GEMM shapes and m = 1, 16, 128, 512, per channel (int8) and per
 * group (int8g). The machine is shared: each round times every contestant
 * of a point once (a short slice of calls, its fastest call kept), in an
 * order that rotates from round to round, over many rounds, so that a
 * burst of other work spoils a few rounds rather than one contestant; what
 * is reported is the median over the rounds of each contestant's GOP/s (2
 * m n k / time, the activation quantization included) and, for the ratios
 * to the sign form (and to FP32), the median of the per-round ratios with
 * their least and greatest.
 *
 *   make build/release/bench/int8_avx2_ab
 *   ONEDNN_MAX_CPU_ISA=AVX2 nice -n 19 build/release/bench/int8_avx2_ab [rounds] [ms a slice]
 *       [shape filter (a substring of the shape's name, "" for all)] [m filter (0: all)]
 *       [wall | cpu: a call's time is wall-clock (default) or, with OMP_NUM_THREADS=1,
 *       the thread's CPU time, which a preemption does not lengthen]
 */
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

#define MAX_ROUNDS 201

/* What a call's time is: wall-clock, or with one thread its CPU time (a
 * preempted call is then not slower). */
static clockid_t call_clock = CLOCK_MONOTONIC;

static const bench_shape shapes[] = {BENCH_MINILM_SHAPES, BENCH_MPNET_SHAPES};
static const int ms[] = {1, 16, 128, 512};

/* The contestants of a point: FP32, then the int8 forms. */
static const kc_s8_kernel forms[] = {KC_S8_SIGN256, KC_S8_W16_256, KC_S8_PANEL256,
                                     KC_S8_SIGNC256, KC_S8_I16_256};
#define NFORMS ((int)(sizeof forms / sizeof *forms))
#define NC (1 + NFORMS)

typedef struct {
    const float *x;
    int m;
    float *y;
    kc_f32_weight *f32;
    kc_s8_weight *s8[NFORMS];
} point;

static void call(const point *p, int c)
{
    if (c == 0)
        kc_gemm_f32(p->x, p->m, p->f32, NULL, false, p->y);
    else
        kc_gemm_s8(p->x, p->m, p->s8[c - 1], NULL, false, p->y);
}

/* The fastest call of a slice of at least 2 calls and slice_s seconds. */
static double slice(const point *p, int c, double slice_s)
{
    double best = 1e30;
    const double t0 = now_s();
    for (int it = 0; it < 2 || now_s() - t0 < slice_s; it++) {
        const double a = bench_clock_s(call_clock);
        call(p, c);
        const double d = bench_clock_s(call_clock) - a;
        best = d < best ? d : best;
    }
    return best;
}

/* Prints the median over the rounds kept of t[a] / t[b] (b's time over
 * a's: above 1, a is faster), the least and the greatest. */
static void print_ratio(double t[][MAX_ROUNDS], int a, int b, const int *keep, int nk)
{
    double r[MAX_ROUNDS];
    for (int i = 0; i < nk; i++)
        r[i] = t[b][keep[i]] / t[a][keep[i]];
    const double med = bench_median(r, nk);
    printf(" %.3f (%.3f-%.3f) |", med, r[0], r[nk - 1]);
}

/* The rounds to keep: those where no contestant took more than 1.3x its
 * own fastest round (a burst of other work on the machine), or all of
 * them when fewer than 5 are left; returns how many. */
static int clean_rounds(double t[][MAX_ROUNDS], int first, int rounds, int *keep)
{
    double best[NC];
    for (int c = first; c < NC; c++) {
        best[c] = t[c][0];
        for (int rd = 1; rd < rounds; rd++)
            best[c] = t[c][rd] < best[c] ? t[c][rd] : best[c];
    }
    int nk = 0;
    for (int rd = 0; rd < rounds; rd++) {
        bool ok = true;
        for (int c = first; c < NC; c++)
            ok = ok && t[c][rd] <= 1.3 * best[c];
        if (ok)
            keep[nk++] = rd;
    }
    if (nk >= 5)
        return nk;
    for (int rd = 0; rd < rounds; rd++)
        keep[rd] = rd;
    return rounds;
}

/* Rounds of every contestant, rotating the order; prints one table row:
 * the rounds kept, each contestant's median GOP/s over them, each form's
 * per-round ratio to the sign form, and the 16-bit form's and the sign
 * form's to FP32. */
static void run_point(const point *p, const char *label, double flop, int rounds,
                      double slice_s)
{
    double t[NC][MAX_ROUNDS], g[MAX_ROUNDS];
    int keep[MAX_ROUNDS];
    for (int c = 0; c < NC; c++) /* warm: weights touched, scratch grown */
        call(p, c);
    for (int rd = 0; rd < rounds; rd++)
        for (int i = 0; i < NC; i++) {
            const int c = (i + rd) % NC;
            t[c][rd] = slice(p, c, slice_s);
        }
    const int nk = clean_rounds(t, 0, rounds, keep);
    printf("| %s | %d |", label, nk);
    for (int c = 0; c < NC; c++) {
        for (int i = 0; i < nk; i++)
            g[i] = flop / t[c][keep[i]] * 1e-9;
        printf(" %.0f |", bench_median(g, nk));
    }
    for (int c = 2; c < NC; c++)
        print_ratio(t, c, 1, keep, nk);
    print_ratio(t, 2, 0, keep, nk);
    print_ratio(t, 1, 0, keep, nk);
    printf("\n");
    fflush(stdout);
}

/* Both precisions of one shape at one m. */
static void run_shape_m(int s, int m, const float *wf, const int8_t *const codes[2],
                        const float *const sc[2], int rounds, double slice_s)
{
    const int n = shapes[s].n, k = shapes[s].k;
    float *x = fill((size_t)m * k, 2.0f, 11), *y = malloc(sizeof(float) * m * n);
    point p = {x, m, y, NULL, {NULL}};
    if (kc_f32_weight_create(wf, n, k, omp_get_max_threads(), &p.f32) != KC_OK)
        exit(1);
    for (int gi = 0; gi < 2; gi++) {
        const int g = gi ? mt_prec(MT_PREC_INT8G)->group : k;
        for (int f = 0; f < NFORMS; f++)
            if (kc_s8_weight_create_with(codes[gi], sc[gi], n, k, g, forms[f], &p.s8[f]) != KC_OK) {
                fprintf(stderr, "int8_avx2_ab: %s cannot run here\n", kc_s8_kernel_name(forms[f]));
                exit(1);
            }
        char label[96];
        snprintf(label, sizeof label, "%s %dx%d | %d | %s", shapes[s].what, n, k, m,
                 gi ? "int8g" : "int8");
        run_point(&p, label, 2.0 * m * n * k, rounds, slice_s);
        for (int f = 0; f < NFORMS; f++)
            kc_s8_weight_destroy(p.s8[f]);
    }
    kc_f32_weight_destroy(p.f32);
    free(x), free(y);
}

static void print_header(int rounds, double slice_s)
{
    printf("ISA level %s, %d threads, %d rounds of %.0f ms slices, %s time a call: median GOP/s\n"
           "over the rounds kept; ratios: median per-round time ratio (least-greatest)\n\n",
           kc_isa_name(kc_isa_get()->level), omp_get_max_threads(), rounds, slice_s * 1e3,
           call_clock == CLOCK_MONOTONIC ? "wall-clock" : "the thread's CPU");
    printf("| shape | m | prec | rounds kept | fp32 |");
    for (int f = 0; f < NFORMS; f++)
        printf(" %s |", kc_s8_kernel_name(forms[f]));
    for (int f = 1; f < NFORMS; f++)
        printf(" %s / sign |", kc_s8_kernel_name(forms[f]));
    printf(" w16 / fp32 | sign / fp32 |\n|---|---|---|---|---|");
    for (int f = 0; f < 2 * NFORMS + 1; f++)
        printf("---|");
    printf("\n");
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 41;
    const double slice_s = (argc > 2 ? atof(argv[2]) : 5.0) * 1e-3;
    rounds = rounds < 1 ? 1 : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
    if (argc > 5 && !strcmp(argv[5], "cpu")) {
        if (omp_get_max_threads() != 1) {
            fprintf(stderr, "int8_avx2_ab: CPU time needs one thread (OMP_NUM_THREADS=1)\n");
            return 2;
        }
        call_clock = CLOCK_THREAD_CPUTIME_ID;
    }
    print_header(rounds, slice_s);
    const char *only = argc > 3 ? argv[3] : "";
    const int only_m = argc > 4 ? atoi(argv[4]) : 0;
    for (int s = 0; s < (int)(sizeof shapes / sizeof *shapes); s++) {
        const int n = shapes[s].n, k = shapes[s].k;
        if (!strstr(shapes[s].what, only))
            continue;
        bench_weight w;
        if (!bench_weight_make(&w, n, k, "int8_avx2_ab"))
            return 1;
        const int8_t *const codes[2] = {w.c8, w.cg};
        const float *const sc[2] = {w.s8, w.sg};
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            if (!only_m || ms[mi] == only_m)
                run_shape_m(s, ms[mi], w.wf, codes, sc, rounds, slice_s);
        bench_weight_free(&w);
    }
    return 0;
}
