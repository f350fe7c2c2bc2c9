/* qgemm_s8_dnnl.c: oneDNN's form of the INT8 GEMM (qgemm_s8_internal.h):
 * used where the CPU has VNNI or AMX only when asked for (KC_S8_ONEDNN:
 * tests compare it with our kernels), and on builds without our kernels.
 *
 * Rows of x are quantized per token into a uint8 scratch with a scale and
 * a zero point (asymmetric: the grid spans [min, max] of the row and 0, so
 * a GELU output in [-0.17, max] gets all 256 codes rather than the 128 a
 * symmetric grid would leave it) and multiplied by oneDNN's int8 matmul
 * primitive (u8 x s8 -> s32: AMX brgemm, or VNNI; without VNNI its pair
 * sums saturate, which is why this form is not taken there); the
 * epilogue then removes the zero point in int32 (acc - zp[row] *
 * colsum[col], colsum the sum of the column's codes, made once per
 * weight), so the integer part stays exact, and applies token scale,
 * channel scale, bias and GELU. The primitive reads the codes in place or
 * from a blocked copy made once at creation (the caller chooses; qgemm.h
 * has the measurements). How M (the token count, different in nearly
 * every call) meets the primitive was measured with oneDNN 2.6 on
 * Sapphire Rapids:
 *   - DNNL_RUNTIME_DIM_VAL for M: oneDNN falls back to "ref_int8", about
 *     1000x slower (runtime output scales likewise lose the brgemm kernel,
 *     which is why the channel scales are applied in our epilogue);
 *   - a primitive per exact M costs 0.3-0.9 ms to create, more than the
 *     GEMM of a sentence, and a server sees a new M in most batches, so an
 *     LRU keyed by M would mostly miss;
 *   - brgemm is fastest on blocks of few rows: one core, N=1536 K=384,
 *     M <= 128: ~1050 GOP/s; M = 256: ~540; M = 4096 in one call: ~300
 *     (its f32 output no longer stays in L2).
 * So M is cut into chunks of at most KC_S8_CHUNK = 128 rows, and a chunk's
 * row count is rounded up to a bucket: 1, 2, then every even count to 16
 * (a lone sentence is a batch of about 10 rows, and padding 9 rows to 16
 * made the matmul 41% slower: 55 -> 39 us for 1536x384 on one core), then
 * multiples of 16 (AMX works on 16-row tiles anyway). The padded rows of
 * the uint8 input are zero, the chunk's result goes to a per-thread scratch
 * (which stays in L2), and the epilogue writes its real rows into y. A
 * weight thus needs at most 16 primitives, made on first use under a mutex
 * and kept until the weight is destroyed: a bounded cache that never needs
 * to evict, shared by every thread calling the weight. All of them read the same codes in the same
 * layout (checked as each is made). The threads take whole chunks inside a
 * single parallel region (oneDNN runs a primitive sequentially there), so a
 * chunk is quantized, multiplied and finished in one core's cache and a call
 * forks and joins once.
 *
 * Group scales ("int8g"): W's codes carry one scale per (output channel,
 * group of g inputs). K is cut into nb = k / g
 * groups (the last padded with zero codes) and the chunk's product runs as
 * one batched matmul of nb (rows, g) x (g, n) int8 products into int32
 * (batch = group); the epilogue sums the groups in FP32, each times its own
 * channel-and-group scale. The int32 scratch is nb times as large, so
 * chunks get fewer rows (at most KC_S8G_SCRATCH bytes of it).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/qgemm_s8_internal.h"
#include "kernels/cpu/scratch.h"

static const int s8_buckets[KC_S8_NBUCKET] = {1,  2,  4,  6,  8,  10,  12,  14,
                                              16, 32, 48, 64, 80, 96, 112, 128};

/* A chunk's grouped int32 scratch is kept under this many bytes (it must
 * stay in L2 while the epilogue reads it back): fewer rows per chunk when
 * there are many groups. */
#define KC_S8G_SCRATCH (1536 * 1024)

/* The bucket a chunk of rows runs as: the smallest bucket >= rows. */
static int s8_bucket(int rows)
{
    int b = 0;
    while (b < KC_S8_NBUCKET - 1 && s8_buckets[b] < rows)
        b++;
    return b;
}

/* The plain descriptions of a chunk of rows: the uint8 input (rows, k), or
 * (nb, rows, g) for groups, and the int32 output (rows, n) or (nb, rows, n). */
static dnnl_status_t s8_io_mds(const kc_s8_weight *w, int rows, dnnl_memory_desc_t *smd,
                               dnnl_memory_desc_t *dmd)
{
    dnnl_status_t st;
    if (w->nb == 1) {
        dnnl_dims_t sd = {rows, w->k}, dd = {rows, w->n};
        if ((st = dnnl_memory_desc_init_by_tag(smd, 2, sd, dnnl_u8, dnnl_ab)) != dnnl_success)
            return st;
        return dnnl_memory_desc_init_by_tag(dmd, 2, dd, dnnl_s32, dnnl_ab);
    }
    dnnl_dims_t sd = {w->nb, rows, w->g}, dd = {w->nb, rows, w->n};
    if ((st = dnnl_memory_desc_init_by_tag(smd, 3, sd, dnnl_u8, dnnl_abc)) != dnnl_success)
        return st;
    return dnnl_memory_desc_init_by_tag(dmd, 3, dd, dnnl_s32, dnnl_abc);
}

/* The weight as the matmul multiplies it, (k, n) or (nb, g, n), in the
 * layout oneDNN prefers (any) or as our (n, k) codes lie (plain: the
 * transposed "ba", or for groups strides (g, 1, k)). */
static dnnl_status_t s8_weight_md(const kc_s8_weight *w, bool plain, dnnl_memory_desc_t *wmd)
{
    if (w->nb == 1) {
        dnnl_dims_t wd = {w->k, w->n};
        return dnnl_memory_desc_init_by_tag(wmd, 2, wd, dnnl_s8,
                                            plain ? dnnl_ba : dnnl_format_tag_any);
    }
    dnnl_dims_t wd = {w->nb, w->g, w->n}, strides = {w->g, 1, (dnnl_dim_t)w->nb * w->g};
    if (plain)
        return dnnl_memory_desc_init_by_strides(wmd, 3, wd, dnnl_s8, strides);
    return dnnl_memory_desc_init_by_tag(wmd, 3, wd, dnnl_s8, dnnl_format_tag_any);
}

/* A matmul primitive descriptor for (rows, k) u8 x (k, n) s8 -> s32 (or its
 * batched form over the groups), the weights either in the given layout or
 * (wmd NULL) in the one it prefers. Scratchpad is user-managed so that
 * concurrent calls never share one. */
static dnnl_status_t s8_make_pd(const kc_s8_weight *w, int rows, const dnnl_memory_desc_t *wmd,
                                dnnl_primitive_desc_t *pd)
{
    dnnl_memory_desc_t smd, wany, dmd;
    dnnl_status_t st;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_matmul_desc_t md;
    if ((st = s8_io_mds(w, rows, &smd, &dmd)) != dnnl_success ||
        (st = s8_weight_md(w, false, &wany)) != dnnl_success ||
        (st = dnnl_matmul_desc_init(&md, &smd, wmd ? wmd : &wany, NULL, &dmd)) != dnnl_success ||
        (st = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) !=
            dnnl_success)
        goto done;
    st = dnnl_primitive_desc_create(pd, &md, attr, w->eng, NULL);
done:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Makes the primitive of bucket b from pd (which it takes over, and
 * destroys), with its scratchpad's description. */
static int s8_set_prim(kc_s8_weight *w, int b, dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_primitive_t prim = NULL;
    int rc = KC_EDNNL;
    /* every bucket must read the one reordered copy of the weight */
    if (wq && sp && dnnl_memory_desc_equal(wq, &w->wmd) &&
        dnnl_primitive_create(&prim, pd) == dnnl_success) {
        w->prim[b] = prim;
        w->spmd[b] = *sp;
        w->scratch[b] = dnnl_memory_desc_get_size(sp);
        rc = KC_OK;
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

/* The primitive of bucket b, made on first use; concurrent callers wait on
 * the weight's mutex while one of them makes it. */
static int s8_get_prim(kc_s8_weight *w, int b, dnnl_primitive_t *prim)
{
    int rc = KC_OK;
    pthread_mutex_lock(&w->mu);
    if (!w->prim[b]) {
        dnnl_primitive_desc_t pd;
        if (s8_make_pd(w, s8_buckets[b], &w->wmd, &pd) != dnnl_success)
            rc = KC_EDNNL;
        else
            rc = s8_set_prim(w, b, pd);
    }
    *prim = w->prim[b];
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* Frees what the form made: the primitives, the engine, the reordered
 * and padded codes. */
void kc_s8_dnnl_release(kc_s8_weight *w)
{
    for (int b = 0; b < KC_S8_NBUCKET; b++)
        if (w->prim[b])
            dnnl_primitive_destroy(w->prim[b]);
    if (w->eng)
        dnnl_engine_destroy(w->eng);
    free(w->wbuf);
    free(w->padded);
    w->eng = NULL, w->wbuf = NULL, w->padded = NULL;
    memset(w->prim, 0, sizeof w->prim);
}

/* Reorders W (n, k) row-major -- the (k, n) matrix the matmul multiplies,
 * stored transposed ("ba"; for groups (nb, g, n) with strides (g, 1, k)) --
 * into w->wbuf in layout w->wmd. */
static int s8_reorder_in(kc_s8_weight *w, const int8_t *codes)
{
    dnnl_memory_desc_t umd;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t um = NULL, wm = NULL;
    dnnl_stream_t s = NULL;
    int rc = KC_EDNNL;
    if (s8_weight_md(w, true, &umd) != dnnl_success ||
        dnnl_reorder_primitive_desc_create(&rpd, &umd, w->eng, &w->wmd, w->eng, NULL) !=
            dnnl_success ||
        dnnl_primitive_create(&r, rpd) != dnnl_success ||
        dnnl_memory_create(&um, &umd, w->eng, (void *)codes) != dnnl_success ||
        dnnl_memory_create(&wm, &w->wmd, w->eng, w->wbuf) != dnnl_success ||
        dnnl_stream_create(&s, w->eng, dnnl_stream_default_flags) != dnnl_success)
        goto done;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, wm}};
    if (dnnl_primitive_execute(r, s, 2, args) == dnnl_success &&
        dnnl_stream_wait(s) == dnnl_success)
        rc = KC_OK;
done:
    if (s)
        dnnl_stream_destroy(s);
    if (um)
        dnnl_memory_destroy(um);
    if (wm)
        dnnl_memory_destroy(wm);
    if (r)
        dnnl_primitive_destroy(r);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    return rc;
}

/* Upload: the engine, the full-chunk primitive, and the weight layout:
 * the codes in place -- W (n, k) row-major is the (k, n) matrix the matmul
 * multiplies, stored transposed ("ba") -- or reordered once into the
 * blocked layout oneDNN prefers (see qgemm.h for when each is taken). */
/* The weight's layout and primitive: oneDNN's plain (k, n) layout, read in
 * place, when the kernel it prefers takes that layout as is (and reorder is
 * false); else a copy reordered into the layout it prefers. Every
 * primitive descriptor made here is destroyed here, on every path (the one
 * handed to s8_set_prim is its to destroy). */
static int s8_prepare(kc_s8_weight *w, const int8_t *codes, bool reorder)
{
    dnnl_primitive_desc_t pany = NULL, pplain = NULL;
    dnnl_memory_desc_t plain;
    const char *impl = NULL;
    char iany[64];
    int rc = KC_EDNNL;
    if (dnnl_engine_create(&w->eng, dnnl_cpu, 0) != dnnl_success) {
        w->eng = NULL;
        return KC_EDNNL;
    }
    if (s8_weight_md(w, true, &plain) != dnnl_success ||
        s8_make_pd(w, w->max_rows, NULL, &pany) != dnnl_success ||
        dnnl_primitive_desc_query(pany, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
        goto out;
    snprintf(iany, sizeof iany, "%s", impl ? impl : "?");
    snprintf(w->impl, sizeof w->impl, "onednn:%s", iany);
    if (!reorder && s8_make_pd(w, w->max_rows, &plain, &pplain) == dnnl_success &&
        dnnl_primitive_desc_query(pplain, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl && !strcmp(impl, iany)) {
        w->wmd = plain; /* in place */
        rc = s8_set_prim(w, s8_bucket(w->max_rows), pplain);
        pplain = NULL;
        goto out;
    }
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pany, dnnl_query_weights_md, 0);
    if (!wq)
        goto out;
    w->wmd = *wq;
    rc = s8_set_prim(w, s8_bucket(w->max_rows), pany);
    pany = NULL;
    if (rc != KC_OK)
        goto out;
    w->wbytes = dnnl_memory_desc_get_size(&w->wmd);
    rc = KC_ENOMEM;
    if ((w->wbuf = aligned_alloc(64, (w->wbytes + 63) & ~(size_t)63)))
        rc = s8_reorder_in(w, codes);
out:
    if (pany)
        dnnl_primitive_desc_destroy(pany);
    if (pplain)
        dnnl_primitive_desc_destroy(pplain);
    return rc;
}

/* The oneDNN form of groups with k not a multiple of g: the codes padded
 * with zeros to (n, nb * g), the layout its batched matmul reads. */
static int s8_pad_codes(kc_s8_weight *w, const int8_t *codes)
{
    const int n = w->n, k = w->k;
    if (k % w->g == 0)
        return KC_OK;
    const size_t kp = (size_t)w->nb * w->g;
    if (!(w->padded = calloc((size_t)n * kp, 1)))
        return KC_ENOMEM;
    for (int j = 0; j < n; j++)
        memcpy(w->padded + (size_t)j * kp, codes + (size_t)j * k, (size_t)k);
    return KC_OK;
}

int kc_s8_dnnl_prepare(kc_s8_weight *w, const int8_t *codes, bool reorder)
{
    int rc = s8_pad_codes(w, codes);
    if (rc != KC_OK)
        return rc;
    return s8_prepare(w, w->padded ? w->padded : codes, reorder || w->padded);
}

/* The most rows a chunk takes: KC_S8_CHUNK, or for groups as many (a
 * multiple of 16, at least 16) as keep the int32 scratch under
 * KC_S8G_SCRATCH. */
int kc_s8_dnnl_max_rows(int nb, int n)
{
    if (nb == 1)
        return KC_S8_CHUNK;
    size_t rows = KC_S8G_SCRATCH / (sizeof(int32_t) * (size_t)nb * n);
    rows &= ~(size_t)15;
    return rows < 16 ? 16 : rows > KC_S8_CHUNK ? KC_S8_CHUNK : (int)rows;
}

/* Runs bucket b's primitive on src (rows of uint8 x) into dst (rows, n, int32). */
static int s8_exec(kc_s8_weight *w, int b, dnnl_primitive_t prim, dnnl_stream_t strm, int rows,
                   uint8_t *src, int32_t *dst, void *scratch)
{
    dnnl_memory_desc_t smd, dmd;
    dnnl_memory_t ms = NULL, mw = NULL, md = NULL, msp = NULL;
    void *wdata = w->wbuf ? w->wbuf : w->padded ? (void *)w->padded : (void *)w->codes;
    int rc = KC_EDNNL;
    if (s8_io_mds(w, rows, &smd, &dmd) != dnnl_success ||
        dnnl_memory_create(&ms, &smd, w->eng, src) != dnnl_success ||
        dnnl_memory_create(&mw, &w->wmd, w->eng, wdata) != dnnl_success ||
        dnnl_memory_create(&md, &dmd, w->eng, dst) != dnnl_success ||
        dnnl_memory_create(&msp, &w->spmd[b], w->eng, scratch) != dnnl_success)
        goto done;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ms},
                               {DNNL_ARG_WEIGHTS, mw},
                               {DNNL_ARG_DST, md},
                               {DNNL_ARG_SCRATCHPAD, msp}};
    if (dnnl_primitive_execute(prim, strm, 4, args) == dnnl_success &&
        dnnl_stream_wait(strm) == dnnl_success)
        rc = KC_OK;
done:
    if (ms)
        dnnl_memory_destroy(ms);
    if (mw)
        dnnl_memory_destroy(mw);
    if (md)
        dnnl_memory_destroy(md);
    if (msp)
        dnnl_memory_destroy(msp);
    return rc;
}

/* One chunk of at most KC_S8_CHUNK rows of x, on the calling thread:
 * quantize into q (padded with zero codes up to the bucket's row count;
 * those rows' results are never read),
 * matmul into the thread's scratch dtmp, then the epilogue from there into
 * y. Inside a parallel region oneDNN runs the primitive on this thread
 * alone. The matmul never writes y itself: its stores into y's cold lines
 * cost more than the multiply (one core, M = 4096, N = 1536 K = 384:
 * 15 ms straight into y, 7.7 ms into a scratch that stays in L2 with the
 * epilogue doing the one pass over y that it makes anyway). */
static int s8_chunk(kc_s8_weight *w, int b, dnnl_primitive_t prim, dnnl_stream_t strm,
                    const float *x, int mm, uint8_t *q, float *sx, int32_t *zp, int32_t *dtmp,
                    float *xtmp, void *spad, const float *bias, bool gelu, float *y)
{
    const int n = w->n, k = w->k, g = w->g, rows = s8_buckets[b];
    const size_t qplane = (size_t)rows * g; /* one group's codes */
    kc_s8_quant_rows(x, mm, k, g, qplane, (size_t)g, g, q, sx, zp, w->in_div, xtmp,
                     kc_s8_quant_wide());
    if (rows > mm)
        for (int p = 0; p < w->nb; p++)
            memset(q + p * qplane + (size_t)mm * g, 0, (size_t)(rows - mm) * g);
    int rc = s8_exec(w, b, prim, strm, rows, q, dtmp, spad);
    if (rc == KC_OK && w->nb == 1)
        kc_s8_epi_rows(dtmp, (size_t)n, y, (size_t)n, mm, n, w->scale, sx, zp, w->colsum, bias,
                     gelu);
    else if (rc == KC_OK)
        kc_s8_epi_rows_g(dtmp, (size_t)rows * n, w->nb, y, (size_t)n, mm, n, w->gscale, sx, zp,
                      w->csf, bias, gelu);
    return rc;
}

int kc_s8_dnnl_gemm(const float *x, int m, kc_s8_weight *w, const float *bias, bool gelu,
                    float *y)
{
    const int n = w->n, k = w->k, maxthr = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
    const int crows = kc_s8_chunk_rows(m, maxthr, w->max_rows, 16);
    const int nchunk = (m + crows - 1) / crows, last = m - (nchunk - 1) * crows;
    const int bfull = s8_bucket(crows), blast = s8_bucket(last);
    dnnl_primitive_t pfull = NULL, plast = NULL;
    int rc;
    if ((nchunk > 1 && (rc = s8_get_prim(w, bfull, &pfull)) != KC_OK) ||
        (rc = s8_get_prim(w, blast, &plast)) != KC_OK)
        return rc;

    /* per-thread scratch: a chunk's uint8 rows, scales and zero points, its
     * f32 output, the primitives' scratchpad */
    const int nthr = nchunk < maxthr ? nchunk : maxthr;
    size_t spneed = w->scratch[blast];
    if (nchunk > 1 && w->scratch[bfull] > spneed)
        spneed = w->scratch[bfull];
    const int cap = nchunk > 1 ? crows : s8_buckets[blast];
    const size_t qbytes = ((size_t)cap * w->nb * w->g + 63) & ~(size_t)63;
    const size_t sbytes = (sizeof(float) * (size_t)cap * w->nb + 63) & ~(size_t)63;
    const size_t dbytes = (sizeof(int32_t) * (size_t)cap * w->nb * n + 63) & ~(size_t)63;
    /* one smoothed activation row, when the weight smooths its input */
    const size_t xbytes = kc_s8_xbytes(w);
    const size_t per = qbytes + 2 * sbytes + dbytes + xbytes + ((spneed + 63) & ~(size_t)63);
    char *buf = kc_scratch(per * nthr);
    if (!buf)
        return KC_ENOMEM;
    int failed = KC_OK;
#pragma omp parallel num_threads(nthr) if (nthr > 1)
    {
        char *mine = buf + per * (size_t)omp_get_thread_num();
        dnnl_stream_t strm = NULL;
        if (dnnl_stream_create(&strm, w->eng, dnnl_stream_default_flags) != dnnl_success) {
            strm = NULL;
#pragma omp atomic write
            failed = KC_EDNNL;
        }
#pragma omp for schedule(static)
        for (int c = 0; c < nchunk; c++) {
            const int m0 = c * crows, mm = c == nchunk - 1 ? last : crows;
            const int b = c == nchunk - 1 ? blast : bfull;
            char *p_sx = mine + qbytes, *p_zp = p_sx + sbytes, *p_d = p_zp + sbytes;
            char *p_x = p_d + dbytes, *p_sp = p_x + xbytes;
            int r = strm ? s8_chunk(w, b, c == nchunk - 1 ? plast : pfull, strm,
                                    x + (size_t)m0 * k, mm, (uint8_t *)mine, (float *)p_sx,
                                    (int32_t *)p_zp, (int32_t *)p_d, xbytes ? (float *)p_x : NULL,
                                    p_sp, bias, gelu, y + (size_t)m0 * n)
                         : KC_EDNNL;
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
