#!/usr/bin/env python3
"""qwen3_load_rss.py: what loading a Qwen3-Embedding-shaped checkpoint costs
in time and memory, per precision (issue 38: peak resident memory while
loading should stay under 1.3x the loaded model's). No Qwen3 checkpoint can
be downloaded here, so the folder is made with random BF16 weights at the
real shapes (Qwen3-Embedding-0.6B's by default: 28 layers, hidden 1024,
16 query and 8 key/value heads of 128, MLP 3072, vocab 151936), sharded as
the real one is, with a byte-level BPE tokenizer from
tools/make-bpe-tokenizer.py. Each precision is loaded by a fresh
`mantissa serve` (device cpu); its `loaded` log line gives the model's
resident MiB and the load time, and /proc gives the process's peak RSS
(VmHWM) and its RSS once serving. The log's own peak (`peak_rss_mib`) is
printed too but not tabled: it was getrusage's ru_maxrss, which a forked
child keeps from its parent across exec, so it read at least this
script's own peak (2.4 GiB when the script made the folder in its own
process, as it did before; it now makes it in a child process). The
server now reads VmHWM there too (engine/peak_rss.c), the same number up
to the moment of the `loaded` line.

  bench/qwen3_load_rss.py [--bin build/release/mantissa] [--layers 28]
                          [--precisions bf16,fp8,int8,fp32] [--keep DIR] [--out FILE]
"""
import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SHAPE = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
         "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936}


def bf16_bytes(rng, shape, scale):
    a = (rng.standard_normal(shape, dtype=np.float32) * scale).view(np.uint32)
    return ((a + 0x7FFF + ((a >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_shard(path, tensors):
    header, off = {}, 0
    for name, (shape, b) in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for _, b in tensors.values():
            f.write(b)


def make_folder(out, layers, seed):
    """The folder, one shard per 7 layers, written tensor by tensor."""
    rng = np.random.default_rng(seed)
    c = dict(SHAPE, architectures=["Qwen3Model"], model_type="qwen3", num_hidden_layers=layers,
             max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
             hidden_act="silu", attention_bias=False, tie_word_embeddings=True,
             # <|endoftext|>, id 0 in the generated vocabulary, as 151643 is in the
             # real config (llama.cpp's converter takes the EOS it appends from here)
             bos_token_id=0, eos_token_id=0)
    h, q, kv, i = c["hidden_size"], 16 * 128, 8 * 128, c["intermediate_size"]
    os.makedirs(out, exist_ok=True)
    weight_map, shard, nshard = {}, {}, 0

    def flush():
        nonlocal shard, nshard
        if shard:
            nshard += 1
            name = "model-%05d.safetensors" % nshard
            write_shard(os.path.join(out, name), shard)
            weight_map.update({t: name for t in shard})
            shard = {}

    shard["embed_tokens.weight"] = ((c["vocab_size"], h), bf16_bytes(rng, (c["vocab_size"], h), 1.0))
    shard["norm.weight"] = ((h,), bf16_bytes(rng, (h,), 0.1))
    for l in range(layers):
        p = "layers.%d." % l
        for n, s in (("self_attn.q_proj", (q, h)), ("self_attn.k_proj", (kv, h)),
                     ("self_attn.v_proj", (kv, h)), ("self_attn.o_proj", (h, q)),
                     ("mlp.gate_proj", (i, h)), ("mlp.up_proj", (i, h)), ("mlp.down_proj", (h, i))):
            shard[p + n + ".weight"] = (s, bf16_bytes(rng, s, s[1] ** -0.5))
        for n, d in (("input_layernorm", h), ("post_attention_layernorm", h),
                     ("self_attn.q_norm", 128), ("self_attn.k_norm", 128)):
            shard[p + n + ".weight"] = ((d,), bf16_bytes(rng, (d,), 0.1))
        if l % 7 == 6:
            flush()
    flush()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    tok = tempfile.mkdtemp()
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-bpe-tokenizer.py"), tok],
                   check=True, stdout=subprocess.DEVNULL)
    shutil.copy(os.path.join(tok, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
    shutil.rmtree(tok)
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": h, "pooling_mode_lasttoken": True,
                   "pooling_mode_mean_tokens": False}, f)


def load_once(binary, folder, precision, tmp):
    cfg = {"server": {"listen": "127.0.0.1:0"},
           "models": [{"name": "q", "path": folder, "device": "cpu",
                       "variants": [{"name": precision, "precision": precision, "traffic": 100}]}]}
    path = os.path.join(tmp, "cfg-%s.json" % precision)
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = subprocess.Popen([binary, "serve", "--config", path, "--log-format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    loaded, log = None, []
    for line in p.stdout:
        log.append(line)
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == "loaded":
            loaded = rec
        if rec.get("msg") == "serving on" or (loaded and "failed" in line):
            break
    rss = hwm = 0.0
    with open("/proc/%d/status" % p.pid) as f:
        for s in f:
            if s.startswith("VmRSS:"):
                rss = int(s.split()[1]) / 1024.0
            if s.startswith("VmHWM:"):
                hwm = int(s.split()[1]) / 1024.0
    p.terminate()
    p.wait(timeout=60)
    if not loaded:
        raise SystemExit("no loaded line for %s:\n%s" % (precision, "".join(log[-20:])))
    num = lambda k: float(loaded[k])  # noqa: E731
    return {"resident_mib": num("resident_mib"), "gemm_mib": num("gemm_mib"),
            "load_s": num("load_s"), "log_peak_rss_mib": num("peak_rss_mib"), "peak_rss_mib": hwm,
            "rss_serving_mib": rss}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "mantissa"))
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--precisions", default="bf16,fp8,int8,fp32")
    ap.add_argument("--keep", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    folder = a.keep or os.path.join(tmp, "qwen3")
    if not os.path.exists(os.path.join(folder, "config.json")):
        # in a child process: numpy's buffers would raise this one's peak
        # RSS, which every server it starts inherits in its ru_maxrss
        child = multiprocessing.get_context("fork").Process(target=make_folder,
                                                            args=(folder, a.layers, 20261129))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit("making the folder failed")
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        shards = set(json.load(f)["weight_map"].values())
    disk = sum(os.path.getsize(os.path.join(folder, n)) for n in shards)
    rows = []
    for prec in a.precisions.split(","):
        r = load_once(a.bin, folder, prec, tmp)
        rows.append((prec, r))
        print(prec, r, flush=True)
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as f:
        for s in f:
            if s.startswith("model name"):
                cpu = s.split(":", 1)[1].strip()
                break
    lines = ["Qwen3-Embedding-0.6B shapes (%d layers), random BF16 weights in %d MiB of shards; "
             "%s, %d CPUs; `mantissa serve`, device cpu, one variant a process." %
             (a.layers, disk // 1048576, cpu, os.cpu_count()), "",
             "| precision | model resident MiB | GEMM MiB | load s | process peak RSS (VmHWM) MiB | "
             "RSS serving MiB | peak / model | serving / model |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for prec, r in rows:
        lines.append("| %s | %.0f | %.0f | %.1f | %.0f | %.0f | %.2f | %.2f |" % (
            prec, r["resident_mib"], r["gemm_mib"], r["load_s"], r["peak_rss_mib"],
            r["rss_serving_mib"], r["peak_rss_mib"] / r["resident_mib"],
            r["rss_serving_mib"] / r["resident_mib"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    if not a.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
