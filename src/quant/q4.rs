//! Q4_0 and Q4_1: blocks of 32 weights at 4 bits, with one f16 scale (Q4_0, symmetric around
//! 8) or a scale and a minimum (Q4_1). Byte `j` of `qs` holds weight `j` in its low nibble and
//! weight `j + 16` in its high nibble.
//!
//! Products: Q4_0 with Q8_0 activations, Q4_1 with Q8_1 (whose per-block `s = d·Σq` carries
//! the minimum's share: `Σ (d_w q_w + m)(d_x q_x) = d_w d_x Σ q_w q_x + m s`).
//!
//! Deliberate repetition: the block structs and the `Kernels` impls of Q4_0 and Q4_1 have the
//! shape of each other and of their twins in `q5.rs`, `q8.rs`, `k_quants.rs` and `float.rs`.
//! Each is one weight type's specialisation (its own `#[repr(C)]` layout pinned by a size
//! assert, and its own unpacking in every line that matters: offset or minimum, where the
//! nibbles sit), written out so each reference reads as its format does and each inner loop
//! stays a plain loop over one layout.

use core::mem::offset_of;

use super::activation::{ActRow, ActivationKind, stored_index};
use super::grouped::{Grouped, blocks, valid_fields};
use super::half::F16;
use super::{Block, Kernels, Out};

/// 32 weights `w = d · (q - 8)`, `q` in 0..16. 4.5 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ4_0 {
    /// scale
    pub d: F16,
    /// nibbles: weight `j` low, weight `j + 16` high
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);

/// 32 weights `w = d · q + m`, `q` in 0..16. 5 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ4_1 {
    /// scale
    pub d: F16,
    /// minimum
    pub m: F16,
    /// nibbles: weight `j` low, weight `j + 16` high
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);

// SAFETY: repr(C), only byte arrays and `F16` (a byte pair): alignment 1, no invalid bit patterns.
unsafe impl Block for BlockQ4_0 {}
// SAFETY: as above.
unsafe impl Block for BlockQ4_1 {}
// SAFETY: every field's offset, in order (checked below).
unsafe impl Grouped for BlockQ4_0 {
    const FIELDS: &'static [usize] = &[offset_of!(BlockQ4_0, d), offset_of!(BlockQ4_0, qs)];
}
// SAFETY: as above.
unsafe impl Grouped for BlockQ4_1 {
    const FIELDS: &'static [usize] = &[
        offset_of!(BlockQ4_1, d),
        offset_of!(BlockQ4_1, m),
        offset_of!(BlockQ4_1, qs),
    ];
}
const _: () = assert!(valid_fields(BlockQ4_0::FIELDS, 18) && valid_fields(BlockQ4_1::FIELDS, 20));

/// Q4_0 weights.
pub(crate) struct Q4_0;
/// Q4_1 weights.
pub(crate) struct Q4_1;

impl Kernels for Q4_0 {
    const BLOCK_VALUES: usize = 32;
    const BLOCK_BYTES: usize = 18;
    const ACTIVATION: ActivationKind = ActivationKind::Q8_0;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (blk, out) in blocks::<BlockQ4_0>(row).zip(out.as_chunks_mut::<32>().0) {
            let d = blk.d.to_f32();
            for (j, &byte) in blk.qs.iter().enumerate() {
                out[j] = ((byte & 0x0f) as i32 - 8) as f32 * d;
                out[j + 16] = ((byte >> 4) as i32 - 8) as f32 * d;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in blocks::<BlockQ4_0>(row).enumerate() {
            // quant i of this block
            let q = |i: usize| x.quants[stored_index(Self::ACTIVATION, 32 * b + i)] as i32;
            let mut sumi = 0i32;
            for (j, &byte) in blk.qs.iter().enumerate() {
                sumi += ((byte & 0x0f) as i32 - 8) * q(j);
                sumi += ((byte >> 4) as i32 - 8) * q(j + 16);
            }
            sum += sumi as f32 * (blk.d.to_f32() * x.scales[b]);
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q4_0(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}

impl Kernels for Q4_1 {
    const BLOCK_VALUES: usize = 32;
    const BLOCK_BYTES: usize = 20;
    const ACTIVATION: ActivationKind = ActivationKind::Q8_1;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (blk, out) in blocks::<BlockQ4_1>(row).zip(out.as_chunks_mut::<32>().0) {
            let (d, m) = (blk.d.to_f32(), blk.m.to_f32());
            for (j, &byte) in blk.qs.iter().enumerate() {
                out[j] = (byte & 0x0f) as f32 * d + m;
                out[j + 16] = (byte >> 4) as f32 * d + m;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in blocks::<BlockQ4_1>(row).enumerate() {
            // quant i of this block
            let q = |i: usize| x.quants[stored_index(Self::ACTIVATION, 32 * b + i)] as i32;
            let mut sumi = 0i32;
            for (j, &byte) in blk.qs.iter().enumerate() {
                sumi += (byte & 0x0f) as i32 * q(j);
                sumi += (byte >> 4) as i32 * q(j + 16);
            }
            sum += sumi as f32 * (blk.d.to_f32() * x.scales[b]) + blk.m.to_f32() * x.sums[b];
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q4_1(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}
