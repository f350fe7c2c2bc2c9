/* test_gpu_graphs.c: the model forward recorded as CUDA graphs (backend.h's
 * graph_begin / graph_end on the CUDA backend, models/encoder.c, engine/
 * fwd_graph.h), on a GPU; without one it prints the SKIP line.
 *
 * Three backends per precision (fp32, fp16, int8): graphs on (the default),
 * MANTISSA_CUDA_GRAPHS=2 (the same padded forward in the same arena layout, always
 * eager: the bitwise reference) and graphs off (the plain unpadded forward).
 * For batch 1, 2, 5 and 8 at several lengths: the key's first use (eager),
 * second (recorded) and third (replayed) equal the padded eager forward
 * bitwise, and so do replays after the inputs change (new ids, lengths and
 * offsets in the same bucket); all of them equal the plain forward to
 * rounding (the GEMMs see another m). Then the launch counts of a batch-1
 * forward with and without graphs, batch 9 (no graph), MANTISSA_CUDA_DEBUG_SYNC
 * (no graph), and two threads replaying at once (one arena each). Last,
 * fp8 and int8 on W8A8 with and without the LayerNorm writing its GEMM's
 * 8-bit rows (MANTISSA_CUDA_LN_QUANT): the same vectors bit for bit.
 *
 *   test_gpu_graphs [--model DIR] [--quick] [--seed N]
 */
#include <pthread.h>

#include "engine/cuda/backend.h"
#include "engine/fwd_graph.h"
#include "engine/model.h"
#include "tests/gpu/gpu_test.h"

static const char *model_dir = "models/all-MiniLM-L6-v2";

enum { MAXSEQ = 9, MAXT = 9 * 64 };

typedef struct {
    mt_backend *be;
    mt_model *m;
} inst;

/* A model of precision prec on a CUDA backend with options o. */
static int inst_make_opts(inst *x, mt_precision prec, const mt_cuda_opts *o)
{
    const int g = o->graphs;
    mt_err err = {{0}};
    mt_model_opts mo = {.precision = prec};
    x->be = NULL;
    x->m = NULL;
    mt_status st = mt_backend_cuda_create_opts(0, o, &x->be, &err);
    if (st == MT_OK)
        st = mt_model_load(model_dir, x->be, &mo, &x->m, &err);
    return CHECK(st == MT_OK, "%s, graphs %d: %s", mt_precision_name(prec), g, err.msg);
}

/* A model of precision prec on a CUDA backend with graphs = g (and debug
 * sync), 8-bit GEMMs switching to cuBLASLt at the same fixed m on all. */
static int inst_make(inst *x, mt_precision prec, int g, int debug_sync)
{
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.graphs = g;
    o.debug_sync = debug_sync;
    o.autotune = 0; /* a crossover measured per backend could differ between the three */
    o.crossover = 64;
    return inst_make_opts(x, prec, &o);
}

static void inst_free(inst *x)
{
    mt_model_free(x->m);
    mt_backend_destroy(x->be);
}

/* nseq random sequences of lo..hi tokens (a [CLS]-like first id). */
static int make_batch(int nseq, int lo, int hi, int vocab, int32_t *ids, int32_t *off)
{
    off[0] = 0;
    for (int s = 0; s < nseq; s++) {
        const int len = gt_randint(lo, hi);
        for (int i = 0; i < len; i++)
            ids[off[s] + i] = i == 0 ? 101 : gt_randint(1000, vocab - 1);
        off[s + 1] = off[s] + len;
    }
    return off[nseq];
}

static int forward(inst *x, const int32_t *ids, const int32_t *off, int nseq, float *out)
{
    mt_err err = {{0}};
    const size_t n = (size_t)nseq * x->m->info.hidden;
    for (size_t i = 0; i < n; i++)
        out[i] = NAN;
    return CHECK(mt_model_forward(x->m, ids, off, nseq, out, NULL, &err) == MT_OK, "forward: %s",
                 err.msg);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        m = d > m || d != d ? d : m;
    }
    return m;
}

typedef struct {
    inst g, pad, plain;
    double tol; /* graphs (padded) vs the plain forward */
    const char *name;
    double worst_plain;
} trio;

/* One input on the three: the graph forward bitwise equal to the padded
 * eager one, and within tol of the plain one. */
static void compare_once(trio *t, const int32_t *ids, const int32_t *off, int nseq, const char *what)
{
    static float a[MAXSEQ * 1024], b[MAXSEQ * 1024], c[MAXSEQ * 1024];
    const size_t n = (size_t)nseq * t->g.m->info.hidden;
    if (!forward(&t->g, ids, off, nseq, a) || !forward(&t->pad, ids, off, nseq, b) ||
        !forward(&t->plain, ids, off, nseq, c))
        return;
    CHECK(memcmp(a, b, sizeof(float) * n) == 0,
          "%s: batch %d, %d tokens, %s: graph vs padded eager differ (max |diff| %.3g)", t->name,
          nseq, off[nseq], what, max_diff(a, b, n));
    const double d = max_diff(a, c, n);
    t->worst_plain = d > t->worst_plain || d != d ? d : t->worst_plain;
    CHECK(d <= t->tol, "%s: batch %d, %d tokens, %s: graph vs plain max |diff| %.3g > %.1g",
          t->name, nseq, off[nseq], what, d, t->tol);
}

/* Eager, recorded, replayed; then replays of new inputs in the same bucket. */
static void key_cycle(trio *t, int nseq, int lo, int hi)
{
    int32_t ids[MAXT], off[MAXSEQ + 1];
    const int vocab = t->g.m->info.vocab;
    const int tok = make_batch(nseq, lo, hi, vocab, ids, off), bucket = mt_fwd_bucket(tok);
    mt_cuda_counts c0, c1;
    mt_cuda_get_counts(t->g.be, &c0);
    compare_once(t, ids, off, nseq, "1st use (eager)");
    compare_once(t, ids, off, nseq, "2nd use (recorded)");
    compare_once(t, ids, off, nseq, "3rd use (replayed)");
    for (int k = 0; k < 3; k++) {
        int tries = 0;
        while (mt_fwd_bucket(make_batch(nseq, lo, hi, vocab, ids, off)) != bucket && ++tries < 1000)
            ;
        compare_once(t, ids, off, nseq, "replay, new inputs");
    }
    mt_cuda_get_counts(t->g.be, &c1);
    CHECK(c1.graph_records - c0.graph_records == 1 && c1.graph_replays - c0.graph_replays == 4,
          "%s: batch %d bucket %d: %ld recordings, %ld replays (want 1, 4)", t->name, nseq,
          bucket, c1.graph_records - c0.graph_records, c1.graph_replays - c0.graph_replays);
}

/* Launch counts of a warm batch-1 forward: plain vs replayed. */
static void launch_counts(trio *t)
{
    int32_t ids[64], off[2];
    float out[1024];
    make_batch(1, 12, 12, t->g.m->info.vocab, ids, off);
    for (int i = 0; i < 3; i++) /* eager, record, replay: warm */
        forward(&t->g, ids, off, 1, out);
    forward(&t->plain, ids, off, 1, out);
    mt_cuda_counts p0, p1, g0, g1;
    mt_cuda_get_counts(t->plain.be, &p0);
    forward(&t->plain, ids, off, 1, out);
    mt_cuda_get_counts(t->plain.be, &p1);
    mt_cuda_get_counts(t->g.be, &g0);
    forward(&t->g, ids, off, 1, out);
    mt_cuda_get_counts(t->g.be, &g1);
    printf("gpu graphs: %s batch-1 forward (12 tokens): plain %ld op calls; with graphs %ld "
           "graph launch + %ld op call(s); the recording holds %ld kernels (%ld nodes)\n",
           t->name, p1.ops - p0.ops, g1.graph_replays - g0.graph_replays, g1.ops - g0.ops,
           g1.graph_kernels, g1.graph_nodes);
    /* mean pooling is recorded with the layers: nothing launched outside the graph */
    CHECK(g1.graph_replays - g0.graph_replays == 1 && g1.ops - g0.ops == 0 &&
              p1.ops - p0.ops >= 2 + 7 * t->g.m->info.layers,
          "%s: launch counts plain %ld, graph %ld + %ld", t->name, p1.ops - p0.ops,
          g1.graph_replays - g0.graph_replays, g1.ops - g0.ops);
}

/* Batch 9 and the debug switch run the plain forward: nothing recorded. */
static void outside_the_keys(trio *t, mt_precision prec)
{
    int32_t ids[MAXT], off[MAXSEQ + 1];
    static float a[MAXSEQ * 1024], c[MAXSEQ * 1024];
    make_batch(9, 3, 20, t->g.m->info.vocab, ids, off);
    mt_cuda_counts c0, c1;
    mt_cuda_get_counts(t->g.be, &c0);
    for (int i = 0; i < 3; i++)
        forward(&t->g, ids, off, 9, a);
    mt_cuda_get_counts(t->g.be, &c1);
    CHECK(c1.graph_records == c0.graph_records && c1.graph_replays == c0.graph_replays,
          "%s: batch 9 was recorded", t->name);
    inst dbg;
    if (!inst_make(&dbg, prec, 1, 1))
        return;
    make_batch(2, 3, 20, t->g.m->info.vocab, ids, off);
    for (int i = 0; i < 3; i++)
        forward(&dbg, ids, off, 2, a);
    forward(&t->plain, ids, off, 2, c);
    mt_cuda_get_counts(dbg.be, &c1);
    CHECK(c1.graph_records == 0 && c1.graph_replays == 0 &&
              memcmp(a, c, sizeof(float) * 2 * t->g.m->info.hidden) == 0,
          "%s: MANTISSA_CUDA_DEBUG_SYNC recorded %ld graphs or differs from the plain forward",
          t->name, c1.graph_records);
    inst_free(&dbg);
}

/* Two threads replaying the same key at once, each with its own arena. */
typedef struct {
    trio *t;
    const int32_t *ids, *off;
    const float *want;
    int nseq, bad;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    float out[4 * 1024];
    mt_err err;
    for (int i = 0; i < 6; i++)
        if (mt_model_forward(w->t->g.m, w->ids, w->off, w->nseq, out, NULL, &err) != MT_OK ||
            memcmp(out, w->want, sizeof(float) * (size_t)w->nseq * w->t->g.m->info.hidden))
            w->bad++;
    return NULL;
}

static void two_threads(trio *t)
{
    static int32_t ids[2][MAXT], off[2][5];
    static float want[2][4 * 1024];
    worker_arg w[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        make_batch(4, 5, 30, t->g.m->info.vocab, ids[k], off[k]);
        forward(&t->pad, ids[k], off[k], 4, want[k]);
        w[k] = (worker_arg){t, ids[k], off[k], want[k], 4, 0};
    }
    for (int k = 0; k < 2; k++)
        pthread_create(&th[k], NULL, worker, &w[k]);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    CHECK(w[0].bad == 0 && w[1].bad == 0, "%s: two threads: %d + %d forwards differ", t->name,
          w[0].bad, w[1].bad);
}

/* fp8 (int8) with every GEMM on FP8 (INT8) W8A8 (MANTISSA_CUDA_GEMM=
 * library, MANTISSA_CUDA_INT8_W8A8=1): LayerNorm writing the 8-bit rows of
 * the GEMM after it (MANTISSA_CUDA_LN_QUANT=1) against the GEMMs
 * quantizing their own rows (0). The codes are the same bit for bit
 * (test_gpu_q8io), so the vectors must be too, recorded and plain; the
 * plain forward takes 2 per layer (QKV after the embedding's or the last
 * layer's LayerNorm, the MLP's first GEMM after the attention's) from its
 * LayerNorm, the other backend none. */
static void layernorm_quant(mt_precision prec, int g)
{
    const int i8 = prec == MT_PREC_INT8;
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.graphs = g;
    o.gemm = MT_CUDA_GEMM_LIBRARY;
    o.autotune = 0;
    o.int8_w8a8 = 1;
    inst a, b;
    o.ln_quant = 1;
    if (!inst_make_opts(&a, prec, &o))
        return;
    o.ln_quant = 0;
    if (!inst_make_opts(&b, prec, &o)) {
        inst_free(&a);
        return;
    }
    if (!i8 && !mt_cuda_fp8_w8a8_enabled(a.be)) {
        printf("gpu graphs: SKIP fp8 LayerNorm quantization: FP8 W8A8 is off on this GPU "
               "(sm_90 + cuBLASLt 12.9 only)\n");
        gt_skip++;
    } else {
        static const int cases[][3] = {{1, 12, 12}, {1, 100, 128}, {5, 10, 40}, {8, 20, 60}};
        static int32_t ids[MAXT], off[MAXSEQ + 1];
        static float va[MAXSEQ * 1024], vb[MAXSEQ * 1024];
        const int L = a.m->info.layers;
        int bad = 0;
        long fed = 0, w8a8 = 0, fed_b = 0, refused = 0;
        for (int i = 0; i < 4; i++) {
            const int nseq = cases[i][0];
            make_batch(nseq, cases[i][1], cases[i][2], a.m->info.vocab, ids, off);
            for (int r = 0; r < 3; r++) { /* with graphs: eager, recorded, replayed */
                mt_cuda_counts a0, a1, b0, b1;
                mt_cuda_get_counts(a.be, &a0), mt_cuda_get_counts(b.be, &b0);
                if (!forward(&a, ids, off, nseq, va) || !forward(&b, ids, off, nseq, vb))
                    goto done;
                mt_cuda_get_counts(a.be, &a1), mt_cuda_get_counts(b.be, &b1);
                bad += memcmp(va, vb, sizeof(float) * (size_t)nseq * a.m->info.hidden) != 0;
                fed += a1.w8a8_ln - a0.w8a8_ln, fed_b += b1.w8a8_ln - b0.w8a8_ln;
                w8a8 += i8 ? a1.w8a8_i8 - a0.w8a8_i8 : a1.lt_w8a8 - a0.lt_w8a8;
                refused += a1.w8a8_refused - a0.w8a8_refused;
            }
        }
        const char *pn = mt_precision_name(prec);
        printf("gpu graphs: %s, graphs %d: %ld of %ld W8A8 GEMMs on rows their LayerNorm "
               "quantized (%ld refused by cuBLASLt, run fused)\n", pn, g, fed, w8a8, refused);
        CHECK(bad == 0, "%s graphs %d: %d forwards differ with and without the LayerNorm's "
              "quantization", pn, g, bad);
        CHECK(fed_b == 0 && fed > 0 &&
                  (g || refused || (fed == 12L * 2 * L && w8a8 == 12L * 4 * L)),
              "%s graphs %d: LayerNorm-quantized GEMMs %ld (off: %ld) of %ld W8A8, expected "
              "2 of 4 per layer in the eager forwards", pn, g, fed, fed_b, w8a8);
    }
done:
    inst_free(&a);
    inst_free(&b);
}

static void precision_suite(mt_precision prec, double tol, int quick)
{
    trio t = {.tol = tol, .name = mt_precision_name(prec)};
    if (!inst_make(&t.g, prec, 1, 0) || !inst_make(&t.pad, prec, 2, 0) ||
        !inst_make(&t.plain, prec, 0, 0))
        return;
    static const int cases[][3] = {{1, 1, 14}, {1, 40, 60}, {1, 100, 250}, {2, 3, 30},
                                   {5, 10, 40}, {8, 2, 12},  {8, 20, 60}};
    const int ncases = quick ? 4 : (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < ncases; i++)
        key_cycle(&t, cases[i][0], cases[i][1], cases[i][2]);
    printf("gpu graphs: %s: graph forwards vs the plain forward: max |diff| %.3g (tolerance "
           "%.1g)\n", t.name, t.worst_plain, tol);
    launch_counts(&t);
    outside_the_keys(&t, prec);
    two_threads(&t);
    inst_free(&t.g);
    inst_free(&t.pad);
    inst_free(&t.plain);
}

int main(int argc, char **argv)
{
    const char *suite = "gpu graphs";
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--model"))
            model_dir = argv[++i];
    const int quick = gt_init(argc, argv, suite);
    if (!gt_have_device(suite)) {
        gt_skip++;
        return gt_finish(suite);
    }
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/model.safetensors", model_dir);
    if (access(probe, R_OK) != 0) {
        printf("%s: SKIP: no model at %s (make model, or --model DIR)\n", suite, model_dir);
        gt_skip++;
        return gt_finish(suite);
    }
    precision_suite(MT_PREC_FP32, 1e-5, quick);
    precision_suite(MT_PREC_FP16, 2e-3, quick);
    if (!quick)
        precision_suite(MT_PREC_INT8, 5e-3, quick);
    for (int g = 1; g >= 0; g--) {
        layernorm_quant(MT_PREC_FP8, g);
        layernorm_quant(MT_PREC_INT8, g);
    }
    return gt_finish(suite);
}
