/* model.c: what every model does the same way on top of its table
 * (engine/model.h): texts -> token ids -> one forward. */
#include "engine/model.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

mt_status mt_model_embed_texts(mt_model *m, const char *const *texts, const size_t *lens, int n,
                               float *out, long *n_tokens, mt_err *err)
{
    const int maxlen = m->info.max_seq_len;
    if (n <= 0)
        return MT_OK;
    if ((size_t)n > (size_t)INT_MAX / (size_t)maxlen)
        return mt_fail(err, MT_ELIMIT, "too many inputs (%d)", n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * maxlen);
    int32_t *off = malloc(sizeof(int32_t) * ((size_t)n + 1));
    mt_status st = MT_OK;
    if (!ids || !off) {
        st = mt_fail(err, MT_ENOMEM, "out of memory tokenizing %d inputs", n);
        goto done;
    }
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        int got = 0;
        st = mt_model_tokenize(m, texts[i], lens ? lens[i] : strlen(texts[i]), ids + off[i],
                               maxlen, &got, NULL, err);
        if (st != MT_OK) {
            mt_prefix(err, st, "input[%d]: ", i);
            goto done;
        }
        off[i + 1] = off[i] + got;
    }
    if (n_tokens)
        *n_tokens = off[n];
    st = mt_model_forward(m, ids, off, n, out, NULL, err);
done:
    free(ids);
    free(off);
    return st;
}
