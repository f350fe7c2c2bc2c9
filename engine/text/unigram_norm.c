/* unigram_norm.c: the Unigram tokenizer's normalizer (engine/text/
 * unigram.h): SentencePiece's precompiled_charsmap read as tokenizers'
 * Precompiled normalizer reads it (a double-array trie searched for the
 * shortest prefix with a value; the text cut in extended grapheme
 * clusters, one under 6 bytes replaced whole by what its shortest mapped
 * prefix maps to, the others character by character), and the Replace
 * steps (a string, or runs of two spaces or more). With offsets, the same
 * steps keep each normalized byte's span in the original text as
 * tokenizers' alignments do (ug_normalize_track); the path without them
 * is unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/grapheme.h"
#include "engine/text/unigram_internal.h"
#include "engine/text/utf8.h"

bool ug_buf_put(ug_buf *o, const void *s, size_t n)
{
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n + 1)
            cap *= 2;
        char *b = realloc(o->b, cap);
        if (!b)
            return false;
        o->b = b;
        o->cap = cap;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    return true;
}

uint32_t ug_decode(const unsigned char *s, size_t *len)
{
    uint32_t c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    size_t k = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    c &= 0x7Fu >> k;
    for (size_t i = 1; i < k; i++)
        c = c << 6 | (s[i] & 0x3Fu);
    *len = k;
    return c;
}

bool ug_is_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* ---- the charsmap ---- */

static inline uint32_t ug_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

/* The value of the shortest prefix of key[0..n) the trie holds (a NUL
 * byte ends the key), or -1. Positions outside the array end the search. */
static long ug_cm_search(const ug_charsmap *m, const unsigned char *key, size_t n)
{
    size_t pos = ug_offset(m->unit[0]);
    for (size_t i = 0; i < n && key[i]; i++) {
        pos ^= key[i];
        if (pos >= m->nunit)
            return -1;
        uint32_t u = m->unit[pos];
        if ((u & (0x80000000u | 0xFFu)) != key[i])
            return -1;
        pos ^= ug_offset(u);
        if ((u >> 8) & 1)
            return pos < m->nunit ? (long)(m->unit[pos] & 0x7FFFFFFFu) : -1;
    }
    return -1;
}

/* What key maps to: *off and *len in m->norm; false when nothing (or a
 * value that is not the start of a character of the normalized strings). */
static bool ug_cm_lookup(const ug_charsmap *m, const unsigned char *key, size_t n, uint32_t *off,
                         uint32_t *len)
{
    long v = ug_cm_search(m, key, n);
    if (v < 0 || (size_t)v > m->nnorm ||
        ((size_t)v < m->nnorm && ((unsigned char)m->norm[v] & 0xC0) == 0x80))
        return false;
    size_t e = (size_t)v;
    while (e < m->nnorm && m->norm[e])
        e++;
    *off = (uint32_t)v;
    *len = (uint32_t)(e - (size_t)v);
    return true;
}

mt_status ug_charsmap_parse(ug_charsmap *m, const unsigned char *b, size_t n, const char *path,
                            const char *field, mt_err *err)
{
    if (n < 4)
        return mt_fail(err, MT_EFORMAT, "%s: %s: %zu bytes, not a charsmap (a trie size first)",
                       path, field, n);
    size_t size = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
    m->nunit = size / 4;
    if (m->nunit * 4 > n - 4 || m->nunit == 0)
        return mt_fail(err, MT_EFORMAT, "%s: %s: the trie's size %zu does not fit the %zu bytes "
                       "given", path, field, size, n - 4);
    m->nnorm = n - 4 - m->nunit * 4;
    m->unit = malloc(m->nunit * sizeof *m->unit);
    m->norm = malloc(m->nnorm + 1);
    if (!m->unit || !m->norm)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for %s", path, field);
    for (size_t k = 0; k < m->nunit; k++) {
        const unsigned char *u = b + 4 + 4 * k;
        m->unit[k] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                     (uint32_t)u[3] << 24;
    }
    memcpy(m->norm, b + 4 + m->nunit * 4, m->nnorm);
    m->norm[m->nnorm] = 0;
    for (size_t i = 0; i < m->nnorm;) {
        size_t k = (unsigned char)m->norm[i] < 0x80 ? 1
                   : mt_utf8_seq((const unsigned char *)m->norm + i, m->nnorm - i);
        if (!k)
            return mt_fail(err, MT_EFORMAT, "%s: %s: the normalized strings are not UTF-8 (byte "
                           "%zu)", path, field, i);
        i += k;
    }
    for (int c = 0; c < 128; c++) {
        unsigned char k = (unsigned char)c;
        m->ascii[c] = (int16_t)(c && ug_cm_lookup(m, &k, 1, &m->ascii_off[c], &m->ascii_len[c])
                                    ? c : -1);
    }
    return MT_OK;
}

void ug_charsmap_free(ug_charsmap *m)
{
    free(m->unit);
    free(m->norm);
    *m = (ug_charsmap){0};
}

/* Precompiled: s[0..n) into o. */
static bool ug_precompiled(const ug_charsmap *m, const unsigned char *s, size_t n, ug_buf *o)
{
    bool ok = true;
    uint32_t off, len;
    for (size_t i = 0; ok && i < n;) {
        unsigned char c = s[i];
        if (c < 0x80 && (i + 1 == n || (s[i + 1] < 0x80 && !(c == '\r' && s[i + 1] == '\n')))) {
            ok = m->ascii[c] >= 0 ? ug_buf_put(o, m->norm + m->ascii_off[c], m->ascii_len[c])
                                  : ug_buf_put(o, s + i, 1);
            i++;
            continue;
        }
        size_t g = gcb_next(s + i, n - i), k;
        if (g < 6 && ug_cm_lookup(m, s + i, g, &off, &len)) {
            ok = ug_buf_put(o, m->norm + off, len);
            i += g;
            continue;
        }
        for (size_t e = i + g; ok && i < e; i += k) {
            ug_decode(s + i, &k);
            ok = ug_cm_lookup(m, s + i, k, &off, &len) ? ug_buf_put(o, m->norm + off, len)
                                                       : ug_buf_put(o, s + i, k);
        }
    }
    return ok;
}

bool ug_spans_fit(ug_spans *o, size_t n)
{
    if (n <= o->cap)
        return true;
    size_t cap = o->cap ? o->cap : 256;
    while (cap < n)
        cap *= 2;
    ug_span *v = realloc(o->v, cap * sizeof *v);
    if (!v)
        return false;
    o->v = v;
    o->cap = cap;
    return true;
}

/* With spans (ia, oa not NULL): s[from..to) keeps its spans in oa, as
 * the bytes just put in o. */
static bool ug_keep(const ug_span *ia, ug_spans *oa, size_t from, size_t to)
{
    if (!ia)
        return true;
    if (!ug_spans_fit(oa, oa->n + (to - from)))
        return false;
    if (to > from) /* (oa->v may still be NULL: memcpy takes no NULL, even for 0 bytes) */
        memcpy(oa->v + oa->n, ia + from, (to - from) * sizeof *ia);
    oa->n += to - from;
    return true;
}

/* A match s[i..e) replaced by with: tokenizers' Replace inserts each new
 * character after removing the match's, so all take the span of the
 * match's last byte. */
static bool ug_swap(const ug_norm_step *st, const ug_span *ia, ug_spans *oa, size_t e)
{
    if (!ia)
        return true;
    if (!ug_spans_fit(oa, oa->n + st->nwith))
        return false;
    for (size_t k = 0; k < st->nwith; k++)
        oa->v[oa->n++] = ia[e - 1];
    return true;
}

/* Replace of a string: every occurrence, left to right, not overlapping
 * (spans too when ia is not NULL). */
static bool ug_replace(const ug_norm_step *st, const char *s, size_t n, ug_buf *o,
                       const ug_span *ia, ug_spans *oa)
{
    bool ok = true;
    size_t i = 0, from = 0;
    while (ok && i + st->npat <= n) {
        if (s[i] == st->pat[0] && memcmp(s + i, st->pat, st->npat) == 0) {
            ok = ug_buf_put(o, s + from, i - from) && ug_buf_put(o, st->with, st->nwith) &&
                 ug_keep(ia, oa, from, i) && ug_swap(st, ia, oa, i + st->npat);
            i += st->npat;
            from = i;
        } else {
            i++;
        }
    }
    return ok && ug_buf_put(o, s + from, n - from) && ug_keep(ia, oa, from, n);
}

/* Replace of the regex " {2,}": each run of two spaces or more. */
static bool ug_spaces(const ug_norm_step *st, const char *s, size_t n, ug_buf *o,
                      const ug_span *ia, ug_spans *oa)
{
    bool ok = true;
    size_t from = 0;
    for (size_t i = 0; ok && i < n; i++) {
        if (s[i] != ' ' || i + 1 >= n || s[i + 1] != ' ')
            continue;
        size_t e = i;
        while (e < n && s[e] == ' ')
            e++;
        ok = ug_buf_put(o, s + from, i - from) && ug_buf_put(o, st->with, st->nwith) &&
             ug_keep(ia, oa, from, i) && ug_swap(st, ia, oa, e);
        from = e;
        i = e - 1;
    }
    return ok && ug_buf_put(o, s + from, n - from) && ug_keep(ia, oa, from, n);
}

mt_status ug_normalize(const unigram_t *t, const char *text, size_t len, ug_buf *out,
                       ug_buf *scratch, mt_err *err)
{
    ug_buf tmp = *scratch;
    out->n = 0;
    bool ok = ug_buf_put(out, text, len);
    for (int k = 0; ok && k < t->nnorm; k++) {
        const ug_norm_step *st = &t->norm[k];
        tmp.n = 0;
        ok = st->kind == UG_NORM_PRECOMPILED
                 ? ug_precompiled(&t->cmap, (const unsigned char *)out->b, out->n, &tmp)
             : st->kind == UG_NORM_REPLACE ? ug_replace(st, out->b, out->n, &tmp, NULL, NULL)
                                           : ug_spaces(st, out->b, out->n, &tmp, NULL, NULL);
        ug_buf swap = *out;
        *out = tmp;
        tmp = swap;
    }
    *scratch = tmp;
    if (!ok)
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory normalizing %zu bytes", len);
    return MT_OK;
}

/* ---- with spans (the offsets' path; the path above stays as it was) ---- */

/* Per new character, tokenizers' `changes` (0: replaces the next original
 * character, 1: inserted, -k: replaces it and removes k more). */
typedef struct {
    int32_t *v;
    size_t n, cap;
} ug_chg;

static bool ug_chg_push(ug_chg *c, int32_t v)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        int32_t *p = realloc(c->v, cap * sizeof *p);
        if (!p)
            return false;
        c->v = p;
        c->cap = cap;
    }
    c->v[c->n++] = v;
    return true;
}

/* Precompiled's replace(): nold original characters become nw[0..nlen);
 * the new ones replace them in order, the extra ones are inserted (the
 * last ones), or the last new one so far removes what is left over. */
static bool ug_part(ug_buf *o, ug_chg *c, const char *nw, size_t nlen, size_t nold)
{
    if (!ug_buf_put(o, nw, nlen))
        return false;
    size_t nnew = 0;
    for (size_t i = 0; i < nlen; i++)
        if (((unsigned char)nw[i] & 0xC0) != 0x80) {
            if (!ug_chg_push(c, 0))
                return false;
            nnew++;
        }
    if (nnew > nold)
        for (size_t k = c->n - (nnew - nold); k < c->n; k++)
            c->v[k] = 1;
    else if (nnew < nold && c->n > 0)
        c->v[c->n - 1] -= (int32_t)(nold - nnew);
    return true;
}

static size_t ug_chars(const unsigned char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (s[i] & 0xC0) != 0x80;
    return k;
}

/* Precompiled as ug_precompiled, the changes of each new character in c. */
static bool ug_precompiled_chg(const ug_charsmap *m, const unsigned char *s, size_t n,
                               ug_buf *o, ug_chg *c)
{
    bool ok = true;
    uint32_t off, len;
    for (size_t i = 0; ok && i < n;) {
        size_t g = gcb_next(s + i, n - i), k;
        if (g < 6 && ug_cm_lookup(m, s + i, g, &off, &len)) {
            ok = ug_part(o, c, m->norm + off, len, ug_chars(s + i, g));
            i += g;
            continue;
        }
        for (size_t e = i + g; ok && i < e; i += k) {
            ug_decode(s + i, &k);
            ok = ug_cm_lookup(m, s + i, k, &off, &len) ? ug_part(o, c, m->norm + off, len, 1)
                                                       : ug_part(o, c, (const char *)s + i, k, 1);
        }
    }
    return ok;
}

static size_t ug_len_at(const char *s)
{
    unsigned char b = (unsigned char)*s;
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* tokenizers' transform_range over the whole string: the old text os
 * (on bytes, spans ia) to the new nw (nn bytes, changes c), spans in oa. */
static bool ug_transform(const char *os, size_t on, const ug_span *ia, const char *nw,
                         size_t nn, const ug_chg *c, ug_spans *oa)
{
    if (!ug_spans_fit(oa, nn))
        return false;
    size_t off = 0, j = 0;
    for (size_t i = 0; i < nn; j++) {
        size_t l = ug_len_at(nw + i);
        ug_span a = {0, 0};
        if (c->v[j] > 0) {
            if (off > 0)
                a = ia[off - 1];
        } else if (off < on) {
            a = ia[off];
            off += ug_len_at(os + off);
            for (int32_t k = c->v[j]; k < 0 && off < on; k++)
                off += ug_len_at(os + off);
        }
        for (size_t b = 0; b < l; b++)
            oa->v[i + b] = a;
        i += l;
    }
    oa->n = nn;
    return true;
}

mt_status ug_normalize_track(const unigram_t *t, const char *text, size_t len, size_t base,
                             ug_buf *out, ug_spans *al, ug_buf *scratch, ug_spans *sal,
                             mt_err *err)
{
    ug_buf tmp = *scratch;
    ug_spans ta = *sal;
    ug_chg c = {0};
    out->n = 0;
    bool ok = ug_buf_put(out, text, len) && ug_spans_fit(al, len);
    for (size_t i = 0, k; ok && i < len; i += k) {
        k = ug_len_at(text + i);
        for (size_t b = 0; b < k; b++)
            al->v[i + b] = (ug_span){(uint32_t)(base + i), (uint32_t)(base + i + k)};
    }
    al->n = len;
    for (int k = 0; ok && k < t->nnorm; k++) {
        const ug_norm_step *st = &t->norm[k];
        tmp.n = ta.n = c.n = 0;
        if (st->kind == UG_NORM_PRECOMPILED)
            ok = ug_precompiled_chg(&t->cmap, (const unsigned char *)out->b, out->n, &tmp, &c) &&
                 ug_transform(out->b, out->n, al->v, tmp.b, tmp.n, &c, &ta);
        else
            ok = st->kind == UG_NORM_REPLACE ? ug_replace(st, out->b, out->n, &tmp, al->v, &ta)
                                             : ug_spaces(st, out->b, out->n, &tmp, al->v, &ta);
        ug_buf swap = *out;
        *out = tmp;
        tmp = swap;
        ug_spans sw = *al;
        *al = ta;
        ta = sw;
    }
    *scratch = tmp;
    *sal = ta;
    free(c.v);
    if (!ok)
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory normalizing %zu bytes", len);
    return MT_OK;
}
