//! Batched products of F16 weights (both builds): each weight row is converted to f32 once
//! (exact: [`f16x8_finite_to_f32`], the loader having checked that the weights are finite) into
//! a scratch on the stack, then every tile of up to four vectors of the batch is multiplied
//! with the scratch by the F32 kernel (a tile of 2 or 3 runs as 4 with its last vector
//! repeated, the extra products dropped). Without it the conversion, about as many
//! instructions as a tile's products, is repeated for every tile of every row (once per tile:
//! 28 times per row for 110 tokens).
//! Measured on all-MiniLM-L6-v2 (F16, one thread, wasmtime): 1.5-1.7x the texts per second.
//!
//! `dot_f16` and `dot_f32` share `dot_float`'s sums, so the F32 kernel on the converted row
//! gives the same bits as `dot_f16` on the F16 row: a batch the same as one vector at a time.

use core::arch::wasm32::*;

use super::super::{ActivationBuf, Out};
use super::*;

/// Most columns of a row that the scratch holds (32 KiB of f32 on the stack; longer rows take
/// `dot_f16` per tile).
const MAX_COLS: usize = 8192;

/// Batches of at most this many vectors at a time (their activation rows are looked up once
/// per batch, not once per weight row, and stay in cache while every row meets them).
const VECS: usize = 32;

/// One converted row: its `n` weights as f32, the first `n` of `values` read as floats.
struct Converted {
    values: [v128; MAX_COLS / 4],
}

impl Converted {
    /// The first `n` values as the little-endian bytes of an F32 row.
    fn row(&self, n: usize) -> &[u8] {
        assert!(n <= MAX_COLS);
        // SAFETY: `values` holds MAX_COLS f32 (16 bytes per v128), n <= MAX_COLS of them read
        // as bytes for as long as `self` is borrowed; any bytes are valid u8.
        unsafe { core::slice::from_raw_parts(self.values.as_ptr().cast::<u8>(), 4 * n) }
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
    let mut c = Converted {
        values: [f32x4_splat(0.0); MAX_COLS / 4],
    };
    for v0 in (0..n_vecs).step_by(VECS) {
        let batch = (n_vecs - v0).min(VECS);
        // tiles[i]: vectors v0 + 4i .. v0 + 4i + 4 (past the batch: its last again, dropped)
        let tiles: [[ActRow<'_>; 4]; VECS / 4] = core::array::from_fn(|i| {
            core::array::from_fn(|t| xs.row(v0 + (4 * i + t).min(batch - 1)))
        });
        for r in 0..n_rows {
            convert(&w[r * rb..(r + 1) * rb], &mut c);
            let row = c.row(n);
            for (i, x) in tiles[..batch.div_ceil(4)].iter().enumerate() {
                let vecs = (batch - 4 * i).min(4);
                // SAFETY: (v0 + 4i + t, r) with t < vecs <= batch - 4i and r < n_rows: elements
                // the caller vouches for.
                let out =
                    unsafe { Out::strided(y.add((v0 + 4 * i) * y_stride + r), y_stride, 1, vecs) };
                match vecs {
                    1 => dot_f32::<1>(row, row.len(), &[x[0]], out),
                    _ => dot_f32::<4>(row, row.len(), x, out),
                }
            }
        }
    }
    true
}
