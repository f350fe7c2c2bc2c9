/* gemm_f32.c: the CPU FP32 GEMM (qgemm.h, kc_f32_weight): y = x . W^T
 * (+ bias, GELU) with W reordered once, at load, into the blocked layout
 * oneDNN's f32 matmul prefers; and the same for BF16 weights on CPUs with
 * AVX512_BF16 (kc_bf16_weight_create), where x is rounded to BF16 per call
 * and the bf16 matmul runs at twice the FP32 rate (1037 against 533 GFLOP/s
 * at 128 x 1536 x 384 on the 2-core AMD EPYC VM; bench/results/
 * cpu-bf16-2026-11-26.md).
 *
 * Why not dnnl_sgemm: it packs W on every call. Below 16 rows it takes a
 * small-M path, from 16 rows on the packing is most of a small call: on
 * the 2-core AMD EPYC (AVX-512) dev VM, two threads, N=384 K=1536, 83
 * GOP/s at M=16 against 464 for the matmul on a reordered W, 1.1-1.4x at
 * M=64..256; a lone STS-B sentence's forward 1.7 -> 1.1 ms, a batch of
 * 16 13.2 -> 9.7 ms (bench/results/cpu-f32-2026-11-26.md).
 *
 * How M (the token count, different in nearly every call) meets the
 * primitive: M is cut into chunks of at most KC_F32_CHUNK rows (balanced),
 * and there is one primitive per row count 1..KC_F32_CHUNK, exact (no
 * padded rows to copy). A primitive depends only on the shape, not on the
 * weight's values, so the primitives live in a process-wide table of
 * shapes, all made when the first weight of a shape is (about 0.1 ms
 * each, 10-35 ms a shape), and every weight of that shape shares them. The
 * table also checks that every row count reads W in one and the same
 * layout; a shape where that fails (or the table is full) keeps W as it
 * came and runs on sgemm as before.
 *
 * Threads: W is split into column blocks (as many as the backend has
 * threads, each a multiple of 16 columns and at least 64), each reordered
 * on its own, so that a lone sentence's few rows still keep every core
 * busy; the work is (row chunk, column block) tiles over one parallel
 * region, each tile's bias and GELU applied while it is in cache. Inside
 * a parallel region oneDNN runs the primitive on the calling thread.
 */
#include "kernels/cpu/qgemm.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/numfmt.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/scratch.h"

/* The primitives for one (block width, k, dst row stride, data type) shape. */
typedef struct {
    int nw, k, ldy;
    dnnl_data_type_t dt; /* of x and W: f32, or bf16 (kc_bf16_matmul_available) */
    bool ok; /* all row counts made, all reading W in wmd */
    dnnl_memory_desc_t wmd;
    dnnl_primitive_t prim[KC_F32_CHUNK + 1];
    dnnl_memory_desc_t spmd[KC_F32_CHUNK + 1];
    size_t scratch[KC_F32_CHUNK + 1];
} f32_shape;

static struct {
    pthread_mutex_t mu;
    dnnl_engine_t eng;
    int n;
    f32_shape *s[KC_F32_SHAPES_MAX];
} tab = {.mu = PTHREAD_MUTEX_INITIALIZER};

struct kc_f32_weight {
    int n, k, nblk, nw;
    dnnl_data_type_t dt;
    const f32_shape *sh; /* NULL: sgemm on plain */
    float *plain;        /* (n, k) as given, when sh is NULL */
    void *blk;           /* nblk reordered column blocks, bbytes apart */
    size_t bbytes;
};

/* Destroys the memory objects of m[0..n) that were made. */
static void mems_destroy(dnnl_memory_t *m, int n)
{
    for (int i = 0; i < n; i++)
        if (m[i])
            dnnl_memory_destroy(m[i]);
}

/* Matmul (rows, k) x (k, nw) -> (rows, nw) with dst rows ldy apart, W in
 * the layout oneDNN prefers; scratchpad user-managed so that concurrent
 * calls never share one. */
static dnnl_status_t f32_pd(int rows, int nw, int k, int ldy, dnnl_data_type_t dt,
                            dnnl_primitive_desc_t *pd)
{
    dnnl_memory_desc_t smd, wmd, dmd;
    dnnl_dims_t sd = {rows, k}, wd = {k, nw}, dd = {rows, nw}, ds = {ldy, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_status_t st;
    if ((st = dnnl_memory_desc_init_by_tag(&smd, 2, sd, dt, dnnl_ab)) != dnnl_success ||
        (st = dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dt, dnnl_format_tag_any)) !=
            dnnl_success ||
        (st = dnnl_memory_desc_init_by_strides(&dmd, 2, dd, dnnl_f32, ds)) != dnnl_success ||
        (st = dnnl_matmul_desc_init(&md, &smd, &wmd, NULL, &dmd)) != dnnl_success ||
        (st = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) !=
            dnnl_success)
        goto done;
    st = dnnl_primitive_desc_create(pd, &md, attr, tab.eng, NULL);
done:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Makes every row count's primitive of a shape; ok only when all were made
 * and all read W in the same layout. */
static void shape_fill(f32_shape *s)
{
    s->ok = true;
    for (int r = KC_F32_CHUNK; r >= 1 && s->ok; r--) {
        dnnl_primitive_desc_t pd = NULL;
        s->ok = f32_pd(r, s->nw, s->k, s->ldy, s->dt, &pd) == dnnl_success;
        const dnnl_memory_desc_t *wq =
            s->ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
        const dnnl_memory_desc_t *sp =
            s->ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
        if (wq && r == KC_F32_CHUNK)
            s->wmd = *wq;
        s->ok = wq && sp && dnnl_memory_desc_equal(wq, &s->wmd) &&
                dnnl_primitive_create(&s->prim[r], pd) == dnnl_success;
        if (s->ok) {
            s->spmd[r] = *sp;
            s->scratch[r] = dnnl_memory_desc_get_size(sp);
        }
        if (pd)
            dnnl_primitive_desc_destroy(pd);
    }
    for (int r = 1; r <= KC_F32_CHUNK && !s->ok; r++) /* a failed shape keeps nothing */
        if (s->prim[r]) {
            dnnl_primitive_destroy(s->prim[r]);
            s->prim[r] = NULL;
        }
}

/* The shape's entry, made on first use; NULL when the table is full or out
 * of memory. Entries are never changed after they are made. */
static const f32_shape *shape_get(int nw, int k, int ldy, dnnl_data_type_t dt)
{
    f32_shape *found = NULL;
    pthread_mutex_lock(&tab.mu);
    if (!tab.eng && dnnl_engine_create(&tab.eng, dnnl_cpu, 0) != dnnl_success)
        tab.eng = NULL;
    for (int i = 0; i < tab.n && !found; i++)
        if (tab.s[i]->nw == nw && tab.s[i]->k == k && tab.s[i]->ldy == ldy && tab.s[i]->dt == dt)
            found = tab.s[i];
    if (!found && tab.eng && tab.n < KC_F32_SHAPES_MAX && (found = calloc(1, sizeof *found))) {
        found->nw = nw;
        found->k = k;
        found->ldy = ldy;
        found->dt = dt;
        shape_fill(found);
        tab.s[tab.n++] = found;
    }
    pthread_mutex_unlock(&tab.mu);
    return found;
}

/* Column blocks for `threads`: the most, up to threads, that split n into
 * equal widths that are multiples of 16 and at least 64. */
static int f32_blocks(int n, int threads)
{
    for (int b = threads; b > 1; b--)
        if (n % b == 0 && (n / b) % 16 == 0 && n / b >= 64)
            return b;
    return 1;
}

/* Reorders rows [n0, n0 + nw) of W (n, k), seen as (k, nw) with strides
 * (1, k), into dst in the shape's layout. On the calling thread alone
 * (a few ms for a whole model): a load must not start an OpenMP team in
 * a process that may fork next, as the unit tests' fixtures do (libgomp's
 * pool does not survive a fork, and the child hangs in its first parallel
 * region). */
static int f32_reorder(const f32_shape *s, const void *w, int n0, void *dst)
{
    dnnl_memory_desc_t umd;
    dnnl_dims_t wd = {s->k, s->nw}, strides = {1, s->k};
    dnnl_memory_t m[2] = {NULL, NULL}; /* from, to */
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_stream_t strm = NULL;
    int rc = KC_EDNNL;
    const size_t elem = s->dt == dnnl_bf16 ? 2 : 4;
    const char *first = (const char *)w + (size_t)n0 * s->k * elem;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    if (dnnl_memory_desc_init_by_strides(&umd, 2, wd, s->dt, strides) == dnnl_success &&
        dnnl_memory_create(&m[0], &umd, tab.eng, (void *)first) == dnnl_success &&
        dnnl_memory_create(&m[1], &s->wmd, tab.eng, dst) == dnnl_success &&
        dnnl_reorder_primitive_desc_create(&rpd, &umd, tab.eng, &s->wmd, tab.eng, NULL) ==
            dnnl_success &&
        dnnl_primitive_create(&r, rpd) == dnnl_success &&
        dnnl_stream_create(&strm, tab.eng, dnnl_stream_default_flags) == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, m[0]}, {DNNL_ARG_TO, m[1]}};
        if (dnnl_primitive_execute(r, strm, 2, args) == dnnl_success &&
            dnnl_stream_wait(strm) == dnnl_success)
            rc = KC_OK;
    }
    if (strm)
        dnnl_stream_destroy(strm);
    if (r)
        dnnl_primitive_destroy(r);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    mems_destroy(m, 2);
    omp_set_num_threads(saved);
    return rc;
}

/* Reordered blocks when the shape allows; else, for FP32, a plain copy for
 * sgemm, and for BF16 KC_EDNNL (the caller keeps its own path). */
static int weight_create(const void *w, int n, int k, int threads, dnnl_data_type_t dt,
                         kc_f32_weight **out)
{
    *out = NULL;
    if (!w || n <= 0 || k <= 0)
        return KC_EINVAL;
    kc_f32_weight *fw = calloc(1, sizeof *fw);
    if (!fw)
        return KC_ENOMEM;
    fw->n = n;
    fw->k = k;
    fw->dt = dt;
    fw->nblk = f32_blocks(n, threads > 0 ? threads : 1);
    fw->nw = n / fw->nblk;
    const f32_shape *s = shape_get(fw->nw, k, n, dt);
    if (!(s && s->ok) && dt != dnnl_f32) {
        free(fw);
        return KC_EDNNL;
    }
    if (s && s->ok) {
        fw->bbytes = (dnnl_memory_desc_get_size(&s->wmd) + 63) & ~(size_t)63;
        if (!(fw->blk = aligned_alloc(64, fw->bbytes * (size_t)fw->nblk))) {
            free(fw);
            return KC_ENOMEM;
        }
        fw->sh = s;
        for (int b = 0; b < fw->nblk; b++) {
            int rc = f32_reorder(s, w, b * fw->nw, (char *)fw->blk + fw->bbytes * (size_t)b);
            if (rc != KC_OK) {
                kc_f32_weight_destroy(fw);
                return rc;
            }
        }
    } else {
        const size_t bytes = sizeof(float) * (size_t)n * k;
        if (!(fw->plain = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) {
            free(fw);
            return KC_ENOMEM;
        }
        memcpy(fw->plain, w, bytes);
    }
    *out = fw;
    return KC_OK;
}

int kc_f32_weight_create(const float *w, int n, int k, int threads, kc_f32_weight **out)
{
    return weight_create(w, n, k, threads, dnnl_f32, out);
}

/* kc_bf16_matmul_set_enabled's switch (engine/options.c: MANTISSA_NO_BF16_MATMUL). */
static _Atomic bool bf16_off;

void kc_bf16_matmul_set_enabled(bool on)
{
    bf16_off = !on;
}

bool kc_bf16_matmul_available(void)
{
    return !bf16_off && kc_isa_get()->bf16;
}

int kc_bf16_weight_create(const uint16_t *w, int n, int k, int threads, kc_f32_weight **out)
{
    *out = NULL;
    if (!kc_bf16_matmul_available())
        return KC_EDNNL;
    return weight_create(w, n, k, threads, dnnl_bf16, out);
}

void kc_f32_weight_destroy(kc_f32_weight *w)
{
    if (!w)
        return;
    free(w->blk);
    free(w->plain);
    free(w);
}

size_t kc_f32_weight_bytes(const kc_f32_weight *w)
{
    if (!w)
        return 0;
    return w->sh ? w->bbytes * (size_t)w->nblk : sizeof(float) * (size_t)w->n * w->k;
}

bool kc_f32_weight_blocked(const kc_f32_weight *w)
{
    return w && w->sh;
}

/* One tile: rows [m0, m0 + rows) times column block b, then its bias and
 * GELU while it is in cache. A BF16 weight's tile reads x rounded to BF16
 * (xb, the whole of x, rounded once per call) instead of x. */
static int f32_tile(const kc_f32_weight *w, dnnl_stream_t strm, void *spad, const uint16_t *xb,
                    const float *x, int m0, int rows, int b, const float *bias, bool gelu,
                    float *y)
{
    const f32_shape *s = w->sh;
    dnnl_memory_desc_t smd, dmd;
    dnnl_dims_t sd = {rows, w->k}, dd = {rows, w->nw}, ds = {w->n, 1};
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL}; /* src, weights, dst, scratchpad */
    float *out = y + (size_t)m0 * w->n + (size_t)b * w->nw;
    const void *src = xb ? (const void *)(xb + (size_t)m0 * w->k)
                         : (const void *)(x + (size_t)m0 * w->k);
    int rc = KC_EDNNL;
    if (dnnl_memory_desc_init_by_tag(&smd, 2, sd, w->dt, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&dmd, 2, dd, dnnl_f32, ds) != dnnl_success ||
        dnnl_memory_create(&m[0], &smd, tab.eng, (void *)src) != dnnl_success ||
        dnnl_memory_create(&m[1], &s->wmd, tab.eng, (char *)w->blk + w->bbytes * (size_t)b) !=
            dnnl_success ||
        dnnl_memory_create(&m[2], &dmd, tab.eng, out) != dnnl_success ||
        dnnl_memory_create(&m[3], &s->spmd[rows], tab.eng, spad) != dnnl_success)
        goto done;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]},
                               {DNNL_ARG_WEIGHTS, m[1]},
                               {DNNL_ARG_DST, m[2]},
                               {DNNL_ARG_SCRATCHPAD, m[3]}};
    if (dnnl_primitive_execute(s->prim[rows], strm, 4, args) == dnnl_success &&
        dnnl_stream_wait(strm) == dnnl_success) {
        rc = KC_OK;
        if (bias || gelu)
            kc_epi_rows(out, (size_t)w->n, out, (size_t)w->n, rows, w->nw, NULL, NULL,
                        bias ? bias + (size_t)b * w->nw : NULL, gelu);
    }
done:
    mems_destroy(m, 4);
    return rc;
}

/* sgemm on the plain copy, for a shape the matmul could not take. */
static int f32_sgemm(const float *x, int m, const kc_f32_weight *w, const float *bias, bool gelu,
                     float *y)
{
    if (dnnl_sgemm('N', 'T', m, w->n, w->k, 1.0f, x, w->k, w->plain, w->k, 0.0f, y, w->n) !=
        dnnl_success)
        return KC_EDNNL;
    return kc_epilogue(y, m, w->n, NULL, NULL, bias, gelu);
}

int kc_gemm_f32(const float *x, int m, const kc_f32_weight *w, const float *bias, bool gelu,
                float *y)
{
    if (!w || m < 0 || (m > 0 && (!x || !y)))
        return KC_EINVAL;
    if (m == 0)
        return KC_OK;
    if (!w->sh)
        return f32_sgemm(x, m, w, bias, gelu, y);
    const int nchunk = (m + KC_F32_CHUNK - 1) / KC_F32_CHUNK;
    const int crows = (m + nchunk - 1) / nchunk, last = m - (nchunk - 1) * crows;
    const int ntile = nchunk * w->nblk, maxthr = omp_get_max_threads();
    const int nthr = ntile < maxthr ? ntile : maxthr > 0 ? maxthr : 1;
    const size_t sp = w->sh->scratch[crows] > w->sh->scratch[last] ? w->sh->scratch[crows]
                                                                   : w->sh->scratch[last];
    const size_t per = (sp + 63) & ~(size_t)63;
    /* for BF16, after the threads' scratchpads: x rounded to BF16, once */
    const size_t xbytes = w->dt == dnnl_bf16 ? sizeof(uint16_t) * (size_t)m * w->k : 0;
    char *buf = kc_scratch(per * (size_t)nthr + xbytes + 64);
    if (!buf)
        return KC_ENOMEM;
    int failed = KC_OK;
#pragma omp parallel num_threads(nthr) if (nthr > 1)
    {
        char *spad = buf + per * (size_t)omp_get_thread_num();
        uint16_t *xb = xbytes ? (uint16_t *)(buf + per * (size_t)nthr) : NULL;
        if (xb) {
#pragma omp for schedule(static)
            for (int r = 0; r < m; r++) /* the loop's barrier: all of xb before any tile */
                nf_f32_to_bf16_array(x + (size_t)r * w->k, xb + (size_t)r * w->k, w->k);
        }
        dnnl_stream_t strm = NULL;
        if (dnnl_stream_create(&strm, tab.eng, dnnl_stream_default_flags) != dnnl_success)
            strm = NULL;
#pragma omp for schedule(static)
        for (int t = 0; t < ntile; t++) {
            const int c = t / w->nblk, b = t % w->nblk, m0 = c * crows;
            const int rows = m - m0 < crows ? m - m0 : crows;
            int r = strm ? f32_tile(w, strm, spad, xb, x, m0, rows, b, bias, gelu, y) : KC_EDNNL;
            if (r != KC_OK) {
#pragma omp atomic write
                failed = r;
            }
        }
        if (strm)
            dnnl_stream_destroy(strm);
    }
    return failed;
}
