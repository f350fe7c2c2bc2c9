/* peak_rss.c: this process's peak resident memory (its high-water mark),
 * one function for every report of it (serve's `loaded` lines, mantissa
 * quantize).
 *
 * On Linux it is VmHWM of /proc/self/status: the peak of this process's
 * own memory since it exec'd. Not getrusage's ru_maxrss: Linux keeps the
 * largest ru_maxrss of a process's earlier images across exec, and the
 * image a forked child execs from is a copy of its parent's, so a server
 * started by a process with a large resident set (a Python bench holding
 * a model) reported its parent's peak as its own. Elsewhere (no /proc, or
 * a kernel without VmHWM) ru_maxrss is the fallback, with that caveat; it
 * is in kilobytes on Linux and the BSDs but in bytes on macOS. */
#include "engine/peak_rss.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* VmHWM in bytes, or 0 when /proc/self/status has none. */
static size_t vm_hwm(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6) && sscanf(line + 6, "%llu", &kib) == 1)
            break;
    fclose(f);
    return (size_t)kib * 1024;
}

size_t mt_peak_rss_bytes(void)
{
    const size_t hwm = vm_hwm();
    if (hwm)
        return hwm;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss <= 0)
        return 0;
#ifdef __APPLE__
    return (size_t)ru.ru_maxrss;
#else
    return (size_t)ru.ru_maxrss * 1024;
#endif
}
