/* engine/cuda/module.c: the CUDA module's one loading entry point
 * (engine/cuda/backend.h's mt_cuda_entries): the table of its entry points,
 * expanded from engine/cuda/entry_points.h, which engine/cuda/dl.c looks up
 * by the one name MT_CUDA_MODULE_ENTRY. Within the module each name binds
 * to the module's own definition (-Bsymbolic-functions), not to dl.c's
 * forwarder of the same name in the binary. */
#include "engine/cuda/backend.h"

#define MODULE_ENTRY(ret, name, params, args, answer) .name = name,
#define MODULE_ENTRY_V(name, params, args, answer) .name = name,
const mt_cuda_entries mt_cuda_module_entries = {
    .size = sizeof(mt_cuda_entries),
    MT_CUDA_ENTRY_POINTS(MODULE_ENTRY, MODULE_ENTRY_V)};
