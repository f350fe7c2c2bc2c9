#!/usr/bin/env python3
"""memcheck.py: a short server run under valgrind memcheck (make
test-valgrind). Starts the release binary under valgrind with the real
model, sends a mix of good and bad requests over real HTTP (OpenAI and
KServe, JSON and binary, errors of every kind, metrics, admin) and KServe
over gRPC (server.grpc_listen: good, refused and malformed calls), hot-adds and
then removes a second variant through the config file (so a build is made,
swapped in and freed), stops the server with SIGTERM, and fails unless
valgrind reports no error and no leaked block (definitely or indirectly
lost). tests/valgrind.supp lists what is not counted, and why.

  tests/memcheck.py [--bin build/release/mantissa] [--keep]
Prints valgrind's summary; the whole log is kept with --keep (or on failure).
"""
import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
from deploylib import free_port  # noqa: E402
from deploylib import request as http_request  # noqa: E402


def request(port, method, path, body=None, headers=None):
    """(status, body bytes); valgrind makes a forward take seconds and a
    build (what /v2/admin/reload waits for) minutes: 268 s was seen on a
    loaded machine, so the wait is generous (it bounds a hang, it is not a
    speed check)."""
    st, _, data = http_request(port, method, path, body, headers, timeout=900)
    if st is None:
        raise OSError(data.decode(errors="replace"))
    return st, data


def wait_until(cond, what, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("memcheck: timed out waiting for " + what)


def variants(port):
    st, data = request(port, "GET", "/v2/admin/config")
    m = json.loads(data)["models"][0]
    return {v["name"]: v["state"] for v in m["variants"]}


def drive_grpc(port):
    """KServe over gRPC (server.grpc_listen): good and bad calls, each code
    checked; 0 calls when grpcio is not installed."""
    try:
        import grpc
        from tritonclient.grpc import service_pb2 as pb
    except ImportError:
        print("memcheck: grpcio or tritonclient not installed: no gRPC calls")
        return 0
    raw = b"".join(struct.pack("<I", len(t)) + t for t in (b"alpha", "b\u00e9ta".encode()))

    def infer(model, shape, raw_tensor):
        req = pb.ModelInferRequest(model_name=model, id="g1", raw_input_contents=[raw_tensor])
        req.inputs.add(name="text", datatype="BYTES", shape=[shape])
        return req.SerializeToString()
    calls = [
        ("ServerReady", b"", grpc.StatusCode.OK),
        ("ModelInfer", infer("minilm", 2, raw), grpc.StatusCode.OK),
        ("ModelInfer", infer("minilm", 1, struct.pack("<I", 0)), grpc.StatusCode.INVALID_ARGUMENT),
        ("ModelInfer", infer("nope", 2, raw), grpc.StatusCode.NOT_FOUND),
        ("ModelInfer", b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT),
        ("ModelConfig", pb.ModelConfigRequest(name="minilm").SerializeToString(),
         grpc.StatusCode.OK),
        ("ModelStatistics", b"", grpc.StatusCode.OK),
        ("ModelStreamInfer", b"", grpc.StatusCode.UNIMPLEMENTED),
    ]
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        for method, payload, want in calls:
            f = ch.unary_unary("/inference.GRPCInferenceService/" + method,
                               request_serializer=None, response_deserializer=None)
            try:
                f(payload, timeout=900)
                got = grpc.StatusCode.OK
            except grpc.RpcError as e:
                got = e.code()
            if got != want:
                raise SystemExit("memcheck: gRPC %s answered %s, expected %s" % (method, got, want))
    return len(calls)


def drive(port, cfg_path, cfg):
    """The requests; each answer's status is checked, so that the run covers
    what it says it covers."""
    expect = []

    def call(status, method, path, body=None, headers=None):
        t = time.time()
        st, data = request(port, method, path, body, headers)
        if os.environ.get("MEMCHECK_VERBOSE"):
            print("  %d %s %s: %.1f s" % (st, method, path, time.time() - t), flush=True)
        expect.append((status, st, method, path))
        if st != status:
            raise SystemExit("memcheck: %s %s answered %d, expected %d: %s"
                             % (method, path, st, status, data[:300]))
        return data

    texts = ["A man is playing a guitar.", "short", "Ünïcödé and 中文", " "]
    call(200, "POST", "/v1/embeddings", {"model": "minilm", "input": texts})
    call(400, "POST", "/v1/embeddings", {"model": "minilm", "input": ["a", ""]})
    call(200, "POST", "/v1/embeddings", {"model": "minilm", "input": "x",
                                         "encoding_format": "base64"})
    call(200, "POST", "/v2/models/minilm/infer",
         {"id": "k1", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                  "data": ["one", "two"]}]})
    raw = b"".join(struct.pack("<I", len(t)) + t for t in (b"alpha", b"beta"))
    hdr = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                  "parameters": {"binary_data_size": len(raw)}}],
                      "outputs": [{"name": "embedding", "parameters": {"binary_data": True}}]})
    call(200, "POST", "/v2/models/minilm/infer", hdr.encode() + raw,
         {"Inference-Header-Content-Length": str(len(hdr)),
          "Content-Type": "application/octet-stream"})
    call(400, "POST", "/v1/embeddings", b'{"model": "minilm", "input": [')
    call(400, "POST", "/v1/embeddings", b'{"model":"minilm","input":"bad \xc3\x28"}')
    call(400, "POST", "/v1/embeddings", '{"model":"minilm","input":"a","input":"b"}')
    call(404, "POST", "/v1/embeddings", {"model": "nope", "input": "x"})
    call(413, "POST", "/v1/embeddings", {"model": "minilm", "input": ["x"] * 100})
    call(400, "POST", "/v2/models/minilm/infer",
         {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3], "data": ["a"]}]})
    call(404, "GET", "/nothing")
    call(405, "GET", "/v1/embeddings")
    call(200, "GET", "/metrics")
    call(200, "GET", "/v2/models/minilm/stats")
    call(200, "POST", "/v2/models/minilm/compare", {"input": ["a b c"]})

    # hot-add a second variant, use it, then take it away again (FP32: a
    # 16-bit or INT8 build converts every weight, minutes under valgrind)
    cfg["models"][0]["variants"].append({"name": "again", "precision": "fp32", "traffic": 0})
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    call(200, "POST", "/v2/admin/reload")
    wait_until(lambda: variants(port).get("again") == "ready", "the second variant", 600)
    call(200, "POST", "/v1/embeddings", {"model": "minilm@again", "input": texts})
    cfg["models"][0]["variants"].pop()
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    call(200, "POST", "/v2/admin/reload")
    wait_until(lambda: "again" not in variants(port), "the second variant to go", 600)
    call(200, "POST", "/v1/embeddings", {"model": "minilm", "input": texts})
    return len(expect)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "mantissa"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("memcheck: valgrind is not installed (tools/install-deps.sh --test-tools)")
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        sys.exit("memcheck: the model is not fetched (make model)")
    work = tempfile.mkdtemp(prefix="mantissa-memcheck-")
    port = free_port()
    # engine_threads 1: with a team of OpenMP worker threads, GEMMs run on
    # them, and oneDNN's JIT kernels (which point rsp into a heap workspace,
    # valgrind.supp) made valgrind lose track of what is defined on those
    # threads' stacks: ~470 contexts of "uninitialised value" in libdnnl,
    # libgomp, pthread and TLS code, none with a frame of ours; and every
    # build's team measurement (server/core/team.c) took minutes. One engine
    # thread: 0 errors in 72 s.
    grpc_port = free_port()
    cfg = {"server": {"listen": "127.0.0.1:%d" % port, "max_inputs": 16,
                      "watch": False, "engine_threads": 1,
                      "grpc_listen": "127.0.0.1:%d" % grpc_port},
           "models": [{"name": "minilm", "path": MODEL,
                       "variants": [{"name": "fp32", "precision": "fp32", "traffic": 100}]}]}
    cfg_path = os.path.join(work, "mantissa.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    log = os.path.join(work, "valgrind.log")
    # OMP_WAIT_POLICY set: the binary then does not re-exec itself to set it
    # (under valgrind /proc/self/exe is valgrind's own tool)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    cmd = ["valgrind", "--error-exitcode=99", "--leak-check=full",
           "--show-leak-kinds=definite,indirect", "--errors-for-leak-kinds=definite,indirect",
           "--suppressions=" + os.path.join(ROOT, "tests", "valgrind.supp"),
           "--num-callers=40", "--log-file=" + log, a.bin, "serve", "--config", cfg_path]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=open(os.path.join(work, "server.log"),
                                                                  "w"))
    try:
        wait_until(lambda: proc.poll() is None and
                   request(port, "GET", "/v2/health/ready")[0] == 200, "readiness", 600)
        n = drive(port, cfg_path, cfg) + drive_grpc(grpc_port)
    except BaseException:
        proc.kill()
        proc.wait()
        print("memcheck: failed; logs kept in %s" % work)
        raise
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=600)
    with open(log) as f:
        text = f.read()
    summary = [l.split("== ", 1)[-1] for l in text.splitlines()
               if re.search(r"(ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|"
                            r"still reachable|suppressed:)", l)]
    print("memcheck: %d requests, %.0f s under valgrind, exit %d" % (n, time.time() - t0, rc))
    for l in summary:
        print("  " + l)
    errors = re.search(r"ERROR SUMMARY: (\d+) errors", text)
    lost = [int(x.replace(",", "")) for x in
            re.findall(r"(?:definitely|indirectly) lost: ([\d,]+) bytes", text)]
    ok = rc == 0 and errors and int(errors.group(1)) == 0 and not any(lost)
    if ok and not a.keep:
        shutil.rmtree(work)
    else:
        print("memcheck: %s; valgrind log: %s" % ("ok" if ok else "FAILED", log))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
