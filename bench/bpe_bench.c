/* bpe_bench.c: the byte-level BPE tokenizer's speed (engine/text/bpe.h),
 * for bench/bpe_speed.py, which builds it (make does not): bench/tok_bench.h's
 * timing program on bpe_encode.
 *
 *   bpe_bench TOKENIZER_JSON TEXTS_JSON ROUNDS IDS_OUT */
#include "bench/tok_bench.h"
#include "engine/text/bpe.h"

TOK_BENCH_MAIN(bpe)
