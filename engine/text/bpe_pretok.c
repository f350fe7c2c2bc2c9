/* bpe_pretok.c: the byte-level BPE tokenizer's text steps before the
 * merges: NFC (tokenizers' NFC normalizer: canonical decomposition, canonical
 * order, canonical composition, on the tables of unicode_data.c and
 * bpe_unicode.c), and Qwen2's split regex
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * as a hand-written matcher with the regex engine's semantics (leftmost
 * alternative that matches, greedy with backtracking), the pieces isolated.
 * With offsets, NFC also keeps each output byte's original character as
 * tokenizers aligns it (bpe_nfc_track).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/bpe_internal.h"
#include "engine/text/bpe_unicode.h"
#include "engine/text/unicode_data.h"

/* Decodes one code point of well-formed UTF-8 at s; returns its length. */
static inline size_t bpe_cp(const unsigned char *s, uint32_t *cp)
{
    unsigned b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b < 0xE0) {
        *cp = (b & 0x1Fu) << 6 | (s[1] & 0x3Fu);
        return 2;
    }
    if (b < 0xF0) {
        *cp = (b & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu);
        return 3;
    }
    *cp = (b & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu);
    return 4;
}

static size_t bpe_put_utf8(char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | c >> 6);
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12);
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18);
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static inline int bpe_ccc(uint32_t c)
{
    return (ucd_flags(c) & UCD_CCC) ? ucd_ccc(c) : 0;
}

/* Full canonical decomposition of the text into d (room: 4 per byte is
 * enough: no code point decomposes to more than UCD_MAX_DECOMP, each at
 * least one byte), then canonical order. Returns the count. With ch (the
 * offsets' path) each character's `changes` too (tokenizers' alignment:
 * the first of a decomposition replaces its source, the others are
 * inserted), moved with it by the canonical order. */
static size_t bpe_decompose(const unsigned char *s, size_t len, uint32_t *d, int32_t *ch)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += bpe_cp(s + i, &c);
        size_t m = c >= 0x80 && (ucd_flags(c) & UCD_DECOMP) ? (size_t)ucd_decompose(c, d + n)
                                                             : (d[n] = c, 1);
        for (size_t j = 0; ch && j < m; j++)
            ch[n + j] = j > 0;
        n += m;
    }
    for (size_t i = 1; i < n; i++) { /* stable insertion sort of each non-starter run */
        int cc = bpe_ccc(d[i]);
        for (size_t j = i; cc && j > 0; j--) {
            int pc = bpe_ccc(d[j - 1]);
            if (!pc || pc <= cc)
                break;
            uint32_t tmp = d[j - 1];
            d[j - 1] = d[j];
            d[j] = tmp;
            if (ch) {
                int32_t tc = ch[j - 1];
                ch[j - 1] = ch[j];
                ch[j] = tc;
            }
        }
    }
    return n;
}

/* Canonical composition of d[0..n) in place; returns the new count. With
 * ch, the changes kept along: a composed pair replaces one character fewer
 * than its two did. */
static size_t bpe_compose(uint32_t *d, int32_t *ch, size_t n)
{
    size_t out = 0, st = SIZE_MAX;
    int last = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = d[i];
        int cc = bpe_ccc(c);
        if (st != SIZE_MAX && (out - 1 == st || last < cc)) {
            uint32_t comp = bpu_compose(d[st], c);
            if (comp) {
                d[st] = comp;
                if (ch)
                    ch[st] += ch[i] - 1;
                continue;
            }
        }
        if (!cc)
            st = out;
        last = cc;
        if (ch)
            ch[out] = ch[i];
        d[out++] = c;
    }
    return out;
}

mt_status bpe_nfc(const char *text, size_t len, char **out, size_t *out_len, mt_err *err)
{
    const unsigned char *s = (const unsigned char *)text;
    *out = NULL;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t c;
        size_t k = bpe_cp(s + i, &c);
        if (bpu_flags(c) & BPU_NFCQ)
            break;
        i += k;
    }
    if (i == len)
        return MT_OK;
    uint32_t *d = malloc((len * UCD_MAX_DECOMP + 1) * sizeof *d);
    char *o = malloc(len * 4 + 1);
    if (!d || !o) {
        free(d);
        free(o);
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory for NFC of %zu bytes", len);
    }
    size_t n = bpe_compose(d, NULL, bpe_decompose(s, len, d, NULL));
    size_t w = 0;
    for (size_t k = 0; k < n; k++)
        w += bpe_put_utf8(o + w, d[k]);
    o[w] = 0;
    free(d);
    *out = o;
    *out_len = w;
    return MT_OK;
}

/* ---- NFC with spans (the offsets' path) ---- */

/* The spans of the NFC'd characters d[0..n) (changes ch) over the
 * original s[0..len) at base, as tokenizers' transform aligns them, into
 * sp (pairs per output byte). Returns the output's bytes. */
static size_t bpe_align(const unsigned char *s, size_t len, size_t base, const uint32_t *d,
                        const int32_t *ch, size_t n, uint32_t *sp)
{
    size_t off = 0, w = 0, k;
    uint32_t c, ps = (uint32_t)base, pe = (uint32_t)base; /* the previous original's */
    for (size_t j = 0; j < n; j++) {
        uint32_t a = ps, e = pe;
        if (ch[j] <= 0 && off < len) {
            k = bpe_cp(s + off, &c);
            a = ps = (uint32_t)(base + off);
            e = pe = (uint32_t)(base + off + k);
            off += k;
            for (int32_t r = ch[j]; r < 0 && off < len; r++) {
                k = bpe_cp(s + off, &c);
                ps = (uint32_t)(base + off);
                pe = (uint32_t)(base + off + k);
                off += k;
            }
        }
        char tmp[4];
        for (size_t b = bpe_put_utf8(tmp, d[j]); b > 0; b--, w++) {
            sp[2 * w] = a;
            sp[2 * w + 1] = e;
        }
    }
    return w;
}

mt_status bpe_nfc_track(const char *text, size_t len, size_t base, bool nfc, char **out,
                        size_t *out_len, uint32_t **spans, mt_err *err)
{
    const unsigned char *s = (const unsigned char *)text;
    *out = NULL;
    mt_status st = nfc ? bpe_nfc(text, len, out, out_len, err) : MT_OK;
    if (st != MT_OK)
        return st;
    size_t n = *out ? *out_len : len;
    *spans = malloc((2 * n + 2) * sizeof **spans);
    uint32_t *d = *out ? malloc((len * UCD_MAX_DECOMP + 1) * sizeof *d) : NULL;
    int32_t *ch = *out ? malloc((len * UCD_MAX_DECOMP + 1) * sizeof *ch) : NULL;
    if (!*spans || (*out && (!d || !ch))) {
        free(d);
        free(ch);
        free(*out);
        free(*spans);
        *out = NULL;
        *spans = NULL;
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory for NFC of %zu bytes", len);
    }
    if (*out) {
        size_t m = bpe_compose(d, ch, bpe_decompose(s, len, d, ch));
        bpe_align(s, len, base, d, ch, m, *spans);
    } else {
        for (size_t i = 0, k; i < len; i += k) {
            uint32_t c;
            k = bpe_cp(s + i, &c);
            for (size_t b = 0; b < k; b++) {
                (*spans)[2 * (i + b)] = (uint32_t)(base + i);
                (*spans)[2 * (i + b) + 1] = (uint32_t)(base + i + k);
            }
        }
    }
    free(d);
    free(ch);
    return MT_OK;
}

/* ---- the split regex ---- */

/* (?i:...)'s case folding: ASCII letters, and U+017F (long s) folds to s. */
static inline uint32_t bpe_fold(uint32_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c + 32;
    return c == 0x17F ? 's' : c;
}

/* A contraction at i ('s 't 're 've 'm 'll 'd, any case): its end, or i. */
static size_t bpe_contraction(const uint32_t *c, size_t i, size_t n)
{
    if (c[i] != '\'' || i + 1 >= n)
        return i;
    uint32_t a = bpe_fold(c[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return i + 2;
    if (i + 2 >= n)
        return i;
    uint32_t b = bpe_fold(c[i + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return i + 3;
    return i;
}

enum { L_ = BPU_L, N_ = BPU_N, WS_ = BPU_WS };

/* The end of the whitespace alternatives (\s*[\r\n]+ | \s+(?!\S) | \s+) at
 * i, a whitespace character. */
static size_t bpe_space_run(const uint32_t *c, const uint8_t *f, size_t i, size_t n)
{
    size_t e = i, nl = SIZE_MAX;
    while (e < n && (f[e] & WS_)) {
        if (c[e] == '\r' || c[e] == '\n')
            nl = e;
        e++;
    }
    if (nl != SIZE_MAX)
        return nl + 1;
    if (e == n || e - i == 1)
        return e;
    return e - 1;
}

/* The end of the regex's match at i, or i when none matches. */
static size_t bpe_match(const uint32_t *c, const uint8_t *f, size_t i, size_t n)
{
    size_t e = bpe_contraction(c, i, n);
    if (e > i)
        return e;
    unsigned fi = f[i];
    size_t j = SIZE_MAX; /* where \p{L}+ starts */
    if (fi & L_)
        j = i;
    else if (!(fi & N_) && c[i] != '\r' && c[i] != '\n' && i + 1 < n && (f[i + 1] & L_))
        j = i + 1;
    if (j != SIZE_MAX) {
        while (j < n && (f[j] & L_))
            j++;
        return j;
    }
    if (fi & N_)
        return i + 1;
    j = SIZE_MAX; /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if (c[i] == ' ' && i + 1 < n && !(f[i + 1] & (WS_ | L_ | N_)))
        j = i + 1;
    else if (!(fi & (WS_ | L_ | N_)))
        j = i;
    if (j != SIZE_MAX) {
        while (j < n && !(f[j] & (WS_ | L_ | N_)))
            j++;
        while (j < n && (c[j] == '\r' || c[j] == '\n'))
            j++;
        return j;
    }
    if (fi & WS_)
        return bpe_space_run(c, f, i, n);
    return i;
}

static bool bpe_piece(bpe_pieces *p, size_t a, size_t b)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        size_t *s = realloc(p->start, cap * sizeof *s);
        if (!s)
            return false;
        p->start = s;
        size_t *e = realloc(p->end, cap * sizeof *e);
        if (!e)
            return false;
        p->end = e;
        p->cap = cap;
    }
    p->start[p->n] = a;
    p->end[p->n++] = b;
    return true;
}

mt_status bpe_split(const char *text, size_t len, bpe_pieces *p, mt_err *err)
{
    const unsigned char *s = (const unsigned char *)text;
    uint32_t cbuf[512];
    uint8_t fbuf[512];
    size_t obuf[513];
    uint32_t *c = cbuf;
    uint8_t *f = fbuf;
    size_t *off = obuf;
    if (len >= 512) {
        c = malloc(len * sizeof *c);
        f = malloc(len);
        off = malloc((len + 1) * sizeof *off);
    }
    mt_status st = MT_OK;
    if (!c || !f || !off) {
        st = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        off[n] = i;
        i += bpe_cp(s + i, &c[n]);
        f[n] = (uint8_t)bpu_flags(c[n]);
    }
    off[n] = len;
    size_t gap = SIZE_MAX; /* start of characters no alternative matched */
    for (size_t i = 0; i < n;) {
        size_t e = bpe_match(c, f, i, n);
        if (e == i) {
            if (gap == SIZE_MAX)
                gap = i;
            i++;
            continue;
        }
        if ((gap != SIZE_MAX && !bpe_piece(p, off[gap], off[i])) || !bpe_piece(p, off[i], off[e])) {
            st = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory for the pieces of the text");
            goto done;
        }
        gap = SIZE_MAX;
        i = e;
    }
    if (gap != SIZE_MAX && !bpe_piece(p, off[gap], len))
        st = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory for the pieces of the text");
done:
    if (c != cbuf) {
        free(c);
        free(f);
        free(off);
    }
    return st;
}
