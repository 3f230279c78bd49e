//! Weight types and the kernels over them.
//!
//! [`GgmlType`] is the tensor type id used by GGUF files (ggml's `enum ggml_type`), with the
//! block geometry needed to size a tensor. Which types the engine can *compute* with is decided
//! by the kernels in this module; the GGUF reader only needs sizes to bounds-check the file.
//!
//! # Computing with weights
//!
//! Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K ([`is_supported`]).
//! A product `y = W · x` goes in two steps, as in ggml:
//!
//! 1. [`quantize_activation`] (or [`quantize_activations`] for a batch) rounds `x` to the weight
//!    type's activation format (Q8_0, Q8_1, Q8_K, f16, bf16 or f32, see `activation.rs`) into a
//!    reusable [`ActivationBuf`];
//! 2. [`matvec`] (one vector) or [`matmul`] (a batch; each weight row is decoded once per 4
//!    vectors, 2 for the float types, and in the relaxed-SIMD build once per batch of up to 32
//!    for the 4- and 5-bit legacy types) multiplies a range of weight rows, read in place from
//!    the model file, with it. Per vector both do the same operations in the same order, so a
//!    batched prefill gives bit-identical results to one vector at a time.
//!
//! The legacy types' rows are read as the loader leaves them: [`group_rows`] rewrites each
//! row of the file in place so that every four blocks keep their scales side by side
//! (`grouped.rs`), and each Q6_K super-block with its quants repacked
//! (`k_quants::repack_q6k`). Everything here that takes their bytes takes them so.
//!
//! [`dequantize_row`] turns one weight row into f32 (embedding lookups, tests).
//!
//! Each block family has its own file (`float.rs`, `q4.rs`, `q5.rs`, `q8.rs`, `k_quants.rs`)
//! with its `#[repr(C)]` layout, dequantization and a scalar reference dot product written for
//! reading, not speed. `simd128.rs` has the wasm SIMD128 kernels: int8 products summed exactly
//! in i32 with `i32x4.dot_i16x8_s`, converted to f32 once per block. The only switch between
//! them is each type's [`Kernels::dot`] (`simd128_or!`): SIMD when the crate is built with
//! `simd128`, the reference otherwise.

/// ggml tensor type ids, as stored in GGUF tensor infos. Ids 4, 5 and 31..33, 36..38 were
/// removed from ggml and never appear in current files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
    /// A type id this build knows by name only (IQ*, TQ*, MXFP4, ...) or not at all.
    Other(u32),
}

impl GgmlType {
    pub const fn from_id(id: u32) -> GgmlType {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            9 => GgmlType::Q8_1,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            15 => GgmlType::Q8K,
            24 => GgmlType::I8,
            25 => GgmlType::I16,
            26 => GgmlType::I32,
            27 => GgmlType::I64,
            28 => GgmlType::F64,
            30 => GgmlType::BF16,
            other => GgmlType::Other(other),
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q2K => "Q2_K",
            GgmlType::Q3K => "Q3_K",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::Q8K => "Q8_K",
            GgmlType::I8 => "I8",
            GgmlType::I16 => "I16",
            GgmlType::I32 => "I32",
            GgmlType::I64 => "I64",
            GgmlType::F64 => "F64",
            GgmlType::BF16 => "BF16",
            GgmlType::Other(16) => "IQ2_XXS",
            GgmlType::Other(17) => "IQ2_XS",
            GgmlType::Other(18) => "IQ3_XXS",
            GgmlType::Other(19) => "IQ1_S",
            GgmlType::Other(20) => "IQ4_NL",
            GgmlType::Other(21) => "IQ3_S",
            GgmlType::Other(22) => "IQ2_S",
            GgmlType::Other(23) => "IQ4_XS",
            GgmlType::Other(29) => "IQ1_M",
            GgmlType::Other(34) => "TQ1_0",
            GgmlType::Other(35) => "TQ2_0",
            GgmlType::Other(39) => "MXFP4",
            GgmlType::Other(_) => "unknown",
        }
    }

    /// `(elements per block, bytes per block)`, or `None` for a type this build cannot size.
    pub const fn block_geometry(self) -> Option<(usize, usize)> {
        Some(match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q8_1 => (32, 36),
            GgmlType::Q2K => (256, 84),
            GgmlType::Q3K => (256, 110),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            GgmlType::Q8K => (256, 292),
            GgmlType::I8 => (1, 1),
            GgmlType::I16 => (1, 2),
            GgmlType::I32 => (1, 4),
            GgmlType::I64 | GgmlType::F64 => (1, 8),
            GgmlType::Other(_) => return None,
        })
    }

    /// Bytes of a row of `n` elements, or `None` if `n` is not a whole number of blocks or the
    /// type cannot be sized.
    pub const fn row_bytes(self, n: u64) -> Option<u64> {
        match self.block_geometry() {
            Some((elems, bytes)) if n.is_multiple_of(elems as u64) => {
                (n / elems as u64).checked_mul(bytes as u64)
            }
            _ => None,
        }
    }
}

mod activation;
mod float;
mod grouped;
mod half;
mod k_quants;
mod q4;
mod q5;
mod q8;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
use core::marker::PhantomData;
use core::ops::Range;

pub use activation::{
    ActivationBuf, ActivationKind, BatchFill, quantize_activation, quantize_activations,
    start_batch, stored_index,
};
pub use grouped::group_rows;
pub use half::{
    F16_REBIAS, bf16_to_f32, f16_finite_scaled, f16_is_finite, f16_to_f32, f32_to_bf16, f32_to_f16,
    round_to_f16,
};
pub use q8::quantize_row_q8_0;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use simd128::{F16Bits, f16_sext_finite_to_f32, f16_sext_scaled, madd};

use crate::error::{Result, Status};
use crate::{bail, err};
use activation::ActRow;

/// A weight block that may be viewed in place inside a model file.
///
/// # Safety
/// Implementors are `#[repr(C)]` structs of byte arrays (`u8`, `i8`, [`half::F16`]) only:
/// alignment 1, no padding, and every bit pattern is a valid value.
unsafe trait Block: Sized {}

/// `bytes` as whole blocks (a trailing partial block is left out).
#[inline(always)]
fn as_blocks<B: Block>(bytes: &[u8]) -> &[B] {
    debug_assert!(bytes.len().is_multiple_of(size_of::<B>()));
    // SAFETY: by the `Block` contract `B` has alignment 1 and accepts any bytes, and the
    // `len / size_of::<B>()` blocks lie inside `bytes`, borrowed for the same lifetime.
    unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size_of::<B>()) }
}

/// The kernels of one supported weight type.
trait Kernels {
    /// Weights per block and the block's size in bytes.
    const BLOCK_VALUES: usize;
    const BLOCK_BYTES: usize;
    /// What activations are rounded to before a product with this type.
    const ACTIVATION: ActivationKind;

    /// `row` (whole blocks) -> `out` (`[row.len() / BLOCK_BYTES * BLOCK_VALUES]`).
    fn dequantize(row: &[u8], out: &mut [f32]);

    /// Reference product of one weight row (whole blocks) with one activation vector of the same
    /// length: plain loops in natural order, the specification the fast kernels are tested
    /// against.
    fn dot_ref(row: &[u8], x: &ActRow<'_>) -> f32;

    /// The same product for every whole row of `w` (`rb` bytes each) with `T` activation vectors
    /// at once (each row is decoded once for all of them), row `r` times vector `t` stored at
    /// `y`'s `(t, r)`: `simd128_or!(the SIMD128 kernel, Self::dot_ref_n(..))`. The loop over
    /// rows is inside, so what a kernel sets up (checks, constants) it sets up once.
    fn dot<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>);

    /// [`Kernels::dot_ref`] for each row and each of `T` vectors.
    #[inline(always)]
    fn dot_ref_n<const T: usize>(w: &[u8], rb: usize, xs: &[ActRow<'_>; T], y: Out<'_>) {
        for_rows(w, rb, y, |row| -> [f32; T] {
            core::array::from_fn(|t| Self::dot_ref(row, &xs[t]))
        })
    }
}

/// Where a kernel call stores its products: row `r` (counted from the call's first row) times
/// vector `t` at `ptr[t * stride + r]`, for `r < rows` and `t < vecs`. Threads fill disjoint
/// column ranges of one `(vecs, stride)` output through these, hence a pointer, not a slice.
/// (Copies write to the same elements, from the thread that holds them, one after another.)
#[derive(Clone, Copy)]
struct Out<'a> {
    ptr: *mut f32,
    stride: usize,
    rows: usize,
    vecs: usize,
    _y: PhantomData<&'a mut [f32]>,
}

impl<'a> Out<'a> {
    /// One vector's products, row `r` at `y[r]`.
    fn vector(y: &'a mut [f32]) -> Out<'a> {
        // SAFETY: `y` is borrowed mutably for 'a: its `y.len()` elements are ours alone.
        unsafe { Out::strided(y.as_mut_ptr(), y.len(), y.len(), 1) }
    }

    /// # Safety
    /// Elements `ptr[t * stride + r]` for `r < rows`, `t < vecs` must be writable and not
    /// accessed by anyone else while 'a lives.
    unsafe fn strided(ptr: *mut f32, stride: usize, rows: usize, vecs: usize) -> Out<'a> {
        Out {
            ptr,
            stride,
            rows,
            vecs,
            _y: PhantomData,
        }
    }

    /// Vector `t`'s products alone.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn vector_at(&self, t: usize) -> Out<'_> {
        assert!(t < self.vecs, "Out::vector_at out of bounds");
        // SAFETY: vector t's elements are among ours (`strided`'s contract), borrowed with us.
        unsafe { Out::strided(self.ptr.add(t * self.stride), self.stride, self.rows, 1) }
    }

    /// Stores row `r`'s products with the `T` vectors; products past the output's `vecs` (a tile
    /// padded with repeats of its last vector) are dropped.
    #[inline(always)]
    fn store<const T: usize>(&self, r: usize, products: [f32; T]) {
        assert!(r < self.rows, "Out::store out of bounds");
        for (t, value) in products.into_iter().enumerate().take(self.vecs) {
            // SAFETY: (t, r) is inside the output (checked), ours by `strided`'s contract.
            unsafe { *self.ptr.add(t * self.stride + r) = value };
        }
    }
}

/// Stores `dot(row)` for each whole row of `w` (`rb` bytes each) at `y` (the body of every
/// [`Kernels::dot`]). With one vector (decode, where the weights stream from memory) the rows
/// are read as four streams: the rows split in four runs (the first takes the rows left over),
/// and each turn of the loop multiplies the next row of each run, each first touching the page
/// ahead of its row ([`touch_page_ahead`]). Every product is the same dot in any order: the
/// same bits.
///
/// What makes this fast is four copies of the dot in the loop body, one per stream (each copy's
/// loads walk one run of rows, which the CPU's prefetchers follow); the same four streams
/// through one copy were slower than two streams through two copies. SmolLM2-135M Q4_1,
/// relaxed, one thread, interleaved rounds (tok/s, medians of 3):
/// - two streams against one (6112536): Chromium 148 76.8 -> 112.7, wasmtime 67.2 -> 82.8;
///   alternating between the halves through one copy, 81-91 against one stream's 77-83;
/// - four against two: Chromium 87.3 -> 95.8, wasmtime 77.1 -> 92.9; with a fifth copy for
///   the last rows (medians of 2): Gemma 3 270M Q4_K_M Chromium 35.2 -> 37.7, wasmtime 31.9
///   -> 34.7; two threads, Chromium 147.2 -> 149.1, wasmtime 133.5 -> 139.2;
/// - four through one copy (row `(i % 4) * n / 4 + i / 4`): wasmtime 72.9, Chromium 81.8,
///   against two copies' 76.9 and 87.3; eight copies: 87.6 and 94.8 against four's 90.4 and
///   97.4; one stream touching eight pages at a time: 61.3 and 66.1.
///
/// Each copy costs the module its kernel's dot once more: the relaxed modules are 32 KB larger
/// than with two streams (where the last odd row had a copy of its own), 94 KB larger than
/// with one.
#[inline(always)]
fn for_rows<const T: usize>(
    w: &[u8],
    rb: usize,
    y: Out<'_>,
    mut dot: impl FnMut(&[u8]) -> [f32; T],
) {
    let mut touched = 0u32;
    if T == 1 {
        // Runs [0, first), [first, first + q), [first + q, first + 2q), [first + 2q, n).
        let n = w.len() / rb;
        let q = n / 4;
        let first = n - 3 * q;
        for r in 0..first {
            let rs = [r, first + r, first + q + r, first + 2 * q + r];
            let all = r < q;
            for s in rs.into_iter().take(if all { 4 } else { 1 }) {
                touched = touched.wrapping_add(touch_page_ahead(w, s * rb, rb));
            }
            y.store(rs[0], dot(&w[rs[0] * rb..][..rb]));
            if all {
                y.store(rs[1], dot(&w[rs[1] * rb..][..rb]));
                y.store(rs[2], dot(&w[rs[2] * rb..][..rb]));
                y.store(rs[3], dot(&w[rs[3] * rb..][..rb]));
            }
        }
    } else {
        for (r, row) in w.chunks_exact(rb).enumerate() {
            y.store(r, dot(row));
        }
    }
    if T == 1 {
        // SAFETY: a local; the volatile store keeps the touches' loads.
        unsafe { core::ptr::write_volatile(&mut touched, touched) };
    }
}

/// The page [`touch_page_ahead`] works in: the prefetchers' limit, and the host's page size.
const PAGE: usize = 4096;
/// A cache line.
const LINE: usize = 64;
/// How far ahead of the row being multiplied [`touch_page_ahead`] looks: one page.
const PAGE_AHEAD: usize = PAGE;
/// Cache lines [`touch_page_ahead`] reads at the start of a page.
const PAGE_TOUCHES: usize = 3;

/// Reads the first [`PAGE_TOUCHES`] cache lines of each 4 KiB page (of linear memory, so of
/// the host's pages too) that starts in `w[at + PAGE_AHEAD..][..rb]` and holds them in `w`;
/// returns the sum of the bytes read, for the caller to keep.
///
/// A CPU's stream prefetchers do not cross a 4 KiB page: without this, every page of a matrix
/// begins with misses the kernel waits for. Read a page early, they start on it while the rows
/// before it are multiplied. One thread, decode, interleaved: SmolLM2-135M Q4_1 in Chromium 148
/// (relaxed) 67.7-80.7 -> 79.9-83.0 tok/s, in wasmtime 66.5-72.1 -> 77.4-80.8; Gemma 3 270M
/// Q4_K_M in Chromium 22.3-22.5 -> 28.7-28.8, in wasmtime 21.6-22.4 -> 27.1-27.2. Touching
/// every line of the row a page ahead instead was 10 % faster in Chromium but 5 % slower in
/// wasmtime; one line per page, 4 or 8 KiB ahead, was as good in wasmtime and unclear in
/// Chromium; three lines 8 KiB ahead, the same as 4 KiB. Not better: touching from `matvec`
/// ahead of each page-sized run of rows, bounded by the whole matrix so that a pool chunk's
/// last rows touch the next chunk's first pages (a kernel call per run: decode 3-5 % slower on
/// one thread and on two); touching the f16 KV cache ahead in decode's attention (after a
/// 968-token prompt: no change, 49.8-50.5 against 49.9-50.2 tok/s in wasmtime).
#[inline(always)]
fn touch_page_ahead(w: &[u8], at: usize, rb: usize) -> u32 {
    // In offsets from `w` (no address arithmetic that could wrap at the top of memory): `w`
    // starts `misalign` bytes into a page.
    let misalign = w.as_ptr() as usize % PAGE;
    let from = at + PAGE_AHEAD;
    let mut first = (from + misalign).next_multiple_of(PAGE) - misalign;
    let mut sum = 0u32;
    while first < from + rb {
        if first + LINE * (PAGE_TOUCHES - 1) >= w.len() {
            break;
        }
        for line in 0..PAGE_TOUCHES {
            // SAFETY: `first + LINE * line < w.len()` (checked above); a volatile read stays.
            let byte = unsafe { core::ptr::read_volatile(w.as_ptr().add(first + LINE * line)) };
            sum = sum.wrapping_add(byte as u32);
        }
        first += PAGE;
    }
    sum
}

/// Runs `$body` with `$K` naming the kernel type of `$ty`, or evaluates `$none` for a type
/// without kernels.
macro_rules! with_kernels {
    ($ty:expr, $K:ident => $body:expr, _ => $none:expr) => {
        match $ty {
            GgmlType::F32 => {
                type $K = float::F32;
                $body
            }
            GgmlType::F16 => {
                type $K = float::F16;
                $body
            }
            GgmlType::BF16 => {
                type $K = float::BF16;
                $body
            }
            GgmlType::Q4_0 => {
                type $K = q4::Q4_0;
                $body
            }
            GgmlType::Q4_1 => {
                type $K = q4::Q4_1;
                $body
            }
            GgmlType::Q5_0 => {
                type $K = q5::Q5_0;
                $body
            }
            GgmlType::Q5_1 => {
                type $K = q5::Q5_1;
                $body
            }
            GgmlType::Q8_0 => {
                type $K = q8::Q8_0;
                $body
            }
            GgmlType::Q4K => {
                type $K = k_quants::Q4K;
                $body
            }
            GgmlType::Q5K => {
                type $K = k_quants::Q5K;
                $body
            }
            GgmlType::Q6K => {
                type $K = k_quants::Q6K;
                $body
            }
            _ => $none,
        }
    };
}

// Each kernel's block geometry is the type's, checked at compile time.
const _: () = {
    const fn same<K: Kernels>(ty: GgmlType) -> bool {
        match ty.block_geometry() {
            Some((values, bytes)) => values == K::BLOCK_VALUES && bytes == K::BLOCK_BYTES,
            None => false,
        }
    }
    assert!(same::<float::F32>(GgmlType::F32) && same::<float::F16>(GgmlType::F16));
    assert!(same::<float::BF16>(GgmlType::BF16) && same::<q8::Q8_0>(GgmlType::Q8_0));
    assert!(same::<q4::Q4_0>(GgmlType::Q4_0) && same::<q4::Q4_1>(GgmlType::Q4_1));
    assert!(same::<q5::Q5_0>(GgmlType::Q5_0) && same::<q5::Q5_1>(GgmlType::Q5_1));
    assert!(same::<k_quants::Q4K>(GgmlType::Q4K) && same::<k_quants::Q5K>(GgmlType::Q5K));
    assert!(same::<k_quants::Q6K>(GgmlType::Q6K));
};

/// The activation format ggml uses with weights of type `ty` (its "vec_dot_type"), or `None`
/// if this build has no kernels for `ty`.
pub const fn vec_dot_kind(ty: GgmlType) -> Option<ActivationKind> {
    with_kernels!(ty, K => Some(K::ACTIVATION), _ => None)
}

/// Whether this build can dequantize and multiply weights of type `ty`.
pub const fn is_supported(ty: GgmlType) -> bool {
    vec_dot_kind(ty).is_some()
}

/// Byte offsets of the f16 scales (and minimums) within a block of `ty`: the fields
/// [`check_scales`] reads. Empty for the float types.
pub(crate) const fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    use core::mem::offset_of;
    match ty {
        GgmlType::Q4_0 => &[offset_of!(q4::BlockQ4_0, d)],
        GgmlType::Q4_1 => &[offset_of!(q4::BlockQ4_1, d), offset_of!(q4::BlockQ4_1, m)],
        GgmlType::Q5_0 => &[offset_of!(q5::BlockQ5_0, d)],
        GgmlType::Q5_1 => &[offset_of!(q5::BlockQ5_1, d), offset_of!(q5::BlockQ5_1, m)],
        GgmlType::Q8_0 => &[offset_of!(q8::BlockQ8_0, d)],
        GgmlType::Q4K => &[
            offset_of!(k_quants::BlockQ4K, d),
            offset_of!(k_quants::BlockQ4K, dmin),
        ],
        GgmlType::Q5K => &[
            offset_of!(k_quants::BlockQ5K, d),
            offset_of!(k_quants::BlockQ5K, dmin),
        ],
        GgmlType::Q6K => &[offset_of!(k_quants::BlockQ6K, d)],
        _ => &[],
    }
}

/// Part of [`check_matrix`]: every f16 scale and minimum in the blocks of a quantized tensor
/// (rows of `n_cols` weights, grouped as loaded: `grouped.rs`) is finite. The legacy types' SIMD
/// kernels convert their scales without the infinity-and-NaN path (`simd128::gather_scales`;
/// decode is 6–7 % faster for it), so a damaged tensor is refused here, with its name and
/// block, rather than computed with wrong scales. (An infinite or NaN scale would make every
/// product of its block infinite or NaN in llama.cpp too.)
fn check_scales(ty: GgmlType, n_cols: usize, data: &[u8], what: &str) -> Result<()> {
    let offsets = scale_offsets(ty);
    let Some((values, block_bytes)) = ty.block_geometry() else {
        return Ok(());
    };
    let n_blocks = n_cols / values;
    if offsets.is_empty() || n_blocks == 0 {
        return Ok(());
    }
    // Where each block's scales sit is the same in every row: found once, then every row read.
    let mut at: alloc::vec::Vec<usize> = alloc::vec::Vec::new();
    at.try_reserve_exact(n_blocks * offsets.len())
        .map_err(|_| err!(Status::OutOfMemory, "tensor {}: scale positions", what))?;
    for b in 0..n_blocks {
        at.extend(
            offsets
                .iter()
                // scales and minimums keep their bytes (only fifth bits are transposed)
                .filter_map(|&o| grouped::byte_at(ty, n_blocks, b, o)),
        );
    }
    for (r, row) in data.chunks_exact(n_blocks * block_bytes).enumerate() {
        for (k, &p) in at.iter().enumerate() {
            let h = u16::from_le_bytes([row[p], row[p + 1]]);
            if !half::f16_is_finite(h) {
                bail!(
                    Status::BadFormat,
                    "tensor {}: block {} has a non-finite scale (f16 bits {:#06x}): the tensor is damaged",
                    what,
                    r * n_blocks + k / offsets.len(),
                    h
                );
            }
        }
    }
    Ok(())
}

/// Checks, once at load, that a `[n_rows][n_cols]` matrix of type `ty` (grouped as loaded,
/// [`group_rows`]) can be used by [`matvec`]/[`matmul`]: a type with kernels, `data` filled
/// exactly by whole blocks, and finite block scales ([`check_scales`]). `what` names the
/// tensor in the error.
pub fn check_matrix(
    ty: GgmlType,
    n_rows: usize,
    n_cols: usize,
    data: &[u8],
    what: &str,
) -> Result<()> {
    let n_bytes = data.len();
    if !is_supported(ty) {
        bail!(
            Status::Unsupported,
            "tensor {}: type {} has no kernels in this build",
            what,
            ty.name()
        );
    }
    let row_bytes = ty.row_bytes(n_cols as u64);
    let total = row_bytes.and_then(|b| b.checked_mul(n_rows as u64));
    if n_cols == 0 || row_bytes.is_none() || total != Some(n_bytes as u64) {
        bail!(
            Status::BadFormat,
            "tensor {}: {} x {} of {} does not fill {} bytes in whole blocks",
            what,
            n_rows,
            n_cols,
            ty.name(),
            n_bytes
        );
    }
    if ty == GgmlType::F16 {
        check_f16_finite(data, what)?;
    }
    check_scales(ty, n_cols, data, what)
}

/// Part of [`check_matrix`]: every weight of an F16 tensor is finite. The SIMD kernels convert
/// F16 weights without the infinity-and-NaN path (`simd128::f16x8_finite_to_f32`: 8
/// instructions for 8 weights instead of 18; all-MiniLM-L6-v2's short sentences spent 15 % of
/// their time converting), so a damaged tensor is refused here, with its name and the weight's
/// index, as [`check_scales`] refuses a non-finite scale. (An infinite or NaN weight would make
/// its products infinite or NaN in llama.cpp too.)
fn check_f16_finite(data: &[u8], what: &str) -> Result<()> {
    use half::F16_EXPONENT;
    const PAGE: usize = 4096;
    // Page by page, the smallest of (!h & F16_EXPONENT), which is 0 for an all-ones exponent:
    // a min-fold, which LLVM vectorizes; the weight is found only when there is one.
    for (page, bytes) in data.chunks(PAGE).enumerate() {
        let least = bytes.chunks_exact(2).fold(F16_EXPONENT, |m, h| {
            m.min(!u16::from_le_bytes([h[0], h[1]]) & F16_EXPONENT)
        });
        if least == 0 {
            let (i, h) = bytes
                .chunks_exact(2)
                .map(|h| u16::from_le_bytes([h[0], h[1]]))
                .enumerate()
                .find(|&(_, h)| !half::f16_is_finite(h))
                .expect("the fold saw one");
            bail!(
                Status::BadFormat,
                "tensor {}: weight {} is not finite (f16 bits {:#06x}): the tensor is damaged",
                what,
                page * PAGE / 2 + i,
                h
            );
        }
    }
    Ok(())
}

/// Bytes of one row of `n_cols` weights of a supported type (panics on a partial block or an
/// unsupported type: [`check_matrix`] rules both out at load).
fn row_bytes(ty: GgmlType, n_cols: usize) -> usize {
    match ty.row_bytes(n_cols as u64) {
        Some(b) if is_supported(ty) => b as usize,
        _ => panic!("quant: {} x {} cannot be multiplied", ty.name(), n_cols),
    }
}

/// Dequantizes one weight row: `row` (`row_bytes(ty, out.len())` bytes) -> `out` (`[n_cols]`).
pub fn dequantize_row(ty: GgmlType, row: &[u8], out: &mut [f32]) -> Result<()> {
    let expected = ty.row_bytes(out.len() as u64);
    if expected != Some(row.len() as u64) {
        bail!(
            Status::InvalidArgument,
            "dequantize {}: {} bytes for {} values (need whole blocks, {:?} bytes)",
            ty.name(),
            row.len(),
            out.len(),
            expected
        );
    }
    with_kernels!(ty, K => K::dequantize(row, out), _ => {
        bail!(Status::Unsupported, "dequantize: type {} has no kernels in this build", ty.name())
    });
    Ok(())
}

/// `y = W[rows] · x`: `w` is the whole matrix `[n_rows][row_bytes(ty, n_cols)]` in place, `x`
/// one vector quantized for `ty` with [`quantize_activation`] (`n_cols` values; only vector 0
/// of a batch is used), `y[r - rows.start]` receives row `r` (`y.len() >= rows.len()`).
///
/// Panics if the type is unsupported or the shapes disagree (cheap checks once per call; the
/// loader validates models with [`check_matrix`], so this is a bug, not bad input).
pub fn matvec(
    ty: GgmlType,
    w: &[u8],
    n_cols: usize,
    x: &ActivationBuf,
    rows: Range<usize>,
    y: &mut [f32],
) {
    let rb = row_bytes(ty, n_cols);
    assert!(
        x.kind() == vec_dot_kind(ty) && x.n_cols() == n_cols && x.n_vecs() >= 1,
        "matvec: activation does not match"
    );
    let w = &w[rows.start * rb..rows.end * rb];
    let y = &mut y[..rows.len()];
    with_kernels!(ty, K => K::dot::<1>(w, rb, &[x.row(0)], Out::vector(y)), _ => unreachable!());
}

/// Vectors per weight-row pass in [`matmul`].
const MATMUL_TILE: usize = 4;
/// Weight bytes per row chunk in [`matmul`]: a chunk stays in cache while every tile of
/// activation vectors passes over it.
const MATMUL_CHUNK_BYTES: usize = 32 << 10;

/// `Y = W[rows] · Xᵀ` for a batch: `xs` holds `n_vecs` vectors quantized for `ty` with
/// [`quantize_activations`]; `y` is `[n_vecs][rows.len()]` (`y[v * rows.len() + r - rows.start]`).
///
/// Panics like [`matvec`] if types or shapes disagree, or if `y` is too short.
pub fn matmul(
    ty: GgmlType,
    w: &[u8],
    n_cols: usize,
    xs: &ActivationBuf,
    rows: Range<usize>,
    y: &mut [f32],
) {
    assert!(
        y.len() >= xs.n_vecs() * rows.len(),
        "matmul: output too short"
    );
    let stride = rows.len();
    // SAFETY: y holds n_vecs rows of `stride` values, checked above.
    unsafe { matmul_strided(ty, w, n_cols, xs, rows, y.as_mut_ptr(), stride) }
}

/// [`matmul`] writing product `(v, r)` to `y[v * y_stride + r - rows.start]`, so that threads
/// can fill disjoint column ranges of one `(n_vecs, y_stride)` output without a copy.
/// Each weight row is decoded once per tile of 4 vectors; rows are taken in chunks of about
/// 32 KiB so that both the chunk and the tile's activations stay in cache. (The relaxed build
/// decodes a Q4_0/Q4_1/Q5_0/Q5_1 row once for every tile of a batch of 2 vectors or more:
/// `simd128/prepared.rs`.)
///
/// # Safety
/// Those `n_vecs * rows.len()` elements must be writable and not accessed by anyone else during
/// the call.
// Not inlined: inlined into the model's `matmul_kernel` (the SIMD128 build), LLVM grew that
// caller by 46 KB.
#[inline(never)]
pub unsafe fn matmul_strided(
    ty: GgmlType,
    w: &[u8],
    n_cols: usize,
    xs: &ActivationBuf,
    rows: Range<usize>,
    y: *mut f32,
    y_stride: usize,
) {
    let rb = row_bytes(ty, n_cols);
    assert!(
        xs.kind() == vec_dot_kind(ty) && xs.n_cols() == n_cols && rows.len() <= y_stride,
        "matmul: activations do not match"
    );
    let n_rows = rows.len();
    let n_vecs = xs.n_vecs();
    let w = &w[rows.start * rb..rows.end * rb];
    // Both builds unpack each row of a legacy type (the relaxed build also each K-quant row)
    // once for a whole batch, and convert each F16 row to f32 once for a whole batch.
    // SAFETY: this function's contract, passed on.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if unsafe { simd128::matmul_prepared(ty, w, rb, xs, n_rows, y, y_stride) } {
        return;
    }
    // SAFETY: as above.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if ty == GgmlType::F16 && unsafe { simd128::matmul_f16(w, rb, xs, n_rows, y, y_stride) } {
        return;
    }
    let chunk_rows = (MATMUL_CHUNK_BYTES / rb).max(1);
    with_kernels!(ty, K => {
        for chunk_start in (0..n_rows).step_by(chunk_rows) {
            let chunk = chunk_start..(chunk_start + chunk_rows).min(n_rows);
            let w = &w[chunk.start * rb..chunk.end * rb];
            let mut v = 0;
            while v < n_vecs {
                let tile = (n_vecs - v).min(MATMUL_TILE);
                // SAFETY: (v + t, chunk.start + r) with t < tile <= n_vecs - v and
                // r < chunk.len() <= n_rows - chunk.start: elements the caller vouches for.
                let out = unsafe {
                    Out::strided(y.add(v * y_stride + chunk.start), y_stride, chunk.len(), tile)
                };
                // The tile's activation rows are looked up once, not once per weight row. Tiles
                // of 2 and 3 run as 4 with the last vector repeated (its extra products are
                // dropped): a vector's products do not depend on its tile, and the kernels are
                // compiled for 1 and 4 vectors only.
                let x = |t: usize| xs.row(v + t.min(tile - 1));
                match tile {
                    1 => K::dot::<1>(w, rb, &[x(0)], out),
                    _ => K::dot::<4>(w, rb, &[x(0), x(1), x(2), x(3)], out),
                }
                v += tile;
            }
        }
    }, _ => unreachable!());
}

#[cfg(test)]
mod tests;
