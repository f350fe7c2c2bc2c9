/* chunks.c: late chunking, POST /embed_chunks: one long text and the
 * character spans of its chunks; one forward over the whole text (up to
 * the model's context), then per span the mean of the last hidden states
 * of the tokens inside it (normalised as the model's vectors are), so
 * that each chunk's vector has seen its neighbours (Günther et al., "Late
 * Chunking", 2024). The tokens of a span are those whose character spans
 * (the tokenizer's offsets, engine/model.h's tokenize_offsets) overlap
 * it; the model's own prompt is not put before the text (it would shift
 * the spans). Body: {"model", "input": TEXT, "chunks": [[start, end],
 * ...] in Unicode code points, end exclusive, not overlapping, "truncate"};
 * errors in the OpenAI shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"

/* Byte offset of each code point of text (n + 1 of them: the last is
 * len) into *at; the count of code points into *n. NULL when out of
 * memory. text is valid UTF-8 (checked by the tokenizer first). */
static size_t *code_point_bytes(const char *text, size_t len, size_t *n)
{
    size_t *at = malloc(sizeof *at * (len + 1)), k = 0;
    for (size_t i = 0; at && i < len; i++)
        if (((unsigned char)text[i] & 0xC0) != 0x80)
            at[k++] = i;
    if (at)
        at[k] = len;
    *n = k;
    return at;
}

/* chunks[i] as a byte span [*b, *e) of a text of nc code points (at: their
 * byte offsets); false after answering 400. */
static bool read_span(const cJSON *c, int i, const size_t *at, size_t nc, size_t *b, size_t *e,
                      http_resp *r)
{
    const cJSON *s = cJSON_GetArrayItem(c, 0), *t = cJSON_GetArrayItem(c, 1);
    if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) != 2 || !cJSON_IsNumber(s) ||
        !cJSON_IsNumber(t) || s->valuedouble != floor(s->valuedouble) ||
        t->valuedouble != floor(t->valuedouble) || s->valuedouble < 0 ||
        t->valuedouble <= s->valuedouble || t->valuedouble > (double)nc) {
        api_error(r, 400, "chunks", "chunks[%d] must be [start, end]: code point offsets with "
                  "0 <= start < end <= %zu (the input's length)", i, nc);
        return false;
    }
    *b = at[(size_t)s->valuedouble];
    *e = at[(size_t)t->valuedouble];
    return true;
}

/* The earlier chunk (of i, byte spans be: 2 each) that chunk i overlaps,
 * or -1. */
static int overlapping(const size_t *be, int i)
{
    for (int j = 0; j < i; j++)
        if (be[2 * j] < be[2 * i + 1] && be[2 * i] < be[2 * j + 1])
            return j;
    return -1;
}

/* The tokens of each chunk: [span[2i], span[2i+1]) of the n tokens whose
 * byte offsets are off (the template's tokens span nothing: 0, 0); false
 * after answering 400 (a bad span, one that overlaps another, one with no
 * token). */
static bool chunk_tokens(const cJSON *chunks, const char *text, size_t len, const int32_t *off,
                         int n, bool cut, int32_t *span, http_resp *r)
{
    size_t nc;
    size_t *at = code_point_bytes(text, len, &nc);
    size_t *be = malloc(sizeof *be * 2 * (size_t)cJSON_GetArraySize(chunks));
    if (!at || !be) {
        free(at);
        free(be);
        api_error(r, 500, NULL, "out of memory");
        return false;
    }
    int i = 0;
    const cJSON *c;
    bool ok = true;
    cJSON_ArrayForEach(c, chunks)
    {
        size_t b, e;
        if (!(ok = read_span(c, i, at, nc, &b, &e, r)))
            break;
        be[2 * i] = b;
        be[2 * i + 1] = e;
        const int o = overlapping(be, i);
        if (o >= 0) {
            api_error(r, 400, "chunks", "chunks[%d] overlaps chunks[%d]: chunks must not "
                      "overlap", i, o);
            ok = false;
            break;
        }
        int t0 = -1, t1 = -1;
        for (int t = 0; t < n; t++)
            if (off[2 * t] < off[2 * t + 1] && (size_t)off[2 * t] < e &&
                (size_t)off[2 * t + 1] > b) {
                t0 = t0 < 0 ? t : t0;
                t1 = t + 1;
            }
        if (t0 < 0) {
            api_error(r, 400, "chunks", "chunks[%d] holds no token of the input%s", i,
                      cut ? " as cut to the model's max_seq_len" : "");
            ok = false;
            break;
        }
        span[2 * i] = t0;
        span[2 * i + 1] = t1;
        i++;
    }
    free(at);
    free(be);
    return ok;
}

/* The answer: per chunk the mean of its tokens' rows, normalised where the
 * model's vectors are. */
static void respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *c = (api_embed *)d;
    if (!api_embed_result(c, r))
        return;
    const int h = c->v->hidden;
    float *v = malloc(sizeof *v * (size_t)h);
    if (!v) {
        api_error(r, 500, NULL, "out of memory");
        return;
    }
    sbuf *b = &r->body;
    sb_puts(b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < c->nspans; i++) {
        const int t0 = c->spans[2 * i], t1 = c->spans[2 * i + 1];
        for (int k = 0; k < h; k++)
            v[k] = 0.f;
        for (int t = t0; t < t1; t++)
            for (int k = 0; k < h; k++)
                v[k] += c->job.out[(size_t)t * h + k];
        float n2 = 0.f;
        for (int k = 0; k < h; k++) {
            v[k] /= (float)(t1 - t0);
            n2 += v[k] * v[k];
        }
        const float inv = 1.0f / fmaxf(sqrtf(n2), 1e-12f);
        for (int k = 0; mt_model_get_info(c->v->model)->normalize && k < h; k++)
            v[k] *= inv;
        sb_printf(b, "%s{\"object\":\"embedding\",\"index\":%d,\"tokens\":%d,\"embedding\":",
                  i ? "," : "", i, t1 - t0);
        sb_float_array(b, v, (size_t)h);
        sb_putc(b, '}');
    }
    free(v);
    sb_puts(b, "],\"model\":");
    sb_json_str(b, c->model_name, strlen(c->model_name));
    sb_printf(b, ",\"usage\":{\"prompt_tokens\":%ld,\"total_tokens\":%ld}}", c->tokens,
              c->tokens);
}

/* The fields: only known ones, "model" and "input" strings, "chunks" a
 * non-empty list of at most max_inputs, "truncate" a boolean or null.
 * False after answering 400 (413 for too many chunks). */
static bool read_fields(const http_app *app, const cJSON *j, api_embed_opts *o, http_resp *r)
{
    static const char *const known[] = {"model", "input", "chunks", "truncate"};
    if (!api_only_fields(j, known, sizeof known / sizeof *known, r))
        return false;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "chunks");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(j, "truncate");
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "model")))
        api_error(r, 400, "model", "\"model\" must be a string naming a served model");
    else if (!cJSON_IsString(in) || !*in->valuestring)
        api_error(r, 400, "input", "\"input\" must be a non-empty string: the whole text");
    else if (!cJSON_IsArray(ch) || cJSON_GetArraySize(ch) == 0)
        api_error(r, 400, "chunks", "\"chunks\" must be a non-empty list of [start, end] spans");
    else if (cJSON_GetArraySize(ch) > app->cfg->max_inputs)
        api_error(r, 413, "max_inputs", "%d chunks; the limit (server.max_inputs) is %d",
                  cJSON_GetArraySize(ch), app->cfg->max_inputs);
    else if (tr && !cJSON_IsNull(tr) && !cJSON_IsBool(tr))
        api_error(r, 400, "truncate", "\"truncate\" must be true or false");
    else {
        o->truncate = cJSON_IsBool(tr) ? cJSON_IsTrue(tr) : -1;
        return true;
    }
    return false;
}

/* The text's tokens and their offsets on v's model, and each chunk's
 * tokens into span; false after answering. */
static bool plan(const cJSON *j, srv_variant *v, const char *model, bool truncate, int32_t *span,
                 http_resp *r)
{
    const char *text = cJSON_GetObjectItemCaseSensitive(j, "input")->valuestring;
    const size_t len = strlen(text);
    const int max = v->max_seq_len;
    int32_t *ids = malloc(sizeof *ids * (size_t)max), *off = malloc(sizeof *off * 2 * (size_t)max);
    int n = 0, full = 0;
    mt_err err;
    bool ok = false;
    mt_status st = ids && off ? mt_model_tokenize_offsets(v->model, text, len, ids, off, max, &n,
                                                          &full, &err)
                              : mt_fail(&err, MT_ENOMEM, "out of memory");
    if (st == MT_EUNSUPPORTED)
        api_error(r, 400, "model", "model %s cannot chunk late: %s", model, err.msg);
    else if (st != MT_OK)
        api_error(r, st == MT_EUTF8 ? 400 : 500, "input", "input: %s", err.msg);
    else if (full > max && !truncate)
        api_error(r, 400, "input", "input is %d tokens; the model takes at most %d (send "
                  "\"truncate\": true to embed its first %d)", full, max, max);
    else
        ok = chunk_tokens(cJSON_GetObjectItemCaseSensitive(j, "chunks"), text, len, off, n,
                          full > max, span, r);
    free(ids);
    free(off);
    return ok;
}

API_HANDLER(api_embed_chunks)
{
    api_request_id(req, r);
    cJSON *j = api_parse_body(app, req, r);
    api_embed_opts o = {.token_rows = true, .no_prompt = true};
    srv_model *m;
    srv_variant *v;
    int32_t *span = NULL;
    if (!j || !read_fields(app, j, &o, r))
        goto done;
    const char *model = cJSON_GetObjectItemCaseSensitive(j, "model")->valuestring;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    const int nspans = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "chunks"));
    if (!api_resolve(app, req, model, NULL, &m, &v, r))
        goto done;
    const bool truncate = o.truncate < 0 ? atomic_load(&m->truncate) : o.truncate;
    if (!(span = malloc(sizeof *span * 2 * (size_t)nspans))) {
        api_error(r, 500, NULL, "out of memory");
        goto done;
    }
    if (!plan(j, v, model, truncate, span, r))
        goto done;
    const char *text = in->valuestring;
    const size_t len = strlen(text);
    api_embed *c = api_embed_new(app, req, m, v, &text, &len, 1, &o, r);
    if (!c)
        goto done;
    c->spans = span;
    c->nspans = nspans;
    span = NULL;
    api_embed_run_named(app, c, model, r, respond);
done:
    free(span);
    cJSON_Delete(j);
}
