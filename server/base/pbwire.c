/* pbwire.c: protobuf wire-format writers (see pbwire.h). */
#include "server/base/pbwire.h"

void pb_varint(sbuf *b, uint64_t v)
{
    uint8_t buf[10];
    size_t n = 0;
    do {
        buf[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    sb_putn(b, buf, n);
}

void pb_key(sbuf *b, uint32_t field, unsigned wire_type)
{
    pb_varint(b, (uint64_t)field << 3 | wire_type);
}

void pb_len(sbuf *b, uint32_t field, const void *p, size_t n)
{
    pb_key(b, field, PB_WT_LEN);
    pb_varint(b, n);
    sb_putn(b, p, n);
}

/* Key and the low n bytes of v, least significant first. */
static void put_le(sbuf *b, uint32_t field, unsigned wire_type, uint64_t v, int n)
{
    uint8_t buf[8];
    for (int i = 0; i < n; i++)
        buf[i] = (uint8_t)(v >> (8 * i));
    pb_key(b, field, wire_type);
    sb_putn(b, buf, (size_t)n);
}

void pb_fixed32(sbuf *b, uint32_t field, uint32_t v)
{
    put_le(b, field, PB_WT_I32, v, 4);
}

void pb_fixed64(sbuf *b, uint32_t field, uint64_t v)
{
    put_le(b, field, PB_WT_I64, v, 8);
}
