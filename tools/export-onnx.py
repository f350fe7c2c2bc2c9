#!/usr/bin/env python3
# export-onnx.py: builds the ONNX graph of all-MiniLM-L6-v2 (BERT encoder +
# masked mean pooling + L2 normalisation) straight from model.safetensors with
# numpy and the `onnx` helper API, for the ONNX Runtime speed peer in
# bench/peer_ort.py. No torch: it must run where only
# tools/bench-requirements.txt is installed.
#
#   inputs   input_ids       [batch, seq] int64
#            attention_mask  [batch, seq] int64   (1 = token, 0 = padding)
#   output   sentence_embedding [batch, 384] float32, unit length
#
# token_type_ids are all zero, so the type-0 embedding row is a constant.
# The ops follow the shapes ONNX Runtime's optimiser knows how to fuse
# (LayerNormalization, Erf GELU, MatMul + Add with pre-transposed weights,
# Reshape/Transpose heads, Softmax with an additive (1 - mask) * -10000).
#
# After writing the model it checks it (unless --no-verify): it runs ONNX
# Runtime on tests/fixtures/reference/sentences.jsonl, tokenised with the
# `tokenizers` package from tokenizer.json (truncation 256, each batch padded
# to its own longest row) and compares with minilm_fp32.f32, which
# sentence-transformers made (tools/make-reference.py). It fails unless every
# sentence has cosine >= 0.99999.
#
#   python tools/export-onnx.py build/peer/minilm.onnx [--model DIR]
import argparse
import json
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17
MAX_SEQ = 256
MASK_NEG = -10000.0
COS_MIN = 0.99999

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64,
              "I32": np.int32}


def load_safetensors(path):
    """Reads a .safetensors file into {name: numpy array} (little-endian):
    8-byte header length, JSON header with dtype/shape/data_offsets, data."""
    with open(path, "rb") as f:
        blob = f.read()
    hlen = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']} not handled")
        start, end = info["data_offsets"]
        dt = np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(blob, dtype=dt, count=(end - start) // dt.itemsize,
                            offset=base + start)
        out[name] = arr.reshape(info["shape"]).astype(dt.newbyteorder("="))
    return out


class Graph:
    """Small builder: unique names, initializers, nodes."""

    def __init__(self):
        self.nodes = []
        self.inits = []
        self.n = 0

    def name(self, hint):
        self.n += 1
        return f"{hint}_{self.n}"

    def const(self, hint, arr):
        nm = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
        return nm

    def op(self, op_type, inputs, hint=None, out=None, **attrs):
        nm = self.name(hint or op_type)
        out = out or nm + "_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=nm,
                                           **attrs))
        return out


def build(weights, cfg):
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    hd = H // nh
    L = cfg["num_hidden_layers"]
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    if cfg.get("hidden_act", "gelu") != "gelu":
        raise SystemExit("only hidden_act gelu (erf) is handled")
    pre = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""

    def w(name):
        return weights[pre + name].astype(np.float32)

    g = Graph()
    f32 = lambda v: np.array(v, dtype=np.float32)  # noqa: E731

    def linear(x, prefix, hint):
        # x @ W^T + b, W stored [out, in] -> constant [in, out]
        wt = g.const(hint + "_wT", np.ascontiguousarray(w(prefix + ".weight").T))
        b = g.const(hint + "_b", w(prefix + ".bias"))
        y = g.op("MatMul", [x, wt], hint=f"{hint}_matmul")
        return g.op("Add", [y, b], hint=f"{hint}_bias")

    def layernorm(x, prefix, hint):
        s = g.const(hint + "_gamma", w(prefix + ".weight"))
        b = g.const(hint + "_beta", w(prefix + ".bias"))
        return g.op("LayerNormalization", [x, s, b], hint=hint, axis=-1,
                    epsilon=eps)

    # embeddings: word + position + type 0, then LayerNorm
    word = g.op("Gather", [g.const("word_emb", w("embeddings.word_embeddings.weight")),
                           "input_ids"], hint="word_gather", axis=0)
    seq_len = g.op("Shape", ["input_ids"], hint="seq_len", start=1, end=2)
    pos_tab = g.const("pos_emb", w("embeddings.position_embeddings.weight"))
    pos = g.op("Slice", [pos_tab, g.const("zero1", np.array([0], np.int64)),
                         seq_len, g.const("axis0", np.array([0], np.int64))],
               hint="pos_slice")
    x = g.op("Add", [word, pos], hint="add_pos")
    type0 = g.const("type0_emb", w("embeddings.token_type_embeddings.weight")[0])
    x = g.op("Add", [x, type0], hint="add_type0")
    x = layernorm(x, "embeddings.LayerNorm", "emb_ln")

    # additive attention mask [batch, 1, 1, seq]: 0 for tokens, -10000 for pads
    m = g.op("Unsqueeze", ["attention_mask",
                           g.const("ax1m", np.array([1], np.int64))],
             hint="mask_unsq1")
    m = g.op("Unsqueeze", [m, g.const("ax2m", np.array([2], np.int64))],
             hint="mask_unsq2")
    m = g.op("Cast", [m], hint="mask_cast", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const("one", f32(1.0)), m], hint="mask_inv")
    mask_add = g.op("Mul", [m, g.const("neg", f32(MASK_NEG))], hint="mask_neg")

    heads_shape = g.const("heads_shape", np.array([0, 0, nh, hd], np.int64))
    merge_shape = g.const("merge_shape", np.array([0, 0, H], np.int64))
    scale = g.const("sqrt_hd", f32(math.sqrt(hd)))
    sqrt2 = g.const("sqrt2", f32(math.sqrt(2.0)))
    half = g.const("half", f32(0.5))
    one = g.const("one_g", f32(1.0))

    for i in range(L):
        p = f"encoder.layer.{i}."
        t = f"l{i}"
        q = linear(x, p + "attention.self.query", t + "_q")
        k = linear(x, p + "attention.self.key", t + "_k")
        v = linear(x, p + "attention.self.value", t + "_v")
        q = g.op("Transpose", [g.op("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
        s = g.op("MatMul", [q, k], hint=t + "_qk")
        s = g.op("Div", [s, scale], hint=t + "_scale")
        s = g.op("Add", [s, mask_add], hint=t + "_mask")
        s = g.op("Softmax", [s], hint=t + "_softmax", axis=-1)
        ctx = g.op("MatMul", [s, v], hint=t + "_pv")
        ctx = g.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, merge_shape])
        a = linear(ctx, p + "attention.output.dense", t + "_o")
        a = g.op("Add", [a, x], hint=t + "_res1")
        x = layernorm(a, p + "attention.output.LayerNorm", t + "_ln1")
        h = linear(x, p + "intermediate.dense", t + "_ffn1")
        # GELU(h) = h * 0.5 * (1 + erf(h / sqrt(2)))
        e = g.op("Erf", [g.op("Div", [h, sqrt2])])
        e = g.op("Add", [e, one])
        h = g.op("Mul", [g.op("Mul", [h, e]), half], hint=t + "_gelu")
        h = linear(h, p + "output.dense", t + "_ffn2")
        h = g.op("Add", [h, x], hint=t + "_res2")
        x = layernorm(h, p + "output.LayerNorm", t + "_ln2")

    # masked mean over the sequence, then x / max(||x||, 1e-12)
    mf = g.op("Cast", [g.op("Unsqueeze", ["attention_mask",
                                          g.const("ax2", np.array([2], np.int64))])],
              hint="pool_mask", to=TensorProto.FLOAT)
    ax1 = g.const("ax1", np.array([1], np.int64))
    summed = g.op("ReduceSum", [g.op("Mul", [x, mf]), ax1], keepdims=0)
    count = g.op("ReduceSum", [mf, ax1], keepdims=0)
    count = g.op("Max", [count, g.const("cnt_eps", f32(1e-9))])
    mean = g.op("Div", [summed, count], hint="mean_pool")
    norm = g.op("ReduceL2", [mean], axes=[1], keepdims=1)
    norm = g.op("Max", [norm, g.const("norm_eps", f32(1e-12))])
    g.op("Div", [mean, norm], hint="l2norm", out="sentence_embedding")

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
    ]
    outputs = [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT,
                                             ["batch", H])]
    graph = helper.make_graph(g.nodes, "all-MiniLM-L6-v2", inputs, outputs,
                              initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="mantissa/tools/export-onnx.py")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def make_tokenizer(model_dir):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    # tokenizer.json ships truncation 128 and fixed padding 128: replace both
    tok.no_padding()
    tok.enable_truncation(max_length=MAX_SEQ)
    return tok


def embed(sess, tok, sents, batch=16):
    out = []
    for b in range(0, len(sents), batch):
        encs = tok.encode_batch(sents[b:b + batch])
        n = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), n), np.int64)
        mask = np.zeros((len(encs), n), np.int64)
        for r, e in enumerate(encs):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
        out.append(sess.run(["sentence_embedding"],
                            {"input_ids": ids, "attention_mask": mask})[0])
    return np.concatenate(out)


def verify(onnx_path, model_dir, fixtures):
    import onnxruntime as ort
    with open(os.path.join(fixtures, "sentences.jsonl"), encoding="utf-8") as f:
        sents = [json.loads(line) for line in f if line.strip()]
    ref = np.fromfile(os.path.join(fixtures, "minilm_fp32.f32"), dtype="<f4")
    ref = ref.reshape(len(sents), -1).astype(np.float64)
    tok = make_tokenizer(model_dir)
    counts_path = os.path.join(fixtures, "token_counts.json")
    if os.path.exists(counts_path):
        with open(counts_path) as f:
            want = json.load(f)
        got = [len(e.ids) for e in tok.encode_batch(sents)]
        bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
        if bad or len(got) != len(want):
            print(f"token counts differ from token_counts.json at {bad[:10]}",
                  file=sys.stderr)
            return False
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    got = embed(sess, tok, sents).astype(np.float64)
    cos = np.sum(got * ref, axis=1) / (np.linalg.norm(got, axis=1) *
                                       np.linalg.norm(ref, axis=1))
    worst = int(np.argmin(cos))
    maxabs = float(np.max(np.abs(got - ref)))
    print(f"verify: {len(sents)} sentences, onnxruntime {ort.__version__}: "
          f"min cosine {cos.min():.12f} (sentence {worst}), "
          f"max abs diff {maxabs:.3e}")
    ok = bool(cos.min() >= COS_MIN)
    if not ok:
        print(f"verify: FAILED, cosine below {COS_MIN}", file=sys.stderr)
    return ok


def main():
    ap = argparse.ArgumentParser(
        description="Build an ONNX graph of all-MiniLM-L6-v2 from safetensors.")
    ap.add_argument("out", help="where to write the .onnx file")
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--fixtures", default="tests/fixtures/reference")
    ap.add_argument("--no-verify", action="store_true",
                    help="skip the check against the reference vectors")
    args = ap.parse_args()

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    weights = load_safetensors(os.path.join(args.model, "model.safetensors"))
    model = build(weights, cfg)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    onnx.save(model, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, "
          f"{len(model.graph.node)} nodes, opset {OPSET})")
    if args.no_verify:
        return 0
    return 0 if verify(args.out, args.model, args.fixtures) else 1


if __name__ == "__main__":
    sys.exit(main())
