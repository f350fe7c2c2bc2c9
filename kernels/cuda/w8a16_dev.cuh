/* w8a16_dev.cuh: what the two W8A16 kernels share (gemm_w8a16.cu, the
 * staged kernel and the launch API; gemm_w8a16_direct.cu, the direct
 * kernel): the block shape, the launch parameters, the MMA, the conversions
 * of 8-bit codes and activations to f16/bf16, and the split-K finish and
 * epilogue. Device code for nvcc only; not part of the kcu.h API.
 */
#ifndef MANTISSA_KERNELS_CUDA_W8A16_DEV_CUH
#define MANTISSA_KERNELS_CUDA_W8A16_DEV_CUH

#include "kernels/cuda/kcu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

namespace kcu_w8a16 {

constexpr int KC = 64;             /* K chunk per pipeline stage (weight bytes per row) */
constexpr int WARPS = 8;           /* warps per block, all along n */
constexpr int THREADS = WARPS * 32;
constexpr int BN = WARPS * 16;     /* weight rows per block */
constexpr int MAX_DEVICES = 64;

struct Params {
    const float *x;
    const uint8_t *w;
    const float *scale;
    const float *bias;
    const float *mul; /* smoothing: per-input-channel multipliers (SM instantiations) */
    float *y;
    /* IO instantiations (kcu_w8a16_gemm_16): x, y and bias are 16-bit rows
     * of the MMA's type instead (x, y, bias above unused) */
    const uint16_t *xh;
    uint16_t *yh;
    const uint16_t *biash;
    float *ws;
    int *counters;
    int ldx, ldw, ldy, m, n, k;
    int nchunks, chunks_per_split;
    int gelu;
    int xvec; /* 16-byte activation copies are legal */
};

/* ------------------------------------------------------------------------
 * the MMA
 * ---------------------------------------------------------------------- */

/* D (16x8, f32) += A (16x16) * B (16x8); AT 0: f16 inputs, 1: bf16. */
template <int AT>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
    if (AT == 0)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* ------------------------------------------------------------------------
 * conversions in registers
 * ---------------------------------------------------------------------- */

/* Bit casts between a 32-bit register and a pair of halves. */
__device__ __forceinline__ __half2 bits_h2(uint32_t u)
{
    __half2 h;
    memcpy(&h, &u, 4);
    return h;
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h)
{
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/* Two FP32 activations -> one register of two 16-bit values (lower k in the
 * low half, as the MMA fragments expect); round to nearest even. */
template <int AT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    if (AT == 0) {
        return h2_bits(__floats2half2_rn(lo, hi));
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
}

/* One 16-bit value of the MMA's type (AT 0: f16, 1: bf16) as FP32 (exact),
 * and FP32 rounded to it (nearest even): the IO instantiations' rows. */
template <int AT>
__device__ __forceinline__ float ld16(uint16_t u)
{
    if (AT == 0)
        return __half2float(__ushort_as_half(u));
    return __bfloat162float(__ushort_as_bfloat16(u));
}

template <int AT>
__device__ __forceinline__ uint16_t st16(float f)
{
    if (AT == 0)
        return __half_as_ushort(__float2half_rn(f));
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* Four 16-bit activations (an MMA step's two B registers: k, k+1 | k+2,
 * k+3) times the smoothing multipliers mu in FP32, rounded back: what
 * pack2 gives the FP32 kernels for the widened values times mu. */
template <int AT>
__device__ __forceinline__ uint2 mul4(uint2 b, float4 mu)
{
    const float a0 = ld16<AT>((uint16_t)(b.x & 0xffffu)) * mu.x;
    const float a1 = ld16<AT>((uint16_t)(b.x >> 16)) * mu.y;
    const float a2 = ld16<AT>((uint16_t)(b.y & 0xffffu)) * mu.z;
    const float a3 = ld16<AT>((uint16_t)(b.y >> 16)) * mu.w;
    return make_uint2(pack2<AT>(a0, a1), pack2<AT>(a2, a3));
}

/* Four 8-bit weight codes (one 32-bit word, byte i = k offset i) -> lo
 * (codes 0, 1) and hi (codes 2, 3) as f16x2 or bf16x2. Every conversion is
 * exact: int8 and E4M3 values are all representable in f16 and in bf16.
 *
 * int8 -> f16: the bytes are biased to q + 128 (xor 0x80) and placed under
 * the exponent of 1024 (0x64XX is the half 1024 + XX), then 1152 = 1024 + 128
 * is subtracted: three integer ops and one f16x2 subtract per pair.
 * int8 -> bf16: the same idea in FP32 (2^23 + byte), then a bf16x2 pack.
 * E4M3 -> f16: cuda_fp8.h (one cvt.rn.f16x2.e4m3x2 on sm_89+). */
template <int WT, int AT>
__device__ __forceinline__ void dec4(uint32_t w, uint32_t &lo, uint32_t &hi)
{
    if (WT == 0) {
        const uint32_t u = w ^ 0x80808080u;
        if (AT == 0) {
            const __half2 bias = __half2half2(__ushort_as_half((unsigned short)0x6480)); /* 1152 */
            lo = h2_bits(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4140)), bias));
            hi = h2_bits(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4342)), bias));
        } else {
            float f[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t b = __byte_perm(u, 0x4B000000u, 0x7440 | i);
                f[i] = __uint_as_float(b) - 8388736.0f; /* 2^23 + 128 */
            }
            lo = pack2<1>(f[0], f[1]);
            hi = pack2<1>(f[2], f[3]);
        }
    } else {
        __half2_raw r0 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
        __half2_raw r1 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
        if (AT == 0) {
            lo = (uint32_t)r0.x | ((uint32_t)r0.y << 16);
            hi = (uint32_t)r1.x | ((uint32_t)r1.y << 16);
        } else {
            float2 f0 = __half22float2(__half2(r0)), f1 = __half22float2(__half2(r1));
            lo = pack2<1>(f0.x, f0.y);
            hi = pack2<1>(f1.x, f1.y);
        }
    }
}

/* The A fragments of a chunk's 4 MMA steps from a thread's two 16-byte
 * weight runs (rows g and g + 8, one 32-bit word per step):
 * a[j] = {row g lo, row g+8 lo, row g hi, row g+8 hi}. */
template <int WT, int AT>
__device__ __forceinline__ void dec_runs(const uint4 &wa, const uint4 &wb, uint32_t (&a)[4][4])
{
    dec4<WT, AT>(wa.x, a[0][0], a[0][2]);
    dec4<WT, AT>(wb.x, a[0][1], a[0][3]);
    dec4<WT, AT>(wa.y, a[1][0], a[1][2]);
    dec4<WT, AT>(wb.y, a[1][1], a[1][3]);
    dec4<WT, AT>(wa.z, a[2][0], a[2][2]);
    dec4<WT, AT>(wb.z, a[2][1], a[2][3]);
    dec4<WT, AT>(wa.w, a[3][0], a[3][2]);
    dec4<WT, AT>(wb.w, a[3][1], a[3][3]);
}

/* GELU in BERT's erf form (not the tanh approximation). */
__device__ __forceinline__ float gelu_erf(float v)
{
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

/* After a block's K range: split-K (publish this split's partial; the last
 * block of the tile to arrive sums all partials in split order and goes on)
 * and the epilogue (scale, bias, GELU, store). Shared by both kernels, whose
 * accumulators have the same layout: warp w, rows n0 + 16w + g (+ 8), tokens
 * m0 + 8 mt + 2t (+ 1). */
template <int MT, int AT, bool IO>
__device__ __forceinline__ void finish_tile(const Params &p, float (&acc)[MT][4], int n0, int m0,
                                            int &s_last)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int split = blockIdx.z;
    if (gridDim.z > 1) {
        float4 *wsp = reinterpret_cast<float4 *>(p.ws);
        const size_t tile = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            __stcg(&wsp[((tile * gridDim.z + split) * MT + mt) * THREADS + tid],
                   make_float4(acc[mt][0], acc[mt][1], acc[mt][2], acc[mt][3]));
        __threadfence();
        __syncthreads();
        if (tid == 0)
            s_last = atomicAdd(&p.counters[tile], 1) == (int)gridDim.z - 1;
        __syncthreads();
        if (!s_last)
            return;
        __threadfence();
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int sp = 0; sp < (int)gridDim.z; sp++) {
                const float4 v =
                    sp == split ? make_float4(acc[mt][0], acc[mt][1], acc[mt][2], acc[mt][3])
                                : __ldcg(&wsp[((tile * gridDim.z + sp) * MT + mt) * THREADS + tid]);
                s.x += v.x;
                s.y += v.y;
                s.z += v.z;
                s.w += v.w;
            }
            acc[mt][0] = s.x;
            acc[mt][1] = s.y;
            acc[mt][2] = s.z;
            acc[mt][3] = s.w;
        }
        if (tid == 0)
            p.counters[tile] = 0; /* ready for the next launch */
    }

    /* epilogue: accumulator (row g / g+8, tokens 2t, 2t+1) of each token tile */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int nn = n0 + warp * 16 + g + half * 8;
        if (nn >= p.n)
            continue;
        const float sc = p.scale[nn];
        const float bi = IO ? (p.biash ? ld16<AT>(p.biash[nn]) : 0.f) : (p.bias ? p.bias[nn] : 0.f);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int tok = m0 + mt * 8 + 2 * t + e;
                if (tok < p.m) {
                    float v = fmaf(acc[mt][half * 2 + e], sc, bi);
                    if (p.gelu)
                        v = gelu_erf(v);
                    if (IO)
                        p.yh[(size_t)tok * p.ldy + nn] = st16<AT>(v);
                    else
                        p.y[(size_t)tok * p.ldy + nn] = v;
                }
            }
        }
    }
}

/* Kernel KERNEL with SMEM bytes of dynamic shared memory: its limit raised
 * once per device (the first launch, or warming: which also loads it), then
 * launched. One flag array per instantiation. */
template <void (*KERNEL)(const Params), int SMEM>
cudaError_t prepare_once(int dev)
{
    static unsigned char ready[MAX_DEVICES];
    if (!ready[dev]) {
        const cudaError_t e =
            cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
        if (e != cudaSuccess)
            return e;
        ready[dev] = 1;
    }
    return cudaSuccess;
}

template <void (*KERNEL)(const Params), int SMEM>
cudaError_t launch_once(const Params &p, dim3 grid, int dev, cudaStream_t stream)
{
    const cudaError_t e = prepare_once<KERNEL, SMEM>(dev);
    if (e != cudaSuccess)
        return e;
    KERNEL<<<grid, THREADS, SMEM, stream>>>(p);
    return cudaGetLastError();
}

/* Multiprocessor count of the current device (cached per device), and the
 * device in *out_dev; -1 on error (gemm_w8a16.cu). */
int device_sms(int *out_dev);

/* The direct kernel (gemm_w8a16_direct.cu, instantiated there for every
 * weight type WT, activation type AT, smoothing SM and row type IO: FP32 or
 * 16-bit of type AT): launches it for mt token tiles (1 or 2); warm_direct
 * loads both tile counts on device dev. */
template <int WT, int AT, bool SM, bool IO>
cudaError_t launch_direct(int mt, const Params &p, dim3 grid, int dev, cudaStream_t stream);
template <int WT, int AT, bool SM, bool IO>
cudaError_t warm_direct(int dev);

} /* namespace kcu_w8a16 */

#endif
