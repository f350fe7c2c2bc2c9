/* safetensors.c: reads (mmap + validation) and writes safetensors files.
 *
 * The reader accepts exactly what the reference reader (the `safetensors`
 * crate) accepts, within our own limits: an 8-byte little-endian header
 * length N <= ST_MAX_HEADER with 8 + N <= file size; a header that is a JSON
 * object of tensors plus an optional "__metadata__" object of strings; and
 * tensor byte ranges that are contiguous and tile the data area exactly, each
 * the size its shape and dtype say. Every check is done before any tensor is
 * handed out, with overflow-checked arithmetic, and every failure is an error
 * message naming the file and, where one is at fault, the tensor.
 *
 * The header is checked against the strict JSON grammar here before cJSON
 * builds its tree: cJSON is lenient (numbers such as "01", control bytes as
 * whitespace, no UTF-8 check) and its length-bounded parser can read a byte
 * past the end of an unterminated input, so it only ever sees a NUL-terminated
 * copy of text already known to be valid JSON.
 *
 * The writer builds the header with cJSON (so strings are escaped properly),
 * pads it with spaces so the data starts 8-byte aligned, and writes through a
 * temporary file that is fsynced and renamed into place.
 */
#include "engine/safetensors.h"
#include "engine/utf8.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Integers from 2^53 up do not survive cJSON's doubles exactly; no real file
 * has offsets that large, so both reader and writer refuse them. */
#define ST_EXACT_LIMIT 9007199254740992.0 /* 2^53 */
#define ST_EXACT_LIMIT_U64 ((uint64_t)1 << 53)
/* A valid header nests 3 deep (object, tensor, shape); allow some slack. */
#define ST_JSON_MAX_DEPTH 32
/* Longer numbers are not usize values, and cJSON would mis-read them. */
#define ST_JSON_MAX_NUMBER 32
#define ST_METADATA_KEY "__metadata__"

typedef struct {
    const char *key;
    const char *value;
} st_kv;

/* A tensor plus its byte range in the data area, while validating. */
typedef struct {
    st_tensor t;
    uint64_t begin, end;
} st_entry;

struct st_file {
    char *label;              /* path or caller's label, for messages */
    void *map;                /* st_open's mapping, or NULL */
    size_t map_len;
    st_entry *entries;        /* ordered by data offset */
    size_t n;
    const st_tensor **by_name; /* sorted by name, for st_find */
    st_kv *meta;              /* sorted by key, for st_meta */
    size_t nmeta;
    char *strings;            /* names, metadata keys and values */
};

/* ======================================================================
 * dtypes
 * ====================================================================== */

/* One table gives each dtype's name and element size, indexed by st_dtype. */
static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},
    [ST_I8] = {"I8", 1},           [ST_U16] = {"U16", 2},
    [ST_I16] = {"I16", 2},         [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_U32] = {"U32", 4},
    [ST_I32] = {"I32", 4},         [ST_F32] = {"F32", 4},
    [ST_U64] = {"U64", 8},         [ST_I64] = {"I64", 8},
    [ST_F64] = {"F64", 8},         [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1},
};

/* Names a dtype for headers and messages ("?" for an out-of-range value). */
const char *st_dtype_name(st_dtype d)
{
    return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].name : "?";
}

/* Bytes per element, 0 for an out-of-range value. */
size_t st_dtype_size(st_dtype d)
{
    return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].size : 0;
}

/* Maps a header's dtype string to st_dtype; names are case-sensitive, as
 * in the reference reader. */
int st_dtype_parse(const char *s, st_dtype *out)
{
    if (!s)
        return -1;
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
        if (strcmp(s, st_dtypes[d].name) == 0) {
            if (out)
                *out = (st_dtype)d;
            return 0;
        }
    }
    return -1;
}

/* Element and byte counts of a shape with overflow checks, shared by the
 * reader and the writer. Returns 0, or -1 when a dim is negative, 1 when
 * the element count overflows and 2 when the byte count does. */
static int st_shape_bytes(st_dtype d, int ndim, const int64_t *shape,
                          uint64_t *numel, uint64_t *bytes)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            return 1;
    }
    *numel = n;
    if (__builtin_mul_overflow(n, (uint64_t)st_dtype_size(d), bytes))
        return 2;
    return 0;
}

/* Element count for callers sizing buffers; -1 for a shape that is invalid
 * or whose count does not fit in int64_t. */
int64_t st_numel(const st_tensor *t)
{
    if (!t || t->ndim < 0 || t->ndim > ST_MAX_DIMS)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n))
            return -1;
    }
    return n;
}

/* Writes "[a,b,c]" into buf for messages. */
static const char *st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, i ? "," : "", shape[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
    return buf;
}

/* ======================================================================
 * UTF-8 and strict JSON syntax
 * ====================================================================== */

/* The writer refuses strings the reader (and the reference) would reject. */
static bool st_utf8_valid(const char *s)
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
#define ST_SHOW_CAP 160
#define ST_SHOW(s) st_show((s), (char[ST_SHOW_CAP]){0})
static const char *st_show(const char *s, char *buf)
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
static mt_status st_parse_header(const char *label, const unsigned char *text, size_t n,
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

/* ======================================================================
 * header validation
 * ====================================================================== */

/* A JSON number that is an exact non-negative integer we can hold. The
 * syntax check let through only digit strings, so below 2^53 the double is
 * exactly the text; from 2^53 up it may be rounded, so those are refused
 * (the sign and fraction tests are a second line of defence). */
static bool st_json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0.0) || __builtin_signbit(d) || d >= ST_EXACT_LIMIT)
        return false;
    uint64_t u = (uint64_t)d;
    if ((double)u != d)
        return false;
    *out = u;
    return true;
}

/* Describes a JSON value in a message: numbers by value, others by type. */
static const char *st_json_what(const cJSON *v, char *buf, size_t cap)
{
    if (cJSON_IsNumber(v))
        snprintf(buf, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, cap, "a string");
    else if (cJSON_IsArray(v))
        snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(v))
        snprintf(buf, cap, "an object");
    else if (cJSON_IsBool(v))
        snprintf(buf, cap, "a boolean");
    else
        snprintf(buf, cap, "null");
    return buf;
}

static int st_cmp_kv(const void *a, const void *b)
{
    return strcmp(((const st_kv *)a)->key, ((const st_kv *)b)->key);
}

/* Checks "__metadata__" is an object of strings and counts its text. */
static mt_status st_check_meta(const char *label, const cJSON *m, size_t *count, size_t *bytes,
                               mt_err *err)
{
    char what[64];
    if (!cJSON_IsObject(m))
        return mt_fail(err, MT_EFORMAT, "%s: __metadata__ is %s, not an object of strings",
                       label, st_json_what(m, what, sizeof what));
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        if (!kv->string)
            return mt_fail(err, MT_EINTERNAL, "%s: __metadata__ entry without a key", label);
        if (!cJSON_IsString(kv) || !kv->valuestring)
            return mt_fail(err, MT_EFORMAT, "%s: __metadata__ '%s' is %s, not a string",
                           label, ST_SHOW(kv->string), st_json_what(kv, what, sizeof what));
        *count += 1;
        *bytes += strlen(kv->string) + 1 + strlen(kv->valuestring) + 1;
    }
    return MT_OK;
}

/* Validates one tensor entry {dtype, shape, data_offsets} against the data
 * area size and fills e (name is filled by the caller). */
static mt_status st_check_tensor(const char *label, const char *name, const cJSON *obj,
                                 uint64_t data_size, st_entry *e, mt_err *err)
{
    char what[64], shp[ST_MAX_DIMS * 22 + 4], shown[ST_SHOW_CAP];
    name = st_show(name, shown);
    if (!cJSON_IsObject(obj))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': entry is %s, not an object",
                       label, name, st_json_what(obj, what, sizeof what));
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *f = obj->child; f; f = f->next) {
        const cJSON **slot = NULL;
        if (f->string && strcmp(f->string, "dtype") == 0)
            slot = &dtype;
        else if (f->string && strcmp(f->string, "shape") == 0)
            slot = &shape;
        else if (f->string && strcmp(f->string, "data_offsets") == 0)
            slot = &offs;
        else
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': unexpected field '%s' (only dtype, shape, data_offsets)",
                           label, name, ST_SHOW(f->string ? f->string : ""));
        if (*slot)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': duplicate field '%s'",
                           label, name, ST_SHOW(f->string));
        *slot = f;
    }
    if (!dtype || !shape || !offs)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': missing '%s'", label, name,
                       !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    if (!cJSON_IsString(dtype) || !dtype->valuestring)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': dtype is %s, not a string",
                       label, name, st_json_what(dtype, what, sizeof what));
    if (st_dtype_parse(dtype->valuestring, &e->t.dtype))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': unknown dtype '%s'",
                       label, name, ST_SHOW(dtype->valuestring));

    if (!cJSON_IsArray(shape))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': shape is %s, not an array",
                       label, name, st_json_what(shape, what, sizeof what));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return mt_fail(err, MT_ELIMIT, "%s: tensor '%s': shape has %d dims, more than the %d supported",
                       label, name, ndim, ST_MAX_DIMS);
    e->t.ndim = ndim;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        uint64_t v;
        if (!st_json_uint(d, &v))
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': shape[%d] is %s, not a non-negative integer below 2^53",
                           label, name, k, st_json_what(d, what, sizeof what));
        e->t.shape[k] = (int64_t)v;
    }

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': data_offsets is not an array [begin, end]",
                       label, name);
    const cJSON *b = offs->child, *en = b->next;
    if (!st_json_uint(b, &e->begin))
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets begin is %s, not a non-negative integer below 2^53",
                       label, name, st_json_what(b, what, sizeof what));
    if (!st_json_uint(en, &e->end))
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets end is %s, not a non-negative integer below 2^53",
                       label, name, st_json_what(en, what, sizeof what));
    if (e->begin > e->end)
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64 "] are reversed (begin > end)",
                       label, name, e->begin, e->end);
    if (e->end > data_size)
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64
                       "] end past the data area (%" PRIu64 " bytes)",
                       label, name, e->begin, e->end, data_size);

    uint64_t numel, bytes;
    int rc = st_shape_bytes(e->t.dtype, ndim, e->t.shape, &numel, &bytes);
    st_shape_str(shp, sizeof shp, ndim, e->t.shape);
    if (rc == 1)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': shape %s has more elements than fit in 64 bits",
                       label, name, shp);
    if (rc != 0)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': shape %s x %s is more bytes than fit in 64 bits",
                       label, name, shp, st_dtype_name(e->t.dtype));
    if (bytes != e->end - e->begin)
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': shape %s x %s is %" PRIu64 " bytes but data_offsets span %" PRIu64,
                       label, name, shp, st_dtype_name(e->t.dtype), bytes, e->end - e->begin);
    e->t.nbytes = (size_t)bytes;
    return MT_OK;
}

/* Data order: by begin, then end (zero-size tensors sit before a tensor
 * that starts where they do), then name so the order is deterministic. */
static int st_cmp_offsets(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

static int st_cmp_names(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Copies s into the string arena at *at. */
static const char *st_intern(char *arena, size_t *at, const char *s)
{
    size_t len = strlen(s) + 1;
    char *dst = arena + *at;
    memcpy(dst, s, len);
    *at += len;
    return dst;
}

/* Validates the tensors and metadata of a parsed header and builds f's
 * tables. data/data_size describe the data area after the header. */
static mt_status st_build(st_file *f, const cJSON *root, const unsigned char *data,
                          uint64_t data_size, mt_err *err)
{
    const char *label = f->label;
    const cJSON *meta = NULL;
    size_t ntensors = 0, nmeta = 0, bytes = 0;
    mt_status st;

    /* Pass 1: count, check metadata, size the string arena. */
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!c->string)
            return mt_fail(err, MT_EINTERNAL, "%s: header entry without a key", label);
        if (strcmp(c->string, ST_METADATA_KEY) == 0) {
            if (meta)
                return mt_fail(err, MT_EFORMAT, "%s: duplicate __metadata__", label);
            meta = c;
            if (cJSON_IsNull(c)) /* the reference reads null as "no metadata" */
                continue;
            st = st_check_meta(label, c, &nmeta, &bytes, err);
            if (st != MT_OK)
                return st;
            continue;
        }
        if (c->string[0] == '\0')
            return mt_fail(err, MT_EFORMAT, "%s: tensor with an empty name", label);
        ntensors++;
        bytes += strlen(c->string) + 1;
    }

    f->entries = calloc(ntensors ? ntensors : 1, sizeof *f->entries);
    f->by_name = calloc(ntensors ? ntensors : 1, sizeof *f->by_name);
    f->meta = calloc(nmeta ? nmeta : 1, sizeof *f->meta);
    f->strings = malloc(bytes ? bytes : 1);
    if (!f->entries || !f->by_name || !f->meta || !f->strings)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for %zu tensors", label, ntensors);

    /* Pass 2: validate each tensor on its own. */
    size_t at = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (c == meta)
            continue;
        st_entry *e = &f->entries[f->n];
        st = st_check_tensor(label, c->string, c, data_size, e, err);
        if (st != MT_OK)
            return st;
        e->t.name = st_intern(f->strings, &at, c->string);
        e->t.data = data + e->begin;
        f->n++;
    }
    if (meta && !cJSON_IsNull(meta)) {
        for (const cJSON *kv = meta->child; kv; kv = kv->next, f->nmeta++) {
            f->meta[f->nmeta].key = st_intern(f->strings, &at, kv->string);
            f->meta[f->nmeta].value = st_intern(f->strings, &at, kv->valuestring);
        }
        qsort(f->meta, f->nmeta, sizeof *f->meta, st_cmp_kv);
        for (size_t i = 1; i < f->nmeta; i++) {
            if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
                return mt_fail(err, MT_EFORMAT, "%s: __metadata__ has duplicate key '%s'",
                               label, ST_SHOW(f->meta[i].key));
        }
    }

    /* Names are unique (cJSON keeps duplicate keys, so check). */
    qsort(f->entries, f->n, sizeof *f->entries, st_cmp_offsets);
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = &f->entries[i].t;
    qsort(f->by_name, f->n, sizeof *f->by_name, st_cmp_names);
    for (size_t i = 1; i < f->n; i++) {
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': duplicate tensor name",
                           label, ST_SHOW(f->by_name[i]->name));
    }

    /* Ranges tile the data area: no overlap, no gap, nothing left over. */
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_entry *e = &f->entries[i];
        if (e->begin < pos)
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64
                           "] overlap tensor '%s' [%" PRIu64 ",%" PRIu64 "]",
                           label, ST_SHOW(e->t.name), e->begin, e->end, ST_SHOW(f->entries[i - 1].t.name),
                           f->entries[i - 1].begin, f->entries[i - 1].end);
        if (e->begin > pos) {
            if (i == 0)
                return mt_fail(err, MT_EFORMAT,
                               "%s: tensor '%s': data_offsets begin at %" PRIu64
                               ", leaving a gap at the start of the data area",
                               label, ST_SHOW(e->t.name), e->begin);
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': data_offsets begin at %" PRIu64
                           ", leaving a gap of %" PRIu64 " bytes after tensor '%s' (ends at %" PRIu64 ")",
                           label, ST_SHOW(e->t.name), e->begin, e->begin - pos,
                           ST_SHOW(f->entries[i - 1].t.name), pos);
        }
        pos = e->end;
    }
    if (pos != data_size) {
        if (f->n == 0)
            return mt_fail(err, MT_EFORMAT,
                           "%s: header lists no tensors but the data area is %" PRIu64 " bytes",
                           label, data_size);
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensors end at %" PRIu64 " (last is '%s') but the data area is %" PRIu64
                       " bytes: %" PRIu64 " bytes not covered",
                       label, pos, ST_SHOW(f->entries[f->n - 1].t.name), data_size, data_size - pos);
    }
    return MT_OK;
}

/* ======================================================================
 * opening, lookup, closing
 * ====================================================================== */

static uint64_t st_load_u64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The whole validation, shared by st_parse (memory) and st_open (mapping). */
mt_status st_parse(const void *buf, size_t len, const char *label, st_file **out, mt_err *err)
{
    if (!out)
        return mt_fail(err, MT_EINVAL, "st_parse: out is NULL");
    *out = NULL;
    if (!label)
        label = "<memory>";
    if (!buf && len)
        return mt_fail(err, MT_EINVAL, "%s: buffer is NULL", label);
    const unsigned char *p = buf;

    if (len < 8)
        return mt_fail(err, MT_EFORMAT,
                       "%s: file is %zu bytes, too short for the 8-byte header length", label, len);
    uint64_t n = st_load_u64le(p);
    if (n > ST_MAX_HEADER)
        return mt_fail(err, MT_ELIMIT, "%s: header length %" PRIu64 " is over the %u-byte limit",
                       label, n, ST_MAX_HEADER);
    if (n > len - 8)
        return mt_fail(err, MT_EFORMAT,
                       "%s: header length %" PRIu64 " runs past the end of the file (%zu bytes)",
                       label, n, len);

    st_file *f = calloc(1, sizeof *f);
    if (!f)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", label);
    f->label = strdup(label);
    if (!f->label) {
        free(f);
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", label);
    }
    cJSON *root = NULL;
    mt_status st = st_parse_header(f->label, p + 8, (size_t)n, &root, err);
    if (st == MT_OK)
        st = st_build(f, root, p + 8 + n, (uint64_t)(len - 8 - n), err);
    cJSON_Delete(root);
    if (st != MT_OK) {
        st_close(f);
        return st;
    }
    *out = f;
    return MT_OK;
}

/* Maps path read-only (tensor data stays in the page cache, shared with
 * other processes reading the same weights) and validates it. */
mt_status st_open(const char *path, st_file **out, mt_err *err)
{
    if (!out)
        return mt_fail(err, MT_EINVAL, "st_open: out is NULL");
    *out = NULL;
    if (!path)
        return mt_fail(err, MT_EINVAL, "st_open: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mt_fail(err, errno == ENOENT ? MT_ENOTFOUND : MT_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mt_fail(err, MT_EIO, "%s: not a regular file", path);
    }
    if ((uintmax_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return mt_fail(err, MT_ELIMIT, "%s: too large to map", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = NULL;
    if (len > 0) { /* mmap refuses length 0; st_parse reports the short file */
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return mt_fail(err, MT_EIO, "%s: mmap: %s", path, strerror(e));
        }
    }
    close(fd);
    static const unsigned char empty[1];
    mt_status st = st_parse(map ? map : empty, len, path, out, err);
    if (st != MT_OK) {
        if (map)
            munmap(map, len);
        return st;
    }
    (*out)->map = map;
    (*out)->map_len = len;
    return MT_OK;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->entries);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    free(f->label);
    free(f);
}

size_t st_count(const st_file *f)
{
    return f ? f->n : 0;
}

const st_tensor *st_get(const st_file *f, size_t i)
{
    return f && i < f->n ? &f->entries[i].t : NULL;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    if (!f || !name || f->n == 0)
        return NULL;
    st_tensor key = {.name = name};
    const st_tensor *kp = &key;
    const st_tensor **hit = bsearch(&kp, f->by_name, f->n, sizeof *f->by_name, st_cmp_names);
    return hit ? *hit : NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    if (!f || !key || f->nmeta == 0)
        return NULL;
    st_kv k = {.key = key, .value = NULL};
    const st_kv *hit = bsearch(&k, f->meta, f->nmeta, sizeof *f->meta, st_cmp_kv);
    return hit ? hit->value : NULL;
}

const char *st_path(const st_file *f)
{
    return f ? f->label : NULL;
}

/* ======================================================================
 * writer
 * ====================================================================== */

static int st_cmp_strp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the caller's tensors and metadata before anything touches disk;
 * the reader must accept what the writer writes. */
static mt_status st_check_inputs(const char *path, const st_tensor *t, size_t n,
                                 const char *const *meta_kv, size_t *nmeta, mt_err *err)
{
    char shp[ST_MAX_DIMS * 22 + 4];
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *x = &t[i];
        if (!x->name || !x->name[0])
            return mt_fail(err, MT_EINVAL, "%s: tensor %zu has no name", path, i);
        char shown[ST_SHOW_CAP];
        const char *name = st_show(x->name, shown);
        if (strcmp(x->name, ST_METADATA_KEY) == 0 || !st_utf8_valid(x->name))
            return mt_fail(err, MT_EINVAL, "%s: tensor '%s': name is reserved or not UTF-8",
                           path, name);
        if ((unsigned)x->dtype >= ST_DTYPE_COUNT)
            return mt_fail(err, MT_EINVAL, "%s: tensor '%s': unknown dtype %d", path, name,
                           (int)x->dtype);
        if (x->ndim < 0 || x->ndim > ST_MAX_DIMS)
            return mt_fail(err, MT_EINVAL, "%s: tensor '%s': ndim %d is outside 0..%d",
                           path, name, x->ndim, ST_MAX_DIMS);
        st_shape_str(shp, sizeof shp, x->ndim, x->shape);
        uint64_t numel, bytes;
        int rc = st_shape_bytes(x->dtype, x->ndim, x->shape, &numel, &bytes);
        if (rc < 0)
            return mt_fail(err, MT_EINVAL, "%s: tensor '%s': shape %s has a negative dim",
                           path, name, shp);
        if (rc > 0)
            return mt_fail(err, MT_EINVAL, "%s: tensor '%s': shape %s x %s overflows 64 bits",
                           path, name, shp, st_dtype_name(x->dtype));
        for (int d = 0; d < x->ndim; d++) {
            if ((uint64_t)x->shape[d] >= ST_EXACT_LIMIT_U64)
                return mt_fail(err, MT_ELIMIT, "%s: tensor '%s': shape %s has a dim of 2^53 or more",
                               path, name, shp);
        }
        if (bytes != (uint64_t)x->nbytes)
            return mt_fail(err, MT_EINVAL,
                           "%s: tensor '%s': nbytes is %zu but shape %s x %s is %" PRIu64 " bytes",
                           path, name, x->nbytes, shp, st_dtype_name(x->dtype), bytes);
        if (x->nbytes && !x->data)
            return mt_fail(err, MT_EINVAL, "%s: tensor '%s': data is NULL", path, name);
        if (__builtin_add_overflow(offset, bytes, &offset) || offset >= ST_EXACT_LIMIT_U64)
            return mt_fail(err, MT_ELIMIT, "%s: tensor '%s': data would end at or past 2^53 bytes",
                           path, name);
    }

    size_t m = 0;
    if (meta_kv) {
        for (; meta_kv[2 * m]; m++) {
            const char *k = meta_kv[2 * m], *v = meta_kv[2 * m + 1];
            if (!v)
                return mt_fail(err, MT_EINVAL, "%s: metadata key '%s' has no value", path, ST_SHOW(k));
            if (!st_utf8_valid(k) || !st_utf8_valid(v))
                return mt_fail(err, MT_EINVAL, "%s: metadata '%s' is not UTF-8", path, ST_SHOW(k));
        }
    }
    *nmeta = m;

    /* Unique tensor names and metadata keys. */
    size_t most = n > m ? n : m;
    const char **names = malloc((most ? most : 1) * sizeof *names);
    if (!names)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    mt_status st = MT_OK;
    for (size_t i = 0; i < n; i++)
        names[i] = t[i].name;
    qsort(names, n, sizeof *names, st_cmp_strp);
    for (size_t i = 1; i < n && st == MT_OK; i++) {
        if (strcmp(names[i - 1], names[i]) == 0)
            st = mt_fail(err, MT_EINVAL, "%s: tensor '%s': duplicate tensor name", path,
                         ST_SHOW(names[i]));
    }
    for (size_t i = 0; i < m; i++)
        names[i] = meta_kv[2 * i];
    qsort(names, m, sizeof *names, st_cmp_strp);
    for (size_t i = 1; i < m && st == MT_OK; i++) {
        if (strcmp(names[i - 1], names[i]) == 0)
            st = mt_fail(err, MT_EINVAL, "%s: duplicate metadata key '%s'", path, ST_SHOW(names[i]));
    }
    free(names);
    return st;
}

/* Adds an unsigned integer as raw JSON text, exact beyond 2^31 (cJSON's
 * own numbers print large values with exponents, e.g. "1e+15"). */
static bool st_add_uint(cJSON *array, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%" PRIu64, v);
    cJSON *item = cJSON_CreateRaw(num);
    return item && cJSON_AddItemToArray(array, item);
}

/* Builds the header JSON: "__metadata__" first, then tensors in order. */
static char *st_header_json(const st_tensor *t, size_t n, const char *const *meta_kv, size_t nmeta)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    bool ok = true;
    if (nmeta) {
        cJSON *m = cJSON_AddObjectToObject(root, ST_METADATA_KEY);
        ok = m != NULL;
        for (size_t i = 0; ok && i < nmeta; i++)
            ok = cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]) != NULL;
    }
    uint64_t offset = 0;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(root, t[i].name);
        cJSON *shape = NULL, *offs = NULL;
        ok = o && cJSON_AddStringToObject(o, "dtype", st_dtype_name(t[i].dtype))
             && (shape = cJSON_AddArrayToObject(o, "shape")) != NULL
             && (offs = cJSON_AddArrayToObject(o, "data_offsets")) != NULL;
        for (int d = 0; ok && d < t[i].ndim; d++)
            ok = st_add_uint(shape, (uint64_t)t[i].shape[d]);
        ok = ok && st_add_uint(offs, offset) && st_add_uint(offs, offset + t[i].nbytes);
        offset += t[i].nbytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* write() until done, through short writes and EINTR. */
static int st_write_all(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Makes the rename durable; best effort, as some file systems refuse to
 * fsync a directory and the file itself is already safe. */
static void st_sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

/* Writes header and data to path.tmp.<pid>, fsyncs it and renames it over
 * path, so readers never see a half-written file. Data is written in the
 * given order and contiguously (the reference reader rejects gaps), so the
 * data area starts 8-byte aligned and each tensor is 8-byte aligned when the
 * tensors before it have sizes that are multiples of 8. */
mt_status st_write(const char *path, const st_tensor *t, size_t n,
                   const char *const *meta_kv, mt_err *err)
{
    if (!path || !path[0])
        return mt_fail(err, MT_EINVAL, "st_write: no path");
    if (n && !t)
        return mt_fail(err, MT_EINVAL, "%s: tensors are NULL", path);
    size_t nmeta = 0;
    mt_status st = st_check_inputs(path, t, n, meta_kv, &nmeta, err);
    if (st != MT_OK)
        return st;

    char *json = st_header_json(t, n, meta_kv, nmeta);
    if (!json)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory building the header", path);
    size_t jlen = strlen(json);
    size_t pad = (8 - jlen % 8) % 8;
    unsigned char len8[8];
    uint64_t hlen = (uint64_t)jlen + pad;
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hlen >> (8 * i));
    if (hlen > ST_MAX_HEADER) {
        free(json);
        return mt_fail(err, MT_ELIMIT, "%s: header would be %" PRIu64 " bytes, over the %u-byte limit",
                       path, hlen, ST_MAX_HEADER);
    }

    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        free(json);
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    /* O_EXCL: two writers of one path in this process must not share it. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = mt_fail(err, MT_EIO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(json);
        free(tmp);
        return st;
    }
    static const char spaces[8] = "        ";
    const char *what = "write";
    bool ok = st_write_all(fd, len8, 8) == 0 && st_write_all(fd, json, jlen) == 0
              && st_write_all(fd, spaces, pad) == 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = st_write_all(fd, t[i].data, t[i].nbytes) == 0;
    if (ok && fsync(fd) != 0) {
        ok = false;
        what = "fsync";
    }
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
        what = "close";
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
        what = "rename";
    }
    if (!ok) {
        unlink(tmp);
        st = mt_fail(err, MT_EIO, "%s: %s of %s: %s", path, what, tmp, strerror(e));
    } else {
        st_sync_dir(path);
    }
    free(json);
    free(tmp);
    return st;
}
