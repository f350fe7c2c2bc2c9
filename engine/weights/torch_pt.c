/* torch_pt.c: a PyTorch checkpoint (torch.save's zip format, torch >= 1.6:
 * `*.pt`, `pytorch_model.bin`) read as an st_file, so that every loader that
 * takes a safetensors file takes one of these too (st_parse calls pt_read
 * for an image that starts as a zip file does; pt_internal.h).
 *
 * The archive's top folder is the first entry's; <top>/byteorder, where
 * present, must say "little"; <top>/data.pkl is run on the restricted
 * unpickler (pt_pickle.c, pt_unpickle.c), which yields the saved dict's
 * tensors; each tensor's storage is the entry <top>/data/<key>, which must
 * hold the storage's bytes, and the tensor must be contiguous (row-major;
 * any stride on a dim of size 1) and lie inside its storage. Several
 * tensors may share a storage (views, tied weights). A tensor points into
 * the image, unless its bytes are not aligned to its element size there
 * (torch aligns every entry to 64 bytes; another zip writer may not): then
 * it points to a copy the st_file owns, because the loaders read tensors
 * through typed pointers (float *) and misaligned loads are undefined
 * behaviour in C. Errors name the file and the entry or tensor at fault.
 *
 * torch.save's format before 1.6 (one pickle stream, not a zip) is
 * recognised by its magic number and refused with what to do instead.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/weights/pt_internal.h"

/* The legacy format's magic number, pickled as LONG1 (0x8a, 10 bytes). */
static const unsigned char legacy_magic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                             0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

pt_kind pt_sniff(const unsigned char *img, size_t len)
{
    if (len >= 4 && !memcmp(img, "PK\3\4", 4))
        return PT_ZIP;
    /* PROTO 2..5, maybe a FRAME, then the magic number */
    if (len >= 2 + sizeof legacy_magic && img[0] == 0x80 && img[1] >= 2 && img[1] <= 5 &&
        memmem(img + 2, len - 2 < 32 ? len - 2 : 32, legacy_magic, sizeof legacy_magic))
        return PT_LEGACY;
    return PT_NOT_TORCH;
}

/* What the checks of one tensor need besides the tensor. */
typedef struct {
    const char *label;
    const unsigned char *img;
    const pt_zip *z;
    const char *top;
    size_t top_len;
    int *claim_dtype;      /* per zip entry: the storage dtype first seen on it (or -2) */
    uint64_t *claim_numel; /* and its numel */
} pt_ctx;

/* The name of an entry under the top folder: top + mid + tail (tail_len
 * bytes); malloc'd, NULL when out of memory. */
static char *top_name(const pt_ctx *c, const char *mid, const void *tail, size_t tail_len)
{
    const size_t ml = strlen(mid);
    char *s = malloc(c->top_len + ml + tail_len + 1);
    if (s) {
        memcpy(s, c->top, c->top_len);
        memcpy(s + c->top_len, mid, ml);
        memcpy(s + c->top_len + ml, tail, tail_len);
        s[c->top_len + ml + tail_len] = '\0';
    }
    return s;
}

/* The zip entry of a storage: <top>/data/<key>. */
static mt_status storage_entry(const pt_ctx *c, const char *name, const pt_tensor *t,
                               const pt_zip_entry **e, mt_err *err)
{
    if (memchr(t->key, 0, t->key_len))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': its storage key '%s' holds a NUL byte",
                       c->label, name, ST_SHOW_N(t->key, t->key_len));
    char *path = top_name(c, "/data/", t->key, t->key_len);
    if (!path)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", c->label);
    *e = pt_zip_find(c->z, path);
    mt_status st = *e ? MT_OK
                      : mt_fail(err, MT_EFORMAT, "%s: tensor '%s': its storage '%s' has no entry "
                                "'%s' in the archive", c->label, name,
                                ST_SHOW_N(t->key, t->key_len), ST_SHOW(path));
    free(path);
    return st;
}

/* The storage's bytes: its entry must hold them, and every tensor on it must
 * agree on its dtype and size. */
static mt_status storage_bytes(const pt_ctx *c, const char *name, const pt_tensor *t,
                               const pt_zip_entry *e, uint64_t *bytes, mt_err *err)
{
    const char *key = ST_SHOW_N(t->key, t->key_len);
    const size_t i = (size_t)(e - c->z->e);
    if (c->claim_dtype[i] == -2) {
        c->claim_dtype[i] = t->storage_dtype;
        c->claim_numel[i] = t->storage_numel;
    } else if (c->claim_dtype[i] != t->storage_dtype || c->claim_numel[i] != t->storage_numel) {
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': storage '%s' is described two ways "
                       "(dtype or size differs from another tensor's)", c->label, name, key);
    }
    const uint64_t el = t->storage_dtype == PT_UNTYPED ? 1 : st_dtype_size((st_dtype)t->storage_dtype);
    if (__builtin_mul_overflow(t->storage_numel, el, bytes))
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': storage '%s' of %" PRIu64
                       " elements is more bytes than fit in 64 bits", c->label, name, key,
                       t->storage_numel);
    if (e->size < *bytes)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': storage '%s' is %" PRIu64 " bytes but "
                       "its entry '%s' holds %" PRIu64, c->label, name, key, *bytes,
                       ST_SHOW(e->name), e->size);
    return MT_OK;
}

/* Row-major contiguity (any stride on a dim of size 1). The element count
 * is known to fit in 64 bits, so no partial product wraps. */
static mt_status check_contiguous(const pt_ctx *c, const char *name, const pt_tensor *t,
                                  mt_err *err)
{
    uint64_t want = 1;
    for (int i = t->ndim; i-- > 0;) {
        if (t->shape[i] != 1 && (uint64_t)t->stride[i] != want) {
            char shp[ST_MAX_DIMS * 22 + 4], str[ST_MAX_DIMS * 22 + 4];
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': stride %s of shape %s is not "
                           "contiguous (row-major); save it .contiguous()", c->label, name,
                           st_shape_str(str, sizeof str, t->ndim, t->stride),
                           st_shape_str(shp, sizeof shp, t->ndim, t->shape));
        }
        want *= (uint64_t)t->shape[i];
    }
    return MT_OK;
}

/* One tensor into e: its storage's entry, contiguity, and its bytes inside
 * the storage; e->begin/end are its bytes' place in the image. */
static mt_status read_tensor(const pt_ctx *c, const char *name, const pt_tensor *t,
                             st_entry *e, mt_err *err)
{
    const pt_zip_entry *ze;
    uint64_t sbytes = 0, numel, nbytes, off;
    mt_status st = storage_entry(c, name, t, &ze, err);
    if (st == MT_OK)
        st = storage_bytes(c, name, t, ze, &sbytes, err);
    if (st != MT_OK)
        return st;
    e->t.dtype = t->dtype;
    e->t.ndim = t->ndim;
    memcpy(e->t.shape, t->shape, sizeof e->t.shape);
    char shp[ST_MAX_DIMS * 22 + 4];
    if (st_shape_bytes(t->dtype, t->ndim, t->shape, &numel, &nbytes) != 0 || nbytes > SIZE_MAX)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': shape %s x %s is more bytes than fit",
                       c->label, name, st_shape_str(shp, sizeof shp, t->ndim, t->shape),
                       st_dtype_name(t->dtype));
    e->begin = e->end = ze->data;
    if (numel == 0) /* no bytes: where it is does not matter */
        return MT_OK;
    if ((st = check_contiguous(c, name, t, err)) != MT_OK)
        return st;
    if (__builtin_mul_overflow(t->offset, (uint64_t)st_dtype_size(t->dtype), &off) ||
        off > sbytes || nbytes > sbytes - off)
        return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': %" PRIu64 " elements of %s from "
                       "offset %" PRIu64 " run past its storage '%s' (%" PRIu64 " bytes)",
                       c->label, name, numel, st_dtype_name(t->dtype), t->offset,
                       ST_SHOW_N(t->key, t->key_len), sbytes);
    e->begin = ze->data + off;
    e->end = e->begin + nbytes;
    e->t.nbytes = (size_t)nbytes;
    return MT_OK;
}

/* The tensors' names into f->strings: UTF-8, no NUL, not empty. */
static mt_status copy_names(st_file *f, const pt_tensor *t, size_t n, mt_err *err)
{
    size_t bytes = 1;
    for (size_t i = 0; i < n; i++)
        bytes += t[i].name_len + 1; /* each under PT_MAX_STRING: no overflow */
    if (!(f->strings = malloc(bytes)))
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", f->label);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        char *s = f->strings + at;
        memcpy(s, t[i].name, t[i].name_len);
        s[t[i].name_len] = '\0';
        if (t[i].name_len == 0)
            return mt_fail(err, MT_EFORMAT, "%s: tensor with an empty name", f->label);
        if (memchr(s, 0, t[i].name_len) || !st_utf8_valid(s))
            return mt_fail(err, MT_EFORMAT, "%s: tensor '%s': its name is not UTF-8 text "
                           "without NUL bytes", f->label, ST_SHOW_N(t[i].name, t[i].name_len));
        f->entries[i].t.name = s;
        at += t[i].name_len + 1;
    }
    return MT_OK;
}

/* Tensors whose bytes are not aligned to their element size in the image
 * are copied into f->owned (malloc's alignment suits every dtype). */
static mt_status copy_unaligned(st_file *f, mt_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = &f->entries[i].t;
        if ((uintptr_t)t->data % st_dtype_size(t->dtype) != 0)
            total += (t->nbytes + 15) & ~(size_t)15; /* within the image's size: no overflow */
    }
    if (total == 0)
        return MT_OK;
    unsigned char *own = malloc(total);
    if (!own)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for %zu bytes of unaligned tensors",
                       f->label, total);
    f->owned = own;
    for (size_t i = 0; i < f->n; i++) {
        st_tensor *t = &f->entries[i].t;
        if ((uintptr_t)t->data % st_dtype_size(t->dtype) != 0) {
            memcpy(own, t->data, t->nbytes);
            t->data = own;
            own += (t->nbytes + 15) & ~(size_t)15;
        }
    }
    return MT_OK;
}

/* The unpickled tensors into f's entries. */
static mt_status read_tensors(st_file *f, pt_ctx *c, const pt_tensor *t, size_t n, mt_err *err)
{
    f->entries = calloc(n ? n : 1, sizeof *f->entries);
    c->claim_dtype = malloc(c->z->n * sizeof *c->claim_dtype);
    c->claim_numel = malloc(c->z->n * sizeof *c->claim_numel);
    if (!f->entries || !c->claim_dtype || !c->claim_numel)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for %zu tensors", f->label, n);
    for (size_t i = 0; i < c->z->n; i++)
        c->claim_dtype[i] = -2;
    mt_status st = copy_names(f, t, n, err);
    for (size_t i = 0; st == MT_OK && i < n; i++) {
        st_entry *e = &f->entries[i];
        if ((st = read_tensor(c, ST_SHOW(e->t.name), &t[i], e, err)) == MT_OK) {
            e->t.data = c->img + e->begin;
            f->n++;
        }
    }
    return st == MT_OK ? copy_unaligned(f, err) : st;
}

/* The top folder (the first entry's) and, where there is one, its byteorder. */
static mt_status archive_top(const unsigned char *img, pt_ctx *c, mt_err *err)
{
    const char *slash = strchr(c->z->first, '/');
    if (!slash || slash == c->z->first)
        return mt_fail(err, MT_EFORMAT, "%s: entry '%s' is not in a folder: not a torch.save "
                       "archive", c->label, ST_SHOW(c->z->first));
    c->top = c->z->first;
    c->top_len = (size_t)(slash - c->z->first);
    char *name = top_name(c, "/byteorder", "", 0);
    if (!name)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", c->label);
    const pt_zip_entry *b = pt_zip_find(c->z, name);
    mt_status st = MT_OK;
    if (b && (b->size != 6 || memcmp(img + b->data, "little", 6)))
        st = mt_fail(err, MT_EFORMAT, "%s: %s says '%s': only little-endian checkpoints are "
                     "read", c->label, ST_SHOW(name),
                     ST_SHOW_N(img + b->data, b->size < 16 ? b->size : 16));
    free(name);
    return st;
}

/* <top>/data.pkl on the restricted unpickler. */
static mt_status unpickle(const unsigned char *img, const pt_ctx *c, pt_tensor **t, size_t *n,
                          mt_err *err)
{
    char *pkl = top_name(c, "/data.pkl", "", 0);
    if (!pkl)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", c->label);
    const pt_zip_entry *e = pt_zip_find(c->z, pkl);
    mt_status st = e ? pt_unpickle(img + e->data, e->size, c->label, pkl, t, n, err)
                     : mt_fail(err, MT_EFORMAT, "%s: no entry '%s': not a torch.save archive",
                               c->label, ST_SHOW(pkl));
    free(pkl);
    return st;
}

mt_status pt_read(st_file *f, const unsigned char *img, size_t len, mt_err *err)
{
    pt_zip z;
    pt_tensor *t = NULL;
    size_t n = 0;
    pt_ctx c = {.label = f->label, .img = img, .z = &z};
    mt_status st = pt_zip_read(img, len, f->label, &z, err);
    if (st == MT_OK)
        st = archive_top(img, &c, err);
    if (st == MT_OK)
        st = unpickle(img, &c, &t, &n, err);
    if (st == MT_OK)
        st = read_tensors(f, &c, t, n, err);
    free(c.claim_dtype);
    free(c.claim_numel);
    free(t);
    pt_zip_free(&z);
    return st;
}
