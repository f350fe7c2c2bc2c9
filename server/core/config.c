/* config.c: load and validate mantissa.json (see config.h).
 *
 * Each JSON object of the schema is described by a table of fields (key,
 * kind, bounds, where it goes), so the whole schema reads in one place and
 * every object gets the same checks: known keys only, no duplicates, types
 * and bounds, with the field's full path in the message.
 */
#include "server/core/config.h"

#include <arpa/inet.h>
#include <cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonfile.h"
#include "engine/quant/mix.h"
#include "engine/registry.h"
#include "server/base/log.h"

/* ========================================================================
 * field tables
 * ====================================================================== */

typedef enum { F_INT, F_SIZE, F_NUM, F_BOOL, F_STR, F_NAME, F_ENUM, F_ANY } field_kind;

/* One key of a JSON object: its kind, bounds, default and where it goes.
 * F_STR with choices must be one of them (stored as the string); F_ENUM
 * must be one of them and stores its index as an int. */
typedef struct {
    const char *key;
    field_kind kind;
    double lo, hi;               /* bounds for numbers, max length + 1 for strings */
    size_t offset;               /* into the struct being filled; CALLER: the caller reads it */
    bool required;
    double def;                  /* default of a number, boolean or enum index */
    const char *sdef;            /* default of a string */
    const char *const *choices;  /* NULL-terminated */
    const char *what;            /* what the choices are ("device"), for messages */
} field;

#define OFF(type, member) offsetof(type, member)
#define CALLER ((size_t)-1)
#define N(a) (sizeof(a) / sizeof *(a))

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
    case F_STR: case F_NAME: case F_ENUM: return "a string";
    case F_ANY: return "a value";
    }
    return "?";
}

/* The index of s in choices, or -1. */
static int choice_index(const char *const *choices, const char *s)
{
    for (int i = 0; choices[i]; i++)
        if (!strcmp(choices[i], s))
            return i;
    return -1;
}

/* "unknown device "tpu" (expected auto, cpu or cuda)" */
static mt_status bad_choice(ctx *c, const char *fp, const field *f, const char *got)
{
    char list[256] = "";
    for (int i = 0; f->choices[i]; i++)
        pjoin(list + strlen(list), sizeof list - strlen(list), "%s%s",
              !i ? "" : f->choices[i + 1] ? ", " : " or ", f->choices[i]);
    return fail(c, fp, "unknown %s \"%s\" (expected %s)", f->what, got, list);
}

/* Writes each field's default into base. */
static void defaults(const field *fs, size_t nf, void *base)
{
    for (size_t i = 0; i < nf; i++) {
        const field *f = &fs[i];
        if (f->offset == CALLER)
            continue;
        char *dst = (char *)base + f->offset;
        switch (f->kind) {
        case F_INT: case F_ENUM: *(int *)dst = (int)f->def; break;
        case F_SIZE: *(size_t *)dst = (size_t)f->def; break;
        case F_NUM: *(double *)dst = f->def; break;
        case F_BOOL: *(bool *)dst = f->def != 0; break;
        case F_STR: case F_NAME: snprintf(dst, (size_t)f->hi, "%s", f->sdef ? f->sdef : ""); break;
        case F_ANY: break;
        }
    }
}

/* Stores one present value v of field f (path fp) into dst. */
static mt_status store(ctx *c, const field *f, const cJSON *v, const char *fp, char *dst)
{
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
        return MT_OK;
    }
    case F_BOOL:
        if (!cJSON_IsBool(v))
            return fail(c, fp, "must be true or false");
        *(bool *)dst = cJSON_IsTrue(v);
        return MT_OK;
    case F_STR:
    case F_NAME:
    case F_ENUM:
        if (!cJSON_IsString(v))
            return fail(c, fp, "must be a string");
        if (f->kind != F_ENUM && strlen(v->valuestring) >= (size_t)f->hi)
            return fail(c, fp, "longer than %d characters", (int)f->hi - 1);
        if (f->kind == F_NAME && !valid_name(v->valuestring))
            return fail(c, fp, "\"%s\" is not a valid name (letters, digits, '-', '_', '.')",
                        v->valuestring);
        if (f->choices && choice_index(f->choices, v->valuestring) < 0)
            return bad_choice(c, fp, f, v->valuestring);
        if (f->kind == F_ENUM)
            *(int *)dst = choice_index(f->choices, v->valuestring);
        else
            strcpy(dst, v->valuestring);
        return MT_OK;
    case F_ANY:
        return MT_OK;
    }
    return MT_OK;
}

/* Writes the defaults into base, checks obj against the table (an object;
 * known keys only, no duplicates, required ones present) and stores each
 * present field. Fields with offset CALLER are only checked for presence;
 * the caller reads them itself. */
static mt_status apply(ctx *c, const cJSON *obj, const char *path, const field *fs, size_t nf,
                       void *base)
{
    char fp[512];
    defaults(fs, nf, base);
    if (!cJSON_IsObject(obj))
        return fail(c, path, "must be an object");
    for (const cJSON *it = obj->child; it; it = it->next) {
        for (const cJSON *jt = obj->child; jt != it; jt = jt->next)
            if (strcmp(jt->string, it->string) == 0)
                return fail(c, path, "duplicate key \"%s\"", it->string);
        size_t i = 0;
        while (i < nf && strcmp(fs[i].key, it->string) != 0)
            i++;
        if (i == nf)
            return fail(c, path, "unknown field \"%s\"", it->string);
    }
    for (size_t i = 0; i < nf; i++) {
        const field *f = &fs[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, f->key);
        pjoin(fp, sizeof fp, "%s%s%s", path, *path ? "." : "", f->key);
        if (!v && f->required)
            return fail(c, fp, "required field is missing");
        mt_status st = v && f->offset != CALLER ? store(c, f, v, fp, (char *)base + f->offset)
                                                : MT_OK;
        if (st != MT_OK)
            return st;
    }
    return MT_OK;
}

/* ========================================================================
 * schema: every key, its bounds and its default
 * ====================================================================== */

/* field constructors: key, bounds, member, default */
#define INT(s, k, lo, hi, m, d) {k, F_INT, lo, hi, OFF(s, m), false, d, NULL, NULL, NULL}
#define NUM(s, k, lo, hi, m, d) {k, F_NUM, lo, hi, OFF(s, m), false, d, NULL, NULL, NULL}
#define BOOL(s, k, m, d) {k, F_BOOL, 0, 0, OFF(s, m), false, d, NULL, NULL, NULL}
#define STR(s, k, m, d) {k, F_STR, 0, sizeof(((s *)0)->m), OFF(s, m), false, 0, d, NULL, NULL}
#define ENUM(s, k, m, d, ch, what) {k, F_ENUM, 0, 0, OFF(s, m), false, d, NULL, ch, what}
#define LATER(k, kind, req) {k, kind, 0, 4096, CALLER, req, 0, NULL, NULL, NULL}

static const char *const log_levels[] = {"debug", "info", "warn", "error", "off", NULL};
static const char *const log_formats[] = {"text", "json", NULL}; /* LOG_TEXT, LOG_JSON */
static const char *const calibrations[] = {"absmax", "percentile", "mse", NULL};
/* mix "auto": the precision of the GEMMs the search lifts ("default": fp32
 * on the CPU, fp16 on a GPU) */
static const char *const mix_highs[] = {"default", "fp32", "fp16", "bf16", "int8g", NULL};

static const field server_fields[] = {
    LATER("listen", F_STR, false), /* "host:port": cfg_parse_listen */
    LATER("grpc_listen", F_STR, false), /* the same, for gRPC; absent or "": none */
    INT(cfg_config, "grpc_max_streams", 1, 1 << 20, grpc_max_streams, 100),
    /* unused since HTTP moved onto the scheduler's loop (one thread); still
     * read, so that files written for older versions load */
    INT(cfg_config, "http_threads", 1, 256, http_threads, 4),
    {"max_body_bytes", F_SIZE, 1024, 1 << 30, OFF(cfg_config, max_body_bytes), false, 4 << 20,
     NULL, NULL, NULL},
    INT(cfg_config, "max_inputs", 1, 1 << 20, max_inputs, 2048),
    INT(cfg_config, "engine_threads", 0, 1024, engine_threads, 0),
    INT(cfg_config, "request_timeout_ms", 1, 3600 * 1000, request_timeout_ms, 60000),
    INT(cfg_config, "engine_workers", 1, 64, engine_workers, 1),
    INT(cfg_config, "max_json_depth", 2, 1000, max_json_depth, 64),
    INT(cfg_config, "max_input_bytes", 16, 1 << 30, max_input_bytes, 65536),
    INT(cfg_config, "shutdown_grace_ms", 0, 3600 * 1000, shutdown_grace_ms, 30000),
    INT(cfg_config, "drain_delay_ms", 0, 3600 * 1000, drain_delay_ms, 0),
    INT(cfg_config, "connection_limit", 1, 1 << 20, connection_limit, 1000),
    INT(cfg_config, "probe_connections", 0, 1024, probe_connections, 8),
    INT(cfg_config, "max_connections_per_ip", 0, 1 << 20, max_connections_per_ip, 0),
    INT(cfg_config, "memory_budget_mb", 0, 1 << 24, memory_budget_mb, 0),
    INT(cfg_config, "connection_timeout_s", 1, 86400, connection_timeout_s, 30),
    ENUM(cfg_config, "log_level", log_level, LOG_INFO, log_levels, "level"),
    ENUM(cfg_config, "log_format", log_format, LOG_JSON, log_formats, "log format"),
    STR(cfg_config, "api_keys_file", api_keys_file, ""),
    STR(cfg_config, "tls_cert", tls_cert, ""),
    STR(cfg_config, "tls_key", tls_key, ""),
    BOOL(cfg_config, "watch", watch, true),
    INT(cfg_config, "reload_debounce_ms", 0, 60000, reload_debounce_ms, 200),
    LATER("cors_allow_origins", F_ANY, false), /* parse_cors */
    LATER("tracing", F_ANY, false),            /* parse_tracing */
};

static const field tracing_fields[] = {
    STR(cfg_tracing, "endpoint", endpoint, ""), /* "": off */
    NUM(cfg_tracing, "sample_ratio", 0, 1, sample_ratio, 1),
    STR(cfg_tracing, "service_name", service_name, "mantissa"),
    LATER("headers", F_ANY, false), /* cfg_tracing_headers */
    INT(cfg_tracing, "max_queue_spans", 16, 1 << 20, max_queue_spans, 2048),
    INT(cfg_tracing, "max_batch_spans", 8, 1 << 16, max_batch_spans, 512),
    INT(cfg_tracing, "batch_delay_ms", 1, 60000, batch_delay_ms, 1000),
    INT(cfg_tracing, "export_timeout_ms", 100, 600000, export_timeout_ms, 5000),
};

static const field model_fields[] = {
    {"name", F_NAME, 0, CFG_NAME_MAX, OFF(cfg_model, name), true, 0, "", NULL, NULL},
    LATER("path", F_STR, true), /* a non-empty string, kept as a pointer */
    ENUM(cfg_model, "device", device, CFG_DEVICE_AUTO, mt_device_choices, "device"),
    INT(cfg_model, "max_seq_len", 2, 1 << 16, max_seq_len, 0),
    BOOL(cfg_model, "truncate", truncate, true),
    STR(cfg_model, "prompt_name", prompt_name, ""),
    INT(cfg_model, "matryoshka_min_dim", 0, 1 << 16, matryoshka_min_dim, 0),
    LATER("batching", F_ANY, false),
    LATER("variants", F_ANY, true),
    LATER("reference", F_ANY, false),
};

static const field batching_fields[] = {
    INT(cfg_model, "max_batch_size", 1, 1 << 16, max_batch_size, 32),
    INT(cfg_model, "max_batch_tokens", 1, 1 << 24, max_batch_tokens, 16384),
    LATER("max_queue_delay_us", F_ANY, false), /* microseconds, or "auto" */
    INT(cfg_model, "latency_target_ms", 1, 3600 * 1000, latency_target_ms, 100),
    INT(cfg_model, "max_queue", 1, 1 << 20, max_queue, 1024),
};

static const field reference_fields[] = {
    LATER("variant", F_NAME, false),
    LATER("precision", F_STR, false),
    LATER("calibration", F_STR, false),
    LATER("percentile", F_NUM, false),
    LATER("weights", F_STR, false),
    NUM(cfg_model, "shadow_rate", 0, 1, shadow_rate, 0),
    INT(cfg_model, "shadow_queue", 1, 1 << 20, shadow_queue, 256),
    INT(cfg_model, "drift_window", 1, 1 << 20, drift_window, 200),
};

static const field variant_fields[] = {
    {"name", F_NAME, 0, CFG_NAME_MAX, OFF(cfg_variant, name), true, 0, "", NULL, NULL},
    LATER("precision", F_STR, true), /* mt_precision_parse */
    {"calibration", F_STR, 0, sizeof(((cfg_variant *)0)->calibration),
     OFF(cfg_variant, calibration), false, 0, "absmax", calibrations, "calibration"},
    NUM(cfg_variant, "percentile", 50, 100, percentile, 99.99),
    NUM(cfg_variant, "traffic", 0, 1e9, traffic, 100),
    STR(cfg_variant, "weights", weights, ""),
    STR(cfg_variant, "mix", mix, ""),
    NUM(cfg_variant, "budget_cos", 0.5, 1, budget_cos, 0.9995),
    {"mix_high", F_STR, 0, sizeof(((cfg_variant *)0)->mix_high), OFF(cfg_variant, mix_high), false,
     0, "default", mix_highs, "mix_high"},
    LATER("gate", F_ANY, false),
    NUM(cfg_variant, "drift_floor", 0, 1, drift_floor, 0),
    BOOL(cfg_variant, "measure", measure, false),
};

static const field gate_fields[] = {
    {"probes", F_STR, 0, sizeof(((cfg_variant *)0)->gate_probes), OFF(cfg_variant, gate_probes),
     true, 0, "", NULL, NULL},
    {"min_cosine", F_NUM, -1, 1, OFF(cfg_variant, gate_min_cosine), true, 0, NULL, NULL, NULL},
    NUM(cfg_variant, "max_p99_ratio", 0, 1e6, gate_max_p99_ratio, 0),
};

static const field top_fields[] = {
    LATER("server", F_ANY, false),
    LATER("models", F_ANY, true),
};

/* ========================================================================
 * the objects
 * ====================================================================== */

static mt_status parse_variant(ctx *c, const cJSON *jv, const char *path, cfg_variant *v)
{
    mt_status st = apply(c, jv, path, variant_fields, N(variant_fields), v);
    if (st != MT_OK)
        return st;
    char fp[512];
    const char *prec = cJSON_GetObjectItemCaseSensitive(jv, "precision")->valuestring;
    pjoin(fp, sizeof fp, "%s.precision", path);
    if (!prec || mt_precision_parse(prec, &v->precision) != 0)
        return fail(c, fp, "unknown precision \"%s\" (expected fp32, tf32, fp16, bf16, int8, fp8 "
                    "or int8g)", prec ? prec : "?");
    mt_mix mix;
    mt_err merr = {0};
    pjoin(fp, sizeof fp, "%s.mix", path);
    if (strcmp(v->mix, "auto") && mt_mix_parse(v->mix, &mix, &merr) != MT_OK)
        return fail(c, fp, "%s", merr.msg);
    if (!strcmp(v->mix, "auto") && v->weights[0])
        return fail(c, fp, "\"auto\" is chosen at load, but \"weights\" is a file quantized "
                    "with a fixed mix: give the mix that `mantissa quantize --auto` printed");
    pjoin(fp, sizeof fp, "%s.calibration", path);
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

/* The variant a reference object describes ("precision" and its
 * calibration/weights), added to m's variants as "reference", traffic 0. */
static mt_status add_reference_variant(ctx *c, const cJSON *jr, const char *path, cfg_model *m)
{
    char fp[512];
    for (int k = 0; k < m->nvariants; k++)
        if (!strcmp(m->variants[k].name, "reference")) {
            pjoin(fp, sizeof fp, "%s.precision", path);
            return fail(c, fp, "a variant is already named \"reference\"; name it with "
                               "\"variant\" instead");
        }
    /* parsed with the variant schema from these fields */
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
    mt_status st = parse_variant(c, jv, path, &nv[m->nvariants]);
    cJSON_Delete(jv);
    if (st != MT_OK)
        return st;
    nv[m->nvariants].is_reference = true;
    m->reference = m->nvariants++;
    return MT_OK;
}

/* models[].reference: names a listed variant ("variant"), or describes one
 * ("precision" and its calibration/weights), which is added to the model's
 * variants as "reference" with traffic 0. */
static mt_status parse_reference(ctx *c, const cJSON *jr, const char *path, cfg_model *m)
{
    char fp[512];
    mt_status st = apply(c, jr, path, reference_fields, N(reference_fields), m);
    if (st != MT_OK)
        return st;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(jr, "variant");
    const cJSON *prec = cJSON_GetObjectItemCaseSensitive(jr, "precision");
    if (!!name == !!prec)
        return fail(c, path, "set either \"variant\" (a listed variant) or \"precision\" "
                             "(a variant made for the comparison), not %s",
                    name ? "both" : "neither");
    if (!name)
        return add_reference_variant(c, jr, path, m);
    pjoin(fp, sizeof fp, "%s.variant", path);
    if (!cJSON_IsString(name))
        return fail(c, fp, "must be a string");
    for (int k = 0; k < m->nvariants; k++)
        if (!strcmp(m->variants[k].name, name->valuestring)) {
            m->reference = k;
            return MT_OK;
        }
    return fail(c, fp, "no variant named \"%s\" in this model", name->valuestring);
}

/* models[].batching (its defaults are written even when it is absent). */
static mt_status parse_batching(ctx *c, const cJSON *b, const char *path, cfg_model *m)
{
    char fp[512];
    mt_status st = apply(c, b ? b : &(cJSON){.type = cJSON_Object}, path, batching_fields,
                         N(batching_fields), m);
    /* the default is 0 (no wait: a batch goes as soon as a worker is free
     * and takes everything queued meanwhile, as Triton's and TEI's do). It
     * tied or beat "auto" at every load measured, by 6-17% at concurrency
     * 16 where auto's wait for a closed loop's burst left the worker idle
     * (bench/results/delay-ab-2026-11-26.md); "auto" beat a fixed 2 ms
     * (bench/results/auto-delay-2026-11-24.md), which cost a lone client
     * the whole wait */
    m->max_queue_delay_us = 0;
    m->delay_auto = false;
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(b, "max_queue_delay_us");
    pjoin(fp, sizeof fp, "%s.max_queue_delay_us", path);
    if (st != MT_OK || !dl)
        return st;
    m->delay_auto = false;
    if (cJSON_IsString(dl) && !strcmp(dl->valuestring, "auto"))
        m->delay_auto = true;
    else if (!cJSON_IsNumber(dl) || dl->valuedouble != floor(dl->valuedouble) ||
             dl->valuedouble < 0 || dl->valuedouble > 10e6)
        return fail(c, fp, "must be an integer in [0, 10000000] or \"auto\"");
    else
        m->max_queue_delay_us = (int)dl->valuedouble;
    return MT_OK;
}

/* models[].variants: at least one, names unique, some traffic. */
static mt_status parse_variants(ctx *c, const cJSON *vs, const char *path, cfg_model *m)
{
    char fp[512];
    int nv = cJSON_GetArraySize(vs);
    if (!cJSON_IsArray(vs) || nv < 1)
        return fail(c, path, "must be a non-empty array");
    if (nv > 64)
        return fail(c, path, "at most 64 variants");
    if (!(m->variants = calloc((size_t)nv, sizeof *m->variants)))
        return mt_fail(c->err, MT_ENOMEM, "out of memory");
    m->nvariants = nv;
    double total = 0;
    int i = 0;
    const cJSON *jv;
    cJSON_ArrayForEach(jv, vs)
    {
        pjoin(fp, sizeof fp, "%s[%d]", path, i);
        mt_status st = parse_variant(c, jv, fp, &m->variants[i]);
        if (st != MT_OK)
            return st;
        for (int k = 0; k < i; k++)
            if (!strcmp(m->variants[k].name, m->variants[i].name))
                return fail(c, fp, "duplicate variant name \"%s\"", m->variants[i].name);
        total += m->variants[i++].traffic;
    }
    if (total <= 0)
        return fail(c, path, "the traffic weights add up to 0: no variant would get requests");
    return MT_OK;
}

/* Gates and drift floors compare with the reference: there must be one,
 * and it cannot have them itself. */
static mt_status check_gates(ctx *c, const char *path, const cfg_model *m)
{
    char fp[512];
    for (int k = 0; k < m->nvariants; k++) {
        const cfg_variant *v = &m->variants[k];
        bool judged = v->gate_probes[0] || v->drift_floor > 0;
        if (m->reference < 0 && judged) {
            pjoin(fp, sizeof fp, "%s.variants[%d].%s", path, k,
                  v->gate_probes[0] ? "gate" : "drift_floor");
            return fail(c, fp, "needs models[].reference to compare against");
        }
        if (k == m->reference && judged) {
            pjoin(fp, sizeof fp, "%s.variants[%d]", path, k);
            return fail(c, fp, "the reference variant cannot have a gate or a drift_floor");
        }
    }
    return MT_OK;
}

static mt_status parse_model(ctx *c, const cJSON *jm, const char *path, cfg_model *m)
{
    char fp[512];
    /* the reference's defaults, written whether or not it is present */
    defaults(reference_fields, N(reference_fields), m);
    m->reference = -1;
    mt_status st = apply(c, jm, path, model_fields, N(model_fields), m);
    if (st != MT_OK)
        return st;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(jm, "path");
    pjoin(fp, sizeof fp, "%s.path", path);
    if (!cJSON_IsString(p) || !*p->valuestring)
        return fail(c, fp, "must be a non-empty string");
    if (!(m->path = strdup(p->valuestring)))
        return mt_fail(c->err, MT_ENOMEM, "out of memory");
    pjoin(fp, sizeof fp, "%s.batching", path);
    if ((st = parse_batching(c, cJSON_GetObjectItemCaseSensitive(jm, "batching"), fp, m)))
        return st;
    pjoin(fp, sizeof fp, "%s.variants", path);
    if ((st = parse_variants(c, cJSON_GetObjectItemCaseSensitive(jm, "variants"), fp, m)))
        return st;
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(jm, "reference");
    pjoin(fp, sizeof fp, "%s.reference", path);
    if (jr && (st = parse_reference(c, jr, fp, m)) != MT_OK)
        return st;
    return check_gates(c, path, m);
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
    if (!host[0])
        strcpy(host, "0.0.0.0");
    /* an address, not a name: the listener binds it as it is */
    unsigned char a[16];
    if (inet_pton(s[0] == '[' ? AF_INET6 : AF_INET, host, a) != 1)
        return -1;
    *port = (int)p;
    return 0;
}

int cfg_override_listen(cfg_config *c, const char *s)
{
    char host[sizeof c->listen_host];
    int port;
    if (cfg_parse_listen(s, host, sizeof host, &port) != 0)
        return -1;
    memcpy(c->listen_host, host, sizeof host);
    c->listen_port = port;
    c->listen_overridden = true;
    return 0;
}

int cfg_override_grpc_listen(cfg_config *c, const char *s)
{
    char host[sizeof c->grpc_host];
    int port = -1;
    if (strcmp(s, "off") && cfg_parse_listen(s, host, sizeof host, &port) != 0)
        return -1;
    if (port >= 0)
        memcpy(c->grpc_host, host, sizeof host);
    c->grpc_port = port;
    c->grpc_overridden = true;
    return 0;
}

int cfg_override_log_format(cfg_config *c, const char *s)
{
    int f = log_format_parse(s);
    if (f < 0)
        return -1;
    c->log_format = f;
    c->log_format_overridden = true;
    return 0;
}

/* server.cors_allow_origins: an array of origins as browsers send them
 * (scheme://host[:port], no path) or "*", kept space-separated. */
static mt_status parse_cors(ctx *c, const cJSON *a, cfg_config *cfg)
{
    const char *fp = "server.cors_allow_origins";
    char *d = cfg->cors_allow_origins;
    const size_t cap = sizeof cfg->cors_allow_origins;
    if (a && !cJSON_IsArray(a))
        return fail(c, fp, "must be an array of origins (\"https://app.example.com\") or [\"*\"]");
    int i = 0;
    for (const cJSON *o = a ? a->child : NULL; o; o = o->next, i++) {
        const char *s = cJSON_IsString(o) ? o->valuestring : "", *host = strstr(s, "://");
        if (strcmp(s, "*") && (!host || host == s || !host[3] || strchr(host + 3, '/') ||
                               strpbrk(s, " \t,")))
            return fail(c, fp, "[%d] must be \"*\" or an origin: scheme://host[:port], with no "
                        "path (\"https://app.example.com\")", i);
        if (strlen(d) + strlen(s) + 2 > cap)
            return fail(c, fp, "longer than %zu characters in all", cap - 2);
        snprintf(d + strlen(d), cap - strlen(d), "%s%s", *d ? " " : "", s);
    }
    return MT_OK;
}

/* server.tracing (its defaults are written even when it is absent; no
 * endpoint: off); config_tracing.c checks the URL and the headers. */
static mt_status parse_tracing(ctx *c, const cJSON *t, cfg_config *cfg)
{
    cfg_tracing *tr = &cfg->tracing;
    char why[320];
    mt_status st = apply(c, t ? t : &(cJSON){.type = cJSON_Object}, "server.tracing",
                         tracing_fields, N(tracing_fields), tr);
    if (st != MT_OK)
        return st;
    if (!cfg_tracing_endpoint(tr->endpoint, sizeof tr->endpoint, why, sizeof why))
        return fail(c, "server.tracing.endpoint", "%s", why);
    if (!tr->service_name[0])
        return fail(c, "server.tracing.service_name", "must not be empty");
    if (!cfg_tracing_headers(cJSON_GetObjectItemCaseSensitive(t, "headers"), tr->headers,
                             sizeof tr->headers, why, sizeof why))
        return fail(c, "server.tracing.headers", "%s", why);
    return MT_OK;
}

/* The "server" object (its defaults are written even when it is absent). */
static mt_status parse_server(ctx *c, const cJSON *srv, cfg_config *cfg)
{
    mt_status st = apply(c, srv ? srv : &(cJSON){.type = cJSON_Object}, "server", server_fields,
                         N(server_fields), cfg);
    if (st != MT_OK)
        return st;
    strcpy(cfg->listen_host, "0.0.0.0");
    cfg->listen_port = 8080;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(srv, "listen");
    if (l && (!cJSON_IsString(l) || cfg_parse_listen(l->valuestring, cfg->listen_host,
                                                     sizeof cfg->listen_host, &cfg->listen_port)))
        return fail(c, "server.listen",
                    "must be \"address:port\": an IPv4 or IPv6 address (not a host name) and a "
                    "port 0-65535 (e.g. \"0.0.0.0:8080\", \"[::1]:8080\")");
    cfg->grpc_port = -1;
    l = cJSON_GetObjectItemCaseSensitive(srv, "grpc_listen");
    if (l && (!cJSON_IsString(l) ||
              (*l->valuestring && cfg_parse_listen(l->valuestring, cfg->grpc_host,
                                                   sizeof cfg->grpc_host, &cfg->grpc_port))))
        return fail(c, "server.grpc_listen",
                    "must be \"address:port\" like server.listen (e.g. \"0.0.0.0:8001\"), or "
                    "\"\" for no gRPC");
    if (!*cfg->tls_cert != !*cfg->tls_key)
        return fail(c, *cfg->tls_cert ? "server.tls_key" : "server.tls_cert",
                    "tls_cert and tls_key must be set together");
    if ((st = parse_cors(c, cJSON_GetObjectItemCaseSensitive(srv, "cors_allow_origins"), cfg)))
        return st;
    return parse_tracing(c, cJSON_GetObjectItemCaseSensitive(srv, "tracing"), cfg);
}

/* The "models" array: at least one, names unique. */
static mt_status parse_models(ctx *c, const cJSON *ms, cfg_config *cfg)
{
    int nm = cJSON_GetArraySize(ms);
    if (!cJSON_IsArray(ms) || nm < 1)
        return fail(c, "models", "must be a non-empty array");
    if (nm > CFG_MAX_MODELS)
        return fail(c, "models", "at most %d models", CFG_MAX_MODELS);
    if (!(cfg->models = calloc((size_t)nm, sizeof *cfg->models)))
        return mt_fail(c->err, MT_ENOMEM, "out of memory");
    cfg->nmodels = nm;
    int i = 0;
    const cJSON *jm;
    cJSON_ArrayForEach(jm, ms)
    {
        char fp[64];
        pjoin(fp, sizeof fp, "models[%d]", i);
        mt_status st = parse_model(c, jm, fp, &cfg->models[i]);
        if (st != MT_OK)
            return st;
        for (int k = 0; k < i; k++)
            if (!strcmp(cfg->models[k].name, cfg->models[i].name))
                return fail(c, fp, "duplicate model name \"%s\"", cfg->models[i].name);
        i++;
    }
    return MT_OK;
}

mt_status cfg_parse(const char *text, size_t len, const char *label, cfg_config **out,
                    mt_err *err)
{
    ctx c = {label, err};
    cfg_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    mt_status st = MT_OK;
    cJSON *root = NULL;
    if (!(cfg->source = strdup(label))) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
    } else if (mt_json_parse(text, len, label, true, &root, err) != MT_OK) {
        st = MT_EINVAL; /* the message names the line, column and why */
    } else if ((st = apply(&c, root, "", top_fields, N(top_fields), cfg)) == MT_OK &&
               (st = parse_server(&c, cJSON_GetObjectItemCaseSensitive(root, "server"), cfg)) ==
                   MT_OK) {
        st = parse_models(&c, cJSON_GetObjectItemCaseSensitive(root, "models"), cfg);
    }
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
