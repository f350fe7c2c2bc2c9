/* tu_model.h: helpers for the unit tests that load models (from folders
 * made at test time or the fetched ones): a CPU backend for a checked
 * fixture, and a model loaded at a precision. Each fails the running check
 * test with the error's message. Header-only (static inline): each test is
 * one program. Folders and JSON files: tests/unit/tu_files.h. */
#ifndef MT_TESTS_TU_MODEL_H
#define MT_TESTS_TU_MODEL_H

#include <check.h>

#include "engine/model.h"

/* A CPU backend at the default thread count (a checked fixture's setup). */
static inline mt_backend *tu_cpu_backend(void)
{
    mt_backend *be = NULL;
    mt_err err;
    ck_assert_msg(mt_backend_cpu_create(0, &be, &err) == MT_OK, "%s", err.msg);
    return be;
}

/* dir's model on be with options o; the test fails naming dir. */
static inline mt_model *tu_load_opts(const char *dir, mt_backend *be, const mt_model_opts *o)
{
    mt_err err = {{0}};
    mt_model *m = NULL;
    ck_assert_msg(mt_model_load(dir, be, o, &m, &err) == MT_OK, "%s: %s", dir, err.msg);
    return m;
}

/* dir's model on be at precision p (scales from each tensor's absolute
 * maximum where p has them); the test fails naming dir. */
static inline mt_model *tu_load_model(const char *dir, mt_backend *be, mt_precision p)
{
    const mt_model_opts o = {.precision = p, .calib = {MT_CALIB_ABSMAX, 100.0}};
    return tu_load_opts(dir, be, &o);
}

#endif
