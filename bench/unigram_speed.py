#!/usr/bin/env python3
"""unigram_speed.py: the SentencePiece Unigram tokenizer (engine/text/
unigram*.c) against Hugging Face `tokenizers` (Rust, one thread) on the same
texts in the same run: tokens/s of each, the ratio, and whether every
text's ids are equal.

It trains the XLM-R-shaped tokenizers and their texts with
tools/make-unigram-tokenizer.py (or takes --dir, a folder that tool made),
compiles bench/unigram_bench.c with the tokenizer's sources (cc, the
build's flags) and times, on --file (tokenizer.json: XLM-R's shape):
  - ours: unigram_encode on each text in turn, one thread, best of --rounds;
  - tokenizers: Tokenizer.encode on each text in a Python loop, and
    encode_batch on all texts, with RAYON_NUM_THREADS=1 and
    TOKENIZERS_PARALLELISM=false, best of --rounds each.
The ratio is against the faster of the two tokenizers figures. tokenizers'
Unigram keeps a cache of the words it has seen (on by default), warm after
the first round: its figures are those of a warm cache. (What this and
bench/bpe_speed.py share is in bench/tok_speed.py.)

    .venv/bin/python bench/unigram_speed.py [--dir D] [--file tokenizer.json]
        [--rounds 5] [--out FILE.md]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_speed  # noqa: E402

SOURCES = ["bench/unigram_bench.c", "engine/text/unigram.c", "engine/text/unigram_load.c",
           "engine/text/unigram_norm.c", "engine/text/unigram_decode.c", "engine/text/grapheme.c",
           "engine/text/grapheme_data.c", "engine/text/tok_special.c",
           "engine/text/unicode_data.c", "engine/text/utf8.c", "engine/jsonfile.c",
           "engine/json_check.c", "engine/status.c"]


def words(r):
    """The report's title, paragraph on the texts, and closing note."""
    return (
        "SentencePiece Unigram tokenizer",
        "Texts: %d (%d bytes, %d tokens with <s> and </s>) from "
        "tools/make-unigram-tokenizer.py's generator (15 scripts: Latin with accents, NFD "
        "in part, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Bengali, Tamil, Thai, CJK, "
        "Hangul, kana, Georgian, Armenian, Ethiopic; emoji with ZWJ and skin tones, "
        "full-width forms, numbers, whitespace runs), on its %s (XLM-R's shape: "
        "Precompiled nmt_nfkc charsmap + Replace, Metaspace, Unigram of %d ids, "
        "RobertaProcessing)." % (r["texts"], r["bytes"], r["tokens"], r["file"], r["vocab"]),
        "tokenizers' Unigram caches the words it has seen (its default), so its figures "
        "are those of a warm cache (the best of the rounds); ours keeps no cache. The "
        "vocabulary is the tool's (%d pieces), not XLM-R's 250k: with XLM-R's the trie "
        "is ~40x larger (more cache misses on both sides); not measured here, no XLM-R "
        "files on this machine." % r["vocab"])


if __name__ == "__main__":
    tok_speed.main("unigram", __doc__.split("\n")[0], SOURCES, words, file_option=True)
