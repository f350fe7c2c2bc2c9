/* serve.c: mantissa serve: the options, then server/main.c's wiring;
 * --help also lists the runtime options (environment: cmd/options.c). */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "server/base/log.h"
#include "server/main.h"

int cmd_serve(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa serve [--config FILE] [--listen ADDR:PORT] [--grpc-listen ADDR:PORT|off]\n"
        "                      [--log-format json|text]\n"
        "Serves the models of the config (default config/mantissa.json) over HTTP:\n"
        "  OpenAI      POST /v1/embeddings (also /embeddings), GET /v1/models\n"
        "  KServe v2   /v2/health/*, /v2, /v2/models/{m}[/infer|/ready|/config|/stats]\n"
        "  TEI         POST /embed (also POST /), /embed_all, /similarity, /tokenize, /decode,\n"
        "              /rerank and /embed_sparse (424: no such model), GET /info, /health\n"
        "              (text-embeddings-inference)\n"
        "  admin, A/B  /v2/repository/*, /v2/admin/config, /v2/admin/reload,\n"
        "              POST /v2/models/{m}/compare, GET /ab; GET /metrics (Prometheus)\n"
        "and, with server.grpc_listen or --grpc-listen, KServe v2 over gRPC\n"
        "(inference.GRPCInferenceService: tritonclient.grpc, perf_analyzer -i grpc).\n"
        "GET / lists every route (see README.md). --listen overrides server.listen,\n"
        "--grpc-listen server.grpc_listen (\"off\": no gRPC), --log-format\n"
        "server.log_format (the log on stderr: JSON lines or text).\n"
        "SIGTERM/SIGINT drain and stop; SIGHUP reloads the config.\n";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s\n", usage);
            cmd_options_print(stdout, 0);
            return 0;
        }
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    /* before the models are built: a mistyped address is said at once */
    char host[256];
    int port;
    if (o.listen && cfg_parse_listen(o.listen, host, sizeof host, &port) != 0) {
        fprintf(stderr,
                "mantissa serve: --listen: \"%s\" is not ADDR:PORT (an IPv4 or IPv6 address, "
                "not a host name, and a port 0-65535: 127.0.0.1:9000, [::1]:9000, :9000)\n",
                o.listen);
        return 2;
    }
    if (o.grpc_listen && strcmp(o.grpc_listen, "off") &&
        cfg_parse_listen(o.grpc_listen, host, sizeof host, &port) != 0) {
        fprintf(stderr,
                "mantissa serve: --grpc-listen: \"%s\" is not ADDR:PORT (as --listen) or off\n",
                o.grpc_listen);
        return 2;
    }
    if (o.log_format && log_format_parse(o.log_format) < 0) {
        fprintf(stderr, "mantissa serve: --log-format: \"%s\" is not json or text\n",
                o.log_format);
        return 2;
    }
    return mt_serve(o.config, &(mt_serve_opts){.listen = o.listen, .grpc_listen = o.grpc_listen,
                                               .log_format = o.log_format});
}
