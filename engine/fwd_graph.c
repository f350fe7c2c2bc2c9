/* fwd_graph.c: the pure decisions of a recorded forward (see fwd_graph.h):
 * buckets, keys, the choice, the arena layout. No device calls. */
#include "engine/fwd_graph.h"

int mt_fwd_bucket(int tokens)
{
    if (tokens < 1 || tokens > MT_FWD_MAX_TOKENS)
        return 0;
    int b = MT_FWD_MIN_TOKENS;
    while (b < tokens)
        b *= 2;
    return b;
}

unsigned long long mt_fwd_key(unsigned model, int nseq, int t_cap)
{
    return (unsigned long long)model << 32 | (unsigned long long)(nseq & 0xffff) << 16 |
           (unsigned long long)(t_cap & 0xffff);
}

mt_fwd_plan mt_fwd_choose(unsigned model, int nseq, int tokens, int capturable)
{
    mt_fwd_plan p = {0, 0, 0};
    const int b = mt_fwd_bucket(tokens);
    if (!capturable || nseq < 1 || nseq > MT_FWD_MAX_BATCH || b == 0 || tokens < nseq)
        return p;
    p.graph = 1;
    p.t_cap = b;
    p.key = mt_fwd_key(model, nseq, b);
    return p;
}

size_t mt_fwd_layout(const size_t *bytes, int n, size_t *offset)
{
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        offset[i] = at;
        at += (bytes[i] + MT_FWD_ALIGN - 1) / MT_FWD_ALIGN * MT_FWD_ALIGN;
    }
    return at;
}
