"""Cross-checks wasmind against a fresh llama.cpp on inputs no fixture holds, drawn from a seed:
model shapes, vocabularies, conversations and prompts the tests never saw. It hunts for a fit to
the fixtures; the suite (`cargo xtask test`) stays the gate.

usage: crosscheck.py WASMIND_CLI SHARED_DIR WORK_DIR SEED PART[,PART...]
(run it through `cargo xtask crosscheck`, which makes the Python environment and the CLI.)
needs: llama-cpp-python==0.3.36 (the version of the committed references, host-tests/fixtures), gguf, numpy, model2vec==0.10.0

Parts, each a line per case and a verdict:
- shapes: tiny random-weight models of all eleven architectures (CROSSCHECK_ARCHS: some) in
  shapes drawn from the seed
  (widths that are and are not multiples of 32 and 256, 1-8 heads, grouped and not, head widths
  16-256, partial RoPE and LongRoPE (long or short factors) for phi3, linear and YaRN RoPE scaling,
  tied outputs, 1-8 layers, sliding windows of 1-40, gemma2's soft caps, granite's four scales
  and RoPE switched off, lfm2's convolution and attention layers in any order, convolutions of 2-5 positions, exaone4 at 64 layers with
  its sliding windows, qwen35's delta-net and attention layers by list or by interval, 1-3
  value heads to a key head, delta heads 8-128 wide, M-RoPE sections), F32 and two other
  types each (quantized, F16, BF16) as llama-quantize writes them;
  llama.cpp's logits over 48 ids against `wasmind logits` with the single-threaded module, which must equal
  the threaded module's on 2 threads bit for bit.
  F32 files: every argmax where llama.cpp's top-two margin is >= 0.5, and the last 4 rows
  within 0.15. Other files (their activations are rounded too, to bf16, f16 or 8 bits, so a
  last-bit difference before the rounding becomes a whole step): the same argmaxes within 0.75
  (the suite's tolerances); past them, a llama or qwen2 file (F32 too: llama.cpp rounds its
  KV cache to f16) must land no further from llama.cpp than exact float64 math on its
  dequantized weights does, or we must land as close to exact math as llama.cpp does
  (host-tests/fixtures/gen/references/np_forward.py: last-4 rows; an argmax of ours may differ only where llama.cpp's
  margin is inside that distance), and any other rounded one in
  a model whose logits swing with any rounding (random deep nets can: exact float math on the dequantized
  weights lands further from llama.cpp than we do), rms error <= 0.15 x the logits' spread and
  every argmax whose margin is >= 1.0. Last, any file passes whose logits llama.cpp itself
  moves by another rounding (its KV cache in f32, or the F32 file the rounded one was made
  from) at least half as far as ours are from its, our other argmaxes only where the margin is
  inside twice that move (a random qwen35 at seed 6161 is chaotic: llama.cpp's F32 and Q4_K
  files 18.4 apart, ours and llama.cpp's Q4_K 5.6; its F32 file 0.176 from ours, 0.112 from
  llama.cpp with an f32 KV cache).
- vocab: the vocabulary-only GGUF files of llama.cpp's own tokenizer tests (from the
  llama-cpp-python source package: Llama 2/3 SPM and BPE, Phi-3, Qwen2, GPT-2, MPT, StarCoder,
  Command R, ...) on the fixtures' corpus, llama.cpp's test inputs and random strings, plain and
  with special tokens parsed. A vocabulary wasmind does not support must be refused by name.
- templates: random conversations (roles in any order, tricky contents) through every template
  `wasmind template` knows, against llama_chat_apply_template.
- chat: tiny models carrying the real vocabularies above (and a template: the file's own, else
  the one its family uses) take random single-turn chats (a system message or not; corpus texts
  and random strings) through `wasmind generate --chat`: the prompt ids must be llama.cpp's for
  llama_chat_apply_template's text, tokenized with special tokens parsed and its BOS rule.
- embed: the fixtures' Model2Vec models on random strings and long joins of corpus texts against
  the `model2vec` package (0.10.0, the references' version): the same pooled ids, cosine
  >= 0.99999 (computed in float64: the package's vectors are float16).
- greedy: the real models (the fixtures' SmolLM2 and Gemma 3 270M) on prompts
  drawn from the corpus: the same prompt ids, and a greedy reply that leaves llama.cpp's only
  where its top-two margin is < 0.5 or within its own spread there (its logits for that step
  with every token run alone instead of the prompt in one batch differ by as much: Gemma 3
  270M's can by 2), or (a llama file) where exact float64 math on the dequantized weights has
  a margin inside llama.cpp's distance from it and our logits there are as close to it as
  llama.cpp's (SmolLM2 on a Korean text at seed 9117: llama.cpp's margin 0.68, exact math's
  0.10, rms from exact math 0.28 theirs, 0.20 ours).
"""
import ctypes, glob, json, os, random, subprocess, sys, tarfile, urllib.request

import numpy as np
import gguf
import llama_cpp
from llama_cpp import Llama

from tinymodel import write_model

CLI, FIXTURES, WORK, SEED, PARTS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(",")
os.makedirs(WORK, exist_ok=True)
rng = random.Random(SEED)
failures = []
DECISIVE, FLOAT_TOL, QUANT_TOL = 0.5, 0.15, 0.75


def wasmind(*args, stdin=None):
    p = subprocess.run([CLI, *args], input=stdin, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr.strip()


def verdict(ok, line):
    print(("  ok   " if ok else "  FAIL ") + line, flush=True)
    if not ok:
        failures.append(line)


# ---- shapes ---------------------------------------------------------------------------------

ARCHS = ["llama", "qwen2", "qwen3", "gemma3", "phi3", "gemma2", "granite", "smollm3", "lfm2", "exaone4", "qwen35"]
ARCHS = os.environ.get("CROSSCHECK_ARCHS", ",".join(ARCHS)).split(",")  # e.g. lfm2,gemma2
QUANTS = {"Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q4_K": 15, "Q5_K": 17, "Q6_K": 18,
          "F16": 1, "BF16": 32}


# Both sides run with this context (Phi-3's LongRoPE picks its factors by it).
CHECK_CONTEXT = 256


def draw_shape(arch):
    """Hyper-parameters llama.cpp accepts for `arch` (llama and qwen2 need head width = dim /
    heads and RoPE over all of it)."""
    h = rng.choice([1, 2, 3, 4, 6, 8])
    hkv = rng.choice([d for d in range(1, h + 1) if h % d == 0])
    hd = rng.choice([16, 32, 40, 64, 96, 128, 256])
    if arch in ("qwen3", "gemma2", "gemma3", "qwen35"):
        d = rng.choice([128, 200, 256, 320, 384, 512, 640])
    else:
        hd = min(hd, 128)
        d = h * hd
    s = dict(arch=arch, V=rng.randint(256, 3000), D=d, H=h, HKV=hkv, HD=hd,
             FF=rng.choice([128, 256, 520, 768, 1024, 1536]), L=rng.randint(1, 4))
    if arch in ("gemma2", "gemma3"):
        s.update(L=rng.randint(2, 7), SWA=rng.randint(1, 40))
    # caps and scales that bend or scale the logits yet leave some far enough apart to compare
    if arch == "gemma2":
        s.update(attn_softcap=round(rng.uniform(1.0, 50.0), 2), final_softcap=round(rng.uniform(6.0, 30.0), 2))
    if arch == "granite":
        s.update(embedding_scale=round(rng.uniform(0.2, 12.0), 3), residual_scale=round(rng.uniform(0.1, 1.0), 3),
                 attention_scale=round(rng.uniform(0.02, 0.3), 4), logit_scale=round(rng.uniform(0.5, 4.0), 3))
        if rng.random() < 0.15:
            s["no_rope"] = True
    if arch == "smollm3":
        s["L"] = rng.randint(1, 8)
    if arch == "exaone4" and rng.random() < 0.4:
        # its sliding-window layers exist at 64 layers only: a narrow model of 64
        h = rng.choice([1, 2, 4])
        s.update(L=64, H=h, HKV=rng.choice([d for d in range(1, h + 1) if h % d == 0]), HD=16, D=16 * h,
                 FF=rng.choice([32, 64, 96]), SWA=rng.randint(1, 40))
    if arch == "lfm2":
        s["L"] = rng.randint(2, 8)
        kinds = [rng.choice("cca") for _ in range(s["L"])]
        # llama.cpp aborts on a model without attention layers, or without convolution layers
        a, c = rng.sample(range(s["L"]), 2)
        kinds[a], kinds[c] = "a", "c"
        s.update(kinds="".join(kinds), conv_taps=rng.randint(2, 5))
        if rng.random() < 0.3:
            s["SWA"] = rng.randint(1, 40)
    if arch == "qwen35":
        hk = rng.choice([1, 2, 4])
        s.update(L=rng.randint(2, 6), S=rng.choice([8, 16, 32, 64, 128]), HK=hk, HV=hk * rng.choice([1, 2, 3]),
                 conv_taps=rng.randint(2, 5), rope_dims=rng.choice(range(4, hd + 1, 4)))
        sections = [rng.randint(0, 4) for _ in range(4)]
        sections[rng.randrange(3)] = rng.randint(1, 4)  # (ggml asserts a t, h or w section)
        s["sections"] = sections
        if rng.random() < 0.5:
            s["interval"] = rng.randint(2, s["L"])  # at least one layer of each kind
        else:
            kinds = [rng.choice("rra") for _ in range(s["L"])]
            a, r = rng.sample(range(s["L"]), 2)
            kinds[a], kinds[r] = "a", "r"
            s["kinds"] = "".join(kinds)
    if arch == "phi3" and rng.random() < 0.5:
        s["rope_dims"] = rng.choice([r for r in range(8, hd + 1, 8) if r % 2 == 0])
    if arch == "phi3" and rng.random() < 0.5:
        # LongRoPE (Phi-3.5, Phi-4-mini): the long factors below the checks' context of
        # CHECK_CONTEXT, the short ones at or above it
        s["longrope"] = rng.choice([16, 32, 100, 128, CHECK_CONTEXT, 512, 4096])
        s["ctx"] = rng.choice([c for c in (2048, 4096, 131072) if c > s["longrope"]])
    if arch not in ("gemma2", "gemma3") and rng.random() < 0.3:
        s["tied"] = True
    if rng.random() < 0.25:
        s["linear"] = rng.choice([2.0, 4.0, 8.0])
    elif "longrope" not in s and rng.random() < 0.25:
        # YaRN (Qwen3's 128k files); a small original context puts its ramp on pairs that
        # turn within the 48 ids
        s["yarn"] = (rng.choice([2.0, 2.5, 4.0, 8.0]), rng.choice([64, 128, 256, 1024, 4096, 32768]))
    return s


def quantize(src, dst, ftype):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype; p.pure = True; p.allow_requantize = True; p.nthread = 2
    return llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) == 0


def exact_model(path):
    """`ids -> logits` of exact float64 math on the dequantized weights of a llama or qwen2 file
    (no RoPE scaling): host-tests/fixtures/gen/references/np_forward.py."""
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "gen", "references", "np_forward.py")).read()
    scope = {}
    exec(src[: src.index("ref = json.load")], scope)  # its load() and forward(), not its main
    arch, kv, t = scope["load"](path)
    return lambda ids: np.asarray(scope["forward"](arch, kv, t, ids), dtype=np.float64)


def exact_logits(path, ids):
    return exact_model(path)(ids)


def llama_logits(path, ids, **kv):
    llm = Llama(model_path=path, n_ctx=CHECK_CONTEXT, n_threads=2, n_batch=64, logits_all=True, verbose=False, **kv)
    llm.eval(ids)
    ref = np.array(llm.scores[: len(ids)], dtype=np.float64)
    del llm
    return ref


def check_logits(path, name, ids, rounded, exact_ok=False, f32_ref=None):
    """The verdict on `wasmind logits` for `path` against llama.cpp's logits, which it returns
    (`f32_ref`: llama.cpp's for the F32 file a rounded one was made from)."""
    ref = llama_logits(path, ids)
    verdict(*judge_logits(path, name, ids, rounded, exact_ok, f32_ref, ref))
    return ref


def judge_logits(path, name, ids, rounded, exact_ok, f32_ref, ref):
    arg = ",".join(map(str, ids))
    runs = [wasmind("logits", "--model", path, "--ids", arg, "--threads", n, "--ctx", str(CHECK_CONTEXT))
            for n in ("0", "2")]
    if runs[0][0] != 0:
        return (False, f"{name}: wasmind logits failed: {runs[0][2][:200]}")
    if runs[1][1] != runs[0][1]:
        return (False, f"{name}: 2 threads differ from the single-threaded module")
    out = json.loads(runs[0][1])
    top = [r[0] for r in out["top5"]]
    srt = np.sort(ref, axis=1)
    margins = srt[:, -1] - srt[:, -2]
    ours = np.array(out["last_logits"], dtype=np.float64)
    diff = np.abs(ours - ref[-4:])
    agree = lambda m: all(top[i] == int(np.argmax(ref[i])) for i in range(len(ids)) if margins[i] >= m)
    decisive = int((margins >= DECISIVE).sum())
    wrong = sum(top[i] != int(np.argmax(ref[i])) for i in range(len(ids)) if margins[i] >= DECISIVE)
    rms, spread = float(np.sqrt((diff ** 2).mean())), float(ref[-4:].std())
    line = (f"{name:34} argmax {decisive - wrong}/{decisive} decisive, last-4 max|d| {diff.max():.3f} "
            f"rms {rms:.3f} (logits' spread {spread:.2f})")
    if agree(DECISIVE) and diff.max() <= (QUANT_TOL if rounded else FLOAT_TOL):
        return (True, line)
    if exact_ok:
        # Exact math as far from llama.cpp as we are, or we as close to exact math as llama.cpp
        # is: then the gap is rounding (llama.cpp's or the model's amplifying it), and an
        # argmax of ours may differ where the margin is inside that gap.
        ex = exact_logits(path, ids)
        ex_wrong = sum(int(np.argmax(ex[i])) != int(np.argmax(ref[i])) for i in range(len(ids)) if margins[i] >= DECISIVE)
        ex_diff = float(np.abs(ex[-4:] - ref[-4:]).max())
        ours_ex = float(np.abs(ours - ex[-4:]).max())
        ours_off = [float(margins[i]) for i in range(len(ids)) if margins[i] >= DECISIVE and top[i] != int(np.argmax(ref[i]))]
        return (min(diff.max(), ours_ex) <= ex_diff and all(m < ex_diff for m in ours_off),
                       line + f" [exact float math: {decisive - ex_wrong}/{decisive}, max|d| {ex_diff:.3f} from "
                       f"llama.cpp, {ours_ex:.3f} from ours; "
                       f"our other argmaxes at margins {', '.join(f'{m:.2f}' for m in ours_off) or 'none'}]")
    if rounded and rms <= 0.15 * spread and agree(1.0):
        return (True, line + " [swinging model: rms/spread and margin >= 1.0]")
    # Past those, a model whose logits llama.cpp itself moves about as far with another
    # rounding (its KV cache in f32 instead of f16; the F32 file instead of this one): our
    # logits within twice that move of its (one rounding's move is one sample of a chaotic
    # model's), our other argmaxes where the margin is inside it.
    other = f32_ref if rounded else llama_logits(path, ids, type_k=0, type_v=0)
    own = float(np.abs(other[-4:] - ref[-4:]).max())
    off = [float(margins[i]) for i in range(len(ids)) if margins[i] >= DECISIVE and top[i] != int(np.argmax(ref[i]))]
    return (diff.max() <= 2 * own and all(m < 2 * own for m in off),
            line + f" [llama.cpp's own move with {'the F32 file' if rounded else 'an f32 KV cache'}: max|d| {own:.3f}; "
            f"our other argmaxes at margins {', '.join(f'{m:.2f}' for m in off) or 'none'}]")


def shapes():
    print("\n== shapes: random model shapes, llama.cpp's logits")
    for n in range(int(os.environ.get("CROSSCHECK_SHAPES", "20"))):
        s = draw_shape(ARCHS[n % len(ARCHS)])
        tag = f"{s['arch']}-{n}"
        print(f"{tag}: {json.dumps(s)}", flush=True)
        src = os.path.join(WORK, f"{tag}-F32.gguf")
        write_model(src, s, np.random.default_rng(SEED * 100 + n))
        ids = [rng.randrange(s["V"]) for _ in range(48)]
        if os.environ.get("CROSSCHECK_KEEP"):
            json.dump(ids, open(os.path.join(WORK, f"{tag}-ids.json"), "w"))
        exact = s["arch"] in ("llama", "qwen2") and "linear" not in s and "yarn" not in s
        f32_ref = check_logits(src, os.path.basename(src), ids, False, exact)
        for q in rng.sample(sorted(QUANTS), 2):
            dst = os.path.join(WORK, f"{tag}-{q}.gguf")
            if not quantize(src, dst, QUANTS[q]):
                print(f"  skip {os.path.basename(dst)}: llama-quantize refused this shape")
                continue
            check_logits(dst, os.path.basename(dst), ids, True, exact, f32_ref)
        if not os.environ.get("CROSSCHECK_KEEP"):  # set: the files stay in WORK, to look into
            for f in glob.glob(os.path.join(WORK, f"{tag}-*.gguf")):
                os.remove(f)


# ---- vocab ----------------------------------------------------------------------------------

def vocab_files():
    """llama.cpp's test vocabularies, from the llama-cpp-python source package (PyPI)."""
    out = os.path.join(WORK, "vocab")
    if glob.glob(os.path.join(out, "ggml-vocab-*.gguf")):
        return sorted(glob.glob(os.path.join(out, "ggml-vocab-*.gguf")))
    os.makedirs(out, exist_ok=True)
    index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
    name = f"llama_cpp_python-{llama_cpp.__version__}.tar.gz"
    at = index.index(name)
    url = index[index.rindex('href="', 0, at) + 6: index.index('"', at)].split("#")[0]
    tgz = os.path.join(WORK, name)
    urllib.request.urlretrieve(url, tgz)
    with tarfile.open(tgz) as t:
        for m in t.getmembers():
            if "/vendor/llama.cpp/models/ggml-vocab-" in m.name:
                m.name = os.path.basename(m.name)
                t.extract(m, out)
    os.remove(tgz)
    return sorted(glob.glob(os.path.join(out, "ggml-vocab-*.gguf")))


def random_text():
    pools = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r\u00a0\u3000",
             ".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`", "éèêëàâäôöûüçñßøåæœ", "абвгдежзийклмнопрстуфхцчшщъыьэюя",
             "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年", "あいうえおかきくけこアイウエオカキクケコ", "가나다라마바사아자차카타파하",
             "अआइईउऊएऐओऔकखगघ", "ابتثجحخدذرزسشصضطظعغفقكلمنهوي", "😀🎉👍🏽🇫🇷👨‍👩‍👧", "\u0301\u0308\u200b\u200d\ufeff"]
    words = ["the", " the", "don't", "I'm", "you'll", "    ", "\n\n", "<s>", "</s>", "<|im_start|>", "<|endoftext|>",
             "[INST]", "<unk>", "123456789", "3.14159", "http://x.org/a?b=c", "▁", "Ġ", "ĊĊ", "def f(x):\n    return x"]
    parts = []
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.4:
            parts.append(rng.choice(words))
        else:
            pool = rng.choice(pools)
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
    return "".join(parts)


def vocab():
    print("\n== vocab: llama.cpp's test vocabularies")
    corpus = json.load(open(os.path.join(FIXTURES, "reference/corpus.json")))
    randoms = [random_text() for _ in range(int(os.environ.get("CROSSCHECK_TEXTS", "2000")))]
    for f in vocab_files():
        name = os.path.basename(f)
        inputs = open(f + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n") if os.path.exists(f + ".inp") else []
        texts = corpus + inputs + randoms
        tok = None
        counts = []
        for special in (False, True):
            rc, out, err = wasmind("tokenize", "--model", f, "--no-add-special", "--jsonl", *(["--special"] if special else []),
                                   stdin="".join(json.dumps(t) + "\n" for t in texts))
            if rc != 0:
                ok = "not supported" in err
                verdict(ok, f"{name:34} refused: {err[:150]}")
                break
            tok = tok or Llama(model_path=f, vocab_only=True, verbose=False)
            ours = [json.loads(line) for line in out.splitlines()]
            bad = [i for i, t in enumerate(texts) if tok.tokenize(t.encode(), add_bos=False, special=special) != ours[i]]
            counts.append((len(texts) - len(bad), bad))
        else:
            bad = counts[0][1] + counts[1][1]
            verdict(not bad, f"{name:34} plain {counts[0][0]}/{len(texts)}, special tokens parsed {counts[1][0]}/{len(texts)}"
                    + (f"; first mismatch {texts[bad[0]][:60]!r}" if bad else ""))
        del tok


# ---- templates ------------------------------------------------------------------------------

def apply_template(tmpl, conv, add_ass):
    """llama_chat_apply_template's bytes for `conv` ([(role, content)]), or None when it fails."""
    msgs = (llama_cpp.llama_chat_message * len(conv))()
    keep = []  # the bytes the C structs point into
    for i, (role, content) in enumerate(conv):
        keep += [role.encode(), content.encode()]
        msgs[i].role, msgs[i].content = keep[-2], keep[-1]
    buf = ctypes.create_string_buffer(1 << 16)
    k = llama_cpp.llama_chat_apply_template(tmpl, msgs, len(conv), add_ass, buf, len(buf))
    return buf.raw[:k] if k >= 0 else None


def templates():
    print("\n== templates: random conversations")
    contents = ["Hello!", "", "  padded  ", "\n\nnewlines\n", "Ünïcödé 漢字 🤖", "<|im_start|>user\n[INST] <s>",
                "a\tb", "What is 2+2?", "Line one\nline two", "\u00a0nbsp\u3000", "</s><end_of_turn>"]
    n = llama_cpp.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    llama_cpp.llama_chat_builtin_templates(arr, n)
    names = sorted(a.decode() for a in arr)
    convs = []
    for _ in range(int(os.environ.get("CROSSCHECK_CONVERSATIONS", "40"))):
        conv = [(rng.choice(["system", "user", "user", "assistant"]), rng.choice(contents)) for _ in range(rng.randint(1, 6))]
        convs.append((conv, rng.random() < 0.7))
    for t in names:
        checked = bad = 0
        first = ""
        for conv, add_ass in convs:
            rc, out, err = wasmind("template", t, stdin=json.dumps(
                {"messages": [{"role": r, "content": c} for r, c in conv], "add_assistant": add_ass}))
            if rc != 0 and "unknown chat template" in err:
                break  # a template wasmind does not implement
            checked += 1
            want = apply_template(t.encode(), conv, add_ass)
            want = want.decode("utf-8") if want is not None else None
            if (want is None) != (rc != 0) or (want is not None and out != want):
                bad += 1
                first = first or f"; first: {conv} add_ass={add_ass}: want {want!r}, got {out!r} {err[:80]}"
        if checked:
            verdict(not bad, f"{t:20} {checked - bad}/{checked} conversations{first}")
        else:
            print(f"  --   {t:20} not implemented by wasmind")


# ---- chat -----------------------------------------------------------------------------------

# Vocabularies (llama.cpp's test files) that make a chat model wasmind runs: (architecture,
# template for a file without its own).
CHAT_VOCABS = {"phi-3": ("phi3", None), "qwen2": ("qwen2", None), "llama-bpe": ("llama", "llama3"),
               "llama-spm": ("llama", "llama2-sys"), "command-r": ("llama", None), "gpt-2": ("llama", "chatml"),
               "deepseek-coder": ("llama", "deepseek")}


def field_value(f):
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def model_with_vocab(vocab_path, arch, out):
    """A one-layer random model of `arch` (dim 64) whose tokenizer.* and general.name are the
    vocabulary file's."""
    r = gguf.GGUFReader(vocab_path)
    w = gguf.GGUFWriter(out, arch)
    for name, f in r.fields.items():
        if name.startswith("tokenizer.") or name == "general.name":
            v = field_value(f)
            t = f.types[0]
            if t == gguf.GGUFValueType.ARRAY:
                w.add_array(name, v)
            elif t == gguf.GGUFValueType.STRING:
                w.add_string(name, v)
            else:
                w.add_key_value(name, v, t)
    V = len(field_value(r.fields["tokenizer.ggml.tokens"]))
    D, H, FF = 64, 2, 128
    w.add_block_count(1); w.add_context_length(2048); w.add_embedding_length(D); w.add_feed_forward_length(FF)
    w.add_head_count(H); w.add_head_count_kv(H); w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(1e4)
    w.add_rope_dimension_count(D // H)
    g = np.random.default_rng(SEED)
    t = lambda name, shape: w.add_tensor(name, (g.standard_normal(shape) * 0.1).astype(np.float32))
    t("token_embd.weight", (V, D)); w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(D, np.float32)); w.add_tensor("blk.0.ffn_norm.weight", np.ones(D, np.float32))
    if arch == "phi3":
        t("blk.0.attn_qkv.weight", (3 * D, D)); t("blk.0.ffn_up.weight", (2 * FF, D))
    else:
        t("blk.0.attn_q.weight", (D, D)); t("blk.0.attn_k.weight", (D, D)); t("blk.0.attn_v.weight", (D, D))
        t("blk.0.ffn_gate.weight", (FF, D)); t("blk.0.ffn_up.weight", (FF, D))
    if arch == "qwen2":
        for n in "qkv":
            w.add_tensor(f"blk.0.attn_{n}.bias", np.zeros(D, np.float32))
    t("blk.0.attn_output.weight", (D, D)); t("blk.0.ffn_down.weight", (D, FF))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return r


def chat():
    print("\n== chat: prompt ids of tiny models with real vocabularies")
    corpus = [t for t in json.load(open(os.path.join(FIXTURES, "reference/corpus.json"))) if 0 < len(t) < 200]
    n = int(os.environ.get("CROSSCHECK_CHATS", "20"))
    for f in vocab_files():
        key = os.path.basename(f)[len("ggml-vocab-"):-len(".gguf")]
        if key not in CHAT_VOCABS:
            continue
        arch, fallback = CHAT_VOCABS[key]
        path = os.path.join(WORK, f"chat-{key}.gguf")
        r = model_with_vocab(f, arch, path)
        own = field_value(r.fields["tokenizer.chat_template"]) if "tokenizer.chat_template" in r.fields else None
        tmpl = (own or fallback).encode()
        llm = Llama(model_path=path, vocab_only=True, verbose=False)
        add_bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
        bad, first = 0, ""
        for _ in range(n):
            user = rng.choice(corpus) if rng.random() < 0.5 else random_text()
            system = (rng.choice(corpus) if rng.random() < 0.5 else random_text()) if rng.random() < 0.4 else None
            conv = ([("system", system)] if system is not None else []) + [("user", user)]
            want = llm.tokenize(apply_template(tmpl, conv, True), add_bos=add_bos, special=True)
            args = ["generate", "--model", path, "--chat", user, "-n", "1", "--temp", "0", "--json"]
            args += (["--system", system] if system is not None else []) + ([] if own else ["--template", fallback])
            rc, out, err = wasmind(*args)
            got = json.loads(out)["prompt_ids"] if rc == 0 else err[:120]
            if got != want:
                bad += 1
                first = first or f"; first: {conv}: want {want[:24]}, got {got if isinstance(got, str) else got[:24]}"
        del llm
        os.remove(path)
        verdict(not bad, f"{key:10} ({arch}, template {'its own' if own else fallback}) {n - bad}/{n} prompts{first}")


# ---- embed ----------------------------------------------------------------------------------

def embed():
    print("\n== embed: Model2Vec against the model2vec package")
    from model2vec import StaticModel
    corpus = json.load(open(os.path.join(FIXTURES, "reference/corpus.json")))
    n = int(os.environ.get("CROSSCHECK_EMBEDS", "1000"))
    texts = [random_text() for _ in range(n)] + [" ".join(rng.sample(corpus, rng.randint(2, 30))) for _ in range(n // 4)]
    for d in sorted(glob.glob(os.path.join(FIXTURES, "models/m2v-*")) + glob.glob(os.path.join(FIXTURES, "models/potion-*"))):
        m = StaticModel.from_pretrained(d)
        want = m.encode(texts).astype(np.float64)  # the package computes in the file's float16
        want_ids = m.tokenize(texts)
        rc, out, err = wasmind("embed", "--model", d, "--json", stdin="".join(json.dumps(t) + "\n" for t in texts))
        if rc != 0:
            verdict(False, f"{os.path.basename(d)}: wasmind embed failed: {err[:200]}")
            continue
        rows = [json.loads(line) for line in out.splitlines()]
        worst, bad_ids = 1.0, 0
        for row, w, ids in zip(rows, want, want_ids):
            v = np.array(row["embedding"], dtype=np.float64)
            bad_ids += row["ids"] != ids
            nv, nw = np.linalg.norm(v), np.linalg.norm(w)
            worst = min(worst, 1.0 if nv == nw == 0 else float(v @ w / (nv * nw)) if nv and nw else 0.0)
        verdict(bad_ids == 0 and worst >= 0.99999 and len(rows) == len(texts),
                f"{os.path.basename(d):18} {len(texts)} texts: pooled ids differ for {bad_ids}, worst cosine {worst:.9f}")


# ---- greedy ---------------------------------------------------------------------------------

def rounding_apart(path, seq, theirs, exact):
    """Whether a greedy step where we and llama.cpp pick differently is a near tie that rounding
    decides: our logits for the step (`wasmind logits` over `seq`) as close to exact float math
    as llama.cpp's (`theirs`), and exact math's own top-two margin inside llama.cpp's distance
    from it. With the figures, for the verdict's line."""
    if path not in exact:
        exact[path] = exact_model(path)
    ex = exact[path](seq)[-1]
    rc, out, err = wasmind("logits", "--model", path, "--ids", ",".join(map(str, seq)), "--threads", "2")
    if rc != 0:
        return False, f"; wasmind logits failed: {err[:200]}"
    ours = np.array(json.loads(out)["last_logits"][-1], dtype=np.float64)
    rms = lambda x: float(np.sqrt(((x - ex) ** 2).mean()))
    top = np.sort(ex)
    ex_margin, theirs_off, ours_off = float(top[-1] - top[-2]), rms(theirs.astype(np.float64)), rms(ours)
    ok = ours_off <= theirs_off and ex_margin < float(np.abs(theirs - ex).max())
    return ok, (f"; exact float math's margin {ex_margin:.3f}, rms from it: llama.cpp {theirs_off:.3f}, "
                f"ours {ours_off:.3f}")


def greedy():
    print("\n== greedy: real models, prompts from the corpus")
    corpus = [t for t in json.load(open(os.path.join(FIXTURES, "reference/corpus.json"))) if 0 < len(t) < 300]
    models = [(os.path.join(FIXTURES, "models/SmolLM2-135M-Instruct.Q4_1.gguf"), "chatml")]
    gemma = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../models/gemma-3-270m-Q4_K_M.gguf")
    if os.path.exists(gemma):  # python3 models/fetch.py --model gemma3-270m
        models.append((gemma, "gemma"))
    prompts = rng.sample(corpus, int(os.environ.get("CROSSCHECK_PROMPTS", "8")))
    if os.environ.get("CROSSCHECK_PROMPT_LIST"):  # a JSON list of prompts instead (to repeat one)
        prompts = json.loads(os.environ["CROSSCHECK_PROMPT_LIST"])
    for path, template in models:
        llm = Llama(model_path=path, n_ctx=1024, n_threads=2, n_batch=512, logits_all=True, verbose=False, seed=0)
        end = "<end_of_turn>" if template == "gemma" else "<|im_end|>"
        stops = {llm.token_eos(), llm.tokenize(end.encode(), add_bos=False, special=True)[0]}
        single = None  # the same model run one token at a time, made when a reply differs
        exact = {}  # its exact float math, made when a reply differs past llama.cpp's spread
        for user in prompts:
            text = (f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n" if template == "gemma"
                    else f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
            ids = llm.tokenize(text.encode(), add_bos=template == "gemma", special=True)
            llm.reset()
            gen, rows = [], []
            for t in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
                rows.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)); gen.append(t)
                if len(gen) >= 32 or t in stops:
                    break
            rc, out, err = wasmind("generate", "--model", path, "--prompt", text, "-n", str(len(gen)), "--temp", "0",
                                   "--json", "--threads", "2")
            name = f"{os.path.basename(path)[:18]} {user[:30]!r}"
            if rc != 0:
                verdict(False, f"{name}: wasmind generate failed: {err[:200]}")
                continue
            o = json.loads(out)
            at = next((i for i, (a, b) in enumerate(zip(o["ids"], gen)) if a != b), None)
            same_prompt = o["prompt_ids"] == ids
            ok, how = True, "the same ids"
            if at is not None:
                # llama.cpp's own spread there: the same row with every token run alone (the
                # prompt too) instead of the prompt in one batch.
                row = np.sort(rows[at])
                margin = float(row[-1] - row[-2])
                single = single or Llama(model_path=path, n_ctx=1024, n_threads=2, n_batch=1, n_ubatch=1,
                                         logits_all=True, verbose=False, seed=0)
                single.reset(); single.eval(ids + gen[:at])
                own = float(np.abs(np.array(single.scores[single.n_tokens - 1], dtype=np.float32) - rows[at]).max())
                ok = margin < max(DECISIVE, own)
                how = f"first differs at {at}: llama.cpp's margin {margin:.3f}, its own spread there {own:.3f}"
                if not ok and template == "chatml":  # a llama file: exact math can say who rounds less
                    ok, more = rounding_apart(path, ids + gen[:at], rows[at], exact)
                    how += more
            verdict(same_prompt and ok, f"{name:52} prompt ids {'equal' if same_prompt else 'DIFFER'}, {len(gen)} tokens: {how}")
        del llm, single


print(f"crosscheck seed {SEED}, llama-cpp-python {llama_cpp.__version__}, parts {','.join(PARTS)}")
for part in PARTS:
    rng = random.Random(f"{SEED}-{part}")  # each part draws the same with or without the others
    {"shapes": shapes, "vocab": vocab, "templates": templates, "chat": chat, "embed": embed, "greedy": greedy}[part]()
print(f"\ncrosscheck seed {SEED}: {len(failures)} failure(s)")
for f in failures:
    print("  " + f)
sys.exit(1 if failures else 0)
