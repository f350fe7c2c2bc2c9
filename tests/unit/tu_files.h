/* tu_files.h: helpers for the unit tests that make folders at test time
 * (model folders with a tools/ script, tokenizer files edited): the Python
 * to run a tool under, a work folder made and removed, a folder copied,
 * JSON files read, written, and rewritten with a key set or dropped.
 * Header-only (static inline): each test is one program. The helpers that
 * assert (tu_mkwork, tu_load_json, tu_save_json) fail the running check
 * test; the others return 0 on success. Models and backends:
 * tests/unit/tu_model.h. */
#ifndef MT_TESTS_TU_FILES_H
#define MT_TESTS_TU_FILES_H

#include <cJSON.h>
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/jsonfile.h"

/* The Python the tools run under: $PYTHON, the repo's .venv, or python3. */
static inline const char *tu_python(void)
{
    const char *p = getenv("PYTHON");
    if (p && *p)
        return p;
    return access(".venv/bin/python", X_OK) == 0 ? ".venv/bin/python" : "python3";
}

/* A fresh folder /tmp/<prefix>-XXXXXX (mkdtemp), its path in buf. */
static inline void tu_mkwork(char *buf, size_t cap, const char *prefix)
{
    snprintf(buf, cap, "/tmp/%s-XXXXXX", prefix);
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

/* Folder dir and all in it removed (nothing when dir is ""); 0 on success,
 * else it says so on stderr. */
static inline int tu_rmwork(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!dir[0] || system(cmd) == 0)
        return 0;
    fprintf(stderr, "could not remove %s\n", dir);
    return -1;
}

/* A fresh copy of folder src at dst (dst removed first); 0 on success. */
static inline int tu_copy_dir(const char *src, const char *dst)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, src, dst);
    return system(cmd);
}

/* The JSON in path; the test fails with the reader's message if it is not. */
static inline cJSON *tu_load_json(const char *path)
{
    cJSON *j = NULL;
    mt_err err = {{0}};
    ck_assert_msg(mt_json_load(path, &j, &err) == MT_OK, "%s", err.msg);
    return j;
}

/* j written to path, indented (cJSON_Print) or compact
 * (cJSON_PrintUnformatted); 0 on success. */
static inline int tu_write_json(const char *path, const cJSON *j, bool pretty)
{
    char *text = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
    FILE *f = fopen(path, "w");
    int rc = f && text && fputs(text, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(text);
    return rc;
}

/* tu_write_json, or the test fails naming path. */
static inline void tu_save_json(const char *path, const cJSON *j, bool pretty)
{
    ck_assert_msg(tu_write_json(path, j, pretty) == 0, "cannot write %s", path);
}

/* The JSON object in path (a new empty one where make and path does not
 * exist) with key set to value (a JSON text; NULL drops the key), written
 * back indented; 0 on success. */
static inline int tu_edit_json(const char *path, const char *key, const char *value, bool make)
{
    cJSON *j = NULL;
    mt_err err;
    if (make && access(path, R_OK) != 0)
        j = cJSON_CreateObject();
    else if (mt_json_load(path, &j, &err) != MT_OK)
        return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (value)
        cJSON_AddItemToObject(j, key, cJSON_Parse(value));
    int rc = tu_write_json(path, j, true);
    cJSON_Delete(j);
    return rc;
}

/* tu_edit_json on a file that must exist. */
static inline int tu_rewrite_json(const char *path, const char *key, const char *value)
{
    return tu_edit_json(path, key, value, false);
}

#endif
