#!/usr/bin/env python3
# make-distilbert.py: DistilBERT model folders for the tests of the
# "distilbert" architecture row (models/distilbert.c), made here since no
# real DistilBERT can be downloaded: safetensors are read and written by
# hand (numpy only, tools/st_io.py), nothing is committed.
#
#   make-distilbert.py from-minilm SRC OUT [--bare]
#       all-MiniLM-L6-v2 (BERT) in DistilBERT's layout: tensors renamed
#       (under "distilbert." unless --bare), token_type_embeddings[0] folded
#       into the position embeddings (DistilBERT has no token types), the
#       pooler dropped, config.json with DistilBertConfig's keys, the
#       tokenizer and sentence-transformers files copied. Its vectors must
#       equal MiniLM's.
#   make-distilbert.py random OUT [--seed N]
#       a small DistilBERT with random weights from a fixed seed (bare
#       tensor names, its own tiny vocabulary), and OUT/reference.json: token
#       id sequences and the mean-pooled, normalised vectors of a forward
#       written here in numpy (float64) from DistilBERT's definition
#       (transformers' modeling_distilbert), independent of the C code.
import argparse
import json
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import read_safetensors, write_safetensors  # noqa: E402


def distil_config(vocab, dim, layers, heads, hidden, max_pos):
    return {
        "architectures": ["DistilBertModel"], "model_type": "distilbert",
        "vocab_size": vocab, "dim": dim, "n_layers": layers, "n_heads": heads,
        "hidden_dim": hidden, "activation": "gelu", "max_position_embeddings": max_pos,
        "dropout": 0.1, "attention_dropout": 0.1, "initializer_range": 0.02,
        "pad_token_id": 0, "qa_dropout": 0.1, "seq_classif_dropout": 0.2,
        "sinusoidal_pos_embds": False, "tie_weights_": True,
    }


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


# ---- from-minilm -----------------------------------------------------------------

# BERT's names under encoder.layer.N -> DistilBERT's under transformer.layer.N
LAYER_RENAME = {
    "attention.self.query": "attention.q_lin", "attention.self.key": "attention.k_lin",
    "attention.self.value": "attention.v_lin", "attention.output.dense": "attention.out_lin",
    "attention.output.LayerNorm": "sa_layer_norm", "intermediate.dense": "ffn.lin1",
    "output.dense": "ffn.lin2", "output.LayerNorm": "output_layer_norm",
}
COPIED = ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
          "1_Pooling/config.json"]


def from_minilm(src, out, bare):
    with open(os.path.join(src, "config.json")) as f:
        bc = json.load(f)
    if bc.get("model_type") != "bert":
        sys.exit(f"{src}/config.json: model_type is not \"bert\"")
    w = read_safetensors(os.path.join(src, "model.safetensors"))
    w = {k[5:] if k.startswith("bert.") else k: v for k, v in w.items()}
    pre = "" if bare else "distilbert."
    t = {}
    t[pre + "embeddings.word_embeddings.weight"] = w["embeddings.word_embeddings.weight"]
    # DistilBERT adds no token type: BERT's type 0 row goes into every position
    t[pre + "embeddings.position_embeddings.weight"] = (
        w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0])
    for p in ("weight", "bias"):
        t[pre + "embeddings.LayerNorm." + p] = w["embeddings.LayerNorm." + p]
    for layer in range(bc["num_hidden_layers"]):
        for old, new in LAYER_RENAME.items():
            for p in ("weight", "bias"):
                t[f"{pre}transformer.layer.{layer}.{new}.{p}"] = w[f"encoder.layer.{layer}.{old}.{p}"]
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    write_json(os.path.join(out, "config.json"),
               distil_config(bc["vocab_size"], bc["hidden_size"], bc["num_hidden_layers"],
                             bc["num_attention_heads"], bc["intermediate_size"],
                             bc["max_position_embeddings"]))
    for name in COPIED:
        if os.path.exists(os.path.join(src, name)):
            os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))


# ---- random ----------------------------------------------------------------------

DIM, LAYERS, HEADS, HIDDEN, MAX_POS = 48, 2, 4, 96, 40


def tiny_vocab():
    words = ["the", "a", "man", "is", "playing", "guitar", "dog", "runs", "in", "park"]
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'-")
    return (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + chars +
            ["##" + c for c in chars])


def random_weights(rng, vocab):
    def mat(n, k):
        return rng.normal(0, 1 / math.sqrt(k), (n, k))

    def vec(n, s=0.1):
        return rng.normal(0, s, n)

    t = {"embeddings.word_embeddings.weight": rng.normal(0, 1, (vocab, DIM)),
         "embeddings.position_embeddings.weight": rng.normal(0, 1, (MAX_POS, DIM)),
         "embeddings.LayerNorm.weight": 1 + vec(DIM), "embeddings.LayerNorm.bias": vec(DIM)}
    for layer in range(LAYERS):
        p = f"transformer.layer.{layer}."
        for name, n, k in (("attention.q_lin", DIM, DIM), ("attention.k_lin", DIM, DIM),
                           ("attention.v_lin", DIM, DIM), ("attention.out_lin", DIM, DIM),
                           ("ffn.lin1", HIDDEN, DIM), ("ffn.lin2", DIM, HIDDEN)):
            t[p + name + ".weight"] = mat(n, k)
            t[p + name + ".bias"] = vec(n)
        for name in ("sa_layer_norm", "output_layer_norm"):
            t[p + name + ".weight"] = 1 + vec(DIM)
            t[p + name + ".bias"] = vec(DIM)
    return {k: v.astype(np.float32) for k, v in t.items()}


def layer_norm(x, g, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def reference_forward(t, ids):
    """DistilBertModel on one sequence (float64), then sentence-transformers'
    mean pooling and Normalize."""
    w = {k: v.astype(np.float64) for k, v in t.items()}
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    dh = DIM // HEADS
    for layer in range(LAYERS):
        p = f"transformer.layer.{layer}."

        def lin(name, v):
            return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        def heads(v):  # (n, dim) -> (heads, n, dh)
            return v.reshape(n, HEADS, dh).transpose(1, 0, 2)

        q = heads(lin("attention.q_lin", x)) / math.sqrt(dh)
        k, v = heads(lin("attention.k_lin", x)), heads(lin("attention.v_lin", x))
        s = q @ k.transpose(0, 2, 1)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = (s / s.sum(-1, keepdims=True)) @ v
        sa = lin("attention.out_lin", ctx.transpose(1, 0, 2).reshape(n, DIM))
        x = layer_norm(sa + x, w[p + "sa_layer_norm.weight"], w[p + "sa_layer_norm.bias"])
        ff = lin("ffn.lin2", gelu(lin("ffn.lin1", x)))
        x = layer_norm(ff + x, w[p + "output_layer_norm.weight"], w[p + "output_layer_norm.bias"])
    pooled = x.mean(0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def make_random(out, seed):
    rng = np.random.default_rng(seed)
    vocab = tiny_vocab()
    t = random_weights(rng, len(vocab))
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    write_json(os.path.join(out, "config.json"),
               distil_config(len(vocab), DIM, LAYERS, HEADS, HIDDEN, MAX_POS))
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    write_json(os.path.join(out, "sentence_bert_config.json"), {"max_seq_length": MAX_POS})
    write_json(os.path.join(out, "1_Pooling", "config.json"),
               {"word_embedding_dimension": DIM, "pooling_mode_mean_tokens": True,
                "pooling_mode_cls_token": False})
    write_json(os.path.join(out, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    # [CLS] ... [SEP] of lengths 2 .. MAX_POS, the middle ids drawn at random
    seqs = []
    for n in (2, 3, 7, 16, 25, MAX_POS):
        seqs.append([2] + [int(i) for i in rng.integers(5, len(vocab), n - 2)] + [3])
    ref = {"seed": seed, "dim": DIM, "ids": seqs,
           "vectors": [reference_forward(t, s).tolist() for s in seqs]}
    write_json(os.path.join(out, "reference.json"), ref)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("from-minilm")
    a.add_argument("src")
    a.add_argument("out")
    a.add_argument("--bare", action="store_true", help="tensor names without 'distilbert.'")
    r = sub.add_parser("random")
    r.add_argument("out")
    r.add_argument("--seed", type=int, default=20251127)
    args = ap.parse_args()
    if args.cmd == "from-minilm":
        from_minilm(args.src, args.out, args.bare)
    else:
        make_random(args.out, args.seed)


if __name__ == "__main__":
    main()
