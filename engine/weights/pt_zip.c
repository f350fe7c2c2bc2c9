/* pt_zip.c: the zip reader of the PyTorch checkpoint reader (pt_internal.h):
 * finds the end of central directory record (and, where there is one, the
 * ZIP64 locator and end record: multi-GB checkpoints need them, and torch
 * writes them always), walks the central directory, reads each entry's
 * local header to find where its bytes start, and gives back the entries by
 * name. Only what torch.save writes is read: one disk, stored (method 0)
 * unencrypted entries. Every offset and size is checked against the image
 * with overflow-checked arithmetic; each entry's bytes must end before the
 * central directory. CRCs are not checked (that would read every byte of a
 * multi-GB file at open; safetensors has no checksum either).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/weights/pt_internal.h"

#define ZIP_EOCD_SIG 0x06054b50u
#define ZIP_EOCD_LEN 22u
#define ZIP64_LOC_SIG 0x07064b50u
#define ZIP64_LOC_LEN 20u
#define ZIP64_EOCD_SIG 0x06064b50u
#define ZIP64_EOCD_LEN 56u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_CENTRAL_LEN 46u
#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_LOCAL_LEN 30u
#define ZIP64_EXTRA_ID 0x0001u
#define ZIP_MAX_COMMENT 65535u

static uint16_t u16le(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t u64le(const unsigned char *p)
{
    return (uint64_t)u32le(p) | (uint64_t)u32le(p + 4) << 32;
}

/* Where the central directory is and how many entries it has. */
typedef struct {
    uint64_t cd_off, cd_size, count;
} zip_dir;

/* The end record: the last "PK\5\6" whose comment runs exactly to the end
 * of the image. */
static mt_status find_eocd(const unsigned char *img, size_t len, const char *label, size_t *at,
                           mt_err *err)
{
    if (len < ZIP_EOCD_LEN)
        return mt_fail(err, MT_EFORMAT, "%s: %zu bytes: too short for a zip file", label, len);
    size_t lo = len - ZIP_EOCD_LEN > ZIP_MAX_COMMENT ? len - ZIP_EOCD_LEN - ZIP_MAX_COMMENT : 0;
    for (size_t i = len - ZIP_EOCD_LEN + 1; i-- > lo;) {
        if (u32le(img + i) == ZIP_EOCD_SIG && i + ZIP_EOCD_LEN + u16le(img + i + 20) == len) {
            *at = i;
            return MT_OK;
        }
    }
    return mt_fail(err, MT_EFORMAT,
                   "%s: no end of central directory record: not a zip file, or cut short", label);
}

/* The ZIP64 end record the locator before the end record points to. */
static mt_status read_zip64_eocd(const unsigned char *img, size_t loc, const char *label,
                                 zip_dir *d, mt_err *err)
{
    const uint64_t off = u64le(img + loc + 8);
    if (u32le(img + loc + 4) != 0 || u32le(img + loc + 16) > 1)
        return mt_fail(err, MT_EFORMAT, "%s: ZIP64 locator: a multi-disk zip is not read", label);
    if (off > loc || loc - off < ZIP64_EOCD_LEN)
        return mt_fail(err, MT_EFORMAT,
                       "%s: ZIP64 locator: end record at %" PRIu64 " is out of range", label, off);
    const unsigned char *r = img + off;
    if (u32le(r) != ZIP64_EOCD_SIG)
        return mt_fail(err, MT_EFORMAT, "%s: ZIP64 end record at %" PRIu64 ": bad signature",
                       label, off);
    if (u32le(r + 16) != 0 || u32le(r + 20) != 0 || u64le(r + 24) != u64le(r + 32))
        return mt_fail(err, MT_EFORMAT, "%s: ZIP64 end record: a multi-disk zip is not read",
                       label);
    d->count = u64le(r + 32);
    d->cd_size = u64le(r + 40);
    d->cd_off = u64le(r + 48);
    return MT_OK;
}

/* The central directory's place and size, from the end record or ZIP64's;
 * it must lie inside the image before the end records. */
static mt_status read_dir(const unsigned char *img, size_t len, const char *label, zip_dir *d,
                          mt_err *err)
{
    size_t eocd = 0;
    mt_status st = find_eocd(img, len, label, &eocd, err);
    if (st != MT_OK)
        return st;
    const unsigned char *e = img + eocd;
    size_t end = eocd; /* the central directory ends before this */
    if (eocd >= ZIP64_LOC_LEN && u32le(img + eocd - ZIP64_LOC_LEN) == ZIP64_LOC_SIG) {
        end = eocd - ZIP64_LOC_LEN;
        if ((st = read_zip64_eocd(img, end, label, d, err)) != MT_OK)
            return st;
        end = (size_t)u64le(img + end + 8); /* the ZIP64 end record's offset */
    } else {
        if (u16le(e + 4) != 0 || u16le(e + 6) != 0 || u16le(e + 8) != u16le(e + 10))
            return mt_fail(err, MT_EFORMAT, "%s: a multi-disk zip is not read", label);
        if (u16le(e + 10) == 0xFFFF || u32le(e + 12) == 0xFFFFFFFFu ||
            u32le(e + 16) == 0xFFFFFFFFu)
            return mt_fail(err, MT_EFORMAT,
                           "%s: the end record says ZIP64 but there is no ZIP64 locator", label);
        d->count = u16le(e + 10);
        d->cd_size = u32le(e + 12);
        d->cd_off = u32le(e + 16);
    }
    if (d->cd_off > end || d->cd_size > end - d->cd_off)
        return mt_fail(err, MT_EFORMAT,
                       "%s: central directory [%" PRIu64 ", +%" PRIu64
                       ") out of range (the end records start at %zu)",
                       label, d->cd_off, d->cd_size, end);
    if (d->count > d->cd_size / ZIP_CENTRAL_LEN || d->count > PT_ZIP_MAX_ENTRIES)
        return mt_fail(err, MT_EFORMAT,
                       "%s: %" PRIu64 " entries cannot fit in a %" PRIu64
                       "-byte central directory (or are over %u)",
                       label, d->count, d->cd_size, PT_ZIP_MAX_ENTRIES);
    return MT_OK;
}

/* One central directory header's fields we use. */
typedef struct {
    const unsigned char *name;
    size_t name_len;
    uint64_t size, local;
} zip_central;

/* The ZIP64 extra field's values for the 32-bit fields that are saturated,
 * in the order the format gives: size, compressed size, local offset. */
static mt_status zip64_extra(const unsigned char *x, size_t xlen, const char *label,
                             const char *name, uint64_t *vals[3], mt_err *err)
{
    for (size_t i = 0; i + 4 <= xlen;) {
        size_t id = u16le(x + i), n = u16le(x + i + 2);
        if (n > xlen - i - 4)
            return mt_fail(err, MT_EFORMAT, "%s: entry '%s': extra field runs past its header",
                           label, name);
        if (id == ZIP64_EXTRA_ID) {
            size_t at = 0;
            for (int k = 0; k < 3; k++) {
                if (*vals[k] != 0xFFFFFFFFu)
                    continue;
                if (n - at < 8)
                    return mt_fail(err, MT_EFORMAT, "%s: entry '%s': ZIP64 extra field too short",
                                   label, name);
                *vals[k] = u64le(x + i + 4 + at);
                at += 8;
            }
            return MT_OK;
        }
        i += 4 + n;
    }
    for (int k = 0; k < 3; k++)
        if (*vals[k] == 0xFFFFFFFFu)
            return mt_fail(err, MT_EFORMAT, "%s: entry '%s': sizes say ZIP64 but it has no "
                           "ZIP64 extra field", label, name);
    return MT_OK;
}

/* The central header at *pos (inside the directory, which ends at end). */
static mt_status read_central(const unsigned char *img, uint64_t *pos, uint64_t end,
                              const char *label, zip_central *c, mt_err *err)
{
    if (end - *pos < ZIP_CENTRAL_LEN || u32le(img + *pos) != ZIP_CENTRAL_SIG)
        return mt_fail(err, MT_EFORMAT, "%s: central directory header at %" PRIu64
                       ": bad signature or cut short", label, *pos);
    const unsigned char *h = img + *pos;
    const size_t nl = u16le(h + 28), xl = u16le(h + 30), cl = u16le(h + 32);
    if (end - *pos - ZIP_CENTRAL_LEN < (uint64_t)nl + xl + cl)
        return mt_fail(err, MT_EFORMAT, "%s: central directory header at %" PRIu64
                       ": runs past the directory", label, *pos);
    c->name = h + ZIP_CENTRAL_LEN;
    c->name_len = nl;
    const char *shown = ST_SHOW_N(c->name, nl);
    const unsigned flags = u16le(h + 8), method = u16le(h + 10);
    if (flags & 1u)
        return mt_fail(err, MT_EFORMAT, "%s: entry '%s' is encrypted", label, shown);
    if (method != 0)
        return mt_fail(err, MT_EFORMAT,
                       "%s: entry '%s' is compressed (method %u); only stored entries are read "
                       "(torch.save stores them)", label, shown, method);
    uint64_t csize = u32le(h + 20), disk = u16le(h + 34);
    c->size = u32le(h + 24);
    c->local = u32le(h + 42);
    uint64_t *vals[3] = {&c->size, &csize, &c->local};
    mt_status st = zip64_extra(h + ZIP_CENTRAL_LEN + nl, xl, label, shown, vals, err);
    if (st != MT_OK)
        return st;
    if (disk != 0 && disk != 0xFFFF)
        return mt_fail(err, MT_EFORMAT, "%s: entry '%s' is on disk %" PRIu64
                       ": a multi-disk zip is not read", label, shown, disk);
    if (csize != c->size)
        return mt_fail(err, MT_EFORMAT, "%s: entry '%s': stored, but its sizes differ (%" PRIu64
                       " and %" PRIu64 ")", label, shown, csize, c->size);
    *pos += ZIP_CENTRAL_LEN + nl + xl + cl;
    return MT_OK;
}

/* Where the entry's bytes start: after its local header, whose name must be
 * the central directory's; they must end by limit (the directory). */
static mt_status read_local(const unsigned char *img, uint64_t limit, const char *label,
                            const zip_central *c, uint64_t *data, mt_err *err)
{
    const char *shown = ST_SHOW_N(c->name, c->name_len);
    if (c->local > limit || limit - c->local < ZIP_LOCAL_LEN ||
        u32le(img + c->local) != ZIP_LOCAL_SIG)
        return mt_fail(err, MT_EFORMAT,
                       "%s: entry '%s': no local header at %" PRIu64 " (out of range or bad "
                       "signature)", label, shown, c->local);
    const unsigned char *h = img + c->local;
    const uint64_t nl = u16le(h + 26), xl = u16le(h + 28);
    const uint64_t start = c->local + ZIP_LOCAL_LEN + nl + xl; /* no overflow: all small */
    if (nl != c->name_len || limit - c->local - ZIP_LOCAL_LEN < nl ||
        memcmp(h + ZIP_LOCAL_LEN, c->name, c->name_len) != 0)
        return mt_fail(err, MT_EFORMAT,
                       "%s: entry '%s': the local header names another entry", label, shown);
    if (start > limit || c->size > limit - start)
        return mt_fail(err, MT_EFORMAT,
                       "%s: entry '%s': %" PRIu64 " bytes at %" PRIu64
                       " run past the central directory (at %" PRIu64 ")",
                       label, shown, c->size, start, limit);
    *data = start;
    return MT_OK;
}

static int cmp_entries(const void *a, const void *b)
{
    return strcmp(((const pt_zip_entry *)a)->name, ((const pt_zip_entry *)b)->name);
}

/* Every central header in turn, into z (names copied). */
static mt_status read_entries(const unsigned char *img, const zip_dir *d, const char *label,
                              pt_zip *z, mt_err *err)
{
    z->e = calloc(d->count ? d->count : 1, sizeof *z->e);
    z->names = malloc(d->cd_size + 1); /* names are shorter than their headers */
    if (!z->e || !z->names)
        return mt_fail(err, MT_ENOMEM, "%s: out of memory for %" PRIu64 " zip entries", label,
                       d->count);
    uint64_t pos = d->cd_off, end = d->cd_off + d->cd_size;
    size_t at = 0;
    for (uint64_t i = 0; i < d->count; i++) {
        zip_central c;
        mt_status st = read_central(img, &pos, end, label, &c, err);
        if (st == MT_OK)
            st = read_local(img, d->cd_off, label, &c, &z->e[i].data, err);
        if (st != MT_OK)
            return st;
        if (memchr(c.name, 0, c.name_len))
            return mt_fail(err, MT_EFORMAT, "%s: entry '%s' has a NUL byte in its name", label,
                           ST_SHOW_N(c.name, c.name_len));
        memcpy(z->names + at, c.name, c.name_len);
        z->names[at + c.name_len] = '\0';
        z->e[i].name = z->names + at;
        z->e[i].size = c.size;
        at += c.name_len + 1;
        z->n++;
    }
    return MT_OK;
}

mt_status pt_zip_read(const unsigned char *img, size_t len, const char *label, pt_zip *z,
                      mt_err *err)
{
    memset(z, 0, sizeof *z);
    zip_dir d = {0};
    mt_status st = read_dir(img, len, label, &d, err);
    if (st == MT_OK)
        st = read_entries(img, &d, label, z, err);
    if (st == MT_OK && z->n == 0)
        st = mt_fail(err, MT_EFORMAT, "%s: an empty zip file", label);
    if (st != MT_OK) {
        pt_zip_free(z);
        return st;
    }
    z->first = z->e[0].name;
    qsort(z->e, z->n, sizeof *z->e, cmp_entries);
    for (size_t i = 1; i < z->n; i++) {
        if (!strcmp(z->e[i - 1].name, z->e[i].name)) {
            st = mt_fail(err, MT_EFORMAT, "%s: entry '%s' is in the zip twice", label,
                         ST_SHOW(z->e[i].name));
            pt_zip_free(z);
            return st;
        }
    }
    return MT_OK;
}

const pt_zip_entry *pt_zip_find(const pt_zip *z, const char *name)
{
    const pt_zip_entry key = {.name = name};
    return z->n ? bsearch(&key, z->e, z->n, sizeof *z->e, cmp_entries) : NULL;
}

void pt_zip_free(pt_zip *z)
{
    free(z->e);
    free(z->names);
    memset(z, 0, sizeof *z);
}
