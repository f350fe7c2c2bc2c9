"""Integration tests of the serving core: batching, backpressure and limits,
deadlines, disconnect cancellation, SIGTERM draining, KServe extensions
(binary tensors, config, stats, repository index), /metrics, API keys, TLS
and the request log.

No test has a timing threshold: where a request must be waiting in the
queue, the config gives it a long fixed batching delay, and the test polls
the server's own gauges (inflight, queue depth) until it is there."""
import json
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time
import http.client

import pytest

from conftest import BIN, ROOT, MODEL, Server, default_config, self_signed_cert

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")


def config(batching=None, **server):
    cfg = default_config(**server)
    if batching:
        cfg["models"][0]["batching"] = batching
    return cfg


@pytest.fixture
def start(tmp_path):
    """Starts servers with a given config; stops them (SIGTERM, exit 0) after the test."""
    started = []

    def _start(cfg):
        srv = Server(cfg, tmp_path / str(len(started)))
        started.append(srv)
        return srv

    (tmp_path / "0").mkdir()
    for i in range(1, 8):
        (tmp_path / str(i)).mkdir()
    yield _start
    for srv in started:
        if srv.proc.poll() is None:
            assert srv.stop() == 0, "".join(srv.log)


def metrics(srv, headers=None):
    """The server's /metrics as {name{labels}: value}."""
    resp, data = srv.request("GET", "/metrics", headers=headers, raw=True)
    assert resp.status == 200, data
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            key, val = line.rsplit(" ", 1)
            out[key] = float(val)
    return out


M = '{model="minilm",variant="fp32"}'


def wait_until(cond, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def inflight(srv):
    return metrics(srv)['mantissa_inflight_requests{model="minilm"}']


def embed_body(texts, model="minilm"):
    return {"model": model, "input": texts}


def post_async(srv, path, body, results, key, headers=None):
    def run():
        try:
            results[key] = srv.request("POST", path, body, headers=headers)
        except Exception as e:  # recorded, the test asserts on it
            results[key] = e
    t = threading.Thread(target=run)
    t.start()
    return t


def assert_openai_error(resp, data, status, param=None):
    assert resp.status == status, (resp.status, data)
    assert set(data["error"]) == {"message", "type", "param", "code"}, data
    if param is not None:
        assert data["error"]["param"] == param, data


def assert_kserve_error(resp, data, status, word=None):
    assert resp.status == status, (resp.status, data)
    assert isinstance(data["error"], str) and data["error"], data
    if word:
        assert word in data["error"], data


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    na = sum(x * x for x in a) ** 0.5
    nb = sum(x * x for x in b) ** 0.5
    return ab / (na * nb)


# ---- batching -----------------------------------------------------------------

TEXTS = ["A man is playing a guitar.", "short", "The weather is lovely today in the park.",
         "A dog runs across the field.", "Ünïcödé and 中文 mixed in", "x " * 300,
         "Someone is slicing an onion.", " ", "A plane is taking off.", "two words"]


def test_concurrent_requests_are_batched_and_each_gets_its_own_vectors(start):
    srv = start(config({"max_batch_size": 64, "max_queue_delay_us": 300000}))
    singles = {}
    for t in TEXTS:
        _, d = srv.request("POST", "/v1/embeddings", embed_body(t))
        singles[t] = d["data"][0]["embedding"]
    before = metrics(srv)
    results, threads = {}, []
    for i, t in enumerate(TEXTS * 2):
        threads.append(post_async(srv, "/v1/embeddings", embed_body(t), results, i))
    for th in threads:
        th.join()
    for i, t in enumerate(TEXTS * 2):
        resp, d = results[i]
        assert resp.status == 200, d
        assert cosine(d["data"][0]["embedding"], singles[t]) > 0.99999, t
    after = metrics(srv)
    batches = (after["mantissa_batch_size_count" + M] - before["mantissa_batch_size_count" + M])
    texts = after["mantissa_texts_total" + M] - before["mantissa_texts_total" + M]
    assert texts == 20
    assert batches < texts, "20 concurrent requests never shared a batch"


def test_a_request_larger_than_max_batch_size_is_split_and_joined_in_order(start):
    srv = start(config({"max_batch_size": 3, "max_batch_tokens": 64, "max_queue_delay_us": 0}))
    _, whole = srv.request("POST", "/v1/embeddings", embed_body(TEXTS))
    assert [d["index"] for d in whole["data"]] == list(range(len(TEXTS)))
    for i, t in enumerate(TEXTS):
        _, one = srv.request("POST", "/v1/embeddings", embed_body(t))
        assert cosine(whole["data"][i]["embedding"], one["data"][0]["embedding"]) > 0.99999, i
    _, st = srv.request("GET", "/v2/models/minilm/stats")
    s = st["model_stats"][0]
    assert s["inference_count"] == 2 * len(TEXTS)
    # 10 texts in batches of at most 3 (and at most 64 tokens): at least 4 batches
    assert s["execution_count"] >= 4 + len(TEXTS)
    assert all(b["batch_size"] <= 3 for b in s["batch_stats"])


def test_auto_delay_serves_concurrent_requests(start):
    srv = start(config({"max_batch_size": 16, "max_queue_delay_us": "auto",
                        "latency_target_ms": 200}))
    results, threads = {}, []
    for i in range(24):
        threads.append(post_async(srv, "/v1/embeddings", embed_body(TEXTS[i % 10]), results, i))
    for th in threads:
        th.join()
    assert all(results[i][0].status == 200 for i in range(24))
    _, cfg = srv.request("GET", "/v2/models/minilm/config")
    assert cfg["parameters"]["max_queue_delay_us"]["string_value"] == "auto"


# ---- backpressure, deadlines, readiness ----------------------------------------

def test_full_queue_is_429_with_retry_after_naming_max_queue(start):
    # the first request waits 5 s in the queue: the window for three refusals
    srv = start(config({"max_queue": 1, "max_queue_delay_us": 5000000}))
    openai = pytest.importorskip("openai")  # before the window: imports take time
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key="unused",
                           max_retries=0)
    results = {}
    t = post_async(srv, "/v1/embeddings", embed_body("held in the queue"), results, "first")
    wait_until(lambda: inflight(srv) == 1, "the first request to be admitted")
    resp, data = srv.request("POST", "/v1/embeddings", embed_body("one too many"))
    assert_openai_error(resp, data, 429, "max_queue")
    # what OpenAI sends for a rate limit: type "requests", code "rate_limit_exceeded"
    assert data["error"]["type"] == "requests" and data["error"]["code"] == "rate_limit_exceeded"
    assert int(resp.getheader("Retry-After")) >= 1
    with pytest.raises(openai.RateLimitError) as refused:
        client.embeddings.create(model="minilm", input="one too many, through the SDK")
    assert refused.value.code == "rate_limit_exceeded" and refused.value.type == "requests"
    resp, data = srv.request("POST", "/v2/models/minilm/infer",
                             {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                          "data": ["x"]}]})
    assert_kserve_error(resp, data, 429, "max_queue")
    t.join()
    assert results["first"][0].status == 200
    m = metrics(srv)
    assert m['mantissa_request_failures_total{model="minilm",variant="fp32",reason="queue_full"}'] == 3


def test_request_past_its_deadline_in_the_queue_is_504(start):
    srv = start(config({"max_queue_delay_us": 5000000}, request_timeout_ms=100))
    resp, data = srv.request("POST", "/v1/embeddings", embed_body("too slow"))
    assert_openai_error(resp, data, 504, "request_timeout_ms")
    resp, data = srv.request("POST", "/v2/models/minilm/infer",
                             {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                          "data": ["x"]}]})
    assert_kserve_error(resp, data, 504, "request_timeout_ms")
    m = metrics(srv)
    assert m['mantissa_request_failures_total{model="minilm",variant="fp32",reason="timeout"}'] == 2
    assert m["mantissa_texts_total" + M] == 0  # nothing ran


def test_kserve_timeout_parameter_gives_a_shorter_deadline(start):
    srv = start(config({"max_queue_delay_us": 5000000}))
    resp, data = srv.request("POST", "/v2/models/minilm/infer",
                             {"parameters": {"timeout": 50000},
                              "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                          "data": ["x"]}]})
    assert_kserve_error(resp, data, 504)


def test_client_disconnect_cancels_queued_work(start):
    srv = start(config({"max_queue_delay_us": 3000000}))
    body = json.dumps(embed_body(["never computed"] * 4)).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    wait_until(lambda: metrics(srv)["mantissa_queue_depth" + M] == 4, "the texts to be queued")
    s.close()
    key = 'mantissa_request_failures_total{model="minilm",variant="fp32",reason="cancelled"}'
    wait_until(lambda: metrics(srv)[key] == 1, "the cancellation to be counted")
    m = metrics(srv)
    assert m["mantissa_queue_depth" + M] == 0
    assert m["mantissa_texts_total" + M] == 0 and m["mantissa_tokens_total" + M] == 0
    assert m['mantissa_inflight_requests{model="minilm"}'] == 0
    resp, _ = srv.request("POST", "/v1/embeddings", embed_body("still serving"))
    assert resp.status == 200


def test_sigterm_finishes_every_request_in_flight_then_exits_0(start):
    # a delay long enough that no batch leaves before all n are admitted, even
    # on a loaded machine; SIGTERM then sends the queued batches at once
    srv = start(config({"max_batch_size": 64, "max_queue_delay_us": 5000000}))
    n = 12
    results, threads = {}, []
    for i in range(n):
        threads.append(post_async(srv, "/v1/embeddings", embed_body(TEXTS[i % 10]), results, i))
    wait_until(lambda: inflight(srv) == n, "all requests to be admitted")
    srv.proc.send_signal(signal.SIGTERM)
    for th in threads:
        th.join()
    statuses = [results[i][0].status if not isinstance(results[i], Exception) else results[i]
                for i in range(n)]
    assert statuses == [200] * n
    assert srv.proc.wait(timeout=60) == 0
    log = "".join(srv.log)
    assert "shutdown" in log


def test_only_the_loop_thread_takes_the_handled_signals(start):
    """SIGHUP/SIGINT/SIGTERM reach the scheduler's loop thread only: every
    other thread (engine worker and its OpenMP team, reload loader, HTTP
    threads) blocks them, so no handler ever runs inside a oneDNN JIT GEMM,
    which points rsp into the heap while it runs (server/main.c)."""
    srv = start(config())
    resp, data = srv.request("POST", "/v1/embeddings", embed_body(["start the engine's team"]))
    assert resp.status == 200, data
    pid = srv.proc.pid
    tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % pid))
    assert pid in tids and len(tids) >= 3, tids

    def blocked(tid):
        with open("/proc/%d/task/%d/status" % (pid, tid)) as f:
            mask = int(next(l for l in f if l.startswith("SigBlk:")).split()[1], 16)
        return {s for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM) if mask >> (s - 1) & 1}

    assert blocked(pid) == set(), "the loop thread blocks %s" % blocked(pid)
    everything = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM}
    open_threads = [t for t in tids if t != pid and blocked(t) != everything]
    assert not open_threads, "threads %s take signals" % open_threads
    # and the loop thread still acts on them
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=60) == 0


def test_openmp_spins_briefly_unless_the_user_chose_a_wait_policy(tmp_path):
    """The server re-executes itself with GOMP_SPINCOUNT=1000 and
    OMP_WAIT_POLICY=active (cmd/main.c: without "active", libgomp spins only
    100 times once its pools outnumber the CPUs) when neither is set, and
    leaves a user's choice alone."""
    def environ_of(extra):
        env = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MANTISSA_NO_REEXEC")}
        env.update(extra)
        srv = Server(config(), tmp_path, env=env)
        try:
            resp, data = srv.request("POST", "/v1/embeddings", embed_body(["spin"]))
            assert resp.status == 200, data
            with open("/proc/%d/environ" % srv.proc.pid, "rb") as f:
                got = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        finally:
            assert srv.stop() == 0
        return {k.decode(): v.decode() for k, v in got.items()
                if k in (b"OMP_WAIT_POLICY", b"GOMP_SPINCOUNT")}

    assert environ_of({}) == {"GOMP_SPINCOUNT": "1000", "OMP_WAIT_POLICY": "active"}
    assert environ_of({"GOMP_SPINCOUNT": "5000"}) == {"GOMP_SPINCOUNT": "5000"}
    assert environ_of({"OMP_WAIT_POLICY": "passive"}) == {"OMP_WAIT_POLICY": "passive"}


def held_request(srv, n_inputs):
    """A request whose client reads nothing: its socket's receive buffer is
    small and its answer (n_inputs embeddings as JSON, ~4 KB each: ~9 MB for
    2048, twice the largest TCP send buffer, net.core.wmem_max = 4 MiB on
    Debian) is larger than the two buffers hold, so the server cannot finish
    sending it, and the request stays in flight, until read_held() reads it. This holds a drain open for as long
    as a test needs, whatever the machine's speed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", srv.port))
    body = json.dumps(embed_body(["held %d" % i for i in range(n_inputs)])).encode()
    sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                 + body)
    return sock


def read_held(sock):
    """Reads a held request's answer to its end: (status, parsed JSON body)."""
    sock.settimeout(60)
    data = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_draining_server_is_unready_and_answers_new_requests_503(start):
    srv = start(config(shutdown_grace_ms=60000, max_inputs=2048))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)  # opened before SIGTERM
    conn.request("GET", "/v2/health/ready")
    r = conn.getresponse()
    r.read()
    assert r.status == 200
    held = held_request(srv, 2048)
    wait_until(lambda: inflight(srv) == 1, "the request to be admitted")
    srv.proc.send_signal(signal.SIGTERM)

    def unready():
        conn.request("GET", "/v2/health/ready")
        rr = conn.getresponse()
        rr.read()
        return rr.status == 503
    wait_until(unready, "readiness to go false")
    conn.request("POST", "/v1/embeddings", json.dumps(embed_body("late")),
                 {"Content-Type": "application/json"})
    rr = conn.getresponse()
    assert_openai_error(rr, json.loads(rr.read()), 503, "ready")
    conn.request("POST", "/v2/models/minilm/infer",
                 json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                         "data": ["late"]}]}))
    rr = conn.getresponse()
    assert_kserve_error(rr, json.loads(rr.read()), 503)
    conn.close()
    assert srv.proc.poll() is None  # still draining: the held answer is not out
    status, body = read_held(held)
    assert status == 200, body
    assert len(body["data"]) == 2048 and len(body["data"][2047]["embedding"]) == 384
    assert srv.proc.wait(timeout=60) == 0


def test_grace_period_over_answers_queued_requests_503_and_exits_0(start):
    srv = start(config({"max_queue_delay_us": 10000000}, shutdown_grace_ms=200))
    results = {}
    t = post_async(srv, "/v1/embeddings", embed_body("queued"), results, "q")
    wait_until(lambda: inflight(srv) == 1, "the request to be admitted")
    srv.proc.send_signal(signal.SIGTERM)
    t.join()
    # a draining server sends queued work straight to the engine, so the
    # request either ran or was answered 503 when the grace period ended
    assert results["q"][0].status in (200, 503)
    assert srv.proc.wait(timeout=60) == 0


# ---- limits ----------------------------------------------------------------------

def test_limits_each_name_themselves(start):
    srv = start(config(max_input_bytes=100, max_json_depth=8, max_inputs=4,
                       max_body_bytes=4096))
    resp, data = srv.request("POST", "/v1/embeddings", embed_body("a" * 101))
    assert_openai_error(resp, data, 413, "max_input_bytes")
    resp, data = srv.request("POST", "/v1/embeddings", embed_body(["a"] * 5))
    assert_openai_error(resp, data, 413, "max_inputs")
    resp, data = srv.request("POST", "/v1/embeddings", '{"model":"minilm","input":"x","user":' +
                             "[" * 9 + "]" * 9 + "}")
    assert_openai_error(resp, data, 400, "max_json_depth")
    resp, data = srv.request("POST", "/v1/embeddings", embed_body("a" * 5000))
    assert_openai_error(resp, data, 413, "max_body_bytes")
    resp, data = srv.request("POST", "/v2/models/minilm/infer",
                             {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                          "data": ["a" * 101]}]})
    assert_kserve_error(resp, data, 413, "max_input_bytes")
    resp, _ = srv.request("POST", "/v1/embeddings", embed_body(["a" * 100] * 4))
    assert resp.status == 200


# ---- KServe: binary tensors, config, stats, repository ------------------------------

def bytes_tensor(texts):
    return b"".join(struct.pack("<I", len(t)) + t for t in texts)


def binary_infer(srv, texts, request_params=None, outputs=None, extra=b""):
    raw = bytes_tensor(texts)
    header = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)],
                          "parameters": {"binary_data_size": len(raw)}}]}
    if request_params is not None:
        header["parameters"] = request_params
    if outputs is not None:
        header["outputs"] = outputs
    h = json.dumps(header).encode()
    return srv.request("POST", "/v2/models/minilm/infer", h + raw + extra,
                       headers={"Inference-Header-Content-Length": str(len(h)),
                                "Content-Type": "application/octet-stream"}, raw=True)


def test_kserve_binary_tensor_extension_in_and_out(start):
    srv = start(config())
    texts = [b"A man is playing a guitar.", "Ünïcödé".encode(), b" "]
    resp, data = binary_infer(srv, texts, {"binary_data_output": True})
    assert resp.status == 200, data
    hlen = int(resp.getheader("Inference-Header-Content-Length"))
    head = json.loads(data[:hlen])
    out = head["outputs"][0]
    assert out["shape"] == [3, 384] and "data" not in out
    assert out["parameters"]["binary_data_size"] == 3 * 384 * 4 == len(data) - hlen
    vec = struct.unpack("<%df" % (3 * 384), data[hlen:])
    # the same as JSON in, JSON out
    _, j = srv.request("POST", "/v2/models/minilm/infer",
                       {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3],
                                    "data": [t.decode() for t in texts]}]})
    assert max(abs(a - b) for a, b in zip(vec, j["outputs"][0]["data"])) < 1e-6
    # binary in, JSON out (per-output binary_data false)
    resp, data = binary_infer(srv, texts, outputs=[{"name": "embedding",
                                                    "parameters": {"binary_data": False}}])
    assert resp.status == 200 and resp.getheader("Inference-Header-Content-Length") is None
    assert len(json.loads(data)["outputs"][0]["data"]) == 3 * 384


def test_kserve_binary_errors(start):
    srv = start(config())
    # a zero-length element: an empty text, refused by its index
    resp, data = binary_infer(srv, [b"abc", b""])
    assert_kserve_error(resp, json.loads(data), 400, "text[1] is an empty string")
    # extra bytes after the declared tensor
    resp, data = binary_infer(srv, [b"abc"], extra=b"zz")
    assert_kserve_error(resp, json.loads(data), 400, "binary_data_size")
    # an element length running past the end
    h = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                "parameters": {"binary_data_size": 6}}]}).encode()
    resp, data = srv.request("POST", "/v2/models/minilm/infer", h + struct.pack("<I", 99) + b"ab",
                             headers={"Inference-Header-Content-Length": str(len(h))}, raw=True)
    assert_kserve_error(resp, json.loads(data), 400)
    # a header length past the body
    resp, data = srv.request("POST", "/v2/models/minilm/infer", b"{}",
                             headers={"Inference-Header-Content-Length": "99"}, raw=True)
    assert_kserve_error(resp, json.loads(data), 400, "Inference-Header-Content-Length")
    # fewer elements than the shape says
    raw = bytes_tensor([b"one"])
    h = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                "parameters": {"binary_data_size": len(raw)}}]}).encode()
    resp, data = srv.request("POST", "/v2/models/minilm/infer", h + raw,
                             headers={"Inference-Header-Content-Length": str(len(h))}, raw=True)
    assert_kserve_error(resp, json.loads(data), 400)


def test_kserve_config_stats_index_and_request_id(start):
    srv = start(config({"max_batch_size": 8, "max_queue_delay_us": 1000}))
    _, meta = srv.request("GET", "/v2")
    assert "binary_tensor_data" in meta["extensions"] and "statistics" in meta["extensions"]
    _, cfg = srv.request("GET", "/v2/models/minilm/config")
    assert cfg["name"] == "minilm" and cfg["max_batch_size"] == 0
    assert cfg["input"][0]["name"] == "text" and cfg["input"][0]["data_type"] == "TYPE_STRING"
    assert cfg["output"][0]["dims"] == [-1, 384]
    resp, data = srv.request("POST", "/v2/models/minilm/infer",
                             {"id": "my-id-7", "inputs": [{"name": "text", "datatype": "BYTES",
                                                           "shape": [2], "data": ["a", "b"]}]})
    assert resp.status == 200 and data["id"] == "my-id-7"
    assert resp.getheader("X-Request-Id") == "my-id-7"
    resp, _ = srv.request("POST", "/v1/embeddings", embed_body("x"),
                          headers={"X-Request-Id": "from-header"})
    assert resp.getheader("X-Request-Id") == "from-header"
    for path in ("/v2/models/minilm/stats", "/v2/models/minilm/versions/1/stats",
                 "/v2/models/stats"):
        resp, st = srv.request("GET", path)
        assert resp.status == 200
        s = st["model_stats"][0]
        assert s["name"] == "minilm" and s["version"] == "1"
        assert s["inference_count"] == 3 and s["execution_count"] >= 1
        for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
            assert set(s["inference_stats"][k]) == {"count", "ns"}
        assert s["inference_stats"]["success"]["count"] == 2
        assert sum(b["compute_infer"]["count"] for b in s["batch_stats"]) == s["execution_count"]
    resp, data = srv.request("GET", "/v2/models/nope/stats")
    assert_kserve_error(resp, data, 404)
    resp, idx = srv.request("POST", "/v2/repository/index", b"")
    assert resp.status == 200 and idx == [{"name": "minilm", "version": "1", "state": "READY",
                                           "reason": ""}]


# ---- metrics, logs ---------------------------------------------------------------

def test_metrics_are_prometheus_text_and_pass_promtool(start):
    srv = start(config())
    srv.request("POST", "/v1/embeddings", embed_body(["a", "b c"]))
    srv.request("POST", "/v1/embeddings", embed_body([]))
    resp, text = srv.request("GET", "/metrics", raw=True)
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/plain")
    m = metrics(srv)
    assert m["mantissa_request_success_total" + M] == 1
    assert m['mantissa_request_failures_total{model="minilm",variant="fp32",reason="invalid"}'] == 1
    assert m["mantissa_texts_total" + M] == 2 and m["mantissa_tokens_total" + M] == 7
    ver = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.split()
    assert m['mantissa_build_info{version="%s",commit="%s"}' % (ver[1], ver[3][:-1])] == 1
    assert m['mantissa_resident_weight_bytes{model="minilm",variant="fp32",precision="fp32"}'] > 1e7
    for h in ("request_duration_seconds", "queue_duration_seconds", "compute_duration_seconds",
              "batch_size"):
        assert 'mantissa_%s_bucket{model="minilm",variant="fp32",le="+Inf"}' % h in m
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not installed (Debian package prometheus; make deps installs it)")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_one_json_log_line_per_request(start):
    srv = start(config())
    srv.request("POST", "/v1/embeddings", embed_body("logged"), headers={"X-Request-Id": "log-1"})
    srv.request("POST", "/v1/embeddings", {"model": "nope", "input": "x"},
                headers={"X-Request-Id": "log-2"})

    def lines():
        out = []
        for l in list(srv.log):
            if l.startswith("{"):
                out.append(json.loads(l))
        return out
    wait_until(lambda: len([l for l in lines() if l.get("id") in ("log-1", "log-2")]) == 2,
               "the log lines")
    by_id = {l["id"]: l for l in lines() if l.get("msg") == "request" and "id" in l}
    ok = by_id["log-1"]
    assert ok["status"] == 200 and ok["model"] == "minilm" and ok["variant"] == "fp32"
    for k in ("ts", "level", "queue_ms", "compute_ms", "total_ms", "method", "path"):
        assert k in ok
    bad = by_id["log-2"]
    assert bad["status"] == 404 and "error" in bad


# ---- access control ------------------------------------------------------------------

def test_api_keys_guard_everything_but_health(start, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# keys\nsecret-one\n\nsecret-two\n")
    srv = start(config(api_keys_file=str(keys)))
    resp, data = srv.request("POST", "/v1/embeddings", embed_body("x"))
    assert_openai_error(resp, data, 401)
    assert resp.getheader("WWW-Authenticate") == "Bearer"
    resp, data = srv.request("POST", "/v1/embeddings", embed_body("x"),
                             headers={"Authorization": "Bearer wrong"})
    assert_openai_error(resp, data, 401)
    resp, data = srv.request("GET", "/v2/models/minilm")
    assert_kserve_error(resp, data, 401)
    resp, _ = srv.request("GET", "/metrics", raw=True)
    assert resp.status == 401
    for path in ("/v2/health/live", "/v2/health/ready", "/health"):
        resp, _ = srv.request("GET", path)
        assert resp.status == 200
    # the index at GET / names the build and every route: a key like the rest
    resp, data = srv.request("GET", "/")
    assert resp.status == 401 and data["error_type"] and "routes" not in data, data
    resp, data = srv.request("GET", "/", headers={"Authorization": "Bearer secret-one"})
    assert resp.status == 200 and data["routes"], data
    for key in ("secret-one", "secret-two"):
        resp, _ = srv.request("POST", "/v1/embeddings", embed_body("x"),
                              headers={"Authorization": "Bearer " + key})
        assert resp.status == 200


def test_tls_serves_https(start, tmp_path):
    cert, key = self_signed_cert(tmp_path)
    srv = start(config(tls_cert=str(cert), tls_key=str(key)))
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=60)
    conn.request("POST", "/v1/embeddings", json.dumps(embed_body("over TLS")),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = json.loads(r.read())
    assert r.status == 200 and len(data["data"][0]["embedding"]) == 384
    conn.close()


def test_bad_serving_config_names_the_field(tmp_path):
    for batching, field in (({"max_queue_delay_us": "soon"}, "max_queue_delay_us"),
                            ({"latency_target_ms": 0}, "latency_target_ms")):
        cfg = config(batching)
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(cfg))
        r = subprocess.run([BIN, "serve", "--config", str(p)], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
        assert r.returncode != 0 and field in r.stderr, r.stderr
    cfg = config(tls_cert="/nonexistent.pem")
    p.write_text(json.dumps(cfg))
    r = subprocess.run([BIN, "serve", "--config", str(p)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode != 0 and "tls_key" in r.stderr, r.stderr
