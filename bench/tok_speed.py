"""tok_speed.py: what the tokenizer speed scripts (bench/unigram_speed.py,
bench/bpe_speed.py) share: our tokenizer against Hugging Face `tokenizers`
(Rust, one thread) on the same texts in the same run. It builds the
script's timing program (bench/<kind>_bench.c on bench/tok_bench.h) with the
tokenizer's sources (cc, the build's flags), times ours (one text at a time,
best of --rounds) and tokenizers' (encode in a Python loop and encode_batch,
RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false, best of --rounds
each), compares the ids, and writes the figures; each script gives its
sources, its tool and the words of its report."""
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


def build(tmp, kind, sources):
    exe = os.path.join(tmp, kind + "_bench")
    cmd = [os.environ.get("CC", "cc")] + CFLAGS + sources + ["-lcjson", "-lpthread", "-o", exe]
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


def run(d, fname, tmp, rounds, kind, sources):
    exe = build(tmp, kind, sources)
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


def report(r, cmd, kind, title, texts, note):
    """The Markdown of figures r: title (its first line), texts (the
    paragraph on the texts) and note (the last) are the script's words."""
    return "\n".join([
        "# %s against Hugging Face tokenizers, one thread (%s)"
        % (title, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")),
        "",
        "CPU: %s, %d logical CPUs (one used). Command: `%s`." % (r["cpu"], os.cpu_count(), cmd),
        "",
        texts,
        "",
        "| tokenizer | tokens/s |",
        "|---|---|",
        "| ours, %s_encode one text at a time | %.0f |" % (kind, r["ours_tps"]),
        "| tokenizers %s, encode in a Python loop | %.0f |" % (r["tokenizers"], r["hf_loop_tps"]),
        "| tokenizers %s, encode_batch, RAYON_NUM_THREADS=1 | %.0f |"
        % (r["tokenizers"], r["hf_batch_tps"]),
        "",
        "**Ratio: %.1fx** the faster tokenizers figure. Ids equal on %d of %d texts."
        % (r["ratio"], r["equal"], r["texts"]),
        "",
        note,
        ""])


def main(kind, description, sources, words, file_option=False):
    """The script's command line: kind ("unigram": bench/unigram_bench.c,
    tools/make-unigram-tokenizer.py), sources to build with, words(r) the
    (title, texts, note) of its report; file_option adds --file."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--dir", help="a folder tools/make-%s-tokenizer.py made" % kind)
    if file_option:
        ap.add_argument("--file", default="tokenizer.json", help="the tokenizer in it")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", help="also write the figures as Markdown here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mt-%s-bench-" % kind) as tmp:
        d = a.dir
        if not d:
            d = os.path.join(tmp, "tok")
            subprocess.run([sys.executable,
                            os.path.join(ROOT, "tools/make-%s-tokenizer.py" % kind), d],
                           check=True)
        r = run(d, getattr(a, "file", "tokenizer.json"), tmp, a.rounds, kind, sources)
    print("CPU: %s" % r["cpu"])
    print("ours %.0f tokens/s; tokenizers loop %.0f, batch %.0f; ratio %.2fx; ids equal %d/%d"
          % (r["ours_tps"], r["hf_loop_tps"], r["hf_batch_tps"], r["ratio"], r["equal"],
             r["texts"]))
    if a.out:
        cmd = " ".join([".venv/bin/python bench/%s_speed.py" % kind] + sys.argv[1:])
        with open(a.out, "w") as f:
            f.write(report(r, cmd, kind, *words(r)))
    sys.exit(0 if r["equal"] == r["texts"] else 1)
