/* kinds.h: what a job asks of its texts' forward, as rows: one
 * sched_kind_row per kind (server/core/sched.c's sched_kinds), which the
 * scheduler, the batches and the drain read instead of asking which kind
 * a job is. Each kind has its own queue per build (srv_variant.q), so its
 * texts batch apart from the others'. A new kind (a reranker's pairs, a
 * sparse head) is a value here and a row in sched_kinds.
 */
#ifndef MT_SERVER_KINDS_H
#define MT_SERVER_KINDS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model.h"
#include "engine/status.h"

typedef enum {
    SCHED_KIND_EMBED = 0, /* a pooled vector per text (every embedding route) */
    SCHED_KIND_TOKENS,    /* a vector per token, not pooled (TEI's /embed_all) */
    SCHED_KIND_SHADOW,    /* a client's texts run again on the reference (shadow.c) */
    SCHED_KIND_SCORE,     /* a classifier's scores per text or text pair (/rerank, /predict) */
    SCHED_KIND_OUTPUTS,   /* a row per token of every output a model's token heads give
                           * (bge-m3: sparse, ColBERT and the pooled vector; model.h's
                           * forward_outputs) */
    SCHED_KINDS
} sched_kind;

struct srv_variant;

typedef struct {
    const char *name; /* "embed", "tokens", "shadow", "score", "outputs": for logs */
    /* the forward of a batch: out gets a row per text, or per token where
     * per_token; segs (NULL: none) where each text pair's second text
     * starts (mt_model_forward_scores); norms (NULL where the kind has
     * none) each vector's norm */
    mt_status (*forward)(mt_model *m, const int32_t *ids, const int32_t *offsets,
                         const int32_t *segs, int nseq, float *out, float *norms, mt_err *err);
    bool per_token;  /* the output has a row per token (else one per text) */
    bool scores;     /* a row is the model's nlabels scores (else a hidden-wide vector) */
    bool outputs;    /* a row is mt_outputs_width floats (forward_outputs) */
    bool shadowable; /* its client jobs may be run again on the reference */
    bool background; /* not a client's: runs on workers no client batch wants,
                      * is not counted as served, and is dropped by a drain */
    const char *late; /* what a job of it that waited past its deadline says
                       * (NULL: the scheduler's own message) */
} sched_kind_row;

extern const sched_kind_row sched_kinds[SCHED_KINDS];

/* The floats of one output row of kind k on build v: its scores or its
 * vector. */
int sched_row_width(sched_kind k, const struct srv_variant *v);

#endif
