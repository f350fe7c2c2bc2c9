#!/usr/bin/env python3
"""delay_ab.py: A/B of batching settings (max_queue_delay_us, and with
--sizes / --tokens max_batch_size and max_batch_tokens) on one build of
the server, with bench/loadgen.c and one STS-B sentence per request, as
make bench-peers measures: closed loop at concurrency 1, 16 and 64, and
Poisson arrivals at 50% and 90% of the precision's capacity (its best
closed-loop rate over every setting in a first capacity round). Rounds
interleave the settings so that the machine's noise falls on all of them
alike. Prints one JSON line per (round, precision, delay) and, at the end, a
markdown table of the medians over rounds.

usage: delay_ab.py [--delays auto,0] [--sizes 64] [--tokens 16384]
                   [--precisions fp32,int8g] [--rounds 3] [--seconds 6]
A setting is named delay/size/tokens; every combination of the lists runs.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_bench as pb  # noqa: E402

CLOSED = (1, 16, 64)
FRACS = (0.5, 0.9)


def delay_value(d):
    return d if d == "auto" else int(d)


def measure(prec, setting, bodies, tmp, secs, rates, timing=None):
    """One server of prec with setting (delay/size/tokens): the closed points,
    then the open points at rates (a list; "own": FRACS of this run's best
    closed-loop rate, kept as row["capacity"]; None: none). timing: a folder
    for the load generator's --timing file of each open point
    (timing-50.txt, timing-90.txt)."""
    delay, size, tokens = setting.split("/")
    port = pb.free_port()
    srv = pb.mantissa(prec, delay_value(delay), tmp, int(size), int(tokens))(
        port, os.path.join(tmp, "srv.log"))
    row = {"load": round(os.getloadavg()[0], 2)}
    try:
        pb.loadgen(port, bodies, 2, conc=16)  # warm-up; batches of a few sizes for "auto"
        for c in CLOSED:
            g = pb.point(srv, bodies, secs, conc=c)
            row["c=%d" % c] = [g["rps"], g["p50_ms"], g["p99_ms"], g["errors"]]
        if rates == "own":
            row["capacity"] = max(row["c=%d" % c][0] for c in CLOSED)
            rates = [f * row["capacity"] for f in FRACS]
        for frac, rate in zip(FRACS, rates or ()):
            path = os.path.join(timing, "timing-%d.txt" % (100 * frac)) if timing else None
            g = pb.point(srv, bodies, secs, rate=rate, timing=path)
            row["%d%%" % (100 * frac)] = [g["rps"], g["p50_ms"], g["p99_ms"], g["errors"]]
    finally:
        srv.stop()
    return row


def table(rows, delays, precs):  # delays: the settings' names
    keys = ["c=%d" % c for c in CLOSED] + ["%d%%" % (100 * f) for f in FRACS]
    out = ["| precision | delay / size / tokens | " + " | ".join(
        "%s req/s, p50 / p99 ms" % k for k in keys) + " |",
        "|---|---|" + "---|" * len(keys)]
    for p in precs:
        for d in delays:
            mine = [r for r in rows if r["precision"] == p and r["delay"] == d]
            cells = []
            for k in keys:
                v = [r[k] for r in mine if k in r]
                if not v:
                    cells.append("-")
                    continue
                med = [statistics.median(x[i] for x in v) for i in range(3)]
                err = sum(x[3] for x in v)
                cells.append("%.0f, %.2f / %.1f%s" % (med[0], med[1], med[2],
                                                      " (%d errors)" % err if err else ""))
            out.append("| %s | %s | %s |" % (p, d, " | ".join(cells)))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delays", default="auto,0")
    ap.add_argument("--sizes", default="64")
    ap.add_argument("--tokens", default="16384")
    ap.add_argument("--precisions", default="fp32,int8g")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6)
    a = ap.parse_args()
    delays = ["%s/%s/%s" % (d, b, t) for d in a.delays.split(",")
              for b in a.sizes.split(",") for t in a.tokens.split(",")]
    precs = a.precisions.split(",")
    sents = pb.stsb()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bodies = pb.write_bodies(sents, tmp)
        rates = {}
        for p in precs:  # capacity: the best closed-loop rate of any delay
            cap = 0
            for d in delays:
                r = measure(p, d, bodies, tmp, a.seconds, None)
                cap = max([cap] + [r["c=%d" % c][0] for c in CLOSED])
            rates[p] = [f * cap for f in FRACS]
            print(json.dumps({"precision": p, "capacity": cap}), flush=True)
        for rnd in range(a.rounds):
            order = delays if rnd % 2 == 0 else delays[::-1]
            for p in precs:
                for d in order:
                    r = {"round": rnd, "precision": p, "delay": d}
                    r.update(measure(p, d, bodies, tmp, a.seconds, rates[p]))
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    print()
    print(table(rows, delays, precs))


if __name__ == "__main__":
    main()
