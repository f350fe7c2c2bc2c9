/* unigram.h: the SentencePiece Unigram tokenizer of a Hugging Face
 * tokenizer.json, as XLM-R, bge-m3, multilingual-e5 and bge-reranker ship
 * it and `tokenizers` runs it: added tokens split off the raw text
 * (lstrip/rstrip as HF moves them), the normalizer (Precompiled: the
 * SentencePiece model's precompiled_charsmap, cut in grapheme clusters as
 * tokenizers does; Replace steps, a string or the regex " {2,}"), the
 * Metaspace pre-tokenizer (alone or after WhitespaceSplit), Viterbi over
 * the pieces' scores (unknown characters fused into one <unk>, or their
 * bytes as <0xNN> pieces with byte_fallback), and the post-processor's
 * tokens (RobertaProcessing or TemplateProcessing: "<s> $A </s>", pairs
 * "<s> $A </s> </s> $B </s>"). Ids back to text with the Metaspace
 * decoder (and ByteFallback, Fuse). Anything else tokenizer.json asks for
 * is refused at load, naming the file and the field.
 */
#ifndef MT_UNIGRAM_H
#define MT_UNIGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

typedef struct unigram unigram_t;

/* Reads tokenizer.json (model.type "Unigram"). Errors name the file and
 * field. */
mt_status unigram_load(const char *tokenizer_json_path, unigram_t **out, mt_err *err);
void unigram_free(unigram_t *t);

/* Number of ids: the vocabulary's and the added tokens' (largest id + 1). */
int unigram_vocab_size(const unigram_t *t);
/* The token's text (the vocabulary's piece, or an added token's content),
 * or NULL. */
const char *unigram_token(const unigram_t *t, int32_t id);
/* The id of an added token spelled name (NUL-terminated), or -1. */
int32_t unigram_special_id(const unigram_t *t, const char *name);
/* Whether id is an added token marked "special". */
bool unigram_is_special(const unigram_t *t, int32_t id);

/* Encodes len bytes of UTF-8 text with the post-processor's single
 * template into ids (capacity max_len, at least the template's tokens and
 * 1); longer encodings keep the text's first tokens, as Hugging Face
 * truncates before it post-processes. *n gets the count written,
 * full_len (may be NULL) the untruncated length. Invalid UTF-8 is
 * MT_EUTF8 naming the byte offset. Thread-safe on a shared unigram_t. */
mt_status unigram_encode(const unigram_t *t, const char *text, size_t len, int32_t *ids,
                         int max_len, int *n, int *full_len, mt_err *err);
/* unigram_encode, and with offsets (not NULL; room for 2 * max_len) each
 * token's byte span [start, end) in text as Hugging Face tokenizers
 * aligns it through the normalizer and Metaspace (a piece spans the
 * original characters its normalized ones come from, its ▁ the space it
 * replaced or, prepended, the first character; <0xNN> pieces the whole
 * unknown run; RobertaProcessing's trim_offsets applied); template tokens
 * get 0, 0. A text over INT32_MAX bytes is MT_ELIMIT. */
mt_status unigram_encode_offsets(const unigram_t *t, const char *text, size_t len, int32_t *ids,
                                 int32_t *offsets, int max_len, int *n, int *full_len,
                                 mt_err *err);
/* The text's own ids, no template tokens, into a new array *ids (free()
 * it; NULL when *n is 0). */
mt_status unigram_pieces(const unigram_t *t, const char *text, size_t len, int32_t **ids, int *n,
                         mt_err *err);
/* How many tokens the pair template adds around the two texts. */
int unigram_pair_added(const unigram_t *t);
/* Lays out the pair template around a[0..na) and b[0..nb) into ids (room
 * for na + nb + unigram_pair_added); *n the count, *seg the index of the
 * first token of type id 1 (*n when the template gives every token 0, as
 * RobertaProcessing does). */
void unigram_pair_layout(const unigram_t *t, const int32_t *a, int na, const int32_t *b, int nb,
                         int32_t *ids, int *n, int *seg);

/* Decodes n ids into text as `tokenizers` does with the file's decoder
 * (Metaspace: the replacement character back to spaces, the first
 * token's dropped; ByteFallback: <0xNN> runs back to bytes, U+FFFD each
 * when not UTF-8); special tokens left out when skip_special. *out gets a
 * new NUL-terminated string (free() it); an id out of range is MT_EINVAL
 * naming its index. */
mt_status unigram_decode(const unigram_t *t, const int32_t *ids, int n, bool skip_special,
                         char **out, mt_err *err);

#endif
