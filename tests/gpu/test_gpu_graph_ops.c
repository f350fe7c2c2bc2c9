/* test_gpu_graph_ops.c: CUDA graphs through the CUDA backend table
 * (engine/cuda/graph.c): a cut-down encoder layer recorded, replayed and
 * compared bitwise with its eager run; re-recording after the split-K
 * workspace grows; the rules between begin and end; MANTISSA_CUDA_DEBUG_SYNC
 * recording nothing. The model forward as graphs: test_gpu_graphs.c.
 *
 *   test_gpu_graph_ops [--seed N] [--quick]
 */
#include "engine/cuda/backend.h"
#include "engine/quant/quant.h"
#include "tests/gpu/gpu_test.h"

#define MT_OK_OR(st, err) CHECK((st) == MT_OK, "%s", (err).msg)

/* ========================================================================
 * CUDA graphs
 * ====================================================================== */

typedef struct {
    mt_backend *be;
    int nseq, t, h, heads, vocab;
    int32_t *dids, *doff;
    float *word, *pos, *g, *b, *bias, *x, *qkv, *ctx, *y, *pooled;
    mt_weight *wqkv, *wout;
} mini_model;

/* A cut-down encoder layer through the backend table: embed, LayerNorm,
 * int8 QKV GEMM (fused kernel), attention, fp16 GEMM with bias and GELU,
 * residual LayerNorm, pooling. */
static mt_status mini_forward(const mini_model *mm, mt_err *err)
{
    const mt_backend_ops *op = mm->be->ops;
    mt_backend *be = mm->be;
    const int h = mm->h, t = mm->t;
    mt_status st;
    if ((st = op->embed(be, mm->dids, mm->doff, mm->nseq, mm->word, mm->pos, mm->word, h, mm->x, err)) ||
        (st = op->layernorm(be, mm->x, NULL, mm->g, mm->b, t, h, 1e-12f, mm->x, err)) ||
        (st = op->gemm(be, mm->x, t, mm->wqkv, NULL, MT_ACT_NONE, mm->qkv, err)) ||
        (st = op->attention(be, mm->qkv, mm->doff, mm->nseq,
                            &(mt_attn_params){mm->heads, mm->heads, h / mm->heads, false, NULL, 0},
                            mm->ctx, err)) ||
        (st = op->gemm(be, mm->ctx, t, mm->wout, mm->bias, MT_ACT_GELU, mm->y, err)) ||
        (st = op->layernorm(be, mm->y, mm->x, mm->g, mm->b, t, h, 1e-12f, mm->x, err)))
        return st;
    return op->mean_pool(be, mm->x, mm->doff, mm->nseq, h, true, mm->pooled, err);
}

/* MANTISSA_CUDA_DEBUG_SYNC: no graph is ever recorded, ops still compute, and an
 * error surfaces at the op that caused it. */
static void debug_sync_records_nothing(void)
{
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.debug_sync = 1;
    mt_backend *be = NULL;
    mt_err err = {{0}};
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
        return;
    const mt_backend_ops *op = be->ops;
    const int t = 3, h = 64;
    float *x = op->alloc(be, sizeof(float) * t * h), *g = op->alloc(be, sizeof(float) * h);
    float hx[3 * 64], hg[64], out[3 * 64];
    for (int i = 0; i < t * h; i++)
        hx[i] = gt_unif(-1, 1);
    for (int i = 0; i < h; i++)
        hg[i] = 1.f;
    int ok = op->upload(be, x, hx, sizeof hx, &err) == MT_OK && op->upload(be, g, hg, sizeof hg, &err) == MT_OK;
    for (int round = 0; round < 3 && ok; round++) {
        bool replay = true;
        ok = mt_cuda_graph_begin(be, 7, &replay, &err) == MT_OK && !replay &&
             op->layernorm(be, x, NULL, g, g, t, h, 1e-5f, x, &err) == MT_OK &&
             mt_cuda_graph_end(be, &err) == MT_OK;
    }
    ok = ok && op->download(be, out, x, sizeof out, &err) == MT_OK;
    CHECK(ok && gt_first_nonfinite(out, (size_t)t * h) < 0,
          "debug sync: begin never replays or records, ops run: %s", err.msg);
    op->free(be, x), op->free(be, g);
    mt_backend_destroy(be);
}

/* Uploads (and drops) a 4096x4096 int8 weight: the backend's split-K
 * workspace need grows if its bound is larger than every earlier weight's,
 * and then every thread's workspace is reallocated. */
static void upload_large_int8_weight(mt_backend *be)
{
    mt_err err = {{0}};
    mt_weight *big = NULL;
    void *bq = calloc((size_t)4096 * 4096, 1);
    float *bs = malloc(sizeof(float) * 4096);
    for (int i = 0; i < 4096; i++)
        bs[i] = 1.f;
    const mt_status st = be->ops->weight_upload(be, MT_PREC_INT8, 4096, 4096, bq, bs, &big, &err);
    MT_OK_OR(st, err);
    be->ops->weight_destroy(be, big);
    free(bq), free(bs);
}

/* The rules between begin and end, on a key of its own: the first begin
 * runs eagerly, the second records; no alloc, upload or nested begin while
 * recording; a free while recording is deferred and the recording dropped. */
static void graph_rules_hold(mt_backend *be, mini_model *mm_, int32_t *ids, float *ga)
{
    const mt_backend_ops *op = be->ops;
    mini_model mm = *mm_;
    const int h = mm.h;
    mt_err err = {{0}};
    mt_status st;
    bool replay;
    void *tmp = op->alloc(be, 4096);
    st = mt_cuda_graph_begin(be, 43, &replay, &err);
    CHECK(st == MT_OK && !replay && (st = mt_cuda_graph_end(be, &err)) == MT_OK,
          "first begin of a new key runs eagerly: %s", err.msg);
    st = mt_cuda_graph_begin(be, 43, &replay, &err);
    CHECK(st == MT_OK && !replay, "second begin records: %s", err.msg);
    op->free(be, tmp); /* deferred: the recording is then not kept */
    CHECK(op->alloc(be, 1024) == NULL, "alloc while recording is refused");
    CHECK(op->upload(be, mm.dids, ids, 4, &err) == MT_EINVAL && strstr(err.msg, "recorded"),
          "upload while recording: %s", err.msg);
    CHECK(mt_cuda_graph_begin(be, 44, &replay, &err) == MT_EINVAL, "nested begin: %s", err.msg);
    st = mt_cuda_graph_end(be, &err);
    CHECK(st == MT_OK, "end of an empty recording: %s", err.msg);
    st = op->download(be, ga, mm.pooled, sizeof(float) * h, &err);
    CHECK(st == MT_OK, "the stream works after: %s", err.msg);
    st = mt_cuda_graph_begin(be, 43, &replay, &err);
    CHECK(st == MT_OK && !replay, "a recording that freed memory was not kept: %s", err.msg);
    mt_cuda_graph_end(be, &err);
}

static void graphs_replay_what_eager_computes(void)
{
    mt_backend *be = NULL;
    mt_err err = {{0}};
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.debug_sync = 0; /* graphs even in bench/gpu.sh's MANTISSA_CUDA_DEBUG_SYNC=1 pass */
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
        return;
    const mt_backend_ops *op = be->ops;
    mini_model mm = {.be = be, .nseq = 5, .h = 384, .heads = 12, .vocab = 300};
    int32_t off[6] = {0};
    for (int s = 0; s < mm.nseq; s++)
        off[s + 1] = off[s] + gt_randint(1, 100);
    mm.t = off[mm.nseq];
    const int h = mm.h, t = mm.t;
    float *hw = malloc(sizeof(float) * (size_t)3 * h * h), *hs = malloc(sizeof(float) * 3 * h);
    float *tab = malloc(sizeof(float) * (size_t)mm.vocab * h);
    void *q = malloc((size_t)3 * h * h * 2);
    int32_t *ids = malloc(sizeof(int32_t) * t);
    float *ra = malloc(sizeof(float) * mm.nseq * h), *ga = malloc(sizeof(float) * mm.nseq * h);
    mt_status st;
    for (size_t i = 0; i < (size_t)3 * h * h; i++)
        hw[i] = gt_unif(-0.08f, 0.08f);
    for (size_t i = 0; i < (size_t)mm.vocab * h; i++)
        tab[i] = gt_unif(-1, 1);
    mm.dids = op->alloc(be, sizeof(int32_t) * t);
    mm.doff = op->alloc(be, sizeof(int32_t) * (mm.nseq + 1));
    mm.word = op->alloc(be, sizeof(float) * (size_t)mm.vocab * h);
    mm.pos = mm.word; /* any table will do: only the recording matters here */
    mm.g = op->alloc(be, sizeof(float) * h);
    mm.b = op->alloc(be, sizeof(float) * h);
    mm.bias = op->alloc(be, sizeof(float) * h);
    mm.x = op->alloc(be, sizeof(float) * (size_t)t * h);
    mm.qkv = op->alloc(be, sizeof(float) * (size_t)t * 3 * h);
    mm.ctx = op->alloc(be, sizeof(float) * (size_t)t * h);
    mm.y = op->alloc(be, sizeof(float) * (size_t)t * h);
    mm.pooled = op->alloc(be, sizeof(float) * mm.nseq * h);
    for (int i = 0; i < h; i++)
        hs[i] = 1.f, hs[h + i] = 0.f, hs[2 * h + i] = gt_unif(-0.1f, 0.1f);
    if ((st = mt_quantize(hw, 3 * h, h, MT_PREC_INT8, NULL, q, hs + 0, &err)) ||
        (st = op->weight_upload(be, MT_PREC_INT8, 3 * h, h, q, hs, &mm.wqkv, &err)) ||
        (st = mt_quantize(hw, h, h, MT_PREC_FP16, NULL, q, NULL, &err)) ||
        (st = op->weight_upload(be, MT_PREC_FP16, h, h, q, NULL, &mm.wout, &err))) {
        MT_OK_OR(st, err);
        goto out;
    }
    for (int i = 0; i < h; i++)
        hs[i] = 1.f;
    if ((st = op->upload(be, mm.word, tab, sizeof(float) * (size_t)mm.vocab * h, &err)) ||
        (st = op->upload(be, mm.g, hs, sizeof(float) * h, &err)) ||
        (st = op->upload(be, mm.b, hs + h, sizeof(float) * h, &err)) ||
        (st = op->upload(be, mm.bias, hs + 2 * h, sizeof(float) * h, &err)) ||
        (st = op->upload(be, mm.doff, off, sizeof(int32_t) * (mm.nseq + 1), &err))) {
        MT_OK_OR(st, err);
        goto out;
    }
    long grows_at_record = -1;
    for (int round = 0; round < 5; round++) {
        if (round == 3) /* an 8-bit weight upload may grow the split-K workspace */
            upload_large_int8_weight(be);
        for (int i = 0; i < t; i++)
            ids[i] = gt_randint(0, mm.vocab - 1);
        /* eager */
        if ((st = op->upload(be, mm.dids, ids, sizeof(int32_t) * t, &err)) ||
            (st = mini_forward(&mm, &err)) ||
            (st = op->download(be, ra, mm.pooled, sizeof(float) * mm.nseq * h, &err))) {
            MT_OK_OR(st, err);
            goto out;
        }
        /* eager on round 0, recorded on round 1, replayed after (but
         * recorded again on round 3, after the workspace grew) */
        bool replay = false;
        memset(ga, 0xff, sizeof(float) * mm.nseq * h);
        if ((st = op->upload(be, mm.dids, ids, sizeof(int32_t) * t, &err)) ||
            (st = mt_cuda_graph_begin(be, 42, &replay, &err)) ||
            (!replay && (st = mini_forward(&mm, &err))) || (st = mt_cuda_graph_end(be, &err)) ||
            (st = op->download(be, ga, mm.pooled, sizeof(float) * mm.nseq * h, &err))) {
            MT_OK_OR(st, err);
            mt_cuda_graph_end(be, &err);
            goto out;
        }
        /* a replay unless the workspace grew since the recording: the
         * 4096x4096 upload need not grow it (on 132 SMs a 1152x384 weight's
         * split-K bound is the larger), graph_rerecords_after_growth forces it */
        mt_cuda_counts cc;
        mt_cuda_get_counts(be, &cc);
        const bool want = round >= 2 && cc.ws_grows == grows_at_record;
        if (!replay && round >= 1)
            grows_at_record = cc.ws_grows;
        CHECK(replay == want && !memcmp(ra, ga, sizeof(float) * mm.nseq * h),
              "graph round %d: replayed %d (want %d), same bits as eager %d", round, replay, want,
              !memcmp(ra, ga, sizeof(float) * mm.nseq * h));
    }
    graph_rules_hold(be, &mm, ids, ga);
out:
    op->weight_destroy(be, mm.wqkv);
    op->weight_destroy(be, mm.wout);
    void *bufs[] = {mm.dids, mm.doff, mm.word, mm.g, mm.b, mm.bias, mm.x, mm.qkv, mm.ctx, mm.y, mm.pooled};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        op->free(be, bufs[i]);
    free(hw), free(hs), free(tab), free(q), free(ids), free(ra), free(ga);
    mt_backend_destroy(be);
}

/* A graph recorded before any 8-bit weight exists (no split-K workspace)
 * is re-recorded, not replayed, once an 8-bit upload makes the workspace
 * grow; its replays before and after give the eager bits. */
static void graph_rerecords_after_growth(void)
{
    mt_backend *be = NULL;
    mt_err err = {{0}};
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    o.debug_sync = 0;
    if (!MT_OK_OR(mt_backend_cuda_create_opts(0, &o, &be, &err), err))
        return;
    const mt_backend_ops *op = be->ops;
    enum { T = 5, H = 384 };
    float hx[T * H], hg[H], want[T * H], got[T * H];
    for (int i = 0; i < T * H; i++)
        hx[i] = gt_unif(-1, 1);
    for (int i = 0; i < H; i++)
        hg[i] = gt_unif(0.5f, 1.5f);
    float *x = op->alloc(be, sizeof hx), *g = op->alloc(be, sizeof hg), *y = op->alloc(be, sizeof hx);
    int ok = op->upload(be, x, hx, sizeof hx, &err) == MT_OK && op->upload(be, g, hg, sizeof hg, &err) == MT_OK &&
             op->layernorm(be, x, NULL, g, g, T, H, 1e-5f, y, &err) == MT_OK &&
             op->download(be, want, y, sizeof want, &err) == MT_OK;
    long grows0 = 0;
    for (int round = 0; round < 5 && ok; round++) {
        if (round == 3) {
            mt_cuda_counts c;
            mt_cuda_get_counts(be, &c);
            grows0 = c.ws_grows;
            upload_large_int8_weight(be); /* the first 8-bit weight: the need goes up from 0 */
        }
        bool replay = false;
        memset(got, 0xff, sizeof got);
        ok = op->upload(be, y, got, sizeof got, &err) == MT_OK &&
             mt_cuda_graph_begin(be, 9, &replay, &err) == MT_OK &&
             (replay || op->layernorm(be, x, NULL, g, g, T, H, 1e-5f, y, &err) == MT_OK) &&
             mt_cuda_graph_end(be, &err) == MT_OK && op->download(be, got, y, sizeof got, &err) == MT_OK;
        mt_cuda_counts c;
        mt_cuda_get_counts(be, &c);
        const bool want_replay = round == 2 || round == 4;
        CHECK(ok && replay == want_replay && !memcmp(want, got, sizeof got) &&
                  (round != 3 || c.ws_grows > grows0),
              "growth round %d: replayed %d (want %d), eager bits %d, workspace grew %ld -> %ld: %s",
              round, replay, want_replay, !memcmp(want, got, sizeof got), grows0, c.ws_grows,
              ok ? "ok" : err.msg);
    }
    op->free(be, x), op->free(be, g), op->free(be, y);
    mt_backend_destroy(be);
}

int main(int argc, char **argv)
{
    const char *suite = "gpu graph ops";
    setvbuf(stdout, NULL, _IOLBF, 0);
    gt_init(argc, argv, suite);
    if (!gt_have_device(suite)) {
        gt_skip++;
        return gt_finish(suite);
    }
    graphs_replay_what_eager_computes();
    graph_rerecords_after_growth();
    debug_sync_records_nothing();
    return gt_finish(suite);
}
