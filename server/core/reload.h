/* reload.h: the hot-switch: reloading the config file while serving.
 *
 * Triggers: a change to the config file or its directory (libuv
 * fs_event, debounced by server.reload_debounce_ms; the directory too,
 * because editors and Kubernetes ConfigMaps replace files by rename),
 * SIGHUP, and the admin API (POST /v2/admin/reload, and Triton's
 * /v2/repository/models/{m}/load and /unload).
 *
 * A reload parses and validates the whole file first: an invalid file
 * changes nothing (logged, counted, shown in /v2/repository/index and
 * /v2/admin/config). Otherwise only what changed is rebuilt: a variant
 * whose build settings changed (precision, calibration, weights, gate),
 * every variant of a model whose path or max_seq_len changed, new
 * variants and models. Traffic weights, batching, queue limits, shadow
 * rate and drift floors apply at once, without a rebuild.
 *
 * Builds run on one loader thread, off the scheduler's loop, while the
 * old build keeps serving; a build that loads (and passes its gate, if
 * it has one) then replaces the old one in its slot under the model's
 * lock (see server/core/models.h for why that is safe for requests in flight).
 */
#ifndef MT_SERVER_RELOAD_H
#define MT_SERVER_RELOAD_H

#include "server/core/config.h"
#include "server/core/models.h"
#include "server/core/sched.h"

typedef struct reloader reloader;

/* Starts watching path (when boot->watch) and the loader thread, on s's
 * loop. boot is the config the server started with; server settings are
 * not reloaded (a change to them is logged as needing a restart). */
mt_status reload_create(sched *s, srv_models *models, const cfg_config *boot, const char *path,
                        reloader **out, mt_err *err);
/* After the loop has stopped: joins the loader thread and frees. */
void reload_destroy(reloader *r);

/* An admin request, run on the loop as a scheduler control job. */
typedef enum { RELOAD_FILE, RELOAD_LOAD, RELOAD_UNLOAD } reload_kind;

typedef struct {
    sched_job job;             /* job.control = reload_control, job.control_arg = reloader */
    reload_kind kind;
    char model[CFG_NAME_MAX];  /* for load and unload */
    int status;                /* the HTTP status to answer */
    char msg[1024];
} reload_request;

/* The control function for reload_request jobs: the job ends (and its
 * connection resumes) once the reload it asked for has finished building. */
void reload_control(sched *s, sched_job *j);

#endif
