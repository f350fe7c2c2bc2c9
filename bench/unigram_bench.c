/* unigram_bench.c: the Unigram tokenizer's speed (engine/text/unigram.h),
 * for bench/unigram_speed.py, which builds it (make does not): bench/tok_bench.h's
 * timing program on unigram_encode.
 *
 *   unigram_bench TOKENIZER_JSON TEXTS_JSON ROUNDS IDS_OUT */
#include "bench/tok_bench.h"
#include "engine/text/unigram.h"

TOK_BENCH_MAIN(unigram)
