//! Hyper-parameters of a llama-family model, read from GGUF metadata. Nothing about a model is
//! compiled in: every size comes from here, and every tensor is checked against these sizes.

use alloc::vec::Vec;

use crate::decimal::Shortest;
use crate::error::{Result, Status};
use crate::gguf::Gguf;
use crate::{bail, err};

/// Largest values accepted from metadata (hostile files): they bound every buffer we allocate.
const MAX_DIM: u32 = 1 << 16;
const MAX_LAYERS: u32 = 512;
const MAX_HEADS: u32 = 1024;
const MAX_HEAD_DIM: u32 = 1024;
const MAX_CONTEXT: u32 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// llama, SmolLM2, TinyLlama, Llama 3.x, Mistral: no attention biases, RoPE on adjacent pairs.
    Llama,
    /// Qwen2 / Qwen2.5: biases on q, k, v; RoPE on the two halves (NeoX style).
    Qwen2,
    /// Qwen3: no biases, an RMS norm on each head of q and k before RoPE, NeoX RoPE, a head
    /// width (`attention.key_length`) independent of `dim / heads`.
    Qwen3,
    /// EXAONE 4.0: no norms before attention and the feed-forward, norms after both (as
    /// Gemma's), q/k head norms; with 64 layers (32B) three sliding-window layers for each
    /// global one, the global ones without RoPE.
    Exaone4,
    /// Gemma 2: Gemma 3's shape without the q/k head norms, every other layer a sliding-window
    /// one, and soft caps (`cap * tanh(x / cap)`) on the attention scores and on the logits.
    Gemma2,
    /// Gemma 3: embeddings scaled by sqrt(dim), q/k head norms, norms after attention and after
    /// the feed-forward too, GELU (tanh) gating, output tied to the embeddings, and five
    /// sliding-window layers for each global one, each kind with its own RoPE base.
    Gemma3,
    /// IBM Granite 3 and the dense Granite 4: llama with four scales from the file (of the
    /// embeddings, the attention scores, each block's output before it joins the residual
    /// stream, and the logits).
    Granite,
    /// LFM2 (Liquid): most layers mix tokens by a short causal convolution, gated before and
    /// after (`shortconv`), the others by attention with q/k head norms and NeoX RoPE; the
    /// final norm is stored as `token_embd_norm`.
    Lfm2,
    /// Qwen 3.5: three gated delta-net layers (linear attention: a recurrent state per head)
    /// for each attention layer; the attention's output gated by a second half of its q
    /// projection; q/k head norms; partial NeoX RoPE in interleaved M-RoPE sections.
    Qwen35,
    /// Phi-3 / 3.5: q, k, v in one fused `attn_qkv` matrix, gate and up in one `ffn_up` (gate
    /// rows first), NeoX RoPE.
    Phi3,
    /// SmolLM3: llama without RoPE in every fourth layer.
    Smollm3,
}

impl Arch {
    /// Every architecture, as `general.architecture` names it.
    pub const ALL: [Arch; 11] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Exaone4,
        Arch::Gemma2,
        Arch::Gemma3,
        Arch::Granite,
        Arch::Lfm2,
        Arch::Qwen35,
        Arch::Phi3,
        Arch::Smollm3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Exaone4 => "exaone4",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Granite => "granite",
            Arch::Lfm2 => "lfm2",
            Arch::Qwen35 => "qwen35",
            Arch::Phi3 => "phi3",
            Arch::Smollm3 => "smollm3",
        }
    }

    fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
    }
}

/// The feed-forward's gate activation: `down(act(gate x) * up x)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `x * sigmoid(x)` (SwiGLU).
    Silu,
    /// GELU, tanh approximation (GeGLU), through ggml's f16 table (see `ops::GeluTable`).
    GeluTanh,
}

/// How a layer mixes positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Attention to every earlier position.
    Global,
    /// Attention to the last `sliding_window` positions, the current one included (llama.cpp's
    /// "standard" SWA: key `k` is visible from query `q` when `q - k < window`).
    Local,
    /// LFM2's short convolution over the last `conv_taps` positions, the current one included.
    Conv,
    /// Qwen 3.5's gated delta net: a short convolution over the last `conv_taps` positions,
    /// then a recurrent state per value head that every position updates.
    DeltaNet,
}

/// The heads of Qwen 3.5's gated delta-net layers: value head `h` reads key head
/// `h % k_heads` (llama.cpp's converter orders the value heads so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaNetShape {
    pub k_heads: usize,
    pub v_heads: usize,
    /// The width of every key and value head (`ssm.state_size`).
    pub head_dim: usize,
}

impl DeltaNetShape {
    pub fn key_dim(&self) -> usize {
        self.k_heads * self.head_dim
    }
    pub fn value_dim(&self) -> usize {
        self.v_heads * self.head_dim
    }
    /// q | k | v: the channels the convolution runs over.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// Floats of one layer's recurrent state: `(v_heads, head_dim, head_dim)`.
    pub fn state_floats(&self) -> usize {
        self.v_heads * self.head_dim * self.head_dim
    }
}

/// Which elements RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// (x[2i], x[2i+1]): ggml's "normal" RoPE; llama GGUF files permute q/k weights for it.
    AdjacentPairs,
    /// (x[i], x[i + rot/2]): ggml's NeoX RoPE, used by qwen2.
    Halves,
}

/// How RoPE stretches positions past the trained context (`rope.scaling.type`), by
/// `rope_factor` in the global layers and `rope_factor_local` in the sliding-window ones
/// (Llama 3's and Phi-3's per-pair factors come as tensors beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScaling {
    /// Every angle divided by `rope_factor` (`linear`, also `longrope` and an absent type, as
    /// llama.cpp reads them; `none` and `llama3` with a factor of 1).
    Linear,
    /// YaRN (Qwen3's 128k files): pairs that turn fast within `rope_original_context` keep
    /// their angles, slow ones are divided by `rope_factor`, a ramp between; cos and sin are
    /// scaled by `1 + 0.1 ln(factor)` (ggml's `rope_yarn`, its betas 32 and 1).
    Yarn,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    /// Width of the residual stream.
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Hidden width of the SwiGLU feed-forward.
    pub ffn_dim: usize,
    pub vocab: usize,
    /// Context length the model was trained for.
    pub train_context: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    /// Dimensions of each head that RoPE rotates (the first `rope_dims`).
    pub rope_dims: usize,
    pub rope_style: RopeStyle,
    pub rope_scaling: RopeScaling,
    /// The global layers' RoPE scaling factor (`rope.scaling.factor`, 1 when absent or 0).
    pub rope_factor: f32,
    /// Multiplies cos and sin of each turning RoPE pair (`rope.scaling.attn_factor`, else 1).
    pub rope_attn_factor: f32,
    /// The context RoPE was trained at before it was stretched
    /// (`rope.scaling.original_context_length`, else `train_context`): Phi-3's LongRoPE takes
    /// its long factors for a context past it, its short ones otherwise; YaRN's ramp is
    /// placed by it.
    pub rope_original_context: usize,
    /// The RoPE base of the sliding-window layers (`rope.freq_base_swa`; without it Gemma 3's
    /// is 10000 and Gemma 2's the global base; LFM2's is always the global base: as llama.cpp).
    pub rope_base_local: f32,
    /// Their RoPE scaling factor, of the same kind (Gemma 2, LFM2, EXAONE 4.0: the global
    /// one; Gemma 3: 1).
    pub rope_factor_local: f32,
    /// Positions a local layer sees (0: no local layers).
    pub sliding_window: usize,
    /// Every `swa_pattern`-th layer is global, the others local (0: all local, as llama.cpp
    /// reads it).
    pub swa_pattern: usize,
    /// LFM2 and Qwen 3.5: each layer's kind where it is not set by the window pattern:
    /// `Conv` (LFM2's layers whose `attention.head_count_kv` entry is 0) or `DeltaNet`, else
    /// `Global`; empty for the others.
    pub mixers: Vec<LayerKind>,
    /// The positions each convolution spans (LFM2: `shortconv.l_cache`; Qwen 3.5:
    /// `ssm.conv_kernel`).
    pub conv_taps: usize,
    /// Qwen 3.5: the heads of its delta-net layers.
    pub delta_net: Option<DeltaNetShape>,
    /// Qwen 3.5: the q projection gives each head's query, then its gate; the attention's
    /// output is multiplied by `sigmoid(gate)` before `Wo`.
    pub attn_gate: bool,
    /// Qwen 3.5: interleaved M-RoPE sections (t, h, w, e pairs). A text position is the
    /// same in t, h and w and 0 in e, so RoPE pair `i` turns with the position unless its
    /// sector (`i % sum`) is an e one, which stays unrotated (see `rope_pair_turns`).
    pub rope_sections: Option<[usize; 4]>,
    /// Scores are `q · k * attn_scale`.
    pub attn_scale: f32,
    /// Gemma 2: scores become `cap * tanh(score / cap)` before the softmax (0: no cap).
    pub attn_softcap: f32,
    /// Embedding rows are multiplied by this (Gemma: sqrt(dim); Granite: the file's).
    pub embed_scale: f32,
    /// Each block's output is multiplied by this before it joins the residual stream (Granite).
    pub residual_scale: f32,
    /// The logits are multiplied by this (Granite: 1 / its `logit_scale`).
    pub logit_scale: f32,
    /// Then they become `cap * tanh(logit / cap)` (Gemma 2; Gemma 3 if its file asks; 0: no cap).
    pub final_softcap: f32,
    /// Layers without RoPE: those with `(l + 1) % no_rope_step == 0` (0: none; SmolLM3: every
    /// fourth; 1: all, a Granite file whose `rope.scaling.finetuned` is false).
    pub no_rope_step: usize,
    pub activation: Activation,
    /// RMS norms on each q and k head (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// Norms of the residual stream before attention and the feed-forward (`attn_norm`,
    /// `ffn_norm`; not EXAONE 4's).
    pub pre_norms: bool,
    /// Gemma's (and EXAONE 4's) norms of the attention and feed-forward outputs
    /// (`post_attention_norm`, `post_ffw_norm`) before they join the residual stream.
    pub post_norms: bool,
    /// Multi-token-prediction blocks after the `n_layers` that run (`nextn_predict_layers`):
    /// their tensors are skipped, as llama.cpp skips them.
    pub nextn_layers: usize,
    /// gate|up in one `ffn_up` (phi3). (Biases on q, k, v, and q|k|v in one `attn_qkv`, go by
    /// the tensors a file has, as in llama.cpp.)
    pub fused_gate_up: bool,
}

impl Config {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// `(dim, q_dim, kv_dim, ffn_dim, head_dim)`: the widths the forward pass works in.
    pub fn widths(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.dim,
            self.q_dim(),
            self.kv_dim(),
            self.ffn_dim,
            self.head_dim,
        )
    }
    /// Whether layer `l` attends globally or through the sliding window, or convolves, or
    /// runs a delta net.
    pub fn layer_kind(&self, l: usize) -> LayerKind {
        if let Some(&k @ (LayerKind::Conv | LayerKind::DeltaNet)) = self.mixers.get(l) {
            k
        } else if self.sliding_window > 0
            && (self.swa_pattern == 0 || l % self.swa_pattern < self.swa_pattern - 1)
        {
            LayerKind::Local
        } else {
            LayerKind::Global
        }
    }

    /// The positions layer `l` reads back to, the current one included (`usize::MAX`: all).
    pub fn span(&self, l: usize) -> usize {
        match self.layer_kind(l) {
            LayerKind::Global => usize::MAX,
            LayerKind::Local => self.sliding_window,
            LayerKind::Conv | LayerKind::DeltaNet => self.conv_taps,
        }
    }

    /// Whether RoPE pair `i` turns with the position (ggml's interleaved M-RoPE for a text
    /// position: sectors `3j`, `3j + 1`, `3j + 2` take t, h, w while `j` is below that
    /// section's size; the rest take e, always 0).
    pub fn rope_pair_turns(&self, i: usize) -> bool {
        let Some(s) = self.rope_sections else {
            return true;
        };
        let sector = i % s.iter().sum::<usize>();
        let section = s[sector % 3];
        sector < 3 * section
    }

    /// Whether layer `l` rotates q and k.
    pub fn has_rope(&self, l: usize) -> bool {
        // (n.is_multiple_of(0) is n == 0: no layer)
        !(l + 1).is_multiple_of(self.no_rope_step)
    }

    pub fn from_gguf(g: &Gguf<'_>) -> Result<Config> {
        let arch_name = g.get_str("general.architecture")?;
        let Some(arch) = Arch::ALL.into_iter().find(|a| a.name() == arch_name) else {
            let mut names = alloc::string::String::new();
            for a in Arch::ALL {
                names.push_str(if names.is_empty() { "" } else { ", " });
                names.push_str(a.name());
            }
            bail!(
                Status::Unsupported,
                "architecture {:?} (supported: {})",
                arch_name,
                names
            );
        };
        let key = |suffix: &str| {
            let mut k = alloc::string::String::new();
            k.push_str(arch_name);
            k.push('.');
            k.push_str(suffix);
            k
        };
        let bounded = |suffix: &str, max: u32| -> Result<usize> {
            let v = g.get_u32(&key(suffix))?;
            if v == 0 || v > max {
                bail!(
                    Status::BadFormat,
                    "{}.{} = {} is out of range 1..={}",
                    arch_name,
                    suffix,
                    v,
                    max
                );
            }
            Ok(v as usize)
        };
        let dim = bounded("embedding_length", MAX_DIM)?;
        let blocks = bounded("block_count", MAX_LAYERS)?;
        // Multi-token-prediction blocks after the others (llama.cpp loads and skips them)
        let nextn_layers = match g.get_u32_opt(&key("nextn_predict_layers"))? {
            Some(n) if n as usize >= blocks => bail!(
                Status::BadFormat,
                "{}.nextn_predict_layers = {} leaves no layer of {}",
                arch_name,
                n,
                blocks
            ),
            n => n.unwrap_or(0) as usize,
        };
        let n_layers = blocks - nextn_layers;
        let n_heads = bounded("attention.head_count", MAX_HEADS)?;
        // One count, or one per layer (LFM2: 0 for its convolution layers; every attention
        // layer must have the same count here).
        let mut mixers = Vec::new();
        let kv_key = key("attention.head_count_kv");
        let kv = match per_layer(g, &kv_key, blocks)? {
            Some(a) => {
                mixers
                    .try_reserve_exact(n_layers)
                    .map_err(|_| err!(Status::OutOfMemory, "layers"))?;
                let mut first = None;
                for v in a.values() {
                    let Some(count) = v.as_i128().and_then(|n| u32::try_from(n).ok()) else {
                        bail!(Status::BadFormat, "{} is not a list of counts", kv_key);
                    };
                    let conv = arch == Arch::Lfm2 && count == 0;
                    mixers.push(match conv {
                        true => LayerKind::Conv,
                        false => LayerKind::Global,
                    });
                    match first {
                        _ if conv => {}
                        None => first = Some(count),
                        Some(f) if f != count => bail!(
                            Status::Unsupported,
                            "{} differs from layer to layer",
                            kv_key
                        ),
                        Some(_) => {}
                    }
                }
                if arch != Arch::Lfm2 {
                    mixers.clear();
                }
                first
            }
            _ => g.get_u32_opt(&kv_key)?,
        };
        let n_kv_heads = match kv {
            Some(v) if v == 0 || v > n_heads as u32 => {
                bail!(Status::BadFormat, "{} = {} is out of range", kv_key, v)
            }
            Some(v) => v as usize,
            None => n_heads,
        };
        if n_heads % n_kv_heads != 0 {
            bail!(
                Status::BadFormat,
                "head_count {} is not a multiple of head_count_kv {}",
                n_heads,
                n_kv_heads
            );
        }
        let head_dim = match g.get_u32_opt(&key("attention.key_length"))? {
            Some(v) => v as usize,
            None => {
                if dim % n_heads != 0 {
                    bail!(
                        Status::BadFormat,
                        "embedding_length {} is not a multiple of head_count {}",
                        dim,
                        n_heads
                    );
                }
                dim / n_heads
            }
        };
        if head_dim == 0 || head_dim > MAX_HEAD_DIM as usize || head_dim % 2 != 0 {
            bail!(
                Status::BadFormat,
                "head dimension {} is out of range",
                head_dim
            );
        }
        if let Some(v) = g.get_u32_opt(&key("attention.value_length"))?
            && v as usize != head_dim
        {
            bail!(
                Status::Unsupported,
                "value_length {} differs from key_length {}",
                v,
                head_dim
            );
        }
        let ffn_dim = bounded("feed_forward_length", MAX_DIM * 4)?;
        let train_context = bounded("context_length", MAX_CONTEXT)?;
        let rms_eps = g
            .get_f32_opt(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-5);
        let rope_base = g.get_f32_opt(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        if !(rms_eps.is_finite() && rms_eps >= 0.0 && rope_base.is_finite() && rope_base > 1.0) {
            bail!(
                Status::BadFormat,
                "bad rms epsilon {} or rope base {}",
                Shortest::from(rms_eps),
                Shortest::from(rope_base)
            );
        }
        let rope_dims = match g.get_u32_opt(&key("rope.dimension_count"))? {
            Some(v) if v as usize > head_dim || v % 2 != 0 || v == 0 => {
                bail!(
                    Status::BadFormat,
                    "rope.dimension_count {} is out of range",
                    v
                )
            }
            Some(v) => v as usize,
            None => head_dim,
        };
        // As llama.cpp: the type is `linear` when absent, the factor `rope.scale_linear` when
        // `rope.scaling.factor` is absent, and 0 means 1.
        let (rope_scaling, scaled) = match g.get_str_opt(&key("rope.scaling.type"))? {
            None | Some("linear" | "longrope") => (RopeScaling::Linear, true),
            Some("none" | "llama3") => (RopeScaling::Linear, false),
            Some("yarn") => (RopeScaling::Yarn, true),
            Some(other) => bail!(Status::Unsupported, "rope scaling {:?}", other),
        };
        let rope_factor = match g.get_f32_opt(&key("rope.scaling.factor"))? {
            Some(f) => Some(f),
            None => g.get_f32_opt(&key("rope.scale_linear"))?,
        };
        let rope_factor = match rope_factor {
            _ if !scaled => 1.0,
            None | Some(0.0) => 1.0,
            Some(f) if f.is_finite() && f >= 1.0 => f,
            Some(f) => bail!(
                Status::BadFormat,
                "{} {} is out of range",
                key("rope.scaling.factor"),
                Shortest::from(f)
            ),
        };
        // Scales cos and sin of every turning pair (llama.cpp reads it for every architecture;
        // Phi-3.5 and Phi-4-mini's converter writes sqrt(1 + ln(scale) / ln(original context))).
        let rope_attn_factor = match g.get_f32_opt(&key("rope.scaling.attn_factor"))? {
            None => 1.0,
            Some(f) if f.is_finite() && f > 0.0 => f,
            Some(f) => bail!(
                Status::BadFormat,
                "{} {} is out of range",
                key("rope.scaling.attn_factor"),
                Shortest::from(f)
            ),
        };
        let rope_original_context =
            match g.get_u32_opt(&key("rope.scaling.original_context_length"))? {
                None => train_context,
                Some(0) => bail!(
                    Status::BadFormat,
                    "{} is 0",
                    key("rope.scaling.original_context_length")
                ),
                Some(n) => n as usize,
            };
        // A scale or cap from the file: absent or 0 is "not set", as llama.cpp reads them.
        let factor = |suffix: &str| -> Result<Option<f32>> {
            match g.get_f32_opt(&key(suffix))? {
                None => Ok(None),
                Some(0.0) => Ok(None),
                Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
                Some(v) => bail!(
                    Status::BadFormat,
                    "{}.{} = {} is out of range",
                    arch_name,
                    suffix,
                    Shortest::from(v)
                ),
            }
        };
        let gemma = arch.is_gemma();
        let sliding_window = match (arch, g.get_u32_opt(&key("attention.sliding_window"))?) {
            (Arch::Gemma2 | Arch::Gemma3 | Arch::Lfm2 | Arch::Exaone4, Some(w))
                if w > MAX_CONTEXT =>
            {
                bail!(
                    Status::BadFormat,
                    "{}.attention.sliding_window = {} is out of range",
                    arch_name,
                    w
                )
            }
            (Arch::Gemma2, Some(0)) => bail!(
                Status::BadFormat,
                "gemma2.attention.sliding_window = 0 is out of range"
            ),
            (Arch::Gemma2 | Arch::Gemma3, Some(w)) => w as usize,
            (Arch::Gemma2, None) => 4096,
            // EXAONE 4.0: only the 64-layer model has sliding-window layers
            (Arch::Exaone4, w) if n_layers == 64 => w.unwrap_or(4096) as usize,
            // LFM2 with a window: in every attention layer
            (Arch::Lfm2, Some(w)) => w as usize,
            // Gemma 3 without a window attends to everything in every layer; the others have none
            _ => 0,
        };
        let swa_pattern = match g.get(&key("attention.sliding_window_pattern")) {
            None if arch == Arch::Gemma2 => 2,
            None if arch == Arch::Lfm2 => 0,
            None if arch == Arch::Exaone4 => 4,
            None => 6,
            Some(v) => match v.as_i128() {
                Some(p) if (0..=MAX_LAYERS as i128).contains(&p) => p as usize,
                _ => bail!(
                    Status::Unsupported,
                    "{}.attention.sliding_window_pattern: only a layer count is supported, \
                     not a list of layers",
                    arch_name
                ),
            },
        };
        let rope_base_local = match (arch, g.get_f32_opt(&key("rope.freq_base_swa"))?) {
            // LFM2 rotates every layer alike (llama.cpp reads no such key for it)
            (Arch::Lfm2, _) => rope_base,
            (_, Some(b)) if b.is_finite() && b > 1.0 => b,
            (_, Some(b)) => bail!(
                Status::BadFormat,
                "bad sliding-window rope base {}",
                Shortest::from(b)
            ),
            (Arch::Gemma2 | Arch::Exaone4, None) => rope_base,
            (_, None) => 10_000.0,
        };
        // The vocabulary size is the embedding's row count (checked in the weights).
        let embd = g
            .tensor("token_embd.weight")
            .ok_or_else(|| err!(Status::BadFormat, "tensor token_embd.weight is missing"))?;
        let vocab = embd.dims[1] as usize;
        let rope_style = match arch {
            Arch::Llama | Arch::Granite | Arch::Smollm3 => RopeStyle::AdjacentPairs,
            Arch::Exaone4
            | Arch::Qwen2
            | Arch::Qwen3
            | Arch::Gemma2
            | Arch::Gemma3
            | Arch::Lfm2
            | Arch::Qwen35
            | Arch::Phi3 => RopeStyle::Halves,
        };
        // llama.cpp: the 27B Gemmas (Gemma 2: 46 layers, Gemma 3: 62) scale by dim / heads,
        // every other model by the head width (Granite: by its file's scale, when it has one).
        let scale_width = match (arch, n_layers) {
            (Arch::Gemma2, 46) | (Arch::Gemma3, 62) => dim / n_heads,
            _ => head_dim,
        };
        let mut attn_scale = 1.0 / super::ops::sqrtf(scale_width as f32);
        let (mut embed_scale, mut residual_scale, mut logit_scale) = (1.0, 1.0, 1.0);
        let mut no_rope_step = 0;
        if gemma {
            embed_scale = super::ops::sqrtf(dim as f32);
        }
        if arch == Arch::Smollm3 {
            no_rope_step = 4;
        }
        if arch == Arch::Exaone4 && sliding_window > 0 {
            // its global layers (every swa_pattern-th) have no RoPE
            no_rope_step = swa_pattern;
        }
        if arch == Arch::Granite {
            if g.get(&key("deepstack_mapping")).is_some() {
                bail!(
                    Status::Unsupported,
                    "granite vision models (deepstack_mapping)"
                );
            }
            if g.get_u32_opt(&key("expert_count"))?.unwrap_or(0) > 0 {
                bail!(
                    Status::Unsupported,
                    "granite with experts (mixture of experts)"
                );
            }
            let logits = g.get_f32(&key("logit_scale"))?;
            if !(logits.is_finite() && logits > 0.0) {
                bail!(
                    Status::BadFormat,
                    "granite.logit_scale = {} is out of range",
                    Shortest::from(logits)
                );
            }
            // as llama.cpp: a multiplication by the reciprocal, rounded to f32
            logit_scale = 1.0 / logits;
            embed_scale = factor("embedding_scale")?.unwrap_or(1.0);
            residual_scale = factor("residual_scale")?.unwrap_or(1.0);
            attn_scale = factor("attention.scale")?.unwrap_or(attn_scale);
            // Granite reads `finetuned` as "RoPE on" (default on)
            if g.get_bool_opt(&key("rope.scaling.finetuned"))? == Some(false) {
                no_rope_step = 1;
            }
        }
        let mut conv_taps = 0;
        if arch == Arch::Lfm2 {
            conv_taps = bounded("shortconv.l_cache", 64)?;
            if conv_taps < 2 {
                bail!(
                    Status::BadFormat,
                    "lfm2.shortconv.l_cache = {} is out of range 2..=64",
                    conv_taps
                );
            }
            if n_heads * head_dim != dim {
                bail!(
                    Status::BadFormat,
                    "lfm2: {} heads of width {} are not embedding_length {}",
                    n_heads,
                    head_dim,
                    dim
                );
            }
        }
        let (mut delta_net, mut rope_sections) = (None, None);
        if arch == Arch::Qwen35 {
            conv_taps = bounded("ssm.conv_kernel", 64)?;
            let shape = DeltaNetShape {
                k_heads: bounded("ssm.group_count", MAX_HEADS)?,
                v_heads: bounded("ssm.time_step_rank", MAX_HEADS)?,
                head_dim: bounded("ssm.state_size", MAX_HEAD_DIM)?,
            };
            if conv_taps < 2 {
                bail!(
                    Status::BadFormat,
                    "qwen35.ssm.conv_kernel = {} is out of range 2..=64",
                    conv_taps
                );
            }
            if !shape.v_heads.is_multiple_of(shape.k_heads) {
                bail!(
                    Status::BadFormat,
                    "qwen35.ssm.time_step_rank = {} (value heads) is not a multiple of \
                     ssm.group_count = {} (key heads)",
                    shape.v_heads,
                    shape.k_heads
                );
            }
            let inner = bounded("ssm.inner_size", MAX_DIM * 4)?;
            if inner != shape.value_dim() {
                bail!(
                    Status::Unsupported,
                    "qwen35: value heads of {} values in all, not {} heads as wide as the key \
                     heads ({})",
                    inner,
                    shape.v_heads,
                    shape.head_dim
                );
            }
            delta_net = Some(shape);
            mixers = recurrent_layers(g, &key, blocks, n_layers)?;
            rope_sections = Some(mrope_sections(g, &key("rope.dimension_sections"))?);
        }
        let (attn_softcap, final_softcap) = match arch {
            Arch::Gemma2 => (
                factor("attn_logit_softcapping")?.unwrap_or(50.0),
                factor("final_logit_softcapping")?.unwrap_or(30.0),
            ),
            Arch::Gemma3 => (0.0, factor("final_logit_softcapping")?.unwrap_or(0.0)),
            _ => (0.0, 0.0),
        };
        Ok(Config {
            arch,
            dim,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            vocab,
            train_context,
            rms_eps,
            rope_base,
            rope_dims,
            rope_style,
            rope_scaling,
            rope_factor,
            rope_attn_factor,
            rope_original_context,
            rope_base_local,
            // Gemma 2's and LFM2's sliding-window layers scale as the others do; Gemma 3's do not
            rope_factor_local: match arch {
                Arch::Exaone4 | Arch::Gemma2 | Arch::Lfm2 => rope_factor,
                _ => 1.0,
            },
            sliding_window,
            swa_pattern,
            mixers,
            conv_taps,
            delta_net,
            attn_gate: arch == Arch::Qwen35,
            rope_sections,
            attn_scale,
            attn_softcap,
            embed_scale,
            residual_scale,
            logit_scale,
            final_softcap,
            no_rope_step,
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            qk_norm: matches!(
                arch,
                Arch::Exaone4 | Arch::Qwen3 | Arch::Gemma3 | Arch::Lfm2 | Arch::Qwen35
            ),
            pre_norms: arch != Arch::Exaone4,
            post_norms: gemma || arch == Arch::Exaone4,
            nextn_layers,
            fused_gate_up: arch == Arch::Phi3,
        })
    }
}

/// Qwen 3.5's layer kinds: `attention.recurrent_layers` (one flag per block, multi-token
/// prediction blocks included), or else every `full_attention_interval`-th layer (default 4)
/// attends and the others run a delta net, as llama.cpp reads them.
fn recurrent_layers(
    g: &Gguf<'_>,
    key: &dyn Fn(&str) -> alloc::string::String,
    blocks: usize,
    n_layers: usize,
) -> Result<Vec<LayerKind>> {
    let mut kinds = Vec::new();
    kinds
        .try_reserve_exact(n_layers)
        .map_err(|_| err!(Status::OutOfMemory, "layers"))?;
    let kind = |recurrent: bool| match recurrent {
        true => LayerKind::DeltaNet,
        false => LayerKind::Global,
    };
    let list = key("attention.recurrent_layers");
    if let Some(a) = per_layer(g, &list, blocks)? {
        for v in a.values().take(n_layers) {
            let crate::gguf::Value::Bool(b) = v else {
                bail!(Status::BadFormat, "{} is not a list of booleans", list);
            };
            kinds.push(kind(b));
        }
        return Ok(kinds);
    }
    match g.get(&list) {
        Some(&crate::gguf::Value::Bool(b)) => kinds.extend((0..n_layers).map(|_| kind(b))),
        Some(_) => bail!(Status::BadFormat, "{} is not a list of booleans", list),
        None => {
            let interval = key("full_attention_interval");
            let every = g.get_u32_opt(&interval)?.unwrap_or(4) as usize;
            if every == 0 {
                bail!(Status::BadFormat, "{} is 0", interval);
            }
            kinds.extend((0..n_layers).map(|l| kind(!(l + 1).is_multiple_of(every))));
        }
    }
    Ok(kinds)
}

/// The list `name` holds, one entry per block (`None` if it is not a list).
fn per_layer<'a>(
    g: &Gguf<'a>,
    name: &str,
    blocks: usize,
) -> Result<Option<crate::gguf::Array<'a>>> {
    match g.get(name) {
        Some(&crate::gguf::Value::Array(a)) if a.len() != blocks => bail!(
            Status::BadFormat,
            "{} has {} entries for {} layers",
            name,
            a.len(),
            blocks
        ),
        Some(&crate::gguf::Value::Array(a)) => Ok(Some(a)),
        _ => Ok(None),
    }
}

/// The four M-RoPE sections (`rope.dimension_sections`: four counts, or one for all four),
/// required as llama.cpp requires them; one of the first three must be above 0.
fn mrope_sections(g: &Gguf<'_>, name: &str) -> Result<[usize; 4]> {
    let bad = || err!(Status::BadFormat, "{} must be four counts up to 1024", name);
    let count = |v: &crate::gguf::Value<'_>| {
        v.as_i128()
            .filter(|n| (0..=MAX_HEAD_DIM as i128).contains(n))
            .map(|n| n as usize)
            .ok_or_else(bad)
    };
    let mut s = [0; 4];
    match g.get(name) {
        None => bail!(Status::BadFormat, "{} is missing", name),
        Some(crate::gguf::Value::Array(a)) => {
            if a.len() != 4 {
                return Err(bad());
            }
            for (s, v) in s.iter_mut().zip(a.values()) {
                *s = count(&v)?;
            }
        }
        Some(v) => s = [count(v)?; 4],
    }
    if s[..3].iter().all(|&n| n == 0) {
        bail!(Status::BadFormat, "{} has no t, h or w section", name);
    }
    Ok(s)
}
