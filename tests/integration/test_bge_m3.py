"""bge-m3's three outputs served for real: an XLM-RoBERTa folder that
tools/make-xlmr.py makes at test time (its OUT/m3: CLS pooling and Normalize,
with bge-m3's sparse_linear.pt and colbert_linear.pt beside it, torch.save
files from tests/fixtures/bge-m3-heads) beside the plain MiniLM embedder.
- TEI's /embed_sparse answers each text's lexical weights as TEI answers a
  sparse model ([{"index", "value"}], ordered by token id), equal to the
  tool's float64 reference;
- /embed_multivector and TEI's /embed_all answer the ColBERT vectors (every
  token but the first, normalised);
- the OpenAI route's "outputs" gives dense, sparse and ColBERT in one data
  item from one request, the dense vector the same as /v1/embeddings';
- a model without the heads is refused naming what it lacks: 424 on TEI's
  routes (TEI's words), 400 on the OpenAI route; bad "outputs" are refused
  naming the field."""
import os

import pytest

from conftest import MODEL, Server, make_xlmr

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")
TOL = 1e-4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("m3")
    ref = make_xlmr(tmp)
    return tmp, str(tmp / "m" / "m3"), ref


@pytest.fixture(scope="module")
def srv(folder):
    tmp, m3, _ = folder
    one = [{"name": "fp32", "precision": "fp32", "traffic": 100}]
    cfg = {"server": {"listen": "127.0.0.1:0", "max_inputs": 32},
           "models": [{"name": "m3", "path": m3, "variants": one},
                      {"name": "minilm", "path": MODEL, "variants": one}]}
    s = Server(cfg, tmp)
    yield s
    assert s.stop() == 0, "".join(s.log)


def same_lexical(got, want):
    """got {id: w} against the reference's: the same ids but those within TOL
    of 0 in either (float rounding may fall either side), the same weights."""
    for k in set(got) | set(want):
        assert abs(got.get(k, 0.0) - want.get(k, 0.0)) < TOL, (k, got, want)
        assert k in got or want[k] < TOL, (k, got, want)
        assert k in want or got[k] < TOL, (k, got, want)


def same_vectors(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert max(abs(a - b) for a, b in zip(g, w)) < TOL


def test_embed_sparse_answers_the_lexical_weights(srv, folder):
    ref = folder[2]
    resp, out = srv.request("POST", "/embed_sparse", {"inputs": ref["texts"]})
    assert resp.status == 200, out
    assert len(out) == len(ref["texts"])
    for got, want in zip(out, ref["sparse"]):
        idx = [e["index"] for e in got]
        assert idx == sorted(idx) and len(set(idx)) == len(idx)
        assert all(set(e) == {"index", "value"} and e["value"] > 0 for e in got)
        same_lexical({str(e["index"]): e["value"] for e in got}, want)


def test_multivector_and_embed_all_answer_the_colbert_vectors(srv, folder):
    ref = folder[2]
    for route in ("/embed_multivector", "/embed_all"):
        resp, out = srv.request("POST", route, {"inputs": ref["texts"][:3]})
        assert resp.status == 200, (route, out)
        for got, want in zip(out, ref["colbert"]):
            same_vectors(got, want)
    resp, out = srv.request("POST", "/embed_multivector", {"inputs": ref["texts"][1]})
    assert resp.status == 200 and len(out) == 1, out
    same_vectors(out[0], ref["colbert"][1])


def test_openai_outputs_gives_all_three_from_one_request(srv, folder):
    ref = folder[2]
    body = {"model": "m3", "input": ref["texts"], "encoding_format": "float",
            "outputs": ["dense", "sparse", "colbert"]}
    resp, out = srv.request("POST", "/v1/embeddings", body)
    assert resp.status == 200, out
    resp, plain = srv.request("POST", "/v1/embeddings", {"model": "m3", "input": ref["texts"],
                                                         "encoding_format": "float"})
    assert resp.status == 200, plain
    for i, item in enumerate(out["data"]):
        assert item["index"] == i
        assert set(item) == {"object", "index", "embedding", "sparse_embedding",
                             "colbert_embedding"}
        assert item["embedding"] == plain["data"][i]["embedding"]  # the same bits
        same_vectors([item["embedding"]], [ref["vectors"][i]])
        same_lexical(item["sparse_embedding"], ref["sparse"][i])
        same_vectors(item["colbert_embedding"], ref["colbert"][i])
    assert out["usage"]["total_tokens"] == sum(len(i) for i in ref["ids"])
    resp, out = srv.request("POST", "/v1/embeddings", {"model": "m3", "input": ref["texts"][0],
                                                       "outputs": ["sparse"]})
    assert resp.status == 200, out
    assert set(out["data"][0]) == {"object", "index", "sparse_embedding"}


def test_info_lists_the_outputs(srv):
    resp, out = srv.request("GET", "/info")
    assert resp.status == 200 and out["outputs"] == ["dense", "sparse", "colbert"], out
    resp, out = srv.request("GET", "/info", headers={"X-Mantissa-Model": "minilm"})
    assert resp.status == 200 and out["outputs"] == ["dense"], out


def test_a_model_without_the_heads_is_refused(srv):
    hdr = {"X-Mantissa-Model": "minilm"}
    resp, out = srv.request("POST", "/embed_sparse", {"inputs": "a text"}, headers=hdr)
    assert resp.status == 424 and out["error_type"] == "Backend", out
    assert out["error"] == "Backend error: Model is not an embedding model with SPLADE pooling"
    resp, out = srv.request("POST", "/embed_multivector", {"inputs": "a text"}, headers=hdr)
    assert resp.status == 424 and "no ColBERT head" in out["error"], out
    resp, out = srv.request("POST", "/embed_all", {"inputs": "a text"}, headers=hdr)
    assert resp.status == 200 and len(out[0][0]) == 384, out  # hidden states, as TEI
    resp, out = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "a text",
                                                       "outputs": ["dense", "colbert"]})
    assert resp.status == 400 and "minilm has no colbert output" in out["error"]["message"], out
    resp, out = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "a text",
                                                       "outputs": ["dense"]})
    assert resp.status == 200 and len(out["data"][0]["embedding"]) == 384, out


@pytest.mark.parametrize("outputs,why", [
    ([], "non-empty list"), ("sparse", "non-empty list"), (["lexical"], "may hold only"),
    (["sparse", "sparse"], "names \"sparse\" twice")])
def test_bad_outputs_are_refused_naming_the_field(srv, outputs, why):
    resp, out = srv.request("POST", "/v1/embeddings", {"model": "m3", "input": "a text",
                                                       "outputs": outputs})
    assert resp.status == 400 and why in out["error"]["message"], out
    assert out["error"]["param"] == "outputs"
