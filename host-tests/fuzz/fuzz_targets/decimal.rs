//! `wasmind::decimal` against `core` on any bytes: as text, `parse_f64` reads exactly the JSON
//! numbers (of at most `MAX_DIGITS` significant digits) and to the same f64 as `str::parse`; as
//! bits, `Shortest` writes every f64 and f32 as `Display` does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::decimal::{MAX_DIGITS, Shortest, parse_f64};

/// Whether `t` is a JSON number with at most `MAX_DIGITS` significant digits.
fn json_number(t: &str) -> bool {
    let b = t.strip_prefix('-').unwrap_or(t).as_bytes();
    let int = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if int == 0 || (int > 1 && b[0] == b'0') {
        return false;
    }
    let mut p = int;
    let mut digits: Vec<u8> = b[..int].to_vec();
    if b.get(p) == Some(&b'.') {
        let n = b[p + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return false;
        }
        digits.extend_from_slice(&b[p + 1..p + 1 + n]);
        p += 1 + n;
    }
    if matches!(b.get(p), Some(b'e' | b'E')) {
        p += 1;
        if matches!(b.get(p), Some(b'+' | b'-')) {
            p += 1;
        }
        let n = b[p..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return false;
        }
        p += n;
    }
    p == b.len() && digits.iter().skip_while(|&&c| c == b'0').count() <= MAX_DIGITS
}

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = std::str::from_utf8(data) {
        let ours = parse_f64(t);
        assert_eq!(ours.is_some(), json_number(t), "{t:?}");
        if let Some(v) = ours {
            let core: f64 = t.parse().expect("core reads every JSON number");
            assert_eq!(v.to_bits(), core.to_bits(), "{t:?}");
        }
    }
    for c in data.chunks_exact(8) {
        let x = f64::from_bits(u64::from_le_bytes(c.try_into().unwrap()));
        assert_eq!(Shortest::from(x).to_string(), x.to_string());
        let y = f32::from_bits(u32::from_le_bytes(c[..4].try_into().unwrap()));
        assert_eq!(Shortest::from(y).to_string(), y.to_string());
    }
});
