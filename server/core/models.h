/* models.h: the models a server holds, their variants, and the choice of
 * variant for each request; built so that a config reload can swap a
 * variant while requests are running on the old one.
 *
 * Three kinds of object:
 *   - srv_model: one per model name, created once and kept until the
 *     server stops (an unloaded model stays, marked so), so a pointer to
 *     one never dangles. Its lock guards its slots and settings.
 *   - srv_slot: one per variant name of a model, also kept until the
 *     server stops: it carries what the config asks for (want), the state
 *     an operator sees (loading, ready, failed, gate_failed, demoted), the
 *     request counters of that name (so /metrics counters survive a
 *     rebuild), and the build now serving the name (cur).
 *   - srv_variant: one build of a variant: weights loaded in one
 *     precision, immutable once made, refcounted. The slot holds one
 *     reference while the build serves; every request that was routed to
 *     it holds one until its response is written; every batch on an
 *     engine worker and the scheduler's queue for it hold one. A swap
 *     replaces slot->cur under the model's lock and drops the slot's
 *     reference; the build is freed when its last request completes.
 *
 * Routing (srv_acquire): a pin (model@variant or X-Mantissa-Variant) wins;
 * else a route key (X-Mantissa-Route-Key or the OpenAI "user") picks by
 * weighted rendezvous hashing, so one key keeps its variant and a weight
 * change moves only the keys it must; else a weighted random draw.
 *
 * The server runs forwards through the scheduler (server/core/sched.c);
 * srv_forward_kind is the direct path (no scheduler) a request may take.
 */
#ifndef MT_SERVER_MODELS_H
#define MT_SERVER_MODELS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/registry.h"
#include "engine/speed.h"
#include "server/core/config.h"
#include "server/core/kinds.h"
#include "server/core/stats.h"

typedef enum {
    SRV_VS_LOADING,     /* the build the config asks for is being made */
    SRV_VS_READY,       /* the build the config asks for serves */
    SRV_VS_FAILED,      /* that build failed (error); an older build may still serve */
    SRV_VS_GATE_FAILED, /* built, but its probes missed the gate (figures in gate) */
    SRV_VS_DEMOTED,     /* out of rotation: its live drift fell under drift_floor */
} srv_vstate;

const char *srv_vstate_name(srv_vstate s);

/* What a promotion gate measured on the probe set. */
typedef struct {
    bool ran, passed;
    int probes;
    double mean_cosine, min_cosine; /* to the reference, over the probes */
    double p99_ms, ref_p99_ms;      /* one probe at a time */
    char why[200];                  /* why it failed; "" when passed */
} srv_gate;

struct srv_model;
struct srv_slot;

/* One build of a variant (see above). Fields are set before it is shared
 * and read-only afterwards, except the atomics and what says otherwise. */
typedef struct srv_variant {
    atomic_int refs;
    atomic_long *alive;       /* srv_models.builds_alive */
    struct srv_model *m;
    struct srv_slot *slot;
    cfg_variant cfg;          /* the settings it was built with */
    mt_backend *be;           /* the backend its weights live in */
    mt_model *model;
    int hidden, max_seq_len;
    int nlabels;              /* a classifier's scores per input (0: an embedder) */
    int outputs_width;        /* a token heads' row (mt_outputs_width; 0: no such heads) */
    const char *prompt;       /* the text put before inputs that name no prompt (the
                               * config's prompt_name, else the model's default), or NULL */
    int min_dims;             /* the config's matryoshka_min_dim (0: vectors are whole) */
    int solo_tokens;          /* batches of at most this many tokens run on one thread
                               * (measured when built, see team.c; 0: none) */
    pthread_mutex_t lock;     /* srv_forward_kind: one forward at a time */
    char checksum[17];        /* 64-bit FNV-1a of the weights file, hex */
    char space[200];          /* the embedding space id (see srv_space_id) */
    double build_s;           /* seconds to load (and quantize) */
    srv_gate gate;
    mt_drift check;           /* the load check: its probe vectors against FP32's
                               * (probes 0: none, every GEMM FP32) */
    mt_drift check_bound;     /* what that check had to keep */
    uint64_t base;            /* srv_model_base of the model settings it was built from */
    /* measure (cfg.measure, a build on the host's backend; measure.c): its
     * speed on the probe texts at batch 1 and 32, and against FP32's */
    bool measured;
    mt_speed speed;
    double speed_vs_fp32[2];
    double fp32_mib;          /* FP32's resident MiB, for the warning */
    double measure_s;         /* what measuring took (FP32's figures included, when made) */
    stats_drift drift;         /* live shadow comparisons to the reference */
    atomic_long queue_depth;  /* texts waiting in the scheduler for it */
    atomic_bool retired;      /* no longer serving its slot */
    /* the scheduler's queues for it (its loop thread only), one per job
     * kind (server/core/kinds.h): client texts, token-row texts, shadow texts */
    void *q[SCHED_KINDS];
} srv_variant;

/* One variant name of a model (see above). Fields after the first three
 * are guarded by the model's lock. */
typedef struct srv_slot {
    char name[CFG_NAME_MAX];
    stats_variant metrics;     /* its own lock */
    bool present;             /* in the config (false: removed) */
    bool leaving;             /* removed, but serving until another variant of the
                               * model is in rotation (so a rename never 503s) */
    cfg_variant want;         /* what the config asks for */
    double traffic;           /* weight in the split */
    double drift_floor;
    srv_vstate state;
    char error[600];          /* for failed, gate_failed and demoted */
    srv_gate gate;            /* the last gate run for this name */
    srv_variant *cur;         /* the build serving the name (a reference) or NULL */
    uint64_t want_gen;        /* bumped at each change of want; older builds are stale */
    double switch_s;          /* config noticed -> build serving, the last time */
} srv_slot;

typedef struct srv_model {
    char name[CFG_NAME_MAX];  /* constant */
    int index;                /* constant: its place in srv_models */
    pthread_mutex_t lock;
    cfg_model cfg;            /* the settings in force (a deep copy; under lock,
                               * written only by the scheduler's loop thread) */
    srv_slot **slots;
    int nslots, capslots;
    bool loaded;              /* false: unloaded, or never loaded */
    bool admin_unloaded;      /* unloaded through the API: reloads leave it so */
    char reason[320];         /* why not loaded */
    atomic_int max_queue;     /* copies of cfg fields requests read */
    atomic_bool truncate;
    atomic_long inflight;     /* admitted and not yet answered */
    pthread_mutex_t probe_lock; /* guards the three below; held while they are made */
    float *probe_ref;         /* FP32's vectors of the probe texts (the load check), or NULL */
    int probe_hidden;
    char probe_key[4200];     /* the model path and max_seq_len they were made for */
    /* FP32's speed on the probe texts (measure), kept for the model's other
     * variants; guarded by probe_lock too */
    mt_speed fp32_speed;
    double fp32_mib;
    uint64_t speed_base;      /* the srv_model_base they were made for; 0: none yet */
} srv_model;

/* What a reload did, for the index, the config view and /metrics. */
typedef struct {
    pthread_mutex_t lock;
    uint64_t ok, failed;      /* reloads applied / refused */
    uint64_t generation;      /* config versions applied (the first is 1) */
    char last_error[640];     /* the last refusal's message; "" after a success */
    double last_ok_unix, last_failed_unix;
    char source[1024];        /* the config file */
} srv_reload_status;

/* A device the server builds on: a backend row and its backend. */
typedef struct {
    const mt_backend_reg *reg;
    mt_backend *be;
} srv_device;

#define SRV_MAX_DEVICES 8

typedef struct srv_models {
    /* The host's (devices[0], always there), then, for each other backend
     * row that a model may use ("auto" or its name) and that has a device
     * here, its device 0; made at start, kept until the end. */
    srv_device devices[SRV_MAX_DEVICES];
    int ndevices;
    srv_model *models[CFG_MAX_MODELS * 4]; /* never shrinks (see above) */
    atomic_int nmodels;
    atomic_bool ready;
    atomic_long builds_alive; /* srv_variant builds not yet freed */
    atomic_ulong demotions, gate_failures;
    size_t memory_budget;     /* bytes; 0: none (server.memory_budget_mb, read at start) */
    srv_reload_status reload;
} srv_models;

/* Loads every model and variant of cfg (at start: any failure is an error
 * naming the model and variant). A gate that fails is not an error: that
 * variant starts out of rotation. */
mt_status srv_models_load(const cfg_config *cfg, srv_models **out, mt_err *err);
void srv_models_free(srv_models *s);

/* The models, in order; a model never goes away while the server runs. */
int srv_models_count(const srv_models *s);
srv_model *srv_models_at(srv_models *s, int i);
/* A model by name (loaded or not), or NULL. */
srv_model *srv_models_find(srv_models *s, const char *name);
/* Adds a model (not loaded) with a copy of c; NULL when out of room/memory. */
srv_model *srv_model_add(srv_models *s, const cfg_model *c, mt_err *err);
/* The slot named name, created when create is set; m's lock held. */
srv_slot *srv_slot_get(srv_model *m, const char *name, bool create);

/* Makes a build of variant vc of model mc on be: load (and quantize), the
 * weights checksum, the space id; and, when vc has a gate and ref is given,
 * the probe set against ref. The build is not attached to any slot yet. */
mt_status srv_build(srv_models *s, srv_model *m, const cfg_model *mc, const cfg_variant *vc,
                    srv_variant *ref, srv_variant **out, mt_err *err);
/* Measures up to how many tokens a batch of build v is faster on one
 * thread than on the backend's team, into v->solo_tokens (team.c). */
void srv_measure_team(srv_variant *v);
/* measure (cfg.measure; measure.c): times build v on the probe texts at
 * batch 1 and 32, and FP32's when the model has no figures of it yet (its
 * serving FP32 build's, else a transient FP32 build's), into v's speed
 * fields; before v is shared. A build on another backend than the host's,
 * or a failure, is logged and leaves v unmeasured. */
void srv_measure(srv_models *s, srv_model *m, const cfg_model *mc, srv_variant *v);
/* What a model's builds are made from, as a number (never 0): a hash of
 * its path and max_seq_len, the settings FP32's figures depend on. */
uint64_t srv_model_base(const cfg_model *mc);
/* srv_measure for every build serving a model m at start, once all are
 * made (so that its serving FP32 build, if any, gives FP32's figures):
 * the uniform FP32 builds first, then the others. */
void srv_measure_model(srv_models *s, srv_model *m, const cfg_model *mc);
/* The warning for measured build v when it is slower than FP32 at both
 * batch sizes (engine/speed.h's sentence, into buf): false when it is not. */
bool srv_speed_warning(const srv_variant *v, char *buf, size_t cap);
/* Logs that warning of v (model m), when there is one, at level (LOG_WARN,
 * or'ed with LOG_ALWAYS at start-up): a "slower than fp32" line. */
void srv_log_speed_warning(const srv_model *m, const srv_variant *v, int level);
/* Runs vc's gate for build v against ref into v->gate (passed or not); an
 * error only when the probes file cannot be read. */
mt_status srv_run_gate(srv_variant *v, srv_variant *ref, mt_err *err);

void srv_variant_ref(srv_variant *v);
/* Drops a reference; the last one frees the build (any thread). */
void srv_variant_unref(srv_variant *v);
/* The ISA level build v's backend runs at, and the kernel of its GEMMs in
 * its precision ("?" where the backend does not say). */
const char *srv_variant_isa(const srv_variant *v);
const char *srv_variant_kernel(const srv_variant *v);

/* Why srv_acquire found no build. */
typedef enum { SRV_OK = 0, SRV_NO_VARIANT, SRV_NOT_SERVING, SRV_UNLOADED } srv_acq;

/* Picks the build for a request of m and takes a reference to it (the
 * caller drops it with srv_variant_unref): pin (a variant name; may be NULL
 * or empty) wins, else key (may be NULL or empty) by rendezvous hashing,
 * else a weighted draw. why (may be NULL) gets a message on failure. */
srv_acq srv_acquire(srv_model *m, const char *pin, const char *key, srv_variant **out,
                    char *why, size_t whycap);
/* The reference build of m (a reference taken), or NULL. */
srv_variant *srv_reference(srv_model *m);
/* Whether m serves (loaded, and at least one variant in rotation). */
bool srv_model_serving(srv_model *m);

/* After new shadow figures for build v: when v serves its slot, has a
 * drift_floor, and the mean cosine of its latest drift_window comparisons
 * is under it, takes the slot out of rotation (demoted; logged, counted).
 * Returns true when it did. */
bool srv_drift_check(srv_models *s, srv_variant *v);

/* Resident bytes of the builds serving now: of model m (NULL: all), not
 * counting the slot named skip of model skip_m (a build about to be
 * replaced; NULL: none). */
size_t srv_resident_bytes(srv_models *s, srv_model *m, const srv_model *skip_m,
                          const char *skip);

/* Splits "name@variant" in place: returns the variant part or NULL. */
char *srv_split_pin(char *model_name);

/* The 64-bit rendezvous hash of (key, name) as a number in (0, 1). */
double srv_route_hash(const char *key, const char *name);

/* Runs a job kind's forward (sched_kinds[k].forward: pooled, a row per
 * token, or scores) on nseq tokenized sequences (packed ids, see
 * mt_model_forward; segs and norms may be NULL) with v, one forward at a
 * time per build (v's lock). */
mt_status srv_forward_kind(srv_variant *v,
                           mt_status (*forward)(mt_model *, const int32_t *, const int32_t *,
                                                const int32_t *, int, float *, float *, mt_err *),
                           const int32_t *ids, const int32_t *offsets, const int32_t *segs,
                           int nseq, float *out, float *norms, mt_err *err);

/* The checksum (64-bit FNV-1a, hex) of a file's bytes, cached by path,
 * size, mtime and inode so that a rebuild does not read it again. */
mt_status srv_file_checksum(const char *path, char out[17], mt_err *err);

#endif
