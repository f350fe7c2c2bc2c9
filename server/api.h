/* api.h: the endpoint handlers (OpenAI in api_openai.c, KServe v2 in
 * api_kserve.c, health and metadata in api_common.c) and what they share:
 * error bodies in each protocol's shape, and the text -> vector path. */
#ifndef MT_SERVER_API_H
#define MT_SERVER_API_H

#include <cJSON.h>
#include <stdbool.h>

#include "server/http.h"

#define MANTISSA_VERSION "0.1.0"

/* An error in the protocol's own shape: KServe {"error": "..."}, OpenAI
 * {"error": {"message", "type", "param", "code"}}. param names the field
 * or limit at fault (may be NULL). */
void api_error(http_resp *r, bool openai, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Parses a JSON request body: a nesting-depth cap, then cJSON, then a
 * duplicate-key check on every object. NULL after answering 400. */
cJSON *api_parse_body(const http_ctx *ctx, const http_req *req, bool openai, http_resp *resp);

/* Resolves "name" or "name@variant" (plus the X-Mantissa-Variant header) to
 * a model and variant; answers 404 and returns false when either is unknown. */
bool api_resolve(const http_ctx *ctx, const http_req *req, const char *name, bool openai,
                 srv_model **m, srv_variant **v, http_resp *resp);

/* Tokenizes and embeds n texts with v: out gets n x hidden floats (caller
 * frees), *tokens the total tokens. On failure answers resp (400 invalid
 * UTF-8, 413/422 over a limit, 500 engine failure) and returns false.
 * Sets X-Mantissa-Variant on success. */
bool api_embed(const http_ctx *ctx, srv_model *m, srv_variant *v, const char *const *texts,
               const size_t *lens, int n, bool openai, float **out, long *tokens,
               http_resp *resp);

void api_health_live(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_health_ready(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_server_metadata(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_model_metadata(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_model_ready(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_kserve_infer(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_openai_embeddings(const http_ctx *, const http_req *, const char *const *, http_resp *);
void api_openai_models(const http_ctx *, const http_req *, const char *const *, http_resp *);

#endif
