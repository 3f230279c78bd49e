//! Q5_0 and Q5_1: blocks of 32 weights at 5 bits. The low 4 bits are packed as in Q4 (byte `j`
//! of `qs`: weight `j` low nibble, weight `j + 16` high nibble); bit `i` of the little-endian
//! u32 `qh` is the fifth bit of weight `i`.
//!
//! Products: Q5_0 with Q8_0 activations, Q5_1 with Q8_1 (see `q4.rs` for the minimum's share).
//!
//! Deliberate repetition: the block structs and the `Kernels` impls of Q5_0 and Q5_1 have the
//! shape of each other and of their twins in `q4.rs`, `q8.rs`, `k_quants.rs` and `float.rs`:
//! one specialisation per weight type (its layout, and the fifth bit's offset or minimum),
//! kept apart so each reads as its format does (see `q4.rs`).

use core::mem::offset_of;

use super::activation::{ActRow, ActivationKind, stored_index};
use super::grouped::{Grouped, blocks, valid_fields};
use super::half::F16;
use super::{Block, Kernels, Out};

/// 32 weights `w = d · (q - 16)`, `q` in 0..32. 5.5 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ5_0 {
    /// scale
    pub d: F16,
    /// fifth bits, little-endian u32: bit `i` belongs to weight `i`
    pub qh: [u8; 4],
    /// low nibbles: weight `j` low, weight `j + 16` high
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);

/// 32 weights `w = d · q + m`, `q` in 0..32. 6 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ5_1 {
    /// scale
    pub d: F16,
    /// minimum
    pub m: F16,
    /// fifth bits, little-endian u32: bit `i` belongs to weight `i`
    pub qh: [u8; 4],
    /// low nibbles: weight `j` low, weight `j + 16` high
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);

// SAFETY: repr(C), only byte arrays and `F16` (a byte pair): alignment 1, no invalid bit patterns.
unsafe impl Block for BlockQ5_0 {}
// SAFETY: as above.
unsafe impl Block for BlockQ5_1 {}
// SAFETY: every field's offset, in order (checked below).
unsafe impl Grouped for BlockQ5_0 {
    const FIELDS: &'static [usize] = &[
        offset_of!(BlockQ5_0, d),
        offset_of!(BlockQ5_0, qh),
        offset_of!(BlockQ5_0, qs),
    ];
    const FIFTH_BITS: Option<usize> = Some(offset_of!(BlockQ5_0, qh));
}
// SAFETY: as above.
unsafe impl Grouped for BlockQ5_1 {
    const FIELDS: &'static [usize] = &[
        offset_of!(BlockQ5_1, d),
        offset_of!(BlockQ5_1, m),
        offset_of!(BlockQ5_1, qh),
        offset_of!(BlockQ5_1, qs),
    ];
    const FIFTH_BITS: Option<usize> = Some(offset_of!(BlockQ5_1, qh));
}
const _: () = assert!(valid_fields(BlockQ5_0::FIELDS, 22) && valid_fields(BlockQ5_1::FIELDS, 24));

/// The 32 unsigned 5-bit values of a block, in natural order.
#[inline(always)]
fn unpack(qh: [u8; 4], qs: &[u8; 16]) -> [i32; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0i32; 32];
    for (j, &byte) in qs.iter().enumerate() {
        q[j] = (byte & 0x0f) as i32 | (((qh >> j) & 1) << 4) as i32;
        q[j + 16] = (byte >> 4) as i32 | (((qh >> (j + 16)) & 1) << 4) as i32;
    }
    q
}

/// Q5_0 weights.
pub(crate) struct Q5_0;
/// Q5_1 weights.
pub(crate) struct Q5_1;

impl Kernels for Q5_0 {
    const BLOCK_VALUES: usize = 32;
    const BLOCK_BYTES: usize = 22;
    const ACTIVATION: ActivationKind = ActivationKind::Q8_0;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (blk, out) in blocks::<BlockQ5_0>(row).zip(out.as_chunks_mut::<32>().0) {
            let d = blk.d.to_f32();
            for (o, q) in out.iter_mut().zip(unpack(blk.qh, &blk.qs)) {
                *o = (q - 16) as f32 * d;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in blocks::<BlockQ5_0>(row).enumerate() {
            // quant i of this block
            let xq = |i: usize| x.quants[stored_index(Self::ACTIVATION, 32 * b + i)] as i32;
            let mut sumi = 0i32;
            for (i, q) in unpack(blk.qh, &blk.qs).into_iter().enumerate() {
                sumi += (q - 16) * xq(i);
            }
            sum += sumi as f32 * (blk.d.to_f32() * x.scales[b]);
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q5_0(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}

impl Kernels for Q5_1 {
    const BLOCK_VALUES: usize = 32;
    const BLOCK_BYTES: usize = 24;
    const ACTIVATION: ActivationKind = ActivationKind::Q8_1;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        for (blk, out) in blocks::<BlockQ5_1>(row).zip(out.as_chunks_mut::<32>().0) {
            let (d, m) = (blk.d.to_f32(), blk.m.to_f32());
            for (o, q) in out.iter_mut().zip(unpack(blk.qh, &blk.qs)) {
                *o = q as f32 * d + m;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in blocks::<BlockQ5_1>(row).enumerate() {
            // quant i of this block
            let xq = |i: usize| x.quants[stored_index(Self::ACTIVATION, 32 * b + i)] as i32;
            let mut sumi = 0i32;
            for (i, q) in unpack(blk.qh, &blk.qs).into_iter().enumerate() {
                sumi += q * xq(i);
            }
            sum += sumi as f32 * (blk.d.to_f32() * x.scales[b]) + blk.m.to_f32() * x.sums[b];
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q5_1(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}
