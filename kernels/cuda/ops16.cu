/* ops16.cu: the encoder's memory-bound kernels on 16-bit activations
 * (issue 24, item 1): embedding, residual + LayerNorm, mean pooling and the
 * bias/GELU fallback read and write f16 or bf16 rows (the bias too), so that an fp16 or
 * bf16 forward moves half the bytes between ops and needs no FP32 -> 16-bit
 * conversion before each GEMM. Arithmetic is FP32 throughout (sums,
 * statistics, GELU), each stored value rounded once to nearest even: the
 * same formulas as ops.cu's FP32 kernels (the embedding, LayerNorm by block
 * and pooling are the same templates, rows.cuh), so tests/gpu/test_gpu_ops16.c
 * checks them against an FP64 reference of those formulas on the decoded
 * inputs. What is here is what only 16-bit rows have: LayerNorm with eight
 * values per 16-byte load, and the bias/GELU pass with a 16-bit bias.
 */
#include "kernels/cuda/kcu.h"
#include "kernels/cuda/rows.cuh"

#include <limits.h>
#include <stdint.h>

namespace {

/* Eight 16-bit values (one 16-byte load) as FP32, and back. */
template <typename T> __device__ __forceinline__ void unpack8(const uint4 &u, float (&f)[8])
{
    const float2 a = row<T>::unpack2(u.x), b = row<T>::unpack2(u.y), c = row<T>::unpack2(u.z),
                 d = row<T>::unpack2(u.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

template <typename T> __device__ __forceinline__ uint4 pack8(const float (&f)[8])
{
    return make_uint4(row<T>::pack2(f[0], f[1]), row<T>::pack2(f[2], f[3]), row<T>::pack2(f[4], f[5]),
                      row<T>::pack2(f[6], f[7]));
}

/* The W8A8 rows a LayerNorm writes beside its output (kcu_layernorm_16_q):
 * codes (t, 8 ldq8) with zero columns from h on, one scale per row, of the
 * stored output times mul (per column, or NULL). */
struct ln_q {
    const float4 *mul;
    uint2 *xq;
    int ldq8;
    float *xs;
};

/* A warp's row (v: lane's NV groups of eight stored outputs) as 8-bit
 * codes (I8: int8, else E4M3) and a scale, into q's row `row`. */
template <int NV, bool I8>
__device__ __forceinline__ void ln_quant_row(float (&v)[NV][8], int lane, int row, int h8,
                                             const ln_q &q)
{
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int c = lane + 32 * i;
        if (c < h8) {
            if (q.mul) {
                const float4 m0 = q.mul[2 * c], m1 = q.mul[2 * c + 1];
                const float mm[8] = {m0.x, m0.y, m0.z, m0.w, m1.x, m1.y, m1.z, m1.w};
#pragma unroll
                for (int j = 0; j < 8; j++)
                    v[i][j] *= mm[j];
            }
#pragma unroll
            for (int j = 0; j < 8; j++)
                amax = fmaxf(amax, fabsf(v[i][j]));
        }
    }
    amax = warp_max(amax);
    const float s = amax > 0.f ? amax / code_max<I8>() : 1.0f;
    uint2 *qr = q.xq + (size_t)row * q.ldq8;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int c = lane + 32 * i;
        if (c < h8)
            qr[c] = make_uint2(code8<I8>(v[i][0] / s) | code8<I8>(v[i][1] / s) << 8 |
                                   code8<I8>(v[i][2] / s) << 16 | code8<I8>(v[i][3] / s) << 24,
                               code8<I8>(v[i][4] / s) | code8<I8>(v[i][5] / s) << 8 |
                                   code8<I8>(v[i][6] / s) << 16 | code8<I8>(v[i][7] / s) << 24);
    }
    for (int c = h8 + lane; c < q.ldq8; c += 32)
        qr[c] = make_uint2(0u, 0u);
    if (lane == 0)
        q.xs[row] = s;
}

/* One warp per row, eight values per lane per step (NV steps, h <= 256 NV,
 * h % 8 == 0, rows and gamma/beta 16-byte aligned): the row is read once
 * into registers as FP32, the two-pass statistics of layernorm_vec_kernel,
 * written once. out may alias x or res: every read of a row precedes its
 * writes, and a row belongs to one warp. Q 1 (E4M3) or 2 (int8): also the
 * row's codes and scale (q), from the rounded outputs by quant_rows_kernel's
 * arithmetic (absmax of out * mul, s = absmax / code_max, code = out * mul / s
 * rounded), so the W8A8 GEMM after it needs no quantization pass. */
template <typename T, int NV, int Q>
__global__ void layernorm16_vec_kernel(const uint4 *x, const uint4 *res, const float4 *g,
                                       const float4 *b, int t, int h8, float eps, uint4 *out,
                                       ln_q q)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= t)
        return;
    const uint4 *xr = x + (size_t)row * h8;
    const uint4 *rr = res ? res + (size_t)row * h8 : nullptr;
    float v[NV][8];
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int c = lane + 32 * i;
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[i][j] = 0.f;
        if (c < h8) {
            unpack8<T>(xr[c], v[i]);
            if (rr) {
                float q[8];
                unpack8<T>(rr[c], q);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    v[i][j] += q[j];
            }
#pragma unroll
            for (int j = 0; j < 8; j++)
                sum += v[i][j];
        }
    }
    const float hf = (float)(8 * h8);
    const float mean = warp_sum(sum) / hf;
    float var = 0.f;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (lane + 32 * i < h8) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float d = v[i][j] - mean;
                var += d * d;
            }
        }
    const float rstd = 1.0f / sqrtf(warp_sum(var) / hf + eps);
    uint4 *o = out + (size_t)row * h8;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int c = lane + 32 * i;
        if (c < h8) {
            const float4 g0 = g[2 * c], g1 = g[2 * c + 1], b0 = b[2 * c], b1 = b[2 * c + 1];
            const float gg[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
            const float bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
            float y[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                y[j] = (v[i][j] - mean) * rstd * gg[j] + bb[j];
            const uint4 p = pack8<T>(y);
            o[c] = p;
            if constexpr (Q != 0)
                unpack8<T>(p, v[i]); /* what the GEMM after would read */
        }
    }
    if constexpr (Q != 0)
        ln_quant_row<NV, Q == 2>(v, lane, row, h8, q);
}

/* y = round(act(y + bias)) on 16-bit y and bias, eight values per thread
 * per step (n % 8 == 0, y rows and bias 16-byte aligned), grid-strided
 * over m * n/8; the sum in FP32. */
template <typename T>
__global__ void bias_act16_vec_kernel(uint4 *y, int ldy8, unsigned m, unsigned n8,
                                      const uint4 *bias, int gelu)
{
    const size_t total = (size_t)m * n8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const unsigned r = (unsigned)(i / n8), c = (unsigned)(i % n8);
        uint4 *p = y + (size_t)r * ldy8 + c;
        float f[8];
        unpack8<T>(*p, f);
        if (bias) {
            float bb[8];
            unpack8<T>(bias[c], bb);
#pragma unroll
            for (int j = 0; j < 8; j++)
                f[j] += bb[j];
        }
        if (gelu) {
#pragma unroll
            for (int j = 0; j < 8; j++)
                f[j] = gelu_erf(f[j]);
        }
        *p = pack8<T>(f);
    }
}

template <typename T>
__global__ void bias_act16_kernel(T *y, int ldy, int m, int n, const T *bias, int gelu)
{
    for (int r = blockIdx.y; r < m; r += gridDim.y)
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x) {
            T *p = y + (size_t)r * ldy + c;
            float v = row<T>::ld(*p) + (bias ? row<T>::ld(bias[c]) : 0.f);
            *p = row<T>::st(gelu ? gelu_erf(v) : v);
        }
}

/* ---------------------------------------------------------------------- */

/* Whether LayerNorm on these rows takes the register kernel. */
bool ln_vec_fits(const void *x, const void *res, const float *gamma, const float *beta, int h,
                 const void *out)
{
    return h % 8 == 0 && h <= 1024 && aligned(x, 16) && aligned(res, 16) && aligned(gamma, 16) &&
           aligned(beta, 16) && aligned(out, 16);
}

/* The register kernel for h (ln_vec_fits), with (Q 1: E4M3, 2: int8) or
 * without (0) the W8A8 rows. */
template <typename T, int Q>
void layernorm16_vec(const void *x, const void *res, const float *gamma, const float *beta, int t,
                     int h, float eps, void *out, const ln_q &q, cudaStream_t stream)
{
    const int rows_per_block = THREADS / 32;
    const unsigned grid = (unsigned)((t + rows_per_block - 1) / rows_per_block);
    const int h8 = h / 8;
    const uint4 *x8 = static_cast<const uint4 *>(x), *r8 = static_cast<const uint4 *>(res);
    const float4 *g4 = reinterpret_cast<const float4 *>(gamma),
                 *b4 = reinterpret_cast<const float4 *>(beta);
    uint4 *o8 = static_cast<uint4 *>(out);
    if (h8 <= 32)
        layernorm16_vec_kernel<T, 1, Q><<<grid, THREADS, 0, stream>>>(x8, r8, g4, b4, t, h8, eps, o8, q);
    else if (h8 <= 64)
        layernorm16_vec_kernel<T, 2, Q><<<grid, THREADS, 0, stream>>>(x8, r8, g4, b4, t, h8, eps, o8, q);
    else if (h8 <= 96)
        layernorm16_vec_kernel<T, 3, Q><<<grid, THREADS, 0, stream>>>(x8, r8, g4, b4, t, h8, eps, o8, q);
    else
        layernorm16_vec_kernel<T, 4, Q><<<grid, THREADS, 0, stream>>>(x8, r8, g4, b4, t, h8, eps, o8, q);
}

template <typename T>
cudaError_t layernorm16(const void *x, const void *res, const float *gamma, const float *beta,
                        int t, int h, float eps, void *out, cudaStream_t stream)
{
    if (ln_vec_fits(x, res, gamma, beta, h, out)) {
        layernorm16_vec<T, 0>(x, res, gamma, beta, t, h, eps, out, ln_q{}, stream);
    } else {
        layernorm_block_kernel<T><<<t < 65536 ? t : 65536, THREADS, 0, stream>>>(
            static_cast<const T *>(x), static_cast<const T *>(res), gamma, beta, t, h, eps,
            static_cast<T *>(out));
    }
    return cudaGetLastError();
}

template <typename T>
cudaError_t bias_act16(void *y, int ldy, int m, int n, const void *bias, int gelu,
                       cudaStream_t stream)
{
    if (n % 8 == 0 && ldy % 8 == 0 && aligned(y, 16) && aligned(bias, 16) &&
        (long)m * (n / 8) < INT_MAX)
        bias_act16_vec_kernel<T><<<grid_1d((long)m * (n / 8)), THREADS, 0, stream>>>(
            static_cast<uint4 *>(y), ldy / 8, (unsigned)m, (unsigned)(n / 8),
            static_cast<const uint4 *>(bias), gelu);
    else
        bias_act16_kernel<T><<<grid_2d(m, n), THREADS, 0, stream>>>(static_cast<T *>(y), ldy, m, n,
                                                                    static_cast<const T *>(bias), gelu);
    return cudaGetLastError();
}

bool is16(kcu_dtype dt)
{
    return dt == KCU_DT_F16 || dt == KCU_DT_BF16;
}

} /* namespace */

extern "C" cudaError_t kcu_embed_16(const int32_t *ids, const int32_t *offsets, int nseq,
                                    const float *word, const float *pos, const float *type0, int h,
                                    void *out, kcu_dtype dt, cudaStream_t stream)
{
    if (nseq <= 0)
        return cudaSuccess;
    if (!ids || !offsets || !word || !pos || !type0 || !out || h <= 0 || !is16(dt))
        return cudaErrorInvalidValue;
    const int threads = h >= 256 ? 256 : 128;
    if (dt == KCU_DT_F16)
        embed_kernel<__half><<<dim3(nseq, EMBED_Y), threads, 0, stream>>>(
            ids, offsets, word, pos, type0, h, static_cast<__half *>(out));
    else
        embed_kernel<__nv_bfloat16><<<dim3(nseq, EMBED_Y), threads, 0, stream>>>(
            ids, offsets, word, pos, type0, h, static_cast<__nv_bfloat16 *>(out));
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_layernorm_16(const void *x, const void *res, const float *gamma,
                                        const float *beta, int t, int h, float eps, void *out,
                                        kcu_dtype dt, cudaStream_t stream)
{
    if (t <= 0)
        return cudaSuccess;
    if (!x || !gamma || !beta || !out || h <= 0 || !is16(dt))
        return cudaErrorInvalidValue;
    return dt == KCU_DT_F16
               ? layernorm16<__half>(x, res, gamma, beta, t, h, eps, out, stream)
               : layernorm16<__nv_bfloat16>(x, res, gamma, beta, t, h, eps, out, stream);
}

extern "C" cudaError_t kcu_layernorm_16_q(const void *x, const void *res, const float *gamma,
                                          const float *beta, int t, int h, float eps, void *out,
                                          kcu_dtype dt, const float *mul, kcu_wtype code,
                                          uint8_t *xq, int ldq, float *row_scale,
                                          cudaStream_t stream)
{
    if (t <= 0)
        return cudaSuccess;
    if (!x || !gamma || !beta || !out || !xq || !row_scale || h <= 0 || ldq < h || !is16(dt) ||
        (code != KCU_W_INT8 && code != KCU_W_E4M3))
        return cudaErrorInvalidValue;
    if (!ln_vec_fits(x, res, gamma, beta, h, out) || ldq % 8 || !aligned(xq, 8) ||
        !aligned(mul, 16))
        return cudaErrorNotSupported;
    const ln_q q = {reinterpret_cast<const float4 *>(mul), reinterpret_cast<uint2 *>(xq),
                    ldq / 8, row_scale};
    const bool i8 = code == KCU_W_INT8, h16 = dt == KCU_DT_F16;
    if (h16 && !i8)
        layernorm16_vec<__half, 1>(x, res, gamma, beta, t, h, eps, out, q, stream);
    else if (h16)
        layernorm16_vec<__half, 2>(x, res, gamma, beta, t, h, eps, out, q, stream);
    else if (!i8)
        layernorm16_vec<__nv_bfloat16, 1>(x, res, gamma, beta, t, h, eps, out, q, stream);
    else
        layernorm16_vec<__nv_bfloat16, 2>(x, res, gamma, beta, t, h, eps, out, q, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_mean_pool_16(const void *x, kcu_dtype dt, const int32_t *offsets,
                                        int nseq, int h, int normalize, float *out,
                                        cudaStream_t stream)
{
    if (nseq <= 0)
        return cudaSuccess;
    if (!x || !offsets || !out || h <= 0 || !is16(dt))
        return cudaErrorInvalidValue;
    const int threads = pool_threads(h);
    if (dt == KCU_DT_F16)
        mean_pool_kernel<__half><<<nseq, threads, 0, stream>>>(static_cast<const __half *>(x),
                                                                 offsets, h, normalize, out);
    else
        mean_pool_kernel<__nv_bfloat16><<<nseq, threads, 0, stream>>>(
            static_cast<const __nv_bfloat16 *>(x), offsets, h, normalize, out);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_bias_act_16(void *y, kcu_dtype dt, int ldy, int m, int n,
                                       const void *bias, kcu_act act, cudaStream_t stream)
{
    if (m <= 0 || n <= 0 || (!bias && act == KCU_ACT_NONE))
        return cudaSuccess;
    if (!y || ldy < n || !is16(dt))
        return cudaErrorInvalidValue;
    const int gelu = act == KCU_ACT_GELU;
    return dt == KCU_DT_F16 ? bias_act16<__half>(y, ldy, m, n, bias, gelu, stream)
                            : bias_act16<__nv_bfloat16>(y, ldy, m, n, bias, gelu, stream);
}

extern "C" cudaError_t kcu_warm_16(void)
{
    cudaFuncAttributes a;
    const void *const fns[] = {
        (const void *)embed_kernel<__half>,
        (const void *)embed_kernel<__nv_bfloat16>,
        (const void *)layernorm16_vec_kernel<__half, 1, 0>,
        (const void *)layernorm16_vec_kernel<__half, 2, 0>,
        (const void *)layernorm16_vec_kernel<__half, 3, 0>,
        (const void *)layernorm16_vec_kernel<__half, 4, 0>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 1, 0>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 2, 0>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 3, 0>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 4, 0>,
        (const void *)layernorm16_vec_kernel<__half, 1, 1>,
        (const void *)layernorm16_vec_kernel<__half, 2, 1>,
        (const void *)layernorm16_vec_kernel<__half, 3, 1>,
        (const void *)layernorm16_vec_kernel<__half, 4, 1>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 1, 1>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 2, 1>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 3, 1>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 4, 1>,
        (const void *)layernorm16_vec_kernel<__half, 1, 2>,
        (const void *)layernorm16_vec_kernel<__half, 2, 2>,
        (const void *)layernorm16_vec_kernel<__half, 3, 2>,
        (const void *)layernorm16_vec_kernel<__half, 4, 2>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 1, 2>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 2, 2>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 3, 2>,
        (const void *)layernorm16_vec_kernel<__nv_bfloat16, 4, 2>,
        (const void *)layernorm_block_kernel<__half>,
        (const void *)layernorm_block_kernel<__nv_bfloat16>,
        (const void *)mean_pool_kernel<__half>,
        (const void *)mean_pool_kernel<__nv_bfloat16>,
        (const void *)bias_act16_vec_kernel<__half>,
        (const void *)bias_act16_vec_kernel<__nv_bfloat16>,
        (const void *)bias_act16_kernel<__half>,
        (const void *)bias_act16_kernel<__nv_bfloat16>,
    };
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
        const cudaError_t e = cudaFuncGetAttributes(&a, fns[i]);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
