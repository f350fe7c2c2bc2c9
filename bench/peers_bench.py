#!/usr/bin/env python3
"""peers_bench.py: `make bench-peers`: Mantissa against the real peer
servers on this machine, side by side: llama.cpp's llama-server (F32, Q8_0)
and infinity-emb (torch FP32), all serving all-MiniLM-L6-v2 over POST
/v1/embeddings on loopback, all driven by the same load generator
(bench/loadgen.c) with the same STS-B sentences, one per request.

For each setting: start the server; check its vectors against Mantissa's
FP32 on 64 sentences (refuse to time it below mean cosine 0.99999 for full
precision, 0.99 for 8-bit); measure drift on all STS-B test sentences (mean
and min cosine to Mantissa FP32, STS-B Spearman x100); then closed loop at
concurrency 1, 16 and 64, and open loop (Poisson) at 50% and 90% of the
setting's own best closed-loop rate. Per point: requests/s, p50, p99,
errors, the server's RSS and peak RSS, CPU seconds per 1,000 requests of its
process tree, and the load average (the machine is shared). Peers' speed
flags get a small sweep first (llama-server -t and -np, infinity
--batch-size), recorded in the report; the best is timed.

Setup (bench/peers/setup.sh) builds llama-server from the llama.cpp vendored
in llama-cpp-python's sdist and installs infinity-emb in .venv-peers.

--isa avx2 runs every server as on a CPU of that instruction-set level:
Mantissa with ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN and our kernels step down
together), llama-server built for AVX2 alone (bench/peers/setup.sh
PEERS_ISA=avx2: build/peers/llama-build-avx2) and infinity's torch with
ATEN_CPU_CAPABILITY=avx2. --passages sends retrieval-sized inputs instead of
sentences: consecutive STS-B test sentences joined to about 150 words
(about 190 tokens), one per request; their drift has no STS-B Spearman.

  bench/peers_bench.py [--seconds 6] [--only NAME,...] [--isa avx2] [--passages] [--out FILE]
"""
import argparse
import csv
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_targets import issue27_table, targets_table  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
STSB = os.path.join(ROOT, "..", "shared", "data", "stsb", "sts-test.csv")
PEERS = os.path.join(ROOT, "build", "peers")
LOADGEN = os.path.join(ROOT, "build", "release", "bench", "loadgen")
MANTISSA = os.path.join(ROOT, "build", "release", "mantissa")
LLAMA = os.path.join(PEERS, "llama-build", "bin", "llama-server")
ISA = None  # --isa: the instruction-set level every server runs at (None: the CPU's own)
INFINITY = os.path.join(ROOT, ".venv-peers", "bin", "infinity_emb")


def stsb():
    """(unique sentences, pairs as index pairs, gold scores)."""
    sents, index, pairs, gold = [], {}, [], []
    with open(STSB, newline="") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) < 7:
                continue
            ids = []
            for t in (row[5], row[6]):
                if t not in index:
                    index[t] = len(sents)
                    sents.append(t)
                ids.append(index[t])
            pairs.append(ids)
            gold.append(float(row[4]))
    return sents, pairs, gold


def passages(sents, words=150):
    """Consecutive sentences joined until each passage has about `words` words."""
    out, cur = [], []
    for t in sents:
        cur.append(t)
        if sum(len(c.split()) for c in cur) >= words:
            out.append(" ".join(cur))
            cur = []
    return out


def isa_env(server):
    """The environment that runs server at --isa's level."""
    if not ISA:
        return {}
    if server == "mantissa":
        return {"ONEDNN_MAX_CPU_ISA": ISA.upper()}
    if server == "infinity":
        return {"ATEN_CPU_CAPABILITY": ISA.lower(), "ONEDNN_MAX_CPU_ISA": ISA.upper()}
    return {}


def llama_bin():
    """llama-server built for --isa's level (bench/peers/setup.sh PEERS_ISA)."""
    if not ISA:
        return LLAMA
    return os.path.join(PEERS, "llama-build-%s" % ISA.lower(), "bin", "llama-server")


def ranks(x):
    """Ranks from 1, ties sharing their mean rank (as Spearman's rho needs)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def post(port, body, timeout=120):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/embeddings" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def embed_all(port, texts, batch=32):
    out = []
    for i in range(0, len(texts), batch):
        d = post(port, {"model": "minilm", "input": texts[i:i + batch]})
        rows = sorted(d["data"], key=lambda x: x.get("index", 0))
        out += [r["embedding"] for r in rows]
    v = np.array(out, dtype=np.float64)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def tree_pids(pid):
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return pids


def tree_stat(pid):
    """(RSS MiB, peak RSS MiB, CPU seconds) of the process tree."""
    rss = hwm = cpu = 0.0
    for p in tree_pids(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) / 1024
                    elif line.startswith("VmHWM:"):
                        hwm += int(line.split()[1]) / 1024
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
                cpu += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return rss, hwm, cpu


class Server:
    """A server process started in its own session; ready(port) raises
    until it answers (default: an embedding request for "minilm")."""
    def __init__(self, name, argv, port, env=None, cwd=None, log=None, ready=None):
        self.name, self.port = name, port
        e = dict(os.environ)
        e.update(env or {})
        self.log = open(log or os.devnull, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=e,
                                     cwd=cwd or ROOT, start_new_session=True)
        t0 = time.time()
        while time.time() - t0 < 300:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %s while starting" % (name, self.proc.returncode))
            try:
                if ready:
                    ready(port)
                else:
                    post(port, {"model": "minilm", "input": ["ready?"]}, timeout=5)
                self.start_s = time.time() - t0
                return
            except Exception:
                time.sleep(0.5)
        raise RuntimeError("%s did not answer in 300 s" % name)

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except Exception:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.log.close()


def write_bodies(sents, tmp, model="minilm"):
    """The load generator's bodies file in tmp: one OpenAI embeddings request
    a line, a sentence each; its path."""
    bodies = os.path.join(tmp, "bodies.txt")
    with open(bodies, "w") as f:
        for t in sents:
            f.write(json.dumps({"model": model, "input": t}) + "\n")
    return bodies


def loadgen(port, bodies, seconds, conc=None, rate=None, timing=None, extra=()):
    """extra: more loadgen flags (--path, --expect, --timeout-s)."""
    args = [LOADGEN, "--port", str(port), "--bodies", bodies, "--seconds", str(seconds)]
    args += list(extra)
    args += ["--concurrency", str(conc)] if conc else ["--rate", "%.1f" % rate]
    args += ["--timing", timing] if timing else []
    r = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 300)
    return json.loads(r.stdout.strip().splitlines()[-1])


def point(srv, bodies, seconds, conc=None, rate=None, timing=None, extra=()):
    """One timed point against srv: loadgen's figures with the load average,
    the server's RSS and peak and CPU per 1,000 requests; req/s as good
    answers over the seconds (loadgen prints rps to 0.1 only)."""
    la = os.getloadavg()[0]
    _, _, cpu0 = tree_stat(srv.proc.pid)
    g = loadgen(srv.port, bodies, seconds, conc, rate, timing, extra)
    rss, hwm, cpu1 = tree_stat(srv.proc.pid)
    if g.get("seconds"):
        g["rps"] = g["good"] / g["seconds"]
    g.update(load=la, rss_mib=rss, peak_mib=hwm,
             cpu_per_1k=1000 * (cpu1 - cpu0) / g["good"] if g["good"] else None,
             errors=g["non200"] + g["bad_body"] + g["conn_errors"] + g["timeouts"])
    return g


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def mantissa(precision, delay, tmp, size=64, tokens=16384, device=None):
    """A starter of `mantissa serve` with one variant; device: the model's
    "device" field (None: the config's default, the CPU)."""
    def start(port, log):
        cfg = {"server": {"listen": "127.0.0.1:%d" % port, "log_level": "warn",
                          "max_inputs": 64},
               "models": [{"name": "minilm", "path": MODEL,
                           "batching": {"max_batch_size": size, "max_batch_tokens": tokens,
                                        "max_queue_delay_us": delay},
                           "variants": [{"name": precision, "precision": precision}]}]}
        if device:
            cfg["models"][0]["device"] = device
        path = os.path.join(tmp, "m-%s-%s-%s-%d-%d.json" % (device or "default", precision, delay,
                                                             size, tokens))
        with open(path, "w") as f:
            json.dump(cfg, f)
        return Server("mantissa", [MANTISSA, "serve", "--config", path], port,
                      env=isa_env("mantissa"), log=log)
    return start


def llama(gguf, threads, slots, spin):
    def start(port, log):
        env = {"GOMP_SPINCOUNT": str(spin)} if spin is not None else {}
        argv = [llama_bin(), "-m", os.path.join(PEERS, gguf), "--embeddings", "--pooling", "mean",
                "-t", str(threads), "-np", str(slots), "-c", str(512 * slots),
                "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
        return Server("llama-server", argv, port, env=env, log=log)
    return start


def infinity(batch):
    def start(port, log):
        env = {"HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0",
               "DO_NOT_TRACK": "1"}
        env.update(isa_env("infinity"))
        argv = [INFINITY, "v2", "--model-id", MODEL, "--served-model-name", "minilm",
                "--url-prefix", "/v1", "--host", "127.0.0.1", "--port", str(port),
                "--engine", "torch", "--device", "cpu", "--batch-size", str(batch)]
        return Server("infinity", argv, port, env=env, log=log)
    return start


def settings(tmp):
    """(name, class, full precision?, [(flags label, starter), ...] sweep)."""
    m = []
    for prec in ("fp32", "int8", "int8g"):
        for label, delay in (("delay 0", 0), ("auto", "auto")):
            if prec == "int8g" and delay != 0:
                continue  # int8g: the default batching only
            m.append(("Mantissa %s, %s" % (prec, label), prec == "fp32",
                      [("-", mantissa(prec, delay, tmp))]))
    for name, gguf in (("llama-server F32", "minilm-f32.gguf"), ("llama-server Q8_0",
                                                                   "minilm-q8_0.gguf")):
        m.append((name, gguf.endswith("f32.gguf"),
                  [("-t %d -np %d%s" % (t, np_, "" if spin is None else
                                         " GOMP_SPINCOUNT=%d" % spin), llama(gguf, t, np_, spin))
                   for t in (2, 1) for np_ in (1, 4) for spin in (None, 300)]))
    m.append(("infinity torch FP32", True,
              [("--batch-size %d" % b, infinity(b)) for b in (16, 64)]))
    return m


def vector_check(port, ref, sents, full):
    got = embed_all(port, sents[:64])
    cos = (got * ref[:64]).sum(1)
    want = 0.99999 if full else 0.99
    return float(cos.mean()), cos.mean() >= want, want


def drift(port, ref, sents, pairs, gold):
    v = embed_all(port, sents)
    cos = (v * ref).sum(1)
    if not pairs:  # passages: no gold similarity
        return {"mean_cos": float(cos.mean()), "min_cos": float(cos.min()), "spearman": None}
    sim = [float(v[a] @ v[b]) for a, b in pairs]
    return {"mean_cos": float(cos.mean()), "min_cos": float(cos.min()),
            "spearman": 100 * spearman(np.array(sim), np.array(gold))}


def sweep(cands, bodies, tmp, seconds, extra=()):
    """The flags with the best closed-loop rate at concurrency 16: (label,
    starter, [(label, req/s or None, why), ...])."""
    if len(cands) == 1:
        return cands[0][0], cands[0][1], []
    rows = []
    for label, start in cands:
        port = free_port()
        try:
            srv = start(port, os.path.join(tmp, "sweep.log"))
        except RuntimeError as e:
            rows.append((label, None, str(e)))
            continue
        try:
            g = loadgen(port, bodies, seconds, conc=16, extra=extra)
            rows.append((label, g["rps"], ""))
        finally:
            srv.stop()
    best = max((r for r in rows if r[1]), key=lambda r: r[1])
    return best[0], dict(cands)[best[0]], rows


def run_setting(name, full, cands, data, tmp, secs, sweep_secs):
    sents, pairs, gold, ref, bodies = data
    label, start, swept = sweep(cands, bodies, tmp, sweep_secs)
    port = free_port()
    srv = start(port, os.path.join(tmp, name.replace(" ", "_") + ".log"))
    res = {"name": name, "flags": label, "sweep": swept, "start_s": srv.start_s}
    try:
        mean, ok, want = vector_check(port, ref, sents, full)
        res["check"] = {"mean_cos": mean, "ok": bool(ok), "want": want}
        if not ok:
            return res
        res["drift"] = drift(port, ref, sents, pairs, gold)
        res["points"] = {}
        for c in (1, 16, 64):
            res["points"]["c=%d" % c] = point(srv, bodies, secs, conc=c)
        cap = max(res["points"][k]["rps"] for k in res["points"])
        res["capacity"] = cap
        for frac in (0.5, 0.9):
            res["points"]["Poisson %d%%" % (100 * frac)] = point(srv, bodies, secs,
                                                                rate=frac * cap)
    finally:
        srv.stop()
    return res


def mantissa_reference(sents, tmp):
    port = free_port()
    srv = mantissa("fp32", 0, tmp)(port, None)
    try:
        return embed_all(port, sents)
    finally:
        srv.stop()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mantissa_isa(binary=MANTISSA, env=None):
    """The instruction-set level binary's kernels run at: `mantissa cpu`'s
    isa line (with env added to the environment), or "?"."""
    try:
        out = subprocess.run([binary, "cpu"], capture_output=True, text=True,
                             env=dict(os.environ, **(env or {}))).stdout
    except OSError:
        return "?"
    return next((x.split(":", 1)[1].strip() for x in out.splitlines()
                 if x.startswith("isa:")), "?")


def mantissa_isa_commit():
    """The ISA level Mantissa runs at here (under isa_env) and its build's
    commit (`mantissa --version`), for the report's header."""
    try:
        ver = subprocess.run([MANTISSA, "--version"], capture_output=True,
                             text=True).stdout.strip() or "?"
    except OSError:
        ver = "?"
    return mantissa_isa(env=isa_env("mantissa")), ver


def rps_ratio(res, a, b, pt):
    """Setting a's req/s over setting b's at point pt in res ({name: result}),
    or None where either was not timed."""
    ra, rb = res.get(a, {}).get("points", {}), res.get(b, {}).get("points", {})
    if pt not in ra or pt not in rb or not rb[pt]["rps"]:
        return None
    return ra[pt]["rps"] / rb[pt]["rps"]


def sweep_lines(results, rate="%.0f req/s"):
    """The report's lines of the peers' flag sweeps."""
    return ["- %s: " % r["name"] + "; ".join(
        "`%s` %s" % (lab, rate % v if v is not None else "failed: " + why)
        for lab, v, why in r["sweep"])
            + " -> timed with `%s`" % r["flags"] for r in results if r["sweep"]]


def convert_gguf(src, outtype, out, wrapper=None):
    """llama.cpp's convert_hf_to_gguf.py (as vendored in the sdist
    bench/peers/setup.sh unpacks) on folder src into out, its log beside it;
    wrapper: Python run instead of the script, which must call it (with
    %(src)r, %(argv)r). True when it wrote out."""
    lsrc = os.path.join(PEERS, "llama_cpp_python-0.3.36", "vendor", "llama.cpp")
    argv = [src, "--outtype", outtype, "--outfile", out]
    cmd = (["-c", wrapper % {"src": lsrc, "argv": argv}] if wrapper else
           [os.path.join(lsrc, "convert_hf_to_gguf.py")] + argv)
    with open(out + ".log", "w") as f:
        r = subprocess.run([os.path.join(ROOT, ".venv-peers", "bin", "python")] + cmd, stdout=f,
                           stderr=subprocess.STDOUT, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=os.path.join(lsrc, "gguf-py")))
    return r.returncode == 0


def fmt(v, f="%.1f"):
    return "-" if v is None else f % v


def report(results, args, t0):
    L = ["# Mantissa against llama-server and infinity-emb on this machine (%s)"
         % datetime.date.today().isoformat(), ""]
    L += ["Machine: %s, %d cores (shared with other work: the 1-minute load average is given "
          "per point), %s. All servers on loopback with the same 2 cores; the load generator "
          "(bench/loadgen.c, C, epoll) on the same cores. %s per request, %d s per point. "
          "Made by `make bench-peers` in %.0f min." %
          (cpu_model(), os.cpu_count(), platform.platform(),
           "One passage of consecutive STS-B test sentences (about 150 words)" if args.passages
           else "One STS-B test sentence", args.seconds, (time.time() - t0) / 60), ""]
    L += ["Mantissa: `mantissa cpu` isa %s; %s." % mantissa_isa_commit(), ""]
    if ISA:
        L += ["Instruction-set level: **%s** for every server (Mantissa with "
              "ONEDNN_MAX_CPU_ISA=%s, which steps oneDNN and its own kernels down; "
              "llama-server built for it alone, bench/peers/setup.sh PEERS_ISA=%s; infinity's "
              "torch with ATEN_CPU_CAPABILITY=%s), on a CPU that has more: an emulation of such "
              "a CPU's instruction set, not of its cores." % (ISA, ISA.upper(), ISA, ISA), ""]
    L += ["## Targets (issue 13, computed by bench/peers_targets.py)", ""]
    L += targets_table(results)
    L += ["", "## Targets (issue 27, computed by bench/peers_targets.py)", ""]
    L += issue27_table(results, args.passages)
    L += ["", "## Throughput and latency", "",
          "| setting | flags | point | req/s | p50 ms | p99 ms | errors | RSS / peak MiB | "
          "CPU s per 1k req | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for k, g in r.get("points", {}).items():
            L.append("| %s | %s | %s | %.0f | %.2f | %.2f | %d | %.0f / %.0f | %s | %.1f |" % (
                r["name"], r["flags"], k, g["rps"], g["p50_ms"], g["p99_ms"], g["errors"],
                g["rss_mib"], g["peak_mib"], fmt(g["cpu_per_1k"], "%.2f"), g["load"]))
        if "points" not in r:
            L.append("| %s | %s | not timed | | | | | | | |" % (r["name"], r["flags"]))
    L += ["", "## Drift from Mantissa FP32 (all %d %s)" % (
        args.nsents, "passages" if args.passages else "STS-B test sentences"), "",
          "| setting | vector check (64 sentences) | mean cosine | min cosine | STS-B Spearman x100 |",
          "|---|---|---|---|---|"]
    for r in results:
        c, d = r.get("check", {}), r.get("drift", {})
        L.append("| %s | %s %s | %s | %s | %s |" % (
            r["name"], fmt(c.get("mean_cos"), "%.6f"), "ok" if c.get("ok") else
            "REFUSED (< %s)" % c.get("want"), fmt(d.get("mean_cos"), "%.6f"),
            fmt(d.get("min_cos"), "%.6f"), fmt(d.get("spearman"), "%.2f")))
    L += ["", "## Peer flag sweeps (closed loop, concurrency 16, %d s each)" % args.sweep_seconds,
          ""]
    L += sweep_lines(results)
    return "\n".join(L) + "\n"


def ideal_bounds(results, sents, tmp):
    """For Mantissa fp32 and int8g (delay 0): the open-loop p50 / p99 of an
    ideal server on this run's engine times (bench/openloop_bound.py), into
    the setting's results as "ideal"."""
    import openloop_bound as ob  # imports this module: not at the top
    names = ("Mantissa fp32, delay 0", "Mantissa int8g, delay 0")
    mine = [r for r in results if r["name"] in names and "points" in r]
    if not mine:
        return
    print("peers_bench: the ideal open-loop bound ...", file=sys.stderr, flush=True)
    ids = os.path.join(tmp, "ids.json")
    with open(ids, "w") as f:
        json.dump(ob.token_ids(sents, tmp), f)
    saved = dict(os.environ)
    os.environ.update(isa_env("mantissa"))  # the engine times at the servers' level
    try:
        for r in mine:
            r["ideal"] = ob.bound(ob.engine_times(r["name"].split()[1].rstrip(","), ids, tmp, 2),
                                  64)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--sweep-seconds", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--out")
    ap.add_argument("--json")
    ap.add_argument("--isa", default="", help="run every server at this ISA level (avx2)")
    ap.add_argument("--passages", action="store_true",
                    help="inputs of about 150 words (consecutive STS-B sentences)")
    args = ap.parse_args()
    global ISA
    ISA = args.isa or None
    t0 = time.time()
    sents, pairs, gold = stsb()
    if args.passages:
        sents, pairs, gold = passages(sents), [], []
    args.nsents = len(sents)
    with tempfile.TemporaryDirectory() as tmp:
        bodies = write_bodies(sents, tmp)
        ref = mantissa_reference(sents, tmp)
        data = (sents, pairs, gold, ref, bodies)
        results = []
        for name, full, cands in settings(tmp):
            if args.only and not any(o.strip().lower() in name.lower()
                                     for o in args.only.split(",")):
                continue
            print("peers_bench: %s ..." % name, file=sys.stderr, flush=True)
            try:
                results.append(run_setting(name, full, cands, data, tmp, args.seconds,
                                           args.sweep_seconds))
            except Exception as e:  # recorded: a peer that fails is a row, not a crash
                results.append({"name": name, "flags": "-", "sweep": [], "error": str(e)})
                print("peers_bench: %s failed: %s" % (name, e), file=sys.stderr, flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
        if not args.passages:  # the bound models sentence traffic (issue 13)
            ideal_bounds(results, sents, tmp)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    text = report(results, args, t0)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
