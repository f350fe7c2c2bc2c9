/* api.h: the endpoint handlers (OpenAI in api_openai.c, KServe v2 in
 * api_kserve.c, health and metadata in api_common.c) and what they share:
 * error bodies in each protocol's shape, and the text -> vector path. */
#ifndef MT_SERVER_API_H
#define MT_SERVER_API_H

#include <cJSON.h>
#include <stdbool.h>

#include "server/net/http.h"

#define MANTISSA_VERSION "0.1.0"

/* An error in the protocol's own shape: KServe {"error": "..."}, OpenAI
 * {"error": {"message", "type", "param", "code"}}. param names the field
 * or limit at fault (may be NULL). */
void api_error(http_resp *r, bool openai, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Parses a JSON request body: a nesting-depth cap, then cJSON, then a
 * duplicate-key check on every object. NULL after answering 400. */
cJSON *api_parse_body(const http_ctx *ctx, const http_req *req, bool openai, http_resp *resp);
/* The same on the first len bytes of the body (the JSON part of a KServe
 * binary request); the Content-Type is not checked. */
cJSON *api_parse_json(const http_ctx *ctx, const char *text, size_t len, bool openai,
                      http_resp *resp);

/* Resolves "name" or "name@variant" (plus the X-Mantissa-Variant header) to
 * a model and a build of one of its variants (see srv_acquire; key is the
 * route key for sticky routing, else the X-Mantissa-Route-Key header).
 * The build is held by resp (resp->held) until the connection is done.
 * Answers 404 (unknown model or variant) or 503 (nothing serving) and
 * returns false otherwise. */
bool api_resolve(const http_ctx *ctx, const http_req *req, const char *name, const char *key,
                 bool openai, srv_model **m, srv_variant **v, http_resp *resp);

/* An embedding request on its way through the scheduler: the job and
 * what the protocol needs to answer once it has run. */
typedef struct api_call {
    http_deferred d;
    sched_job job;
    srv_model *m;
    srv_variant *v;
    long tokens;
    char id[128];
    bool openai;
    /* OpenAI */
    bool base64;
    char *model_name;
    /* KServe */
    bool has_id;
    bool binary_out;
} api_call;

/* Checks the limits on n texts (max_inputs 413, max_input_bytes 413),
 * takes an admission place (429 queue full, 503 draining), tokenizes
 * (400 invalid UTF-8, 422 over max_seq_len without truncation) and makes
 * the job, with its deadline (request_timeout_ms, or timeout_us when > 0
 * and sooner). Returns the call with resp->deferred set; the caller sets
 * call->d.respond and its protocol fields. NULL after answering resp. */
api_call *api_submit_texts(const http_ctx *ctx, const http_req *req, srv_model *m,
                           srv_variant *v, const char *const *texts, const size_t *lens, int n,
                           bool openai, double timeout_us, http_resp *resp);

/* Ends a handler that made a call: with a scheduler the front submits the
 * job (resp->deferred stays set); without one (tools and fuzzers that call
 * handlers directly) the forward runs here and resp is answered now. */
void api_dispatch(const http_ctx *ctx, api_call *c, http_resp *resp);

/* After the job ended: fills resp's log fields and, when it failed,
 * answers the error (504 timeout, 503 shutdown, 500 failed) and returns
 * false. Sets X-Mantissa-Variant. */
bool api_call_result(api_call *c, http_resp *resp);

/* The admin endpoints (api_admin.c): Triton's repository extension, the
 * config view and reload, compare, and the A/B page. */
void api_repository_load(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_repository_unload(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_admin_config(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_admin_reload(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_compare(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_ab_page(const http_ctx *, const http_req *, const char *const *, http_resp *);
/* The A/B page's HTML (ab_page.c). */
extern const char api_ab_html[];

/* The hidden size and token cap of m's builds (0 when none serves). */
void api_model_dims(srv_model *m, int *hidden, int *max_seq_len);

/* The request id: X-Request-Id if the client sent one, else a new one. */
void api_request_id(const http_req *req, http_resp *resp);

void api_health_live(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_health_ready(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_server_metadata(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_model_metadata(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_model_ready(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_kserve_infer(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_openai_embeddings(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_openai_models(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_model_config(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_model_stats(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_repository_index(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_metrics(const http_ctx *, const http_req *, const char *const *, http_resp *);

#endif
