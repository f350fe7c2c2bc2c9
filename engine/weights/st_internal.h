/* st_internal.h: what the safetensors reader (safetensors.c), its strict
 * header syntax check (st_json.c), the writer (st_write.c), the sharded
 * checkpoint (st_shards.c) and the PyTorch checkpoint reader (torch_pt.c,
 * pt_internal.h) share. */
#ifndef MT_ENGINE_ST_INTERNAL_H
#define MT_ENGINE_ST_INTERNAL_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/weights/safetensors.h"

/* Integers from 2^53 up do not survive cJSON's doubles exactly; no real file
 * has offsets that large, so both reader and writer refuse them. */
#define ST_EXACT_LIMIT 9007199254740992.0 /* 2^53 */
#define ST_EXACT_LIMIT_U64 ((uint64_t)1 << 53)
/* A valid header nests 3 deep (object, tensor, shape); allow some slack. */
#define ST_JSON_MAX_DEPTH 32
/* Longer numbers are not usize values, and cJSON would mis-read them. */
#define ST_JSON_MAX_NUMBER 32
#define ST_METADATA_KEY "__metadata__"

typedef struct {
    const char *key;
    const char *value;
} st_kv;

/* A tensor plus its byte range in the data area, while validating (a
 * PyTorch checkpoint's: its bytes' range in the file). */
typedef struct {
    st_tensor t;
    uint64_t begin, end;
} st_entry;

struct st_file {
    char *label;              /* path or caller's label, for messages */
    void *map;                /* st_open's mapping, or NULL */
    size_t map_len;
    st_entry *entries;        /* ordered by data offset */
    size_t n;
    const st_tensor **by_name; /* sorted by name, for st_find */
    st_kv *meta;              /* sorted by key, for st_meta */
    size_t nmeta;
    char *strings;            /* names, metadata keys and values */
    st_file **shards;         /* a sharded checkpoint's files (st_shards.c), owned; or NULL */
    size_t nshards;
    void *owned;              /* copies of a PyTorch checkpoint's unaligned tensors, or NULL */
};


/* st_shards.c: opens a model.safetensors.index.json and its shards as one
 * st_file (st_open calls it for a path ending in ".index.json"). */
mt_status st_open_index(const char *path, st_file **out, mt_err *err);
/* Orders tensors by name (st_find's bsearch; st_shards.c's table too). */
int st_cmp_names(const void *a, const void *b);

/* Whether s is valid UTF-8 (the writer refuses what the reader would). */
bool st_utf8_valid(const char *s);

/* Names in messages: they come from the file (or the caller) and may hold
 * control bytes or be very long, and messages end up in logs and in
 * responses. Copies s into buf (ST_SHOW_CAP bytes), control bytes as '?',
 * cut on a UTF-8 boundary with "..." when too long. ST_SHOW gives each use
 * its own buffer, living until the end of the enclosing block. */
#define ST_SHOW_CAP 160
#define ST_SHOW(s) st_show((s), (char[ST_SHOW_CAP]){0})
const char *st_show(const char *s, char *buf);
/* The same for n bytes that may hold NULs (shown as '?'): strings from a pickle. */
#define ST_SHOW_N(s, n) st_show_n((s), (n), (char[ST_SHOW_CAP]){0})
const char *st_show_n(const void *s, size_t n, char *buf);

/* Element and byte counts of a shape with overflow checks. Returns 0, or
 * -1 when a dim is negative, 1 when the element count overflows and 2 when
 * the byte count does. */
int st_shape_bytes(st_dtype d, int ndim, const int64_t *shape, uint64_t *numel, uint64_t *bytes);
/* Writes "[a,b,c]" into buf for messages. */
const char *st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);

/* Checks the header text against the strict JSON grammar, then parses it
 * (label names the file in errors). */
mt_status st_parse_header(const char *label, const unsigned char *text, size_t n, cJSON **out,
                          mt_err *err);

#endif
