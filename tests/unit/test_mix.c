/* test_mix.c: per-layer mixed precision rules (engine/quant/mix.c): the last
 * matching rule wins; the text form parses, formats and parses back to
 * the same assignment; bad rules are refused naming the rule and the
 * problem; and a full (layer, kind) map turned into rules gives every
 * weight its precision back, on seeded random maps. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/quant/mix.h"

static mt_mix parse_ok(const char *text)
{
    mt_mix m;
    mt_err err = {0};
    ck_assert_msg(mt_mix_parse(text, &m, &err) == MT_OK, "'%s': %s", text, err.msg);
    return m;
}

START_TEST(empty_and_null_give_the_default)
{
    mt_mix m = parse_ok("");
    ck_assert_int_eq(m.n, 0);
    ck_assert_int_eq(mt_mix_precision(&m, 3, MT_GEMM_QKV, MT_PREC_INT8), MT_PREC_INT8);
    ck_assert_int_eq(mt_mix_precision(NULL, 3, MT_GEMM_QKV, MT_PREC_FP8), MT_PREC_FP8);
    m = parse_ok(" ; ");
    ck_assert_int_eq(m.n, 0);
}
END_TEST

START_TEST(the_last_matching_rule_wins)
{
    mt_mix m = parse_ok("*=int8; ffn_out@0,5=fp16; ffn_out@5=bf16; qkv@2-3=fp32");
    ck_assert_int_eq(m.n, 4);
    ck_assert_int_eq(mt_mix_precision(&m, 0, MT_GEMM_FFN_OUT, MT_PREC_FP32), MT_PREC_FP16);
    ck_assert_int_eq(mt_mix_precision(&m, 5, MT_GEMM_FFN_OUT, MT_PREC_FP32), MT_PREC_BF16);
    ck_assert_int_eq(mt_mix_precision(&m, 1, MT_GEMM_FFN_OUT, MT_PREC_FP32), MT_PREC_INT8);
    ck_assert_int_eq(mt_mix_precision(&m, 2, MT_GEMM_QKV, MT_PREC_FP32), MT_PREC_FP32);
    ck_assert_int_eq(mt_mix_precision(&m, 3, MT_GEMM_QKV, MT_PREC_FP8), MT_PREC_FP32);
    ck_assert_int_eq(mt_mix_precision(&m, 4, MT_GEMM_QKV, MT_PREC_FP32), MT_PREC_INT8);
    ck_assert_int_eq(mt_mix_precision(&m, 127, MT_GEMM_ATTN_OUT, MT_PREC_FP32), MT_PREC_INT8);
    mt_mix only = parse_ok("ffn_in@1=fp16");
    ck_assert_int_eq(mt_mix_precision(&only, 1, MT_GEMM_FFN_IN, MT_PREC_INT8), MT_PREC_FP16);
    ck_assert_int_eq(mt_mix_precision(&only, 0, MT_GEMM_FFN_IN, MT_PREC_INT8), MT_PREC_INT8);
    ck_assert_int_eq(mt_mix_precision(&only, 1, MT_GEMM_FFN_OUT, MT_PREC_INT8), MT_PREC_INT8);
}
END_TEST

START_TEST(format_parses_back_to_the_same_assignment)
{
    const char *texts[] = {"*=int8; ffn_out@0,5=fp16", "qkv@0-3,7,9-11=bf16; attn_out=fp8",
                           "ffn_in@127=fp32", "*@0-127=fp16"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        mt_mix a = parse_ok(texts[i]);
        char buf[512];
        ck_assert(mt_mix_format(&a, buf, sizeof buf));
        mt_mix b = parse_ok(buf);
        for (int l = 0; l < MT_MIX_MAX_LAYERS; l++)
            for (int k = 0; k < MT_GEMM_KINDS; k++)
                ck_assert_msg(mt_mix_precision(&a, l, k, MT_PREC_TF32) ==
                                  mt_mix_precision(&b, l, k, MT_PREC_TF32),
                              "'%s' -> '%s': layer %d %s differs", texts[i], buf, l,
                              mt_gemm_kind_name(k));
    }
    mt_mix a = parse_ok("qkv@0-3,7=bf16");
    char buf[64];
    ck_assert(mt_mix_format(&a, buf, sizeof buf));
    ck_assert_str_eq(buf, "qkv@0-3,7=bf16");
    ck_assert(!mt_mix_format(&a, buf, 8));
}
END_TEST

START_TEST(bad_rules_are_refused_by_name)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"ffn_out@0=fp12", "'ffn_out@0=fp12': unknown precision"},
        {"ffn@0=fp16", "'ffn@0=fp16': the GEMM kind must be"},
        {"*=int8; ffn_out@0", "'ffn_out@0': expected kind[@layers]=precision"},
        {"qkv@=fp16", "'qkv@=fp16': no layer after '@'"},
        {"qkv@5-2=fp16", "a layer range must be a-b with a <= b"},
        {"qkv@-1=fp16", "a layer must be"},
        {"qkv@1x=fp16", "a layer must be"},
        {"qkv@200=fp16", "over 127"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mt_mix m;
        mt_err err = {0};
        ck_assert_int_eq(mt_mix_parse(bad[i].text, &m, &err), MT_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].want), "'%s': got '%s', want '%s'", bad[i].text,
                      err.msg, bad[i].want);
    }
}
END_TEST

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

START_TEST(a_map_becomes_rules_that_give_it_back)
{
    uint64_t seed = 15;
    static mt_precision map[MT_MIX_MAX_LAYERS * MT_GEMM_KINDS];
    const mt_precision cpu[] = {MT_PREC_FP32, MT_PREC_FP16, MT_PREC_BF16, MT_PREC_INT8,
                                MT_PREC_FP8};
    for (int trial = 0; trial < 500; trial++) {
        int nl = 1 + (int)(next_u64(&seed) % 48);
        mt_precision base = cpu[next_u64(&seed) % 5];
        int other = (int)(next_u64(&seed) % 4); /* 0: uniform; 3: about half changed */
        for (int i = 0; i < nl * MT_GEMM_KINDS; i++)
            map[i] = (int)(next_u64(&seed) % 6) < other ? cpu[next_u64(&seed) % 5] : base;
        mt_mix m;
        mt_err err = {0};
        ck_assert_int_eq(mt_mix_from_map(map, nl, &m, &err), MT_OK);
        for (int l = 0; l < nl; l++)
            for (int k = 0; k < MT_GEMM_KINDS; k++)
                ck_assert_int_eq(mt_mix_precision(&m, l, k, MT_PREC_TF32),
                                 map[l * MT_GEMM_KINDS + k]);
        char buf[2048];
        ck_assert(mt_mix_format(&m, buf, sizeof buf));
        mt_mix back = parse_ok(buf);
        for (int l = 0; l < nl; l++)
            for (int k = 0; k < MT_GEMM_KINDS; k++)
                ck_assert_int_eq(mt_mix_precision(&back, l, k, MT_PREC_TF32),
                                 map[l * MT_GEMM_KINDS + k]);
    }
    /* one changed weight is two rules */
    for (int i = 0; i < 6 * MT_GEMM_KINDS; i++)
        map[i] = MT_PREC_INT8;
    map[5 * MT_GEMM_KINDS + MT_GEMM_FFN_OUT] = MT_PREC_FP16;
    mt_mix m;
    mt_err err = {0};
    ck_assert_int_eq(mt_mix_from_map(map, 6, &m, &err), MT_OK);
    char buf[128];
    ck_assert(mt_mix_format(&m, buf, sizeof buf));
    ck_assert_str_eq(buf, "*=int8; ffn_out@5=fp16");
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("mix");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, empty_and_null_give_the_default);
    tcase_add_test(tc, the_last_matching_rule_wins);
    tcase_add_test(tc, format_parses_back_to_the_same_assignment);
    tcase_add_test(tc, bad_rules_are_refused_by_name);
    tcase_add_test(tc, a_map_becomes_rules_that_give_it_back);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
