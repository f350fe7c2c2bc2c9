/* json_check.c: strict JSON syntax check for request bodies and config
 * files (json_check.h).
 * A recursive-descent walk over the bytes that builds nothing; recursion is
 * bounded by max_depth. */
#include "engine/json_check.h"

#include "engine/text/utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const unsigned char *p;
    size_t n, i;
    int max_depth;
    const char *why;
} jc;

static int fail(jc *c, const char *why)
{
    c->why = why;
    return -1;
}

/* JSON's four whitespace bytes, nothing else. */
static void ws(jc *c)
{
    while (c->i < c->n) {
        unsigned char b = c->p[c->i];
        if (b != ' ' && b != '\t' && b != '\n' && b != '\r')
            return;
        c->i++;
    }
}

static int hex4(const jc *c, size_t at, unsigned *out)
{
    if (at > c->n || c->n - at < 4)
        return -1;
    unsigned v = 0;
    for (size_t k = 0; k < 4; k++) {
        unsigned char b = c->p[at + k];
        unsigned d;
        if (b >= '0' && b <= '9')
            d = b - '0';
        else if (b >= 'a' && b <= 'f')
            d = b - 'a' + 10;
        else if (b >= 'A' && b <= 'F')
            d = b - 'A' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* A string: UTF-8, no raw control bytes, valid escapes, paired surrogates.
 * One that runs to the end is reported at its opening quote. */
static int string(jc *c)
{
    const size_t start = c->i++;
    for (;;) {
        if (c->i >= c->n) {
            c->i = start;
            return fail(c, "unterminated string");
        }
        unsigned char b = c->p[c->i];
        if (b == '"') {
            c->i++;
            return 0;
        }
        if (b < 0x20)
            return fail(c, "raw control character in a string (escape it)");
        if (b != '\\') {
            size_t k = mt_utf8_seq(c->p + c->i, c->n - c->i);
            if (!k)
                return fail(c, "invalid UTF-8 in a string");
            c->i += k;
            continue;
        }
        if (c->i + 1 >= c->n) {
            c->i = start;
            return fail(c, "unterminated string");
        }
        unsigned char e = c->p[c->i + 1];
        if (e != 'u') {
            if (!memchr("\"\\/bfnrt", e, 8))
                return fail(c, "invalid escape in a string");
            c->i += 2;
            continue;
        }
        unsigned u, lo;
        if (hex4(c, c->i + 2, &u))
            return fail(c, "invalid \\u escape");
        if (u == 0)
            return fail(c, "\\u0000 in a string is not supported");
        if (u >= 0xDC00 && u <= 0xDFFF)
            return fail(c, "unpaired surrogate in a \\u escape");
        c->i += 6;
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (c->i + 1 >= c->n || c->p[c->i] != '\\' || c->p[c->i + 1] != 'u' ||
                hex4(c, c->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return fail(c, "unpaired surrogate in a \\u escape");
            c->i += 6;
        }
    }
}

static bool digit(const jc *c)
{
    return c->i < c->n && c->p[c->i] >= '0' && c->p[c->i] <= '9';
}

/* JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int number(jc *c)
{
    if (c->p[c->i] == '-')
        c->i++;
    if (!digit(c))
        return fail(c, "invalid number");
    if (c->p[c->i] == '0') {
        c->i++;
        if (digit(c))
            return fail(c, "number with a leading zero");
    } else {
        while (digit(c))
            c->i++;
    }
    if (c->i < c->n && c->p[c->i] == '.') {
        c->i++;
        if (!digit(c))
            return fail(c, "invalid number");
        while (digit(c))
            c->i++;
    }
    if (c->i < c->n && (c->p[c->i] == 'e' || c->p[c->i] == 'E')) {
        c->i++;
        if (c->i < c->n && (c->p[c->i] == '+' || c->p[c->i] == '-'))
            c->i++;
        if (!digit(c))
            return fail(c, "invalid number");
        while (digit(c))
            c->i++;
    }
    return 0;
}

static int literal(jc *c, const char *w)
{
    size_t len = strlen(w);
    if (c->n - c->i < len || memcmp(c->p + c->i, w, len) != 0)
        return fail(c, "expected a value (true, false and null are lower case)");
    c->i += len;
    return 0;
}

static int value(jc *c, int depth);

static int container(jc *c, int depth, unsigned char close)
{
    c->i++;
    ws(c);
    if (c->i < c->n && c->p[c->i] == close) {
        c->i++;
        return 0;
    }
    for (size_t comma = 0;;) {
        ws(c);
        if (comma && c->i < c->n && c->p[c->i] == close) {
            c->i = comma;
            return fail(c, "trailing comma");
        }
        if (close == '}') {
            if (c->i >= c->n || c->p[c->i] != '"')
                return fail(c, c->i >= c->n ? "unexpected end"
                                            : "expected a string key (in double quotes)");
            if (string(c))
                return -1;
            ws(c);
            if (c->i >= c->n || c->p[c->i] != ':')
                return fail(c, "expected ':' after a key");
            c->i++;
            ws(c);
        }
        if (value(c, depth + 1))
            return -1;
        ws(c);
        if (c->i < c->n && c->p[c->i] == ',') {
            comma = c->i++;
            continue;
        }
        if (c->i < c->n && c->p[c->i] == close) {
            c->i++;
            return 0;
        }
        if (c->i >= c->n)
            return fail(c, "unexpected end");
        return fail(c, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int value(jc *c, int depth)
{
    if (c->i >= c->n)
        return fail(c, "unexpected end");
    switch (c->p[c->i]) {
    case '{':
    case '[':
        if (depth >= c->max_depth)
            return fail(c, "nested deeper than the limit");
        return container(c, depth, c->p[c->i] == '{' ? '}' : ']');
    case '"': return string(c);
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    case 'n': return literal(c, "null");
    default:
        if (c->p[c->i] == '-' || (c->p[c->i] >= '0' && c->p[c->i] <= '9'))
            return number(c);
        return fail(c, c->p[c->i] == '\'' ? "expected a value (strings take double quotes)"
                                           : "expected a value");
    }
}

int json_check(const char *buf, size_t n, int max_depth, json_check_error *e)
{
    jc c = {.p = (const unsigned char *)buf, .n = n, .max_depth = max_depth};
    ws(&c);
    int rc = value(&c, 0);
    if (rc == 0) {
        ws(&c);
        if (c.i != c.n)
            rc = fail(&c, "bytes after the JSON value");
    }
    if (rc != 0 && e) {
        e->offset = c.i;
        e->why = c.why;
    }
    return rc;
}
