/* cuda_graph.c: CUDA graphs for the CUDA backend (the protocol is in
 * backend_cuda.h: mt_cuda_graph_begin / mt_cuda_graph_end), acting on the
 * pure decisions of cuda_policy.h:
 *   - a key's first begin runs the ops eagerly (every kernel and cuBLASLt
 *     plan gets made outside a capture), the second records, later ones
 *     replay;
 *   - a cached graph remembers the split-K workspace generation it was
 *     recorded with and is re-recorded, never replayed, once the thread's
 *     workspace was reallocated;
 *   - ->free calls made while recording wait on a growable list until the
 *     graph's first launch, and a recording that freed anything is not kept;
 *   - MT_CUDA_DEBUG_SYNC=1 records nothing (every op runs eagerly and is
 *     checked, see backend_cuda.c).
 */
#include <stdio.h>
#include <string.h>

#include "engine/cuda_internal.h"

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

/* backend_cuda.h explains the protocol. */
mt_status mt_cuda_graph_begin(mt_backend *be, unsigned long long key, bool *replay, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    if (c->capturing || c->pending || c->eager)
        return mt_fail(err, MT_EINVAL, "mt_cuda_graph_begin inside another begin/end pair");
    *replay = false;
    if ((st = ws_ensure(c, err)) != MT_OK) /* never while recording: now */
        return st;
    int i = slot_find(c, key);
    const cup_graph_action a =
        cup_graph_decide(i >= 0 && c->graphs[i].exec, i >= 0 ? c->graphs[i].gen : 0, c->ws.gen,
                         i >= 0, c->be->opts.debug_sync);
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
    c->gen_at_begin = c->ws.gen;
    c->deferred.n = 0;
    return MT_OK;
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

/* Launches the remembered graph, or finishes the recording: instantiate,
 * launch, then the deferred frees (stream-ordered after the launch), then
 * cache the graph unless cup_graph_keep says no. */
mt_status mt_cuda_graph_end(mt_backend *be, mt_err *err)
{
    cu_ctx *c;
    mt_status st = ctx_get((cu_backend *)be, &c, err);
    if (st != MT_OK)
        return st;
    if (c->pending) {
        cudaGraphExec_t g = c->pending;
        c->pending = NULL;
        CU(cudaGraphLaunch(g, c->stream));
        return MT_OK;
    }
    if (c->eager || !c->capturing) {
        c->eager = 0;
        return MT_OK; /* the ops ran as they were issued */
    }
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    c->capturing = 0;
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&exec, graph, 0);
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
    if (cup_graph_keep(nfreed, c->gen_at_begin, c->ws.gen))
        graph_keep(c, exec);
    else
        cudaGraphExecDestroy(exec); /* freed once its launch completes */
    return MT_OK;
}
