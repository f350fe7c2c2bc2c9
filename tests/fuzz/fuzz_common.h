/* fuzz_common.h: what the libFuzzer harnesses in tests/fuzz share: a
 * check that stops the run with a message when a property the code under
 * test promises does not hold (so libFuzzer saves the input as a crash),
 * and checks of the JSON response shapes the server promises (KServe
 * {"error": "..."}; OpenAI {"error": {"message", "type", "param", "code"}}),
 * and the checks the weight-file harnesses share (fuzz_safetensors,
 * fuzz_torch_pt: what safetensors.h promises of an accepted file).
 *
 * Harness code only: it may abort(), library code may not.
 */
#ifndef MT_TESTS_FUZZ_COMMON_H
#define MT_TESTS_FUZZ_COMMON_H

#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/weights/safetensors.h"

/* A broken promise: print where and why, then abort so libFuzzer keeps the
 * input (crash-<sha1>) and prints the stack. */
#define FUZZ_CHECK(cond, ...)                                                       \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "\n%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, \
                    #cond);                                                         \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
            abort();                                                                \
        }                                                                           \
    } while (0)

/* Checks that body (len bytes) is one JSON error in the protocol's shape;
 * returns the parsed body for further checks (caller deletes). */
static inline cJSON *fuzz_check_error_body(const char *body, size_t len, int openai)
{
    cJSON *j = cJSON_ParseWithLength(body, len);
    FUZZ_CHECK(j && cJSON_IsObject(j), "error body is not a JSON object: %.*s", (int)len, body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (openai) {
        FUZZ_CHECK(cJSON_IsObject(e), "OpenAI error without an error object: %.*s", (int)len,
                   body);
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
        const cJSON *param = cJSON_GetObjectItemCaseSensitive(e, "param");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
        FUZZ_CHECK(cJSON_IsString(msg) && *msg->valuestring, "OpenAI error without a message");
        FUZZ_CHECK(cJSON_IsString(type), "OpenAI error without a type");
        FUZZ_CHECK(param && (cJSON_IsString(param) || cJSON_IsNull(param)),
                   "OpenAI error param is neither a string nor null");
        FUZZ_CHECK(cJSON_IsString(code), "OpenAI error without a code");
    } else {
        FUZZ_CHECK(cJSON_IsString(e) && *e->valuestring, "KServe error is not {\"error\": \"...\"}: %.*s",
                   (int)len, body);
    }
    return j;
}

/* Whether a parsed error body (fuzz_check_error_body) refuses a text over
 * max_seq_len with truncation off: its message begins with the text's
 * index, field[i] (server/api/call.c too_long), and says so. */
static inline int fuzz_refused_too_long(const cJSON *err, int openai, const char *field)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(err, "error");
    const cJSON *m = openai ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
    const char *s = cJSON_IsString(m) ? m->valuestring : "";
    return !strncmp(s, field, strlen(field)) && s[strlen(field)] == '[' &&
           strstr(s, "more than the model's max_seq_len") != NULL;
}

/* An independent UTF-8 validator (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF, no truncated sequences), to compare with the
 * code under test. */
static inline int fuzz_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i <= k) /* truncated: fewer than k continuation bytes left */
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xBF)
                return 0;
        i += k + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------------
 * A strict JSON checker (RFC 8259 grammar, UTF-8 text, whitespace only
 * space/tab/CR/LF, no trailing bytes), independent of cJSON, to tell what
 * the server should accept from what cJSON happens to accept, and to check
 * that every response body is JSON a strict client can read.
 * ---------------------------------------------------------------------- */

typedef struct {
    const unsigned char *s;
    size_t n, i;
    int depth, max_depth;
    int long_number; /* a number of more than 63 characters was seen */
    int utf8;        /* check that strings are UTF-8 */
    int odd_escape;  /* a \\u0000 or an unpaired surrogate escape was seen: valid
                        JSON grammar, but no UTF-8 string holds it, so the
                        server may refuse it (engine/json_check.c does) */
} fuzz_json;

static inline void fuzz_json_ws(fuzz_json *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static inline int fuzz_json_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The value of the 4 hex digits at h into *u; 0 when they are not 4 hex
 * digits. */
static inline int fuzz_json_hex4(const unsigned char *h, unsigned *u)
{
    *u = 0;
    for (int k = 0; k < 4; k++) {
        if (!fuzz_json_hex(h[k]))
            return 0;
        *u = *u * 16 + (unsigned)(h[k] <= '9' ? h[k] - '0' : (h[k] | 0x20) - 'a' + 10);
    }
    return 1;
}

static inline int fuzz_json_string(fuzz_json *p)
{
    if (p->i >= p->n || p->s[p->i] != '"')
        return 0;
    size_t start = ++p->i;
    while (p->i < p->n && p->s[p->i] != '"') {
        unsigned char c = p->s[p->i];
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (++p->i >= p->n)
                return 0;
            c = p->s[p->i];
            if (c == 'u') {
                unsigned u, lo;
                if (p->n - p->i < 5 || !fuzz_json_hex4(p->s + p->i + 1, &u))
                    return 0;
                p->i += 4;
                if (u == 0 || (u >= 0xDC00 && u <= 0xDFFF)) {
                    p->odd_escape = 1;
                } else if (u >= 0xD800 && u <= 0xDBFF) {
                    /* a high surrogate must be followed by \\uDC00..\\uDFFF */
                    const unsigned char *q = p->s + p->i + 1;
                    int paired = p->n - (p->i + 1) >= 6 && q[0] == '\\' && q[1] == 'u' &&
                                 fuzz_json_hex4(q + 2, &lo);
                    if (paired && lo >= 0xDC00 && lo <= 0xDFFF)
                        p->i += 6;
                    else
                        p->odd_escape = 1;
                }
            } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
                return 0;
            }
        }
        p->i++;
    }
    if (p->i >= p->n)
        return 0;
    if (p->utf8 && !fuzz_utf8_valid(p->s + start, p->i - start))
        return 0;
    p->i++;
    return 1;
}

static inline int fuzz_json_number(fuzz_json *p)
{
    size_t start = p->i;
#define D(i) ((i) < p->n && p->s[i] >= '0' && p->s[i] <= '9')
    if (p->i < p->n && p->s[p->i] == '-')
        p->i++;
    if (p->i < p->n && p->s[p->i] == '0')
        p->i++;
    else if (D(p->i))
        while (D(p->i))
            p->i++;
    else
        return 0;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (!D(p->i))
            return 0;
        while (D(p->i))
            p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        if (!D(p->i))
            return 0;
        while (D(p->i))
            p->i++;
    }
#undef D
    if (p->i - start > 63)
        p->long_number = 1;
    return 1;
}

static inline int fuzz_json_value(fuzz_json *p);

static inline int fuzz_json_container(fuzz_json *p, unsigned char open)
{
    const unsigned char close = open == '{' ? '}' : ']';
    if (++p->depth > p->max_depth)
        return -1;
    p->i++;
    fuzz_json_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        p->depth--;
        return 1;
    }
    for (;;) {
        if (open == '{') {
            fuzz_json_ws(p);
            if (!fuzz_json_string(p))
                return 0;
            fuzz_json_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':')
                return 0;
            p->i++;
        }
        int r = fuzz_json_value(p);
        if (r != 1)
            return r;
        fuzz_json_ws(p);
        if (p->i >= p->n)
            return 0;
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->s[p->i] != close)
            return 0;
        p->i++;
        p->depth--;
        return 1;
    }
}

/* One value with the whitespace around it. 1: valid, 0: invalid, -1:
 * deeper than max_depth (not decided). */
static inline int fuzz_json_value(fuzz_json *p)
{
    fuzz_json_ws(p);
    if (p->i >= p->n)
        return 0;
    unsigned char c = p->s[p->i];
    int r;
    if (c == '{' || c == '[')
        r = fuzz_json_container(p, c);
    else if (c == '"')
        r = fuzz_json_string(p);
    else if (c == '-' || (c >= '0' && c <= '9'))
        r = fuzz_json_number(p);
    else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "true", 4))
        r = (p->i += 4, 1);
    else if (p->n - p->i >= 5 && !memcmp(p->s + p->i, "false", 5))
        r = (p->i += 5, 1);
    else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "null", 4))
        r = (p->i += 4, 1);
    else
        r = 0;
    if (r == 1)
        fuzz_json_ws(p);
    return r;
}

/* FUZZ_JSON_LENIENT=1 in the environment: known leniencies (non-strict
 * JSON accepted, invalid UTF-8 passed through) are not findings, so a run
 * can fuzz past them. Read once per process. */
static inline int fuzz_lenient(void)
{
    static int v = -1;
    if (v < 0) {
        const char *l = getenv("FUZZ_JSON_LENIENT");
        v = l && *l && strcmp(l, "0") != 0;
    }
    return v;
}

/* Is s[0..n) exactly one JSON text? 1 yes, 0 no, -1 nested deeper than
 * max_depth (undecided). Strings must be UTF-8 unless fuzz_lenient().
 * *refusable (may be NULL) tells whether it holds something a server may
 * still refuse: a number longer than cJSON 1.7.15 reads (63 characters), a
 * \\u0000 escape or an unpaired surrogate escape. */
static inline int fuzz_json_strict(const char *s, size_t n, int max_depth, int *refusable)
{
    fuzz_json p = {(const unsigned char *)s, n, 0, 0, max_depth, 0, !fuzz_lenient(), 0};
    int r = fuzz_json_value(&p);
    if (r == 1 && p.i != n)
        r = 0;
    if (refusable)
        *refusable = p.long_number || p.odd_escape;
    return r;
}

/* Nesting depth of a parsed tree, counted as engine/json_check.c counts it
 * (each object or array one level). */
static inline int fuzz_cjson_depth(const cJSON *j)
{
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
        return 0;
    int max = 0;
    for (const cJSON *c = j->child; c; c = c->next) {
        int d = fuzz_cjson_depth(c);
        if (d > max)
            max = d;
    }
    return max + 1;
}

/* Does any object in the tree hold the same key twice? */
static inline int fuzz_cjson_dup_keys(const cJSON *j)
{
    for (const cJSON *c = j ? j->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(j))
            for (const cJSON *d = c->next; d; d = d->next)
                if (c->string && d->string && !strcmp(c->string, d->string))
                    return 1;
        if (fuzz_cjson_dup_keys(c))
            return 1;
    }
    return 0;
}

/* Decodes standard base64 (RFC 4648, padded); -1 on bad input. */
static inline long fuzz_base64_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    if (n % 4)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = s[i + k];
            unsigned d;
            if (c >= 'A' && c <= 'Z') d = (unsigned)(c - 'A');
            else if (c >= 'a' && c <= 'z') d = (unsigned)(c - 'a' + 26);
            else if (c >= '0' && c <= '9') d = (unsigned)(c - '0' + 52);
            else if (c == '+') d = 62;
            else if (c == '/') d = 63;
            else if (c == '=' && i + 4 == n && k >= 2) { d = 0; pad++; }
            else return -1;
            if (pad && c != '=')
                return -1;
            v = v << 6 | d;
        }
        for (int k = 0; k < 3 - pad; k++) {
            if (o >= cap)
                return -1;
            out[o++] = (unsigned char)(v >> (16 - 8 * k));
        }
    }
    return (long)o;
}

/* ------------------------------------------------------------------------
 * The weight-file harnesses (fuzz_safetensors, fuzz_torch_pt): st_parse on
 * the input, what safetensors.h promises of every tensor of a file it
 * accepts, and the round trip of that file through st_write and st_open.
 * ---------------------------------------------------------------------- */

/* Where the harness named harness writes an accepted file back: $TMPDIR,
 * else /dev/shm where it is writable, else /tmp; one file per process. */
static inline void fuzz_st_tmp_path(char *path, size_t cap, const char *harness)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, cap, "%s/%s.%d.safetensors", dir, harness, (int)getpid());
}

/* st_parse of the input as the file label; NULL when it is refused, the
 * refusal having left *out NULL and said prefix first (named the file). */
static inline st_file *fuzz_st_parse(const uint8_t *data, size_t size, const char *label,
                                     const char *prefix)
{
    st_file *f = NULL;
    mt_err err = {{0}};
    if (st_parse(data, size, label, &f, &err) == MT_OK)
        return f;
    FUZZ_CHECK(f == NULL, "failure left *out set");
    FUZZ_CHECK(!strncmp(err.msg, prefix, strlen(prefix)), "error does not name the file: \"%s\"",
               err.msg);
    return NULL;
}

/* An accepted tensor's rank and dtype are valid and its byte count is its
 * shape times its dtype size. */
static inline void fuzz_st_check_size(const st_tensor *t)
{
    FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "%s: ndim %d", t->name, t->ndim);
    FUZZ_CHECK((unsigned)t->dtype < ST_DTYPE_COUNT, "%s: dtype %d", t->name, t->dtype);
    int64_t numel = st_numel(t);
    FUZZ_CHECK(numel >= 0, "%s: numel %lld", t->name, (long long)numel);
    FUZZ_CHECK((uint64_t)numel * st_dtype_size(t->dtype) == t->nbytes,
               "%s: %lld elements of %zu bytes but nbytes %zu", t->name, (long long)numel,
               st_dtype_size(t->dtype), t->nbytes);
}

/* Every byte of tensor t (st_get(f, i)) is read, so that ASan checks the
 * range, and st_find finds it by name. */
static inline void fuzz_st_check_reach(const st_file *f, size_t i, const st_tensor *t)
{
    const uint8_t *p = t->data;
    volatile uint8_t acc = 0;
    for (size_t k = 0; k < t->nbytes; k++)
        acc ^= p[k];
    (void)acc;
    FUZZ_CHECK(st_find(f, t->name) == t, "st_find(\"%s\") is not st_get(%zu)", t->name, i);
}

/* The accepted tensors, written as safetensors to path and read back, are
 * the same: names, dtypes, shapes and bytes. */
static inline void fuzz_st_roundtrip(const st_file *f, const char *path)
{
    size_t n = st_count(f);
    st_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    FUZZ_CHECK(ts, "out of memory");
    for (size_t i = 0; i < n; i++)
        ts[i] = *st_get(f, i);
    mt_err err = {{0}};
    mt_status s = st_write(path, ts, n, NULL, &err);
    if (s == MT_EIO || s == MT_ENOMEM) { /* a full disk is not a finding */
        free(ts);
        return;
    }
    FUZZ_CHECK(s == MT_OK, "st_write refused what st_parse accepted: %s", err.msg);
    st_file *g = NULL;
    s = st_open(path, &g, &err);
    unlink(path);
    FUZZ_CHECK(s == MT_OK, "st_open refused what st_write wrote: %s", err.msg);
    FUZZ_CHECK(st_count(g) == n, "%zu tensors written, %zu read back", n, st_count(g));
    for (size_t i = 0; i < n; i++) {
        const st_tensor *a = &ts[i], *b = st_find(g, a->name);
        FUZZ_CHECK(b, "tensor \"%s\" lost in the round trip", a->name);
        FUZZ_CHECK(a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes,
                   "tensor \"%s\" changed dtype, rank or size in the round trip", a->name);
        FUZZ_CHECK(!memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim),
                   "tensor \"%s\" changed shape in the round trip", a->name);
        FUZZ_CHECK(a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes),
                   "tensor \"%s\" changed bytes in the round trip", a->name);
    }
    st_close(g);
    free(ts);
}

#endif
