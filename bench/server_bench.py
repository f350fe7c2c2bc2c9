#!/usr/bin/env python3
"""server_bench.py: `make bench-server`: the serving core under load, on
loopback, in one run.

For each scheduler setting (batching off = max_batch_size 1; batching on
with a fixed max_queue_delay_us; batching on with "auto"), it starts the
real server, drives POST /v2/models/minilm/infer (KServe JSON, one STS-B
sentence per request, rotating over 256 sentences) with wrk at
concurrency 1, 8 and 64 (closed loop: one connection per client), and
reads requests/s, p50 and p99 from wrk and the batch sizes and compute
time from the server's /metrics. A perf_analyzer run at concurrency 64
(batching on) cross-checks wrk with NVIDIA's own tool, and perf_analyzer
also drives every setting open loop (Poisson arrivals at two rates),
where latency is not tied to throughput as it is with closed-loop
clients. The HTTP + JSON
overhead at batch 1 is the client-side mean latency at concurrency 1
(batching off) less the server's mean forward time, over that forward
time; it is measured for the short STS-B sentences and again for one
128-token text (the shape `make bench` uses), since the overhead is
nearly fixed per request while the forward grows with the text.

Writes a markdown report to stdout and, with --out, to a file.
Both the load generator and the server share this machine's cores: the
figures are for that set-up, and say so.
"""
import argparse
import csv
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
STSB = os.path.join(ROOT, "..", "shared", "data", "stsb", "sts-test.csv")

SETTINGS = [
    ("batching off", {"max_batch_size": 1, "max_queue_delay_us": 0}),
    ("batching on, fixed 2 ms", {"max_batch_size": 64, "max_queue_delay_us": 2000}),
    ("batching on, fixed 0 ms", {"max_batch_size": 64, "max_queue_delay_us": 0}),
    ("batching on, auto (target 250 ms)", {"max_batch_size": 64, "max_queue_delay_us": "auto",
                                           "latency_target_ms": 250}),
    ("batching on, auto (target 20 ms)", {"max_batch_size": 64, "max_queue_delay_us": "auto",
                                          "latency_target_ms": 20}),
]


NOTES = """
- The machine is shared with other work (load average above): forward times move by
  tens of percent from run to run, so ratios between rows of one run mean more than
  absolute figures.
- perf_analyzer runs its 64 client threads on the same 2 cores; wrk runs one.
- OpenMP threads spin 300 times (a few microseconds) before sleeping (GOMP_SPINCOUNT=300,
  set by `mantissa serve` unless the user sets OMP_WAIT_POLICY or GOMP_SPINCOUNT;
  server/main.c says why).
"""


def header_lines():
    """A report's date and machine lines."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = re.search(r"model name\s*:\s*(.*)", f.read()).group(1)
    except (OSError, AttributeError):
        pass
    return ["- date: %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
            "- machine: %s, %d cores (server and load generator share them), %s" % (
                cpu, os.cpu_count(), platform.platform())]


def write_report(lines, out):
    """Prints the markdown report and writes it to out (when given)."""
    report = "\n".join(lines) + "\n"
    print(report)
    if out:
        with open(out, "w") as f:
            f.write(report)


def long_text(url, words, want=128):
    """A text that the server's own tokenizer makes exactly `want` tokens
    ([CLS] and [SEP] included), from the STS-B words: the longest prefix of
    words with at most `want` tokens, found by bisection on the count the
    KServe answer reports (parameters.prompt_tokens)."""
    def tokens(n):
        body = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                       "data": [" ".join(words[:n])]}]}).encode()
        req = urllib.request.Request(url + "/v2/models/minilm/infer", data=body,
                                     headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req).read())["parameters"]["prompt_tokens"]
    lo, hi = 1, min(len(words), want)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tokens(mid) <= want:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]), tokens(lo)


def sentences(n=256):
    out = []
    try:
        with open(STSB, newline="") as f:
            for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if len(row) >= 7:
                    out.append(row[5])
                if len(out) == n:
                    break
    except OSError:
        pass
    if not out:
        out = ["A man is playing a guitar.", "A dog runs across the field.",
               "The weather is lovely today in the park.", "Someone is slicing an onion."]
    return out


class Server:
    def __init__(self, binary, batching, tmp, precision="fp32", server=None):
        cfg = {"server": dict({"listen": "127.0.0.1:0", "log_level": "warn",
                               "max_inputs": 256}, **(server or {})),
               "models": [{"name": "minilm", "path": MODEL, "batching": dict(batching,
                                                                             max_queue=4096),
                           "variants": [{"name": "fp32", "precision": precision}]}]}
        path = os.path.join(tmp, "bench.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.proc = subprocess.Popen([binary, "serve", "--config", path], cwd=ROOT,
                                     stderr=subprocess.PIPE, text=True)
        self.port = None
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server did not start")
            # the start-up line, in either log format: "... serving on ADDR:PORT" or
            # {"msg":"serving on",...,"port":PORT,...}
            m = re.search(r'serving on(?: .*:|".*"port":)(\d+)', line)
            if m:
                self.port = int(m.group(1))
                g = re.search(r'"grpc_port":(\d+)|KServe v2 gRPC on .*:(\d+)', line)
                self.grpc_port = int(g.group(1) or g.group(2)) if g else None
                break
        self.url = "http://127.0.0.1:%d" % self.port

    def metrics(self):
        text = urllib.request.urlopen(self.url + "/metrics").read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=120)
        self.proc.stderr.close()
        return rc


M = '{model="minilm",variant="fp32"}'


def wrk_script(tmp, texts, name="infer.lua"):
    bodies = [json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                      "data": [t]}]}) for t in texts]
    lua = ["bodies = {"]
    lua += ["  %s," % json.dumps(b) for b in bodies]
    lua += ["}", "counter = 0",
            "request = function()",
            "  counter = counter + 1",
            "  local b = bodies[(counter % #bodies) + 1]",
            "  return wrk.format('POST', '/v2/models/minilm/infer',"
            " {['Content-Type'] = 'application/json'}, b)",
            "end",
            "done = function(summary, latency, requests)",
            "  io.write(string.format('JSON {\"requests\": %d, \"duration_us\": %d, "
            "\"non2xx\": %d, \"errors\": %d, \"p50_us\": %d, \"p99_us\": %d, \"mean_us\": %f}\\n',"
            " summary.requests, summary.duration, summary.errors.status,"
            " summary.errors.connect + summary.errors.read + summary.errors.write"
            " + summary.errors.timeout, latency:percentile(50), latency:percentile(99),"
            " latency.mean))",
            "end"]
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("\n".join(lua) + "\n")
    return path


def measure(srv, script, conc, seconds):
    """A wrk run between two reads of /metrics: wrk's figures plus the
    batches, texts, tokens and forward time the server counted meanwhile."""
    before = srv.metrics()
    w = run_wrk(srv.url, script, conc, seconds)
    after = srv.metrics()

    def delta(name):
        return after[name + M] - before[name + M]
    nb = delta("mantissa_batch_size_count")
    w.update(batches=nb, texts=delta("mantissa_texts_total"),
             tokens=delta("mantissa_tokens_total"))
    w["mean_batch"] = w["texts"] / nb if nb else 0
    w["compute_ms_per_batch"] = 1e3 * delta("mantissa_compute_duration_seconds_sum") / nb if nb else 0
    return w


def ovh(w):
    """Batch-1 overhead of a measure() run: client mean latency less the
    server's mean forward time."""
    client, compute_ms = w["mean_us"] / 1e3, w["compute_ms_per_batch"]
    return {"client_mean_ms": client, "compute_ms": compute_ms,
            "overhead_us": 1e3 * (client - compute_ms),
            "overhead_pct": 100 * (client - compute_ms) / compute_ms}


def run_wrk(url, script, conc, seconds):
    cmd = ["wrk", "-t", "1", "-c", str(conc), "-d", "%ds" % seconds, "--timeout", "30s",
           "-s", script, url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    m = re.search(r"^JSON (.*)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise RuntimeError("wrk failed: " + r.stdout + r.stderr)
    d = json.loads(m.group(1))
    d["rps"] = d["requests"] / (d["duration_us"] / 1e6)
    return d


def run_perf_analyzer(port, texts, tmp, load, seconds, protocol="http"):
    """perf_analyzer against the server; load: its arguments that set the
    load (a concurrency, or a request rate); protocol: "http" (binary
    tensors, perf_analyzer's default) or "grpc" (port: the gRPC one)."""
    exe = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    if not os.path.exists(exe):
        return None
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime as cr
        env["LD_LIBRARY_PATH"] = os.path.join(list(cr.__path__)[0], "lib")
    except ImportError:
        pass
    data = os.path.join(tmp, "pa.json")
    with open(data, "w") as f:
        json.dump({"data": [{"text": {"content": [t], "shape": [1]}} for t in texts]}, f)
    out = os.path.join(tmp, "pa.csv")
    cmd = [exe, "-m", "minilm", "-u", "127.0.0.1:%d" % port, "-i", protocol, "--input-data", data,
           "--measurement-interval", str(seconds * 1000)] + load + [
           "--max-trials", "3", "--stability-percentage", "999", "-f", out,
           "--percentile", "99"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120, env=env)
    if r.returncode != 0:
        return {"error": (r.stdout + r.stderr)[-500:]}
    with open(out) as f:
        row = next(csv.DictReader(f))
    late = re.search(r"([0-9.]+)% of the requests were delayed", r.stdout)
    return {"rps": float(row["Inferences/Second"]), "p50_us": float(row["p50 latency"]),
            "p99_us": float(row["p99 latency"]), "delayed_pct": float(late.group(1)) if late else 0}


def open_loop(rate):
    """perf_analyzer's open-loop load: Poisson arrivals at rate requests/s,
    from up to 32 client threads."""
    return ["--request-rate-range", "%.0f:%.0f:1" % (rate, rate), "--request-distribution",
            "poisson", "--max-threads", "32"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "mantissa"))
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("SECONDS_PER_POINT", 10)))
    ap.add_argument("--out")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench-server: wrk is not installed (tools/install-deps.sh installs it)")
    load_start = os.getloadavg()
    texts = sentences()
    tmp = tempfile.mkdtemp(prefix="mt-bench-")
    script = wrk_script(tmp, texts)
    rows, pa, overhead, opens, rates = [], None, [], [], []
    tok_seen = [0.0, 0.0]  # tokens, texts
    for name, batching in SETTINGS:
        srv = Server(args.bin, batching, tmp)
        try:
            run_wrk(srv.url, script, 8, 2)  # warm-up
            for conc in (1, 8, 64):
                w = measure(srv, script, conc, args.seconds)
                tok_seen[0] += w["tokens"]
                tok_seen[1] += w["texts"]
                w.update(conc=conc, setting=name)
                rows.append(w)
                print("%-36s c=%-3d %8.1f req/s  p50 %7.1f ms  p99 %7.1f ms  batch %.1f  "
                      "non-2xx %d  errors %d" % (name, conc, w["rps"], w["p50_us"] / 1e3,
                                                  w["p99_us"] / 1e3, w["mean_batch"], w["non2xx"],
                                                  w["errors"]), file=sys.stderr)
                if name == "batching off" and conc == 1:
                    overhead.append(dict(ovh(w), what="one STS-B sentence (%.1f tokens on "
                                         "average)" % (w["tokens"] / max(w["texts"], 1))))
            if name == "batching off":
                text, ntok = long_text(srv.url, " ".join(texts).split())
                long_script = wrk_script(tmp, [text], "long.lua")
                w = measure(srv, long_script, 1, args.seconds)
                overhead.append(dict(ovh(w), what="one %d-token text" % ntok))
                print("batching off, %d-token text: client %.3f ms, forward %.3f ms" % (
                    ntok, w["mean_us"] / 1e3, w["compute_ms_per_batch"]), file=sys.stderr)
            if name == "batching on, fixed 2 ms":
                pa = run_perf_analyzer(srv.port, texts, tmp, ["--concurrency-range", "64"],
                                       args.seconds)
            # open loop: a rate batching off serves, and one above what it can
            if name == "batching off":
                off64 = next(r for r in rows if r["setting"] == name and r["conc"] == 64)
                rates = [0.5 * off64["rps"], 1.25 * off64["rps"]]
            for rate in rates:
                o = run_perf_analyzer(srv.port, texts, tmp, open_loop(rate), args.seconds)
                if o and "rps" in o:
                    o.update(setting=name, rate=rate)
                    opens.append(o)
                    print("%-36s %.0f/s offered: %8.1f req/s  p50 %7.1f ms  p99 %7.1f ms" % (
                        name, rate, o["rps"], o["p50_us"] / 1e3, o["p99_us"] / 1e3),
                        file=sys.stderr)
        finally:
            rc = srv.stop()
            if rc != 0:
                print("bench-server: server exited %d" % rc, file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)

    def get(setting, conc):
        return next(r for r in rows if r["setting"] == setting and r["conc"] == conc)
    off64, on64 = get("batching off", 64), get("batching on, fixed 2 ms", 64)
    base1 = get("batching off", 1)
    lines = [
        "# Serving core under load: batching on vs off (make bench-server)",
        "",
    ] + header_lines() + [
        "- load average (1, 5, 15 min) at start %s, at end %s: other work on the machine "
        "competes for the same 2 cores" % (", ".join("%.2f" % x for x in load_start),
                                            ", ".join("%.2f" % x for x in os.getloadavg())),
        "- command: `make bench-server` (bench/server_bench.py, %d s per point)" % args.seconds,
        "- load: wrk 4.1 (1 thread, closed loop, one connection per client) POSTing KServe v2 "
        "JSON to /v2/models/minilm/infer, one STS-B test sentence per request (rotating over %d;"
        " %.1f tokens per text on average, [CLS] and [SEP] included)" % (
            len(texts), tok_seen[0] / max(tok_seen[1], 1)),
        "- server: FP32, 1 engine worker (%d OpenMP threads: all cores), 4 HTTP threads, log "
        "level warn" % os.cpu_count(),
        "",
        "| setting | concurrency | requests/s | p50 ms | p99 ms | mean batch | compute ms/batch |"
        " non-2xx |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %d |" % (
            r["setting"], r["conc"], r["rps"], r["p50_us"] / 1e3, r["p99_us"] / 1e3,
            r["mean_batch"], r["compute_ms_per_batch"], r["non2xx"] + r["errors"]))
    lines += [
        "",
        "## Against the targets",
        "",
        "- throughput at concurrency 64, batching on (fixed 2 ms) / off: **%.2fx** "
        "(%.1f vs %.1f requests/s; target >= 2.5x)" % (on64["rps"] / off64["rps"], on64["rps"],
                                                      off64["rps"]),
        "- p99 at concurrency 64, batching on: %.1f ms; batch-1 latency (p50, concurrency 1, "
        "batching off): %.1f ms, so p99 is %.1fx of it (target < 3x); batching off at "
        "concurrency 64 has p99 %.1f ms" % (on64["p99_us"] / 1e3, base1["p50_us"] / 1e3,
                                           on64["p99_us"] / base1["p50_us"],
                                           off64["p99_us"] / 1e3),
    ]
    for o in overhead:
        lines.append("- HTTP + JSON overhead at batch 1, %s (client mean latency %.3f ms vs the "
                     "forward pass %.3f ms): %.0f us, **%.1f%%** of model time (target < 5%%)" % (
                         o["what"], o["client_mean_ms"], o["compute_ms"], o["overhead_us"],
                         o["overhead_pct"]))
    if opens:
        lines += [
            "",
            "## Open loop: Poisson arrivals (perf_analyzer --request-rate-range, up to 32 client "
            "threads)",
            "",
            "Rates: half of what batching off serves at concurrency 64 in this run, and 1.25x "
            "it. The client's threads share the server's 2 cores; \"delayed\" is perf_analyzer's "
            "count of requests it sent late because its threads were all waiting.",
            "",
            "| setting | offered/s | served/s | p50 ms | p99 ms | p99 / batch-1 latency | "
            "delayed |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for o in opens:
            lines.append("| %s | %.0f | %.1f | %.1f | %.1f | %.1fx | %.1f%% |" % (
                o["setting"], o["rate"], o["rps"], o["p50_us"] / 1e3, o["p99_us"] / 1e3,
                o["p99_us"] / base1["p50_us"], o["delayed_pct"]))
        lines += ["", "## Cross-check", ""]
    if pa and "rps" in pa:
        lines.append("- perf_analyzer (tritonclient 2.41.0) cross-check, concurrency 64, batching "
                     "on (fixed 2 ms): %.1f infer/s, p50 %.1f ms, p99 %.1f ms" % (
                         pa["rps"], pa["p50_us"] / 1e3, pa["p99_us"] / 1e3))
    elif pa:
        lines.append("- perf_analyzer cross-check failed: %s" % pa["error"])
    need = 64 / (3 * base1["p50_us"] / 1e6)
    lines += [
        "",
        "## Notes",
        "",
        "- With 64 closed-loop clients, mean latency = 64 / throughput (Little's law): p99 at "
        "concurrency 64 under 3x the batch-1 latency (%.1f ms) would take at least %.0f "
        "requests/s, %.1fx what batching off serves at concurrency 1 in this run (%.1f); "
        "batching served %.1fx. Batching on vs off at the same concurrency is the latency "
        "comparison that closed-loop load can make (p99 columns)." % (
            3 * base1["p50_us"] / 1e3, need, need / base1["rps"], base1["rps"],
            on64["rps"] / base1["rps"]),
    ]
    lines.append(NOTES.lstrip("\n"))
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
