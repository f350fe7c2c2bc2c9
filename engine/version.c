/* version.c: the build's commit (version.h). MANTISSA_COMMIT comes from the
 * Makefile for this file only, so a new commit recompiles nothing else. */
#include "engine/version.h"

#ifndef MANTISSA_COMMIT
#define MANTISSA_COMMIT "unknown"
#endif

const char *mt_build_commit(void)
{
    return MANTISSA_COMMIT[0] ? MANTISSA_COMMIT : "unknown";
}
