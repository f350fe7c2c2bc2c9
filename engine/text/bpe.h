/* bpe.h: the byte-level BPE tokenizer of a Hugging Face tokenizer.json, as
 * GPT-2, Qwen2 and Qwen3(-Embedding) use it and `tokenizers` runs it: added
 * tokens matched in the raw text, NFC, the Split pre-tokenizer's regex
 * (Qwen2's, a hand-written matcher: engine/text/bpe_pretok.c), GPT-2's byte
 * to character mapping (ByteLevel, use_regex false), merges by rank, and
 * the post-processor's tokens (TemplateProcessing's single template, e.g.
 * "$A <|endoftext|>"; ByteLevel or none adds nothing). Ids back to text
 * with the ByteLevel decoder. Anything else tokenizer.json asks for is
 * refused at load, naming the file and the field.
 */
#ifndef MT_BPE_H
#define MT_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

typedef struct bpe bpe_t;

/* Reads tokenizer.json (model.type "BPE"). Errors name the file and field. */
mt_status bpe_load(const char *tokenizer_json_path, bpe_t **out, mt_err *err);
void bpe_free(bpe_t *t);

/* Number of ids: the largest id of the vocabulary or the added tokens + 1. */
int bpe_vocab_size(const bpe_t *t);
/* The token's text as tokenizer.json stores it (byte-level characters for
 * the vocabulary, the content of an added token), or NULL. */
const char *bpe_token(const bpe_t *t, int32_t id);
/* The id of an added token spelled name (NUL-terminated), or -1. */
int32_t bpe_special_id(const bpe_t *t, const char *name);
/* The last token the post-processor appends (Qwen3-Embedding's
 * <|endoftext|>), or -1 when it appends none. */
int32_t bpe_eos_id(const bpe_t *t);
/* Whether id is an added token marked "special". */
bool bpe_is_special(const bpe_t *t, int32_t id);

/* Encodes len bytes of UTF-8 text with the post-processor's tokens into ids
 * (capacity max_len: at least 1 and the number of post-processor tokens;
 * at that minimum the text's own tokens are all cut, as HF does).
 * Longer encodings keep the first tokens of the text and the
 * post-processor's tokens, as Hugging Face truncates (then post-processes).
 * *n gets the number written, full_len (may be NULL) the untruncated length.
 * Invalid UTF-8 is MT_EUTF8 naming the byte offset. Thread-safe on a
 * shared bpe_t. */
mt_status bpe_encode(const bpe_t *t, const char *text, size_t len, int32_t *ids, int max_len,
                     int *n, int *full_len, mt_err *err);

/* bpe_encode, and with offsets (not NULL; room for 2 * max_len) each
 * token's byte span [start, end) in text as Hugging Face tokenizers
 * aligns it: a byte-level token spans the original characters its bytes
 * come from (a token holding part of a character spans the whole one),
 * through NFC (a composed character spans its first source); the
 * post-processor's tokens get 0, 0, and ByteLevel's trim_offsets is
 * applied when the file asks. A text over INT32_MAX bytes is MT_ELIMIT. */
mt_status bpe_encode_offsets(const bpe_t *t, const char *text, size_t len, int32_t *ids,
                             int32_t *offsets, int max_len, int *n, int *full_len, mt_err *err);

/* Decodes n ids into text as `tokenizers` does with the ByteLevel decoder
 * (the tokens' characters back to bytes, invalid UTF-8 replaced by U+FFFD);
 * special tokens left out when skip_special. *out gets a new NUL-terminated
 * string (free() it); an id out of range is MT_EINVAL naming its index. */
mt_status bpe_decode(const bpe_t *t, const int32_t *ids, int n, bool skip_special, char **out,
                     mt_err *err);

#endif
