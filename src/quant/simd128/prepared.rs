//! Batched products for the legacy types, every batch of two vectors or more (both builds:
//! Q4_0, Q4_1, Q5_0 and Q5_1; the SIMD128 build also Q8_0): the weight rows are unpacked two at
//! a time (`prepare`: weights in the order of the activations' tiles, f16 scales and minimums
//! to f32) into a small scratch on the stack, a run of [`MAX_BLOCKS`] blocks at a time, then the
//! pair of rows is multiplied with every tile of four vectors of the batch (`dot_tile`, from the
//! activations' `TileGroup`s). Without it the unpacking and the scale conversion, a quarter of
//! the instructions of `dot_legacy`'s group, are repeated for each tile (eight times per row in
//! a prefill batch of 32).
//!
//! In a `TileGroup` one 16-byte load holds four i8 (relaxed build) or two i16 (SIMD128) values
//! of each of four blocks, so one dot product (the relaxed i8 dot, `i32x4.dot_i16x8_s`) sums
//! four blocks at once, lane by lane, and a group of four blocks is 8 (16) dots into one i32x4
//! per row and vector, its chunks loaded once for both rows. Relaxed build, against one row at
//! a time over pair-ordered activations (each pair's dots into its own i32x4, then shuffled
//! together), `quant::tests::bench_matvec` in Node 24's V8 (AVX-VNNI, as Chromium's; matmul of
//! 16 vectors, 576x1536, GMAC/s): Q4_0 38.4 -> 51.5, Q4_1 38.1 -> 47.8-50.9, Q5_0 36.2 -> 48.1,
//! Q5_1 34.8 -> 44.5; in Node 20's (which sums in i16: `narrow`) Q4_0 30.1 -> 35.6-35.9, Q4_1
//! 30.3 -> 34.1, Q5_0 28.7 -> 33.0, Q5_1 28.9 -> 32.2. SmolLM2-135M Q4_1 in Chromium, two
//! interleaved rounds: prefill of the 148-token prompt on one thread 222.1-235.6 -> 283.2-294.4
//! tok/s, on two 360.4-382.8 -> 468.5-490.2, the 968-token prompt on one thread 176.2-177.6 ->
//! 210.2-212.4; wasmtime (`narrow`), one thread, 186.0-189.4 -> 210.0-213.2.
//!
//! The SIMD128 build (Safari's and Firefox's), against `dot_legacy`'s tile of one row and four
//! vectors, which unpacked each row once per tile and summed each block's dots horizontally:
//! `bench_matvec` in Node 24, matmul x16 576x1536, GMAC/s: Q8_0 10.8 -> 23.9, Q4_0 10.8 ->
//! 24.4, Q4_1 10.6 -> 22.7, Q5_0 9.9 -> 19.7, Q5_1 9.7 -> 19.2. The SIMD128 module in Chromium
//! (two interleaved rounds, one thread unless said): SmolLM2-135M Q4_1 prefill of the 148-token
//! prompt 91.5/93.6 -> 165.3/167.2 tok/s, two threads 173.9/176.3 -> 278.5/300.1, the
//! 968-token prompt 79.8 -> 126.8; Gemma 3 270M Q4_K_M (Q5_0 and Q8_0 projections)
//! 103.5/105.6 -> 155.6/163.4.
//!
//! Per row and vector, `dot_tile` adds the same exact i32 sum of each block and then does the
//! same float operations in the same order as `dot_legacy` (`legacy_group_pairs`,
//! `legacy_group_transposed`: `acc + f32(sum)·(d·d_x)`, then `+ m·s`, lane k block k; each
//! vector's sums carried from one run of a row to the next), so a batch gives the same bits as
//! one vector at a time through `matvec`. So `dot_legacy` serves one vector only for these
//! types: its tiles of four are not compiled (`simd128::dot_q4_0` and the others).

// See the parent module for why the loops over `T` index arrays in lockstep.
#![allow(clippy::needless_range_loop)]

use core::arch::wasm32::*;

use super::super::activation::{ActivationKind, TILE_CHUNKS, TileGroup};
use super::super::{ActivationBuf, GgmlType, Out};
use super::prepared_k;
use super::*;

/// Most blocks of a row that a [`Prepared`] holds (8,192 columns; longer rows go in runs of
/// this many, a multiple of a group's four blocks).
const MAX_BLOCKS: usize = 256;

/// One unpacked legacy row, or a run of at most [`MAX_BLOCKS`] of its blocks. Aligned to a
/// cache line, so that each group's unpacked weights (eight `v128`, 128 bytes) are two lines:
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
    /// Group `g`'s (blocks `4g..4g + 4`) 128 weights in the order of a [`TileGroup`]'s quants
    /// (relaxed build: unsigned bytes, SIMD128: i16): `weights[TILE_CHUNKS·g + c]` holds chunk
    /// `c` of each of the four blocks (past the row's blocks anything below 128: the
    /// activations there are zeros).
    weights: [v128; TILE_CHUNKS * MAX_BLOCKS / 4],
    /// Group `g`'s four weight scales, 0 without.
    scales: [v128; MAX_BLOCKS / 4],
    /// Group `g`'s four minimums, 0 without.
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
            weights: [zero; TILE_CHUNKS * MAX_BLOCKS / 4],
            scales: [zero; MAX_BLOCKS / 4],
            mins: [zero; MAX_BLOCKS / 4],
        }
    }
}

/// Unpacks the run of `row` (whole blocks of `L`) that starts at block `start` (a multiple of
/// [`MAX_BLOCKS`]) into `p`, group by group ([`group_weights`]).
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
        // (groups < MAX_BLOCKS / 4).
        unsafe {
            let blk = run.as_ptr().add(first * L::BYTES);
            let [d, m] = gather_scales::<L>(blk, count, &c.f16);
            p.scales[g] = d;
            p.mins[g] = m;
            let chunks = group_weights::<L>(blk, count, &c.masks);
            p.weights[TILE_CHUNKS * g..][..TILE_CHUNKS].copy_from_slice(&chunks);
        }
    }
}

/// The relaxed build's [`prepare`] of the group of `count` blocks at `blk`: each pair of
/// blocks as `Legacy::weights` gives it (runs of 8 taken in turn from its two blocks, so i32
/// lane `2i + h` of a dot holds values `8i + 4h..` of block `h`), the group's two pairs then
/// interleaved by 32-bit lanes into a [`TileGroup`]'s order.
///
/// # Safety
/// The group's `count` blocks must be readable.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn group_weights<L: Legacy<Weights = [v128; 4]>>(
    blk: *const u8,
    count: usize,
    masks: &build::Masks,
) -> [v128; TILE_CHUNKS] {
    // SAFETY: by the caller.
    unsafe {
        // (a missing second pair: zeros; a lone last block's partner: its copy, against the
        // activations' zeros)
        let a = pair_weights::<L>(blk, 0, count, masks);
        let b = match count {
            3 | 4 => pair_weights::<L>(blk, 1, count, masks),
            _ => [i32x4_splat(0); 4],
        };
        core::array::from_fn(|c| match c % 2 {
            0 => i32x4_shuffle::<0, 2, 4, 6>(a[c / 2], b[c / 2]),
            _ => i32x4_shuffle::<1, 3, 5, 7>(a[c / 2], b[c / 2]),
        })
    }
}

/// The SIMD128 build's [`prepare`] of the group of `count` blocks at `blk`: each block as
/// `Legacy::weights` gives it (four i16x8 in the activations' stored order, signed), the four
/// blocks then transposed by 32-bit lanes, so chunk `4v + j` holds i32 lane `j` (two weights)
/// of each block's vector `v` (missing blocks: zeros).
///
/// # Safety
/// The group's `count` blocks must be readable.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn group_weights<L: Legacy<Weights = [v128; 4]>>(
    blk: *const u8,
    count: usize,
    masks: &build::Masks,
) -> [v128; TILE_CHUNKS] {
    // SAFETY: by the caller (blocks k < count only).
    let w: [[v128; 4]; 4] = core::array::from_fn(|k| match k < count {
        true => unsafe { L::weights(blk, count, k, masks) },
        false => [i32x4_splat(0); 4],
    });
    let mut out = [i32x4_splat(0); TILE_CHUNKS];
    for v in 0..4 {
        let ab = [
            i32x4_shuffle::<0, 4, 1, 5>(w[0][v], w[1][v]),
            i32x4_shuffle::<2, 6, 3, 7>(w[0][v], w[1][v]),
        ];
        let cd = [
            i32x4_shuffle::<0, 4, 1, 5>(w[2][v], w[3][v]),
            i32x4_shuffle::<2, 6, 3, 7>(w[2][v], w[3][v]),
        ];
        for h in 0..2 {
            out[4 * v + 2 * h] = i32x4_shuffle::<0, 1, 4, 5>(ab[h], cd[h]);
            out[4 * v + 2 * h + 1] = i32x4_shuffle::<2, 3, 6, 7>(ab[h], cd[h]);
        }
    }
    out
}

/// `Σ row·x` of the two rows in `p` (the run's blocks) with each of the four vectors of the
/// tile whose groups are `tile`: `[row][vector]`. Per row and vector the same bits as `dot_legacy` (the same exact
/// i32 sum of each block, then the same float operations in the same order as
/// `legacy_group_pairs`: `acc + f32(sum)·(d·d_x)`, then `+ m·s`). Each load of activations
/// serves both rows, each load of weights the four vectors. A row of several runs keeps the sums
/// in `carry` from one run to the next (the result counts after its last run).
///
/// `narrow` sums the products of each run of `L::NARROW_RUN` chunks in i16 first
/// (`dot_i8::narrow_dots`).
#[inline(always)]
fn dot_tile<L: Prepare>(
    p: [&Prepared; 2],
    tile: &[TileGroup],
    carry: &mut [[v128; 4]; 2],
    narrow: bool,
) -> [[f32; 4]; 2] {
    let (first, n_blocks) = (p[0].first, p[0].n_blocks);
    assert!(p[1].first == first && p[1].n_blocks == n_blocks);
    let groups = &tile[first / 4..(first + n_blocks).div_ceil(4)];
    let mut acc = match first {
        0 => [[f32x4_splat(0.0); 4]; 2],
        _ => *carry,
    };
    for (g, tg) in groups.iter().enumerate() {
        // SAFETY: g < n_blocks.div_ceil(4), so 8g + 7 < 2 * MAX_BLOCKS and g < MAX_BLOCKS / 4;
        // the activations' loads are inside `tg`.
        unsafe {
            let w = |r: usize, c: usize| *p[r].weights.get_unchecked(TILE_CHUNKS * g + c);
            let y = |c: usize, t: usize| load(tg.quants[c][t].as_ptr());
            // dots[r][t]: lane k the i32 sum of block 4g + k of row r with vector t. The chunk
            // loops' bounds are hidden from LLVM: unrolled, it hoisted all sixteen weight
            // vectors of the group and ran the eight sums one after another, and V8 kept most
            // of them on the stack (bench_matvec, Node 24: Q4_0 41.5, Q4_1 39.9 GMAC/s, against
            // 51.5 and 47.8 with the loop).
            let mut dots = [[i32x4_splat(0); 4]; 2];
            #[cfg(not(target_feature = "relaxed-simd"))]
            {
                let _ = narrow;
                for c in 0..core::hint::black_box(TILE_CHUNKS) {
                    let w = [w(0, c), w(1, c)];
                    for t in 0..4 {
                        let y = y(c, t);
                        for r in 0..2 {
                            dots[r][t] = i32x4_add(dots[r][t], i32x4_dot_i16x8(w[r], y));
                        }
                    }
                }
            }
            #[cfg(target_feature = "relaxed-simd")]
            if narrow {
                let run = L::NARROW_RUN;
                for part in 0..TILE_CHUNKS / run {
                    let mut h = [[i16x8_splat(0); 4]; 2];
                    for c in run * part..run * part + core::hint::black_box(run) {
                        let w = [w(0, c), w(1, c)];
                        for t in 0..4 {
                            let y = y(c, t);
                            for r in 0..2 {
                                h[r][t] =
                                    i16x8_add(h[r][t], i16x8_relaxed_dot_i8x16_i7x16(y, w[r]));
                            }
                        }
                    }
                    for r in 0..2 {
                        for t in 0..4 {
                            let wide = i32x4_extadd_pairwise_i16x8(h[r][t]);
                            dots[r][t] = i32x4_add(dots[r][t], wide);
                        }
                    }
                }
            } else {
                for c in 0..core::hint::black_box(TILE_CHUNKS) {
                    let w = [w(0, c), w(1, c)];
                    for t in 0..4 {
                        let y = y(c, t);
                        for r in 0..2 {
                            dots[r][t] = i32x4_relaxed_dot_i8x16_i7x16_add(y, w[r], dots[r][t]);
                        }
                    }
                }
            }
            for t in 0..4 {
                let (scales, block_sums) =
                    (load(tg.scales[t].as_ptr()), load(tg.bsums[t].as_ptr()));
                for r in 0..2 {
                    let mut sum = dots[r][t];
                    if let Some(shift) = L::OFFSET_SHIFT {
                        // Σ (q - o)·y = Σ q·y - o·Σ y, exact in i32
                        sum = i32x4_sub(sum, i32x4_shl(block_sums, shift));
                    }
                    let dd = f32x4_mul(*p[r].scales.get_unchecked(g), scales);
                    acc[r][t] = f32x4_add(acc[r][t], f32x4_mul(f32x4_convert_i32x4(sum), dd));
                    if L::MIN_AT.is_some() {
                        let s = load(tg.sums[t].as_ptr());
                        acc[r][t] = f32x4_add(acc[r][t], f32x4_mul(*p[r].mins.get_unchecked(g), s));
                    }
                }
            }
        }
    }
    if !p[0].last {
        *carry = acc;
    }
    acc.map(|a| a.map(hsum_f32))
}

/// `matmul_strided`'s products for the types above and Q4_K/Q5_K (`prepared_k.rs`), the same
/// bits: `w` holds `n_rows` rows of `rb` bytes, product `(v, r)` goes to `y[v * y_stride + r]`.
/// Returns `false`, having done nothing, for another type or a single vector (decode: the
/// one-vector kernels read the row directly).
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
    if xs.n_vecs() < 2 {
        return false;
    }
    let b = Batch {
        w,
        rb,
        xs,
        n_rows,
        y,
        y_stride,
    };
    // SAFETY: passed on.
    unsafe {
        match ty {
            GgmlType::Q4_0 => matmul_with(build::Q4_0::kernels(), b),
            GgmlType::Q4_1 => matmul_with(build::Q4_1::kernels(), b),
            GgmlType::Q5_0 => matmul_with(build::Q5_0::kernels(), b),
            GgmlType::Q5_1 => matmul_with(build::Q5_1::kernels(), b),
            #[cfg(not(target_feature = "relaxed-simd"))]
            GgmlType::Q8_0 => matmul_with(build::Q8_0::kernels(), b),
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => prepared_k::matmul(ty, b),
            _ => return false,
        }
    }
    true
}

/// One batched product: `n_rows` rows of `rb` bytes in `w` times the vectors of `xs`, product
/// `(v, r)` to `y[v * y_stride + r]`.
pub(super) struct Batch<'a> {
    pub w: &'a [u8],
    pub rb: usize,
    pub xs: &'a ActivationBuf,
    pub n_rows: usize,
    pub y: *mut f32,
    pub y_stride: usize,
}

/// Tiles of four vectors taken together in [`row_pairs`] (so the carries of a long row's runs
/// fit on the stack).
const TILES: usize = 8;

/// A type's [`Prepare`]: its block size, whether it takes Q8_1 activations (`Legacy::MIN_AT`),
/// and its unpacking and product.
#[derive(Clone, Copy)]
struct Kernels {
    bytes: usize,
    kind: ActivationKind,
    prepare_row: fn(&[u8], usize, &mut Prepared),
    dot_tile: DotTile,
}

type DotTile = fn([&Prepared; 2], &[TileGroup], &mut [[v128; 4]; 2], bool) -> [[f32; 4]; 2];

/// [`matmul`] for one type, through [`row_pairs`]. (One copy for the four types: the unpacking
/// and the product are called once per row and run and once per tile.)
///
/// # Safety
/// As [`matmul`].
#[inline(never)]
unsafe fn matmul_with(k: Kernels, b: Batch<'_>) {
    let n_blocks = b.rb / k.bytes;
    assert!(b.xs.kind() == Some(k.kind) && b.xs.n_cols() == 32 * n_blocks);
    let narrow = build::narrow_dots();
    let mut p = [Prepared::new(), Prepared::new()];
    // SAFETY: passed on (this function's contract).
    unsafe {
        row_pairs(
            &mut p,
            &b,
            [n_blocks, MAX_BLOCKS],
            k.prepare_row,
            |p| p.last,
            |i| b.xs.tile(i),
            |pair, tile, carry| (k.dot_tile)(pair, tile, carry, narrow),
        )
    };
}

/// The loop of the prepared products (this file's and `prepared_k.rs`'s): the rows two at a time
/// (a last odd row as a pair with itself), each of `units` blocks (or super-blocks) unpacked
/// `run` at a time into `p` by `prepare(row, first unit, p)`, each run of a pair then
/// multiplied with every tile of four vectors (`tile(i)`: tile `i`'s activations, looked up once
/// per [`TILES`] tiles) by `dot(p, tile, carry)` (`carry`: the tile's sums over a long row's runs
/// so far); after a row's last run (`last(p)`) the products are stored, those past the batch (a
/// tile padded to four) and of a lone row's copy dropped.
///
/// # Safety
/// As [`matmul`], for `b`.
#[inline(always)]
pub(super) unsafe fn row_pairs<P, T>(
    p: &mut [P; 2],
    b: &Batch<'_>,
    [units, run]: [usize; 2],
    prepare: impl Fn(&[u8], usize, &mut P),
    last: impl Fn(&P) -> bool,
    tile: impl Fn(usize) -> T,
    mut dot: impl FnMut([&P; 2], &T, &mut [[v128; 4]; 2]) -> [[f32; 4]; 2],
) {
    let n_vecs = b.xs.n_vecs();
    let n_tiles_all = n_vecs.div_ceil(4);
    for tile0 in (0..n_tiles_all).step_by(TILES) {
        let n_tiles = (n_tiles_all - tile0).min(TILES);
        // each tile's activations looked up once, not once per pair of rows
        let tiles: [T; TILES] = core::array::from_fn(|i| tile((tile0 + i).min(n_tiles_all - 1)));
        let mut carry = [[[f32x4_splat(0.0); 4]; 2]; TILES];
        for r in (0..b.n_rows).step_by(2) {
            let rows = (b.n_rows - r).min(2);
            let row = |i: usize| &b.w[(r + i.min(rows - 1)) * b.rb..][..b.rb];
            for first in (0..units).step_by(run) {
                let [p0, p1] = &mut *p;
                prepare(row(0), first, p0);
                if rows == 2 {
                    prepare(row(1), first, p1);
                }
                let pair = [&p[0], &p[rows - 1]];
                for (i, carry) in carry[..n_tiles].iter_mut().enumerate() {
                    let tile = tile0 + i;
                    let sums = dot(pair, &tiles[i], carry);
                    if !last(&p[0]) {
                        continue;
                    }
                    let vecs = (n_vecs - 4 * tile).min(4);
                    // SAFETY: (4 tile + t, r + k) with t < vecs and k < rows: elements the
                    // caller vouches for.
                    let out = unsafe {
                        Out::strided(b.y.add(4 * tile * b.y_stride + r), b.y_stride, rows, vecs)
                    };
                    for (k, sums) in sums.into_iter().take(rows).enumerate() {
                        out.store(k, sums);
                    }
                }
            }
        }
    }
}

/// A type's unpacking and product, each compiled once (`#[inline(never)]`, as the kernels of
/// `simd128`).
trait Prepare: Legacy<Weights = [v128; 4]> {
    /// Chunks of a group (of 8) whose products [`dot_tile`] sums in i16 before it widens them,
    /// where it sums in i16: an i16 lane adds two products per chunk of a weight below 16 (4-bit
    /// types) or 32 (5-bit) and an activation of at most 127 in size: 8 chunks of 4-bit weights
    /// come to at most 30,480, 4 chunks of 5-bit ones to 31,496.
    #[cfg(target_feature = "relaxed-simd")]
    const NARROW_RUN: usize;
    fn kernels() -> Kernels {
        Kernels {
            bytes: Self::BYTES,
            kind: match Self::MIN_AT {
                Some(_) => ActivationKind::Q8_1,
                None => ActivationKind::Q8_0,
            },
            prepare_row: Self::prepare_row,
            dot_tile: Self::dot_tile,
        }
    }
    fn prepare_row(row: &[u8], start: usize, p: &mut Prepared);
    fn dot_tile(
        p: [&Prepared; 2],
        tile: &[TileGroup],
        carry: &mut [[v128; 4]; 2],
        narrow: bool,
    ) -> [[f32; 4]; 2];
}

// One impl per type (deliberately alike: see the module doc of `simd128`).
macro_rules! prepare_impls {
    ($($L:ty: $run:expr),*) => {$(
        impl Prepare for $L {
            #[cfg(target_feature = "relaxed-simd")]
            const NARROW_RUN: usize = $run;
            #[inline(never)]
            fn prepare_row(row: &[u8], start: usize, p: &mut Prepared) {
                prepare::<Self>(row, start, p)
            }
            #[inline(never)]
            fn dot_tile(
                p: [&Prepared; 2],
                tile: &[TileGroup],
                carry: &mut [[v128; 4]; 2],
                narrow: bool,
            ) -> [[f32; 4]; 2] {
                dot_tile::<Self>(p, tile, carry, narrow)
            }
        }
    )*};
}
// (NARROW_RUN: the relaxed build's; SIMD128's Q8_0 never sums in i16)
prepare_impls!(build::Q4_0: 8, build::Q4_1: 8, build::Q5_0: 4, build::Q5_1: 4);
#[cfg(not(target_feature = "relaxed-simd"))]
prepare_impls!(build::Q8_0: 0);
