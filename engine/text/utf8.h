/* utf8.h: the one well-formedness rule for UTF-8 that every strict reader
 * here shares (safetensors headers, request bodies, response strings). */
#ifndef MT_UTF8_H
#define MT_UTF8_H

#include <stddef.h>

/* Length (1-4) of the well-formed UTF-8 sequence at s, given n > 0 bytes,
 * or 0: no overlong forms, no surrogates, nothing above U+10FFFF. */
size_t mt_utf8_seq(const unsigned char *s, size_t n);

#endif
