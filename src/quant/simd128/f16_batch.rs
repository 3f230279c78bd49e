//! Batched products of F16 weights (both builds): each pair of weight rows is converted to f32
//! once (exact: [`f16x8_finite_to_f32`], the loader having checked that the weights are finite)
//! into scratches on the stack, then every tile of two vectors of the batch is multiplied with
//! both rows at once ([`dot_rows2`]; a last tile of one runs as two with its vector repeated, a
//! last lone row beside a stale one, the extra products dropped). Without it the conversion,
//! about as many instructions as a tile's products, is repeated for every tile of every row
//! (once per tile: 28 times per row for 110 tokens).
//! Measured on all-MiniLM-L6-v2 (F16, one thread, wasmtime): 1.5-1.7x the texts per second
//! with one row and tiles of four vectors; two rows and two vectors then took the 40 corpus
//! texts from 5.47-5.63 to 6.59-6.67 texts/s (wasmtime, relaxed) and from 5.75-5.93 to
//! 6.91-6.97 (Node 20, SIMD128, the page API), interleaved.
//!
//! [`dot_rows2`] sums as `dot_float` does, so a batch gives the same bits as `dot_f16` on the
//! F16 row one vector at a time.

use core::arch::wasm32::*;

use super::super::{ActivationBuf, Out};
use super::*;

/// Most columns of a row that a scratch holds (two of 32 KiB of f32 on the stack; longer rows
/// take `dot_f16` per tile).
const MAX_COLS: usize = 8192;

/// Batches of at most this many vectors at a time (their activation rows are looked up once
/// per batch, not once per weight row, and stay in cache while every row meets them).
const VECS: usize = 32;

/// One converted row: its `n` weights as f32 in the first `n` floats of `values`.
struct Converted {
    values: [v128; MAX_COLS / 4],
}

impl Converted {
    /// The first `n` values, as floats.
    fn floats(&self, n: usize) -> &[f32] {
        assert!(n <= MAX_COLS);
        // SAFETY: `values` holds MAX_COLS f32 (four per v128, which is plain bits), n of them
        // read for as long as `self` is borrowed.
        unsafe { core::slice::from_raw_parts(self.values.as_ptr().cast::<f32>(), n) }
    }
}

/// Converts the F16 `row` (at most [`MAX_COLS`] weights) into `c`.
#[inline(never)]
fn convert(row: &[u8], c: &mut Converted) {
    let n = row.len() / 2;
    assert!(n <= MAX_COLS);
    let k = F16Bits::opaque();
    for g in 0..n / 8 {
        // SAFETY: bytes 16g..16g + 16 lie in the row (g < n / 8).
        let (lo, hi) = unsafe { f16x8_finite_to_f32(row.as_ptr().add(16 * g), &k) };
        c.values[2 * g] = lo;
        c.values[2 * g + 1] = hi;
    }
    // The last n % 8 weights, one at a time, into the lanes after the whole groups.
    let mut tail = [0.0f32; 8];
    for (t, j) in (n / 8 * 8..n).enumerate() {
        tail[t] = f16_at(row, 2 * j);
    }
    if !n.is_multiple_of(8) {
        let g = n / 8;
        // SAFETY: `tail` is 8 f32 (32 bytes); g < MAX_COLS / 8, as n <= MAX_COLS is no
        // multiple of 8.
        unsafe {
            c.values[2 * g] = load(tail.as_ptr());
            c.values[2 * g + 1] = load(tail.as_ptr().add(4));
        }
    }
}

/// `matmul_strided`'s products for F16 weights, the same bits: `w` holds `n_rows` rows of `rb`
/// bytes, product `(v, r)` goes to `y[v * y_stride + r]`. Returns `false`, having done nothing,
/// for a row longer than [`MAX_COLS`] or a single vector (nothing to share: `dot_f16` reads the
/// row directly).
///
/// # Safety
/// As `matmul_strided`: those `n_vecs * n_rows` elements must be writable and not accessed by
/// anyone else during the call.
pub(in crate::quant) unsafe fn matmul(
    w: &[u8],
    rb: usize,
    xs: &ActivationBuf,
    n_rows: usize,
    y: *mut f32,
    y_stride: usize,
) -> bool {
    let n_vecs = xs.n_vecs();
    let n = rb / 2;
    if n > MAX_COLS || n_vecs < 2 {
        return false;
    }
    let mut c = [0, 1].map(|_| Converted {
        values: [f32x4_splat(0.0); MAX_COLS / 4],
    });
    for v0 in (0..n_vecs).step_by(VECS) {
        let batch = (n_vecs - v0).min(VECS);
        // tiles[i]: vectors v0 + 2i, v0 + 2i + 1 (past the batch: its last again, dropped)
        let tiles: [[ActRow<'_>; 2]; VECS / 2] = core::array::from_fn(|i| {
            core::array::from_fn(|t| xs.row(v0 + (2 * i + t).min(batch - 1)))
        });
        for r in (0..n_rows).step_by(2) {
            let pair = r + 1 < n_rows;
            convert(&w[r * rb..(r + 1) * rb], &mut c[0]);
            if pair {
                convert(&w[(r + 1) * rb..(r + 2) * rb], &mut c[1]);
            }
            let rows = [c[0].floats(n), c[1].floats(n)];
            for (i, x) in tiles[..batch.div_ceil(2)].iter().enumerate() {
                let vecs = (batch - 2 * i).min(2);
                // SAFETY: (v0 + 2i + t, r..r + 2) with t < vecs <= batch - 2i and r + 1 <
                // n_rows when paired: elements the caller vouches for.
                let out = unsafe {
                    Out::strided(
                        y.add((v0 + 2 * i) * y_stride + r),
                        y_stride,
                        1 + pair as usize,
                        vecs,
                    )
                };
                let sums = dot_rows2(rows, x);
                out.store(0, sums[0]);
                if pair {
                    out.store(1, sums[1]);
                }
            }
        }
    }
    true
}

/// Two converted rows (the second a stale or zero row when the first is a matrix's last, its
/// products dropped) times two vectors: each product summed by `dot_float`'s own steps
/// (`float_step`, `float_sum`), so the same bits as one row and vector at a time; per 8
/// weights four row loads and four vector loads feed eight multiply-adds, where a row with a
/// tile of four vectors loads ten.
#[inline(never)]
fn dot_rows2(rows: [&[f32]; 2], xs: &[ActRow<'_>; 2]) -> [[f32; 2]; 2] {
    let n = rows[0].len();
    assert!(rows[1].len() == n && xs.iter().all(|x| x.values.len() >= n));
    let mut acc = [[[f32x4_splat(0.0); 2]; 2]; 2];
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, the length of each row and at most each vector's (asserted).
        unsafe {
            let w = rows.map(|row| values8(row.as_ptr().add(i)));
            for t in 0..2 {
                let x = values8(xs[t].values.as_ptr().add(i));
                for r in 0..2 {
                    float_step(&mut acc[r][t], w[r], x);
                }
            }
        }
        i += 8;
    }
    core::array::from_fn(|r| {
        core::array::from_fn(|t| float_sum(acc[r][t], (i..n).map(|j| rows[r][j] * xs[t].values[j])))
    })
}
