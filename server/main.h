/* main.h: the serve subcommand's wiring (server/main.c), for the command
 * line (cmd/). */
#ifndef MT_SERVER_MAIN_H
#define MT_SERVER_MAIN_H

#include "server/core/config.h"
#include "server/core/models.h"

/* Loads the config at path and every model it names, printing what was
 * loaded (and its resident size) on stderr; on failure prints why and
 * returns NULL. */
srv_models *mt_load_config_models(const char *path, cfg_config **cfg);
/* The same for a config already read (cmd/ narrows it to one model first). */
srv_models *mt_load_models(const cfg_config *cfg);

/* mantissa serve: serves the models of the config at path until SIGTERM or
 * SIGINT has drained (listen, when not NULL, overrides server.listen).
 * Returns the process exit code. */
int mt_serve(const char *path, const char *listen);

#endif
