/* api_kserve.c: KServe v2 / Open Inference Protocol inference over JSON.
 *
 * Request: one BYTES input named "text" of shape [n] (or [n, 1]) holding
 * the texts; optional "id", "parameters" and "outputs" (only "embedding").
 * Response: one FP32 output "embedding" of shape [n, hidden], row-major.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

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

void api_kserve_infer(const http_ctx *ctx, const http_req *req, const char *const *p,
                      http_resp *r)
{
    cJSON *j = api_parse_body(ctx, req, false, r);
    if (!j)
        return;
    const char **texts = NULL;
    size_t *lens = NULL;
    float *vec = NULL;
    srv_model *m;
    srv_variant *v;
    if (p[1] && strcmp(p[1], "1") != 0) {
        api_error(r, false, 404, "version", "model \"%s\" has no version \"%s\" (only \"1\")",
                  p[0], p[1]);
        goto done;
    }
    if (!api_resolve(ctx, req, p[0], false, &m, &v, r))
        goto done;

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
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
    if (id && !cJSON_IsString(id)) {
        api_error(r, false, 400, "id", "\"id\" must be a string");
        goto done;
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
        }
    }

    /* data: flat, or nested one level per the shape ([[t], [t]] for [n, 1]) */
    texts = malloc(sizeof *texts * (size_t)n);
    lens = malloc(sizeof *lens * (size_t)n);
    if (!texts || !lens) {
        api_error(r, false, 500, NULL, "out of memory");
        goto done;
    }
    if (!cJSON_IsArray(data)) {
        api_error(r, false, 400, "data", "input \"text\": \"data\" must be an array of strings");
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
            api_error(r, false, 400, "data", "input \"text\": data[%ld] must be a string", got);
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

    long tokens = 0;
    if (!api_embed(ctx, m, v, texts, lens, (int)n, false, &vec, &tokens, r))
        goto done;

    sbuf *b = &r->body;
    sb_reserve(b, (size_t)n * m->hidden * 12 + 256);
    sb_puts(b, "{\"model_name\":");
    sb_json_str(b, m->cfg.name, strlen(m->cfg.name));
    sb_puts(b, ",\"model_version\":\"1\"");
    if (id) {
        sb_puts(b, ",\"id\":");
        sb_json_str(b, id->valuestring, strlen(id->valuestring));
    }
    sb_printf(b, ",\"parameters\":{\"variant\":\"%s\",\"prompt_tokens\":%ld}", v->cfg.name, tokens);
    sb_printf(b, ",\"outputs\":[{\"name\":\"embedding\",\"datatype\":\"FP32\",\"shape\":[%ld,%d],"
                 "\"data\":",
              n, m->hidden);
    sb_float_array(b, vec, (size_t)n * m->hidden);
    sb_puts(b, "}]}");

done:
    free(texts);
    free(lens);
    free(vec);
    cJSON_Delete(j);
}
