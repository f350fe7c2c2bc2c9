#!/usr/bin/env python3
"""make-bpe-tokenizer.py: trains, from a seed, a byte-level BPE tokenizer
shaped as Qwen2's (Qwen3-Embedding's) with Hugging Face `tokenizers`, and
writes the ids `tokenizers` gives on a test corpus that differs from the
training one. Fixtures for tests/unit/test_bpe.c and bench/bpe_speed.py.

    make-bpe-tokenizer.py OUTDIR [--seed N] [--vocab N]

OUTDIR gets:
  tokenizer.json   normalizer NFC; pre-tokenizer Sequence[Split(Qwen2's
                   regex, Isolated), ByteLevel(add_prefix_space false,
                   use_regex false)]; BPE (no unk, byte_fallback false);
                   added tokens <|endoftext|> <|im_start|> <|im_end|>
                   (special) and <tool_call> (not special);
                   TemplateProcessing "$A <|endoftext|>"; ByteLevel decoder
  reference.json   [{"text", "nfc", "ids", "offsets", "ids_im", "decoded",
                   "trunc": {max: ids}, "trunc_offsets": {max:
                   offsets}}]: ids with the appended
                   <|endoftext|>; offsets: each token's [start, end) in
                   UTF-8 bytes of the text, flat (tokenizers' character
                   offsets converted), offsets_im and offsets_trim those
                   of tokenizer-im.json and tokenizer-trim.json; ids_im
                   tokenizer-im.json's;
                   decoded with skip_special_tokens; trunc from
                   enable_truncation
  tokenizer-im.json  the same with model.ignore_merges true and, from id
                   10000 on, whole pieces of the test texts that the merges
                   split (so that ignore_merges changes their ids)
  tokenizer-trim.json  the same with a ByteLevel post-processor
                   (trim_offsets true: no <|endoftext|>, offsets trimmed)
  bench.json       a larger list of texts (same generator, other seed) for
                   bench/bpe_speed.py
"""
import argparse
import json
import os
import random
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

EN = ("the of and to in is was for that with as on by at from it his an were are which this "
      "be or has had not but first one their its new after who they have her she two been "
      "other when there all during into school time may years more most only over city some "
      "world would where later up such used many can state about national out known university "
      "united then made however between team through system group well also government").split()
FR = "élève café déjà naïve Noël crème brûlée façade über Straße größer señor mañana año".split()
CJK = ("我们 今天 天气 很好 中国 人民 学习 机器 模型 数据 東京 日本語 ひらがな カタカナ "
       "한국어 안녕하세요 서울 대한민국").split()
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🤖", "✨"]
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
        "if x != None and y >= 3:", "const y = await fetch(url);", "#include <stdio.h>",
        "SELECT id, name FROM users WHERE age > 30;", "print(f\"{a:>10}\")", "x = [1, 2, 3]"]
OTHER = ["مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Привет мир", "Γειά σου κόσμε",
         "שלום עולם"]


def sentence(r):
    """One random training or test text."""
    parts = []
    for _ in range(r.randint(3, 25)):
        k = r.random()
        if k < 0.5:
            w = r.choice(EN)
            parts.append(w.capitalize() if r.random() < 0.15 else w.upper() if r.random() < 0.03
                         else w)
        elif k < 0.6:
            w = r.choice(FR)
            parts.append(unicodedata.normalize("NFD", w) if r.random() < 0.3 else w)
        elif k < 0.7:
            parts.append(r.choice(CJK))
        elif k < 0.75:
            parts.append(r.choice(EMOJI))
        elif k < 0.82:
            parts.append(str(r.randint(0, 10 ** r.randint(1, 9))))
        elif k < 0.87:
            parts.append(r.choice(CODE))
        elif k < 0.92:
            parts.append(r.choice(OTHER))
        else:
            parts.append(r.choice(["'s", "'t", "n't", "'re", "'ll", "'VE", ",", ".", "!", "?",
                                   "...", "--", "(", ")", '"', ":", ";"]))
    text = ""
    for p in parts:
        text += r.choice([" ", " ", " ", "", "  ", "\n", "\t", " \n"]) + p
    return text.strip() if r.random() < 0.8 else text


FIXED = [
    "Hello, world! It's a test.", "I'M SURE HE'S RIGHT; THEY'LL SEE. WE'VE DONE IT, HADN'T WE'D",
    "she'S here, 'Ll 're 'vE 'D 'M 'T", "line one\r\nline two\r\n\r\nline three\n",
    "tab\tseparated\tvalues\t\t\tend", "multiple     spaces    here", "trailing spaces   ",
    "   leading spaces", "\n\n\nnewlines first", "only spaces:    ", " ", "", "\t", "\r\n",
    "digits 1234567890 and 3.14159 and 1,000,000 and ٣٤٥ and ２０２４",
    "emoji 👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, 🇯🇵 Japan, ❤️‍🔥",
    "مرحبا بالعالم، كيف حالك؟", "नमस्ते दुनिया, आप कैसे हैं?", "สวัสดีครับ ยินดีต้อนรับ",
    "中文测试：我们今天学习了机器学习和深度学习。", "日本語のテキスト、カタカナとひらがな。",
    "한국어 텍스트입니다. 안녕하세요!", "unknown chars: \u2603 \U0001F9EC \uE000 \U000F0000 \x01 \x07 \x7f",
    "special <|endoftext|> in text <|im_start|>user\nhi<|im_end|> and <tool_call> here",
    "<|endoftext|><|endoftext|>", "almost special <|endoftext| and <|im_start",
    "NFD accents: " + unicodedata.normalize("NFD", "élève café naïve Ångström"),
    "NFC accents: élève café naïve Ångström", "e\u0301\u0323 q\u0307\u0323 \u1e0b\u0323 \u0958",
    "Hangul jamo \u1100\u1161\u11a8 and compat \u3131", "long s: 'ſ and Kelvin \u212a",
    "code:\n    def f(x):\n        return {'a': [1, 2]}\n\n\n", "a\u00a0b\u2003c\u3000d\u2028e\u0085f",
    "x  \n  y \t\n z", "!!!???...,,,;;;", " ?!", "__init__ self.__dict__ ->=>",
    "ʼnʼ ǅ ǈ ﬁ ﬀ ℌ ⅷ ① ⁵ ½", "mixed中文English混合123数字", "URL https://example.com/a?b=c&d=e#f",
    "emoji skin 👋🏻👋🏼👋🏽👋🏾👋🏿 and zwj 🧑‍💻 👩‍❤️‍💋‍👨",
]


def train(outdir, seed, vocab):
    r = random.Random(seed)
    corpus = [sentence(r) for _ in range(30000)]
    corpus += [unicodedata.normalize("NFD", t) for t in corpus[:2000]]
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(s, special=True, normalized=False) for s in SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
        special_tokens=[("<|endoftext|>", eos)])
    tok.save(os.path.join(outdir, "tokenizer.json"))
    return tok


# Code points for random "soup" texts: every class the regex and NFC treat
# apart (whitespace of each kind, \r \n, apostrophes and contraction
# letters, combining marks in and out of canonical order, Hangul jamo,
# letters and numbers newer than Python's Unicode, unassigned and private).
SOUP = (list(" \t\r\n\x0b\x0c'sStTrReEvVmMlLdD") + ["\u017f", "\x85", "\xa0", "\u1680",
        "\u2000", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b",
        "\u0301", "\u0323", "\u0308", "\u0345", "\u05b0", "\u0e31", "\u093c", "\u0bbe",
        "\u0bc6", "\u1100", "\u1161", "\u11a8", "\uac00", "\u212b", "\u2126", "\u0958",
        "\u1e9b", "\U000105c0", "\U00010d40", "\U0001e4d0", "\u0378", "\ue000", "a", "e", "o",
        "A", "1", "\u0663", "\u2167", "\u00bd", "\u4e2d", "\u3042", "!", ".", "-", "_", "\u00e9",
        "\u00c5", "\U0001F600", "\u200d", "\U0001F3FD", "\ufe0f", "<", "|", "\u00ad"])


def soup(r):
    return "".join(r.choice(SOUP) for _ in range(r.randint(1, 40)))


def test_texts(seed):
    r = random.Random(seed + 1)
    texts = list(FIXED)
    texts += [sentence(r) for _ in range(300)]
    texts += [soup(r) for _ in range(400)]
    texts += [" ".join(sentence(r) for _ in range(60)) for _ in range(4)]  # long texts
    texts.append("word " * 3000)
    texts.append("中文" * 2000)
    return texts


def ignore_merges_variant(tok, texts, outdir):
    """tokenizer-im.json: ignore_merges true, and pieces the merges split
    added to the vocabulary whole."""
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    vocab, nid = j["model"]["vocab"], 10000
    for t in texts[:120]:
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(t)):
            if piece not in vocab and len(tok.encode(piece, add_special_tokens=False).ids) > 1:
                vocab[piece] = nid
                nid += 1
    with open(os.path.join(outdir, "tokenizer-im.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return Tokenizer.from_str(json.dumps(j))


def trim_variant(tok, outdir):
    """tokenizer-trim.json: post-processor ByteLevel with trim_offsets."""
    j = json.loads(tok.to_str())
    j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False,
                           "trim_offsets": True, "use_regex": False}
    with open(os.path.join(outdir, "tokenizer-trim.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return Tokenizer.from_str(json.dumps(j))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--vocab", type=int, default=12000)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    tok = train(a.outdir, a.seed, a.vocab)
    texts = test_texts(a.seed)
    tok_im = ignore_merges_variant(tok, texts, a.outdir)
    tok_trim = trim_variant(tok, a.outdir)
    refs = []
    for k, t in enumerate(texts):
        enc = tok.encode(t)
        ids = enc.ids
        at = [0]
        for c in t:
            at.append(at[-1] + len(c.encode("utf-8")))
        e = {"text": t, "nfc": unicodedata.normalize("NFC", t), "ids": ids,
             "offsets": [at[k] for o in enc.offsets for k in o],
             "offsets_im": [at[k] for o in tok_im.encode(t).offsets for k in o],
             "offsets_trim": [at[k] for o in tok_trim.encode(t).offsets for k in o],
             "ids_im": tok_im.encode(t).ids,
             "decoded": tok.decode(ids, skip_special_tokens=True)}
        if k % 7 == 0:
            trunc, trunc_off = {}, {}
            for m in (1, 2, 5, 17):
                tok.enable_truncation(max_length=m)
                enc = tok.encode(t)
                trunc[str(m)] = enc.ids
                trunc_off[str(m)] = [at[k] for o in enc.offsets for k in o]
            tok.no_truncation()
            e["trunc"] = trunc
            e["trunc_offsets"] = trunc_off
        refs.append(e)
    with open(os.path.join(a.outdir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, ensure_ascii=False)
    r = random.Random(a.seed + 2)
    bench = [sentence(r) for _ in range(20000)] + list(FIXED)
    with open(os.path.join(a.outdir, "bench.json"), "w", encoding="utf-8") as f:
        json.dump(bench, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
