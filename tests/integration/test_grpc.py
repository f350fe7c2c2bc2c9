"""KServe v2 over gRPC (server.grpc_listen), against the real binary with the
real gRPC clients: tritonclient.grpc, perf_analyzer -i grpc, and grpcio's
own channel for what those clients never send (malformed messages, methods
the server lacks). The answers must be the HTTP route's: the same vectors,
the same checks and messages, as gRPC status codes."""
import json
import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from conftest import MODEL, Server, default_config, port_in_use, self_signed_cert, BIN, ROOT

grpc = pytest.importorskip("grpc")
tgrpc = pytest.importorskip("tritonclient.grpc")
from tritonclient.grpc import service_pb2 as pb  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.",
             "The stock market fell sharply today."]
SERVICE = "/inference.GRPCInferenceService/"


def grpc_port(srv):
    for ev in srv.events("serving on"):
        if "grpc_port" in ev:
            return ev["grpc_port"]
    raise AssertionError("no gRPC port in the start-up line:\n" + "".join(srv.log))


def start(tmp_path, **server):
    cfg = default_config(grpc_listen="127.0.0.1:0", **server)
    s = Server(cfg, tmp_path)
    s.grpc = "127.0.0.1:%d" % grpc_port(s)
    return s


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    cfg = default_config(grpc_listen="127.0.0.1:0")
    cfg["models"][0]["variants"] = [
        {"name": "fp32", "precision": "fp32", "traffic": 100},
        {"name": "int8", "precision": "int8", "traffic": 0}]
    s = Server(cfg, tmp_path_factory.mktemp("grpc"))
    s.grpc = "127.0.0.1:%d" % grpc_port(s)
    yield s
    assert s.stop() == 0, "".join(s.log)


def texts_input(texts):
    inp = tgrpc.InferInput("text", [len(texts)], "BYTES")
    inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
    return inp


def http_vectors(srv, texts):
    r, body = srv.request("POST", "/v2/models/minilm/infer", {
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]})
    assert r.status == 200, body
    out = body["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def raw_call(srv, method, payload, metadata=None, timeout=30):
    """A unary call with payload as the request's bytes, as they are; returns
    (response bytes or None, status code, details)."""
    with grpc.insecure_channel(srv.grpc) as ch:
        f = ch.unary_unary(SERVICE + method, request_serializer=None,
                           response_deserializer=None)
        try:
            return f(payload, metadata=metadata, timeout=timeout), grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return None, e.code(), e.details()


def logged(srv, request_id, timeout=30):
    """The log lines of a request (the log is read from the server's stderr
    by another thread: it may arrive after the answer)."""
    deadline = time.time() + timeout
    while True:
        ev = [e for e in srv.events("request") if e.get("id") == request_id]
        if ev or time.time() > deadline:
            return ev
        time.sleep(0.05)


def still_ready(srv):
    c = tgrpc.InferenceServerClient(srv.grpc)
    assert c.is_server_ready()
    r, _ = srv.request("GET", "/v2/health/ready")
    assert r.status == 200


# ---- the service, as tritonclient.grpc uses it -----------------------------

def test_health_metadata_and_config_match_http(srv):
    c = tgrpc.InferenceServerClient(srv.grpc)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("minilm") and not c.is_model_ready("nope")
    _, meta = srv.request("GET", "/v2")
    sm = c.get_server_metadata(as_json=True)
    assert sm["name"] == meta["name"] and sm["version"] == meta["version"]
    assert sm["extensions"] == meta["extensions"]
    mm = c.get_model_metadata("minilm", as_json=True)
    assert mm["inputs"][0] == {"name": "text", "datatype": "BYTES", "shape": ["-1"]}
    assert mm["outputs"][0]["shape"] == ["-1", "384"]
    cfg = c.get_model_config("minilm").config
    assert cfg.name == "minilm" and cfg.max_batch_size == 0
    assert cfg.input[0].name == "text" and cfg.input[0].data_type == 13  # TYPE_STRING
    assert cfg.output[0].data_type == 11 and list(cfg.output[0].dims) == [-1, 384]
    assert cfg.parameters["max_batch_size"].string_value.isdigit()


def test_infer_gives_the_http_vectors(srv):
    c = tgrpc.InferenceServerClient(srv.grpc)
    r = c.infer("minilm", [texts_input(SENTENCES)], request_id="req-7")
    got = r.as_numpy("embedding")
    want = http_vectors(srv, SENTENCES)
    assert got.shape == (3, 384) and got.dtype == np.float32
    assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want))
    resp = r.get_response()
    assert resp.id == "req-7" and resp.model_name == "minilm" and resp.model_version == "1"
    assert resp.parameters["variant"].string_param == "fp32"
    assert resp.parameters["truncated_inputs"].int64_param == 0
    assert resp.parameters["prompt_tokens"].int64_param > 0
    assert "binary_data_size" not in resp.outputs[0].parameters


def test_infer_takes_bytes_contents_as_well_as_raw(srv):
    req = pb.ModelInferRequest(model_name="minilm")
    t = req.inputs.add(name="text", datatype="BYTES", shape=[2])
    t.contents.bytes_contents.extend([s.encode() for s in SENTENCES[:2]])
    data, code, details = raw_call(srv, "ModelInfer", req.SerializeToString())
    assert code == grpc.StatusCode.OK, details
    resp = pb.ModelInferResponse.FromString(data)
    got = np.frombuffer(resp.raw_output_contents[0], dtype="<f4").reshape(2, 384)
    want = http_vectors(srv, SENTENCES[:2])
    assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want))


def test_variant_routing_and_answer_metadata(srv):
    req = pb.ModelInferRequest(model_name="minilm")
    t = req.inputs.add(name="text", datatype="BYTES", shape=[1])
    t.contents.bytes_contents.append(b"pick a variant")
    with grpc.insecure_channel(srv.grpc) as ch:
        f = ch.unary_unary(SERVICE + "ModelInfer", request_serializer=None,
                           response_deserializer=None)
        data, call = f.with_call(req.SerializeToString(),
                                 metadata=[("x-mantissa-variant", "int8"),
                                           ("x-request-id", "grpc-trace-1")])
    md = dict(call.initial_metadata())
    assert md["x-mantissa-variant"] == "int8" and md["x-mantissa-precision"] == "int8"
    assert md["x-request-id"] == "grpc-trace-1"
    resp = pb.ModelInferResponse.FromString(data)
    assert resp.parameters["variant"].string_param == "int8"
    ev = logged(srv, "grpc-trace-1")
    assert ev and ev[0]["method"] == "GRPC" and ev[0]["path"].endswith("/ModelInfer")
    assert ev[0]["variant"] == "int8" and ev[0]["status"] == 200


def test_statistics_and_repository(srv):
    c = tgrpc.InferenceServerClient(srv.grpc)
    c.infer("minilm", [texts_input(["count me"])])
    st = c.get_inference_statistics("minilm").model_stats
    assert st[0].name == "minilm" and st[0].inference_stats.success.count >= 1
    assert any(m.name == "minilm" for m in c.get_inference_statistics().model_stats)
    idx = c.get_model_repository_index().models
    assert [(m.name, m.state) for m in idx] == [("minilm", "READY")]


# ---- errors: the HTTP route's checks and messages, as gRPC codes ----------

@pytest.mark.parametrize("name,texts,model,code,words", [
    ("an empty text", [""], "minilm", "INVALID_ARGUMENT", ["text[0]", "empty"]),
    ("an unknown model", ["x"], "nope", "NOT_FOUND", ["nope"]),
    ("a model name with a slash", ["x"], "a/b", "NOT_FOUND", ["a/b"]),
    ("too many texts", ["x"] * 65, "minilm", "RESOURCE_EXHAUSTED", ["max_inputs"]),
])
def test_bad_requests_get_the_http_checks_as_grpc_codes(srv, name, texts, model, code, words):
    c = tgrpc.InferenceServerClient(srv.grpc)
    with pytest.raises(InferenceServerException) as e:
        c.infer(model, [texts_input(texts)])
    assert e.value.status() == "StatusCode." + code, e.value
    for w in words:
        assert w in e.value.message(), e.value.message()
    still_ready(srv)


def test_wrong_input_name_and_datatype(srv):
    c = tgrpc.InferenceServerClient(srv.grpc)
    inp = tgrpc.InferInput("words", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"x"], dtype=object))
    with pytest.raises(InferenceServerException) as e:
        c.infer("minilm", [inp])
    assert "StatusCode.INVALID_ARGUMENT" == e.value.status() and '"words"' in e.value.message()
    inp = tgrpc.InferInput("text", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("minilm", [inp])
    assert "BYTES" in e.value.message()


def test_malformed_and_unknown_messages(srv):
    # not a protobuf message at all
    _, code, details = raw_call(srv, "ModelInfer", b"\xff\xff\xff\xff\x0f")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "ModelInferRequest" in details
    # a field claiming more bytes than the message has
    _, code, _ = raw_call(srv, "ModelInfer", b"\x0a\xff\x01abc")
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    # raw contents that do not pair with the inputs
    req = pb.ModelInferRequest(model_name="minilm")
    req.inputs.add(name="text", datatype="BYTES", shape=[1])
    req.raw_input_contents.extend([b"\x01\x00\x00\x00a", b"\x01\x00\x00\x00b"])
    _, code, details = raw_call(srv, "ModelInfer", req.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in details
    # an input without elements
    req = pb.ModelInferRequest(model_name="minilm")
    req.inputs.add(name="text", datatype="BYTES", shape=[1])
    _, code, details = raw_call(srv, "ModelInfer", req.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no elements" in details
    # a length prefix past the raw bytes (the HTTP extension's own check)
    req = pb.ModelInferRequest(model_name="minilm")
    req.inputs.add(name="text", datatype="BYTES", shape=[1])
    req.raw_input_contents.append(b"\xff\x00\x00\x00abc")
    _, code, details = raw_call(srv, "ModelInfer", req.SerializeToString())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "element 0" in details
    # methods the server does not have
    for m in ("ModelStreamInfer", "SystemSharedMemoryStatus", "NoSuchMethod"):
        _, code, details = raw_call(srv, m, b"")
        assert code == grpc.StatusCode.UNIMPLEMENTED and m in details
    still_ready(srv)


def test_a_message_over_max_body_bytes_is_refused(srv):
    big = "word " * ((1 << 20) // 5 + 100)  # the fixture's max_body_bytes is 1 MiB
    req = pb.ModelInferRequest(model_name="minilm")
    t = req.inputs.add(name="text", datatype="BYTES", shape=[1])
    t.contents.bytes_contents.append(big.encode())
    _, code, _ = raw_call(srv, "ModelInfer", req.SerializeToString())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    still_ready(srv)


def test_deadline_becomes_the_request_timeout(srv):
    # a deadline already past when the request is queued: the server's
    # scheduler refuses it (504 in HTTP) or the client's deadline fires first
    c = tgrpc.InferenceServerClient(srv.grpc)
    with pytest.raises(InferenceServerException) as e:
        c.infer("minilm", [texts_input(SENTENCES * 20)], client_timeout=1e-6)
    assert e.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    still_ready(srv)


def test_a_cancelled_call_drops_its_queued_texts(srv):
    # A: long HTTP requests that keep the one engine worker busy for several
    # seconds on this machine, whatever its speed: one is timed first, and
    # enough are sent to last about 4 s
    long_texts = ["word%d " % i * 120 for i in range(32)]
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [32], "data": long_texts}]}
    t0 = time.monotonic()
    r, _ = srv.request("POST", "/v2/models/minilm/infer", body)
    assert r.status == 200
    n = min(64, max(2, int(4.0 / max(time.monotonic() - t0, 0.01)) + 1))
    done = []
    threads = [threading.Thread(target=lambda: done.append(
        srv.request("POST", "/v2/models/minilm/infer", body))) for _ in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    # B: queued behind A, then cancelled by its client (no deadline: the
    # scheduler's own timeout is not what drops it)
    req = pb.ModelInferRequest(model_name="minilm", id="cancel-me")
    x = req.inputs.add(name="text", datatype="BYTES", shape=[32])
    x.contents.bytes_contents.extend(t.encode() for t in long_texts)
    with grpc.insecure_channel(srv.grpc) as ch:
        f = ch.unary_unary(SERVICE + "ModelInfer", request_serializer=None,
                           response_deserializer=None)
        fut = f.future(req.SerializeToString())
        time.sleep(0.3)
        # the premise: A's requests still hold the worker when B is cancelled
        assert len(done) < n, "all %d long requests ended before the cancel" % n
        assert fut.cancel()
    for t in threads:
        t.join(timeout=600)
    assert len(done) == n and all(d[0].status == 200 for d in done)
    ev = logged(srv, "cancel-me")
    assert ev, "".join(srv.log[-20:])
    # logged as the client's cancel, and its texts never ran
    assert ev[0]["status"] == 499 and ev[0]["compute_ms"] == 0, ev[0]
    still_ready(srv)


# ---- limits, keys and TLS shared with HTTP ----------------------------------

def test_api_keys_apply_to_grpc_but_not_to_health(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("sekrit-key\n")
    s = start(tmp_path, api_keys_file=str(keys))
    try:
        c = tgrpc.InferenceServerClient(s.grpc)
        assert c.is_server_live() and c.is_server_ready()
        with pytest.raises(InferenceServerException) as e:
            c.infer("minilm", [texts_input(["x"])])
        assert e.value.status() == "StatusCode.UNAUTHENTICATED"
        with pytest.raises(InferenceServerException) as e:
            c.infer("minilm", [texts_input(["x"])], headers={"authorization": "Bearer wrong"})
        assert e.value.status() == "StatusCode.UNAUTHENTICATED"
        r = c.infer("minilm", [texts_input(["x"])],
                    headers={"authorization": "Bearer sekrit-key"})
        assert r.as_numpy("embedding").shape == (1, 384)
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_tls(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    s = start(tmp_path, tls_cert=str(cert), tls_key=str(key))
    try:
        c = tgrpc.InferenceServerClient("localhost:%s" % s.grpc.split(":")[1], ssl=True,
                                        root_certificates=str(cert))
        r = c.infer("minilm", [texts_input(["over TLS"])])
        assert r.as_numpy("embedding").shape == (1, 384)
        # a plaintext client cannot talk to it
        plain = tgrpc.InferenceServerClient(s.grpc)
        with pytest.raises(InferenceServerException):
            plain.is_server_live(client_timeout=5)
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_a_grpc_port_in_use_is_said_before_the_models_are_built(tmp_path):
    with port_in_use() as port:
        cfg = default_config(grpc_listen="127.0.0.1:%d" % port)
        path = tmp_path / "c.json"
        path.write_text(json.dumps(cfg))
        r = subprocess.run([BIN, "serve", "--config", str(path)], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
    assert r.returncode != 0
    assert "server.grpc_listen" in r.stderr and str(port) in r.stderr, r.stderr
    assert "models ready" not in r.stderr, r.stderr


def test_grpc_listen_is_checked_in_the_config_and_on_the_command_line(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(default_config(grpc_listen="localhost:8001")))
    r = subprocess.run([BIN, "serve", "--config", str(path)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode != 0 and "server.grpc_listen" in r.stderr, r.stderr
    r = subprocess.run([BIN, "serve", "--config", str(path), "--grpc-listen", "nowhere"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "--grpc-listen" in r.stderr, r.stderr


def test_grpc_listen_on_the_command_line(tmp_path):
    cfg = default_config()
    s = Server(cfg, tmp_path, args=["--grpc-listen", "127.0.0.1:0"])
    try:
        s.grpc = "127.0.0.1:%d" % grpc_port(s)
        assert tgrpc.InferenceServerClient(s.grpc).is_model_ready("minilm")
    finally:
        assert s.stop() == 0, "".join(s.log)


# ---- a drain answers every admitted gRPC call -------------------------------

def test_sigterm_drains_grpc_calls_in_flight(tmp_path):
    s = start(tmp_path)
    results, stop = [], threading.Event()

    def client():
        c = tgrpc.InferenceServerClient(s.grpc)
        while not stop.is_set():
            try:
                c.infer("minilm", [texts_input(SENTENCES)])
                results.append("ok")
            except InferenceServerException as e:
                results.append(e.status())
                return

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    deadline = time.time() + 60
    while results.count("ok") < 20 and time.time() < deadline:
        time.sleep(0.05)
    s.proc.send_signal(signal.SIGTERM)
    rc = s.proc.wait(timeout=60)
    s._drain.join(timeout=10)  # the whole log
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert rc == 0, "".join(s.log)
    assert results.count("ok") >= 20
    # every call the server answered reached its client: nothing admitted was lost
    answered = [e for e in s.events("request")
                if e["path"].endswith("/ModelInfer") and e["status"] == 200]
    assert len(answered) == results.count("ok"), (len(answered), results)
    # the others were refused as a draining server refuses (UNAVAILABLE), or, for a
    # call that reached gRPC at the very instant it stopped taking calls, cancelled
    # by gRPC itself (its shutdown cancels the calls no server thread has taken)
    bad = [r for r in results if r not in ("ok", "StatusCode.UNAVAILABLE",
                                           "StatusCode.CANCELLED")]
    assert not bad, bad


# ---- perf_analyzer's gRPC mode ------------------------------------------------

def test_perf_analyzer_grpc_completes_a_run(srv, tmp_path):
    from test_clients import perf_analyzer_cmd
    exe, env = perf_analyzer_cmd()
    if not exe:
        pytest.skip("perf_analyzer not installed (tritonclient wheel; make deps)")
    data = tmp_path / "input.json"
    data.write_text(json.dumps({"data": [{"text": {"content": [s], "shape": [1]}}
                                         for s in SENTENCES]}))
    cmd = [exe, "-m", "minilm", "-u", srv.grpc, "-i", "grpc", "--input-data", str(data),
           "--concurrency-range", "2", "--measurement-mode", "count_windows",
           "--measurement-request-count", "20", "--max-trials", "3",
           "--stability-percentage", "999"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Throughput:" in r.stdout and "infer/sec" in r.stdout, r.stdout
