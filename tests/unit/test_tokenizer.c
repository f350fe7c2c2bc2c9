/* test_tokenizer.c: check suite for engine/text/tokenizer.c.
 *
 * The main test encodes every text of tests/fixtures/tokenizer/corpus.jsonl
 * and compares ids and untruncated length with the Hugging Face tokenizers
 * output in expected.jsonl (tools/make-tokenizer-fixtures.py made both).
 * The others pin the edges: invalid UTF-8, truncation, long words, loading
 * errors, big inputs, sharing one tokenizer between threads.
 * Paths are relative to the repository root, the cwd of `make test`.
 */
#include <check.h>
#include <cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/text/tokenizer.h"

#define VOCAB "models/all-MiniLM-L6-v2/vocab.txt"
#define CORPUS "tests/fixtures/tokenizer/corpus.jsonl"
#define EXPECTED "tests/fixtures/tokenizer/expected.jsonl"
#define FIXTURE_MAX_LEN 256

/* ---------------------------------------------------------------------- */
/* Helpers                                                                  */
/* ---------------------------------------------------------------------- */

/* Loads the MiniLM vocabulary with BERT's options or fails the test. */
static tok_t *load_minilm(void)
{
    tok_options opt = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100};
    tok_t *t = NULL;
    mt_err err = {{0}};
    mt_status s = tok_load(VOCAB, &opt, &t, &err);
    ck_assert_msg(s == MT_OK, "tok_load: %s (run `make model` first)", err.msg);
    return t;
}

/* Reads a whole file; NULL on failure. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

/* Appends code point c as UTF-8. */
static size_t put_utf8(char *o, unsigned long c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* Reads 4 hex digits; -1 if they are not. */
static long hex4(const char *s)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes one JSON string literal (a corpus line) into out (malloc'd),
 * keeping embedded NULs, which cJSON's C strings would cut. */
static bool json_string(const char *s, size_t n, char **out, size_t *out_len)
{
    if (n < 2 || s[0] != '"' || s[n - 1] != '"')
        return false;
    char *o = malloc(n * 2 + 1), *p = o;
    if (!o)
        return false;
    for (size_t i = 1; i < n - 1; i++) {
        if (s[i] != '\\') {
            *p++ = s[i];
            continue;
        }
        if (++i >= n - 1)
            goto bad;
        switch (s[i]) {
        case '"': *p++ = '"'; break;
        case '\\': *p++ = '\\'; break;
        case '/': *p++ = '/'; break;
        case 'b': *p++ = '\b'; break;
        case 'f': *p++ = '\f'; break;
        case 'n': *p++ = '\n'; break;
        case 'r': *p++ = '\r'; break;
        case 't': *p++ = '\t'; break;
        case 'u': {
            if (i + 4 > n - 2)
                goto bad;
            long c = hex4(s + i + 1);
            if (c < 0)
                goto bad;
            i += 4;
            if (c >= 0xD800 && c <= 0xDBFF) {
                if (i + 6 > n - 2 || s[i + 1] != '\\' || s[i + 2] != 'u')
                    goto bad;
                long lo = hex4(s + i + 3);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    goto bad;
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            } else if (c >= 0xDC00 && c <= 0xDFFF) {
                goto bad;
            }
            p += put_utf8(p, (unsigned long)c);
            break;
        }
        default:
            goto bad;
        }
    }
    *out = o;
    *out_len = (size_t)(p - o);
    return true;
bad:
    free(o);
    return false;
}

/* Prints an id list on stderr, for mismatch reports. */
static void print_ids(const char *label, const int32_t *ids, int n)
{
    fprintf(stderr, "  %s (%d):", label, n);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Encodes a NUL-terminated string, asserting success. */
static int encode_ok(const tok_t *t, const char *s, int32_t *ids, int max_len, int *full)
{
    int n = -1;
    mt_err err = {{0}};
    mt_status st = tok_encode(t, s, strlen(s), ids, max_len, &n, full, &err);
    ck_assert_msg(st == MT_OK, "encode failed: %s", err.msg);
    return n;
}

/* Asserts that bytes fail with MT_EUTF8 and that the message names offset. */
static void assert_utf8_error(const tok_t *t, const char *bytes, size_t len, size_t offset)
{
    int32_t ids[16];
    int n = 7;
    mt_err err = {{0}};
    mt_status s = tok_encode(t, bytes, len, ids, 16, &n, NULL, &err);
    ck_assert_int_eq(s, MT_EUTF8);
    char want[64];
    snprintf(want, sizeof want, "byte offset %zu", offset);
    ck_assert_msg(strstr(err.msg, want) != NULL, "message \"%s\" lacks \"%s\"", err.msg, want);
}

/* ---------------------------------------------------------------------- */
/* Parity with Hugging Face tokenizers                                      */
/* ---------------------------------------------------------------------- */

/* Tokens whose offsets corpus_mismatches compared, for its report. */
static long g_tokens;

/* Encodes every text of corpus_path with t and compares with the ids,
 * lengths and byte offsets Hugging Face gave (expected_path; tok_encode for
 * the ids, tok_encode_offsets for both); prints the first mismatches.
 * Returns how many lines differ; *nlines gets the number of lines. */
static int corpus_mismatches(const tok_t *t, const char *corpus_path, const char *expected_path,
                             int *nlines)
{
    size_t clen = 0, elen = 0;
    char *corpus = read_all(corpus_path, &clen);
    char *expected = read_all(expected_path, &elen);
    ck_assert_msg(corpus && expected, "cannot read %s or %s", corpus_path, expected_path);

    int lines = 0, bad = 0;
    char *cl = corpus, *el = expected;
    while (*cl && *el) {
        char *cend = strchr(cl, '\n'), *eend = strchr(el, '\n');
        ck_assert_msg(cend && eend, "line %d: unterminated line", lines + 1);
        *cend = '\0';
        *eend = '\0';
        lines++;

        char *text = NULL;
        size_t tlen = 0;
        ck_assert_msg(json_string(cl, (size_t)(cend - cl), &text, &tlen),
                      "%s:%d: not a JSON string", corpus_path, lines);
        cJSON *obj = cJSON_Parse(el);
        ck_assert_msg(obj != NULL, "%s:%d: bad JSON", expected_path, lines);
        cJSON *jids = cJSON_GetObjectItemCaseSensitive(obj, "ids");
        cJSON *jfull = cJSON_GetObjectItemCaseSensitive(obj, "full_len");
        cJSON *joff = cJSON_GetObjectItemCaseSensitive(obj, "offsets");
        ck_assert_msg(cJSON_IsArray(jids) && cJSON_IsNumber(jfull) && cJSON_IsArray(joff) &&
                          cJSON_GetArraySize(joff) == cJSON_GetArraySize(jids),
                      "%s:%d: bad object", expected_path, lines);
        int want_n = cJSON_GetArraySize(jids);
        ck_assert_int_le(want_n, FIXTURE_MAX_LEN);
        int32_t want[FIXTURE_MAX_LEN], got[FIXTURE_MAX_LEN];
        int i = 0;
        cJSON *it;
        cJSON_ArrayForEach(it, jids) want[i++] = (int32_t)it->valueint;
        int32_t want_off[2 * FIXTURE_MAX_LEN], got_off[2 * FIXTURE_MAX_LEN];
        i = 0;
        cJSON_ArrayForEach(it, joff) {
            ck_assert_msg(cJSON_GetArraySize(it) == 2, "%s:%d: bad offsets", expected_path, lines);
            want_off[i++] = (int32_t)cJSON_GetArrayItem(it, 0)->valueint;
            want_off[i++] = (int32_t)cJSON_GetArrayItem(it, 1)->valueint;
        }

        int got_n = 0, got_full = 0;
        mt_err err = {{0}};
        mt_status s = tok_encode(t, text, tlen, got, FIXTURE_MAX_LEN, &got_n, &got_full, &err);
        bool same = s == MT_OK && got_n == want_n && got_full == jfull->valueint &&
                    memcmp(got, want, (size_t)want_n * sizeof *want) == 0;
        /* The same encode with offsets: the same ids, and tokenizers' spans. */
        int off_n = 0;
        memset(got_off, 0xff, sizeof got_off);
        mt_status so = tok_encode_offsets(t, text, tlen, got, got_off, FIXTURE_MAX_LEN, &off_n,
                                          NULL, &err);
        same = same && so == MT_OK && off_n == want_n &&
               memcmp(got, want, (size_t)want_n * sizeof *want) == 0;
        for (int k = 0; so == MT_OK && k < want_n && k < off_n; k++) {
            g_tokens++;
            if (got_off[2 * k] == want_off[2 * k] && got_off[2 * k + 1] == want_off[2 * k + 1])
                continue;
            if (bad < 20)
                fprintf(stderr, "%s:%d: token %d (id %d): offsets hf [%d, %d), ours [%d, %d): %s\n",
                        corpus_path, lines, k, want[k], want_off[2 * k], want_off[2 * k + 1],
                        got_off[2 * k], got_off[2 * k + 1], cl);
            same = false;
        }
        if (!same) {
            if (bad < 20) {
                fprintf(stderr, "%s:%d: mismatch: %s\n", corpus_path, lines, cl);
                if (s != MT_OK)
                    fprintf(stderr, "  error: %s\n", err.msg);
                print_ids("hf ", want, want_n);
                print_ids("ours", got, s == MT_OK ? got_n : 0);
                fprintf(stderr, "  full_len hf %d, ours %d\n", jfull->valueint, got_full);
            }
            bad++;
        }
        cJSON_Delete(obj);
        free(text);
        cl = cend + 1;
        el = eend + 1;
    }
    ck_assert_msg(*cl == '\0' && *el == '\0', "%s and %s differ in length", corpus_path,
                  expected_path);
    free(corpus);
    free(expected);
    *nlines = lines;
    return bad;
}

/* Loads a model folder's vocab.txt with its tokenizer.json's added tokens. */
static tok_t *load_dir(const char *dir, const char *cls, const char *sep, const char *pad,
                       const char *unk)
{
    char vocab[256], tj[256];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir);
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    tok_options opt = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100,
                       .added_tokens_json = tj, .cls_token = cls, .sep_token = sep,
                       .pad_token = pad, .unk_token = unk};
    tok_t *t = NULL;
    mt_err err = {{0}};
    ck_assert_msg(tok_load(vocab, &opt, &t, &err) == MT_OK,
                  "tok_load: %s (run `make model-all` first)", err.msg);
    return t;
}

START_TEST(tokenizer_matches_hf_on_corpus)
{
    tok_t *t = load_minilm();
    int lines = 0;
    g_tokens = 0;
    int bad = corpus_mismatches(t, CORPUS, EXPECTED, &lines);
    fprintf(stderr, "corpus: %d texts, offsets of %ld tokens compared\n", lines, g_tokens);
    ck_assert_int_ge(lines, 500);
    ck_assert_int_ge(g_tokens, 10000);
    ck_assert_msg(bad == 0, "%d of %d corpus lines differ from Hugging Face", bad, lines);
    tok_free(t);
}
END_TEST

/* MiniLM's tokenizer.json (the path the model loads through) gives the
 * same ids; MPNet's vocabulary and added tokens match HF on the corpus; the
 * texts spelling special tokens match HF for both. */
START_TEST(tokenizer_added_tokens_match_hf)
{
    tok_t *mini = load_dir("models/all-MiniLM-L6-v2", NULL, NULL, NULL, NULL);
    tok_t *mp = load_dir("models/all-mpnet-base-v2", "<s>", "</s>", "<pad>", "[UNK]");
    ck_assert_int_eq(tok_cls_id(mp), 0);
    ck_assert_int_eq(tok_sep_id(mp), 2);
    ck_assert_int_eq(tok_pad_id(mp), 1);
    ck_assert_int_eq(tok_unk_id(mp), 104);
    int lines = 0;
    ck_assert_int_eq(corpus_mismatches(mini, CORPUS, EXPECTED, &lines), 0);
    ck_assert_int_eq(corpus_mismatches(mp, CORPUS, "tests/fixtures/tokenizer/expected-mpnet.jsonl",
                                       &lines), 0);
    ck_assert_int_ge(lines, 500);
    const char *sp = "tests/fixtures/tokenizer/specials.jsonl";
    ck_assert_int_eq(corpus_mismatches(mini, sp, "tests/fixtures/tokenizer/specials-minilm.jsonl",
                                       &lines), 0);
    ck_assert_int_eq(corpus_mismatches(mp, sp, "tests/fixtures/tokenizer/specials-mpnet.jsonl",
                                       &lines), 0);
    ck_assert_int_ge(lines, 8);
    tok_free(mini);
    tok_free(mp);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Invalid UTF-8                                                            */
/* ---------------------------------------------------------------------- */

/* Truncated encodes keep the untruncated encode's first spans; the
 * template's tokens span nothing; the spans are byte offsets. */
START_TEST(tokenizer_offsets_truncate_and_specials)
{
    tok_t *t = load_minilm();
    const char *s = "H\xc3\xa9llo w\xc3\xb6rld, CAF\xc3\x89 [SEP] x";
    int32_t ids[32], off[64], tids[4], toff[8];
    int n = 0, tn = 0, full = 0;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_encode_offsets(t, s, strlen(s), ids, off, 32, &n, NULL, &err), MT_OK);
    ck_assert_int_eq(tok_encode_offsets(t, s, strlen(s), tids, toff, 4, &tn, &full, &err), MT_OK);
    ck_assert_int_eq(tn, 4);
    ck_assert_int_eq(full, n);
    /* [CLS] hello world , cafe [SEP] x [SEP]: h\xc3\xa9llo is bytes 0..6 */
    ck_assert_int_eq(n, 8);
    const int32_t want[16] = {0, 0, 0, 6, 7, 13, 13, 14, 15, 20, 21, 26, 27, 28, 0, 0};
    for (int k = 0; k < 16; k++)
        ck_assert_msg(off[k] == want[k], "offset %d: %d, not %d", k, off[k], want[k]);
    ck_assert_int_eq(toff[2], 0);
    ck_assert_int_eq(toff[3], 6);
    ck_assert_int_eq(toff[4], 7);
    ck_assert_int_eq(toff[5], 13);
    ck_assert_int_eq(toff[6], 0);
    ck_assert_int_eq(toff[7], 0);
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_rejects_overlong_utf8)
{
    tok_t *t = load_minilm();
    assert_utf8_error(t, "ab\xC0\xAF", 4, 2);            /* '/' in 2 bytes */
    assert_utf8_error(t, "\xC1\xBF", 2, 0);
    assert_utf8_error(t, "abc\xE0\x80\xAF", 6, 3);       /* '/' in 3 bytes */
    assert_utf8_error(t, "\xE0\x9F\xBF", 3, 0);          /* U+07FF in 3 bytes */
    assert_utf8_error(t, "x\xF0\x80\x80\xAF", 5, 1);     /* '/' in 4 bytes */
    assert_utf8_error(t, "\xF0\x8F\xBF\xBF", 4, 0);      /* U+FFFF in 4 bytes */
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_rejects_surrogate_utf8)
{
    tok_t *t = load_minilm();
    assert_utf8_error(t, "a\xED\xA0\x80", 4, 1);         /* U+D800 */
    assert_utf8_error(t, "\xED\xBF\xBF", 3, 0);          /* U+DFFF */
    assert_utf8_error(t, "ok \xED\xA0\xBD\xED\xB8\x80", 9, 3); /* CESU-8 emoji */
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_rejects_truncated_utf8)
{
    tok_t *t = load_minilm();
    assert_utf8_error(t, "abc\xE2\x82", 5, 3);           /* end of input */
    assert_utf8_error(t, "\xE2\x82x", 3, 0);             /* ASCII too early */
    assert_utf8_error(t, "\xF0\x9F\x98", 3, 0);
    assert_utf8_error(t, "\xC3", 1, 0);
    assert_utf8_error(t, "caf\xC3 ", 5, 3);
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_rejects_utf8_above_max_code_point)
{
    tok_t *t = load_minilm();
    assert_utf8_error(t, "\xF4\x90\x80\x80", 4, 0);      /* U+110000 */
    assert_utf8_error(t, "ab\xF5\x80\x80\x80", 6, 2);
    assert_utf8_error(t, "\xFF", 1, 0);
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_rejects_stray_continuation_byte)
{
    tok_t *t = load_minilm();
    assert_utf8_error(t, "hello\x80world", 11, 5);
    assert_utf8_error(t, "\xBF", 1, 0);
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_accepts_utf8_edges)
{
    tok_t *t = load_minilm();
    int32_t ids[16];
    /* U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF */
    const char *s = "\xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xEF\xBF\xBF "
                    "\xF0\x90\x80\x80 \xF4\x8F\xBF\xBF";
    int n = encode_ok(t, s, ids, 16, NULL);
    ck_assert_int_ge(n, 2);
    tok_free(t);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Lengths and special cases                                                */
/* ---------------------------------------------------------------------- */

START_TEST(tokenizer_truncates_to_max_len)
{
    tok_t *t = load_minilm();
    size_t reps = 300;
    char *s = malloc(reps * 5 + 1);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < reps; i++)
        memcpy(s + i * 5, "word ", 5);
    s[reps * 5] = '\0';
    int32_t word = tok_lookup(t, "word", 4);
    ck_assert_int_ge(word, 0);

    int32_t ids[10];
    int full = 0;
    int n = encode_ok(t, s, ids, 10, &full);
    ck_assert_int_eq(n, 10);
    ck_assert_int_eq(full, 302);
    ck_assert_int_eq(ids[0], tok_cls_id(t));
    for (int i = 1; i < 9; i++)
        ck_assert_int_eq(ids[i], word);
    ck_assert_int_eq(ids[9], tok_sep_id(t));

    n = encode_ok(t, s, ids, 2, &full);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(full, 302);
    ck_assert_int_eq(ids[0], tok_cls_id(t));
    ck_assert_int_eq(ids[1], tok_sep_id(t));

    /* A word split into pieces is cut between its pieces, as HF does. */
    n = encode_ok(t, "unaffordable", ids, 3, &full);
    ck_assert_int_eq(n, 3);
    ck_assert_int_gt(full, 3);
    ck_assert_int_eq(ids[2], tok_sep_id(t));
    free(s);
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_empty_string_is_cls_sep)
{
    tok_t *t = load_minilm();
    int32_t ids[4];
    int n = -1, full = -1;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_encode(t, NULL, 0, ids, 4, &n, &full, &err), MT_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(full, 2);
    ck_assert_int_eq(ids[0], 101);
    ck_assert_int_eq(ids[1], 102);
    ck_assert_int_eq(encode_ok(t, "", ids, 4, &full), 2);
    ck_assert_int_eq(encode_ok(t, " \t\r\n\xE2\x80\x8B\x01", ids, 4, &full), 2);
    ck_assert_int_eq(full, 2);
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_word_over_100_chars_is_unk)
{
    tok_t *t = load_minilm();
    char s[128];
    int32_t ids[64];
    int full;
    memset(s, 'a', 101);
    s[101] = '\0';
    int n = encode_ok(t, s, ids, 64, &full);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[1], tok_unk_id(t));

    s[100] = '\0'; /* exactly 100: split into pieces, no [UNK] */
    n = encode_ok(t, s, ids, 64, &full);
    ck_assert_int_gt(n, 3);
    for (int i = 1; i < n - 1; i++)
        ck_assert_int_ne(ids[i], tok_unk_id(t));
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_special_tokens_in_text_are_kept)
{
    tok_t *t = load_minilm();
    int32_t ids[16];
    int n = encode_ok(t, "hello[MASK]world [SEP]", ids, 16, NULL);
    ck_assert_int_eq(n, 6);
    ck_assert_int_eq(ids[2], tok_lookup(t, "[MASK]", 6));
    ck_assert_int_eq(ids[4], tok_sep_id(t));
    /* normalized=false in tokenizer.json: only the exact spelling counts */
    n = encode_ok(t, "[mask]", ids, 16, NULL);
    ck_assert_int_eq(n, 5);
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_options_cased_and_no_cjk_split)
{
    tok_options opt = {.lowercase = false, .chinese_chars = false, .max_word_chars = 100};
    tok_t *t = NULL;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_load(VOCAB, &opt, &t, &err), MT_OK);
    int32_t ids[16];
    int n = encode_ok(t, "HELLO", ids, 16, NULL); /* the vocab is lowercase */
    ck_assert_int_ne(ids[1], tok_lookup(t, "hello", 5));
    /* one word: its second ideograph is a "##" continuation */
    n = encode_ok(t, "\xE4\xB8\xAD\xE6\x96\x87", ids, 16, NULL);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(ids[2], tok_lookup(t, "##\xE6\x96\x87", 5));
    tok_free(t);

    t = load_minilm();
    n = encode_ok(t, "\xE4\xB8\xAD\xE6\x96\x87", ids, 16, NULL);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(ids[2], tok_lookup(t, "\xE6\x96\x87", 3));
    n = encode_ok(t, "HELLO", ids, 16, NULL);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[1], tok_lookup(t, "hello", 5));
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_rejects_bad_arguments)
{
    tok_t *t = load_minilm();
    int32_t ids[4];
    int n;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_encode(t, "a", 1, ids, 1, &n, NULL, &err), MT_EINVAL);
    ck_assert_int_eq(tok_encode(t, NULL, 3, ids, 4, &n, NULL, &err), MT_EINVAL);
    ck_assert_int_eq(tok_encode(t, "a", 1, NULL, 4, &n, NULL, &err), MT_EINVAL);
    tok_options opt = {.lowercase = true, .chinese_chars = true, .max_word_chars = 0};
    tok_t *t2 = NULL;
    ck_assert_int_eq(tok_load(VOCAB, &opt, &t2, &err), MT_EINVAL);
    ck_assert_ptr_null(t2);
    tok_free(t);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The vocabulary file                                                      */
/* ---------------------------------------------------------------------- */

START_TEST(tokenizer_lookup_and_token_agree)
{
    tok_t *t = load_minilm();
    ck_assert_int_eq(tok_vocab_size(t), 30522);
    ck_assert_int_eq(tok_pad_id(t), 0);
    ck_assert_int_eq(tok_unk_id(t), 100);
    ck_assert_int_eq(tok_cls_id(t), 101);
    ck_assert_int_eq(tok_sep_id(t), 102);
    int32_t id = tok_lookup(t, "hello", 5);
    ck_assert_int_eq(id, 7592);
    ck_assert_str_eq(tok_token(t, id), "hello");
    ck_assert_int_ge(tok_lookup(t, "##ing", 5), 0);
    ck_assert_int_eq(tok_lookup(t, "no-such-token", 13), -1);
    ck_assert_ptr_null(tok_token(t, -1));
    ck_assert_ptr_null(tok_token(t, 30522));
    for (int32_t i = 0; i < tok_vocab_size(t); i += 97) {
        const char *s = tok_token(t, i);
        ck_assert_int_eq(tok_lookup(t, s, strlen(s)), i);
    }
    tok_free(t);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Decoding                                                                 */
/* ---------------------------------------------------------------------- */

/* Whether decoding should give text back unchanged: lowercase ASCII words
 * and digits, single spaces, and , . ? ! only right after a word and
 * before a space or the end (the WordPiece decoder puts a space between
 * pieces, and takes it away before those four alone). */
static bool decodes_back(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || s[0] == ' ' || s[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool word = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        bool punct = c == ',' || c == '.' || c == '?' || c == '!';
        if (!word && !punct && c != ' ')
            return false;
        if (c == ' ' && s[i + 1] == ' ')
            return false;
        if (punct && (i == 0 || !((s[i - 1] >= 'a' && s[i - 1] <= 'z') ||
                                  (s[i - 1] >= '0' && s[i - 1] <= '9')) ||
                      (s[i + 1] && s[i + 1] != ' ')))
            return false;
    }
    return true;
}

/* Decodes ids into a string the test frees, or fails it. */
static char *decode_ok(const tok_t *t, const int32_t *ids, int n, bool skip)
{
    char *out = NULL;
    mt_err err = {{0}};
    ck_assert_msg(tok_decode(t, ids, n, skip, &out, &err) == MT_OK, "tok_decode: %s", err.msg);
    return out;
}

/* Lowercases text and, when it is text decodes_back takes, checks that
 * decode(encode(text)) gives it back; returns whether it checked. */
static bool round_trip(const tok_t *t, char *text)
{
    int32_t ids[FIXTURE_MAX_LEN];
    for (char *c = text; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
    if (!decodes_back(text))
        return false;
    int full = 0, n = encode_ok(t, text, ids, FIXTURE_MAX_LEN, &full);
    for (int i = 0; i < n; i++)
        if (ids[i] == tok_unk_id(t))
            return false; /* a word it has no pieces for */
    if (full > n)
        return false; /* truncated */
    char *back = decode_ok(t, ids, n, true);
    ck_assert_msg(!strcmp(back, text), "decode(encode(\"%s\")) = \"%s\"", text, back);
    free(back);
    return true;
}

/* decode(encode(text)) == text for the corpus's lines that are (once
 * lowercased) such text, and for a few more. */
START_TEST(tokenizer_decode_round_trips_lowercase_ascii)
{
    static const char *const more[] = {
        "the quick brown fox jumps over the lazy dog.",
        "unbelievableness is a word, is it not?",
        "tokenization splits text into wordpieces!",
        "born in 1976, in philadelphia.",
    };
    tok_t *t = load_minilm();
    int tried = 0;
    for (size_t k = 0; k < sizeof more / sizeof *more; k++) {
        char *text = strdup(more[k]);
        ck_assert(round_trip(t, text));
        free(text);
    }
    size_t len = 0;
    char *corpus = read_all(CORPUS, &len);
    ck_assert_ptr_nonnull(corpus);
    for (char *line = corpus, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        if ((nl = strchr(line, '\n')))
            *nl = 0;
        char *text = NULL;
        size_t tl = 0;
        if (!json_string(line, strlen(line), &text, &tl))
            continue;
        text[tl] = 0;
        tried += round_trip(t, text);
        free(text);
    }
    ck_assert_int_ge(tried, 20);
    free(corpus);
    tok_free(t);
}
END_TEST

/* Special tokens kept or skipped; a leading "##" piece kept as it is, as
 * Hugging Face's decoder does; the cleanup; ids out of range named. */
START_TEST(tokenizer_decode_specials_pieces_and_errors)
{
    tok_t *t = load_minilm();
    int32_t ids[16];
    int n = encode_ok(t, "Hello, unbelievableness!", ids, 16, NULL);
    char *s = decode_ok(t, ids, n, false);
    ck_assert_str_eq(s, "[CLS] hello, unbelievableness! [SEP]");
    free(s);
    s = decode_ok(t, ids, n, true);
    ck_assert_str_eq(s, "hello, unbelievableness!");
    free(s);
    const int32_t lead[] = {tok_lookup(t, "##ness", 6), tok_lookup(t, "hello", 5),
                            tok_lookup(t, "[MASK]", 6), tok_pad_id(t), tok_unk_id(t)};
    s = decode_ok(t, lead, 5, false);
    ck_assert_str_eq(s, "##ness hello [MASK] [PAD] [UNK]");
    free(s);
    s = decode_ok(t, lead, 5, true);
    ck_assert_str_eq(s, "##ness hello");
    free(s);
    s = decode_ok(t, lead, 0, true);
    ck_assert_str_eq(s, "");
    free(s);
    const int32_t bad[] = {tok_cls_id(t), 30522};
    char *out = (char *)1;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_decode(t, bad, 2, true, &out, &err), MT_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.msg, "ids[1] = 30522") != NULL, "%s", err.msg);
    const int32_t neg[] = {-1};
    ck_assert_int_eq(tok_decode(t, neg, 1, false, &out, &err), MT_EINVAL);
    tok_free(t);
}
END_TEST

/* MPNet's specials are tokenizer.json's added tokens marked special:
 * <s>, </s>, <pad>, <unk>, [UNK], <mask>. */
START_TEST(tokenizer_decode_mpnet_skips_its_specials)
{
    tok_t *t = load_dir("models/all-mpnet-base-v2", "<s>", "</s>", "<pad>", "[UNK]");
    int32_t ids[16];
    int n = encode_ok(t, "A man is playing a guitar.", ids, 16, NULL);
    char *s = decode_ok(t, ids, n, false);
    ck_assert_str_eq(s, "<s> a man is playing a guitar. </s>");
    free(s);
    s = decode_ok(t, ids, n, true);
    ck_assert_str_eq(s, "a man is playing a guitar.");
    free(s);
    for (int32_t id = 0; id < 8; id++)
        ck_assert_int_eq(tok_is_special(t, id), id <= 3);
    ck_assert(tok_is_special(t, 104) && tok_is_special(t, 30526));
    tok_free(t);
}
END_TEST

START_TEST(tokenizer_load_missing_file_names_path)
{
    tok_t *t = (tok_t *)0x1;
    mt_err err = {{0}};
    const char *path = "models/no-such-model/vocab.txt";
    ck_assert_int_eq(tok_load(path, NULL, &t, &err), MT_EIO);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message \"%s\" lacks the path", err.msg);
}
END_TEST

/* Writes text to a fresh temporary file; returns its path (static buffer). */
static const char *temp_vocab(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/mt-test-vocab-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

START_TEST(tokenizer_load_vocab_without_specials_fails)
{
    const char *path = temp_vocab("[PAD]\n[UNK]\n[SEP]\nhello\nworld\n");
    tok_t *t = (tok_t *)0x1;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_load(path, NULL, &t, &err), MT_EFORMAT);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "[CLS]"),
                  "message \"%s\" lacks the path or the token", err.msg);
    unlink(path);

    path = temp_vocab("");
    ck_assert_int_eq(tok_load(path, NULL, &t, &err), MT_EFORMAT);
    unlink(path);
}
END_TEST

/* An added token whose id is another vocabulary entry is refused, naming both files. */
START_TEST(tokenizer_added_token_id_mismatch_refused)
{
    char vocab[64], json[64];
    snprintf(vocab, sizeof vocab, "%s", temp_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n"));
    snprintf(json, sizeof json, "%s", temp_vocab("{\"added_tokens\":[{\"id\":4,\"content\":\"<s>\"}]}"));
    tok_options opt = {.lowercase = true, .max_word_chars = 100, .added_tokens_json = json};
    tok_t *t = NULL;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_load(vocab, &opt, &t, &err), MT_EFORMAT);
    ck_assert_msg(strstr(err.msg, json) && strstr(err.msg, vocab) && strstr(err.msg, "\"hello\""),
                  "%s", err.msg);
    unlink(vocab);
    unlink(json);
}
END_TEST

START_TEST(tokenizer_load_small_vocab_without_final_newline)
{
    /* CRLF lines and no newline at the end; [MASK] absent is fine. */
    const char *path = temp_vocab("[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello\r\n##s\r\nworld");
    tok_t *t = NULL;
    mt_err err = {{0}};
    ck_assert_int_eq(tok_load(path, NULL, &t, &err), MT_OK);
    unlink(path);
    ck_assert_int_eq(tok_vocab_size(t), 7);
    ck_assert_int_eq(tok_lookup(t, "world", 5), 6);
    int32_t ids[16];
    int n = encode_ok(t, "Hellos WORLD [MASK]", ids, 16, NULL);
    int32_t want[] = {2, 4, 5, 6, 1, 1, 1, 3}; /* [ mask ] are unknown */
    ck_assert_int_eq(n, 8);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(ids[i], want[i]);
    tok_free(t);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Big inputs and threads                                                   */
/* ---------------------------------------------------------------------- */

/* A megabyte of mixed text: words, accents, CJK, emoji, controls, marks. */
static char *make_mixed_mb(size_t *len)
{
    static const char *parts[] = {
        "the ", "quick ", "Caf\xC3\xA9 ", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80", "!!! ",
        "unaffordable ", "e\xCC\x81\xCC\xA3", "\x00", "\xE2\x80\x8B", "\t\n", "[SEP]",
        "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 ", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "42 ",
    };
    size_t cap = 1 << 20;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    size_t n = 0;
    unsigned k = 1;
    for (;;) {
        k = k * 1103515245u + 12345u;
        const char *p = parts[(k >> 16) % (sizeof parts / sizeof parts[0])];
        size_t l = p[0] ? strlen(p) : 1;
        if (n + l > cap)
            break;
        memcpy(s + n, p, l);
        n += l;
    }
    *len = n;
    return s;
}

/* Encodes len bytes and returns the untruncated length. */
static int encode_big(const tok_t *t, const char *s, size_t len)
{
    int32_t ids[512];
    int n = 0, full = 0;
    mt_err err = {{0}};
    mt_status st = tok_encode(t, s, len, ids, 512, &n, &full, &err);
    ck_assert_msg(st == MT_OK, "%s", err.msg);
    ck_assert_int_le(n, 512);
    ck_assert_int_eq(ids[0], tok_cls_id(t));
    ck_assert_int_eq(ids[n - 1], tok_sep_id(t));
    return full;
}

START_TEST(tokenizer_1mb_input_does_not_crash)
{
    tok_t *t = load_minilm();
    size_t mb = 1 << 20, len;
    char *s = make_mixed_mb(&len);
    ck_assert_int_gt(encode_big(t, s, len), 100000);
    free(s);

    s = malloc(mb);
    ck_assert_ptr_nonnull(s);
    memset(s, 'a', mb); /* one word of a million characters: one [UNK] */
    ck_assert_int_eq(encode_big(t, s, mb), 3);
    memset(s, '!', mb); /* a million one-character words */
    ck_assert_int_eq(encode_big(t, s, mb), (int)mb + 2);
    memset(s, ' ', mb);
    ck_assert_int_eq(encode_big(t, s, mb), 2);

    /* Marks that survive accent stripping (U+1D16D ccc 226, then U+1D165
     * ccc 216) in one long run, in the worst order for canonical sorting. */
    size_t half = mb / 8;
    for (size_t i = 0; i < half; i++)
        memcpy(s + 4 * i, "\xF0\x9D\x85\xAD", 4);
    for (size_t i = half; i < 2 * half; i++)
        memcpy(s + 4 * i, "\xF0\x9D\x85\xA5", 4);
    ck_assert_int_eq(encode_big(t, s, mb), 3);

    /* A million U+00E9: each decomposes, the mark goes. */
    for (size_t i = 0; i + 1 < mb; i += 2)
        memcpy(s + i, "\xC3\xA9", 2);
    ck_assert_int_eq(encode_big(t, s, mb), 3);
    free(s);
    tok_free(t);
}
END_TEST

typedef struct {
    const tok_t *t;
    const char *text;
    size_t len;
    int32_t ids[256];
    int n, full;
    mt_status s;
} thread_job;

static void *encode_thread(void *arg)
{
    thread_job *j = arg;
    for (int r = 0; r < 5 && j->s == MT_OK; r++)
        j->s = tok_encode(j->t, j->text, j->len, j->ids, 256, &j->n, &j->full, NULL);
    return NULL;
}

START_TEST(tokenizer_shared_between_threads_gives_same_ids)
{
    tok_t *t = load_minilm();
    size_t len;
    char *s = make_mixed_mb(&len);
    len /= 8;
    int32_t want[256];
    int want_n, want_full;
    mt_err err;
    ck_assert_int_eq(tok_encode(t, s, len, want, 256, &want_n, &want_full, &err), MT_OK);

    enum { NT = 4 };
    thread_job jobs[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        jobs[i] = (thread_job){.t = t, .text = s, .len = len, .s = MT_OK};
        ck_assert_int_eq(pthread_create(&th[i], NULL, encode_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(jobs[i].s, MT_OK);
        ck_assert_int_eq(jobs[i].n, want_n);
        ck_assert_int_eq(jobs[i].full, want_full);
        ck_assert_mem_eq(jobs[i].ids, want, (size_t)want_n * sizeof *want);
    }
    free(s);
    tok_free(t);
}
END_TEST

/* ---------------------------------------------------------------------- */

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, tokenizer_matches_hf_on_corpus);
    tcase_add_test(tc, tokenizer_added_tokens_match_hf);
    tcase_add_test(tc, tokenizer_added_token_id_mismatch_refused);
    tcase_add_test(tc, tokenizer_offsets_truncate_and_specials);
    tcase_add_test(tc, tokenizer_rejects_overlong_utf8);
    tcase_add_test(tc, tokenizer_rejects_surrogate_utf8);
    tcase_add_test(tc, tokenizer_rejects_truncated_utf8);
    tcase_add_test(tc, tokenizer_rejects_utf8_above_max_code_point);
    tcase_add_test(tc, tokenizer_rejects_stray_continuation_byte);
    tcase_add_test(tc, tokenizer_accepts_utf8_edges);
    tcase_add_test(tc, tokenizer_truncates_to_max_len);
    tcase_add_test(tc, tokenizer_empty_string_is_cls_sep);
    tcase_add_test(tc, tokenizer_word_over_100_chars_is_unk);
    tcase_add_test(tc, tokenizer_special_tokens_in_text_are_kept);
    tcase_add_test(tc, tokenizer_options_cased_and_no_cjk_split);
    tcase_add_test(tc, tokenizer_rejects_bad_arguments);
    tcase_add_test(tc, tokenizer_lookup_and_token_agree);
    tcase_add_test(tc, tokenizer_decode_round_trips_lowercase_ascii);
    tcase_add_test(tc, tokenizer_decode_specials_pieces_and_errors);
    tcase_add_test(tc, tokenizer_decode_mpnet_skips_its_specials);
    tcase_add_test(tc, tokenizer_load_missing_file_names_path);
    tcase_add_test(tc, tokenizer_load_vocab_without_specials_fails);
    tcase_add_test(tc, tokenizer_load_small_vocab_without_final_newline);
    tcase_add_test(tc, tokenizer_1mb_input_does_not_crash);
    tcase_add_test(tc, tokenizer_shared_between_threads_gives_same_ids);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *test_suite(void)
{
    return tokenizer_suite();
}

#include "tests/unit/check_main.h"
