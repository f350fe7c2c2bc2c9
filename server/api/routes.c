/* routes.c: every endpoint in one table (routes.h's rows: method, path,
 * handler, error shape, flags, and a line on what it is for), handed to
 * the transport with the hooks of call.c; GET / lists the same table
 * (api_index). */
#include <stdatomic.h>
#include <string.h>

#include "server/api/api.h"

#define ROUTE_ROW(method, path, handler, style, flags, what) {method, path, handler, style, flags},
#define ROUTE_WHAT(method, path, handler, style, flags, what) what,

static const http_route routes[] = {ROUTES(ROUTE_ROW)};
static const char *const route_what[] = {ROUTES(ROUTE_WHAT)};

const http_route *api_routes(int *n)
{
    *n = (int)(sizeof routes / sizeof *routes);
    return routes;
}

/* A route's path as the index shows it: the first {} is the model, the
 * second its version. */
static void index_path(sbuf *b, const char *pattern)
{
    char path[128];
    size_t n = 0;
    int holes = 0;
    for (const char *c = pattern; *c && n + 10 < sizeof path; c++) {
        if (c[0] == '{' && c[1] == '}') {
            const char *name = holes++ ? "{version}" : "{model}";
            memcpy(path + n, name, strlen(name));
            n += strlen(name);
            c++;
        } else {
            path[n++] = *c;
        }
    }
    sb_json_str(b, path, n);
}

/* GET /: the server, its version and every route of the table above; as
 * TEI's GET / also the health check (503 when not ready). Unlike the other
 * health checks it needs a key when API keys are on (it names the build):
 * GET /health is TEI's public one. */
API_HANDLER(api_index)
{
    bool ready = app->models && atomic_load(&app->models->ready) &&
                 !(app->sched && sched_draining(app->sched));
    if (!ready) {
        api_error(r, 503, NULL, "the server is not ready or is shutting down");
        return;
    }
    sbuf *b = &r->body;
    sb_puts(b, "{\"name\":\"mantissa\",\"version\":\"" MANTISSA_VERSION "\",\"commit\":");
    sb_json_str(b, mt_build_commit(), strlen(mt_build_commit()));
    sb_puts(b, ",\"routes\":[");
    static const char *const api_name[] = {[API_KSERVE] = "kserve", [API_OPENAI] = "openai",
                                           [API_TEI] = "tei"};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        sb_printf(b, "%s{\"method\":\"%s\",\"path\":", i ? "," : "", routes[i].method);
        index_path(b, routes[i].pattern);
        sb_printf(b, ",\"api\":\"%s\",\"what\":", api_name[routes[i].style]);
        sb_json_str(b, route_what[i], strlen(route_what[i]));
        sb_putc(b, '}');
    }
    sb_puts(b, "]}");
}
