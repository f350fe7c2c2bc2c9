/* unigram_bench.c: the Unigram tokenizer's speed (engine/text/unigram.h) on
 * a JSON list of texts, one thread, one text at a time: loads
 * tokenizer.json, encodes every text `rounds` times, prints one JSON line
 * (texts, tokens a round, seconds a round, tokens/s, MB/s) and writes the
 * first round's ids, one line a text, for bench/unigram_speed.py to compare
 * with Hugging Face tokenizers. Built by bench/unigram_speed.py (not by make).
 *
 *   unigram_bench TOKENIZER_JSON TEXTS_JSON ROUNDS IDS_OUT */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/jsonfile.h"
#include "engine/text/unigram.h"

#define MAX_IDS (1 << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Encodes every text once; returns the tokens, writing ids to f if given. */
static long round_once(const unigram_t *t, char **texts, const size_t *lens, int n, int32_t *ids,
                       FILE *f)
{
    long tokens = 0;
    for (int k = 0; k < n; k++) {
        int got = 0;
        mt_err err;
        if (unigram_encode(t, texts[k], lens[k], ids, MAX_IDS, &got, NULL, &err) != MT_OK) {
            fprintf(stderr, "text %d: %s\n", k, err.msg);
            exit(1);
        }
        tokens += got;
        for (int i = 0; f && i < got; i++)
            fprintf(f, i ? " %d" : "%d", ids[i]);
        if (f)
            fputc('\n', f);
    }
    return tokens;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: unigram_bench TOKENIZER_JSON TEXTS_JSON ROUNDS IDS_OUT\n");
        return 2;
    }
    mt_err err;
    unigram_t *t = NULL;
    cJSON *list = NULL;
    if (unigram_load(argv[1], &t, &err) != MT_OK || mt_json_load(argv[2], &list, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int n = cJSON_GetArraySize(list), rounds = atoi(argv[3]);
    char **texts = malloc((size_t)n * sizeof *texts);
    size_t *lens = malloc((size_t)n * sizeof *lens), bytes = 0;
    int32_t *ids = malloc(MAX_IDS * sizeof *ids);
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        texts[k] = e->valuestring;
        lens[k] = strlen(e->valuestring);
        bytes += lens[k];
    }
    FILE *f = fopen(argv[4], "w");
    if (!f) {
        perror(argv[4]);
        return 1;
    }
    long tokens = round_once(t, texts, lens, n, ids, f);
    fclose(f);
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        round_once(t, texts, lens, n, ids, NULL);
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    printf("{\"texts\": %d, \"bytes\": %zu, \"tokens\": %ld, \"seconds\": %.6f, "
           "\"tokens_per_s\": %.0f, \"mb_per_s\": %.2f}\n",
           n, bytes, tokens, best, (double)tokens / best, (double)bytes / best / 1e6);
    free(texts);
    free(lens);
    free(ids);
    cJSON_Delete(list);
    unigram_free(t);
    return 0;
}
