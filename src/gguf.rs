//! GGUF reader: a hostile-file parser over bytes already in linear memory, zero-copy.
//!
//! Every string, array and tensor returned borrows from the caller's `&'a [u8]`; tensor data
//! is never copied. The file is user input: every count and length is capped, every
//! offset + size is checked against the buffer, and every failure is a typed [`Error`] whose
//! message names the field (a panic would be a trap in wasm).
//!
//! # Layout (GGUF v2 and v3; all integers little-endian)
//!
//! 1. `magic`: the 4 bytes `"GGUF"`.
//! 2. `version`: u32, 2 or 3 (v1 had 32-bit counts and is rejected; a byte-swapped version
//!    means a big-endian file, also rejected).
//! 3. `tensor_count`: u64.
//! 4. `kv_count`: u64.
//! 5. `kv_count` metadata entries, each:
//!    1. `key`: string (a string is a u64 byte length followed by that many bytes, no NUL);
//!    2. `value_type`: u32;
//!    3. the value: `0` u8, `1` i8, `2` u16, `3` i16, `4` u32, `5` i32, `6` f32,
//!       `7` bool (one byte, 0 or 1), `8` string, `9` array, `10` u64, `11` i64, `12` f64.
//!       An array is `elem_type: u32`, `count: u64`, then `count` values of that type, packed
//!       (arrays may nest).
//! 6. `tensor_count` tensor infos, each:
//!    1. `name`: string;
//!    2. `n_dims`: u32 (1..=4);
//!    3. `dims`: `n_dims` × u64, innermost (contiguous) first, as ggml's `ne[0..]`;
//!    4. `type`: u32, a ggml type id ([`GgmlType`]);
//!    5. `offset`: u64, from the start of the data section, a multiple of the alignment.
//! 7. Padding up to a multiple of `general.alignment` (a u32 key, a power of two, default 32).
//! 8. The data section: the tensors' bytes. A tensor of `dims` and type `T` takes
//!    `row_bytes(T, dims[0]) * dims[1] * dims[2] * dims[3]` bytes.
//!
//! # What is rejected
//!
//! Truncation anywhere; unknown value types; strings longer than [`MAX_STRING_BYTES`]; arrays
//! longer than [`MAX_ARRAY_LEN`] or nested deeper than [`MAX_ARRAY_DEPTH`]; more than
//! [`MAX_KV_COUNT`] keys or [`MAX_TENSOR_COUNT`] tensors; non-UTF-8 keys or tensor names;
//! duplicate keys or tensor names; bools other than 0/1; a bad `general.alignment`; more than 4
//! dims; element counts that overflow; a first dim that is not a whole number of blocks;
//! misaligned, out-of-bounds or overlapping tensor data. A tensor whose type this build cannot
//! size (IQ*, TQ*, unknown ids) is [`Status::Unsupported`], naming the tensor and the type.

use alloc::vec::Vec;
use core::fmt;

use crate::error::{Result, Status};
use crate::quant::{self, GgmlType};
use crate::sort::heapsort_by;
use crate::{bail, err};

/// `"GGUF"` read as a little-endian u32.
const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;

// The caps on what a file may ask for.
/// Longest string (key, value, array element, tensor name) accepted, in bytes.
pub const MAX_STRING_BYTES: u64 = 16 << 20;
/// Longest key accepted, in bytes (the GGUF spec limits keys to 65535).
pub const MAX_KEY_BYTES: u64 = 65535;
/// Longest tensor name accepted, in bytes (ggml's `GGML_MAX_NAME` is 64 with the NUL).
pub const MAX_TENSOR_NAME_BYTES: u64 = 255;
/// Most elements in one array (vocabularies have ~50k..260k tokens, merges up to ~500k).
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Deepest array nesting accepted (an array of arrays is depth 2).
pub const MAX_ARRAY_DEPTH: u32 = 4;
/// Most metadata entries.
pub const MAX_KV_COUNT: u64 = 1 << 16;
/// Most tensors.
pub const MAX_TENSOR_COUNT: u64 = 1 << 16;
/// Most dims of a tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// The type tag of a metadata value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    pub const fn from_id(id: u32) -> Option<ValueType> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// Bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub const fn fixed_size(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }
}

/// One metadata value. Strings are raw bytes (the file does not promise UTF-8; use
/// [`Value::as_str`] or the typed getters, which check).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(&'a [u8]),
    Array(Array<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::Str(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer value, widened; `None` for other types.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v as i128,
            Value::I8(v) => v as i128,
            Value::U16(v) => v as i128,
            Value::I16(v) => v as i128,
            Value::U32(v) => v as i128,
            Value::I32(v) => v as i128,
            Value::U64(v) => v as i128,
            Value::I64(v) => v as i128,
            _ => return None,
        })
    }

    /// A string value that is valid UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::Str(b) => core::str::from_utf8(b).ok(),
            _ => None,
        }
    }
}

/// An array value: `len` elements of `elem_type`, packed in `bytes` exactly as in the file.
/// The whole array was walked and checked by [`Gguf::parse`], so iterating cannot fail.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Array<'a> {
    elem_type: ValueType,
    len: usize,
    bytes: &'a [u8],
}

impl<'a> Array<'a> {
    pub fn elem_type(&self) -> ValueType {
        self.elem_type
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The packed element bytes as stored in the file.
    pub fn raw_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Every element as a [`Value`] (any element type, nested arrays included).
    pub fn values(&self) -> ValueIter<'a> {
        ValueIter {
            cursor: Cursor::new(self.bytes),
            elem_type: self.elem_type,
            left: self.len,
        }
    }

    /// The elements of a string array as raw bytes; `None` if the elements are not strings.
    pub fn strings(&self) -> Option<StrIter<'a>> {
        (self.elem_type == ValueType::String).then(|| StrIter {
            cursor: Cursor::new(self.bytes),
            left: self.len,
        })
    }

    /// The elements of an i32 array; `None` for another element type.
    pub fn i32s(&self) -> Option<impl ExactSizeIterator<Item = i32> + 'a> {
        self.fixed::<4>(ValueType::I32)
            .map(|it| it.map(i32::from_le_bytes))
    }
    /// The elements of a u32 array; `None` for another element type.
    pub fn u32s(&self) -> Option<impl ExactSizeIterator<Item = u32> + 'a> {
        self.fixed::<4>(ValueType::U32)
            .map(|it| it.map(u32::from_le_bytes))
    }
    /// The elements of an f32 array; `None` for another element type.
    pub fn f32s(&self) -> Option<impl ExactSizeIterator<Item = f32> + 'a> {
        self.fixed::<4>(ValueType::F32)
            .map(|it| it.map(f32::from_le_bytes))
    }

    fn fixed<const N: usize>(
        &self,
        want: ValueType,
    ) -> Option<impl ExactSizeIterator<Item = [u8; N]> + 'a> {
        if self.elem_type != want {
            return None;
        }
        // `chunks_exact` drops nothing: parse checked `bytes.len() == len * N`.
        Some(self.bytes.chunks_exact(N).map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            a
        }))
    }
}

/// Iterates the elements of a string array (see [`Array::strings`]).
#[derive(Clone)]
pub struct StrIter<'a> {
    cursor: Cursor<'a>,
    left: usize,
}

impl<'a> Iterator for StrIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let n = self.cursor.u64()?;
        self.cursor.take(usize::try_from(n).ok()?)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for StrIter<'_> {}

/// Iterates the elements of any array (see [`Array::values`]).
#[derive(Clone)]
pub struct ValueIter<'a> {
    cursor: Cursor<'a>,
    elem_type: ValueType,
    left: usize,
}

impl<'a> Iterator for ValueIter<'a> {
    type Item = Value<'a>;
    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Already validated by `Gguf::parse`; an error here cannot happen, and ends iteration.
        read_value(&mut self.cursor, self.elem_type, 1, &"array element").ok()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// One metadata entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyValue<'a> {
    pub key: &'a str,
    pub value: Value<'a>,
}

/// One tensor: its shape, type and bytes (borrowed from the file).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    /// Number of meaningful entries in `dims` (1..=4).
    pub n_dims: usize,
    /// ggml's `ne`: `dims[0]` is the contiguous (row) length; unused dims are 1.
    pub dims: [u64; MAX_DIMS],
    pub ty: GgmlType,
    /// Offset of the tensor's bytes from the start of the file (a multiple of the alignment).
    pub file_offset: usize,
    /// The tensor's bytes: `rows() * row_bytes()`.
    pub data: &'a [u8],
}

impl TensorInfo<'_> {
    /// Total elements (checked against overflow at parse time).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
    /// Number of rows: every dim but the first.
    pub fn rows(&self) -> u64 {
        self.dims[1..].iter().product()
    }
    /// Bytes of one row of `dims[0]` elements.
    pub fn row_bytes(&self) -> usize {
        // Sized at parse time; rows() == 0 leaves data empty, so divide by the row count only
        // when it is non-zero.
        match self.rows() {
            0 => self.ty.row_bytes(self.dims[0]).unwrap_or(0) as usize,
            r => self.data.len() / r as usize,
        }
    }
}

/// A parsed GGUF file. Borrows the file bytes for `'a`.
pub struct Gguf<'a> {
    bytes: &'a [u8],
    version: u32,
    alignment: usize,
    /// Absolute offset of the data section (a multiple of `alignment`, `<= bytes.len()`).
    data_offset: usize,
    /// In file order.
    kvs: Vec<KeyValue<'a>>,
    /// Indices into `kvs`, sorted by key (lookup by binary search).
    kv_by_key: Vec<u32>,
    /// In file order.
    tensors: Vec<TensorInfo<'a>>,
    /// Indices into `tensors`, sorted by name.
    tensor_by_name: Vec<u32>,
    /// Whether the legacy quantized tensors were grouped ([`Gguf::parse_for_model`]).
    weights_grouped: bool,
}

impl fmt::Debug for Gguf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("kv_count", &self.kvs.len())
            .field("tensor_count", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl<'a> Gguf<'a> {
    /// Parses and checks the whole file (metadata, tensor table, tensor bounds). Tensor data
    /// is not read, only bounds-checked.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>> {
        let mut c = Cursor::new(bytes);
        let (version, tensor_count, kv_count) = read_header(&mut c)?;
        let (kvs, kv_by_key) = read_metadata(&mut c, kv_count)?;
        let alignment = alignment(&kvs, &kv_by_key)?;
        let mut infos: Vec<RawTensorInfo<'a>> = Vec::new();
        try_reserve(&mut infos, tensor_count as usize, "tensor table")?;
        for i in 0..tensor_count {
            infos.push(read_tensor_info(&mut c, i, alignment)?);
        }
        let data_offset = data_section(&c, alignment, tensor_count)?;
        let tensors = place_tensors(bytes, &infos, data_offset)?;
        let tensor_by_name = sorted_index(&tensors, |t| t.name, "tensor index")?;
        if let Some(dup) = first_duplicate(&tensor_by_name, |i| tensors[i].name) {
            bail!(Status::BadFormat, "tensor '{}' appears more than once", dup);
        }
        check_no_overlap(&tensors)?;
        Ok(Gguf {
            bytes,
            version,
            alignment,
            data_offset,
            kvs,
            kv_by_key,
            tensors,
            tensor_by_name,
            weights_grouped: false,
        })
    }

    /// [`Gguf::parse`] for computing with the file's tensors: after parsing, rewrites every
    /// tensor of a legacy quantized type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) in place into the
    /// grouped layout that the kernels read, and Q6_K's quants repacked ([`quant::group_rows`]),
    /// then parses the bytes again
    /// (only tensor data changed). The model ([`crate::model::Model::load_with`]) takes only a
    /// `Gguf` made this way; tokenizers and metadata readers take either.
    pub fn parse_for_model(bytes: &'a mut [u8]) -> Result<Gguf<'a>> {
        let mut tensors: Vec<(GgmlType, usize, usize, usize)> = Vec::new();
        {
            let g = Gguf::parse(bytes)?;
            try_reserve(&mut tensors, g.tensors.len(), "tensor table")?;
            for t in &g.tensors {
                let cols = usize::try_from(t.dims[0]).unwrap_or(0);
                tensors.push((t.ty, cols, t.file_offset, t.data.len()));
            }
        }
        for (ty, cols, start, len) in tensors {
            quant::group_rows(ty, cols, &mut bytes[start..start + len]);
        }
        let bytes: &'a [u8] = bytes;
        let mut g = Gguf::parse(bytes)?;
        g.weights_grouped = true;
        Ok(g)
    }

    /// Whether this `Gguf` came from [`Gguf::parse_for_model`].
    pub fn weights_grouped(&self) -> bool {
        self.weights_grouped
    }

    pub fn version(&self) -> u32 {
        self.version
    }
    pub fn alignment(&self) -> usize {
        self.alignment
    }
    /// Absolute offset of the data section in the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }
    /// The data section (empty for vocabulary-only files).
    pub fn data(&self) -> &'a [u8] {
        &self.bytes[self.data_offset..]
    }
    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// All metadata entries, in file order.
    pub fn metadata(&self) -> &[KeyValue<'a>] {
        &self.kvs
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        lookup(&self.kvs, &self.kv_by_key, key)
    }

    /// An unsigned integer key (any integer type whose value fits u32). Missing or of another
    /// type is an error naming the key.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.get_u32_opt(key)?.ok_or_else(|| missing(key))
    }
    pub fn get_u32_opt(&self, key: &str) -> Result<Option<u32>> {
        self.typed(key, "an integer in u32 range", |v| {
            v.as_i128().and_then(|n| u32::try_from(n).ok())
        })
    }
    /// A signed integer key (any integer type whose value fits i64).
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.get_i64_opt(key)?.ok_or_else(|| missing(key))
    }
    pub fn get_i64_opt(&self, key: &str) -> Result<Option<i64>> {
        self.typed(key, "an integer in i64 range", |v| {
            v.as_i128().and_then(|n| i64::try_from(n).ok())
        })
    }
    /// A float key (f32, or f64 narrowed).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.get_f32_opt(key)?.ok_or_else(|| missing(key))
    }
    pub fn get_f32_opt(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "f32", |v| match *v {
            Value::F32(x) => Some(x),
            Value::F64(x) => Some(x as f32),
            _ => None,
        })
    }
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.get_bool_opt(key)?.ok_or_else(|| missing(key))
    }
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "bool", |v| match *v {
            Value::Bool(b) => Some(b),
            _ => None,
        })
    }
    /// A UTF-8 string key.
    pub fn get_str(&self, key: &str) -> Result<&'a str> {
        self.get_str_opt(key)?.ok_or_else(|| missing(key))
    }
    pub fn get_str_opt(&self, key: &str) -> Result<Option<&'a str>> {
        self.typed(key, "a UTF-8 string", |v| v.as_str())
    }
    /// An array key (check its element type, or use `strings()` / `i32s()` / `f32s()`).
    pub fn get_array(&self, key: &str) -> Result<Array<'a>> {
        self.get_array_opt(key)?.ok_or_else(|| missing(key))
    }
    pub fn get_array_opt(&self, key: &str) -> Result<Option<Array<'a>>> {
        self.typed(key, "an array", |v| match *v {
            Value::Array(a) => Some(a),
            _ => None,
        })
    }

    fn typed<T>(
        &self,
        key: &str,
        want: &str,
        f: impl Fn(&Value<'a>) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| {
                err!(
                    Status::BadFormat,
                    "GGUF key '{}' has type {}, expected {}",
                    key,
                    v.value_type().name(),
                    want
                )
            }),
        }
    }

    /// All tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo<'a>] {
        &self.tensors
    }

    /// The tensor called `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        Some(&self.tensors[self.tensor_index(name)?])
    }
    /// Where tensor `name` is in [`Gguf::tensors`].
    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        let i = self
            .tensor_by_name
            .binary_search_by(|&i| self.tensors[i as usize].name.cmp(name))
            .ok()?;
        Some(self.tensor_by_name[i] as usize)
    }
}

// ---- reading primitives ----------------------------------------------------------------

/// A read position over the file; every read is bounds-checked and returns `None` past the end.
#[derive(Clone)]
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|a| a[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Where a value sits, for error messages.
trait Place: fmt::Display {}
impl<T: fmt::Display> Place for T {}

struct Key<'k>(&'k str);
impl fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GGUF key '{}'", self.0)
    }
}
struct KeyAt(u64, usize);
impl fmt::Display for KeyAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GGUF key #{} (at byte {})", self.0, self.1)
    }
}
struct TensorAt(u64, usize);
impl fmt::Display for TensorAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "name of GGUF tensor #{} (at byte {})", self.0, self.1)
    }
}

/// A GGUF string: u64 length, then the bytes.
fn read_str<'a>(c: &mut Cursor<'a>, cap: u64, place: &dyn Place) -> Result<&'a [u8]> {
    let at = c.pos;
    let n = c.u64().ok_or_else(|| {
        err!(
            Status::BadFormat,
            "{}: string length truncated at byte {}",
            place,
            at
        )
    })?;
    if n > cap {
        bail!(
            Status::BadFormat,
            "{}: string length {} exceeds the cap {}",
            place,
            n,
            cap
        );
    }
    c.take(n as usize).ok_or_else(|| {
        err!(
            Status::BadFormat,
            "{}: string of {} bytes at byte {} runs past the end of the file",
            place,
            n,
            at
        )
    })
}

/// A GGUF string that must be UTF-8 (a key, a tensor name).
fn read_utf8<'a>(c: &mut Cursor<'a>, cap: u64, place: &dyn Place) -> Result<&'a str> {
    let bytes = read_str(c, cap, place)?;
    core::str::from_utf8(bytes).map_err(|_| err!(Status::BadFormat, "{place}: not UTF-8"))
}

/// A value of type `ty` at the cursor; arrays are walked in full (nested ones up to
/// `MAX_ARRAY_DEPTH`) so that later iteration cannot fail.
fn read_value<'a>(
    c: &mut Cursor<'a>,
    ty: ValueType,
    depth: u32,
    place: &dyn Place,
) -> Result<Value<'a>> {
    let at = c.pos;
    let short = || {
        err!(
            Status::BadFormat,
            "{}: {} value truncated at byte {}",
            place,
            ty.name(),
            at
        )
    };
    Ok(match ty {
        ValueType::U8 => Value::U8(c.u8().ok_or_else(short)?),
        ValueType::I8 => Value::I8(c.u8().ok_or_else(short)? as i8),
        ValueType::U16 => Value::U16(c.u16().ok_or_else(short)?),
        ValueType::I16 => Value::I16(c.u16().ok_or_else(short)? as i16),
        ValueType::U32 => Value::U32(c.u32().ok_or_else(short)?),
        ValueType::I32 => Value::I32(c.u32().ok_or_else(short)? as i32),
        ValueType::F32 => Value::F32(f32::from_bits(c.u32().ok_or_else(short)?)),
        ValueType::U64 => Value::U64(c.u64().ok_or_else(short)?),
        ValueType::I64 => Value::I64(c.u64().ok_or_else(short)? as i64),
        ValueType::F64 => Value::F64(f64::from_bits(c.u64().ok_or_else(short)?)),
        ValueType::Bool => match c.u8().ok_or_else(short)? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => bail!(
                Status::BadFormat,
                "{}: bool byte {} at byte {} is not 0 or 1",
                place,
                b,
                at
            ),
        },
        ValueType::String => Value::Str(read_str(c, MAX_STRING_BYTES, place)?),
        ValueType::Array => {
            if depth >= MAX_ARRAY_DEPTH {
                bail!(
                    Status::BadFormat,
                    "{}: arrays nested deeper than {}",
                    place,
                    MAX_ARRAY_DEPTH
                );
            }
            let elem = c.u32().ok_or_else(short)?;
            let elem_type = ValueType::from_id(elem).ok_or_else(|| {
                err!(
                    Status::BadFormat,
                    "{}: unknown array element type {}",
                    place,
                    elem
                )
            })?;
            let len = c.u64().ok_or_else(short)?;
            if len > MAX_ARRAY_LEN {
                bail!(
                    Status::BadFormat,
                    "{}: array length {} exceeds the cap {}",
                    place,
                    len,
                    MAX_ARRAY_LEN
                );
            }
            let len = len as usize;
            let start = c.pos;
            match elem_type.fixed_size() {
                Some(size) => {
                    let n = len * size; // <= 2^24 * 8: no overflow
                    c.take(n).ok_or_else(|| {
                        err!(
                            Status::BadFormat,
                            "{}: array of {} {} at byte {} runs past the end of the file",
                            place,
                            len,
                            elem_type.name(),
                            start
                        )
                    })?;
                    if elem_type == ValueType::Bool
                        && let Some(b) = c.bytes[start..c.pos].iter().find(|&&b| b > 1)
                    {
                        bail!(
                            Status::BadFormat,
                            "{}: bool array element {} is not 0 or 1",
                            place,
                            b
                        );
                    }
                }
                None => {
                    for i in 0..len {
                        let at = c.pos;
                        if elem_type == ValueType::String {
                            // The hot path (vocabularies): no formatting unless it fails.
                            if !skip_str(c) {
                                c.pos = at;
                                read_str(c, MAX_STRING_BYTES, &Elem(place, i))?;
                            }
                        } else {
                            read_value(c, elem_type, depth + 1, &Elem(place, i))?;
                        }
                    }
                }
            }
            Value::Array(Array {
                elem_type,
                len,
                bytes: &c.bytes[start..c.pos],
            })
        }
    })
}

/// Steps over one string within [`MAX_STRING_BYTES`]; `false` (cursor unspecified) if it is
/// cut short or too long. Plain code: it runs once per vocabulary entry.
fn skip_str(c: &mut Cursor<'_>) -> bool {
    let Some(head) = c.bytes.get(c.pos..c.pos.wrapping_add(8)) else {
        return false;
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(head);
    let n = u64::from_le_bytes(n);
    let left = (c.bytes.len() - c.pos - 8) as u64;
    if n > MAX_STRING_BYTES || n > left {
        return false;
    }
    c.pos += 8 + n as usize;
    true
}

struct Elem<'p>(&'p dyn Place, usize);
impl fmt::Display for Elem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing steps, in file order (the numbers of the format description above)

/// Steps 1-4: magic, version, tensor and metadata counts (capped, and checked against the bytes left:
/// every entry takes at least 12 bytes, every tensor info 28, so a count the file cannot hold is
/// refused before anything is allocated for it).
fn read_header(c: &mut Cursor<'_>) -> Result<(u32, u64, u64)> {
    let magic = c.take(4).ok_or_else(|| truncated("magic", 0))?;
    if magic != MAGIC {
        bail!(
            Status::BadFormat,
            "not a GGUF file: its magic bytes are 0x{:02x}{:02x}{:02x}{:02x}, expected 0x47475546 (\"GGUF\")",
            magic[0],
            magic[1],
            magic[2],
            magic[3]
        );
    }
    let version = c.u32().ok_or_else(|| truncated("version", 4))?;
    match version {
        2 | 3 => {}
        1 => bail!(
            Status::Unsupported,
            "GGUF version 1 (32-bit counts) is not supported"
        ),
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            bail!(
                Status::Unsupported,
                "big-endian GGUF files are not supported"
            )
        }
        v => bail!(Status::BadFormat, "GGUF version {} is not 2 or 3", v),
    }
    let tensor_count = c.u64().ok_or_else(|| truncated("tensor_count", 8))?;
    let kv_count = c.u64().ok_or_else(|| truncated("kv_count", 16))?;
    if tensor_count > MAX_TENSOR_COUNT {
        bail!(
            Status::BadFormat,
            "tensor_count {} exceeds the cap {}",
            tensor_count,
            MAX_TENSOR_COUNT
        );
    }
    if kv_count > MAX_KV_COUNT {
        bail!(
            Status::BadFormat,
            "kv_count {} exceeds the cap {}",
            kv_count,
            MAX_KV_COUNT
        );
    }
    // Every entry takes at least 12 bytes (key length + type), every tensor info 28: a
    // count the file cannot hold is refused before anything is allocated for it.
    let room = c.remaining() as u64;
    if kv_count.saturating_mul(12) > room {
        bail!(
            Status::BadFormat,
            "kv_count {} cannot fit in the {} bytes left",
            kv_count,
            room
        );
    }
    if tensor_count.saturating_mul(28) > room {
        bail!(
            Status::BadFormat,
            "tensor_count {} cannot fit in the {} bytes left",
            tensor_count,
            room
        );
    }
    Ok((version, tensor_count, kv_count))
}

/// Step 5: the metadata key-value pairs, and their index sorted by key (duplicates refused).
fn read_metadata<'a>(c: &mut Cursor<'a>, kv_count: u64) -> Result<(Vec<KeyValue<'a>>, Vec<u32>)> {
    let mut kvs: Vec<KeyValue<'a>> = Vec::new();
    try_reserve(&mut kvs, kv_count as usize, "metadata table")?;
    for i in 0..kv_count {
        let at = c.pos;
        let key = read_utf8(c, MAX_KEY_BYTES, &KeyAt(i, at))?;
        let ty = c.u32().ok_or_else(|| truncated_key(key, "value type"))?;
        let ty = ValueType::from_id(ty).ok_or_else(|| {
            err!(
                Status::BadFormat,
                "GGUF key '{}': unknown value type {}",
                key,
                ty
            )
        })?;
        let value = read_value(c, ty, 0, &Key(key))?;
        kvs.push(KeyValue { key, value });
    }
    let kv_by_key = sorted_index(&kvs, |kv| kv.key, "metadata index")?;
    if let Some(dup) = first_duplicate(&kv_by_key, |i| kvs[i].key) {
        bail!(
            Status::BadFormat,
            "GGUF key '{}' appears more than once",
            dup
        );
    }
    Ok((kvs, kv_by_key))
}

/// Step 7: `general.alignment` (needed before tensor offsets can be checked).
fn alignment(kvs: &[KeyValue<'_>], kv_by_key: &[u32]) -> Result<usize> {
    let mut alignment = DEFAULT_ALIGNMENT;
    if let Some(v) = lookup(kvs, kv_by_key, "general.alignment") {
        match *v {
            Value::U32(a) if a != 0 && a.is_power_of_two() => alignment = a as usize,
            Value::U32(a) => {
                bail!(
                    Status::BadFormat,
                    "general.alignment {} is not a power of two",
                    a
                )
            }
            other => bail!(
                Status::BadFormat,
                "general.alignment has type {}, expected u32",
                other.value_type().name()
            ),
        }
    }
    Ok(alignment)
}

/// A tensor info as read, before the data section is known.
struct RawTensorInfo<'a> {
    name: &'a str,
    n_dims: usize,
    dims: [u64; MAX_DIMS],
    ty: GgmlType,
    offset: u64,
    size: u64,
}

/// Step 6: tensor info `i`: name, dims (each an int64 in ggml), type (one this build can size),
/// offset (aligned); its byte size, checked for overflow.
fn read_tensor_info<'a>(c: &mut Cursor<'a>, i: u64, alignment: usize) -> Result<RawTensorInfo<'a>> {
    let at = c.pos;
    let name = read_utf8(c, MAX_TENSOR_NAME_BYTES, &TensorAt(i, at))?;
    let n_dims = c.u32().ok_or_else(|| truncated_tensor(name, "n_dims"))?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        bail!(
            Status::BadFormat,
            "tensor '{}': n_dims {} is not in 1..={}",
            name,
            n_dims,
            MAX_DIMS
        );
    }
    let n_dims = n_dims as usize;
    let mut dims = [1u64; MAX_DIMS];
    for (d, dim) in dims.iter_mut().enumerate().take(n_dims) {
        *dim = c.u64().ok_or_else(|| truncated_tensor(name, "dims"))?;
        // ggml stores dims as int64: larger values are negative there.
        if *dim > i64::MAX as u64 {
            bail!(
                Status::BadFormat,
                "tensor '{}': dim {} is {}, out of range",
                name,
                d,
                *dim
            );
        }
    }
    let ty_id = c.u32().ok_or_else(|| truncated_tensor(name, "type"))?;
    let offset = c.u64().ok_or_else(|| truncated_tensor(name, "offset"))?;

    let ty = GgmlType::from_id(ty_id);
    let (block_elems, _) = ty.block_geometry().ok_or_else(|| {
        err!(
            Status::Unsupported,
            "tensor '{}' has type {} (id {}), which this build cannot read",
            name,
            ty.name(),
            ty_id
        )
    })?;
    let mut n_elements: u64 = 1;
    for &dim in &dims {
        n_elements = n_elements
            .checked_mul(dim)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| {
                err!(
                    Status::BadFormat,
                    "tensor '{}': element count {:?} overflows",
                    name,
                    &dims[..n_dims]
                )
            })?;
    }
    if !dims[0].is_multiple_of(block_elems as u64) {
        bail!(
            Status::BadFormat,
            "tensor '{}': dim 0 ({}) is not a multiple of the {} block size {}",
            name,
            dims[0],
            ty.name(),
            block_elems
        );
    }
    let row = ty
        .row_bytes(dims[0])
        .ok_or_else(|| err!(Status::BadFormat, "tensor '{}': row size overflows", name))?;
    let size = row
        .checked_mul(dims[1])
        .and_then(|s| s.checked_mul(dims[2]))
        .and_then(|s| s.checked_mul(dims[3]))
        .ok_or_else(|| err!(Status::BadFormat, "tensor '{}': byte size overflows", name))?;
    if !offset.is_multiple_of(alignment as u64) {
        bail!(
            Status::BadFormat,
            "tensor '{}': offset {} is not a multiple of the alignment {}",
            name,
            offset,
            alignment
        );
    }
    Ok(RawTensorInfo {
        name,
        n_dims,
        dims,
        ty,
        offset,
        size,
    })
}

/// Steps 7-8: where the data section starts: after the padding to `alignment`. A file with no tensors
/// may end right after its tensor table, unpadded; otherwise the padding must be there.
fn data_section(c: &Cursor<'_>, alignment: usize, tensor_count: u64) -> Result<usize> {
    let bytes_len = c.bytes.len();
    let header_end = c.pos;
    header_end
        .checked_next_multiple_of(alignment)
        .filter(|&d| d <= bytes_len)
        .or((tensor_count == 0 && header_end == bytes_len).then_some(header_end))
        .ok_or_else(|| {
            err!(
                Status::BadFormat,
                "data section (header ends at byte {}, alignment {}) starts past the end of the file ({} bytes)",
                header_end, alignment, bytes_len
            )
        })
}

/// Each tensor's bytes inside the data section (bounds checked).
fn place_tensors<'a>(
    bytes: &'a [u8],
    infos: &[RawTensorInfo<'a>],
    data_offset: usize,
) -> Result<Vec<TensorInfo<'a>>> {
    let data_len = (bytes.len() - data_offset) as u64;

    let mut tensors: Vec<TensorInfo<'a>> = Vec::new();
    try_reserve(&mut tensors, infos.len(), "tensor table")?;
    for r in infos {
        let end = r.offset.checked_add(r.size).filter(|&e| e <= data_len).ok_or_else(|| {
            err!(
                Status::BadFormat,
                "tensor '{}': data at offset {} + {} bytes runs past the data section ({} bytes)",
                r.name, r.offset, r.size, data_len
            )
        })?;
        // Both fit in the buffer, hence in usize.
        let start = data_offset + r.offset as usize;
        let end = data_offset + end as usize;
        tensors.push(TensorInfo {
            name: r.name,
            n_dims: r.n_dims,
            dims: r.dims,
            ty: r.ty,
            file_offset: start,
            data: &bytes[start..end],
        });
    }
    Ok(tensors)
}

fn truncated(field: &str, at: usize) -> crate::error::Error {
    err!(
        Status::BadFormat,
        "GGUF header truncated: {} at byte {}",
        field,
        at
    )
}
fn truncated_key(key: &str, field: &str) -> crate::error::Error {
    err!(Status::BadFormat, "GGUF key '{}': {} truncated", key, field)
}
fn truncated_tensor(name: &str, field: &str) -> crate::error::Error {
    err!(
        Status::BadFormat,
        "GGUF tensor '{}': {} truncated",
        name,
        field
    )
}
fn missing(key: &str) -> crate::error::Error {
    err!(Status::BadFormat, "GGUF key '{}' is missing", key)
}

fn try_reserve<T>(v: &mut Vec<T>, n: usize, what: &str) -> Result<()> {
    v.try_reserve_exact(n).map_err(|_| {
        err!(
            Status::OutOfMemory,
            "GGUF {}: cannot allocate {} entries",
            what,
            n
        )
    })
}

/// Indices of `items` sorted by the name `key` returns.
fn sorted_index<T>(items: &[T], key: impl Fn(&T) -> &str, what: &str) -> Result<Vec<u32>> {
    let mut index: Vec<u32> = Vec::new();
    try_reserve(&mut index, items.len(), what)?;
    index.extend(0..items.len() as u32);
    // Equal names (an error the caller reports) in index order.
    heapsort_by(&mut index, &mut |&a, &b| {
        (key(&items[a as usize]), a) < (key(&items[b as usize]), b)
    });
    Ok(index)
}

fn first_duplicate<'s>(sorted: &[u32], name: impl Fn(usize) -> &'s str) -> Option<&'s str> {
    sorted.windows(2).find_map(|w| {
        let a = name(w[0] as usize);
        (a == name(w[1] as usize)).then_some(a)
    })
}

fn lookup<'v, 'a>(kvs: &'v [KeyValue<'a>], sorted: &[u32], key: &str) -> Option<&'v Value<'a>> {
    let i = sorted
        .binary_search_by(|&i| kvs[i as usize].key.cmp(key))
        .ok()?;
    Some(&kvs[sorted[i] as usize].value)
}

/// Tensors may be stored in any order but must not share bytes (the engine may repack
/// weights in place).
fn check_no_overlap(tensors: &[TensorInfo<'_>]) -> Result<()> {
    let mut by_offset: Vec<u32> = Vec::new();
    try_reserve(&mut by_offset, tensors.len(), "tensor order")?;
    by_offset.extend(0..tensors.len() as u32);
    heapsort_by(&mut by_offset, &mut |&a, &b| {
        (tensors[a as usize].file_offset, a) < (tensors[b as usize].file_offset, b)
    });
    for w in by_offset.windows(2) {
        let (a, b) = (&tensors[w[0] as usize], &tensors[w[1] as usize]);
        if a.file_offset + a.data.len() > b.file_offset {
            bail!(
                Status::BadFormat,
                "tensors '{}' and '{}' overlap in the data section",
                a.name,
                b.name
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
