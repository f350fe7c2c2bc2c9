#!/usr/bin/env python3
"""bpe_speed.py: the byte-level BPE tokenizer (engine/text/bpe*.c) against
Hugging Face `tokenizers` (Rust, one thread) on the same texts in the same
run: tokens/s of each, the ratio, and whether every text's ids are equal.

It trains the Qwen2-shaped tokenizer and its texts with
tools/make-bpe-tokenizer.py (or takes --dir, a folder that tool made),
compiles bench/bpe_bench.c with the tokenizer's sources (cc, the build's
flags) and times:
  - ours: bpe_encode on each text in turn, one thread, best of --rounds;
  - tokenizers: Tokenizer.encode on each text in a Python loop, and
    encode_batch on all texts, with RAYON_NUM_THREADS=1 and
    TOKENIZERS_PARALLELISM=false, best of --rounds each.
The ratio is against the faster of the two tokenizers figures. (What this
and bench/unigram_speed.py share is in bench/tok_speed.py.)

    .venv/bin/python bench/bpe_speed.py [--dir D] [--rounds 5] [--out FILE.md]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_speed  # noqa: E402

SOURCES = ["bench/bpe_bench.c", "engine/text/bpe.c", "engine/text/bpe_load.c",
           "engine/text/bpe_pretok.c", "engine/text/bpe_unicode.c", "engine/text/tok_special.c",
           "engine/text/unicode_data.c", "engine/text/utf8.c", "engine/jsonfile.c",
           "engine/json_check.c", "engine/status.c"]


def words(r):
    """The report's title, paragraph on the texts, and closing note."""
    return (
        "Byte-level BPE tokenizer",
        "Texts: %d (%d bytes, %d tokens with the EOS) from tools/make-bpe-tokenizer.py's "
        "generator (English, NFC and NFD accents, CJK, emoji, code, digits, Arabic, Hindi, "
        "Thai, whitespace runs), on its Qwen2-shaped tokenizer (NFC, Qwen2's split regex, "
        "ByteLevel, BPE, TemplateProcessing appending <|endoftext|>)."
        % (r["texts"], r["bytes"], r["tokens"]),
        "The vocabulary is the tool's (%d ids), not Qwen's 151k: with Qwen's the merge and "
        "vocabulary tables are ~20x larger (more cache misses on both sides); not measured "
        "here, no Qwen files on this machine." % r["vocab"])


if __name__ == "__main__":
    tok_speed.main("bpe", __doc__.split("\n")[0], SOURCES, words)
