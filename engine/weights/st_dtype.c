/* st_dtype.c: the dtypes of engine/weights (names, element sizes) and the
 * shape arithmetic every reader and the writer share: element and byte
 * counts with overflow checks, a shape shown in messages. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/weights/safetensors.h"
#include "engine/weights/st_internal.h"

/* One table gives each dtype's name and element size, indexed by st_dtype. */
static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},
    [ST_I8] = {"I8", 1},           [ST_U16] = {"U16", 2},
    [ST_I16] = {"I16", 2},         [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_U32] = {"U32", 4},
    [ST_I32] = {"I32", 4},         [ST_F32] = {"F32", 4},
    [ST_U64] = {"U64", 8},         [ST_I64] = {"I64", 8},
    [ST_F64] = {"F64", 8},         [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1},
};

/* Names a dtype for headers and messages ("?" for an out-of-range value). */
const char *st_dtype_name(st_dtype d)
{
    return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].name : "?";
}

/* Bytes per element, 0 for an out-of-range value. */
size_t st_dtype_size(st_dtype d)
{
    return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].size : 0;
}

/* Maps a header's dtype string to st_dtype; names are case-sensitive, as
 * in the reference reader. */
int st_dtype_parse(const char *s, st_dtype *out)
{
    if (!s)
        return -1;
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
        if (strcmp(s, st_dtypes[d].name) == 0) {
            if (out)
                *out = (st_dtype)d;
            return 0;
        }
    }
    return -1;
}

/* Element and byte counts of a shape with overflow checks, shared by the
 * reader and the writer. Returns 0, or -1 when a dim is negative, 1 when
 * the element count overflows and 2 when the byte count does. */
int st_shape_bytes(st_dtype d, int ndim, const int64_t *shape,
                          uint64_t *numel, uint64_t *bytes)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            return 1;
    }
    *numel = n;
    if (__builtin_mul_overflow(n, (uint64_t)st_dtype_size(d), bytes))
        return 2;
    return 0;
}

/* Element count for callers sizing buffers; -1 for a shape that is invalid
 * or whose count does not fit in int64_t. */
int64_t st_numel(const st_tensor *t)
{
    if (!t || t->ndim < 0 || t->ndim > ST_MAX_DIMS)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n))
            return -1;
    }
    return n;
}

/* Writes "[a,b,c]" into buf for messages. */
const char *st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, i ? "," : "", shape[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
    return buf;
}
