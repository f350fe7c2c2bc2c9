/* version.h: Mantissa's version and the git commit it was built from, for
 * `mantissa --version`, the start-up line and the endpoints that report
 * them (/, /v2, TEI's /info, /metrics' build_info). */
#ifndef MT_ENGINE_VERSION_H
#define MT_ENGINE_VERSION_H

#define MANTISSA_VERSION "0.1.0"

/* The build's commit: `git describe --always --dirty` when it was built
 * (the Makefile passes it to version.c alone, which it rebuilds when the
 * commit changes), or "unknown" for a build without git (a tarball). */
const char *mt_build_commit(void);

#endif
