"""llama.cpp's answers for the real sentence encoder all-MiniLM-L6-v2 (as `models/fetch.py --model
all-minilm-l6-v2` converts it): bert/minilm-reference.json, with the ids and the unit vector of
64 corpus texts, a few harder ones and one past the model's 512 positions ([CLS], the first 510
ids, [SEP]: the sequence wasmind runs; llama.cpp is given those ids).

usage: python gen_minilm.py [MODEL.gguf]   (default ../../models/all-MiniLM-L6-v2-F16.gguf;
       needs llama-cpp-python==0.3.36 and numpy; writes next to itself)
"""
import hashlib, json, os, sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.environ.get("WASMIND_FIXTURES") or os.path.join(HERE, "..", "..", "target", "fixtures")  # cargo xtask fixtures
assert llama_cpp.__version__ == "0.3.36", llama_cpp.__version__
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "models", "all-MiniLM-L6-v2-F16.gguf")
texts = json.load(open(os.path.join(FIXTURES, "reference", "vocab-reference.json")))["texts"][:64] + [
    "A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today.",
    "Héllo, WÖRLD! naïve café 日本語 😀", "", "word " * 700,
]
llm = Llama(path, embedding=True, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, verbose=False)
n_embd = llm.n_embd()


def embed_ids(ids):
    llm._ctx.kv_cache_clear()
    llm._batch.reset()
    llm._batch.add_sequence(ids, 0, True)
    llm._ctx.decode(llm._batch)
    v = np.array(llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)[:n_embd], dtype=np.float64)
    return v / np.linalg.norm(v)


rows = []
for text in texts:
    ids = llm.tokenize(text.encode(), add_bos=True, special=False)
    if len(ids) > 512:
        ids = ids[:511] + ids[-1:]
    rows.append({"ids": ids, "embedding": [round(float(x), 7) for x in embed_ids(ids)]})
sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
out = {"file_sha256": sha, "texts": texts, "rows": rows}
json.dump(out, open(os.path.join(HERE, "bert", "minilm-reference.json"), "w"), ensure_ascii=False)
e = {t: np.array(r["embedding"]) for t, r in zip(texts, rows)}
print("paraphrase", e[texts[64]] @ e[texts[65]], "unrelated", e[texts[64]] @ e[texts[66]])
