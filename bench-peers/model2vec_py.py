"""The Python peer of the embedding bench: the `model2vec` package's `StaticModel.encode` over a
JSON array of texts, on one thread (run with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
OMP_NUM_THREADS=1, as `cargo xtask bench` does). One JSON line of throughput on stdout.

    python3 bench-peers/model2vec_py.py --model DIR --texts T.json --set NAME [--min-secs 1]
"""

import argparse
import json
import os
import time

import model2vec
from model2vec import StaticModel

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--texts", required=True)
p.add_argument("--set", default="texts")
p.add_argument("--min-secs", type=float, default=1.0)
a = p.parse_args()

texts = json.load(open(a.texts, encoding="utf-8"))
m = StaticModel.from_pretrained(a.model)
m.encode(texts, use_multiprocessing=False)  # warm-up
times = []
start = time.perf_counter()
while len(times) < 3 or time.perf_counter() - start < a.min_secs:
    t = time.perf_counter()
    m.encode(texts, use_multiprocessing=False)
    times.append(time.perf_counter() - t)
best = min(times)
med = sorted(times)[len(times) // 2]
nbytes = sum(len(t.encode("utf-8")) for t in texts)
print(json.dumps({
    "engine": "model2vec-py", "bench": "embed", "api": "encode", "set": a.set,
    "module": f"model2vec {model2vec.__version__} (Python)",
    "threads": int(os.environ.get("RAYON_NUM_THREADS", "0")) or None,
    "texts": len(texts), "bytes": nbytes, "passes": len(times),
    "texts_per_s": len(texts) / best, "mb_per_s": nbytes / best / 1e6,
    "texts_per_s_median": len(texts) / med, "mb_per_s_median": nbytes / med / 1e6,
    "loadavg": os.getloadavg()[0],
}))
