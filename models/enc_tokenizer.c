/* enc_tokenizer.c: picks and loads a model folder's tokenizer. A table has
 * one row per tokenizer kind, named as tokenizer.json's model.type names it
 * ("WordPiece", "BPE", "Unigram"), with its loader (a kind whose loader is
 * not written yet would have a row without one and be refused by name). A
 * folder without tokenizer.json but with vocab.txt is WordPiece.
 *
 * WordPiece takes its casing and normalization from the folder's files, as
 * Hugging Face does: tokenizer.json's BertNormalizer (lowercase,
 * strip_accents, handle_chinese_chars, clean_text); a field it does not
 * give comes from tokenizer_config.json (do_lower_case, strip_accents,
 * tokenize_chinese_chars), else BERT's uncased defaults. strip_accents
 * null follows lowercase. A field of the wrong type is refused, naming the
 * file and the field.
 */
#include "models/enc_tokenizer.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/jsonfile.h"

/* What a loader reads: the folder, its parsed JSON files and the role
 * tokens the caller gives. */
typedef struct {
    const char *dir;
    char tj_path[4096]; /* dir/tokenizer.json */
    char tc_path[4096]; /* dir/tokenizer_config.json */
    const cJSON *tj;    /* tokenizer.json, or NULL when the folder has none */
    const cJSON *tc;    /* tokenizer_config.json, or NULL */
    const char *cls, *sep, *pad, *unk;
} enc_tok_src;

/* A model's tokenizer: one of the kinds. */
struct enc_tok {
    tok_t *wp;
    bpe_t *bpe;
    unigram_t *ug;
};

/* A loader builds the tokenizer and names the file its vocabulary came
 * from (vocab_path, cap bytes), for the vocab_size check's message. */
typedef mt_status (*enc_tok_loader)(const enc_tok_src *src, enc_tok *out, char *vocab_path,
                                    size_t cap, mt_err *err);

static mt_status enc_load_wordpiece(const enc_tok_src *src, enc_tok *out, char *vocab_path,
                                    size_t cap, mt_err *err);
static mt_status enc_load_bpe(const enc_tok_src *src, enc_tok *out, char *vocab_path,
                              size_t cap, mt_err *err);
static mt_status enc_load_unigram(const enc_tok_src *src, enc_tok *out, char *vocab_path,
                                  size_t cap, mt_err *err);

/* The tokenizer kinds, by tokenizer.json's model.type. */
static const struct {
    const char *kind;
    enc_tok_loader load; /* NULL: known, not supported yet */
} enc_tok_kinds[] = {
    {"WordPiece", enc_load_wordpiece}, /* BERT, MPNet, DistilBERT */
    {"BPE", enc_load_bpe},             /* byte-level BPE (Qwen3): engine/text/bpe.h */
    {"Unigram", enc_load_unigram},     /* SentencePiece Unigram (XLM-R): engine/text/unigram.h */
};

#define ENC_NKINDS (int)(sizeof enc_tok_kinds / sizeof enc_tok_kinds[0])

/* ======================================================================
 * Fields
 * ====================================================================== */

/* A flag as the files say it: -1 not said (absent, or null where null
 * means "as the default"), else 0 or 1. */
typedef int enc_flag;

/* Reads the optional boolean obj[key] (where is "normalizer." or "") into
 * *v; absent leaves *v alone, and so does null where null_ok. */
static mt_status enc_bool(const cJSON *obj, const char *key, const char *path, const char *where,
                          bool null_ok, enc_flag *v, mt_err *err)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!f || (null_ok && cJSON_IsNull(f)))
        return MT_OK;
    if (!cJSON_IsBool(f))
        return mt_fail(err, MT_EFORMAT, "%s: %s%s must be true or false%s", path, where, key,
                       null_ok ? " or null" : "");
    *v = cJSON_IsTrue(f);
    return MT_OK;
}

/* Reads the optional string obj[key] into *v (NULL when absent). */
static mt_status enc_string(const cJSON *obj, const char *key, const char *path,
                            const char *where, const char **v, mt_err *err)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    *v = NULL;
    if (!f)
        return MT_OK;
    if (!cJSON_IsString(f))
        return mt_fail(err, MT_EFORMAT, "%s: %s%s must be a string", path, where, key);
    *v = f->valuestring;
    return MT_OK;
}

/* ======================================================================
 * WordPiece
 * ====================================================================== */

/* BertNormalizer's four switches as the files say them. */
typedef struct {
    enc_flag lower, strip, cjk, clean;
} enc_norm;

/* tokenizer.json's normalizer: BertNormalizer's fields, or none at all
 * (null or absent: Hugging Face normalizes nothing). Another type is
 * refused: the WordPiece tokenizer runs BertNormalizer's steps only. */
static mt_status enc_norm_from_json(const enc_tok_src *src, enc_norm *n, mt_err *err)
{
    const char *p = src->tj_path;
    const cJSON *nz = cJSON_GetObjectItemCaseSensitive(src->tj, "normalizer");
    if (!nz || cJSON_IsNull(nz)) {
        *n = (enc_norm){0, 0, 0, 0};
        return MT_OK;
    }
    if (!cJSON_IsObject(nz))
        return mt_fail(err, MT_EFORMAT, "%s: normalizer must be an object or null", p);
    const char *type;
    mt_status s = enc_string(nz, "type", p, "normalizer.", &type, err);
    if (s != MT_OK)
        return s;
    if (!type || strcmp(type, "BertNormalizer") != 0)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: normalizer.type \"%s\" is not supported for a WordPiece tokenizer "
                       "(only BertNormalizer)", p, type ? type : "(none)");
    if ((s = enc_bool(nz, "lowercase", p, "normalizer.", false, &n->lower, err)) != MT_OK ||
        (s = enc_bool(nz, "strip_accents", p, "normalizer.", true, &n->strip, err)) != MT_OK ||
        (s = enc_bool(nz, "handle_chinese_chars", p, "normalizer.", false, &n->cjk, err)) !=
            MT_OK)
        return s;
    return enc_bool(nz, "clean_text", p, "normalizer.", false, &n->clean, err);
}

/* tokenizer_config.json's do_lower_case, strip_accents and
 * tokenize_chinese_chars (transformers' BertTokenizer arguments). */
static mt_status enc_norm_from_config(const enc_tok_src *src, enc_norm *n, mt_err *err)
{
    const char *p = src->tc_path;
    mt_status s = enc_bool(src->tc, "do_lower_case", p, "", false, &n->lower, err);
    if (s == MT_OK)
        s = enc_bool(src->tc, "strip_accents", p, "", true, &n->strip, err);
    if (s == MT_OK)
        s = enc_bool(src->tc, "tokenize_chinese_chars", p, "", false, &n->cjk, err);
    return s;
}

/* The switches: tokenizer.json's normalizer, then tokenizer_config.json
 * for what it left unsaid, then BERT's uncased defaults. Both files are
 * checked whole, whichever wins. */
static mt_status enc_norm_options(const enc_tok_src *src, tok_options *o, mt_err *err)
{
    enc_norm n = {-1, -1, -1, -1}, c = {-1, -1, -1, -1};
    mt_status s = src->tj ? enc_norm_from_json(src, &n, err) : MT_OK;
    if (s == MT_OK && src->tc)
        s = enc_norm_from_config(src, &c, err);
    if (s != MT_OK)
        return s;
    n.lower = n.lower >= 0 ? n.lower : c.lower;
    n.strip = n.strip >= 0 ? n.strip : c.strip;
    n.cjk = n.cjk >= 0 ? n.cjk : c.cjk;
    o->lowercase = n.lower != 0; /* -1, not said: true */
    o->strip_accents = n.strip < 0 ? TOK_ACCENTS_AUTO
                       : n.strip   ? TOK_ACCENTS_STRIP
                                   : TOK_ACCENTS_KEEP;
    o->chinese_chars = n.cjk != 0;
    o->keep_controls = n.clean == 0;
    return MT_OK;
}

/* tokenizer.json's model (a WordPiece): its unk_token, its "##" prefix (the
 * only one the tokenizer knows) and max_input_chars_per_word. */
static mt_status enc_wordpiece_model(const enc_tok_src *src, tok_options *o, mt_err *err)
{
    const char *p = src->tj_path, *unk, *prefix;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(src->tj, "model");
    mt_status s = enc_string(m, "unk_token", p, "model.", &unk, err);
    if (s == MT_OK)
        s = enc_string(m, "continuing_subword_prefix", p, "model.", &prefix, err);
    if (s != MT_OK)
        return s;
    if (prefix && strcmp(prefix, "##") != 0)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: model.continuing_subword_prefix \"%s\" is not supported (only \"##\")",
                       p, prefix);
    if (!o->unk_token)
        o->unk_token = unk;
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(m, "max_input_chars_per_word");
    if (mx) {
        if (!cJSON_IsNumber(mx) || mx->valuedouble < 1 || mx->valuedouble > 1e9 ||
            mx->valuedouble != (double)(int)mx->valuedouble)
            return mt_fail(err, MT_EFORMAT,
                           "%s: model.max_input_chars_per_word must be a positive integer", p);
        o->max_word_chars = (int)mx->valuedouble;
    }
    return MT_OK;
}

/* tokenizer.json's pre_tokenizer must be BertPreTokenizer, the split the
 * WordPiece tokenizer does. */
static mt_status enc_check_pretok(const enc_tok_src *src, mt_err *err)
{
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(src->tj, "pre_tokenizer");
    const cJSON *type = cJSON_IsObject(pt) ? cJSON_GetObjectItemCaseSensitive(pt, "type") : NULL;
    if (type && !cJSON_IsString(type))
        return mt_fail(err, MT_EFORMAT, "%s: pre_tokenizer.type must be a string", src->tj_path);
    if (!type || strcmp(type->valuestring, "BertPreTokenizer") != 0)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: pre_tokenizer \"%s\" is not supported for a WordPiece tokenizer "
                       "(only BertPreTokenizer)",
                       src->tj_path, type ? type->valuestring : "(none)");
    return MT_OK;
}

/* WordPiece from dir/vocab.txt, with the options the files give and
 * tokenizer.json's added tokens where the folder has one. */
static mt_status enc_load_wordpiece(const enc_tok_src *src, enc_tok *out, char *vocab_path,
                                    size_t cap, mt_err *err)
{
    tok_options o = {.lowercase = true, .chinese_chars = true, .max_word_chars = 100,
                     .added_tokens_json = src->tj ? src->tj_path : NULL,
                     .cls_token = src->cls, .sep_token = src->sep,
                     .pad_token = src->pad, .unk_token = src->unk};
    snprintf(vocab_path, cap, "%s/vocab.txt", src->dir);
    mt_status s = enc_norm_options(src, &o, err);
    if (s == MT_OK && src->tj && (s = enc_wordpiece_model(src, &o, err)) == MT_OK)
        s = enc_check_pretok(src, err);
    return s != MT_OK ? s : tok_load(vocab_path, &o, &out->wp, err);
}

/* ======================================================================
 * The choice of kind
 * ====================================================================== */

/* The row of the folder's kind: tokenizer.json's model.type, or WordPiece
 * without that file. */
static mt_status enc_pick_kind(const enc_tok_src *src, int *row, mt_err *err)
{
    const char *kind = "WordPiece";
    if (src->tj) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(src->tj, "model");
        const cJSON *t = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "type") : NULL;
        if (!cJSON_IsObject(m))
            return mt_fail(err, MT_EFORMAT, "%s: model must be an object", src->tj_path);
        if (!cJSON_IsString(t))
            return mt_fail(err, MT_EFORMAT, "%s: model.type must be a string", src->tj_path);
        kind = t->valuestring;
    }
    for (int k = 0; k < ENC_NKINDS; k++) {
        if (strcmp(enc_tok_kinds[k].kind, kind) != 0)
            continue;
        if (!enc_tok_kinds[k].load)
            return mt_fail(err, MT_EUNSUPPORTED,
                           "%s: model.type \"%s\": %s tokenizers are not supported yet",
                           src->tj_path, kind, kind);
        *row = k;
        return MT_OK;
    }
    char known[128] = "";
    for (int k = 0; k < ENC_NKINDS; k++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "",
                 enc_tok_kinds[k].kind);
    return mt_fail(err, MT_EUNSUPPORTED,
                   "%s: model.type \"%s\" is not a tokenizer kind (known: %s)", src->tj_path,
                   kind, known);
}

/* Parses dir/name into *j when the file exists (else leaves *j NULL). */
static mt_status enc_json_if_there(const char *path, cJSON **j, mt_err *err)
{
    *j = NULL;
    return access(path, F_OK) == 0 ? mt_json_load(path, j, err) : MT_OK;
}

/* A byte-level BPE tokenizer.json (engine/text/bpe.h reads and checks it). */
static mt_status enc_load_bpe(const enc_tok_src *src, enc_tok *out, char *vocab_path,
                              size_t cap, mt_err *err)
{
    snprintf(vocab_path, cap, "%s", src->tj_path);
    return bpe_load(src->tj_path, &out->bpe, err);
}

/* A SentencePiece Unigram tokenizer.json (engine/text/unigram.h reads and
 * checks it). */
static mt_status enc_load_unigram(const enc_tok_src *src, enc_tok *out, char *vocab_path,
                                  size_t cap, mt_err *err)
{
    snprintf(vocab_path, cap, "%s", src->tj_path);
    return unigram_load(src->tj_path, &out->ug, err);
}

/* Its vocabulary against config.json's vocab_size: WordPiece's must be as
 * long, a BPE or Unigram one's no longer (Qwen3's config rounds it up for
 * the embedding table; XLM-R's counts <mask> and may round too). */
static mt_status check_vocab(const enc_tok *t, const char *vpath, int vocab, mt_err *err)
{
    const int n = t->wp ? tok_vocab_size(t->wp)
                  : t->bpe ? bpe_vocab_size(t->bpe) : unigram_vocab_size(t->ug);
    if (t->wp ? n != vocab : n > vocab)
        return mt_fail(err, MT_EFORMAT, t->wp ? "%s has %d entries but config.json vocab_size is %d"
                                              : "%s has %d ids but config.json vocab_size is %d",
                       vpath, n, vocab);
    return MT_OK;
}

mt_status enc_tokenizer_load(const char *dir, const char *cls, const char *sep, const char *pad,
                             const char *unk, int vocab, enc_tok **out, mt_err *err)
{
    if (!dir || !out)
        return mt_fail(err, MT_EINVAL, "enc_tokenizer_load: NULL argument");
    *out = NULL;
    enc_tok_src src = {.dir = dir, .cls = cls, .sep = sep, .pad = pad, .unk = unk};
    snprintf(src.tj_path, sizeof src.tj_path, "%s/tokenizer.json", dir);
    snprintf(src.tc_path, sizeof src.tc_path, "%s/tokenizer_config.json", dir);
    cJSON *tj = NULL, *tc = NULL;
    char vpath[4096];
    int row = 0;
    enc_tok *t = calloc(1, sizeof *t);
    mt_status s = t ? enc_json_if_there(src.tj_path, &tj, err) : mt_fail(err, MT_ENOMEM, "out of memory");
    if (s == MT_OK)
        s = enc_json_if_there(src.tc_path, &tc, err);
    src.tj = tj;
    src.tc = tc;
    if (s == MT_OK && (s = enc_pick_kind(&src, &row, err)) == MT_OK &&
        (s = enc_tok_kinds[row].load(&src, t, vpath, sizeof vpath, err)) == MT_OK)
        s = check_vocab(t, vpath, vocab, err);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    if (s != MT_OK) {
        enc_tok_free(t);
        return s;
    }
    *out = t;
    return MT_OK;
}

void enc_tok_free(enc_tok *t)
{
    if (!t)
        return;
    tok_free(t->wp);
    bpe_free(t->bpe);
    unigram_free(t->ug);
    free(t);
}

mt_status enc_tok_encode(const enc_tok *t, const char *text, size_t len, int32_t *ids,
                         int max_len, int *n, int *full_len, mt_err *err)
{
    return t->wp    ? tok_encode(t->wp, text, len, ids, max_len, n, full_len, err)
           : t->bpe ? bpe_encode(t->bpe, text, len, ids, max_len, n, full_len, err)
                    : unigram_encode(t->ug, text, len, ids, max_len, n, full_len, err);
}

mt_status enc_tok_encode_offsets(const enc_tok *t, const char *text, size_t len, int32_t *ids,
                                 int32_t *offsets, int max_len, int *n, int *full_len,
                                 mt_err *err)
{
    if (t->ug)
        return unigram_encode_offsets(t->ug, text, len, ids, offsets, max_len, n, full_len, err);
    if (t->bpe)
        return bpe_encode_offsets(t->bpe, text, len, ids, offsets, max_len, n, full_len, err);
    return tok_encode_offsets(t->wp, text, len, ids, offsets, max_len, n, full_len, err);
}

/* ======================================================================
 * Pairs
 * ====================================================================== */

void enc_pair_cut(int n1, int n2, int room, int *k1, int *k2)
{
    *k1 = n1;
    *k2 = n2;
    if (n1 + n2 <= room)
        return;
    const bool swap = n1 > n2;
    int s = swap ? n2 : n1, l;   /* the shorter, the longer */
    l = s > room ? s : (s > room - s ? s : room - s);
    if (s + l > room) {
        s = room / 2;
        l = s + room % 2;
    }
    *k1 = swap ? l : s;
    *k2 = swap ? s : l;
    if (*k1 > n1)
        *k1 = n1;
    if (*k2 > n2)
        *k2 = n2;
}

/* A text's WordPiece pieces, without [CLS] and [SEP], into a new array
 * (*p, *np). */
static mt_status wp_pieces(const tok_t *wp, const char *text, size_t len, int32_t **p, int *np,
                           mt_err *err)
{
    int32_t two[2];
    int n = 0, full = 0;
    mt_status st = tok_encode(wp, text, len, two, 2, &n, &full, err);
    int32_t *all = st == MT_OK ? malloc(sizeof *all * (size_t)full) : NULL;
    if (st == MT_OK && !all)
        st = mt_fail(err, MT_ENOMEM, "out of memory");
    if (st == MT_OK)
        st = tok_encode(wp, text, len, all, full, &n, NULL, err);
    if (st != MT_OK) {
        free(all);
        return st;
    }
    memmove(all, all + 1, sizeof *all * (size_t)(n - 2));
    *p = all;
    *np = n - 2;
    return MT_OK;
}

/* BERT's pair template: [CLS] a [SEP] b [SEP], types 0 through the first
 * [SEP] and 1 after. */
static mt_status wp_pair(const tok_t *wp, const char *a, size_t alen, const char *b, size_t blen,
                         int32_t *ids, int max_len, int *n, int *seg, int *full_len, mt_err *err)
{
    int32_t *pa = NULL, *pb = NULL;
    int na = 0, nb = 0, ka, kb;
    mt_status st = wp_pieces(wp, a, alen, &pa, &na, err);
    if (st == MT_OK)
        st = wp_pieces(wp, b, blen, &pb, &nb, err);
    if (st == MT_OK) {
        enc_pair_cut(na, nb, max_len - 3, &ka, &kb);
        int k = 0;
        ids[k++] = tok_cls_id(wp);
        memcpy(ids + k, pa, sizeof *ids * (size_t)ka);
        k += ka;
        ids[k++] = tok_sep_id(wp);
        *seg = k;
        memcpy(ids + k, pb, sizeof *ids * (size_t)kb);
        k += kb;
        ids[k++] = tok_sep_id(wp);
        *n = k;
        if (full_len)
            *full_len = na + nb + 3;
    }
    free(pa);
    free(pb);
    return st;
}

/* The Unigram post-processor's pair template (RobertaProcessing: <s> a
 * </s></s> b </s>, every token type 0) around the two texts' pieces. */
static mt_status ug_pair(const unigram_t *ug, const char *a, size_t alen, const char *b,
                         size_t blen, int32_t *ids, int max_len, int *n, int *seg, int *full_len,
                         mt_err *err)
{
    int32_t *pa = NULL, *pb = NULL;
    int na = 0, nb = 0, ka, kb, added = unigram_pair_added(ug);
    if (max_len < added + 2)
        return mt_fail(err, MT_EINVAL, "a pair needs room for at least %d tokens, not %d",
                       added + 2, max_len);
    mt_status st = unigram_pieces(ug, a, alen, &pa, &na, err);
    if (st == MT_OK)
        st = unigram_pieces(ug, b, blen, &pb, &nb, err);
    if (st == MT_OK) {
        enc_pair_cut(na, nb, max_len - added, &ka, &kb);
        unigram_pair_layout(ug, pa, ka, pb, kb, ids, n, seg);
        if (full_len)
            *full_len = na + nb + added;
    }
    free(pa);
    free(pb);
    return st;
}

mt_status enc_tok_encode_pair(const enc_tok *t, const char *a, size_t alen, const char *b,
                              size_t blen, int32_t *ids, int max_len, int *n, int *seg,
                              int *full_len, mt_err *err)
{
    if (t->ug)
        return ug_pair(t->ug, a, alen, b, blen, ids, max_len, n, seg, full_len, err);
    if (!t->wp)
        return mt_fail(err, MT_EUNSUPPORTED,
                       "this model's tokenizer (byte-level BPE) has no pair template");
    if (max_len < 5)
        return mt_fail(err, MT_EINVAL, "a pair needs room for at least 5 tokens, not %d",
                       max_len);
    return wp_pair(t->wp, a, alen, b, blen, ids, max_len, n, seg, full_len, err);
}

const char *enc_tok_token(const enc_tok *t, int32_t id, bool *special)
{
    if (t->wp) {
        *special = id == tok_cls_id(t->wp) || id == tok_sep_id(t->wp); /* the template's */
        return tok_token(t->wp, id);
    }
    if (t->ug) {
        *special = unigram_is_special(t->ug, id);
        return unigram_token(t->ug, id);
    }
    *special = bpe_is_special(t->bpe, id);
    return bpe_token(t->bpe, id);
}

mt_status enc_tok_decode(const enc_tok *t, const int32_t *ids, int n, bool skip_special,
                         char **out, mt_err *err)
{
    return t->wp    ? tok_decode(t->wp, ids, n, skip_special, out, err)
           : t->bpe ? bpe_decode(t->bpe, ids, n, skip_special, out, err)
                    : unigram_decode(t->ug, ids, n, skip_special, out, err);
}

const tok_t *enc_tok_wordpiece(const enc_tok *t)
{
    return t ? t->wp : NULL;
}
