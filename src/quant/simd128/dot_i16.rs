//! The integer kernels of the SIMD128 build: the weights unpacked to i16 lanes in the
//! activations' pair-interleaved order (`activation.rs`) and multiplied with
//! `i32x4.dot_i16x8_s` (x86 `pmaddwd`). The relaxed-SIMD build replaces this file with
//! `dot_i8.rs`.

// See the parent module for why the loops over `T` index arrays in lockstep.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;
use core::mem::offset_of;

use super::*;
use crate::quant::q4::{BlockQ4_0, BlockQ4_1};
use crate::quant::q5::{BlockQ5_0, BlockQ5_1};
use crate::quant::q8::BlockQ8_0;

// ---------------------------------------------------------------------------------------------
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 with Q8_0/Q8_1 activations, through the shared `dot_legacy`: each
// block's 32 weights as four i16x8 in the activations' storage order (evens then odds of weights
// 0..16, evens then odds of weights 16..32), signed, so no offset is left for later.

/// Whether the legacy kernels sum in i16 first: the relaxed build's choice (`dot_i8`); this
/// build's products are i16 dots already, so there is one way, and `dot_legacy` one copy.
#[inline(always)]
pub(super) fn narrow_dots() -> bool {
    false
}

/// The sum of four i16 dot products of `w0..w3` with the 32 activations at `y`.
///
/// # Safety
/// `y..y + 32` must be readable.
#[inline(always)]
unsafe fn dot32(w: [v128; 4], y: *const i16) -> v128 {
    // SAFETY: 32 i16 = 64 readable bytes at y, by the caller.
    unsafe {
        i32x4_add(
            i32x4_add(
                i32x4_dot_i16x8(w[0], load(y)),
                i32x4_dot_i16x8(w[1], load(y.add(8))),
            ),
            i32x4_add(
                i32x4_dot_i16x8(w[2], load(y.add(16))),
                i32x4_dot_i16x8(w[3], load(y.add(24))),
            ),
        )
    }
}

/// The lane masks that unpack 4- and 5-bit weights, as a kernel holds them: [`Masks::opaque`]
/// once before its loops (the relaxed build's `dot_i8::Masks` says why). `bench_matvec` in
/// Node 24 (two interleaved runs): matvec 576x1536 Q5_0 6.93/6.92 -> 7.09/7.09 GMAC/s, Q5_1
/// 7.22/7.22 -> 7.46/7.71, Q5_K 6.66/6.48 -> 6.88/7.25, the others the same; modules 2.5 KB
/// smaller.
#[derive(Clone, Copy)]
pub(super) struct Masks {
    /// `0x000f` in every i16 lane: a lane's low nibble.
    low4: v128,
    /// `0x0010` (16) in every i16 lane: a weight's fifth bit.
    bit4: v128,
    /// `0x88` in every byte: flips the top bit of both nibbles.
    nibble_tops: v128,
}

impl Masks {
    const CONST: Masks = Masks {
        low4: u16x8(0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f),
        bit4: u16x8(0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10),
        nibble_tops: u16x8(
            0x8888, 0x8888, 0x8888, 0x8888, 0x8888, 0x8888, 0x8888, 0x8888,
        ),
    };

    /// The same values, hidden from the optimizers.
    #[inline(always)]
    pub(super) fn opaque() -> Masks {
        core::hint::black_box(Masks::CONST)
    }
}

/// The 32 nibbles of 16 bytes as four i16x8 in storage order, unsigned (0..16).
#[inline(always)]
fn nibbles_unsigned(v: v128, m: &Masks) -> [v128; 4] {
    let low4 = m.low4;
    [
        v128_and(v, low4),               // low nibble of even bytes: weights 0, 2, .., 14
        v128_and(u16x8_shr(v, 8), low4), // low nibble of odd bytes: weights 1, 3, .., 15
        v128_and(u16x8_shr(v, 4), low4), // high nibble of even bytes: weights 16, 18, .., 30
        u16x8_shr(v, 12),                // high nibble of odd bytes: weights 17, 19, .., 31
    ]
}

/// Bit `2k` (even) and bit `2k + 1` (odd) of lane `k`, as lane masks.
const EVEN_BITS: v128 = i16x8(
    1 << 0,
    1 << 2,
    1 << 4,
    1 << 6,
    1 << 8,
    1 << 10,
    1 << 12,
    1 << 14,
);
const ODD_BITS: v128 = i16x8(
    1 << 1,
    1 << 3,
    1 << 5,
    1 << 7,
    1 << 9,
    1 << 11,
    1 << 13,
    i16::MIN,
);

/// Which of the 32 weights of a Q5 block have their fifth bit *clear*: all-ones lanes, in
/// storage order (as [`nibbles_unsigned`]). (Testing for clear bits is one compare; testing for
/// set bits is rewritten by LLVM into a not-equal, three instructions on x86.)
#[inline(always)]
fn fifth_bits_clear(qh: u32) -> [v128; 4] {
    let low = u16x8_splat(qh as u16); // bits of weights 0..16
    let high = u16x8_splat((qh >> 16) as u16); // bits of weights 16..32
    let zero = u16x8_splat(0);
    let clear = |bits: v128, mask: v128| i16x8_eq(v128_and(bits, mask), zero);
    [
        clear(low, EVEN_BITS),
        clear(low, ODD_BITS),
        clear(high, EVEN_BITS),
        clear(high, ODD_BITS),
    ]
}

/// The fifth bits of block `i` of the group of `count` Q5 blocks (`B`, its `qh` at byte `QH`)
/// at `group`, as 0 or 16 in four i16x8 in storage order. A block with a partner reads the
/// pair's transposed bits (`grouped::transpose_fifth_bits`: lane `j` of vector `k` takes bit
/// `k` of byte `j`, the partner bit `4 + k`), widened to u16 lanes by the load: a shift and a
/// mask per vector. A lone last block reads its own `qh` ([`fifth_bits_clear`]).
///
/// Against splats and compares from every block's own `qh` (now only the lone block's way),
/// `quant::tests::bench_matvec` in Node's V8 (GMAC/s, best of 40 rounds, two interleaved
/// runs): matvec 576x1536 Q5_0 8.2/8.6 -> 9.9/9.2, Q5_1 6.7/6.7 -> 10.2/9.5; Gemma 3 270M
/// Q4_K_M (Q5_0 projections), one thread, wasmtime, decode 32.7 -> 34.0 tok/s (medians of 3
/// interleaved rounds, every round higher).
///
/// # Safety
/// The group's `count` blocks must be readable, and `i < count`.
#[inline(always)]
unsafe fn fifth_bits<B: Grouped, const QH: usize>(
    group: *const u8,
    count: usize,
    i: usize,
    m: &Masks,
) -> [v128; 4] {
    let sixteen = m.bit4;
    // SAFETY: the pair's 8 bytes of fifth bits, or the lone block's 4, by the caller.
    unsafe {
        if (i | 1) < count {
            let t = u16x8_load_extend_u8x8(field::<B, QH>(group, count, i & !1));
            // 16-bit lanes hold one byte each: no bit crosses into another lane
            core::array::from_fn(|k| {
                let moved = match i % 2 {
                    0 => u16x8_shl(t, 4 - k as u32),
                    _ => u16x8_shr(t, k as u32),
                };
                v128_and(moved, sixteen)
            })
        } else {
            let qh = field::<B, QH>(group, count, i)
                .cast::<u32>()
                .read_unaligned();
            fifth_bits_clear(qh).map(|clear| v128_andnot(sixteen, clear))
        }
    }
}

// The five `Legacy` impls below repeat one shape on purpose: each is one block layout's weight
// decoding (where its scale, minimum, fifth bits and quants sit, and how the offset applies),
// the only part of `dot_legacy` that differs per type, written per type so each reads against
// its block struct and compiles to straight-line SIMD with no per-type branch.
pub(super) struct Q4_0;
impl Legacy for Q4_0 {
    const BYTES: usize = 18;
    const MIN_AT: Option<usize> = None;
    const OFFSET_SHIFT: Option<u32> = None;
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(group: *const u8, count: usize, i: usize, m: &Masks) -> [v128; 4] {
        // SAFETY: the block's nibbles, readable by the caller's contract.
        let v = unsafe {
            load(field::<BlockQ4_0, { offset_of!(BlockQ4_0, qs) }>(
                group, count, i,
            ))
        };
        // q - 8 as a signed 4-bit value is q ^ 8; sign-extend each nibble with shifts.
        let v = v128_xor(v, m.nibble_tops);
        [
            i16x8_shr(i16x8_shl(v, 12), 12),
            i16x8_shr(i16x8_shl(v, 4), 12),
            i16x8_shr(i16x8_shl(v, 8), 12),
            i16x8_shr(v, 12),
        ]
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i16) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot32(w, y) }
    }
}

pub(super) struct Q4_1;
impl Legacy for Q4_1 {
    const BYTES: usize = 20;
    const MIN_AT: Option<usize> = Some(2);
    const OFFSET_SHIFT: Option<u32> = None;
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(group: *const u8, count: usize, i: usize, m: &Masks) -> [v128; 4] {
        // SAFETY: the block's nibbles, readable by the caller's contract.
        nibbles_unsigned(
            unsafe {
                load(field::<BlockQ4_1, { offset_of!(BlockQ4_1, qs) }>(
                    group, count, i,
                ))
            },
            m,
        )
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i16) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot32(w, y) }
    }
}

pub(super) struct Q5_0;
impl Legacy for Q5_0 {
    const BYTES: usize = 22;
    const MIN_AT: Option<usize> = None;
    const OFFSET_SHIFT: Option<u32> = None;
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(group: *const u8, count: usize, i: usize, m: &Masks) -> [v128; 4] {
        // SAFETY: the block's fifth bits and nibbles, readable by the caller's contract.
        let (fifth, v) = unsafe {
            (
                fifth_bits::<BlockQ5_0, { offset_of!(BlockQ5_0, qh) }>(group, count, i, m),
                load(field::<BlockQ5_0, { offset_of!(BlockQ5_0, qs) }>(
                    group, count, i,
                )),
            )
        };
        let low = nibbles_unsigned(v, m);
        core::array::from_fn(|k| i16x8_sub(v128_or(low[k], fifth[k]), m.bit4))
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i16) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot32(w, y) }
    }
}

pub(super) struct Q5_1;
impl Legacy for Q5_1 {
    const BYTES: usize = 24;
    const MIN_AT: Option<usize> = Some(2);
    const OFFSET_SHIFT: Option<u32> = None;
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(group: *const u8, count: usize, i: usize, m: &Masks) -> [v128; 4] {
        // SAFETY: the block's fifth bits and nibbles, readable by the caller's contract.
        let (fifth, v) = unsafe {
            (
                fifth_bits::<BlockQ5_1, { offset_of!(BlockQ5_1, qh) }>(group, count, i, m),
                load(field::<BlockQ5_1, { offset_of!(BlockQ5_1, qs) }>(
                    group, count, i,
                )),
            )
        };
        let low = nibbles_unsigned(v, m);
        core::array::from_fn(|k| v128_or(low[k], fifth[k]))
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i16) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot32(w, y) }
    }
}

pub(super) struct Q8_0;
impl Legacy for Q8_0 {
    const BYTES: usize = 34;
    const MIN_AT: Option<usize> = None;
    const OFFSET_SHIFT: Option<u32> = None;
    type Weights = [v128; 4];
    #[inline(always)]
    unsafe fn weights(group: *const u8, count: usize, i: usize, _: &Masks) -> [v128; 4] {
        // SAFETY: the block's 32 quants, readable by the caller's contract.
        let (a, b) = unsafe {
            let qs = field::<BlockQ8_0, { offset_of!(BlockQ8_0, qs) }>(group, count, i);
            (load(qs), load(qs.add(16)))
        };
        // even bytes: sign-extend the low byte of each lane; odd bytes: the high byte
        [
            i16x8_shr(i16x8_shl(a, 8), 8),
            i16x8_shr(a, 8),
            i16x8_shr(i16x8_shl(b, 8), 8),
            i16x8_shr(b, 8),
        ]
    }
    #[inline(always)]
    unsafe fn dot(w: [v128; 4], y: *const i16) -> v128 {
        // SAFETY: by the caller.
        unsafe { dot32(w, y) }
    }
}

// ---------------------------------------------------------------------------------------------
// K-quants with Q8_K activations: the sub-block scales multiply the weights in i16 (exact:
// |q·sc| <= 31·63 for Q4_K/Q5_K, 32·128 for Q6_K), so each super-block is one exact i32 sum
// whatever the number of vectors, converted to f32 once. Each 64 weights end with a `barrier`.

/// `acc` plus the products of 64 weights (prescaled by their sub-block scales, evens then odds
/// as `chunk` returns them) with the 64 activations at `y` (`dot_k4`'s `dot`).
#[inline(always)]
fn dot64(w: [[v128; 4]; 2], y: *const i16, acc: v128) -> v128 {
    // SAFETY: dot_k4 passes a pointer to 64 readable activations of the super-block.
    unsafe { i32x4_add(acc, i32x4_add(dot32(w[0], y), dot32(w[1], y.add(32)))) }
}

/// Weights `64j..64j + 64` of the Q4_K super-block at `blk` times their sub-block scales
/// (`scales`: the super-block's eight), as `dot64` takes them: `[0]` weights `64j..64j + 32`,
/// `[1]` the next 32, each as four i16x8 in the activations' stored order (exact: |q·sc| <=
/// 15·63).
///
/// # Safety
/// `blk` is a whole 144-byte super-block (nibbles at 16..144), `j < 4`.
#[inline(always)]
pub(super) unsafe fn q4k_chunk(
    blk: *const u8,
    scales: &[u8; 8],
    j: usize,
    m: &Masks,
) -> [[v128; 4]; 2] {
    let low4 = m.low4;
    // SAFETY: by the caller.
    let [qa, qb] = unsafe { k4_nibbles(blk, 16, j) };
    let s_low = u16x8_splat(scales[2 * j] as u16);
    let s_high = u16x8_splat(scales[2 * j + 1] as u16);
    [
        [
            i16x8_mul(v128_and(qa, low4), s_low),
            i16x8_mul(v128_and(u16x8_shr(qa, 8), low4), s_low),
            i16x8_mul(v128_and(qb, low4), s_low),
            i16x8_mul(v128_and(u16x8_shr(qb, 8), low4), s_low),
        ],
        [
            i16x8_mul(v128_and(u16x8_shr(qa, 4), low4), s_high),
            i16x8_mul(u16x8_shr(qa, 12), s_high),
            i16x8_mul(v128_and(u16x8_shr(qb, 4), low4), s_high),
            i16x8_mul(u16x8_shr(qb, 12), s_high),
        ],
    ]
}

/// [`q4k_chunk`] of a Q5_K super-block (176 bytes: fifth bits at 16..48, nibbles at 48..176;
/// exact: |q·sc| <= 31·63).
///
/// # Safety
/// `blk` is a whole 176-byte super-block, `j < 4`.
#[inline(always)]
pub(super) unsafe fn q5k_chunk(
    blk: *const u8,
    scales: &[u8; 8],
    j: usize,
    m: &Masks,
) -> [[v128; 4]; 2] {
    let Masks { low4, bit4, .. } = *m;
    // SAFETY: by the caller.
    let ([qa, qb], [ha, hb]) = unsafe { (k4_nibbles(blk, 48, j), q5k_fifth_bits(blk)) };
    // Shifted so that bits 0/1 of each byte are bits 2j/2j + 1 (of the low and the high byte of
    // each u16 lane alike).
    let (ha, hb) = (u16x8_shr(ha, 2 * j as u32), u16x8_shr(hb, 2 * j as u32));
    let s_low = u16x8_splat(scales[2 * j] as u16);
    let s_high = u16x8_splat(scales[2 * j + 1] as u16);
    let even = |q: v128, h: v128, shift: u32| {
        v128_or(
            v128_and(u16x8_shr(q, shift), low4),
            v128_and(i16x8_shl(h, 4 - shift / 4), bit4),
        )
    };
    [
        [
            i16x8_mul(even(qa, ha, 0), s_low),
            i16x8_mul(
                v128_or(
                    v128_and(u16x8_shr(qa, 8), low4),
                    v128_and(u16x8_shr(ha, 4), bit4),
                ),
                s_low,
            ),
            i16x8_mul(even(qb, hb, 0), s_low),
            i16x8_mul(
                v128_or(
                    v128_and(u16x8_shr(qb, 8), low4),
                    v128_and(u16x8_shr(hb, 4), bit4),
                ),
                s_low,
            ),
        ],
        [
            i16x8_mul(even(qa, ha, 4), s_high),
            i16x8_mul(
                v128_or(u16x8_shr(qa, 12), v128_and(u16x8_shr(ha, 5), bit4)),
                s_high,
            ),
            i16x8_mul(even(qb, hb, 4), s_high),
            i16x8_mul(
                v128_or(u16x8_shr(qb, 12), v128_and(u16x8_shr(hb, 5), bit4)),
                s_high,
            ),
        ],
    ]
}

// Q4_K and Q5_K over `dot_k4`: alike on purpose but for the fifth bit (see the module doc).
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
    // SAFETY: dot_k4 passes a whole 144-byte super-block and j < 4.
    dot_k4::<144, T, _>(
        w,
        rb,
        xs,
        y,
        |blk, scales, j| unsafe { q4k_chunk(blk, scales, j, &m) },
        dot64,
    )
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
    // SAFETY: dot_k4 passes a whole 176-byte super-block and j < 4.
    dot_k4::<176, T, _>(
        w,
        rb,
        xs,
        y,
        |blk, scales, j| unsafe { q5k_chunk(blk, scales, j, &m) },
        dot64,
    )
}

/// Lane `L` of an i16x8 in all eight lanes.
#[inline(always)]
fn broadcast_i16<const L: usize>(v: v128) -> v128 {
    i16x8_shuffle::<L, L, L, L, L, L, L, L>(v, v)
}

/// 64 weights of a Q6_K super-block (`128h + 32k + 16·L16 + (0..16)`, k in 0..4: its repacked
/// group `2h + L16`) times each vector, added to `sumi`.
///
/// # Safety
/// `blk` is a whole 210-byte super-block; `y[t]` points at vector t's 256 activations of it.
#[inline(always)]
unsafe fn q6_chunk<const L16: usize, const T: usize>(
    blk: *const u8,
    h: usize,
    scales: v128,
    y: &[*const i16; T],
    sumi: &mut [v128; T],
) {
    // SAFETY: the group's 48 bytes lie in the block's quants (0..192); activation offsets < 256.
    unsafe {
        let w = q6k_scaled::<L16>(blk, h, scales);
        for k in 0..4 {
            for t in 0..T {
                let y = y[t].add(128 * h + 32 * k + 16 * L16);
                let p = i32x4_add(
                    i32x4_dot_i16x8(w[k][0], load(y)),
                    i32x4_dot_i16x8(w[k][1], load(y.add(8))),
                );
                sumi[t] = i32x4_add(sumi[t], p);
            }
        }
    }
}

/// The 64 weights of [`q6_chunk`] (`128h + 32k + 16·L16 + (0..16)`: `[k]`, evens then odds in
/// the activations' stored order) times their sub-block scales (`scales`: the half's eight, as
/// i16), unsigned 0..64 before (exact: |q·sc| <= 63·128).
///
/// # Safety
/// `blk` is a whole 210-byte super-block, `h < 2`.
#[inline(always)]
pub(super) unsafe fn q6k_scaled<const L16: usize>(
    blk: *const u8,
    h: usize,
    scales: v128,
) -> [[v128; 2]; 4] {
    let low_byte = u16x8_splat(0x00ff);
    // SAFETY: the group's 48 bytes lie in the block's quants (0..192).
    let quads = unsafe { q6k_quarters(blk.add(96 * h + 48 * L16)) };
    // quad k is sub-block 8h + L16 + 2k: lane L16 + 2k of `scales` (the half's 8 scales)
    let s = if L16 == 0 {
        [
            broadcast_i16::<0>(scales),
            broadcast_i16::<2>(scales),
            broadcast_i16::<4>(scales),
            broadcast_i16::<6>(scales),
        ]
    } else {
        [
            broadcast_i16::<1>(scales),
            broadcast_i16::<3>(scales),
            broadcast_i16::<5>(scales),
            broadcast_i16::<7>(scales),
        ]
    };
    core::array::from_fn(|k| {
        [
            i16x8_mul(v128_and(quads[k], low_byte), s[k]),
            i16x8_mul(u16x8_shr(quads[k], 8), s[k]),
        ]
    })
}

/// Q6_K over `dot_q6k`: each half as four chunks of 16 weights from each quarter.
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
        // SAFETY: dot_q6k passes a whole super-block and its vectors' activations.
        unsafe {
            q6_chunk::<0, T>(blk, h, scales, y, sumi);
            for t in 0..T {
                barrier(&mut scratch[t], sumi[t]);
            }
            q6_chunk::<1, T>(blk, h, scales, y, sumi);
            for t in 0..T {
                barrier(&mut scratch[t], sumi[t]);
            }
        }
    })
}
