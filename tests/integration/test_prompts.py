"""Prompts and Matryoshka dimensions, served for real: a copy of
all-MiniLM-L6-v2 whose config_sentence_transformers.json has prompts
("query: ", "passage: "), as sentence-transformers models such as e5 and
Qwen3-Embedding ship them.
- prompt_name on the OpenAI route (an extension field) and on TEI's /embed
  gives the vector of the prompt's text put before the input (compared with
  the plain model on that concatenation);
- the config's per-model prompt_name is the default a request may override;
  the model's own default_prompt_name applies where the config names none;
- an unknown prompt name is 400 (OpenAI) / 422 (TEI) naming the model's
  prompts; a config naming one the model lacks is refused at start,
  naming the model and the field;
- OpenAI's dimensions is refused on a model whose config declares no
  matryoshka_min_dim, and on one that does gives the first dimensions,
  renormalised, within [matryoshka_min_dim, hidden]."""
import json
import math
import os
import subprocess

import pytest

from conftest import BIN, MODEL, ROOT, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

TEXTS = ["how do cats sleep", "The Eiffel Tower is in Paris."]


def prompted_copy(tmp_path, name, default=None):
    """MiniLM's folder (files linked) with prompts of its own."""
    d = tmp_path / name
    d.mkdir()
    for f in os.listdir(MODEL):
        if f != "config_sentence_transformers.json":
            os.symlink(os.path.join(MODEL, f), d / f)
    with open(d / "config_sentence_transformers.json", "w") as f:
        json.dump({"prompts": {"query": "query: ", "passage": "passage: "},
                   "default_prompt_name": default}, f)
    return str(d)


def model(name, path, **extra):
    m = {"name": name, "path": path,
         "variants": [{"name": "fp32", "precision": "fp32", "traffic": 100}]}
    m.update(extra)
    return m


def close(a, b):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < 1e-6


def embed(srv, name, texts, **fields):
    resp, body = srv.request("POST", "/v1/embeddings", dict({"model": name, "input": texts}, **fields))
    assert resp.status == 200, body
    return [d["embedding"] for d in body["data"]]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prompts")
    plain = prompted_copy(tmp, "plain")
    dflt = prompted_copy(tmp, "dflt", default="passage")
    cfg = {"server": {"listen": "127.0.0.1:0", "max_inputs": 64},
           "models": [model("minilm", MODEL), model("p", plain),
                      model("q", plain, prompt_name="query"), model("d", dflt),
                      model("mrl", MODEL, matryoshka_min_dim=64)]}
    s = Server(cfg, tmp)
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_prompt_name_puts_the_prompt_before_each_input(srv):
    want = embed(srv, "minilm", ["query: " + t for t in TEXTS])
    got = embed(srv, "p", TEXTS, prompt_name="query")
    assert all(close(a, b) for a, b in zip(want, got))
    plain = embed(srv, "p", TEXTS)  # no default anywhere: the texts as they are
    assert all(close(a, b) for a, b in zip(embed(srv, "minilm", TEXTS), plain))
    assert not close(plain[0], got[0])


def test_tei_embed_takes_prompt_name(tmp_path):
    path = prompted_copy(tmp_path, "tei")
    s = Server({"server": {"listen": "127.0.0.1:0"}, "models": [model("p", path)]}, tmp_path)
    try:
        resp, got = s.request("POST", "/embed", {"inputs": TEXTS, "prompt_name": "passage"})
        assert resp.status == 200, got
        resp, want = s.request("POST", "/embed", {"inputs": ["passage: " + t for t in TEXTS]})
        assert resp.status == 200, want
        assert all(close(a, b) for a, b in zip(want, got))
        resp, body = s.request("POST", "/embed", {"inputs": "x", "prompt_name": "nope"})
        assert resp.status == 422 and "\"query\"" in body["error"], body
        resp, body = s.request("POST", "/embed", {"inputs": "x", "prompt_name": 3})
        assert resp.status == 422 and "prompt_name" in body["error"], body
    finally:
        assert s.stop() == 0


def test_config_default_and_model_default_and_override(srv):
    query = embed(srv, "minilm", ["query: " + t for t in TEXTS])
    passage = embed(srv, "minilm", ["passage: " + t for t in TEXTS])
    assert all(close(a, b) for a, b in zip(query, embed(srv, "q", TEXTS)))
    assert all(close(a, b) for a, b in zip(passage, embed(srv, "q", TEXTS, prompt_name="passage")))
    assert all(close(a, b) for a, b in zip(passage, embed(srv, "d", TEXTS)))  # default_prompt_name
    assert all(close(a, b) for a, b in zip(query, embed(srv, "d", TEXTS, prompt_name="query")))


def test_unknown_prompt_names_the_prompts(srv):
    resp, body = srv.request("POST", "/v1/embeddings",
                             {"model": "p", "input": "x", "prompt_name": "nope"})
    assert resp.status == 400, body
    msg = body["error"]["message"]
    assert "\"nope\"" in msg and "\"query\"" in msg and "\"passage\"" in msg, msg
    resp, body = srv.request("POST", "/v1/embeddings",
                             {"model": "minilm", "input": "x", "prompt_name": "query"})
    assert resp.status == 400 and "it has none" in body["error"]["message"], body


def test_config_prompt_name_the_model_lacks_is_refused_at_start(tmp_path):
    cfg = {"server": {"listen": "127.0.0.1:0"},
           "models": [model("minilm", MODEL), model("bad", MODEL, prompt_name="query")]}
    path = tmp_path / "mantissa.json"
    path.write_text(json.dumps(cfg))
    p = subprocess.run([BIN, "serve", "--config", str(path)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode != 0, p.stderr
    assert "model bad, variant fp32: field 'prompt_name'" in p.stderr, p.stderr
    assert "is not one of the model's prompts" in p.stderr, p.stderr


def test_matryoshka_dimensions_only_where_declared(srv):
    resp, body = srv.request("POST", "/v1/embeddings", {"model": "minilm", "input": "x",
                                                         "dimensions": 128})
    assert resp.status == 400 and "matryoshka_min_dim" in body["error"]["message"], body
    full = embed(srv, "mrl", TEXTS)
    short = embed(srv, "mrl", TEXTS, dimensions=128)
    for f, s in zip(full, short):
        assert len(f) == 384 and len(s) == 128
        n = math.sqrt(sum(x * x for x in f[:128]))
        assert close([x / n for x in f[:128]], s)
        assert abs(sum(x * x for x in s) - 1) < 1e-5
    for bad in (63, 385, 100.5):
        resp, body = srv.request("POST", "/v1/embeddings", {"model": "mrl", "input": "x",
                                                             "dimensions": bad})
        assert resp.status == 400 and "64..384" in body["error"]["message"], (bad, body)
