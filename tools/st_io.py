"""st_io.py: safetensors read and written by hand (numpy only), for the
tools that make test model folders (make-cross-encoder.py, make-distilbert.py,
make-layer-kinds.py): no safetensors or torch package is needed in .venv."""
import json
import struct

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """name -> numpy array (a copy), in the file's order."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[t["dtype"]]).reshape(t["shape"]).copy()
    return out


def _bytes(arr, dtype):
    """arr's values as dtype's little-endian bytes: F32, or BF16 (the top half
    of each float32: the values must be BF16-exact, nothing is rounded)."""
    f = np.ascontiguousarray(arr, dtype="<f4")
    if dtype == "F32":
        return f.tobytes()
    if dtype == "BF16":
        return (f.view("<u4") >> 16).astype("<u2").tobytes()
    raise ValueError("write_safetensors: dtype %r (F32 or BF16)" % dtype)


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: name -> array; written as dtype (F32, or BF16 of BF16-exact
    values) with an 8-byte aligned header."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        b = _bytes(arr, dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
