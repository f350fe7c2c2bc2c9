"""What the server does with the texts it is sent, on every route that takes
text (OpenAI, TEI, KServe, compare): an empty text is refused, naming its
index, in each protocol's own error shape; truncation is explicit (a per-request `truncate`; when it is off an over-long text is
refused with its token count and the limit; when it is on the answer says
how many texts were cut, X-Mantissa-Truncated-Inputs); each refusal counts
in /metrics under its own reason. The real binary over real HTTP, and the
OpenAI SDK and huggingface_hub's InferenceClient where a client sees it.
(`mantissa embed`'s blank lines: test_embed_cli.py.)"""
import json
import os
import re
import struct

import pytest

from conftest import MODEL, Server, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

LONG = "word " * 1000  # 1002 tokens with [CLS] and [SEP]; MiniLM's limit is 256


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    cfg = default_config()
    # the same weights again, with truncation off by default
    cfg["models"].append(dict(cfg["models"][0], name="strict", truncate=False))
    s = Server(cfg, tmp_path_factory.mktemp("inputs"))
    yield s
    assert s.stop() == 0, "".join(s.log)


def openai_error(resp, data, status=400, param=None):
    assert resp.status == status, (resp.status, data)
    err = data["error"]
    assert err["type"] == "invalid_request_error", err
    if param is not None:
        assert err["param"] == param, err
    return err["message"]


def tei_error(resp, data, status=422):
    assert resp.status == status, (resp.status, data)
    assert data["error_type"] == "Validation", data
    return data["error"]


def kserve_error(resp, data, status=400):
    assert resp.status == status, (resp.status, data)
    assert set(data) == {"error"} and isinstance(data["error"], str), data
    return data["error"]


def kserve_body(texts, **params):
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)],
                        "data": texts}]}
    if params:
        body["parameters"] = params
    return body


# ---- empty texts ------------------------------------------------------------

def test_openai_refuses_an_empty_string_naming_its_index(srv):
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": ""})
    msg = openai_error(resp, data, param="input")
    assert "input[0]" in msg and "empty" in msg, msg
    resp, data = srv.request("POST", "/v1/embeddings",
                             {"model": "minilm", "input": ["a", "b", "", "c", ""]})
    msg = openai_error(resp, data, param="input")
    assert "input[2]" in msg and "2 of 5" in msg, msg


def test_whitespace_only_is_a_text_as_openai_and_tei_take_it(srv):
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": [" ", "\t"]})
    assert resp.status == 200, data
    resp, data = srv.request("POST", "/embed", {"inputs": " "})
    assert resp.status == 200, data


def test_openai_sdk_gets_bad_request_naming_the_empty_input(srv):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="minilm", input=["fine", ""])
    assert "input[1]" in str(e.value), e.value


def test_tei_refuses_an_empty_string_on_embed_root_and_tokenize(srv):
    for path in ("/embed", "/"):
        resp, data = srv.request("POST", path, {"inputs": ["a", ""]})
        msg = tei_error(resp, data)
        assert "inputs[1]" in msg and "empty" in msg, (path, msg)
    resp, data = srv.request("POST", "/tokenize", {"inputs": ""})
    assert "inputs[0]" in tei_error(resp, data)


def test_huggingface_hub_client_sees_the_empty_input_refused(srv):
    hub = pytest.importorskip("huggingface_hub")
    client = hub.InferenceClient(model="http://127.0.0.1:%d" % srv.port)
    with pytest.raises(Exception) as e:
        client.feature_extraction("")
    assert "inputs[0]" in str(e.value), e.value


def test_kserve_refuses_an_empty_element_in_json_and_binary_tensors(srv):
    resp, data = srv.request("POST", "/v2/models/minilm/infer", kserve_body(["a", "", "b"]))
    msg = kserve_error(resp, data)
    assert "text[1]" in msg and "empty" in msg, msg
    texts = [b"a", b"b", b""]
    blob = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    head = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3],
                                   "parameters": {"binary_data_size": len(blob)}}]}).encode()
    resp, data = srv.request("POST", "/v2/models/minilm/infer", head + blob,
                             headers={"Inference-Header-Content-Length": str(len(head)),
                                      "Content-Type": "application/octet-stream"})
    assert "text[2]" in kserve_error(resp, data)


def test_compare_refuses_an_empty_string(srv):
    resp, data = srv.request("POST", "/v2/models/minilm/compare", {"input": ["x", ""]})
    assert "input[1]" in kserve_error(resp, data)


# ---- truncation ---------------------------------------------------------------

def test_openai_truncate_field_overrides_the_models_setting(srv):
    # truncate false on a truncating model: OpenAI's own answer to an over-long input
    resp, data = srv.request("POST", "/v1/embeddings",
                             {"model": "minilm", "input": ["short", LONG], "truncate": False})
    msg = openai_error(resp, data, param="max_seq_len")
    assert "input[1]" in msg and "1002 tokens" in msg and "256" in msg, msg
    # truncate true on a model that refuses by default
    resp, data = srv.request("POST", "/v1/embeddings",
                             {"model": "strict", "input": [LONG, "short", LONG], "truncate": True})
    assert resp.status == 200, data
    assert resp.getheader("X-Mantissa-Truncated-Inputs") == "2"
    assert data["mantissa"]["truncated_inputs"] == 2
    assert data["usage"]["prompt_tokens"] == 256 * 2 + 3
    resp, data = srv.request("POST", "/v1/embeddings",
                             {"model": "minilm", "input": "x", "truncate": "yes"})
    openai_error(resp, data, param="truncate")


def test_the_models_setting_is_the_default_and_the_header_says_what_was_cut(srv):
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": [LONG, "x"]})
    assert resp.status == 200 and resp.getheader("X-Mantissa-Truncated-Inputs") == "1", data
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x"})
    assert resp.getheader("X-Mantissa-Truncated-Inputs") == "0"
    resp, data = srv.request("POST", "/v1/embeddings", {"model": "strict", "input": LONG})
    msg = openai_error(resp, data, param="max_seq_len")
    assert "1002 tokens" in msg and "256" in msg, msg


def test_openai_sdk_passes_truncate_as_an_extra_field(srv):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="minilm", input=LONG, extra_body={"truncate": False})
    assert "1002 tokens" in str(e.value), e.value
    r = client.embeddings.with_raw_response.create(model="strict", input=LONG,
                                                   extra_body={"truncate": True})
    assert r.headers["X-Mantissa-Truncated-Inputs"] == "1"
    assert len(r.parse().data[0].embedding) == 384


def test_tei_truncate_refuses_with_the_count_and_the_limit_and_reports_cuts(srv):
    resp, data = srv.request("POST", "/embed", {"inputs": ["x", LONG], "truncate": False})
    msg = tei_error(resp, data)
    assert "inputs[1]" in msg and "1002 tokens" in msg and "256" in msg, msg
    resp, data = srv.request("POST", "/embed", {"inputs": [LONG, LONG], "truncate": True},
                             headers={"X-Mantissa-Model": "strict"})
    assert resp.status == 200 and resp.getheader("X-Mantissa-Truncated-Inputs") == "2", data


def test_huggingface_hub_client_truncate_false_is_refused(srv):
    hub = pytest.importorskip("huggingface_hub")
    client = hub.InferenceClient(model="http://127.0.0.1:%d" % srv.port)
    with pytest.raises(Exception) as e:
        client.feature_extraction(LONG, truncate=False)
    assert "1002 tokens" in str(e.value), e.value
    assert len(client.feature_extraction(LONG, truncate=True)[0]) == 384


def test_kserve_truncate_parameter_and_the_truncated_count(srv):
    resp, data = srv.request("POST", "/v2/models/minilm/infer",
                             kserve_body(["x", LONG], truncate=False))
    msg = kserve_error(resp, data)
    assert "text[1]" in msg and "1002 tokens" in msg and "256" in msg, msg
    resp, data = srv.request("POST", "/v2/models/strict/infer",
                             kserve_body([LONG, "x", LONG], truncate=True))
    assert resp.status == 200, data
    assert resp.getheader("X-Mantissa-Truncated-Inputs") == "2"
    assert data["parameters"]["truncated_inputs"] == 2
    resp, data = srv.request("POST", "/v2/models/strict/infer", kserve_body([LONG]))
    assert "1002 tokens" in kserve_error(resp, data)
    resp, data = srv.request("POST", "/v2/models/minilm/infer", kserve_body(["x"], truncate=1))
    assert "truncate" in kserve_error(resp, data)


# ---- metrics --------------------------------------------------------------------

def counter(srv, key):
    _, text = srv.request("GET", "/metrics", raw=True)
    m = re.search("^" + re.escape(key) + r" (\d+)$", text.decode(), re.M)
    assert m, (key, text.decode()[-3000:])
    return int(m.group(1))


def failures(srv, reason, model="minilm"):
    return counter(srv, 'mantissa_request_failures_total{model="%s",variant="fp32",reason="%s"}'
                   % (model, reason))


def test_refusals_count_as_empty_input_and_too_long(srv):
    empty0, long0 = failures(srv, "empty_input"), failures(srv, "too_long")
    limit0 = failures(srv, "limit")
    srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": ["x", ""]})
    srv.request("POST", "/embed", {"inputs": ""})
    srv.request("POST", "/v2/models/minilm/infer", kserve_body([""]))
    srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": LONG, "truncate": False})
    srv.request("POST", "/embed", {"inputs": LONG, "truncate": False})
    assert failures(srv, "empty_input") - empty0 == 3
    assert failures(srv, "too_long") - long0 == 2
    assert failures(srv, "limit") == limit0


def test_truncated_texts_are_counted(srv):
    key = 'mantissa_truncated_texts_total{model="minilm",variant="fp32"}'
    before = counter(srv, key)
    resp, _ = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": [LONG, "x", LONG]})
    assert resp.status == 200
    assert counter(srv, key) - before == 2
