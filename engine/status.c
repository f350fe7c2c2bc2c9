/* status.c: mt_status names and error-message formatting. */
#include "engine/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

mt_status mt_fail(mt_err *err, mt_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

mt_status mt_prefix(mt_err *err, mt_status s, const char *fmt, ...)
{
    if (err) {
        char head[256], old[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(head, sizeof head, fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof old);
        if (snprintf(err->msg, sizeof err->msg, "%s%s", head, old) >= (int)sizeof err->msg)
            memcpy(err->msg + sizeof err->msg - 4, "...", 4); /* cut, and say so */
    }
    return s;
}

const char *mt_strerror(mt_status s)
{
    switch (s) {
    case MT_OK: return "ok";
    case MT_EINVAL: return "invalid argument";
    case MT_EIO: return "i/o error";
    case MT_EFORMAT: return "malformed data";
    case MT_ENOMEM: return "out of memory";
    case MT_EUNSUPPORTED: return "unsupported";
    case MT_ELIMIT: return "over limit";
    case MT_EUTF8: return "invalid utf-8";
    case MT_ENOTFOUND: return "not found";
    case MT_EINTERNAL: return "internal error";
    }
    return "unknown status";
}
