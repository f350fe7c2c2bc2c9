#!/usr/bin/env python3
"""serve_peers.py: `mantissa serve` on the GPU against sentence-transformers
FP16 on the same GPU (issue 24, item 5), one STS-B sentence per request,
driven by the same load generator (bench/loadgen.c) over loopback.

For each server: check its vectors against Mantissa's FP32 on the CPU (the
reference: the same weights, 64 sentences, mean cosine at least 0.99999 for
FP32 servers, 0.99 for 16-bit and 8-bit ones), measure its drift over every
STS-B test sentence (mean and least cosine, Spearman x100), then closed
loop at concurrency 1, 16 and 64 and open loop (Poisson) at 50% and 90% of
its own best closed-loop rate: requests/s, p50, p99, errors, RSS, CPU
seconds per 1,000 requests of its process tree. The measuring is
bench/peers_bench.py's (the CPU comparison of `make bench-peers`), reused.

The peer is bench/gpu/peer_st_server.py: sentence-transformers with the
model's own pipeline in FP16, behind a dynamically batching HTTP server.
Mantissa runs with its batching at delay 0 and at "auto" (the better at
concurrency 16 is timed; both in the sweep table).

  bench/gpu/serve_peers.py --bin build/gpu/mantissa --loadgen build/gpu/bench/loadgen \\
      --model models/all-MiniLM-L6-v2 --stsb ../shared/data/stsb/sts-test.csv \\
      [--device cuda] [--precisions fp16,int8] [--peer-dtype fp16] [--seconds 5] \\
      [--json FILE] [--md FILE]

--device cpu runs both servers on the CPU (a dry run of this script where
there is no GPU; its figures say nothing about the GPU).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import peers_bench as pb  # noqa: E402

PY_LD_PATH = os.environ.get("LD_LIBRARY_PATH", "")  # this Python's, before --lib-path


def peer(device, dtype, max_batch):
    def start(port, log):
        argv = [sys.executable, os.path.join(HERE, "peer_st_server.py"), "--model", pb.MODEL,
                "--port", str(port), "--device", device, "--dtype", dtype,
                "--max-batch", str(max_batch)]
        env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "LD_LIBRARY_PATH": PY_LD_PATH}  # not Mantissa's (--lib-path): torch has its own
        return pb.Server("sentence-transformers", argv, port, env=env, log=log)
    return start


def log_tail(tmp, name):
    """The last lines of the newest server log in tmp (a setting's own, or
    the sweep's), on one line."""
    logs = [os.path.join(tmp, f) for f in (name.replace(" ", "_") + ".log", "sweep.log")]
    logs = [f for f in logs if os.path.exists(f)]
    if not logs:
        return "none"
    with open(max(logs, key=os.path.getmtime), errors="replace") as f:
        return " / ".join(l.strip().replace("|", "/") for l in f.read().strip().splitlines()[-3:]) or "empty"


def device_name(device):
    if device == "cuda":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
            return out.splitlines()[0] if out else "cuda (nvidia-smi gave no name)"
        except (OSError, subprocess.SubprocessError):
            return "cuda (no nvidia-smi)"
    return "%s (%d CPUs)" % (pb.cpu_model(), os.cpu_count() or 0)


def versions():
    """sentence-transformers and torch versions of the peer's Python."""
    code = ("import sentence_transformers as s, torch as t; "
            "print(s.__version__, t.__version__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return r.stdout.strip() or "not importable: %s" % r.stderr.strip().splitlines()[-1:]


def table(results):
    """Markdown: per server, the closed- and open-loop points; then Mantissa
    against the peer at each concurrency."""
    out = ["| server | flags | mean cos to CPU FP32 | STS-B x100 | point | req/s | p50 ms | p99 ms "
           "| errors | RSS MiB | CPU s / 1k req |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        d = r.get("drift") or {}
        if "points" not in r:
            out.append("| %s | %s | %s | - | not timed: %s | | | | | | |" % (
                r["name"], r.get("flags", "-"), pb.fmt(r.get("check", {}).get("mean_cos"), "%.6f"),
                r.get("error") or "vector check below %s" % r.get("check", {}).get("want")))
            continue
        for k, g in r["points"].items():
            out.append("| %s | %s | %s | %s | %s | %.0f | %.2f | %.2f | %d | %.0f | %s |" % (
                r["name"], r["flags"], pb.fmt(d.get("mean_cos"), "%.6f"),
                pb.fmt(d.get("spearman"), "%.2f"), k, g["rps"], g["p50_ms"], g["p99_ms"],
                g["errors"], g["rss_mib"], pb.fmt(g["cpu_per_1k"], "%.2f")))
    peer_r = next((r for r in results if r["name"].startswith("sentence-transformers")
                   and "points" in r), None)
    if peer_r and len(results) > 1:
        out += ["", "| Mantissa against %s | c=1 | c=16 | c=64 |" % peer_r["name"], "|---|---|---|---|"]
        for r in results:
            if r is peer_r or "points" not in r:
                continue
            cells = ["%.2fx" % (r["points"][c]["rps"] / peer_r["points"][c]["rps"])
                     if peer_r["points"][c]["rps"] else "-" for c in ("c=1", "c=16", "c=64")]
            out.append("| %s | %s |" % (r["name"], " | ".join(cells)))
    sweeps = [(r["name"], s) for r in results for s in r.get("sweep") or []]
    if sweeps:
        out += ["", "Sweep (closed loop, concurrency 16; the best is timed above):", "",
                "| server | flags | req/s |", "|---|---|---|"]
        out += ["| %s | %s | %s |" % (n, s[0], pb.fmt(s[1], "%.0f") if s[1] else s[2])
                for n, s in sweeps]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the mantissa binary")
    ap.add_argument("--loadgen", required=True, help="bench/loadgen's binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--stsb", required=True, help="the STS-B test split (sts-test.csv)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--peer-dtype", default="fp16")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--sweep-seconds", type=float, default=3)
    ap.add_argument("--lib-path", default="",
                    help="folders put before LD_LIBRARY_PATH for Mantissa's processes only")
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args()
    pb.MANTISSA, pb.LOADGEN = os.path.abspath(a.bin), os.path.abspath(a.loadgen)
    pb.MODEL, pb.STSB = os.path.abspath(a.model), os.path.abspath(a.stsb)
    if a.lib_path:  # inherited by every process pb starts; the peer's env puts PY_LD_PATH back
        os.environ["LD_LIBRARY_PATH"] = a.lib_path.rstrip(":") + (":" + PY_LD_PATH if PY_LD_PATH else "")

    t0 = time.time()
    sents, pairs, gold = pb.stsb()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        bodies = pb.write_bodies(sents, tmp)
        ref = pb.mantissa_reference(sents, tmp)  # Mantissa FP32 on the CPU, every sentence
        data = (sents, pairs, gold, ref, bodies)
        # the vector check refuses a broken server, not drift: 0.99999 for FP32
        # servers, 0.99 for the rest (their drift is in the table either way)
        setups = [("Mantissa %s %s" % (a.device, p), p == "fp32",
                   [("delay 0", pb.mantissa(p, 0, tmp, device=a.device)),
                    ("auto", pb.mantissa(p, "auto", tmp, device=a.device))])
                  for p in a.precisions.split(",") if p]
        setups.append(("sentence-transformers %s %s" % (a.device, a.peer_dtype), a.peer_dtype == "fp32",
                       [("--max-batch 64", peer(a.device, a.peer_dtype, 64))]))
        for name, full, cands in setups:
            print("serve_peers: %s" % name, file=sys.stderr, flush=True)
            try:
                r = pb.run_setting(name, full, cands, data, tmp, a.seconds, a.sweep_seconds)
            except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
                # a sweep whose candidates all failed to start raises ValueError
                # (max of nothing): the servers' own last words say why
                r = {"name": name, "error": "%s; server log: %s" % (e, log_tail(tmp, name))}
            results.append(r)
            if "points" in r:
                print("serve_peers: %s: %s" % (name, ", ".join(
                    "%s %.0f req/s" % (k, g["rps"]) for k, g in r["points"].items())),
                    file=sys.stderr, flush=True)
    doc = {"device": device_name(a.device), "peer": versions(), "seconds_per_point": a.seconds,
           "sentences": len(sents), "elapsed_s": round(time.time() - t0, 1), "results": results}
    md = ("Device: %s. Peer: sentence-transformers / torch %s. One STS-B test sentence per "
          "request (%d sentences, shuffled once), bench/loadgen.c on the same machine, %g s a "
          "point.\n\n%s\n" % (doc["device"], doc["peer"], len(sents), a.seconds, table(results)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    print(md)
    return 0 if all("points" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
