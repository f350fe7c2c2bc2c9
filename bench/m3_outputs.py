#!/usr/bin/env python3
"""m3_outputs.py: what bge-m3's three outputs from one forward cost against
its dense vector alone, and what they save against asking for each output
in its own request (issue 39, item 4). No bge-m3 checkpoint can be
downloaded here, so the folder is made at bge-m3's shapes (XLM-RoBERTa
large: 24 layers, hidden 1024, 16 heads, MLP 4096; the vocabulary of
tools/make-unigram-tokenizer.py's tokenizer, which changes no GEMM) with
random weights by transformers' XLMRobertaModel, and its two heads written
as bge-m3 ships them (torch.save of FP16 Linear state_dicts). Run it with
a Python that has torch and transformers (.venv-ref).

The real `mantissa serve` (device cpu) answers, interleaved in rounds so
that the machine's slow spells fall on every mode alike, the same texts:
  dense     POST /v1/embeddings (the pooled forward)
  all       POST /v1/embeddings with "outputs": ["dense","sparse","colbert"]
  separate  /v1/embeddings, /embed_sparse and /embed_multivector, one after
            the other (what a client of a server without the combined call does)
and the report gives each mode's median wall time and its ratio to dense.

  .venv-ref/bin/python bench/m3_outputs.py [--bin build/release/mantissa]
      [--layers 24] [--precision fp32] [--texts 8] [--rounds 5] [--out FILE]
"""
import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TEXTS = ["The quick brown fox jumps over the lazy dog near the river bank at dawn.",
         "Le chat dort sur le canapé pendant que la pluie tombe sur la ville.",
         "Die Katze schläft auf dem Sofa, während draußen der Regen fällt.",
         "Кошка спит на диване, пока за окном идёт дождь и дует ветер.",
         "猫はソファで寝ていて、外では雨が降っている。", "고양이가 소파에서 자고 있고 밖에는 비가 온다.",
         "Retrieval pipelines call an embedder and then a cross-encoder reranker.",
         "Sparse lexical weights and ColBERT vectors come from the same hidden states."]


def make_folder(out, layers, seed):
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-unigram-tokenizer.py"),
                    os.path.join(out, "tok")], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "tok", "tokenizer.json")) as f:
        vocab = len(json.load(f)["model"]["vocab"]) + 8
    torch.manual_seed(seed)
    cfg = XLMRobertaConfig(vocab_size=vocab, hidden_size=1024, num_hidden_layers=layers,
                           num_attention_heads=16, intermediate_size=4096,
                           max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)
    m = XLMRobertaModel(cfg, add_pooling_layer=False).eval()
    d = os.path.join(out, "m3")
    m.save_pretrained(d, safe_serialization=True)
    shutil.copy(os.path.join(out, "tok", "tokenizer.json"), d)
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 1024, "pooling_mode_cls_token": True,
                   "pooling_mode_mean_tokens": False}, f)
    with open(os.path.join(d, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}], f)
    torch.save(torch.nn.Linear(1024, 1).half().state_dict(), os.path.join(d, "sparse_linear.pt"))
    torch.save(torch.nn.Linear(1024, 1024).half().state_dict(),
               os.path.join(d, "colbert_linear.pt"))
    return d, vocab


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        data = r.read()
        assert r.status == 200, data[:200]
    return time.perf_counter() - t0, len(data)


def serve(binary, folder, precision, tmp):
    port = free_port()
    cfg = {"server": {"listen": "127.0.0.1:%d" % port},
           "models": [{"name": "m3", "path": folder, "device": "cpu",
                       "variants": [{"name": precision, "precision": precision,
                                     "traffic": 100}]}]}
    path = os.path.join(tmp, "cfg.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = subprocess.Popen([binary, "serve", "--config", path], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=ROOT)
    url = "http://127.0.0.1:%d" % port
    for _ in range(1200):
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=5) as r:
                if r.status == 200:
                    return p, url
        except OSError:
            pass
        if p.poll() is not None:
            raise SystemExit("the server exited (%d)" % p.returncode)
        time.sleep(0.5)
    p.terminate()
    raise SystemExit("the server did not become ready")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "mantissa"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--texts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    texts = (TEXTS * ((a.texts + len(TEXTS) - 1) // len(TEXTS)))[:a.texts]
    tmp = tempfile.mkdtemp(prefix="m3-bench-")
    p = None
    try:
        folder, vocab = make_folder(tmp, a.layers, a.seed)
        p, url = serve(a.bin, folder, a.precision, tmp)
        modes = {
            "dense": [("/v1/embeddings", {"model": "m3", "input": texts,
                                          "encoding_format": "float"})],
            "all": [("/v1/embeddings", {"model": "m3", "input": texts, "encoding_format": "float",
                                        "outputs": ["dense", "sparse", "colbert"]})],
            "separate": [("/v1/embeddings", {"model": "m3", "input": texts,
                                             "encoding_format": "float"}),
                         ("/embed_sparse", {"inputs": texts}),
                         ("/embed_multivector", {"inputs": texts})]}
        for calls in modes.values():  # warm-up
            for path, body in calls:
                post(url, path, body)
        times = {k: [] for k in modes}
        size = {}
        for _ in range(a.rounds):
            for k, calls in modes.items():
                t = n = 0
                for path, body in calls:
                    dt, nb = post(url, path, body)
                    t, n = t + dt, n + nb
                times[k].append(t)
                size[k] = n
    finally:
        if p:
            p.terminate()
            p.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = ["bge-m3 shapes (XLM-RoBERTa large, %d layers, hidden 1024, vocab %d), random "
             "weights, FP16 heads in .pt files; %s; %d texts a request; `mantissa serve` "
             "device cpu, %s; %s, %d CPUs (%s); median of %d rounds, interleaved."
             % (a.layers, vocab, a.precision, len(texts), time.strftime("%Y-%m-%d"), cpu,
                os.cpu_count(), platform.machine(), a.rounds),
             "", "| mode | requests | median s | vs dense | response bytes |",
             "| --- | --- | --- | --- | --- |"]
    for k, calls in modes.items():
        lines.append("| %s | %d | %.3f | %.2fx | %d |" % (k, len(calls), med[k],
                                                          med[k] / med["dense"], size[k]))
    report = "\n".join(lines)
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
