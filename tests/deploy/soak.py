#!/usr/bin/env python3
"""soak.py: `make soak`. Starts the real server on a loopback port and drives
mixed valid and invalid traffic at it for a configurable time (default 10
minutes), then reports requests served, responses by status, and the
server's RSS at start, after warm-up and at the end. RSS must stay flat
(within 5%) between warm-up and the end; exits 1 otherwise, or if any request
failed in a way the protocol does not allow (a 5xx, a dropped connection).

  tests/deploy/soak.py [--seconds 600] [--clients 8] [--out FILE.md]

Traffic (loopback only; bounded by time): OpenAI embeddings (string, batch,
base64), KServe JSON infer, and a share of bad requests: invalid JSON,
unknown model, wrong datatype, over-long body, invalid UTF-8, deep nesting,
duplicate keys, unknown fields, empty input, path characters in the model
name. Every bad one must get its 4xx."""
import argparse
import collections
import datetime
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MANTISSA_BIN", os.path.join(ROOT, os.environ.get("BUILD", "build/release"),
                                                  "mantissa"))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")

SENTENCES = [
    "A man is playing a guitar.", "The weather is nice today.", "Ünïcödé and 中文 text",
    "A longer sentence about several things that happen in the world every single day.",
    "short", "Two dogs run across a field of tall grass while their owner watches.",
]

# (method, path, body, expected statuses)
def valid_request(rng):
    k = rng.randrange(4)
    if k == 0:
        return ("POST", "/v1/embeddings",
                json.dumps({"model": "minilm", "input": rng.choice(SENTENCES)}), {200})
    if k == 1:
        return ("POST", "/v1/embeddings",
                json.dumps({"model": "minilm", "input": rng.sample(SENTENCES, 3),
                            "encoding_format": "base64"}), {200})
    if k == 2:
        return ("POST", "/v2/models/minilm/infer",
                json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                        "data": rng.sample(SENTENCES, 2)}]}), {200})
    return ("GET", "/v2/health/ready", None, {200})


BAD = [
    ("POST", "/v1/embeddings", '{"model": "minilm", "input": ', {400}),
    ("POST", "/v1/embeddings", json.dumps({"model": "nope", "input": "x"}), {404}),
    ("POST", "/v1/embeddings", json.dumps({"model": "../../etc/passwd", "input": "x"}), {404}),
    ("POST", "/v2/models/minilm/infer",
     json.dumps({"inputs": [{"name": "text", "datatype": "FP32", "shape": [1], "data": [1.0]}]}),
     {400}),
    ("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": "a" * (5 << 20)}), {413}),
    ("POST", "/v1/embeddings", b'{"model":"minilm","input":"bad \xff\xfe"}', {400}),
    ("POST", "/v1/embeddings", '{"input":' + "[" * 200 + "]" * 200 + "}", {400}),
    ("POST", "/v1/embeddings", '{"model":"minilm","model":"x","input":"a"}', {400}),
    ("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": "x", "foo": 1}), {400}),
    ("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": []}), {400}),
    ("GET", "/v2/models/..%2f..%2fetc/ready", None, {400, 404}),
    ("DELETE", "/v1/embeddings", None, {405}),
]


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--bad-share", type=float, default=0.3)
    ap.add_argument("--out")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="mantissa-soak-")
    cfg = {"server": {"listen": "127.0.0.1:0", "max_body_bytes": 4 << 20},
           "models": [{"name": "minilm", "path": MODEL,
                       "variants": [{"name": "fp32", "precision": "fp32"}]}]}
    cfg_path = os.path.join(tmp, "mantissa.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    log = open(os.path.join(tmp, "server.log"), "w+")
    proc = subprocess.Popen([BIN, "serve", "--config", cfg_path], stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    port = None
    deadline = time.time() + 120
    while time.time() < deadline and port is None:
        line = proc.stderr.readline()
        if not line:
            break
        log.write(line)
        # the start-up line, in either log format: "... serving on ADDR:PORT" or
        # {"msg":"serving on",...,"port":PORT,...}
        m = re.search(r'serving on(?: .*:|".*"port":)(\d+)', line)
        if m:
            port = int(m.group(1))
    if port is None:
        proc.kill()
        sys.exit("soak: the server did not start (log: %s)" % log.name)
    threading.Thread(target=lambda: [log.write(l) for l in proc.stderr], daemon=True).start()

    statuses = collections.Counter()
    violations = []
    lock = threading.Lock()
    stop = time.time() + a.seconds
    rss = [(0.0, rss_kb(proc.pid))]
    t0 = time.time()

    def client(seed):
        rng = random.Random(seed)
        conn = None
        while time.time() < stop:
            method, path, body, want = (rng.choice(BAD) if rng.random() < a.bad_share
                                        else valid_request(rng))
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request(method, path, body=body,
                             headers={"Content-Type": "application/json"} if body else {})
                r = conn.getresponse()
                r.read()
                st = r.status
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except Exception as e:  # a dropped connection on a too-large body is allowed
                st = "413-closed" if 413 in want else "error: %s" % type(e).__name__
                if conn:
                    conn.close()
                conn = None
            with lock:
                statuses[st] += 1
                if st not in want and st != "413-closed":
                    violations.append((method, path[:60], st, sorted(want)))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(min(5.0, max(0.1, stop - time.time())))
        rss.append((time.time() - t0, rss_kb(proc.pid)))
    for t in threads:
        t.join()
    rss.append((time.time() - t0, rss_kb(proc.pid)))
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)

    warm_at = min(60.0, a.seconds * 0.2)
    warm = next((kb for t, kb in rss if t >= warm_at), rss[-1][1])
    end = rss[-1][1]
    growth = (end - warm) / warm if warm > 0 else 0.0
    total = sum(statuses.values())
    ok = not violations and abs(growth) <= 0.05 and rc == 0
    lines = [
        "# Soak: mixed valid and invalid traffic against one server",
        "",
        "- date: %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
        "- machine: %s" % next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                                if l.startswith("model name")), "?"),
        "- command: `tests/deploy/soak.py --seconds %g --clients %d` (make soak)" % (a.seconds, a.clients),
        "- traffic: %d%% bad requests (invalid JSON, unknown model, path characters, wrong "
        "datatype, 5 MB body, invalid UTF-8, deep nesting, duplicate keys, unknown field, "
        "empty input, traversal in a path, wrong method)" % round(a.bad_share * 100),
        "",
        "| requests | per second | by status | unexpected | RSS start | RSS after warm-up (%gs) | RSS end | growth after warm-up | exit |" % warm_at,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        "| %d | %.1f | %s | %d | %.1f MiB | %.1f MiB | %.1f MiB | %+.2f%% | %d |" % (
            total, total / a.seconds,
            ", ".join("%s: %d" % (k, v) for k, v in sorted(statuses.items(), key=str)),
            len(violations), rss[0][1] / 1024, warm / 1024, end / 1024, growth * 100, rc),
        "",
        "verdict: %s (RSS must stay within 5%% after warm-up; every response as documented; exit 0)"
        % ("PASS" if ok else "FAIL"),
    ]
    if violations:
        lines.append("")
        lines.append("first unexpected: %s" % violations[:5])
    report = "\n".join(lines)
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
