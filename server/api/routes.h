/* routes.h: the route table as one X-macro, ROUTES(X), each row
 * X(method, path, handler, style, flags, what it is for). routes.c expands
 * it into the table the transport matches and GET /'s index; api.h into
 * the handlers' declarations, so a route is added by one row here and its
 * handler's definition. */
#ifndef MT_SERVER_API_ROUTES_H
#define MT_SERVER_API_ROUTES_H

/* probes: quiet in the log, no API key, answered on a reserved connection */
#define API_PROBE (HTTP_ROUTE_QUIET | HTTP_ROUTE_NO_AUTH | HTTP_ROUTE_PROBE)

/* X(method, path, handler, style, flags, what it is for) */
#define ROUTES(X)                                                                                  \
    X("GET", "/v2/health/live", api_health_live, API_KSERVE, API_PROBE, "liveness")                \
    X("GET", "/v2/health/ready", api_health_ready, API_KSERVE, API_PROBE, "readiness")             \
    X("GET", "/v2", api_server_metadata, API_KSERVE, 0, "KServe v2 server metadata")               \
    X("GET", "/v2/models/stats", api_model_stats, API_KSERVE, 0,                                   \
      "Triton statistics of every model")                                                          \
    X("GET", "/v2/models/{}", api_model_metadata, API_KSERVE, 0, "KServe v2 model metadata")       \
    X("GET", "/v2/models/{}/versions/{}", api_model_metadata, API_KSERVE, 0,                       \
      "KServe v2 model metadata")                                                                  \
    X("GET", "/v2/models/{}/ready", api_model_ready, API_KSERVE, HTTP_ROUTE_QUIET,                 \
      "model readiness")                                                                           \
    X("GET", "/v2/models/{}/versions/{}/ready", api_model_ready, API_KSERVE, HTTP_ROUTE_QUIET,     \
      "model readiness")                                                                           \
    X("GET", "/v2/models/{}/config", api_model_config, API_KSERVE, 0,                              \
      "Triton model configuration")                                                                \
    X("GET", "/v2/models/{}/versions/{}/config", api_model_config, API_KSERVE, 0,                  \
      "Triton model configuration")                                                                \
    X("GET", "/v2/models/{}/stats", api_model_stats, API_KSERVE, 0,                                \
      "Triton statistics of a model")                                                              \
    X("GET", "/v2/models/{}/versions/{}/stats", api_model_stats, API_KSERVE, 0,                    \
      "Triton statistics of a model")                                                              \
    X("POST", "/v2/models/{}/infer", api_kserve_infer, API_KSERVE, 0,                              \
      "KServe v2 inference (embed)")                                                               \
    X("POST", "/v2/models/{}/versions/{}/infer", api_kserve_infer, API_KSERVE, 0,                  \
      "KServe v2 inference (embed)")                                                               \
    X("POST", "/v2/repository/index", api_repository_index, API_KSERVE, 0,                         \
      "the models and their state")                                                                \
    X("POST", "/v2/repository/models/{}/load", api_repository_load, API_KSERVE, 0,                 \
      "admin: (re)load a model as the config file says")                                           \
    X("POST", "/v2/repository/models/{}/unload", api_repository_unload, API_KSERVE, 0,             \
      "admin: take a model out of service")                                                        \
    X("GET", "/v2/admin/config", api_admin_config, API_KSERVE, 0, "admin: the config in force")    \
    X("POST", "/v2/admin/reload", api_admin_reload, API_KSERVE, 0,                                 \
      "admin: reload the config file")                                                             \
    X("POST", "/v2/models/{}/compare", api_compare, API_KSERVE, 0,                                 \
      "A/B: texts through every variant")                                                          \
    X("GET", "/ab", api_ab_page, API_KSERVE, 0, "A/B: the traffic and drift page")                 \
    X("POST", "/v1/embeddings", api_openai_embeddings, API_OPENAI, 0, "OpenAI embeddings")         \
    X("POST", "/embeddings", api_openai_embeddings, API_OPENAI, 0,                                 \
      "OpenAI embeddings (infinity's and TEI's path)")                                             \
    X("GET", "/v1/models", api_openai_models, API_OPENAI, 0, "OpenAI model list")                  \
    X("POST", "/embed_chunks", api_embed_chunks, API_OPENAI, 0,                                    \
      "late chunking: one forward over a text, a vector per chunk span")                           \
    X("POST", "/v1/rerank", api_v1_rerank, API_OPENAI, 0,                                          \
      "Cohere/Jina rerank: a query against documents, on a cross-encoder")                         \
    X("POST", "/v2/rerank", api_v1_rerank, API_OPENAI, 0,                                          \
      "Cohere rerank (its v2 client's path), as /v1/rerank")                                       \
    X("GET", "/metrics", api_metrics, API_KSERVE, HTTP_ROUTE_QUIET, "Prometheus metrics")          \
    /* text-embeddings-inference's routes (tei.c) */                                               \
    X("POST", "/embed", api_tei_embed, API_TEI, 0, "TEI embed")                                    \
    X("POST", "/", api_tei_root, API_TEI, 0,                                                       \
      "TEI embed (similarity when inputs is {source_sentence, sentences})")                        \
    X("POST", "/similarity", api_tei_similarity, API_TEI, 0, "TEI sentence similarity (cosines)")  \
    X("POST", "/embed_all", api_tei_embed_all, API_TEI, 0,                                         \
      "TEI token embeddings (a vector per token; a ColBERT head's where the model has one)")      \
    X("POST", "/tokenize", api_tei_tokenize, API_TEI, 0, "TEI tokenize")                           \
    X("POST", "/decode", api_tei_decode, API_TEI, 0, "TEI decode: token ids back into text")       \
    X("POST", "/rerank", api_tei_rerank, API_TEI, 0,                                               \
      "TEI rerank: a query against texts, on a cross-encoder")                                     \
    X("POST", "/predict", api_tei_predict, API_TEI, 0,                                             \
      "TEI predict: a classifier's labels for texts or text pairs")                                \
    X("POST", "/embed_sparse", api_tei_embed_sparse, API_TEI, 0,                                   \
      "TEI sparse embeddings: a model's lexical weights (bge-m3's sparse head)")                   \
    X("POST", "/embed_multivector", api_tei_embed_multivector, API_TEI, 0,                         \
      "ColBERT multi-vectors: a vector per token (bge-m3's ColBERT head)")                         \
    X("GET", "/info", api_tei_info, API_TEI, 0, "TEI model info")                                  \
    X("GET", "/health", api_tei_health, API_TEI, API_PROBE, "TEI health")                          \
    X("GET", "/", api_index, API_TEI, HTTP_ROUTE_QUIET | HTTP_ROUTE_PROBE,                         \
      "this index (TEI's health: 503 when not ready)")

#endif
