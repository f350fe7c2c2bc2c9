/* grapheme.c: where an extended grapheme cluster ends (engine/text/
 * grapheme.h): the pair rules of UAX #29 in their order, with the three
 * that look further back (GB9c's Indic conjuncts, GB11's emoji ZWJ
 * sequences, GB12/13's regional indicator pairs) kept as a little state
 * while the cluster is walked forward.
 */
#include "engine/text/grapheme.h"

#include <pthread.h>
#include <stdbool.h>

static uint8_t gcb_bmp[0x10000]; /* the properties of U+0000..U+FFFF */
static pthread_once_t gcb_once = PTHREAD_ONCE_INIT;

static void gcb_fill(void)
{
    for (int k = 0; k < gcb_nruns && gcb_runs[k] >> 8 < 0x10000; k++) {
        uint32_t end = k + 1 < gcb_nruns ? gcb_runs[k + 1] >> 8 : 0x10000;
        for (uint32_t c = gcb_runs[k] >> 8; c < end && c < 0x10000; c++)
            gcb_bmp[c] = (uint8_t)(gcb_runs[k] & 0xFF);
    }
}

void gcb_init(void) { pthread_once(&gcb_once, gcb_fill); }

unsigned gcb_prop(uint32_t cp)
{
    if (cp < 0x10000)
        return gcb_bmp[cp];
    int lo = 0, hi = gcb_nruns - 1;
    while (lo < hi) { /* the last run starting at or before cp */
        int mid = (lo + hi + 1) / 2;
        if (gcb_runs[mid] >> 8 <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return gcb_runs[lo] & 0xFF;
}

/* Decodes the code point at s (well-formed UTF-8); *len gets its bytes. */
static uint32_t gcb_decode(const unsigned char *s, size_t *len)
{
    uint32_t c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    size_t k = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    c &= 0x7Fu >> k;
    for (size_t i = 1; i < k; i++)
        c = c << 6 | (s[i] & 0x3Fu);
    *len = k;
    return c;
}

/* What the rules remember of the cluster so far. */
typedef struct {
    int incb;  /* GB9c: 0 none, 1 a consonant [Extend]*, 2 and a linker since */
    int emoji; /* GB11: 0 none, 1 ExtPict Extend*, 2 then a ZWJ */
    int ris;   /* GB12/13: regional indicators in a row just before */
} gcb_state;

static void gcb_step(gcb_state *st, unsigned p)
{
    unsigned c = p & 0x1F;
    if (c == GCB_INCB_CONSONANT)
        st->incb = 1;
    else if (p & GCB_INCB_LINKER)
        st->incb = st->incb ? 2 : 0;
    else if (!(p & GCB_INCB_EXTEND))
        st->incb = 0;
    if (c == GCB_EXT_PICT)
        st->emoji = 1;
    else if (c == GCB_EXTEND && st->emoji == 1)
        st->emoji = 1;
    else if (c == GCB_ZWJ && st->emoji == 1)
        st->emoji = 2;
    else
        st->emoji = 0;
    st->ris = c == GCB_RI ? st->ris + 1 : 0;
}

/* Whether the rules keep a (property pb) and b (pa) together. */
static bool gcb_joined(const gcb_state *st, unsigned pb, unsigned pa)
{
    unsigned b = pb & 0x1F, a = pa & 0x1F;
    if (b == GCB_CR && a == GCB_LF)
        return true; /* GB3 */
    if (b == GCB_CONTROL || b == GCB_CR || b == GCB_LF || a == GCB_CONTROL || a == GCB_CR ||
        a == GCB_LF)
        return false; /* GB4, GB5 */
    if (b == GCB_L && (a == GCB_L || a == GCB_V || a == GCB_LV || a == GCB_LVT))
        return true; /* GB6 */
    if ((b == GCB_LV || b == GCB_V) && (a == GCB_V || a == GCB_T))
        return true; /* GB7 */
    if ((b == GCB_LVT || b == GCB_T) && a == GCB_T)
        return true; /* GB8 */
    if (a == GCB_EXTEND || a == GCB_ZWJ || a == GCB_SPACING_MARK || b == GCB_PREPEND)
        return true; /* GB9, GB9a, GB9b */
    if (a == GCB_INCB_CONSONANT)
        return st->incb == 2; /* GB9c */
    if (b == GCB_ZWJ && a == GCB_EXT_PICT)
        return st->emoji == 2; /* GB11 */
    if (b == GCB_RI && a == GCB_RI)
        return st->ris % 2 == 1; /* GB12, GB13 */
    return false;
}

size_t gcb_next(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t c = gcb_decode(s, &len);
    unsigned p = c < 0x80 ? (c == '\r' ? GCB_CR : c == '\n' ? GCB_LF
                             : c < 0x20 || c == 0x7F ? GCB_CONTROL : GCB_ANY)
                          : gcb_prop(c);
    gcb_state st = {0};
    gcb_step(&st, p);
    size_t i = len;
    while (i < n) {
        if (s[i] < 0x80 && p != GCB_CR && (p & 0x1F) != GCB_PREPEND)
            break; /* nothing joins an ASCII character to what precedes, but CR LF and GB9b */
        uint32_t c2 = gcb_decode(s + i, &len);
        unsigned p2 = c2 < 0x80 ? (c2 == '\n' ? GCB_LF : c2 == '\r' ? GCB_CR
                                   : c2 < 0x20 || c2 == 0x7F ? GCB_CONTROL : GCB_ANY)
                                : gcb_prop(c2);
        if (!gcb_joined(&st, p, p2))
            break;
        gcb_step(&st, p2);
        p = p2;
        i += len;
    }
    return i;
}
