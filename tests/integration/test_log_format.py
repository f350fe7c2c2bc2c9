"""One log format a run (server.log_format, serve --log-format): with "json"
every line serve writes on stderr, start-up and shutdown included, is a JSON
object with ts, level and msg and the line's fields; with "text" every line
is "mantissa: " and words, none JSON. What precedes the config (a missing or
invalid file) is text unless --log-format says otherwise, and the CLI's
other subcommands keep text lines whatever the config says."""
import json
import os
import re
import signal
import socket
import subprocess

import pytest

from conftest import (BIN, MODEL, ROOT, Server, default_config, port_in_use,
                      self_signed_cert, serving_port)

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")


def config(log_format=None, **server):
    cfg = default_config(**server)
    if log_format:
        cfg["server"]["log_format"] = log_format
    # an int8 variant too: its start-up line carries the load check
    cfg["models"][0]["variants"].append({"name": "q", "precision": "int8", "traffic": 0})
    return cfg


def whole_run(srv):
    """A request, a reload, a failed reload, SIGTERM; the log once stopped."""
    resp, body = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "a cat"},
                             headers={"X-Request-Id": "fmt-1"})
    assert resp.status == 200, body
    resp, body = srv.request("POST", "/v1/embeddings", {"model": "nope", "input": "x"})
    assert resp.status == 404, body
    resp, body = srv.request("POST", "/v2/admin/reload", b"")
    assert resp.status == 200, body
    with open(srv.cfg_path) as f:
        good = f.read()
    with open(srv.cfg_path, "w") as f:
        f.write(good.replace('"models"', '"modelz"', 1))
    resp, body = srv.request("POST", "/v2/admin/reload", b"")
    assert resp.status == 400, body
    with open(srv.cfg_path, "w") as f:
        f.write(good)
    assert srv.stop() == 0, "".join(srv.log)
    return list(srv.log)


def test_json_every_line_of_a_run_is_an_object_with_ts_level_msg(tmp_path):
    srv = Server(config("json"), tmp_path)
    log = whole_run(srv)
    events = []
    for line in log:
        assert line.endswith("\n"), line
        ev = json.loads(line)  # every line, start-up and shutdown included
        assert isinstance(ev, dict), line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ev["ts"]), line
        assert ev["level"] in ("debug", "info", "warn", "error"), line
        assert isinstance(ev["msg"], str) and ev["msg"], line
        events.append(ev)
    msgs = [e["msg"] for e in events]
    for want in ("loaded", "model resident", "models ready", "serving on", "request",
                 "stopping", "stopped"):
        assert want in msgs, (want, msgs)
    assert msgs[-1] == "stopped", msgs
    assert any(m.startswith("config reload refused") for m in msgs), msgs

    loaded = {e["variant"]: e for e in events if e["msg"] == "loaded"}
    fp32, q = loaded["fp32"], loaded["q"]
    for ev, prec in ((fp32, "fp32"), (q, "int8")):
        assert ev["level"] == "info" and ev["model"] == "minilm" and ev["precision"] == prec
        for k in ("device", "isa", "kernel", "space"):
            assert isinstance(ev[k], str) and ev[k], (k, ev)
        assert isinstance(ev["threads"], int) and ev["threads"] >= 1, ev
        assert isinstance(ev["solo_tokens"], int), ev
        assert 80 < ev["resident_mib"] < 100 or prec == "int8", ev
        assert 0 < ev["gemm_mib"] <= ev["resident_mib"], ev
    assert "check_probes" not in fp32  # FP32 is the reference: no load check
    assert q["check_probes"] > 0 and 0.99 < q["check_min_cos"] <= q["check_mean_cos"] <= 1, q

    ready = [e for e in events if e["msg"] == "models ready"][0]
    assert ready["seconds"] > 0 and ready["resident_mib"] > fp32["resident_mib"], ready
    serving = [e for e in events if e["msg"] == "serving on"][0]
    assert serving["address"] == "127.0.0.1:%d" % srv.port and serving["port"] == srv.port
    assert serving["tls"] is False and serving["version"] and serving["commit"], serving
    stopping = [e for e in events if e["msg"] == "stopping"][0]
    assert stopping["signal"] == signal.SIGTERM, stopping
    req = [e for e in events if e["msg"] == "request" and e.get("id") == "fmt-1"][0]
    assert req["status"] == 200 and req["variant"] in ("fp32", "q") and req["inputs"] == 1


def test_loaded_peak_rss_is_the_servers_own_not_a_large_parents(tmp_path):
    """peak_rss_mib is the server's own high-water mark (VmHWM): started by a
    fork of a process holding 1 GiB (as a Python bench with a big RSS starts
    it), the server does not report the parent's peak, which getrusage's
    ru_maxrss carries across fork and exec."""
    cfg_path = os.path.join(str(tmp_path), "mantissa.json")
    with open(cfg_path, "w") as f:
        json.dump(default_config(), f)
    ballast = bytearray(b"\x01") * (1 << 30)  # written: resident in this process
    # preexec_fn makes subprocess fork (not vfork) with the ballast mapped
    p = subprocess.Popen([BIN, "serve", "--config", cfg_path], stderr=subprocess.PIPE,
                         text=True, cwd=ROOT, preexec_fn=lambda: None)
    del ballast
    loaded, log = None, []
    try:
        for line in p.stderr:
            log.append(line)
            if line.startswith("{") and json.loads(line)["msg"] == "loaded":
                loaded = json.loads(line)
            if serving_port(line) is not None:
                break
        with open("/proc/%d/status" % p.pid) as f:
            hwm = [int(s.split()[1]) / 1024.0 for s in f if s.startswith("VmHWM:")][0]
    finally:
        p.terminate()
        p.wait(timeout=60)
    assert loaded, "".join(log)
    # MiniLM FP32 peaks near 150 MiB; the parent held over 1024 MiB
    assert 0 < loaded["peak_rss_mib"] <= hwm + 0.1 and loaded["peak_rss_mib"] < 700, (loaded, hwm)


def test_text_no_line_of_a_run_is_json_and_the_words_are_the_plain_ones(tmp_path):
    srv = Server(config("text"), tmp_path)
    log = whole_run(srv)
    for line in log:
        assert line.startswith("mantissa: ") and line.endswith("\n"), line
        with pytest.raises(ValueError):
            json.loads(line)
    text = "".join(log)
    assert re.search(r"^mantissa: loaded minilm@fp32 \(fp32 on the \S+ backend, ISA \S+, "
                     r"kernel \S+; [^)]*\): [\d.]+ MiB resident, [\d.]+ MiB GEMM weights, "
                     r"space \S+$", text, re.M), text
    assert re.search(r"^mantissa: loaded minilm@q \(int8 .*; load check: cosine to FP32 "
                     r"[\d.]+ mean, [\d.]+ least on \d+ probes\)", text, re.M), text
    assert re.search(r"^mantissa: model minilm: [\d.]+ MiB resident$", text, re.M), text
    assert re.search(r"^mantissa: models ready in [\d.]+ s: [\d.]+ MiB resident in all$", text,
                     re.M), text
    assert re.search(r"^mantissa: version \S+ \(commit \S+\), serving on 127\.0\.0\.1:%d$"
                     % srv.port, text, re.M), text
    assert re.search(r"^mantissa: request fmt-1: POST /v1/embeddings 200, minilm@(fp32|q), "
                     r"1 input, \d+ tokens, [\d.]+ ms \(queue [\d.]+, compute [\d.]+\), "
                     r"trace [0-9a-f]{32}$",
                     text, re.M), text
    assert re.search(r"^mantissa: request \S+: POST /v1/embeddings 404, [\d.]+ ms .*: model "
                     r"\"nope\"", text, re.M), text
    assert "mantissa: config reload refused, still serving the previous config" in text
    assert "mantissa: signal 15: stopping\n" in log and log[-1] == "mantissa: stopped\n", log


def test_the_flag_overrides_the_file_and_a_change_in_the_file_waits_for_a_restart(tmp_path):
    cfg = default_config(log_format="text")
    srv = Server(cfg, tmp_path, args=["--log-format", "json"])
    try:
        assert all(l.startswith("{") for l in srv.log), srv.log
        # under the flag the file's format is not compared
        resp, body = srv.request("POST", "/v2/admin/reload", b"")
        assert resp.status == 200, body
    finally:
        assert srv.stop() == 0
    assert all(json.loads(l)["msg"] for l in srv.log), srv.log
    assert not [l for l in srv.log if "log_format" in l], srv.log

    srv = Server(default_config(), tmp_path)  # the default: json
    try:
        cfg["server"]["log_format"] = "text"
        with open(srv.cfg_path, "w") as f:
            json.dump(cfg, f)
        resp, body = srv.request("POST", "/v2/admin/reload", b"")
        assert resp.status == 200, body
        resp, _ = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
        assert resp.status == 200
    finally:
        assert srv.stop() == 0
    changed = srv.events("reload: server settings changed (log_format): they take effect at "
                         "the next restart")
    assert len(changed) == 1 and changed[0]["level"] == "warn", srv.log
    assert all(l.startswith("{") for l in srv.log), srv.log


def run(args, **kw):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          **kw)


def test_before_the_config_the_format_is_text_unless_the_flag_names_one(tmp_path):
    missing = str(tmp_path / "none.json")
    r = run(["serve", "--config", missing])
    assert r.returncode == 1 and r.stderr == "mantissa: %s: No such file or directory\n" % missing, \
        r.stderr
    r = run(["serve", "--config", missing, "--log-format", "json"])
    assert r.returncode == 1, r.stderr
    ev = json.loads(r.stderr)
    assert ev["level"] == "error" and ev["msg"] == "%s: No such file or directory" % missing, ev
    r = run(["serve", "--config", missing, "--log-format", "xml"])
    assert r.returncode == 2 and '--log-format: "xml" is not json or text' in r.stderr, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(default_config(log_format="xml")))
    r = run(["serve", "--config", str(bad)])
    assert r.returncode == 1 and r.stderr == (
        'mantissa: %s: server.log_format: unknown log format "xml" (expected text or json)\n'
        % bad), r.stderr


def test_an_error_after_the_config_is_read_is_in_its_format(tmp_path):
    with port_in_use() as port:
        cfg = tmp_path / "c.json"
        cfg.write_text(json.dumps(default_config(listen="127.0.0.1:%d" % port)))
        r = run(["serve", "--config", str(cfg)])
        assert r.returncode == 1, r.stderr
        ev = json.loads(r.stderr)
        assert ev["level"] == "error" and "Address already in use" in ev["msg"], ev
        cfg.write_text(json.dumps(default_config(listen="127.0.0.1:%d" % port,
                                                 log_format="text", log_level="off")))
        r = run(["serve", "--config", str(cfg)])
        assert r.returncode == 1 and r.stderr.startswith("mantissa: cannot listen on"), r.stderr


def test_the_cli_keeps_text_lines_whatever_the_config_says(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(default_config(log_format="json")))
    r = run(["embed", "--config", str(cfg)], input="a cat\n")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1
    lines = r.stderr.splitlines()
    assert lines and all(l.startswith("mantissa: ") for l in lines), r.stderr
    assert any(l.startswith("mantissa: loaded minilm@fp32 (") for l in lines), r.stderr


def test_start_up_lines_are_written_at_every_log_level(tmp_path):
    srv = Server(default_config(log_level="off"), tmp_path)
    try:
        srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
    finally:
        assert srv.stop() == 0
    msgs = [e["msg"] for e in srv.events()]
    assert len(msgs) == len(srv.log), srv.log
    devices = {"no device", "device", "device unusable"}  # where a GPU backend is built in
    assert [m for m in msgs if m not in devices] == [
        "loaded", "model resident", "models ready", "serving on", "stopping", "stopped"], msgs


def test_libmicrohttpd_messages_are_log_lines_too(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    srv = Server(default_config(tls_cert=str(cert), tls_key=str(key)), tmp_path)
    try:
        # plain HTTP to the HTTPS port: libmicrohttpd says so in its error log
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            s.recv(100)
        except OSError:
            pass
        s.close()
    finally:
        assert srv.stop() == 0
    for line in srv.log:
        json.loads(line)
    mhd = srv.events()
    assert any(e.get("source") == "libmicrohttpd" and e["level"] == "warn" for e in mhd), srv.log
