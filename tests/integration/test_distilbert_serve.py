"""The third architecture row (models/distilbert.c) served for real: the
folder tools/make-distilbert.py makes from all-MiniLM-L6-v2 (DistilBERT's
config keys and tensor names, token type 0 folded into the positions) is
served beside MiniLM itself, and /v1/embeddings answers the same vectors
for both. And a DistilBERT with random weights (its own tiny vocabulary)
serves unit vectors of its own dimension, different for different texts."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import MODEL, ROOT, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MODEL, "model.safetensors")),
                                reason="model not fetched (run make model)")

TOOL = os.path.join(ROOT, "tools", "make-distilbert.py")
REF = os.path.join(ROOT, "tests", "fixtures", "reference")


def make(*args):
    subprocess.run([sys.executable, TOOL, *args], check=True, timeout=300)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def served(name, path):
    return {"name": name, "path": path,
            "variants": [{"name": "fp32", "precision": "fp32", "traffic": 100}]}


def test_distilbert_from_minilm_serves_minilm_vectors(tmp_path):
    distil = str(tmp_path / "distil-minilm")
    rand = str(tmp_path / "distil-random")
    make("from-minilm", MODEL, distil)
    make("random", rand, "--seed", "7")
    cfg = {"server": {"listen": "127.0.0.1:0", "max_inputs": 64},
           "models": [served("minilm", MODEL), served("distil", distil), served("tiny", rand)]}
    with open(os.path.join(REF, "sentences.jsonl")) as f:
        sents = [json.loads(line) for line in f][:32]
    srv = Server(cfg, tmp_path)
    try:
        vecs = {}
        for name in ("minilm", "distil"):
            resp, body = srv.request("POST", "/v1/embeddings", {"model": name, "input": sents})
            assert resp.status == 200, body
            vecs[name] = [d["embedding"] for d in body["data"]]
        assert len(vecs["distil"]) == len(sents)
        for i, (a, b) in enumerate(zip(vecs["minilm"], vecs["distil"])):
            assert len(b) == 384
            assert cosine(a, b) >= 0.99999, (i, sents[i], cosine(a, b))
        resp, body = srv.request("POST", "/v1/embeddings",
                                 {"model": "tiny", "input": ["the man is playing a guitar", "a dog"]})
        assert resp.status == 200, body
        for d in body["data"]:
            v = d["embedding"]
            assert len(v) == 48 and abs(sum(x * x for x in v) - 1) < 1e-4
        assert cosine(body["data"][0]["embedding"], body["data"][1]["embedding"]) < 0.9999
    finally:
        assert srv.stop() == 0, "".join(srv.log)
