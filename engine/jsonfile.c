/* jsonfile.c: whole-file reads and JSON file parsing with named errors. */
#include "engine/jsonfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mt_status mt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, mt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    mt_status st = MT_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                st = mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n > max_bytes) {
            st = mt_fail(err, MT_ELIMIT, "%s: larger than %zu bytes", path, max_bytes);
            break;
        }
        if (got == 0) {
            if (ferror(f))
                st = mt_fail(err, MT_EIO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (st != MT_OK) {
        free(buf);
        return st;
    }
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return MT_OK;
}

mt_status mt_json_load(const char *path, cJSON **out, mt_err *err)
{
    char *text;
    size_t len;
    mt_status st = mt_read_file(path, 64u << 20, &text, &len, err);
    if (st != MT_OK)
        return st;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        int line = 1;
        for (size_t i = 0; i < off && i < len; i++)
            line += text[i] == '\n';
        free(text);
        return mt_fail(err, MT_EFORMAT, "%s: line %d: invalid JSON", path, line);
    }
    free(text);
    *out = j;
    return MT_OK;
}
