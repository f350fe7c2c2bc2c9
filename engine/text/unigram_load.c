/* unigram_load.c: reads a Unigram tokenizer.json (engine/text/unigram.h):
 * checks that each part is one this tokenizer implements (the normalizer
 * Precompiled and Replace steps, the Metaspace pre-tokenizer alone or
 * after WhitespaceSplit, a Unigram model with an unk_id, added tokens
 * with lstrip/rstrip but not single_word, RobertaProcessing or
 * TemplateProcessing, the Metaspace, ByteFallback and Fuse decoders),
 * refusing any other by the file and field, and builds the pieces' trie.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/text/grapheme.h"
#include "engine/text/unigram_internal.h"

static const char *ug_type(const cJSON *o)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "(none)";
}

static bool ug_null(const cJSON *o) { return !o || cJSON_IsNull(o); }

static const cJSON *ug_get(const cJSON *o, const char *f)
{
    return cJSON_GetObjectItemCaseSensitive(o, f);
}

/* ---- the pieces' trie ---- */

static size_t ug_pow2(size_t n)
{
    size_t m = 1024;
    while (m < n * 2)
        m <<= 1;
    return m;
}

static inline size_t ug_edge_hash(uint32_t key, size_t mask)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 24) & mask;
}

/* The child of node on byte b, or -1. */
static inline int32_t ug_child(const unigram_t *t, int32_t node, unsigned char b)
{
    if (node == 0)
        return t->root[b];
    uint32_t key = (uint32_t)node << 8 | b;
    for (size_t h = ug_edge_hash(key, t->emask);; h = (h + 1) & t->emask) {
        if (t->edge[h].child < 0)
            return -1;
        if (t->edge[h].key == key)
            return t->edge[h].child;
    }
}

int32_t ug_piece_id(const unigram_t *t, const unsigned char *s, size_t n)
{
    int32_t node = 0;
    for (size_t i = 0; i < n && node >= 0; i++)
        node = ug_child(t, node, s[i]);
    return node >= 0 ? t->node_id[node] : -1;
}

/* Puts an edge into the hash (room known to be there). */
static void ug_edge_put(ug_edge *e, size_t mask, uint32_t key, int32_t child)
{
    size_t h = ug_edge_hash(key, mask);
    while (e[h].child >= 0)
        h = (h + 1) & mask;
    e[h] = (ug_edge){.key = key, .child = child};
}

/* Doubles the edge hash when it is half full (it starts at the pieces'
 * count: a vocabulary's trie has a few nodes a piece, not one a byte). */
static bool ug_edge_room(unigram_t *t)
{
    if (2 * (t->nedge + 1) <= t->emask + 1)
        return true;
    size_t mask = 2 * (t->emask + 1) - 1;
    ug_edge *e = malloc((mask + 1) * sizeof *e);
    if (!e)
        return false;
    for (size_t k = 0; k <= mask; k++)
        e[k].child = -1;
    for (size_t k = 0; k <= t->emask; k++)
        if (t->edge[k].child >= 0)
            ug_edge_put(e, mask, t->edge[k].key, t->edge[k].child);
    free(t->edge);
    t->edge = e;
    t->emask = mask;
    return true;
}

/* Adds piece id's bytes to the trie (a later piece of the same text wins,
 * as in tokenizers' map from text to id). */
static bool ug_trie_add(unigram_t *t, const unsigned char *s, size_t n, int32_t id)
{
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = ug_child(t, node, s[i]);
        if (c < 0) {
            if (node && !ug_edge_room(t))
                return false;
            c = (int32_t)t->nnode++;
            t->node_id[c] = -1;
            if (node == 0)
                t->root[s[i]] = c;
            else
                ug_edge_put(t->edge, t->emask, (uint32_t)node << 8 | s[i], c), t->nedge++;
        }
        node = c;
    }
    t->node_id[node] = id;
    return true;
}

/* ---- model ---- */

static mt_status ug_vocab_entry(unigram_t *t, const cJSON *e, int k, const char *path,
                                mt_err *err)
{
    const cJSON *p = cJSON_GetArrayItem(e, 0), *s = cJSON_GetArrayItem(e, 1);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(p) ||
        !cJSON_IsNumber(s))
        return mt_fail(err, MT_EFORMAT, "%s: model.vocab[%d] must be [piece, score]", path, k);
    t->tok[k] = strdup(p->valuestring);
    if (!t->tok[k])
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    t->score[k] = s->valuedouble;
    if (!ug_trie_add(t, (const unsigned char *)p->valuestring, strlen(p->valuestring), k))
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for model.vocab's trie", path);
    return MT_OK;
}

static mt_status ug_read_vocab(unigram_t *t, const cJSON *vocab, int nadded, const char *path,
                               mt_err *err)
{
    if (!cJSON_IsArray(vocab) || cJSON_GetArraySize(vocab) == 0)
        return mt_fail(err, MT_EFORMAT, "%s: model.vocab must be a non-empty array", path);
    size_t n = (size_t)cJSON_GetArraySize(vocab), bytes = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        const cJSON *p = cJSON_GetArrayItem(e, 0);
        bytes += cJSON_IsString(p) ? strlen(p->valuestring) : 0;
    }
    t->nvocab = t->ntok = (int)n;
    t->cap = n + (size_t)nadded;
    t->tok = calloc(t->cap + 1, sizeof *t->tok);
    t->score = calloc(n, sizeof *t->score);
    t->node_id = malloc((bytes + 1) * sizeof *t->node_id);
    t->emask = ug_pow2(n) - 1;
    t->edge = malloc((t->emask + 1) * sizeof *t->edge);
    if (!t->tok || !t->score || !t->node_id || !t->edge)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for model.vocab", path);
    for (size_t k = 0; k <= t->emask; k++)
        t->edge[k].child = -1;
    memset(t->root, 0xFF, sizeof t->root);
    t->nnode = 1;
    t->node_id[0] = -1;
    double lo = 1e300;
    int k = 0;
    for (const cJSON *e = vocab->child; e; e = e->next, k++) {
        mt_status s = ug_vocab_entry(t, e, k, path, err);
        if (s != MT_OK)
            return s;
        lo = t->score[k] < lo ? t->score[k] : lo;
    }
    t->unk_score = lo - 10.0;
    int32_t *ids = realloc(t->node_id, t->nnode * sizeof *ids); /* one a node, not a byte */
    if (ids)
        t->node_id = ids;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = ug_piece_id(t, (const unsigned char *)name, 6);
    }
    return MT_OK;
}

static mt_status ug_check_model(unigram_t *t, const cJSON *m, int nadded, const char *path,
                                mt_err *err)
{
    if (strcmp(ug_type(m), "Unigram"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: model.type \"%s\" is not supported (Unigram)",
                       path, ug_type(m));
    const cJSON *bf = ug_get(m, "byte_fallback"), *unk = ug_get(m, "unk_id");
    if (!ug_null(bf) && !cJSON_IsBool(bf))
        return mt_fail(err, MT_EFORMAT, "%s: model.byte_fallback must be a boolean", path);
    t->byte_fallback = cJSON_IsTrue(bf);
    mt_status s = ug_read_vocab(t, ug_get(m, "vocab"), nadded, path, err);
    if (s != MT_OK)
        return s;
    if (ug_null(unk))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: model.unk_id null is not supported (unknown "
                       "characters need an <unk>)", path);
    if (!cJSON_IsNumber(unk) || unk->valuedouble < 0 || unk->valuedouble >= t->nvocab ||
        unk->valuedouble != (double)(int32_t)unk->valuedouble)
        return mt_fail(err, MT_EFORMAT, "%s: model.unk_id must be an id below %d", path,
                       t->nvocab);
    t->unk_id = (int32_t)unk->valuedouble;
    return MT_OK;
}

/* ---- normalizer ---- */

static int ug_b64(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
           : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 with padding into a new buffer; NULL when malformed. */
static unsigned char *ug_unbase64(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len % 4)
        return NULL;
    unsigned char *o = malloc(len / 4 * 3 + 1);
    size_t w = 0;
    for (size_t i = 0; o && i < len; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++)
            v[k] = s[i + k] == '=' && i + 4 == len && k >= 2 ? -2 : ug_b64(s[i + k]);
        if (v[0] < 0 || v[1] < 0 || v[2] == -1 || v[3] == -1 || (v[2] == -2 && v[3] != -2)) {
            free(o);
            return NULL;
        }
        o[w++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
        if (v[2] >= 0)
            o[w++] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
        if (v[3] >= 0)
            o[w++] = (unsigned char)((v[2] & 3) << 6 | v[3]);
    }
    *n = w;
    return o;
}

static mt_status ug_read_precompiled(unigram_t *t, const cJSON *nz, const char *f,
                                     const char *path, mt_err *err)
{
    char field[96];
    snprintf(field, sizeof field, "%s.precompiled_charsmap", f);
    if (t->cmap.unit)
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s: a second Precompiled is not supported",
                       path, f);
    const cJSON *cm = ug_get(nz, "precompiled_charsmap");
    size_t n = 0;
    unsigned char *b = cJSON_IsString(cm) ? ug_unbase64(cm->valuestring, &n) : NULL;
    if (!b)
        return mt_fail(err, MT_EFORMAT, "%s: %s must be a base64 string", path, field);
    mt_status s = ug_charsmap_parse(&t->cmap, b, n, path, field, err);
    free(b);
    return s;
}

static mt_status ug_read_replace(ug_norm_step *st, const cJSON *nz, const char *f,
                                 const char *path, mt_err *err)
{
    const cJSON *pat = ug_get(nz, "pattern"), *with = ug_get(nz, "content");
    const cJSON *str = ug_get(pat, "String"), *rx = ug_get(pat, "Regex");
    if (!cJSON_IsString(with))
        return mt_fail(err, MT_EFORMAT, "%s: %s.content must be a string", path, f);
    if (cJSON_IsString(rx) && !strcmp(rx->valuestring, " {2,}"))
        st->kind = UG_NORM_SPACES;
    else if (cJSON_IsString(str) && str->valuestring[0])
        st->kind = UG_NORM_REPLACE;
    else
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.pattern is not supported (a non-empty "
                       "String, or the Regex \" {2,}\")", path, f);
    st->pat = strdup(st->kind == UG_NORM_SPACES ? " " : str->valuestring);
    st->with = strdup(with->valuestring);
    if (!st->pat || !st->with)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    st->npat = strlen(st->pat);
    st->nwith = strlen(st->with);
    return MT_OK;
}

static mt_status ug_norm_step_read(unigram_t *t, const cJSON *nz, const char *f,
                                   const char *path, mt_err *err)
{
    ug_norm_step *st = &t->norm[t->nnorm++];
    if (!strcmp(ug_type(nz), "Precompiled")) {
        st->kind = UG_NORM_PRECOMPILED;
        return ug_read_precompiled(t, nz, f, path, err);
    }
    if (!strcmp(ug_type(nz), "Replace"))
        return ug_read_replace(st, nz, f, path, err);
    return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.type \"%s\" is not supported (Precompiled, "
                   "Replace, a Sequence of them, or null)", path, f, ug_type(nz));
}

static mt_status ug_read_normalizer(unigram_t *t, const cJSON *nz, const char *path,
                                    mt_err *err)
{
    if (ug_null(nz))
        return MT_OK;
    bool seq = !strcmp(ug_type(nz), "Sequence");
    const cJSON *list = seq ? ug_get(nz, "normalizers") : NULL;
    if (seq && !cJSON_IsArray(list))
        return mt_fail(err, MT_EFORMAT, "%s: normalizer.normalizers must be an array", path);
    int n = seq ? cJSON_GetArraySize(list) : 1;
    t->norm = calloc((size_t)n + 1, sizeof *t->norm);
    if (!t->norm)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    if (!seq)
        return ug_norm_step_read(t, nz, "normalizer", path, err);
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        char f[64];
        snprintf(f, sizeof f, "normalizer.normalizers[%d]", k);
        mt_status s = ug_norm_step_read(t, e, f, path, err);
        if (s != MT_OK)
            return s;
    }
    return MT_OK;
}

/* ---- pre-tokenizer and decoder: Metaspace ---- */

/* Metaspace's replacement (one character) and prepend scheme, as
 * tokenizers reads them (add_prefix_space false needs "never"). */
static mt_status ug_read_metaspace(const cJSON *ms, const char *f, char *repl, size_t *nrepl,
                                   int *prepend, bool *split, const char *path, mt_err *err)
{
    const cJSON *r = ug_get(ms, "replacement"), *ps = ug_get(ms, "prepend_scheme");
    const cJSON *ap = ug_get(ms, "add_prefix_space"), *sp = ug_get(ms, "split");
    size_t len = cJSON_IsString(r) ? strlen(r->valuestring) : 0, k = 0;
    if (len)
        ug_decode((const unsigned char *)r->valuestring, &k);
    if (!len || k != len || len > 4)
        return mt_fail(err, MT_EFORMAT, "%s: %s.replacement must be one character", path, f);
    memcpy(repl, r->valuestring, len + 1);
    *nrepl = len;
    const char *scheme = ug_null(ps) ? "always" : cJSON_IsString(ps) ? ps->valuestring : "";
    *prepend = !strcmp(scheme, "always") ? UG_PREPEND_ALWAYS
               : !strcmp(scheme, "first") ? UG_PREPEND_FIRST
               : !strcmp(scheme, "never") ? UG_PREPEND_NEVER : -1;
    if (*prepend < 0)
        return mt_fail(err, MT_EFORMAT, "%s: %s.prepend_scheme must be \"always\", \"first\" or "
                       "\"never\"", path, f);
    if (cJSON_IsFalse(ap) && *prepend != UG_PREPEND_NEVER)
        return mt_fail(err, MT_EFORMAT, "%s: %s.add_prefix_space false does not match "
                       "prepend_scheme \"%s\"", path, f, scheme);
    if (!ug_null(sp) && !cJSON_IsBool(sp))
        return mt_fail(err, MT_EFORMAT, "%s: %s.split must be a boolean", path, f);
    if (split)
        *split = !cJSON_IsFalse(sp);
    return MT_OK;
}

static mt_status ug_read_pretok(unigram_t *t, const cJSON *pt, const char *path, mt_err *err)
{
    const char *f = "pre_tokenizer";
    if (!strcmp(ug_type(pt), "Sequence")) {
        const cJSON *list = ug_get(pt, "pretokenizers");
        if (cJSON_GetArraySize(list) != 2 || strcmp(ug_type(list->child), "WhitespaceSplit"))
            return mt_fail(err, MT_EUNSUPPORTED, "%s: pre_tokenizer.pretokenizers is not "
                           "supported (only [WhitespaceSplit, Metaspace])", path);
        t->ws_split = true;
        pt = list->child->next;
        f = "pre_tokenizer.pretokenizers[1]";
    }
    if (strcmp(ug_type(pt), "Metaspace"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.type \"%s\" is not supported (Metaspace, "
                       "or a Sequence of WhitespaceSplit and Metaspace)", path, f, ug_type(pt));
    return ug_read_metaspace(pt, f, t->repl, &t->nrepl, &t->prepend, &t->ms_split, path, err);
}

static mt_status ug_read_decoder(unigram_t *t, const cJSON *d, const char *path, mt_err *err)
{
    bool seq = !strcmp(ug_type(d), "Sequence");
    const cJSON *list = seq ? ug_get(d, "decoders") : NULL;
    const cJSON *e = seq ? (cJSON_IsArray(list) ? list->child : NULL) : d;
    for (int k = 0; e; e = seq ? e->next : NULL, k++) {
        char f[64];
        snprintf(f, sizeof f, seq ? "decoder.decoders[%d]" : "decoder", k);
        const char *ty = ug_type(e);
        int kind = !strcmp(ty, "Metaspace") ? UG_DEC_METASPACE
                   : !strcmp(ty, "ByteFallback") ? UG_DEC_BYTEFALLBACK
                   : !strcmp(ty, "Fuse") ? UG_DEC_FUSE : -1;
        if (kind < 0 || t->ndec == 4)
            return mt_fail(err, MT_EUNSUPPORTED, "%s: %s.type \"%s\" is not supported "
                           "(Metaspace, ByteFallback, Fuse, or a Sequence of them)", path, f, ty);
        if (kind == UG_DEC_METASPACE) {
            mt_status s = ug_read_metaspace(e, f, t->dec_repl, &t->ndec_repl, &t->dec_prepend,
                                            NULL, path, err);
            if (s != MT_OK)
                return s;
        }
        t->dec[t->ndec++] = kind;
    }
    if (t->ndec == 0)
        return mt_fail(err, MT_EUNSUPPORTED, "%s: decoder \"%s\" is not supported (Metaspace, "
                       "ByteFallback, Fuse, or a Sequence of them)", path, ug_type(d));
    return MT_OK;
}

/* ---- added tokens ---- */

static bool ug_flag(const cJSON *e, const char *f) { return cJSON_IsTrue(ug_get(e, f)); }

static mt_status ug_added_one(unigram_t *t, const cJSON *e, int k, int32_t *next,
                              const char *path, mt_err *err)
{
    const cJSON *c = ug_get(e, "content"), *id = ug_get(e, "id");
    if (!cJSON_IsString(c) || !c->valuestring[0])
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d].content must be a non-empty "
                       "string", path, k);
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 ||
        id->valuedouble != (double)(int32_t)id->valuedouble)
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d].id must be an integer >= 0", path,
                       k);
    if (ug_flag(e, "single_word"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: added_tokens[%d].single_word true is not "
                       "supported", path, k);
    for (int a = 0; a < t->added.n; a++)
        if (!strcmp(t->added.tok[a].content, c->valuestring))
            return MT_OK; /* HF adds a text once */
    /* the id HF gives it: the vocabulary's of the same text, else the next */
    int32_t i = ug_piece_id(t, (const unsigned char *)c->valuestring, strlen(c->valuestring));
    if (i < 0)
        i = (*next)++;
    if ((size_t)i >= t->cap)
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d]: no room for id %d", path, k, i);
    bool norm = ug_flag(e, "normalized");
    mt_status s = tok_added_push(&t->added, c->valuestring, i, norm, ug_flag(e, "special"), err);
    if (s != MT_OK)
        return s;
    t->any_norm_added |= norm;
    t->lstrip[t->added.n - 1] = ug_flag(e, "lstrip");
    t->rstrip[t->added.n - 1] = ug_flag(e, "rstrip");
    if (i >= t->ntok)
        t->ntok = i + 1;
    free(t->tok[i]); /* the added token's text wins, as in HF's id_to_token */
    t->tok[i] = strdup(c->valuestring);
    return t->tok[i] ? MT_OK : mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
}

static mt_status ug_read_added(unigram_t *t, const cJSON *arr, const char *path, mt_err *err)
{
    if (!ug_null(arr) && !cJSON_IsArray(arr))
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens must be an array", path);
    int n = arr ? cJSON_GetArraySize(arr) : 0, k = 0;
    int32_t next = t->nvocab;
    t->lstrip = calloc((size_t)n + 1, sizeof *t->lstrip);
    t->rstrip = calloc((size_t)n + 1, sizeof *t->rstrip);
    if (!t->lstrip || !t->rstrip)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next, k++) {
        mt_status s = ug_added_one(t, e, k, &next, path, err);
        if (s != MT_OK)
            return s;
    }
    return MT_OK;
}

/* ---- post-processor ---- */

static mt_status ug_push_tmpl(ug_tmpl *l, int *n, int32_t id, int type_id, const char *f,
                              const char *path, mt_err *err)
{
    if (*n == UG_MAX_TMPL)
        return mt_fail(err, MT_EUNSUPPORTED, "%s: %s: more than %d template tokens", path, f,
                       UG_MAX_TMPL);
    l[(*n)++] = (ug_tmpl){.id = id, .type_id = type_id};
    return MT_OK;
}

/* One of TemplateProcessing's templates (single or pair) into l. */
static mt_status ug_read_template(const unigram_t *t, const cJSON *pp, const char *which,
                                  ug_tmpl *l, int *n, const char *path, mt_err *err)
{
    const cJSON *tm = ug_get(pp, which), *sp = ug_get(pp, "special_tokens");
    char f[64];
    snprintf(f, sizeof f, "post_processor.%s", which);
    if (!cJSON_IsArray(tm))
        return mt_fail(err, MT_EFORMAT, "%s: %s must be an array", path, f);
    int k = 0, seqs = 0;
    mt_status s = MT_OK;
    for (const cJSON *e = tm->child; s == MT_OK && e; e = e->next, k++) {
        const cJSON *seq = ug_get(e, "Sequence"), *st = ug_get(e, "SpecialToken");
        const cJSON *id = ug_get(seq ? seq : st, "id"), *ty = ug_get(seq ? seq : st, "type_id");
        int type_id = cJSON_IsNumber(ty) ? (int)ty->valuedouble : 0;
        if (!cJSON_IsString(id))
            return mt_fail(err, MT_EFORMAT, "%s: %s[%d] must be a Sequence or a SpecialToken "
                           "with an id", path, f, k);
        if (seq) {
            bool a = !strcmp(id->valuestring, "A"), b = !strcmp(id->valuestring, "B");
            if ((!a && !b) || (b && !strcmp(which, "single")))
                return mt_fail(err, MT_EFORMAT, "%s: %s[%d]: sequence \"%s\"", path, f, k,
                               id->valuestring);
            seqs++;
            s = ug_push_tmpl(l, n, a ? -1 : -2, type_id, f, path, err);
            continue;
        }
        const cJSON *ids = ug_get(ug_get(sp, id->valuestring), "ids");
        if (!cJSON_IsArray(ids))
            return mt_fail(err, MT_EFORMAT, "%s: post_processor.special_tokens[\"%s\"].ids must "
                           "be an array", path, id->valuestring);
        for (const cJSON *i = ids->child; s == MT_OK && i; i = i->next) {
            if (!cJSON_IsNumber(i) || i->valuedouble < 0 || i->valuedouble >= t->ntok)
                return mt_fail(err, MT_EFORMAT, "%s: post_processor.special_tokens[\"%s\"].ids: "
                               "an id below %d expected", path, id->valuestring, t->ntok);
            s = ug_push_tmpl(l, n, (int32_t)i->valuedouble, type_id, f, path, err);
        }
    }
    if (s == MT_OK && seqs != (strcmp(which, "single") ? 2 : 1))
        s = mt_fail(err, MT_EFORMAT, "%s: %s must hold %s", path, f,
                    strcmp(which, "single") ? "$A and $B" : "$A");
    return s;
}

/* RobertaProcessing's cls or sep: [text, id]. */
static mt_status ug_roberta_id(const unigram_t *t, const cJSON *pp, const char *f, int32_t *id,
                               const char *path, mt_err *err)
{
    const cJSON *v = cJSON_GetArrayItem(ug_get(pp, f), 1);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= t->ntok)
        return mt_fail(err, MT_EFORMAT, "%s: post_processor.%s must be [token, id below %d]",
                       path, f, t->ntok);
    *id = (int32_t)v->valuedouble;
    return MT_OK;
}

static mt_status ug_read_post(unigram_t *t, const cJSON *pp, const char *path, mt_err *err)
{
    if (ug_null(pp)) { /* HF: a, then b with type id 1 */
        t->single[t->nsingle++] = (ug_tmpl){-1, 0};
        t->pair[t->npair++] = (ug_tmpl){-1, 0};
        t->pair[t->npair++] = (ug_tmpl){-2, 1};
        return MT_OK;
    }
    if (!strcmp(ug_type(pp), "TemplateProcessing")) {
        mt_status s = ug_read_template(t, pp, "single", t->single, &t->nsingle, path, err);
        return s != MT_OK ? s : ug_read_template(t, pp, "pair", t->pair, &t->npair, path, err);
    }
    if (strcmp(ug_type(pp), "RobertaProcessing"))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: post_processor.type \"%s\" is not supported "
                       "(RobertaProcessing, TemplateProcessing or null)", path, ug_type(pp));
    /* without these two HF reads the object as BertProcessing (its
     * post-processors are an untagged enum): refused, not guessed */
    if (!cJSON_IsBool(ug_get(pp, "trim_offsets")) || !cJSON_IsBool(ug_get(pp, "add_prefix_space")))
        return mt_fail(err, MT_EFORMAT, "%s: post_processor.%s must be a boolean (Hugging Face "
                       "reads a RobertaProcessing without it as BertProcessing)", path,
                       cJSON_IsBool(ug_get(pp, "trim_offsets")) ? "add_prefix_space"
                                                                : "trim_offsets");
    int32_t cls, sep;
    mt_status s = ug_roberta_id(t, pp, "cls", &cls, path, err);
    if (s == MT_OK)
        s = ug_roberta_id(t, pp, "sep", &sep, path, err);
    if (s != MT_OK)
        return s;
    const ug_tmpl one[] = {{cls, 0}, {-1, 0}, {sep, 0}};
    const ug_tmpl two[] = {{cls, 0}, {-1, 0}, {sep, 0}, {sep, 0}, {-2, 0}, {sep, 0}};
    memcpy(t->single, one, sizeof one);
    memcpy(t->pair, two, sizeof two);
    t->nsingle = 3;
    t->npair = 6;
    t->trim = cJSON_IsTrue(ug_get(pp, "trim_offsets"));
    t->trim_prefix = cJSON_IsTrue(ug_get(pp, "add_prefix_space"));
    return MT_OK;
}

/* ---- the whole file ---- */

static mt_status ug_read(unigram_t *t, const cJSON *root, const char *path, mt_err *err)
{
    const cJSON *added = ug_get(root, "added_tokens");
    mt_status s = ug_check_model(t, ug_get(root, "model"),
                                 cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0, path, err);
    if (s == MT_OK)
        s = ug_read_normalizer(t, ug_get(root, "normalizer"), path, err);
    if (s == MT_OK)
        s = ug_read_pretok(t, ug_get(root, "pre_tokenizer"), path, err);
    if (s == MT_OK)
        s = ug_read_decoder(t, ug_get(root, "decoder"), path, err);
    if (s == MT_OK)
        s = ug_read_added(t, added, path, err);
    if (s == MT_OK)
        s = ug_read_post(t, ug_get(root, "post_processor"), path, err);
    return s;
}

mt_status unigram_load(const char *path, unigram_t **out, mt_err *err)
{
    *out = NULL;
    gcb_init();
    unigram_t *t = calloc(1, sizeof *t);
    if (!t)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    cJSON *root = NULL;
    mt_status s = mt_json_load(path, &root, err);
    if (s == MT_OK)
        s = ug_read(t, root, path, err);
    cJSON_Delete(root);
    if (s != MT_OK) {
        unigram_free(t);
        return s;
    }
    *out = t;
    return MT_OK;
}

void unigram_free(unigram_t *t)
{
    if (!t)
        return;
    for (size_t k = 0; t->tok && k < t->cap; k++)
        free(t->tok[k]);
    free(t->tok);
    free(t->score);
    free(t->node_id);
    free(t->edge);
    for (int k = 0; k < t->nnorm; k++) {
        free(t->norm[k].pat);
        free(t->norm[k].with);
    }
    free(t->norm);
    ug_charsmap_free(&t->cmap);
    tok_added_free(&t->added);
    free(t->lstrip);
    free(t->rstrip);
    free(t);
}
