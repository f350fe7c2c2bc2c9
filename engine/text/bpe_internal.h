/* bpe_internal.h: what the byte-level BPE tokenizer's files share (not an
 * interface: engine/text/bpe.h is): the tokenizer's tables, built by
 * bpe_load.c, read by bpe.c (encode, decode) and bpe_pretok.c (NFC and the
 * split regex). */
#ifndef MT_BPE_INTERNAL_H
#define MT_BPE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"
#include "engine/text/bpe.h"
#include "engine/text/tok_special.h"

/* A merge: the pair (left id, right id) -> rank and the merged id. */
typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty slot */
    int32_t rank, id;
} bpe_merge;

/* A vocabulary entry by its bytes (after GPT-2's mapping back). */
typedef struct {
    uint32_t off, len; /* in bpe->bytes */
    int32_t id;        /* -1: empty slot */
} bpe_slot;

#define BPE_MAX_POST 8

struct bpe {
    char **tok;           /* id -> token text as stored (NULL: no such id) */
    int ntok;             /* ids 0..ntok-1 */
    size_t cap;           /* room in tok */
    int nvocab;           /* model.vocab's entries */
    char *bytes;          /* every vocabulary token's bytes, back to back */
    size_t nbytes;
    bpe_slot *vocab;      /* open addressing on the bytes */
    size_t vmask;
    bpe_merge *merges;    /* open addressing on key */
    size_t mmask;
    int32_t byte_id[256]; /* the token of one byte, or -1 */
    bool ignore_merges;   /* a word in the vocabulary is one token */
    bool nfc;             /* the normalizer is NFC */
    tok_added_list added; /* matched verbatim in the raw text */
    int32_t pre[BPE_MAX_POST], post[BPE_MAX_POST]; /* the template's tokens */
    int npre, npost;
    bool trim, trim_prefix; /* a ByteLevel post-processor's trim_offsets, add_prefix_space */
};

/* GPT-2's byte -> character mapping (ByteLevel): the code point of byte b. */
uint32_t bpe_byte_char(unsigned b);
/* Its inverse: the byte of a byte-level character, or -1. */
int bpe_char_byte(uint32_t c);

/* The id of the vocabulary token of these bytes, or -1. */
int32_t bpe_vocab_find(const bpe_t *t, const unsigned char *s, size_t len);

/* The merge of (a, b), or NULL. */
static inline const bpe_merge *bpe_merge_find(const bpe_t *t, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->mmask;
    for (;; h = (h + 1) & t->mmask) {
        const bpe_merge *m = &t->merges[h];
        if (m->key == key)
            return m;
        if (m->key == UINT64_MAX)
            return NULL;
    }
}

/* Pieces of a text: byte ranges of the normalized text. */
typedef struct {
    size_t *start, *end;
    size_t n, cap;
} bpe_pieces;

/* NFC of text (well-formed UTF-8) into a new buffer *out (free() it), or
 * *out = NULL when the text is NFC as it is (the common case). */
mt_status bpe_nfc(const char *text, size_t len, char **out, size_t *out_len, mt_err *err);

/* bpe_nfc (when nfc; else *out = NULL), and in *spans (a new array:
 * free() it) each byte of the result (of text when *out is NULL) as
 * [start, end) pairs: the original character it comes from, at byte
 * base + its offset in text, as tokenizers aligns NFC (a composed
 * character: its first source). */
mt_status bpe_nfc_track(const char *text, size_t len, size_t base, bool nfc, char **out,
                        size_t *out_len, uint32_t **spans, mt_err *err);

/* Splits well-formed UTF-8 text by Qwen2's regex (behavior Isolated),
 * appending the pieces' byte ranges. */
mt_status bpe_split(const char *text, size_t len, bpe_pieces *p, mt_err *err);

#endif
