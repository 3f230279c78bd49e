#!/usr/bin/env python3
"""Convert a sentence-transformers BERT folder (all-MiniLM, bge, e5, gte, ...) to one GGUF file
that `wasmind embed --model E.gguf`, `loadEmbedder` and llama.cpp load.

The folder is what Hugging Face holds for such a model: `config.json` (BertModel),
`model.safetensors` (F32, F16 or BF16), `tokenizer.json` (WordPiece) and, when it has one,
`modules.json` with a pooling folder (`1_Pooling/config.json`: mean, cls or last token). The
file written is what llama.cpp's `convert_hf_to_gguf.py --outtype f16` writes for it: the same
keys, the vocabulary in llama.cpp's phantom-space spelling (`▁word`, `##ing` -> `ing`), matrices
in F16 but the position and token-type tables, vectors (biases, norms) in F32. Needs only Python 3 (no numpy, no torch).

usage: python3 models/bert_to_gguf.py MODEL_DIR OUT.gguf
"""
import array
import json
import os
import struct
import sys

ALIGN = 32
# GGUF value types, ggml tensor types and llama.cpp's token types.
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
POOLING = {"mean": 1, "cls": 2, "lasttoken": 3}


def read_safetensors(path):
    """name -> (shape, little-endian f32 array) for every floating tensor."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, t in header.items():
            if name == "__metadata__" or t["dtype"] not in ("F32", "F16", "BF16"):
                continue
            a, b = t["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            if t["dtype"] == "F32":
                vals = array.array("f")
                vals.frombytes(raw)
            elif t["dtype"] == "F16":
                vals = array.array("f", struct.unpack(f"<{len(raw) // 2}e", raw))
            else:  # BF16: the high half of an f32
                halves = array.array("H")
                halves.frombytes(raw)
                wide = array.array("I", (h << 16 for h in halves))
                vals = array.array("f")
                vals.frombytes(wide.tobytes())
            if sys.byteorder != "little":
                vals.byteswap()
            out[name] = (t["shape"], vals)
        return out


def tensor_name(hf):
    """The GGUF name of a BertModel tensor (llama.cpp's mapping), or None to leave it out."""
    hf = hf.removeprefix("bert.")
    fixed = {
        "embeddings.word_embeddings": "token_embd",
        "embeddings.position_embeddings": "position_embd",
        "embeddings.token_type_embeddings": "token_types",
        "embeddings.LayerNorm": "token_embd_norm",
    }
    per_layer = {
        "attention.self.query": "attn_q",
        "attention.self.key": "attn_k",
        "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output",
        "attention.output.LayerNorm": "attn_output_norm",
        "intermediate.dense": "ffn_up",
        "output.dense": "ffn_down",
        "output.LayerNorm": "layer_output_norm",
    }
    stem, _, kind = hf.rpartition(".")
    kind = {"gamma": "weight", "beta": "bias"}.get(kind, kind)
    if stem in fixed:
        return f"{fixed[stem]}.{kind}"
    parts = stem.split(".")
    if parts[:2] == ["encoder", "layer"] and len(parts) > 3 and parts[2].isdigit():
        block = per_layer.get(".".join(parts[3:]))
        if block:
            return f"blk.{parts[2]}.{block}.{kind}"
    if stem.startswith(("pooler.", "cls.")) or hf == "embeddings.position_ids":
        return None
    raise SystemExit(f"bert_to_gguf: tensor {hf} has no place in a BERT GGUF file")


def vocabulary(tok):
    """Token texts in llama.cpp's spelling and their types, from tokenizer.json."""
    model = tok["model"]
    if model.get("type") != "WordPiece":
        raise SystemExit(f"bert_to_gguf: tokenizer.json has a {model.get('type')} model, not WordPiece")
    vocab = dict(model["vocab"])
    added = {a["content"]: a for a in tok.get("added_tokens", [])}
    for text, a in added.items():
        vocab.setdefault(text, a["id"])
    n = max(vocab.values()) + 1
    texts, types = [None] * n, [NORMAL] * n
    for text, i in vocab.items():
        texts[i] = text
    prefix = model.get("continuing_subword_prefix", "##")
    for i, text in enumerate(texts):
        if text is None:
            texts[i], types[i] = f"[PAD{i}]", USER_DEFINED
        elif text in added:
            types[i] = CONTROL if added[text].get("special") else USER_DEFINED
        elif text.startswith(prefix):
            texts[i] = text[len(prefix):]
        else:
            texts[i] = "\u2581" + text
    return texts, types, vocab


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    @staticmethod
    def string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def value(self, vtype, v):
        if vtype == U32:
            return struct.pack("<I", v)
        if vtype == I32:
            return struct.pack("<i", v)
        if vtype == F32:
            return struct.pack("<f", v)
        if vtype == BOOL:
            return struct.pack("<?", v)
        if vtype == STRING:
            return self.string(v)
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(self.value(etype, x) for x in items)

    def write(self, path):
        header = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for key, vtype, v in self.kv:
            header += self.string(key) + struct.pack("<I", vtype) + self.value(vtype, v)
        offset = 0
        for name, dims, ggml_type, data in self.tensors:
            header += self.string(name) + struct.pack("<I", len(dims))
            header += b"".join(struct.pack("<Q", d) for d in dims)
            header += struct.pack("<IQ", ggml_type, offset)
            offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        header += b"\0" * (-len(header) % ALIGN)
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            f.write(header)
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGN))
        os.replace(tmp, path)


def convert(src, dest):
    cfg = json.load(open(os.path.join(src, "config.json")))
    if cfg.get("model_type") != "bert" and "BertModel" not in cfg.get("architectures", []):
        raise SystemExit(f"bert_to_gguf: {src}/config.json is not a BERT model ({cfg.get('model_type')})")
    tok = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
    texts, types, vocab = vocabulary(tok)
    pooling = None
    modules = os.path.join(src, "modules.json")
    if os.path.exists(modules):
        for m in json.load(open(modules)):
            if m["type"].endswith("Pooling"):
                p = json.load(open(os.path.join(src, m["path"], "config.json")))
                mode = p.get("pooling_mode")
                pooling = (1 if p.get("pooling_mode_mean_tokens") else 2 if p.get("pooling_mode_cls_token")
                           else 3 if p.get("pooling_mode_lasttoken") else POOLING.get(mode))
    w = Writer()
    w.add("general.architecture", STRING, "bert")
    w.add("general.name", STRING, os.path.basename(os.path.normpath(src)))
    w.add("bert.context_length", U32, cfg["max_position_embeddings"])
    w.add("bert.embedding_length", U32, cfg["hidden_size"])
    w.add("bert.feed_forward_length", U32, cfg["intermediate_size"])
    w.add("bert.block_count", U32, cfg["num_hidden_layers"])
    w.add("bert.attention.head_count", U32, cfg["num_attention_heads"])
    w.add("bert.attention.layer_norm_epsilon", F32, cfg.get("layer_norm_eps", 1e-12))
    w.add("bert.attention.causal", BOOL, False)
    if pooling is not None:
        w.add("bert.pooling_type", U32, pooling)
    w.add("tokenizer.ggml.token_type_count", U32, cfg.get("type_vocab_size", 1))
    w.add("tokenizer.ggml.model", STRING, "bert")
    w.add("tokenizer.ggml.pre", STRING, "default")
    w.add("tokenizer.ggml.tokens", ARRAY, (STRING, texts))
    w.add("tokenizer.ggml.token_type", ARRAY, (I32, types))
    norm = tok.get("normalizer") or {}
    if norm.get("type") == "BertNormalizer":
        if norm.get("lowercase") is not None:
            w.add("tokenizer.ggml.normalizer.lowercase", BOOL, norm["lowercase"])
        if norm.get("strip_accents") is not None:
            w.add("tokenizer.ggml.normalizer.strip_accents", BOOL, norm["strip_accents"])
    for key, text in [("unknown_token_id", tok["model"].get("unk_token", "[UNK]")), ("seperator_token_id", "[SEP]"),
                      ("padding_token_id", "[PAD]"), ("cls_token_id", "[CLS]"), ("mask_token_id", "[MASK]")]:
        if text in vocab:
            w.add(f"tokenizer.ggml.{key}", U32, vocab[text])
    st = os.path.join(src, "model.safetensors")
    for hf, (shape, vals) in sorted(read_safetensors(st).items()):
        name = tensor_name(hf)
        if name is None:
            continue
        dims = list(reversed(shape))  # ggml order: the row length first
        # (llama.cpp keeps the position and token-type tables in F32, and adds them as such)
        if len(shape) >= 2 and not name.startswith(("position_embd.", "token_types.")):
            data, ggml_type = struct.pack(f"<{len(vals)}e", *vals), GGML_F16
        else:
            data, ggml_type = vals.tobytes(), GGML_F32
        w.tensors.append((name, dims, ggml_type, data))
    w.write(dest)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    convert(sys.argv[1], sys.argv[2])
    print(f"wrote {sys.argv[2]}", file=sys.stderr)
