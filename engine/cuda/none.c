/* engine/cuda/none.c: the CUDA entry points of engine/cuda/backend.h for
 * builds without CUDA (make CUDA=0, or no nvcc on the PATH), so that the
 * server links the same way either way and can say why there is no GPU.
 * Generated from the one list, engine/cuda/entry_points.h: each entry point
 * gives its row's answer. */
#include "engine/cuda/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/cuda/no_cuda.h"

static const char why[] = "this build has no CUDA backend (built with CUDA=0 or without nvcc)";

#define NONE_F(ret, name, params, args, answer)                                                    \
    ret name params                                                                                \
    {                                                                                              \
        return answer;                                                                             \
    }
#define NONE_V(name, params, args, answer)                                                         \
    void name params                                                                               \
    {                                                                                              \
        answer;                                                                                    \
    }
MT_CUDA_ENTRY_POINTS(NONE_F, NONE_V)
