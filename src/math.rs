//! Hand-written elementary functions: WebAssembly has no `exp`, `log`, `sin` or `cos`, and the
//! module imports nothing, so these are ours.
//!
//! - f64 [`exp`], [`log`], [`sin`], [`cos`] (and [`sin_cos`]): used at model load (the RoPE
//!   table, frequency powers). Range reduction followed by a polynomial; within 1 ulp of `libm`
//!   over the tested ranges (see the tests for the measured figures).
//!   - `exp`: x = k ln2 + r, |r| <= ln2/2, with ln2 split in a 42-bit head and a tail so that
//!     k ln2_hi is exact; exp(r) by its Taylor series to r^13; 2^k written into the exponent
//!     bits, in two steps where 2^k itself is not a normal double (overflow edge, gradual
//!     underflow), so the result is rounded once.
//!   - `log`: x = 2^k m with m in [sqrt(2)/2, sqrt(2)), f = m - 1 (exact), s = f / (2 + f),
//!     log(1 + f) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R(s^2))); subnormal inputs are scaled
//!     by 2^54 first.
//!   - `sin`/`cos`: x = q pi/2 + (head + tail). For |x| < 2^20 Cody–Waite: pi/2 in four parts
//!     (33 + 33 + 33 + 53 bits); q times each of the first three is exact, and the differences
//!     are carried as exact two-sums, so even arguments next to a multiple of pi/2 (where up
//!     to ~80 leading bits cancel) keep full relative precision. Above 2^20 Payne–Hanek: x
//!     times a 192-bit window of the bits of 2/pi, in integers. Taylor kernels on |h| <= pi/4
//!     take the (head, tail) pair.
//! - f32 [`expf`] and its 4-lane forms: the softmax and SiLU hot loop. One scalar lane
//!   function [`expf`] is the reference ([`exp4_ref`]); on wasm32 with SIMD128 the
//!   `simd128` module runs exactly the same operations on a `v128`, so both give the same bits.
//!   The lane code has no branches: the input is clamped (NaN passes through), the polynomial
//!   is a degree-6 fit of e^r, and 2^n is applied as two factors so the result is rounded once
//!   even when it overflows or is subnormal.
//! - [`sqrtf`]: the `f32.sqrt` instruction in wasm, libm's elsewhere (both IEEE's correctly
//!   rounded square root, so the same bits).
//! - Slice helpers for the model: [`exp_in_place`], [`silu_in_place`], [`softmax_in_place`],
//!   each with a `_ref` scalar twin that uses the same lane layout (softmax sums in 4 lane
//!   accumulators in both), so SIMD and scalar results are identical bit for bit. The SIMD
//!   path takes 4 floats at a time and handles the tail through a small stack buffer: it never
//!   reads or writes past the slice.
//!
//! The constants are derived by `src/math/gen_constants.py` (mpmath); each is written as its
//! bit pattern with the value in a comment. Polynomial coefficients of the f64 functions are the
//! Taylor coefficients themselves (1/n!, 2/(2n+1)), written as quotients that the compiler
//! rounds correctly.

/// IEEE square root, correctly rounded. libm's `sqrtf` is a software routine on wasm32 (its
/// intrinsics, like `f32.sqrt` in `core::arch`, need nightly features), so wasm takes lane 0
/// of the stable `f32x4.sqrt`, which is the same correctly rounded operation.
#[inline]
pub fn sqrtf(x: f32) -> f32 {
    simd128_or!(
        {
            use core::arch::wasm32::{f32x4_extract_lane, f32x4_splat, f32x4_sqrt};
            f32x4_extract_lane::<0>(f32x4_sqrt(f32x4_splat(x)))
        },
        libm::sqrtf(x)
    )
}

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// 1.5 * 2^52: for |v| < 2^51, `(v + ROUND_MAGIC) - ROUND_MAGIC` is v rounded to the nearest
/// integer (ties to even), without a float-to-int instruction or a library `round`.
const ROUND_MAGIC: f64 = 6_755_399_441_055_744.0;

#[inline(always)]
fn round_to_integer(v: f64) -> f64 {
    (v + ROUND_MAGIC) - ROUND_MAGIC
}

/// 2^n for n in [-1022, 1023], built in the exponent bits.
#[inline(always)]
fn pow2(n: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&n));
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// s + e == a + b exactly (Knuth's TwoSum; no condition on the magnitudes).
#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let b_virtual = s - a;
    let a_virtual = s - b_virtual;
    (s, (a - a_virtual) + (b - b_virtual))
}

/// p + e == a * b exactly (Dekker's product with Veltkamp splitting; no FMA in wasm).
#[inline(always)]
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    #[inline(always)]
    fn split(a: f64) -> (f64, f64) {
        let c = 134_217_729.0 * a; // 2^27 + 1
        let hi = c - (c - a);
        (hi, a - hi)
    }
    let p = a * b;
    let (ah, al) = split(a);
    let (bh, bl) = split(b);
    (p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
}

const SIGN_MASK: u64 = 0x8000_0000_0000_0000;
const EXP_MASK: u64 = 0x7FF0_0000_0000_0000;
const FRAC_MASK: u64 = 0x000F_FFFF_FFFF_FFFF;

/// ln 2 = LN2_HI + LN2_LO; LN2_HI has 42 significant bits, so k * LN2_HI is exact for
/// |k| < 2^11 (every k that exp and log produce).
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEFA_3800); // 0.6931471805598903
const LN2_LO: f64 = f64::from_bits(0x3D2E_F357_93C7_6730); // 5.497923018708371e-14
/// 1 / ln 2, only used to pick k.
const LOG2_E: f64 = f64::from_bits(0x3FF7_1547_652B_82FE); // 1.4426950408889634

// ---------------------------------------------------------------------------------------------
// exp (f64)
// ---------------------------------------------------------------------------------------------

/// Largest x with exp(x) finite: ln(f64::MAX) rounded down. Above it exp overflows to +inf.
const EXP_OVERFLOW: f64 = f64::from_bits(0x4086_2E42_FEFA_39EF); // 709.782712893384
/// Smallest x with exp(x) > 2^-1075 (which would round to 0). Below it exp is +0.
const EXP_UNDERFLOW: f64 = f64::from_bits(0xC087_4910_D52D_3051); // -745.1332191019411

/// `sign s^i / k_i!` for `k_i = first + i step` (`s` = `alternate`, 1.0 or -1.0): the Taylor
/// coefficients of exp, sin and cos. Every k! up to 17! is exact in an f64, so each entry is
/// the one rounding of `1 / k!`, as the literal `1.0 / 6.0` would be.
const fn inverse_factorials<const N: usize>(
    first: u64,
    step: u64,
    sign: f64,
    alternate: f64,
) -> [f64; N] {
    let mut out = [0.0; N];
    let (mut k, mut factorial, mut sign) = (1, 1.0, sign);
    let mut i = 0;
    while i < N {
        let want = first + i as u64 * step;
        while k < want {
            k += 1;
            factorial *= k as f64;
        }
        out[i] = sign * (1.0 / factorial);
        sign *= alternate;
        i += 1;
    }
    out
}

/// Taylor coefficients of q(r) = (e^r - 1 - r) / r^2 = sum_{n>=2} r^(n-2) / n!, to r^13/13!.
/// On |r| <= ln2/2 the first omitted term is r^14/14! < 4.2e-18 (0.04 ulp).
const EXP_Q: [f64; 12] = inverse_factorials(2, 1, 1.0, 1.0);

/// e^x. Exact at 0 (1.0), +inf for x > 709.78..., +0 for x < -745.13..., NaN for NaN,
/// subnormal results rounded once (gradual underflow).
pub fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > EXP_OVERFLOW {
        return f64::INFINITY;
    }
    if x < EXP_UNDERFLOW {
        return 0.0;
    }
    // x = k ln2 + r, |r| <= ln2/2 (plus a rounding hair).
    let kf = round_to_integer(x * LOG2_E);
    let k = kf as i32; // |k| <= 1075
    let hi = x - kf * LN2_HI; // exact: k*LN2_HI is exact, and the difference is representable
    let lo = kf * LN2_LO;
    let r = hi - lo;
    // e^r = 1 + r + r^2 q(r), with r = hi - lo summed last to keep the tail's bits.
    let q = horner(r, &EXP_Q);
    let p = r * r * q;
    let y = 1.0 + (hi - (lo - p)); // in [0.707, 1.415]
    scale_by_pow2(y, k)
}

/// y * 2^k rounded once, for y in [0.5, 2) and k in [-1075, 1024].
#[inline(always)]
fn scale_by_pow2(y: f64, k: i32) -> f64 {
    if k > 1023 {
        // 2^1024 is not a double: two exact-or-overflowing steps.
        y * pow2(1023) * pow2(k - 1023)
    } else if k < -1021 {
        // Result may be subnormal: scale into the normal range exactly, then round once.
        y * pow2(k + 1000) * pow2(-1000)
    } else {
        y * pow2(k)
    }
}

/// c[0] + r (c[1] + r (c[2] + ...)).
#[inline(always)]
fn horner(r: f64, c: &[f64]) -> f64 {
    let mut acc = 0.0;
    for &ci in c.iter().rev() {
        acc = ci + r * acc;
    }
    acc
}

// ---------------------------------------------------------------------------------------------
// log (f64)
// ---------------------------------------------------------------------------------------------

/// Bits of sqrt(2) (1.4142135623730951): mantissas at or above it are halved so f = m - 1
/// stays in [-0.293, 0.415).
const SQRT2_BITS: u64 = 0x3FF6_A09E_667F_3BCD;
/// 2^54, to bring subnormal inputs into the normal range.
const TWO_POW_54: f64 = f64::from_bits(0x4350_0000_0000_0000);

/// Coefficients of R(z)/z, z = s^2, where 2 atanh(s) = 2s + s R and
/// R = sum_{n>=1} 2 s^(2n) / (2n + 1), to s^20. With |s| <= 0.1716 the first omitted term,
/// relative to the result, is below 6e-19.
const LOG_R: [f64; 10] = {
    let mut r = [0.0; 10];
    let mut n = 1;
    while n <= 10 {
        r[n - 1] = 2.0 / (2 * n + 1) as f64;
        n += 1;
    }
    r
};

/// Natural logarithm. log(±0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(1) = +0,
/// subnormal inputs handled.
pub fn log(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x < 0.0 {
        return f64::NAN;
    }
    if x == f64::INFINITY {
        return x;
    }
    let mut bits = x.to_bits();
    let mut k: i32 = 0;
    if bits & EXP_MASK == 0 {
        // Subnormal: x * 2^54 is exact and normal.
        bits = (x * TWO_POW_54).to_bits();
        k = -54;
    }
    // x = 2^k m, m in [1, 2)...
    k += ((bits >> 52) as i32) - 1023;
    let mut m_bits = (bits & FRAC_MASK) | 0x3FF0_0000_0000_0000;
    // ...then in [sqrt(2)/2, sqrt(2)).
    if m_bits >= SQRT2_BITS {
        m_bits -= 1 << 52; // m / 2
        k += 1;
    }
    let f = f64::from_bits(m_bits) - 1.0; // exact (Sterbenz)
    let kf = k as f64;
    // log(1 + f) = f - (hfsq - s (hfsq + R)), s = f / (2 + f), hfsq = f^2 / 2: the large
    // terms f and hfsq come straight from f; the rounding of s only touches small terms.
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * horner(z, &LOG_R);
    kf * LN2_HI + (f - (hfsq - (s * (hfsq + r) + kf * LN2_LO)))
}

// ---------------------------------------------------------------------------------------------
// sin / cos (f64): reduction by pi/2
// ---------------------------------------------------------------------------------------------

/// pi/2 = PIO2_1 + PIO2_2 + PIO2_3 + PIO2_4 (+ < 2^-150). The first three have at most 33
/// significant bits, so q * PIO2_i is exact for q < 2^20.
const PIO2_1: f64 = f64::from_bits(0x3FF9_21FB_5440_0000); // 1.5707963267341256
const PIO2_2: f64 = f64::from_bits(0x3DD0_B461_1A60_0000); // 6.077100506303966e-11
const PIO2_3: f64 = f64::from_bits(0x3BA3_198A_2E00_0000); // 2.0222662487111665e-21
const PIO2_4: f64 = f64::from_bits(0x397B_839A_2520_49C1); // 8.4784276603689e-32
/// 2/pi, only used to pick q.
const TWO_OVER_PI: f64 = f64::from_bits(0x3FE4_5F30_6DC9_C883); // 0.6366197723675814
/// pi/2 as a double-double (for Payne–Hanek).
const PIO2_HI: f64 = f64::from_bits(0x3FF9_21FB_5444_2D18); // 1.5707963267948966
const PIO2_LO: f64 = f64::from_bits(0x3C91_A626_3314_5C07); // 6.123233995736766e-17
/// pi/4: below it no reduction is needed.
const PIO4: f64 = f64::from_bits(0x3FE9_21FB_5444_2D18); // 0.7853981633974483
/// Cody–Waite up to here, Payne–Hanek above (q < 2^20 keeps q * PIO2_{1,2,3} exact).
const CODY_WAITE_LIMIT: f64 = 1_048_576.0; // 2^20

/// The bits of 2/pi after the binary point, 64 per word, most significant first
/// (1280 bits: enough for the largest double's window).
const TWO_OVER_PI_BITS: [u64; 20] = [
    0xA2F9836E4E441529,
    0xFC2757D1F534DDC0,
    0xDB6295993C439041,
    0xFE5163ABDEBBC561,
    0xB7246E3A424DD2E0,
    0x06492EEA09D1921C,
    0xFE1DEB1CB129A73E,
    0xE88235F52EBB4484,
    0xE99C7026B45F7E41,
    0x3991D639835339F4,
    0x9C845F8BBDF9283B,
    0x1FF897FFDE05980F,
    0xEF2F118B5A0A6D1F,
    0x6D367ECF27CB09B7,
    0x4F463F669E5FEA2D,
    0x7527BAC7EBE5F17B,
    0x3D0739F78A5292EA,
    0x6BFB5FB11F8D5D08,
    0x56033046FC7B6BAB,
    0xF0CFBC209AF4361D,
];

/// An angle reduced by pi/2: x = quadrant * pi/2 + (head + tail), |head| <= ~pi/4,
/// |tail| <= ulp(head) / 2. Only `quadrant mod 4` matters.
#[derive(Clone, Copy, Debug)]
struct Reduced {
    quadrant: i32,
    head: f64,
    tail: f64,
}

/// Reduces a finite x by pi/2.
#[inline]
fn reduce_pio2(x: f64) -> Reduced {
    let ax = f64::from_bits(x.to_bits() & !SIGN_MASK);
    if ax <= PIO4 {
        return Reduced {
            quadrant: 0,
            head: x,
            tail: 0.0,
        };
    }
    if ax < CODY_WAITE_LIMIT {
        return reduce_cody_waite(x);
    }
    let r = reduce_payne_hanek(ax);
    if x < 0.0 {
        Reduced {
            quadrant: -r.quadrant,
            head: -r.head,
            tail: -r.tail,
        }
    } else {
        r
    }
}

/// Cody–Waite for |x| < 2^20: r = x - q (P1 + P2 + P3 + P4) with every step exact but the
/// last, tiny product. The closest a double below 2^20 comes to a multiple of pi/2 is about
/// 2^-60, i.e. ~80 bits cancel; the four parts carry ~152 bits, so head+tail stays accurate
/// to far below an ulp of the result.
#[inline]
fn reduce_cody_waite(x: f64) -> Reduced {
    let qf = round_to_integer(x * TWO_OVER_PI);
    let a = x - qf * PIO2_1; // exact: q*P1 exact, and x is within a factor 2 of it
    let (s1, e1) = two_sum(a, -(qf * PIO2_2)); // q*P2 exact
    let (s2, e2) = two_sum(s1, -(qf * PIO2_3)); // q*P3 exact
    let rest = (e1 + e2) - qf * PIO2_4;
    let (head, tail) = two_sum(s2, rest);
    Reduced {
        quadrant: qf as i32,
        head,
        tail,
    }
}

/// 64 bits of 2/pi starting at bit `j` after the binary point (bit 0 weighs 1/2); bits
/// before the point (j < 0) are zero.
#[inline]
fn two_over_pi_window(j: i32) -> u64 {
    let word = j.div_euclid(64);
    let shift = j.rem_euclid(64) as u32;
    let get = |i: i32| -> u64 {
        if i < 0 {
            0
        } else {
            TWO_OVER_PI_BITS.get(i as usize).copied().unwrap_or(0)
        }
    };
    if shift == 0 {
        get(word)
    } else {
        (get(word) << shift) | (get(word + 1) >> (64 - shift))
    }
}

/// Payne–Hanek for finite ax >= 2^20: with ax = m 2^e (m a 53-bit integer), the bits of 2/pi
/// weighing 4 or more after multiplication by 2^e only add multiples of 4 to x (2/pi), so
/// x (2/pi) mod 4 = m * W / 2^190 mod 4, W the 192 bits of 2/pi from bit e - 2. The product
/// keeps its low 192 bits: 2 bits of quadrant and 190 of fraction (the dropped tail of 2/pi
/// is below 2^-137).
fn reduce_payne_hanek(ax: f64) -> Reduced {
    let bits = ax.to_bits();
    let m = ((bits & FRAC_MASK) | (1 << 52)) as u128;
    let e = ((bits >> 52) as i32) - 1075; // ax = m * 2^e, e >= -32
    let j0 = e - 2;
    let w0 = two_over_pi_window(j0) as u128;
    let w1 = two_over_pi_window(j0 + 64) as u128;
    let w2 = two_over_pi_window(j0 + 128) as u128;
    // (p0, p1, p2) = m * (w0, w1, w2) mod 2^192.
    let t2 = m * w2;
    let t1 = m * w1 + (t2 >> 64);
    let t0 = m * w0 + (t1 >> 64);
    let (p0, p1, p2) = (t0 as u64, t1 as u64, t2 as u64);
    let mut quadrant = (p0 >> 62) as i32;
    // The fraction in units of 2^-192, as a 192-bit two's complement number in [-1/2, 1/2).
    let mut f0 = (p0 << 2) | (p1 >> 62);
    let mut f1 = (p1 << 2) | (p2 >> 62);
    let mut f2 = p2 << 2;
    let negative = (f0 >> 63) != 0;
    if negative {
        quadrant += 1;
        // Negate: invert and add one, carrying up.
        let (n2, c2) = (!f2).overflowing_add(1);
        let (n1, c1) = (!f1).overflowing_add(c2 as u64);
        f0 = (!f0).wrapping_add(c1 as u64);
        f1 = n1;
        f2 = n2;
    }
    // Normalise the magnitude so its top bit is set.
    let hi128 = ((f0 as u128) << 64) | f1 as u128;
    if hi128 == 0 {
        // Below 2^-128: no double comes this close to a multiple of pi/2.
        return Reduced {
            quadrant: quadrant & 3,
            head: 0.0,
            tail: 0.0,
        };
    }
    let lz = hi128.leading_zeros(); // < 128
    let top = if lz == 0 {
        hi128
    } else if lz < 64 {
        (hi128 << lz) | (f2 >> (64 - lz)) as u128
    } else {
        (hi128 << lz) | ((f2 as u128) << (lz - 64))
    };
    // fraction = top * 2^-(128 + lz); head = its top 53 bits (exact), tail = the rest.
    let head_bits = (top >> 75) as u64;
    let rest = top & ((1u128 << 75) - 1);
    let lz = lz as i32;
    let frac_head = head_bits as f64 * pow2(-53 - lz);
    let frac_tail = rest as f64 * pow2(-64 - lz) * pow2(-64);
    // (head, tail) = fraction * pi/2 in double-double.
    let (p, e) = two_prod(frac_head, PIO2_HI);
    let e = e + (frac_head * PIO2_LO + frac_tail * PIO2_HI);
    let (head, tail) = two_sum(p, e);
    if negative {
        Reduced {
            quadrant,
            head: -head,
            tail: -tail,
        }
    } else {
        Reduced {
            quadrant,
            head,
            tail,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// sin / cos (f64): kernels on |h| <= pi/4
// ---------------------------------------------------------------------------------------------

/// sin h = h + h^3 S(h^2), S(z) = sum_{n>=1} (-1)^n z^(n-1) / (2n+1)!, to h^17/17!.
/// On |h| <= pi/4 the first omitted term is below 1.1e-19 relative.
const SIN_S: [f64; 8] = inverse_factorials(3, 2, -1.0, -1.0);

/// cos h = 1 - h^2/2 + h^4 C(h^2), C(z) = sum_{n>=2} (-1)^n z^(n-2) / (2n)!, to h^16/16!.
/// On |h| <= pi/4 the first omitted term is below 2.1e-18.
const COS_C: [f64; 7] = inverse_factorials(4, 2, 1.0, -1.0);

/// sin(h + t) for |h| <= ~pi/4, |t| <= ulp(h): sin h + t cos h, with cos h ~ 1 - h^2/2 (the
/// t^2 and t h^4 terms are far below an ulp).
#[inline]
fn sin_kernel(h: f64, t: f64) -> f64 {
    let z = h * h;
    let v = z * h;
    h + (v * horner(z, &SIN_S) + t * (1.0 - 0.5 * z))
}

/// cos(h + t) for |h| <= ~pi/4: cos h - t h. The rounding error of 1 - h^2/2 is recovered
/// ((1 - w) - h^2/2 is exact) and added back with the small terms.
#[inline]
fn cos_kernel(h: f64, t: f64) -> f64 {
    let z = h * h;
    let half_z = 0.5 * z;
    let w = 1.0 - half_z;
    w + (((1.0 - w) - half_z) + (z * z * horner(z, &COS_C) - h * t))
}

/// Below this |x|, sin x rounds to x and cos x to 1.
const TINY_ANGLE: f64 = f64::from_bits(0x3E40_0000_0000_0000); // 2^-27

/// Sine. sin(±0) = ±0, sin(±inf) = NaN, sin(NaN) = NaN.
pub fn sin(x: f64) -> f64 {
    if !x.is_finite() {
        return f64::NAN;
    }
    if f64::from_bits(x.to_bits() & !SIGN_MASK) < TINY_ANGLE {
        return x;
    }
    let r = reduce_pio2(x);
    match r.quadrant & 3 {
        0 => sin_kernel(r.head, r.tail),
        1 => cos_kernel(r.head, r.tail),
        2 => -sin_kernel(r.head, r.tail),
        _ => -cos_kernel(r.head, r.tail),
    }
}

/// Cosine. cos(±0) = 1, cos(±inf) = NaN, cos(NaN) = NaN.
pub fn cos(x: f64) -> f64 {
    if !x.is_finite() {
        return f64::NAN;
    }
    if f64::from_bits(x.to_bits() & !SIGN_MASK) < TINY_ANGLE {
        return 1.0;
    }
    let r = reduce_pio2(x);
    match r.quadrant & 3 {
        0 => cos_kernel(r.head, r.tail),
        1 => -sin_kernel(r.head, r.tail),
        2 => -cos_kernel(r.head, r.tail),
        _ => sin_kernel(r.head, r.tail),
    }
}

/// (sin x, cos x) with one reduction: the RoPE table's call. Same values as [`sin`], [`cos`].
pub fn sin_cos(x: f64) -> (f64, f64) {
    if !x.is_finite() {
        return (f64::NAN, f64::NAN);
    }
    if f64::from_bits(x.to_bits() & !SIGN_MASK) < TINY_ANGLE {
        return (x, 1.0);
    }
    let r = reduce_pio2(x);
    let s = sin_kernel(r.head, r.tail);
    let c = cos_kernel(r.head, r.tail);
    match r.quadrant & 3 {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

// ---------------------------------------------------------------------------------------------
// exp (f32, lane-wise): the scalar reference
// ---------------------------------------------------------------------------------------------

/// Inputs are clamped to [EXPF_LO, EXPF_HI]: e^-104 < 2^-150 rounds to 0, e^89 overflows to
/// inf, so the clamp changes no result, and it keeps n in [-150, 128].
const EXPF_LO: f32 = -104.0;
const EXPF_HI: f32 = 89.0;
/// 1.5 * 2^23: adding it rounds |v| < 2^22 to an integer, which then sits in the low
/// mantissa bits (bits - MAGIC_BITS = n).
const ROUND_MAGIC_F32: f32 = 12_582_912.0;
const ROUND_MAGIC_F32_BITS: i32 = 0x4B40_0000;
/// 1 / ln 2 (rounded), only used to pick n.
const LOG2_E_F32: f32 = f32::from_bits(0x3FB8_AA3B); // 1.442695
/// ln 2 = LN2_HI_F32 + LN2_LO_F32; the head has 16 significant bits, so n * LN2_HI_F32 is
/// exact for |n| < 2^8.
const LN2_HI_F32: f32 = f32::from_bits(0x3F31_7200); // 0.69314575
const LN2_LO_F32: f32 = f32::from_bits(0x35BF_BE8E); // 1.4286068e-6
/// e^r ~ 1 + r + r^2 (P0 + P1 r + P2 r^2 + P3 r^3 + P4 r^4) on |r| <= ln2/2: a minimax fit of
/// the relative error (gen_constants.py, Lawson's algorithm), 4.1e-9 = 2^-27.9 with these
/// f32 coefficients; the f32 evaluation adds about one rounding of the result.
const EXPF_P0: f32 = f32::from_bits(0x3EFF_FFFE); // 0.49999994
const EXPF_P1: f32 = f32::from_bits(0x3E2A_AA48); // 0.1666652
const EXPF_P2: f32 = f32::from_bits(0x3D2A_AC7C); // 0.0416684
const EXPF_P3: f32 = f32::from_bits(0x3C09_1D87); // 0.008368856
const EXPF_P4: f32 = f32::from_bits(0x3AB5_1121); // 0.0013814309

/// e^x in f32: the scalar lane function, and the reference for the SIMD kernel (which runs
/// the same operations in the same order). Within 2 ulp on [-87, 88] (measured: see
/// tests); +inf above ~88.72, subnormal results down to ~-103.97, +0 below, NaN for NaN.
/// No branches: the clamps are selects (`pmax`/`pmin` semantics, NaN passes through).
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    // f32x4.pmax(x, lo) = x < lo ? lo : x; f32x4.pmin(x, hi) = hi < x ? hi : x.
    let x = if x < EXPF_LO { EXPF_LO } else { x };
    let x = if EXPF_HI < x { EXPF_HI } else { x };
    // x = n ln2 + r.
    let t = x * LOG2_E_F32 + ROUND_MAGIC_F32;
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC_F32_BITS);
    let nf = t - ROUND_MAGIC_F32;
    let r = (x - nf * LN2_HI_F32) - nf * LN2_LO_F32;
    // e^r.
    let p = EXPF_P0 + r * (EXPF_P1 + r * (EXPF_P2 + r * (EXPF_P3 + r * EXPF_P4)));
    let y = (r * r * p + r) + 1.0;
    // 2^n = 2^n1 * 2^n2, both normal for n in [-150, 128]; y * 2^n1 is exact, the second
    // product rounds once (to inf, to a subnormal, or normally).
    let n1 = n >> 1;
    let n2 = n.wrapping_sub(n1);
    let s1 = f32::from_bits((n1.wrapping_add(127) << 23) as u32);
    let s2 = f32::from_bits((n2.wrapping_add(127) << 23) as u32);
    y * s1 * s2
}

/// tanh in f32, as `1 - 2 / (e^2x + 1)` with [`expf`]: exact limits at both ends (e^2x is 0 or
/// inf there); near 0 its error is absolute (about 1e-7), not relative.
#[inline]
pub fn tanhf(x: f32) -> f32 {
    1.0 - 2.0 / (expf(2.0 * x) + 1.0)
}

/// [`expf`] on 4 lanes: the scalar reference of the SIMD kernel.
#[inline]
pub fn exp4_ref(x: [f32; 4]) -> [f32; 4] {
    [expf(x[0]), expf(x[1]), expf(x[2]), expf(x[3])]
}

/// e^x on 4 lanes: the SIMD128 kernel where compiled in, else the scalar reference. Both give
/// the same bits.
#[inline]
pub fn exp4(x: [f32; 4]) -> [f32; 4] {
    simd128_or!(
        simd128::to_array(simd128::exp4(simd128::from_array(x))),
        exp4_ref(x)
    )
}

// ---------------------------------------------------------------------------------------------
// Slice helpers: scalar references (same lane layout as the SIMD versions)
// ---------------------------------------------------------------------------------------------

/// xs[i] = e^xs[i], scalar.
pub fn exp_in_place_ref(xs: &mut [f32]) {
    for x in xs.iter_mut() {
        *x = expf(*x);
    }
}

/// xs[i] = xs[i] * sigmoid(xs[i]) = xs[i] / (1 + e^-xs[i]), scalar.
pub fn silu_in_place_ref(xs: &mut [f32]) {
    for x in xs.iter_mut() {
        *x = *x / (1.0 + expf(-*x));
    }
}

/// Softmax over xs in place, scalar: subtract the max, exponentiate, divide by the sum.
/// The sum is kept in 4 lane accumulators (element i into lane i % 4, in order), combined as
/// (l0 + l1) + (l2 + l3): the SIMD version's order, so both give the same bits. The row must
/// hold at least one value that is not -inf (else the result is NaN); empty rows are left.
pub fn softmax_in_place_ref(xs: &mut [f32]) {
    if xs.is_empty() {
        return;
    }
    // Max with f32x4.pmax semantics (m < x ? x : m), lane-wise; max is exact in any order.
    let mut lane_max = [f32::NEG_INFINITY; 4];
    for (i, &x) in xs.iter().enumerate() {
        let m = &mut lane_max[i % 4];
        *m = if *m < x { x } else { *m };
    }
    let max = max_of_lanes(lane_max);
    let mut lane_sum = [0.0f32; 4];
    for (i, x) in xs.iter_mut().enumerate() {
        let e = expf(*x - max);
        *x = e;
        lane_sum[i % 4] += e;
    }
    let inv = 1.0 / ((lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3]));
    for x in xs.iter_mut() {
        *x *= inv;
    }
}

/// The max of 4 lane maxima, combined as pmax(pmax(l0, l1), pmax(l2, l3)).
#[inline(always)]
fn max_of_lanes(l: [f32; 4]) -> f32 {
    let pmax = |a: f32, b: f32| if a < b { b } else { a };
    pmax(pmax(l[0], l[1]), pmax(l[2], l[3]))
}

// ---------------------------------------------------------------------------------------------
// Slice helpers: dispatch
// ---------------------------------------------------------------------------------------------

/// xs[i] = e^xs[i] (f32, [`expf`] accuracy).
pub fn exp_in_place(xs: &mut [f32]) {
    simd128_or!(simd128::exp_in_place(xs), exp_in_place_ref(xs));
}

/// xs[i] = SiLU(xs[i]) = xs[i] * sigmoid(xs[i]).
pub fn silu_in_place(xs: &mut [f32]) {
    simd128_or!(simd128::silu_in_place(xs), silu_in_place_ref(xs));
}

/// Softmax of xs in place (see [`softmax_in_place_ref`] for the exact order of operations).
pub fn softmax_in_place(xs: &mut [f32]) {
    simd128_or!(simd128::softmax_in_place(xs), softmax_in_place_ref(xs));
}

// ---------------------------------------------------------------------------------------------
// SIMD128 kernels (wasm32 only)
// ---------------------------------------------------------------------------------------------

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    //! The 4-lane f32 kernels on `v128`: lane for lane the operations of [`super::expf`] and
    //! the `_ref` slice helpers, so results match them bit for bit.
    use super::*;
    use core::arch::wasm32::*;

    #[inline(always)]
    pub fn from_array(x: [f32; 4]) -> v128 {
        f32x4(x[0], x[1], x[2], x[3])
    }

    #[inline(always)]
    pub fn to_array(v: v128) -> [f32; 4] {
        [
            f32x4_extract_lane::<0>(v),
            f32x4_extract_lane::<1>(v),
            f32x4_extract_lane::<2>(v),
            f32x4_extract_lane::<3>(v),
        ]
    }

    /// The constants of [`exp4_with`], as vectors. [`ExpConsts::CONST`] are plain constants; a
    /// loop takes [`ExpConsts::opaque`] once before it instead: V8 materializes a vector
    /// constant at each use inside a loop (three instructions: `movabs`, `movq`,
    /// `punpcklqdq`, so 42 of the 83 instructions of `softmax_in_place`'s loop were constants),
    /// while a value it cannot see through stays in a register or is one load from the stack
    /// (56 instructions). SmolLM2-135M Q4_1, relaxed, one thread, a 968-token prompt, two
    /// interleaved rounds: Node 24 prefill 182.8 / 202.0 -> 194.2 / 214.4 tok/s (softmax 7.3 ->
    /// 5.5 % of the samples, SiLU 2.0 -> 1.4 %); Chromium 156, whose V8 materializes fewer,
    /// the same (203.5 / 207.0 / 208.9 against 212.4 / 205.0 / 208.7; softmax 4.7 -> 4.2 %).
    #[derive(Clone, Copy)]
    pub struct ExpConsts {
        lo: v128,
        hi: v128,
        log2_e: v128,
        /// [`ROUND_MAGIC_F32`], whose bits are [`ROUND_MAGIC_F32_BITS`].
        magic: v128,
        ln2_hi: v128,
        ln2_lo: v128,
        /// `EXPF_P0..=EXPF_P4`.
        p: [v128; 5],
        one: v128,
        /// The exponent bias, 127 in i32 lanes.
        bias: v128,
    }

    impl ExpConsts {
        pub const CONST: ExpConsts = ExpConsts {
            lo: f32x4(EXPF_LO, EXPF_LO, EXPF_LO, EXPF_LO),
            hi: f32x4(EXPF_HI, EXPF_HI, EXPF_HI, EXPF_HI),
            log2_e: f32x4(LOG2_E_F32, LOG2_E_F32, LOG2_E_F32, LOG2_E_F32),
            magic: f32x4(
                ROUND_MAGIC_F32,
                ROUND_MAGIC_F32,
                ROUND_MAGIC_F32,
                ROUND_MAGIC_F32,
            ),
            ln2_hi: f32x4(LN2_HI_F32, LN2_HI_F32, LN2_HI_F32, LN2_HI_F32),
            ln2_lo: f32x4(LN2_LO_F32, LN2_LO_F32, LN2_LO_F32, LN2_LO_F32),
            p: [
                f32x4(EXPF_P0, EXPF_P0, EXPF_P0, EXPF_P0),
                f32x4(EXPF_P1, EXPF_P1, EXPF_P1, EXPF_P1),
                f32x4(EXPF_P2, EXPF_P2, EXPF_P2, EXPF_P2),
                f32x4(EXPF_P3, EXPF_P3, EXPF_P3, EXPF_P3),
                f32x4(EXPF_P4, EXPF_P4, EXPF_P4, EXPF_P4),
            ],
            one: f32x4(1.0, 1.0, 1.0, 1.0),
            bias: i32x4(127, 127, 127, 127),
        };

        /// The same values, hidden from the optimizers (see the type's doc).
        #[inline(always)]
        pub fn opaque() -> ExpConsts {
            core::hint::black_box(ExpConsts::CONST)
        }
    }

    /// e^x on 4 lanes with plain constants ([`exp4_with`]).
    #[inline(always)]
    pub fn exp4(x: v128) -> v128 {
        exp4_with(x, &ExpConsts::CONST)
    }

    /// e^x on 4 lanes: [`super::expf`] step by step, its constants from `k`.
    #[inline(always)]
    pub fn exp4_with(x: v128, k: &ExpConsts) -> v128 {
        const { assert!(ROUND_MAGIC_F32.to_bits() == ROUND_MAGIC_F32_BITS as u32) };
        let x = f32x4_pmax(x, k.lo);
        let x = f32x4_pmin(x, k.hi);
        let t = f32x4_add(f32x4_mul(x, k.log2_e), k.magic);
        let n = i32x4_sub(t, k.magic);
        let nf = f32x4_sub(t, k.magic);
        let r = f32x4_sub(
            f32x4_sub(x, f32x4_mul(nf, k.ln2_hi)),
            f32x4_mul(nf, k.ln2_lo),
        );
        let mut p = k.p[4];
        p = f32x4_add(k.p[3], f32x4_mul(r, p));
        p = f32x4_add(k.p[2], f32x4_mul(r, p));
        p = f32x4_add(k.p[1], f32x4_mul(r, p));
        p = f32x4_add(k.p[0], f32x4_mul(r, p));
        let y = f32x4_add(f32x4_add(f32x4_mul(f32x4_mul(r, r), p), r), k.one);
        let n1 = i32x4_shr(n, 1);
        let n2 = i32x4_sub(n, n1);
        let s1 = i32x4_shl(i32x4_add(n1, k.bias), 23);
        let s2 = i32x4_shl(i32x4_add(n2, k.bias), 23);
        f32x4_mul(f32x4_mul(y, s1), s2)
    }

    /// x / (1 + e^-x) on 4 lanes.
    #[inline(always)]
    fn silu4(x: v128, k: &ExpConsts) -> v128 {
        f32x4_div(x, f32x4_add(k.one, exp4_with(f32x4_neg(x), k)))
    }

    /// Applies `f` to xs 4 at a time; the last 1–3 go through a zero-padded stack copy, so
    /// nothing outside xs is read or written.
    #[inline(always)]
    fn map4(xs: &mut [f32], f: impl Fn(v128) -> v128) {
        let mut chunks = xs.chunks_exact_mut(4);
        for chunk in &mut chunks {
            let p = chunk.as_mut_ptr() as *mut v128;
            // SAFETY: `chunk` is 4 valid, exclusively borrowed f32 (16 bytes); v128
            // load/store have no alignment requirement.
            unsafe { v128_store(p, f(v128_load(p))) };
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let mut buf = [0.0f32; 4];
            buf[..tail.len()].copy_from_slice(tail);
            let out = to_array(f(from_array(buf)));
            tail.copy_from_slice(&out[..tail.len()]);
        }
    }

    pub fn exp_in_place(xs: &mut [f32]) {
        let k = ExpConsts::opaque();
        map4(xs, |x| exp4_with(x, &k));
    }

    pub fn silu_in_place(xs: &mut [f32]) {
        let k = ExpConsts::opaque();
        map4(xs, |x| silu4(x, &k));
    }

    /// [`super::softmax_in_place_ref`] with lanes as v128 lanes.
    pub fn softmax_in_place(xs: &mut [f32]) {
        if xs.is_empty() {
            return;
        }
        let n_full = xs.len() / 4 * 4;
        // Max: lane i % 4 sees element i, as in the reference. The tail pads with -inf,
        // which pmax ignores.
        let mut lane_max = f32x4_splat(f32::NEG_INFINITY);
        for chunk in xs[..n_full].chunks_exact(4) {
            // SAFETY: 4 valid f32; unaligned load is fine.
            let v = unsafe { v128_load(chunk.as_ptr() as *const v128) };
            lane_max = f32x4_pmax(lane_max, v);
        }
        let tail_len = xs.len() - n_full;
        let mut buf = [f32::NEG_INFINITY; 4];
        buf[..tail_len].copy_from_slice(&xs[n_full..]);
        lane_max = f32x4_pmax(lane_max, from_array(buf));
        let max = max_of_lanes(to_array(lane_max));
        // Exponentiate and sum per lane.
        let k = ExpConsts::opaque();
        let max4 = f32x4_splat(max);
        let mut lane_sum = f32x4_splat(0.0);
        for chunk in xs[..n_full].chunks_exact_mut(4) {
            let p = chunk.as_mut_ptr() as *mut v128;
            // SAFETY: 4 valid, exclusively borrowed f32; unaligned load/store are fine.
            let e = exp4_with(f32x4_sub(unsafe { v128_load(p) }, max4), &k);
            unsafe { v128_store(p, e) };
            lane_sum = f32x4_add(lane_sum, e);
        }
        if tail_len > 0 {
            let mut e = to_array(exp4_with(f32x4_sub(from_array(buf), max4), &k));
            // Padding lanes add +0 (the reference adds nothing there; x + 0 == x for x >= 0).
            for v in &mut e[tail_len..] {
                *v = 0.0;
            }
            xs[n_full..].copy_from_slice(&e[..tail_len]);
            lane_sum = f32x4_add(lane_sum, from_array(e));
        }
        let l = to_array(lane_sum);
        let inv = 1.0 / ((l[0] + l[1]) + (l[2] + l[3]));
        map4(xs, |v| f32x4_mul(v, f32x4_splat(inv)));
    }
}

// ---------------------------------------------------------------------------------------------
// Tests: against libm (a dev-dependency only), over >= 10^6 sampled arguments per function
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests;
