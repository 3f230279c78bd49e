"""llama.cpp's ids for Qwen 3.5's pre-tokenizer (`tokenizer.ggml.pre = "qwen35"`: Qwen2's split
pattern with combining marks, \\p{M}, counted as letters), on Qwen2's vocabulary:
qwen35-pre-tokenizer.json.

usage: python gen_qwen35_pre.py   (needs llama-cpp-python==0.3.36; reads ../../../shared)

No Qwen 3.5 vocabulary is in ../shared, so the file tokenized is
../shared/models/vocab/vocab-bpe-qwen2.gguf with its `tokenizer.ggml.pre` rewritten to
"qwen35" (as src/tokenizer/tests.rs rewrites it): the same merges, only the split differs.
The texts are the corpus of ../shared/reference/vocab-reference.json, whose rows are kept only
where the ids differ from that file's qwen2 rows (the test takes the others from there), and
texts made to put marks everywhere the pattern looks.
"""
import json, os, struct, tempfile

import llama_cpp
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "..", "shared")
assert llama_cpp.__version__ == "0.3.36", llama_cpp.__version__

EXTRA = [
    "cafe\u0301 de\u0301ja\u0300 vu", "\u0301abc", " \u0301abc", "x\u0301 1\u0301!", "'\u0301s it's",
    "a\u20dd b\u20dd\u20dd", "!!\u0301??", "\u0301\u0302\u0303", "\n\u0301\n", "  \u0301  x",
    "1\u03012\u0301", "नमस्ते दुनिया", "สวัสดีครับ", "Tiếng Việt có dấu", "ab\u0301c'd\u0301",
    "-\u0301-", "\u0915\u093f\u0924\u093e\u092c", "e\u0308\u0301\u0323!x", "\u0301'll \u0301'LL",
    "\t\u0301\t", "x \u0301\r\n\u0301",
]


def patched_vocab():
    b = open(os.path.join(SHARED, "models/vocab/vocab-bpe-qwen2.gguf"), "rb").read()
    key = b"tokenizer.ggml.pre"
    at = b.index(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 4  # past the value type
    n = struct.unpack("<Q", b[at:at + 8])[0]
    assert b[at + 8:at + 8 + n] == b"qwen2"
    return b[:at] + struct.pack("<Q", 6) + b"qwen35" + b[at + 8 + n:]


ref = json.load(open(os.path.join(SHARED, "reference/vocab-reference.json")))
base = ref["files"]["vocab-bpe-qwen2.gguf"]
with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
    f.write(patched_vocab()); f.flush()
    tok = Llama(model_path=f.name, vocab_only=True, verbose=False)
    rows = []
    for i, t in enumerate(ref["texts"] + EXTRA):
        b = t.encode()
        row = {"ids": tok.tokenize(b, add_bos=False, special=False),
               "ids_special": tok.tokenize(b, add_bos=False, special=True)}
        if i >= len(ref["texts"]) or row != {k: base[i][k] for k in row}:
            rows.append({"corpus_index": i, "text": t, **row} if i < len(ref["texts"]) else {"text": t, **row})
out = {"note": "vocab-bpe-qwen2.gguf with tokenizer.ggml.pre = qwen35; corpus rows that differ "
               "from its qwen2 rows (corpus_index), then extra texts", "rows": rows}
json.dump(out, open(os.path.join(HERE, "qwen35-pre-tokenizer.json"), "w"), ensure_ascii=False, indent=0)
print(len(rows), "rows,", sum(1 for r in rows if "corpus_index" in r), "from the corpus")
