/* tracectx.h: W3C Trace Context (https://www.w3.org/TR/trace-context/) as
 * the transport carries it: the traceparent header read strictly and
 * written, tracestate kept when it is well formed, new trace and span ids,
 * and the trace-id ratio sampler (the decision for a trace started here).
 *
 * Pure functions but the ids, which come from a per-thread generator
 * seeded from the kernel (getrandom), so that any thread may call them.
 */
#ifndef MT_SERVER_NET_TRACECTX_H
#define MT_SERVER_NET_TRACECTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TC_TRACE_ID_LEN 16
#define TC_SPAN_ID_LEN 8
#define TC_TRACEPARENT_LEN 55      /* "00-" 32 hex "-" 16 hex "-" 2 hex */
#define TC_TRACESTATE_MAX 512      /* the length every vendor must pass on */
#define TC_FLAG_SAMPLED 0x01

/* A traceparent header's trace id, parent (span) id and flags. Version 00
 * must be exactly 55 characters; a later version (01..fe) may be longer
 * when a '-' follows the first 55, which are read as version 00's fields;
 * version ff, upper-case hex, any other length or separator, and an
 * all-zero trace or parent id are invalid. False: invalid (the caller
 * starts a new trace, as the specification asks). */
bool tc_parse_traceparent(const char *h, uint8_t trace_id[TC_TRACE_ID_LEN],
                          uint8_t parent_id[TC_SPAN_ID_LEN], uint8_t *flags);
/* "00-<trace id>-<span id>-<flags>" into out (TC_TRACEPARENT_LEN + 1 bytes). */
void tc_format_traceparent(char *out, const uint8_t trace_id[TC_TRACE_ID_LEN],
                           const uint8_t span_id[TC_SPAN_ID_LEN], uint8_t flags);
/* Whether a tracestate header can be passed on as it is: 1 to
 * TC_TRACESTATE_MAX printable ASCII characters, and each comma-separated
 * member empty or key=value. */
bool tc_tracestate_ok(const char *s);

/* Lower-case hex of n bytes into out (2n + 1 bytes). */
void tc_hex(char *out, const uint8_t *p, size_t n);

/* n random bytes, not all zero (a valid trace or span id). */
void tc_new_id(uint8_t *p, size_t n);

/* The ratio sampler's decision for a new trace: its id's last 8 bytes, read
 * as a number, under ratio * 2^64 (so ratio 1 keeps every trace, 0 none,
 * and every service with the same ratio decides alike for one trace). */
bool tc_ratio_sampled(const uint8_t trace_id[TC_TRACE_ID_LEN], double ratio);

#endif
