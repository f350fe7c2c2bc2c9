/* sbuf.c: growable response buffer (see sbuf.h). */
#include "server/base/sbuf.h"

#include "engine/text/utf8.h"

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
    if (n) /* p may be NULL when n is 0 (an empty protobuf bytes field) */
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

void sb_vprintf(sbuf *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n >= 0)
        sb_reserve(b, (size_t)n);
    if (n >= 0 && !b->oom) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
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

/* A float32 as printf's "%.9g" writes it (9 significant digits, correctly
 * rounded, trailing zeros dropped: always reads back to the same float),
 * without printf. Formatting a 384-float embedding with printf took ~0.5 ms
 * on this CPU, as much as the model's forward pass for a short text; this
 * takes a few microseconds. The digits are exact: f = m * 2^e with m < 2^24,
 * and D = round_half_even(|f| * 10^s) is computed in 128-bit integers where
 * that fits (1e-20 <= |f| < 1e20, every value an embedding holds), else by
 * snprintf. tests/unit/test_sbuf.c compares it with snprintf's "%.9g". */
/* D = round_half_even(a * 10^(8 - E)) in [1e8, 1e9), with E the decimal
 * exponent of a (1e-20 <= a < 1e20); 0 when no estimate of E settles. */
static uint64_t nine_digits(float a, int *E_out)
{
    int ex;
    const float fr = frexpf(a, &ex); /* a = fr * 2^ex, fr in [0.5, 1) */
    const unsigned __int128 m = (unsigned __int128)(uint32_t)ldexpf(fr, 24);
    const int e = ex - 24;              /* a = m * 2^e exactly */
    int E = (int)floor(log10((double)a)); /* decimal exponent, maybe off by one */
    for (int tries = 0; tries < 3; tries++) {
        const int sc = 8 - E; /* D = round(a * 10^sc), wanted in [1e8, 1e9) */
        unsigned __int128 num = m, p10 = 1;
        for (int i = 0; i < (sc < 0 ? -sc : sc); i++)
            p10 *= 10;
        unsigned __int128 q, r, div;
        if (sc >= 0) { /* a * 10^sc = m * 10^sc * 2^e; sc <= 28 here */
            num *= p10;
            if (e >= 0) {
                q = num << e, r = 0, div = 1;
            } else {
                div = (unsigned __int128)1 << -e; /* -e <= 91 */
                q = num >> -e, r = num & (div - 1);
            }
        } else { /* a * 10^sc = (m * 2^e) / 10^-sc; e <= 43 here */
            num = e >= 0 ? num << e : num; /* e < 0 cannot meet sc < 0 */
            div = p10;
            q = num / div, r = num % div;
        }
        if (2 * r > div || (2 * r == div && (q & 1)))
            q++;
        if (q >= 1000000000u && q != 1000000000u) { /* estimate too low: one more digit */
            E++;
            continue;
        }
        if (q < 100000000u) { /* too high */
            E--;
            continue;
        }
        if (q == 1000000000u) /* rounded up into the next decade */
            q = 100000000u, E++;
        *E_out = E;
        return (uint64_t)q;
    }
    return 0;
}

/* Writes the nd significant digits dig[] of a number of decimal exponent E
 * as %g does (no trailing zeros): d[.ddd]e+XX, ddd[.ddd] or 0.000ddd.
 * Returns the end. */
static char *place_digits(char *o, const char *dig, int nd, int E)
{
    if (E < -4 || E >= 9) { /* d[.ddd]e+XX */
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++)
                *o++ = dig[i];
        }
        *o++ = 'e';
        *o++ = E < 0 ? '-' : '+';
        const int ae = E < 0 ? -E : E;
        *o++ = ae >= 10 ? (char)('0' + ae / 10) : '0';
        *o++ = (char)('0' + ae % 10);
    } else if (E >= 0) { /* ddd[.ddd] */
        for (int i = 0; i <= E; i++)
            *o++ = i < nd ? dig[i] : '0';
        if (nd > E + 1) {
            *o++ = '.';
            for (int i = E + 1; i < nd; i++)
                *o++ = dig[i];
        }
    } else { /* 0.000ddd */
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -E - 1; i++)
            *o++ = '0';
        for (int i = 0; i < nd; i++)
            *o++ = dig[i];
    }
    return o;
}

static int fmt_g9(char *out, float f)
{
    const float a = fabsf(f);
    int E;
    uint64_t D = 0;
    if (a != 0.0f && a >= 1e-20f && a < 1e20f)
        D = nine_digits(a, &E);
    if (!D)
        return snprintf(out, 32, "%.9g", (double)f);
    char dig[10];
    for (int i = 8; i >= 0; i--, D /= 10)
        dig[i] = (char)('0' + D % 10);
    int nd = 9;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    char *o = out;
    if (signbit(f))
        *o++ = '-';
    o = place_digits(o, dig, nd, E);
    *o = 0;
    return (int)(o - out);
}

int sb_format_float(char *out, float f)
{
    return fmt_g9(out, f);
}

void sb_float(sbuf *b, float f)
{
    char tmp[32];
    if (!isfinite(f)) {
        sb_puts(b, "null"); /* callers refuse non-finite outputs before this */
        return;
    }
    sb_putn(b, tmp, (size_t)fmt_g9(tmp, f));
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
