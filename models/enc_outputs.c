/* enc_outputs.c: token heads beside an embedder's pooled vector, as bge-m3
 * has them: a sparse (lexical) weight per token, the ReLU of
 * sparse_linear (hidden -> 1) on its last hidden state, and a ColBERT
 * vector per token, colbert_linear (hidden -> colbert_dim) of the same,
 * L2-normalised. bge-m3's folder keeps them beside the model as
 * sparse_linear.pt and colbert_linear.pt (torch.save of a Linear's
 * state_dict: "weight", "bias"; FP16); a .safetensors of the same name is
 * read first where there is one. Either file alone gives its head.
 *
 * The heads run on the host in FP32 whatever the model's precision (bge-m3:
 * 1 + 1024 rows of 1024, 4 MiB), on the hidden states of one forward, from
 * which the pooled vector is made too, with the arithmetic the pooled
 * forward uses (encoder_forward.c), so the dense vector of
 * mt_model_forward_outputs is the one mt_model_forward gives on the CPU. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/qgemm.h"
#include "models/encoder_internal.h"

struct enc_outputs {
    int h, cdim;
    float *sparse_w, sparse_b; /* (h), or NULL: no sparse head */
    kc_f32_weight *colbert;    /* (cdim, h), or NULL: no ColBERT head */
    float *colbert_b;          /* (cdim) */
};

/* dir/name.safetensors, else dir/name.pt, into path; false when neither is
 * there. */
static bool head_file(const char *dir, const char *name, char *path, size_t cap)
{
    static const char *const ext[] = {".safetensors", ".pt"};
    struct stat sb;
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        snprintf(path, cap, "%s/%s%s", dir, name, ext[i]);
        if (stat(path, &sb) == 0)
            return true;
    }
    return false;
}

/* One head's file: its "weight" (rows, h) and "bias" (rows) as FP32 host
 * copies (enc_host_linear: *rows 0, as many rows as the file's weight
 * has), every weight finite. */
static mt_status read_linear(enc_model *m, const char *path, int *rows, float **w, float **b,
                             mt_err *err)
{
    st_file *f = NULL;
    mt_status st = st_open(path, &f, err);
    if (st != MT_OK)
        return st;
    st = enc_host_linear(m, f, NULL, rows, w, b, err);
    const size_t n = st == MT_OK ? (size_t)*rows * (size_t)m->cfg.hidden : 0;
    for (size_t i = 0; i < n && st == MT_OK; i++)
        if (!isfinite((*w)[i]))
            st = mt_fail(err, MT_EFORMAT, "%s: tensor 'weight' has a non-finite value at "
                         "index %zu", path, i);
    enc_conv_release(m);
    st_close(f);
    return st;
}

mt_status enc_load_outputs(enc_model *m, const char *dir, mt_err *err)
{
    char sp[4096], cp[4096];
    const bool has_sparse = head_file(dir, "sparse_linear", sp, sizeof sp);
    const bool has_colbert = head_file(dir, "colbert_linear", cp, sizeof cp);
    if (m->cfg.classify || (!has_sparse && !has_colbert))
        return MT_OK;
    enc_outputs *o = calloc(1, sizeof *o);
    if (!o)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    m->outputs = o;
    o->h = m->cfg.hidden;
    mt_status st = MT_OK;
    if (has_sparse) {
        int one = 1;
        float *b = NULL;
        st = read_linear(m, sp, &one, &o->sparse_w, &b, err);
        o->sparse_b = b ? b[0] : 0.f;
        free(b);
        m->other_bytes += sizeof(float) * ((size_t)o->h + 1);
    }
    if (st == MT_OK && has_colbert) {
        float *w = NULL;
        if ((st = read_linear(m, cp, &o->cdim, &w, &o->colbert_b, err)) == MT_OK &&
            kc_f32_weight_create(w, o->cdim, o->h, omp_get_max_threads(), &o->colbert) != 0)
            st = mt_fail(err, MT_ENOMEM, "%s: could not lay out its %d x %d weight", cp, o->cdim,
                         o->h);
        free(w);
        if (st == MT_OK)
            m->other_bytes += kc_f32_weight_bytes(o->colbert) + sizeof(float) * (size_t)o->cdim;
    }
    return st;
}

void enc_outputs_free(enc_outputs *o)
{
    if (!o)
        return;
    free(o->sparse_w);
    kc_f32_weight_destroy(o->colbert);
    free(o->colbert_b);
    free(o);
}

bool enc_outputs_sparse(const enc_outputs *o) { return o && o->sparse_w; }
int enc_outputs_colbert_dim(const enc_outputs *o) { return o && o->colbert ? o->cdim : 0; }

/* Each sequence's pooled vector from the hidden states x (t, h), as the
 * pooled forward makes it: its first or last row, or its mean
 * (kc_mean_pool, the CPU op's arithmetic), then the norms and the
 * model's normalisation (enc_normalize_rows). */
static void pool_rows(const enc_model *m, const float *x, const int32_t *offsets, int nseq,
                      float *pooled, float *norms)
{
    const int h = m->cfg.hidden;
    if (m->cfg.pool == MT_POOL_MEAN)
        kc_mean_pool(x, offsets, nseq, h, false, pooled);
    else
        for (int s = 0; s < nseq; s++) {
            const int row = m->cfg.pool == MT_POOL_LAST ? offsets[s + 1] - 1 : offsets[s];
            memcpy(pooled + (size_t)s * h, x + (size_t)row * h, sizeof(float) * h);
        }
    enc_normalize_rows(pooled, nseq, h, m->cfg.normalize, norms);
}

/* The sparse weights into column 0 of out's rows (width w): ReLU(w . x + b)
 * per token, 0 for the tokenizer's special tokens (bge-m3 drops its CLS,
 * EOS, PAD and UNK from the lexical weights). */
static void sparse_weights(const enc_model *m, const float *x, const int32_t *ids, int t,
                           float *out, size_t w)
{
    const enc_outputs *o = m->outputs;
    const int h = o->h;
#pragma omp parallel for schedule(static) if (t >= 64)
    for (int i = 0; i < t; i++) {
        bool special = false;
        enc_tok_token(m->tok, ids[i], &special);
        const float v = o->sparse_b + enc_dot8(o->sparse_w, x + (size_t)i * h, h);
        out[(size_t)i * w] = special || !(v > 0.f) ? 0.f : v;
    }
}

/* The ColBERT vectors of every token but each sequence's first into
 * columns 1.. of out's rows (width w): colbert_linear of its hidden state,
 * divided by its L2 norm (torch's F.normalize, eps 1e-12). */
static mt_status colbert_vectors(const enc_model *m, const float *x, const int32_t *offsets,
                                 int nseq, float *out, size_t w, mt_err *err)
{
    const enc_outputs *o = m->outputs;
    const int t = offsets[nseq], cd = o->cdim;
    float *y = malloc(sizeof(float) * (size_t)t * cd);
    if (!y)
        return mt_fail(err, MT_ENOMEM, "out of memory for %d ColBERT vectors", t);
    if (kc_gemm_f32(x, t, o->colbert, o->colbert_b, false, y) != 0) {
        free(y);
        return mt_fail(err, MT_EINTERNAL, "the ColBERT head's GEMM failed");
    }
    for (int s = 0; s < nseq; s++)
        for (int i = offsets[s] + 1; i < offsets[s + 1]; i++) {
            const float *r = y + (size_t)i * cd;
            float n2 = 0.f;
            for (int c = 0; c < cd; c++)
                n2 += r[c] * r[c];
            const float nrm = sqrtf(n2), k = 1.0f / (nrm > 1e-12f ? nrm : 1e-12f);
            float *dst = out + (size_t)i * w + 1;
            for (int c = 0; c < cd; c++)
                dst[c] = r[c] * k;
        }
    free(y);
    return MT_OK;
}

mt_status enc_outputs_forward(enc_model *m, const int32_t *ids, const int32_t *offsets,
                              int nseq, float *out, float *norms, mt_err *err)
{
    if (!m->outputs)
        return mt_fail(err, MT_EUNSUPPORTED, "this model (%s) has no sparse or ColBERT head",
                       m->arch->model_type);
    if (nseq <= 0)
        return MT_OK;
    const int h = m->cfg.hidden, t = offsets[nseq];
    const size_t w = (size_t)mt_outputs_width(&m->base.info);
    float *x = malloc(sizeof(float) * (size_t)(t > 0 ? t : 1) * h);
    float *pooled = malloc(sizeof(float) * (size_t)nseq * h);
    mt_status st = x && pooled ? MT_OK : mt_fail(err, MT_ENOMEM, "out of memory");
    if (st == MT_OK)
        st = enc_run(m, ids, offsets, NULL, nseq, m->cfg.layers, false, x, NULL, err);
    if (st == MT_OK) {
        memset(out, 0, sizeof(float) * (size_t)t * w);
        pool_rows(m, x, offsets, nseq, pooled, norms);
        for (int s = 0; s < nseq; s++)
            memcpy(out + (size_t)offsets[s] * w + 1, pooled + (size_t)s * h, sizeof(float) * h);
        if (m->outputs->sparse_w)
            sparse_weights(m, x, ids, t, out, w);
        if (m->outputs->colbert)
            st = colbert_vectors(m, x, offsets, nseq, out, w, err);
    }
    free(x);
    free(pooled);
    return st;
}
