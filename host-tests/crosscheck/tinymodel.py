"""Random-weight GGUF models of every architecture wasmind runs, as llama.cpp's converter lays
them out (its tensor names, metadata keys and tied outputs). Shared by crosscheck.py (random
shapes) and host-tests/testdata/gen_tiny_arch.py (the suite's fixed fixtures).

`s` is a shape: arch, V (vocabulary), D (width), H, HKV (heads), HD (head width: its own key for
qwen3, gemma2 and gemma3, D / H for the others), FF, L (layers), and per architecture:
- gemma2, gemma3: SWA (sliding window); gemma2: attn_softcap, final_softcap;
- granite: embedding_scale, residual_scale, attention_scale, logit_scale, no_rope (its
  `rope.scaling.finetuned` false: no RoPE in any layer);
- exaone4: SWA (a window, in a 64-layer model only);
- lfm2: kinds (a letter a layer: "c" a short convolution of conv_taps positions, "a"
  attention), SWA (a window for its attention layers, optional);
- qwen35: kinds ("r" a gated delta-net layer, "a" gated attention; without it every
  `interval`-th layer attends, written as `full_attention_interval`), S (delta-net head
  width), HK, HV (its key and value heads), conv_taps, rope_dims, sections (of its
  interleaved M-RoPE);
- phi3: longrope (its original context: the file's context becomes `ctx`, default 4096, with
  LongRoPE's long and short factors and its attention factor, as the converter writes them
  for Phi-3.5 and Phi-4-mini);
- phi3, qwen35: rope_dims (partial RoPE); any: tied (no output.weight), linear (RoPE scaling factor),
  yarn ((factor, original context): YaRN RoPE scaling, as Qwen3's 128k files; the file's context
  is their product),
  out_scale (of the final norm: 4 for Gemma, 1 for the others by default).
"""
import gguf
import numpy as np

OWN_HEAD_WIDTH = ("qwen3", "gemma2", "gemma3", "qwen35")
GEMMA = ("gemma2", "gemma3")


def write_model(path, s, w_rng):
    arch, V, D, H, HKV, FF, L = s["arch"], s["V"], s["D"], s["H"], s["HKV"], s["FF"], s["L"]
    hd = s["HD"] if arch in OWN_HEAD_WIDTH else D // H
    w = gguf.GGUFWriter(path, arch)
    ctx = s.get("ctx", 4096) if "longrope" in s else int(s["yarn"][0] * s["yarn"][1]) if "yarn" in s else 256
    w.add_block_count(L); w.add_context_length(ctx)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF); w.add_head_count(H)
    conv = [k == "c" for k in s["kinds"]] if arch == "lfm2" else [False] * L
    if arch == "qwen35":
        rec = [k == "r" for k in s["kinds"]] if "kinds" in s else [(i + 1) % s["interval"] != 0 for i in range(L)]
    else:
        rec = [False] * L
    w.add_head_count_kv([0 if c else HKV for c in conv] if arch == "lfm2" else HKV)
    if arch == "lfm2":
        w.add_shortconv_l_cache(s["conv_taps"])
    w.add_layer_norm_rms_eps(1e-6); w.add_vocab_size(V); w.add_tokenizer_model("none"); w.add_file_type(0)
    if arch == "qwen35":
        S, HK, HV = s["S"], s["HK"], s["HV"]
        w.add_ssm_conv_kernel(s["conv_taps"]); w.add_ssm_state_size(S); w.add_ssm_group_count(HK)
        w.add_ssm_time_step_rank(HV); w.add_ssm_inner_size(S * HV)
        if "kinds" in s:
            w.add_array("qwen35.attention.recurrent_layers", rec)
        else:
            w.add_full_attention_interval(s["interval"])
        w.add_rope_dimension_count(s["rope_dims"]); w.add_rope_dimension_sections(s["sections"])
    if arch in OWN_HEAD_WIDTH:
        w.add_key_length(hd); w.add_value_length(hd)
        w.add_rope_freq_base(1e4 if arch == "gemma2" else 1e6)
    else:
        w.add_rope_freq_base(1e6 if arch == "lfm2" else 1e4); w.add_rope_dimension_count(s.get("rope_dims", hd))
    if arch in GEMMA or (arch in ("lfm2", "exaone4") and "SWA" in s):
        w.add_sliding_window(s["SWA"])
    if arch == "gemma2":
        w.add_attn_logit_softcapping(s["attn_softcap"]); w.add_final_logit_softcapping(s["final_softcap"])
    if arch == "granite":
        w.add_embedding_scale(s["embedding_scale"]); w.add_residual_scale(s["residual_scale"])
        w.add_attention_scale(s["attention_scale"]); w.add_logit_scale(s["logit_scale"])
        if s.get("no_rope"):
            w.add_rope_scaling_finetuned(False)
    if "longrope" in s:  # (as conversion/phi.py: the attention factor from the stretch)
        orig, ctx = s["longrope"], s.get("ctx", 4096)
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(ctx / orig) / np.log(orig))))
    if "linear" in s:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR); w.add_rope_scaling_factor(s["linear"])
    if "yarn" in s:  # (as conversion/base.py writes a config's rope_scaling of type yarn)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN); w.add_rope_scaling_factor(s["yarn"][0])
        w.add_rope_scaling_orig_ctx_len(s["yarn"][1])
    qd, kvd = H * hd, HKV * hd

    def t(name, shape, scale):
        w.add_tensor(name, (w_rng.standard_normal(shape) * scale).astype(np.float32))

    def norm(name, n, scale=1.0):
        w.add_tensor(name, ((1.0 + 0.1 * w_rng.standard_normal(n)) * scale).astype(np.float32))

    # Gemma scales its embeddings by sqrt(D) and ties the output to them: small embeddings, and
    # a larger final norm so that more positions are decisive.
    t("token_embd.weight", (V, D), 0.05 if arch in GEMMA else 0.5)
    # (llama.cpp's converter names LFM2's final norm token_embd_norm)
    norm("token_embd_norm.weight" if arch == "lfm2" else "output_norm.weight", D,
         s.get("out_scale", 4.0 if arch in GEMMA else 1.0))
    if arch not in GEMMA and not s.get("tied"):
        t("output.weight", (V, D), 0.2)
    if "longrope" in s:  # per pair: long ones stretch far (1-40), short ones barely (1-1.5)
        n = s.get("rope_dims", hd) // 2
        w.add_tensor("rope_factors_long.weight", np.exp(w_rng.uniform(0, np.log(40), n)).astype(np.float32))
        w.add_tensor("rope_factors_short.weight", w_rng.uniform(1, 1.5, n).astype(np.float32))
    for i in range(L):
        p = f"blk.{i}."
        if arch != "exaone4":  # (no norms before attention and the feed-forward)
            norm(p + "attn_norm.weight", D)
        if rec[i]:
            cd = 2 * HK * S + HV * S
            t(p + "attn_qkv.weight", (cd, D), 0.15); t(p + "attn_gate.weight", (HV * S, D), 0.15)
            t(p + "ssm_conv1d.weight", (cd, s["conv_taps"]), 0.5)
            t(p + "ssm_dt.bias", (HV,), 0.5)
            w.add_tensor(p + "ssm_a", -np.exp(w_rng.standard_normal(HV) * 0.5).astype(np.float32))
            t(p + "ssm_beta.weight", (HV, D), 0.2); t(p + "ssm_alpha.weight", (HV, D), 0.2)
            norm(p + "ssm_norm.weight", S)
            t(p + "ssm_out.weight", (D, HV * S), 0.1)
        elif arch == "qwen35":  # q and its gate, head by head
            t(p + "attn_q.weight", (2 * qd, D), 0.08); t(p + "attn_k.weight", (kvd, D), 0.08)
            t(p + "attn_v.weight", (kvd, D), 0.08)
        elif conv[i]:
            t(p + "shortconv.conv.weight", (D, s["conv_taps"]), 0.5)
            t(p + "shortconv.in_proj.weight", (3 * D, D), 0.15)
            t(p + "shortconv.out_proj.weight", (D, D), 0.08)
        elif arch == "phi3":
            t(p + "attn_qkv.weight", (qd + 2 * kvd, D), 0.08)
        else:
            t(p + "attn_q.weight", (qd, D), 0.08); t(p + "attn_k.weight", (kvd, D), 0.08)
            t(p + "attn_v.weight", (kvd, D), 0.08)
        if arch == "qwen2":
            for n, k in (("q", qd), ("k", kvd), ("v", kvd)):
                t(p + f"attn_{n}.bias", (k,), 0.1)
        if arch in ("qwen3", "gemma3", "lfm2", "exaone4", "qwen35") and not conv[i] and not rec[i]:
            norm(p + "attn_q_norm.weight", hd); norm(p + "attn_k_norm.weight", hd)
        if not conv[i] and not rec[i]:
            t(p + "attn_output.weight", (D, qd), 0.08)
        if arch in GEMMA or arch == "exaone4":
            norm(p + "post_attention_norm.weight", D)
        if arch == "qwen35":  # (its norm before the feed-forward has this name)
            norm(p + "post_attention_norm.weight", D)
        elif arch != "exaone4":
            norm(p + "ffn_norm.weight", D)
        if arch == "phi3":
            t(p + "ffn_up.weight", (2 * FF, D), 0.06)
        else:
            t(p + "ffn_gate.weight", (FF, D), 0.06); t(p + "ffn_up.weight", (FF, D), 0.06)
        t(p + "ffn_down.weight", (D, FF), 0.04)
        if arch in GEMMA or arch == "exaone4":
            norm(p + "post_ffw_norm.weight", D)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
