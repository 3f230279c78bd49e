//! BERT sentence encoders from GGUF files (`general.architecture = bert`: all-MiniLM, bge,
//! e5, gte, ... as llama.cpp's `convert_hf_to_gguf` writes them): a token sequence in, one
//! pooled vector out, as llama.cpp computes it.
//!
//! The whole sequence goes through each layer at once, every token attending to every other
//! (or to the ones before it when `bert.attention.causal` is true). Shapes per token:
//! ```text
//! x = token_embd[id] + token_types[0] + position_embd[pos]    (dim,)
//! x = layernorm(x) * w + b                                     token_embd_norm
//! for each layer:
//!     q, k, v = Wq x + bq, Wk x + bk, Wv x + bv                (dim,) each, n_heads heads
//!     o_h = softmax(q_h · K_h / sqrt(head_dim)) · V_h          over the sequence
//!     x = layernorm(x + Wo o + bo) * w + b                     attn_output_norm
//!     x = layernorm(x + Wdown gelu(Wup x + bup) + bdown) * w + b   layer_output_norm
//! pooled = mean of x over the tokens | x of the first ([CLS]) | of the last   (bert.pooling_type)
//! ```
//! The matrices are the decoder's ([`Matrix`], `matmul_group` over `MAX_BATCH` tokens at a
//! time, quantized to Q8_0 at load when asked, as `llama-quantize --pure` would: the position
//! and token-type tables stay as they are); the attention heads are split across the pool.
//! Each output element is computed by one thread in a fixed order, so vectors do not depend on
//! the thread count.

use alloc::vec::Vec;

use super::ops::{self, try_vec};
use super::{
    AttentionArgs, KvRows, Loader, MAX_BATCH, Matrix, attention_kernel, matmul_group, vector,
};
use crate::decimal::Shortest;
use crate::error::{Result, Status};
use crate::gguf::Gguf;
use crate::pool::{self, Disjoint};
use crate::quant::{self, ActivationBuf, GgmlType};
use crate::{bail, err, math};

/// How the token vectors become one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Their mean (`bert.pooling_type` 1, and when the file names none).
    Mean,
    /// The first token's ([CLS]; 2).
    Cls,
    /// The last token's (3).
    Last,
}

impl Pooling {
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

/// The shape of an encoder, from the file's `bert.*` keys.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    /// Rows of `position_embd`: the longest sequence.
    pub positions: usize,
    pub vocab: usize,
    pub eps: f32,
    pub pooling: Pooling,
    pub causal: bool,
}

const MAX_DIM: u32 = 1 << 16;
const MAX_LAYERS: u32 = 512;
const MAX_HEADS: u32 = 1024;
const MAX_POSITIONS: u32 = 1 << 16;

impl EncoderConfig {
    pub fn from_gguf(g: &Gguf<'_>) -> Result<EncoderConfig> {
        let arch = g.get_str("general.architecture")?;
        if arch != "bert" {
            bail!(
                Status::Unsupported,
                "architecture {:?} is not a sentence encoder (supported: bert)",
                arch
            );
        }
        let bounded = |key: &str, max: u32| -> Result<usize> {
            let v = g.get_u32(key)?;
            if v == 0 || v > max {
                bail!(
                    Status::BadFormat,
                    "{} = {} is out of range 1..={}",
                    key,
                    v,
                    max
                );
            }
            Ok(v as usize)
        };
        let dim = bounded("bert.embedding_length", MAX_DIM)?;
        let n_heads = bounded("bert.attention.head_count", MAX_HEADS)?;
        if !dim.is_multiple_of(n_heads) {
            bail!(
                Status::BadFormat,
                "bert.embedding_length {} is not a multiple of bert.attention.head_count {}",
                dim,
                n_heads
            );
        }
        if let Some(kv) = g.get_u32_opt("bert.attention.head_count_kv")?
            && kv as usize != n_heads
        {
            bail!(
                Status::Unsupported,
                "bert.attention.head_count_kv {} differs from head_count {}",
                kv,
                n_heads
            );
        }
        let eps = g.get_f32("bert.attention.layer_norm_epsilon")?;
        if !(eps.is_finite() && eps >= 0.0) {
            bail!(
                Status::BadFormat,
                "bert.attention.layer_norm_epsilon = {} is out of range",
                Shortest::from(eps)
            );
        }
        let pooling = match g.get_u32_opt("bert.pooling_type")? {
            None | Some(0) | Some(1) => Pooling::Mean,
            Some(2) => Pooling::Cls,
            Some(3) => Pooling::Last,
            Some(other) => bail!(
                Status::Unsupported,
                "bert.pooling_type {} (supported: 1 mean, 2 cls, 3 last)",
                other
            ),
        };
        Ok(EncoderConfig {
            dim,
            n_layers: bounded("bert.block_count", MAX_LAYERS)?,
            n_heads,
            head_dim: dim / n_heads,
            ffn: bounded("bert.feed_forward_length", MAX_DIM * 4)?,
            positions: bounded("bert.context_length", MAX_POSITIONS)?,
            vocab: 0, // from token_embd
            eps,
            pooling,
            causal: g.get_bool_opt("bert.attention.causal")?.unwrap_or(false),
        })
    }
}

/// A weight vector and a bias (a layer norm's, or a projection's bias alone in `b`).
struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

struct EncoderLayer<'a> {
    wq: Matrix<'a>,
    wk: Matrix<'a>,
    wv: Matrix<'a>,
    wo: Matrix<'a>,
    /// Biases of q, k, v, o (zeros when the file has none).
    bias: [Vec<f32>; 4],
    attn_norm: Norm,
    up: Matrix<'a>,
    b_up: Vec<f32>,
    down: Matrix<'a>,
    b_down: Vec<f32>,
    out_norm: Norm,
}

/// Activations of one sequence, `(n, width)` each; grown to the longest sequence seen.
#[derive(Default)]
struct EncoderScratch {
    x: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    y: Vec<f32>,
    h: Vec<f32>,
    /// (n_heads * n, n): one score row per (head, query).
    scores: Vec<f32>,
}

pub struct Encoder<'a> {
    pub cfg: EncoderConfig,
    token_embd: Matrix<'a>,
    /// `token_types[0] + position_embd[p]` for every position `p`: (positions, dim).
    position_rows: Vec<f32>,
    embd_norm: Norm,
    layers: Vec<EncoderLayer<'a>>,
    gelu: ops::GeluTable,
    /// Matrices quantized at load (see `Model::_owned`).
    _owned: Vec<Vec<u8>>,
    pub quantized_bytes: usize,
    scratch: EncoderScratch,
    acts: [ActivationBuf; 2],
}

impl<'a> Encoder<'a> {
    /// Builds the encoder of a file parsed with [`Gguf::parse_for_model`]; `quantize`:
    /// `Some(Q8_0)` turns F32/F16/BF16 matrices into Q8_0 as they are read.
    pub fn load(g: &Gguf<'a>, quantize: Option<GgmlType>) -> Result<Encoder<'a>> {
        if !g.weights_grouped() {
            bail!(
                Status::InvalidArgument,
                "an encoder needs its file parsed with Gguf::parse_for_model"
            );
        }
        let mut cfg = EncoderConfig::from_gguf(g)?;
        let mut ld = Loader::new(g, quantize)?;
        let (dim, ffn) = (cfg.dim, cfg.ffn);
        let t = ld.tensor("token_embd.weight")?;
        cfg.vocab = match &t.dims[..t.n_dims] {
            [d, v] | [d, v, 1] if *d == dim as u64 && *v >= 1 && *v <= 1 << 22 => *v as usize,
            dims => bail!(
                Status::BadFormat,
                "token_embd.weight: shape {:?}, expected [{}, vocabulary]",
                dims,
                dim
            ),
        };
        let token_embd = ld.matrix("token_embd.weight", cfg.vocab, dim)?;
        // Each position's row plus token type 0's (llama.cpp adds type 0 to every token).
        let mut position_rows = table(&mut ld, "position_embd.weight", cfg.positions, dim)?;
        if ld.g.tensor("token_types.weight").is_some() {
            let t = ld.tensor("token_types.weight")?;
            let types = match &t.dims[..t.n_dims] {
                [d, n, ..] if *d == dim as u64 && *n >= 1 => *n as usize,
                dims => bail!(
                    Status::BadFormat,
                    "token_types.weight: shape {:?}, expected [{}, types]",
                    dims,
                    dim
                ),
            };
            let type0 = table(&mut ld, "token_types.weight", types, dim)?;
            for row in position_rows.chunks_exact_mut(dim) {
                for (p, &t) in row.iter_mut().zip(&type0[..dim]) {
                    *p += t;
                }
            }
        }
        let embd_norm = norm(&mut ld, "token_embd_norm", dim)?;
        let mut layers = Vec::new();
        layers
            .try_reserve_exact(cfg.n_layers)
            .map_err(|_| err!(Status::OutOfMemory, "layers"))?;
        for l in 0..cfg.n_layers {
            let nm = |suffix: &str| alloc::format!("blk.{l}.{suffix}");
            if g.tensor(&nm("attn_qkv.weight")).is_some() {
                bail!(
                    Status::Unsupported,
                    "blk.{}.attn_qkv.weight: fused q, k, v in a BERT file",
                    l
                );
            }
            let bias = |ld: &mut Loader<'_, 'a>, name: &str, n: usize| -> Result<Vec<f32>> {
                Ok(match ld.optional_vector(&nm(name), n)? {
                    Some(b) => b,
                    None => try_vec(n)?,
                })
            };
            let layer = EncoderLayer {
                wq: ld.matrix(&nm("attn_q.weight"), dim, dim)?,
                wk: ld.matrix(&nm("attn_k.weight"), dim, dim)?,
                wv: ld.matrix(&nm("attn_v.weight"), dim, dim)?,
                wo: ld.matrix(&nm("attn_output.weight"), dim, dim)?,
                bias: [
                    bias(&mut ld, "attn_q.bias", dim)?,
                    bias(&mut ld, "attn_k.bias", dim)?,
                    bias(&mut ld, "attn_v.bias", dim)?,
                    bias(&mut ld, "attn_output.bias", dim)?,
                ],
                attn_norm: norm(&mut ld, &nm("attn_output_norm"), dim)?,
                up: ld.matrix(&nm("ffn_up.weight"), ffn, dim)?,
                b_up: bias(&mut ld, "ffn_up.bias", ffn)?,
                down: ld.matrix(&nm("ffn_down.weight"), dim, ffn)?,
                b_down: bias(&mut ld, "ffn_down.bias", dim)?,
                out_norm: norm(&mut ld, &nm("layer_output_norm"), dim)?,
            };
            layers.push(layer);
        }
        // The pooler and classifier heads llama.cpp loads for rerankers are not run here:
        // refuse a file that has them rather than give a vector it would not.
        ld.check_all_used()?;
        Ok(Encoder {
            cfg,
            token_embd,
            position_rows,
            embd_norm,
            layers,
            gelu: ops::GeluTable::new()?,
            _owned: ld.owned,
            quantized_bytes: ld.quantized_bytes,
            scratch: EncoderScratch::default(),
            acts: Default::default(),
        })
    }

    /// The pooled vector of `ids` (at most `cfg.positions` of them, each in the vocabulary)
    /// into `out` (`cfg.dim` floats), not normalized.
    pub fn encode(&mut self, ids: &[u32], out: &mut [f32]) -> Result<()> {
        let (n, dim, ffn) = (ids.len(), self.cfg.dim, self.cfg.ffn);
        if n == 0 || n > self.cfg.positions {
            bail!(
                Status::InvalidArgument,
                "an encoder takes 1..={} tokens, not {}",
                self.cfg.positions,
                n
            );
        }
        if out.len() != dim {
            bail!(
                Status::InvalidArgument,
                "the vector has {} floats, not {}",
                out.len(),
                dim
            );
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.cfg.vocab) {
            bail!(
                Status::InvalidArgument,
                "token id {} is outside the vocabulary of {}",
                id,
                self.cfg.vocab
            );
        }
        pool::check()?;
        self.grow(n)?;
        let s = &mut self.scratch;
        for (t, &id) in ids.iter().enumerate() {
            let x = &mut s.x[t * dim..(t + 1) * dim];
            quant::dequantize_row(self.token_embd.ty, self.token_embd.row(id as usize), x)?;
            for (v, &p) in x
                .iter_mut()
                .zip(&self.position_rows[t * dim..(t + 1) * dim])
            {
                *v += p;
            }
            let Norm { w, b } = &self.embd_norm;
            ops::layer_norm_in_place(x, w, b, self.cfg.eps);
        }
        for l in 0..self.layers.len() {
            let layer = &self.layers[l];
            let s = &mut self.scratch;
            let acts = &mut self.acts;
            matmuls(
                [
                    (&layer.wq, &mut s.q[..]),
                    (&layer.wk, &mut s.k[..]),
                    (&layer.wv, &mut s.v[..]),
                ],
                &s.x,
                n,
                acts,
            )?;
            for (y, b) in [&mut s.q, &mut s.k, &mut s.v].into_iter().zip(&layer.bias) {
                for row in y[..n * dim].chunks_exact_mut(dim) {
                    ops::axpy(row, 1.0, b);
                }
            }
            self.attention(n);
            let layer = &self.layers[l];
            let s = &mut self.scratch;
            let acts = &mut self.acts;
            matmuls([(&layer.wo, &mut s.y[..])], &s.o, n, acts)?;
            add_and_norm(
                &mut s.x,
                &s.y,
                &layer.bias[3],
                &layer.attn_norm,
                n,
                self.cfg.eps,
            );
            matmuls([(&layer.up, &mut s.h[..])], &s.x, n, acts)?;
            for row in s.h[..n * ffn].chunks_exact_mut(ffn) {
                ops::axpy(row, 1.0, &layer.b_up);
                self.gelu.gelu_in_place(row);
            }
            matmuls([(&layer.down, &mut s.y[..])], &s.h, n, acts)?;
            add_and_norm(
                &mut s.x,
                &s.y,
                &layer.b_down,
                &layer.out_norm,
                n,
                self.cfg.eps,
            );
        }
        pool::check()?;
        let x = &self.scratch.x[..n * dim];
        match self.cfg.pooling {
            Pooling::Cls => out.copy_from_slice(&x[..dim]),
            Pooling::Last => out.copy_from_slice(&x[(n - 1) * dim..]),
            Pooling::Mean => {
                out.fill(0.0);
                for row in x.chunks_exact(dim) {
                    ops::axpy(out, 1.0, row);
                }
                let inv = 1.0 / n as f32;
                out.iter_mut().for_each(|v| *v *= inv);
            }
        }
        Ok(())
    }

    /// Grows the scratch to sequences of `n` tokens.
    fn grow(&mut self, n: usize) -> Result<()> {
        let (dim, ffn, heads) = (self.cfg.dim, self.cfg.ffn, self.cfg.n_heads);
        let s = &mut self.scratch;
        for (buf, len) in [
            (&mut s.x, n * dim),
            (&mut s.q, n * dim),
            (&mut s.k, n * dim),
            (&mut s.v, n * dim),
            (&mut s.o, n * dim),
            (&mut s.y, n * dim),
            (&mut s.h, n * ffn),
            (&mut s.scores, heads * n * n),
        ] {
            if buf.len() < len {
                buf.try_reserve_exact(len - buf.len()).map_err(|_| {
                    err!(Status::OutOfMemory, "encoder activations of {} tokens", n)
                })?;
                buf.resize(len, 0.0);
            }
        }
        Ok(())
    }

    /// Every head of every token over the sequence, into `o`: the decoder's attention over
    /// the batch's own keys and values, every query seeing every token (or those up to its own
    /// when the encoder is causal).
    fn attention(&mut self, n: usize) {
        let s = &mut self.scratch;
        let (dim, heads, hd) = (self.cfg.dim, self.cfg.n_heads, self.cfg.head_dim);
        let args = AttentionArgs {
            q: &s.q[..n * dim],
            out: Disjoint::new(&mut s.o[..n * dim]),
            scores: Disjoint::new(&mut s.scores[..heads * n * n]),
            kv: KvRows::F32 {
                keys: &s.k[..n * dim],
                values: &s.v[..n * dim],
            },
            slots: n,
            head_stride: hd,
            pos_stride: dim,
            n_heads: heads,
            group: 1,
            head_dim: hd,
            q_dim: dim,
            score_stride: n,
            n,
            pos0: 0,
            scale: 1.0 / math::sqrtf(hd as f32),
            softcap: 0.0,
            window: usize::MAX,
            bidirectional: !self.cfg.causal,
        };
        pool::par_for(&args, args.items(), args.chunk(), attention_kernel);
    }

    pub fn heap_bytes(&self) -> usize {
        self.quantized_bytes + self.position_rows.len() * 4
    }
}

/// An f32 table of `rows × cols` from tensor `name`, of whatever type it is stored in.
fn table(ld: &mut Loader<'_, '_>, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
    let t = ld.tensor(name)?;
    let m = Matrix::from_tensor(t, rows, cols)?;
    quant::check_matrix(m.ty, m.rows, m.cols, m.data, name)?;
    let mut out = try_vec(rows * cols)?;
    for (r, row) in out.chunks_exact_mut(cols).enumerate() {
        quant::dequantize_row(m.ty, m.row(r), row)?;
    }
    Ok(out)
}

/// Layer norm `name.weight` and `name.bias`.
fn norm(ld: &mut Loader<'_, '_>, name: &str, n: usize) -> Result<Norm> {
    Ok(Norm {
        w: vector(ld.tensor(&alloc::format!("{name}.weight"))?, n)?,
        b: vector(ld.tensor(&alloc::format!("{name}.bias"))?, n)?,
    })
}

/// `y (n, rows) = W x` for each `(W, y)` of `group` (same `cols`), `MAX_BATCH` tokens at a time.
fn matmuls<const N: usize>(
    mut group: [(&Matrix<'_>, &mut [f32]); N],
    x: &[f32],
    n: usize,
    acts: &mut [ActivationBuf; 2],
) -> Result<()> {
    let cols = group[0].0.cols;
    for t0 in (0..n).step_by(MAX_BATCH) {
        let b = (n - t0).min(MAX_BATCH);
        let mut part = group
            .each_mut()
            .map(|(m, y)| (*m, &mut y[t0 * m.rows..(t0 + b) * m.rows]));
        matmul_group(&mut part, &x[t0 * cols..(t0 + b) * cols], b, acts)?;
    }
    Ok(())
}

/// `x = layernorm(x + y + bias) * w + b` over the first `n` rows (each `bias.len()` wide).
fn add_and_norm(x: &mut [f32], y: &[f32], bias: &[f32], norm: &Norm, n: usize, eps: f32) {
    let dim = bias.len();
    for (x, y) in x[..n * dim].chunks_exact_mut(dim).zip(y.chunks_exact(dim)) {
        for ((x, &y), &c) in x.iter_mut().zip(y).zip(bias) {
            *x += y + c;
        }
        ops::layer_norm_in_place(x, &norm.w, &norm.b, eps);
    }
}
