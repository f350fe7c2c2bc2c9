/* fuzz_openai.c: libFuzzer harness for the OpenAI embeddings request
 * decoder, POST /v1/embeddings (server/api/openai.c), driven through its
 * handler with the real model loaded (fuzz_server.h) and no HTTP
 * connection. The whole input is the request body (a NUL-terminated copy,
 * Content-Type application/json, as the HTTP front hands it over).
 *
 * It checks the README's contract on every answer:
 *   - the status is one the README lists for client input (200, 400, 404,
 *     413, 415); a 500 on client input is a finding;
 *   - the body is strict JSON, UTF-8 included (FUZZ_JSON_LENIENT=1: only
 *     the grammar); errors have the OpenAI envelope;
 *   - 413 only over server.max_inputs; a text refused as too long only
 *     for the "strict" model or a request that sets "truncate";
 *   - a 200 has one embedding per input, in order, 384 finite floats of unit
 *     norm (float array, or base64 of little-endian float32), the variant
 *     in X-Mantissa-Variant, usage.prompt_tokens == total_tokens within
 *     [2n, n * max_seq_len].
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_server.h"

#define HIDDEN 384

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_server_init("fuzz_openai");
    return 0;
}

static void check_unit_norm(const float *v, int n, int row)
{
    double ss = 0;
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(isfinite(v[i]), "data[%d].embedding[%d] is not finite", row, i);
        ss += (double)v[i] * v[i];
    }
    FUZZ_CHECK(fabs(sqrt(ss) - 1.0) < 1e-3, "data[%d]: norm %g, not 1", row, sqrt(ss));
}

static void check_ok(const cJSON *req, const http_resp *r)
{
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(req, "input");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(req, "encoding_format");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
    const int n = cJSON_IsString(input) ? 1 : cJSON_GetArraySize(input);
    const int base64 = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "base64");
    FUZZ_CHECK(n >= 1 && n <= FUZZ_MAX_INPUTS, "200 for %d inputs", n);

    cJSON *j = cJSON_ParseWithLength(r->body.data, r->body.len);
    FUZZ_CHECK(cJSON_IsObject(j), "200 body is not an object");
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(j, "object");
    FUZZ_CHECK(cJSON_IsString(obj) && !strcmp(obj->valuestring, "list"), "object != list");
    const cJSON *rm = cJSON_GetObjectItemCaseSensitive(j, "model");
    FUZZ_CHECK(cJSON_IsString(rm) && cJSON_IsString(model) &&
                   !strcmp(rm->valuestring, model->valuestring),
               "model not echoed");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    FUZZ_CHECK(cJSON_GetArraySize(data) == n, "%d inputs, %d embeddings", n,
               cJSON_GetArraySize(data));
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, data)
    {
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(d, "index");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "embedding");
        FUZZ_CHECK(cJSON_IsNumber(idx) && idx->valueint == i, "data[%d].index", i);
        float v[HIDDEN];
        if (base64) {
            FUZZ_CHECK(cJSON_IsString(e), "data[%d].embedding is not a base64 string", i);
            unsigned char raw[sizeof v + 3];
            long got = fuzz_base64_decode(e->valuestring, strlen(e->valuestring), raw, sizeof raw);
            FUZZ_CHECK(got == (long)sizeof v, "data[%d]: base64 decodes to %ld bytes", i, got);
            memcpy(v, raw, sizeof v); /* little-endian float32, as on x86 */
        } else {
            FUZZ_CHECK(cJSON_GetArraySize(e) == HIDDEN, "data[%d]: %d floats", i,
                       cJSON_GetArraySize(e));
            int k = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, e)
            {
                FUZZ_CHECK(cJSON_IsNumber(x), "data[%d].embedding[%d] is not a number", i, k);
                v[k++] = (float)x->valuedouble;
            }
        }
        check_unit_norm(v, HIDDEN, i);
        i++;
    }
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
    const cJSON *tt = cJSON_GetObjectItemCaseSensitive(usage, "total_tokens");
    FUZZ_CHECK(cJSON_IsNumber(pt) && cJSON_IsNumber(tt) && pt->valuedouble == tt->valuedouble,
               "usage tokens");
    FUZZ_CHECK(pt->valuedouble >= 2 * n && pt->valuedouble <= n * FUZZ_MAX_SEQ,
               "prompt_tokens %g for %d inputs", pt->valuedouble, n);
    const char *var = fuzz_resp_header(r, "X-Mantissa-Variant");
    FUZZ_CHECK(var && !strcmp(var, "fp32"), "X-Mantissa-Variant: %s", var ? var : "(none)");
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_alarm_on_own_stack();
    char *body = malloc(size + 1);
    FUZZ_CHECK(body, "out of memory");
    memcpy(body, data, size);
    body[size] = 0;
    http_req req = {.method = "POST", .path = "/v1/embeddings", .body = body, .body_len = size,
                    .content_type = "application/json", .conn = NULL};
    http_resp resp;
    static const char *const params[2] = {NULL, NULL};
    fuzz_handle(api_openai_embeddings, &req, params, &resp);

    const int st = resp.status;
    FUZZ_CHECK(st == 200 || st == 400 || st == 404 || st == 413 || st == 415,
               "status %d: %.*s", st, (int)resp.body.len, resp.body.data ? resp.body.data : "");
    FUZZ_CHECK(resp.body.len > 0 && fuzz_json_strict(resp.body.data, resp.body.len, 8, NULL) == 1,
               "status %d with a body that is not strict JSON: %.*s", st,
               (int)(resp.body.len < 300 ? resp.body.len : 300),
               resp.body.data ? resp.body.data : "");
    if (st == 200) {
        cJSON *rq = cJSON_ParseWithLength(body, size);
        FUZZ_CHECK(rq, "200 for a body cJSON cannot parse");
        check_ok(rq, &resp);
        cJSON_Delete(rq);
    } else {
        cJSON *err = fuzz_check_error_body(resp.body.data, resp.body.len, 1);
        if (fuzz_refused_too_long(err, 1, "input"))
            FUZZ_CHECK(memmem(body, size, "strict", 6) || memmem(body, size, "truncate", 8),
                       "too long for a model that truncates, and the request did not say");
        cJSON_Delete(err);
        if (st == 413) {
            cJSON *rq = cJSON_ParseWithLength(body, size);
            const cJSON *in = cJSON_GetObjectItemCaseSensitive(rq, "input");
            FUZZ_CHECK(cJSON_GetArraySize(in) > FUZZ_MAX_INPUTS, "413 for %d inputs",
                       cJSON_GetArraySize(in));
            cJSON_Delete(rq);
        }
    }
    sb_free(&resp.body);
    free(body);
    return 0;
}
