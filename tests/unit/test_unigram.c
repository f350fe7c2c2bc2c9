/* test_unigram.c: check suite for the SentencePiece Unigram tokenizer
 * (engine/text/unigram*.c, grapheme*.c) on XLM-R-shaped tokenizers that
 * tools/make-unigram-tokenizer.py trains with sentencepiece and writes
 * with Hugging Face `tokenizers` at suite start (in a mkdtemp folder,
 * removed after; nothing is committed):
 *   - every text of the tool's test corpus (15 scripts, NFD accents,
 *     full-width forms, emoji with ZWJ and skin tones, flags, numbers,
 *     whitespace runs, controls, special tokens written in the text,
 *     random code point soups, long texts) gives the ids `tokenizers`
 *     gives, specials included, in four variants: XLM-R's (Precompiled +
 *     Replace, Metaspace, RobertaProcessing, <mask> lstrip), byte
 *     fallback with TemplateProcessing, WhitespaceSplit + Metaspace
 *     "first" with a normalized added token, Metaspace "never" without
 *     split with a Replace before Precompiled and an rstrip token;
 *   - every text's offsets (unigram_encode_offsets) equal tokenizers'
 *     offsets in UTF-8 bytes in the four variants (the normalizer's
 *     alignments, Metaspace's ▁, byte fallback, RobertaProcessing's
 *     trim_offsets), printing text and token index on a mismatch;
 *   - truncation at several lengths keeps the first tokens and <s> </s>,
 *     their offsets too;
 *   - pairs through enc_tok_encode_pair (<s> a </s></s> b </s>, cut
 *     longest first) equal HF's for the plain and byte-fallback files;
 *   - decode gives HF's decode (skip_special) in every variant;
 *   - refusals (normalizer, a malformed charsmap, Metaspace's fields, a
 *     missing model.vocab, unk_id, decoder, post-processor, single_word)
 *     name the file and field; invalid UTF-8 is MT_EUTF8. */
#include <cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/text/grapheme.h"
#include "engine/text/unigram.h"
#include "models/enc_tokenizer.h"
#include "tests/unit/tu_files.h"

#define MAX_IDS 40000

static char work[64];
static char tok_path[128], ref_path[128];
static cJSON *ref;

static void make_folder(void)
{
    tu_mkwork(work, sizeof work, "mt-unigram");
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", work);
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", work);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s tools/make-unigram-tokenizer.py %s --seed 20261129", tu_python(),
             work);
    ck_assert_msg(system(cmd) == 0, "tools/make-unigram-tokenizer.py failed: %s", cmd);
    ref = tu_load_json(ref_path);
}

static void remove_folder(void)
{
    cJSON_Delete(ref);
    tu_rmwork(work);
}

static unigram_t *load(const char *path)
{
    unigram_t *t = NULL;
    mt_err err = {{0}};
    ck_assert_msg(unigram_load(path, &t, &err) == MT_OK, "%s", err.msg);
    return t;
}

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

static void print_diff(const char *what, const char *text, const cJSON *want, const int32_t *got,
                       int n)
{
    fprintf(stderr, "%s differs: \"%.80s\"\n  want:", what, text);
    int k = 0;
    for (const cJSON *e = want->child; e && k < 40; e = e->next, k++)
        fprintf(stderr, " %d", (int)e->valuedouble);
    fprintf(stderr, "\n  got: ");
    for (k = 0; k < n && k < 40; k++)
        fprintf(stderr, " %d", got[k]);
    fprintf(stderr, "\n");
}

static const cJSON *variant(const char *name)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "variants"), name);
}

static unigram_t *load_variant(const char *name)
{
    char path[192];
    snprintf(path, sizeof path, "%s/%s", work,
             cJSON_GetObjectItem(variant(name), "file")->valuestring);
    return load(path);
}

/* Encodes every text with the variant's file; returns how many differ. */
static int count_differing(const char *name, int *total)
{
    static int32_t ids[MAX_IDS];
    unigram_t *t = load_variant(name);
    const cJSON *want = cJSON_GetObjectItem(variant(name), "ids")->child;
    int bad = 0;
    *total = 0;
    for (const cJSON *e = cJSON_GetObjectItem(ref, "texts")->child; e;
         e = e->next, want = want->next, (*total)++) {
        int n = 0, full = 0;
        mt_err err;
        ck_assert_msg(unigram_encode(t, e->valuestring, strlen(e->valuestring), ids, MAX_IDS, &n,
                                     &full, &err) == MT_OK, "%s", err.msg);
        ck_assert_int_eq(n, full);
        if (!same_ids(want, ids, n)) {
            if (bad < 4)
                print_diff(name, e->valuestring, want, ids, n);
            bad++;
        }
    }
    unigram_free(t);
    return bad;
}

START_TEST(unigram_ids_equal_tokenizers_in_every_variant)
{
    static const char *const names[] = {"xlmr", "bf", "ws", "ns"};
    int bad_all = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int total = 0, bad = count_differing(names[k], &total);
        printf("unigram %s: %d reference texts, %d differ\n", names[k], total, bad);
        ck_assert_int_gt(total, 1000);
        bad_all += bad;
    }
    ck_assert_msg(bad_all == 0, "%d texts differ from tokenizers", bad_all);
}
END_TEST

/* The first offset of text k that differs from want (its token index),
 * or -1; prints it. */
static int offsets_differ(const char *name, const char *text, const cJSON *want,
                          const int32_t *ids, const int32_t *off, int n)
{
    int k = 0;
    const cJSON *e = want->child;
    for (; e && k < 2 * n; e = e->next, k++)
        if ((int32_t)e->valuedouble != off[k])
            break;
    if (!e && k == 2 * n && cJSON_GetArraySize(want) == 2 * n)
        return -1;
    int tok = k / 2;
    fprintf(stderr, "%s offsets differ: \"%.80s\" token %d (id %d): got [%d, %d)", name, text,
            tok, tok < n ? ids[tok] : -1, tok < n ? off[2 * tok] : -1,
            tok < n ? off[2 * tok + 1] : -1);
    const cJSON *w0 = cJSON_GetArrayItem(want, 2 * tok), *w1 = cJSON_GetArrayItem(want, 2 * tok + 1);
    fprintf(stderr, ", want [%d, %d) of %d tokens\n", w0 ? (int)w0->valuedouble : -1,
            w1 ? (int)w1->valuedouble : -1, cJSON_GetArraySize(want) / 2);
    return tok;
}

START_TEST(unigram_offsets_equal_tokenizers_in_every_variant)
{
    static int32_t ids[MAX_IDS], off[2 * MAX_IDS];
    static const char *const names[] = {"xlmr", "bf", "ws", "ns"};
    int bad_all = 0;
    for (size_t v = 0; v < sizeof names / sizeof names[0]; v++) {
        unigram_t *t = load_variant(names[v]);
        const cJSON *want = cJSON_GetObjectItem(variant(names[v]), "offsets")->child;
        int bad = 0, texts = 0;
        long toks = 0;
        for (const cJSON *e = cJSON_GetObjectItem(ref, "texts")->child; e;
             e = e->next, want = want->next, texts++) {
            int n = 0, full = 0;
            mt_err err;
            ck_assert_msg(unigram_encode_offsets(t, e->valuestring, strlen(e->valuestring), ids,
                                                 off, MAX_IDS, &n, &full, &err) == MT_OK,
                          "%s", err.msg);
            toks += n;
            if (bad < 6 ? offsets_differ(names[v], e->valuestring, want, ids, off, n) >= 0
                        : cJSON_GetArraySize(want) != 2 * n ||
                              offsets_differ(names[v], "", want, ids, off, n) >= 0)
                bad++;
        }
        printf("unigram %s offsets: %d texts, %ld tokens, %d differ\n", names[v], texts, toks,
               bad);
        ck_assert_int_gt(texts, 1000);
        bad_all += bad;
        unigram_free(t);
    }
    ck_assert_msg(bad_all == 0, "%d texts' offsets differ from tokenizers", bad_all);
}
END_TEST

START_TEST(unigram_specials_and_accessors)
{
    unigram_t *t = load(tok_path);
    ck_assert_int_eq(unigram_special_id(t, "<s>"), 0);
    ck_assert_int_eq(unigram_special_id(t, "<pad>"), 1);
    ck_assert_int_eq(unigram_special_id(t, "</s>"), 2);
    ck_assert_int_eq(unigram_special_id(t, "<unk>"), 3);
    int32_t mask = unigram_special_id(t, "<mask>"), r = unigram_special_id(t, "<ref>");
    ck_assert_int_eq(r, unigram_vocab_size(t) - 1);
    ck_assert_int_eq(mask, r - 1);
    ck_assert(unigram_is_special(t, mask));
    ck_assert(!unigram_is_special(t, r));
    ck_assert_str_eq(unigram_token(t, mask), "<mask>");
    ck_assert_ptr_null(unigram_token(t, unigram_vocab_size(t)));
    unigram_free(t);
}
END_TEST

START_TEST(unigram_truncation_keeps_the_template_as_tokenizers_does)
{
    static int32_t ids[MAX_IDS], off[2 * MAX_IDS];
    unigram_t *t = load(tok_path);
    const cJSON *texts = cJSON_GetObjectItem(ref, "texts");
    const cJSON *wo = cJSON_GetObjectItem(ref, "trunc_offsets")->child;
    int checked = 0;
    for (const cJSON *m = cJSON_GetObjectItem(ref, "trunc")->child; m;
         m = m->next, wo = wo->next) {
        int k = 0;
        const cJSON *o = wo->child;
        for (const cJSON *w = m->child; w; w = w->next, o = o->next, k += 5, checked++) {
            const char *text = cJSON_GetArrayItem(texts, k)->valuestring;
            int n = 0;
            mt_err err;
            ck_assert_int_eq(unigram_encode(t, text, strlen(text), ids, atoi(m->string), &n,
                                            NULL, &err), MT_OK);
            if (!same_ids(w, ids, n))
                print_diff(m->string, text, w, ids, n);
            ck_assert_msg(same_ids(w, ids, n), "max_len %s of \"%.40s\"", m->string, text);
            ck_assert_int_eq(unigram_encode_offsets(t, text, strlen(text), ids, off,
                                                    atoi(m->string), &n, NULL, &err), MT_OK);
            ck_assert_msg(same_ids(w, ids, n) &&
                              offsets_differ(m->string, text, o, ids, off, n) < 0,
                          "offsets at max_len %s of \"%.40s\"", m->string, text);
        }
    }
    ck_assert_int_gt(checked, 1000);
    int n;
    mt_err err;
    ck_assert_int_eq(unigram_encode(t, "abc", 3, ids, 1, &n, NULL, &err), MT_EINVAL);
    unigram_free(t);
}
END_TEST

/* A model folder holding the variant's file as tokenizer.json. */
static void variant_folder(const char *name, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/dir-%s", work, name);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/%s' '%s/tokenizer.json'", dir, work,
             cJSON_GetObjectItem(variant(name), "file")->valuestring, dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(unigram_pairs_equal_tokenizers_through_enc_tok)
{
    static int32_t ids[MAX_IDS];
    const cJSON *texts = cJSON_GetObjectItem(ref, "texts");
    enc_tok *tk[2];
    static const char *const names[] = {"xlmr", "bf"};
    for (int v = 0; v < 2; v++) {
        char dir[192];
        variant_folder(names[v], dir, sizeof dir);
        unigram_t *u = load_variant(names[v]);
        mt_err err = {{0}};
        ck_assert_msg(enc_tokenizer_load(dir, NULL, NULL, NULL, NULL, unigram_vocab_size(u) + 3,
                                         &tk[v], &err) == MT_OK, "%s", err.msg);
        unigram_free(u);
    }
    int checked = 0, bad = 0;
    for (const cJSON *p = cJSON_GetObjectItem(ref, "pairs")->child; p; p = p->next, checked++) {
        const char *name = cJSON_GetArrayItem(p, 0)->valuestring;
        const char *a = cJSON_GetArrayItem(texts, cJSON_GetArrayItem(p, 1)->valueint)->valuestring;
        const char *b = cJSON_GetArrayItem(texts, cJSON_GetArrayItem(p, 2)->valueint)->valuestring;
        int max = cJSON_GetArrayItem(p, 3)->valueint, n = 0, seg = -1, full = 0;
        const cJSON *want = cJSON_GetArrayItem(p, 4);
        mt_err err;
        ck_assert_msg(enc_tok_encode_pair(tk[strcmp(name, "xlmr") != 0], a, strlen(a), b,
                                          strlen(b), ids, max < MAX_IDS ? max : MAX_IDS, &n,
                                          &seg, &full, &err) == MT_OK, "%s", err.msg);
        if (!same_ids(want, ids, n) || seg != cJSON_GetArrayItem(p, 5)->valueint) {
            if (bad++ < 4)
                print_diff(name, a, want, ids, n);
        }
        ck_assert_int_ge(full, n);
    }
    printf("unigram: %d pairs, %d differ\n", checked, bad);
    ck_assert_int_gt(checked, 700);
    ck_assert_int_eq(bad, 0);
    int n, seg;
    mt_err err;
    ck_assert_int_eq(enc_tok_encode_pair(tk[0], "a", 1, "b", 1, ids, 5, &n, &seg, NULL, &err),
                     MT_EINVAL);
    enc_tok_free(tk[0]);
    enc_tok_free(tk[1]);
}
END_TEST

START_TEST(unigram_decode_gives_tokenizers_decode)
{
    static const char *const names[] = {"xlmr", "bf", "ws", "ns"};
    static int32_t ids[MAX_IDS];
    int total = 0, bad = 0;
    for (size_t v = 0; v < sizeof names / sizeof names[0]; v++) {
        unigram_t *t = load_variant(names[v]);
        const cJSON *d = cJSON_GetObjectItem(variant(names[v]), "decoded")->child;
        for (const cJSON *e = cJSON_GetObjectItem(variant(names[v]), "ids")->child; e;
             e = e->next, d = d->next, total++) {
            int n = 0;
            for (const cJSON *i = e->child; i; i = i->next)
                ids[n++] = (int32_t)i->valuedouble;
            char *got = NULL;
            mt_err err;
            ck_assert_msg(unigram_decode(t, ids, n, true, &got, &err) == MT_OK, "%s", err.msg);
            if (strcmp(got, d->valuestring) && bad++ < 4)
                fprintf(stderr, "%s decode: want \"%.60s\" got \"%.60s\"\n", names[v],
                        d->valuestring, got);
            free(got);
        }
        unigram_free(t);
    }
    printf("unigram: decode equals tokenizers' on %d of %d\n", total - bad, total);
    ck_assert_int_eq(bad, 0);
    unigram_t *t = load(tok_path);
    int32_t wrong[2] = {5, unigram_vocab_size(t)};
    char *got = NULL;
    mt_err err;
    ck_assert_int_eq(unigram_decode(t, wrong, 2, true, &got, &err), MT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "ids[1]"));
    unigram_free(t);
}
END_TEST

/* ---- refusals ---- */

static mt_status load_edited(void (*edit)(cJSON *), char *path, size_t cap, mt_err *err)
{
    cJSON *j = tu_load_json(tok_path);
    edit(j);
    snprintf(path, cap, "%s/edited.json", work);
    tu_save_json(path, j, false);
    cJSON_Delete(j);
    unigram_t *t = NULL;
    mt_status s = unigram_load(path, &t, err);
    unigram_free(t);
    return s;
}

static cJSON *nz_step(cJSON *j, int k)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "normalizer"),
                                                  "normalizers"), k);
}

static void set_str(cJSON *o, const char *f, const char *v)
{
    cJSON_DeleteItemFromObject(o, f);
    cJSON_AddStringToObject(o, f, v);
}

static void edit_nfkc(cJSON *j) { set_str(nz_step(j, 0), "type", "NFKC"); }
static void edit_b64(cJSON *j) { set_str(nz_step(j, 0), "precompiled_charsmap", "abc*"); }
static void edit_trie_size(cJSON *j) /* a trie of 255 bytes in 4 */
{
    set_str(nz_step(j, 0), "precompiled_charsmap", "/wAAAAAAAAA=");
}
static void edit_norm_utf8(cJSON *j) /* one unit, then the byte FF */
{
    set_str(nz_step(j, 0), "precompiled_charsmap", "BAAAAAAAAAD/");
}
static void edit_regex(cJSON *j)
{
    cJSON *p = cJSON_GetObjectItem(nz_step(j, 1), "pattern");
    set_str(p, "Regex", "\\s+");
}
static void edit_no_vocab(cJSON *j)
{
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "model"), "vocab");
}
static void edit_unk(cJSON *j)
{
    cJSON *m = cJSON_GetObjectItem(j, "model");
    cJSON_DeleteItemFromObject(m, "unk_id");
    cJSON_AddNullToObject(m, "unk_id");
}
static cJSON *part(cJSON *j, const char *f) { return cJSON_GetObjectItem(j, f); }
static void edit_scheme(cJSON *j)
{
    set_str(part(j, "pre_tokenizer"), "prepend_scheme", "sometimes");
}
static void edit_pretok(cJSON *j) { set_str(part(j, "pre_tokenizer"), "type", "Whitespace"); }
static void edit_decoder(cJSON *j) { set_str(part(j, "decoder"), "type", "WordPiece"); }
static void edit_post(cJSON *j) { set_str(part(j, "post_processor"), "type", "BertProcessing"); }
static void edit_single_word(cJSON *j)
{
    cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "added_tokens"), 4);
    cJSON_DeleteItemFromObject(a, "single_word");
    cJSON_AddTrueToObject(a, "single_word");
}
static void edit_model(cJSON *j) { set_str(cJSON_GetObjectItem(j, "model"), "type", "BPE"); }
static void edit_roberta(cJSON *j)
{
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(j, "post_processor"), "trim_offsets");
}

START_TEST(unigram_refusals_name_the_file_and_field)
{
    static const struct {
        void (*edit)(cJSON *);
        mt_status s;
        const char *field;
    } cases[] = {
        {edit_nfkc, MT_EUNSUPPORTED, "normalizer.normalizers[0].type \"NFKC\""},
        {edit_b64, MT_EFORMAT, "normalizer.normalizers[0].precompiled_charsmap"},
        {edit_trie_size, MT_EFORMAT, "normalizer.normalizers[0].precompiled_charsmap: the trie"},
        {edit_norm_utf8, MT_EFORMAT, "precompiled_charsmap: the normalized strings"},
        {edit_regex, MT_EUNSUPPORTED, "normalizer.normalizers[1].pattern"},
        {edit_no_vocab, MT_EFORMAT, "model.vocab"},
        {edit_unk, MT_EUNSUPPORTED, "model.unk_id"},
        {edit_scheme, MT_EFORMAT, "pre_tokenizer.prepend_scheme"},
        {edit_pretok, MT_EUNSUPPORTED, "pre_tokenizer.type \"Whitespace\""},
        {edit_decoder, MT_EUNSUPPORTED, "decoder.type \"WordPiece\""},
        {edit_post, MT_EUNSUPPORTED, "post_processor.type \"BertProcessing\""},
        {edit_single_word, MT_EUNSUPPORTED, "added_tokens[4].single_word"},
        {edit_model, MT_EUNSUPPORTED, "model.type \"BPE\""},
        {edit_roberta, MT_EFORMAT, "post_processor.trim_offsets"},
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

/* UAX #29's clusters as tokenizers cuts them, on cases its texts may miss:
 * an Indic conjunct (consonant, virama, consonant: GB9c) is one cluster,
 * as are an emoji ZWJ sequence, a flag (two regional indicators) and a
 * Hangul syllable built of jamo; CR LF is one, a lone mark after a space
 * joins the space. */
START_TEST(unigram_grapheme_clusters_follow_uax29)
{
    static const struct {
        const char *text;
        size_t first; /* bytes of the first cluster */
    } cases[] = {
        {"\xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7x", 9},    /* क्ष: ka virama ssa */
        {"\xe0\xa6\x95\xe0\xa7\x8d\xe0\xa6\xb7x", 9},    /* Bengali kssa */
        {"\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbbx", 11}, /* woman ZWJ laptop */
        {"\xf0\x9f\x87\xab\xf0\x9f\x87\xb7\xf0\x9f\x87\xa9", 8}, /* FR, then D */
        {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8x", 9},    /* L V T jamo */
        {"\r\nx", 2},
        {" \xcc\x81x", 3},                                    /* space + combining acute */
        {"\xe0\xa4\x95\xe0\xa4\xb7", 3},                    /* ka ssa: two clusters */
    };
    gcb_init();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const size_t got = gcb_next((const unsigned char *)cases[i].text, strlen(cases[i].text));
        ck_assert_msg(got == cases[i].first, "case %zu: first cluster %zu bytes, want %zu", i, got,
                      cases[i].first);
    }
}
END_TEST

START_TEST(unigram_invalid_utf8_names_the_byte)
{
    unigram_t *t = load(tok_path);
    int32_t ids[64];
    int n;
    mt_err err;
    ck_assert_int_eq(unigram_encode(t, "ab\xC3(", 4, ids, 64, &n, NULL, &err), MT_EUTF8);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte 2"));
    ck_assert_int_eq(unigram_encode(t, "\xED\xA0\x80", 3, ids, 64, &n, NULL, &err), MT_EUTF8);
    unigram_free(t);
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("unigram");
    TCase *tc = tcase_create("unigram");
    tcase_add_unchecked_fixture(tc, make_folder, remove_folder);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, unigram_ids_equal_tokenizers_in_every_variant);
    tcase_add_test(tc, unigram_offsets_equal_tokenizers_in_every_variant);
    tcase_add_test(tc, unigram_specials_and_accessors);
    tcase_add_test(tc, unigram_truncation_keeps_the_template_as_tokenizers_does);
    tcase_add_test(tc, unigram_pairs_equal_tokenizers_through_enc_tok);
    tcase_add_test(tc, unigram_decode_gives_tokenizers_decode);
    tcase_add_test(tc, unigram_refusals_name_the_file_and_field);
    tcase_add_test(tc, unigram_invalid_utf8_names_the_byte);
    tcase_add_test(tc, unigram_grapheme_clusters_follow_uax29);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
