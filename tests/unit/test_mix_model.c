/* test_mix_model.c: per-layer mixed precision on the real all-MiniLM-L6-v2
 * weights (engine/quant/mix.h through the model interface): rules that give
 * every GEMM one precision are that precision, bit for bit; a rule moves
 * exactly the weights it names (resident bytes add up layer by layer); a
 * quantized file written with a mix reloads to the same vectors, with its
 * own mix when the variant names none, and is refused for any other mix; a bad rule is refused by name; and the mix
 * search (engine/quant/mix_search.h) meets its budget on held-back text, checked
 * again here by loading its mix, or says why it cannot. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/text/calib_text.h"
#include "engine/model.h"
#include "engine/quant/mix_search.h"
#include "tests/unit/tu_model.h"

#define MODEL_DIR "models/all-MiniLM-L6-v2"

static mt_backend *be;
static const char *texts[] = {"A man is playing a guitar.", "Mixed precision, layer by layer.",
                              "The cat sits on the mat near the window.", "Ünïcödé and 中文"};
enum { NT = 4, H = 384 };

static void setup(void) { be = tu_cpu_backend(); }

static void teardown(void)
{
    mt_backend_destroy(be);
}

static mt_model *load(mt_precision p, const char *mix, const char *weights)
{
    mt_model *m = NULL;
    mt_err err = {0};
    mt_model_opts o = {.precision = p, .mix = mix, .weights = weights};
    ck_assert_msg(mt_model_load(MODEL_DIR, be, &o, &m, &err) == MT_OK, "%s / %s: %s",
                  mt_precision_name(p), mix ? mix : "-", err.msg);
    return m;
}

static void embed(mt_model *m, float *out)
{
    mt_err err = {0};
    ck_assert_msg(mt_model_embed_texts(m, texts, NULL, NT, out, NULL, &err) == MT_OK, "%s",
                  err.msg);
}

static double mean_cos(const float *a, const float *b)
{
    double s = 0;
    for (int i = 0; i < NT; i++) {
        double ab = 0, aa = 0, bb = 0;
        for (int j = 0; j < H; j++) {
            ab += (double)a[i * H + j] * b[i * H + j];
            aa += (double)a[i * H + j] * a[i * H + j];
            bb += (double)b[i * H + j] * b[i * H + j];
        }
        s += ab / sqrt(aa * bb);
    }
    return s / NT;
}

START_TEST(rules_giving_every_gemm_one_precision_are_that_precision)
{
    static const struct {
        mt_precision base;
        const char *mix;
        mt_precision same_as;
    } cases[] = {
        {MT_PREC_FP32, "*=int8", MT_PREC_INT8},
        {MT_PREC_INT8, "*=fp32", MT_PREC_FP32},
        {MT_PREC_FP16, "qkv=fp8; attn_out=fp8; ffn_in=fp8; ffn_out=fp8", MT_PREC_FP8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        float a[NT * H], b[NT * H];
        mt_model *mixed = load(cases[i].base, cases[i].mix, NULL);
        mt_model *plain = load(cases[i].same_as, NULL, NULL);
        embed(mixed, a);
        embed(plain, b);
        ck_assert_uint_eq(mixed->info.gemm_bytes, plain->info.gemm_bytes);
        ck_assert_msg(memcmp(a, b, sizeof a) == 0, "%s with '%s' differs from %s",
                      mt_precision_name(cases[i].base), cases[i].mix,
                      mt_precision_name(cases[i].same_as));
        ck_assert_str_eq(mixed->info.mix, cases[i].mix);
        mt_model_free(mixed);
        mt_model_free(plain);
    }
}
END_TEST

/* ffn_out has the same shape in every layer, so two of six layers in
 * fp16 move the resident bytes by exactly a third of all six. */
START_TEST(a_rule_moves_exactly_the_weights_it_names)
{
    mt_model *i8 = load(MT_PREC_INT8, NULL, NULL);
    mt_model *all = load(MT_PREC_INT8, "ffn_out=fp16", NULL);
    mt_model *two = load(MT_PREC_INT8, "ffn_out@0,5=fp16", NULL);
    const double d_all = (double)all->info.gemm_bytes - (double)i8->info.gemm_bytes;
    const double d_two = (double)two->info.gemm_bytes - (double)i8->info.gemm_bytes;
    ck_assert_int_eq(i8->info.layers, 6);
    ck_assert_double_gt(d_all, 0);
    ck_assert_double_eq_tol(d_two * 3, d_all, 0.5);
    /* and moves the output towards fp32 */
    float f[NT * H], a[NT * H], b[NT * H];
    mt_model *fp32 = load(MT_PREC_FP32, NULL, NULL);
    embed(fp32, f);
    embed(i8, a);
    embed(all, b);
    ck_assert_double_gt(mean_cos(b, f), mean_cos(a, f));
    mt_model_free(fp32);
    mt_model_free(i8);
    mt_model_free(all);
    mt_model_free(two);
}
END_TEST

START_TEST(a_mixed_quantized_file_reloads_with_its_mix_and_refuses_other_mixes)
{
    const char *mix = "*=int8; ffn_out@0,3=fp16; qkv@5=fp32";
    char path[128];
    snprintf(path, sizeof path, "/tmp/mt_mix_%d.safetensors", (int)getpid());
    mt_err err = {0};
    mt_calib_opts c = {MT_CALIB_ABSMAX, 100.0};
    ck_assert_msg(mt_model_save_quantized(MODEL_DIR, MT_PREC_INT8, &c, mix, path, &err) == MT_OK,
                  "%s", err.msg);
    mt_model *direct = load(MT_PREC_INT8, mix, NULL), *reloaded = load(MT_PREC_INT8, mix, path);
    float a[NT * H], b[NT * H];
    embed(direct, a);
    embed(reloaded, b);
    ck_assert_uint_eq(direct->info.gemm_bytes, reloaded->info.gemm_bytes);
    ck_assert_msg(memcmp(a, b, sizeof a) == 0, "the reloaded mixed file gives other vectors");
    mt_model_free(reloaded);
    /* a variant that names no mix takes the one the file records */
    const char *none[] = {NULL, ""};
    for (int i = 0; i < 2; i++) {
        reloaded = load(MT_PREC_INT8, none[i], path);
        ck_assert_str_eq(reloaded->info.mix, direct->info.mix);
        ck_assert_uint_eq(direct->info.gemm_bytes, reloaded->info.gemm_bytes);
        embed(reloaded, b);
        ck_assert_msg(memcmp(a, b, sizeof a) == 0, "the file's own mix gives other vectors");
        mt_model_free(reloaded);
    }
    mt_model_free(direct);
    /* one that names another mix (uniform included) is refused */
    const char *others[] = {"*=int8; ffn_out@0=fp16; qkv@5=fp32", "*=int8"};
    for (int i = 0; i < 2; i++) {
        mt_model *m = NULL;
        mt_model_opts o = {.precision = MT_PREC_INT8, .mix = others[i], .weights = path};
        ck_assert_int_eq(mt_model_load(MODEL_DIR, be, &o, &m, &err), MT_EINVAL);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(err.msg, "quantized with mix") && strstr(err.msg, path), "%s",
                      err.msg);
    }
    unlink(path);
}
END_TEST

START_TEST(a_bad_rule_is_refused_by_name)
{
    mt_model *m = NULL;
    mt_err err = {0};
    mt_model_opts o = {.precision = MT_PREC_INT8, .mix = "*=int8; ffn@0=fp16"};
    ck_assert_int_eq(mt_model_load(MODEL_DIR, be, &o, &m, &err), MT_EINVAL);
    ck_assert_msg(strstr(err.msg, "mix: mix rule 'ffn@0=fp16': the GEMM kind"), "%s", err.msg);
    o.mix = "qkv=tf32"; /* a precision the CPU backend does not run */
    ck_assert_int_eq(mt_model_load(MODEL_DIR, be, &o, &m, &err), MT_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "tf32"), "%s", err.msg);
}
END_TEST

START_TEST(the_mix_search_meets_its_budget_or_says_why_not)
{
    mt_mix_search_opts so = {.load = mt_model_load, .low = MT_PREC_INT8,
                             .high = MT_PREC_FP32, .calib = {MT_CALIB_ABSMAX, 100.0}};
    static mt_mix_search_result r;
    mt_err err = {0};
    /* the loader is the caller's (engine/ calls nothing in models/) */
    so.load = NULL;
    so.budget_cos = 0.5;
    ck_assert_int_eq(mt_mix_search(MODEL_DIR, be, &so, &r, &err), MT_EINVAL);
    ck_assert_msg(strstr(err.msg, "loader"), "%s", err.msg);
    so.load = mt_model_load;
    /* a budget all-int8 meets: no search, all int8 */
    so.budget_cos = 0.5;
    ck_assert_msg(mt_mix_search(MODEL_DIR, be, &so, &r, &err) == MT_OK, "%s", err.msg);
    ck_assert_str_eq(r.mix, "*=int8");
    ck_assert_double_lt(r.low_cos, 1.0);
    ck_assert_double_eq(r.mixed_cos, r.low_cos);
    /* halfway between all-int8 and fp32 */
    so.budget_cos = 1 - (1 - r.low_cos) / 2;
    ck_assert_msg(mt_mix_search(MODEL_DIR, be, &so, &r, &err) == MT_OK, "%s", err.msg);
    ck_assert_double_ge(r.mixed_cos, so.budget_cos);
    ck_assert(r.high_share > 0 && r.high_share < 1);
    ck_assert_int_eq(r.layers, 6);
    /* its mix, loaded here, scores what it reported on the held-back half */
    const char *held[32];
    int nh = 0;
    for (int i = 1; i < mt_calib_sentences_n && nh < 32; i += 2)
        held[nh++] = mt_calib_sentences[i];
    float *a = malloc(sizeof(float) * nh * H), *b = malloc(sizeof(float) * nh * H);
    mt_model *f = load(MT_PREC_FP32, NULL, NULL), *mixed = load(MT_PREC_FP32, r.mix, NULL);
    ck_assert_int_eq(mt_model_embed_texts(f, held, NULL, nh, a, NULL, &err), MT_OK);
    ck_assert_int_eq(mt_model_embed_texts(mixed, held, NULL, nh, b, NULL, &err), MT_OK);
    double s = 0;
    for (int i = 0; i < nh; i++) {
        double ab = 0, aa = 0, bb = 0;
        for (int j = 0; j < H; j++) {
            ab += (double)a[i * H + j] * b[i * H + j];
            aa += (double)a[i * H + j] * a[i * H + j];
            bb += (double)b[i * H + j] * b[i * H + j];
        }
        s += ab / sqrt(aa * bb);
    }
    ck_assert_double_eq_tol(s / nh, r.mixed_cos, 1e-9);
    free(a);
    free(b);
    mt_model_free(f);
    mt_model_free(mixed);
    /* a budget all-fp16 cannot reach */
    so.high = MT_PREC_FP16;
    so.budget_cos = 1.0;
    ck_assert_int_eq(mt_mix_search(MODEL_DIR, be, &so, &r, &err), MT_EINVAL);
    ck_assert_msg(strstr(err.msg, "above what all-fp16 reaches"), "%s", err.msg);
}
END_TEST

/* int8g as the high precision: the search counts drops from all-int8g,
 * meets a budget halfway between all-int8 and all-int8g with a mix of the
 * two, and that mix (int8 and int8g weights in one model) saves to a
 * quantized file that reloads to the same vectors. int8 and fp32 cannot be
 * the high one of an int8 search. */
START_TEST(the_mix_search_lifts_gemms_to_int8g)
{
    mt_mix_search_opts so = {.load = mt_model_load, .low = MT_PREC_INT8,
                             .high = MT_PREC_INT8G, .calib = {MT_CALIB_ABSMAX, 100.0}};
    static mt_mix_search_result r;
    mt_err err = {0};
    so.budget_cos = 0.99999; /* between all-int8g and fp32: out of reach */
    ck_assert_int_eq(mt_mix_search(MODEL_DIR, be, &so, &r, &err), MT_EINVAL);
    ck_assert_msg(strstr(err.msg, "above what all-int8g reaches"), "%s", err.msg);
    ck_assert(r.high_cos > r.low_cos && r.high_cos < 1.0);
    so.budget_cos = (r.low_cos + r.high_cos) / 2;
    ck_assert_msg(mt_mix_search(MODEL_DIR, be, &so, &r, &err) == MT_OK, "%s", err.msg);
    ck_assert_double_ge(r.mixed_cos, so.budget_cos);
    ck_assert(r.high_share > 0 && r.high_share < 1);
    ck_assert_msg(strstr(r.mix, "=int8g") != NULL, "%s", r.mix);
    char path[64];
    snprintf(path, sizeof path, "/tmp/mt_mixg_%d.safetensors", (int)getpid());
    mt_calib_opts c = {MT_CALIB_ABSMAX, 100.0};
    ck_assert_msg(mt_model_save_quantized(MODEL_DIR, MT_PREC_INT8, &c, r.mix, path, &err) == MT_OK,
                  "%s", err.msg);
    const char *t[] = {"Group scales where they matter.", "A man is playing a guitar."};
    float a[2 * H], b[2 * H];
    mt_model *direct = load(MT_PREC_INT8, r.mix, NULL), *file = load(MT_PREC_INT8, r.mix, path);
    ck_assert_int_eq(mt_model_embed_texts(direct, t, NULL, 2, a, NULL, &err), MT_OK);
    ck_assert_int_eq(mt_model_embed_texts(file, t, NULL, 2, b, NULL, &err), MT_OK);
    ck_assert(!memcmp(a, b, sizeof a));
    mt_model_free(direct);
    mt_model_free(file);
    unlink(path);
    so.high = MT_PREC_INT8;
    ck_assert_int_eq(mt_mix_search(MODEL_DIR, be, &so, &r, &err), MT_EINVAL);
    ck_assert_msg(strstr(err.msg, "a higher one"), "%s", err.msg);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("mix_model");
    TCase *tc = tcase_create("minilm");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, rules_giving_every_gemm_one_precision_are_that_precision);
    tcase_add_test(tc, a_rule_moves_exactly_the_weights_it_names);
    tcase_add_test(tc, a_mixed_quantized_file_reloads_with_its_mix_and_refuses_other_mixes);
    tcase_add_test(tc, a_bad_rule_is_refused_by_name);
    tcase_add_test(tc, the_mix_search_meets_its_budget_or_says_why_not);
    tcase_add_test(tc, the_mix_search_lifts_gemms_to_int8g);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
