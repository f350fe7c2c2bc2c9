#!/usr/bin/env python3
"""make-seeds.py: writes the committed seed corpora of the libFuzzer
harnesses (tests/fuzz/corpus/<target>/) and their dictionaries
(tests/fuzz/<target>.dict). The seeds are small real inputs: configs like
config/mantissa.json, tiny safetensors files, the small PyTorch checkpoints
of tests/fixtures/torch (real torch.save output), texts with accents, CJK and
emoji, and OpenAI / KServe request bodies as clients send them; a few are
near-misses (one field wrong) so the fuzzer starts at the error paths too.

Run from anywhere: python3 tests/fuzz/make-seeds.py (standard library only).
It rewrites the corpus folders; the output is deterministic.
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def write_corpus(target, items):
    d = os.path.join(CORPUS, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in items:
        if isinstance(data, str):
            data = data.encode("utf-8")
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def write_dict(target, tokens):
    with open(os.path.join(HERE, target + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary for fuzz_%s (written by make-seeds.py)\n" % target)
        for t in tokens:
            esc = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\x%02x" % ord(c)
                          for c in t)
            f.write('"%s"\n' % esc)


def j(obj):
    return json.dumps(obj, ensure_ascii=False)


# ---- config -----------------------------------------------------------------

def model(name="minilm", variants=None, **kw):
    m = {"name": name, "path": "models/all-MiniLM-L6-v2"}
    m.update(kw)
    m["variants"] = variants or [{"name": "fp32", "precision": "fp32", "traffic": 100}]
    return m


with open(os.path.join(HERE, "..", "..", "config", "mantissa.json"), "rb") as f:
    default_config = f.read()

configs = [
    ("default.json", default_config),
    ("minimal.json", j({"models": [model()]})),
    ("ab_split.json", j({"server": {"listen": "127.0.0.1:9000"}, "models": [model(variants=[
        {"name": "int8", "precision": "int8", "calibration": "absmax", "traffic": 90},
        {"name": "fp16", "precision": "fp16", "traffic": 10}])]})),
    ("percentile.json", j({"models": [model(variants=[
        {"name": "p", "precision": "int8", "calibration": "percentile", "percentile": 99.9},
        {"name": "m", "precision": "fp8", "calibration": "mse", "weights": "w.safetensors"}])]})),
    ("server_all.json", j({"server": {
        "listen": "[::1]:8080", "http_threads": 2, "max_body_bytes": 1048576,
        "max_inputs": 64, "engine_threads": 0, "request_timeout_ms": 5000,
        "engine_workers": 1, "max_json_depth": 32, "max_input_bytes": 4096,
        "shutdown_grace_ms": 20000, "drain_delay_ms": 5000, "connection_limit": 100,
        "connection_timeout_s": 30, "log_level": "warn", "log_format": "text"},
        "models": [model(device="cpu", max_seq_len=128, truncate=False,
                         batching={"max_batch_size": 32, "max_batch_tokens": 8192,
                                   "max_queue_delay_us": "auto", "latency_target_ms": 50,
                                   "max_queue": 256})]})),
    ("two_models.json", j({"models": [model("a"), model("b", device="auto")]})),
    ("bad_precision.json", j({"models": [model(variants=[{"name": "x", "precision": "int4"}])]})),
    ("dup_key.json", '{"models": [], "models": []}'),
    ("unknown_field.json", j({"server": {"listne": ":8080"}, "models": [model()]})),
    ("truncated.json", default_config[: len(default_config) // 2]),
]
write_corpus("config", configs)
write_dict("config", [
    "server", "models", "listen", "http_threads", "max_body_bytes", "max_inputs",
    "engine_threads", "request_timeout_ms", "engine_workers", "max_json_depth",
    "max_input_bytes", "shutdown_grace_ms", "drain_delay_ms", "connection_limit",
    "connection_timeout_s", "log_level", "log_format", "json", "text", "api_keys_file",
    "tls_cert", "tls_key",
    "name", "path", "device", "max_seq_len", "truncate", "batching", "variants",
    "max_batch_size", "max_batch_tokens", "max_queue_delay_us", "latency_target_ms",
    "max_queue", "precision", "calibration", "percentile", "traffic", "weights",
    "fp32", "tf32", "fp16", "bf16", "int8", "fp8", "absmax", "mse", "auto", "cpu", "cuda",
    "debug", "info", "warn", "error", "off", "0.0.0.0:8080", "[::1]:", ":0",
    "true", "false", "null", "{", "}", "[", "]", ":", ",", '"', "1e308", "-0", "\\u0000",
])

# ---- safetensors ------------------------------------------------------------

def safetensors(tensors, metadata=None, pad_to=8, raw_header=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, data, off = {}, b"", 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":"))
    h = h.encode()
    if pad_to:
        h += b" " * (-(8 + len(h)) % pad_to)
    return struct.pack("<Q", len(h)) + h + data


f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
st_seeds = [
    ("f32_2x2.st-seed", safetensors([("w", "F32", [2, 2], f32)])),
    ("mixed.st-seed", safetensors([
        ("bias", "F16", [3], struct.pack("<3e", 1.0, 0.5, -1.0)),
        ("q", "I8", [2, 3], bytes([1, 255, 3, 128, 127, 0])),
        ("scale", "F32", [2], struct.pack("<2f", 0.1, 0.2)),
        ("fp8", "F8_E4M3", [4], bytes([0x38, 0xb8, 0x7e, 0x00])),
        ("bf", "BF16", [2], bytes([0x80, 0x3f, 0x00, 0x40]))],
        metadata={"format": "pt", "mantissa.precision": "int8"})),
    ("empty.st-seed", safetensors([])),
    ("scalar_and_zero.st-seed", safetensors([
        ("s", "F64", [], struct.pack("<d", 2.5)), ("z", "F32", [0, 4], b""),
        ("u", "U64", [1], struct.pack("<Q", 7))])),
    ("all_dtypes.st-seed", safetensors([
        ("b", "BOOL", [1], b"\x01"), ("u8", "U8", [1], b"\x02"), ("u16", "U16", [1], b"\x03\x00"),
        ("i16", "I16", [1], b"\xff\xff"), ("u32", "U32", [1], b"\x04\0\0\0"),
        ("i32", "I32", [1], b"\xfe\xff\xff\xff"), ("i64", "I64", [1], b"\x05" + b"\0" * 7),
        ("e5", "F8_E5M2", [1], b"\x3c")])),
    ("overlap.st-seed", safetensors([], raw_header=json.dumps({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})) + b"\0" * 12),
    ("short_header.st-seed", struct.pack("<Q", 1000) + b'{"a":'),
    ("unicode_name.st-seed", safetensors([("enc\u00e9.w\u4e2d", "U8", [2], b"ab")])),
]
write_corpus("safetensors", st_seeds)
write_dict("safetensors", [
    "dtype", "shape", "data_offsets", "__metadata__", "F32", "F16", "BF16", "F64", "I8", "U8",
    "I16", "U16", "I32", "U32", "I64", "U64", "BOOL", "F8_E4M3", "F8_E5M2", "{", "}", "[", "]",
    ":", ",", '"', "18446744073709551615", "9007199254740992", "-1", "0",
    "\x08\x00\x00\x00\x00\x00\x00\x00", "\xff\xff\xff\xff\xff\xff\xff\xff",
])

# ---- torch_pt -----------------------------------------------------------------
# The PyTorch checkpoints torch.save wrote (tests/fixtures/torch/, made by
# tools/make-torch-fixtures.py, committed): good ones and near-misses (a
# non-contiguous tensor, a nested state dict, the legacy format).

TORCH_FIX = os.path.join(HERE, "..", "fixtures", "torch")
pt_seeds = []
for d in (TORCH_FIX, os.path.join(TORCH_FIX, "sharded")):
    for name in sorted(os.listdir(d)):
        if name.endswith((".pt", ".bin")):
            with open(os.path.join(d, name), "rb") as f:  # seeds are named .pt: the
                pt_seeds.append((name.replace(".bin", ".pt"), f.read()))  # fuzzer reads bytes
write_corpus("torch_pt", pt_seeds)
write_dict("torch_pt", [
    "PK\x03\x04", "PK\x01\x02", "PK\x05\x06", "PK\x06\x06", "PK\x06\x07", "\xff\xff\xff\xff",
    "\x01\x00\x18\x00", "data.pkl", "data/", "byteorder", "little", "version",
    "ctorch._utils\n_rebuild_tensor_v2\n", "ctorch._utils\n_rebuild_tensor_v3\n",
    "ctorch._utils\n_rebuild_parameter\n", "ccollections\nOrderedDict\n",
    "ctorch\nFloatStorage\n", "ctorch\nHalfStorage\n", "ctorch\nBFloat16Storage\n",
    "ctorch.storage\nUntypedStorage\n", "ctorch\nfloat8_e4m3fn\n", "storage", "cpu",
    "\x80\x02", "\x80\x04\x95", "(", ")", "}", "]", "t", "R", "Q", "s", "u", "a", "e", "b", ".",
    "\x85", "\x86", "\x87", "\x88", "\x89", "\x8a\x08", "\x8c", "\x93", "\x94", "h", "q",
    "j", "r", "K", "M", "J", "X",
])

# ---- tokenizer ----------------------------------------------------------------

texts = [
    ("ascii.txt", "A man is playing a guitar."),
    ("accents.txt", "Café déjà vu, naïve façade; Ångström — Øresund. ÉCOLE"),
    ("cjk.txt", "我爱北京天安门。日本語のテキスト、カタカナ。한국어 문장입니다."),
    ("emoji.txt", "I 👍🏽 this! family: 👨‍👩‍👧 flags 🇩🇪 keycap 1️⃣"),
    ("punct.txt", "Hello!!! What?? ... (yes) [no] {maybe} \"quoted\" 'single' #tag @user $5 %"),
    ("control.txt", "tab\there\nnew line\r\x00nul\x7fdel\u200bzero-width\ufeffbom\ufffd"),
    ("combining.txt", "e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 \u05e9\u05c1\u05b8"),
    ("longword.txt", "x" * 120 + " " + "supercalifragilistic" * 6),
    ("rtl.txt", "مرحبا بالعالم שלום עולם"),
    ("fullwidth.txt", "ＡＢＣ１２３！ ｶﾀｶﾅ"),
    ("long.txt", " ".join(["the quick brown fox jumps over the lazy dog"] * 40)),
    ("wordpiece.txt", "unaffable tokenization preprocessing embeddings"),
    ("invalid_overlong.seed", b"ok \xc0\x80 bad"),
    ("invalid_surrogate.seed", b"\xed\xa0\x80"),
    ("invalid_truncated.seed", b"abc \xe6\x88"),
    ("invalid_above.seed", b"\xf4\x90\x80\x80"),
    ("empty.txt", ""),
]
write_corpus("tokenizer", texts)

# ---- request bodies -------------------------------------------------------------

openai = [
    ("string.json", j({"model": "minilm", "input": "A man is playing a guitar."})),
    ("array.json", j({"model": "minilm", "input": ["first text", "second text", "Café 我 👍"]})),
    ("base64.json", j({"model": "minilm", "input": ["hello"], "encoding_format": "base64"})),
    ("float_dims_user.json", j({"model": "minilm@fp32", "input": "x", "encoding_format": "float",
                                "dimensions": 384, "user": "user-123"})),
    ("strict_long.json", j({"model": "strict", "input": "word " * 40})),
    ("null_fields.json", '{"model":"minilm","input":"a","encoding_format":null,"dimensions":null}'),
    ("escapes.json", '{"model":"minilm","input":"\\ud83d\\ude00 \\u00e9\\n\\t\\"q\\""}'),
    ("token_ids.json", j({"model": "minilm", "input": [[101, 2023, 102]]})),
    ("too_many.json", j({"model": "minilm", "input": ["a"] * 5})),
    ("empty_array.json", j({"model": "minilm", "input": []})),
    ("unknown_model.json", j({"model": "gpt", "input": "x"})),
    ("unknown_variant.json", j({"model": "minilm@int4", "input": "x"})),
    ("unknown_field.json", j({"model": "minilm", "input": "x", "temperature": 1})),
    ("bad_dims.json", j({"model": "minilm", "input": "x", "dimensions": 128})),
    ("invalid_utf8.json", b'{"model":"minilm","input":"bad \xc3\x28 byte"}'),
]
write_corpus("openai", openai)

kserve_bodies = [
    ("flat.json", 0, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                    "data": ["A man is playing a guitar.", "Café 我 👍"]}]})),
    ("nested.json", 2, j({"id": "req-1", "inputs": [{"name": "text", "datatype": "BYTES",
                                                     "shape": [2, 1], "data": [["a"], ["b"]]}],
                          "outputs": [{"name": "embedding"}], "parameters": {"x": 1}})),
    ("strict_long.json", 1, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                           "data": ["word " * 40]}]})),
    ("version2.json", 4, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                        "data": ["x"]}]})),
    ("shape_mismatch.json", 0, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3],
                                              "data": ["x"]}]})),
    ("bad_dtype.json", 0, j({"inputs": [{"name": "text", "datatype": "FP32", "shape": [1],
                                         "data": [1.0]}]})),
    ("too_many.json", 0, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [5],
                                        "data": ["a"] * 5}]})),
    ("bad_shape.json", 0, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1.5, -1],
                                         "data": ["a"]}]})),
    ("binary_output.json", 0, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                             "data": ["a", "b"]}],
                                 "outputs": [{"name": "embedding",
                                              "parameters": {"binary_data": True}}]})),
    ("binary_output_all.json", 2, j({"inputs": [{"name": "text", "datatype": "BYTES",
                                                 "shape": [1], "data": ["a"]}],
                                     "parameters": {"binary_data_output": True}})),
    ("binary_params.json", 0, j({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                             "data": ["a"], "parameters": {"binary_data_size": 5}}],
                                 "outputs": [{"name": "embedding",
                                              "parameters": {"binary_data": True}}]})),
]


def kserve_binary(sel, texts, form=0, outputs_binary=True):
    """A binary-extension request as fuzz_kserve.c reads it: byte 0 (bit 3 set,
    bits 4-5 the Inference-Header-Content-Length form), the JSON header's
    length (2 bytes, little-endian), the header, then the BYTES elements."""
    elems = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    hdr = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)],
                       "parameters": {"binary_data_size": len(elems)}}]}
    if outputs_binary:
        hdr["outputs"] = [{"name": "embedding", "parameters": {"binary_data": True}}]
    h = j(hdr).encode()
    return bytes([sel | 8 | form << 4]) + struct.pack("<H", len(h)) + h + elems


kserve_binary_seeds = [
    ("binary_input.seed", kserve_binary(0, [b"A man is playing a guitar.", "Caf\u00e9".encode()])),
    ("binary_input_json_out.seed", kserve_binary(2, [b"a", b"", b"b"], outputs_binary=False)),
    ("binary_input_strict.seed", kserve_binary(1, [b"word " * 40])),
    ("binary_input_bad_utf8.seed", kserve_binary(0, [b"bad \xc3\x28"])),
    ("binary_ihcl_junk.seed", kserve_binary(0, [b"x"], form=1)),
    ("binary_ihcl_overflow.seed", kserve_binary(0, [b"x"], form=2)),
]
write_corpus("kserve", [(n, bytes([sel]) + b.encode()) for n, sel, b in kserve_bodies] +
             kserve_binary_seeds)

# json_body: byte 0 = bit 7 OpenAI, low 3 bits the Content-Type (fuzz_json_body.c)
json_body = [(n, bytes([0x81]) + (b if isinstance(b, bytes) else b.encode()))
             for n, b in openai[:6]]
json_body += [("k_" + n, bytes([0x01]) + b.encode()) for n, _, b in kserve_bodies[:3]]
json_body += [
    ("dup_nested.json", b"\x81" + b'{"a":{"b":1,"b":2}}'),
    ("deep.json", b"\x01" + b'{"a":' + b"[" * 70 + b"]" * 70 + b"}"),
    ("edge_depth64.json", b"\x01" + b"{\"a\":" + b"[" * 63 + b"]" * 63 + b"}"),
    ("octet.json", b"\x86" + b'{"model":"minilm","input":"x"}'),
    ("form_type.json", b"\x84" + b'{"model":"minilm","input":"x"}'),
    ("not_object.json", b"\x01" + b'["a"]'),
    ("empty.json", b"\x81"),
    ("whitespace.json", b"\x82" + b' \r\n\t{ "a" : [ 1 , -0.5e+3 , true , false , null ] } \n'),
]
write_corpus("json_body", json_body)

json_tokens = [
    "{", "}", "[", "]", ":", ",", '"', "true", "false", "null", "\\u0000", "\\ud83d\\ude00",
    "\\ud800", "\\\\", "-0", "1e999", "0.5", "-1", "1.5",
    "input", "model", "encoding_format", "base64", "float", "dimensions", "user", "minilm",
    "strict", "@fp32", "@int8", "inputs", "outputs", "name", "datatype", "BYTES", "FP32",
    "shape", "data", "parameters", "id", "text", "embedding", "binary_data", "binary_data_size",
]
for t in ("json_body", "openai", "kserve"):
    write_dict(t, json_tokens)

# ---- gRPC: KServe v2 messages (fuzz_grpc.c) ----------------------------------
# The protobuf wire format, written by hand (field numbers of
# server/api/kserve.proto): byte 0 picks the method, as fuzz_grpc.c reads it.

def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_len(field, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return varint(field << 3 | 2) + varint(len(data)) + data


def pb_int(field, n):
    return varint(field << 3) + varint(n)


def bytes_tensor(texts):
    return b"".join(struct.pack("<I", len(t)) + t for t in texts)


def param(key, kind, value):
    """A map<string, InferParameter> entry: kind 1 bool, 2 int64, 3 string."""
    v = pb_int(kind, value) if kind in (1, 2) else pb_len(kind, value)
    return pb_len(1, key) + pb_len(2, v)


def infer_input(name="text", datatype="BYTES", shape=(1,), contents=None, params=b""):
    m = pb_len(1, name) + pb_len(2, datatype)
    m += pb_len(3, b"".join(varint(d) for d in shape))  # packed int64
    if params:
        m += pb_len(4, params)
    if contents is not None:
        m += pb_len(5, b"".join(pb_len(8, t) for t in contents))  # bytes_contents
    return m


def infer(model="minilm", inputs=(), raw=(), version="", rid="", params=()):
    m = pb_len(1, model) + (pb_len(2, version) if version else b"") + (pb_len(3, rid) if rid else b"")
    m += b"".join(pb_len(4, p) for p in params)
    m += b"".join(pb_len(5, i) for i in inputs)
    m += b"".join(pb_len(7, r) for r in raw)
    return m


GUITAR = [b"A man is playing a guitar.", "Caf\u00e9 \u6771\u4eac".encode()]
grpc_seeds = [
    ("infer_raw.seed", 0, infer(inputs=[infer_input(shape=(2,))], raw=[bytes_tensor(GUITAR)],
                                rid="r1")),
    ("infer_contents.seed", 0, infer(inputs=[infer_input(shape=(2, 1), contents=GUITAR)])),
    ("infer_truncate_strict.seed", 0, infer(model="strict", inputs=[infer_input()],
                                            raw=[bytes_tensor([b"word " * 40])],
                                            params=[param("truncate", 1, 0)])),
    ("infer_timeout.seed", 0, infer(inputs=[infer_input()], raw=[bytes_tensor([b"x"])],
                                    params=[param("timeout", 2, 1000000)])),
    ("infer_version.seed", 0, infer(version="1", inputs=[infer_input()],
                                    raw=[bytes_tensor([b"x"])])),
    ("infer_bad_version.seed", 0, infer(version="2", inputs=[infer_input()],
                                        raw=[bytes_tensor([b"x"])])),
    ("infer_empty_text.seed", 0, infer(inputs=[infer_input()], raw=[bytes_tensor([b""])])),
    ("infer_short_raw.seed", 0, infer(inputs=[infer_input()], raw=[b"\x09\x00\x00\x00ab"])),
    ("infer_two_raw.seed", 0, infer(inputs=[infer_input()], raw=[b"", b""])),
    ("infer_no_data.seed", 0, infer(inputs=[infer_input()])),
    ("infer_fp32.seed", 0, infer(inputs=[infer_input(datatype="FP32")], raw=[b"\0" * 4])),
    ("infer_too_many.seed", 0, infer(inputs=[infer_input(shape=(5,))],
                                     raw=[bytes_tensor([b"a"] * 5)])),
    ("infer_slash.seed", 0, infer(model="a/b", inputs=[infer_input()],
                                  raw=[bytes_tensor([b"x"])])),
    ("ready.seed", 1, pb_len(1, "minilm")),
    ("ready_unknown.seed", 1, pb_len(1, "nope") + pb_len(2, "1")),
    ("metadata.seed", 2, pb_len(1, "minilm")),
    ("config.seed", 3, pb_len(1, "strict") + pb_len(2, "1")),
    ("stats_all.seed", 4, b""),
    ("stats_one.seed", 4, pb_len(1, "minilm")),
    ("garbage.seed", 0, b"\xff\xff\xff\xff\x0f"),
    ("long_length.seed", 0, b"\x0a\xff\x01abc"),
]
write_corpus("grpc", [(n, bytes([k]) + m) for n, k, m in grpc_seeds])

print("make-seeds: wrote", ", ".join(sorted(os.listdir(CORPUS))))
