//! wasm SIMD128 kernels: one weight row times `T` activation vectors (`T` = 1 for a
//! matrix-vector product, up to 4 for a batch, so a decoded weight block is used `T` times).
//! The integer types' batches (all of them but the relaxed build's Q8_0) take the prepared
//! rows instead (`prepared.rs`, `prepared_k.rs`: two rows at a time against tiles of four
//! vectors), so their entry points serve one vector ([`vector_by_vector`]).
//!
//! Two builds, one of these two integer kernel files each (the float kernels are shared):
//!
//! - SIMD128 (`simd128/dot_i16.rs`): SIMD128 has no int8 dot product. The closest is
//!   `i32x4.dot_i16x8_s` (x86 `pmaddwd`): eight i16 products summed in adjacent pairs into four
//!   exact i32. The activations are already i16 (widened once per vector, `activation.rs`) and
//!   pair-interleaved: within each 16 values, the even-indexed 8 then the odd-indexed 8. So 16
//!   weight bytes viewed as eight i16 lanes split into "even bytes" `(v << 8) >> 8` and "odd
//!   bytes" `v >> 8`, and 16 bytes of nibbles into four vectors with 16-bit shifts and masks — no
//!   byte widening at all.
//! - relaxed SIMD (`simd128/dot_i8.rs`, `dist/wasmind-relaxed*.wasm`): i8 activations and
//!   weights unpacked to unsigned bytes, multiplied by `i16x8.relaxed_dot_i8x16_i7x16_s` /
//!   `i32x4.relaxed_dot_i8x16_i7x16_add_s` (one `vpdpbusd` in V8 on x86 with AVX-VNNI). Half the
//!   activation bytes and half the unpacking. The legacy types' activations interleave each pair
//!   of blocks in runs of 8, so one dot product's four lanes serve two blocks (`legacy_group`).
//!   Where the engine's i32 dot is x86's five-instruction `pmaddubsw` sequence, the legacy
//!   kernels sum in i16 first instead (`dot_i8::narrow_dots`): the same exact sums.
//!
//! In both every integer sum is exact, the same number, and becomes f32 once per block (legacy
//! types) or super-block (K-quants). The K-quants add their f32 products in the same order in
//! both builds; the legacy types in a different one (`legacy_group`: each build takes the order
//! its engines run fastest), so the builds' logits differ slightly. The loops over blocks are
//! shared (`dot_legacy`, `dot_k4`, `dot_q6k`); each build supplies how a block is unpacked and
//! multiplied.
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
//! `dot_q*_0/1` with their `Legacy` impls, `dot_q4_k`/`dot_q5_k`) have the shape of each other,
//! and each build's unpacking starts with the same loads of the same block layout. The shared
//! loop is written once (`dot_float`, `dot_legacy`, `dot_k4`, `dot_q6k`); what each repeats is
//! its own block layout's loads and unpacking, kept per type (and `#[inline(never)]` per type)
//! so each compiles to straight-line SIMD with no per-type branch in the loop.

// The loops over `T` (vectors in a tile) index several arrays in lockstep, and V8's
// code for them is tuned (see the scratch-store comments); iterator rewrites would read worse
// and risk that codegen.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;

use super::activation::{ActRow, Quant};
use super::grouped::{self, Grouped};
use super::half::f16_to_f32;
use super::{Out, for_rows};

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

// ---------------------------------------------------------------------------------------------
// F32, F16, BF16: f32 products (the activations are already rounded to the weight format).

/// The 8 finite binary16 weights at `p` -> two f32x4, exact (subnormals included): two
/// sign-extending loads and [`f16_sext_finite_to_f32`], 8 instructions for 8 values (the
/// conversion that handles infinities and NaN took 18). An infinity or NaN would come out as a
/// large finite number: F16 matrices are checked finite at load (`quant::check_matrix`).
///
/// # Safety
/// 16 bytes at `p` must be readable.
#[inline(always)]
pub(super) unsafe fn f16x8_finite_to_f32(p: *const u8, k: &F16Bits) -> (v128, v128) {
    // SAFETY: by the caller, bytes p..p + 16 are readable.
    unsafe {
        (
            f16_sext_finite_to_f32(i32x4_load_extend_i16x4(p.cast()), k),
            f16_sext_finite_to_f32(i32x4_load_extend_i16x4(p.add(8).cast()), k),
        )
    }
}

/// The masks and factor of the f16 conversion. [`F16Bits::CONST`] are plain constants; a
/// kernel that converts inside a loop takes [`F16Bits::opaque`] once before it instead: V8
/// materializes a vector constant at each use inside a loop (three instructions: `movabs`,
/// `movq`, `punpcklqdq`), while a value it cannot see through stays in a register (or is one
/// load from the stack). LLVM turns shift pairs into these masks too, so shifts do not help.
#[derive(Clone, Copy)]
pub struct F16Bits {
    /// `half::F16_SCALED_MASK`: the sign bit, exponent and mantissa of a sign-extended f16
    /// shifted left by 13 (clears the three copies of the sign below the top bit).
    signed_magnitude: v128,
    /// `half::F16_REBIAS` (2^112): rebiases the exponent.
    rebias: v128,
}

impl F16Bits {
    pub const CONST: F16Bits = F16Bits {
        signed_magnitude: {
            let m = super::half::F16_SCALED_MASK;
            u32x4(m, m, m, m)
        },
        rebias: {
            let r = super::half::F16_REBIAS.to_bits();
            u32x4(r, r, r, r)
        },
    };

    /// The same values, hidden from the optimizers (see the type's doc).
    #[inline(always)]
    pub fn opaque() -> F16Bits {
        core::hint::black_box(F16Bits::CONST)
    }
}

/// `out[i] = round_to_f16(xs[i])`, four at a time (see [`round_to_f16x4`]), the tail one by
/// one.
#[inline(never)]
pub(super) fn round_slice_to_f16(out: &mut [f32], xs: &[f32]) {
    assert_eq!(out.len(), xs.len());
    let n4 = xs.len() / 4 * 4;
    for i in (0..n4).step_by(4) {
        // SAFETY: i + 4 <= n4 <= both lengths.
        unsafe {
            let r = round_to_f16x4(load(xs.as_ptr().add(i)));
            v128_store(out.as_mut_ptr().add(i).cast::<v128>(), r);
        }
    }
    super::activation::round_slice_to_f16_ref(&mut out[n4..], &xs[n4..]);
}

/// f32x4 rounded to the nearest binary16 values (ties to even), as f32: [`round_to_f16`]'s
/// result for every input. In the f16 normal range the 13 low mantissa bits are rounded away
/// in the integer bits (a carry bumps the exponent, as it should); below it the step is the
/// fixed 2^-24, which adding and taking away 0.5 rounds to (0.5's ulp is 2^-24, ties to even
/// as the f16 subnormal's last bit); from 65520 up the result is infinity; a NaN keeps its
/// sign and the top 9 bits of its payload, made quiet (`round_to_f16`'s NaN).
///
/// [`round_to_f16`]: super::half::round_to_f16
#[inline(always)]
fn round_to_f16x4(x: v128) -> v128 {
    let sign = v128_and(x, u32x4_splat(0x8000_0000));
    let abs = v128_and(x, u32x4_splat(0x7fff_ffff));
    let odd = v128_and(u32x4_shr(abs, 13), u32x4_splat(1));
    let normal = v128_and(
        i32x4_add(abs, i32x4_add(u32x4_splat(0x0fff), odd)),
        u32x4_splat(0xffff_e000),
    );
    let half = f32x4_splat(0.5);
    let subnormal = f32x4_sub(f32x4_add(abs, half), half);
    // The compares are signed, which is right for abs (below 2^31 in every lane).
    let small = i32x4_lt(abs, u32x4_splat(0x3880_0000));
    let mut r = v128_bitselect(subnormal, normal, small);
    let overflow = i32x4_ge(abs, u32x4_splat(0x477f_f000));
    r = v128_bitselect(u32x4_splat(0x7f80_0000), r, overflow);
    let nan = i32x4_gt(abs, u32x4_splat(0x7f80_0000));
    let quiet = v128_and(
        v128_or(abs, u32x4_splat(0x7fc0_0000)),
        u32x4_splat(0x7fff_e000),
    );
    r = v128_bitselect(quiet, r, nan);
    v128_or(r, sign)
}

/// 4 binary16 values, sign-extended to i32 lanes, -> f32x4, for finite values only (3
/// instructions; an infinity or NaN would come out as a large finite number): for the legacy
/// blocks' scales and minimums, which the loader has checked are finite
/// (`quant::check_matrix`). Subnormals stay exact. Shifted left by 13, a lane holds the f16's
/// sign in its top bit, three copies of it below (which the mask clears), then exponent and
/// mantissa where an f32 has them, rebiased by the multiply by 2^112 (which keeps the sign).
/// A sign-extending load (`v128.load16x4_s`, one instruction) gives the lanes, so no zero
/// register is needed to move values to the top half.
#[inline(always)]
pub fn f16_sext_finite_to_f32(lanes: v128, k: &F16Bits) -> v128 {
    f32x4_mul(f16_sext_scaled(lanes, k), k.rebias)
}

/// [`half::f16_finite_scaled`](super::half::f16_finite_scaled) of 4 binary16 values,
/// sign-extended to i32 lanes: each finite value over 2^112, exact (two instructions).
#[inline(always)]
pub fn f16_sext_scaled(lanes: v128, k: &F16Bits) -> v128 {
    v128_and(i32x4_shl(lanes, 13), k.signed_magnitude)
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

/// `a * b + c` lane by lane: in the relaxed build `f32x4.relaxed_madd`, one fused multiply-add
/// where the engine has one (x86's FMA3, Arm's FMLA), else a multiply and an add as in the
/// SIMD128 build.
#[inline(always)]
pub fn madd(a: v128, b: v128, c: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    return f32x4_relaxed_madd(a, b, c);
    #[cfg(not(target_feature = "relaxed-simd"))]
    f32x4_add(c, f32x4_mul(a, b))
}

/// Shared body of the float kernels: `Kernels::dot` over the rows of `w` (`rb` bytes, `n`
/// weights each), 8 weights per iteration: `weights8(row, i)` returns weights `8i..8i + 8` of
/// `row` as two f32x4 (only called for whole groups of 8), `weight(row, j)` weight `j`.
///
/// Each vector keeps two partial sums (the first and the second four of every group of 8), the
/// same for every type and tile size: F16 sums as F32 does, so a row converted to f32 first
/// gives the same bits (`f16_batch`), and a vector's sums do not depend on its tile. Two, not
/// four: a tile of four vectors then holds eight accumulators, which V8 keeps in registers
/// (with four each it spilled them in every iteration). Measured against four partial sums
/// with tiles of two (one thread, interleaved): all-MiniLM-L6-v2 (F16, converted rows in tiles
/// of 4), 40 corpus texts, 4.07 / 4.01 / 4.37 -> 5.80 / 5.86 / 5.96 texts/s in Node (SIMD128),
/// 4.76 / 5.07 / 5.10 -> 5.67 / 5.60 / 4.62 in wasmtime (relaxed, the multiply-adds fused);
/// `quant::tests::bench_matvec` in Node, matmul x16 F32 8.5-8.7 -> 9.4 GMAC/s, BF16 8.9 -> 9.8,
/// F16 7.7-7.9 -> 8.5; matvec (one vector, two chains of additions where there were four)
/// 1-3 % slower for F32 and F16, up to 10 % for BF16.
#[inline(always)]
fn dot_float<const T: usize>(
    w: &[u8],
    rb: usize,
    n: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
    weights8: impl Fn(*const u8, usize) -> (v128, v128),
    weight: impl Fn(&[u8], usize) -> f32,
) {
    for x in xs {
        assert!(x.values.len() >= n);
    }
    for_rows(
        w,
        rb,
        y,
        #[inline(always)]
        |row| -> [f32; T] {
            let mut acc = [[f32x4_splat(0.0); 2]; T];
            let mut i = 0;
            while i + 8 <= n {
                let (w0, w1) = weights8(row.as_ptr(), i / 8);
                for t in 0..T {
                    // SAFETY: i + 8 <= n <= values.len() (asserted above).
                    let x = unsafe { values8(xs[t].values.as_ptr().add(i)) };
                    float_step(&mut acc[t], (w0, w1), x);
                }
                i += 8;
            }
            core::array::from_fn(|t| {
                float_sum(acc[t], (i..n).map(|j| weight(row, j) * xs[t].values[j]))
            })
        },
    )
}

/// The eight f32 at `p`, as two vectors.
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline(always)]
unsafe fn values8(p: *const f32) -> (v128, v128) {
    // SAFETY: by the caller.
    unsafe { (load(p), load(p.add(4))) }
}

/// One step of [`dot_float`]'s sums (and of every kernel that must give its bits): eight
/// weights `w` times eight values `x`, the first four into partial sum 0, the second into 1.
#[inline(always)]
fn float_step(acc: &mut [v128; 2], (w0, w1): (v128, v128), (x0, x1): (v128, v128)) {
    acc[0] = madd(w0, x0, acc[0]);
    acc[1] = madd(w1, x1, acc[1]);
}

/// [`dot_float`]'s result from its partial sums: the two added and folded, then the products
/// past the last whole eight added one by one.
#[inline(always)]
fn float_sum(acc: [v128; 2], tail: impl Iterator<Item = f32>) -> f32 {
    tail.fold(hsum_f32(f32x4_add(acc[0], acc[1])), |sum, p| sum + p)
}

// One entry point per element type over `dot_float` (deliberately alike: see the module doc).
#[inline(never)]
pub(super) fn dot_f32<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    dot_float::<T>(
        w,
        rb,
        rb / 4,
        xs,
        y,
        // SAFETY: only called with 8i + 8 <= n, so bytes 32i..32i + 32 lie in the row.
        |p, i| unsafe { (load(p.add(32 * i)), load(p.add(32 * i + 16))) },
        |row, j| f32::from_le_bytes([row[4 * j], row[4 * j + 1], row[4 * j + 2], row[4 * j + 3]]),
    )
}

#[inline(never)]
pub(super) fn dot_f16<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    let k = F16Bits::opaque();
    dot_float::<T>(
        w,
        rb,
        rb / 2,
        xs,
        y,
        // SAFETY: only called with 8i + 8 <= n, so bytes 16i..16i + 16 lie in the row.
        |p, i| unsafe { f16x8_finite_to_f32(p.add(16 * i), &k) },
        |row, j| f16_at(row, 2 * j),
    )
}

#[inline(never)]
pub(super) fn dot_bf16<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    dot_float::<T>(
        w,
        rb,
        rb / 2,
        xs,
        y,
        // SAFETY: only called with 8i + 8 <= n, so bytes 16i..16i + 16 lie in the row.
        |p, i| bf16x8_to_f32(unsafe { load(p.add(16 * i)) }),
        |row, j| super::half::bf16_to_f32(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])),
    )
}

// ---------------------------------------------------------------------------------------------
// Activation rounding: Q8_0/Q8_1 blocks (`activation::quantize_q8_0_block_ref`, bit for bit).

/// Rounds block `b` of a Q8_0/Q8_1 vector as `activation::quantize_q8_0_block_ref` does, with
/// the same bits for every input without NaN (blocks so small that `127 / amax` overflows are
/// left to the reference): the largest magnitude by `f32x4.pmax` (which, like
/// the reference's `>`, never picks a NaN), `x · (127 / amax)` rounded to nearest even by
/// `f32x4.nearest` (the reference's `+ 1.5·2^23` trick is the same rounding below 2^22) and
/// clamped to ±127, the sums exact in i32. The quants go to the vector's `quants` in the build's
/// layout (`activation::stored_index`).
pub(super) fn quantize_q8_0_block(
    x: &[f32; 32],
    quants: &mut [Quant],
    b: usize,
    bsums: &mut [i16; 2],
) -> (f32, f32) {
    #[cfg(not(target_feature = "relaxed-simd"))]
    assert!(quants.len() >= 32 * b + 32);
    #[cfg(target_feature = "relaxed-simd")]
    assert!(quants.len() >= 64 * (b / 2) + 64);
    // SAFETY: x holds 32 f32.
    let v: [v128; 8] = core::array::from_fn(|i| unsafe { load(x.as_ptr().add(4 * i)) });
    let mut amax = f32x4_splat(0.0);
    for v in v {
        amax = f32x4_pmax(amax, f32x4_abs(v));
    }
    amax = f32x4_pmax(amax, i32x4_shuffle::<2, 3, 0, 1>(amax, amax));
    amax = f32x4_pmax(amax, i32x4_shuffle::<1, 0, 3, 2>(amax, amax));
    let amax = f32x4_extract_lane::<0>(amax);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    if id == f32::INFINITY {
        // amax below 127 / f32::MAX: the reference's rounding of ±inf (to -127) is its own
        return super::activation::quantize_q8_0_block_ref(x, quants, b, bsums);
    }
    let id = f32x4_splat(id);
    let (low, high) = (i32x4_splat(-127), i32x4_splat(127));
    // q[k]: values 4k..4k + 4 as i32 (NaN, from an infinite input, becomes 0 as in the reference)
    let q = v.map(|v| {
        let r = i32x4_trunc_sat_f32x4(f32x4_nearest(f32x4_mul(v, id)));
        i32x4_min(i32x4_max(r, low), high)
    });
    let half_sum = |q: &[v128]| {
        let v = i32x4_add(i32x4_add(q[0], q[1]), i32x4_add(q[2], q[3]));
        let v = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
        let v = i32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
        i32x4_extract_lane::<0>(v)
    };
    let (first, second) = (half_sum(&q[..4]), half_sum(&q[4..]));
    *bsums = [first as i16, second as i16];
    // values 0..8, 8..16, 16..24, 24..32 as i16
    let h: [v128; 4] = core::array::from_fn(|k| i16x8_narrow_i32x4(q[2 * k], q[2 * k + 1]));
    // SAFETY: the stores below stay in the block's slots, inside `quants` (asserted above).
    unsafe {
        #[cfg(not(target_feature = "relaxed-simd"))]
        {
            // i16, within each 16 the even-indexed 8 then the odd-indexed 8
            let at = quants.as_mut_ptr().add(32 * b).cast::<v128>();
            for k in 0..2 {
                let (a, c) = (h[2 * k], h[2 * k + 1]);
                v128_store(
                    at.add(2 * k),
                    i16x8_shuffle::<0, 2, 4, 6, 8, 10, 12, 14>(a, c),
                );
                v128_store(
                    at.add(2 * k + 1),
                    i16x8_shuffle::<1, 3, 5, 7, 9, 11, 13, 15>(a, c),
                );
            }
        }
        #[cfg(target_feature = "relaxed-simd")]
        {
            // i8, run k (values 8k..8k + 8) at 16k of the pair, after the first block's if odd
            let at = quants
                .as_mut_ptr()
                .add(64 * (b / 2) + 8 * (b % 2))
                .cast::<u8>();
            let (a, c) = (
                i8x16_narrow_i16x8(h[0], h[1]),
                i8x16_narrow_i16x8(h[2], h[3]),
            );
            v128_store64_lane::<0>(a, at.cast());
            v128_store64_lane::<1>(a, at.add(16).cast());
            v128_store64_lane::<0>(c, at.add(32).cast());
            v128_store64_lane::<1>(c, at.add(48).cast());
        }
    }
    (
        f16_to_f32(super::half::f32_to_f16(d)),
        f16_to_f32(super::half::f32_to_f16(d * (first + second) as f32)),
    )
}

// ---------------------------------------------------------------------------------------------
// Shared by the integer kernels of both builds.

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
#[cfg(not(target_feature = "relaxed-simd"))]
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

/// The f16 scales and minimums (0 without `MIN_AT`) of the group of `count` (1..=4) legacy
/// blocks at `group` (grouped layout, `quant::grouped`: the scales side by side at the start,
/// then the minimums), as two f32x4 (missing lanes 0): a whole group's four scales are one
/// sign-extending load, its minimums another. The values must be finite (the loader checks,
/// `quant::check_matrix`): the conversion skips the infinity-and-NaN path.
///
/// # Safety
/// The group's `count` blocks must be readable.
#[inline(always)]
unsafe fn gather_scales<L: Legacy>(group: *const u8, count: usize, k: &F16Bits) -> [v128; 2] {
    // the scale first, the minimum (if any) right after it: scales at 2i, minimums at 2·count + 2i
    const { assert!(matches!(L::MIN_AT, None | Some(2))) };
    // SAFETY: only the `count` blocks' fields the caller vouches for are read.
    unsafe {
        if count == 4 {
            let d = f16_sext_finite_to_f32(i32x4_load_extend_i16x4(group.cast()), k);
            if L::MIN_AT.is_none() {
                return [d, f32x4_splat(0.0)];
            }
            let m = f16_sext_finite_to_f32(i32x4_load_extend_i16x4(group.add(8).cast()), k);
            return [d, m];
        }
        // u16 lanes [d0, d1, d2, d3, m0, m1, m2, m3]
        let h = {
            let p = group.cast::<u16>();
            let mut h = u16x8_splat(0);
            h = v128_load16_lane::<0>(h, p);
            if count > 1 {
                h = v128_load16_lane::<1>(h, p.add(1));
            }
            if count > 2 {
                h = v128_load16_lane::<2>(h, p.add(2));
            }
            if L::MIN_AT.is_some() {
                let m = p.add(count);
                h = v128_load16_lane::<4>(h, m);
                if count > 1 {
                    h = v128_load16_lane::<5>(h, m.add(1));
                }
                if count > 2 {
                    h = v128_load16_lane::<6>(h, m.add(2));
                }
            }
            h
        };
        [
            f16_sext_finite_to_f32(i32x4_extend_low_i16x8(h), k),
            f16_sext_finite_to_f32(i32x4_extend_high_i16x8(h), k),
        ]
    }
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

// ---------------------------------------------------------------------------------------------
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 with Q8_0/Q8_1 activations: blocks of 32, f32 once per block,
// the loop shared by both builds (each build supplies its `Legacy` impls).
//
// Blocks go four at a time: the four f16 scales (and minimums) become f32 in one vector and are
// multiplied by each vector's four activation scales once; each vector keeps a single f32x4
// accumulator (one accumulator per vector keeps V8 from spilling a loop-carried value to the
// stack). How the blocks' i32 partial sums reach it depends on the build (`legacy_group`).

/// How one legacy block type is read.
trait Legacy {
    /// Block size in bytes.
    const BYTES: usize;
    /// Byte offset of the f16 minimum (Q4_1, Q5_1; they take Q8_1 activations with sums).
    const MIN_AT: Option<usize>;
    /// `log2` of an offset taken off every weight after `dot` (`Σ (q - o)·y = Σ q·y - o·Σ y`,
    /// the relaxed build's unsigned Q4_0: 8 and Q5_0: 16), if any.
    const OFFSET_SHIFT: Option<u32>;
    /// Whether `dot` reads the activations' `split` quants (relaxed build: Q8_0, whose weight
    /// bytes are signed) rather than their `quants`.
    #[cfg(target_feature = "relaxed-simd")]
    const SPLIT: bool = false;
    /// The block's weights (relaxed build: a pair of blocks' weights) as the kernel keeps them
    /// between vectors.
    type Weights: Copy;
    /// Unpacks block `i` of the group of `count` blocks at `group` (grouped layout,
    /// [`field`]).
    ///
    /// # Safety
    /// The group's `count` blocks must be readable, and `i < count`.
    #[cfg(not(target_feature = "relaxed-simd"))]
    unsafe fn weights(
        group: *const u8,
        count: usize,
        i: usize,
        masks: &build::Masks,
    ) -> Self::Weights;
    /// Unpacks the pair of blocks `first` (even) and `first + 1` of the group of `count` blocks
    /// at `group` in the order of a pair of blocks' activations (`activation::stored_index`:
    /// runs of 8 taken in turn from each); without a partner (`paired` false: a row's lone
    /// last block) block `first` is paired with itself, and its partner's activations are
    /// zeros.
    ///
    /// # Safety
    /// The group's `count` blocks must be readable, `first < count`, and `first + 1 < count`
    /// when `paired`.
    #[cfg(target_feature = "relaxed-simd")]
    unsafe fn weights(
        group: *const u8,
        count: usize,
        first: usize,
        paired: bool,
        masks: &build::Masks,
    ) -> Self::Weights;
    /// `Σ y·w` over the block's 32 weights (before the offset), as four i32 partial sums
    /// (relaxed build: over the pair's 64 weights, lanes 0 and 1 the first block's, lanes 2 and 3
    /// the second's; `y` in the split layout where `SPLIT`).
    ///
    /// # Safety
    /// `y..y + 32` (relaxed build: `y..y + 64`, split: `y..y + 128`) must be readable.
    unsafe fn dot(w: Self::Weights, y: *const Quant) -> v128;
    /// [`Legacy::dot`] with the products summed in i16 before they are widened, the same
    /// exact sums (`dot_i8::narrow_dots` says which the engine runs faster).
    ///
    /// # Safety
    /// As [`Legacy::dot`].
    #[cfg(target_feature = "relaxed-simd")]
    unsafe fn dot_narrow(w: Self::Weights, y: *const Quant) -> v128;
}

/// What the legacy kernels' loops hold: the f16 conversion's constants and the build's
/// unpacking masks, each taken opaque once per kernel call (see [`F16Bits`]).
#[derive(Clone, Copy)]
struct LegacyConsts {
    f16: F16Bits,
    masks: build::Masks,
}

impl LegacyConsts {
    #[inline(always)]
    fn opaque() -> LegacyConsts {
        LegacyConsts {
            f16: F16Bits::opaque(),
            masks: build::Masks::opaque(),
        }
    }
}

/// The shared body of the legacy kernels: `Kernels::dot` over the rows of `w` (`rb` bytes
/// each). The activations are checked, and the f16 constants and the unpacking masks made, once
/// for all rows.
#[inline(always)]
fn dot_legacy<L: Legacy, const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    debug_assert!(rb.is_multiple_of(L::BYTES));
    let n_blocks = rb / L::BYTES;
    check_legacy_activations::<L, T>(xs, n_blocks);
    if T == 1 && n_blocks % 2 == 1 {
        return legacy_rows_odd::<L, T>(w, rb, xs, y);
    }
    let c = LegacyConsts::opaque();
    // One vector (decode): a copy of the loop for each way of summing (the SIMD128 build has
    // one); a test of `narrow` per pair of blocks made decode 7 % slower in Chromium with
    // AVX-VNNI (61.8-66.2 -> 56.8-61.1 tok/s). A batch's tiles keep the test (prefill within
    // 2 %): copies of those would add ~34 KB to the module.
    match (T, build::narrow_dots()) {
        (1, true) => legacy_rows::<L, T>(w, rb, xs, y, &c, true),
        (1, false) => legacy_rows::<L, T>(w, rb, xs, y, &c, false),
        (_, narrow) => legacy_rows::<L, T>(w, rb, xs, y, &c, narrow),
    }
}

/// [`dot_legacy`]'s loop over the rows (`narrow`: see [`legacy_group`]). One vector's rows
/// have an even number of blocks here (odd ones take [`legacy_rows_odd`]), so the copies of the
/// row's dot in `for_rows`' four streams end with a whole group or a constant pair.
#[inline(always)]
fn legacy_rows<L: Legacy, const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
    c: &LegacyConsts,
    narrow: bool,
) {
    let n_blocks = rb / L::BYTES;
    for_rows(
        w,
        rb,
        y,
        #[inline(always)]
        |row: &[u8]| {
            legacy_groups(
                n_blocks,
                T > 1,
                // SAFETY: `legacy_groups` passes first + count <= n_blocks, the blocks of `row`,
                // which `dot_legacy` has checked against `xs`.
                #[inline(always)]
                |acc, first, count| unsafe {
                    legacy_group::<L, T>(row, xs, acc, first, count, c, narrow)
                },
            )
        },
    )
}

/// [`dot_legacy`] of one vector and rows of an odd number of blocks (32, 96, 160, ... columns;
/// a row's last group one or three blocks, which no model we know of has): the rows one after
/// another, the way of summing asked at run time. In [`legacy_rows`]' eight copies of the
/// row's dot (four streams, two ways of summing) that general last group was over a third of
/// the relaxed build's one-vector kernels (Q5_1: 25.9 KB, now 14.4 plus 3.5 here): the relaxed
/// modules are 30.6 KB smaller, the SIMD128 ones 7.6 KB. SmolLM2-135M Q4_1, one thread,
/// interleaved, medians of 3 (prefill / decode tok/s): Chromium 298.3 / 99.8 before, 293.8 /
/// 103.9 after; wasmtime 223.5 / 95.6 and 224.5 / 94.7 (SIMD128 110.6 / 76.8 and 117.0 /
/// 76.5); Gemma 3 270M 231.4 / 35.2 and 227.8 / 35.1. (The general group out of line instead,
/// a call from each copy, cost wasmtime decode 102.2 -> 94.1: the loops around a call keep
/// less in registers.)
#[inline(never)]
fn legacy_rows_odd<L: Legacy, const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
) {
    let n_blocks = rb / L::BYTES;
    let c = LegacyConsts::opaque();
    let narrow = build::narrow_dots();
    for (r, row) in w.chunks_exact(rb).enumerate() {
        let sums = legacy_groups(
            n_blocks,
            true,
            // SAFETY: as in `legacy_rows`.
            #[inline(always)]
            |acc, first, count| unsafe {
                legacy_group::<L, T>(row, xs, acc, first, count, &c, narrow)
            },
        );
        y.store(r, sums);
    }
}

/// Checks that each of `xs` holds what the legacy kernels read for `n_blocks` blocks of `L`.
#[inline(always)]
fn check_legacy_activations<L: Legacy, const T: usize>(xs: &[ActRow<'_>; T], n_blocks: usize) {
    check_activations(xs, n_blocks, L::MIN_AT.is_some());
    // the relaxed build reads whole pairs of blocks (a lone last one with a zero partner)
    #[cfg(target_feature = "relaxed-simd")]
    for x in xs {
        assert!(x.quants.len() >= 64 * n_blocks.div_ceil(2));
        if L::SPLIT {
            assert!(x.split.len() >= 128 * n_blocks.div_ceil(2));
        }
    }
    if L::OFFSET_SHIFT.is_some() {
        for x in xs {
            assert!(x.bsums.len() >= 2 * n_blocks);
        }
    }
}

/// Runs `group(acc, first, count)` over `n_blocks` blocks in groups of four (`count` 1..=4;
/// inlined, the main loop's `count = 4` is a constant) and returns the horizontal sums. Without
/// `odd` (a constant where inlined) the caller vouches that `n_blocks` is even: the last group
/// is then a constant pair, and there is no code for one of 1 or 3 blocks.
#[inline(always)]
fn legacy_groups<const T: usize>(
    n_blocks: usize,
    odd: bool,
    group: impl FnMut(&mut [v128; T], usize, usize),
) -> [f32; T] {
    let mut acc = [f32x4_splat(0.0); T];
    legacy_groups_into(&mut acc, n_blocks, odd, group);
    acc.map(hsum_f32)
}

/// [`legacy_groups`] adding to the sums `acc` (each vector's, before the horizontal sum).
#[inline(always)]
fn legacy_groups_into<const T: usize>(
    acc: &mut [v128; T],
    n_blocks: usize,
    odd: bool,
    mut group: impl FnMut(&mut [v128; T], usize, usize),
) {
    let mut first = 0;
    while first + 4 <= n_blocks {
        group(acc, first, 4);
        first += 4;
    }
    match n_blocks - first {
        0 => {}
        // the common tail (rows of 576, 960, ... columns): a constant pair for one vector
        // (decode) and wherever no other tail is possible
        2 if T == 1 || !odd => group(acc, first, 2),
        rest if odd => group(acc, first, rest),
        // an odd count, which the caller ruled out
        _ => unreachable(),
    }
}

/// Blocks `first..first + count` (`count` 1..=4) of `row` times each vector, into `acc`.
/// Always inlined, so the main loop's `count = 4` is a constant.
///
/// Two ways, one per build, each the faster where its build runs (measured with both builds):
/// the SIMD128 build stores each block's partial sums and transposes four blocks into one vector
/// (Node 20's V8, where it runs: decode 97 tok/s against 74 the other way; Chromium 148: prefill
/// 0.89x the other way, decode the same); the relaxed build multiplies a pair of blocks at once,
/// from pair-interleaved activations, so each i32x4 of sums holds two blocks, and a group's two
/// pairs become one vector of four blocks' sums (Chromium 148, when each pair was scaled as it
/// came: prefill 281-284 tok/s against 264-266 one block at a time, which in turn beat the
/// transposed order, 242 against 225). The orders of the f32 additions differ, so the
/// builds' results differ in the last bits (each is held to llama.cpp's tolerances, and each is
/// the same for every thread count). `narrow`: the relaxed build's pairs take
/// `Legacy::dot_narrow` (the same sums; unused in the SIMD128 build).
///
/// # Safety
/// `first + count` must not exceed the blocks of `row`, which `dot_legacy` has checked against
/// `xs`.
#[inline(always)]
unsafe fn legacy_group<L: Legacy, const T: usize>(
    row: &[u8],
    xs: &[ActRow<'_>; T],
    acc: &mut [v128; T],
    first: usize,
    count: usize,
    c: &LegacyConsts,
    narrow: bool,
) {
    // SAFETY: by the caller: blocks first..first + count lie in `row`.
    unsafe {
        // The four blocks' scales and minimums (0 without), as f32x4.
        let group = row.as_ptr().add(first * L::BYTES);
        let [d, m] = gather_scales::<L>(group, count, &c.f16);
        #[cfg(not(target_feature = "relaxed-simd"))]
        {
            let _ = narrow;
            legacy_group_transposed::<L, T>(row, [d, m], xs, acc, first, count, &c.masks);
        }
        #[cfg(target_feature = "relaxed-simd")]
        legacy_group_pairs::<L, T>(
            [d, m],
            xs,
            acc,
            first,
            count,
            narrow,
            #[inline(always)]
            |p| pair_weights::<L>(group, p, count, &c.masks),
        );
    }
}

/// [`legacy_group`] of the SIMD128 build (`[d, m]`: the blocks' scales and minimums): each
/// block's sums are stored, then four blocks' are transposed into one vector (lane k: block k)
/// and scaled at once. Its weights are signed, so no type has an offset left (`OFFSET_SHIFT`).
///
/// # Safety
/// `first + count` must not exceed the blocks of `row`, which `dot_legacy` has checked against
/// `xs`.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn legacy_group_transposed<L: Legacy, const T: usize>(
    row: &[u8],
    [d, m]: [v128; 2],
    xs: &[ActRow<'_>; T],
    acc: &mut [v128; T],
    first: usize,
    count: usize,
    masks: &build::Masks,
) {
    // SAFETY: blocks first..first + count lie in `row` and their activations in `xs`.
    unsafe {
        let group = row.as_ptr().add(first * L::BYTES);
        // sums[t][k]: block first + k times vector t. Each block's sums are stored to this
        // scratch before the next block is loaded: V8 orders memory accesses only among
        // themselves, and without a store in between it would hoist all four blocks' loads to
        // the top of the group and spill most of them. (A volatile store is one instruction.)
        let mut scratch = [[u32x4_splat(0); 4]; T];
        for k in 0..count {
            let w = L::weights(group, count, k, masks);
            for t in 0..T {
                let sum = L::dot(w, xs[t].quants.as_ptr().add(32 * (first + k)));
                core::ptr::write_volatile(&mut scratch[t][k], sum);
            }
        }
        let sums: [[v128; 4]; T] = core::array::from_fn(|t| {
            core::array::from_fn(|k| {
                // SAFETY: a plain local.
                core::ptr::read_volatile(&scratch[t][k])
            })
        });
        const { assert!(L::OFFSET_SHIFT.is_none()) };
        for t in 0..T {
            let sumi = transpose_sum(sums[t]);
            let dy = gather_f32x4(xs[t].scales.as_ptr().add(first), count);
            let mut a = f32x4_add(
                acc[t],
                f32x4_mul(f32x4_convert_i32x4(sumi), f32x4_mul(d, dy)),
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

/// Two pairs' sums (each as [`Legacy::dot`] gives them: lanes 0 and 1 the pair's first block's,
/// 2 and 3 its second's) as one i32x4 with one block in each lane, `a`'s two then `b`'s.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn pair_sums(a: v128, b: v128) -> v128 {
    i32x4_add(
        i32x4_shuffle::<0, 2, 4, 6>(a, b),
        i32x4_shuffle::<1, 3, 5, 7>(a, b),
    )
}

/// [`legacy_group`] of the relaxed build (`[d, m]` as in the SIMD128 one): the blocks go in
/// pairs, each pair's products with a vector in one i32x4 (lanes 0 and 1 the first block's,
/// lanes 2 and 3 the second's, from the pair-interleaved activations); the group's two pairs
/// are added into one i32x4 with a block in each lane ([`pair_sums`]), which is converted and
/// scaled once, each lane by its block's scale (each pair's sums by `Legacy::dot_narrow` where
/// `narrow`). `weights(k)` unpacks the group's pair `k` (from the row here, from a prepared
/// row in `prepared.rs`: the same operations, so the same bits).
/// The multiply-adds are not fused (`madd`): fused, Gemma 3 270M's perplexity moved from -1.43 %
/// of llama.cpp's to -2.18 %, past the parity test's 2 % (its 85 tokens swing by about a percent
/// with the rounding of these sums: -0.84 % when each pair was scaled as it came).
///
/// Against scaling each pair's sums as they came (two conversions, two shuffles of the scales,
/// two multiplies and two additions per group and vector), `quant::tests::bench_matvec` in
/// Node's V8 (best of 40 rounds, GMAC/s): matvec Q4_1 13.2 -> 13.3, Q4_0 13.8 -> 14.7, Q5_0
/// 6.8 -> 7.5, Q5_1 6.7 -> 7.1; matmul x16 Q4_1 17.9 -> 18.0, Q4_0 17.1 -> 18.4, Q5_0 15.9 ->
/// 17.1 (the K-quants, untouched, gave the same figures in both runs; fused, Q4_1 gave 13.8
/// and 19.1).
///
/// # Safety
/// `first + count` must not exceed the blocks of the row `weights` reads, which the caller has
/// checked against `xs` ([`check_legacy_activations`]); `first` is a multiple of 4 (so block
/// `first` starts a pair).
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn legacy_group_pairs<L: Legacy, const T: usize>(
    [d, m]: [v128; 2],
    xs: &[ActRow<'_>; T],
    acc: &mut [v128; T],
    first: usize,
    count: usize,
    narrow: bool,
    weights: impl Fn(usize) -> L::Weights,
) {
    // SAFETY: blocks first..first + count have their activations in `xs` (a lone last block's
    // zero partner included).
    unsafe {
        // pair p's activations of vector t. The group's offset and the pair's constant one are
        // two steps, so LLVM writes the constant into the loads' offset immediates (one index
        // sum made it an `i32.add` before every load of the second pair, which V8 compiles to
        // a `lea`): the relaxed modules 2.5 KB smaller, Chromium decode the same (67.5-67.8
        // tok/s medians over 6 interleaved rounds), prefill 279.9 -> 282.5.
        let y = |t: usize, p: usize| match L::SPLIT {
            false => xs[t].quants.as_ptr().add(32 * first).add(64 * p),
            true => xs[t].split.as_ptr().add(64 * first).add(128 * p),
        };
        // each pair's sums with vector t (a missing second pair's zeros), then one vector
        // with lane k the i32 sum of block first + k (0 past `count`)
        let dot = |w: L::Weights, y: *const Quant| match narrow {
            true => L::dot_narrow(w, y),
            false => L::dot(w, y),
        };
        let w = weights(0);
        let firsts: [v128; T] = core::array::from_fn(|t| dot(w, y(t, 0)));
        let mut seconds = [i32x4_splat(0); T];
        if count > 2 {
            let w = weights(1);
            for t in 0..T {
                seconds[t] = dot(w, y(t, 1));
            }
        }
        for t in 0..T {
            let mut sum = pair_sums(firsts[t], seconds[t]);
            if let Some(shift) = L::OFFSET_SHIFT {
                // Σ (q - o)·y = Σ q·y - o·Σ y, exact in i32
                let offsets = block_sums(xs[t].bsums.as_ptr().add(2 * first), count);
                sum = i32x4_sub(sum, i32x4_shl(offsets, shift));
            }
            // lane k: block first + k's weight scale times vector t's
            let dd = f32x4_mul(d, gather_f32x4(xs[t].scales.as_ptr().add(first), count));
            acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(sum), dd));
            if L::MIN_AT.is_some() {
                let s = gather_f32x4(xs[t].sums.as_ptr().add(first), count);
                acc[t] = f32x4_add(acc[t], f32x4_mul(m, s));
            }
        }
    }
}

/// Pair `p` of the group of `count` blocks at `group`, unpacked (`Legacy::weights`); a lone
/// last block is paired with itself (its partner's activations are zeros).
///
/// # Safety
/// The group's `count` blocks must be readable, and `2p < count`.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn pair_weights<L: Legacy>(
    group: *const u8,
    p: usize,
    count: usize,
    masks: &build::Masks,
) -> L::Weights {
    // SAFETY: block 2p, and 2p + 1 when paired, are among the group's.
    unsafe { L::weights(group, count, 2 * p, 2 * p + 1 < count, masks) }
}

/// Where the field at byte `OFFSET` of block struct `B` (`quant::grouped::Grouped`) of block `i`
/// of the group of `count` blocks at `group` starts (`grouped::field_at`; constant-folded where
/// `count` is a constant, as in every group but a row's last). In the relaxed build the quants
/// of a pair are interleaved (`grouped::PAIRED`): for them, `i` is the pair's first block and
/// this is where the pair's starts.
///
/// # Safety
/// The group's `count` blocks must be readable, and `i < count`.
#[inline(always)]
unsafe fn field<B: Grouped, const OFFSET: usize>(
    group: *const u8,
    count: usize,
    i: usize,
) -> *const u8 {
    let f = const { grouped::field_index(B::FIELDS, OFFSET) };
    // SAFETY: inside the group's blocks, by the caller.
    unsafe { group.add(grouped::field_at(B::FIELDS, size_of::<B>(), f, i, count)) }
}

/// `count` (1..=4) blocks' activation sums from their `bsums` at `p` (two i16 per block), as
/// i32x4 (missing lanes 0).
///
/// # Safety
/// `p..p + 2 * count` must be readable.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn block_sums(p: *const i16, count: usize) -> v128 {
    // SAFETY: only the `2 * count` values the caller vouches for are read.
    let pairs = unsafe {
        if count == 4 {
            load(p)
        } else {
            let mut v = i32x4_splat(0);
            v = v128_load32_lane::<0>(v, p.cast());
            if count > 1 {
                v = v128_load32_lane::<1>(v, p.add(2).cast());
            }
            if count > 2 {
                v = v128_load32_lane::<2>(v, p.add(4).cast());
            }
            v
        }
    };
    i32x4_extadd_pairwise_i16x8(pairs)
}

// ---------------------------------------------------------------------------------------------
// Q4_K and Q5_K with Q8_K activations: the super-block loop shared by both builds.

/// The 32 nibble bytes of chunk `j` (weights `64j..64j + 64`) of a Q4_K/Q5_K super-block whose
/// nibbles start at `at` (Q4_K 16, Q5_K 48): byte l of the pair (l < 16 in `[0]`, l >= 16 in
/// `[1]`) holds weight `64j + l` in its low nibble and `64j + 32 + l` in its high one.
///
/// # Safety
/// `blk + at + 32j .. + 32` must be readable.
#[inline(always)]
unsafe fn k4_nibbles(blk: *const u8, at: usize, j: usize) -> [v128; 2] {
    // SAFETY: by the caller.
    unsafe { [load(blk.add(at + 32 * j)), load(blk.add(at + 16 + 32 * j))] }
}

/// The 32 fifth-bit bytes of a Q5_K super-block (at 16..48): byte l of `qh`, bit i, is the fifth
/// bit of weight `32i + l` (l < 16 in `[0]`, l >= 16 in `[1]`).
///
/// # Safety
/// `blk..blk + 48` must be readable.
#[inline(always)]
unsafe fn q5k_fifth_bits(blk: *const u8) -> [v128; 2] {
    // SAFETY: by the caller.
    unsafe { [load(blk.add(16)), load(blk.add(32))] }
}

/// The row loop of the K-quant kernels: `Kernels::dot` over the rows of `w` (`rb` bytes, whole
/// super-blocks of `BYTES`), each row's super-blocks in order, `block(blk, b, acc)` adding
/// super-block `b` (at `blk`, `BYTES` readable bytes) times each vector to `acc`. The activations
/// are checked once for all rows ([`check_activations_k`]).
#[inline(always)]
fn dot_k_rows<const BYTES: usize, const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
    block: impl Fn(*const u8, usize, &mut [v128; T]),
) {
    debug_assert!(rb.is_multiple_of(BYTES));
    let n_blocks = rb / BYTES;
    check_activations_k(xs, n_blocks);
    for_rows(
        w,
        rb,
        y,
        #[inline(always)]
        |row| -> [f32; T] {
            let mut acc = [f32x4_splat(0.0); T];
            for b in 0..n_blocks {
                // SAFETY: b < n_blocks, so bytes BYTES·b..BYTES·(b + 1) lie in the row.
                block(unsafe { row.as_ptr().add(BYTES * b) }, b, &mut acc);
            }
            core::array::from_fn(|t| hsum_f32(acc[t]))
        },
    )
}

/// The shared body of Q4_K and Q5_K in both builds: `chunk(blk, scales, j)` unpacks the 64
/// weights `64j..64j + 64` of the super-block at `blk` (`BYTES` long, scales at 4..16) as the
/// build keeps them, `dot(w, y, acc)` adds their products with the 64 activations at `y`, times
/// their sub-block scales, to `acc` (four i32 partial sums).
#[inline(always)]
fn dot_k4<const BYTES: usize, const T: usize, W: Copy>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
    chunk: impl Fn(*const u8, &[u8; 8], usize) -> W,
    dot: impl Fn(W, *const Quant, v128) -> v128,
) {
    dot_k_rows::<BYTES, T>(
        w,
        rb,
        xs,
        y,
        #[inline(always)]
        |blk, b, acc| {
            // SAFETY: `blk` is super-block b (d, dmin at 0..4, packed scales at 4..16);
            // activation reads are in bounds (dot_k_rows checked them).
            unsafe {
                let (d, dmin) = (f16_ptr(blk), f16_ptr(blk.add(2)));
                let (scales, mins) = scales_mins_k4(blk.add(4));
                let mut sumi = [i32x4_splat(0); T];
                let mut scratch = [i32x4_splat(0); T];
                for j in 0..4 {
                    let w = chunk(blk, &scales, j);
                    for t in 0..T {
                        sumi[t] = dot(w, xs[t].quants.as_ptr().add(256 * b + 64 * j), sumi[t]);
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
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Q6_K with Q8_K activations: the super-block loop shared by both builds.

/// The 64 quants `128h + 32c + 16m + (0..16)` of a Q6_K super-block, as vector `c` (0..4), each
/// byte unsigned (0..64), from their group of 48 repacked bytes at `group` (`g = 2h + m`,
/// `k_quants::repack_q6k`): three quarters with a mask each, the fourth gathered from the three
/// runs' top bits (`x ^ (x & 0x3f)`), moved to bits 5-4, 3-2 and 1-0 (16-bit shifts: no bit
/// crosses into the other byte of a lane). Against the file's `ql`/`qh` (two nibbles and four
/// 2-bit fields shifted into place, 17 operations), `quant::tests::bench_matvec` in Node's V8
/// (GMAC/s, best of 40 rounds, two interleaved runs): relaxed matvec 576x1536 13.28/12.66 ->
/// 17.19/16.68, 1536x768 12.94/12.60 -> 17.33/17.60, the tile of four the same (25.96/25.24
/// -> 25.85/26.85); SIMD128, whose kernel then splits each vector into i16 lanes, matvec
/// 576x1536 9.35/9.30 -> 9.87/9.85, the tile 18.17/17.63 -> 18.53/18.11.
///
/// # Safety
/// `group..group + 48` must be readable.
#[inline(always)]
unsafe fn q6k_quarters(group: *const u8) -> [v128; 4] {
    let low6 = u8x16_splat(0x3f);
    // SAFETY: by the caller.
    let runs = unsafe { [load(group), load(group.add(16)), load(group.add(32))] };
    let quarters = runs.map(|run| v128_and(run, low6));
    let top = |r: usize| v128_xor(runs[r], quarters[r]);
    let fourth = v128_or(top(0), v128_or(u16x8_shr(top(1), 2), u16x8_shr(top(2), 4)));
    [quarters[0], quarters[1], quarters[2], u16x8_shr(fourth, 2)]
}

/// The shared body of Q6_K: the 6-bit values are used unsigned (0..64) and the `-32` comes back
/// once per super-block as `32·Σ_j sc_j·bsum_j`, exact in i32 (|Σ| < 2^29 either way).
/// `half(blk, h, scales, y, sumi)` adds the products of weights `128h..128h + 128` of the
/// super-block at `blk` with each vector's activations (`y[t]`: the super-block's 256), times their
/// sub-block scales (`scales`: the half's eight, as i16), to `sumi`, ending each 64 weights with a
/// `barrier`.
#[inline(always)]
fn dot_q6k<const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
    half: impl Fn(*const u8, usize, v128, &[*const Quant; T], &mut [v128; T]),
) {
    dot_k_rows::<210, T>(
        w,
        rb,
        xs,
        y,
        #[inline(always)]
        |blk, b, acc| {
            // SAFETY: `blk` is super-block b: its quants at 0..192 (repacked at load,
            // `k_quants::repack_q6k`), scales at 192..208, d at 208..210; activation reads are
            // in bounds (dot_k_rows checked them).
            unsafe {
                let d = f16_ptr(blk.add(208));
                let scales8 = load(blk.add(192));
                // the 16 scales as i16: sub-blocks 0..8 and 8..16
                let scales = [
                    i16x8_extend_low_i8x16(scales8),
                    i16x8_extend_high_i8x16(scales8),
                ];
                let y: [*const Quant; T] =
                    core::array::from_fn(|t| xs[t].quants.as_ptr().add(256 * b));
                let mut sumi = [i32x4_splat(0); T];
                for h in 0..2 {
                    half(blk, h, scales[h], &y, &mut sumi);
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
        },
    )
}

// The integer kernels: i16 lanes and `i32x4.dot_i16x8_s` in the SIMD128 build, i8 lanes and
// `i16x8.relaxed_dot_i8x16_i7x16_s` in the relaxed-SIMD build (the activations' storage follows
// the same switch, `activation::Quant`). Each supplies the legacy types' `Legacy` impls and the
// K-quant kernels.
#[cfg(not(target_feature = "relaxed-simd"))]
mod dot_i16;
#[cfg(not(target_feature = "relaxed-simd"))]
use dot_i16 as build;
#[cfg(target_feature = "relaxed-simd")]
mod dot_i8;
#[cfg(target_feature = "relaxed-simd")]
use dot_i8 as build;
#[cfg(all(test, target_feature = "relaxed-simd"))]
pub(super) use dot_i8::{FORCE_DOTS, dot_lowering};
mod f16_batch;
pub(super) use f16_batch::matmul as matmul_f16;
mod prepared;
pub(super) use prepared::matmul as matmul_prepared;
mod prepared_k;

pub(super) use build::{dot_q4_k, dot_q5_k, dot_q6_k};

/// One vector's entry point of a legacy type (`dot_q4_0::<1>`, ...).
type DotOne = fn(&[u8], usize, &[ActRow<'_>; 1], Out<'_>);

/// A tile of `T` vectors through `one` (the kernel of one vector), vector by vector: the entry
/// point of a type whose batches take the prepared rows (`prepared::matmul`, every batch of two
/// vectors or more: Q4_0, Q4_1, Q5_0, Q5_1, the K-quants, and the SIMD128 build's Q8_0) serves
/// one vector, so a tile (no caller's) gets the same bits and the kernel's tile of four is not
/// compiled.
#[inline(always)]
pub(super) fn vector_by_vector<const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
    one: DotOne,
) {
    for t in 0..T.min(y.vecs) {
        one(w, rb, &[xs[t]], y.vector_at(t));
    }
}

/// [`dot_legacy`] of one vector for the types whose batches take the prepared rows
/// ([`vector_by_vector`]).
#[inline(always)]
fn dot_one_vector<L: Legacy, const T: usize>(
    w: &[u8],
    rb: usize,
    xs: &[ActRow<'_>; T],
    y: Out<'_>,
    one: DotOne,
) {
    match T {
        1 => dot_legacy::<L, T>(w, rb, xs, y),
        _ => vector_by_vector(w, rb, xs, y, one),
    }
}

// One entry point per legacy type over `dot_legacy` (deliberately alike: see the module doc).
#[inline(never)]
pub(super) fn dot_q4_0<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    dot_one_vector::<build::Q4_0, T>(w, rb, xs, y, dot_q4_0::<1>)
}
#[inline(never)]
pub(super) fn dot_q4_1<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    dot_one_vector::<build::Q4_1, T>(w, rb, xs, y, dot_q4_1::<1>)
}
#[inline(never)]
pub(super) fn dot_q5_0<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    dot_one_vector::<build::Q5_0, T>(w, rb, xs, y, dot_q5_0::<1>)
}
#[inline(never)]
pub(super) fn dot_q5_1<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    dot_one_vector::<build::Q5_1, T>(w, rb, xs, y, dot_q5_1::<1>)
}
#[inline(never)]
pub(super) fn dot_q8_0<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
    // the relaxed build's Q8_0 batches take `dot_legacy`'s tiles (split activations)
    #[cfg(target_feature = "relaxed-simd")]
    dot_legacy::<build::Q8_0, T>(w, rb, xs, y);
    #[cfg(not(target_feature = "relaxed-simd"))]
    dot_one_vector::<build::Q8_0, T>(w, rb, xs, y, dot_q8_0::<1>);
}
