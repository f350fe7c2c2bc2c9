/* jsonfile.c: whole-file reads and JSON file parsing with named errors
 * (the file, line, column and why: engine/json_check.c says why). */
#include "engine/jsonfile.h"

#include "engine/json_check.h"

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

/* A syntax error at byte off of text: "label: line L, column C: invalid
 * JSON: why" (C in characters: UTF-8 continuation bytes do not count). */
static mt_status syntax_error(const char *text, size_t len, size_t off, const char *label,
                              const char *why, mt_err *err)
{
    int line = 1, col = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
            col++;
        }
    }
    return mt_fail(err, MT_EFORMAT, "%s: line %d, column %d: invalid JSON%s%s", label, line, col,
                   why ? ": " : "", why ? why : "");
}

mt_status mt_json_parse(const char *text, size_t len, const char *label, bool strict,
                        cJSON **out, mt_err *err)
{
    json_check_error je;
    if (strict && json_check(text, len, MT_JSON_FILE_DEPTH, &je) != 0)
        return syntax_error(text, len, je.offset, label, je.why, err);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (j) {
        *out = j;
        return MT_OK;
    }
    /* cJSON says where it stopped, not why: the check says both */
    if (!strict && json_check(text, len, MT_JSON_FILE_DEPTH, &je) != 0)
        return syntax_error(text, len, je.offset, label, je.why, err);
    return syntax_error(text, len, end ? (size_t)(end - text) : 0, label, NULL, err);
}

mt_status mt_json_load(const char *path, cJSON **out, mt_err *err)
{
    char *text;
    size_t len;
    mt_status st = mt_read_file(path, 64u << 20, &text, &len, err);
    if (st != MT_OK)
        return st;
    st = mt_json_parse(text, len, path, false, out, err);
    free(text);
    return st;
}
