/* test_xlmr.c: the "xlm-roberta" architecture row (models/xlm_roberta.c)
 * with its SentencePiece Unigram tokenizer, on folders made at test time
 * (tools/make-unigram-tokenizer.py trains the tokenizer, tools/make-xlmr.py
 * draws small weights at XLM-R's layout from a seed; nothing is
 * committed):
 *   - the embedder (CLS pooling, Normalize: bge-m3's dense output) gives the
 *     tools' numpy float64 vectors on texts in eight scripts, with ids equal
 *     to Hugging Face `tokenizers`', batched and one at a time;
 *   - the reranker (XLMRobertaForSequenceClassification) reads a pair as
 *     <s> a </s></s> b </s> with one token type and gives the reference
 *     logits;
 *   - RoBERTa's positions start after pad_token_id: a config without it is
 *     refused naming the field;
 *   - bge-m3's three outputs from one forward (models/enc_outputs.c,
 *     engine/model.h's forward_outputs) on the embedder with bge-m3's heads
 *     beside it as bge-m3 ships them (OUT/m3: sparse_linear.pt and
 *     colbert_linear.pt, torch.save files in FP16 from
 *     tests/fixtures/bge-m3-heads, written by real torch with
 *     tools/make-m3-heads.py): the dense vector is mt_model_forward's
 *     (bitwise), the lexical weights ({token id: the largest
 *     ReLU(sparse_linear) of its tokens}, special tokens left out) and the
 *     ColBERT vectors (every token but the first, normalised) the numpy
 *     float64 reference's, every element written (the buffer poisoned
 *     first), batched and alone the same; the heads stay FP32 under int8
 *     and bf16 and keep close; one head gives that one, none none; a head
 *     of the wrong width is refused naming the file and tensor.
 * (make-xlmr.py --transformers checked that numpy forward against
 * transformers' XLMRobertaModel and ...ForSequenceClassification: 1e-14;
 * --flagembedding bge-m3's outputs against FlagEmbedding's BGEM3FlagModel
 * on the same folder: 2.5e-6, FlagEmbedding running in float32.) */
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/model.h"
#include "engine/weights/safetensors.h"
#include "tests/unit/tu_files.h"
#include "tests/unit/tu_model.h"

#define MAXTOK 64

static char work[64], embed_dir[128], rerank_dir[128], m3_dir[128];
static mt_backend *be;
static cJSON *ref;

static void make_folders(void)
{
    tu_mkwork(work, sizeof work, "mt-xlmr");
    snprintf(embed_dir, sizeof embed_dir, "%s/m/embed", work);
    snprintf(rerank_dir, sizeof rerank_dir, "%s/m/rerank", work);
    snprintf(m3_dir, sizeof m3_dir, "%s/m/m3", work);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s tools/make-unigram-tokenizer.py %s/tok > /dev/null && "
             "%s tools/make-xlmr.py %s/tok/tokenizer.json %s/m",
             tu_python(), work, tu_python(), work, work);
    ck_assert_msg(system(cmd) == 0, "making the folders failed: %s", cmd);
    char path[200];
    snprintf(path, sizeof path, "%s/m/reference.json", work);
    ref = tu_load_json(path);
}

static void remove_folders(void)
{
    tu_rmwork(work);
    cJSON_Delete(ref);
}

static void setup(void) { be = tu_cpu_backend(); }

static void teardown(void) { mt_backend_destroy(be); }

static mt_model *load(const char *dir) { return tu_load_model(dir, be, MT_PREC_FP32); }

/* ids (n of them) against the JSON list want */
static void same_ids(const int32_t *ids, int n, const cJSON *want, const char *what, int i)
{
    ck_assert_msg(n == cJSON_GetArraySize(want), "%s %d: %d ids, want %d", what, i, n,
                  cJSON_GetArraySize(want));
    for (int k = 0; k < n; k++)
        ck_assert_msg(ids[k] == cJSON_GetArrayItem(want, k)->valueint, "%s %d: id %d is %d, want %d",
                      what, i, k, ids[k], cJSON_GetArrayItem(want, k)->valueint);
}

START_TEST(xlmr_embedder_matches_the_reference_in_every_script)
{
    mt_model *m = load(embed_dir);
    const mt_model_info *in = mt_model_get_info(m);
    ck_assert_str_eq(in->arch, "xlm-roberta");
    ck_assert_int_eq(in->pooling, MT_POOL_CLS);
    ck_assert(in->normalize);
    const cJSON *texts = cJSON_GetObjectItem(ref, "texts"), *ids = cJSON_GetObjectItem(ref, "ids");
    const cJSON *vecs = cJSON_GetObjectItem(ref, "vectors");
    const int n = cJSON_GetArraySize(texts), h = in->hidden;
    int32_t *all = malloc(sizeof *all * (size_t)n * 64), off[32] = {0};
    float *out = malloc(sizeof *out * (size_t)n * h);
    mt_err err;
    for (int i = 0; i < n; i++) {
        const char *t = cJSON_GetArrayItem(texts, i)->valuestring;
        int got = 0;
        ck_assert(mt_model_tokenize(m, t, strlen(t), all + off[i], 64, &got, NULL, &err) == MT_OK);
        same_ids(all + off[i], got, cJSON_GetArrayItem(ids, i), "text", i);
        off[i + 1] = off[i] + got;
    }
    for (int i = 0; i < n * h; i++)
        out[i] = NAN;
    ck_assert_msg(mt_model_forward(m, all, off, n, out, NULL, &err) == MT_OK, "%s", err.msg);
    double worst = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < h; c++)
            worst = fmax(worst, fabs(out[i * h + c] -
                                     cJSON_GetArrayItem(cJSON_GetArrayItem(vecs, i), c)->valuedouble));
    fprintf(stderr, "xlm-roberta embedder: %d texts, max |vector - float64 reference| %.3g\n", n,
            worst);
    ck_assert_msg(worst < 1e-5, "max error %.3g", worst);
    for (int i = 0; i < n; i++) { /* alone: the same */
        int32_t o1[2] = {0, off[i + 1] - off[i]};
        float *one = malloc(sizeof *one * (size_t)h);
        ck_assert(mt_model_forward(m, all + off[i], o1, 1, one, NULL, &err) == MT_OK);
        for (int c = 0; c < h; c++)
            ck_assert(fabsf(one[c] - out[i * h + c]) < 1e-6f);
        free(one);
    }
    free(all);
    free(out);
    mt_model_free(m);
}
END_TEST

START_TEST(xlmr_reranker_reads_pairs_as_xlmr_does)
{
    mt_model *m = load(rerank_dir);
    ck_assert_int_eq(mt_model_get_info(m)->task, MT_TASK_CLASSIFY);
    const char *q = cJSON_GetObjectItem(ref, "query")->valuestring;
    const cJSON *texts = cJSON_GetObjectItem(ref, "texts"), *pairs = cJSON_GetObjectItem(ref, "pairs");
    const cJSON *logits = cJSON_GetObjectItem(ref, "logits");
    const int n = cJSON_GetArraySize(texts);
    int32_t *all = malloc(sizeof *all * (size_t)n * 64), off[32] = {0}, segs[32];
    float s[32];
    mt_err err;
    for (int i = 0; i < n; i++) {
        const char *t = cJSON_GetArrayItem(texts, i)->valuestring;
        int got = 0;
        ck_assert_msg(mt_model_tokenize_pair(m, q, strlen(q), t, strlen(t), all + off[i], 64, &got,
                                             &segs[i], NULL, &err) == MT_OK, "%s", err.msg);
        same_ids(all + off[i], got, cJSON_GetObjectItem(cJSON_GetArrayItem(pairs, i), "ids"),
                 "pair", i);
        ck_assert_int_eq(segs[i], got); /* one token type */
        off[i + 1] = off[i] + got;
    }
    ck_assert(mt_model_forward_scores(m, all, off, segs, n, s, &err) == MT_OK);
    double worst = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        const double want = cJSON_GetArrayItem(logits, i)->valuedouble;
        worst = fmax(worst, fabs(s[i] - want));
        scale = fmax(scale, fabs(want));
    }
    fprintf(stderr, "xlm-roberta reranker: %d pairs, max |logit - reference| %.3g (largest %.3g)\n",
            n, worst, scale);
    ck_assert_msg(worst < 1e-4 * fmax(1.0, scale), "max error %.3g", worst);
    free(all);
    mt_model_free(m);
}
END_TEST

START_TEST(xlmr_config_without_pad_token_id_is_refused)
{
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/bad", work);
    ck_assert_int_eq(tu_copy_dir(embed_dir, dir), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ck_assert_int_eq(tu_rewrite_json(path, "pad_token_id", NULL), 0);
    mt_model *m = NULL;
    mt_model_opts o = {.precision = MT_PREC_FP32};
    mt_err err = {{0}};
    ck_assert_int_ne(mt_model_load(dir, be, &o, &m, &err), MT_OK);
    ck_assert_msg(strstr(err.msg, "config.json: field 'pad_token_id'"), "%s", err.msg);
}
END_TEST

/* ---- bge-m3's three outputs (models/enc_outputs.c) ------------------- */

/* The reference texts tokenized and packed: *n texts, offsets into off. */
static int32_t *pack(const mt_model *m, int32_t *off, int *n)
{
    const cJSON *texts = cJSON_GetObjectItem(ref, "texts");
    *n = cJSON_GetArraySize(texts);
    int32_t *ids = malloc(sizeof *ids * (size_t)*n * MAXTOK);
    mt_err err;
    off[0] = 0;
    for (int i = 0; i < *n; i++) {
        const char *t = cJSON_GetArrayItem(texts, i)->valuestring;
        int got = 0;
        ck_assert(mt_model_tokenize(m, t, strlen(t), ids + off[i], MAXTOK, &got, NULL, &err) ==
                  MT_OK);
        off[i + 1] = off[i] + got;
    }
    return ids;
}

/* forward_outputs into a NaN-poisoned buffer; every element must be set. */
static float *outputs(mt_model *m, const int32_t *ids, const int32_t *off, int n, float *norms)
{
    const size_t w = (size_t)mt_outputs_width(mt_model_get_info(m)), len = (size_t)off[n] * w;
    float *out = malloc(sizeof *out * len);
    for (size_t i = 0; i < len; i++)
        out[i] = NAN;
    mt_err err = {{0}};
    ck_assert_msg(mt_model_forward_outputs(m, ids, off, n, out, norms, &err) == MT_OK, "%s",
                  err.msg);
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(isfinite(out[i]), "element %zu (token %zu) not written", i, i / w);
    return out;
}

/* Text i's lexical weights in out against the reference's {id: weight}:
 * the same ids (but those the reference puts within tol of 0, where float
 * rounding may fall either side) with the same weights; *worst the largest
 * error. */
static void same_lexical(const float *out, size_t w, const int32_t *ids, int b, int e,
                         const cJSON *want, double *worst)
{
    const double tol = 1e-4;
    for (int t = b; t < e; t++) {
        char key[16];
        snprintf(key, sizeof key, "%d", ids[t]);
        const cJSON *x = cJSON_GetObjectItem(want, key);
        double best = 0; /* the largest weight of this id's tokens */
        for (int u = b; u < e; u++)
            if (ids[u] == ids[t])
                best = fmax(best, out[(size_t)u * w]);
        if (!x) {
            ck_assert_msg(best <= tol, "token %d has weight %g, the reference none", ids[t], best);
            continue;
        }
        *worst = fmax(*worst, fabs(best - x->valuedouble));
        ck_assert_msg(fabs(best - x->valuedouble) < tol, "token %d: weight %g, want %g", ids[t],
                      best, x->valuedouble);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, want) /* every id it has is among the text's tokens */
    {
        bool found = false;
        for (int t = b; t < e && !found; t++)
            found = ids[t] == atoi(it->string);
        ck_assert_msg(found || it->valuedouble <= tol, "reference id %s not in the text",
                      it->string);
    }
}

START_TEST(m3_outputs_match_the_reference_from_one_forward)
{
    mt_model *m = load(m3_dir);
    const mt_model_info *in = mt_model_get_info(m);
    ck_assert(in->sparse);
    ck_assert_int_eq(in->colbert_dim, 64);
    ck_assert_int_eq(mt_outputs_width(in), 65);
    int32_t off[32];
    int n;
    int32_t *ids = pack(m, off, &n);
    const int h = in->hidden;
    const size_t w = 65;
    float norms[32], dnorms[32], *dense = malloc(sizeof *dense * (size_t)n * h);
    float *out = outputs(m, ids, off, n, norms);
    mt_err err;
    ck_assert(mt_model_forward(m, ids, off, n, dense, dnorms, &err) == MT_OK);
    const cJSON *sparse = cJSON_GetObjectItem(ref, "sparse"), *col = cJSON_GetObjectItem(ref, "colbert");
    double wl = 0, wc = 0;
    for (int i = 0; i < n; i++) {
        /* dense: the first row after its 0, the same bits as forward's */
        ck_assert(memcmp(out + (size_t)off[i] * w + 1, dense + (size_t)i * h,
                         sizeof(float) * h) == 0);
        ck_assert(norms[i] == dnorms[i]);
        ck_assert(out[(size_t)off[i] * w] == 0.f); /* <s>: special */
        same_lexical(out, w, ids, off[i], off[i + 1], cJSON_GetArrayItem(sparse, i), &wl);
        const cJSON *cv = cJSON_GetArrayItem(col, i);
        ck_assert_int_eq(cJSON_GetArraySize(cv), off[i + 1] - off[i] - 1);
        for (int t = off[i] + 1; t < off[i + 1]; t++)
            for (int c = 0; c < 64; c++)
                wc = fmax(wc, fabs(out[(size_t)t * w + 1 + c] -
                                   cJSON_GetArrayItem(cJSON_GetArrayItem(cv, t - off[i] - 1), c)
                                       ->valuedouble));
    }
    fprintf(stderr, "bge-m3 heads: %d texts, max error lexical weights %.3g, ColBERT %.3g\n", n,
            wl, wc);
    ck_assert_msg(wc < 1e-5, "ColBERT max error %.3g", wc);
    for (int i = 0; i < n; i++) { /* alone: the same */
        int32_t o1[2] = {0, off[i + 1] - off[i]};
        float *one = outputs(m, ids + off[i], o1, 1, NULL);
        for (size_t k = 0; k < (size_t)o1[1] * w; k++)
            ck_assert(fabsf(one[k] - out[(size_t)off[i] * w + k]) < 1e-6f);
        free(one);
    }
    free(out);
    free(dense);
    free(ids);
    mt_model_free(m);
}
END_TEST

/* The least cosine between the ColBERT vectors of a and b (both packed as
 * forward_outputs writes them). */
static double least_colbert_cos(const float *a, const float *b, const int32_t *off, int n)
{
    double least = 1;
    for (int i = 0; i < n; i++)
        for (int t = off[i] + 1; t < off[i + 1]; t++) {
            double d = 0, na = 0, nb = 0;
            for (int c = 1; c <= 64; c++) {
                d += (double)a[t * 65 + c] * b[t * 65 + c];
                na += (double)a[t * 65 + c] * a[t * 65 + c];
                nb += (double)b[t * 65 + c] * b[t * 65 + c];
            }
            least = fmin(least, d / sqrt(na * nb));
        }
    return least;
}

START_TEST(m3_heads_stay_fp32_under_low_precision)
{
    mt_model *f = load(m3_dir);
    int32_t off[32];
    int n;
    int32_t *ids = pack(f, off, &n);
    float *want = outputs(f, ids, off, n, NULL);
    const mt_precision ps[] = {MT_PREC_INT8, MT_PREC_BF16};
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
        mt_model *m = tu_load_model(m3_dir, be, ps[k]);
        ck_assert(mt_model_get_info(m)->sparse);
        float *got = outputs(m, ids, off, n, NULL);
        const double c = least_colbert_cos(want, got, off, n);
        fprintf(stderr, "bge-m3 heads under %s: least ColBERT cosine to FP32 %.6f\n",
                mt_precision_name(ps[k]), c);
        ck_assert_msg(c > 0.99, "%s: least cosine %.6f", mt_precision_name(ps[k]), c);
        free(got);
        mt_model_free(m);
    }
    free(want);
    free(ids);
    mt_model_free(f);
}
END_TEST

START_TEST(m3_one_head_or_none)
{
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/sparse-only", work);
    ck_assert_int_eq(tu_copy_dir(m3_dir, dir), 0);
    snprintf(path, sizeof path, "%s/colbert_linear.pt", dir);
    ck_assert_int_eq(unlink(path), 0);
    mt_model *m = load(dir);
    ck_assert(mt_model_get_info(m)->sparse);
    ck_assert_int_eq(mt_model_get_info(m)->colbert_dim, 0);
    ck_assert_int_eq(mt_outputs_width(mt_model_get_info(m)), 65); /* 1 + hidden */
    mt_model_free(m);
    snprintf(path, sizeof path, "%s/sparse_linear.pt", dir);
    ck_assert_int_eq(unlink(path), 0);
    m = load(dir);
    ck_assert(!mt_model_get_info(m)->sparse);
    int32_t ids[3] = {0, 10, 2}, off[2] = {0, 3};
    float out[3 * 65];
    mt_err err = {{0}};
    ck_assert_int_eq(mt_model_forward_outputs(m, ids, off, 1, out, NULL, &err), MT_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "no sparse or ColBERT head"), "%s", err.msg);
    mt_model_free(m);
}
END_TEST

START_TEST(m3_head_of_the_wrong_width_is_refused)
{
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/bad-head", work);
    ck_assert_int_eq(tu_copy_dir(m3_dir, dir), 0);
    /* a .safetensors of the name is read before the .pt */
    static float wv[32 * 32], bv[32];
    const st_tensor t[] = {
        {.name = "weight", .dtype = ST_F32, .ndim = 2, .shape = {32, 32}, .data = wv,
         .nbytes = sizeof wv},
        {.name = "bias", .dtype = ST_F32, .ndim = 1, .shape = {32}, .data = bv,
         .nbytes = sizeof bv}};
    snprintf(path, sizeof path, "%s/colbert_linear.safetensors", dir);
    mt_err err = {{0}};
    ck_assert_msg(st_write(path, t, 2, NULL, &err) == MT_OK, "%s", err.msg);
    mt_model *m = NULL;
    mt_model_opts o = {.precision = MT_PREC_FP32};
    ck_assert_int_ne(mt_model_load(dir, be, &o, &m, &err), MT_OK);
    ck_assert_msg(strstr(err.msg, "colbert_linear.safetensors: tensor 'weight'") &&
                      strstr(err.msg, "[32,64]"),
                  "%s", err.msg);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("xlmr");
    TCase *tc = tcase_create("xlmr");
    tcase_add_unchecked_fixture(tc, make_folders, remove_folders);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, xlmr_embedder_matches_the_reference_in_every_script);
    tcase_add_test(tc, xlmr_reranker_reads_pairs_as_xlmr_does);
    tcase_add_test(tc, xlmr_config_without_pad_token_id_is_refused);
    tcase_add_test(tc, m3_outputs_match_the_reference_from_one_forward);
    tcase_add_test(tc, m3_heads_stay_fp32_under_low_precision);
    tcase_add_test(tc, m3_one_head_or_none);
    tcase_add_test(tc, m3_head_of_the_wrong_width_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
