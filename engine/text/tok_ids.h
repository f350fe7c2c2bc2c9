/* tok_ids.h: what the BPE (bpe.c) and Unigram (unigram.c) encoders share
 * (not an interface: engine/text/bpe.h and unigram.h are): the growing
 * list of a text's ids, with each one's byte span when offsets are asked
 * for, and the two ends of an encode around it (tok_ids.c): the checks it
 * begins with, and the template's tokens laid around the text's ids,
 * truncated, that it ends with.
 */
#ifndef MT_TOK_IDS_H
#define MT_TOK_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

/* The ids; with track, each one's byte span in text too (off: pairs). */
typedef struct {
    int32_t *v, *off;
    size_t n, cap;
    bool track;
    const char *text;
    size_t len;
} tok_ids;

/* Twice the room (off's too when tracking); false when out of memory. */
bool tok_ids_grow(tok_ids *o);

static inline bool tok_ids_push(tok_ids *o, int32_t id)
{
    if (o->n == o->cap && !tok_ids_grow(o))
        return false;
    o->v[o->n++] = id;
    return true;
}

/* Frees the arrays; o is empty again. */
void tok_ids_free(tok_ids *o);

/* Checks an encode's text: UTF-8 (MT_EUTF8 naming the first bad byte) and,
 * with track, at most INT32_MAX bytes, the offsets' range (MT_ELIMIT). */
mt_status tok_check_text(const char *text, size_t len, bool track, mt_err *err);

/* The start of an encode named fn whose template adds extra tokens:
 * max_len must be at least extra and 1 (MT_EINVAL naming fn); *n and
 * *full_len (may be NULL) become 0. */
mt_status tok_encode_begin(const char *fn, int extra, int max_len, int *n, int *full_len,
                           mt_err *err);

/* The end of an encode: the template's tokens before the text (pre, npre)
 * and after it (post, npost) around the first of o's ids that max_len
 * leaves room for (Hugging Face truncates, then post-processes) into ids,
 * and with offsets (not NULL) their spans, 0, 0 for the template's; *n the
 * count written, *full_len (may be NULL) the count without the cut. Frees
 * o's arrays (tok_ids_free). */
void tok_encode_end(tok_ids *o, const int32_t *pre, int npre, const int32_t *post, int npost,
                    int max_len, int32_t *ids, int32_t *offsets, int *n, int *full_len);

#endif
