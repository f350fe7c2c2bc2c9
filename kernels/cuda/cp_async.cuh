/* cp_async.cuh: the cp.async PTX wrappers the pipelined GEMM kernels share
 * (gemm_w8a16.cu, gemm_w8a8_i8.cu): global -> shared copies of 16, 8 or 4
 * bytes with zero fill past src_bytes, and the group commit and wait.
 * Device code for nvcc only. */
#ifndef MT_KERNELS_CUDA_CP_ASYNC_CUH
#define MT_KERNELS_CUDA_CP_ASYNC_CUH

namespace {

/* 16 bytes global -> shared, bytes beyond src_bytes (0..16) are zero; cached
 * in L2 only: weights are read once, so L1 would only be polluted. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

/* 8 bytes global -> shared with zero fill: four 16-bit activations. */
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem, int src_bytes)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

/* 4 bytes global -> shared with zero fill: activations whose rows are not
 * 16-byte aligned. */
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem, int src_bytes)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Waits until at most N of this thread's committed groups are in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} /* namespace */

#endif
