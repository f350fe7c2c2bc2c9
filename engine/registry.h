/* registry.h: the backends this build knows, one row each (name, probe,
 * supports, create), and the devices they offer on this machine. The
 * server and the tools choose and make backends through it, never by a
 * backend's own functions, so a backend is added by a row here
 * (engine/registry.c) and a column in the precision traits
 * (engine/precision.h), with nothing to change in server/.
 *
 * The first row is the host's backend (the CPU): always usable, the one
 * device "auto" falls back to, and where the load check's FP32 reference
 * vectors are made. */
#ifndef MT_ENGINE_REGISTRY_H
#define MT_ENGINE_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/backend.h"
#include "engine/precision.h"
#include "engine/quant/quant.h"
#include "engine/status.h"

typedef struct mt_backend_reg {
    const char *name;  /* "cpu", "cuda": a config's device field, the backend table's name */
    const char *label; /* "CPU", "CUDA": for messages */
    mt_backend_kind kind; /* its column in the precision traits */
    bool host;         /* the host's backend (the first row): always usable */
    /* How many devices of it this process can use; 0 with the reason in
     * why (cap bytes). Never fails loudly; may initialise a driver, so
     * only after any fork(). */
    int (*probe)(char *why, size_t cap);
    /* One line about its device dev, e.g. "NVIDIA H100 80GB HBM3 (sm_90,
     * ...)"; on failure buf gets the reason. */
    mt_status (*describe)(int dev, char *buf, size_t cap);
    /* Whether it runs op at precision p: GEMM weights in the precisions
     * its traits column names; every other op in FP32 (engine/quant/quant.h's
     * op precision policy). */
    bool (*supports)(mt_precision p, mt_op op);
    /* Its backend on device dev (0-based). threads: the host backend's
     * threads (<= 0: all cores); other backends ignore it. */
    mt_status (*create)(int dev, int threads, mt_backend **out, mt_err *err);
} mt_backend_reg;

/* The rows, the host's first. */
int mt_backend_reg_count(void);
const mt_backend_reg *mt_backend_reg_at(int i);
/* The row named name, or NULL. */
const mt_backend_reg *mt_backend_reg_find(const char *name);
/* The host's row (the CPU). */
const mt_backend_reg *mt_backend_reg_host(void);

/* What a config's device field accepts: "auto", then each row's name in
 * row order (value 0 is "auto", value i the row i - 1); NULL-terminated. */
extern const char *const mt_device_choices[];
/* The row a device value names (value >= 1), or NULL for "auto". */
const mt_backend_reg *mt_device_choice_reg(int value);

/* A device: a row's backend on one of its devices. */
typedef struct {
    const mt_backend_reg *reg;
    int index; /* 0-based, within the row */
} mt_device;

/* The devices usable here, each row's in order (the host's first: it is
 * always there): up to cap of them into out; returns the count. Probes
 * every row (see probe). */
int mt_devices_list(mt_device *out, int cap);

#endif
