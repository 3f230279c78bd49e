//! K-quants: super-blocks of 256 weights with small integer scales per sub-block and one f16
//! scale per super-block. Multiplied with Q8_K activations (one f32 scale per 256 and the sums
//! of each 16 quants).
//!
//! - Q4_K: 8 sub-blocks of 32; 6-bit scale and 6-bit min each; `w = d·sc·q - dmin·m`, q in 0..16.
//! - Q5_K: as Q4_K with a fifth bit per weight (`qh`); q in 0..32.
//! - Q6_K: 16 sub-blocks of 16; int8 scale each; `w = d·sc·(q - 32)`, q in 0..64.
//!
//! The three `Kernels` impls (and the block structs) repeat one shape on purpose, among
//! themselves and with the legacy types' in `q4.rs`, `q5.rs`, `q8.rs` and the float types' in
//! `float.rs`: each is one weight type's specialisation (its bit unpacking differs in every
//! line that matters), written out so the reference reads as the format does.
//!
//! The integer part of each product is exact in i32: `Σ_j sc_j Σ_i q_i x_i` is at most
//! 256·63·31·127 (Q5_K) or 256·128·32·128 (Q6_K), well below 2^31.

use super::activation::{ActRow, ActivationKind, stored_index};
use super::half::F16;
use super::{Block, Kernels, Out, as_blocks};

/// 256 weights. The 8 scales and 8 mins are 6 bits each, packed in `scales` (see
/// [`scales_mins`]). Byte `l` of `qs[32j..32j+32]` holds weight `64j + l` in its low nibble and
/// `64j + 32 + l` in its high nibble. 4.5 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ4K {
    /// super-block scale of the scales
    pub d: F16,
    /// super-block scale of the mins
    pub dmin: F16,
    /// 6-bit scales and mins, packed
    pub scales: [u8; 12],
    /// nibbles
    pub qs: [u8; 128],
}
const _: () = assert!(size_of::<BlockQ4K>() == 144);

/// 256 weights: Q4_K plus `qh`, whose byte `l` bit `i` is the fifth bit of weight `32i + l`.
/// 5.5 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ5K {
    /// super-block scale of the scales
    pub d: F16,
    /// super-block scale of the mins
    pub dmin: F16,
    /// 6-bit scales and mins, packed
    pub scales: [u8; 12],
    /// fifth bits
    pub qh: [u8; 32],
    /// low nibbles, as Q4_K
    pub qs: [u8; 128],
}
const _: () = assert!(size_of::<BlockQ5K>() == 176);

/// 256 weights in two halves of 128. The file stores the quants as `ql` (low 4 bits, 128
/// bytes) then `qh` (high 2 bits, 64 bytes): in half `h`, for `l` in 0..32, with
/// `ql = ql[64h..]`, `qh = qh[32h..]`, weight `128h + l` is `ql[l] & 15 | (qh[l] & 3) << 4`,
/// `+32` is `ql[l+32] & 15 | (qh[l] >> 2 & 3) << 4`, `+64` is `ql[l] >> 4 | (qh[l] >> 4 & 3)
/// << 4`, `+96` is `ql[l+32] >> 4 | (qh[l] >> 6) << 4` ([`q6k_file_quant`]). Loaded, they are
/// repacked ([`repack_q6k`]). Weight `i` uses scale `i / 16`. 6.5625 bits per weight.
#[repr(C)]
pub(crate) struct BlockQ6K {
    /// the 256 quants, 6 bits each: as the file stores them, repacked once loaded
    pub quants: [u8; 192],
    /// one scale per 16 weights
    pub scales: [i8; 16],
    /// super-block scale
    pub d: F16,
}
const _: () = assert!(size_of::<BlockQ6K>() == 210);

/// ggml's Q8_K activation block, recorded for reference only (this engine keeps the same numbers
/// in the layout of `activation.rs`). 9.125 bits per value.
#[allow(dead_code)]
#[repr(C)]
pub(crate) struct BlockQ8K {
    /// scale (f32, not f16)
    pub d: f32,
    /// quants
    pub qs: [i8; 256],
    /// sum of each 16 quants
    pub bsums: [i16; 16],
}
const _: () = assert!(size_of::<BlockQ8K>() == 292);

// SAFETY: repr(C), only byte arrays and `F16` (a byte pair): alignment 1, no invalid bit patterns.
unsafe impl Block for BlockQ4K {}
// SAFETY: as above.
unsafe impl Block for BlockQ5K {}
// SAFETY: as above.
unsafe impl Block for BlockQ6K {}

/// The 8 scales and 8 mins of a Q4_K/Q5_K block. Bytes 0..4 hold scales 0..4 in their low 6
/// bits, bytes 4..8 mins 0..4; scales and mins 4..8 have their low 4 bits in the nibbles of
/// bytes 8..12 and their top 2 bits in the top bits of bytes 0..4 (scales) and 4..8 (mins).
#[inline(always)]
pub(crate) fn scales_mins(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 6) << 4);
        m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, m)
}

/// Quant `l` (0..32, 0..16) of sub-block `j` (0..8) of a Q4_K block: sub-blocks 2i and
/// 2i + 1 are the low and high nibbles of bytes 32i..32i + 32.
#[inline(always)]
fn q4k_quant(blk: &BlockQ4K, j: usize, l: usize) -> u8 {
    blk.qs[32 * (j / 2) + l] >> (4 * (j % 2)) & 0x0f
}

/// Quant `l` (0..32, 0..32) of sub-block `j` (0..8) of a Q5_K block: the nibble as in Q4_K,
/// the fifth bit bit `j` of `qh[l]`.
#[inline(always)]
fn q5k_quant(blk: &BlockQ5K, j: usize, l: usize) -> u8 {
    blk.qs[32 * (j / 2) + l] >> (4 * (j % 2)) & 0x0f | (blk.qh[l] >> j & 1) << 4
}

/// Quant `i` (0..256, 0..64 before the -32) of a Q6_K block's quants as the file stores them
/// (`BlockQ6K`): in half `h` (128 values), quarter `c` takes the low (c = 0, 1) or high (c = 2,
/// 3) nibbles of `ql[64h + 32(c % 2)..][..32]` and bits 2c, 2c + 1 of `qh[32h..][..32]`. (The
/// definition [`repack_q6k`] is tested against.)
#[cfg(test)]
pub(crate) fn q6k_file_quant(q: &[u8; 192], i: usize) -> u8 {
    let (ql, qh) = q.split_at(128);
    let (h, c, l) = (i / 128, i % 128 / 32, i % 32);
    let low = ql[64 * h + 32 * (c % 2) + l] >> (4 * (c / 2)) & 0x0f;
    let high = qh[32 * h + l] >> (2 * c) & 3;
    low | high << 4
}

/// The quants of a Q6_K super-block (the file's `ql` then `qh`, 192 bytes) rewritten in place
/// as the kernels read them: four groups of 48 bytes, group `g = 2h + m` (h, m in 0..2)
/// holding the 64 quants `128h + 32c + 16m + j` (c in 0..4, j in 0..16) as three runs of 16
/// bytes, byte `j` of run `r` (0..3) holding quant `c = r` in its low 6 bits and bits `4 - 2r`
/// and `5 - 2r` of quant `c = 3` in its top two ([`q6k_quant`]). The SIMD kernels take three
/// quarters with a mask each and gather the fourth from the top bits (`simd128::q6k_quarters`:
/// 11 operations per 64 quants, where the file's layout took 17). Every Q6_K super-block
/// passes here at load (`grouped::group_rows`), so it is byte arithmetic that LLVM vectorizes.
pub(crate) fn repack_q6k(q: &mut [u8; 192]) {
    let (ql, qh) = q.split_at(128);
    let mut out = [0u8; 192];
    for (g, group) in out.chunks_exact_mut(48).enumerate() {
        let (h, m) = (g / 2, g % 2);
        let (low, high) = (&ql[64 * h + 16 * m..], &qh[32 * h + 16 * m..]);
        for j in 0..16 {
            let (a, c, hb) = (low[j], low[32 + j], high[j]);
            let quant = [
                a & 0x0f | (hb & 3) << 4,
                c & 0x0f | (hb >> 2 & 3) << 4,
                a >> 4 | (hb >> 4 & 3) << 4,
            ];
            let fourth = c >> 4 | (hb >> 6) << 4;
            for r in 0..3 {
                group[16 * r + j] = quant[r] | (fourth >> (4 - 2 * r) & 3) << 6;
            }
        }
    }
    *q = out;
}

/// Quant `i` (0..256, 0..64 before the -32) of a Q6_K block's quants as loaded ([`repack_q6k`]).
#[inline(always)]
pub(crate) fn q6k_quant(q: &[u8; 192], i: usize) -> u8 {
    let (h, c, m, j) = (i / 128, i % 128 / 32, i % 32 / 16, i % 16);
    let run = |r: usize| q[48 * (2 * h + m) + 16 * r + j];
    if c < 3 {
        run(c) & 0x3f
    } else {
        (run(0) >> 6) << 4 | (run(1) >> 6) << 2 | run(2) >> 6
    }
}

/// Q4_K weights.
pub(crate) struct Q4K;
/// Q5_K weights.
pub(crate) struct Q5K;
/// Q6_K weights.
pub(crate) struct Q6K;

impl Kernels for Q4K {
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 144;
    const ACTIVATION: ActivationKind = ActivationKind::Q8K;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        // One sub-block of 32 at a time over the whole row (a loop of unknown length, which
        // LLVM keeps as one small loop rather than unrolling a block's eight).
        let blocks = as_blocks::<BlockQ4K>(row);
        for (s, out) in out.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            let (blk, j) = (&blocks[s / 8], s % 8);
            let (sc, m) = scales_mins(&blk.scales);
            let (d, min) = (
                blk.d.to_f32() * sc[j] as f32,
                blk.dmin.to_f32() * m[j] as f32,
            );
            for (l, o) in out.iter_mut().enumerate() {
                *o = d * q4k_quant(blk, j, l) as f32 - min;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in as_blocks::<BlockQ4K>(row).iter().enumerate() {
            let xq = &x.quants[b * 256..b * 256 + 256];
            let bsums = &x.bsums[b * 16..b * 16 + 16];
            let (sc, m) = scales_mins(&blk.scales);
            let (mut sumi, mut summ) = (0i32, 0i32);
            for j in 0..8 {
                let mut s = 0i32;
                for l in 0..32 {
                    let q = q4k_quant(blk, j, l);
                    s += q as i32 * xq[stored_index(ActivationKind::Q8K, 32 * j + l)] as i32;
                }
                sumi += sc[j] as i32 * s;
                summ += m[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
            }
            let dy = x.scales[b];
            sum += dy * blk.d.to_f32() * sumi as f32 - dy * blk.dmin.to_f32() * summ as f32;
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q4_k(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}

impl Kernels for Q5K {
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 176;
    const ACTIVATION: ActivationKind = ActivationKind::Q8K;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        // As Q4_K's, one sub-block of 32 at a time.
        let blocks = as_blocks::<BlockQ5K>(row);
        for (s, out) in out.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            let (blk, j) = (&blocks[s / 8], s % 8);
            let (sc, m) = scales_mins(&blk.scales);
            let (d, min) = (
                blk.d.to_f32() * sc[j] as f32,
                blk.dmin.to_f32() * m[j] as f32,
            );
            for (l, o) in out.iter_mut().enumerate() {
                *o = d * q5k_quant(blk, j, l) as f32 - min;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in as_blocks::<BlockQ5K>(row).iter().enumerate() {
            let xq = &x.quants[b * 256..b * 256 + 256];
            let bsums = &x.bsums[b * 16..b * 16 + 16];
            let (sc, m) = scales_mins(&blk.scales);
            let (mut sumi, mut summ) = (0i32, 0i32);
            for j in 0..8 {
                let mut s = 0i32;
                for l in 0..32 {
                    let q = q5k_quant(blk, j, l);
                    s += q as i32 * xq[stored_index(ActivationKind::Q8K, 32 * j + l)] as i32;
                }
                sumi += sc[j] as i32 * s;
                summ += m[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
            }
            let dy = x.scales[b];
            sum += dy * blk.d.to_f32() * sumi as f32 - dy * blk.dmin.to_f32() * summ as f32;
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q5_k(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}

impl Kernels for Q6K {
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 210;
    const ACTIVATION: ActivationKind = ActivationKind::Q8K;

    fn dequantize(row: &[u8], out: &mut [f32]) {
        // As Q4_K's, 32 values at a time (two scales of 16).
        let blocks = as_blocks::<BlockQ6K>(row);
        for (s, out) in out.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            let (blk, first) = (&blocks[s / 8], 32 * (s % 8));
            let d = blk.d.to_f32();
            for (i, o) in (first..).zip(out.iter_mut()) {
                *o = d * blk.scales[i / 16] as f32 * (q6k_quant(&blk.quants, i) as i32 - 32) as f32;
            }
        }
    }

    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in as_blocks::<BlockQ6K>(row).iter().enumerate() {
            let xq = &x.quants[b * 256..b * 256 + 256];
            let q: [i32; 256] = core::array::from_fn(|i| q6k_quant(&blk.quants, i) as i32);
            let mut sumi = 0i32;
            for j in 0..16 {
                let mut s = 0i32;
                for i in 16 * j..16 * j + 16 {
                    s += (q[i] - 32) * xq[stored_index(ActivationKind::Q8K, i)] as i32;
                }
                sumi += blk.scales[j] as i32 * s;
            }
            sum += blk.d.to_f32() * x.scales[b] * sumi as f32;
        }
        sum
    }

    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        simd128_or!(
            super::simd128::dot_q6_k(w, rb, xs, y),
            Self::dot_ref_n(w, rb, xs, y)
        )
    }
}
