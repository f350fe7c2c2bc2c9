#!/usr/bin/env python3
"""qwen3_peers.py: `make bench-qwen3`: Mantissa serving a decoder embedder at
Qwen3-Embedding-0.6B's shapes against llama.cpp's llama-server on the same
weights and cores (issue 38's peer check), driven by the same load generator
(bench/loadgen.c) over POST /v1/embeddings.

No Qwen3 checkpoint can be downloaded here: the folder is the one
bench/qwen3_load_rss.py makes (random BF16 weights at the real shapes, 28
layers, sharded; a byte-level BPE tokenizer trained with Qwen2's
pre-tokenizer by tools/make-bpe-tokenizer.py), kept in build/peers/qwen3-0.6b.
llama-server gets it through llama.cpp's own convert_hf_to_gguf.py (F16 and
Q8_0). The converter identifies a BPE pre-tokenizer by hashing its output on
a test string and refuses an unknown one; ours is Qwen2's split regex, so the
converter runs with that lookup answering "qwen2" (a wrapper here, the
converter itself unchanged).

Servers: Mantissa fp32, int8 and bf16; llama-server F16 and Q8_0 (last-token
pooling, `--pooling last`). Before timing, each server's vectors for 32
sentences are compared with Mantissa FP32's (mean cosine). Points: one STS-B
sentence per request at concurrency 1 and 16, and one passage of about 500
tokens (consecutive STS-B sentences) per request at concurrency 1.
Targets (issue 38): at c=1 Mantissa int8 at least 2.5x its own fp32 and 1.2x
llama-server Q8_0; at c=16 at least 2x Q8_0; passages at least 1.3x Q8_0.

  bench/qwen3_peers.py [--seconds 20] [--only NAME,...] [--out FILE] [--json FILE]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_bench as pb  # noqa: E402

ROOT = pb.ROOT
FOLDER = os.path.join(pb.PEERS, "qwen3-0.6b")
TIMEOUT = ["--timeout-s", "600"]  # a c=16 point of passages waits long
VPY = os.path.join(ROOT, ".venv", "bin", "python")
PASSAGE_WORDS = 175  # about 500 tokens of the generated tokenizer
CONVERT = """
import sys
sys.path.insert(0, %(src)r)
sys.argv = ["convert_hf_to_gguf.py"] + %(argv)r
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
import convert_hf_to_gguf
convert_hf_to_gguf.main()
"""


def prepare():
    """The folder and its GGUF files (made once): {type: path}."""
    if not os.path.exists(os.path.join(FOLDER, "model.safetensors.index.json")):
        print("qwen3_peers: making the 0.6B-shaped folder", file=sys.stderr, flush=True)
        subprocess.run([VPY, "-c", "import sys; sys.path.insert(0, 'bench'); "
                        "import qwen3_load_rss as q; q.make_folder(%r, 28, 1)" % FOLDER],
                       check=True, cwd=ROOT)
    ggufs = {}
    for t in ("f16", "q8_0"):
        out = os.path.join(pb.PEERS, "qwen3-0.6b-%s.gguf" % t)
        if not os.path.exists(out):
            print("qwen3_peers: converting to GGUF %s" % t, file=sys.stderr, flush=True)
            if not pb.convert_gguf(FOLDER, t, out, CONVERT):
                print("qwen3_peers: the converter refused the folder (%s.log)" % out,
                      file=sys.stderr)
                continue
        ggufs[t] = out
    return ggufs


def post(port, body, timeout=600):
    return pb.post(port, body, timeout)


def ready(port):
    post(port, {"model": "q", "input": ["ready?"]}, timeout=10)


def embed(port, texts):
    out = []
    for t in texts:
        d = post(port, {"model": "q", "input": [t]})
        out.append(d["data"][0]["embedding"])
    v = np.array(out, dtype=np.float64)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def mantissa(precision, tmp):
    def start(port, log):
        cfg = {"server": {"listen": "127.0.0.1:%d" % port, "log_level": "warn",
                          "max_inputs": 64},
               "models": [{"name": "q", "path": FOLDER, "device": "cpu",
                           "batching": {"max_batch_size": 64, "max_batch_tokens": 16384},
                           "variants": [{"name": precision, "precision": precision}]}]}
        path = os.path.join(tmp, "q-%s.json" % precision)
        with open(path, "w") as f:
            json.dump(cfg, f)
        return pb.Server("mantissa", [pb.MANTISSA, "serve", "--config", path], port, log=log,
                         ready=ready)
    return start


def llama(gguf, threads, slots):
    def start(port, log):
        argv = [pb.llama_bin(), "-m", gguf, "--embeddings", "--pooling", "last", "-t",
                str(threads), "-np", str(slots), "-c", str(2048 * slots), "-b", "2048", "-ub",
                "2048", "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
        return pb.Server("llama-server", argv, port, log=log, ready=ready)
    return start


def settings(ggufs, tmp):
    s = [("Mantissa %s" % p, [("-", mantissa(p, tmp))]) for p in ("fp32", "int8", "bf16")]
    for t, name in (("f16", "llama-server F16"), ("q8_0", "llama-server Q8_0")):
        if t in ggufs:
            s.append((name, [("-t 2 -np %d" % n, llama(ggufs[t], 2, n)) for n in (1, 4)]))
    return s


def run_setting(name, cands, ref, check, files, tmp, secs, sweep_secs):
    label, start, swept = pb.sweep(cands, files["sent"], tmp, sweep_secs, extra=TIMEOUT)
    port = pb.free_port()
    srv = start(port, os.path.join(tmp, name.replace(" ", "_") + ".log"))
    res = {"name": name, "flags": label, "sweep": swept, "start_s": srv.start_s}
    try:
        if ref is not None:
            cos = (embed(port, check) * ref).sum(1)
            res["check"] = {"mean_cos": float(cos.mean()), "min_cos": float(cos.min())}
        res["points"] = {k: pb.point(srv, files[f], secs, conc=c, extra=TIMEOUT)
                         for k, f, c in (("sentences c=1", "sent", 1),
                                         ("sentences c=16", "sent", 16),
                                         ("passages c=1", "pass", 1))}
    finally:
        srv.stop()
    return res


def report(res, args, t0, ptoks):
    f = lambda v: "-" if v is None else "%.2fx" % v  # noqa: E731
    L = ["# Qwen3-Embedding-0.6B shapes: Mantissa against llama-server on this machine (%s)"
         % datetime.date.today().isoformat(), ""]
    L += ["Machine: %s, %d cores, shared with other work (the 1-minute load average is given per "
          "point). Every server on loopback on the same cores, driven by bench/loadgen.c (closed "
          "loop, %d s per point), POST /v1/embeddings with one input per request. Weights: random "
          "BF16 at Qwen3-Embedding-0.6B's shapes (bench/qwen3_load_rss.py's folder); no trained "
          "weights, so the drift column says nothing about a trained model's. Passages: "
          "consecutive STS-B test sentences joined to about %d words (%.0f tokens on average by "
          "Mantissa's tokenizer). Made by `make bench-qwen3` (bench/qwen3_peers.py) in %.0f min."
          % (pb.cpu_model(), os.cpu_count(), args.seconds, PASSAGE_WORDS, ptoks,
             (time.time() - t0) / 60), ""]
    L += ["Mantissa: `mantissa cpu` isa %s; %s. llama-server from llama.cpp as vendored in "
          "llama-cpp-python 0.3.36 (bench/peers/setup.sh), built for this CPU's AVX-512 (VNNI, "
          "BF16); its GGUF from its own convert_hf_to_gguf.py." % pb.mantissa_isa_commit(), ""]
    q8, m8, m32 = "llama-server Q8_0", "Mantissa int8", "Mantissa fp32"
    targets = [("sentences c=1: int8 >= 2.5x own fp32", m8, m32, "sentences c=1"),
               ("sentences c=1: int8 >= 1.2x llama-server Q8_0", m8, q8, "sentences c=1"),
               ("sentences c=16: int8 >= 2x llama-server Q8_0", m8, q8, "sentences c=16"),
               ("passages c=1: int8 >= 1.3x llama-server Q8_0", m8, q8, "passages c=1"),
               ("sentences c=1: bf16 against llama-server F16", "Mantissa bf16",
                "llama-server F16", "sentences c=1")]
    L += ["## Targets (issue 38)", "", "| target | measured |", "|---|---|"]
    L += ["| %s | %s |" % (t, f(pb.rps_ratio(res, a, b, pt))) for t, a, b, pt in targets] + [""]
    L += ["## Throughput and latency", "", "| setting | flags | point | req/s | p50 ms | p99 ms | "
          "errors | RSS / peak MiB | load |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res.values():
        for k, g in r.get("points", {}).items():
            L.append("| %s | %s | %s | %.2f | %.0f | %.0f | %d | %.0f / %.0f | %.1f |" % (
                r["name"], r["flags"], k, g["rps"], g["p50_ms"], g["p99_ms"], g["errors"],
                g["rss_mib"], g["peak_mib"], g["load"]))
        if "points" not in r:
            L.append("| %s | %s | not timed | | | | | | |" % (r["name"], r["flags"]))
    L += ["", "## Vectors against Mantissa FP32 (32 STS-B sentences)", "",
          "| setting | mean cosine | least cosine |", "|---|---|---|"]
    for r in res.values():
        c = r.get("check")
        if c:
            L.append("| %s | %.6f | %.6f |" % (r["name"], c["mean_cos"], c["min_cos"]))
    sw = pb.sweep_lines(res.values(), "%.2f req/s")
    if sw:
        L += ["", "Peer flag sweeps (sentences, concurrency 16, %d s each):"
              % args.sweep_seconds] + sw
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--sweep-seconds", type=int, default=8)
    ap.add_argument("--only", default="")
    ap.add_argument("--out")
    ap.add_argument("--json")
    args = ap.parse_args()
    t0 = time.time()
    ggufs = prepare()
    sents, _, _ = pb.stsb()
    passages = pb.passages(sents, PASSAGE_WORDS)
    check = sents[:32]
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for key, texts in (("sent", sents), ("pass", passages)):
            files[key] = os.path.join(tmp, key + ".txt")
            with open(files[key], "w") as f:
                for t in texts:
                    f.write(json.dumps({"model": "q", "input": t}) + "\n")
        ref, ptoks = None, float("nan")
        for name, cands in settings(ggufs, tmp):
            if args.only and not any(o.strip().lower() in name.lower()
                                     for o in args.only.split(",")):
                continue
            print("qwen3_peers: %s ..." % name, file=sys.stderr, flush=True)
            try:
                if name == "Mantissa fp32":
                    port = pb.free_port()
                    srv = mantissa("fp32", tmp)(port, None)
                    try:
                        ref = embed(port, check)
                        ptoks = float(np.mean([len(post_tok(port, p)) for p in passages[:20]]))
                    finally:
                        srv.stop()
                res[name] = run_setting(name, cands, ref, check, files, tmp, args.seconds,
                                        args.sweep_seconds)
            except Exception as e:  # a server that fails is reported, not fatal
                print("qwen3_peers: %s failed: %s" % (name, e), file=sys.stderr)
                res[name] = {"name": name, "flags": "failed: %s" % e, "sweep": []}
    text = report(res, args, t0, ptoks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)


def post_tok(port, text):
    """Mantissa's tokens of text (TEI /tokenize)."""
    import urllib.request
    req = urllib.request.Request("http://127.0.0.1:%d/tokenize" % port,
                                 data=json.dumps({"inputs": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())[0]


if __name__ == "__main__":
    main()
