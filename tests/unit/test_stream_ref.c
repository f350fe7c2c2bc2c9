/* test_stream_ref.c: FP32's forward with the weights streamed a layer at a
 * time (models/encoder_stream.c) against a whole FP32 model of the same
 * folder, bit for bit on the CPU backend (the same kernels run in the same
 * order on the same batches):
 *   - the load check's reference vectors of the probe texts
 *     (mt_model_reference_probes) against mt_model_embed_probes of a whole
 *     FP32 model (what server/core/build.c loaded before), for every row:
 *     the real all-MiniLM-L6-v2 (BERT) and all-mpnet-base-v2 (MPNet: its
 *     relative position bias, RoBERTa positions), and folders made at test
 *     time: Qwen3 (RMSNorm, rotary, GQA, Q/K norms, last-token pooling; F32
 *     and BF16 in three shards), DistilBERT, XLM-R's embedder and reranker
 *     and a MiniLM cross-encoder (a classifier's first-token rows); with a
 *     token cap; a folder that cannot be read fails naming the file;
 *   - int8's calibration maxima (enc_calibrate) against a whole FP32
 *     model's recording of the calibration text in batches of 16 (the
 *     calibration as it was before streaming, kept here as its twin), and
 *     int8 and int8g models made from either, their vectors the same bits.
 * Output buffers are NaN first (the reference's by its own contract), so
 * an element left unwritten fails. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/text/calib_text.h"
#include "models/encoder_internal.h"
#include "testutil.h"
#include "tu_files.h"

#define MINILM_DIR "models/all-MiniLM-L6-v2"
#define MPNET_DIR "models/all-mpnet-base-v2"

extern const enc_arch enc_arch_bert, enc_arch_mpnet, enc_arch_qwen3;

static char work[64], qwen3_dir[128], qwen3_bf16_dir[128], distil_dir[128], xlmr_embed[128],
    xlmr_rerank[128], cross_dir[128];
static mt_backend *be;

static void make_folders(void)
{
    snprintf(work, sizeof work, "/tmp/mt-stream-ref-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(work));
    snprintf(qwen3_dir, sizeof qwen3_dir, "%s/qwen3", work);
    snprintf(qwen3_bf16_dir, sizeof qwen3_bf16_dir, "%s/qwen3-bf16", work);
    snprintf(distil_dir, sizeof distil_dir, "%s/distil", work);
    snprintf(xlmr_embed, sizeof xlmr_embed, "%s/xlmr/embed", work);
    snprintf(xlmr_rerank, sizeof xlmr_rerank, "%s/xlmr/rerank", work);
    snprintf(cross_dir, sizeof cross_dir, "%s/cross", work);
    char cmd[2048];
    const char *py = tu_python();
    snprintf(cmd, sizeof cmd,
             "%s tools/make-layer-kinds.py qwen3 %s > /dev/null && "
             "%s tools/make-layer-kinds.py qwen3 %s --bf16 --shards 3 > /dev/null && "
             "%s tools/make-distilbert.py random %s --seed 20251127 > /dev/null && "
             "%s tools/make-unigram-tokenizer.py %s/tok > /dev/null && "
             "%s tools/make-xlmr.py %s/tok/tokenizer.json %s/xlmr > /dev/null && "
             "%s tools/make-cross-encoder.py %s --src " MINILM_DIR " > /dev/null",
             py, qwen3_dir, py, qwen3_bf16_dir, py, distil_dir, py, work, py, work, work, py,
             cross_dir);
    ck_assert_msg(system(cmd) == 0, "making the folders failed: %s", cmd);
}

static void remove_folders(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (work[0] && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", work);
}

static void setup(void)
{
    mt_err err;
    ck_assert_msg(mt_backend_cpu_create(0, &be, &err) == MT_OK, "%s", err.msg);
}

static void teardown(void) { mt_backend_destroy(be); }

static mt_model *load(const char *dir, mt_precision p, int max_seq_len)
{
    mt_model *m = NULL;
    mt_err err = {0};
    mt_model_opts o = {.precision = p, .max_seq_len = max_seq_len};
    ck_assert_msg(mt_model_load(dir, be, &o, &m, &err) == MT_OK, "%s: %s", dir, err.msg);
    return m;
}

/* Every one of n floats written (not the NaN they started as), and a the
 * same bits as b; else the first index that is not. */
static void assert_same_bits(const char *what, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(!isnan(a[i]) && !isnan(b[i]), "%s: element %zu not written", what, i);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&a[i], &b[i], sizeof(float)) == 0,
                      "%s: element %zu differs: %.9g vs %.9g (of %zu)", what, i, (double)a[i],
                      (double)b[i], n);
}

/* The streamed reference of dir's probes against a whole FP32 model's
 * (the reference's buffer is NaN until the forward writes it). */
static void check_probes(const char *dir, int max_seq_len)
{
    mt_model *m = load(dir, MT_PREC_FP32, max_seq_len);
    const int n = mt_probe_count(), h = m->info.hidden;
    const size_t len = (size_t)n * h;
    float *whole = poisoned(len), *streamed = NULL;
    int sh = 0;
    mt_err err = {0};
    ck_assert_msg(mt_model_embed_probes(m, whole, &err) == MT_OK, "%s: %s", dir, err.msg);
    mt_model_free(m);
    ck_assert_msg(mt_model_reference_probes(dir, be, max_seq_len, &streamed, &sh, &err) == MT_OK,
                  "%s: %s", dir, err.msg);
    ck_assert_int_eq(sh, h);
    char what[256];
    snprintf(what, sizeof what, "%s (max_seq_len %d): streamed vs whole FP32 probes", dir,
             max_seq_len);
    assert_same_bits(what, streamed, whole, len);
    free(whole);
    free(streamed);
}

START_TEST(probes_minilm) { check_probes(MINILM_DIR, 0); }
END_TEST

START_TEST(probes_mpnet) { check_probes(MPNET_DIR, 0); }
END_TEST

START_TEST(probes_qwen3) { check_probes(qwen3_dir, 0); }
END_TEST

START_TEST(probes_qwen3_bf16_shards) { check_probes(qwen3_bf16_dir, 0); }
END_TEST

START_TEST(probes_distilbert) { check_probes(distil_dir, 0); }
END_TEST

START_TEST(probes_xlmr_embedder_and_reranker)
{
    check_probes(xlmr_embed, 0);
    check_probes(xlmr_rerank, 0);
}
END_TEST

START_TEST(probes_cross_encoder) { check_probes(cross_dir, 0); }
END_TEST

/* A variant's max_seq_len truncates the probes alike on both paths. */
START_TEST(probes_with_a_token_cap)
{
    check_probes(MINILM_DIR, 8);
    check_probes(MPNET_DIR, 5);
    check_probes(qwen3_bf16_dir, 6);
}
END_TEST

/* A folder that cannot be read fails naming the file, and leaves *out. */
START_TEST(a_bad_folder_fails_naming_the_file)
{
    float *out = (float *)&out;
    int h = -1;
    mt_err err = {0};
    ck_assert_int_ne(mt_model_reference_probes("/nonexistent/model", be, 0, &out, &h, &err), MT_OK);
    ck_assert_msg(strstr(err.msg, "/nonexistent/model/config.json"), "%s", err.msg);
    ck_assert_ptr_eq(out, (float *)&out);
    ck_assert_int_eq(h, -1);
}
END_TEST

/* The calibration before streaming: a whole FP32 model of dir recording
 * every GEMM input's column maxima while it embeds the calibration text
 * in batches of 16. */
static float *whole_model_calibration(const char *dir, size_t *len, size_t *used)
{
    mt_model *m = load(dir, MT_PREC_FP32, 0);
    enc_model *e = (enc_model *)m;
    const enc_config *c = &e->cfg;
    *len = (size_t)c->layers * GEMMS_PER_LAYER * enc_max_k(c);
    *used = 0; /* the slots a GEMM's input fills: k of each max_k */
    for (int g = 0; g < GEMMS_PER_LAYER; g++)
        *used += (size_t)c->layers * enc_gemm_k(c, g);
    ck_assert_ptr_nonnull(e->act_max = calloc(*len, sizeof(float)));
    float *vec = malloc(sizeof(float) * 16 * (size_t)c->hidden);
    ck_assert_ptr_nonnull(vec);
    mt_err err = {0};
    for (int i = 0; i < mt_calib_sentences_n; i += 16) {
        const int nb = mt_calib_sentences_n - i < 16 ? mt_calib_sentences_n - i : 16;
        ck_assert_msg(mt_model_embed_texts(m, mt_calib_sentences + i, NULL, nb, vec, NULL,
                                           &err) == MT_OK, "%s", err.msg);
    }
    free(vec);
    float *out = e->act_max;
    e->act_max = NULL;
    mt_model_free(m);
    return out;
}

/* The streamed calibration's maxima are the whole model's, and int8 and
 * int8g models of dir made from either embed texts to the same bits. */
static void check_calibration(const char *dir, const enc_arch *a)
{
    size_t len, used;
    float *whole = whole_model_calibration(dir, &len, &used), *streamed = NULL;
    mt_err err = {0};
    ck_assert_msg(enc_calibrate(dir, a, be, 0, &streamed, &err) == MT_OK, "%s: %s", dir,
                  err.msg);
    size_t nonzero = 0;
    for (size_t i = 0; i < len; i++)
        nonzero += whole[i] != 0.0f;
    ck_assert_msg(nonzero >= used - used / 100 && nonzero <= used,
                  "%s: %zu of the %zu maxima recorded", dir, nonzero, used);
    char what[256];
    snprintf(what, sizeof what, "%s: streamed vs whole-model calibration maxima", dir);
    assert_same_bits(what, streamed, whole, len);

    static const mt_precision ps[] = {MT_PREC_INT8, MT_PREC_INT8G};
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
        mt_model *now = load(dir, ps[k], 0), *before = NULL;
        mt_model_opts o = {.precision = ps[k]};
        ck_assert_msg(enc_load_smoothed(dir, a, be, &o, whole, &before, &err) == MT_OK, "%s",
                      err.msg);
        const size_t n = (size_t)mt_probe_count() * now->info.hidden;
        float *x = poisoned(n), *y = poisoned(n);
        ck_assert_msg(mt_model_embed_probes(now, x, &err) == MT_OK, "%s", err.msg);
        ck_assert_msg(mt_model_embed_probes(before, y, &err) == MT_OK, "%s", err.msg);
        snprintf(what, sizeof what, "%s %s: vectors of the streamed vs the whole calibration",
                 dir, mt_precision_name(ps[k]));
        assert_same_bits(what, x, y, n);
        free(x);
        free(y);
        mt_model_free(now);
        mt_model_free(before);
    }
    free(whole);
    free(streamed);
}

START_TEST(calibration_minilm) { check_calibration(MINILM_DIR, &enc_arch_bert); }
END_TEST

START_TEST(calibration_mpnet) { check_calibration(MPNET_DIR, &enc_arch_mpnet); }
END_TEST

START_TEST(calibration_qwen3_bf16_shards) { check_calibration(qwen3_bf16_dir, &enc_arch_qwen3); }
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("stream_ref");
    TCase *tc = tcase_create("streamed FP32 forward");
    tcase_add_unchecked_fixture(tc, make_folders, remove_folders);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, probes_minilm);
    tcase_add_test(tc, probes_mpnet);
    tcase_add_test(tc, probes_qwen3);
    tcase_add_test(tc, probes_qwen3_bf16_shards);
    tcase_add_test(tc, probes_distilbert);
    tcase_add_test(tc, probes_xlmr_embedder_and_reranker);
    tcase_add_test(tc, probes_cross_encoder);
    tcase_add_test(tc, probes_with_a_token_cap);
    tcase_add_test(tc, a_bad_folder_fails_naming_the_file);
    tcase_add_test(tc, calibration_minilm);
    tcase_add_test(tc, calibration_mpnet);
    tcase_add_test(tc, calibration_qwen3_bf16_shards);
    suite_add_tcase(s, tc);
    return s;
}

#include "check_main.h"
