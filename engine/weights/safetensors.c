/* safetensors.c: reads (mmap + validation) and writes safetensors files.
 *
 * The reader accepts exactly what the reference reader (the `safetensors`
 * crate) accepts, within our own limits: an 8-byte little-endian header
 * length N <= ST_MAX_HEADER with 8 + N <= file size; a header that is a JSON
 * object of tensors plus an optional "__metadata__" object of strings; and
 * tensor byte ranges that are contiguous and tile the data area exactly, each
 * the size its shape and dtype say. Every check is done before any tensor is
 * handed out, with overflow-checked arithmetic, and every failure is an error
 * message naming the file and, where one is at fault, the tensor.
 *
 * The header is checked against the strict JSON grammar here before cJSON
 * builds its tree: cJSON is lenient (numbers such as "01", control bytes as
 * whitespace, no UTF-8 check) and its length-bounded parser can read a byte
 * past the end of an unterminated input, so it only ever sees a NUL-terminated
 * copy of text already known to be valid JSON.
 *
 * The writer builds the header with cJSON (so strings are escaped properly),
 * pads it with spaces so the data starts 8-byte aligned, and writes through a
 * temporary file that is fsynced and renamed into place.
 *
 * st_parse (and through it st_open) hands an image that starts as a zip
 * file does to the PyTorch checkpoint reader (torch_pt.c) and indexes its
 * tensors here as it does a safetensors file's; torch.save's legacy format
 * is refused with a message.
 */
#include "engine/weights/safetensors.h"
#include "engine/weights/st_internal.h"
#include "engine/weights/pt_internal.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ======================================================================
 * header validation
 * ====================================================================== */

/* A JSON number that is an exact non-negative integer we can hold. The
 * syntax check let through only digit strings, so below 2^53 the double is
 * exactly the text; from 2^53 up it may be rounded, so those are refused
 * (the sign and fraction tests are a second line of defence). */
static bool st_json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0.0) || __builtin_signbit(d) || d >= ST_EXACT_LIMIT)
        return false;
    uint64_t u = (uint64_t)d;
    if ((double)u != d)
        return false;
    *out = u;
    return true;
}

/* Describes a JSON value in a message: numbers by value, others by type. */
static const char *st_json_what(const cJSON *v, char *buf, size_t cap)
{
    if (cJSON_IsNumber(v))
        snprintf(buf, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, cap, "a string");
    else if (cJSON_IsArray(v))
        snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(v))
        snprintf(buf, cap, "an object");
    else if (cJSON_IsBool(v))
        snprintf(buf, cap, "a boolean");
    else
        snprintf(buf, cap, "null");
    return buf;
}

static int st_cmp_kv(const void *a, const void *b)
{
    return strcmp(((const st_kv *)a)->key, ((const st_kv *)b)->key);
}

/* Checks "__metadata__" is an object of strings and counts its text. */
static mt_status st_check_meta(const char *label, const cJSON *m, size_t *count, size_t *bytes,
                               mt_err *err)
{
    char what[64];
    if (!cJSON_IsObject(m))
        return mt_fail(err, MT_EFORMAT, "%s: __metadata__ is %s, not an object of strings",
                       label, st_json_what(m, what, sizeof what));
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        if (!kv->string)
            return mt_fail(err, MT_EINTERNAL, "%s: __metadata__ entry without a key", label);
        if (!cJSON_IsString(kv) || !kv->valuestring)
            return mt_fail(err, MT_EFORMAT, "%s: __metadata__ '%s' is %s, not a string",
                           label, ST_SHOW(kv->string), st_json_what(kv, what, sizeof what));
        *count += 1;
        *bytes += strlen(kv->string) + 1 + strlen(kv->valuestring) + 1;
    }
    return MT_OK;
}

/* Validates one tensor entry {dtype, shape, data_offsets} against the data
 * area size and fills e (name is filled by the caller). */
/* The three fields of a tensor entry (object; no other, none twice). */
static mt_status st_tensor_fields(const char *label, const char *name, const cJSON *obj,
                                  const cJSON **dtype, const cJSON **shape, const cJSON **offs,
                                  mt_err *err)
{
    char what[64];
    if (!cJSON_IsObject(obj))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': entry is %s, not an object",
                       label, name, st_json_what(obj, what, sizeof what));
    *dtype = *shape = *offs = NULL;
    for (const cJSON *f = obj->child; f; f = f->next) {
        const cJSON **slot = NULL;
        if (f->string && strcmp(f->string, "dtype") == 0)
            slot = dtype;
        else if (f->string && strcmp(f->string, "shape") == 0)
            slot = shape;
        else if (f->string && strcmp(f->string, "data_offsets") == 0)
            slot = offs;
        else
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': unexpected field '%s' (only dtype, shape, data_offsets)",
                           label, name, ST_SHOW(f->string ? f->string : ""));
        if (*slot)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': duplicate field '%s'",
                           label, name, ST_SHOW(f->string));
        *slot = f;
    }
    if (!*dtype || !*shape || !*offs)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': missing '%s'", label, name,
                       !*dtype ? "dtype" : !*shape ? "shape" : "data_offsets");
    return MT_OK;
}

/* The dtype string and the shape array into e->t. */
static mt_status st_tensor_type(const char *label, const char *name, const cJSON *dtype,
                                const cJSON *shape, st_entry *e, mt_err *err)
{
    char what[64];
    if (!cJSON_IsString(dtype) || !dtype->valuestring)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': dtype is %s, not a string",
                       label, name, st_json_what(dtype, what, sizeof what));
    if (st_dtype_parse(dtype->valuestring, &e->t.dtype))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': unknown dtype '%s'",
                       label, name, ST_SHOW(dtype->valuestring));
    if (!cJSON_IsArray(shape))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': shape is %s, not an array",
                       label, name, st_json_what(shape, what, sizeof what));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return mt_fail(err, MT_ELIMIT, "%s: tensor '%s': shape has %d dims, more than the %d supported",
                       label, name, ndim, ST_MAX_DIMS);
    e->t.ndim = ndim;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        uint64_t v;
        if (!st_json_uint(d, &v))
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': shape[%d] is %s, not a non-negative integer below 2^53",
                           label, name, k, st_json_what(d, what, sizeof what));
        e->t.shape[k] = (int64_t)v;
    }
    return MT_OK;
}

/* data_offsets [begin, end] into e, within the data area. */
static mt_status st_tensor_range(const char *label, const char *name, const cJSON *offs,
                                 uint64_t data_size, st_entry *e, mt_err *err)
{
    char what[64];
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': data_offsets is not an array [begin, end]",
                       label, name);
    const cJSON *b = offs->child, *en = b->next;
    if (!st_json_uint(b, &e->begin))
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets begin is %s, not a non-negative integer below 2^53",
                       label, name, st_json_what(b, what, sizeof what));
    if (!st_json_uint(en, &e->end))
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets end is %s, not a non-negative integer below 2^53",
                       label, name, st_json_what(en, what, sizeof what));
    if (e->begin > e->end)
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64 "] are reversed (begin > end)",
                       label, name, e->begin, e->end);
    if (e->end > data_size)
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64
                       "] end past the data area (%" PRIu64 " bytes)",
                       label, name, e->begin, e->end, data_size);
    return MT_OK;
}

static mt_status st_check_tensor(const char *label, const char *name, const cJSON *obj,
                                 uint64_t data_size, st_entry *e, mt_err *err)
{
    char shp[ST_MAX_DIMS * 22 + 4], shown[ST_SHOW_CAP];
    name = st_show(name, shown);
    const cJSON *dtype, *shape, *offs;
    mt_status st;
    if ((st = st_tensor_fields(label, name, obj, &dtype, &shape, &offs, err)) ||
        (st = st_tensor_type(label, name, dtype, shape, e, err)) ||
        (st = st_tensor_range(label, name, offs, data_size, e, err)))
        return st;
    uint64_t numel, bytes;
    int rc = st_shape_bytes(e->t.dtype, e->t.ndim, e->t.shape, &numel, &bytes);
    st_shape_str(shp, sizeof shp, e->t.ndim, e->t.shape);
    if (rc == 1)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': shape %s has more elements than fit in 64 bits",
                       label, name, shp);
    if (rc != 0)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': shape %s x %s is more bytes than fit in 64 bits",
                       label, name, shp, st_dtype_name(e->t.dtype));
    if (bytes != e->end - e->begin)
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensor '%s': shape %s x %s is %" PRIu64 " bytes but data_offsets span %" PRIu64,
                       label, name, shp, st_dtype_name(e->t.dtype), bytes, e->end - e->begin);
    e->t.nbytes = (size_t)bytes;
    return MT_OK;
}

/* Data order: by begin, then end (zero-size tensors sit before a tensor
 * that starts where they do), then name so the order is deterministic. */
static int st_cmp_offsets(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

int st_cmp_names(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Copies s into the string arena at *at. */
static const char *st_intern(char *arena, size_t *at, const char *s)
{
    size_t len = strlen(s) + 1;
    char *dst = arena + *at;
    memcpy(dst, s, len);
    *at += len;
    return dst;
}

/* Validates the tensors and metadata of a parsed header and builds f's
 * tables. data/data_size describe the data area after the header. */
/* Pass 1: counts tensors and metadata (checked), sizes the string arena,
 * allocates f's tables. *meta gets the __metadata__ entry, if any. */
static mt_status st_count_entries(st_file *f, const cJSON *root, const cJSON **meta, mt_err *err)
{
    const char *label = f->label;
    size_t ntensors = 0, nmeta = 0, bytes = 0;
    *meta = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!c->string)
            return mt_fail(err, MT_EINTERNAL, "%s: header entry without a key", label);
        if (strcmp(c->string, ST_METADATA_KEY) == 0) {
            if (*meta)
                return mt_fail(err, MT_EFORMAT, "%s: duplicate __metadata__", label);
            *meta = c;
            if (cJSON_IsNull(c)) /* the reference reads null as "no metadata" */
                continue;
            mt_status st = st_check_meta(label, c, &nmeta, &bytes, err);
            if (st != MT_OK)
                return st;
            continue;
        }
        if (c->string[0] == '\0')
            return mt_fail(err, MT_EFORMAT, "%s: tensor with an empty name", label);
        ntensors++;
        bytes += strlen(c->string) + 1;
    }
    f->entries = calloc(ntensors ? ntensors : 1, sizeof *f->entries);
    f->by_name = calloc(ntensors ? ntensors : 1, sizeof *f->by_name);
    f->meta = calloc(nmeta ? nmeta : 1, sizeof *f->meta);
    f->strings = malloc(bytes ? bytes : 1);
    if (!f->entries || !f->by_name || !f->meta || !f->strings)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for %zu tensors", label, ntensors);
    return MT_OK;
}

/* Pass 2: each tensor on its own, then the metadata (keys unique). */
static mt_status st_read_entries(st_file *f, const cJSON *root, const cJSON *meta,
                                 const unsigned char *data, uint64_t data_size, mt_err *err)
{
    size_t at = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (c == meta)
            continue;
        st_entry *e = &f->entries[f->n];
        mt_status st = st_check_tensor(f->label, c->string, c, data_size, e, err);
        if (st != MT_OK)
            return st;
        e->t.name = st_intern(f->strings, &at, c->string);
        e->t.data = data + e->begin;
        f->n++;
    }
    if (!meta || cJSON_IsNull(meta))
        return MT_OK;
    for (const cJSON *kv = meta->child; kv; kv = kv->next, f->nmeta++) {
        f->meta[f->nmeta].key = st_intern(f->strings, &at, kv->string);
        f->meta[f->nmeta].value = st_intern(f->strings, &at, kv->valuestring);
    }
    qsort(f->meta, f->nmeta, sizeof *f->meta, st_cmp_kv);
    for (size_t i = 1; i < f->nmeta; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
            return mt_fail(err, MT_EFORMAT, "%s: __metadata__ has duplicate key '%s'", f->label,
                           ST_SHOW(f->meta[i].key));
    return MT_OK;
}

/* The ranges (sorted by offset) tile the data area: no overlap, no gap,
 * nothing left over. */
static mt_status st_check_tiling(const st_file *f, uint64_t data_size, mt_err *err)
{
    const char *label = f->label;
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_entry *e = &f->entries[i];
        if (e->begin < pos)
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ",%" PRIu64
                           "] overlap tensor '%s' [%" PRIu64 ",%" PRIu64 "]",
                           label, ST_SHOW(e->t.name), e->begin, e->end, ST_SHOW(f->entries[i - 1].t.name),
                           f->entries[i - 1].begin, f->entries[i - 1].end);
        if (e->begin > pos) {
            if (i == 0)
                return mt_fail(err, MT_EFORMAT,
                               "%s: tensor '%s': data_offsets begin at %" PRIu64
                               ", leaving a gap at the start of the data area",
                               label, ST_SHOW(e->t.name), e->begin);
            return mt_fail(err, MT_EFORMAT,
                           "%s: tensor '%s': data_offsets begin at %" PRIu64
                           ", leaving a gap of %" PRIu64 " bytes after tensor '%s' (ends at %" PRIu64 ")",
                           label, ST_SHOW(e->t.name), e->begin, e->begin - pos,
                           ST_SHOW(f->entries[i - 1].t.name), pos);
        }
        pos = e->end;
    }
    if (pos != data_size) {
        if (f->n == 0)
            return mt_fail(err, MT_EFORMAT,
                           "%s: header lists no tensors but the data area is %" PRIu64 " bytes",
                           label, data_size);
        return mt_fail(err, MT_EFORMAT,
                       "%s: tensors end at %" PRIu64 " (last is '%s') but the data area is %" PRIu64
                       " bytes: %" PRIu64 " bytes not covered",
                       label, pos, ST_SHOW(f->entries[f->n - 1].t.name), data_size, data_size - pos);
    }
    return MT_OK;
}

/* What every reader does last: f's entries (n of them) sorted by offset,
 * by_name built (allocated here when the reader did not) and sorted, and a
 * name twice refused (cJSON keeps duplicate keys; a pickle may set one). */
static mt_status st_index(st_file *f, mt_err *err)
{
    if (!f->by_name && !(f->by_name = calloc(f->n ? f->n : 1, sizeof *f->by_name)))
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for %zu tensors", f->label, f->n);
    qsort(f->entries, f->n, sizeof *f->entries, st_cmp_offsets);
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = &f->entries[i].t;
    qsort(f->by_name, f->n, sizeof *f->by_name, st_cmp_names);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': duplicate tensor name", f->label,
                           ST_SHOW(f->by_name[i]->name));
    return MT_OK;
}

/* Validates the whole header and fills f's tables (entries sorted by
 * offset, names and metadata sorted for lookup); data/data_size describe
 * the data area after the header. */
static mt_status st_build(st_file *f, const cJSON *root, const unsigned char *data,
                          uint64_t data_size, mt_err *err)
{
    const cJSON *meta;
    mt_status st;
    if ((st = st_count_entries(f, root, &meta, err)) ||
        (st = st_read_entries(f, root, meta, data, data_size, err)) ||
        (st = st_index(f, err)))
        return st;
    return st_check_tiling(f, data_size, err);
}

/* ======================================================================
 * opening, lookup, closing
 * ====================================================================== */

static uint64_t st_load_u64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A safetensors image: the header length, then st_build. */
static mt_status st_parse_safetensors(st_file *f, const unsigned char *p, size_t len,
                                      mt_err *err)
{
    const char *label = f->label;
    if (len < 8)
        return mt_fail(err, MT_EFORMAT,
                       "%s: file is %zu bytes, too short for the 8-byte header length", label, len);
    uint64_t n = st_load_u64le(p);
    if (n > ST_MAX_HEADER)
        return mt_fail(err, MT_ELIMIT, "%s: header length %" PRIu64 " is over the %u-byte limit",
                       label, n, ST_MAX_HEADER);
    if (n > len - 8)
        return mt_fail(err, MT_EFORMAT,
                       "%s: header length %" PRIu64 " runs past the end of the file (%zu bytes)",
                       label, n, len);
    cJSON *root = NULL;
    mt_status st = st_parse_header(label, p + 8, (size_t)n, &root, err);
    if (st == MT_OK)
        st = st_build(f, root, p + 8 + n, (uint64_t)(len - 8 - n), err);
    cJSON_Delete(root);
    return st;
}

/* The whole validation, shared by st_parse (memory) and st_open (mapping):
 * a PyTorch checkpoint by its zip magic (torch_pt.c), else safetensors. */
mt_status st_parse(const void *buf, size_t len, const char *label, st_file **out, mt_err *err)
{
    if (!out)
        return mt_fail(err, MT_EINVAL, "st_parse: out is NULL");
    *out = NULL;
    if (!label)
        label = "<memory>";
    if (!buf && len)
        return mt_fail(err, MT_EINVAL, "%s: buffer is NULL", label);
    const unsigned char *p = buf;
    const pt_kind kind = pt_sniff(p, len);
    if (kind == PT_LEGACY)
        return mt_fail(err, MT_EFORMAT,
                       "%s: a PyTorch checkpoint in the legacy format (torch.save before 1.6, or "
                       "_use_new_zipfile_serialization=False), which is not read: re-save it "
                       "with torch >= 1.6, or convert it to safetensors", label);

    st_file *f = calloc(1, sizeof *f);
    if (!f)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", label);
    f->label = strdup(label);
    if (!f->label) {
        free(f);
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", label);
    }
    mt_status st = kind == PT_ZIP ? pt_read(f, p, len, err) : st_parse_safetensors(f, p, len, err);
    if (st == MT_OK && kind == PT_ZIP)
        st = st_index(f, err);
    if (st != MT_OK) {
        st_close(f);
        return st;
    }
    *out = f;
    return MT_OK;
}

/* Maps path read-only (tensor data stays in the page cache, shared with
 * other processes reading the same weights) and validates it. */
mt_status st_open(const char *path, st_file **out, mt_err *err)
{
    if (!out)
        return mt_fail(err, MT_EINVAL, "st_open: out is NULL");
    *out = NULL;
    if (!path)
        return mt_fail(err, MT_EINVAL, "st_open: path is NULL");
    const size_t pl = strlen(path), il = strlen(".index.json");
    if (pl > il && !strcmp(path + pl - il, ".index.json"))
        return st_open_index(path, out, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mt_fail(err, errno == ENOENT ? MT_ENOTFOUND : MT_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mt_fail(err, MT_EIO, "%s: not a regular file", path);
    }
    if ((uintmax_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return mt_fail(err, MT_ELIMIT, "%s: too large to map", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = NULL;
    if (len > 0) { /* mmap refuses length 0; st_parse reports the short file */
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return mt_fail(err, MT_EIO, "%s: mmap: %s", path, strerror(e));
        }
    }
    close(fd);
    static const unsigned char empty[1];
    mt_status st = st_parse(map ? map : empty, len, path, out, err);
    if (st != MT_OK) {
        if (map)
            munmap(map, len);
        return st;
    }
    (*out)->map = map;
    (*out)->map_len = len;
    return MT_OK;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    for (size_t i = 0; i < f->nshards; i++)
        st_close(f->shards[i]);
    free(f->shards);
    free(f->entries);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    free(f->owned);
    free(f->label);
    free(f);
}

void st_drop_pages(st_file *f)
{
    if (f && f->map)
        (void)madvise(f->map, f->map_len, MADV_DONTNEED); /* advice: nothing to do if refused */
    for (size_t i = 0; f && i < f->nshards; i++)
        st_drop_pages(f->shards[i]);
}

size_t st_count(const st_file *f)
{
    return f ? f->n : 0;
}

const st_tensor *st_get(const st_file *f, size_t i)
{
    return f && i < f->n ? &f->entries[i].t : NULL;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    if (!f || !name || f->n == 0)
        return NULL;
    st_tensor key = {.name = name};
    const st_tensor *kp = &key;
    const st_tensor **hit = bsearch(&kp, f->by_name, f->n, sizeof *f->by_name, st_cmp_names);
    return hit ? *hit : NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    if (!f || !key || f->nmeta == 0)
        return NULL;
    st_kv k = {.key = key, .value = NULL};
    const st_kv *hit = bsearch(&k, f->meta, f->nmeta, sizeof *f->meta, st_cmp_kv);
    return hit ? hit->value : NULL;
}

const char *st_path(const st_file *f)
{
    return f ? f->label : NULL;
}

