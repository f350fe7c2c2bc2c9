/* engine/cuda/policy.c: the CUDA backend's pure decisions (see engine/cuda/policy.h);
 * no device calls, so tests/gpu checks them on machines without a GPU. */
#include "engine/cuda/policy.h"

#include <stdlib.h>

int cup_lt_refused(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE ||
           s == CUBLAS_STATUS_ARCH_MISMATCH;
}

int cup_fp8_w8a8_enabled(int cc, size_t lt_version, int built_with_outer_vec)
{
    return built_with_outer_vec && cc == 90 && lt_version >= CUP_LT_OUTER_VEC_VERSION;
}

int cup_w8a8_shape_ok(int n)
{
    return n > 0 && n % 16 == 0;
}

int cup_ws_should_grow(const cup_ws *w, size_t need, int capturing)
{
    return !capturing && need > w->have;
}

void cup_ws_grown(cup_ws *w, size_t need)
{
    w->have = need;
    w->gen++;
}

cup_graph_action cup_graph_decide(int cached, unsigned graph_gen, unsigned cur_gen, int seen,
                                  int debug_sync)
{
    if (debug_sync)
        return CUP_GRAPH_EAGER;
    if (cached)
        return graph_gen == cur_gen ? CUP_GRAPH_REPLAY : CUP_GRAPH_RERECORD;
    return seen ? CUP_GRAPH_RECORD : CUP_GRAPH_EAGER;
}

int cup_graph_keep(int nfreed, unsigned gen_at_begin, unsigned gen_at_end)
{
    return nfreed == 0 && gen_at_begin == gen_at_end;
}

int cup_ptr_list_push(cup_ptr_list *l, void *p)
{
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 16;
        void **q = realloc(l->p, sizeof *q * (size_t)cap);
        if (!q)
            return -1;
        l->p = q;
        l->cap = cap;
    }
    l->p[l->n++] = p;
    return 0;
}

void cup_ptr_list_release(cup_ptr_list *l)
{
    free(l->p);
    l->p = NULL;
    l->n = l->cap = 0;
}

int cup_pick_direct_max_m(const int *ms, const double *t_staged, const double *t_direct,
                          int count, double margin)
{
    int best = 0;
    for (int i = 0; i < count; i++) {
        const double a = t_staged[i], b = t_direct[i];
        if (!(a > 0 && b > 0 && a < 1e30 && b < 1e30) || b > a * (1.0 - margin))
            break;
        best = ms[i];
    }
    return best;
}

int cup_second_faster(double t_first, double t_second)
{
    if (!(t_first > 0 && t_first < 1e30))
        return 1;
    return t_second > 0 && t_second < t_first;
}

int cup_m_bucket(const int *ms, int count, int m)
{
    int i = 0;
    while (i + 1 < count && ms[i + 1] <= m)
        i++;
    return i;
}
