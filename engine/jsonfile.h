/* jsonfile.h: read a small file whole, and parse a JSON file with cJSON,
 * with errors that name the file (and the line of a syntax error). */
#ifndef MT_JSONFILE_H
#define MT_JSONFILE_H

#include <cJSON.h>
#include <stddef.h>

#include "engine/status.h"

/* Reads path into a NUL-terminated malloc'd buffer; files over max_bytes are refused. */
mt_status mt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, mt_err *err);
/* Parses path as JSON; caller cJSON_Delete()s *out. */
mt_status mt_json_load(const char *path, cJSON **out, mt_err *err);

#endif
