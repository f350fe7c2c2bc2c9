#!/usr/bin/env python3
# make-cross-encoder.py: a cross-encoder reranker folder for the tests of
# sequence classifiers (models/enc_head.c, the /rerank, /predict and
# /v1/rerank routes), made here since no cross-encoder can be downloaded:
# all-MiniLM-L6-v2's real encoder, tokenizer and token types (its
# type_vocab_size is 2) with a classifier head drawn from a seed, laid out
# as transformers' BertForSequenceClassification saves it ("bert." before
# the encoder's tensors, "classifier.*"), config.json naming that
# architecture and its labels. Nothing is committed.
#
#   make-cross-encoder.py OUT [--src models/all-MiniLM-L6-v2] [--seed N]
#                         [--labels K] [--transformers]
#
# OUT/reference.json holds:
#   pairs: (query, document) texts, some long enough to be cut;
#   tokens: for each max length in MAX_LENS, each pair's ids and token
#     types as Hugging Face `tokenizers` encodes the pair with truncation
#     (longest first) at that length;
#   logits: each pair's raw scores (uncut, at most 512 tokens) from a
#     forward written here in numpy (float64) from BERT's definition
#     (transformers' modeling_bert: embeddings with token types, post-norm
#     layers, erf GELU, the pooler's tanh, the classifier), independent of
#     the C code.
# --transformers (with torch and transformers, e.g. .venv-ref) also scores
# the pairs with transformers' own BertForSequenceClassification on the
# folder and prints the largest difference from the numpy logits.
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_ref  # noqa: E402
from st_io import read_safetensors, write_safetensors  # noqa: E402

MAX_LENS = [12, 20, 33, 512]
QUERIES = ["how do cats sleep", "What is the capital of France?", "python list sort",
           "Wie spät ist es?"]
DOCS = [
    "Cats sleep for twelve to sixteen hours a day, mostly in short naps.",
    "Paris is the capital and most populous city of France.",
    "The sorted() built-in returns a new list; list.sort() sorts in place.",
    "Dogs are loyal companions.",
    "Es ist drei Uhr nachmittags.",
    " ".join(["A very long passage about the history of the Eiffel Tower, its engineers and "
              "the 1889 World's Fair in Paris."] * 40),
]
COPIED = ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


def forward(w, cfg, ids, types):
    """BertForSequenceClassification's logits for one sequence, float64."""
    x = bert_ref.hidden_states(w, cfg, ids, types, "bert.")
    return bert_ref.head(w, x[0], "bert.pooler.dense", "classifier")


def make(out, src, seed, labels):
    rng = np.random.default_rng(seed)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    w = {("bert." + n): a for n, a in read_safetensors(os.path.join(src, "model.safetensors")).items()
         if n != "embeddings.position_ids"}
    h = cfg["hidden_size"]
    # a head whose scores spread over a few units, as a trained one's do
    w["classifier.weight"] = (rng.standard_normal((labels, h)) * 0.5).astype(np.float32)
    w["classifier.bias"] = (rng.standard_normal(labels) * 0.1).astype(np.float32)
    cfg["architectures"] = ["BertForSequenceClassification"]
    cfg["id2label"] = {str(i): "LABEL_%d" % i if labels == 1 else ["neg", "neu", "pos", "x"][i % 4]
                       + ("" if i < 4 else str(i)) for i in range(labels)}
    cfg["label2id"] = {v: int(k) for k, v in cfg["id2label"].items()}
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), w)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in COPIED:
        shutil.copy(os.path.join(src, name), os.path.join(out, name))
    return cfg, w


def reference(out, cfg, w):
    from tokenizers import Tokenizer

    pairs = [(q, d) for q in QUERIES for d in DOCS]
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    tokens = {}
    for n in MAX_LENS:
        tok.enable_truncation(max_length=n)
        tok.no_padding()
        tokens[str(n)] = [{"ids": e.ids, "types": e.type_ids}
                          for e in (tok.encode(q, d) for q, d in pairs)]
    full = tokens["512"]
    logits = [forward(w, cfg, np.array(t["ids"]), np.array(t["types"])).tolist() for t in full]
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"pairs": pairs, "max_lens": MAX_LENS, "tokens": tokens, "logits": logits}, f)
    return pairs, full, logits


def check_transformers(out, full, logits):
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(out, dtype=torch.float64)
    model.eval()
    worst = 0.0
    with torch.no_grad():
        for t, want in zip(full, logits):
            got = model(input_ids=torch.tensor([t["ids"]]),
                        token_type_ids=torch.tensor([t["types"]])).logits[0].tolist()
            worst = max(worst, max(abs(a - b) for a, b in zip(got, want)))
    print("transformers BertForSequenceClassification (float64) against the numpy forward: "
          "%d pairs, largest |logit difference| %.3g" % (len(full), worst))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--src", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--labels", type=int, default=1)
    ap.add_argument("--transformers", action="store_true")
    a = ap.parse_args()
    cfg, w = make(a.out, a.src, a.seed, a.labels)
    _, full, logits = reference(a.out, cfg, w)
    if a.transformers and check_transformers(a.out, full, logits) > 1e-9:
        sys.exit("transformers disagrees with the numpy reference")


if __name__ == "__main__":
    main()
