/* qgemm_s8.c: the CPU INT8 GEMM (W8A8) of qgemm.h, per output channel
 * ("int8") or with one weight scale per group of K inputs ("int8g").
 *
 * Which kernel multiplies depends on the ISA level in force
 * (kernels/cpu/cpu_isa.h); every one is exact (its int32 sums are the true
 * sums of the codes' products), and ours give bitwise the same outputs:
 *
 *   avx512_core_amx   our AMX tile kernel (qgemm_amx.c)
 *   avx512_core_vnni  our 512-bit VNNI kernel (qgemm_dot.c)
 *   avx2_vnni         our 256-bit VNNI kernel
 *   avx512_core       our 512-bit kernel on 16-bit products
 *   avx2              our 256-bit kernel on sign-moved codes (vpmaddubsw),
 *                     the codes column block major and prefetched (avx2_signc:
 *                     bench/results/avx2-int16-2026-11-27.md)
 *
 * oneDNN's int8 matmul (qgemm_s8_dnnl.c), which this GEMM ran before, is
 * exact only where the CPU has VNNI: without it, it multiplies with
 * vpmaddubsw on our uint8 activations, whose 16-bit pair sums saturate
 * (255 x 127 x 2 > 32767), and results were off by up to 30% (relative)
 * on AVX2 CPUs. Where it is exact ours measured faster anyway, by far for
 * a few rows (it packs the in-place weight on every call), so it is kept
 * only for KC_S8_ONEDNN (tests compare it with ours) and builds without
 * our kernels (bench/results/int8-kernels-2026-11-26.md). Our kernels read
 * the codes packed once at creation (kc_amx_pack, the only copy kept); the
 * rows of a call are cut into chunks, and a call with few rows into column
 * parts, so that a lone sentence uses every thread.
 *
 * This file: the weight object, the choice of kernel, and the driver of
 * our kernels (chunks of rows and parts of columns over the threads);
 * oneDNN's form is in qgemm_s8_dnnl.c. */
#include "kernels/cpu/qgemm.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/qgemm_amx.h"
#include "kernels/cpu/qgemm_dot.h"
#include "kernels/cpu/qgemm_s8_internal.h"
#include "kernels/cpu/scratch.h"

#define KC_S8_SMALL_M 64 /* calls with at most this many rows split columns over threads */

/* The per-group sums of each channel's codes and the transposed group
 * scales. */
static int s8_group_tables(kc_s8_weight *w, const int8_t *codes)
{
    const int n = w->n, k = w->k, g = w->g, nb = w->nb;
    if (!(w->colsum = calloc((size_t)nb * n, sizeof(int32_t))))
        return KC_ENOMEM;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < k; i++)
            w->colsum[(size_t)(i / g) * n + j] += codes[(size_t)j * k + i];
    if (nb > 1) {
        if (!(w->gscale = malloc(sizeof(float) * (size_t)nb * n)) ||
            !(w->csf = malloc(sizeof(float) * (size_t)nb * n)))
            return KC_ENOMEM;
        for (int j = 0; j < n; j++)
            for (int b = 0; b < nb; b++)
                w->gscale[(size_t)b * n + j] = w->scale[(size_t)j * nb + b];
        for (size_t i = 0; i < (size_t)nb * n; i++)
            w->csf[i] = (float)w->colsum[i];
    }
    return KC_OK;
}

/* Frees the weight: what oneDNN's form made, our packed codes, the tables
 * (not the borrowed codes and scales); also the cleanup of a half-made
 * weight. */
void kc_s8_weight_destroy(kc_s8_weight *w)
{
    if (!w)
        return;
    kc_s8_dnnl_release(w);
    pthread_mutex_destroy(&w->mu);
    free(w->packed);
    free(w->gscale);
    free(w->csf);
    free(w->in_div);
    free(w->colsum);
    free(w);
}

static const char *const s8_kernel_names[KC_S8_KERNEL_COUNT] = {
    "auto",      "onednn",   "amx",       "avx512_vnni", "avx512_i16", "avx2_vnni",
    "avx2_i16",  "avx2_sign", "avx2_w16", "avx2_panel",  "avx2_signc", "neon_sdot",
    "neon_i16",
};

const char *kc_s8_kernel_name(kc_s8_kernel kernel)
{
    return (unsigned)kernel < KC_S8_KERNEL_COUNT ? s8_kernel_names[kernel] : "?";
}

/* The vector form of qgemm_dot.h a kernel of ours runs. */
static kc_dot_form s8_dot_form(kc_s8_kernel kernel)
{
    return kernel == KC_S8_VNNI512   ? KC_DOT_VNNI512
           : kernel == KC_S8_I16_512 ? KC_DOT_I16_512
           : kernel == KC_S8_VNNI256 ? KC_DOT_VNNI256
           : kernel == KC_S8_SIGN256 ? KC_DOT_SIGN256
           : kernel == KC_S8_W16_256 ? KC_DOT_W16_256
           : kernel == KC_S8_PANEL256 ? KC_DOT_PANEL256
           : kernel == KC_S8_SIGNC256 ? KC_DOT_SIGNC256
           : kernel == KC_S8_NEON_SDOT ? KC_DOT_NEON_SDOT
           : kernel == KC_S8_NEON_I16  ? KC_DOT_NEON_I16
                                       : KC_DOT_I16_256;
}

/* Whether kernels of ours run on this build (x86-64, aarch64). */
static bool s8_own_kernels(void)
{
    return kc_dot_available(KC_DOT_I16_256) || kc_dot_available(KC_DOT_NEON_I16);
}

bool kc_s8_kernel_available(kc_s8_kernel kernel)
{
    const kc_isa *isa = kc_isa_get();
    switch (kernel) {
    case KC_S8_AUTO:
        return true;
    case KC_S8_ONEDNN: /* exact only with VNNI on x86 (see the top of this file) */
        return !s8_own_kernels() || isa->vnni256 || isa->vnni512 || isa->level >= KC_ISA_ASIMD;
    case KC_S8_AMX:
        return kc_amx_available();
    case KC_S8_VNNI512:
    case KC_S8_I16_512:
    case KC_S8_VNNI256:
    case KC_S8_I16_256:
    case KC_S8_SIGN256:
    case KC_S8_W16_256:
    case KC_S8_PANEL256:
    case KC_S8_SIGNC256:
    case KC_S8_NEON_SDOT:
    case KC_S8_NEON_I16:
        return kc_dot_available(s8_dot_form(kernel));
    default:
        return false;
    }
}

/* kc_s8_force's kernel (engine/options.c: MANTISSA_INT8_KERNEL=NAME), which
 * KC_S8_AUTO takes, for tests and benchmarks; "onednn" is taken even where
 * it is not exact (no VNNI), which is how tests/integration shows the load
 * check refusing a wrong kernel. KC_S8_AUTO: none. */
static _Atomic int s8_forced_kernel = KC_S8_AUTO;

void kc_s8_force(kc_s8_kernel kernel)
{
    s8_forced_kernel = (unsigned)kernel < KC_S8_KERNEL_COUNT ? (int)kernel : KC_S8_AUTO;
}

kc_s8_kernel kc_s8_forced(void)
{
    return (kc_s8_kernel)s8_forced_kernel;
}

/* The kernel KC_S8_AUTO takes: ours, the first the ISA level has in the
 * order of bench/results/int8-kernels-2026-11-26.md's measurements (at
 * AVX2, avx2-int16-2026-11-27.md's); oneDNN's matmul only on a build
 * without ours. */
static kc_s8_kernel s8_auto(void)
{
    const kc_s8_kernel forced = kc_s8_forced();
    if (forced != KC_S8_AUTO)
        return forced;
    static const kc_s8_kernel order[] = {KC_S8_AMX,       KC_S8_VNNI512,  KC_S8_VNNI256,
                                         KC_S8_I16_512,   KC_S8_SIGNC256, KC_S8_SIGN256,
                                         KC_S8_I16_256,   KC_S8_NEON_SDOT, KC_S8_NEON_I16};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (kc_s8_kernel_available(order[i]))
            return order[i];
    return KC_S8_ONEDNN;
}

/* A weight for our kernels: its codes packed once (the only copy the GEMM
 * reads), groups of gp = g rounded up to 64 codes, then laid out again
 * (column tile major, widened to 16 bits for avx2_w16) for the forms that
 * read them so (kc_dot_relayout); no oneDNN primitives. */
static int s8_prepare_packed(kc_s8_weight *w, const int8_t *codes)
{
    w->gp = (w->g + KC_AMX_KSTEP - 1) / KC_AMX_KSTEP * KC_AMX_KSTEP;
    if (!(w->packed = kc_amx_pack(codes, w->n, w->k, w->g, &w->wbytes)))
        return KC_ENOMEM;
    if (w->kernel != KC_S8_AMX && kc_dot_relayout_needed(s8_dot_form(w->kernel))) {
        int8_t *copy =
            kc_dot_relayout(s8_dot_form(w->kernel), w->packed, w->n, w->nb, w->gp, &w->wbytes);
        if (!copy)
            return KC_ENOMEM;
        free(w->packed);
        w->packed = copy;
    }
    w->max_rows = KC_S8_CHUNK;
    snprintf(w->impl, sizeof w->impl, "%s:%s", kc_s8_kernel_name(w->kernel),
             w->nb > 1 ? "int8g" : "int8");
    return KC_OK;
}

/* The weight's tables, then its kernel's preparation: packed codes for
 * ours, primitives (and a padded or reordered copy) for oneDNN's. */
static int s8_prepare_kernel(kc_s8_weight *w, const int8_t *codes, bool reorder)
{
    int rc = s8_group_tables(w, codes);
    if (rc != KC_OK)
        return rc;
    if (w->kernel != KC_S8_ONEDNN)
        return s8_prepare_packed(w, codes);
    return kc_s8_dnnl_prepare(w, codes, reorder);
}

static int s8_create(const int8_t *codes, const float *scale, int n, int k, int g,
                     kc_s8_kernel kernel, bool reorder, kc_s8_weight **out)
{
    if (!out)
        return KC_EINVAL;
    *out = NULL;
    /* k bounded so that 255 * 127 * k, the largest int32 sum, fits; a
     * group's sums must also be exact in float (see epi_rows_s32g) */
    if (n <= 0 || k <= 0 || k > KC_S8_MAX_K || !codes || !scale || g <= 0 ||
        (g < k && (g < KC_S8G_MIN_GROUP || g > KC_S8G_MAX_GROUP)) ||
        (unsigned)kernel >= KC_S8_KERNEL_COUNT)
        return KC_EINVAL;
    kc_s8_weight *w = calloc(1, sizeof *w);
    if (!w)
        return KC_ENOMEM;
    w->n = n;
    w->k = k;
    w->g = g < k ? g : k;
    w->nb = (k + w->g - 1) / w->g;
    const bool forced = kernel == KC_S8_AUTO && kc_s8_forced() == KC_S8_ONEDNN;
    if (kernel == KC_S8_AUTO)
        kernel = s8_auto();
    if (!forced && !kc_s8_kernel_available(kernel)) {
        free(w);
        return KC_ENOKERNEL;
    }
    w->kernel = kernel;
    w->max_rows = kc_s8_dnnl_max_rows(w->nb, n);
    w->codes = codes;
    w->scale = scale;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w);
        return KC_ENOMEM;
    }
    int rc = s8_prepare_kernel(w, codes, reorder);
    if (rc != KC_OK) {
        kc_s8_weight_destroy(w);
        return rc;
    }
    if (w->wbuf || w->packed) { /* the padded copy was only the reorder's source */
        free(w->padded);
        w->padded = NULL;
        w->codes = NULL; /* what the caller may now free (qgemm.h) is never read again */
        if (w->nb > 1)
            w->scale = NULL;
    }
    *out = w;
    return KC_OK;
}

int kc_s8_weight_create(const int8_t *codes, const float *scale, int n, int k, bool reorder,
                        kc_s8_weight **out)
{
    return s8_create(codes, scale, n, k, k, KC_S8_AUTO, reorder, out);
}

int kc_s8_weight_create_grouped(const int8_t *codes, const float *scale, int n, int k, int group,
                                kc_s8_weight **out)
{
    return s8_create(codes, scale, n, k, group, KC_S8_AUTO, false, out);
}

int kc_s8_weight_create_with(const int8_t *codes, const float *scale, int n, int k, int group,
                             kc_s8_kernel kernel, kc_s8_weight **out)
{
    return s8_create(codes, scale, n, k, group, kernel, false, out);
}

kc_s8_kernel kc_s8_weight_kernel(const kc_s8_weight *w)
{
    return w ? w->kernel : KC_S8_AUTO;
}

kc_s8_kernel kc_s8_kernel_auto(void)
{
    return s8_auto();
}

/* For the backend's honest ->bytes: what this object adds to the borrowed
 * codes and scales (a reordered copy, when it made one). */
int kc_s8_weight_set_smooth(kc_s8_weight *w, const float *in_div)
{
    if (!w || !in_div)
        return KC_EINVAL;
    float *d = malloc(sizeof(float) * (size_t)w->k);
    if (!d)
        return KC_ENOMEM;
    memcpy(d, in_div, sizeof(float) * (size_t)w->k);
    free(w->in_div);
    w->in_div = d;
    return KC_OK;
}

size_t kc_s8_weight_bytes(const kc_s8_weight *w)
{
    return w ? w->wbytes : 0;
}

/* Which kernel oneDNN chose, for logs and the benchmark. */
const char *kc_s8_weight_impl(const kc_s8_weight *w)
{
    return w ? w->impl : "";
}

/* How a call of m rows on our kernels is cut: chunks of rows (a multiple
 * of the kernel's row block) and, for few rows, parts of the columns
 * (whole 64-column blocks), so that every thread has work: a lone
 * sentence is one chunk of ~10 rows, which one thread would do alone. */
typedef struct {
    int align, crows, nchunk, nparts, n64;
} s8_plan;

static s8_plan s8_plan_call(const kc_s8_weight *w, int m, int maxthr)
{
    s8_plan p;
    p.align = w->kernel == KC_S8_AMX ? 16 : 4;
    p.n64 = (w->n + 63) / 64;
    p.nparts = m <= KC_S8_SMALL_M ? (maxthr < p.n64 ? maxthr : p.n64) : 1;
    const int tchunks = (maxthr + p.nparts - 1) / p.nparts;
    p.crows = kc_s8_chunk_rows(m, tchunks, w->max_rows, p.align);
    p.nchunk = (m + p.crows - 1) / p.crows;
    return p;
}

/* One work item on our kernels: quantize mm rows of x into plain rows of
 * q (groups of gp codes, the tail of each zero; rows up to the row block
 * zero), lay them out for the form, then columns [c0, c1) into y. */
static void s8_chunk_packed(const kc_s8_weight *w, const s8_plan *p, const float *x, int mm,
                            char *mine, int c0, int c1, const float *bias, bool gelu, float *y)
{
    const size_t kp = (size_t)w->nb * w->gp;
    const size_t rows = (size_t)(p->crows + p->align - 1) / p->align * p->align;
    const size_t qbytes = (rows * kp + 63) & ~(size_t)63;
    const size_t sbytes = (sizeof(float) * (size_t)p->crows * w->nb + 63) & ~(size_t)63;
    uint8_t *q = (uint8_t *)mine;
    float *sx = (float *)(mine + qbytes), *xtmp = (float *)(mine + qbytes + 2 * sbytes);
    int32_t *zp = (int32_t *)(mine + qbytes + sbytes);
    const int mr = (mm + p->align - 1) / p->align * p->align;
    kc_s8_quant_rows(x, mm, w->k, w->g, (size_t)w->gp, kp, w->gp, q, sx, zp, w->in_div, xtmp,
                     kc_s8_quant_wide());
    memset(q + (size_t)mm * kp, 0, (size_t)(mr - mm) * kp);
    const kc_dot_weight dw = {w->packed, w->n,   w->nb, w->gp, w->nb > 1 ? w->gscale : w->scale,
                              w->csf,    w->colsum, bias, gelu};
    kc_dot_rows a = {q, mm, sx, zp, NULL};
    if (w->kernel == KC_S8_AMX) {
        kc_amx_chunk(&a, &dw, c0, c1, y, (size_t)w->n);
        return;
    }
    const kc_dot_form form = s8_dot_form(w->kernel);
    char *q2 = mine + qbytes + 2 * sbytes + kc_s8_xbytes(w); /* see s8_gemm_packed */
    if (kc_dot_code_bytes(form) > 1) { /* after the smoothing row */
        kc_dot_prepare(form, q, mr, kp, (uint8_t *)q2);
        a.q = (const uint8_t *)q2;
    }
    if (kc_dot_panel_bytes(form, kp) > 0) /* after the form's rows */
        a.panel = (int8_t *)(q2 + (size_t)kc_dot_code_bytes(form) * qbytes);
    kc_dot_chunk(form, &a, &dw, c0, c1, y, (size_t)w->n);
}

/* kc_gemm_s8 on our kernels: work items (row chunk, column part) over the
 * threads, each with its own scratch; no oneDNN. */
static int s8_gemm_packed(const float *x, int m, kc_s8_weight *w, const float *bias, bool gelu,
                          float *y)
{
    const int maxthr = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
    const s8_plan p = s8_plan_call(w, m, maxthr);
    const int items = p.nchunk * p.nparts, nthr = items < maxthr ? items : maxthr;
    const size_t kp = (size_t)w->nb * w->gp;
    const size_t rows = (size_t)(p.crows + p.align - 1) / p.align * p.align;
    const size_t qbytes = (rows * kp + 63) & ~(size_t)63;
    const size_t sbytes = (sizeof(float) * (size_t)p.crows * w->nb + 63) & ~(size_t)63;
    const bool amx = w->kernel == KC_S8_AMX;
    const int cb = amx ? 1 : kc_dot_code_bytes(s8_dot_form(w->kernel));
    const size_t per = qbytes + 2 * sbytes + kc_s8_xbytes(w) + (cb > 1 ? (size_t)cb * qbytes : 0) +
                       (amx ? 0 : kc_dot_panel_bytes(s8_dot_form(w->kernel), kp));
    char *buf = kc_scratch(per * nthr);
    if (!buf)
        return KC_ENOMEM;
#pragma omp parallel num_threads(nthr) if (nthr > 1)
    {
        char *mine = buf + per * (size_t)omp_get_thread_num();
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) {
            const int c = it / p.nparts, part = it % p.nparts;
            const int m0 = c * p.crows, mm = m - m0 < p.crows ? m - m0 : p.crows;
            const int b0 = part * p.n64 / p.nparts, b1 = (part + 1) * p.n64 / p.nparts;
            const int c0 = 64 * b0, c1 = 64 * b1 < w->n ? 64 * b1 : w->n;
            if (c0 < c1)
                s8_chunk_packed(w, &p, x + (size_t)m0 * w->k, mm, mine, c0, c1, bias, gelu,
                                y + (size_t)m0 * w->n);
        }
    }
    return KC_OK;
}

int kc_gemm_s8(const float *x, int m, kc_s8_weight *w, const float *bias, bool gelu, float *y)
{
    if (!w || m < 0 || (m > 0 && (!x || !y)))
        return KC_EINVAL;
    if (m == 0)
        return KC_OK;
    return w->packed ? s8_gemm_packed(x, m, w, bias, gelu, y)
                     : kc_s8_dnnl_gemm(x, m, w, bias, gelu, y);
}
