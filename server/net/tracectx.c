/* tracectx.c: W3C Trace Context headers, ids and the ratio sampler (see
 * tracectx.h). */
#include "server/net/tracectx.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The value of a lower-case hex digit, or -1 (upper case is invalid in
 * traceparent). */
static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* n bytes from 2n lower-case hex digits; false on any other character. */
static bool unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

bool tc_parse_traceparent(const char *h, uint8_t trace_id[TC_TRACE_ID_LEN],
                          uint8_t parent_id[TC_SPAN_ID_LEN], uint8_t *flags)
{
    if (!h)
        return false;
    const size_t len = strlen(h);
    uint8_t version;
    if (len < TC_TRACEPARENT_LEN || !unhex(h, &version, 1) || version == 0xff)
        return false;
    /* version 00 is exactly this long; a later one may add fields after a '-' */
    if (len > TC_TRACEPARENT_LEN && (version == 0 || h[TC_TRACEPARENT_LEN] != '-'))
        return false;
    if (h[2] != '-' || h[35] != '-' || h[52] != '-')
        return false;
    if (!unhex(h + 3, trace_id, TC_TRACE_ID_LEN) || !unhex(h + 36, parent_id, TC_SPAN_ID_LEN) ||
        !unhex(h + 53, flags, 1))
        return false;
    return !all_zero(trace_id, TC_TRACE_ID_LEN) && !all_zero(parent_id, TC_SPAN_ID_LEN);
}

void tc_hex(char *out, const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = 0;
}

void tc_format_traceparent(char *out, const uint8_t trace_id[TC_TRACE_ID_LEN],
                           const uint8_t span_id[TC_SPAN_ID_LEN], uint8_t flags)
{
    memcpy(out, "00-", 3);
    tc_hex(out + 3, trace_id, TC_TRACE_ID_LEN);
    out[35] = '-';
    tc_hex(out + 36, span_id, TC_SPAN_ID_LEN);
    out[52] = '-';
    tc_hex(out + 53, &flags, 1);
}

/* A tracestate key: lower-case letter or digit first, then lower-case
 * letters, digits and _-*\/ (and one '@' for a multi-tenant key), at most
 * 256 characters. */
static bool key_ok(const char *k, size_t n)
{
    if (n == 0 || n > 256 || !((k[0] >= 'a' && k[0] <= 'z') || (k[0] >= '0' && k[0] <= '9')))
        return false;
    int at = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = k[i];
        at += c == '@';
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("_-*/@", c)))
            return false;
    }
    return at <= 1;
}

/* A tracestate value: 1 to 256 printable characters but ',' and '=', not
 * ending in a space. */
static bool value_ok(const char *v, size_t n)
{
    if (n == 0 || n > 256 || v[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0x20 || v[i] > 0x7e || v[i] == ',' || v[i] == '=')
            return false;
    return true;
}

bool tc_tracestate_ok(const char *s)
{
    const size_t len = s ? strlen(s) : 0;
    if (len == 0 || len > TC_TRACESTATE_MAX)
        return false;
    int members = 0;
    for (const char *p = s;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ",");
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n) { /* an empty member is allowed, and not counted */
            const char *eq = memchr(p, '=', n);
            if (!eq || !key_ok(p, (size_t)(eq - p)) ||
                !value_ok(eq + 1, n - (size_t)(eq - p) - 1) || ++members > 32)
                return false;
        }
        p += strcspn(p, ",");
        if (!*p++)
            return true;
    }
}

/* xoshiro256** (Blackman and Vigna), one state per thread, seeded from the
 * kernel the first time a thread asks. */
static _Thread_local uint64_t rng[4];
static _Thread_local bool seeded;

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next64(void)
{
    if (!seeded) {
        if (getrandom(rng, sizeof rng, 0) != (ssize_t)sizeof rng) {
            /* no entropy source: the time and the thread's address, mixed */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                         (uint64_t)(uintptr_t)&seeded ^ ((uint64_t)getpid() << 48);
            for (int i = 0; i < 4; i++) { /* splitmix64 */
                z += 0x9e3779b97f4a7c15ULL;
                uint64_t x = z;
                x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
                x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
                rng[i] = x ^ (x >> 31);
            }
        }
        seeded = true;
    }
    const uint64_t out = rotl(rng[1] * 5, 7) * 9, t = rng[1] << 17;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 45);
    return out;
}

void tc_new_id(uint8_t *p, size_t n)
{
    do {
        for (size_t i = 0; i < n; i += 8) {
            const uint64_t r = next64();
            memcpy(p + i, &r, n - i < 8 ? n - i : 8);
        }
    } while (all_zero(p, n));
}

bool tc_ratio_sampled(const uint8_t trace_id[TC_TRACE_ID_LEN], double ratio)
{
    if (ratio >= 1)
        return true;
    if (!(ratio > 0))
        return false;
    uint64_t x = 0;
    for (int i = 8; i < 16; i++)
        x = x << 8 | trace_id[i];
    return x < (uint64_t)(ratio * 18446744073709551616.0);
}
