/* api.h: the endpoints: what the files of server/api share, and what the
 * serve wiring (server/main.c) needs to start the transport with them.
 *
 *   routes.c   the route table (and GET /, its index) and the transport hooks
 *   call.c     one request's record (http_call): what it holds (the build it
 *              was routed to, its admission place, its job) and their
 *              release in one place; its log line and counters; the text ->
 *              vector jobs both inference protocols use
 *   cors.c     CORS headers and preflights (server.cors_allow_origins)
 *   trace.c    W3C trace context and OpenTelemetry spans (trace.h)
 *   errors.c   errors in each protocol's shape, and JSON request bodies
 *   health.c   health, server and model metadata, config, statistics, metrics
 *   openai.c   POST /v1/embeddings, GET /v1/models
 *   tei.c      text-embeddings-inference's routes
 *   rerank.c   the classifier routes: TEI's /rerank and /predict, the
 *              Cohere/Jina POST /v1/rerank
 *   chunks.c   late chunking: POST /embed_chunks
 *   outputs.c  per-token outputs: TEI's /embed_all and /embed_sparse, our
 *              /embed_multivector, the OpenAI route's "outputs" (a model's
 *              token heads: bge-m3)
 *   kserve.c   POST /v2/models/{m}/infer (JSON and binary tensors)
 *   grpc_kserve.c  KServe v2's gRPC service, as messages to and from the
 *              REST routes (pbjson.c: protobuf <-> their JSON)
 *   admin.c    Triton's repository extension, the config view, reload
 *   compare.c  one request's texts through every variant of a model
 *   prom.c     the Prometheus and Triton-statistics renderers
 *   ab_page.c  the A/B page
 */
#ifndef MT_SERVER_API_H
#define MT_SERVER_API_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/version.h"
#include "server/base/sbuf.h"
#include "server/core/config.h"
#include "server/core/models.h"
#include "server/core/reload.h"
#include "server/api/trace.h"
#include "server/core/sched.h"
#include "server/net/grpc.h"
#include "server/net/http.h"
#include "server/net/otlp.h"
#include "server/api/routes.h"

/* What the handlers serve. */
struct http_app {
    const cfg_config *cfg;
    srv_models *models;
    sched *sched;      /* NULL: tools and fuzzers call handlers directly, and the
                        * forward of an embedding request runs in the handler */
    reloader *reload;  /* NULL: no hot-switch */
    http_server *http; /* the transport serving it (its connection counts); may be NULL */
    const http_route *routes; /* the route table (api_routes): the error shape of a path no
                               * route took is its routes'; NULL in tools and fuzzers */
    int nroutes;
    otlp_exporter *tracer; /* spans go here (server.tracing); NULL: none is exported */
};

/* The error shape of a route (http_route.style). */
enum { API_KSERVE, API_OPENAI, API_TEI };

/* ---- routes.c ----------------------------------------------------------- */

const http_route *api_routes(int *n);
const http_hooks *api_hooks(void);

/* ---- grpc_kserve.c: KServe v2 over gRPC --------------------------------- */

/* The methods of inference.GRPCInferenceService for the gRPC transport
 * (none in a build without gRPC). */
const grpc_front_method *api_grpc_methods(int *n);

/* ---- call.c: one request ------------------------------------------------ */

/* The record of one request (the transport's http_call). The handlers fill
 * what they learn; the sent hook logs and counts it; the done hook releases
 * what it holds. */
struct http_call {
    const http_route *route;
    int style;              /* the error shape: API_KSERVE, API_OPENAI, API_TEI */
    char method[16], path[256];
    uint64_t t_start;
    srv_model *model;       /* the model the request named, once resolved */
    srv_variant *variant;   /* the build it was routed to: a reference, dropped at done */
    srv_model *admitted;    /* set when sched_admit took a place for it (given back at done) */
    sched_job *job;         /* a deferred job: a reference, dropped at done */
    char id[128];           /* the request id (KServe "id", X-Request-Id or generated) */
    char error[256];        /* the error message, for the log */
    int reason;             /* why it was refused (a stats_reason, for /metrics); -1: the
                             * one its status implies */
    int inputs;
    long tokens;
    int truncated;          /* of its texts, those cut to max_seq_len */
    char origin[256];       /* its Origin header, when CORS is on (cors.c) */
    bool preflight;         /* answered as a CORS preflight (its headers are set) */
    api_trace trace;        /* its trace context and answer (trace.c) */
};

/* A deferred answer that waits for a scheduler job. */
typedef struct {
    http_deferred http;
    sched_job *job;
} api_deferred;

/* Defers resp on d's job (its one reference moves to the request): the
 * transport suspends the connection and the job is submitted; respond
 * builds the answer once it has ended. */
void api_defer(http_resp *resp, api_deferred *d,
               void (*respond)(const http_app *, http_deferred *, http_resp *));

/* The request id: X-Request-Id if the client sent a usable one, else a
 * new one. */
void api_request_id(const http_req *req, http_resp *resp);

/* Resolves "name" or "name@variant" (plus the X-Mantissa-Variant header) to
 * a model and a build of one of its variants (see srv_acquire; key is the
 * route key for sticky routing, else the X-Mantissa-Route-Key header). The
 * request holds the build until it is done. Answers 404 (unknown model or
 * variant) or 503 (nothing serving) and returns false otherwise. */
bool api_resolve(const http_app *app, const http_req *req, const char *name, const char *key,
                 srv_model **m, srv_variant **v, http_resp *resp);

/* The texts of a request's field `field` (in: a string or a non-empty array
 * of strings, at most server.max_inputs; token ids are refused), as new
 * arrays *texts and *lens (the caller frees them). -1 after answering:
 * bad_status for a wrong type, 400 empty (TEI's error_type Empty), 413 too
 * many (422 on the TEI routes, as TEI answers). Empty strings are
 * left to api_no_empty_text (api_embed_new calls it). */
int api_text_inputs(const http_app *app, const cJSON *in, const char *field, int bad_status,
                    const char ***texts, size_t **lens, http_resp *r);

/* Refuses a request with an empty string among its n texts (lens may be
 * NULL: strlen), naming the first as field[i] and how many there are: 422
 * on the TEI routes, else 400; counted as the reason empty_input. Only ""
 * is empty: whitespace is a text, as OpenAI and TEI take it. False after
 * answering. */
bool api_no_empty_text(const char *field, const char *const *texts, const size_t *lens, int n,
                       http_resp *r);

/* An embedding request's job: the texts' ids and vectors, and what the
 * protocol needs to answer once it has run. */
typedef struct api_embed {
    api_deferred d;
    sched_job job;
    srv_model *m;
    srv_variant *v;         /* a reference, dropped when the job is freed */
    long tokens;
    int truncated;          /* texts cut to max_seq_len (X-Mantissa-Truncated-Inputs) */
    char id[128];
    /* OpenAI */
    bool base64;
    char *model_name;
    /* KServe */
    bool has_id;
    bool binary_out;
    /* TEI */
    int dimensions;         /* > 0: the first this many, renormalised (when normalize) */
    /* rerank.c */
    bool raw_scores;        /* logits as they are (else sigmoid or softmax) */
    bool batch;             /* /predict: a list of inputs (else one) */
    int top_n;              /* /v1/rerank: the results kept (0: all) */
    unsigned outputs;       /* API_OUT_* bits asked for (0: a pooled vector per text) */
    /* chunks.c: each chunk's tokens [spans[2i], spans[2i+1]) of the one text */
    int32_t *spans;
    int nspans;
    char **texts;           /* job.n copies of the documents to answer with, or NULL */
} api_embed;

/* The outputs of a model with token heads (bge-m3) a request asks for
 * (api_embed_opts.outputs): its pooled vector, its lexical weights, its
 * ColBERT vectors. */
enum { API_OUT_DENSE = 1, API_OUT_SPARSE = 2, API_OUT_COLBERT = 4 };

/* How an embedding request wants its texts treated. */
typedef struct {
    double timeout_us;   /* > 0: sooner than request_timeout_ms */
    int truncate;        /* -1: the model's setting; 0: refuse when too long; 1: truncate */
    bool truncate_left;  /* keep the end of a long text rather than its start */
    bool norms;          /* the job also gets each vector's norm (TEI's "normalize": false) */
    bool no_prompt;      /* no prompt before the texts, not even the model's default */
    bool token_rows;     /* a vector per token, not pooled (TEI's /embed_all): the job's out
                          * is (tokens, hidden), text i's rows from job.off[i]; at most the
                          * model's max_batch_tokens tokens (else 422, a limit) */
    /* The request's prompt_name (one of the model's prompts, put before
     * every text); NULL: the build's default (the config's prompt_name, else
     * the model's default_prompt_name), if any. */
    const char *prompt_name;
    /* Scores, not vectors (a classifier's: SCHED_KIND_SCORE; the job's out
     * is (n, nlabels) raw scores): each text alone, or with pair_b (NULL:
     * none) the pairs (texts[i], pair_b[i]) of lengths pair_blens, cut
     * longest first where truncation is on. No prompt is put before them. */
    bool scores;
    /* API_OUT_* bits, not 0: the model's token heads (SCHED_KIND_OUTPUTS:
     * the job's out is (tokens, srv_variant.outputs_width), model.h's
     * forward_outputs layout; capped like token_rows). The caller has
     * checked that the model has them. */
    unsigned outputs;
    const char *const *pair_b;
    const size_t *pair_blens;
    /* How errors name text i (TEI's similarity: "inputs.sentences[2]");
     * NULL: the protocol's field[i] (input[i], inputs[i], text[i]). */
    void (*text_name)(int i, char *buf, size_t cap);
} api_embed_opts;

/* Checks the limits on n texts (max_inputs 413, max_input_bytes 413, an
 * empty string: api_no_empty_text), takes an admission place (429 queue
 * full, 503 draining), tokenizes (400 invalid UTF-8; over max_seq_len
 * without truncation: 422 on the TEI routes, else 400, with the text's
 * tokens and the limit, counted as the reason too_long) and makes
 * the job, with its deadline (request_timeout_ms, or o->timeout_us when
 * sooner). o may be NULL (the defaults). The caller sets its protocol
 * fields, then api_embed_run. NULL after answering resp. */
api_embed *api_embed_new(const http_app *app, const http_req *req, srv_model *m, srv_variant *v,
                         const char *const *texts, const size_t *lens, int n,
                         const api_embed_opts *o, http_resp *resp);
/* With a scheduler: defers resp on e's job. Without one (tools, fuzzers):
 * runs the forward now and answers resp with respond. */
void api_embed_run(const http_app *app, api_embed *e, http_resp *resp,
                   void (*respond)(const http_app *, http_deferred *, http_resp *));
/* api_embed_run for an answer that names the model as the request did:
 * e->model_name gets a copy of model first (out of memory: 500, and the
 * job is dropped unrun). */
void api_embed_run_named(const http_app *app, api_embed *e, const char *model, http_resp *resp,
                         void (*respond)(const http_app *, http_deferred *, http_resp *));
/* After the job ended: sets the variant headers (and
 * X-Mantissa-Truncated-Inputs: how many texts were cut) and, when it failed,
 * answers the error (504 timeout, 503 shutdown, 500 failed) and returns
 * false. */
bool api_embed_result(api_embed *e, http_resp *resp);

/* ---- cors.c: server.cors_allow_origins ----------------------------------- */

/* Whether the config allows any origin. */
bool api_cors_on(const http_app *app);
/* The CORS headers of an answer to a request from origin (its Origin
 * header; may be NULL): Access-Control-Allow-Origin ("*" when the config
 * lists "*", the origin when it lists it, else none), with
 * Access-Control-Expose-Headers; and Vary: Origin. Nothing when CORS is
 * off. */
void api_cors_headers(const http_app *app, const char *origin, http_resp *r);
/* The transport's options hook: a preflight (OPTIONS with
 * Access-Control-Request-Method) is 204 with, for an allowed origin,
 * Access-Control-Allow-Origin, -Methods (allow: the path's methods),
 * -Headers (those asked for that a page may send: Content-Type,
 * Authorization, X-Request-Id, X-Mantissa-Variant, X-Mantissa-Route-Key,
 * X-Mantissa-Model, Inference-Header-Content-Length, traceparent,
 * tracestate) and -Max-Age. False
 * (405) when CORS is off or it is no preflight. */
bool api_cors_preflight(const http_app *app, const http_req *req, const char *allow,
                        http_resp *r);

/* ---- errors.c ----------------------------------------------------------- */

/* An error in the request's protocol's own shape: KServe {"error": "..."},
 * OpenAI {"error": {"message", "type", "param", "code"}}. param names the
 * field or limit at fault (may be NULL). */
void api_error(http_resp *r, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same, with TEI's error_type on the TEI routes given rather than the
 * status's (e.g. "Empty" for TEI's 400 for an empty batch). */
void api_error_typed(http_resp *r, int status, const char *tei_type, const char *param,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The transport's error hook (http_hooks.error). */
void api_transport_error(const http_app *app, const http_req *req, const http_route *route,
                         http_resp *resp, int status, const char *param, const char *msg);

/* Parses a JSON request body: the Content-Type, a nesting-depth cap, then
 * cJSON, then a duplicate-key check on every object. NULL after answering
 * 400 (or 415). */
cJSON *api_parse_body(const http_app *app, const http_req *req, http_resp *resp);
/* The same on the first len bytes of the body (the JSON part of a KServe
 * binary request); the Content-Type is not checked. */
cJSON *api_parse_json(const http_app *app, const char *text, size_t len, http_resp *resp);
/* Only the n known keys in object j; false after answering 400 naming the
 * first other one ("unknown field"). */
bool api_only_fields(const cJSON *j, const char *const *known, size_t n, http_resp *r);
/* Splits n BYTES elements out of a KServe binary tensor (u32 LE length +
 * bytes each) of input name, which must be exactly size bytes, into texts
 * and lens (pointing into p). False after answering 400. */
bool api_split_bytes(const unsigned char *p, size_t size, long n, const char *name,
                     const char **texts, size_t *lens, http_resp *r);

/* ---- the handlers --------------------------------------------------------- */

#define API_HANDLER(name) \
    void name(const http_app *app, const http_req *req, const char *const *p, http_resp *r)

/* every handler the route table names (routes.h), declared from it */
#define API_DECLARE(method, path, handler, style, flags, what) API_HANDLER(handler);
ROUTES(API_DECLARE)
#undef API_DECLARE

/* ---- tei.c: what TEI's routes share (tei.c, rerank.c) ------------------- */

/* The model TEI's routes serve (the first of the config, or the one the
 * X-Mantissa-Model header names) and a build of it; false after
 * answering. */
bool tei_resolve(const http_app *app, const http_req *req, srv_model **m, srv_variant **v,
                 http_resp *r);
/* The request id, the body parsed as a JSON object, fn on it, the body
 * freed (api_parse_body answers what is not an object). */
typedef void tei_body_fn(const http_app *app, const http_req *req, const cJSON *j, http_resp *r);
void tei_with_body(const http_app *app, const http_req *req, http_resp *r, tei_body_fn *fn);
/* Only keys in object j (named where + key in errors); false after 422. */
bool tei_known_fields(const cJSON *j, const char *where, const char *const *keys, size_t nkeys,
                      http_resp *r);
/* A boolean field, dflt when absent or null; -2 after answering 422. */
int tei_bool_field(const cJSON *j, const char *where, const char *key, int dflt, http_resp *r);
/* truncate, truncation_direction and prompt_name into *o; false after 422. */
bool tei_text_options(const cJSON *j, const char *where, api_embed_opts *o, http_resp *r);

/* ---- outputs.c: a model's token heads (bge-m3) ------------------------- */

/* The request field "outputs" (f: NULL or null when absent) into API_OUT_*
 * bits (0 when absent): a non-empty list of "dense", "sparse", "colbert",
 * each once, each one v's model gives (model names it in errors). False
 * after answering 400. */
bool api_outputs_parse(const cJSON *f, const srv_variant *v, const char *model, unsigned *out,
                       http_resp *r);
/* Text i's pooled vector in c's job (either layout: a row per text, or
 * forward_outputs' rows). */
const float *api_dense_row(const api_embed *c, int i);
/* Text i's lexical weights: TEI's [{"index": id, "value": w}, ...] (tei),
 * else {"id": w, ...}; ordered by token id. False when out of memory. */
bool api_write_sparse(sbuf *b, const api_embed *c, int i, bool tei);
/* Text i's ColBERT vectors (every token but the first), a list of lists. */
void api_write_colbert(sbuf *b, const api_embed *c, int i);

/* ---- rerank.c: KServe v2 infer on a reranker ---------------------------- */

/* What kserve.c read of an infer request's top level. */
typedef struct {
    bool has_id, raw_scores;
    bool binary_out;          /* parameters.binary_data_output */
    const unsigned char *bin; /* the binary tensor data after the JSON header (the
                               * binary extension: Inference-Header-Content-Length),
                               * bin_len bytes; NULL: none */
    size_t bin_len;
    int truncate;      /* -1: the model's setting */
    double timeout_us; /* 0: none */
} api_kserve_opts;

/* POST /v2/models/{m}/infer on a classifier (body j): BYTES inputs "query"
 * (one) and "text" (the documents) -> FP32 output "score" [n], sigmoid or
 * raw (parameters.raw_scores), in the documents' order. */
void api_kserve_rerank(const http_app *app, const http_req *req, const cJSON *j, srv_model *m,
                       srv_variant *v, const api_kserve_opts *k, http_resp *r);

/* The hidden size and token cap of m's builds (0 when none serves). */
void api_model_dims(srv_model *m, int *hidden, int *max_seq_len);

/* The A/B page's HTML (ab_page.c). */
extern const char api_ab_html[];

/* ---- prom.c ---------------------------------------------------------------- */

/* GET /metrics: Prometheus text format 0.0.4. */
void prom_render(sbuf *b, const http_app *app);
/* The Triton statistics object of one model (all its variants summed),
 * plus "reference", "shadow_rate" and "variants" (each variant's state,
 * share, requests, latency histogram, drift and gate figures). */
void prom_model_stats_json(sbuf *b, srv_models *models, srv_model *m);
/* A JSON number, or null for what is not finite (unset figures). */
void api_json_num(sbuf *b, double v);

#endif
