//! Activation rounding before a product, as llama.cpp does it.
//!
//! ggml never multiplies a quantized weight row with an f32 vector: it first converts the vector
//! to the weight type's "vec_dot_type" and multiplies in that format. We do the same, because it
//! is both the fast integer path and the way to land on llama.cpp's numbers:
//!
//! | weights                 | activation | rounding                                              |
//! | ----------------------- | ---------- | ----------------------------------------------------- |
//! | F32                     | F32        | none                                                  |
//! | F16                     | F16        | nearest f16, ties to even                             |
//! | BF16                    | BF16       | nearest bf16, ties to even                            |
//! | Q4_0, Q5_0, Q8_0        | Q8_0       | per 32: `d = amax/127` (stored as f16), `q = rne(x·127/amax)` |
//! | Q4_1, Q5_1              | Q8_1       | as Q8_0, plus `s = f16(d·Σq)` per 32                  |
//! | Q4_K, Q5_K, Q6_K        | Q8_K       | per 256: `iscale = -127/max` (max = the value of largest magnitude), `q = rne(iscale·x)`, `d = 1/iscale` (f32), sums of each 16 quants |
//!
//! Q8_0 and Q8_1 follow ggml-cpu's x86 build (`quantize_row_q8_0`/`_q8_1` with AVX, the build
//! that produced this project's reference numbers): the multiplier is `127/amax` and rounding is
//! to nearest even. ggml's portable `_ref` versions multiply by `1/d` and use `roundf` (ties away
//! from zero); the two differ only for inputs within one float step of a half-integer. Q8_K is
//! `quantize_row_q8_K_ref`, which x86 also uses. (ggml's own wasm build truncates toward zero
//! instead of rounding; we do not copy that.)
//!
//! # Storage
//!
//! An [`ActivationBuf`] holds a batch of `n_vecs` vectors of `n_cols` values (one for a
//! matrix-vector product, several for prompt prefill), laid out for the SIMD kernels:
//!
//! - float kinds: `values` `[n_vecs][n_cols]` f32, already rounded.
//! - integer kinds: `quants` `[n_vecs][n_cols]` of [`Quant`], in one of two layouts chosen by
//!   the build:
//!   - SIMD128 (and the scalar builds): i16, the int8 quants widened once per vector, so a kernel
//!     feeds them straight to `i32x4.dot_i16x8_s`. Within every 16 consecutive values the 8
//!     even-indexed ones come first, then the 8 odd-indexed ones ("pair-interleaved"): a kernel
//!     can then split 16 weight bytes (or 32 nibbles) into i16 lanes with shifts and masks on
//!     16-bit lanes, never widening bytes.
//!   - relaxed SIMD: i8, the signed operand of `i16x8.relaxed_dot_i8x16_i7x16_s`; Q8_K in
//!     natural order, Q8_0/Q8_1 with each pair of blocks interleaved in runs of 8 (so the four
//!     i32 lanes of one dot product fall two to each block; a lone last block gets a zero
//!     partner, so a vector holds [`quants_len`] quants).
//!
//!   [`stored_index`] maps a natural index to its slot. `scales` `[n_vecs][n_cols / block]` f32:
//!   `d` per block (32 for Q8_0/Q8_1, 256 for Q8_K). Q8_1 adds `sums` `[n_vecs][n_cols / 32]`
//!   f32 (`s`). Every integer kind has `bsums` `[n_vecs][n_cols / 16]` i16: the sum of each 16
//!   quants in natural order (Q8_K's own field; for Q8_0/Q8_1 it lets a kernel multiply unsigned
//!   weights and take their offset off once per block).
//! - the relaxed build's Q8_0 kind also has `split` `[n_vecs][2 · quants_len]`: each 16 stored
//!   quants `q` as `max(q, 0)` then `max(-q, 0)` (both below 128), so that Q8_0's signed weight
//!   bytes can be the signed operand of the relaxed dot as they are ([`split_quants`]).
//!
//! - the SIMD builds' Q8_0/Q8_1 batches (two vectors or more) also have `tiles`
//!   `[n_vecs.div_ceil(4)][n_cols.div_ceil(128)]` of [`TileGroup`]: the vectors four at a time,
//!   each group of four blocks with its quants in the order of the prepared batch kernels
//!   (`simd128/prepared.rs`) and the blocks' scales, sums and quant sums beside them.
//!
//! Buffers grow (with `try_reserve`) and never shrink: reuse one `ActivationBuf` per call site
//! and there is no allocation after the first call of the largest size.

use alloc::vec::Vec;

use core::ops::Range;

use super::half::{f16_to_f32, f32_to_f16, round_to_bf16, round_to_f16};
use super::{GgmlType, vec_dot_kind};
use crate::error::{Result, Status};
use crate::pool::Disjoint;
use crate::{bail, err};

/// The format an activation vector is rounded to before a product (ggml's vec_dot_type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationKind {
    F32,
    F16,
    BF16,
    Q8_0,
    Q8_1,
    Q8K,
}

impl ActivationKind {
    /// Values per scale block (1 for the float kinds).
    pub const fn block(self) -> usize {
        match self {
            ActivationKind::F32 | ActivationKind::F16 | ActivationKind::BF16 => 1,
            ActivationKind::Q8_0 | ActivationKind::Q8_1 => 32,
            ActivationKind::Q8K => 256,
        }
    }
    const fn is_float(self) -> bool {
        self.block() == 1
    }
}

/// One stored integer activation: i16 for SIMD128's `i32x4.dot_i16x8_s` (and the scalar builds),
/// i8 for relaxed SIMD's i8 dot product (see the module doc).
#[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
pub type Quant = i16;
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
pub type Quant = i8;

/// Where natural index `i` of a vector of `kind` lies in its quants array. i16 builds, every
/// kind: pair-interleaved, within each group of 16 the even indices take slots 0..8 and the odd
/// ones slots 8..16.
#[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
#[inline(always)]
pub const fn stored_index(kind: ActivationKind, i: usize) -> usize {
    let _ = kind;
    (i & !15) | ((i & 1) << 3) | ((i & 15) >> 1)
}
/// Where natural index `i` of a vector of `kind` lies in its quants array (relaxed SIMD). Q8_K:
/// natural order. Q8_0/Q8_1: blocks of 32 go in pairs, and each pair's 64 quants are stored as
/// eight runs of 8 taken in turn from the two blocks (block `2p` values `0..8`, block `2p + 1`
/// values `0..8`, block `2p` values `8..16`, ...), so that one 16-byte load holds 8 values of
/// each block and the four i32 lanes of a relaxed dot product fall two to each block. A lone
/// last block is stored as if its partner were all zeros ([`quants_len`]).
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
#[inline(always)]
pub const fn stored_index(kind: ActivationKind, i: usize) -> usize {
    match kind {
        ActivationKind::Q8_0 | ActivationKind::Q8_1 => {
            let (pair, second, j) = (i / 64, (i / 32) % 2, i % 32);
            64 * pair + 16 * (j / 8) + 8 * second + j % 8
        }
        _ => i,
    }
}

/// Quants stored per vector of `n_cols` values of an integer `kind`: `n_cols`, or in the
/// relaxed build for Q8_0/Q8_1 `n_cols` rounded up to whole pairs of blocks (the missing block
/// of a pair is stored as zeros).
#[inline(always)]
pub const fn quants_len(kind: ActivationKind, n_cols: usize) -> usize {
    let paired = cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd"))
        && matches!(kind, ActivationKind::Q8_0 | ActivationKind::Q8_1);
    if paired {
        n_cols.next_multiple_of(64)
    } else {
        n_cols
    }
}

/// Whether the build keeps `split` quants (the relaxed build, for Q8_0 weights).
const SPLIT: bool = cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd"));

/// Whether vectors of `kind` carry `split` quants.
#[inline(always)]
const fn has_split(kind: ActivationKind) -> bool {
    SPLIT && matches!(kind, ActivationKind::Q8_0)
}

/// Each 16 of `quants` (in -127..=127) as 16 of `max(q, 0)` then 16 of `max(-q, 0)`, into
/// `split` (twice as long): `q = pos - neg` with both below 128, the unsigned operand of the
/// relaxed dot, whose signed operand can then be a weight byte of any value. (Not inlined:
/// inlined into `quantize_activations`, LLVM's unrolled copies cost 8 KB.)
#[inline(never)]
fn split_quants(quants: &[Quant], split: &mut [Quant]) {
    for (q, s) in quants.chunks_exact(16).zip(split.chunks_exact_mut(32)) {
        let (pos, neg) = s.split_at_mut(16);
        for i in 0..16 {
            // q > -128 (`quantize_q8_0_block`), so -q does not wrap
            (pos[i], neg[i]) = (q[i].max(0), q[i].wrapping_neg().max(0));
        }
    }
}

/// Whether the build keeps `tiles` for Q8_0/Q8_1 batches (the SIMD builds; the host's tests,
/// which check their layout).
const TILED: bool = cfg!(any(
    test,
    all(target_arch = "wasm32", target_feature = "simd128")
));

/// Values of one block in one 16-byte load of a [`TileGroup`]'s quants: four i8 (relaxed
/// build), two i16.
pub(crate) const TILE_VALUES: usize = 4 / size_of::<Quant>();

/// Loads ("chunks") of one vector's quants per [`TileGroup`]: 8 of i8, 16 of i16.
pub(crate) const TILE_CHUNKS: usize = 32 / TILE_VALUES;

/// Four vectors' (a tile's) blocks `4g..4g + 4` of a Q8_0/Q8_1 batch, as the prepared batch
/// kernels read them (`simd128/prepared.rs`): one 16-byte load of `quants` holds
/// [`TILE_VALUES`] values of each of the four blocks of one vector, so the four i32 lanes of a
/// dot product with weights in the same order (the relaxed build's i8 dot, SIMD128's
/// `i32x4.dot_i16x8_s`) are the four blocks' sums, and a group needs no shuffles. Chunk `c`
/// holds each block's values at positions `TILE_VALUES·c..` of [`tile_order`]. Vectors past
/// the batch and blocks past the row are zeros.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub(crate) struct TileGroup {
    /// `quants[c][t][TILE_VALUES·k + j]`: vector `t`'s quant at position `TILE_VALUES·c + j`
    /// ([`tile_order`]) of block `4g + k`.
    pub quants: [[[Quant; 4 * TILE_VALUES]; 4]; TILE_CHUNKS],
    /// `scales[t][k]`: vector `t`'s `d` of block `4g + k`.
    pub scales: [[f32; 4]; 4],
    /// `sums[t][k]`: Q8_1's `s` (0 for Q8_0).
    pub sums: [[f32; 4]; 4],
    /// `bsums[t][k]`: the sum of the block's quants.
    pub bsums: [[i32; 4]; 4],
}

const _: () = assert!(
    size_of::<TileGroup>() == 512 * size_of::<Quant>() + 192
        && core::mem::offset_of!(TileGroup, scales) == 512 * size_of::<Quant>()
);

/// The index within a vector's `quants` of the value at position `p` (0..32) of block `b` in
/// a [`TileGroup`]'s order. Relaxed build: natural order (chunk `c` holds values `4c..4c + 4`
/// of each block, where its prepared weights put them). i16 builds: the stored order itself,
/// pair-interleaved (chunk `c` holds stored quants `2c` and `2c + 1` of each block: an i32 lane
/// of the four i16x8 that `dot_i16`'s `Legacy::weights` unpack a block into).
#[inline(always)]
pub(crate) const fn tile_order(kind: ActivationKind, b: usize, p: usize) -> usize {
    match size_of::<Quant>() {
        1 => stored_index(kind, 32 * b + p),
        _ => 32 * b + p,
    }
}

impl TileGroup {
    const ZERO: TileGroup = TileGroup {
        quants: [[[0; 4 * TILE_VALUES]; 4]; TILE_CHUNKS],
        scales: [[0.0; 4]; 4],
        sums: [[0.0; 4]; 4],
        bsums: [[0; 4]; 4],
    };
}

/// A batch of activation vectors rounded for one weight type. Owned scratch: reuse it.
#[derive(Default)]
pub struct ActivationBuf {
    kind: Option<ActivationKind>,
    n_cols: usize,
    n_vecs: usize,
    /// Float kinds: `[n_vecs][n_cols]` rounded values.
    values: Vec<f32>,
    /// Integer kinds: `[n_vecs][quants_len]` quants, at [`stored_index`].
    quants: Vec<Quant>,
    /// Integer kinds: `[n_vecs][n_cols / block]` scale `d` of each block.
    scales: Vec<f32>,
    /// Q8_1: `[n_vecs][n_cols / 32]` `s = d·Σq` of each block, rounded through f16.
    sums: Vec<f32>,
    /// Integer kinds: `[n_vecs][n_cols / 16]` sum of each 16 quants.
    bsums: Vec<i16>,
    /// The relaxed build's Q8_0: `[n_vecs][2 * quants_len]`, [`split_quants`] of `quants`.
    split: Vec<Quant>,
    /// The relaxed build's Q8_0/Q8_1 batches: `[n_vecs.div_ceil(4)][n_cols.div_ceil(128)]`
    /// (see [`TileGroup`]); empty for one vector.
    tiles: Vec<TileGroup>,
}

/// One vector of an [`ActivationBuf`], as the kernels read it. Slices not used by the kind
/// are empty.
#[derive(Clone, Copy)]
pub(crate) struct ActRow<'a> {
    /// Float kinds: `[n_cols]`.
    pub values: &'a [f32],
    /// Integer kinds: `[quants_len]`, at [`stored_index`].
    pub quants: &'a [Quant],
    /// Integer kinds: `[n_cols / block]`.
    pub scales: &'a [f32],
    /// Q8_1: `[n_cols / 32]`.
    pub sums: &'a [f32],
    /// Integer kinds: `[n_cols / 16]`.
    pub bsums: &'a [i16],
    /// The relaxed build's Q8_0: `[2 * quants_len]`.
    pub split: &'a [Quant],
}

/// `n_vecs` vectors of `n_cols` values: how many in all (an overflow is out of memory).
fn values(n_cols: usize, n_vecs: usize) -> Result<usize> {
    n_cols.checked_mul(n_vecs).ok_or_else(|| {
        err!(
            Status::OutOfMemory,
            "activation buffer: {} x {} values",
            n_vecs,
            n_cols
        )
    })
}

impl ActivationBuf {
    pub const fn new() -> ActivationBuf {
        ActivationBuf {
            kind: None,
            n_cols: 0,
            n_vecs: 0,
            values: Vec::new(),
            quants: Vec::new(),
            scales: Vec::new(),
            sums: Vec::new(),
            bsums: Vec::new(),
            split: Vec::new(),
            tiles: Vec::new(),
        }
    }

    /// A buffer with room for `n_vecs` vectors of `n_cols` values of any kind, so that later
    /// calls up to that size never allocate.
    pub fn with_capacity(n_cols: usize, n_vecs: usize) -> Result<ActivationBuf> {
        let mut buf = ActivationBuf::new();
        let n = values(n_cols, n_vecs)?;
        reserve(&mut buf.values, n)?;
        reserve(
            &mut buf.quants,
            values(n_cols.next_multiple_of(64), n_vecs)?,
        )?;
        reserve(&mut buf.scales, n / 32)?;
        reserve(&mut buf.sums, n / 32)?;
        reserve(&mut buf.bsums, n / 16)?;
        if SPLIT {
            reserve(
                &mut buf.split,
                values(2 * n_cols.next_multiple_of(64), n_vecs)?,
            )?;
        }
        if TILED && n_vecs > 1 {
            reserve(&mut buf.tiles, tile_groups(n_cols, n_vecs)?)?;
        }
        Ok(buf)
    }

    /// The kind of the vectors held, `None` before the first quantization.
    pub fn kind(&self) -> Option<ActivationKind> {
        self.kind
    }
    pub fn n_cols(&self) -> usize {
        self.n_cols
    }
    pub fn n_vecs(&self) -> usize {
        self.n_vecs
    }

    /// Tile `i` (vectors `4i..4i + 4`) of a Q8_0/Q8_1 batch: its `n_cols.div_ceil(128)` groups.
    /// Empty where the buffer keeps no tiles (one vector, another kind, a build without).
    #[cfg(any(test, all(target_arch = "wasm32", target_feature = "simd128")))]
    pub(crate) fn tile(&self, i: usize) -> &[TileGroup] {
        let groups = self.n_cols.div_ceil(128);
        match self.tiles.len() {
            0 => &[],
            _ => &self.tiles[i * groups..(i + 1) * groups],
        }
    }

    /// Vector `v` (< `n_vecs`) as the kernels read it.
    pub(crate) fn row(&self, v: usize) -> ActRow<'_> {
        let n = self.n_cols;
        let mut row = ActRow {
            values: &[],
            quants: &[],
            scales: &[],
            sums: &[],
            bsums: &[],
            split: &[],
        };
        match self.kind {
            None => {}
            Some(kind) if kind.is_float() => row.values = &self.values[v * n..(v + 1) * n],
            Some(kind) => {
                let nb = n / kind.block();
                let nq = quants_len(kind, n);
                row.quants = &self.quants[v * nq..(v + 1) * nq];
                row.scales = &self.scales[v * nb..(v + 1) * nb];
                if kind == ActivationKind::Q8_1 {
                    row.sums = &self.sums[v * nb..(v + 1) * nb];
                }
                row.bsums = &self.bsums[v * (n / 16)..(v + 1) * (n / 16)];
                if has_split(kind) {
                    row.split = &self.split[2 * v * nq..2 * (v + 1) * nq];
                }
            }
        }
        row
    }

    /// Sizes the arrays for `n_vecs` vectors of `n_cols` values of `kind` (contents unspecified).
    fn resize(&mut self, kind: ActivationKind, n_cols: usize, n_vecs: usize) -> Result<()> {
        let n = values(n_cols, n_vecs)?;
        self.kind = None; // stays None if an allocation fails below
        if kind.is_float() {
            resize(&mut self.values, n, 0.0)?;
        } else {
            let nb = n / kind.block();
            let nq = values(quants_len(kind, n_cols), n_vecs)?;
            resize(&mut self.quants, nq, 0)?;
            resize(&mut self.scales, nb, 0.0)?;
            if kind == ActivationKind::Q8_1 {
                resize(&mut self.sums, nb, 0.0)?;
            }
            resize(&mut self.bsums, n / 16, 0)?;
            if has_split(kind) {
                resize(&mut self.split, 2 * nq, 0)?;
            }
            self.tiles.clear();
            if has_tiles(kind, n_vecs) {
                resize(
                    &mut self.tiles,
                    tile_groups(n_cols, n_vecs)?,
                    TileGroup::ZERO,
                )?;
            }
        }
        self.kind = Some(kind);
        self.n_cols = n_cols;
        self.n_vecs = n_vecs;
        Ok(())
    }
}

/// Whether a batch of `n_vecs` vectors of `kind` keeps `tiles`.
#[inline(always)]
const fn has_tiles(kind: ActivationKind, n_vecs: usize) -> bool {
    TILED && n_vecs > 1 && matches!(kind, ActivationKind::Q8_0 | ActivationKind::Q8_1)
}

/// [`TileGroup`]s of `n_vecs` vectors of `n_cols` values.
fn tile_groups(n_cols: usize, n_vecs: usize) -> Result<usize> {
    values(n_cols.div_ceil(128), n_vecs.div_ceil(4))
}

/// Vector `v`'s blocks (`quants` at [`stored_index`], their `scales`, `sums` and `bsums`) into
/// its lane of `tiles` (tile `v / 4`'s groups).
fn fill_tiles(kind: ActivationKind, x: ActRow<'_>, v: usize, tiles: &mut [TileGroup]) {
    let t = v % 4;
    for (b, &d) in x.scales.iter().enumerate() {
        let (tg, k) = (&mut tiles[b / 4], b % 4);
        for (c, chunk) in tg.quants.iter_mut().enumerate() {
            // a chunk's values of one block lie side by side in `quants` (`tile_order`)
            let at = tile_order(kind, b, TILE_VALUES * c);
            chunk[t][TILE_VALUES * k..][..TILE_VALUES]
                .copy_from_slice(&x.quants[at..at + TILE_VALUES]);
        }
        tg.scales[t][k] = d;
        tg.sums[t][k] = x.sums.get(b).copied().unwrap_or(0.0);
        tg.bsums[t][k] = x.bsums[2 * b] as i32 + x.bsums[2 * b + 1] as i32;
    }
}

fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<()> {
    v.try_reserve_exact(n.saturating_sub(v.len())).map_err(|_| {
        err!(
            Status::OutOfMemory,
            "activation buffer: cannot allocate {} values",
            n
        )
    })
}

fn resize<T: Copy>(v: &mut Vec<T>, n: usize, fill: T) -> Result<()> {
    if v.len() < n {
        reserve(v, n)?;
        v.resize(n, fill);
    }
    Ok(())
}

/// Rounds `x` (one vector, `[n_cols]`) for a product with weights of type `ty`; `out` then
/// holds one vector. `n_cols` must be a whole number of the kind's blocks.
pub fn quantize_activation(ty: GgmlType, x: &[f32], out: &mut ActivationBuf) -> Result<()> {
    quantize_activations(ty, x, x.len(), out)
}

/// Rounds a batch `xs` (`[n_vecs][n_cols]`, row-major) for a product with weights of type
/// `ty`; `out` then holds `n_vecs = xs.len() / n_cols` vectors.
pub fn quantize_activations(
    ty: GgmlType,
    xs: &[f32],
    n_cols: usize,
    out: &mut ActivationBuf,
) -> Result<()> {
    let batch = start_batch(ty, xs, n_cols, out)?;
    // SAFETY: one thread, all the vectors.
    unsafe { batch.fill(0..batch.n_vecs) };
    Ok(())
}

/// [`quantize_activations`] in two steps, so that several threads can round one batch: sizes
/// `out` for the batch (the only step that allocates or fails) and returns what
/// [`BatchFill::fill`] writes through. Until every vector is filled `out` holds anything.
pub fn start_batch<'a>(
    ty: GgmlType,
    xs: &'a [f32],
    n_cols: usize,
    out: &'a mut ActivationBuf,
) -> Result<BatchFill<'a>> {
    let Some(kind) = vec_dot_kind(ty) else {
        bail!(
            Status::Unsupported,
            "no kernels for tensor type {}",
            ty.name()
        );
    };
    if n_cols == 0 || !n_cols.is_multiple_of(kind.block()) || !xs.len().is_multiple_of(n_cols) {
        bail!(
            Status::InvalidArgument,
            "activation of {} values in rows of {}: rows must be whole blocks of {} for {}",
            xs.len(),
            n_cols,
            kind.block(),
            ty.name()
        );
    }
    let n_vecs = xs.len() / n_cols;
    out.resize(kind, n_cols, n_vecs)?;
    Ok(BatchFill {
        kind,
        n_cols,
        n_vecs,
        xs,
        values: Disjoint::new(&mut out.values),
        quants: Disjoint::new(&mut out.quants),
        scales: Disjoint::new(&mut out.scales),
        sums: Disjoint::new(&mut out.sums),
        bsums: Disjoint::new(&mut out.bsums),
        split: Disjoint::new(&mut out.split),
        tiles: Disjoint::new(&mut out.tiles),
    })
}

/// A batch being rounded into an [`ActivationBuf`] ([`start_batch`]): each call of
/// [`BatchFill::fill`] writes its vectors' parts of the buffer's arrays (each array holds the
/// vectors one after another, the tiles four vectors at a time), so threads may fill disjoint
/// ranges of whole tiles at once.
pub struct BatchFill<'a> {
    kind: ActivationKind,
    n_cols: usize,
    n_vecs: usize,
    xs: &'a [f32],
    values: Disjoint<'a, f32>,
    quants: Disjoint<'a, Quant>,
    scales: Disjoint<'a, f32>,
    sums: Disjoint<'a, f32>,
    bsums: Disjoint<'a, i16>,
    split: Disjoint<'a, Quant>,
    tiles: Disjoint<'a, TileGroup>,
}

impl BatchFill<'_> {
    /// Vectors in the batch.
    pub fn n_vecs(&self) -> usize {
        self.n_vecs
    }

    /// Rounds vectors `vecs` (`vecs.start` a multiple of [`BatchFill::TILE`]) into the buffer.
    ///
    /// # Safety
    /// No other thread fills a vector of the same tiles (`v / TILE`) at the same time.
    pub unsafe fn fill(&self, vecs: Range<usize>) {
        let (kind, n_cols) = (self.kind, self.n_cols);
        assert!(vecs.start.is_multiple_of(Self::TILE) && vecs.end <= self.n_vecs);
        let span = |per_vec: usize| vecs.start * per_vec..vecs.end * per_vec;
        let xs = &self.xs[span(n_cols)];
        // SAFETY (each `slice`): these vectors' parts of the arrays, which no other thread
        // touches (the caller's contract; every part lies inside its array, sized by `resize`).
        unsafe {
            if kind.is_float() {
                let values = self.values.slice(span(n_cols));
                match kind {
                    ActivationKind::F16 => round_slice_to_f16(values, xs),
                    ActivationKind::BF16 => {
                        for (o, &x) in values.iter_mut().zip(xs) {
                            *o = round_to_bf16(x);
                        }
                    }
                    _ => values.copy_from_slice(xs),
                }
                return;
            }
            let nb = n_cols / kind.block();
            let nq = quants_len(kind, n_cols);
            let quants = self.quants.slice(span(nq));
            let scales = self.scales.slice(span(nb));
            let bsums = self.bsums.slice(span(n_cols / 16));
            if kind == ActivationKind::Q8K {
                let blocks = xs.as_chunks::<256>().0;
                let quants = quants.as_chunks_mut::<256>().0;
                let bsums = bsums.as_chunks_mut::<16>().0;
                for (b, ((x, q), bs)) in blocks.iter().zip(quants).zip(bsums).enumerate() {
                    scales[b] = quantize_q8_k_block(x, q, bs);
                }
                return;
            }
            let sums = match kind {
                ActivationKind::Q8_1 => self.sums.slice(span(nb)),
                _ => Default::default(),
            };
            let split = match has_split(kind) {
                true => self.split.slice(span(2 * nq)),
                false => Default::default(),
            };
            for v in 0..vecs.len() {
                let quants = &mut quants[v * nq..(v + 1) * nq];
                let x = xs[v * n_cols..(v + 1) * n_cols].as_chunks::<32>().0;
                let bsums = bsums[v * (n_cols / 16)..(v + 1) * (n_cols / 16)]
                    .as_chunks_mut::<2>()
                    .0;
                for (b, (x, bs)) in x.iter().zip(bsums).enumerate() {
                    let (d, s) = quantize_q8_0_block(x, quants, b, bs);
                    scales[v * nb + b] = d;
                    if kind == ActivationKind::Q8_1 {
                        sums[v * nb + b] = s;
                    }
                }
                // the zero partner of a lone last block, if the layout has one
                for i in n_cols..nq {
                    quants[stored_index(kind, i)] = 0;
                }
                if has_split(kind) {
                    split_quants(quants, &mut split[2 * v * nq..2 * (v + 1) * nq]);
                }
            }
            if has_tiles(kind, self.n_vecs) {
                let groups = n_cols.div_ceil(128);
                let first = vecs.start / Self::TILE;
                let tiles = self
                    .tiles
                    .slice(first * groups..vecs.end.div_ceil(Self::TILE) * groups);
                for v in 0..vecs.len() {
                    let row = ActRow {
                        values: &[],
                        quants: &quants[v * nq..(v + 1) * nq],
                        scales: &scales[v * nb..(v + 1) * nb],
                        sums: sums.get(v * nb..(v + 1) * nb).unwrap_or(&[]),
                        bsums: &bsums[v * (n_cols / 16)..(v + 1) * (n_cols / 16)],
                        split: &[],
                    };
                    let tile = v / Self::TILE * groups;
                    fill_tiles(kind, row, v, &mut tiles[tile..tile + groups]);
                }
            }
        }
    }

    /// Vectors per tile: a range that [`BatchFill::fill`] writes starts at a multiple of this.
    pub const TILE: usize = 4;
}

/// `out[i] = round_to_f16(xs[i])`; the SIMD twin gives the same bits for every input.
fn round_slice_to_f16(out: &mut [f32], xs: &[f32]) {
    simd128_or!(
        super::simd128::round_slice_to_f16(out, xs),
        round_slice_to_f16_ref(out, xs)
    )
}

pub(super) fn round_slice_to_f16_ref(out: &mut [f32], xs: &[f32]) {
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = round_to_f16(x);
    }
}

/// `|x|` without `f32::abs` (not in `core` on this toolchain).
#[inline(always)]
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// Round to nearest, ties to even, for `|v| < 2^22` (ggml's `nearest_int`): adding 1.5·2^23
/// leaves the integer in the low mantissa bits, rounded by the float addition itself.
#[inline(always)]
fn round_nearest_even(v: f32) -> i32 {
    let t = v + 12_582_912.0;
    (t.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Block `b` of a Q8_0/Q8_1 vector: its quants into the vector's `quants` (at [`stored_index`]),
/// the sums of each 16 into `bsums`; returns `(d, s)` where `d` is the scale rounded through f16
/// and `s = f16(d_f32 · Σq)` (Q8_1's block sum). The SIMD twin gives the same bits.
#[inline(always)]
fn quantize_q8_0_block(
    x: &[f32; 32],
    quants: &mut [Quant],
    b: usize,
    bsums: &mut [i16; 2],
) -> (f32, f32) {
    simd128_or!(
        super::simd128::quantize_q8_0_block(x, quants, b, bsums),
        quantize_q8_0_block_ref(x, quants, b, bsums)
    )
}

/// [`quantize_q8_0_block`]'s reference: ggml-cpu's x86 rounding, written for reading.
pub(super) fn quantize_q8_0_block_ref(
    x: &[f32; 32],
    quants: &mut [Quant],
    b: usize,
    bsums: &mut [i16; 2],
) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in x {
        let a = abs(v);
        if a > amax {
            amax = a;
        }
    }
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (half, bsum) in bsums.iter_mut().enumerate() {
        let mut half_sum = 0i32;
        for i in 16 * half..16 * half + 16 {
            // |x·id| <= 127 up to one rounding step, so the clamp only guards NaN/inf input.
            let r = round_nearest_even(x[i] * id).clamp(-127, 127);
            quants[stored_index(ActivationKind::Q8_0, 32 * b + i)] = r as Quant;
            half_sum += r;
        }
        *bsum = half_sum as i16;
        sum += half_sum;
    }
    (
        f16_to_f32(f32_to_f16(d)),
        f16_to_f32(f32_to_f16(d * sum as f32)),
    )
}

/// One Q8_K block: quants into `q` (at [`stored_index`]), sums of each 16 into `bsums`, returns
/// `d`.
fn quantize_q8_k_block(x: &[f32; 256], q: &mut [Quant; 256], bsums: &mut [i16; 16]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        let a = abs(v);
        if a > amax {
            amax = a;
            max = v;
        }
    }
    if amax == 0.0 {
        q.fill(0);
        bsums.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (g, group) in x.chunks_exact(16).enumerate() {
        let mut sum = 0i32;
        for (j, &v) in group.iter().enumerate() {
            let r = round_nearest_even(iscale * v).clamp(-128, 127);
            q[stored_index(ActivationKind::Q8K, g * 16 + j)] = r as Quant;
            sum += r;
        }
        bsums[g] = sum as i16;
    }
    1.0 / iscale
}
