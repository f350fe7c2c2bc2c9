#!/usr/bin/env python3
"""make-torch-fixtures.py: writes the PyTorch checkpoints (torch.save's zip
format) that tests/unit/test_torch_pt.c reads through engine/weights
(st_open on a .pt / .bin file), into tests/fixtures/torch/, with README.md.

Made with torch 2.15.0 (run on the CPU), Python 3.11.7; run it with the reference
environment, which has torch (CI has none, so the files are committed):

    .venv-ref/bin/python tools/make-torch-fixtures.py

Every value is a formula of the element's index (below, and again in the C
test), exact in the tensor's dtype, so a wrong offset or dtype fails there.
torch.save writes a random serialization id into each archive, so the
bytes differ from run to run; the tensors do not.

  dtypes.pt         one tensor of each dtype the reader maps (F32 [2,3],
                    F16 [5], BF16 [2,2], F64 [3], I64 [4], I32 [3], I16 [3],
                    I8 [5], U8 [4], BOOL [5]), a 0-dim scalar and an empty
                    [0,4] tensor; a plain dict, pickle protocol 2
  v3_dtypes.pt      the dtypes without a typed storage class, which torch
                    saves with _rebuild_tensor_v3 on an UntypedStorage and
                    a dtype global: float8_e4m3fn and float8_e5m2 [5]
                    (-2, -1, 0, 0.5, 1.5), uint16, uint32, uint64 [3]
  linear_fp16.pt    nn.Linear(16, 8).half().state_dict() as bge-m3's
                    sparse_linear.pt / colbert_linear.pt are saved
                    (OrderedDict with _metadata set by BUILD)
  shared.pt         views into one storage (tail = base[2:], grid =
                    base[4:10].view(2,3), one_row = base.view(3,4)[1:2] with
                    stride (4,1), scalar_view = base[5], tied_a/tied_b the
                    same tensor) and an nn.Parameter
  proto4.pt         nn.Linear(3, 2).state_dict() saved with pickle protocol 4
                    (FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL)
  noncontig.pt      a transposed tensor "wt" beside a good one: refused
  nested.pt         {"state_dict": {...}, "epoch": 3}: refused, naming the key
  legacy.pt         _use_new_zipfile_serialization=False: refused
  zip64_unaligned.pt  dtypes.pt's entries re-packed by the small writer
                    below: top folder "archive", no byteorder entry, ZIP64
                    extra fields in every local and central header (the
                    32-bit fields 0xFFFFFFFF), a ZIP64 end record and
                    locator, the 16-bit counts 0xFFFF, and every entry's
                    data at an odd offset (so no multi-byte tensor is
                    aligned in the file)
  sharded/          pytorch_model-0000{1,2}-of-00002.bin (plain dicts, as
                    transformers' save_pretrained(safe_serialization=False)
                    writes) and pytorch_model.bin.index.json
"""
import json
import os
import struct
import sys
import zipfile

import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "torch")


def ramp(n, dtype, a, b):
    """a + b*i for i in 0..n-1, computed in float64 and cast (exact here)."""
    return (torch.arange(n, dtype=torch.float64) * b + a).to(dtype)


def dtypes_dict():
    return {
        "f32": ramp(6, torch.float32, -1.0, 0.5).view(2, 3),
        "f16": ramp(5, torch.float16, -2.0, 0.75),
        "bf16": ramp(4, torch.bfloat16, 1.0, -0.5).view(2, 2),
        "f64": ramp(3, torch.float64, 0.1, 0.2),
        "i64": (torch.arange(4, dtype=torch.int64) - 2) * 3_000_000_000,
        "i32": torch.arange(3, dtype=torch.int32) * 100_000 - 7,
        "i16": torch.arange(3, dtype=torch.int16) * 300 - 500,
        "i8": torch.arange(5, dtype=torch.int8) * 50 - 100,
        "u8": (torch.arange(4, dtype=torch.int32) * 60 + 10).to(torch.uint8),
        "bool": torch.tensor([i % 3 == 0 for i in range(5)]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }


def v3_dict():
    f8 = torch.tensor([-2.0, -1.0, 0.0, 0.5, 1.5])
    return {
        "e4m3": f8.to(torch.float8_e4m3fn),
        "e5m2": f8.to(torch.float8_e5m2),
        "u16": (torch.arange(3) * 20000 + 7).to(torch.uint16),
        "u32": (torch.arange(3) * 1_000_000_000 + 5).to(torch.uint32),
        "u64": (torch.arange(3) * 2**62 + 9).to(torch.uint64),
    }


def linear(n_in, n_out, dtype, wa, wb, ba, bb):
    lin = torch.nn.Linear(n_in, n_out)
    with torch.no_grad():
        lin.weight.copy_(ramp(n_out * n_in, torch.float64, wa, wb).view(n_out, n_in))
        lin.bias.copy_(ramp(n_out, torch.float64, ba, bb))
    return lin.to(dtype).state_dict()


def shared_dict():
    base = ramp(12, torch.float32, -3.0, 1.5)
    param = torch.nn.Parameter(ramp(4, torch.float32, 0.25, 1.0).view(2, 2))
    return {
        "base": base,
        "tail": base[2:],
        "grid": base[4:10].view(2, 3),
        "one_row": base.view(3, 4)[1:2],
        "scalar_view": base[5],
        "tied_a": base,
        "tied_b": base,
        "param": param,
    }


# ---- a small zip writer: ZIP64 everywhere, data at odd offsets ---------------

def zip64_repack(src, dst, prefix):
    """Copies src's entries (renamed under prefix/, byteorder left out) into
    dst, stored, each with a ZIP64 extra field and its data at an odd
    offset, then a ZIP64 end record, its locator and an end record whose
    counts and offsets say "see ZIP64"."""
    zin = zipfile.ZipFile(src)
    out, central = bytearray(), bytearray()
    entries = []
    for info in zin.infolist():
        rest = info.filename.split("/", 1)[1]
        if rest == "byteorder":
            continue
        entries.append((prefix + "/" + rest, zin.read(info.filename), info.CRC))
    for name, data, crc in entries:
        nb = name.encode()
        off = len(out)
        # local extra: ZIP64 (sizes) + padding so the data starts at an odd offset
        z64 = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        base = off + 30 + len(nb) + len(z64) + 4
        pad = (1 - base) % 8
        extra = z64 + struct.pack("<HH", 0xCAFE, pad) + b"\0" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc,
                           0xFFFFFFFF, 0xFFFFFFFF, len(nb), len(extra))
        out += nb + extra
        assert len(out) % 8 == 1, len(out)
        out += data
        cz64 = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc,
                               0xFFFFFFFF, 0xFFFFFFFF, len(nb), len(cz64), 0, 0, 0, 0,
                               0xFFFFFFFF)
        central += nb + cz64
    cd_off = len(out)
    out += central
    z64_off = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries),
                       len(entries), len(central), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64_off, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                       0xFFFFFFFF, 0)
    with open(dst, "wb") as f:
        f.write(out)
    # Python's own reader agrees it is a good zip, and torch loads it.
    with zipfile.ZipFile(dst) as z:
        assert z.testzip() is None
    got = torch.load(dst, weights_only=True)
    ref = dtypes_dict()
    assert set(got) == set(ref) and all(torch.equal(got[k], ref[k]) for k in ref)


def sharded(folder):
    os.makedirs(folder, exist_ok=True)
    shards = [
        ("pytorch_model-00001-of-00002.bin", {
            "embeddings.weight": ramp(12, torch.float32, 0.5, 0.25).view(4, 3),
            "layer.0.weight": ramp(9, torch.float32, -1.0, 0.125).view(3, 3),
        }),
        ("pytorch_model-00002-of-00002.bin", {
            "layer.0.bias": ramp(3, torch.float32, 2.0, -1.0),
            "head.weight": ramp(6, torch.float16, -0.5, 0.25).view(2, 3),
        }),
    ]
    weight_map, total = {}, 0
    for fname, d in shards:
        torch.save(d, os.path.join(folder, fname))
        for k, t in d.items():
            weight_map[k] = fname
            total += t.numel() * t.element_size()
    with open(os.path.join(folder, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


README = """# torch fixtures

PyTorch checkpoints in torch.save's zip format for `tests/unit/test_torch_pt.c`
(engine/weights/torch_pt.c through `st_open`), and the seeds of
`tests/fuzz/fuzz_torch_pt.c` (tests/fuzz/make-seeds.py copies them). Written
by `tools/make-torch-fixtures.py` (its docstring lists each file and what it
holds) with torch {torch} (run on the CPU), Python {python}:

    .venv-ref/bin/python tools/make-torch-fixtures.py

Committed because CI has no torch. Each value is a formula of the element's
index that the C test recomputes (the same formulas are in the script), so a
wrong offset, stride or dtype fails the test. torch.save writes a random
`.data/serialization_id` into each archive: a rerun changes the bytes, not
the tensors. After a rerun, `python3 tests/fuzz/make-seeds.py` copies them
into the fuzzer's seeds again.
"""


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.save(dtypes_dict(), os.path.join(OUT, "dtypes.pt"))
    torch.save(v3_dict(), os.path.join(OUT, "v3_dtypes.pt"))
    torch.save(linear(16, 8, torch.float16, -4.0, 0.0625, -2.0, 0.5),
               os.path.join(OUT, "linear_fp16.pt"))
    torch.save(shared_dict(), os.path.join(OUT, "shared.pt"))
    torch.save(linear(3, 2, torch.float32, -1.0, 0.25, 0.5, -1.0),
               os.path.join(OUT, "proto4.pt"), pickle_protocol=4)
    torch.save({"ok": ramp(3, torch.float32, 0.0, 1.0),
                "wt": ramp(6, torch.float32, 0.0, 1.0).view(2, 3).t()},
               os.path.join(OUT, "noncontig.pt"))
    torch.save({"state_dict": {"w": ramp(2, torch.float32, 0.0, 1.0)}, "epoch": 3},
               os.path.join(OUT, "nested.pt"))
    torch.save({"w": ramp(4, torch.float32, 0.0, 1.0)}, os.path.join(OUT, "legacy.pt"),
               _use_new_zipfile_serialization=False)
    zip64_repack(os.path.join(OUT, "dtypes.pt"), os.path.join(OUT, "zip64_unaligned.pt"),
                 "archive")
    sharded(os.path.join(OUT, "sharded"))
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(README.format(torch=torch.__version__.split("+")[0],
                              python=sys.version.split()[0]))
    for d, _, files in sorted(os.walk(OUT)):
        for n in sorted(files):
            p = os.path.join(d, n)
            print(f"{os.path.relpath(p, ROOT)}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
