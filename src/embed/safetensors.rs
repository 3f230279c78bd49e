//! A reader for safetensors files (hostile input), zero-copy.
//!
//! The format, in the order it is read:
//! 1. 8 bytes: `N`, the header length, little-endian u64 (capped at [`MAX_HEADER`]).
//! 2. `N` bytes: a JSON object. Each key is a tensor name whose value is
//!    `{"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}`; the optional key
//!    `__metadata__` maps strings to strings and is skipped.
//! 3. The data: every tensor's bytes at `begin..end`, relative to the end of the header,
//!    little-endian, row-major.
//!
//! Every tensor is checked: a known dtype, at most [`MAX_DIMS`] dimensions, the element count
//! times the dtype size computed without overflow and equal to `end - begin`, and
//! `begin <= end <= data length`. Tensors are returned as borrowed byte slices.

use crate::error::{Result, Status};
use crate::json::{Kind, Reader};
use crate::{bail, err};
use alloc::vec::Vec;

/// Largest header accepted (the format's own limit is 100 MB).
pub const MAX_HEADER: u64 = 100 << 20;
/// Most tensors in one file.
pub const MAX_TENSORS: usize = 1 << 16;
/// Most dimensions of one tensor.
pub const MAX_DIMS: usize = 8;
/// Longest tensor name, in bytes.
pub const MAX_NAME: usize = 1024;

/// Element types (the ones the format names; others are rejected).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    Bool,
    U8,
    I8,
    I16,
    U16,
    F16,
    Bf16,
    I32,
    U32,
    F32,
    I64,
    U64,
    F64,
}

impl Dtype {
    fn parse(name: &str) -> Option<Dtype> {
        Some(match name {
            "BOOL" => Dtype::Bool,
            "U8" => Dtype::U8,
            "I8" => Dtype::I8,
            "I16" => Dtype::I16,
            "U16" => Dtype::U16,
            "F16" => Dtype::F16,
            "BF16" => Dtype::Bf16,
            "I32" => Dtype::I32,
            "U32" => Dtype::U32,
            "F32" => Dtype::F32,
            "I64" => Dtype::I64,
            "U64" => Dtype::U64,
            "F64" => Dtype::F64,
            _ => return None,
        })
    }

    pub const fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 => 1,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }
}

/// One tensor: its name, type, shape and bytes, all borrowed from the file.
#[derive(Clone, Debug)]
pub struct Tensor<'a> {
    pub name: &'a str,
    pub dtype: Dtype,
    dims: [u64; MAX_DIMS],
    ndim: usize,
    pub data: &'a [u8],
}

impl Tensor<'_> {
    pub fn shape(&self) -> &[u64] {
        &self.dims[..self.ndim]
    }
    /// Number of elements (checked against the byte length at parse time).
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// The tensors of one file, in header order.
pub struct SafeTensors<'a> {
    pub tensors: Vec<Tensor<'a>>,
}

impl<'a> SafeTensors<'a> {
    pub fn parse(file: &'a [u8]) -> Result<SafeTensors<'a>> {
        let Some(len_bytes) = file.get(..8) else {
            bail!(
                Status::BadFormat,
                "safetensors: file of {} bytes has no header length",
                file.len()
            );
        };
        let header_len = u64::from_le_bytes(len_bytes.try_into().unwrap_or([0xFF; 8]));
        if header_len > MAX_HEADER {
            bail!(
                Status::BadFormat,
                "safetensors: header length {header_len} exceeds {MAX_HEADER}"
            );
        }
        let header_end = 8 + header_len as usize;
        let Some(header) = file.get(8..header_end) else {
            bail!(
                Status::BadFormat,
                "safetensors: header of {header_len} bytes runs past the file end ({} bytes)",
                file.len()
            );
        };
        let data = &file[header_end..];

        let mut r = Reader::new(header)?;
        if r.peek()? != Kind::Object {
            bail!(
                Status::BadFormat,
                "safetensors: header is not a JSON object"
            );
        }
        r.begin_object()?;
        let mut tensors = Vec::new();
        while let Some(key) = r.next_key()? {
            if key.eq_str("__metadata__") {
                r.skip_value()?;
                continue;
            }
            let Some(name) = key.as_str() else {
                bail!(
                    Status::Unsupported,
                    "safetensors: escaped tensor names are not supported"
                );
            };
            if name.len() > MAX_NAME {
                bail!(
                    Status::BadFormat,
                    "safetensors: tensor name of {} bytes",
                    name.len()
                );
            }
            if tensors.len() >= MAX_TENSORS {
                bail!(
                    Status::BadFormat,
                    "safetensors: more than {MAX_TENSORS} tensors"
                );
            }
            if tensors.iter().any(|t: &Tensor| t.name == name) {
                bail!(
                    Status::BadFormat,
                    "safetensors: tensor '{name}' appears twice"
                );
            }
            let t = read_tensor(&mut r, name, data)?;
            tensors
                .try_reserve(1)
                .map_err(|_| err!(Status::OutOfMemory, "safetensors table"))?;
            tensors.push(t);
        }
        r.finish()?;
        Ok(SafeTensors { tensors })
    }

    pub fn get(&self, name: &str) -> Option<&Tensor<'a>> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

fn read_tensor<'a>(r: &mut Reader<'a>, name: &'a str, data: &'a [u8]) -> Result<Tensor<'a>> {
    let mut dtype = None;
    let mut dims = [0u64; MAX_DIMS];
    let mut ndim = None;
    let mut offsets = None;
    if r.peek()? != Kind::Object {
        bail!(
            Status::BadFormat,
            "safetensors: tensor '{name}' is not an object"
        );
    }
    r.begin_object()?;
    while let Some(key) = r.next_key()? {
        if key.eq_str("dtype") {
            if r.peek()? != Kind::String {
                bail!(
                    Status::BadFormat,
                    "safetensors: tensor '{name}': dtype is not a string"
                );
            }
            let s = r.read_str()?;
            let parsed = s.as_str().and_then(Dtype::parse);
            let Some(d) = parsed else {
                bail!(
                    Status::Unsupported,
                    "safetensors: tensor '{name}' has an unknown dtype"
                );
            };
            dtype = Some(d);
        } else if key.eq_str("shape") {
            r.begin_array()?;
            let mut n = 0;
            while r.next_item()? {
                if n == MAX_DIMS {
                    bail!(
                        Status::BadFormat,
                        "safetensors: tensor '{name}' has more than {MAX_DIMS} dimensions"
                    );
                }
                dims[n] = r.read_u64()?;
                n += 1;
            }
            ndim = Some(n);
        } else if key.eq_str("data_offsets") {
            r.begin_array()?;
            let mut v = [0u64; 2];
            for slot in v.iter_mut() {
                if !r.next_item()? {
                    bail!(
                        Status::BadFormat,
                        "safetensors: tensor '{name}': data_offsets needs two numbers"
                    );
                }
                *slot = r.read_u64()?;
            }
            if r.next_item()? {
                bail!(
                    Status::BadFormat,
                    "safetensors: tensor '{name}': data_offsets has more than two numbers"
                );
            }
            offsets = Some(v);
        } else {
            r.skip_value()?;
        }
    }
    let (Some(dtype), Some(ndim), Some([begin, end])) = (dtype, ndim, offsets) else {
        bail!(
            Status::BadFormat,
            "safetensors: tensor '{name}' lacks dtype, shape or data_offsets"
        );
    };
    let mut count: u64 = 1;
    for &d in &dims[..ndim] {
        count = count.checked_mul(d).ok_or_else(|| {
            err!(
                Status::BadFormat,
                "safetensors: tensor '{name}': shape overflows"
            )
        })?;
    }
    let bytes = count.checked_mul(dtype.size() as u64);
    if begin > end || end > data.len() as u64 || bytes != Some(end - begin) {
        bail!(
            Status::BadFormat,
            "safetensors: tensor '{name}': {count} elements of {dtype:?} do not fit data_offsets [{begin}, {end}] within {} data bytes",
            data.len()
        );
    }
    Ok(Tensor {
        name,
        dtype,
        dims,
        ndim,
        data: &data[begin as usize..end as usize],
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;

    /// Builds a file from a header text and a data size (test helper).
    pub(crate) fn file(header: &str, data_len: usize) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&(header.len() as u64).to_le_bytes());
        f.extend_from_slice(header.as_bytes());
        f.resize(f.len() + data_len, 7);
        f
    }

    #[test]
    fn reads_tensors() {
        let h = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"I8","shape":[],"data_offsets":[24,25]}}"#;
        let f = file(h, 25);
        let st = SafeTensors::parse(&f).unwrap();
        let a = st.get("a").unwrap();
        assert_eq!(
            (a.dtype, a.shape(), a.len()),
            (Dtype::F32, &[2u64, 3][..], 6)
        );
        assert_eq!(st.get("b").unwrap().shape(), &[] as &[u64]);
        assert!(st.get("c").is_none());
    }

    #[test]
    fn rejects_hostile_headers() {
        let t = |dtype: &str, shape: &str, off: &str| {
            format!(r#"{{"t":{{"dtype":"{dtype}","shape":{shape},"data_offsets":{off}}}}}"#)
        };
        let cases: [(String, usize); 9] = [
            (t("F32", "[4]", "[0,16]"), 15),
            (t("F32", "[4]", "[0,12]"), 16),
            (t("F32", "[4294967296,4294967296,4294967296]", "[0,16]"), 16),
            (t("F32", "[18446744073709551615]", "[0,16]"), 16),
            (t("X9", "[4]", "[0,16]"), 16),
            (t("F32", "[4]", "[16,0]"), 16),
            (t("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 16),
            (t("F32", "[4]", "[0,16,3]"), 16),
            ("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}".into(), 16),
        ];
        for (h, n) in &cases {
            assert!(SafeTensors::parse(&file(h, *n)).is_err(), "accepted {h}");
        }
        // Header length past the end, or absurd.
        let mut f = file(&t("F32", "[1]", "[0,4]"), 4);
        f[..8].copy_from_slice(&1000u64.to_le_bytes());
        assert!(SafeTensors::parse(&f).is_err());
        f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(SafeTensors::parse(&f).is_err());
        assert!(SafeTensors::parse(&f[..5]).is_err());
        // Every truncation of a good file fails cleanly.
        let good = file(&t("F32", "[4]", "[0,16]"), 16);
        for cut in 0..good.len() {
            assert!(SafeTensors::parse(&good[..cut]).is_err());
        }
    }
}
