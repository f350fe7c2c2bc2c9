#!/usr/bin/env python3
"""make-tokenizer-fixtures.py: writes the tokenizer parity fixtures.

  tests/fixtures/tokenizer/corpus.jsonl    one JSON string per line: the texts
  tests/fixtures/tokenizer/expected.jsonl  one object per line, same order:
                                           {"ids": [...], "full_len": N,
                                            "offsets": [[start, end], ...]}
  tests/fixtures/tokenizer/README.md       tokenizers version, how to regenerate

The expected ids come from Hugging Face `tokenizers` (the Rust library)
loading models/all-MiniLM-L6-v2/tokenizer.json, with truncation to 256 and
no padding (the file itself configures truncation 128 and padding 128, which
the test does not want). full_len is the length of the same encoding without
truncation, [CLS] and [SEP] included. offsets are each token's span in the
text as `tokenizers` gives them (encoding.offsets, in characters), turned
into UTF-8 byte offsets, the unit of tok_encode_offsets.
tests/unit/test_tokenizer.c encodes each text with engine/text/tokenizer.c
and compares.

The corpus is built here, deterministically (no randomness but a seeded
random.Random), so the fixtures can be regenerated and diffed:

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.23.3
    /tmp/tokvenv/bin/python tools/make-tokenizer-fixtures.py

Non-ASCII text is written as itself except characters an editor or a line
reader could mangle (controls, format characters, separators, private use,
noncharacters), which are written as \\uXXXX escapes.
"""
import importlib.util
import json
import os
import random
import sys
import unicodedata as ud

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2", "tokenizer.json")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
MAX_LEN = 256

# ---------------------------------------------------------------------------
# Hand-written texts, grouped by what they exercise.

ENGLISH = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar.",
    "I can't believe it's not butter!",
    "She said, \"Don't go there.\"",
    "It's 5 o'clock somewhere; let's grab a coffee.",
    "Machine learning models are trained on large datasets.",
    "Tokenization splits text into subword units called wordpieces.",
    "unbelievably, the unaffordable antidisestablishmentarianism persisted",
    "What time is it? It's half past three.",
    "He was born on July 4th, 1976, in Philadelphia.",
    "The U.S.A. and the U.K. signed the treaty.",
    "e.g. i.e. etc. vs. Mr. Mrs. Dr. St.",
    "Running runners ran; the runner's run was run-of-the-mill.",
    "Supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "Can you recommend a good restaurant near the train station?",
    "The embeddings are normalized to unit length before cosine similarity.",
    "Don't stop believin' — hold on to that feelin'.",
    "  leading and trailing spaces  ",
    "multiple     spaces     between     words",
    "a",
    "I",
    "x y z",
    "hello[MASK]world",
    "hello [MASK] world",
    "hello [mask] world",
    "[CLS] already has [SEP] tokens [SEP]",
    "[CLS][SEP][PAD][UNK][MASK]",
    "[[SEP]] [SEP [SEP]] [ SEP ]",
    "[UNK]nown and [unk]nown",
    "x[PAD]y",
]

CAPS = [
    "THIS IS ALL CAPS!",
    "WHY ARE YOU SHOUTING",
    "NASA, FBI, CIA and the UN",
    "CamelCaseIdentifierName",
    "MiXeD CaSe TeXt",
    "ÉCOLE NORMALE SUPÉRIEURE",
    "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖØÙÚÛÜÝÞ",
    "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ",
    "АБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ",
    "ΟΔΥΣΣΕΥΣ",
]

ACCENTS = [
    "café",
    "naïve",
    "Ångström",
    "Zürich",
    "résumé",
    "crème brûlée",
    "façade",
    "jalapeño",
    "São Paulo",
    "Kraków",
    "Dvořák",
    "Þórsmörk",
    "Ærøskøbing",
    "Łódź",
    "Việt Nam",
    "Nguyễn Thị Minh Khai",
    "cafe\u0301",
    "e\u0301",
    "E\u0301",
    "a\u0300\u0301\u0302\u0303\u0304",
    "o\u0323\u0302",
    "o\u0302\u0323",
    "\u0301\u0301\u0301",
    "\u0301abc",
    "n\u0303o",
    "A\u030a",
    "\u212b",
    "\u2126",
    "\u212a",
    "ﬁ ﬂ ﬀ ﬃ ﬄ ﬅ ﬆ",
    "ﬁnance ofﬁce",
    "Æsir ætt",
    "œuvre Œdipus",
    "İstanbul",
    "İ",
    "I\u0307",
    "ıi İI",
    "DİYARBAKIR",
    "Straße",
    "STRASSE",
    "ẞ",
    "groß",
    "ǅungla ǈ ǋ ǲ",
    "Ǆ Ǉ Ǌ Ǳ",
    "ŉ",
    "ǰ",
    "ΐ",
    "ᾷ ᾼ ῼ",
    "ὈΔΥΣΣΕΎΣ",
    "ϐ ϑ ϕ ϖ ϰ ϱ ϵ",
    "µ μ Μ",
    "K k K",
    "Å å Å",
]

CJK = [
    "我爱北京天安门",
    "你好，世界！",
    "机器学习是人工智能的一个分支。",
    "今天天气很好，我们去公园散步吧。",
    "繁體中文與简体中文",
    "東京は日本の首都です。",
    "ひらがなとカタカナ",
    "私はコーヒーが好きです",
    "ｶﾀｶﾅ ﾊﾝｶｸ",
    "コンピューター",
    "日本語のテキスト、句読点。「かぎかっこ」",
    "한국어 텍스트입니다",
    "안녕하세요, 세계!",
    "서울특별시",
    "ᄀᄁᄂ ᅡᅢᅣ ᆨᆩᆪ",
    "中文English混合mixed",
    "abc中def",
    "𠀀𠀁𠀂 𪜀 𫝀 𫠠 𬺰 𮯠",
    "\U0002B81F\U0002B820\U0002B91F\U0002B920",
    "豈 更 車 賈",
    "\U0002F800\U0002F801",
    "㐀㐁㐂",
    "〇一二三",
    "⺀⺁ ⼀⼁",
    "ㄅㄆㄇ",
    "中" * 300,
]

EMOJI = [
    "I love it 😍😍😍",
    "👍",
    "👍🏽 👍🏿 👋🏻",
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "❤️",
    "☺ ☹ ☻",
    "🇺🇸🇬🇧🇯🇵",
    "🧑🏾‍💻",
    "🥰🥲🫠🫶",
    "1️⃣ 2️⃣ #️⃣",
    "emoji🎉inside🎉words",
    "💩" * 50,
    "🙂🙃",
    "👩‍❤️‍💋‍👨",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
]

PUNCT = [
    "!!!???...",
    "--",
    "—",
    "–",
    "«»",
    "“smart quotes”",
    "‘single smart quotes’",
    "„Anführungszeichen“",
    "‹›",
    "...",
    "…",
    "?!",
    "¿Qué? ¡Hola!",
    "(parentheses) [brackets] {braces} <angles>",
    "a,b;c:d.e!f?g",
    "$100 €50 £30 ¥1000 ₹500 ₿",
    "50% off!!!",
    "#hashtag @mention",
    "~tilde `backtick` ^caret |pipe \\backslash /slash",
    "\"quoted\"",
    "'single'",
    "*bold* _italic_ __dunder__",
    "§ ¶ † ‡ • ‣ ′ ″ ‰ ※",
    "·",
    "、。〃〈〉《》「」『』【】〔〕",
    "！＂＃＄％＆＇（）＊＋，－．／：；＜＝＞？＠［＼］＾＿｀｛｜｝～",
    "⸘ ⸮ ⁇ ⁈ ⁉",
    "⹂ ⹃ ⹄ ⹅ ⹏ ⹒",
    "᙭ ᙮",
    "׳ ״ ־",
    "؟ ، ؛",
    "। ॥",
    "------------------------------------------------",
    "!" * 300,
    "a-b-c-d-e",
    "well-known state-of-the-art",
]

CONTROL = [
    "\u0000",
    "a\u0000b",
    "\u0000\u0000\u0000",
    "bell\u0007ring",
    "escape\u001b[31mred\u001b[0m",
    "del\u007fete",
    "zero\u200bwidth\u200bspace",
    "soft\u00adhyphen",
    "\ufeffBOM at start",
    "mid\ufeffBOM",
    "zwj\u200djoiner zwnj\u200cnon",
    "lrm\u200e rlm\u200f",
    "\u202aembedding\u202c \u202eoverride\u202c",
    "\u2060word\u2060joiner",
    "\u2061\u2062\u2063\u2064",
    "\u061carabic letter mark",
    "\u180emongolian vowel separator",
    "\ufffdreplacement\ufffd",
    "\ue000private\uf8ff",
    "\U000f0000 \U0010fffd",
    "\u0085next line",
    "vertical\u000btab form\u000cfeed",
    "\u001c\u001d\u001e\u001f",
    "\u0001\u0002\u0003\u0004\u0005\u0006",
    "\u0080\u0081\u009f",
    "noncharacter\ufffe\uffff",
    "tag \U000e0041\U000e0042 chars",
    "\U000e0001",
    "\u00ad",
    "\u200b",
    "\u0600\u0601\u06dd\u070f",
    "\U000110bd \U000110cd",
    "\U0001d173\U0001d174",
    "\u0890\u0891\u08e2",
    "\U00013430\U00013431\U00013438",
]

WHITESPACE = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    " \t\n\r ",
    "tab\tseparated\tvalues",
    "line one\nline two\nline three",
    "windows\r\nline\r\nendings",
    "old\rmac",
    "\u00a0non\u00a0breaking\u00a0",
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a",
    "ideographic\u3000space",
    "\u2028line sep\u2029para sep",
    "\u1680ogham\u1680",
    "narrow\u202fnbsp and medium\u205fmath",
    "   \t\t\n\n   ",
    "\u3000\u3000",
    "\n" * 100,
]

NUMBERS = [
    "0",
    "1234567890",
    "3.14159265358979",
    "-42",
    "+1 (555) 123-4567",
    "1,000,000",
    "1.000.000,00",
    "2024-01-15",
    "12:34:56",
    "1e-10",
    "0xDEADBEEF",
    "50%",
    "½ ¼ ¾ ⅓",
    "² ³ ¹ ⁴",
    "①②③",
    "Ⅰ Ⅱ Ⅲ Ⅳ ⅷ",
    "٠١٢٣٤٥٦٧٨٩",
    "०१२३४५६७८९",
    "１２３４５",
    "𝟏𝟐𝟑",
    "99999999999999999999999999999999",
]

WEB = [
    "https://www.example.com/path/to/page?query=1&foo=bar#section",
    "http://localhost:8080/v2/models/minilm/infer",
    "ftp://files.example.org/pub/file.tar.gz",
    "www.google.com",
    "user@example.com",
    "first.last+tag@sub.domain.co.uk",
    "Contact us at support@mantissa.ai or call 1-800-555-0199.",
    "<html><body><p>Hello</p></body></html>",
    "{\"key\": \"value\", \"n\": [1, 2, 3]}",
    "SELECT * FROM users WHERE id = 42;",
    "def f(x):\n    return x ** 2",
    "int main(void) { printf(\"%d\\n\", 42); return 0; }",
    "for (i = 0; i < n; i++) a[i] += b[i];",
    "git commit -m 'fix: handle NULL'",
    "C:\\Users\\name\\Documents\\file.txt",
    "/usr/local/bin/python3",
    "snake_case_variable and kebab-case-name",
    "@@ -1,3 +1,4 @@",
    "a->b && c || !d",
    "x <= y >= z != w == v",
    "https://例子.测试/路径",
    "mailto:info@café.fr",
]

MATH = [
    "∀x ∈ ℝ: x² ≥ 0",
    "∑_{i=1}^{n} i = n(n+1)/2",
    "∫₀^∞ e^{-x} dx = 1",
    "α + β = γ",
    "π ≈ 3.14159",
    "√2 ∞ ∂ ∇ ∆ ∏ ∐",
    "≤ ≥ ≠ ≈ ≡ ∝ ⊂ ⊃ ∩ ∪",
    "→ ← ↑ ↓ ↔ ⇒ ⇔",
    "× ÷ ± ∓ ·",
    "𝔸𝔹ℂ 𝒜ℬ𝒞 𝐀𝐁𝐂",
    "ℏ ℓ ℘ ℵ",
    "⌈x⌉ ⌊y⌋",
    "°C °F K",
    "x⁽ⁿ⁾ H₂O CO₂",
]

SCRIPTS = [
    "Καλημέρα κόσμε",
    "Ελληνικά: αβγδεζηθικλμνξοπρστυφχψω ς",
    "Привет, мир!",
    "Съешь же ещё этих мягких французских булок",
    "Україна, Київ, їжак, ґанок",
    "Беларусь, ўсё",
    "مرحبا بالعالم",
    "اللغة العربية جميلة",
    "مُحَمَّد",
    "שלום עולם",
    "עִבְרִית",
    "नमस्ते दुनिया",
    "हिन्दी भाषा",
    "क़ ख़ ग़",
    "สวัสดีชาวโลก",
    "ภาษาไทย",
    "ქართული ენა",
    "Հայերեն",
    "አማርኛ",
    "தமிழ்",
    "বাংলা ভাষা",
    "ਪੰਜਾਬੀ",
    "ગુજરાતી",
    "తెలుగు",
    "ಕನ್ನಡ",
    "മലയാളം",
    "සිංහල",
    "ພາສາລາວ",
    "ភាសាខ្មែរ",
    "မြန်မာဘာသာ",
    "བོད་ཡིག",
    "ᠮᠣᠩᠭᠣᠯ",
    "ᏣᎳᎩ",
    "ᐃᓄᒃᑎᑐᑦ",
    "ᚠᚢᚦᚨᚱᚲ",
    "𐌰𐌱𐌲",
    "Tiếng Việt có dấu",
    "Hello Привет Γειά שלום مرحبا 你好 こんにちは 안녕",
    "Ａｂｃ ＦＵＬＬＷＩＤＴＨ ｆｕｌｌｗｉｄｔｈ",
    "ｈｅｌｌｏ　ｗｏｒｌｄ",
    "Ⓐⓑⓒ",
    "🅰🅱",
    "ᴀʙᴄ",
    "ʰᵉˡˡᵒ",
    "Ꭰ ꭰ",
    "Ⴀ ⴀ",
    "𐐀 𐐨",
    "Ա ա",
    "Ⰰ ⰰ",
    "𞤀 𞤢",
]

WORD_LIMITS = [
    "a" * 99,
    "a" * 100,
    "a" * 101,
    "a" * 200 + " ok",
    "é" * 100,
    "é" * 101,
    "e\u0301" * 100,
    "e\u0301" * 101,
    "a" * 99 + "İ",
    "a" * 100 + "\u200b",
    "a" * 100 + "\u0000" + " end",
    "a" * 100 + "!" + "b" * 100,
    "中" + "a" * 100,
    "x" * 1000,
    "ab" * 60,
    "ﬁ" * 60,
]

# ---------------------------------------------------------------------------
# Generated texts.


def load_gen():
    """The Unicode table generator, for its HF_COMPAT lists."""
    path = os.path.join(ROOT, "tools", "gen-unicode-tables.py")
    spec = importlib.util.spec_from_file_location("gen_unicode_tables", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compat_texts():
    """Texts with every code point where Rust's Unicode differs from Python's
    (the generator's HF_COMPAT): the places most likely to go wrong."""
    gen = load_gen()
    out = []
    cps = []
    for key, val in gen.HF_COMPAT.items():
        if key == "lower":
            cps += sorted(val)
        else:
            for a, b in val:
                cps += list(range(a, b + 1))
    cps = sorted(set(cps))
    for i in range(0, len(cps), 40):
        chunk = [chr(c) for c in cps[i:i + 40]]
        out.append(" ".join(chunk))           # each on its own: kept, dropped, lowercased?
        out.append("x" + "x".join(chunk) + "x")  # between letters: split off as punctuation?
        out.append("a" + "\u0301".join(chunk))   # after a mark: canonical ordering
    return out


def sweep_texts():
    """Each code point of the blocks most text uses, alone and between
    letters: checks cleaning, lowercasing, accent stripping and splitting."""
    blocks = [(0x00, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x52F),
              (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x218F),
              (0x2C00, 0x2C7F), (0x2DE0, 0x2E7F), (0x3000, 0x303F), (0xA640, 0xA69F),
              (0xA720, 0xA7FF), (0xFB00, 0xFB4F), (0xFE10, 0xFE6F), (0xFF00, 0xFFEF),
              (0x10400, 0x1044F), (0x1D400, 0x1D4FF), (0x1E900, 0x1E95F)]
    out = []
    for a, b in blocks:
        cps = [c for c in range(a, b + 1) if ud.category(chr(c)) != "Cn"]
        for i in range(0, len(cps), 64):
            chunk = [chr(c) for c in cps[i:i + 64]]
            out.append(" ".join(chunk))
            out.append("q" + "q".join(chunk) + "q")
    return out


def random_texts(n):
    """Seeded random mixtures of words, marks, scripts and oddities."""
    rng = random.Random(20240601)
    words = ("the of and to in is was for on that with as by at from it an be this "
             "are or his her they which one had not but all were when we there can "
             "model token embedding server request batch quantize").split()
    words += [w for s in SCRIPTS + ACCENTS + CJK[:14] for w in s.split()]
    marks = ["\u0300", "\u0301", "\u0302", "\u0308", "\u0323", "\u0327", "\u031b",
             "\u0345", "\u05b0", "\u064b", "\u0e48", "\u3099", "\U0001d165", "\U0001d16d",
             "\u0f7f", "\u1734", "\u1715", "\u0898", "\u1abf"]
    odd = ["\u200b", "\u00ad", "\ufeff", "\u0000", "\t", "\n", "\u3000", "\u00a0", "!",
           "...", "—", "«", "»", "“", "”", "'", "\"", "(", ")", "😀", "👍🏽", "İ", "ẞ",
           "ﬁ", "Ω", "\ufffd", "[SEP]", "[MASK]", "中", "가", "ア"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 25)):
            r = rng.random()
            if r < 0.6:
                w = rng.choice(words)
                if rng.random() < 0.2:
                    w = w.upper()
                if rng.random() < 0.15:
                    k = rng.randint(0, len(w))
                    w = w[:k] + "".join(rng.choice(marks) for _ in range(rng.randint(1, 3))) + w[k:]
                parts.append(w)
            elif r < 0.85:
                parts.append(rng.choice(odd))
            else:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 8))))
            parts.append(rng.choice([" ", " ", " ", "", "  ", "\t"]))
        out.append("".join(parts))
    return out


def long_texts():
    """Texts that hit truncation (254 pieces) in different ways."""
    rng = random.Random(7)
    base = ENGLISH[1].split()
    out = []
    out.append(" ".join(rng.choice(base) for _ in range(2000)))
    out.append(" ".join(rng.choice(base) for _ in range(3000)))
    out.append(" ".join(["word"] * 253))
    out.append(" ".join(["word"] * 254))
    out.append(" ".join(["word"] * 255))
    out.append("hello " * 126 + "unaffordable " * 3)
    out.append("unaffordable " * 200)
    out.append("。".join(CJK[:5]) * 20)
    out.append(" ".join(SCRIPTS) * 5)
    out.append(("[SEP] " * 300).strip())
    out.append("x" * 10000)
    out.append(("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 60).strip())
    return out


def build_corpus():
    corpus = (ENGLISH + CAPS + ACCENTS + CJK + EMOJI + PUNCT + CONTROL + WHITESPACE +
              NUMBERS + WEB + MATH + SCRIPTS + WORD_LIMITS + long_texts() +
              compat_texts() + sweep_texts() + random_texts(250))
    for s in corpus:
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in s)
    return corpus


# ---------------------------------------------------------------------------
# Writing.

def escape_json(s):
    """json.dumps, with readable non-ASCII but escapes for the characters a
    line-oriented reader or an editor could mangle."""
    out = []
    for ch in json.dumps(s, ensure_ascii=False):
        cp = ord(ch)
        cat = ud.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn") or (cat == "Zs" and ch != " ") \
                or cp in (0xFFFD,) or (0xE0000 <= cp <= 0xE0FFF):
            if cp > 0xFFFF:
                v = cp - 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)))
            else:
                out.append("\\u%04x" % cp)
        else:
            out.append(ch)
    text = "".join(out)
    assert json.loads(text) == s
    return text


# Texts spelling the special and added tokens of both models, checked
# against each model's tokenizer.json (specials.jsonl, specials-<model>.jsonl).
SPECIAL_TEXTS = [
    "[CLS] hello [SEP] world [PAD] [MASK] [UNK]",
    "<s> hello </s> world <pad> <mask> <unk>",
    "<UNK> and <Unk> and <unk>x and x<unk> and <unk><unk>",
    "a<s>b</s>c<pad>d<mask>e",
    "  <mask>  lstrip and [MASK]rstrip",
    "<s<s>> </s </s>> <<unk>> [[UNK]]",
    "\u00c9l\u00e8ve <\u00dcNK> caf\u00e9 [unk] [Unk]",
    "<unk\u0301> <un\u200bk> <u nk>",
]


def byte_offsets(s, offsets):
    """tokenizers' character offsets into s as UTF-8 byte offsets."""
    pos = [0]
    for ch in s:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [[pos[a], pos[b]] for a, b in offsets]


def row(tok, full, s):
    """The expected object of text s: ids, offsets (bytes), untruncated length."""
    enc = tok.encode(s)
    n = len(full.encode(s).ids)
    assert len(enc.ids) == min(n, MAX_LEN)
    return {"ids": enc.ids, "full_len": n, "offsets": byte_offsets(s, enc.offsets)}


def encode_all(model_json, texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(model_json)
    tok.no_padding()
    tok.enable_truncation(MAX_LEN)
    full = Tokenizer.from_file(model_json)
    full.no_padding()
    full.no_truncation()
    return [row(tok, full, s) for s in texts]


def write_expected(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def main_models():
    """--models: the expected ids of MPNet on the committed corpus, and of
    both models on SPECIAL_TEXTS (needs both models fetched)."""
    with open(os.path.join(OUT, "corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f]
    mpnet = os.path.join(ROOT, "models", "all-mpnet-base-v2", "tokenizer.json")
    write_expected(os.path.join(OUT, "expected.jsonl"), encode_all(MODEL, corpus))
    write_expected(os.path.join(OUT, "expected-mpnet.jsonl"), encode_all(mpnet, corpus))
    with open(os.path.join(OUT, "specials.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for s in SPECIAL_TEXTS:
            f.write(escape_json(s) + "\n")
    write_expected(os.path.join(OUT, "specials-minilm.jsonl"), encode_all(MODEL, SPECIAL_TEXTS))
    write_expected(os.path.join(OUT, "specials-mpnet.jsonl"), encode_all(mpnet, SPECIAL_TEXTS))
    print("mpnet: %d corpus texts, %d special texts" % (len(corpus), len(SPECIAL_TEXTS)))


def main():
    if sys.argv[1:] == ["--models"]:
        return main_models()
    import tokenizers
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(MODEL)
    tok.no_padding()
    tok.enable_truncation(MAX_LEN)
    full = Tokenizer.from_file(MODEL)
    full.no_padding()
    full.no_truncation()

    corpus = build_corpus()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "corpus.jsonl"), "w", encoding="utf-8", newline="\n") as fc, \
            open(os.path.join(OUT, "expected.jsonl"), "w", encoding="utf-8", newline="\n") as fe:
        for s in corpus:
            fc.write(escape_json(s) + "\n")
            fe.write(json.dumps(row(tok, full, s), separators=(",", ":")) + "\n")
    with open(os.path.join(OUT, "README.md"), "w", encoding="utf-8") as f:
        f.write(README % {"version": tokenizers.__version__, "n": len(corpus),
                          "python": sys.version.split()[0], "unidata": ud.unidata_version})
    print("%d texts; tokenizers %s" % (len(corpus), tokenizers.__version__))


README = """\
# Tokenizer parity fixtures

Made by `tools/make-tokenizer-fixtures.py`; checked by `tests/unit/test_tokenizer.c`
(`tokenizer_matches_hf_on_corpus`).

- `corpus.jsonl`: %(n)d texts, one JSON string per line.
- `expected.jsonl`: for each text, in order, `{"ids": [...], "full_len": N,
  "offsets": [[start, end], ...]}`: the ids Hugging Face `tokenizers` gives with
  `Tokenizer.from_file("models/all-MiniLM-L6-v2/tokenizer.json")`,
  `enable_truncation(256)` and `no_padding()`, the length without truncation
  ([CLS] and [SEP] included), and each token's offsets (`encoding.offsets`,
  characters in Python) as UTF-8 byte offsets.

Generated with tokenizers %(version)s (Python %(python)s, unicodedata %(unidata)s).

To regenerate (needs the model, `make model`):

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==%(version)s
    /tmp/tokvenv/bin/python tools/make-tokenizer-fixtures.py

`expected-mpnet.jsonl` (the same corpus through
`models/all-mpnet-base-v2/tokenizer.json`), `specials.jsonl` (texts spelling
special and added tokens) and `specials-minilm.jsonl` / `specials-mpnet.jsonl`
(their ids) come from `tools/make-tokenizer-fixtures.py --models` (needs both
models: `make model-all`), which also rewrites `expected.jsonl` from the
committed corpus (ids and offsets) without rebuilding the corpus.

The corpus is deterministic, but its code-point sweeps skip what unicodedata
calls unassigned, so a Python with another Unicode version (here %(unidata)s)
writes a slightly different corpus.

If a new tokenizers release changes an id, first run
`/tmp/tokvenv/bin/python tools/gen-unicode-tables.py --check`: it compares the
Unicode tables in engine/text/unicode_data.c with what the installed tokenizers does
on every code point.
"""

if __name__ == "__main__":
    main()
