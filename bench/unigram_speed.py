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
the first round: its figures are those of a warm cache.

    .venv/bin/python bench/unigram_speed.py [--dir D] [--file tokenizer.json]
        [--rounds 5] [--out FILE.md]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from tokenizers import Tokenizer  # noqa: E402 (after the thread settings)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SOURCES = ["bench/unigram_bench.c", "engine/text/unigram.c", "engine/text/unigram_load.c",
           "engine/text/unigram_norm.c", "engine/text/unigram_decode.c", "engine/text/grapheme.c",
           "engine/text/grapheme_data.c", "engine/text/tok_special.c",
           "engine/text/unicode_data.c", "engine/text/utf8.c", "engine/jsonfile.c",
           "engine/json_check.c", "engine/status.c"]
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-march=x86-64-v3", "-Wall", "-Wextra", "-Werror",
          "-Wshadow", "-I.", "-I/usr/include/cjson"]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def build(tmp):
    exe = os.path.join(tmp, "unigram_bench")
    cmd = [os.environ.get("CC", "cc")] + CFLAGS + SOURCES + ["-lcjson", "-lpthread", "-o", exe]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return exe


def time_hf(tok, texts, rounds):
    """Best seconds of a Python loop of encode, and of encode_batch; the ids."""
    ids = [e.ids for e in tok.encode_batch(texts)]
    loop = batch = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for t in texts:
            tok.encode(t)
        loop = min(loop, time.perf_counter() - t0)
        t0 = time.perf_counter()
        tok.encode_batch(texts)
        batch = min(batch, time.perf_counter() - t0)
    return loop, batch, ids


def run(d, fname, tmp, rounds):
    exe = build(tmp)
    texts_path = os.path.join(d, "bench.json")
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    ids_path = os.path.join(tmp, "ids.txt")
    out = subprocess.run([exe, os.path.join(d, fname), texts_path, str(rounds),
                          ids_path], check=True, capture_output=True, text=True)
    ours = json.loads(out.stdout)
    with open(ids_path) as f:
        our_ids = [[int(x) for x in line.split()] for line in f]
    tok = Tokenizer.from_file(os.path.join(d, fname))
    loop, batch, hf_ids = time_hf(tok, texts, rounds)
    equal = sum(a == b for a, b in zip(our_ids, hf_ids))
    tokens = ours["tokens"]
    return {
        "cpu": cpu_model(), "texts": len(texts), "bytes": ours["bytes"], "tokens": tokens,
        "equal": equal, "ours_tps": ours["tokens_per_s"], "hf_loop_tps": tokens / loop,
        "hf_batch_tps": tokens / batch,
        "ratio": ours["tokens_per_s"] / max(tokens / loop, tokens / batch),
        "tokenizers": __import__("tokenizers").__version__,
        "vocab": tok.get_vocab_size(), "file": fname,
    }


def report(r, cmd):
    return "\n".join([
        "# SentencePiece Unigram tokenizer against Hugging Face tokenizers, one thread (%s)"
        % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "",
        "CPU: %s, %d logical CPUs (one used). Command: `%s`." % (r["cpu"], os.cpu_count(), cmd),
        "",
        "Texts: %d (%d bytes, %d tokens with <s> and </s>) from "
        "tools/make-unigram-tokenizer.py's generator (15 scripts: Latin with accents, NFD "
        "in part, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Bengali, Tamil, Thai, CJK, "
        "Hangul, kana, Georgian, Armenian, Ethiopic; emoji with ZWJ and skin tones, "
        "full-width forms, numbers, whitespace runs), on its %s (XLM-R's shape: "
        "Precompiled nmt_nfkc charsmap + Replace, Metaspace, Unigram of %d ids, "
        "RobertaProcessing)." % (r["texts"], r["bytes"], r["tokens"], r["file"], r["vocab"]),
        "",
        "| tokenizer | tokens/s |",
        "|---|---|",
        "| ours, unigram_encode one text at a time | %.0f |" % r["ours_tps"],
        "| tokenizers %s, encode in a Python loop | %.0f |" % (r["tokenizers"], r["hf_loop_tps"]),
        "| tokenizers %s, encode_batch, RAYON_NUM_THREADS=1 | %.0f |"
        % (r["tokenizers"], r["hf_batch_tps"]),
        "",
        "**Ratio: %.1fx** the faster tokenizers figure. Ids equal on %d of %d texts."
        % (r["ratio"], r["equal"], r["texts"]),
        "",
        "tokenizers' Unigram caches the words it has seen (its default), so its figures "
        "are those of a warm cache (the best of the rounds); ours keeps no cache. The "
        "vocabulary is the tool's (%d pieces), not XLM-R's 250k: with XLM-R's the trie "
        "is ~40x larger (more cache misses on both sides); not measured here, no XLM-R "
        "files on this machine." % r["vocab"],
        ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="a folder tools/make-unigram-tokenizer.py made")
    ap.add_argument("--file", default="tokenizer.json", help="the tokenizer in it")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", help="also write the figures as Markdown here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mt-unigram-bench-") as tmp:
        d = a.dir
        if not d:
            d = os.path.join(tmp, "tok")
            subprocess.run([sys.executable, os.path.join(ROOT, "tools/make-unigram-tokenizer.py"),
                            d], check=True)
        r = run(d, a.file, tmp, a.rounds)
    print("CPU: %s" % r["cpu"])
    print("ours %.0f tokens/s; tokenizers loop %.0f, batch %.0f; ratio %.2fx; ids equal %d/%d"
          % (r["ours_tps"], r["hf_loop_tps"], r["hf_batch_tps"], r["ratio"], r["equal"],
             r["texts"]))
    if a.out:
        with open(a.out, "w") as f:
            f.write(report(r, " ".join([".venv/bin/python bench/unigram_speed.py"] +
                                       sys.argv[1:])))
    sys.exit(0 if r["equal"] == r["texts"] else 1)


if __name__ == "__main__":
    main()
