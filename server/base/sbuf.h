/* sbuf.h: a growable byte buffer for building responses (JSON text,
 * base64, binary tensors). Appends never fail loudly: an allocation failure
 * sets ->oom and later appends do nothing, so a handler checks once at the
 * end and answers 500 instead of crashing. */
#ifndef MT_SERVER_SBUF_H
#define MT_SERVER_SBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *data;
    size_t len, cap;
    bool oom;
} sbuf;

void sb_init(sbuf *b);
void sb_free(sbuf *b);
/* Hands the buffer over (the caller frees it) and resets b. */
char *sb_take(sbuf *b, size_t *len);
void sb_reserve(sbuf *b, size_t extra);
void sb_putn(sbuf *b, const void *p, size_t n);
void sb_puts(sbuf *b, const char *s);
void sb_putc(sbuf *b, char c);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vprintf(sbuf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* A JSON string literal (quotes included), escaping as RFC 8259 asks. */
void sb_json_str(sbuf *b, const char *s, size_t n);
/* A float32 as printf's "%.9g" writes it (reads back to the same float);
 * "null" for NaN and infinities. */
void sb_float(sbuf *b, float f);
/* The same text into out (at least 32 bytes) for a finite f; returns its
 * length. */
int sb_format_float(char *out, float f);
/* "[f0,f1,...]" */
void sb_float_array(sbuf *b, const float *v, size_t n);
/* Standard base64 (RFC 4648) with padding. */
void sb_base64(sbuf *b, const void *p, size_t n);

#endif
