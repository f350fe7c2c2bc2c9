#!/usr/bin/env python3
"""serve_switch.py: the server on a GPU, switching precision under load.

Starts `mantissa serve` with the model on device "cuda" (a start-up error
without a GPU), keeps THREADS client threads sending /v1/embeddings requests
on keep-alive connections, and rewrites the config file (rename-replace, as
editors and ConfigMaps do) to switch the served variant through each
precision in turn. For each precision it waits until a response names the
new embedding space (X-Mantissa-Space), then keeps the load on it for
--hold seconds. Every answer that is not a 200 with an embedding counts as a
failure; the claim checked is zero failures across all the switches.

Prints one JSON object (also to --json): per precision the time from the
config write to the first response in the new space, requests and p50/p99
latency while it served, and the totals. Standard library only, so it runs
under the GPU image's python3.

  python3 bench/gpu/serve_switch.py --bin build/gpu/mantissa --model models/all-MiniLM-L6-v2
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

PRECISIONS = ["fp16", "int8", "fp8", "bf16", "fp32", "fp16"]
TEXTS = ["A man is playing a guitar.", "The cat sat on the mat while it rained outside.",
         "GPUs keep the weights resident in low precision.", "short",
         "Precision switches must not fail a single request, even under load."]


def config(model, prec, device="cuda"):
    return {"server": {"listen": "127.0.0.1:0", "log_level": "warn",
                       "reload_debounce_ms": 100},
            "models": [{"name": "minilm", "path": model, "device": device,
                        "variants": [{"name": "main", "precision": prec, "traffic": 100}]}]}


def write(path, cfg):
    with open(path + ".tmp", "w") as f:
        json.dump(cfg, f)
    os.replace(path + ".tmp", path)


class Load:
    """THREADS closed-loop clients; latencies and failures by current phase."""

    def __init__(self, port, threads):
        self.port, self.stop, self.lock = port, False, threading.Lock()
        self.phase, self.lat, self.fail, self.spaces = "start", {}, [], {}
        self.last_space = ""  # the embedding space of the newest good answer
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True)
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def client(self, i):
        conn, n = None, 0
        while not self.stop:
            body = json.dumps({"model": "minilm@main", "input": [TEXTS[(i + n) % len(TEXTS)]]})
            n += 1
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                ok = r.status == 200 and b'"embedding"' in data
                space = r.getheader("X-Mantissa-Space") or ""
                why = "" if ok else "HTTP %d %s" % (r.status, data[:200].decode("utf-8", "replace"))
            except (OSError, http.client.HTTPException) as e:
                ok, space, why, conn = False, "", "%s: %s" % (type(e).__name__, e), None
            dt = (time.perf_counter() - t0) * 1e3
            with self.lock:
                if ok:
                    self.lat.setdefault(self.phase, []).append(dt)
                    self.spaces[space] = self.spaces.get(space, 0) + 1
                    self.last_space = space
                else:
                    self.fail.append({"phase": self.phase, "why": why})

    def finish(self):
        self.stop = True
        for t in self.threads:
            t.join(timeout=40)


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 3) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--switch-timeout", type=float, default=60.0)
    ap.add_argument("--device", default="cuda", help="cuda (the point); cpu to try the script here")
    ap.add_argument("--json")
    a = ap.parse_args()
    res = {"precisions": []}
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "mantissa.json")
        write(cfg, config(os.path.abspath(a.model), PRECISIONS[0], a.device))
        log = open(os.path.join(d, "server.log"), "w+")
        proc = subprocess.Popen([a.bin, "serve", "--config", cfg], stderr=subprocess.PIPE, text=True)
        port, lines = None, []
        for line in proc.stderr:
            lines.append(line.rstrip())
            # the start-up line, in either log format: "... serving on ADDR:PORT" or
            # {"msg":"serving on",...,"port":PORT,...}
            m = re.search(r'serving on(?: .*:|".*"port":)(\d+)', line)
            if m:
                port = int(m.group(1))
                break
        if not port:
            print(json.dumps({"error": "the server did not start", "log": lines[-20:]}))
            return 1
        threading.Thread(target=lambda: [log.write(l) for l in proc.stderr], daemon=True).start()
        res["startup_log"] = lines[-8:]
        load = Load(port, a.threads)
        try:
            for i, prec in enumerate(PRECISIONS):
                with load.lock:
                    load.phase = "%d-%s" % (i, prec)
                t0 = time.perf_counter()
                if i:
                    write(cfg, config(os.path.abspath(a.model), prec, a.device))
                seen = None
                while time.perf_counter() - t0 < a.switch_timeout:
                    sp = load.last_space
                    if "/%s-" % prec in sp or sp.endswith("/" + prec):
                        seen = time.perf_counter() - t0
                        break
                    time.sleep(0.005)
                with load.lock:
                    load.lat[load.phase] = []  # latency while it serves, not during the switch
                time.sleep(a.hold)
                with load.lock:
                    lat = list(load.lat.get(load.phase, []))
                res["precisions"].append({"precision": prec, "switch_s": seen and round(seen, 3),
                                          "space": load.last_space,
                                          "requests": len(lat), "rps": round(len(lat) / a.hold, 1),
                                          "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)})
                print(json.dumps(res["precisions"][-1]), file=sys.stderr, flush=True)
        finally:
            load.finish()
            proc.send_signal(signal.SIGTERM)
            try:
                res["exit_status"] = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                res["exit_status"] = "killed after 60 s"
        log.seek(0)
        res["server_log_tail"] = log.read().splitlines()[-15:]
        log.close()
    res["failures"] = len(load.fail)
    res["failure_examples"] = load.fail[:10]
    res["answered"] = sum(load.spaces.values())
    res["spaces"] = load.spaces
    res["ok"] = (res["failures"] == 0 and all(p["switch_s"] is not None for p in res["precisions"]))
    out = json.dumps(res, indent=1)
    print(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(out + "\n")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
