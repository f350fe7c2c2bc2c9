/* json_check.h: strict RFC 8259 syntax check of a request body before cJSON
 * sees it. cJSON (1.7.15) accepts things JSON does not: bytes after the
 * value, leading zeros, raw control bytes in strings and as whitespace, and
 * invalid UTF-8, which then flows into tokenizers and error messages. This
 * check refuses all of them, caps the nesting depth, and is linear in the
 * body size whatever its shape. */
#ifndef MT_SERVER_JSON_CHECK_H
#define MT_SERVER_JSON_CHECK_H

#include <stddef.h>

typedef struct {
    size_t offset;   /* byte where the check failed */
    const char *why; /* static text */
} json_check_error;

/* 0 when buf[0..n) is exactly one JSON value (surrounding whitespace
 * allowed) nested at most max_depth deep, with no "\u0000" in strings (the
 * parser's strings are C strings); -1 otherwise, filling e. */
int json_check(const char *buf, size_t n, int max_depth, json_check_error *e);

#endif
