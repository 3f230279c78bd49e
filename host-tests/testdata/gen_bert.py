"""BERT sentence-embedding fixtures and llama.cpp's answers for them, in bert/:

- vocab-wpm-*.gguf: vocabulary-only files of the WordPiece vocabulary of
  the fixture models/m2v-minilm-128-vq (all-MiniLM-L6-v2's, trimmed by Model2Vec to 29,525 tokens;
  [CLS] [SEP] [MASK] appended as control tokens, so their ids come from the keys, not llama.cpp's
  defaults), converted as llama.cpp's convert_hf_to_gguf converts one (phantom spaces: `▁word`,
  `##ing` -> `ing`), once as is (lowercase, accents stripped), once cased, once lowercase with
  accents kept;
- tiny-bert-F16.gguf (mean pooling) and tiny-bert-cls-F16.gguf (CLS pooling): random small
  BERT encoders (seed 2026) over the first 3,000 of those tokens plus the three control ones;
- reference.json: llama.cpp's ids of every text of the fixture reference/vocab-reference.json
  and of some extra ones (plain, with special tokens parsed, and with [CLS]/[SEP]) under each
  vocabulary file, and for each tiny model the ids and llama.cpp's pooled, unnormalized
  embedding of some texts, from the F16 file and from its Q8_0 quantization.

usage: python gen_bert.py   (needs llama-cpp-python==0.3.36, gguf, numpy; writes next to itself)
"""
import ctypes, json, os

import numpy as np
import gguf
import llama_cpp
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "bert")
FIXTURES = os.environ.get("WASMIND_FIXTURES") or os.path.join(HERE, "..", "..", "target", "fixtures")  # cargo xtask fixtures
assert llama_cpp.__version__ == "0.3.36", llama_cpp.__version__

EXTRA_TEXTS = [
    "Héllo, WÖRLD! Ça va? naïve café résumé",
    "ＡＢＣ１２３ full-width, Ångström, ǅ, İstanbul, ΣΊΣΥΦΟΣ",
    "日本語のテキストと中文文本，还有한국어 문장。",
    "tabs\tand\nnewlines\r\nand\u00a0no-break\u2003em\u3000ideographic spaces",
    "controls\u0001\u0007 zero\u200bwidth \ufeffbom \u00adsoft-hyphen \ufffdreplacement",
    "math ∑∫√ symbols $5 + 3 = <8> ^ `code` | ~tilde © ® ™ € £",
    "emoji 😀🚀 and combining e\u0301 a\u0308 o\u0302 marks, private \ue000 unassigned \U000e0080",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic",
    "[CLS] written [SEP] in [MASK] the [UNK] text [PAD]",
    "x" * 300 + " " + "ab" * 150,
    "", " ", "a", "?!", "Ⅻ ⅻ ⓐ Ⓐ",
]
MODEL_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Héllo, WÖRLD! naïve café",
    "日本語と中文",
    "a",
    "",
    "One more sentence, with a comma; and a semicolon: then the end.",
    "word " * 40,
]
SHAPES = [
    dict(name="bert", D=32, H=4, FF=64, L=3, P=128, pooling=1),
    dict(name="bert-cls", D=32, H=2, FF=96, L=2, P=96, pooling=2),
]


def wordpiece_vocab():
    t = json.load(open(os.path.join(FIXTURES, "models", "m2v-minilm-128-vq", "tokenizer.json")))
    inv = sorted(t["model"]["vocab"].items(), key=lambda kv: kv[1])
    assert [i for _, i in inv] == list(range(len(inv)))
    special = {a["content"] for a in t["added_tokens"] if a["special"]}
    tokens = [tok for tok, _ in inv] + ["[CLS]", "[SEP]", "[MASK]"]
    special |= {"[CLS]", "[SEP]", "[MASK]"}
    return tokens, special


def phantom(tok, special):
    if tok in special:
        return tok
    return tok[2:] if tok.startswith("##") else "\u2581" + tok


def write_vocab_keys(w, tokens, special, lowercase, strip_accents):
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list([phantom(t, special) for t in tokens])
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    ids = {t: i for i, t in enumerate(tokens)}
    w.add_bos_token_id(ids["[CLS]"])
    w.add_uint32("tokenizer.ggml.cls_token_id", ids["[CLS]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_unk_token_id(ids["[UNK]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_mask_token_id(ids["[MASK]"])
    if lowercase is not None:
        w.add_bool("tokenizer.ggml.normalizer.lowercase", lowercase)
    if strip_accents is not None:
        w.add_bool("tokenizer.ggml.normalizer.strip_accents", strip_accents)


def write_hparams(w, s, vocab):
    w.add_context_length(s["P"])
    w.add_embedding_length(s["D"])
    w.add_feed_forward_length(s["FF"])
    w.add_block_count(s["L"])
    w.add_head_count(s["H"])
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType(s["pooling"]))
    w.add_token_type_count(2)
    w.add_vocab_size(vocab)


def write_vocab_file(path, tokens, special, lowercase, strip_accents):
    w = gguf.GGUFWriter(path, "bert")
    w.add_name("wpm-vocab")
    write_hparams(w, dict(P=512, D=16, FF=32, L=1, H=2, pooling=1), len(tokens))
    write_vocab_keys(w, tokens, special, lowercase, strip_accents)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def write_model(path, s, tokens, special, rng):
    D, FF, V, P = s["D"], s["FF"], len(tokens), s["P"]
    w = gguf.GGUFWriter(path, "bert")
    w.add_name(s["name"])
    write_hparams(w, s, V)
    write_vocab_keys(w, tokens, special, None, None)

    def t(name, shape, scale, offset=0.0):
        w.add_tensor(name, (offset + scale * rng.standard_normal(shape)).astype(np.float32))

    t("token_embd.weight", (V, D), 0.5)
    t("token_types.weight", (2, D), 0.3)
    t("position_embd.weight", (P, D), 0.3)
    t("token_embd_norm.weight", (D,), 0.1, 1.0)
    t("token_embd_norm.bias", (D,), 0.1)
    for i in range(s["L"]):
        for m in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(f"blk.{i}.{m}.weight", (D, D), 0.9 / np.sqrt(D))
            t(f"blk.{i}.{m}.bias", (D,), 0.1)
        t(f"blk.{i}.attn_output_norm.weight", (D,), 0.1, 1.0)
        t(f"blk.{i}.attn_output_norm.bias", (D,), 0.1)
        t(f"blk.{i}.ffn_up.weight", (FF, D), 1.5 / np.sqrt(D))
        t(f"blk.{i}.ffn_up.bias", (FF,), 0.3)
        t(f"blk.{i}.ffn_down.weight", (D, FF), 1.0 / np.sqrt(FF))
        t(f"blk.{i}.ffn_down.bias", (D,), 0.1)
        t(f"blk.{i}.layer_output_norm.weight", (D,), 0.1, 1.0)
        t(f"blk.{i}.layer_output_norm.bias", (D,), 0.1)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def quantize(src, dst, ftype):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype; p.pure = True; p.allow_requantize = True; p.nthread = 2
    assert llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) == 0, dst


os.makedirs(OUT, exist_ok=True)
tokens, special = wordpiece_vocab()
texts = json.load(open(os.path.join(FIXTURES, "reference", "vocab-reference.json")))["texts"] + EXTRA_TEXTS
ref = {"texts_from": "the fixture reference/vocab-reference.json texts, then `extra_texts`",
       "extra_texts": EXTRA_TEXTS, "vocab": {}, "models": {}}
for name, lowercase, strip in [("uncased", None, None), ("cased", False, None), ("accents", True, False)]:
    path = os.path.join(OUT, f"vocab-wpm-{name}.gguf")
    write_vocab_file(path, tokens, special, lowercase, strip)
    llm = Llama(path, vocab_only=True, verbose=False)
    rows = []
    for text in texts:
        b = text.encode()
        rows.append({"ids": llm.tokenize(b, add_bos=False, special=False),
                     "ids_special": llm.tokenize(b, add_bos=False, special=True),
                     "ids_cls_sep": llm.tokenize(b, add_bos=True, special=False)})
    ref["vocab"][os.path.basename(path)] = rows
    del llm

small = tokens[:3000] + tokens[-3:]
for n, s in enumerate(SHAPES):
    f32 = os.path.join(OUT, f"tiny-{s['name']}-F32.gguf")
    write_model(f32, s, small, special, np.random.default_rng(2026 * 10 + n))
    f16 = f32.replace("F32", "F16"); q8 = f32.replace("F32", "Q8_0")
    quantize(f32, f16, 1); quantize(f16, q8, 7)
    entry = {"texts": MODEL_TEXTS, "pooling": s["pooling"]}
    for ty, path in [("F16", f16), ("Q8_0", q8)]:
        llm = Llama(path, embedding=True, n_ctx=s["P"], n_batch=s["P"], n_ubatch=s["P"], n_threads=1,
                    verbose=False)
        entry[ty] = [{"ids": llm.tokenize(t.encode(), add_bos=True, special=False),
                      "embedding": [float(x) for x in llm.embed(t, normalize=False)]} for t in MODEL_TEXTS]
        del llm
    ref["models"][os.path.basename(f16)] = entry
    os.remove(f32); os.remove(q8)
json.dump(ref, open(os.path.join(OUT, "reference.json"), "w"), ensure_ascii=False)
print("wrote", sorted(os.listdir(OUT)))
