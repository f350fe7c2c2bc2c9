"""Fixtures for the integration tests: start the real mantissa binary on a
free loopback port with a config written for the test, talk real HTTP to it,
and stop it with SIGTERM at the end (it must exit 0)."""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import http.client
import threading
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MANTISSA_BIN", os.path.join(ROOT, "build", "release", "mantissa"))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")


def make_xlmr(tmp):
    """XLM-RoBERTa folders under tmp/m (tools/make-xlmr.py on a Unigram
    tokenizer from tools/make-unigram-tokenizer.py): embed, rerank and m3
    (the embedder with bge-m3's heads), and their reference.json."""
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-unigram-tokenizer.py"),
                    str(tmp / "tok")], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-xlmr.py"),
                    str(tmp / "tok" / "tokenizer.json"), str(tmp / "m")], check=True, cwd=ROOT)
    with open(tmp / "m" / "reference.json") as f:
        return json.load(f)


def default_config(**server):
    cfg = {
        "server": {"listen": "127.0.0.1:0", "max_body_bytes": 1 << 20,
                   "max_inputs": 64},
        "models": [{
            "name": "minilm", "path": MODEL,
            "variants": [{"name": "fp32", "precision": "fp32", "traffic": 100}],
        }],
    }
    cfg["server"].update(server)
    return cfg


@contextlib.contextmanager
def port_in_use():
    """A loopback port that another socket listens on, while the block runs."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        yield taken.getsockname()[1]
    finally:
        taken.close()


def self_signed_cert(tmp_path):
    """(cert, key): PEM files of a self-signed certificate for localhost, made
    by the openssl command; the test is skipped without it."""
    openssl = shutil.which("openssl")
    if not openssl:
        pytest.skip("openssl command not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def serving_port(line):
    """The port of the start-up line that says where the server listens, in
    either log format (JSON: "msg":"serving on" with "port"; text:
    "mantissa: version V (commit C), serving on ADDR:PORT"); else None."""
    line = line.strip()
    if line.startswith("{"):
        try:
            ev = json.loads(line)
        except ValueError:
            return None
        return ev["port"] if ev.get("msg") == "serving on" else None
    m = re.search(r"serving on .*:(\d+)$", line)
    return int(m.group(1)) if m else None


class Server:
    """A running mantissa serve process and a tiny HTTP client for it."""

    def __init__(self, cfg, tmp_path, env=None, args=()):
        self.cfg_path = os.path.join(str(tmp_path), "mantissa.json")
        with open(self.cfg_path, "w") as f:
            json.dump(cfg, f)
        self.proc = subprocess.Popen([BIN, "serve", "--config", self.cfg_path] + list(args),
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.log = []
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            self.port = serving_port(line)
            if self.port is not None:
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        # keep draining stderr so the server never blocks on a full pipe
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def events(self, msg=None):
        """The log's JSON lines (server.log_format "json", the default) as
        dicts, those whose msg is msg when it is given."""
        out = []
        for line in list(self.log):
            if line.startswith("{"):
                ev = json.loads(line)
                if msg is None or ev.get("msg") == msg:
                    out.append(ev)
        return out

    def request(self, method, path, body=None, headers=None, raw=False):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if raw:
            return resp, data
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data
        return resp, parsed

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9
        self._drain.join(timeout=10)  # the log is whole once stop returns
        return rc


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        pytest.skip("model not fetched (run make model)")
    srv = Server(default_config(), tmp_path_factory.mktemp("srv"))
    yield srv
    rc = srv.stop()
    assert rc == 0, "server exited %s on SIGTERM:\n%s" % (rc, "".join(srv.log))


@pytest.fixture(scope="session")
def reference():
    """The committed sentence-transformers vectors (tests/fixtures/reference)."""
    import array
    d = os.path.join(ROOT, "tests", "fixtures", "reference")
    with open(os.path.join(d, "sentences.jsonl")) as f:
        sentences = [json.loads(l) for l in f if l.strip()]
    vec = array.array("f")
    with open(os.path.join(d, "minilm_fp32.f32"), "rb") as f:
        vec.frombytes(f.read())
    if sys.byteorder != "little":
        vec.byteswap()
    dim = len(vec) // len(sentences)
    return sentences, [vec[i * dim:(i + 1) * dim] for i in range(len(sentences))]
