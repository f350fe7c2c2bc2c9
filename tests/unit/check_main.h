/* check_main.h: the one main() of the unit-test programs. A test file
 * defines `static Suite *test_suite(void)` (which may also print what a
 * reader needs to reproduce the run, e.g. a seed) and includes this file
 * last; main runs the suite and exits with its verdict. */
#ifndef MT_TESTS_CHECK_MAIN_H
#define MT_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

static Suite *test_suite(void);

int main(void)
{
    SRunner *sr = srunner_create(test_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
