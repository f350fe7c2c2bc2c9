/* engine/cuda/dl.c: the entry points of engine/cuda/backend.h in a CUDA
 * build's mantissa binary. The backend itself (engine/cuda/backend.c,
 * cuda_*.c, kernels/cuda) is a module, libmantissa_cuda.so, linked with
 * cuBLASLt and the CUDA runtime; this file opens it on the first call, and
 * only where a CUDA driver (libcuda.so.1) can be opened, then forwards every
 * entry point to it.
 *
 * Why a module: linking cuBLASLt into the binary cost every process ~150 MB
 * of resident memory whether it used a GPU or not (the 540 MB library's
 * relocated data and its loader's work: a fp32 MiniLM server held 283 MB
 * against 132 MB for a CUDA=0 build on the 2-core dev VM), and the binary
 * could not start on a machine without the CUDA libraries. Now a machine
 * without a driver never loads them, and one without the module runs on the
 * CPU and says why.
 *
 * Where the module is looked for, in order: $MANTISSA_CUDA_MODULE (a path;
 * this file reads it and MANTISSA_CUDA_DRIVER through engine/options.h);
 * next to the binary (build/<cfg>/); ../lib from the binary (an installed
 * layout such as the container image's /opt/mantissa/{bin,lib}). The
 * module's references to the rest of the engine resolve against the binary,
 * which exports its symbols (-rdynamic, the whole library linked in: see the
 * Makefile's CUDA section). $MANTISSA_CUDA_DRIVER names another driver
 * library to probe (tests: any library that opens, to reach the module on a
 * machine without a GPU).
 *
 * The module has one loading entry point: the table mt_cuda_module_entries
 * (engine/cuda/module.c), looked up by its one name and checked by its
 * size. The table's type and the forwarders are generated from the one
 * list of entry points, engine/cuda/entry_points.h; where the module is not
 * loaded each forwarder gives its row's answer with the reason. */
#include "engine/cuda/backend.h"
#include "engine/options.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cuda/no_cuda.h"

#define MODULE_NAME "libmantissa_cuda.so"

static struct {
    pthread_once_t once;
    void *h; /* the module; NULL: not loaded, see why */
    char why[512];
    mt_cuda_entries fn;
} mod = {.once = PTHREAD_ONCE_INIT};

/* Opens the first module candidate that exists; NULL with why[] set. */
static void *open_module(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 64];
    const char *env = mt_opt_text(MT_OPT_CUDA_MODULE);
    if (env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(mod.why, sizeof mod.why, "cannot load the CUDA module: %s", dlerror());
        return h;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(mod.why, sizeof mod.why, "cannot find the CUDA module: /proc/self/exe unreadable");
        return NULL;
    }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    static const char *const rel[] = {"/" MODULE_NAME, "/../lib/" MODULE_NAME};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        snprintf(path, sizeof path, "%s%s", exe, rel[i]);
        if (access(path, F_OK) != 0)
            continue;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(mod.why, sizeof mod.why, "cannot load the CUDA module: %s", dlerror());
        return h;
    }
    snprintf(mod.why, sizeof mod.why,
             "this binary's CUDA module (" MODULE_NAME ") is neither in %.200s nor in %.200s/../lib",
             exe, exe);
    return NULL;
}

/* The module's table of entry points (its one loading entry point,
 * MT_CUDA_MODULE_ENTRY) into mod.fn; false (why[] set) when it lacks it or
 * was built from another list of entry points. */
static bool bind_all(void *h)
{
    const mt_cuda_entries *t = dlsym(h, MT_CUDA_MODULE_ENTRY);
    if (!t) {
        snprintf(mod.why, sizeof mod.why, "the CUDA module lacks %s", MT_CUDA_MODULE_ENTRY);
        return false;
    }
    if (t->size != sizeof mod.fn) {
        snprintf(mod.why, sizeof mod.why, "the CUDA module's %s is %zu bytes, not %zu: a "
                 "module of another build", MT_CUDA_MODULE_ENTRY, t->size, sizeof mod.fn);
        return false;
    }
    mod.fn = *t;
    return true;
}

static void load(void)
{
    const char *drv = mt_opt_text(MT_OPT_CUDA_DRIVER);
    if (!drv)
        drv = "libcuda.so.1";
    void *d = dlopen(drv, RTLD_LAZY | RTLD_LOCAL);
    if (!d) {
        snprintf(mod.why, sizeof mod.why, "no CUDA driver (%s)", dlerror());
        return;
    }
    dlclose(d); /* only a probe: the CUDA runtime opens it itself */
    void *h = open_module();
    if (h && !bind_all(h)) {
        dlclose(h);
        h = NULL;
    }
    mod.h = h;
}

static bool loaded(void)
{
    pthread_once(&mod.once, load);
    return mod.h != NULL;
}

/* The forwarders: the module's function where it is loaded, else the
 * row's answer with the reason it is not. */
#define DL_FORWARD(ret, name, params, args, answer)                                                \
    ret name params                                                                                \
    {                                                                                              \
        if (loaded())                                                                              \
            return mod.fn.name args;                                                               \
        const char *why = mod.why;                                                                 \
        (void)why;                                                                                 \
        return answer;                                                                             \
    }
#define DL_FORWARD_V(name, params, args, answer)                                                   \
    void name params                                                                               \
    {                                                                                              \
        if (loaded()) {                                                                            \
            mod.fn.name args;                                                                      \
            return;                                                                                \
        }                                                                                          \
        answer;                                                                                    \
    }
MT_CUDA_ENTRY_POINTS(DL_FORWARD, DL_FORWARD_V)
