/* peak_rss.h: this process's peak resident memory (its high-water mark),
 * which serve's `loaded` lines and mantissa quantize report. */
#ifndef MT_ENGINE_PEAK_RSS_H
#define MT_ENGINE_PEAK_RSS_H

#include <stddef.h>

/* The process's own peak resident set in bytes so far (0 when the system
 * says nothing): on Linux VmHWM of /proc/self/status, elsewhere getrusage's
 * ru_maxrss (see peak_rss.c for why not ru_maxrss everywhere). */
size_t mt_peak_rss_bytes(void);

#endif
