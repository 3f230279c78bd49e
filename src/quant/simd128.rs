//! wasm SIMD128 kernels: one weight row times `T` activation vectors (`T` = 1 for a
//! matrix-vector product, up to 4 for a batch, so a decoded weight block is used `T` times).
//!
//! SIMD128 has no int8 dot product. The closest is `i32x4.dot_i16x8_s` (x86 `pmaddwd`): eight
//! i16 products summed in adjacent pairs into four exact i32. The activations are already i16
//! (widened once per vector, `activation.rs`) and pair-interleaved: within each 16 values, the
//! even-indexed 8 then the odd-indexed 8. So 16 weight bytes viewed as eight i16 lanes split
//! into "even bytes" `(v << 8) >> 8` and "odd bytes" `v >> 8`, and 16 bytes of nibbles into four
//! vectors with 16-bit shifts and masks — no byte widening at all. Every integer sum is exact;
//! it becomes f32 once per block (legacy types) or super-block (K-quants).
//!
//! What V8 makes of the code matters as much as the instruction count (checked with
//! `node --print-wasm-code`): x86 has 16 vector registers and V8's allocator spills readily,
//! and once a loop-carried accumulator lives on the stack a block costs several times more.
//! Hence: one f32 accumulator per vector where possible (four legacy blocks' sums transposed
//! into one vector), shuffle patterns V8 recognises, few live constants, and a volatile store
//! ([`barrier`], or the scratch in `legacy_group`) after each block or 64 weights. V8 orders
//! wasm memory accesses only among themselves, so without a store in between it hoists every
//! load of an unrolled group to the top and spills them.
//!
//! Each kernel reads only the bytes of its row and of the activation slices it is given: the
//! slice lengths are asserted once per call (`check_activations*`), and the `unsafe` blocks
//! are the unchecked loads inside those bounds.
//!
//! Deliberate repetition: the per-type entry points (`dot_f32`/`dot_f16`/`dot_bf16`, the five
//! `dot_q*_0/1` with their `Legacy` impls, `dot_q4_k`/`dot_q5_k`) have the shape of each other.
//! The shared loop is written once (`dot_float`, `dot_legacy`, `dot_k4`); what each repeats is
//! its own block layout's loads and unpacking, kept per type (and `#[inline(never)]` per type)
//! so each compiles to straight-line SIMD with no per-type branch in the loop.

// The loops over `T` (vectors in a tile) and `STEPS` index several arrays in lockstep, and V8's
// code for them is tuned (see the scratch-store comments); iterator rewrites would read worse
// and risk that codegen.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;

use super::activation::ActRow;
use super::half::f16_to_f32;

/// Reads a `v128` from `p` (any alignment).
///
/// # Safety
/// `p..p + 16` must be readable.
#[inline(always)]
unsafe fn load<T>(p: *const T) -> v128 {
    // SAFETY: the caller guarantees 16 readable bytes; wasm loads have no alignment requirement.
    unsafe { v128_load(p.cast::<v128>()) }
}

#[inline(always)]
fn hsum_f32(v: v128) -> f32 {
    let v = f32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let v = f32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
    f32x4_extract_lane::<0>(v)
}

/// The f16 scale at `row[at..at + 2]`.
#[inline(always)]
fn f16_at(row: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([row[at], row[at + 1]]))
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

// ---------------------------------------------------------------------------------------------
// F32, F16, BF16: f32 products (the activations are already rounded to the weight format).

/// 4 binary16 values (in the low half of u32 lanes) -> f32x4, exact (subnormals, infinities,
/// NaN).
#[inline(always)]
fn f16x4_to_f32(h: v128) -> v128 {
    let magnitude = v128_and(h, u32x4_splat(0x7fff));
    let sign = i32x4_shl(v128_xor(h, magnitude), 16);
    // normal: rebias the exponent by 112; subnormal: m * 2^-24 (exact, and no f32 subnormal
    // ever enters an arithmetic instruction); infinity/NaN: force the exponent to all ones.
    let normal = i32x4_add(i32x4_shl(magnitude, 13), u32x4_splat(112 << 23));
    let subnormal = f32x4_mul(
        f32x4_convert_i32x4(magnitude),
        f32x4_splat(1.0 / 16_777_216.0),
    );
    let is_subnormal = i32x4_lt(magnitude, i32x4_splat(0x0400));
    let is_special = i32x4_gt(magnitude, i32x4_splat(0x7bff));
    let value = v128_bitselect(subnormal, normal, is_subnormal);
    v128_or(
        v128_or(value, v128_and(is_special, u32x4_splat(0x7f80_0000))),
        sign,
    )
}

/// 8 binary16 values (u16 lanes) -> two f32x4, exact for every value (subnormals, infinities,
/// NaN). Each value is moved to the top half of a lane (sign at bit 31), its exponent and
/// mantissa shifted into f32 position and multiplied by 2^112 to rebias the exponent; f16
/// subnormals come out exact (f32 arithmetic on subnormals is exact). Only an infinity or NaN
/// can reach 2^16, and those get the all-ones exponent back. Shifts stand in for mask
/// constants, so the kernel's accumulators keep their registers.
#[inline(always)]
pub(super) fn f16x8_to_f32(h: v128) -> (v128, v128) {
    #[inline(always)]
    fn four(top: v128) -> v128 {
        let magnitude = u32x4_shr(i32x4_shl(top, 1), 4);
        let value = f32x4_mul(magnitude, f32x4_splat(f32::from_bits((127 + 112) << 23))); // 2^112
        let special = i32x4_gt(value, u32x4_splat(0x477f_ffff)); // >= 2^16
        let exponent = i32x4_shl(u32x4_shr(special, 24), 23); // 0x7f80_0000 where special
        let sign = i32x4_shl(u32x4_shr(top, 31), 31);
        v128_or(v128_or(value, exponent), sign)
    }
    let (low, high) = bf16x8_to_f32(h); // the same move to the top half of each lane
    (four(low), four(high))
}

/// 8 bfloat16 values (u16 lanes) -> two f32x4: each value moves to the top half of a lane.
/// (Written as the canonical interleave of zero and `h`, which V8 emits as one
/// `punpcklwd`/`punpckhwd`; other lane patterns for the same result cost five instructions.)
#[inline(always)]
fn bf16x8_to_f32(h: v128) -> (v128, v128) {
    let zero = u16x8_splat(0);
    (
        i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(zero, h),
        i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(zero, h),
    )
}

/// Shared body of the float kernels over `n` weights, `8·STEPS` weights per iteration with two
/// partial sums per step: `weights8(i)` returns weights `8i..8i + 8` as two f32x4 (only called
/// for whole groups of 8), `weight(j)` weight `j`. F32 and BF16 take two steps; F16, whose
/// conversion needs more registers, one (more would make V8 spill the partial sums).
#[inline(always)]
fn dot_float<const T: usize, const STEPS: usize>(
    n: usize,
    xs: &[ActRow<'_>; T],
    weights8: impl Fn(usize) -> (v128, v128),
    weight: impl Fn(usize) -> f32,
) -> [f32; T] {
    for x in xs {
        assert!(x.values.len() >= n);
    }
    let mut acc = [[[f32x4_splat(0.0); 2]; STEPS]; T];
    let mut i = 0;
    while i + 8 * STEPS <= n {
        for step in 0..STEPS {
            let (w0, w1) = weights8(i / 8 + step);
            for t in 0..T {
                // SAFETY: i + 8·STEPS <= n <= values.len() (asserted above).
                unsafe {
                    let x = xs[t].values.as_ptr().add(i + 8 * step);
                    acc[t][step][0] = f32x4_add(acc[t][step][0], f32x4_mul(w0, load(x)));
                    acc[t][step][1] = f32x4_add(acc[t][step][1], f32x4_mul(w1, load(x.add(4))));
                }
            }
        }
        i += 8 * STEPS;
    }
    core::array::from_fn(|t| {
        let mut total = f32x4_splat(0.0);
        for step in acc[t] {
            total = f32x4_add(total, f32x4_add(step[0], step[1]));
        }
        let mut sum = hsum_f32(total);
        for j in i..n {
            sum += weight(j) * xs[t].values[j];
        }
        sum
    })
}

// One entry point per element type over `dot_float` (deliberately alike: see the module doc).
#[inline(never)]
pub(super) fn dot_f32<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    let n = row.len() / 4;
    let p = row.as_ptr();
    dot_float::<T, 2>(
        n,
        xs,
        // SAFETY: only called with 8i + 8 <= n, so bytes 32i..32i + 32 lie in `row`.
        |i| unsafe { (load(p.add(32 * i)), load(p.add(32 * i + 16))) },
        |j| f32::from_le_bytes([row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]]),
    )
}

#[inline(never)]
pub(super) fn dot_f16<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    let n = row.len() / 2;
    let p = row.as_ptr();
    dot_float::<T, 1>(
        n,
        xs,
        // SAFETY: only called with 8i + 8 <= n, so bytes 16i..16i + 16 lie in `row`.
        |i| f16x8_to_f32(unsafe { load(p.add(16 * i)) }),
        |j| f16_at(row, 2 * j),
    )
}

#[inline(never)]
pub(super) fn dot_bf16<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    let n = row.len() / 2;
    let p = row.as_ptr();
    dot_float::<T, 2>(
        n,
        xs,
        // SAFETY: only called with 8i + 8 <= n, so bytes 16i..16i + 16 lie in `row`.
        |i| bf16x8_to_f32(unsafe { load(p.add(16 * i)) }),
        |j| super::half::bf16_to_f32(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])),
    )
}

// ---------------------------------------------------------------------------------------------
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 with Q8_0/Q8_1 activations: blocks of 32, f32 once per block.
//
// Blocks go four at a time: the four f16 scales (and minimums) become f32 in one vector, and the
// four blocks' i32 partial sums are transposed into one vector whose lane k is block k's sum.
// So each vector needs a single f32x4 accumulator (lane k gathers blocks k, k + 4, ..), and the
// few live registers keep V8 from spilling a loop-carried value to the stack.

/// How one legacy block type is read.
trait Legacy {
    /// Block size in bytes.
    const BYTES: usize;
    /// Byte offset of the f16 minimum (Q4_1, Q5_1; they take Q8_1 activations with sums).
    const MIN_AT: Option<usize>;
    /// The 32 weights of the block at `blk`, as four i16x8 in the activation's storage order:
    /// evens then odds of weights 0..16, evens then odds of weights 16..32.
    ///
    /// # Safety
    /// `blk..blk + BYTES` must be readable.
    unsafe fn weights(blk: *const u8) -> [v128; 4];
}

/// Asserts that every activation vector covers `n_blocks` blocks of 32 values (and their
/// scales and sums), so the unchecked loads below stay inside the slices.
#[inline(always)]
fn check_activations<const T: usize>(xs: &[ActRow<'_>; T], n_blocks: usize, sums: bool) {
    for x in xs {
        assert!(x.quants.len() >= n_blocks * 32 && x.scales.len() >= n_blocks);
        assert!(!sums || x.sums.len() >= n_blocks);
    }
}

/// `[Σ a, Σ b, Σ c, Σ d]` of four i32x4 vectors.
#[inline(always)]
fn transpose_sum(v: [v128; 4]) -> v128 {
    let ab = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]),
        i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]),
    );
    let cd = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]),
        i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]),
    );
    i32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(ab, cd),
        i32x4_shuffle::<2, 3, 6, 7>(ab, cd),
    )
}

/// `count` (1..=4) f16 values at `p`, `p + stride`, .. as f32x4 (missing lanes 0).
///
/// # Safety
/// The `count` pairs of bytes must be readable.
#[inline(always)]
unsafe fn gather_f16x4(p: *const u8, stride: usize, count: usize) -> v128 {
    // SAFETY: only the `count` values the caller vouches for are read. Each u16 goes to the low
    // half of an i32 lane.
    let h = unsafe {
        let mut h = u32x4_splat(0);
        h = v128_load16_lane::<0>(h, p.cast());
        if count > 1 {
            h = v128_load16_lane::<2>(h, p.add(stride).cast());
        }
        if count > 2 {
            h = v128_load16_lane::<4>(h, p.add(2 * stride).cast());
        }
        if count > 3 {
            h = v128_load16_lane::<6>(h, p.add(3 * stride).cast());
        }
        h
    };
    f16x4_to_f32(h)
}

/// `count` (1..=4) f32 at `p` as f32x4 (missing lanes 0).
///
/// # Safety
/// `p..p + count` must be readable.
#[inline(always)]
unsafe fn gather_f32x4(p: *const f32, count: usize) -> v128 {
    // SAFETY: only `count` values are read.
    unsafe {
        if count == 4 {
            return load(p);
        }
        let mut v = f32x4_splat(0.0);
        v = v128_load32_lane::<0>(v, p.cast());
        if count > 1 {
            v = v128_load32_lane::<1>(v, p.add(1).cast());
        }
        if count > 2 {
            v = v128_load32_lane::<2>(v, p.add(2).cast());
        }
        v
    }
}

/// The shared body of the legacy kernels.
#[inline(always)]
fn dot_legacy<L: Legacy, const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    debug_assert!(row.len().is_multiple_of(L::BYTES));
    let n_blocks = row.len() / L::BYTES;
    check_activations(xs, n_blocks, L::MIN_AT.is_some());
    let mut acc = [f32x4_splat(0.0); T];
    let mut b = 0;
    while b + 4 <= n_blocks {
        // SAFETY: b + 4 <= n_blocks.
        unsafe { legacy_group::<L, T>(row, xs, &mut acc, b, 4) };
        b += 4;
    }
    if b < n_blocks {
        // SAFETY: b + (n_blocks - b) <= n_blocks.
        unsafe { legacy_group::<L, T>(row, xs, &mut acc, b, n_blocks - b) };
    }
    core::array::from_fn(|t| hsum_f32(acc[t]))
}

/// Blocks `first..first + count` (`count` 1..=4) of `row` times each vector, into `acc`.
/// Always inlined, so the main loop's `count = 4` is a constant.
///
/// # Safety
/// `first + count` must not exceed the blocks of `row`, which `check_activations` has checked
/// against `xs`.
#[inline(always)]
unsafe fn legacy_group<L: Legacy, const T: usize>(
    row: &[u8],
    xs: &[ActRow<'_>; T],
    acc: &mut [v128; T],
    first: usize,
    count: usize,
) {
    // SAFETY: blocks first..first + count lie in `row` and their activations in `xs`.
    unsafe {
        let blk = row.as_ptr().add(first * L::BYTES);
        let d = gather_f16x4(blk, L::BYTES, count);
        let m = match L::MIN_AT {
            Some(at) => gather_f16x4(blk.add(at), L::BYTES, count),
            None => f32x4_splat(0.0),
        };
        // sums[t][k]: block first + k times vector t. Each block's sums are stored to this
        // scratch before the next block is loaded: V8 orders memory accesses only among
        // themselves, and without a store in between it would hoist all four blocks' loads to
        // the top of the group and spill most of them. (A volatile store is one instruction.)
        let mut scratch = [[u32x4_splat(0); 4]; T];
        for k in 0..count {
            let w = L::weights(blk.add(k * L::BYTES));
            for t in 0..T {
                let sum = dot32(w, xs[t].quants.as_ptr().add(32 * (first + k)));
                core::ptr::write_volatile(&mut scratch[t][k], sum);
            }
        }
        let sums: [[v128; 4]; T] = core::array::from_fn(|t| {
            core::array::from_fn(|k| {
                // SAFETY: a plain local.
                core::ptr::read_volatile(&scratch[t][k])
            })
        });
        for t in 0..T {
            let dy = gather_f32x4(xs[t].scales.as_ptr().add(first), count);
            let mut a = f32x4_add(
                acc[t],
                f32x4_mul(
                    f32x4_convert_i32x4(transpose_sum(sums[t])),
                    f32x4_mul(d, dy),
                ),
            );
            if L::MIN_AT.is_some() {
                a = f32x4_add(
                    a,
                    f32x4_mul(m, gather_f32x4(xs[t].sums.as_ptr().add(first), count)),
                );
            }
            acc[t] = a;
        }
    }
}

/// The 32 nibbles of 16 bytes as four i16x8 in storage order, unsigned (0..16).
#[inline(always)]
fn nibbles_unsigned(v: v128) -> [v128; 4] {
    let low4 = u16x8_splat(0x000f);
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

// The five `Legacy` impls below repeat one shape on purpose: each is one block layout's weight
// decoding (where its scale, minimum, fifth bits and quants sit, and how the offset applies),
// the only part of `dot_legacy` that differs per type, written per type so each reads against
// its block struct and compiles to straight-line SIMD with no per-type branch.
struct Q4_0;
impl Legacy for Q4_0 {
    const BYTES: usize = 18;
    const MIN_AT: Option<usize> = None;
    #[inline(always)]
    unsafe fn weights(blk: *const u8) -> [v128; 4] {
        // SAFETY: nibbles at 2..18 of the block, readable by the caller's contract.
        let v = unsafe { load(blk.add(2)) };
        // q - 8 as a signed 4-bit value is q ^ 8; sign-extend each nibble with shifts.
        let v = v128_xor(v, u8x16_splat(0x88));
        [
            i16x8_shr(i16x8_shl(v, 12), 12),
            i16x8_shr(i16x8_shl(v, 4), 12),
            i16x8_shr(i16x8_shl(v, 8), 12),
            i16x8_shr(v, 12),
        ]
    }
}

struct Q4_1;
impl Legacy for Q4_1 {
    const BYTES: usize = 20;
    const MIN_AT: Option<usize> = Some(2);
    #[inline(always)]
    unsafe fn weights(blk: *const u8) -> [v128; 4] {
        // SAFETY: nibbles at 4..20 of the block, readable by the caller's contract.
        nibbles_unsigned(unsafe { load(blk.add(4)) })
    }
}

struct Q5_0;
impl Legacy for Q5_0 {
    const BYTES: usize = 22;
    const MIN_AT: Option<usize> = None;
    #[inline(always)]
    unsafe fn weights(blk: *const u8) -> [v128; 4] {
        // SAFETY: qh at 2..6, nibbles at 6..22 of the block, readable by the caller's contract.
        let (qh, v) = unsafe { (blk.add(2).cast::<u32>().read_unaligned(), load(blk.add(6))) };
        let (low, clear) = (nibbles_unsigned(v), fifth_bits_clear(qh));
        // q - 16 = low - (16 where the fifth bit is clear)
        let sixteen = u16x8_splat(16);
        core::array::from_fn(|k| i16x8_sub(low[k], v128_and(sixteen, clear[k])))
    }
}

struct Q5_1;
impl Legacy for Q5_1 {
    const BYTES: usize = 24;
    const MIN_AT: Option<usize> = Some(2);
    #[inline(always)]
    unsafe fn weights(blk: *const u8) -> [v128; 4] {
        // SAFETY: qh at 4..8, nibbles at 8..24 of the block, readable by the caller's contract.
        let (qh, v) = unsafe { (blk.add(4).cast::<u32>().read_unaligned(), load(blk.add(8))) };
        let (low, clear) = (nibbles_unsigned(v), fifth_bits_clear(qh));
        let sixteen = u16x8_splat(16);
        core::array::from_fn(|k| v128_or(low[k], v128_andnot(sixteen, clear[k])))
    }
}

struct Q8_0;
impl Legacy for Q8_0 {
    const BYTES: usize = 34;
    const MIN_AT: Option<usize> = None;
    #[inline(always)]
    unsafe fn weights(blk: *const u8) -> [v128; 4] {
        // SAFETY: quants at 2..34 of the block, readable by the caller's contract.
        let (a, b) = unsafe { (load(blk.add(2)), load(blk.add(18))) };
        // even bytes: sign-extend the low byte of each lane; odd bytes: the high byte
        [
            i16x8_shr(i16x8_shl(a, 8), 8),
            i16x8_shr(a, 8),
            i16x8_shr(i16x8_shl(b, 8), 8),
            i16x8_shr(b, 8),
        ]
    }
}

// One entry point per legacy type over `dot_legacy` (deliberately alike: see the module doc).
#[inline(never)]
pub(super) fn dot_q4_0<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    dot_legacy::<Q4_0, T>(row, xs)
}
#[inline(never)]
pub(super) fn dot_q4_1<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    dot_legacy::<Q4_1, T>(row, xs)
}
#[inline(never)]
pub(super) fn dot_q5_0<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    dot_legacy::<Q5_0, T>(row, xs)
}
#[inline(never)]
pub(super) fn dot_q5_1<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    dot_legacy::<Q5_1, T>(row, xs)
}
#[inline(never)]
pub(super) fn dot_q8_0<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    dot_legacy::<Q8_0, T>(row, xs)
}

/// Reads the f16 at `p` (2 readable bytes).
#[inline(always)]
unsafe fn f16_ptr(p: *const u8) -> f32 {
    // SAFETY: 2 readable bytes at p, by the caller.
    f16_to_f32(unsafe { p.cast::<u16>().read_unaligned() })
}

/// Stores `v` to `scratch` with a volatile store: a memory effect V8 must keep in place, so the
/// loads of the next chunk of work cannot be hoisted above it (see `legacy_group`).
#[inline(always)]
fn barrier(scratch: &mut v128, v: v128) {
    // SAFETY: `scratch` is a valid, exclusive reference.
    unsafe { core::ptr::write_volatile(scratch, v) };
}

// ---------------------------------------------------------------------------------------------
// K-quants with Q8_K activations: the sub-block scales multiply the weights in i16 (exact:
// |q·sc| <= 31·63 for Q4_K/Q5_K, 32·128 for Q6_K), so each super-block is one exact i32 sum
// whatever the number of vectors, converted to f32 once. Each 64 weights end with a `barrier`.

/// Asserts that every activation vector covers `n_blocks` super-blocks.
#[inline(always)]
fn check_activations_k<const T: usize>(xs: &[ActRow<'_>; T], n_blocks: usize) {
    for x in xs {
        assert!(
            x.quants.len() >= n_blocks * 256
                && x.scales.len() >= n_blocks
                && x.bsums.len() >= n_blocks * 16
        );
    }
}

/// Scales and mins of a Q4_K/Q5_K super-block from its 12 packed bytes at `p`: the 8 scales as
/// bytes, and the 8 mins as two i16x8 with each min twice (`[m0, m0, m1, m1, ..]`), ready for a
/// dot product with the 16 bsums.
///
/// # Safety
/// `p..p + 12` must be readable.
#[inline(always)]
unsafe fn scales_mins_k4(p: *const u8) -> ([u8; 8], [v128; 2]) {
    // SAFETY: 12 readable bytes, by the caller.
    let (a, b, c) = unsafe {
        (
            p.cast::<u32>().read_unaligned(),
            p.add(4).cast::<u32>().read_unaligned(),
            p.add(8).cast::<u32>().read_unaligned(),
        )
    };
    let sc_low = a & 0x3f3f_3f3f;
    let sc_high = (c & 0x0f0f_0f0f) | ((a >> 2) & 0x3030_3030);
    let m_low = b & 0x3f3f_3f3f;
    let m_high = ((c >> 4) & 0x0f0f_0f0f) | ((b >> 2) & 0x3030_3030);
    let scales = (sc_low as u64 | (sc_high as u64) << 32).to_le_bytes();
    let mins = u64x2_splat(m_low as u64 | (m_high as u64) << 32);
    let twice = u8x16_shuffle::<0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7>(mins, mins);
    (
        scales,
        [
            u16x8_extend_low_u8x16(twice),
            u16x8_extend_high_u8x16(twice),
        ],
    )
}

/// The shared body of Q4_K and Q5_K: `chunk(blk, j)` returns the 64 weights `64j..64j + 64` of
/// the super-block at `blk` (`BYTES` long, scales at 4..16), times their sub-block scales, as
/// two groups of four i16x8 in storage order.
#[inline(always)]
fn dot_k4<const BYTES: usize, const T: usize>(
    row: &[u8],
    xs: &[ActRow<'_>; T],
    chunk: impl Fn(*const u8, &[u8; 8], usize) -> [[v128; 4]; 2],
) -> [f32; T] {
    debug_assert!(row.len().is_multiple_of(BYTES));
    let n_blocks = row.len() / BYTES;
    check_activations_k(xs, n_blocks);
    let mut acc = [f32x4_splat(0.0); T];
    for b in 0..n_blocks {
        // SAFETY: super-block b is bytes BYTES·b..BYTES·(b + 1) of `row` (d, dmin at 0..4,
        // packed scales at 4..16); activation reads are in bounds (check_activations_k).
        unsafe {
            let blk = row.as_ptr().add(BYTES * b);
            let (d, dmin) = (f16_ptr(blk), f16_ptr(blk.add(2)));
            let (scales, mins) = scales_mins_k4(blk.add(4));
            let mut sumi = [i32x4_splat(0); T];
            let mut scratch = [i32x4_splat(0); T];
            for j in 0..4 {
                let [w_low, w_high] = chunk(blk, &scales, j);
                for t in 0..T {
                    let y = xs[t].quants.as_ptr().add(256 * b + 64 * j);
                    let s = i32x4_add(dot32(w_low, y), dot32(w_high, y.add(32)));
                    sumi[t] = i32x4_add(sumi[t], s);
                    barrier(&mut scratch[t], sumi[t]);
                }
            }
            for t in 0..T {
                // Σ_j m_j·(bsums[2j] + bsums[2j + 1]), still as four i32 lanes
                let bsums = xs[t].bsums.as_ptr().add(16 * b);
                let m = i32x4_add(
                    i32x4_dot_i16x8(load(bsums), mins[0]),
                    i32x4_dot_i16x8(load(bsums.add(8)), mins[1]),
                );
                let dy = *xs[t].scales.get_unchecked(b);
                let scaled = f32x4_mul(f32x4_convert_i32x4(sumi[t]), f32x4_splat(dy * d));
                let min = f32x4_mul(f32x4_convert_i32x4(m), f32x4_splat(dy * dmin));
                acc[t] = f32x4_add(acc[t], f32x4_sub(scaled, min));
            }
        }
    }
    core::array::from_fn(|t| hsum_f32(acc[t]))
}

// Q4_K and Q5_K over `dot_k4`: alike on purpose but for the fifth bit (see the module doc).
#[inline(never)]
pub(super) fn dot_q4_k<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    let low4 = u16x8_splat(0x000f);
    dot_k4::<144, T>(row, xs, |blk, scales, j| {
        // SAFETY: nibbles at 16..144 of the 144-byte super-block. Byte l of qa (l < 16) and of
        // qb (l >= 16) holds weight 64j + l in its low nibble (scale 2j) and 64j + 32 + l in
        // its high nibble (scale 2j + 1).
        let (qa, qb) = unsafe { (load(blk.add(16 + 32 * j)), load(blk.add(32 + 32 * j))) };
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
    })
}

#[inline(never)]
pub(super) fn dot_q5_k<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    let low4 = u16x8_splat(0x000f);
    let bit4 = u16x8_splat(0x0010);
    dot_k4::<176, T>(row, xs, |blk, scales, j| {
        // SAFETY: fifth bits at 16..48 and nibbles at 48..176 of the 176-byte super-block.
        // Byte l of qh, bit i: fifth bit of weight 32i + l.
        let (qa, qb, ha, hb) = unsafe {
            (
                load(blk.add(48 + 32 * j)),
                load(blk.add(64 + 32 * j)),
                load(blk.add(16)),
                load(blk.add(32)),
            )
        };
        // Shifted so that bits 0/1 of each byte are bits 2j/2j + 1 (of the low and the high
        // byte of each u16 lane alike).
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
    })
}

/// Lane `L` of an i16x8 in all eight lanes.
#[inline(always)]
fn broadcast_i16<const L: usize>(v: v128) -> v128 {
    i16x8_shuffle::<L, L, L, L, L, L, L, L>(v, v)
}

/// 64 weights of a Q6_K super-block (half `h`, bytes `16·L16..16·L16 + 16` of each of its ql
/// and qh rows) times each vector, added to `sumi`.
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
    let low4 = u8x16_splat(0x0f);
    let bits45 = u8x16_splat(0x30);
    let low_byte = u16x8_splat(0x00ff);
    // SAFETY: ql at 0..128, qh at 128..192 of the block; activation offsets < 256.
    unsafe {
        // 16 bytes each of ql[l], ql[l + 32], qh[l] for l in 16·L16..16·L16 + 16
        let a = load(blk.add(64 * h + 16 * L16));
        let c = load(blk.add(64 * h + 32 + 16 * L16));
        let high = load(blk.add(128 + 32 * h + 16 * L16));
        // 16-bit shifts are fine here: every result is masked per byte.
        let quads = [
            v128_or(v128_and(a, low4), v128_and(i16x8_shl(high, 4), bits45)),
            v128_or(v128_and(c, low4), v128_and(i16x8_shl(high, 2), bits45)),
            v128_or(v128_and(u16x8_shr(a, 4), low4), v128_and(high, bits45)),
            v128_or(
                v128_and(u16x8_shr(c, 4), low4),
                v128_and(u16x8_shr(high, 2), bits45),
            ),
        ];
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
        for k in 0..4 {
            // 16 weights 128h + 32k + 16·L16 + (0..16), all with scale s[k]
            let even = i16x8_mul(v128_and(quads[k], low_byte), s[k]);
            let odd = i16x8_mul(u16x8_shr(quads[k], 8), s[k]);
            for t in 0..T {
                let y = y[t].add(128 * h + 32 * k + 16 * L16);
                let p = i32x4_add(
                    i32x4_dot_i16x8(even, load(y)),
                    i32x4_dot_i16x8(odd, load(y.add(8))),
                );
                sumi[t] = i32x4_add(sumi[t], p);
            }
        }
    }
}

/// Q6_K: the 6-bit values are used unsigned (0..64) and the `-32` comes back once per
/// super-block as `32·Σ_j sc_j·bsum_j`, exact in i32 (|Σ| < 2^29 either way).
#[inline(never)]
pub(super) fn dot_q6_k<const T: usize>(row: &[u8], xs: &[ActRow<'_>; T]) -> [f32; T] {
    debug_assert!(row.len().is_multiple_of(210));
    let n_blocks = row.len() / 210;
    check_activations_k(xs, n_blocks);
    let mut acc = [f32x4_splat(0.0); T];
    for b in 0..n_blocks {
        // SAFETY: super-block b is bytes 210b..210b + 210 of `row`: ql at 0..128, qh at
        // 128..192, scales at 192..208, d at 208..210; activation reads are in bounds
        // (check_activations_k).
        unsafe {
            let blk = row.as_ptr().add(210 * b);
            let d = f16_ptr(blk.add(208));
            let scales8 = load(blk.add(192));
            // the 16 scales as i16: sub-blocks 0..8 and 8..16
            let scales = [
                i16x8_extend_low_i8x16(scales8),
                i16x8_extend_high_i8x16(scales8),
            ];
            let y: [*const i16; T] = core::array::from_fn(|t| xs[t].quants.as_ptr().add(256 * b));
            let mut sumi = [i32x4_splat(0); T];
            let mut scratch = [i32x4_splat(0); T];
            for h in 0..2 {
                q6_chunk::<0, T>(blk, h, scales[h], &y, &mut sumi);
                for t in 0..T {
                    barrier(&mut scratch[t], sumi[t]);
                }
                q6_chunk::<1, T>(blk, h, scales[h], &y, &mut sumi);
                for t in 0..T {
                    barrier(&mut scratch[t], sumi[t]);
                }
            }
            for t in 0..T {
                let bsums = xs[t].bsums.as_ptr().add(16 * b);
                let offset = i32x4_add(
                    i32x4_dot_i16x8(load(bsums), scales[0]),
                    i32x4_dot_i16x8(load(bsums.add(8)), scales[1]),
                );
                let sum = i32x4_sub(sumi[t], i32x4_shl(offset, 5));
                let dy = *xs[t].scales.get_unchecked(b);
                acc[t] = f32x4_add(
                    acc[t],
                    f32x4_mul(f32x4_convert_i32x4(sum), f32x4_splat(d * dy)),
                );
            }
        }
    }
    core::array::from_fn(|t| hsum_f32(acc[t]))
}
