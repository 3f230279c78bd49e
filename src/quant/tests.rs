//! Tests of the quant module against references that are not this code:
//!
//! - dequantization against the `gguf` PyPI package's numpy dequantizer, and activation rounding
//!   against numpy / gguf restatements of ggml's quantizers (vectors made by
//!   `testdata/gen_vectors.py`, committed as `testdata/vectors.bin`);
//! - each scalar reference dot product against a plain f64 dot product of the dequantized row
//!   with the dequantized activation;
//! - (wasm with simd128 only) each SIMD kernel against its scalar reference, and `matmul`
//!   against `matvec`.
//!
//! `bench_matvec` (ignored) prints the speed of every kernel; see its doc comment.

use alloc::vec;
use alloc::vec::Vec;
use std::println;

use super::activation::{ActRow, TILE_VALUES, tile_order};
use super::*;
use crate::testutil::Rng;

/// The weight types with kernels.
const SUPPORTED: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// The legacy block types (blocks of 32, one f16 scale each).
const LEGACY: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// Scalar reference dot vs the f64 dot of the dequantized operands, relative to `Σ|w·x|`: f32
/// rounding of the per-block scales and of the running sum over at most a few thousand terms.
const DOT_REF_REL_TOL: f64 = 2e-5;

/// Q8_1's per-block `s` is `f16(d_f32·Σq)`, not `d_f16·Σq`: up to 2^-10 relative difference in
/// the minimum's share (ggml does the same), allowed on top of [`DOT_REF_REL_TOL`].
const Q8_1_SUM_REL_TOL: f64 = 1.0 / 1024.0;

/// SIMD vs scalar reference, relative to `Σ|w·x|`: the integer sums are exact in both, only the
/// order of f32 additions differs.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
const SIMD_REL_TOL: f64 = 2e-5;

// ---------------------------------------------------------------------------------------------
// Reference vectors from testdata/gen_vectors.py

static VECTORS: &[u8] = include_bytes!("testdata/vectors.bin");

/// One named array of vectors.bin: its dtype code and raw little-endian bytes.
fn record(name: &str) -> (u32, &'static [u8]) {
    let mut at = 0;
    let u32_at = |at: usize| u32::from_le_bytes(VECTORS[at..at + 4].try_into().unwrap());
    while at < VECTORS.len() {
        let name_len = u32_at(at) as usize;
        let this = core::str::from_utf8(&VECTORS[at + 4..at + 4 + name_len]).unwrap();
        at += 4 + name_len;
        let (dtype, count) = (u32_at(at), u32_at(at + 4) as usize);
        let size = [1, 1, 2, 2, 4][dtype as usize];
        let data = &VECTORS[at + 8..at + 8 + count * size];
        at += 8 + count * size;
        if this == name {
            return (dtype, data);
        }
    }
    panic!("testdata/vectors.bin has no record {name}: rerun testdata/gen_vectors.py");
}

fn bytes(name: &str) -> &'static [u8] {
    record(name).1
}
fn f32s(name: &str) -> Vec<f32> {
    let (dtype, data) = record(name);
    assert_eq!(dtype, 4, "{name} is not f32");
    data.chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}
fn u16s(name: &str) -> Vec<u16> {
    record(name)
        .1
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes(b.try_into().unwrap()))
        .collect()
}
fn i16s(name: &str) -> Vec<i16> {
    record(name)
        .1
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes(b.try_into().unwrap()))
        .collect()
}
fn i8s(name: &str) -> Vec<i8> {
    record(name).1.iter().map(|&b| b as i8).collect()
}

// ---------------------------------------------------------------------------------------------
// Layouts, conversions, dequantization

#[test]
fn kernel_geometry_matches_type_geometry() {
    for ty in SUPPORTED {
        assert!(is_supported(ty), "{}", ty.name());
        let kernel = with_kernels!(ty, K => (K::BLOCK_VALUES, K::BLOCK_BYTES), _ => unreachable!());
        assert_eq!(Some(kernel), ty.block_geometry(), "{}", ty.name());
    }
    for ty in [
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q8K,
        GgmlType::I8,
        GgmlType::Other(20),
    ] {
        assert!(!is_supported(ty), "{}", ty.name());
    }
}

#[test]
fn f16_to_f32_is_exact_for_every_value() {
    for h in 0..=u16::MAX {
        let sign = if h & 0x8000 != 0 { -1.0f64 } else { 1.0 };
        let (exponent, mantissa) = ((h >> 10) & 0x1f, (h & 0x3ff) as f64);
        let got = f16_to_f32(h);
        if exponent == 31 {
            assert!(
                if mantissa == 0.0 {
                    got.is_infinite() && got.is_sign_negative() == (sign < 0.0)
                } else {
                    got.is_nan()
                },
                "{h:#06x}"
            );
            continue;
        }
        let expected = if exponent == 0 {
            sign * mantissa * 2f64.powi(-24)
        } else {
            sign * (1.0 + mantissa / 1024.0) * 2f64.powi(exponent as i32 - 15)
        };
        assert_eq!(got as f64, expected, "{h:#06x}");
        assert_eq!(got.is_sign_negative(), sign < 0.0, "{h:#06x}");
        assert_eq!(f32_to_f16(got), h, "round trip of {h:#06x}");
    }
}

#[test]
fn f32_to_f16_matches_numpy() {
    let (input, expected) = (f32s("half/f32"), u16s("half/f16"));
    assert!(input.len() > 900);
    for (x, e) in input.into_iter().zip(expected) {
        let got = f32_to_f16(x);
        if x.is_nan() {
            assert!(
                got & 0x7c00 == 0x7c00 && got & 0x03ff != 0,
                "NaN {:#010x} -> {got:#06x}",
                x.to_bits()
            );
        } else {
            assert_eq!(got, e, "{:#010x} ({x:e})", x.to_bits());
        }
    }
}

#[test]
fn bf16_round_trip_and_rounding() {
    for h in 0..=u16::MAX {
        let x = bf16_to_f32(h);
        if !x.is_nan() {
            assert_eq!(f32_to_bf16(x), h);
        }
    }
    assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie, even stays
    assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82); // tie, odd rounds up
    assert_eq!(f32_to_bf16(f32::from_bits(0x7f7f_ffff)), 0x7f80); // rounds up to infinity
    assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0); // NaN made quiet
}

#[test]
fn dequantize_matches_gguf_package() {
    for ty in SUPPORTED {
        // one row of blocks as the file stores them, grouped as the loader does
        let mut blocks = bytes(&alloc::format!("deq/{}/blocks", ty.name())).to_vec();
        let expected = f32s(&alloc::format!("deq/{}/values", ty.name()));
        group_rows(ty, expected.len(), &mut blocks);
        let mut got = vec![f32::NAN; expected.len()];
        dequantize_row(ty, &blocks, &mut got).unwrap();
        // Bit for bit: both compute the same f32 expressions in the same order.
        for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                g.to_bits(),
                e.to_bits(),
                "{} value {i}: {g:e} vs gguf {e:e}",
                ty.name()
            );
        }
    }
}

/// `grouped::transpose_fifth_bits` puts the fifth bit of weight `fifth_bit_weight(k, j)` of a
/// pair's first block in bit `k` of byte `j`, its partner's in bit `4 + k`, each weight once,
/// and `untranspose_fifth_bits` gives both `qh` back. (Whether a kernel reads them where they
/// are is `simd_matches_scalar_reference`'s check, in the wasm builds.)
#[test]
fn fifth_bits_transpose_and_back() {
    let weights: std::collections::BTreeSet<usize> = (0..4)
        .flat_map(|k| (0..8).map(move |j| grouped::fifth_bit_weight(k, j)))
        .collect();
    assert_eq!(weights, (0..32).collect());
    let mut rng = Rng(0x5b);
    for _ in 0..1000 {
        let qh: [u8; 8] = core::array::from_fn(|_| rng.next() as u8);
        let t = grouped::transpose_fifth_bits(qh);
        for (block, qh) in qh.chunks_exact(4).enumerate() {
            let qh = u32::from_le_bytes(qh.try_into().unwrap());
            for (k, j) in (0..4).flat_map(|k| (0..8).map(move |j| (k, j))) {
                let bit = (t[j] >> (4 * block + k)) & 1;
                let w = grouped::fifth_bit_weight(k, j);
                assert_eq!(u32::from(bit), (qh >> w) & 1, "block {block} weight {w}");
            }
        }
        assert_eq!(grouped::untranspose_fifth_bits(t), qh);
    }
}

/// Grouping rewrites rows of every length (groups of 4, tails of 1 to 3) so that each field
/// of block `b` lands where `grouped::field_at` (and `byte_at`) says, and `grouped::block`
/// reads every block back as the file stored it. Other types are left alone.
#[test]
fn grouping_keeps_every_block() {
    fn check<B: grouped::Grouped>(ty: GgmlType, rng: &mut Rng) {
        let bytes = size_of::<B>();
        for n_blocks in 1..=9 {
            let n_rows = 3;
            let file: Vec<u8> = (0..n_rows * n_blocks * bytes)
                .map(|_| rng.next() as u8)
                .collect();
            let mut w = file.clone();
            group_rows(ty, 32 * n_blocks, &mut w);
            assert_eq!(w.len(), file.len());
            for (row, file_row) in w
                .chunks_exact(n_blocks * bytes)
                .zip(file.chunks_exact(n_blocks * bytes))
            {
                for b in 0..n_blocks {
                    let want = &file_row[b * bytes..(b + 1) * bytes];
                    for (at, &byte) in want.iter().enumerate() {
                        // a pair's fifth bits are transposed: no byte to compare, `grouped::block`
                        // below reads them back
                        let Some(p) = grouped::byte_at(ty, n_blocks, b, at) else {
                            assert!(matches!(ty, GgmlType::Q5_0 | GgmlType::Q5_1));
                            continue;
                        };
                        assert_eq!(row[p], byte, "{} {n_blocks} {b} {at}", ty.name());
                    }
                    let got = grouped::block::<B>(row, b);
                    // SAFETY: a `Block` is plain bytes (alignment 1, no padding).
                    let got = unsafe {
                        core::slice::from_raw_parts((&got as *const B).cast::<u8>(), bytes)
                    };
                    assert_eq!(got, want, "{} {n_blocks} {b}", ty.name());
                }
            }
            if n_blocks >= 2 {
                assert_ne!(w, file, "{} {n_blocks}: nothing moved", ty.name());
            }
        }
    }
    let mut rng = Rng(0x960);
    check::<q4::BlockQ4_0>(GgmlType::Q4_0, &mut rng);
    check::<q4::BlockQ4_1>(GgmlType::Q4_1, &mut rng);
    check::<q5::BlockQ5_0>(GgmlType::Q5_0, &mut rng);
    check::<q5::BlockQ5_1>(GgmlType::Q5_1, &mut rng);
    check::<q8::BlockQ8_0>(GgmlType::Q8_0, &mut rng);
    // Q5_1, a group of four: d×4 (bytes 0..8), m×4 (8..16), qh×4 (16..32), qs×4 (32..96): byte
    // 2 of block 2 is byte 0 of its m; byte 5 is byte 1 of its qh, which the transposition
    // spreads over its pair's eight
    assert_eq!(grouped::byte_at(GgmlType::Q5_1, 4, 2, 2), Some(8 + 2 * 2));
    assert_eq!(grouped::byte_at(GgmlType::Q5_1, 4, 2, 5), None);
    // a group of three (d×3, m×3, qh×3 from 12): the lone last block's qh keeps its bytes
    assert_eq!(
        grouped::byte_at(GgmlType::Q5_1, 3, 2, 5),
        Some(12 + 2 * 4 + 1)
    );
    for ty in [GgmlType::F16, GgmlType::Q4K, GgmlType::Q6K] {
        let mut w: Vec<u8> = (0..2 * 210 * 2).map(|_| rng.next() as u8).collect();
        let file = w.clone();
        group_rows(ty, 256, &mut w);
        if ty == GgmlType::Q6K {
            // quants repacked (`q6k_repack_keeps_every_quant`), scales and d in place
            for (got, want) in w.chunks_exact(210).zip(file.chunks_exact(210)) {
                assert_ne!(got[..192], want[..192]);
                assert_eq!(got[192..], want[192..]);
            }
            assert_eq!(grouped::byte_at(ty, 2, 1, 191), None);
            assert_eq!(grouped::byte_at(ty, 2, 1, 192), Some(210 + 192));
            continue;
        }
        assert_eq!(w, file, "{}", ty.name());
    }
}

/// `k_quants::repack_q6k` keeps every quant of a Q6_K super-block (as the file's layout,
/// `q6k_file_quant`, has it) where `q6k_quant` (the scalar reads) finds it. (Whether the SIMD
/// kernels read them there is `simd_matches_scalar_reference`'s check; `dequantize_matches_
/// gguf_package` compares the loaded blocks with the gguf package's values.)
#[test]
fn q6k_repack_keeps_every_quant() {
    let mut rng = Rng(0x6c);
    for _ in 0..300 {
        let file: [u8; 192] = core::array::from_fn(|_| rng.next() as u8);
        let mut q = file;
        k_quants::repack_q6k(&mut q);
        for i in 0..256 {
            assert_eq!(
                k_quants::q6k_quant(&q, i),
                k_quants::q6k_file_quant(&file, i),
                "quant {i}"
            );
        }
    }
}

#[test]
fn dequantize_row_rejects_bad_shapes() {
    let mut out = [0.0f32; 32];
    assert_eq!(
        dequantize_row(GgmlType::Q4_0, &[0; 17], &mut out)
            .unwrap_err()
            .status,
        Status::InvalidArgument
    );
    assert_eq!(
        dequantize_row(GgmlType::Q4_0, &[0; 18], &mut out[..31])
            .unwrap_err()
            .status,
        Status::InvalidArgument
    );
    assert_eq!(
        dequantize_row(GgmlType::Q2K, &[0; 84], &mut [0.0; 256])
            .unwrap_err()
            .status,
        Status::Unsupported
    );
    assert!(dequantize_row(GgmlType::Q4_0, &[0; 18], &mut out).is_ok());
}

#[test]
fn check_matrix_validates_shapes() {
    let zeros = |n: usize| vec![0u8; n];
    assert!(check_matrix(GgmlType::Q4_1, 576, 1536, &zeros(576 * 48 * 20), "w").is_ok());
    let e = check_matrix(
        GgmlType::Q4K,
        1536,
        576,
        &zeros(1536 * 576 / 256 * 144),
        "blk.0.ffn_up.weight",
    )
    .unwrap_err();
    assert_eq!(e.status, Status::BadFormat);
    assert!(e.message.as_str().contains("blk.0.ffn_up.weight"));
    assert_eq!(
        check_matrix(GgmlType::Q4_1, 2, 32, &zeros(41), "w")
            .unwrap_err()
            .status,
        Status::BadFormat
    );
    assert_eq!(
        check_matrix(GgmlType::Other(20), 2, 32, &zeros(36), "w")
            .unwrap_err()
            .status,
        Status::Unsupported
    );
}

/// A quantized tensor with an infinite or NaN scale or minimum anywhere is refused with its
/// name and block (the kernels convert legacy scales assuming they are finite); finite ones,
/// subnormals included, pass.
#[test]
fn check_scales_refuses_non_finite_scales() {
    let mut rng = Rng(0x5eed);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ] {
        let (values, block_bytes) = ty.block_geometry().unwrap();
        // rows of 6 blocks: a group of four and one of two in each (legacy types)
        let n_cols = 6 * values;
        let w = random_matrix(ty, 4, n_cols, &mut rng);
        check_scales(ty, n_cols, &w, "w").unwrap();
        for &at in scale_offsets(ty) {
            for (bits, block) in [0x7c00u16, 0xfc00, 0x7e00, 0x7c01, 0xffff]
                .into_iter()
                .zip([5, 9, 14, 23, 0])
            {
                let mut bad = w.clone();
                let p =
                    block / 6 * 6 * block_bytes + grouped::byte_at(ty, 6, block % 6, at).unwrap();
                bad[p..p + 2].copy_from_slice(&bits.to_le_bytes());
                let e = check_scales(ty, n_cols, &bad, "blk.3.ffn_up.weight").unwrap_err();
                assert_eq!(e.status, Status::BadFormat, "{} {bits:#06x}", ty.name());
                let m = e.message.as_str();
                assert!(
                    m.contains("blk.3.ffn_up.weight")
                        && m.contains(&std::format!("block {block} ")),
                    "{m}"
                );
            }
        }
    }
    // Float tensors have no scales (F16's values are checked by check_f16_finite).
    check_scales(GgmlType::F16, 2, &[0x00, 0x7c, 0x00, 0xfc], "w").unwrap();
}

/// An F16 matrix with an infinite or NaN weight anywhere is refused with its name and the
/// weight's index (the SIMD kernels convert F16 weights assuming they are finite); the largest
/// finite values, subnormals and negative zero pass. F32 and BF16 matrices are not checked.
#[test]
fn check_matrix_refuses_non_finite_f16_weights() {
    let (rows, cols) = (5, 1000); // 10,000 bytes: pages of 4096 and a partial last one
    let mut rng = Rng(0xf16);
    let mut w = random_matrix(GgmlType::F16, rows, cols, &mut rng);
    for (i, bits) in [
        (0, 0x7bffu16),
        (1, 0xfbff),
        (2, 0x0001),
        (3, 0x8000),
        (4, 0x83ff),
    ] {
        w[2 * i..2 * i + 2].copy_from_slice(&bits.to_le_bytes());
    }
    check_matrix(GgmlType::F16, rows, cols, &w, "w").unwrap();
    for (bits, at) in [0x7c00u16, 0xfc00, 0x7e00, 0x7c01, 0xffff]
        .into_iter()
        .zip([0, 2047, 2048, 4321, rows * cols - 1])
    {
        let mut bad = w.clone();
        bad[2 * at..2 * at + 2].copy_from_slice(&bits.to_le_bytes());
        let e = check_matrix(GgmlType::F16, rows, cols, &bad, "blk.1.attn_q.weight").unwrap_err();
        assert_eq!(e.status, Status::BadFormat, "{bits:#06x}");
        let m = e.message.as_str();
        assert!(
            m.contains("blk.1.attn_q.weight") && m.contains(&std::format!("weight {at} ")),
            "{m}"
        );
        // the same bytes as BF16, and as F32 with half as many columns
        check_matrix(GgmlType::BF16, rows, cols, &bad, "w").unwrap();
        check_matrix(GgmlType::F32, rows, cols / 2, &bad, "w").unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Activation rounding

#[test]
fn activation_rounding_matches_ggml() {
    let x = f32s("act/x");
    let mut buf = ActivationBuf::new();

    quantize_activation(GgmlType::F16, &x, &mut buf).unwrap();
    for (i, (&v, h)) in buf.row(0).values.iter().zip(u16s("act/f16")).enumerate() {
        assert_eq!(v.to_bits(), f16_to_f32(h).to_bits(), "f16 {i}");
    }
    quantize_activation(GgmlType::BF16, &x, &mut buf).unwrap();
    for (i, (&v, h)) in buf.row(0).values.iter().zip(u16s("act/bf16")).enumerate() {
        assert_eq!(v.to_bits(), bf16_to_f32(h).to_bits(), "bf16 {i}");
    }

    // Q8_0 as ggml-cpu's x86 build: exact.
    let (d, qs) = (u16s("act/q8_0/d"), i8s("act/q8_0/qs"));
    quantize_activation(GgmlType::Q4_0, &x, &mut buf).unwrap();
    let row = buf.row(0);
    for (b, &d) in d.iter().enumerate().take(16) {
        assert_eq!(
            row.scales[b].to_bits(),
            f16_to_f32(d).to_bits(),
            "q8_0 d {b}"
        );
    }
    for i in 0..512 {
        assert_eq!(
            row.quants[stored_index(ActivationKind::Q8_0, i)] as i32,
            qs[i] as i32,
            "q8_0 q {i} (x = {})",
            x[i]
        );
    }
    // ...and against the gguf package's port of ggml's portable reference: the same except at
    // exact ties, which it rounds away from zero.
    let (d_ref, qs_ref) = (u16s("act/q8_0_ref/d"), i8s("act/q8_0_ref/qs"));
    let mut ties = 0;
    for i in 0..512 {
        assert_eq!(d_ref[i / 32], d[i / 32]);
        let (ours, theirs) = (
            row.quants[stored_index(ActivationKind::Q8_0, i)] as i32,
            qs_ref[i] as i32,
        );
        if ours != theirs {
            // block 3 has amax 127, so x·127/amax = x: the tie values are the half-integers
            let tie = (x[i] - x[i].trunc()).abs() == 0.5;
            assert!(
                (3 * 32..4 * 32).contains(&i) && tie,
                "q8_0 vs ref at {i}: {ours} vs {theirs}"
            );
            ties += 1;
        }
    }
    assert!(
        ties > 0,
        "the tie block should show the rounding difference"
    );

    // Q8_1: the same quants plus s.
    quantize_activation(GgmlType::Q5_1, &x, &mut buf).unwrap();
    let row = buf.row(0);
    for (b, s) in u16s("act/q8_1/s").into_iter().enumerate() {
        assert_eq!(row.sums[b].to_bits(), f16_to_f32(s).to_bits(), "q8_1 s {b}");
        assert_eq!(
            row.scales[b].to_bits(),
            f16_to_f32(d[b]).to_bits(),
            "q8_1 d {b}"
        );
    }
    for (i, &q) in qs.iter().enumerate().take(512) {
        assert_eq!(
            row.quants[stored_index(ActivationKind::Q8_1, i)] as i32,
            q as i32,
            "q8_1 q {i}"
        );
    }

    // Q8_K
    quantize_activation(GgmlType::Q6K, &x, &mut buf).unwrap();
    let row = buf.row(0);
    for (b, d) in f32s("act/q8_k/d").into_iter().enumerate() {
        assert_eq!(row.scales[b].to_bits(), d.to_bits(), "q8_k d {b}");
    }
    let qs = i8s("act/q8_k/qs");
    for (i, &q) in qs.iter().enumerate().take(512) {
        assert_eq!(
            row.quants[stored_index(ActivationKind::Q8K, i)] as i32,
            q as i32,
            "q8_k q {i}"
        );
    }
    assert_eq!(row.bsums, &i16s("act/q8_k/bsums")[..]);
}

/// Every integer kind carries the sum of each 16 quants (the relaxed build takes Q4_0's and
/// Q5_0's offsets off with them).
#[test]
fn integer_activations_carry_the_sums_of_each_16_quants() {
    let mut rng = Rng(16);
    let mut buf = ActivationBuf::new();
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q6K] {
        let x = random_activation(512, &mut rng);
        quantize_activations(ty, &x, 256, &mut buf).unwrap();
        for v in 0..2 {
            let row = buf.row(v);
            for (g, &bsum) in row.bsums.iter().enumerate() {
                let sum: i32 = (16 * g..16 * g + 16)
                    .map(|i| row.quants[stored_index(vec_dot_kind(ty).unwrap(), i)] as i32)
                    .sum();
                assert_eq!(bsum as i32, sum, "{} vector {v} group {g}", ty.name());
            }
        }
    }
}

/// A Q8_0/Q8_1 batch's tiles (the prepared kernels read them) hold each vector's blocks in
/// runs of `TILE_VALUES` (in `tile_order`), block `4g + k` in lane `k`, with its scale, sum and the
/// sum of its quants; zeros past the row's blocks and the batch's vectors (7 vectors of 5
/// blocks: a tile of three and a group of one). One vector keeps no tiles.
#[test]
fn batch_tiles_hold_each_block_in_its_lane() {
    let mut rng = Rng(17);
    let mut buf = ActivationBuf::new();
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1] {
        let kind = vec_dot_kind(ty).unwrap();
        let (n, n_vecs) = (160, 7);
        let xs: Vec<f32> = (0..n_vecs)
            .flat_map(|_| random_activation(n, &mut rng))
            .collect();
        quantize_activations(ty, &xs, n, &mut buf).unwrap();
        for tile in 0..2 {
            let groups = buf.tile(tile);
            assert_eq!(groups.len(), 2);
            for (g, tg) in groups.iter().enumerate() {
                for (t, k) in (0..4).flat_map(|t| (0..4).map(move |k| (t, k))) {
                    let (v, b) = (4 * tile + t, 4 * g + k);
                    let what = alloc::format!("{} vector {v} block {b}", ty.name());
                    let (chunk, lane) =
                        (|p| p / TILE_VALUES, |p| TILE_VALUES * k + p % TILE_VALUES);
                    let quants = (0..32).map(|p| tg.quants[chunk(p)][t][lane(p)] as i32);
                    let (lane, bsum) = (tg.scales[t][k], tg.bsums[t][k]);
                    if v >= n_vecs || b >= n / 32 {
                        assert!(quants.into_iter().all(|q| q == 0), "{what}");
                        assert_eq!((lane, tg.sums[t][k], bsum), (0.0, 0.0, 0), "{what}");
                        continue;
                    }
                    let row = buf.row(v);
                    let want = (0..32).map(|p| row.quants[tile_order(kind, b, p)] as i32);
                    assert!(quants.eq(want), "{what}");
                    // each of the block's 32 quants once
                    let mut at: Vec<usize> = (0..32).map(|p| tile_order(kind, b, p)).collect();
                    let mut stored: Vec<usize> =
                        (0..32).map(|i| stored_index(kind, 32 * b + i)).collect();
                    at.sort_unstable();
                    stored.sort_unstable();
                    assert_eq!(at, stored, "{what}");
                    assert_eq!(lane, row.scales[b], "{what}");
                    assert_eq!(tg.sums[t][k], row.sums.get(b).copied().unwrap_or(0.0));
                    assert_eq!(bsum, row.bsums[2 * b] as i32 + row.bsums[2 * b + 1] as i32);
                }
            }
        }
        quantize_activations(ty, &xs[..n], n, &mut buf).unwrap();
        assert!(buf.tile(0).is_empty());
    }
}

#[test]
fn quantize_activation_rejects_bad_shapes_and_reuses_memory() {
    let mut buf = ActivationBuf::with_capacity(1024, 4).unwrap();
    let e = quantize_activation(GgmlType::Q4K, &[1.0; 576], &mut buf).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(
        quantize_activation(GgmlType::Q2K, &[1.0; 256], &mut buf)
            .unwrap_err()
            .status,
        Status::Unsupported
    );
    assert_eq!(
        quantize_activations(GgmlType::Q8_0, &[1.0; 96], 64, &mut buf)
            .unwrap_err()
            .status,
        Status::InvalidArgument
    );
    quantize_activations(GgmlType::Q8_0, &[0.5; 4096], 1024, &mut buf).unwrap();
    let before = buf.row(0).quants.as_ptr();
    for ty in SUPPORTED {
        quantize_activations(ty, &[0.5; 4096], 1024, &mut buf).unwrap();
        assert_eq!(
            (buf.n_vecs(), buf.n_cols(), buf.kind()),
            (4, 1024, vec_dot_kind(ty))
        );
    }
    quantize_activations(GgmlType::Q8_0, &[0.5; 4096], 1024, &mut buf).unwrap();
    assert_eq!(
        before,
        buf.row(0).quants.as_ptr(),
        "no reallocation within the reserved capacity"
    );
}

// ---------------------------------------------------------------------------------------------
// Random operands

/// A random `[n_rows][n_cols]` matrix of type `ty` as loaded (legacy blocks grouped), with f16
/// scales of a size real weights have (every 16th block's an f16 subnormal, which the kernels'
/// scale conversion must keep exact).
fn random_matrix(ty: GgmlType, n_rows: usize, n_cols: usize, rng: &mut Rng) -> Vec<u8> {
    random_matrix_with(ty, n_rows, n_cols, rng, 6.0e-5)
}

/// [`random_matrix`] with every 16th block's scales up to `small` instead of 0.02 (below 6.1e-5
/// they are f16 subnormals).
fn random_matrix_with(
    ty: GgmlType,
    n_rows: usize,
    n_cols: usize,
    rng: &mut Rng,
    small: f32,
) -> Vec<u8> {
    let (values, block_bytes) = ty.block_geometry().unwrap();
    let n_blocks = n_rows * n_cols / values;
    let mut w: Vec<u8> = (0..n_blocks * block_bytes)
        .map(|_| rng.next() as u8)
        .collect();
    match ty {
        GgmlType::F32 => {
            for c in w.chunks_exact_mut(4) {
                c.copy_from_slice(&(rng.uniform() * 0.1).to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&f32_to_f16(rng.uniform() * 0.1).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&f32_to_bf16(rng.uniform() * 0.1).to_le_bytes());
            }
        }
        _ => {
            for (i, blk) in w.chunks_exact_mut(block_bytes).enumerate() {
                for &at in scale_offsets(ty) {
                    let scale = rng.uniform() * if i % 16 == 5 { small } else { 0.02 };
                    blk[at..at + 2].copy_from_slice(&f32_to_f16(scale).to_le_bytes());
                }
            }
        }
    }
    group_rows(ty, n_cols, &mut w);
    w
}

/// `n` activations, each block of 32 with its own magnitude (like real hidden states).
fn random_activation(n: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = vec![0.0f32; n];
    for block in x.chunks_mut(32) {
        let scale = [0.01f32, 0.3, 1.0, 4.0, 40.0][(rng.next() % 5) as usize];
        for v in block {
            *v = rng.uniform() * scale;
        }
    }
    x
}

/// The activation vector `v` as the kernels see it, dequantized to f64.
fn dequantized_activation(row: &ActRow<'_>, kind: ActivationKind, n: usize) -> Vec<f64> {
    if kind.block() == 1 {
        return row.values.iter().map(|&v| v as f64).collect();
    }
    (0..n)
        .map(|i| row.quants[stored_index(kind, i)] as f64 * row.scales[i / kind.block()] as f64)
        .collect()
}

/// `(Σ w·x, Σ |w·x|)` in f64, and the Q8_1 allowance for the rounding of `s`.
fn f64_dot(
    ty: GgmlType,
    w_row: &[u8],
    row: &ActRow<'_>,
    kind: ActivationKind,
    n: usize,
) -> (f64, f64, f64) {
    let mut w = vec![0.0f32; n];
    dequantize_row(ty, w_row, &mut w).unwrap();
    let x = dequantized_activation(row, kind, n);
    let exact: f64 = w.iter().zip(&x).map(|(&w, &x)| w as f64 * x).sum();
    let magnitude: f64 = w.iter().zip(&x).map(|(&w, &x)| (w as f64 * x).abs()).sum();
    let mut sum_allowance = 0.0;
    if kind == ActivationKind::Q8_1 {
        // minimum m of block b: bytes 2..4 of both Q4_1 and Q5_1 blocks (as the file has them)
        let n_blocks = n / 32;
        for b in 0..n_blocks {
            let at = grouped::byte_at(ty, n_blocks, b, 2).unwrap();
            let m = f16_to_f32(u16::from_le_bytes([w_row[at], w_row[at + 1]])) as f64;
            let share: f64 = x[32 * b..32 * b + 32].iter().sum();
            sum_allowance += (m * share).abs() * Q8_1_SUM_REL_TOL;
        }
    }
    (exact, magnitude, sum_allowance)
}

/// Every supported type with its activation kind, at each of its test widths:
/// `(type, kind, columns, row bytes)`.
fn dot_cases() -> impl Iterator<Item = (GgmlType, ActivationKind, usize, usize)> {
    SUPPORTED.into_iter().flat_map(|ty| {
        let kind = vec_dot_kind(ty).unwrap();
        test_widths(ty)
            .iter()
            .map(move |&n| (ty, kind, n, ty.row_bytes(n as u64).unwrap() as usize))
    })
}

/// `got` is within `tol` of `want`; `what` names the product.
fn assert_within(got: f64, want: f64, tol: f64, what: core::fmt::Arguments<'_>) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: {got} vs {want} (tol {tol:e})"
    );
}

/// The scalar reference kernel's dot product of a weight row with an activation row.
fn scalar_dot(ty: GgmlType, w_row: &[u8], row: &ActRow<'_>) -> f64 {
    with_kernels!(ty, K => K::dot_ref(w_row, row), _ => unreachable!()) as f64
}

/// `for_rows` stores every row's product once, at the row's index, whatever the row count
/// (one vector: four runs of rows, the first with the rows left over; several: in order).
#[test]
fn for_rows_stores_each_row_once() {
    let rb = 8;
    for n in 0..=13usize {
        let w: Vec<u8> = (0..n).flat_map(|r| [r as u8; 8]).collect();
        let mut seen = vec![0u32; n];
        let mut y = vec![f32::NAN; n];
        for_rows(&w, rb, Out::vector(&mut y), |row| {
            seen[row[0] as usize] += 1;
            [row[0] as f32 + 0.5]
        });
        assert!(seen.iter().all(|&c| c == 1), "n={n}: {seen:?}");
        assert!(
            y.iter().enumerate().all(|(r, &v)| v == r as f32 + 0.5),
            "n={n}: {y:?}"
        );
        let mut y2 = vec![f32::NAN; 2 * n];
        // SAFETY: y2 holds 2 vectors of n products.
        let out = unsafe { Out::strided(y2.as_mut_ptr(), n, n, 2) };
        for_rows(&w, rb, out, |row| [row[0] as f32, -(row[0] as f32)]);
        assert!(
            (0..n).all(|r| y2[r] == r as f32 && y2[n + r] == -(r as f32)),
            "n={n}"
        );
    }
}

/// Column counts to try for a type: several blocks, plus odd sizes for the float types.
fn test_widths(ty: GgmlType) -> &'static [usize] {
    match ty.block_geometry().unwrap().0 {
        1 => &[7, 64, 100, 576, 1000],
        32 => &[32, 96, 576, 1536],
        _ => &[256, 768, 1536],
    }
}

#[test]
fn scalar_dot_matches_f64_dot_of_dequantized_operands() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut buf = ActivationBuf::new();
    for (ty, kind, n, rb) in dot_cases() {
        let w = random_matrix(ty, 3, n, &mut rng);
        quantize_activation(ty, &random_activation(n, &mut rng), &mut buf).unwrap();
        let row = buf.row(0);
        for w_row in w.chunks_exact(rb) {
            let got = scalar_dot(ty, w_row, &row);
            let (exact, magnitude, allowance) = f64_dot(ty, w_row, &row, kind, n);
            let tol = DOT_REF_REL_TOL * magnitude + allowance + 1e-30;
            assert_within(got, exact, tol, format_args!("{} n={n}, f64", ty.name()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SIMD kernels (wasm32 + simd128 only)

/// The SIMD f16 conversion (the F16 weights', from memory, and the legacy scales', from
/// sign-extended lanes) gives `f16_to_f32`'s bits for every finite f16, subnormals, zeros and
/// negative values included, with the constants seen or opaque to the optimizers.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn simd_f16_conversions_are_exact() {
    use core::arch::wasm32::*;
    use simd128::F16Bits;
    let lanes = |v: v128| -> [u32; 4] {
        [
            u32x4_extract_lane::<0>(v),
            u32x4_extract_lane::<1>(v),
            u32x4_extract_lane::<2>(v),
            u32x4_extract_lane::<3>(v),
        ]
    };
    let finite: Vec<u16> = (0..=u16::MAX)
        .filter(|&h| super::half::f16_is_finite(h))
        .collect();
    assert_eq!(finite.len(), 65536 - 2 * 1024);
    for h in finite.chunks_exact(8) {
        let want: Vec<u32> = h.iter().map(|&h| f16_to_f32(h).to_bits()).collect();
        let v = u16x8(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
        for k in [F16Bits::CONST, F16Bits::opaque()] {
            // SAFETY: `h` holds 8 u16, 16 bytes.
            let (low, high) = unsafe { simd128::f16x8_finite_to_f32(h.as_ptr().cast(), &k) };
            assert_eq!([lanes(low), lanes(high)].concat(), want, "{h:#06x?}");
            let sext = [
                lanes(simd128::f16_sext_finite_to_f32(
                    i32x4_extend_low_i16x8(v),
                    &k,
                )),
                lanes(simd128::f16_sext_finite_to_f32(
                    i32x4_extend_high_i16x8(v),
                    &k,
                )),
            ];
            assert_eq!(sext.concat(), want, "{h:#06x?}");
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn simd_matches_scalar_reference() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut buf = ActivationBuf::new();
    let (n_rows, n_vecs) = (5, 6);
    for (ty, kind, n, rb) in dot_cases() {
        let w = random_matrix(ty, n_rows, n, &mut rng);
        let xs: Vec<f32> = (0..n_vecs)
            .flat_map(|_| random_activation(n, &mut rng))
            .collect();
        quantize_activations(ty, &xs, n, &mut buf).unwrap();
        let mut y = vec![0.0f32; n_vecs * n_rows];
        matmul(ty, &w, n, &buf, 0..n_rows, &mut y);
        for v in 0..n_vecs {
            let row = buf.row(v);
            for (r, w_row) in w.chunks_exact(rb).enumerate() {
                let reference = scalar_dot(ty, w_row, &row);
                let (_, magnitude, _) = f64_dot(ty, w_row, &row, kind, n);
                let got = y[v * n_rows + r] as f64;
                let tol = SIMD_REL_TOL * magnitude + 1e-30;
                let name = ty.name();
                let what = format_args!("{name} n={n} row {r} vec {v}, simd vs scalar");
                assert_within(got, reference, tol, what);
            }
        }
    }
}

/// The integer kernels' sums at their extremes: every quant byte all ones (4- and 5-bit
/// weights at 15 and 31, K-quant sub-block scales at their largest, Q8_0 at -1) with scales of
/// 1, times activations that are all -1 or all +1 (quants of magnitude 127): an i16 partial sum
/// that saturated or wrapped anywhere would be far off the scalar reference.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn integer_sums_do_not_overflow_at_the_extremes() {
    let mut buf = ActivationBuf::new();
    for (ty, kind, n, rb) in dot_cases() {
        if ty.block_geometry().unwrap().0 == 1 {
            continue; // float types
        }
        let n_rows = 3;
        let w = extreme_matrix(ty, n_rows, n, 0xff);
        for sign in [-1.0f32, 1.0] {
            quantize_activations(ty, &vec![sign; n], n, &mut buf).unwrap();
            let mut y = vec![0.0f32; n_rows];
            matmul(ty, &w, n, &buf, 0..n_rows, &mut y);
            let row = buf.row(0);
            for (r, w_row) in w.chunks_exact(rb).enumerate() {
                let reference = scalar_dot(ty, w_row, &row);
                let (_, magnitude, _) = f64_dot(ty, w_row, &row, kind, n);
                let what = format_args!("{} n={n} row {r} x={sign}", ty.name());
                assert_within(
                    y[r] as f64,
                    reference,
                    SIMD_REL_TOL * magnitude + 1e-30,
                    what,
                );
            }
        }
    }
}

/// The relaxed build's two ways of summing the legacy types' products (i32 dot-adds, or i16
/// sums widened once: `dot_i8::narrow_dots`) give the same bits: random rows at every test
/// width (a lone last block at 96 columns), and rows at the extremes of the i16 sums (every
/// quant byte all ones: 4- and 5-bit weights at 15 and 31; Q8_0's at -128; activations all -1
/// or all +1), one vector (`matvec`) and batches of 7 and 35 vectors (prepared rows; Q8_0's
/// tiles). Also: this engine's lowering of the i32 dot is one `dot_lowering` knows.
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
#[test]
fn narrow_and_wide_dots_agree() {
    use core::sync::atomic::Ordering;
    use simd128::{FORCE_DOTS, dot_lowering};
    assert!(
        [129_540, 65_534, -508].contains(&dot_lowering()),
        "unknown lowering of the relaxed dot: {}",
        dot_lowering()
    );
    let mut rng = Rng(99);
    let mut buf = ActivationBuf::new();
    for ty in LEGACY {
        for &n in test_widths(ty) {
            let n_rows = 5;
            let fill = if ty == GgmlType::Q8_0 { 0x80 } else { 0xff };
            let extreme = extreme_matrix(ty, n_rows, n, fill);
            let random = random_matrix(ty, n_rows, n, &mut rng);
            for n_vecs in [1, 7, 35] {
                let mut inputs: Vec<Vec<f32>> =
                    [-1.0f32, 1.0].map(|sign| vec![sign; n * n_vecs]).into();
                inputs.push(
                    (0..n_vecs)
                        .flat_map(|_| random_activation(n, &mut rng))
                        .collect(),
                );
                for (w, xs) in [&extreme, &random]
                    .into_iter()
                    .flat_map(|w| inputs.iter().map(move |xs| (w, xs)))
                {
                    quantize_activations(ty, xs, n, &mut buf).unwrap();
                    let ys = [1, 2].map(|force| {
                        FORCE_DOTS.store(force, Ordering::Relaxed);
                        let mut y = vec![0.0f32; n_vecs * n_rows];
                        match n_vecs {
                            1 => matvec(ty, w, n, &buf, 0..n_rows, &mut y),
                            _ => matmul(ty, w, n, &buf, 0..n_rows, &mut y),
                        }
                        y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                    });
                    FORCE_DOTS.store(0, Ordering::Relaxed);
                    assert_eq!(ys[0], ys[1], "{} n={n} vectors {n_vecs}", ty.name());
                }
            }
        }
    }
}

/// An `[n_rows][n]` matrix of `ty` as loaded whose quant bytes are all `fill`, with scales of 1
/// and minimums of 0.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn extreme_matrix(ty: GgmlType, n_rows: usize, n: usize, fill: u8) -> Vec<u8> {
    let (values, block_bytes) = ty.block_geometry().unwrap();
    let mut w = vec![fill; n_rows * n / values * block_bytes];
    for blk in w.chunks_exact_mut(block_bytes) {
        for (k, &at) in scale_offsets(ty).iter().enumerate() {
            let scale = if k == 0 { 1.0 } else { 0.0 };
            blk[at..at + 2].copy_from_slice(&f32_to_f16(scale).to_le_bytes());
        }
    }
    group_rows(ty, n, &mut w);
    w
}

/// The SIMD rounding of Q8_0/Q8_1 blocks gives the reference's bits: random blocks of every
/// magnitude, ties, zeros, infinities and subnormals, at even and odd block positions.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn simd_q8_0_rounding_matches_reference() {
    use super::activation::{Quant, quantize_q8_0_block_ref};
    let mut rng = Rng(7);
    let mut blocks: Vec<[f32; 32]> = (0..200)
        .map(|_| {
            let x = random_activation(32, &mut rng);
            core::array::from_fn(|i| x[i])
        })
        .collect();
    // exact ties at amax 127 (x·id = x), and the special values
    blocks.push(core::array::from_fn(|i| {
        i as f32 - 15.5 + (i == 31) as u8 as f32 * 111.0
    }));
    blocks.push([0.0; 32]);
    blocks.push(core::array::from_fn(|i| {
        if i == 3 { f32::INFINITY } else { i as f32 }
    }));
    blocks.push(core::array::from_fn(|i| {
        if i == 9 { f32::NEG_INFINITY } else { 1.0 }
    }));
    blocks.push(core::array::from_fn(|i| {
        f32::from_bits(i as u32 + 1) * if i % 2 == 0 { 1.0 } else { -1.0 }
    }));
    blocks.push(core::array::from_fn(|i| (i as f32 - 16.0) * 1e30));
    let n = 64 * blocks.len().div_ceil(2) * 2;
    let (mut got, mut want) = (vec![0 as Quant; n], vec![0 as Quant; n]);
    for (b, x) in blocks.iter().enumerate() {
        let (mut bs_got, mut bs_want) = ([0i16; 2], [0i16; 2]);
        let r_got = super::simd128::quantize_q8_0_block(x, &mut got, b, &mut bs_got);
        let r_want = quantize_q8_0_block_ref(x, &mut want, b, &mut bs_want);
        assert_eq!(
            (r_got.0.to_bits(), r_got.1.to_bits(), bs_got),
            (r_want.0.to_bits(), r_want.1.to_bits(), bs_want),
            "block {b}: {x:?}"
        );
    }
    assert_eq!(got, want);
}

/// `touch_page_ahead` over a matrix's rows reads the first lines of every page that starts
/// from `PAGE_AHEAD` past the first row to `PAGE_AHEAD` past the last, once each, as long as
/// those lines lie in the matrix, and nothing else: rows narrower and wider than a page,
/// matrices that start and end anywhere in a page.
#[test]
fn each_page_ahead_is_touched_once() {
    // each page's touched lines hold a 1, every other byte 0
    let mut backing = vec![0u8; 12 * PAGE];
    let start = backing.as_ptr() as usize;
    for (i, b) in backing.iter_mut().enumerate() {
        *b = (((start + i) % PAGE) < LINE * PAGE_TOUCHES && (start + i).is_multiple_of(LINE)) as u8;
    }
    for rb in [18, 360, 960, PAGE + 34, 9000] {
        for skip in [0, 1, 63, PAGE / 2, PAGE - 1] {
            for rows in 0..=(backing.len() - skip) / rb {
                let w = &backing[skip..][..rows * rb];
                let base = w.as_ptr() as usize;
                let read: u32 = (0..rows).map(|r| touch_page_ahead(w, r * rb, rb)).sum();
                let pages = (0..w.len())
                    .filter(|&i| (base + i).is_multiple_of(PAGE))
                    .filter(|&i| (PAGE_AHEAD..PAGE_AHEAD + rows * rb).contains(&i))
                    .filter(|&i| i + LINE * (PAGE_TOUCHES - 1) < w.len())
                    .count();
                assert_eq!(
                    read as usize,
                    PAGE_TOUCHES * pages,
                    "rows of {rb} bytes, {skip} bytes in, {rows} rows"
                );
            }
        }
    }
}

/// Every product of a batch equals the single-vector product bit for bit: per vector the
/// kernels do the same operations in the same order whatever the tile size (batches of 2, 3, 6
/// and 7 vectors end in tiles padded to 4; Q4_0/Q4_1/Q5_0/Q5_1 batches, SIMD128's Q8_0 and the
/// relaxed build's K-quants go through prepared rows; F16 rows converted once per batch of up
/// to 32 vectors, two rows at a time with a lone last one (7 rows), with a tail of 4 columns
/// past the groups of 8). Also rows longer than a run of prepared blocks (256 blocks of a row
/// at a time, each vector's sums carried between runs): 261 blocks end in a group of four and a lone
/// block, 514 in three runs, the last a pair; the relaxed build's K-quant rows go in runs of
/// 32 super-blocks: 33 end in a run of one, 65 in three runs.
#[test]
fn matmul_equals_matvec() {
    let mut rng = Rng(42);
    let mut batch = ActivationBuf::new();
    let mut single = ActivationBuf::new();
    let short = SUPPORTED.iter().flat_map(|&ty| {
        let n = match ty.block_geometry().unwrap().0 {
            256 => 512,
            1 => 100,
            _ => 96,
        };
        [2, 3, 4, 6, 7, 35].map(|n_vecs| (ty, n, n_vecs))
    });
    let long = LEGACY
        .into_iter()
        .flat_map(|ty| [(261 * 32, 2), (261 * 32, 5), (514 * 32, 6)].map(|(n, v)| (ty, n, v)));
    let long_k = [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K]
        .into_iter()
        .flat_map(|ty| [(33 * 256, 3), (65 * 256, 6)].map(|(n, v)| (ty, n, v)));
    for (ty, n, n_vecs) in short.chain(long).chain(long_k) {
        let n_rows = 9;
        let w = random_matrix(ty, n_rows, n, &mut rng);
        let xs: Vec<f32> = (0..n_vecs)
            .flat_map(|_| random_activation(n, &mut rng))
            .collect();
        quantize_activations(ty, &xs, n, &mut batch).unwrap();
        let mut y = vec![0.0f32; n_vecs * 7];
        matmul(ty, &w, n, &batch, 2..9, &mut y);
        for v in 0..n_vecs {
            quantize_activation(ty, &xs[v * n..(v + 1) * n], &mut single).unwrap();
            let mut y1 = [0.0f32; 7];
            matvec(ty, &w, n, &single, 2..9, &mut y1);
            assert_eq!(
                &y[v * 7..(v + 1) * 7],
                &y1,
                "{} n={n} vector {v} of {n_vecs}",
                ty.name()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Speed

/// Prints the speed of `matvec` and `matmul` for every type on SmolLM2-135M's FFN shapes, as
/// GB/s of weight bytes streamed and GMAC/s (multiply-adds). `576x1536` is 576 rows of 1536
/// columns (ffn_down), `1536x576` the other way (ffn_up/gate); K-quants need whole 256-blocks
/// per row, so their second shape is 1536x768. `matmul` multiplies 16 vectors (prompt prefill).
/// The three cases alternate for 40 rounds and the best round counts: the machine may be
/// shared. Single thread. Run under wasm with SIMD (`--no-liftoff` compiles everything with
/// V8's optimizing tier first):
///
/// ```text
/// CARGO_TARGET_DIR=target/wasi-quant cargo test -p wasmind --lib --target wasm32-wasip1 \
///     --release --no-run
/// node --no-liftoff --no-warnings host-tests/wasi-run.mjs target/wasi-quant/wasm32-wasip1/release/deps/wasmind-*.wasm \
///     quant::tests::bench_matvec --ignored --nocapture
/// ```
///
/// (or `cargo test ... --release quant::tests::bench -- --ignored --nocapture`, which lets V8
/// tier up on its own during the warm-up).
#[test]
#[ignore]
fn bench_matvec() {
    use std::time::Instant;
    let mut rng = Rng(7);
    let simd = cfg!(all(target_arch = "wasm32", target_feature = "simd128"));
    println!(
        "quant bench ({}, one thread): weight GB/s (GMAC/s), best of 40 rounds",
        if simd { "simd128" } else { "scalar" }
    );
    println!(
        "{:<6} {:>20} {:>20} {:>22}",
        "type", "matvec 576x1536", "matvec 1536x576", "matmul x16 576x1536"
    );
    for ty in SUPPORTED {
        let k_quant = ty.block_geometry().unwrap().0 == 256;
        let cases = [
            (576, 1536, 1),
            (1536, if k_quant { 768 } else { 576 }, 1),
            (576, 1536, 16),
        ];
        let mut data: Vec<(Vec<u8>, ActivationBuf, Vec<f32>)> = cases
            .iter()
            .map(|&(n_rows, n_cols, n_vecs)| {
                // Scales of real models' size, none subnormal (SmolLM2-135M's Q4_1 file has
                // none): x86 multiplies an f32 subnormal (the f16 conversion's intermediate)
                // through a microcode assist, which halved the legacy types' figures here.
                let w = random_matrix_with(ty, n_rows, n_cols, &mut rng, 0.02);
                let xs: Vec<f32> = (0..n_vecs)
                    .flat_map(|_| random_activation(n_cols, &mut rng))
                    .collect();
                let mut buf = ActivationBuf::new();
                quantize_activations(ty, &xs, n_cols, &mut buf).unwrap();
                (w, buf, vec![0.0f32; n_rows * n_vecs])
            })
            .collect();
        let mut best = [f64::INFINITY; 3];
        for round in 0..44 {
            for (case, &(n_rows, n_cols, n_vecs)) in cases.iter().enumerate() {
                let (w, buf, y) = &mut data[case];
                let reps = if n_vecs == 1 { 20 } else { 2 };
                let start = Instant::now();
                for _ in 0..reps {
                    if n_vecs == 1 {
                        matvec(ty, w, n_cols, buf, 0..n_rows, y)
                    } else {
                        matmul(ty, w, n_cols, buf, 0..n_rows, y)
                    }
                }
                if round >= 4 {
                    best[case] = best[case].min(start.elapsed().as_secs_f64() / reps as f64);
                }
            }
        }
        let mut line = alloc::format!("{:<6}", ty.name());
        for (case, &(n_rows, n_cols, n_vecs)) in cases.iter().enumerate() {
            let gbs = data[case].0.len() as f64 / best[case] / 1e9;
            let gmacs = (n_rows * n_cols * n_vecs) as f64 / best[case] / 1e9;
            line += &alloc::format!(" {:>11.2} ({:>6.2})", gbs, gmacs);
        }
        println!("{line}");
    }
}

/// The SIMD f16 rounding of F16 activations gives `round_to_f16`'s bits: every f32 pattern
/// 0x1000 apart (which lands on every midpoint between two normal f16 values) and its
/// neighbours, the midpoints between subnormals and theirs, both signs, infinities and NaNs.
#[test]
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn f16_rounding_simd_matches_scalar() {
    use super::activation::round_slice_to_f16_ref;
    let mut xs: Vec<f32> = Vec::new();
    for top in 0..(1u32 << 20) {
        let b = top << 12;
        xs.extend([b, b.wrapping_sub(1), b | 1].map(f32::from_bits));
    }
    for k in 0..2048u32 {
        let mid = (k as f32 + 0.5) * (1.0 / 16_777_216.0);
        let b = mid.to_bits();
        xs.extend([b - 1, b, b + 1, b | 0x8000_0000].map(f32::from_bits));
    }
    // Chunks of 4099 values: each ends in a tail of 3 that the scalar code rounds.
    for chunk in xs.chunks(4096 + 3) {
        let mut got = vec![0.0f32; chunk.len()];
        let mut want = vec![0.0f32; chunk.len()];
        super::simd128::round_slice_to_f16(&mut got, chunk);
        round_slice_to_f16_ref(&mut want, chunk);
        for ((x, g), w) in chunk.iter().zip(&got).zip(&want) {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "round_to_f16({:#010x})",
                x.to_bits()
            );
        }
    }
}
