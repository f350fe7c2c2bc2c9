/* unigram_internal.h: what the Unigram tokenizer's files share (not an
 * interface: engine/text/unigram.h is): its tables, built by
 * unigram_load.c, read by unigram.c (split, Viterbi, templates, decode)
 * and unigram_norm.c (the normalizer's steps). */
#ifndef MT_UNIGRAM_INTERNAL_H
#define MT_UNIGRAM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"
#include "engine/text/tok_special.h"
#include "engine/text/unigram.h"

/* A growable byte buffer. */
typedef struct {
    char *b;
    size_t n, cap;
} ug_buf;

bool ug_buf_put(ug_buf *o, const void *s, size_t n);

/* Where a normalized byte comes from: the byte span [s, e) of the
 * original text (tokenizers' alignments), one per normalized byte. */
typedef struct {
    uint32_t s, e;
} ug_span;

typedef struct {
    ug_span *v;
    size_t n, cap;
} ug_spans;

/* Room for n spans (o->n unchanged). */
bool ug_spans_fit(ug_spans *o, size_t n);

/* SentencePiece's precompiled_charsmap: a double-array trie over the
 * bytes of what changes, whose values are offsets into the normalized
 * strings (NUL-ended). */
typedef struct {
    uint32_t *unit;
    size_t nunit;
    char *norm;
    size_t nnorm;
    int16_t ascii[128]; /* per ASCII byte: -1 no entry, else index in ascii_off */
    uint32_t ascii_off[128], ascii_len[128];
} ug_charsmap;

enum { UG_NORM_PRECOMPILED, UG_NORM_REPLACE, UG_NORM_SPACES };

/* One normalizer step: Precompiled, Replace of a string, or Replace of
 * the regex " {2,}" (runs of two spaces or more). */
typedef struct {
    int kind;
    char *pat, *with; /* Replace: NUL-ended */
    size_t npat, nwith;
} ug_norm_step;

enum { UG_PREPEND_ALWAYS, UG_PREPEND_FIRST, UG_PREPEND_NEVER };
enum { UG_DEC_METASPACE, UG_DEC_BYTEFALLBACK, UG_DEC_FUSE };

/* One element of a template: an added token (id) or a sequence (A: -1,
 * B: -2), with its type id. */
typedef struct {
    int32_t id;
    int type_id;
} ug_tmpl;

#define UG_MAX_TMPL 16

/* The pieces' trie: root edges direct, the others hashed by
 * (node << 8 | byte). */
typedef struct {
    uint32_t key; /* node << 8 | byte */
    int32_t child; /* -1: empty slot */
} ug_edge;

struct unigram {
    char **tok;        /* id -> text (the piece, or the added token's content) */
    double *score;     /* id -> score (vocabulary ids) */
    int nvocab, ntok;  /* vocabulary entries; all ids */
    size_t cap;
    int32_t unk_id;
    double unk_score;  /* the lowest score - 10, as tokenizers */
    bool byte_fallback;
    int32_t byte_id[256]; /* the piece <0xNN>, or -1 */
    int32_t *node_id;  /* trie node -> piece id, or -1 */
    size_t nnode;
    int32_t root[256];
    ug_edge *edge;
    size_t emask, nedge;
    ug_norm_step *norm;
    int nnorm;
    ug_charsmap cmap;
    bool ws_split;     /* WhitespaceSplit before Metaspace */
    bool ms_split;     /* Metaspace splits on the replacement */
    int prepend;
    char repl[5];      /* the replacement character, UTF-8 */
    size_t nrepl;
    tok_added_list added; /* raw-matched (normalized false) and normalized ones */
    bool *lstrip, *rstrip; /* by index in added */
    bool any_norm_added;
    ug_tmpl single[UG_MAX_TMPL], pair[UG_MAX_TMPL];
    bool trim, trim_prefix; /* RobertaProcessing's trim_offsets, add_prefix_space */
    int nsingle, npair;
    int dec[4];        /* the decoder's steps */
    int ndec;
    int dec_prepend;   /* the Metaspace decoder's prepend scheme */
    char dec_repl[5];
    size_t ndec_repl;
};

/* Parses a precompiled_charsmap (decoded bytes); MT_EFORMAT on a
 * malformed one, naming path and field. */
mt_status ug_charsmap_parse(ug_charsmap *m, const unsigned char *b, size_t n, const char *path,
                            const char *field, mt_err *err);
void ug_charsmap_free(ug_charsmap *m);

/* The normalizer's steps over len bytes of UTF-8 into *out (cleared
 * first); scratch is a second buffer they alternate with (both kept for
 * the next call, free()d by the caller). */
mt_status ug_normalize(const unigram_t *t, const char *text, size_t len, ug_buf *out,
                       ug_buf *scratch, mt_err *err);

/* ug_normalize, and in *al each normalized byte's span in the original
 * text as tokenizers aligns it (text is at byte base of it); sal is a
 * second span buffer the steps alternate with. */
mt_status ug_normalize_track(const unigram_t *t, const char *text, size_t len, size_t base,
                             ug_buf *out, ug_spans *al, ug_buf *scratch, ug_spans *sal,
                             mt_err *err);

/* Whether the code point is White_Space (Rust's char::is_whitespace). */
bool ug_is_space(uint32_t c);
/* Decodes the code point at s (well-formed UTF-8); *len its bytes. */
uint32_t ug_decode(const unsigned char *s, size_t *len);

/* The id of the piece spelled s[0..n), or -1 (the trie, whole). */
int32_t ug_piece_id(const unigram_t *t, const unsigned char *s, size_t n);

#endif
