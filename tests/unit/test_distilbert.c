/* test_distilbert.c: the "distilbert" architecture row (models/distilbert.c),
 * the third encoder family, on model folders tools/make-distilbert.py makes
 * at test time (nothing is committed):
 *   - all-MiniLM-L6-v2 converted into DistilBERT's layout (tensors renamed
 *     under "distilbert.", token type 0 folded into the positions) gives
 *     MiniLM's vectors on every reference sentence, at FP32 and at every
 *     other precision the backend has, and through a quantized file;
 *   - a small DistilBERT with random weights (fixed seed, bare names) gives
 *     the vectors of the tool's own numpy forward, batched and alone;
 *   - a bad config.json is refused naming the file and DistilBERT's key. */
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/metrics.h"
#include "engine/model.h"
#include "engine/precision.h"
#include "models/encoder.h"
#include "tests/unit/ref_sentences.h"
#include "tests/unit/tu_files.h"
#include "tests/unit/tu_model.h"

#define MINILM_DIR "models/all-MiniLM-L6-v2"
#define H 384

static char work[64]; /* the folders the tool made: work/minilm, work/random */
static char minilm_distil[128], random_dir[128];
static mt_backend *be;

/* Once for the suite (in the parent, before any fork): both folders. */
static void make_folders(void)
{
    tu_mkwork(work, sizeof work, "mt-distilbert");
    snprintf(minilm_distil, sizeof minilm_distil, "%s/minilm", work);
    snprintf(random_dir, sizeof random_dir, "%s/random", work);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s tools/make-distilbert.py from-minilm " MINILM_DIR " %s && "
             "%s tools/make-distilbert.py random %s --seed 20251127",
             tu_python(), minilm_distil, tu_python(), random_dir);
    ck_assert_msg(system(cmd) == 0, "tools/make-distilbert.py failed: %s", cmd);
}

static void remove_folders(void) { tu_rmwork(work); }

static void setup(void) { be = tu_cpu_backend(); }

static void teardown(void) { mt_backend_destroy(be); }

static mt_model *load(const char *dir, mt_precision p)
{
    mt_model_opts o = {.precision = p, .calib = {p == MT_PREC_INT8 ? MT_CALIB_MSE : MT_CALIB_ABSMAX, 100.0}};
    return tu_load_opts(dir, be, &o);
}

/* Texts [0, n) embedded by m in batches of 16 into out (n, H). */
static void embed(mt_model *m, char **texts, int n, float *out)
{
    size_t lens[16];
    for (int i = 0; i < n; i += 16) {
        int b = n - i < 16 ? n - i : 16;
        for (int k = 0; k < b; k++)
            lens[k] = strlen(texts[i + k]);
        mt_err err = {{0}};
        ck_assert_msg(mt_model_embed_texts(m, (const char *const *)texts + i, lens, b,
                                           out + (size_t)i * H, NULL, &err) == MT_OK,
                      "%s", err.msg);
    }
}

/* The smallest cosine between the rows of a and b. */
static double min_cosine(const float *a, const float *b, int n)
{
    double worst = 1;
    for (int i = 0; i < n; i++) {
        double c = mt_cosine(a + (size_t)i * H, b + (size_t)i * H, H);
        worst = c < worst || c != c ? c : worst;
    }
    return worst;
}

START_TEST(distilbert_reads_its_own_config_keys)
{
    mt_model *m = load(minilm_distil, MT_PREC_FP32);
    const enc_config *c = enc_get_config(m);
    ck_assert_int_eq(c->hidden, 384);   /* "dim" */
    ck_assert_int_eq(c->layers, 6);     /* "n_layers" */
    ck_assert_int_eq(c->heads, 12);     /* "n_heads" */
    ck_assert_int_eq(c->intermediate, 1536); /* "hidden_dim" */
    ck_assert_int_eq(c->vocab, 30522);
    ck_assert_int_eq(c->type_vocab, 0);
    ck_assert_int_eq(c->max_seq_len, 256); /* sentence_bert_config.json */
    ck_assert_str_eq(m->info.arch, "distilbert");
    ck_assert_int_eq(m->info.pooling, MT_POOL_MEAN);
    ck_assert(m->info.normalize);
    mt_model_free(m);
}
END_TEST

/* FP32: the converted folder gives MiniLM's vectors on all 243 sentences. */
START_TEST(distilbert_from_minilm_equals_minilm_on_every_reference_sentence)
{
    char **sent;
    int n = read_ref_sentences(&sent);
    ck_assert_int_ge(n, 200);
    float *a = malloc(sizeof(float) * n * H), *b = malloc(sizeof(float) * n * H);
    mt_model *bert = load(MINILM_DIR, MT_PREC_FP32), *distil = load(minilm_distil, MT_PREC_FP32);
    embed(bert, sent, n, a);
    embed(distil, sent, n, b);
    double c = min_cosine(a, b, n), d = 0;
    for (int i = 0; i < n; i++) {
        double e = mt_max_abs_diff(a + (size_t)i * H, b + (size_t)i * H, H);
        d = e > d ? e : d;
    }
    printf("distilbert from minilm fp32: %d sentences: min cosine %.8f, max abs diff %.3g\n", n, c, d);
    ck_assert_msg(c >= 0.99999 && d <= 1e-4, "min cosine %.8f, max abs diff %g", c, d);
    mt_model_free(bert);
    mt_model_free(distil);
    for (int i = 0; i < n; i++)
        free(sent[i]);
    free(sent);
    free(a);
    free(b);
}
END_TEST

/* Every other precision the backend runs. FP16, BF16 and FP8 quantize the
 * same weights to the same codes: DistilBERT at p is MiniLM at p (cosine
 * 0.99995: BF16's 8-bit-mantissa activations can round the folded positions' last
 * bit apart, 0.999995 here; FP16 and FP8 give 1.0). INT8 and
 * INT8G smooth the activations with factors from calibration statistics
 * that differ in the last bits (the folded position rows round otherwise),
 * which can move a weight's code or an MSE clip: there DistilBERT at p must
 * drift from MiniLM's FP32 vectors no more than MiniLM at p does, give or
 * take 2e-4 of cosine. */
START_TEST(distilbert_from_minilm_equals_minilm_at_every_precision)
{
    static const mt_precision precs[] = {MT_PREC_FP16, MT_PREC_BF16, MT_PREC_INT8, MT_PREC_FP8,
                                         MT_PREC_INT8G};
    char **sent;
    const int nsent = read_ref_sentences(&sent);
    int n = nsent < 48 ? nsent : 48, tested = 0, bad = 0;
    float *ref = malloc(sizeof(float) * n * H), *a = malloc(sizeof(float) * n * H),
          *b = malloc(sizeof(float) * n * H);
    mt_model *fp32 = load(MINILM_DIR, MT_PREC_FP32);
    embed(fp32, sent, n, ref);
    mt_model_free(fp32);
    for (size_t p = 0; p < sizeof precs / sizeof *precs; p++) {
        if (!be->ops->supports(be, precs[p]))
            continue;
        const char *name = mt_precision_name(precs[p]);
        mt_model *bert = load(MINILM_DIR, precs[p]), *distil = load(minilm_distil, precs[p]);
        embed(bert, sent, n, a);
        embed(distil, sent, n, b);
        const double c = min_cosine(a, b, n), dm = min_cosine(a, ref, n), dd = min_cosine(b, ref, n);
        const bool calibrated = mt_prec(precs[p])->int8_act;
        const bool ok = calibrated ? dd >= dm - 2e-4 : c >= 0.99995;
        printf("distilbert from minilm %s: min cosine to minilm %s %.8f; to minilm fp32 %.8f "
               "(minilm %s: %.8f)%s\n", name, name, c, dd, name, dm, ok ? "" : "  FAILS");
        fflush(stdout);
        bad += !ok;
        mt_model_free(bert);
        mt_model_free(distil);
        tested++;
    }
    ck_assert_int_ge(tested, 1);
    ck_assert_msg(bad == 0, "%d precisions differ (see above)", bad);
    for (int i = 0; i < nsent; i++)
        free(sent[i]);
    free(sent);
    free(ref);
    free(a);
    free(b);
}
END_TEST

/* A quantized file of the row (its "distilbert."-prefixed GEMM names found
 * as GEMMs) reloads to the same vectors as quantizing at load. */
START_TEST(distilbert_quantized_file_reloads_to_the_same_vectors)
{
    char path[160];
    snprintf(path, sizeof path, "%s/int8.safetensors", work);
    mt_err err = {{0}};
    mt_calib_opts c = {MT_CALIB_MSE, 100.0};
    ck_assert_msg(mt_model_save_quantized(minilm_distil, MT_PREC_INT8, &c, NULL, path, &err) == MT_OK,
                  "%s", err.msg);
    mt_model *direct = load(minilm_distil, MT_PREC_INT8), *reloaded = NULL;
    mt_model_opts o = {.precision = MT_PREC_INT8, .calib = c, .weights = path};
    ck_assert_msg(mt_model_load(minilm_distil, be, &o, &reloaded, &err) == MT_OK, "%s", err.msg);
    ck_assert_uint_eq(direct->info.gemm_bytes, reloaded->info.gemm_bytes);
    ck_assert_uint_lt(direct->info.gemm_bytes, (size_t)6 * (4 * 384 * 384 + 2 * 384 * 1536) * 2);
    char *texts[] = {"A man is playing a guitar.", "Quantized weights, saved and reloaded."};
    float a[2 * H], b[2 * H];
    embed(direct, texts, 2, a);
    embed(reloaded, texts, 2, b);
    ck_assert_msg(memcmp(a, b, sizeof a) == 0, "reloaded vectors differ");
    mt_model_free(direct);
    mt_model_free(reloaded);
    unlink(path);
}
END_TEST

/* Random weights: each sequence's vector against the numpy forward, the
 * whole set in one ragged batch and each alone. */
START_TEST(distilbert_random_weights_match_the_numpy_reference)
{
    char path[160];
    snprintf(path, sizeof path, "%s/reference.json", random_dir);
    cJSON *j;
    mt_err err = {{0}};
    ck_assert_msg(mt_json_load(path, &j, &err) == MT_OK, "%s", err.msg);
    const int h = cJSON_GetObjectItem(j, "dim")->valueint;
    const cJSON *jids = cJSON_GetObjectItem(j, "ids"), *jvec = cJSON_GetObjectItem(j, "vectors");
    const int nseq = cJSON_GetArraySize(jids);
    int32_t ids[1024], off[64] = {0};
    for (int s = 0; s < nseq; s++) {
        const cJSON *row = cJSON_GetArrayItem(jids, s), *v;
        off[s + 1] = off[s];
        cJSON_ArrayForEach(v, row) ids[off[s + 1]++] = v->valueint;
    }
    mt_model *m = load(random_dir, MT_PREC_FP32);
    ck_assert_int_eq(m->info.hidden, h);
    float *batch = malloc(sizeof(float) * nseq * h), *one = malloc(sizeof(float) * h);
    ck_assert_msg(mt_model_forward(m, ids, off, nseq, batch, NULL, &err) == MT_OK, "%s", err.msg);
    double worst = 0;
    for (int s = 0; s < nseq; s++) {
        int32_t o1[2] = {0, off[s + 1] - off[s]};
        ck_assert_msg(mt_model_forward(m, ids + off[s], o1, 1, one, NULL, &err) == MT_OK, "%s",
                      err.msg);
        double want[1024], scale = 0, e_batch = 0, e_one = 0;
        for (int c = 0; c < h; c++) {
            want[c] = cJSON_GetArrayItem(cJSON_GetArrayItem(jvec, s), c)->valuedouble;
            scale = fabs(want[c]) > scale ? fabs(want[c]) : scale;
        }
        for (int c = 0; c < h; c++) {
            double eb = fabs(batch[(size_t)s * h + c] - want[c]), eo = fabs(one[c] - want[c]);
            e_batch = eb > e_batch || eb != eb ? eb : e_batch;
            e_one = eo > e_one || eo != eo ? eo : e_one;
        }
        ck_assert_msg(e_batch / scale < 1e-4 && e_one / scale < 1e-4,
                      "sequence %d (%d tokens): relative error %g batched, %g alone", s,
                      off[s + 1] - off[s], e_batch / scale, e_one / scale);
        worst = fmax(worst, fmax(e_batch, e_one) / scale);
    }
    printf("distilbert random weights: %d sequences, worst relative error %.3g\n", nseq, worst);
    free(batch);
    free(one);
    mt_model_free(m);
    cJSON_Delete(j);
}
END_TEST

/* random_dir's config.json with key set to value (a JSON text; NULL drops
 * the key) in a copy of the folder; the load must fail naming want and
 * config.json. */
static void expect_config_refused(const char *key, const char *value, const char *want)
{
    char dir[160], path[200];
    snprintf(dir, sizeof dir, "%s/bad", work);
    ck_assert_int_eq(tu_copy_dir(random_dir, dir), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ck_assert_int_eq(tu_rewrite_json(path, key, value), 0);
    mt_err err = {{0}};
    mt_model *m = NULL;
    mt_model_opts o = {.precision = MT_PREC_FP32};
    ck_assert_int_ne(mt_model_load(dir, be, &o, &m, &err), MT_OK);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "config.json"),
                  "message \"%s\" lacks \"%s\"", err.msg, want);
}

START_TEST(distilbert_bad_config_names_the_file_and_key)
{
    expect_config_refused("dim", NULL, "field 'dim' missing or not a number");
    expect_config_refused("n_layers", "0", "field 'n_layers' = 0 is not an integer");
    expect_config_refused("n_heads", "5", "dim 48 is not a multiple of n_heads 5");
    expect_config_refused("activation", "\"relu\"", "activation \"relu\" is not supported");
    expect_config_refused("hidden_dim", "\"96\"", "field 'hidden_dim' missing or not a number");
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("distilbert");
    TCase *tc = tcase_create("distilbert");
    tcase_add_unchecked_fixture(tc, make_folders, remove_folders);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, distilbert_reads_its_own_config_keys);
    tcase_add_test(tc, distilbert_random_weights_match_the_numpy_reference);
    tcase_add_test(tc, distilbert_bad_config_names_the_file_and_key);
    tcase_add_test(tc, distilbert_from_minilm_equals_minilm_on_every_reference_sentence);
    tcase_add_test(tc, distilbert_quantized_file_reloads_to_the_same_vectors);
    tcase_add_test(tc, distilbert_from_minilm_equals_minilm_at_every_precision);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
