"""config/mpnet.json serves all-mpnet-base-v2: /v1/embeddings answers
768-d vectors that match the sentence-transformers reference
(tests/fixtures/reference/mpnet_fp32.f32). The config is the committed file
with only the listen address changed to a free loopback port."""
import array
import json
import math
import os

import pytest

from conftest import ROOT, Server

MPNET = os.path.join(ROOT, "models", "all-mpnet-base-v2")
REF = os.path.join(ROOT, "tests", "fixtures", "reference")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MPNET, "model.safetensors")),
                                reason="MPNet not fetched (make model MODEL=all-mpnet-base-v2)")


def test_config_mpnet_serves_768d_vectors_matching_the_reference(tmp_path):
    with open(os.path.join(ROOT, "config", "mpnet.json")) as f:
        cfg = json.load(f)
    cfg["server"]["listen"] = "127.0.0.1:0"
    with open(os.path.join(REF, "sentences.jsonl")) as f:
        sents = [json.loads(line) for line in f][:8]
    ref = array.array("f")
    with open(os.path.join(REF, "mpnet_fp32.f32"), "rb") as f:
        ref.frombytes(f.read(8 * 768 * 4))
    srv = Server(cfg, tmp_path)
    try:
        resp, body = srv.request("POST", "/v1/embeddings", {"model": "mpnet", "input": sents})
        assert resp.status == 200, body
        assert len(body["data"]) == 8
        for i, d in enumerate(body["data"]):
            v = d["embedding"]
            assert len(v) == 768
            r = ref[i * 768:(i + 1) * 768]
            dot = sum(a * b for a, b in zip(v, r))
            cos = dot / math.sqrt(sum(a * a for a in v) * sum(b * b for b in r))
            assert cos >= 0.99999, (i, cos)
    finally:
        srv.stop()
