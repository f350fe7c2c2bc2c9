/* encoder_stream.c: FP32's forward of a model folder with its weights
 * streamed a layer at a time, for what needs FP32's numbers without a
 * whole FP32 model resident: the load check's reference vectors of the
 * probe texts (engine/model.h's mt_model_reference_probes) and int8's
 * smoothing calibration (enc_calibrate, which records the GEMM inputs'
 * maxima as it runs). The texts are tokenized first and their hidden
 * states stay in the backend between layers (encoder_forward.c's
 * enc_pass, one per batch); layer l's weights are read from the mapped
 * file (F16/BF16 tensors converted to FP32 one at a time) and placed in
 * FP32 as a whole FP32 model places them, every batch runs layer l, and
 * the layer is freed before the next is read. Of the word embeddings only
 * the rows of the token ids the texts use are read (a Qwen3 table is
 * 594 MiB in FP32). The ops and their order are those of a whole FP32
 * model's forward of the same batches, so the results are the same bits
 * wherever the backend's kernels are deterministic (the CPU backend's
 * are: tests/unit/test_stream_ref.c).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/calib_text.h"
#include "engine/text/probe_text.h"
#include "models/enc_tokenizer.h"
#include "models/encoder_internal.h"

/* Texts in batches on their way through a folder's FP32 layers. */
typedef struct {
    enc_model *m;   /* the model without its layers (and word table: rows only) */
    st_file *f;
    int nb;         /* batches */
    enc_pass *pass; /* nb: each batch's forward, its hidden states between layers */
    int32_t *ids;   /* every batch's token ids, back to back (ntok) */
    int32_t *dev;   /* the same as indices into rows */
    int32_t *off;   /* each batch's nseq + 1 offsets, from 0, back to back */
    int32_t *rows;  /* the distinct ids, ascending: the word-table rows read */
    int ntok, nrows;
} stream;

/* The model of dir as a whole FP32 model is made (configuration, the
 * token cap, the ops its row needs, the tokenizer), without weights; a
 * slot for each layer, empty. */
static mt_status stream_open(stream *s, const char *dir, const enc_arch *a, mt_backend *be,
                             int max_seq_len, mt_err *err)
{
    enc_model *m = s->m = calloc(1, sizeof *m);
    if (!m)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    m->arch = a;
    m->be = be;
    m->prec = MT_PREC_FP32;
    mt_status st;
    if ((st = enc_read_configs(dir, a, &m->cfg, err)) != MT_OK)
        return st;
    if (max_seq_len > 0 && max_seq_len < m->cfg.max_seq_len)
        m->cfg.max_seq_len = max_seq_len;
    if ((st = enc_prepare_ops(m, err)) != MT_OK || (st = enc_setup_mix(m, NULL, err)) != MT_OK ||
        (st = enc_tokenizer_load(dir, a->cls_token, a->sep_token, a->pad_token, a->unk_token,
                                 m->cfg.vocab, &m->tok, err)) != MT_OK)
        return st;
    if (!(m->layer = calloc((size_t)m->cfg.layers, sizeof *m->layer)))
        return mt_fail(err, MT_ENOMEM, "out of memory");
    return MT_OK;
}

/* The n texts tokenized as mt_model_embed_texts does (truncated at the
 * model's max_seq_len), in batches of per texts, each batch's pass set up
 * to run every layer. */
static mt_status stream_tokenize(stream *s, const char *const *texts, int n, int per,
                                 mt_err *err)
{
    enc_model *m = s->m;
    const int maxlen = m->cfg.max_seq_len;
    if (n < 0 || per < 1 || (n > 0 && (size_t)n > (size_t)INT_MAX / (size_t)maxlen))
        return mt_fail(err, MT_ELIMIT, "too many texts (%d)", n);
    s->nb = (n + per - 1) / per;
    s->ids = malloc(sizeof(int32_t) * ((size_t)n * maxlen + 1));
    s->off = malloc(sizeof(int32_t) * ((size_t)n + s->nb + 1));
    s->pass = calloc((size_t)s->nb + 1, sizeof *s->pass);
    if (!s->ids || !s->off || !s->pass)
        return mt_fail(err, MT_ENOMEM, "out of memory tokenizing %d texts", n);
    int at = 0;
    for (int b = 0; b < s->nb; b++) {
        const int first = b * per, nseq = n - first < per ? n - first : per;
        int32_t *off = s->off + first + b;
        off[0] = 0;
        for (int i = 0; i < nseq; i++) {
            const char *text = texts[first + i];
            int got = 0;
            mt_status st = enc_tok_encode(m->tok, text, strlen(text), s->ids + at + off[i],
                                          maxlen, &got, NULL, err);
            if (st == MT_OK && got < 1)
                st = mt_fail(err, MT_EINVAL, "no tokens");
            if (st != MT_OK)
                return mt_prefix(err, st, "input[%d]: ", first + i);
            off[i + 1] = off[i] + got;
        }
        s->pass[b] = (enc_pass){.ids = s->ids + at, .offsets = off, .nseq = nseq,
                                .nlayers = m->cfg.layers};
        at += off[nseq];
    }
    s->ntok = at;
    return MT_OK;
}

static int cmp_id(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The distinct ids the texts use (the only word-table rows read), and
 * each token's index among them, which the passes' embed op reads. */
static mt_status stream_rows(stream *s, mt_err *err)
{
    const size_t n = (size_t)s->ntok;
    s->rows = malloc(sizeof(int32_t) * (n + 1));
    s->dev = malloc(sizeof(int32_t) * (n + 1));
    if (!s->rows || !s->dev)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    memcpy(s->rows, s->ids, sizeof(int32_t) * n);
    qsort(s->rows, n, sizeof(int32_t), cmp_id);
    int k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || s->rows[i] != s->rows[k - 1])
            s->rows[k++] = s->rows[i];
    s->nrows = k;
    for (size_t i = 0; i < n; i++) {
        const int32_t *at = bsearch(&s->ids[i], s->rows, (size_t)k, sizeof(int32_t), cmp_id);
        s->dev[i] = (int32_t)(at - s->rows);
    }
    for (int b = 0; b < s->nb; b++)
        s->pass[b].dev_ids = s->dev + (s->pass[b].ids - s->ids);
    return MT_OK;
}

/* What was read is in the backend: the file's pages leave the process's
 * resident set and the FP32 copies of its 16-bit tensors are freed. */
static void pages_done(stream *s)
{
    st_drop_pages(s->f);
    enc_conv_release(s->m);
}

/* The forward: the embeddings of every batch, then each layer loaded, run
 * over every batch and freed; out (may be NULL: calibration records only)
 * gets each batch's pooled vectors, per texts a batch. */
static mt_status stream_run(stream *s, const char *dir, int per, float *out, mt_err *err)
{
    enc_model *m = s->m;
    char path[4096];
    st_model_path(dir, path, sizeof path);
    mt_status st = st_open(path, &s->f, err);
    if (st != MT_OK || (st = enc_load_embeddings(m, s->f, s->rows, s->nrows, err)) != MT_OK)
        return st;
    pages_done(s);
    for (int b = 0; b < s->nb && st == MT_OK; b++)
        st = enc_pass_begin(m, &s->pass[b], err);
    for (int l = 0; l < m->cfg.layers && st == MT_OK; l++) {
        st = enc_load_layer(m, s->f, l, err);
        pages_done(s);
        for (int b = 0; b < s->nb && st == MT_OK; b++)
            st = enc_pass_layer(m, &s->pass[b], l, err);
        enc_layer_free(m->be, &m->layer[l]);
    }
    for (int b = 0; out && b < s->nb && st == MT_OK; b++)
        st = enc_pass_end(m, &s->pass[b], true, out + (size_t)b * per * m->cfg.hidden, NULL,
                          err);
    return st;
}

static void stream_close(stream *s)
{
    for (int b = 0; s->m && s->pass && b < s->nb; b++)
        enc_pass_free(s->m, &s->pass[b]);
    free(s->pass);
    free(s->ids);
    free(s->dev);
    free(s->off);
    free(s->rows);
    st_close(s->f);
    enc_model_free(s->m);
}

/* dir's FP32 vectors of the probe texts (one batch of them all, as
 * mt_model_embed_probes embeds them) into a new NaN-filled *out. */
mt_status enc_reference_probes(const char *dir, const enc_arch *a, mt_backend *be,
                               int max_seq_len, float **out, int *hidden, mt_err *err)
{
    stream s = {0};
    const int n = mt_probe_texts_n;
    float *vec = NULL;
    mt_status st = stream_open(&s, dir, a, be, max_seq_len, err);
    const size_t len = st == MT_OK ? (size_t)n * s.m->cfg.hidden : 0;
    if (st == MT_OK && !(vec = malloc(sizeof(float) * (len ? len : 1))))
        st = mt_fail(err, MT_ENOMEM, "out of memory");
    for (size_t i = 0; vec && i < len; i++)
        vec[i] = NAN;
    if (st == MT_OK && (st = stream_tokenize(&s, mt_probe_texts, n, n, err)) == MT_OK &&
        (st = stream_rows(&s, err)) == MT_OK)
        st = stream_run(&s, dir, n, vec, err);
    if (st == MT_OK) {
        *out = vec;
        *hidden = s.m->cfg.hidden;
    } else {
        free(vec);
    }
    stream_close(&s);
    return st;
}

mt_status enc_calibrate(const char *dir, const enc_arch *a, mt_backend *be, int max_seq_len,
                        float **out, mt_err *err)
{
    enum { PER = 16 }; /* sentences a batch, as the whole model's calibration ran them */
    stream s = {0};
    mt_status st = stream_open(&s, dir, a, be, max_seq_len, err);
    if (st == MT_OK) {
        const enc_config *c = &s.m->cfg;
        s.m->act_max = calloc((size_t)c->layers * GEMMS_PER_LAYER * enc_max_k(c), sizeof(float));
        if (!s.m->act_max)
            st = mt_fail(err, MT_ENOMEM, "out of memory while calibrating");
    }
    if (st == MT_OK &&
        (st = stream_tokenize(&s, mt_calib_sentences, mt_calib_sentences_n, PER, err)) == MT_OK &&
        (st = stream_rows(&s, err)) == MT_OK)
        st = stream_run(&s, dir, PER, NULL, err);
    if (st == MT_OK) {
        *out = s.m->act_max;
        s.m->act_max = NULL;
    }
    stream_close(&s);
    return st != MT_OK ? mt_prefix(err, st, "calibration: ") : MT_OK;
}
