/* json_check.h: strict RFC 8259 syntax check of a request body or a config
 * file before cJSON sees it. cJSON (1.7.15) accepts things JSON does not:
 * bytes after the value, leading zeros, raw control bytes in strings and as
 * whitespace, and invalid UTF-8, which then flows into tokenizers and error
 * messages. This check refuses all of them, caps the nesting depth, is
 * linear in the size whatever its shape, and says why and where it
 * stopped (engine/jsonfile.h turns that into a line and column). */
#ifndef MT_ENGINE_JSON_CHECK_H
#define MT_ENGINE_JSON_CHECK_H

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
