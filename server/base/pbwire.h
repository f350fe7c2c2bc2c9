/* pbwire.h: the protobuf wire format's writing rules, shared by the OTLP
 * exporter (server/net/otlp_pb.c) and the KServe gRPC mapping
 * (server/api/pbjson.c): base-128 varints, field keys, length-delimited
 * fields, and fixed 32/64-bit fields written little-endian byte by byte,
 * whatever the host's order. Appends go to an sbuf (its oom rule holds). */
#ifndef MT_SERVER_PBWIRE_H
#define MT_SERVER_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

#include "server/base/sbuf.h"

enum { PB_WT_VARINT = 0, PB_WT_I64 = 1, PB_WT_LEN = 2, PB_WT_I32 = 5 };

void pb_varint(sbuf *b, uint64_t v);
/* A field's key: its number and wire type. */
void pb_key(sbuf *b, uint32_t field, unsigned wire_type);
/* Key, length and the n bytes at p. */
void pb_len(sbuf *b, uint32_t field, const void *p, size_t n);
/* Key and 4 or 8 little-endian bytes. */
void pb_fixed32(sbuf *b, uint32_t field, uint32_t v);
void pb_fixed64(sbuf *b, uint32_t field, uint64_t v);

#endif
