/* log.h: the server's log: JSON lines on stderr, one per request (id,
 * model, variant, status, queue and compute time) plus events, filtered by
 * server.log_level. Plain "mantissa: ..." lines stay for start-up and
 * fatal messages that a person reads before any config is in force. */
#ifndef MT_SERVER_LOG_H
#define MT_SERVER_LOG_H

#include <stdint.h>


typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF } log_level;

/* The level named s ("debug", "info", "warn", "error", "off"); -1 if none. */
int log_level_parse(const char *s);

/* Sets the level below which nothing is written (LOG_*). */
void log_set_level(int level);
int log_enabled(int level);

/* An event: {"ts":...,"level":...,"msg":"..."} */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct {
    const char *id, *method, *path, *model, *variant, *error;
    int status, inputs;
    long tokens;
    double queue_ms, compute_ms, total_ms;
} log_request_fields;

/* The one line per request. */
void log_request(int level, const log_request_fields *f);

#endif
