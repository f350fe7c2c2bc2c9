#!/usr/bin/env python3
"""auto_delay_ab.py: A/B of the batching delay between two builds of the
server (e.g. before and after a change to server/core/batch.c), int8 MiniLM:
closed loop with wrk at concurrency 1 and 64, open loop with perf_analyzer
(Poisson) at the given rates; "auto" on both builds and a fixed 2 ms delay on
the second. Rounds interleave the settings so that machine noise hits all of
them alike. Prints one JSON line per setting and round.

usage: auto_delay_ab.py OLD_BIN NEW_BIN RATES [ROUNDS]   (RATES: 900,1800)
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_bench as sb  # noqa: E402

SETS = {"auto": {"max_batch_size": 64, "max_queue_delay_us": "auto"},
        "fixed2": {"max_batch_size": 64, "max_queue_delay_us": 2000}}
SECONDS = 8


def one(binary, batching, texts, rates):
    with tempfile.TemporaryDirectory() as tmp:
        srv = sb.Server(binary, batching, tmp, precision="int8")
        try:
            script = sb.wrk_script(tmp, texts)
            sb.run_wrk(srv.url, script, 4, 3)  # a few batches for the service-time fit
            w = sb.run_wrk(srv.url, script, 1, SECONDS)
            row = {"load": os.getloadavg()[0], "c1_rps": round(w["rps"]),
                   "c1_p50": w["p50_us"] / 1e3, "c1_p99": w["p99_us"] / 1e3}
            w64 = sb.run_wrk(srv.url, script, 64, SECONDS)
            row.update(c64_rps=round(w64["rps"]), c64_p99=w64["p99_us"] / 1e3)
            for r in rates:
                o = sb.run_perf_analyzer(srv.port, texts, tmp, sb.open_loop(r), SECONDS)
                row["r%d" % r] = ([round(o["rps"]), o["p50_us"] / 1e3, o["p99_us"] / 1e3]
                                  if o and "rps" in o else o)
        finally:
            srv.stop()
    return row


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    bins = {"old": sys.argv[1], "new": sys.argv[2]}
    rates = [float(r) for r in sys.argv[3].split(",")]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    texts = sb.sentences()
    for rnd in range(rounds):
        for name, binary in bins.items():
            for sname, batching in SETS.items():
                if sname == "fixed2" and name == "old":
                    continue
                row = {"round": rnd, "bin": name, "set": sname}
                row.update(one(binary, batching, texts, rates))
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
