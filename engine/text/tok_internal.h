/* tok_internal.h: what the WordPiece tokenizer's files share (not an
 * interface: engine/text/tokenizer.h is): the loaded tokenizer, built by
 * tok_vocab.c and read by tokenizer.c (encode) and tok_decode.c, and the
 * vocabulary's hash table lookups, inline for WordPiece's inner loop.
 */
#ifndef MT_TOK_INTERNAL_H
#define MT_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/text/tok_special.h"
#include "engine/text/tokenizer.h"

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
static inline uint64_t tok_poly(uint64_t h, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = h * TOK_HB + (unsigned char)s[i] + 1;
    return h;
}

/* Spreads a polynomial hash over the table's bits. */
static inline size_t tok_slot(const tok_t *t, uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return (size_t)h & t->mask;
}

/* Id of the vocab entry equal to pre + s, whose hash is h, or -1. The one
 * lookup the tokenizer uses, for whole words and "##" continuations alike. */
static inline int32_t tok_find(const tok_t *t, uint64_t h, const char *pre, size_t plen,
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

#endif
