//! The llama-family forward pass (llama, qwen2, qwen3, qwen35, gemma2, gemma3, granite, lfm2,
//! exaone4, phi3, smollm3): weights where they lie in the GGUF file (or quantized to Q8_0 as
//! they are read), a KV cache, and a batched step that turns token ids into logits.
//!
//! One token, top to bottom (shapes per token; `B` tokens go through together in a batch;
//! bracketed steps belong to some architectures only):
//! ```text
//! x = token_embd[id] [* embed_scale]                   (dim,)   [gemma: sqrt(dim), granite]
//! for each layer:
//!     xb = rmsnorm(x) * attn_norm                      (dim,)   [exaone4: xb = x]
//!     q, k, v = Wq xb [+bq], Wk xb [+bk], Wv xb [+bv]  (q_dim,), (kv_dim,), (kv_dim,)
//!     [q_h, k_h = rmsnorm(q_h) * q_norm, rmsnorm(k_h) * k_norm]   [qwen3, gemma3, lfm2, exaone4]
//!     [rope(q, k, pos)]; k, v -> cache[layer][pos]     (f16, as llama.cpp's cache)
//!     per head h: s = q_h · K[lo..=pos] * scale        [s = cap tanh(s / cap): gemma2]
//!                 o_h = softmax(s) · V[lo..=pos]
//!                 (lo = 0, or pos + 1 - window in a sliding-window layer)
//!     x += [post_attn_norm *] Wo o [* residual_scale]  (dim,)   [gemma, exaone4; granite]
//!     (lfm2's convolution layers instead: b, c, u = Win xb; bu -> cache[layer][pos];
//!      o = c * sum_k w_k bu[pos - taps + 1 + k]; x += Wout o)
//!     (qwen35: q and a gate g per head from Wq; o_h *= sigmoid(g_h) before Wo. Its delta-net
//!      layers instead: m = Wqkv xb -> cache[layer][pos]; q|k|v = silu(sum_k w_k m[pos-taps+1+k]);
//!      q_h, k_h to unit length; per value head h (key head h % k_heads), state S_h:
//!      S_h *= exp(softplus(Walpha xb + dt_bias)_h * a_h);
//!      S_h += k_h (sigmoid(Wbeta xb)_h (v_h - S_h k_h))^T;  o_h = S_h q_h / sqrt(width);
//!      o_h = rmsnorm(o_h) * norm * silu(Wz xb)_h; x += Wout o)
//!     xb = rmsnorm(x) * ffn_norm                                [exaone4: xb = x]
//!     x += [post_ffn_norm *] Wdown (act(Wgate xb) * (Wup xb)) [* residual_scale]
//!                                                      act: silu, or gelu [gemma]
//! logits = Wout (rmsnorm(x) * output_norm) [* logit_scale]          [granite]
//! [logits = cap tanh(logits / cap)]                                 [gemma2]
//! ```
//! phi3 stores Wq|Wk|Wv as one matrix and Wgate|Wup as another: the loader takes row ranges of
//! them as separate matrices, so the pass is the same.
//! Every matrix product and the attention heads are split across the thread pool; each output
//! element is computed by one thread in a fixed order, so logits do not depend on thread count.

pub mod config;
pub mod encoder;
pub mod ops;

use alloc::vec::Vec;
use core::ops::Range;

use crate::decimal::Shortest;
use crate::error::{Result, Status};
use crate::gguf::{Gguf, TensorInfo};
use crate::pool::{self, Disjoint};
use crate::quant::{self, ActivationBuf, GgmlType};
use crate::{bail, err, math};
pub use config::{Activation, Arch, Config, LayerKind, RopeScaling};
use ops::{KvElem, KvHalf, RopeTable, rmsnorm, rmsnorm_in_place, try_vec};

/// Tokens that go through the layers together in one prefill batch.
pub const MAX_BATCH: usize = 32;
/// Spare floats after each attention score row: the SIMD softmax may touch up to 3 past the
/// last score, and rows of different heads belong to different threads (seed 000's bug).
const SCORE_ROW_PAD: usize = 8;
/// Pool chunks of a matrix product are multiples of this many rows.
const ROWS_PER_CHUNK: usize = 16;

/// A weight matrix where it lies in the file: `rows` rows of `cols` elements of type `ty`.
#[derive(Clone, Copy)]
pub struct Matrix<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
}

impl<'a> Matrix<'a> {
    fn from_tensor(t: &TensorInfo<'a>, rows: usize, cols: usize) -> Result<Matrix<'a>> {
        check_shape(t, &[cols as u64, rows as u64])?;
        if !quant::is_supported(t.ty) {
            bail!(
                Status::Unsupported,
                "tensor {} has type {}, which this build cannot compute with",
                t.name,
                t.ty.name()
            );
        }
        let row_bytes = t.row_bytes();
        Ok(Matrix {
            ty: t.ty,
            data: t.data,
            rows,
            cols,
            row_bytes,
        })
    }

    fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Rows `rows` of this matrix as a matrix of their own (fused tensors).
    fn rows(&self, rows: Range<usize>) -> Matrix<'a> {
        Matrix {
            data: &self.data[rows.start * self.row_bytes..rows.end * self.row_bytes],
            rows: rows.len(),
            ..*self
        }
    }
}

/// Fails with the tensor's name unless its shape is `want` (GGUF order: the row length first).
fn check_shape(t: &TensorInfo<'_>, want: &[u64]) -> Result<()> {
    let dims = &t.dims[..t.n_dims];
    // GGUF may write trailing 1s ([256, 1] for a vector): they do not change the shape.
    let trimmed = |d: &[u64]| -> usize { d.iter().rposition(|&x| x != 1).map_or(0, |i| i + 1) };
    if dims[..trimmed(dims)] != want[..trimmed(want)] {
        bail!(
            Status::BadFormat,
            "{}: shape {:?}, expected {:?}",
            t.name,
            dims,
            want
        );
    }
    Ok(())
}

struct Layer<'a> {
    kind: LayerKind,
    /// The norms before attention (or convolution) and before the feed-forward (not EXAONE 4's).
    attn_norm: Option<Vec<f32>>,
    mixer: Mixer<'a>,
    /// gemma2, gemma3, exaone4: the norm of the attention (or convolution) output.
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Option<Vec<f32>>,
    w_gate: Matrix<'a>,
    w_up: Matrix<'a>,
    w_down: Matrix<'a>,
    /// gemma2, gemma3, exaone4: the norm of the feed-forward output.
    post_ffn_norm: Option<Vec<f32>>,
}

/// How a layer mixes positions: its output, `(n, q_dim)` in `att_out`, goes through
/// [`Mixer::output`].
enum Mixer<'a> {
    Attention(Attention<'a>),
    Conv(ShortConv<'a>),
    DeltaNet(DeltaNet<'a>),
}

struct Attention<'a> {
    wq: Matrix<'a>,
    wk: Matrix<'a>,
    wv: Matrix<'a>,
    /// Whether q and k are rotated (not in SmolLM3's every fourth layer).
    rope: bool,
    /// Biases of q, k and v, where the file has them (qwen2's always).
    bias: [Option<Vec<f32>>; 3],
    /// Qwen 3.5: `wq` gives `(n_heads, 2, head_dim)`, each head's query and then its gate.
    gated: bool,
    /// qwen3, gemma3, lfm2: the norms of each q head and each k head, `(head_dim,)` each.
    qk_norm: Option<[Vec<f32>; 2]>,
    wo: Matrix<'a>,
}

/// LFM2's gated short convolution: `b, c, u = in_proj xb` (three `dim` blocks of rows), and
/// per channel `y = c * sum_k kernel[k] * (b * u)[pos - taps + 1 + k]` over the layer's last
/// `taps` positions (before position 0: zeros); then `out_proj y`.
struct ShortConv<'a> {
    /// (3 dim, dim)
    in_proj: Matrix<'a>,
    /// (dim, taps): each channel's taps, the oldest position's first.
    kernel: Vec<f32>,
    /// (dim, dim)
    out_proj: Matrix<'a>,
}

/// Qwen 3.5's gated delta net (see the module's outline); widths from
/// [`config::DeltaNetShape`]: `kd` keys, `vd` values, `vh` value heads of width `hd`, and the
/// convolution's `cd = 2 kd + vd` channels.
struct DeltaNet<'a> {
    /// (cd, dim): q | k | v, before the convolution.
    qkv: Matrix<'a>,
    /// (vd, dim): z, the output's gate.
    gate: Matrix<'a>,
    /// (vh, dim) each: the update's strength, and the decay's.
    beta: Matrix<'a>,
    alpha: Matrix<'a>,
    /// (cd, taps): each channel's taps, the oldest position's first.
    kernel: Vec<f32>,
    /// (vh,) each: `dt_bias`, and `a = -exp(A_log)`.
    dt_bias: Vec<f32>,
    a: Vec<f32>,
    /// (hd,): the norm of each head's output.
    norm: Vec<f32>,
    /// (dim, vd)
    out: Matrix<'a>,
}

impl<'a> DeltaNet<'a> {
    fn load(ld: &mut Loader<'_, 'a>, cfg: &Config, l: usize) -> Result<DeltaNet<'a>> {
        let dn = cfg.delta_net.expect("a delta-net layer has its shape");
        let (dim, cd, vd, vh) = (cfg.dim, dn.conv_dim(), dn.value_dim(), dn.v_heads);
        let nm = |suffix: &str| alloc::format!("blk.{l}.{suffix}");
        Ok(DeltaNet {
            qkv: ld.matrix(&nm("attn_qkv.weight"), cd, dim)?,
            gate: ld.matrix(&nm("attn_gate.weight"), vd, dim)?,
            beta: ld.matrix(&nm("ssm_beta.weight"), vh, dim)?,
            alpha: ld.matrix(&nm("ssm_alpha.weight"), vh, dim)?,
            kernel: values(
                ld.tensor(&nm("ssm_conv1d.weight"))?,
                &[cfg.conv_taps as u64, cd as u64],
            )?,
            dt_bias: ld.vector(&nm("ssm_dt.bias"), vh)?,
            a: ld.vector(&nm("ssm_a"), vh)?,
            norm: ld.vector(&nm("ssm_norm.weight"), dn.head_dim)?,
            out: ld.matrix(&nm("ssm_out.weight"), dim, vd)?,
        })
    }
}

impl<'a> Mixer<'a> {
    /// The projection of the mixed positions back to the residual stream.
    fn output(&self) -> &Matrix<'a> {
        match self {
            Mixer::Attention(a) => &a.wo,
            Mixer::Conv(c) => &c.out_proj,
            Mixer::DeltaNet(d) => &d.out,
        }
    }

    /// Its matrices, and the bytes of its vectors.
    fn weights(&self) -> (Vec<&Matrix<'a>>, usize) {
        let bytes = |v: &[f32]| v.len() * 4;
        match self {
            Mixer::Attention(a) => (
                alloc::vec![&a.wq, &a.wk, &a.wv, &a.wo],
                a.bias.iter().flatten().map(|b| bytes(b)).sum::<usize>()
                    + a.qk_norm
                        .as_ref()
                        .map_or(0, |q| bytes(&q[0]) + bytes(&q[1])),
            ),
            Mixer::Conv(c) => (alloc::vec![&c.in_proj, &c.out_proj], bytes(&c.kernel)),
            Mixer::DeltaNet(d) => (
                alloc::vec![&d.qkv, &d.gate, &d.beta, &d.alpha, &d.out],
                [&d.kernel, &d.dt_bias, &d.a, &d.norm]
                    .iter()
                    .map(|v| bytes(v))
                    .sum(),
            ),
        }
    }
}

/// How to load a model.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// KV cache length (0: the model's own context length, capped at 4096).
    pub context: usize,
    /// `Some(Q8_0)`: F32, F16 and BF16 matrices become Q8_0 blocks as they are read (ggml's
    /// rounding: the bytes `llama-quantize --pure` writes). Norms and other vectors stay f32.
    pub quantize: Option<GgmlType>,
}

/// Called with each position's index in the batch and its logits, when all are wanted.
pub type OnLogits<'f> = Option<&'f mut dyn FnMut(usize, &[f32])>;

/// Where a layer's positions are in the caches: an attention layer's K and V, `(n_kv_heads,
/// slots, head_dim)` each in `keys` and `values`; a convolution layer's `b * u`, `(slots, dim)`
/// in `ring`; a delta-net layer's `q | k | v` before its convolution, `(slots, cd)` in `ring`,
/// and its recurrent state, `(vh, hd, hd)` (row `j` of head `h`: value `j`'s weights of the
/// keys) in `state`.
struct LayerCache {
    /// First element in `keys` and `values` (attention), or in `ring`; first float in `state`.
    at: usize,
    state_at: usize,
    /// Positions: `context`, or what the layer reads back to plus a batch.
    slots: usize,
}

/// Activations of one batch: every buffer is `(MAX_BATCH, width)`.
struct Scratch {
    x: Vec<f32>,
    xb: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att_out: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// (MAX_BATCH, 3 dim): a convolution layer's `b | c | u` rows; (MAX_BATCH, cd): a delta-net
    /// layer's `q | k | v` (empty without such layers).
    conv: Vec<f32>,
    /// (MAX_BATCH, q_dim): Qwen 3.5's attention gates; (MAX_BATCH, vd): its delta nets' (empty
    /// for the others).
    gates: Vec<f32>,
    /// (MAX_BATCH, vh) each: a delta-net layer's update strengths and decays (empty without).
    beta: Vec<f32>,
    decay: Vec<f32>,
    /// (MAX_BATCH * n_heads, context + SCORE_ROW_PAD): one score row per (token, head).
    scores: Vec<f32>,
    /// (2, slots, kv_dim) of the attention layer with the most slots: a layer's keys then
    /// values in f32, for a batch that reads them in many tiles (`Model::attention`).
    staged: Vec<f32>,
    /// The rows about to be multiplied, rounded for the weights' type; a group whose matrices
    /// want two different roundings uses both.
    acts: [ActivationBuf; 2],
}

/// The result a block ends with, before its output projection.
#[derive(Clone, Copy)]
enum BlockOutput {
    /// `att_out` (n, cols): the attention's, a convolution's or a delta net's.
    Attention,
    /// `gate` (n, ffn), already multiplied by `up`.
    FeedForward,
}

impl Scratch {
    /// xb = rmsnorm(x) * w for the positions `rows` (each `dim` wide): the input of the
    /// projections that follow; without a norm (EXAONE 4), xb = x.
    fn norm_rows(&mut self, rows: Range<usize>, dim: usize, w: Option<&[f32]>, eps: f32) {
        for t in rows {
            let (xb, x) = (
                &mut self.xb[t * dim..(t + 1) * dim],
                &self.x[t * dim..(t + 1) * dim],
            );
            norm_row(xb, x, w, eps);
        }
    }

    /// x += [post_norm *] W y [* residual_scale] over the first `n` positions, y being the
    /// attention's (or convolution's) output (W = Wo or out_proj) or the gated feed-forward
    /// (W = Wdown): the end of a block. W y goes through xb, which then holds the next step's
    /// input, `norm_rows` of x with `next_norm`. The steps after the product go token by token
    /// across the pool ([`residual_kernel`]).
    fn add_block_output(
        &mut self,
        w: &Matrix<'_>,
        y: BlockOutput,
        n: usize,
        post_norm: Option<&[f32]>,
        next_norm: Option<&[f32]>,
        cfg: &Config,
    ) -> Result<()> {
        let dim = w.rows;
        let y = match y {
            BlockOutput::Attention => &self.att_out[..n * w.cols],
            BlockOutput::FeedForward => &self.gate[..n * w.cols],
        };
        matmul_group(&mut [(w, &mut self.xb[..n * dim])], y, n, &mut self.acts)?;
        let args = ResidualArgs {
            x: Disjoint::new(&mut self.x[..n * dim]),
            xb: Disjoint::new(&mut self.xb[..n * dim]),
            dim,
            post_norm,
            scale: cfg.residual_scale,
            next_norm,
            eps: cfg.rms_eps,
        };
        per_token(&args, n, residual_kernel);
        Ok(())
    }

    /// `gate = act(gate) * up` over the first `n` positions (`ffn` wide), token by token across
    /// the pool.
    fn gate_rows(&mut self, n: usize, ffn: usize, act: &GateActivation) {
        let args = GateArgs {
            gate: Disjoint::new(&mut self.gate[..n * ffn]),
            up: &self.up[..n * ffn],
            ffn,
            act,
        };
        per_token(&args, n, gate_kernel);
    }
}

/// `xb = rmsnorm(x) * w`, or `xb = x` without a norm.
fn norm_row(xb: &mut [f32], x: &[f32], w: Option<&[f32]>, eps: f32) {
    match w {
        Some(w) => rmsnorm(xb, x, w, eps),
        None => xb.copy_from_slice(x),
    }
}

/// Runs `f` over a batch's `n` tokens: one token per claim across the pool, or on this thread
/// for one token (decode: a job would cost more than the row). Each token's row is computed
/// the same way wherever it runs, so the bits do not depend on the thread count. (On the
/// driver alone, the gate and the norms were time the helpers spent waiting: in a two-thread
/// prefill in wasmtime, SmolLM2-135M Q4_1, the helper's `helper_loop` went from 4.0 % of the
/// samples to 2.2 %; a serial step weighs more the more threads share the rest.)
fn per_token<T: Sync>(args: &T, n: usize, f: fn(&T, Range<usize>)) {
    match n {
        1 => f(args, 0..1),
        _ => pool::par_for(args, n, 1, f),
    }
}

/// What [`Model::attend`] does to each token's q, k and v between their products and the
/// attention: the biases, the heads' norms and RoPE, then k and v into the layer's cache rings
/// (each token its own slot: a ring holds at least a batch).
struct QkvArgs<'a> {
    /// (n, q_dim), (n, kv_dim), (n, kv_dim)
    q: Disjoint<'a, f32>,
    k: Disjoint<'a, f32>,
    v: Disjoint<'a, f32>,
    q_dim: usize,
    kv_dim: usize,
    hd: usize,
    bias: &'a [Option<Vec<f32>>; 3],
    qk_norm: Option<&'a [Vec<f32>; 2]>,
    rope: Option<&'a RopeTable>,
    eps: f32,
    pos0: usize,
    /// Every layer's rings; this layer's start at `at`, `(n_kv_heads, slots, hd)`.
    keys: Disjoint<'a, KvHalf>,
    values: Disjoint<'a, KvHalf>,
    at: usize,
    slots: usize,
    /// (n): a token's first key and value of which one is outside the f16 range (the token's
    /// cache rows then stay partly written).
    overflow: Disjoint<'a, Option<(f32, f32)>>,
}

fn qkv_kernel(a: &QkvArgs<'_>, tokens: Range<usize>) {
    'tokens: for t in tokens {
        // SAFETY: token t's rows, its ring slot and its overflow entry belong to this item
        // alone (distinct tokens have distinct slots: a ring holds at least a batch).
        let (q, k, v) = unsafe {
            (
                a.q.slice(t * a.q_dim..(t + 1) * a.q_dim),
                a.k.slice(t * a.kv_dim..(t + 1) * a.kv_dim),
                a.v.slice(t * a.kv_dim..(t + 1) * a.kv_dim),
            )
        };
        for (y, b) in [&mut *q, &mut *k, &mut *v].into_iter().zip(a.bias) {
            if let Some(b) = b {
                ops::axpy(y, 1.0, b);
            }
        }
        if let Some([nq, nk]) = a.qk_norm {
            for head in q.chunks_exact_mut(a.hd) {
                rmsnorm_in_place(head, nq, a.eps);
            }
            for head in k.chunks_exact_mut(a.hd) {
                rmsnorm_in_place(head, nk, a.eps);
            }
        }
        if let Some(rope) = a.rope {
            rope.apply(q, a.hd, a.pos0 + t);
            rope.apply(k, a.hd, a.pos0 + t);
        }
        let slot = (a.pos0 + t) % a.slots;
        for (h, (k, v)) in k.chunks_exact(a.hd).zip(v.chunks_exact(a.hd)).enumerate() {
            let at = a.at + (h * a.slots + slot) * a.hd;
            // SAFETY: as above.
            let (kc, vc) = unsafe { (a.keys.slice(at..at + a.hd), a.values.slice(at..at + a.hd)) };
            for i in 0..a.hd {
                let (Some(kh), Some(vh)) = (KvHalf::new(k[i]), KvHalf::new(v[i])) else {
                    // SAFETY: as above.
                    unsafe { a.overflow.slice(t..t + 1)[0] = Some((k[i], v[i])) };
                    continue 'tokens;
                };
                (kc[i], vc[i]) = (kh, vh);
            }
        }
    }
}

/// What [`Scratch::add_block_output`] does after its product, per token: `(n, dim)` each.
struct ResidualArgs<'a> {
    x: Disjoint<'a, f32>,
    xb: Disjoint<'a, f32>,
    dim: usize,
    post_norm: Option<&'a [f32]>,
    scale: f32,
    next_norm: Option<&'a [f32]>,
    eps: f32,
}

fn residual_kernel(a: &ResidualArgs<'_>, tokens: Range<usize>) {
    for t in tokens {
        let row = t * a.dim..(t + 1) * a.dim;
        // SAFETY: token t's rows belong to this item alone.
        let (x, xb) = unsafe { (a.x.slice(row.clone()), a.xb.slice(row)) };
        if let Some(norm) = a.post_norm {
            rmsnorm_in_place(xb, norm, a.eps);
        }
        ops::axpy(x, a.scale, xb);
        norm_row(xb, x, a.next_norm, a.eps);
    }
}

/// What [`Scratch::gate_rows`] does, per token: `gate` and `up` `(n, ffn)`.
struct GateArgs<'a> {
    gate: Disjoint<'a, f32>,
    up: &'a [f32],
    ffn: usize,
    act: &'a GateActivation,
}

fn gate_kernel(a: &GateArgs<'_>, tokens: Range<usize>) {
    for t in tokens {
        let row = t * a.ffn..(t + 1) * a.ffn;
        // SAFETY: token t's row belongs to this item alone.
        let gate = unsafe { a.gate.slice(row.clone()) };
        match a.act {
            GateActivation::Silu => ops::swiglu_in_place(gate, &a.up[row]),
            GateActivation::Gelu(table) => table.geglu_in_place(gate, &a.up[row]),
        }
    }
}

pub struct Model<'a> {
    pub cfg: Config,
    /// Positions the KV cache holds.
    pub context: usize,
    token_embd: Matrix<'a>,
    layers: Vec<Layer<'a>>,
    output_norm: Vec<f32>,
    output: Matrix<'a>,
    rope: RopeTable,
    /// gemma3: the RoPE of the sliding-window layers (their own base).
    rope_local: Option<RopeTable>,
    /// The feed-forward's gate activation (`cfg.activation`, with GELU's table).
    gate_activation: GateActivation,
    /// Matrices quantized at load; the `Matrix` views above point into these. Never touched
    /// after `load`, so the views stay valid for the model's life (moving a Vec does not move
    /// its heap block).
    _owned: Vec<Vec<u8>>,
    /// Bytes of weights quantized at load (in `_owned`).
    pub quantized_bytes: usize,
    /// Every attention layer's K and V in f16, layer after layer (see [`LayerCache`]), laid out
    /// `(n_kv_heads, slots, head_dim)` so that one head's keys (and values) are one contiguous
    /// run, read front to back by attention. Position `p` lives in slot `p % slots`: a global
    /// layer has `context` slots (no wrap), a sliding-window or convolution layer only what it
    /// reads back to plus a batch (a ring: each batch writes its positions before any of them
    /// is read).
    keys: Vec<KvHalf>,
    values: Vec<KvHalf>,
    /// The convolution and delta-net layers' rings of past inputs, in f32, slots as above.
    ring: Vec<f32>,
    /// The delta-net layers' recurrent states (f32).
    state: Vec<f32>,
    cache: Vec<LayerCache>,
    /// One past the highest position written to the caches since the last rebuild: ring rows
    /// of positions below `written - slots` are gone (see `truncate`).
    written: usize,
    /// The ids at positions `0..pos` (to rebuild the rings when `truncate` goes back further
    /// than they reach).
    ids: Vec<u32>,
    /// Tokens in the cache.
    pub pos: usize,
    scratch: Scratch,
    /// (vocab,): logits after the last token of the last call.
    pub logits: Vec<f32>,
}

/// [`Activation`] as the forward pass runs it.
enum GateActivation {
    Silu,
    Gelu(ops::GeluTable),
}

/// Reads a 1-D f32 (or f16) tensor of `n` values into a Vec.
fn vector(t: &TensorInfo<'_>, n: usize) -> Result<Vec<f32>> {
    values(t, &[n as u64])
}

/// Reads an f32 (or f16) tensor of shape `shape` (ggml's order) into a Vec.
fn values(t: &TensorInfo<'_>, shape: &[u64]) -> Result<Vec<f32>> {
    let name = t.name;
    check_shape(t, shape)?;
    let mut out = try_vec(shape.iter().product::<u64>() as usize)?;
    match t.ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            quant::dequantize_row(t.ty, t.data, &mut out)?
        }
        other => bail!(
            Status::Unsupported,
            "tensor {} has type {}; expected F32",
            name,
            other.name()
        ),
    }
    Ok(out)
}

/// Reads the tensors of a file, quantizing matrices when asked; owns what it quantized, and
/// knows which tensors it read.
struct Loader<'g, 'a> {
    g: &'g Gguf<'a>,
    quantize: Option<GgmlType>,
    owned: Vec<Vec<u8>>,
    quantized_bytes: usize,
    /// Which of the file's tensors ([`Gguf::tensors`]) were read.
    used: Vec<bool>,
}

impl<'g, 'a> Loader<'g, 'a> {
    /// A loader of `g`'s tensors, none read yet; `quantize`: `Some(Q8_0)` or `None`.
    fn new(g: &'g Gguf<'a>, quantize: Option<GgmlType>) -> Result<Loader<'g, 'a>> {
        match quantize {
            None | Some(GgmlType::Q8_0) => {}
            Some(other) => bail!(
                Status::Unsupported,
                "quantizing at load to {} (supported: Q8_0)",
                other.name()
            ),
        }
        let n_tensors = g.tensors().len();
        let mut used = Vec::new();
        used.try_reserve_exact(n_tensors)
            .map_err(|_| err!(Status::OutOfMemory, "{} tensors", n_tensors))?;
        used.resize(n_tensors, false);
        Ok(Loader {
            g,
            quantize,
            owned: Vec::new(),
            quantized_bytes: 0,
            used,
        })
    }

    /// Tensor `name`, if the file has it (then it counts as read).
    fn optional(&mut self, name: &str) -> Result<Option<&TensorInfo<'a>>> {
        let Some(i) = self.g.tensor_index(name) else {
            return Ok(None);
        };
        self.used[i] = true;
        Ok(Some(&self.g.tensors()[i]))
    }

    fn tensor(&mut self, name: &str) -> Result<&TensorInfo<'a>> {
        self.optional(name)?
            .ok_or_else(|| err!(Status::BadFormat, "tensor {} is missing", name))
    }

    /// The 1-D tensor `name` of `n` values.
    fn vector(&mut self, name: &str, n: usize) -> Result<Vec<f32>> {
        vector(self.tensor(name)?, n)
    }

    /// The 1-D tensor `name` of `n` values, if the file has it.
    fn optional_vector(&mut self, name: &str, n: usize) -> Result<Option<Vec<f32>>> {
        self.optional(name)?.map(|t| vector(t, n)).transpose()
    }

    /// RoPE's per-pair divisors `name` (`pairs` of them), if the file has them: each finite and
    /// positive (a 0 would turn its pair by infinity, and every logit be NaN).
    fn rope_factors(&mut self, name: &str, pairs: usize) -> Result<Option<Vec<f32>>> {
        let factors = self.optional_vector(name, pairs)?;
        if let Some(x) = factors
            .iter()
            .flatten()
            .find(|x| !(x.is_finite() && **x > 0.0))
        {
            bail!(
                Status::BadFormat,
                "{}: factor {} is out of range",
                name,
                Shortest::from(*x)
            );
        }
        Ok(factors)
    }

    /// Counts the tensors of blocks `first..` as read: multi-token-prediction blocks, which
    /// llama.cpp loads and does not run either.
    fn skip_blocks_from(&mut self, first: usize) {
        for (t, used) in self.g.tensors().iter().zip(&mut self.used) {
            let block = t
                .name
                .strip_prefix("blk.")
                .and_then(|r| r.split('.').next());
            if block
                .and_then(|b| b.parse::<usize>().ok())
                .is_some_and(|b| b >= first)
            {
                *used = true;
            }
        }
    }

    /// Refuses a file with a tensor the forward pass did not read (a bias or a norm of a variant
    /// we do not run would otherwise be ignored, and the logits silently wrong); llama.cpp
    /// refuses such files too.
    fn check_all_used(&self) -> Result<()> {
        match self.used.iter().position(|&u| !u) {
            Some(i) => bail!(
                Status::Unsupported,
                "tensor {} is not part of the {} forward pass implemented here",
                self.g.tensors()[i].name,
                self.g.get_str("general.architecture").unwrap_or("?")
            ),
            None => Ok(()),
        }
    }

    /// The `rows x cols` matrix `name`, checked against that shape.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Matrix<'a>> {
        let t = self.tensor(name)?;
        let m = Matrix::from_tensor(t, rows, cols)?;
        let m = match self.quantize {
            Some(GgmlType::Q8_0)
                if matches!(m.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
                    && cols.is_multiple_of(32) =>
            {
                self.quantize_q8_0(&m)?
            }
            _ => m,
        };
        // (after quantizing: weights too large for f16 get infinite Q8_0 scales)
        quant::check_matrix(m.ty, m.rows, m.cols, m.data, name)?;
        Ok(m)
    }

    /// `m` as Q8_0 blocks in a buffer of our own: row by row, dequantized to f32 and rounded
    /// as ggml's `quantize_row_q8_0_ref` does.
    fn quantize_q8_0(&mut self, m: &Matrix<'a>) -> Result<Matrix<'a>> {
        let row_bytes = m.cols / 32 * 34;
        let total = m
            .rows
            .checked_mul(row_bytes)
            .ok_or_else(|| err!(Status::OutOfMemory, "quantized matrix"))?;
        let mut out: Vec<u8> = Vec::new();
        out.try_reserve_exact(total).map_err(|_| {
            err!(
                Status::OutOfMemory,
                "cannot allocate {} bytes for Q8_0",
                total
            )
        })?;
        out.resize(total, 0);
        self.owned
            .try_reserve(1)
            .map_err(|_| err!(Status::OutOfMemory, "quantized matrices"))?;
        let mut row = try_vec(m.cols)?;
        for (r, q) in out.chunks_exact_mut(row_bytes).enumerate() {
            quant::dequantize_row(m.ty, m.row(r), &mut row)?;
            quant::quantize_row_q8_0(&row, q);
        }
        // as the file's Q8_0 tensors are, once loaded
        quant::group_rows(GgmlType::Q8_0, m.cols, &mut out);
        // SAFETY: the heap block of `out` is never freed, resized or written again while the
        // model lives: it moves into `Model::_owned` with this loader, and the model's matrices
        // (which never leave the model) are the only readers.
        let data: &'a [u8] = unsafe { core::slice::from_raw_parts(out.as_ptr(), total) };
        self.owned.push(out);
        self.quantized_bytes += total;
        Ok(Matrix {
            ty: GgmlType::Q8_0,
            data,
            rows: m.rows,
            cols: m.cols,
            row_bytes,
        })
    }
}

impl<'a> Attention<'a> {
    /// Layer `l`'s q, k, v (and their biases and head norms) and output matrices.
    fn load(ld: &mut Loader<'_, 'a>, cfg: &Config, l: usize) -> Result<Attention<'a>> {
        let (dim, q_dim, kv_dim, _, hd) = cfg.widths();
        let nm = |suffix: &str| alloc::format!("blk.{l}.{suffix}");
        let g = ld.g;
        // q, k, v: one matrix each, or rows of one `attn_qkv` (phi3 always): as llama.cpp,
        // by the tensors the file has; the same for their biases.
        let (wq, wk, wv);
        let mut bias = [None, None, None];
        if cfg.attn_gate {
            wq = ld.matrix(&nm("attn_q.weight"), 2 * q_dim, dim)?;
            wk = ld.matrix(&nm("attn_k.weight"), kv_dim, dim)?;
            wv = ld.matrix(&nm("attn_v.weight"), kv_dim, dim)?;
        } else if g.tensor(&nm("attn_qkv.weight")).is_some() {
            let qkv = ld.matrix(&nm("attn_qkv.weight"), q_dim + 2 * kv_dim, dim)?;
            wq = qkv.rows(0..q_dim);
            wk = qkv.rows(q_dim..q_dim + kv_dim);
            wv = qkv.rows(q_dim + kv_dim..q_dim + 2 * kv_dim);
            if let Some(b) = ld.optional_vector(&nm("attn_qkv.bias"), q_dim + 2 * kv_dim)? {
                let (bq, bkv) = b.split_at(q_dim);
                let (bk, bv) = bkv.split_at(kv_dim);
                bias = [bq, bk, bv].map(|b| Some(b.to_vec()));
            }
        } else {
            wq = ld.matrix(&nm("attn_q.weight"), q_dim, dim)?;
            wk = ld.matrix(&nm("attn_k.weight"), kv_dim, dim)?;
            wv = ld.matrix(&nm("attn_v.weight"), kv_dim, dim)?;
        }
        if bias[0].is_none() {
            bias = [
                ld.optional_vector(&nm("attn_q.bias"), q_dim)?,
                ld.optional_vector(&nm("attn_k.bias"), kv_dim)?,
                ld.optional_vector(&nm("attn_v.bias"), kv_dim)?,
            ];
        }
        if cfg.arch == Arch::Qwen2 && bias.iter().any(Option::is_none) {
            bail!(
                Status::BadFormat,
                "qwen2 layer {} lacks a bias of q, k or v",
                l
            );
        }
        let qk_norm = if cfg.qk_norm {
            Some([
                ld.vector(&nm("attn_q_norm.weight"), hd)?,
                ld.vector(&nm("attn_k_norm.weight"), hd)?,
            ])
        } else {
            None
        };
        Ok(Attention {
            wq,
            wk,
            wv,
            rope: cfg.has_rope(l),
            gated: cfg.attn_gate,
            bias,
            qk_norm,
            wo: ld.matrix(&nm("attn_output.weight"), dim, q_dim)?,
        })
    }
}

impl<'a> Model<'a> {
    /// Builds a model over a file parsed with [`Gguf::parse_for_model`]. `context` is the KV
    /// cache length (0: the model's own, capped at 4096).
    pub fn load(g: &Gguf<'a>, context: usize) -> Result<Model<'a>> {
        Model::load_with(
            g,
            LoadOptions {
                context,
                quantize: None,
            },
        )
    }

    /// Builds a model over a file parsed with [`Gguf::parse_for_model`], checking every
    /// tensor's shape against the architecture's (the error names the tensor).
    pub fn load_with(g: &Gguf<'a>, opts: LoadOptions) -> Result<Model<'a>> {
        if !g.weights_grouped() {
            bail!(
                Status::InvalidArgument,
                "a model needs its file parsed with Gguf::parse_for_model (legacy blocks grouped)"
            );
        }
        let cfg = Config::from_gguf(g)?;
        let context = match opts.context {
            0 => cfg.train_context.min(4096),
            n => n,
        };
        if context > (1 << 20) {
            bail!(Status::InvalidArgument, "context {} is too large", context);
        }
        let mut ld = Loader::new(g, opts.quantize)?;
        let (dim, q_dim, kv_dim, ffn, _) = cfg.widths();
        let token_embd = ld.matrix("token_embd.weight", cfg.vocab, dim)?;
        let output = match g.tensor("output.weight") {
            Some(_) => ld.matrix("output.weight", cfg.vocab, dim)?,
            None => token_embd,
        };
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(cfg.n_layers)
            .map_err(|_| err!(Status::OutOfMemory, "layers"))?;
        for l in 0..cfg.n_layers {
            let nm = |suffix: &str| alloc::format!("blk.{l}.{suffix}");
            // A norm of the residual stream the architecture has (`on`), or none.
            let norm = |ld: &mut Loader<'_, 'a>, on: bool, name: &str| match on {
                true => ld.vector(&nm(name), dim).map(Some),
                false => Ok(None),
            };
            let attn_norm = norm(&mut ld, cfg.pre_norms, "attn_norm.weight")?;
            let mixer = match cfg.layer_kind(l) {
                LayerKind::Conv => Mixer::Conv(ShortConv {
                    in_proj: ld.matrix(&nm("shortconv.in_proj.weight"), 3 * dim, dim)?,
                    kernel: values(
                        ld.tensor(&nm("shortconv.conv.weight"))?,
                        &[cfg.conv_taps as u64, dim as u64],
                    )?,
                    out_proj: ld.matrix(&nm("shortconv.out_proj.weight"), dim, dim)?,
                }),
                LayerKind::DeltaNet => Mixer::DeltaNet(DeltaNet::load(&mut ld, &cfg, l)?),
                LayerKind::Global | LayerKind::Local => {
                    Mixer::Attention(Attention::load(&mut ld, &cfg, l)?)
                }
            };
            let post_attn_norm = norm(&mut ld, cfg.post_norms, "post_attention_norm.weight")?;
            // (Qwen 3.5's norm before the feed-forward has the name of a post-attention norm)
            let ffn_norm = match cfg.arch {
                Arch::Qwen35 => norm(&mut ld, true, "post_attention_norm.weight")?,
                _ => norm(&mut ld, cfg.pre_norms, "ffn_norm.weight")?,
            };
            let (w_gate, w_up);
            if cfg.fused_gate_up {
                // gate rows, then up rows (ggml's swiglu takes the first half as the gate)
                let gate_up = ld.matrix(&nm("ffn_up.weight"), 2 * ffn, dim)?;
                w_gate = gate_up.rows(0..ffn);
                w_up = gate_up.rows(ffn..2 * ffn);
            } else {
                w_gate = ld.matrix(&nm("ffn_gate.weight"), ffn, dim)?;
                w_up = ld.matrix(&nm("ffn_up.weight"), ffn, dim)?;
            }
            let w_down = ld.matrix(&nm("ffn_down.weight"), dim, ffn)?;
            let post_ffn_norm = norm(&mut ld, cfg.post_norms, "post_ffw_norm.weight")?;
            layers.push(Layer {
                kind: cfg.layer_kind(l),
                attn_norm,
                mixer,
                post_attn_norm,
                ffn_norm,
                w_gate,
                w_up,
                w_down,
                post_ffn_norm,
            });
        }
        // (llama.cpp's converter names LFM2's final norm after the embeddings)
        let output_norm = match cfg.arch {
            Arch::Lfm2 => ld.vector("token_embd_norm.weight", dim)?,
            _ => ld.vector("output_norm.weight", dim)?,
        };
        let pairs = cfg.rope_dims / 2;
        let mut factors = ld.rope_factors("rope_freqs.weight", pairs)?;
        if cfg.arch == Arch::Phi3 {
            // LongRoPE (Phi-3.5, Phi-4-mini): long factors for a context past the original
            // one, short ones otherwise, chosen once for the whole context, as llama.cpp does
            let long = ld.rope_factors("rope_factors_long.weight", pairs)?;
            let short = ld.rope_factors("rope_factors_short.weight", pairs)?;
            let chosen = match context > cfg.rope_original_context {
                true => long,
                false => short,
            };
            factors = factors.or(chosen);
        }
        ld.skip_blocks_from(cfg.n_layers);
        ld.check_all_used()?;
        let rope = RopeTable::new(
            &cfg,
            context,
            factors.as_deref(),
            cfg.rope_base,
            cfg.rope_factor,
        )?;
        // llama.cpp: sliding-window layers have their own base (and Gemma 3's no scaling).
        let rope_local = match cfg.sliding_window {
            0 => None,
            _ => Some(RopeTable::new(
                &cfg,
                context,
                factors.as_deref(),
                cfg.rope_base_local,
                cfg.rope_factor_local,
            )?),
        };
        let mut cache = Vec::new();
        cache
            .try_reserve_exact(cfg.n_layers)
            .map_err(|_| err!(Status::OutOfMemory, "layers"))?;
        // elements of keys (and values), of ring, of state
        let (mut halves, mut ring_floats, mut state_floats) = (0usize, 0usize, 0usize);
        // the largest attention layer's elements of keys (`Scratch::staged` holds two)
        let mut staged_halves = 0usize;
        let overflow = || err!(Status::OutOfMemory, "KV cache size overflows");
        for l in 0..cfg.n_layers {
            let slots = match cfg.span(l) {
                usize::MAX => context,
                span => context.min(span + MAX_BATCH - 1),
            };
            let add = |total: &mut usize, f: Option<usize>| {
                let at = *total;
                *total = f.and_then(|f| at.checked_add(f)).ok_or_else(overflow)?;
                Ok::<usize, crate::error::Error>(at)
            };
            let (at, state_at) = match (cfg.layer_kind(l), cfg.delta_net) {
                (LayerKind::Conv, _) => (add(&mut ring_floats, slots.checked_mul(dim))?, 0),
                (LayerKind::DeltaNet, Some(dn)) => (
                    add(&mut ring_floats, slots.checked_mul(dn.conv_dim()))?,
                    add(&mut state_floats, Some(dn.state_floats()))?,
                ),
                _ => {
                    let at = add(&mut halves, slots.checked_mul(kv_dim))?;
                    staged_halves = staged_halves.max(slots * kv_dim);
                    (at, 0)
                }
            };
            cache.push(LayerCache {
                at,
                state_at,
                slots,
            });
        }
        let (keys, values) = (try_vec(halves)?, try_vec(halves)?);
        let ring = try_vec(ring_floats)?;
        let state = try_vec(state_floats)?;
        let mut ids = Vec::new();
        ids.try_reserve_exact(context)
            .map_err(|_| err!(Status::OutOfMemory, "cannot allocate {} ids", context))?;
        let b = MAX_BATCH;
        let score_rows = b * cfg.n_heads;
        let has = |kind: LayerKind| cfg.mixers.contains(&kind);
        let (cd, vd, vh) = cfg
            .delta_net
            .map_or((0, 0, 0), |d| (d.conv_dim(), d.value_dim(), d.v_heads));
        let scratch = Scratch {
            x: try_vec(b * dim)?,
            xb: try_vec(b * dim)?,
            q: try_vec(b * q_dim * if cfg.attn_gate { 2 } else { 1 })?,
            k: try_vec(b * kv_dim)?,
            v: try_vec(b * kv_dim)?,
            att_out: try_vec(b * q_dim.max(vd))?,
            gate: try_vec(b * ffn)?,
            up: try_vec(b * ffn)?,
            conv: try_vec(match (has(LayerKind::Conv), has(LayerKind::DeltaNet)) {
                (true, _) => b * 3 * dim,
                (_, true) => b * cd,
                _ => 0,
            })?,
            gates: try_vec(match cfg.attn_gate || has(LayerKind::DeltaNet) {
                true => b * q_dim.max(vd),
                false => 0,
            })?,
            beta: try_vec(b * vh)?,
            decay: try_vec(b * vh)?,
            scores: try_vec(score_rows * (context + SCORE_ROW_PAD))?,
            staged: try_vec(2 * staged_halves)?,
            acts: [
                ActivationBuf::with_capacity(dim.max(q_dim).max(ffn).max(vd), b)?,
                ActivationBuf::with_capacity(dim.max(q_dim).max(ffn).max(vd), b)?,
            ],
        };
        let logits = try_vec(cfg.vocab)?;
        let gate_activation = match cfg.activation {
            Activation::Silu => GateActivation::Silu,
            Activation::GeluTanh => GateActivation::Gelu(ops::GeluTable::new()?),
        };
        Ok(Model {
            cfg,
            context,
            token_embd,
            layers,
            output_norm,
            output,
            rope,
            rope_local,
            gate_activation,
            _owned: ld.owned,
            quantized_bytes: ld.quantized_bytes,
            keys,
            values,
            ring,
            state,
            cache,
            written: 0,
            ids,
            pos: 0,
            scratch,
            logits,
        })
    }

    /// Bytes of the K and V caches together.
    pub fn kv_cache_bytes(&self) -> usize {
        (self.keys.len() + self.values.len()) * size_of::<KvHalf>()
            + (self.ring.len() + self.state.len()) * size_of::<f32>()
    }

    /// Bytes of weights one decode step reads: every layer's matrices and norms, the output
    /// norm and matrix, and one row of the token embedding (the bandwidth ceiling's numerator).
    pub fn weight_bytes_per_token(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                let (mixer, vectors) = l.mixer.weights();
                mixer
                    .into_iter()
                    .chain([&l.w_gate, &l.w_up, &l.w_down])
                    .map(|m| m.data.len())
                    .sum::<usize>()
                    + vectors
                    + [
                        &l.attn_norm,
                        &l.ffn_norm,
                        &l.post_attn_norm,
                        &l.post_ffn_norm,
                    ]
                    .iter()
                    .map(|n| n.as_ref().map_or(0, |n| n.len() * 4))
                    .sum::<usize>()
            })
            .sum();
        layers + self.output.data.len() + self.output_norm.len() * 4 + self.token_embd.row_bytes
    }

    /// Forgets the cache.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.written = 0;
        self.ids.clear();
    }

    /// Keeps only the first `n` cached tokens. When a sliding-window layer's ring no longer
    /// holds the window before position `n` (it has moved on by more than a batch), or a
    /// delta-net layer's state has moved past `n` (it cannot go back), the cache is rebuilt by
    /// running the first `n` ids again.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if n > self.pos {
            bail!(
                Status::InvalidArgument,
                "cannot truncate to {} tokens: the cache holds {}",
                n,
                self.pos
            );
        }
        let lost = self.cache.iter().enumerate().any(|(l, c)| {
            // Position n reads positions n + 1 - span ..= n (a global layer keeps them all).
            let span = self.cfg.span(l);
            let recurrent = self.cfg.layer_kind(l) == LayerKind::DeltaNet;
            (recurrent && n < self.written)
                || span != usize::MAX && (n + 1).saturating_sub(span) + c.slots < self.written
        });
        self.pos = n;
        self.ids.truncate(n);
        if lost {
            let ids = core::mem::take(&mut self.ids);
            self.pos = 0;
            self.written = 0;
            let r = self.run(&ids, false, None);
            self.ids = ids;
            self.ids.truncate(self.pos); // all of them, unless the run failed part way
            r?;
        }
        Ok(())
    }

    /// Runs `ids` at positions `pos..pos + ids.len()`. After it, `logits` holds the last token's
    /// logits; with `all_logits`, `on_logits(i, logits)` is called for every position `i`.
    pub fn forward(&mut self, ids: &[u32], on_logits: OnLogits<'_>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        if self.pos + ids.len() > self.context {
            bail!(
                Status::ContextFull,
                "{} tokens do not fit: the cache holds {} of {}",
                ids.len(),
                self.pos,
                self.context
            );
        }
        for &id in ids {
            if id as usize >= self.cfg.vocab {
                bail!(
                    Status::InvalidArgument,
                    "token id {} is outside the vocabulary of {}",
                    id,
                    self.cfg.vocab
                );
            }
        }
        if self.cfg.delta_net.is_some() && self.written != self.pos {
            // a batch failed part way through the delta nets' states: rebuild them first
            self.truncate(self.pos)?;
        }
        self.run(ids, true, on_logits)
    }

    /// `forward` after its checks; `record`: append each batch's ids to `self.ids` once it has
    /// run (within the capacity reserved at load, `context`).
    fn run(&mut self, ids: &[u32], record: bool, mut on_logits: OnLogits<'_>) -> Result<()> {
        pool::check()?;
        let mut done = 0;
        while done < ids.len() {
            let n = (ids.len() - done).min(MAX_BATCH);
            let batch = &ids[done..done + n];
            let want_all = on_logits.is_some();
            // Only the last batch's last logits outlive the call (unless all are wanted).
            let want_last = done + n == ids.len();
            self.forward_batch(batch, want_all, want_last, &mut |i, l| {
                if let Some(f) = on_logits.as_mut() {
                    f(done + i, l)
                }
            })?;
            // A helper lost during the batch leaves it half computed: report that, not logits.
            pool::check()?;
            if record {
                self.ids.extend_from_slice(batch);
            }
            done += n;
        }
        Ok(())
    }

    /// One batch (at most `MAX_BATCH` ids). Logits: of every position, each passed to
    /// `on_logits`, with `all_logits`; else of the last position into `logits` with
    /// `last_logits`; else none (a batch before the last: its logits would be overwritten).
    fn forward_batch(
        &mut self,
        ids: &[u32],
        all_logits: bool,
        last_logits: bool,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<()> {
        let n = ids.len();
        let cfg = self.cfg.clone();
        let (dim, _, _, ffn, _) = cfg.widths();
        let pos0 = self.pos;
        for (t, &id) in ids.iter().enumerate() {
            let row = self.token_embd.row(id as usize);
            let x = &mut self.scratch.x[t * dim..(t + 1) * dim];
            quant::dequantize_row(self.token_embd.ty, row, x)?;
            if cfg.embed_scale != 1.0 {
                x.iter_mut().for_each(|v| *v *= cfg.embed_scale);
            }
        }
        // Each block's end leaves the next one's input in xb (`add_block_output`).
        let first_norm = self.layers.first().and_then(|l| l.attn_norm.as_deref());
        self.scratch.norm_rows(0..n, dim, first_norm, cfg.rms_eps);
        for l in 0..cfg.n_layers {
            match self.layers[l].kind {
                LayerKind::Conv => self.convolve(l, n, pos0)?,
                LayerKind::DeltaNet => self.delta_net(l, n, pos0)?,
                LayerKind::Global | LayerKind::Local => self.attend(l, n, pos0)?,
            }
            let layer = &self.layers[l];
            let s = &mut self.scratch;
            let post_norm = layer.post_attn_norm.as_deref();
            let wo = layer.mixer.output();
            let ffn_norm = layer.ffn_norm.as_deref();
            s.add_block_output(wo, BlockOutput::Attention, n, post_norm, ffn_norm, &cfg)?;
            matmul_group(
                &mut [
                    (&layer.w_gate, &mut s.gate[..n * ffn]),
                    (&layer.w_up, &mut s.up[..n * ffn]),
                ],
                &s.xb[..n * dim],
                n,
                &mut s.acts,
            )?;
            s.gate_rows(n, ffn, &self.gate_activation);
            let post_norm = layer.post_ffn_norm.as_deref();
            // the next layer's attention norm, after the last the output norm
            let next_norm = match self.layers.get(l + 1) {
                Some(next) => next.attn_norm.as_deref(),
                None => Some(&self.output_norm[..]),
            };
            let w_down = &layer.w_down;
            s.add_block_output(
                w_down,
                BlockOutput::FeedForward,
                n,
                post_norm,
                next_norm,
                &cfg,
            )?;
        }
        self.pos += n;
        if !all_logits && !last_logits {
            return Ok(());
        }
        // Final norm and the output projection: every position when asked, else the last.
        // (xb holds every position's output norm: the last block's end)
        let first = if all_logits { 0 } else { n - 1 };
        let s = &mut self.scratch;
        let vocab = cfg.vocab;
        for t in first..n {
            matmul_group(
                &mut [(&self.output, &mut self.logits[..vocab])],
                &s.xb[t * dim..(t + 1) * dim],
                1,
                &mut s.acts,
            )?;
            let logits = &mut self.logits[..vocab];
            if cfg.logit_scale != 1.0 {
                logits.iter_mut().for_each(|v| *v *= cfg.logit_scale);
            }
            if cfg.final_softcap > 0.0 {
                ops::softcap_in_place(logits, cfg.final_softcap);
            }
            if all_logits {
                on_logits(t, &self.logits);
            }
        }
        Ok(())
    }

    /// Layer `l`'s attention for the batch's `n` tokens at `pos0..`: q, k, v of `xb`, their
    /// biases, head norms and RoPE; k and v into the cache; the heads' outputs into `att_out`.
    fn attend(&mut self, l: usize, n: usize, pos0: usize) -> Result<()> {
        let cfg = &self.cfg;
        let (dim, q_dim, kv_dim, _, hd) = cfg.widths();
        let layer = &self.layers[l];
        let Mixer::Attention(a) = &layer.mixer else {
            unreachable!("layer {l} is not an attention layer")
        };
        let s = &mut self.scratch;
        matmul_group(
            &mut [
                (&a.wq, &mut s.q[..n * a.wq.rows]),
                (&a.wk, &mut s.k[..n * kv_dim]),
                (&a.wv, &mut s.v[..n * kv_dim]),
            ],
            &s.xb[..n * dim],
            n,
            &mut s.acts,
        )?;
        if a.gated {
            // (n, n_heads, 2, hd) -> queries (n, q_dim) in place, gates (n, q_dim) apart; each
            // query moves down (or stays), over nothing still to be read
            for (t, h) in (0..n).flat_map(|t| (0..cfg.n_heads).map(move |h| (t, h))) {
                let (from, to) = ((2 * (t * cfg.n_heads + h)) * hd, t * q_dim + h * hd);
                s.gates[to..to + hd].copy_from_slice(&s.q[from + hd..from + 2 * hd]);
                s.q.copy_within(from..from + hd, to);
            }
        }
        let c = &self.cache[l];
        // From here the cache rings change: a batch that fails part way leaves `written` past
        // `pos`, and `truncate` rebuilds what it must.
        self.written = self.written.max(pos0 + n);
        let mut overflow = [None; MAX_BATCH];
        let args = QkvArgs {
            q: Disjoint::new(&mut s.q[..n * q_dim]),
            k: Disjoint::new(&mut s.k[..n * kv_dim]),
            v: Disjoint::new(&mut s.v[..n * kv_dim]),
            q_dim,
            kv_dim,
            hd,
            bias: &a.bias,
            qk_norm: a.qk_norm.as_ref(),
            rope: a.rope.then_some(match (layer.kind, &self.rope_local) {
                (LayerKind::Local, Some(r)) => r,
                _ => &self.rope,
            }),
            eps: cfg.rms_eps,
            pos0,
            keys: Disjoint::new(&mut self.keys[..]),
            values: Disjoint::new(&mut self.values[..]),
            at: c.at,
            slots: c.slots,
            overflow: Disjoint::new(&mut overflow[..n]),
        };
        per_token(&args, n, qkv_kernel);
        if let Some((t, (k, v))) = (0..n).find_map(|t| Some((t, overflow[t]?))) {
            bail!(
                Status::BadFormat,
                "layer {}: a key or value of position {} is {} or {}, outside the f16 range of \
                 the KV cache (|x| < 65520, as llama.cpp's cache)",
                l,
                pos0 + t,
                Shortest::from(k),
                Shortest::from(v)
            );
        }
        let gated = a.gated;
        self.attention(l, n, pos0);
        if gated {
            let s = &mut self.scratch;
            for (o, &g) in s.att_out[..n * q_dim].iter_mut().zip(&s.gates) {
                *o *= ops::sigmoid(g);
            }
        }
        Ok(())
    }

    /// Layer `l`'s gated delta net (Qwen 3.5) for the batch's `n` tokens at `pos0..`: `q | k
    /// | v` of each into the cache ring, their convolution, the recurrent state through every
    /// token (the pool takes the value heads), and each head's normed, gated output into
    /// `att_out` `(n, vd)`. The convolution and the gates run on this thread, each sum in
    /// ggml's order; one thread carries a head through all the tokens, so the state's bits do
    /// not depend on the thread count.
    fn delta_net(&mut self, l: usize, n: usize, pos0: usize) -> Result<()> {
        let cfg = &self.cfg;
        let dn = cfg.delta_net.expect("a delta-net layer has its shape");
        let (dim, taps, eps) = (cfg.dim, cfg.conv_taps, cfg.rms_eps);
        let (cd, kd, vd, vh, hd) = (
            dn.conv_dim(),
            dn.key_dim(),
            dn.value_dim(),
            dn.v_heads,
            dn.head_dim,
        );
        let Mixer::DeltaNet(d) = &self.layers[l].mixer else {
            unreachable!("layer {l} is not a delta-net layer")
        };
        let s = &mut self.scratch;
        let xb = &s.xb[..n * dim];
        let (qkv, z) = (&mut s.conv[..n * cd], &mut s.gates[..n * vd]);
        matmul_group(&mut [(&d.qkv, qkv), (&d.gate, z)], xb, n, &mut s.acts)?;
        let (beta, decay) = (&mut s.beta[..n * vh], &mut s.decay[..n * vh]);
        matmul_group(
            &mut [(&d.beta, beta), (&d.alpha, decay)],
            xb,
            n,
            &mut s.acts,
        )?;
        // From here the state moves on: a batch that fails part way leaves `written` past
        // `pos`, and the next `forward` rebuilds.
        self.written = self.written.max(pos0 + n);
        let c = &self.cache[l];
        let state = &mut self.state[c.state_at..][..dn.state_floats()];
        if pos0 == 0 {
            state.fill(0.0);
        }
        let row = |p: usize| c.at + p % c.slots * cd;
        for (t, m) in s.conv[..n * cd].chunks_exact(cd).enumerate() {
            self.ring[row(pos0 + t)..][..cd].copy_from_slice(m);
        }
        let ring = &self.ring;
        for (t, y) in s.conv[..n * cd].chunks_exact_mut(cd).enumerate() {
            causal_conv(y, &d.kernel, taps, pos0 + t, |p| &ring[row(p)..][..cd]);
            math::silu_in_place(y);
            for head in y[..2 * kd].chunks_exact_mut(hd) {
                ops::l2_normalize(head, eps);
            }
        }
        // beta = sigmoid(beta), decay = exp(softplus(alpha + dt_bias) * a)
        let gates = s.beta[..n * vh].iter_mut().zip(&mut s.decay[..n * vh]);
        for (i, (b, g)) in gates.enumerate() {
            let h = i % vh;
            *b = ops::sigmoid(*b);
            *g = math::expf(ops::softplus(*g + d.dt_bias[h]) * d.a[h]);
        }
        let args = DeltaNetArgs {
            qkv: &s.conv[..n * cd],
            beta: &s.beta[..n * vh],
            decay: &s.decay[..n * vh],
            state: Disjoint::new(state),
            out: Disjoint::new(&mut s.att_out[..n * vd]),
            shape: dn,
            n,
        };
        pool::par_for(&args, vh, 1, delta_net_kernel);
        let heads = s.att_out[..n * vd].chunks_exact_mut(hd);
        for (o, z) in heads.zip(s.gates[..n * vd].chunks_exact_mut(hd)) {
            rmsnorm_in_place(o, &d.norm, eps);
            math::silu_in_place(z);
            for (o, &z) in o.iter_mut().zip(z.iter()) {
                *o *= z;
            }
        }
        Ok(())
    }

    /// Layer `l`'s short convolution (LFM2) for the batch's `n` tokens at `pos0..`: `b * u`
    /// of each into the cache ring, then `y = c * conv(b * u)` into `att_out`. Cheap next to
    /// the projections: on this thread, each sum in ggml's order (`ggml_ssm_conv`: oldest
    /// position first; the state before position 0 is zeros, which add nothing).
    fn convolve(&mut self, l: usize, n: usize, pos0: usize) -> Result<()> {
        let (dim, taps) = (self.cfg.dim, self.cfg.conv_taps);
        let Mixer::Conv(conv) = &self.layers[l].mixer else {
            unreachable!("layer {l} is not a convolution layer")
        };
        let s = &mut self.scratch;
        let bcu = &mut s.conv[..n * 3 * dim];
        matmul_group(
            &mut [(&conv.in_proj, bcu)],
            &s.xb[..n * dim],
            n,
            &mut s.acts,
        )?;
        let c = &self.cache[l];
        let row = |p: usize| c.at + p % c.slots * dim;
        for (t, bcu) in s.conv[..n * 3 * dim].chunks_exact(3 * dim).enumerate() {
            let bu = &mut self.ring[row(pos0 + t)..][..dim];
            for ((o, &b), &u) in bu.iter_mut().zip(&bcu[..dim]).zip(&bcu[2 * dim..]) {
                *o = b * u;
            }
        }
        self.written = self.written.max(pos0 + n);
        let ring = &self.ring;
        for (t, bcu) in s.conv[..n * 3 * dim].chunks_exact(3 * dim).enumerate() {
            let y = &mut s.att_out[t * dim..][..dim];
            causal_conv(y, &conv.kernel, taps, pos0 + t, |p| &ring[row(p)..][..dim]);
            for (y, &gate) in y.iter_mut().zip(&bcu[dim..2 * dim]) {
                *y *= gate;
            }
        }
        Ok(())
    }

    /// Attention for `n` new tokens at `pos0..pos0+n` in layer `l`, split across the pool by
    /// queries (`AttentionArgs::chunk`), in tiles of `KvElem::QUERIES` of a KV head. A batch
    /// of fewer than [`STAGE_QUERIES`] queries per KV head (decode) reads the f16 cache itself
    /// (half the bytes of f32), the queries times `KvHalf::UNSCALE` (unless one is 2^16 or
    /// more, which that would make infinite); a larger batch reads the cache's rows converted
    /// to f32 once (`Scratch::staged`). The same bits either way.
    fn attention(&mut self, l: usize, n: usize, pos0: usize) {
        let Model {
            cfg,
            cache,
            keys,
            values,
            scratch: s,
            context,
            ..
        } = self;
        let ring = &cache[l];
        let halves = ring.slots * cfg.kv_dim();
        let (keys, values) = (&keys[ring.at..][..halves], &values[ring.at..][..halves]);
        let head_stride = ring.slots * cfg.head_dim;
        let q = &mut s.q[..n * cfg.q_dim()];
        let staged = !reads_f16(n * cfg.n_heads / cfg.n_kv_heads, q);
        if !staged {
            q.iter_mut().for_each(|x| *x *= KvHalf::UNSCALE);
        }
        let kv = match staged {
            false => KvRows::Half { keys, values },
            true => {
                let (k32, v32) = s.staged.split_at_mut(halves);
                let stage = StageArgs {
                    from: [keys, values],
                    to: [Disjoint::new(k32), Disjoint::new(&mut v32[..halves])],
                    head_stride,
                    // the positions written so far (all slots once a ring has gone round)
                    live: ring.slots.min(pos0 + n) * cfg.head_dim,
                };
                pool::par_for(&stage, 2 * cfg.n_kv_heads, 1, stage_kernel);
                let (keys, values) = s.staged.split_at(halves);
                KvRows::F32 {
                    keys,
                    values: &values[..halves],
                }
            }
        };
        let score_stride = *context + SCORE_ROW_PAD;
        let args = AttentionArgs {
            q: &s.q[..n * cfg.q_dim()],
            out: Disjoint::new(&mut s.att_out[..n * cfg.q_dim()]),
            scores: Disjoint::new(&mut s.scores[..n * cfg.n_heads * score_stride]),
            kv,
            slots: ring.slots,
            head_stride,
            pos_stride: cfg.head_dim,
            n_heads: cfg.n_heads,
            group: cfg.n_heads / cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            q_dim: cfg.q_dim(),
            score_stride,
            n,
            pos0,
            scale: cfg.attn_scale,
            softcap: cfg.attn_softcap,
            window: cfg.span(l),
            bidirectional: false,
        };
        pool::par_for(&args, args.items(), args.chunk(), attention_kernel);
    }
}

/// Queries per KV head from which a batch's attention reads the cache converted to f32 once
/// (`Model::attention`) instead of converting each f16 in each tile of queries
/// (`KvElem::QUERIES`).
const STAGE_QUERIES: usize = 4 * <f32 as KvElem>::QUERIES;

/// Whether a batch's attention reads the f16 cache itself (`Model::attention`): fewer than
/// [`STAGE_QUERIES`] queries per KV head, each query value below `KvHalf::QUERY_LIMIT` (NaN
/// is NaN either way).
fn reads_f16(queries_per_kv_head: usize, q: &[f32]) -> bool {
    queries_per_kv_head < STAGE_QUERIES && !q.iter().any(|x| x.abs() >= KvHalf::QUERY_LIMIT)
}

/// A layer's f16 keys and values into f32 (`Model::attention`): item `i` is head `i / 2`'s
/// keys (`i` even) or values, its first `live` elements.
struct StageArgs<'a> {
    from: [&'a [KvHalf]; 2],
    /// (n_kv_heads, head_stride) each: an item owns its head's first `live` elements.
    to: [Disjoint<'a, f32>; 2],
    head_stride: usize,
    live: usize,
}

fn stage_kernel(a: &StageArgs<'_>, items: Range<usize>) {
    for i in items {
        let at = i / 2 * a.head_stride;
        // SAFETY: these elements of this half belong to item i alone.
        let to = unsafe { a.to[i % 2].slice(at..at + a.live) };
        ops::halves_to_f32(to, &a.from[i % 2][at..at + a.live]);
    }
}

/// `y[ch] = sum_k kernel[ch * taps + k] * x(pos - taps + 1 + k)[ch]`: a causal convolution
/// of the rows `x(p)` of a cache ring (nothing before position 0), summed oldest first, as
/// `ggml_ssm_conv` sums (LFM2's and Qwen 3.5's).
fn causal_conv<'x>(
    y: &mut [f32],
    kernel: &[f32],
    taps: usize,
    pos: usize,
    x: impl Fn(usize) -> &'x [f32],
) {
    y.fill(0.0);
    for k in 0..taps {
        // position pos - (taps - 1) + k, if it is not before the first
        let Some(p) = (pos + k).checked_sub(taps - 1) else {
            continue;
        };
        for (ch, (y, &v)) in y.iter_mut().zip(x(p)).enumerate() {
            *y += v * kernel[ch * taps + k];
        }
    }
}

struct DeltaNetArgs<'a> {
    /// (n, cd): each token's `q | k | v` after the convolution, q and k heads of unit length.
    qkv: &'a [f32],
    /// (n, vh) each: the update's strength, and the decay `exp(g)`.
    beta: &'a [f32],
    decay: &'a [f32],
    /// (vh, hd, hd): item `h` owns head `h`'s state.
    state: Disjoint<'a, f32>,
    /// (n, vd): item `h` owns `out[t][h * hd..(h + 1) * hd]` of every token t.
    out: Disjoint<'a, f32>,
    shape: config::DeltaNetShape,
    n: usize,
}

/// Value heads `heads` through every token, in order. Row `j` of a head's state holds value
/// `j`'s weights of the keys, so each step is, row by row (the same operations, element by
/// element, as ggml's `gated_delta_net`): decay the row, `delta = (v_j - row · k) * beta`,
/// `row += delta k`, `o_j = row · q / sqrt(hd)`.
fn delta_net_kernel(a: &DeltaNetArgs<'_>, heads: Range<usize>) {
    let dn = a.shape;
    let (hd, kd, vd, vh, cd) = (
        dn.head_dim,
        dn.key_dim(),
        dn.value_dim(),
        dn.v_heads,
        dn.conv_dim(),
    );
    let scale = 1.0 / ops::sqrtf(hd as f32);
    for h in heads {
        let kh = h % dn.k_heads;
        // SAFETY: head h's state, and its slice of each token's output, belong to this item.
        let state = unsafe { a.state.slice(h * hd * hd..(h + 1) * hd * hd) };
        for t in 0..a.n {
            let m = &a.qkv[t * cd..(t + 1) * cd];
            let q = &m[kh * hd..(kh + 1) * hd];
            let k = &m[kd + kh * hd..kd + (kh + 1) * hd];
            let v = &m[2 * kd + h * hd..2 * kd + (h + 1) * hd];
            let (beta, decay) = (a.beta[t * vh + h], a.decay[t * vh + h]);
            let at = t * vd + h * hd;
            // SAFETY: as above.
            let out = unsafe { a.out.slice(at..at + hd) };
            for (j, row) in state.chunks_exact_mut(hd).enumerate() {
                row.iter_mut().for_each(|s| *s *= decay);
                let delta = (v[j] - ops::dot(row, k)) * beta;
                ops::axpy(row, delta, k);
                out[j] = ops::dot(row, q) * scale;
            }
        }
    }
}

/// A layer's keys and values as attention reads them: head `h`'s key (and value) of position
/// `p` starts at `h * head_stride + (p % slots) * pos_stride` (`AttentionArgs`).
#[derive(Clone, Copy)]
enum KvRows<'a> {
    /// A sentence encoder's batch, or the decoder's cache staged in f32.
    F32 { keys: &'a [f32], values: &'a [f32] },
    /// The decoder's f16 cache itself (the queries times `KvHalf::UNSCALE`).
    Half {
        keys: &'a [KvHalf],
        values: &'a [KvHalf],
    },
}

struct AttentionArgs<'a> {
    /// (n, q_dim)
    q: &'a [f32],
    /// (n, q_dim): an item owns `out[t][h * head_dim..(h + 1) * head_dim]` of each of its
    /// queries (head h of token t).
    out: Disjoint<'a, f32>,
    /// (n * n_heads, score_stride): an item owns row `t * n_heads + h` of each of its queries.
    scores: Disjoint<'a, f32>,
    /// This layer's keys and values. The decoder's cache rings are `(n_kv_heads, slots,
    /// head_dim)`; a sentence encoder's keys are its batch's `(n, q_dim)`.
    kv: KvRows<'a>,
    slots: usize,
    head_stride: usize,
    pos_stride: usize,
    n_heads: usize,
    group: usize,
    head_dim: usize,
    q_dim: usize,
    score_stride: usize,
    /// Tokens in the batch, at positions `pos0..pos0 + n`.
    n: usize,
    pos0: usize,
    scale: f32,
    /// Scores become `softcap * tanh(score / softcap)` (0: not).
    softcap: f32,
    /// Positions each query sees, itself included (`usize::MAX`: all).
    window: usize,
    /// Every query sees the whole batch (a sentence encoder's attention), not only the
    /// positions up to its own.
    bidirectional: bool,
}

impl AttentionArgs<'_> {
    /// Queries of one KV head: its `group` query heads of each of the `n` tokens, token by
    /// token (so their positions do not go down).
    fn queries_per_kv_head(&self) -> usize {
        self.n * self.group
    }

    /// Pool items: the queries, KV head by KV head (`queries_per_kv_head` each).
    fn items(&self) -> usize {
        self.n_heads / self.group * self.queries_per_kv_head()
    }

    /// Items per claim ([`pool::par_for`]'s chunk). Over the f16 cache (decode, small batches)
    /// one even share per thread: a thread's queries go in tiles of `KvElem::QUERIES` KV head
    /// by KV head, so two threads split SmolLM2's three KV heads (tiles of three queries) as
    /// 3 + 2 and 1 + 3 queries, Gemma 3's one KV head as 2 + 2, where whole tiles went 2 : 1
    /// and 3 : 1. SmolLM2-135M Q4_1, relaxed, two threads, interleaved: decode in wasmtime
    /// 165.8 -> 171.7 tok/s (medians of 3), in Chromium 175.0 -> 183.4 (medians of 4, every
    /// round higher); one thread and Gemma 3 270M (its matrices dominate) unchanged. Over f32
    /// rows (prefill, the encoder), guided claims of whole pairs of queries (tiles of two, but
    /// where a claim crosses a KV head with an odd count).
    fn chunk(&self) -> usize {
        match self.kv {
            KvRows::F32 { .. } => <f32 as KvElem>::QUERIES,
            KvRows::Half { .. } => pool::even_share(self.items(), 1),
        }
    }
}

fn attention_kernel(a: &AttentionArgs<'_>, items: Range<usize>) {
    match a.kv {
        KvRows::F32 { keys, values } => attend_items(a, keys, values, items),
        KvRows::Half { keys, values } => attend_items(a, keys, values, items),
    }
}

/// The queries `items` of `attention_kernel` over `keys` and `values` (`a.kv`'s): each KV
/// head's part in tiles of `K::QUERIES`, the last one shorter.
fn attend_items<K: KvElem>(a: &AttentionArgs<'_>, keys: &[K], values: &[K], items: Range<usize>) {
    let queries = a.queries_per_kv_head();
    let kv = [keys, values];
    let mut item = items.start;
    while item < items.end {
        let (kvh, mut first) = (item / queries, item % queries);
        let end = (items.end - kvh * queries).min(queries);
        while first < end {
            // One copy of `attend` per tile size and element type: 1, 2 and K::QUERIES.
            let tile = match (K::QUERIES, end - first) {
                (_, 1) => attend::<K, 1>(a, kv, kvh, first),
                (2, _) | (3, 2) => attend::<K, 2>(a, kv, kvh, first),
                (3, _) => attend::<K, 3>(a, kv, kvh, first),
                _ => unreachable!("a tile of {} queries", K::QUERIES),
            };
            first += tile;
        }
        item = kvh * queries + end;
    }
}

/// Queries `first..first + Q` of KV head `kvh` (query `j`: head `kvh · group + j % group` of
/// token `j / group`): scores, softmax, and the weighted sum of values, each key and value row
/// loaded once for all of them. Each score is one `dot` and each output element adds its values
/// in position order, however the queries and positions are grouped, so a query gets the same
/// bits in a tile of any size (batched prefill = one token at a time, any thread count). The
/// weights of the values are times `K::UNSCALE`, as the queries are. (Not inlined: one copy
/// per tile size and element type.)
#[inline(never)]
fn attend<K: KvElem, const Q: usize>(
    a: &AttentionArgs<'_>,
    kv: [&[K]; 2],
    kvh: usize,
    first: usize,
) -> usize {
    let hd = a.head_dim;
    // query i: head h[i] of token t[i]
    let t: [usize; Q] = core::array::from_fn(|i| (first + i) / a.group);
    let h: [usize; Q] = core::array::from_fn(|i| kvh * a.group + (first + i) % a.group);
    // Query i sees positions lo[i]..=pos[i] (a ring keeps window + batch - 1 positions, so all
    // of them are there); score j of query i belongs to position lo[i] + j.
    let pos: [usize; Q] = core::array::from_fn(|i| match a.bidirectional {
        true => a.pos0 + a.n - 1,
        false => a.pos0 + t[i],
    });
    let lo: [usize; Q] = core::array::from_fn(|i| (pos[i] + 1).saturating_sub(a.window));
    // Positions every query sees: lo[Q - 1]..=pos[0] (lo and pos do not shrink with i).
    let (shared_lo, shared_end) = (lo[Q - 1], pos[0] + 1);
    if Q > 1 && shared_lo >= shared_end {
        // a window shorter than the tile: nothing shared
        for i in 0..Q {
            attend::<K, 1>(a, kv, kvh, first + i);
        }
        return Q;
    }
    let q: [&[f32]; Q] = core::array::from_fn(|i| &a.q[t[i] * a.q_dim + h[i] * hd..][..hd]);
    // SAFETY: these score rows and these heads' slices of the tokens' outputs belong to this
    // item alone.
    let mut scores: [&mut [f32]; Q] = core::array::from_fn(|i| unsafe {
        let row = (t[i] * a.n_heads + h[i]) * a.score_stride;
        a.scores.slice(row..row + pos[i] + 1 - lo[i])
    });
    let mut out: [&mut [f32]; Q] = core::array::from_fn(|i| unsafe {
        let at = t[i] * a.q_dim + h[i] * hd;
        a.out.slice(at..at + hd)
    });
    let head = kvh * a.head_stride;
    let (keys, values) = (&kv[0][head..], &kv[1][head..]);
    let key = |p: usize| &keys[p % a.slots * a.pos_stride..][..hd];
    let value = |p: usize| &values[p % a.slots * a.pos_stride..][..hd];
    // Positions each query sees alone: before the shared ones (a window) and after them.
    let own = |i: usize| {
        [
            lo[i]..shared_lo.max(lo[i]),
            shared_end.min(pos[i] + 1)..pos[i] + 1,
        ]
    };
    // Scores: the shared positions four at a time for all queries, then the rest one by one.
    let shared4 = shared_lo + (shared_end - shared_lo) / 4 * 4;
    for p in (shared_lo..shared4).step_by(4) {
        ops::scaled_dot4_multi(
            q,
            [key(p), key(p + 1), key(p + 2), key(p + 3)],
            a.scale,
            scores.each_mut().map(|s| &mut **s),
            core::array::from_fn(|i| p - lo[i]),
        );
    }
    for i in 0..Q {
        for p in own(i).into_iter().flatten().chain(shared4..shared_end) {
            scores[i][p - lo[i]] = ops::dot(q[i], key(p)) * a.scale;
        }
        if a.softcap > 0.0 {
            ops::softcap_in_place(scores[i], a.softcap);
        }
        math::softmax_in_place(scores[i]);
        out[i].fill(0.0);
    }
    // out_i += p_i v_p in position order: each query's positions before the shared ones, the
    // shared ones (four at a time, all queries), then each query's after them.
    for i in 0..Q {
        let [before, _] = own(i);
        add_values(out[i], scores[i], lo[i], before, value);
    }
    for p in (shared_lo..shared4).step_by(4) {
        let w: [[f32; 4]; Q] =
            core::array::from_fn(|i| [0, 1, 2, 3].map(|j| scores[i][p + j - lo[i]] * K::UNSCALE));
        ops::axpy4_multi(
            out.each_mut().map(|o| &mut **o),
            w,
            [value(p), value(p + 1), value(p + 2), value(p + 3)],
        );
    }
    for i in 0..Q {
        let [_, after] = own(i);
        add_values(out[i], scores[i], lo[i], shared4..shared_end, value);
        add_values(out[i], scores[i], lo[i], after, value);
    }
    Q
}

/// `out += p v` over positions `run` in order (four at a time), `p` from `scores` (score `j`:
/// position `lo + j`) times `K::UNSCALE`, `v` from `value(position)`. (Not inlined: called
/// for short runs.)
#[inline(never)]
fn add_values<'v, K: KvElem + 'v>(
    out: &mut [f32],
    scores: &[f32],
    lo: usize,
    run: Range<usize>,
    value: impl Fn(usize) -> &'v [K],
) {
    let run4 = run.start + run.len() / 4 * 4;
    for p in (run.start..run4).step_by(4) {
        let w = [0, 1, 2, 3].map(|j| scores[p + j - lo] * K::UNSCALE);
        ops::axpy4(out, w, [value(p), value(p + 1), value(p + 2), value(p + 3)]);
    }
    for p in run4..run.end {
        ops::axpy(out, scores[p - lo] * K::UNSCALE, value(p));
    }
}

/// `y_i = W_i x` for a group of matrices sharing the input `x: (n, cols)`, outputs
/// `y_i: (n, rows_i)`, all in one pool job over the concatenated rows.
fn matmul_group(
    group: &mut [(&Matrix<'_>, &mut [f32])],
    x: &[f32],
    n: usize,
    acts: &mut [ActivationBuf; 2],
) -> Result<()> {
    let [acts, acts2] = acts;
    debug_assert!(group.len() <= 3 && n <= MAX_BATCH);
    let cols = group[0].0.cols;
    let x = &x[..n * cols];
    // Round the input once per activation kind; a second kind (mixed-type groups) goes to acts2.
    let first_ty = group[0].0.ty;
    let second_ty = group
        .iter()
        .map(|(m, _)| m.ty)
        .find(|&ty| quant::vec_dot_kind(ty) != quant::vec_dot_kind(first_ty));
    round_activations(first_ty, x, cols, acts)?;
    if let Some(ty) = second_ty {
        round_activations(ty, x, cols, acts2)?;
    }
    let mut jobs: [Option<MatJob<'_>>; 3] = [None, None, None];
    let mut total = 0;
    for (slot, (m, y)) in jobs.iter_mut().zip(group.iter_mut()) {
        let same = quant::vec_dot_kind(m.ty) == quant::vec_dot_kind(first_ty);
        *slot = Some(MatJob {
            ty: m.ty,
            w: m.data,
            rows: m.rows,
            cols: m.cols,
            acts: if same { &*acts } else { &*acts2 },
            y: Disjoint::new(y),
            first_row: total,
        });
        total += m.rows;
    }
    let args = GroupArgs { jobs, n };
    // Each chunk writes only its own rows of the outputs; inputs are read-only. Any chunking
    // gives the same bits: each output row is one dot product wherever it runs. A batch: the
    // pool hands out long runs of rows first (prefetchers follow them), then shorter ones.
    // Decode (one vector, the weights streaming from memory): one even share per thread, so
    // that each reads one long run (as four streams, `quant::for_rows`). Against the guided
    // runs (a quarter of the rows, then less and less, down to 16), SmolLM2-135M Q4_1, relaxed,
    // two threads, interleaved rounds: decode in wasmtime 139.9-144.1 -> 159.7-164.3 tok/s, in
    // Chromium 148 (medians of 7) 149.6 -> 166.0.
    let chunk = match n {
        1 => pool::even_share(total, ROWS_PER_CHUNK),
        _ => ROWS_PER_CHUNK,
    };
    pool::par_for(&args, total, chunk, matmul_kernel);
    Ok(())
}

/// `quant::quantize_activations` of a batch, tile by tile (four vectors) across the pool: on
/// the driver alone it was ~5 % of its time in a two-thread prefill (wasmtime, SmolLM2-135M
/// Q4_1, perf), all of it time the helpers waited. One vector (decode) is rounded in place.
fn round_activations(ty: GgmlType, x: &[f32], cols: usize, acts: &mut ActivationBuf) -> Result<()> {
    let batch = quant::start_batch(ty, x, cols, acts)?;
    let n = batch.n_vecs();
    match n <= quant::BatchFill::TILE {
        // SAFETY: one thread, all the vectors.
        true => unsafe { batch.fill(0..n) },
        // SAFETY: the pool's chunks are disjoint and start at multiples of TILE (its chunk).
        false => pool::par_for(&batch, n, quant::BatchFill::TILE, |b, vecs| unsafe {
            b.fill(vecs)
        }),
    }
    Ok(())
}

/// One matrix of a group: `y (n, rows) = W (rows, cols) @ x (n, cols)`, its rows numbered from
/// `first_row` in the group's concatenation.
struct MatJob<'a> {
    ty: GgmlType,
    w: &'a [u8],
    rows: usize,
    cols: usize,
    acts: &'a ActivationBuf,
    /// (n, rows)
    y: Disjoint<'a, f32>,
    first_row: usize,
}

struct GroupArgs<'a> {
    jobs: [Option<MatJob<'a>>; 3],
    n: usize,
}

fn matmul_kernel(a: &GroupArgs<'_>, chunk: Range<usize>) {
    for j in a.jobs.iter().flatten() {
        let lo = chunk.start.max(j.first_row);
        let hi = chunk.end.min(j.first_row + j.rows);
        if lo >= hi {
            continue;
        }
        let rows: Range<usize> = lo - j.first_row..hi - j.first_row;
        if a.n == 1 {
            // SAFETY: this chunk owns these rows of y.
            let y = unsafe { j.y.slice(rows.clone()) };
            quant::matvec(j.ty, j.w, j.cols, j.acts, rows, y);
        } else {
            // Straight into y's (n, rows) layout: this chunk owns columns `rows` of every
            // token's row.
            // SAFETY: y holds n rows of `j.rows` values, and those columns are this chunk's.
            unsafe {
                quant::matmul_strided(
                    j.ty,
                    j.w,
                    j.cols,
                    j.acts,
                    rows.clone(),
                    j.y.as_mut_ptr().add(rows.start),
                    j.rows,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests;
