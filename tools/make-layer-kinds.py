#!/usr/bin/env python3
# make-layer-kinds.py: small model folders, random weights from a fixed
# seed, for tests/unit/test_layer_kinds.c, which loads them through
# architecture rows that describe layers other than BERT's (models/arch.h's
# enc_layer_kind); nothing is committed.
#
#   make-layer-kinds.py llama OUT [--seed N]
#       a Llama-shaped stack (transformers' LlamaModel tensor names):
#       pre-norm RMSNorm layers and a final norm, split Q/K/V with
#       grouped-query attention (2 key/value heads for 4) and an explicit
#       head_dim (4 x 16 = 64 wide Q on a 48-wide model), rotary positions,
#       causal attention, SwiGLU MLP (split gate and up), no biases, no
#       embedding norm or position table.
#   make-layer-kinds.py qwen3 OUT [--seed N]
#       a Qwen3-shaped stack (model_type "qwen3", Qwen3Model's tensor names,
#       loaded through the registry's row, models/qwen3.c): the llama shape
#       plus a per-head RMSNorm of Q and K before the rotary positions, and
#       last-token pooling (1_Pooling/config.json's pooling_mode_lasttoken).
#   make-layer-kinds.py fused OUT [--seed N]
#       a post-norm LayerNorm stack on rotary positions (NomicBERT-like):
#       one fused Wqkv with its bias, a fused [gate | up] GeGLU first MLP
#       GEMM with its bias, the other GEMMs without biases, bidirectional
#       attention, an embedding LayerNorm, head size 24.
#
# --bf16 rounds every weight to a BF16 value first (the reference is of the
# rounded weights); --shards N (with --bf16) writes them as BF16 in N
# shards with model.safetensors.index.json, as LLM checkpoints come, in
# place of one F32 model.safetensors: both forms hold the same values.
#
# --tokenizer FILE (qwen3) puts that byte-level BPE tokenizer.json in the
# folder in place of the WordPiece vocab.txt, the vocabulary grown to its
# ids, and the reference's sequences are texts it encodes (Hugging Face
# `tokenizers`, the EOS its post-processor appends included), kept in
# reference.json's "texts".
#
# --transformers (llama, qwen3; torch and transformers, e.g. .venv-ref) also
# runs transformers' own LlamaModel / Qwen3Model (float64, eager attention)
# on the folder and prints the largest difference from the numpy hidden
# states; it fails above 1e-9.
#
# Each folder gets config.json, model.safetensors (F32), a WordPiece
# vocab.txt of the right size, modules.json (mean pooling, Normalize) and
# reference.json: token id sequences, the last hidden states and the
# pooled (mean, or last token for qwen3) normalised vectors of a forward written here in numpy
# (float64) from the architectures' definitions (transformers'
# modeling_llama: LlamaRMSNorm, rotate_half, repeat_kv, LlamaMLP; and
# modeling_qwen3's q_norm / k_norm), which
# shares no code with the C encoder.
import argparse
import json
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import write_safetensors  # noqa: E402


def bf16_round(a):
    """float32 values rounded to the nearest BF16 (ties to even), as float32."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype("<u4").view("<f4").reshape(a.shape)


def write_bf16_shards(out, tensors, nshards):
    """tensors (BF16-exact float32) as BF16 in nshards files and the index."""
    names = list(tensors)
    weight_map = {}
    for s in range(nshards):
        part = names[s::nshards]
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, nshards)
        for name in part:
            weight_map[name] = fname
        write_safetensors(os.path.join(out, fname), {n: tensors[n] for n in part}, "BF16")
    write_json(os.path.join(out, "model.safetensors.index.json"),
               {"metadata": {"total_size": sum(t.size * 2 for t in tensors.values())},
                "weight_map": weight_map})


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


# ---- the reference forward (float64) --------------------------------------------

def rms_norm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotary(x, theta):
    """x (len, heads, dh): rotate_half rotary embedding, positions 0..len-1."""
    n, _, dh = x.shape
    inv = 1.0 / theta ** (np.arange(0, dh, 2) / dh)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def attention(q, k, v, causal):
    """q (len, H, dh), k and v (len, KV, dh): softmax(q k^T / sqrt dh) v per head."""
    n, nh, dh = q.shape
    rep = nh // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(dh)
    if causal:
        s = s + np.triu(np.full((n, n), -np.inf), 1)[None]
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    return np.einsum("hij,jhd->ihd", s, v).reshape(n, nh * dh)


def forward(spec, w, ids):
    """One sequence's last hidden states under spec (the row's choices)."""
    c = spec["config"]
    f = {k: v.astype(np.float64) for k, v in w.items()}
    H, KV, dh, eps = c["num_attention_heads"], spec["kv_heads"], spec["head_dim"], spec["eps"]
    n = len(ids)

    def norm(x, name):
        if spec["rms"]:
            return rms_norm(x, f[name + ".weight"], eps)
        return layer_norm(x, f[name + ".weight"], f[name + ".bias"], eps)

    def lin(x, name):
        y = x @ f[name + ".weight"].T
        return y + f[name + ".bias"] if name + ".bias" in f else y

    x = f[spec["embed"]][ids]
    if spec.get("emb_norm"):
        x = norm(x, spec["emb_norm"])
    for layer in range(c["num_hidden_layers"]):
        p = f"{spec['layers']}.{layer}."

        def attn(h):
            if spec["fused_qkv"]:
                qkv = lin(h, p + spec["fused_qkv"])
                q, k, v = np.split(qkv, [H * dh, H * dh + KV * dh], axis=1)
            else:
                q, k, v = (lin(h, p + spec[t]) for t in ("q", "k", "v"))
            q, k, v = q.reshape(n, H, dh), k.reshape(n, KV, dh), v.reshape(n, KV, dh)
            if spec.get("qk_norm"):
                q = rms_norm(q, f[p + "self_attn.q_norm.weight"], eps)
                k = rms_norm(k, f[p + "self_attn.k_norm.weight"], eps)
            q, k = rotary(q, spec["theta"]), rotary(k, spec["theta"])
            return lin(attention(q, k, v, spec["causal"]), p + spec["o"])

        def mlp(h):
            act = silu if spec["silu"] else gelu
            if spec["gate"]:
                g, u = lin(h, p + spec["gate"]), lin(h, p + spec["up"])
            else:
                g, u = np.split(lin(h, p + spec["up"]), 2, axis=1)
            return lin(act(g) * u, p + spec["down"])

        if spec["pre"]:
            x = x + attn(norm(x, p + spec["ln1"]))
            x = x + mlp(norm(x, p + spec["ln2"]))
        else:
            x = norm(x + attn(x), p + spec["ln1"])
            x = norm(x + mlp(x), p + spec["ln2"])
    if spec.get("final"):
        x = norm(x, spec["final"])
    return x


# ---- the two folders --------------------------------------------------------------

def llama(rng):
    V, h, L, H, KV, dh, I = 101, 48, 2, 4, 2, 16, 96
    config = {"architectures": ["LlamaModel"], "model_type": "test-llama", "vocab_size": V,
              "hidden_size": h, "num_hidden_layers": L, "num_attention_heads": H,
              "num_key_value_heads": KV, "head_dim": dh, "intermediate_size": I,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
    w = {"embed_tokens.weight": rng.normal(0, 1, (V, h)), "norm.weight": rng.normal(1, 0.1, h)}
    for layer in range(L):
        p = f"layers.{layer}."
        for name, shape in (("self_attn.q_proj", (H * dh, h)), ("self_attn.k_proj", (KV * dh, h)),
                            ("self_attn.v_proj", (KV * dh, h)), ("self_attn.o_proj", (h, H * dh)),
                            ("mlp.gate_proj", (I, h)), ("mlp.up_proj", (I, h)),
                            ("mlp.down_proj", (h, I))):
            w[p + name + ".weight"] = rng.normal(0, 1 / math.sqrt(shape[1]), shape)
        w[p + "input_layernorm.weight"] = rng.normal(1, 0.1, h)
        w[p + "post_attention_layernorm.weight"] = rng.normal(1, 0.1, h)
    spec = {"config": config, "kv_heads": KV, "head_dim": dh, "eps": 1e-6, "rms": True,
            "embed": "embed_tokens.weight", "final": "norm", "layers": "layers",
            "fused_qkv": None, "q": "self_attn.q_proj", "k": "self_attn.k_proj",
            "v": "self_attn.v_proj", "o": "self_attn.o_proj", "theta": 10000.0, "causal": True,
            "silu": True, "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj",
            "pre": True, "ln1": "input_layernorm", "ln2": "post_attention_layernorm"}
    return config, w, spec


def qwen3(rng):
    config, w, spec = llama(rng)
    config.update({"architectures": ["Qwen3Model"], "model_type": "qwen3",
                   "rope_scaling": None, "use_sliding_window": False, "tie_word_embeddings": True})
    dh = config["head_dim"]
    for layer in range(config["num_hidden_layers"]):
        for n in ("q_norm", "k_norm"):
            w[f"layers.{layer}.self_attn.{n}.weight"] = rng.normal(1, 0.2, dh)
    spec.update({"qk_norm": True, "pool": "last"})
    return config, w, spec


def fused(rng):
    V, h, L, H, I = 97, 72, 2, 3, 80
    dh = h // H
    config = {"architectures": ["TestFusedModel"], "model_type": "test-fused", "vocab_size": V,
              "hidden_size": h, "num_hidden_layers": L, "num_attention_heads": H,
              "intermediate_size": I, "max_position_embeddings": 128, "layer_norm_eps": 1e-12,
              "rope_theta": 1000.0, "hidden_act": "gelu"}
    w = {"embeddings.word_embeddings.weight": rng.normal(0, 1, (V, h)),
         "embeddings.LayerNorm.weight": rng.normal(1, 0.1, h),
         "embeddings.LayerNorm.bias": rng.normal(0, 0.1, h)}
    for layer in range(L):
        p = f"encoder.layers.{layer}."
        w[p + "attn.Wqkv.weight"] = rng.normal(0, 1 / math.sqrt(h), (3 * h, h))
        w[p + "attn.Wqkv.bias"] = rng.normal(0, 0.1, 3 * h)
        w[p + "attn.out_proj.weight"] = rng.normal(0, 1 / math.sqrt(h), (h, h))
        w[p + "mlp.fc1.weight"] = rng.normal(0, 1 / math.sqrt(h), (2 * I, h))
        w[p + "mlp.fc1.bias"] = rng.normal(0, 0.1, 2 * I)
        w[p + "mlp.fc2.weight"] = rng.normal(0, 1 / math.sqrt(I), (h, I))
        for n in ("norm1", "norm2"):
            w[p + n + ".weight"] = rng.normal(1, 0.1, h)
            w[p + n + ".bias"] = rng.normal(0, 0.1, h)
    spec = {"config": config, "kv_heads": H, "head_dim": dh, "eps": 1e-12, "rms": False,
            "embed": "embeddings.word_embeddings.weight", "emb_norm": "embeddings.LayerNorm",
            "layers": "encoder.layers", "fused_qkv": "attn.Wqkv", "o": "attn.out_proj",
            "theta": 1000.0, "causal": False, "silu": False, "gate": None, "up": "mlp.fc1",
            "down": "mlp.fc2", "pre": False, "ln1": "norm1", "ln2": "norm2"}
    return config, w, spec


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("kind", choices=["llama", "qwen3", "fused"])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--shards", type=int, default=0)
    ap.add_argument("--tokenizer", default="")
    ap.add_argument("--transformers", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    config, w, spec = {"llama": llama, "qwen3": qwen3, "fused": fused}[a.kind](rng)
    tok = None
    if a.tokenizer:
        import tokenizers
        tok = tokenizers.Tokenizer.from_file(a.tokenizer)
        grown = tok.get_vocab_size(with_added_tokens=True) + 3  # config rounds it up, as Qwen3's
        extra = grown - config["vocab_size"]
        config["vocab_size"] = grown
        w[spec["embed"]] = np.concatenate([w[spec["embed"]],
                                           rng.normal(0, 1, (extra, config["hidden_size"]))])
    w = {k: v.astype(np.float32) for k, v in w.items()}
    if a.bf16:
        w = {k: bf16_round(v) for k, v in w.items()}
    os.makedirs(a.out, exist_ok=True)
    if a.bf16 and a.shards > 0:
        write_bf16_shards(a.out, w, a.shards)
    else:
        write_safetensors(os.path.join(a.out, "model.safetensors"), w)
    write_json(os.path.join(a.out, "config.json"), config)
    V = config["vocab_size"]
    if tok:
        shutil.copy(a.tokenizer, os.path.join(a.out, "tokenizer.json"))
    else:
        with open(os.path.join(a.out, "vocab.txt"), "w") as f:
            f.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n" + "".join(f"w{i}\n" for i in range(V - 4)))
    write_json(os.path.join(a.out, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    if spec.get("pool") == "last":
        os.makedirs(os.path.join(a.out, "1_Pooling"), exist_ok=True)
        write_json(os.path.join(a.out, "1_Pooling", "config.json"),
                   {"word_embedding_dimension": config["hidden_size"],
                    "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
                    "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
                    "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True,
                    "include_prompt": True})
    # lengths that take both attention kernels (the own one below 64 tokens at AVX2)
    lengths = [1, 5, 17, 70]
    texts = ["Hello", "The cat sat on the mat.", "東京の天気は晴れ 🌞, 42 degrees!",
             "def f(x):\n    return x * 2  # doubles"]
    ids, hidden, vectors = [], [], []
    for k, n in enumerate(lengths):
        seq = ([int(t) for t in tok.encode(texts[k]).ids] if tok
               else [int(t) for t in rng.integers(4, V, n)])
        x = forward(spec, w, np.array(seq))
        v = x[-1] if spec.get("pool") == "last" else x.mean(0)
        ids.append(seq)
        hidden.append(x.ravel().tolist())
        vectors.append((v / max(np.linalg.norm(v), 1e-12)).tolist())
    ref = {"hidden": config["hidden_size"], "ids": ids, "hidden_states": hidden,
           "vectors": vectors}
    if tok:
        ref["texts"] = texts
    write_json(os.path.join(a.out, "reference.json"), ref)
    if a.transformers and check_transformers(a.out, config, ref) > 1e-9:
        raise SystemExit("transformers disagrees with the numpy reference")


def check_transformers(out, config, ref):
    """transformers' model of the folder's architecture against the numpy
    hidden states of every reference sequence."""
    import torch
    import transformers

    cls = {"LlamaModel": transformers.LlamaModel, "Qwen3Model": transformers.Qwen3Model}
    arch = config["architectures"][0]
    if arch not in cls:
        raise SystemExit("--transformers: no transformers model for " + arch)
    if arch == "LlamaModel":  # transformers knows the shape as "llama"
        with open(os.path.join(out, "config.json")) as f:
            c = json.load(f)
        c["model_type"] = "llama"
        write_json(os.path.join(out, "config.json"), c)
    model = cls[arch].from_pretrained(out, dtype=torch.float64, attn_implementation="eager").eval()
    # transformers computes the rotary angles, each RMSNorm and the
    # attention's softmax in float32 whatever the dtype (about 1e-7 off);
    # here all in float64, as the numpy forward, so that what differs is
    # what the model does
    softmax = torch.nn.functional.softmax
    torch.nn.functional.softmax = lambda x, dim=None, dtype=None, **kw: softmax(x, dim=dim)
    for mod in model.modules():
        if type(mod).__name__.endswith("RMSNorm"):
            mod.forward = (lambda m: lambda x: m.weight * x / torch.sqrt(
                (x * x).mean(-1, keepdim=True) + m.variance_epsilon))(mod)
    dh, theta = config["head_dim"], config["rope_theta"]
    inv = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)

    def rotary64(x, position_ids):
        ang = position_ids[..., None].to(torch.float64) * inv
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    model.rotary_emb.forward = rotary64
    worst = 0.0
    with torch.no_grad():
        for ids, hs in zip(ref["ids"], ref["hidden_states"]):
            got = model(input_ids=torch.tensor([ids])).last_hidden_state[0].reshape(-1)
            worst = max(worst, float((got - torch.tensor(hs, dtype=torch.float64)).abs().max()))
    print("transformers %s (float64) against the numpy forward: %d sequences, largest "
          "|hidden state difference| %.3g" % (arch, len(ref["ids"]), worst))
    if arch == "LlamaModel":
        c["model_type"] = "test-llama"
        write_json(os.path.join(out, "config.json"), c)
    return worst


if __name__ == "__main__":
    main()
