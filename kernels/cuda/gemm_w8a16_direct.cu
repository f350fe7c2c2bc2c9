/* gemm_w8a16_direct.cu: the direct W8A16 kernel, for m <= 16.
 *
 * The same GEMM, plan, split-K workspace, epilogue and MMA order as the
 * staged kernel of gemm_w8a16.cu (so bitwise the same results); only the
 * main loop differs. Chosen by kcu_w8a16_opts.kernel = KCU_W8A16_DIRECT
 * (the backend: MANTISSA_CUDA_W8A16_KERNEL=direct); see kernels/cuda/NOTES.md.
 */
#include "kernels/cuda/w8a16_dev.cuh"

namespace kcu_w8a16 {
namespace {

/* Why: on an H200 the staged kernel reached 36-44% of the copy
 * bandwidth at m = 1..4 with 0.88 eligible warps per scheduler: every
 * 64-wide chunk costs a __syncthreads and a cp.async wait, and every block
 * converts the FP32 activations of every chunk again. Here the same block
 * shape, plan and accumulator layout (so the split-K workspace and the
 * epilogue are shared, and the results are bitwise the staged kernel's):
 *   - each thread loads its two 16-byte weight runs per chunk (rows g and
 *     g + 8 of its warp, physical k 16t .. 16t + 15: the k-permutation of
 *     gemm_w8a16.cu) with plain 16-byte loads into a ring of DU chunks of registers,
 *     so DU x 32 bytes per thread are in flight with no barrier between;
 *   - the block's activations are converted to f16/bf16 (smoothing applied)
 *     once per window of XW chunks into shared memory, laid out so that an
 *     MMA step's B fragments are 32 consecutive 8-byte words (16-bit rows,
 *     the IO instantiations: copied as they are, or times the smoothing
 *     multipliers and rounded again);
 *   - the MMAs run in the staged kernel's order (chunk, token tile, step). */

#ifndef KCU_W8A16_DU /* experiments: NVCCFLAGS="-O3 -DKCU_W8A16_DU=8" (watch for spills) */
#define KCU_W8A16_DU 4
#endif
#ifndef KCU_W8A16_XW
#define KCU_W8A16_XW 16
#endif
constexpr int DU = KCU_W8A16_DU; /* chunks of weights in flight per thread (32 B each) */
constexpr int XW = KCU_W8A16_XW; /* chunks of activations per shared-memory window */

template <int MT>
struct DirectTile {
    static constexpr int BM = 8 * MT;
    static constexpr int SMEM = XW * KC * BM * 2; /* f16/bf16 activations of one window */
};

/* 16 bytes of weights, not kept in L1 (each is read once per block). */
__device__ __forceinline__ uint4 ldg_stream16(const uint8_t *ptr)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(ptr));
    return v;
}

/* Keeps the first `left` (0..15) bytes of v, zeroes the rest. */
__device__ __forceinline__ uint4 keep_bytes(uint4 v, int left)
{
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int keep = min(max(left - 4 * i, 0), 4);
        w[i] &= keep >= 4 ? 0xffffffffu : (1u << (8 * keep)) - 1u;
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* A thread's 16-byte run of weight row `row` in K chunk `chunk`: zero for
 * rows >= n and for k >= K (the row padding may hold anything, an E4M3 NaN
 * included). A run that starts below K ends inside the padded row, since
 * ldw and the run's start are multiples of 16. */
__device__ __forceinline__ uint4 load_run(const Params &p, int row, int chunk, int t)
{
    const int gk = chunk * KC + 16 * t;
    if (row >= p.n || gk >= p.k)
        return make_uint4(0u, 0u, 0u, 0u);
    const uint4 v = ldg_stream16(p.w + (size_t)row * p.ldw + gk);
    return p.k - gk >= 16 ? v : keep_bytes(v, p.k - gk);
}

/* Converts the activations of chunks c0 .. c0 + nc - 1 (tokens m0 .. m0 +
 * BM - 1) into the window: the 8-byte word of (chunk cw, step j, token,
 * thread column t) at ((cw * 4 + j) * BM + token) * 4 + t holds physical k
 * 16t + 4j .. 16t + 4j + 3, rounded as the staged kernel rounds them (FP32
 * times the smoothing multiplier, then round to nearest). Tokens >= m and
 * k >= K are zeros. */
template <int MT, int AT, bool SM, bool IO>
__device__ __forceinline__ void fill_window(const Params &p, uint2 *sx, int c0, int nc, int m0)
{
    constexpr int BM = 8 * MT;
    for (int idx = threadIdx.x; idx < BM * nc * 16; idx += THREADS) {
        const int q = idx & 15, cw = (idx >> 4) % nc, tok = (idx >> 4) / nc;
        const int gm = m0 + tok, gk = (c0 + cw) * KC + 4 * q;
        if (IO) { /* 16-bit rows: the four values as they are (times mul, rounded again) */
            uint2 u = make_uint2(0u, 0u);
            if (gm < p.m) {
                const uint16_t *src = p.xh + (size_t)gm * p.ldx + gk;
                if (gk + 4 <= p.k) {
                    u = __ldg(reinterpret_cast<const uint2 *>(src)); /* 8-byte aligned rows */
                } else {
                    const uint32_t e0 = gk < p.k ? __ldg(src) : 0u;
                    const uint32_t e1 = gk + 1 < p.k ? __ldg(src + 1) : 0u;
                    const uint32_t e2 = gk + 2 < p.k ? __ldg(src + 2) : 0u;
                    u = make_uint2(e0 | e1 << 16, e2);
                }
                if (SM)
                    u = mul4<AT>(u, __ldg(reinterpret_cast<const float4 *>(p.mul + gk)));
            }
            sx[((cw * 4 + (q & 3)) * BM + tok) * 4 + (q >> 2)] = u;
            continue;
        }
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (gm < p.m) {
            const float *src = p.x + (size_t)gm * p.ldx + gk;
            if (p.xvec && gk + 4 <= p.k) {
                v = __ldg(reinterpret_cast<const float4 *>(src));
            } else {
                v.x = gk < p.k ? __ldg(src) : 0.f;
                v.y = gk + 1 < p.k ? __ldg(src + 1) : 0.f;
                v.z = gk + 2 < p.k ? __ldg(src + 2) : 0.f;
                v.w = gk + 3 < p.k ? __ldg(src + 3) : 0.f;
            }
            if (SM) {
                const float4 mu = __ldg(reinterpret_cast<const float4 *>(p.mul + gk));
                v.x *= mu.x;
                v.y *= mu.y;
                v.z *= mu.z;
                v.w *= mu.w;
            }
        }
        const int t = q >> 2, j = q & 3;
        sx[((cw * 4 + j) * BM + tok) * 4 + t] = make_uint2(pack2<AT>(v.x, v.y), pack2<AT>(v.z, v.w));
    }
}

/* The MMAs of one chunk: wa, wb are this thread's runs of rows g and g + 8;
 * sxc the window's words of this chunk. */
template <int MT, int WT, int AT>
__device__ __forceinline__ void mma_chunk(float (&acc)[MT][4], const uint4 &wa, const uint4 &wb,
                                          const uint2 *sxc, int lane)
{
    constexpr int BM = 8 * MT;
    uint32_t a[4][4];
    dec_runs<WT, AT>(wa, wb, a);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            /* lane (g, t) of token tile mt: word (j * BM + 8 mt + g) * 4 + t */
            const uint2 b = sxc[(j * BM + mt * 8) * 4 + lane];
            mma16816<AT>(acc[mt], a[j][0], a[j][1], a[j][2], a[j][3], b.x, b.y);
        }
    }
}

/* One block, as the staged kernel's (128 weight rows x 8*MT tokens x one K
 * split), MT = 1 or 2. */
template <int MT, int WT, int AT, bool SM, bool IO>
__global__ void __launch_bounds__(THREADS, 2) w8a16_direct_kernel(const Params p)
{
    constexpr int BM = 8 * MT;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_last;
    uint2 *sx = reinterpret_cast<uint2 *>(smem);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int c_begin = blockIdx.z * p.chunks_per_split;
    const int nch = min(c_begin + p.chunks_per_split, p.nchunks) - c_begin; /* >= 1 */
    const int ra = n0 + warp * 16 + g, rb = ra + 8;

    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;

    /* the first DU chunks of weights go out before the activations are read */
    uint4 wa[DU], wb[DU];
#pragma unroll
    for (int u = 0; u < DU; u++) {
        wa[u] = u < nch ? load_run(p, ra, c_begin + u, t) : make_uint4(0u, 0u, 0u, 0u);
        wb[u] = u < nch ? load_run(p, rb, c_begin + u, t) : make_uint4(0u, 0u, 0u, 0u);
    }
    for (int i0 = 0; i0 < nch; i0 += DU) {
#pragma unroll
        for (int u = 0; u < DU; u++) {
            const int i = i0 + u;
            if (i >= nch) /* the same for every thread of the block */
                break;
            if (i % XW == 0) {
                __syncthreads(); /* every warp is done with the last window */
                fill_window<MT, AT, SM, IO>(p, sx, c_begin + i, min(XW, nch - i), m0);
                __syncthreads();
            }
            const uint4 ca = wa[u], cb = wb[u];
            if (i + DU < nch) { /* refill the slot before this chunk's MMAs */
                wa[u] = load_run(p, ra, c_begin + i + DU, t);
                wb[u] = load_run(p, rb, c_begin + i + DU, t);
            }
            mma_chunk<MT, WT, AT>(acc, ca, cb, sx + (size_t)(i % XW) * 4 * BM * 4, lane);
        }
    }
    finish_tile<MT, AT, IO>(p, acc, n0, m0, s_last);
}

/* The direct kernel's instantiations (32 KiB of shared memory at most; the
 * attribute is set anyway, so that warming loads them). */
template <int MT, int WT, int AT, bool SM, bool IO>
cudaError_t prepare_direct(int dev)
{
    return prepare_once<w8a16_direct_kernel<MT, WT, AT, SM, IO>, DirectTile<MT>::SMEM>(dev);
}

template <int MT, int WT, int AT, bool SM, bool IO>
cudaError_t run_direct(const Params &p, dim3 grid, int dev, cudaStream_t stream)
{
    return launch_once<w8a16_direct_kernel<MT, WT, AT, SM, IO>, DirectTile<MT>::SMEM>(p, grid, dev,
                                                                                       stream);
}

} /* namespace */

template <int WT, int AT, bool SM, bool IO>
cudaError_t launch_direct(int mt, const Params &p, dim3 grid, int dev, cudaStream_t stream)
{
    return mt == 1 ? run_direct<1, WT, AT, SM, IO>(p, grid, dev, stream)
                   : run_direct<2, WT, AT, SM, IO>(p, grid, dev, stream);
}

template <int WT, int AT, bool SM, bool IO>
cudaError_t warm_direct(int dev)
{
    const cudaError_t e = prepare_direct<1, WT, AT, SM, IO>(dev);
    return e != cudaSuccess ? e : prepare_direct<2, WT, AT, SM, IO>(dev);
}

/* The (WT, AT, SM, IO) combinations gemm_w8a16.cu dispatches to. */
#define KCU_DIRECT_INSTANCE(WT, AT, SM, IO)                                                    \
    template cudaError_t launch_direct<WT, AT, SM, IO>(int, const Params &, dim3, int,         \
                                                       cudaStream_t);                          \
    template cudaError_t warm_direct<WT, AT, SM, IO>(int);
#define KCU_DIRECT_INSTANCES(IO)                                                               \
    KCU_DIRECT_INSTANCE(0, 0, false, IO)                                                       \
    KCU_DIRECT_INSTANCE(0, 1, false, IO)                                                       \
    KCU_DIRECT_INSTANCE(1, 0, false, IO)                                                       \
    KCU_DIRECT_INSTANCE(1, 1, false, IO)                                                       \
    KCU_DIRECT_INSTANCE(0, 0, true, IO)                                                        \
    KCU_DIRECT_INSTANCE(0, 1, true, IO)                                                        \
    KCU_DIRECT_INSTANCE(1, 0, true, IO)                                                        \
    KCU_DIRECT_INSTANCE(1, 1, true, IO)
KCU_DIRECT_INSTANCES(false)
KCU_DIRECT_INSTANCES(true)
#undef KCU_DIRECT_INSTANCES
#undef KCU_DIRECT_INSTANCE

} /* namespace kcu_w8a16 */
