"""The hostile-input catalogue: each request a client we do not control may
send, with the status and error the README documents for it, against the
real binary over real HTTP. After every case the server must still answer
its readiness probe, and after the whole catalogue an embedding must still
be right.

One server runs the catalogue with limits raised far enough (8 MiB bodies)
that the parsers, not the body cap, meet the big inputs; the slow-client
cases run against a server with a 2 s connection timeout. No test asserts a
timing: waits have generous bounds and only check that something happened.
"""
import http.client
import json
import math
import os
import re
import socket
import time

import pytest

from conftest import MODEL, Server, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

BODY_CAP = 8 << 20


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    cfg = default_config(max_body_bytes=BODY_CAP, max_inputs=64, max_input_bytes=2 << 20,
                         grpc_listen="127.0.0.1:0")
    s = Server(cfg, tmp_path_factory.mktemp("hostile"))
    yield s
    assert s.stop() == 0, "".join(s.log)


def openai(body):
    return ("POST", "/v1/embeddings", body)


def kserve(body, model="minilm"):
    return ("POST", "/v2/models/%s/infer" % model, body)


TEXT = {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["x"]}

# (name, (method, path, body), status, words that the error message must hold)
CASES = [
    ("body over max_body_bytes",
     openai(json.dumps({"model": "minilm", "input": "a" * (BODY_CAP + 10)})), 413,
     ["max_body_bytes"]),
    ("deeply nested JSON (OpenAI)", openai('{"model":"minilm","input":' + "[" * 5000 + "]" * 5000
                                           + "}"), 400, ["nesting"]),
    ("deeply nested JSON (KServe)", kserve('{"inputs":[{"x":' + "{\"a\":" * 200 + "1"
                                           + "}" * 200 + "}]}"), 400, ["nesting"]),
    ("a shape of 1e6 elements", kserve({"inputs": [dict(TEXT, shape=[1] * 1000000)]}), 400,
     ["shape"]),
    ("a shape with a huge element count",
     kserve({"inputs": [dict(TEXT, shape=[4294967296, 4294967296])]}), 400, ["shape"]),
    ("input of the wrong type: number", openai({"model": "minilm", "input": 5}), 400, ["input"]),
    ("input of the wrong type: token ids", openai({"model": "minilm", "input": [101, 102]}), 400,
     ["input"]),
    ("model of the wrong type", openai({"model": 7, "input": "x"}), 400, ["model"]),
    ("encoding_format not float or base64",
     openai({"model": "minilm", "input": "x", "encoding_format": "hex"}), 400,
     ["encoding_format"]),
    ("KServe datatype not BYTES", kserve({"inputs": [dict(TEXT, datatype="FP32", data=[1.0])]}),
     400, ["datatype"]),
    ("KServe data not strings", kserve({"inputs": [dict(TEXT, data=[1])]}), 400, []),
    ("shape/data mismatch", kserve({"inputs": [dict(TEXT, shape=[3], data=["a", "b"])]}), 400,
     ["shape"]),
    ("NaN literal (not JSON)", kserve('{"inputs":[{"name":"text","datatype":"FP32","shape":[1],'
                                      '"data":[NaN]}]}'), 400, ["JSON"]),
    ("Infinity literal (not JSON)", openai('{"model":"minilm","input":"x","dimensions":Infinity}'),
     400, ["JSON"]),
    ("a number that overflows to inf", openai('{"model":"minilm","input":"x","dimensions":1e999}'),
     400, ["dimensions"]),
    ("an overflowing KServe timeout",
     kserve('{"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["x"]}],'
            '"parameters":{"timeout":1e999}}'), 400, ["timeout"]),
    ("invalid UTF-8 in a text", openai(b'{"model":"minilm","input":"bad \xc3\x28 here"}'), 400,
     ["UTF-8"]),
    ("invalid UTF-8 in a key", kserve(b'{"inputs":[], "\xff\xfe":1}'), 400, ["UTF-8"]),
    ("a NUL escape in a text", openai('{"model":"minilm","input":"a\\u0000b"}'), 400,
     ["\\u0000"]),
    ("a single 3 MiB string over max_input_bytes",
     openai({"model": "minilm", "input": "word " * (600 << 10)}), 413, ["max_input_bytes"]),
    ("10,000 inputs in one request", openai({"model": "minilm", "input": ["x"] * 10000}), 413,
     ["max_inputs"]),
    ("10,000 KServe elements in one request",
     kserve({"inputs": [dict(TEXT, shape=[10000], data=["x"] * 10000)]}), 413, ["max_inputs"]),
    ("empty input list (OpenAI)", openai({"model": "minilm", "input": []}), 400, ["input"]),
    ("an empty string in a batch of 64",
     openai({"model": "minilm", "input": ["x"] * 40 + [""] + ["y"] * 23}), 400,
     ["input[40]", "empty", "1 of 64"]),
    ("a lone empty string", openai({"model": "minilm", "input": ""}), 400, ["input[0]", "empty"]),
    ("an empty string among valid KServe elements",
     kserve({"inputs": [dict(TEXT, shape=[3], data=["a", "", "b"])]}), 400, ["text[1]", "empty"]),
    ("an empty string among valid TEI inputs", ("POST", "/embed", {"inputs": ["a", "", "b"]}), 422,
     ["inputs[1]", "empty"]),
    ("100,000 one-token characters with truncate false",
     openai({"model": "minilm", "input": "\u4e2d" * 100000, "truncate": False}), 400,
     ["100002 tokens", "256"]),
    ("empty input list (KServe)", kserve({"inputs": [dict(TEXT, shape=[0], data=[])]}), 400, []),
    ("unknown model", openai({"model": "nope", "input": "x"}), 404, ["nope"]),
    ("model name with path characters",
     openai({"model": "../../etc/passwd", "input": "x"}), 404, []),
    ("model name with a NUL escape", openai({"model": "minilm\u0000x", "input": "x"}), 400,
     ["\\u0000"]),
    ("KServe model name with path characters",
     kserve({"inputs": [TEXT]}, model="..%2F..%2Fetc%2Fpasswd"), 404, []),
    ("duplicated key (OpenAI)", openai('{"model":"minilm","input":"a","input":"b"}'), 400,
     ["duplicate"]),
    ("duplicated key (KServe)",
     kserve('{"inputs":[{"name":"text","name":"text","datatype":"BYTES","shape":[1],'
            '"data":["x"]}]}'), 400, ["duplicate"]),
    ("trailing bytes after the JSON value", openai('{"model":"minilm","input":"x"} {}'), 400,
     ["JSON"]),
    ("traversal in a repository load",
     ("POST", "/v2/repository/models/..%2F..%2Fetc%2Fpasswd/load", "{}"), 404, []),
    ("dot segments in a repository unload",
     ("POST", "/v2/repository/models/../../models/minilm/unload", "{}"), 404, []),
    ("traversal in compare", ("POST", "/v2/models/..%2Fminilm/compare", {"input": "x"}), 404, []),
    ("dot segments in the admin path", ("GET", "/v2/admin/../admin/config", None), 404, []),
    ("admin reload with a body naming another file",
     ("POST", "/v2/admin/reload", {"path": "/etc/passwd"}), 400, ["path"]),
    ("a repository load that overrides the config",
     ("POST", "/v2/repository/models/minilm/load",
      {"parameters": {"config": '{"backend": "python"}'}}), 400, ["config"]),
    ("a repository load that uploads a file",
     ("POST", "/v2/repository/models/minilm/load",
      {"parameters": {"file:1/model.safetensors": "AAAA"}}), 400, ["file:1/model.safetensors"]),
]


def error_text(data):
    if isinstance(data, dict):
        e = data.get("error")
        if isinstance(e, dict):
            return e.get("message", "")
        if isinstance(e, str):
            return e
    return ""


@pytest.mark.parametrize("name,req,status,words", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_gets_its_documented_4xx_and_the_server_keeps_serving(srv, name, req,
                                                                             status, words):
    method, path, body = req
    resp, data = srv.request(method, path, body)
    assert resp.status == status, (name, resp.status, data)
    msg = error_text(data)
    assert msg, (name, data)  # a JSON body naming the problem
    for w in words:
        assert w in msg, (name, w, msg)
    r, _ = srv.request("GET", "/v2/health/ready")
    assert r.status == 200, name


# ---- the same over gRPC (server.grpc_listen): messages a client we do not
# control may send, written on the wire by hand (field numbers of
# server/api/kserve.proto), each with the gRPC code and words it gets.

def _varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _len(field, data):
    data = data.encode() if isinstance(data, str) else data
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _tensor(texts):
    return b"".join(len(t).to_bytes(4, "little") + t for t in texts)


def _infer(model="minilm", shape=(1,), raw=None, datatype="BYTES", name="text"):
    tensor = _len(1, name) + _len(2, datatype) + _len(3, b"".join(_varint(d) for d in shape))
    m = _len(1, model) + _len(5, tensor)
    return m + (_len(7, raw) if raw is not None else b"")


GRPC_CASES = [
    ("not protobuf", "ModelInfer", b"\xff" * 64, "INVALID_ARGUMENT", ["ModelInferRequest"]),
    ("a length past the message's end", "ModelInfer", b"\x0a\xff\xff\xff\x7f" + b"a" * 10,
     "INVALID_ARGUMENT", []),
    ("a varint of 11 bytes", "ModelInfer", b"\x10" + b"\xff" * 10 + b"\x01",
     "INVALID_ARGUMENT", []),
    ("a shape of 1e6 elements", "ModelInfer", _infer(shape=[1] * 1000000,
                                                     raw=_tensor([b"x"])),
     "INVALID_ARGUMENT", ["shape"]),
    ("a shape with a huge element count", "ModelInfer",
     _infer(shape=[4294967296, 4294967296], raw=_tensor([b"x"])), "INVALID_ARGUMENT", ["shape"]),
    ("a negative shape", "ModelInfer", _infer(shape=[-1], raw=_tensor([b"x"])),
     "INVALID_ARGUMENT", ["shape"]),
    ("an element length past the raw bytes", "ModelInfer",
     _infer(raw=b"\xff\xff\xff\x7fabc"), "INVALID_ARGUMENT", ["element 0"]),
    ("invalid UTF-8 in a text", "ModelInfer", _infer(raw=_tensor([b"bad \xc3\x28"])),
     "INVALID_ARGUMENT", ["UTF-8"]),
    ("invalid UTF-8 in the model name", "ModelInfer", _infer(model=b"\xff\xfe",
                                                             raw=_tensor([b"x"])),
     "INVALID_ARGUMENT", ["model_name", "UTF-8"]),
    ("10,000 elements in one request", "ModelInfer",
     _infer(shape=[10000], raw=_tensor([b"x"] * 10000)), "RESOURCE_EXHAUSTED", ["max_inputs"]),
    ("a 3 MiB text over max_input_bytes", "ModelInfer",
     _infer(raw=_tensor([b"word " * (600 << 10)])), "RESOURCE_EXHAUSTED", ["max_input_bytes"]),
    ("a message over max_body_bytes", "ModelInfer",
     _infer(raw=_tensor([b"a" * (BODY_CAP + 10)])), "RESOURCE_EXHAUSTED", []),
    ("a model name with path characters", "ModelInfer",
     _infer(model="../../etc/passwd", raw=_tensor([b"x"])), "NOT_FOUND", []),
    ("a model name with a NUL", "ModelInfer", _infer(model="minilm\x00x", raw=_tensor([b"x"])),
     "INVALID_ARGUMENT", ["model_name", "NUL"]),
    ("no model name", "ModelMetadata", b"", "INVALID_ARGUMENT", ["required"]),
    ("a repository load that overrides the config", "RepositoryModelLoad",
     _len(2, "minilm") + _len(3, _len(1, "config") + _len(2, _len(3, '{"backend":"python"}'))),
     "INVALID_ARGUMENT", ["config"]),
    ("a repository load that uploads a file", "RepositoryModelLoad",
     _len(2, "minilm") + _len(3, _len(1, "file:1/model.safetensors") + _len(2, _len(4, b"AAAA"))),
     "INVALID_ARGUMENT", ["file:1/model.safetensors"]),
    ("a streaming call", "ModelStreamInfer", _infer(raw=_tensor([b"x"])), "UNIMPLEMENTED", []),
]


@pytest.mark.parametrize("name,method,payload,code,words", GRPC_CASES,
                         ids=[c[0] for c in GRPC_CASES])
def test_hostile_grpc_message_gets_its_code_and_the_server_keeps_serving(srv, name, method,
                                                                         payload, code, words):
    grpc = pytest.importorskip("grpc")
    port = [e["grpc_port"] for e in srv.events("serving on")][0]
    with grpc.insecure_channel("127.0.0.1:%d" % port,
                               options=[("grpc.max_send_message_length", -1)]) as ch:
        call = ch.unary_unary("/inference.GRPCInferenceService/" + method,
                              request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as e:
            call(payload, timeout=120)
        ready = ch.unary_unary("/inference.GRPCInferenceService/ServerReady",
                               request_serializer=None, response_deserializer=None)
        assert ready(b"", timeout=30) == b"\x08\x01", name  # ready: true
    assert e.value.code().name == code, (name, e.value.code(), e.value.details())
    assert e.value.details(), name
    for w in words:
        assert w in e.value.details(), (name, w, e.value.details())
    r, _ = srv.request("GET", "/v2/health/ready")
    assert r.status == 200, name


def test_a_1_mib_single_string_under_the_limits_is_truncated_and_served(srv):
    text = "lorem ipsum dolor " * ((1 << 20) // 18)
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": text})
    assert resp.status == 200, data
    assert data["usage"]["prompt_tokens"] == 256
    assert resp.getheader("X-Mantissa-Truncated-Inputs") == "1"
    v = data["data"][0]["embedding"]
    assert len(v) == 384 and abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-3


def test_a_100k_character_single_word_is_one_unknown_token_not_truncated(srv):
    resp, data = srv.request("POST", "/v1/embeddings",
                             {"model": "minilm", "input": "a" * 100000, "truncate": False})
    assert resp.status == 200, data
    assert data["usage"]["prompt_tokens"] == 3  # [CLS] [UNK] [SEP]
    assert resp.getheader("X-Mantissa-Truncated-Inputs") == "0"


def test_after_the_catalogue_embeddings_are_still_right(srv):
    a = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "A man plays a guitar."})
    b = srv.request("POST", "/v1/embeddings",
                    {"model": "minilm", "input": ["x", "A man plays a guitar."]})
    assert a[0].status == 200 and b[0].status == 200
    va, vb = a[1]["data"][0]["embedding"], b[1]["data"][1]["embedding"]
    assert sum(x * y for x, y in zip(va, vb)) > 0.999999


# ---- slow clients ---------------------------------------------------------------

@pytest.fixture
def slow_srv(tmp_path):
    s = Server(default_config(connection_timeout_s=2), tmp_path)
    yield s
    assert s.stop() == 0, "".join(s.log)


def closed_by_server(sock, timeout=60):
    """True once the server has closed sock (EOF or reset), within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_slowloris_headers_and_slow_bodies_are_cut_off_and_others_are_served(slow_srv):
    socks = []
    # a client that never finishes its headers, one byte at a time at first
    s1 = socket.create_connection(("127.0.0.1", slow_srv.port))
    for ch in b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n":
        s1.send(bytes([ch]))
    socks.append(s1)
    # a client that sends its headers and only part of the promised body
    s2 = socket.create_connection(("127.0.0.1", slow_srv.port))
    s2.send(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{\"model\":\"minilm\",")
    socks.append(s2)
    # twenty idle connections that say nothing at all
    for _ in range(20):
        socks.append(socket.create_connection(("127.0.0.1", slow_srv.port)))
    # meanwhile everyone else is served
    resp, data = slow_srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "hi"})
    assert resp.status == 200, data
    # and every slow connection is closed by the server's connection timeout
    for i, s in enumerate(socks):
        assert closed_by_server(s), "connection %d still open" % i
        s.close()
    r, _ = slow_srv.request("GET", "/v2/health/ready")
    assert r.status == 200


# ---- connections ----------------------------------------------------------------

def raise_own_fd_limit(want):
    """This test process needs want sockets; skip when the machine cannot give them."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip("open-file hard limit %d < %d" % (hard, want))
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def metric(text, name):
    m = re.search(r"^%s(?:\{[^}]*\})? ([0-9.e+]+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


@pytest.fixture
def default_srv(tmp_path):
    """A server with default connection settings (connection_limit 1000)."""
    s = Server(default_config(), tmp_path)
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_1500_idle_connections_do_not_lock_out_clients_or_probes(default_srv):
    raise_own_fd_limit(2200)
    srv = default_srv
    idle = []
    try:
        for _ in range(1500):
            s = socket.socket()
            s.settimeout(30)
            s.connect(("127.0.0.1", srv.port))  # the kernel backlog takes what is not accepted
            idle.append(s)
        time.sleep(1)
        # a real client and a readiness probe, each with a short deadline of their own
        t0 = time.time()
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        conn.request("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": "hi"}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        assert r.status == 200, body
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        conn.request("GET", "/v2/health/ready")
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status == 200
        assert time.time() - t0 < 20
        _, text = srv.request("GET", "/metrics", raw=True)
        text = text.decode()
        assert metric(text, "mantissa_http_connections_evicted_total") >= 500, text[-2000:]
        assert metric(text, "mantissa_http_connections_open") <= 1000
        assert metric(text, "mantissa_http_connections_limit") == 1000
    finally:
        for s in idle:
            s.close()
    # the server raised its own open-file limit to the hard one
    with open("/proc/%d/limits" % srv.proc.pid) as f:
        line = next(l for l in f if l.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    assert soft == hard, line


def test_reserved_connections_serve_only_probes_when_every_connection_is_busy(tmp_path):
    # connection_limit 2: two connections busy with a request that waits for its
    # body; a third may ask readiness, not anything else
    s = Server(default_config(connection_limit=2, probe_connections=2), tmp_path)
    busy = []
    try:
        for _ in range(2):
            c = socket.create_connection(("127.0.0.1", s.port))
            c.send(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            busy.append(c)
        time.sleep(0.5)
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        conn.request("GET", "/v2/health/ready")
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        # the same (reserved) connection asks for an embedding
        conn.request("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": "hi"}))
        r = conn.getresponse()
        data = json.loads(r.read())
        assert r.status == 503 and data["error"]["param"] == "connection_limit", data
        assert r.getheader("Connection") == "close" and r.getheader("Retry-After")
    finally:
        for c in busy:
            c.close()
        assert s.stop() == 0, "".join(s.log)


def test_per_ip_limit_closes_a_clients_extra_connections(tmp_path):
    s = Server(default_config(max_connections_per_ip=3), tmp_path)
    try:
        socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(5)]
        closed = sum(closed_by_server(c, timeout=2) for c in socks)
        for c in socks:
            c.close()
        assert closed == 2
        for _ in range(50):  # until the server has seen those closes (same address)
            try:
                _, text = s.request("GET", "/metrics", raw=True)
                break
            except (ConnectionError, http.client.HTTPException):
                time.sleep(0.1)
        m = re.search(r'^mantissa_http_connections_refused_total\{reason="per_ip"\} (\d+)$',
                      text.decode(), re.M)
        # the two above, and any try of the loop that came before the closes did
        assert m and int(m.group(1)) >= 2, text.decode()[-1500:]
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_expect_100_continue_over_the_body_cap_gets_413_at_once(srv):
    c = socket.create_connection(("127.0.0.1", srv.port))
    c.settimeout(10)
    c.send(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (BODY_CAP * 100))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = c.recv(4096)
        if not chunk:
            break
        head += chunk
    c.close()
    status = head.split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 413"), head[:200]
    r, _ = srv.request("GET", "/v2/health/ready")
    assert r.status == 200
