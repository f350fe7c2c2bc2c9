"""Late chunking, POST /embed_chunks, served for real on MiniLM (WordPiece)
and on an XLM-R folder (a Unigram tokenizer from
tools/make-unigram-tokenizer.py, tools/make-xlmr.py's weights):
- each chunk's vector is the normalised mean of the last hidden states
  (TEI's /embed_all of the whole text) of the tokens whose character spans
  (Hugging Face `tokenizers`' offsets on the model's tokenizer.json) overlap
  the chunk's, from one forward over the whole text; on MiniLM it differs
  from the chunk embedded alone (its neighbours are in it);
- spans out of range, overlapping, covering no token, or a text over max_seq_len
  without truncate are refused naming the field; with truncate the spans
  past the cut are refused."""
import math
import os

import pytest

from conftest import MODEL, Server, make_xlmr

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")
TEXT = ("Berlin is the capital of Germany. It has about 3.8 million inhabitants. "
        "The city is known for its museums, its techno clubs and the Brandenburg Gate. "
        "Café culture thrives there.")


def spans_of(text):
    """The sentences of text as [start, end] code point spans."""
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch == "." and (i + 1 == len(text) or text[i + 1] == " "):
            out.append([start, i + 1])
            start = i + 2
    return out


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chunks")
    make_xlmr(tmp)
    one = [{"name": "fp32", "precision": "fp32", "traffic": 100}]
    cfg = {"server": {"listen": "127.0.0.1:0"},
           "models": [{"name": "minilm", "path": MODEL, "variants": one},
                      {"name": "xemb", "path": str(tmp / "m" / "embed"), "variants": one}]}
    s = Server(cfg, tmp)
    s.xemb_tokenizer = str(tmp / "m" / "embed" / "tokenizer.json")
    yield s
    assert s.stop() == 0, "".join(s.log)


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def check_chunks(srv, model, tokenizer_json, text):
    """/embed_chunks of text's sentences on model against /embed_all's rows
    pooled by tokenizers' offsets; returns the spans and the answer."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    tok.no_padding()  # MiniLM's file pads to 128
    enc = tok.encode(text)
    spans = spans_of(text)
    resp, rows = srv.request("POST", "/embed_all", {"inputs": text},
                             headers={"X-Mantissa-Model": model})
    assert resp.status == 200 and len(rows[0]) == len(enc.ids), rows
    dim = len(rows[0][0])
    resp, out = srv.request("POST", "/embed_chunks", {"model": model, "input": text,
                                                      "chunks": spans})
    assert resp.status == 200, out
    assert out["usage"]["total_tokens"] == len(enc.ids) and out["model"] == model
    for i, (s, e) in enumerate(spans):
        toks = [t for t, (a, b) in enumerate(enc.offsets) if a < b and a < e and b > s]
        want = unit([sum(rows[0][t][k] for t in toks) / len(toks) for k in range(dim)])
        got = out["data"][i]
        assert got["index"] == i and got["tokens"] == len(toks), (i, got["tokens"], toks)
        assert max(abs(a - b) for a, b in zip(got["embedding"], want)) < 1e-5
    return spans, out


def test_each_chunk_pools_its_tokens_from_one_forward(srv):
    spans, out = check_chunks(srv, "minilm", os.path.join(MODEL, "tokenizer.json"), TEXT)
    for i, (s, e) in enumerate(spans):
        got = out["data"][i]
        resp, alone = srv.request("POST", "/v1/embeddings", {"model": "minilm",
                                                             "input": TEXT[s:e],
                                                             "encoding_format": "float"})
        cos = sum(a * b for a, b in zip(got["embedding"], alone["data"][0]["embedding"]))
        assert cos < 0.9999, (i, cos)  # its neighbours are in it


@pytest.mark.parametrize("body,status,param,words", [
    ({"chunks": [[0, 10]]}, 400, "input", "non-empty string"),
    ({"input": "a b c", "chunks": []}, 400, "chunks", "non-empty list"),
    ({"input": "a b c", "chunks": [[0, 6]]}, 400, "chunks", "end <= 5"),
    ({"input": "a b c", "chunks": [[2, 1]]}, 400, "chunks", "start < end"),
    ({"input": "a b c", "chunks": [[1, 2]]}, 400, "chunks", "holds no token"),
    ({"input": "a b c", "chunks": [[0, 3], [4, 5], [2, 4]]}, 400, "chunks",
     "chunks[2] overlaps chunks[0]"),
    ({"input": "a b c", "chunks": [[0, 1]], "normalize": True}, 400, "normalize", "unknown"),
    ({"input": "word " * 400, "chunks": [[0, 4]], "truncate": False}, 400, "input", "at most 256"),
    ({"input": "word " * 400, "chunks": [[1900, 1904]], "truncate": True}, 400, "chunks",
     "as cut to the model's max_seq_len"),
])
def test_bad_requests_are_refused_naming_the_field(srv, body, status, param, words):
    resp, out = srv.request("POST", "/embed_chunks", dict({"model": "minilm"}, **body))
    assert resp.status == status and out["error"]["param"] == param, out
    assert words in out["error"]["message"], out


def test_a_long_text_with_truncate_chunks_what_fits(srv):
    resp, out = srv.request("POST", "/embed_chunks", {"model": "minilm", "input": "word " * 400,
                                                      "chunks": [[0, 4], [5, 9]],
                                                      "truncate": True})
    assert resp.status == 200 and [d["tokens"] for d in out["data"]] == [1, 1], out


def test_a_unigram_model_chunks_by_its_offsets(srv):
    """XLM-R's Unigram: Metaspace's ▁, the charsmap's full-width and NFKC
    forms, whitespace runs and <mask> written in the text, all chunked by
    the spans tokenizers gives."""
    text = ("Berlin ist groß, die Straße ist lang. Привет мир,  как дела. "
            "Ｆｕｌｌ ｗｉｄｔｈ ① and  crème brûlée. Un <mask> au café 😀 ok.")
    check_chunks(srv, "xemb", srv.xemb_tokenizer, text)
