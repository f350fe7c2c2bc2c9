/* tok_decode.c: token ids back into text, as Hugging Face's tokenizers
 * decodes them with the WordPiece decoder that BERT's and MPNet's
 * tokenizer.json name ({"type": "WordPiece", "prefix": "##", "cleanup":
 * true}); see tok_decode in engine/text/tokenizer.h. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"

/* The decoder's cleanup, in its order: in each piece (with the space put
 * before it), every "from" becomes "to". */
static const char *const cleanup[][2] = {
    {" .", "."},     {" ?", "?"},     {" !", "!"},           {" ,", ","},
    {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"},         {" do not", " don't"},
    {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"},
};

/* Replaces every "from" of s (len bytes, left to right, not overlapping)
 * with "to", which is no longer; returns the new length (s stays
 * NUL-terminated). */
static size_t replace_all(char *s, size_t len, const char *from, const char *to)
{
    const size_t fl = strlen(from), tl = strlen(to);
    size_t r = 0, w = 0;
    while (r < len) {
        if (len - r >= fl && !memcmp(s + r, from, fl)) {
            memcpy(s + w, to, tl); /* w + tl <= r + fl: nothing unread is overwritten */
            w += tl;
            r += fl;
        } else {
            s[w++] = s[r++];
        }
    }
    s[w] = 0;
    return w;
}

mt_status tok_decode(const tok_t *t, const int32_t *ids, int n, bool skip_special, char **out,
                     mt_err *err)
{
    *out = NULL;
    size_t cap = 1;
    for (int i = 0; i < n; i++) {
        const char *p = tok_token(t, ids[i]);
        if (!p)
            return mt_fail(err, MT_EINVAL, "ids[%d] = %d is not a token id (the vocabulary has %d)",
                           i, ids[i], tok_vocab_size(t));
        cap += strlen(p) + 1;
    }
    char *s = malloc(cap);
    if (!s)
        return mt_fail(err, MT_ENOMEM, "out of memory decoding %d ids", n);
    size_t len = 0;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (skip_special && tok_is_special(t, ids[i]))
            continue;
        const char *p = tok_token(t, ids[i]);
        char *seg = s + len;
        size_t sl = 0;
        if (kept > 0 && !strncmp(p, "##", 2)) {
            p += 2; /* a continuation: glued to the piece before */
        } else if (kept > 0) {
            seg[sl++] = ' ';
        }
        memcpy(seg + sl, p, strlen(p) + 1);
        sl += strlen(p);
        for (size_t k = 0; k < sizeof cleanup / sizeof *cleanup; k++)
            sl = replace_all(seg, sl, cleanup[k][0], cleanup[k][1]);
        len += sl;
        kept++;
    }
    s[len] = 0;
    *out = s;
    return MT_OK;
}
