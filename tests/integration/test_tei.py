"""The text-embeddings-inference (TEI) routes: POST /embed (and POST /),
/tokenize, GET /info, /health, against the real binary, with Hugging Face's
own client (huggingface_hub's InferenceClient) and with plain HTTP."""
import json
import math
import os

import pytest

from conftest import MODEL, ROOT, Server, default_config

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")


@pytest.fixture(scope="module")
def tei(tmp_path_factory):
    cfg = default_config()
    # a second model (the same weights, another name) for X-Mantissa-Model
    second = dict(cfg["models"][0], name="second", truncate=False,
                  batching={"max_batch_tokens": 512})
    cfg["models"].append(second)
    s = Server(cfg, tmp_path_factory.mktemp("tei"))
    yield s
    assert s.stop() == 0, "".join(s.log)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def openai_vector(srv, text, model="minilm"):
    resp, data = srv.request("POST", "/v1/embeddings", {"model": model, "input": text})
    assert resp.status == 200, data
    return data["data"][0]["embedding"]


def test_huggingface_hub_client_gets_the_same_vectors(tei):
    from huggingface_hub import InferenceClient
    client = InferenceClient(model="http://127.0.0.1:%d" % tei.port)
    text = "A man is playing a guitar."
    v = client.feature_extraction(text)
    assert v.shape == (1, 384)
    assert cosine(v[0].tolist(), openai_vector(tei, text)) > 0.9999999
    vs = client.feature_extraction(["first text", "second text"], truncate=True)
    assert vs.shape == (2, 384)


def test_embed_batch_dimensions_and_default_route(tei):
    resp, data = tei.request("POST", "/embed", {"inputs": ["a cat", "a dog"]})
    assert resp.status == 200 and len(data) == 2 and len(data[0]) == 384
    assert resp.getheader("X-Mantissa-Variant") == "fp32"
    resp, root = tei.request("POST", "/", {"inputs": "a cat"})
    assert resp.status == 200 and cosine(root[0], data[0]) > 0.9999999
    resp, short = tei.request("POST", "/embed", {"inputs": "a cat", "dimensions": 32})
    assert resp.status == 200 and len(short[0]) == 32
    assert abs(sum(x * x for x in short[0]) - 1) < 1e-5  # renormalised
    assert cosine(short[0], data[0][:32]) > 0.999999


def pooled_reference():
    """The pieces sentence and its mean-pooled last hidden state from PyTorch
    (tests/fixtures/reference/pieces.json): the vector before normalisation."""
    with open(os.path.join(ROOT, "tests", "fixtures", "reference", "pieces.json")) as f:
        p = json.load(f)
    rows = p["last_hidden"]
    return p["sentence"], [sum(r[c] for r in rows) / len(rows) for c in range(len(rows[0]))]


def test_normalize_false_gives_the_pooled_vectors(tei):
    text, want = pooled_reference()
    resp, raw = tei.request("POST", "/embed", {"inputs": [text, "a cat"], "normalize": False})
    assert resp.status == 200, raw
    scale = max(abs(x) for x in want)
    assert max(abs(a - b) for a, b in zip(raw[0], want)) / scale < 1e-4
    resp, unit = tei.request("POST", "/embed", {"inputs": [text, "a cat"]})
    for r, u in zip(raw, unit):
        norm = math.sqrt(sum(x * x for x in r))
        assert norm > 1.5 and abs(sum(x * x for x in u) - 1) < 1e-5
        assert max(abs(x / norm - y) for x, y in zip(r, u)) < 1e-6
    # truncated to dimensions: the first components as pooled, not renormalised
    resp, short = tei.request("POST", "/embed", {"inputs": text, "normalize": False,
                                                 "dimensions": 16})
    assert resp.status == 200 and max(abs(a - b) for a, b in zip(short[0], raw[0][:16])) < 1e-6


def test_normalize_true_and_false_in_one_batch_each_get_their_own(tei):
    import concurrent.futures
    texts = ["sentence number %d about cats and dogs" % i for i in range(24)]

    def one(i):
        norm = i % 2 == 0
        resp, v = tei.request("POST", "/embed", {"inputs": texts[i], "normalize": norm})
        assert resp.status == 200, v
        return i, v[0]
    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        got = dict(ex.map(one, range(len(texts))))
    resp, ref = tei.request("POST", "/embed", {"inputs": texts})
    for i, v in got.items():
        n2 = sum(x * x for x in v)
        if i % 2 == 0:
            assert abs(n2 - 1) < 1e-5, (i, n2)
        else:
            assert n2 > 2.0, (i, n2)
        assert cosine(v, ref[i]) > 0.999999


def test_huggingface_hub_client_normalize_false(tei):
    from huggingface_hub import InferenceClient
    client = InferenceClient(model="http://127.0.0.1:%d" % tei.port)
    text, want = pooled_reference()
    v = client.feature_extraction(text, normalize=False)
    assert v.shape == (1, 384)
    assert cosine(v[0].tolist(), want) > 0.99999
    assert abs(math.sqrt(sum(x * x for x in v[0].tolist())) -
               math.sqrt(sum(x * x for x in want))) < 1e-3


def test_truncation_is_the_models_by_default_and_per_request(tei):
    long_text = " ".join("word%d" % i for i in range(400))
    resp, _ = tei.request("POST", "/embed", {"inputs": long_text})  # minilm truncates
    assert resp.status == 200
    resp, data = tei.request("POST", "/embed", {"inputs": long_text, "truncate": False})
    assert resp.status == 422 and data["error_type"] == "Validation", data
    assert "max_seq_len" in data["error"]
    resp, _ = tei.request("POST", "/embed", {"inputs": long_text},
                          headers={"X-Mantissa-Model": "second"})  # truncate false
    assert resp.status == 422
    resp, right = tei.request("POST", "/embed", {"inputs": long_text, "truncate": True},
                              headers={"X-Mantissa-Model": "second"})
    assert resp.status == 200
    resp, left = tei.request("POST", "/embed", {"inputs": long_text, "truncate": True,
                                                "truncation_direction": "Left"})
    assert resp.status == 200
    # left truncation keeps the end of the text: the same vector as the tail alone
    tail = " ".join("word%d" % i for i in range(300, 400))
    resp, tail_v = tei.request("POST", "/embed", {"inputs": tail})
    assert cosine(left[0], right[0]) < 0.999
    assert cosine(left[0], tail_v[0]) > cosine(right[0], tail_v[0])


def test_tokenize_matches_the_tokenizer_fixtures(tei):
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "corpus.jsonl")) as f:
        texts = [json.loads(l) for _, l in zip(range(40), f)]
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "expected.jsonl")) as f:
        expected = [json.loads(l) for _, l in zip(range(40), f)]
    resp, data = tei.request("POST", "/tokenize", {"inputs": texts})
    assert resp.status == 200, data
    for text, toks, want in zip(texts, data, expected):
        assert [t["id"] for t in toks] == want["ids"]
        assert toks[0]["special"] and toks[-1]["special"]
        # start/stop: tokenizers' offsets in UTF-8 bytes (TEI's unit), null
        # for the template's [CLS] and [SEP]
        spans = [None if (a, b) == (0, 0) else [a, b] for a, b in want["offsets"]]
        got = [None if t["start"] is None else [t["start"], t["stop"]] for t in toks]
        assert got == spans, text


def byte_spans(text, offsets):
    """tokenizers' character offsets as UTF-8 byte offsets (TEI's unit)."""
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [[pos[a], pos[b]] for a, b in offsets]


def test_tokenize_offsets_match_tokenizers(tei):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    texts = ["Ærøskøbing's CAFÉ crème brûlée", "我爱北京天安门 — 東京 😀 e\u0301 ﬁne",
             "x = f(42) // 3.14;\n\tdef g():  return [1, 2]", "ＦＵＬＬ width and İstanbul",
             "a [SEP] in the text, and [MASK]"]
    resp, data = tei.request("POST", "/tokenize", {"inputs": texts})
    assert resp.status == 200, data
    for text, toks in zip(texts, data):
        enc = tok.encode(text)
        assert [t["id"] for t in toks] == enc.ids, text
        want = byte_spans(text, enc.offsets)
        assert len(toks) == len(want) > 2
        for k, (t, w) in enumerate(zip(toks, want)):
            if w == [0, 0]:  # the template's [CLS] and [SEP]: null, as TEI
                assert t["special"] and t["start"] is None and t["stop"] is None, (text, k, t)
                continue
            assert [t["start"], t["stop"]] == w, (text, k, t)
            raw = text.encode("utf-8")[w[0]:w[1]].decode("utf-8")
            assert raw == text[enc.offsets[k][0]:enc.offsets[k][1]]
    resp, data = tei.request("POST", "/tokenize", {"inputs": "Hello unbelievableness",
                                                   "add_special_tokens": False})
    assert [t["text"] for t in data[0]] == ["hello", "unbelievable", "##ness"]


def test_info_and_health(tei):
    resp, info = tei.request("GET", "/info")
    assert resp.status == 200
    assert info["model_id"] == "minilm" and info["model_dtype"] == "float32"
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_input_length"] == 256 and info["auto_truncate"] is True
    resp, info = tei.request("GET", "/info", headers={"X-Mantissa-Model": "second"})
    assert info["model_id"] == "second" and info["auto_truncate"] is False
    for path in ("/health", "/"):
        resp, _ = tei.request("GET", path, raw=True)
        assert resp.status == 200


# TEI's own answers (router/src/http/server.rs): an empty batch is 400
# error_type "Empty"; a batch over max_client_batch_size and every other
# refused field 422 "Validation"
@pytest.mark.parametrize("body,status,error_type,field", [
    ({"inputs": []}, 400, "Empty", "empty"),
    ({"inputs": ["x"] * 65}, 422, "Validation", "max_inputs"),
    ({"inputs": [[101, 102]]}, 422, "Validation", "token-id"),
    ({"inputs": "x", "normalize": "no"}, 422, "Validation", "normalize"),
    ({"inputs": "x", "prompt_name": "query"}, 422, "Validation", "prompts"),
    ({"inputs": "x", "dimensions": 1000}, 422, "Validation", "dimensions"),
    ({"inputs": "x", "truncation_direction": "up"}, 422, "Validation", "truncation_direction"),
    ({"inputs": "x", "colour": "blue"}, 422, "Validation", "colour"),
    ({"input": "x"}, 422, "Validation", "unknown field"),
])
def test_errors_have_tei_shape(tei, body, status, error_type, field):
    resp, data = tei.request("POST", "/embed", body)
    assert resp.status == status, data
    assert set(data) == {"error", "error_type"} and field in data["error"], data
    assert data["error_type"] == error_type, data


def failures(srv, reason, model="minilm"):
    _, text = srv.request("GET", "/metrics", raw=True)
    key = 'mantissa_request_failures_total{model="%s",variant="fp32",reason="%s"} ' % (model,
                                                                                        reason)
    return sum(int(l[len(key):]) for l in text.decode().splitlines() if l.startswith(key))


def test_validation_422s_count_as_invalid_and_a_limit_as_limit(tei):
    invalid0, limit0 = failures(tei, "invalid"), failures(tei, "limit")
    for body in ({"inputs": "x", "colour": "blue"}, {"inputs": "x", "normalize": "no"},
                 {"inputs": "x", "dimensions": 1000}):
        resp, _ = tei.request("POST", "/embed", body)
        assert resp.status == 422
    assert failures(tei, "invalid") - invalid0 == 3
    assert failures(tei, "limit") == limit0
    resp, _ = tei.request("POST", "/embed", {"inputs": ["x"] * 65})  # over server.max_inputs
    assert resp.status == 422
    assert failures(tei, "limit") - limit0 == 1 and failures(tei, "invalid") - invalid0 == 3


def test_unknown_model_header_is_404(tei):
    resp, data = tei.request("POST", "/embed", {"inputs": "x"},
                             headers={"X-Mantissa-Model": "nope"})
    assert resp.status == 404 and data["error_type"] == "Validation"


# ---- /similarity ---------------------------------------------------------------

SOURCE = "Machine learning is so easy."
OTHERS = ["Deep learning is so straightforward.",
          "This is so difficult, like rocket science.",
          "I can't believe how much I struggled with this."]


def embed_vectors(srv, texts):
    resp, data = srv.request("POST", "/embed", {"inputs": texts})
    assert resp.status == 200, data
    return data


def test_huggingface_hub_sentence_similarity_is_the_cosine_of_embed_vectors(tei):
    from huggingface_hub import InferenceClient
    client = InferenceClient(model="http://127.0.0.1:%d" % tei.port)
    # the client posts {"inputs": {...}, "parameters": {}} to the model's URL (POST /)
    got = client.sentence_similarity(SOURCE, other_sentences=OTHERS)
    vecs = embed_vectors(tei, [SOURCE] + OTHERS)
    want = [cosine(vecs[0], v) for v in vecs[1:]]
    assert len(got) == len(OTHERS)
    for g, w in zip(got, want):
        assert abs(g - w) <= 1e-5 * abs(w), (got, want)
    assert got[0] > got[1] and got[0] > got[2]  # the paraphrase is the closest
    resp, data = tei.request("POST", "/similarity",
                             {"inputs": {"source_sentence": SOURCE, "sentences": OTHERS},
                              "parameters": {"truncate": True, "truncation_direction": "Right",
                                             "prompt_name": None}})
    assert resp.status == 200 and resp.getheader("X-Mantissa-Variant") == "fp32", data
    assert data == got
    resp, data = tei.request("POST", "/similarity",
                             {"inputs": {"source_sentence": SOURCE, "sentences": [SOURCE]},
                              "parameters": None})
    assert resp.status == 200 and abs(data[0] - 1) < 1e-6, data


LONG = " ".join("word%d" % i for i in range(400))


# TEI's answers for its SimilarityRequest: an empty sentences list is 400
# Empty; a wrong shape or field, an empty text, a batch over the limit
# (counting the source) and an over-long text with truncate false are 422
@pytest.mark.parametrize("body,status,error_type,field", [
    ({"inputs": {"source_sentence": "a", "sentences": []}}, 400, "Empty", "inputs.sentences"),
    ({"inputs": ["a", "b"]}, 422, "Validation", '"inputs" must be an object'),
    ({"inputs": {"source_sentence": "a"}}, 422, "Validation", "inputs.sentences"),
    ({"inputs": {"source_sentence": 3, "sentences": ["b"]}}, 422, "Validation",
     "inputs.source_sentence"),
    ({"inputs": {"source_sentence": "a", "sentences": "b"}}, 422, "Validation",
     "inputs.sentences"),
    ({"inputs": {"source_sentence": "a", "sentences": ["b"], "extra": 1}}, 422, "Validation",
     '"inputs.extra"'),
    ({"inputs": {"source_sentence": "a", "sentences": ["b", ""]}}, 422, "Validation",
     "inputs.sentences[1] is an empty string"),
    ({"inputs": {"source_sentence": "", "sentences": ["b"]}}, 422, "Validation",
     "inputs.source_sentence is an empty string"),
    ({"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {"colour": 1}}, 422,
     "Validation", '"parameters.colour"'),
    ({"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {"truncate": "no"}},
     422, "Validation", '"parameters.truncate"'),
    ({"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": []}, 422,
     "Validation", '"parameters"'),
    ({"inputs": {"source_sentence": "a", "sentences": ["b"]}, "normalize": True}, 422,
     "Validation", '"normalize"'),
    ({"inputs": {"source_sentence": "a", "sentences": ["b"] * 64}}, 422, "Validation",
     "65 inputs"),
    ({"inputs": {"source_sentence": "a", "sentences": ["b", LONG]},
      "parameters": {"truncate": False}}, 422, "Validation", "inputs.sentences[1] is 1130 tokens"),
])
def test_similarity_errors_name_the_field(tei, body, status, error_type, field):
    for path in ("/similarity", "/"):
        if path == "/" and not isinstance(body.get("inputs"), dict):
            continue  # POST / takes anything else as an embed request
        resp, data = tei.request("POST", path, body)
        assert resp.status == status, (path, data)
        assert set(data) == {"error", "error_type"} and field in data["error"], (path, data)
        assert data["error_type"] == error_type, data


# ---- /decode -------------------------------------------------------------------

ROUND_TRIP = ["the quick brown fox jumps over the lazy dog.",
              "a man is playing a guitar.",
              "unbelievableness, is it a word?",
              "tokenization splits 1976 texts into wordpieces!"]


def token_ids(srv, texts):
    resp, data = srv.request("POST", "/tokenize", {"inputs": texts})
    assert resp.status == 200, data
    return [[t["id"] for t in toks] for toks in data]


def test_decode_gives_back_what_tokenize_took(tei):
    ids = token_ids(tei, ROUND_TRIP)
    resp, texts = tei.request("POST", "/decode", {"ids": ids})
    assert resp.status == 200 and texts == ROUND_TRIP, texts
    # one list of ids: still an array of one string; specials kept on request
    resp, one = tei.request("POST", "/decode", {"ids": ids[1], "skip_special_tokens": False})
    assert resp.status == 200 and one == ["[CLS] a man is playing a guitar. [SEP]"], one
    # "unbelievable" "##ness" "," glue together; a leading "##" piece stays as it is
    assert tei.request("POST", "/decode", {"ids": ids[2][1:4]})[1] == ["unbelievableness,"]
    assert tei.request("POST", "/decode", {"ids": ids[2][2:4]})[1] == ["##ness,"]
    # TEI clients: huggingface_hub has no decode call; the shape is TEI's
    # DecodeRequest / DecodeResponse
    resp, vec = tei.request("POST", "/decode", {"ids": [[101, 7592, 102]]},
                            headers={"X-Mantissa-Model": "second"})
    assert resp.status == 200 and vec == ["hello"]


@pytest.mark.parametrize("body,status,error_type,field", [
    ({"ids": []}, 400, "Empty", "ids is empty"),
    ({"ids": [[101], []]}, 400, "Empty", "ids[1] is empty"),
    ({"ids": [101, 30522]}, 422, "Validation", "ids[1] is not a token id"),
    ({"ids": [[101], [7592, -1]]}, 422, "Validation", "ids[1][1] is not a token id"),
    ({"ids": [101, 1.5]}, 422, "Validation", "ids[1] is not a token id"),
    ({"ids": [101, "hello"]}, 422, "Validation", "ids[1] is not a token id"),
    ({"ids": [[101], 102]}, 422, "Validation", "ids[1] must be an array"),
    ({"ids": [101, [102]]}, 422, "Validation", "ids[1] is not a token id"),
    ({"ids": "hello"}, 422, "Validation", '"ids" must be an array'),
    ({"inputs": [101]}, 422, "Validation", 'unknown field "inputs"'),
    ({"ids": [101], "skip_special_tokens": "yes"}, 422, "Validation", "skip_special_tokens"),
    ({"ids": [[101]] * 65}, 422, "Validation", "max_inputs"),
])
def test_decode_errors_name_the_field(tei, body, status, error_type, field):
    resp, data = tei.request("POST", "/decode", body)
    assert resp.status == status, data
    assert set(data) == {"error", "error_type"} and field in data["error"], data
    assert data["error_type"] == error_type, data


# ---- /rerank and /embed_sparse: no such head --------------------------------------

# TEI (router/src/http/server.rs, core/src/infer.rs) answers both for an
# embedding model with 424 and error_type Backend, after checking the body;
# an empty list is still 400 Empty and a wrong field 422 Validation
@pytest.mark.parametrize("path,body,status,error_type,message", [
    ("/rerank", {"query": "What is Deep Learning?", "texts": ["Deep Learning is ..."]}, 424,
     "Backend", "Backend error: model is not a re-ranker model"),
    ("/rerank", {"query": "q", "texts": ["a", "b"], "truncate": True, "raw_scores": False,
                 "return_text": True, "truncation_direction": "left"}, 424, "Backend",
     "Backend error: model is not a re-ranker model"),
    ("/embed_sparse", {"inputs": "a cat"}, 424, "Backend",
     "Backend error: Model is not an embedding model with SPLADE pooling"),
    ("/embed_sparse", {"inputs": ["a cat", "a dog"], "truncate": False, "prompt_name": None},
     424, "Backend", "Backend error: Model is not an embedding model with SPLADE pooling"),
    ("/rerank", {"query": "q", "texts": []}, 400, "Empty", "texts"),
    ("/rerank", {"query": "q", "texts": ["a"] * 65}, 422, "Validation", "max_inputs"),
    ("/rerank", {"texts": ["a"]}, 422, "Validation", '"query" must be a string'),
    ("/rerank", {"query": "q", "texts": "a"}, 422, "Validation", '"texts" must be an array'),
    ("/rerank", {"query": "q", "texts": ["a"], "raw_scores": 1}, 422, "Validation",
     "raw_scores"),
    ("/rerank", {"query": "q", "texts": ["a"], "top_n": 1}, 422, "Validation", '"top_n"'),
    ("/embed_sparse", {"inputs": []}, 400, "Empty", "inputs"),
    ("/embed_sparse", {"inputs": "a", "normalize": True}, 422, "Validation", '"normalize"'),
    ("/embed_sparse", {"inputs": [1, 2]}, 422, "Validation", "inputs[0]"),
])
def test_rerank_and_embed_sparse_answer_as_tei_for_an_embedding_model(tei, path, body, status,
                                                                      error_type, message):
    resp, data = tei.request("POST", path, body)
    assert resp.status == status, data
    assert set(data) == {"error", "error_type"} and data["error_type"] == error_type, data
    assert message in data["error"], data
    if status == 424:
        assert data["error"] == message and resp.getheader("X-Mantissa-Variant") == "fp32"
        resp, data = tei.request("POST", path, body, headers={"X-Mantissa-Model": "nope"})
        assert resp.status == 404, data


# ---- /embed_all ------------------------------------------------------------------

def rel_err(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)


def test_embed_all_token_vectors_pool_to_the_embed_vector(tei):
    text, _ = pooled_reference()
    texts = [text, "a cat", "The quick brown fox jumps over the lazy dog."]
    resp, rows = tei.request("POST", "/embed_all", {"inputs": texts})
    assert resp.status == 200 and resp.getheader("X-Mantissa-Variant") == "fp32", rows
    # one vector per token, the specials included
    assert [len(r) for r in rows] == [len(ids) for ids in token_ids(tei, texts)]
    assert all(len(v) == 384 for r in rows for v in r)
    # mean pooling over every token (the attention mask is all ones) gives
    # /embed's vector before normalisation
    resp, pooled = tei.request("POST", "/embed", {"inputs": texts, "normalize": False})
    for r, want in zip(rows, pooled):
        mean = [sum(v[c] for v in r) / len(r) for c in range(384)]
        assert rel_err(mean, want) < 1e-5, rel_err(mean, want)
    # and the tokens' vectors are PyTorch's last hidden states
    with open(os.path.join(ROOT, "tests", "fixtures", "reference", "pieces.json")) as f:
        last = json.load(f)["last_hidden"]
    flat = [x for v in rows[0] for x in v]
    assert rel_err(flat, [x for v in last for x in v]) < 2e-5
    # a single string is a batch of one; truncation as on /embed
    resp, one = tei.request("POST", "/embed_all", {"inputs": "a cat"})
    assert resp.status == 200 and len(one) == 1 and rel_err(one[0][1], rows[1][1]) < 1e-5
    resp, cut = tei.request("POST", "/embed_all", {"inputs": LONG, "truncate": True})
    assert resp.status == 200 and len(cut[0]) == 256
    assert resp.getheader("X-Mantissa-Truncated-Inputs") == "1"


def test_embed_all_and_embed_at_once_each_get_their_own(tei):
    import concurrent.futures
    texts = ["sentence number %d about cats and dogs" % i for i in range(16)]
    resp, want = tei.request("POST", "/embed", {"inputs": texts, "normalize": False})

    def one(i):
        path = "/embed_all" if i % 2 else "/embed"
        body = {"inputs": texts[i]} if i % 2 else {"inputs": texts[i], "normalize": False}
        resp, data = tei.request("POST", path, body)
        assert resp.status == 200, data
        return i, data[0]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        got = dict(ex.map(one, range(len(texts))))
    for i, v in got.items():
        vec = [sum(t[c] for t in v) / len(v) for c in range(384)] if i % 2 else v
        assert rel_err(vec, want[i]) < 1e-5, i


@pytest.mark.parametrize("body,status,error_type,field", [
    ({"inputs": []}, 400, "Empty", "inputs"),
    ({"inputs": ["a", ""]}, 422, "Validation", "inputs[1] is an empty string"),
    ({"inputs": ["x"] * 65}, 422, "Validation", "max_inputs"),
    ({"inputs": "x", "normalize": False}, 422, "Validation", '"normalize"'),
    ({"inputs": "x", "truncate": "no"}, 422, "Validation", '"truncate"'),
    ({"inputs": "x", "prompt_name": "query"}, 422, "Validation", "prompt"),
    ({"inputs": [[101, 102]]}, 422, "Validation", "token-id"),
    ({"inputs": LONG, "truncate": False}, 422, "Validation", "max_seq_len"),
])
def test_embed_all_errors_name_the_field(tei, body, status, error_type, field):
    resp, data = tei.request("POST", "/embed_all", body)
    assert resp.status == status, data
    assert set(data) == {"error", "error_type"} and field in data["error"], data
    assert data["error_type"] == error_type, data


def test_embed_all_tokens_are_capped_at_max_batch_tokens(tei):
    # a vector per token is ~4.6 KB of JSON: a request has at most the
    # model's batching.max_batch_tokens tokens (512 for "second")
    second = {"X-Mantissa-Model": "second"}
    limit0 = failures(tei, "limit", "second")
    resp, data = tei.request("POST", "/embed_all", {"inputs": [LONG] * 3, "truncate": True},
                             headers=second)
    assert resp.status == 422 and data["error_type"] == "Validation", data
    assert "768 tokens" in data["error"] and "max_batch_tokens (512)" in data["error"], data
    resp, data = tei.request("POST", "/embed_all", {"inputs": [LONG] * 2, "truncate": True},
                             headers=second)
    assert resp.status == 200 and [len(r) for r in data] == [256, 256]
    assert failures(tei, "limit", "second") == limit0 + 1  # counted as a limit
