"""Differential tokenizer corpus: seeded random Unicode strings by code-point class, with the ids
that the reference tokenizers give them (llama.cpp for the six vocabulary-only GGUF files, Hugging
Face `tokenizers` for the Model2Vec WordPiece tokenizer.json).

usage: python3 host-tests/testdata/gen_tokenizer_fuzz.py FIXTURES_DIR host-tests/testdata/tokenizer-fuzz.json.zst
       python3 host-tests/testdata/gen_tokenizer_fuzz.py FIXTURES_DIR /tmp/big.json.zst SEED SCALE
(FIXTURES_DIR: target/fixtures, made by `cargo xtask fixtures`)
The committed file is the first form (seed 14, scale 1). The second draws another seed with
SCALE times as many random strings, for a longer hunt outside the suite:
  WASMIND_TOKENIZER_FUZZ=/tmp/big.json.zst cargo test --release -p host-tests --test tokenizer_fuzz
needs: pip install llama-cpp-python==0.3.36 tokenizers==0.23.3 gguf; the zstd command

The strings are drawn once from SEED; the same set goes through every tokenizer. Classes
(`classes` in the output, each a [name, first, end) range of `texts`): every combining mark
(Mn/Mc/Me), every cased letter (incl. the 1->many and special mappings), CJK ideographs of every
block and extension, Hangul, kana, Thai/Devanagari/Arabic/Hebrew words, the scripts of
Unicode 15.0-16.0, emoji and ZWJ sequences, strided astral planes incl. private use, controls
and format characters, white space of every kind and in runs, digits of every script,
punctuation and symbols, apostrophe contractions, strings that look like special tokens (and
the vocabularies' real control and user-defined tokens), words around WordPiece's 100-char
limit, edges (the empty string, each ASCII character, U+2581 and byte-level look-alikes), and
mixtures of all of them with ASCII words and numbers, short and long.
Only valid Unicode scalar values (a Python str cannot hold invalid UTF-8; surrogates excluded).

Output (JSON, zstd -19):
  {"seed", "versions": {python, unicodedata, llama_cpp, tokenizers}, "counts": {...},
   "texts": [...], "classes": [[name, first, end], ...],
   "gguf": {FILE: {"ids": [[...] per text], "special": {INDEX: [...]}}},
   "wordpiece": {"tokenizer": PATH, "truncation": 512, "ids": [[...] per text]}}
"gguf" FILE is a name in SHARED_DIR/models/vocab/; "ids" is llama_tokenize(add_special=False,
parse_special=False); "special" holds parse_special=True's ids only for the texts where they
differ from "ids". "wordpiece" ids are `Tokenizer.from_file(...).encode(text,
add_special_tokens=False).ids`: no [CLS]/[SEP] (what model2vec pools before dropping [UNK]),
[UNK] kept, truncated to the file's 512.
"""
import json, os, platform, random, subprocess, sys, unicodedata

import llama_cpp
import tokenizers
from gguf import GGUFReader
from llama_cpp import Llama

shared, out_path = sys.argv[1:3]
SEED = int(sys.argv[3]) if len(sys.argv) > 3 else 14
SCALE = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
rng = random.Random(SEED)

# ---- code-point pools ------------------------------------------------------------------------

ALL = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
cat = {c: unicodedata.category(chr(c)) for c in ALL}
MARKS = [c for c in ALL if cat[c] in ("Mn", "Mc", "Me")]
CASED = [c for c in ALL if chr(c).lower() != chr(c) or chr(c).upper() != chr(c) or cat[c] == "Lt"]
DIGITS = [c for c in ALL if cat[c] == "Nd"]
NUMBERS = [c for c in ALL if cat[c] in ("Nl", "No")]
PUNCT = [c for c in ALL if cat[c].startswith("P")]
SYMBOLS = [c for c in ALL if cat[c].startswith("S")]
CONTROLS = [c for c in ALL if cat[c] in ("Cc", "Cf")]
SPACES = [c for c in ALL if chr(c).isspace()] + [0x200B, 0x180E, 0xFEFF, 0x2060]
CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0x30000, 0x3134F),
       (0x31350, 0x323AF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F), (0x2E80, 0x2FDF),
       (0x3000, 0x303F), (0x3190, 0x31FF), (0xFF00, 0xFFEF)]
HANGUL = [(0xAC00, 0xD7A3), (0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xD7B0, 0xD7FF)]
KANA = [(0x3040, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F), (0x1B000, 0x1B16F)]
SCRIPTS = {"thai": (0x0E00, 0x0E7F), "devanagari": (0x0900, 0x097F), "arabic": (0x0600, 0x06FF),
           "hebrew": (0x0590, 0x05FF), "cyrillic": (0x0400, 0x04FF), "greek": (0x0370, 0x03FF),
           "bengali": (0x0980, 0x09FF), "tamil": (0x0B80, 0x0BFF), "georgian": (0x10A0, 0x10FF),
           "ethiopic": (0x1200, 0x137F), "tibetan": (0x0F00, 0x0FFF), "myanmar": (0x1000, 0x109F)}
# Blocks that Unicode 15.0-16.0 added (Python 3.11's unicodedata is 14.0 and knows none of them;
# llama.cpp's tables stop at 15.1): Kawi, Nag Mundari, Cyrillic Extended-D, CJK H and I,
# Garay, Todhri, Tulu-Tigalari, Sunuwar, Gurung Khema, Kirat Rai, Ol Onal, Myanmar Extended-C,
# Egyptian Hieroglyphs Extended-A, Symbols for Legacy Computing Supplement.
RECENT = [(0x11F00, 0x11F5F), (0x1E4D0, 0x1E4FF), (0x1E030, 0x1E08F), (0x31350, 0x323AF),
          (0x2EBF0, 0x2EE5F), (0x10D40, 0x10D8F), (0x105C0, 0x105FF), (0x11380, 0x113FF),
          (0x11BC0, 0x11BFF), (0x16100, 0x1613F), (0x16D40, 0x16D7F), (0x1E5D0, 0x1E5FF),
          (0x116D0, 0x116FF), (0x13460, 0x143FF), (0x1CC00, 0x1CEBF)]
EMOJI = [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
         (0x2600, 0x26FF), (0x2700, 0x27BF), (0x1FA70, 0x1FAFF)]
SPECIAL_CASES = "ßẞİıǅǄǆǈǋǲΣσςϐϑϕϰϱϵᏸᏹᏺᏻᏼᏽꭰꭱꮿﬀﬁﬂﬃﬄﬅﬆŉǰΐΰẖẗẘẙẚὐᾀᾈᾳᾼῃῌῳῼΩKÅⅠⅰⒶⓐ𐐀𐐨𞤀𞤢"
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<bos>", "<eos>", "<pad>", "<unk>",
            "<mask>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>", "[CLS]", "[SEP]",
            "[PAD]", "[UNK]", "[MASK]", "<|im_start|", "|im_start|>", "<|IM_START|>", "<BOS>",
            "[cls]", "[PAD", "<<bos>>", "[[UNK]]", "<|", "|>", "<unused0>", "<unused6241>",
            "<table>", "</td>", "[multimodal]", "<start_of_image>", "<repo_name>", "<file_sep>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M",
                "'LL", "'D", "’s", "’t", "'", "''", "'x", "'sa", "'lld"]
WORDS = ["the", "Hello", "world", "naïve", "café", "ABC", "iPhone", "x", "a", "I", "don", "we",
         "DON", "O", "l", "MAX_LEN", "snake_case", "CamelCase", "http", "www", "co", "ID"]


def n(count):
    """`count` random strings, times SCALE."""
    return int(count * SCALE)


def pick(ranges):
    lo, hi = rng.choice(ranges)
    return chr(rng.randint(lo, hi))


def ascii_word():
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(rng.randint(1, 10)))


def number():
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))


def sep():
    return rng.choice([" ", " ", " ", "", "  ", "\n", "\t", ", ", ". ", "-", "_", "\u00a0", "\u3000", "\r\n"])


CONTEXTS = [
    lambda s: s,
    lambda s: f"a{s}b",
    lambda s: f" {s} ",
    lambda s: f"{rng.choice(WORDS)}{s}{ascii_word()}",
    lambda s: s * 3,
    lambda s: f"{number()}{s}{number()}",
    lambda s: f"{rng.choice(WORDS)} {s}x {ascii_word()}",
    lambda s: f"{s}{sep()}{rng.choice(WORDS)}{sep()}{s}",
]


def context(s):
    """`s` alone or between letters, words, numbers and spaces."""
    return rng.choice(CONTEXTS)(s)


def run_of(pool, lo, hi):
    return "".join(chr(rng.choice(pool)) for _ in range(rng.randint(lo, hi)))


def run_in(ranges, lo, hi):
    return "".join(pick(ranges) for _ in range(rng.randint(lo, hi)))


# ---- the strings, class by class --------------------------------------------------------------

classes = []
texts = []


def add(name, strings):
    classes.append([name, len(texts), len(texts) + len(strings)])
    texts.extend(strings)


bases = ["a", "e", "é", "o", "A", "ß", "İ", "क", "ก", "ا", "א", "가", "中", "x", " ", "1", ""]
add("combining marks", [context(rng.choice(bases) + chr(m) + (chr(rng.choice(MARKS)) if rng.random() < 0.3 else ""))
                        for m in MARKS])
add("case mappings", [context(chr(c) + (rng.choice(WORDS) if rng.random() < 0.3 else "")) for c in CASED])
add("special cases", [context("".join(rng.choice(SPECIAL_CASES) for _ in range(rng.randint(1, 8))))
                      for _ in range(n(1200))])
add("cjk", [context(run_in(CJK, 1, 12)) for _ in range(n(1500))])
add("hangul and kana", [context(run_in(HANGUL if rng.random() < 0.5 else KANA, 1, 10)) for _ in range(n(1200))])
scripts = list(SCRIPTS.values())
add("scripts", [" ".join(run_in([rng.choice(scripts)], 1, 8) for _ in range(rng.randint(1, 4)))
                for _ in range(n(1500))])


def emoji():
    k = rng.randrange(6)
    e = pick(EMOJI)
    if k == 0:
        return e + chr(rng.randint(0x1F3FB, 0x1F3FF))  # skin tone
    if k == 1:
        return "\u200d".join(pick(EMOJI) for _ in range(rng.randint(2, 4)))  # ZWJ sequence
    if k == 2:
        return chr(rng.randint(0x1F1E6, 0x1F1FF)) + chr(rng.randint(0x1F1E6, 0x1F1FF))  # flag
    if k == 3:
        return rng.choice("0123456789#*") + "\ufe0f\u20e3"  # keycap
    if k == 4:
        return e + rng.choice(["\ufe0f", "\ufe0e"])
    return e


add("recent scripts", [context(run_in(RECENT, 1, 3) + rng.choice(["", "'ve", "'s", "1", "a", " ", "."]))
                       for _ in range(n(1500))])
add("emoji", [context("".join(emoji() for _ in range(rng.randint(1, 4)))) for _ in range(n(1200))])
astral = list(range(0x10000, 0x110000, 0x3F1))  # strided over planes 1-16 (PUA 15-16 included)
astral += [rng.choice([rng.randint(0xF0000, 0xFFFFD), rng.randint(0x100000, 0x10FFFD), rng.randint(0xE0000, 0xE01EF)])
           for _ in range(n(400))]
add("astral", [context(chr(c)) for c in astral])
add("controls and format", [context(run_of(CONTROLS, 1, 3)) for _ in range(n(800))]
    + [context(chr(c)) for c in CONTROLS if c < 0x10000])
add("white space", [run_of(SPACES, 1, 6) for _ in range(n(300))]
    + [sep().join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))).join([run_of(SPACES, 0, 4), run_of(SPACES, 0, 4)])
       for _ in range(n(700))]
    + [rng.choice([" ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000"]) * rng.randint(1, 40) + rng.choice(["", "x", "x ", " 1"])
       for _ in range(n(500))])
add("digits", [context(run_of(DIGITS, 1, 8)) for _ in range(n(900))] + [context(chr(c)) for c in NUMBERS if rng.random() < 0.4]
    + [context(number() + rng.choice(["", ".", ",", " ", "e"]) + number()) for _ in range(n(600))])
add("punctuation and symbols", [context(run_of(PUNCT if rng.random() < 0.6 else SYMBOLS, 1, 5)) for _ in range(n(2000))])
add("contractions", ["".join(rng.choice([rng.choice(WORDS), ascii_word(), " ", rng.choice(CONTRACTIONS), rng.choice(CONTRACTIONS),
                                         chr(rng.choice(CASED)), number()]) for _ in range(rng.randint(1, 6)))
                     for _ in range(n(1500))])


def vocab_specials():
    out = []
    for f in ("vocab-bpe-smollm.gguf", "vocab-spm-gemma3.gguf"):
        r = GGUFReader(os.path.join(shared, "models/vocab", f))
        toks, types = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
        for i, j in zip(toks.data, types.data):
            if types.parts[j][0] in (3, 4):  # control, user-defined
                out.append(bytes(toks.parts[i]).decode("utf-8"))
    return out


real_specials = vocab_specials()
add("special-looking", ["".join(rng.choice([rng.choice(SPECIALS), rng.choice(real_specials), rng.choice(WORDS), sep(), sep(),
                                            "<", ">", "|", "[", "]", chr(rng.choice(CASED))]) for _ in range(rng.randint(1, 7)))
                        for _ in range(n(2000))])
add("long words", [c * n + rng.choice(["", " x", "y"]) for c in ("a", "é", "İ", "中", "ß", "\u0301", "1", " ", "\u00a0")
                   for n in (99, 100, 101, 150)])
every = [MARKS, CASED, DIGITS, PUNCT, SYMBOLS, CONTROLS, SPACES, astral]
ranges = CJK + HANGUL + KANA + scripts + EMOJI


def piece():
    k = rng.randrange(9)
    if k < 3:
        return rng.choice([rng.choice(WORDS), ascii_word(), number(), sep(), rng.choice(CONTRACTIONS)])
    if k < 6:
        return chr(rng.choice(rng.choice(every)))
    if k < 8:
        return pick(ranges)
    return rng.choice([emoji(), rng.choice(SPECIALS), rng.choice(SPECIAL_CASES)])


add("mixtures", ["".join(piece() for _ in range(rng.randint(1, 30))) for _ in range(n(6000))])
add("edges", ["", "\u2581", "\u2581\u2581x", " \u2581", "a\u2581b", "\u0120", "\u010a", "\u0120the", "\u00c4\u0142"]
    + [chr(c) for c in range(128)] + [" " + chr(c) for c in range(128)] + [chr(c) + " " for c in range(128)]
    + ["".join(rng.choice([" ", "\n", "\r", "\t", "x", "1", ".", "'s", "\u2581", "\u00a0"]) for _ in range(rng.randint(1, 12)))
       for _ in range(n(1500))])
add("long mixtures", ["".join(piece() for _ in range(rng.randint(30, 200))) for _ in range(n(300))])
for t in texts:
    t.encode("utf-8")  # valid scalar values only

# ---- the references ---------------------------------------------------------------------------

gguf_ids = {}
for f in sorted(os.listdir(os.path.join(shared, "models/vocab"))):
    tok = Llama(model_path=os.path.join(shared, "models/vocab", f), vocab_only=True, verbose=False)
    ids, special = [], {}
    for i, t in enumerate(texts):
        b = t.encode("utf-8")
        plain = tok.tokenize(b, add_bos=False, special=False)
        spec = tok.tokenize(b, add_bos=False, special=True)
        ids.append(plain)
        if spec != plain:
            special[str(i)] = spec
    gguf_ids[f] = {"ids": ids, "special": special}
    print(f, len(ids), "texts", sum(map(len, ids)), "ids", len(special), "differ with special tokens parsed")
    del tok

tk_rel = "models/m2v-minilm-128-vq/tokenizer.json"  # all-MiniLM-L6-v2's WordPiece, as Model2Vec trimmed it
tk = tokenizers.Tokenizer.from_file(os.path.join(shared, tk_rel))
assert tk.truncation["max_length"] == 512
wp = [e.ids for e in tk.encode_batch(texts, add_special_tokens=False)]
print("wordpiece", len(wp), "texts", sum(map(len, wp)), "ids")

doc = {
    "seed": SEED,
    "scale": SCALE,
    "versions": {"python": platform.python_version(), "unicodedata": unicodedata.unidata_version,
                 "llama_cpp": llama_cpp.__version__, "tokenizers": tokenizers.__version__},
    "counts": {"texts": len(texts), "classes": {c[0]: c[2] - c[1] for c in classes}},
    "texts": texts,
    "classes": classes,
    "gguf": gguf_ids,
    "wordpiece": {"tokenizer": tk_rel, "truncation": 512, "ids": wp},
}
raw = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
subprocess.run(["zstd", "-19", "-q", "-f", "-o", out_path], input=raw, check=True)
print(len(texts), "texts,", len(raw), "bytes of JSON,", os.path.getsize(out_path), "compressed")
