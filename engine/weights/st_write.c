/* st_write.c: writes safetensors files: checks the tensors as the reader
 * would, builds the header with cJSON (so strings are escaped properly),
 * pads it with spaces so the data starts 8-byte aligned, and writes through
 * a temporary file that is fsynced and renamed into place; the data from
 * the caller's memory, or (st_write_fill) handed over a tensor at a time
 * while the file is written, so that a writer of a large model never holds
 * all of it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/weights/st_internal.h"

/* ======================================================================
 * writer
 * ====================================================================== */

static int st_cmp_strp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the caller's tensors and metadata before anything touches disk;
 * the reader must accept what the writer writes. */
/* One tensor to write: a name, a dtype, a shape whose size is nbytes,
 * dims below 2^53, its data (unless a fill gives it: deferred); *bytes
 * gets its size. */
static mt_status st_check_one(const char *path, const st_tensor *x, size_t i, bool deferred,
                              uint64_t *bytes, mt_err *err)
{
    char shp[ST_MAX_DIMS * 22 + 4], shown[ST_SHOW_CAP];
    if (!x->name || !x->name[0])
        return mt_fail(err, MT_EINVAL, "%s: tensor %zu has no name", path, i);
    const char *name = st_show(x->name, shown);
    if (strcmp(x->name, ST_METADATA_KEY) == 0 || !st_utf8_valid(x->name))
        return mt_fail(err, MT_EINVAL, "%s: tensor '%s': name is reserved or not UTF-8", path, name);
    if ((unsigned)x->dtype >= ST_DTYPE_COUNT)
        return mt_fail(err, MT_EINVAL, "%s: tensor '%s': unknown dtype %d", path, name,
                       (int)x->dtype);
    if (x->ndim < 0 || x->ndim > ST_MAX_DIMS)
        return mt_fail(err, MT_EINVAL, "%s: tensor '%s': ndim %d is outside 0..%d", path, name,
                       x->ndim, ST_MAX_DIMS);
    st_shape_str(shp, sizeof shp, x->ndim, x->shape);
    uint64_t numel;
    int rc = st_shape_bytes(x->dtype, x->ndim, x->shape, &numel, bytes);
    if (rc < 0)
        return mt_fail(err, MT_EINVAL, "%s: tensor '%s': shape %s has a negative dim", path, name,
                       shp);
    if (rc > 0)
        return mt_fail(err, MT_EINVAL, "%s: tensor '%s': shape %s x %s overflows 64 bits", path,
                       name, shp, st_dtype_name(x->dtype));
    for (int d = 0; d < x->ndim; d++)
        if ((uint64_t)x->shape[d] >= ST_EXACT_LIMIT_U64)
            return mt_fail(err, MT_ELIMIT, "%s: tensor '%s': shape %s has a dim of 2^53 or more",
                           path, name, shp);
    if (*bytes != (uint64_t)x->nbytes)
        return mt_fail(err, MT_EINVAL,
                       "%s: tensor '%s': nbytes is %zu but shape %s x %s is %" PRIu64 " bytes",
                       path, name, x->nbytes, shp, st_dtype_name(x->dtype), *bytes);
    if (x->nbytes && !x->data && !deferred)
        return mt_fail(err, MT_EINVAL, "%s: tensor '%s': data is NULL", path, name);
    return MT_OK;
}

/* Tensor names and metadata keys are each unique. */
static mt_status st_check_unique(const char *path, const st_tensor *t, size_t n,
                                 const char *const *meta_kv, size_t m, mt_err *err)
{
    size_t most = n > m ? n : m;
    const char **names = malloc((most ? most : 1) * sizeof *names);
    if (!names)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
    mt_status st = MT_OK;
    for (size_t i = 0; i < n; i++)
        names[i] = t[i].name;
    qsort(names, n, sizeof *names, st_cmp_strp);
    for (size_t i = 1; i < n && st == MT_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            st = mt_fail(err, MT_EINVAL, "%s: tensor '%s': duplicate tensor name", path,
                         ST_SHOW(names[i]));
    for (size_t i = 0; i < m; i++)
        names[i] = meta_kv[2 * i];
    qsort(names, m, sizeof *names, st_cmp_strp);
    for (size_t i = 1; i < m && st == MT_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            st = mt_fail(err, MT_EINVAL, "%s: duplicate metadata key '%s'", path, ST_SHOW(names[i]));
    free(names);
    return st;
}

static mt_status st_check_inputs(const char *path, const st_tensor *t, size_t n,
                                 const char *const *meta_kv, bool deferred, size_t *nmeta,
                                 mt_err *err)
{
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes;
        mt_status st = st_check_one(path, &t[i], i, deferred, &bytes, err);
        if (st != MT_OK)
            return st;
        if (__builtin_add_overflow(offset, bytes, &offset) || offset >= ST_EXACT_LIMIT_U64)
            return mt_fail(err, MT_ELIMIT, "%s: tensor '%s': data would end at or past 2^53 bytes",
                           path, ST_SHOW(t[i].name));
    }
    size_t m = 0;
    for (; meta_kv && meta_kv[2 * m]; m++) {
        const char *k = meta_kv[2 * m], *v = meta_kv[2 * m + 1];
        if (!v)
            return mt_fail(err, MT_EINVAL, "%s: metadata key '%s' has no value", path, ST_SHOW(k));
        if (!st_utf8_valid(k) || !st_utf8_valid(v))
            return mt_fail(err, MT_EINVAL, "%s: metadata '%s' is not UTF-8", path, ST_SHOW(k));
    }
    *nmeta = m;
    return st_check_unique(path, t, n, meta_kv, m, err);
}

/* Adds an unsigned integer as raw JSON text, exact beyond 2^31 (cJSON's
 * own numbers print large values with exponents, e.g. "1e+15"). */
static bool st_add_uint(cJSON *array, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%" PRIu64, v);
    cJSON *item = cJSON_CreateRaw(num);
    return item && cJSON_AddItemToArray(array, item);
}

/* Builds the header JSON: "__metadata__" first, then tensors in order. */
static char *st_header_json(const st_tensor *t, size_t n, const char *const *meta_kv, size_t nmeta)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    bool ok = true;
    if (nmeta) {
        cJSON *m = cJSON_AddObjectToObject(root, ST_METADATA_KEY);
        ok = m != NULL;
        for (size_t i = 0; ok && i < nmeta; i++)
            ok = cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]) != NULL;
    }
    uint64_t offset = 0;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(root, t[i].name);
        cJSON *shape = NULL, *offs = NULL;
        ok = o && cJSON_AddStringToObject(o, "dtype", st_dtype_name(t[i].dtype))
             && (shape = cJSON_AddArrayToObject(o, "shape")) != NULL
             && (offs = cJSON_AddArrayToObject(o, "data_offsets")) != NULL;
        for (int d = 0; ok && d < t[i].ndim; d++)
            ok = st_add_uint(shape, (uint64_t)t[i].shape[d]);
        ok = ok && st_add_uint(offs, offset) && st_add_uint(offs, offset + t[i].nbytes);
        offset += t[i].nbytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* pwrite() until done, through short writes and EINTR. */
static int st_pwrite_all(int fd, const void *buf, size_t len, uint64_t at)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, (off_t)at);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        at += (uint64_t)w;
    }
    return 0;
}

/* A file being written: its tensors, where each one's data goes, and how
 * much of each deferred one a fill has handed over. */
struct st_writer {
    const char *path, *tmp;
    int fd;
    const st_tensor *t;
    size_t n;
    uint64_t *at;   /* each tensor's first byte in the file */
    size_t *done;   /* each deferred tensor's bytes handed over so far */
};

mt_status st_writer_put(st_writer *w, size_t i, const void *data, size_t nbytes, mt_err *err)
{
    if (i >= w->n || w->t[i].data)
        return mt_fail(err, MT_EINVAL, "%s: tensor %zu is not one to hand over (past the "
                       "last, or given in memory)", w->path, i);
    if (nbytes > w->t[i].nbytes - w->done[i] || (nbytes && !data))
        return mt_fail(err, MT_EINVAL, "%s: tensor '%s': %zu bytes handed over where %zu "
                       "are left of %zu", w->path, ST_SHOW(w->t[i].name), nbytes,
                       w->t[i].nbytes - w->done[i], w->t[i].nbytes);
    if (st_pwrite_all(w->fd, data, nbytes, w->at[i] + w->done[i]) != 0)
        return mt_fail(err, MT_EIO, "%s: write of %s: %s", w->path, w->tmp, strerror(errno));
    w->done[i] += nbytes;
    return MT_OK;
}

/* Makes the rename durable; best effort, as some file systems refuse to
 * fsync a directory and the file itself is already safe. */
static void st_sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

/* The header (length, JSON, padding) and every tensor's data: those in
 * memory first, then what fill hands over; each at its place. */
static mt_status st_write_body(st_writer *w, const char *json, size_t jlen, size_t pad,
                               st_fill_fn fill, void *arg, mt_err *err)
{
    static const char spaces[8] = "        ";
    unsigned char len8[8];
    const uint64_t hlen = (uint64_t)jlen + pad;
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hlen >> (8 * i));
    bool ok = st_pwrite_all(w->fd, len8, 8, 0) == 0 && st_pwrite_all(w->fd, json, jlen, 8) == 0 &&
              st_pwrite_all(w->fd, spaces, pad, 8 + jlen) == 0;
    for (size_t i = 0; ok && i < w->n; i++)
        ok = !w->t[i].data || st_pwrite_all(w->fd, w->t[i].data, w->t[i].nbytes, w->at[i]) == 0;
    if (!ok)
        return mt_fail(err, MT_EIO, "%s: write of %s: %s", w->path, w->tmp, strerror(errno));
    mt_status st = fill ? fill(arg, w, err) : MT_OK;
    for (size_t i = 0; st == MT_OK && i < w->n; i++)
        if (!w->t[i].data && w->done[i] != w->t[i].nbytes)
            st = mt_fail(err, MT_EINVAL, "%s: tensor '%s': %zu of its %zu bytes handed over",
                         w->path, ST_SHOW(w->t[i].name), w->done[i], w->t[i].nbytes);
    return st;
}

/* fsync, close and rename a written temporary file into place (or remove
 * it when the body failed: st is its status). */
static mt_status st_write_finish(st_writer *w, mt_status st, mt_err *err)
{
    const char *what = "write";
    bool ok = st == MT_OK;
    if (ok && fsync(w->fd) != 0) {
        ok = false;
        what = "fsync";
    }
    int e = errno;
    if (close(w->fd) != 0 && ok) {
        ok = false;
        e = errno;
        what = "close";
    }
    if (ok && rename(w->tmp, w->path) != 0) {
        ok = false;
        e = errno;
        what = "rename";
    }
    if (!ok) {
        unlink(w->tmp);
        if (st == MT_OK)
            st = mt_fail(err, MT_EIO, "%s: %s of %s: %s", w->path, what, w->tmp, strerror(e));
    } else {
        st_sync_dir(w->path);
    }
    return st;
}

/* Writes header and data to path.tmp.<pid>, fsyncs it and renames it over
 * path, so readers never see a half-written file. Data is laid out in the
 * given order and contiguously (the reference reader rejects gaps), so the
 * data area starts 8-byte aligned and each tensor is 8-byte aligned when the
 * tensors before it have sizes that are multiples of 8. */
static mt_status st_write_file(const char *path, const st_tensor *t, size_t n,
                               const char *const *meta_kv, st_fill_fn fill, void *arg,
                               mt_err *err)
{
    if (!path || !path[0])
        return mt_fail(err, MT_EINVAL, "st_write: no path");
    if (n && !t)
        return mt_fail(err, MT_EINVAL, "%s: tensors are NULL", path);
    size_t nmeta = 0;
    mt_status st = st_check_inputs(path, t, n, meta_kv, fill != NULL, &nmeta, err);
    if (st != MT_OK)
        return st;
    char *json = st_header_json(t, n, meta_kv, nmeta);
    if (!json)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory building the header", path);
    const size_t jlen = strlen(json), pad = (8 - jlen % 8) % 8;
    if ((uint64_t)jlen + pad > ST_MAX_HEADER) {
        free(json);
        return mt_fail(err, MT_ELIMIT, "%s: header would be %zu bytes, over the %u-byte limit",
                       path, jlen + pad, ST_MAX_HEADER);
    }
    const size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    st_writer w = {.path = path, .tmp = tmp, .t = t, .n = n,
                   .at = malloc(sizeof *w.at * (n ? n : 1)),
                   .done = calloc(n ? n : 1, sizeof *w.done)};
    if (!tmp || !w.at || !w.done) {
        st = mt_fail(err, MT_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0, off = 8 + jlen + pad; i < n; off += t[i].nbytes, i++)
        w.at[i] = off;
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    /* O_EXCL: two writers of one path in this process must not share it. */
    if ((w.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
        st = mt_fail(err, MT_EIO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        goto out;
    }
    st = st_write_finish(&w, st_write_body(&w, json, jlen, pad, fill, arg, err), err);
out:
    free(json);
    free(tmp);
    free(w.at);
    free(w.done);
    return st;
}

mt_status st_write(const char *path, const st_tensor *t, size_t n,
                   const char *const *meta_kv, mt_err *err)
{
    return st_write_file(path, t, n, meta_kv, NULL, NULL, err);
}

mt_status st_write_fill(const char *path, const st_tensor *t, size_t n,
                        const char *const *meta_kv, st_fill_fn fill, void *arg, mt_err *err)
{
    if (!fill)
        return mt_fail(err, MT_EINVAL, "%s: st_write_fill without a fill", path ? path : "");
    return st_write_file(path, t, n, meta_kv, fill, arg, err);
}
