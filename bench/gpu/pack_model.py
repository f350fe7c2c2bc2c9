#!/usr/bin/env python3
# pack_model.py: moves a model folder to the GPU machine within the device
# tool's 64 MiB carry limit, and back to the FP32 form Mantissa loads.
#
#   pack_model.py to16 SRC DST   F32 tensors of SRC/model.safetensors -> F16 in
#                                DST/model.safetensors, other files copied
#   pack_model.py to32 SRC DST   F16 tensors -> F32 (exact widening)
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


def main():
    mode, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    frm, to = ("F32", "F16") if mode == "to16" else ("F16", "F32")
    os.makedirs(dst, exist_ok=True)
    for root, _, files in os.walk(src):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), src)
            if rel == "model.safetensors" or rel.endswith((".onnx", ".bin", ".h5", ".msgpack")):
                continue
            os.makedirs(os.path.dirname(os.path.join(dst, rel)) or dst, exist_ok=True)
            shutil.copyfile(os.path.join(root, f), os.path.join(dst, rel))
    with open(os.path.join(src, "model.safetensors"), "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
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
    hj = json.dumps(out_header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as fh:
        fh.write(struct.pack("<Q", len(hj)))
        fh.write(hj)
        for b in blobs:
            fh.write(b)
    print("pack_model: %s -> %s (%s -> %s, %d bytes of tensors)" % (src, dst, frm, to, off))


if __name__ == "__main__":
    main()
