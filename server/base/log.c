/* log.c: JSON-lines logging to stderr (see log.h). Each line is built in
 * one buffer and written with one write(2), so lines from different
 * threads never interleave. */
#include "server/base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "server/base/sbuf.h"

static atomic_int min_level = LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

int log_level_parse(const char *s)
{
    for (int i = LOG_DEBUG; i <= LOG_OFF; i++)
        if (s && !strcmp(s, level_names[i]))
            return i;
    return -1;
}

void log_set_level(int level)
{
    atomic_store(&min_level, level);
}

int log_enabled(int level)
{
    return level >= atomic_load(&min_level) && level < LOG_OFF;
}

/* Starts a line with the wall-clock time (RFC 3339, UTC, ms) and level. */
static void line_start(sbuf *b, int level)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    sb_printf(b, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\"", ts, (long)(tv.tv_usec / 1000),
              level_names[level]);
}

static void line_end(sbuf *b)
{
    sb_puts(b, "}\n");
    if (!b->oom) {
        ssize_t w = write(STDERR_FILENO, b->data, b->len);
        (void)w;
    }
    sb_free(b);
}

void log_msg(int level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sbuf b;
    sb_init(&b);
    line_start(&b, level);
    sb_puts(&b, ",\"msg\":");
    sb_json_str(&b, msg, strlen(msg));
    line_end(&b);
}

/* Adds ,"key":"value" when value is set. */
static void put_str(sbuf *b, const char *key, const char *v)
{
    if (!v)
        return;
    sb_printf(b, ",\"%s\":", key);
    sb_json_str(b, v, strlen(v));
}

void log_request(int level, const log_request_fields *f)
{
    if (!log_enabled(level))
        return;
    sbuf b;
    sb_init(&b);
    line_start(&b, level);
    sb_puts(&b, ",\"msg\":\"request\"");
    put_str(&b, "id", f->id);
    put_str(&b, "method", f->method);
    put_str(&b, "path", f->path);
    put_str(&b, "model", f->model);
    put_str(&b, "variant", f->variant);
    sb_printf(&b, ",\"status\":%d", f->status);
    if (f->inputs)
        sb_printf(&b, ",\"inputs\":%d,\"tokens\":%ld", f->inputs, f->tokens);
    sb_printf(&b, ",\"queue_ms\":%.3f,\"compute_ms\":%.3f,\"total_ms\":%.3f", f->queue_ms,
              f->compute_ms, f->total_ms);
    put_str(&b, "error", f->error);
    line_end(&b);
}
