/* tu_files.h: helpers for the unit tests that make model folders at test
 * time with a tools/ script: the Python to run it under, a folder copied,
 * and a JSON file of one with a key set or dropped. Header-only (static):
 * each test is one program. */
#ifndef MT_TESTS_TU_FILES_H
#define MT_TESTS_TU_FILES_H

#include <cJSON.h>
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

/* A fresh copy of folder src at dst (dst removed first); 0 on success. */
static inline int tu_copy_dir(const char *src, const char *dst)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, src, dst);
    return system(cmd);
}

/* The JSON object in path with key set to value (a JSON text; NULL drops
 * the key), written back; 0 on success. */
static inline int tu_rewrite_json(const char *path, const char *key, const char *value)
{
    cJSON *j = NULL;
    mt_err err;
    if (mt_json_load(path, &j, &err) != MT_OK)
        return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (value)
        cJSON_AddItemToObject(j, key, cJSON_Parse(value));
    char *text = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    int rc = f && text && fputs(text, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(text);
    cJSON_Delete(j);
    return rc;
}

#endif
