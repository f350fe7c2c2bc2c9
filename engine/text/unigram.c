/* unigram.c: the Unigram tokenizer's encode and decode (engine/text/
 * unigram.h): added tokens split off the raw text (lstrip/rstrip taking
 * the whitespace beside them), each other segment normalized
 * (unigram_norm.c), normalized added tokens split off that, WhitespaceSplit
 * and Metaspace, then Viterbi over each piece (tokenizers' forward pass:
 * starts in order, the pieces of each start shortest first, a later
 * candidate only when strictly better; a character no piece covers alone
 * gets <unk> at the lowest score - 10; runs of <unk> fused and looked up
 * again, or spelled as <0xNN> bytes with byte_fallback), the template's
 * tokens and truncation; decode runs the decoder's steps.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_ids.h"
#include "engine/text/unigram_internal.h"

/* The White_Space characters (or Ġ) that start (back: end) s[0..n). */
static size_t ug_ws_run(const char *s, size_t n, bool back)
{
    size_t cnt = 0, k;
    if (!back) {
        for (size_t i = 0; i < n; i += k, cnt++) {
            uint32_t c = ug_decode((const unsigned char *)s + i, &k);
            if (!ug_is_space(c) && c != 0x120)
                break;
        }
        return cnt;
    }
    for (size_t i = n; i > 0; cnt++) {
        size_t j = i - 1;
        while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80)
            j--;
        uint32_t c = ug_decode((const unsigned char *)s + j, &k);
        if (!ug_is_space(c) && c != 0x120)
            break;
        i = j;
    }
    return cnt;
}

/* RobertaProcessing's trim_offsets on the last token, whose text is
 * str[0..sn): its leading and trailing whitespace characters off its
 * span, counted in characters of the original text as tokenizers does
 * (a single leading one kept on the first token with add_prefix_space). */
static void ug_trim(tok_ids *o, const char *str, size_t sn, bool prefix)
{
    int32_t *f = o->off + 2 * (o->n - 1);
    size_t lead = ug_ws_run(str, sn, false), trail = ug_ws_run(str, sn, true);
    if (lead > 0 && !((o->n == 1 || f[0] == 0) && prefix && lead == 1))
        for (size_t k; lead > 0 && f[0] < f[1]; lead--) {
            ug_decode((const unsigned char *)o->text + f[0], &k);
            f[0] += (int32_t)k;
        }
    size_t e = (size_t)f[1], k = trail;
    for (; k > 0 && e > 0; k--) {
        e--;
        while (e > 0 && ((unsigned char)o->text[e] & 0xC0) == 0x80)
            e--;
    }
    if (trail > 0 && k == 0)
        f[1] = (int32_t)e > f[0] ? (int32_t)e : f[0];
}

/* tok_ids_push with the token's span [s, e) in text (when tracking) and its
 * text str[0..sn) (for the trim). */
static bool ug_push_at(const unigram_t *t, tok_ids *o, int32_t id, uint32_t s, uint32_t e,
                       const char *str, size_t sn)
{
    if (!tok_ids_push(o, id))
        return false;
    if (o->track) {
        o->off[2 * (o->n - 1)] = (int32_t)s;
        o->off[2 * (o->n - 1) + 1] = (int32_t)e;
        if (t->trim)
            ug_trim(o, str, sn, t->trim_prefix);
    }
    return true;
}

/* What one encode call reuses: the lattice of the longest piece so far and
 * the buffers of the normalizer and Metaspace. */
typedef struct {
    double *best;
    int32_t *from, *id, *pstart, *pid; /* the lattice; the best path */
    size_t cap;
    ug_buf norm, ms, tmp;
    ug_spans nal, msal, tal; /* with offsets: the spans of norm, ms, tmp */
} ug_work;

static bool ug_work_fit(ug_work *w, size_t n)
{
    if (n + 1 <= w->cap)
        return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < n + 1)
        cap *= 2;
    free(w->best);
    free(w->from);
    free(w->id);
    free(w->pstart);
    free(w->pid);
    w->best = malloc(cap * sizeof *w->best);
    w->from = malloc(cap * sizeof *w->from);
    w->id = malloc(cap * sizeof *w->id);
    w->pstart = malloc(cap * sizeof *w->pstart);
    w->pid = malloc(cap * sizeof *w->pid);
    w->cap = w->best && w->from && w->id && w->pstart && w->pid ? cap : 0;
    return w->cap != 0;
}

static void ug_work_free(ug_work *w)
{
    free(w->best);
    free(w->from);
    free(w->id);
    free(w->pstart);
    free(w->pid);
    free(w->norm.b);
    free(w->ms.b);
    free(w->tmp.b);
    free(w->nal.v);
    free(w->msal.v);
    free(w->tal.v);
}

/* ---- Viterbi ---- */

static inline int32_t ug_step(const unigram_t *t, int32_t node, unsigned char b)
{
    if (node == 0)
        return t->root[b];
    uint32_t key = (uint32_t)node << 8 | b;
    size_t h = (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 24) & t->emask;
    for (;; h = (h + 1) & t->emask) {
        if (t->edge[h].child < 0)
            return -1;
        if (t->edge[h].key == key)
            return t->edge[h].child;
    }
}

/* A run of <unk> s[0..n): its id looked up again, or its bytes' pieces
 * with byte_fallback, else <unk>, as tokenizers' Unigram::tokenize; each
 * token spans the whole run [a.s, b.e). */
static bool ug_unk_run(const unigram_t *t, const unsigned char *s, size_t n, ug_span a,
                       ug_span b, tok_ids *o)
{
    const char *c = (const char *)s;
    int32_t id = ug_piece_id(t, s, n);
    if (id >= 0)
        return ug_push_at(t, o, id, a.s, b.e, c, n);
    bool all = t->byte_fallback;
    for (size_t k = 0; all && k < n; k++)
        all = t->byte_id[s[k]] >= 0;
    if (!all)
        return ug_push_at(t, o, t->unk_id, a.s, b.e, c, n);
    bool ok = true;
    for (size_t k = 0; ok && k < n; k++)
        ok = ug_push_at(t, o, t->byte_id[s[k]], a.s, b.e, "<", 1);
    return ok;
}

/* The forward pass over s[0..n): w->best/from/id of each end position. */
static void ug_lattice(const unigram_t *t, const unsigned char *s, size_t n, ug_work *w)
{
    w->best[0] = 0;
    for (size_t i = 1; i <= n; i++)
        w->from[i] = -1;
    for (size_t i = 0; i < n;) {
        size_t mb = s[i] < 0x80 ? 1 : s[i] < 0xE0 ? 2 : s[i] < 0xF0 ? 3 : 4;
        double base = w->best[i];
        bool single = false;
        int32_t node = 0;
        for (size_t e = i; e < n && (node = ug_step(t, node, s[e])) >= 0; e++) {
            int32_t id = t->node_id[node];
            if (id < 0)
                continue;
            double c = t->score[id] + base;
            if (w->from[e + 1] < 0 || c > w->best[e + 1]) {
                w->best[e + 1] = c;
                w->from[e + 1] = (int32_t)i;
                w->id[e + 1] = id;
            }
            single |= e + 1 - i == mb;
        }
        if (!single) {
            double c = t->unk_score + base;
            if (w->from[i + mb] < 0 || c > w->best[i + mb]) {
                w->best[i + mb] = c;
                w->from[i + mb] = (int32_t)i;
                w->id[i + mb] = t->unk_id;
            }
        }
        i += mb;
    }
}

/* The best path's cnt tokens (w->pstart, w->pid) of the piece s (sa: its
 * spans when track): one body, inlined as two copies, the one without
 * offsets free of their branches. */
__attribute__((always_inline)) static inline bool ug_emit(const unigram_t *t,
                                                          const unsigned char *s, size_t cnt,
                                                          const ug_span *sa, ug_work *w,
                                                          tok_ids *o, const bool track)
{
    const int32_t *start = w->pstart, *ids = w->pid;
    const ug_span none = {0, 0};
    bool ok = true;
    for (size_t a = 0; ok && a < cnt;) {
        if (ids[a] != t->unk_id) {
            ok = !track ? tok_ids_push(o, ids[a])
                        : ug_push_at(t, o, ids[a], sa[start[a]].s, sa[start[a + 1] - 1].e,
                                     (const char *)s + start[a],
                                     (size_t)(start[a + 1] - start[a]));
            a++;
            continue;
        }
        size_t b = a;
        while (b < cnt && ids[b] == t->unk_id)
            b++;
        ok = ug_unk_run(t, s + start[a], (size_t)(start[b] - start[a]),
                        track ? sa[start[a]] : none, track ? sa[start[b] - 1] : none, o);
        a = b;
    }
    return ok;
}

/* The ids of one piece s[0..n) (sa: its bytes' spans, with offsets). */
static bool ug_piece(const unigram_t *t, const unsigned char *s, size_t n, const ug_span *sa,
                     ug_work *w, tok_ids *o)
{
    if (n == 0)
        return true;
    if (!ug_work_fit(w, n))
        return false;
    ug_lattice(t, s, n, w);
    size_t cnt = 0; /* the best path, back from the end */
    for (int32_t e = (int32_t)n; e > 0; e = w->from[e])
        cnt++;
    int32_t *start = w->pstart, *ids = w->pid;
    size_t k = cnt;
    for (int32_t e = (int32_t)n; e > 0; e = w->from[e]) {
        k--;
        start[k] = w->from[e];
        ids[k] = w->id[e];
    }
    start[cnt] = (int32_t)n;
    return o->track ? ug_emit(t, s, cnt, sa, w, o, true) : ug_emit(t, s, cnt, NULL, w, o, false);
}

/* ---- pre-tokenization ---- */

static bool ug_starts(const char *s, size_t n, const char *p, size_t np)
{
    return n >= np && memcmp(s, p, np) == 0;
}

/* With offsets: nb bytes just put in w->ms take the span a each (the
 * replacement: the space's it replaces, or when prepended the first
 * character's), or from xa (the bytes copied). */
static bool ug_ms_spans(ug_work *w, const ug_span *xa, ug_span a, size_t nb)
{
    ug_spans *m = &w->msal;
    if (!ug_spans_fit(m, m->n + nb))
        return false;
    for (size_t k = 0; k < nb; k++)
        m->v[m->n++] = xa ? xa[k] : a;
    return true;
}

/* Metaspace over x[0..n) (xa: its spans, with offsets): spaces to the
 * replacement, the replacement put first (always; first: only at the
 * text's start), split before each replacement when split; each piece
 * through Viterbi. */
static bool ug_metaspace(const unigram_t *t, const char *x, size_t n, const ug_span *xa,
                         bool at_start, ug_work *w, tok_ids *o)
{
    ug_buf *b = &w->ms;
    b->n = w->msal.n = 0;
    bool ok = true, tr = o->track;
    if (n && !ug_starts(x, n, " ", 1) && !ug_starts(x, n, t->repl, t->nrepl) &&
        (t->prepend == UG_PREPEND_ALWAYS || (t->prepend == UG_PREPEND_FIRST && at_start)))
        ok = ug_buf_put(b, t->repl, t->nrepl) && (!tr || ug_ms_spans(w, NULL, xa[0], t->nrepl));
    for (size_t i = 0, from = 0; ok && i <= n; i++) {
        if (i < n && x[i] != ' ')
            continue;
        ok = ug_buf_put(b, x + from, i - from) && (i == n || ug_buf_put(b, t->repl, t->nrepl));
        if (ok && tr)
            ok = ug_ms_spans(w, xa + from, (ug_span){0, 0}, i - from) &&
                 (i == n || ug_ms_spans(w, NULL, xa[i], t->nrepl));
        from = i + 1;
    }
    if (!ok)
        return false;
    const unsigned char *s = (const unsigned char *)b->b;
    const ug_span *sa = w->msal.v;
    if (!t->ms_split)
        return ug_piece(t, s, b->n, sa, w, o);
    size_t from = 0;
    for (size_t i = 1; ok && i + t->nrepl <= b->n; i++)
        if (s[i] == (unsigned char)t->repl[0] && memcmp(s + i, t->repl, t->nrepl) == 0) {
            ok = ug_piece(t, s + from, i - from, tr ? sa + from : NULL, w, o);
            from = i;
        }
    return ok && ug_piece(t, s + from, b->n - from, tr ? sa + from : NULL, w, o);
}

/* WhitespaceSplit (when the file has it), then Metaspace. */
static bool ug_pretok(const unigram_t *t, const char *x, size_t n, const ug_span *xa,
                      bool at_start, ug_work *w, tok_ids *o)
{
    if (!t->ws_split)
        return ug_metaspace(t, x, n, xa, at_start, w, o);
    bool ok = true;
    size_t i = 0, k;
    while (ok && i < n) {
        size_t a = i;
        while (a < n && ug_is_space(ug_decode((const unsigned char *)x + a, &k)))
            a += k;
        size_t e = a;
        while (e < n && !ug_is_space(ug_decode((const unsigned char *)x + e, &k)))
            e += k;
        if (e > a)
            ok = ug_metaspace(t, x + a, e - a, xa ? xa + a : NULL, at_start && a == 0, w, o);
        i = e;
    }
    return ok;
}

/* ---- added tokens ---- */

/* Where the whitespace that ends s[0..end) starts (end when none). */
static size_t ug_space_back(const char *s, size_t end)
{
    size_t i = end;
    while (i > 0) {
        size_t j = i - 1, k;
        while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80)
            j--;
        if (!ug_is_space(ug_decode((const unsigned char *)s + j, &k)))
            break;
        i = j;
    }
    return i;
}

/* Where the whitespace that starts s[from..n) ends. */
static size_t ug_space_fwd(const char *s, size_t from, size_t n)
{
    size_t i = from, k;
    while (i < n && ug_is_space(ug_decode((const unsigned char *)s + i, &k)))
        i += k;
    return i;
}

/* The longest normalized added token at s[0..n), or -1. */
static int ug_norm_added_at(const unigram_t *t, const char *s, size_t n)
{
    int best = -1;
    for (int k = 0; k < t->added.n; k++) {
        const tok_added *a = &t->added.tok[k];
        if (a->normalized && a->len <= n && memcmp(s, a->content, a->len) == 0 &&
            (best < 0 || a->len > t->added.tok[best].len))
            best = k;
    }
    return best;
}

/* The token a matched at [*start, *stop) of s (n bytes), its strips
 * applied (lstrip not before floor, the end of the previous match). */
static void ug_strip(const unigram_t *t, int a, const char *s, size_t n, size_t floor,
                     size_t *start, size_t *stop)
{
    if (t->lstrip[a]) {
        size_t ns = ug_space_back(s, *start);
        *start = ns > floor ? ns : floor;
    }
    if (t->rstrip[a])
        *stop = ug_space_fwd(s, *stop, n);
}

/* A normalized segment (xa: its spans, with offsets): normalized added
 * tokens split off, the rest pre-tokenized. */
static bool ug_norm_seg(const unigram_t *t, const char *x, size_t n, const ug_span *xa,
                        bool at_start, ug_work *w, tok_ids *o)
{
    if (!t->any_norm_added)
        return ug_pretok(t, x, n, xa, at_start, w, o);
    bool ok = true;
    size_t seg = 0;
    for (size_t i = 0; ok && i < n;) {
        int a = ug_norm_added_at(t, x + i, n - i);
        if (a < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = i + t->added.tok[a].len;
        ug_strip(t, a, x, n, seg, &start, &stop);
        if (start > seg)
            ok = ug_pretok(t, x + seg, start - seg, xa ? xa + seg : NULL, at_start && seg == 0,
                           w, o);
        ok = ok && ug_push_at(t, o, t->added.tok[a].id, xa ? xa[start].s : 0,
                              xa ? xa[stop - 1].e : 0, x + start, stop - start);
        i = seg = stop;
    }
    return ok && (seg >= n || ug_pretok(t, x + seg, n - seg, xa ? xa + seg : NULL,
                                        at_start && seg == 0, w, o));
}

/* A raw segment text[from..to): normalized, then the rest. */
static mt_status ug_segment(const unigram_t *t, const char *text, size_t from, size_t to,
                            ug_work *w, tok_ids *o, mt_err *err)
{
    mt_status s = !o->track
                      ? ug_normalize(t, text + from, to - from, &w->norm, &w->tmp, err)
                      : ug_normalize_track(t, text + from, to - from, from, &w->norm, &w->nal,
                                           &w->tmp, &w->tal, err);
    if (s == MT_OK && !ug_norm_seg(t, w->norm.b, w->norm.n, o->track ? w->nal.v : NULL,
                                   from == 0, w, o))
        s = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
    return s;
}

static mt_status ug_text_ids(const unigram_t *t, const char *text, size_t len, tok_ids *o,
                             mt_err *err)
{
    ug_work w = {0};
    mt_status s = MT_OK;
    size_t seg = 0;
    int a;
    for (size_t i = 0; s == MT_OK && (a = tok_added_next(&t->added, text, len, &i)) >= 0;) {
        size_t start = i, stop = i + t->added.tok[a].len;
        ug_strip(t, a, text, len, seg, &start, &stop);
        if (start > seg)
            s = ug_segment(t, text, seg, start, &w, o, err);
        if (s == MT_OK && !ug_push_at(t, o, t->added.tok[a].id, (uint32_t)start, (uint32_t)stop,
                                      text + start, stop - start))
            s = mt_fail(err, MT_ENOMEM, "tokenizer: out of memory");
        i = seg = stop;
    }
    if (s == MT_OK && seg < len)
        s = ug_segment(t, text, seg, len, &w, o, err);
    ug_work_free(&w);
    return s;
}

/* The text's own ids into o (o->track: their spans too). */
static mt_status ug_pieces(const unigram_t *t, const char *text, size_t len, tok_ids *o,
                           mt_err *err)
{
    if (!t || (!text && len > 0))
        return mt_fail(err, MT_EINVAL, "unigram_pieces: NULL argument");
    mt_status s = tok_check_text(text, len, o->track, err);
    o->text = text;
    o->len = len;
    if (s == MT_OK)
        s = ug_text_ids(t, text, len, o, err);
    if (s == MT_OK && o->n > 0x3FFFFFFF)
        s = mt_fail(err, MT_ELIMIT, "tokenizer: text has more than %d tokens", 0x3FFFFFFF);
    if (s != MT_OK)
        tok_ids_free(o);
    return s;
}

mt_status unigram_pieces(const unigram_t *t, const char *text, size_t len, int32_t **ids, int *n,
                         mt_err *err)
{
    *ids = NULL;
    *n = 0;
    tok_ids o = {0};
    mt_status s = ug_pieces(t, text, len, &o, err);
    if (s != MT_OK)
        return s;
    *ids = o.v;
    *n = (int)o.n;
    return MT_OK;
}

/* ---- templates ---- */

/* unigram_encode, with offsets when not NULL. */
static mt_status ug_encode(const unigram_t *t, const char *text, size_t len, int32_t *ids,
                           int32_t *offsets, int max_len, int *n, int *full_len, mt_err *err)
{
    if (!t || !ids || !n)
        return mt_fail(err, MT_EINVAL, "unigram_encode: NULL argument");
    int extra = t->nsingle - 1;
    mt_status s = tok_encode_begin("unigram_encode", extra, max_len, n, full_len, err);
    tok_ids o = {.track = offsets != NULL};
    if (s == MT_OK)
        s = ug_pieces(t, text, len, &o, err);
    if (s != MT_OK)
        return s;
    int32_t pre[UG_MAX_TMPL], post[UG_MAX_TMPL];
    int npre = 0, npost = 0;
    for (int k = 0, seq = 0; k < t->nsingle; k++) /* the template's tokens around $A */
        if (t->single[k].id < 0)
            seq = 1;
        else if (seq)
            post[npost++] = t->single[k].id;
        else
            pre[npre++] = t->single[k].id;
    tok_encode_end(&o, pre, npre, post, npost, max_len, ids, offsets, n, full_len);
    return MT_OK;
}

mt_status unigram_encode(const unigram_t *t, const char *text, size_t len, int32_t *ids,
                         int max_len, int *n, int *full_len, mt_err *err)
{
    return ug_encode(t, text, len, ids, NULL, max_len, n, full_len, err);
}

mt_status unigram_encode_offsets(const unigram_t *t, const char *text, size_t len, int32_t *ids,
                                 int32_t *offsets, int max_len, int *n, int *full_len,
                                 mt_err *err)
{
    if (!offsets)
        return mt_fail(err, MT_EINVAL, "unigram_encode_offsets: NULL offsets");
    return ug_encode(t, text, len, ids, offsets, max_len, n, full_len, err);
}

int unigram_pair_added(const unigram_t *t) { return t->npair - 2; }

void unigram_pair_layout(const unigram_t *t, const int32_t *a, int na, const int32_t *b, int nb,
                         int32_t *ids, int *n, int *seg)
{
    int w = 0;
    *seg = -1;
    for (int k = 0; k < t->npair; k++) {
        const ug_tmpl *e = &t->pair[k];
        int cnt = e->id >= 0 ? 1 : e->id == -1 ? na : nb;
        if (e->type_id == 1 && *seg < 0 && cnt > 0)
            *seg = w;
        if (e->id >= 0)
            ids[w++] = e->id;
        else if (cnt > 0) {
            memcpy(ids + w, e->id == -1 ? a : b, (size_t)cnt * sizeof *ids);
            w += cnt;
        }
    }
    *n = w;
    if (*seg < 0)
        *seg = w;
}

/* ---- accessors ---- */

int unigram_vocab_size(const unigram_t *t) { return t->ntok; }

const char *unigram_token(const unigram_t *t, int32_t id)
{
    return id >= 0 && id < t->ntok ? t->tok[id] : NULL;
}

int32_t unigram_special_id(const unigram_t *t, const char *name)
{
    return tok_added_id(&t->added, name);
}

bool unigram_is_special(const unigram_t *t, int32_t id)
{
    return tok_added_special(&t->added, id);
}
