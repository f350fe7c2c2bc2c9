#!/usr/bin/env python3
"""switch_bench.py: how long a precision hot-switch takes, per precision.

For each target precision the config file is rewritten (rename-replace, as
editors and ConfigMaps do) to switch the served variant "main" to it, and a
client polls with requests pinned to minilm@main until a response names the
new embedding space (X-Mantissa-Space). The figure is the time from the
write to that first response. The server's own split is read from
/v2/admin/config: the build (load + quantize) time and the time from
noticing the change to serving.

Peer, measured in the same run: a restart with the new config instead
(process start to the first successful response), the alternative a
hot-switch replaces.

  make bench-switch                    (writes bench/results/switch-<date>.md)
  .venv/bin/python bench/switch_bench.py --bin build/release/mantissa --reps 5
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
PRECISIONS = ["fp16", "bf16", "int8", "fp8", "fp32"]


def config(prec, debounce_ms):
    return {"server": {"listen": "127.0.0.1:0", "log_level": "warn",
                       "reload_debounce_ms": debounce_ms},
            "models": [{"name": "minilm", "path": MODEL,
                        "variants": [{"name": "main", "precision": prec, "traffic": 100}]}]}


def write(path, cfg):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f)
    os.replace(tmp, path)


class Server:
    def __init__(self, binary, cfg_path):
        self.t0 = time.time()
        self.proc = subprocess.Popen([binary, "serve", "--config", cfg_path], cwd=ROOT,
                                     stderr=subprocess.PIPE, text=True)
        self.port = None
        for line in self.proc.stderr:
            # the start-up line, in either log format: "... serving on ADDR:PORT" or
            # {"msg":"serving on",...,"port":PORT,...}
            m = re.search(r'serving on(?: .*:|".*"port":)(\d+)', line)
            if m:
                self.port = int(m.group(1))
                break
        if not self.port:
            raise RuntimeError("the server did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def get(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body else None,
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        return r, data

    def space(self):
        r, _ = self.get("POST", "/v1/embeddings", {"model": "minilm@main", "input": "x"})
        return r.status, r.getheader("X-Mantissa-Space") or ""

    def variant(self):
        _, data = self.get("GET", "/v2/admin/config")
        return json.loads(data)["models"][0]["variants"][0]

    def stop(self):
        self.conn.close()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def supported(srv, cfg_path, debounce_ms):
    """The precisions the CPU backend builds here (a failed build says so)."""
    ok = []
    for p in PRECISIONS:
        write(cfg_path, config(p, debounce_ms))
        deadline = time.time() + 120
        while time.time() < deadline:
            v = srv.variant()
            if v["precision"] == p and v["state"] in ("ready", "failed"):
                break
            time.sleep(0.02)
        if v["state"] == "ready":
            ok.append(p)
    return ok


def switch_once(srv, cfg_path, prec, debounce_ms):
    write(cfg_path, config("fp32" if prec != "fp32" else "fp16", debounce_ms))
    while True:  # start from the other precision, settled
        v = srv.variant()
        if v["state"] in ("ready", "failed") and v["precision"] != prec:
            break
        time.sleep(0.02)
    t0 = time.perf_counter()
    write(cfg_path, config(prec, debounce_ms))
    while True:
        st, space = srv.space()
        if st != 200:
            raise RuntimeError("a request failed during the switch: %d" % st)
        if "/%s-" % prec in space:
            wall = time.perf_counter() - t0
            break
        time.sleep(0.005)
    v = srv.variant()
    return wall, v["serving"]["build_s"], v["switch_s"]


def restart_once(binary, cfg_path, prec, debounce_ms):
    write(cfg_path, config(prec, debounce_ms))
    t0 = time.perf_counter()
    srv = Server(binary, cfg_path)
    while True:
        try:
            st, _ = srv.space()
            if st == 200:
                break
        except OSError:
            pass
        time.sleep(0.005)
    dt = time.perf_counter() - t0
    srv.stop()
    return dt


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "mantissa"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--debounce-ms", type=int, default=200)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        cfg_path = os.path.join(d, "mantissa.json")
        write(cfg_path, config("fp32", a.debounce_ms))
        srv = Server(a.bin, cfg_path)
        try:
            precs = supported(srv, cfg_path, a.debounce_ms)
            rows = {}
            for rep in range(a.reps):
                for p in precs:
                    rows.setdefault(p, []).append(switch_once(srv, cfg_path, p, a.debounce_ms))
        finally:
            rc = srv.stop()
        restarts = {p: [restart_once(a.bin, cfg_path, p, a.debounce_ms) for _ in range(a.reps)]
                    for p in precs}
    load1 = os.getloadavg()
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [
        "# Precision hot-switch: time from config write to the new build serving (make bench-switch)",
        "",
        "- date: %s UTC" % now.strftime("%Y-%m-%d %H:%M"),
        "- machine: %s, %d cores, %s" % (cpu, os.cpu_count(), platform.platform()),
        "- load average (1, 5, 15 min) at start %.2f, %.2f, %.2f, at end %.2f, %.2f, %.2f "
        "(other work on the machine competes for the same cores)" % (load0 + load1),
        "- command: `%s`" % " ".join([os.path.relpath(sys.executable, ROOT),
                                      os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
        "- model: all-MiniLM-L6-v2 on the CPU backend, one variant \"main\" switched from fp32 "
        "(from fp16 for the fp32 row); no other traffic; server.reload_debounce_ms %d" % a.debounce_ms,
        "- method: the config file is replaced by rename; a client polls requests pinned to "
        "minilm@main until one names the new embedding space (X-Mantissa-Space). "
        "`build` and `noticed -> serving` are the server's own figures (/v2/admin/config).",
        "- peer, same run: restarting the server with the new config (process start to the "
        "first 200), what the hot-switch replaces; a restart also drops every connection "
        "and request in flight, which the hot-switch does not.",
        "- server exit status after the switches: %d; every request during the switches "
        "answered 200" % rc,
        "",
        "| precision | runs | write -> serving, median s | min s | max s | build (load + quantize), "
        "median s | noticed -> serving, median s | restart instead, median s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in precs:
        r = rows[p]
        lines.append("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            p, len(r), med([x[0] for x in r]), min(x[0] for x in r), max(x[0] for x in r),
            med([x[1] for x in r]), med([x[2] for x in r]), med(restarts[p])))
    missing = [p for p in PRECISIONS if p not in precs]
    if missing:
        lines += ["", "Not measured (the CPU backend refused them in this build): " +
                  ", ".join(missing)]
    lines += ["", "write -> serving = the debounce (%d ms, from the first file event) + the "
              "build (load, quantize, weights checksum) + the swap + one request. For this "
              "small model the debounce is most of it; the build is the part that grows with "
              "the model. A restart takes about as long here, but readiness goes false, "
              "every connection and request in flight is dropped, and every variant is "
              "rebuilt; the hot-switch rebuilds only the changed variant while the old build "
              "keeps serving." % a.debounce_ms, ""]
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
