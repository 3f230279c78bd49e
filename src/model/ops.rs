//! The small operations of the forward pass: RMSNorm, RoPE, attention over the KV cache.
//! Matrix products live in `crate::quant`; these are the rest, in f32.

use alloc::vec::Vec;

use super::config::{Config, RopeStyle};
use crate::error::{Result, Status};
use crate::{err, math};

/// `out = x / sqrt(mean(x²) + eps) * w`, with `x, w, out: (dim,)`.
/// The sum of squares is accumulated in f64, as ggml does, then scaled in f32.
pub fn rmsnorm(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    debug_assert!(out.len() == x.len() && w.len() == x.len());
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / sqrtf(mean + eps);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = (v * scale) * g;
    }
}

/// IEEE square root (libm's, which is the `f32.sqrt` instruction in wasm).
#[inline]
pub fn sqrtf(x: f32) -> f32 {
    libm::sqrtf(x)
}

/// Precomputed cos/sin of every RoPE angle: `(position, rope_dims / 2)` each.
pub struct RopeTable {
    pub pairs: usize,
    pub style: RopeStyle,
    /// (context, pairs)
    pub cos: Vec<f32>,
    /// (context, pairs)
    pub sin: Vec<f32>,
}

impl RopeTable {
    /// Angle of pair `i` at position `p`: `p * base^(-2i / rope_dims) / factor[i]`, computed in
    /// f64 with our own `exp`/`log`/`sin`/`cos` (`factor` is Llama 3's `rope_freqs`, or 1).
    pub fn new(cfg: &Config, context: usize, factors: Option<&[f32]>) -> Result<RopeTable> {
        let pairs = cfg.rope_dims / 2;
        if let Some(f) = factors {
            if f.len() != pairs {
                return Err(err!(Status::BadFormat, "rope_freqs has {} values, expected {}", f.len(), pairs));
            }
        }
        let n = context.checked_mul(pairs).ok_or_else(|| err!(Status::OutOfMemory, "RoPE table"))?;
        let mut cos = try_vec(n)?;
        let mut sin = try_vec(n)?;
        let ln_base = math::log(cfg.rope_base as f64);
        let mut freq: Vec<f64> = Vec::new();
        freq.try_reserve_exact(pairs).map_err(|_| err!(Status::OutOfMemory, "RoPE table"))?;
        for i in 0..pairs {
            let f = math::exp(-((2 * i) as f64) / cfg.rope_dims as f64 * ln_base);
            let factor = factors.map_or(1.0, |fs| fs[i] as f64);
            freq.push(f / factor);
        }
        for p in 0..context {
            for (i, &f) in freq.iter().enumerate() {
                let (s, c) = math::sin_cos(p as f64 * f);
                cos[p * pairs + i] = c as f32;
                sin[p * pairs + i] = s as f32;
            }
        }
        Ok(RopeTable { pairs, style: cfg.rope_style, cos, sin })
    }

    /// Rotates each `head_dim`-wide head of `x` (`(n_heads * head_dim,)`) for position `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        let cos = &self.cos[pos * self.pairs..(pos + 1) * self.pairs];
        let sin = &self.sin[pos * self.pairs..(pos + 1) * self.pairs];
        for head in x.chunks_exact_mut(head_dim) {
            for i in 0..self.pairs {
                let (a, b) = match self.style {
                    RopeStyle::AdjacentPairs => (2 * i, 2 * i + 1),
                    RopeStyle::Halves => (i, i + self.pairs),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos[i] - x1 * sin[i];
                head[b] = x0 * sin[i] + x1 * cos[i];
            }
        }
    }
}

/// A zeroed `Vec<f32>` of `n`, or `OutOfMemory`.
pub fn try_vec(n: usize) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| err!(Status::OutOfMemory, "cannot allocate {} floats", n))?;
    v.resize(n, 0.0);
    Ok(v)
}

/// Dot product with four independent partial sums (the order is fixed, so results do not depend
/// on which thread runs it).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut s = [0.0f32; 4];
    let chunks = a.len() / 4;
    for c in 0..chunks {
        for l in 0..4 {
            s[l] += a[c * 4 + l] * b[c * 4 + l];
        }
    }
    let mut tail = 0.0;
    for i in chunks * 4..a.len() {
        tail += a[i] * b[i];
    }
    (s[0] + s[1]) + (s[2] + s[3]) + tail
}

/// `y += a * x`.
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    debug_assert_eq!(x.len(), y.len());
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}
