/* test_workers.c: engine workers per device (server/core/sched.c): a batch
 * running on one device never holds a batch of another device's build.
 * Two real MiniLM builds are served by the real scheduler; the second is
 * moved onto a second device (another CPU backend instance standing in for
 * a GPU: the scheduler routes by srv_variant.be). The first build's
 * forward is held (its model's ops wrapped by a forward that waits on the
 * test) while a job of the second is submitted:
 *   - on two devices, the second job is answered while the first is held;
 *   - on one device (engine_workers 1), it is not: it waits for the first.
 * The holds are ordering, not timing: nothing measures how long anything
 * took. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/registry.h"
#include "server/core/config.h"
#include "server/core/models.h"
#include "server/core/sched.h"

static const char CFG[] =
    "{\"server\": {\"listen\": \"127.0.0.1:0\", \"engine_workers\": 1},"
    " \"models\": ["
    "  {\"name\": \"a\", \"path\": \"models/all-MiniLM-L6-v2\", \"device\": \"cpu\","
    "   \"variants\": [{\"name\": \"fp32\", \"precision\": \"fp32\", \"traffic\": 100}]},"
    "  {\"name\": \"b\", \"path\": \"models/all-MiniLM-L6-v2\", \"device\": \"cpu\","
    "   \"variants\": [{\"name\": \"fp32\", \"precision\": \"fp32\", \"traffic\": 100}]}]}";

/* The held forward: a's model's ops with forward waiting for release. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool entered, released;
static const mt_model_ops *real_ops;
static mt_model_ops held_ops;

static mt_status held_forward(mt_model *m, const int32_t *ids, const int32_t *off, int n,
                              float *out, float *norms, mt_err *err)
{
    pthread_mutex_lock(&mu);
    entered = true;
    pthread_cond_broadcast(&cv);
    while (!released)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return real_ops->forward(m, ids, off, n, out, norms, err);
}

/* A job of one text for build v, and whether it has ended. */
typedef struct {
    sched_job j;
    int32_t ids[8], off[2];
    float out[384];
    atomic_bool done;
} tjob;

static void on_done(sched_job *j)
{
    pthread_mutex_lock(&mu);
    atomic_store(&((tjob *)j)->done, true);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_free(sched_job *j) {}

static void submit(sched *s, srv_model *m, srv_variant *v, tjob *t)
{
    memset(t, 0, sizeof *t);
    const int32_t ids[5] = {101, 7592, 2088, 999, 102}; /* [CLS] hello world ! [SEP] */
    memcpy(t->ids, ids, sizeof ids);
    t->off[1] = 5;
    atomic_init(&t->j.refs, 1);
    t->j = (sched_job){.m = m, .v = v, .n = 1, .ids = t->ids, .off = t->off, .out = t->out,
                       .fd = -1, .on_done = on_done, .on_free = on_free};
    atomic_init(&t->j.refs, 1);
    ck_assert_int_eq(sched_admit(s, m), SCHED_ADMITTED);
    sched_submit(s, &t->j);
}

/* Waits (a guard of 60 s against a hang, not a measure) until *flag. */
static bool wait_for(atomic_bool *flag)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (!atomic_load(flag) && rc == 0)
        rc = pthread_cond_timedwait(&cv, &mu, &until);
    pthread_mutex_unlock(&mu);
    return atomic_load(flag);
}

/* The loop thread: makes the scheduler (its loop is this thread's), runs it. */
typedef struct {
    const cfg_config *cfg;
    srv_models *models;
    sched *s;
    atomic_bool up;
} loop_arg;

static void *loop_main(void *p)
{
    loop_arg *a = p;
    mt_err err;
    ck_assert_msg(sched_create(a->cfg, a->models, &a->s, &err) == MT_OK, "%s", err.msg);
    pthread_mutex_lock(&mu);
    atomic_store(&a->up, true);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    sched_run(a->s);
    return NULL;
}

/* Holds a's forward, submits b's job: whether b is answered while a is held. */
static bool b_runs_while_a_is_held(bool two_devices)
{
    cfg_config *cfg;
    srv_models *models;
    mt_err err;
    ck_assert_msg(cfg_parse(CFG, strlen(CFG), "test", &cfg, &err) == MT_OK, "%s", err.msg);
    ck_assert_msg(srv_models_load(cfg, &models, &err) == MT_OK, "%s", err.msg);
    srv_model *ma = srv_models_find(models, "a"), *mb = srv_models_find(models, "b");
    srv_variant *va = ma->slots[0]->cur, *vb = mb->slots[0]->cur;
    mt_backend *second = NULL;
    if (two_devices) { /* b's build moves onto a device of its own */
        ck_assert_int_lt(models->ndevices, SRV_MAX_DEVICES);
        ck_assert_msg(mt_backend_reg_host()->create(0, 1, &second, &err) == MT_OK, "%s",
                      err.msg);
        models->devices[models->ndevices++] = (srv_device){mt_backend_reg_host(), second};
        vb->be = second;
    }
    real_ops = va->model->ops;
    held_ops = *real_ops;
    held_ops.forward = held_forward;
    va->model->ops = &held_ops;
    entered = released = false;

    loop_arg la = {.cfg = cfg, .models = models};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, loop_main, &la), 0);
    ck_assert(wait_for(&la.up));
    static tjob ta, tb;
    submit(la.s, ma, va, &ta);
    pthread_mutex_lock(&mu);
    while (!entered)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    submit(la.s, mb, vb, &tb);
    /* two devices: b ends while a is held; one: b cannot end before a, so
     * give it a moment to show it does not (a wrong answer fails, never a slow one) */
    bool b_first;
    if (two_devices) {
        b_first = wait_for(&tb.done) && !atomic_load(&ta.done);
    } else {
        usleep(300 * 1000);
        b_first = atomic_load(&tb.done);
    }
    pthread_mutex_lock(&mu);
    released = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    ck_assert(wait_for(&ta.done) && wait_for(&tb.done));
    ck_assert_int_eq(ta.j.result, SCHED_OK);
    ck_assert_int_eq(tb.j.result, SCHED_OK);
    ck_assert(memcmp(ta.out, tb.out, sizeof ta.out) == 0); /* the same model and text */
    sched_release(la.s, ma);
    sched_release(la.s, mb);
    kill(getpid(), SIGTERM); /* the loop drains and returns */
    pthread_join(th, NULL);
    sched_destroy(la.s);
    va->model->ops = real_ops;
    if (second)
        models->ndevices--;
    srv_models_free(models);
    mt_backend_destroy(second);
    cfg_free(cfg);
    return b_first;
}

START_TEST(a_batch_on_one_device_does_not_hold_another_devices_batch)
{
    ck_assert_msg(b_runs_while_a_is_held(true),
                  "b's batch (on its own device) waited for a's held batch");
}
END_TEST

START_TEST(on_one_device_with_one_worker_the_second_batch_waits)
{
    ck_assert_msg(!b_runs_while_a_is_held(false),
                  "b's batch ran beside a's on the one worker of their device");
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("workers");
    TCase *tc = tcase_create("workers");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, a_batch_on_one_device_does_not_hold_another_devices_batch);
    tcase_add_test(tc, on_one_device_with_one_worker_the_second_batch_waits);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
