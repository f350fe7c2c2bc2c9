"""Cross-encoder rerankers and sequence classifiers, served for real: a
folder tools/make-cross-encoder.py makes at test time (all-MiniLM-L6-v2's
real encoder, tokenizer and token types under BertForSequenceClassification's
names, a classifier head from a seed) beside the plain MiniLM embedder.
- TEI's /rerank answers each text's index and sigmoid score, highest first,
  equal to the tool's float64 reference; raw_scores gives the logits,
  return_text the texts;
- the Cohere/Jina /v1/rerank (and /v2/rerank, Cohere's v2 client's path)
  answers relevance_score, top_n results, and Cohere's SDK reads it;
  documents given as strings or {"text"} objects and returned on asking;
- TEI's /predict scores a text, a pair, or a list of either, every label
  named and sorted (softmax over three labels);
- a route on the wrong kind of model is refused naming the kind: 424 on
  TEI's routes (TEI's words), 400 on /v1/rerank and the embedding routes;
- bad requests are refused naming the field."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import MODEL, ROOT, Server, make_xlmr

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def variant(name, path):
    return {"name": name, "path": path,
            "variants": [{"name": "fp32", "precision": "fp32", "traffic": 100}]}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rerank")
    one, three = str(tmp / "one"), str(tmp / "three")
    tool = os.path.join(ROOT, "tools", "make-cross-encoder.py")
    for out, extra in ((one, []), (three, ["--labels", "3", "--seed", "3"])):
        subprocess.run([sys.executable, tool, out, "--src", MODEL] + extra, check=True, cwd=ROOT)
    with open(os.path.join(one, "reference.json")) as f:
        ref = json.load(f)
    return tmp, one, three, ref


@pytest.fixture(scope="module")
def srv(folders):
    tmp, one, three, _ = folders
    cfg = {"server": {"listen": "127.0.0.1:0", "max_inputs": 32, "grpc_listen": "127.0.0.1:0"},
           "models": [variant("rr", one), variant("minilm", MODEL), variant("rr3", three)]}
    s = Server(cfg, tmp)
    s.grpc = next(("127.0.0.1:%d" % e["grpc_port"] for e in s.events("serving on")
                   if "grpc_port" in e), None)
    yield s
    assert s.stop() == 0, "".join(s.log)


def query_docs(ref, q):
    """The reference pairs of query q: the documents and their logits."""
    docs, logits = [], []
    for (query, doc), lg in zip(ref["pairs"], ref["logits"]):
        if query == q:
            docs.append(doc)
            logits.append(lg[0])
    return docs, logits


def test_tei_rerank_ranks_by_the_reference_scores(srv, folders):
    ref = folders[3]
    q = ref["pairs"][0][0]
    docs, logits = query_docs(ref, q)
    resp, body = srv.request("POST", "/rerank", {"query": q, "texts": docs})
    assert resp.status == 200, body
    assert [r["index"] for r in body] == sorted(range(len(docs)), key=lambda i: -logits[i])
    for r in body:
        assert set(r) == {"index", "score"}
        assert abs(r["score"] - sigmoid(logits[r["index"]])) < 1e-5, (r, logits)
    resp, raw = srv.request("POST", "/rerank", {"query": q, "texts": docs, "raw_scores": True,
                                                "return_text": True})
    assert resp.status == 200, raw
    for r in raw:
        assert abs(r["score"] - logits[r["index"]]) < 1e-4 and r["text"] == docs[r["index"]]


def test_v1_rerank_answers_as_cohere_and_jina(srv, folders):
    ref = folders[3]
    q = ref["pairs"][6][0]
    docs, logits = query_docs(ref, q)
    order = sorted(range(len(docs)), key=lambda i: -logits[i])
    body = {"model": "rr", "query": q, "top_n": 2, "return_documents": True,
            "documents": [docs[0]] + [{"text": d} for d in docs[1:]]}
    resp, out = srv.request("POST", "/v1/rerank", body)
    assert resp.status == 200, out
    assert out["model"] == "rr" and out["id"] and out["usage"]["total_tokens"] > len(docs)
    assert [r["index"] for r in out["results"]] == order[:2]
    for r in out["results"]:
        assert abs(r["relevance_score"] - sigmoid(logits[r["index"]])) < 1e-5
        assert r["document"] == {"text": docs[r["index"]]}
    resp, out = srv.request("POST", "/v1/rerank", {"model": "rr", "query": q, "documents": docs})
    assert resp.status == 200 and len(out["results"]) == len(docs), out
    assert all("document" not in r for r in out["results"])


def test_the_cohere_sdk_reranks_against_the_server(srv, folders):
    """Cohere's own Python SDK (tools/requirements.txt), its v1 and v2
    clients pointed at the server: POST /v1/rerank and /v2/rerank."""
    import cohere
    ref = folders[3]
    q = ref["pairs"][6][0]
    docs, logits = query_docs(ref, q)
    order = sorted(range(len(docs)), key=lambda i: -logits[i])
    url = "http://127.0.0.1:%d" % srv.port
    for co in (cohere.Client(api_key="unused", base_url=url),
               cohere.ClientV2(api_key="unused", base_url=url)):
        out = co.rerank(model="rr", query=q, documents=docs, top_n=2)
        assert [r.index for r in out.results] == order[:2], out
        for r in out.results:
            assert abs(r.relevance_score - sigmoid(logits[r.index])) < 1e-5


def test_predict_scores_texts_pairs_and_lists(srv, folders):
    ref = folders[3]
    (q, d), lg = ref["pairs"][1], ref["logits"][1][0]
    resp, out = srv.request("POST", "/predict", {"inputs": [q, d]})
    assert resp.status == 200, out
    assert len(out) == 1 and out[0]["label"] == "LABEL_0"
    assert abs(out[0]["score"] - sigmoid(lg)) < 1e-5
    resp, out = srv.request("POST", "/predict", {"inputs": [[q, d], [q, d]], "raw_scores": True})
    assert resp.status == 200 and len(out) == 2, out
    assert all(abs(o[0]["score"] - lg) < 1e-4 for o in out)
    resp, out = srv.request("POST", "/predict", {"inputs": "a single text"})
    assert resp.status == 200 and len(out) == 1 and 0 < out[0]["score"] < 1, out
    hdr = {"X-Mantissa-Model": "rr3"}
    # two strings are one pair (TEI's reading); three are three texts
    resp, out = srv.request("POST", "/predict", {"inputs": ["one", "two", "three"]}, headers=hdr)
    assert resp.status == 200 and len(out) == 3, out
    for row in out:
        assert sorted(r["label"] for r in row) == ["neg", "neu", "pos"]
        assert abs(sum(r["score"] for r in row) - 1) < 1e-5
        assert [r["score"] for r in row] == sorted((r["score"] for r in row), reverse=True)


@pytest.mark.parametrize("method,path,body,headers,status,words", [
    ("POST", "/rerank", {"query": "q", "texts": ["a"]}, {"X-Mantissa-Model": "minilm"}, 424,
     "Backend error: model is not a re-ranker model"),
    ("POST", "/rerank", {"query": "q", "texts": ["a"]}, {"X-Mantissa-Model": "rr3"}, 424,
     "Backend error: model is not a re-ranker model"),
    ("POST", "/predict", {"inputs": "a"}, {"X-Mantissa-Model": "minilm"}, 424,
     "Backend error: model is not a classifier model"),
    ("POST", "/v1/rerank", {"model": "minilm", "query": "q", "documents": ["a"]}, {}, 400,
     "model minilm is an embedding model, not a reranker"),
    ("POST", "/v1/embeddings", {"model": "rr", "input": "a"}, {}, 400,
     "model rr is a classifier with 1 label"),
    ("POST", "/embed", {"inputs": "a"}, {}, 424, "model rr is a classifier with 1 label"),
    ("POST", "/v1/rerank", {"model": "rr", "query": "q", "documents": []}, {}, 400, "documents"),
    ("POST", "/v1/rerank", {"model": "rr", "query": "q", "documents": [5]}, {}, 400,
     "documents[0] must be a string"),
    ("POST", "/v1/rerank", {"model": "rr", "query": "", "documents": ["a"]}, {}, 400,
     '"query" is empty'),
    ("POST", "/v1/rerank", {"model": "rr", "query": "q", "documents": ["a"], "top_n": 0}, {},
     400, '"top_n" must be a positive integer'),
    ("POST", "/v1/rerank", {"model": "rr", "query": "q", "documents": ["a"], "rank": 1}, {},
     400, 'unknown field "rank"'),
    ("POST", "/v1/rerank", {"model": "rr", "query": "q", "documents": [""]}, {}, 400,
     "documents[0]"),
    ("POST", "/v1/rerank", {"model": "nope", "query": "q", "documents": ["a"]}, {}, 404, "nope"),
    ("POST", "/predict", {"inputs": [["a", "b"], "c"]}, {}, 422, "inputs[1] must be a pair"),
    ("POST", "/predict", {"inputs": []}, {}, 422, '"inputs" must be a text'),
    ("POST", "/rerank", {"query": "q", "texts": ["word " * 600], "truncate": False}, {}, 422,
     "max_seq_len"),
])
def test_wrong_models_and_bad_requests_are_refused_by_name(srv, method, path, body, headers,
                                                           status, words):
    resp, out = srv.request(method, path, body, headers=headers)
    assert resp.status == status, out
    assert words in str(out), out


def test_long_documents_are_cut_longest_first_when_truncating(srv):
    long_doc = "word " * 600
    resp, out = srv.request("POST", "/rerank", {"query": "q", "texts": [long_doc, "short"]})
    assert resp.status == 200 and sorted(r["index"] for r in out) == [0, 1], out
    assert resp.getheader("X-Mantissa-Truncated-Inputs") == "1"


def test_the_index_lists_the_rerank_routes(srv):
    resp, body = srv.request("GET", "/")
    text = json.dumps(body)
    assert resp.status == 200 and "/v1/rerank" in text and "/predict" in text, body


def test_info_names_a_reranker_and_a_classifier_as_tei_does(srv):
    resp, body = srv.request("GET", "/info")
    assert resp.status == 200, body
    assert body["model_type"] == {"reranker": {"id2label": {"0": "LABEL_0"},
                                               "label2id": {"LABEL_0": 0}}}, body
    resp, body = srv.request("GET", "/info", headers={"X-Mantissa-Model": "rr3"})
    assert body["model_type"]["classifier"]["id2label"] == {"0": "neg", "1": "neu", "2": "pos"}
    resp, body = srv.request("GET", "/info", headers={"X-Mantissa-Model": "minilm"})
    assert body["model_type"] == {"embedding": {"pooling": "mean"}}, body


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    """An XLM-RoBERTa embedder and reranker (tools/make-xlmr.py, a Unigram
    tokenizer from tools/make-unigram-tokenizer.py), served together."""
    tmp = tmp_path_factory.mktemp("xlmr")
    ref = make_xlmr(tmp)
    cfg = {"server": {"listen": "127.0.0.1:0"},
           "models": [variant("xrr", str(tmp / "m" / "rerank")),
                      variant("xemb", str(tmp / "m" / "embed"))]}
    s = Server(cfg, tmp)
    yield s, ref
    assert s.stop() == 0, "".join(s.log)


def test_an_xlm_roberta_reranker_and_embedder_serve_many_scripts(xlmr):
    srv, ref = xlmr
    resp, out = srv.request("POST", "/v1/rerank", {"model": "xrr", "query": ref["query"],
                                                   "documents": ref["texts"]})
    assert resp.status == 200, out
    for r in out["results"]:
        want = sigmoid(ref["logits"][r["index"]])
        assert abs(r["relevance_score"] - want) < 1e-4, (r, want)
    resp, out = srv.request("POST", "/v1/embeddings", {"model": "xemb", "input": ref["texts"]})
    assert resp.status == 200, out
    for d in out["data"]:
        want = ref["vectors"][d["index"]]
        assert max(abs(a - b) for a, b in zip(d["embedding"], want)) < 1e-5


def test_kserve_infer_on_a_reranker_takes_query_and_text(srv, folders):
    ref = folders[3]
    q = ref["pairs"][0][0]
    docs, logits = query_docs(ref, q)
    body = {"id": "r1", "inputs": [{"name": "query", "datatype": "BYTES", "shape": [1], "data": [q]},
                                   {"name": "text", "datatype": "BYTES", "shape": [len(docs)],
                                    "data": docs}]}
    resp, out = srv.request("POST", "/v2/models/rr/infer", body)
    assert resp.status == 200, out
    assert out["id"] == "r1" and out["outputs"][0]["name"] == "score"
    assert out["outputs"][0]["shape"] == [len(docs)]
    for got, lg in zip(out["outputs"][0]["data"], logits):
        assert abs(got - sigmoid(lg)) < 1e-5
    body["parameters"] = {"raw_scores": True}
    resp, out = srv.request("POST", "/v2/models/rr/infer", body)
    assert all(abs(a - b) < 1e-4 for a, b in zip(out["outputs"][0]["data"], logits)), out
    resp, meta = srv.request("GET", "/v2/models/rr")
    assert [i["name"] for i in meta["inputs"]] == ["query", "text"], meta
    assert meta["outputs"][0]["name"] == "score"
    bad = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}
    resp, out = srv.request("POST", "/v2/models/rr/infer", bad)
    assert resp.status == 400 and "two inputs" in str(out), out
    resp, out = srv.request("POST", "/v2/models/rr3/infer", body)
    assert resp.status == 400 and "not a reranker" in str(out), out


def test_kserve_binary_tensors_on_a_reranker(srv, folders):
    """The binary tensor extension: query and documents as BYTES elements
    (u32 length + bytes) after the JSON header, the scores back as raw
    floats; binary_data_size that does not add up is refused."""
    import struct
    ref = folders[3]
    q = ref["pairs"][0][0]
    docs, logits = query_docs(ref, q)
    qb = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in [q])
    db = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in docs)
    head = json.dumps({"inputs": [
        {"name": "query", "datatype": "BYTES", "shape": [1],
         "parameters": {"binary_data_size": len(qb)}},
        {"name": "text", "datatype": "BYTES", "shape": [len(docs), 1],
         "parameters": {"binary_data_size": len(db)}}],
        "parameters": {"binary_data_output": True}}).encode()
    hdr = {"Inference-Header-Content-Length": str(len(head)),
           "Content-Type": "application/octet-stream"}
    resp, out = srv.request("POST", "/v2/models/rr/infer", head + qb + db, headers=hdr, raw=True)
    assert resp.status == 200, out
    n = int(resp.getheader("Inference-Header-Content-Length"))
    meta = json.loads(out[:n])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == 4 * len(docs)
    scores = struct.unpack("<%df" % len(docs), out[n:])
    assert all(abs(a - sigmoid(b)) < 1e-5 for a, b in zip(scores, logits)), (scores, logits)
    hdr["Inference-Header-Content-Length"] = str(len(head))
    resp, out = srv.request("POST", "/v2/models/rr/infer", head + qb + db + b"xx", headers=hdr)
    assert resp.status == 400 and "add up to" in str(out), out


def test_kserve_grpc_infer_on_a_reranker(srv, folders):
    """tritonclient over gRPC: the same two BYTES inputs, the same scores
    as over REST; a reranker's metadata names them."""
    tgrpc = pytest.importorskip("tritonclient.grpc")
    np = pytest.importorskip("numpy")
    from tritonclient.utils import InferenceServerException
    if not srv.grpc:
        pytest.skip("this build has no gRPC (GRPC=0)")
    ref = folders[3]
    q = ref["pairs"][0][0]
    docs, logits = query_docs(ref, q)
    c = tgrpc.InferenceServerClient(srv.grpc)
    query, text = tgrpc.InferInput("query", [1], "BYTES"), tgrpc.InferInput("text", [len(docs)],
                                                                            "BYTES")
    query.set_data_from_numpy(np.array([q.encode()], dtype=object))
    text.set_data_from_numpy(np.array([d.encode() for d in docs], dtype=object))
    got = c.infer("rr", [query, text], request_id="g1").as_numpy("score")
    assert got.shape == (len(docs),) and got.dtype == np.float32
    for g, lg in zip(got, logits):
        assert abs(float(g) - sigmoid(lg)) < 1e-5
    meta = c.get_model_metadata("rr", as_json=True)
    assert [i["name"] for i in meta["inputs"]] == ["query", "text"], meta
    assert meta["outputs"][0]["name"] == "score"
    with pytest.raises(InferenceServerException, match="not a reranker"):
        c.infer("rr3", [query, text])
