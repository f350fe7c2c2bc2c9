/* test_registry.c: checks engine/registry.c, the backend rows: the host's
 * row first and always usable, the config's device choices matching the
 * rows, supports() following the precision traits' columns, and the
 * devices listed here (the host's first; a CUDA device only where one is).
 * Also the CUDA entry points' answers where there is no CUDA. */
#include "engine/registry.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "engine/cuda/backend.h"

START_TEST(rows_and_choices_agree)
{
    const int n = mt_backend_reg_count();
    ck_assert_int_ge(n, 2);
    ck_assert_str_eq(mt_device_choices[0], "auto");
    ck_assert_ptr_null(mt_device_choice_reg(0));
    for (int i = 0; i < n; i++) {
        const mt_backend_reg *r = mt_backend_reg_at(i);
        ck_assert_ptr_nonnull(r);
        ck_assert_str_eq(mt_device_choices[i + 1], r->name);
        ck_assert_ptr_eq(mt_device_choice_reg(i + 1), r);
        ck_assert_ptr_eq(mt_backend_reg_find(r->name), r);
        ck_assert_int_eq(r->host, i == 0);
        ck_assert(r->probe && r->describe && r->supports && r->create && r->label);
        ck_assert_int_lt((int)r->kind, MT_BK_COUNT);
    }
    ck_assert_ptr_null(mt_device_choices[n + 1]);
    ck_assert_ptr_null(mt_backend_reg_at(n));
    ck_assert_ptr_null(mt_backend_reg_find("tpu"));
    ck_assert_ptr_eq(mt_backend_reg_host(), mt_backend_reg_at(0));
    ck_assert_str_eq(mt_backend_reg_host()->name, "cpu");
    ck_assert_str_eq(mt_backend_reg_at(1)->name, "cuda");
}
END_TEST

START_TEST(supports_follows_the_traits)
{
    const mt_backend_reg *cpu = mt_backend_reg_find("cpu"), *cuda = mt_backend_reg_find("cuda");
    ck_assert(!cpu->supports(MT_PREC_TF32, MT_OP_GEMM_WEIGHT));
    ck_assert(cuda->supports(MT_PREC_TF32, MT_OP_GEMM_WEIGHT));
    ck_assert(cpu->supports(MT_PREC_INT8G, MT_OP_GEMM_WEIGHT));
    ck_assert(!cuda->supports(MT_PREC_INT8G, MT_OP_GEMM_WEIGHT));
    for (int i = 0; i < mt_backend_reg_count(); i++) {
        const mt_backend_reg *r = mt_backend_reg_at(i);
        for (int p = 0; p < MT_PREC_COUNT; p++) {
            ck_assert_int_eq(r->supports((mt_precision)p, MT_OP_GEMM_WEIGHT),
                             mt_prec_gemm((mt_precision)p, r->kind) != MT_GEMM_NONE);
            /* the other ops run in FP32 only */
            ck_assert_int_eq(r->supports((mt_precision)p, MT_OP_LAYERNORM), p == MT_PREC_FP32);
        }
        ck_assert(!r->supports(MT_PREC_COUNT, MT_OP_GEMM_WEIGHT));
        ck_assert(!r->supports(MT_PREC_FP32, MT_OP_COUNT));
    }
}
END_TEST

START_TEST(the_host_is_always_a_device)
{
    mt_device d[8];
    const int n = mt_devices_list(d, 8);
    ck_assert_int_ge(n, 1);
    ck_assert_ptr_eq(d[0].reg, mt_backend_reg_host());
    ck_assert_int_eq(d[0].index, 0);
    /* a CUDA device only where the CUDA row says it has one */
    char why[256] = "";
    const int ncuda = mt_backend_reg_find("cuda")->probe(why, sizeof why);
    ck_assert_int_eq(n, 1 + ncuda);
    if (ncuda == 0)
        ck_assert_msg(why[0], "no reason given for no CUDA device");
    ck_assert_int_eq(mt_devices_list(d, 0), 0);

    mt_backend *be = NULL;
    mt_err err;
    ck_assert_int_eq(mt_backend_reg_host()->create(0, 1, &be, &err), MT_OK);
    ck_assert_str_eq(be->ops->name, "cpu");
    ck_assert_int_eq(be->threads, 1);
    mt_backend_destroy(be);
    ck_assert_int_eq(mt_backend_reg_host()->create(1, 1, &be, &err), MT_EINVAL);
}
END_TEST

/* Without a CUDA device (this test's machines): every entry point gives its
 * row's answer (engine/cuda/entry_points.h) through dl.c or none.c. */
START_TEST(cuda_without_a_device_answers_no)
{
    if (mt_cuda_device_count() > 0)
        return; /* a GPU here: tests/gpu covers it */
    char buf[256] = "";
    ck_assert_int_eq(mt_cuda_describe(0, buf, sizeof buf), MT_EUNSUPPORTED);
    ck_assert_msg(buf[0], "no reason");
    mt_backend *be = (mt_backend *)1;
    mt_err err;
    ck_assert_int_ne(mt_backend_reg_find("cuda")->create(0, 0, &be, &err), MT_OK);
    mt_cuda_opts o;
    mt_cuda_opts_default(&o);
    ck_assert_int_eq(o.graphs, 1);
    ck_assert_int_eq(o.max_len_hint, 512);
    mt_cuda_counts c;
    memset(&c, 0xff, sizeof c);
    mt_cuda_get_counts(NULL, &c);
    ck_assert_int_eq(c.fused, 0);
    ck_assert(!mt_cuda_fp8_w8a8_enabled(NULL));
    ck_assert_int_eq(mt_cuda_weight_crossover(NULL), -1);
    ck_assert_int_eq(mt_cuda_weight_path(NULL, 128), -1);
    bool replay;
    ck_assert_int_eq(mt_cuda_graph_end(NULL, &err), MT_EUNSUPPORTED);
    ck_assert_int_eq(mt_cuda_graph_begin(NULL, 1, &replay, &err), MT_EUNSUPPORTED);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, rows_and_choices_agree);
    tcase_add_test(tc, supports_follows_the_traits);
    tcase_add_test(tc, the_host_is_always_a_device);
    tcase_add_test(tc, cuda_without_a_device_answers_no);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
