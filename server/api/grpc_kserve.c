/* grpc_kserve.c: KServe v2's gRPC service (inference.GRPCInferenceService)
 * as the methods of the gRPC transport (server/net/grpc.h): each method's
 * request message becomes the REST request of the same meaning, which the
 * REST handlers answer, and their answer becomes the response message.
 * So the two protocols share every check, limit and error message.
 *
 *   ServerLive, ServerReady     GET /v2/health/live|ready -> live|ready
 *   ModelReady                  GET /v2/models/{m}[/versions/{v}]/ready
 *   ServerMetadata              GET /v2
 *   ModelMetadata, ModelConfig, ModelStatistics
 *                               GET /v2/models/{m}[/versions/{v}][/config|/stats]
 *   ModelInfer                  POST /v2/models/{m}[/versions/{v}]/infer, with the
 *                               inputs as binary tensors and the outputs asked as
 *                               binary: raw_output_contents
 *   RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload
 *                               POST /v2/repository/...
 * Other methods of the service (streaming, shared memory, trace and log
 * settings) answer UNIMPLEMENTED, as do unknown ones.
 *
 * Errors: the REST status maps to a gRPC code (grpc_front_status_of: 400
 * INVALID_ARGUMENT, 404 NOT_FOUND, 429/503 UNAVAILABLE, 504
 * DEADLINE_EXCEEDED, ...), and the REST error's text is the status message.
 * A call's deadline becomes the request's "timeout" parameter.
 */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"
#include "server/api/kserve.pb-c.h"
#include "server/api/pbjson.h"
#include "server/net/grpc.h"

#define SERVICE "/inference.GRPCInferenceService/"

/* ========================================================================
 * shared steps
 * ====================================================================== */

/* Unpacks a request message of type d; NULL after setting *st. */
static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *d, const uint8_t *msg,
                                size_t len, grpc_front_status *st)
{
    if (!pbjson_check_strings(d, msg, len, st->msg, sizeof st->msg)) {
        st->code = GRPC_FRONT_INVALID_ARGUMENT;
        return NULL;
    }
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, msg);
    if (!m) {
        st->code = GRPC_FRONT_INVALID_ARGUMENT;
        snprintf(st->msg, sizeof st->msg, "the request is not a valid %s message", d->name);
    }
    return m;
}

/* A model name or version as one path segment: not empty (name), no '/'. */
static bool segment_ok(const char *what, const char *s, bool required, grpc_front_status *st)
{
    if ((required && !*s) || strchr(s, '/') || strchr(s, '?') || strlen(s) > 200) {
        st->code = required && !*s ? GRPC_FRONT_INVALID_ARGUMENT : GRPC_FRONT_NOT_FOUND;
        snprintf(st->msg, sizeof st->msg, "%s \"%.200s\": %s", what, s,
                 !*s ? "required" : "no such model (a name has no '/' or '?')");
        return false;
    }
    return true;
}

/* /v2/models/{name}[/versions/{version}]{suffix} */
static bool model_path(grpc_front_rest *rest, const char *method, const char *name,
                       const char *version, const char *suffix, grpc_front_status *st)
{
    if (!segment_ok("model", name, true, st) || !segment_ok("version", version, false, st))
        return false;
    snprintf(rest->method, sizeof rest->method, "%s", method);
    if (*version)
        snprintf(rest->path, sizeof rest->path, "/v2/models/%s/versions/%s%s", name, version,
                 suffix);
    else
        snprintf(rest->path, sizeof rest->path, "/v2/models/%s%s", name, suffix);
    return true;
}

/* A REST error as the call's status: the KServe {"error": "..."} text. */
static bool rest_error(const http_resp *resp, grpc_front_status *st)
{
    cJSON *j = cJSON_ParseWithLength(resp->body.data ? resp->body.data : "", resp->body.len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
    grpc_front_status_of(resp->status, cJSON_IsString(m) ? m->valuestring : "request failed", st);
    cJSON_Delete(j);
    return false;
}

/* A 200's JSON body (wrapped as {key: body} when key is set) as message d. */
static bool json_reply(const ProtobufCMessageDescriptor *d, const char *key,
                       const http_resp *resp, sbuf *out, grpc_front_status *st)
{
    if (resp->status != 200)
        return rest_error(resp, st);
    cJSON *j = cJSON_ParseWithLength(resp->body.data ? resp->body.data : "", resp->body.len);
    if (j && key) {
        cJSON *w = cJSON_CreateObject();
        if (w)
            cJSON_AddItemToObject(w, key, j);
        else
            cJSON_Delete(j);
        j = w;
    }
    bool ok = j && pbjson_encode(d, j, out);
    cJSON_Delete(j);
    if (!ok)
        grpc_front_status_of(500, "the answer could not be encoded", st);
    return ok;
}

/* ========================================================================
 * health and metadata
 * ====================================================================== */

static bool req_live(const http_app *app, const uint8_t *msg, size_t len, grpc_front_rest *rest,
                     grpc_front_status *st)
{
    strcpy(rest->method, "GET");
    strcpy(rest->path, "/v2/health/live");
    return true;
}

static bool req_ready(const http_app *app, const uint8_t *msg, size_t len, grpc_front_rest *rest,
                      grpc_front_status *st)
{
    strcpy(rest->method, "GET");
    strcpy(rest->path, "/v2/health/ready");
    return true;
}

/* live/ready: true on 200, false on any other answer but a refused key. */
static bool flag_reply(const ProtobufCMessageDescriptor *d, const char *key,
                       const http_resp *resp, sbuf *out, grpc_front_status *st)
{
    if (resp->status == 401 || resp->status == 403)
        return rest_error(resp, st);
    cJSON *j = cJSON_CreateObject();
    bool ok = j && cJSON_AddBoolToObject(j, key, resp->status == 200) && pbjson_encode(d, j, out);
    cJSON_Delete(j);
    return ok;
}

static bool reply_live(const http_app *app, const grpc_front_rest *rest, const http_resp *resp,
                       sbuf *out, grpc_front_status *st)
{
    return flag_reply(&inference__server_live_response__descriptor, "live", resp, out, st);
}

static bool reply_ready(const http_app *app, const grpc_front_rest *rest, const http_resp *resp,
                        sbuf *out, grpc_front_status *st)
{
    return flag_reply(&inference__server_ready_response__descriptor, "ready", resp, out, st);
}

static bool req_model_ready(const http_app *app, const uint8_t *msg, size_t len,
                            grpc_front_rest *rest, grpc_front_status *st)
{
    Inference__ModelReadyRequest *m = (Inference__ModelReadyRequest *)unpack(
        &inference__model_ready_request__descriptor, msg, len, st);
    if (!m)
        return false;
    bool ok = model_path(rest, "GET", m->name, m->version, "/ready", st);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return ok;
}

static bool reply_model_ready(const http_app *app, const grpc_front_rest *rest,
                              const http_resp *resp, sbuf *out, grpc_front_status *st)
{
    return flag_reply(&inference__model_ready_response__descriptor, "ready", resp, out, st);
}

static bool req_server_metadata(const http_app *app, const uint8_t *msg, size_t len,
                                grpc_front_rest *rest, grpc_front_status *st)
{
    strcpy(rest->method, "GET");
    strcpy(rest->path, "/v2");
    return true;
}

static bool reply_server_metadata(const http_app *app, const grpc_front_rest *rest,
                                  const http_resp *resp, sbuf *out, grpc_front_status *st)
{
    return json_reply(&inference__server_metadata_response__descriptor, NULL, resp, out, st);
}

/* ModelMetadata, ModelConfig and ModelStatistics requests (each its own
 * type, with a name and a version): a GET of the model's resource, <suffix>
 * under /v2/models/<name>[/versions/<version>]; with name_optional, no name
 * nor version is every model's. */
static bool model_get(const char *name, const char *version, const char *suffix,
                      bool name_optional, grpc_front_rest *rest, grpc_front_status *st)
{
    if (name_optional && !*name && !*version) {
        strcpy(rest->method, "GET");
        strcpy(rest->path, "/v2/models/stats");
        return true;
    }
    return model_path(rest, "GET", name, version, suffix, st);
}

/* Unpacks a request of type T (descriptor D) into m, or fails the call. */
#define UNPACK(T, D, m)                                                                    \
    T *m = (T *)unpack(&D, msg, len, st);                                                  \
    if (!m)                                                                                \
        return false

static bool req_model_metadata(const http_app *app, const uint8_t *msg, size_t len,
                               grpc_front_rest *rest, grpc_front_status *st)
{
    UNPACK(Inference__ModelMetadataRequest, inference__model_metadata_request__descriptor, m);
    const bool ok = model_get(m->name, m->version, "", false, rest, st);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return ok;
}

static bool reply_model_metadata(const http_app *app, const grpc_front_rest *rest,
                                 const http_resp *resp, sbuf *out, grpc_front_status *st)
{
    return json_reply(&inference__model_metadata_response__descriptor, NULL, resp, out, st);
}

static bool req_model_config(const http_app *app, const uint8_t *msg, size_t len,
                             grpc_front_rest *rest, grpc_front_status *st)
{
    UNPACK(Inference__ModelConfigRequest, inference__model_config_request__descriptor, m);
    const bool ok = model_get(m->name, m->version, "/config", false, rest, st);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return ok;
}

static bool reply_model_config(const http_app *app, const grpc_front_rest *rest,
                               const http_resp *resp, sbuf *out, grpc_front_status *st)
{
    return json_reply(&inference__model_config_response__descriptor, "config", resp, out, st);
}

static bool req_model_stats(const http_app *app, const uint8_t *msg, size_t len,
                            grpc_front_rest *rest, grpc_front_status *st)
{
    UNPACK(Inference__ModelStatisticsRequest, inference__model_statistics_request__descriptor, m);
    const bool ok = model_get(m->name, m->version, "/stats", true, rest, st);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return ok;
}

static bool reply_model_stats(const http_app *app, const grpc_front_rest *rest,
                              const http_resp *resp, sbuf *out, grpc_front_status *st)
{
    return json_reply(&inference__model_statistics_response__descriptor, NULL, resp, out, st);
}

/* ========================================================================
 * the repository
 * ====================================================================== */

static bool req_index(const http_app *app, const uint8_t *msg, size_t len,
                      grpc_front_rest *rest, grpc_front_status *st)
{
    Inference__RepositoryIndexRequest *m = (Inference__RepositoryIndexRequest *)unpack(
        &inference__repository_index_request__descriptor, msg, len, st);
    if (!m)
        return false;
    strcpy(rest->method, "POST");
    strcpy(rest->path, "/v2/repository/index");
    rest->content_type = "application/json";
    sb_printf(&rest->body, "{\"ready\":%s}", m->ready ? "true" : "false");
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return true;
}

static bool reply_index(const http_app *app, const grpc_front_rest *rest, const http_resp *resp,
                        sbuf *out, grpc_front_status *st)
{
    return json_reply(&inference__repository_index_response__descriptor, "models", resp, out, st);
}

/* Load and unload: the model's path, and the parameters as JSON. */
static bool repo_request(const uint8_t *msg, size_t len, const char *what, grpc_front_rest *rest,
                         grpc_front_status *st)
{
    Inference__RepositoryModelLoadRequest *m = (Inference__RepositoryModelLoadRequest *)unpack(
        &inference__repository_model_load_request__descriptor, msg, len, st);
    if (!m)
        return false;
    bool ok = segment_ok("model", m->model_name, true, st);
    if (ok) {
        strcpy(rest->method, "POST");
        snprintf(rest->path, sizeof rest->path, "/v2/repository/models/%s/%s", m->model_name,
                 what);
        rest->content_type = "application/json";
        cJSON *params = pbjson_decode_field(&m->base, "parameters");
        if (params) {
            char *s = cJSON_PrintUnformatted(params);
            if (s)
                sb_printf(&rest->body, "{\"parameters\":%s}", s);
            else
                rest->body.oom = true;
            free(s);
            cJSON_Delete(params);
        }
    }
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return ok;
}

static bool req_load(const http_app *app, const uint8_t *msg, size_t len, grpc_front_rest *rest,
                     grpc_front_status *st)
{
    return repo_request(msg, len, "load", rest, st);
}

static bool req_unload(const http_app *app, const uint8_t *msg, size_t len,
                       grpc_front_rest *rest, grpc_front_status *st)
{
    return repo_request(msg, len, "unload", rest, st);
}

/* An empty response message (load, unload): nothing to encode. */
static bool reply_empty(const http_app *app, const grpc_front_rest *rest, const http_resp *resp,
                        sbuf *out, grpc_front_status *st)
{
    return resp->status == 200 || rest_error(resp, st);
}

/* ========================================================================
 * inference
 * ====================================================================== */

/* A parameters map as a JSON object (an empty one when unset). */
static cJSON *params_of(const ProtobufCMessage *m)
{
    cJSON *p = pbjson_decode_field(m, "parameters");
    return p ? p : cJSON_CreateObject();
}

/* Input i's elements as the binary tensor the REST extension takes: its
 * raw_input_contents entry, or its contents.bytes_contents each with its
 * 4-byte length. False after setting *st. */
static bool input_bytes(const Inference__ModelInferRequest *m, size_t i, sbuf *bin,
                        size_t *size, grpc_front_status *st)
{
    const Inference__ModelInferRequest__InferInputTensor *in = m->inputs[i];
    const size_t at = bin->len;
    if (m->n_raw_input_contents) {
        sb_putn(bin, m->raw_input_contents[i].data, m->raw_input_contents[i].len);
    } else if (in->contents && in->contents->n_bytes_contents) {
        for (size_t k = 0; k < in->contents->n_bytes_contents; k++) {
            const ProtobufCBinaryData *e = &in->contents->bytes_contents[k];
            const uint32_t n = (uint32_t)e->len;
            const unsigned char le[4] = {(unsigned char)n, (unsigned char)(n >> 8),
                                         (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
            sb_putn(bin, le, 4);
            sb_putn(bin, e->data, e->len);
        }
    } else {
        st->code = GRPC_FRONT_INVALID_ARGUMENT;
        snprintf(st->msg, sizeof st->msg,
                 "input \"%.100s\": no elements: send them in raw_input_contents or in "
                 "contents.bytes_contents",
                 in->name);
        return false;
    }
    *size = bin->len - at;
    return true;
}

/* The request's inputs as REST JSON inputs with binary_data_size, their
 * bytes appended to bin. */
static bool infer_inputs(const Inference__ModelInferRequest *m, cJSON *top, sbuf *bin,
                         grpc_front_status *st)
{
    if (m->n_raw_input_contents && m->n_raw_input_contents != m->n_inputs) {
        st->code = GRPC_FRONT_INVALID_ARGUMENT;
        snprintf(st->msg, sizeof st->msg,
                 "raw_input_contents has %zu entries for %zu inputs: one per input, or none",
                 m->n_raw_input_contents, m->n_inputs);
        return false;
    }
    cJSON *inputs = cJSON_AddArrayToObject(top, "inputs");
    for (size_t i = 0; inputs && i < m->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *in = m->inputs[i];
        cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
        cJSON *p = params_of(&in->base);
        size_t size = 0;
        cJSON_AddItemToArray(inputs, o);
        cJSON_AddStringToObject(o, "name", in->name);
        cJSON_AddStringToObject(o, "datatype", in->datatype);
        for (size_t k = 0; shape && k < in->n_shape; k++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)in->shape[k]));
        cJSON_AddItemToObject(o, "shape", shape);
        cJSON_AddItemToObject(o, "parameters", p);
        if (!input_bytes(m, i, bin, &size, st))
            return false;
        cJSON_DeleteItemFromObjectCaseSensitive(p, "binary_data_size");
        cJSON_AddNumberToObject(p, "binary_data_size", (double)size);
    }
    return true;
}

/* Outputs: the ones asked for, each asked as binary; none asked: the
 * model's own (its "embedding", a reranker's "score"), binary by the
 * request's binary_data_output. */
static void infer_outputs(const Inference__ModelInferRequest *m, cJSON *top)
{
    cJSON *outputs = m->n_outputs ? cJSON_AddArrayToObject(top, "outputs") : NULL;
    for (size_t i = 0; outputs && i < m->n_outputs; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON *p = params_of(&m->outputs[i]->base);
        cJSON_AddItemToArray(outputs, o);
        cJSON_AddStringToObject(o, "name", m->outputs[i]->name);
        cJSON_DeleteItemFromObjectCaseSensitive(p, "binary_data");
        cJSON_AddBoolToObject(p, "binary_data", true);
        cJSON_AddItemToObject(o, "parameters", p);
    }
}

static bool req_infer(const http_app *app, const uint8_t *msg, size_t len,
                      grpc_front_rest *rest, grpc_front_status *st)
{
    Inference__ModelInferRequest *m = (Inference__ModelInferRequest *)unpack(
        &inference__model_infer_request__descriptor, msg, len, st);
    if (!m)
        return false;
    cJSON *top = cJSON_CreateObject(), *p = params_of(&m->base);
    sbuf bin;
    sb_init(&bin);
    bool ok = top && p && model_path(rest, "POST", m->model_name, m->model_version, "/infer", st);
    if (ok) {
        if (*m->id)
            cJSON_AddStringToObject(top, "id", m->id);
        cJSON_DeleteItemFromObjectCaseSensitive(p, "binary_data_output");
        cJSON_AddBoolToObject(p, "binary_data_output", true);
        if (rest->deadline_us && !cJSON_GetObjectItemCaseSensitive(p, "timeout"))
            cJSON_AddNumberToObject(p, "timeout", (double)rest->deadline_us);
        cJSON_AddItemToObject(top, "parameters", p);
        p = NULL;
        ok = infer_inputs(m, top, &bin, st);
        infer_outputs(m, top);
    }
    char *json = ok ? cJSON_PrintUnformatted(top) : NULL;
    if (json) {
        size_t jl = strlen(json);
        sb_putn(&rest->body, json, jl);
        sb_putn(&rest->body, bin.data, bin.len);
        rest->content_type = "application/octet-stream";
        rest->header_names[rest->nheaders] = "Inference-Header-Content-Length";
        snprintf(rest->header_values[rest->nheaders++], sizeof rest->header_values[0], "%zu", jl);
    } else if (ok) {
        grpc_front_status_of(500, "out of memory", st);
        ok = false;
    }
    free(json);
    sb_free(&bin);
    cJSON_Delete(p);
    cJSON_Delete(top);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return ok;
}

/* The REST answer (a JSON header, then each output's raw bytes) as a
 * ModelInferResponse with raw_output_contents. */
static bool reply_infer(const http_app *app, const grpc_front_rest *rest, const http_resp *resp,
                        sbuf *out, grpc_front_status *st)
{
    if (resp->status != 200)
        return rest_error(resp, st);
    size_t jl = resp->body.len;
    for (int i = 0; i < resp->nheaders; i++)
        if (!strcmp(resp->headers[i].name, "Inference-Header-Content-Length"))
            jl = strtoull(resp->headers[i].value, NULL, 10);
    if (jl > resp->body.len)
        jl = resp->body.len;
    cJSON *j = cJSON_ParseWithLength(resp->body.data, jl);
    cJSON *outputs = cJSON_GetObjectItemCaseSensitive(j, "outputs"), *o;
    size_t at = jl;
    bool ok = j != NULL;
    sbuf raw;
    sb_init(&raw);
    cJSON_ArrayForEach(o, outputs)
    {
        cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(p, "binary_data_size");
        size_t n = cJSON_IsNumber(size) ? (size_t)size->valuedouble : 0;
        if (n > resp->body.len - at) {
            ok = false;
            break;
        }
        pbjson_put_bytes(&raw, 6, resp->body.data + at, n); /* raw_output_contents */
        at += n;
        cJSON_DeleteItemFromObjectCaseSensitive(p, "binary_data_size");
        if (!cJSON_GetArraySize(p))
            cJSON_DeleteItemFromObjectCaseSensitive(o, "parameters");
    }
    ok = ok && pbjson_encode(&inference__model_infer_response__descriptor, j, out);
    sb_putn(out, raw.data, raw.len);
    sb_free(&raw);
    cJSON_Delete(j);
    if (!ok)
        grpc_front_status_of(500, "the answer could not be encoded", st);
    return ok;
}

/* ========================================================================
 * the table
 * ====================================================================== */

static const grpc_front_method methods[] = {
    {SERVICE "ModelInfer", req_infer, reply_infer}, /* first: the most called */
    {SERVICE "ServerLive", req_live, reply_live},
    {SERVICE "ServerReady", req_ready, reply_ready},
    {SERVICE "ModelReady", req_model_ready, reply_model_ready},
    {SERVICE "ServerMetadata", req_server_metadata, reply_server_metadata},
    {SERVICE "ModelMetadata", req_model_metadata, reply_model_metadata},
    {SERVICE "ModelConfig", req_model_config, reply_model_config},
    {SERVICE "ModelStatistics", req_model_stats, reply_model_stats},
    {SERVICE "RepositoryIndex", req_index, reply_index},
    {SERVICE "RepositoryModelLoad", req_load, reply_empty},
    {SERVICE "RepositoryModelUnload", req_unload, reply_empty},
};

const grpc_front_method *api_grpc_methods(int *n)
{
    *n = (int)(sizeof methods / sizeof *methods);
    return methods;
}
