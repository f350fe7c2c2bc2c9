/* conns.h: the transport's table of open connections, and what it does at
 * the connection limit.
 *
 * Every connection is counted from the moment it is accepted, with whether
 * a request is in progress on it and when it last was. When one arrives at
 * the limit (server.connection_limit), the idlest idle connection (no
 * request in progress; the longest since its last activity) is closed to
 * make room: piles of idle keep-alive or never-used connections cannot lock
 * real clients out. When every connection is busy, a few more are admitted
 * as reserved (server.probe_connections): they may only ask the health
 * probes, so that Kubernetes does not restart a pod that is merely
 * saturated; past those, new connections are closed at once. An optional
 * per-address limit (server.max_connections_per_ip) closes a client's
 * connections beyond it. Closing is shutdown(2) on the socket: the
 * transport's own thread then sees the end of the stream and cleans up.
 *
 * Thread-safe: the transport's threads call it, under one mutex.
 */
#ifndef MT_SERVER_NET_CONNS_H
#define MT_SERVER_NET_CONNS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "engine/status.h"

typedef struct conn_table conn_table;
typedef struct conn_entry conn_entry;

typedef struct {
    int limit;   /* connections kept open */
    int reserve; /* more, for health probes only, when all are busy */
    int per_ip;  /* 0: no per-address limit */
} conn_limits;

typedef struct {
    long open, busy, limit;
    unsigned long accepted, evicted, reserved, refused_limit, refused_per_ip;
} conn_stats;

mt_status conns_create(const conn_limits *l, conn_table **out, mt_err *err);
void conns_destroy(conn_table *t);

/* A connection was accepted on socket fd from addr: admitted (the entry to
 * pass back below; it may have made room by closing the idlest idle
 * connection), or refused (its socket shut down; NULL). */
conn_entry *conns_open(conn_table *t, int fd, const struct sockaddr *addr);
/* The connection is being closed (before its socket is). */
void conns_close(conn_table *t, conn_entry *e);
/* A request began / ended on it. */
void conns_request(conn_table *t, conn_entry *e, bool begins);
/* Admitted over the limit: it may only ask the health probes. */
bool conns_reserved(const conn_entry *e);

void conns_get_stats(conn_table *t, conn_stats *out);

#endif
