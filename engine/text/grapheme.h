/* grapheme.h: extended grapheme clusters (Unicode's UAX #29 rules GB3 to
 * GB999, GB9c included), cut as the Rust crate unicode-segmentation cuts
 * them for Hugging Face tokenizers' Precompiled normalizer
 * (engine/text/unigram_norm.c). The properties are generated into
 * grapheme_data.c by tools/gen-grapheme-table.py.
 */
#ifndef MT_GRAPHEME_H
#define MT_GRAPHEME_H

#include <stddef.h>
#include <stdint.h>

/* Grapheme_Cluster_Break values (low 5 bits of a property byte). */
enum {
    GCB_ANY, GCB_CR, GCB_LF, GCB_CONTROL, GCB_EXTEND, GCB_ZWJ, GCB_SPACING_MARK, GCB_PREPEND,
    GCB_RI, GCB_L, GCB_V, GCB_T, GCB_LV, GCB_LVT, GCB_EXT_PICT, GCB_INCB_CONSONANT,
};
#define GCB_INCB_EXTEND 0x20 /* Indic_Conjunct_Break=Extend */
#define GCB_INCB_LINKER 0x40 /* Indic_Conjunct_Break=Linker */

extern const uint32_t gcb_runs[];
extern const int gcb_nruns;

/* Fills the Basic Multilingual Plane's properties into a direct table
 * (once; thread-safe): gcb_prop and gcb_next need it first. */
void gcb_init(void);

/* The property byte of a code point (GCB value | GCB_INCB_* flags). */
unsigned gcb_prop(uint32_t cp);

/* The byte length of the extended grapheme cluster that starts at s[0]
 * (well-formed UTF-8, n > 0 bytes). gcb_init first. */
size_t gcb_next(const unsigned char *s, size_t n);

#endif
