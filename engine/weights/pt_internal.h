/* pt_internal.h: what the PyTorch checkpoint reader's files share: the zip
 * reader (pt_zip.c), the restricted unpickler of data.pkl (pt_pickle.c) and
 * the part that makes an st_file of them (torch_pt.c), which safetensors.c's
 * st_parse calls for an image that starts as a zip file does.
 *
 * torch.save (torch >= 1.6) writes a zip archive of stored (uncompressed)
 * entries under one top folder: <top>/data.pkl, a pickle of the saved object
 * in which each tensor's storage is a persistent id naming the entry
 * <top>/data/<key> that holds its bytes, plus <top>/version, <top>/byteorder
 * and a few more.
 */
#ifndef MT_ENGINE_PT_INTERNAL_H
#define MT_ENGINE_PT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"
#include "engine/weights/st_internal.h"

/* ---- pt_zip.c ------------------------------------------------------------ */

/* Limits of what the zip reader takes (beyond the format's own). */
#define PT_ZIP_MAX_ENTRIES (1u << 20)

typedef struct {
    const char *name; /* NUL-terminated copy of the entry's name */
    uint64_t data;    /* where its bytes start in the image */
    uint64_t size;    /* how many */
} pt_zip_entry;

typedef struct {
    pt_zip_entry *e;   /* sorted by name (pt_zip_find) */
    size_t n;
    char *names;       /* the names, one allocation */
    const char *first; /* the first entry's name in the central directory */
} pt_zip;

/* Reads the end records (ZIP64's too), the central directory and each
 * entry's local header of the image (len bytes); every entry must be
 * stored, unencrypted, and lie inside the image before the central
 * directory. Errors name label and the entry at fault. On failure *z is
 * empty (pt_zip_free is still safe). */
mt_status pt_zip_read(const unsigned char *img, size_t len, const char *label, pt_zip *z,
                      mt_err *err);
const pt_zip_entry *pt_zip_find(const pt_zip *z, const char *name);
void pt_zip_free(pt_zip *z);

/* ---- pt_pickle.c --------------------------------------------------------- */

/* Limits of the unpickler: every one is checked, so a hostile pickle is an
 * error, never a crash or an unbounded allocation. */
#define PT_MAX_PICKLE (256u << 20)  /* bytes of data.pkl */
#define PT_MAX_OBJECTS (1u << 23)   /* values made (and container cells) */
#define PT_MAX_STACK (1u << 20)     /* values on the stack */
#define PT_MAX_MARKS 64             /* open MARKs */
#define PT_MAX_MEMO (1u << 22)      /* a memo index */
#define PT_MAX_STRING (1u << 20)    /* bytes of one string */
#define PT_MAX_TENSORS (1u << 20)   /* tensors and storages */

/* dtype of an untyped storage (torch.storage.UntypedStorage: numel counts
 * bytes; the tensor's dtype comes from _rebuild_tensor_v3). */
#define PT_UNTYPED (-1)

/* One tensor of the saved dict, as the pickle describes it. Strings point
 * into the pickle's bytes (not NUL-terminated; may hold anything). */
typedef struct {
    const unsigned char *name; /* the dict's key */
    size_t name_len;
    const unsigned char *key;  /* the storage's key: its bytes are data/<key> */
    size_t key_len;
    int storage_dtype;         /* st_dtype, or PT_UNTYPED */
    uint64_t storage_numel;    /* elements of storage_dtype (bytes if untyped) */
    st_dtype dtype;            /* the tensor's */
    uint64_t offset;           /* storage offset, in elements of dtype */
    int ndim;
    int64_t shape[ST_MAX_DIMS], stride[ST_MAX_DIMS];
} pt_tensor;

/* Runs the pickle (n bytes; entry names it in errors, after label) on the
 * restricted machine and returns the tensors of the dict it builds, in the
 * dict's order (*out: malloc'd, the caller frees; *count may be 0). Only
 * the opcodes and globals torch.save's state dicts use are known; anything
 * else is an error naming it. Sizes, strides and offsets are integers >= 0
 * with at most ST_MAX_DIMS dims; their agreement with the storage is the
 * caller's to check. */
mt_status pt_unpickle(const unsigned char *p, size_t n, const char *label, const char *entry,
                      pt_tensor **out, size_t *count, mt_err *err);

/* ---- torch_pt.c ---------------------------------------------------------- */

typedef enum {
    PT_NOT_TORCH = 0,
    PT_ZIP,    /* starts as a zip file does: local header "PK\3\4" */
    PT_LEGACY, /* torch.save's format before 1.6: a pickle of its magic number */
} pt_kind;

pt_kind pt_sniff(const unsigned char *img, size_t len);

/* Reads a PyTorch checkpoint image into f (label set, everything else
 * empty): f->entries (n of them, unsorted; begin/end the tensor's bytes in
 * the image), f->strings and f->owned (copies of tensors not aligned to
 * their element size in the image). The caller indexes them (st_parse). */
mt_status pt_read(st_file *f, const unsigned char *img, size_t len, mt_err *err);

#endif
