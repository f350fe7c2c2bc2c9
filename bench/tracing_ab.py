#!/usr/bin/env python3
"""tracing_ab.py: what OpenTelemetry tracing costs a request (issue 26):
the same binary served with tracing off and on (every request sampled, its
six spans exported over OTLP/HTTP to a real receiver on this machine:
oteltest's otelsink, decoding each export with opentelemetry-proto), side
by side in one run.

Both servers run for the whole run (an idle one costs nothing: its engine
threads sleep). Each round measures, at concurrency 1 and then 16, one
closed-loop point on each server in turn, in alternating order (off on, on
off, ...), with bench/loadgen.c sending STS-B test sentences one per
request (POST /v1/embeddings): requests/s and p50/p99 latency. The two
points of a pair are seconds apart, so a change of the machine's load falls
on both: the report gives per point the median of the rounds for each
setting, and the on/off ratio of each pair with its median and spread
(min-max, and the middle half). At the end it reads the "on" server's
/metrics, so the report says how many spans were exported, dropped or
failed against the requests sent.

It also runs bench/trace_cost (the CPU time of building and encoding one
request's spans, without the server) and measures the receiver's CPU time
(it runs in this process), so that the report can say where a difference
comes from.

  bench/tracing_ab.py [--rounds 12] [--seconds 3] [--precision fp32] [--out FILE]

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
    name = "on" if tracing else "off"
    path = os.path.join(tmp, "tracing-%s.json" % name)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return pb.Server("mantissa", [pb.MANTISSA, "serve", "--config", path], port,
                     log=os.path.join(tmp, "srv-%s.log" % name))


def trace_counts(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        text = r.read().decode()
    return {k: int(re.search(r"^mantissa_trace_spans_%s_total (\d+)$" % k, text, re.M).group(1))
            for k in ("exported", "dropped", "failed")}


def cpu_self():
    """This process's CPU seconds (the receiver runs in it, on its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def quantiles(v):
    """median, min, max, first and third quartile"""
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return statistics.median(v), min(v), max(v), q[0], q[2]


def run_pairs(srv, bodies, secs, rounds):
    """rows[setting]["c=N"]: one [rps, p50, p99, errors, cpu_per_1k, load] a round."""
    rows = {name: {"c=%d" % c: [] for c in POINTS} for name in srv}
    sent = 0
    for r in range(rounds):
        for i, c in enumerate(POINTS):
            order = ("off", "on") if (r + i) % 2 == 0 else ("on", "off")
            for name in order:
                la = os.getloadavg()[0]
                g = pb.point(srv[name], bodies, secs, conc=c)
                rows[name]["c=%d" % c].append([g["rps"], g["p50_ms"], g["p99_ms"], g["errors"],
                                               g["cpu_per_1k"], la])
                sent += g["requests"] if name == "on" else 0
                print(json.dumps({"round": r, "setting": name, "c": c,
                                  "row": rows[name]["c=%d" % c][-1]}), flush=True)
    return rows, sent


def trace_cost():
    """bench/trace_cost's figures: the server's own CPU per traced request."""
    path = os.path.join(os.path.dirname(pb.MANTISSA), "bench", "trace_cost")
    r = subprocess.run([path], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def report(rows, a, isa, load0, spans, sent, receiver_cpu, cost):
    L = ["# Tracing off and on (bench/tracing_ab.py)", "",
         "CPU: %s (lscpu model name), %d cores, %s; load average %.2f at the start; other "
         "work ran on the machine. Load generator, servers and OTLP receiver on the same "
         "cores; the bench and its children niced. Model all-MiniLM-L6-v2 %s, STS-B test "
         "sentences one per request (POST /v1/embeddings), closed loop. Both servers up for "
         "the whole run; %d rounds, each a pair of %.0f s points (off and on in turn, "
         "alternating order) at concurrency 1, then a pair at 16. Python %s." % (
             pb.cpu_model(), os.cpu_count(), isa, load0, a.precision, a.rounds, a.seconds,
             platform.python_version()), "",
         "- off: no server.tracing (trace ids still made, traceparent still answered, the "
         "log line has the trace id).",
         "- on: server.tracing.endpoint at a real OTLP/HTTP receiver on loopback (oteltest "
         "0.47.0's otelsink, decoding every export with opentelemetry-proto), sample_ratio 1 "
         "(every request: its server, parse, queue, batch, forward and reply spans), the "
         "default batching (512 spans or 1 s).", "",
         "| point | off: req/s | on: req/s | on/off req/s of each pair: median (min-max; middle "
         "half) | off: p50 ms | on: p50 ms | on/off p50 of each pair: median (min-max; middle "
         "half) | off / on: p99 ms | off / on: server CPU s per 1000 req |",
         "|---|---|---|---|---|---|---|---|---|"]
    for c in POINTS:
        k = "c=%d" % c
        off, on = rows["off"][k], rows["on"][k]
        med = lambda v, i: statistics.median(x[i] for x in v)  # noqa: E731
        rr = quantiles([b[0] / x[0] for x, b in zip(off, on)])
        rp = quantiles([b[1] / x[1] for x, b in zip(off, on)])
        L.append("| concurrency %d | %.0f | %.0f | %.3f (%.3f-%.3f; %.3f-%.3f) | %.2f | %.2f | "
                 "%.3f (%.3f-%.3f; %.3f-%.3f) | %.2f / %.2f | %.2f / %.2f |" % (
                     c, med(off, 0), med(on, 0), *rr, med(off, 1), med(on, 1), *rp,
                     med(off, 2), med(on, 2), med(off, 4), med(on, 4)))
    L += ["", "Spans of the \"on\" server (its /metrics 1.5 s after the last point): %d "
          "exported, %d dropped, %d failed, for the %d requests it was sent (%d measured, "
          "the rest warm-up and the start-up check): %.3f spans a request (six for an "
          "answered request; four for one the load generator abandons at the end of a point, "
          "which never reaches a batch); "
          "the receiver decoded %d. The receiver's CPU time is not in the CPU column (the "
          "server's process alone): %.3f s per 1000 measured requests (Python, on the same "
          "two cores)." % (spans["exported"], spans["dropped"], spans["failed"],
                           spans["requests"], sent, spans["exported"] / spans["requests"],
                           spans["received"], receiver_cpu), "",
          "The server's own work per traced request (bench/trace_cost, %d requests, the same "
          "machine): %.2f us on the loop thread to build its six spans, %.2f us on the "
          "exporter thread to encode them (%.0f bytes of protobuf); the POST not included." % (
              cost["requests"], cost["build_us"], cost["encode_us"], cost["bytes"]), "",
          "Every pair (req/s, p50 / p99 ms, errors; load average before the point):", ""]
    for c in POINTS:
        k = "c=%d" % c
        for i, (x, b) in enumerate(zip(rows["off"][k], rows["on"][k])):
            L.append("- c=%d round %d: off %.0f, %.2f / %.2f%s (load %.2f); on %.0f, %.2f / "
                     "%.2f%s (load %.2f); on/off req/s %.3f" % (
                         c, i, x[0], x[1], x[2], " (%d errors)" % x[3] if x[3] else "", x[5],
                         b[0], b[1], b[2], " (%d errors)" % b[3] if b[3] else "", b[5],
                         b[0] / x[0]))
    L += ["", "Load average at the end: %.2f." % os.getloadavg()[0], "",
          "Command: `nice -n 19 .venv/bin/python bench/tracing_ab.py --rounds %d --seconds %g "
          "--precision %s`." % (a.rounds, a.seconds, a.precision)]
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--out")
    a = ap.parse_args()
    sents = pb.stsb()[0]
    random.Random(7).shuffle(sents)
    load0 = os.getloadavg()[0]
    cost = trace_cost()
    sink, counter, rport = start_receiver()
    tracing = {"endpoint": "http://127.0.0.1:%d/v1/traces" % rport, "sample_ratio": 1.0}
    with tempfile.TemporaryDirectory() as tmp:
        bodies = pb.write_bodies(sents, tmp)
        srv = {}
        try:
            srv["off"] = server(a.precision, None, tmp)
            srv["on"] = server(a.precision, tracing, tmp)
            warm = {n: pb.loadgen(x.port, bodies, 2, conc=16)["requests"]  # warm-up
                    for n, x in srv.items()}
            cpu0 = cpu_self()
            rows, sent = run_pairs(srv, bodies, a.seconds, a.rounds)
            spans_of = sent + warm["on"] + 1  # and the start-up check's request
            time.sleep(1.5)  # the last batch_delay_ms (1 s): the queue empties
            receiver_cpu = 1000 * (cpu_self() - cpu0) / max(sent, 1)
            spans = trace_counts(srv["on"].port)
            spans["received"] = counter.spans
            spans["requests"] = spans_of
        finally:
            for x in srv.values():
                x.stop()
    sink.stop()
    ob.write_report(report(rows, a, "isa: " + pb.mantissa_isa(), load0, spans, sent,
                           receiver_cpu, cost), a.out)


if __name__ == "__main__":
    main()
