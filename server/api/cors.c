/* cors.c: CORS (server.cors_allow_origins) in the application's hooks: the
 * Access-Control-* headers of every answer (call.c's sent hook) and the
 * answer to a preflight (the transport's options hook: OPTIONS on a path
 * the route table has, answered 204 without an API key, as browsers send
 * none with a preflight).
 *
 * Off (no origins, the default): no CORS header, and OPTIONS is 405 like
 * any method a path does not have, as Triton answers. TEI lets every
 * origin in unless told otherwise (tower-http's CorsLayer with
 * AllowOrigin::any); a server that may hold API keys opens to browsers'
 * pages only when its config says which.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/api/api.h"

/* The request headers a page may send. */
static const char *const allowed_headers[] = {
    "Content-Type",       "Authorization",        "X-Request-Id",
    "X-Mantissa-Variant", "X-Mantissa-Route-Key", "X-Mantissa-Model",
    "Inference-Header-Content-Length", "traceparent",          "tracestate",
};

/* The response headers a page may read, besides the CORS-safelisted ones. */
#define EXPOSED                                                                            \
    "X-Request-Id, X-Mantissa-Variant, X-Mantissa-Precision, X-Mantissa-Space, "          \
    "X-Mantissa-Truncated-Inputs, X-Queue-Time-Ms, X-Inference-Time-Ms, Server-Timing, " \
    "Retry-After, traceparent"

/* How long a browser may keep a preflight's answer (s). */
#define MAX_AGE 600

bool api_cors_on(const http_app *app)
{
    return app->cfg && app->cfg->cors_allow_origins[0];
}

/* Access-Control-Allow-Origin for a request from origin (may be NULL):
 * "*" when any origin is allowed, the origin itself when it is listed
 * (compared without regard to case), else none. False when none. */
static bool allow_origin(const http_app *app, const char *origin, http_resp *r)
{
    const size_t ol = origin ? strlen(origin) : 0;
    bool any = false, listed = false;
    for (const char *p = app->cfg->cors_allow_origins; *p;) {
        const size_t n = strcspn(p, " ");
        any |= n == 1 && *p == '*';
        listed |= origin && n == ol && !strncasecmp(p, origin, n);
        p += n + (p[n] == ' ');
    }
    if (any)
        http_set_header(r, "Access-Control-Allow-Origin", "*");
    else if (listed)
        http_set_header(r, "Access-Control-Allow-Origin", "%s", origin);
    return any || listed;
}

void api_cors_headers(const http_app *app, const char *origin, http_resp *r)
{
    if (!api_cors_on(app))
        return;
    if (allow_origin(app, origin && *origin ? origin : NULL, r))
        http_set_header(r, "Access-Control-Expose-Headers", EXPOSED);
    http_set_header(r, "Vary", "Origin");
}

/* Of the headers a preflight asks for (Access-Control-Request-Headers, a
 * comma-separated list), those a page may send, into out. */
static void allowed_of(const char *asked, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (const char *p = asked; p && *p;) {
        p += strspn(p, " \t,");
        const size_t n = strcspn(p, " \t,");
        for (size_t k = 0; n && k < sizeof allowed_headers / sizeof *allowed_headers; k++)
            if (strlen(allowed_headers[k]) == n && !strncasecmp(p, allowed_headers[k], n) &&
                len + n + 3 < cap) {
                len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "",
                                        allowed_headers[k]);
                break;
            }
        p += n;
    }
}

bool api_cors_preflight(const http_app *app, const http_req *req, const char *allow,
                        http_resp *r)
{
    if (!api_cors_on(app) || !http_header(req, "Access-Control-Request-Method"))
        return false; /* not a preflight: 405 */
    r->status = 204;
    if (r->call)
        r->call->preflight = true;
    if (allow_origin(app, http_header(req, "Origin"), r)) {
        char headers[256];
        allowed_of(http_header(req, "Access-Control-Request-Headers"), headers, sizeof headers);
        http_set_header(r, "Access-Control-Allow-Methods", "%s", allow);
        if (headers[0])
            http_set_header(r, "Access-Control-Allow-Headers", "%s", headers);
        http_set_header(r, "Access-Control-Max-Age", "%d", MAX_AGE);
    }
    http_set_header(r, "Vary",
                    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    return true;
}
