/* log.c: the log on stderr, JSON lines or text lines (see log.h). Each
 * line is built in one buffer and written with one write(2), so lines from
 * different threads never interleave. */
#include "server/base/log.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static atomic_int min_level = LOG_INFO;
static atomic_int format = LOG_TEXT;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};
static const char *const format_names[] = {"text", "json"};

int log_level_parse(const char *s)
{
    for (int i = LOG_DEBUG; i <= LOG_OFF; i++)
        if (s && !strcmp(s, level_names[i]))
            return i;
    return -1;
}

int log_format_parse(const char *s)
{
    for (int i = LOG_TEXT; i <= LOG_JSON; i++)
        if (s && !strcmp(s, format_names[i]))
            return i;
    return -1;
}

void log_set_level(int level)
{
    atomic_store(&min_level, level);
}

int log_enabled(int level)
{
    if (level & LOG_ALWAYS)
        return 1;
    return level >= atomic_load(&min_level) && level < LOG_OFF;
}

void log_set_format(int f)
{
    atomic_store(&format, f == LOG_JSON ? LOG_JSON : LOG_TEXT);
}

int log_get_format(void)
{
    return atomic_load(&format);
}

/* Starts a JSON line with the wall-clock time (RFC 3339, UTC, ms), level
 * and msg. */
static void json_start(sbuf *b, int level, const char *msg)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    sb_printf(b, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"msg\":", ts,
              (long)(tv.tv_usec / 1000), level_names[level & 0xff]);
    sb_json_str(b, msg, strlen(msg));
}

static void write_line(sbuf *b)
{
    if (!b->oom) {
        ssize_t w = write(STDERR_FILENO, b->data, b->len);
        (void)w;
    }
    sb_free(b);
}

void log_begin(log_line *l, int level, const char *msg)
{
    *l = (log_line){.msg = msg, .on = log_enabled(level), .json = log_get_format() == LOG_JSON};
    sb_init(&l->b);
    if (!l->on)
        return;
    if (l->json)
        json_start(&l->b, level, msg);
    else
        sb_puts(&l->b, "mantissa: ");
}

void log_str(log_line *l, const char *key, const char *v)
{
    if (!l->on || !l->json || !v)
        return;
    sb_printf(&l->b, ",\"%s\":", key);
    sb_json_str(&l->b, v, strlen(v));
}

void log_int(log_line *l, const char *key, long long v)
{
    if (l->on && l->json)
        sb_printf(&l->b, ",\"%s\":%lld", key, v);
}

void log_num(log_line *l, const char *key, double v, int decimals)
{
    if (!l->on || !l->json)
        return;
    if (isfinite(v))
        sb_printf(&l->b, ",\"%s\":%.*f", key, decimals, v);
    else
        sb_printf(&l->b, ",\"%s\":null", key);
}

void log_bool(log_line *l, const char *key, int v)
{
    if (l->on && l->json)
        sb_printf(&l->b, ",\"%s\":%s", key, v ? "true" : "false");
}

void log_words(log_line *l, const char *fmt, ...)
{
    if (!l->on || l->json)
        return;
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&l->b, fmt, ap);
    va_end(ap);
    l->words = 1;
}

void log_end(log_line *l)
{
    if (!l->on) {
        sb_free(&l->b);
        return;
    }
    if (l->json)
        sb_putc(&l->b, '}');
    else if (!l->words)
        sb_puts(&l->b, l->msg);
    sb_putc(&l->b, '\n');
    write_line(&l->b);
}

/* An event whose words are its msg in both formats. */
static void log_vmsg(int level, const char *fmt, va_list ap, const char *source)
{
    if (!log_enabled(level))
        return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == ' '))
        msg[--n] = 0; /* libmicrohttpd ends its messages with a newline */
    if (!n)
        return;
    log_line l;
    log_begin(&l, level, msg);
    log_str(&l, "source", source);
    if (source)
        log_words(&l, "%s: %s", source, msg);
    else
        log_words(&l, "%s", msg);
    log_end(&l);
}

void log_msg(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap, NULL);
    va_end(ap);
}

void log_mhd(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    log_vmsg(LOG_WARN, fmt, ap, "libmicrohttpd");
}

/* The request line's text form: "request ID: POST /path 200, model@variant,
 * 2 inputs, 14 tokens, 3.51 ms (queue 0.12, compute 3.20), trace TRACEID:
 * error". */
static void request_words(log_line *l, const log_request_fields *f)
{
    log_words(l, "request%s%s: %s %s %d", f->id ? " " : "", f->id ? f->id : "",
              f->method ? f->method : "-", f->path ? f->path : "-", f->status);
    if (f->model)
        log_words(l, ", %s%s%s", f->model, f->variant ? "@" : "", f->variant ? f->variant : "");
    if (f->inputs)
        log_words(l, ", %d input%s, %ld token%s", f->inputs, f->inputs == 1 ? "" : "s",
                  f->tokens, f->tokens == 1 ? "" : "s");
    log_words(l, ", %.2f ms (queue %.2f, compute %.2f)", f->total_ms, f->queue_ms,
              f->compute_ms);
    if (f->trace_id)
        log_words(l, ", trace %s", f->trace_id);
    if (f->error)
        log_words(l, ": %s", f->error);
}

void log_request(int level, const log_request_fields *f)
{
    if (!log_enabled(level))
        return;
    log_line l;
    log_begin(&l, level, "request");
    if (!l.json) {
        request_words(&l, f);
        log_end(&l);
        return;
    }
    log_str(&l, "id", f->id);
    log_str(&l, "method", f->method);
    log_str(&l, "path", f->path);
    log_str(&l, "model", f->model);
    log_str(&l, "variant", f->variant);
    log_int(&l, "status", f->status);
    if (f->inputs) {
        log_int(&l, "inputs", f->inputs);
        log_int(&l, "tokens", f->tokens);
    }
    log_num(&l, "queue_ms", f->queue_ms, 3);
    log_num(&l, "compute_ms", f->compute_ms, 3);
    log_num(&l, "total_ms", f->total_ms, 3);
    log_str(&l, "trace_id", f->trace_id);
    log_str(&l, "span_id", f->span_id);
    log_str(&l, "error", f->error);
    log_end(&l);
}
