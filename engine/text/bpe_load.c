/* bpe_load.c: reads a byte-level BPE tokenizer.json (engine/text/bpe.h):
 * checks that each part is one this tokenizer implements (the normalizer
 * NFC or none, the pre-tokenizer Qwen2's Split + ByteLevel without its
 * regex, a BPE model without dropout, unk, byte fallback or affixes, added
 * tokens matched verbatim, the post-processor's single template, the
 * ByteLevel decoder), refusing any other by the file and field, and builds
 * the vocabulary (by bytes) and merge tables.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/text/bpe_internal.h"
#include "engine/text/bpe_unicode.h"

/* Qwen2's pre-tokenizer regex, the one bpe_pretok.c implements. */
static const char bpe_qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static bool bpe_printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The others (0-32, 127-160, 173) take 256, 257, ... in byte order. */
uint32_t bpe_byte_char(unsigned b)
{
    if (bpe_printable(b))
        return b;
    return b <= 32 ? 256 + b : b == 173 ? 256 + 67 : 256 + 33 + (b - 127);
}

int bpe_char_byte(uint32_t c)
{
    if (c < 256)
        return bpe_printable(c) ? (int)c : -1;
    if (c >= 256 + 68)
        return -1;
    c -= 256;
    return c < 33 ? (int)c : c == 67 ? 173 : (int)(127 + c - 33);
}

/* A token's text (UTF-8) back to bytes into out (room: strlen); returns the
 * count, or -1 when a character is not a byte-level one. */
static long bpe_unmap(const char *s, unsigned char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    long n = 0;
    while (*u) {
        uint32_t c = *u++;
        if (c >= 0xC0) {
            int extra = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
            c &= 0x3Fu >> extra;
            for (int k = 0; k < extra && *u; k++)
                c = c << 6 | (*u++ & 0x3Fu);
        }
        int b = bpe_char_byte(c);
        if (b < 0)
            return -1;
        out[n++] = (unsigned char)b;
    }
    return n;
}

static size_t bpe_hash(const unsigned char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < len; k++)
        h = (h ^ s[k]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

int32_t bpe_vocab_find(const bpe_t *t, const unsigned char *s, size_t len)
{
    for (size_t h = bpe_hash(s, len) & t->vmask;; h = (h + 1) & t->vmask) {
        const bpe_slot *v = &t->vocab[h];
        if (v->id < 0)
            return -1;
        if (v->len == len && memcmp(t->bytes + v->off, s, len) == 0)
            return v->id;
    }
}

static size_t bpe_pow2(size_t n)
{
    size_t m = 1024;
    while (m < n * 2)
        m <<= 1;
    return m;
}

/* One vocab entry: the id's text and, when byte-level, its bytes indexed. */
static mt_status bpe_vocab_entry(bpe_t *t, const cJSON *e, const char *path, mt_err *err)
{
    double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
    if (v < 0 || v >= t->ntok || v != (double)(int32_t)v)
        return mt_fail(err, MT_EFORMAT, "%s: model.vocab[\"%s\"] must be an integer id below %d",
                       path, e->string, t->ntok);
    int32_t id = (int32_t)v;
    if (t->tok[id])
        return mt_fail(err, MT_EFORMAT, "%s: model.vocab: id %d is given twice", path, id);
    size_t len = strlen(e->string);
    t->tok[id] = malloc(len + 1);
    if (!t->tok[id])
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    memcpy(t->tok[id], e->string, len + 1);
    unsigned char *b = (unsigned char *)t->bytes + t->nbytes;
    long nb = bpe_unmap(e->string, b);
    if (nb <= 0)
        return MT_OK; /* not byte-level text: the merges never make it */
    size_t h = bpe_hash(b, (size_t)nb) & t->vmask;
    while (t->vocab[h].id >= 0) {
        const bpe_slot *o = &t->vocab[h];
        if (o->len == (size_t)nb && memcmp(t->bytes + o->off, b, (size_t)nb) == 0)
            return mt_fail(err, MT_EFORMAT, "%s: model.vocab: \"%s\" and id %d are the same bytes",
                           path, e->string, o->id);
        h = (h + 1) & t->vmask;
    }
    t->vocab[h] = (bpe_slot){.off = (uint32_t)t->nbytes, .len = (uint32_t)nb, .id = id};
    t->nbytes += (size_t)nb;
    return MT_OK;
}

static mt_status bpe_read_vocab(bpe_t *t, const cJSON *vocab, const cJSON *added,
                                const char *path, mt_err *err)
{
    if (!cJSON_IsObject(vocab))
        return mt_fail(err, MT_EFORMAT, "%s: model.vocab must be an object", path);
    size_t n = 0, chars = 0;
    int top = -1;
    for (const cJSON *e = vocab->child; e; e = e->next, n++) {
        chars += strlen(e->string);
        if (cJSON_IsNumber(e) && e->valuedouble > top && e->valuedouble < 1e9)
            top = (int)e->valuedouble;
    }
    /* Room for the added tokens too: those not in the vocabulary take ids
     * from the vocabulary's size on (bpe_added_id). */
    size_t room = n + (size_t)(added ? cJSON_GetArraySize(added) : 0);
    t->nvocab = (int)n;
    t->ntok = top + 1;
    t->cap = (size_t)t->ntok > room ? (size_t)t->ntok : room;
    t->tok = calloc(t->cap + 1, sizeof *t->tok);
    t->bytes = malloc(chars + 1);
    t->vmask = bpe_pow2(n) - 1;
    t->vocab = malloc((t->vmask + 1) * sizeof *t->vocab);
    if (!t->tok || !t->bytes || !t->vocab)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for model.vocab", path);
    for (size_t k = 0; k <= t->vmask; k++)
        t->vocab[k].id = -1;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        mt_status s = bpe_vocab_entry(t, e, path, err);
        if (s != MT_OK)
            return s;
    }
    for (unsigned b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = bpe_vocab_find(t, &c, 1);
    }
    return MT_OK;
}

/* The id of one side of a merge, by its byte-level text. */
static int32_t bpe_side(const bpe_t *t, const char *s, size_t len, unsigned char *buf,
                        size_t *nb)
{
    char tmp[1024];
    if (len >= sizeof tmp)
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    long n = bpe_unmap(tmp, buf);
    if (n <= 0)
        return -1;
    *nb = (size_t)n;
    return bpe_vocab_find(t, buf, (size_t)n);
}

static mt_status bpe_merge_entry(bpe_t *t, const cJSON *e, int k, const char *path, mt_err *err)
{
    const char *a, *b;
    size_t la, lb;
    if (cJSON_IsString(e)) {
        a = e->valuestring;
        const char *sp = strchr(a, ' ');
        if (!sp || sp == a || !sp[1] || strchr(sp + 1, ' '))
            return mt_fail(err, MT_EFORMAT, "%s: model.merges[%d] must be \"left right\", not "
                           "\"%.60s\"", path, k, a);
        la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
               cJSON_IsString(e->child) && cJSON_IsString(e->child->next) &&
               e->child->valuestring[0] && e->child->next->valuestring[0]) {
        a = e->child->valuestring, la = strlen(a);
        b = e->child->next->valuestring, lb = strlen(b);
    } else {
        return mt_fail(err, MT_EFORMAT, "%s: model.merges[%d] must be a string \"left right\" "
                       "or a pair of strings", path, k);
    }
    unsigned char ab[2048];
    size_t na = 0, nb = 0;
    int32_t ia = bpe_side(t, a, la, ab, &na), ib = bpe_side(t, b, lb, ab + 1024, &nb);
    if (ia < 0 || ib < 0)
        return mt_fail(err, MT_EFORMAT, "%s: model.merges[%d]: \"%.*s\" is not in model.vocab",
                       path, k, ia < 0 ? (int)la : (int)lb, ia < 0 ? a : b);
    memmove(ab + na, ab + 1024, nb);
    int32_t id = bpe_vocab_find(t, ab, na + nb);
    if (id < 0)
        return mt_fail(err, MT_EFORMAT, "%s: model.merges[%d]: \"%.*s%.*s\" is not in "
                       "model.vocab", path, k, (int)la, a, (int)lb, b);
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->mmask;
    while (t->merges[h].key != UINT64_MAX && t->merges[h].key != key)
        h = (h + 1) & t->mmask;
    t->merges[h] = (bpe_merge){.key = key, .rank = k, .id = id}; /* a later one wins, as in HF */
    return MT_OK;
}

static mt_status bpe_read_merges(bpe_t *t, const cJSON *merges, const char *path, mt_err *err)
{
    if (!cJSON_IsArray(merges))
        return mt_fail(err, MT_EFORMAT, "%s: model.merges must be an array", path);
    t->mmask = bpe_pow2((size_t)cJSON_GetArraySize(merges)) - 1;
    t->merges = malloc((t->mmask + 1) * sizeof *t->merges);
    if (!t->merges)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for model.merges", path);
    for (size_t k = 0; k <= t->mmask; k++)
        t->merges[k].key = UINT64_MAX;
    int k = 0;
    for (const cJSON *e = merges->child; e; e = e->next, k++) {
        mt_status s = bpe_merge_entry(t, e, k, path, err);
        if (s != MT_OK)
            return s;
    }
    return MT_OK;
}

/* ---- the parts of tokenizer.json ---- */

static const char *bpe_type(const cJSON *o)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "(none)";
}

static bool bpe_null(const cJSON *o) { return !o || cJSON_IsNull(o); }

/* Whether field f of o is absent, null, false (or "" when empty_ok). */
static bool bpe_off(const cJSON *o, const char *f, bool empty_ok)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f);
    return bpe_null(v) || cJSON_IsFalse(v) ||
           (empty_ok && cJSON_IsString(v) && !v->valuestring[0]);
}

static mt_status bpe_check_normalizer(bpe_t *t, const cJSON *nz, const char *path, mt_err *err)
{
    if (bpe_null(nz))
        return MT_OK;
    if (!strcmp(bpe_type(nz), "NFC")) {
        t->nfc = true;
        return MT_OK;
    }
    if (strcmp(bpe_type(nz), "Sequence"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: normalizer.type \"%s\" is not supported "
                       "(NFC, a Sequence of NFC, or null)", path, bpe_type(nz));
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(nz, "normalizers");
    int k = 0;
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next, k++) {
        if (strcmp(bpe_type(e), "NFC"))
            return mt_fail(err, MT_EUNSUPPORTED, "%s: normalizer.normalizers[%d].type \"%s\" is "
                           "not supported (NFC)", path, k, bpe_type(e));
        t->nfc = true;
    }
    return MT_OK;
}

static mt_status bpe_check_split(const cJSON *sp, const char *path, mt_err *err)
{
    const char *f = "pre_tokenizer.pretokenizers[0]";
    if (strcmp(bpe_type(sp), "Split"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.type \"%s\" is not supported (Split with "
                       "Qwen2's regex)", path, f, bpe_type(sp));
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sp, "pattern");
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (!cJSON_IsString(rx) || strcmp(rx->valuestring, bpe_qwen2_regex))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.pattern is not supported (only Qwen2's "
                       "regex is implemented)", path, f);
    const cJSON *bh = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
    if (!cJSON_IsString(bh) || strcmp(bh->valuestring, "Isolated"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.behavior %s is not supported (Isolated)",
                       path, f, cJSON_IsString(bh) ? bh->valuestring : "(none)");
    if (!bpe_off(sp, "invert", false))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.invert true is not supported", path, f);
    return MT_OK;
}

static mt_status bpe_check_pretok(const cJSON *pt, const char *path, mt_err *err)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    if (strcmp(bpe_type(pt), "Sequence") || cJSON_GetArraySize(list) != 2)
        return mt_fail(err, MT_EUNSUPPORTED, "%s: pre_tokenizer.type \"%s\" is not supported "
                       "(a Sequence of Qwen2's Split and ByteLevel)", path, bpe_type(pt));
    mt_status s = bpe_check_split(list->child, path, err);
    if (s != MT_OK)
        return s;
    const cJSON *bl = list->child->next;
    const char *f = "pre_tokenizer.pretokenizers[1]";
    if (strcmp(bpe_type(bl), "ByteLevel"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.type \"%s\" is not supported (ByteLevel)",
                       path, f, bpe_type(bl));
    if (!bpe_off(bl, "add_prefix_space", false))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.add_prefix_space true is not supported",
                       path, f);
    if (!bpe_off(bl, "use_regex", false))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.use_regex true is not supported (GPT-2's "
                       "regex is not implemented)", path, f);
    return MT_OK;
}

static mt_status bpe_check_model(bpe_t *t, const cJSON *m, const char *path, mt_err *err)
{
    if (strcmp(bpe_type(m), "BPE"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: model.type \"%s\" is not supported (BPE)", path,
                       bpe_type(m));
    /* fuse_unk does nothing without an unk_token */
    static const char *const off[] = {"dropout", "unk_token", "byte_fallback"};
    for (size_t k = 0; k < sizeof off / sizeof off[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, off[k]);
        if (!bpe_off(m, off[k], false) && !(k == 0 && cJSON_IsNumber(v) && v->valuedouble == 0))
            return mt_fail(err, MT_EUNSUPPORTED, "%s: model.%s is not supported (null or false "
                           "only)", path, off[k]);
    }
    if (!bpe_off(m, "continuing_subword_prefix", true) || !bpe_off(m, "end_of_word_suffix", true))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: model.%s is not supported (null only)", path,
                       bpe_off(m, "end_of_word_suffix", true) ? "continuing_subword_prefix"
                                                               : "end_of_word_suffix");
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(m, "ignore_merges");
    if (!bpe_null(im) && !cJSON_IsBool(im))
        return mt_fail(err, MT_EFORMAT, "%s: model.ignore_merges must be a boolean", path);
    t->ignore_merges = cJSON_IsTrue(im);
    return MT_OK;
}

/* The id Hugging Face gives an added token when it loads tokenizer.json
 * (the "id" written there is only compared, with a warning): the
 * vocabulary's id of the same text, else the next id from the vocabulary's
 * size (its number of entries) on. */
static int32_t bpe_added_id(const bpe_t *t, const char *content, int32_t *next)
{
    size_t len = strlen(content);
    unsigned char *b = malloc(len + 1);
    long nb = b ? bpe_unmap(content, b) : -1;
    int32_t id = nb > 0 ? bpe_vocab_find(t, b, (size_t)nb) : -1;
    free(b);
    return id >= 0 ? id : (*next)++;
}

static bool bpe_added_seen(const bpe_t *t, const char *content)
{
    for (int k = 0; k < t->added.n; k++)
        if (!strcmp(t->added.tok[k].content, content))
            return true;
    return false;
}

static mt_status bpe_read_added(bpe_t *t, const cJSON *arr, const char *path, mt_err *err)
{
    int32_t next = t->nvocab;
    if (!bpe_null(arr) && !cJSON_IsArray(arr))
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens must be an array", path);
    static const char *const off[] = {"normalized", "lstrip", "rstrip", "single_word"};
    int k = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next, k++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d].content must be a non-empty "
                           "string", path, k);
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 ||
            id->valuedouble != (double)(int32_t)id->valuedouble)
            return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d].id must be an integer >= 0",
                           path, k);
        for (size_t f = 0; f < sizeof off / sizeof off[0]; f++)
            if (!bpe_off(e, off[f], false))
                return mt_fail(err, MT_EUNSUPPORTED, "%s: added_tokens[%d].%s true is not "
                               "supported", path, k, off[f]);
        if (bpe_added_seen(t, c->valuestring))
            continue; /* HF adds a text once */
        int32_t i = bpe_added_id(t, c->valuestring, &next);
        if ((size_t)i >= t->cap)
            return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d]: no room for id %d", path, k, i);
        if (i >= t->ntok)
            t->ntok = i + 1;
        mt_status s = tok_added_push(&t->added, c->valuestring, i, false,
                                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")),
                                     err);
        if (s != MT_OK)
            return s;
        free(t->tok[i]); /* the added token's text wins, as in HF's id_to_token */
        t->tok[i] = strdup(c->valuestring);
        if (!t->tok[i])
            return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    }
    return MT_OK;
}

/* TemplateProcessing's single template: special tokens around $A. */
static mt_status bpe_read_template(bpe_t *t, const cJSON *pp, const char *f, const char *path,
                                   mt_err *err)
{
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    if (!cJSON_IsArray(single))
        return mt_fail(err, MT_EFORMAT, "%s: %s.single must be an array", path, f);
    bool seen_a = false;
    int k = 0;
    for (const cJSON *e = single->child; e; e = e->next, k++) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(seq ? seq : st, "id");
        if (!cJSON_IsString(id))
            return mt_fail(err, MT_EFORMAT, "%s: %s.single[%d] must be a Sequence or a "
                           "SpecialToken with an id", path, f, k);
        if (seq) {
            if (strcmp(id->valuestring, "A") || seen_a)
                return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.single[%d]: only one sequence, "
                               "$A, is supported", path, f, k);
            seen_a = true;
            continue;
        }
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(sp, id->valuestring), "ids");
        if (!cJSON_IsArray(ids))
            return mt_fail(err, MT_EFORMAT, "%s: %s.special_tokens[\"%s\"].ids must be an array",
                           path, f, id->valuestring);
        for (const cJSON *i = ids->child; i; i = i->next) {
            int *cnt = seen_a ? &t->npost : &t->npre;
            if (!cJSON_IsNumber(i) || i->valuedouble < 0 || i->valuedouble >= t->ntok ||
                *cnt == BPE_MAX_POST)
                return mt_fail(err, MT_EFORMAT, "%s: %s.special_tokens[\"%s\"].ids: an id below "
                               "%d expected (at most %d tokens a side)", path, f, id->valuestring,
                               t->ntok, BPE_MAX_POST);
            (seen_a ? t->post : t->pre)[(*cnt)++] = (int32_t)i->valuedouble;
        }
    }
    if (!seen_a)
        return mt_fail(err, MT_EFORMAT, "%s: %s.single has no $A", path, f);
    return MT_OK;
}

static mt_status bpe_read_post(bpe_t *t, const cJSON *pp, const char *path, mt_err *err)
{
    if (bpe_null(pp))
        return MT_OK;
    if (!strcmp(bpe_type(pp), "ByteLevel")) { /* its trim_offsets moves offsets, never ids */
        t->trim = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pp, "trim_offsets"));
        t->trim_prefix = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pp, "add_prefix_space"));
        return MT_OK;
    }
    if (!strcmp(bpe_type(pp), "TemplateProcessing"))
        return bpe_read_template(t, pp, "post_processor", path, err);
    if (strcmp(bpe_type(pp), "Sequence"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: post_processor.type \"%s\" is not supported "
                       "(TemplateProcessing, ByteLevel, a Sequence of them, or null)", path,
                       bpe_type(pp));
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
    int k = 0, templates = 0;
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next, k++) {
        char f[64];
        snprintf(f, sizeof f, "post_processor.processors[%d]", k);
        if (!strcmp(bpe_type(e), "ByteLevel")) {
            t->trim |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "trim_offsets"));
            t->trim_prefix |=
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "add_prefix_space"));
            continue;
        }
        if (strcmp(bpe_type(e), "TemplateProcessing") || templates++)
            return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.type \"%s\" is not supported "
                           "(ByteLevel, or one TemplateProcessing)", path, f, bpe_type(e));
        mt_status s = bpe_read_template(t, e, f, path, err);
        if (s != MT_OK)
            return s;
    }
    return MT_OK;
}

static mt_status bpe_read(bpe_t *t, const cJSON *root, const char *path, mt_err *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    mt_status s = bpe_check_model(t, model, path, err);
    if (s == MT_OK)
        s = bpe_check_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), path,
                                 err);
    if (s == MT_OK)
        s = bpe_check_pretok(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path, err);
    if (s == MT_OK && strcmp(bpe_type(dec), "ByteLevel"))
        s = mt_fail(err, MT_EUNSUPPORTED, "%s: decoder.type \"%s\" is not supported (ByteLevel)",
                    path, bpe_type(dec));
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (s == MT_OK)
        s = bpe_read_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"),
                           cJSON_IsArray(added) ? added : NULL, path, err);
    if (s == MT_OK)
        s = bpe_read_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), path, err);
    if (s == MT_OK)
        s = bpe_read_added(t, added, path, err);
    if (s == MT_OK)
        s = bpe_read_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), path, err);
    return s;
}

mt_status bpe_load(const char *path, bpe_t **out, mt_err *err)
{
    *out = NULL;
    bpu_init();
    bpe_t *t = calloc(1, sizeof *t);
    if (!t)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    cJSON *root = NULL;
    mt_status s = mt_json_load(path, &root, err);
    if (s == MT_OK)
        s = bpe_read(t, root, path, err);
    cJSON_Delete(root);
    if (s != MT_OK) {
        bpe_free(t);
        return s;
    }
    *out = t;
    return MT_OK;
}

void bpe_free(bpe_t *t)
{
    if (!t)
        return;
    for (size_t k = 0; t->tok && k < t->cap; k++)
        free(t->tok[k]);
    free(t->tok);
    free(t->bytes);
    free(t->vocab);
    free(t->merges);
    tok_added_free(&t->added);
    free(t);
}
