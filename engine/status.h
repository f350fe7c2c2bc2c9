/* status.h: error values shared by every layer.
 *
 * Functions that can fail return an mt_status and fill an mt_err with a
 * message a caller can hand to a client or print on the command line.
 * Library code never exits and never prints to stdout.
 */
#ifndef MT_STATUS_H
#define MT_STATUS_H

#include <stddef.h>

typedef enum {
    MT_OK = 0,
    MT_EINVAL,       /* bad argument or bad input from a client */
    MT_EIO,          /* file could not be opened/read/written */
    MT_EFORMAT,      /* file or message is malformed */
    MT_ENOMEM,       /* allocation failed */
    MT_EUNSUPPORTED, /* valid, but this build/device cannot do it */
    MT_ELIMIT,       /* input is over a configured limit */
    MT_EUTF8,        /* text is not valid UTF-8 */
    MT_ENOTFOUND,    /* a named thing does not exist */
    MT_EINTERNAL,    /* a bug or an unexpected library failure */
} mt_status;

typedef struct {
    char msg[512];
} mt_err;

/* Formats a message into err (if not NULL) and returns s, so that failure
 * paths read `return mt_fail(err, MT_EIO, "%s: %s", path, strerror(errno));` */
mt_status mt_fail(mt_err *err, mt_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message ("file.safetensors: " + old message). */
mt_status mt_prefix(mt_err *err, mt_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *mt_strerror(mt_status s);

#endif
