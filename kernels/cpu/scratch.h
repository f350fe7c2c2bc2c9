/* scratch.h: the calling thread's scratch memory for the CPU GEMMs
 * (qgemm_s8.c, gemm_f32.c), internal to kernels/cpu. A fresh buffer per
 * call costs more than a small GEMM: megabytes come from mmap and every
 * first touch of a page faults (~14% of an int8g forward's time was in the
 * kernel before this). So each thread keeps one buffer, grown to the
 * largest request it has made, and frees it when the thread exits. One
 * GEMM at a time per thread uses it: callers never nest. */
#ifndef MT_KERNELS_CPU_SCRATCH_H
#define MT_KERNELS_CPU_SCRATCH_H

#include <stddef.h>

/* At least bytes of 64-byte aligned memory, valid until this thread's next
 * call; NULL when out of memory. */
char *kc_scratch(size_t bytes);

#endif
