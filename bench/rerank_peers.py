#!/usr/bin/env python3
"""rerank_peers.py: `make bench-rerank`: Mantissa's reranking against the peer
servers on this machine, side by side, on the same cores with the same load
generator (bench/loadgen.c): infinity-emb (torch FP32, sentence-transformers'
CrossEncoder) and llama.cpp's llama-server (`--reranking`, F32 and Q8_0 GGUF
made by its own convert_hf_to_gguf.py). Issue 39's check.

Each request is one query and 20 documents of about 100 tokens (consecutive
STS-B test sentences joined to about 75 words for MiniLM's WordPiece, 25 for
the generated Unigram vocabulary, which cuts English finer), Cohere/Jina's POST /v1/rerank
body, which all three servers take; 64 such bodies, sent in a seeded shuffled
order. Closed loop at concurrency 1 and 16.

Two rerankers, generated here (no reranker can be downloaded):
  - "MiniLM CE": all-MiniLM-L6-v2's encoder and tokenizer with a seeded
    one-label head (tools/make-cross-encoder.py): the shape of
    cross-encoder/ms-marco-MiniLM-L6-v2, BertForSequenceClassification;
  - "XLM-R CE": tools/make-xlmr.py --shape mminilm, XLM-RoBERTa at the shape
    of cross-encoder/mmarco-mMiniLMv2-L12-H384-v1 (12 layers, hidden 384) on a
    trained SentencePiece Unigram tokenizer (tools/make-unigram-tokenizer.py).

Before timing, each server's scores for 8 bodies (160 pairs) are compared
with Mantissa FP32's raw logits (TEI /rerank, raw_scores): a peer's scores are
read as logits, or as sigmoids turned back into logits, whichever matches;
the report gives the largest difference and how many queries rank their
top document otherwise. A server whose scores are not the same function
(largest difference above 1e-3 for full precision, above 0.5 for 8-bit) is
still timed (the work is the same), and the report says so.

  bench/rerank_peers.py [--seconds 20] [--only NAME,...] [--models minilm,xlmr] [--out FILE]
"""
import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_bench as pb  # noqa: E402

ROOT = pb.ROOT
WORK = os.path.join(pb.PEERS, "rerank")
VPY = os.path.join(ROOT, ".venv", "bin", "python")
NDOCS, NBODIES, NCHECK = 20, 64, 8
DOC_WORDS = {"MiniLM CE": 75, "XLM-R CE": 25}  # about 100 tokens each
LOADGEN_FLAGS = ["--path", "/v1/rerank", "--expect", "relevance_score", "--timeout-s", "600"]


def run(argv, log):
    with open(log, "w") as f:
        r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if r.returncode:
        sys.exit("rerank_peers: %s failed (exit %d); see %s" % (" ".join(argv[:3]),
                                                                r.returncode, log))


def gguf_source(folder):
    """The folder llama.cpp's converter reads: folder itself, or for XLM-R a
    copy whose tokenizer.json has its Precompiled normalizer at the top:
    the converter reads normalizer.precompiled_charsmap and refuses the
    Sequence [Precompiled, Replace("  +" -> " ")] that bge-m3's and our
    generated tokenizer.json have. The Replace folds runs of spaces, which
    our documents have none of, so the peer tokenizes them alike."""
    with open(os.path.join(folder, "tokenizer.json")) as f:
        tj = json.load(f)
    norm = tj.get("normalizer") or {}
    if norm.get("type") != "Sequence":
        return folder
    pre = [n for n in norm["normalizers"] if n.get("type") == "Precompiled"]
    if not pre:
        return folder
    src = folder.rstrip("/") + "-gguf-src"
    os.makedirs(src, exist_ok=True)
    for fn in os.listdir(folder):
        if fn != "tokenizer.json" and not os.path.exists(os.path.join(src, fn)):
            os.symlink(os.path.join(folder, fn), os.path.join(src, fn))
    tj["normalizer"] = pre[0]
    with open(os.path.join(src, "tokenizer.json"), "w") as f:
        json.dump(tj, f)
    return src


def prepare():
    """The two reranker folders and their GGUF conversions under WORK
    (made once): {name: (folder, {gguf type: path})}."""
    os.makedirs(WORK, exist_ok=True)
    ce = os.path.join(WORK, "minilm-ce")
    if not os.path.exists(os.path.join(ce, "model.safetensors")):
        print("rerank_peers: making the MiniLM cross-encoder", file=sys.stderr, flush=True)
        run([VPY, "tools/make-cross-encoder.py", ce], os.path.join(WORK, "make-ce.log"))
    xr = os.path.join(WORK, "xlmr")
    if not os.path.exists(os.path.join(xr, "rerank", "model.safetensors")):
        print("rerank_peers: making the XLM-R reranker", file=sys.stderr, flush=True)
        run([VPY, "tools/make-unigram-tokenizer.py", os.path.join(WORK, "tok")],
            os.path.join(WORK, "make-tok.log"))
        run([VPY, "tools/make-xlmr.py", os.path.join(WORK, "tok", "tokenizer.json"), xr,
             "--shape", "mminilm"], os.path.join(WORK, "make-xlmr.log"))
    models = {"MiniLM CE": (ce, {}), "XLM-R CE": (os.path.join(xr, "rerank"), {})}
    for name, (folder, ggufs) in models.items():
        src = gguf_source(folder)
        for t in ("f32", "q8_0"):
            out = folder.rstrip("/") + "-%s.gguf" % t
            if not os.path.exists(out):
                print("rerank_peers: converting %s to GGUF %s" % (name, t), file=sys.stderr,
                      flush=True)
                if not pb.convert_gguf(src, t, out):
                    print("rerank_peers: the converter refused %s (%s.log): llama-server left "
                          "out" % (name, out), file=sys.stderr)
                    continue
            ggufs[t] = out
    return models


def texts(words):
    """(queries, documents): STS-B test sentences, and consecutive ones
    joined to about `words` words."""
    sents, _, _ = pb.stsb()
    return sents[::7][:200], pb.passages(sents, words)


def bodies(queries, docs, n, seed=5):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        i = rng.randrange(len(docs) - NDOCS)
        out.append({"model": "rr", "query": rng.choice(queries), "documents": docs[i:i + NDOCS],
                    "return_documents": False})
    return out


def post(port, path, body, timeout=600):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def ready(port):
    post(port, "/v1/rerank", {"model": "rr", "query": "ready?", "documents": ["yes"]}, timeout=10)


def scores(port, body):
    """The body's documents' scores in document order (/v1/rerank)."""
    d = post(port, "/v1/rerank", body)
    s = np.full(len(body["documents"]), np.nan)
    for r in d["results"]:
        s[r["index"]] = r["relevance_score"]
    return s


def raw_logits(port, body):
    """Mantissa's raw scores (TEI /rerank with raw_scores) in document order."""
    d = post(port, "/rerank", {"query": body["query"], "texts": body["documents"],
                               "raw_scores": True})
    s = np.full(len(body["documents"]), np.nan)
    for r in d:
        s[r["index"]] = r["score"]
    return s


def compare(got, ref):
    """(largest difference from the reference logits, "logit" or "sigmoid",
    queries whose top document differs)."""
    got, ref = np.array(got), np.array(ref)
    best = (np.abs(got - ref).max(), "logit")
    if np.all((got > 0) & (got < 1)):
        lg = np.log(got) - np.log1p(-got)
        d = np.abs(lg - ref).max()
        if d < best[0]:
            best = (d, "sigmoid")
    top = int(sum(np.argmax(g) != np.argmax(r) for g, r in zip(got, ref)))
    return float(best[0]), best[1], top


def mantissa(folder, precision, tmp):
    def start(port, log):
        cfg = {"server": {"listen": "127.0.0.1:%d" % port, "log_level": "warn",
                          "max_inputs": 64},
               "models": [{"name": "rr", "path": folder,
                           "batching": {"max_batch_size": 64, "max_batch_tokens": 16384},
                           "variants": [{"name": precision, "precision": precision}]}]}
        path = os.path.join(tmp, "rr-%s-%s.json" % (os.path.basename(folder), precision))
        with open(path, "w") as f:
            json.dump(cfg, f)
        return pb.Server("mantissa", [pb.MANTISSA, "serve", "--config", path], port, log=log,
                         ready=ready)
    return start


def llama(gguf, threads, slots):
    def start(port, log):
        argv = [pb.llama_bin(), "-m", gguf, "--reranking", "-t", str(threads), "-np", str(slots),
                "-c", str(512 * slots), "-b", "512", "-ub", "512", "--host", "127.0.0.1",
                "--port", str(port), "--no-webui"]
        return pb.Server("llama-server", argv, port, log=log, ready=ready)
    return start


def infinity(folder, batch):
    def start(port, log):
        env = {"HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
        argv = [pb.INFINITY, "v2", "--model-id", folder, "--served-model-name", "rr",
                "--url-prefix", "/v1", "--host", "127.0.0.1", "--port", str(port),
                "--engine", "torch", "--device", "cpu", "--batch-size", str(batch)]
        return pb.Server("infinity", argv, port, env=env, log=log, ready=ready)
    return start


def settings(folder, ggufs, tmp):
    """(name, full precision?, [(flags, starter), ...])."""
    s = [("Mantissa %s" % p, p == "fp32", [("-", mantissa(folder, p, tmp))])
         for p in ("fp32", "int8", "int8g")]
    s.append(("infinity torch FP32", True,
              [("--batch-size %d" % b, infinity(folder, b)) for b in (32, 64)]))
    for t, name in (("f32", "llama-server F32"), ("q8_0", "llama-server Q8_0")):
        if t in ggufs:
            s.append((name, t == "f32", [("-t %d -np %d" % (th, np_), llama(ggufs[t], th, np_))
                                         for th in (2,) for np_ in (1, 4)]))
    return s


def run_setting(name, full, cands, check, ref, bodies_file, tmp, secs, sweep_secs):
    label, start, swept = pb.sweep(cands, bodies_file, tmp, sweep_secs, extra=LOADGEN_FLAGS)
    port = pb.free_port()
    srv = start(port, os.path.join(tmp, name.replace(" ", "_") + ".log"))
    res = {"name": name, "flags": label, "sweep": swept, "start_s": srv.start_s}
    try:
        got = [scores(port, b) for b in check]
        d, kind, top = compare(got, ref)
        res["check"] = {"max_diff": d, "as": kind, "top_differs": top, "queries": len(check),
                        "same": d <= (1e-3 if full else 0.5)}
        res["points"] = {"c=%d" % c: pb.point(srv, bodies_file, secs, conc=c, extra=LOADGEN_FLAGS)
                         for c in (1, 16)}
    finally:
        srv.stop()
    return res


def tokens_per_doc(folder, docs, tmp):
    """Mantissa's mean token count of a (query, document) pair's document."""
    port = pb.free_port()
    srv = mantissa(folder, "fp32", tmp)(port, None)
    try:
        n = [len(post(port, "/tokenize", {"inputs": d})[0]) for d in docs[:40]]
    finally:
        srv.stop()
    return float(np.mean(n))


def report(all_res, args, t0):
    L = ["# Reranking: Mantissa against infinity-emb and llama-server on this machine (%s)"
         % datetime.date.today().isoformat(), ""]
    L += ["Machine: %s, %d cores, shared with other work (the 1-minute load average is given per "
          "point). Every server on loopback on the same cores, driven by bench/loadgen.c "
          "(closed loop, %d s per point). Each request: POST /v1/rerank, one query and %d "
          "documents; 64 bodies sent in a seeded shuffled order. Made by `make bench-rerank` "
          "(bench/rerank_peers.py) in %.0f min." % (pb.cpu_model(), os.cpu_count(), args.seconds,
                                                    NDOCS, (time.time() - t0) / 60), ""]
    L += ["Mantissa: `mantissa cpu` isa %s; %s. infinity-emb 0.0.78 (torch CPU, FP32); "
          "llama-server from llama.cpp as vendored in llama-cpp-python 0.3.36 (bench/peers/"
          "setup.sh), built for this CPU's AVX-512." % pb.mantissa_isa_commit(), ""]
    L += ["## Targets (issue 39)", "", "| model | point | Mantissa fp32 / infinity FP32 "
          "(target 2x) | Mantissa int8 / llama-server Q8_0 (target 1.5x) | int8g / Q8_0 |",
          "|---|---|---|---|---|"]
    for model, (res, tok) in all_res.items():
        for pt in ("c=1", "c=16"):
            f = lambda v: "-" if v is None else "%.2fx" % v  # noqa: E731
            L.append("| %s | %s | %s | %s | %s |" % (
                model, pt, f(pb.rps_ratio(res, "Mantissa fp32", "infinity torch FP32", pt)),
                f(pb.rps_ratio(res, "Mantissa int8", "llama-server Q8_0", pt)),
                f(pb.rps_ratio(res, "Mantissa int8g", "llama-server Q8_0", pt))))
    for model, (res, tok) in all_res.items():
        L += ["", "## %s (documents of %.0f tokens on average, by Mantissa's tokenizer)"
              % (model, tok), "", "| setting | flags | point | req/s | pairs/s | p50 ms | p99 ms | "
              "errors | RSS / peak MiB | load |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res.values():
            for k, g in r.get("points", {}).items():
                L.append("| %s | %s | %s | %.2f | %.1f | %.0f | %.0f | %d | %.0f / %.0f | %.1f |"
                         % (r["name"], r["flags"], k, g["rps"], g["rps"] * NDOCS, g["p50_ms"],
                            g["p99_ms"], g["errors"], g["rss_mib"], g["peak_mib"], g["load"]))
        L += ["", "Scores against Mantissa FP32's logits (%d queries x %d documents):" % (
            NCHECK, NDOCS), "", "| setting | read as | largest difference | queries whose top "
              "document differs | same function? |", "|---|---|---|---|---|"]
        for r in res.values():
            c = r.get("check")
            if c:
                L.append("| %s | %s | %.3g | %d of %d | %s |" % (
                    r["name"], c["as"], c["max_diff"], c["top_differs"], c["queries"],
                    "yes" if c["same"] else "**no**"))
        sw = pb.sweep_lines(res.values(), "%.2f req/s")
        if sw:
            L += ["", "Peer flag sweeps (concurrency 16, %d s each): " % args.sweep_seconds] + sw
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--sweep-seconds", type=int, default=8)
    ap.add_argument("--only", default="")
    ap.add_argument("--models", default="minilm,xlmr")
    ap.add_argument("--out")
    ap.add_argument("--json")
    args = ap.parse_args()
    t0 = time.time()
    models = prepare()
    all_res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model, (folder, ggufs) in models.items():
            key = "minilm" if model.startswith("MiniLM") else "xlmr"
            if key not in args.models.split(","):
                continue
            queries, docs = texts(DOC_WORDS[model])
            bl = bodies(queries, docs, NBODIES)
            bf = os.path.join(tmp, "bodies-%s.txt" % key)
            with open(bf, "w") as f:
                for b in bl:
                    f.write(json.dumps(b) + "\n")
            check = bl[:NCHECK]
            port = pb.free_port()
            srv = mantissa(folder, "fp32", tmp)(port, None)
            try:
                ref = [raw_logits(port, b) for b in check]
            finally:
                srv.stop()
            tok = tokens_per_doc(folder, docs, tmp)
            res = {}
            for name, full, cands in settings(folder, ggufs, tmp):
                if args.only and not any(o.strip().lower() in name.lower()
                                         for o in args.only.split(",")):
                    continue
                print("rerank_peers: %s, %s ..." % (model, name), file=sys.stderr, flush=True)
                try:
                    res[name] = run_setting(name, full, cands, check, ref, bf, tmp, args.seconds,
                                            args.sweep_seconds)
                except Exception as e:  # a peer that fails is reported, not fatal
                    print("rerank_peers: %s failed: %s" % (name, e), file=sys.stderr)
                    res[name] = {"name": name, "flags": "failed: %s" % e, "sweep": []}
            all_res[model] = (res, tok)
    text = report(all_res, args, t0)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({m: {"settings": r, "doc_tokens": t} for m, (r, t) in all_res.items()}, f,
                      indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
