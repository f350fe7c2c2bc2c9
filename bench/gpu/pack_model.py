#!/usr/bin/env python3
# pack_model.py: moves a model folder to the GPU machine within the device
# tool's 64 MiB carry limit, and back to the FP32 form Mantissa loads.
#
#   pack_model.py to16 SRC DST   F32 tensors of SRC/model.safetensors -> F16 in
#                                DST/model.safetensors, other files copied
#   pack_model.py to32 SRC DST   F16 tensors -> F32 (exact widening)
#   pack_model.py spec SRC DST   the model without its weights: every other
#                                file, and DST/weights-spec.json (each tensor's
#                                name, dtype and shape): kilobytes, for a model
#                                too large to carry (all-mpnet-base-v2, 438 MB)
#   pack_model.py gen SPEC DST [--seed N]
#                                F32 weights of the spec's names and shapes
#                                drawn from a seed (numpy), on the GPU machine:
#                                the GPU is checked against the CPU twin on the
#                                same generated weights, and timed on the
#                                model's real shapes (issue 24, item 6)
#
# The GPU tests compare the CUDA backend against the CPU FP32 path on the
# same (FP16-rounded, then widened) weights, so the rounding changes nothing
# they measure; bench/gpu.sh computes those CPU vectors from the widened
# file. Plain Python (numpy when present).
import json
import os
import shutil
import struct
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover - the slow path
    np = None


def convert(raw, src, dst):
    if np is not None:
        return np.frombuffer(raw, dtype="<f4" if src == "F32" else "<f2").astype(
            "<f2" if dst == "F16" else "<f4").tobytes()
    n = len(raw) // (4 if src == "F32" else 2)
    out = bytearray()
    step = 1 << 20
    for i in range(0, n, step):
        c = min(step, n - i)
        vals = struct.unpack_from("<%d%s" % (c, "f" if src == "F32" else "e"), raw,
                                  i * (4 if src == "F32" else 2))
        out += struct.pack("<%d%s" % (c, "e" if dst == "F16" else "f"), *vals)
    return bytes(out)


def copy_other_files(src, dst):
    os.makedirs(dst, exist_ok=True)
    for root, _, files in os.walk(src):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), src)
            if rel == "model.safetensors" or rel.endswith((".onnx", ".bin", ".h5", ".msgpack")):
                continue
            os.makedirs(os.path.dirname(os.path.join(dst, rel)) or dst, exist_ok=True)
            shutil.copyfile(os.path.join(root, f), os.path.join(dst, rel))


def read_safetensors(path, data=True):
    """(header, the bytes after it or None) of a safetensors file."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        return json.loads(fh.read(n)), fh.read() if data else None


def write_safetensors(path, header, blobs):
    """header's JSON padded to 8 bytes, then the tensors' bytes in order."""
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(hj)))
        fh.write(hj)
        for b in blobs:
            fh.write(b)


def spec(src, dst):
    copy_other_files(src, dst)
    header, _ = read_safetensors(os.path.join(src, "model.safetensors"), data=False)
    header.pop("__metadata__", None)
    tensors = [{"name": k, "dtype": v["dtype"], "shape": v["shape"]}
               for k, v in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])]
    with open(os.path.join(dst, "weights-spec.json"), "w") as fh:
        json.dump({"source": os.path.basename(os.path.normpath(src)), "tensors": tensors}, fh)
    print("pack_model: %s -> %s (the spec of %d tensors)" % (src, dst, len(tensors)))


def draw(rng, name, shape):
    """Values of the scale each kind of tensor has in a trained encoder, so
    that activations stay in range through every layer: LayerNorm gains
    near 1, biases and embeddings small, projections ~0.04 (std), MPNet's
    relative attention bias table of order 1."""
    if name.endswith("LayerNorm.weight"):
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if "relative_attention_bias" in name:
        return 0.5 * rng.standard_normal(shape)
    if name.endswith(".bias"):
        return 0.05 * rng.standard_normal(shape)
    if "embeddings" in name:
        return 0.05 * rng.standard_normal(shape)
    return 0.04 * rng.standard_normal(shape)


def gen(spec_dir, dst, seed):
    if np is None:
        sys.exit("pack_model gen needs numpy")
    copy_other_files(spec_dir, dst)
    os.remove(os.path.join(dst, "weights-spec.json"))
    tensors = json.load(open(os.path.join(spec_dir, "weights-spec.json")))["tensors"]
    rng = np.random.default_rng(seed)
    header, blobs, off = {}, [], 0
    for t in tensors:
        shape = t["shape"]
        if t["dtype"] == "I64":  # position ids: 0, 1, 2, ...
            raw = np.arange(int(np.prod(shape)), dtype="<i8").reshape(shape).tobytes()
        elif t["dtype"] in ("F32", "F16", "BF16"):
            raw = draw(rng, t["name"], shape).astype("<f4").tobytes()
            t = dict(t, dtype="F32")
        else:
            sys.exit("pack_model gen: %s has dtype %s" % (t["name"], t["dtype"]))
        header[t["name"]] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt", "generated": "pack_model.py gen, seed %d" % seed}
    write_safetensors(os.path.join(dst, "model.safetensors"), header, blobs)
    print("pack_model: %s -> %s (generated, seed %d, %d bytes of tensors)" % (spec_dir, dst, seed, off))


def main():
    mode, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "spec":
        return spec(src, dst)
    if mode == "gen":
        seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1234
        return gen(src, dst, seed)
    frm, to = ("F32", "F16") if mode == "to16" else ("F16", "F32")
    copy_other_files(src, dst)
    header, data = read_safetensors(os.path.join(src, "model.safetensors"))
    meta = header.pop("__metadata__", None)
    out_header, blobs, off = {}, [], 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        raw = data[t["data_offsets"][0]:t["data_offsets"][1]]
        dtype = t["dtype"]
        if dtype == frm:
            raw, dtype = convert(raw, frm, to), to
        out_header[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if meta is not None:
        out_header["__metadata__"] = meta
    write_safetensors(os.path.join(dst, "model.safetensors"), out_header, blobs)
    print("pack_model: %s -> %s (%s -> %s, %d bytes of tensors)" % (src, dst, frm, to, off))


if __name__ == "__main__":
    main()
