/* attention.cu: self-attention over packed varlen sequences, on the GPU.
 *
 *   out[i, head] = softmax(Q_i K^T / sqrt(dh)) V   over the keys of i's own sequence
 *
 * qkv rows are (t, 3h) = [Q | K | V] as the QKV GEMM wrote them (FP32, or
 * f16/bf16 in a 16-bit forward: the kernels are templates on that type T);
 * out is (t, h) of the same type. The padding mask is implicit: a block only ever reads keys
 * offsets[s] .. offsets[s+1]-1 of its sequence s, and masks the tail of its
 * last key tile. Nothing about the batch is needed on the host: grids are
 * sized from a length hint and blocks loop over query tiles until they pass
 * the sequence's end.
 *
 * Two kernels:
 *   attn_f16: FlashAttention-2 style on tensor cores. A block of 8 warps
 *     owns 128 queries (16 per warp) of one (sequence, head), so K and V of
 *     a sequence of up to 128 tokens are loaded once per head; tiles of
 *     64 keys are converted to f16 into shared memory; S = Q K^T and O += P V
 *     run as mma.sync m16n8k16 with FP32 accumulators; the softmax is online
 *     (running max and sum per row, FP32, exp2 with log2(e) folded into the
 *     Q scale). P goes from the S accumulators straight into A fragments.
 *   attn_f32: plain FP32 (SIMT) with the same online softmax, for the fp32
 *     variant (whose vectors must match the CPU FP32 path) and head sizes
 *     the tensor-core kernel lacks.
 */
#include "kernels/cuda/kcu.h"
#include "kernels/cuda/rows.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

namespace {

/* Index into one head's relative position bias row (2 maxrel + 1 entries)
 * for key - query distance rel, clamped to the row: a sequence longer than
 * maxrel + 1 (outside the contract) reads the edge entries, never past the
 * table. */
__device__ __forceinline__ int rel_at(int rel, int maxrel)
{
    return min(max(rel, -maxrel), maxrel) + maxrel;
}

/* Two floats -> one f16x2 register (lo in the low half), round to nearest. */
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/* D (16x8 f32) += A (16x16 f16) B (16x8 f16): one warp-wide MMA. */
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8x8 f16 matrices from shared memory, transposed: the B fragments of
 * P V, where B[k = key][n = d] must come from V stored (key, d). */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                  uint32_t &r3, const void *p)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(s));
}

/* ========================================================================
 * tensor-core kernel
 * ====================================================================== */

constexpr int TQ = 128;    /* queries per block (16 per warp) */
constexpr int TK = 64;     /* keys per tile */
constexpr int TC_THREADS = 256;

/* One block: one (head, sequence) and query tiles blockIdx.z, +gridDim.z, ... */
template <int DH, typename T>
__global__ void __launch_bounds__(TC_THREADS) attn_f16_kernel(const T *qkv,
                                                              const int32_t *offsets, int heads,
                                                              float qscale, const float *pos_bias,
                                                              int maxrel, T *out)
{
    constexpr int LD = DH + 8; /* halves per smem row: 16 B of padding, conflict-free */
    constexpr int KSTEPS = DH / 16;
    constexpr int NT_O = DH / 8;
    __shared__ __align__(16) __half ks[TK * LD];
    __shared__ __align__(16) __half vs[TK * LD];

    const int hd = blockIdx.x, s = blockIdx.y;
    const int base = offsets[s], len = offsets[s + 1] - base;
    const int H = heads * DH;
    const size_t stride = 3 * (size_t)H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    for (int q0 = blockIdx.z * TQ; q0 < len; q0 += gridDim.z * TQ) {
        /* this warp's Q rows as A fragments, scaled by log2(e) / sqrt(dh) */
        const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
        uint32_t qf[KSTEPS][4];
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
            const int d = kk * 16 + 2 * t;
            float2 a = make_float2(0.f, 0.f), b = a, c = a, e = a;
            if (r0 < len) {
                const T *q = qkv + (size_t)(base + r0) * stride + hd * DH + d;
                a = row<T>::ld2(q);
                c = row<T>::ld2(q + 8);
            }
            if (r1 < len) {
                const T *q = qkv + (size_t)(base + r1) * stride + hd * DH + d;
                b = row<T>::ld2(q);
                e = row<T>::ld2(q + 8);
            }
            qf[kk][0] = pack_h2(a.x * qscale, a.y * qscale);
            qf[kk][1] = pack_h2(b.x * qscale, b.y * qscale);
            qf[kk][2] = pack_h2(c.x * qscale, c.y * qscale);
            qf[kk][3] = pack_h2(e.x * qscale, e.y * qscale);
        }

        float o[NT_O][4];
#pragma unroll
        for (int i = 0; i < NT_O; i++)
            o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};

        for (int k0 = 0; k0 < len; k0 += TK) {
            __syncthreads(); /* every warp is done with the previous tile */
            for (int i = tid; i < TK * DH / 4; i += TC_THREADS) {
                const int key = i / (DH / 4), c4 = (i % (DH / 4)) * 4;
                float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
                if (k0 + key < len) {
                    const T *kr = qkv + (size_t)(base + k0 + key) * stride + hd * DH + c4;
                    kv = row<T>::ld4(kr + H);
                    vv = row<T>::ld4(kr + 2 * H);
                }
                uint2 kh = make_uint2(pack_h2(kv.x, kv.y), pack_h2(kv.z, kv.w));
                uint2 vh = make_uint2(pack_h2(vv.x, vv.y), pack_h2(vv.z, vv.w));
                *reinterpret_cast<uint2 *>(&ks[key * LD + c4]) = kh;
                *reinterpret_cast<uint2 *>(&vs[key * LD + c4]) = vh;
            }
            __syncthreads();

            /* S (16 x 64 per warp) = Q K^T */
            float sc[TK / 8][4];
#pragma unroll
            for (int nt = 0; nt < TK / 8; nt++) {
                sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
                for (int kk = 0; kk < KSTEPS; kk++) {
                    const __half *kr = &ks[(nt * 8 + g) * LD + kk * 16 + 2 * t];
                    uint32_t b0, b1;
                    memcpy(&b0, kr, 4);
                    memcpy(&b1, kr + 8, 4);
                    mma_f16(sc[nt], qf[kk], b0, b1);
                }
            }
            /* the relative position bias (MPNet; log2 domain like the scores),
             * mask keys past the end, then the online softmax per row (g, g+8) */
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < TK / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + nt * 8 + 2 * t + (e & 1), qi = (e >> 1) ? r1 : r0;
                    if (pos_bias && key < len && qi < len)
                        sc[nt][e] += 1.4426950408889634f *
                                     pos_bias[(size_t)hd * (2 * maxrel + 1) + rel_at(key - qi, maxrel)];
                    if (key >= len)
                        sc[nt][e] = -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], sc[nt][e]);
                }
            }
            float corr[2], mnew[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                mnew[r] = fmaxf(mrow[r], mx[r]); /* finite: key k0 is always valid */
                corr[r] = exp2f(mrow[r] - mnew[r]);
                mrow[r] = mnew[r];
                lrow[r] *= corr[r];
            }
#pragma unroll
            for (int nt = 0; nt < TK / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    sc[nt][e] = exp2f(sc[nt][e] - mnew[e >> 1]);
                    lrow[e >> 1] += sc[nt][e]; /* per-thread partial; reduced at the end */
                }
            }
#pragma unroll
            for (int i = 0; i < NT_O; i++) {
                o[i][0] *= corr[0];
                o[i][1] *= corr[0];
                o[i][2] *= corr[1];
                o[i][3] *= corr[1];
            }
            /* O += P V: the S accumulators of key tiles 2kk, 2kk+1 are the A
             * fragment of k-step kk */
#pragma unroll
            for (int kk = 0; kk < TK / 16; kk++) {
                uint32_t pa[4];
                pa[0] = pack_h2(sc[2 * kk][0], sc[2 * kk][1]);
                pa[1] = pack_h2(sc[2 * kk][2], sc[2 * kk][3]);
                pa[2] = pack_h2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                pa[3] = pack_h2(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
                for (int nd = 0; nd < NT_O; nd += 2) {
                    /* lanes 0-7: keys 0-7 / d nd*8; 8-15: keys 8-15; 16-31: d (nd+1)*8 */
                    const int mi = lane >> 3, rr = lane & 7;
                    const __half *src = &vs[(kk * 16 + (mi & 1) * 8 + rr) * LD + (nd + (mi >> 1)) * 8];
                    uint32_t b0, b1, b2, b3;
                    ldmatrix_x4_trans(b0, b1, b2, b3, src);
                    mma_f16(o[nd], pa, b0, b1);
                    mma_f16(o[nd + 1], pa, b2, b3);
                }
            }
        }

        /* normalise and store the rows that exist */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
            lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
        }
        const float inv0 = 1.0f / lrow[0], inv1 = 1.0f / lrow[1];
#pragma unroll
        for (int nd = 0; nd < NT_O; nd++) {
            const int d = hd * DH + nd * 8 + 2 * t;
            if (r0 < len)
                row<T>::st2(out + (size_t)(base + r0) * H + d, o[nd][0] * inv0, o[nd][1] * inv0);
            if (r1 < len)
                row<T>::st2(out + (size_t)(base + r1) * H + d, o[nd][2] * inv1, o[nd][3] * inv1);
        }
    }
}

/* ========================================================================
 * FP32 kernel
 * ====================================================================== */

constexpr int FQ = 16;  /* queries per block (4 per warp) */
constexpr int FK = 32;  /* keys per tile: one per lane */
constexpr int F_THREADS = 128;
constexpr int F_MAXDH = 128;

/* NV = ceil(dh / 32) output columns per lane. */
template <int NV, typename T>
__global__ void __launch_bounds__(F_THREADS) attn_f32_kernel(const T *qkv,
                                                             const int32_t *offsets, int heads,
                                                             int dh, float qscale,
                                                             const float *pos_bias, int maxrel,
                                                             T *out)
{
    __shared__ float qs[FQ * F_MAXDH];
    __shared__ float ks[FK * (F_MAXDH + 1)];
    __shared__ float vs[FK * F_MAXDH];

    const int hd = blockIdx.x, s = blockIdx.y;
    const int base = offsets[s], len = offsets[s + 1] - base;
    const int H = heads * dh;
    const size_t stride = 3 * (size_t)H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kld = dh + 1;

    for (int q0 = blockIdx.z * FQ; q0 < len; q0 += gridDim.z * FQ) {
        __syncthreads(); /* the previous query tile is done with qs */
        for (int i = tid; i < FQ * dh; i += F_THREADS) {
            const int r = i / dh, c = i % dh;
            qs[r * dh + c] = q0 + r < len ? row<T>::ld(qkv[(size_t)(base + q0 + r) * stride + hd * dh + c]) * qscale
                                          : 0.f;
        }
        float m[4], l[4], acc[4][NV];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            m[i] = -INFINITY;
            l[i] = 0.f;
#pragma unroll
            for (int v = 0; v < NV; v++)
                acc[i][v] = 0.f;
        }
        for (int k0 = 0; k0 < len; k0 += FK) {
            __syncthreads();
            for (int i = tid; i < FK * dh; i += F_THREADS) {
                const int r = i / dh, c = i % dh;
                float kv = 0.f, vv = 0.f;
                if (k0 + r < len) {
                    const T *kr = qkv + (size_t)(base + k0 + r) * stride + hd * dh + c;
                    kv = row<T>::ld(kr[H]);
                    vv = row<T>::ld(kr[2 * H]);
                }
                ks[r * kld + c] = kv;
                vs[r * dh + c] = vv;
            }
            __syncthreads();
            const bool valid = k0 + lane < len;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int qi = warp * 4 + i;
                if (q0 + qi >= len)
                    break; /* warp-uniform */
                float sc = 0.f;
                for (int c = 0; c < dh; c++)
                    sc = fmaf(qs[qi * dh + c], ks[lane * kld + c], sc);
                if (pos_bias && valid) /* MPNet's relative position bias */
                    sc += pos_bias[(size_t)hd * (2 * maxrel + 1) + rel_at((k0 + lane) - (q0 + qi), maxrel)];
                sc = valid ? sc : -INFINITY;
                float mx = sc;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                const float mnew = fmaxf(m[i], mx);
                const float corr = expf(m[i] - mnew);
                const float p = valid ? expf(sc - mnew) : 0.f;
                float ps = p;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    ps += __shfl_xor_sync(0xffffffffu, ps, o);
                l[i] = l[i] * corr + ps;
                m[i] = mnew;
#pragma unroll
                for (int v = 0; v < NV; v++)
                    acc[i][v] *= corr;
                for (int j = 0; j < FK; j++) {
                    const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const int c = lane + 32 * v;
                        if (c < dh)
                            acc[i][v] = fmaf(pj, vs[j * dh + c], acc[i][v]);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int q = q0 + warp * 4 + i;
            if (q >= len)
                break;
            const float inv = 1.0f / l[i];
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int c = lane + 32 * v;
                if (c < dh)
                    out[(size_t)(base + q) * H + hd * dh + c] = row<T>::st(acc[i][v] * inv);
            }
        }
    }
}

/* Rounded-up integer division for grid sizes. */
int ceil_div(int a, int b) { return (a + b - 1) / b; }

} /* namespace */

/* The head sizes each kernel was instantiated for. */
extern "C" int kcu_attention_supported(kcu_attn_mode mode, int head_dim)
{
    if (mode == KCU_ATTN_F16)
        return head_dim == 32 || head_dim == 64 || head_dim == 128;
    return head_dim >= 1 && head_dim <= F_MAXDH;
}

extern "C" cudaError_t kcu_attention(const float *qkv, const int32_t *offsets, int nseq, int heads,
                                     int dh, int max_len_hint, int sms, kcu_attn_mode mode,
                                     float *out, cudaStream_t stream)
{
    return kcu_attention_bias(qkv, offsets, nseq, heads, dh, NULL, 0, max_len_hint, sms, mode,
                              out, stream);
}

namespace {

/* Picks the grid (query-tile slots for ~4 blocks per SM, no more than the
 * length hint can use) and the instantiation for activation type T. */
template <typename T>
cudaError_t launch(const T *qkv, const int32_t *offsets, int nseq, int heads, int dh,
                   const float *pos_bias, int maxrel, int max_len_hint, int sms, kcu_attn_mode mode,
                   T *out, cudaStream_t stream)
{
    if (nseq <= 0)
        return cudaSuccess;
    if (!qkv || !offsets || !out || heads <= 0 || nseq > 65535 || heads > 65535 ||
        !kcu_attention_supported(mode, dh) || (pos_bias && maxrel < 0))
        return cudaErrorInvalidValue;
    /* the tensor-core kernel loads K/V rows four values at a time and stores two */
    if (mode == KCU_ATTN_F16 && (((uintptr_t)qkv & (4 * sizeof(T) - 1)) ||
                                 ((uintptr_t)out & (2 * sizeof(T) - 1))))
        return cudaErrorInvalidValue;
    if (max_len_hint < 1)
        max_len_hint = 512;
    if (sms < 1)
        sms = 1;
    const int tile = mode == KCU_ATTN_F16 ? TQ : FQ;
    /* query-tile slots per (sequence, head): enough blocks for ~4 per SM,
     * no more than the longest sequence can use */
    const long pairs = (long)nseq * heads;
    int zq = (int)((4L * sms + pairs - 1) / pairs);
    const int zmax = ceil_div(max_len_hint, tile);
    zq = zq < 1 ? 1 : zq > zmax ? zmax : zq;
    const dim3 grid(heads, nseq, zq);
    if (mode == KCU_ATTN_F16) {
        const float qscale = 1.4426950408889634f / sqrtf((float)dh); /* log2(e) / sqrt(dh) */
        if (dh == 32)
            attn_f16_kernel<32, T><<<grid, TC_THREADS, 0, stream>>>(qkv, offsets, heads, qscale, pos_bias, maxrel, out);
        else if (dh == 64)
            attn_f16_kernel<64, T><<<grid, TC_THREADS, 0, stream>>>(qkv, offsets, heads, qscale, pos_bias, maxrel, out);
        else
            attn_f16_kernel<128, T><<<grid, TC_THREADS, 0, stream>>>(qkv, offsets, heads, qscale, pos_bias, maxrel, out);
    } else {
        const float qscale = 1.0f / sqrtf((float)dh);
        switch (ceil_div(dh, 32)) {
        case 1: attn_f32_kernel<1, T><<<grid, F_THREADS, 0, stream>>>(qkv, offsets, heads, dh, qscale, pos_bias, maxrel, out); break;
        case 2: attn_f32_kernel<2, T><<<grid, F_THREADS, 0, stream>>>(qkv, offsets, heads, dh, qscale, pos_bias, maxrel, out); break;
        case 3: attn_f32_kernel<3, T><<<grid, F_THREADS, 0, stream>>>(qkv, offsets, heads, dh, qscale, pos_bias, maxrel, out); break;
        default: attn_f32_kernel<4, T><<<grid, F_THREADS, 0, stream>>>(qkv, offsets, heads, dh, qscale, pos_bias, maxrel, out); break;
        }
    }
    return cudaGetLastError();
}

} /* namespace */

/* Sequences should be at most maxrel + 1 long when pos_bias is given (the
 * model refuses longer ones before the forward); the lengths live on the
 * device, so a longer one cannot be refused here: its far pairs read the
 * table's edge entries (rel_at), never memory outside it. */
extern "C" cudaError_t kcu_attention_bias(const float *qkv, const int32_t *offsets, int nseq,
                                          int heads, int dh, const float *pos_bias, int maxrel,
                                          int max_len_hint, int sms, kcu_attn_mode mode,
                                          float *out, cudaStream_t stream)
{
    return launch<float>(qkv, offsets, nseq, heads, dh, pos_bias, maxrel, max_len_hint, sms, mode,
                         out, stream);
}

extern "C" cudaError_t kcu_attention_t(const void *qkv, kcu_dtype dt, const int32_t *offsets,
                                       int nseq, int heads, int dh, const float *pos_bias,
                                       int maxrel, int max_len_hint, int sms, kcu_attn_mode mode,
                                       void *out, cudaStream_t stream)
{
    switch (dt) {
    case KCU_DT_F32:
        return launch<float>(static_cast<const float *>(qkv), offsets, nseq, heads, dh, pos_bias,
                             maxrel, max_len_hint, sms, mode, static_cast<float *>(out), stream);
    case KCU_DT_F16:
        return launch<__half>(static_cast<const __half *>(qkv), offsets, nseq, heads, dh, pos_bias,
                              maxrel, max_len_hint, sms, mode, static_cast<__half *>(out), stream);
    case KCU_DT_BF16:
        return launch<__nv_bfloat16>(static_cast<const __nv_bfloat16 *>(qkv), offsets, nseq, heads,
                                     dh, pos_bias, maxrel, max_len_hint, sms, mode,
                                     static_cast<__nv_bfloat16 *>(out), stream);
    }
    return cudaErrorInvalidValue;
}
