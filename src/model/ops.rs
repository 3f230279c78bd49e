//! The small operations of the forward pass: RMSNorm, RoPE, attention over the KV cache.
//! Matrix products live in `crate::quant`; these are the rest, in f32.

use alloc::vec::Vec;

use super::config::{Config, RopeScaling, RopeStyle};
use crate::error::{Result, Status};
use crate::{err, math, quant};

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

/// `x = x / sqrt(mean(x²) + eps) * w` in place: the same operations as [`rmsnorm`].
pub fn rmsnorm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    debug_assert!(w.len() == x.len());
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / sqrtf(mean + eps);
    for (v, &g) in x.iter_mut().zip(w) {
        *v = (*v * scale) * g;
    }
}

/// GELU, tanh approximation, in f32: `0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x²)))`.
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    let u = SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x);
    0.5 * x * (1.0 + math::tanhf(u))
}

/// `x = cap * tanh(x / cap)` (Gemma 2's soft cap of scores and logits), as ggml computes it: a
/// multiplication by `1 / cap`, tanh, a multiplication by `cap`.
pub fn softcap_in_place(xs: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    for x in xs {
        *x = math::tanhf(*x * inv) * cap;
    }
}

/// GELU as ggml's CPU backend computes it (`GGML_GELU_FP16`): the input rounded to f16, GELU
/// of that read from a table of f16 values, the identity above 10 and 0 below -10. The table
/// (128 KiB, built when a model that uses GELU loads) holds [`gelu_tanh`] of every f16 value
/// rounded to f16, as ggml's does: a lookup instead of a tanh per value (which took ~20 ns).
pub struct GeluTable {
    /// `values[h]`: the f16 bits of `gelu_tanh(h)` for every f16 `h`.
    values: Vec<u16>,
}

impl GeluTable {
    pub fn new() -> Result<GeluTable> {
        const ENTRIES: usize = 1 << 16;
        let mut values = Vec::new();
        values.try_reserve_exact(ENTRIES).map_err(|_| {
            err!(
                Status::OutOfMemory,
                "cannot allocate the GELU table ({} KiB)",
                ENTRIES * 2 / 1024
            )
        })?;
        for h in 0..=u16::MAX {
            values.push(quant::f32_to_f16(gelu_tanh(quant::f16_to_f32(h))));
        }
        Ok(GeluTable { values })
    }

    #[inline]
    fn gelu(&self, x: f32) -> f32 {
        if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x
        } else {
            quant::f16_to_f32(self.values[quant::f32_to_f16(x) as usize])
        }
    }

    /// `gate[i] = gelu(gate[i]) * up[i]`.
    pub fn geglu_in_place(&self, gate: &mut [f32], up: &[f32]) {
        debug_assert_eq!(gate.len(), up.len());
        for (g, &u) in gate.iter_mut().zip(up) {
            *g = self.gelu(*g) * u;
        }
    }

    /// `x[i] = gelu(x[i])`: BERT's feed-forward.
    pub fn gelu_in_place(&self, xs: &mut [f32]) {
        for x in xs {
            *x = self.gelu(*x);
        }
    }
}

/// `x = (x - mean(x)) / sqrt(var(x) + eps) * w + b` in place: BERT's layer norm, as ggml's
/// `norm` (the sums in f64 here) followed by the weight and the bias.
pub fn layer_norm_in_place(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    debug_assert!(w.len() == x.len() && b.len() == x.len());
    let n = x.len() as f64;
    let mean = (x.iter().map(|&v| v as f64).sum::<f64>() / n) as f32;
    let var: f64 = x
        .iter()
        .map(|&v| ((v - mean) * (v - mean)) as f64)
        .sum::<f64>()
        / n;
    let scale = 1.0 / sqrtf(var as f32 + eps);
    for ((v, &g), &c) in x.iter_mut().zip(w).zip(b) {
        *v = (*v - mean) * scale * g + c;
    }
}

/// `gate[i] = silu(gate[i]) * up[i]` (SwiGLU).
pub fn swiglu_in_place(gate: &mut [f32], up: &[f32]) {
    math::silu_in_place(gate);
    for (g, &u) in gate.iter_mut().zip(up) {
        *g *= u;
    }
}

/// `1 / (1 + e^-x)`, as ggml's sigmoid.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + math::expf(-x))
}

/// `ln(1 + e^x)`, and `x` above 20, as ggml's softplus.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        math::log((1.0 + math::expf(x)) as f64) as f32
    }
}

/// `x / |x|`, as ggml computes it for Qwen 3.5's q and k heads: an RMS norm with
/// `eps / width`, then `* 1 / sqrt(width)`.
pub fn l2_normalize(x: &mut [f32], eps: f32) {
    let n = x.len() as f32;
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / sqrtf(mean + eps / n);
    let unit = 1.0 / sqrtf(n);
    for v in x {
        *v = (*v * scale) * unit;
    }
}

pub use crate::math::sqrtf;

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
    /// Angle of pair `i` at position `p`: `p * base^(-2i / rope_dims) / factor[i] / scale`
    /// (0 for a pair that does not turn, see [`Config::rope_pair_turns`]), computed in f64
    /// with our own `exp`/`log`/`sin`/`cos` (`factor` is Llama 3's `rope_freqs` or Phi-3's
    /// LongRoPE factors, or 1; `scale` is the layers' RoPE scaling factor, of the kind
    /// `Config::rope_scaling` names). cos and sin are multiplied by `Config::rope_attn_factor`
    /// (that of a pair at angle 0 too, as ggml does; the dimensions past `rope_dims` are not
    /// scaled).
    ///
    /// YaRN divides by `scale` only the part `1 - r` of each angle, `r` a ramp from 1 (pairs
    /// at or below `low`) to 0 (at or past `high`), where `low` and `high` are the pairs that
    /// turn 32 and 1 times within the original context (rounded down and up, clamped to
    /// `0..rope_dims - 1`), and cos and sin are also multiplied by `1 + 0.1 ln(scale)`: ggml's
    /// `rope_yarn` with llama.cpp's defaults (ext_factor 1, beta_fast 32, beta_slow 1).
    pub fn new(
        cfg: &Config,
        context: usize,
        factors: Option<&[f32]>,
        base: f32,
        scale: f32,
    ) -> Result<RopeTable> {
        let pairs = cfg.rope_dims / 2;
        if let Some(f) = factors
            && f.len() != pairs
        {
            return Err(err!(
                Status::BadFormat,
                "RoPE factors: {} values, expected {}",
                f.len(),
                pairs
            ));
        }
        let n = context
            .checked_mul(pairs)
            .ok_or_else(|| err!(Status::OutOfMemory, "RoPE table"))?;
        let mut cos = try_vec(n)?;
        let mut sin = try_vec(n)?;
        let ln_base = math::log(base as f64);
        let dims = cfg.rope_dims as f64;
        let scale = scale as f64;
        let mut m = cfg.rope_attn_factor as f64;
        // YaRN's ramp: from the pair `kept[0]` (all of its angle unscaled) to `kept[1]` (none)
        let mut kept: [f64; 2] = [0.0, 0.0];
        let yarn = cfg.rope_scaling == RopeScaling::Yarn;
        if yarn {
            // the pair that turns `turns` times within the original context
            let pair = |turns: f64| {
                let wave = 2.0 * core::f64::consts::PI * turns;
                dims * math::log(cfg.rope_original_context as f64 / wave) / (2.0 * ln_base)
            };
            // (rounded through i64: core has no floor or ceil; these are small numbers)
            let floor = |x: f64| (x as i64 - (((x as i64) as f64) > x) as i64) as f64;
            let ceil = |x: f64| (x as i64 + (((x as i64) as f64) < x) as i64) as f64;
            kept = [floor(pair(32.0)).max(0.0), ceil(pair(1.0)).min(dims - 1.0)];
            m *= 1.0 + 0.1 * math::log(scale);
        }
        let mut freq: Vec<f64> = Vec::new();
        freq.try_reserve_exact(pairs)
            .map_err(|_| err!(Status::OutOfMemory, "RoPE table"))?;
        for i in 0..pairs {
            if !cfg.rope_pair_turns(i) {
                // an M-RoPE pair of the e section (position 0): angle 0 everywhere
                freq.push(0.0);
                continue;
            }
            let f = math::exp(-((2 * i) as f64) / dims * ln_base);
            let f = f / factors.map_or(1.0, |fs| fs[i] as f64);
            let r = match yarn {
                true => {
                    let y = (i as f64 - kept[0]) / (kept[1] - kept[0]).max(0.001);
                    1.0 - y.clamp(0.0, 1.0)
                }
                false => 0.0,
            };
            freq.push(f / scale * (1.0 - r) + f * r);
        }
        for p in 0..context {
            for (i, &f) in freq.iter().enumerate() {
                let (s, c) = math::sin_cos(p as f64 * f);
                cos[p * pairs + i] = (c * m) as f32;
                sin[p * pairs + i] = (s * m) as f32;
            }
        }
        Ok(RopeTable {
            pairs,
            style: cfg.rope_style,
            cos,
            sin,
        })
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

/// A `Vec` of `n` zeros (`f32`, or the cache's [`KvHalf`]), or `OutOfMemory`.
pub fn try_vec<T: Copy + Default>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        let bytes = size_of::<T>();
        err!(
            Status::OutOfMemory,
            "cannot allocate {} values of {} bytes",
            n,
            bytes
        )
    })?;
    v.resize(n, T::default());
    Ok(v)
}

/// An element of the keys and values attention reads: `f32` (a sentence encoder's own batch, or
/// the cache staged in f32) or [`KvHalf`] (the decoder's cache). `read` gives its value times
/// `1 / UNSCALE`, a power of two, so a factor multiplied by `UNSCALE` times the element read is
/// exactly the factor times the value, rounded the same (a product's rounding depends only on
/// its exact value).
pub trait KvElem: Copy {
    /// What the other factor of every product with an element read is multiplied by.
    const UNSCALE: f32;
    /// Queries per attention item over rows of this element (`model::attend_items`): they
    /// share each key and value row loaded (and, for f16, converted).
    const QUERIES: usize;
    /// The element as f32, divided by `UNSCALE`.
    fn read(self) -> f32;
    /// What [`KvElem::load4`] needs, made once before a loop ([`KvElem::consts`]).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    type Consts: Copy;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn consts() -> Self::Consts;
    /// Four elements at `p`, read.
    ///
    /// # Safety
    /// `p..p + 4` must be readable.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    unsafe fn load4(p: *const Self, k: &Self::Consts) -> core::arch::wasm32::v128;
}

impl KvElem for f32 {
    const UNSCALE: f32 = 1.0;
    /// Two: their 2 × 4 sums per pass fit V8's 16 vector registers beside the loads (three
    /// spilled: a 968-token prefill, whose attention reads f32 rows, ran 10-14 % slower in
    /// Chromium).
    const QUERIES: usize = 2;
    #[inline(always)]
    fn read(self) -> f32 {
        self
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    type Consts = ();
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn consts() {}
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    unsafe fn load4(p: *const f32, _: &()) -> core::arch::wasm32::v128 {
        // SAFETY: by the caller; v128.load has no alignment requirement.
        unsafe { core::arch::wasm32::v128_load(p.cast()) }
    }
}

/// An f16 of the KV cache (as llama.cpp's cache holds keys and values), read as its value over
/// 2^112 ([`quant::f16_finite_scaled`]: exact, and four of them take three instructions). Its
/// partner factors carry the 2^112: the queries (each below [`KvHalf::QUERY_LIMIT`], so they
/// stay finite) and the softmax weights (at most 1). An infinity or NaN would read as a finite
/// value: [`KvHalf::new`] refuses them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(transparent)]
pub struct KvHalf(u16);

impl KvHalf {
    /// 2^16: a query at least this large would be infinite times `UNSCALE` (2^128).
    pub const QUERY_LIMIT: f32 = 65536.0;

    /// `x` rounded to f16 (to nearest even); `None` when that is infinite or NaN (`|x|` from
    /// 65520 on, or NaN).
    #[inline]
    pub fn new(x: f32) -> Option<KvHalf> {
        let h = quant::f32_to_f16(x);
        quant::f16_is_finite(h).then_some(KvHalf(h))
    }
}

impl KvElem for KvHalf {
    const UNSCALE: f32 = quant::F16_REBIAS;
    /// Three: decode reads the f16 cache, and SmolLM2's three query heads per KV head then
    /// convert each cached f16 once, not twice (a tile of two and one of one).
    const QUERIES: usize = 3;
    #[inline(always)]
    fn read(self) -> f32 {
        quant::f16_finite_scaled(self.0)
    }
    /// The conversion's mask, opaque: V8 would materialize a constant inside the loop at
    /// every pass (`quant::F16Bits`).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    type Consts = quant::F16Bits;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn consts() -> quant::F16Bits {
        quant::F16Bits::opaque()
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    unsafe fn load4(p: *const KvHalf, k: &quant::F16Bits) -> core::arch::wasm32::v128 {
        use core::arch::wasm32::*;
        // SAFETY: by the caller (8 bytes); the load has no alignment requirement.
        quant::f16_sext_scaled(unsafe { i32x4_load_extend_i16x4(p.cast()) }, k)
    }
}

/// `out[i]` = `x[i]`'s value (exact), four at a time.
pub fn halves_to_f32(out: &mut [f32], x: &[KvHalf]) {
    debug_assert_eq!(out.len(), x.len());
    let n = out.len().min(x.len());
    let (out, x) = (&mut out[..n], &x[..n]);
    let body = simd128_or!(simd128::halves_to_f32(out, x), 0);
    for (o, x) in out[body..].iter_mut().zip(&x[body..]) {
        *o = x.read() * KvHalf::UNSCALE;
    }
}

/// `a * b + c`, the step of every product the attention sums (the references, the SIMD
/// versions' lanes and their tails alike). In the relaxed-SIMD build it is the engine's
/// `f32x4.relaxed_madd` (one lane): fused where the engine has a fused multiply-add (x86's FMA3,
/// Arm's FMLA), one rounding instead of two; elsewhere a multiply and an add. Either way the
/// same for every thread count and tile size, and the references give the SIMD versions' bits.
/// Fused against not (the relaxed module, one thread, SmolLM2-135M Q4_1, medians of
/// interleaved rounds in Chromium 148): after the 968-token prompt, decode 54.3 -> 57.1 and
/// 56.8 -> 63.3 tok/s, that prompt's prefill 212.4 -> 225.9 and 215.8 -> 227.4; after the
/// 148-token prompt, decode 85.8 -> 92.9, prefill 301.6 -> 314.6; wasmtime, after the long
/// prompt, decode 49.0 -> 50.6. The relaxed modules are 7.1 KB smaller (one instruction where
/// there were two, in every copy of the attention's loops).
#[inline(always)]
pub fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        use core::arch::wasm32::*;
        f32x4_extract_lane::<0>(quant::madd(f32x4_splat(a), f32x4_splat(b), f32x4_splat(c)))
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    {
        a * b + c
    }
}

/// Dot product with four partial sums: element `i` goes to sum `i % 4`, in order, and the sums
/// are combined as `(s0 + s1) + (s2 + s3) + tail` — the lane order of the SIMD version, so both
/// give the same bits (and the result does not depend on which thread runs it). `b`'s elements
/// are [`KvElem::read`].
pub fn dot_ref<K: KvElem>(a: &[f32], b: &[K]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let mut s = [0.0f32; 4];
    for (i, (&x, &y)) in a[..n / 4 * 4].iter().zip(b).enumerate() {
        s[i % 4] = mul_add(x, y.read(), s[i % 4]);
    }
    let mut tail = 0.0;
    for i in n / 4 * 4..n {
        tail = mul_add(a[i], b[i].read(), tail);
    }
    (s[0] + s[1]) + (s[2] + s[3]) + tail
}

/// `y += a * x`, element by element (scalar reference; `x`'s elements [`KvElem::read`]).
pub fn axpy_ref<K: KvElem>(y: &mut [f32], a: f32, x: &[K]) {
    debug_assert_eq!(x.len(), y.len());
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = mul_add(a, xi.read(), *yi);
    }
}

/// `[q·k0, q·k1, q·k2, q·k3]`, each exactly [`dot_ref`] (four keys in one pass for the SIMD
/// version's sake: independent sums keep the adder busy).
pub fn dot4_ref<K: KvElem>(q: &[f32], k: [&[K]; 4]) -> [f32; 4] {
    k.map(|k| dot_ref(q, k))
}

/// `y += p0 v0 + p1 v1 + p2 v2 + p3 v3`, added in that order per element: exactly four
/// [`axpy_ref`] calls (one pass over `y` in the SIMD version).
pub fn axpy4_ref<K: KvElem>(y: &mut [f32], p: [f32; 4], v: [&[K]; 4]) {
    for (pj, vj) in p.into_iter().zip(v) {
        axpy_ref(y, pj, vj);
    }
}

/// See [`dot_ref`]; bit-identical.
#[inline]
pub fn dot<K: KvElem>(a: &[f32], b: &[K]) -> f32 {
    simd128_or!(simd128::dot_n(a, [b])[0], dot_ref(a, b))
}

/// See [`axpy_ref`]; bit-identical.
#[inline]
pub fn axpy<K: KvElem>(y: &mut [f32], a: f32, x: &[K]) {
    simd128_or!(simd128::axpy_n(y, [a], [x]), axpy_ref(y, a, x));
}

/// See [`dot4_ref`]; bit-identical.
#[inline]
pub fn dot4<K: KvElem>(q: &[f32], k: [&[K]; 4]) -> [f32; 4] {
    simd128_or!(simd128::dot_n(q, k), dot4_ref(q, k))
}

/// See [`axpy4_ref`]; bit-identical.
#[inline]
pub fn axpy4<K: KvElem>(y: &mut [f32], p: [f32; 4], v: [&[K]; 4]) {
    simd128_or!(simd128::axpy_n(y, p, v), axpy4_ref(y, p, v));
}

/// `out_i[at_i + j] = (q_i · k_j) · scale` for each of `Q` queries and four keys, each dot exactly
/// [`dot_ref`] (the SIMD version loads the keys once for all queries and combines each query's
/// four sums in one vector: the same additions, lane by lane).
#[inline(always)]
pub fn scaled_dot4_multi<K: KvElem, const Q: usize>(
    q: [&[f32]; Q],
    k: [&[K]; 4],
    scale: f32,
    out: [&mut [f32]; Q],
    at: [usize; Q],
) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    simd128::scaled_dot4_qn(q, k, scale, out, at);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    for ((q, out), at) in q.into_iter().zip(out).zip(at) {
        for (o, d) in out[at..at + 4].iter_mut().zip(dot4_ref(q, k)) {
            *o = d * scale;
        }
    }
}

/// [`axpy4`] for each of `Q` outputs: `y_i += Σ_j p_i[j] v_j` in position order, each exactly
/// [`axpy4_ref`] (the values are loaded once for all outputs in the SIMD version).
#[inline(always)]
pub fn axpy4_multi<K: KvElem, const Q: usize>(y: [&mut [f32]; Q], p: [[f32; 4]; Q], v: [&[K]; 4]) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    simd128::axpy_qn(y, p, v);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    for (y, p) in y.into_iter().zip(p) {
        axpy4_ref(y, p, v);
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    //! f32x4 versions of the `_ref` functions above, lane for lane the same operations (each
    //! product's step is `quant::madd`, whose lanes are [`super::mul_add`]).
    use core::arch::wasm32::*;

    use super::KvElem;
    use crate::quant::madd;

    /// Four f32 at `p`.
    ///
    /// # Safety
    /// `p..p + 4` must be readable.
    #[inline(always)]
    unsafe fn load4(p: *const f32) -> v128 {
        // SAFETY: by the caller.
        unsafe { f32::load4(p, &()) }
    }

    #[inline(always)]
    fn combine(v: v128) -> f32 {
        (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
            + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v))
    }

    /// `q · k[j]` for each of `K` vectors in one pass over `q` (independent sums keep the adder
    /// busy); each is exactly `dot_ref(q, k[j])`.
    #[inline(always)]
    pub fn dot_n<E: KvElem, const K: usize>(q: &[f32], k: [&[E]; K]) -> [f32; K] {
        let (acc, tail) = dot_qn_parts([q], k);
        core::array::from_fn(|j| combine(acc[0][j]) + tail[0][j])
    }

    /// `super::scaled_dot4_multi`: each query's four sums of [`dot_qn_parts`] combined by a
    /// transpose (lane j: `(s0 + s1) + (s2 + s3)` of key j, as [`combine`] adds them), plus
    /// the tails, times `scale`, stored at once.
    #[inline(always)]
    pub fn scaled_dot4_qn<E: KvElem, const Q: usize>(
        q: [&[f32]; Q],
        k: [&[E]; 4],
        scale: f32,
        out: [&mut [f32]; Q],
        at: [usize; Q],
    ) {
        let (acc, tail) = dot_qn_parts(q, k);
        let scale = f32x4_splat(scale);
        for (((acc, tail), out), at) in acc.into_iter().zip(tail).zip(out).zip(at) {
            let [a, b, c, d] = acc;
            let (ab_lo, ab_hi) = (
                i32x4_shuffle::<0, 4, 1, 5>(a, b),
                i32x4_shuffle::<2, 6, 3, 7>(a, b),
            );
            let (cd_lo, cd_hi) = (
                i32x4_shuffle::<0, 4, 1, 5>(c, d),
                i32x4_shuffle::<2, 6, 3, 7>(c, d),
            );
            // s[l]: lane l of each key's sums
            let s = [
                i32x4_shuffle::<0, 1, 4, 5>(ab_lo, cd_lo),
                i32x4_shuffle::<2, 3, 6, 7>(ab_lo, cd_lo),
                i32x4_shuffle::<0, 1, 4, 5>(ab_hi, cd_hi),
                i32x4_shuffle::<2, 3, 6, 7>(ab_hi, cd_hi),
            ];
            let sum = f32x4_add(f32x4_add(s[0], s[1]), f32x4_add(s[2], s[3]));
            let sum = f32x4_add(sum, f32x4(tail[0], tail[1], tail[2], tail[3]));
            let out = &mut out[at..at + 4];
            // SAFETY: out holds four f32.
            unsafe { v128_store(out.as_mut_ptr().cast(), f32x4_mul(sum, scale)) };
        }
    }

    /// The four-lane partial sums of each `q_a · k_j` and the scalar sum of the elements past
    /// the last whole four.
    #[inline(always)]
    fn dot_qn_parts<E: KvElem, const Q: usize, const K: usize>(
        q: [&[f32]; Q],
        k: [&[E]; K],
    ) -> ([[v128; K]; Q], [[f32; K]; Q]) {
        let n = k
            .iter()
            .map(|k| k.len())
            .chain(q.iter().map(|q| q.len()))
            .fold(usize::MAX, usize::min);
        let body = n / 4 * 4;
        let kc = E::consts();
        let mut acc = [[f32x4_splat(0.0); K]; Q];
        let mut i = 0;
        while i < body {
            // SAFETY: i + 4 <= body <= the length of every q and k.
            unsafe {
                let x: [v128; Q] = core::array::from_fn(|a| load4(q[a].as_ptr().add(i)));
                for j in 0..K {
                    let kj = E::load4(k[j].as_ptr().add(i), &kc);
                    for a in 0..Q {
                        acc[a][j] = madd(x[a], kj, acc[a][j]);
                    }
                }
            }
            i += 4;
        }
        let tail = core::array::from_fn(|a| {
            core::array::from_fn(|j| {
                let mut tail = 0.0;
                for t in body..n {
                    tail = super::mul_add(q[a][t], k[j][t].read(), tail);
                }
                tail
            })
        });
        (acc, tail)
    }

    /// `super::halves_to_f32` but for the last `out.len() % 4`; returns where it stopped.
    pub fn halves_to_f32(out: &mut [f32], x: &[super::KvHalf]) -> usize {
        let body = out.len().min(x.len()) / 4 * 4;
        let kc = super::KvHalf::consts();
        for i in (0..body).step_by(4) {
            // SAFETY: i + 4 <= body <= both lengths (8 bytes of halves at i).
            unsafe {
                let h = i32x4_load_extend_i16x4(x.as_ptr().add(i).cast());
                let v = crate::quant::f16_sext_finite_to_f32(h, &kc);
                v128_store(out.as_mut_ptr().add(i).cast(), v);
            }
        }
        body
    }

    /// `y += p[0] v[0] + .. + p[K-1] v[K-1]`, added in that order per element (exactly `K`
    /// `axpy_ref` calls) in one pass over `y`.
    #[inline(always)]
    pub fn axpy_n<E: KvElem, const K: usize>(y: &mut [f32], p: [f32; K], v: [&[E]; K]) {
        axpy_qn([y], [p], v)
    }

    /// [`axpy_n`] for each of `Q` outputs in one pass over the values.
    #[inline(always)]
    pub fn axpy_qn<E: KvElem, const Q: usize, const K: usize>(
        mut y: [&mut [f32]; Q],
        p: [[f32; K]; Q],
        v: [&[E]; K],
    ) {
        let n = v.iter().fold(usize::MAX, |n, v| n.min(v.len()));
        let n = y.iter().fold(n, |n, y| n.min(y.len()));
        let body = n / 4 * 4;
        let pv = p.map(|p| p.map(|x| f32x4_splat(x)));
        let kc = E::consts();
        let mut i = 0;
        while i < body {
            // SAFETY: i + 4 <= body <= the length of every y and v.
            unsafe {
                let yp: [*mut f32; Q] = core::array::from_fn(|a| y[a].as_mut_ptr().add(i));
                let mut acc: [v128; Q] = core::array::from_fn(|a| load4(yp[a]));
                for j in 0..K {
                    let vj = E::load4(v[j].as_ptr().add(i), &kc);
                    for a in 0..Q {
                        acc[a] = madd(pv[a][j], vj, acc[a]);
                    }
                }
                for a in 0..Q {
                    v128_store(yp[a].cast(), acc[a]);
                }
            }
            i += 4;
        }
        for a in 0..Q {
            for t in body..n {
                for j in 0..K {
                    y[a][t] = super::mul_add(p[a][j], v[j][t].read(), y[a][t]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as i32 as f32) / 2.0e9
            })
            .collect()
    }

    /// The dispatching versions (SIMD128 under wasm32, the references natively) equal the
    /// scalar references bit for bit, at every length around the 4-lane body, with f32 keys
    /// and values and with the cache's f16 (zeros, subnormals and normals of either sign).
    #[test]
    fn simd_kernels_equal_their_references() {
        kernels_equal_references(|x| x);
        kernels_equal_references(|x| KvHalf::new(x).unwrap());
        let tiny = |x: f32| KvHalf::new(x * 1e-4).unwrap();
        kernels_equal_references(tiny);
        kernels_equal_references(|x| KvHalf::new(x * 6.0e4).unwrap());
    }

    /// Every finite f16 reads as its value times 2^-112, in the SIMD loads too; the cache
    /// refuses what rounds to infinity and NaN.
    #[test]
    fn kv_half_reads_every_finite_f16() {
        for h in (0..=u16::MAX).filter(|&h| quant::f16_is_finite(h)) {
            let x = quant::f16_to_f32(h);
            let half = KvHalf::new(x).unwrap();
            assert_eq!(half, KvHalf(h), "{h:#06x}");
            let read = half.read();
            assert_eq!((read * KvHalf::UNSCALE).to_bits(), x.to_bits(), "{h:#06x}");
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                use core::arch::wasm32::*;
                // SAFETY: four readable halves.
                let v = unsafe { KvHalf::load4([half; 4].as_ptr(), &KvHalf::consts()) };
                assert_eq!(u32x4_extract_lane::<2>(v), read.to_bits(), "{h:#06x}");
            }
        }
        for n in 0..12 {
            // zeros, subnormals, normals, the largest, of either sign
            let bits = [
                0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0x3c00, 0xbc00, 0x7bff, 0xfbff,
            ];
            let h: Vec<KvHalf> = (0..n).map(|i| KvHalf(bits[(i * 5) % bits.len()])).collect();
            let mut got = std::vec![f32::NAN; n];
            halves_to_f32(&mut got, &h);
            let want = h.iter().map(|h| quant::f16_to_f32(h.0).to_bits());
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.collect::<Vec<_>>()
            );
        }
        for x in [
            65520.0,
            -65520.0,
            1e6,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ] {
            assert_eq!(KvHalf::new(x), None, "{x}");
        }
        assert_eq!(KvHalf::new(65519.0), Some(KvHalf(0x7bff)));
    }

    /// [`simd_kernels_equal_their_references`] with the keys and values made by `elem`.
    fn kernels_equal_references<K: KvElem>(elem: impl Fn(f32) -> K) {
        for n in 0..70 {
            let q = values(n, 1);
            let k: Vec<Vec<K>> = (0..4)
                .map(|j| values(n, 10 + j).into_iter().map(&elem).collect())
                .collect();
            let ks = [&k[0][..], &k[1][..], &k[2][..], &k[3][..]];
            assert_eq!(
                dot(&q, ks[1]).to_bits(),
                dot_ref(&q, ks[1]).to_bits(),
                "dot n={n}"
            );
            let got = dot4(&q, ks).map(f32::to_bits);
            assert_eq!(got, dot4_ref(&q, ks).map(f32::to_bits), "dot4 n={n}");
            let p = [0.25, -1.5, 3.0e-3, 7.0];
            let (mut a, mut b) = (q.clone(), q.clone());
            axpy4(&mut a, p, ks);
            axpy4_ref(&mut b, p, ks);
            assert_eq!(
                a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "axpy4 n={n}"
            );
            let q2 = values(n, 2);
            let scale = 0.3;
            // each query's four scores at its own offset in a longer row; the rest untouched
            let mut got = [[0.0f32; 7]; 2];
            let [g0, g1] = &mut got;
            scaled_dot4_multi([&q, &q2], ks, scale, [&mut g0[..], &mut g1[..]], [3, 0]);
            let scaled = |d: [f32; 4]| d.map(|d| (d * scale).to_bits()).to_vec();
            let (w0, w1) = (scaled(dot4_ref(&q, ks)), scaled(dot4_ref(&q2, ks)));
            let bits = |r: &[f32]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let zeros = |r: &[f32]| r.iter().all(|&x| x.to_bits() == 0);
            assert_eq!(bits(&got[0][3..]), w0, "scaled_dot4_multi n={n}");
            assert_eq!(bits(&got[1][..4]), w1, "scaled_dot4_multi n={n}");
            assert!(
                zeros(&got[0][..3]) && zeros(&got[1][4..]),
                "scaled_dot4_multi n={n}"
            );
            let (mut c, mut d) = (q2.clone(), q2.clone());
            let p2 = [-0.5, 2.0, 1.0e-2, -3.0];
            axpy4_multi([&mut a, &mut c], [p, p2], ks);
            axpy4_ref(&mut b, p, ks);
            axpy4_ref(&mut d, p2, ks);
            assert_eq!(
                [&a, &c].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
                [&b, &d].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
                "axpy4_multi n={n}"
            );
            axpy(&mut a, -0.75, ks[2]);
            axpy_ref(&mut b, -0.75, ks[2]);
            assert_eq!(
                a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "axpy n={n}"
            );
        }
    }
}
