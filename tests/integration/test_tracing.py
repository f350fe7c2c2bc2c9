"""OpenTelemetry tracing (server.tracing), against the real binary and a real
OTLP/HTTP receiver: oteltest's otelsink (oteltest.sink.HttpSink, PyPI), which
decodes each export with the official opentelemetry-proto classes.

- A sampled traceparent continues the caller's trace: the answer's
  traceparent names the server span (same trace id, a new span id, flag 01),
  the exported SERVER span is the caller's span's child, with the HTTP
  semantic-convention attributes and the model's; its children parse, queue,
  batch (with the batch's size and tokens) and reply, and forward under
  batch, follow one another in time inside it; tracestate is passed on;
  resource, scope and the configured collector headers arrive; the JSON log
  line carries the trace and span ids.
- No traceparent, or an invalid one (each way the W3C header can be wrong):
  a new trace, exported without a parent.
- A traceparent whose sampled flag is 0: nothing exported, but the trace id
  is kept in the answer and the log.
- Errors: a 404 is the server span alone, not an error; a 504 (the KServe
  timeout parameter) is an error with its queue and reply spans.
- Probes start no trace of their own.
- A receiver that refuses connections, or one that never answers: every
  request still answers at once, the failures are counted in /metrics and
  logged once, a full queue drops and counts spans, and SIGTERM still exits 0
  within the flush's bound.
"""
import logging
import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest
from oteltest.sink import HttpSink
from oteltest.sink.handler import RequestHandler

from conftest import MODEL, Server, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

SERVER, INTERNAL = 2, 1  # Span.SpanKind
UNSET, ERROR = 0, 2      # Status.StatusCode
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def any_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Collector(RequestHandler):
    """What the receiver got: every export's headers and spans, flattened."""

    def __init__(self):
        self.lock = threading.Lock()
        self.exports = []  # (headers, ExportTraceServiceRequest)

    def handle_trace(self, request, headers):
        with self.lock:
            self.exports.append((headers, request))

    def handle_metrics(self, request, headers):
        pass

    def handle_logs(self, request, headers):
        pass

    def spans(self):
        out = []
        with self.lock:
            exports = list(self.exports)
        for headers, req in exports:
            for rs in req.resource_spans:
                resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append({
                            "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(), "name": s.name, "kind": s.kind,
                            "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                            "attrs": {kv.key: any_value(kv.value) for kv in s.attributes},
                            "status": s.status.code, "status_msg": s.status.message,
                            "trace_state": s.trace_state, "flags": s.flags,
                            "resource": resource, "scope": (ss.scope.name, ss.scope.version),
                            "headers": headers})
        return out

    def trace(self, trace_id, count, timeout=15):
        """The spans of trace_id, once there are count of them."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = [s for s in self.spans() if s["trace_id"] == trace_id]
            if len(got) >= count:
                return got
            time.sleep(0.05)
        raise AssertionError("trace %s: %d spans after %ds, want %d: %s" % (
            trace_id, len(got), timeout, count, [s["name"] for s in got]))


@pytest.fixture(scope="module")
def receiver():
    col = Collector()
    col.port = free_port()
    sink = HttpSink(col, logging.getLogger("otelsink"), port=col.port, daemon=True)
    sink.start()
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", col.port), timeout=1).close()
            break
        except OSError:
            assert time.time() < deadline, "the OTLP receiver did not start"
            time.sleep(0.05)
    yield col
    sink.stop()


def tracing_cfg(endpoint, **more):
    t = {"endpoint": endpoint, "batch_delay_ms": 100}
    t.update(more)
    return t


@pytest.fixture(scope="module")
def traced(receiver, tmp_path_factory):
    cfg = default_config(cors_allow_origins=["*"], grpc_listen="127.0.0.1:0", tracing=tracing_cfg(
        "http://127.0.0.1:%d/v1/traces" % receiver.port, service_name="mantissa-test",
        headers={"X-Collector-Token": "s3cret"}))
    srv = Server(cfg, tmp_path_factory.mktemp("traced"))
    yield srv
    assert srv.stop() == 0, "".join(srv.log)


def new_ids():
    return os.urandom(16).hex(), os.urandom(8).hex()


def answer_context(resp):
    m = TRACEPARENT.match(resp.getheader("traceparent") or "")
    assert m, "answer's traceparent: %r" % resp.getheader("traceparent")
    return m.group(1), m.group(2), m.group(3)


def log_line(srv, request_id):
    deadline = time.time() + 5
    while time.time() < deadline:
        for ev in srv.events("request"):
            if ev.get("id") == request_id:
                return ev
        time.sleep(0.05)
    raise AssertionError("no log line for request %s" % request_id)


def by_name(spans):
    out = {}
    for s in spans:
        assert s["name"] not in out or s["kind"] == SERVER, "two %s spans" % s["name"]
        out[s["name"]] = s
    return out


def test_sampled_traceparent_continues_the_callers_trace(traced, receiver):
    tid, pid = new_ids()
    texts = ["a cat sat on the mat", "tracing is on", "three texts, one batch"]
    resp, body = traced.request(
        "POST", "/v1/embeddings", {"model": "minilm", "input": texts},
        headers={"traceparent": "00-%s-%s-01" % (tid, pid), "tracestate": "vendor=abc,x=1",
                 "X-Request-Id": "trace-t1", "Origin": "https://app.example.com"})
    assert resp.status == 200 and len(body["data"]) == 3
    got_tid, sid, flags = answer_context(resp)
    assert (got_tid, flags) == (tid, "01") and sid != pid
    assert "traceparent" in resp.getheader("Access-Control-Expose-Headers")

    spans = by_name(receiver.trace(tid, 6))
    assert set(spans) == {"POST /v1/embeddings", "parse", "queue", "batch", "forward", "reply"}
    srv = spans["POST /v1/embeddings"]
    assert srv["kind"] == SERVER and srv["span_id"] == sid and srv["parent"] == pid
    assert srv["status"] == UNSET and srv["trace_state"] == "vendor=abc,x=1"
    assert srv["flags"] & 0x301 == 0x301  # sampled; its parent is remote
    a = srv["attrs"]
    assert a["http.request.method"] == "POST" and a["url.path"] == "/v1/embeddings"
    assert a["http.route"] == "/v1/embeddings" and a["http.response.status_code"] == 200
    assert a["url.scheme"] == "http" and a["mantissa.request_id"] == "trace-t1"
    assert (a["mantissa.model"], a["mantissa.variant"], a["mantissa.precision"]) == (
        "minilm", "fp32", "fp32")
    assert a["mantissa.inputs"] == 3 and a["mantissa.tokens"] == body["usage"]["prompt_tokens"]
    assert abs(srv["start"] / 1e9 - time.time()) < 60  # Unix time
    # the children: parse, queue, batch, reply under the server span; forward under batch
    for name in ("parse", "queue", "batch", "reply"):
        assert spans[name]["parent"] == sid and spans[name]["kind"] == INTERNAL, name
    assert spans["forward"]["parent"] == spans["batch"]["span_id"]
    p, q, b, f, r = (spans[n] for n in ("parse", "queue", "batch", "forward", "reply"))
    assert srv["start"] <= p["start"] <= p["end"] <= q["start"] <= q["end"] <= b["start"]
    assert b["start"] <= f["start"] <= f["end"] <= b["end"] <= r["start"] <= r["end"]
    assert r["end"] <= srv["end"]
    assert f["end"] - f["start"] > 0 and srv["end"] - srv["start"] >= b["end"] - b["start"]
    # one request alone: its batch is its three texts
    assert b["attrs"]["mantissa.batch.size"] == 3
    assert b["attrs"]["mantissa.batch.tokens"] == a["mantissa.tokens"]
    assert b["attrs"]["mantissa.batches"] == 1
    # what every export carries
    assert srv["resource"]["service.name"] == "mantissa-test"
    assert srv["resource"]["service.version"] and srv["resource"]["process.pid"] > 0
    assert srv["scope"][0] == "mantissa"
    h = {k.lower(): v for k, v in srv["headers"].items()}
    assert h["x-collector-token"] == "s3cret" and h["content-type"] == "application/x-protobuf"
    # the log line names the trace and the server span
    ev = log_line(traced, "trace-t1")
    assert (ev["trace_id"], ev["span_id"]) == (tid, sid)


def test_without_traceparent_a_new_trace_is_started(traced, receiver):
    resp, body = traced.request("POST", "/embed", {"inputs": "no caller trace"},
                                headers={"X-Request-Id": "trace-t2"})
    assert resp.status == 200
    tid, sid, flags = answer_context(resp)
    assert flags == "01"
    spans = by_name(receiver.trace(tid, 6))
    srv = spans["POST /embed"]
    assert srv["span_id"] == sid and srv["parent"] == "" and srv["trace_state"] == ""
    assert srv["flags"] & 0x301 == 0x101  # sampled; no remote parent
    assert spans["batch"]["attrs"]["mantissa.batch.size"] == 1
    assert log_line(traced, "trace-t2")["trace_id"] == tid


INVALID = [
    "00-%s-%s-01" % ("A" * 32, "b" * 16),          # upper case
    "00-%s-%s-01" % ("0" * 32, "b" * 16),          # zero trace id
    "00-%s-%s-01" % ("a" * 32, "0" * 16),          # zero parent id
    "00-%s-%s-01" % ("a" * 31, "b" * 17),          # a field one digit off
    "00-%s-%s-01-x" % ("a" * 32, "b" * 16),        # version 00 with more
    "ff-%s-%s-01" % ("a" * 32, "b" * 16),          # version ff
    "00-%s-%s-1" % ("a" * 32, "b" * 16),           # short flags
    "garbage",
]


@pytest.mark.parametrize("header", INVALID)
def test_an_invalid_traceparent_is_ignored_for_a_new_trace(traced, receiver, header):
    resp, _ = traced.request("GET", "/v2", headers={"traceparent": header})
    assert resp.status == 200
    tid, sid, flags = answer_context(resp)
    assert tid != "a" * 32 and tid != "0" * 32 and flags == "01"
    (srv,) = receiver.trace(tid, 1)  # metadata: the server span alone
    assert srv["name"] == "GET /v2" and srv["parent"] == "" and srv["span_id"] == sid
    time.sleep(0.3)
    assert len([s for s in receiver.spans() if s["trace_id"] == tid]) == 1


def test_unsampled_parent_keeps_its_trace_id_and_exports_nothing(traced, receiver):
    tid, pid = new_ids()
    resp, _ = traced.request("POST", "/v1/embeddings", {"model": "minilm", "input": "quiet"},
                             headers={"traceparent": "00-%s-%s-00" % (tid, pid),
                                      "X-Request-Id": "trace-t3"})
    assert resp.status == 200
    got_tid, sid, flags = answer_context(resp)
    assert (got_tid, flags) == (tid, "00") and sid != pid
    assert log_line(traced, "trace-t3")["trace_id"] == tid
    # a sampled request after it: once its spans are in, the first one's
    # would be too (one queue, exported in order)
    mark, mpid = new_ids()
    traced.request("GET", "/v2", headers={"traceparent": "00-%s-%s-01" % (mark, mpid)})
    receiver.trace(mark, 1)
    assert not [s for s in receiver.spans() if s["trace_id"] == tid]


def test_errors_404_is_no_error_and_a_504_is(traced, receiver):
    resp, _ = traced.request("POST", "/v1/embeddings", {"model": "nope", "input": "x"})
    assert resp.status == 404
    tid, _, _ = answer_context(resp)
    (srv,) = receiver.trace(tid, 1)
    assert srv["attrs"]["http.response.status_code"] == 404 and srv["status"] == UNSET
    # a deadline of 1 us (KServe's timeout parameter) passes in the queue: 504
    resp, _ = traced.request("POST", "/v2/models/minilm/infer", {
        "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["late"]}],
        "parameters": {"timeout": 1}})
    assert resp.status == 504
    tid, _, _ = answer_context(resp)
    spans = by_name(receiver.trace(tid, 3))
    srv = spans["POST /v2/models/{model}/infer"]
    assert srv["status"] == ERROR and "timeout" in srv["status_msg"].lower()
    assert srv["attrs"]["error.type"] == "504"
    assert srv["attrs"]["http.route"] == "/v2/models/{model}/infer"
    assert srv["attrs"]["url.path"] == "/v2/models/minilm/infer"
    assert {"parse", "queue", "reply"} <= set(spans) and "forward" not in spans


def test_probes_start_no_trace_unless_a_traceparent_asks(traced, receiver):
    resp, _ = traced.request("GET", "/v2/health/ready")
    tid, _, flags = answer_context(resp)
    assert resp.status == 200 and flags == "00"
    asked, pid = new_ids()
    resp, _ = traced.request("GET", "/v2/health/ready",
                             headers={"traceparent": "00-%s-%s-01" % (asked, pid)})
    assert answer_context(resp)[2] == "01"
    (srv,) = receiver.trace(asked, 1)
    assert srv["name"] == "GET /v2/health/ready" and srv["parent"] == pid
    assert not [s for s in receiver.spans() if s["trace_id"] == tid]


def metric(srv, name):
    _, text = srv.request("GET", "/metrics", raw=True)
    m = re.search(r"^%s (\d+)$" % re.escape(name), text.decode(), re.M)
    assert m, name
    return int(m.group(1))


def test_metrics_count_the_exports_and_pass_promtool(traced, receiver):
    tid, pid = new_ids()
    traced.request("GET", "/v2", headers={"traceparent": "00-%s-%s-01" % (tid, pid)})
    receiver.trace(tid, 1)
    deadline = time.time() + 5  # counted once the receiver has answered
    while metric(traced, "mantissa_trace_spans_exported_total") < len(receiver.spans()):
        assert time.time() < deadline, "exported spans not counted"
        time.sleep(0.05)
    assert metric(traced, "mantissa_trace_spans_dropped_total") == 0
    assert metric(traced, "mantissa_trace_spans_failed_total") == 0
    _, text = traced.request("GET", "/metrics", raw=True)
    assert re.search(r'^mantissa_trace_exports_total\{result="ok"\} [1-9]', text.decode(), re.M)
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not installed (Debian package prometheus; make deps installs it)")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
    assert r.returncode == 0, r.stdout + r.stderr


def timed_requests(srv, n):
    """n embedding requests one after another: the slowest one's seconds."""
    worst = 0
    for i in range(n):
        t0 = time.time()
        resp, body = srv.request("POST", "/v1/embeddings",
                                 {"model": "minilm", "input": "request %d" % i})
        worst = max(worst, time.time() - t0)
        assert resp.status == 200 and len(body["data"][0]["embedding"]) == 384
        assert answer_context(resp)[2] == "01"
    return worst


def test_a_receiver_that_refuses_fails_no_request(tmp_path):
    cfg = default_config(tracing=tracing_cfg("http://127.0.0.1:%d/v1/traces" % free_port(),
                                             export_timeout_ms=500))
    srv = Server(cfg, tmp_path)
    try:
        assert timed_requests(srv, 20) < 2
        deadline = time.time() + 10
        while metric(srv, "mantissa_trace_spans_failed_total") == 0:
            assert time.time() < deadline, "no failed export counted"
            time.sleep(0.1)
        assert metric(srv, "mantissa_trace_spans_exported_total") == 0
        assert timed_requests(srv, 5) < 2
    finally:
        t0 = time.time()
        assert srv.stop() == 0, "".join(srv.log)
        assert time.time() - t0 < 10
    warnings = [ev for ev in srv.events() if "tracing: export to" in ev["msg"]]
    assert len(warnings) == 1 and warnings[0]["level"] == "warn", warnings  # once a minute


def test_a_receiver_that_never_answers_fills_the_queue_not_the_requests(tmp_path):
    silent = socket.socket()  # takes connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    cfg = default_config(tracing=tracing_cfg(
        "http://127.0.0.1:%d/v1/traces" % silent.getsockname()[1], max_queue_spans=16,
        max_batch_spans=8, batch_delay_ms=20, export_timeout_ms=3000))
    srv = Server(cfg, tmp_path)
    try:
        time.sleep(0.1)
        assert timed_requests(srv, 12) < 2  # 6 spans each, while the first export hangs
        assert metric(srv, "mantissa_trace_spans_dropped_total") > 0
        assert metric(srv, "mantissa_trace_queue_spans") <= 16
    finally:
        t0 = time.time()
        rc = srv.stop()
        took = time.time() - t0
        silent.close()
    assert rc == 0, "".join(srv.log)
    assert took < 12, "SIGTERM took %.1f s with export_timeout_ms 3000" % took
    stopped = [ev for ev in srv.events() if ev["msg"].startswith("tracing: exporter stopped")]
    assert len(stopped) == 1 and " 0 spans exported" in stopped[0]["msg"], stopped


def test_a_grpc_call_is_traced_with_the_rpc_conventions(traced, receiver):
    grpc = pytest.importorskip("grpc")
    from tritonclient.grpc import service_pb2 as pb
    port = [e["grpc_port"] for e in traced.events("serving on")][0]
    tid, pid = new_ids()
    req = pb.ModelInferRequest(model_name="minilm", id="trace-grpc")
    t = req.inputs.add(name="text", datatype="BYTES", shape=[2])
    t.contents.bytes_contents.extend([b"over gRPC", b"with a traceparent"])
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        f = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                           request_serializer=None, response_deserializer=None)
        _, call = f.with_call(req.SerializeToString(),
                              metadata=[("traceparent", "00-%s-%s-01" % (tid, pid))])
    m = TRACEPARENT.match(dict(call.initial_metadata()).get("traceparent", ""))
    assert m and m.group(1) == tid and m.group(3) == "01", call.initial_metadata()
    spans = by_name(receiver.trace(tid, 6))
    srv = spans["inference.GRPCInferenceService/ModelInfer"]
    assert srv["kind"] == SERVER and srv["parent"] == pid and srv["span_id"] == m.group(2)
    a = srv["attrs"]
    assert (a["rpc.system"], a["rpc.service"], a["rpc.method"]) == (
        "grpc", "inference.GRPCInferenceService", "ModelInfer")
    assert a["rpc.grpc.status_code"] == 0 and a["mantissa.inputs"] == 2
    assert "http.request.method" not in a
    assert spans["batch"]["attrs"]["mantissa.batch.size"] == 2
    assert log_line(traced, "trace-grpc")["trace_id"] == tid
