/* pbjson.h: protobuf messages to and from the JSON of the KServe v2 REST
 * protocol, by the messages' descriptors (protobuf-c), so that the gRPC
 * methods (grpc_kserve.c) reuse the REST handlers' JSON on both sides.
 *
 * The mapping is the one KServe's REST protocol makes of its gRPC one:
 *   - a field is the JSON key of its name; keys the message lacks are
 *     skipped, as a proto3 reader skips unknown fields;
 *   - a map<string, M> is a JSON object;
 *   - a message whose fields are all one oneof of scalars (InferParameter,
 *     ModelRepositoryParameter) is a plain JSON value: true/false the bool
 *     case, a string the string case, an integer the int64 case (uint64
 *     above its range), another number the double case;
 *   - an enum is its name ("TYPE_FP32") or its number;
 *   - 64-bit integers are JSON numbers or decimal strings;
 *   - bytes are base64 strings (as Triton's REST "file:" parameters).
 */
#ifndef MT_SERVER_API_PBJSON_H
#define MT_SERVER_API_PBJSON_H

#include <cJSON.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/base/sbuf.h"

/* Appends the wire bytes of a message of type d with j's fields (j an
 * object). False when out ran out of memory. */
bool pbjson_encode(const ProtobufCMessageDescriptor *d, const cJSON *j, sbuf *out);

/* Checks the string fields of a message of type d in its wire bytes
 * (nested messages included): each must be UTF-8 (as proto3 requires) and
 * hold no NUL (which a C string would cut it at). False with why (naming
 * the field) when one is not; a message that does not parse is left to
 * the decoder. */
bool pbjson_check_strings(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n,
                          char *why, size_t cap);

/* A decoded message as a new JSON object (NULL: out of memory); proto3
 * fields at their default (0, "", false, empty) are left out. */
cJSON *pbjson_decode(const ProtobufCMessage *m);

/* One field of a decoded message (a map as an object, a repeated field as
 * an array), or NULL when it is unset or m has no such field. */
cJSON *pbjson_decode_field(const ProtobufCMessage *m, const char *name);

/* Appends field id as length-delimited bytes (a bytes or string field, or
 * one element of a repeated one). */
void pbjson_put_bytes(sbuf *out, uint32_t id, const void *p, size_t n);

#endif
