/* registry.c: the backend rows (registry.h): the CPU (engine/cpu/backend.c)
 * and CUDA (engine/cuda/backend.h, through dl.c or none.c), and the
 * devices they offer here. */
#include "engine/registry.h"

#include <stdio.h>
#include <string.h>

#include "engine/cuda/backend.h"

/* Whether a backend of kind bk runs op at precision p: a GEMM weight in
 * the traits' column, every other op in the precision the op policy gives
 * it (FP32). */
static bool supports_by_traits(mt_backend_kind bk, mt_precision p, mt_op op)
{
    if ((unsigned)p >= MT_PREC_COUNT || (unsigned)op >= MT_OP_COUNT)
        return false;
    if (op == MT_OP_GEMM_WEIGHT)
        return mt_prec_gemm(p, bk) != MT_GEMM_NONE;
    return p == mt_op_precision(op, p);
}

const char *mt_op_kind_name(mt_op_kind k)
{
    static const char *const names[MT_OPK_COUNT] = {
        [MT_OPK_RMSNORM] = "rmsnorm",          [MT_OPK_ADD] = "add",
        [MT_OPK_GLU] = "gated MLP (glu)",      [MT_OPK_ROPE] = "rotary positions (rope)",
        [MT_OPK_CAUSAL] = "causal attention",  [MT_OPK_GQA] = "grouped-query attention",
        [MT_OPK_NO_POS] = "embeddings without a position table",
        [MT_OPK_QK_NORM] = "per-head query/key RMSNorm (qk_norm)",
        [MT_OPK_TOKEN_TYPES] = "two token types (embed_types)",
    };
    return (unsigned)k < MT_OPK_COUNT ? names[k] : "?";
}

/* ---- the CPU ------------------------------------------------------------ */

static int cpu_probe(char *why, size_t cap)
{
    return 1;
}

static mt_status cpu_describe(int dev, char *buf, size_t cap)
{
    if (dev != 0) {
        snprintf(buf, cap, "no CPU device %d (there is one)", dev);
        return MT_EINVAL;
    }
    snprintf(buf, cap, "the host CPU");
    return MT_OK;
}

static bool cpu_supports(mt_precision p, mt_op op)
{
    return supports_by_traits(MT_BK_CPU, p, op);
}

static mt_status cpu_create(int dev, int threads, mt_backend **out, mt_err *err)
{
    if (dev != 0)
        return mt_fail(err, MT_EINVAL, "no CPU device %d (there is one)", dev);
    return mt_backend_cpu_create(threads, out, err);
}

/* ---- CUDA --------------------------------------------------------------- */

static int cuda_probe(char *why, size_t cap)
{
    const int n = mt_cuda_device_count();
    if (n <= 0)
        mt_cuda_describe(0, why, cap); /* says why */
    return n > 0 ? n : 0;
}

static bool cuda_supports(mt_precision p, mt_op op)
{
    return supports_by_traits(MT_BK_CUDA, p, op);
}

static mt_status cuda_create(int dev, int threads, mt_backend **out, mt_err *err)
{
    return mt_backend_cuda_create(dev, out, err);
}

/* ---- the rows ----------------------------------------------------------- */

static const mt_backend_reg rows[] = {
    {"cpu", "CPU", MT_BK_CPU, true, cpu_probe, cpu_describe, cpu_supports, cpu_create},
    {"cuda", "CUDA", MT_BK_CUDA, false, cuda_probe, mt_cuda_describe, cuda_supports, cuda_create},
};
#define NROWS ((int)(sizeof rows / sizeof *rows))

/* "auto", then the rows' names in order (tests/unit/test_registry.c checks) */
const char *const mt_device_choices[] = {"auto", "cpu", "cuda", NULL};

int mt_backend_reg_count(void)
{
    return NROWS;
}

const mt_backend_reg *mt_backend_reg_at(int i)
{
    return i >= 0 && i < NROWS ? &rows[i] : NULL;
}

const mt_backend_reg *mt_backend_reg_find(const char *name)
{
    for (int i = 0; name && i < NROWS; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    return NULL;
}

const mt_backend_reg *mt_backend_reg_host(void)
{
    return &rows[0];
}

const mt_backend_reg *mt_device_choice_reg(int value)
{
    return mt_backend_reg_at(value - 1);
}

int mt_devices_list(mt_device *out, int cap)
{
    int n = 0;
    char why[256];
    for (int i = 0; i < NROWS; i++) {
        const int k = rows[i].probe(why, sizeof why);
        for (int d = 0; d < k && n < cap; d++)
            out[n++] = (mt_device){&rows[i], d};
    }
    return n;
}
