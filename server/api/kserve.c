/* api_kserve.c: KServe v2 / Open Inference Protocol inference, in JSON and
 * with the binary tensor data extension (what tritonclient and
 * perf_analyzer send by default).
 *
 * Request: one BYTES input named "text" of shape [n] (or [n, 1]) holding
 * the texts, either as JSON "data" or, with the extension, as
 * parameters.binary_data_size bytes after the JSON header (whose length is
 * the Inference-Header-Content-Length header): each element a u32
 * little-endian length and then that many bytes; an empty element is
 * refused. Optional "id" (echoed), "parameters" (binary_data_output,
 * timeout in microseconds, truncate: true or false, absent: the model's
 * setting; others are accepted and ignored, as Triton does) and "outputs"
 * (only "embedding", with parameters.binary_data).
 * Response: one FP32 output "embedding" of shape [n, hidden], row-major, as
 * JSON "data" or as raw little-endian floats after the JSON header
 * (parameters.binary_data_size, Inference-Header-Content-Length). The
 * response's parameters say which variant served it and how many texts
 * were truncated (truncated_inputs).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"

/* Checks the "shape" of an input and returns its element count, or -1
 * after answering 400. */
static long shape_count(const cJSON *shape, http_resp *r)
{
    int nd = cJSON_GetArraySize(shape);
    if (!cJSON_IsArray(shape) || nd < 1 || nd > 2) {
        api_error(r, 400, "shape",
                  "input \"text\": shape must be [n] or [n, 1], an array of 1 or 2 integers");
        return -1;
    }
    long count = 1;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape)
    {
        double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
        if (v < 0 || v != floor(v) || v > 1e9) {
            api_error(r, 400, "shape",
                      "input \"text\": shape[%d] must be a non-negative integer", k);
            return -1;
        }
        if (k == 1 && v != 1) {
            api_error(r, 400, "shape", "input \"text\": shape must be [n] or [n, 1]");
            return -1;
        }
        count *= (long)v;
        k++;
    }
    return count;
}

/* A boolean parameter: -1 absent, 0/1, or -2 after answering 400. */
static int bool_param(const cJSON *params, const char *key, http_resp *r)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(params, key);
    if (!b)
        return -1;
    if (!cJSON_IsBool(b)) {
        api_error(r, 400, key, "parameter \"%s\" must be true or false", key);
        return -2;
    }
    return cJSON_IsTrue(b);
}

/* The answer once the job has run. */
static void respond(const http_app *app, http_deferred *d, http_resp *r)
{
    api_embed *c = (api_embed *)d;
    if (!api_embed_result(c, r))
        return;
    const srv_model *m = c->m;
    const int n = c->job.n;
    const int hidden = c->v->hidden;
    const size_t nf = (size_t)n * (size_t)hidden;
    sbuf *b = &r->body;
    sb_reserve(b, c->binary_out ? nf * 4 + 512 : nf * 12 + 256);
    sb_puts(b, "{\"model_name\":");
    sb_json_str(b, m->name, strlen(m->name));
    sb_puts(b, ",\"model_version\":\"1\"");
    if (c->has_id) {
        sb_puts(b, ",\"id\":");
        sb_json_str(b, c->id, strlen(c->id));
    }
    sb_printf(b, ",\"parameters\":{\"variant\":\"%s\",\"precision\":\"%s\",\"space_id\":",
              c->v->cfg.name, mt_precision_name(c->v->cfg.precision));
    sb_json_str(b, c->v->space, strlen(c->v->space));
    sb_printf(b, ",\"prompt_tokens\":%ld,\"truncated_inputs\":%d}", c->tokens, c->truncated);
    sb_printf(b, ",\"outputs\":[{\"name\":\"embedding\",\"datatype\":\"FP32\",\"shape\":[%d,%d]",
              n, hidden);
    if (c->binary_out) {
        sb_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}]}", nf * sizeof(float));
        size_t json_len = b->len;
        sb_putn(b, c->job.out, nf * sizeof(float)); /* x86: already little-endian */
        http_set_header(r, "Inference-Header-Content-Length", "%zu", json_len);
        r->content_type = "application/octet-stream";
    } else {
        sb_puts(b, ",\"data\":");
        sb_float_array(b, c->job.out, nf);
        sb_puts(b, "}]}");
    }
}

/* What an inference request asks, as read from its JSON. */
typedef struct {
    bool has_id;
    int binary_out;           /* -1: not asked, else 0/1 */
    int truncate;             /* -1: the model's setting, else 0/1 */
    int raw_scores;           /* a reranker's: -1 not asked, else 0/1 */
    double timeout_us;        /* 0: none */
    const cJSON *in;          /* the input "text" */
    long n;                   /* its elements */
    const char **texts;
    size_t *lens;
} kreq;

/* The JSON part of the body: the whole body, or with the binary extension
 * the first Inference-Header-Content-Length bytes (*json_len). NULL after
 * answering 400. */
static cJSON *parse_request(const http_app *app, const http_req *req, size_t *json_len,
                            http_resp *r)
{
    const char *hl = http_header(req, "Inference-Header-Content-Length");
    *json_len = req->body_len;
    if (!hl)
        return api_parse_body(app, req, r);
    char *end;
    unsigned long long v = strtoull(hl, &end, 10);
    if (!*hl || *end || v > req->body_len) {
        api_error(r, 400, "Inference-Header-Content-Length",
                  "Inference-Header-Content-Length \"%s\" is not a length within the "
                  "%zu-byte body",
                  hl, req->body_len);
        return NULL;
    }
    *json_len = (size_t)v;
    return api_parse_json(app, req->body, *json_len, r);
}

/* The top-level fields: only known ones; "id" (echoed, and the request's
 * id), "parameters" (binary_data_output, timeout, truncate). */
static bool read_top(const cJSON *j, kreq *k, http_resp *r)
{
    static const char *const known[] = {"id", "parameters", "inputs", "outputs"};
    if (!api_only_fields(j, known, sizeof known / sizeof *known, r))
        return false;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (id && !cJSON_IsString(id)) {
        api_error(r, 400, "id", "\"id\" must be a string");
        return false;
    }
    if (id && strlen(id->valuestring) >= sizeof r->call->id) {
        api_error(r, 400, "id", "\"id\" is longer than %zu bytes", sizeof r->call->id - 1);
        return false;
    }
    if (id)
        strcpy(r->call->id, id->valuestring);
    k->has_id = id != NULL;
    if (params && !cJSON_IsObject(params)) {
        api_error(r, 400, "parameters", "\"parameters\" must be an object");
        return false;
    }
    if ((k->binary_out = bool_param(params, "binary_data_output", r)) == -2 ||
        (k->truncate = bool_param(params, "truncate", r)) == -2 ||
        (k->raw_scores = bool_param(params, "raw_scores", r)) == -2)
        return false;
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(params, "timeout");
    if (to && (!cJSON_IsNumber(to) || !(to->valuedouble >= 0) || !isfinite(to->valuedouble))) {
        api_error(r, 400, "timeout",
                  "parameter \"timeout\" must be a finite non-negative number of microseconds");
        return false;
    }
    k->timeout_us = to ? to->valuedouble : 0;
    return true;
}

/* "inputs": exactly one, "text", BYTES, of a shape with 1..max_inputs
 * elements. */
static bool read_input(const http_app *app, const cJSON *inputs, kreq *k, http_resp *r)
{
    if (!cJSON_IsArray(inputs) || cJSON_GetArraySize(inputs) != 1) {
        api_error(r, 400, "inputs", "\"inputs\" must be an array with one input, \"text\" (BYTES)");
        return false;
    }
    k->in = cJSON_GetArrayItem(inputs, 0);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(k->in, "name");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(k->in, "datatype");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "text") != 0) {
        api_error(r, 400, "inputs", "unknown input \"%s\"; this model takes \"text\"",
                  cJSON_IsString(name) ? name->valuestring : "(no name)");
        return false;
    }
    if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "BYTES") != 0) {
        api_error(r, 400, "datatype", "input \"text\": datatype must be \"BYTES\", not \"%s\"",
                  cJSON_IsString(dtype) ? dtype->valuestring : "(missing)");
        return false;
    }
    k->n = shape_count(cJSON_GetObjectItemCaseSensitive(k->in, "shape"), r);
    if (k->n < 0)
        return false;
    if (k->n == 0) {
        api_error(r, 400, "shape", "input \"text\" has no elements");
        return false;
    }
    if (k->n > app->cfg->max_inputs) {
        api_error(r, 413, "max_inputs",
                  "%ld inputs in one request; the limit (server.max_inputs) is %d", k->n,
                  app->cfg->max_inputs);
        return false;
    }
    return true;
}

/* "outputs": only "embedding", whose parameters.binary_data overrides
 * binary_data_output. */
static bool read_outputs(const cJSON *outputs, kreq *k, http_resp *r)
{
    const cJSON *o;
    if (!outputs)
        return true;
    if (!cJSON_IsArray(outputs)) {
        api_error(r, 400, "outputs", "\"outputs\" must be an array");
        return false;
    }
    cJSON_ArrayForEach(o, outputs)
    {
        const cJSON *on = cJSON_GetObjectItemCaseSensitive(o, "name");
        if (!cJSON_IsString(on) || strcmp(on->valuestring, "embedding") != 0) {
            api_error(r, 400, "outputs", "unknown output \"%s\"; this model has \"embedding\"",
                      cJSON_IsString(on) ? on->valuestring : "(no name)");
            return false;
        }
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        if (cJSON_GetObjectItemCaseSensitive(op, "classification")) {
            api_error(r, 400, "classification",
                      "output \"embedding\": the classification extension is not supported");
            return false;
        }
        int bd = bool_param(op, "binary_data", r);
        if (bd == -2)
            return false;
        if (bd >= 0)
            k->binary_out = bd;
    }
    return true;
}

/* The texts from the binary tensor after the JSON header (bin_len bytes;
 * binary is whether the request used the extension). */
static bool texts_from_binary(kreq *k, const cJSON *bds, bool binary, const unsigned char *bin,
                              size_t bin_len, http_resp *r)
{
    if (!cJSON_IsNumber(bds) || bds->valuedouble < 0 ||
        bds->valuedouble != floor(bds->valuedouble)) {
        api_error(r, 400, "binary_data_size",
                  "input \"text\": binary_data_size must be a non-negative integer");
        return false;
    }
    if (cJSON_GetObjectItemCaseSensitive(k->in, "data")) {
        api_error(r, 400, "data", "input \"text\" has both \"data\" and binary_data_size");
        return false;
    }
    if (!binary || bds->valuedouble != (double)bin_len) {
        api_error(r, 400, "binary_data_size",
                  "input \"text\": binary_data_size is %.0f but the body holds %zu bytes "
                  "after the JSON header (Inference-Header-Content-Length)",
                  bds->valuedouble, binary ? bin_len : 0);
        return false;
    }
    return api_split_bytes(bin, bin_len, k->n, "text", k->texts, k->lens, r);
}

/* The texts from JSON "data": flat, or nested one level per the shape
 * ([[t], [t]] for [n, 1]). */
static bool texts_from_json(kreq *k, size_t bin_len, http_resp *r)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(k->in, "data"), *it;
    if (bin_len) {
        api_error(r, 400, "Inference-Header-Content-Length",
                  "%zu bytes after the JSON header, but no input has binary_data_size", bin_len);
        return false;
    }
    if (!cJSON_IsArray(data)) {
        api_error(r, 400, "data", "input \"text\": \"data\" must be an array of strings");
        return false;
    }
    long got = 0;
    cJSON_ArrayForEach(it, data)
    {
        const cJSON *s = cJSON_IsArray(it) && cJSON_GetArraySize(it) == 1 ? it->child : it;
        if (!cJSON_IsString(s)) {
            api_error(r, 400, "data", "input \"text\": data[%ld] must be a string", got);
            return false;
        }
        if (got < k->n) {
            k->texts[got] = s->valuestring;
            k->lens[got] = strlen(s->valuestring);
        }
        got++;
    }
    if (got != k->n) {
        api_error(r, 400, "data", "input \"text\": shape says %ld elements but data has %ld",
                  k->n, got);
        return false;
    }
    return true;
}

API_HANDLER(api_kserve_infer)
{
    api_request_id(req, r);
    size_t json_len;
    cJSON *j = parse_request(app, req, &json_len, r);
    if (!j)
        return;
    kreq k = {0};
    srv_model *m;
    srv_variant *v;
    const size_t bin_len = req->body_len - json_len;
    if (p[1] && strcmp(p[1], "1") != 0) {
        api_error(r, 404, "version", "model \"%s\" has no version \"%s\" (only \"1\")", p[0],
                  p[1]);
        goto done;
    }
    if (!api_resolve(app, req, p[0], NULL, &m, &v, r) || !read_top(j, &k, r))
        goto done;
    if (mt_model_get_info(v->model)->task == MT_TASK_CLASSIFY) {
        const bool binary = http_header(req, "Inference-Header-Content-Length") != NULL;
        const api_kserve_opts ko = {
            .has_id = k.has_id, .raw_scores = k.raw_scores == 1, .truncate = k.truncate,
            .timeout_us = k.timeout_us, .binary_out = k.binary_out == 1,
            .bin = binary ? (const unsigned char *)req->body + json_len : NULL,
            .bin_len = binary ? bin_len : 0};
        api_kserve_rerank(app, req, j, m, v, &ko, r);
        goto done;
    }
    if (!read_input(app, cJSON_GetObjectItemCaseSensitive(j, "inputs"), &k, r) ||
        !read_outputs(cJSON_GetObjectItemCaseSensitive(j, "outputs"), &k, r))
        goto done;
    k.texts = malloc(sizeof *k.texts * (size_t)k.n);
    k.lens = malloc(sizeof *k.lens * (size_t)k.n);
    if (!k.texts || !k.lens) {
        api_error(r, 500, NULL, "out of memory");
        goto done;
    }
    const cJSON *bds = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(k.in, "parameters"), "binary_data_size");
    const bool binary = http_header(req, "Inference-Header-Content-Length") != NULL;
    if (bds ? !texts_from_binary(&k, bds, binary, (const unsigned char *)req->body + json_len,
                                 bin_len, r)
            : !texts_from_json(&k, bin_len, r))
        goto done;
    api_embed_opts eo = {.timeout_us = k.timeout_us, .truncate = k.truncate};
    api_embed *c = api_embed_new(app, req, m, v, k.texts, k.lens, (int)k.n, &eo, r);
    if (!c)
        goto done;
    c->has_id = k.has_id;
    c->binary_out = k.binary_out == 1;
    api_embed_run(app, c, r, respond);
done:
    free(k.texts);
    free(k.lens);
    cJSON_Delete(j);
}
