/* unigram_norm.c: the Unigram tokenizer's normalizer (engine/text/
 * unigram.h): SentencePiece's precompiled_charsmap read as tokenizers'
 * Precompiled normalizer reads it (a double-array trie searched for the
 * shortest prefix with a value; the text cut in extended grapheme
 * clusters, one under 6 bytes replaced whole by what its shortest mapped
 * prefix maps to, the others character by character), and the Replace
 * steps (a string, or runs of two spaces or more).
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

/* Replace of a string: every occurrence, left to right, not overlapping. */
static bool ug_replace(const ug_norm_step *st, const char *s, size_t n, ug_buf *o)
{
    bool ok = true;
    size_t i = 0, from = 0;
    while (ok && i + st->npat <= n) {
        if (s[i] == st->pat[0] && memcmp(s + i, st->pat, st->npat) == 0) {
            ok = ug_buf_put(o, s + from, i - from) && ug_buf_put(o, st->with, st->nwith);
            i += st->npat;
            from = i;
        } else {
            i++;
        }
    }
    return ok && ug_buf_put(o, s + from, n - from);
}

/* Replace of the regex " {2,}": each run of two spaces or more. */
static bool ug_spaces(const ug_norm_step *st, const char *s, size_t n, ug_buf *o)
{
    bool ok = true;
    size_t from = 0;
    for (size_t i = 0; ok && i < n; i++) {
        if (s[i] != ' ' || i + 1 >= n || s[i + 1] != ' ')
            continue;
        size_t e = i;
        while (e < n && s[e] == ' ')
            e++;
        ok = ug_buf_put(o, s + from, i - from) && ug_buf_put(o, st->with, st->nwith);
        from = e;
        i = e - 1;
    }
    return ok && ug_buf_put(o, s + from, n - from);
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
             : st->kind == UG_NORM_REPLACE ? ug_replace(st, out->b, out->n, &tmp)
                                           : ug_spaces(st, out->b, out->n, &tmp);
        ug_buf swap = *out;
        *out = tmp;
        tmp = swap;
    }
    *scratch = tmp;
    if (!ok)
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory normalizing %zu bytes", len);
    return MT_OK;
}
