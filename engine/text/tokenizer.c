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
 * A loaded tok_t is never written again, so any number of threads may
 * encode with one; each encode owns its scratch buffers (heap, sized to the
 * input).
 */
#include "engine/text/tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_special.h"
#include "engine/text/unicode_data.h"

/* Code points above Unicode stand for special tokens found in the raw text
 * while the normalized text is a code point array: TOK_MARK + index. */
#define TOK_MARK 0x110000u

/* BERT's special tokens, which HF matches in raw text (its tokenizer.json
 * "added_tokens", normalized=false), used when no tokenizer.json is given. */
static const char *const tok_bert_specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

struct tok {
    tok_options opt;
    int n;              /* vocabulary size */
    char *pool;         /* the file's bytes, each token NUL-terminated in place */
    size_t *off;        /* (n) start of token i in pool */
    size_t *len;        /* (n) byte length of token i */
    uint64_t *hash;     /* (n) tok_poly hash of token i */
    int32_t *slots;     /* hash table of ids, -1 empty; size mask + 1 */
    size_t mask;
    size_t max_bytes;   /* longest token, bytes: WordPiece never tries longer */
    uint64_t *pow;      /* (max_bytes + 1) TOK_HB^k, to combine hashes */
    uint64_t cont_hash; /* tok_poly of "##" */
    int32_t pad, unk, cls, sep;
    tok_added_list added; /* special tokens matched in the text */
    bool any_normalized;  /* some added token is matched in normalized text */
    bool strip;           /* strip accents: opt.strip_accents resolved */
};

/* ======================================================================
 * Vocabulary: a hash table of byte strings
 * ====================================================================== */

/* Keys hash as polynomials, h = h * B + (byte + 1), so that WordPiece can
 * get the hash of any piece of a word in O(1) from the word's prefix hashes
 * (tok_flush), and of "##" + piece without building that string. */
#define TOK_HB 0x100000001B3ull

/* Continues hash h over len bytes of s. */
static uint64_t tok_poly(uint64_t h, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = h * TOK_HB + (unsigned char)s[i] + 1;
    return h;
}

/* Spreads a polynomial hash over the table's bits. */
static size_t tok_slot(const tok_t *t, uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return (size_t)h & t->mask;
}

/* Id of the vocab entry equal to pre + s, whose hash is h, or -1. The one
 * lookup the tokenizer uses, for whole words and "##" continuations alike. */
static int32_t tok_find(const tok_t *t, uint64_t h, const char *pre, size_t plen,
                        const char *s, size_t len)
{
    for (size_t i = tok_slot(t, h);; i = (i + 1) & t->mask) {
        int32_t id = t->slots[i];
        if (id < 0)
            return -1;
        if (t->hash[id] != h || t->len[id] != plen + len)
            continue;
        const char *k = t->pool + t->off[id];
        if (memcmp(k, pre, plen) == 0 && memcmp(k + plen, s, len) == 0)
            return id;
    }
}

/* Puts id into the table; a repeated token takes the later line's id, as
 * HF's WordPiece::read_file (a HashMap insert) does. */
static void tok_insert(tok_t *t, int32_t id)
{
    const char *k = t->pool + t->off[id];
    t->hash[id] = tok_poly(0, k, t->len[id]);
    for (size_t i = tok_slot(t, t->hash[id]);; i = (i + 1) & t->mask) {
        int32_t cur = t->slots[i];
        if (cur < 0 || (t->hash[cur] == t->hash[id] && t->len[cur] == t->len[id] &&
                        memcmp(t->pool + t->off[cur], k, t->len[id]) == 0)) {
            t->slots[i] = id;
            return;
        }
    }
}

/* Reads a whole file into a NUL-terminated heap buffer. */
static mt_status tok_read_file(const char *path, char **out, size_t *out_len, mt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (cap - n < 2) {
            if (cap > SIZE_MAX / 2) {
                free(buf);
                fclose(f);
                return mt_fail(err, MT_ELIMIT, "%s: file too large", path);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return mt_fail(err, MT_EIO, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return MT_OK;
}

/* Indexes the vocabulary read into t->pool (size bytes): one entry per
 * line (trailing blanks dropped), the hash table, the powers of the hash
 * base. On failure the caller frees t. */
static mt_status tok_index(tok_t *t, size_t size, const char *vocab_path, mt_err *err)
{
    size_t lines = 0;
    for (size_t i = 0; i < size; i++)
        lines += t->pool[i] == '\n';
    if (size > 0 && t->pool[size - 1] != '\n')
        lines++;
    if (lines > (size_t)INT32_MAX / 2)
        return mt_fail(err, MT_ELIMIT, "%s: too many lines (%zu)", vocab_path, lines);
    t->n = (int)lines;
    size_t cap = 16;
    while (cap < lines * 2)
        cap *= 2;
    t->mask = cap - 1;
    t->off = malloc((lines ? lines : 1) * sizeof *t->off);
    t->len = malloc((lines ? lines : 1) * sizeof *t->len);
    t->hash = malloc((lines ? lines : 1) * sizeof *t->hash);
    t->slots = malloc(cap * sizeof *t->slots);
    if (!t->off || !t->len || !t->hash || !t->slots)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", vocab_path);
    memset(t->slots, 0xff, cap * sizeof *t->slots);

    size_t pos = 0;
    for (int id = 0; id < t->n; id++) {
        char *line = t->pool + pos;
        char *nl = memchr(line, '\n', size - pos);
        size_t l = nl ? (size_t)(nl - line) : size - pos;
        pos += l + (nl != NULL);
        while (l > 0 && (line[l - 1] == ' ' || line[l - 1] == '\t' || line[l - 1] == '\r' ||
                         line[l - 1] == '\v' || line[l - 1] == '\f'))
            l--;
        line[l] = '\0';
        t->off[id] = (size_t)(line - t->pool);
        t->len[id] = l;
        if (l > t->max_bytes)
            t->max_bytes = l;
        tok_insert(t, id);
    }
    t->pow = malloc((t->max_bytes + 1) * sizeof *t->pow);
    if (!t->pow)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", vocab_path);
    t->pow[0] = 1;
    for (size_t i = 1; i <= t->max_bytes; i++)
        t->pow[i] = t->pow[i - 1] * TOK_HB;
    t->cont_hash = tok_poly(0, "##", 2);
    return MT_OK;
}

/* The added tokens (tokenizer.json, or BERT's names the vocabulary has),
 * each of which must be the vocabulary's entry at its id, and the tokens of
 * the four roles, which must be in the vocabulary. */
static mt_status tok_find_specials(tok_t *t, const char *vocab_path, mt_err *err)
{
    const tok_options *o = &t->opt;
    mt_status s = MT_OK;
    if (o->added_tokens_json) {
        s = tok_added_load(o->added_tokens_json, &t->added, err);
    } else {
        for (int k = 0; k < 5 && s == MT_OK; k++) {
            int32_t id = tok_lookup(t, tok_bert_specials[k], strlen(tok_bert_specials[k]));
            if (id >= 0)
                s = tok_added_push(&t->added, tok_bert_specials[k], id, false, true, err);
        }
    }
    for (int k = 0; k < t->added.n && s == MT_OK; k++) {
        const tok_added *a = &t->added.tok[k];
        const char *v = tok_token(t, a->id);
        if (!v || strcmp(v, a->content) != 0)
            return mt_fail(err, MT_EFORMAT, "%s: added token \"%s\" has id %d, but %s has %s%s%s there",
                           o->added_tokens_json, a->content, a->id, vocab_path, v ? "\"" : "",
                           v ? v : "no entry", v ? "\"" : "");
        t->any_normalized |= a->normalized;
    }
    const char *names[4] = {o->pad_token ? o->pad_token : "[PAD]", o->unk_token ? o->unk_token : "[UNK]",
                            o->cls_token ? o->cls_token : "[CLS]", o->sep_token ? o->sep_token : "[SEP]"};
    int32_t *req[] = {&t->pad, &t->unk, &t->cls, &t->sep};
    for (int k = 0; k < 4 && s == MT_OK; k++) {
        *req[k] = tok_lookup(t, names[k], strlen(names[k]));
        if (*req[k] < 0)
            return mt_fail(err, MT_EFORMAT, "%s: vocabulary has no %s token", vocab_path, names[k]);
    }
    return s;
}

/* Loads vocab.txt: one token a line, its id the line number. Trailing ASCII
 * whitespace is trimmed (HF trims the line end). */
mt_status tok_load(const char *vocab_path, const tok_options *opt, tok_t **out, mt_err *err)
{
    if (!vocab_path || !out)
        return mt_fail(err, MT_EINVAL, "tok_load: NULL argument");
    *out = NULL;
    tok_options o = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100};
    if (opt)
        o = *opt;
    if (o.max_word_chars <= 0)
        return mt_fail(err, MT_EINVAL, "tok_load: max_word_chars must be positive, not %d",
                       o.max_word_chars);
    tok_t *t = calloc(1, sizeof *t);
    if (!t)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", vocab_path);
    t->opt = o;
    t->strip = o.strip_accents == TOK_ACCENTS_AUTO ? o.lowercase
                                                    : o.strip_accents == TOK_ACCENTS_STRIP;
    size_t size = 0;
    mt_status s = tok_read_file(vocab_path, &t->pool, &size, err);
    if (s != MT_OK) {
        free(t);
        return s;
    }
    if ((s = tok_index(t, size, vocab_path, err)) != MT_OK ||
        (s = tok_find_specials(t, vocab_path, err)) != MT_OK) {
        tok_free(t);
        return s;
    }
    /* The caller's strings were needed for the load only. */
    t->opt.added_tokens_json = t->opt.cls_token = t->opt.sep_token = NULL;
    t->opt.pad_token = t->opt.unk_token = NULL;
    *out = t;
    return MT_OK;
}

/* Frees a tokenizer (NULL is fine). */
void tok_free(tok_t *t)
{
    if (!t)
        return;
    free(t->pool);
    free(t->off);
    free(t->len);
    free(t->hash);
    free(t->pow);
    free(t->slots);
    tok_added_free(&t->added);
    free(t);
}

/* Accessors: the model and the server need the vocab size and the ids of
 * the special tokens (padding, attention masks). */
int tok_vocab_size(const tok_t *t) { return t->n; }
int32_t tok_pad_id(const tok_t *t) { return t->pad; }
int32_t tok_cls_id(const tok_t *t) { return t->cls; }
int32_t tok_sep_id(const tok_t *t) { return t->sep; }
int32_t tok_unk_id(const tok_t *t) { return t->unk; }

/* Exact lookup, for callers and tests that name a token. */
int32_t tok_lookup(const tok_t *t, const char *token, size_t len)
{
    return tok_find(t, tok_poly(0, token, len), "", 0, token, len);
}

/* The text of an id, for debugging and decoding. */
const char *tok_token(const tok_t *t, int32_t id)
{
    if (id < 0 || id >= t->n)
        return NULL;
    return t->pool + t->off[id];
}

bool tok_is_special(const tok_t *t, int32_t id)
{
    for (int k = 0; k < t->added.n; k++)
        if (t->added.tok[k].id == id && t->added.tok[k].special)
            return true;
    return false;
}

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
static size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, const char **why)
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
static bool tok_is_cjk(uint32_t c)
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
} tok_norm;

/* Puts the trailing run of marks in canonical order: a stable sort by
 * combining class (a counting sort, so a megabyte of marks stays linear).
 * Usually the run is empty or already sorted and this returns at once. */
static bool tok_sort_run(tok_norm *nm)
{
    uint32_t *buf = TOK_U32(&nm->out);
    size_t n = nm->out.n - nm->run;
    if (nm->unsorted && n > 1) {
        size_t count[257] = {0};
        for (size_t i = nm->run; i < nm->out.n; i++)
            count[ucd_ccc(buf[i]) + 1]++;
        for (int c = 1; c < 257; c++)
            count[c] += count[c - 1];
        nm->tmp.n = 0;
        if (!tok_vec_grow(&nm->tmp, n))
            return false;
        uint32_t *tmp = TOK_U32(&nm->tmp);
        for (size_t i = nm->run; i < nm->out.n; i++)
            tmp[count[ucd_ccc(buf[i])]++] = buf[i];
        memcpy(buf + nm->run, tmp, n * sizeof *tmp);
    }
    nm->run = nm->out.n;
    nm->last_ccc = 0;
    nm->unsorted = false;
    return true;
}

/* Appends one code point, already NFD, to the normalized text, keeping
 * track of the run of marks. f is its ucd_flags. */
static inline bool tok_push(tok_norm *nm, uint32_t c, unsigned f)
{
    int cc = (f & UCD_CCC) ? ucd_ccc(c) : 0;
    if (cc == 0) {
        if (nm->out.n > nm->run && !tok_sort_run(nm))
            return false;
        if (!tok_vec_grow(&nm->out, 1))
            return false;
        TOK_U32(&nm->out)[nm->out.n++] = c;
        nm->run = nm->out.n;
        return true;
    }
    if (cc < nm->last_ccc)
        nm->unsorted = true;
    nm->last_ccc = cc;
    if (!tok_vec_grow(&nm->out, 1))
        return false;
    TOK_U32(&nm->out)[nm->out.n++] = c;
    return true;
}

/* Appends c (flags f) to the normalized text. Stripping accents: its NFD
 * without nonspacing marks (dropping Mn before the canonical ordering gives
 * the same order as after it, since that ordering is a stable sort). Else
 * c itself. */
static bool tok_emit(const tok_t *t, tok_norm *nm, uint32_t c, unsigned f)
{
    if (!t->strip) {
        if (!tok_vec_grow(&nm->out, 1))
            return false;
        TOK_U32(&nm->out)[nm->out.n++] = c;
        return true;
    }
    if (!(f & UCD_DECOMP))
        return (f & UCD_MN) || tok_push(nm, c, f);
    uint32_t d[UCD_MAX_DECOMP];
    int nd = ucd_decompose(c, d);
    for (int i = 0; i < nd; i++) {
        unsigned fd = ucd_flags(d[i]);
        if (!(fd & UCD_MN) && !tok_push(nm, d[i], fd))
            return false;
    }
    return true;
}

/* Pass 1 over the whole input into nm (code points and TOK_MARK+k). */
static mt_status tok_normalize(const tok_t *t, const char *text, size_t len, tok_norm *nm,
                               mt_err *err)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        uint32_t c;
        int k = tok_added_raw_at(&t->added, text + i, len - i);
        if (k >= 0) {
            if (!tok_emit(t, nm, TOK_MARK + (uint32_t)k, 0))
                return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
            i += t->added.tok[k].len;
            continue;
        }
        const char *why = NULL;
        size_t l = tok_utf8_next(s + i, len - i, &c, &why);
        if (l == 0)
            return mt_fail(err, MT_EUTF8, "invalid UTF-8 at byte offset %zu: %s", i, why);
        i += l;
        unsigned f = ucd_flags(c);
        bool ok;
        if ((f & UCD_REMOVE) && !t->opt.keep_controls)
            continue;
        if (f & UCD_SPACE)
            ok = tok_emit(t, nm, ' ', 0);
        else if (t->opt.chinese_chars && c >= 0x3400 && tok_is_cjk(c))
            ok = tok_emit(t, nm, ' ', 0) && tok_emit(t, nm, c, f) && tok_emit(t, nm, ' ', 0);
        else
            ok = tok_emit(t, nm, c, f);
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
} tok_pass2;

/* Records one word piece: stored while there is room, always counted. */
static inline void tok_put(tok_pass2 *p, int32_t id)
{
    if (p->total < p->room)
        p->ids[1 + p->total] = id;
    p->total++;
}

/* Adds one character to the current word. Past max_word_chars only the
 * count grows: the word is [UNK] whatever follows. */
static inline bool tok_add_char(tok_pass2 *p, uint32_t c)
{
    p->chars++;
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

/* WordPiece on the collected word, then starts a new one. Greedy: from
 * each position take the longest vocab entry ("##"-prefixed after the
 * first piece); if some position has none, the whole word is one [UNK].
 * Candidates longer than the longest vocab entry are not tried, and each
 * candidate's hash comes from the prefix hashes in O(1). */
static bool tok_flush(tok_pass2 *p)
{
    const tok_t *t = p->t;
    size_t nc = p->chars;
    if (nc == 0)
        return true;
    p->chars = 0;
    if (nc > (size_t)t->opt.max_word_chars) {
        tok_put(p, t->unk);
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
            tok_put(p, t->unk);
            break;
        }
        tok_put(p, id);
        start = end;
    }
    p->word.n = p->starts.n = 0;
    return true;
}

/* Feeds one lowercased code point (flags f) to the pre-tokenizer:
 * BertPreTokenizer splits on whitespace (dropped) and punctuation (each
 * its own word). */
static inline bool tok_feed(tok_pass2 *p, uint32_t c, unsigned f)
{
    if (f & UCD_SPACE)
        return tok_flush(p);
    if (f & UCD_PUNCT)
        return tok_flush(p) && tok_add_char(p, c) && tok_flush(p);
    return tok_add_char(p, c);
}

/* Pass 2 over the normalized text: lowercase (after accent stripping, as
 * HF orders them), pre-tokenize, WordPiece. */
static mt_status tok_split(tok_pass2 *p, const uint32_t *cps, size_t n, mt_err *err)
{
    const tok_t *t = p->t;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cps[i];
        bool ok;
        size_t used = 0;
        int sp = c >= TOK_MARK ? (int)(c - TOK_MARK)
                : t->any_normalized ? tok_added_norm_at(&t->added, cps + i, n - i,
                                                        t->opt.lowercase, &used)
                                    : -1;
        if (sp >= 0) {
            ok = tok_flush(p);
            tok_put(p, t->added.tok[sp].id);
            if (used > 0)
                i += used - 1;
        } else {
            unsigned f = ucd_flags(c);
            if (t->opt.lowercase && (f & UCD_LOWER)) {
                uint32_t lo[UCD_MAX_LOWER];
                int nl = ucd_lower(c, lo);
                ok = true;
                for (int k = 0; k < nl && ok; k++)
                    ok = tok_feed(p, lo[k], ucd_flags(lo[k]));
            } else {
                ok = tok_feed(p, c, f);
            }
        }
        if (!ok)
            return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    }
    if (!tok_flush(p))
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    return MT_OK;
}

/* Encodes text as [CLS] pieces... [SEP]; see tokenizer.h. */
mt_status tok_encode(const tok_t *t, const char *text, size_t len,
                     int32_t *ids, int max_len, int *n, int *full_len, mt_err *err)
{
    if (!t || !ids || !n || (!text && len > 0))
        return mt_fail(err, MT_EINVAL, "tok_encode: NULL argument");
    if (max_len < 2)
        return mt_fail(err, MT_EINVAL, "tok_encode: max_len must be at least 2, not %d", max_len);
    *n = 0;
    if (full_len)
        *full_len = 0;

    tok_norm nm = {.out = {.elem = sizeof(uint32_t)}, .tmp = {.elem = sizeof(uint32_t)}};
    tok_pass2 p = {
        .t = t,
        .word = {.elem = 1},
        .starts = {.elem = sizeof(size_t)},
        .prefix = {.elem = sizeof(uint64_t)},
        .ids = ids,
        .room = (size_t)max_len - 2,
    };
    /* Most text keeps its length; reserve that much up front. */
    mt_status s = MT_OK;
    if (len > 0 && !tok_vec_grow(&nm.out, len < SIZE_MAX / 8 ? len + len / 8 : len))
        s = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    if (s == MT_OK)
        s = tok_normalize(t, text, len, &nm, err);
    if (s == MT_OK)
        s = tok_split(&p, TOK_U32(&nm.out), nm.out.n, err);
    free(nm.out.p);
    free(nm.tmp.p);
    free(p.word.p);
    free(p.starts.p);
    free(p.prefix.p);
    if (s != MT_OK)
        return s;

    if (p.total > (size_t)INT_MAX - 2)
        return mt_fail(err, MT_ELIMIT, "tokenizer: text has more than %d tokens", INT_MAX - 2);
    size_t kept = p.total < p.room ? p.total : p.room;
    ids[0] = t->cls;
    ids[kept + 1] = t->sep;
    *n = (int)kept + 2;
    if (full_len)
        *full_len = (int)p.total + 2;
    return MT_OK;
}
