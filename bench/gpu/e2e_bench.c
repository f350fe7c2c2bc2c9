/* e2e_bench.c: end-to-end encoder throughput on the CUDA backend, per
 * precision and batch size, with energy per 1,000 sentences, for
 * bench/results/gpu-*.md (bench/gpu.sh runs it beside the PyTorch FP16 peer,
 * bench/gpu/peer_torch.py, on the same token ids).
 *
 *   e2e_bench --write-ids FILE [--rows N] [--len L]
 *       writes N rows of L token ids ([CLS], L-2 ids drawn uniformly from
 *       1000..30000 with a fixed seed, [SEP]) as a JSON list of lists
 *   e2e_bench --model DIR --ids FILE [--batch 1,32,256] [--precisions LIST]
 *             [--seconds S] [--json FILE]
 *       for each precision: load, warm up, then per batch size run
 *       mt_model_forward (ids -> pooled, normalised vectors on the host) until
 *       S seconds have passed (at least 5 runs); report the median run as
 *       sentences/s, and NVML's total-energy counter difference over the
 *       timed runs as joules per 1,000 sentences; "gemm_paths" counts the
 *       GEMMs of the first warm-up forward (always eager) by path, which
 *       says what the load's tuner chose at this batch.
 *
 * Only the timed forwards run between cudaProfilerStart and cudaProfilerStop:
 * under `ncu --profile-from-start off` the load (and its tuner, whose event
 * timings ncu's per-launch cost would skew) and the warm-up go unprofiled.
 *
 * NVML (libnvidia-ml.so.1) is opened with dlopen at run time; where it or
 * the counter is missing, the energy column says so.
 */
#include <cJSON.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cuda/backend.h"
#include "engine/jsonfile.h"
#include "engine/model.h"

/* ------------------------------------------------------------------------
 * NVML through dlopen
 * ---------------------------------------------------------------------- */

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_by_bus_fn)(const char *, void **);
typedef int (*nvml_energy_fn)(void *, unsigned long long *);

static struct {
    void *lib, *dev;
    nvml_energy_fn energy;
    char why[128];
} nvml;

/* Opens NVML and finds the handle of CUDA device 0 by its PCI bus id. */
static void nvml_open(void)
{
    char bus[64];
    nvml.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml.lib) {
        snprintf(nvml.why, sizeof nvml.why, "no NVML (libnvidia-ml.so.1 not found)");
        return;
    }
    nvml_init_fn init = (nvml_init_fn)dlsym(nvml.lib, "nvmlInit_v2");
    nvml_by_bus_fn by_bus = (nvml_by_bus_fn)dlsym(nvml.lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.energy = (nvml_energy_fn)dlsym(nvml.lib, "nvmlDeviceGetTotalEnergyConsumption");
    unsigned long long e;
    if (!init || !by_bus || !nvml.energy || init() != 0 ||
        cudaDeviceGetPCIBusId(bus, sizeof bus, 0) != cudaSuccess || by_bus(bus, &nvml.dev) != 0 ||
        nvml.energy(nvml.dev, &e) != 0) {
        snprintf(nvml.why, sizeof nvml.why, "NVML has no total-energy counter for this GPU");
        nvml.energy = NULL;
    }
}

/* Millijoules since the driver loaded, or -1. */
static double nvml_mj(void)
{
    unsigned long long e;
    if (!nvml.energy || nvml.energy(nvml.dev, &e) != 0)
        return -1;
    return (double)e;
}

/* ------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int write_ids(const char *path, int rows, int len)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    fprintf(f, "[");
    for (int r = 0; r < rows; r++) {
        fprintf(f, "%s[101", r ? ",\n" : "");
        for (int i = 0; i < len - 2; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            fprintf(f, ",%d", 1000 + (int)(s % 29001));
        }
        fprintf(f, ",102]");
    }
    fprintf(f, "]\n");
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    const char *model = "models/all-MiniLM-L6-v2", *ids_path = NULL, *json = NULL,
               *batches = "1,32,256", *precs = "fp32,tf32,fp16,bf16,int8,fp8", *write = NULL;
    double seconds = 2.0;
    int rows = 256, len = 128;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--model")) model = argv[++i];
        else if (!strcmp(argv[i], "--ids")) ids_path = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = argv[++i];
        else if (!strcmp(argv[i], "--batch")) batches = argv[++i];
        else if (!strcmp(argv[i], "--precisions")) precs = argv[++i];
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--write-ids")) write = argv[++i];
        else if (!strcmp(argv[i], "--rows")) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--len")) len = atoi(argv[++i]);
    }
    if (write)
        return write_ids(write, rows, len);
    if (!ids_path) {
        fprintf(stderr, "e2e_bench: --ids FILE is required (make one with --write-ids)\n");
        return 2;
    }
    if (mt_cuda_device_count() == 0) {
        printf("e2e_bench: SKIP: no CUDA device\n");
        return 0;
    }
    mt_err err = {{0}};
    cJSON *jids = NULL;
    if (mt_json_load(ids_path, &jids, &err) != MT_OK || !cJSON_IsArray(jids)) {
        fprintf(stderr, "e2e_bench: %s\n", err.msg);
        return 1;
    }
    const int nrows = cJSON_GetArraySize(jids);
    int32_t *all = NULL, *roff = malloc(sizeof(int32_t) * (nrows + 1));
    roff[0] = 0;
    int r = 0;
    const cJSON *row, *v;
    cJSON_ArrayForEach(row, jids)
    {
        roff[r + 1] = roff[r] + cJSON_GetArraySize(row);
        all = realloc(all, sizeof(int32_t) * roff[r + 1]);
        int i = roff[r];
        cJSON_ArrayForEach(v, row) all[i++] = (int32_t)v->valuedouble;
        r++;
    }
    cJSON_Delete(jids);
    for (int i = 1; i < nrows; i++)
        if (roff[i + 1] - roff[i] != roff[1] - roff[0]) {
            fprintf(stderr, "e2e_bench: %s: rows must all have the same length\n", ids_path);
            return 2;
        }
    char desc[256];
    mt_cuda_describe(0, desc, sizeof desc);
    nvml_open();
    FILE *jf = json ? fopen(json, "w") : stdout;
    fprintf(jf, "{\"engine\": \"mantissa\", \"device\": \"%s\", \"rows\": %d, \"energy\": \"%s\", \"results\": [",
            desc, nrows, nvml.energy ? "nvml total energy" : nvml.why);
    int first = 1;

    char plist[256];
    snprintf(plist, sizeof plist, "%s", precs);
    for (char *save1, *pn = strtok_r(plist, ",", &save1); pn; pn = strtok_r(NULL, ",", &save1)) {
        mt_precision prec;
        if (mt_precision_parse(pn, &prec) != 0) {
            fprintf(stderr, "e2e_bench: unknown precision %s\n", pn);
            return 2;
        }
        mt_backend *be = NULL;
        mt_model *m = NULL;
        mt_model_opts lo = {.precision = prec};
        const double t0 = now_s();
        if (mt_backend_cuda_create(0, &be, &err) != MT_OK || mt_model_load(model, be, &lo, &m, &err) != MT_OK) {
            fprintf(stderr, "e2e_bench: %s: %s\n", pn, err.msg);
            return 1;
        }
        const double load_s = now_s() - t0;
        const int h = m->info.hidden;
        char blist[128];
        snprintf(blist, sizeof blist, "%s", batches);
        for (char *save2, *bs = strtok_r(blist, ",", &save2); bs; bs = strtok_r(NULL, ",", &save2)) {
            const int b = atoi(bs);
            if (b < 1 || b > nrows) {
                fprintf(stderr, "e2e_bench: batch %d: must be 1..%d (rows in %s)\n", b, nrows, ids_path);
                return 2;
            }
            /* a batch is b consecutive rows, cycling through the file */
            const int nb = nrows / b;
            int32_t *off = malloc(sizeof(int32_t) * (b + 1));
            float *out = malloc(sizeof(float) * (size_t)b * h);
            int32_t **bid = malloc(sizeof(int32_t *) * nb);
            for (int j = 0; j < nb; j++)
                bid[j] = all + roff[j * b];
            for (int s = 0; s <= b; s++)
                off[s] = roff[s] - roff[0]; /* rows have one length (checked above) */
            int runs = 0, cap = 1024;
            double *t = malloc(sizeof(double) * cap);
            mt_cuda_counts c0, c1; /* the GEMM paths of the first (eager) forward */
            mt_cuda_get_counts(be, &c0);
            for (int w = 0; w < 3; w++) { /* warm-up: plans, pool, autotuned paths */
                if (mt_model_forward(m, bid[w % nb], off, b, out, NULL, &err) != MT_OK) {
                    fprintf(stderr, "e2e_bench: %s batch %d: %s\n", pn, b, err.msg);
                    return 1;
                }
                if (w == 0)
                    mt_cuda_get_counts(be, &c1);
            }
            if (cudaProfilerStart() != cudaSuccess) {
                fprintf(stderr, "e2e_bench: cudaProfilerStart failed\n");
                return 1;
            }
            const double e0 = nvml_mj(), start = now_s();
            while ((now_s() - start < seconds || runs < 5) && runs < 100000) {
                const double a = now_s();
                if (mt_model_forward(m, bid[runs % nb], off, b, out, NULL, &err) != MT_OK) {
                    fprintf(stderr, "e2e_bench: %s batch %d: %s\n", pn, b, err.msg);
                    return 1;
                }
                if (runs == cap)
                    t = realloc(t, sizeof(double) * (cap *= 2));
                t[runs++] = now_s() - a;
            }
            const double wall = now_s() - start, e1 = nvml_mj();
            if (cudaProfilerStop() != cudaSuccess) {
                fprintf(stderr, "e2e_bench: cudaProfilerStop failed\n");
                return 1;
            }
            qsort(t, runs, sizeof *t, cmp_d);
            const double med = t[runs / 2];
            char energy[64] = "null";
            if (e0 >= 0 && e1 >= 0)
                snprintf(energy, sizeof energy, "%.3f", (e1 - e0) / 1000.0 / ((double)runs * b) * 1000.0);
            char paths[320];
            snprintf(paths, sizeof paths,
                     "{\"fused\": %ld, \"direct\": %ld, \"dequant\": %ld, \"w8a8\": %ld, "
                     "\"w8a8_i8\": %ld, \"w8a8_ln\": %ld, \"lt16\": %ld, \"lt32\": %ld, "
                     "\"gelu_epilogue\": %ld, \"bias_pass\": %ld}",
                     c1.fused - c0.fused, c1.fused_direct - c0.fused_direct,
                     c1.lt_dequant - c0.lt_dequant, c1.lt_w8a8 - c0.lt_w8a8,
                     c1.w8a8_i8 - c0.w8a8_i8, c1.w8a8_ln - c0.w8a8_ln, c1.lt_16 - c0.lt_16, c1.lt_32 - c0.lt_32,
                     c1.lt_gelu_epi - c0.lt_gelu_epi, c1.bias_pass - c0.bias_pass);
            fprintf(jf, "%s\n  {\"precision\": \"%s\", \"batch\": %d, \"tokens_per_row\": %d, "
                        "\"runs\": %d, \"median_s\": %.6f, \"sentences_per_s\": %.1f, "
                        "\"mean_sentences_per_s\": %.1f, \"j_per_1000\": %s, \"load_s\": %.2f, "
                        "\"gemm_paths\": %s}",
                    first ? "" : ",", pn, b, roff[1] - roff[0], runs, med, b / med,
                    runs * (double)b / wall, energy, load_s, paths);
            fflush(jf);
            fprintf(stderr, "e2e_bench: %-5s batch %3d: %8.1f sentences/s, %s J/1000 (%d runs); "
                            "GEMM paths of one forward %s\n",
                    pn, b, b / med, energy, runs, paths);
            first = 0;
            free(off), free(out), free(bid), free(t);
        }
        mt_model_free(m);
        mt_backend_destroy(be);
    }
    fprintf(jf, "\n]}\n");
    if (jf != stdout)
        fclose(jf);
    free(all), free(roff);
    return 0;
}
