/* config.c: load and validate mantissa.json (see config.h).
 *
 * Each JSON object of the schema is described by a table of fields (key,
 * kind, bounds, where it goes), so the whole schema reads in one place and
 * every object gets the same checks: known keys only, no duplicates, types
 * and bounds, with the field's full path in the message.
 */
#include "server/core/config.h"

#include <cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"

/* ========================================================================
 * field tables
 * ====================================================================== */

typedef enum { F_INT, F_SIZE, F_NUM, F_BOOL, F_STR, F_NAME, F_ANY } field_kind;

typedef struct {
    const char *key;
    field_kind kind;
    double lo, hi;   /* bounds for numbers, max length for strings */
    size_t offset;   /* into the struct being filled; (size_t)-1: handled by caller */
    bool required;
} field;

#define OFF(type, member) offsetof(type, member)
#define CALLER ((size_t)-1)

typedef struct {
    const char *file;
    mt_err *err;
} ctx;

static mt_status fail(ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static mt_status fail(ctx *c, const char *path, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mt_fail(c->err, MT_EINVAL, "%s: %s: %s", c->file, path, msg);
}

/* snprintf for field paths; a path cut short only shortens a message. */
static void pjoin(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void pjoin(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(dst, cap, fmt, ap) >= (int)cap && cap > 4)
        strcpy(dst + cap - 4, "...");
    va_end(ap);
}

/* A name that can stand in a URL path segment and a metric label. */
static bool valid_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
            return false;
    return true;
}

static const char *kind_name(field_kind k)
{
    switch (k) {
    case F_INT: case F_SIZE: return "an integer";
    case F_NUM: return "a number";
    case F_BOOL: return "true or false";
    case F_STR: case F_NAME: return "a string";
    case F_ANY: return "a value";
    }
    return "?";
}

/* Checks obj against the table and stores each present field into base.
 * Fields with offset CALLER are only checked for presence; the caller reads
 * them itself. */
static mt_status apply(ctx *c, const cJSON *obj, const char *path, const field *fs, size_t nf,
                       void *base)
{
    char fp[512];
    if (!cJSON_IsObject(obj))
        return fail(c, path, "must be an object");
    for (const cJSON *it = obj->child; it; it = it->next) {
        for (const cJSON *jt = obj->child; jt != it; jt = jt->next)
            if (strcmp(jt->string, it->string) == 0)
                return fail(c, path, "duplicate key \"%s\"", it->string);
        size_t i;
        for (i = 0; i < nf; i++)
            if (strcmp(fs[i].key, it->string) == 0)
                break;
        if (i == nf)
            return fail(c, path, "unknown field \"%s\"", it->string);
    }
    for (size_t i = 0; i < nf; i++) {
        const field *f = &fs[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, f->key);
        pjoin(fp, sizeof fp, "%s%s%s", path, *path ? "." : "", f->key);
        if (!v) {
            if (f->required)
                return fail(c, fp, "required field is missing");
            continue;
        }
        if (f->offset == CALLER)
            continue;
        char *dst = (char *)base + f->offset;
        switch (f->kind) {
        case F_INT:
        case F_SIZE:
        case F_NUM: {
            if (!cJSON_IsNumber(v))
                return fail(c, fp, "must be %s", kind_name(f->kind));
            double d = v->valuedouble;
            if (f->kind != F_NUM && d != floor(d))
                return fail(c, fp, "must be an integer, got %g", d);
            if (!(d >= f->lo && d <= f->hi))
                return fail(c, fp, "%g is out of range [%g, %g]", d, f->lo, f->hi);
            if (f->kind == F_INT)
                *(int *)dst = (int)d;
            else if (f->kind == F_SIZE)
                *(size_t *)dst = (size_t)d;
            else
                *(double *)dst = d;
            break;
        }
        case F_BOOL:
            if (!cJSON_IsBool(v))
                return fail(c, fp, "must be true or false");
            *(bool *)dst = cJSON_IsTrue(v);
            break;
        case F_STR:
        case F_NAME:
            if (!cJSON_IsString(v))
                return fail(c, fp, "must be a string");
            if (strlen(v->valuestring) >= (size_t)f->hi)
                return fail(c, fp, "longer than %d characters", (int)f->hi - 1);
            if (f->kind == F_NAME && !valid_name(v->valuestring))
                return fail(c, fp, "\"%s\" is not a valid name (letters, digits, '-', '_', '.')",
                            v->valuestring);
            strcpy(dst, v->valuestring);
            break;
        case F_ANY:
            break;
        }
    }
    return MT_OK;
}

/* ========================================================================
 * schema
 * ====================================================================== */

static const field server_fields[] = {
    {"listen", F_STR, 0, 300, CALLER, false},
    {"http_threads", F_INT, 1, 256, OFF(cfg_config, http_threads), false},
    {"max_body_bytes", F_SIZE, 1024, 1 << 30, OFF(cfg_config, max_body_bytes), false},
    {"max_inputs", F_INT, 1, 1 << 20, OFF(cfg_config, max_inputs), false},
    {"engine_threads", F_INT, 0, 1024, OFF(cfg_config, engine_threads), false},
    {"request_timeout_ms", F_INT, 1, 3600 * 1000, OFF(cfg_config, request_timeout_ms), false},
    {"engine_workers", F_INT, 1, 64, OFF(cfg_config, engine_workers), false},
    {"max_json_depth", F_INT, 2, 1000, OFF(cfg_config, max_json_depth), false},
    {"max_input_bytes", F_INT, 16, 1 << 30, OFF(cfg_config, max_input_bytes), false},
    {"shutdown_grace_ms", F_INT, 0, 3600 * 1000, OFF(cfg_config, shutdown_grace_ms), false},
    {"drain_delay_ms", F_INT, 0, 3600 * 1000, OFF(cfg_config, drain_delay_ms), false},
    {"connection_limit", F_INT, 1, 1 << 20, OFF(cfg_config, connection_limit), false},
    {"connection_timeout_s", F_INT, 1, 86400, OFF(cfg_config, connection_timeout_s), false},
    {"log_level", F_STR, 0, 16, CALLER, false},
    {"api_keys_file", F_STR, 0, 1024, OFF(cfg_config, api_keys_file), false},
    {"tls_cert", F_STR, 0, 1024, OFF(cfg_config, tls_cert), false},
    {"tls_key", F_STR, 0, 1024, OFF(cfg_config, tls_key), false},
    {"watch", F_BOOL, 0, 0, OFF(cfg_config, watch), false},
    {"reload_debounce_ms", F_INT, 0, 60000, OFF(cfg_config, reload_debounce_ms), false},
};

static const field model_fields[] = {
    {"name", F_NAME, 0, CFG_NAME_MAX, OFF(cfg_model, name), true},
    {"path", F_STR, 0, 4096, CALLER, true},
    {"device", F_STR, 0, 16, CALLER, false},
    {"max_seq_len", F_INT, 2, 1 << 16, OFF(cfg_model, max_seq_len), false},
    {"truncate", F_BOOL, 0, 0, OFF(cfg_model, truncate), false},
    {"batching", F_ANY, 0, 0, CALLER, false},
    {"variants", F_ANY, 0, 0, CALLER, true},
    {"reference", F_ANY, 0, 0, CALLER, false},
};

static const field reference_fields[] = {
    {"variant", F_NAME, 0, CFG_NAME_MAX, CALLER, false},
    {"precision", F_STR, 0, 16, CALLER, false},
    {"calibration", F_STR, 0, 16, CALLER, false},
    {"percentile", F_NUM, 50, 100, CALLER, false},
    {"weights", F_STR, 0, 1024, CALLER, false},
    {"shadow_rate", F_NUM, 0, 1, OFF(cfg_model, shadow_rate), false},
    {"shadow_queue", F_INT, 1, 1 << 20, OFF(cfg_model, shadow_queue), false},
    {"drift_window", F_INT, 1, 1 << 20, OFF(cfg_model, drift_window), false},
};

static const field gate_fields[] = {
    {"probes", F_STR, 0, 1024, OFF(cfg_variant, gate_probes), true},
    {"min_cosine", F_NUM, -1, 1, OFF(cfg_variant, gate_min_cosine), true},
    {"max_p99_ratio", F_NUM, 0, 1e6, OFF(cfg_variant, gate_max_p99_ratio), false},
};

static const field batching_fields[] = {
    {"max_batch_size", F_INT, 1, 1 << 16, OFF(cfg_model, max_batch_size), false},
    {"max_batch_tokens", F_INT, 1, 1 << 24, OFF(cfg_model, max_batch_tokens), false},
    {"max_queue_delay_us", F_ANY, 0, 0, CALLER, false},
    {"latency_target_ms", F_INT, 1, 3600 * 1000, OFF(cfg_model, latency_target_ms), false},
    {"max_queue", F_INT, 1, 1 << 20, OFF(cfg_model, max_queue), false},
};

static const field variant_fields[] = {
    {"name", F_NAME, 0, CFG_NAME_MAX, OFF(cfg_variant, name), true},
    {"precision", F_STR, 0, 16, CALLER, true},
    {"calibration", F_STR, 0, 16, OFF(cfg_variant, calibration), false},
    {"percentile", F_NUM, 50, 100, OFF(cfg_variant, percentile), false},
    {"traffic", F_NUM, 0, 1e9, OFF(cfg_variant, traffic), false},
    {"weights", F_STR, 0, 1024, OFF(cfg_variant, weights), false},
    {"gate", F_ANY, 0, 0, CALLER, false},
    {"drift_floor", F_NUM, 0, 1, OFF(cfg_variant, drift_floor), false},
};

#define N(a) (sizeof(a) / sizeof *(a))

static mt_status parse_variant(ctx *c, const cJSON *jv, const char *path, cfg_variant *v)
{
    strcpy(v->calibration, "absmax");
    v->percentile = 99.99;
    v->traffic = 100;
    mt_status st = apply(c, jv, path, variant_fields, N(variant_fields), v);
    if (st != MT_OK)
        return st;
    char fp[512];
    const char *prec = cJSON_GetObjectItemCaseSensitive(jv, "precision")->valuestring;
    pjoin(fp, sizeof fp, "%s.precision", path);
    if (mt_precision_parse(prec, &v->precision) != 0)
        return fail(c, fp, "unknown precision \"%s\" (expected fp32, tf32, fp16, bf16, int8 or fp8)",
                    prec);
    pjoin(fp, sizeof fp, "%s.calibration", path);
    if (strcmp(v->calibration, "absmax") && strcmp(v->calibration, "percentile") &&
        strcmp(v->calibration, "mse"))
        return fail(c, fp, "unknown calibration \"%s\" (expected absmax, percentile or mse)",
                    v->calibration);
    if (cJSON_GetObjectItemCaseSensitive(jv, "percentile") && strcmp(v->calibration, "percentile"))
        return fail(c, fp, "\"percentile\" is set but calibration is \"%s\"", v->calibration);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(jv, "gate");
    if (g) {
        pjoin(fp, sizeof fp, "%s.gate", path);
        if ((st = apply(c, g, fp, gate_fields, N(gate_fields), v)) != MT_OK)
            return st;
        if (!v->gate_probes[0]) {
            pjoin(fp, sizeof fp, "%s.gate.probes", path);
            return fail(c, fp, "must name a file of probe texts");
        }
    }
    return MT_OK;
}

/* models[].reference: names a listed variant ("variant"), or describes one
 * ("precision" and its calibration/weights), which is added to the model's
 * variants as "reference" with traffic 0. */
static mt_status parse_reference(ctx *c, const cJSON *jr, const char *path, cfg_model *m)
{
    char fp[512];
    m->shadow_rate = 0;
    m->shadow_queue = 256;
    m->drift_window = 200;
    mt_status st = apply(c, jr, path, reference_fields, N(reference_fields), m);
    if (st != MT_OK)
        return st;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(jr, "variant");
    const cJSON *prec = cJSON_GetObjectItemCaseSensitive(jr, "precision");
    if (!!name == !!prec)
        return fail(c, path, "set either \"variant\" (a listed variant) or \"precision\" "
                             "(a variant made for the comparison), not %s",
                    name ? "both" : "neither");
    if (name && !cJSON_IsString(name)) {
        pjoin(fp, sizeof fp, "%s.variant", path);
        return fail(c, fp, "must be a string");
    }
    if (name) {
        for (int k = 0; k < m->nvariants; k++)
            if (!strcmp(m->variants[k].name, name->valuestring)) {
                m->reference = k;
                return MT_OK;
            }
        pjoin(fp, sizeof fp, "%s.variant", path);
        return fail(c, fp, "no variant named \"%s\" in this model", name->valuestring);
    }
    for (int k = 0; k < m->nvariants; k++)
        if (!strcmp(m->variants[k].name, "reference")) {
            pjoin(fp, sizeof fp, "%s.precision", path);
            return fail(c, fp, "a variant is already named \"reference\"; name it with "
                               "\"variant\" instead");
        }
    /* the made variant: parsed with the variant schema from these fields */
    cJSON *jv = cJSON_CreateObject();
    if (!jv)
        return mt_fail(c->err, MT_ENOMEM, "out of memory");
    static const char *const copy[] = {"precision", "calibration", "percentile", "weights"};
    bool ok = cJSON_AddStringToObject(jv, "name", "reference") != NULL;
    for (size_t i = 0; ok && i < N(copy); i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(jr, copy[i]);
        if (f)
            ok = cJSON_AddItemToObject(jv, copy[i], cJSON_Duplicate(f, 1));
    }
    ok = ok && cJSON_AddNumberToObject(jv, "traffic", 0) != NULL;
    cfg_variant *nv = realloc(m->variants, sizeof *nv * (size_t)(m->nvariants + 1));
    if (!ok || !nv) {
        cJSON_Delete(jv);
        return mt_fail(c->err, MT_ENOMEM, "out of memory");
    }
    m->variants = nv;
    memset(&nv[m->nvariants], 0, sizeof *nv);
    st = parse_variant(c, jv, path, &nv[m->nvariants]);
    cJSON_Delete(jv);
    if (st != MT_OK)
        return st;
    nv[m->nvariants].is_reference = true;
    m->reference = m->nvariants++;
    return MT_OK;
}

static mt_status parse_model(ctx *c, const cJSON *jm, const char *path, const cfg_config *cfg,
                             cfg_model *m)
{
    m->truncate = true;
    m->max_batch_size = 32;
    m->max_batch_tokens = 16384;
    m->max_queue_delay_us = 2000;
    m->max_queue = 1024;
    m->latency_target_ms = 100;
    mt_status st = apply(c, jm, path, model_fields, N(model_fields), m);
    if (st != MT_OK)
        return st;
    char fp[512];

    const cJSON *p = cJSON_GetObjectItemCaseSensitive(jm, "path");
    pjoin(fp, sizeof fp, "%s.path", path);
    if (!cJSON_IsString(p) || !*p->valuestring)
        return fail(c, fp, "must be a non-empty string");
    if (!(m->path = strdup(p->valuestring)))
        return mt_fail(c->err, MT_ENOMEM, "out of memory");

    const cJSON *d = cJSON_GetObjectItemCaseSensitive(jm, "device");
    pjoin(fp, sizeof fp, "%s.device", path);
    m->device = CFG_DEVICE_AUTO;
    if (d) {
        if (!cJSON_IsString(d))
            return fail(c, fp, "must be a string");
        if (!strcmp(d->valuestring, "cpu"))
            m->device = CFG_DEVICE_CPU;
        else if (!strcmp(d->valuestring, "cuda"))
            m->device = CFG_DEVICE_CUDA;
        else if (strcmp(d->valuestring, "auto"))
            return fail(c, fp, "unknown device \"%s\" (expected auto, cpu or cuda)", d->valuestring);
    }

    const cJSON *b = cJSON_GetObjectItemCaseSensitive(jm, "batching");
    if (b) {
        pjoin(fp, sizeof fp, "%s.batching", path);
        if ((st = apply(c, b, fp, batching_fields, N(batching_fields), m)) != MT_OK)
            return st;
        const cJSON *dl = cJSON_GetObjectItemCaseSensitive(b, "max_queue_delay_us");
        pjoin(fp, sizeof fp, "%s.batching.max_queue_delay_us", path);
        if (cJSON_IsString(dl) && !strcmp(dl->valuestring, "auto"))
            m->delay_auto = true;
        else if (dl && (!cJSON_IsNumber(dl) || dl->valuedouble != floor(dl->valuedouble) ||
                        dl->valuedouble < 0 || dl->valuedouble > 10e6))
            return fail(c, fp, "must be an integer in [0, 10000000] or \"auto\"");
        else if (dl)
            m->max_queue_delay_us = (int)dl->valuedouble;
    }

    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(jm, "variants");
    pjoin(fp, sizeof fp, "%s.variants", path);
    int nv = cJSON_GetArraySize(vs);
    if (!cJSON_IsArray(vs) || nv < 1)
        return fail(c, fp, "must be a non-empty array");
    if (nv > 64)
        return fail(c, fp, "at most 64 variants");
    if (!(m->variants = calloc((size_t)nv, sizeof *m->variants)))
        return mt_fail(c->err, MT_ENOMEM, "out of memory");
    m->nvariants = nv;
    double total = 0;
    int i = 0;
    const cJSON *jv;
    cJSON_ArrayForEach(jv, vs)
    {
        pjoin(fp, sizeof fp, "%s.variants[%d]", path, i);
        if ((st = parse_variant(c, jv, fp, &m->variants[i])) != MT_OK)
            return st;
        for (int k = 0; k < i; k++)
            if (!strcmp(m->variants[k].name, m->variants[i].name))
                return fail(c, fp, "duplicate variant name \"%s\"", m->variants[i].name);
        total += m->variants[i].traffic;
        i++;
    }
    if (total <= 0) {
        pjoin(fp, sizeof fp, "%s.variants", path);
        return fail(c, fp, "the traffic weights add up to 0: no variant would get requests");
    }
    m->reference = -1;
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(jm, "reference");
    if (jr) {
        pjoin(fp, sizeof fp, "%s.reference", path);
        if ((st = parse_reference(c, jr, fp, m)) != MT_OK)
            return st;
    }
    for (int k = 0; k < m->nvariants; k++) {
        const cfg_variant *v = &m->variants[k];
        if (m->reference < 0 && (v->gate_probes[0] || v->drift_floor > 0)) {
            pjoin(fp, sizeof fp, "%s.variants[%d].%s", path, k,
                  v->gate_probes[0] ? "gate" : "drift_floor");
            return fail(c, fp, "needs models[].reference to compare against");
        }
        if (k == m->reference && (v->gate_probes[0] || v->drift_floor > 0)) {
            pjoin(fp, sizeof fp, "%s.variants[%d]", path, k);
            return fail(c, fp, "the reference variant cannot have a gate or a drift_floor");
        }
    }
    (void)cfg;
    return MT_OK;
}

int cfg_parse_listen(const char *s, char *host, size_t hostcap, int *port)
{
    const char *colon;
    size_t hl;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return -1;
        hl = (size_t)(rb - s - 1);
        if (hl + 1 > hostcap)
            return -1;
        memcpy(host, s + 1, hl);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        hl = (size_t)(colon - s);
        if (hl + 1 > hostcap)
            return -1;
        memcpy(host, s, hl);
    }
    host[hl] = 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535)
        return -1;
    *port = (int)p;
    if (!host[0])
        strcpy(host, "0.0.0.0");
    return 0;
}

static const field top_fields[] = {
    {"server", F_ANY, 0, 0, CALLER, false},
    {"models", F_ANY, 0, 0, CALLER, true},
};

mt_status cfg_parse(const char *text, size_t len, const char *label, cfg_config **out,
                    mt_err *err)
{
    ctx c = {label, err};
    cfg_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    strcpy(cfg->listen_host, "0.0.0.0");
    cfg->listen_port = 8080;
    cfg->http_threads = 4;
    cfg->max_body_bytes = 4u << 20;
    cfg->max_inputs = 2048;
    cfg->request_timeout_ms = 60000;
    cfg->engine_workers = 1;
    cfg->max_json_depth = 64;
    cfg->max_input_bytes = 65536;
    cfg->shutdown_grace_ms = 30000;
    cfg->drain_delay_ms = 0;
    cfg->connection_limit = 1000;
    cfg->connection_timeout_s = 30;
    cfg->log_level = CFG_LOG_INFO;
    cfg->watch = true;
    cfg->reload_debounce_ms = 200;
    mt_status st = MT_OK;
    cJSON *root = NULL;

    if (!(cfg->source = strdup(label))) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto done;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end ? (size_t)(end - text) : 0;
        int line = 1;
        for (size_t i = 0; i < off && i < len; i++)
            line += text[i] == '\n';
        st = mt_fail(err, MT_EINVAL, "%s: line %d: invalid JSON", label, line);
        goto done;
    }
    if ((st = apply(&c, root, "", top_fields, N(top_fields), cfg)) != MT_OK)
        goto done;

    const cJSON *srv = cJSON_GetObjectItemCaseSensitive(root, "server");
    if (srv) {
        if ((st = apply(&c, srv, "server", server_fields, N(server_fields), cfg)) != MT_OK)
            goto done;
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(srv, "listen");
        if (l && (!cJSON_IsString(l) ||
                  cfg_parse_listen(l->valuestring, cfg->listen_host, sizeof cfg->listen_host,
                                   &cfg->listen_port) != 0)) {
            st = fail(&c, "server.listen", "must be \"host:port\" (e.g. \"0.0.0.0:8080\")");
            goto done;
        }
        const cJSON *lv = cJSON_GetObjectItemCaseSensitive(srv, "log_level");
        if (lv) {
            static const char *const levels[] = {"debug", "info", "warn", "error", "off"};
            int k = 0;
            while (cJSON_IsString(lv) && k < 5 && strcmp(levels[k], lv->valuestring))
                k++;
            if (!cJSON_IsString(lv) || k == 5) {
                st = fail(&c, "server.log_level",
                          "unknown level \"%s\" (expected debug, info, warn, error or off)",
                          cJSON_IsString(lv) ? lv->valuestring : "?");
                goto done;
            }
            cfg->log_level = k;
        }
        if (!*cfg->tls_cert != !*cfg->tls_key) {
            st = fail(&c, *cfg->tls_cert ? "server.tls_key" : "server.tls_cert",
                      "tls_cert and tls_key must be set together");
            goto done;
        }
    }

    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "models");
    int nm = cJSON_GetArraySize(ms);
    if (!cJSON_IsArray(ms) || nm < 1) {
        st = fail(&c, "models", "must be a non-empty array");
        goto done;
    }
    if (nm > CFG_MAX_MODELS) {
        st = fail(&c, "models", "at most %d models", CFG_MAX_MODELS);
        goto done;
    }
    if (!(cfg->models = calloc((size_t)nm, sizeof *cfg->models))) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto done;
    }
    cfg->nmodels = nm;
    int i = 0;
    const cJSON *jm;
    cJSON_ArrayForEach(jm, ms)
    {
        char fp[64];
        pjoin(fp, sizeof fp, "models[%d]", i);
        if ((st = parse_model(&c, jm, fp, cfg, &cfg->models[i])) != MT_OK)
            goto done;
        for (int k = 0; k < i; k++)
            if (!strcmp(cfg->models[k].name, cfg->models[i].name)) {
                st = fail(&c, fp, "duplicate model name \"%s\"", cfg->models[i].name);
                goto done;
            }
        i++;
    }

done:
    cJSON_Delete(root);
    if (st != MT_OK) {
        cfg_free(cfg);
        return st;
    }
    *out = cfg;
    return MT_OK;
}

mt_status cfg_load(const char *path, cfg_config **out, mt_err *err)
{
    char *text;
    size_t len;
    mt_status st = mt_read_file(path, 16u << 20, &text, &len, err);
    if (st != MT_OK)
        return st;
    st = cfg_parse(text, len, path, out, err);
    free(text);
    return st;
}

void cfg_free(cfg_config *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nmodels; i++) {
        free(c->models[i].path);
        free(c->models[i].variants);
    }
    free(c->models);
    free(c->source);
    free(c);
}

const cfg_model *cfg_find_model(const cfg_config *c, const char *name)
{
    for (int i = 0; i < c->nmodels; i++)
        if (!strcmp(c->models[i].name, name))
            return &c->models[i];
    return NULL;
}

/* ========================================================================
 * comparing and copying (the hot-switch's diff)
 * ====================================================================== */

bool cfg_variant_same_build(const cfg_variant *a, const cfg_variant *b)
{
    return a->precision == b->precision && !strcmp(a->calibration, b->calibration) &&
           a->percentile == b->percentile && !strcmp(a->weights, b->weights) &&
           !strcmp(a->gate_probes, b->gate_probes) && a->gate_min_cosine == b->gate_min_cosine &&
           a->gate_max_p99_ratio == b->gate_max_p99_ratio;
}

bool cfg_model_same_base(const cfg_model *a, const cfg_model *b)
{
    return !strcmp(a->path, b->path) && a->device == b->device &&
           a->max_seq_len == b->max_seq_len;
}

const cfg_variant *cfg_find_variant(const cfg_model *m, const char *name)
{
    for (int k = 0; k < m->nvariants; k++)
        if (!strcmp(m->variants[k].name, name))
            return &m->variants[k];
    return NULL;
}

mt_status cfg_model_copy(const cfg_model *m, cfg_model *out, mt_err *err)
{
    *out = *m;
    out->path = strdup(m->path);
    out->variants = malloc(sizeof *out->variants * (size_t)(m->nvariants ? m->nvariants : 1));
    if (!out->path || !out->variants) {
        cfg_model_clear(out);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    memcpy(out->variants, m->variants, sizeof *out->variants * (size_t)m->nvariants);
    return MT_OK;
}

void cfg_model_clear(cfg_model *m)
{
    free(m->path);
    free(m->variants);
    m->path = NULL;
    m->variants = NULL;
    m->nvariants = 0;
}
