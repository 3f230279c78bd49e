"""Unicode sweep for the embedder's tokenizer: ids from Hugging Face `tokenizers` (the oracle
model2vec uses) for every code point in context, canonical-ordering cases and seeded fuzz.

usage: python3 sweep.py TOKENIZER_JSON OUT.jsonl
Each output line is [text, ids] with ids as model2vec pools them (truncated to 512, [UNK]
dropped). Run the comparison with
  M2V_SWEEP=OUT.jsonl cargo test --release -p wasmind --lib sweep -- --ignored --nocapture
"""
import json, random, sys, unicodedata
from tokenizers import Tokenizer

tok_path, out_path = sys.argv[1:3]
tk = Tokenizer.from_file(tok_path)
tk.enable_truncation(512)
unk = tk.token_to_id(tk.model.unk_token)

texts = []
# 1. Every scalar value, alone and between letters and in a word (planes 0-16, surrogates excluded).
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    c = chr(cp)
    texts.append(f"a{c}b {c}x{c}")
# 2. Canonical ordering: bases followed by marks of different combining classes, including
#    spacing marks with a non-zero class (U+1D165 ...) and the blocking CGJ (U+034F, class 0).
marks = [0x0301, 0x0316, 0x0323, 0x0334, 0x0345, 0x05B0, 0x0E38, 0x1D165, 0x1D166, 0x1D16D,
         0x1D16E, 0x302A, 0x302E, 0x034F, 0x0F71, 0x0F72, 0x0F80, 0x0F74, 0x16FF0, 0x1E000]
bases = ["a", "e", "\u00e9", "\u1e0b", "\u0227", "\u00c5", "\u1100", "\uac00", "\u0915", "\u0f40"]
rng = random.Random(7)
for b in bases:
    for m1 in marks:
        for m2 in marks:
            texts.append(f"x{b}{chr(m1)}{chr(m2)}y")
for _ in range(20000):
    n = rng.randint(1, 6)
    texts.append("".join([rng.choice(bases)] + [chr(rng.choice(marks)) for _ in range(n)]) + rng.choice(["", "a", " b"]))
# 3. Fuzz over an alphabet of interesting characters.
pool = [chr(c) for c in range(0x20, 0x7F)] + [chr(m) for m in marks] + list(
    "\u0130\u03a3\u1e9e\u01c5\u2126\u212a\u00df\ufb01\u3000\u00a0\u200b\u2028\ufeff\u00ad\t\n\r\x00\ufffd"
    "\u4e2d\u6587\u3042\u30ab\ud55c\uf900\U00020000\U0002f800\U000f0000\U00100000\U0001f600")
for _ in range(50000):
    texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 40))))
# 4. Long words around max_input_chars_per_word and added tokens in odd places.
for n in (99, 100, 101):
    for c in ("a", "\u00e9", "\u0130", "\u4e2d"):
        texts.append(c * n)
        texts.append("x" + c * n + " y")
texts += ["[PAD]", "[UNK]", "a[PAD]b", "[PAD][UNK][PAD]", "[pad]", "[PAD", "x [UNK]y", "[[PAD]]"]

enc = tk.encode_batch(texts, add_special_tokens=False)
with open(out_path, "w") as f:
    for t, e in zip(texts, enc):
        ids = [i for i in e.ids if i != unk][:512]
        f.write(json.dumps([t, ids], ensure_ascii=True) + "\n")
print(len(texts), "texts")
