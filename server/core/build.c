/* build.c: making a build of a variant: load (and quantize) its model on
 * the right backend, the load check (its vectors of the built-in probe
 * texts against FP32's, engine/model.h), the checksum of its weights file
 * and its embedding space id, and its promotion gate against the
 * reference (probes, cosine, p99 latency); its references and its end,
 * and the memory the serving builds hold (the budget). See models.h for
 * what a build is. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/jsonfile.h"
#include "engine/metrics.h"
#include "engine/quant/mix_search.h"
#include "engine/weights/safetensors.h"
#include "server/base/log.h"
#include "server/core/models.h"

/* Monotonic seconds, for build and probe timings. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ========================================================================
 * the weights checksum (part of the embedding space id)
 * ====================================================================== */

typedef struct {
    char *path;
    off_t size;
    struct timespec mtime;
    ino_t ino;
    char hex[17];
} sum_entry;

static pthread_mutex_t sum_mu = PTHREAD_MUTEX_INITIALIZER;
static sum_entry sum_cache[32];
static int sum_n;

/* FNV-1a over the file's bytes, eight interleaved lanes folded at the end
 * so that it runs at memory speed instead of one multiply per byte; the
 * result only has to change when the bytes do. */
static mt_status fnv_file(const char *path, uint64_t *out, mt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(errno));
    const uint64_t prime = 0x100000001b3ull;
    uint64_t lane[8];
    for (int i = 0; i < 8; i++)
        lane[i] = 0xcbf29ce484222325ull ^ (uint64_t)i;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    size_t n, total = 0;
    while ((n = fread(buf, 1, CHUNK, f)) > 0) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++)
                lane[l] = (lane[l] ^ buf[i + l]) * prime;
        for (; i < n; i++)
            lane[0] = (lane[0] ^ buf[i]) * prime;
        total += n;
    }
    bool bad = ferror(f);
    free(buf);
    fclose(f);
    if (bad)
        return mt_fail(err, MT_EIO, "%s: read error", path);
    uint64_t h = 0xcbf29ce484222325ull ^ total;
    for (int l = 0; l < 8; l++)
        for (int b = 0; b < 8; b++)
            h = (h ^ ((lane[l] >> (8 * b)) & 0xff)) * prime;
    *out = h;
    return MT_OK;
}

mt_status srv_file_checksum(const char *path, char out[17], mt_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return mt_fail(err, MT_EIO, "%s: %s", path, strerror(errno));
    pthread_mutex_lock(&sum_mu);
    for (int i = 0; i < sum_n; i++) {
        sum_entry *e = &sum_cache[i];
        if (!strcmp(e->path, path) && e->size == st.st_size && e->ino == st.st_ino &&
            e->mtime.tv_sec == st.st_mtim.tv_sec && e->mtime.tv_nsec == st.st_mtim.tv_nsec) {
            memcpy(out, e->hex, 17);
            pthread_mutex_unlock(&sum_mu);
            return MT_OK;
        }
    }
    pthread_mutex_unlock(&sum_mu);
    uint64_t h = 0;
    mt_status s = fnv_file(path, &h, err);
    if (s != MT_OK)
        return s;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    char *p = strdup(path);
    if (!p)
        return MT_OK; /* not cached: computed again next time */
    pthread_mutex_lock(&sum_mu);
    int slot = -1;
    for (int i = 0; i < sum_n && slot < 0; i++)
        if (!strcmp(sum_cache[i].path, path))
            slot = i;
    if (slot < 0)
        slot = sum_n < (int)(sizeof sum_cache / sizeof *sum_cache) ? sum_n++ : 0;
    free(sum_cache[slot].path);
    sum_cache[slot] = (sum_entry){p, st.st_size, st.st_mtim, st.st_ino, ""};
    memcpy(sum_cache[slot].hex, out, 17);
    pthread_mutex_unlock(&sum_mu);
    return MT_OK;
}

/* ========================================================================
 * a build's references and end, the memory its builds hold
 * ====================================================================== */

void srv_variant_ref(srv_variant *v)
{
    atomic_fetch_add(&v->refs, 1);
}

/* The end of a build: its weights go back to the backend. */
static void build_free(srv_variant *v)
{
    atomic_fetch_sub(v->alive, 1);
    mt_model_free(v->model);
    pthread_mutex_destroy(&v->lock);
    stats_drift_destroy(&v->drift);
    free(v);
}

void srv_variant_unref(srv_variant *v)
{
    if (v && atomic_fetch_sub(&v->refs, 1) == 1)
        build_free(v);
}

const char *srv_variant_isa(const srv_variant *v)
{
    const char *s = v->be->ops->isa ? v->be->ops->isa(v->be) : NULL;
    return s ? s : "?";
}

const char *srv_variant_kernel(const srv_variant *v)
{
    const char *s =
        v->be->ops->gemm_kernel ? v->be->ops->gemm_kernel(v->be, v->cfg.precision) : NULL;
    return s ? s : "?";
}

/* Walks the models and slots (models.h) itself: models.c makes builds with
 * srv_build, so build.c calls nothing of models.c. */
size_t srv_resident_bytes(srv_models *s, srv_model *only, const srv_model *skip_m,
                          const char *skip)
{
    size_t total = 0;
    const int n = atomic_load(&s->nmodels);
    for (int i = 0; i < n; i++) {
        srv_model *m = s->models[i];
        if (only && m != only)
            continue;
        pthread_mutex_lock(&m->lock);
        for (int k = 0; k < m->nslots; k++) {
            const srv_slot *sl = m->slots[k];
            if (sl->cur && !(m == skip_m && skip && !strcmp(sl->name, skip)))
                total += sl->cur->model->info.resident_bytes;
        }
        pthread_mutex_unlock(&m->lock);
    }
    return total;
}

/* ========================================================================
 * builds
 * ====================================================================== */

uint64_t srv_model_base(const cfg_model *mc)
{
    char key[4200];
    snprintf(key, sizeof key, "%s#%d", mc->path, mc->max_seq_len);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h ? h : 1;
}

/* The embedding space id: what a stored vector must match to be compared
 * with a new one: the model, the precision and calibration its GEMM
 * weights were made with, the mix over them when there is one (a 32-bit
 * FNV-1a of its rules: two mixes of one file give different vectors), and
 * the checksum of the weights file. */
static void space_id(srv_variant *v, const char *model)
{
    const char *mix = v->model->info.mix;
    char mixpart[24] = "";
    if (mix && *mix) {
        uint32_t h = 0x811c9dc5u;
        for (const char *p = mix; *p; p++)
            h = (h ^ (unsigned char)*p) * 0x01000193u;
        snprintf(mixpart, sizeof mixpart, "-mix%08x", h);
    }
    char calib[32] = "none";
    if (mt_prec(v->cfg.precision)->has_scales) {
        if (!strcmp(v->cfg.calibration, "percentile"))
            snprintf(calib, sizeof calib, "percentile%g", v->cfg.percentile);
        else
            snprintf(calib, sizeof calib, "%s", v->cfg.calibration);
    }
    snprintf(v->space, sizeof v->space, "%s/%s-%s%s/fnv1a64-%s", model,
             mt_precision_name(v->cfg.precision), calib, mixpart, v->checksum);
}

/* qsort order for the probe latencies. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The 99th percentile of n latencies (sorts them). */
static double p99_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    int i = (int)ceil(0.99 * n) - 1;
    return t[i < 0 ? 0 : i];
}

/* The probe texts of a gate file, one per line (blank lines and lines
 * starting with '#' skipped), cut out of text in place into probes
 * (capacity: text's line count + 1). Returns how many. */
static int split_probes(char *text, char **probes)
{
    int n = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r')
            line[--l] = 0;
        if (l && line[0] != '#')
            probes[n++] = line;
    }
    return n;
}

/* Sets g->passed and g->why from its figures and the variant's gate. */
static void judge_gate(srv_gate *g, const cfg_variant *vc)
{
    double ratio = g->ref_p99_ms > 0 ? g->p99_ms / g->ref_p99_ms : 0;
    g->passed = true;
    if (g->mean_cosine < vc->gate_min_cosine) {
        g->passed = false;
        snprintf(g->why, sizeof g->why,
                 "mean cosine to the reference %.6f is under gate.min_cosine %.6f (%d probes)",
                 g->mean_cosine, vc->gate_min_cosine, g->probes);
    } else if (vc->gate_max_p99_ratio > 0 && ratio > vc->gate_max_p99_ratio) {
        g->passed = false;
        snprintf(g->why, sizeof g->why,
                 "p99 latency %.2f ms is %.2fx the reference's %.2f ms, over gate.max_p99_ratio %g",
                 g->p99_ms, ratio, g->ref_p99_ms, vc->gate_max_p99_ratio);
    }
}

mt_status srv_run_gate(srv_variant *v, srv_variant *ref, mt_err *err)
{
    srv_gate *g = &v->gate;
    memset(g, 0, sizeof *g);
    if (!ref) {
        snprintf(g->why, sizeof g->why, "no reference build is serving to compare with");
        return MT_OK;
    }
    char *text;
    size_t len;
    mt_status st = mt_read_file(v->cfg.gate_probes, 16u << 20, &text, &len, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "gate.probes: ");
    int cap = 1;
    for (size_t i = 0; i < len; i++)
        cap += text[i] == '\n';
    char **probes = malloc(sizeof *probes * (size_t)cap);
    const int h = v->hidden;
    float *a = malloc(sizeof(float) * (size_t)h), *b = malloc(sizeof(float) * (size_t)h);
    double *ta = malloc(sizeof(double) * (size_t)cap), *tb = malloc(sizeof(double) * (size_t)cap);
    int n = probes ? split_probes(text, probes) : 0;
    if (!probes || !a || !b || !ta || !tb) {
        st = mt_fail(err, MT_ENOMEM, "out of memory");
        goto done;
    }
    if (n == 0) {
        st = mt_fail(err, MT_EINVAL, "gate.probes: %s has no probe texts", v->cfg.gate_probes);
        goto done;
    }
    double sum = 0, min = 2;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(probes[i]);
        const char *p = probes[i];
        /* interleaved, so that both see the same machine load */
        double t0 = mono_s();
        st = mt_model_embed_texts(v->model, &p, &l, 1, a, NULL, err);
        double t1 = mono_s();
        if (st == MT_OK)
            st = mt_model_embed_texts(ref->model, &p, &l, 1, b, NULL, err);
        double t2 = mono_s();
        if (st != MT_OK) {
            mt_prefix(err, st, "gate: probe %d: ", i + 1);
            goto done;
        }
        ta[i] = (t1 - t0) * 1e3;
        tb[i] = (t2 - t1) * 1e3;
        double c = mt_cosine(a, b, h);
        sum += c;
        if (c < min)
            min = c;
    }
    g->ran = true;
    g->probes = n;
    g->mean_cosine = sum / n;
    g->min_cosine = min;
    g->p99_ms = p99_of(ta, n);
    g->ref_p99_ms = p99_of(tb, n);
    judge_gate(g, &v->cfg);
done:
    free(text);
    free(probes);
    free(a);
    free(b);
    free(ta);
    free(tb);
    return st;
}

/* What a build freed (the FP32 copies of a BF16 checkpoint's tensors, the
 * load check's FP32 reference layers: together more than the build keeps)
 * back to the system: glibc keeps freed heap memory in the process (blocks
 * under its mmap threshold, which a freed large block raises to 32 MiB, so
 * a model's per-layer weights), and a process that loaded a 1.4 GiB model
 * otherwise stays at 3.8 GiB (bench/results/qwen3-load-2026-11-29.md). */
static void release_freed_memory(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* ========================================================================
 * the load check (engine/model.h)
 * ====================================================================== */

/* FP32's vectors of the probe texts for model mc into m's cache: made on
 * the CPU from the folder's FP32 weights once per model path and token
 * cap, then kept; streamed a layer at a time (engine/model.h's
 * mt_model_reference_probes), so no whole FP32 model is ever resident.
 * Called with m->probe_lock held. */
static mt_status probe_reference(srv_models *s, srv_model *m, const cfg_model *mc, mt_err *err)
{
    char key[sizeof m->probe_key];
    snprintf(key, sizeof key, "%s#%d", mc->path, mc->max_seq_len);
    if (m->probe_ref && !strcmp(key, m->probe_key))
        return MT_OK;
    float *vec = NULL;
    int h = 0;
    mt_status st = mt_model_reference_probes(mc->path, s->devices[0].be, mc->max_seq_len, &vec,
                                             &h, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "its FP32 reference: ");
    free(m->probe_ref);
    m->probe_ref = vec;
    m->probe_hidden = h;
    snprintf(m->probe_key, sizeof m->probe_key, "%s", key);
    return MT_OK;
}

/* A variant whose GEMMs are not all FP32 will be load-checked: its model's
 * reference is made before the variant loads, when only the reference's
 * one FP32 layer and hidden states are resident, not beside the new build
 * (the process's peak). Best effort: a reference that fails here is made
 * again, and its error reported, by the load check itself. */
static void probe_reference_first(srv_models *s, srv_model *m, const cfg_model *mc,
                                  const cfg_variant *vc)
{
    if (vc->precision == MT_PREC_FP32 && !vc->mix[0])
        return;
    mt_err err = {0};
    pthread_mutex_lock(&m->probe_lock);
    if (probe_reference(s, m, mc, &err) != MT_OK)
        log_msg(LOG_DEBUG, "model %s: its load check's reference, made before variant %s: %s",
                mc->name, vc->name, err.msg);
    pthread_mutex_unlock(&m->probe_lock);
    release_freed_memory();
}

/* The load check of build v: when some of its GEMMs are not FP32, its
 * vectors of the probe texts against FP32's (v->check), which must keep
 * its precisions' bounds (v->check_bound), or the build is refused with
 * the figures and what computed them. */
static mt_status load_check(srv_models *s, srv_model *m, const cfg_model *mc, srv_variant *v,
                            mt_err *err)
{
    if (!mt_model_drift_bound(v->model, &v->check_bound))
        return MT_OK;
    const int n = mt_probe_count(), h = v->hidden;
    float *mine = malloc(sizeof(float) * (size_t)n * h);
    if (!mine)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    mt_status st = mt_model_embed_probes(v->model, mine, err);
    pthread_mutex_lock(&m->probe_lock);
    if (st == MT_OK)
        st = probe_reference(s, m, mc, err);
    if (st == MT_OK && m->probe_hidden != h)
        st = mt_fail(err, MT_EINTERNAL, "its FP32 reference has %d dimensions, it %d",
                     m->probe_hidden, h);
    if (st == MT_OK)
        v->check = mt_drift_between(mine, m->probe_ref, n, h);
    pthread_mutex_unlock(&m->probe_lock);
    free(mine);
    if (st != MT_OK)
        return mt_prefix(err, st, "the load check: ");
    if (v->check.mean_cos >= v->check_bound.mean_cos && v->check.min_cos >= v->check_bound.min_cos)
        return MT_OK;
    const char *kern = v->be->ops->gemm_kernel
                           ? v->be->ops->gemm_kernel(v->be, v->cfg.precision) : NULL;
    return mt_fail(err, MT_EUNSUPPORTED,
                   "refused by the load check: on %d built-in probe texts its vectors' cosine "
                   "to FP32's is %.6f on average (%s needs %.4f) and %.6f at least (needs "
                   "%.4f); its %s GEMMs ran on the %s backend at ISA %s with kernel %s",
                   n, v->check.mean_cos, mt_precision_name(v->cfg.precision),
                   v->check_bound.mean_cos, v->check.min_cos, v->check_bound.min_cos,
                   mt_precision_name(v->cfg.precision), v->be->device,
                   v->be->ops->isa ? v->be->ops->isa(v->be) : "?", kern ? kern : "?");
}

/* The mix search's progress lines, logged at debug level. */
static void mix_progress(void *arg, const char *line)
{
    (void)arg;
    log_msg(LOG_DEBUG, "mix auto: %s", line);
}

/* The memory budget: the new build of vc and every build that will still
 * serve beside it (not the one it replaces). */
static mt_status check_budget(srv_models *s, srv_model *m, const cfg_variant *vc,
                              const mt_model *model, mt_err *err)
{
    if (!s->memory_budget)
        return MT_OK;
    const size_t mine = model->info.resident_bytes;
    const size_t others = srv_resident_bytes(s, NULL, m, vc->name);
    if (mine + others <= s->memory_budget)
        return MT_OK;
    return mt_fail(err, MT_ELIMIT,
                   "model %s, variant %s: over the memory budget: it holds %.1f MiB and the "
                   "builds serving beside it %.1f MiB, %.1f MiB in all, over "
                   "server.memory_budget_mb %zu",
                   m->name, vc->name, mine / 1048576.0, others / 1048576.0,
                   (mine + others) / 1048576.0, s->memory_budget >> 20);
}

/* Whether row reg has GEMM kernels for the variant's precisions. */
static bool has_kernels(const mt_backend_reg *reg, const cfg_variant *vc)
{
    const mt_precision high = cfg_variant_mix_high(vc);
    return reg->supports(vc->precision, MT_OP_GEMM_WEIGHT) &&
           (!vc->mix[0] || high == MT_PREC_COUNT || reg->supports(high, MT_OP_GEMM_WEIGHT));
}

/* The backend a variant builds on: the device its model names (NULL when
 * that one is not here); for "auto" the first other device than the host's
 * with kernels for the variant's precisions, else the host's (int8g is
 * CPU-only: "auto" builds it on the CPU and says so, "cuda" fails its load
 * naming the precision). */
static mt_backend *pick_backend(srv_models *s, const cfg_model *mc, const cfg_variant *vc)
{
    const mt_backend_reg *want = mt_device_choice_reg(mc->device);
    for (int i = 0; want && i < s->ndevices; i++)
        if (s->devices[i].reg == want)
            return s->devices[i].be;
    if (want)
        return NULL;
    for (int i = 1; i < s->ndevices; i++) {
        const mt_backend_reg *reg = s->devices[i].reg;
        if (has_kernels(reg, vc))
            return s->devices[i].be;
        log_msg(LOG_INFO, "model %s, variant %s: %s has no %s kernel: built on the %s", mc->name,
                vc->name, mt_precision_name(vc->precision), reg->label, s->devices[0].reg->label);
    }
    return s->devices[0].be;
}

/* Why the device model mc names is not here. */
static mt_status no_device(const cfg_model *mc, const cfg_variant *vc, mt_err *err)
{
    const mt_backend_reg *want = mt_device_choice_reg(mc->device);
    char why[256];
    if (want->probe(why, sizeof why) > 0)
        snprintf(why, sizeof why, "a %s device was found but the backend failed on it",
                 want->label);
    return mt_fail(err, MT_EUNSUPPORTED,
                   "model %s, variant %s: device \"%s\" asked for, but no %s device is "
                   "usable here (%s)",
                   mc->name, vc->name, want->name, want->label, why);
}

/* The prompt v puts before inputs that name none (the config's
 * prompt_name, else the model's default_prompt_name) and the shortest
 * vectors it may give; a prompt_name the model lacks, or a
 * matryoshka_min_dim past its width, is refused naming the field. */
static mt_status pick_prompt(const cfg_model *mc, srv_variant *v, mt_err *err)
{
    const mt_model_info *in = &v->model->info;
    const char *name = mc->prompt_name[0] ? mc->prompt_name : in->default_prompt;
    v->prompt = mt_model_prompt(in, name);
    v->min_dims = mc->matryoshka_min_dim;
    if (name && !v->prompt)
        return mt_fail(err, MT_EINVAL, "field 'prompt_name': \"%s\" is not one of the model's "
                       "prompts (config_sentence_transformers.json; it has %d)", name,
                       in->nprompts);
    if (v->prompt && !in->prompt_pooled)
        return mt_fail(err, MT_EUNSUPPORTED, "field 'prompt_name': the model pools without its "
                       "prompt (include_prompt false), which is not supported");
    if (v->min_dims > v->hidden)
        return mt_fail(err, MT_EINVAL, "field 'matryoshka_min_dim' %d is past the model's %d "
                       "dimensions", v->min_dims, v->hidden);
    return MT_OK;
}

/* The variant's model (its mix resolved first) on v->be; for "auto" on
 * another device than the host's, a model that backend cannot run (an op
 * its architecture needs that the backend lacks: MT_EUNSUPPORTED) is built
 * on the host's instead, and the log says why. */
static mt_status load_on(srv_models *s, const cfg_model *mc, const cfg_variant *vc,
                         mt_model_opts *o, srv_variant *v, mt_err *err)
{
    char mix[sizeof vc->mix];
    mt_status st = mt_mix_resolve(mc->path, v->be, mt_model_load, o, vc->mix, vc->budget_cos,
                                  cfg_variant_mix_high(vc), mix_progress, v, mix, sizeof mix,
                                  err);
    o->mix = mix;
    if (st == MT_OK && !strcmp(vc->mix, "auto"))
        log_msg(LOG_INFO, "model %s, variant %s: mix \"auto\" chose \"%s\"", mc->name,
                vc->name, mix);
    if (st == MT_OK)
        st = mt_model_load(mc->path, v->be, o, &v->model, err);
    if (st == MT_EUNSUPPORTED && !mt_device_choice_reg(mc->device) && v->be != s->devices[0].be) {
        log_msg(LOG_INFO, "model %s, variant %s: %s: built on the %s", mc->name, vc->name,
                err->msg, s->devices[0].reg->label);
        v->be = s->devices[0].be;
        return load_on(s, mc, vc, o, v, err);
    }
    o->mix = NULL; /* mix was this frame's */
    return st;
}

mt_status srv_build(srv_models *s, srv_model *m, const cfg_model *mc, const cfg_variant *vc,
                    srv_variant *ref, srv_variant **out, mt_err *err)
{
    mt_backend *be = pick_backend(s, mc, vc);
    if (!be)
        return no_device(mc, vc, err);
    srv_variant *v = calloc(1, sizeof *v);
    if (!v)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    atomic_init(&v->refs, 1);
    v->m = m;
    v->be = be;
    v->cfg = *vc;
    v->base = srv_model_base(mc);
    mt_model_opts o = {.precision = vc->precision,
                        .calib = {MT_CALIB_ABSMAX, vc->percentile},
                        .max_seq_len = mc->max_seq_len,
                        .weights = vc->weights};
    mt_calib_parse(vc->calibration, &o.calib.method);
    double t0 = mono_s();
    probe_reference_first(s, m, mc, vc);
    mt_status st = load_on(s, mc, vc, &o, v, err);
    if (st != MT_OK) {
        free(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    if (!vc->mix[0] && v->model->info.mix && v->model->info.mix[0])
        log_msg(LOG_INFO, "model %s, variant %s: mix \"%s\", as %s records it", mc->name,
                vc->name, v->model->info.mix, vc->weights);
    v->build_s = mono_s() - t0;
    if ((st = check_budget(s, m, vc, v->model, err)) != MT_OK) {
        mt_model_free(v->model);
        free(v);
        return st;
    }
    v->hidden = v->model->info.hidden;
    v->nlabels = v->model->info.nlabels;
    const mt_model_info *mi = &v->model->info;
    v->outputs_width = mi->sparse || mi->colbert_dim ? mt_outputs_width(mi) : 0;
    v->max_seq_len = v->model->info.max_seq_len;
    if ((st = pick_prompt(mc, v, err)) != MT_OK) {
        mt_model_free(v->model);
        free(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    pthread_mutex_init(&v->lock, NULL);
    stats_drift_init(&v->drift);
    v->alive = &s->builds_alive;
    atomic_fetch_add(&s->builds_alive, 1);

    char wpath[4200];
    if (vc->weights[0])
        snprintf(wpath, sizeof wpath, "%s", vc->weights);
    else
        st_model_path(mc->path, wpath, sizeof wpath); /* a sharded one's index */
    if ((st = srv_file_checksum(wpath, v->checksum, err)) != MT_OK) {
        srv_variant_unref(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    release_freed_memory(); /* the load's copies, before the check's reference runs */
    if ((st = load_check(s, m, mc, v, err)) != MT_OK) {
        srv_variant_unref(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    space_id(v, mc->name);
    srv_measure_team(v);
    release_freed_memory();
    v->build_s = mono_s() - t0;
    if (vc->gate_probes[0] && (st = srv_run_gate(v, ref, err)) != MT_OK) {
        srv_variant_unref(v);
        return mt_prefix(err, st, "model %s, variant %s: ", mc->name, vc->name);
    }
    *out = v;
    return MT_OK;
}

