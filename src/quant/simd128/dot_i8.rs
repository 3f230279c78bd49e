//! The integer kernels of the relaxed-SIMD build: the activations are i8 (`activation.rs`: Q8_K
//! in natural order, Q8_0/Q8_1 with each pair of blocks interleaved in runs of 8), the weights
//! are unpacked to *unsigned* bytes below 128 and multiplied with
//! `i16x8.relaxed_dot_i8x16_i7x16_s` (x86 `pmaddubsw`, Arm `sdot`-based): sixteen i8 × u7
//! products summed in adjacent pairs into eight i16. (Q8_0's signed weight bytes are the i8
//! operand instead, against the activations split into positive and negative parts: `Q8_0`.)
//!
//! Relaxed SIMD leaves two things to the engine, and both are kept out of reach, so the result is
//! the same exact integer on every engine:
//! - the second operand may be read as signed or unsigned: every byte given to it is below 128
//!   (4-, 5- and 6-bit weights; for Q8_0 the activations' parts, see `Q8_0`);
//! - the i16 pair sums may saturate or wrap: none overflows (|pair| <= 2 · 128 · 127 = 32,512,
//!   and the K-quants add two pairs of at most 2 · 128 · 63 = 16,128 each).
//!
//! Offsets are taken off once per block: a Q4_0 weight is `q - 8` with `q` in 0..16, so
//! `Σ (q - 8)·x = Σ q·x - 8·Σ x`, with `Σ x` from the activation's `bsums`; Q6_K's `-32` is
//! handled the same way. So every integer sum equals the i16 build's.

// See the parent module for why the loops over `T` index arrays in lockstep.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;
use core::mem::offset_of;

use super::*;
use crate::quant::q4::{BlockQ4_0, BlockQ4_1};
use crate::quant::q5::{BlockQ5_0, BlockQ5_1};
use crate::quant::q8::BlockQ8_0;

/// The byte masks that unpack 4- and 5-bit weights, as a kernel holds them: [`Masks::opaque`]
/// once before its loops, as with [`F16Bits`]: V8 builds a vector constant anew at each use
/// inside a loop (`movabs`, `movq`, `punpcklqdq`, seen in a Chromium profile of decode's
/// Q4_1 kernel), but keeps a value it cannot see through in a register (or loads it once from
/// the stack). Against the constants, `quant::tests::bench_matvec` in Node 24's V8 (AVX-VNNI,
/// as Chromium's; GMAC/s, best of 40 rounds, two interleaved runs): matvec 576x1536 Q4_1
/// 18.25/18.24 -> 18.67/19.26, Q5_0 13.22/13.40 -> 14.13/14.51, Q5_1 11.68/11.68 ->
/// 12.74/13.05, Q5_K 13.44/13.45 -> 13.87/13.87 (its tile of 16 vectors 21.7 -> 24.3); Q4_0,
/// Q4_K, Q6_K and Q8_0 the same. Gemma 3 270M Q4_K_M, Chromium, one thread, 3 interleaved
/// rounds: prefill 215.0/216.2/215.5 -> 216.6/219.8/219.6 tok/s, decode 35.7/36.6/35.9 ->
/// 35.8/36.6/37.5. The relaxed modules are 5.6 KB smaller.
#[derive(Clone, Copy)]
pub(super) struct Masks {
    /// `0x0f` in every byte: a byte's low nibble.
    low4: v128,
    /// `0x10` in every byte: a weight's fifth bit.
    bit4: v128,
}

impl Masks {
    const CONST: Masks = Masks {
        low4: u8x16(
            0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
            0x0f, 0x0f,
        ),
        bit4: u8x16(
            0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
            0x10, 0x10,
        ),
    };

    /// The same values, hidden from the optimizers (see the type's doc).
    #[inline(always)]
    pub(super) fn opaque() -> Masks {
        core::hint::black_box(Masks::CONST)
    }

    /// Low and high nibbles of 16 bytes, each as 16 bytes in 0..16.
    #[inline(always)]
    fn nibbles(&self, v: v128) -> (v128, v128) {
        // A 16-bit shift moves bits across bytes; the mask keeps only each byte's own.
        (v128_and(v, self.low4), v128_and(u16x8_shr(v, 4), self.low4))
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 with Q8_0/Q8_1 activations, through the shared `dot_legacy`.

/// `Σ y·w` of a pair of blocks: 64 pair-interleaved activations at `y` (`activation::
/// stored_index`) and the pair's 64 unsigned weight bytes `w` (each < 128) in the same order, as
/// four i32 partial sums (lanes 0 and 1 the first block's, 2 and 3 the second's).
///
/// # Safety
/// `y..y + 64` must be readable.
#[inline(always)]
unsafe fn dot64_pair(w: [v128; 4], y: *const i8) -> v128 {
    // SAFETY: 64 readable bytes at y, by the caller.
    unsafe {
        let acc = i32x4_relaxed_dot_i8x16_i7x16_add(load(y), w[0], i32x4_splat(0));
        let acc = i32x4_relaxed_dot_i8x16_i7x16_add(load(y.add(16)), w[1], acc);
        let acc = i32x4_relaxed_dot_i8x16_i7x16_add(load(y.add(32)), w[2], acc);
        i32x4_relaxed_dot_i8x16_i7x16_add(load(y.add(48)), w[3], acc)
    }
}

/// [`dot64_pair`] summed in i16 first (`Legacy::dot_narrow`): the i16 dot
/// (`i16x8.relaxed_dot_i8x16_i7x16_s`, one `pmaddubsw` on x86) of each 16 weights, the four
/// added in i16 and widened once (`i32x4.extadd_pairwise_i16x8_s`). The same exact sums: an
/// i16 lane adds 8 products of a weight below 32 and an activation of at most 128 in size, at
/// most 8 · 31 · 128 = 31,744.
///
/// # Safety
/// `y..y + 64` must be readable.
#[inline(always)]
unsafe fn dot64_pair_narrow(w: [v128; 4], y: *const i8) -> v128 {
    // SAFETY: 64 readable bytes at y, by the caller.
    unsafe {
        let d = |i: usize| i16x8_relaxed_dot_i8x16_i7x16(load(y.add(16 * i)), w[i]);
        i32x4_extadd_pairwise_i16x8(i16x8_add(i16x8_add(d(0), d(1)), i16x8_add(d(2), d(3))))
    }
}

/// Bytes `0..8` of `a` then of `b`, and bytes `8..16` of `a` then of `b`: two blocks' 16-byte
/// halves in the runs of 8 of a pair.
#[inline(always)]
fn pair_halves(a: v128, b: v128) -> (v128, v128) {
    (i64x2_shuffle::<0, 2>(a, b), i64x2_shuffle::<1, 3>(a, b))
}

/// The 64 four-bit weights of a pair of Q4_0/Q4_1/Q5_0/Q5_1 blocks from their grouped nibbles
/// at `qs` (the first block's field, `super::field`), in pair order: with a partner
/// (`paired`) the two blocks' 32 bytes are already interleaved in runs of 8 (`grouped::PAIRED`);
/// a lone last block is paired with itself from its own 16.
///
/// # Safety
/// The 32 (paired) or 16 bytes at `qs` must be readable.
#[inline(always)]
unsafe fn q4_pair_at(qs: *const u8, paired: bool, m: &Masks) -> [v128; 4] {
    // SAFETY: by the caller.
    unsafe {
        if paired {
            let ((w0, w2), (w1, w3)) = (m.nibbles(load(qs)), m.nibbles(load(qs.add(16))));
            [w0, w1, w2, w3]
        } else {
            let a = load(qs);
            q4_pair(a, a, m)
        }
    }
}

/// The 64 four-bit weights of a pair of Q4_0/Q4_1 blocks from their 16 nibble bytes each, in
/// pair order: byte `j` of a block holds weight `j` (low nibble) and `j + 16` (high), so the
/// low nibbles of bytes `0..8` are run 0, of bytes `8..16` run 1, their high nibbles runs 2, 3.
#[inline(always)]
fn q4_pair(a: v128, b: v128, m: &Masks) -> [v128; 4] {
    let (first8, last8) = pair_halves(a, b);
    let ((w0, w2), (w1, w3)) = (m.nibbles(first8), m.nibbles(last8));
    [w0, w1, w2, w3]
}

/// The 64 five-bit weights of a pair of Q5_0/Q5_1 blocks (`w` their low four bits,
/// [`q4_pair_at`]), unsigned (0..32), in pair order, from the fifth bits at `qh`: with a partner
/// (`paired`) the pair's 8 bytes transposed as `grouped::transpose_fifth_bits` writes them
/// (lane `j` of run `k` takes bit `4 + k` of byte `j`, the first 8 bytes' low nibbles shifted
/// up: a shift and a mask per run), for a lone last block its own `qh` ([`q5_lone`]).
///
/// Against four byte shuffles and compares per pair from the file's `qh` (still the lone
/// block's way), `quant::tests::bench_matvec` in Node's V8 (GMAC/s, best of 40 rounds, two
/// interleaved runs): matvec 576x1536 Q5_0 10.0/10.6 -> 16.2/16.0, Q5_1 9.2/(4.8) -> 15.1/15.1;
/// Gemma 3 270M Q4_K_M (its projections are Q5_0), one thread, decode 36.0 -> 39.5 tok/s in
/// wasmtime, 39.4 -> 42.6 in Chromium (medians of 3 interleaved rounds).
///
/// # Safety
/// The 8 (paired) or 4 bytes at `qh` must be readable.
#[inline(always)]
unsafe fn q5_pair(
    qh: *const u8,
    paired: bool,
    [w0, w1, w2, w3]: [v128; 4],
    m: &Masks,
) -> [v128; 4] {
    if !paired {
        // SAFETY: by the caller.
        return q5_lone(unsafe { v128_load32_splat(qh.cast()) }, [w0, w1, w2, w3], m);
    }
    // SAFETY: by the caller.
    let t = unsafe { v128_load64_splat(qh.cast()) };
    // bit 4 + k of lane l: run k's fifth bit
    let h = i64x2_shuffle::<0, 3>(u16x8_shl(t, 4), t);
    let sixteen = m.bit4;
    // 16-bit shifts carry bits across bytes, below bit 4, which the mask drops
    [
        v128_or(w0, v128_and(h, sixteen)),
        v128_or(w1, v128_and(u16x8_shr(h, 1), sixteen)),
        v128_or(w2, v128_and(u16x8_shr(h, 2), sixteen)),
        v128_or(w3, v128_and(u16x8_shr(h, 3), sixteen)),
    ]
}

/// Bit `k % 8` of lane `k`: with a byte of `qh` in each lane, which weights have their fifth bit.
const LANE_BITS: v128 = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);

/// [`q5_pair`] of a lone last block (`qh` its fifth bits in every i32 lane, as the file has them:
/// byte `k` holds those of its weights `8k..8k + 8`, run `k`), paired with itself.
#[inline(always)]
fn q5_lone(qh: v128, [w0, w1, w2, w3]: [v128; 4], m: &Masks) -> [v128; 4] {
    let sixteen = m.bit4;
    let fifth = |bytes: v128| v128_and(i8x16_eq(v128_and(bytes, LANE_BITS), LANE_BITS), sixteen);
    [
        v128_or(w0, fifth(i8x16_swizzle(qh, u8x16_splat(0)))),
        v128_or(w1, fifth(i8x16_swizzle(qh, u8x16_splat(1)))),
        v128_or(w2, fifth(i8x16_swizzle(qh, u8x16_splat(2)))),
        v128_or(w3, fifth(i8x16_swizzle(qh, u8x16_splat(3)))),
    ]
}

// The five `Legacy` impls below repeat one shape on purpose (see the module doc of `simd128`):
// each is one block layout's unpacking.
pub(super) struct Q4_0;
impl Legacy for Q4_0 {
    const BYTES: usize = 18;
    const MIN_AT: Option<usize> = None;
    const OFFSET_SHIFT: Option<u32> = Some(3);
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(
        group: *const u8,
        count: usize,
        first: usize,
        paired: bool,
        m: &Masks,
    ) -> [v128; 4] {
        // SAFETY: the blocks' nibbles, readable by the caller's contract.
        unsafe {
            let qs = field::<BlockQ4_0, { offset_of!(BlockQ4_0, qs) }>(group, count, first);
            q4_pair_at(qs, paired, m)
        }
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair(w, y) }
    }
    #[inline(always)]
    unsafe fn dot_narrow(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair_narrow(w, y) }
    }
}

pub(super) struct Q4_1;
impl Legacy for Q4_1 {
    const BYTES: usize = 20;
    const MIN_AT: Option<usize> = Some(2);
    const OFFSET_SHIFT: Option<u32> = None;
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(
        group: *const u8,
        count: usize,
        first: usize,
        paired: bool,
        m: &Masks,
    ) -> [v128; 4] {
        // SAFETY: the blocks' nibbles, readable by the caller's contract.
        unsafe {
            let qs = field::<BlockQ4_1, { offset_of!(BlockQ4_1, qs) }>(group, count, first);
            q4_pair_at(qs, paired, m)
        }
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair(w, y) }
    }
    #[inline(always)]
    unsafe fn dot_narrow(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair_narrow(w, y) }
    }
}

pub(super) struct Q5_0;
impl Legacy for Q5_0 {
    const BYTES: usize = 22;
    const MIN_AT: Option<usize> = None;
    const OFFSET_SHIFT: Option<u32> = Some(4);
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(
        group: *const u8,
        count: usize,
        first: usize,
        paired: bool,
        m: &Masks,
    ) -> [v128; 4] {
        // SAFETY: the blocks' fifth bits and nibbles, readable by the caller's contract.
        unsafe {
            let qh = field::<BlockQ5_0, { offset_of!(BlockQ5_0, qh) }>(group, count, first);
            let qs = field::<BlockQ5_0, { offset_of!(BlockQ5_0, qs) }>(group, count, first);
            q5_pair(qh, paired, q4_pair_at(qs, paired, m), m)
        }
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair(w, y) }
    }
    #[inline(always)]
    unsafe fn dot_narrow(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair_narrow(w, y) }
    }
}

pub(super) struct Q5_1;
impl Legacy for Q5_1 {
    const BYTES: usize = 24;
    const MIN_AT: Option<usize> = Some(2);
    const OFFSET_SHIFT: Option<u32> = None;
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(
        group: *const u8,
        count: usize,
        first: usize,
        paired: bool,
        m: &Masks,
    ) -> [v128; 4] {
        // SAFETY: the blocks' fifth bits and nibbles, readable by the caller's contract.
        unsafe {
            let qh = field::<BlockQ5_1, { offset_of!(BlockQ5_1, qh) }>(group, count, first);
            let qs = field::<BlockQ5_1, { offset_of!(BlockQ5_1, qs) }>(group, count, first);
            q5_pair(qh, paired, q4_pair_at(qs, paired, m), m)
        }
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair(w, y) }
    }
    #[inline(always)]
    unsafe fn dot_narrow(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot64_pair_narrow(w, y) }
    }
}

/// Q8_0's weights are signed, and the relaxed dot's second operand must be below 128: so the
/// weights are the first (signed) operand as they are, and the activations the second, split
/// into their positive and negative parts (`activation::split_quants`, both below 128):
/// `Σ w·y = Σ w·max(y, 0) - Σ w·max(-y, 0)`, exact for every weight, -128 included. (Splitting
/// each weight instead, into its low seven bits and its sign, cost an and, a shift and a mask
/// per 16 weights beside the same two dots.)
pub(super) struct Q8_0;
impl Legacy for Q8_0 {
    const BYTES: usize = 34;
    const MIN_AT: Option<usize> = None;
    const OFFSET_SHIFT: Option<u32> = None;
    const SPLIT: bool = true;
    /// The pair's four runs of 16 weight bytes.
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(
        group: *const u8,
        count: usize,
        first: usize,
        paired: bool,
        _: &Masks,
    ) -> [v128; 4] {
        // SAFETY: the blocks' 32 quants each, readable by the caller's contract.
        unsafe {
            let qs = field::<BlockQ8_0, { offset_of!(BlockQ8_0, qs) }>(group, count, first);
            if paired {
                // interleaved in runs of 8 (`grouped::PAIRED`)
                [
                    load(qs),
                    load(qs.add(16)),
                    load(qs.add(32)),
                    load(qs.add(48)),
                ]
            } else {
                let (runs01, runs23) = (
                    pair_halves(load(qs), load(qs)),
                    pair_halves(load(qs.add(16)), load(qs.add(16))),
                );
                [runs01.0, runs01.1, runs23.0, runs23.1]
            }
        }
    }
    /// `y`: the pair's split activations, each 16 as 16 positive then 16 negative parts.
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: 128 readable bytes at y, by the caller.
        unsafe {
            let (mut pos, mut neg) = (i32x4_splat(0), i32x4_splat(0));
            for (i, w) in w.into_iter().enumerate() {
                pos = i32x4_relaxed_dot_i8x16_i7x16_add(w, load(y.add(32 * i)), pos);
                neg = i32x4_relaxed_dot_i8x16_i7x16_add(w, load(y.add(32 * i + 16)), neg);
            }
            i32x4_sub(pos, neg)
        }
    }
    /// Per 16 weights, the i16 dots with the activations' positive and negative parts
    /// subtracted in i16, then widened. One of each lane's two parts is zero, so the
    /// difference is the pair's `w0·y0 + w1·y1`, at most 2 · 128 · 127 = 32,512 in size (each
    /// dot alone too); four of them would not fit.
    #[inline(always)]
    unsafe fn dot_narrow(w: [v128; 4], y: *const i8) -> v128 {
        // SAFETY: 128 readable bytes at y, by the caller.
        unsafe {
            let mut acc = i32x4_splat(0);
            for (i, w) in w.into_iter().enumerate() {
                let pos = i16x8_relaxed_dot_i8x16_i7x16(w, load(y.add(32 * i)));
                let neg = i16x8_relaxed_dot_i8x16_i7x16(w, load(y.add(32 * i + 16)));
                acc = i32x4_add(acc, i32x4_extadd_pairwise_i16x8(i16x8_sub(pos, neg)));
            }
            acc
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The legacy products summed in i16 first, where the engine's i32 dot is slow.

/// What this engine computes for `i32x4.relaxed_dot_i8x16_i7x16_add_s` with 127 in every byte
/// of the first operand and 255 (out of the second's range) in every byte of the second, which
/// tells its lowerings apart (lane 0; inputs hidden from the optimizers):
/// - x86 with AVX-VNNI (V8: one `vpdpbusd`, unsigned × signed, sums in i32): 4 · 255 · 127 =
///   129,540;
/// - x86 without it (V8: `pmaddubsw`, whose i16 pair sums saturate, then `pmaddwd` with a ones
///   vector rebuilt each time, then `paddd`: five instructions): 2 · 32,767 = 65,534;
/// - Arm (`sdot`, or `smull` pairs: both signed, so 255 reads as -1): 4 · -127 = -508.
///
/// Asked once per kernel call (not inlined: a few instructions beside a matrix).
#[inline(never)]
pub(in crate::quant) fn dot_lowering() -> i32 {
    let (a, b) = core::hint::black_box((u8x16_splat(127), u8x16_splat(255)));
    i32x4_extract_lane::<0>(i32x4_relaxed_dot_i8x16_i7x16_add(a, b, i32x4_splat(0)))
}

/// Whether the legacy kernels sum in i16 first (`Legacy::dot_narrow`): where the engine's i32
/// dot is the five-instruction `pmaddubsw` sequence ([`dot_lowering`]; wasmtime's Cranelift
/// too). Chromium 148 with `--js-flags=--no-enable-avx-vnni` (V8's code for x86 CPUs without
/// AVX-VNNI), SmolLM2-135M Q4_1, one thread, 4 interleaved rounds: prefill 150.7-152.0 ->
/// 218.8-225.8 tok/s, decode 53.3-59.6 -> 58.5-61.4; wasmtime prefill 166-173 -> 182-183,
/// decode 55.0-56.0 -> 58.7-59.7. Elsewhere the i32 dots stay: summing in i16 took Chromium
/// with AVX-VNNI (`vpdpbusd`) from prefill 231.5-245.0 to 206.3-219.7 and decode 64.5-68.9 to
/// 60.9-63.1, and Arm's `sdot` is one instruction where the i16 dot is three. (With the choice
/// made per call, AVX-VNNI: prefill 241.8-247.8 -> 238.9-243.1, decode 63.2-71.9 ->
/// 62.0-69.1.)
#[inline(always)]
pub(in crate::quant) fn narrow_dots() -> bool {
    #[cfg(test)]
    match FORCE_DOTS.load(core::sync::atomic::Ordering::Relaxed) {
        1 => return false,
        2 => return true,
        _ => {}
    }
    dot_lowering() == 65_534
}

/// Tests take each way whatever the engine: 1 the i32 dots, 2 the i16 sums (0: the engine's).
/// (The wasm tests run on one thread.)
#[cfg(test)]
pub(in crate::quant) static FORCE_DOTS: core::sync::atomic::AtomicU8 =
    core::sync::atomic::AtomicU8::new(0);

// ---------------------------------------------------------------------------------------------
// K-quants with Q8_K activations. Each sub-block's products are summed in i16 pairs by the
// relaxed dot, then multiplied by the sub-block's scale and summed into i32 by one
// `i32x4.dot_i16x8_s`: the scale costs nothing extra. Each super-block is one exact i32 sum,
// converted to f32 once. Each 64 weights end with a `barrier`.

/// `Σ y·w·scale` of one sub-block of 32 (Q4_K, Q5_K): activations at `y`, unsigned weights
/// below 64 in `w`, the scale in all eight lanes of `scale`; added to `acc`.
///
/// # Safety
/// `y..y + 32` must be readable.
#[inline(always)]
pub(super) unsafe fn dot32_scaled(w: [v128; 2], y: *const i8, scale: v128, acc: v128) -> v128 {
    // SAFETY: 32 readable bytes at y, by the caller.
    unsafe {
        let pairs = i16x8_add(
            i16x8_relaxed_dot_i8x16_i7x16(load(y), w[0]),
            i16x8_relaxed_dot_i8x16_i7x16(load(y.add(16)), w[1]),
        );
        i32x4_add(acc, i32x4_dot_i16x8(pairs, scale))
    }
}

/// `Σ y·w·scale` of two sub-blocks of 16 (Q6_K): activations at `y`, unsigned weights below
/// 64 in `w[i]` with scale `scale[i]` (in all eight lanes), added to `acc`.
///
/// # Safety
/// `y..y + 32` must be readable.
#[inline(always)]
pub(super) unsafe fn dot16x2_scaled(
    w: [v128; 2],
    y: *const i8,
    scale: [v128; 2],
    acc: v128,
) -> v128 {
    // SAFETY: 32 readable bytes at y, by the caller.
    unsafe {
        let first = i16x8_relaxed_dot_i8x16_i7x16(load(y), w[0]);
        let second = i16x8_relaxed_dot_i8x16_i7x16(load(y.add(16)), w[1]);
        i32x4_add(
            acc,
            i32x4_add(
                i32x4_dot_i16x8(first, scale[0]),
                i32x4_dot_i16x8(second, scale[1]),
            ),
        )
    }
}

/// `acc` plus the products of 64 unsigned weights (two sub-blocks of 32, as `chunk` returns
/// them with their two scales) with the 64 activations at `y` (`dot_k4`'s `dot`).
#[inline(always)]
fn dot64((w, s): ([[v128; 2]; 2], [v128; 2]), y: *const i8, acc: v128) -> v128 {
    // SAFETY: dot_k4 passes a pointer to 64 readable activations of the super-block.
    unsafe { dot32_scaled(w[1], y.add(32), s[1], dot32_scaled(w[0], y, s[0], acc)) }
}

/// Sub-block scales `2j` and `2j + 1` of a Q4_K/Q5_K super-block, each in all eight i16 lanes.
#[inline(always)]
fn scale_pair(scales: &[u8; 8], j: usize) -> [v128; 2] {
    [
        i16x8_splat(scales[2 * j] as i16),
        i16x8_splat(scales[2 * j + 1] as i16),
    ]
}

// Q4_K and Q5_K over `dot_k4`: alike on purpose but for the fifth bit (see `simd128`).
#[inline(never)]
pub(in crate::quant) fn dot_q4_k<const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
) {
    if T > 1 {
        return vector_by_vector(w, rb, xs, y, dot_q4_k::<1>);
    }
    let m = Masks::opaque();
    dot_k4::<144, T, _>(
        w,
        rb,
        xs,
        y,
        // SAFETY: dot_k4 passes a whole super-block.
        |blk, scales, j| (unsafe { q4k_weights(blk, j, &m) }, scale_pair(scales, j)),
        dot64,
    )
}

/// Weights `64j..64j + 64` of the Q4_K super-block at `blk` as two sub-blocks of 32 unsigned
/// bytes (`[s][i]`: sub-block `2j + s`, weights `16i..16i + 16` of it).
///
/// # Safety
/// The super-block's 144 bytes must be readable.
#[inline(always)]
pub(super) unsafe fn q4k_weights(blk: *const u8, j: usize, m: &Masks) -> [[v128; 2]; 2] {
    // SAFETY: the nibbles lie at 16..144, by the caller.
    let [qa, qb] = unsafe { k4_nibbles(blk, 16, j) };
    let ((a_low, a_high), (b_low, b_high)) = (m.nibbles(qa), m.nibbles(qb));
    [[a_low, b_low], [a_high, b_high]]
}

/// Bit `bit` (0..8) of each byte of `h`, moved to bit 4 (the fifth bit of a weight).
#[inline(always)]
fn bit_to_fifth(h: v128, bit: usize, m: &Masks) -> v128 {
    // 16-bit shifts by at most 4: bit 4 of each byte receives a bit of the same byte.
    let moved = if bit <= 4 {
        u16x8_shl(h, (4 - bit) as u32)
    } else {
        u16x8_shr(h, (bit - 4) as u32)
    };
    v128_and(moved, m.bit4)
}

#[inline(never)]
pub(in crate::quant) fn dot_q5_k<const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
) {
    if T > 1 {
        return vector_by_vector(w, rb, xs, y, dot_q5_k::<1>);
    }
    let m = Masks::opaque();
    dot_k4::<176, T, _>(
        w,
        rb,
        xs,
        y,
        // SAFETY: dot_k4 passes a whole super-block.
        |blk, scales, j| (unsafe { q5k_weights(blk, j, &m) }, scale_pair(scales, j)),
        dot64,
    )
}

/// [`q4k_weights`] of a Q5_K super-block (176 bytes readable at `blk`).
///
/// # Safety
/// The super-block's 176 bytes must be readable.
#[inline(always)]
pub(super) unsafe fn q5k_weights(blk: *const u8, j: usize, m: &Masks) -> [[v128; 2]; 2] {
    // SAFETY: fifth bits at 16..48, nibbles at 48..176, by the caller.
    let ([qa, qb], [ha, hb]) = unsafe { (k4_nibbles(blk, 48, j), q5k_fifth_bits(blk)) };
    let ((a_low, a_high), (b_low, b_high)) = (m.nibbles(qa), m.nibbles(qb));
    [
        [
            v128_or(a_low, bit_to_fifth(ha, 2 * j, m)),
            v128_or(b_low, bit_to_fifth(hb, 2 * j, m)),
        ],
        [
            v128_or(a_high, bit_to_fifth(ha, 2 * j + 1, m)),
            v128_or(b_high, bit_to_fifth(hb, 2 * j + 1, m)),
        ],
    ]
}

/// Q6_K over `dot_q6k`. Sub-blocks are 16 weights; weights `128h + 32k + l` (l in 0..32) are
/// sub-blocks `8h + 2k` and `8h + 2k + 1`.
#[inline(never)]
pub(in crate::quant) fn dot_q6_k<const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
) {
    if T > 1 {
        return vector_by_vector(w, rb, xs, y, dot_q6_k::<1>);
    }
    dot_q6k(w, rb, xs, y, |blk, h, scales, y, sumi| {
        let mut scratch = [i32x4_splat(0); T];
        // SAFETY: dot_q6k passes a whole super-block (its repacked quants at 0..192) and its
        // vectors' 256 activations.
        unsafe {
            // quads[c][m]: weights 128h + 32c + 16m + (0..16)
            let (first, second) = (
                q6k_quarters(blk.add(96 * h)),
                q6k_quarters(blk.add(96 * h + 48)),
            );
            let quads: [[v128; 2]; 4] = core::array::from_fn(|c| [first[c], second[c]]);
            for k in 0..4 {
                // weights 128h + 32k + (0..32): sub-blocks 8h + 2k and 8h + 2k + 1
                let s = q6_scales(scales, k);
                for t in 0..T {
                    sumi[t] = dot16x2_scaled(quads[k], y[t].add(128 * h + 32 * k), s, sumi[t]);
                }
                if k % 2 == 1 {
                    for t in 0..T {
                        barrier(&mut scratch[t], sumi[t]);
                    }
                }
            }
        }
    })
}

/// Scales `2k` and `2k + 1` of the eight i16 scales `s`, each in all eight lanes.
#[inline(always)]
fn q6_scales(s: v128, k: usize) -> [v128; 2] {
    match k {
        0 => [broadcast_i16::<0>(s), broadcast_i16::<1>(s)],
        1 => [broadcast_i16::<2>(s), broadcast_i16::<3>(s)],
        2 => [broadcast_i16::<4>(s), broadcast_i16::<5>(s)],
        _ => [broadcast_i16::<6>(s), broadcast_i16::<7>(s)],
    }
}

/// Lane `L` of an i16x8 in all eight lanes.
#[inline(always)]
fn broadcast_i16<const L: usize>(v: v128) -> v128 {
    i16x8_shuffle::<L, L, L, L, L, L, L, L>(v, v)
}
