//! A diagnostic a host measures the machine with, inside wasm: streaming read bandwidth (the
//! `stream_read` export). Decode reads every weight once per token, so bytes per token ÷ this
//! bandwidth is its ceiling (`cargo xtask bench` reports decode as a fraction of it).

use alloc::vec::Vec;
use core::ops::Range;

use crate::err;
use crate::error::{Result, Status};
use crate::pool::{self, Disjoint};

/// Bytes one item of the job reads.
const BLOCK: usize = 64 * 1024;

/// Reads `data` `passes` times on the pool's threads; returns the wrapping sum of its
/// little-endian u32 words (the same for any thread count and build; a tail of less than four
/// bytes is not read).
pub fn stream_read(data: &[u8], passes: u32) -> Result<u32> {
    let blocks = data.len().div_ceil(BLOCK);
    let mut sums: Vec<u32> = Vec::new();
    sums.try_reserve_exact(blocks)
        .map_err(|_| err!(Status::OutOfMemory, "stream_read: {} block sums", blocks))?;
    sums.resize(blocks, 0);
    let mut total = 0u32;
    for _ in 0..passes {
        let args = StreamArgs {
            data,
            sums: Disjoint::new(&mut sums),
        };
        pool::par_for(&args, blocks, 1, stream_kernel);
        pool::check()?;
        total = sums.iter().fold(total, |a, &s| a.wrapping_add(s));
    }
    Ok(total)
}

struct StreamArgs<'a> {
    data: &'a [u8],
    /// (blocks,)
    sums: Disjoint<'a, u32>,
}

fn stream_kernel(a: &StreamArgs<'_>, blocks: Range<usize>) {
    // SAFETY: this range of blocks is this call's alone.
    let sums = unsafe { a.sums.slice(blocks.clone()) };
    for (b, s) in blocks.zip(sums) {
        let bytes = &a.data[b * BLOCK..((b + 1) * BLOCK).min(a.data.len())];
        *s = simd128_or!(sum_words_simd(bytes), sum_words(bytes));
    }
}

/// The scalar reference: the wrapping sum of the whole little-endian u32 words of `bytes`.
fn sum_words(bytes: &[u8]) -> u32 {
    bytes.chunks_exact(4).fold(0u32, |a, w| {
        a.wrapping_add(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    })
}

/// [`sum_words`] with four 16-byte loads per round into four accumulators.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn sum_words_simd(bytes: &[u8]) -> u32 {
    use core::arch::wasm32::*;
    let mut acc = [i32x4_splat(0); 4];
    let rounds = bytes.chunks_exact(64);
    let rest = rounds.remainder();
    for r in rounds {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `r` holds 64 bytes, so 16 at 16 k are in bounds; v128_load is unaligned.
            let v = unsafe { v128_load(r.as_ptr().add(16 * k) as *const v128) };
            *a = i32x4_add(*a, v);
        }
    }
    let v = i32x4_add(i32x4_add(acc[0], acc[1]), i32x4_add(acc[2], acc[3]));
    let lanes = [
        u32x4_extract_lane::<0>(v),
        u32x4_extract_lane::<1>(v),
        u32x4_extract_lane::<2>(v),
        u32x4_extract_lane::<3>(v),
    ];
    lanes
        .iter()
        .fold(sum_words(rest), |a, &l| a.wrapping_add(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_is_the_words_whatever_the_blocks_and_passes() {
        let data: Vec<u8> = (0..3 * BLOCK + 1000)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let words = sum_words(&data);
        assert_eq!(stream_read(&data, 1).unwrap(), words);
        assert_eq!(stream_read(&data, 3).unwrap(), words.wrapping_mul(3));
        // The SIMD kernel (in the wasm unit tests) equals the reference on every length.
        for len in [0, 3, 4, 63, 64, 65, 1000, BLOCK] {
            let b = &data[..len];
            assert_eq!(
                simd128_or!(sum_words_simd(b), sum_words(b)),
                sum_words(b),
                "{len}"
            );
        }
    }
}
