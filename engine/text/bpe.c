/* bpe.c: the byte-level BPE tokenizer's encode and decode
 * (engine/text/bpe.h): added tokens split off the raw text, each other
 * segment NFC'd and split by the regex (bpe_pretok.c), each piece's bytes
 * merged by rank (the lowest-ranked adjacent pair first, the leftmost of
 * equal ranks: a scan of the pairs for short pieces, a heap for long
 * ones), then the post-processor's tokens and truncation; decode maps the
 * tokens' characters back to bytes. With offsets (bpe_encode_offsets) each
 * token spans the original characters of its first and last bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/bpe_internal.h"
#include "engine/text/tok_ids.h"
#include "engine/text/utf8.h"

/* The characters of the token's text that are Ġ (a space's byte) or
 * White_Space, from its start (back: its end), as ByteLevel counts them. */
static size_t bpe_ws_run(const char *s, bool back)
{
    size_t n = strlen(s), cnt = 0;
    for (size_t i = back ? n : 0; back ? i > 0 : i < n; cnt++) {
        size_t j = i;
        if (back)
            while (--j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80) {
            }
        uint32_t c = (unsigned char)s[j];
        size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        for (size_t b = 1; b < k; b++)
            c = (b == 1 ? c & (0x7Fu >> k) : c) << 6 | ((unsigned char)s[j + b] & 0x3Fu);
        bool ws = c == 0x120 || c == ' ' || (c >= 9 && c <= 13) || c == 0x85 || c == 0xA0 ||
                  c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
                  c == 0x202F || c == 0x205F || c == 0x3000;
        if (!ws)
            break;
        i = back ? j : i + k;
    }
    return cnt;
}

/* ByteLevel's trim_offsets on the last token: its leading and trailing
 * spaces' characters off its span, counted in characters of the text (a
 * single leading one kept on the first token with add_prefix_space). */
static void bpe_trim(const bpe_t *t, tok_ids *o, int32_t id)
{
    const char *s = t->tok[id];
    int32_t *f = o->off + 2 * (o->n - 1);
    size_t lead = bpe_ws_run(s, false), trail = bpe_ws_run(s, true);
    if ((o->n == 1 || f[0] == 0) && t->trim_prefix && lead == 1)
        lead = 0;
    for (; lead > 0 && f[0] < f[1]; lead--) {
        unsigned char b = (unsigned char)o->text[f[0]];
        f[0] += b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    }
    size_t e = (size_t)f[1], k = trail;
    for (; k > 0 && e > 0; k--)
        while (--e > 0 && ((unsigned char)o->text[e] & 0xC0) == 0x80) {
        }
    if (trail > 0 && k == 0)
        f[1] = (int32_t)e > f[0] ? (int32_t)e : f[0];
}

/* tok_ids_push with the token's span [s, e) in text when tracking. */
static bool bpe_push_at(const bpe_t *t, tok_ids *o, int32_t id, uint32_t s, uint32_t e)
{
    if (!tok_ids_push(o, id))
        return false;
    if (o->track) {
        o->off[2 * (o->n - 1)] = (int32_t)s;
        o->off[2 * (o->n - 1) + 1] = (int32_t)e;
        if (t->trim)
            bpe_trim(t, o, id);
    }
    return true;
}

#define BPE_NONE INT32_MAX

/* The rank of the pair (a, b) and its merged id in *id, or BPE_NONE. */
static inline int32_t bpe_rank(const bpe_t *t, int32_t a, int32_t b, int32_t *id)
{
    const bpe_merge *m = bpe_merge_find(t, a, b);
    if (!m)
        return BPE_NONE;
    *id = m->id;
    return m->rank;
}

/* Merges n symbols s[] in place (short pieces): each round merges the
 * lowest-ranked pair, the leftmost of equals. Returns the count left. */
__attribute__((always_inline)) static inline size_t bpe_merge_short(const bpe_t *t, int32_t *s,
                                                                     size_t n)
{
    int32_t rank[64], nid[64];
    for (size_t i = 0; i + 1 < n; i++)
        rank[i] = bpe_rank(t, s[i], s[i + 1], &nid[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == BPE_NONE)
            break;
        s[best] = nid[best];
        size_t tail = n - best - 2; /* symbols after the removed one */
        memmove(s + best + 1, s + best + 2, tail * sizeof *s);
        if (tail) {
            memmove(rank + best + 1, rank + best + 2, (tail - 1) * sizeof *rank);
            memmove(nid + best + 1, nid + best + 2, (tail - 1) * sizeof *nid);
        }
        n--;
        if (best > 0)
            rank[best - 1] = bpe_rank(t, s[best - 1], s[best], &nid[best - 1]);
        if (best + 1 < n)
            rank[best] = bpe_rank(t, s[best], s[best + 1], &nid[best]);
    }
    return n;
}

typedef struct {
    int32_t rank, pos, right, a, b, id;
} bpe_cand;

static inline bool bpe_before(const bpe_cand *x, const bpe_cand *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void bpe_heap_push(bpe_cand *h, size_t *n, bpe_cand c)
{
    size_t i = (*n)++;
    while (i > 0 && bpe_before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static bpe_cand bpe_heap_pop(bpe_cand *h, size_t *n)
{
    bpe_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && bpe_before(&h[c + 1], &h[c]))
            c++;
        if (!bpe_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static void bpe_cand_at(const bpe_t *t, const int32_t *s, const int32_t *nx, int32_t p,
                        bpe_cand *h, size_t *nh)
{
    if (p < 0 || nx[p] < 0)
        return;
    bpe_cand c = {.pos = p, .right = nx[p], .a = s[p], .b = s[nx[p]]};
    c.rank = bpe_rank(t, c.a, c.b, &c.id);
    if (c.rank != BPE_NONE)
        bpe_heap_push(h, nh, c);
}

/* Merges n symbols (long pieces) with a heap of candidate pairs on a
 * linked list; stale candidates are dropped when popped. */
static size_t bpe_merge_long(const bpe_t *t, int32_t *s, size_t n, mt_err *err, bool *ok)
{
    int32_t *nx = malloc(n * sizeof *nx), *pv = malloc(n * sizeof *pv);
    bpe_cand *h = malloc(2 * n * sizeof *h);
    *ok = nx && pv && h;
    size_t nh = 0, left = n;
    for (size_t i = 0; *ok && i < n; i++) {
        nx[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        pv[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; *ok && i + 1 < n; i++)
        bpe_cand_at(t, s, nx, (int32_t)i, h, &nh);
    while (*ok && nh > 0) {
        bpe_cand c = bpe_heap_pop(h, &nh);
        if (s[c.pos] != c.a || nx[c.pos] != c.right || s[c.right] != c.b)
            continue; /* stale */
        s[c.pos] = c.id;
        s[c.right] = -1;
        nx[c.pos] = nx[c.right];
        if (nx[c.pos] >= 0)
            pv[nx[c.pos]] = c.pos;
        left--;
        if (nh + 2 > 2 * n) { /* cannot happen: each merge adds at most two */
            *ok = false;
            break;
        }
        bpe_cand_at(t, s, nx, pv[c.pos], h, &nh);
        bpe_cand_at(t, s, nx, c.pos, h, &nh);
    }
    size_t w = 0;
    for (size_t i = 0; *ok && i < n; i++)
        if (s[i] >= 0)
            s[w++] = s[i];
    free(nx);
    free(pv);
    free(h);
    if (!*ok)
        mt_fail(err, MT_ENOMEM, "tokenizer: out of memory merging a piece of %zu bytes", n);
    return *ok ? left : 0;
}

/* The bytes of token id (one per character of its byte-level text). */
static size_t bpe_tok_bytes(const bpe_t *t, int32_t id)
{
    size_t k = 0;
    for (const unsigned char *s = (const unsigned char *)t->tok[id]; *s; s++)
        k += (*s & 0xC0) != 0x80;
    return k;
}

/* With offsets: the n tokens s[] merged from the piece's bytes w[0..m)
 * (sp: their spans, pairs), each spanning its first byte's start to its
 * last byte's end; bytes without a token are skipped as the ids skip them. */
static bool bpe_word_spans(const bpe_t *t, const unsigned char *w, size_t m, const int32_t *s,
                           size_t n, const uint32_t *sp, tok_ids *o)
{
    size_t b = 0, k = 0;
    bool ok = true;
    for (; ok && k < n; k++) {
        while (b < m && t->byte_id[w[b]] < 0)
            b++;
        size_t first = b;
        for (size_t left = bpe_tok_bytes(t, s[k]); left > 0 && b < m; b++)
            left -= t->byte_id[w[b]] >= 0;
        ok = bpe_push_at(t, o, s[k], sp[2 * first], sp[2 * (b - 1) + 1]);
    }
    return ok;
}

/* The ids of one piece's bytes w[0..m) (sp: their spans with offsets). */
__attribute__((always_inline)) static inline mt_status
bpe_word(const bpe_t *t, const unsigned char *w, size_t m, const uint32_t *sp, tok_ids *o,
         mt_err *err, const bool track)
{
    if (t->ignore_merges && m > 1) {
        int32_t id = bpe_vocab_find(t, w, m);
        if (id >= 0 && !track)
            return tok_ids_push(o, id) ? MT_OK
                                       : mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
        if (id >= 0)
            return bpe_push_at(t, o, id, sp[0], sp[2 * m - 1])
                       ? MT_OK : mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    }
    int32_t small[64];
    int32_t *s = m <= 64 ? small : malloc(m * sizeof *s);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory merging %zu bytes", m);
    size_t n = 0;
    for (size_t i = 0; i < m; i++)
        if (t->byte_id[w[i]] >= 0) /* a byte with no token is left out, as HF does without unk */
            s[n++] = t->byte_id[w[i]];
    bool ok = true;
    n = n <= 64 ? bpe_merge_short(t, s, n) : bpe_merge_long(t, s, n, err, &ok);
    if (track)
        ok = ok && bpe_word_spans(t, w, m, s, n, sp, o);
    else
        for (size_t i = 0; ok && i < n; i++)
            ok = tok_ids_push(o, s[i]);
    if (s != small)
        free(s);
    if (!ok)
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    return MT_OK;
}

/* Every piece of x through bpe_word: one body, two machine copies (with
 * offsets: sp the spans of x's bytes), the one without offsets free of
 * their branches. */
static __attribute__((noinline)) mt_status bpe_words_plain(const bpe_t *t, const char *x,
                                                           const bpe_pieces *p, tok_ids *o,
                                                           mt_err *err)
{
    mt_status s = MT_OK;
    for (size_t k = 0; s == MT_OK && k < p->n; k++)
        s = bpe_word(t, (const unsigned char *)x + p->start[k], p->end[k] - p->start[k], NULL, o,
                     err, false);
    return s;
}

static __attribute__((noinline)) mt_status bpe_words_track(const bpe_t *t, const char *x,
                                                           const bpe_pieces *p,
                                                           const uint32_t *sp, tok_ids *o,
                                                           mt_err *err)
{
    mt_status s = MT_OK;
    for (size_t k = 0; s == MT_OK && k < p->n; k++)
        s = bpe_word(t, (const unsigned char *)x + p->start[k], p->end[k] - p->start[k],
                     sp + 2 * p->start[k], o, err, true);
    return s;
}

/* The ids of a segment between added tokens, at byte base of the text:
 * NFC, split, merges. */
static mt_status bpe_segment(const bpe_t *t, const char *text, size_t len, size_t base,
                             bpe_pieces *p, tok_ids *o, mt_err *err)
{
    char *norm = NULL;
    uint32_t *sp = NULL;
    size_t nlen = len;
    mt_status s = MT_OK;
    if (o->track)
        s = bpe_nfc_track(text, len, base, t->nfc, &norm, &nlen, &sp, err);
    else if (t->nfc)
        s = bpe_nfc(text, len, &norm, &nlen, err);
    if (s != MT_OK)
        return s;
    const char *x = norm ? norm : text;
    p->n = 0;
    s = bpe_split(x, nlen, p, err);
    if (s == MT_OK)
        s = o->track ? bpe_words_track(t, x, p, sp, o, err) : bpe_words_plain(t, x, p, o, err);
    free(norm);
    free(sp);
    return s;
}

/* The ids of the text alone (no post-processor tokens). */
static mt_status bpe_text_ids(const bpe_t *t, const char *text, size_t len, tok_ids *o,
                              mt_err *err)
{
    bpe_pieces p = {0};
    mt_status s = MT_OK;
    size_t seg = 0;
    int a;
    for (size_t i = 0; s == MT_OK && (a = tok_added_next(&t->added, text, len, &i)) >= 0;) {
        if (i > seg)
            s = bpe_segment(t, text + seg, i - seg, seg, &p, o, err);
        if (s == MT_OK && !bpe_push_at(t, o, t->added.tok[a].id, (uint32_t)i,
                                       (uint32_t)(i + t->added.tok[a].len)))
            s = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
        i += t->added.tok[a].len;
        seg = i;
    }
    if (s == MT_OK && seg < len)
        s = bpe_segment(t, text + seg, len - seg, seg, &p, o, err);
    free(p.start);
    free(p.end);
    return s;
}

/* bpe_encode, with offsets when not NULL. */
static mt_status bpe_encode_at(const bpe_t *t, const char *text, size_t len, int32_t *ids,
                               int32_t *offsets, int max_len, int *n, int *full_len, mt_err *err)
{
    if (!t || !ids || !n || (!text && len > 0))
        return mt_fail(err, MT_EINVAL, "bpe_encode: NULL argument");
    int extra = t->npre + t->npost;
    mt_status s = tok_encode_begin("bpe_encode", extra, max_len, n, full_len, err);
    if (s == MT_OK)
        s = tok_check_text(text, len, offsets != NULL, err);
    if (s != MT_OK)
        return s;
    tok_ids o = {.track = offsets != NULL, .text = text};
    s = bpe_text_ids(t, text, len, &o, err);
    if (s == MT_OK && o.n > (size_t)(0x7FFFFFFF - extra))
        s = mt_fail(err, MT_ELIMIT, "tokenizer: text has more than %d tokens", 0x7FFFFFFF - extra);
    if (s != MT_OK) {
        tok_ids_free(&o);
        return s;
    }
    tok_encode_end(&o, t->pre, t->npre, t->post, t->npost, max_len, ids, offsets, n, full_len);
    return MT_OK;
}

mt_status bpe_encode(const bpe_t *t, const char *text, size_t len, int32_t *ids, int max_len,
                     int *n, int *full_len, mt_err *err)
{
    return bpe_encode_at(t, text, len, ids, NULL, max_len, n, full_len, err);
}

mt_status bpe_encode_offsets(const bpe_t *t, const char *text, size_t len, int32_t *ids,
                             int32_t *offsets, int max_len, int *n, int *full_len, mt_err *err)
{
    if (!offsets)
        return mt_fail(err, MT_EINVAL, "bpe_encode_offsets: NULL offsets");
    return bpe_encode_at(t, text, len, ids, offsets, max_len, n, full_len, err);
}

/* ---- decode ---- */

/* Length of the maximal prefix of a UTF-8 sequence at s (n bytes) that is
 * ill-formed as a whole: what one U+FFFD replaces (Rust's from_utf8_lossy). */
static size_t bpe_bad_len(const unsigned char *s, size_t n)
{
    unsigned b = s[0];
    size_t need = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                  : b >= 0xF0 && b <= 0xF4 ? 4 : 1;
    unsigned lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
    unsigned hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
    size_t k = 1;
    for (; k < need && k < n; k++) {
        if (s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xBF))
            break;
    }
    return k;
}

/* The decoded bytes as valid UTF-8 (invalid parts replaced), NUL-ended. */
static char *bpe_lossy(const unsigned char *b, size_t n)
{
    char *o = malloc(n * 3 + 1);
    if (!o)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t k = b[i] < 0x80 ? 1 : mt_utf8_seq(b + i, n - i);
        if (k) {
            memcpy(o + w, b + i, k);
            w += k, i += k;
            continue;
        }
        memcpy(o + w, "\xEF\xBF\xBD", 3);
        w += 3;
        i += bpe_bad_len(b + i, n - i);
    }
    o[w] = 0;
    return o;
}

mt_status bpe_decode(const bpe_t *t, const int32_t *ids, int n, bool skip_special, char **out,
                     mt_err *err)
{
    *out = NULL;
    size_t total = 0;
    for (int k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= t->ntok || !t->tok[ids[k]])
            return mt_fail(err, MT_EINVAL, "ids[%d]: %d is not a token id (vocabulary of %d)", k,
                           ids[k], t->ntok);
        total += strlen(t->tok[ids[k]]);
    }
    unsigned char *b = malloc(total + 1);
    if (!b)
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory decoding %d ids", n);
    size_t w = 0;
    for (int k = 0; k < n; k++) {
        if (skip_special && bpe_is_special(t, ids[k]))
            continue;
        const unsigned char *s = (const unsigned char *)t->tok[ids[k]];
        for (size_t i = 0; s[i];) {
            uint32_t c = s[i];
            size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            if (len == 2)
                c = (c & 0x1Fu) << 6 | (s[i + 1] & 0x3Fu);
            int byte = len <= 2 ? bpe_char_byte(c) : -1;
            if (byte >= 0)
                b[w++] = (unsigned char)byte;
            else
                memcpy(b + w, s + i, len), w += len;
            i += len;
        }
    }
    *out = bpe_lossy(b, w);
    free(b);
    return *out ? MT_OK : mt_fail(err, MT_ENOMEM, "tokenizer: out of memory decoding");
}

/* ---- accessors ---- */

int bpe_vocab_size(const bpe_t *t) { return t->ntok; }

const char *bpe_token(const bpe_t *t, int32_t id)
{
    return id >= 0 && id < t->ntok ? t->tok[id] : NULL;
}

int32_t bpe_special_id(const bpe_t *t, const char *name)
{
    return tok_added_id(&t->added, name);
}

int32_t bpe_eos_id(const bpe_t *t) { return t->npost ? t->post[t->npost - 1] : -1; }

bool bpe_is_special(const bpe_t *t, int32_t id)
{
    return tok_added_special(&t->added, id);
}
