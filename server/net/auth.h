/* auth.h: optional API keys. server.api_keys_file names a file with one
 * key per line (blank lines and lines starting with '#' are skipped);
 * requests then need "Authorization: Bearer KEY", except the health
 * endpoints, which probes call without credentials. */
#ifndef MT_SERVER_AUTH_H
#define MT_SERVER_AUTH_H

#include <stdbool.h>

#include "engine/status.h"

typedef struct auth_keys auth_keys;

mt_status auth_load(const char *path, auth_keys **out, mt_err *err);
void auth_free(auth_keys *a);

/* True when the Authorization header value carries a known key. */
bool auth_check(const auth_keys *a, const char *authorization);

#endif
