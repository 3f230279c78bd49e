"""The suite's tiny models of the architectures the llama.cpp-made fixtures lack (gemma2, granite,
smollm3, lfm2, exaone4, qwen35; and phi3's LongRoPE, YaRN), and llama.cpp's logits for them: arch/tiny-<arch>-F16.gguf and
arch/reference.json.

usage: python gen_tiny_arch.py   (needs llama-cpp-python==0.3.36, gguf, numpy; writes next to itself)

Each model is random (seed 2026), small enough to commit, and shaped to exercise what is its
own: gemma2's head width apart from D / H, sliding window crossed by the 48 ids, and soft caps
low enough to bend its scores and logits; granite's four scales and MQA; smollm3's layer
without RoPE (every fourth); lfm2's convolution layers between its attention layers (the 48
ids go through in a batch of 32 and one of 16, so the convolutions cross a batch); exaone4
without norms before attention and the feed-forward, and at 64 layers (tiny ones) its
sliding-window layers with a global layer without RoPE every fourth; qwen35's gated delta-net
layers (their convolution and recurrent state cross the batch too) beside its gated attention,
once with every second layer attending, once with its own list of layers, three value heads
to each key head, and M-RoPE sections that leave some pairs unrotated; phi3 with LongRoPE
(Phi-3.5, Phi-4-mini), once with an original context below the 64 the test runs (its long
factors) and partial RoPE, once above llama.cpp's 256 (its short factors); YaRN RoPE scaling
on qwen3 and on gemma2 (its sliding-window layers scaled too).
Types: F16 as committed, and (unless `types` says otherwise) Q8_0 as llama-quantize writes it
from that F16 file (the test quantizes the F16 file at load instead: the same Q8_0 blocks).
The reference has the shape of the fixture models/tiny/tiny-arch-reference.json: the ids, and per
file llama.cpp's top-5 and top-two margin at every position and its logits at the last 4.
"""
import ctypes, json, os, sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crosscheck"))
from tinymodel import write_model  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "arch")
SHAPES = [
    dict(arch="gemma2", V=320, D=64, H=4, HKV=2, HD=32, FF=128, L=4, SWA=8, attn_softcap=2.5, final_softcap=10.0,
         out_scale=8.0),
    dict(arch="granite", V=320, D=64, H=4, HKV=1, FF=128, L=3, tied=True, embedding_scale=0.3,
         residual_scale=0.22, attention_scale=0.09, logit_scale=2.5),
    dict(arch="smollm3", V=320, D=64, H=4, HKV=2, FF=128, L=4, tied=True),
    dict(arch="lfm2", V=320, D=64, H=4, HKV=2, FF=128, L=6, kinds="ccacac", conv_taps=3, tied=True),
    dict(arch="exaone4", V=320, D=64, H=4, HKV=2, FF=128, L=4),
    # 64 layers amplify every rounding: F16 only, and smaller logits
    dict(arch="exaone4", V=320, D=16, H=2, HKV=1, FF=32, L=64, SWA=8, tied=True, name="exaone4-swa",
         out_scale=0.6, types=["F16"]),
    dict(arch="qwen35", V=320, D=64, H=4, HKV=2, HD=32, FF=128, L=4, interval=2, S=16, HK=2, HV=2,
         conv_taps=4, rope_dims=16, sections=[3, 3, 2, 0], tied=True),
    # more value heads than key heads (tiled), its own list of layers, and M-RoPE sections
    # that leave some pairs unrotated
    dict(arch="qwen35", V=320, D=64, H=2, HKV=1, HD=32, FF=96, L=5, kinds="rrarr", S=8, HK=2, HV=6,
         conv_taps=3, rope_dims=16, sections=[1, 1, 0, 1], name="qwen35-tiled"),
    dict(arch="phi3", V=320, D=64, H=4, HKV=2, FF=128, L=3, rope_dims=12, longrope=32, name="phi3-longrope"),
    dict(arch="phi3", V=320, D=64, H=4, HKV=4, FF=128, L=3, longrope=256, ctx=131072, tied=True,
         name="phi3-longrope-short"),
    # YaRN (Qwen3's 128k files) from a small original context, so that its ramp crosses pairs
    # that turn fast within the 48 ids; once on gemma2, whose sliding-window layers take it too
    dict(arch="qwen3", V=320, D=64, H=4, HKV=2, HD=32, FF=128, L=3, yarn=(4.0, 256), tied=True,
         name="qwen3-yarn"),
    dict(arch="gemma2", V=320, D=64, H=4, HKV=2, HD=32, FF=128, L=4, SWA=8, attn_softcap=20.0,
         final_softcap=30.0, out_scale=8.0, yarn=(2.5, 128), name="gemma2-yarn"),
]
assert llama_cpp.__version__ == "0.3.36", llama_cpp.__version__


def quantize(src, dst, ftype):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype; p.pure = True; p.allow_requantize = True; p.nthread = 2
    assert llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) == 0, dst


os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(2026)
ids = [int(x) for x in rng.integers(0, 320, 48)]
ref = {"tokens": ids, "note": "vocab is 'none'; feed these ids; logits after each position", "models": {}}
for n, s in enumerate(SHAPES):
    f32 = os.path.join(OUT, f"tiny-{s.get('name', s['arch'])}-F32.gguf")
    write_model(f32, s, np.random.default_rng(2026 * 10 + n))
    files = {"F16": f32.replace("F32", "F16"), "Q8_0": f32.replace("F32", "Q8_0")}
    quantize(f32, files["F16"], 1)
    quantize(files["F16"], files["Q8_0"], 7)
    os.remove(f32)
    for ty, path in files.items():
        if ty not in s.get("types", files):
            continue
        llm = Llama(model_path=path, n_ctx=256, n_threads=2, n_batch=64, logits_all=True, verbose=False)
        llm.eval(ids)
        lg = np.array(llm.scores[: len(ids)], dtype=np.float64)
        del llm
        srt = np.sort(lg, axis=1)
        name = os.path.basename(path)
        ref["models"][name] = {
            "shape": s,
            "top5": [np.argsort(-r)[:5].tolist() for r in lg],
            "margins": [round(float(r[-1] - r[-2]), 4) for r in srt],
            "last4_logits": [[round(float(x), 4) for x in r] for r in lg[-4:]],
        }
        print(name, os.path.getsize(path), "decisive", int((srt[:, -1] - srt[:, -2] >= 0.5).sum()),
              "logit range", round(float(lg.min()), 2), round(float(lg.max()), 2))
    os.remove(files["Q8_0"])  # the test quantizes the F16 file at load
json.dump(ref, open(os.path.join(OUT, "reference.json"), "w"))
