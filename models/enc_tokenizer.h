/* enc_tokenizer.h: a model folder's tokenizer, of the kind its own files
 * say (tokenizer.json's model.type; a folder with only vocab.txt is
 * WordPiece), with the casing and normalization they say (tokenizer.json's
 * normalizer, else tokenizer_config.json, else BERT's uncased defaults).
 * Defined in models/enc_tokenizer.c; the encoder loads its tokenizer here.
 */
#ifndef MT_MODELS_ENC_TOKENIZER_H
#define MT_MODELS_ENC_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/status.h"
#include "engine/text/bpe.h"
#include "engine/text/tokenizer.h"
#include "engine/text/unigram.h"

/* A model's tokenizer, of whichever kind (the encoder uses it through the
 * enc_tok_* functions below alone). */
typedef struct enc_tok enc_tok;

/* Loads the tokenizer of the model folder dir into *out. cls, sep, pad and
 * unk are the tokens of those roles for WordPiece (the architecture row's;
 * NULL: BERT's "[CLS]" "[SEP]" "[PAD]" "[UNK]", and for unk the
 * tokenizer.json model's unk_token where it names one; a BPE tokenizer's
 * specials are its post-processor's, and so are a Unigram one's). vocab is
 * config.json's vocab_size, which a WordPiece vocabulary's size must equal
 * and a BPE or Unigram one's must not exceed (Qwen3's config rounds it
 * up). An unknown
 * kind and a field of the wrong type are errors naming the file and the
 * field. */
mt_status enc_tokenizer_load(const char *dir, const char *cls, const char *sep, const char *pad,
                             const char *unk, int vocab, enc_tok **out, mt_err *err);
void enc_tok_free(enc_tok *t);
/* tok_encode's contract for every kind: the text's ids with the kind's
 * special tokens, truncated to max_len. */
mt_status enc_tok_encode(const enc_tok *t, const char *text, size_t len, int32_t *ids,
                         int max_len, int *n, int *full_len, mt_err *err);
/* enc_tok_encode, and each token's byte span [start, end) in text into
 * offsets (2 per token, room for 2 * max_len), as Hugging Face tokenizers
 * aligns it through normalization; the kind's template tokens 0, 0.
 * Every kind: WordPiece, byte-level BPE and Unigram. */
mt_status enc_tok_encode_offsets(const enc_tok *t, const char *text, size_t len, int32_t *ids,
                                 int32_t *offsets, int max_len, int *n, int *full_len,
                                 mt_err *err);
/* A pair (a query and a document) as a cross-encoder reads it: the
 * kind's pair template around the two texts' pieces (WordPiece: [CLS] a
 * [SEP] b [SEP]; a RoBERTa-style post-processor: <s> a </s></s> b </s>),
 * the pieces cut as Hugging Face tokenizers' longest-first truncation
 * does (enc_pair_cut) so that everything fits max_len. *seg gets the
 * index of the first token of token type 1 (BERT: b's first piece), or
 * *n where the template gives every token type 0; full_len (may be NULL)
 * the length uncut. A kind without a pair template (byte-level BPE) is
 * MT_EUNSUPPORTED; max_len below the template's tokens + 2 is MT_EINVAL
 * (5 for WordPiece, 6 for XLM-R's). */
mt_status enc_tok_encode_pair(const enc_tok *t, const char *a, size_t alen, const char *b,
                              size_t blen, int32_t *ids, int max_len, int *n, int *seg,
                              int *full_len, mt_err *err);
/* Hugging Face tokenizers' longest-first cut of a pair of n1 and n2
 * pieces into room: nothing when they fit; else the longer loses pieces
 * until it is as short as the other, then both lose in turn (the shorter
 * keeps room / 2, the longer the rest). *k1, *k2: the pieces kept. */
void enc_pair_cut(int n1, int n2, int room, int *k1, int *k2);
/* The vocabulary entry of id (NULL out of range); *special: a token the
 * tokenizer adds around a text ([CLS], [SEP]; a BPE or Unigram tokenizer's
 * special added tokens). */
const char *enc_tok_token(const enc_tok *t, int32_t id, bool *special);
mt_status enc_tok_decode(const enc_tok *t, const int32_t *ids, int n, bool skip_special,
                         char **out, mt_err *err);
/* The WordPiece tokenizer inside t, or NULL when t is of another kind. */
const tok_t *enc_tok_wordpiece(const enc_tok *t);

#endif
