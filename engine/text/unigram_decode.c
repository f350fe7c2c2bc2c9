/* unigram_decode.c: ids back to text for the Unigram tokenizer
 * (engine/text/unigram.h), as tokenizers' decode runs the file's decoder
 * over the tokens' texts: ByteFallback (runs of <0xNN> tokens become
 * their bytes when those are UTF-8, else one U+FFFD per byte), Metaspace
 * (the replacement character becomes a space; in the first token it is
 * dropped unless the prepend scheme is "never"), Fuse (one token of all);
 * then the tokens joined.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/unigram_internal.h"
#include "engine/text/utf8.h"

/* A list of token texts, each owned. */
typedef struct {
    char **s;
    int n, cap;
} ug_strs;

static bool ug_strs_add(ug_strs *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        char **v = realloc(l->s, (size_t)cap * sizeof *v);
        if (!v)
            return false;
        l->s = v;
        l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c)
        return false;
    memcpy(c, s, n);
    c[n] = 0;
    l->s[l->n++] = c;
    return true;
}

static void ug_strs_free(ug_strs *l)
{
    for (int k = 0; k < l->n; k++)
        free(l->s[k]);
    free(l->s);
    *l = (ug_strs){0};
}

static int ug_hex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The byte a "<0xNN>" token spells (Rust's u8::from_str_radix on NN), or -1. */
static int ug_byte_token(const char *s)
{
    if (strlen(s) != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int hi = s[3] == '+' ? 0 : ug_hex(s[3]), lo = ug_hex(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Flushes pending bytes b[0..n) into out as ByteFallback does. */
static bool ug_flush_bytes(ug_strs *out, const unsigned char *b, size_t n)
{
    bool utf8 = true;
    for (size_t i = 0; utf8 && i < n;) {
        size_t k = b[i] < 0x80 ? 1 : mt_utf8_seq(b + i, n - i);
        utf8 = k != 0;
        i += k;
    }
    if (utf8)
        return n == 0 || ug_strs_add(out, (const char *)b, n);
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++)
        ok = ug_strs_add(out, "\xEF\xBF\xBD", 3);
    return ok;
}

static bool ug_dec_bytefallback(const ug_strs *in, ug_strs *out)
{
    unsigned char *pend = malloc((size_t)in->n + 1);
    size_t np = 0;
    bool ok = pend != NULL;
    for (int k = 0; ok && k < in->n; k++) {
        int b = ug_byte_token(in->s[k]);
        if (b >= 0) {
            pend[np++] = (unsigned char)b;
            continue;
        }
        ok = ug_flush_bytes(out, pend, np) && ug_strs_add(out, in->s[k], strlen(in->s[k]));
        np = 0;
    }
    ok = ok && ug_flush_bytes(out, pend, np);
    free(pend);
    return ok;
}

static bool ug_dec_metaspace(const unigram_t *t, const ug_strs *in, ug_strs *out)
{
    bool ok = true;
    for (int k = 0; ok && k < in->n; k++) {
        const char *s = in->s[k];
        size_t n = strlen(s), w = 0;
        char *o = malloc(n + 1);
        if (!o)
            return false;
        for (size_t i = 0; i < n;) {
            if (n - i >= t->ndec_repl && memcmp(s + i, t->dec_repl, t->ndec_repl) == 0) {
                if (k > 0 || t->dec_prepend == UG_PREPEND_NEVER)
                    o[w++] = ' ';
                i += t->ndec_repl;
            } else {
                o[w++] = s[i++];
            }
        }
        ok = ug_strs_add(out, o, w);
        free(o);
    }
    return ok;
}

static bool ug_dec_fuse(const ug_strs *in, ug_strs *out)
{
    size_t total = 0;
    for (int k = 0; k < in->n; k++)
        total += strlen(in->s[k]);
    char *o = malloc(total + 1);
    if (!o)
        return false;
    size_t w = 0;
    for (int k = 0; k < in->n; k++) {
        size_t n = strlen(in->s[k]);
        memcpy(o + w, in->s[k], n);
        w += n;
    }
    bool ok = ug_strs_add(out, o, w);
    free(o);
    return ok;
}

/* The tokens' texts, special ones left out when skip_special. */
static mt_status ug_dec_tokens(const unigram_t *t, const int32_t *ids, int n, bool skip_special,
                               ug_strs *l, mt_err *err)
{
    for (int k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= t->ntok || !t->tok[ids[k]])
            return mt_fail(err, MT_EINVAL, "ids[%d]: %d is not a token id (vocabulary of %d)", k,
                           ids[k], t->ntok);
        if (skip_special && unigram_is_special(t, ids[k]))
            continue;
        if (!ug_strs_add(l, t->tok[ids[k]], strlen(t->tok[ids[k]])))
            return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory decoding");
    }
    return MT_OK;
}

mt_status unigram_decode(const unigram_t *t, const int32_t *ids, int n, bool skip_special,
                         char **out, mt_err *err)
{
    *out = NULL;
    ug_strs a = {0}, b = {0};
    mt_status s = ug_dec_tokens(t, ids, n, skip_special, &a, err);
    for (int k = 0; s == MT_OK && k < t->ndec; k++) {
        bool ok = t->dec[k] == UG_DEC_BYTEFALLBACK ? ug_dec_bytefallback(&a, &b)
                  : t->dec[k] == UG_DEC_METASPACE  ? ug_dec_metaspace(t, &a, &b)
                                                   : ug_dec_fuse(&a, &b);
        ug_strs_free(&a);
        a = b;
        b = (ug_strs){0};
        if (!ok)
            s = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory decoding");
    }
    if (s == MT_OK) {
        ug_strs all = {0};
        if (!ug_dec_fuse(&a, &all))
            s = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory decoding");
        else
            *out = all.s[0], all.n = 0;
        ug_strs_free(&all);
    }
    ug_strs_free(&a);
    ug_strs_free(&b);
    return s;
}
