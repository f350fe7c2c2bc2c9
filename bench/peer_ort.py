#!/usr/bin/env python3
# peer_ort.py: the speed peer for `make bench`. Measures ONNX Runtime's CPU
# throughput (sentences/s) for all-MiniLM-L6-v2 at batch 1 and batch 32 on
# 128-token inputs, FP32 and optionally dynamic INT8, so that bench/results/
# can quote Mantissa next to a peer measured in the same run on the same
# machine. Needs only tools/bench-requirements.txt (no torch).
#
#   python bench/peer_ort.py build/peer/minilm.onnx models/all-MiniLM-L6-v2 \
#       [--int8] [--dump-ids build/peer/ids.json] [--min-time 3]
#
# The .onnx file comes from tools/export-onnx.py. Inputs are synthetic and
# deterministic: 32 rows of [CLS] + 126 ids drawn with numpy's
# default_rng(seed) (PCG64, seed 0 unless --seed) uniformly from
# [1000, 30000] inclusive + [SEP], attention mask all ones. Batch 32 runs all
# 32 rows at once; batch 1 runs them one at a time, in order. --dump-ids
# writes those 32 rows (JSON list of lists) so the C benchmark can run the
# very same inputs.
#
# By default the graph is first fused with onnxruntime.transformers.optimizer
# (Attention, SkipLayerNormalization, BiasGelu), as a real ORT deployment of
# BERT would be; --no-fuse measures the plain graph with only ORT's online
# optimiser. The session always uses graph optimisation level ALL, one
# inter-op thread and intra_op_num_threads = the CPUs this process may run on.
#
# Timing per point: warm-up for --warmup seconds (at least 3 runs), then
# session.run calls until --min-time seconds have passed (at least 5 runs);
# sentences/s = batch size / median run time.
#
# --int8: onnxruntime.quantization.quantize_dynamic with QInt8 weights,
# per_channel=True, only on weight GEMMs (MatMul with a constant B, and the
# fused Attention's QKV projection); activations are quantized per call.
#
# Stdout carries only the JSON result; progress goes to stderr.
import argparse
import contextlib
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

ROWS = 32
SEQ = 128
ID_LO, ID_HI = 1000, 30000


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cpu_threads():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def special_ids(model_dir):
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    if len(vocab) <= ID_HI:
        raise SystemExit(f"vocab.txt has {len(vocab)} entries, need > {ID_HI}")
    return vocab.index("[CLS]"), vocab.index("[SEP]")


def make_ids(model_dir, seed):
    cls_id, sep_id = special_ids(model_dir)
    rng = np.random.default_rng(seed)
    body = rng.integers(ID_LO, ID_HI, size=(ROWS, SEQ - 2), endpoint=True)
    ids = np.empty((ROWS, SEQ), np.int64)
    ids[:, 0] = cls_id
    ids[:, 1:-1] = body
    ids[:, -1] = sep_id
    return ids


def fuse(src, dst, model_dir):
    from onnxruntime.transformers import optimizer
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    logging.getLogger().setLevel(logging.ERROR)
    with contextlib.redirect_stdout(sys.stderr):
        m = optimizer.optimize_model(
            src, model_type="bert", num_heads=cfg["num_attention_heads"],
            hidden_size=cfg["hidden_size"], opt_level=0, use_gpu=False)
        stats = {k: v for k, v in m.get_fused_operator_statistics().items() if v}
        m.save_model_to_file(dst)
    return stats


def quantize(src, dst):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    model = onnx.load(src, load_external_data=False)
    consts = {t.name for t in model.graph.initializer}
    # only GEMMs against a weight: leaves Q·K^T and P·V in FP32
    nodes = [n.name for n in model.graph.node
             if n.op_type in ("MatMul", "Attention") and len(n.input) > 1
             and n.input[1] in consts]
    with contextlib.redirect_stdout(sys.stderr):
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8,
                         per_channel=True, nodes_to_quantize=nodes,
                         op_types_to_quantize=["MatMul", "Attention"],
                         extra_options={"MatMulConstBOnly": True,
                                        "DefaultTensorType": onnx.TensorProto.FLOAT})
    return len(nodes)


def session(path, threads):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run(sess, ids):
    return sess.run(["sentence_embedding"],
                    {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]


def time_point(sess, batches, warmup, min_time):
    """batches: list of [b, SEQ] arrays run in turn. Returns median seconds
    per run and the number of timed runs."""
    t0 = time.perf_counter()
    n = 0
    while n < 3 or time.perf_counter() - t0 < warmup:
        run(sess, batches[n % len(batches)])
        n += 1
    times = []
    t0 = time.perf_counter()
    while len(times) < 5 or time.perf_counter() - t0 < min_time:
        t = time.perf_counter()
        run(sess, batches[len(times) % len(batches)])
        times.append(time.perf_counter() - t)
    return statistics.median(times), len(times)


def measure(path, ids, threads, warmup, min_time, label):
    sess = session(path, threads)
    out = {}
    detail = {}
    for b in (1, 32):
        batches = [ids[i:i + b] for i in range(0, ROWS, b)]
        med, n = time_point(sess, batches, warmup, min_time)
        out[f"batch{b}_sps"] = round(b / med, 2)
        detail[f"batch{b}_median_ms"] = round(med * 1e3, 3)
        detail[f"batch{b}_runs"] = n
        log(f"{label} batch {b}: {b / med:.2f} sentences/s "
            f"(median {med * 1e3:.2f} ms over {n} runs)")
    out["detail"] = detail
    return sess, out


def min_cosine(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    cos = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min())


def main():
    ap = argparse.ArgumentParser(
        description="ONNX Runtime CPU throughput peer for all-MiniLM-L6-v2.")
    ap.add_argument("onnx", help="FP32 graph from tools/export-onnx.py")
    ap.add_argument("model_dir", help="model folder (vocab.txt, config.json)")
    ap.add_argument("--int8", action="store_true",
                    help="also measure the dynamic INT8 (per-channel) graph")
    ap.add_argument("--dump-ids", metavar="FILE",
                    help="write the input ids used (JSON list of lists)")
    ap.add_argument("--no-fuse", action="store_true",
                    help="skip onnxruntime.transformers.optimizer fusion")
    ap.add_argument("--threads", type=int, default=cpu_threads())
    ap.add_argument("--min-time", type=float, default=3.0,
                    help="seconds of timed runs per point (default 3)")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="seconds of warm-up runs per point (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    ids = make_ids(args.model_dir, args.seed)
    if args.dump_ids:
        d = os.path.dirname(os.path.abspath(args.dump_ids))
        os.makedirs(d, exist_ok=True)
        with open(args.dump_ids, "w") as f:
            json.dump(ids.tolist(), f)
            f.write("\n")

    result = {
        "peer": "onnxruntime",
        "version": ort.__version__,
        "threads": args.threads,
        "cpu": cpu_model(),
        "inputs": (f"{ROWS} rows of {SEQ} tokens: [CLS] + {SEQ - 2} ids from "
                   f"numpy default_rng({args.seed}).integers({ID_LO}, {ID_HI}, "
                   f"endpoint=True) + [SEP], mask all ones; batch 1 cycles "
                   f"through the rows, batch 32 runs them all"),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "timing": (f"median of >= {args.min_time:g} s of runs after "
                   f">= {args.warmup:g} s warm-up; sentences/s = batch / median"),
    }
    with tempfile.TemporaryDirectory(prefix="peer_ort_") as tmp:
        fp32_path = args.onnx
        if args.no_fuse:
            result["graph"] = "plain export, ORT online optimiser (level ALL)"
        else:
            fp32_path = os.path.join(tmp, "fused.onnx")
            stats = fuse(args.onnx, fp32_path, args.model_dir)
            result["graph"] = ("onnxruntime.transformers.optimizer fusions "
                               + json.dumps(stats, sort_keys=True)
                               + ", then ORT online optimiser (level ALL)")
        sess, result["fp32"] = measure(fp32_path, ids, args.threads,
                                       args.warmup, args.min_time, "fp32")
        ref = run(sess, ids)
        if not args.no_fuse:
            # the fused graph must compute what the plain one does
            plain = run(session(args.onnx, args.threads), ids)
            c = min_cosine(ref, plain)
            result["fp32"]["detail"]["min_cos_fused_vs_plain"] = c
            if c < 0.99999:
                log(f"error: fused graph drifts from the plain one (cos {c})")
                return 1
        del sess
        if args.int8:
            int8_path = os.path.join(tmp, "int8.onnx")
            nq = quantize(fp32_path, int8_path)
            sess, result["int8"] = measure(int8_path, ids, args.threads,
                                           args.warmup, args.min_time, "int8")
            result["int8"]["detail"]["quantized_nodes"] = nq
            result["int8"]["detail"]["min_cos_vs_fp32"] = min_cosine(
                run(sess, ids), ref)
            result["int8"]["quantization"] = (
                "quantize_dynamic QInt8 weights, per_channel=True, weight "
                "GEMMs only, dynamic per-call activation quantization")
    # other work on the machine skews the figures: record how busy it was
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
