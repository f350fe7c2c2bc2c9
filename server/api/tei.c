/* tei.c: the text-embeddings-inference (TEI) routes, so that clients
 * written for Hugging Face's TEI work unchanged: POST /embed (and POST /,
 * TEI's default route for an embedding model; a body whose inputs is an
 * object is a similarity request there), POST /similarity, POST
 * /tokenize, POST /decode, GET /info, GET /health (GET /, the index in
 * routes.c, is a health check too). The per-token routes (/embed_all,
 * /embed_sparse): outputs.c; /rerank and /predict: rerank.c. Errors are
 * TEI's {"error", "error_type"} with TEI's statuses: a refused input or
 * field (an empty string, too long with truncate false, more than
 * max_inputs) is 422 Validation, an empty inputs array 400 Empty.
 *
 * TEI serves one model: these routes serve the first model of the config,
 * or the one the X-Mantissa-Model header names; X-Mantissa-Variant pins a
 * variant as on the other routes. Token-id inputs and prompt names are
 * refused. /tokenize's start and stop are each token's UTF-8 byte offsets
 * in the text, TEI's unit (null for the template's special tokens, as TEI
 * gives them, and where a model gives no offsets: every tokenizer kind
 * gives them, WordPiece, BPE and Unigram).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/api/api.h"
#include "server/core/stats.h"

/* The model these routes serve, and a build of it (held by the request). */
bool tei_resolve(const http_app *app, const http_req *req, srv_model **m, srv_variant **v,
                        http_resp *r)
{
    const char *name = http_header(req, "X-Mantissa-Model");
    if (!name || !*name) {
        if (srv_models_count(app->models) == 0) {
            api_error(r, 503, "model", "no model is configured");
            return false;
        }
        name = srv_models_at(app->models, 0)->name;
    }
    return api_resolve(app, req, name, NULL, m, v, r);
}

/* What every TEI route with a body does around its own part: the request
 * id, the body parsed as a JSON object (api_parse_body answers what is
 * not), fn on it, the body freed. */
void tei_with_body(const http_app *app, const http_req *req, http_resp *r, tei_body_fn *fn)
{
    api_request_id(req, r);
    cJSON *j = api_parse_body(app, req, r);
    if (j)
        fn(app, req, j, r);
    cJSON_Delete(j);
}

/* Only the given keys in object j, whose fields errors name as where + key
 * (where: "" or "parameters."); false after answering 422. */
bool tei_known_fields(const cJSON *j, const char *where, const char *const *keys,
                         size_t nkeys, http_resp *r)
{
    for (const cJSON *it = j->child; it; it = it->next) {
        size_t k = 0;
        while (k < nkeys && strcmp(keys[k], it->string))
            k++;
        if (k == nkeys) {
            api_error(r, 422, it->string, "unknown field \"%s%s\"", where, it->string);
            return false;
        }
    }
    return true;
}

/* A boolean field: absent or null gives dflt; else true/false. -2 after
 * answering 422. */
int tei_bool_field(const cJSON *j, const char *where, const char *key, int dflt, http_resp *r)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!b || cJSON_IsNull(b))
        return dflt;
    if (!cJSON_IsBool(b)) {
        api_error(r, 422, key, "\"%s%s\" must be true or false", where, key);
        return -2;
    }
    return cJSON_IsTrue(b);
}

/* The options of every TEI route that embeds texts, in object j (named as
 * where + key in errors): truncate (null: the model's own setting),
 * truncation_direction, prompt_name (one of the model's prompts, or null:
 * the configured default). Sets them in *o; false
 * after answering 422. */
bool tei_text_options(const cJSON *j, const char *where, api_embed_opts *o, http_resp *r)
{
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(j, "truncation_direction");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt_name");
    if ((o->truncate = tei_bool_field(j, where, "truncate", -1, r)) == -2)
        return false;
    if (dir && !cJSON_IsNull(dir) &&
        (!cJSON_IsString(dir) || (strcasecmp(dir->valuestring, "left") &&
                                  strcasecmp(dir->valuestring, "right")))) {
        api_error(r, 422, "truncation_direction",
                  "\"%struncation_direction\" must be \"left\" or \"right\"", where);
        return false;
    }
    o->truncate_left = cJSON_IsString(dir) && !strcasecmp(dir->valuestring, "left");
    if (prompt && !cJSON_IsNull(prompt) && !cJSON_IsString(prompt)) {
        api_error(r, 422, "prompt_name",
                  "\"%sprompt_name\" must be a string naming one of the model's prompts, or null",
                  where);
        return false;
    }
    o->prompt_name = cJSON_IsString(prompt) ? prompt->valuestring : NULL;
    return true;
}

/* The /embed options: those of tei_text_options, normalize (false: the vectors
 * as pooled, before the model's normalisation; the job then carries each
 * vector's norm), dimensions (1..hidden). */
static bool embed_options(const cJSON *j, int hidden, api_embed_opts *o, int *dims, http_resp *r)
{
    static const char *const keys[] = {"inputs", "truncate", "truncation_direction", "prompt_name",
                                       "normalize", "dimensions"};
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "dimensions");
    *o = (api_embed_opts){0};
    int normalize;
    if (!tei_known_fields(j, "", keys, sizeof keys / sizeof *keys, r) || !tei_text_options(j, "", o, r) ||
        (normalize = tei_bool_field(j, "", "normalize", 1, r)) == -2)
        return false;
    o->norms = !normalize;
    *dims = 0;
    if (d && !cJSON_IsNull(d)) {
        if (!cJSON_IsNumber(d) || d->valuedouble != floor(d->valuedouble) || d->valuedouble < 1 ||
            d->valuedouble > hidden) {
            api_error(r, 422, "dimensions", "\"dimensions\" must be an integer in 1..%d", hidden);
            return false;
        }
        *dims = (int)d->valuedouble;
    }
    return true;
}

/* The answer: one array of floats per input; with dimensions, the first
 * that many of each vector, renormalised (Matryoshka truncation). With
 * "normalize": false the vectors as pooled (the model's unit vectors times
 * the norms the forward reported), truncated but not renormalised; a model
 * without a Normalize module gives them as pooled already, and
 * "normalize": true then normalises them here. */
static void embed_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *c = (api_embed *)d;
    if (!api_embed_result(c, r))
        return;
    const int n = c->job.n, h = c->v->hidden, dims = c->dimensions ? c->dimensions : h;
    const bool raw = c->job.norms != NULL, unit = c->v->model->info.normalize;
    sbuf *b = &r->body;
    sb_reserve(b, (size_t)n * (size_t)dims * 12 + 16);
    sb_putc(b, '[');
    for (int i = 0; i < n; i++) {
        float *e = c->job.out + (size_t)i * h;
        if (raw && unit) { /* the model's unit vector times its norm: the pooled vector */
            const float nrm = c->job.norms[i];
            for (int k = 0; k < dims; k++)
                e[k] *= nrm;
        } else if (!raw && (dims < h || !unit)) {
            double ss = 0;
            for (int k = 0; k < dims; k++)
                ss += (double)e[k] * e[k];
            const float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
            for (int k = 0; k < dims; k++)
                e[k] *= inv;
        }
        if (i)
            sb_putc(b, ',');
        sb_float_array(b, e, (size_t)dims);
    }
    sb_putc(b, ']');
}

/* POST /embed: the parsed body j. */
static void embed(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    const char **texts = NULL;
    size_t *lens = NULL;
    srv_model *m;
    srv_variant *v;
    api_embed_opts o;
    int dims, n;
    if (tei_resolve(app, req, &m, &v, r) && embed_options(j, v->hidden, &o, &dims, r) &&
        (n = api_text_inputs(app, cJSON_GetObjectItemCaseSensitive(j, "inputs"), "inputs", 422,
                              &texts, &lens, r)) > 0) {
        api_embed *c = api_embed_new(app, req, m, v, texts, lens, n, &o, r);
        if (c) {
            c->dimensions = dims;
            api_embed_run(app, c, r, embed_respond);
        }
    }
    free(texts);
    free(lens);
}

API_HANDLER(api_tei_embed)
{
    tei_with_body(app, req, r, embed);
}

/* How similarity's errors name its texts: the source first, then the
 * sentences. */
static void similarity_text_name(int i, char *buf, size_t cap)
{
    if (i == 0)
        snprintf(buf, cap, "inputs.source_sentence");
    else
        snprintf(buf, cap, "inputs.sentences[%d]", i - 1);
}

/* The answer: the cosine of each sentence's vector with the source's (as
 * TEI computes it, on the vectors as pooled; the cosine is the same on the
 * normalised ones). */
static void similarity_respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *c = (api_embed *)d;
    if (!api_embed_result(c, r))
        return;
    const int h = c->v->hidden;
    const float *src = c->job.out;
    double ss = 0;
    for (int k = 0; k < h; k++)
        ss += (double)src[k] * src[k];
    sb_putc(&r->body, '[');
    for (int i = 1; i < c->job.n; i++) {
        const float *e = c->job.out + (size_t)i * h;
        double xy = 0, yy = 0;
        for (int k = 0; k < h; k++) {
            xy += (double)src[k] * e[k];
            yy += (double)e[k] * e[k];
        }
        if (i > 1)
            sb_putc(&r->body, ',');
        sb_float(&r->body, ss > 0 && yy > 0 ? (float)(xy / sqrt(ss * yy)) : 0.0f);
    }
    sb_putc(&r->body, ']');
}

/* The similarity body's shape: inputs {source_sentence, sentences} and
 * parameters (an object of tei_text_options, or null); false after answering
 * 422 (400 Empty for no sentences). */
static bool similarity_shape(const cJSON *j, api_embed_opts *o, http_resp *r)
{
    static const char *const keys[] = {"inputs", "parameters"};
    static const char *const in_keys[] = {"source_sentence", "sentences"};
    static const char *const par_keys[] = {"truncate", "truncation_direction", "prompt_name"};
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (!tei_known_fields(j, "", keys, 2, r))
        return false;
    if (!cJSON_IsObject(in)) {
        api_error(r, 422, "inputs",
                  "\"inputs\" must be an object {\"source_sentence\": text, \"sentences\": "
                  "[texts]}");
        return false;
    }
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(in, "source_sentence");
    const cJSON *sents = cJSON_GetObjectItemCaseSensitive(in, "sentences");
    if (!tei_known_fields(in, "inputs.", in_keys, 2, r))
        return false;
    if (!cJSON_IsString(src)) {
        api_error(r, 422, "inputs.source_sentence", "\"inputs.source_sentence\" must be a string");
        return false;
    }
    if (!cJSON_IsArray(sents)) {
        api_error(r, 422, "inputs.sentences", "\"inputs.sentences\" must be an array of strings");
        return false;
    }
    if (par && !cJSON_IsNull(par) && !cJSON_IsObject(par)) {
        api_error(r, 422, "parameters", "\"parameters\" must be an object or null");
        return false;
    }
    if (cJSON_IsObject(par) && (!tei_known_fields(par, "parameters.", par_keys, 3, r) ||
                                !tei_text_options(par, "parameters.", o, r)))
        return false;
    if (cJSON_GetArraySize(sents) == 0) { /* TEI: 400 Empty */
        api_error_typed(r, 400, "Empty", "inputs.sentences", "`inputs.sentences` cannot be empty");
        return false;
    }
    return true;
}

/* POST /similarity: the source sentence and the sentences embedded in one
 * job (one text each, batched like any other); the answer is an array of
 * cosine similarities, one per sentence. */
static void similarity(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    api_embed_opts o = {.truncate = -1};
    const char **sents = NULL, **texts = NULL;
    size_t *slens = NULL, *lens = NULL;
    srv_model *m;
    srv_variant *v;
    int n;
    if (!similarity_shape(j, &o, r))
        return;
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(in, "source_sentence");
    o.text_name = similarity_text_name;
    if ((n = api_text_inputs(app, cJSON_GetObjectItemCaseSensitive(in, "sentences"),
                             "inputs.sentences", 422, &sents, &slens, r)) > 0 &&
        tei_resolve(app, req, &m, &v, r)) {
        texts = malloc(sizeof *texts * ((size_t)n + 1));
        lens = malloc(sizeof *lens * ((size_t)n + 1));
        if (!texts || !lens) {
            api_error(r, 500, NULL, "out of memory");
        } else {
            texts[0] = src->valuestring;
            lens[0] = strlen(src->valuestring);
            memcpy(texts + 1, sents, sizeof *texts * (size_t)n);
            memcpy(lens + 1, slens, sizeof *lens * (size_t)n);
            api_embed *c = api_embed_new(app, req, m, v, texts, lens, n + 1, &o, r);
            if (c)
                api_embed_run(app, c, r, similarity_respond);
        }
    }
    free(sents);
    free(slens);
    free(texts);
    free(lens);
}

API_HANDLER(api_tei_similarity)
{
    tei_with_body(app, req, r, similarity);
}

/* POST /: TEI's default route. For an embedding model TEI serves /embed
 * there, or /similarity when started for that task; here the body says
 * which: inputs as an object ({source_sentence, sentences}, what
 * huggingface_hub's sentence_similarity sends to a model's URL) is a
 * similarity request, anything else an embed request. */
static void root(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "inputs")))
        similarity(app, req, j, r);
    else
        embed(app, req, j, r);
}

API_HANDLER(api_tei_root)
{
    tei_with_body(app, req, r, root);
}

/* One text's tokens as TEI lists them: start and stop are the token's
 * UTF-8 byte offsets in the text, as TEI gives them (its into_tokens hands
 * on the Rust tokenizers' Encoding offsets, which are bytes), null for a
 * token the template adds (TEI: the special ones) and for a tokenizer
 * that gives no offsets (MT_EUNSUPPORTED). */
static bool tokens_json(sbuf *b, const srv_variant *v, const char *text, size_t len,
                        bool specials, int i, http_resp *r)
{
    const int maxlen = v->max_seq_len;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)maxlen);
    int32_t *offs = malloc(sizeof(int32_t) * 2 * (size_t)maxlen);
    int got = 0;
    mt_err err;
    mt_status st = ids && offs ? mt_model_tokenize_offsets(v->model, text, len, ids, offs, maxlen,
                                                           &got, NULL, &err)
                               : mt_fail(&err, MT_ENOMEM, "out of memory");
    bool spans = st == MT_OK;
    if (st == MT_EUNSUPPORTED)
        st = mt_model_tokenize(v->model, text, len, ids, maxlen, &got, NULL, &err);
    if (st != MT_OK) {
        api_error(r, st == MT_EUTF8 ? 422 : 500, "inputs", "inputs[%d]: %s", i, err.msg);
        free(ids);
        free(offs);
        return false;
    }
    sb_putc(b, '[');
    int first = 1;
    for (int k = 0; k < got; k++) {
        bool special = false;
        const char *t = v->model->ops->token_text(v->model, ids[k], &special);
        if (special && !specials)
            continue;
        sb_printf(b, "%s{\"id\":%d,\"text\":", first ? "" : ",", (int)ids[k]);
        first = 0;
        sb_json_str(b, t ? t : "", t ? strlen(t) : 0);
        sb_printf(b, ",\"special\":%s", special ? "true" : "false");
        if (spans && offs[2 * k + 1] > offs[2 * k])
            sb_printf(b, ",\"start\":%d,\"stop\":%d}", (int)offs[2 * k], (int)offs[2 * k + 1]);
        else
            sb_puts(b, ",\"start\":null,\"stop\":null}");
    }
    sb_putc(b, ']');
    free(ids);
    free(offs);
    return true;
}

static void tokenize(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    static const char *const keys[] = {"inputs", "add_special_tokens", "prompt_name"};
    const char **texts = NULL;
    size_t *lens = NULL;
    srv_model *m;
    srv_variant *v;
    int n, specials;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt_name");
    if (tei_known_fields(j, "", keys, sizeof keys / sizeof *keys, r) &&
        (specials = tei_bool_field(j, "", "add_special_tokens", 1, r)) != -2 &&
        tei_resolve(app, req, &m, &v, r)) {
        if (prompt && !cJSON_IsNull(prompt))
            api_error(r, 422, "prompt_name", "this model has no prompts");
        else if (!v->model->ops->token_text)
            api_error(r, 501, NULL, "this model's tokenizer cannot list its tokens");
        else if ((n = api_text_inputs(app, cJSON_GetObjectItemCaseSensitive(j, "inputs"),
                                      "inputs", 422, &texts, &lens, r)) > 0 &&
                 api_no_empty_text("inputs", texts, lens, n, r)) {
            sb_putc(&r->body, '[');
            for (int i = 0; i < n && r->status == 200; i++) {
                if (i)
                    sb_putc(&r->body, ',');
                tokens_json(&r->body, v, texts[i], lens[i], specials, i, r);
            }
            if (r->status == 200)
                sb_putc(&r->body, ']');
        }
    }
    free(texts);
    free(lens);
}

API_HANDLER(api_tei_tokenize)
{
    tei_with_body(app, req, r, tokenize);
}

/* One list of token ids (field names it in errors) back into text, as a
 * JSON string into r's body; false after answering 422 (400 Empty for an
 * empty list). */
static bool decode_one(const srv_variant *v, const cJSON *list, const char *field, bool skip,
                       http_resp *r)
{
    const int vocab = mt_model_get_info(v->model)->vocab;
    const int n = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list)) {
        api_error(r, 422, "ids", "%s must be an array of token ids", field);
        return false;
    }
    if (n == 0) { /* TEI: 400 Empty */
        api_error_typed(r, 400, "Empty", "ids", "%s is empty: there are no ids to decode", field);
        return false;
    }
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids) {
        api_error(r, 500, NULL, "out of memory");
        return false;
    }
    int k = 0;
    for (const cJSON *it = list->child; it; it = it->next, k++) {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
            it->valuedouble < 0 || it->valuedouble >= vocab) {
            api_error(r, 422, "ids", "%s[%d] is not a token id of this model (an integer in 0..%d)",
                      field, k, vocab - 1);
            free(ids);
            return false;
        }
        ids[k] = (int32_t)it->valuedouble;
    }
    char *text = NULL;
    mt_err err;
    mt_status st = v->model->ops->decode(v->model, ids, n, skip, &text, &err);
    free(ids);
    if (st != MT_OK) {
        api_error(r, st == MT_EINVAL ? 422 : 500, "ids", "%s: %s", field, err.msg);
        return false;
    }
    sb_json_str(&r->body, text, strlen(text));
    free(text);
    return true;
}

/* The ids field: one list of ids or a list of lists, each decoded; the
 * answer is an array of strings. */
static void decode_lists(const http_app *app, const srv_variant *v, const cJSON *ids, bool skip,
                         http_resp *r)
{
    if (!v->model->ops->decode) {
        api_error(r, 501, NULL, "this model's tokenizer cannot decode");
        return;
    }
    if (!cJSON_IsArray(ids)) {
        api_error(r, 422, "ids",
                  "\"ids\" must be an array of token ids, or an array of such arrays");
        return;
    }
    const bool batch = cJSON_IsArray(ids->child);
    const int n = batch ? cJSON_GetArraySize(ids) : 1;
    if (n > app->cfg->max_inputs) {
        api_error(r, 422, "max_inputs",
                  "%d lists of ids in one request; the limit (server.max_inputs) is %d", n,
                  app->cfg->max_inputs);
        r->call->reason = STATS_R_LIMIT;
        return;
    }
    sb_putc(&r->body, '[');
    const cJSON *list = batch ? ids->child : ids;
    for (int i = 0; i < n; i++, list = list->next) {
        char field[32] = "ids";
        if (batch)
            snprintf(field, sizeof field, "ids[%d]", i);
        if (i)
            sb_putc(&r->body, ',');
        if (!decode_one(v, list, field, skip, r))
            return;
    }
    sb_putc(&r->body, ']');
}

/* POST /decode: {"ids": [ids] or [[ids], ...], "skip_special_tokens":
 * true}: each list of ids back into text with the model's tokenizer; an
 * array of strings. An id the vocabulary does not have is refused (422),
 * where Hugging Face's tokenizers would leave it out. */
static void decode(const http_app *app, const http_req *req, const cJSON *j, http_resp *r)
{
    static const char *const keys[] = {"ids", "skip_special_tokens"};
    srv_model *m;
    srv_variant *v;
    int skip;
    if (tei_known_fields(j, "", keys, sizeof keys / sizeof *keys, r) &&
        (skip = tei_bool_field(j, "", "skip_special_tokens", 1, r)) != -2 &&
        tei_resolve(app, req, &m, &v, r))
        decode_lists(app, v, cJSON_GetObjectItemCaseSensitive(j, "ids"), skip, r);
}

API_HANDLER(api_tei_decode)
{
    tei_with_body(app, req, r, decode);
}

/* TEI's name for a precision. */
static const char *tei_dtype(mt_precision p)
{
    switch (p) {
    case MT_PREC_FP16: return "float16";
    case MT_PREC_BF16: return "bfloat16";
    case MT_PREC_INT8:
    case MT_PREC_INT8G: return "int8";
    case MT_PREC_FP8: return "float8_e4m3fn";
    default: return "float32";
    }
}

API_HANDLER(api_tei_info)
{
    srv_model *m;
    srv_variant *v;
    if (!tei_resolve(app, req, &m, &v, r))
        return;
    pthread_mutex_lock(&m->lock);
    const int max_queue = m->cfg.max_queue, max_tokens = m->cfg.max_batch_tokens,
              max_batch = m->cfg.max_batch_size;
    const bool truncate = m->cfg.truncate;
    pthread_mutex_unlock(&m->lock);
    const mt_model_info *mi = mt_model_get_info(v->model);
    sbuf *b = &r->body;
    sb_puts(b, "{\"model_id\":");
    sb_json_str(b, m->name, strlen(m->name));
    sb_printf(b, ",\"model_sha\":null,\"model_dtype\":\"%s\",\"served_model_name\":",
              tei_dtype(v->cfg.precision));
    sb_json_str(b, m->name, strlen(m->name));
    if (mi->task == MT_TASK_CLASSIFY) { /* TEI: a one-label classifier is a reranker */
        sb_puts(b, mi->nlabels == 1 ? ",\"model_type\":{\"reranker\":{\"id2label\":{"
                                    : ",\"model_type\":{\"classifier\":{\"id2label\":{");
        for (int i = 0; i < mi->nlabels; i++) {
            sb_printf(b, "%s\"%d\":", i ? "," : "", i);
            sb_json_str(b, mi->labels[i], strlen(mi->labels[i]));
        }
        sb_puts(b, "},\"label2id\":{");
        for (int i = 0; i < mi->nlabels; i++) {
            if (i)
                sb_putc(b, ',');
            sb_json_str(b, mi->labels[i], strlen(mi->labels[i]));
            sb_printf(b, ":%d", i);
        }
        sb_puts(b, "}}}");
    } else {
        sb_printf(b, ",\"model_type\":{\"embedding\":{\"pooling\":\"%s\"}}",
                  mt_pooling_name(mi->pooling));
        /* a field of ours: what a model with token heads (bge-m3) gives */
        sb_printf(b, ",\"outputs\":[\"dense\"%s%s]", mi->sparse ? ",\"sparse\"" : "",
                  mi->colbert_dim ? ",\"colbert\"" : "");
    }
    sb_printf(b,
              ",\"max_concurrent_requests\":%d,\"max_input_length\":%d,\"max_batch_tokens\":%d,"
              "\"max_batch_requests\":%d,\"max_client_batch_size\":%d,\"auto_truncate\":%s,"
              "\"tokenization_workers\":%d,\"version\":\"" MANTISSA_VERSION "\",\"sha\":",
              max_queue, v->max_seq_len, max_tokens, max_batch, app->cfg->max_inputs, truncate ? "true" : "false",
              1 /* texts are tokenized on the loop thread */);
    const char *commit = mt_build_commit(); /* TEI's sha: its build's commit */
    if (strcmp(commit, "unknown"))
        sb_json_str(b, commit, strlen(commit));
    else
        sb_puts(b, "null");
    sb_puts(b, ",\"docker_label\":null}");
}

API_HANDLER(api_tei_health)
{
    bool ready = app->models && atomic_load(&app->models->ready) &&
                 !(app->sched && sched_draining(app->sched));
    if (!ready)
        api_error(r, 503, NULL, "the server is not ready or is shutting down");
}
