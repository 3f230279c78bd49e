//! Q8_0: blocks of 32 int8 weights with one f16 scale; multiplied with Q8_0 activations.
//!
//! ggml's activation blocks Q8_0 and Q8_1 (`BlockQ8_1` below) are recorded here for reference:
//! this engine stores activations in its own SIMD-friendly layout instead (see
//! `activation.rs`), with the same numbers.
//!
//! Deliberate repetition: `BlockQ8_0`/`BlockQ8_1` and the Q8_0 `Kernels` impl have the shape of
//! their twins in `q4.rs`, `q5.rs` and `k_quants.rs`: one specialisation per weight type (its
//! layout and how a weight is read), kept apart so each reads as its format does (see `q4.rs`).

use core::mem::offset_of;

use super::activation::{ActRow, ActivationKind, stored_index};
use super::grouped::{Grouped, blocks, valid_fields};
use super::half::F16;
use super::{Block, Kernels, Out};

/// 32 weights `w = d · q`. 8.5 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ8_0 {
    /// scale
    pub d: F16,
    /// quants, natural order
    pub qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);

/// ggml's Q8_1 activation block: as Q8_0 plus `s = d · Σq`. 9 bits per value. Layout record
/// only; never read from files by this engine.
#[allow(dead_code)]
#[repr(C)]
pub(crate) struct BlockQ8_1 {
    /// scale
    pub d: F16,
    /// `d · Σ qs`
    pub s: F16,
    /// quants, natural order
    pub qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8_1>() == 36);

// SAFETY: repr(C), only byte arrays and `F16` (a byte pair): alignment 1, no invalid bit patterns.
unsafe impl Block for BlockQ8_0 {}
// SAFETY: every field's offset, in order (checked below).
unsafe impl Grouped for BlockQ8_0 {
    const FIELDS: &'static [usize] = &[offset_of!(BlockQ8_0, d), offset_of!(BlockQ8_0, qs)];
}
const _: () = assert!(valid_fields(BlockQ8_0::FIELDS, 34));

/// Quantizes `x` (whole blocks of 32) to Q8_0 weight blocks in `out` (34 bytes per block), as
/// ggml's `quantize_row_q8_0_ref` (what `llama-quantize` writes): `d = amax / 127` stored as
/// f16, `q = round(x / d)` (halves away from zero) with `1 / d` computed from the unrounded `d`.
/// The blocks come out as the file stores them; [`super::group_rows`] makes them the loaded
/// layout.
pub fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    debug_assert!(x.len().is_multiple_of(32) && out.len() == x.len() / 32 * 34);
    for (x, blk) in x
        .as_chunks::<32>()
        .0
        .iter()
        .zip(out.as_chunks_mut::<34>().0)
    {
        let amax = x.iter().fold(0.0f32, |m, &v| m.max(libm::fabsf(v)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        blk[..2].copy_from_slice(&super::f32_to_f16(d).to_le_bytes());
        for (q, &v) in blk[2..].iter_mut().zip(x) {
            *q = libm::roundf(v * id) as i8 as u8;
        }
    }
}

/// Q8_0 weights.
pub(crate) struct Q8_0;

impl Kernels for Q8_0 {
    const BLOCK_VALUES: usize = 32;
    const BLOCK_BYTES: usize = 34;
    const ACTIVATION: ActivationKind = ActivationKind::Q8_0;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (blk, out) in blocks::<BlockQ8_0>(row).zip(out.as_chunks_mut::<32>().0) {
            let d = blk.d.to_f32();
            for (o, &q) in out.iter_mut().zip(&blk.qs) {
                *o = q as f32 * d;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in blocks::<BlockQ8_0>(row).enumerate() {
            // quant i of this block
            let xq = |i: usize| x.quants[stored_index(Self::ACTIVATION, 32 * b + i)] as i32;
            let mut sumi = 0i32;
            for (i, &q) in blk.qs.iter().enumerate() {
                sumi += q as i32 * xq(i);
            }
            sum += sumi as f32 * (blk.d.to_f32() * x.scales[b]);
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q8_0(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}
