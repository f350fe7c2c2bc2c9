#!/usr/bin/env python3
"""ncu_sum.py: where a forward's GPU time goes, from an Nsight Compute CSV.

Reads `ncu --csv --metrics gpu__time_duration.sum ...` output (one row per
profiled kernel launch), groups the launches by kernel name (templates
shortened), and prints a markdown table: launches, total and share of the
time, and microseconds per forward when --forwards says how many forwards
the profiled launches cover. Lines before the CSV header (the program's own
output, ncu's ==PROF== lines) are skipped.

  ncu --csv --clock-control none --metrics gpu__time_duration.sum PROG ... > k.csv
  python3 bench/gpu/ncu_sum.py k.csv --forwards 7      (or --per mean_pool)
"""
import argparse
import csv
import io
import re
import sys

UNIT = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
        "second": 1e6, "s": 1e6}


def short(name):
    """Kernel name without argument lists, nested template arguments cut."""
    name = re.sub(r"\(.*\)$", "", name.strip())
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<")
            continue
        if ch == ">":
            depth -= 1
            if depth == 0:
                out.append(">")
            continue
        if depth <= 1:
            out.append(ch)
    s = "".join(out)
    return s if len(s) <= 90 else s[:87] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--forwards", type=float, default=0, help="forwards the launches cover")
    ap.add_argument("--per", help="a kernel name part that runs once per forward: its launch "
                    "count is the number of forwards")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    text = open(a.csv, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print("ncu_sum: no CSV header in %s" % a.csv)
        return 1
    rows = [r for r in csv.DictReader(io.StringIO(text[start:]))
            if r.get("Metric Name") == "gpu__time_duration.sum"]
    by = {}
    for r in rows:
        us = float(r["Metric Value"].replace(",", "")) * UNIT.get(r.get("Metric Unit", "ns"), 1e-3)
        k = short(r["Kernel Name"])
        n, t = by.get(k, (0, 0.0))
        by[k] = (n + 1, t + us)
    total = sum(t for _, t in by.values())
    if a.per:
        a.forwards = sum(n for k, (n, _) in by.items() if a.per in k)
    print("%d launches, %.1f us of kernel time%s\n" % (
        len(rows), total, "" if not a.forwards else ", %.1f us per forward (%g forwards)" % (
            total / a.forwards, a.forwards)))
    print("| kernel | launches | total us | share | us per forward |")
    print("|---|---|---|---|---|")
    for k, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print("| `%s` | %d | %.1f | %.1f%% | %s |" % (k.replace("|", "/"), n, t, 100 * t / total if total else 0,
                                                  "%.1f" % (t / a.forwards) if a.forwards else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
