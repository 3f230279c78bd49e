#!/usr/bin/env python3
"""Reference vectors for the quant tests (src/quant/tests.rs), written to vectors.bin.

Needs `pip install gguf numpy` (checked with gguf 0.19.0, numpy 2.4). Run from anywhere:

    python3 src/quant/testdata/gen_vectors.py

What is in the file, and where each number comes from:

- deq/<TYPE>/blocks, deq/<TYPE>/values: random blocks of every supported weight type (random
  quant bytes, random finite f16 scales including zero and subnormal ones) and the `gguf`
  package's numpy dequantization of them (`gguf.quants.dequantize`).
- act/x: an activation vector of 512 floats (varied scales per block, a zero block, a block of
  exact ties), and what ggml rounds it to before a product:
  - act/f16: numpy `astype(float16)` (round to nearest even), as f16 bits;
  - act/bf16: the gguf package's BF16 quantizer (a port of ggml_compute_fp32_to_bf16);
  - act/q8_0_ref/{d,qs}: the gguf package's Q8_0 quantizer (bit-exact with ggml's
    quantize_row_q8_0_ref: multiplier 1/d, roundf);
  - act/q8_0/{d,qs}, act/q8_1/{d,s,qs}: ggml-cpu's x86 AVX quantize_row_q8_0 / _q8_1 restated in
    numpy (multiplier 127/amax, round half to even; s = f16(d * sum(q)));
  - act/q8_k/{d,qs,bsums}: ggml's quantize_row_q8_K_ref restated in numpy (iscale = -127/max of
    the value of largest magnitude, round half to even, d = 1/iscale).
- half/f32, half/f16: f32 bit patterns across every f16 range (normals, subnormals, ties,
  overflow, infinities, NaN) and numpy's float16 conversion of them.

File format: a sequence of records `u32 name_len, name (utf-8), u32 dtype, u32 count, data`
(little-endian), dtype 0 = u8, 1 = i8, 2 = u16, 3 = i16, 4 = f32.
"""

import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors.bin")
rng = np.random.default_rng(20240607)

DTYPES = {np.dtype(np.uint8): 0, np.dtype(np.int8): 1, np.dtype(np.uint16): 2, np.dtype(np.int16): 3, np.dtype(np.float32): 4}
records = []


def put(name, array):
    array = np.ascontiguousarray(array)
    code = DTYPES[array.dtype]
    name_bytes = name.encode()
    records.append(struct.pack("<I", len(name_bytes)) + name_bytes + struct.pack("<II", code, array.size) + array.astype(array.dtype.newbyteorder("<")).tobytes())


def random_f16_scales(n):
    """Finite f16 scales, both signs, magnitudes 2^-18..2^2, plus a zero and a subnormal."""
    mags = 2.0 ** rng.uniform(-18, 2, n)
    signs = rng.choice([-1.0, 1.0], n)
    h = (mags * signs).astype(np.float16)
    if n >= 4:
        h[1] = np.float16(0.0)
        h[2] = np.float16(3.0e-6)  # subnormal in f16
    return h.view(np.uint8).reshape(n, 2)


# (type, values per block, bytes per block, byte offsets of f16 scale fields, blocks)
LAYOUTS = [
    (T.Q4_0, 32, 18, [0], 4),
    (T.Q4_1, 32, 20, [0, 2], 4),
    (T.Q5_0, 32, 22, [0], 4),
    (T.Q5_1, 32, 24, [0, 2], 4),
    (T.Q8_0, 32, 34, [0], 4),
    (T.Q4_K, 256, 144, [0, 2], 2),
    (T.Q5_K, 256, 176, [0, 2], 2),
    (T.Q6_K, 256, 210, [208], 2),
]

for qtype, block_values, block_bytes, scale_offsets, n_blocks in LAYOUTS:
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        blocks[:, off:off + 2] = random_f16_scales(n_blocks)
    values = quants.dequantize(blocks, qtype).reshape(-1).astype(np.float32)
    assert values.size == n_blocks * block_values and np.all(np.isfinite(values)), qtype.name
    put(f"deq/{qtype.name}/blocks", blocks.reshape(-1))
    put(f"deq/{qtype.name}/values", values)

# Float weight types: 100 values (not a multiple of 8 or 16, to reach the kernels' tails).
n_float = 100
f32_bits = rng.integers(0, 2**32, size=n_float, dtype=np.uint64).astype(np.uint32)
f32_bits = np.where((f32_bits & 0x7F800000) == 0x7F800000, f32_bits & 0xBFFFFFFF, f32_bits)  # no inf/NaN
put("deq/F32/blocks", f32_bits.view(np.uint8))
put("deq/F32/values", quants.dequantize(f32_bits.view(np.uint8), T.F32).astype(np.float32))
for qtype in (T.F16, T.BF16):
    bits = rng.integers(0, 2**16, size=n_float, dtype=np.uint32).astype(np.uint16)
    exp_mask = 0x7C00 if qtype == T.F16 else 0x7F80
    bits = np.where((bits & exp_mask) == exp_mask, bits & ~np.uint16(0x4000), bits)  # no inf/NaN
    bits[3] = 0x0001  # smallest subnormal
    bits[4] = 0x83FF if qtype == T.F16 else 0x807F  # largest negative subnormal
    put(f"deq/{qtype.name}/blocks", bits.view(np.uint8))
    put(f"deq/{qtype.name}/values", quants.dequantize(bits.view(np.uint8), qtype).astype(np.float32))

# Activations: 512 values = 16 blocks of 32 = 2 blocks of 256.
x = np.empty(512, dtype=np.float32)
for b in range(16):
    x[32 * b:32 * b + 32] = rng.normal(0.0, 10.0 ** rng.uniform(-3, 2), 32)
x[64:96] = 0.0  # a zero block
x[96:128] = np.arange(32, dtype=np.float32) - 15.5  # ties
x[96] = -127.0  # amax 127: x * 127/amax = x exactly, so the .5s are exact ties
x[200] = -3.0 * np.abs(x[192:224]).max()  # largest magnitude negative
x = x.astype(np.float32)
put("act/x", x)

put("act/f16", x.astype(np.float16).view(np.uint16))
put("act/bf16", quants.quantize(x, T.BF16).view(np.uint16))

q8_0_ref = quants.quantize(x, T.Q8_0).reshape(16, 34)
put("act/q8_0_ref/d", q8_0_ref[:, 0:2].copy().view(np.uint16).reshape(-1))
put("act/q8_0_ref/qs", q8_0_ref[:, 2:].copy().view(np.int8).reshape(-1))

# ggml-cpu x86 (AVX) quantize_row_q8_0 / _q8_1
blocks = x.reshape(16, 32)
amax = np.abs(blocks).max(axis=1).astype(np.float32)
d = (amax / np.float32(127.0)).astype(np.float32)
with np.errstate(divide="ignore"):
    mult = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
q = np.rint(blocks * mult[:, None]).astype(np.int32)  # rint: round half to even
q = np.clip(q, -128, 127)
put("act/q8_0/d", d.astype(np.float16).view(np.uint16))
put("act/q8_0/qs", q.astype(np.int8).reshape(-1))
s = (d * q.sum(axis=1).astype(np.float32)).astype(np.float32)
put("act/q8_1/s", s.astype(np.float16).view(np.uint16))

# ggml quantize_row_q8_K_ref
kd, kq, kb = [], [], []
for blk in x.reshape(2, 256):
    i = int(np.argmax(np.abs(blk)))  # first of the largest magnitudes, as the strict `>` scan
    mx = blk[i]
    if mx == 0:
        kd.append(0.0)
        kq.append(np.zeros(256, np.int32))
    else:
        iscale = np.float32(-127.0) / np.float32(mx)
        v = np.rint((iscale * blk).astype(np.float32)).astype(np.int32)
        kq.append(np.minimum(127, v))
        kd.append(np.float32(1.0) / iscale)
    kb.append(kq[-1].reshape(16, 16).sum(axis=1))
put("act/q8_k/d", np.array(kd, dtype=np.float32))
put("act/q8_k/qs", np.concatenate(kq).astype(np.int8))
put("act/q8_k/bsums", np.concatenate(kb).astype(np.int16))

# f32 -> f16 conversion across all ranges.
parts = [
    rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32),  # anything (NaN, inf included)
    (rng.integers(0x33000000, 0x38800000, 256, dtype=np.uint64)).astype(np.uint32),  # f16 subnormal range
    (rng.integers(0x38800000, 0x47800000, 256, dtype=np.uint64)).astype(np.uint32),  # f16 normal range
]
# exact ties: the 13 dropped bits equal 0x1000 (normal range) with both parities
ties = (rng.integers(0x38800000 >> 13, 0x477FE000 >> 13, 128, dtype=np.uint64) << 13 | 0x1000).astype(np.uint32)
edges = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x477FE000, 0x477FEFFF, 0x477FF000,
                  0x477FFFFF, 0x47800000, 0x38800000, 0x387FFFFF, 0x387FE000, 0x33000000, 0x33000001,
                  0x32FFFFFF, 0x33800000, 0x33C00000, 0x00000001, 0x7FC00000, 0x7F800001], dtype=np.uint32)
f32_in = np.concatenate(parts + [ties, edges, edges | 0x80000000]).astype(np.uint32)
with np.errstate(over="ignore", invalid="ignore"):
    f16_out = f32_in.view(np.float32).astype(np.float16).view(np.uint16)
put("half/f32", f32_in.view(np.float32))
put("half/f16", f16_out)

with open(OUT, "wb") as f:
    for r in records:
        f.write(r)
print(f"wrote {OUT}: {sum(len(r) for r in records)} bytes, {len(records)} records")
