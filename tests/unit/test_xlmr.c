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
 *     refused naming the field.
 * (make-xlmr.py --transformers checked that numpy forward against
 * transformers' XLMRobertaModel and ...ForSequenceClassification: 1e-14.) */
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/model.h"
#include "tests/unit/tu_files.h"
#include "tests/unit/tu_model.h"

static char work[64], embed_dir[128], rerank_dir[128];
static mt_backend *be;
static cJSON *ref;

static void make_folders(void)
{
    tu_mkwork(work, sizeof work, "mt-xlmr");
    snprintf(embed_dir, sizeof embed_dir, "%s/m/embed", work);
    snprintf(rerank_dir, sizeof rerank_dir, "%s/m/rerank", work);
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
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
