/* fuzz_json_body.c: libFuzzer harness for the request-body front door the
 * OpenAI and KServe handlers share (server/api/errors.c, api_parse_body):
 * Content-Type check, nesting-depth cap, cJSON, duplicate-key check. It
 * needs no HTTP connection and no model.
 *
 * Input: byte 0 picks the protocol (bit 7: OpenAI or KServe error shape)
 * and the Content-Type (low bits, from the table below); the rest is the
 * body, passed as the HTTP front passes it (a NUL-terminated copy).
 *
 * It checks, against an independent strict JSON checker (fuzz_common.h):
 *   - an accepted body is one RFC 8259 JSON object (UTF-8, no trailing
 *     bytes), nested at most 64 deep, without duplicate keys;
 *   - such a body, with a JSON Content-Type, is accepted (no false 400);
 *   - a rejected body gets 415 exactly when the Content-Type is not JSON,
 *     400 otherwise, and an error body in the protocol's shape that is
 *     itself strict JSON.
 * FUZZ_JSON_LENIENT=1 in the environment skips the strict-grammar and
 * UTF-8 parts of these checks, to fuzz deeper past known leniencies.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"
#include "tests/fuzz/fuzz_common.h"

#define MAX_DEPTH 64 /* server.max_json_depth's default, the README's limit */

static const struct {
    const char *type;
    int json; /* accepted as a JSON body */
} content_types[8] = {
    {NULL, 1},
    {"application/json", 1},
    {"application/json; charset=utf-8", 1},
    {"text/plain", 1},
    {"application/x-www-form-urlencoded", 1},
    {"application/vnd.mantissa+json", 1},
    {"application/octet-stream", 0},
    {"multipart/form-data; boundary=x", 0},
};

static cfg_config *cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char text[] =
        "{\"models\":[{\"name\":\"m\",\"path\":\"/nonexistent\","
        "\"variants\":[{\"name\":\"fp32\",\"precision\":\"fp32\"}]}]}";
    mt_err err = {{0}};
    if (cfg_parse(text, sizeof text - 1, "fuzz_json_body", &cfg, &err) != MT_OK) {
        fprintf(stderr, "fuzz_json_body: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int openai = data[0] >> 7;
    const int ct = data[0] & 7;
    const size_t len = size - 1;
    char *body = malloc(len + 1);
    FUZZ_CHECK(body, "out of memory");
    memcpy(body, data + 1, len);
    body[len] = 0;

    http_app app = {.cfg = cfg, .models = NULL};
    http_req req = {.method = "POST", .path = openai ? "/v1/embeddings" : "/v2/models/m/infer",
                    .body = body, .body_len = len,
                    .content_type = content_types[ct].type, .conn = NULL};
    http_call call = {.style = openai ? API_OPENAI : API_KSERVE};
    http_resp resp = {.status = 200, .call = &call};
    cJSON *j = api_parse_body(&app, &req, &resp);

    int refusable = 0;
    const int strict = fuzz_json_strict(body, len, 4 * MAX_DEPTH, &refusable);
    if (j) {
        FUZZ_CHECK(content_types[ct].json, "accepted Content-Type \"%s\"", content_types[ct].type);
        FUZZ_CHECK(resp.status == 200 && resp.body.len == 0, "accepted, but answered %d",
                   resp.status);
        FUZZ_CHECK(cJSON_IsObject(j), "accepted a body that is not an object");
        FUZZ_CHECK(fuzz_cjson_depth(j) <= MAX_DEPTH, "accepted nesting %d", fuzz_cjson_depth(j));
        FUZZ_CHECK(!fuzz_cjson_dup_keys(j), "accepted duplicate keys");
        FUZZ_CHECK(fuzz_lenient() || strict == 1,
                   "accepted a body that is not strict JSON (%zu bytes): \"%.*s\"", len,
                   (int)(len < 200 ? len : 200), body);
        cJSON_Delete(j);
    } else {
        if (!content_types[ct].json) {
            FUZZ_CHECK(resp.status == 415, "non-JSON Content-Type answered %d", resp.status);
        } else {
            FUZZ_CHECK(resp.status == 400, "rejected with %d", resp.status);
            /* A strict, shallow enough object without duplicate keys must pass. */
            if (strict == 1 && !refusable && len > 0) {
                cJSON *t = cJSON_ParseWithLength(body, len);
                int ok_shape = t && cJSON_IsObject(t) && fuzz_cjson_depth(t) <= MAX_DEPTH &&
                               !fuzz_cjson_dup_keys(t);
                cJSON_Delete(t);
                FUZZ_CHECK(!ok_shape, "rejected a valid JSON object: %s",
                           resp.body.data ? resp.body.data : "");
            }
        }
        FUZZ_CHECK(resp.body.len > 0 && resp.body.data, "rejected without an error body");
        cJSON *e = fuzz_check_error_body(resp.body.data, resp.body.len, openai);
        cJSON_Delete(e);
        FUZZ_CHECK(fuzz_json_strict(resp.body.data, resp.body.len, 8, NULL) == 1,
                   "error body is not strict JSON: %.*s", (int)resp.body.len, resp.body.data);
    }
    sb_free(&resp.body);
    free(body);
    return 0;
}
