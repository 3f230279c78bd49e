//! Batched products of the relaxed build for Q4_0, Q4_1, Q5_0 and Q5_1, every batch of two
//! vectors or more: each weight row is unpacked once (`prepare`: weights to bytes in the pair
//! order of the activations, f16 scales and minimums to f32) into a small scratch on the stack,
//! a run of [`MAX_BLOCKS`] blocks at a time, then every tile of up to four vectors of the batch
//! is multiplied with the scratch (`dot_prepared`). Without it the unpacking and the scale
//! conversion, a quarter of the instructions of `dot_legacy`'s group, are repeated for each
//! tile (eight times per row in a prefill batch of 32).
//!
//! `dot_prepared` does, per vector, the same operations in the same order as `dot_legacy` (the
//! same group body, `legacy_group_pairs`, each vector's sums carried from one run of a row to
//! the next), so a batch gives the same bits as one vector at a time through `matvec`. So
//! `dot_legacy` serves one vector only for these types: its tiles of four are not compiled
//! (`simd128::dot_q4_0` and the others), 16 KB less in each relaxed module.

// See the parent module for why the loops over `T` index arrays in lockstep.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;

use super::super::{ActivationBuf, GgmlType, Out};
use super::*;

/// Most blocks of a row that a [`Prepared`] holds (8,192 columns; longer rows go in runs of
/// this many, a multiple of a group's four blocks).
const MAX_BLOCKS: usize = 256;

/// One unpacked legacy row, or a run of at most [`MAX_BLOCKS`] of its blocks. Aligned to a
/// cache line, so that each pair's unpacked weights (four `v128`, 64 bytes) are one line:
/// placed as the stack frame happened to put it, the threaded relaxed module's prefill in
/// wasmtime was 5 % slower (SmolLM2-135M Q4_1, one thread, 215.2 against 228.0 tok/s; aligned,
/// 220.9 against 220.2).
#[repr(align(64))]
struct Prepared {
    /// The row's block the run starts at (a multiple of [`MAX_BLOCKS`]).
    first: usize,
    /// Blocks in the run.
    n_blocks: usize,
    /// Whether the run ends the row.
    last: bool,
    /// Sum the products in i16 first (`dot_i8::narrow_dots`, asked once per `matmul`).
    narrow: bool,
    /// Pair `p`'s 64 weights as unsigned bytes in pair order: `weights[4p..4p + 4]`.
    weights: [v128; 2 * MAX_BLOCKS],
    /// Group `g`'s (blocks `4g..4g + 4`) four weight scales, 0 without.
    scales: [v128; MAX_BLOCKS / 4],
    /// Group `g`'s (blocks `4g..4g + 4`) four minimums, 0 without.
    mins: [v128; MAX_BLOCKS / 4],
}

const _: () = assert!(core::mem::offset_of!(Prepared, weights).is_multiple_of(64));

impl Prepared {
    const fn new() -> Prepared {
        let zero = f32x4(0.0, 0.0, 0.0, 0.0);
        Prepared {
            first: 0,
            n_blocks: 0,
            last: true,
            narrow: false,
            weights: [zero; 2 * MAX_BLOCKS],
            scales: [zero; MAX_BLOCKS / 4],
            mins: [zero; MAX_BLOCKS / 4],
        }
    }
}

/// Unpacks the run of `row` (whole blocks of `L`) that starts at block `start` (a multiple of
/// [`MAX_BLOCKS`]) into `p`.
#[inline(always)]
fn prepare<L: Legacy<Weights = [v128; 4]>>(row: &[u8], start: usize, p: &mut Prepared) {
    debug_assert!(row.len().is_multiple_of(L::BYTES));
    let row_blocks = row.len() / L::BYTES;
    assert!(start < row_blocks && start.is_multiple_of(MAX_BLOCKS));
    let n_blocks = (row_blocks - start).min(MAX_BLOCKS);
    let run = &row[start * L::BYTES..(start + n_blocks) * L::BYTES];
    p.first = start;
    p.n_blocks = n_blocks;
    p.last = start + n_blocks == row_blocks;
    let c = LegacyConsts::opaque();
    for g in 0..n_blocks.div_ceil(4) {
        let first = 4 * g;
        let count = (n_blocks - first).min(4);
        // SAFETY: blocks first..first + count lie in `run`; the stores stay inside `p`'s arrays
        // (pairs < MAX_BLOCKS / 2, groups < MAX_BLOCKS / 4).
        unsafe {
            let blk = run.as_ptr().add(first * L::BYTES);
            let [d, m] = gather_scales::<L>(blk, count, &c.f16);
            p.scales[g] = d;
            p.mins[g] = m;
            for k in 0..count.div_ceil(2) {
                let pair = 2 * g + k;
                let w = pair_weights::<L>(blk, k, count, &c.masks);
                p.weights[4 * pair..4 * pair + 4].copy_from_slice(&w);
            }
        }
    }
}

/// `Σ row·x` of the row in `p` with each of `T` vectors, the same bits as `dot_legacy::<L, T>`
/// (the same group body, [`legacy_group_pairs`], on the unpacked row). A row of several runs
/// keeps each vector's sums in `carry` from one run to the next (the result counts after its
/// last run); a row of one run (8,192 columns or fewer) leaves `carry` alone, its sums stay in
/// registers.
#[inline(always)]
fn dot_prepared<L: Legacy<Weights = [v128; 4]>, const T: usize>(
    p: &Prepared,
    xs: &[ActRow<'_>; T],
    carry: &mut [v128; T],
) -> [f32; T] {
    check_legacy_activations::<L, T>(xs, p.first + p.n_blocks);
    let mut acc = match p.first {
        0 => [f32x4_splat(0.0); T],
        _ => *carry,
    };
    legacy_groups_into(
        &mut acc,
        p.n_blocks,
        true,
        // SAFETY: `legacy_groups_into` passes first + count <= n_blocks, so the blocks p.first +
        // first.. were checked against `xs` above; pairs first / 2.. and group first / 4 of the
        // run were filled by `prepare`; p.first + first is a multiple of 4.
        #[inline(always)]
        |acc, first, count| unsafe {
            let g = first / 4;
            legacy_group_pairs::<L, T>(
                [*p.scales.get_unchecked(g), *p.mins.get_unchecked(g)],
                xs,
                acc,
                p.first + first,
                count,
                p.narrow,
                #[inline(always)]
                |k| core::array::from_fn(|i| *p.weights.get_unchecked(4 * (2 * g + k) + i)),
            )
        },
    );
    if !p.last {
        *carry = acc;
    }
    acc.map(hsum_f32)
}

/// Batches of at most this many vectors at a time in [`matmul`] (eight tiles: the tiles'
/// activation rows are looked up once per batch, not once per weight row).
const VECS: usize = 32;

/// `matmul_strided`'s products for the types above, the same bits: `w` holds `n_rows` rows of
/// `rb` bytes, product `(v, r)` goes to `y[v * y_stride + r]`. Returns `false`, having done
/// nothing, for another type or a single vector (decode: `dot_legacy` reads the row directly).
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
    if n_vecs < 2 {
        return false;
    }
    let n_blocks = rb / L::BYTES;
    let mut p = Prepared::new();
    p.narrow = dot_i8::narrow_dots();
    for v0 in (0..n_vecs).step_by(VECS) {
        let n = (n_vecs - v0).min(VECS);
        let n_tiles = n.div_ceil(4);
        // tiles[i]: vectors v0 + 4i.. (past the batch: repeats of its last, computed and dropped)
        let tiles: [[ActRow<'_>; 4]; VECS / 4] =
            core::array::from_fn(|i| core::array::from_fn(|t| xs.row(v0 + (4 * i + t).min(n - 1))));
        // carry[i]: the sums of tile i's vectors over a long row's runs so far
        let mut carry = [[f32x4_splat(0.0); 4]; VECS / 4];
        for r in 0..n_rows {
            let row = &w[r * rb..(r + 1) * rb];
            for first in (0..n_blocks).step_by(MAX_BLOCKS) {
                L::prepare_row(row, first, &mut p);
                for (i, (x, carry)) in tiles[..n_tiles].iter().zip(&mut carry).enumerate() {
                    let vecs = (n - 4 * i).min(4);
                    // SAFETY: (v0 + 4i + t, r) with t < vecs <= n - 4i and r < n_rows: elements
                    // the caller vouches for.
                    let out = unsafe {
                        Out::strided(y.add((v0 + 4 * i) * y_stride), y_stride, n_rows, vecs)
                    };
                    // a tile of 2 or 3 runs as 4 with its last vector repeated (see `tiles`);
                    // the products count after a row's last run
                    match vecs {
                        1 => {
                            let carry = carry.first_chunk_mut().unwrap();
                            let sums = L::dot_tile::<1>(&p, &[x[0]], carry);
                            if p.last {
                                out.store(r, sums);
                            }
                        }
                        _ => {
                            let sums = L::dot_tile::<4>(&p, x, carry);
                            if p.last {
                                out.store(r, sums);
                            }
                        }
                    }
                }
            }
        }
    }
    true
}

/// A type's unpacking and product, each compiled once (`#[inline(never)]`, as the kernels of
/// `simd128`).
trait Prepare: Legacy<Weights = [v128; 4]> {
    fn prepare_row(row: &[u8], start: usize, p: &mut Prepared);
    fn dot_tile<const T: usize>(
        p: &Prepared,
        xs: &[ActRow<'_>; T],
        carry: &mut [v128; T],
    ) -> [f32; T];
}

// One impl per type (deliberately alike: see the module doc of `simd128`).
macro_rules! prepare_impls {
    ($($L:ty),*) => {$(
        impl Prepare for $L {
            #[inline(never)]
            fn prepare_row(row: &[u8], start: usize, p: &mut Prepared) {
                prepare::<Self>(row, start, p)
            }
            #[inline(never)]
            fn dot_tile<const T: usize>(
                p: &Prepared,
                xs: &[ActRow<'_>; T],
                carry: &mut [v128; T],
            ) -> [f32; T] {
                dot_prepared::<Self, T>(p, xs, carry)
            }
        }
    )*};
}
prepare_impls!(dot_i8::Q4_0, dot_i8::Q4_1, dot_i8::Q5_0, dot_i8::Q5_1);
