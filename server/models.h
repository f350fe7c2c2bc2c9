/* models.h: the models a server holds, each with its loaded variants, and
 * the choice of variant for a request (pin, else weighted by traffic).
 *
 * The server runs forwards through the scheduler (server/sched.c), which
 * batches requests per variant; srv_forward is the direct path the
 * command-line tools use (one forward at a time per variant, its lock).
 */
#ifndef MT_SERVER_MODELS_H
#define MT_SERVER_MODELS_H

#include <pthread.h>
#include <stdbool.h>

#include "engine/backend.h"
#include "models/bert.h"
#include "server/config.h"
#include "server/metrics.h"

typedef struct srv_variant {
    cfg_variant cfg;
    bert_model *model;
    pthread_mutex_t lock;
    prom_variant metrics;
    void *sched_q; /* the scheduler's queue for this variant */
} srv_variant;

typedef struct srv_model {
    cfg_model cfg; /* path points into the owning cfg_config */
    srv_variant *variants;
    int nvariants;
    double traffic_total;
    int hidden, max_seq_len;
    int index;     /* in srv_models.models */
} srv_model;

typedef struct srv_models {
    mt_backend *cpu;
    srv_model *models;
    int nmodels;
    bool ready;
} srv_models;

/* Loads every model and variant of cfg; an error names the model and variant. */
mt_status srv_models_load(const cfg_config *cfg, srv_models **out, mt_err *err);
void srv_models_free(srv_models *s);

srv_model *srv_models_find(srv_models *s, const char *name);

/* Picks the variant of m for a request: pin (a variant name, may be NULL
 * or empty) wins; else a weighted draw by traffic. NULL when the pin names
 * no variant of m. */
srv_variant *srv_pick_variant(srv_model *m, const char *pin);

/* Splits "name@variant" in place: returns the variant part or NULL. */
char *srv_split_pin(char *model_name);

/* Embeds nseq tokenized sequences (packed ids, see bert_forward) with v,
 * one forward at a time per variant (v's lock). */
mt_status srv_forward(srv_variant *v, const int32_t *ids, const int32_t *offsets, int nseq,
                      float *out, mt_err *err);

#endif
