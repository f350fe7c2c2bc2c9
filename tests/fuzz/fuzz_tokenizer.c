/* fuzz_tokenizer.c: libFuzzer harness for the WordPiece tokenizer
 * (engine/text/tokenizer.c) with the real all-MiniLM-L6-v2 vocab, fed arbitrary
 * bytes as the text of a request.
 *
 * Beyond "no crash, no sanitizer report", it checks what tokenizer.h
 * promises:
 *   - valid UTF-8 (by an independent validator) encodes; invalid UTF-8 is
 *     MT_EUTF8 and nothing else;
 *   - the ids are [CLS] ... [SEP], each inside the vocab, n <= max_len,
 *     n == full_len when nothing was cut;
 *   - truncation keeps a prefix: encoding at max_len 256 equals the first
 *     255 ids of the untruncated encoding, then [SEP].
 *
 * The vocab is models/all-MiniLM-L6-v2/vocab.txt (make model), relative to
 * the repository root, or $MANTISSA_VOCAB.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

#define MAX_LEN 256

static tok_t *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *path = getenv("MANTISSA_VOCAB");
    if (!path)
        path = "models/all-MiniLM-L6-v2/vocab.txt";
    tok_options o = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100};
    mt_err err = {{0}};
    if (tok_load(path, &o, &tok, &err) != MT_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s (run `make model` first, from the repository root)\n",
                err.msg);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t ids[MAX_LEN];
    int n = -1, full = -1;
    mt_err err = {{0}};
    mt_status s = tok_encode(tok, (const char *)data, size, ids, MAX_LEN, &n, &full, &err);

    int valid = fuzz_utf8_valid(data, size);
    if (s == MT_ENOMEM)
        return 0;
    if (!valid) {
        FUZZ_CHECK(s == MT_EUTF8, "invalid UTF-8 gave %s (%s), not MT_EUTF8", mt_strerror(s),
                   err.msg);
        FUZZ_CHECK(err.msg[0], "MT_EUTF8 without a message");
        return 0;
    }
    FUZZ_CHECK(s == MT_OK, "valid UTF-8 of %zu bytes failed: %s: %s", size, mt_strerror(s),
               err.msg);

    const int vocab = tok_vocab_size(tok);
    FUZZ_CHECK(n >= 2 && n <= MAX_LEN, "n = %d", n);
    FUZZ_CHECK(full >= n, "full_len %d < n %d", full, n);
    FUZZ_CHECK(full == n || n == MAX_LEN, "cut to %d of %d below max_len %d", n, full, MAX_LEN);
    FUZZ_CHECK(ids[0] == tok_cls_id(tok), "ids[0] = %d, not [CLS]", ids[0]);
    FUZZ_CHECK(ids[n - 1] == tok_sep_id(tok), "ids[n-1] = %d, not [SEP]", ids[n - 1]);
    for (int i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "ids[%d] = %d outside the vocab (%d)", i,
                   ids[i], vocab);

    /* Truncation keeps a prefix of the full encoding. */
    if (full > MAX_LEN) {
        int32_t *all = malloc(sizeof *all * (size_t)full);
        FUZZ_CHECK(all, "out of memory");
        int n2 = -1, full2 = -1;
        s = tok_encode(tok, (const char *)data, size, all, full, &n2, &full2, &err);
        FUZZ_CHECK(s == MT_OK, "second encode failed: %s", err.msg);
        FUZZ_CHECK(n2 == full && full2 == full, "untruncated: n %d full %d, expected %d", n2,
                   full2, full);
        FUZZ_CHECK(!memcmp(ids, all, sizeof *ids * (MAX_LEN - 1)),
                   "truncated ids are not a prefix of the full encoding");
        free(all);
    }
    return 0;
}
