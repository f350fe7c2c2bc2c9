/* tok_special.h: the special and added tokens of a tokenizer (tokenizer.json
 * "added_tokens": "[CLS]", "<s>", "<unk>", ...), which Hugging Face matches
 * in the text before WordPiece: those with normalized=false verbatim in the
 * raw text, those with normalized=true in the normalized (cleaned,
 * lowercased) text. Used by the tokenizers of engine/text/ (WordPiece,
 * BPE, Unigram).
 */
#ifndef MT_TOK_SPECIAL_H
#define MT_TOK_SPECIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

typedef struct {
    char *content;      /* UTF-8, NUL-terminated */
    size_t len;         /* bytes */
    uint32_t *cps;      /* content as code points */
    size_t ncps;
    int32_t id;
    bool normalized;    /* matched in the normalized text, not the raw one */
    bool special;       /* a special token: decoding leaves it out when asked to */
} tok_added;

typedef struct {
    tok_added *tok;
    int n;
    uint8_t first[32];  /* bitmap of the first bytes of raw-matched tokens */
} tok_added_list;

/* Reads the "added_tokens" array of a tokenizer.json. A missing or malformed
 * field is an error naming the file and the field. */
mt_status tok_added_load(const char *json_path, tok_added_list *out, mt_err *err);
/* Appends one token (copied). */
mt_status tok_added_push(tok_added_list *l, const char *content, int32_t id, bool normalized,
                         bool special, mt_err *err);
void tok_added_free(tok_added_list *l);

/* Index of the longest raw-matched token spelled at s (n bytes left), or -1. */
int tok_added_raw_at(const tok_added_list *l, const char *s, size_t n);

/* The id of the token spelled name (NUL-terminated), or -1. */
int32_t tok_added_id(const tok_added_list *l, const char *name);
/* Whether the first token of that id is marked "special" (false: none is
 * of that id). */
bool tok_added_special(const tok_added_list *l, int32_t id);

/* The first raw-matched token in s[*i..n): its index, *i where it starts;
 * -1 and *i = n when there is none. The first-byte bitmap is read here,
 * inline, so that the call is made only where a token may start. */
static inline int tok_added_next(const tok_added_list *l, const char *s, size_t n, size_t *i)
{
    for (; *i < n; ++*i) {
        unsigned char b = (unsigned char)s[*i];
        int a = (l->first[b >> 3] & (1u << (b & 7))) ? tok_added_raw_at(l, s + *i, n - *i) : -1;
        if (a >= 0)
            return a;
    }
    return -1;
}
/* Index of the longest normalized token that the code points cps[0..n)
 * spell once lowercased (when lowercase), or -1; *used gets how many code
 * points of cps it covers. */
int tok_added_norm_at(const tok_added_list *l, const uint32_t *cps, size_t n, bool lowercase,
                      size_t *used);

#endif
