//! Batched products for Q4_K, Q5_K and Q6_K, every batch of two vectors or more, in both
//! builds: the weight rows are unpacked two at a time (`prepare`, `prepare_q6k`, `d` and `dmin`
//! to f32, Q4_K/Q5_K's minimums ready for the activations' `bsums`) into a small scratch on the
//! stack, a run of [`MAX_SUPERS`] super-blocks at a time, then the pair of rows is multiplied
//! with every tile of four vectors of the batch (`dot_tile`, `dot_tile_q6k`). The kernels' own
//! tile of four vectors (`dot_q4_k::<4>` and the others, no longer compiled) unpacked each row
//! anew for each tile and loaded each vector's activations for each row; here a row is unpacked
//! once per batch and each load of activations serves two rows.
//!
//! - Relaxed build: weights as unsigned bytes and each sub-block's scale in all eight i16 lanes;
//!   each sub-block's products summed in i16 pairs by the relaxed dot, then times its scale
//!   into i32 by `i32x4.dot_i16x8_s` (five operations per 32 weights and vector, where the
//!   legacy types' tiles take two). `quant::tests::bench_matvec` in Node 24's V8 (as
//!   Chromium's; matmul of 16 vectors, 576x1536, GMAC/s): Q4_K 30.0 -> 33.4, Q5_K 24.3 ->
//!   32.7, Q6_K 22.5 -> 29.1. Gemma 3 270M Q4_K_M (its 640-column matrices are Q5_0 and Q8_0;
//!   the 1,024- and 2,048-column ones Q4_K, and Q6_K for half of the FFN's down projections),
//!   before Q6_K took this path, prefill of the 148-token prompt on one thread, interleaved
//!   rounds: Chromium 242.9/241.6 -> 257.5/257.4 tok/s, wasmtime 184.7/212.1/212.6 ->
//!   235.8/227.1/223.6.
//! - SIMD128: the weights times their sub-block scales in i16 (`dot_i16::q4k_chunk`,
//!   `q5k_chunk`, `q6k_scaled`: exact), so a super-block is 32 `i32x4.dot_i16x8_s` and adds
//!   per row and vector, as a legacy tile's four blocks are. `bench_matvec` in Node 24 (matmul
//!   x16, GMAC/s): Q4_K 18.7 -> 23.8, Q5_K 15.6 -> 22.0-22.4, Q6_K 16.1 -> 23.7. Gemma 3 270M
//!   Q4_K_M, the SIMD128 module in Chromium, one thread, two interleaved rounds: prefill
//!   156.3/151.2 -> 178.6/184.4 tok/s.
//!
//! Per row and vector the tiles do the same integer operations, lane by lane, and the same
//! float operations in the same order as `simd128::dot_k4` and `dot_q6k` (per super-block the
//! f32 terms of those kernels added to four lanes carried from one run of a row to the next),
//! so a batch gives the same bits as one vector at a time through `matvec`.

// See the parent module for why the loops over `T` index arrays in lockstep.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;

use super::super::GgmlType;
use super::build::Masks;
#[cfg(target_feature = "relaxed-simd")]
use super::dot_i8::{dot16x2_scaled, dot32_scaled, q4k_weights, q5k_weights};
#[cfg(not(target_feature = "relaxed-simd"))]
use super::dot_i16::{q4k_chunk, q5k_chunk, q6k_scaled};
use super::prepared::{Batch, row_pairs};
use super::*;

/// Most super-blocks of a row that a [`Prepared`] holds (8,192 columns; longer rows go in runs
/// of this many).
const MAX_SUPERS: usize = 32;

/// One unpacked Q4_K/Q5_K row, or a run of at most [`MAX_SUPERS`] of its super-blocks.
#[repr(align(64))]
struct Prepared {
    /// The row's super-block the run starts at (a multiple of [`MAX_SUPERS`]).
    first: usize,
    /// Super-blocks in the run.
    n_supers: usize,
    /// Whether the run ends the row.
    last: bool,
    /// Super-block `b`'s weights. Relaxed build: sub-block `s` (weights `32s..32s + 32`) as
    /// unsigned bytes, `weights[16b + 2s..16b + 2s + 2]`. SIMD128: the weights times their
    /// sub-block scales as i16 in the activations' stored order, `weights[32b + c]` those of
    /// activations `8c..8c + 8`.
    weights: [v128; WEIGHT_VECS * MAX_SUPERS],
    /// Super-block `b`'s sub-block scales, each in all eight i16 lanes: `scales[16b + s]` (Q4_K,
    /// Q5_K: 8 sub-blocks of 32; Q6_K: 16 of 16). (Relaxed build.)
    #[cfg(target_feature = "relaxed-simd")]
    scales: [v128; 16 * MAX_SUPERS],
    /// Super-block `b`'s `mins[2b..2b + 2]`: Q4_K/Q5_K's minimums as `scales_mins_k4` gives
    /// them; Q6_K's 16 scales as two i16x8 (for its `-32`, taken off through the bsums).
    mins: [v128; 2 * MAX_SUPERS],
    /// Super-block `b`'s `d` and `dmin` (Q6_K: `d` and 0).
    d: [[f32; 2]; MAX_SUPERS],
}

/// A super-block's vectors of weights in a [`Prepared`]: 256 bytes (relaxed build), 256 i16.
const WEIGHT_VECS: usize = 16 * size_of::<Quant>();

const _: () = assert!(core::mem::offset_of!(Prepared, weights).is_multiple_of(64));

impl Prepared {
    /// Starts the run of `row` (whole super-blocks of `bytes`) at super-block `start` (a
    /// multiple of [`MAX_SUPERS`]): sets `first`, `n_supers` and `last`, and returns the run's
    /// bytes.
    fn begin_run<'r>(&mut self, row: &'r [u8], bytes: usize, start: usize) -> &'r [u8] {
        debug_assert!(row.len().is_multiple_of(bytes));
        let row_supers = row.len() / bytes;
        assert!(start < row_supers && start.is_multiple_of(MAX_SUPERS));
        let n_supers = (row_supers - start).min(MAX_SUPERS);
        self.first = start;
        self.n_supers = n_supers;
        self.last = start + n_supers == row_supers;
        &row[start * bytes..(start + n_supers) * bytes]
    }

    const fn new() -> Prepared {
        let zero = f32x4(0.0, 0.0, 0.0, 0.0);
        Prepared {
            first: 0,
            n_supers: 0,
            last: true,
            weights: [zero; WEIGHT_VECS * MAX_SUPERS],
            #[cfg(target_feature = "relaxed-simd")]
            scales: [zero; 16 * MAX_SUPERS],
            mins: [zero; 2 * MAX_SUPERS],
            d: [[0.0; 2]; MAX_SUPERS],
        }
    }
}

/// Unpacks the run of `row` (whole super-blocks of `K::BYTES`) that starts at super-block
/// `start` (a multiple of [`MAX_SUPERS`]) into `p`.
#[inline(always)]
fn prepare<K: PrepareK>(row: &[u8], start: usize, p: &mut Prepared) {
    let run = p.begin_run(row, K::BYTES, start);
    let m = Masks::opaque();
    for (b, blk) in run.chunks_exact(K::BYTES).enumerate() {
        let blk = blk.as_ptr();
        // SAFETY: `blk` is a whole super-block (d, dmin at 0..4, packed scales at 4..16); the
        // stores stay inside `p`'s arrays (b < MAX_SUPERS).
        unsafe {
            p.d[b] = [f16_ptr(blk), f16_ptr(blk.add(2))];
            let (scales, mins) = scales_mins_k4(blk.add(4));
            p.mins[2 * b..2 * b + 2].copy_from_slice(&mins);
            #[cfg(target_feature = "relaxed-simd")]
            {
                for s in 0..8 {
                    p.scales[16 * b + s] = i16x8_splat(scales[s] as i16);
                }
                for j in 0..4 {
                    let [first, second] = K::weights(blk, j, &m);
                    p.weights[16 * b + 4 * j..16 * b + 4 * j + 2].copy_from_slice(&first);
                    p.weights[16 * b + 4 * j + 2..16 * b + 4 * j + 4].copy_from_slice(&second);
                }
            }
            #[cfg(not(target_feature = "relaxed-simd"))]
            for j in 0..4 {
                // weights 64j..64j + 64: activations 64j + 8i for vector i of the eight
                let [first, second] = K::chunk(blk, &scales, j, &m);
                p.weights[32 * b + 8 * j..32 * b + 8 * j + 4].copy_from_slice(&first);
                p.weights[32 * b + 8 * j + 4..32 * b + 8 * j + 8].copy_from_slice(&second);
            }
        }
    }
}

/// [`prepare`] of a Q6_K row (quants repacked at load, `k_quants::repack_q6k`; 210-byte
/// super-blocks). Relaxed build: weights `32j..32j + 32` as `weights[16b + 2j..16b + 2j + 2]`
/// (each byte 0..64, as `q6k_quarters` gives them), sub-block `s`'s scale splat in
/// `scales[16b + s]`. SIMD128: as `dot_i16::q6k_scaled` gives them.
#[inline(never)]
fn prepare_q6k(row: &[u8], start: usize, p: &mut Prepared) {
    let run = p.begin_run(row, Q6K_BYTES, start);
    for (b, blk) in run.chunks_exact(Q6K_BYTES).enumerate() {
        let blk = blk.as_ptr();
        // SAFETY: `blk` is a whole super-block (quants at 0..192, scales at 192..208, d at
        // 208..210); the stores stay inside `p`'s arrays (b < MAX_SUPERS).
        unsafe {
            p.d[b] = [f16_ptr(blk.add(208)), 0.0];
            let scales8 = load(blk.add(192));
            p.mins[2 * b] = i16x8_extend_low_i8x16(scales8);
            p.mins[2 * b + 1] = i16x8_extend_high_i8x16(scales8);
            #[cfg(target_feature = "relaxed-simd")]
            {
                for s in 0..16 {
                    p.scales[16 * b + s] = i16x8_splat(*blk.add(192 + s).cast::<i8>() as i16);
                }
                for h in 0..2 {
                    let (first, second) = (
                        q6k_quarters(blk.add(96 * h)),
                        q6k_quarters(blk.add(96 * h + 48)),
                    );
                    for k in 0..4 {
                        p.weights[16 * b + 8 * h + 2 * k] = first[k];
                        p.weights[16 * b + 8 * h + 2 * k + 1] = second[k];
                    }
                }
            }
            #[cfg(not(target_feature = "relaxed-simd"))]
            for h in 0..2 {
                // weights 128h + 32k + 16·L16 + (0..16): activations at 8·(16h + 4k + 2·L16)
                let scales = p.mins[2 * b + h];
                let (first, second) = (
                    q6k_scaled::<0>(blk, h, scales),
                    q6k_scaled::<1>(blk, h, scales),
                );
                for k in 0..4 {
                    let at = 32 * b + 16 * h + 4 * k;
                    p.weights[at..at + 2].copy_from_slice(&first[k]);
                    p.weights[at + 2..at + 4].copy_from_slice(&second[k]);
                }
            }
        }
    }
}

/// Q6_K's super-block in bytes.
const Q6K_BYTES: usize = 210;

/// The frame of the tiles' products: each super-block `b` of the run (`at`: its index in the
/// row) through `block(b, at, acc)`, the activations checked for them first; the sums start
/// from `carry` after a row's first run and go back to it before its last; returns them added
/// up (`hsum_f32`), `[row][vector]`.
#[inline(always)]
fn super_blocks(
    p: [&Prepared; 2],
    xs: &[ActRow<'_>; 4],
    carry: &mut [[v128; 4]; 2],
    mut block: impl FnMut(usize, usize, &mut [[v128; 4]; 2]),
) -> [[f32; 4]; 2] {
    let (first, n_supers) = (p[0].first, p[0].n_supers);
    assert!(p[1].first == first && p[1].n_supers == n_supers);
    check_activations_k(xs, first + n_supers);
    let mut acc = match first {
        0 => [[f32x4_splat(0.0); 4]; 2],
        _ => *carry,
    };
    for b in 0..n_supers {
        block(b, first + b, &mut acc);
    }
    if !p[0].last {
        *carry = acc;
    }
    acc.map(|a| a.map(hsum_f32))
}

/// [`dot_tile`] of Q6_K rows (`prepare_q6k`), the same bits per row and vector as
/// `simd128::dot_q6k`: each 32 weights' products summed in i16 pairs, each 16 times its scale
/// into i32 (`dot_i8::dot16x2_scaled`), the `-32` taken off per super-block as
/// `32·Σ sc·bsum`, then `f32(sum)·(d·d_y)` added to four lanes.
#[inline(never)]
fn dot_tile_q6k(
    p: [&Prepared; 2],
    xs: &[ActRow<'_>; 4],
    carry: &mut [[v128; 4]; 2],
) -> [[f32; 4]; 2] {
    super_blocks(p, xs, carry, |b, at, acc| {
        // SAFETY: b < MAX_SUPERS, so the prepared rows' indices are in bounds; super-block
        // `at`'s activations were checked (`super_blocks`).
        unsafe {
            #[cfg(target_feature = "relaxed-simd")]
            let sumi = {
                let y = |t: usize| xs[t].quants.as_ptr().add(256 * at);
                let mut sumi = [[i32x4_splat(0); 4]; 2];
                // (the bound hidden from LLVM, as in `dot_tile`)
                for j in 0..core::hint::black_box(8) {
                    for r in 0..2 {
                        let i = 16 * b + 2 * j;
                        let w = [
                            *p[r].weights.get_unchecked(i),
                            *p[r].weights.get_unchecked(i + 1),
                        ];
                        let s = [
                            *p[r].scales.get_unchecked(i),
                            *p[r].scales.get_unchecked(i + 1),
                        ];
                        for t in 0..4 {
                            sumi[r][t] = dot16x2_scaled(w, y(t).add(32 * j), s, sumi[r][t]);
                        }
                    }
                }
                sumi
            };
            #[cfg(not(target_feature = "relaxed-simd"))]
            let sumi = scaled_sums(p, xs, b, at);
            for t in 0..4 {
                let bsums = xs[t].bsums.as_ptr().add(16 * at);
                let dy = *xs[t].scales.get_unchecked(at);
                for r in 0..2 {
                    let scales = &p[r].mins[2 * b..2 * b + 2];
                    let offset = i32x4_add(
                        i32x4_dot_i16x8(load(bsums), scales[0]),
                        i32x4_dot_i16x8(load(bsums.add(8)), scales[1]),
                    );
                    let sum = i32x4_sub(sumi[r][t], i32x4_shl(offset, 5));
                    let d = p[r].d[b][0];
                    acc[r][t] = f32x4_add(
                        acc[r][t],
                        f32x4_mul(f32x4_convert_i32x4(sum), f32x4_splat(d * dy)),
                    );
                }
            }
        }
    })
}

/// `Σ row·x` of the two rows in `p` (the run's super-blocks) with each of the four vectors `xs`:
/// `[row][vector]`, the same bits per row and vector as `simd128::dot_k4` (see the module
/// doc). A row of several runs keeps the sums in `carry` from one run to the next (the result
/// counts after its last run). (One copy for both types: the unpacked rows are alike.)
#[inline(never)]
fn dot_tile(p: [&Prepared; 2], xs: &[ActRow<'_>; 4], carry: &mut [[v128; 4]; 2]) -> [[f32; 4]; 2] {
    super_blocks(p, xs, carry, |b, at, acc| {
        // SAFETY: b < MAX_SUPERS, so the prepared rows' indices are in bounds; super-block
        // `at`'s activations were checked (`super_blocks`).
        unsafe {
            #[cfg(target_feature = "relaxed-simd")]
            let sumi = {
                let y = |t: usize| xs[t].quants.as_ptr().add(256 * at);
                let mut sumi = [[i32x4_splat(0); 4]; 2];
                // The sub-block loop's bound is hidden from LLVM, which would otherwise unroll
                // it and reorder the eight sums one after another (see `prepared::dot_tile`).
                for s in 0..core::hint::black_box(8) {
                    let w = |r: usize| {
                        let at = 16 * b + 2 * s;
                        [
                            *p[r].weights.get_unchecked(at),
                            *p[r].weights.get_unchecked(at + 1),
                        ]
                    };
                    for r in 0..2 {
                        let (w, scale) = (w(r), *p[r].scales.get_unchecked(16 * b + s));
                        for t in 0..4 {
                            sumi[r][t] = dot32_scaled(w, y(t).add(32 * s), scale, sumi[r][t]);
                        }
                    }
                }
                sumi
            };
            #[cfg(not(target_feature = "relaxed-simd"))]
            let sumi = scaled_sums(p, xs, b, at);
            for t in 0..4 {
                let bsums = xs[t].bsums.as_ptr().add(16 * at);
                let dy = *xs[t].scales.get_unchecked(at);
                for r in 0..2 {
                    let mins = &p[r].mins[2 * b..2 * b + 2];
                    // Σ_j m_j·(bsums[2j] + bsums[2j + 1]), still as four i32 lanes
                    let m = i32x4_add(
                        i32x4_dot_i16x8(load(bsums), mins[0]),
                        i32x4_dot_i16x8(load(bsums.add(8)), mins[1]),
                    );
                    let [d, dmin] = p[r].d[b];
                    let scaled = f32x4_mul(f32x4_convert_i32x4(sumi[r][t]), f32x4_splat(dy * d));
                    let min = f32x4_mul(f32x4_convert_i32x4(m), f32x4_splat(dy * dmin));
                    acc[r][t] = f32x4_add(acc[r][t], f32x4_sub(scaled, min));
                }
            }
        }
    })
}

/// The SIMD128 build's integer sums of super-block `b` of the two prepared rows (`at` in the
/// row) with each of the four vectors: `[row][vector]`, lane `l` the products of positions
/// `2l` and `2l + 1` of each eight, as `dot_i16::dot64` and `q6_chunk` add them (the same exact
/// sums, whatever the order).
///
/// # Safety
/// `b < MAX_SUPERS`; the vectors hold super-block `at` (`super_blocks` checked them).
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn scaled_sums(
    p: [&Prepared; 2],
    xs: &[ActRow<'_>; 4],
    b: usize,
    at: usize,
) -> [[v128; 4]; 2] {
    // SAFETY: by the caller: 32b + c < 32·MAX_SUPERS, activations 256·at + 8c.. of each vector.
    unsafe {
        let y = |c: usize, t: usize| load(xs[t].quants.as_ptr().add(256 * at + 8 * c));
        let mut sumi = [[i32x4_splat(0); 4]; 2];
        // (the bound hidden from LLVM, as in `prepared::dot_tile`)
        for c in 0..core::hint::black_box(WEIGHT_VECS) {
            let w = [
                *p[0].weights.get_unchecked(32 * b + c),
                *p[1].weights.get_unchecked(32 * b + c),
            ];
            for t in 0..4 {
                let y = y(c, t);
                for r in 0..2 {
                    sumi[r][t] = i32x4_add(sumi[r][t], i32x4_dot_i16x8(w[r], y));
                }
            }
        }
        sumi
    }
}

/// `prepared::matmul`'s products for Q4_K and Q5_K (`ty`), through `prepared::row_pairs`.
///
/// # Safety
/// As `prepared::matmul`.
pub(super) unsafe fn matmul(ty: GgmlType, b: Batch<'_>) {
    let kernels: Kernels = match ty {
        GgmlType::Q4K => (Q4K::BYTES, Q4K::prepare_row, dot_tile),
        GgmlType::Q5K => (Q5K::BYTES, Q5K::prepare_row, dot_tile),
        _ => (Q6K_BYTES, prepare_q6k, dot_tile_q6k),
    };
    // SAFETY: passed on.
    unsafe { matmul_with(kernels, b) }
}

/// A type's super-block size, unpacking and product.
type Kernels = (
    usize,
    fn(&[u8], usize, &mut Prepared),
    fn([&Prepared; 2], &[ActRow<'_>; 4], &mut [[v128; 4]; 2]) -> [[f32; 4]; 2],
);

/// [`matmul`] for one type. (One copy for the three types: the unpacking is called once per row
/// and run, the product once per tile.)
///
/// # Safety
/// As [`matmul`].
#[inline(never)]
unsafe fn matmul_with((bytes, prepare_row, dot): Kernels, b: Batch<'_>) {
    let n_vecs = b.xs.n_vecs();
    let n_supers = b.rb / bytes;
    let mut p = [Prepared::new(), Prepared::new()];
    // SAFETY: passed on (this function's contract).
    unsafe {
        row_pairs(
            &mut p,
            &b,
            [n_supers, MAX_SUPERS],
            prepare_row,
            |p| p.last,
            // a tile of 2 or 3 vectors runs as 4 with its last vector repeated
            |i| core::array::from_fn(|t| b.xs.row((4 * i + t).min(n_vecs - 1))),
            dot,
        )
    };
}

/// Q4_K and Q5_K, as [`prepare`] unpacks them.
struct Q4K;
struct Q5K;

/// A type's unpacking, compiled once (`#[inline(never)]`, as the kernels of `simd128`).
trait PrepareK {
    /// Super-block size in bytes.
    const BYTES: usize;
    /// Weights `64j..64j + 64` of the super-block at `blk` as `dot_i8::q4k_weights` gives
    /// them.
    ///
    /// # Safety
    /// The super-block's `BYTES` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    unsafe fn weights(blk: *const u8, j: usize, m: &Masks) -> [[v128; 2]; 2];
    /// Weights `64j..64j + 64` of the super-block at `blk` times their sub-block scales, as
    /// `dot_i16::q4k_chunk` gives them.
    ///
    /// # Safety
    /// The super-block's `BYTES` must be readable, `j < 4`.
    #[cfg(not(target_feature = "relaxed-simd"))]
    unsafe fn chunk(blk: *const u8, scales: &[u8; 8], j: usize, m: &Masks) -> [[v128; 4]; 2];
    fn prepare_row(row: &[u8], start: usize, p: &mut Prepared);
}

// One impl per type (deliberately alike: see the module doc of `simd128`).
macro_rules! prepare_k_impls {
    ($($K:ty: $bytes:expr, $weights:path, $chunk:path),*) => {$(
        impl PrepareK for $K {
            const BYTES: usize = $bytes;
            #[cfg(target_feature = "relaxed-simd")]
            #[inline(always)]
            unsafe fn weights(blk: *const u8, j: usize, m: &Masks) -> [[v128; 2]; 2] {
                // SAFETY: by the caller.
                unsafe { $weights(blk, j, m) }
            }
            #[cfg(not(target_feature = "relaxed-simd"))]
            #[inline(always)]
            unsafe fn chunk(
                blk: *const u8,
                scales: &[u8; 8],
                j: usize,
                m: &Masks,
            ) -> [[v128; 4]; 2] {
                // SAFETY: by the caller.
                unsafe { $chunk(blk, scales, j, m) }
            }
            #[inline(never)]
            fn prepare_row(row: &[u8], start: usize, p: &mut Prepared) {
                prepare::<Self>(row, start, p)
            }
        }
    )*};
}
prepare_k_impls!(
    Q4K: 144, q4k_weights, q4k_chunk,
    Q5K: 176, q5k_weights, q5k_chunk
);
