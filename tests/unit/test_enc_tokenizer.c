/* test_enc_tokenizer.c: check suite for models/enc_tokenizer.c, the choice
 * of a model folder's tokenizer and its casing and normalization from the
 * folder's own files, on folders tools/make-cased-wordpiece.py makes at
 * suite start (in a mkdtemp folder, removed after; nothing is committed):
 *   - cased WordPiece folders (lowercase false; strip_accents true; an
 *     uncased one that keeps accents and control characters; one with no
 *     normalizer at all) give the ids
 *     Hugging Face `tokenizers` gives on every text of the tool's corpus,
 *     also from vocab.txt + tokenizer_config.json alone;
 *   - the uncased models (MiniLM, MPNet) tokenize exactly as the encoder's
 *     loader did before (lowercase true, tokenizer.json's added tokens);
 *   - tokenizer.json wins over tokenizer_config.json field by field;
 *   - a small Unigram tokenizer.json (XLM-R's shape) loads through the
 *     Unigram row: ids, offsets, the pair template, tokens, decode, the
 *     vocab_size check (the Unigram tokenizer itself: tests/unit/test_unigram.c);
 *   - a WordPiece file marked BPE or Unigram is refused by that kind's
 *     loader naming the field, an unknown kind and
 *     a field of the wrong type are refused naming the file and the field,
 *     and a vocabulary of the wrong size gives the encoder's message.
 * Paths are relative to the repository root, the cwd of `make test`. */
#include <cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/jsonfile.h"
#include "engine/text/tokenizer.h"
#include "models/enc_tokenizer.h"
#include "tests/unit/tu_files.h"

#define MINILM_DIR "models/all-MiniLM-L6-v2"
#define MPNET_DIR "models/all-mpnet-base-v2"
#define CORPUS "tests/fixtures/tokenizer/corpus.jsonl"
#define MAX_IDS 4096

static char work[64]; /* the tool's folders: work/<variant> */
static const char *const variants[] = {"cased", "cased-strip", "lower-keep", "none"};

/* Once for the suite (in the parent, before any fork). */
static void make_folders(void)
{
    tu_mkwork(work, sizeof work, "mt-enctok");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s tools/make-cased-wordpiece.py %s --seed 20251129", tu_python(),
             work);
    ck_assert_msg(system(cmd) == 0, "tools/make-cased-wordpiece.py failed: %s", cmd);
}

static void remove_folders(void) { tu_rmwork(work); }

/* ---------------------------------------------------------------------- */
/* Helpers                                                                  */
/* ---------------------------------------------------------------------- */

/* A fresh folder work/name with vocab.txt linked from work/from. */
static void new_folder(char *dir, size_t cap, const char *name, const char *from)
{
    snprintf(dir, cap, "%s/%s", work, name);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char src[256], dst[256];
    snprintf(src, sizeof src, "%s/%s/vocab.txt", work, from);
    snprintf(dst, sizeof dst, "%s/vocab.txt", dir);
    ck_assert_int_eq(symlink(src, dst), 0);
}

/* The reference's vocab_size. */
static int ref_vocab(const char *variant)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s/reference.json", work, variant);
    cJSON *r = tu_load_json(path);
    int n = cJSON_GetObjectItemCaseSensitive(r, "vocab_size")->valueint;
    cJSON_Delete(r);
    return n;
}

/* Loads dir's tokenizer with BERT's roles or fails the test. */
static enc_tok *load_ok(const char *dir, int vocab)
{
    enc_tok *t = NULL;
    mt_err err = {{0}};
    ck_assert_msg(enc_tokenizer_load(dir, NULL, NULL, NULL, NULL, vocab, &t, &err) == MT_OK,
                  "%s: %s", dir, err.msg);
    return t;
}

/* Encodes every text of variant's reference.json with t; returns how many
 * texts' ids differ from Hugging Face's (the first few printed). */
static int reference_mismatches(const tok_t *t, const char *variant, int *texts)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s/reference.json", work, variant);
    cJSON *r = tu_load_json(path);
    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(r, "texts");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(r, "ids");
    ck_assert_int_eq(cJSON_GetArraySize(tx), cJSON_GetArraySize(ids));
    int bad = 0, k = 0;
    static int32_t got[MAX_IDS];
    for (const cJSON *a = tx->child, *b = ids->child; a && b; a = a->next, b = b->next, k++) {
        int n = 0;
        mt_err err = {{0}};
        ck_assert_msg(tok_encode(t, a->valuestring, strlen(a->valuestring), got, MAX_IDS, &n,
                                 NULL, &err) == MT_OK, "text %d: %s", k, err.msg);
        bool same = n == cJSON_GetArraySize(b);
        int i = 0;
        for (const cJSON *e = b->child; same && e; e = e->next, i++)
            same = got[i] == e->valueint;
        if (!same && bad++ < 5) {
            char *want = cJSON_PrintUnformatted(b);
            fprintf(stderr, "%s text %d \"%s\": want %s, got", variant, k, a->valuestring, want);
            for (i = 0; i < n; i++)
                fprintf(stderr, " %d", got[i]);
            fputc('\n', stderr);
            free(want);
        }
    }
    cJSON_Delete(r);
    *texts = k;
    return bad;
}

/* Expects dir to be refused with a message holding each of want[]. */
static void expect_refused(const char *dir, int vocab, mt_status st, const char *const *want)
{
    enc_tok *t = NULL;
    mt_err err = {{0}};
    ck_assert_int_eq(enc_tokenizer_load(dir, NULL, NULL, NULL, NULL, vocab, &t, &err), st);
    ck_assert_ptr_null(t);
    for (int i = 0; want[i]; i++)
        ck_assert_msg(strstr(err.msg, want[i]), "message \"%s\" lacks \"%s\"", err.msg, want[i]);
}

/* A folder named name: the cased folder's vocab.txt, its tokenizer.json
 * edited by edit (NULL: no tokenizer.json) and, when cfg is not NULL, a
 * tokenizer_config.json holding cfg (JSON text). */
static void edited_folder(char *dir, size_t cap, const char *name, void (*edit)(cJSON *),
                          const char *cfg)
{
    char path[512];
    new_folder(dir, cap, name, "cased");
    if (edit) {
        snprintf(path, sizeof path, "%s/cased/tokenizer.json", work);
        cJSON *j = tu_load_json(path);
        edit(j);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        tu_save_json(path, j, true);
        cJSON_Delete(j);
    }
    if (cfg) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(cfg, f);
        fclose(f);
    }
}

static cJSON *normalizer(cJSON *j) { return cJSON_GetObjectItemCaseSensitive(j, "normalizer"); }

/* ---------------------------------------------------------------------- */
/* Against Hugging Face                                                     */
/* ---------------------------------------------------------------------- */

START_TEST(enc_tok_cased_folders_match_hf_tokenizers)
{
    for (int v = 0; v < 4; v++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/%s", work, variants[v]);
        enc_tok *t = load_ok(dir, ref_vocab(variants[v]));
        int n = 0, bad = reference_mismatches(enc_tok_wordpiece(t), variants[v], &n);
        ck_assert_msg(bad == 0, "%s: %d of %d texts differ from tokenizers", variants[v], bad, n);
        ck_assert_int_ge(n, 300);
        enc_tok_free(t);
    }
}
END_TEST

/* Without tokenizer.json the folder is WordPiece from vocab.txt, cased as
 * tokenizer_config.json says (clean_text is then always on, so only the
 * two folders that clean). */
START_TEST(enc_tok_vocab_txt_and_config_alone_are_wordpiece)
{
    for (int v = 0; v < 2; v++) {
        char dir[256], src[512], dst[512];
        char name[64];
        snprintf(name, sizeof name, "%s-noj", variants[v]);
        new_folder(dir, sizeof dir, name, variants[v]);
        snprintf(src, sizeof src, "%s/%s/tokenizer_config.json", work, variants[v]);
        snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
        ck_assert_int_eq(symlink(src, dst), 0);
        enc_tok *t = load_ok(dir, ref_vocab(variants[v]));
        int n = 0, bad = reference_mismatches(enc_tok_wordpiece(t), variants[v], &n);
        ck_assert_msg(bad == 0, "%s without tokenizer.json: %d of %d texts differ", variants[v],
                      bad, n);
        enc_tok_free(t);
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The uncased models: as the encoder's loader was before                   */
/* ---------------------------------------------------------------------- */

/* Today's construction: vocab.txt, lowercase, tokenizer.json's added tokens. */
static tok_t *old_loader(const char *dir, const char *cls, const char *sep, const char *pad,
                         const char *unk)
{
    char path[256], tj[256];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    tok_options o = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100,
                     .added_tokens_json = tj, .cls_token = cls, .sep_token = sep,
                     .pad_token = pad, .unk_token = unk};
    tok_t *t = NULL;
    mt_err err = {{0}};
    ck_assert_msg(tok_load(path, &o, &t, &err) == MT_OK, "%s (run `make model`)", err.msg);
    return t;
}

/* Both encode text alike (status, ids, full length). */
static bool same_encoding(const tok_t *a, const tok_t *b, const char *text, size_t len)
{
    static int32_t ia[MAX_IDS], ib[MAX_IDS];
    int na = 0, nb = 0, fa = 0, fb = 0;
    mt_err err;
    mt_status sa = tok_encode(a, text, len, ia, MAX_IDS, &na, &fa, &err);
    mt_status sb = tok_encode(b, text, len, ib, MAX_IDS, &nb, &fb, &err);
    return sa == sb && na == nb && fa == fb && memcmp(ia, ib, sizeof *ia * (size_t)na) == 0;
}

/* Every line of the tokenizer fixtures' corpus, as its raw JSON line and
 * as the string it holds, and the cased folders' texts. */
static void check_uncased(const char *dir, const char *cls, const char *sep, const char *pad,
                          const char *unk, int vocab)
{
    tok_t *old = old_loader(dir, cls, sep, pad, unk);
    enc_tok *et = NULL;
    mt_err err = {{0}};
    ck_assert_msg(enc_tokenizer_load(dir, cls, sep, pad, unk, vocab, &et, &err) == MT_OK, "%s",
                  err.msg);
    const tok_t *t = enc_tok_wordpiece(et);
    ck_assert_int_eq(tok_cls_id(t), tok_cls_id(old));
    ck_assert_int_eq(tok_sep_id(t), tok_sep_id(old));
    ck_assert_int_eq(tok_pad_id(t), tok_pad_id(old));
    ck_assert_int_eq(tok_unk_id(t), tok_unk_id(old));
    FILE *f = fopen(CORPUS, "r");
    ck_assert_msg(f != NULL, "cannot read %s", CORPUS);
    static char line[1 << 20];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\n");
        ck_assert_msg(same_encoding(old, t, line, len), "%s: line %d differs", dir, n + 1);
        cJSON *s = cJSON_ParseWithLength(line, len);
        if (cJSON_IsString(s))
            ck_assert_msg(same_encoding(old, t, s->valuestring, strlen(s->valuestring)),
                          "%s: text of line %d differs", dir, n + 1);
        cJSON_Delete(s);
        n++;
    }
    fclose(f);
    ck_assert_int_ge(n, 100);
    char path[256];
    snprintf(path, sizeof path, "%s/cased/reference.json", work);
    cJSON *r = tu_load_json(path);
    for (const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "texts")->child; e; e = e->next)
        ck_assert_msg(same_encoding(old, t, e->valuestring, strlen(e->valuestring)),
                      "%s: \"%s\" differs", dir, e->valuestring);
    cJSON_Delete(r);
    tok_free(old);
    enc_tok_free(et);
}

START_TEST(enc_tok_uncased_models_tokenize_as_before)
{
    check_uncased(MINILM_DIR, NULL, NULL, NULL, NULL, 30522);
    check_uncased(MPNET_DIR, "<s>", "</s>", "<pad>", "[UNK]", 30527);
}
END_TEST

START_TEST(enc_tok_vocab_size_mismatch_message_is_the_encoders)
{
    enc_tok *t = NULL;
    mt_err err = {{0}};
    ck_assert_int_eq(enc_tokenizer_load(MINILM_DIR, NULL, NULL, NULL, NULL, 30000, &t, &err),
                     MT_EFORMAT);
    ck_assert_ptr_null(t);
    ck_assert_str_eq(err.msg, MINILM_DIR "/vocab.txt has 30522 entries but config.json "
                              "vocab_size is 30000");
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Which file says what                                                     */
/* ---------------------------------------------------------------------- */

static void drop_lowercase(cJSON *j) { cJSON_DeleteItemFromObject(normalizer(j), "lowercase"); }

/* The id "Hello" gets as its first piece in dir. */
static int32_t first_id(const char *dir, int vocab, const char *text)
{
    enc_tok *t = load_ok(dir, vocab);
    int32_t ids[16];
    int n = 0;
    mt_err err;
    ck_assert_int_eq(enc_tok_encode(t, text, strlen(text), ids, 16, &n, NULL, &err), MT_OK);
    enc_tok_free(t);
    return ids[1];
}

START_TEST(enc_tok_tokenizer_json_wins_then_tokenizer_config_then_uncased)
{
    char dir[256];
    int v = ref_vocab("cased");
    char path[256];
    snprintf(path, sizeof path, "%s/cased", work);
    int32_t cased = first_id(path, v, "Hello"), lower = first_id(MINILM_DIR, 30522, "Hello");
    ck_assert_int_ne(cased, lower);
    /* tokenizer.json says lowercase false; tokenizer_config.json true */
    edited_folder(dir, sizeof dir, "json-wins", NULL, "{\"do_lower_case\": true}");
    snprintf(path, sizeof path, "%s/cased/tokenizer.json", work);
    char dst[512];
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    ck_assert_int_eq(symlink(path, dst), 0);
    ck_assert_int_eq(first_id(dir, v, "Hello"), cased);
    /* a BertNormalizer without lowercase: tokenizer_config.json's, then true */
    edited_folder(dir, sizeof dir, "config-fills", drop_lowercase, "{\"do_lower_case\": false}");
    ck_assert_int_eq(first_id(dir, v, "Hello"), cased);
    edited_folder(dir, sizeof dir, "default-lower", drop_lowercase, NULL);
    ck_assert_int_eq(first_id(dir, v, "Hello"), lower);
    edited_folder(dir, sizeof dir, "config-null", drop_lowercase, "{\"do_lower_case\": null}");
    expect_refused(dir, v, MT_EFORMAT,
                   (const char *const[]){"tokenizer_config.json", "do_lower_case", NULL});
    /* no tokenizer.json, no tokenizer_config.json: uncased */
    edited_folder(dir, sizeof dir, "vocab-only", NULL, NULL);
    ck_assert_int_eq(first_id(dir, v, "Hello"), lower);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Refusals                                                                 */
/* ---------------------------------------------------------------------- */

static void type_bpe(cJSON *j)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(j, "model"), "type",
                              cJSON_CreateString("BPE"));
}
static void type_unigram(cJSON *j)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(j, "model"), "type",
                              cJSON_CreateString("Unigram"));
}
static void type_wordlevel(cJSON *j)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(j, "model"), "type",
                              cJSON_CreateString("WordLevel"));
}
static void type_number(cJSON *j)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(j, "model"), "type",
                              cJSON_CreateNumber(1));
}
static void lowercase_string(cJSON *j)
{
    cJSON_ReplaceItemInObject(normalizer(j), "lowercase", cJSON_CreateString("false"));
}
static void strip_number(cJSON *j)
{
    cJSON_ReplaceItemInObject(normalizer(j), "strip_accents", cJSON_CreateNumber(1));
}
static void cjk_null(cJSON *j)
{
    cJSON_ReplaceItemInObject(normalizer(j), "handle_chinese_chars", cJSON_CreateNull());
}
static void normalizer_sequence(cJSON *j)
{
    cJSON_ReplaceItemInObject(normalizer(j), "type", cJSON_CreateString("Sequence"));
}
static void pretok_whitespace(cJSON *j)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), "type",
                              cJSON_CreateString("Whitespace"));
}
static void prefix_other(cJSON *j)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(j, "model"),
                              "continuing_subword_prefix", cJSON_CreateString("@@"));
}

START_TEST(enc_tok_refuses_kinds_not_supported_and_bad_fields)
{
    static const struct {
        const char *name;
        void (*edit)(cJSON *);
        mt_status st;
        const char *want[4];
    } cases[] = {
        /* a BPE kind goes to its own loader (engine/text/bpe_load.c), which
         * names the WordPiece field it does not take */
        {"bpe", type_bpe, MT_EUNSUPPORTED,
         {"/bpe/tokenizer.json", "model.unk_token is not supported", NULL}},
        /* and a Unigram one to engine/text/unigram_load.c */
        {"unigram", type_unigram, MT_EFORMAT,
         {"/unigram/tokenizer.json", "model.vocab must be a non-empty array", NULL}},
        {"wordlevel", type_wordlevel, MT_EUNSUPPORTED,
         {"/wordlevel/tokenizer.json", "\"WordLevel\" is not a tokenizer kind", "BPE", NULL}},
        {"typenum", type_number, MT_EFORMAT,
         {"/typenum/tokenizer.json", "model.type must be a string", NULL}},
        {"lowerstr", lowercase_string, MT_EFORMAT,
         {"/lowerstr/tokenizer.json", "normalizer.lowercase must be true or false", NULL}},
        {"stripnum", strip_number, MT_EFORMAT,
         {"/stripnum/tokenizer.json", "normalizer.strip_accents must be true or false or null",
          NULL}},
        {"cjknull", cjk_null, MT_EFORMAT,
         {"/cjknull/tokenizer.json", "normalizer.handle_chinese_chars", NULL}},
        {"seqnorm", normalizer_sequence, MT_EUNSUPPORTED,
         {"/seqnorm/tokenizer.json", "normalizer.type \"Sequence\"", NULL}},
        {"pretok", pretok_whitespace, MT_EUNSUPPORTED,
         {"/pretok/tokenizer.json", "pre_tokenizer \"Whitespace\"", NULL}},
        {"prefix", prefix_other, MT_EUNSUPPORTED,
         {"/prefix/tokenizer.json", "model.continuing_subword_prefix \"@@\"", NULL}},
    };
    int v = ref_vocab("cased");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char dir[256];
        edited_folder(dir, sizeof dir, cases[k].name, cases[k].edit, NULL);
        expect_refused(dir, v, cases[k].st, cases[k].want);
    }
    char dir[256];
    edited_folder(dir, sizeof dir, "cfgstr", NULL, "{\"do_lower_case\": \"false\"}");
    expect_refused(dir, v, MT_EFORMAT,
                   (const char *const[]){"/cfgstr/tokenizer_config.json",
                                         "do_lower_case must be true or false", NULL});
    edited_folder(dir, sizeof dir, "cfgcjk", NULL, "{\"tokenize_chinese_chars\": 1}");
    expect_refused(dir, v, MT_EFORMAT,
                   (const char *const[]){"tokenizer_config.json", "tokenize_chinese_chars", NULL});
    edited_folder(dir, sizeof dir, "cfgbad", NULL, "{\"do_lower_case\": tru");
    expect_refused(dir, v, MT_EFORMAT, (const char *const[]){"tokenizer_config.json", NULL});
}
END_TEST

/* A Unigram tokenizer.json small enough to work out by hand: pieces "▁a"
 * (-1), "b" (-2), "▁" (-3) after XLM-R's four specials. */
static const char unigram_json[] =
    "{\"added_tokens\": ["
    "{\"id\": 0, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false,"
    " \"rstrip\": false, \"normalized\": false, \"special\": true},"
    "{\"id\": 1, \"content\": \"<pad>\", \"single_word\": false, \"lstrip\": false,"
    " \"rstrip\": false, \"normalized\": false, \"special\": true},"
    "{\"id\": 2, \"content\": \"</s>\", \"single_word\": false, \"lstrip\": false,"
    " \"rstrip\": false, \"normalized\": false, \"special\": true},"
    "{\"id\": 3, \"content\": \"<unk>\", \"single_word\": false, \"lstrip\": false,"
    " \"rstrip\": false, \"normalized\": false, \"special\": true}],"
    "\"normalizer\": null,"
    "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\","
    " \"prepend_scheme\": \"always\", \"split\": true},"
    "\"post_processor\": {\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2],"
    " \"cls\": [\"<s>\", 0], \"trim_offsets\": true, \"add_prefix_space\": true},"
    "\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\","
    " \"prepend_scheme\": \"always\", \"split\": true},"
    "\"model\": {\"type\": \"Unigram\", \"unk_id\": 3, \"byte_fallback\": false,"
    " \"vocab\": [[\"<s>\", 0], [\"<pad>\", 0], [\"</s>\", 0], [\"<unk>\", 0],"
    " [\"\u2581a\", -1], [\"b\", -2], [\"\u2581\", -3]]}}";

START_TEST(enc_tok_loads_a_unigram_folder)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/unigram-tiny", work);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(unigram_json, f);
    fclose(f);
    enc_tok *t = NULL;
    mt_err err = {{0}};
    ck_assert_msg(enc_tokenizer_load(dir, NULL, NULL, NULL, NULL, 8, &t, &err) == MT_OK, "%s",
                  err.msg);
    ck_assert_ptr_null(enc_tok_wordpiece(t));
    int32_t ids[16];
    int n = 0, seg = -1, full = 0;
    /* "▁a" whole; "▁b": "▁" + "b" (-5) beats <unk> */
    ck_assert_int_eq(enc_tok_encode(t, "a b", 3, ids, 16, &n, &full, &err), MT_OK);
    ck_assert_int_eq(n, 5);
    ck_assert_mem_eq(ids, ((int32_t[]){0, 4, 6, 5, 2}), 5 * sizeof *ids);
    /* offsets as tokenizers gives them: "▁a" from the prepended ▁ (the
     * first character's span), "▁" the space; "  ab ": the leading space
     * is the text's own ▁, "▁a" then spans the second space and the a */
    int32_t off[32];
    ck_assert_int_eq(enc_tok_encode_offsets(t, "a b", 3, ids, off, 16, &n, &full, &err), MT_OK);
    ck_assert_int_eq(n, 5);
    ck_assert_mem_eq(off, ((int32_t[]){0, 0, 0, 1, 1, 2, 2, 3, 0, 0}), 10 * sizeof *off);
    ck_assert_int_eq(enc_tok_encode_offsets(t, "  ab ", 5, ids, off, 16, &n, &full, &err),
                     MT_OK);
    ck_assert_int_eq(n, 6);
    ck_assert_mem_eq(ids, ((int32_t[]){0, 6, 4, 5, 6, 2}), 6 * sizeof *ids);
    ck_assert_mem_eq(off, ((int32_t[]){0, 0, 0, 1, 1, 3, 3, 4, 4, 5, 0, 0}), 12 * sizeof *off);
    ck_assert_int_eq(enc_tok_encode_pair(t, "a", 1, "b", 1, ids, 16, &n, &seg, &full, &err),
                     MT_OK);
    ck_assert_int_eq(n, 7);
    ck_assert_int_eq(seg, 7); /* every token type 0 */
    ck_assert_mem_eq(ids, ((int32_t[]){0, 4, 2, 2, 6, 5, 2}), 7 * sizeof *ids);
    bool special = false;
    ck_assert_str_eq(enc_tok_token(t, 2, &special), "</s>");
    ck_assert(special);
    char *text = NULL;
    ck_assert_int_eq(enc_tok_decode(t, (int32_t[]){0, 4, 6, 5, 2}, 5, true, &text, &err), MT_OK);
    ck_assert_str_eq(text, "a b");
    free(text);
    enc_tok_free(t);
    expect_refused(dir, 6, MT_EFORMAT,
                   (const char *const[]){"/unigram-tiny/tokenizer.json has 7 ids",
                                         "vocab_size is 6", NULL});
}
END_TEST

START_TEST(enc_tok_rejects_null_arguments_and_missing_vocab)
{
    enc_tok *t = NULL;
    mt_err err = {{0}};
    ck_assert_int_eq(enc_tokenizer_load(NULL, NULL, NULL, NULL, NULL, 1, &t, &err), MT_EINVAL);
    ck_assert_int_eq(enc_tokenizer_load(MINILM_DIR, NULL, NULL, NULL, NULL, 1, NULL, &err),
                     MT_EINVAL);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/empty", work);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    expect_refused(dir, 1, MT_EIO, (const char *const[]){"/empty/vocab.txt", NULL});
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("enc_tokenizer");
    TCase *tc = tcase_create("enc_tokenizer");
    tcase_add_unchecked_fixture(tc, make_folders, remove_folders);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, enc_tok_cased_folders_match_hf_tokenizers);
    tcase_add_test(tc, enc_tok_vocab_txt_and_config_alone_are_wordpiece);
    tcase_add_test(tc, enc_tok_uncased_models_tokenize_as_before);
    tcase_add_test(tc, enc_tok_vocab_size_mismatch_message_is_the_encoders);
    tcase_add_test(tc, enc_tok_tokenizer_json_wins_then_tokenizer_config_then_uncased);
    tcase_add_test(tc, enc_tok_refuses_kinds_not_supported_and_bad_fields);
    tcase_add_test(tc, enc_tok_loads_a_unigram_folder);
    tcase_add_test(tc, enc_tok_rejects_null_arguments_and_missing_vocab);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
