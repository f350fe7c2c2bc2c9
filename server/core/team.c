/* team.c: how many threads a batch runs on. A forward is hundreds of short
 * ops; on a team of threads each one forks and joins, and a thread that has
 * gone to sleep takes tens of microseconds to wake. For a batch of a few
 * tokens that can cost more than the team saves: on the 2-core dev VM an
 * int8 forward of one 9-token sentence took 1.7 ms on one thread and 3.3 ms
 * on two (bench/results/team-*.md). How many tokens are "a few" depends on
 * the precision's kernels and on the machine, so it is measured for each
 * build when it is made: single sequences of 8, 16, 32, 64 and 128 tokens,
 * timed on one thread and on the whole team, interleaved; the build runs
 * batches of up to the longest length where one thread was faster on one
 * thread (srv_variant.solo_tokens). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/core/models.h"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One sequence of len tokens: the text's first len - 1 ids then its last
 * (the closing special token), from a text long enough for any len. */
static int sequence(mt_model *m, int len, int32_t *ids)
{
    static const char text[] =
        "a measured choice of threads for every batch the engine runs in this build of the "
        "model so that short requests do not pay for waking a team they cannot keep busy "
        "while long ones still use every core the machine has to give them now and later on";
    int32_t all[512];
    int got = 0;
    mt_err err;
    int cap = len < (int)(sizeof all / sizeof *all) ? len : (int)(sizeof all / sizeof *all);
    if (mt_model_tokenize(m, text, strlen(text), all, cap, &got, NULL, &err) != MT_OK || got < 2)
        return 0;
    memcpy(ids, all, sizeof(int32_t) * (size_t)got);
    return got;
}

/* Median seconds of a forward of ids (n tokens) on `threads` threads
 * (0: the team), over runs runs; < 0 when a forward failed. */
static double time_forward(srv_variant *v, const int32_t *ids, int n, int threads, int runs)
{
    const int32_t off[2] = {0, n};
    float *out = malloc(sizeof(float) * (size_t)v->model->info.hidden);
    double t[16];
    mt_err err;
    v->be->ops->set_threads(v->be, threads);
    int ok = out != NULL;
    for (int r = 0; ok && r < runs; r++) {
        double t0 = mono_s();
        ok = mt_model_forward(v->model, ids, off, 1, out, NULL, &err) == MT_OK;
        t[r] = mono_s() - t0;
    }
    v->be->ops->set_threads(v->be, 0);
    free(out);
    if (!ok)
        return -1;
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    return t[runs / 2];
}

void srv_measure_team(srv_variant *v)
{
    static const int lengths[] = {8, 16, 32, 64, 128};
    v->solo_tokens = 0;
    if (!v->be->ops->set_threads || v->be->threads <= 1)
        return;
    int32_t ids[512];
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        const int len = lengths[i] < v->max_seq_len ? lengths[i] : v->max_seq_len;
        const int n = sequence(v->model, len, ids);
        if (n < 2)
            return;
        time_forward(v, ids, n, 1, 2); /* warm both (first calls make primitives) */
        time_forward(v, ids, n, 0, 2);
        double one = 0, team = 0;
        for (int round = 0; round < 3; round++) { /* interleaved: the same load for both */
            one += time_forward(v, ids, n, 1, 3);
            team += time_forward(v, ids, n, 0, 3);
        }
        if (!(one > 0 && team > 0 && one < team))
            return;
        v->solo_tokens = n;
        if (len == v->max_seq_len)
            return;
    }
}
