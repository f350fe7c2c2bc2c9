/* loadgen.c: one HTTP load generator for every server `make bench-peers`
 * compares (Mantissa, llama-server, infinity-emb): the same requests, the
 * same connections, the same clock.
 *
 *   loadgen --port P --path /v1/embeddings --bodies FILE --seconds S
 *           (--concurrency N | --rate R) [--max-conns 512] [--seed 1]
 *           [--timing FILE] [--expect embedding] [--timeout-s 30]
 *
 * FILE holds one JSON request body per line, sent in turn in an order
 * shuffled once with the seed (the same for every server), so that the mix
 * of bodies a point sends does not depend on how many it gets through: in
 * file order, the STS-B test file's first half averages 11.5 tokens and its
 * second 17.3, so a slow server's short run saw mostly short sentences (a
 * 3 s run of llama-server at 440 req/s, against 365-414 over 6 s). Closed loop
 * (--concurrency N): N keep-alive connections, each sending its next request
 * when its answer is in. Open loop (--rate R): Poisson arrivals at R/s (a
 * seeded exponential clock), each sent on an idle keep-alive connection or
 * a new one (at most --max-conns); its latency counts from its scheduled
 * time, so a server that falls behind shows it as latency (no coordinated
 * omission). An answer counts as good when its status is 200 and its body
 * holds the --expect string ("embedding"; "relevance_score" for the
 * rerank bench); others are counted by kind. Prints one JSON line:
 * requests, good, non200, bad_body, conn_errors, timeouts, seconds, rps
 * (good answers per second), p50_ms, p99_ms, mean_ms, cpu_s (this
 * process's CPU time).
 *
 * --timing FILE writes one line per good answer, to find where a slow
 * request's time went: its latency, how late this process sent it (the
 * send started after its due time: this process was not running), and the
 * answer's Server-Timing durations (name=ms, as Mantissa sends them; none
 * for a server that does not), all in ms.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


typedef struct {
    int fd;
    int busy;           /* a request is out */
    char *out;          /* the request being written */
    size_t out_len, out_off;
    char *in;           /* the answer being read */
    size_t in_len, in_cap;
    uint64_t t_sched;   /* when the request was due */
    uint64_t t_sent;    /* when its send began */
} conn;

typedef struct {
    int port, concurrency, max_conns;
    double rate, seconds;
    const char *path;
    const char *expect; /* a good answer's body holds this */
    uint64_t timeout_ns; /* an answer later than this counts as a timeout */
    char **bodies;
    int nbodies, next_body;
    uint64_t seed;
    conn *conns;
    int nconns;
    int ep;
    /* results */
    double *lat;
    long nlat, cap_lat, requests, non200, bad_body, conn_errors, timeouts;
    FILE *timing; /* --timing */
} gen;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void load_bodies(gen *g, const char *file)
{
    FILE *f = fopen(file, "r");
    if (!f)
        die(file);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (!n)
            continue;
        g->bodies = realloc(g->bodies, sizeof(char *) * (size_t)(g->nbodies + 1));
        if (!g->bodies)
            die("realloc");
        g->bodies[g->nbodies++] = strdup(line);
    }
    free(line);
    fclose(f);
    if (!g->nbodies) {
        fprintf(stderr, "loadgen: %s has no bodies\n", file);
        exit(2);
    }
}

/* Fisher-Yates with its own LCG stream from the seed (the Poisson clock
 * keeps its own). */
static void shuffle_bodies(gen *g)
{
    uint64_t s = g->seed ^ 0x9e3779b97f4a7c15ULL;
    for (int i = g->nbodies - 1; i > 0; i--) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int j = (int)((s >> 33) % (uint64_t)(i + 1));
        char *t = g->bodies[i];
        g->bodies[i] = g->bodies[j];
        g->bodies[j] = t;
    }
}

static int open_conn(gen *g, conn *c)
{
    char *in = c->in; /* the read buffer is kept across connections */
    size_t in_cap = c->in_cap;
    memset(c, 0, sizeof *c);
    c->in = in;
    c->in_cap = in_cap;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
    epoll_ctl(g->ep, EPOLL_CTL_ADD, c->fd, &ev);
    return 0;
}

static void close_conn(gen *g, conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->busy = 0;
    free(c->out);
    c->out = NULL;
    c->in_len = 0;
}

/* --timing: one line for a good answer (head: its headers, NUL-ended).
 * Server-Timing is "name;dur=ms[;desc=\"...\"], ..."; Mantissa's forward
 * desc "batch of N (T tokens)" becomes batch=N batch_tokens=T. */
static void write_timing(gen *g, const conn *c, double lat_ms, const char *head)
{
    fprintf(g->timing, "latency=%.3f send_lag=%.3f", lat_ms,
            (double)(c->t_sent - c->t_sched) / 1e6);
    const char *st = strcasestr(head, "\r\nserver-timing:");
    const char *p = st ? st + 16 : NULL, *eol = p ? strstr(p, "\r\n") : NULL;
    if (p && !eol)
        eol = p + strlen(p);
    while (p && p < eol) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *semi = strchr(p, ';'), *dur = strstr(p, "dur=");
        if (!semi || !dur || semi > eol || dur > eol)
            break;
        fprintf(g->timing, " %.*s=%.3f", (int)(semi - p), p, atof(dur + 4));
        const char *next = strchr(dur, ','), *desc = strstr(dur, "desc=\"");
        int n;
        long t;
        if (desc && (!next || desc < next)) {
            if (sscanf(desc, "desc=\"batch of %d (%ld tokens)", &n, &t) == 2)
                fprintf(g->timing, " batch=%d batch_tokens=%ld", n, t);
            const char *q = strchr(desc + 6, '"'); /* a comma may be quoted */
            next = q ? strchr(q, ',') : NULL;
        }
        p = next;
    }
    fputc('\n', g->timing);
}

static void record(gen *g, const conn *c, const char *head)
{
    if (g->nlat == g->cap_lat) {
        g->cap_lat = g->cap_lat ? 2 * g->cap_lat : 4096;
        g->lat = realloc(g->lat, sizeof(double) * (size_t)g->cap_lat);
        if (!g->lat)
            die("realloc");
    }
    double ms = (double)(now_ns() - c->t_sched) / 1e6;
    g->lat[g->nlat++] = ms;
    if (g->timing)
        write_timing(g, c, ms, head);
}

/* Writes what it can of c's request. */
static void pump_out(gen *g, conn *c)
{
    while (c->out && c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) {
                g->conn_errors++;
                close_conn(g, c);
            }
            return;
        }
        c->out_off += (size_t)w;
    }
}

/* Starts a request on connection c (open, idle), due at t_sched. */
static void send_request(gen *g, conn *c, uint64_t t_sched)
{
    const char *body = g->bodies[g->next_body++ % g->nbodies];
    size_t bl = strlen(body);
    c->out = malloc(bl + 256);
    if (!c->out)
        die("malloc");
    c->out_len = (size_t)sprintf(c->out,
                                 "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                 g->path, bl, body);
    c->out_off = 0;
    c->busy = 1;
    c->t_sched = t_sched;
    c->t_sent = now_ns();
    c->in_len = 0;
    g->requests++;
    pump_out(g, c);
}

/* Whether c->in holds a whole answer (1; 2 when the server closes the
 * connection after it: "Connection: close", as cpp-httplib does after its
 * keep-alive maximum); judges and records it. */
static int answer_done(gen *g, conn *c)
{
    if (c->in_len + 1 > c->in_cap)
        return 0;
    c->in[c->in_len] = 0;
    char *end = strstr(c->in, "\r\n\r\n");
    if (!end)
        return 0;
    size_t head = (size_t)(end - c->in) + 4;
    char *cl = strcasestr(c->in, "\r\ncontent-length:");
    if (!cl || cl > end) {
        g->bad_body++; /* chunked or unknown length: not supported, counted */
        return -1;
    }
    size_t len = strtoul(cl + 17, NULL, 10);
    if (c->in_len < head + len)
        return 0;
    int status = atoi(c->in + 9);
    char *cc = strcasestr(c->in, "\r\nconnection: close");
    int closing = cc && cc < end;
    if (status != 200)
        g->non200++;
    else if (!memmem(c->in + head, len, g->expect, strlen(g->expect)))
        g->bad_body++;
    else {
        *end = 0; /* the headers, for --timing */
        record(g, c, c->in);
    }
    free(c->out);
    c->out = NULL;
    c->busy = 0;
    c->in_len = 0;
    return closing ? 2 : 1;
}

/* Reads what has come for c; returns 1 when its answer completed. */
static int pump_in(gen *g, conn *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 65536) {
            c->in_cap = c->in_cap ? 2 * c->in_cap : 131072;
            c->in = realloc(c->in, c->in_cap);
            if (!c->in)
                die("realloc");
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (c->busy) /* closed or failed with a request out */
            g->conn_errors++;
        close_conn(g, c);
        return 0;
    }
    int d = c->busy ? answer_done(g, c) : 0;
    if (d < 0 || d == 2)
        close_conn(g, c);
    return d > 0;
}

/* An open connection with no request out, opening one if allowed; NULL
 * when every allowed connection is busy. */
static conn *idle_conn(gen *g)
{
    for (int i = 0; i < g->nconns; i++)
        if (g->conns[i].fd >= 0 && !g->conns[i].busy)
            return &g->conns[i];
    for (int i = 0; i < g->nconns; i++)
        if (g->conns[i].fd < 0)
            return open_conn(g, &g->conns[i]) == 0 ? &g->conns[i] : NULL;
    if (g->nconns < g->max_conns && open_conn(g, &g->conns[g->nconns]) == 0)
        return &g->conns[g->nconns++];
    return NULL;
}

static void expire(gen *g, uint64_t t)
{
    for (int i = 0; i < g->nconns; i++) {
        conn *c = &g->conns[i];
        if (c->fd >= 0 && c->busy && t - c->t_sched > g->timeout_ns) {
            g->timeouts++;
            close_conn(g, c);
        }
    }
}

/* Handles the connections' events, waiting at most timeout_ns for one
 * (epoll_pwait2: a millisecond timeout would either busy-poll the last
 * millisecond before each arrival, taking a core's third from the server
 * under test at 1000 arrivals/s, or send late). */
static void events(gen *g, uint64_t timeout_ns, int closed_loop, uint64_t deadline)
{
    struct epoll_event ev[256];
    struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    int n = epoll_pwait2(g->ep, ev, 256, &ts, NULL);
    for (int i = 0; i < n; i++) {
        conn *c = ev[i].data.ptr;
        if (c->fd < 0)
            continue;
        if (ev[i].events & EPOLLOUT)
            pump_out(g, c);
        if (c->fd >= 0 && (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && pump_in(g, c) &&
            closed_loop && now_ns() < deadline && (c->fd >= 0 || open_conn(g, c) == 0))
            send_request(g, c, now_ns());
    }
}

static void run_closed(gen *g, uint64_t deadline)
{
    g->nconns = g->concurrency;
    for (int i = 0; i < g->nconns; i++)
        if (open_conn(g, &g->conns[i]) == 0)
            send_request(g, &g->conns[i], now_ns());
    for (uint64_t t = now_ns(); t < deadline; t = now_ns()) {
        events(g, 10000000u, 1, deadline);
        expire(g, now_ns());
        for (int i = 0; i < g->nconns; i++) /* replace a connection the server closed */
            if (g->conns[i].fd < 0 && now_ns() < deadline &&
                open_conn(g, &g->conns[i]) == 0)
                send_request(g, &g->conns[i], now_ns());
    }
}

static double exp_gap(uint64_t *s, double rate)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    return -log(u) / rate * 1e9;
}

static void run_open(gen *g, uint64_t start, uint64_t deadline)
{
    uint64_t *pending = malloc(sizeof(uint64_t) * 1048576);
    if (!pending)
        die("malloc");
    size_t head = 0, tail = 0;
    double next = (double)start + exp_gap(&g->seed, g->rate);
    for (uint64_t t = now_ns(); t < deadline; t = now_ns()) {
        while ((double)t >= next && (double)next < (double)deadline && tail < 1048576) {
            pending[tail++] = (uint64_t)next;
            next += exp_gap(&g->seed, g->rate);
        }
        conn *c;
        while (head < tail && (c = idle_conn(g)))
            send_request(g, c, pending[head++]);
        double wait_ns = next - (double)now_ns();
        events(g, wait_ns < 0 ? 0 : wait_ns > 1e7 ? 10000000u : (uint64_t)wait_ns, 0, deadline);
        expire(g, now_ns());
    }
    free(pending);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const gen *g, double p)
{
    if (!g->nlat)
        return 0;
    long i = (long)ceil(p / 100.0 * (double)g->nlat) - 1;
    return g->lat[i < 0 ? 0 : i];
}

int main(int argc, char **argv)
{
    gen g = {.path = "/v1/embeddings", .expect = "embedding",
             .timeout_ns = 30ULL * 1000000000ULL, .max_conns = 512, .seed = 1};
    const char *bodies = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) g.port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--path")) g.path = argv[i + 1];
        else if (!strcmp(argv[i], "--expect")) g.expect = argv[i + 1];
        else if (!strcmp(argv[i], "--timeout-s"))
            g.timeout_ns = (uint64_t)(atof(argv[i + 1]) * 1e9);
        else if (!strcmp(argv[i], "--bodies")) bodies = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds")) g.seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--concurrency")) g.concurrency = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate")) g.rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-conns")) g.max_conns = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) g.seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--timing")) {
            if (!(g.timing = fopen(argv[i + 1], "w"))) {
                fprintf(stderr, "loadgen: --timing %s: %s\n", argv[i + 1], strerror(errno));
                return 2;
            }
        }
        else { fprintf(stderr, "loadgen: unknown option %s\n", argv[i]); return 2; }
    }
    if (!g.port || !bodies || g.seconds <= 0 || (g.concurrency <= 0) == (g.rate <= 0)) {
        fprintf(stderr, "usage: loadgen --port P [--path /v1/embeddings] --bodies FILE "
                        "--seconds S (--concurrency N | --rate R) [--max-conns N] [--seed N] "
                        "[--timing FILE] [--expect STR] [--timeout-s S]\n");
        return 2;
    }
    if (g.concurrency > g.max_conns)
        g.max_conns = g.concurrency;
    load_bodies(&g, bodies);
    shuffle_bodies(&g);
    g.conns = calloc((size_t)g.max_conns, sizeof(conn));
    g.ep = epoll_create1(0);
    if (!g.conns || g.ep < 0)
        die("setup");
    for (int i = 0; i < g.max_conns; i++)
        g.conns[i].fd = -1;
    uint64_t start = now_ns(), deadline = start + (uint64_t)(g.seconds * 1e9);
    if (g.concurrency > 0)
        run_closed(&g, deadline);
    else
        run_open(&g, start, deadline);
    double secs = (double)(now_ns() - start) / 1e9, sum = 0;
    qsort(g.lat, (size_t)g.nlat, sizeof(double), cmp_double);
    for (long i = 0; i < g.nlat; i++)
        sum += g.lat[i];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"requests\": %ld, \"good\": %ld, \"non200\": %ld, \"bad_body\": %ld, "
           "\"conn_errors\": %ld, \"timeouts\": %ld, \"seconds\": %.3f, \"rps\": %.1f, "
           "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"mean_ms\": %.3f, \"cpu_s\": %.3f}\n",
           g.requests, g.nlat, g.non200, g.bad_body, g.conn_errors, g.timeouts, secs,
           (double)g.nlat / secs, pct(&g, 50), pct(&g, 99), g.nlat ? sum / (double)g.nlat : 0,
           (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec / 1e6);
    for (int i = 0; i < g.nconns; i++) {
        close_conn(&g, &g.conns[i]);
        free(g.conns[i].in);
    }
    if (g.timing && fclose(g.timing) != 0) {
        perror("loadgen: --timing");
        return 1;
    }
    return 0;
}
