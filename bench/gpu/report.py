#!/usr/bin/env python3
# report.py: turns what bench/gpu.sh run left in its work folder into the
# markdown page committed as bench/results/gpu-<date>.md: machine, test and
# sanitizer summaries, the GEMM tables with the targets checked, and
# the end-to-end table against PyTorch FP16 with energy per 1,000 sentences.
# Plain Python 3, no packages.
import argparse
import datetime
import json
import os
import re


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def load_json(path):
    t = read(path)
    try:
        return json.loads(t) if t else None
    except ValueError:
        return None


def machine(work):
    m = read(os.path.join(work, "logs", "machine.txt")) or ""
    gpu = re.search(r"\|\s+\d+\s+(NVIDIA[^|]*?)\s{2,}", m)
    drv = re.search(r"Driver Version:\s*([\d.]+)", m)
    cuda = re.search(r"release ([\d.]+)", m)
    return (gpu.group(1).strip() if gpu else "?", drv.group(1) if drv else "?",
            cuda.group(1) if cuda else "?")


def gemm_notes(g):
    """Rows gemm_bench could not time (cuBLASLt refusals, failures), and
    whether the run finished (a run cut by `timeout` leaves complete: false)."""
    lines = []
    if not g.get("complete"):
        lines.append("- **the GEMM run did not finish** (cut short): %d points recorded" %
                     len(g.get("points", [])))
    for p in g.get("points", []):
        for kind, why in sorted((p.get("notes") or {}).items()):
            if why.startswith("n/a"):  # a kind that does not apply at this m
                continue
            lines.append("- %s m=%d %s: %s" % (p["shape"], p["m"], kind, why))
    return lines


def gemm_targets(g):
    """The issue's targets on the LLM shapes, from gemm.json (null times,
    i.e. refused or failed points, are left out)."""
    lines = []
    for p in g["points"]:
        if not p["shape"].startswith("LLM"):
            continue
        fp16 = p.get("fp16_us")
        if p["m"] <= 16 and fp16:
            for kind in ("int8", "fp8", "int8d", "fp8d"):
                us = p.get(kind + "_us")
                if not us:
                    continue
                if p.get(kind + "_gbs") is None:
                    continue
                sp, pct = fp16 / us, 100 * p[kind + "_gbs"] / g["copy_gbs"]
                ok = sp >= 1.7 and pct >= 80
                name = kind[:-1] + " W8A16 direct" if kind.endswith("d") else kind + " W8A16"
                lines.append("| %s | %d | %s | %.2fx (>= 1.7x) | %.0f%% (>= 80%%) | %s |" %
                             (p["shape"], p["m"], name, sp, pct, "met" if ok else "MISSED"))
        if p["m"] >= 1024 and fp16 and p.get("w8a8_us"):
            sp = fp16 / p["w8a8_us"]
            spq = fp16 / p["w8a8+q_us"] if p.get("w8a8+q_us") else float("nan")
            lines.append("| %s | %d | FP8 W8A8 cuBLASLt | %.2fx (>= 1.6x); %.2fx with activation "
                         "quantization | | %s |" % (p["shape"], p["m"], sp, spq,
                                                    "met" if sp >= 1.6 else "MISSED"))
            if p.get("w8a8*_us") and p.get("fp16*_us"):  # gemm_bench --algos
                spb = p["fp16*_us"] / p["w8a8*_us"]
                lines.append("| %s | %d | FP8 W8A8, best of 8 cuBLASLt algorithms each side | "
                             "%.2fx (>= 1.6x) | | %s |" % (p["shape"], p["m"], spb,
                                                           "met" if spb >= 1.6 else "MISSED"))
    return lines


def mpnet_section(w):
    """MPNet's shapes on generated weights (the mpnet phase): e2e beside the
    PyTorch FP16 peer on the same weights."""
    e = load_json(os.path.join(w, "e2e-mpnet.json"))
    if not e:
        return
    peer = load_json(os.path.join(w, "peer-mpnet.json"))
    pres = {r["batch"]: r for r in (peer or {}).get("results", [])}
    print("## MPNet's shapes (all-mpnet-base-v2, weights generated from a seed), 128 tokens per sentence\n")
    if peer:
        print("- peer: PyTorch %s, transformers FP16 (%s attention), the same generated weights and ids\n" % (
            peer.get("torch"), peer.get("attention")))
    ours16 = {r["batch"]: r for r in e["results"] if r["precision"] == "fp16"}

    def vs(table, r):
        p = table.get(r["batch"])
        return "%.2fx" % (r["sentences_per_s"] / p["sentences_per_s"]) if p else "n/a"
    print("| precision | batch | sentences/s | vs PyTorch FP16 | vs our fp16 (item 3: 8-bit at least 0.95x) |")
    print("|---|---|---|---|---|")
    for r in e["results"]:
        print("| %s | %d | %.1f | %s | %s |" % (r["precision"], r["batch"], r["sentences_per_s"],
                                              vs(pres, r), vs(ours16, r)))
    for b, p in sorted(pres.items()):
        print("| PyTorch fp16 | %d | %.1f | 1.00x | |" % (b, p["sentences_per_s"]))
    print()


def ab_section(w, e, name, title, off_label, on_label, gain="%s over %s"):
    """The rows of e2e_bench's other JSON `name` (one switch turned) against
    the default rows of the same run; the last column is the default's speed
    over the other's (gain names it)."""
    ea = load_json(os.path.join(w, name))
    if not ea:
        return
    base = {(r["precision"], r["batch"]): r for r in e["results"]}
    print("### %s, same run\n" % title)
    head = gain % (on_label, off_label) if "%s" in gain else gain
    print("| precision | batch | %s, sentences/s | %s | %s |" % (off_label, on_label, head))
    print("|---|---|---|---|---|")
    for r in ea["results"]:
        b0 = base.get((r["precision"], r["batch"]))
        print("| %s | %d | %.1f | %s | %s |" % (r["precision"], r["batch"], r["sentences_per_s"],
                                              "%.1f" % b0["sentences_per_s"] if b0 else "n/a",
                                              "%.2fx" % (b0["sentences_per_s"] / r["sentences_per_s"])
                                              if b0 else "n/a"))
    print()


def act32_section(w, e):
    """The fp16/bf16 (int8/fp8) rows again with MANTISSA_CUDA_ACT16=0 (FP32 activations
    between ops, converted before each GEMM)."""
    ab_section(w, e, "e2e-act32.json",
               "16-bit activations (default) against FP32 ones (MANTISSA_CUDA_ACT16=0)",
               "FP32 activations", "16-bit activations")


def lnquant_section(w, e):
    """fp8 again with MANTISSA_CUDA_LN_QUANT=0: every W8A8 GEMM quantizes its own rows."""
    ab_section(w, e, "e2e-lnq0.json",
               "fp8: LayerNorm writing the W8A8 GEMM's E4M3 rows (default) against a "
               "quantization pass per GEMM (MANTISSA_CUDA_LN_QUANT=0)",
               "quantization pass", "in LayerNorm")


def i8w8a8_section(w, e):
    """int8 again with MANTISSA_CUDA_INT8_W8A8=1 (INT8 W8A8 on 8-bit tensor cores allowed),
    and the paths the tuner chose there."""
    ab_section(w, e, "e2e-i8w8a8.json",
               "int8 with INT8 W8A8 allowed (MANTISSA_CUDA_INT8_W8A8=1) against int8's default "
               "(W8A16 paths only)", "INT8 W8A8 allowed", "default",
               gain="default over W8A8 allowed (< 1: W8A8 faster)")
    ea = load_json(os.path.join(w, "e2e-i8w8a8.json"))
    if ea:
        print("GEMM paths with INT8 W8A8 allowed:\n")
        paths_section(ea)


def paths_section(e):
    """The GEMMs of one eager forward by path, per 8-bit precision and batch
    (e2e_bench's gemm_paths): what the load's tuner chose at that m."""
    rows = [r for r in e["results"] if r.get("gemm_paths") and r["precision"] in ("int8", "fp8")]
    if not rows:
        return
    keys = ["fused", "direct", "dequant", "w8a8", "w8a8_i8", "w8a8_ln", "gelu_epilogue", "bias_pass"]
    print("### GEMM paths of one forward (8-bit precisions; the tuner's choice at that batch)\n")
    print("| precision | batch | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for r in rows:
        print("| %s | %d | %s |" % (r["precision"], r["batch"],
                                    " | ".join(str(r["gemm_paths"].get(k, "")) for k in keys)))
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--phases", default="all")
    a = ap.parse_args()
    w = a.work
    gpu, drv, cuda = machine(w)
    commit = (read(os.path.join(w, "commit")) or "unknown\n").strip().replace("\n", " ")
    print("# GPU results: %s\n" % gpu)
    print("- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    print("- device: %s, driver %s, CUDA toolkit %s" % (gpu, drv, cuda))
    print("- code: %s" % commit)
    print("- command: `bench/gpu.sh run %s` (bundle from `bench/gpu.sh pack`)" % a.phases)
    print("- model: all-MiniLM-L6-v2 with its tensors rounded to FP16 and widened back to FP32 "
          "(the device tool's 64 MiB carry limit); every comparison below uses those same weights "
          "on both sides\n")

    stale = read(os.path.join(w, "logs", "stale.txt"))
    if stale:
        print("**%s**\n" % stale.strip())
    skipped = read(os.path.join(w, "logs", "skipped.txt"))
    if skipped:
        print("**Not run in this call** (time budget): %s\n" % "; ".join(skipped.split("\n")).strip("; "))
    log_lines(w, "tests.log", "Tests (tests/gpu)",
              r"(passed, \d+ failed|^FAIL|SKIP|mean cos|device 0:)")
    log_lines(w, "sanitizer.log",
              "compute-sanitizer (test_gpu_kernels --quick; memcheck also on test_gpu_smooth --quick)",
              r"(ERROR SUMMARY|RACECHECK SUMMARY|^sanitizer|passed, \d+ failed)")

    gmd = read(os.path.join(w, "gemm.md"))
    g = load_json(os.path.join(w, "gemm.json"))
    if gmd:
        body = gmd.split("\n", 1)[1] if gmd.startswith("# ") else gmd
        print("## GEMM microbenchmark (bench/gpu/gemm_bench)\n")
        print(body.replace("\n## ", "\n### "))
    if g:
        notes = gemm_notes(g)
        if notes:
            print("### Points not timed\n")
            print("\n".join(notes) + "\n")
        t = gemm_targets(g)
        if t:
            print("### Targets (LLM shapes)\n")
            print("| shape | m | kernel | vs cuBLASLt FP16 | of measured copy bandwidth | |")
            print("|---|---|---|---|---|---|")
            print("\n".join(t) + "\n")

    e = load_json(os.path.join(w, "e2e.json"))
    peer = load_json(os.path.join(w, "peer.json"))
    if e:
        pres = {r["batch"]: r for r in (peer or {}).get("results", [])}
        comp = load_json(os.path.join(w, "peer-compile.json"))
        cres = {r["batch"]: r for r in (comp or {}).get("results", [])}
        print("## End to end (bench/gpu/e2e_bench, 128 tokens per sentence)\n")
        print("- Mantissa: ids in, pooled and normalised vectors on the host out (`mt_model_forward`), "
              "median run; energy from NVML's total-energy counter over the timed runs (%s)" % e.get("energy"))
        if peer:
            print("- peer: PyTorch %s, transformers FP16 with SDPA attention, the same ids and weights, "
                  "same run (%s)" % (peer.get("torch"), peer.get("energy")))
        if comp:
            print("- peer: the same PyTorch model under torch.compile (inductor, static shapes), batches %s "
                  "(compilation in the warm-up: %s s)" % (
                      ", ".join(str(b) for b in sorted(cres)),
                      ", ".join("%s" % cres[b].get("warmup_s") for b in sorted(cres))))
        print("\n| precision | batch | sentences/s | J per 1000 sentences | vs PyTorch FP16 | vs torch.compile FP16 "
              "| vs our fp16 (issue 24 item 3: an 8-bit variant at least 0.95x) |")
        print("|---|---|---|---|---|---|---|")
        ours16 = {r["batch"]: r for r in e["results"] if r["precision"] == "fp16"}

        def vs(table, r):
            p = table.get(r["batch"])
            return "%.2fx" % (r["sentences_per_s"] / p["sentences_per_s"]) if p else "n/a"

        def joules(r):
            return "no NVML counter" if r["j_per_1000"] is None else "%.2f" % r["j_per_1000"]
        for r in e["results"]:
            print("| %s | %d | %.1f | %s | %s | %s | %s |" % (r["precision"], r["batch"], r["sentences_per_s"],
                                                              joules(r), vs(pres, r), vs(cres, r), vs(ours16, r)))
        for b, p in sorted(pres.items()):
            print("| PyTorch fp16 | %d | %.1f | %s | 1.00x | %s | |" % (b, p["sentences_per_s"], joules(p), vs(cres, p)))
        for b, p in sorted(cres.items()):
            print("| torch.compile fp16 | %d | %.1f | %s | %s | 1.00x | |" % (b, p["sentences_per_s"], joules(p),
                                                                          vs(pres, p)))
        print()
        print("raw: mantissa `%s`\n" % json.dumps(e))
        if peer:
            print("raw: peer `%s`\n" % json.dumps(peer))
        if comp:
            print("raw: compile peer `%s`\n" % json.dumps(comp))
        act32_section(w, e)
        lnquant_section(w, e)
        i8w8a8_section(w, e)
        paths_section(e)
    elif a.phases in ("all",) or "e2e" in a.phases:
        print("## End to end\n\nno results (see logs.tar.gz: e2e.err, peer.err)\n")
    mpnet_section(w)
    serve_section(w, a.phases)
    peers_section(w, a.phases)
    logs_section(w)


def log_lines(w, name, title, pattern):
    """A section of the lines of logs/name that match pattern, if the log exists."""
    text = read(os.path.join(w, "logs", name))
    if text is None:
        return
    print("## %s\n\n```" % title)
    for l in text.splitlines():
        if re.search(pattern, l):
            print(l)
    print("```\n")


def logs_section(w):
    """ASan pass, profile and split-K sweep, as the phases wrote them."""
    log_lines(w, "asan.log", "Backend tests under ASan+UBSan (host side)",
              r"(passed, \d+ failed|^FAIL|ERROR: AddressSanitizer|runtime error|^asan |SUMMARY)")
    prof = read(os.path.join(w, "logs", "profile.md"))
    if prof:
        print("## Profile (bench/gpu.sh run profile)\n")
        print(prof)
    sts = read(os.path.join(w, "logs", "stsb.md"))
    if sts:
        print("## STS-B test split, Spearman x100 (`mantissa eval`, same FP16-rounded weights)\n")
        print("| device | precision | Spearman x100 |\n|---|---|---|")
        print(sts)
    sweep = read(os.path.join(w, "logs", "sweep.md"))
    if sweep:
        print("## Fused kernel: split-K target sweep (gemm_bench --target-blocks)\n")
        print(sweep)


def peers_section(w, phases):
    """The GPU server against sentence-transformers FP16 (bench/gpu/serve_peers.py)."""
    md = read(os.path.join(w, "serve-peers.md"))
    if not md:
        if "peers" in phases:
            print("## Server against sentence-transformers\n\nno results (see logs.tar.gz: "
                  "logs/serve-peers.log)\n")
        return
    print("## Server on the GPU against sentence-transformers FP16 (bench/gpu/serve_peers.py)\n")
    print(md)


def serve_section(w, phases):
    """The server on the GPU under a precision switch (bench/gpu/serve_switch.py)."""
    s = load_json(os.path.join(w, "serve.json"))
    if not s:
        if phases == "all" or "serve" in phases:
            print("## Server on the GPU\n\nno results (see logs.tar.gz: logs/serve.log)\n")
        return
    print("## Server on the GPU: precision switches under load (bench/gpu/serve_switch.py)\n")
    print("- `mantissa serve`, model device \"cuda\", one variant switched by rewriting the config "
          "file; 16 client threads, closed loop, one sentence per request")
    print("- answered %s, failed %s, server exit status %s: **%s**\n" % (
        s.get("answered"), s.get("failures"), s.get("exit_status"),
        "zero failed requests" if s.get("ok") else "NOT OK"))
    print("| precision | config write -> first answer in it, s | req/s while served | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for r in s.get("precisions", []):
        print("| %s | %s | %s | %s | %s |" % (r["precision"], r["switch_s"], r["rps"], r["p50_ms"], r["p99_ms"]))
    if s.get("failure_examples"):
        print("\nfailures: `%s`" % json.dumps(s["failure_examples"]))
    print("\nstart-up log: `%s`\n" % " | ".join(s.get("startup_log", [])))


if __name__ == "__main__":
    main()
