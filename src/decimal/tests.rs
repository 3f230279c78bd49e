use super::*;
use crate::testutil::Rng;
use std::format;
use std::string::{String, ToString};
use std::vec::Vec;

/// Fewer random cases inside a wasm engine (the wasip1 run), where each is ~20x slower.
const CASES: usize = if cfg!(target_arch = "wasm32") {
    20_000
} else {
    300_000
};

/// `Shortest` writes `x` (an f32 or f64) as `core`'s `Display` does.
fn check<T: Copy + Into<Shortest> + core::fmt::Display + core::fmt::Debug>(x: T) {
    let ours: Shortest = x.into();
    assert_eq!(ours.to_string(), x.to_string(), "{x:?}");
}

#[test]
fn shortest_matches_core_on_special_and_boundary_values() {
    for x in [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1,
        1e-5,
        0.3,
        100.0,
        1e30,
        f32::MAX,
        f32::MIN_POSITIVE,
    ] {
        check(x);
    }
    for x in [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(1),
    ] {
        check(x);
    }
    for x in [
        0.0,
        -0.0,
        0.1,
        0.3,
        1e23,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        2.5,
        1e-7,
    ] {
        check(x);
    }
    for x in [
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        9007199254740993.0,
        123456.789,
    ] {
        check(x);
    }
    // Every binade's first and last values, and their neighbours (the closer lower boundary).
    for e in 0..255u32 {
        for frac in [0, 1, 2, 0x7f_ffff, 0x7f_fffe, 0x40_0000] {
            check(f32::from_bits(e << 23 | frac));
        }
    }
    for e in 0..2047u64 {
        for frac in [0, 1, 2, (1 << 52) - 1, (1 << 52) - 2, 1 << 51] {
            check(f64::from_bits(e << 52 | frac));
        }
    }
    // Small integers and short decimals, where ties between two shortest digits occur.
    for i in 0..2000 {
        check(i as f32 / 8.0);
        check(i as f32 * 0.01);
        check(i as f64 * 0.001);
        check(i as f64 * 1e21);
    }
}

#[test]
fn shortest_matches_core_on_random_bits() {
    let mut rng = Rng(0x5eed_f1f1);
    for _ in 0..CASES {
        let bits = rng.next();
        check(f32::from_bits(bits as u32));
        check(f64::from_bits(bits));
    }
}

fn check_parse(text: &str) {
    let expect: f64 = text.parse().unwrap();
    let got = parse_f64(text).unwrap_or_else(|| panic!("{text} not read"));
    assert_eq!(got.to_bits(), expect.to_bits(), "{text}: {got} vs {expect}");
}

#[test]
fn parse_matches_core_on_hard_cases() {
    for t in [
        "0",
        "-0",
        "0.0",
        "1",
        "-1",
        "0.1",
        "0.3",
        "1e23",
        "123456.789",
        "1E+2",
        "2e-1",
        "9007199254740993",
        "9007199254740995",
        "9007199254740993.0000000001",
        "2.2250738585072011e-308",
        "2.2250738585072012e-308",
        "2.2250738585072014e-308",
        "1.7976931348623157e308",
        "1.7976931348623158e308",
        "1.7976931348623159e308",
        "1.797693134862315807e308",
        "1.7976931348623158079e308",
        "2e308",
        "1e309",
        "4.9406564584124654e-324",
        "2.4703282292062327e-324",
        "2.4703282292062328e-324",
        "2.470328229206232720882843964341106861825299013071623822127928412e-324",
        "5e-324",
        "3e-324",
        "1e-325",
        "1e-400",
        "1e400",
        "0e999999999",
        "1e-99999999999",
        "1e99999999999",
        "-1e400",
        "-1e-400",
        "8.98846567431158e307",
        "1.5e-323",
        "1.00000000000000011102230246251565404236316680908203125",
        "1.00000000000000011102230246251565404236316680908203124",
        "1.00000000000000011102230246251565404236316680908203126",
        "0.000000000000000000000000000000000000000000001",
        "340282356779733661637539395458142568447",
        "12345678901234567890123456789012345678901234567890123456789012",
    ] {
        check_parse(t);
    }
}

#[test]
fn parse_rejects_what_json_rejects() {
    for t in [
        "", "-", "+1", "01", "1.", ".5", "1e", "1e+", "--1", "1.5.2", "inf", "NaN", " 1", "1 ",
        "0x10", "1_000",
    ] {
        assert_eq!(parse_f64(t), None, "{t:?}");
    }
    // More significant digits than the cap (leading zeros do not count).
    let long = format!("1{}", "0".repeat(MAX_DIGITS));
    assert_eq!(parse_f64(&long), None);
    let ok = format!("0.{}1", "0".repeat(200));
    check_parse(&ok);
}

#[test]
fn parse_matches_core_on_random_numbers() {
    let mut rng = Rng(0x0dec_13a1);
    let digit = |rng: &mut Rng| (b'0' + rng.below(10) as u8) as char;
    for _ in 0..CASES / 4 {
        // Random digits, point and exponent.
        let n = 1 + rng.below(40);
        let mut t = String::new();
        if rng.below(2) == 0 {
            t.push('-');
        }
        t.push((b'1' + rng.below(9) as u8) as char);
        for _ in 1..n {
            t.push(digit(&mut rng));
        }
        if rng.below(2) == 0 {
            t.push('.');
            for _ in 0..1 + rng.below(20) {
                t.push(digit(&mut rng));
            }
        }
        if rng.below(3) > 0 {
            t.push_str(&format!("e{}", rng.below(700) as i64 - 350));
        }
        check_parse(&t);
        // A random float's shortest text and its exact value's first 17 to 40 digits.
        let x = f64::from_bits(rng.next() & !(1 << 63));
        if x.is_finite() {
            check_parse(&format!("{x:e}"));
            let exact = format!("{x:.60e}");
            let (mant, exp) = exact.split_once('e').unwrap();
            check_parse(&format!("{}e{exp}", &mant[..18 + rng.below(24)]));
        }
    }
}

/// Decimal text `a + b` of two non-negative decimal texts.
fn add_decimal(a: &str, b: &str) -> String {
    let split = |s: &str| {
        let (i, f) = s.split_once('.').unwrap_or((s, ""));
        (i.to_string(), f.to_string())
    };
    let ((ai, af), (bi, bf)) = (split(a), split(b));
    let (il, fl) = (ai.len().max(bi.len()), af.len().max(bf.len()));
    let pad = |i: &str, f: &str| format!("{i:0>il$}{f:0<fl$}").into_bytes();
    let (x, y) = (pad(&ai, &af), pad(&bi, &bf));
    let mut out = Vec::new();
    let mut carry = 0;
    for (p, q) in x.iter().rev().zip(y.iter().rev()) {
        let d = (p - b'0') + (q - b'0') + carry;
        out.push(b'0' + d % 10);
        carry = d / 10;
    }
    out.push(b'0' + carry);
    out.reverse();
    let s = String::from_utf8(out).unwrap();
    format!("{}.{}", &s[..s.len() - fl], &s[s.len() - fl..])
}

/// Decimal text `a / 2` of a non-negative decimal text with a point.
fn half_decimal(a: &str) -> String {
    let mut out = String::new();
    let mut rem = 0;
    for c in format!("{a}0").chars() {
        if c == '.' {
            out.push('.');
            continue;
        }
        let d = rem * 10 + c.to_digit(10).unwrap();
        out.push(char::from_digit(d / 2, 10).unwrap());
        rem = d % 2;
    }
    out
}

#[test]
fn parse_rounds_exact_midpoints_to_even() {
    let mut rng = Rng(0x003a_1f90);
    let mut checked = 0;
    for _ in 0..CASES / 10 {
        // Floats between 2^-12 and 2^52: their midpoints have a fraction (ending in 5) and at most
        // ~64 significant digits.
        let x = f64::from_bits((1011 + rng.below(64) as u64) << 52 | rng.next() >> 12);
        let next = f64::from_bits(x.to_bits() + 1);
        let mid = half_decimal(&add_decimal(
            &format!("{x:.1100}"),
            &format!("{next:.1100}"),
        ));
        let mid = mid.trim_end_matches('0').trim_start_matches('0');
        let mid = if mid.starts_with('.') {
            format!("0{mid}")
        } else {
            mid.to_string()
        };
        let significant = mid
            .bytes()
            .filter(u8::is_ascii_digit)
            .skip_while(|&c| c == b'0');
        if significant.count() > MAX_DIGITS {
            continue;
        }
        let even = if x.to_bits().is_multiple_of(2) {
            x
        } else {
            next
        };
        assert_eq!(parse_f64(&mid), Some(even), "{mid}");
        check_parse(&mid);
        // One unit in the last digit either side goes to that side.
        for (last, side) in [(b'1', next), (b'9', x)] {
            let mut t = mid.clone().into_bytes();
            let at = t.len() - 1;
            if last == b'1' {
                t.push(b'1');
            } else {
                // mid ends in 5: ...4999…9 just below it.
                t[at] -= 1;
                t.extend_from_slice(b"9");
            }
            let t = String::from_utf8(t).unwrap();
            if t.bytes()
                .filter(u8::is_ascii_digit)
                .skip_while(|&c| c == b'0')
                .count()
                <= MAX_DIGITS
            {
                assert_eq!(parse_f64(&t), Some(side), "{t}");
            }
        }
        checked += 1;
    }
    assert!(
        checked > CASES / 40,
        "only {checked} midpoints fit {MAX_DIGITS} digits"
    );
}
