/* api_kserve.c: KServe v2 / Open Inference Protocol inference, in JSON and
 * with the binary tensor data extension (what tritonclient and
 * perf_analyzer send by default).
 *
 * Request: one BYTES input named "text" of shape [n] (or [n, 1]) holding
 * the texts, either as JSON "data" or, with the extension, as
 * parameters.binary_data_size bytes after the JSON header (whose length is
 * the Inference-Header-Content-Length header): each element a u32
 * little-endian length and then that many bytes. Optional "id" (echoed),
 * "parameters" (binary_data_output, timeout in microseconds; others are
 * accepted and ignored, as Triton does) and "outputs" (only "embedding",
 * with parameters.binary_data).
 * Response: one FP32 output "embedding" of shape [n, hidden], row-major, as
 * JSON "data" or as raw little-endian floats after the JSON header
 * (parameters.binary_data_size, Inference-Header-Content-Length).
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
        api_error(r, false, 400, "shape",
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
            api_error(r, false, 400, "shape",
                      "input \"text\": shape[%d] must be a non-negative integer", k);
            return -1;
        }
        if (k == 1 && v != 1) {
            api_error(r, false, 400, "shape", "input \"text\": shape must be [n] or [n, 1]");
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
        api_error(r, false, 400, key, "parameter \"%s\" must be true or false", key);
        return -2;
    }
    return cJSON_IsTrue(b);
}

/* The answer once the job has run. */
static void respond(const http_ctx *ctx, http_deferred *d, http_resp *r)
{
    api_call *c = (api_call *)d;
    if (!api_call_result(c, r))
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
    sb_printf(b, ",\"prompt_tokens\":%ld}", c->tokens);
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

/* Splits n BYTES elements out of a binary tensor (u32 LE length + bytes
 * each), which must be exactly size bytes. False after answering 400. */
static bool split_bytes(const unsigned char *p, size_t size, long n, const char **texts,
                        size_t *lens, http_resp *r)
{
    size_t at = 0;
    for (long i = 0; i < n; i++) {
        if (size - at < 4) {
            api_error(r, false, 400, "binary_data_size",
                      "input \"text\": binary data ends inside element %ld's length", i);
            return false;
        }
        uint32_t len = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 | (uint32_t)p[at + 2] << 16 |
                       (uint32_t)p[at + 3] << 24;
        at += 4;
        if (len > size - at) {
            api_error(r, false, 400, "binary_data_size",
                      "input \"text\": element %ld says %u bytes but only %zu remain", i, len,
                      size - at);
            return false;
        }
        texts[i] = (const char *)p + at;
        lens[i] = len;
        at += len;
    }
    if (at != size) {
        api_error(r, false, 400, "binary_data_size",
                  "input \"text\": %zu bytes of binary data are left after %ld elements",
                  size - at, n);
        return false;
    }
    return true;
}

void api_kserve_infer(const http_ctx *ctx, const http_req *req, const char *const *p,
                      http_resp *r)
{
    api_request_id(req, r);
    /* the binary extension: the JSON is only the first hlen bytes */
    const char *hl = http_header(req, "Inference-Header-Content-Length");
    size_t json_len = req->body_len;
    if (hl) {
        char *end;
        unsigned long long v = strtoull(hl, &end, 10);
        if (!*hl || *end || v > req->body_len) {
            api_error(r, false, 400, "Inference-Header-Content-Length",
                      "Inference-Header-Content-Length \"%s\" is not a length within the "
                      "%zu-byte body",
                      hl, req->body_len);
            return;
        }
        json_len = (size_t)v;
    }
    cJSON *j = hl ? api_parse_json(ctx, req->body, json_len, false, r)
                  : api_parse_body(ctx, req, false, r);
    if (!j)
        return;
    const unsigned char *bin = (const unsigned char *)req->body + json_len;
    size_t bin_len = req->body_len - json_len;
    const char **texts = NULL;
    size_t *lens = NULL;
    srv_model *m;
    srv_variant *v;
    if (p[1] && strcmp(p[1], "1") != 0) {
        api_error(r, false, 404, "version", "model \"%s\" has no version \"%s\" (only \"1\")",
                  p[0], p[1]);
        goto done;
    }
    if (!api_resolve(ctx, req, p[0], NULL, false, &m, &v, r))
        goto done;
    r->model = m;
    r->variant = v;

    static const char *const known[] = {"id", "parameters", "inputs", "outputs"};
    for (const cJSON *it = j->child; it; it = it->next) {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(known[k], it->string))
            k++;
        if (k == sizeof known / sizeof *known) {
            api_error(r, false, 400, it->string, "unknown field \"%s\"", it->string);
            goto done;
        }
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
    if (id && !cJSON_IsString(id)) {
        api_error(r, false, 400, "id", "\"id\" must be a string");
        goto done;
    }
    if (id) {
        if (strlen(id->valuestring) >= sizeof r->id) {
            api_error(r, false, 400, "id", "\"id\" is longer than %zu bytes", sizeof r->id - 1);
            goto done;
        }
        strcpy(r->id, id->valuestring);
    }
    if (params && !cJSON_IsObject(params)) {
        api_error(r, false, 400, "parameters", "\"parameters\" must be an object");
        goto done;
    }
    int binary_out = bool_param(params, "binary_data_output", r);
    if (binary_out == -2)
        goto done;
    double timeout_us = 0;
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(params, "timeout");
    if (to) {
        if (!cJSON_IsNumber(to) || !(to->valuedouble >= 0) || !isfinite(to->valuedouble)) {
            api_error(r, false, 400, "timeout",
                      "parameter \"timeout\" must be a finite non-negative number of "
                      "microseconds");
            goto done;
        }
        timeout_us = to->valuedouble;
    }
    if (!cJSON_IsArray(inputs) || cJSON_GetArraySize(inputs) != 1) {
        api_error(r, false, 400, "inputs",
                  "\"inputs\" must be an array with one input, \"text\" (BYTES)");
        goto done;
    }
    const cJSON *in = cJSON_GetArrayItem(inputs, 0);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(in, "datatype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
    const cJSON *iparams = cJSON_GetObjectItemCaseSensitive(in, "parameters");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "text") != 0) {
        api_error(r, false, 400, "inputs", "unknown input \"%s\"; this model takes \"text\"",
                  cJSON_IsString(name) ? name->valuestring : "(no name)");
        goto done;
    }
    if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "BYTES") != 0) {
        api_error(r, false, 400, "datatype", "input \"text\": datatype must be \"BYTES\", not \"%s\"",
                  cJSON_IsString(dtype) ? dtype->valuestring : "(missing)");
        goto done;
    }
    long n = shape_count(shape, r);
    if (n < 0)
        goto done;
    if (n == 0) {
        api_error(r, false, 400, "shape", "input \"text\" has no elements");
        goto done;
    }
    if (n > ctx->cfg->max_inputs) {
        api_error(r, false, 413, "max_inputs",
                  "%ld inputs in one request; the limit (server.max_inputs) is %d", n,
                  ctx->cfg->max_inputs);
        goto done;
    }
    if (outputs) {
        const cJSON *o;
        if (!cJSON_IsArray(outputs)) {
            api_error(r, false, 400, "outputs", "\"outputs\" must be an array");
            goto done;
        }
        cJSON_ArrayForEach(o, outputs)
        {
            const cJSON *on = cJSON_GetObjectItemCaseSensitive(o, "name");
            if (!cJSON_IsString(on) || strcmp(on->valuestring, "embedding") != 0) {
                api_error(r, false, 400, "outputs", "unknown output \"%s\"; this model has \"embedding\"",
                          cJSON_IsString(on) ? on->valuestring : "(no name)");
                goto done;
            }
            const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "parameters");
            if (cJSON_GetObjectItemCaseSensitive(op, "classification")) {
                api_error(r, false, 400, "classification",
                          "output \"embedding\": the classification extension is not supported");
                goto done;
            }
            int bd = bool_param(op, "binary_data", r);
            if (bd == -2)
                goto done;
            if (bd >= 0)
                binary_out = bd;
        }
    }

    texts = malloc(sizeof *texts * (size_t)n);
    lens = malloc(sizeof *lens * (size_t)n);
    if (!texts || !lens) {
        api_error(r, false, 500, NULL, "out of memory");
        goto done;
    }
    const cJSON *bds = cJSON_GetObjectItemCaseSensitive(iparams, "binary_data_size");
    if (bds) {
        if (!cJSON_IsNumber(bds) || bds->valuedouble < 0 ||
            bds->valuedouble != floor(bds->valuedouble)) {
            api_error(r, false, 400, "binary_data_size",
                      "input \"text\": binary_data_size must be a non-negative integer");
            goto done;
        }
        if (data) {
            api_error(r, false, 400, "data",
                      "input \"text\" has both \"data\" and binary_data_size");
            goto done;
        }
        if (!hl || bds->valuedouble != (double)bin_len) {
            api_error(r, false, 400, "binary_data_size",
                      "input \"text\": binary_data_size is %.0f but the body holds %zu bytes "
                      "after the JSON header (Inference-Header-Content-Length)",
                      bds->valuedouble, hl ? bin_len : 0);
            goto done;
        }
        if (!split_bytes(bin, bin_len, n, texts, lens, r))
            goto done;
    } else {
        if (bin_len) {
            api_error(r, false, 400, "Inference-Header-Content-Length",
                      "%zu bytes after the JSON header, but no input has binary_data_size",
                      bin_len);
            goto done;
        }
        /* data: flat, or nested one level per the shape ([[t], [t]] for [n, 1]) */
        if (!cJSON_IsArray(data)) {
            api_error(r, false, 400, "data",
                      "input \"text\": \"data\" must be an array of strings");
            goto done;
        }
        long got = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, data)
        {
            const cJSON *s = it;
            if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 1)
                s = it->child;
            if (!cJSON_IsString(s)) {
                api_error(r, false, 400, "data", "input \"text\": data[%ld] must be a string",
                          got);
                goto done;
            }
            if (got < n) {
                texts[got] = s->valuestring;
                lens[got] = strlen(s->valuestring);
            }
            got++;
        }
        if (got != n) {
            api_error(r, false, 400, "data",
                      "input \"text\": shape says %ld elements but data has %ld", n, got);
            goto done;
        }
    }

    api_call *c = api_submit_texts(ctx, req, m, v, texts, lens, (int)n, false, timeout_us, r);
    if (!c)
        goto done;
    c->d.respond = respond;
    c->has_id = id != NULL;
    c->binary_out = binary_out == 1;
    api_dispatch(ctx, c, r);

done:
    free(texts);
    free(lens);
    cJSON_Delete(j);
}
