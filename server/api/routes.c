/* routes.c: every endpoint in one table (method, path, handler, error
 * shape, flags, and a line on what it is for), handed to the transport
 * with the hooks of call.c; GET / lists the same table (api_index). */
#include <stdatomic.h>
#include <string.h>

#include "server/api/api.h"

#define K API_KSERVE
#define O API_OPENAI
#define T API_TEI
#define QUIET HTTP_ROUTE_QUIET
#define PROBE (HTTP_ROUTE_QUIET | HTTP_ROUTE_NO_AUTH | HTTP_ROUTE_PROBE)

/* X(method, path, handler, style, flags, what it is for) */
#define ROUTES(X)                                                                                \
    X("GET", "/v2/health/live", api_health_live, K, PROBE, "liveness")                          \
    X("GET", "/v2/health/ready", api_health_ready, K, PROBE, "readiness")                        \
    X("GET", "/v2", api_server_metadata, K, 0, "KServe v2 server metadata")                     \
    X("GET", "/v2/models/stats", api_model_stats, K, 0, "Triton statistics of every model")     \
    X("GET", "/v2/models/{}", api_model_metadata, K, 0, "KServe v2 model metadata")             \
    X("GET", "/v2/models/{}/versions/{}", api_model_metadata, K, 0, "KServe v2 model metadata") \
    X("GET", "/v2/models/{}/ready", api_model_ready, K, QUIET, "model readiness")               \
    X("GET", "/v2/models/{}/versions/{}/ready", api_model_ready, K, QUIET, "model readiness")   \
    X("GET", "/v2/models/{}/config", api_model_config, K, 0, "Triton model configuration")      \
    X("GET", "/v2/models/{}/versions/{}/config", api_model_config, K, 0,                        \
      "Triton model configuration")                                                              \
    X("GET", "/v2/models/{}/stats", api_model_stats, K, 0, "Triton statistics of a model")      \
    X("GET", "/v2/models/{}/versions/{}/stats", api_model_stats, K, 0,                          \
      "Triton statistics of a model")                                                            \
    X("POST", "/v2/models/{}/infer", api_kserve_infer, K, 0, "KServe v2 inference (embed)")     \
    X("POST", "/v2/models/{}/versions/{}/infer", api_kserve_infer, K, 0,                        \
      "KServe v2 inference (embed)")                                                             \
    X("POST", "/v2/repository/index", api_repository_index, K, 0, "the models and their state") \
    X("POST", "/v2/repository/models/{}/load", api_repository_load, K, 0,                       \
      "admin: (re)load a model as the config file says")                                         \
    X("POST", "/v2/repository/models/{}/unload", api_repository_unload, K, 0,                   \
      "admin: take a model out of service")                                                      \
    X("GET", "/v2/admin/config", api_admin_config, K, 0, "admin: the config in force")          \
    X("POST", "/v2/admin/reload", api_admin_reload, K, 0, "admin: reload the config file")      \
    X("POST", "/v2/models/{}/compare", api_compare, K, 0, "A/B: texts through every variant")   \
    X("GET", "/ab", api_ab_page, K, 0, "A/B: the traffic and drift page")                       \
    X("POST", "/v1/embeddings", api_openai_embeddings, O, 0, "OpenAI embeddings")               \
    X("POST", "/embeddings", api_openai_embeddings, O, 0,                                       \
      "OpenAI embeddings (infinity's and TEI's path)")                                           \
    X("GET", "/v1/models", api_openai_models, O, 0, "OpenAI model list")                        \
    X("GET", "/metrics", api_metrics, K, QUIET, "Prometheus metrics")                           \
    /* text-embeddings-inference's routes (tei.c) */                                             \
    X("POST", "/embed", api_tei_embed, T, 0, "TEI embed")                                       \
    X("POST", "/", api_tei_root, T, 0,                                                          \
      "TEI embed (similarity when inputs is {source_sentence, sentences})")                     \
    X("POST", "/similarity", api_tei_similarity, T, 0, "TEI sentence similarity (cosines)")     \
    X("POST", "/embed_all", api_tei_embed_all, T, 0,                                            \
      "TEI token embeddings (a vector per token, before pooling)")                              \
    X("POST", "/tokenize", api_tei_tokenize, T, 0, "TEI tokenize")                              \
    X("POST", "/decode", api_tei_decode, T, 0, "TEI decode: token ids back into text")          \
    X("POST", "/rerank", api_tei_rerank, T, 0,                                                  \
      "TEI rerank (424: no model served is a reranker)")                                         \
    X("POST", "/embed_sparse", api_tei_embed_sparse, T, 0,                                      \
      "TEI sparse embeddings (424: no model served is a SPLADE model)")                          \
    X("GET", "/info", api_tei_info, T, 0, "TEI model info")                                     \
    X("GET", "/health", api_tei_health, T, PROBE, "TEI health")                                 \
    X("GET", "/", api_index, T, QUIET | HTTP_ROUTE_PROBE,                                       \
      "this index (TEI's health: 503 when not ready)")

#define ROUTE_ROW(method, path, handler, style, flags, what) {method, path, handler, style, flags},
#define ROUTE_WHAT(method, path, handler, style, flags, what) what,

static const http_route routes[] = {ROUTES(ROUTE_ROW)};
static const char *const route_what[] = {ROUTES(ROUTE_WHAT)};

const http_route *api_routes(int *n)
{
    *n = (int)(sizeof routes / sizeof *routes);
    return routes;
}

/* A route's path as the index shows it: the first {} is the model, the
 * second its version. */
static void index_path(sbuf *b, const char *pattern)
{
    char path[128];
    size_t n = 0;
    int holes = 0;
    for (const char *c = pattern; *c && n + 10 < sizeof path; c++) {
        if (c[0] == '{' && c[1] == '}') {
            const char *name = holes++ ? "{version}" : "{model}";
            memcpy(path + n, name, strlen(name));
            n += strlen(name);
            c++;
        } else {
            path[n++] = *c;
        }
    }
    sb_json_str(b, path, n);
}

/* GET /: the server, its version and every route of the table above; as
 * TEI's GET / also the health check (503 when not ready). Unlike the other
 * health checks it needs a key when API keys are on (it names the build):
 * GET /health is TEI's public one. */
API_HANDLER(api_index)
{
    bool ready = app->models && atomic_load(&app->models->ready) &&
                 !(app->sched && sched_draining(app->sched));
    if (!ready) {
        api_error(r, 503, NULL, "the server is not ready or is shutting down");
        return;
    }
    sbuf *b = &r->body;
    sb_puts(b, "{\"name\":\"mantissa\",\"version\":\"" MANTISSA_VERSION "\",\"commit\":");
    sb_json_str(b, mt_build_commit(), strlen(mt_build_commit()));
    sb_puts(b, ",\"routes\":[");
    static const char *const api_name[] = {[K] = "kserve", [O] = "openai", [T] = "tei"};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        sb_printf(b, "%s{\"method\":\"%s\",\"path\":", i ? "," : "", routes[i].method);
        index_path(b, routes[i].pattern);
        sb_printf(b, ",\"api\":\"%s\",\"what\":", api_name[routes[i].style]);
        sb_json_str(b, route_what[i], strlen(route_what[i]));
        sb_putc(b, '}');
    }
    sb_puts(b, "]}");
}
