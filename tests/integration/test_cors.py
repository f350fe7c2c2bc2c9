"""CORS (server.cors_allow_origins), against the real binary over real HTTP:
off by default (no CORS header; OPTIONS is 405 as for any method a path
lacks); on, every answer carries Access-Control-Allow-Origin for an allowed
origin and Vary: Origin, and a preflight on any route is 204 with the
route's methods and the allowed request headers, with no API key. A reload
that changes the list is named as needing a restart."""
import json
import os
import time

import pytest

from conftest import MODEL, Server, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

APP = "https://app.example.com"
KEY = {"Authorization": "Bearer secret"}


def preflight(srv, path, origin=APP, method="POST", headers="content-type, authorization"):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return srv.request("OPTIONS", path, headers=h, raw=True)


def cors_headers(resp):
    return {k: v for k, v in resp.getheaders() if k.lower().startswith("access-control-")}


@pytest.fixture(scope="module")
def off(tmp_path_factory):
    s = Server(default_config(), tmp_path_factory.mktemp("cors-off"))
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def listed(tmp_path_factory):
    d = tmp_path_factory.mktemp("cors-on")
    keys = d / "keys.txt"
    keys.write_text("secret\n")
    cfg = default_config(cors_allow_origins=[APP, "http://localhost:3000"],
                         api_keys_file=str(keys), watch=False)
    s = Server(cfg, d)
    s.cfg = cfg
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_without_the_option_no_cors_and_options_is_405(off):
    resp, _ = preflight(off, "/v1/embeddings")
    assert resp.status == 405 and "POST" in resp.getheader("Allow")
    assert cors_headers(resp) == {}
    resp, _ = off.request("POST", "/embed", {"inputs": "a cat"}, headers={"Origin": APP},
                          raw=True)
    assert resp.status == 200 and cors_headers(resp) == {} and resp.getheader("Vary") is None


def test_preflight_on_any_route_needs_no_key(listed):
    resp, body = preflight(listed, "/embed", headers="content-type, authorization, x-evil")
    assert resp.status == 204 and body == b""
    h = cors_headers(resp)
    assert h["Access-Control-Allow-Origin"] == APP
    assert h["Access-Control-Allow-Methods"] == "POST"
    assert h["Access-Control-Allow-Headers"] == "Content-Type, Authorization"  # not x-evil
    assert int(h["Access-Control-Max-Age"]) > 0
    assert "Origin" in resp.getheader("Vary")
    # the route's methods: GET and POST on /, GET on a KServe path with a model in it
    resp, _ = preflight(listed, "/", method="GET", headers=None)
    assert resp.status == 204
    assert set(resp.getheader("Access-Control-Allow-Methods").split(", ")) == {"GET", "POST"}
    resp, _ = preflight(listed, "/v2/models/minilm/ready", method="GET",
                        headers="x-request-id, X-Mantissa-Variant, x-mantissa-route-key")
    assert resp.status == 204 and resp.getheader("Access-Control-Allow-Methods") == "GET"
    assert (resp.getheader("Access-Control-Allow-Headers") ==
            "X-Request-Id, X-Mantissa-Variant, X-Mantissa-Route-Key")
    # another origin: answered, but not allowed (the browser stops there)
    resp, _ = preflight(listed, "/embed", origin="https://evil.example")
    assert resp.status == 204 and cors_headers(resp) == {}
    assert "Origin" in resp.getheader("Vary")


def test_options_that_is_no_preflight_stays_405(listed):
    resp, _ = listed.request("OPTIONS", "/embed", headers=dict(KEY, Origin=APP), raw=True)
    assert resp.status == 405 and resp.getheader("Allow") == "POST"
    resp, _ = listed.request("OPTIONS", "/embed", headers={"Origin": APP}, raw=True)
    assert resp.status == 401  # not a preflight: a key like any request
    resp, _ = preflight(listed, "/no/such/path")
    assert resp.status in (401, 404)


def test_answers_carry_the_allowed_origin(listed):
    resp, data = listed.request("POST", "/embed", {"inputs": "a cat"},
                                headers=dict(KEY, Origin=APP))
    assert resp.status == 200 and len(data[0]) == 384
    assert resp.getheader("Access-Control-Allow-Origin") == APP
    assert resp.getheader("Vary") == "Origin"
    exposed = resp.getheader("Access-Control-Expose-Headers")
    assert "X-Mantissa-Variant" in exposed and "X-Request-Id" in exposed
    # every header the answer had before is still there
    for h in ("X-Mantissa-Variant", "X-Mantissa-Precision", "X-Mantissa-Space",
              "X-Queue-Time-Ms", "X-Inference-Time-Ms", "Server-Timing", "X-Request-Id"):
        assert resp.getheader(h), h
    # the second origin, in any case; errors too (a page can read why it failed)
    resp, _ = listed.request("POST", "/embed", {"inputs": "a cat"},
                             headers={"Origin": "HTTP://LOCALHOST:3000"}, raw=True)
    assert resp.status == 401
    assert resp.getheader("Access-Control-Allow-Origin") == "HTTP://LOCALHOST:3000"
    # an origin not listed, or none: no Allow-Origin, but the answer varies by it
    for hdrs in (dict(KEY, Origin="https://evil.example"), KEY):
        resp, _ = listed.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"},
                                 headers=hdrs, raw=True)
        assert resp.status == 200 and resp.getheader("Access-Control-Allow-Origin") is None
        assert resp.getheader("Vary") == "Origin"


def test_any_origin(tmp_path):
    srv = Server(default_config(cors_allow_origins=["*"]), tmp_path)
    try:
        for hdrs in ({"Origin": "https://anything.example"}, {}):
            resp, _ = srv.request("POST", "/embed", {"inputs": "a cat"}, headers=hdrs, raw=True)
            assert resp.status == 200 and resp.getheader("Access-Control-Allow-Origin") == "*"
        resp, _ = preflight(srv, "/v1/embeddings", origin="https://anything.example")
        assert resp.status == 204 and resp.getheader("Access-Control-Allow-Origin") == "*"
    finally:
        assert srv.stop() == 0


def test_a_reload_that_changes_the_origins_says_it_needs_a_restart(listed):
    cfg = json.loads(json.dumps(listed.cfg))
    cfg["server"]["cors_allow_origins"] = ["https://other.example"]
    with open(listed.cfg_path, "w") as f:
        json.dump(cfg, f)
    n = sum("config reloaded from" in l for l in listed.log)
    resp, data = listed.request("POST", "/v2/admin/reload", b"", headers=KEY)
    assert resp.status == 200, data
    deadline = time.time() + 30
    while sum("config reloaded from" in l for l in listed.log) == n:
        assert time.time() < deadline, listed.log
        time.sleep(0.05)
    warn = [l for l in listed.log if "server settings changed" in l]
    assert len(warn) == 1 and "cors_allow_origins" in warn[0] and "restart" in warn[0], warn
    # still the list it started with
    resp, _ = preflight(listed, "/embed")
    assert resp.getheader("Access-Control-Allow-Origin") == APP
    with open(listed.cfg_path, "w") as f:
        json.dump(listed.cfg, f)


def test_a_bad_origin_is_refused_at_start_naming_the_field(tmp_path):
    with pytest.raises(RuntimeError) as e:
        Server(default_config(cors_allow_origins=["https://app.example.com/"]), tmp_path)
    assert "server.cors_allow_origins: [0] must be" in str(e.value), e.value
