/* check_main.h: the one main() of the unit-test programs. A test file
 * defines `static Suite *test_suite(void)` (which may also print what a
 * reader needs to reproduce the run, e.g. a seed) and includes this file
 * last; main reads the runtime options first as mantissa's main() does
 * (engine/options.h: a bad value stops the run; the kernels get their
 * settings, e.g. the ISA cap), runs the suite and exits with its verdict. */
#ifndef MT_TESTS_CHECK_MAIN_H
#define MT_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/options.h"

static Suite *test_suite(void);

int main(void)
{
    mt_err err;
    if (mt_options_init(&err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return EXIT_FAILURE;
    }
    fputs(mt_options_warnings(), stderr);
    SRunner *sr = srunner_create(test_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
