/* gemm_w8a8_i8.cu: the INT8 W8A8 GEMM on 8-bit tensor cores (issue 24,
 * item 2). cuBLASLt's int8 matmul writes int32 or int8, not 16-bit rows
 * with per-token scales, so an int8 model on f16 activations had no 8-bit
 * tensor-core path; this is it:
 *
 *   y (m, n) 16-bit = act(acc * xs[r] * ws[c] + bias[c]),
 *   acc = sum_k xq[r][k] * w[c][k]   (int8 x int8, exact in int32)
 *
 * xq: per-token int8 activations and their row scales (kcu_quant_rows_16 or
 * the LayerNorm before, kcu_layernorm_16_q); w: the model's per-channel
 * int8 weight rows and scales ws, as uploaded (both zero-padded to k, a
 * multiple of 16). The epilogue is in FP32 (GELU in BERT's erf form, as
 * the W8A16 kernels), y rounded once.
 *
 * The kernel: mma.sync m16n8k32 s8 (sm_80+), a block tile of BM tokens x BN
 * channels, K in 64-byte stages through a 3-stage cp.async pipeline (zero
 * fill past m, n and k). Shared-memory rows are 80 bytes apart, so the
 * 32-bit fragment loads of a warp (8 rows x 4 words) hit 32 distinct banks.
 * Two tile shapes: 64x64 (4 warps) while a 128x128 grid would not fill the
 * GPU once, else 128x128 (8 warps, 64 accumulators a thread).
 */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/kcu.h"
#include "kernels/cuda/rows.cuh"

#include <stdint.h>

namespace {

constexpr int BK = 64;        /* K bytes per pipeline stage */
constexpr int SROW = BK + 16; /* shared row stride: conflict-free fragment loads */
constexpr int STAGES = 3;

/* WM x WN warps, each MT x NT MMA tiles of 16 x 8. */
template <int WM, int WN, int MT, int NT> struct Tile {
    static constexpr int BM = WM * 16 * MT, BN = WN * 8 * NT, THR = WM * WN * 32;
    static constexpr int SMEM = STAGES * (BM + BN) * SROW;
};
using Small = Tile<2, 2, 2, 4>; /* 64 x 64, 128 threads */
using Large = Tile<2, 4, 4, 4>; /* 128 x 128, 256 threads */

struct Params {
    const uint8_t *xq, *w;
    const float *xs, *ws;
    const void *bias;
    void *y;
    int ldq, ldw, ldy, m, n, k, gelu;
};

__device__ __forceinline__ uint32_t lds32(const uint8_t *p)
{
    return *reinterpret_cast<const uint32_t *>(p);
}

/* D (16x8, s32) += A (16x32, s8, row) * B (32x8, s8, col). */
__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* rows x 64 bytes of src (row stride ld, rows from r0, K from k0) into a
 * stage: 16-byte chunks, zero past `rows_valid` and k. */
template <int ROWS, int THR>
__device__ __forceinline__ void load_stage(uint8_t *dst, const uint8_t *src, int ld, int r0,
                                           int rows_valid, int k0, int k)
{
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * 4; i += THR) {
        const int r = i >> 2, c = (i & 3) * 16;
        const bool ok = r0 + r < rows_valid && k0 + c < k;
        cp_async16(dst + r * SROW + c, ok ? src + (size_t)(r0 + r) * ld + k0 + c : src,
                   ok ? 16 : 0);
    }
}

/* One tile's epilogue: acc (MT x NT MMA tiles of this warp) -> y. */
template <typename T, int MT, int NT>
__device__ __forceinline__ void store_tile(const Params &p, const int (&acc)[MT][NT][4], int r0,
                                           int c0)
{
    const int gid = (threadIdx.x & 31) >> 2, tig = threadIdx.x & 3;
    const T *bias = static_cast<const T *>(p.bias);
    T *y = static_cast<T *>(p.y);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + mt * 16 + gid + 8 * h;
            if (r >= p.m)
                continue;
            const float xs = p.xs[r];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int c = c0 + nt * 8 + tig * 2;
                if (c >= p.n)
                    continue;
                float v[2];
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int cj = c + j < p.n ? c + j : c;
                    v[j] = (float)acc[mt][nt][2 * h + j] * xs * p.ws[cj] +
                           (bias ? row<T>::ld(bias[cj]) : 0.f);
                    if (p.gelu)
                        v[j] = gelu_erf(v[j]);
                }
                T *out = y + (size_t)r * p.ldy + c;
                if (c + 1 < p.n && (p.ldy & 1) == 0)
                    row<T>::st2(out, v[0], v[1]);
                else {
                    out[0] = row<T>::st(v[0]);
                    if (c + 1 < p.n)
                        out[1] = row<T>::st(v[1]);
                }
            }
        }
}

template <typename T, int WM, int WN, int MT, int NT>
__global__ void __launch_bounds__(WM * WN * 32) w8a8_i8_kernel(Params p)
{
    using L = Tile<WM, WN, MT, NT>;
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *as = smem, *bs = smem + STAGES * L::BM * SROW;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp % WM, wn = warp / WM, gid = lane >> 2, tig = lane & 3;
    const int m0 = blockIdx.y * L::BM, n0 = blockIdx.x * L::BN;
    const int nk = (p.k + BK - 1) / BK;

    int acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[mt][nt][i] = 0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nk) {
            load_stage<L::BM, L::THR>(as + s * L::BM * SROW, p.xq, p.ldq, m0, p.m, s * BK, p.k);
            load_stage<L::BN, L::THR>(bs + s * L::BN * SROW, p.w, p.ldw, n0, p.n, s * BK, p.k);
        }
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<STAGES - 2>(); /* stage kt has landed (this thread's copies) */
        __syncthreads();             /* everyone's, and stage kt - 1 is no longer read */
        const int nxt = kt + STAGES - 1;
        if (nxt < nk) {
            const int s = nxt % STAGES;
            load_stage<L::BM, L::THR>(as + s * L::BM * SROW, p.xq, p.ldq, m0, p.m, nxt * BK, p.k);
            load_stage<L::BN, L::THR>(bs + s * L::BN * SROW, p.w, p.ldw, n0, p.n, nxt * BK, p.k);
        }
        cp_async_commit();
        const uint8_t *a_st = as + (kt % STAGES) * L::BM * SROW + (wm * 16 * MT) * SROW;
        const uint8_t *b_st = bs + (kt % STAGES) * L::BN * SROW + (wn * 8 * NT) * SROW;
#pragma unroll
        for (int ks = 0; ks < BK; ks += 32) {
            uint32_t a[MT][4], b[NT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const uint8_t *r = a_st + (mt * 16 + gid) * SROW + ks + tig * 4;
                a[mt][0] = lds32(r);
                a[mt][1] = lds32(r + 8 * SROW);
                a[mt][2] = lds32(r + 16);
                a[mt][3] = lds32(r + 8 * SROW + 16);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint8_t *c = b_st + (nt * 8 + gid) * SROW + ks + tig * 4;
                b[nt][0] = lds32(c);
                b[nt][1] = lds32(c + 16);
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    mma_s8(acc[mt][nt], a[mt], b[nt][0], b[nt][1]);
        }
    }
    cp_async_wait<0>();
    store_tile<T, MT, NT>(p, acc, m0 + wm * 16 * MT, n0 + wn * 8 * NT);
}

template <typename T, typename L, int WM, int WN, int MT, int NT>
cudaError_t launch(const Params &p, cudaStream_t stream)
{
    const dim3 grid((unsigned)((p.n + L::BN - 1) / L::BN), (unsigned)((p.m + L::BM - 1) / L::BM));
    w8a8_i8_kernel<T, WM, WN, MT, NT><<<grid, L::THR, L::SMEM, stream>>>(p);
    return cudaGetLastError();
}

template <typename T> cudaError_t run(const Params &p, int sms, cudaStream_t stream)
{
    const long large_blocks = (long)((p.m + Large::BM - 1) / Large::BM) *
                              ((p.n + Large::BN - 1) / Large::BN);
    if (large_blocks >= sms)
        return launch<T, Large, 2, 4, 4, 4>(p, stream);
    return launch<T, Small, 2, 2, 2, 4>(p, stream);
}

bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

} /* namespace */

extern "C" cudaError_t kcu_w8a8_i8_gemm_16(const void *xq, int ldq, const float *xs, const void *w,
                                           int ldw, const float *ws, const void *bias,
                                           kcu_act act, void *y, int ldy, int m, int n, int k,
                                           kcu_dtype dt, int sms, cudaStream_t stream)
{
    if (m <= 0 || n <= 0)
        return cudaSuccess;
    if (!xq || !xs || !w || !ws || !y || k <= 0 || k % 16 || ldq < k || ldw < k || ldq % 16 ||
        ldw % 16 || ldy < n || !aligned16(xq) || !aligned16(w) || ((uintptr_t)y & 3) ||
        (dt != KCU_DT_F16 && dt != KCU_DT_BF16) || m > 65535 * 64)
        return cudaErrorInvalidValue;
    const Params p = {static_cast<const uint8_t *>(xq), static_cast<const uint8_t *>(w), xs, ws,
                      bias, y, ldq, ldw, ldy, m, n, k, act == KCU_ACT_GELU};
    return dt == KCU_DT_F16 ? run<__half>(p, sms > 0 ? sms : 1, stream)
                            : run<__nv_bfloat16>(p, sms > 0 ? sms : 1, stream);
}

extern "C" cudaError_t kcu_w8a8_i8_warm(void)
{
    const void *const large[] = {(const void *)w8a8_i8_kernel<__half, 2, 4, 4, 4>,
                                 (const void *)w8a8_i8_kernel<__nv_bfloat16, 2, 4, 4, 4>};
    const void *const small[] = {(const void *)w8a8_i8_kernel<__half, 2, 2, 2, 4>,
                                 (const void *)w8a8_i8_kernel<__nv_bfloat16, 2, 2, 2, 4>};
    for (int i = 0; i < 2; i++) {
        cudaError_t e = cudaFuncSetAttribute(large[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             Large::SMEM);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(small[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     Small::SMEM);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
