#!/usr/bin/env python3
"""gen-unicode-tables.py: writes engine/text/unicode_data.h and engine/text/unicode_data.c,
the Unicode tables the BERT tokenizer (engine/text/tokenizer.c) needs.

The tokenizer must agree with Hugging Face `tokenizers` (Rust) to the id, so
the tables describe Unicode as *that library* sees it, which is not one
Unicode version:

  - categories (Cc/Cf/Co control, P* punctuation, Mn marks) come from the
    `unicode_categories` 0.1.1 crate, whose tables are Unicode 8.0;
  - NFD (decompositions, canonical combining classes) comes from the
    `unicode-normalization-alignments` crate, Unicode 9.0;
  - lowercase comes from Rust's char::to_lowercase, the Unicode version of
    the compiler that built the wheel (16/17 for tokenizers 0.23);
  - whitespace is Rust's char::is_whitespace (the White_Space property).

Python's unicodedata is the base (Unicode 14.0 in Python 3.11). HF_COMPAT
below lists, per property, where the Rust side differs from it; those lists
were measured by probing tokenizers on every code point (--derive prints
them, --check verifies that the embedded lists still match the installed
tokenizers). Regenerate:

    python3 tools/gen-unicode-tables.py                       # write tables
    /path/to/venv-with-tokenizers/bin/python tools/gen-unicode-tables.py --check

Needs the same unicodedata version as recorded in HF_COMPAT_BASE (the
script refuses another, since the delta lists are relative to it).
"""
import argparse
import os
import sys
import unicodedata as ud

HF_COMPAT_BASE = "14.0.0"

# Rust char::is_whitespace: the White_Space property (PropList.txt), which
# Python's unicodedata does not expose; stable since Unicode 6.3.
WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0),
               (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
               (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]

# --- measured differences between tokenizers 0.23.3 and unicodedata 14.0.0 ---
# Output of --derive; ranges are inclusive. What they are:
#   other_del/add  Cc/Cf/Co (removed by clean_text) per unicode_categories
#                  (Unicode 8.0): Cf characters added since are kept.
#   mn_del/add     Mn per unicode_categories: marks added since Unicode 8.0
#                  are not stripped; U+1734 was Mn then (Mc now).
#   punct_del/add  P* per unicode_categories: punctuation added since 8.0 is
#                  not split off; U+166D and U+111C9 were Po then.
#   nodecomp       decompositions added after Unicode 9.0 (normalization crate).
#   ccc_zero       marks added after Unicode 9.0: class 0 there.
#   lower          Rust's lowercase for letters added after Unicode 14.0.
HF_COMPAT = {
    "other_del": [(0x0890, 0x0891), (0x08E2, 0x08E2), (0x110CD, 0x110CD),
        (0x13430, 0x13438)],
    "other_add": [],
    "mn_del": [(0x07FD, 0x07FD), (0x0898, 0x089F), (0x08CA, 0x08E1), (0x09FE, 0x09FE),
        (0x0AFA, 0x0AFF), (0x0B55, 0x0B55), (0x0C04, 0x0C04), (0x0C3C, 0x0C3C),
        (0x0D00, 0x0D00), (0x0D3B, 0x0D3C), (0x0D81, 0x0D81), (0x0EBA, 0x0EBA),
        (0x180F, 0x180F), (0x1885, 0x1886), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFB),
        (0xA82C, 0xA82C), (0xA8C5, 0xA8C5), (0xA8FF, 0xA8FF), (0xA9BD, 0xA9BD),
        (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50), (0x10F82, 0x10F85),
        (0x11070, 0x11070), (0x11073, 0x11074), (0x110C2, 0x110C2), (0x111C9, 0x111C9),
        (0x111CF, 0x111CF), (0x1123E, 0x1123E), (0x1133B, 0x1133B), (0x11438, 0x1143F),
        (0x11442, 0x11444), (0x11446, 0x11446), (0x1145E, 0x1145E), (0x1182F, 0x11837),
        (0x11839, 0x1183A), (0x1193B, 0x1193C), (0x1193E, 0x1193E), (0x11943, 0x11943),
        (0x119D4, 0x119D7), (0x119DA, 0x119DB), (0x119E0, 0x119E0), (0x11A01, 0x11A0A),
        (0x11A33, 0x11A38), (0x11A3B, 0x11A3E), (0x11A47, 0x11A47), (0x11A51, 0x11A56),
        (0x11A59, 0x11A5B), (0x11A8A, 0x11A96), (0x11A98, 0x11A99), (0x11C30, 0x11C36),
        (0x11C38, 0x11C3D), (0x11C3F, 0x11C3F), (0x11C92, 0x11CA7), (0x11CAA, 0x11CB0),
        (0x11CB2, 0x11CB3), (0x11CB5, 0x11CB6), (0x11D31, 0x11D36), (0x11D3A, 0x11D3A),
        (0x11D3C, 0x11D3D), (0x11D3F, 0x11D45), (0x11D47, 0x11D47), (0x11D90, 0x11D91),
        (0x11D95, 0x11D95), (0x11D97, 0x11D97), (0x11EF3, 0x11EF4), (0x16F4F, 0x16F4F),
        (0x16FE4, 0x16FE4), (0x1CF00, 0x1CF2D), (0x1CF30, 0x1CF46), (0x1E000, 0x1E006),
        (0x1E008, 0x1E018), (0x1E01B, 0x1E021), (0x1E023, 0x1E024), (0x1E026, 0x1E02A),
        (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF), (0x1E944, 0x1E94A)],
    "mn_add": [(0x1734, 0x1734)],
    "punct_del": [(0x061D, 0x061D), (0x09FD, 0x09FD), (0x0A76, 0x0A76),
        (0x0C77, 0x0C77), (0x0C84, 0x0C84), (0x1B7D, 0x1B7E), (0x2E43, 0x2E4F),
        (0x2E52, 0x2E5D), (0x10EAD, 0x10EAD), (0x10F55, 0x10F59), (0x10F86, 0x10F89),
        (0x1144B, 0x1144F), (0x1145A, 0x1145B), (0x1145D, 0x1145D), (0x11660, 0x1166C),
        (0x116B9, 0x116B9), (0x1183B, 0x1183B), (0x11944, 0x11946), (0x119E2, 0x119E2),
        (0x11A3F, 0x11A46), (0x11A9A, 0x11A9C), (0x11A9E, 0x11AA2), (0x11C41, 0x11C45),
        (0x11C70, 0x11C71), (0x11EF7, 0x11EF8), (0x11FFF, 0x11FFF), (0x12FF1, 0x12FF2),
        (0x16E97, 0x16E9A), (0x16FE2, 0x16FE2), (0x1E95E, 0x1E95F)],
    "punct_add": [(0x166D, 0x166D), (0x111C9, 0x111C9)],
    "nodecomp": [(0x11938, 0x11938)],
    "ccc_zero": [(0x07FD, 0x07FD), (0x0898, 0x089F), (0x08CA, 0x08D3),
        (0x09FE, 0x09FE), (0x0C3C, 0x0C3C), (0x0D3B, 0x0D3C), (0x0EBA, 0x0EBA),
        (0x1715, 0x1715), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFA), (0xA82C, 0xA82C),
        (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50), (0x10F82, 0x10F85),
        (0x11070, 0x11070), (0x1133B, 0x1133B), (0x1145E, 0x1145E), (0x11839, 0x1183A),
        (0x1193D, 0x1193E), (0x11943, 0x11943), (0x119E0, 0x119E0), (0x11A34, 0x11A34),
        (0x11A47, 0x11A47), (0x11A99, 0x11A99), (0x11D42, 0x11D42), (0x11D44, 0x11D45),
        (0x11D97, 0x11D97), (0x16FF0, 0x16FF1), (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE),
        (0x1E2EC, 0x1E2EF)],
    "lower": {0x1C89: [0x1C8A], 0xA7CB: [0x0264], 0xA7CC: [0xA7CD], 0xA7CE: [0xA7CF],
        0xA7D2: [0xA7D3], 0xA7D4: [0xA7D5], 0xA7DA: [0xA7DB], 0xA7DC: [0x019B],
        0x10D50: [0x10D70], 0x10D51: [0x10D71], 0x10D52: [0x10D72], 0x10D53: [0x10D73],
        0x10D54: [0x10D74], 0x10D55: [0x10D75], 0x10D56: [0x10D76], 0x10D57: [0x10D77],
        0x10D58: [0x10D78], 0x10D59: [0x10D79], 0x10D5A: [0x10D7A], 0x10D5B: [0x10D7B],
        0x10D5C: [0x10D7C], 0x10D5D: [0x10D7D], 0x10D5E: [0x10D7E], 0x10D5F: [0x10D7F],
        0x10D60: [0x10D80], 0x10D61: [0x10D81], 0x10D62: [0x10D82], 0x10D63: [0x10D83],
        0x10D64: [0x10D84], 0x10D65: [0x10D85], 0x16EA0: [0x16EBB], 0x16EA1: [0x16EBC],
        0x16EA2: [0x16EBD], 0x16EA3: [0x16EBE], 0x16EA4: [0x16EBF], 0x16EA5: [0x16EC0],
        0x16EA6: [0x16EC1], 0x16EA7: [0x16EC2], 0x16EA8: [0x16EC3], 0x16EA9: [0x16EC4],
        0x16EAA: [0x16EC5], 0x16EAB: [0x16EC6], 0x16EAC: [0x16EC7], 0x16EAD: [0x16EC8],
        0x16EAE: [0x16EC9], 0x16EAF: [0x16ECA], 0x16EB0: [0x16ECB], 0x16EB1: [0x16ECC],
        0x16EB2: [0x16ECD], 0x16EB3: [0x16ECE], 0x16EB4: [0x16ECF], 0x16EB5: [0x16ED0],
        0x16EB6: [0x16ED1], 0x16EB7: [0x16ED2], 0x16EB8: [0x16ED3]},
}

# --- end of measured differences ---


def rng_contains(ranges, cp):
    """Whether cp lies in one of the inclusive (first, last) ranges."""
    for a, b in ranges:
        if a <= cp <= b:
            return True
    return False


def to_ranges(cps):
    """Sorted code points -> inclusive (first, last) ranges."""
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [tuple(r) for r in out]


def all_cps():
    """Every Unicode scalar value (no surrogates)."""
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        yield cp


def is_ascii_punct(cp):
    """Rust's char::is_ascii_punctuation."""
    return 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126


def is_hangul_syllable(cp):
    return 0xAC00 <= cp < 0xAC00 + 11172


# ---------------------------------------------------------------------------
# The properties as unicodedata alone gives them (the base of HF_COMPAT).

def base_other(cp):
    """unicode_categories' is_other(): Cc, Cf or Co."""
    return ud.category(chr(cp)) in ("Cc", "Cf", "Co")


def base_mn(cp):
    return ud.category(chr(cp)) == "Mn"


def base_punct(cp):
    return ud.category(chr(cp)).startswith("P")


def base_lower(cp):
    return [ord(c) for c in chr(cp).lower()]


def base_decomp(cp):
    """Full canonical decomposition (Hangul syllables are done in C)."""
    if is_hangul_syllable(cp):
        return [cp]
    return [ord(c) for c in ud.normalize("NFD", chr(cp))]


def base_ccc(cp):
    return ud.combining(chr(cp))


# ---------------------------------------------------------------------------
# The properties with HF_COMPAT applied: what the C tables hold.

def hf_other(cp):
    if rng_contains(HF_COMPAT["other_add"], cp):
        return True
    if rng_contains(HF_COMPAT["other_del"], cp):
        return False
    return base_other(cp)


def hf_mn(cp):
    if rng_contains(HF_COMPAT["mn_add"], cp):
        return True
    if rng_contains(HF_COMPAT["mn_del"], cp):
        return False
    return base_mn(cp)


def hf_punct(cp):
    if is_ascii_punct(cp) or rng_contains(HF_COMPAT["punct_add"], cp):
        return True
    if rng_contains(HF_COMPAT["punct_del"], cp):
        return False
    return base_punct(cp)


def hf_lower(cp):
    if cp in HF_COMPAT["lower"]:
        return list(HF_COMPAT["lower"][cp])
    return base_lower(cp)


def hf_decomp(cp):
    if rng_contains(HF_COMPAT["nodecomp"], cp):
        return [cp]
    return base_decomp(cp)


def hf_ccc(cp):
    if rng_contains(HF_COMPAT["ccc_zero"], cp):
        return 0
    return base_ccc(cp)


def hf_remove(cp):
    """BertNormalizer clean_text drops it."""
    if cp in (0x09, 0x0A, 0x0D):
        return False
    return cp == 0 or cp == 0xFFFD or hf_other(cp)


def hf_space(cp):
    """BertNormalizer clean_text maps it to ' ' (and the pre-tokenizer splits)."""
    return cp in (0x09, 0x0A, 0x0D) or rng_contains(WHITE_SPACE, cp)


# ---------------------------------------------------------------------------
# Probing the installed tokenizers (--derive, --check).

def probe_hf():
    """Measures each property on every code point through tokenizers and
    returns the HF_COMPAT dict it implies. Takes a minute."""
    from tokenizers import normalizers, pre_tokenizers
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=True)
    nfd = normalizers.NFD()
    pre = pre_tokenizers.BertPreTokenizer()
    res = {k: [] for k in ("other_del", "other_add", "mn_del", "mn_add",
                           "punct_del", "punct_add", "nodecomp", "ccc_zero")}
    res["lower"] = {}
    bad_space = []
    for cp in all_cps():
        c = chr(cp)
        # clean_text: removed, mapped to ' ', or kept.
        got = clean.normalize_str(c)
        is_other = got == "" and cp not in (0, 0xFFFD)
        if got == " " and not hf_space(cp):
            bad_space.append(cp)
        if got == c and hf_space(cp) and cp != 0x20:
            bad_space.append(cp)
        if cp not in (0, 0xFFFD, 0x09, 0x0A, 0x0D):
            if is_other and not base_other(cp):
                res["other_add"].append(cp)
            if not is_other and base_other(cp):
                res["other_del"].append(cp)
        # NFD of the single character.
        d = [ord(x) for x in nfd.normalize_str(c)]
        if d != base_decomp(cp) and not is_hangul_syllable(cp):
            if d == [cp]:
                res["nodecomp"].append(cp)
            else:
                raise SystemExit("U+%04X: decomposition %s not handled" % (cp, d))
        # Mn: only observable on characters that NFD leaves alone.
        if d == [cp]:
            is_mn = strip.normalize_str(c) == ""
            if is_mn and not base_mn(cp):
                res["mn_add"].append(cp)
            if not is_mn and base_mn(cp):
                res["mn_del"].append(cp)
        # lowercase
        lo = [ord(x) for x in lower.normalize_str(c)]
        if lo != base_lower(cp):
            res["lower"][cp] = lo
        # punctuation, as the pre-tokenizer isolates it
        toks = [t for t, _ in pre.pre_tokenize_str("a" + c + "a")]
        if toks == ["a", "a"]:
            if not hf_space(cp):
                bad_space.append(cp)
        else:
            is_p = toks == ["a", c, "a"]
            if not is_p and toks != ["a" + c + "a"]:
                raise SystemExit("U+%04X: pre-tokenized as %r" % (cp, toks))
            bp = is_ascii_punct(cp) or base_punct(cp)
            if is_p and not bp:
                res["punct_add"].append(cp)
            if not is_p and bp:
                res["punct_del"].append(cp)
        # combining class: a class the crate knows makes c move before
        # U+0345 (ccc 240); a class it does not know (0) leaves it in place.
        # (Only characters NFD leaves alone ever meet the ordering.)
        v = base_ccc(cp)
        if v and d == [cp]:
            if v < 240:
                probe, ref = "a\u0345" + c, [ord("a"), cp, 0x345]
            else:
                probe, ref = "a" + c + "\u0301", [ord("a"), 0x301, cp]
            got = [ord(x) for x in nfd.normalize_str(probe)]
            if got != ref:
                res["ccc_zero"].append(cp)
    if bad_space:
        raise SystemExit("whitespace differs from WHITE_SPACE at %s"
                         % ", ".join("U+%04X" % x for x in bad_space[:20]))
    for k in res:
        if k != "lower":
            res[k] = to_ranges(res[k])
    return res


def format_compat(res):
    """HF_COMPAT as Python source, for pasting into this file."""
    def wrap(key, items, opening, closing):
        lines, cur = [], '    "%s": %s' % (key, opening)
        for i, it in enumerate(items):
            piece = it + ("," if i + 1 < len(items) else "")
            if len(cur) + len(piece) + 1 > 88:
                lines.append(cur.rstrip())
                cur = "        "
            cur += piece + " "
        lines.append(cur.rstrip() + closing + ",")
        return lines
    out = ["HF_COMPAT = {"]
    for k, v in res.items():
        if k == "lower":
            items = ["0x%04X: [%s]" % (cp, ", ".join("0x%04X" % x for x in lo))
                     for cp, lo in sorted(v.items())]
            out += wrap(k, items, "{", "}")
        else:
            out += wrap(k, ["(0x%04X, 0x%04X)" % tuple(r) for r in v], "[", "]")
    out.append("}")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Writing the C files.

FLAG_REMOVE, FLAG_SPACE, FLAG_PUNCT, FLAG_MN = 1, 2, 4, 8
FLAG_DECOMP, FLAG_CCC, FLAG_LOWER = 16, 32, 64
BLOCK_BITS = 6  # flags are a two-stage table of blocks of 1 << BLOCK_BITS

HEADER = """\
/* unicode_data.h: Unicode tables for the BERT tokenizer (engine/text/tokenizer.c).
 * generated by tools/gen-unicode-tables.py -- do not edit.
 *
 * The tables describe Unicode as Hugging Face tokenizers (Rust) sees it:
 * categories as the unicode_categories crate (Unicode 8.0), NFD as the
 * unicode-normalization-alignments crate (Unicode 9.0), lowercase as Rust's
 * char::to_lowercase, whitespace as char::is_whitespace. The generator says
 * how these were measured.
 */
#ifndef MT_UNICODE_DATA_H
#define MT_UNICODE_DATA_H

#include <stdint.h>

enum {
    UCD_REMOVE = 1, /* clean_text drops it: NUL, U+FFFD, Cc/Cf/Co but \\t \\n \\r */
    UCD_SPACE = 2,  /* whitespace: clean_text maps it to ' ' */
    UCD_PUNCT = 4,  /* ASCII punctuation or category P*: a token of its own */
    UCD_MN = 8,     /* nonspacing mark (Mn): dropped after NFD when stripping accents */
    UCD_DECOMP = 16, /* has a canonical decomposition (ucd_decompose changes it) */
    UCD_CCC = 32,   /* has a nonzero canonical combining class */
    UCD_LOWER = 64, /* ucd_lower changes it */
};

/* The two-stage table behind ucd_flags (use ucd_flags). */
extern const uint8_t ucd_flag_index[];
extern const uint8_t ucd_flag_blocks[][UCD_BLOCK];

/* The UCD_* flags of a code point (0 for most; 0 above U+10FFFF). A table
 * lookup, cheap enough to call per character. */
static inline unsigned ucd_flags(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return 0;
    return ucd_flag_blocks[ucd_flag_index[cp >> UCD_BLOCK_BITS]][cp & (UCD_BLOCK - 1)];
}

/* Full canonical decomposition (NFD, Hangul included) into out; returns the
 * number of code points (1 with out[0] = cp when it has none). */
int ucd_decompose(uint32_t cp, uint32_t out[UCD_MAX_DECOMP]);

/* Canonical combining class (0 for starters). */
int ucd_ccc(uint32_t cp);

/* Full lowercase mapping, as Rust's char::to_lowercase, into out; returns
 * the number of code points (1 with out[0] = cp when unchanged). */
int ucd_lower(uint32_t cp, uint32_t out[UCD_MAX_LOWER]);

#endif
"""


def c_array(name, ctype, rows, per_line):
    """A static const C array of initialiser strings."""
    out = ["static const %s %s[%d] = {" % (ctype, name, len(rows))]
    for i in range(0, len(rows), per_line):
        out.append("    " + " ".join(r + "," for r in rows[i:i + per_line]))
    out.append("};")
    return "\n".join(out)


def generate(outdir):
    """Computes the tables and writes the two C files."""
    flags = {}
    for cp in all_cps():
        f = 0
        if hf_remove(cp):
            f |= FLAG_REMOVE
        if hf_space(cp):
            f |= FLAG_SPACE
        if hf_punct(cp):
            f |= FLAG_PUNCT
        if hf_mn(cp):
            f |= FLAG_MN
        if f:
            flags[cp] = f
    decomp = []
    for cp in all_cps():
        d = hf_decomp(cp)
        if d != [cp]:
            decomp.append((cp, d))
    max_decomp = max(len(d) for _, d in decomp)

    ccc = [(cp, hf_ccc(cp)) for cp in all_cps() if hf_ccc(cp)]

    lower1, lowern = [], []
    for cp in all_cps():
        lo = hf_lower(cp)
        if lo == [cp]:
            continue
        if len(lo) == 1:
            lower1.append((cp, lo[0]))
        else:
            lowern.append((cp, lo))
    max_lower = max([1] + [len(lo) for _, lo in lowern])

    for cp, _ in decomp:
        flags[cp] = flags.get(cp, 0) | FLAG_DECOMP
    for cp in range(0xAC00, 0xAC00 + 11172):
        flags[cp] = flags.get(cp, 0) | FLAG_DECOMP
    for cp, _ in ccc:
        flags[cp] = flags.get(cp, 0) | FLAG_CCC
    for cp, _ in lower1 + lowern:
        flags[cp] = flags.get(cp, 0) | FLAG_LOWER
    bsize = 1 << BLOCK_BITS
    blocks, block_ids, index = [], {}, []
    for start in range(0, 0x110000, bsize):
        b = tuple(flags.get(cp, 0) for cp in range(start, start + bsize))
        if b not in block_ids:
            block_ids[b] = len(blocks)
            blocks.append(b)
        index.append(block_ids[b])
    assert len(blocks) <= 256

    # Invariants tokenizer.c relies on: a decomposition never starts with a
    # character that itself decomposes (it is full), and lowercasing (done
    # after canonical ordering) neither takes nor makes a combining class on
    # characters that survive NFD.
    for cp, d in decomp:
        for x in d:
            assert hf_decomp(x) == [x], "U+%04X not fully decomposed" % cp
    decomposable = {cp for cp, _ in decomp}
    for cp, lo in lower1 + lowern:
        lo = lo if isinstance(lo, list) else [lo]
        if cp in decomposable or is_hangul_syllable(cp):
            continue
        assert hf_ccc(cp) == 0 and all(hf_ccc(x) == 0 for x in lo), "U+%04X" % cp

    header = HEADER.replace(
        "#include <stdint.h>\n",
        "#include <stdint.h>\n\n#define UCD_MAX_DECOMP %d\n#define UCD_MAX_LOWER %d\n"
        "#define UCD_BLOCK_BITS %d\n#define UCD_BLOCK (1 << UCD_BLOCK_BITS)\n"
        % (max_decomp, max_lower, BLOCK_BITS))

    src = []
    src.append("""\
/* unicode_data.c: Unicode tables for the BERT tokenizer and their lookups.
 * generated by tools/gen-unicode-tables.py -- do not edit.
 * Base: Python unicodedata %s, with the differences of Hugging Face
 * tokenizers measured on every code point (see the generator).
 */
#include "engine/text/unicode_data.h"

#include <stddef.h>

typedef struct {
    uint32_t cp;
    uint32_t d[UCD_MAX_DECOMP]; /* zero-padded */
} ucd_decomp_row;

typedef struct {
    uint32_t cp;
    uint8_t ccc;
} ucd_ccc_row;

typedef struct {
    uint32_t cp, lower;
} ucd_lower_row;

typedef struct {
    uint32_t cp;
    uint32_t lower[UCD_MAX_LOWER]; /* zero-padded */
} ucd_lowern_row;""" % ud.unidata_version)
    src.append("/* Flags, two stages: the block of each %d code points, then the blocks. */\n"
               % bsize + c_array("ucd_flag_index", "uint8_t", [str(i) for i in index], 24)
               .replace("static const", "const", 1))
    src.append("const uint8_t ucd_flag_blocks[%d][UCD_BLOCK] = {\n" % len(blocks) +
               "\n".join("    {" + ",".join(str(f) for f in b) + "},"
                         for b in blocks) + "\n};")
    src.append(c_array("ucd_decomps", "ucd_decomp_row",
                       ["{0x%04X, {%s}}" % (cp, ", ".join("0x%04X" % x for x in
                                                          d + [0] * (max_decomp - len(d))))
                        for cp, d in decomp], 2))
    src.append(c_array("ucd_cccs", "ucd_ccc_row",
                       ["{0x%04X, %d}" % r for r in ccc], 6))
    src.append(c_array("ucd_lowers", "ucd_lower_row",
                       ["{0x%04X, 0x%04X}" % r for r in lower1], 6))
    src.append(c_array("ucd_lowerns", "ucd_lowern_row",
                       ["{0x%04X, {%s}}" % (cp, ", ".join("0x%04X" % x for x in
                                                          lo + [0] * (max_lower - len(lo))))
                        for cp, lo in lowern], 2))
    src.append("""\
#define UCD_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Hangul syllables decompose by arithmetic, not by table (Unicode 3.12). */
enum {
    UCD_SBASE = 0xAC00, UCD_LBASE = 0x1100, UCD_VBASE = 0x1161, UCD_TBASE = 0x11A7,
    UCD_VCOUNT = 21, UCD_TCOUNT = 28, UCD_NCOUNT = 21 * 28, UCD_SCOUNT = 11172,
};

/* Binary search over a table whose rows start with a uint32_t cp: returns
 * the row index or -1. One helper serves the four keyed tables. */
static long ucd_find(const void *rows, size_t n, size_t size, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t key = *(const uint32_t *)(const void *)((const char *)rows + mid * size);
        if (key == cp)
            return (long)mid;
        if (key < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* NFD of one code point: the table holds full decompositions already. */
int ucd_decompose(uint32_t cp, uint32_t out[UCD_MAX_DECOMP])
{
    if (cp >= UCD_SBASE && cp < UCD_SBASE + UCD_SCOUNT) {
        uint32_t s = cp - UCD_SBASE;
        out[0] = UCD_LBASE + s / UCD_NCOUNT;
        out[1] = UCD_VBASE + (s % UCD_NCOUNT) / UCD_TCOUNT;
        if (s % UCD_TCOUNT == 0)
            return 2;
        out[2] = UCD_TBASE + s % UCD_TCOUNT;
        return 3;
    }
    if (!(ucd_flags(cp) & UCD_DECOMP)) {
        out[0] = cp;
        return 1;
    }
    long i = ucd_find(ucd_decomps, UCD_COUNT(ucd_decomps), sizeof ucd_decomps[0], cp);
    if (i < 0) {
        out[0] = cp;
        return 1;
    }
    int n = 0;
    while (n < UCD_MAX_DECOMP && ucd_decomps[i].d[n]) {
        out[n] = ucd_decomps[i].d[n];
        n++;
    }
    return n;
}

/* Combining class, needed for canonical ordering of marks after NFD. */
int ucd_ccc(uint32_t cp)
{
    if (!(ucd_flags(cp) & UCD_CCC))
        return 0;
    long i = ucd_find(ucd_cccs, UCD_COUNT(ucd_cccs), sizeof ucd_cccs[0], cp);
    return i < 0 ? 0 : ucd_cccs[i].ccc;
}

/* Lowercase: one-to-one mappings first, then the few that expand. */
int ucd_lower(uint32_t cp, uint32_t out[UCD_MAX_LOWER])
{
    if (!(ucd_flags(cp) & UCD_LOWER)) {
        out[0] = cp;
        return 1;
    }
    long i = ucd_find(ucd_lowers, UCD_COUNT(ucd_lowers), sizeof ucd_lowers[0], cp);
    if (i >= 0) {
        out[0] = ucd_lowers[i].lower;
        return 1;
    }
    i = ucd_find(ucd_lowerns, UCD_COUNT(ucd_lowerns), sizeof ucd_lowerns[0], cp);
    if (i < 0) {
        out[0] = cp;
        return 1;
    }
    int n = 0;
    while (n < UCD_MAX_LOWER && ucd_lowerns[i].lower[n]) {
        out[n] = ucd_lowerns[i].lower[n];
        n++;
    }
    return n;
}
""")
    with open(os.path.join(outdir, "unicode_data.h"), "w") as f:
        f.write(header)
    with open(os.path.join(outdir, "unicode_data.c"), "w") as f:
        f.write("\n\n".join(x.rstrip("\n") for x in src) + "\n")
    print("flag blocks %d, decompositions %d, ccc %d, lowercase %d+%d"
          % (len(blocks), len(decomp), len(ccc), len(lower1), len(lowern)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--derive", action="store_true",
                    help="probe tokenizers and print the HF_COMPAT it implies")
    ap.add_argument("--check", action="store_true",
                    help="probe tokenizers and fail if HF_COMPAT is out of date")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "engine", "text"))
    args = ap.parse_args()
    if ud.unidata_version != HF_COMPAT_BASE:
        sys.exit("unicodedata is %s; HF_COMPAT is relative to %s (use Python 3.11, or "
                 "run --derive and update HF_COMPAT_BASE)" % (ud.unidata_version, HF_COMPAT_BASE))
    if args.derive or args.check:
        res = probe_hf()
        if args.derive:
            print(format_compat(res))
            return
        want = {k: (v if k == "lower" else [tuple(r) for r in v]) for k, v in HF_COMPAT.items()}
        if res != want:
            print(format_compat(res))
            sys.exit("HF_COMPAT does not match the installed tokenizers (above is what it measures)")
        print("HF_COMPAT matches the installed tokenizers on every code point")
        return
    generate(args.out)


if __name__ == "__main__":
    main()
