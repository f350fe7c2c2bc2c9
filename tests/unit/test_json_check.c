/* test_json_check.c: the strict request-body JSON check accepts JSON and
 * refuses what cJSON would let through (engine/json_check.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_check.h"

static int ok(const char *s)
{
    json_check_error e;
    return json_check(s, strlen(s), 64, &e) == 0;
}

START_TEST(json_check_accepts_valid_bodies)
{
    const char *good[] = {
        "{}", "[]", " {\"a\": [1, -2.5e+3, 0, 0.5, true, false, null]}\r\n",
        "{\"input\":\"caf\\u00e9 \\ud83d\\ude00 \xe4\xb8\xad\"}", "\"x\"", "0", "-0.0E-1",
        "{\"a\":{\"b\":{\"c\":[[[]]]}}}",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(ok(good[i]), "refused: %s", good[i]);
}
END_TEST

START_TEST(json_check_refuses_what_cjson_lets_through)
{
    const char *bad[] = {
        "{} x", "{}{}", "[0384]", "[01]", "{\"a\":\"\x01\"}", "{\x01\"a\":1}", "{\"a\":\"\xff\"}",
        "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00x\"}",
        "{\"a\":\"\\u0000\"}", "{\"a\":\"\\x\"}", "[1,]", "{\"a\":1,}", "[1 2]", "{'a':1}",
        "[.5]", "[1.]", "[1e]", "[+1]", "[tru]", "", "   ", "{\"a\"}", "[\"abc", "{\"a\":1",
        "[NaN]", "[Infinity]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!ok(bad[i]), "accepted: %s", bad[i]);
}
END_TEST

START_TEST(json_check_caps_depth_and_says_where)
{
    char deep[300];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    deep[200] = 0;
    json_check_error e;
    ck_assert_int_eq(json_check(deep, 200, 64, &e), -1);
    ck_assert_uint_eq(e.offset, 64);
    ck_assert_ptr_nonnull(strstr(e.why, "deeper"));
    ck_assert_int_eq(json_check(deep + 36, 128, 64, &e), 0); /* exactly 64 deep */
    ck_assert_int_eq(json_check("{\"a\":1} x", 9, 64, &e), -1);
    ck_assert_uint_eq(e.offset, 8);
}
END_TEST

START_TEST(json_check_says_why_and_where)
{
    static const struct {
        const char *text;
        size_t offset;
        const char *why;
    } cases[] = {
        {"[1,]", 2, "trailing comma"},          /* at the comma */
        {"{\"a\":1,\n }", 6, "trailing comma"},
        {"{\"a\" 1}", 5, "expected ':' after a key"},
        {"{\"a\":1 \"b\":2}", 7, "expected ',' or '}'"},
        {"[\"abc", 1, "unterminated string"},    /* at its opening quote */
        {"{\"a\":}", 5, "expected a value"},
        {"{'a':1}", 1, "expected a string key"},
        {"[1", 2, "unexpected end"},
        {"[01]", 2, "leading zero"},
        {"{} x", 3, "bytes after the JSON value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_check_error e;
        ck_assert_int_eq(json_check(cases[i].text, strlen(cases[i].text), 64, &e), -1);
        ck_assert_msg(strstr(e.why, cases[i].why), "%s: \"%s\", not \"%s\"", cases[i].text, e.why,
                      cases[i].why);
        ck_assert_msg(e.offset == cases[i].offset, "%s: at %zu, not %zu", cases[i].text, e.offset,
                      cases[i].offset);
    }
}
END_TEST

START_TEST(json_check_is_linear_on_a_huge_flat_object)
{
    /* 80k distinct keys: the check must not be quadratic in anything */
    size_t cap = 2u << 20, n = 0;
    char *b = malloc(cap);
    b[n++] = '{';
    for (int i = 0; i < 80000; i++)
        n += (size_t)snprintf(b + n, cap - n, "%s\"k%d\":%d", i ? "," : "", i, i);
    b[n++] = '}';
    json_check_error e;
    ck_assert_int_eq(json_check(b, n, 64, &e), 0);
    free(b);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("json_check");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, json_check_accepts_valid_bodies);
    tcase_add_test(tc, json_check_refuses_what_cjson_lets_through);
    tcase_add_test(tc, json_check_caps_depth_and_says_where);
    tcase_add_test(tc, json_check_says_why_and_where);
    tcase_add_test(tc, json_check_is_linear_on_a_huge_flat_object);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
