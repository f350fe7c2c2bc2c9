/* fuzz_kserve.c: libFuzzer harness for the KServe v2 JSON inference
 * request decoder, POST /v2/models/{m}[/versions/{v}]/infer
 * (server/api/kserve.c), driven through its handler with the real model
 * loaded (fuzz_server.h) and no HTTP connection.
 *
 * Input: byte 0 picks the path parameters (bit 0: model "minilm", which
 * truncates, or "strict", which refuses over-long texts; bit 1: no version or "1";
 * bit 2: version "2", which does not exist) and the request form (bit 3:
 * the binary tensor extension); the rest is the body, a NUL-terminated copy
 * with Content-Type application/json. In the binary form bytes 1-2 give the
 * JSON header's length L (little-endian, modulo the body length + 1) and
 * bits 4-5 of byte 0 how Inference-Header-Content-Length states it: "L",
 * "L" with trailing junk, a number past 2^64, or empty; the body (from
 * byte 3) is then L bytes of JSON and the BYTES elements after it (u32
 * little-endian length + bytes each), Content-Type application/octet-stream.
 *
 * It checks the README's contract on every answer:
 *   - the status is one listed for client input (200, 400, 404, 413,
 *     415); a 500 on client input is a finding;
 *   - the body (its JSON header when the answer uses the binary tensor
 *     extension) is strict JSON, UTF-8 included (FUZZ_JSON_LENIENT=1:
 *     only the grammar); errors are {"error": "..."};
 *   - 404 for version "2"; a text refused as too long only for "strict" or
 *     a request that sets "truncate"; 413 only over server.max_inputs;
 *   - a 200 names the model and version "1", echoes "id", and has one FP32
 *     output "embedding" of shape [n, 384] (n from the request's shape)
 *     whose rows are finite and of unit norm, as JSON data or as
 *     binary_data_size bytes of float32 after the JSON header.
 *
 * The request's headers reach the handler through http_req.headers (the
 * form http_header reads when there is no connection).
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
    fuzz_server_init("fuzz_kserve");
    return 0;
}

/* json_len: the JSON part of the body (all of it unless the answer uses the
 * binary tensor extension, Inference-Header-Content-Length). */
static void check_ok(const cJSON *req, const char *model, const http_resp *r, size_t json_len)
{
    const cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(req, "inputs"), 0);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
    long n = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) n *= (long)d->valuedouble;
    FUZZ_CHECK(n >= 1 && n <= FUZZ_MAX_INPUTS, "200 for shape product %ld", n);

    cJSON *j = cJSON_ParseWithLength(r->body.data, json_len);
    FUZZ_CHECK(cJSON_IsObject(j), "200 body is not an object");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(j, "model_name");
    const cJSON *mv = cJSON_GetObjectItemCaseSensitive(j, "model_version");
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(j, "id");
    FUZZ_CHECK(cJSON_IsString(mn) && !strcmp(mn->valuestring, model), "model_name");
    FUZZ_CHECK(cJSON_IsString(mv) && !strcmp(mv->valuestring, "1"), "model_version");
    if (cJSON_IsString(id))
        FUZZ_CHECK(cJSON_IsString(rid) && !strcmp(rid->valuestring, id->valuestring),
                   "id not echoed");
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
    FUZZ_CHECK(cJSON_GetArraySize(outs) == 1, "%d outputs", cJSON_GetArraySize(outs));
    const cJSON *o = cJSON_GetArrayItem(outs, 0);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "datatype");
    const cJSON *osh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    FUZZ_CHECK(cJSON_IsString(name) && !strcmp(name->valuestring, "embedding"), "output name");
    FUZZ_CHECK(cJSON_IsString(dt) && !strcmp(dt->valuestring, "FP32"), "output datatype");
    FUZZ_CHECK(cJSON_GetArraySize(osh) == 2 && cJSON_GetArrayItem(osh, 0)->valuedouble == n &&
                   cJSON_GetArrayItem(osh, 1)->valuedouble == HIDDEN,
               "output shape is not [%ld, %d]", n, HIDDEN);
    const float *bin = NULL;
    if (json_len < r->body.len) {
        /* binary tensor extension: the floats follow the JSON header */
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        const cJSON *bds = cJSON_GetObjectItemCaseSensitive(op, "binary_data_size");
        FUZZ_CHECK(!data, "binary output with \"data\" too");
        FUZZ_CHECK(cJSON_IsNumber(bds) && bds->valuedouble == (double)(r->body.len - json_len) &&
                       r->body.len - json_len == (size_t)n * HIDDEN * sizeof(float),
                   "binary_data_size %g, %zu bytes after the header, expected %zu",
                   cJSON_IsNumber(bds) ? bds->valuedouble : -1, r->body.len - json_len,
                   (size_t)n * HIDDEN * sizeof(float));
        bin = (const float *)(const void *)(r->body.data + json_len);
    } else {
        FUZZ_CHECK(cJSON_GetArraySize(data) == n * HIDDEN, "%d output values for [%ld, %d]",
                   cJSON_GetArraySize(data), n, HIDDEN);
    }
    double ss = 0;
    long k = 0;
    const cJSON *x = data ? data->child : NULL;
    for (; bin ? k < n * HIDDEN : x != NULL; x = x ? x->next : NULL) {
        double v;
        if (bin) {
            float f;
            memcpy(&f, bin + k, sizeof f); /* the body need not be float-aligned */
            v = f;
        } else {
            FUZZ_CHECK(cJSON_IsNumber(x), "data[%ld] is not a number", k);
            v = x->valuedouble;
        }
        FUZZ_CHECK(isfinite(v), "data[%ld] is not finite", k);
        ss += v * v;
        if (++k % HIDDEN == 0) {
            FUZZ_CHECK(fabs(sqrt(ss) - 1.0) < 1e-3, "row %ld: norm %g, not 1", k / HIDDEN - 1,
                       sqrt(ss));
            ss = 0;
        }
    }
    const char *var = fuzz_resp_header(r, "X-Mantissa-Variant");
    FUZZ_CHECK(var && !strcmp(var, "fp32"), "X-Mantissa-Variant: %s", var ? var : "(none)");
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_alarm_on_own_stack();
    if (size < 1)
        return 0;
    const char *model = data[0] & 1 ? "strict" : "minilm";
    const char *version = data[0] & 4 ? "2" : data[0] & 2 ? "1" : NULL;
    const char *const params[3] = {model, version, NULL};
    const int binary = data[0] >> 3 & 1;
    size_t skip = 1, req_json_len = 0;
    char ihcl_req[48] = "";
    if (binary) {
        if (size < 3)
            return 0;
        skip = 3;
        req_json_len = (size_t)(data[1] | data[2] << 8) % (size - 3 + 1);
        switch (data[0] >> 4 & 3) {
        case 0:
            snprintf(ihcl_req, sizeof ihcl_req, "%zu", req_json_len);
            break;
        case 1:
            snprintf(ihcl_req, sizeof ihcl_req, "%zu x", req_json_len);
            break;
        case 2:
            snprintf(ihcl_req, sizeof ihcl_req, "18446744073709551617");
            break;
        default:
            break; /* empty */
        }
    }
    const size_t len = size - skip;
    char *body = malloc(len + 1);
    FUZZ_CHECK(body, "out of memory");
    memcpy(body, data + skip, len);
    body[len] = 0;
    const char *const hdrs[] = {"Inference-Header-Content-Length", ihcl_req, NULL};

    http_req req = {.method = "POST", .path = "/v2/models/m/infer", .body = body,
                    .body_len = len,
                    .content_type = binary ? "application/octet-stream" : "application/json",
                    .conn = NULL, .headers = binary ? hdrs : NULL};
    http_resp resp;
    fuzz_handle(api_kserve_infer, &req, params, &resp);

    const int st = resp.status;
    FUZZ_CHECK(st == 200 || st == 400 || st == 404 || st == 413 || st == 415,
               "status %d: %.*s", st, (int)resp.body.len, resp.body.data ? resp.body.data : "");
    size_t json_len = resp.body.len;
    const char *ihcl = fuzz_resp_header(&resp, "Inference-Header-Content-Length");
    if (ihcl) {
        char *end = NULL;
        unsigned long long v = strtoull(ihcl, &end, 10);
        FUZZ_CHECK(st == 200 && end && *end == 0 && v <= resp.body.len,
                   "status %d, Inference-Header-Content-Length \"%s\" for %zu bytes", st, ihcl,
                   resp.body.len);
        json_len = (size_t)v;
    }
    FUZZ_CHECK(resp.body.len > 0 && fuzz_json_strict(resp.body.data, json_len, 8, NULL) == 1,
               "status %d with a body that is not strict JSON: %.*s", st,
               (int)(resp.body.len < 300 ? resp.body.len : 300),
               resp.body.data ? resp.body.data : "");
    if (version && !strcmp(version, "2"))
        FUZZ_CHECK(st == 404 || st == 400, "version \"2\" answered %d", st);
    if (binary && (data[0] >> 4 & 3) != 0)
        FUZZ_CHECK(st == 400, "Inference-Header-Content-Length \"%s\" answered %d", ihcl_req,
                   st);
    if (st == 200) {
        cJSON *rq = cJSON_ParseWithLength(body, binary ? req_json_len : len);
        FUZZ_CHECK(rq, "200 for a body cJSON cannot parse");
        check_ok(rq, model, &resp, json_len);
        cJSON_Delete(rq);
    } else {
        cJSON *err = fuzz_check_error_body(resp.body.data, resp.body.len, 0);
        if (fuzz_refused_too_long(err, 0, "text"))
            FUZZ_CHECK(!strcmp(model, "strict") || memmem(body, len, "truncate", 8),
                       "too long for a model that truncates, and the request did not say");
        cJSON_Delete(err);
    }
    sb_free(&resp.body);
    free(body);
    return 0;
}
