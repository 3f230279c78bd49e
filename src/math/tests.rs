//! Accuracy of the hand-written math against `libm` (a dev-dependency, never linked into the
//! module), and SIMD-vs-scalar identity of the f32 kernels.
//!
//! Each f64 function is checked on >= 10^6 arguments drawn by a fixed-seed generator from
//! uniform and log-uniform mixes over its range, plus the hard cases (subnormals, arguments
//! next to multiples of pi/2, integers, RoPE angles). Errors are counted in ulps of the result
//! (distance between bit patterns, so subnormal results are measured in subnormal ulps). Run
//! with `--nocapture` to see the measured maxima.

use super::*;
use std::println;
use std::vec::Vec;

/// The accuracy the functions promise (against libm).
const MAX_ULP_F64: u64 = 2;
const MAX_ULP_F32: u64 = 2;

// --- deterministic sampling ---------------------------------------------------------------

/// The sampler's SplitMix64, with the draws these tests need.
struct Rng(crate::sampler::Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(crate::sampler::Rng::new(seed))
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0.next_f64()
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Log-uniform magnitude in [lo, hi] (lo > 0).
    fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        libm::exp(self.uniform(libm::log(lo), libm::log(hi))).clamp(lo, hi)
    }
    fn sign(&mut self) -> f64 {
        if self.next_u64() & 1 == 0 { 1.0 } else { -1.0 }
    }
    /// Integer in [lo, hi].
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

// --- ulp distances ------------------------------------------------------------------------

/// Distance in representable doubles (+0 and -0 coincide; two NaNs are 0 apart).
fn ulp_diff(a: f64, b: f64) -> u64 {
    ulp_distance(
        [a.is_nan(), b.is_nan()],
        [a.to_bits(), b.to_bits()],
        SIGN_MASK,
    )
}

/// The same in representable f32s.
fn ulp_diff_f32(a: f32, b: f32) -> u64 {
    let bits = [a.to_bits() as u64, b.to_bits() as u64];
    ulp_distance([a.is_nan(), b.is_nan()], bits, 0x8000_0000)
}

/// Distance between two bit patterns of one float width, whose sign bit is `sign`: each read as
/// a signed magnitude, so the order of the integers is the order of the floats.
fn ulp_distance(nan: [bool; 2], bits: [u64; 2], sign: u64) -> u64 {
    if nan[0] || nan[1] {
        return if nan[0] && nan[1] { 0 } else { u64::MAX };
    }
    let ord = |b: u64| -> i128 {
        let mag = (b & !sign) as i128;
        if b & sign != 0 { -mag } else { mag }
    };
    (ord(bits[0]) - ord(bits[1])).unsigned_abs() as u64
}

/// Worst case seen over a set of arguments.
struct Stats {
    name: &'static str,
    count: usize,
    max_ulp: u64,
    worst_x: f64,
    over_half: usize, // results not equal to libm's
}

impl Stats {
    fn new(name: &'static str) -> Self {
        Stats {
            name,
            count: 0,
            max_ulp: 0,
            worst_x: 0.0,
            over_half: 0,
        }
    }
    fn add(&mut self, x: f64, ours: f64, reference: f64) {
        self.record(x, ulp_diff(ours, reference));
    }
    fn add_f32(&mut self, x: f32, ours: f32, reference: f32) {
        self.record(x as f64, ulp_diff_f32(ours, reference));
    }
    /// Counts one argument `x` whose result is `d` ulps from libm's.
    fn record(&mut self, x: f64, d: u64) {
        self.count += 1;
        if d > 0 {
            self.over_half += 1;
        }
        if d > self.max_ulp {
            self.max_ulp = d;
            self.worst_x = x;
        }
    }
    fn check(&self, limit: u64) {
        println!(
            "{:<34} n={:>8}  max {} ulp (at x={:e})  differ from libm: {:.3}%",
            self.name,
            self.count,
            self.max_ulp,
            self.worst_x,
            100.0 * self.over_half as f64 / self.count.max(1) as f64
        );
        assert!(
            self.max_ulp <= limit,
            "{}: {} ulp at x = {:e} ({:#018x}), limit {}",
            self.name,
            self.max_ulp,
            self.worst_x,
            self.worst_x.to_bits(),
            limit
        );
    }
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

// --- exp (f64) ----------------------------------------------------------------------------

/// `sqrtf` is IEEE's correctly rounded square root on both paths: off wasm libm's must equal
/// the hardware's (std), bit for bit, as the `f32x4.sqrt` lane does in wasm (this test also
/// runs inside wasm).
#[test]
fn math_sqrtf_is_correctly_rounded() {
    let mut rng = crate::testutil::Rng(0x5EED_5EED_5EED_5EED);
    let specials = [
        0.0f32,
        -0.0,
        1.0,
        2.0,
        f32::MIN_POSITIVE,
        1e-45,
        f32::MAX,
        f32::INFINITY,
    ];
    let randoms = (0..200_000).map(|_| f32::from_bits(rng.next() as u32 & 0x7FFF_FFFF));
    for x in specials.into_iter().chain(randoms) {
        assert_eq!(sqrtf(x).to_bits(), x.sqrt().to_bits(), "sqrt({x:e})");
    }
    assert!(sqrtf(-1.0).is_nan() && sqrtf(f32::NAN).is_nan());
}

#[test]
fn math_exp_within_2ulp_of_libm() {
    let mut rng = Rng::new(1);
    let mut st = Stats::new("exp [-708, 709]");
    let mut check = |x: f64| st.add(x, exp(x), libm::exp(x));
    for _ in 0..400_000 {
        check(rng.uniform(-708.0, 709.0));
    }
    for _ in 0..400_000 {
        let x = rng.sign() * rng.log_uniform(1e-12, 709.0);
        check(x.max(-708.0));
    }
    for _ in 0..100_000 {
        // Tiny arguments, down to subnormal.
        check(rng.sign() * f64::from_bits(rng.int(1, 0x3D70_0000_0000_0000)));
    }
    for _ in 0..100_000 {
        // Next to the points where k changes: (k + 1/2) ln2.
        let k = rng.int(0, 2042) as f64 - 1021.0;
        let x = (k + 0.5) * core::f64::consts::LN_2 + rng.uniform(-1e-9, 1e-9);
        check(x.clamp(-708.0, 709.0));
    }
    st.check(MAX_ULP_F64);

    // Gradual underflow: subnormal results, in subnormal ulps.
    let mut st = Stats::new("exp [-745.14, -708] (subnormal)");
    for _ in 0..100_000 {
        let x = rng.uniform(-745.14, -708.0);
        st.add(x, exp(x), libm::exp(x));
    }
    st.check(MAX_ULP_F64);
}

#[test]
fn math_exp_special_values() {
    assert_eq!(exp(0.0).to_bits(), 1.0f64.to_bits());
    assert_eq!(exp(-0.0).to_bits(), 1.0f64.to_bits());
    assert_eq!(exp(f64::INFINITY), f64::INFINITY);
    assert_eq!(exp(f64::NEG_INFINITY).to_bits(), 0.0f64.to_bits());
    assert!(exp(f64::NAN).is_nan());
    assert_eq!(exp(f64::MIN_POSITIVE), 1.0);
    assert_eq!(exp(-f64::from_bits(1)), 1.0);
    assert!(ulp_diff(exp(1.0), core::f64::consts::E) <= 1);
    // Overflow edge: the last finite result and the first infinite one, as libm.
    let edge = EXP_OVERFLOW;
    assert!(exp(edge).is_finite());
    assert!(ulp_diff(exp(edge), libm::exp(edge)) <= 1);
    let above = f64::from_bits(edge.to_bits() + 1);
    assert_eq!(exp(above), f64::INFINITY);
    assert_eq!(libm::exp(above), f64::INFINITY);
    assert_eq!(exp(1000.0), f64::INFINITY);
    assert_eq!(exp(f64::MAX), f64::INFINITY);
    // Underflow edge: the smallest subnormal, then +0.
    assert_eq!(exp(EXP_UNDERFLOW), f64::from_bits(1));
    assert_eq!(libm::exp(EXP_UNDERFLOW), f64::from_bits(1));
    let below = f64::from_bits(EXP_UNDERFLOW.to_bits() + 1);
    assert_eq!(exp(below).to_bits(), 0);
    assert_eq!(exp(below), libm::exp(below));
    assert_eq!(exp(-1000.0).to_bits(), 0);
    assert_eq!(exp(-f64::MAX).to_bits(), 0);
    // Around the normal/subnormal boundary, as libm.
    for x in [
        -708.3964185322641,
        -708.3964185322642,
        -708.396_418_532_264_1,
        -709.0,
        -744.0,
    ] {
        assert!(ulp_diff(exp(x), libm::exp(x)) <= 1, "exp({x})");
    }
}

// --- log (f64) ----------------------------------------------------------------------------

#[test]
fn math_log_within_2ulp_of_libm() {
    let mut rng = Rng::new(2);
    let mut st = Stats::new("log (0, 1e308]");
    let mut check = |x: f64| st.add(x, log(x), libm::log(x));
    let top = 1e308f64.to_bits();
    for _ in 0..500_000 {
        // Uniform in bit patterns = log-uniform over the whole range, subnormals included.
        check(f64::from_bits(rng.int(1, top)));
    }
    for _ in 0..200_000 {
        check(rng.uniform(0.0, 10.0).max(f64::MIN_POSITIVE));
    }
    for _ in 0..200_000 {
        // Close to 1, where log is small and cancellation would show.
        let e = rng.int(1, 52) as i32;
        check(1.0 + rng.sign() * rng.unit() * libm::exp2(-e as f64));
    }
    for _ in 0..100_000 {
        // Subnormal inputs.
        check(f64::from_bits(rng.int(1, FRAC_MASK)));
    }
    for _ in 0..50_000 {
        // Around the sqrt(2) mantissa switch, at random exponents.
        let e = rng.int(0, 2040) as i32 - 1020;
        let m = f64::from_bits(SQRT2_BITS.wrapping_add(rng.int(0, 64)).wrapping_sub(32));
        check(m * libm::exp2(e as f64));
    }
    st.check(MAX_ULP_F64);
}

#[test]
fn math_log_special_values() {
    assert_eq!(log(0.0), f64::NEG_INFINITY);
    assert_eq!(log(-0.0), f64::NEG_INFINITY);
    assert!(log(-1.0).is_nan());
    assert!(log(-f64::from_bits(1)).is_nan());
    assert!(log(f64::NEG_INFINITY).is_nan());
    assert!(log(f64::NAN).is_nan());
    assert_eq!(log(f64::INFINITY), f64::INFINITY);
    assert_eq!(log(1.0).to_bits(), 0.0f64.to_bits());
    assert_eq!(log(core::f64::consts::E), 1.0);
    assert_eq!(log(2.0), core::f64::consts::LN_2);
    for x in [
        f64::from_bits(1),
        f64::from_bits(FRAC_MASK),
        f64::MIN_POSITIVE,
        f64::MAX,
        1e308,
    ] {
        assert!(ulp_diff(log(x), libm::log(x)) <= 1, "log({x:e})");
    }
    assert_eq!(log(f64::from_bits(1)), -744.4400719213812);
    assert_eq!(log(f64::MAX), 709.782712893384);
}

// --- sin / cos (f64) ----------------------------------------------------------------------

/// Feeds the arguments of the sin/cos accuracy test to `f`: > 10^6 of them, |x| <= 1e5.
/// (Streamed, not collected: the test keeps wasm memory small.)
fn for_each_trig_argument(mut f: impl FnMut(f64)) {
    let mut rng = Rng::new(3);
    for _ in 0..300_000 {
        f(rng.uniform(-1e5, 1e5));
    }
    for _ in 0..200_000 {
        f(rng.sign() * rng.log_uniform(1e-9, 1e5));
    }
    // Every integer (RoPE positions with frequency 1).
    for i in 0..=100_000 {
        f(i as f64);
    }
    // RoPE angles pos * theta^(-2i/d).
    for _ in 0..100_000 {
        let theta = [10_000.0, 500_000.0, 1_000_000.0][rng.int(0, 2) as usize];
        let d = [64.0, 128.0][rng.int(0, 1) as usize];
        let i = rng.int(0, d as u64 / 2 - 1) as f64;
        let pos = rng.int(0, 100_000) as f64;
        f(pos * libm::pow(theta, -2.0 * i / d));
    }
    // The doubles next to every multiple of pi/2 up to 1e5 (the hard cases for reduction):
    // the nearest one is within a few ulps of k*PIO2_HI + k*PIO2_LO.
    for k in 1..=63_661u32 {
        let kf = k as f64;
        let near = kf * PIO2_HI + kf * PIO2_LO;
        let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
        for d in -3i64..=3 {
            f(sign * f64::from_bits((near.to_bits() as i64 + d) as u64));
        }
    }
}

#[test]
fn math_sin_cos_within_2ulp_of_libm() {
    let mut st_sin = Stats::new("sin |x| <= 1e5");
    let mut st_cos = Stats::new("cos |x| <= 1e5");
    for_each_trig_argument(|x| {
        assert!(x.abs() <= 1e5);
        let (s, c) = (sin(x), cos(x));
        st_sin.add(x, s, libm::sin(x));
        st_cos.add(x, c, libm::cos(x));
        let (s2, c2) = sin_cos(x);
        assert!(
            same(s, s2) && same(c, c2),
            "sin_cos({x}) differs from sin, cos"
        );
        assert!(
            same(sin(-x), -s) && same(cos(-x), c),
            "sin/cos symmetry at {x}"
        );
    });
    assert!(st_sin.count >= 1_000_000);
    st_sin.check(MAX_ULP_F64);
    st_cos.check(MAX_ULP_F64);
}

#[test]
fn math_sin_cos_large_arguments() {
    // Beyond the required range: the rest of Cody–Waite (< 2^20) and Payne–Hanek above.
    let mut rng = Rng::new(4);
    let mut st_sin = Stats::new("sin 1e5 < |x| <= 1e308");
    let mut st_cos = Stats::new("cos 1e5 < |x| <= 1e308");
    let mut check = |x: f64| {
        st_sin.add(x, sin(x), libm::sin(x));
        st_cos.add(x, cos(x), libm::cos(x));
    };
    for _ in 0..100_000 {
        check(rng.sign() * rng.uniform(1e5, 1_048_576.0));
    }
    for _ in 0..100_000 {
        check(rng.sign() * f64::from_bits(rng.int(0x412E_8480_0000_0000, f64::MAX.to_bits())));
    }
    for _ in 0..50_000 {
        // Next to multiples of pi/2 between 1e5 and 2^24 (Cody–Waite's top and Payne–Hanek).
        let kf = rng.int(63_662, 10_680_000) as f64;
        let near = kf * PIO2_HI + kf * PIO2_LO;
        let d = rng.int(0, 6) as i64 - 3;
        check(f64::from_bits((near.to_bits() as i64 + d) as u64));
    }
    // The double closest to a multiple of pi/2 (Muller, "Elementary Functions"):
    // 6381956970095103 * 2^797, about 4.7e-19 away from one.
    check(6381956970095103.0 * libm::exp2(797.0));
    check(f64::MAX);
    check(-f64::MAX);
    check(CODY_WAITE_LIMIT);
    check(f64::from_bits(CODY_WAITE_LIMIT.to_bits() - 1));
    st_sin.check(MAX_ULP_F64);
    st_cos.check(MAX_ULP_F64);
}

#[test]
fn math_sin_cos_special_values() {
    assert_eq!(sin(0.0).to_bits(), 0.0f64.to_bits());
    assert_eq!(sin(-0.0).to_bits(), (-0.0f64).to_bits());
    assert_eq!(cos(0.0), 1.0);
    assert_eq!(cos(-0.0), 1.0);
    for x in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
        assert!(sin(x).is_nan() && cos(x).is_nan());
        let (s, c) = sin_cos(x);
        assert!(s.is_nan() && c.is_nan());
    }
    for x in [
        f64::from_bits(1),
        -f64::from_bits(1),
        f64::MIN_POSITIVE,
        1e-300,
        -1e-20,
    ] {
        assert_eq!(sin(x).to_bits(), x.to_bits());
        assert_eq!(cos(x), 1.0);
    }
    // Around the no-reduction threshold pi/4 and the tiny-angle threshold.
    for x in [
        PIO4,
        f64::from_bits(PIO4.to_bits() + 1),
        f64::from_bits(PIO4.to_bits() - 1),
        TINY_ANGLE,
        -TINY_ANGLE,
    ] {
        assert!(ulp_diff(sin(x), libm::sin(x)) <= 1, "sin({x})");
        assert!(ulp_diff(cos(x), libm::cos(x)) <= 1, "cos({x})");
    }
}

#[test]
fn math_reduction_keeps_precision_next_to_multiples_of_pi_over_2() {
    // sin x ~ (x - k pi/2) there, so the relative error of sin is that of the reduction. A
    // one-part or two-part reduction would fail these by many ulps.
    let mut worst = 0;
    for k in [1u32, 2, 3, 4, 100, 355, 710, 1000, 31_416, 44_620, 63_662] {
        let kf = k as f64;
        let near = kf * PIO2_HI + kf * PIO2_LO;
        for d in -3i64..=3 {
            let x = f64::from_bits((near.to_bits() as i64 + d) as u64);
            let r = reduce_pio2(x);
            assert!(r.head.abs() <= PIO4 * 1.000_001);
            assert!(r.tail.abs() <= r.head.abs() * 1.2e-16);
            worst = worst.max(ulp_diff(sin(x), libm::sin(x)));
            worst = worst.max(ulp_diff(cos(x), libm::cos(x)));
        }
    }
    assert!(worst <= 1, "{worst} ulp");
}

// --- exp (f32) ----------------------------------------------------------------------------

/// e^x correctly rounded to f32 (but for a rare double rounding): the f64 result of libm.
fn expf_reference(x: f32) -> f32 {
    libm::exp(x as f64) as f32
}

#[test]
fn math_expf_within_2ulp() {
    let mut rng = Rng::new(5);
    let mut st = Stats::new("expf [-87, 88]");
    let mut check = |x: f32| st.add_f32(x, expf(x), expf_reference(x));
    for _ in 0..800_000 {
        check(rng.uniform(-87.0, 88.0) as f32);
    }
    for _ in 0..300_000 {
        check((rng.sign() * rng.log_uniform(1e-10, 87.0)) as f32);
    }
    // Every f32 in [-1, 1] at a stride (the softmax's usual range).
    let (lo, hi) = ((-1.0f32).to_bits(), 1.0f32.to_bits());
    for bits in (0..hi).step_by(401).chain((0x8000_0000..lo).step_by(401)) {
        check(f32::from_bits(bits));
    }
    st.check(MAX_ULP_F32);

    // Overflow side and subnormal results (in subnormal ulps).
    let mut st = Stats::new("expf [-104, -87] u [88, 89]");
    for _ in 0..100_000 {
        let x = rng.uniform(-104.0, -87.0) as f32;
        st.add_f32(x, expf(x), expf_reference(x));
        let x = rng.uniform(88.0, 89.0) as f32;
        st.add_f32(x, expf(x), expf_reference(x));
    }
    st.check(MAX_ULP_F32);
}

#[test]
fn math_expf_special_values() {
    assert_eq!(expf(0.0), 1.0);
    assert_eq!(expf(-0.0), 1.0);
    assert_eq!(expf(f32::INFINITY), f32::INFINITY);
    assert_eq!(expf(f32::NEG_INFINITY).to_bits(), 0);
    assert!(expf(f32::NAN).is_nan());
    assert!(expf(-f32::NAN).is_nan());
    assert_eq!(expf(f32::MAX), f32::INFINITY);
    assert_eq!(expf(-f32::MAX).to_bits(), 0);
    assert_eq!(expf(f32::from_bits(1)), 1.0);
    assert_eq!(expf(-f32::MIN_POSITIVE), 1.0);
    // Overflow edge: 88.72283 is the last f32 whose e^x rounds below f32::MAX (as the
    // reference), the next one overflows.
    let last = f32::from_bits(0x42B1_7217); // 88.72283
    assert!(expf(last).is_finite() && expf_reference(last).is_finite());
    assert!(ulp_diff_f32(expf(last), expf_reference(last)) <= 1);
    let first_inf = f32::from_bits(last.to_bits() + 1);
    assert_eq!(expf(first_inf), f32::INFINITY);
    assert_eq!(expf_reference(first_inf), f32::INFINITY);
    // Underflow: the smallest subnormal, then 0, as the reference.
    for x in [
        -103.27893f32,
        -103.972,
        -103.97208,
        -103.9721,
        -104.0,
        -110.0,
    ] {
        assert!(ulp_diff_f32(expf(x), expf_reference(x)) <= 1, "expf({x})");
    }
    assert_eq!(expf(-104.0).to_bits(), 0);
    assert_eq!(expf(1.0), core::f32::consts::E);
}

#[test]
fn math_exp4_matches_scalar_bit_for_bit() {
    // On wasm32+simd128 exp4 is the v128 kernel; elsewhere this checks the dispatch.
    let mut rng = Rng::new(6);
    let check = |x: [f32; 4]| {
        let (a, b) = (exp4(x), exp4_ref(x));
        for i in 0..4 {
            assert!(
                a[i].to_bits() == b[i].to_bits() || (a[i].is_nan() && b[i].is_nan()),
                "exp4 lane {i}: x = {:e}: {:e} vs {:e}",
                x[i],
                a[i],
                b[i]
            );
        }
    };
    for _ in 0..250_000 {
        // Any bit pattern: NaNs, infinities, subnormals, huge values.
        check(core::array::from_fn(|_| {
            f32::from_bits(rng.next_u64() as u32)
        }));
        check(core::array::from_fn(|_| rng.uniform(-110.0, 100.0) as f32));
    }
    check([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY]);
    check([f32::NAN, -f32::NAN, f32::MAX, -f32::MAX]);
}

/// Under wasm the tests must exercise the SIMD128 kernels, not the scalar fallback.
#[cfg(target_arch = "wasm32")]
#[test]
#[allow(clippy::assertions_on_constants)]
fn math_wasm_tests_run_the_simd128_kernels() {
    assert!(
        cfg!(target_feature = "simd128"),
        "build the wasm tests with +simd128"
    );
}

// --- slice helpers ------------------------------------------------------------------------

/// Runs `fast` on a slice of every length 0..=41 inside a guarded buffer and compares with
/// `reference` bit for bit; the guard values around the slice must stay untouched.
fn check_slice_kernel(name: &str, fast: fn(&mut [f32]), reference: fn(&mut [f32])) {
    const GUARD: usize = 8;
    const GUARD_VALUE: f32 = 12345.678;
    let mut rng = Rng::new(7);
    for len in 0..=41usize {
        for _ in 0..20 {
            let input: Vec<f32> = (0..len).map(|_| rng.uniform(-20.0, 20.0) as f32).collect();
            let mut buf = std::vec![GUARD_VALUE; len + 2 * GUARD];
            buf[GUARD..GUARD + len].copy_from_slice(&input);
            fast(&mut buf[GUARD..GUARD + len]);
            let mut want = input.clone();
            reference(&mut want);
            for i in 0..len {
                let (a, b) = (buf[GUARD + i], want[i]);
                assert!(
                    a.to_bits() == b.to_bits(),
                    "{name} len {len} [{i}]: {a:e} vs {b:e}"
                );
            }
            let untouched = |v: &[f32]| v.iter().all(|&g| g.to_bits() == GUARD_VALUE.to_bits());
            assert!(
                untouched(&buf[..GUARD]),
                "{name} len {len}: wrote before the slice"
            );
            assert!(
                untouched(&buf[GUARD + len..]),
                "{name} len {len}: wrote past the slice"
            );
        }
    }
}

#[test]
fn math_slice_kernels_match_scalar_references() {
    check_slice_kernel("exp_in_place", exp_in_place, exp_in_place_ref);
    check_slice_kernel("silu_in_place", silu_in_place, silu_in_place_ref);
    check_slice_kernel("softmax_in_place", softmax_in_place, softmax_in_place_ref);
}

#[test]
fn math_softmax_and_silu_against_f64() {
    let mut rng = Rng::new(8);
    let mut worst_softmax = 0.0f64;
    for len in 1..=300usize {
        let scale = [1.0, 10.0, 40.0][len % 3];
        let xs: Vec<f32> = (0..len)
            .map(|_| rng.uniform(-scale, scale) as f32)
            .collect();
        let mut ys = xs.clone();
        softmax_in_place(&mut ys);
        // x - max is rounded to f32 as the kernel does; the rest in f64.
        let max = xs.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let e: Vec<f64> = xs.iter().map(|&x| libm::exp((x - max) as f64)).collect();
        let sum: f64 = e.iter().sum();
        for (y, e) in ys.iter().zip(&e) {
            let want = e / sum;
            let err = (*y as f64 - want).abs() / want.max(1e-30);
            if want > 1e-30 {
                worst_softmax = worst_softmax.max(err);
            }
        }
        let total: f64 = ys.iter().map(|&y| y as f64).sum();
        assert!(
            (total - 1.0).abs() < 1e-5,
            "softmax len {len} sums to {total}"
        );
    }
    println!("softmax vs f64: max relative error {worst_softmax:e}");
    assert!(worst_softmax < 1e-6);

    let mut worst_silu = 0.0f64;
    for _ in 0..100_000 {
        let x = rng.uniform(-30.0, 30.0) as f32;
        let mut y = [x];
        silu_in_place(&mut y);
        let want = x as f64 / (1.0 + libm::exp(-(x as f64)));
        worst_silu = worst_silu.max((y[0] as f64 - want).abs() / want.abs().max(1e-30));
    }
    println!("silu vs f64: max relative error {worst_silu:e}");
    assert!(worst_silu < 1e-6);

    // One finite value among -infs: all weight on it.
    let mut row = [
        f32::NEG_INFINITY,
        3.0,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        -1e30,
    ];
    softmax_in_place(&mut row);
    assert_eq!(row, [0.0, 1.0, 0.0, 0.0, 0.0]);
    let mut empty: [f32; 0] = [];
    softmax_in_place(&mut empty);
}
