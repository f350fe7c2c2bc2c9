/* safetensors.h: read and write the safetensors format; read PyTorch
 * checkpoints as the same st_file.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {string: string}}), then the data. st_open maps the file
 * read-only and validates the header against it before anything is used:
 * header length bound, known dtypes, shape x dtype size == byte range,
 * ranges inside the data and not overlapping, no integer overflow. A bad
 * file is an error naming the file and the tensor, never a crash.
 *
 * A file that starts as a zip file does ("PK\3\4") is read as a PyTorch
 * checkpoint in torch.save's format of torch >= 1.6 (`*.pt`,
 * `pytorch_model.bin`; engine/weights/torch_pt.c): its data.pkl is run on a
 * restricted unpickler that knows only a state dict's opcodes and globals
 * (a flat dict of names to contiguous tensors; any other global, such as
 * os.system, is refused by name, and nothing is ever called), and each
 * tensor points into the mapping like a safetensors one (tensors may share
 * bytes: views, tied weights; one not aligned to its element size in the
 * file is copied). Such an st_file has no metadata (st_meta is NULL). The
 * format before torch 1.6 is refused with a message saying so.
 */
#ifndef MT_SAFETENSORS_H
#define MT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u * 1024u * 1024u) /* as the reference reader */

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_U16, ST_I16, ST_F16, ST_BF16,
    ST_U32, ST_I32, ST_F32, ST_U64, ST_I64, ST_F64,
    ST_F8_E4M3, ST_F8_E5M2,
    ST_DTYPE_COUNT
} st_dtype;

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;  /* points into the mapping (reader) or caller memory (writer) */
    size_t nbytes;
} st_tensor;

typedef struct st_file st_file;

/* Maps and validates path: a safetensors file or a PyTorch checkpoint (by
 * its first bytes, whatever its name). Errors name the file (and the
 * tensor or archive entry, where one is at fault).
 * A path ending in ".index.json" is a sharded checkpoint (Hugging Face's
 * model.safetensors.index.json or pytorch_model.bin.index.json:
 * "weight_map" names each tensor's shard, a file beside the index): every
 * shard is opened and validated, every tensor of the map must be in the
 * shard it names, no tensor may be in two shards, and the result is one
 * st_file over all of them (st_path: the index; st_meta: none). */
mt_status st_open(const char *path, st_file **out, mt_err *err);
/* Validates an in-memory image of either format, as st_open does a file's
 * (for tests and fuzzing); buf must outlive the st_file. label names the
 * buffer in error messages. */
mt_status st_parse(const void *buf, size_t len, const char *label, st_file **out, mt_err *err);
void st_close(st_file *f);
/* Drops the mapped file's pages from this process's resident set (a loader
 * calls it once it has copied what it read): the data stay valid and in the
 * page cache, and are read again if touched. Without it every byte read
 * counts in the process's RSS until st_close, on top of the copy the loader
 * made. No-op for st_parse's in-memory images. */
void st_drop_pages(st_file *f);

/* A model folder's weights, into buf (cap bytes): the first the folder has
 * of dir/model.safetensors, dir/model.safetensors.index.json,
 * dir/pytorch_model.bin and dir/pytorch_model.bin.index.json (as
 * transformers prefers them; st_open reads each), or dir/model.safetensors
 * when it has none (so that st_open's error names it). */
void st_model_path(const char *dir, char *buf, size_t cap);

size_t st_count(const st_file *f);
const st_tensor *st_get(const st_file *f, size_t i);       /* in file order of offsets */
/* (tensors of a PyTorch checkpoint may share bytes: st_get orders them by
 * where they start in the file, then by size, then by name) */
const st_tensor *st_find(const st_file *f, const char *name);
/* A string from "__metadata__", or NULL when absent. */
const char *st_meta(const st_file *f, const char *key);
const char *st_path(const st_file *f);

const char *st_dtype_name(st_dtype d);   /* "F32", "F8_E4M3", ... */
size_t st_dtype_size(st_dtype d);        /* bytes per element */
int st_dtype_parse(const char *s, st_dtype *out); /* 0 on success */
/* Number of elements of t (product of shape; 1 for a scalar). */
int64_t st_numel(const st_tensor *t);

/* Writes tensors (in the given order, 8-byte aligned data) and string
 * metadata (meta_kv: key, value, key, value, ..., NULL; may be NULL) to path,
 * through a temporary file renamed into place. */
mt_status st_write(const char *path, const st_tensor *t, size_t n,
                   const char *const *meta_kv, mt_err *err);

/* st_write for data made while the file is written, so that a writer of
 * a large model (mantissa quantize) holds one tensor's at a time: a tensor
 * whose data is NULL (nbytes > 0) is handed over by fill, which calls
 * st_writer_put(w, i, ...) for each such tensor i, in any order, with its
 * bytes in one piece or in several in order (each is written before put
 * returns, and the caller's buffer may then be reused). A tensor not
 * handed over whole fails the write; so does a failing fill (its status
 * and message are returned). Tensors with data are written from it,
 * before fill runs. */
typedef struct st_writer st_writer;
typedef mt_status (*st_fill_fn)(void *arg, st_writer *w, mt_err *err);
mt_status st_write_fill(const char *path, const st_tensor *t, size_t n,
                        const char *const *meta_kv, st_fill_fn fill, void *arg, mt_err *err);
mt_status st_writer_put(st_writer *w, size_t i, const void *data, size_t nbytes, mt_err *err);

#endif
