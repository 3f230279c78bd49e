"""Derives the constants of src/math.rs (run: python3 src/math/gen_constants.py).

Needs mpmath (and numpy for the f32 polynomial fit). Prints each constant as the bit pattern
that math.rs writes with `f64::from_bits` / `f32::from_bits`, with its decimal value. Nothing
here is needed at build or test time; it documents where the numbers come from.
"""
import struct
import mpmath as mp
import numpy as np

mp.mp.prec = 1600


def f64_bits(v):
    return struct.unpack("<Q", struct.pack("<d", float(v)))[0]


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", float(np.float32(float(v)))))[0]


def rnd64(v):
    """v rounded to the nearest f64 (mpmath -> float rounds to nearest)."""
    return mp.mpf(float(v))


def show64(name, v):
    print(f"{name:12} = f64::from_bits(0x{f64_bits(v):016X})  // {float(v)!r}")


def show32(name, v):
    print(f"{name:12} = f32::from_bits(0x{f32_bits(v):08X})  // {float(np.float32(float(v)))!r}")


def chop(v, bits):
    """v truncated to `bits` significant bits (toward zero)."""
    e = mp.floor(mp.log(abs(v), 2))
    q = mp.mpf(2) ** (e - bits + 1)
    return mp.floor(v / q) * q


ln2 = mp.log(2)
pio2 = mp.pi / 2

print("# f64 exp / log")
hi = chop(ln2, 42)  # k * LN2_HI exact for |k| < 2^11
show64("LN2_HI", hi)
show64("LN2_LO", ln2 - hi)
show64("LOG2_E", 1 / ln2)
show64("SQRT2", mp.sqrt(2))

print("# f64 sin/cos: pi/2 in four parts (33, 33, 33, 53 bits)")
rest = pio2
for i in range(1, 4):
    part = chop(rest, 33)
    show64(f"PIO2_{i}", part)
    rest -= part
show64("PIO2_4", rest)
show64("TWO_OVER_PI", 2 / mp.pi)
hi = rnd64(pio2)
show64("PIO2_HI", hi)
show64("PIO2_LO", pio2 - hi)

print("# bits of 2/pi after the binary point, 64 per word (Payne-Hanek table)")
words = 20
scaled = int(mp.floor((2 / mp.pi) * mp.mpf(2) ** (64 * words)))
ws = [(scaled >> (64 * (words - 1 - i))) & (2**64 - 1) for i in range(words)]
for i in range(0, words, 4):
    print("    " + " ".join(f"0x{w:016X}," for w in ws[i:i + 4]))

print("# f32 exp")
hi = chop(ln2, 16)  # n * LN2_HI_F32 exact for |n| < 2^8
show32("LN2_HI_F32", hi)
show32("LN2_LO_F32", ln2 - hi)
show32("LOG2_E_F32", 1 / ln2)

# exp(r) ~ 1 + r + r^2 P(r) on |r| <= ln2/2 (+ a margin for the rounding of n), P of degree 4,
# fitted by Lawson's iteratively reweighted least squares on the relative error of exp.
R = 0.3466 * 1.002
rs = np.cos(np.linspace(0, np.pi, 4001)) * R
target = np.array([float((mp.exp(mp.mpf(r)) - 1 - r) / (mp.mpf(r) ** 2)) if r != 0 else 0.5 for r in rs])
ex = np.exp(rs)
A = np.vander(rs, 5, increasing=True) * (rs**2 / ex)[:, None]
b = target * rs**2 / ex
w = np.ones_like(rs) / len(rs)
for _ in range(200):
    sw = np.sqrt(w)
    c, *_ = np.linalg.lstsq(A * sw[:, None], b * sw, rcond=None)
    err = np.abs(A @ c - b)
    w = w * err
    w /= w.sum()
c32 = [np.float32(v) for v in c]
approx = np.polyval([float(v) for v in c32[::-1]], rs)
rel = np.max(np.abs(1 + rs + rs**2 * approx - ex) / ex)
print(f"# P(r) degree 4, max relative error of 1 + r + r^2 P(r): {rel:.3e} (2^{np.log2(rel):.1f})")
for i, v in enumerate(c32):
    show32(f"EXPF_P{i}", v)
