/* reload_internal.h: what the hot-switch's two files share: reload.c (the
 * triggers, the loader thread, admin requests) and apply.c (a config's
 * diff, the builds it asks for, and swapping their results in). All of it
 * belongs to the scheduler's loop thread unless it says otherwise. */
#ifndef MT_SERVER_CORE_RELOAD_INTERNAL_H
#define MT_SERVER_CORE_RELOAD_INTERNAL_H

#include <pthread.h>
#include <uv.h>

#include "server/core/reload.h"

/* Builds one apply can take out of their slots: a model's present
 * variants (at most 65 with the reference) and as many just removed. */
#define OLD_MAX 160

/* One build to make: a variant of a model, as the config asked at gen. */
typedef struct task {
    struct task *next;
    srv_model *m;
    srv_slot *sl;
    uint64_t gen;       /* sl->want_gen when asked; older results are dropped */
    cfg_model mc;       /* a deep copy of the model's settings */
    cfg_variant vc;
    srv_variant *ref;   /* the reference build for a gate (a reference) or NULL */
    uint64_t t_noticed; /* uv_hrtime() when the change was noticed */
    /* result */
    srv_variant *out;
    mt_status st;
    bool skipped;       /* stale before it started */
    char err[512];
} task;

struct reloader {
    sched *s;
    srv_models *models;
    const cfg_config *boot;
    char *path, *dir, *base;
    uv_fs_event_t ev_file, ev_dir;
    uv_timer_t debounce;
    uv_signal_t sighup;
    uv_async_t wake;
    int nhandles;
    bool file_watched, dir_watched;
    bool closed;
    uint64_t t_noticed;  /* first event of the current debounce window; 0: none */
    char *last_text;     /* the file as last applied (an unchanged file is skipped) */
    size_t last_len;

    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *todo, *todo_tail, *done;
    bool quit, closing;

    int pending;          /* tasks out (loop) */
    sched_job *waiters;   /* control jobs waiting for pending == 0 (linked by job.next) */
};

/* ---- reload.c ---- */
/* Wall-clock seconds, for the times the config view shows. */
double rl_unix_now(void);
/* Frees a task and drops the builds it still holds. */
void rl_task_free(task *t);
/* Hands a build to the loader thread; counted until it comes back. */
void rl_post_task(reloader *r, task *t);

/* ---- apply.c ---- */
/* Reads, validates and applies the config file (only: one model, or NULL
 * for all; force: also rebuild what is out of rotation, and apply an
 * unchanged file). On an invalid file fills msg and returns false. */
bool rl_reload_now(reloader *r, const char *only, bool force, char *msg, size_t msgcap);
/* Takes m out of service (its builds go once their requests are done). */
void rl_unload_model(reloader *r, srv_model *m, const char *why, bool admin);
/* A build came back: swap it in, or record why not. */
void rl_apply_result(reloader *r, task *t);
/* Ends the admin requests waiting for builds, once none is out. */
void rl_wake_waiters(reloader *r);

#endif
