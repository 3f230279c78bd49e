//! Weight types and the kernels over them.
//!
//! [`GgmlType`] is the tensor type id used by GGUF files (ggml's `enum ggml_type`), with the
//! block geometry needed to size a tensor. Which types the engine can *compute* with is decided
//! by the kernels in this module; the GGUF reader only needs sizes to bounds-check the file.

/// ggml tensor type ids, as stored in GGUF tensor infos. Ids 4, 5 and 31..33, 36..38 were
/// removed from ggml and never appear in current files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
    /// A type id this build knows by name only (IQ*, TQ*, MXFP4, ...) or not at all.
    Other(u32),
}

impl GgmlType {
    pub const fn from_id(id: u32) -> GgmlType {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            9 => GgmlType::Q8_1,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            15 => GgmlType::Q8K,
            24 => GgmlType::I8,
            25 => GgmlType::I16,
            26 => GgmlType::I32,
            27 => GgmlType::I64,
            28 => GgmlType::F64,
            30 => GgmlType::BF16,
            other => GgmlType::Other(other),
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q2K => "Q2_K",
            GgmlType::Q3K => "Q3_K",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::Q8K => "Q8_K",
            GgmlType::I8 => "I8",
            GgmlType::I16 => "I16",
            GgmlType::I32 => "I32",
            GgmlType::I64 => "I64",
            GgmlType::F64 => "F64",
            GgmlType::BF16 => "BF16",
            GgmlType::Other(16) => "IQ2_XXS",
            GgmlType::Other(17) => "IQ2_XS",
            GgmlType::Other(18) => "IQ3_XXS",
            GgmlType::Other(19) => "IQ1_S",
            GgmlType::Other(20) => "IQ4_NL",
            GgmlType::Other(21) => "IQ3_S",
            GgmlType::Other(22) => "IQ2_S",
            GgmlType::Other(23) => "IQ4_XS",
            GgmlType::Other(29) => "IQ1_M",
            GgmlType::Other(34) => "TQ1_0",
            GgmlType::Other(35) => "TQ2_0",
            GgmlType::Other(39) => "MXFP4",
            GgmlType::Other(_) => "unknown",
        }
    }

    /// `(elements per block, bytes per block)`, or `None` for a type this build cannot size.
    pub const fn block_geometry(self) -> Option<(usize, usize)> {
        Some(match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q8_1 => (32, 36),
            GgmlType::Q2K => (256, 84),
            GgmlType::Q3K => (256, 110),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            GgmlType::Q8K => (256, 292),
            GgmlType::I8 => (1, 1),
            GgmlType::I16 => (1, 2),
            GgmlType::I32 => (1, 4),
            GgmlType::I64 | GgmlType::F64 => (1, 8),
            GgmlType::Other(_) => return None,
        })
    }

    /// Bytes of a row of `n` elements, or `None` if `n` is not a whole number of blocks or the
    /// type cannot be sized.
    pub const fn row_bytes(self, n: u64) -> Option<u64> {
        match self.block_geometry() {
            Some((elems, bytes)) if n % elems as u64 == 0 => (n / elems as u64).checked_mul(bytes as u64),
            _ => None,
        }
    }
}
