#!/usr/bin/env python3
"""grpc_bench.py: `make bench-grpc`: KServe v2 over gRPC against KServe v2
over HTTP with binary tensors, the same server, in one run.

One server (all-MiniLM-L6-v2, fp32 unless --precision, batching on with no
queue delay) serves both ports; perf_analyzer drives POST
/v2/models/minilm/infer (-i http, binary tensors: its default) and
ModelInfer (-i grpc) with one STS-B sentence per request, closed loop, at
concurrency 1 and 64. In each round the two protocols run back to back at
one concurrency, alternating which goes first, so that each round gives a
gRPC / HTTP ratio taken seconds apart: the machine is shared and its speed
drifts by more than the difference looked for over minutes. The report
gives, per concurrency, the median of those per-round ratios and their
spread (requests/s and p50 latency), and the median absolute figures.

Writes a markdown report to stdout and, with --out, to a file.
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_bench as pb  # noqa: E402
import server_bench as sb  # noqa: E402

CONCURRENCY = (1, 64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(sb.ROOT, "build", "release", "mantissa"))
    ap.add_argument("--seconds", type=int, default=4, help="per point and round")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--out")
    args = ap.parse_args()
    load_start = os.getloadavg()
    texts = sb.sentences()
    tmp = tempfile.mkdtemp(prefix="mt-grpc-bench-")
    srv = sb.Server(args.bin, {"max_batch_size": 64, "max_queue_delay_us": 0}, tmp,
                    precision=args.precision, server={"grpc_listen": "127.0.0.1:0"})
    ports = {"http": srv.port, "grpc": srv.grpc_port}
    runs = {(p, c): [] for p in ports for c in CONCURRENCY}
    try:
        for p in ports:  # warm-up
            sb.run_perf_analyzer(ports[p], texts, tmp, ["--concurrency-range", "8"], 2, p)
        for r in range(args.rounds):
            order = ("http", "grpc") if r % 2 == 0 else ("grpc", "http")
            for c in CONCURRENCY:
                for p in order:
                    res = sb.run_perf_analyzer(ports[p], texts, tmp,
                                               ["--concurrency-range", str(c)], args.seconds, p)
                    if not res or "error" in res:
                        sys.exit("grpc_bench: perf_analyzer failed: %s" % res)
                    runs[(p, c)].append(res)
                    print("round %d  %-4s c=%-3d %8.1f req/s  p50 %7.2f ms" % (
                        r + 1, p, c, res["rps"], res["p50_us"] / 1e3), file=sys.stderr)
    finally:
        rc = srv.stop()
    if rc != 0:
        sys.exit("grpc_bench: the server exited %d" % rc)
    lines = ["# KServe v2: gRPC against HTTP with binary tensors (make bench-grpc)", ""]
    lines += sb.header_lines()
    lines += ["- CPU level: %s" % pb.mantissa_isa(args.bin),
              "- load average at the start: %.2f %.2f %.2f" % load_start,
              "- model: all-MiniLM-L6-v2, %s, batching on (max_batch_size 64, "
              "max_queue_delay_us 0); one STS-B sentence per request (256 rotating)"
              % args.precision,
              "- load: perf_analyzer closed loop, -i http (binary tensors) and -i grpc, "
              "%d s a point, %d rounds, each both protocols back to back (alternating which "
              "goes first); ratios per round: median [min-max]" % (args.seconds, args.rounds),
              "", "| concurrency | HTTP req/s | gRPC req/s | gRPC / HTTP req/s, per round | "
              "HTTP p50 ms | gRPC p50 ms | gRPC / HTTP p50, per round |",
              "|---|---|---|---|---|---|---|"]
    for c in CONCURRENCY:
        h, g = runs[("http", c)], runs[("grpc", c)]
        rr = [b["rps"] / a["rps"] for a, b in zip(h, g)]
        pr = [b["p50_us"] / a["p50_us"] for a, b in zip(h, g)]

        def med(v):
            return statistics.median(v)

        def ratio(v):
            return "%.3f [%.2f-%.2f]" % (med(v), min(v), max(v))
        lines.append("| %d | %.1f | %.1f | %s | %.2f | %.2f | %s |" % (
            c, med(x["rps"] for x in h), med(x["rps"] for x in g), ratio(rr),
            med(x["p50_us"] for x in h) / 1e3, med(x["p50_us"] for x in g) / 1e3, ratio(pr)))
    lines += ["", "perf_analyzer runs its client threads on the same cores as the server: "
              "the ratios, not the absolute figures, are the result."]
    sb.write_report(lines, args.out)


if __name__ == "__main__":
    main()
