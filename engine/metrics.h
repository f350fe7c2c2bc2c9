/* metrics.h: the numbers drift is measured in: cosine similarity, max abs
 * error, Spearman rank correlation (STS-B), and the STS-B test file reader. */
#ifndef MT_METRICS_H
#define MT_METRICS_H

#include <stddef.h>

#include "engine/status.h"

double mt_cosine(const float *a, const float *b, int n);
double mt_max_abs_diff(const float *a, const float *b, size_t n);
/* Spearman's rho of x and y (n >= 2), ties ranked by their average rank. */
double mt_spearman(const double *x, const double *y, size_t n);

/* Mean over queries of |top-k(a) ∩ top-k(b)| / k, where top-k(x) are the k
 * nearest rows (by dot product; rows L2-normalised) to each row of x among
 * the other rows of x. a and b are (n, d) embeddings of the same n texts by
 * two variants. Returns a negative number when out of memory. */
double mt_topk_overlap(const float *a, const float *b, int n, int d, int k);

typedef struct {
    char **s1, **s2;   /* sentence pairs */
    double *score;     /* gold similarity, 0..5 */
    size_t n;
} mt_sts;

/* Reads the STS Benchmark file (tab-separated: genre, file, year, id,
 * score, sentence 1, sentence 2[, sources]). Errors name file and line. */
mt_status mt_sts_load(const char *path, mt_sts *out, mt_err *err);
void mt_sts_free(mt_sts *s);

#endif
