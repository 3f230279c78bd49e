"""llama.cpp's ids for pre-tokenizers that no vocabulary fixture has, each run on a vocabulary
that is there with its `tokenizer.ggml.pre` rewritten (as src/tokenizer/tests.rs rewrites it):
the same merges, only the split differs.

- qwen35-pre-tokenizer.json: Qwen 3.5's (`qwen35`: Qwen2's split pattern with combining marks,
  \\p{M}, counted as letters) on the fixture models/vocab/vocab-bpe-qwen2.gguf;
- gpt-4o-pre-tokenizer.json: GPT-4o's (`gpt-4o`, also Phi-4-mini's and Llama 4's: letter runs
  cut where the case turns, `/` after punctuation) on vocab-bpe-llama-bpe.gguf.

usage: python gen_patched_pre.py   (needs llama-cpp-python==0.3.36; reads target/fixtures)

The texts are the corpus of the fixture reference/vocab-reference.json, whose rows are kept only
where the ids differ from that file's rows for the unpatched vocabulary (the test takes the
others from there), texts made to put what the pattern looks at everywhere it looks, and (for
gpt-4o) random strings over an alphabet of letters of each case, marks, digits, apostrophes,
slashes and white space, seeded. For gpt-4o the file also holds the pieces themselves, as
llama.cpp's own `unicode_regex_split` cuts each text (its unicode.cpp from the same sdist,
compiled with g++): with this vocabulary most cuts that differ give the same ids.
"""
import glob, hashlib, json, os, random, struct, subprocess, tarfile, tempfile, urllib.request

import llama_cpp
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.environ.get("WASMIND_FIXTURES") or os.path.join(HERE, "..", "..", "target", "fixtures")  # cargo xtask fixtures
assert llama_cpp.__version__ == "0.3.36", llama_cpp.__version__

QWEN35_EXTRA = [
    "cafe\u0301 de\u0301ja\u0300 vu", "\u0301abc", " \u0301abc", "x\u0301 1\u0301!", "'\u0301s it's",
    "a\u20dd b\u20dd\u20dd", "!!\u0301??", "\u0301\u0302\u0303", "\n\u0301\n", "  \u0301  x",
    "1\u03012\u0301", "नमस्ते दुनिया", "สวัสดีครับ", "Tiếng Việt có dấu", "ab\u0301c'd\u0301",
    "-\u0301-", "\u0915\u093f\u0924\u093e\u092c", "e\u0308\u0301\u0323!x", "\u0301'll \u0301'LL",
    "\t\u0301\t", "x \u0301\r\n\u0301",
]

GPT4O_EXTRA = [
    "HelloWorld", "XMLHttpRequest", "iPhone iPAD", "camelCaseWordsAND more", "ABCdef ABC'sDEF",
    "\u00c4B \u00c4Bc Ab\u00c4Cd \u00c9COLE na\u00efveT\u00c9ST", "\u00e4\u00f6\u00fcABC\u00e9",
    "don't DON'T Don'T I'M we'Re they'VE x'LL 'd 's 'S", "McDonald'S O'Neil",
    "https://example.com/a//b/\nc", "a/\n/b !!/\r\n ?/ /", "12345 1234567 \u0661\u0662\u0663\u0664",
    "e\u0301X \u0301Ab c\u0301D", "\u3000Word \u00a0x\u00a0Y", "\u0391\u0392\u0393\u03b1\u03b2\u03b3 \u0393\u03b1\u0392",
    "\u01c5ungla \u00dfSS \u1e9eSS", "\u4e2d\u6587Text \u30c6\u30b9\u30c8Test", "\tTab\r\nLine\x0bVT\x0cFF",
    "  leading and trailing  ", "\n\n\nx \n \n", "A", "a", "'", "'ll", "!A", "!a", "\ra", "\nA",
    "1a A1 a1A", "_snake_case_NAME_", "end.\nNext", "x/'s", "HTTPServer's", "\u0130stanbul \u0131I",
]


def gpt4o_random(n, seed=4):
    rng = random.Random(seed)
    alphabet = list("aZbYqQxX") + ["\u00e9", "\u00c9", "\u00df", "\u4e2d", "\u0301", "\u0130"] + \
        list("09'/.!- ") + ["\n", "\r\n", "\t", "\u3000", "\u0663", "sS", "'ll", "'RE"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(n)]


# llama.cpp 0.3.36's split regex for gpt-4o, as src/llama-vocab.cpp writes it (checked there)
GPT4O_REGEX = (
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)

SPLIT_MAIN = r"""
// For each NUL-terminated text on stdin: the byte lengths of the pieces llama.cpp's
// unicode_regex_split cuts it into with the regex argv[1], one line per text.
#include "unicode.h"
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
int main(int, char ** argv) {
    std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    for (size_t start = 0; start < all.size();) {
        size_t end = all.find('\0', start);
        auto pieces = unicode_regex_split(all.substr(start, end - start), {argv[1]}, false);
        for (size_t i = 0; i < pieces.size(); ++i) printf(i ? " %zu" : "%zu", pieces[i].size());
        printf("\n");
        start = end + 1;
    }
}
"""


def llama_cpp_pieces(regex, texts):
    """The piece lengths (bytes) of each text as llama.cpp's own unicode_regex_split cuts it:
    its unicode.cpp from the llama-cpp-python 0.3.36 sdist on PyPI, compiled with g++."""
    work = os.path.join(tempfile.gettempdir(), "wasmind-llama-cpp-split")
    os.makedirs(work, exist_ok=True)
    sdist = os.path.join(work, "llama_cpp_python-0.3.36.tar.gz")
    if not os.path.exists(sdist):
        index = urllib.request.Request("https://pypi.org/simple/llama-cpp-python/",
                                       headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        files = json.load(urllib.request.urlopen(index))["files"]
        f = next(f for f in files if f["filename"] == os.path.basename(sdist))
        urllib.request.urlretrieve(f["url"], sdist)
        digest = hashlib.sha256(open(sdist, "rb").read()).hexdigest()
        assert digest == f["hashes"]["sha256"], "the sdist's sha256 is not PyPI's"
    with tarfile.open(sdist) as t:
        members = [m for m in t.getmembers() if "/vendor/llama.cpp/src/unicode" in m.name
                   or m.name.endswith("/vendor/llama.cpp/src/llama-vocab.cpp")]
        t.extractall(work, members)
    src = glob.glob(os.path.join(work, "*/vendor/llama.cpp/src"))[0]
    vocab_cpp = open(os.path.join(src, "llama-vocab.cpp")).read()
    assert json.dumps(regex)[1:-1] in vocab_cpp, "the regex is not llama-vocab.cpp's"
    open(os.path.join(work, "main.cpp"), "w").write(SPLIT_MAIN)
    exe = os.path.join(work, "split")
    subprocess.run(["g++", "-O1", "-std=c++17", "-I", src, os.path.join(work, "main.cpp"),
                    os.path.join(src, "unicode.cpp"), os.path.join(src, "unicode-data.cpp"), "-o", exe],
                   check=True)
    assert not any("\0" in t for t in texts)
    out = subprocess.run([exe, regex], input="\0".join(texts).encode() + b"\0", capture_output=True,
                         check=True).stdout.decode().splitlines()
    assert len(out) == len(texts)
    return [[int(n) for n in line.split()] for line in out]


def patched_vocab(base, old, new):
    b = open(os.path.join(FIXTURES, "models/vocab", base), "rb").read()
    key = b"tokenizer.ggml.pre"
    at = b.index(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 4  # past the value type
    n = struct.unpack("<Q", b[at:at + 8])[0]
    assert b[at + 8:at + 8 + n] == old.encode()
    return b[:at] + struct.pack("<Q", len(new)) + new.encode() + b[at + 8 + n:]


ref = json.load(open(os.path.join(FIXTURES, "reference/vocab-reference.json")))
for base, old, new, extra, regex in [
    ("vocab-bpe-qwen2.gguf", "qwen2", "qwen35", QWEN35_EXTRA, None),
    ("vocab-bpe-llama-bpe.gguf", "llama-bpe", "gpt-4o", GPT4O_EXTRA + gpt4o_random(400), GPT4O_REGEX),
]:
    base_rows = ref["files"][base]
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(patched_vocab(base, old, new)); f.flush()
        tok = Llama(model_path=f.name, vocab_only=True, verbose=False)
        rows = []
        for i, t in enumerate(ref["texts"] + extra):
            b = t.encode()
            row = {"ids": tok.tokenize(b, add_bos=False, special=False),
                   "ids_special": tok.tokenize(b, add_bos=False, special=True)}
            if i >= len(ref["texts"]):
                rows.append({"text": t, **row})
            elif row != {k: base_rows[i][k] for k in row}:
                rows.append({"corpus_index": i, "text": t, **row})
    out = {"note": f"{base} with tokenizer.ggml.pre = {new}; corpus rows that differ from its "
                   f"{old} rows (corpus_index), then extra texts", "rows": rows}
    if regex:
        # the split itself, which ids can hide: llama.cpp's pieces of each corpus text, and of
        # each extra text in its row
        pieces = llama_cpp_pieces(regex, ref["texts"] + extra)
        out["corpus_pieces"] = pieces[:len(ref["texts"])]
        for row in rows:
            at = row["corpus_index"] if "corpus_index" in row else len(ref["texts"]) + extra.index(row["text"])
            row["pieces"] = pieces[at]
    json.dump(out, open(os.path.join(HERE, f"{new}-pre-tokenizer.json"), "w"), ensure_ascii=False, indent=0)
    print(new, len(rows), "rows,", sum(1 for r in rows if "corpus_index" in r), "from the corpus")
