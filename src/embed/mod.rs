//! Model2Vec sentence embeddings, as the Python `model2vec` package (0.10) computes them.
//!
//! A Model2Vec model is a static table: one vector per token. From a model directory's own
//! files (passed in as bytes):
//! - `model.safetensors`: `embeddings` (rows, dim) in F32, F16, BF16 or I8; optionally
//!   `mapping` (vocab,) I32, token id -> row (vocabulary quantization), and `weights` (vocab,)
//!   F64/F32/F16, a per-token scale;
//! - `tokenizer.json`: see [`tokenizer`];
//! - `config.json`: `normalize` (missing or null: false) and `max_length` (missing: 512; null:
//!   no truncation).
//!
//! Encoding one text, in order:
//! 1. cut the text to `max_length × median token length` code points;
//! 2. tokenize ([`tokenizer::HfTokenizer::encode`]), keeping at most `max_length` tokens;
//! 3. drop the unknown token;
//! 4. mean of `embeddings[mapping[id]] × weights[id]` over the ids (a zero vector if none);
//! 5. divide by the L2 norm (+1e-32) when `normalize`.
//!
//! Memory: F32 and I8 tables are used in place (zero-copy; F32 when its data is 4-byte aligned
//! in the caller's buffer), which is why [`Embedder`] borrows the safetensors bytes. F16 and
//! BF16 tables (and unaligned F32) are converted to F32 once at load (`rows × dim × 4` bytes:
//! 30 MB for a 29,525 × 256 table), because pooling f32 rows is faster (see [`kernels`]).

pub mod kernels;
pub mod safetensors;
pub mod tokenizer;
pub mod wordpiece;

use crate::error::{Result, Status};
use crate::json::{Kind, Reader};
use crate::{bail, err};
use alloc::vec::Vec;
use safetensors::{Dtype, SafeTensors, Tensor};
pub use tokenizer::HfTokenizer;

/// model2vec's default `max_length` when config.json has none.
pub const DEFAULT_MAX_LENGTH: usize = 512;
/// Cap on `max_length` from a file.
const MAX_MAX_LENGTH: u64 = 1 << 24;
/// Cap on the embedding dimension.
const MAX_DIM: u64 = 1 << 16;

/// The settings of `config.json` that change the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbedConfig {
    pub normalize: bool,
    /// `None`: no truncation at all.
    pub max_length: Option<usize>,
}

impl EmbedConfig {
    pub fn from_json(bytes: &[u8]) -> Result<EmbedConfig> {
        let mut c = EmbedConfig {
            normalize: false,
            max_length: Some(DEFAULT_MAX_LENGTH),
        };
        let mut r = Reader::new(bytes)?;
        if r.peek()? != Kind::Object {
            bail!(Status::BadFormat, "config.json is not a JSON object");
        }
        r.begin_object()?;
        while let Some(k) = r.next_key()? {
            if k.eq_str("normalize") {
                c.normalize = match r.peek()? {
                    Kind::Null => r.read_null().map(|_| false)?,
                    Kind::Bool => r.read_bool()?,
                    k => bail!(
                        Status::BadFormat,
                        "config.json: normalize should be a bool, found {k:?}"
                    ),
                };
            } else if k.eq_str("max_length") {
                c.max_length = match r.peek()? {
                    Kind::Null => r.read_null().map(|_| None)?,
                    Kind::Number => {
                        let v = r.read_u64()?;
                        if v > MAX_MAX_LENGTH {
                            bail!(
                                Status::BadFormat,
                                "config.json: max_length {v} exceeds {MAX_MAX_LENGTH}"
                            );
                        }
                        Some(v as usize)
                    }
                    k => bail!(
                        Status::BadFormat,
                        "config.json: max_length should be an integer, found {k:?}"
                    ),
                };
            } else {
                r.skip_value()?;
            }
        }
        r.finish()?;
        Ok(c)
    }
}

/// The embedding rows, (rows, dim) row-major: in place in the caller's buffer, or converted.
enum Rows<'a> {
    /// Aligned little-endian f32.
    F32(&'a [f32]),
    I8(&'a [i8]),
    Owned(Vec<f32>),
}

/// A loaded Model2Vec model.
pub struct Embedder<'a> {
    tokenizer: HfTokenizer,
    config: EmbedConfig,
    rows: Rows<'a>,
    n_rows: usize,
    dim: usize,
    /// Token id -> row (vocabulary quantization).
    mapping: Option<Vec<u32>>,
    /// Token id -> scale.
    weights: Option<Vec<f32>>,
    /// Truncation of the text in code points (`max_length × median token length`).
    max_chars: Option<usize>,
}

/// Buffers reused across calls (one per thread): no allocation per text once warm.
#[derive(Default)]
pub struct EmbedScratch {
    tok: tokenizer::HfScratch,
    ids: Vec<u32>,
    /// (row, weight × occurrences) of each distinct id, in order of first occurrence.
    rows: Vec<(u32, f32)>,
    /// Per token id: 0, or 1 + its place in `rows` while a text is pooled (all 0 between texts).
    seen: Vec<u32>,
}

impl EmbedScratch {
    pub fn new() -> EmbedScratch {
        EmbedScratch::default()
    }
}

use crate::quant::f16_to_f32;

/// A 1-D tensor of `n` values as f32 (F64/F32/F16), for `weights`.
fn vector_f32(t: &Tensor, n: usize, what: &str) -> Result<Vec<f32>> {
    if t.shape() != [n as u64] {
        bail!(
            Status::BadFormat,
            "safetensors: {what} has shape {:?}, expected [{n}]",
            t.shape()
        );
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| err!(Status::OutOfMemory, "{what}"))?;
    match t.dtype {
        Dtype::F64 => v.extend(
            t.data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32),
        ),
        Dtype::F32 => v.extend(
            t.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4]))),
        ),
        Dtype::F16 => v.extend(
            t.data
                .chunks_exact(2)
                .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))),
        ),
        d => bail!(
            Status::Unsupported,
            "safetensors: {what} in {d:?} (F64, F32 or F16 expected)"
        ),
    }
    Ok(v)
}

impl<'a> Embedder<'a> {
    /// Loads a model from the bytes of its three files. The embedding table is borrowed from
    /// `safetensors` when it is F32 (aligned) or I8.
    pub fn load(
        safetensors: &'a [u8],
        tokenizer_json: &[u8],
        config_json: &[u8],
    ) -> Result<Embedder<'a>> {
        let config = EmbedConfig::from_json(config_json)?;
        let tokenizer = HfTokenizer::from_json(tokenizer_json)?;
        let st = SafeTensors::parse(safetensors)?;

        let Some(emb) = st.get("embeddings") else {
            bail!(Status::BadFormat, "safetensors: no 'embeddings' tensor");
        };
        let &[n_rows, dim] = emb.shape() else {
            bail!(
                Status::BadFormat,
                "safetensors: embeddings has shape {:?}, expected [rows, dim]",
                emb.shape()
            );
        };
        if dim == 0 || dim > MAX_DIM {
            bail!(
                Status::BadFormat,
                "safetensors: embedding dimension {dim} (1..={MAX_DIM})"
            );
        }
        let (n_rows, dim) = (n_rows as usize, dim as usize);
        let rows = match emb.dtype {
            Dtype::I8 => {
                // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is valid.
                let s = unsafe {
                    core::slice::from_raw_parts(emb.data.as_ptr() as *const i8, emb.data.len())
                };
                Rows::I8(s)
            }
            Dtype::F32 => {
                // SAFETY: every bit pattern is a valid f32; `align_to` only returns the middle part
                // that is correctly aligned. The targets (x86_64, wasm32) are little-endian.
                let (head, mid, tail) = unsafe { emb.data.align_to::<f32>() };
                if head.is_empty() && tail.is_empty() && cfg!(target_endian = "little") {
                    Rows::F32(mid)
                } else {
                    Rows::Owned(convert(
                        emb,
                        |c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                        4,
                    )?)
                }
            }
            Dtype::F16 => Rows::Owned(convert(
                emb,
                |c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])),
                2,
            )?),
            Dtype::Bf16 => Rows::Owned(convert(
                emb,
                |c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16),
                2,
            )?),
            d => bail!(
                Status::Unsupported,
                "safetensors: embeddings in {d:?} (F32, F16, BF16 or I8 expected)"
            ),
        };

        // Every token id must reach a row: directly, or through `mapping`.
        let n_ids = tokenizer.id_bound as usize;
        let mapping = match st.get("mapping") {
            None => {
                if n_ids > n_rows {
                    bail!(
                        Status::BadFormat,
                        "tokenizer has ids up to {} but embeddings has {n_rows} rows",
                        n_ids - 1
                    );
                }
                None
            }
            Some(t) => {
                if t.dtype != Dtype::I32 || t.shape().len() != 1 || (t.shape()[0] as usize) < n_ids
                {
                    bail!(
                        Status::BadFormat,
                        "safetensors: mapping must be I32 [>= {n_ids}], is {:?} {:?}",
                        t.dtype,
                        t.shape()
                    );
                }
                let mut m = Vec::new();
                m.try_reserve_exact(t.len())
                    .map_err(|_| err!(Status::OutOfMemory, "mapping"))?;
                for c in t.data.chunks_exact(4) {
                    let v = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    if v < 0 || v as usize >= n_rows {
                        bail!(
                            Status::BadFormat,
                            "safetensors: mapping entry {v} is outside the {n_rows} rows"
                        );
                    }
                    m.push(v as u32);
                }
                Some(m)
            }
        };
        let weights = match st.get("weights") {
            None => None,
            Some(t) => {
                let n = t.shape().first().copied().unwrap_or(0) as usize;
                if n < n_ids {
                    bail!(
                        Status::BadFormat,
                        "safetensors: weights has {n} entries, the tokenizer {n_ids} ids"
                    );
                }
                Some(vector_f32(t, n, "weights")?)
            }
        };

        let max_chars = match config.max_length {
            Some(m) => Some(
                m.checked_mul(tokenizer.median_token_length)
                    .ok_or_else(|| {
                        err!(Status::BadFormat, "config.json: max_length {m} overflows")
                    })?,
            ),
            None => None,
        };
        Ok(Embedder {
            tokenizer,
            config,
            rows,
            n_rows,
            dim,
            mapping,
            weights,
            max_chars,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn config(&self) -> EmbedConfig {
        self.config
    }

    pub fn median_token_length(&self) -> usize {
        self.tokenizer.median_token_length
    }

    /// Whether the embedding table is used in place (not converted at load).
    pub fn is_zero_copy(&self) -> bool {
        !matches!(self.rows, Rows::Owned(_))
    }

    /// The ids that are pooled for `text` (after truncation and dropping the unknown token).
    pub fn encode_ids(
        &self,
        text: &str,
        scratch: &mut EmbedScratch,
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        let text = match self.max_chars {
            Some(m) => cut_chars(text, m),
            None => text,
        };
        let limit = self.config.max_length.unwrap_or(usize::MAX);
        self.tokenizer.encode(text, limit, &mut scratch.tok, ids)?;
        if let Some(unk) = self.tokenizer.unk_id {
            ids.retain(|&id| id != unk);
        }
        Ok(())
    }

    /// Like [`Embedder::embed`], for bytes that must first be checked as UTF-8.
    pub fn embed_bytes(
        &self,
        text: &[u8],
        scratch: &mut EmbedScratch,
        out: &mut [f32],
    ) -> Result<()> {
        let Ok(text) = core::str::from_utf8(text) else {
            bail!(Status::InvalidUtf8, "text is not valid UTF-8");
        };
        self.embed(text, scratch, out)
    }

    /// The sentence vector of `text` into `out` (`dim()` values).
    pub fn embed(&self, text: &str, scratch: &mut EmbedScratch, out: &mut [f32]) -> Result<()> {
        if out.len() != self.dim {
            bail!(
                Status::InvalidArgument,
                "output has {} values, the model {}",
                out.len(),
                self.dim
            );
        }
        let mut ids = core::mem::take(&mut scratch.ids);
        let r = self.encode_ids(text, scratch, &mut ids);
        let pooled = r.and_then(|_| self.pool(&ids, &mut scratch.rows, &mut scratch.seen, out));
        scratch.ids = ids;
        pooled
    }

    /// The row of a token id (through `mapping`) and its weight.
    #[inline(always)]
    fn row_of(&self, id: u32) -> Result<(usize, f32)> {
        let row = match &self.mapping {
            Some(m) => m.get(id as usize).copied().unwrap_or(u32::MAX) as usize,
            None => id as usize,
        };
        if row >= self.n_rows {
            bail!(Status::BadFormat, "token id {id} has no embedding row");
        }
        let w = match &self.weights {
            Some(ws) => ws.get(id as usize).copied().unwrap_or(0.0),
            None => 1.0,
        };
        Ok((row, w))
    }

    /// `acc += Σ w·row` over the rows of `table` (f32 or i8), four rows at a time with `add4`,
    /// the rest with `add` (the kernels of the table's type).
    #[inline]
    fn pool_rows<T>(
        &self,
        table: &[T],
        rows: &[(u32, f32)],
        acc: &mut [f32],
        add4: impl Fn(&mut [f32], [&[T]; 4], [f32; 4]),
        add: impl Fn(&mut [f32], &[T], f32),
    ) -> Result<()> {
        let dim = self.dim;
        let row = |r: u32| -> Result<&[T]> {
            let r = r as usize;
            let slice = table.get(r * dim..(r + 1) * dim);
            slice.ok_or_else(|| err!(Status::BadFormat, "embedding row {r} is out of range"))
        };
        let mut quads = rows.chunks_exact(4);
        for q in &mut quads {
            let r = [row(q[0].0)?, row(q[1].0)?, row(q[2].0)?, row(q[3].0)?];
            add4(acc, r, [q[0].1, q[1].1, q[2].1, q[3].1]);
        }
        for &(r, w) in quads.remainder() {
            add(acc, row(r)?, w);
        }
        Ok(())
    }

    /// Mean of the rows of `ids` (weighted), then the optional L2 normalization. Each distinct
    /// id's row is read once (weight × count), in order of first occurrence; `seen` (one entry
    /// per token id, all 0 between calls) finds the repeats. The sum is accumulated in `out`.
    fn pool(
        &self,
        ids: &[u32],
        rows: &mut Vec<(u32, f32)>,
        seen: &mut Vec<u32>,
        out: &mut [f32],
    ) -> Result<()> {
        out.fill(0.0);
        if ids.is_empty() {
            return Ok(());
        }
        let n_ids = self.tokenizer.id_bound as usize;
        if seen.len() < n_ids {
            seen.try_reserve_exact(n_ids - seen.len())
                .map_err(|_| err!(Status::OutOfMemory, "id marks"))?;
            seen.resize(n_ids, 0);
        }
        rows.clear();
        rows.try_reserve(ids.len())
            .map_err(|_| err!(Status::OutOfMemory, "row list"))?;
        // Counting in a table indexed by id, not sorting: 8 % of the corpus embed was core's
        // sort of each text's ids.
        let mut outside = None;
        for &id in ids {
            match seen.get_mut(id as usize) {
                Some(0) => {
                    rows.push((id, 1.0));
                    seen[id as usize] = rows.len() as u32;
                }
                Some(&mut place) => {
                    if let Some(r) = rows.get_mut(place as usize - 1) {
                        r.1 += 1.0;
                    }
                }
                None => outside = Some(id),
            }
        }
        // Every mark back to 0 before anything can fail.
        for &(id, _) in rows.iter() {
            seen[id as usize] = 0;
        }
        if let Some(id) = outside {
            bail!(Status::BadFormat, "token id {id} is outside the vocabulary");
        }
        for r in rows.iter_mut() {
            let (row, w) = self.row_of(r.0)?;
            *r = (row as u32, w * r.1);
        }
        let summed = match &self.rows {
            Rows::F32(t) => self.pool_rows(t, rows, out, kernels::add4_f32, kernels::add_f32),
            Rows::Owned(t) => self.pool_rows(t, rows, out, kernels::add4_f32, kernels::add_f32),
            Rows::I8(t) => self.pool_rows(t, rows, out, kernels::add4_i8, kernels::add_i8),
        };
        if let Err(e) = summed {
            out.fill(0.0);
            return Err(e);
        }
        // The mean. A file may hold NaN or infinity in its rows or weights, or values whose sum
        // overflows: that is an error naming the cause, never a vector of NaN. (1/n <= 1, so a
        // mean is finite exactly when the sum was.)
        let Some(squares) = kernels::scale_sum_squares(out, 1.0 / ids.len() as f32) else {
            out.fill(0.0);
            bail!(
                Status::BadFormat,
                "the model's rows or weights for this text hold NaN or infinity, or overflow f32 \
                 when summed"
            );
        };
        if self.config.normalize {
            let mut norm = crate::math::sqrtf(squares);
            if !norm.is_finite() {
                // The squares overflow: scale by the largest magnitude first (same direction).
                let max = out.iter().fold(0f32, |m, o| m.max(o.abs()));
                out.iter_mut().for_each(|o| *o /= max);
                norm = crate::math::sqrtf(kernels::sum_squares(out));
            }
            let inv = 1.0 / (norm + 1e-32);
            for o in out.iter_mut() {
                *o *= inv;
            }
        }
        Ok(())
    }
}

/// Converts a whole 2-D tensor to f32, element by element.
fn convert(t: &Tensor, f: impl Fn(&[u8]) -> f32, size: usize) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(t.len())
        .map_err(|_| err!(Status::OutOfMemory, "embeddings of {} values", t.len()))?;
    v.extend(t.data.chunks_exact(size).map(f));
    Ok(v)
}

/// The first `n` code points of `text` (Python's `text[:n]`).
fn cut_chars(text: &str, n: usize) -> &str {
    if text.len() <= n {
        return text;
    }
    match text.char_indices().nth(n) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests;
