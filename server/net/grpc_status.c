/* grpc_status.c: the gRPC status of a REST answer (grpc.h), compiled in
 * every build: the gRPC transport answers with it, and the tracing of a
 * gRPC call (server/api/trace.c) records it, with or without gRPC. */
#include "server/net/grpc.h"

#include <stdio.h>

void grpc_front_status_of(int http_status, const char *msg, grpc_front_status *st)
{
    int code;
    switch (http_status) {
    case 200: code = GRPC_FRONT_OK; break;
    case 401: code = GRPC_FRONT_UNAUTHENTICATED; break;
    case 403: code = GRPC_FRONT_PERMISSION_DENIED; break;
    case 404: code = GRPC_FRONT_NOT_FOUND; break;
    case 405: code = GRPC_FRONT_UNIMPLEMENTED; break;
    case 413: code = GRPC_FRONT_RESOURCE_EXHAUSTED; break;
    case 424: code = GRPC_FRONT_FAILED_PRECONDITION; break;
    case 429: /* fall through: both say "retry later" */
    case 503: code = GRPC_FRONT_UNAVAILABLE; break;
    case 499: code = GRPC_FRONT_CANCELLED; break;
    case 504: code = GRPC_FRONT_DEADLINE_EXCEEDED; break;
    default: code = http_status >= 500 ? GRPC_FRONT_INTERNAL : GRPC_FRONT_INVALID_ARGUMENT;
    }
    st->code = code;
    snprintf(st->msg, sizeof st->msg, "%s", msg ? msg : "");
}
