#!/usr/bin/env python3
"""openloop_bound.py: the best open-loop latency any batching server could
reach on this machine with Mantissa's kernels, next to what the server
reaches, for issue 13's open-loop target (p99 at 90% of capacity <= 4x the
batch-1 forward).

1. Measures the engine alone: `mantissa bench` on the STS-B test sentences
   (shuffled, seeded) at batch 1, 2, 4, ..., 64: T(B), the median forward
   time of a batch of B sentences.
2. Simulates an ideal server on T(B): Poisson arrivals, no HTTP, no
   tokenizing, no queue overhead, no noise; when the engine is free it takes
   everything waiting (up to max_batch_size) and takes exactly T(B). Its
   capacity is counted as make bench-peers counts a server's: the best
   closed-loop rate at concurrency 1, 16 and 64 (c / T(c) for the ideal).
   The open-loop points are at 50% and 90% of that. p50 and p99 are over
   400,000 simulated requests.
3. With --serve, measures the real server the same way (closed loop at 1,
   16, 64 for its capacity, then, on the same server, Poisson at 50% and 90%
   of it: bench/delay_ab.py's measure), with the
   load generator's --timing: for the slowest 1% of requests at each point,
   where their time went (Server-Timing hops, means), the batch sizes they
   ran in, and the server's median forward per batch size against T(B).

  bench/openloop_bound.py [--precisions fp32,int8g] [--max-batch 64]
                          [--seconds 2] [--serve] [--out FILE]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import delay_ab  # noqa: E402
import peers_bench as pb  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32, 64)
FRACS = delay_ab.FRACS  # the open points: fractions of capacity


def token_ids(sents, tmp):
    """Each sentence's ids ([CLS] ... [SEP]) from the server's POST /tokenize."""
    port = pb.free_port()
    srv = pb.mantissa("fp32", 0, tmp)(port, None)
    try:
        out = []
        for s in sents:
            req = urllib.request.Request("http://127.0.0.1:%d/tokenize" % port,
                                         data=json.dumps({"inputs": s}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                out.append([t["id"] for t in json.loads(r.read())[0]])
        return out
    finally:
        srv.stop()


def engine_times(prec, ids_path, tmp, seconds):
    """{B: median forward seconds} from mantissa bench."""
    cfg = os.path.join(tmp, "bench-%s.json" % prec)
    with open(cfg, "w") as f:
        json.dump({"models": [{"name": "minilm", "path": pb.MODEL, "device": "cpu",
                               "variants": [{"name": prec, "precision": prec}]}]}, f)
    r = subprocess.run([pb.MANTISSA, "bench", "--config", cfg, "--ids", ids_path,
                        "--model", "minilm@" + prec, "--batch", ",".join(map(str, BATCHES)),
                        "--seconds", str(seconds)], capture_output=True, text=True, check=True)
    res = json.loads(r.stdout.strip().splitlines()[-1])["results"]
    return {x["batch"]: x["median_s"] for x in res}


def interp(tab):
    xs = sorted(tab)

    def t(b):
        for lo, hi in zip(xs, xs[1:]):
            if lo <= b <= hi:
                return tab[lo] + (tab[hi] - tab[lo]) * (b - lo) / (hi - lo)
        return tab[xs[-1]] * b / xs[-1]
    return t


def simulate(t, rate, max_batch, n=400000, seed=1):
    """(p50, p99) seconds of the ideal server at Poisson rate."""
    rnd = random.Random(seed)
    arr, now = [], 0.0
    for _ in range(n):
        now += rnd.expovariate(rate)
        arr.append(now)
    lat, i, free = [], 0, 0.0
    while i < n:
        start = max(free, arr[i])
        j = i
        while j < n and j - i < max_batch and arr[j] <= start:
            j += 1
        free = start + t(j - i)
        lat.extend(free - arr[k] for k in range(i, j))
        i = j
    lat.sort()
    return lat[n // 2], lat[int(n * 0.99)]


def bound(tab, max_batch):
    t = interp(tab)
    cap = max(b / t(b) for b in {min(c, max_batch) for c in (1, 16, 64)})
    rows = {"t1_ms": 1e3 * tab[1], "capacity": cap}
    for f in FRACS:
        p50, p99 = simulate(t, f * cap, max_batch)
        rows["%d%%" % (100 * f)] = [f * cap, 1e3 * p50, 1e3 * p99]
    return rows


def read_timing(path):
    rows = []
    with open(path) as f:
        for line in f:
            rows.append({k: float(v) for k, v in (kv.split("=") for kv in line.split())})
    return rows[len(rows) // 20:]  # the first 5%: warming up


def tail(rows, tab):
    """The slowest 1%: mean ms per hop, their batch sizes; and the median
    forward per batch size over all requests against the engine's T(B)."""
    rows = sorted(rows, key=lambda r: r["latency"])
    slow = rows[len(rows) * 99 // 100:]
    hops = ("send_lag", "parse", "inbox", "queue", "dispatch", "forward", "resume")
    mean = {h: sum(r.get(h, 0) for r in slow) / len(slow) for h in ("latency",) + hops}
    sizes = sorted(int(r.get("batch", 0)) for r in slow)
    t = interp(tab)
    slower = {}
    for b in sorted({int(r.get("batch", 0)) for r in rows}):
        f = sorted(r["forward"] for r in rows if int(r.get("batch", 0)) == b)
        if b in BATCHES and len(f) >= 20:
            slower[b] = f[len(f) // 2] / (1e3 * t(b))
    return {"slow_mean_ms": mean, "slow_batches": sizes, "forward_vs_engine": slower}


def measure_real(prec, max_batch, bodies, tmp, tab):
    r = delay_ab.measure(prec, "0/%d/16384" % max_batch, bodies, tmp, 6, "own", timing=tmp)
    real = {"capacity": r["capacity"]}
    for f in FRACS:
        key = "%d%%" % (100 * f)
        real[key] = r[key][:3]
        real["tail " + key] = tail(read_timing(os.path.join(tmp, "timing-%d.txt" % (100 * f))),
                                   tab)
    return real


def report(prec, tab, ideal, real):
    L = ["### %s" % prec, "",
         "Engine alone (mantissa bench, median forward): " + ", ".join(
             "B=%d %.2f ms (%.0f/s)" % (b, 1e3 * tab[b], b / tab[b]) for b in BATCHES), "",
         "| server | capacity req/s | 50%: req/s, p50 / p99 ms | 90%: req/s, p50 / p99 ms "
         "| p99 at 90% / (4 x T(1)) |", "|---|---|---|---|---|"]
    target = 4 * ideal["t1_ms"]

    def cells(r, cap):
        return "| %.0f | %.0f, %.2f / %.1f | %.0f, %.2f / %.1f | %.1fx |" % (
            cap, *r["50%"], *r["90%"], r["90%"][2] / target)
    L.append("| ideal (simulated on T(B)) " + cells(ideal, ideal["capacity"]))
    if real:
        L.append("| Mantissa serve (measured) " + cells(real, real["capacity"]))
    L += ["", "4 x T(1) = %.2f ms." % target, ""]
    if real:
        L += ["The slowest 1% of the server's requests (means, ms), and its median forward "
              "per batch size over T(B):", "",
              "| load | latency | send lag | parse | inbox | queue | dispatch | forward | resume "
              "| their batch sizes (min / median / max) | server forward / T(B) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for f in FRACS:
            t = real["tail %d%%" % (100 * f)]
            m, b = t["slow_mean_ms"], t["slow_batches"]
            L.append("| %d%% | %s | %d / %d / %d | %s |" % (
                100 * f, " | ".join("%.2f" % m[k] for k in m), b[0], b[len(b) // 2], b[-1],
                ", ".join("B=%d %.2f" % kv for kv in t["forward_vs_engine"].items())))
        L.append("")
    return L


def inputs(sents, tmp):
    """The sentences as the engine's ids file and the load generator's
    bodies (one OpenAI request a line), in tmp: their two paths."""
    ids_path = os.path.join(tmp, "ids.json")
    with open(ids_path, "w") as f:
        json.dump(token_ids(sents, tmp), f)
    return ids_path, pb.write_bodies(sents, tmp)


def write_report(lines, out):
    """The markdown report to stdout and, when out is set, to that file."""
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precisions", default="fp32,int8g")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    sents = pb.stsb()[0]
    random.Random(7).shuffle(sents)
    L = []
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, bodies = inputs(sents, tmp)
        for prec in a.precisions.split(","):
            tab = engine_times(prec, ids_path, tmp, a.seconds)
            ideal = bound(tab, a.max_batch)
            real = measure_real(prec, a.max_batch, bodies, tmp, tab) if a.serve else None
            print(json.dumps({"precision": prec, "engine_s": tab, "ideal": ideal, "real": real}),
                  flush=True)
            L += report(prec, tab, ideal, real)
    write_report(L, a.out)


if __name__ == "__main__":
    main()
