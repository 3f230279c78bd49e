//! The layout the legacy block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) have in memory once loaded:
//! each row's blocks in groups of [`GROUP`], every field of a group's blocks side by side.
//!
//! A GGUF file stores a row as whole blocks one after another (`d m qs | d m qs | ...` for
//! Q4_1). The loader rewrites each row of these types in place ([`group_rows`]) so that a group
//! of `count` blocks (four, fewer at the end of a row) holds its blocks' first fields, then
//! their second fields, and so on: Q4_1 `d0 d1 d2 d3 | m0 m1 m2 m3 | qs0 qs1 qs2 qs3`. Field
//! `f` of block `i` of the group then starts at `count · offset_f + i · size_f` from the group's
//! start ([`field_at`]), and a group takes as many bytes as its blocks did, so rows keep their
//! sizes and places. The SIMD kernels read a group's scales (and minimums) with one load
//! instead of one per block (`simd128::gather_scales`; Chromium 148, SmolLM2 Q4_1,
//! single-threaded decode: relaxed build 6-8 % faster, SIMD128 2-3 %); the scalar code reads
//! whole blocks back with [`blocks`].
//!
//! The relaxed-SIMD build goes one step further ([`PAIRED`]): its kernels multiply two blocks
//! at once, from activations that take runs of 8 from each block in turn, so the quants (the
//! last field) of blocks `2p` and `2p + 1` of a group are interleaved the same way (`a0..a7
//! b0..b7 a8..a15 b8..b15 ...`; a row's lone last block keeps its own order). That saves the
//! shuffles that built this order from two blocks in every product (decode another 5 %).
//!
//! In every build, a pair of Q5 blocks (`2p`, `2p + 1` of a group) has its fifth bits
//! transposed ([`transpose_fifth_bits`]): each byte holds four of each block's, for weights
//! that sit in one lane of the kernel's vectors, so the kernels spread them with a shift and a
//! mask per vector instead of byte shuffles (or splats) and compares.
//!
//! The K-quants (super-blocks of 256) keep the file's layout, but for Q6_K's quants: each
//! super-block's 192 quant bytes are repacked in place (`k_quants::repack_q6k`) so that the
//! kernels unpack 64 six-bit weights with 11 operations instead of 17 (measured at
//! `simd128::q6k_quarters`). Its scales and `d` stay where the file has them.

use core::mem::offset_of;

use super::{Block, GgmlType, k_quants, q4, q5, q8};

/// Blocks per group.
pub(crate) const GROUP: usize = 4;

/// A legacy block type, described by where its fields start.
///
/// # Safety
/// `FIELDS` lists the byte offsets of every field of the `#[repr(C)]` struct in order, the
/// first 0 (each field runs to the next one's offset, the last to the struct's end).
pub(crate) unsafe trait Grouped: Block {
    const FIELDS: &'static [usize];
    /// Where the fifth bits start (Q5_0, Q5_1: `qh`, a little-endian u32, bit `i` weight `i`'s),
    /// if the type has them: transposed in each pair ([`transpose_fifth_bits`]).
    const FIFTH_BITS: Option<usize> = None;
}

/// Size of field `f` of a block struct of `bytes` bytes whose fields start at `fields`.
#[inline(always)]
const fn field_size(fields: &[usize], bytes: usize, f: usize) -> usize {
    if f + 1 < fields.len() {
        fields[f + 1] - fields[f]
    } else {
        bytes - fields[f]
    }
}

/// Offset of field `f` (of a block struct of `bytes` bytes whose fields start at `fields`) of
/// block `i` of a group of `count` blocks, from the group's start.
#[inline(always)]
pub(crate) const fn field_at(
    fields: &[usize],
    bytes: usize,
    f: usize,
    i: usize,
    count: usize,
) -> usize {
    count * fields[f] + i * field_size(fields, bytes, f)
}

/// Whether the quants of each pair of blocks in a group are interleaved in runs of [`RUN`]
/// bytes (the relaxed-SIMD build's order of activations, `activation::stored_index`).
pub(crate) const PAIRED: bool = cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd"));
/// Bytes per run of a pair's interleaved quants.
const RUN: usize = 8;

/// The weight of a block whose fifth bit [`transpose_fifth_bits`] puts in bit `k` (0..4; the
/// partner's in bit `4 + k`) of byte `j` (0..8): where the kernel has that weight in lane `j`
/// of its vector `k`. The relaxed build's four runs of 8 (`simd128::dot_i8::q5_pair`: `8k + j`),
/// the SIMD128 build's four i16x8 in storage order, evens then odds of each half
/// (`simd128::dot_i16::fifth_bits`: `16·(k / 2) + 2j + k % 2`).
// (the layout's definition: the tests check the bit tricks below against it)
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const fn fifth_bit_weight(k: usize, j: usize) -> usize {
    if PAIRED {
        8 * k + j
    } else {
        16 * (k / 2) + 2 * j + k % 2
    }
}

/// The fifth bits of a pair of Q5 blocks (`qh`: the first block's `qh`, then its partner's, as
/// grouping puts them) as the kernels read them: byte `j` holds in bit `k` the fifth bit of
/// weight [`fifth_bit_weight`]`(k, j)` of the first block, in bit `4 + k` that of the second's.
/// Bit tricks rather than a loop per bit, as every pair of a Q5 matrix passes here at load
/// (Gemma 3 270M: a million pairs).
pub(crate) fn transpose_fifth_bits(qh: [u8; 8]) -> [u8; 8] {
    let x = u64::from_le_bytes(qh);
    // byte k of each block: its weights 8k..8k + 8, or the SIMD128 order's vector k
    let x = if PAIRED {
        x
    } else {
        swap_bits(x, UNSHUFFLE_16)
    };
    swap_bits(x, TRANSPOSE_8X8).to_le_bytes()
}

/// The two blocks' `qh` back from [`transpose_fifth_bits`] (a transposition is its own
/// inverse; the unshuffle's rounds undo it in reverse order).
pub(crate) fn untranspose_fifth_bits(t: [u8; 8]) -> [u8; 8] {
    let x = swap_bits(u64::from_le_bytes(t), TRANSPOSE_8X8);
    let x = if PAIRED {
        x
    } else {
        UNSHUFFLE_16.iter().rev().fold(x, |x, &r| swap_bits(x, [r]))
    };
    x.to_le_bytes()
}

/// Rounds of [`swap_bits`] that transpose the 8×8 bit matrix of a u64 (byte `r`, bit `c` to
/// byte `c`, bit `r`): blocks of 1×1, 2×2 and 4×4 bits swapped across the diagonal.
const TRANSPOSE_8X8: [(u32, u64); 3] = [
    (7, 0x00aa_00aa_00aa_00aa),
    (14, 0x0000_cccc_0000_cccc),
    (28, 0x0000_0000_f0f0_f0f0),
];
/// Rounds of [`swap_bits`] that gather each 16 bits' even bits in their low byte and odd bits
/// in their high one, in order (byte `2h + p` of a block's `qh` then holds its bits
/// `16h + 2j + p`, `j` in 0..8).
const UNSHUFFLE_16: [(u32, u64); 3] = [
    (1, 0x2222_2222_2222_2222),
    (2, 0x0c0c_0c0c_0c0c_0c0c),
    (4, 0x00f0_00f0_00f0_00f0),
];

/// `x` with, for each `(shift, mask)` in turn, the bits of `mask` swapped with the bits
/// `shift` above them.
fn swap_bits<const N: usize>(mut x: u64, rounds: [(u32, u64); N]) -> u64 {
    for (shift, mask) in rounds {
        let t = (x ^ (x >> shift)) & mask;
        x ^= t ^ (t << shift);
    }
    x
}

/// Whether field `f` of block `i` of a group of `count` blocks (of a type whose fields start at
/// `fields`, its fifth bits at `fifth_bits`: `Grouped`) is a pair's transposed fifth bits.
#[inline(always)]
fn transposed(
    fields: &[usize],
    fifth_bits: Option<usize>,
    f: usize,
    i: usize,
    count: usize,
) -> bool {
    fifth_bits == Some(fields[f]) && (i | 1) < count
}

/// Where byte `j` of field `f` (of a block struct of `bytes` bytes whose fields start at
/// `fields`) of block `i` of a group of `count` blocks sits, from the group's start: past
/// [`field_at`], or in its pair's interleaved quants ([`PAIRED`]).
#[inline(always)]
const fn byte_in_group(
    fields: &[usize],
    bytes: usize,
    f: usize,
    i: usize,
    count: usize,
    j: usize,
) -> usize {
    if PAIRED && f == fields.len() - 1 && (i | 1) < count {
        field_at(fields, bytes, f, i & !1, count) + j / RUN * 2 * RUN + (i & 1) * RUN + j % RUN
    } else {
        field_at(fields, bytes, f, i, count) + j
    }
}

/// Bytes moved at once when field `f` of block `i` of a group of `count` is grouped: the whole
/// field, or a run of a pair's quants.
#[inline(always)]
const fn piece(fields: &[usize], bytes: usize, f: usize, i: usize, count: usize) -> usize {
    if PAIRED && f == fields.len() - 1 && (i | 1) < count {
        RUN
    } else {
        field_size(fields, bytes, f)
    }
}

/// Which of `fields` starts at byte `offset` of the block (for `const` use: fails to compile if
/// none does).
#[cfg_attr(
    not(all(target_arch = "wasm32", target_feature = "simd128")),
    allow(dead_code)
)]
pub(crate) const fn field_index(fields: &[usize], offset: usize) -> usize {
    let mut f = 0;
    while f < fields.len() {
        if fields[f] == offset {
            return f;
        }
        f += 1;
    }
    panic!("no field starts at this offset")
}

/// `(fields, block bytes, fifth bits)` of a grouped type, `None` for any other.
pub(crate) const fn layout(ty: GgmlType) -> Option<(&'static [usize], usize, Option<usize>)> {
    const fn of<B: Grouped>() -> Option<(&'static [usize], usize, Option<usize>)> {
        Some((B::FIELDS, size_of::<B>(), B::FIFTH_BITS))
    }
    match ty {
        GgmlType::Q4_0 => of::<q4::BlockQ4_0>(),
        GgmlType::Q4_1 => of::<q4::BlockQ4_1>(),
        GgmlType::Q5_0 => of::<q5::BlockQ5_0>(),
        GgmlType::Q5_1 => of::<q5::BlockQ5_1>(),
        GgmlType::Q8_0 => of::<q8::BlockQ8_0>(),
        _ => None,
    }
}

/// Where byte `at` of block `b` (counted in the file's block layout) of a row of `n_blocks`
/// blocks of `ty` sits in the row as loaded: grouped for the grouped types, where the file has
/// it for the others; `None` for a byte of a pair's transposed fifth bits, whose bits are
/// spread over eight bytes, and for a quant byte of a repacked Q6_K super-block.
pub(crate) fn byte_at(ty: GgmlType, n_blocks: usize, b: usize, at: usize) -> Option<usize> {
    let Some((fields, bytes, fifth_bits)) = layout(ty) else {
        if ty == GgmlType::Q6K && at < offset_of!(k_quants::BlockQ6K, scales) {
            return None;
        }
        return Some(b * ty.block_geometry().map_or(0, |(_, bytes)| bytes) + at);
    };
    let start = b / GROUP * GROUP;
    let count = (n_blocks - start).min(GROUP);
    // the field holding byte `at` (fields[0] is 0)
    let f = fields.iter().rposition(|&o| o <= at).unwrap_or(0);
    let i = b - start;
    if transposed(fields, fifth_bits, f, i, count) {
        return None;
    }
    Some(start * bytes + byte_in_group(fields, bytes, f, i, count, at - fields[f]))
}

/// Most bytes of a grouped block (Q8_0) and of a group.
pub(crate) const MAX_BLOCK_BYTES: usize = 34;
const MAX_GROUP_BYTES: usize = GROUP * MAX_BLOCK_BYTES;

/// Whether `fields` describe a block struct of `bytes` bytes that [`group_rows`] can hold: the
/// first at 0, increasing, inside the block, the last (the quants) whole runs of [`RUN`], the
/// block at most [`MAX_BLOCK_BYTES`]. Every `Grouped` impl asserts it at compile time.
pub(crate) const fn valid_fields(fields: &[usize], bytes: usize) -> bool {
    let mut f = 1;
    while f < fields.len() {
        if fields[f] <= fields[f - 1] {
            return false;
        }
        f += 1;
    }
    !fields.is_empty()
        && fields[0] == 0
        && fields[fields.len() - 1] < bytes
        && (bytes - fields[fields.len() - 1]).is_multiple_of(RUN)
        && bytes <= MAX_BLOCK_BYTES
}

/// Rewrites `data`, rows of `n_cols` weights of type `ty` as the file stores them, into the
/// grouped layout (Q6_K: its quants repacked), in place. Other types, and bytes that are not
/// whole rows of whole blocks (which the loader refuses later), are left as they are.
pub fn group_rows(ty: GgmlType, n_cols: usize, data: &mut [u8]) {
    let Some(row_bytes) = ty.row_bytes(n_cols as u64) else {
        return;
    };
    let row_bytes = row_bytes as usize;
    if row_bytes == 0 || !data.len().is_multiple_of(row_bytes) {
        return;
    }
    match ty {
        GgmlType::Q4_0 => group_rows_of::<q4::BlockQ4_0>(row_bytes, data),
        GgmlType::Q4_1 => group_rows_of::<q4::BlockQ4_1>(row_bytes, data),
        GgmlType::Q5_0 => group_rows_of::<q5::BlockQ5_0>(row_bytes, data),
        GgmlType::Q5_1 => group_rows_of::<q5::BlockQ5_1>(row_bytes, data),
        GgmlType::Q8_0 => group_rows_of::<q8::BlockQ8_0>(row_bytes, data),
        GgmlType::Q6K => {
            for blk in data.chunks_exact_mut(size_of::<k_quants::BlockQ6K>()) {
                if let Some(quants) = blk.first_chunk_mut() {
                    k_quants::repack_q6k(quants);
                }
            }
        }
        _ => {}
    }
}

/// [`group_rows`] for one block type, so that a whole group's moves are constants (SmolLM2's
/// 96 MB in Node: 27 ms; 80 ms with the fields read at run time).
#[inline(never)]
fn group_rows_of<B: Grouped>(row_bytes: usize, data: &mut [u8]) {
    let bytes = size_of::<B>();
    for row in data.chunks_exact_mut(row_bytes) {
        let mut rest = &mut row[..];
        while rest.len() >= GROUP * bytes {
            let (group, after) = rest.split_at_mut(GROUP * bytes);
            group_of::<B>(group, GROUP);
            rest = after;
        }
        if !rest.is_empty() {
            let count = rest.len() / bytes;
            group_of::<B>(rest, count);
        }
    }
}

/// One group of `count` blocks (`group.len() == count · size_of::<B>()`), in place.
#[inline(always)]
fn group_of<B: Grouped>(group: &mut [u8], count: usize) {
    let (fields, bytes) = (B::FIELDS, size_of::<B>());
    let mut scratch = [0u8; MAX_GROUP_BYTES];
    scratch[..group.len()].copy_from_slice(group);
    for i in 0..count {
        for f in 0..fields.len() {
            let n = piece(fields, bytes, f, i, count);
            for j in (0..field_size(fields, bytes, f)).step_by(n) {
                let (from, to) = (
                    i * bytes + fields[f] + j,
                    byte_in_group(fields, bytes, f, i, count, j),
                );
                group[to..to + n].copy_from_slice(&scratch[from..from + n]);
            }
        }
    }
    if let Some(f) = B::FIFTH_BITS.map(|at| field_index(fields, at)) {
        for i in (0..count)
            .step_by(2)
            .filter(|&i| transposed(fields, B::FIFTH_BITS, f, i, count))
        {
            // the pair's two `qh` side by side (`field_at`: four bytes each)
            let at = field_at(fields, bytes, f, i, count);
            if let Some(pair) = group[at..].first_chunk_mut() {
                *pair = transpose_fifth_bits(*pair);
            }
        }
    }
}

/// Block `b` of a grouped `row` (whole blocks of `B`), as the file stored it.
#[inline(always)]
pub(crate) fn block<B: Grouped>(row: &[u8], b: usize) -> B {
    let bytes = size_of::<B>();
    let start = b / GROUP * GROUP;
    let count = (row.len() / bytes - start).min(GROUP);
    let group = &row[start * bytes..(start + count) * bytes];
    let mut out = [0u8; MAX_BLOCK_BYTES];
    let i = b - start;
    for f in 0..B::FIELDS.len() {
        if transposed(B::FIELDS, B::FIFTH_BITS, f, i, count) {
            let at = field_at(B::FIELDS, bytes, f, i & !1, count);
            if let Some(&pair) = group[at..].first_chunk() {
                let (qh, to) = (untranspose_fifth_bits(pair), B::FIELDS[f]);
                out[to..to + 4].copy_from_slice(&qh[4 * (i & 1)..][..4]);
            }
            continue;
        }
        let n = piece(B::FIELDS, bytes, f, i, count);
        for j in (0..field_size(B::FIELDS, bytes, f)).step_by(n) {
            let (at, to) = (
                byte_in_group(B::FIELDS, bytes, f, i, count, j),
                B::FIELDS[f] + j,
            );
            out[to..to + n].copy_from_slice(&group[at..at + n]);
        }
    }
    // SAFETY: by the `Block` contract `B` has alignment 1 and accepts any bytes; `out` holds
    // `size_of::<B>() <= MAX_BLOCK_BYTES` of them (checked with each `Grouped` impl).
    unsafe { core::ptr::read_unaligned(out.as_ptr().cast::<B>()) }
}

/// The blocks of a grouped `row` (whole blocks of `B`), in order, as the file stored them.
#[inline(always)]
pub(crate) fn blocks<B: Grouped>(row: &[u8]) -> impl Iterator<Item = B> + '_ {
    (0..row.len() / size_of::<B>()).map(move |b| block::<B>(row, b))
}
