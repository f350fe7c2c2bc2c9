/* conns.c: the table of open connections and what happens at the
 * connection limit (see conns.h). */
#include "server/net/conns.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/base/log.h"

struct conn_entry {
    conn_entry *prev, *next;
    int fd;
    int family;
    unsigned char addr[16]; /* the peer's address (IPv4: the first 4 bytes) */
    uint64_t last;          /* monotonic ns: accepted, or its last request ended */
    bool busy;              /* a request is in progress */
    bool reserved;          /* admitted over the limit: probes only */
    bool closing;           /* shut down by us; its close has not come yet */
};

struct conn_table {
    pthread_mutex_t mu;
    conn_limits l;
    conn_entry *head;
    long open;              /* entries not closing */
    long busy;
    conn_stats st;
    uint64_t last_warn;     /* when the limit was last logged */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

mt_status conns_create(const conn_limits *l, conn_table **out, mt_err *err)
{
    conn_table *t = calloc(1, sizeof *t);
    if (!t)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    t->l = *l;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return MT_OK;
}

void conns_destroy(conn_table *t)
{
    if (!t)
        return;
    while (t->head) {
        conn_entry *e = t->head;
        t->head = e->next;
        free(e);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* The peer's address as (family, bytes); false for other families. */
static bool peer(const struct sockaddr *a, int *family, unsigned char bytes[16])
{
    memset(bytes, 0, 16);
    if (a && a->sa_family == AF_INET) {
        memcpy(bytes, &((const struct sockaddr_in *)a)->sin_addr, 4);
        *family = AF_INET;
        return true;
    }
    if (a && a->sa_family == AF_INET6) {
        memcpy(bytes, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
        *family = AF_INET6;
        return true;
    }
    *family = 0;
    return false;
}

/* Open connections (not closing) from the address (lock held). */
static int from_address(const conn_table *t, int family, const unsigned char *addr)
{
    int n = 0;
    for (const conn_entry *e = t->head; e; e = e->next)
        n += !e->closing && e->family == family && !memcmp(e->addr, addr, 16);
    return n;
}

/* The idle connection with the oldest activity, or NULL (lock held). */
static conn_entry *idlest(const conn_table *t)
{
    conn_entry *best = NULL;
    for (conn_entry *e = t->head; e; e = e->next)
        if (!e->busy && !e->closing && (!best || e->last < best->last))
            best = e;
    return best;
}

/* One warning a minute at most while the limit is being hit (lock held). */
static void warn_limit(conn_table *t, const char *what)
{
    uint64_t now = now_ns();
    if (t->last_warn && now - t->last_warn < 60000000000ull)
        return;
    t->last_warn = now;
    log_msg(LOG_WARN,
            "connection limit %d reached: %s (counts in mantissa_http_connections_*; see "
            "server.connection_limit)",
            t->l.limit, what);
}

conn_entry *conns_open(conn_table *t, int fd, const struct sockaddr *addr)
{
    int family;
    unsigned char bytes[16];
    bool ip = peer(addr, &family, bytes);
    conn_entry *e = calloc(1, sizeof *e);
    bool reserved = false;
    pthread_mutex_lock(&t->mu);
    if (e && ip && t->l.per_ip > 0 && from_address(t, family, bytes) >= t->l.per_ip) {
        t->st.refused_per_ip++;
        goto refuse;
    }
    if (e && t->open >= t->l.limit) {
        conn_entry *victim = idlest(t);
        if (victim) { /* make room: the idlest idle connection goes */
            shutdown(victim->fd, SHUT_RDWR);
            victim->closing = true;
            t->open--;
            t->st.evicted++;
            warn_limit(t, "closing the idlest idle connections to admit new ones");
        } else if (t->open < (long)t->l.limit + t->l.reserve) {
            reserved = true;
            t->st.reserved++;
            warn_limit(t, "every connection is busy; new ones may only ask the health probes");
        } else {
            t->st.refused_limit++;
            warn_limit(t, "every connection is busy; refusing new ones");
            goto refuse;
        }
    }
    if (!e) {
        t->st.refused_limit++;
        goto refuse;
    }
    *e = (conn_entry){.next = t->head, .fd = fd, .family = family, .last = now_ns(),
                      .reserved = reserved};
    memcpy(e->addr, bytes, 16);
    if (t->head)
        t->head->prev = e;
    t->head = e;
    t->open++;
    t->st.accepted++;
    pthread_mutex_unlock(&t->mu);
    return e;
refuse:
    shutdown(fd, SHUT_RDWR);
    pthread_mutex_unlock(&t->mu);
    free(e);
    return NULL;
}

void conns_close(conn_table *t, conn_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&t->mu);
    if (e->prev)
        e->prev->next = e->next;
    else
        t->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    t->open -= !e->closing;
    t->busy -= e->busy;
    pthread_mutex_unlock(&t->mu);
    free(e);
}

void conns_request(conn_table *t, conn_entry *e, bool begins)
{
    if (!e)
        return;
    pthread_mutex_lock(&t->mu);
    if (begins != e->busy) {
        e->busy = begins;
        t->busy += begins ? 1 : -1;
    }
    if (!begins)
        e->last = now_ns();
    pthread_mutex_unlock(&t->mu);
}

bool conns_reserved(const conn_entry *e)
{
    return e && e->reserved;
}

void conns_get_stats(conn_table *t, conn_stats *out)
{
    pthread_mutex_lock(&t->mu);
    *out = t->st;
    out->open = t->open;
    out->busy = t->busy;
    out->limit = t->l.limit;
    pthread_mutex_unlock(&t->mu);
}
