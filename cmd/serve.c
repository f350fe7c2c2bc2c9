/* serve.c: mantissa serve: the options, then server/main.c's wiring;
 * --help also lists the runtime options (environment: cmd/options.c). */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "server/main.h"

int cmd_serve(int argc, char **argv)
{
    static const char usage[] =
        "usage: mantissa serve [--config FILE] [--listen ADDR:PORT]\n"
        "Serves the models of the config (default config/mantissa.json) over HTTP: the\n"
        "OpenAI embeddings API, KServe v2 and the admin endpoints (see README.md).\n"
        "--listen overrides server.listen. SIGTERM/SIGINT drain and stop; SIGHUP\n"
        "reloads the config.\n";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s\n", usage);
            cmd_options_print(stdout, 0);
            return 0;
        }
    cmd_opts o;
    if (cmd_parse(argc, argv, &o, usage) != 0)
        return 2;
    return mt_serve(o.config, o.listen);
}
