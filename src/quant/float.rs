//! Unquantized weights: F32, F16 and BF16 (one value per "block").
//!
//! ggml multiplies F16 weights with activations rounded to f16 and BF16 weights with
//! activations rounded to bf16 (both converted back to f32 and summed in f32); F32 weights with
//! the f32 activations as they are. Bits per weight: 32, 16 and 16.
//!
//! The three `Kernels` impls share their shape on purpose, among themselves and with the
//! quantized types' in `q4.rs`, `q5.rs` and `k_quants.rs`: one specialisation per element type
//! (how a weight is read, and which rounding its activations get).

use super::activation::{ActRow, ActivationKind};
use super::half::{bf16_to_f32, f16_to_f32};
use super::{Kernels, Out};

/// F32 weights.
pub(crate) struct F32;
/// F16 (IEEE binary16) weights.
pub(crate) struct F16;
/// BF16 (bfloat16) weights.
pub(crate) struct BF16;

/// `row` as little-endian u16 values.
#[inline(always)]
fn u16s(row: &[u8]) -> impl Iterator<Item = u16> + '_ {
    row.as_chunks::<2>()
        .0
        .iter()
        .map(|b| u16::from_le_bytes(*b))
}

/// `row` as little-endian f32 values.
#[inline(always)]
fn f32s(row: &[u8]) -> impl Iterator<Item = f32> + '_ {
    row.as_chunks::<4>()
        .0
        .iter()
        .map(|b| f32::from_le_bytes(*b))
}

impl Kernels for F32 {
    const BLOCK_VALUES: usize = 1;
    const BLOCK_BYTES: usize = 4;
    const ACTIVATION: ActivationKind = ActivationKind::F32;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (o, w) in out.iter_mut().zip(f32s(row)) {
            *o = w;
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        f32s(row).zip(x.values).map(|(w, &x)| w * x).sum()
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_f32(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}

impl Kernels for F16 {
    const BLOCK_VALUES: usize = 1;
    const BLOCK_BYTES: usize = 2;
    const ACTIVATION: ActivationKind = ActivationKind::F16;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (o, h) in out.iter_mut().zip(u16s(row)) {
            *o = f16_to_f32(h);
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        u16s(row)
            .zip(x.values)
            .map(|(h, &x)| f16_to_f32(h) * x)
            .sum()
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_f16(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}

impl Kernels for BF16 {
    const BLOCK_VALUES: usize = 1;
    const BLOCK_BYTES: usize = 2;
    const ACTIVATION: ActivationKind = ActivationKind::BF16;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (o, h) in out.iter_mut().zip(u16s(row)) {
            *o = bf16_to_f32(h);
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        u16s(row)
            .zip(x.values)
            .map(|(h, &x)| bf16_to_f32(h) * x)
            .sum()
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_bf16(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}
