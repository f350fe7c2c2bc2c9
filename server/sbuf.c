/* sbuf.c: growable response buffer (see sbuf.h). */
#include "server/sbuf.h"

#include "engine/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_init(sbuf *b)
{
    memset(b, 0, sizeof *b);
}

void sb_free(sbuf *b)
{
    free(b->data);
    sb_init(b);
}

char *sb_take(sbuf *b, size_t *len)
{
    char *d = b->data;
    if (len)
        *len = b->len;
    sb_init(b);
    return d;
}

void sb_reserve(sbuf *b, size_t extra)
{
    if (b->oom || b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return;
        }
        cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d) {
        b->oom = true;
        return;
    }
    b->data = d;
    b->cap = cap;
}

void sb_putn(sbuf *b, const void *p, size_t n)
{
    sb_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void sb_puts(sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

void sb_putc(sbuf *b, char c)
{
    sb_putn(b, &c, 1);
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    sb_reserve(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_json_str(sbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    sb_reserve(b, n + 2);
    sb_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            /* keep valid UTF-8; anything else (echoed client bytes in an
             * error message) becomes U+FFFD, so a response is always JSON */
            size_t k = mt_utf8_seq((const unsigned char *)s + i, n - i);
            if (k) {
                i += k - 1;
                continue;
            }
            sb_putn(b, s + run, i - run);
            run = i + 1;
            sb_puts(b, "\xef\xbf\xbd");
            continue;
        }
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        sb_putn(b, s + run, i - run);
        run = i + 1;
        char esc[7] = {'\\', 0};
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
        }
        sb_puts(b, esc);
    }
    sb_putn(b, s + run, n - run);
    sb_putc(b, '"');
}

/* Shortest of %.6g..%.9g that parses back to the same float: 9 significant
 * digits always round-trip a float32, fewer usually do and read better. */
void sb_float(sbuf *b, float f)
{
    char tmp[32];
    if (!isfinite(f)) {
        sb_puts(b, "null"); /* callers refuse non-finite outputs before this */
        return;
    }
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, (double)f);
        if (prec == 9 || strtof(tmp, NULL) == f)
            break;
    }
    sb_puts(b, tmp);
}

void sb_float_array(sbuf *b, const float *v, size_t n)
{
    sb_reserve(b, n * 12 + 2);
    sb_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_putc(b, ',');
        sb_float(b, v[i]);
    }
    sb_putc(b, ']');
}

void sb_base64(sbuf *b, const void *p, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = p;
    sb_reserve(b, (n + 2) / 3 * 4);
    if (b->oom)
        return;
    char *o = b->data + b->len;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = tbl[v >> 18];
        *o++ = tbl[(v >> 12) & 63];
        *o++ = tbl[(v >> 6) & 63];
        *o++ = tbl[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *o++ = tbl[v >> 18];
        *o++ = tbl[(v >> 12) & 63];
        *o++ = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    b->len = (size_t)(o - b->data);
    b->data[b->len] = 0;
}
