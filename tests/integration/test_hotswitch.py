"""Integration tests of the hot-switch: config reloads while serving (file
watch, rename-replace, SIGHUP, admin API), swaps without failed requests,
the traffic split and sticky routing, shadow drift, promotion gates and
demotion, compare, the embedding space id, the repository API and the A/B
page.

The precisions tried are those the CPU backend supports at run time (a
variant of an unsupported one fails to build and is reported so), so the
tests pass whichever precisions are enabled. No test asserts a timing:
waits poll the server's own state with a generous bound."""
import array
import base64
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import BIN, MODEL, ROOT, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

ALL_PRECISIONS = ["fp32", "fp16", "int8", "fp8"]
TEXTS = ["A man is playing a guitar.", "The weather is lovely today.", "short",
         "A dog runs across the field after a red ball.", "Ünïcödé and 中文 mixed in",
         "Someone is slicing an onion in the kitchen.", "two words", "A plane is taking off."]


def model_cfg(variants, **extra):
    m = {"name": "minilm", "path": MODEL, "variants": variants,
         "batching": {"max_batch_size": 16, "max_queue_delay_us": 1000}}
    m.update(extra)
    return m


def server_cfg(models, **server):
    s = {"listen": "127.0.0.1:0", "max_inputs": 64,
         "reload_debounce_ms": 50, "log_level": "info"}
    s.update(server)
    return {"server": s, "models": models}


def write_config(srv, cfg, rename=True):
    """Replaces the server's config file: by writing a new file and renaming
    it over the old one (what editors and ConfigMaps do), or in place."""
    text = json.dumps(cfg, indent=1)
    if rename:
        tmp = srv.cfg_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, srv.cfg_path)
    else:
        with open(srv.cfg_path, "r+") as f:
            f.seek(0)
            f.write(text)
            f.truncate()


def wait_until(cond, what, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def admin(srv):
    resp, data = srv.request("GET", "/v2/admin/config")
    assert resp.status == 200, data
    return data


def variants_of(srv, model="minilm"):
    for m in admin(srv)["models"]:
        if m["name"] == model:
            return {v["name"]: v for v in m["variants"]}
    return {}


def settled(srv, want):
    """True when every variant named in want (name -> precision) serves that
    precision, or has failed to build it (state failed)."""
    vs = variants_of(srv)
    for name, prec in want.items():
        v = vs.get(name)
        if not v or v["precision"] != prec or v["state"] == "loading":
            return False
        if v["state"] == "ready" and (not v["serving"] or v["serving"]["precision"] != prec):
            return False
    return True


def metrics(srv):
    resp, data = srv.request("GET", "/metrics", raw=True)
    assert resp.status == 200
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def embed(conn, text, model="minilm", headers=None, user=None):
    """One OpenAI request on a kept-alive connection: (status, headers, vector, body)."""
    body = {"model": model, "input": text, "encoding_format": "base64"}
    if user is not None:
        body["user"] = user
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", "/v1/embeddings", json.dumps(body), h)
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        return r.status, r, None, data
    d = json.loads(data)
    vec = array.array("f")
    vec.frombytes(base64.b64decode(d["data"][0]["embedding"]))
    return r.status, r, vec, d


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / ((sum(x * x for x in a) ** 0.5) * (sum(x * x for x in b) ** 0.5))


def maxdiff(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.fixture
def start(tmp_path):
    """Starts servers; stops them at the end, which must exit 0 (under ASan
    that includes no leak at exit)."""
    started = []

    def _start(cfg):
        d = tmp_path / str(len(started))
        d.mkdir()
        srv = Server(cfg, d)
        started.append(srv)
        return srv

    yield _start
    for srv in started:
        if srv.proc.poll() is None:
            rc = srv.stop()
            assert rc == 0, "exit %s:\n%s" % (rc, "".join(srv.log[-60:]))


def supported_precisions(srv, base_variants):
    """Adds a traffic-0 variant per precision and keeps those that built:
    the precisions the backend supports here. Returns them and the vectors of
    TEXTS per embedding space id (from requests pinned to those variants)."""
    probe = [dict(name="p_" + p, precision=p, traffic=0) for p in ALL_PRECISIONS]
    write_config(srv, server_cfg([model_cfg(base_variants + probe)]))
    wait_until(lambda: settled(srv, {"p_" + p: p for p in ALL_PRECISIONS}), "probe variants")
    vs = variants_of(srv)
    ok = [p for p in ALL_PRECISIONS if vs["p_" + p]["state"] == "ready"]
    spaces = {}
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    for p in ok:
        for i, t in enumerate(TEXTS):
            st, r, vec, _ = embed(conn, t, model="minilm@p_" + p)
            assert st == 200
            spaces.setdefault(r.getheader("X-Mantissa-Space"), {})[i] = vec
    conn.close()
    return ok, spaces


# ---- the flip test ---------------------------------------------------------------

def test_flipping_precision_under_load_fails_no_request_and_keeps_the_split(start):
    srv = start(server_cfg([model_cfg([dict(name="a", precision="fp32", traffic=50),
                                       dict(name="b", precision="fp32", traffic=50)])]))
    precs, spaces = supported_precisions(srv, [dict(name="a", precision="fp32", traffic=50),
                                               dict(name="b", precision="fp32", traffic=50)])
    assert "fp32" in precs
    others = [p for p in precs if p != "fp32"] or ["fp32"]
    baseline_alive = None

    def cfg(prec_a, prec_b, wa, wb):
        return server_cfg([model_cfg([dict(name="a", precision=prec_a, traffic=wa),
                                      dict(name="b", precision=prec_b, traffic=wb)])])

    write_config(srv, cfg("fp32", "fp32", 50, 50))
    wait_until(lambda: set(variants_of(srv)) == {"a", "b"} and settled(srv, {"a": "fp32", "b": "fp32"}),
               "probe variants removed")
    wait_until(lambda: metrics(srv)["mantissa_variant_builds_alive"] == 2, "probe builds freed")
    baseline_alive = 2
    m0 = metrics(srv)
    resident0 = sum(v for k, v in m0.items() if k.startswith("mantissa_resident_weight_bytes"))

    lock = threading.Lock()
    state = {"phase": -1, "stop": False}
    counts = {}      # phase -> {variant: n}
    failures = []    # (status, body)
    mismatches = []  # (variant, space, text index, why)
    done = [0]

    def worker(seed):
        rnd = random.Random(seed)
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
        while not state["stop"]:
            i = rnd.randrange(len(TEXTS))
            with lock:
                ph = state["phase"]
            try:
                st, r, vec, body = embed(conn, TEXTS[i])
            except Exception as e:  # a failed request: recorded, asserted on
                failures.append(("exception", repr(e)))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
                continue
            if st != 200:
                failures.append((st, body[:300]))
                continue
            var, space = r.getheader("X-Mantissa-Variant"), r.getheader("X-Mantissa-Space")
            ref = spaces.get(space, {}).get(i)
            if ref is None:
                mismatches.append((var, space, i, "unknown space"))
            else:
                own = maxdiff(vec, ref)
                closest = min(spaces, key=lambda s: maxdiff(vec, spaces[s][i]))
                if cosine(vec, ref) < 0.99999 or (spaces[closest][i] is not ref and
                                                 maxdiff(vec, spaces[closest][i]) < own):
                    mismatches.append((var, space, i, "max diff %g, closer to %s" % (own, closest)))
            with lock:
                done[0] += 1
                if ph >= 0 and state["phase"] == ph:
                    counts.setdefault(ph, {}).setdefault(var, 0)
                    counts[ph][var] += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    weights = [(80, 20), (30, 70), (50, 50)]
    flips = 0
    phase_total = {}
    try:
        deadline = time.time() + 900
        phase = 0
        wa, wb = weights[0]
        pa, pb = "fp32", "fp32"
        while time.time() < deadline:
            # a new weight phase every 10 flips; the split is counted only
            # for requests sent and answered within one phase
            if flips % 10 == 0:
                with lock:
                    state["phase"] = -1
                wa, wb = weights[phase % len(weights)]
                write_config(srv, cfg(pa, pb, wa, wb), rename=phase % 2 == 0)
                wait_until(lambda: variants_of(srv)["a"]["traffic"] == wa and
                           variants_of(srv)["b"]["traffic"] == wb, "weights applied")
                with lock:
                    state["phase"] = phase
                    phase_total[phase] = (wa, wb)
                phase += 1
            pa = (others + ["fp32"])[flips % (len(others) + 1)]
            if flips % 3 == 2:
                pb = precs[(flips // 3) % len(precs)]
            write_config(srv, cfg(pa, pb, wa, wb), rename=flips % 2 == 0)
            wait_until(lambda: settled(srv, {"a": pa, "b": pb}), "flip %d to %s/%s" % (flips, pa, pb))
            flips += 1
            counted = sum(sum(c.values()) for c in counts.values())
            if flips >= 40 and counted >= 2000 and phase >= 3:
                break
    finally:
        state["stop"] = True
        for t in threads:
            t.join(timeout=120)

    print("flip test: precisions %s, %d flips, %d requests, %d counted for the split: %s"
          % (precs, flips, done[0], sum(sum(c.values()) for c in counts.values()),
             {ph: (phase_total[ph], c) for ph, c in counts.items()}))
    assert not failures, failures[:10]
    assert not mismatches, mismatches[:10]
    assert flips >= 40, flips
    counted = 0
    for ph, c in counts.items():
        n = sum(c.values())
        counted += n
        wa, wb = phase_total[ph]
        # each phase within 5 points, or 5 standard deviations when it is
        # too short for 5 points to be a fair bound
        p = wa / (wa + wb)
        if n:
            tol = max(0.05, 5 * (p * (1 - p) / n) ** 0.5)
            assert abs(c.get("a", 0) / n - p) <= tol, (ph, c, wa, wb)
    assert counted >= 2000, (counted, counts)
    total_a = sum(c.get("a", 0) for c in counts.values())
    expect_a = sum(sum(c.values()) * phase_total[ph][0] / 100 for ph, c in counts.items())
    assert abs(total_a - expect_a) <= 0.05 * counted, (total_a, expect_a, counted)

    # memory back to where it was: the swapped-out builds are freed
    write_config(srv, cfg("fp32", "fp32", 50, 50))
    wait_until(lambda: settled(srv, {"a": "fp32", "b": "fp32"}), "back to fp32")
    wait_until(lambda: metrics(srv)["mantissa_variant_builds_alive"] == baseline_alive,
               "old builds freed")
    m1 = metrics(srv)
    resident1 = sum(v for k, v in m1.items() if k.startswith("mantissa_resident_weight_bytes"))
    assert resident1 == resident0
    assert m1["mantissa_config_reload_failures_total"] == 0
    assert sum(v for k, v in m1.items() if k.startswith("mantissa_request_failures_total")) == 0


# ---- invalid configs, failed builds, rename, sticky keys -------------------------

def serving_space(srv):
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
    assert resp.status == 200, data
    return resp.getheader("X-Mantissa-Space")


def test_invalid_config_changes_nothing_and_reports_the_error(start):
    good = server_cfg([model_cfg([dict(name="a", precision="fp32")])])
    srv = start(good)
    space = serving_space(srv)
    bad_cases = [
        ("{\"models\": [", "invalid JSON"),
        (json.dumps({"models": []}), "models: must be a non-empty array"),
        (json.dumps({"modles": []}), "unknown field \"modles\""),
        (json.dumps(server_cfg([model_cfg([dict(name="a", precision="int4")])])),
         "models[0].variants[0].precision: unknown precision \"int4\""),
        (json.dumps(server_cfg([model_cfg([dict(name="a", precision="fp32", traffic=0)])])),
         "traffic weights add up to 0"),
        (json.dumps(server_cfg([model_cfg([dict(name="a", precision="fp32"),
                                           dict(name="a", precision="fp16")])])),
         "duplicate variant name"),
        (json.dumps(server_cfg([model_cfg([dict(name="a", precision="fp32")],
                                          batching={"max_batch_size": 0})])),
         "models[0].batching.max_batch_size"),
        (json.dumps(server_cfg([model_cfg([dict(name="a", precision="fp32",
                                                gate={"probes": "p.txt", "min_cosine": 0.9})])])),
         "needs models[].reference"),
    ]
    for n, (text, word) in enumerate(bad_cases, 1):
        with open(srv.cfg_path, "w") as f:
            f.write(text)
        wait_until(lambda: metrics(srv)["mantissa_config_reload_failures_total"] == n,
                   "reload failure %d" % n, timeout=60)
        cfgview = admin(srv)
        assert word in cfgview["reloads"]["last_error"], (word, cfgview["reloads"])
        assert srv.cfg_path in cfgview["reloads"]["last_error"]
        resp, idx = srv.request("POST", "/v2/repository/index", b"")
        assert idx[0]["state"] == "READY" and word in idx[0]["reason"], idx
        assert metrics(srv)["mantissa_config_last_reload_ok"] == 0
        assert serving_space(srv) == space
        resp, r = srv.request("GET", "/v2/health/ready")
        assert resp.status == 200
    assert any("config reload refused" in l for l in srv.log)
    # the admin endpoint reports the same error, with 400
    resp, data = srv.request("POST", "/v2/admin/reload", b"")
    assert resp.status == 400 and "duplicate" not in data["error"] and "reference" in data["error"]
    write_config(srv, good)
    wait_until(lambda: metrics(srv)["mantissa_config_last_reload_ok"] == 1, "good config again")
    resp, idx = srv.request("POST", "/v2/repository/index", b"")
    assert idx == [{"name": "minilm", "version": "1", "state": "READY", "reason": ""}]


def test_missing_weights_file_fails_that_variant_only(start, tmp_path):
    base = [dict(name="a", precision="fp32", traffic=50)]
    srv = start(server_cfg([model_cfg(base)]))
    missing = str(tmp_path / "nowhere.safetensors")
    write_config(srv, server_cfg([model_cfg(base + [dict(name="b", precision="fp32", traffic=50,
                                                         weights=missing)])]))
    wait_until(lambda: variants_of(srv).get("b", {}).get("state") == "failed", "b failed")
    b = variants_of(srv)["b"]
    assert "nowhere.safetensors" in b["error"] and b["serving"] is None
    assert variants_of(srv)["a"]["state"] == "ready"
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    for i in range(30):
        st, r, _, _ = embed(conn, "text %d" % i)
        assert st == 200 and r.getheader("X-Mantissa-Variant") == "a"
    st, r, _, body = embed(conn, "pinned", model="minilm@b")
    assert st == 503 and b"nowhere.safetensors" in body
    conn.close()
    m = metrics(srv)
    assert m['mantissa_variant_build_failures_total{model="minilm",variant="b"}'] == 1
    assert m['mantissa_variant_state{model="minilm",variant="b",state="failed"}'] == 1
    assert m["mantissa_config_reload_failures_total"] == 0  # the file itself was valid


def repository_index(srv):
    resp, idx = srv.request("POST", "/v2/repository/index", b"")
    assert resp.status == 200, idx
    return {m["name"]: m for m in idx}


def test_a_failed_build_shows_in_the_index_and_the_reload_metric(start, tmp_path):
    base = [dict(name="a", precision="fp32", traffic=50)]
    missing = str(tmp_path / "nowhere.safetensors")
    b = dict(name="b", precision="fp32", traffic=50, weights=missing)
    srv = start(server_cfg([model_cfg(base)]))
    assert metrics(srv)["mantissa_config_last_reload_ok"] == 1
    write_config(srv, server_cfg([model_cfg(base + [b])]))
    wait_until(lambda: variants_of(srv).get("b", {}).get("state") == "failed", "b failed")
    # the model serves (a), and says that b failed and why; the reload did not fully succeed
    idx = repository_index(srv)["minilm"]
    assert idx["state"] == "READY", idx
    assert idx["reason"].startswith("variant b failed to build: ") and missing in idx["reason"], idx
    assert metrics(srv)["mantissa_config_last_reload_ok"] == 0
    assert metrics(srv)["mantissa_config_reload_failures_total"] == 0  # the file was valid
    # a model whose every variant failed is UNAVAILABLE, with the build's error
    other = dict(model_cfg([dict(b, traffic=100)]), name="other")
    write_config(srv, server_cfg([model_cfg(base + [b]), other]))
    wait_until(lambda: "other" in repository_index(srv) and
               repository_index(srv)["other"]["state"] != "LOADING", "other settled")
    idx = repository_index(srv)["other"]
    assert idx["state"] == "UNAVAILABLE" and "variant b failed to build: " in idx["reason"], idx
    assert missing in idx["reason"], idx
    # the failed variants gone, the reload is whole again
    write_config(srv, server_cfg([model_cfg(base)]))
    wait_until(lambda: metrics(srv)["mantissa_config_last_reload_ok"] == 1, "reload ok")
    assert repository_index(srv)["minilm"] == {"name": "minilm", "version": "1",
                                               "state": "READY", "reason": ""}


def test_rename_replace_and_in_place_writes_are_noticed(start):
    srv = start(server_cfg([model_cfg([dict(name="a", precision="fp32", traffic=10)])]))
    for n, rename in enumerate([True, False, True, True, False], 1):
        write_config(srv, server_cfg([model_cfg([dict(name="a", precision="fp32",
                                                      traffic=10 + n)])]), rename=rename)
        wait_until(lambda: variants_of(srv)["a"]["traffic"] == 10 + n,
                   "change %d (rename=%s)" % (n, rename), timeout=60)
    # a weight change alone rebuilds nothing
    assert metrics(srv)['mantissa_variant_builds_total{model="minilm",variant="a"}'] == 1


def test_sighup_reloads(start):
    cfg = server_cfg([model_cfg([dict(name="a", precision="fp32", traffic=5)])], watch=False)
    srv = start(cfg)
    cfg["models"][0]["variants"][0]["traffic"] = 7
    write_config(srv, cfg)
    time.sleep(0.3)  # not watching: nothing happens by itself
    assert variants_of(srv)["a"]["traffic"] == 5
    srv.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: variants_of(srv)["a"]["traffic"] == 7, "SIGHUP reload", timeout=60)


def test_sticky_keys_keep_their_variant_and_weight_changes_move_few(start):
    vs = [dict(name="a", precision="fp32", traffic=40), dict(name="b", precision="fp32", traffic=30),
          dict(name="c", precision="fp32", traffic=30)]
    srv = start(server_cfg([model_cfg(vs)]))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    keys = ["user-%d" % i for i in range(120)]

    def route(use_user):
        out = {}
        for k in keys:
            if use_user:
                st, r, _, _ = embed(conn, "hello", user=k)
            else:
                st, r, _, _ = embed(conn, "hello", headers={"X-Mantissa-Route-Key": k})
            assert st == 200
            out[k] = r.getheader("X-Mantissa-Variant")
        return out

    before = route(False)
    assert route(True) == before  # the OpenAI user field is the same key
    assert len(set(before.values())) == 3
    # unrelated edits: batching, a new variant with no traffic
    cfg = server_cfg([model_cfg(vs + [dict(name="d", precision="fp32", traffic=0)],
                                batching={"max_batch_size": 8, "max_queue_delay_us": 500})])
    write_config(srv, cfg)
    wait_until(lambda: variants_of(srv).get("d", {}).get("state") == "ready", "d ready")
    assert route(False) == before
    # b's weight goes up: keys move only to b
    vs2 = [dict(v) for v in vs]
    vs2[1]["traffic"] = 60
    write_config(srv, server_cfg([model_cfg(vs2)]))
    wait_until(lambda: variants_of(srv)["b"]["traffic"] == 60, "weights applied")
    after = route(False)
    moved = [k for k in keys if after[k] != before[k]]
    assert all(after[k] == "b" for k in moved), [(k, before[k], after[k]) for k in moved]
    assert 0 < len(moved) < len(keys) // 2
    # a pin wins over the key
    st, r, _, _ = embed(conn, "hello", headers={"X-Mantissa-Route-Key": moved[0],
                                                "X-Mantissa-Variant": "c"})
    assert r.getheader("X-Mantissa-Variant") == "c"
    conn.close()


# ---- space id, shadow drift, gates, demotion, compare --------------------------

def test_variants_with_different_mixes_have_different_spaces(start):
    # same model, precision, calibration and weights file: only the mix differs,
    # and with it the vectors, so the space must differ too
    srv = start(server_cfg([model_cfg([
        dict(name="u", precision="int8", traffic=1),
        dict(name="m", precision="int8", mix="*=int8; ffn_out=fp32", traffic=1)])]))
    spaces, vecs = {}, {}
    for v in ("u", "m"):
        resp, data = srv.request("POST", "/v1/embeddings",
                                 {"model": "minilm@" + v, "input": "A man plays the guitar."})
        assert resp.status == 200, data
        spaces[v] = resp.getheader("X-Mantissa-Space")
        vecs[v] = data["data"][0]["embedding"]
        assert data["mantissa"]["space_id"] == spaces[v]
    assert vecs["u"] != vecs["m"]
    assert spaces["u"] != spaces["m"], spaces
    assert "mix" not in spaces["u"] and "-mix" in spaces["m"], spaces
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm@m", "input": "x"})
    assert data["mantissa"]["space"]["mix"] == "*=int8; ffn_out=fp32", data["mantissa"]
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm@u", "input": "x"})
    assert data["mantissa"]["space"]["mix"] is None, data["mantissa"]


def test_embedding_space_id_names_model_precision_and_weights(start):
    srv = start(server_cfg([model_cfg([dict(name="a", precision="fp32")])]))
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
    space = resp.getheader("X-Mantissa-Space")
    assert data["mantissa"]["space_id"] == space and data["mantissa"]["variant"] == "a"
    sp = data["mantissa"]["space"]
    assert sp["model"] == "minilm" and sp["precision"] == "fp32" and sp["calibration"] is None
    assert sp["weights_checksum"].startswith("fnv1a64:") and sp["weights_checksum"][8:] in space
    resp, kd = srv.request("POST", "/v2/models/minilm/infer",
                           {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                        "data": ["x"]}]})
    assert kd["parameters"]["space_id"] == space
    precs = [p for p in ALL_PRECISIONS if p != "fp32"]
    write_config(srv, server_cfg([model_cfg([dict(name="a", precision=precs[1], calibration="absmax")])]))
    wait_until(lambda: variants_of(srv)["a"]["state"] in ("ready", "failed") and
               variants_of(srv)["a"]["precision"] == precs[1], "switch")
    if variants_of(srv)["a"]["state"] == "ready":
        resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
        assert resp.getheader("X-Mantissa-Space") != space
        assert data["mantissa"]["space"]["precision"] == precs[1]
        assert data["mantissa"]["space"]["calibration"] == "absmax"
    else:  # not supported by this backend yet: the old build keeps serving
        assert serving_space(srv) == space


def quantized_precision(srv):
    """The first lower precision the backend supports here, or None."""
    probe = [dict(name="p_" + p, precision=p, traffic=0) for p in ALL_PRECISIONS[1:]]
    write_config(srv, server_cfg([model_cfg([dict(name="ref", precision="fp32")] + probe)]))
    wait_until(lambda: settled(srv, {"p_" + p: p for p in ALL_PRECISIONS[1:]}), "probes")
    vs = variants_of(srv)
    for p in ("int8", "fp8", "fp16"):
        if vs["p_" + p]["state"] == "ready":
            return p
    return None


def test_shadow_runs_record_drift_per_variant(start):
    srv = start(server_cfg([model_cfg([dict(name="ref", precision="fp32")])]))
    q = quantized_precision(srv) or "fp32"
    cfg = server_cfg([model_cfg([dict(name="ref", precision="fp32", traffic=0),
                                 dict(name="q", precision=q, traffic=100)],
                                reference={"variant": "ref", "shadow_rate": 1.0,
                                           "shadow_queue": 64})])
    write_config(srv, cfg)
    wait_until(lambda: settled(srv, {"q": q}) and "p_fp16" not in variants_of(srv), "q serving")
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    for i in range(24):
        st, r, _, _ = embed(conn, TEXTS[i % len(TEXTS)] + " %d" % i)
        assert st == 200 and r.getheader("X-Mantissa-Variant") == "q"
    conn.close()

    def drift():
        _, st = srv.request("GET", "/v2/models/minilm/stats")
        v = {x["name"]: x for x in st["model_stats"][0]["variants"]}
        return v["q"]["drift"] if v["q"]["drift"] and v["q"]["drift"]["count"] >= 24 else None

    d = wait_until(drift, "24 shadow comparisons", timeout=120)
    assert d["reference"] == "ref"
    assert 0.9 < d["min"] <= d["p1"] <= d["mean"] <= 1.0 + 1e-6, d
    assert d["max_abs_err"] >= 0
    m = metrics(srv)
    L = '{model="minilm",variant="q"'
    assert m["mantissa_drift_cosine_count" + L + "}"] >= 24
    assert m["mantissa_drift_max_abs_error_count" + L + "}"] >= 24
    assert m["mantissa_shadow_texts_total" + L + ',result="compared"}'] >= 24
    # a full shadow queue drops (and counts) instead of waiting
    cfg["models"][0]["reference"]["shadow_queue"] = 1
    write_config(srv, cfg)
    wait_until(lambda: admin(srv)["models"][0]["reference"]["shadow_queue"] == 1, "shadow_queue 1")
    resp, _ = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": ["a", "b", "c"]})
    assert resp.status == 200
    wait_until(lambda: metrics(srv)["mantissa_shadow_texts_total" + L + ',result="dropped"}'] >= 3,
               "dropped shadow texts counted")


def test_gate_keeps_a_failing_build_out_and_the_old_one_serving(start, tmp_path):
    srv = start(server_cfg([model_cfg([dict(name="ref", precision="fp32")])]))
    q = quantized_precision(srv)
    if q is None:
        pytest.skip("no precision other than fp32 is supported by the CPU backend yet")
    probes = tmp_path / "probes.txt"
    probes.write_text("# probe texts\n" + "\n".join(TEXTS) + "\n")
    ref = {"variant": "ref", "shadow_rate": 0.0}

    def cfg(prec, min_cos, extra=()):
        return server_cfg([model_cfg([dict(name="ref", precision="fp32", traffic=0),
                                      dict(name="q", precision=prec, traffic=100,
                                           gate={"probes": str(probes), "min_cosine": min_cos})]
                                     + list(extra), reference=ref)])

    write_config(srv, cfg("fp32", 0.5))
    wait_until(lambda: settled(srv, {"q": "fp32"}) and set(variants_of(srv)) == {"ref", "q"},
               "q fp32")
    space = serving_space(srv)
    # the quantized build cannot reach a cosine of 1: it stays out, fp32 serves
    write_config(srv, cfg(q, 1.0))
    wait_until(lambda: variants_of(srv)["q"]["state"] == "gate_failed", "gate failed")
    v = variants_of(srv)["q"]
    assert v["gate"]["last"]["passed"] is False and v["gate"]["last"]["probes"] == len(TEXTS)
    assert 0.9 < v["gate"]["last"]["mean_cosine"] < 1.0
    assert "min_cosine" in v["error"] and v["serving"]["precision"] == "fp32"
    assert serving_space(srv) == space
    # a lower bar: it passes and takes traffic
    write_config(srv, cfg(q, 0.9))
    wait_until(lambda: variants_of(srv)["q"]["state"] == "ready" and
               variants_of(srv)["q"]["serving"]["precision"] == q, "gate passed")
    assert serving_space(srv) != space
    # a new variant that misses its gate is not in rotation at all
    new = dict(name="n", precision=q, traffic=100,
               gate={"probes": str(probes), "min_cosine": 1.0})
    write_config(srv, cfg(q, 0.9, [new]))
    wait_until(lambda: variants_of(srv).get("n", {}).get("state") == "gate_failed", "n gated")
    for _ in range(20):
        resp, _ = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
        assert resp.status == 200 and resp.getheader("X-Mantissa-Variant") == "q"
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm@n", "input": "x"})
    assert resp.status == 503
    assert metrics(srv)['mantissa_variant_gate_failures_total{model="minilm",variant="n"}'] == 1


def test_live_drift_under_the_floor_takes_a_variant_out_of_rotation(start):
    srv = start(server_cfg([model_cfg([dict(name="ref", precision="fp32")])]))
    q = quantized_precision(srv)
    if q is None:
        pytest.skip("no precision other than fp32 is supported by the CPU backend yet")
    write_config(srv, server_cfg([model_cfg(
        [dict(name="ref", precision="fp32", traffic=1), dict(name="q", precision=q, traffic=99,
                                                             drift_floor=1.0)],
        reference={"variant": "ref", "shadow_rate": 1.0, "drift_window": 5})]))
    wait_until(lambda: settled(srv, {"q": q}) and "p_fp16" not in variants_of(srv), "q serving")
    for i in range(200):
        resp, _ = srv.request("POST", "/v1/embeddings",
                              {"model": "minilm@q", "input": "text number %d" % i})
        assert resp.status == 200
        if variants_of(srv)["q"]["state"] == "demoted":
            break
    wait_until(lambda: variants_of(srv)["q"]["state"] == "demoted", "q demoted", timeout=60)
    assert "drift_floor" in variants_of(srv)["q"]["error"]
    for _ in range(10):
        resp, _ = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
        assert resp.status == 200 and resp.getheader("X-Mantissa-Variant") == "ref"
    m = metrics(srv)
    assert m['mantissa_variant_demotions_total{model="minilm",variant="q"}'] == 1
    assert m['mantissa_variant_in_rotation{model="minilm",variant="q"}'] == 0
    assert any("taken out of rotation" in l for l in srv.log)


def test_compare_runs_a_request_through_every_variant(start):
    srv = start(server_cfg([model_cfg([dict(name="ref", precision="fp32", traffic=0),
                                       dict(name="b", precision="fp32", traffic=100)],
                                      reference={"variant": "ref"})]))
    resp, data = srv.request("POST", "/v2/models/minilm/compare",
                             {"input": ["A man is playing a guitar.", "hello"], "embeddings": True})
    assert resp.status == 200, data
    assert data["reference"] == "ref" and data["inputs"] == 2
    vs = {v["name"]: v for v in data["variants"]}
    assert set(vs) == {"ref", "b"}
    for v in vs.values():
        assert len(v["cosine_to_reference"]) == 2 and all(c > 0.9999 for c in v["cosine_to_reference"])
        assert v["latency_ms"] >= 0 and len(v["embeddings"][0]) == 384
        assert v["space_id"].startswith("minilm/fp32")
    resp, data = srv.request("POST", "/v2/models/minilm/compare", {"input": 3})
    assert resp.status == 400
    resp, data = srv.request("POST", "/v2/models/nope/compare", {"input": "x"})
    assert resp.status == 404


# ---- the repository API and the config view ---------------------------------------

def test_repository_load_unload_and_the_config_view(start):
    srv = start(server_cfg([model_cfg([dict(name="a", precision="fp32")])]))
    resp, data = srv.request("POST", "/v2/repository/models/minilm/unload", {})
    assert resp.status == 200, data
    resp, idx = srv.request("POST", "/v2/repository/index", b"")
    assert idx[0]["state"] == "UNAVAILABLE" and "unloaded" in idx[0]["reason"]
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
    assert resp.status == 503
    resp, _ = srv.request("GET", "/v2/models/minilm/ready")
    assert resp.status == 503
    resp, _ = srv.request("GET", "/v2/health/ready")
    assert resp.status == 200  # the server is ready; the model is not
    resp, data = srv.request("POST", "/v2/repository/models/minilm/load", b"")
    assert resp.status == 200, data
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
    assert resp.status == 200
    resp, data = srv.request("POST", "/v2/repository/models/other/load", b"")
    assert resp.status == 404 and "not in the config file" in data["error"]
    view = admin(srv)
    assert view["source"] == srv.cfg_path and view["generation"] >= 2
    v = view["models"][0]["variants"][0]
    assert v["state"] == "ready" and v["serving"]["space_id"].startswith("minilm/fp32")
    h = pytest.importorskip("tritonclient.http")
    c = h.InferenceServerClient("127.0.0.1:%d" % srv.port)
    c.unload_model("minilm")
    assert not c.is_model_ready("minilm")
    c.load_model("minilm")
    assert c.is_model_ready("minilm")


def test_a_model_added_to_the_config_is_loaded_and_a_removed_one_unloaded(start):
    srv = start(server_cfg([model_cfg([dict(name="a", precision="fp32")])]))
    two = server_cfg([model_cfg([dict(name="a", precision="fp32")]),
                      dict(model_cfg([dict(name="x", precision="fp32")]), name="second")])
    write_config(srv, two)
    wait_until(lambda: srv.request("GET", "/v2/models/second/ready")[0].status == 200, "second")
    resp, _ = srv.request("POST", "/v1/embeddings", {"model": "second", "input": "x"})
    assert resp.status == 200
    write_config(srv, server_cfg([model_cfg([dict(name="a", precision="fp32")])]))
    wait_until(lambda: srv.request("POST", "/v1/embeddings",
                                   {"model": "second", "input": "x"})[0].status == 503, "removed")
    resp, _ = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
    assert resp.status == 200


# ---- the A/B page ------------------------------------------------------------------

def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def test_ab_page_is_self_contained_and_renders_in_headless_chromium(start, tmp_path):
    srv = start(server_cfg([model_cfg([dict(name="ref", precision="fp32", traffic=60),
                                       dict(name="b", precision="fp32", traffic=40)],
                                      reference={"variant": "ref", "shadow_rate": 1.0})]))
    resp, html = srv.request("GET", "/ab", raw=True)
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/html")
    text = html.decode()
    for ext in ("src=\"http", "href=\"http", "@import", "<link", "src=\"//"):
        assert ext not in text
    for i in range(20):
        srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "text %d" % i})
    browser = chromium()
    if not browser:
        pytest.skip("chromium not installed (Debian package chromium; make deps installs it)")
    out_dir = os.path.join(ROOT, "build", "test-artifacts")
    os.makedirs(out_dir, exist_ok=True)
    shot = os.path.join(out_dir, "ab-page.png")
    url = "http://127.0.0.1:%d/ab?interval=300" % srv.port
    stop = threading.Event()

    def traffic():  # keep requests coming so the rates move while the page polls
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        while not stop.is_set():
            embed(conn, "traffic for the page")
        conn.close()

    t = threading.Thread(target=traffic)
    t.start()
    try:
        base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--user-data-dir=" + str(tmp_path / "chrome"), "--virtual-time-budget=4000",
                "--window-size=1280,1000"]
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True,
                             timeout=180)
        subprocess.run(base + ["--screenshot=" + shot, url], capture_output=True, timeout=180)
    finally:
        stop.set()
        t.join(timeout=60)
    assert "<svg" in dom.stdout and "minilm" in dom.stdout, dom.stdout[-2000:] + dom.stderr[-2000:]
    assert "ref (ref)" in dom.stdout and ">b<" in dom.stdout.replace("</span>", ">")
    assert 'id="status">updated' in dom.stdout, dom.stdout[:3000]
    assert os.path.getsize(shot) > 1000
    print("A/B page screenshot: " + shot)
