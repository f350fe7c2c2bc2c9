/* fwd_graph.h: the pure decisions of a recorded forward pass (CUDA Graphs
 * through backend.h's graph_begin / graph_end): which forwards are recorded,
 * the token-count bucket they are padded to, their key, and where each
 * buffer lies in the backend's forward arena. No device, no CUDA header:
 * models/encoder.c acts on these answers, and tests/gpu/test_gpu_policy checks
 * them on any machine.
 *
 * Why padding is exact: activations are packed (varlen, backend.h), so a
 * forward's only shape is t, its token count. A recorded forward uses
 * t_cap = mt_fwd_bucket(t) >= t rows: rows t..t_cap-1 form a tail that no
 * sequence owns. Embedding, attention and pooling find their rows through
 * the offsets (device data, uploaded before each replay), so they never
 * read or write the tail; GEMMs and LayerNorm treat each row on its own,
 * so the tail's values never reach a real row. */
#ifndef MT_ENGINE_FWD_GRAPH_H
#define MT_ENGINE_FWD_GRAPH_H

#include <stddef.h>

enum {
    MT_FWD_MAX_BATCH = 8,     /* batches of 1..8 sequences are recorded */
    MT_FWD_MIN_TOKENS = 16,   /* the smallest bucket */
    MT_FWD_MAX_TOKENS = 2048, /* the largest bucket: longer batches run eagerly (their
                               * kernels are long enough to hide the launch cost) */
    MT_FWD_ALIGN = 256,       /* every buffer in the arena starts on this (cuBLASLt's
                               * alignment, as the backends' alloc) */
};

/* The bucket a forward of `tokens` tokens is padded to: the smallest power
 * of two >= tokens, at least MT_FWD_MIN_TOKENS (16, 32, 64 ... 2048); 0 when
 * tokens < 1 or tokens > MT_FWD_MAX_TOKENS (no bucket: run eagerly). */
int mt_fwd_bucket(int tokens);

/* The graph key of model `model` (a number unique per loaded model), nseq
 * sequences and t_cap padded tokens: distinct for distinct triples (nseq
 * <= 65535, t_cap <= 65535). */
unsigned long long mt_fwd_key(unsigned model, int nseq, int t_cap);

typedef struct {
    int graph;              /* 1: record / replay this forward; 0: run it eagerly, unpadded */
    int t_cap;              /* rows of the padded forward (graph only) */
    unsigned long long key; /* its key (graph only) */
} mt_fwd_plan;

/* Whether a forward of nseq sequences, tokens tokens in all, takes the
 * recorded path: capturable (the caller's own conditions: the backend has
 * the graph slots, the forward issues no upload/download/alloc between its
 * ops, ...) and 1 <= nseq <= MT_FWD_MAX_BATCH and a bucket exists. */
mt_fwd_plan mt_fwd_choose(unsigned model, int nseq, int tokens, int capturable);

/* Lays n buffers of bytes[i] bytes out one after another, each starting at
 * a multiple of MT_FWD_ALIGN: offset[i] gets each start; returns the total
 * size (a multiple of MT_FWD_ALIGN). */
size_t mt_fwd_layout(const size_t *bytes, int n, size_t *offset);

#endif
