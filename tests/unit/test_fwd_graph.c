/* test_fwd_graph.c: models/encoder.c's recorded forward (backend.h's
 * graph_begin / graph_end, engine/fwd_graph.h) on the host, without a GPU.
 *
 * A "tape" backend wraps the CPU backend and implements the graph slots the
 * way CUDA Graphs behave: a key's first begin runs the ops eagerly, the
 * second records them (nothing runs until end, which then runs the tape),
 * later begins replay the tape with the arguments recorded then. Before
 * every begin the arena beyond the inputs is poisoned with NaN, so a real
 * row that read a padded row or stale memory shows up. The replayed forward
 * of new inputs must equal the plain CPU forward of the same inputs: that
 * checks that nothing host-side that varies per call (t, the ids, the
 * offsets) is baked into the recorded ops, and that padding is exact. The
 * tape backend also checks layernorm_feed's promise: its next op is the
 * GEMM it named, on its output. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fwd_graph.h"
#include "engine/model.h"

#define MODEL_DIR "models/all-MiniLM-L6-v2"

typedef enum { T_GEMM, T_EMBED, T_LN, T_ATTN, T_POOL } tape_kind;

typedef struct {
    tape_kind kind;
    const float *a, *b, *c, *d, *e; /* the op's float pointers, in argument order */
    const int32_t *i0, *i1;
    const mt_weight *w;
    int n0, n1, n2, n3;
    float f;
    bool flag;
    mt_attn_params ap; /* the attention's */
    float *out;
} tape_op;

typedef struct {
    unsigned long long key;
    int seen, valid; /* valid: a tape recorded with the current arena */
    tape_op *ops;
    int n, cap;
} tape_slot;

enum { SLOTS = 64 };

typedef struct {
    mt_backend pub;
    mt_backend_ops ops;
    mt_backend *cpu;
    void *arena;
    size_t arena_bytes;
    tape_slot slot[SLOTS];
    tape_slot *rec, *pending; /* recording / to replay at end */
    int in_pair, eager;
    int violations;                 /* alloc/upload/download between begin and end */
    int begins, records, replays, not_now, fail_op_at, op_calls;
    /* layernorm_feed's promise: its next op is gemm(out, t, next) */
    struct {
        const float *out;
        const mt_weight *w;
        int t;
    } feed;
    int feeds_kept, feeds_broken;
} tape_be;

static tape_be *T(mt_backend *be) { return (tape_be *)be; }

static mt_status run_op(tape_be *t, const tape_op *o, mt_err *err)
{
    mt_backend *c = t->cpu;
    switch (o->kind) {
    case T_GEMM:
        return c->ops->gemm(c, o->a, o->n0, o->w, o->b, (mt_act)o->n1, o->out, err);
    case T_EMBED:
        return c->ops->embed(c, o->i0, o->i1, o->n0, o->a, o->b, o->c, o->n1, o->out, err);
    case T_LN:
        return c->ops->layernorm(c, o->a, o->b, o->c, o->d, o->n0, o->n1, o->f, o->out, err);
    case T_ATTN:
        return c->ops->attention(c, o->a, o->i0, o->n0, &o->ap, o->out, err);
    case T_POOL:
        return c->ops->mean_pool(c, o->a, o->i0, o->n0, o->n1, o->flag, o->out, err);
    }
    return MT_EINTERNAL;
}

/* Every op goes through here: recorded (not run) while recording. The op
 * after a layernorm_feed is checked against its promise. */
static mt_status issue(tape_be *t, const tape_op *o, mt_err *err)
{
    if (t->feed.w) {
        const bool kept = o->kind == T_GEMM && o->a == t->feed.out && o->w == t->feed.w &&
                          o->n0 == t->feed.t;
        t->feeds_kept += kept;
        t->feeds_broken += !kept;
        t->feed.w = NULL;
    }
    if (t->fail_op_at > 0 && ++t->op_calls == t->fail_op_at)
        return mt_fail(err, MT_EINTERNAL, "injected op failure");
    if (!t->rec)
        return run_op(t, o, err);
    tape_slot *s = t->rec;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->ops = realloc(s->ops, sizeof *s->ops * (size_t)s->cap);
    }
    s->ops[s->n++] = *o;
    return MT_OK;
}

static mt_status tp_gemm(mt_backend *be, const float *x, int m, const mt_weight *w,
                         const float *bias, mt_act act, float *y, mt_err *err)
{
    tape_op o = {.kind = T_GEMM, .a = x, .b = bias, .w = w, .n0 = m, .n1 = act, .out = y};
    return issue(T(be), &o, err);
}

static mt_status tp_embed(mt_backend *be, const int32_t *ids, const int32_t *offsets, int nseq,
                          const float *word, const float *pos, const float *type0, int h,
                          float *out, mt_err *err)
{
    tape_op o = {.kind = T_EMBED, .a = word, .b = pos, .c = type0, .i0 = ids, .i1 = offsets,
                 .n0 = nseq, .n1 = h, .out = out};
    return issue(T(be), &o, err);
}

static mt_status tp_layernorm(mt_backend *be, const float *x, const float *res, const float *gamma,
                              const float *beta, int t, int h, float eps, float *out, mt_err *err)
{
    tape_op o = {.kind = T_LN, .a = x, .b = res, .c = gamma, .d = beta, .n0 = t, .n1 = h,
                 .f = eps, .out = out};
    return issue(T(be), &o, err);
}

/* The CPU has no other form of a LayerNorm's output: the promise is
 * recorded (issue checks it) and the op is a plain layernorm. */
static mt_status tp_layernorm_feed(mt_backend *be, const float *x, const float *res,
                                   const float *gamma, const float *beta, int t, int h, float eps,
                                   float *out, const mt_weight *next, mt_err *err)
{
    mt_status st = tp_layernorm(be, x, res, gamma, beta, t, h, eps, out, err);
    T(be)->feed.out = out, T(be)->feed.w = next, T(be)->feed.t = t;
    return st;
}

static mt_status tp_attention(mt_backend *be, const float *qkv, const int32_t *offsets, int nseq,
                              const mt_attn_params *p, float *out, mt_err *err)
{
    tape_op o = {.kind = T_ATTN, .a = qkv, .i0 = offsets, .n0 = nseq, .ap = *p, .out = out};
    return issue(T(be), &o, err);
}

static mt_status tp_mean_pool(mt_backend *be, const float *x, const int32_t *offsets, int nseq,
                              int h, bool normalize, float *out, mt_err *err)
{
    tape_op o = {.kind = T_POOL, .a = x, .i0 = offsets, .n0 = nseq, .n1 = h, .flag = normalize,
                 .out = out};
    return issue(T(be), &o, err);
}

static void *tp_alloc(mt_backend *be, size_t bytes)
{
    T(be)->violations += T(be)->in_pair;
    return T(be)->cpu->ops->alloc(T(be)->cpu, bytes);
}

static void tp_free(mt_backend *be, void *p) { T(be)->cpu->ops->free(T(be)->cpu, p); }

static mt_status tp_upload(mt_backend *be, void *dst, const void *src, size_t n, mt_err *err)
{
    T(be)->violations += T(be)->in_pair;
    return T(be)->cpu->ops->upload(T(be)->cpu, dst, src, n, err);
}

static mt_status tp_download(mt_backend *be, void *dst, const void *src, size_t n, mt_err *err)
{
    T(be)->violations += T(be)->in_pair;
    return T(be)->cpu->ops->download(T(be)->cpu, dst, src, n, err);
}

static tape_slot *slot_of(tape_be *t, unsigned long long key)
{
    for (int i = 0; i < SLOTS; i++)
        if (t->slot[i].seen && t->slot[i].key == key)
            return &t->slot[i];
    for (int i = 0; i < SLOTS; i++)
        if (!t->slot[i].seen) {
            t->slot[i].key = key;
            return &t->slot[i];
        }
    ck_abort_msg("more than %d keys", SLOTS);
    return NULL;
}

/* The arena (grow-only; growing drops every tape), the inputs, the poison. */
static void arena_prepare(tape_be *t, size_t bytes, const void *in, size_t in_bytes)
{
    if (bytes > t->arena_bytes) {
        t->cpu->ops->free(t->cpu, t->arena);
        t->arena = t->cpu->ops->alloc(t->cpu, bytes);
        ck_assert_ptr_nonnull(t->arena);
        t->arena_bytes = bytes;
        for (int i = 0; i < SLOTS; i++)
            t->slot[i].valid = 0;
    }
    memcpy(t->arena, in, in_bytes);
    memset((char *)t->arena + in_bytes, 0xff, t->arena_bytes - in_bytes); /* NaN */
}

static mt_status tp_graph_begin(mt_backend *be, unsigned long long key, size_t bytes,
                                const void *in, size_t in_bytes, void **arena, bool *replay,
                                mt_err *err)
{
    tape_be *t = T(be);
    *arena = NULL;
    *replay = false;
    ck_assert_msg(!t->in_pair, "graph_begin inside a begin/end pair");
    if (t->not_now)
        return MT_OK;
    arena_prepare(t, bytes, in, in_bytes);
    t->begins++;
    tape_slot *s = slot_of(t, key);
    t->in_pair = 1;
    *arena = t->arena;
    if (s->valid) {
        t->pending = s;
        *replay = true;
    } else if (s->seen) {
        s->n = 0;
        t->rec = s;
    } else {
        s->seen = 1;
    }
    return MT_OK;
}

static mt_status tp_graph_end(mt_backend *be, bool failed, mt_err *err)
{
    tape_be *t = T(be);
    ck_assert_msg(t->in_pair, "graph_end without begin");
    tape_slot *s = t->rec ? t->rec : t->pending;
    const int recorded = t->rec != NULL;
    t->in_pair = 0;
    t->rec = t->pending = NULL;
    mt_status st = MT_OK;
    if (failed || !s) {
        if (s && recorded)
            s->n = 0;
        return MT_OK;
    }
    for (int i = 0; i < s->n && st == MT_OK; i++)
        st = run_op(t, &s->ops[i], err);
    s->valid = st == MT_OK;
    t->records += recorded;
    t->replays += !recorded;
    return st;
}

static void tp_destroy(mt_backend *be)
{
    tape_be *t = T(be);
    for (int i = 0; i < SLOTS; i++)
        free(t->slot[i].ops);
    t->cpu->ops->free(t->cpu, t->arena);
    mt_backend_destroy(t->cpu);
    free(t);
}

static tape_be *tape_create(void)
{
    tape_be *t = calloc(1, sizeof *t);
    mt_err err;
    ck_assert_msg(mt_backend_cpu_create(0, &t->cpu, &err) == MT_OK, "%s", err.msg);
    t->ops = *t->cpu->ops;
    t->ops.name = "tape";
    t->ops.destroy = tp_destroy;
    t->ops.alloc = tp_alloc;
    t->ops.free = tp_free;
    t->ops.upload = tp_upload;
    t->ops.download = tp_download;
    t->ops.gemm = tp_gemm;
    t->ops.embed = tp_embed;
    t->ops.layernorm = tp_layernorm;
    t->ops.layernorm_feed = tp_layernorm_feed;
    t->ops.attention = tp_attention;
    t->ops.mean_pool = tp_mean_pool;
    t->ops.graph_begin = tp_graph_begin;
    t->ops.graph_end = tp_graph_end;
    t->pub = *t->cpu;
    t->pub.ops = &t->ops;
    return t;
}

/* ---- the fixture: MiniLM FP32 on the CPU backend and on the tape one ---- */

static mt_backend *cpu;
static tape_be *tape;
static mt_model *plain, *rec;
static int hidden;

static void setup(void)
{
    mt_err err;
    mt_model_opts o = {.precision = MT_PREC_FP32};
    ck_assert_msg(mt_backend_cpu_create(0, &cpu, &err) == MT_OK, "%s", err.msg);
    tape = tape_create();
    ck_assert_msg(mt_model_load(MODEL_DIR, cpu, &o, &plain, &err) == MT_OK, "%s", err.msg);
    ck_assert_msg(mt_model_load(MODEL_DIR, &tape->pub, &o, &rec, &err) == MT_OK, "%s", err.msg);
    hidden = plain->info.hidden;
}

static void teardown(void)
{
    mt_model_free(rec);
    mt_model_free(plain);
    mt_backend_destroy(&tape->pub);
    mt_backend_destroy(cpu);
}

static unsigned rng = 12345;
static int rnd(int lo, int hi) /* inclusive */
{
    rng = rng * 1103515245u + 12345u;
    return lo + (int)((rng >> 8) % (unsigned)(hi - lo + 1));
}

/* nseq random sequences of lengths lo..hi (ids in the vocabulary). */
static int make_batch(int nseq, int lo, int hi, int32_t *ids, int32_t *off)
{
    off[0] = 0;
    for (int s = 0; s < nseq; s++) {
        const int len = rnd(lo, hi);
        for (int i = 0; i < len; i++)
            ids[off[s] + i] = i == 0 ? 101 : rnd(1000, 30000);
        off[s + 1] = off[s] + len;
    }
    return off[nseq];
}

/* The recorded model's vectors against the plain model's: max |diff|
 * (their norms must agree too). */
static double forward_diff(const int32_t *ids, const int32_t *off, int nseq)
{
    mt_err err;
    float *a = malloc(sizeof(float) * (size_t)nseq * hidden);
    float *b = malloc(sizeof(float) * (size_t)nseq * hidden);
    float na[16], nb[16]; /* the norms before normalisation */
    ck_assert_msg(mt_model_forward(plain, ids, off, nseq, a, na, &err) == MT_OK, "%s", err.msg);
    ck_assert_msg(mt_model_forward(rec, ids, off, nseq, b, nb, &err) == MT_OK, "%s", err.msg);
    double m = 0;
    for (size_t i = 0; i < (size_t)nseq * hidden; i++) {
        const double d = fabs((double)a[i] - b[i]);
        m = d > m || d != d ? d : m;
    }
    for (int s = 0; s < nseq; s++)
        ck_assert_msg(fabs(na[s] - nb[s]) <= 1e-5 * na[s], "norm %d: %g vs %g", s, na[s], nb[s]);
    free(a);
    free(b);
    return m;
}

enum { MAXT = 8 * 64 };
#define TOL 1e-5 /* the CPU's GEMM may pick another kernel for the padded m */

/* Another batch of nseq sequences whose token count has bucket `bucket`. */
static int same_bucket_batch(int nseq, int lo, int hi, int bucket, int32_t *ids, int32_t *off)
{
    for (int tries = 0; tries < 1000; tries++) {
        const int t = make_batch(nseq, lo, hi, ids, off);
        if (mt_fwd_bucket(t) == bucket)
            return t;
    }
    ck_abort_msg("no batch of %d in bucket %d", nseq, bucket);
    return 0;
}

START_TEST(fwd_graph_replays_with_new_inputs_equal_the_plain_forward)
{
    static const int cases[][3] = {{1, 1, 12}, {1, 20, 60}, {2, 3, 30}, {3, 5, 40}, {8, 2, 20},
                                   {8, 30, 64}};
    int32_t ids[MAXT], off[9];
    double worst = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int nseq = cases[c][0], lo = cases[c][1], hi = cases[c][2];
        const int t = make_batch(nseq, lo, hi, ids, off), bucket = mt_fwd_bucket(t);
        const int r0 = tape->records, p0 = tape->replays;
        for (int rep = 0; rep < 3; rep++) { /* eager, record, replay */
            const double d = forward_diff(ids, off, nseq);
            ck_assert_msg(d <= TOL, "batch %d, %d tokens, use %d: max |diff| %g", nseq, t, rep, d);
            worst = d > worst ? d : worst;
        }
        ck_assert_int_eq(tape->records, r0 + 1);
        ck_assert_int_eq(tape->replays, p0 + 1);
        for (int k = 0; k < 3; k++) { /* new ids, lengths and offsets: replays */
            const int t2 = same_bucket_batch(nseq, lo, hi, bucket, ids, off);
            const double d = forward_diff(ids, off, nseq);
            ck_assert_msg(d <= TOL, "batch %d, new inputs (%d tokens, bucket %d): max |diff| %g",
                          nseq, t2, bucket, d);
            worst = d > worst ? d : worst;
        }
        ck_assert_int_eq(tape->replays, p0 + 4);
    }
    ck_assert_int_eq(tape->violations, 0);
    printf("fwd_graph: replays vs the plain forward: max |diff| %.3g\n", worst);
}
END_TEST

START_TEST(fwd_graph_is_not_taken_outside_the_keys)
{
    int32_t ids[MAXT], off[10];
    const int b0 = tape->begins;
    make_batch(9, 2, 10, ids, off); /* batch 9: plain */
    ck_assert(forward_diff(ids, off, 9) <= TOL);
    ck_assert_int_eq(tape->begins, b0);
    tape->not_now = 1; /* the backend records nothing now (debug sync): plain */
    make_batch(2, 2, 10, ids, off);
    ck_assert(forward_diff(ids, off, 2) <= TOL);
    ck_assert(forward_diff(ids, off, 2) <= TOL);
    tape->not_now = 0;
    ck_assert_int_eq(tape->begins, b0);
    make_batch(2, 2, 10, ids, off); /* and back: recorded */
    ck_assert(forward_diff(ids, off, 2) <= TOL);
    ck_assert_int_eq(tape->begins, b0 + 1);
    ck_assert_int_eq(tape->violations, 0);
}
END_TEST

START_TEST(fwd_graph_failed_op_drops_the_recording)
{
    int32_t ids[MAXT], off[6];
    float out[5 * 1024];
    mt_err err;
    make_batch(5, 4, 9, ids, off);
    ck_assert(forward_diff(ids, off, 5) <= TOL); /* eager */
    tape->op_calls = 0;
    tape->fail_op_at = 7; /* the recording's seventh op fails */
    ck_assert_int_eq(mt_model_forward(rec, ids, off, 5, out, NULL, &err), MT_EINTERNAL);
    ck_assert_msg(strstr(err.msg, "injected"), "%s", err.msg);
    tape->fail_op_at = 0;
    const int r0 = tape->records, p0 = tape->replays;
    ck_assert(forward_diff(ids, off, 5) <= TOL); /* recorded again, not replayed */
    ck_assert_int_eq(tape->records, r0 + 1);
    ck_assert_int_eq(tape->replays, p0);
    ck_assert(forward_diff(ids, off, 5) <= TOL);
    ck_assert_int_eq(tape->replays, p0 + 1);
    ck_assert_int_eq(tape->violations, 0);
}
END_TEST

/* models/encoder.c calls layernorm_feed before the GEMM that reads its
 * output, and the GEMM is the next op: after the embedding's LayerNorm
 * (layer 0's QKV), each attention block's (the MLP's first GEMM) and each
 * layer's last but the final one (the next QKV): 2 per layer, in plain,
 * eager and recorded forwards alike; the vectors are the plain CPU's. */
START_TEST(layernorm_feed_is_followed_by_its_gemm)
{
    int32_t ids[MAXT], off[10];
    const int layers = rec->info.layers;
    make_batch(9, 2, 10, ids, off); /* batch 9: plain */
    int k0 = tape->feeds_kept;
    ck_assert(forward_diff(ids, off, 9) <= TOL);
    ck_assert_int_eq(tape->feeds_kept - k0, 2 * layers);
    make_batch(3, 5, 30, ids, off); /* eager, recorded, replayed (issues nothing) */
    k0 = tape->feeds_kept;
    for (int rep = 0; rep < 3; rep++)
        ck_assert(forward_diff(ids, off, 3) <= TOL);
    ck_assert_int_eq(tape->feeds_kept - k0, 2 * 2 * layers);
    ck_assert_int_eq(tape->feeds_broken, 0);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("fwd_graph");
    TCase *tc = tcase_create("fwd_graph");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, fwd_graph_replays_with_new_inputs_equal_the_plain_forward);
    tcase_add_test(tc, fwd_graph_is_not_taken_outside_the_keys);
    tcase_add_test(tc, fwd_graph_failed_op_drops_the_recording);
    tcase_add_test(tc, layernorm_feed_is_followed_by_its_gemm);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
