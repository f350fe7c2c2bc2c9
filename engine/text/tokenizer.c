/* tokenizer.c: BERT WordPiece tokenizer (cased or uncased), id-for-id the same as
 * Hugging Face tokenizers' BertNormalizer + BertPreTokenizer + WordPiece +
 * the "[CLS] A [SEP]" template, for the options in tokenizer.h.
 *
 * An encode runs in two passes over the text, each linear:
 *   1. decode and validate UTF-8; recognise the special tokens written in
 *      the raw text ("[SEP]" and friends, as HF's added-token matching does
 *      before normalizing); BertNormalizer: drop control characters (but
 *      with keep_controls: clean_text=false), map whitespace to ' ', put
 *      spaces around CJK ideographs, and (when stripping accents: by
 *      default, when uncased) NFD with nonspacing marks dropped, marks in
 *      canonical order.
 *   2. lowercase (uncased), split on whitespace and punctuation, and WordPiece each
 *      word (greedy longest match, "##" continuation, [UNK] when a word has
 *      no segmentation or is longer than max_word_chars characters).
 * HF lowercases after stripping accents; we keep that order.
 *
 * The Unicode facts (categories, decompositions, lowercase) live in the
 * generated engine/text/unicode_data.c, which also records where the Rust crates
 * HF uses lag behind current Unicode.
 *
 * The vocabulary and its load are tok_vocab.c's (tok_internal.h).
 * A loaded tok_t is never written again, so any number of threads may
 * encode with one; each encode owns its scratch buffers (heap, sized to the
 * input).
 */
#include "engine/text/tok_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_special.h"
#include "engine/text/unicode_data.h"

/* Offsets cost the encode without them nothing: the per-character
 * functions take a `const bool track` (offsets wanted) and are always
 * inlined, down to a pair of callers that pass it as a literal (as
 * tok_emit_plain and tok_emit_track do), so the compiler drops the
 * tracking from the copy without offsets. One body, two machine copies. */
#define TOK_INLINE static inline __attribute__((always_inline))

/* Code points above Unicode stand for special tokens found in the raw text
 * while the normalized text is a code point array: TOK_MARK + index. */
#define TOK_MARK 0x110000u

/* ======================================================================
 * Scratch buffers of one encode
 * ====================================================================== */

/* A growable array; elem bytes each. Every encode makes its own. */
typedef struct {
    void *p;
    size_t n, cap, elem;
} tok_vec;

/* The slow half of tok_vec_grow: reallocates. False when memory runs out
 * or the size would overflow. */
static bool tok_vec_realloc(tok_vec *v, size_t more)
{
    if (more > SIZE_MAX / v->elem - v->n)
        return false;
    size_t need = v->n + more;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / v->elem / 2 ? need : cap * 2;
    void *np = realloc(v->p, cap * v->elem);
    if (!np)
        return false;
    v->p = np;
    v->cap = cap;
    return true;
}

/* Makes room for `more` further elements; inline because it runs per
 * character and almost never has to allocate. */
static inline bool tok_vec_grow(tok_vec *v, size_t more)
{
    return v->cap - v->n >= more || tok_vec_realloc(v, more);
}

#define TOK_U32(v) ((uint32_t *)(v)->p)

/* ======================================================================
 * Pass 1: UTF-8 decoding and BertNormalizer (all but lowercase)
 * ====================================================================== */

/* Decodes one code point at s (n bytes left). Returns its length, or 0 with
 * *why saying what is wrong: the caller turns that into MT_EUTF8. */
TOK_INLINE size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, const char **why)
{
    unsigned char b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t need;
    uint32_t c;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
        c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        c = b & 0x0F;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        c = b & 0x07;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else {
        *why = b <= 0xBF ? "unexpected continuation byte"
               : b <= 0xC1 ? "overlong encoding"
                           : "byte not used in UTF-8";
        return 0;
    }
    if (n < 2 || s[1] < 0x80 || s[1] > 0xBF) {
        *why = "truncated sequence";
        return 0;
    }
    if (s[1] < lo || s[1] > hi) {
        *why = b == 0xED ? "surrogate code point"
               : b == 0xF4 ? "code point above U+10FFFF"
                           : "overlong encoding";
        return 0;
    }
    c = (c << 6) | (s[1] & 0x3F);
    for (size_t i = 2; i < need; i++) {
        if (i >= n || s[i] < 0x80 || s[i] > 0xBF) {
            *why = "truncated sequence";
            return 0;
        }
        c = (c << 6) | (s[i] & 0x3F);
    }
    *cp = c;
    return need;
}

/* HF's is_chinese_char: the CJK ideograph blocks (not kana or hangul).
 * These are HF's ranges, not Unicode's: 2B820-2B91F is left out. */
TOK_INLINE bool tok_is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* The normalized text being built by pass 1, and the run of combining
 * marks at its end that canonical ordering may still have to sort. */
typedef struct {
    tok_vec out;        /* uint32_t code points and TOK_MARK + k */
    size_t run;         /* start of the trailing run of marks (ccc > 0) */
    int last_ccc;       /* class of the last mark of the run */
    bool unsorted;      /* the run is out of canonical order */
    tok_vec tmp;        /* uint32_t scratch for sorting a run */
    bool track;         /* offsets wanted: org follows out */
    uint64_t cur;       /* the input character being normalized: TOK_SPAN */
    tok_vec org;        /* uint64_t per code point of out: its TOK_SPAN */
    bool flagged;       /* the run holds TOK_DROP or TOK_NEXT code points */
    tok_vec queue;      /* uint64_t scratch: spans of a run's characters */
} tok_norm;

/* With offsets wanted, marks carry flags in the run until it is sorted:
 * TOK_DROP, a nonspacing mark that accent stripping drops (tokenizers
 * sorts marks, NFD, before it drops them, and its spans go by position,
 * not with the characters); TOK_NEXT, a mark that is not the first code
 * point of its character's decomposition. */
#define TOK_DROP 0x40000000u
#define TOK_NEXT 0x20000000u
#define TOK_FLAGS (TOK_DROP | TOK_NEXT)

/* A byte span [s, e) of the input in one uint64_t. */
#define TOK_SPAN(s, e) ((uint64_t)(s) << 32 | (uint32_t)(e))

/* Records that the code point just appended came from nm->cur. */
TOK_INLINE bool tok_org(tok_norm *nm, const bool track)
{
    if (!track)
        return true;
    if (!tok_vec_grow(&nm->org, 1))
        return false;
    ((uint64_t *)nm->org.p)[nm->org.n++] = nm->cur;
    return true;
}

/* Before sorting a run with offsets wanted: the spans of the characters
 * whose first code point is in the run, in text order. */
static bool tok_spans_before(tok_norm *nm)
{
    const uint32_t *buf = TOK_U32(&nm->out);
    const uint64_t *org = nm->org.p;
    nm->queue.n = 0;
    if (!tok_vec_grow(&nm->queue, nm->out.n - nm->run))
        return false;
    uint64_t *q = nm->queue.p;
    for (size_t i = nm->run; i < nm->out.n; i++)
        if (!(buf[i] & TOK_NEXT))
            q[nm->queue.n++] = org[i];
    return true;
}

/* After sorting: spans by position, as tokenizers' NFD aligns them. Each
 * code point that begins a character takes the next character's span in
 * text order; one that continues a decomposition, the last span taken. */
static void tok_spans_after(tok_norm *nm)
{
    const uint32_t *buf = TOK_U32(&nm->out);
    uint64_t *org = nm->org.p;
    const uint64_t *q = nm->queue.p;
    size_t k = 0;
    uint64_t prev = nm->run > 0 ? org[nm->run - 1] : q[0];
    for (size_t i = nm->run; i < nm->out.n; i++) {
        if (!(buf[i] & TOK_NEXT) && k < nm->queue.n)
            prev = q[k++];
        org[i] = prev;
    }
}

/* Puts the trailing run of marks in canonical order: a stable sort by
 * combining class (a counting sort, so a megabyte of marks stays linear).
 * Usually the run is empty or already sorted and this returns at once. */
static bool tok_sort_run(tok_norm *nm)
{
    uint32_t *buf = TOK_U32(&nm->out);
    size_t n = nm->out.n - nm->run;
    if (nm->unsorted && n > 1) {
        if (nm->track && !tok_spans_before(nm))
            return false;
        size_t count[257] = {0};
        for (size_t i = nm->run; i < nm->out.n; i++)
            count[ucd_ccc(buf[i] & ~TOK_FLAGS) + 1]++;
        for (int c = 1; c < 257; c++)
            count[c] += count[c - 1];
        nm->tmp.n = 0;
        if (!tok_vec_grow(&nm->tmp, n))
            return false;
        uint32_t *tmp = TOK_U32(&nm->tmp);
        for (size_t i = nm->run; i < nm->out.n; i++)
            tmp[count[ucd_ccc(buf[i] & ~TOK_FLAGS)]++] = buf[i];
        memcpy(buf + nm->run, tmp, n * sizeof *tmp);
        if (nm->track)
            tok_spans_after(nm);
    }
    if (nm->flagged) { /* the dropped marks go, spans and all; flags cleared */
        uint64_t *org = nm->org.p;
        size_t w = nm->run;
        for (size_t i = nm->run; i < nm->out.n; i++)
            if (!(buf[i] & TOK_DROP))
                buf[w] = buf[i] & ~TOK_FLAGS, org[w] = org[i], w++;
        nm->out.n = nm->org.n = w;
        nm->flagged = false;
    }
    nm->run = nm->out.n;
    nm->last_ccc = 0;
    nm->unsorted = false;
    return true;
}

/* Appends one code point, already NFD, to the normalized text, keeping
 * track of the run of marks. f is its ucd_flags. */
TOK_INLINE bool tok_push(tok_norm *nm, uint32_t c, unsigned f, const bool track)
{
    int cc = (f & UCD_CCC) ? ucd_ccc(c & ~TOK_FLAGS) : 0;
    if (cc == 0) {
        if (nm->out.n > nm->run && !tok_sort_run(nm))
            return false;
        if (!tok_vec_grow(&nm->out, 1))
            return false;
        TOK_U32(&nm->out)[nm->out.n++] = c;
        nm->run = nm->out.n;
        return tok_org(nm, track);
    }
    if (cc < nm->last_ccc)
        nm->unsorted = true;
    nm->last_ccc = cc;
    if (!tok_vec_grow(&nm->out, 1))
        return false;
    TOK_U32(&nm->out)[nm->out.n++] = c;
    return tok_org(nm, track);
}

/* A nonspacing mark c (flags f) that accent stripping drops: at once,
 * unless offsets are wanted and canonical ordering may move it. */
TOK_INLINE bool tok_drop(tok_norm *nm, uint32_t c, unsigned f, const bool track)
{
    if (!track)
        return true;
    if (!(f & UCD_CCC) || ucd_ccc(c & ~TOK_FLAGS) == 0) /* a starter: ends the run */
        return nm->out.n == nm->run || tok_sort_run(nm);
    nm->flagged = true;
    return tok_push(nm, c | TOK_DROP, f, true);
}

/* Appends c (flags f) to the normalized text. Stripping accents: its NFD
 * without nonspacing marks (dropping Mn before the canonical ordering gives
 * the same order as after it, since that ordering is a stable sort). Else
 * c itself. */
TOK_INLINE bool tok_emit_with(const tok_t *t, tok_norm *nm, uint32_t c, unsigned f,
                              const bool track)
{
    if (!t->strip) {
        if (!tok_vec_grow(&nm->out, 1))
            return false;
        TOK_U32(&nm->out)[nm->out.n++] = c;
        return tok_org(nm, track);
    }
    if (!(f & UCD_DECOMP))
        return (f & UCD_MN) ? tok_drop(nm, c, f, track) : tok_push(nm, c, f, track);
    uint32_t d[UCD_MAX_DECOMP];
    int nd = ucd_decompose(c, d);
    for (int i = 0; i < nd; i++) {
        unsigned fd = ucd_flags(d[i]);
        if (i > 0 && track && (fd & UCD_CCC) && ucd_ccc(d[i]) > 0) {
            d[i] |= TOK_NEXT;
            nm->flagged = true;
        }
        if (!((fd & UCD_MN) ? tok_drop(nm, d[i], fd, track) : tok_push(nm, d[i], fd, track)))
            return false;
    }
    return true;
}

/* tok_emit_with without offsets, and with them: one function each. */
static bool tok_emit_plain(const tok_t *t, tok_norm *nm, uint32_t c, unsigned f)
{
    return tok_emit_with(t, nm, c, f, false);
}

static bool tok_emit_track(const tok_t *t, tok_norm *nm, uint32_t c, unsigned f)
{
    return tok_emit_with(t, nm, c, f, true);
}

TOK_INLINE bool tok_emit(const tok_t *t, tok_norm *nm, uint32_t c, unsigned f, const bool track)
{
    return track ? tok_emit_track(t, nm, c, f) : tok_emit_plain(t, nm, c, f);
}

/* Pass 1 over the whole input into nm (code points and TOK_MARK+k). */
TOK_INLINE mt_status tok_normalize(const tok_t *t, const char *text, size_t len, tok_norm *nm,
                                   mt_err *err, const bool track)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        uint32_t c;
        int k = tok_added_raw_at(&t->added, text + i, len - i);
        if (k >= 0) {
            if (track)
                nm->cur = TOK_SPAN(i, i + t->added.tok[k].len);
            if (!tok_emit(t, nm, TOK_MARK + (uint32_t)k, 0, track))
                return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
            i += t->added.tok[k].len;
            continue;
        }
        const char *why = NULL;
        size_t l = tok_utf8_next(s + i, len - i, &c, &why);
        if (l == 0)
            return mt_fail(err, MT_EUTF8, "invalid UTF-8 at byte offset %zu: %s", i, why);
        if (track)
            nm->cur = TOK_SPAN(i, i + l);
        i += l;
        unsigned f = ucd_flags(c);
        bool ok;
        if ((f & UCD_REMOVE) && !t->opt.keep_controls)
            continue;
        if (f & UCD_SPACE)
            ok = tok_emit(t, nm, ' ', 0, track);
        else if (t->opt.chinese_chars && c >= 0x3400 && tok_is_cjk(c))
            ok = tok_emit(t, nm, ' ', 0, track) && tok_emit(t, nm, c, f, track) &&
                 tok_emit(t, nm, ' ', 0, track);
        else
            ok = tok_emit(t, nm, c, f, track);
        if (!ok)
            return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    }
    if (!tok_sort_run(nm))
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    return MT_OK;
}

/* ======================================================================
 * Pass 2: lowercase, pre-tokenize, WordPiece
 * ====================================================================== */

/* The state of pass 2: the word being collected and the ids so far. */
typedef struct {
    const tok_t *t;
    tok_vec word;      /* UTF-8 bytes of the current word */
    tok_vec starts;    /* (chars + 1) byte offset of each char in word, as size_t */
    tok_vec prefix;    /* (bytes + 1) tok_poly hash of each prefix of word */
    size_t chars;      /* characters in the word (counted past the limit too) */
    int32_t *ids;      /* caller's array; ids[1 + k] is word piece k */
    size_t room;       /* pieces that fit: max_len - 2 */
    size_t total;      /* pieces produced, kept or not */
    int32_t *offs;     /* caller's offsets (2 per id), or NULL: no spans kept */
    uint64_t cur;      /* TOK_SPAN of the character being fed */
    uint64_t wspan;    /* TOK_SPAN of the word so far */
    tok_vec worg;      /* uint64_t TOK_SPAN of each stored char of the word */
} tok_pass2;

/* Records one word piece and its TOK_SPAN: stored while there is room,
 * always counted. */
TOK_INLINE void tok_put(tok_pass2 *p, int32_t id, uint64_t span, const bool track)
{
    if (p->total < p->room) {
        p->ids[1 + p->total] = id;
        if (track) {
            p->offs[2 + 2 * p->total] = (int32_t)(span >> 32);
            p->offs[3 + 2 * p->total] = (int32_t)(uint32_t)span;
        }
    }
    p->total++;
}

/* Adds one character to the current word. Past max_word_chars only the
 * count grows: the word is [UNK] whatever follows. */
TOK_INLINE bool tok_add_char_with(tok_pass2 *p, uint32_t c, const bool track)
{
    p->chars++;
    if (track) {
        p->wspan = p->chars == 1 ? p->cur : (p->wspan & ~0xFFFFFFFFull) | (uint32_t)p->cur;
        if (p->chars <= (size_t)p->t->opt.max_word_chars) {
            if (!tok_vec_grow(&p->worg, 1))
                return false;
            ((uint64_t *)p->worg.p)[p->worg.n++] = p->cur;
        }
    }
    if (p->chars > (size_t)p->t->opt.max_word_chars)
        return true;
    if (!tok_vec_grow(&p->word, 4) || !tok_vec_grow(&p->starts, 2))
        return false;
    unsigned char *w = (unsigned char *)p->word.p;
    size_t n = p->word.n;
    ((size_t *)p->starts.p)[p->starts.n++] = n;
    if (c < 0x80) {
        w[n++] = (unsigned char)c;
    } else if (c < 0x800) {
        w[n++] = (unsigned char)(0xC0 | (c >> 6));
        w[n++] = (unsigned char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        w[n++] = (unsigned char)(0xE0 | (c >> 12));
        w[n++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        w[n++] = (unsigned char)(0x80 | (c & 0x3F));
    } else {
        w[n++] = (unsigned char)(0xF0 | (c >> 18));
        w[n++] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
        w[n++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        w[n++] = (unsigned char)(0x80 | (c & 0x3F));
    }
    p->word.n = n;
    return true;
}

/* tok_add_char_with without offsets, and with them. */
static bool tok_add_char_plain(tok_pass2 *p, uint32_t c)
{
    return tok_add_char_with(p, c, false);
}

static bool tok_add_char_track(tok_pass2 *p, uint32_t c)
{
    return tok_add_char_with(p, c, true);
}

TOK_INLINE bool tok_add_char(tok_pass2 *p, uint32_t c, const bool track)
{
    return track ? tok_add_char_track(p, c) : tok_add_char_plain(p, c);
}

/* WordPiece on the collected word, then starts a new one. Greedy: from
 * each position take the longest vocab entry ("##"-prefixed after the
 * first piece); if some position has none, the whole word is one [UNK].
 * Candidates longer than the longest vocab entry are not tried, and each
 * candidate's hash comes from the prefix hashes in O(1). */
TOK_INLINE bool tok_flush_with(tok_pass2 *p, const bool track)
{
    const tok_t *t = p->t;
    size_t nc = p->chars;
    if (nc == 0)
        return true;
    p->chars = 0;
    const uint64_t *wo = p->worg.p;
    p->worg.n = 0;
    if (nc > (size_t)t->opt.max_word_chars) {
        tok_put(p, t->unk, p->wspan, track);
        p->word.n = p->starts.n = 0;
        return true;
    }
    const char *w = (const char *)p->word.p;
    size_t nb = p->word.n;
    size_t *st = (size_t *)p->starts.p;
    st[nc] = nb; /* room was reserved by tok_add_char */
    p->prefix.n = 0;
    if (!tok_vec_grow(&p->prefix, nb + 1))
        return false;
    uint64_t *ph = (uint64_t *)p->prefix.p;
    ph[0] = 0;
    for (size_t i = 0; i < nb; i++)
        ph[i + 1] = ph[i] * TOK_HB + (unsigned char)w[i] + 1;

    size_t first = p->total, start = 0;
    while (start < nc) {
        size_t plen = start > 0 ? 2 : 0;
        size_t end = nc;
        while (end > start && st[end] - st[start] + plen > t->max_bytes)
            end--;
        int32_t id = -1;
        for (; end > start; end--) {
            size_t a = st[start], b = st[end];
            uint64_t h = ph[b] - ph[a] * t->pow[b - a];
            if (plen)
                h += t->cont_hash * t->pow[b - a];
            id = tok_find(t, h, "##", plen, w + a, b - a);
            if (id >= 0)
                break;
        }
        if (id < 0) {
            p->total = first;
            tok_put(p, t->unk, p->wspan, track);
            break;
        }
        tok_put(p, id, track ? (wo[start] & ~0xFFFFFFFFull) | (uint32_t)wo[end - 1] : 0, track);
        start = end;
    }
    p->word.n = p->starts.n = 0;
    return true;
}

/* tok_flush_with without offsets, and with them. */
static bool tok_flush_plain(tok_pass2 *p)
{
    return tok_flush_with(p, false);
}

static bool tok_flush_track(tok_pass2 *p)
{
    return tok_flush_with(p, true);
}

TOK_INLINE bool tok_flush(tok_pass2 *p, const bool track)
{
    return track ? tok_flush_track(p) : tok_flush_plain(p);
}

/* Feeds one lowercased code point (flags f) to the pre-tokenizer:
 * BertPreTokenizer splits on whitespace (dropped) and punctuation (each
 * its own word). */
TOK_INLINE bool tok_feed(tok_pass2 *p, uint32_t c, unsigned f, const bool track)
{
    if (f & UCD_SPACE)
        return tok_flush(p, track);
    if (f & UCD_PUNCT)
        return tok_flush(p, track) && tok_add_char(p, c, track) && tok_flush(p, track);
    return tok_add_char(p, c, track);
}

/* Pass 2 over the normalized text: lowercase (after accent stripping, as
 * HF orders them), pre-tokenize, WordPiece. */
TOK_INLINE mt_status tok_split(tok_pass2 *p, const uint32_t *cps, const uint64_t *org, size_t n,
                               mt_err *err, const bool track)
{
    const tok_t *t = p->t;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cps[i];
        if (track)
            p->cur = org[i];
        bool ok;
        size_t used = 0;
        int sp = c >= TOK_MARK ? (int)(c - TOK_MARK)
                : t->any_normalized ? tok_added_norm_at(&t->added, cps + i, n - i,
                                                        t->opt.lowercase, &used)
                                    : -1;
        if (sp >= 0) {
            ok = tok_flush(p, track);
            uint64_t span = 0;
            if (track)
                span = (org[i] & ~0xFFFFFFFFull) | (uint32_t)org[i + (used ? used : 1) - 1];
            tok_put(p, t->added.tok[sp].id, span, track);
            if (used > 0)
                i += used - 1;
        } else {
            unsigned f = ucd_flags(c);
            if (t->opt.lowercase && (f & UCD_LOWER)) {
                uint32_t lo[UCD_MAX_LOWER];
                int nl = ucd_lower(c, lo);
                ok = true;
                for (int k = 0; k < nl && ok; k++)
                    ok = tok_feed(p, lo[k], ucd_flags(lo[k]), track);
            } else {
                ok = tok_feed(p, c, f, track);
            }
        }
        if (!ok)
            return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    }
    if (!tok_flush(p, track))
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    return MT_OK;
}

/* Both passes, without offsets and with them: a function each, so that each
 * copy is inlined (and optimized) on its own. */
static __attribute__((noinline)) mt_status tok_passes_plain(const tok_t *t, const char *text,
                                                           size_t len, tok_norm *nm,
                                                           tok_pass2 *p, mt_err *err)
{
    mt_status s = tok_normalize(t, text, len, nm, err, false);
    return s == MT_OK ? tok_split(p, TOK_U32(&nm->out), NULL, nm->out.n, err, false) : s;
}

static __attribute__((noinline)) mt_status tok_passes_track(const tok_t *t, const char *text,
                                                           size_t len, tok_norm *nm,
                                                           tok_pass2 *p, mt_err *err)
{
    mt_status s = tok_normalize(t, text, len, nm, err, true);
    return s == MT_OK ? tok_split(p, TOK_U32(&nm->out), nm->org.p, nm->out.n, err, true) : s;
}

/* Encodes text as [CLS] pieces... [SEP] with each one's byte span when
 * offsets is not NULL; see tokenizer.h. */
mt_status tok_encode_offsets(const tok_t *t, const char *text, size_t len, int32_t *ids,
                             int32_t *offsets, int max_len, int *n, int *full_len, mt_err *err)
{
    if (!t || !ids || !n || (!text && len > 0))
        return mt_fail(err, MT_EINVAL, "tok_encode: NULL argument");
    if (max_len < 2)
        return mt_fail(err, MT_EINVAL, "tok_encode: max_len must be at least 2, not %d", max_len);
    if (offsets && len > INT32_MAX)
        return mt_fail(err, MT_ELIMIT, "tok_encode: offsets of a text over %d bytes", INT32_MAX);
    *n = 0;
    if (full_len)
        *full_len = 0;

    tok_norm nm = {.out = {.elem = sizeof(uint32_t)}, .tmp = {.elem = sizeof(uint32_t)},
                   .track = offsets != NULL, .org = {.elem = sizeof(uint64_t)},
                   .queue = {.elem = sizeof(uint64_t)}};
    tok_pass2 p = {
        .t = t,
        .word = {.elem = 1},
        .starts = {.elem = sizeof(size_t)},
        .prefix = {.elem = sizeof(uint64_t)},
        .ids = ids,
        .room = (size_t)max_len - 2,
        .offs = offsets,
        .worg = {.elem = sizeof(uint64_t)},
    };
    /* Most text keeps its length; reserve that much up front. */
    mt_status s = MT_OK;
    if (len > 0 && !tok_vec_grow(&nm.out, len < SIZE_MAX / 8 ? len + len / 8 : len))
        s = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    if (s == MT_OK)
        s = offsets ? tok_passes_track(t, text, len, &nm, &p, err)
                    : tok_passes_plain(t, text, len, &nm, &p, err);
    free(nm.out.p);
    free(nm.tmp.p);
    free(nm.org.p);
    free(nm.queue.p);
    free(p.word.p);
    free(p.starts.p);
    free(p.prefix.p);
    free(p.worg.p);
    if (s != MT_OK)
        return s;

    if (p.total > (size_t)INT_MAX - 2)
        return mt_fail(err, MT_ELIMIT, "tokenizer: text has more than %d tokens", INT_MAX - 2);
    size_t kept = p.total < p.room ? p.total : p.room;
    ids[0] = t->cls;
    ids[kept + 1] = t->sep;
    if (offsets) /* the template's tokens span nothing, as in tokenizers */
        offsets[0] = offsets[1] = offsets[2 * kept + 2] = offsets[2 * kept + 3] = 0;
    *n = (int)kept + 2;
    if (full_len)
        *full_len = (int)p.total + 2;
    return MT_OK;
}

mt_status tok_encode(const tok_t *t, const char *text, size_t len, int32_t *ids, int max_len,
                     int *n, int *full_len, mt_err *err)
{
    return tok_encode_offsets(t, text, len, ids, NULL, max_len, n, full_len, err);
}
