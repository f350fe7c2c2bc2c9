#!/usr/bin/env python3
# make-reference.py: writes the FP32 reference fixtures that prove Mantissa's C
# forward pass of all-MiniLM-L6-v2 correct. The vectors come from an
# independent implementation, sentence-transformers on PyTorch (CPU, FP32),
# loading the model from the local folder with the hub switched off.
#
# Outputs (in tests/fixtures/reference/ unless --out says otherwise):
#   sentences.jsonl     one JSON string per line: ~150 STS-B test sentences
#                       (a deterministic spread) + hand-written edge cases.
#                       Rebuilt only with --build-sentences; otherwise read.
#   minilm_fp32.f32     raw little-endian float32, row-major [n][384], one row
#                       per line of sentences.jsonl, L2-normalised.
#   token_counts.json   token count of each sentence ([CLS]/[SEP] included,
#                       after truncation at 256), from the model's tokenizer.
#   pieces.json         intermediate tensors for one short sentence, for unit
#                       tests of forward pieces (see write_pieces()).
#
# Run (from the repository root, venv from tools/reference-requirements.txt):
#   HF_HUB_OFFLINE=1 /tmp/refvenv/bin/python tools/make-reference.py \
#       --build-sentences /work/shared/data/stsb/sts-test.csv
import argparse
import datetime
import hashlib
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

MAX_SEQ = 256
DIM = 384
PIECES_SENTENCE = "A man is playing a guitar."
N_STS_PAIRS = 75  # 75 pairs -> 150 sentences

# Hand-written cases: each exercises something the C tokenizer or forward
# pass could get wrong. Long texts are built below so that they pass 256.
HANDWRITTEN = [
    # very short
    "",
    "a",
    "A",
    "x",
    ".",
    "?",
    " ",
    "hello",
    "Hello",
    "HELLO",
    "embeddings",
    "unbelievableness",
    "ok.",
    # whitespace and control characters
    "  leading and trailing spaces   ",
    "tabs\tbetween\twords",
    "line one\nline two\r\nline three",
    "non\u00a0breaking\u00a0space and zero\u200bwidth space",
    "soft\u00adhyphen inside a word",
    # accents and other Latin-script text
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e na\u00efve fa\u00e7ade",
    "cafe\u0301 with a combining accent",
    "\u00c9L\u00c8VE \u00c0 L'\u00c9COLE",
    "\u00dcber die Stra\u00dfe gehen M\u00fcller und S\u00f8ren \u00c5se.",
    "Se\u00f1or Pe\u00f1a comi\u00f3 pi\u00f1a en Espa\u00f1a.",
    "\u0141\u00f3d\u017a i Gda\u0144sk s\u0105 w Polsce.",
    "Ni\u00f0ursta\u00f0an er \u00feessi: \u00e6\u00f8\u00e5 \u00c6\u00d8\u00c5 \u0153uvre",
    # other scripts
    "\u0397 \u03b3\u03ac\u03c4\u03b1 \u03ba\u03bf\u03b9\u03bc\u03ac\u03c4\u03b1\u03b9 \u03c3\u03c4\u03bf\u03bd \u03ba\u03b1\u03bd\u03b1\u03c0\u03ad.",
    "\u041a\u043e\u0448\u043a\u0430 \u0441\u043f\u0438\u0442 \u043d\u0430 \u0434\u0438\u0432\u0430\u043d\u0435.",
    "\u0627\u0644\u0642\u0637\u0629 \u0646\u0627\u0626\u0645\u0629 \u0639\u0644\u0649 \u0627\u0644\u0623\u0631\u064a\u0643\u0629.",
    "\u05d4\u05d7\u05ea\u05d5\u05dc \u05d9\u05e9\u05df \u05e2\u05dc \u05d4\u05e1\u05e4\u05d4.",
    "\u092c\u093f\u0932\u094d\u0932\u0940 \u0938\u094b\u092b\u0947 \u092a\u0930 \u0938\u094b \u0930\u0939\u0940 \u0939\u0948\u0964",
    "\u0e41\u0e21\u0e27\u0e01\u0e33\u0e25\u0e31\u0e07\u0e19\u0e2d\u0e19\u0e2b\u0e25\u0e31\u0e1a\u0e1a\u0e19\u0e42\u0e0b\u0e1f\u0e32",
    # CJK (each CJK ideograph becomes its own word)
    "\u732b\u304c\u30bd\u30d5\u30a1\u30fc\u3067\u5bdd\u3066\u3044\u307e\u3059\u3002",
    "\u6211\u559c\u6b22\u5403\u82f9\u679c\u548c\u9999\u8549\u3002",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\ub3c4 \ud3ec\ud568\ud569\ub2c8\ub2e4.",
    "\u6771\u4eac is the capital of \u65e5\u672c.",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c hello world \u4f60\u597d",
    "\uff21\uff22\uff23 \uff11\uff12\uff13 full-width letters",
    # emoji and symbols
    "\U0001F600",
    "I love pizza \U0001F355\U0001F355\U0001F355!",
    "family: \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 flags: \U0001F1EB\U0001F1F7 \U0001F1EF\U0001F1F5",
    "thumbs up \U0001F44D\U0001F3FD and a heart \u2764\ufe0f",
    "Price: \u20ac12.50 or \u00a310 or \u00a51,200 \u00b1 5% \u2192 \u2264 \u221e",
    "\u00a9 2024 Acme\u2122 \u00ae \u00a7 4.2 \u00b6 3 \u2020 \u2021",
    # punctuation runs
    "!!!",
    "...",
    "Wait... what?!?! Really???",
    "----- ===== ***** ##### @@@@@",
    "((([[[{{{<<<>>>}}}]]])))",
    "\"quoted\" 'single' \u201ccurly\u201d \u2018quotes\u2019 \u00abguillemets\u00bb",
    "e-mail: someone@example.com, url: https://example.org/a/b?c=d&e=f#g",
    "semi;colon:colon,comma.period!bang?question",
    # numbers
    "0",
    "3.14159265358979323846",
    "The year 1999 had 365 days, and 2000 had 366.",
    "Call 555-0123 or +1 (800) 555-0199 before 10:30pm on 12/31/2023.",
    "1,000,000 people attended; 42% were under 25.",
    "Order #A-7789-XZ shipped 3x faster than order #B-0001.",
    "1e-12 2.5E+08 0x1F 0b1010 -273.15",
    # code
    "def f(x): return x ** 2 + 1",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name;",
    "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "git commit -m 'fix: handle NULL ptr in tokenizer_free()'",
    "x_train, y_train = load_data('path/to/file.csv')",
    # mixed case
    "ThE qUiCk BrOwN fOx JuMpS oVeR tHe LaZy DoG",
    "iPhone McDonald's eBay YouTube JavaScript",
    "NASA and the FBI met at the UN HQ in NYC.",
    "camelCaseIdentifier snake_case_identifier SCREAMING_CASE",
    # repeated words
    "the the the the the the the the",
    "very very very very very very very good",
    "Buffalo buffalo Buffalo buffalo buffalo buffalo Buffalo buffalo.",
    "ha ha ha ha ha ha ha ha ha ha ha ha ha ha ha ha",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    # ordinary sentences close to STS-B style, for spread
    "A dog is running through the snow.",
    "The stock market fell sharply on Monday after the report.",
    "She quietly closed the door and walked into the rain.",
    "How do I reset my password?",
    "Mantissa is an inference server written in C.",
    "The quick brown fox jumps over the lazy dog.",
    "Scientists discovered a new species of frog in the rainforest.",
    "Please remember to water the plants while I am away.",
    "What is the capital of Australia?",
    "It was the best of times, it was the worst of times.",
]

LONG_PARAGRAPH = (
    "The history of the printing press begins long before Gutenberg, with "
    "woodblock printing in East Asia, where craftsmen carved entire pages of "
    "text into blocks of wood, inked them and pressed paper against them. "
    "Movable type made of ceramic and later of metal followed, but the "
    "thousands of characters needed for written Chinese made the technique "
    "slow to spread. In Europe, where an alphabet of a few dozen letters "
    "sufficed, a goldsmith from Mainz combined an adjustable hand mould for "
    "casting type, an oil-based ink and a screw press adapted from those used "
    "to make wine, and around 1450 began to print books in quantities no "
    "scribe could match. Within fifty years presses were working in more than "
    "two hundred cities, and millions of volumes had been printed: Bibles, "
    "grammars, almanacs, pamphlets and broadsheets. Prices fell, literacy "
    "rose, and ideas travelled faster than any authority could follow. "
    "Scholars could compare identical copies of a text across the continent, "
    "errors could be corrected in later editions, and vernacular languages "
    "gained standard spellings. Historians still argue about how much of the "
    "Reformation, the scientific revolution and the rise of the modern state "
    "can be traced to the press, but few doubt that the world after it was "
    "very different from the world before it. Newspapers appeared in the "
    "seventeenth century, steam-driven presses in the nineteenth, and the "
    "rotary press, linotype and offset lithography each multiplied output "
    "again, until the cost of a printed page became almost negligible and "
    "the question was no longer how to copy words but how to find the ones "
    "worth reading among so many."
)


def build_handwritten():
    out = list(HANDWRITTEN)
    out.append(LONG_PARAGRAPH)  # English prose, > 256 tokens
    out.append(" ".join(["a"] * 254))  # exactly 256 tokens with [CLS]/[SEP]
    out.append(" ".join(["a"] * 255))  # 257 -> truncated to 256
    out.append(" ".join(["embedding"] * 300))  # repeated word, truncated
    out.append(" ".join(str(i) for i in range(1, 400)))  # numbers, truncated
    cjk = "\u4eba\u5de5\u667a\u80fd\u6b63\u5728\u6539\u53d8\u4e16\u754c\u3002"
    out.append(cjk * 30)  # CJK, each ideograph one token, truncated
    out.append("!?" * 200)  # punctuation run, truncated
    out.append("\U0001F600 " * 300)  # emoji map to [UNK], truncated
    return out


def read_sts(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 7:
                raise SystemExit(f"{path}: line with {len(cols)} columns")
            pairs.append((cols[5], cols[6]))
    return pairs


def build_sentences(sts_path):
    pairs = read_sts(sts_path)
    n = len(pairs)
    # evenly spaced pair indices, the first pair included
    idx = [i * n // N_STS_PAIRS for i in range(N_STS_PAIRS)]
    sents = []
    for i in idx:
        sents.extend(pairs[i])
    return sents + build_handwritten()


def write_sentences(path, sents):
    with open(path, "w", encoding="utf-8") as f:
        for s in sents:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")


def read_sentences(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip() != ""]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def floats(mat):
    # float32 -> Python float is exact; repr() of that round-trips
    return [[float(v) for v in row] for row in mat]


def write_pieces(model, out_dir):
    """Intermediate tensors of the BERT stack for PIECES_SENTENCE:
    ids: token ids with [CLS]/[SEP]; embeddings: word + position + type-0
    embedding after the embedding LayerNorm; layer0: output of encoder layer 0;
    last_hidden: output of the last layer (before pooling). All [seq][384]."""
    import torch

    transformer = model[0]
    bert = transformer.auto_model
    tok = transformer.tokenizer
    enc = tok(PIECES_SENTENCE, return_tensors="pt", truncation=True,
              max_length=MAX_SEQ)
    with torch.inference_mode():
        out = bert(input_ids=enc["input_ids"],
                   attention_mask=enc["attention_mask"],
                   token_type_ids=torch.zeros_like(enc["input_ids"]),
                   output_hidden_states=True)
    hs = out.hidden_states  # (embeddings, layer 0 .. layer 5)
    emb = hs[0][0].numpy()
    layer0 = hs[1][0].numpy()
    last = out.last_hidden_state[0].numpy()
    assert np.array_equal(last, hs[-1][0].numpy())
    # cross-check hidden_states[0] against the embedding module itself
    with torch.inference_mode():
        emb2 = bert.embeddings(input_ids=enc["input_ids"],
                               token_type_ids=torch.zeros_like(enc["input_ids"]))
    assert np.allclose(emb, emb2[0].numpy(), atol=0, rtol=0)
    pieces = {
        "sentence": PIECES_SENTENCE,
        "ids": [int(i) for i in enc["input_ids"][0]],
        "embeddings": floats(emb),
        "layer0": floats(layer0),
        "last_hidden": floats(last),
    }
    with open(os.path.join(out_dir, "pieces.json"), "w") as f:
        json.dump(pieces, f)
        f.write("\n")
    return pieces


def main():
    ap = argparse.ArgumentParser(
        description="Write FP32 reference fixtures for all-MiniLM-L6-v2.")
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--out", default="tests/fixtures/reference")
    ap.add_argument("--build-sentences", metavar="STS_CSV",
                    help="rebuild sentences.jsonl from this STS-B test file")
    args = ap.parse_args()

    import torch
    import sentence_transformers
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    sent_path = os.path.join(args.out, "sentences.jsonl")
    if args.build_sentences:
        write_sentences(sent_path, build_sentences(args.build_sentences))
    sents = read_sentences(sent_path)

    model = SentenceTransformer(args.model, device="cpu")
    model.max_seq_length = MAX_SEQ
    model.eval()
    assert model[0].max_seq_length == MAX_SEQ
    assert next(model.parameters()).dtype == torch.float32

    emb = model.encode(sents, batch_size=32, convert_to_numpy=True,
                       normalize_embeddings=True, show_progress_bar=False)
    emb = np.ascontiguousarray(emb, dtype="<f4")
    assert emb.shape == (len(sents), DIM), emb.shape
    assert np.all(np.isfinite(emb))
    emb.tofile(os.path.join(args.out, "minilm_fp32.f32"))

    # token counts from the model's own tokenizer, truncated at 256
    tok = model.tokenizer
    counts = [len(tok(s, truncation=True, max_length=MAX_SEQ)["input_ids"])
              for s in sents]
    with open(os.path.join(args.out, "token_counts.json"), "w") as f:
        json.dump(counts, f)
        f.write("\n")

    pieces = write_pieces(model, args.out)

    # the pieces' last hidden state, mean pooled and normalised, must give
    # the same vector as encode() does for that sentence
    last = np.array(pieces["last_hidden"], dtype=np.float64)
    v = last.mean(axis=0)
    v /= np.linalg.norm(v)
    v_ref = model.encode([PIECES_SENTENCE], normalize_embeddings=True)[0]
    c = float(v @ v_ref / np.linalg.norm(v_ref))
    print(f"pieces: {len(pieces['ids'])} tokens, pooled-vs-encode cosine {c:.9f}")
    assert c > 0.99999, "pieces.json does not pool to encode()'s vector"

    cos01 = float(emb[0].astype(np.float64) @ emb[1].astype(np.float64))
    print(f"sentences: {len(sents)}; at the {MAX_SEQ}-token limit: "
          f"{sum(c == MAX_SEQ for c in counts)}; max tokens {max(counts)}")
    print(f"cosine of the first STS pair ({sents[0]!r} / {sents[1]!r}): "
          f"{cos01:.6f}")
    print("torch", torch.__version__, "| sentence-transformers",
          sentence_transformers.__version__, "| transformers",
          transformers.__version__, "| numpy", np.__version__)
    print("model.safetensors sha256",
          sha256_file(os.path.join(args.model, "model.safetensors")))
    print("date", datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"))
    for name in ("sentences.jsonl", "minilm_fp32.f32", "token_counts.json",
                 "pieces.json"):
        size = os.path.getsize(os.path.join(args.out, name))
        print(f"{name}: {size} bytes")
        if size >= 2 * 1024 * 1024:
            print(f"error: {name} is over 2 MB", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
