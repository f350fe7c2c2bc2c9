/* fuzz_grpc.c: libFuzzer harness for KServe v2's gRPC messages
 * (server/api/grpc_kserve.c, server/api/pbjson.c): a request message
 * through its method's request function, the REST route it names (the
 * real handler, with the real model loaded: fuzz_server.h), and the
 * method's reply, the way the gRPC transport (server/net/grpc.c) runs a
 * call, without the network.
 *
 * Input: byte 0 picks the method (modulo the list below); the rest is the
 * request message's bytes, as a client would send them.
 *
 * It checks, on every input:
 *   - a message the method refuses gets INVALID_ARGUMENT or NOT_FOUND with
 *     a message, never another code;
 *   - a message it takes names a path the route table has for its method
 *     (a REST request no route takes would be a finding);
 *   - the REST answer is one listed for client input (200, 400, 404, 413;
 *     503 only for ModelReady, a model not ready; a 500 is a finding), and
 *     the reply agrees with it (ModelReady: ready true on 200, else false): a 200 gives a
 *     response message that protobuf-c reads back as the method's response
 *     type, another status gives the gRPC code grpc_front_status_of maps it
 *     to, with the REST error's text;
 *   - ModelInfer's 200: one FP32 output "embedding" of shape [n, 384]
 *     whose raw_output_contents entry holds n * 384 finite floats, each row
 *     of unit norm.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/kserve.pb-c.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_server.h"

#define HIDDEN 384

static const struct {
    const char *name;
    const ProtobufCMessageDescriptor *reply;
} METHODS[] = {
    {"ModelInfer", &inference__model_infer_response__descriptor},
    {"ModelReady", &inference__model_ready_response__descriptor},
    {"ModelMetadata", &inference__model_metadata_response__descriptor},
    {"ModelConfig", &inference__model_config_response__descriptor},
    {"ModelStatistics", &inference__model_statistics_response__descriptor},
};
#define NMETHODS (sizeof METHODS / sizeof *METHODS)

static const grpc_front_method *method_named(const char *name)
{
    int n;
    const grpc_front_method *m = api_grpc_methods(&n);
    for (int i = 0; i < n; i++) {
        const char *slash = strrchr(m[i].path, '/');
        if (slash && !strcmp(slash + 1, name))
            return &m[i];
    }
    FUZZ_CHECK(0, "no gRPC method %s", name);
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_server_init("fuzz_grpc");
    return 0;
}

static void check_infer(const uint8_t *out, size_t len)
{
    Inference__ModelInferResponse *r = inference__model_infer_response__unpack(NULL, len, out);
    FUZZ_CHECK(r, "ModelInfer: the answer is no ModelInferResponse");
    FUZZ_CHECK(r->n_outputs == 1 && !strcmp(r->outputs[0]->name, "embedding") &&
                   !strcmp(r->outputs[0]->datatype, "FP32"),
               "ModelInfer: not one FP32 output \"embedding\"");
    const Inference__ModelInferResponse__InferOutputTensor *o = r->outputs[0];
    FUZZ_CHECK(o->n_shape == 2 && o->shape[1] == HIDDEN && o->shape[0] >= 1 &&
                   o->shape[0] <= FUZZ_MAX_INPUTS,
               "ModelInfer: shape is not [n, %d]", HIDDEN);
    const size_t nf = (size_t)o->shape[0] * HIDDEN;
    FUZZ_CHECK(r->n_raw_output_contents == 1 && r->raw_output_contents[0].len == nf * 4,
               "ModelInfer: raw_output_contents does not hold %zu floats", nf);
    const float *v = (const float *)(const void *)r->raw_output_contents[0].data;
    for (long i = 0; i < o->shape[0]; i++) {
        double ss = 0;
        for (int k = 0; k < HIDDEN; k++) {
            float x;
            memcpy(&x, v + i * HIDDEN + k, sizeof x);
            FUZZ_CHECK(isfinite(x), "ModelInfer: row %ld has a non-finite value", i);
            ss += (double)x * x;
        }
        FUZZ_CHECK(fabs(sqrt(ss) - 1) < 1e-3, "ModelInfer: row %ld has norm %g", i, sqrt(ss));
    }
    inference__model_infer_response__free_unpacked(r, NULL);
}

/* The REST request the method made, through its route, then the reply. */
static void run(size_t k, const grpc_front_method *m, grpc_front_rest *rest)
{
    int nroutes;
    const http_route *routes = api_routes(&nroutes);
    http_match match;
    http_route_match(routes, nroutes, rest->method, rest->path, &match);
    FUZZ_CHECK(match.route, "%s: no route takes %s %s", METHODS[k].name, rest->method,
               rest->path);
    const char *headers[2 * 4 + 1] = {0};
    for (int i = 0; i < rest->nheaders; i++) {
        headers[2 * i] = rest->header_names[i];
        headers[2 * i + 1] = rest->header_values[i];
    }
    http_req req = {.method = rest->method, .path = rest->path,
                    .body = rest->body.data ? rest->body.data : "", .body_len = rest->body.len,
                    .content_type = rest->content_type, .headers = headers};
    const char *pp[HTTP_MAX_PARAMS + 1] = {0};
    for (int i = 0; i < match.nparams; i++)
        pp[i] = match.params[i];
    http_resp resp;
    fuzz_handle(match.route->handler, &req, pp, &resp);
    FUZZ_CHECK(resp.status == 200 || resp.status == 400 || resp.status == 404 ||
                   resp.status == 413 || (k == 1 && resp.status == 503),
               "%s: status %d for client input", METHODS[k].name, resp.status);
    sbuf out;
    sb_init(&out);
    grpc_front_status st = {GRPC_FRONT_OK, ""};
    const bool ok = m->reply(&fuzz_ctx, rest, &resp, &out, &st);
    if (resp.status == 200 || (k == 1 && resp.status != 401)) { /* ModelReady: a flag */
        FUZZ_CHECK(ok && st.code == GRPC_FRONT_OK, "%s: 200 but no message", METHODS[k].name);
        if (k == 0) {
            check_infer((const uint8_t *)out.data, out.len);
        } else {
            ProtobufCMessage *r =
                protobuf_c_message_unpack(METHODS[k].reply, NULL, out.len, (uint8_t *)out.data);
            FUZZ_CHECK(r, "%s: the answer is no %s", METHODS[k].name, METHODS[k].reply->name);
            protobuf_c_message_free_unpacked(r, NULL);
        }
    } else {
        grpc_front_status want;
        grpc_front_status_of(resp.status, "", &want);
        FUZZ_CHECK(!ok && st.code == want.code && st.msg[0],
                   "%s: REST %d became gRPC %d (\"%s\"), not %d", METHODS[k].name, resp.status,
                   st.code, st.msg, want.code);
    }
    sb_free(&out);
    sb_free(&resp.body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const size_t k = data[0] % NMETHODS;
    const grpc_front_method *m = method_named(METHODS[k].name);
    grpc_front_rest rest;
    memset(&rest, 0, sizeof rest);
    sb_init(&rest.body);
    grpc_front_status st = {GRPC_FRONT_OK, ""};
    if (m->request(&fuzz_ctx, data + 1, size - 1, &rest, &st))
        run(k, m, &rest);
    else
        FUZZ_CHECK((st.code == GRPC_FRONT_INVALID_ARGUMENT || st.code == GRPC_FRONT_NOT_FOUND) &&
                       st.msg[0],
                   "%s: refused with code %d (\"%s\")", METHODS[k].name, st.code, st.msg);
    sb_free(&rest.body);
    if (rest.free_state)
        rest.free_state(rest.state);
    return 0;
}
