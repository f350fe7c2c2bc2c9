"""Several models in one server, and the memory budget: resident bytes per
model and in all (start-up and /metrics), a start-up that would pass the
budget refused with the sizes, and a reload whose new variant would pass it
failing that variant while what served keeps serving."""
import os
import subprocess

import pytest

from conftest import BIN, MODEL, Server
from test_hotswitch import admin, metrics, server_cfg, variants_of, wait_until, write_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

MIB = 1 << 20


def model(name, *precisions):
    return {"name": name, "path": MODEL,
            "variants": [{"name": p, "precision": p, "traffic": 100 if i == 0 else 0}
                         for i, p in enumerate(precisions)]}


def test_two_models_resident_bytes_and_a_budget_that_holds(tmp_path):
    cfg = server_cfg([model("one", "fp32"), model("two", "int8")], memory_budget_mb=400)
    srv = Server(cfg, tmp_path)
    try:
        sizes = {e["model"]: e["resident_mib"] for e in srv.events("model resident")}
        assert set(sizes) == {"one", "two"}, srv.log
        ready = srv.events("models ready")
        assert len(ready) == 1 and ready[0]["memory_budget_mb"] == 400, srv.log
        assert abs(ready[0]["resident_mib"] - sum(sizes.values())) < 0.2, ready
        m = metrics(srv)
        one, two = m['mantissa_model_resident_bytes{model="one"}'], \
            m['mantissa_model_resident_bytes{model="two"}']
        assert 80 * MIB < one < 100 * MIB  # fp32 MiniLM: ~87 MiB
        # int8 keeps its GEMM weights (21 MiB in fp32) in a quarter;
        # the embedding tables stay fp32
        assert one - two > 12 * MIB
        assert m["mantissa_resident_bytes"] == one + two
        assert m["mantissa_memory_budget_bytes"] == 400 * MIB
        for name in ("one", "two"):
            resp, data = srv.request("POST", "/v1/embeddings", {"model": name, "input": "hi"})
            assert resp.status == 200, data
    finally:
        assert srv.stop() == 0, "".join(srv.log)


def test_start_over_the_budget_is_refused_with_the_sizes(tmp_path):
    cfg = server_cfg([model("one", "fp32"), model("two", "fp32")], memory_budget_mb=150)
    path = tmp_path / "c.json"
    path.write_text(__import__("json").dumps(cfg))
    r = subprocess.run([BIN, "serve", "--config", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "over the memory budget" in r.stderr and "server.memory_budget_mb 150" in r.stderr, \
        r.stderr[-2000:]


def test_reload_over_the_budget_fails_that_variant_and_the_old_one_serves(tmp_path):
    cfg = server_cfg([model("one", "fp32")], memory_budget_mb=150)
    srv = Server(cfg, tmp_path)
    try:
        # a second fp32 variant would pass 150 MiB; replacing fp32 by int8 would not
        write_config(srv, server_cfg([model("one", "fp32", "fp16")], memory_budget_mb=150))
        wait_until(lambda: variants_of(srv, "one").get("fp16", {}).get("state") == "failed",
                   "fp16 to fail")
        err = variants_of(srv, "one")["fp16"]["error"]
        assert "over the memory budget" in err, err
        resp, data = srv.request("POST", "/v1/embeddings", {"model": "one", "input": "hi"})
        assert resp.status == 200 and resp.getheader("X-Mantissa-Variant") == "fp32"
        write_config(srv, server_cfg([model("one", "int8")], memory_budget_mb=150))
        wait_until(lambda: variants_of(srv, "one").get("int8", {}).get("state") == "ready",
                   "int8 to replace fp32 within the budget")
    finally:
        assert srv.stop() == 0, "".join(srv.log)


def test_two_models_switch_and_report_on_their_own(tmp_path):
    """A reload that changes one model rebuilds that model only; statistics,
    metrics and compare show each model; routing by model name."""
    cfg = server_cfg([model("one", "fp32"), model("two", "fp32")])
    srv = Server(cfg, tmp_path)
    try:
        before = {m["name"]: m for m in admin(srv)["models"]}
        built_two = before["two"]["variants"][0]["serving"]["build_s"]
        write_config(srv, server_cfg([model("one", "int8"), model("two", "fp32")]))
        wait_until(lambda: variants_of(srv, "one").get("int8", {}).get("state") == "ready",
                   "one@int8")
        two = variants_of(srv, "two")["fp32"]
        assert two["state"] == "ready" and two["serving"]["build_s"] == built_two  # untouched
        for name, prec in (("one", "int8"), ("two", "fp32")):
            resp, data = srv.request("POST", "/v1/embeddings", {"model": name, "input": "hi"})
            assert resp.status == 200 and resp.getheader("X-Mantissa-Precision") == prec
        resp, stats = srv.request("GET", "/v2/models/stats")
        assert {s["name"] for s in stats["model_stats"]} == {"one", "two"}
        m = metrics(srv)
        assert m['mantissa_request_success_total{model="one",variant="int8"}'] == 1
        assert m['mantissa_request_success_total{model="two",variant="fp32"}'] == 1
        resp, cmp_ = srv.request("POST", "/v2/models/two/compare", {"input": "hi"})
        assert resp.status == 200 and [v["name"] for v in cmp_["variants"]] == ["fp32"]
    finally:
        assert srv.stop() == 0, "".join(srv.log)


def test_a_mixed_variant_serves_and_a_bad_mix_is_refused_by_name(tmp_path):
    """variants[].mix: a per-layer mix serves (fewer resident bytes than
    fp32, more than int8, vectors close to fp32); a start with a bad rule
    names the field and the rule; a reload to a bad rule fails that variant
    and the mixed one keeps serving."""
    def mixed(mix):
        return {"name": "one", "path": MODEL,
                "variants": [{"name": "mixed", "precision": "int8", "mix": mix}]}
    bad = server_cfg([mixed("ffn_out@0=fp32; qkv@9x=fp32")])
    path = tmp_path / "bad.json"
    path.write_text(__import__("json").dumps(bad))
    r = subprocess.run([BIN, "serve", "--config", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "models[0].variants[0].mix: mix rule 'qkv@9x=fp32'" in r.stderr, r.stderr[-2000:]

    srv = Server(server_cfg([mixed("ffn_out@0,5=fp32"), model("ref", "fp32")]), tmp_path)
    try:
        m = metrics(srv)
        one, ref = m['mantissa_model_resident_bytes{model="one"}'], \
            m['mantissa_model_resident_bytes{model="ref"}']
        assert one < ref - 8 * MIB, (one, ref)
        vec = {}
        for name in ("one", "ref"):
            resp, data = srv.request("POST", "/v1/embeddings",
                                     {"model": name, "input": "A man is playing a guitar."})
            assert resp.status == 200, data
            vec[name] = data["data"][0]["embedding"]
        dot = sum(a * b for a, b in zip(vec["one"], vec["ref"]))
        assert dot > 0.998, dot  # unit vectors
        write_config(srv, server_cfg([mixed("ffn_out@0,5=fp33"), model("ref", "fp32")]))
        wait_until(lambda: any("fp33" in l and "reload refused" in l for l in srv.log),
                   "the reload to be refused")
        resp, data = srv.request("POST", "/v1/embeddings", {"model": "one", "input": "hi"})
        assert resp.status == 200 and resp.getheader("X-Mantissa-Variant") == "mixed"
    finally:
        assert srv.stop() == 0, "".join(srv.log)


MPNET = os.path.join(os.path.dirname(MODEL), "all-mpnet-base-v2")


@pytest.mark.skipif(not os.path.exists(os.path.join(MPNET, "model.safetensors")),
                    reason="all-mpnet-base-v2 not fetched (make model MODEL=all-mpnet-base-v2)")
def test_the_two_models_example_serves_both(tmp_path):
    """config/two-models.json as shipped (only the address changed): MiniLM
    (384-d, int8 served) and MPNet (768-d, fp32 served) in one server, each
    with its own variants and batching, both in /metrics with their
    resident bytes under the config's budget."""
    import json
    cfg = json.load(open(os.path.join(os.path.dirname(MODEL), "..", "config",
                                      "two-models.json")))
    cfg["server"]["listen"] = "127.0.0.1:0"
    for m in cfg["models"]:
        m["path"] = os.path.join(os.path.dirname(MODEL), "..", m["path"])
    srv = Server(cfg, tmp_path)
    try:
        dims = {}
        for name, variant in (("minilm", "int8"), ("mpnet", "fp32")):
            resp, data = srv.request("POST", "/v1/embeddings",
                                     {"model": name, "input": ["A man is playing a guitar."]})
            assert resp.status == 200, data
            assert resp.getheader("X-Mantissa-Variant") == variant
            dims[name] = len(data["data"][0]["embedding"])
        assert dims == {"minilm": 384, "mpnet": 768}
        m = metrics(srv)
        one, two = m['mantissa_model_resident_bytes{model="minilm"}'], \
            m['mantissa_model_resident_bytes{model="mpnet"}']
        assert two > 2 * one and m["mantissa_resident_bytes"] == one + two
        assert m["mantissa_resident_bytes"] <= cfg["server"]["memory_budget_mb"] * MIB
    finally:
        assert srv.stop() == 0, "".join(srv.log)
