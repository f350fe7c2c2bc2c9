/* enc_tokenizer.h: a model folder's tokenizer, of the kind its own files
 * say (tokenizer.json's model.type; a folder with only vocab.txt is
 * WordPiece), with the casing and normalization they say (tokenizer.json's
 * normalizer, else tokenizer_config.json, else BERT's uncased defaults).
 * Defined in models/enc_tokenizer.c; the encoder loads its tokenizer here.
 */
#ifndef MT_MODELS_ENC_TOKENIZER_H
#define MT_MODELS_ENC_TOKENIZER_H

#include "engine/status.h"
#include "engine/text/tokenizer.h"

/* Loads the tokenizer of the model folder dir into *out. cls, sep, pad and
 * unk are the tokens of those roles (the architecture row's; NULL: BERT's
 * "[CLS]" "[SEP]" "[PAD]" "[UNK]", and for unk the tokenizer.json model's
 * unk_token where it names one). vocab is config.json's vocab_size, which
 * the vocabulary's size must equal. A kind the table knows but cannot load
 * yet (BPE, Unigram), an unknown kind, and a field of the wrong type are
 * errors naming the file and the field. */
mt_status enc_tokenizer_load(const char *dir, const char *cls, const char *sep, const char *pad,
                             const char *unk, int vocab, tok_t **out, mt_err *err);

#endif
