#!/usr/bin/env python3
# peer_torch.py: the PyTorch FP16 peer of bench/gpu/e2e_bench.c, on the same
# GPU, weights and token ids, in the same run (bench/gpu.sh): the encoder as
# Hugging Face transformers runs it in half precision with SDPA attention,
# then sentence-transformers' mean pooling and L2 normalisation, ids in and
# vectors on the host out (as Mantissa's mt_model_forward). With --compile the
# same model goes through torch.compile (inductor, static shapes: one
# compilation per batch size, done in the warm-up). Timing: median
# wall-clock run after warm-up, >= --seconds per batch size, with a CUDA
# synchronisation ending each run. Energy: NVML's total-energy counter over
# the timed runs (nvidia-ml-py), or null with the reason.
import argparse
import json
import statistics
import sys
import time

import torch


def nvml_energy():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)  # the benchmark machine has one GPU
        pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h), "nvml total energy"
    except Exception as e:  # noqa: BLE001 - any failure means "no counter"
        return None, "no NVML energy counter: %s" % e


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--batch", default="1,32,256")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--compile", action="store_true", help="torch.compile (inductor) the encoder")
    args = ap.parse_args()
    from transformers import AutoModel

    rows = json.load(open(args.ids))
    ids_all = torch.tensor(rows, dtype=torch.long, device="cuda")
    # .half() rather than the dtype argument, whose name differs across transformers versions
    try:
        model = AutoModel.from_pretrained(args.model, attn_implementation="sdpa")
        attention = "sdpa"
    except (ValueError, ImportError) as e:  # an architecture without SDPA (MPNet in some versions)
        print("peer_torch: no SDPA for this model (%s); eager attention" % e, file=sys.stderr)
        model = AutoModel.from_pretrained(args.model)
        attention = "eager"
    model = model.half().cuda().eval()
    assert next(model.parameters()).dtype == torch.float16
    if args.compile:
        model = torch.compile(model, backend="inductor", dynamic=False)
    energy, energy_note = nvml_energy()
    out = {"peer": "pytorch-compile" if args.compile else "pytorch", "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "dtype": "float16", "attention": attention, "energy": energy_note, "results": []}

    @torch.inference_mode()
    def forward(ids):
        mask = torch.ones_like(ids)
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        v = torch.nn.functional.normalize(pooled.float(), p=2, dim=1)
        return v.cpu()

    for b in [int(x) for x in args.batch.split(",")]:
        nb = len(rows) // b
        batches = [ids_all[j * b:(j + 1) * b] for j in range(nb)]
        c0 = time.perf_counter()
        for w in range(3):
            forward(batches[w % nb])
        torch.cuda.synchronize()
        warm_s = time.perf_counter() - c0
        torch.cuda.synchronize()
        times = []
        e0 = energy() if energy else None
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds or len(times) < 5:
            a = time.perf_counter()
            forward(batches[len(times) % nb])
            times.append(time.perf_counter() - a)
        wall = time.perf_counter() - start
        e1 = energy() if energy else None
        med = statistics.median(times)
        j1000 = (e1 - e0) / 1000.0 / (len(times) * b) * 1000.0 if energy else None
        out["results"].append({"batch": b, "runs": len(times), "median_s": med,
                               "sentences_per_s": round(b / med, 1),
                               "mean_sentences_per_s": round(len(times) * b / wall, 1),
                               "warmup_s": round(warm_s, 1),
                               "j_per_1000": None if j1000 is None else round(j1000, 3)})
        print("peer_torch: batch %3d: %8.1f sentences/s" % (b, b / med), file=sys.stderr)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
