#!/usr/bin/env python3
"""tracing_ab.py: what OpenTelemetry tracing costs a request (issue 26):
the same binary served with tracing off and on (every request sampled, its
six spans exported over OTLP/HTTP to a real receiver on this machine:
oteltest's otelsink, decoding each export with opentelemetry-proto), side
by side in one run.

Each round starts each setting's server in turn (off, on; then on, off;
...), warms it (2 s at concurrency 16), then measures closed loop at
concurrency 1 and 16 (bench/loadgen.c, STS-B test sentences one per
request, POST /v1/embeddings): requests/s and p50/p99 latency. After each
"on" run it reads the server's /metrics, so the report says how many spans
were exported, dropped or failed against the requests sent. The report
gives per point the median of the rounds, the on/off ratio of each round
(the two runs of one round are adjacent in time, so a change of the
machine's load falls on both) and its spread (min-max).

It also runs bench/trace_cost (the CPU time of building and encoding one
request's spans, without the server) and measures the receiver's CPU time
(it runs in this process), so that the report can say where a difference
comes from.

  bench/tracing_ab.py [--rounds 6] [--seconds 6] [--precision fp32] [--out FILE]

Build first: make all build/release/bench/loadgen.
"""
import argparse
import http.server
import json
import logging
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openloop_bound as ob  # noqa: E402
import peers_bench as pb  # noqa: E402

POINTS = (1, 16)


class SpanCounter:
    """The receiver's handler: counts the spans it decoded."""

    def __init__(self):
        self.lock = threading.Lock()
        self.spans = 0

    def handle_trace(self, request, headers):
        n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self.lock:
            self.spans += n

    def handle_metrics(self, request, headers):
        pass

    def handle_logs(self, request, headers):
        pass


def start_receiver():
    from oteltest.sink import HttpSink
    # quiet: no access-log line per export on stderr
    http.server.BaseHTTPRequestHandler.log_message = lambda *a, **k: None
    counter = SpanCounter()
    port = pb.free_port()
    sink = HttpSink(counter, logging.getLogger("otelsink"), port=port, daemon=True)
    sink.start()
    return sink, counter, port


def server(prec, tracing, tmp):
    """A started Mantissa serving prec, with tracing (a dict) or without."""
    port = pb.free_port()
    cfg = {"server": {"listen": "127.0.0.1:%d" % port, "log_level": "warn", "max_inputs": 64},
           "models": [{"name": "minilm", "path": pb.MODEL,
                       "batching": {"max_batch_size": 64, "max_queue_delay_us": 0},
                       "variants": [{"name": prec, "precision": prec}]}]}
    if tracing:
        cfg["server"]["tracing"] = tracing
    path = os.path.join(tmp, "tracing-%s.json" % ("on" if tracing else "off"))
    with open(path, "w") as f:
        json.dump(cfg, f)
    return pb.Server("mantissa", [pb.MANTISSA, "serve", "--config", path], port,
                     log=os.path.join(tmp, "srv.log"))


def trace_counts(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        text = r.read().decode()
    return {k: int(re.search(r"^mantissa_trace_spans_%s_total (\d+)$" % k, text, re.M).group(1))
            for k in ("exported", "dropped", "failed")}


def cpu_self():
    """This process's CPU seconds (the receiver runs in it, on its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(prec, tracing, bodies, tmp, secs):
    srv = server(prec, tracing, tmp)
    row = {"load": round(os.getloadavg()[0], 2)}
    cpu0 = cpu_self()
    try:
        sent = pb.loadgen(srv.port, bodies, 2, conc=16)["requests"]  # warm-up
        for c in POINTS:
            g = pb.point(srv, bodies, secs, conc=c)
            row["c=%d" % c] = [g["rps"], g["p50_ms"], g["p99_ms"], g["errors"], g["cpu_per_1k"]]
            sent += g["requests"]
        if tracing:
            time.sleep(1.5)  # the last batch_delay_ms (1 s): the queue empties
            row["spans"] = trace_counts(srv.port)
            row["requests"] = sent
            row["receiver_cpu_per_1k"] = 1000 * (cpu_self() - cpu0) / sent
    finally:
        srv.stop()
    return row


def lscpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        return m.group(1).strip() if m else pb.cpu_model()
    except OSError:
        return pb.cpu_model()


def trace_cost():
    """bench/trace_cost's figures: the server's own CPU per traced request."""
    path = os.path.join(os.path.dirname(pb.MANTISSA), "bench", "trace_cost")
    r = subprocess.run([path], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def report(rows, a, isa, load0, receiver_spans, cost):
    L = ["# Tracing off and on (bench/tracing_ab.py)", "",
         "CPU: %s (lscpu model name), %d cores, %s; load average %.2f at the start; other "
         "work ran on the machine. Load generator, server and OTLP receiver on the same cores; "
         "the bench and its children niced. Model all-MiniLM-L6-v2 %s, STS-B test sentences "
         "one per request (POST /v1/embeddings), closed loop. %d rounds of %.0f s points, each "
         "round both settings in turn (alternating order). Python %s." % (
             lscpu_model(), os.cpu_count(), isa, load0, a.precision, a.rounds, a.seconds,
             platform.python_version()), "",
         "- off: no server.tracing (trace ids still made, traceparent still answered, the "
         "log line has the trace id).",
         "- on: server.tracing.endpoint at a real OTLP/HTTP receiver on loopback (oteltest "
         "0.47.0's otelsink, decoding every export with opentelemetry-proto), sample_ratio 1 "
         "(every request: its server, parse, queue, batch, forward and reply spans), the "
         "default batching (512 spans or 1 s).", "",
         "| point | off: req/s | on: req/s | on/off req/s, median (min-max) | off: p50 ms | "
         "on: p50 ms | on/off p50, median (min-max) | off / on: p99 ms | off / on: CPU s per "
         "1000 req |", "|---|---|---|---|---|---|---|---|---|"]
    for c in POINTS:
        k = "c=%d" % c
        off = [r[k] for r in rows["off"]]
        on = [r[k] for r in rows["on"]]
        rr = [b[0] / x[0] for x, b in zip(off, on)]
        rp = [b[1] / x[1] for x, b in zip(off, on)]
        med = lambda v, i: statistics.median(x[i] for x in v)  # noqa: E731
        L.append("| concurrency %d | %.0f | %.0f | %.3f (%.3f-%.3f) | %.2f | %.2f | "
                 "%.3f (%.3f-%.3f) | %.2f / %.2f | %.2f / %.2f |" % (
                     c, med(off, 0), med(on, 0), statistics.median(rr), min(rr), max(rr),
                     med(off, 1), med(on, 1), statistics.median(rp), min(rp), max(rp),
                     med(off, 2), med(on, 2), med(off, 4), med(on, 4)))
    exported = sum(r["spans"]["exported"] for r in rows["on"])
    dropped = sum(r["spans"]["dropped"] for r in rows["on"])
    failed = sum(r["spans"]["failed"] for r in rows["on"])
    reqs = sum(r["requests"] for r in rows["on"])
    L += ["", "Spans of the \"on\" runs (their /metrics 1.5 s after the last point): %d "
          "exported, %d dropped, %d failed, for %d requests sent (warm-up included; %.2f "
          "spans a request, six expected, the start-up check's request aside); the receiver "
          "decoded %d. The receiver's CPU time is not in the CPU column (the server's "
          "process alone): it took %.2f s per 1000 requests (median of the rounds; Python, "
          "on the same two cores)." % (
              exported, dropped, failed, reqs, exported / max(reqs, 1), receiver_spans,
              statistics.median(r["receiver_cpu_per_1k"] for r in rows["on"])), "",
          "The server's own work per traced request (bench/trace_cost, %d requests, the same "
          "machine): %.2f us on the loop thread to build its six spans, %.2f us on the "
          "exporter thread to encode them (%.0f bytes of protobuf); the POST not included." % (
              cost["requests"], cost["build_us"], cost["encode_us"], cost["bytes"]), "",
          "Every round (req/s, p50 / p99 ms, errors; load average at its start):", ""]
    for name in ("off", "on"):
        for i, r in enumerate(rows[name]):
            L.append("- %s round %d (load %.2f): %s" % (name, i, r["load"], "; ".join(
                "c=%d %.0f, %.2f / %.2f%s" % (c, r["c=%d" % c][0], r["c=%d" % c][1],
                                              r["c=%d" % c][2],
                                              " (%d errors)" % r["c=%d" % c][3]
                                              if r["c=%d" % c][3] else "")
                for c in POINTS)))
    L += ["", "Load average at the end: %.2f." % os.getloadavg()[0], "",
          "Command: `nice -n 19 .venv/bin/python bench/tracing_ab.py --rounds %d --seconds %g "
          "--precision %s`." % (a.rounds, a.seconds, a.precision)]
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--out")
    a = ap.parse_args()
    sents = pb.stsb()[0]
    random.Random(7).shuffle(sents)
    load0 = os.getloadavg()[0]
    isa = [x for x in subprocess.run([pb.MANTISSA, "cpu"], capture_output=True, text=True)
           .stdout.splitlines() if x.startswith("isa:")]
    cost = trace_cost()
    sink, counter, rport = start_receiver()
    tracing = {"endpoint": "http://127.0.0.1:%d/v1/traces" % rport, "sample_ratio": 1.0}
    rows = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        bodies = os.path.join(tmp, "bodies.txt")
        with open(bodies, "w") as f:
            for s in sents:
                f.write(json.dumps({"model": "minilm", "input": s}) + "\n")
        for r in range(a.rounds):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            for name in order:
                row = measure(a.precision, tracing if name == "on" else None, bodies, tmp,
                              a.seconds)
                rows[name].append(row)
                print(json.dumps({"setting": name, "round": r, "row": row}), flush=True)
    sink.stop()
    ob.write_report(report(rows, a, isa[0] if isa else "isa: ?", load0, counter.spans, cost),
                    a.out)


if __name__ == "__main__":
    main()
