//! Decimal text of floats, exact both ways, in a few KB of code: [`Shortest`] writes a float as
//! the fewest digits that read back to it (what `core`'s `Display` writes: no exponent, `NaN`,
//! `inf`), [`parse_f64`] reads a JSON number to the nearest `f64` (ties to even).
//!
//! `core` does both with Grisu, Dragon4 and Eisel-Lemire, ~36 KB of code and tables in the
//! module for text nobody reads fast: the numbers in `model_info`, error messages and JSON
//! schemas. Here both directions are the plain exact algorithms over one small fixed-size
//! integer ([`Big`]): Steele & White's free-format digit generation (with Burger & Dybvig's
//! scaling), and long division with round-to-nearest-even. Both are tested against `core` on
//! the host.

use core::cmp::Ordering;
use core::fmt;

/// 32-bit limbs of [`Big`]: 1,536 bits. The largest values are in [`parse_f64`]: a dividend
/// `digits · 2^k` of ~1,350 bits for `10^388` (64 digits after 324 zeros); formatting needs
/// ~1,090 (`2^1076`, the smallest subnormal's scale).
const LIMBS: usize = 48;

/// An unsigned integer below `2^(32·LIMBS)`, little-endian limbs. Every caller keeps its values
/// under the bound above, so no operation overflows it (and `mul_small`, `shl` would index out of
/// range rather than wrap if one did).
#[derive(Clone)]
struct Big {
    limbs: [u32; LIMBS],
    /// Limbs in use; `limbs[len..]` are zero and `len == 0` is the value zero.
    len: usize,
}

impl Big {
    fn from_u64(v: u64) -> Big {
        let mut b = Big {
            limbs: [0; LIMBS],
            len: 2,
        };
        b.limbs[0] = v as u32;
        b.limbs[1] = (v >> 32) as u32;
        b.trim();
        b
    }

    fn trim(&mut self) {
        while self.len > 0 && self.limbs[self.len - 1] == 0 {
            self.len -= 1;
        }
    }

    fn is_zero(&self) -> bool {
        self.len == 0
    }

    fn mul_small(&mut self, k: u32) -> &mut Big {
        let mut carry = 0u64;
        for l in &mut self.limbs[..self.len] {
            let v = *l as u64 * k as u64 + carry;
            *l = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.limbs[self.len] = carry as u32;
            self.len += 1;
        }
        self
    }

    fn mul_pow10(&mut self, mut n: u32) -> &mut Big {
        while n >= 9 {
            self.mul_small(1_000_000_000);
            n -= 9;
        }
        self.mul_small(10u32.pow(n))
    }

    /// `self · 2^n`.
    fn shl(&mut self, n: u32) -> &mut Big {
        if self.is_zero() {
            return self;
        }
        let (words, bits) = ((n / 32) as usize, n % 32);
        let old = self.len;
        let mut new_len = old + words;
        if bits > 0 && self.limbs[old - 1] >> (32 - bits) != 0 {
            new_len += 1;
        }
        for i in (0..new_len).rev() {
            let hi = i
                .checked_sub(words)
                .filter(|&j| j < old)
                .map_or(0, |j| self.limbs[j]);
            let lo = i
                .checked_sub(words + 1)
                .filter(|&j| j < old)
                .map_or(0, |j| self.limbs[j]);
            self.limbs[i] = if bits == 0 {
                hi
            } else {
                hi << bits | lo >> (32 - bits)
            };
        }
        self.len = new_len;
        self
    }

    /// `floor(self / 2)`.
    fn shr1(&mut self) {
        let mut carry = 0;
        for l in self.limbs[..self.len].iter_mut().rev() {
            let v = *l;
            *l = v >> 1 | carry << 31;
            carry = v & 1;
        }
        self.trim();
    }

    fn add(&mut self, other: &Big) -> &mut Big {
        let n = self.len.max(other.len);
        let mut carry = 0u64;
        for i in 0..n {
            let v = self.limbs[i] as u64 + other.limbs[i] as u64 + carry;
            self.limbs[i] = v as u32;
            carry = v >> 32;
        }
        self.len = n;
        if carry != 0 {
            self.limbs[n] = 1;
            self.len += 1;
        }
        self
    }

    /// `self - other`; `other <= self`.
    fn sub(&mut self, other: &Big) {
        debug_assert!(self.cmp(other) != Ordering::Less);
        let mut borrow = 0i64;
        for i in 0..self.len {
            let v = self.limbs[i] as i64 - other.limbs[i] as i64 - borrow;
            self.limbs[i] = v as u32;
            borrow = (v < 0) as i64;
        }
        self.trim();
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.len.cmp(&other.len).then_with(|| {
            let (a, b) = (&self.limbs[..self.len], &other.limbs[..other.len]);
            a.iter().rev().cmp(b.iter().rev())
        })
    }

    /// `self + other` compared with `than`.
    fn sum_cmp(&self, other: &Big, than: &Big) -> Ordering {
        self.clone().add(other).cmp(than)
    }

    fn bit_len(&self) -> u32 {
        match self.len {
            0 => 0,
            n => 32 * n as u32 - self.limbs[n - 1].leading_zeros(),
        }
    }

    fn bit(&self, i: u32) -> bool {
        self.limbs
            .get(i as usize / 32)
            .is_some_and(|l| l >> (i % 32) & 1 == 1)
    }

    /// Whether any bit below bit `n` is set.
    fn any_below(&self, n: u32) -> bool {
        let (words, bits) = ((n / 32) as usize, n % 32);
        self.limbs[..words.min(self.len)].iter().any(|&l| l != 0)
            || (bits > 0 && words < self.len && self.limbs[words] << (32 - bits) != 0)
    }

    /// Bits `from .. from + 64` as a u64.
    fn bits_at(&self, from: u32) -> u64 {
        (0..64)
            .filter(|&i| self.bit(from + i))
            .fold(0, |v, i| v | 1 << i)
    }
}

// ---------------------------------------------------------------------------------------------
// Float -> shortest decimal

/// A finite non-zero float as `m · 2^e`, with whether the next float down is nearer than the one
/// up (the lowest mantissa of a binade above the first).
struct Parts {
    m: u64,
    e: i32,
    lower_closer: bool,
}

/// `Display` writes the float as `core` does: the shortest digits that read back to the same
/// value (ties between two shortest go to the nearer), without an exponent; `-0`, `NaN`, `inf`,
/// `-inf`. `Shortest::from(x)` takes an `f32` (its own shortest: `1e-5` stays `0.00001`) or an
/// `f64`.
#[derive(Clone, Copy)]
pub struct Shortest {
    bits: u64,
    /// Mantissa bits (23 or 52) of the float in `bits`.
    frac_bits: u32,
    exp_bits: u32,
}

impl From<f32> for Shortest {
    fn from(v: f32) -> Shortest {
        Shortest {
            bits: v.to_bits() as u64,
            frac_bits: 23,
            exp_bits: 8,
        }
    }
}

impl From<f64> for Shortest {
    fn from(v: f64) -> Shortest {
        Shortest {
            bits: v.to_bits(),
            frac_bits: 52,
            exp_bits: 11,
        }
    }
}

impl Shortest {
    fn negative(&self) -> bool {
        self.bits >> (self.frac_bits + self.exp_bits) & 1 == 1
    }

    /// What the float is, with its mantissa and exponent when it is finite and not zero.
    fn class(&self) -> Class {
        let frac = self.bits & ((1 << self.frac_bits) - 1);
        let biased = (self.bits >> self.frac_bits) as u32 & ((1 << self.exp_bits) - 1);
        let bias = (1 << (self.exp_bits - 1)) - 1 + self.frac_bits as i32;
        match biased {
            _ if biased == (1 << self.exp_bits) - 1 && frac == 0 => Class::Infinite,
            _ if biased == (1 << self.exp_bits) - 1 => Class::Nan,
            0 if frac == 0 => Class::Zero,
            0 => Class::Finite(Parts {
                m: frac,
                e: 1 - bias,
                lower_closer: false,
            }),
            _ => Class::Finite(Parts {
                m: frac | 1 << self.frac_bits,
                e: biased as i32 - bias,
                lower_closer: frac == 0 && biased > 1,
            }),
        }
    }
}

enum Class {
    Zero,
    Infinite,
    Nan,
    Finite(Parts),
}

/// The shortest digits of `m · 2^e` that round to it, and the decimal exponent `k` of
/// `0.d1d2… · 10^k`. Free-format generation: `r / s` is the value, `m_plus / s` and
/// `m_minus / s` the distances to the midpoints with its neighbours; a boundary itself reads
/// back to the value when the mantissa is even (ties to even).
fn shortest_digits(p: &Parts, out: &mut [u8; 17]) -> (usize, i32) {
    let even = p.m.is_multiple_of(2);
    let (mut r, mut s, mut m_plus, mut m_minus);
    // r/s = m·2^e; m+/s = 2^(e-1); m-/s = 2^(e-1), or 2^(e-2) when the lower gap is half.
    let scale = if p.lower_closer { 2 } else { 1 };
    if p.e >= 0 {
        m_minus = Big::from_u64(1);
        m_minus.shl(p.e as u32);
        m_plus = m_minus.clone();
        m_plus.mul_small(scale);
        r = Big::from_u64(p.m);
        r.shl(p.e as u32 + scale);
        s = Big::from_u64(2 * scale as u64);
    } else {
        m_minus = Big::from_u64(1);
        m_plus = Big::from_u64(scale as u64);
        r = Big::from_u64(p.m * 2 * scale as u64);
        s = Big::from_u64(1);
        s.shl((scale as i32 - p.e) as u32);
    }
    // The high boundary reaches `s` (or passes it): the value needs one more integer digit.
    let high_reaches = |r: &Big, m_plus: &Big, s: &Big| match r.sum_cmp(m_plus, s) {
        Ordering::Greater => true,
        Ordering::Equal => even,
        Ordering::Less => false,
    };
    let mut k = 0;
    while high_reaches(&r, &m_plus, &s) {
        s.mul_small(10);
        k += 1;
    }
    loop {
        let mut high = r.clone();
        high.add(&m_plus).mul_small(10);
        if high.cmp(&s) == Ordering::Greater || (even && high.cmp(&s) == Ordering::Equal) {
            break;
        }
        r.mul_small(10);
        m_plus.mul_small(10);
        m_minus.mul_small(10);
        k -= 1;
    }
    let mut n = 0;
    loop {
        r.mul_small(10);
        m_plus.mul_small(10);
        m_minus.mul_small(10);
        let mut digit = 0;
        while r.cmp(&s) != Ordering::Less {
            r.sub(&s);
            digit += 1;
        }
        let low = match r.cmp(&m_minus) {
            Ordering::Less => true,
            Ordering::Equal => even,
            Ordering::Greater => false,
        };
        let high = high_reaches(&r, &m_plus, &s);
        let round_up = match (low, high) {
            (false, false) => {
                out[n] = digit;
                n += 1;
                continue;
            }
            (true, false) => false,
            (false, true) => true,
            // Both digits read back: the nearer (2r against s), up on a tie as core does.
            (true, true) => r.clone().add(&r).cmp(&s) != Ordering::Less,
        };
        // With k as found above a digit never rounds up past 9 (Steele & White).
        out[n] = digit + round_up as u8;
        debug_assert!(out[n] <= 9);
        return (n + 1, k);
    }
}

impl fmt::Display for Shortest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.negative() { "-" } else { "" };
        let p = match self.class() {
            Class::Zero => return write!(f, "{sign}0"),
            Class::Infinite => return write!(f, "{sign}inf"),
            Class::Nan => return f.write_str("NaN"),
            Class::Finite(p) => p,
        };
        let mut digits = [0u8; 17];
        let (n, k) = shortest_digits(&p, &mut digits);
        let mut text = [b'0'; 17];
        for (t, d) in text.iter_mut().zip(&digits[..n]) {
            *t = b'0' + d;
        }
        // ASCII digits only.
        let text = core::str::from_utf8(&text[..n]).unwrap_or("");
        f.write_str(sign)?;
        let zeros = |f: &mut fmt::Formatter<'_>, count: usize| {
            (0..count).try_for_each(|_| f.write_str("0"))
        };
        if k <= 0 {
            f.write_str("0.")?;
            zeros(f, (-k) as usize)?;
            f.write_str(text)
        } else if (k as usize) < n {
            let (int, frac) = text.split_at(k as usize);
            write!(f, "{int}.{frac}")
        } else {
            f.write_str(text)?;
            zeros(f, k as usize - n)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Decimal -> f64

/// Most significant digits [`parse_f64`] takes: every number the JSON reader accepts
/// (`json::MAX_NUMBER` bytes) fits, and within it the result is exact.
pub const MAX_DIGITS: usize = 64;

/// The `f64` nearest a JSON number (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`), ties to
/// even, `±inf` beyond the largest float; `None` for other text or more than [`MAX_DIGITS`]
/// significant digits.
pub fn parse_f64(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let negative = b.first() == Some(&b'-');
    let mut p = negative as usize;
    let run = |p: usize| b[p..].iter().take_while(|c| c.is_ascii_digit()).count();
    let int = run(p);
    if int == 0 || (int > 1 && b[p] == b'0') {
        return None;
    }
    let int_digits = &b[p..p + int];
    p += int;
    let mut frac_digits: &[u8] = &[];
    if b.get(p) == Some(&b'.') {
        let n = run(p + 1);
        if n == 0 {
            return None;
        }
        frac_digits = &b[p + 1..p + 1 + n];
        p += 1 + n;
    }
    // The written exponent, saturated: anything past ±100,000 is far outside f64 either way.
    let mut exp: i64 = 0;
    if matches!(b.get(p), Some(b'e' | b'E')) {
        p += 1;
        let minus = b.get(p) == Some(&b'-');
        p += matches!(b.get(p), Some(b'+' | b'-')) as usize;
        let n = run(p);
        if n == 0 {
            return None;
        }
        for &c in &b[p..p + n] {
            exp = (exp * 10 + (c - b'0') as i64).min(100_000);
        }
        exp = if minus { -exp } else { exp };
        p += n;
    }
    if p != b.len() {
        return None;
    }
    // value = digits · 10^(exp - fraction digits), leading zeros dropped.
    let all = int_digits.iter().chain(frac_digits);
    let significant: usize = all.clone().skip_while(|&&c| c == b'0').count();
    if significant > MAX_DIGITS {
        return None;
    }
    let mut digits = Big::from_u64(0);
    for &c in all {
        digits.mul_small(10).add(&Big::from_u64((c - b'0') as u64));
    }
    let exp10 = exp - frac_digits.len() as i64;
    let magnitude = if digits.is_zero() {
        0.0
    } else if significant as i64 + exp10 > 310 {
        f64::INFINITY
    } else if significant as i64 + exp10 < -330 {
        0.0
    } else {
        nearest(digits, exp10 as i32)
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// `digits · 10^exp10` (non-zero, below `10^310`, at least `10^-331`) rounded to the nearest
/// f64: the value as `q · 2^-k` with `q` exact or `floor` of the exact quotient (then `sticky`:
/// something was left), rounded at the f64's precision there (53 bits, fewer for subnormals).
fn nearest(mut digits: Big, exp10: i32) -> f64 {
    let (q, k, sticky) = if exp10 >= 0 {
        digits.mul_pow10(exp10 as u32);
        (digits, 0, false)
    } else {
        // q = floor(digits · 2^k / 10^-exp10), by restoring division.
        let mut divisor = Big::from_u64(1);
        divisor.mul_pow10((-exp10) as u32);
        // Scale either side so the quotient has 55 or 56 bits (k < 0: digits alone had more).
        let k = 55 + divisor.bit_len() as i32 - digits.bit_len() as i32;
        if k >= 0 {
            digits.shl(k as u32);
        } else {
            divisor.shl((-k) as u32);
        }
        let top = 56;
        divisor.shl(top);
        let mut q = 0u64;
        for _ in 0..=top {
            q <<= 1;
            if digits.cmp(&divisor) != Ordering::Less {
                digits.sub(&divisor);
                q |= 1;
            }
            divisor.shr1();
        }
        (Big::from_u64(q), k, !digits.is_zero())
    };
    // The leading bit of q is 2^lead; below 2^-1022 the precision shrinks by a bit per binade.
    let lead = q.bit_len() as i32 - 1 - k;
    if lead > 1023 {
        return f64::INFINITY;
    }
    let precision = if lead >= -1022 {
        53
    } else {
        53 - (-1022 - lead)
    };
    if precision < 0 {
        return 0.0;
    }
    let drop = q.bit_len() as i32 - precision;
    let mut mant = if drop <= 0 {
        q.bits_at(0) << -drop
    } else {
        let half = q.bit(drop as u32 - 1);
        let rest = sticky || q.any_below(drop as u32 - 1);
        let m = q.bits_at(drop as u32);
        m + (half && (rest || m & 1 == 1)) as u64
    };
    let mut lead = lead;
    if precision < 53 {
        // Subnormal: the value is mant · 2^-1074, which is also its bit pattern (a carry into
        // bit 52 is the smallest normal).
        return f64::from_bits(mant);
    }
    if mant == 1 << 53 {
        mant >>= 1;
        lead += 1;
        if lead > 1023 {
            return f64::INFINITY;
        }
    }
    f64::from_bits(((lead + 1023) as u64) << 52 | (mant & ((1 << 52) - 1)))
}

#[cfg(test)]
mod tests;
