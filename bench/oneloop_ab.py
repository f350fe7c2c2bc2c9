#!/usr/bin/env python3
"""oneloop_ab.py: two server binaries side by side in one run, for issue
25's one-loop step (libmicrohttpd driven from the scheduler's libuv loop,
against its own thread pool): the batch-1 overhead, the closed-loop rate at
concurrency 1, 16 and 64, and the open-loop p50/p99 at 50% and 90% of each
server's own capacity, next to the ideal server of bench/openloop_bound.py
(simulated on the engine's own batch times, measured in the same run).

Each round measures every binary once, in turn (A B, then B A, ...), so a
change of the machine's load falls on both; the report gives the median of
the rounds and every round's figures.

  bench/oneloop_ab.py --bins before=build/oldloop/mantissa,after=build/release/mantissa
                      [--precisions fp32,int8g] [--rounds 2] [--seconds 6] [--out FILE]

The batch-1 overhead is the c=1 median latency less T(1), the engine's
median forward of one sentence (mantissa bench on the same sentences): the
time HTTP, JSON, tokenizing and the hand-offs add to a lone request.
"""
import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import delay_ab  # noqa: E402
import openloop_bound as ob  # noqa: E402
import peers_bench as pb  # noqa: E402


def med(rows, key, i):
    return statistics.median(r[key][i] for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bins", required=True, help="label=path,label=path")
    ap.add_argument("--precisions", default="fp32,int8g")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--out")
    a = ap.parse_args()
    bins = [kv.split("=", 1) for kv in a.bins.split(",")]
    sents = pb.stsb()[0]
    random.Random(7).shuffle(sents)
    load0 = os.getloadavg()[0]
    L = ["# One loop against the HTTP thread pool (bench/oneloop_ab.py)", "",
         "CPU: %s, %d cores, %s; load average %.2f at the start. Load generator on the "
         "same cores. Binaries: %s. %d rounds of %.0f s points, each round every binary in "
         "turn (alternating order); medians of the rounds." % (
             pb.cpu_model(), os.cpu_count(), "isa: " + pb.mantissa_isa(bins[-1][1]), load0,
             ", ".join("%s = %s" % (k, v) for k, v in bins), a.rounds, a.seconds), ""]
    with tempfile.TemporaryDirectory() as tmp:
        pb.MANTISSA = bins[-1][1]
        ids_path, bodies = ob.inputs(sents, tmp)
        for prec in a.precisions.split(","):
            pb.MANTISSA = bins[-1][1]
            tab = ob.engine_times(prec, ids_path, tmp, 2)
            ideal = ob.bound(tab, a.max_batch)
            rows = {k: [] for k, _ in bins}
            for r in range(a.rounds):
                order = bins if r % 2 == 0 else bins[::-1]
                for label, path in order:
                    pb.MANTISSA = path
                    row = delay_ab.measure(prec, "0/%d/16384" % a.max_batch, bodies, tmp,
                                           a.seconds, "own")
                    rows[label].append(row)
                    print(json.dumps({"precision": prec, "bin": label, "round": r, "row": row}),
                          flush=True)
            t1 = 1e3 * tab[1]
            L += ["## %s" % prec, "",
                  "Engine alone (mantissa bench, median forward): " + ", ".join(
                      "B=%d %.2f ms" % (b, 1e3 * tab[b]) for b in ob.BATCHES) + ".", "",
                  "| server | batch-1 overhead ms (c=1 p50 - T(1)) | c=1 req/s | c=16 req/s | "
                  "c=64 req/s | 50%: req/s, p50 / p99 ms | 90%: req/s, p50 / p99 ms | "
                  "p99 at 90% / ideal's |",
                  "|---|---|---|---|---|---|---|---|"]
            L.append("| ideal (simulated on T(B)) | 0 | %.0f | %.0f | %.0f | %.0f, %.2f / %.1f | "
                     "%.0f, %.2f / %.1f | 1.00x |" % (
                         1 / tab[1], 16 / ob.interp(tab)(16), 64 / ob.interp(tab)(64),
                         *ideal["50%"], *ideal["90%"]))
            for label, _ in bins:
                rs = rows[label]
                L.append("| %s | %.3f | %.0f | %.0f | %.0f | %.0f, %.2f / %.1f | "
                         "%.0f, %.2f / %.1f | %.2fx |" % (
                             label, med(rs, "c=1", 1) - t1, med(rs, "c=1", 0),
                             med(rs, "c=16", 0), med(rs, "c=64", 0),
                             med(rs, "50%", 0), med(rs, "50%", 1), med(rs, "50%", 2),
                             med(rs, "90%", 0), med(rs, "90%", 1), med(rs, "90%", 2),
                             med(rs, "90%", 2) / ideal["90%"][2]))
            L += ["", "Every round (req/s, p50 / p99 ms; errors):", ""]
            for label, _ in bins:
                for i, r in enumerate(rows[label]):
                    L.append("- %s round %d (load %.2f): %s" % (label, i, r["load"], "; ".join(
                        "%s %.0f, %.2f / %.1f%s" % (k, v[0], v[1], v[2],
                                                    " (%d errors)" % v[3] if v[3] else "")
                        for k, v in r.items() if k not in ("load", "capacity"))))
            L.append("")
    L.append("Load average at the end: %.2f. Python %s." % (os.getloadavg()[0],
                                                              platform.python_version()))
    ob.write_report(L, a.out)


if __name__ == "__main__":
    main()
