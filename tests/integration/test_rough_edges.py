"""Issue 26's rough edges, against the real binary: `mantissa --version`
and the build's commit wherever the server reports its version, the index
at GET / (built from the route table), the start-up lines in plain words,
the help texts, and reloads under `serve --listen`."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import BIN, MODEL, ROOT

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")


def run(*args):
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def version():
    """(version, commit) as `mantissa --version` prints them."""
    r = run("--version")
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"mantissa (\d+\.\d+\.\d+\S*) \(commit (\S+)\)\n", r.stdout)
    assert m, r.stdout
    return m.group(1), m.group(2)


# ---- the version and the commit ---------------------------------------------

def test_version_and_its_short_flag_name_the_build_commit():
    ver, commit = version()
    assert run("-V").stdout == run("--version").stdout
    if commit != "unknown":  # a build from a git checkout: a commit of this repository
        assert re.fullmatch(r"[0-9A-Za-z._/-]+", commit), commit
        git = shutil.which("git")
        if git and os.path.exists(os.path.join(ROOT, ".git")):
            name = commit[:-len("-dirty")] if commit.endswith("-dirty") else commit
            r = subprocess.run([git, "-C", ROOT, "cat-file", "-e", name + "^{commit}"],
                               capture_output=True)
            assert r.returncode == 0, "%s names no commit of %s" % (name, ROOT)


def test_server_reports_the_same_version_and_commit(server):
    ver, commit = version()
    line = server.events("serving on")
    assert line and (line[0]["version"], line[0]["commit"]) == (ver, commit), server.log
    resp, meta = server.request("GET", "/v2")
    assert resp.status == 200 and meta["version"] == ver and meta["commit"] == commit, meta
    resp, info = server.request("GET", "/info")
    assert info["version"] == ver and info["sha"] == (None if commit == "unknown" else commit)
    _, text = server.request("GET", "/metrics", raw=True)
    assert ('mantissa_build_info{version="%s",commit="%s"} 1' % (ver, commit)
            in text.decode().splitlines())


# ---- GET /: the index -------------------------------------------------------

def test_root_lists_the_route_table_and_post_root_still_embeds(server):
    resp, idx = server.request("GET", "/")
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("application/json")
    ver, commit = version()
    assert idx["name"] == "mantissa" and idx["version"] == ver and idx["commit"] == commit
    routes = {(r["method"], r["path"]): r for r in idx["routes"]}
    assert len(routes) == len(idx["routes"]) > 20
    for method, path in [("POST", "/v1/embeddings"), ("GET", "/v1/models"), ("GET", "/v2"),
                         ("POST", "/v2/models/{model}/infer"), ("POST", "/embed"),
                         ("POST", "/"), ("GET", "/"), ("GET", "/metrics"),
                         ("POST", "/v2/admin/reload"), ("GET", "/ab")]:
        assert (method, path) in routes, (method, path)
    # every listed route is one the server has: its path answers DELETE with 405
    # naming the listed method (a path it did not have would be 404)
    for (method, path), r in routes.items():
        assert r["api"] in ("openai", "kserve", "tei") and r["what"], r
        real = path.replace("{model}", "minilm").replace("{version}", "1")
        resp, _ = server.request("DELETE", real)
        assert resp.status == 405 and method in resp.getheader("Allow"), (path, resp.status)
    resp, vec = server.request("POST", "/", {"inputs": "a cat"})
    assert resp.status == 200 and len(vec[0]) == 384


# ---- the start-up lines -------------------------------------------------------

def test_loaded_line_says_how_batches_use_the_threads(server):
    line = [e for e in server.events("loaded") if e["variant"] == "fp32"]
    assert line, server.log
    resp, cfg = server.request("GET", "/v2/admin/config")
    solo = [v["serving"]["solo_tokens"] for m in cfg["models"] if m["name"] == "minilm"
            for v in m["variants"] if v["name"] == "fp32"][0]
    threads = line[0]["threads"]
    assert threads >= 1 and line[0]["solo_tokens"] == (solo if threads > 1 else 0), line[0]


def test_loaded_line_in_words(tmp_path):
    """The text log's start-up line: the threads in words, never "up to 0 tokens"."""
    from conftest import Server, default_config
    srv = Server(default_config(log_format="text"), tmp_path)
    try:
        line = [l for l in srv.log if l.startswith("mantissa: loaded minilm@fp32 (")]
        assert line, srv.log
        resp, cfg = srv.request("GET", "/v2/admin/config")
        solo = [v["serving"]["solo_tokens"] for m in cfg["models"] if m["name"] == "minilm"
                for v in m["variants"] if v["name"] == "fp32"][0]
    finally:
        assert srv.stop() == 0
    m = re.search(r"; (\d+) threads?(.*?)[;)]", line[0])
    assert m and "up to 0 tokens" not in line[0], line[0]
    threads = int(m.group(1))
    if threads == 1:
        assert "1 thread" in line[0]
    elif solo == 0:
        assert "%d threads for every batch" % threads in line[0], line[0]
    else:
        assert ("%d threads; batches of up to %d tokens on one thread" % (threads, solo)
                in line[0]), line[0]


def test_loaded_line_with_one_engine_thread(tmp_path):
    from conftest import Server, default_config
    srv = Server(default_config(engine_threads=1, log_format="text"), tmp_path)
    try:
        line = [l for l in srv.log if "loaded minilm@fp32" in l]
        assert line and re.search(r"; 1 thread[;)]", line[0]) and "up to" not in line[0], line
    finally:
        assert srv.stop() == 0
    srv = Server(default_config(engine_threads=1), tmp_path)
    try:
        ev = srv.events("loaded")
        assert ev and ev[0]["threads"] == 1 and ev[0]["solo_tokens"] == 0, srv.log
    finally:
        assert srv.stop() == 0


# ---- help texts -----------------------------------------------------------------

def test_help_names_every_api_and_config_is_optional():
    for args in (["serve", "--help"], ["--help"]):
        r = run(*args)
        assert r.returncode == 0, r.stderr
        for api in ("OpenAI", "KServe v2", "TEI", "text-embeddings-inference", "admin", "A/B"):
            assert api in r.stdout, (args, api)
    for cmd in ("quantize", "compare"):
        r = run(cmd, "--help")
        assert r.returncode == 0, r.stderr
        usage = r.stdout.splitlines()[0]
        assert usage.startswith("usage: mantissa %s [--config FILE] " % cmd), usage
        assert "config/mantissa.json" in r.stdout, r.stdout


# ---- reloads of a server started with --listen ----------------------------------

def reload_and_wait(srv):
    """An admin reload (applied even when the file is unchanged); returns once
    its log line is in srv.log."""
    n = sum("config reloaded from" in l for l in srv.log)
    resp, data = srv.request("POST", "/v2/admin/reload", b"")
    assert resp.status == 200, data
    deadline = time.time() + 30
    while sum("config reloaded from" in l for l in srv.log) == n:
        assert time.time() < deadline, srv.log
        time.sleep(0.05)


def reload_with(srv, cfg):
    """Writes cfg as the server's config file, then reload_and_wait."""
    with open(srv.cfg_path, "w") as f:
        json.dump(cfg, f)
    reload_and_wait(srv)


def settings_warnings(srv):
    return [l for l in srv.log if "server settings changed" in l]


def test_reload_compares_the_listen_address_in_force(tmp_path):
    from conftest import Server, default_config
    # the file's address is overridden by --listen: reloads compare what is in force
    cfg = default_config(listen="127.0.0.1:1", watch=False)
    srv = Server(cfg, tmp_path, args=["--listen", "127.0.0.1:0"])
    try:
        reload_and_wait(srv)
        reload_and_wait(srv)
        assert settings_warnings(srv) == [], settings_warnings(srv)
        # a setting that changed is still named; the overridden address is not
        cfg["server"].update(listen="127.0.0.1:2", max_inputs=32)
        reload_with(srv, cfg)
        warn = settings_warnings(srv)
        assert len(warn) == 1 and "(max_inputs)" in warn[0], warn
    finally:
        assert srv.stop() == 0
    # without --listen, a changed address in the file is named
    cfg = default_config(watch=False)
    srv = Server(cfg, tmp_path)
    try:
        reload_and_wait(srv)
        assert settings_warnings(srv) == []
        cfg["server"]["listen"] = "127.0.0.1:2"
        reload_with(srv, cfg)
        warn = settings_warnings(srv)
        assert len(warn) == 1 and "(listen)" in warn[0], warn
    finally:
        assert srv.stop() == 0


# ---- a quantized file's recorded mix ----------------------------------------------

def test_a_quantized_file_serves_with_the_mix_it_records(tmp_path):
    from conftest import Server, default_config
    cfg = default_config(watch=False)
    variant = cfg["models"][0]["variants"][0]
    variant.update(name="q", mix="qkv@0-2=int8")
    qcfg = tmp_path / "quantize.json"
    qcfg.write_text(json.dumps(cfg))
    out = str(tmp_path / "q.safetensors")
    r = run("quantize", "--config", str(qcfg), "--model", "minilm@q", "--out", out)
    assert r.returncode == 0, r.stderr
    recorded = re.search(r"wrote \S+ \(fp32, mix (.*), absmax\)", r.stderr).group(1)
    # the variant names the file alone: it serves with the file's mix, and says so
    del variant["mix"]
    variant["weights"] = out
    srv = Server(cfg, tmp_path)
    try:
        resp, view = srv.request("GET", "/v2/admin/config")
        v = view["models"][0]["variants"][0]
        assert v["mix"] == "" and v["serving"]["mix"] == recorded, v
        said = [json.loads(l)["msg"] for l in srv.log if "records it" in l]
        assert said == ['model minilm, variant q: mix "%s", as %s records it' % (recorded, out)]
        resp, body = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "a cat"})
        assert resp.status == 200, body
        # a variant that names another mix is refused, naming both
        variant["mix"] = "qkv@0=int8"
        with open(srv.cfg_path, "w") as f:
            json.dump(cfg, f)
        resp, data = srv.request("POST", "/v2/admin/reload", b"")
        assert resp.status == 200 and "quantized with mix \"%s\"" % recorded in data["message"], data
    finally:
        assert srv.stop() == 0


# ---- quantize from a BF16 checkpoint in shards --------------------------------------

def test_quantize_takes_a_bf16_checkpoint_in_shards(tmp_path):
    """mantissa quantize on BF16 shards and their model.safetensors.index.json
    (a Qwen3-shaped folder, as LLM embedders ship): one file, whose vectors
    (mantissa embed) are those of the folder loaded at the same precision,
    for int8 (smoothed) and bf16; its line gives the run's peak RSS."""
    import sys
    folder = str(tmp_path / "qwen3")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-layer-kinds.py"), "qwen3",
                    folder, "--bf16", "--shards", "3"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    cfg_path = str(tmp_path / "q.json")

    def embed(variant):
        with open(cfg_path, "w") as f:
            json.dump({"models": [{"name": "q", "path": folder, "variants": [variant]}]}, f)
        r = subprocess.run([BIN, "embed", "--config", cfg_path], input="w5 w7 w9\nw100 w3\n",
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        return r.stdout

    for prec in ("int8", "bf16"):
        out = str(tmp_path / ("q-%s.safetensors" % prec))
        direct = embed({"name": prec, "precision": prec})
        r = run("quantize", "--config", cfg_path, "--model", "q@" + prec, "--out", out)
        assert r.returncode == 0, r.stderr
        assert re.search(r"wrote \S+ \(%s, absmax\) in [\d.]+ s, peak RSS [\d.]+ MiB" % prec,
                         r.stderr), r.stderr
        assert embed({"name": prec, "precision": prec, "weights": out}) == direct
        assert len(direct.splitlines()) == 2


# ---- config JSON errors --------------------------------------------------------------

def test_a_config_json_error_names_the_file_line_column_and_reason(tmp_path):
    from conftest import default_config
    text = json.dumps(default_config(), indent=2).splitlines()
    # a trailing comma after the last variant's last field
    at = max(i for i, l in enumerate(text) if '"traffic"' in l)
    text[at] += ","
    bad = tmp_path / "bad.json"
    bad.write_text("\n".join(text) + "\n")
    want = "mantissa: %s: line %d, column %d: invalid JSON: trailing comma\n" % (
        bad, at + 1, len(text[at]))
    for args in (["serve"], ["embed"], ["quantize", "--model", "minilm@fp32", "--out", "x"]):
        r = subprocess.run([BIN] + args + ["--config", str(bad)], input="", capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 1 and r.stderr.endswith(want), (args, r.stderr)
        assert "loaded" not in r.stderr, r.stderr


# ---- the command line checks its arguments, and builds only what it was asked for ---

def two_model_config(tmp_path):
    """minilm (fp32, and a variant whose weights file is missing) and a model
    whose folder is missing: building either of those fails."""
    from conftest import default_config
    cfg = default_config()
    cfg["models"][0]["variants"].append(
        {"name": "broken", "precision": "fp32", "traffic": 0,
         "weights": str(tmp_path / "nowhere.safetensors")})
    cfg["models"].append({"name": "other", "path": str(tmp_path / "no-model"),
                          "variants": [{"name": "fp32", "precision": "fp32"}]})
    path = tmp_path / "two.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_embed_bench_and_eval_build_only_the_model_asked_for(tmp_path):
    cfg = two_model_config(tmp_path)
    ids = tmp_path / "ids.json"
    ids.write_text("[[101, 2023, 102], [101, 2003, 1037, 3231, 102]]")
    sts = tmp_path / "sts.csv"  # STS-B's columns: genre, file, year, id, score, s1, s2
    sts.write_text("".join("g\tf\ty\t%d\t%.1f\t%s\t%s\n" % (i, score, a, b) for i, (score, a, b) in
                           enumerate([(5.0, "A cat sits.", "A cat is sitting."),
                                      (0.5, "A cat sits.", "Stocks fell today."),
                                      (2.5, "A man plays.", "A man plays a guitar.")])))
    for model in ("minilm", "minilm@fp32", None):
        sel = ["--model", model] if model else []
        r = subprocess.run([BIN, "embed", "--config", cfg] + sel, input="a cat\n",
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 0, (model, r.stderr)
        assert len(json.loads(r.stdout)) == 384
        loaded = re.findall(r"loaded (\S+) ", r.stderr)
        assert loaded == ["minilm@fp32"], (model, r.stderr)
        for args in (["bench", "--ids", str(ids), "--batch", "1,2", "--seconds", "0"],
                     ["eval", "--stsb", str(sts)]):
            r = run(args[0], "--config", cfg, *(args[1:] + sel))
            assert r.returncode == 0, (args, r.stderr)
            assert re.findall(r"loaded (\S+) ", r.stderr) == ["minilm@fp32"], r.stderr
    # a model or variant that is not there is said before anything is built
    for model, why in (("nosuch", 'no model "nosuch"'), ("minilm@nosuch", 'no variant "nosuch"')):
        r = subprocess.run([BIN, "embed", "--config", cfg, "--model", model], input="a\n",
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 1 and why in r.stderr and "loaded" not in r.stderr, r.stderr
    # the model asked for is built even when another one cannot be
    r = subprocess.run([BIN, "embed", "--config", cfg, "--model", "other"], input="a\n",
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1 and "no-model" in r.stderr and "minilm" not in r.stderr, r.stderr


def test_serve_checks_listen_before_building_models(tmp_path):
    from conftest import default_config
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(default_config()))
    for listen in ("localhost", "localhost:8080", "127.0.0.1:99999", "127.0.0.1:", "[::1]",
                   "300.1.1.1:80", "[nohost]:80"):
        r = subprocess.run([BIN, "serve", "--config", str(cfg), "--listen", listen],
                           capture_output=True, text=True, timeout=30, cwd=ROOT)
        assert r.returncode == 2, (listen, r.returncode, r.stderr)
        assert ('--listen: "%s" is not ADDR:PORT' % listen) in r.stderr, r.stderr
        assert "loaded" not in r.stderr and "models ready" not in r.stderr, r.stderr
    # in the file too: a host name is refused when the config is read
    cfg.write_text(json.dumps(default_config(listen="localhost:8080")))
    r = subprocess.run([BIN, "serve", "--config", str(cfg)], capture_output=True, text=True,
                       timeout=30, cwd=ROOT)
    assert r.returncode == 1 and "server.listen" in r.stderr and "loaded" not in r.stderr, \
        r.stderr


def test_serve_reports_a_port_in_use_before_building_models(tmp_path):
    from conftest import default_config, port_in_use
    with port_in_use() as port:
        cfg = tmp_path / "c.json"
        cfg.write_text(json.dumps(default_config(listen="127.0.0.1:%d" % port)))
        for argv in (["--config", str(cfg)],
                     ["--config", str(cfg), "--listen", "127.0.0.1:%d" % port]):
            r = subprocess.run([BIN, "serve"] + argv, capture_output=True, text=True, timeout=60,
                               cwd=ROOT)
            assert r.returncode == 1, (r.returncode, r.stderr)
            assert ("cannot listen on 127.0.0.1:%d: Address already in use" % port) in r.stderr, \
                r.stderr
            assert "loaded" not in r.stderr and "models ready" not in r.stderr, r.stderr


def test_serve_listens_on_ipv6_only_where_asked(tmp_path):
    import http.client
    import socket
    from conftest import Server, default_config
    try:
        with socket.socket(socket.AF_INET6) as so:
            so.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    srv = Server(default_config(listen="[::1]:0"), tmp_path)
    try:
        conn = http.client.HTTPConnection("::1", srv.port, timeout=60)
        conn.request("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": "hi"}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and len(json.loads(resp.read())["data"]) == 1
        conn.close()
        # IPv6 only: the same port on IPv4 is not this server's
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=5).close()
    finally:
        assert srv.stop() == 0


# ---- bench: an ids file from text, and batches that fit it ---------------------------

def test_bench_makes_ids_from_text_and_runs_the_batches_that_fit(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("a cat\n\nA man is playing a guitar.\nthe end\n")
    ids = tmp_path / "ids.json"
    r = run("bench", "--make-ids", str(texts), "--out", str(ids))
    assert r.returncode == 0, r.stderr
    lists = json.loads(ids.read_text())
    # one list per text line (the blank one skipped), [CLS] ... [SEP]
    assert len(lists) == 3 and lists[0] == [101, 1037, 4937, 102], lists
    assert all(l[0] == 101 and l[-1] == 102 for l in lists)
    assert "3 token-id lists" in r.stderr and "1 blank line skipped" in r.stderr, r.stderr
    r = run("bench", "--make-ids", str(texts))  # without --out: stdout
    assert r.returncode == 0 and json.loads(r.stdout) == lists, r.stderr
    # the default batches (1, 32) on 3 lists: 1 and 3, with a note
    r = run("bench", "--ids", str(ids), "--seconds", "0")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [x["batch"] for x in out["results"]] == [1, 3], out
    assert "batch 32 is more than the 3 token-id lists" in r.stderr, r.stderr
    # a batch that is not a number is refused before the model is built
    r = run("bench", "--ids", str(ids), "--batch", "1,x")
    assert r.returncode == 2 and "--batch" in r.stderr and "loaded" not in r.stderr, r.stderr
    # and --help says how to make an ids file
    assert "--make-ids" in run("bench", "--help").stdout and "--make-ids" in run("--help").stdout
