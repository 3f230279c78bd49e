//! The llama-family forward pass: weights where they lie in the GGUF file, a KV cache, and a
//! batched step that turns token ids into logits.
//!
//! One token, top to bottom (shapes per token; `B` tokens go through together in a batch):
//! ```text
//! x = token_embd[id]                                   (dim,)
//! for each layer:
//!     xb = rmsnorm(x) * attn_norm                      (dim,)
//!     q, k, v = Wq xb (+bq), Wk xb (+bk), Wv xb (+bv)  (q_dim,), (kv_dim,), (kv_dim,)
//!     rope(q, k, pos); k, v -> cache[layer][pos]       (f16-rounded, as llama.cpp's cache)
//!     per head h: att = softmax(q_h · K[..=pos] / sqrt(hd)); o_h = att · V[..=pos]
//!     x += Wo o                                        (dim,)
//!     xb = rmsnorm(x) * ffn_norm
//!     x += Wdown (silu(Wgate xb) * (Wup xb))           (ffn,) -> (dim,)
//! logits = Wout (rmsnorm(x) * output_norm)             (vocab,)
//! ```
//! Every matrix product and the attention heads are split across the thread pool; each output
//! element is computed by one thread in a fixed order, so logits do not depend on thread count.

pub mod config;
pub mod ops;

use alloc::vec::Vec;
use core::ops::Range;

use crate::error::{Result, Status};
use crate::gguf::{Gguf, TensorInfo};
use crate::pool::{self, Disjoint};
use crate::quant::{self, ActivationBuf, GgmlType};
use crate::{bail, err, math};
pub use config::{Arch, Config};
use ops::{RopeTable, rmsnorm, try_vec};

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
        if t.n_dims > 2 || t.dims[0] as usize != cols || t.dims[1] as usize != rows {
            bail!(
                Status::BadFormat,
                "tensor {} has shape {:?}, expected [{}, {}]",
                t.name,
                &t.dims[..t.n_dims],
                cols,
                rows
            );
        }
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
}

struct Layer<'a> {
    attn_norm: Vec<f32>,
    wq: Matrix<'a>,
    wk: Matrix<'a>,
    wv: Matrix<'a>,
    /// qwen2 only: biases of q, k, v.
    bias: Option<[Vec<f32>; 3]>,
    wo: Matrix<'a>,
    ffn_norm: Vec<f32>,
    w_gate: Matrix<'a>,
    w_up: Matrix<'a>,
    w_down: Matrix<'a>,
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
    /// (MAX_BATCH * n_heads, context + SCORE_ROW_PAD): one score row per (token, head).
    scores: Vec<f32>,
    /// The rows about to be multiplied, rounded for the weights' type; a group whose matrices
    /// want two different roundings uses both.
    acts: ActivationBuf,
    acts2: ActivationBuf,
}

/// Called with each position's logits when a forward pass asks for all of them.
pub type OnLogits<'f> = &'f mut dyn FnMut(usize, &[f32]);

pub struct Model<'a> {
    pub cfg: Config,
    /// Positions the KV cache holds.
    pub context: usize,
    token_embd: Matrix<'a>,
    layers: Vec<Layer<'a>>,
    output_norm: Vec<f32>,
    output: Matrix<'a>,
    rope: RopeTable,
    /// (n_layers, context, kv_dim) each.
    k_cache: Vec<f32>,
    v_cache: Vec<f32>,
    /// Tokens in the cache.
    pub pos: usize,
    scratch: Scratch,
    /// (vocab,): logits after the last token of the last call.
    pub logits: Vec<f32>,
}

/// Reads a 1-D f32 (or f16) tensor of `n` values into a Vec.
fn vector(g: &Gguf<'_>, name: &str, n: usize) -> Result<Vec<f32>> {
    let t = g
        .tensor(name)
        .ok_or_else(|| err!(Status::BadFormat, "tensor {} is missing", name))?;
    if t.n_elements() != n as u64 {
        bail!(
            Status::BadFormat,
            "tensor {} has {} values, expected {}",
            name,
            t.n_elements(),
            n
        );
    }
    let mut out = try_vec(n)?;
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

fn matrix<'a>(g: &Gguf<'a>, name: &str, rows: usize, cols: usize) -> Result<Matrix<'a>> {
    let t = g
        .tensor(name)
        .ok_or_else(|| err!(Status::BadFormat, "tensor {} is missing", name))?;
    Matrix::from_tensor(t, rows, cols)
}

impl<'a> Model<'a> {
    /// Builds a model over a parsed file. `context` is the KV cache length (0: the model's own,
    /// capped at 4096).
    pub fn load(g: &Gguf<'a>, context: usize) -> Result<Model<'a>> {
        let cfg = Config::from_gguf(g)?;
        let context = match context {
            0 => cfg.train_context.min(4096),
            n => n,
        };
        if context > (1 << 20) {
            bail!(Status::InvalidArgument, "context {} is too large", context);
        }
        let (dim, q_dim, kv_dim, ffn) = (cfg.dim, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let token_embd = matrix(g, "token_embd.weight", cfg.vocab, dim)?;
        let output = match g.tensor("output.weight") {
            Some(t) => Matrix::from_tensor(t, cfg.vocab, dim)?,
            None => token_embd,
        };
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(cfg.n_layers)
            .map_err(|_| err!(Status::OutOfMemory, "layers"))?;
        for l in 0..cfg.n_layers {
            let nm = |suffix: &str| alloc::format!("blk.{l}.{suffix}");
            let bias = if cfg.arch == Arch::Qwen2 {
                Some([
                    vector(g, &nm("attn_q.bias"), q_dim)?,
                    vector(g, &nm("attn_k.bias"), kv_dim)?,
                    vector(g, &nm("attn_v.bias"), kv_dim)?,
                ])
            } else {
                None
            };
            layers.push(Layer {
                attn_norm: vector(g, &nm("attn_norm.weight"), dim)?,
                wq: matrix(g, &nm("attn_q.weight"), q_dim, dim)?,
                wk: matrix(g, &nm("attn_k.weight"), kv_dim, dim)?,
                wv: matrix(g, &nm("attn_v.weight"), kv_dim, dim)?,
                bias,
                wo: matrix(g, &nm("attn_output.weight"), dim, q_dim)?,
                ffn_norm: vector(g, &nm("ffn_norm.weight"), dim)?,
                w_gate: matrix(g, &nm("ffn_gate.weight"), ffn, dim)?,
                w_up: matrix(g, &nm("ffn_up.weight"), ffn, dim)?,
                w_down: matrix(g, &nm("ffn_down.weight"), dim, ffn)?,
            });
        }
        let output_norm = vector(g, "output_norm.weight", dim)?;
        let factors = match g.tensor("rope_freqs.weight") {
            Some(_) => Some(vector(g, "rope_freqs.weight", cfg.rope_dims / 2)?),
            None => None,
        };
        let rope = RopeTable::new(&cfg, context, factors.as_deref())?;
        let cache = cfg
            .n_layers
            .checked_mul(context)
            .and_then(|n| n.checked_mul(kv_dim))
            .ok_or_else(|| err!(Status::OutOfMemory, "KV cache size overflows"))?;
        let k_cache = try_vec(cache)?;
        let v_cache = try_vec(cache)?;
        let b = MAX_BATCH;
        let score_rows = b * cfg.n_heads;
        let scratch = Scratch {
            x: try_vec(b * dim)?,
            xb: try_vec(b * dim)?,
            q: try_vec(b * q_dim)?,
            k: try_vec(b * kv_dim)?,
            v: try_vec(b * kv_dim)?,
            att_out: try_vec(b * q_dim)?,
            gate: try_vec(b * ffn)?,
            up: try_vec(b * ffn)?,
            scores: try_vec(score_rows * (context + SCORE_ROW_PAD))?,
            acts: ActivationBuf::with_capacity(dim.max(q_dim).max(ffn), b)?,
            acts2: ActivationBuf::with_capacity(dim.max(q_dim).max(ffn), b)?,
        };
        let logits = try_vec(cfg.vocab)?;
        Ok(Model {
            cfg,
            context,
            token_embd,
            layers,
            output_norm,
            output,
            rope,
            k_cache,
            v_cache,
            pos: 0,
            scratch,
            logits,
        })
    }

    /// Bytes of the K and V caches together.
    pub fn kv_cache_bytes(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * 4
    }

    /// Forgets the cache.
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Keeps only the first `n` cached tokens.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if n > self.pos {
            bail!(
                Status::InvalidArgument,
                "cannot truncate to {} tokens: the cache holds {}",
                n,
                self.pos
            );
        }
        self.pos = n;
        Ok(())
    }

    /// Runs `ids` at positions `pos..pos + ids.len()`. After it, `logits` holds the last token's
    /// logits; with `all_logits`, `on_logits(i, logits)` is called for every position `i`.
    pub fn forward(&mut self, ids: &[u32], mut on_logits: Option<OnLogits<'_>>) -> Result<()> {
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
        let mut done = 0;
        while done < ids.len() {
            let n = (ids.len() - done).min(MAX_BATCH);
            let batch = &ids[done..done + n];
            let want_all = on_logits.is_some();
            self.forward_batch(batch, want_all, &mut |i, l| {
                if let Some(f) = on_logits.as_mut() {
                    f(done + i, l)
                }
            })?;
            done += n;
        }
        Ok(())
    }

    fn forward_batch(
        &mut self,
        ids: &[u32],
        all_logits: bool,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<()> {
        let n = ids.len();
        let cfg = self.cfg.clone();
        let (dim, q_dim, kv_dim, ffn, hd) = (
            cfg.dim,
            cfg.q_dim(),
            cfg.kv_dim(),
            cfg.ffn_dim,
            cfg.head_dim,
        );
        let pos0 = self.pos;
        for (t, &id) in ids.iter().enumerate() {
            let row = self.token_embd.row(id as usize);
            quant::dequantize_row(
                self.token_embd.ty,
                row,
                &mut self.scratch.x[t * dim..(t + 1) * dim],
            )?;
        }
        for l in 0..cfg.n_layers {
            let layer = &self.layers[l];
            let s = &mut self.scratch;
            for t in 0..n {
                rmsnorm(
                    &mut s.xb[t * dim..(t + 1) * dim],
                    &s.x[t * dim..(t + 1) * dim],
                    &layer.attn_norm,
                    cfg.rms_eps,
                );
            }
            matmul_group(
                &mut [
                    (&layer.wq, &mut s.q[..n * q_dim]),
                    (&layer.wk, &mut s.k[..n * kv_dim]),
                    (&layer.wv, &mut s.v[..n * kv_dim]),
                ],
                &s.xb[..n * dim],
                n,
                &mut s.acts,
                &mut s.acts2,
            )?;
            for t in 0..n {
                let (q, k, v) = (
                    &mut s.q[t * q_dim..(t + 1) * q_dim],
                    &mut s.k[t * kv_dim..(t + 1) * kv_dim],
                    &mut s.v[t * kv_dim..(t + 1) * kv_dim],
                );
                if let Some([bq, bk, bv]) = &layer.bias {
                    ops::axpy(q, 1.0, bq);
                    ops::axpy(k, 1.0, bk);
                    ops::axpy(v, 1.0, bv);
                }
                self.rope.apply(q, hd, pos0 + t);
                self.rope.apply(k, hd, pos0 + t);
                let at = (l * self.context + pos0 + t) * kv_dim;
                for i in 0..kv_dim {
                    self.k_cache[at + i] = quant::f16_to_f32(quant::f32_to_f16(k[i]));
                    self.v_cache[at + i] = quant::f16_to_f32(quant::f32_to_f16(v[i]));
                }
            }
            self.attention(l, n, pos0);
            let layer = &self.layers[l];
            let s = &mut self.scratch;
            // x += Wo att_out: compute into xb, then add.
            matmul_group(
                &mut [(&layer.wo, &mut s.xb[..n * dim])],
                &s.att_out[..n * q_dim],
                n,
                &mut s.acts,
                &mut s.acts2,
            )?;
            ops::axpy(&mut s.x[..n * dim], 1.0, &s.xb[..n * dim]);
            for t in 0..n {
                rmsnorm(
                    &mut s.xb[t * dim..(t + 1) * dim],
                    &s.x[t * dim..(t + 1) * dim],
                    &layer.ffn_norm,
                    cfg.rms_eps,
                );
            }
            matmul_group(
                &mut [
                    (&layer.w_gate, &mut s.gate[..n * ffn]),
                    (&layer.w_up, &mut s.up[..n * ffn]),
                ],
                &s.xb[..n * dim],
                n,
                &mut s.acts,
                &mut s.acts2,
            )?;
            math::silu_in_place(&mut s.gate[..n * ffn]);
            for (g, &u) in s.gate[..n * ffn].iter_mut().zip(&s.up[..n * ffn]) {
                *g *= u;
            }
            matmul_group(
                &mut [(&layer.w_down, &mut s.xb[..n * dim])],
                &s.gate[..n * ffn],
                n,
                &mut s.acts,
                &mut s.acts2,
            )?;
            ops::axpy(&mut s.x[..n * dim], 1.0, &s.xb[..n * dim]);
        }
        self.pos += n;
        // Final norm and the output projection: every position when asked, else the last.
        let first = if all_logits { 0 } else { n - 1 };
        let s = &mut self.scratch;
        for t in first..n {
            rmsnorm(
                &mut s.xb[t * dim..(t + 1) * dim],
                &s.x[t * dim..(t + 1) * dim],
                &self.output_norm,
                cfg.rms_eps,
            );
        }
        let vocab = cfg.vocab;
        for t in first..n {
            matmul_group(
                &mut [(&self.output, &mut self.logits[..vocab])],
                &s.xb[t * dim..(t + 1) * dim],
                1,
                &mut s.acts,
                &mut s.acts2,
            )?;
            if all_logits {
                on_logits(t, &self.logits);
            }
        }
        Ok(())
    }

    /// Attention for `n` new tokens at `pos0..pos0+n` in layer `l`, split across the pool by
    /// (token, head).
    fn attention(&mut self, l: usize, n: usize, pos0: usize) {
        let cfg = &self.cfg;
        let layer = l * self.context * cfg.kv_dim()..(l + 1) * self.context * cfg.kv_dim();
        let score_stride = self.context + SCORE_ROW_PAD;
        let s = &mut self.scratch;
        let args = AttentionArgs {
            q: &s.q[..n * cfg.q_dim()],
            out: Disjoint::new(&mut s.att_out[..n * cfg.q_dim()]),
            scores: Disjoint::new(&mut s.scores[..n * cfg.n_heads * score_stride]),
            k_cache: &self.k_cache[layer.clone()],
            v_cache: &self.v_cache[layer],
            n_heads: cfg.n_heads,
            group: cfg.n_heads / cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            q_dim: cfg.q_dim(),
            kv_dim: cfg.kv_dim(),
            score_stride,
            pos0,
            scale: 1.0 / ops::sqrtf(cfg.head_dim as f32),
        };
        pool::par_for(&args, n * cfg.n_heads, 1, attention_kernel);
    }
}

struct AttentionArgs<'a> {
    /// (n, q_dim)
    q: &'a [f32],
    /// (n, q_dim): item (t, h) owns `out[t][h * head_dim..(h + 1) * head_dim]`.
    out: Disjoint<'a, f32>,
    /// (n * n_heads, score_stride): item `i` owns row `i`.
    scores: Disjoint<'a, f32>,
    /// This layer's cache, (context, kv_dim); positions `0..=pos` are filled.
    k_cache: &'a [f32],
    v_cache: &'a [f32],
    n_heads: usize,
    group: usize,
    head_dim: usize,
    q_dim: usize,
    kv_dim: usize,
    score_stride: usize,
    pos0: usize,
    scale: f32,
}

fn attention_kernel(a: &AttentionArgs<'_>, items: Range<usize>) {
    let hd = a.head_dim;
    for item in items {
        let (t, h) = (item / a.n_heads, item % a.n_heads);
        let pos = a.pos0 + t;
        let kvh = h / a.group;
        let q = &a.q[t * a.q_dim + h * hd..][..hd];
        // SAFETY: score row `item` and this head's slice of token t's output belong to this
        // item alone.
        let (scores, out) = unsafe {
            (
                a.scores
                    .slice(item * a.score_stride..item * a.score_stride + pos + 1),
                a.out
                    .slice(t * a.q_dim + h * hd..t * a.q_dim + (h + 1) * hd),
            )
        };
        let key = |s: usize| &a.k_cache[s * a.kv_dim + kvh * hd..][..hd];
        let value = |s: usize| &a.v_cache[s * a.kv_dim + kvh * hd..][..hd];
        // Four positions at a time; each score is the same `dot` either way.
        let body = scores.len() / 4 * 4;
        for s in (0..body).step_by(4) {
            let d = ops::dot4(q, [key(s), key(s + 1), key(s + 2), key(s + 3)]);
            for j in 0..4 {
                scores[s + j] = d[j] * a.scale;
            }
        }
        for (s, score) in scores.iter_mut().enumerate().skip(body) {
            *score = ops::dot(q, key(s)) * a.scale;
        }
        math::softmax_in_place(scores);
        out.fill(0.0);
        // out += p_s v_s in position order (axpy4 adds its four in order).
        for s in (0..body).step_by(4) {
            let p = [scores[s], scores[s + 1], scores[s + 2], scores[s + 3]];
            ops::axpy4(out, p, [value(s), value(s + 1), value(s + 2), value(s + 3)]);
        }
        for (s, &p) in scores.iter().enumerate().skip(body) {
            ops::axpy(out, p, value(s));
        }
    }
}

/// `y_i = W_i x` for a group of matrices sharing the input `x: (n, cols)`, outputs
/// `y_i: (n, rows_i)`, all in one pool job over the concatenated rows.
fn matmul_group(
    group: &mut [(&Matrix<'_>, &mut [f32])],
    x: &[f32],
    n: usize,
    acts: &mut ActivationBuf,
    acts2: &mut ActivationBuf,
) -> Result<()> {
    debug_assert!(group.len() <= 3 && n <= MAX_BATCH);
    let cols = group[0].0.cols;
    let x = &x[..n * cols];
    // Round the input once per activation kind; a second kind (mixed-type groups) goes to acts2.
    let first_ty = group[0].0.ty;
    let second_ty = group
        .iter()
        .map(|(m, _)| m.ty)
        .find(|&ty| quant::vec_dot_kind(ty) != quant::vec_dot_kind(first_ty));
    quant::quantize_activations(first_ty, x, cols, acts)?;
    if let Some(ty) = second_ty {
        quant::quantize_activations(ty, x, cols, acts2)?;
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
    // Each chunk writes only its own rows of the outputs; inputs are read-only. The pool hands
    // out long runs of rows first (prefetchers follow them), then shorter ones. Any chunking
    // gives the same bits: each output row is one dot product wherever it runs.
    pool::par_for(&args, total, ROWS_PER_CHUNK, matmul_kernel);
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
