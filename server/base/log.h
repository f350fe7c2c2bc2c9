/* log.h: the server's log on stderr, in one format per run: JSON lines
 * (ts, level, msg and the line's fields) or text lines ("mantissa: " and
 * the words). One line per request (id, model, variant, status, queue and
 * compute time), per event, and for start-up and shutdown (what was
 * loaded, where it serves, stopping, stopped), filtered by
 * server.log_level. The format starts as text (the CLI's subcommands keep
 * it); serve sets the config's (server.log_format, or --log-format) once it
 * is known. */
#ifndef MT_SERVER_LOG_H
#define MT_SERVER_LOG_H

#include <stdarg.h>
#include <stdint.h>

#include "server/base/sbuf.h"

typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF } log_level;

/* Or'ed into a level: the line is written whatever server.log_level says
 * ("off" included): start-up and shutdown lines, and the errors that stop
 * a start. */
#define LOG_ALWAYS 0x100

typedef enum { LOG_TEXT, LOG_JSON } log_format;

/* The level named s ("debug", "info", "warn", "error", "off"); -1 if none. */
int log_level_parse(const char *s);
/* The format named s ("text", "json"); -1 if none. */
int log_format_parse(const char *s);

/* Sets the level below which nothing is written (LOG_*). */
void log_set_level(int level);
int log_enabled(int level);
/* Sets the format of every line written from now on (LOG_TEXT, LOG_JSON). */
void log_set_format(int format);
int log_get_format(void);

/* An event: {"ts":...,"level":...,"msg":"..."}, or "mantissa: ..." */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A line with fields, built in steps and written by log_end in the format
 * in force: JSON takes msg and the fields (log_str ... log_bool), text
 * takes the words (log_words; msg when there are none). Each step does
 * nothing when the line's level is filtered out.
 *
 *   log_line l;
 *   log_begin(&l, LOG_INFO | LOG_ALWAYS, "stopping");
 *   log_int(&l, "signal", sig);
 *   log_words(&l, "signal %d: stopping", sig);
 *   log_end(&l);
 */
typedef struct {
    sbuf b;
    const char *msg;
    int on, json, words;
} log_line;

void log_begin(log_line *l, int level, const char *msg);
void log_str(log_line *l, const char *key, const char *v); /* NULL: left out */
void log_int(log_line *l, const char *key, long long v);
/* v with that many decimals; a NaN or infinity is null */
void log_num(log_line *l, const char *key, double v, int decimals);
void log_bool(log_line *l, const char *key, int v);
/* Appends to the text form's words. */
void log_words(log_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_end(log_line *l);

typedef struct {
    const char *id, *method, *path, *model, *variant, *error;
    const char *trace_id, *span_id; /* W3C trace context, hex (may be NULL) */
    int status, inputs;
    long tokens;
    double queue_ms, compute_ms, total_ms;
} log_request_fields;

/* The one line per request. */
void log_request(int level, const log_request_fields *f);

/* libmicrohttpd's error log (MHD_LogCallback's signature, for
 * MHD_OPTION_EXTERNAL_LOGGER; cls unused): each message a warning line
 * with "source":"libmicrohttpd" (text: "mantissa: libmicrohttpd: ..."). */
void log_mhd(void *cls, const char *fmt, va_list ap);

#endif
