/* fuzz_server.h: set-up for the harnesses that drive a whole endpoint
 * handler (fuzz_openai.c, fuzz_kserve.c): a config and the real
 * all-MiniLM-L6-v2 weights loaded once, kept small so a request that
 * passes validation runs a cheap forward (at most 4 texts of 16 tokens,
 * one engine thread). Two models share the weights: "minilm" truncates
 * long texts, "strict" refuses them (400).
 *
 * The model folder is models/all-MiniLM-L6-v2 (make model) relative to
 * the repository root, or $MANTISSA_MODEL_DIR.
 */
#ifndef MT_TESTS_FUZZ_SERVER_H
#define MT_TESTS_FUZZ_SERVER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "server/api/api.h"
#include "server/base/log.h"
#include "server/core/config.h"
#include "server/core/models.h"

#define FUZZ_MAX_INPUTS 4
#define FUZZ_MAX_SEQ 16

static http_app fuzz_ctx;

static void fuzz_server_init(const char *who)
{
    const char *dir = getenv("MANTISSA_MODEL_DIR");
    if (!dir)
        dir = "models/all-MiniLM-L6-v2";
    char text[2048];
    snprintf(text, sizeof text,
             "{\"server\": {\"max_inputs\": %d, \"engine_threads\": 1},"
             " \"models\": ["
             "  {\"name\": \"minilm\", \"path\": \"%s\", \"max_seq_len\": %d, \"truncate\": true,"
             "   \"variants\": [{\"name\": \"fp32\", \"precision\": \"fp32\"}]},"
             "  {\"name\": \"strict\", \"path\": \"%s\", \"max_seq_len\": %d, \"truncate\": false,"
             "   \"variants\": [{\"name\": \"fp32\", \"precision\": \"fp32\"}]}]}",
             FUZZ_MAX_INPUTS, dir, FUZZ_MAX_SEQ, dir, FUZZ_MAX_SEQ);
    cfg_config *cfg = NULL;
    srv_models *models = NULL;
    mt_err err = {{0}};
    if (cfg_parse(text, strlen(text), who, &cfg, &err) != MT_OK ||
        srv_models_load(cfg, &models, &err) != MT_OK) {
        fprintf(stderr, "%s: %s (run `make model` first, from the repository root)\n", who,
                err.msg);
        exit(1);
    }
    fuzz_ctx.cfg = cfg;
    fuzz_ctx.models = models;
    log_set_level(LOG_OFF); /* a request log line per input would drown the fuzzer's output */
}

/* Runs handler h on req the way the transport does: the request's record
 * first (the begin hook), then the handler (which, with no scheduler, runs
 * the forward itself), then the sent and done hooks, which release what
 * the request held. resp keeps the answer. */
static void fuzz_handle(http_handler h, const http_req *req, const char *const *params,
                        http_resp *resp)
{
    const http_hooks *hooks = api_hooks();
    *resp = (http_resp){.status = 200};
    resp->call = hooks->begin(&fuzz_ctx, req, NULL);
    if (!resp->call) {
        fprintf(stderr, "fuzz: out of memory\n");
        abort();
    }
    h(&fuzz_ctx, req, params, resp);
    hooks->sent(&fuzz_ctx, resp->call, resp);
    hooks->done(&fuzz_ctx, resp->call, true);
    resp->call = NULL;
}

/* libFuzzer's -timeout arms SIGALRM, which lands on this thread while it
 * runs the forward. oneDNN's JIT GEMM kernels point rsp into a heap buffer
 * while they run (oneDNN issue 4845), so a handler run on the interrupted
 * stack writes into the heap (ASan reports it in clock_gettime under
 * AlarmCallback). The server blocks such signals in its GEMM threads
 * (server/main.c); here the alarm must stay deliverable, so its handler is
 * moved onto an alternate signal stack. Call from LLVMFuzzerTestOneInput:
 * libFuzzer installs its handlers after LLVMFuzzerInitialize. */
static void fuzz_alarm_on_own_stack(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0 || (ss.ss_flags & SS_DISABLE)) {
        const size_t size = 1 << 16;
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("fuzz: mmap for the signal stack");
            abort();
        }
        ss = (stack_t){.ss_sp = p, .ss_size = size, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) != 0) {
            perror("fuzz: sigaltstack");
            abort();
        }
    }
    struct sigaction sa;
    if (sigaction(SIGALRM, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
        sa.sa_handler != SIG_IGN) {
        sa.sa_flags |= SA_ONSTACK;
        sigaction(SIGALRM, &sa, NULL);
    }
}

/* The value of a response header the handler set, or NULL. */
static const char *fuzz_resp_header(const http_resp *r, const char *name)
{
    for (int i = 0; i < r->nheaders; i++)
        if (!strcmp(r->headers[i].name, name))
            return r->headers[i].value;
    return NULL;
}

#endif
