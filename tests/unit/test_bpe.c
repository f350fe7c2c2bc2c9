/* test_bpe.c: check suite for the byte-level BPE tokenizer
 * (engine/text/bpe*.c) on a Qwen2-shaped tokenizer that
 * tools/make-bpe-tokenizer.py trains with Hugging Face `tokenizers` at suite
 * start (in a mkdtemp folder, removed after; nothing is committed):
 *   - every text of the tool's test corpus (English, CJK, emoji with ZWJ and
 *     skin tones, code, digit runs, whitespace runs, \r\n, contractions in
 *     any case, Arabic/Hindi/Thai, NFD accents, special tokens written in
 *     the text, long texts) gives the ids `tokenizers` gives, EOS included,
 *     with merges stored as [a, b] pairs and as "a b" strings;
 *   - every text's offsets (bpe_encode_offsets) equal tokenizers' offsets
 *     in UTF-8 bytes, printing text and token index on a mismatch: the
 *     file as made, with ignore_merges (tokenizer-im.json), and with a
 *     ByteLevel post-processor's trim_offsets (tokenizer-trim.json);
 *   - truncation keeps the first tokens and the EOS, as HF's does, and
 *     their offsets;
 *   - decode gives HF's decode (skip_special), which is NFC(text) for all but
 *     texts with special tokens in them;
 *   - a ByteLevel post-processor appends nothing; ignore_merges true takes
 *     a piece in the vocabulary whole (the tool's tokenizer-im.json, whose
 *     vocabulary has pieces the merges split);
 *   - refusals (pre-tokenizer, regex, normalizer, byte_fallback, a
 *     malformed merge, an added token's lstrip) name the file and field;
 *     invalid UTF-8 is MT_EUTF8. */
#include <cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/text/bpe.h"
#include "tests/unit/tu_files.h"

#define MAX_IDS 20000

static char work[64];
static char tok_path[128], ref_path[128];

static void make_folder(void)
{
    tu_mkwork(work, sizeof work, "mt-bpe");
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", work);
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", work);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s tools/make-bpe-tokenizer.py %s --seed 20261129", tu_python(), work);
    ck_assert_msg(system(cmd) == 0, "tools/make-bpe-tokenizer.py failed: %s", cmd);
}

static void remove_folder(void) { tu_rmwork(work); }

static bpe_t *load(const char *path)
{
    bpe_t *t = NULL;
    mt_err err = {{0}};
    ck_assert_msg(bpe_load(path, &t, &err) == MT_OK, "%s", err.msg);
    return t;
}

/* Whether the JSON array want holds the n ids got. */
static bool same_ids(const cJSON *want, const int32_t *got, int n)
{
    if (cJSON_GetArraySize(want) != n)
        return false;
    int k = 0;
    for (const cJSON *e = want->child; e; e = e->next, k++)
        if ((int32_t)e->valuedouble != got[k])
            return false;
    return true;
}

static void print_diff(const char *text, const cJSON *want, const int32_t *got, int n)
{
    fprintf(stderr, "differs: \"%.80s\"\n  want:", text);
    int k = 0;
    for (const cJSON *e = want->child; e && k < 30; e = e->next, k++)
        fprintf(stderr, " %d", (int)e->valuedouble);
    fprintf(stderr, "\n  got: ");
    for (k = 0; k < n && k < 30; k++)
        fprintf(stderr, " %d", got[k]);
    fprintf(stderr, "\n");
}

/* Encodes every reference text with t; returns how many differ from the
 * ids under key ("ids", or "ids_im" with ignore_merges). */
static int count_differing(const bpe_t *t, const cJSON *refs, const char *key, int *total)
{
    static int32_t ids[MAX_IDS];
    int bad = 0;
    *total = 0;
    for (const cJSON *e = refs->child; e; e = e->next, (*total)++) {
        const char *text = cJSON_GetObjectItem(e, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(e, key);
        int n = 0, full = 0;
        mt_err err;
        ck_assert_msg(bpe_encode(t, text, strlen(text), ids, MAX_IDS, &n, &full, &err) == MT_OK,
                      "%s", err.msg);
        ck_assert_int_eq(n, full);
        if (!same_ids(want, ids, n)) {
            if (bad < 5)
                print_diff(text, want, ids, n);
            bad++;
        }
    }
    return bad;
}

/* Whether text's offsets off[0..2n) equal want's; prints the first
 * token that differs. */
static bool same_offsets(const char *text, const cJSON *want, const int32_t *ids,
                         const int32_t *off, int n)
{
    int k = 0;
    const cJSON *e = want->child;
    for (; e && k < 2 * n; e = e->next, k++)
        if ((int32_t)e->valuedouble != off[k])
            break;
    if (!e && k == 2 * n)
        return true;
    int tok = k / 2;
    const cJSON *w0 = cJSON_GetArrayItem(want, 2 * tok), *w1 = cJSON_GetArrayItem(want, 2 * tok + 1);
    fprintf(stderr, "offsets differ: \"%.80s\" token %d (id %d): got [%d, %d), want [%d, %d) "
            "of %d tokens\n", text, tok, tok < n ? ids[tok] : -1, tok < n ? off[2 * tok] : -1,
            tok < n ? off[2 * tok + 1] : -1, w0 ? (int)w0->valuedouble : -1,
            w1 ? (int)w1->valuedouble : -1, cJSON_GetArraySize(want) / 2);
    return false;
}

/* Encodes every reference text with the tool's file with offsets;
 * returns how many texts' offsets differ from those under key. */
static int count_offsets_differing(const char *file, const char *key, int *total, long *toks)
{
    static int32_t ids[MAX_IDS], off[2 * MAX_IDS];
    char path[160];
    snprintf(path, sizeof path, "%s/%s", work, file);
    bpe_t *t = load(path);
    cJSON *refs = tu_load_json(ref_path);
    int bad = 0;
    *total = 0;
    *toks = 0;
    for (const cJSON *e = refs->child; e; e = e->next, (*total)++) {
        const char *text = cJSON_GetObjectItem(e, "text")->valuestring;
        int n = 0, full = 0;
        mt_err err;
        ck_assert_msg(bpe_encode_offsets(t, text, strlen(text), ids, off, MAX_IDS, &n, &full,
                                         &err) == MT_OK, "%s", err.msg);
        *toks += n;
        if (!same_offsets(bad < 8 ? text : "", cJSON_GetObjectItem(e, key), ids, off, n))
            bad++;
    }
    printf("bpe %s offsets: %d reference texts, %ld tokens, %d differ\n", file, *total, *toks,
           bad);
    cJSON_Delete(refs);
    bpe_free(t);
    return bad;
}

START_TEST(bpe_offsets_equal_tokenizers_on_every_reference_text)
{
    static const char *const files[][2] = {{"tokenizer.json", "offsets"},
                                           {"tokenizer-im.json", "offsets_im"},
                                           {"tokenizer-trim.json", "offsets_trim"}};
    int bad = 0;
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        int total = 0;
        long toks = 0;
        bad += count_offsets_differing(files[k][0], files[k][1], &total, &toks);
        ck_assert_int_gt(total, 300);
    }
    ck_assert_msg(bad == 0, "%d texts' offsets differ from tokenizers", bad);
}
END_TEST

START_TEST(bpe_ids_equal_tokenizers_on_every_reference_text)
{
    bpe_t *t = load(tok_path);
    cJSON *refs = tu_load_json(ref_path);
    int total = 0, bad = count_differing(t, refs, "ids", &total);
    printf("bpe: %d reference texts, %d differ\n", total, bad);
    ck_assert_int_gt(total, 300);
    ck_assert_msg(bad == 0, "%d of %d texts differ from tokenizers", bad, total);
    ck_assert_int_eq(bpe_eos_id(t), bpe_special_id(t, "<|endoftext|>"));
    ck_assert_int_eq(bpe_eos_id(t), 0);
    ck_assert_str_eq(bpe_token(t, 0), "<|endoftext|>");
    ck_assert_int_eq(bpe_special_id(t, "<tool_call>"), bpe_vocab_size(t) - 1);
    ck_assert(!bpe_is_special(t, bpe_special_id(t, "<tool_call>")));
    ck_assert_ptr_null(bpe_token(t, bpe_vocab_size(t)));
    cJSON_Delete(refs);
    bpe_free(t);
}
END_TEST

START_TEST(bpe_merges_as_strings_give_the_same_ids)
{
    cJSON *j = tu_load_json(tok_path);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "merges");
    cJSON *strs = cJSON_CreateArray();
    for (const cJSON *e = merges->child; e; e = e->next) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s %s", e->child->valuestring, e->child->next->valuestring);
        cJSON_AddItemToArray(strs, cJSON_CreateString(buf));
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "model"), "merges", strs);
    char path[160];
    snprintf(path, sizeof path, "%s/strings.json", work);
    tu_save_json(path, j, false);
    cJSON_Delete(j);
    bpe_t *t = load(path);
    cJSON *refs = tu_load_json(ref_path);
    int total = 0;
    ck_assert_int_eq(count_differing(t, refs, "ids", &total), 0);
    cJSON_Delete(refs);
    bpe_free(t);
}
END_TEST

START_TEST(bpe_truncation_keeps_the_eos_as_tokenizers_does)
{
    bpe_t *t = load(tok_path);
    cJSON *refs = tu_load_json(ref_path);
    static int32_t ids[MAX_IDS], off[2 * MAX_IDS];
    int checked = 0;
    for (const cJSON *e = refs->child; e; e = e->next) {
        const char *text = cJSON_GetObjectItem(e, "text")->valuestring;
        const cJSON *tr = cJSON_GetObjectItem(e, "trunc");
        const cJSON *to = tr ? cJSON_GetObjectItem(e, "trunc_offsets")->child : NULL;
        for (const cJSON *m = tr ? tr->child : NULL; m; m = m->next, to = to->next, checked++) {
            int n = 0, full = 0;
            mt_err err;
            ck_assert_int_eq(bpe_encode(t, text, strlen(text), ids, atoi(m->string), &n, &full,
                                        &err), MT_OK);
            ck_assert_int_eq(full, cJSON_GetArraySize(cJSON_GetObjectItem(e, "ids")));
            if (!same_ids(m, ids, n))
                print_diff(text, m, ids, n);
            ck_assert_msg(same_ids(m, ids, n), "max_len %s of \"%.40s\"", m->string, text);
            ck_assert_int_eq(bpe_encode_offsets(t, text, strlen(text), ids, off, atoi(m->string),
                                                &n, NULL, &err), MT_OK);
            ck_assert_msg(same_ids(m, ids, n) && same_offsets(text, to, ids, off, n),
                          "offsets at max_len %s of \"%.40s\"", m->string, text);
        }
    }
    ck_assert_int_gt(checked, 100);
    int n;
    mt_err err;
    ck_assert_int_eq(bpe_encode(t, "abc", 3, ids, 0, &n, NULL, &err), MT_EINVAL);
    cJSON_Delete(refs);
    bpe_free(t);
}
END_TEST

START_TEST(bpe_decode_gives_tokenizers_decode)
{
    bpe_t *t = load(tok_path);
    cJSON *refs = tu_load_json(ref_path);
    static int32_t ids[MAX_IDS];
    int total = 0, nfc = 0;
    for (const cJSON *e = refs->child; e; e = e->next, total++) {
        const cJSON *want = cJSON_GetObjectItem(e, "ids");
        int n = 0;
        for (const cJSON *i = want->child; i; i = i->next)
            ids[n++] = (int32_t)i->valuedouble;
        char *got = NULL;
        mt_err err;
        ck_assert_msg(bpe_decode(t, ids, n, true, &got, &err) == MT_OK, "%s", err.msg);
        ck_assert_str_eq(got, cJSON_GetObjectItem(e, "decoded")->valuestring);
        nfc += strcmp(got, cJSON_GetObjectItem(e, "nfc")->valuestring) == 0;
        free(got);
    }
    printf("bpe: decode equals tokenizers' on %d texts, NFC(text) on %d\n", total, nfc);
    ck_assert_int_ge(nfc, total - 5); /* those with special tokens written in them */
    int32_t bad[2] = {5, bpe_vocab_size(t)};
    char *got = NULL;
    mt_err err;
    ck_assert_int_eq(bpe_decode(t, bad, 2, true, &got, &err), MT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "ids[1]"));
    cJSON_Delete(refs);
    bpe_free(t);
}
END_TEST

/* Loads tokenizer.json after edit(); returns the load's status, err filled. */
static mt_status load_edited(void (*edit)(cJSON *), char *path, size_t cap, mt_err *err)
{
    cJSON *j = tu_load_json(tok_path);
    edit(j);
    snprintf(path, cap, "%s/edited.json", work);
    tu_save_json(path, j, false);
    cJSON_Delete(j);
    bpe_t *t = NULL;
    mt_status s = bpe_load(path, &t, err);
    bpe_free(t);
    return s;
}

static cJSON *model_of(cJSON *j) { return cJSON_GetObjectItem(j, "model"); }

static void set_type(cJSON *o, const char *type)
{
    cJSON_ReplaceItemInObject(o, "type", cJSON_CreateString(type));
}

static void edit_pretok(cJSON *j) { set_type(cJSON_GetObjectItem(j, "pre_tokenizer"), "Whitespace"); }
static void edit_regex(cJSON *j)
{
    cJSON *sp = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pre_tokenizer"), "pretokenizers"), 0);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(sp, "pattern"), "Regex",
                              cJSON_CreateString("\\w+|\\s+"));
}
static void edit_normalizer(cJSON *j) { set_type(cJSON_GetObjectItem(j, "normalizer"), "NFKC"); }
static void edit_fallback(cJSON *j)
{
    cJSON_ReplaceItemInObject(model_of(j), "byte_fallback", cJSON_CreateTrue());
}
static void edit_merge(cJSON *j)
{
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(j), "merges"), 5,
                             cJSON_CreateString("nospace"));
}
static void edit_merge_oov(cJSON *j)
{
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(j), "merges"), 7,
                             cJSON_CreateString("q \xe4\xb8\x80\xe4\xb8\x80"));
}
static void edit_lstrip(cJSON *j)
{
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "added_tokens"), 1),
                              "lstrip", cJSON_CreateTrue());
}
static void edit_model(cJSON *j) { set_type(model_of(j), "Unigram"); }
static void edit_post(cJSON *j) { set_type(cJSON_GetObjectItem(j, "post_processor"), "BertProcessing"); }

START_TEST(bpe_refusals_name_the_file_and_field)
{
    static const struct {
        void (*edit)(cJSON *);
        mt_status s;
        const char *field;
    } cases[] = {
        {edit_pretok, MT_EUNSUPPORTED, "pre_tokenizer.type \"Whitespace\""},
        {edit_regex, MT_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern"},
        {edit_normalizer, MT_EUNSUPPORTED, "normalizer.type \"NFKC\""},
        {edit_fallback, MT_EUNSUPPORTED, "model.byte_fallback"},
        {edit_merge, MT_EFORMAT, "model.merges[5]"},
        {edit_merge_oov, MT_EFORMAT, "model.merges[7]"},
        {edit_lstrip, MT_EUNSUPPORTED, "added_tokens[1].lstrip"},
        {edit_model, MT_EUNSUPPORTED, "model.type \"Unigram\""},
        {edit_post, MT_EUNSUPPORTED, "post_processor.type \"BertProcessing\""},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[160];
        mt_err err = {{0}};
        mt_status s = load_edited(cases[k].edit, path, sizeof path, &err);
        ck_assert_msg(s == cases[k].s, "case %zu: status %d: %s", k, s, err.msg);
        ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, cases[k].field),
                      "case %zu: \"%s\" should name %s and %s", k, err.msg, path, cases[k].field);
    }
}
END_TEST

static void edit_bytelevel_post(cJSON *j)
{
    cJSON *pp = cJSON_CreateObject();
    cJSON_AddStringToObject(pp, "type", "ByteLevel");
    cJSON_ReplaceItemInObject(j, "post_processor", pp);
}

START_TEST(bpe_bytelevel_post_processor_appends_nothing)
{
    char path[160];
    mt_err err;
    ck_assert_int_eq(load_edited(edit_bytelevel_post, path, sizeof path, &err), MT_OK);
    bpe_t *t = load(path), *q = load(tok_path);
    int32_t a[64], b[64];
    int na, nb;
    const char *text = "Hello world, it's 2024!";
    ck_assert_int_eq(bpe_encode(t, text, strlen(text), a, 64, &na, NULL, &err), MT_OK);
    ck_assert_int_eq(bpe_encode(q, text, strlen(text), b, 64, &nb, NULL, &err), MT_OK);
    ck_assert_int_eq(na + 1, nb);
    ck_assert_mem_eq(a, b, (size_t)na * sizeof *a);
    ck_assert_int_eq(bpe_eos_id(t), -1);
    ck_assert_int_eq(bpe_encode(t, "", 0, a, 1, &na, NULL, &err), MT_OK);
    ck_assert_int_eq(na, 0);
    bpe_free(t);
    bpe_free(q);
}
END_TEST

START_TEST(bpe_invalid_utf8_names_the_byte)
{
    bpe_t *t = load(tok_path);
    int32_t ids[64];
    int n;
    mt_err err;
    ck_assert_int_eq(bpe_encode(t, "ab\xC3(", 4, ids, 64, &n, NULL, &err), MT_EUTF8);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte 2"));
    ck_assert_int_eq(bpe_encode(t, "\xED\xA0\x80", 3, ids, 64, &n, NULL, &err), MT_EUTF8);
    bpe_free(t);
}
END_TEST

START_TEST(bpe_ignore_merges_takes_whole_words_from_the_vocabulary)
{
    char path[160];
    snprintf(path, sizeof path, "%s/tokenizer-im.json", work);
    bpe_t *t = load(path);
    cJSON *refs = tu_load_json(ref_path);
    int total = 0, changed = 0;
    ck_assert_int_eq(count_differing(t, refs, "ids_im", &total), 0);
    for (const cJSON *e = refs->child; e; e = e->next)
        changed += !cJSON_Compare(cJSON_GetObjectItem(e, "ids"), cJSON_GetObjectItem(e, "ids_im"),
                                  true);
    printf("bpe: ignore_merges changes the ids of %d texts, all as tokenizers\n", changed);
    ck_assert_int_gt(changed, 50);
    cJSON_Delete(refs);
    bpe_free(t);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("bpe");
    TCase *tc = tcase_create("bpe");
    tcase_add_unchecked_fixture(tc, make_folder, remove_folder);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, bpe_ids_equal_tokenizers_on_every_reference_text);
    tcase_add_test(tc, bpe_offsets_equal_tokenizers_on_every_reference_text);
    tcase_add_test(tc, bpe_merges_as_strings_give_the_same_ids);
    tcase_add_test(tc, bpe_truncation_keeps_the_eos_as_tokenizers_does);
    tcase_add_test(tc, bpe_decode_gives_tokenizers_decode);
    tcase_add_test(tc, bpe_refusals_name_the_file_and_field);
    tcase_add_test(tc, bpe_bytelevel_post_processor_appends_nothing);
    tcase_add_test(tc, bpe_invalid_utf8_names_the_byte);
    tcase_add_test(tc, bpe_ignore_merges_takes_whole_words_from_the_vocabulary);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
