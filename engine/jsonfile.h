/* jsonfile.h: read a small file whole, and parse a JSON file with cJSON,
 * with errors that name the file (and the line, column and reason of a
 * syntax error). */
#ifndef MT_JSONFILE_H
#define MT_JSONFILE_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/status.h"

/* Reads path into a NUL-terminated malloc'd buffer; files over max_bytes are refused. */
mt_status mt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, mt_err *err);
/* Nesting deeper than this in a JSON file is refused. */
#define MT_JSON_FILE_DEPTH 512

/* Parses len bytes of text as one JSON value; caller cJSON_Delete()s *out.
 * A syntax error reads "label: line L, column C: invalid JSON: why" (C in
 * characters). strict: also refuses what cJSON would accept and JSON does
 * not (engine/json_check.h: bytes after the value, leading zeros, invalid
 * UTF-8, raw control characters); else only the reason is the check's. */
mt_status mt_json_parse(const char *text, size_t len, const char *label, bool strict,
                        cJSON **out, mt_err *err);
/* Parses path as JSON (not strict); caller cJSON_Delete()s *out. */
mt_status mt_json_load(const char *path, cJSON **out, mt_err *err);

#endif
