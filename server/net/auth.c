/* auth.c: API keys from a file, checked in constant time per key (see
 * auth.h). */
#include "server/net/auth.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/jsonfile.h"

struct auth_keys {
    char **keys;
    int n;
};

mt_status auth_load(const char *path, auth_keys **out, mt_err *err)
{
    char *text;
    size_t len;
    mt_status st = mt_read_file(path, 1u << 20, &text, &len, err);
    if (st != MT_OK)
        return mt_prefix(err, st, "server.api_keys_file: ");
    auth_keys *a = calloc(1, sizeof *a);
    int cap = 0;
    if (!a) {
        free(text);
        return mt_fail(err, MT_ENOMEM, "out of memory");
    }
    for (char *save, *line = strtok_r(text, "\r\n", &save); line;
         line = strtok_r(NULL, "\r\n", &save)) {
        while (*line == ' ' || *line == '\t')
            line++;
        size_t n = strlen(line);
        while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = 0;
        if (!n || *line == '#')
            continue;
        if (a->n == cap) {
            cap = cap ? cap * 2 : 8;
            char **k = realloc(a->keys, sizeof *k * (size_t)cap);
            if (!k)
                goto oom;
            a->keys = k;
        }
        if (!(a->keys[a->n] = strdup(line)))
            goto oom;
        a->n++;
    }
    free(text);
    if (!a->n) {
        auth_free(a);
        return mt_fail(err, MT_EINVAL, "server.api_keys_file: %s holds no key", path);
    }
    *out = a;
    return MT_OK;
oom:
    free(text);
    auth_free(a);
    return mt_fail(err, MT_ENOMEM, "out of memory");
}

void auth_free(auth_keys *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n; i++)
        free(a->keys[i]);
    free(a->keys);
    free(a);
}

/* Compares without an early exit, so the time taken does not tell how
 * much of a key was right. */
static bool same(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    unsigned char d = alen != blen;
    for (size_t i = 0; i < alen; i++)
        d |= (unsigned char)(a[i] ^ b[i % (blen ? blen : 1)]);
    return d == 0;
}

bool auth_check(const auth_keys *a, const char *h)
{
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    size_t n = strlen(h);
    bool ok = false;
    for (int i = 0; i < a->n; i++)
        ok |= same(h, n, a->keys[i]);
    return ok;
}
