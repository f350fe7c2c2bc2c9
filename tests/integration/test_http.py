"""Integration tests: the real binary, the real model, real HTTP.

Covers the embeddings path end to end (OpenAI and KServe v2 shapes, float
and base64, batches), agreement with the committed sentence-transformers
reference, each error status in its protocol's shape, and that the server
keeps serving after every bad request."""
import base64
import json
import math
import os
import re
import struct
import subprocess
import pytest

from conftest import BIN, ROOT, MODEL, Server, default_config


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def embed(server, inputs, **extra):
    body = {"model": "minilm", "input": inputs}
    body.update(extra)
    resp, data = server.request("POST", "/v1/embeddings", body)
    assert resp.status == 200, data
    return resp, data


def assert_kserve_error(resp, data, status):
    assert resp.status == status, (resp.status, data)
    assert isinstance(data, dict) and isinstance(data.get("error"), str) and data["error"], data


def assert_openai_error(resp, data, status, param=None):
    assert resp.status == status, (resp.status, data)
    err = data["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err


# ---- health and metadata ----------------------------------------------------

def test_health_live_and_ready(server):
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/minilm/ready"):
        resp, _ = server.request("GET", path)
        assert resp.status == 200, path


def test_server_and_model_metadata(server):
    resp, meta = server.request("GET", "/v2")
    assert resp.status == 200 and meta["name"] == "mantissa" and "version" in meta
    resp, m = server.request("GET", "/v2/models/minilm")
    assert resp.status == 200
    assert m["name"] == "minilm" and m["versions"] == ["1"]
    assert m["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert m["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}]
    resp, _ = server.request("GET", "/v2/models/minilm/versions/1")
    assert resp.status == 200
    resp, data = server.request("GET", "/v2/models/minilm/versions/7")
    assert_kserve_error(resp, data, 404)


def test_openai_models_lists_model_and_variants(server):
    resp, data = server.request("GET", "/v1/models")
    assert resp.status == 200
    ids = [m["id"] for m in data["data"]]
    assert "minilm" in ids and "minilm@fp32" in ids


# ---- embeddings ---------------------------------------------------------------

def test_openai_embedding_of_one_string(server):
    resp, data = embed(server, "A man is playing a guitar.")
    assert resp.getheader("X-Mantissa-Variant") == "fp32"
    assert data["object"] == "list" and data["model"] == "minilm"
    assert len(data["data"]) == 1 and data["data"][0]["index"] == 0
    v = data["data"][0]["embedding"]
    assert len(v) == 384
    assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5
    # [CLS] a man is playing a guitar . [SEP]
    assert data["usage"] == {"prompt_tokens": 9, "total_tokens": 9}


def test_embeddings_match_sentence_transformers_reference(server, reference):
    sentences, ref = reference
    # the corpus's empty string is refused over HTTP (test_inputs.py); the
    # engine's vector for it is checked by tests/unit/test_bert.c
    keep = [i for i, s in enumerate(sentences) if s]
    worst_cos, worst_diff = 1.0, 0.0
    for start in range(0, len(keep), 16):
        idx = keep[start:start + 16]
        _, data = embed(server, [sentences[k] for k in idx])
        for i, item in enumerate(data["data"]):
            assert item["index"] == i
            k = idx[i]
            got, want = item["embedding"], ref[k]
            c = cosine(got, want)
            d = max(abs(x - y) for x, y in zip(got, want))
            worst_cos, worst_diff = min(worst_cos, c), max(worst_diff, d)
            assert c >= 0.99999 and d <= 1e-4, (k, sentences[k][:80], c, d)
    print("reference: %d sentences, min cosine %.7f, max abs diff %.2e"
          % (len(sentences), worst_cos, worst_diff))


def test_embeddings_without_v1_is_the_same_route(server):
    # infinity-emb's (and TEI's) path for the OpenAI route: same handler, same answers
    body = {"model": "minilm", "input": ["a cat", "a dog"], "encoding_format": "base64"}
    resp, v1 = server.request("POST", "/v1/embeddings", body)
    resp2, bare = server.request("POST", "/embeddings", body)
    assert resp.status == resp2.status == 200, bare
    assert [d["embedding"] for d in bare["data"]] == [d["embedding"] for d in v1["data"]]
    assert bare["usage"] == v1["usage"] and bare["model"] == v1["model"]
    resp, data = server.request("POST", "/embeddings", {"model": "minilm", "input": []})
    assert_openai_error(resp, data, 400, "input")
    resp, data = server.request("GET", "/embeddings")
    assert_openai_error(resp, data, 405)
    assert "POST" in resp.getheader("Allow")


def test_base64_encoding_is_little_endian_float32_of_the_same_vector(server):
    _, f = embed(server, ["base64 check", "second"])
    _, b = embed(server, ["base64 check", "second"], encoding_format="base64")
    for fi, bi in zip(f["data"], b["data"]):
        raw = base64.b64decode(bi["embedding"])
        assert len(raw) == 384 * 4
        vals = struct.unpack("<384f", raw)
        assert max(abs(x - y) for x, y in zip(vals, fi["embedding"])) < 1e-6


def test_batch_gives_the_same_vectors_as_one_at_a_time(server):
    texts = ["short", "a somewhat longer sentence about the weather today",
             "x " * 300, " ", "Ünïcödé and 中文 mixed in"]  # " ": [CLS] [SEP] alone
    _, batch = embed(server, texts)
    for i, t in enumerate(texts):
        _, one = embed(server, t)
        a, b = batch["data"][i]["embedding"], one["data"][0]["embedding"]
        assert cosine(a, b) > 0.999999 and max(abs(x - y) for x, y in zip(a, b)) < 1e-5, i


def test_kserve_infer_returns_fp32_tensor_matching_openai(server):
    body = {"id": "req-1", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                       "data": ["A man is playing a guitar.", "A dog runs."]}],
            "outputs": [{"name": "embedding"}]}
    resp, data = server.request("POST", "/v2/models/minilm/infer", body)
    assert resp.status == 200, data
    assert data["model_name"] == "minilm" and data["id"] == "req-1"
    out = data["outputs"][0]
    assert out["name"] == "embedding" and out["datatype"] == "FP32" and out["shape"] == [2, 384]
    assert len(out["data"]) == 2 * 384
    _, oa = embed(server, ["A man is playing a guitar.", "A dog runs."])
    for i in range(2):
        assert cosine(out["data"][i * 384:(i + 1) * 384], oa["data"][i]["embedding"]) > 0.999999
    # [n, 1] shape with nested data is accepted too
    body["inputs"][0].update(shape=[2, 1], data=[["A man is playing a guitar."], ["A dog runs."]])
    resp, data2 = server.request("POST", "/v2/models/minilm/versions/1/infer", body)
    assert resp.status == 200 and data2["outputs"][0]["shape"] == [2, 384]


def test_variant_pin_by_name_and_header(server):
    resp, _ = embed(server, "pinned", model="minilm@fp32")
    assert resp.getheader("X-Mantissa-Variant") == "fp32"
    resp, _ = server.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"},
                             headers={"X-Mantissa-Variant": "fp32"})
    assert resp.status == 200 and resp.getheader("X-Mantissa-Variant") == "fp32"
    resp, data = server.request("POST", "/v1/embeddings", {"model": "minilm@int3", "input": "x"})
    assert_openai_error(resp, data, 404, "model")


# ---- errors: each in its protocol's shape, and the server keeps serving ------

def test_openai_errors(server):
    cases = [
        ({"model": "nope", "input": "x"}, 404, "model"),
        ({"model": "minilm", "input": []}, 400, "input"),
        ({"model": "minilm", "input": 5}, 400, "input"),
        ({"model": "minilm", "input": ["ok", 3]}, 400, "input"),
        ({"model": "minilm", "input": [[1, 2, 3]]}, 400, "input"),
        ({"model": "minilm"}, 400, "input"),
        ({"input": "x"}, 400, "model"),
        ({"model": "minilm", "input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
        ({"model": "minilm", "input": "x", "dimensions": 128}, 400, "dimensions"),
        ({"model": "minilm", "input": "x", "temperature": 1}, 400, "temperature"),
        ({"model": "minilm", "input": ["x"] * 65}, 413, "max_inputs"),
    ]
    for body, status, param in cases:
        resp, data = server.request("POST", "/v1/embeddings", body)
        assert_openai_error(resp, data, status, param)
    resp, data = server.request("POST", "/v1/embeddings", b"{not json")
    assert_openai_error(resp, data, 400)
    resp, data = server.request("POST", "/v1/embeddings", b'{"model":"minilm","model":"x","input":"a"}')
    assert_openai_error(resp, data, 400, "model")


def test_invalid_utf8_is_400_not_a_crash(server):
    # invalid UTF-8 makes the body invalid JSON (RFC 8259): refused before parsing,
    # with the byte offset (texts in KServe's binary extension are checked by the
    # tokenizer instead, which names the input)
    body = b'{"model":"minilm","input":["fine","bad \xff\xfe here"]}'
    resp, data = server.request("POST", "/v1/embeddings", body)
    assert_openai_error(resp, data, 400)
    assert "invalid UTF-8" in data["error"]["message"] and "byte 39" in data["error"]["message"]
    # an escaped lone surrogate cannot become UTF-8: the JSON parser refuses it
    resp, data = server.request("POST", "/v1/embeddings", b'{"model":"minilm","input":"\\ud800"}')
    assert_openai_error(resp, data, 400)


def test_kserve_errors(server):
    good = {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["x"]}
    cases = [
        ("/v2/models/nope/infer", {"inputs": [good]}, 404),
        ("/v2/models/minilm/infer", {"inputs": []}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, name="txt")]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, datatype="FP32")]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, shape=[2])]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, shape=[-1])]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, shape=[1000000, 1000000])]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, shape=[1.5])]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, data=[1])]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [good], "outputs": [{"name": "logits"}]}, 400),
        ("/v2/models/minilm/infer", {"inputs": [dict(good, shape=[65], data=["x"] * 65)]}, 413),
    ]
    for path, body, status in cases:
        resp, data = server.request("POST", path, body)
        assert_kserve_error(resp, data, status)


def test_protocol_errors_and_limits(server):
    resp, data = server.request("GET", "/v2/nothing/here")
    assert_kserve_error(resp, data, 404)
    resp, data = server.request("GET", "/v1/embeddings")
    assert_openai_error(resp, data, 405)
    assert "POST" in resp.getheader("Allow")
    resp, data = server.request("DELETE", "/v2/health/live")
    assert_kserve_error(resp, data, 405)
    resp, data = server.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"},
                                headers={"Content-Type": "multipart/form-data; boundary=x"})
    assert_openai_error(resp, data, 415)
    big = json.dumps({"model": "minilm", "input": "a" * (1 << 20)})
    resp, data = server.request("POST", "/v1/embeddings", big)
    assert_openai_error(resp, data, 413, "max_body_bytes")
    deep = "[" * 100 + "]" * 100
    resp, data = server.request("POST", "/v2/models/minilm/infer", '{"inputs":' + deep + "}")
    assert_kserve_error(resp, data, 400)
    assert "nesting" in data["error"]
    resp, data = server.request("POST", "/v2/models/minilm/infer", b"")
    assert_kserve_error(resp, data, 400)
    # still serving after all of that
    resp, _ = server.request("GET", "/v2/health/ready")
    assert resp.status == 200
    embed(server, "still here")


def test_curl_style_form_content_type_is_accepted(server):
    resp, data = server.request("POST", "/v1/embeddings", {"model": "minilm", "input": "hi"},
                                headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status == 200, data


def test_over_long_input_is_truncated_by_default(server):
    _, data = embed(server, "word " * 1000)
    assert data["usage"]["prompt_tokens"] == 256


# ---- start-up errors ---------------------------------------------------------

def test_bad_config_fails_at_start_naming_file_and_field(tmp_path):
    cfg = default_config()
    cfg["models"][0]["variants"][0]["precision"] = "int4"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(cfg))
    r = subprocess.run([BIN, "serve", "--config", str(p)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert str(p) in r.stderr and "models[0].variants[0].precision" in r.stderr, r.stderr


def test_missing_model_dir_fails_at_start_naming_the_file(tmp_path):
    cfg = default_config()
    cfg["models"][0]["path"] = str(tmp_path / "nowhere")
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    r = subprocess.run([BIN, "serve", "--config", str(p)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    # exit status 1, not a crash on the way out (a failed load once freed the config twice)
    assert r.returncode == 1 and "nowhere/config.json" in r.stderr, (r.returncode, r.stderr)


def test_device_cuda_without_a_gpu_fails_at_start_naming_the_variant(tmp_path):
    cfg = default_config()
    cfg["models"][0]["device"] = "cuda"
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    r = subprocess.run([BIN, "serve", "--config", str(p), "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    log = [json.loads(l) for l in r.stderr.splitlines()]  # the log's format: JSON
    if not [e for e in log if e["msg"] == "no device" and e["backend"] == "cuda"]:
        pytest.skip("a CUDA device is present here: device \"cuda\" starts")
    assert r.returncode == 1, (r.returncode, r.stderr)
    err = [e["msg"] for e in log if e["level"] == "error"]
    assert len(err) == 1 and 'device "cuda" asked for' in err[0] and str(p) in err[0], r.stderr


def test_truncate_off_makes_long_inputs_400_as_openai_answers_them(tmp_path):
    cfg = default_config()
    cfg["models"][0]["truncate"] = False
    srv = Server(cfg, tmp_path)
    try:
        resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "w " * 300})
        assert_openai_error(resp, data, 400, "max_seq_len")
        resp, _ = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "w " * 10})
        assert resp.status == 200
    finally:
        assert srv.stop() == 0


def test_server_timing_splits_the_request_by_hop(server):
    import http.client as hc
    conn = hc.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": "A man plays."}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    conn.close()
    assert r.status == 200
    timing = r.getheader("Server-Timing")
    hops = re.findall(r'(\w+);dur=([0-9.]+)(?:;desc="([^"]*)")?(?:, |$)', timing)
    assert [h[0] for h in hops] == ["parse", "inbox", "queue", "dispatch", "forward",
                                    "resume"], timing
    dur = {k: float(v) for k, v, _ in hops}
    # the forward's batch: this one text alone, [CLS] a man plays . [SEP]
    assert hops[4][2] == "batch of 1 (6 tokens)", timing
    assert all(v >= 0 for v in dur.values()) and dur["forward"] > 0, timing
    # the forward is the compute the other header reports
    assert abs(dur["forward"] - float(r.getheader("X-Inference-Time-Ms"))) < 0.01, timing
