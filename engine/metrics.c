/* metrics.c: drift metrics and the STS-B reader (see metrics.h). */
#include "engine/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "engine/jsonfile.h"

double mt_cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    if (aa == 0 || bb == 0)
        return aa == bb ? 1.0 : 0.0;
    return ab / (sqrt(aa) * sqrt(bb));
}

double mt_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d)
            m = d;
    }
    return m;
}

/* Indices of the k largest entries of row (length n), skipping self. */
static void topk(const float *row, int n, int self, int k, int *out)
{
    int got = 0;
    for (int j = 0; j < n; j++) {
        if (j == self)
            continue;
        if (got < k) {
            int p = got++;
            while (p > 0 && row[out[p - 1]] < row[j]) {
                out[p] = out[p - 1];
                p--;
            }
            out[p] = j;
        } else if (row[j] > row[out[k - 1]]) {
            int p = k - 1;
            while (p > 0 && row[out[p - 1]] < row[j]) {
                out[p] = out[p - 1];
                p--;
            }
            out[p] = j;
        }
    }
}

double mt_topk_overlap(const float *a, const float *b, int n, int d, int k)
{
    if (n < 2 || k < 1)
        return 1.0;
    if (k > n - 1)
        k = n - 1;
    const int blk = 256; /* query rows per similarity block */
    float *sa = malloc(sizeof(float) * (size_t)blk * n), *sb = malloc(sizeof(float) * (size_t)blk * n);
    int *ia = malloc(sizeof(int) * k), *ib = malloc(sizeof(int) * k);
    double total = 0;
    if (!sa || !sb || !ia || !ib) {
        total = -1;
        goto done;
    }
    for (int q0 = 0; q0 < n; q0 += blk) {
        int nb = n - q0 < blk ? n - q0 : blk;
        dnnl_sgemm('N', 'T', nb, n, d, 1.0f, a + (size_t)q0 * d, d, a, d, 0.0f, sa, n);
        dnnl_sgemm('N', 'T', nb, n, d, 1.0f, b + (size_t)q0 * d, d, b, d, 0.0f, sb, n);
        for (int q = 0; q < nb; q++) {
            topk(sa + (size_t)q * n, n, q0 + q, k, ia);
            topk(sb + (size_t)q * n, n, q0 + q, k, ib);
            int common = 0;
            for (int x = 0; x < k; x++)
                for (int y = 0; y < k; y++)
                    common += ia[x] == ib[y];
            total += (double)common / k;
        }
    }
    total /= n;
done:
    free(sa);
    free(sb);
    free(ia);
    free(ib);
    return total;
}

typedef struct {
    double v;
    size_t i;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    double x = ((const ranked *)a)->v, y = ((const ranked *)b)->v;
    return (x > y) - (x < y);
}

/* Ranks 1..n, ties get the mean of the ranks they span. */
static int rank(const double *x, size_t n, double *r)
{
    ranked *t = malloc(n * sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < n; i++)
        t[i] = (ranked){x[i], i};
    qsort(t, n, sizeof *t, cmp_ranked);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && t[j + 1].v == t[i].v)
            j++;
        double avg = (double)(i + j) / 2.0 + 1.0;
        for (size_t k = i; k <= j; k++)
            r[t[k].i] = avg;
        i = j + 1;
    }
    free(t);
    return 0;
}

double mt_spearman(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double *rx = malloc(n * sizeof *rx), *ry = malloc(n * sizeof *ry);
    double rho = NAN;
    if (rx && ry && rank(x, n, rx) == 0 && rank(y, n, ry) == 0) {
        double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
        for (size_t i = 0; i < n; i++) {
            mx += rx[i];
            my += ry[i];
        }
        mx /= (double)n;
        my /= (double)n;
        for (size_t i = 0; i < n; i++) {
            sxy += (rx[i] - mx) * (ry[i] - my);
            sxx += (rx[i] - mx) * (rx[i] - mx);
            syy += (ry[i] - my) * (ry[i] - my);
        }
        rho = sxy / sqrt(sxx * syy);
    }
    free(rx);
    free(ry);
    return rho;
}

mt_status mt_sts_load(const char *path, mt_sts *out, mt_err *err)
{
    char *text;
    size_t len;
    mt_status st = mt_read_file(path, 64u << 20, &text, &len, err);
    if (st != MT_OK)
        return st;
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    int line = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        size_t ll = strlen(l);
        if (ll && l[ll - 1] == '\r')
            l[--ll] = 0;
        if (!ll)
            continue;
        char *col[7];
        int nc = 0;
        char *c = l;
        while (nc < 7) {
            col[nc++] = c;
            char *tab = strchr(c, '\t');
            if (!tab)
                break;
            *tab = 0;
            c = tab + 1;
        }
        char *end;
        double score = nc >= 7 ? strtod(col[4], &end) : -1;
        if (nc < 7 || *end || score < 0 || score > 5) {
            st = mt_fail(err, MT_EFORMAT, "%s: line %d: expected 7+ tab-separated columns with "
                                          "a 0..5 score in column 5", path, line);
            break;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 1024;
            char **a = realloc(out->s1, cap * sizeof *a), **b2;
            if (a)
                out->s1 = a;
            b2 = realloc(out->s2, cap * sizeof *b2);
            if (b2)
                out->s2 = b2;
            double *sc = realloc(out->score, cap * sizeof *sc);
            if (sc)
                out->score = sc;
            if (!a || !b2 || !sc) {
                st = mt_fail(err, MT_ENOMEM, "out of memory");
                break;
            }
        }
        out->s1[out->n] = strdup(col[5]);
        out->s2[out->n] = strdup(col[6]);
        out->score[out->n] = score;
        out->n++;
        if (!out->s1[out->n - 1] || !out->s2[out->n - 1]) {
            st = mt_fail(err, MT_ENOMEM, "out of memory");
            break;
        }
    }
    free(text);
    if (st == MT_OK && out->n == 0)
        st = mt_fail(err, MT_EFORMAT, "%s: no sentence pairs", path);
    if (st != MT_OK)
        mt_sts_free(out);
    return st;
}

void mt_sts_free(mt_sts *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->s1[i]);
        free(s->s2[i]);
    }
    free(s->s1);
    free(s->s2);
    free(s->score);
    memset(s, 0, sizeof *s);
}
