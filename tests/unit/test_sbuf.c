/* test_sbuf.c: the response writer's number formatting (server/base/sbuf.c).
 * sb_format_float must write exactly what glibc's snprintf("%.9g") writes
 * (the independent reference: correctly rounded 9 significant digits) and
 * read back to the same float, on every kind of float32: seeded random bit
 * patterns, whole binades around the values embeddings hold, powers of ten
 * and their neighbours, rounding carries (9.999999995e-3 style), the edges
 * of the integer fast path (1e-20, 1e20), subnormals, zeros and extremes.
 * Also the JSON array form and its "null" for non-finite values. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/base/sbuf.h"
#include "tests/unit/testutil.h"

/* splitmix64: a seeded stream, the same on every run */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Counts mismatches, reports the first few, asserts once. */
typedef struct {
    long bad, n;
} tally_t;

static void check_one(tally_t *t, float f)
{
    if (!isfinite(f))
        return;
    char got[40], want[40];
    int len = sb_format_float(got, f);
    snprintf(want, sizeof want, "%.9g", (double)f);
    t->n++;
    if (strcmp(got, want) != 0 || len != (int)strlen(got) || nf_bits(strtof(got, NULL)) != nf_bits(f)) {
        if (t->bad++ < 8)
            fprintf(stderr, "float 0x%08x: got \"%s\" (len %d), %%.9g gives \"%s\"\n", nf_bits(f),
                    got, len, want);
    }
}

START_TEST(matches_printf_g9_on_random_bit_patterns)
{
    tally_t t = {0, 0};
    uint64_t s = 0x243f6a8885a308d3ULL;
    for (int i = 0; i < 3000000; i++)
        check_one(&t, nf_float((uint32_t)(next_u64(&s) >> 32)));
    ck_assert_msg(t.bad == 0, "%ld of %ld differ", t.bad, t.n);
}
END_TEST

START_TEST(matches_printf_g9_across_the_binades_embeddings_use)
{
    /* floats with exponent field 100..130 (about 7e-9 .. 32, where
     * unit-norm embeddings live), every 127th code, both signs */
    tally_t t = {0, 0};
    for (uint32_t u = 100u << 23; u < 131u << 23; u += 127) {
        check_one(&t, nf_float(u));
        check_one(&t, nf_float(u | 0x80000000u));
    }
    ck_assert_msg(t.bad == 0, "%ld of %ld differ", t.bad, t.n);
}
END_TEST

START_TEST(matches_printf_g9_at_decade_edges_carries_and_path_limits)
{
    tally_t t = {0, 0};
    for (int e = -45; e <= 38; e++) {
        float p = (float)pow(10.0, e);
        uint32_t u = nf_bits(p);
        for (int d = -40; d <= 40; d++)
            if ((int64_t)u + d > 0)
                check_one(&t, nf_float((uint32_t)((int64_t)u + d)));
        /* 9.99999999x * 10^e rounds up into the next decade */
        float c = (float)(9.9999999949 * pow(10.0, e));
        for (int d = -3; d <= 3; d++)
            check_one(&t, nf_float(nf_bits(c) + (uint32_t)d));
    }
    static const float edge[] = {0.0f,     -0.0f,    1.0f,      -1.0f,   0.5f,     1e-20f,
                                 -1e-20f,  1e20f,    9.99e19f,  1e-21f,  3.4028235e38f,
                                 1.17549435e-38f,    1.4e-45f,  -1.4e-45f, 123456789.0f,
                                 999999999.0f,       1e9f,      16777216.0f, 0.1f,  0.0001f,
                                 0.00001f, 1e-5f,    9.9999997e-5f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        for (int d = -2; d <= 2; d++)
            check_one(&t, nf_float(nf_bits(edge[i]) + (uint32_t)d));
    for (uint32_t u = 1; u < 5000; u++) /* the smallest subnormals */
        check_one(&t, nf_float(u));
    ck_assert_msg(t.bad == 0, "%ld of %ld differ", t.bad, t.n);
}
END_TEST

START_TEST(array_is_json_with_null_for_non_finite)
{
    sbuf b;
    sb_init(&b);
    const float v[] = {0.5f, -0.125f, 1e-7f, NAN, INFINITY, 0.1f};
    sb_float_array(&b, v, 6);
    ck_assert_str_eq(b.data, "[0.5,-0.125,1.00000001e-07,null,null,0.100000001]");
    b.len = 0;
    sb_float_array(&b, v, 0);
    ck_assert_str_eq(b.data, "[]");
    sb_free(&b);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("sbuf");
    TCase *tc = tcase_create("float");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, matches_printf_g9_on_random_bit_patterns);
    tcase_add_test(tc, matches_printf_g9_across_the_binades_embeddings_use);
    tcase_add_test(tc, matches_printf_g9_at_decade_edges_carries_and_path_limits);
    tcase_add_test(tc, array_is_json_with_null_for_non_finite);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
