#!/usr/bin/env python3
"""make-unigram-tokenizer.py: trains, from a seed, SentencePiece Unigram
models on a generated multilingual corpus (normalization nmt_nfkc, as
XLM-R's), turns them into Hugging Face tokenizer.json files shaped as
XLM-R / bge-m3 ship them, and writes the ids Hugging Face `tokenizers`
gives on a test corpus that differs from the training one. Fixtures for
tests/unit/test_unigram.c, tests/unit/test_enc_tokenizer.c and
bench/unigram_speed.py; nothing generated is committed.

    make-unigram-tokenizer.py OUTDIR [--seed N] [--vocab N]

The conversion is written here from the model's protobuf (read with a few
lines of wire-format parsing: sentencepiece's own sentencepiece_model_pb2
needs protobuf 5, and 4.25.5 is pinned): the vocabulary as XLM-R's
(<s>=0 <pad>=1 </s>=2 <unk>=3, then the model's pieces after its own
<unk> <s> </s>, <mask> last), unk_id 3, its precompiled_charsmap in a
Precompiled normalizer. OUTDIR gets:
  tokenizer.json      "xlmr": Sequence[Precompiled, Replace(" {2,}" -> " ")],
                      Metaspace("▁", always, split), Unigram (no byte
                      fallback), added tokens <s> <pad> </s> <unk> <mask>
                      (lstrip, as XLM-R's) and "<ref>" (not special),
                      RobertaProcessing, Metaspace decoder
  tokenizer-bf.json   "bf": a model trained with byte_fallback, its <0xNN>
                      pieces; Precompiled alone; TemplateProcessing
                      "<s> $A </s>" / "<s> $A </s> </s> $B </s>"; decoder
                      Sequence[ByteFallback, Metaspace]
  tokenizer-ws.json   "ws": the first model, pre-tokenizer Sequence
                      [WhitespaceSplit, Metaspace(first)], a normalized
                      added token "ref2"
  tokenizer-ns.json   "ns": the byte-fallback model, Metaspace(never,
                      split false), Sequence[Replace("``" -> "\""),
                      Precompiled], an added token with rstrip
  reference.json      {"texts": [...], "variants": {name: {"file",
                      "ids": [...], "offsets": [[start, end, ...]: each
                      token's span in UTF-8 bytes of its text],
                      "decoded": [...]}}, "trunc": {max:
                      [ids of texts[k], k % 5 == 0]} (xlmr),
                      "trunc_offsets": {max: [their offsets, as "offsets"]},
                      "pairs": [[variant, a, b, max_len, ids, seg]]:
                      texts[a] and texts[b] as a pair, cut to max_len
                      (6 or more: the template's 4 tokens + 2), seg the
                      first token of type id 1 or len(ids) (xlmr, bf)}
  bench.json          a larger list of texts (same generator, other seed)
"""
import argparse
import json
import os
import random
import struct
import tempfile
import unicodedata

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors

WORDS = {
    "latin": ("the of and to in is was for that with as on by at from it an were are this be "
              "or has had not but first one new after who they have time school world city "
              "élève café déjà naïve Noël crème brûlée façade über Straße größer señor mañana "
              "año Łódź zażółć gęślą jaźń Việt Nam tiếng Việt người Ångström Øresund smörgåsbord "
              "São Paulo ação coração").split(),
    "cyrillic": ("Привет мир как дела Москва город язык книга время человек жизнь работа "
                 "Київ Україна дякую щастя Ёлка съёмка").split(),
    "greek": "Γειά σου κόσμε Αθήνα θάλασσα ελληνικά γλώσσα φιλοσοφία ἀρχή ψυχή".split(),
    "arabic": ("مرحبا بالعالم كيف حالك العربية مدينة كتاب السلام عليكم شكرا "
               "مُحَمَّد اللُّغَة").split(),
    "hebrew": "שלום עולם עברית ספר מדינה תודה רבה בְּרֵאשִׁית שָׁלוֹם".split(),
    "devanagari": ("नमस्ते दुनिया हिन्दी भाषा भारत किताब धन्यवाद क्षत्रिय ज्ञान "
                   "संस्कृत स्वतंत्रता").split(),
    "bengali": "বাংলা ভাষা আমার সোনার ধন্যবাদ".split(),
    "tamil": "தமிழ் மொழி வணக்கம் நன்றி".split(),
    "thai": "สวัสดี ครับ ภาษาไทย ประเทศไทย ขอบคุณ กรุงเทพมหานคร น้ำ".split(),
    "cjk": ("我们 今天 天气 很好 中国 人民 学习 机器 模型 数据 北京 上海 語言 繁體字 "
            "東京 日本語 漢字").split(),
    "hangul": "한국어 안녕하세요 서울 대한민국 감사합니다 사랑".split(),
    "kana": "ひらがな カタカナ こんにちは ありがとう トウキョウ ラーメン ｶﾀｶﾅ".split(),
    "georgian": "გამარჯობა საქართველო თბილისი ქართული".split(),
    "armenian": "Բարեւ Հայաստան Երեւան հայերեն".split(),
    "ethiopic": "ሰላም ኢትዮጵያ አማርኛ".split(),
}
SCRIPTS = sorted(WORDS)
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🇯🇵", "🤖", "✨", "🧑🏿‍💻", "#️⃣",
         "👋🏻", "🫠", "☺", "❤️‍🔥"]
FULLWIDTH = ["ＡＢＣ", "ｆｕｌｌ", "１２３", "！？", "（ｘ）", "＄１００", "Ｈｅｌｌｏ"]
PUNCT = [",", ".", "!", "?", "...", "--", "(", ")", '"', ":", ";", "``", "''", "«", "»", "—", "、",
         "。", "「", "」", "¿", "¡", "'s", "n't"]


def word(r):
    k = r.random()
    if k < 0.72:
        w = r.choice(WORDS[r.choice(SCRIPTS)])
        if r.random() < 0.1:
            w = unicodedata.normalize("NFD", w)
        if r.random() < 0.08:
            w = w.capitalize() if r.random() < 0.5 else w.upper()
        return w
    if k < 0.78:
        return r.choice(EMOJI)
    if k < 0.84:
        return str(r.randint(0, 10 ** r.randint(1, 9)))
    if k < 0.88:
        return r.choice(FULLWIDTH)
    return r.choice(PUNCT)


def sentence(r, n_lo=3, n_hi=25):
    text = ""
    for _ in range(r.randint(n_lo, n_hi)):
        text += r.choice([" ", " ", " ", " ", "", "  ", "\n", "\t", " \n", "   "]) + word(r)
    return text.strip() if r.random() < 0.8 else text


# Code points for random "soup" texts: what the grapheme rules, the
# charsmap and the whitespace handling treat apart (CR LF, controls,
# combining marks, Hangul jamo, Indic virama and spacing marks, prepend,
# regional indicators, ZWJ, emoji modifiers, full-width forms, spaces of
# every kind, unassigned and private-use code points).
SOUP = (list(" \t\r\n\x0b\x0caeoAE1.-_<>") +
        ["\x01", "\x07", "\x1b", "\x7f", "\x85", "\xa0", "\xad", "\u1680", "\u2000", "\u2003",
         "\u200a", "\u200b", "\u200c", "\u200d", "\u200e", "\u2028", "\u202f", "\u205f",
         "\u3000", "\ufeff", "\u0301", "\u0323", "\u0308", "\u0345", "\u05b0", "\u064e",
         "\u0e31", "\u0e33", "\u093c", "\u094d", "\u0915", "\u0937", "\u093f", "\u0903",
         "\u0600", "\u0bbe", "\u1100", "\u1161", "\u11a8", "\uac00", "\u212b", "\u2126",
         "\u0958", "\u1e9b", "\u0378", "\ue000", "\uff21", "\uff41", "\uff11", "\uff01",
         "\uff5e", "\uff76", "\uff9e", "\u3042", "\u4e2d", "\u00e9", "\u00c5", "\u0130",
         "\ufb01", "\u2460", "\u00bd", "\u2167", "\u00b2", "\u2122", "\U0001F600",
         "\U0001F3FD", "\U0001F1EB", "\U0001F1F7", "\ufe0f", "\u20e3", "\U0001F468",
         "\U0001F469", "\u2764", "\u0640", "\u10d0", "\u0561", "\u1200", "▁", "<s>", "</s>",
         "<mask>", "<ref>", "<0x41>", "<unk>", "ref2"])


def soup(r):
    return "".join(r.choice(SOUP) for _ in range(r.randint(1, 40)))


FIXED = [
    "Hello, world! It's a test.", "", " ", "   ", "\t", "\n", "\r\n", "a", "▁", "▁▁ ▁",
    "multiple     spaces    here", "trailing spaces   ", "   leading spaces",
    "line one\r\nline two\r\n\r\nline three\n", "tab\tseparated\tvalues\t\t\tend",
    "digits 1234567890 and 3.14159 and 1,000,000 and ٣٤٥ and ２０２４",
    "emoji 👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, 🇯🇵 Japan, ❤️‍🔥 #️⃣",
    "skin 👋🏻👋🏼👋🏽👋🏾👋🏿 and zwj 🧑‍💻 👩‍❤️‍💋‍👨",
    "full-width ＡＢＣ ａｂｃ １２３ ！？ ｶﾀｶﾅ ﾊﾟﾋﾟﾌﾟ",
    "NFD: " + unicodedata.normalize("NFD", "élève café naïve Ångström Việt Nam São"),
    "NFC: élève café naïve Ångström Việt Nam São",
    "e\u0301\u0323 q\u0307\u0323 \u1e0b\u0323 \u0958 a\u0308\u0301 A\u030a",
    "ﬁ ﬀ ℌ ⅷ ① ⁵ ½ ™ ㎏ ㍻ Ⅻ ǅ",
    "controls \x01\x02\x03 bell\x07 esc\x1b del\x7f nel\x85 zw\u200b\u200c\u200d bom\ufeff",
    "spaces\u00a0nbsp\u2003em\u3000ideo\u2028ls\u202fnnbsp",
    "<s>already special</s> and <mask> here <pad> and <unk> and <ref> ok",
    "x <mask>   <mask>y  <mask>", "<s><s></s>", "almost <s and </s",
    "quotes ``like this'' and ``that''", "Привет, мир! Как дела?", "Γειά σου κόσμε",
    "مرحبا بالعالم، كيف حالك؟", "שלום עולם", "नमस्ते दुनिया, आप कैसे हैं? क्षत्रिय",
    "สวัสดีครับ ยินดีต้อนรับ", "中文测试：我们今天学习了机器学习和深度学习。",
    "日本語のテキスト、カタカナとひらがな。", "한국어 텍스트입니다. 안녕하세요!",
    "გამარჯობა საქართველო", "Բարեւ Հայաստան", "ሰላም ኢትዮጵያ",
    "Hangul jamo \u1100\u1161\u11a8 and compat \u3131",
    "unknown \U0001F9EC \uE000 \U000F0000 \u0378 \U00010D40 ᚠᛇᚻ ꦲꦏ",
    "mixed中文English混合123数字", "URL https://example.com/a?b=c&d=e#f",
    "a\r\nb\rc\n\rd", "\u0600\u0661 prepend", "\U0001F1EB\U0001F1F7\U0001F1EB",
]


def test_texts(seed):
    r = random.Random(seed + 1)
    texts = list(FIXED)
    texts += [sentence(r) for _ in range(500)]
    texts += [soup(r) for _ in range(500)]
    texts += [" ".join(sentence(r) for _ in range(40)) for _ in range(6)]  # long texts
    texts.append("word " * 1500)
    texts.append("中文" * 1000)
    texts.append("🇫🇷" * 300)
    return texts


# ---- sentencepiece's model protobuf, read by hand ----

def _varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def _fields(b):
    """(field number, wire type, value) of one message's bytes."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield f, wt, v


def read_spm(path):
    """pieces [(text, score, type)] and the precompiled_charsmap."""
    pieces, charsmap = [], b""
    for f, _, v in _fields(open(path, "rb").read()):
        if f == 1:
            p, score, kind = "", 0.0, 1
            for g, _, w in _fields(v):
                if g == 1:
                    p = w.decode("utf-8")
                elif g == 2:
                    score = struct.unpack("<f", w)[0]
                elif g == 3:
                    kind = w
            pieces.append((p, score, kind))
        elif f == 3:
            for g, _, w in _fields(v):
                if g == 2:
                    charsmap = bytes(w)
    return pieces, charsmap


def train_spm(corpus_path, prefix, vocab, byte_fallback):
    spm.SentencePieceTrainer.train(
        input=corpus_path, model_prefix=prefix, model_type="unigram", vocab_size=vocab,
        normalization_rule_name="nmt_nfkc", byte_fallback=byte_fallback,
        character_coverage=0.9995, num_threads=2, minloglevel=2, seed_sentencepiece_size=200000,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, shuffle_input_sentence=False)
    return read_spm(prefix + ".model")


SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def xlmr_json(pieces, charsmap, byte_fallback):
    """tokenizer.json as transformers' XLM-R conversion writes it."""
    vocab = [[s, 0.0] for s in SPECIALS] + [[p, s] for p, s, _ in pieces[3:]] + [["<mask>", 0.0]]
    tok = Tokenizer(models.Unigram([tuple(v) for v in vocab], 3, byte_fallback))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always",
                                                 split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return json.loads(tok.to_str())


def variants(j_plain, j_bf):
    """The four tokenizer.json files, by name."""
    xlmr = json.loads(json.dumps(j_plain))
    ws = json.loads(json.dumps(j_plain))
    bf = json.loads(json.dumps(j_bf))
    ns = json.loads(json.dumps(j_bf))
    n = len(xlmr["model"]["vocab"])
    xlmr["added_tokens"].append({"id": n, "content": "<ref>", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False,
                                 "special": False})
    charsmap = bf["normalizer"]["normalizers"][0]
    bf["normalizer"] = charsmap
    bf["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                           "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}
    bf["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}]}
    ws["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}]}
    ws["decoder"]["prepend_scheme"] = "first"
    ws["added_tokens"].append({"id": n, "content": "ref2", "single_word": False,
                               "lstrip": False, "rstrip": False, "normalized": True,
                               "special": False})
    ns["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never",
                           "split": False}
    ns["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never",
                     "split": False}
    ns["normalizer"]["normalizers"] = [
        {"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
        ns["normalizer"]["normalizers"][0]]
    ns["added_tokens"].append({"id": len(ns["model"]["vocab"]), "content": "<ref>",
                               "single_word": False, "lstrip": False, "rstrip": True,
                               "normalized": False, "special": True})
    return {"xlmr": ("tokenizer.json", xlmr), "bf": ("tokenizer-bf.json", bf),
            "ws": ("tokenizer-ws.json", ws), "ns": ("tokenizer-ns.json", ns)}


def byte_offsets(text, offsets):
    """tokenizers' character offsets as UTF-8 byte offsets, flat."""
    at = [0]
    for c in text:
        at.append(at[-1] + len(c.encode("utf-8")))
    return [at[k] for o in offsets for k in o]


def references(outdir, vs, texts, seed):
    ref = {"texts": texts, "variants": {}, "trunc": {}, "trunc_offsets": {}, "pairs": []}
    toks = {}
    for name, (fname, j) in vs.items():
        s = json.dumps(j, ensure_ascii=False)
        with open(os.path.join(outdir, fname), "w", encoding="utf-8") as f:
            f.write(s)
        tok = toks[name] = Tokenizer.from_file(os.path.join(outdir, fname))
        encs = tok.encode_batch(texts)
        ids = [e.ids for e in encs]
        ref["variants"][name] = {"file": fname, "ids": ids,
                                 "offsets": [byte_offsets(t, e.offsets)
                                             for t, e in zip(texts, encs)],
                                 "decoded": [tok.decode(i, skip_special_tokens=True)
                                             for i in ids]}
    tok = toks["xlmr"]
    for m in (3, 4, 7, 32, 128, 512):
        tok.enable_truncation(max_length=m)
        encs = [tok.encode(t) for t in texts[::5]]
        ref["trunc"][str(m)] = [e.ids for e in encs]
        ref["trunc_offsets"][str(m)] = [byte_offsets(t, e.offsets)
                                        for t, e in zip(texts[::5], encs)]
    r = random.Random(seed + 3)
    for k in range(400):
        a, b = r.randrange(len(texts)), r.randrange(len(texts))
        m = r.choice([6, 7, 9, 16, 40, 128, 512, 100000])
        for name in ("xlmr", "bf"):
            tok = toks[name]
            tok.enable_truncation(max_length=m)
            e = tok.encode(texts[a], texts[b])
            seg = e.type_ids.index(1) if 1 in e.type_ids else len(e.ids)
            ref["pairs"].append([name, a, b, m, e.ids, seg])
            tok.no_truncation()
    with open(os.path.join(outdir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--vocab", type=int, default=6000)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    r = random.Random(a.seed)
    corpus = [sentence(r) for _ in range(20000)]
    with tempfile.TemporaryDirectory() as tmp:
        cp = os.path.join(tmp, "corpus.txt")
        with open(cp, "w", encoding="utf-8") as f:
            for t in corpus:
                f.write(" ".join(t.split()) + "\n")
        plain = train_spm(cp, os.path.join(tmp, "plain"), a.vocab, False)
        bf = train_spm(cp, os.path.join(tmp, "bf"), a.vocab, True)
    vs = variants(xlmr_json(*plain, False), xlmr_json(*bf, True))
    texts = test_texts(a.seed)
    references(a.outdir, vs, texts, a.seed)
    r = random.Random(a.seed + 2)
    bench = [sentence(r) for _ in range(20000)] + list(FIXED)
    with open(os.path.join(a.outdir, "bench.json"), "w", encoding="utf-8") as f:
        json.dump(bench, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
