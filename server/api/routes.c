/* routes.c: every endpoint in one table (method, path, handler, error
 * shape, flags), handed to the transport with the hooks of call.c. */
#include "server/api/api.h"

#define K API_KSERVE
#define O API_OPENAI
#define T API_TEI
#define QUIET HTTP_ROUTE_QUIET
#define PROBE (HTTP_ROUTE_QUIET | HTTP_ROUTE_NO_AUTH | HTTP_ROUTE_PROBE)

static const http_route routes[] = {
    {"GET", "/v2/health/live", api_health_live, K, PROBE},
    {"GET", "/v2/health/ready", api_health_ready, K, PROBE},
    {"GET", "/v2", api_server_metadata, K, 0},
    {"GET", "/v2/models/stats", api_model_stats, K, 0},
    {"GET", "/v2/models/{}", api_model_metadata, K, 0},
    {"GET", "/v2/models/{}/versions/{}", api_model_metadata, K, 0},
    {"GET", "/v2/models/{}/ready", api_model_ready, K, QUIET},
    {"GET", "/v2/models/{}/versions/{}/ready", api_model_ready, K, QUIET},
    {"GET", "/v2/models/{}/config", api_model_config, K, 0},
    {"GET", "/v2/models/{}/versions/{}/config", api_model_config, K, 0},
    {"GET", "/v2/models/{}/stats", api_model_stats, K, 0},
    {"GET", "/v2/models/{}/versions/{}/stats", api_model_stats, K, 0},
    {"POST", "/v2/models/{}/infer", api_kserve_infer, K, 0},
    {"POST", "/v2/models/{}/versions/{}/infer", api_kserve_infer, K, 0},
    {"POST", "/v2/repository/index", api_repository_index, K, 0},
    {"POST", "/v2/repository/models/{}/load", api_repository_load, K, 0},
    {"POST", "/v2/repository/models/{}/unload", api_repository_unload, K, 0},
    {"GET", "/v2/admin/config", api_admin_config, K, 0},
    {"POST", "/v2/admin/reload", api_admin_reload, K, 0},
    {"POST", "/v2/models/{}/compare", api_compare, K, 0},
    {"GET", "/ab", api_ab_page, K, 0},
    {"POST", "/v1/embeddings", api_openai_embeddings, O, 0},
    {"GET", "/v1/models", api_openai_models, O, 0},
    {"GET", "/metrics", api_metrics, K, QUIET},
    /* text-embeddings-inference's routes (tei.c) */
    {"POST", "/embed", api_tei_embed, T, 0},
    {"POST", "/", api_tei_embed, T, 0},
    {"POST", "/tokenize", api_tei_tokenize, T, 0},
    {"GET", "/info", api_tei_info, T, 0},
    {"GET", "/health", api_tei_health, T, PROBE},
    {"GET", "/", api_tei_health, T, PROBE},
};

const http_route *api_routes(int *n)
{
    *n = (int)(sizeof routes / sizeof *routes);
    return routes;
}
