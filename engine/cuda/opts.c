/* engine/cuda/opts.c: the CUDA backend's settings (mt_cuda_opts,
 * engine/cuda/backend.h): their defaults and the MANTISSA_CUDA_* options
 * that override them (engine/options.c reads the environment). */
#include <string.h>

#include "engine/cuda/backend.h"
#include "engine/options.h"

/* Defaults, then the MANTISSA_CUDA_* options (engine/options.h; their CHOICE
 * values are in the order of the enums). */
void mt_cuda_opts_default(mt_cuda_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_len_hint = 512;
    o->gemm = (mt_cuda_gemm_path)mt_opt_int(MT_OPT_CUDA_GEMM);
    o->attn = (mt_cuda_attn)mt_opt_int(MT_OPT_CUDA_ATTN);
    o->crossover = mt_opt_int(MT_OPT_CUDA_CROSSOVER);
    o->autotune = mt_opt_int(MT_OPT_CUDA_AUTOTUNE);
    o->w8a16_bf16 = mt_opt_int(MT_OPT_CUDA_W8A16_BF16);
    o->w8a16_kernel = mt_opt_int(MT_OPT_CUDA_W8A16_KERNEL); /* auto, staged, direct */
    o->gelu_tanh = mt_opt_int(MT_OPT_CUDA_GELU);             /* erf, tanh */
    o->act16 = mt_opt_int(MT_OPT_CUDA_ACT16);
    o->ln_quant = mt_opt_int(MT_OPT_CUDA_LN_QUANT);
    o->int8_w8a8 = mt_opt_int(MT_OPT_CUDA_INT8_W8A8);
    o->debug_sync = mt_opt_int(MT_OPT_CUDA_DEBUG_SYNC);
    o->graphs = mt_opt_int(MT_OPT_CUDA_GRAPHS);
}
