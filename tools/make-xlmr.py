#!/usr/bin/env python3
# make-xlmr.py: XLM-RoBERTa model folders for the tests of the
# "xlm-roberta" row (models/xlm_roberta.c), made here since no XLM-R model
# can be downloaded: small random weights from a seed at XLM-R's layout
# ("roberta." prefix, one token type, positions from pad_token_id + 1,
# layer_norm_eps 1e-5) around a SentencePiece Unigram tokenizer.json made
# by tools/make-unigram-tokenizer.py (XLM-R's specials and post-processor).
# Nothing is committed.
#
#   make-xlmr.py TOKENIZER_JSON OUT [--seed N] [--shape test|mminilm] [--transformers]
#
# --shape mminilm: the shapes of the multilingual MiniLM rerankers
# (cross-encoder/mmarco-mMiniLMv2-L12-H384-v1: 12 layers, hidden 384, 12
# heads, 512 positions; weights drawn at a smaller scale so that attention
# does not saturate), for bench/rerank_peers.py; the default "test" is the
# tiny shape the tests use.
# OUT/embed: XLMRobertaModel with CLS pooling and Normalize (bge-m3's dense
# output); OUT/m3: the same with bge-m3's sparse and ColBERT heads beside it
# (sparse_linear.pt, colbert_linear.pt: torch.save files made by
# tools/make-m3-heads.py and committed in tests/fixtures/bge-m3-heads);
# OUT/rerank: XLMRobertaForSequenceClassification with one label (the
# bge-reranker shape). OUT/reference.json: texts and pairs, their ids from
# Hugging Face `tokenizers`, the embedder's normalized CLS vectors, bge-m3's
# lexical weights ({id: weight}) and ColBERT vectors, and the reranker's
# logits, from a numpy float64 forward (tools/bert_ref.py; the heads read
# by tools/torch_pt.py). --transformers (torch and transformers, e.g.
# .venv-ref) also runs transformers' own XLMRobertaModel /
# ...ForSequenceClassification on the folders, and --flagembedding
# FlagEmbedding's BGEM3FlagModel (the reference implementation of bge-m3's
# three outputs) on OUT/m3, and prints the largest differences.
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_ref  # noqa: E402
import torch_pt  # noqa: E402
from st_io import write_safetensors  # noqa: E402

TEXTS = ["The cat sleeps on the sofa.", "Кошка спит на диване.", "猫はソファで寝ている。",
         "Le chat dort sur le canapé.", "Die Katze schläft auf dem Sofa.",
         "القطة تنام على الأريكة", "고양이가 소파에서 잔다", "एक बिल्ली सोफे पर सोती है",
         "cats " * 100]
QUERY = "where does the cat sleep"
H, LAYERS, HEADS, INTER, MAXLEN, PAD = 64, 2, 4, 128, 64, 1
SCALE = 0.2  # the weights' standard deviation
SHAPES = {"test": (64, 2, 4, 128, 64, 0.2), "mminilm": (384, 12, 12, 1536, 512, 0.05)}


def config(vocab, arch, labels=None):
    c = {"architectures": [arch], "model_type": "xlm-roberta", "vocab_size": vocab,
         "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
         "intermediate_size": INTER, "hidden_act": "gelu",
         "max_position_embeddings": MAXLEN + PAD + 1, "type_vocab_size": 1,
         "layer_norm_eps": 1e-5, "pad_token_id": PAD, "bos_token_id": 0, "eos_token_id": 2,
         "position_embedding_type": "absolute", "hidden_dropout_prob": 0.1,
         "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02}
    if labels:
        c["id2label"] = {"0": "LABEL_0"}
        c["label2id"] = {"LABEL_0": 0}
    return c


def weights(rng, vocab, cls):
    r = lambda *s: (rng.standard_normal(s) * SCALE).astype(np.float32)  # noqa: E731
    one = lambda n: (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)  # noqa: E731
    p = "roberta."
    w = {p + "embeddings.word_embeddings.weight": r(vocab, H),
         p + "embeddings.position_embeddings.weight": r(MAXLEN + PAD + 1, H),
         p + "embeddings.token_type_embeddings.weight": r(1, H),
         p + "embeddings.LayerNorm.weight": one(H), p + "embeddings.LayerNorm.bias": r(H)}
    for l in range(LAYERS):
        q = p + "encoder.layer.%d." % l
        for name, (o, i) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                             "attention.self.value": (H, H), "attention.output.dense": (H, H),
                             "intermediate.dense": (INTER, H), "output.dense": (H, INTER)}.items():
            w[q + name + ".weight"] = r(o, i)
            w[q + name + ".bias"] = r(o)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[q + ln + ".weight"], w[q + ln + ".bias"] = one(H), r(H)
    if cls:
        w["classifier.dense.weight"], w["classifier.dense.bias"] = r(H, H), r(H)
        w["classifier.out_proj.weight"], w["classifier.out_proj.bias"] = r(1, H) * 5, r(1)
    return w


def write_folder(d, tok_json, cfg, w, embedder):
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), w)
    shutil.copy(tok_json, os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if MAXLEN > SHAPES["test"][4]:
        # as XLM-R folders ship it: the peers' tokenizers (transformers'
        # AutoTokenizer, llama.cpp's converter) take the length limit and
        # the special tokens from here
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>",
                       "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
                       "mask_token": "<mask>", "model_max_length": MAXLEN,
                       "tokenizer_class": "XLMRobertaTokenizer"}, f, indent=2)
    if embedder:
        os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
        with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": H, "pooling_mode_cls_token": True,
                       "pooling_mode_mean_tokens": False}, f)
        with open(os.path.join(d, "modules.json"), "w") as f:
            json.dump([{"idx": 0, "name": "0", "path": "", "type":
                        "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "1_Pooling", "type":
                        "sentence_transformers.models.Pooling"},
                       {"idx": 2, "name": "2", "path": "2_Normalize", "type":
                        "sentence_transformers.models.Normalize"}], f)
        with open(os.path.join(d, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": MAXLEN}, f)


HEADS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                     "bge-m3-heads")


def m3_outputs(heads, x, ids, special):
    """bge-m3's lexical weights ({id: w}, the largest per id, above 0,
    special tokens left out) and ColBERT vectors (every token but the
    first, normalized) from the hidden states x (t, H), in float64."""
    sw, sb = (heads["sparse"][k].astype(np.float64) for k in ("weight", "bias"))
    cw, cb = (heads["colbert"][k].astype(np.float64) for k in ("weight", "bias"))
    lex = {}
    for t, i in enumerate(ids):
        w = max(float(x[t] @ sw[0] + sb[0]), 0.0)
        if i not in special and w > 0 and w > lex.get(str(i), 0.0):
            lex[str(i)] = w
    col = x[1:] @ cw.T + cb
    col /= np.linalg.norm(col, axis=1, keepdims=True)
    return lex, col.tolist()


def check_flagembedding(out, ref):
    from FlagEmbedding import BGEM3FlagModel

    m = BGEM3FlagModel(os.path.join(out, "m3"), use_fp16=False, devices="cpu")
    got = m.encode(ref["texts"], max_length=MAXLEN, return_dense=True, return_sparse=True,
                   return_colbert_vecs=True)
    wd = float(np.abs(np.array(got["dense_vecs"]) - np.array(ref["vectors"])).max())
    ws = wc = 0.0
    for g, want in zip(got["lexical_weights"], ref["sparse"]):
        if sorted(g) != sorted(want):
            sys.exit("FlagEmbedding's lexical weights name other tokens: %s / %s" % (
                sorted(g), sorted(want)))
        ws = max([ws] + [abs(float(g[k]) - want[k]) for k in want])
    for g, want in zip(got["colbert_vecs"], ref["colbert"]):
        wc = max(wc, float(np.abs(np.array(g) - np.array(want)).max()))
    print("FlagEmbedding BGEM3FlagModel (float32) against the numpy float64 forward: dense %.3g, "
          "lexical weights %.3g, ColBERT vectors %.3g" % (wd, ws, wc))
    return max(wd, ws, wc)


def check_transformers(out, ref):
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    emb = AutoModel.from_pretrained(os.path.join(out, "embed"), dtype=torch.float64).eval()
    rr = AutoModelForSequenceClassification.from_pretrained(os.path.join(out, "rerank"),
                                                            dtype=torch.float64).eval()
    we = wr = 0.0
    with torch.no_grad():
        for ids, vec in zip(ref["ids"], ref["vectors"]):
            v = emb(input_ids=torch.tensor([ids])).last_hidden_state[0, 0]
            v = v / v.norm()
            we = max(we, float((v - torch.tensor(vec, dtype=torch.float64)).abs().max()))
        for p, lg in zip(ref["pairs"], ref["logits"]):
            got = rr(input_ids=torch.tensor([p["ids"]])).logits[0, 0].item()
            wr = max(wr, abs(got - lg))
    print("transformers (float64) against the numpy forward: XLMRobertaModel CLS vectors %.3g, "
          "XLMRobertaForSequenceClassification logits %.3g" % (we, wr))
    return max(we, wr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer_json")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="test")
    ap.add_argument("--transformers", action="store_true")
    ap.add_argument("--flagembedding", action="store_true")
    a = ap.parse_args()
    global H, LAYERS, HEADS, INTER, MAXLEN, SCALE
    H, LAYERS, HEADS, INTER, MAXLEN, SCALE = SHAPES[a.shape]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(a.tokenizer_json)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    rng = np.random.default_rng(a.seed)
    emb_w, rr_w = weights(rng, vocab, False), weights(rng, vocab, True)
    write_folder(os.path.join(a.out, "embed"), a.tokenizer_json,
                 config(vocab, "XLMRobertaModel"), emb_w, True)
    m3 = a.shape == "test"  # the committed heads are at the test shape (hidden 64)
    if m3:
        write_folder(os.path.join(a.out, "m3"), a.tokenizer_json,
                     config(vocab, "XLMRobertaModel"), emb_w, True)
        for name in ("sparse_linear.pt", "colbert_linear.pt"):
            shutil.copy(os.path.join(HEADS_DIR, name), os.path.join(a.out, "m3", name))
    heads = {k: torch_pt.load(os.path.join(HEADS_DIR, k + "_linear.pt")) for k in ("sparse", "colbert")}
    special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    write_folder(os.path.join(a.out, "rerank"), a.tokenizer_json,
                 config(vocab, "XLMRobertaForSequenceClassification", labels=1), rr_w, False)
    tok.enable_truncation(max_length=MAXLEN)
    ecfg = config(vocab, "XLMRobertaModel")
    ref = {"texts": TEXTS, "query": QUERY, "ids": [], "vectors": [], "sparse": [],
           "colbert": [], "pairs": [], "logits": []}
    for t in TEXTS:
        ids = tok.encode(t).ids
        xs = bert_ref.hidden_states(emb_w, ecfg, np.array(ids), np.zeros(len(ids), int),
                                    "roberta.", PAD + 1)
        x = xs[0]
        ref["ids"].append(ids)
        ref["vectors"].append((x / np.linalg.norm(x)).tolist())
        if m3:
            lex, col = m3_outputs(heads, xs, ids, special)
            ref["sparse"].append(lex)
            ref["colbert"].append(col)
        e = tok.encode(QUERY, t)
        hs = bert_ref.hidden_states(rr_w, ecfg, np.array(e.ids), np.array(e.type_ids), "roberta.",
                                    PAD + 1)
        ref["pairs"].append({"ids": e.ids, "types": e.type_ids})
        ref["logits"].append(float(bert_ref.head(rr_w, hs[0], "classifier.dense",
                                                 "classifier.out_proj")[0]))
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f)
    if a.transformers and check_transformers(a.out, ref) > 1e-9:
        sys.exit("transformers disagrees with the numpy reference")
    # FlagEmbedding's encode runs the model in float32 (use_fp16 False)
    if a.flagembedding and m3 and check_flagembedding(a.out, ref) > 1e-5:
        sys.exit("FlagEmbedding disagrees with the numpy reference")


if __name__ == "__main__":
    main()
