/* engine/cuda/graph.c: CUDA graphs for the CUDA backend (the protocol is in
 * engine/cuda/backend.h: mt_cuda_graph_begin / mt_cuda_graph_end, and backend.h's
 * graph_begin / graph_end slots, which models/encoder.c calls), acting on the
 * pure decisions of engine/cuda/policy.h:
 *   - a key's first begin runs the ops eagerly (every kernel and cuBLASLt
 *     plan gets made outside a capture), the second records, later ones
 *     replay;
 *   - a cached graph remembers the memory generation it was recorded with
 *     (split-K workspace and forward arena) and is re-recorded, never
 *     replayed, once either was reallocated;
 *   - ->free calls made while recording wait on a growable list until the
 *     graph's first launch, and a recording that freed anything is not kept;
 *     a recording whose ops failed is dropped without a launch;
 *   - the slots' forward arena: one per thread, grow-only, shared by every
 *     key of every model (one forward at a time runs on a thread's stream);
 *     it holds a forward's inputs and activations, so a key's buffers are the
 *     same on every replay;
 *   - MANTISSA_CUDA_DEBUG_SYNC=1 records nothing (every op runs eagerly and is
 *     checked, see engine/cuda/backend.c), and the slots answer "not now".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/internal.h"

void graph_defer_free(cu_ctx *c, void *p)
{
    if (cup_ptr_list_push(&c->deferred, p) != 0) /* host out of memory: leak, never corrupt */
        fprintf(stderr, "mantissa: cuda: out of host memory deferring a free; %p leaks\n", p);
}

void graph_ctx_release(cu_ctx *c)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].exec)
            cudaGraphExecDestroy(c->graphs[i].exec);
    memset(c->graphs, 0, sizeof c->graphs);
    cup_ptr_list_release(&c->deferred);
    if (c->arena && c->stream)
        cudaFreeAsync(c->arena, c->stream); /* ctx_destroy synchronises after */
    c->arena = NULL;
    c->arena_bytes = 0;
}

/* The slot of key, or NULL. */
static int slot_find(cu_ctx *c, unsigned long long key)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].seen && c->graphs[i].key == key)
            return i;
    return -1;
}

/* A slot for key: the least recently used one, emptied. */
static int slot_take(cu_ctx *c, unsigned long long key)
{
    int v = 0;
    for (int i = 1; i < GRAPH_SLOTS; i++)
        if (c->graphs[i].used < c->graphs[v].used)
            v = i;
    if (c->graphs[v].exec)
        cudaGraphExecDestroy(c->graphs[v].exec);
    memset(&c->graphs[v], 0, sizeof c->graphs[v]);
    c->graphs[v].key = key;
    c->graphs[v].seen = 1;
    c->graphs[v].used = ++c->clock;
    return v;
}

/* The generation of everything a recording bakes in besides the caller's
 * buffers: the split-K workspace and the forward arena. Both counters only
 * grow, so the sum changes whenever either does. */
static unsigned mem_gen(const cu_ctx *c) { return c->ws.gen + c->arena_gen; }

/* begin on c: eager_only (debug sync, or the tests' MANTISSA_CUDA_GRAPHS=2) never
 * records. */
static mt_status graph_begin_ctx(cu_ctx *c, unsigned long long key, int eager_only, bool *replay,
                                 mt_err *err)
{
    if (c->capturing || c->pending || c->eager)
        return mt_fail(err, MT_EINVAL, "mt_cuda_graph_begin inside another begin/end pair");
    *replay = false;
    mt_status st;
    if ((st = ws_ensure(c, err)) != MT_OK) /* never while recording: now */
        return st;
    int i = slot_find(c, key);
    const cup_graph_action a = cup_graph_decide(i >= 0 && c->graphs[i].exec,
                                                i >= 0 ? c->graphs[i].gen : 0, mem_gen(c), i >= 0,
                                                eager_only);
    switch (a) {
    case CUP_GRAPH_REPLAY:
        c->graphs[i].used = ++c->clock;
        c->pending = c->graphs[i].exec;
        *replay = true;
        return MT_OK;
    case CUP_GRAPH_EAGER:
        if (i < 0)
            slot_take(c, key);
        c->eager = 1;
        return MT_OK;
    case CUP_GRAPH_RERECORD:
        cudaGraphExecDestroy(c->graphs[i].exec);
        c->graphs[i].exec = NULL;
        break;
    case CUP_GRAPH_RECORD:
        break;
    }
    /* everything a recorded op could allocate lazily must exist first */
    if (!c->lt_ws)
        CU(scratch(c, LT_WORKSPACE, &c->lt_ws));
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = 1;
    c->cur_key = key;
    c->gen_at_begin = mem_gen(c);
    c->deferred.n = 0;
    return MT_OK;
}

/* engine/cuda/backend.h explains the protocol. */
mt_status mt_cuda_graph_begin(mt_backend *be, unsigned long long key, bool *replay, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    return graph_begin_ctx(c, key, c->be->opts.debug_sync, replay, err);
}

/* Caches exec for the key being recorded (evicting the least recently used). */
static void graph_keep(cu_ctx *c, cudaGraphExec_t exec)
{
    int i = slot_find(c, c->cur_key);
    if (i < 0)
        i = slot_take(c, c->cur_key);
    if (c->graphs[i].exec)
        cudaGraphExecDestroy(c->graphs[i].exec);
    c->graphs[i].exec = exec;
    c->graphs[i].gen = c->gen_at_begin;
    c->graphs[i].used = ++c->clock;
}

/* How many nodes, and kernel nodes, a recording has: the launches one
 * eager forward makes (cuBLASLt's kernels included), for the counts. */
static void count_nodes(cu_backend *b, cudaGraph_t g)
{
    size_t n = 0;
    long kernels = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    cudaGraphNode_t *nodes = n ? malloc(sizeof *nodes * n) : NULL;
    if (nodes && cudaGraphGetNodes(g, nodes, &n) == cudaSuccess) {
        for (size_t i = 0; i < n; i++) {
            enum cudaGraphNodeType t;
            if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel)
                kernels++;
        }
    }
    (void)cudaGetLastError();
    free(nodes);
    atomic_store(&b->graph_nodes, (long)n);
    atomic_store(&b->graph_kernels, kernels);
}

/* Ends a recording: instantiate, launch, then the deferred frees
 * (stream-ordered after the launch), then cache the graph unless
 * cup_graph_keep says no. */
static mt_status graph_finish_recording(cu_ctx *c, mt_err *err)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    c->capturing = 0;
    if (e == cudaSuccess) {
        count_nodes(c->be, graph);
        e = cudaGraphInstantiate(&exec, graph, 0);
    }
    if (graph)
        cudaGraphDestroy(graph);
    if (e == cudaSuccess)
        e = cudaGraphLaunch(exec, c->stream);
    const int nfreed = c->deferred.n;
    for (int i = 0; i < nfreed; i++)
        scratch_free(c, c->deferred.p[i]);
    c->deferred.n = 0;
    if (e != cudaSuccess) {
        if (exec)
            cudaGraphExecDestroy(exec);
        return cu_fail(err, e, "recording a CUDA graph (an op between begin and end waited on "
                       "the GPU?)", __FILE__, __LINE__);
    }
    atomic_fetch_add(&c->be->n_graph_records, 1);
    if (cup_graph_keep(nfreed, c->gen_at_begin, mem_gen(c)))
        graph_keep(c, exec);
    else
        cudaGraphExecDestroy(exec); /* freed once its launch completes */
    return MT_OK;
}

/* Launches the remembered graph, or finishes the recording. */
static mt_status graph_end_ctx(cu_ctx *c, mt_err *err)
{
    preq_drop(c); /* scratch of a recording is freed inside it */
    if (c->pending) {
        cudaGraphExec_t g = c->pending;
        c->pending = NULL;
        CU(cudaGraphLaunch(g, c->stream));
        atomic_fetch_add(&c->be->n_graph_replays, 1);
        return MT_OK;
    }
    if (c->eager || !c->capturing) {
        c->eager = 0;
        return MT_OK; /* the ops ran as they were issued */
    }
    return graph_finish_recording(c, err);
}

mt_status mt_cuda_graph_end(mt_backend *be, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    return graph_end_ctx(c, err);
}

/* An op failed between begin and end: a recording is ended and dropped
 * unlaunched (its deferred frees run now: nothing recorded will run), a
 * pending replay is not launched. The slot stays "seen". */
static void graph_discard(cu_ctx *c)
{
    preq_drop(c);
    if (c->capturing) {
        cudaGraph_t g = NULL;
        (void)cudaStreamEndCapture(c->stream, &g);
        if (g)
            cudaGraphDestroy(g);
        (void)cudaGetLastError();
        c->capturing = 0;
        for (int i = 0; i < c->deferred.n; i++)
            scratch_free(c, c->deferred.p[i]);
        c->deferred.n = 0;
    }
    c->pending = NULL;
    c->eager = 0;
}

/* ========================================================================
 * backend.h's graph_begin / graph_end: the protocol above plus the arena
 * ====================================================================== */

/* Grows this thread's forward arena to bytes (never while recording: begin
 * calls it first). A move bumps arena_gen, so graphs recorded with the old
 * one are re-recorded. Zeroed once, so that rows no sequence owns (the
 * padded tail) start finite. */
static mt_status arena_ensure(cu_ctx *c, size_t bytes, mt_err *err)
{
    if (bytes <= c->arena_bytes)
        return MT_OK;
    scratch_free(c, c->arena); /* stream-ordered after every use */
    c->arena = NULL;
    c->arena_bytes = 0;
    c->arena_gen++;
    CU(scratch(c, bytes, &c->arena));
    CU(cudaMemsetAsync(c->arena, 0, bytes, c->stream));
    c->arena_bytes = bytes;
    return MT_OK;
}

/* backend.h's graph_begin: "not now" (arena NULL) when graphs are off or
 * under MANTISSA_CUDA_DEBUG_SYNC; else the arena, the inputs copied into it,
 * and begin. in is pageable host memory: cudaMemcpyAsync has staged it when
 * it returns (in may be freed), and the copy is ordered before the replay
 * on the stream, so the host does not wait for it (it did until 2026-11-27:
 * a round trip per batch-1 forward). */
mt_status cu_graph_begin_op(mt_backend *be, unsigned long long key, size_t bytes, const void *in,
                            size_t in_bytes, void **arena, bool *replay, mt_err *err)
{
    cu_backend *b = (cu_backend *)be;
    cu_ctx *c;
    *arena = NULL;
    *replay = false;
    mt_status st = ctx_get(b, &c, err);
    if (st != MT_OK || !b->opts.graphs || b->opts.debug_sync)
        return st;
    if (c->capturing || c->pending || c->eager)
        return mt_fail(err, MT_EINVAL, "graph_begin inside another begin/end pair");
    if (in_bytes > bytes)
        return mt_fail(err, MT_EINVAL, "graph_begin: %zu input bytes in a %zu-byte arena",
                       in_bytes, bytes);
    if ((st = arena_ensure(c, bytes, err)) != MT_OK)
        return st;
    if (in_bytes) {
        CU(cudaMemcpyAsync(c->arena, in, in_bytes, cudaMemcpyHostToDevice, c->stream));
    }
    if ((st = graph_begin_ctx(c, key, b->opts.graphs == 2, replay, err)) == MT_OK)
        *arena = c->arena;
    return st;
}

/* backend.h's graph_end: failed drops a recording (and launches nothing). */
mt_status cu_graph_end_op(mt_backend *be, bool failed, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    if (failed) {
        graph_discard(c);
        return MT_OK;
    }
    return graph_end_ctx(c, err);
}
