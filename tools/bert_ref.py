"""bert_ref.py: a forward pass of BERT-shaped encoders (BERT, XLM-RoBERTa)
written in numpy float64 from transformers' modeling_bert / modeling_roberta,
for the tools that make test model folders with their own reference outputs
(make-cross-encoder.py, make-xlmr.py): independent of the C code.

The weights are a dict name -> array under a prefix ("bert.", "roberta.");
positions start at pos0 (0 for BERT; RoBERTa's pad_token_id + 1)."""
import math

import numpy as np


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def hidden_states(w, cfg, ids, types, prefix, pos0=0):
    """The last layer's output (len(ids), hidden) of one sequence."""
    g = lambda n: w[prefix + n].astype(np.float64)  # noqa: E731
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    eps = cfg.get("layer_norm_eps", 1e-12)
    dh, n = h // nh, len(ids)
    x = g("embeddings.word_embeddings.weight")[ids]
    x = x + g("embeddings.position_embeddings.weight")[pos0:pos0 + n]
    x = x + g("embeddings.token_type_embeddings.weight")[types]
    x = layer_norm(x, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"), eps)
    for l in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % l
        lin = lambda v, m: v @ g(p + m + ".weight").T + g(p + m + ".bias")  # noqa: E731
        q, k, v = (lin(x, "attention.self." + m).reshape(n, nh, dh).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = (s / s.sum(-1, keepdims=True)) @ v
        a = lin(ctx.transpose(1, 0, 2).reshape(n, h), "attention.output.dense")
        x = layer_norm(x + a, g(p + "attention.output.LayerNorm.weight"),
                       g(p + "attention.output.LayerNorm.bias"), eps)
        m = lin(gelu(lin(x, "intermediate.dense")), "output.dense")
        x = layer_norm(x + m, g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias"), eps)
    return x


def head(w, first, dense, out):
    """A classifier's logits from the first token's state: tanh(dense), then
    out (transformers' BertPooler + classifier, RobertaClassificationHead)."""
    g = lambda n: w[n].astype(np.float64)  # noqa: E731
    pooled = np.tanh(first @ g(dense + ".weight").T + g(dense + ".bias"))
    return pooled @ g(out + ".weight").T + g(out + ".bias")
