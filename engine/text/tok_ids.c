/* tok_ids.c: the id list and the two ends of an encode that the BPE and
 * Unigram tokenizers share (engine/text/tok_ids.h). */
#include "engine/text/tok_ids.h"

#include <stdlib.h>
#include <string.h>

#include "engine/text/utf8.h"

bool tok_ids_grow(tok_ids *o)
{
    size_t cap = o->cap ? o->cap * 2 : 256;
    int32_t *v = realloc(o->v, cap * sizeof *v);
    if (v)
        o->v = v;
    int32_t *f = v && o->track ? realloc(o->off, 2 * cap * sizeof *f) : NULL;
    if (f)
        o->off = f;
    if (!v || (o->track && !f))
        return false;
    o->cap = cap;
    return true;
}

void tok_ids_free(tok_ids *o)
{
    free(o->v);
    free(o->off);
    *o = (tok_ids){0};
}

mt_status tok_check_text(const char *text, size_t len, bool track, mt_err *err)
{
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = mt_utf8_seq(u + i, len - i);
        if (!k)
            return mt_fail(err, MT_EUTF8, "text is not valid UTF-8 at byte %zu", i);
        i += k;
    }
    if (track && len > INT32_MAX)
        return mt_fail(err, MT_ELIMIT, "tokenizer: offsets of a text over %d bytes", INT32_MAX);
    return MT_OK;
}

mt_status tok_encode_begin(const char *fn, int extra, int max_len, int *n, int *full_len,
                           mt_err *err)
{
    if (max_len < extra || max_len < 1)
        return mt_fail(err, MT_EINVAL, "%s: max_len must be at least %d, not %d", fn,
                       extra > 1 ? extra : 1, max_len);
    *n = 0;
    if (full_len)
        *full_len = 0;
    return MT_OK;
}

void tok_encode_end(tok_ids *o, const int32_t *pre, int npre, const int32_t *post, int npost,
                    int max_len, int32_t *ids, int32_t *offsets, int *n, int *full_len)
{
    const int extra = npre + npost;
    size_t room = (size_t)(max_len - extra), kept = o->n < room ? o->n : room;
    memcpy(ids, pre, (size_t)npre * sizeof *ids);
    if (kept)
        memcpy(ids + npre, o->v, kept * sizeof *ids);
    memcpy(ids + npre + kept, post, (size_t)npost * sizeof *ids);
    *n = (int)kept + extra;
    if (offsets) {
        memset(offsets, 0, 2 * (size_t)*n * sizeof *offsets);
        if (kept)
            memcpy(offsets + 2 * npre, o->off, 2 * kept * sizeof *offsets);
    }
    if (full_len)
        *full_len = (int)o->n + extra;
    tok_ids_free(o);
}
