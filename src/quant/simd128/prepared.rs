//! Batched products of the relaxed build for Q4_0, Q4_1, Q5_0 and Q5_1: each weight row is
//! unpacked once (`prepare`: weights to bytes in the pair order of the activations, f16 scales
//! and minimums to f32) into a small scratch on the stack, then every tile of up to four vectors
//! of the batch is multiplied with the scratch (`dot_prepared`). Without it the unpacking and the
//! scale conversion, a quarter of the instructions of `dot_legacy`'s group, are repeated for each
//! tile (eight times per row in a prefill batch of 32).
//!
//! `dot_prepared` does, per vector, the same f32 operations in the same order as `dot_legacy`
//! (pairs scaled as they come, the minimums' share once per group of four blocks, on the same
//! products `d_w · d_y`), so a batch gives the same bits as one vector at a time through
//! `matvec`.

// See the parent module for why the loops over `T` index arrays in lockstep.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;

use super::super::{ActivationBuf, GgmlType};
use super::*;

/// Most blocks of a row that a [`Prepared`] holds (8,192 columns; longer rows take
/// `dot_legacy`).
const MAX_BLOCKS: usize = 256;

/// One unpacked legacy row.
struct Prepared {
    n_blocks: usize,
    /// Pair `p`'s 64 weights as unsigned bytes in pair order: `weights[4p..4p + 4]`.
    weights: [v128; 2 * MAX_BLOCKS],
    /// Pair `p`'s two weight scales in the lanes of its sums, `[d0, d0, d1, d1]` (a lone last
    /// block's partner 0).
    scales: [v128; MAX_BLOCKS / 2],
    /// Group `g`'s (blocks `4g..4g + 4`) four minimums, 0 without.
    mins: [v128; MAX_BLOCKS / 4],
}

impl Prepared {
    const fn new() -> Prepared {
        let zero = f32x4(0.0, 0.0, 0.0, 0.0);
        Prepared {
            n_blocks: 0,
            weights: [zero; 2 * MAX_BLOCKS],
            scales: [zero; MAX_BLOCKS / 2],
            mins: [zero; MAX_BLOCKS / 4],
        }
    }
}

/// Unpacks `row` (whole blocks of `L`, at most [`MAX_BLOCKS`]) into `p`.
#[inline(always)]
fn prepare<L: Legacy<Weights = [v128; 4]>>(row: &[u8], p: &mut Prepared) {
    debug_assert!(row.len().is_multiple_of(L::BYTES));
    let n_blocks = row.len() / L::BYTES;
    assert!(n_blocks <= MAX_BLOCKS);
    p.n_blocks = n_blocks;
    for g in 0..n_blocks.div_ceil(4) {
        let first = 4 * g;
        let count = (n_blocks - first).min(4);
        // SAFETY: blocks first..first + count lie in `row`; the stores stay inside `p`'s arrays
        // (pairs < MAX_BLOCKS / 2, groups < MAX_BLOCKS / 4).
        unsafe {
            let blk = row.as_ptr().add(first * L::BYTES);
            let [d, m] = gather_scales::<L>(blk, count);
            p.mins[g] = m;
            let d_pairs = [
                i32x4_shuffle::<0, 0, 1, 1>(d, d),
                i32x4_shuffle::<2, 2, 3, 3>(d, d),
            ];
            for k in 0..count.div_ceil(2) {
                let pair = 2 * g + k;
                let a = blk.add(2 * k * L::BYTES);
                let b = if 2 * k + 1 < count {
                    a.add(L::BYTES)
                } else {
                    a
                };
                p.scales[pair] = d_pairs[k];
                let w = L::weights(a, b);
                p.weights[4 * pair..4 * pair + 4].copy_from_slice(&w);
            }
        }
    }
}

/// `Σ row·x` of the row in `p` with each of `T` vectors; the same bits as `dot_legacy::<L, T>`.
#[inline(always)]
fn dot_prepared<L: Legacy<Weights = [v128; 4]>, const T: usize>(
    p: &Prepared,
    xs: &[ActRow<'_>; T],
) -> [f32; T] {
    let n_blocks = p.n_blocks;
    check_activations(xs, n_blocks, L::MIN_AT.is_some());
    for x in xs {
        assert!(x.quants.len() >= 64 * n_blocks.div_ceil(2));
        assert!(L::OFFSET_SHIFT.is_none() || x.bsums.len() >= 2 * n_blocks);
    }
    let mut acc = [f32x4_splat(0.0); T];
    let mut first = 0;
    while first + 4 <= n_blocks {
        // SAFETY: first + 4 <= n_blocks.
        unsafe { group::<L, T>(p, xs, &mut acc, first, 4) };
        first += 4;
    }
    if first < n_blocks {
        // SAFETY: first + (n_blocks - first) <= n_blocks.
        unsafe { group::<L, T>(p, xs, &mut acc, first, n_blocks - first) };
    }
    core::array::from_fn(|t| hsum_f32(acc[t]))
}

/// Blocks `first..first + count` (`count` 1..=4, `first` a multiple of 4) of the row in `p`
/// times each vector, into `acc`: `legacy_group_pairs` on the unpacked row.
///
/// # Safety
/// `first + count <= p.n_blocks`, which `dot_prepared` has checked against `xs`.
#[inline(always)]
unsafe fn group<L: Legacy<Weights = [v128; 4]>, const T: usize>(
    p: &Prepared,
    xs: &[ActRow<'_>; T],
    acc: &mut [v128; T],
    first: usize,
    count: usize,
) {
    // SAFETY: pairs first / 2.. and group first / 4 were filled by `prepare`; the activation
    // reads are inside the slices checked by `dot_prepared`.
    unsafe {
        let zero = i32x4_splat(0);
        let y_scales: [v128; T] =
            core::array::from_fn(|t| gather_f32x4(xs[t].scales.as_ptr().add(first), count));
        let offsets: [v128; T] = core::array::from_fn(|t| match L::OFFSET_SHIFT {
            Some(shift) => i32x4_shl(
                block_sums(xs[t].bsums.as_ptr().add(2 * first), count),
                shift,
            ),
            None => zero,
        });
        for k in 0..count.div_ceil(2) {
            let pair = first / 2 + k;
            let w: [v128; 4] = core::array::from_fn(|i| *p.weights.get_unchecked(4 * pair + i));
            let d = *p.scales.get_unchecked(pair);
            for t in 0..T {
                let mut sum = L::dot(w, xs[t].quants.as_ptr().add(64 * pair));
                let (offset, y_scale) = if k == 0 {
                    (
                        i32x4_shuffle::<0, 4, 1, 4>(offsets[t], zero),
                        i32x4_shuffle::<0, 0, 1, 1>(y_scales[t], y_scales[t]),
                    )
                } else {
                    (
                        i32x4_shuffle::<2, 4, 3, 4>(offsets[t], zero),
                        i32x4_shuffle::<2, 2, 3, 3>(y_scales[t], y_scales[t]),
                    )
                };
                if L::OFFSET_SHIFT.is_some() {
                    sum = i32x4_sub(sum, offset);
                }
                let scale = f32x4_mul(d, y_scale);
                acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(sum), scale));
            }
        }
        if L::MIN_AT.is_some() {
            let m = *p.mins.get_unchecked(first / 4);
            for t in 0..T {
                let s = gather_f32x4(xs[t].sums.as_ptr().add(first), count);
                acc[t] = f32x4_add(acc[t], f32x4_mul(m, s));
            }
        }
    }
}

/// Batches of at most this many vectors at a time in [`matmul`] (eight tiles: the tiles'
/// activation rows are looked up once per batch, not once per weight row).
const VECS: usize = 32;

/// `matmul_strided`'s products for the types above, the same bits: `w` holds `n_rows` rows of
/// `rb` bytes, product `(v, r)` goes to `y[v * y_stride + r]`. Returns `false`, having done
/// nothing, for another type, a row longer than [`MAX_BLOCKS`] or a single tile of vectors
/// (there, nothing is shared between tiles and `dot_legacy` reads the row directly).
///
/// # Safety
/// As `matmul_strided`: those `n_vecs * n_rows` elements must be writable and not accessed by
/// anyone else during the call.
pub(in crate::quant) unsafe fn matmul(
    ty: GgmlType,
    w: &[u8],
    rb: usize,
    xs: &ActivationBuf,
    n_rows: usize,
    y: *mut f32,
    y_stride: usize,
) -> bool {
    // SAFETY: passed on.
    unsafe {
        match ty {
            GgmlType::Q4_0 => matmul_with::<dot_i8::Q4_0>(w, rb, xs, n_rows, y, y_stride),
            GgmlType::Q4_1 => matmul_with::<dot_i8::Q4_1>(w, rb, xs, n_rows, y, y_stride),
            GgmlType::Q5_0 => matmul_with::<dot_i8::Q5_0>(w, rb, xs, n_rows, y, y_stride),
            GgmlType::Q5_1 => matmul_with::<dot_i8::Q5_1>(w, rb, xs, n_rows, y, y_stride),
            _ => false,
        }
    }
}

/// [`matmul`] for one type.
///
/// # Safety
/// As [`matmul`].
unsafe fn matmul_with<L: Prepare>(
    w: &[u8],
    rb: usize,
    xs: &ActivationBuf,
    n_rows: usize,
    y: *mut f32,
    y_stride: usize,
) -> bool {
    let n_vecs = xs.n_vecs();
    if rb / L::BYTES > MAX_BLOCKS || n_vecs <= 4 {
        return false;
    }
    let mut p = Prepared::new();
    for v0 in (0..n_vecs).step_by(VECS) {
        let n = (n_vecs - v0).min(VECS);
        // tiles[i]: vectors v0 + 4i.. (past the batch: repeats of its last, never used)
        let tiles: [[ActRow<'_>; 4]; VECS / 4] =
            core::array::from_fn(|i| core::array::from_fn(|t| xs.row(v0 + (4 * i + t).min(n - 1))));
        for r in 0..n_rows {
            L::prepare_row(&w[r * rb..(r + 1) * rb], &mut p);
            for (i, x) in tiles[..n.div_ceil(4)].iter().enumerate() {
                let v = v0 + 4 * i;
                // SAFETY (stores): (v + t, r) with v + t < n_vecs and r < n_rows, by the caller.
                unsafe {
                    match n - 4 * i {
                        1 => store(y, y_stride, v, r, L::dot_tile::<1>(&p, &[x[0]])),
                        2 => store(y, y_stride, v, r, L::dot_tile::<2>(&p, &[x[0], x[1]])),
                        3 => store(y, y_stride, v, r, L::dot_tile::<3>(&p, &[x[0], x[1], x[2]])),
                        _ => store(y, y_stride, v, r, L::dot_tile::<4>(&p, x)),
                    }
                }
            }
        }
    }
    true
}

/// Writes the products of row `r` with vectors `v..v + T` to `y[(v + t) * stride + r]`.
///
/// # Safety
/// Those elements must be writable.
#[inline(always)]
unsafe fn store<const T: usize>(y: *mut f32, stride: usize, v: usize, r: usize, out: [f32; T]) {
    for (t, value) in out.into_iter().enumerate() {
        // SAFETY: by the caller.
        unsafe { *y.add((v + t) * stride + r) = value };
    }
}

/// A type's unpacking and product, each compiled once (`#[inline(never)]`, as the kernels of
/// `simd128`).
trait Prepare: Legacy<Weights = [v128; 4]> {
    fn prepare_row(row: &[u8], p: &mut Prepared);
    fn dot_tile<const T: usize>(p: &Prepared, xs: &[ActRow<'_>; T]) -> [f32; T];
}

// One impl per type (deliberately alike: see the module doc of `simd128`).
macro_rules! prepare_impls {
    ($($L:ty),*) => {$(
        impl Prepare for $L {
            #[inline(never)]
            fn prepare_row(row: &[u8], p: &mut Prepared) {
                prepare::<Self>(row, p)
            }
            #[inline(never)]
            fn dot_tile<const T: usize>(p: &Prepared, xs: &[ActRow<'_>; T]) -> [f32; T] {
                dot_prepared::<Self, T>(p, xs)
            }
        }
    )*};
}
prepare_impls!(dot_i8::Q4_0, dot_i8::Q4_1, dot_i8::Q5_0, dot_i8::Q5_1);
