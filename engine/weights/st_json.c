/* st_json.c: the strict JSON syntax check of a safetensors header, run
 * before cJSON sees it (cJSON accepts numbers such as "01", control bytes
 * as whitespace and invalid UTF-8, and its length-bounded parser can read a
 * byte past an unterminated input), and the names shown in messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/weights/st_internal.h"
#include "engine/text/utf8.h"

/* ======================================================================
 * UTF-8 and strict JSON syntax
 * ====================================================================== */

/* The writer refuses strings the reader (and the reference) would reject. */
bool st_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = mt_utf8_seq(p + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

/* Names in messages: they come from the file (or the caller) and may hold
 * control bytes or be very long, and messages end up in logs and in
 * responses. Copies s into buf (ST_SHOW_CAP bytes), control bytes as '?',
 * cut on a UTF-8 boundary with "..." when too long. ST_SHOW gives each use
 * its own buffer, living until the end of the enclosing block. */
const char *st_show(const char *s, char *buf)
{
    size_t n = strlen(s), keep = n;
    if (keep > ST_SHOW_CAP - 4) {
        keep = ST_SHOW_CAP - 4;
        while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
            keep--;
    }
    for (size_t i = 0; i < keep; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = c < 0x20 || c == 0x7F ? '?' : (char)c;
    }
    strcpy(buf + keep, keep < n ? "..." : "");
    return buf;
}

/* st_show for n bytes that need not end in a NUL nor be free of one (a
 * string from a pickle): NUL bytes are shown as '?' like control bytes. */
const char *st_show_n(const void *s, size_t n, char *buf)
{
    const unsigned char *p = s;
    size_t keep = n;
    if (keep > ST_SHOW_CAP - 4) {
        keep = ST_SHOW_CAP - 4;
        while (keep > 0 && (p[keep] & 0xC0) == 0x80)
            keep--;
    }
    for (size_t i = 0; i < keep; i++)
        buf[i] = p[i] < 0x20 || p[i] == 0x7F ? '?' : (char)p[i];
    strcpy(buf + keep, keep < n ? "..." : "");
    return buf;
}

/* Cursor of the JSON syntax check; why/i say what failed where, key is the
 * raw text of the top-level key being read (the tensor, for messages), and
 * num_len is set when the failure is a number that is not a plain integer. */
typedef struct {
    const unsigned char *p;
    size_t n, i;
    const char *why;
    const unsigned char *key;
    size_t key_len;
    size_t num_len;
} st_js;

static int st_js_fail(st_js *js, const char *why)
{
    js->why = why;
    return -1;
}

/* JSON's four whitespace bytes only (cJSON also skips other control bytes). */
static void st_js_ws(st_js *js)
{
    while (js->i < js->n) {
        unsigned char c = js->p[js->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        js->i++;
    }
}

/* Reads the 4 hex digits of a \u escape at position at. */
static int st_js_hex4(const st_js *js, size_t at, unsigned *out)
{
    if (at > js->n || js->n - at < 4)
        return -1;
    unsigned v = 0;
    for (size_t k = 0; k < 4; k++) {
        unsigned char c = js->p[at + k];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* A string: valid escapes, paired surrogates, UTF-8, no raw control bytes.
 * \u0000 is refused: names and metadata are C strings here. */
static int st_js_string(st_js *js)
{
    js->i++; /* the opening quote */
    for (;;) {
        if (js->i >= js->n)
            return st_js_fail(js, "unterminated string");
        unsigned char c = js->p[js->i];
        if (c == '"') {
            js->i++;
            return 0;
        }
        if (c < 0x20)
            return st_js_fail(js, "control character in a string");
        if (c != '\\') {
            size_t k = mt_utf8_seq(js->p + js->i, js->n - js->i);
            if (!k)
                return st_js_fail(js, "invalid UTF-8 in a string");
            js->i += k;
            continue;
        }
        if (js->i + 1 >= js->n)
            return st_js_fail(js, "unterminated string");
        unsigned char e = js->p[js->i + 1];
        if (e != 'u') {
            if (!memchr("\"\\/bfnrt", e, 8))
                return st_js_fail(js, "invalid escape in a string");
            js->i += 2;
            continue;
        }
        unsigned u, lo;
        if (st_js_hex4(js, js->i + 2, &u))
            return st_js_fail(js, "invalid \\u escape");
        if (u == 0)
            return st_js_fail(js, "\\u0000 (NUL) in a string is not supported");
        if (u >= 0xDC00 && u <= 0xDFFF)
            return st_js_fail(js, "unpaired surrogate in a \\u escape");
        js->i += 6;
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (js->i + 1 >= js->n || js->p[js->i] != '\\' || js->p[js->i + 1] != 'u'
                || st_js_hex4(js, js->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return st_js_fail(js, "unpaired surrogate in a \\u escape");
            js->i += 6;
        }
    }
}

static bool st_js_digit(const st_js *js)
{
    return js->i < js->n && js->p[js->i] >= '0' && js->p[js->i] <= '9';
}

/* A number in JSON's grammar (no leading zeros, '+', or bare '.'), which
 * must also be a plain non-negative integer: numbers in a valid header are
 * only shape dims and offsets, which the reference reads as usize, refusing
 * "-1", "1.0" and "1e2" alike. cJSON's doubles cannot tell "1.0" from "1",
 * so this is checked on the text. */
static int st_js_number(st_js *js)
{
    size_t start = js->i;
    if (js->p[js->i] == '-')
        js->i++;
    if (!st_js_digit(js))
        return st_js_fail(js, "invalid number");
    if (js->p[js->i] == '0') {
        js->i++;
    } else {
        while (st_js_digit(js))
            js->i++;
    }
    if (js->i < js->n && js->p[js->i] == '.') {
        js->i++;
        if (!st_js_digit(js))
            return st_js_fail(js, "invalid number");
        while (st_js_digit(js))
            js->i++;
    }
    if (js->i < js->n && (js->p[js->i] == 'e' || js->p[js->i] == 'E')) {
        js->i++;
        if (js->i < js->n && (js->p[js->i] == '+' || js->p[js->i] == '-'))
            js->i++;
        if (!st_js_digit(js))
            return st_js_fail(js, "invalid number");
        while (st_js_digit(js))
            js->i++;
    }
    size_t len = js->i - start;
    if (len > ST_JSON_MAX_NUMBER) {
        js->i = start;
        return st_js_fail(js, "number longer than 32 characters");
    }
    for (size_t k = start; k < js->i; k++) {
        unsigned char c = js->p[k];
        if (c < '0' || c > '9') {
            js->i = start;
            js->num_len = len;
            return st_js_fail(js, "is not a non-negative integer");
        }
    }
    return 0;
}

static int st_js_literal(st_js *js, const char *word)
{
    size_t len = strlen(word);
    if (js->n - js->i < len || memcmp(js->p + js->i, word, len) != 0)
        return st_js_fail(js, "unexpected character");
    js->i += len;
    return 0;
}

static int st_js_value(st_js *js, int depth);

/* An object or array; close is '}' or ']'. */
static int st_js_container(st_js *js, int depth, unsigned char close)
{
    js->i++; /* the opening bracket */
    st_js_ws(js);
    if (js->i < js->n && js->p[js->i] == close) {
        js->i++;
        return 0;
    }
    for (;;) {
        st_js_ws(js);
        if (close == '}') {
            if (js->i >= js->n || js->p[js->i] != '"')
                return st_js_fail(js, "expected a string key");
            size_t key_at = js->i + 1;
            if (st_js_string(js))
                return -1;
            if (depth == 0) {
                js->key = js->p + key_at;
                js->key_len = js->i - 1 - key_at;
            }
            st_js_ws(js);
            if (js->i >= js->n || js->p[js->i] != ':')
                return st_js_fail(js, "expected ':'");
            js->i++;
            st_js_ws(js);
        }
        if (st_js_value(js, depth + 1))
            return -1;
        st_js_ws(js);
        if (js->i < js->n && js->p[js->i] == ',') {
            js->i++;
            continue;
        }
        if (js->i < js->n && js->p[js->i] == close) {
            js->i++;
            return 0;
        }
        return st_js_fail(js, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int st_js_value(st_js *js, int depth)
{
    if (depth > ST_JSON_MAX_DEPTH)
        return st_js_fail(js, "nested more than 32 levels deep");
    if (js->i >= js->n)
        return st_js_fail(js, "unexpected end");
    switch (js->p[js->i]) {
    case '{': return st_js_container(js, depth, '}');
    case '[': return st_js_container(js, depth, ']');
    case '"': return st_js_string(js);
    case 't': return st_js_literal(js, "true");
    case 'f': return st_js_literal(js, "false");
    case 'n': return st_js_literal(js, "null");
    default:
        if (js->p[js->i] == '-' || (js->p[js->i] >= '0' && js->p[js->i] <= '9'))
            return st_js_number(js);
        return st_js_fail(js, "unexpected character");
    }
}

/* Parses the header text. The format's description says the header MUST
 * begin with '{' (the reference reader does not enforce it, but writers all
 * do it), and JSON allows only whitespace after the object (the writer pads
 * with spaces). */
mt_status st_parse_header(const char *label, const unsigned char *text, size_t n,
                                 cJSON **out, mt_err *err)
{
    if (n == 0 || text[0] != '{')
        return mt_fail(err, MT_EFORMAT,
                       "%s: header is not a JSON object (it must begin with '{')", label);
    st_js js = {.p = text, .n = n};
    if (st_js_value(&js, 0)) {
        if (!js.key)
            return mt_fail(err, MT_EFORMAT, "%s: header is not valid JSON: %s at header byte %zu",
                           label, js.why, js.i);
        /* Name the entry as written (escapes and all), cut at 200 bytes on
         * a UTF-8 boundary. */
        int klen = (int)(js.key_len < 200 ? js.key_len : 200);
        while (klen > 0 && (size_t)klen < js.key_len && (js.key[klen] & 0xC0) == 0x80)
            klen--;
        bool meta = js.key_len == strlen(ST_METADATA_KEY)
                    && memcmp(js.key, ST_METADATA_KEY, js.key_len) == 0;
        const char *what = meta ? "" : "tensor '";
        const char *cut = (size_t)klen < js.key_len ? "..." : "";
        const char *close = meta ? "" : "'";
        if (js.num_len)
            return mt_fail(err, MT_EFORMAT, "%s: %s%.*s%s%s: number %.*s at header byte %zu %s",
                           label, what, klen, (const char *)js.key, cut, close, (int)js.num_len,
                           (const char *)js.p + js.i, js.i, js.why);
        return mt_fail(err, MT_EFORMAT,
                       "%s: %s%.*s%s%s: header is not valid JSON: %s at header byte %zu",
                       label, what, klen, (const char *)js.key, cut, close, js.why, js.i);
    }
    st_js_ws(&js);
    if (js.i != n)
        return mt_fail(err, MT_EFORMAT,
                       "%s: header has %zu trailing bytes after the JSON object (at header byte %zu)",
                       label, n - js.i, js.i);

    /* A terminated copy, so cJSON cannot read past the header. */
    char *copy = malloc(n + 1);
    if (!copy)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory copying a %zu-byte header", label, n);
    memcpy(copy, text, n);
    copy[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, n, &end, 0);
    size_t used = end ? (size_t)(end - copy) : 0;
    free(copy);
    if (!root) /* the text is valid JSON, so this was an allocation */
        return mt_fail(err, MT_ENOMEM, "%s: out of memory parsing the header", label);
    if (!cJSON_IsObject(root) || used > n) {
        cJSON_Delete(root);
        return mt_fail(err, MT_EINTERNAL, "%s: cJSON disagrees with the header's syntax check", label);
    }
    *out = root;
    return MT_OK;
}

