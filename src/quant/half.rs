//! IEEE binary16 (`f16`) and bfloat16 (`bf16`) conversions, written by hand.
//!
//! Both directions round the way ggml does on x86 (F16C `vcvtps2ph` with mode 0, and
//! `ggml_compute_fp32_to_bf16`): round to nearest, ties to even; overflow goes to infinity; NaN
//! stays NaN (made quiet). Subnormals are kept, never flushed. No crate is needed for this: the
//! conversions are a few integer operations, and the kernels have SIMD versions of the f16 → f32
//! direction anyway (see `simd128.rs`).
//!
//! Weight blocks store these as little-endian byte pairs ([`F16`]) so that every block struct has
//! alignment 1 and can be viewed in place inside a model file at any offset.

/// An IEEE binary16 value as it lies in a file: two little-endian bytes, alignment 1.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16(pub [u8; 2]);

const _: () = assert!(core::mem::size_of::<F16>() == 2 && core::mem::align_of::<F16>() == 1);

impl F16 {
    #[inline(always)]
    pub fn bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        f16_to_f32(self.bits())
    }
}

/// The exponent bits of a binary16 value: all ones for an infinity or NaN.
pub const F16_EXPONENT: u16 = 0x7c00;

/// Whether binary16 bits `h` hold a finite value (its exponent is not all ones).
#[inline(always)]
pub fn f16_is_finite(h: u16) -> bool {
    h & F16_EXPONENT != F16_EXPONENT
}

/// binary16 bits -> f32, exact for every input (subnormals, infinities and NaN included).
///
/// Normal numbers move the exponent from bias 15 to bias 127. Subnormals (and zero) are
/// `mantissa * 2^-24`, computed as an exact integer-to-float conversion times a power of two, so
/// no f32 subnormal ever enters an arithmetic instruction (those are slow on x86).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let magnitude = (h as u32) & 0x7fff;
    let abs = if magnitude < 0x0400 {
        // zero or subnormal: m * 2^-24
        magnitude as f32 * (1.0 / 16_777_216.0)
    } else if magnitude < 0x7c00 {
        // normal: rebias the exponent (127 - 15 = 112)
        f32::from_bits((magnitude << 13) + (112 << 23))
    } else {
        // infinity or NaN: all-ones exponent, mantissa kept (a NaN stays a NaN)
        f32::from_bits(0x7f80_0000 | ((magnitude & 0x03ff) << 13))
    };
    f32::from_bits(abs.to_bits() | sign)
}

/// 2^112, the step from an f16's exponent bias to an f32's (127 - 15): a finite f16 is
/// [`f16_finite_scaled`] times this.
pub const F16_REBIAS: f32 = f32::from_bits((127 + 112) << 23);

/// The bits of `(h as i16 as i32) << 13` that hold a finite f16 as [`f16_finite_scaled`]: its
/// sign (the top bit), exponent and mantissa where an f32 has them; the three copies of the
/// sign between them are cleared.
pub const F16_SCALED_MASK: u32 = 0x8fff_e000;

/// A finite f16's value over [`F16_REBIAS`], exact: its bits moved to an f32's places without
/// rebiasing the exponent (so a subnormal f16 becomes a subnormal f32). An infinity or NaN
/// comes out as a finite number. The SIMD kernels take four at once from one sign-extending
/// load, a shift and a mask.
#[inline(always)]
pub fn f16_finite_scaled(h: u16) -> f32 {
    f32::from_bits((((h as i16 as i32) << 13) as u32) & F16_SCALED_MASK)
}

/// f32 -> binary16 bits, round to nearest even. (Inlined: the KV cache rounds every value it
/// stores through it.)
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        // NaN: keep the top of the payload, force it quiet
        return sign | 0x7e00 | ((abs >> 13) & 0x03ff) as u16;
    }
    if abs >= 0x477f_f000 {
        // >= 65520 (halfway between 65504 and 65536) rounds to infinity, as do infinities
        return sign | 0x7c00;
    }
    if abs >= 0x3880_0000 {
        // normal in f16 (>= 2^-14): rebias, then round the 13 dropped bits to nearest even.
        // A carry out of the mantissa correctly bumps the exponent.
        let rebased = abs - (112 << 23);
        let round = 0x0fff + ((rebased >> 13) & 1);
        return sign | ((rebased + round) >> 13) as u16;
    }
    // Subnormal or zero in f16: the result is round(x / 2^-24), an integer in 0..=1024 (1024 is
    // the smallest normal, 0x0400, which is the right encoding too).
    let exponent = abs >> 23;
    if exponent < 102 {
        // below 2^-25: less than half the smallest subnormal, rounds to zero
        return sign;
    }
    let mantissa = (abs & 0x007f_ffff) | 0x0080_0000; // value = mantissa * 2^(exponent - 150)
    let shift = 126 - exponent; // 14..=24: value / 2^-24 = mantissa >> shift
    let quotient = mantissa >> shift;
    let remainder = mantissa & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    let rounded = if remainder > half || (remainder == half && quotient & 1 == 1) {
        quotient + 1
    } else {
        quotient
    };
    sign | rounded as u16
}

/// f32 rounded to the nearest binary16 value, returned as f32 (what ggml does to activations
/// before an F16 product).
#[inline]
pub fn round_to_f16(x: f32) -> f32 {
    f16_to_f32(f32_to_f16(x))
}

/// bfloat16 bits -> f32: the top half of an f32.
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 -> bfloat16 bits, round to nearest even; NaN is made quiet (as `ggml_compute_fp32_to_bf16`).
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 0x0040) as u16;
    }
    // Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry into the exponent
    // is the right result (up to infinity). The largest input here, 0xff80_0000 (-inf), plus
    // 0x8000 still fits in u32.
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// f32 rounded to the nearest bfloat16 value, returned as f32.
#[inline]
pub fn round_to_bf16(x: f32) -> f32 {
    bf16_to_f32(f32_to_bf16(x))
}
