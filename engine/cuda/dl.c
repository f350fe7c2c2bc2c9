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
 * machine without a GPU). */
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

#define MODULE_NAME "libmantissa_cuda.so"

static struct {
    pthread_once_t once;
    void *h; /* the module; NULL: not loaded, see why */
    char why[512];
    int (*device_count)(void);
    mt_status (*describe)(int, char *, size_t);
    mt_status (*create)(int, mt_backend **, mt_err *);
    void (*opts_default)(mt_cuda_opts *);
    mt_status (*create_opts)(int, const mt_cuda_opts *, mt_backend **, mt_err *);
    void (*get_counts)(const mt_backend *, mt_cuda_counts *);
    bool (*fp8_w8a8_enabled)(const mt_backend *);
    int (*weight_crossover)(const mt_weight *);
    mt_status (*graph_begin)(mt_backend *, unsigned long long, bool *, mt_err *);
    mt_status (*graph_end)(mt_backend *, mt_err *);
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

/* Every entry point from the module; false (why[] set) when one is missing. */
static bool bind_all(void *h)
{
    static const char *const names[] = {
        "mt_cuda_device_count", "mt_cuda_describe",          "mt_backend_cuda_create",
        "mt_cuda_opts_default", "mt_backend_cuda_create_opts", "mt_cuda_get_counts",
        "mt_cuda_fp8_w8a8_enabled", "mt_cuda_weight_crossover", "mt_cuda_graph_begin",
        "mt_cuda_graph_end"};
    void *fn[sizeof names / sizeof *names];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!(fn[i] = dlsym(h, names[i]))) {
            snprintf(mod.why, sizeof mod.why, "the CUDA module lacks %s", names[i]);
            return false;
        }
    /* POSIX guarantees a dlsym'd object pointer converts to a function pointer */
    memcpy(&mod.device_count, &fn[0], sizeof fn[0]);
    memcpy(&mod.describe, &fn[1], sizeof fn[1]);
    memcpy(&mod.create, &fn[2], sizeof fn[2]);
    memcpy(&mod.opts_default, &fn[3], sizeof fn[3]);
    memcpy(&mod.create_opts, &fn[4], sizeof fn[4]);
    memcpy(&mod.get_counts, &fn[5], sizeof fn[5]);
    memcpy(&mod.fp8_w8a8_enabled, &fn[6], sizeof fn[6]);
    memcpy(&mod.weight_crossover, &fn[7], sizeof fn[7]);
    memcpy(&mod.graph_begin, &fn[8], sizeof fn[8]);
    memcpy(&mod.graph_end, &fn[9], sizeof fn[9]);
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

int mt_cuda_device_count(void)
{
    return loaded() ? mod.device_count() : 0;
}

mt_status mt_cuda_describe(int dev, char *buf, size_t cap)
{
    if (loaded())
        return mod.describe(dev, buf, cap);
    if (buf && cap)
        snprintf(buf, cap, "%s", mod.why);
    return MT_EUNSUPPORTED;
}

mt_status mt_backend_cuda_create(int device, mt_backend **out, mt_err *err)
{
    if (loaded())
        return mod.create(device, out, err);
    if (out)
        *out = NULL;
    return mt_fail(err, MT_EUNSUPPORTED, "%s", mod.why);
}

void mt_cuda_opts_default(mt_cuda_opts *o)
{
    if (loaded()) {
        mod.opts_default(o);
        return;
    }
    memset(o, 0, sizeof *o); /* as engine/cuda/none.c: nothing reads them without CUDA */
    o->autotune = 1;
    o->max_len_hint = 512;
    o->graphs = 1;
}

mt_status mt_backend_cuda_create_opts(int device, const mt_cuda_opts *o, mt_backend **out,
                                      mt_err *err)
{
    if (loaded())
        return mod.create_opts(device, o, out, err);
    return mt_backend_cuda_create(device, out, err);
}

/* The rest take a backend or weight only the module can have made. */
void mt_cuda_get_counts(const mt_backend *be, mt_cuda_counts *out)
{
    if (loaded())
        mod.get_counts(be, out);
    else
        memset(out, 0, sizeof *out);
}

bool mt_cuda_fp8_w8a8_enabled(const mt_backend *be)
{
    return loaded() && mod.fp8_w8a8_enabled(be);
}

int mt_cuda_weight_crossover(const mt_weight *w)
{
    return loaded() ? mod.weight_crossover(w) : -1;
}

mt_status mt_cuda_graph_begin(mt_backend *be, unsigned long long key, bool *replay, mt_err *err)
{
    if (loaded())
        return mod.graph_begin(be, key, replay, err);
    return mt_fail(err, MT_EUNSUPPORTED, "%s", mod.why);
}

mt_status mt_cuda_graph_end(mt_backend *be, mt_err *err)
{
    if (loaded())
        return mod.graph_end(be, err);
    return mt_fail(err, MT_EUNSUPPORTED, "%s", mod.why);
}
