/* pbjson.c: protobuf <-> KServe REST JSON by descriptor (see pbjson.h). */
#include "server/api/pbjson.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/utf8.h"
#include "server/base/pbwire.h"

/* ========================================================================
 * JSON -> wire bytes
 * ====================================================================== */

/* A JSON number or decimal string as an integer. */
static bool json_int(const cJSON *j, int64_t *i, uint64_t *u, bool *big)
{
    *big = false;
    if (cJSON_IsBool(j)) {
        *i = cJSON_IsTrue(j);
        *u = (uint64_t)*i;
        return true;
    }
    if (cJSON_IsString(j) && j->valuestring[0]) {
        char *end;
        if (j->valuestring[0] != '-') {
            *u = strtoull(j->valuestring, &end, 10);
            *big = *u > INT64_MAX;
            *i = (int64_t)*u;
        } else {
            *i = strtoll(j->valuestring, &end, 10);
            *u = (uint64_t)*i;
        }
        return *end == 0;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return false;
    double v = j->valuedouble;
    if (v >= 9223372036854775808.0) {
        *big = true;
        *u = v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
        *i = (int64_t)*u;
    } else {
        *i = v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
        *u = (uint64_t)*i;
    }
    return true;
}

/* Whether every field of d is in one oneof (a parameter value). */
static bool value_oneof(const ProtobufCMessageDescriptor *d)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (!(d->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            return false;
    return d->n_fields > 0;
}

static const ProtobufCFieldDescriptor *field_of_type(const ProtobufCMessageDescriptor *d,
                                                     ProtobufCType t)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].type == t)
            return &d->fields[i];
    return NULL;
}

static bool encode_value(const ProtobufCFieldDescriptor *f, const cJSON *v, sbuf *b);

/* A plain JSON value as a parameter-value message's one case. */
static bool encode_oneof_value(const ProtobufCMessageDescriptor *d, const cJSON *v, sbuf *b)
{
    const ProtobufCFieldDescriptor *f = NULL;
    if (cJSON_IsBool(v)) {
        f = field_of_type(d, PROTOBUF_C_TYPE_BOOL);
    } else if (cJSON_IsString(v)) {
        f = field_of_type(d, PROTOBUF_C_TYPE_STRING);
    } else if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        /* integers up to 2^64 (a double cannot say UINT64_MAX exactly: it
         * rounds to 2^64, which becomes UINT64_MAX) */
        bool integral = isfinite(x) && x == floor(x) && x >= -9223372036854775808.0 &&
                        x <= 18446744073709551616.0;
        if (integral && x >= 9223372036854775808.0)
            f = field_of_type(d, PROTOBUF_C_TYPE_UINT64);
        else if (integral)
            f = field_of_type(d, PROTOBUF_C_TYPE_INT64);
        if (!f)
            f = field_of_type(d, PROTOBUF_C_TYPE_DOUBLE);
    }
    return f ? encode_value(f, v, b) : true;
}

/* A 4- or 8-byte field (float, double, fixed32/64) with JSON value v. */
static void encode_fixed(const ProtobufCFieldDescriptor *f, const cJSON *v, sbuf *b)
{
    int64_t i = 0;
    uint64_t u = 0;
    bool big;
    const bool real = f->type == PROTOBUF_C_TYPE_FLOAT || f->type == PROTOBUF_C_TYPE_DOUBLE;
    if (real ? !cJSON_IsNumber(v) : !json_int(v, &i, &u, &big))
        return;
    if (f->type == PROTOBUF_C_TYPE_FLOAT || f->type == PROTOBUF_C_TYPE_FIXED32 ||
        f->type == PROTOBUF_C_TYPE_SFIXED32) {
        uint32_t w = (uint32_t)i;
        if (real) {
            float x = (float)v->valuedouble;
            memcpy(&w, &x, 4);
        }
        pb_fixed32(b, f->id, w);
    } else {
        uint64_t w = u;
        if (real)
            memcpy(&w, &v->valuedouble, 8);
        pb_fixed64(b, f->id, w);
    }
}

/* Field f with JSON value v (one element of a repeated field). */
static bool encode_value(const ProtobufCFieldDescriptor *f, const cJSON *v, sbuf *b)
{
    int64_t i;
    uint64_t u;
    bool big;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_BOOL:
        if (!json_int(v, &i, &u, &big))
            return true;
        pb_key(b, f->id, PB_WT_VARINT);
        pb_varint(b, f->type == PROTOBUF_C_TYPE_UINT64 ? u : (uint64_t)i);
        return true;
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SINT64:
        if (!json_int(v, &i, &u, &big))
            return true;
        pb_key(b, f->id, PB_WT_VARINT);
        pb_varint(b, ((uint64_t)i << 1) ^ (uint64_t)(i >> 63));
        return true;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            cJSON_IsString(v) ? protobuf_c_enum_descriptor_get_value_by_name(f->descriptor,
                                                                             v->valuestring)
                              : NULL;
        if (ev)
            i = ev->value;
        else if (!cJSON_IsNumber(v) || !json_int(v, &i, &u, &big))
            return true;
        pb_key(b, f->id, PB_WT_VARINT);
        pb_varint(b, (uint64_t)i);
        return true;
    }
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        encode_fixed(f, v, b);
        return true;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
        if (cJSON_IsString(v))
            pb_len(b, f->id, v->valuestring, strlen(v->valuestring));
        return true;
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessageDescriptor *d = f->descriptor;
        sbuf sub;
        sb_init(&sub);
        bool ok = cJSON_IsObject(v) ? pbjson_encode(d, v, &sub)
                  : value_oneof(d)  ? encode_oneof_value(d, v, &sub)
                                    : true;
        ok = ok && !sub.oom;
        if (ok)
            pb_len(b, f->id, sub.data ? sub.data : "", sub.len);
        sb_free(&sub);
        return ok;
    }
    }
    return true;
}

/* Whether d is a map's entry (key = 1, value = 2, named ...Entry). */
static bool map_entry(const ProtobufCMessageDescriptor *d)
{
    size_t n = strlen(d->name);
    return d->n_fields == 2 && n > 5 && !strcmp(d->name + n - 5, "Entry") &&
           !strcmp(d->fields[0].name, "key") && !strcmp(d->fields[1].name, "value");
}

/* A JSON object as a map field: one entry message per key. */
static bool encode_map(const ProtobufCFieldDescriptor *f, const cJSON *obj, sbuf *b)
{
    const ProtobufCMessageDescriptor *d = f->descriptor;
    const cJSON *v;
    cJSON_ArrayForEach(v, obj)
    {
        sbuf e;
        sb_init(&e);
        pb_len(&e, d->fields[0].id, v->string, strlen(v->string));
        bool ok = encode_value(&d->fields[1], v, &e) && !e.oom;
        if (ok)
            pb_len(b, f->id, e.data, e.len);
        sb_free(&e);
        if (!ok)
            return false;
    }
    return true;
}

bool pbjson_encode(const ProtobufCMessageDescriptor *d, const cJSON *j, sbuf *out)
{
    for (unsigned k = 0; k < d->n_fields; k++) {
        const ProtobufCFieldDescriptor *f = &d->fields[k];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, f->name);
        if (!v || cJSON_IsNull(v))
            continue;
        bool ok = true;
        if (f->label == PROTOBUF_C_LABEL_REPEATED && f->type == PROTOBUF_C_TYPE_MESSAGE &&
            map_entry(f->descriptor)) {
            ok = !cJSON_IsObject(v) || encode_map(f, v, out);
        } else if (f->label == PROTOBUF_C_LABEL_REPEATED && cJSON_IsArray(v)) {
            const cJSON *e; /* unpacked: every reader takes it */
            cJSON_ArrayForEach(e, v)
            {
                if (!(ok = encode_value(f, e, out)))
                    break;
            }
        } else {
            ok = encode_value(f, v, out);
        }
        if (!ok || out->oom)
            return false;
    }
    return !out->oom;
}

/* ========================================================================
 * strings in the wire bytes
 * ====================================================================== */

/* Well-formed UTF-8 (the one rule: engine/text/utf8.h) with no NUL. */
static bool utf8_no_nul(const uint8_t *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (!s[i] || !(k = mt_utf8_seq(s + i, n - i)))
            return false;
    return true;
}

static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

bool pbjson_check_strings(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n,
                          char *why, size_t cap)
{
    const uint8_t *end = p + n;
    while (p < end) {
        uint64_t key, len;
        if (!get_varint(&p, end, &key))
            return true; /* the decoder says what is wrong */
        const int wire = (int)(key & 7);
        if (wire == PB_WT_VARINT && !get_varint(&p, end, &len))
            return true;
        if (wire == PB_WT_I64 || wire == PB_WT_I32) {
            size_t w = wire == PB_WT_I64 ? 8 : 4;
            if ((size_t)(end - p) < w)
                return true;
            p += w;
        }
        if (wire != PB_WT_LEN)
            continue;
        if (!get_varint(&p, end, &len) || len > (uint64_t)(end - p))
            return true;
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3));
        if (f && f->type == PROTOBUF_C_TYPE_STRING && !utf8_no_nul(p, (size_t)len)) {
            snprintf(why, cap, "%s.%s is not UTF-8 text without NUL bytes", d->name, f->name);
            return false;
        }
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
            !pbjson_check_strings(f->descriptor, p, (size_t)len, why, cap))
            return false;
        p += len;
    }
    return true;
}

/* ========================================================================
 * decoded message -> JSON
 * ====================================================================== */

/* The value at p of field f (one element), or NULL when it is the
 * default and skip_default is set. */
static cJSON *decode_value(const ProtobufCFieldDescriptor *f, const void *p, bool skip_default)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: {
        int32_t v = *(const int32_t *)p;
        return skip_default && !v ? NULL : cJSON_CreateNumber(v);
    }
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: {
        uint32_t v = *(const uint32_t *)p;
        return skip_default && !v ? NULL : cJSON_CreateNumber(v);
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: {
        int64_t v = *(const int64_t *)p;
        return skip_default && !v ? NULL : cJSON_CreateNumber((double)v);
    }
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
        uint64_t v = *(const uint64_t *)p;
        return skip_default && !v ? NULL : cJSON_CreateNumber((double)v);
    }
    case PROTOBUF_C_TYPE_FLOAT: {
        float v = *(const float *)p;
        return skip_default && v == 0 ? NULL : cJSON_CreateNumber(v);
    }
    case PROTOBUF_C_TYPE_DOUBLE: {
        double v = *(const double *)p;
        return skip_default && v == 0 ? NULL : cJSON_CreateNumber(v);
    }
    case PROTOBUF_C_TYPE_BOOL: {
        protobuf_c_boolean v = *(const protobuf_c_boolean *)p;
        return skip_default && !v ? NULL : cJSON_CreateBool(v);
    }
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        return skip_default && !v ? NULL
               : ev               ? cJSON_CreateString(ev->name)
                                  : cJSON_CreateNumber(v);
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return !s || (skip_default && !*s) ? NULL : cJSON_CreateString(s);
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = p;
        if (skip_default && !bd->len)
            return NULL;
        sbuf b;
        sb_init(&b);
        sb_base64(&b, bd->data, bd->len);
        sb_putc(&b, 0);
        cJSON *s = b.oom ? NULL : cJSON_CreateString(b.data ? b.data : "");
        sb_free(&b);
        return s;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        if (!m)
            return NULL;
        const ProtobufCMessageDescriptor *d = m->descriptor;
        if (value_oneof(d)) { /* the set case, as a plain value */
            for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *c = &d->fields[i];
                if (*(const uint32_t *)((const char *)m + c->quantifier_offset) == c->id)
                    return decode_value(c, (const char *)m + c->offset, false);
            }
            return NULL;
        }
        return pbjson_decode(m);
    }
    }
    return NULL;
}

static size_t type_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

/* A repeated field as an array, or a map field as an object. */
static cJSON *decode_repeated(const ProtobufCFieldDescriptor *f, const ProtobufCMessage *m)
{
    size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
    const char *arr = *(char *const *)((const char *)m + f->offset);
    const bool map = f->type == PROTOBUF_C_TYPE_MESSAGE && map_entry(f->descriptor);
    cJSON *out = map ? cJSON_CreateObject() : cJSON_CreateArray();
    for (size_t i = 0; out && i < n; i++) {
        const void *p = arr + i * type_size(f->type);
        if (map) {
            const ProtobufCMessage *e = *(ProtobufCMessage *const *)p;
            const ProtobufCMessageDescriptor *d = e->descriptor;
            const char *key = *(char *const *)((const char *)e + d->fields[0].offset);
            cJSON *v = decode_value(&d->fields[1], (const char *)e + d->fields[1].offset, false);
            if (v && key)
                cJSON_AddItemToObject(out, key, v);
            else
                cJSON_Delete(v);
        } else {
            cJSON *v = decode_value(f, p, false);
            if (v)
                cJSON_AddItemToArray(out, v);
        }
    }
    return out;
}

static cJSON *decode_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    const char *base = (const char *)m;
    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        return *(const size_t *)(base + f->quantifier_offset) ? decode_repeated(f, m) : NULL;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)(base + f->quantifier_offset) == f->id
                   ? decode_value(f, base + f->offset, false)
                   : NULL;
    return decode_value(f, base + f->offset, true);
}

cJSON *pbjson_decode(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    cJSON *o = cJSON_CreateObject();
    for (unsigned k = 0; o && k < d->n_fields; k++) {
        cJSON *v = decode_field(m, &d->fields[k]);
        if (v)
            cJSON_AddItemToObject(o, d->fields[k].name, v);
    }
    return o;
}

cJSON *pbjson_decode_field(const ProtobufCMessage *m, const char *name)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    return f ? decode_field(m, f) : NULL;
}

void pbjson_put_bytes(sbuf *out, uint32_t id, const void *p, size_t n)
{
    pb_len(out, id, p, n);
}
