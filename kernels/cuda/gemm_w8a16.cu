/* gemm_w8a16.cu: the fused dequantize-GEMM for 8-bit weights (W8A16).
 *
 *   y (m, n) = act(scale[n] * x (m, k) . dec(W (n, k))^T + bias[n])
 *
 * Why it exists: at small m (1..64 tokens) a GEMM is bound by reading W.
 * Keeping W at 8 bits in global memory halves the bytes of an FP16 weight,
 * so the kernel can beat cuBLASLt FP16 by up to 2x if it streams W at close
 * to the memory bandwidth and converts it to f16/bf16 in registers, right
 * before the tensor cores (mma.sync m16n8k16, FP32 accumulation).
 *
 * Shape of the work ("swap AB" for small m):
 *   - the MMA's M side is 16 weight rows, its N side 8 tokens, so m = 1..8
 *     wastes no more than one 8-token tile;
 *   - a block is 8 warps; warp w owns weight rows n0 + 16w .. 16w+15 and
 *     every token of the block's bm = 8*MT tokens;
 *   - K is streamed in 64-wide chunks through a 4-stage cp.async pipeline:
 *     per stage 128 rows x 64 weight bytes (8 KiB) and bm x 64 FP32
 *     activations (16-bit ones in the IO instantiations, a 16-bit
 *     forward's rows: kcu_w8a16_gemm_16), the latter shared by all 8 warps;
 *   - when (m, n) tiles cannot fill the GPU, K is split across blocks
 *     (grid.z); partials go to a workspace and the last block of a tile sums
 *     them in split order (deterministic) and runs the epilogue.
 *
 * The k-permutation: a dot product does not care in which order k is
 * visited, as long as A and B agree. For MMA step j (0..3) of a 64-chunk,
 * thread (g = lane/4, t = lane%4) takes physical k = 16t + 4j .. 16t + 4j + 3
 * for the four logical k {2t, 2t+1, 2t+8, 2t+9} its fragments hold. So each
 * thread reads one contiguous 16-byte run of a weight row per chunk (one
 * 32-bit word per MMA step, 4 int8/e4m3 codes -> 2 f16x2 registers) and
 * 16 contiguous activations per token, with no shuffles.
 *
 * Boundaries: rows >= n, tokens >= m and k >= K are zero-filled by cp.async
 * (src-size < cp-size), so any m, n, k works; W needs 16-byte aligned rows
 * (ldw % 16 == 0), which engine/cuda/backend.c guarantees by padding.
 */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/w8a16_dev.cuh"

#include <limits.h>

using namespace kcu_w8a16;

namespace {

#ifndef KCU_W8A16_STAGES /* an experiment's override: NVCCFLAGS="-O3 -DKCU_W8A16_STAGES=8" */
#define KCU_W8A16_STAGES 4
#endif
constexpr int STAGES = KCU_W8A16_STAGES; /* cp.async pipeline depth */

/* Shared-memory sizes of one instantiation. */
template <int MT, bool IO>
struct Tile {
    static constexpr int BM = 8 * MT;              /* tokens per block */
    static constexpr int W_BYTES = BN * KC;        /* weight bytes per stage */
    static constexpr int X_BYTES = BM * KC * (IO ? 2 : 4); /* activation bytes per stage */
    static constexpr int STAGE = W_BYTES + X_BYTES;
    static constexpr int SMEM = STAGES * STAGE;
};

/* Issues the cp.async copies of one K chunk into one pipeline stage.
 * Weights: 128 rows x 4 runs of 16 bytes, row-major in shared memory (a
 * warp's 8 rows x 64 B are then read as 512 contiguous bytes).
 * Activations: float4 (q, token, t) at ((q * BM + token) * 4 + t), so that
 * the 32 lanes of an MMA step read 32 consecutive float4 (no bank conflict);
 * 16-bit rows (IO): the same places in 8-byte words of four values. */
template <int MT, bool IO>
__device__ __forceinline__ void load_stage(const Params &p, uint8_t *stage, int chunk, int n0,
                                           int m0)
{
    constexpr int BM = Tile<MT, IO>::BM;
    const int tid = threadIdx.x;
    const int kc = chunk * KC;
#pragma unroll
    for (int i = 0; i < (BN * 4) / THREADS; i++) {
        const int c = tid + i * THREADS;
        const int row = c >> 2, seg = c & 3;
        const int gn = n0 + row, gk = kc + seg * 16;
        const int bytes = gn < p.n ? max(0, min(16, p.k - gk)) : 0;
        const uint8_t *src = bytes > 0 ? p.w + (size_t)gn * p.ldw + gk : p.w;
        cp_async16(stage + row * KC + seg * 16, src, bytes);
    }
    if (IO) {
        uint2 *sx = reinterpret_cast<uint2 *>(stage + Tile<MT, IO>::W_BYTES);
        for (int c = tid; c < BM * 16; c += THREADS) {
            const int tok = c >> 4, f4 = c & 15;
            const int gm = m0 + tok, gk = kc + f4 * 4;
            const int bytes = gm < p.m ? max(0, min(8, (p.k - gk) * 2)) : 0;
            cp_async8(sx + ((f4 & 3) * BM + tok) * 4 + (f4 >> 2),
                      bytes > 0 ? p.xh + (size_t)gm * p.ldx + gk : p.xh, bytes);
        }
        return;
    }
    float *sx = reinterpret_cast<float *>(stage + Tile<MT, IO>::W_BYTES);
    for (int c = tid; c < BM * 16; c += THREADS) {
        const int tok = c >> 4, f4 = c & 15;
        const int q = f4 & 3, tt = f4 >> 2;
        float *dst = sx + ((q * BM + tok) * 4 + tt) * 4;
        const int gm = m0 + tok, gk = kc + f4 * 4;
        if (p.xvec) {
            const int bytes = gm < p.m ? max(0, min(16, (p.k - gk) * 4)) : 0;
            cp_async16(dst, bytes > 0 ? p.x + (size_t)gm * p.ldx + gk : p.x, bytes);
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const bool ok = gm < p.m && gk + e < p.k;
                cp_async4(dst + e, ok ? p.x + (size_t)gm * p.ldx + gk + e : p.x, ok ? 4 : 0);
            }
        }
    }
}

/* One block: 128 weight rows x 8*MT tokens x one K split; see the top of
 * this file for the layout, pipeline and split-K. SM: activation smoothing,
 * each activation times p.mul[k] in FP32 before its f16/bf16 rounding (a
 * template argument, so the unsmoothed instantiations are unchanged). */
template <int MT, int WT, int AT, bool SM, bool IO>
__global__ void __launch_bounds__(THREADS, 2) w8a16_kernel(const Params p)
{
    constexpr int BM = Tile<MT, IO>::BM;
    constexpr int STAGE = Tile<MT, IO>::STAGE;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_last;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int split = blockIdx.z;
    const int c_begin = split * p.chunks_per_split;
    const int c_end = min(c_begin + p.chunks_per_split, p.nchunks);
    const int nch = c_end - c_begin; /* >= 1: the planner leaves no split empty */

    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nch)
            load_stage<MT, IO>(p, smem + s * STAGE, c_begin + s, n0, m0);
        cp_async_commit();
    }

    for (int i = 0; i < nch; i++) {
        cp_async_wait<STAGES - 2>();
        /* stage i has landed for every thread, and every thread is done with
         * stage i-1, which the next load overwrites */
        __syncthreads();
        const int nxt = i + STAGES - 1;
        if (nxt < nch)
            load_stage<MT, IO>(p, smem + (nxt % STAGES) * STAGE, c_begin + nxt, n0, m0);
        cp_async_commit();

        const uint8_t *sw = smem + (i % STAGES) * STAGE;
        const float4 *sx = reinterpret_cast<const float4 *>(sw + Tile<MT, IO>::W_BYTES);
        const uint2 *sxh = reinterpret_cast<const uint2 *>(sw + Tile<MT, IO>::W_BYTES);
        const uint4 wa = *reinterpret_cast<const uint4 *>(sw + (warp * 16 + g) * KC + t * 16);
        const uint4 wb = *reinterpret_cast<const uint4 *>(sw + (warp * 16 + g + 8) * KC + t * 16);
        uint32_t a[4][4];
        dec_runs<WT, AT>(wa, wb, a);
        /* smoothing: this thread's 16 physical k are 16t .. 16t+15 of the
         * chunk (step j: 16t + 4j ..); mul is padded to whole chunks */
        float4 mul[4];
        if (SM) {
            const float4 *pm = reinterpret_cast<const float4 *>(p.mul + (c_begin + i) * KC + 16 * t);
#pragma unroll
            for (int j = 0; j < 4; j++)
                mul[j] = __ldg(pm + j);
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (IO) {
                    uint2 b = sxh[(j * BM + mt * 8 + g) * 4 + t];
                    if (SM)
                        b = mul4<AT>(b, mul[j]);
                    mma16816<AT>(acc[mt], a[j][0], a[j][1], a[j][2], a[j][3], b.x, b.y);
                    continue;
                }
                float4 v = sx[(j * BM + mt * 8 + g) * 4 + t];
                if (SM) {
                    v.x *= mul[j].x;
                    v.y *= mul[j].y;
                    v.z *= mul[j].z;
                    v.w *= mul[j].w;
                }
                mma16816<AT>(acc[mt], a[j][0], a[j][1], a[j][2], a[j][3], pack2<AT>(v.x, v.y),
                             pack2<AT>(v.z, v.w));
            }
        }
    }
    cp_async_wait<0>();
    finish_tile<MT, AT, IO>(p, acc, n0, m0, s_last);
}

/* ------------------------------------------------------------------------
 * launching
 * ---------------------------------------------------------------------- */

} /* namespace */

/* Multiprocessor count of the current device, asked once per device. */
int kcu_w8a16::device_sms(int *out_dev)
{
    static int cache[MAX_DEVICES];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return -1;
    *out_dev = dev;
    if (dev < 0 || dev >= MAX_DEVICES)
        return -1;
    if (cache[dev] <= 0) {
        int v = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            return -1;
        cache[dev] = v; /* a benign race: every thread writes the same value */
    }
    return cache[dev];
}

namespace {

/* One instantiation (the stages need more than the default 48 KiB of
 * shared memory: the limit is raised the first time it runs on a device). */
template <int MT, int WT, int AT, bool SM, bool IO>
cudaError_t prepare(int dev)
{
    return prepare_once<w8a16_kernel<MT, WT, AT, SM, IO>, Tile<MT, IO>::SMEM>(dev);
}

template <int MT, int WT, int AT, bool SM, bool IO>
cudaError_t launch(const Params &p, dim3 grid, int dev, cudaStream_t stream)
{
    return launch_once<w8a16_kernel<MT, WT, AT, SM, IO>, Tile<MT, IO>::SMEM>(p, grid, dev, stream);
}

/* From the planner's token-tile count to the instantiation; direct: the
 * direct kernel (mt 1 or 2 only). */
template <int WT, int AT, bool SM, bool IO>
cudaError_t dispatch_mt(int mt, bool direct, const Params &p, dim3 grid, int dev,
                        cudaStream_t stream)
{
    if (direct)
        return launch_direct<WT, AT, SM, IO>(mt, p, grid, dev, stream);
    switch (mt) {
    case 1: return launch<1, WT, AT, SM, IO>(p, grid, dev, stream);
    case 2: return launch<2, WT, AT, SM, IO>(p, grid, dev, stream);
    case 4: return launch<4, WT, AT, SM, IO>(p, grid, dev, stream);
    default: return launch<8, WT, AT, SM, IO>(p, grid, dev, stream);
    }
}

template <int WT, int AT, bool IO>
cudaError_t dispatch_sm(bool sm, int mt, bool direct, const Params &p, dim3 grid, int dev,
                        cudaStream_t stream)
{
    return sm ? dispatch_mt<WT, AT, true, IO>(mt, direct, p, grid, dev, stream)
              : dispatch_mt<WT, AT, false, IO>(mt, direct, p, grid, dev, stream);
}

/* From the weight and activation types to the instantiation. */
template <bool IO>
cudaError_t dispatch_types(kcu_wtype wt, kcu_atype at, bool sm, int mt, bool direct,
                           const Params &p, dim3 grid, int dev, cudaStream_t stream)
{
    if (wt == KCU_W_INT8)
        return at == KCU_A_F16 ? dispatch_sm<0, 0, IO>(sm, mt, direct, p, grid, dev, stream)
                               : dispatch_sm<0, 1, IO>(sm, mt, direct, p, grid, dev, stream);
    return at == KCU_A_F16 ? dispatch_sm<1, 0, IO>(sm, mt, direct, p, grid, dev, stream)
                           : dispatch_sm<1, 1, IO>(sm, mt, direct, p, grid, dev, stream);
}

/* Loads every instantiation and sets its shared-memory limit on device dev. */
template <int WT, int AT, bool SM, bool IO>
cudaError_t warm_all(int dev)
{
    cudaError_t e;
    if ((e = prepare<1, WT, AT, SM, IO>(dev)) != cudaSuccess ||
        (e = prepare<2, WT, AT, SM, IO>(dev)) != cudaSuccess ||
        (e = prepare<4, WT, AT, SM, IO>(dev)) != cudaSuccess ||
        (e = prepare<8, WT, AT, SM, IO>(dev)) != cudaSuccess)
        return e;
    return warm_direct<WT, AT, SM, IO>(dev);
}

/* warm_all for both smoothings, both weight and both activation types. */
template <bool IO>
cudaError_t warm_io(int dev)
{
    cudaError_t e;
    if ((e = warm_all<0, 0, false, IO>(dev)) != cudaSuccess ||
        (e = warm_all<0, 1, false, IO>(dev)) != cudaSuccess ||
        (e = warm_all<1, 0, false, IO>(dev)) != cudaSuccess ||
        (e = warm_all<1, 1, false, IO>(dev)) != cudaSuccess ||
        (e = warm_all<0, 0, true, IO>(dev)) != cudaSuccess ||
        (e = warm_all<0, 1, true, IO>(dev)) != cudaSuccess ||
        (e = warm_all<1, 0, true, IO>(dev)) != cudaSuccess)
        return e;
    return warm_all<1, 1, true, IO>(dev);
}

/* Rounded-up integer division for the planner. */
int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

} /* namespace */

/* ========================================================================
 * extern "C" API
 * ====================================================================== */

/* Token tile by m; then enough K splits for ~target_blocks blocks, at
 * least two chunks per split, no empty split. Pure and host-only. */
extern "C" int kcu_w8a16_make_plan(int m, int n, int k, int sms, const kcu_w8a16_opts *o,
                                   kcu_w8a16_plan *p)
{
    if (m < 1 || n < 1 || k < 1 || !p)
        return -1;
    const int bm = m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : 64;
    p->bm = bm;
    p->bn = BN;
    p->grid_m = ceil_div(m, bm);
    p->grid_n = ceil_div(n, BN);
    p->nchunks = ceil_div(k, KC);
    if (p->grid_m > 65535)
        return -1;
    const long base = (long)p->grid_m * p->grid_n;
    const int target = o && o->target_blocks > 0 ? o->target_blocks : 2 * (sms > 0 ? sms : 1);
    const int max_splits = o && o->max_splits > 0 ? o->max_splits : 32;
    int splits;
    if (o && o->force_splits > 0) {
        splits = o->force_splits;
    } else {
        splits = base >= target ? 1 : ceil_div(target, base);
        /* at least two chunks per split, so each block pipelines something */
        const int by_k = p->nchunks / 2 > 1 ? p->nchunks / 2 : 1;
        splits = splits < by_k ? splits : by_k;
    }
    if (splits > max_splits)
        splits = max_splits;
    if (splits > p->nchunks)
        splits = p->nchunks;
    if (splits < 1)
        splits = 1;
    p->chunks_per_split = ceil_div(p->nchunks, splits);
    p->splits = ceil_div(p->nchunks, p->chunks_per_split); /* no empty split */
    p->ws_floats = p->splits > 1 ? (size_t)base * p->splits * THREADS * 4 * (bm / 8) : 0;
    p->counters = p->splits > 1 ? (int)base : 0;
    return 0;
}

/* Which kernel runs at m: the direct one only when asked for and m <= 16
 * (one or two 8-token tiles); the staged one otherwise. Pure. */
extern "C" int kcu_w8a16_direct(int m, const kcu_w8a16_opts *o)
{
    return o && o->kernel == KCU_W8A16_DIRECT && m >= 1 && m <= 16;
}

/* Checks the arguments, plans (falling back to one split when the workspace
 * is short) and launches. */
extern "C" cudaError_t kcu_w8a16_gemm(const float *x, int ldx, const void *w, int ldw,
                                      kcu_wtype wt, const float *scale, const float *bias,
                                      kcu_act act, float *y, int ldy, int m, int n, int k,
                                      kcu_atype at, const kcu_w8a16_opts *opts, float *ws,
                                      size_t ws_floats, int *counters, int ncounters,
                                      cudaStream_t stream)
{
    return kcu_w8a16_gemm_mul(x, ldx, w, ldw, wt, scale, bias, act, y, ldy, m, n, k, at, NULL,
                              opts, ws, ws_floats, counters, ncounters, stream);
}

/* What kcu_w8a16_gemm_mul and kcu_w8a16_gemm_16 share: checks the
 * arguments, plans (falling back to one split when the workspace is short)
 * and launches; p arrives with its row pointers (x, y, bias or xh, yh,
 * biash) set, io says which. */
static cudaError_t run_gemm(Params &p, bool io, const void *x, int ldx, const void *w, int ldw,
                            kcu_wtype wt, const float *scale, const void *y, int ldy, kcu_act act,
                            int m, int n, int k, kcu_atype at, const float *in_mul,
                            const kcu_w8a16_opts *opts, float *ws, size_t ws_floats, int *counters,
                            int ncounters, cudaStream_t stream)
{
    if (m == 0 || n == 0)
        return cudaSuccess;
    if (m < 0 || n < 0 || k < 1 || !x || !w || !scale || !y || ldx < k || ldy < n || ldw < k ||
        (ldw & 15) || ((uintptr_t)w & 15) || ((uintptr_t)in_mul & 15))
        return cudaErrorInvalidValue;
    if (io && (((uintptr_t)x & 7) || (ldx & 3))) /* the 8-byte copies of four values */
        return cudaErrorInvalidValue;
    int dev = 0;
    const int sms = device_sms(&dev);
    if (sms < 0)
        return cudaErrorInvalidDevice;
    kcu_w8a16_plan plan;
    if (kcu_w8a16_make_plan(m, n, k, sms, opts, &plan) != 0)
        return cudaErrorInvalidValue;
    if (plan.splits > 1 &&
        (!ws || !counters || ws_floats < plan.ws_floats || ncounters < plan.counters)) {
        kcu_w8a16_opts one = opts ? *opts : kcu_w8a16_opts{0, 0, 0, 0};
        one.force_splits = 1;
        kcu_w8a16_make_plan(m, n, k, sms, &one, &plan);
    }
    p.w = static_cast<const uint8_t *>(w);
    p.scale = scale;
    p.mul = in_mul;
    p.ws = ws;
    p.counters = counters;
    p.ldx = ldx;
    p.ldw = ldw;
    p.ldy = ldy;
    p.m = m;
    p.n = n;
    p.k = k;
    p.nchunks = plan.nchunks;
    p.chunks_per_split = plan.chunks_per_split;
    p.gelu = act == KCU_ACT_GELU;
    p.xvec = ((uintptr_t)x & 15) == 0 && (ldx & 3) == 0;
    const dim3 grid(plan.grid_n, plan.grid_m, plan.splits);
    const int mt = plan.bm / 8;
    const bool sm = in_mul != NULL;
    const bool direct = kcu_w8a16_direct(m, opts);
    return io ? dispatch_types<true>(wt, at, sm, mt, direct, p, grid, dev, stream)
              : dispatch_types<false>(wt, at, sm, mt, direct, p, grid, dev, stream);
}

extern "C" cudaError_t kcu_w8a16_gemm_mul(const float *x, int ldx, const void *w, int ldw,
                                          kcu_wtype wt, const float *scale, const float *bias,
                                          kcu_act act, float *y, int ldy, int m, int n, int k,
                                          kcu_atype at, const float *in_mul,
                                          const kcu_w8a16_opts *opts, float *ws, size_t ws_floats,
                                          int *counters, int ncounters, cudaStream_t stream)
{
    Params p = {};
    p.x = x;
    p.bias = bias;
    p.y = y;
    return run_gemm(p, false, x, ldx, w, ldw, wt, scale, y, ldy, act, m, n, k, at, in_mul, opts,
                    ws, ws_floats, counters, ncounters, stream);
}

extern "C" cudaError_t kcu_w8a16_gemm_16(const void *x, int ldx, const void *w, int ldw,
                                         kcu_wtype wt, const float *scale, const void *bias,
                                         kcu_act act, void *y, int ldy, int m, int n, int k,
                                         kcu_dtype dt, const float *in_mul,
                                         const kcu_w8a16_opts *opts, float *ws, size_t ws_floats,
                                         int *counters, int ncounters, cudaStream_t stream)
{
    if (dt != KCU_DT_F16 && dt != KCU_DT_BF16)
        return cudaErrorInvalidValue;
    Params p = {};
    p.xh = static_cast<const uint16_t *>(x);
    p.biash = static_cast<const uint16_t *>(bias);
    p.yh = static_cast<uint16_t *>(y);
    return run_gemm(p, true, x, ldx, w, ldw, wt, scale, y, ldy, act, m, n, k,
                    dt == KCU_DT_F16 ? KCU_A_F16 : KCU_A_BF16, in_mul, opts, ws, ws_floats,
                    counters, ncounters, stream);
}

/* Every instantiation: (MT, WT, AT, SM, IO) of the staged kernel (64) and
 * of the direct one (32). */
extern "C" cudaError_t kcu_w8a16_warm(void)
{
    int dev = 0;
    if (device_sms(&dev) < 0)
        return cudaErrorInvalidDevice;
    const cudaError_t e = warm_io<false>(dev);
    return e != cudaSuccess ? e : warm_io<true>(dev);
}

/* The plan's workspace at every m that can split: m up to 32 has one token
 * tile; from there on bm = 64 and grid_m grows until the tiles alone fill
 * the target (no split), so the m = 64 * grid_m are the candidates. */
extern "C" size_t kcu_w8a16_ws_bound(int n, int k, int sms, const kcu_w8a16_opts *o,
                                     int *counters)
{
    static const int small[] = {8, 16, 32};
    size_t best = 0;
    int cnt = 0;
    kcu_w8a16_plan pl;
    for (int i = 0; i < 3; i++)
        if (kcu_w8a16_make_plan(small[i], n, k, sms, o, &pl) == 0) {
            best = pl.ws_floats > best ? pl.ws_floats : best;
            cnt = pl.counters > cnt ? pl.counters : cnt;
        }
    for (int gm = 1; gm <= 65535; gm++) {
        if (kcu_w8a16_make_plan(64 * gm, n, k, sms, o, &pl) != 0)
            break;
        best = pl.ws_floats > best ? pl.ws_floats : best;
        cnt = pl.counters > cnt ? pl.counters : cnt;
        if (pl.splits == 1 && !(o && o->force_splits > 0))
            break; /* more tiles only split less */
    }
    if (counters)
        *counters = cnt;
    return best;
}

/* Walks back from the largest m while the alternative keeps winning. */
extern "C" int kcu_pick_crossover(const int *ms, const double *t_fused, const double *t_alt,
                                  int count)
{
    int best = INT_MAX;
    for (int i = count - 1; i >= 0; i--) {
        if (!(t_alt[i] < t_fused[i])) /* NaN timings count as "fused wins" */
            break;
        best = ms[i];
    }
    return best;
}
