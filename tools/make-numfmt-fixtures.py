#!/usr/bin/env python3
"""make-numfmt-fixtures.py: writes the reference fixtures that
tests/unit/test_numfmt.c checks engine/numfmt.c against.

The reference is the `ml_dtypes` package (with numpy), which does not share
any code with engine/numfmt.c. For FP16 (numpy float16), BF16, FP8 E4M3
(float8_e4m3fn) and FP8 E5M2 (float8_e5m2) it writes

  <fmt>_decode.bin  every bit pattern decoded to FP32 bits
  <fmt>_encode.bin  FP32 inputs at every rounding boundary of the format, and
                    the bits ml_dtypes encodes each to

into tests/fixtures/numfmt/, plus README.md saying how they were made.

Encode inputs, built over the format's non-negative finite values v0 < v1 < ...:
  - each value itself;
  - for each adjacent pair: the exact midpoint (a tie), and the FP32 values
    one ulp below and above it;
  - above the largest finite value: the midpoint to the next value the
    format would have with a wider exponent, +/- 1 FP32 ulp, that next
    value, 1e9 / 1e30, FLT_MAX, inf;
  - FP32 subnormals and the smallest FP32 normal;
  - NaNs (quiet, signalling, all-ones payload), +/-0, and the specials with
    both signs.
Negative finite inputs are not stored: the script asserts that ml_dtypes
gives enc(-x) == enc(x) with the sign bit set (sign-magnitude formats) for
every stored input, and the C test checks each stored input with its sign
flipped as well.

E4M3 (FN variant) has no inf: ml_dtypes maps out-of-range values to NaN,
while engine/numfmt.c saturates to +/-448 (by design). Inputs that ml_dtypes
maps from a non-NaN value to NaN are therefore left out of e4m3_encode.bin;
the C test checks saturation on its own.

File layout (little-endian):
  magic "NFX1", u32 count, u32 in_size, u32 out_size,
  count * in_size bytes of inputs, then count * out_size bytes of outputs.
  in_size 0 means "input i is the bit pattern i" (the decode tables).

Usage: python3 tools/make-numfmt-fixtures.py [OUTDIR]
       (needs: pip install ml_dtypes numpy)
"""
import hashlib
import os
import struct
import sys

import ml_dtypes
import numpy as np

FORMATS = {
    # name: (numpy dtype, bits)
    "f16": (np.dtype(np.float16), 16),
    "bf16": (np.dtype(ml_dtypes.bfloat16), 16),
    "e4m3": (np.dtype(ml_dtypes.float8_e4m3fn), 8),
    "e5m2": (np.dtype(ml_dtypes.float8_e5m2), 8),
}

F32_SPECIAL_BITS = [
    0x00000000, 0x80000000,              # +/-0
    0x00000001, 0x00000002, 0x00000003,  # FP32 subnormals
    0x00007FFF, 0x00008000, 0x00008001,
    0x00018000, 0x00017FFF, 0x00018001,
    0x00400000, 0x007FFFFF, 0x00800000,  # largest subnormal, smallest normal
    0x7F7FFFFF,                          # FLT_MAX
    0x7F800000,                          # inf
    0x7FC00000, 0x7F800001, 0x7FA00000,  # NaN: quiet, signalling
    0x7FFFFFFF, 0x7FC00001, 0x7F802000,
]


def uint_dtype(bits):
    return np.dtype(np.uint8) if bits == 8 else np.dtype(np.uint16)


def f32(x):
    return np.float32(x)


def f32_bits(arr):
    return np.asarray(arr, dtype=np.float32).view(np.uint32)


def encode_bits(dt, bits, xs_f32):
    """The reference encoding of FP32 values, as unsigned bit patterns."""
    with np.errstate(all="ignore"):
        return xs_f32.astype(dt).view(uint_dtype(bits))


def finite_values(dt, bits):
    """The format's non-negative finite values, ascending, as float64."""
    pats = np.arange(1 << (bits - 1), dtype=uint_dtype(bits))
    with np.errstate(all="ignore"):
        vals = pats.view(dt).astype(np.float64)
    vals = np.unique(vals[np.isfinite(vals)])
    assert vals[0] == 0.0 and np.all(np.diff(vals) > 0)
    return vals


def encode_inputs(dt, bits):
    """FP32 bit patterns of the encode inputs (non-negative, plus specials)."""
    vals = finite_values(dt, bits)
    out = []

    out.append(f32_bits(vals.astype(np.float32)))
    lo, hi = vals[:-1], vals[1:]
    mid = ((lo + hi) / 2).astype(np.float32)
    assert np.all(mid.astype(np.float64) == (lo + hi) / 2), "midpoint not exact in FP32"
    out.append(f32_bits(mid))
    out.append(f32_bits(np.nextafter(mid, np.float32(0))))
    out.append(f32_bits(np.nextafter(mid, np.float32(np.inf))))

    vmax, vprev = vals[-1], vals[-2]
    nxt = vmax + (vmax - vprev)          # the next value with a wider exponent
    over_mid = vmax + (vmax - vprev) / 2
    m32 = f32(over_mid)
    assert float(m32) == over_mid
    extra = [m32, np.nextafter(m32, f32(0)), np.nextafter(m32, f32(np.inf))]
    if nxt <= float(np.finfo(np.float32).max):
        extra.append(f32(nxt))
    for big in (1e9, 1e30):
        if big > vmax:
            extra.append(f32(big))
    out.append(f32_bits(np.array(extra, dtype=np.float32)))

    specials = np.array(F32_SPECIAL_BITS, dtype=np.uint32)
    out.append(specials)
    out.append(specials | np.uint32(0x80000000))   # specials with both signs
    return np.unique(np.concatenate(out))


def write_fixture(path, inputs, in_size, outputs, out_size):
    count = len(outputs)
    with open(path, "wb") as f:
        f.write(b"NFX1")
        f.write(struct.pack("<III", count, in_size, out_size))
        if in_size:
            f.write(np.asarray(inputs).astype("<u%d" % in_size).tobytes())
        f.write(np.asarray(outputs).astype("<u%d" % out_size).tobytes())


def make_decode(name, dt, bits, outdir):
    pats = np.arange(1 << bits, dtype=uint_dtype(bits))
    dec = f32_bits(pats.view(dt).astype(np.float32))
    path = os.path.join(outdir, "%s_decode.bin" % name)
    write_fixture(path, None, 0, dec, 4)
    return path, len(pats)


def make_encode(name, dt, bits, outdir):
    ins = encode_inputs(dt, bits)
    xs = ins.view(np.float32)
    enc = encode_bits(dt, bits, xs)
    sign = 1 << (bits - 1)
    dec = enc.view(dt).astype(np.float32)

    keep = np.ones(len(ins), dtype=bool)
    if name == "e4m3":
        # ml_dtypes' overflow-to-NaN is not our behaviour (we saturate).
        keep = np.isnan(xs) | ~np.isnan(dec)

    # Sign symmetry of the reference, which lets the C test check -x too.
    neg = encode_bits(dt, bits, (ins ^ np.uint32(0x80000000)).view(np.float32))
    for x, e, n, k in zip(ins, enc, neg, keep):
        if not k:
            continue
        if np.isnan(np.uint32(x).view(np.float32)):
            nd = np.array([n], dtype=uint_dtype(bits)).view(dt).astype(np.float32)[0]
            assert np.isnan(nd) and (int(n) & sign) != (int(e) & sign), hex(int(x))
        else:
            assert int(n) == (int(e) ^ sign), (name, hex(int(x)), hex(int(e)), hex(int(n)))

    path = os.path.join(outdir, "%s_encode.bin" % name)
    write_fixture(path, ins[keep], 4, enc[keep], bits // 8)
    return path, int(keep.sum())


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "numfmt")
    os.makedirs(outdir, exist_ok=True)

    made = []
    for name, (dt, bits) in FORMATS.items():
        made.append(make_decode(name, dt, bits, outdir))
        made.append(make_encode(name, dt, bits, outdir))

    lines = []
    total = 0
    for path, count in made:
        data = open(path, "rb").read()
        total += len(data)
        lines.append("| %s | %d | %d | `%s` |" % (
            os.path.basename(path), count, len(data), hashlib.sha256(data).hexdigest()[:16]))

    readme = """# numfmt fixtures

Reference data for `tests/unit/test_numfmt.c`, which checks the number-format
conversions in `engine/numfmt.c` against them. Written by
`tools/make-numfmt-fixtures.py` (read its docstring for the full list of
inputs); do not edit by hand.

Made with ml_dtypes {mld}, numpy {np}, Python {py}:

    python3 -m venv /tmp/nfvenv && /tmp/nfvenv/bin/pip install ml_dtypes numpy
    /tmp/nfvenv/bin/python tools/make-numfmt-fixtures.py

Reference types: FP16 = numpy `float16`, BF16 = `ml_dtypes.bfloat16`,
E4M3 = `ml_dtypes.float8_e4m3fn`, E5M2 = `ml_dtypes.float8_e5m2`.

- `<fmt>_decode.bin`: every bit pattern of the format (entry i is pattern i)
  decoded to FP32 bits. NaN payloads are ml_dtypes' own; the test compares a
  NaN only as "NaN with the same sign".
- `<fmt>_encode.bin`: FP32 inputs at every rounding boundary of the format
  (each non-negative finite value, each midpoint between neighbours and the
  FP32 values 1 ulp either side, the overflow boundary above the largest
  finite value, FP32 subnormals, inf, NaNs, signed zeros) and the bits
  ml_dtypes encodes each to. Negative inputs are left out except for the
  specials: the generator asserts ml_dtypes is sign-symmetric on every stored
  input, and the test checks each input with its sign flipped too.
- `e4m3_encode.bin` leaves out the inputs that ml_dtypes turns from a number
  into NaN (|x| > 464 and inf): engine/numfmt.c saturates those to +/-448 on
  purpose, and the test checks that by hand.

Layout (little-endian): `"NFX1"`, u32 count, u32 in_size, u32 out_size,
then count*in_size bytes of inputs, then count*out_size bytes of outputs;
in_size 0 means entry i's input is the pattern i.

| file | entries | bytes | sha256 (first 16) |
| --- | --- | --- | --- |
{rows}

Total: {total} bytes.
""".format(mld=ml_dtypes.__version__, np=np.__version__,
           py="%d.%d.%d" % sys.version_info[:3], rows="\n".join(lines), total=total)
    with open(os.path.join(outdir, "README.md"), "w") as f:
        f.write(readme)
    for line in lines:
        print(line)
    print("total bytes:", total)


if __name__ == "__main__":
    main()
