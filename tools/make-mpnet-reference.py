#!/usr/bin/env python3
# make-mpnet-reference.py: writes the FP32 reference fixtures for
# all-mpnet-base-v2 from an independent implementation, sentence-transformers
# on PyTorch (CPU, FP32), loading models/all-mpnet-base-v2 with the hub off.
#
# Reads tests/fixtures/reference/sentences.jsonl (the STS-B spread and edge
# cases tools/make-reference.py built) and writes, in tests/fixtures/reference/:
#   mpnet_extra.jsonl     texts spelling MPNet's special tokens (<s> </s> <pad>
#                         <mask> <unk>), one JSON string per line
#   mpnet_fp32.f32        raw little-endian float32 [n][768], L2-normalised,
#                         one row per line of sentences.jsonl then mpnet_extra.jsonl
#   mpnet_token_counts.json  token count of each of those texts (truncated)
#   mpnet_buckets.json    transformers' MPNet relative_position_bucket (32
#                         buckets, max distance 128) for relative positions
#                         -600..600
#
# Run (venv from tools/reference-requirements.txt, gitignored .venv-ref):
#   .venv-ref/bin/python tools/make-mpnet-reference.py
# With --stsb CSV it writes nothing and prints sentence-transformers' STS-B
# Spearman (x100) on that split instead, for bench/results/mpnet-*.md:
#   .venv-ref/bin/python tools/make-mpnet-reference.py --stsb /work/shared/data/stsb/sts-test.csv
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODEL = os.path.join(ROOT, "models", "all-mpnet-base-v2")
OUT = os.path.join(ROOT, "tests", "fixtures", "reference")
EXTRA = [
    "<s> A man is playing a guitar. </s>",
    "A man <pad> is playing <pad><pad> a guitar.",
    "<pad>",
    "The <mask> is playing a <mask>.",
    "An <unk> and an <UNK> walk into a bar.",
    "[CLS] brackets [SEP] are plain text [MASK] for MPNet [UNK] [PAD]",
]


def main():
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from transformers.models.mpnet.modeling_mpnet import MPNetAttention  # noqa: F401
    from transformers.models.mpnet import modeling_mpnet

    torch.manual_seed(0)
    with open(os.path.join(OUT, "sentences.jsonl"), encoding="utf-8") as f:
        sents = [json.loads(line) for line in f]
    with open(os.path.join(OUT, "mpnet_extra.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for s in EXTRA:
            f.write(json.dumps(s, ensure_ascii=True) + "\n")
    texts = sents + EXTRA
    model = SentenceTransformer(MODEL, device="cpu")
    model.eval()
    emb = model.encode(texts, batch_size=16, convert_to_numpy=True,
                       normalize_embeddings=True, show_progress_bar=False)
    emb.astype("<f4").tofile(os.path.join(OUT, "mpnet_fp32.f32"))
    tok = model.tokenizer
    counts = [len(tok(t, truncation=True, max_length=model.max_seq_length)["input_ids"])
              for t in texts]
    with open(os.path.join(OUT, "mpnet_token_counts.json"), "w") as f:
        json.dump({"max_seq_length": model.max_seq_length, "counts": counts}, f)
    rel = torch.arange(-600, 601)
    b = modeling_mpnet.MPNetEncoder.relative_position_bucket(rel, num_buckets=32,
                                                             max_distance=128)
    with open(os.path.join(OUT, "mpnet_buckets.json"), "w") as f:
        json.dump({"first": -600, "buckets": [int(x) for x in b.tolist()]}, f)
    print("%d texts, dim %d, max_seq_length %d; torch %s, transformers %s, "
          "sentence-transformers %s" % (len(texts), emb.shape[1], model.max_seq_length,
                                        torch.__version__, transformers.__version__,
                                        sentence_transformers.__version__))


def stsb(path):
    """sentence-transformers' Spearman x 100 of cosine vs gold score."""
    import csv
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer
    gold, a, b = [], [], []
    with open(path, encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            gold.append(float(row[4]))
            a.append(row[5])
            b.append(row[6])
    model = SentenceTransformer(MODEL, device="cpu")
    ea = model.encode(a, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    eb = model.encode(b, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    cos = (ea * eb).sum(axis=1)
    print("sentence-transformers STS-B test Spearman: %.4f (%d pairs)"
          % (100 * spearmanr(cos, gold).correlation, len(gold)))


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "--stsb":
        stsb(sys.argv[2])
    else:
        main()
