/* tokenizer.h: BERT WordPiece tokenizer (cased or uncased), as Hugging
 * Face's BertTokenizer / tokenizers' BertNormalizer + BertPreTokenizer +
 * WordPiece apply it: clean control characters, strip accents (NFD, drop
 * Mn), lowercase, split CJK ideographs and punctuation, split on
 * whitespace, greedy longest-match WordPiece with "##" continuation, [UNK]
 * for words with no match or longer than 100 characters, [CLS] ... [SEP],
 * truncation. Which of the normalizer's steps run is tok_options'.
 */
#ifndef MT_TOKENIZER_H
#define MT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

typedef struct tok tok_t;

/* BertNormalizer's strip_accents (NFD, nonspacing marks dropped). */
typedef enum {
    TOK_ACCENTS_AUTO = 0, /* strip_accents null: strip when lowercase */
    TOK_ACCENTS_STRIP,    /* true: strip, cased or not */
    TOK_ACCENTS_KEEP,     /* false: never strip */
} tok_accents;

typedef struct {
    bool lowercase;        /* BertNormalizer's lowercase */
    bool chinese_chars;    /* put spaces around CJK ideographs */
    tok_accents strip_accents;
    bool keep_controls;    /* clean_text=false: control and format characters
                            * stay in the text (default: removed) */
    int max_word_chars;    /* longer words become [UNK]; 100 in BERT */
    /* The model's tokenizer.json, whose "added_tokens" are the special
     * tokens matched in the text; NULL: BERT's [PAD] [UNK] [CLS] [SEP]
     * [MASK], those the vocabulary has. */
    const char *added_tokens_json;
    /* The tokens of each role; NULL: BERT's "[CLS]" "[SEP]" "[PAD]" "[UNK]".
     * MPNet: "<s>" "</s>" "<pad>" "[UNK]". */
    const char *cls_token, *sep_token, *pad_token, *unk_token;
} tok_options;

/* Loads vocab.txt (one token a line, id = line number). Finds the tokens of
 * the cls/sep/pad/unk roles; their absence is an error naming the file, as
 * is an added token whose id's vocabulary entry is another string. */
mt_status tok_load(const char *vocab_path, const tok_options *opt, tok_t **out, mt_err *err);
void tok_free(tok_t *t);

int tok_vocab_size(const tok_t *t);
int32_t tok_pad_id(const tok_t *t);
int32_t tok_cls_id(const tok_t *t);
int32_t tok_sep_id(const tok_t *t);
int32_t tok_unk_id(const tok_t *t);
/* Id of an exact vocab entry, or -1. */
int32_t tok_lookup(const tok_t *t, const char *token, size_t len);
/* The vocab entry of an id (NUL-terminated), or NULL. */
const char *tok_token(const tok_t *t, int32_t id);
/* Whether id is a special token: an added token tokenizer.json marks
 * "special" (without the file: BERT's [PAD] [UNK] [CLS] [SEP] [MASK]). */
bool tok_is_special(const tok_t *t, int32_t id);

/* Encodes len bytes of UTF-8 text as [CLS] wordpieces... [SEP] into ids
 * (capacity max_len >= 2), keeping the first max_len-2 wordpieces when it is
 * longer. *n gets the number written; full_len (may be NULL) gets the length
 * the encoding would have without truncation, specials included.
 * Invalid UTF-8 (overlongs, surrogates, > U+10FFFF, truncated sequences)
 * returns MT_EUTF8 with the byte offset in err. Thread-safe on a shared tok_t. */
mt_status tok_encode(const tok_t *t, const char *text, size_t len,
                     int32_t *ids, int max_len, int *n, int *full_len, mt_err *err);

/* tok_encode, and with offsets (not NULL; room for 2 * max_len) each
 * token's byte span [start, end) in text as Hugging Face tokenizers aligns
 * it through normalization (a piece of an accented, lowercased or
 * decomposed character spans that whole character; a word's [UNK] the
 * whole word); [CLS] and [SEP] get 0, 0. A text over INT32_MAX bytes is
 * MT_ELIMIT with offsets. */
mt_status tok_encode_offsets(const tok_t *t, const char *text, size_t len, int32_t *ids,
                             int32_t *offsets, int max_len, int *n, int *full_len, mt_err *err);

/* Decodes n ids into text as Hugging Face's tokenizers does with the
 * WordPiece decoder (prefix "##", cleanup on: BERT's and MPNet's
 * tokenizer.json): the pieces joined by spaces, a "##" piece (but the
 * first) glued to the one before, then in each piece " ." " ?" " !" " ,"
 * lose their space (and the rest of its cleanup list); special tokens
 * (tok_is_special) left out when skip_special. *out gets a new
 * NUL-terminated string (free() it). An id out of range is MT_EINVAL,
 * naming its index. In engine/text/tok_decode.c. */
mt_status tok_decode(const tok_t *t, const int32_t *ids, int n, bool skip_special, char **out,
                     mt_err *err);

#endif
