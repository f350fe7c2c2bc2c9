#!/usr/bin/env python3
"""weight_drift.py: how much of int8's drift from FP32 comes from its
weights alone, and how finer weight scales would change it.

For each scale granularity (per output channel, as Mantissa's int8 does, and
blocks of B along K, as llama.cpp's Q8_0 does with B = 32) it writes a copy
of the model whose encoder GEMM weights are quantized to int8 with that
granularity and dequantized back to FP32 (the embedding tables and
everything else untouched), embeds the same texts with that copy in fp32
(so activations stay FP32: the weights' error alone), and prints the mean
and min cosine to the original model's fp32 vectors; the served int8
variant (weights and activations) is measured alongside.

usage: weight_drift.py [--texts N] [--blocks 128,64,32]   (needs build/release/mantissa)
"""
import argparse
import csv
import json
import os
import struct
import subprocess
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
STSB = os.path.join(ROOT, "..", "shared", "data", "stsb", "sts-test.csv")
BIN = os.path.join(ROOT, "build", "release", "mantissa")
GEMMS = ("attention.self.query.weight", "attention.self.key.weight",
         "attention.self.value.weight", "attention.output.dense.weight",
         "intermediate.dense.weight", "output.dense.weight")


def quantized_copy(dst, block):
    """dst: the model with int8-rounded GEMM weights (block 0: per channel)."""
    os.makedirs(dst)
    for f in os.listdir(MODEL):
        if f != "model.safetensors":
            os.symlink(os.path.join(MODEL, f), os.path.join(dst, f))
    raw = bytearray(open(os.path.join(MODEL, "model.safetensors"), "rb").read())
    n = struct.unpack("<Q", raw[:8])[0]
    hdr, base = json.loads(raw[8:8 + n]), 8 + n
    for name, t in hdr.items():
        if name == "__metadata__" or "encoder.layer" not in name or not name.endswith(GEMMS):
            continue
        a, b = t["data_offsets"]
        w = np.frombuffer(bytes(raw[base + a:base + b]), dtype=np.float32).reshape(t["shape"])
        g = w.reshape(w.shape[0], -1, block if block else w.shape[1])
        s = np.abs(g).max(axis=2, keepdims=True) / 127.0
        s[s == 0] = 1
        q = (np.clip(np.rint(g / s), -127, 127) * s).reshape(w.shape)
        raw[base + a:base + b] = q.astype(np.float32).tobytes()
    open(os.path.join(dst, "model.safetensors"), "wb").write(raw)


def embed(model_dir, precision, texts, tmp):
    cfg = os.path.join(tmp, "cfg-%s-%s.json" % (os.path.basename(model_dir), precision))
    with open(cfg, "w") as f:
        json.dump({"models": [{"name": "m", "path": model_dir,
                               "variants": [{"name": "v", "precision": precision}]}]}, f)
    r = subprocess.run([BIN, "embed", "--config", cfg, "--model", "m@v", "--jsonl"],
                       input="\n".join(json.dumps(t) for t in texts) + "\n",
                       capture_output=True, text=True, check=True)
    return np.array([json.loads(line) for line in r.stdout.splitlines()])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=600)
    ap.add_argument("--blocks", default="128,64,32")
    args = ap.parse_args()
    texts = []
    with open(STSB, newline="") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 7 and row[5] not in texts:
                texts.append(row[5])
            if len(texts) == args.texts:
                break
    with tempfile.TemporaryDirectory() as tmp:
        ref = embed(MODEL, "fp32", texts, tmp)
        rows = [("served int8 (weights per channel + activations per token)",
                 embed(MODEL, "int8", texts, tmp))]
        for block in [0] + [int(b) for b in args.blocks.split(",")]:
            d = os.path.join(tmp, "w8-%d" % block)
            quantized_copy(d, block)
            label = "int8 weights only, per channel" if not block else \
                "int8 weights only, blocks of %d along K" % block
            rows.append((label, embed(d, "fp32", texts, tmp)))
    print("%d STS-B sentences, cosine to the fp32 model\n" % len(texts))
    print("| weights | mean cosine | min cosine | drift (1 - mean) |")
    print("|---|---|---|---|")
    for label, v in rows:
        c = (v * ref).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(ref, axis=1)
        print("| %s | %.8f | %.8f | %.3e |" % (label, c.mean(), c.min(), 1 - c.mean()))


if __name__ == "__main__":
    main()
