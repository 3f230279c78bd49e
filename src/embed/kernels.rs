//! The pooling kernels: `acc += w × row` for each row type, and the sum of squares for the
//! L2 norm. Each has a scalar reference (`*_ref`, used on the host, where the compiler
//! vectorizes it) and a SIMD128 version for wasm; tests check them against each other.
//!
//! Row types: f32 (`&[f32]`) and i8 (`&[i8]`). The `_f32` and `_i8` kernels (and their 1- and
//! 4-row forms) repeat one shape on purpose: one specialisation per row type and width, so each
//! loop loads its type directly. F16 tables are converted to f32 at load with
//! [`crate::quant::f16_to_f32`] (exact): measured in wasm (Node 20), pooling converted rows beat converting
//! each f16 row while pooling by 1.4× on the corpus (94k vs 67k texts/s), for twice the memory.

/// `acc[i] += w * row[i]`. Shapes: acc (dim,), row (dim,).
#[inline]
pub fn add_f32(acc: &mut [f32], row: &[f32], w: f32) {
    debug_assert_eq!(acc.len(), row.len());
    simd128_or!(simd128::add_f32(acc, row, w), add_f32_ref(acc, row, w))
}

pub fn add_f32_ref(acc: &mut [f32], row: &[f32], w: f32) {
    for (a, &x) in acc.iter_mut().zip(row) {
        *a += w * x;
    }
}

/// Four rows at once: `acc[i] += (w0·r0[i] + w1·r1[i]) + (w2·r2[i] + w3·r3[i])`. Reading four
/// rows side by side keeps four memory streams in flight (rows of a big table are cache
/// misses) and touches `acc` once per four rows. Shapes: acc (dim,), each row (dim,).
#[inline]
pub fn add4_f32(acc: &mut [f32], rows: [&[f32]; 4], w: [f32; 4]) {
    simd128_or!(simd128::add4_f32(acc, rows, w), add4_f32_ref(acc, rows, w))
}

pub fn add4_f32_ref(acc: &mut [f32], rows: [&[f32]; 4], w: [f32; 4]) {
    let [r0, r1, r2, r3] = rows;
    let n = acc
        .len()
        .min(r0.len())
        .min(r1.len())
        .min(r2.len())
        .min(r3.len());
    for i in 0..n {
        acc[i] += (w[0] * r0[i] + w[1] * r1[i]) + (w[2] * r2[i] + w[3] * r3[i]);
    }
}

/// Four i8 rows at once, as [`add4_f32`]. Shapes: acc (dim,), each row (dim,).
#[inline]
pub fn add4_i8(acc: &mut [f32], rows: [&[i8]; 4], w: [f32; 4]) {
    simd128_or!(simd128::add4_i8(acc, rows, w), add4_i8_ref(acc, rows, w))
}

pub fn add4_i8_ref(acc: &mut [f32], rows: [&[i8]; 4], w: [f32; 4]) {
    let [r0, r1, r2, r3] = rows;
    let n = acc
        .len()
        .min(r0.len())
        .min(r1.len())
        .min(r2.len())
        .min(r3.len());
    for i in 0..n {
        let x = |r: &[i8], k: usize| w[k] * r[i] as f32;
        acc[i] += (x(r0, 0) + x(r1, 1)) + (x(r2, 2) + x(r3, 3));
    }
}

/// `acc[i] += w * row[i]` over i8 values. Shapes: acc (dim,), row (dim,).
#[inline]
pub fn add_i8(acc: &mut [f32], row: &[i8], w: f32) {
    debug_assert_eq!(acc.len(), row.len());
    simd128_or!(simd128::add_i8(acc, row, w), add_i8_ref(acc, row, w))
}

pub fn add_i8_ref(acc: &mut [f32], row: &[i8], w: f32) {
    for (a, &x) in acc.iter_mut().zip(row) {
        *a += w * x as f32;
    }
}

/// `x[i] *= s`; then, if every result is finite (no NaN, no infinity), their sum of squares
/// as [`sum_squares`] gives it, else `None`. Shape: x (dim,). With `0 < s <= 1` (a mean's
/// 1/n) a result is finite exactly when its input was. One pass instead of two.
#[inline]
pub fn scale_sum_squares(x: &mut [f32], s: f32) -> Option<f32> {
    simd128_or!(
        simd128::scale_sum_squares(x, s),
        scale_sum_squares_ref(x, s)
    )
}

pub fn scale_sum_squares_ref(x: &mut [f32], s: f32) -> Option<f32> {
    // No early exit: a whole pass of `max`, which the compiler can vectorize.
    let mut max_abs_bits = 0u32;
    for v in x.iter_mut() {
        *v *= s;
        max_abs_bits = max_abs_bits.max(v.to_bits() & 0x7FFF_FFFF);
    }
    (max_abs_bits < f32::INFINITY.to_bits()).then(|| sum_squares_ref(x))
}

/// Σ x², accumulated in f32 over 8 interleaved partial sums (the order SIMD uses).
#[inline]
pub fn sum_squares(x: &[f32]) -> f32 {
    simd128_or!(simd128::sum_squares(x), sum_squares_ref(x))
}

pub fn sum_squares_ref(x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v * v;
        }
    }
    for (l, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *l += v * v;
    }
    lanes.iter().sum()
}

// The f32 and i8 kernels, in their 1- and 4-row forms, repeat one shape on purpose (one
// specialisation per row type and width: see the module doc).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use core::arch::wasm32::*;

    pub fn add_f32(acc: &mut [f32], row: &[f32], w: f32) {
        let n = acc.len().min(row.len());
        let body = n / 4 * 4;
        let wv = f32x4_splat(w);
        // SAFETY: every access is at `i..i + 4` with `i + 4 <= body <= n`, inside both slices;
        // wasm loads and stores need no alignment.
        unsafe {
            let a = acc.as_mut_ptr();
            let r = row.as_ptr();
            let mut i = 0;
            while i < body {
                let s = f32x4_add(
                    v128_load(a.add(i) as *const v128),
                    f32x4_mul(wv, v128_load(r.add(i) as *const v128)),
                );
                v128_store(a.add(i) as *mut v128, s);
                i += 4;
            }
        }
        super::add_f32_ref(&mut acc[body..n], &row[body..n], w);
    }

    pub fn add4_f32(acc: &mut [f32], rows: [&[f32]; 4], w: [f32; 4]) {
        let [r0, r1, r2, r3] = rows;
        let n = acc
            .len()
            .min(r0.len())
            .min(r1.len())
            .min(r2.len())
            .min(r3.len());
        let body = n / 4 * 4;
        let wv = [
            f32x4_splat(w[0]),
            f32x4_splat(w[1]),
            f32x4_splat(w[2]),
            f32x4_splat(w[3]),
        ];
        // SAFETY: every access is at `i..i + 4` with `i + 4 <= body <= n`, inside all five
        // slices; wasm loads and stores need no alignment.
        unsafe {
            let a = acc.as_mut_ptr();
            let p = [r0.as_ptr(), r1.as_ptr(), r2.as_ptr(), r3.as_ptr()];
            let step = |i: usize| {
                let x = |k: usize| f32x4_mul(wv[k], v128_load(p[k].add(i) as *const v128));
                let s = f32x4_add(f32x4_add(x(0), x(1)), f32x4_add(x(2), x(3)));
                v128_store(
                    a.add(i) as *mut v128,
                    f32x4_add(v128_load(a.add(i) as *const v128), s),
                );
            };
            // Two steps per trip: half the loop overhead, twice the loads in flight.
            let mut i = 0;
            while i + 8 <= body {
                step(i);
                step(i + 4);
                i += 8;
            }
            if i < body {
                step(i);
            }
        }
        let tail = [&r0[body..n], &r1[body..n], &r2[body..n], &r3[body..n]];
        super::add4_f32_ref(&mut acc[body..n], tail, w);
    }

    /// Eight i8 at `p` (as the low half of a v128) to two f32x4.
    #[inline(always)]
    unsafe fn i8x8_to_f32(p: *const i8) -> (v128, v128) {
        // SAFETY: the caller guarantees 8 readable bytes at `p`.
        let q = unsafe { v128_load64_zero(p as *const u64) };
        let h = i16x8_extend_low_i8x16(q);
        (
            f32x4_convert_i32x4(i32x4_extend_low_i16x8(h)),
            f32x4_convert_i32x4(i32x4_extend_high_i16x8(h)),
        )
    }

    pub fn add4_i8(acc: &mut [f32], rows: [&[i8]; 4], w: [f32; 4]) {
        let [r0, r1, r2, r3] = rows;
        let n = acc
            .len()
            .min(r0.len())
            .min(r1.len())
            .min(r2.len())
            .min(r3.len());
        let body = n / 8 * 8;
        let wv = [
            f32x4_splat(w[0]),
            f32x4_splat(w[1]),
            f32x4_splat(w[2]),
            f32x4_splat(w[3]),
        ];
        // SAFETY: 8 i8 are read from each row at `i..i + 8` and 8 f32 of `acc` at `i..i + 8`,
        // with `i + 8 <= body <= n`; no alignment is needed.
        unsafe {
            let a = acc.as_mut_ptr();
            let p = [r0.as_ptr(), r1.as_ptr(), r2.as_ptr(), r3.as_ptr()];
            let mut i = 0;
            while i < body {
                let v = [
                    i8x8_to_f32(p[0].add(i)),
                    i8x8_to_f32(p[1].add(i)),
                    i8x8_to_f32(p[2].add(i)),
                    i8x8_to_f32(p[3].add(i)),
                ];
                let x = |k: usize, hi: bool| f32x4_mul(wv[k], if hi { v[k].1 } else { v[k].0 });
                for (half, hi) in [(0, false), (4, true)] {
                    let s = f32x4_add(f32x4_add(x(0, hi), x(1, hi)), f32x4_add(x(2, hi), x(3, hi)));
                    let at = a.add(i + half);
                    v128_store(at as *mut v128, f32x4_add(v128_load(at as *const v128), s));
                }
                i += 8;
            }
        }
        let tail = [&r0[body..n], &r1[body..n], &r2[body..n], &r3[body..n]];
        super::add4_i8_ref(&mut acc[body..n], tail, w);
    }

    pub fn add_i8(acc: &mut [f32], row: &[i8], w: f32) {
        let n = acc.len().min(row.len());
        let body = n / 16 * 16;
        let wv = f32x4_splat(w);
        // SAFETY: 16 i8 are read at `i..i + 16` and 16 f32 written at `i..i + 16`, with
        // `i + 16 <= body <= n`; no alignment is needed.
        unsafe {
            let a = acc.as_mut_ptr();
            let r = row.as_ptr();
            let mut i = 0;
            while i < body {
                let q = v128_load(r.add(i) as *const v128);
                let lo = i16x8_extend_low_i8x16(q);
                let hi = i16x8_extend_high_i8x16(q);
                let parts = [
                    i32x4_extend_low_i16x8(lo),
                    i32x4_extend_high_i16x8(lo),
                    i32x4_extend_low_i16x8(hi),
                    i32x4_extend_high_i16x8(hi),
                ];
                for (k, p) in parts.into_iter().enumerate() {
                    let at = a.add(i + 4 * k) as *mut v128;
                    let s = f32x4_add(v128_load(at), f32x4_mul(wv, f32x4_convert_i32x4(p)));
                    v128_store(at, s);
                }
                i += 16;
            }
        }
        super::add_i8_ref(&mut acc[body..n], &row[body..n], w);
    }

    /// The 8 partial sums held in two f32x4, lanes of `s0` first.
    #[inline(always)]
    fn lanes8(s0: v128, s1: v128) -> [f32; 8] {
        [
            f32x4_extract_lane::<0>(s0),
            f32x4_extract_lane::<1>(s0),
            f32x4_extract_lane::<2>(s0),
            f32x4_extract_lane::<3>(s0),
            f32x4_extract_lane::<0>(s1),
            f32x4_extract_lane::<1>(s1),
            f32x4_extract_lane::<2>(s1),
            f32x4_extract_lane::<3>(s1),
        ]
    }

    pub fn scale_sum_squares(x: &mut [f32], s: f32) -> Option<f32> {
        let body = x.len() / 8 * 8;
        let sv = f32x4_splat(s);
        let abs_mask = u32x4_splat(0x7FFF_FFFF);
        let mut max = u32x4_splat(0);
        let (mut s0, mut s1) = (f32x4_splat(0.0), f32x4_splat(0.0));
        // SAFETY: reads and writes at `i..i + 8` with `i + 8 <= body <= x.len()`; no alignment
        // is needed.
        unsafe {
            let p = x.as_mut_ptr();
            let mut i = 0;
            while i < body {
                let a = f32x4_mul(v128_load(p.add(i) as *const v128), sv);
                let b = f32x4_mul(v128_load(p.add(i + 4) as *const v128), sv);
                v128_store(p.add(i) as *mut v128, a);
                v128_store(p.add(i + 4) as *mut v128, b);
                max = u32x4_max(max, u32x4_max(v128_and(a, abs_mask), v128_and(b, abs_mask)));
                s0 = f32x4_add(s0, f32x4_mul(a, a));
                s1 = f32x4_add(s1, f32x4_mul(b, b));
                i += 8;
            }
        }
        let mut finite = u32x4_all_true(u32x4_lt(max, u32x4_splat(f32::INFINITY.to_bits())));
        let mut lanes = lanes8(s0, s1);
        for (l, v) in lanes.iter_mut().zip(&mut x[body..]) {
            *v *= s;
            finite &= v.is_finite();
            *l += *v * *v;
        }
        finite.then(|| lanes.iter().sum())
    }

    pub fn sum_squares(x: &[f32]) -> f32 {
        let body = x.len() / 8 * 8;
        let (mut s0, mut s1) = (f32x4_splat(0.0), f32x4_splat(0.0));
        // SAFETY: reads at `i..i + 8` with `i + 8 <= body <= x.len()`.
        unsafe {
            let p = x.as_ptr();
            let mut i = 0;
            while i < body {
                let a = v128_load(p.add(i) as *const v128);
                let b = v128_load(p.add(i + 4) as *const v128);
                s0 = f32x4_add(s0, f32x4_mul(a, a));
                s1 = f32x4_add(s1, f32x4_mul(b, b));
                i += 8;
            }
        }
        let mut lanes = lanes8(s0, s1);
        for (l, &v) in lanes.iter_mut().zip(&x[body..]) {
            *l += v * v;
        }
        lanes.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// A deterministic pseudo-random stream (xorshift).
    fn stream(seed: u32) -> impl FnMut() -> u32 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        }
    }

    #[test]
    fn kernels_match_their_references() {
        let mut next = stream(0x1234_5678);
        for dim in [1usize, 3, 4, 7, 8, 15, 16, 17, 33, 128, 256, 300] {
            let w = (next() % 1000) as f32 / 250.0 - 2.0;
            let start: Vec<f32> = (0..dim)
                .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let f: Vec<f32> = (0..dim)
                .map(|_| f32::from_bits(next() % 0x3F80_0000))
                .collect();
            let q: Vec<i8> = (0..dim).map(|_| next() as i8).collect();

            let (mut a, mut b) = (start.clone(), start.clone());
            add_f32(&mut a, &f, w);
            add_f32_ref(&mut b, &f, w);
            assert_eq!(a, b, "f32 dim {dim}");
            let g: Vec<f32> = (0..4 * dim)
                .map(|_| (next() % 2001) as f32 / 100.0 - 10.0)
                .collect();
            let rows = [
                &g[..dim],
                &g[dim..2 * dim],
                &g[2 * dim..3 * dim],
                &g[3 * dim..],
            ];
            let ws = [w, 0.5, -1.25, 3.0];
            let (mut a, mut b) = (start.clone(), start.clone());
            add4_f32(&mut a, rows, ws);
            add4_f32_ref(&mut b, rows, ws);
            assert_eq!(a, b, "f32 x4 dim {dim}");
            let gq: Vec<i8> = (0..4 * dim).map(|_| next() as i8).collect();
            let rows = [
                &gq[..dim],
                &gq[dim..2 * dim],
                &gq[2 * dim..3 * dim],
                &gq[3 * dim..],
            ];
            let (mut a, mut b) = (start.clone(), start.clone());
            add4_i8(&mut a, rows, ws);
            add4_i8_ref(&mut b, rows, ws);
            assert_eq!(a, b, "i8 x4 dim {dim}");
            let (mut a, mut b) = (start.clone(), start.clone());
            add_i8(&mut a, &q, w);
            add_i8_ref(&mut b, &q, w);
            assert_eq!(a, b, "i8 dim {dim}");
            let (mut a, mut b) = (g.clone(), g.clone());
            let s = 1.0 / (1 + dim % 5) as f32;
            let (got, want) = (
                scale_sum_squares(&mut a, s),
                scale_sum_squares_ref(&mut b, s),
            );
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "dim {dim}");
            assert!(want.is_some());
            a[dim / 2] = [f32::NAN, f32::INFINITY, -f32::INFINITY, 1.0][dim % 4];
            b[dim / 2] = a[dim / 2];
            let (got, want) = (
                scale_sum_squares(&mut a, s),
                scale_sum_squares_ref(&mut b, s),
            );
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "dim {dim}");
            assert_eq!(want.is_some(), dim % 4 == 3);
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "scale dim {dim}"
            );
            assert_eq!(
                sum_squares(&start),
                sum_squares_ref(&start),
                "sum dim {dim}"
            );
        }
    }
}

#[cfg(test)]
mod bench {
    use super::*;
    use alloc::vec;

    use crate::testutil::cpu_seconds as cpu;

    /// Kernel speed on one cache-resident row (`--ignored bench_kernels --nocapture`).
    #[test]
    #[ignore]
    fn bench_kernels() {
        let dim = 256;
        let f = vec![0.5f32; dim];
        let q = vec![3i8; dim];
        let mut acc = vec![0f32; dim];
        let n = 2_000_000;
        let t = cpu();
        for _ in 0..n {
            add_f32(&mut acc, core::hint::black_box(&f), 0.5);
        }
        std::eprintln!(
            "add_f32 dim {dim}: {:.1} ns/row",
            (cpu() - t) * 1e9 / n as f64
        );
        let t = cpu();
        for _ in 0..n {
            add_i8(&mut acc, core::hint::black_box(&q), 0.5);
        }
        std::eprintln!(
            "add_i8 dim {dim}: {:.1} ns/row",
            (cpu() - t) * 1e9 / n as f64
        );
        let t = cpu();
        let mut s = 0.0;
        for _ in 0..n {
            s += sum_squares(core::hint::black_box(&acc));
        }
        std::eprintln!(
            "sum_squares dim {dim}: {:.1} ns ({s})",
            (cpu() - t) * 1e9 / n as f64
        );
    }
}
