/* rows.cuh: what ops.cu, ops16.cu and attention.cu share on the device.
 * The activation row types (FP32, and the f16/bf16 rows of a 16-bit
 * forward) as loads and stores in FP32 (`row<T>`), the warp and block
 * reductions, BERT's GELU, launch helpers, and the encoder kernels that are
 * the same formula for every row type: the embedding gather, LayerNorm one
 * block per row, mean pooling. FP32 instantiations are the plain FP32
 * kernels (loads and stores are the identity), so their results do not
 * depend on which file launches them. Included by .cu files only. */
#ifndef MT_KERNELS_CUDA_ROWS_CUH
#define MT_KERNELS_CUDA_ROWS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

namespace {

constexpr int THREADS = 256;

/* Whether p (NULL counts as aligned) is a multiple of a bytes. */
inline bool aligned(const void *p, unsigned a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* A flat grid for n work items: enough blocks for every SM several times
 * over, the kernels stride over the rest. */
inline dim3 grid_1d(long n)
{
    long b = (n + THREADS - 1) / THREADS;
    return dim3((unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b));
}

/* A 2-D grid for row-wise elementwise kernels over (rows, cols): x strides
 * columns, y strides rows, so no thread divides an index (64-bit division
 * costs tens of instructions on the GPU). */
inline dim3 grid_2d(int rows, int cols)
{
    unsigned gx = (unsigned)((cols + THREADS - 1) / THREADS);
    gx = gx < 1 ? 1 : gx > 64 ? 64 : gx;
    unsigned gy = (unsigned)(rows < 1 ? 1 : rows > 65535 ? 65535 : rows);
    return dim3(gx, gy);
}

/* ---- row types ------------------------------------------------------------
 * ld / st: one value; ld2 / ld4 / st2: two or four consecutive values
 * (8 / 16 bytes of FP32, 4 / 8 of 16-bit; aligned to that); the 16-bit
 * types also unpack / pack two values held in one 32-bit word. Stores
 * round to nearest even. */
template <typename T> struct row;

template <> struct row<float> {
    static __device__ __forceinline__ float ld(float v) { return v; }
    static __device__ __forceinline__ float st(float f) { return f; }
    static __device__ __forceinline__ float2 ld2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
    static __device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
    static __device__ __forceinline__ void st2(float *p, float a, float b) { *reinterpret_cast<float2 *>(p) = make_float2(a, b); }
};

/* The two 16-bit row types differ only in their conversions (cuda_fp16.h,
 * cuda_bf16.h): one overload of each per type, one struct for both. */
__device__ __forceinline__ float cvt_ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float cvt_ld(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float2 cvt_ld2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 cvt_ld2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
__device__ __forceinline__ void cvt_st(float f, __half &o) { o = __float2half_rn(f); }
__device__ __forceinline__ void cvt_st(float f, __nv_bfloat16 &o) { o = __float2bfloat16_rn(f); }
__device__ __forceinline__ void cvt_st2(float a, float b, __half2 &o) { o = __floats2half2_rn(a, b); }
__device__ __forceinline__ void cvt_st2(float a, float b, __nv_bfloat162 &o) { o = __floats2bfloat162_rn(a, b); }

template <typename T, typename T2> struct row16 {
    static __device__ __forceinline__ float ld(T v) { return cvt_ld(v); }
    static __device__ __forceinline__ T st(float f)
    {
        T o;
        cvt_st(f, o);
        return o;
    }
    static __device__ __forceinline__ float2 unpack2(uint32_t u)
    {
        T2 h;
        memcpy(&h, &u, 4);
        return cvt_ld2(h);
    }
    static __device__ __forceinline__ uint32_t pack2(float a, float b)
    {
        T2 h;
        cvt_st2(a, b, h);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
    static __device__ __forceinline__ float2 ld2(const T *p) { return unpack2(*reinterpret_cast<const uint32_t *>(p)); }
    static __device__ __forceinline__ float4 ld4(const T *p)
    {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        const float2 a = unpack2(u.x), b = unpack2(u.y);
        return make_float4(a.x, a.y, b.x, b.y);
    }
    static __device__ __forceinline__ void st2(T *p, float a, float b) { *reinterpret_cast<uint32_t *>(p) = pack2(a, b); }
};

template <> struct row<__half> : row16<__half, __half2> {};
template <> struct row<__nv_bfloat16> : row16<__nv_bfloat16, __nv_bfloat162> {};

/* ---- arithmetic ------------------------------------------------------------ */

/* GELU in BERT's erf form. */
__device__ __forceinline__ float gelu_erf(float v)
{
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

/* v as an E4M3 code: round to nearest even, saturating to +-448 (the FP8
 * W8A8 activation codes; one cvt on sm_89+). */
__device__ __forceinline__ uint32_t e4m3(float v)
{
    return (uint32_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/* v as an 8-bit activation code of a W8A8 GEMM: E4M3 (e4m3), or (I8) int8
 * rounded to nearest even and clamped to +-127; the row scales divide the
 * row's absmax by code_max<I8>() (448 or 127). */
template <bool I8> __device__ __forceinline__ uint32_t code8(float v)
{
    if constexpr (I8) {
        const int q = __float2int_rn(v);
        return (uint32_t)(q < -127 ? -127 : q > 127 ? 127 : q) & 0xffu;
    } else {
        return e4m3(v);
    }
}

template <bool I8> __host__ __device__ constexpr float code_max()
{
    return I8 ? 127.0f : 448.0f;
}

/* Butterfly reductions over a warp: every lane gets the result. */
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (or max of non-negative values: 0 is the identity) over the block;
 * every thread gets the result. `red` is 32 floats of shared memory. */
__device__ float block_reduce(float v, float *red, bool is_max)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* red may still be read by a previous reduction */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.f;
    return is_max ? warp_max(v) : warp_sum(v);
}

/* ---- the encoder kernels of every row type ------------------------------- */

/* grid (nseq, EMBED_Y): block (s, y) takes tokens offsets[s] + y, + EMBED_Y,
 * ... Each token is a gather from the word table in DRAM, so a block's
 * tokens are a chain of memory latencies: 64 blocks a sequence keep a
 * 128-token sentence to two per block (8 left it at 16: ~18 us of a
 * ~210 us batch-1 forward on an H100, 2026-11-28). */
constexpr int EMBED_Y = 64;

/* out (t, h) = word[ids[i]] + pos[i - offsets[s]] + type0 (kc_embed's twin),
 * summed in FP32 and stored once in the row type. */
template <typename T>
__global__ void embed_kernel(const int32_t *ids, const int32_t *offsets, const float *word,
                             const float *pos, const float *type0, int h, T *out)
{
    const int s = blockIdx.x;
    const int b = offsets[s], e = offsets[s + 1];
    for (int i = b + blockIdx.y; i < e; i += gridDim.y) {
        const float *wr = word + (size_t)ids[i] * h;
        const float *pr = pos + (size_t)(i - b) * h;
        T *o = out + (size_t)i * h;
        for (int c = threadIdx.x; c < h; c += blockDim.x)
            o[c] = row<T>::st(wr[c] + pr[c] + type0[c]);
    }
}

/* Rows too wide (or unaligned) for the register kernels: one block per row,
 * three passes over memory (mean, centred variance, output), FP32. out may
 * alias x or res: each element is read and written by one thread, and the
 * writes come after every read of the statistics passes. */
template <typename T>
__global__ void layernorm_block_kernel(const T *x, const T *res, const float *g, const float *b,
                                       int t, int h, float eps, T *out)
{
    __shared__ float red[32];
    for (int r = blockIdx.x; r < t; r += gridDim.x) {
        const T *xr = x + (size_t)r * h;
        const T *rr = res ? res + (size_t)r * h : nullptr;
        float sum = 0.f;
        for (int c = threadIdx.x; c < h; c += blockDim.x)
            sum += row<T>::ld(xr[c]) + (rr ? row<T>::ld(rr[c]) : 0.f);
        const float mean = block_reduce(sum, red, false) / (float)h;
        float var = 0.f;
        for (int c = threadIdx.x; c < h; c += blockDim.x) {
            const float d = row<T>::ld(xr[c]) + (rr ? row<T>::ld(rr[c]) : 0.f) - mean;
            var += d * d;
        }
        const float rstd = 1.0f / sqrtf(block_reduce(var, red, false) / (float)h + eps);
        T *o = out + (size_t)r * h;
        for (int c = threadIdx.x; c < h; c += blockDim.x)
            o[c] = row<T>::st((row<T>::ld(xr[c]) + (rr ? row<T>::ld(rr[c]) : 0.f) - mean) * rstd *
                                  g[c] +
                              b[c]);
        __syncthreads(); /* the next row's reductions reuse red */
    }
}

/* Threads of a mean-pooling block: one per column, up to 1024. */
__host__ __device__ constexpr int pool_threads(int h)
{
    return h >= 1024 ? 1024 : (h + 31) / 32 * 32;
}

/* One block per sequence (pool_threads(h) threads); thread c sums column c
 * over the sequence's rows in order (as kc_mean_pool), FP32, then the block
 * reduces the squared norm. The rows are loaded POOL_BATCH at a time before
 * they are added (in the same order: the same bits), so a thread waits on
 * memory len / POOL_BATCH times, not len times (one at a time, pooling 128
 * tokens took ~50 us on an H100, 2026-11-28). out (nseq, h) is FP32 for every
 * row type. */
constexpr int POOL_BATCH = 8;
template <typename T>
__global__ void mean_pool_kernel(const T *x, const int32_t *offsets, int h, int normalize,
                                 float *out)
{
    __shared__ float red[32];
    const int s = blockIdx.x;
    const int b = offsets[s], e = offsets[s + 1];
    const int len = e - b;
    const float inv = 1.0f / (len > 0 ? (float)len : 1e-9f);
    float *o = out + (size_t)s * h;
    float n2 = 0.f;
    for (int c = threadIdx.x; c < h; c += blockDim.x) {
        float acc = 0.f;
        int i = b;
        for (; i + POOL_BATCH <= e; i += POOL_BATCH) {
            float v[POOL_BATCH];
#pragma unroll
            for (int j = 0; j < POOL_BATCH; j++)
                v[j] = row<T>::ld(x[(size_t)(i + j) * h + c]);
#pragma unroll
            for (int j = 0; j < POOL_BATCH; j++)
                acc += v[j];
        }
        for (; i < e; i++)
            acc += row<T>::ld(x[(size_t)i * h + c]);
        acc *= inv;
        o[c] = acc;
        n2 += acc * acc;
    }
    if (!normalize)
        return;
    const float nrm = sqrtf(block_reduce(n2, red, false));
    const float k = 1.0f / (nrm > 1e-12f ? nrm : 1e-12f);
    for (int c = threadIdx.x; c < h; c += blockDim.x)
        o[c] *= k;
}

} /* namespace */

#endif
