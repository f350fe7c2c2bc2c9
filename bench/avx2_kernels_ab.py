#!/usr/bin/env python3
"""avx2_kernels_ab.py: end to end, the int8 GEMM kernels of the AVX2 level
(MANTISSA_INT8_KERNEL) against each other and FP32, in one run:
`mantissa bench` (engine sentences/s, batch 1 and 32) on STS-B sentences,
per model, at ONEDNN_MAX_CPU_ISA=AVX2 (or --isa), every process niced.

Each round runs every contestant once (fp32; int8 and int8g on each
kernel; optionally int8 and int8g of another binary, e.g. the build before
a change, on its own default kernel), in an order that rotates from round
to round, so that a change of the machine's load falls on all of them. The
report gives each contestant's median sentences/s over the rounds and,
against the reference kernel (the first of --kernels) and against fp32,
the median of the per-round ratios with the least and greatest, and the
ratio of the best rounds (on a shared machine the least disturbed).
--threads sets the engine's threads (server.engine_threads; 0: every
CPU): with one, a preempted forward is slower by the time it lost, where
with two the other thread waits at every barrier.

  bench/avx2_kernels_ab.py [--models minilm,mpnet] [--kernels avx2_sign,avx2_w16]
                           [--base-bin build/base/mantissa] [--rounds 5] [--seconds 2]
                           [--threads 0] [--out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
STSB = "/work/shared/data/stsb/sts-test.csv"
PATHS = {"minilm": "models/all-MiniLM-L6-v2", "mpnet": "models/all-mpnet-base-v2"}


def config(tmp, model, prec, threads=0):
    """A config of one model with one variant of precision prec."""
    var = {"name": prec, "precision": prec, "traffic": 100}
    if prec != "fp32":
        var["calibration"] = "absmax"
    cfg = {"server": {"listen": "127.0.0.1:18089", "engine_threads": threads},
           "models": [{"name": model, "path": PATHS[model], "device": "cpu",
                       "variants": [var]}]}
    path = os.path.join(tmp, f"{model}-{prec}.json")
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return path


def make_ids(tmp, binary, model, sentences, lines=None):
    """The token ids of the first `sentences` STS-B test sentences (first of
    each pair), or of the first `sentences` of `lines` where given."""
    texts = os.path.join(tmp, "sentences.txt")
    with open(STSB, encoding="utf-8") as fh, open(texts, "w", encoding="utf-8") as out:
        src = lines if lines is not None else (line.split("\t")[5] for line in fh)
        for i, text in enumerate(src):
            if i >= sentences:
                break
            out.write(text + "\n")
    ids = os.path.join(tmp, f"ids-{model}.json")
    subprocess.run([binary, "bench", "--config", config(tmp, model, "fp32"), "--model", model,
                    "--make-ids", texts, "--out", ids], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return ids


def bench_once(c, tmp, ids, model, args):
    """One contestant's sentences/s at batch 1 and 32."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=args.isa)
    env.pop("MANTISSA_INT8_KERNEL", None)
    if c["kernel"]:
        env["MANTISSA_INT8_KERNEL"] = c["kernel"]
    cmd = ["nice", "-n", "19", c["bin"], "bench", "--config",
           config(tmp, model, c["prec"], args.threads), "--ids", ids, "--model",
           f"{model}@{c['prec']}", "--batch", "1,32", "--seconds", str(args.seconds)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    res = json.loads(r.stdout.strip().splitlines()[-1])["results"]
    return {x["batch"]: x["sentences_per_s"] for x in res}


def contestants(args):
    out = [{"name": "fp32", "prec": "fp32", "kernel": None, "bin": args.bin}]
    for prec in ("int8", "int8g"):
        for k in args.kernels:
            out.append({"name": f"{prec} {k}", "prec": prec, "kernel": k, "bin": args.bin})
        if args.base_bin:
            out.append({"name": f"{prec} base", "prec": prec, "kernel": None,
                        "bin": args.base_bin})
    return out


def ratio_cell(rows, a, b, batch):
    r = sorted(rows[i][a][batch] / rows[i][b][batch] for i in range(len(rows)))
    best = max(x[a][batch] for x in rows) / max(x[b][batch] for x in rows)
    return f"{statistics.median(r):.3f} ({r[0]:.3f}-{r[-1]:.3f}; best {best:.3f})"


def report(model, cs, rows, ref, out):
    print(f"\n### {model}: sentences/s, median of {len(rows)} rounds; ratios: median per-round "
          f"(least-greatest; ratio of the best rounds)\n", file=out)
    print(f"| contestant | batch 1 | batch 32 | b1 / {ref} | b32 / {ref} | b1 / fp32 | "
          "b32 / fp32 |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for c in cs:
        n = c["name"]
        meds = [statistics.median(r[n][b] for r in rows) for b in (1, 32)]
        refn = f"{c['prec']} {ref}"
        vs_ref = [ratio_cell(rows, n, refn, b) if c["prec"] != "fp32" else "" for b in (1, 32)]
        vs_f32 = [ratio_cell(rows, n, "fp32", b) if c["prec"] != "fp32" else "" for b in (1, 32)]
        print(f"| {n} | {meds[0]:.1f} | {meds[1]:.1f} | {vs_ref[0]} | {vs_ref[1]} | "
              f"{vs_f32[0]} | {vs_f32[1]} |", file=out)
    print("\nEvery round (sentences/s, batch 1 / batch 32):\n", file=out)
    for i, r in enumerate(rows):
        print(f"- round {i + 1}: " + "; ".join(f"{n} {v[1]:.0f}/{v[32]:.0f}"
                                               for n, v in r.items()), file=out)
    out.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="minilm,mpnet")
    ap.add_argument("--kernels", default="avx2_sign,avx2_w16,avx2_panel,avx2_signc")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/release/mantissa"))
    ap.add_argument("--base-bin", default="")
    ap.add_argument("--isa", default="AVX2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    args.kernels = args.kernels.split(",")
    out = open(args.out, "w") if args.out else sys.stdout
    cs = contestants(args)
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            ids = make_ids(tmp, args.bin, model, args.sentences)
            rows = []
            for rd in range(args.rounds):
                order = cs[rd % len(cs):] + cs[:rd % len(cs)]
                rows.append({})
                for c in order:
                    rows[-1][c["name"]] = bench_once(c, tmp, ids, model, args)
                rows[-1] = {c["name"]: rows[-1][c["name"]] for c in cs}
                print(f"{model} round {rd + 1} done", file=sys.stderr, flush=True)
            report(model, cs, rows, args.kernels[0], out)


if __name__ == "__main__":
    main()
