/* tok_special.c: the added (special) tokens of a tokenizer: read from
 * tokenizer.json's "added_tokens", and found in the text the way Hugging
 * Face tokenizers' AddedVocabulary finds them (leftmost, longest match;
 * normalized=false tokens in the raw text, normalized=true ones in the
 * normalized text). lstrip/rstrip only move whitespace, which
 * BertPreTokenizer drops anyway, so they do not change ids.
 */
#include "engine/text/tok_special.h"

#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/text/unicode_data.h"

/* Decodes well-formed UTF-8 (cJSON's output) into code points. */
static size_t tok_added_decode(const char *s, size_t len, uint32_t *cps)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c = u[i];
        int extra = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
        if (extra)
            c &= 0x3Fu >> extra;
        i++;
        for (int k = 0; k < extra && i < len; k++, i++)
            c = (c << 6) | (u[i] & 0x3Fu);
        cps[n++] = c;
    }
    return n;
}

mt_status tok_added_push(tok_added_list *l, const char *content, int32_t id, bool normalized,
                         bool special, mt_err *err)
{
    size_t len = strlen(content);
    tok_added *grown = realloc(l->tok, (size_t)(l->n + 1) * sizeof *grown);
    if (!grown)
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    l->tok = grown;
    tok_added *a = &l->tok[l->n];
    *a = (tok_added){.len = len, .id = id, .normalized = normalized, .special = special};
    a->content = malloc(len + 1);
    a->cps = malloc((len + 1) * sizeof *a->cps);
    if (!a->content || !a->cps) {
        free(a->content);
        free(a->cps);
        return mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    }
    memcpy(a->content, content, len + 1);
    a->ncps = tok_added_decode(content, len, a->cps);
    if (!normalized && len > 0)
        l->first[(unsigned char)content[0] >> 3] |= (uint8_t)(1u << (content[0] & 7));
    l->n++;
    return MT_OK;
}

void tok_added_free(tok_added_list *l)
{
    for (int k = 0; k < l->n; k++) {
        free(l->tok[k].content);
        free(l->tok[k].cps);
    }
    free(l->tok);
    *l = (tok_added_list){0};
}

/* One entry of "added_tokens": content (non-empty string), id (integer >= 0),
 * normalized and special (bools, default false). */
static mt_status tok_added_entry(const cJSON *e, int k, const char *path, tok_added_list *l,
                                 mt_err *err)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
    const cJSON *nz = cJSON_GetObjectItemCaseSensitive(e, "normalized");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "special");
    if (!cJSON_IsString(c) || !c->valuestring[0])
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d].content must be a non-empty string",
                       path, k);
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 2147483647.0 ||
        id->valuedouble != (double)(int32_t)id->valuedouble)
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d].id must be an integer >= 0", path,
                       k);
    if ((nz && !cJSON_IsBool(nz)) || (sp && !cJSON_IsBool(sp)))
        return mt_fail(err, MT_EFORMAT, "%s: added_tokens[%d].%s must be a boolean", path, k,
                       nz && !cJSON_IsBool(nz) ? "normalized" : "special");
    return tok_added_push(l, c->valuestring, (int32_t)id->valuedouble, nz && cJSON_IsTrue(nz),
                          sp && cJSON_IsTrue(sp), err);
}

mt_status tok_added_load(const char *json_path, tok_added_list *out, mt_err *err)
{
    *out = (tok_added_list){0};
    cJSON *root = NULL;
    mt_status s = mt_json_load(json_path, &root, err);
    if (s != MT_OK)
        return s;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsArray(arr))
        s = mt_fail(err, MT_EFORMAT, "%s: added_tokens must be an array", json_path);
    int k = 0;
    for (const cJSON *e = arr ? arr->child : NULL; s == MT_OK && e; e = e->next, k++)
        s = tok_added_entry(e, k, json_path, out, err);
    cJSON_Delete(root);
    if (s != MT_OK)
        tok_added_free(out);
    return s;
}

int32_t tok_added_id(const tok_added_list *l, const char *name)
{
    for (int k = 0; k < l->n; k++)
        if (!strcmp(l->tok[k].content, name))
            return l->tok[k].id;
    return -1;
}

bool tok_added_special(const tok_added_list *l, int32_t id)
{
    for (int k = 0; k < l->n; k++)
        if (l->tok[k].id == id)
            return l->tok[k].special;
    return false;
}

int tok_added_raw_at(const tok_added_list *l, const char *s, size_t n)
{
    unsigned char b = (unsigned char)s[0];
    if (!(l->first[b >> 3] & (1u << (b & 7))))
        return -1;
    int best = -1;
    for (int k = 0; k < l->n; k++) {
        const tok_added *a = &l->tok[k];
        if (!a->normalized && a->len <= n && memcmp(s, a->content, a->len) == 0 &&
            (best < 0 || a->len > l->tok[best].len))
            best = k;
    }
    return best;
}

/* How many code points of cps spell a once lowercased, or 0. */
static size_t tok_added_norm_len(const tok_added *a, const uint32_t *cps, size_t n,
                                 bool lowercase)
{
    size_t p = 0;
    for (size_t j = 0; j < n && p < a->ncps; j++) {
        uint32_t lo[UCD_MAX_LOWER];
        int nl = 1;
        lo[0] = cps[j];
        if (lowercase && (ucd_flags(cps[j]) & UCD_LOWER))
            nl = ucd_lower(cps[j], lo);
        for (int k = 0; k < nl; k++, p++)
            if (p >= a->ncps || lo[k] != a->cps[p])
                return 0;
        if (p == a->ncps)
            return j + 1;
    }
    return 0;
}

int tok_added_norm_at(const tok_added_list *l, const uint32_t *cps, size_t n, bool lowercase,
                      size_t *used)
{
    int best = -1;
    size_t best_len = 0;
    for (int k = 0; k < l->n; k++) {
        const tok_added *a = &l->tok[k];
        if (!a->normalized)
            continue;
        size_t u = tok_added_norm_len(a, cps, n, lowercase);
        if (u > 0 && a->ncps > (best < 0 ? 0 : l->tok[best].ncps)) {
            best = k;
            best_len = u;
        }
    }
    *used = best_len;
    return best;
}
