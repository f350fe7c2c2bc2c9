/* tok_bench.h: the timing program of the tokenizer speed benchmarks
 * (bench/unigram_bench.c, bench/bpe_bench.c), shared: on a JSON list of
 * texts, one thread, one text at a time: loads tokenizer.json, encodes
 * every text `rounds` times, prints one JSON line (texts, bytes, tokens a
 * round, best seconds a round, tokens/s, MB/s) and writes the first round's
 * ids, one line a text, for the speed script to compare with Hugging Face
 * tokenizers. Header-only: each benchmark is one program, built by its
 * script (bench/unigram_speed.py, bench/bpe_speed.py; not by make).
 *
 * A tokenizer kind K with K_t, K_load, K_encode and K_free (engine/text/K.h,
 * the signatures unigram's and bpe's share) gets its main() from
 * TOK_BENCH_MAIN(K):
 *
 *   K_bench TOKENIZER_JSON TEXTS_JSON ROUNDS IDS_OUT */
#ifndef MT_BENCH_TOK_BENCH_H
#define MT_BENCH_TOK_BENCH_H

#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/jsonfile.h"

#define TOK_BENCH_MAX_IDS (1 << 20)

/* One kind of tokenizer, through adapters TOK_BENCH_MAIN writes. */
typedef struct {
    const char *prog; /* "unigram_bench": the usage line's */
    void *(*load)(const char *path, mt_err *err); /* NULL on error */
    mt_status (*encode)(const void *t, const char *text, size_t len, int32_t *ids, int cap,
                        int *n, mt_err *err);
    void (*release)(void *t);
} tok_bench_kind;

static double tok_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Encodes every text once; returns the tokens, writing ids to f if given. */
static long tok_bench_round(const tok_bench_kind *k, const void *t, char **texts,
                            const size_t *lens, int n, int32_t *ids, FILE *f)
{
    long tokens = 0;
    for (int i = 0; i < n; i++) {
        int got = 0;
        mt_err err;
        if (k->encode(t, texts[i], lens[i], ids, TOK_BENCH_MAX_IDS, &got, &err) != MT_OK) {
            fprintf(stderr, "text %d: %s\n", i, err.msg);
            exit(1);
        }
        tokens += got;
        for (int j = 0; f && j < got; j++)
            fprintf(f, j ? " %d" : "%d", ids[j]);
        if (f)
            fputc('\n', f);
    }
    return tokens;
}

static int tok_bench_main(int argc, char **argv, const tok_bench_kind *k)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON TEXTS_JSON ROUNDS IDS_OUT\n", k->prog);
        return 2;
    }
    mt_err err;
    void *t = NULL;
    cJSON *list = NULL;
    if (!(t = k->load(argv[1], &err)) || mt_json_load(argv[2], &list, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int n = cJSON_GetArraySize(list), rounds = atoi(argv[3]);
    char **texts = malloc((size_t)n * sizeof *texts);
    size_t *lens = malloc((size_t)n * sizeof *lens), bytes = 0;
    int32_t *ids = malloc(TOK_BENCH_MAX_IDS * sizeof *ids);
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        texts[i] = e->valuestring;
        lens[i] = strlen(e->valuestring);
        bytes += lens[i];
    }
    FILE *f = fopen(argv[4], "w");
    if (!f) {
        perror(argv[4]);
        return 1;
    }
    long tokens = tok_bench_round(k, t, texts, lens, n, ids, f);
    fclose(f);
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = tok_bench_now();
        tok_bench_round(k, t, texts, lens, n, ids, NULL);
        double dt = tok_bench_now() - t0;
        best = dt < best ? dt : best;
    }
    printf("{\"texts\": %d, \"bytes\": %zu, \"tokens\": %ld, \"seconds\": %.6f, "
           "\"tokens_per_s\": %.0f, \"mb_per_s\": %.2f}\n",
           n, bytes, tokens, best, (double)tokens / best, (double)bytes / best / 1e6);
    free(texts);
    free(lens);
    free(ids);
    cJSON_Delete(list);
    k->release(t);
    return 0;
}

/* main() for tokenizer kind K (see the top): adapters from K's functions to
 * tok_bench_kind's, and the program. */
#define TOK_BENCH_MAIN(K)                                                                     \
    static void *tok_bench_load(const char *path, mt_err *err)                                \
    {                                                                                         \
        K##_t *t = NULL;                                                                      \
        return K##_load(path, &t, err) == MT_OK ? t : NULL;                                   \
    }                                                                                         \
    static mt_status tok_bench_encode(const void *t, const char *text, size_t len,            \
                                      int32_t *ids, int cap, int *n, mt_err *err)             \
    {                                                                                         \
        return K##_encode(t, text, len, ids, cap, n, NULL, err);                              \
    }                                                                                         \
    static void tok_bench_free(void *t) { K##_free(t); }                                      \
    int main(int argc, char **argv)                                                           \
    {                                                                                         \
        static const tok_bench_kind k = {#K "_bench", tok_bench_load, tok_bench_encode,       \
                                         tok_bench_free};                                     \
        return tok_bench_main(argc, argv, &k);                                                \
    }

#endif
