#!/usr/bin/env python3
# make-cased-wordpiece.py: WordPiece tokenizer folders whose casing and
# normalization differ from BERT-uncased, with Hugging Face `tokenizers`
# encodings to compare against, for tests/unit/test_enc_tokenizer.c
# (models/enc_tokenizer.c and engine/text/tokenizer.c). Nothing is committed.
#
#   make-cased-wordpiece.py OUT [--seed N] [--vocab models/all-MiniLM-L6-v2/vocab.txt]
#
# The vocabulary is MiniLM's (uncased) plus, from the seed, capitalised and
# upper-case forms of some of its words, capital letters and accented
# letters as word pieces ("A", "##A", "é", "##é"), and accented words
# ("Café", "Zürich"). Each folder under OUT has that vocab.txt, a
# tokenizer.json written by `tokenizers` itself (BertNormalizer,
# BertPreTokenizer, WordPiece, "[CLS] $A [SEP]"), a tokenizer_config.json
# that agrees with it, and reference.json: the texts (mixed case, accents
# composed and decomposed, CJK, punctuation, emoji, numbers, whitespace
# runs, controls, unknown words) and the ids `tokenizers` gives each, the
# special tokens included. The folders:
#   cased        lowercase false, strip_accents null (so: kept)
#   cased-strip  lowercase false, strip_accents true, handle_chinese_chars false
#   lower-keep   lowercase true, strip_accents false, clean_text false
#   none         no normalizer at all (tokenizer.json "normalizer": null)
import argparse
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
import tokenizers

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# name -> (BertNormalizer arguments, tokenizer_config.json fields)
VARIANTS = {
    "cased": (dict(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=False),
              dict(do_lower_case=False, strip_accents=None, tokenize_chinese_chars=True)),
    "cased-strip": (dict(clean_text=True, handle_chinese_chars=False, strip_accents=True,
                         lowercase=False),
                    dict(do_lower_case=False, strip_accents=True, tokenize_chinese_chars=False)),
    "lower-keep": (dict(clean_text=False, handle_chinese_chars=True, strip_accents=False,
                        lowercase=True),
                   dict(do_lower_case=True, strip_accents=False, tokenize_chinese_chars=True)),
    "none": (None, dict(do_lower_case=False, strip_accents=False, tokenize_chinese_chars=False)),
}

ACCENTED = "àáâãäåèéêëìíîïñòóôõöùúûüýÿçøæœßÀÁÂÃÄÅÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝÇØÆŒ"
ACCENTED_WORDS = ["Café", "café", "CAFÉ", "Zürich", "zürich", "naïve", "résumé", "Résumé",
                  "façade", "São", "Paulo", "Ångström", "élan", "Éire", "Málaga", "Straße",
                  "Ñandú", "Øresund", "Œuvre", "cœur", "Dvořák", "Łódź", "Kraków", "İstanbul"]

# Texts written by hand, by what they exercise.
FIXED = [
    "Hello World", "HELLO WORLD", "hello world", "hElLo WoRlD",
    "The Quick Brown Fox Jumps Over The Lazy Dog.",
    "Café au lait in Zürich", "CAFÉ", "Cafe\u0301 (decomposed)", "naïve résumé façade",
    "Ångström \u212b A\u030a", "İstanbul ıi I\u0307", "Straße STRASSE ẞ", "ΣΊΣΥΦΟΣ Σίσυφος ς",
    "Привет МИР", "東京は日本の首都です。", "中文English混合", "한국어 텍스트", "カタカナ ひらがな",
    "emoji 😀👍🏽 🇫🇷 family 👨\u200d👩\u200d👧", "numbers 12345 3.14159 1,000,000 -42 ½ ² ①",
    "punctuation!!! ??? ... --- (a) [b] {c} «d» „e“ ¿f? ¡g! ‘h’ — – …",
    "tabs\tand\nnewlines\r\n  multiple   spaces", "   leading and trailing   ", "", " ", "\t\n",
    "\u00a0non-breaking\u2003em space\u3000ideographic\u2028line\u0085next",
    "zero\u200bwidth\u200djoiner\ufeffbom", "control\x01\x02chars\x7f\x1f", "replacement \ufffd char",
    "private \ue000 use", "[CLS] inside [SEP] text [MASK] [mask] [UNK] [cls]", "[CLS][SEP]Hello[PAD]",
    "Supercalifragilisticexpialidocious Pneumonoultramicroscopicsilicovolcanoconiosis",
    "x" * 120, "Y" * 100, "Z" * 101 + " after",
    "unknownwordqzxv Qzxvbnm QZXV", "McDonald's O'Neill iPhone eBay YouTube NASA U.S.A.",
    "e-mail: John.Doe@Example.COM https://Example.org/Path?Q=1&r=Two#Frag",
    "ﬁ ligature Ⅻ ℌ ㎞ Ⓐ ＦＵＬＬＷＩＤＴＨ 𝐀𝐁𝐂", "Ǆ ǅ ǆ Ǳ ǰ", "\u212a Kelvin \u2126 Ohm",
    "a\u0323\u0302 e\u0302\u0323 \u1e15 o\u0308\u0304", "שָׁלוֹם", "مَرْحَبًا", "नमस्ते", "ภาษาไทย",
    "∑∫√∞ ≤≥ ≠", "€100 £50 ¥1000 $5.99 ₹", "Dvořák Łódź Kraków Øresund cœur Œuvre",
    "The Café in São Paulo", "ALL CAPS SENTENCE WITH SOME Words", "cAmElCaSe snake_case kebab-case",
]

EMOJI = ["😀", "👍🏽", "🎉", "🇯🇵", "❤️", "🤖", "👨\u200d💻"]
PUNCT = list(".,;:!?'\"()[]{}-–—…«»¿¡/\\@#%&*+=<>|~^`")
CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么"
SPACES = [" ", "  ", "\t", "\n", " \u3000 ", "\u00a0", "   "]


def read_vocab(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def cased_vocab(base, rng):
    """MiniLM's tokens, then the seed's cased and accented additions."""
    seen = set(base)
    out = list(base)

    def add(tok):
        if tok and tok not in seen and not any(ch.isspace() for ch in tok):
            seen.add(tok)
            out.append(tok)

    words = [w for w in base[1996:] if w.isalpha() and w.isascii() and len(w) > 1]
    for w in words[:400]:  # the most frequent words, then a sample of the rest
        add(w.capitalize())
    for w in rng.sample(words, 2500):
        add(w.capitalize())
    for w in rng.sample(words, 400):
        add(w.upper())
    for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + ACCENTED:
        add(c)
        add("##" + c)
    for w in ACCENTED_WORDS:
        add(w)
    add("##\u0301")
    add("##\u0308")
    return out


def accent(word, rng):
    """word with some vowels accented, composed or decomposed."""
    marks = {"a": "áàâä", "e": "éèêë", "i": "íîï", "o": "óôö", "u": "úûü"}
    out = []
    for ch in word:
        low = ch.lower()
        if low in marks and rng.random() < 0.3:
            acc = rng.choice(marks[low])
            acc = acc.upper() if ch.isupper() else acc
            out.append(acc if rng.random() < 0.7 else ch + rng.choice("\u0301\u0300\u0302\u0308"))
        else:
            out.append(ch)
    return "".join(out)


def random_word(words, rng):
    w = rng.choice(words)
    style = rng.random()
    if style < 0.3:
        w = w.capitalize()
    elif style < 0.45:
        w = w.upper()
    elif style < 0.55:
        w = "".join(c.upper() if rng.random() < 0.5 else c for c in w)
    if rng.random() < 0.2:
        w = accent(w, rng)
    return w


def random_text(words, rng):
    parts = []
    for _ in range(rng.randint(1, 14)):
        r = rng.random()
        if r < 0.6:
            parts.append(random_word(words, rng))
        elif r < 0.7:
            parts.append(rng.choice(PUNCT))
        elif r < 0.77:
            parts.append(rng.choice(EMOJI))
        elif r < 0.84:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 7))))
        elif r < 0.9:
            parts.append("".join(rng.choice(CJK) for _ in range(rng.randint(1, 4))))
        else:
            n = rng.randint(4, 12)  # an unknown word
            parts.append("".join(rng.choice("bcdfghjklmnpqrstvwxzQXZ") for _ in range(n)))
        if rng.random() < 0.25:
            parts.append(rng.choice(SPACES))
        else:
            parts.append("" if rng.random() < 0.1 else " ")
    return "".join(parts)


def build(vocab, norm):
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                     max_input_chars_per_word=100))
    if norm is not None:
        tok.normalizer = normalizers.BertNormalizer(**norm)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    ids = {s: vocab.index(s) for s in SPECIALS}
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.add_special_tokens(SPECIALS)
    return tok


def write_folder(path, vocab, norm, config, texts, seed):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))
    build(vocab, norm).save(os.path.join(path, "tokenizer.json"))
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))  # what the folder says
    cfg = dict(config, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
               mask_token="[MASK]", tokenizer_class="BertTokenizer", model_max_length=512)
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    ref = {"tokenizers": tokenizers.__version__, "seed": seed, "vocab_size": len(vocab),
           "normalizer": norm, "texts": texts,
           "ids": [tok.encode(t, add_special_tokens=True).ids for t in texts]}
    with open(os.path.join(path, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20251129)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap.add_argument("--vocab", default=os.path.join(root, "models", "all-MiniLM-L6-v2", "vocab.txt"))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    base = read_vocab(a.vocab)
    vocab = cased_vocab(base, rng)
    words = [w for w in base[1996:] if w.isalpha() and len(w) > 1] + ACCENTED_WORDS
    texts = FIXED + [random_text(words, rng) for _ in range(250)]
    for name, (norm, config) in VARIANTS.items():
        write_folder(os.path.join(a.out, name), vocab, norm, config, texts, a.seed)
    print(f"{a.out}: {len(VARIANTS)} folders, {len(vocab)} tokens, {len(texts)} texts "
          f"(tokenizers {tokenizers.__version__}, seed {a.seed})", file=sys.stderr)


if __name__ == "__main__":
    main()
