#!/usr/bin/env python3
"""serve_probe.py: small A/B measurements of the server
that `make bench-server` does not make, in one run, interleaved.

Each variant is a binary and an environment (for the OpenMP wait policy:
OMP_WAIT_POLICY, GOMP_SPINCOUNT). For every variant, in rounds so that
the machine's slow windows fall on all of them alike, it starts the real
server and measures with wrk (same KServe JSON bodies as bench-server):
  - batching off, concurrency 1: client mean latency, the server's mean
    forward time, and their difference (the batch-1 overhead);
  - batching on (fixed 2 ms), concurrency 64: requests/s and p99;
  - the HTTP floor: GET /v2/health/ready at concurrency 1.
With --busy, a busy-looping process runs beside the server for the whole
run (a shared node). Writes a markdown report to stdout and --out.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_bench as sb  # noqa: E402

OFF = {"max_batch_size": 1, "max_queue_delay_us": 0}
ON = {"max_batch_size": 64, "max_queue_delay_us": 2000}


def floor(url, seconds):
    r = subprocess.run(["wrk", "-t1", "-c1", "-d%ds" % seconds, url + "/v2/health/ready"],
                       capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"Latency\s+([0-9.]+)(us|ms)", r.stdout)
    return float(m.group(1)) * (1000 if m.group(2) == "ms" else 1) if m else float("nan")


def probe(binary, env, script, tmp, seconds, precision):
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        srv = sb.Server(binary, OFF, tmp, precision)
        try:
            sb.run_wrk(srv.url, script, 1, 2)  # warm-up
            w1 = sb.measure(srv, script, 1, seconds)
            fl = floor(srv.url, seconds)
        finally:
            srv.stop()
        srv = sb.Server(binary, ON, tmp, precision)
        try:
            sb.run_wrk(srv.url, script, 8, 2)
            w64 = sb.measure(srv, script, 64, seconds)
        finally:
            srv.stop()
    finally:
        os.environ.clear()
        os.environ.update(old)
    o = sb.ovh(w1)
    return {"client_ms": o["client_mean_ms"], "forward_ms": o["compute_ms"],
            "overhead_us": o["overhead_us"], "rps64": w64["rps"], "p99_64": w64["p99_us"] / 1e3,
            "floor_us": fl}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", action="append", required=True,
                    help="NAME:BINARY[:VAR=VALUE,...] (VAR= with no value removes VAR)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--precision", default="fp32",
                    help="the served variant's precision (its name stays fp32)")
    ap.add_argument("--out")
    args = ap.parse_args()
    variants = []
    for v in args.variant:
        name, binary, *rest = v.split(":", 2)
        env = {k: val for k, val in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MANTISSA_NO_REEXEC")}
        for kv in (rest[0].split(",") if rest and rest[0] else []):
            k, val = kv.split("=", 1)
            if val:
                env[k] = val
            else:
                env.pop(k, None)
        variants.append((name, os.path.abspath(binary), env, rest[0] if rest else ""))
    tmp = tempfile.mkdtemp(prefix="mt-probe-")
    script = sb.wrk_script(tmp, sb.sentences())
    hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if args.busy else None
    load_start = os.getloadavg()
    results = {name: [] for name, *_ in variants}
    try:
        for rnd in range(args.rounds):
            for name, binary, env, _ in variants:
                r = probe(binary, env, script, tmp, args.seconds, args.precision)
                results[name].append(r)
                print("round %d %-12s c=1 %.3f ms (forward %.3f, overhead %.0f us), c=64 %.1f/s "
                      "p99 %.1f ms, floor %.0f us" % (rnd + 1, name, r["client_ms"],
                                                     r["forward_ms"], r["overhead_us"],
                                                     r["rps64"], r["p99_64"], r["floor_us"]),
                      file=sys.stderr)
    finally:
        if hog:
            hog.kill()
            hog.wait()
    lines = [
        "# Server probe: %s" % ", ".join(name for name, *_ in variants),
        "",
    ] + sb.header_lines() + [
        "- load average at start %s, at end %s" % (
            ", ".join("%.2f" % x for x in load_start),
            ", ".join("%.2f" % x for x in os.getloadavg())),
        "- command: `bench/serve_probe.py %s`" % " ".join(sys.argv[1:]),
        "- %s; %d rounds, variants interleaved, %d s per point; wrk 1 thread, one STS-B "
        "sentence per request (KServe JSON), %s" % (
            "one busy-looping process beside the server" if args.busy else "nothing else of ours "
            "running", args.rounds, args.seconds, args.precision),
        "",
        "| variant | binary | environment | round | c=1 client ms | forward ms | overhead us | "
        "c=64 batching on req/s | c=64 p99 ms | GET floor us |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, binary, env, spec in variants:
        for i, r in enumerate(results[name]):
            lines.append("| %s | %s | %s | %d | %.3f | %.3f | %.0f | %.1f | %.1f | %.0f |" % (
                name, os.path.relpath(binary, sb.ROOT), spec or "(unset)", i + 1, r["client_ms"],
                r["forward_ms"], r["overhead_us"], r["rps64"], r["p99_64"], r["floor_us"]))
    lines += ["", "| variant | mean forward ms | mean overhead us | mean c=64 req/s |",
              "| --- | --- | --- | --- |"]
    for name, *_ in variants:
        rs = results[name]
        lines.append("| %s | %.3f | %.0f | %.1f |" % (
            name, sum(r["forward_ms"] for r in rs) / len(rs),
            sum(r["overhead_us"] for r in rs) / len(rs), sum(r["rps64"] for r in rs) / len(rs)))
    sb.write_report(lines, args.out)


if __name__ == "__main__":
    main()
