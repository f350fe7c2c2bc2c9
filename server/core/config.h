/* config.h: mantissa.json, parsed and validated as a whole.
 *
 * Every error names the file and the field, e.g.
 *   config/mantissa.json: models[0].variants[1].precision: unknown precision "int4"
 * Unknown and duplicated keys are errors too, so a typo never passes
 * silently. The README documents the schema.
 */
#ifndef MT_SERVER_CONFIG_H
#define MT_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/backend.h"
#include "engine/status.h"

struct cJSON;

#define CFG_NAME_MAX 64
#define CFG_MAX_MODELS 64

typedef struct {
    char name[CFG_NAME_MAX];
    mt_precision precision;
    char calibration[16]; /* absmax (default), percentile, mse */
    double percentile;    /* for calibration "percentile" */
    double traffic;       /* weight in the unpinned split */
    char weights[1024];   /* optional: a quantized safetensors file from `mantissa quantize` */
    char mix[1024];       /* per-layer precisions (engine/quant/mix.h text form); "": all `precision`;
                           * "auto": chosen at load under budget_cos (engine/quant/mix_search.h) */
    double budget_cos;    /* mix "auto": held-back mean cosine to FP32 at least this */
    char mix_high[16];    /* mix "auto": the lifted GEMMs' precision, or "default" */
    /* promotion gate (all optional; see README "Promotion gate") */
    char gate_probes[1024];   /* a file of probe texts, one per line; "": no gate */
    double gate_min_cosine;   /* the probes' mean cosine to the reference must reach this */
    double gate_max_p99_ratio;/* 0: unchecked; else p99 latency / the reference's at most this */
    double drift_floor;       /* 0: none; live shadow mean cosine below it: out of rotation */
    bool measure;             /* time its build against FP32 at load (server/core/measure.c) */
    bool is_reference;        /* made from models[].reference.precision (traffic 0) */
} cfg_variant;

/* A model's device: "auto" (0), or value i names backend row i - 1 of
 * engine/registry.h (mt_device_choices, mt_device_choice_reg). */
enum { CFG_DEVICE_AUTO = 0 };

typedef struct {
    char name[CFG_NAME_MAX];
    char *path;
    int device;            /* CFG_DEVICE_AUTO, or a backend row (see above) */
    int max_seq_len;       /* 0: the model's own (256 for MiniLM) */
    bool truncate;         /* over-long inputs: truncate (true) or 422 (false) */
    char prompt_name[64];  /* the prompt put before every input a request names none for
                            * (one of the model's config_sentence_transformers.json prompts);
                            * "": the model's default_prompt_name, if any */
    int matryoshka_min_dim; /* > 0: the model was trained for shorter vectors (Matryoshka):
                             * requests may ask for dimensions in [this, hidden]; 0: none */
    int max_batch_size;    /* texts per forward */
    int max_batch_tokens;
    int max_queue_delay_us; /* fixed delay; ignored when delay_auto */
    bool delay_auto;        /* max_queue_delay_us: "auto" (see server/core/sched.c) */
    int latency_target_ms;  /* p99 target the auto delay keeps under */
    int max_queue;          /* requests admitted at once (queued or running); more: 429 */
    cfg_variant *variants;
    int nvariants;
    /* the reference variant (usually fp32) the others are compared to */
    int reference;          /* index into variants; -1: none */
    double shadow_rate;     /* fraction of requests also run on the reference */
    int shadow_queue;       /* shadow texts waiting at most; more are dropped (counted) */
    int drift_window;       /* latest shadow comparisons the drift floor is judged on */
} cfg_model;

/* server.tracing: OpenTelemetry spans over OTLP/HTTP (README "Tracing"). */
typedef struct {
    char endpoint[1024];     /* the collector's traces URL; "": tracing off */
    double sample_ratio;     /* of the traces started here (a traceparent's flag rules its own) */
    char service_name[128];  /* the resource's service.name */
    char headers[2048];      /* more headers for the collector: "Name: value\n" each */
    int max_queue_spans;     /* spans waiting for export at most; more are dropped (counted) */
    int max_batch_spans;     /* spans per export request at most */
    int batch_delay_ms;      /* the longest a span waits for its export */
    int export_timeout_ms;   /* one export at most; and the flush at shutdown */
} cfg_tracing;

typedef struct {
    char listen_host[256];
    int listen_port;
    bool listen_overridden;  /* set by --listen (cfg_override_listen): the file's does not apply */
    /* KServe v2 over gRPC: server.grpc_listen "host:port"; grpc_port -1: off */
    char grpc_host[256];
    int grpc_port;
    bool grpc_overridden;    /* set by --grpc-listen (cfg_override_grpc_listen) */
    int grpc_max_streams;    /* concurrent calls on one gRPC connection */
    int http_threads;     /* read and unused: HTTP runs on the scheduler's loop */
    size_t max_body_bytes;
    int max_inputs;       /* texts per request */
    int engine_threads;   /* CPU threads for the engine; 0 = all cores */
    int request_timeout_ms;  /* a request still queued after this: 504 */
    int engine_workers;      /* engine threads per backend, each running one batch */
    int max_json_depth;      /* deeper request JSON: 400 */
    int max_input_bytes;     /* a longer text: 413 */
    int shutdown_grace_ms;   /* how long SIGTERM waits for in-flight work */
    int drain_delay_ms;      /* after SIGTERM: unready but still admitting, this long */
    int connection_limit;    /* connections kept open; at it, the idlest idle one goes */
    int probe_connections;   /* more for health probes when every connection is busy */
    int max_connections_per_ip; /* 0: no per-address limit */
    int memory_budget_mb;    /* 0: none; else the resident bytes of all builds at most */
    int connection_timeout_s;
    int log_level;           /* LOG_* (server/base/log.h) */
    int log_format;          /* LOG_TEXT or LOG_JSON (server/base/log.h); default JSON */
    bool log_format_overridden; /* set by --log-format (cfg_override_log_format) */
    char api_keys_file[1024];/* "": no authentication */
    char tls_cert[1024];     /* both set: HTTPS */
    char tls_key[1024];
    /* CORS: "" off; else the origins allowed, space-separated ("*": any) */
    char cors_allow_origins[2048];
    cfg_tracing tracing;
    bool watch;              /* reload when the config file changes (default true) */
    int reload_debounce_ms;  /* quiet time after the last change before reloading */
    cfg_model *models;
    int nmodels;
    char *source; /* path it came from, for messages */
} cfg_config;

mt_status cfg_load(const char *path, cfg_config **out, mt_err *err);
/* Parses text (label names it in errors). */
mt_status cfg_parse(const char *text, size_t len, const char *label, cfg_config **out,
                    mt_err *err);
void cfg_free(cfg_config *c);

/* Parses "host:port", "[v6]:port" or ":port" into c; 0 on success. */
int cfg_parse_listen(const char *s, char *host, size_t hostcap, int *port);
/* serve --listen: s ("host:port") replaces c's server.listen, and c says
 * so (a reload then compares the address in force, not the file's); 0 on
 * success, -1 (c unchanged) when s is not an address. */
int cfg_override_listen(cfg_config *c, const char *s);
/* serve --grpc-listen: the same for server.grpc_listen ("off": none). */
int cfg_override_grpc_listen(cfg_config *c, const char *s);
/* serve --log-format: s ("json" or "text") replaces c's server.log_format,
 * and c says so; 0 on success, -1 (c unchanged) when s names no format. */
int cfg_override_log_format(cfg_config *c, const char *s);

const cfg_model *cfg_find_model(const cfg_config *c, const char *name);

/* ---- server.tracing's checks (config_tracing.c; config.c reads the rest) ---- */

/* Checks the endpoint URL in url (capacity cap): "" (off), or http:// or
 * https://, a host, an optional port 1-65535, no space or control
 * character; a URL with no path gets OTLP's "/v1/traces". False with why. */
bool cfg_tracing_endpoint(char *url, size_t cap, char *why, size_t whycap);
/* server.tracing.headers (may be NULL): an object of header names (HTTP
 * tokens, not the ones the exporter sets) to string values (printable, no
 * line break), into out as "Name: value\n" lines. False with why. */
bool cfg_tracing_headers(const struct cJSON *json, char *out, size_t cap, char *why, size_t whycap);
/* Whether two configs trace alike (a reload warns that a change waits for
 * a restart). */
bool cfg_tracing_same(const cfg_tracing *a, const cfg_tracing *b);

/* ---- comparing configs (the hot-switch rebuilds only what changed) ---- */

/* Whether two variants would build the same weights and pass the same
 * gate: precision, calibration, percentile, weights file, gate; and be
 * measured alike (measure: its figures are taken when it is built).
 * (traffic and drift_floor are applied live and do not count.) */
bool cfg_variant_same_build(const cfg_variant *a, const cfg_variant *b);
/* The variant's mix_high as a precision; MT_PREC_COUNT for "default". */
mt_precision cfg_variant_mix_high(const cfg_variant *v);
/* Whether every variant of a and b would be built from the same model
 * (path, device, max_seq_len, and the prompt and Matryoshka settings its
 * builds keep). */
bool cfg_model_same_base(const cfg_model *a, const cfg_model *b);
/* A deep copy of m into out (path and variants are new allocations);
 * cfg_model_clear frees them. */
mt_status cfg_model_copy(const cfg_model *m, cfg_model *out, mt_err *err);
void cfg_model_clear(cfg_model *m);
/* The variant named name, or NULL. */
const cfg_variant *cfg_find_variant(const cfg_model *m, const char *name);

#endif
