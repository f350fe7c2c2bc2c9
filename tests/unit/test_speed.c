/* test_speed.c: engine/speed.c, the timing `mantissa cpu --measure` and the
 * server's measure share: the probe texts' figures at batch 1 and 32 on
 * MiniLM (there and positive; no speed is asserted), the ratios to FP32,
 * the slower-at-both decision and the warning's words. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/speed.h"
#include "engine/text/probe_text.h"
#include "tests/unit/tu_model.h"

#define MINILM_DIR "models/all-MiniLM-L6-v2"

START_TEST(speed_probe_figures_at_batch_1_and_32)
{
    mt_backend *be = tu_cpu_backend();
    mt_model *m = tu_load_model(MINILM_DIR, be, MT_PREC_INT8);
    int32_t *ids, *off;
    int n = 0;
    mt_err err;
    ck_assert_msg(mt_probe_tokens(m, &ids, &off, &n, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(n, mt_probe_texts_n);
    for (int i = 0; i < n; i++) /* [CLS] ... [SEP] at least */
        ck_assert_int_ge(off[i + 1] - off[i], 3);
    /* one timed run and no warm-up: the least a figure takes */
    double med = -1;
    size_t runs = 0;
    const mt_timing once = {0, 1, 0, false};
    ck_assert_msg(mt_model_median_run(m, ids, off, n, 3, once, &med, &runs, &err) == MT_OK,
                  "%s", err.msg);
    ck_assert(runs == 1 && med > 0 && isfinite(med));
    mt_speed sp;
    const mt_timing each = {0, 1, 0, true};
    ck_assert_msg(mt_model_probe_speed(m, each, &sp, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(sp.batch[0], 1);
    ck_assert_int_eq(sp.batch[1], MT_SPEED_BIG_BATCH);
    ck_assert(sp.tps[0] > 0 && isfinite(sp.tps[0]) && sp.tps[1] > 0 && isfinite(sp.tps[1]));
    free(ids);
    free(off);
    mt_model_free(m);
    mt_backend_destroy(be);
}
END_TEST

START_TEST(speed_ratios_the_decision_and_the_warning)
{
    const mt_speed fp32 = {{1, 32}, {100, 400}}, slow = {{1, 32}, {80, 360}},
                   mixed = {{1, 32}, {120, 300}}, none = {{1, 32}, {0, 0}};
    double r[2];
    mt_speed_vs(&slow, &fp32, r);
    ck_assert_double_eq_tol(r[0], 0.8, 1e-12);
    ck_assert_double_eq_tol(r[1], 0.9, 1e-12);
    ck_assert(mt_speed_slower(r));
    char buf[320];
    mt_speed_warning(buf, sizeof buf, "fp16", "avx2", r, 32, 65.84, 86.1);
    ck_assert_str_eq(buf, "fp16 is slower than fp32 on this CPU at ISA avx2 (0.80x at batch 1, "
                          "0.90x at batch 32); what it buys here is memory: 65.8 MiB against "
                          "fp32's 86.1");
    mt_speed_vs(&mixed, &fp32, r); /* faster at one size: no warning */
    ck_assert(!mt_speed_slower(r));
    mt_speed_vs(&fp32, &fp32, r); /* FP32 against itself: 1, not slower */
    ck_assert(r[0] == 1.0 && r[1] == 1.0 && !mt_speed_slower(r));
    mt_speed_vs(&fp32, &none, r); /* no FP32 figures: 0, never a division by zero */
    ck_assert(r[0] == 0 && r[1] == 0);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("speed");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, speed_probe_figures_at_batch_1_and_32);
    tcase_add_test(tc, speed_ratios_the_decision_and_the_warning);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
