#!/usr/bin/env python3
"""engine_ab.py: one engine change end to end, before against after, in one
run: `mantissa bench` (engine sentences/s at batch 1 and 32) of two
binaries on the same STS-B sentences, per model and precision, at an ISA
level (ONEDNN_MAX_CPU_ISA; our kernels follow it), every process niced.

Each round runs every contestant (each precision on each binary) once, in
an order that rotates from round to round, so that a change of the
machine's load falls on all of them. The report gives each contestant's
median sentences/s and, per precision, after / before as the median of the
per-round ratios (least-greatest) and the ratio of the best rounds.

  bench/engine_ab.py --before build/base/mantissa [--after build/release/mantissa]
                     [--models minilm,mpnet] [--precisions fp32,int8,int8g]
                     [--isa ''] [--rounds 5] [--seconds 2] [--threads 0] [--passages]
                     [--out FILE]

--isa '' is the CPU's own level. --passages runs retrieval-sized inputs
instead of sentences: consecutive STS-B sentences joined to about 150 words
(peers_bench.passages, about 180 tokens each). The ISA and the CPU's model
name head the report.
"""
import argparse
import os
import platform
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import avx2_kernels_ab as kab  # noqa: E402
import peers_bench as pb  # noqa: E402


def cpu_line(binary, isa):
    return "%s, %d CPUs; `mantissa cpu` isa: %s" % (
        pb.cpu_model(), os.cpu_count(), pb.mantissa_isa(binary, {"ONEDNN_MAX_CPU_ISA": isa}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=os.path.join(kab.ROOT, "build/release/mantissa"))
    ap.add_argument("--models", default="minilm,mpnet")
    ap.add_argument("--precisions", default="fp32,int8,int8g")
    ap.add_argument("--isa", default="")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--passages", action="store_true")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    out = open(a.out, "w") if a.out else sys.stdout
    cs = [{"name": "%s %s" % (p, side), "prec": p, "kernel": None, "bin": b}
          for p in a.precisions.split(",") for side, b in (("after", a.after),
                                                            ("before", a.before))]
    print("Machine: %s. Python %s. Threads: %s.\n" % (
        cpu_line(a.after, a.isa), platform.python_version(), a.threads or "every CPU"), file=out)
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split(","):
            lines = pb.passages(pb.stsb()[0]) if a.passages else None
            ids = kab.make_ids(tmp, a.after, model, a.sentences, lines)
            rows = []
            for rd in range(a.rounds):
                order = cs[rd % len(cs):] + cs[:rd % len(cs)]
                got = {c["name"]: kab.bench_once(c, tmp, ids, model, a) for c in order}
                rows.append({c["name"]: got[c["name"]] for c in cs})
                print("%s round %d done" % (model, rd + 1), file=sys.stderr, flush=True)
            print("### %s%s: sentences/s, median of %d rounds; after / before: median per-round "
                  "ratio (least-greatest; ratio of the best rounds)\n" % (
                      model, ", passages" if a.passages else "", len(rows)), file=out)
            print("| precision | before b1 | after b1 | before b32 | after b32 | after / before "
                  "b1 | after / before b32 |", file=out)
            print("|---|---|---|---|---|---|---|", file=out)
            for p in a.precisions.split(","):
                med = {(s, b): statistics.median(r["%s %s" % (p, s)][b] for r in rows)
                       for s in ("before", "after") for b in (1, 32)}
                cells = [kab.ratio_cell(rows, "%s after" % p, "%s before" % p, b) for b in (1, 32)]
                print("| %s | %.1f | %.1f | %.1f | %.1f | %s | %s |" % (
                    p, med["before", 1], med["after", 1], med["before", 32], med["after", 32],
                    cells[0], cells[1]), file=out)
            print("\nEvery round (sentences/s, batch 1 / batch 32):\n", file=out)
            for i, r in enumerate(rows):
                print("- round %d: " % (i + 1) + "; ".join(
                    "%s %.0f/%.0f" % (n, v[1], v[32]) for n, v in r.items()), file=out)
            print("", file=out)
            out.flush()


if __name__ == "__main__":
    main()
