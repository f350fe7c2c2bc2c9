/* main.h: the serve subcommand's wiring (server/main.c), for the command
 * line (cmd/). */
#ifndef MT_SERVER_MAIN_H
#define MT_SERVER_MAIN_H

#include "server/core/config.h"
#include "server/core/models.h"

/* Loads the config at path and every model it names, logging what was
 * loaded (and its resident size) on stderr (server/base/log.h: text lines
 * unless serve set JSON); on failure logs why and returns NULL. */
srv_models *mt_load_config_models(const char *path, cfg_config **cfg);
/* The same for a config already read (cmd/ narrows it to one model first). */
srv_models *mt_load_models(const cfg_config *cfg);

/* What the command line overrides in serve (NULL: the file's): server.listen,
 * server.grpc_listen ("off": none) and server.log_format ("json", "text"). */
typedef struct {
    const char *listen, *grpc_listen, *log_format;
} mt_serve_opts;

/* mantissa serve: serves the models of the config at path until SIGTERM or
 * SIGINT has drained. Everything it writes on stderr is in the log's
 * format (server/base/log.h) but what precedes the config (an unreadable
 * or invalid file without --log-format: text). Returns the process exit
 * code. */
int mt_serve(const char *path, const mt_serve_opts *o);

#endif
