/* tok_vocab.c: the WordPiece tokenizer's load (tokenizer.h): vocab.txt
 * into the hash table of tok_internal.h, the added and special tokens, and
 * the accessors of the loaded tokenizer.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/text/tok_internal.h"

/* BERT's special tokens, which HF matches in raw text (its tokenizer.json
 * "added_tokens", normalized=false), used when no tokenizer.json is given. */
static const char *const tok_bert_specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

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
    mt_status s = mt_read_file(vocab_path, SIZE_MAX / 2, &t->pool, &size, err);
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
