//! The embedder owner: a Model2Vec model (a safetensors file handed over by the host, the
//! [`Embedder`] over it, and the scratch its embeddings use, one per thread for `embed_batch`)
//! or a BERT sentence encoder (a GGUF file, its WordPiece tokenizer and the [`Encoder`]).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::embed::{EmbedScratch, Embedder};
use crate::error::{Error, Result, Status};
use crate::gguf::Gguf;
use crate::model::encoder::Encoder;
use crate::pool::{self, Disjoint};
use crate::tokenizer::{Tokenizer, Work};
use crate::wasm_alloc::Block;
use crate::{bail, err};

#[derive(Default)]
pub struct EmbedEngine {
    loaded: Option<LoadedEmbedder>,
    /// `embed`'s and `embed_ids`' buffers (kept: warm calls allocate nothing).
    scratch: EmbedScratch,
    /// `embed_batch`: one scratch per thread that can run at once (claimed per chunk).
    batch_slots: Vec<BatchSlot>,
    ids: Vec<u32>,
}

/// A loaded embedder and the file it reads. Fields drop in declaration order: the borrowers
/// before the block they read.
enum LoadedEmbedder {
    Model2Vec {
        embedder: Box<Embedder<'static>>,
        /// Held for the embedder's borrow; freed when this drops.
        _file: Block,
    },
    Encoder(Box<LoadedEncoder>),
}

/// A GGUF sentence encoder: its tokenizer, its weights where they lie in the file, and the
/// tokenizer's scratch.
struct LoadedEncoder {
    encoder: Encoder<'static>,
    tokenizer: Tokenizer,
    work: Work,
    /// Held for the encoder's borrow; freed when this drops.
    _file: Block,
}

impl LoadedEmbedder {
    fn model2vec(file: Block, tokenizer_json: &[u8], config_json: &[u8]) -> Result<LoadedEmbedder> {
        // SAFETY: the embedder lives in the same variant as the block, declared before it, so
        // it is dropped first and never outlives the bytes.
        let bytes = unsafe { file.bytes_unbound() };
        let embedder = Embedder::load(bytes, tokenizer_json, config_json)?;
        Ok(LoadedEmbedder::Model2Vec {
            embedder: Box::new(embedder),
            _file: file,
        })
    }

    fn encoder(mut file: Block) -> Result<LoadedEmbedder> {
        // SAFETY: as `model2vec`: the encoder is dropped before the block; the parsed view is
        // dropped at the end of this call, and nothing else holds one.
        let bytes = unsafe { file.bytes_mut_unbound() };
        let gguf = Gguf::parse_for_model(bytes)?;
        let encoder = Encoder::load(&gguf, None)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        if tokenizer.n_vocab() > encoder.cfg.vocab {
            bail!(
                Status::BadFormat,
                "vocabulary of {} tokens, but token_embd has {} rows",
                tokenizer.n_vocab(),
                encoder.cfg.vocab
            );
        }
        Ok(LoadedEmbedder::Encoder(Box::new(LoadedEncoder {
            encoder,
            tokenizer,
            work: Work::default(),
            _file: file,
        })))
    }

    fn dim(&self) -> usize {
        match self {
            LoadedEmbedder::Model2Vec { embedder, .. } => embedder.dim(),
            LoadedEmbedder::Encoder(e) => e.encoder.cfg.dim,
        }
    }
}

impl LoadedEncoder {
    /// The ids the encoder runs for `text`: [CLS] ... [SEP], cut to the longest sequence it
    /// takes (the last id kept at the end, as sentence-transformers truncates).
    fn ids(&mut self, text: &[u8], ids: &mut Vec<u32>) -> Result<()> {
        let Ok(text) = core::str::from_utf8(text) else {
            bail!(Status::InvalidUtf8, "text is not valid UTF-8");
        };
        ids.clear();
        self.tokenizer
            .encode_with(&mut self.work, text, true, false, ids)?;
        let max = self.encoder.cfg.positions;
        if ids.len() > max {
            let last = ids[ids.len() - 1];
            ids.truncate(max);
            ids[max - 1] = last;
        }
        Ok(())
    }

    /// The unit-length sentence vector of `text` into `out` (`dim` floats), as llama.cpp's
    /// server and `llama-embedding` give it by default (a zero vector stays zero).
    fn embed(&mut self, text: &[u8], ids: &mut Vec<u32>, out: &mut [f32]) -> Result<()> {
        self.ids(text, ids)?;
        self.encoder.encode(ids, out)?;
        let norm = crate::math::sqrtf(out.iter().map(|&v| (v * v) as f64).sum::<f64>() as f32);
        if norm > 0.0 {
            let inv = 1.0 / norm;
            out.iter_mut().for_each(|v| *v *= inv);
        }
        Ok(())
    }
}

impl EmbedEngine {
    /// Loads a Model2Vec model from its three files (the safetensors block is ours from now on;
    /// the JSON files are read during the call), or, when the block is a GGUF file and no JSON
    /// files come with it, a BERT sentence encoder; returns the vector width. On error nothing
    /// is loaded and the block is freed.
    pub fn load(
        &mut self,
        file: Block,
        tokenizer_json: &[u8],
        config_json: &[u8],
    ) -> Result<usize> {
        self.loaded = None;
        let loaded = if file.bytes().starts_with(b"GGUF") {
            if !tokenizer_json.is_empty() || !config_json.is_empty() {
                bail!(
                    Status::InvalidArgument,
                    "a GGUF embedder is one file: its vocabulary is inside, so it takes no tokenizer.json or config.json"
                );
            }
            LoadedEmbedder::encoder(file)?
        } else {
            LoadedEmbedder::model2vec(file, tokenizer_json, config_json)?
        };
        let dim = loaded.dim();
        self.loaded = Some(loaded);
        Ok(dim)
    }

    /// Drops the model and frees its file, and the scratches its embeddings grew (their
    /// character memos are 128 KiB each).
    pub fn unload(&mut self) {
        self.loaded = None;
        self.scratch = EmbedScratch::default();
        self.batch_slots = Vec::new();
        self.ids = Vec::new();
    }

    /// The vector width of the loaded embedder.
    pub fn dim(&self) -> Result<usize> {
        self.loaded
            .as_ref()
            .map(|l| l.dim())
            .ok_or_else(no_embedder)
    }

    /// What the loaded embedder is, as JSON: `{"kind":"model2vec"|"bert","dim":...}` and, for
    /// an encoder, its layers, positions and pooling.
    pub fn info(&self, out: &mut Vec<u8>) -> Result<usize> {
        let loaded = self.loaded.as_ref().ok_or_else(no_embedder)?;
        out.clear();
        let mut o = crate::json::ObjectWriter::new(out);
        match loaded {
            LoadedEmbedder::Model2Vec { embedder, .. } => {
                o.string("kind", "model2vec")
                    .uint("dim", embedder.dim() as u64);
            }
            LoadedEmbedder::Encoder(e) => {
                let c = &e.encoder.cfg;
                o.string("kind", "bert")
                    .uint("dim", c.dim as u64)
                    .uint("n_layers", c.n_layers as u64)
                    .uint("n_heads", c.n_heads as u64)
                    .uint("max_tokens", c.positions as u64)
                    .uint("n_vocab", e.tokenizer.n_vocab() as u64)
                    .string("pooling", c.pooling.name())
                    .boolean("causal", c.causal)
                    .boolean("normalized", true);
            }
        }
        drop(o);
        Ok(out.len())
    }

    pub fn embed(&mut self, text: &[u8], out: &mut [f32]) -> Result<usize> {
        pool::check()?;
        match self.loaded.as_mut().ok_or_else(no_embedder)? {
            LoadedEmbedder::Model2Vec { embedder, .. } => {
                embedder.embed_bytes(text, &mut self.scratch, out)?;
                Ok(embedder.dim())
            }
            LoadedEmbedder::Encoder(e) => {
                e.embed(text, &mut self.ids, out)?;
                Ok(e.encoder.cfg.dim)
            }
        }
    }

    /// Embeds `n = offsets.len() - 1` texts: text `i` is `texts[offsets[i]..offsets[i + 1]]`,
    /// its vector goes to `out[i * dim..(i + 1) * dim]` (`out`: `(n, dim)`). Model2Vec: the
    /// texts are split across the pool in chunks; each running chunk borrows one of the
    /// per-thread scratches. An encoder: one text after another, each split across the pool.
    /// Every vector is the one `embed` gives for that text, for any thread count. A text that
    /// fails (invalid UTF-8) gets a zero vector, the others are still embedded, and the error of
    /// the lowest such index is returned. Returns `n`.
    pub fn embed_batch(&mut self, texts: &[u8], offsets: &[u32], out: &mut [f32]) -> Result<usize> {
        pool::check()?;
        let dim = self.dim()?;
        let n = offsets.len().saturating_sub(1);
        if out.len() != n * dim {
            bail!(
                Status::InvalidArgument,
                "embed_batch: output has {} floats, {} texts need {}",
                out.len(),
                n,
                n * dim
            );
        }
        for (i, w) in offsets.windows(2).enumerate() {
            if w[0] > w[1] || w[1] as usize > texts.len() {
                bail!(
                    Status::InvalidArgument,
                    "embed_batch: offsets[{}..={}] = {}..{} is not inside the {} text bytes",
                    i,
                    i + 1,
                    w[0],
                    w[1],
                    texts.len()
                );
            }
        }
        if n == 0 {
            return Ok(0);
        }
        let e = match self.loaded.as_mut().ok_or_else(no_embedder)? {
            LoadedEmbedder::Model2Vec { embedder, .. } => &**embedder,
            LoadedEmbedder::Encoder(e) => {
                let mut first = None;
                for (i, (w, out)) in offsets
                    .windows(2)
                    .zip(out.chunks_exact_mut(dim))
                    .enumerate()
                {
                    let text = &texts[w[0] as usize..w[1] as usize];
                    if let Err(x) = e.embed(text, &mut self.ids, out) {
                        // a helper lost mid-text: nothing more can run
                        pool::check()?;
                        out.fill(0.0);
                        first.get_or_insert((i, x));
                    }
                }
                return match first {
                    None => Ok(n),
                    Some((i, e)) => Err(err!(e.status, "text {}: {}", i, e.message.as_str())),
                };
            }
        };
        // As many scratches as threads can run a chunk at once (the driver and the helpers that
        // take part); they stay allocated, so warm calls allocate nothing.
        let slots = (pool::threads().min(pool::helpers_ready() + 1).max(1) as usize).min(n);
        if self.batch_slots.len() < slots {
            self.batch_slots
                .try_reserve(slots - self.batch_slots.len())
                .map_err(|_| err!(Status::OutOfMemory, "embed_batch scratches"))?;
            self.batch_slots.resize_with(slots, BatchSlot::default);
        }
        for s in &mut self.batch_slots {
            *s.first_error.get_mut() = None;
        }
        let args = BatchArgs {
            embedder: e,
            texts,
            offsets,
            out: Disjoint::new(out),
            dim,
            slots: &self.batch_slots[..slots],
        };
        let chunk = (n / (slots * 8)).clamp(1, 32);
        pool::par_for(&args, n, chunk, embed_batch_kernel);
        pool::check()?;
        let first = self
            .batch_slots
            .iter_mut()
            .filter_map(|s| s.first_error.get_mut().take())
            .min_by_key(|(i, _)| *i);
        match first {
            None => Ok(n),
            Some((i, e)) => Err(err!(e.status, "text {}: {}", i, e.message.as_str())),
        }
    }

    /// The ids `embed` pools for `text` (Model2Vec: after dropping [UNK] and truncating; an
    /// encoder: [CLS] ... [SEP], truncated).
    pub fn embed_ids(&mut self, text: &[u8]) -> Result<&[u32]> {
        self.ids.clear();
        match self.loaded.as_mut().ok_or_else(no_embedder)? {
            LoadedEmbedder::Model2Vec { embedder, .. } => {
                let Ok(text) = core::str::from_utf8(text) else {
                    bail!(Status::InvalidUtf8, "text is not valid UTF-8");
                };
                embedder.encode_ids(text, &mut self.scratch, &mut self.ids)?;
            }
            LoadedEmbedder::Encoder(e) => e.ids(text, &mut self.ids)?,
        }
        Ok(&self.ids)
    }
}

fn no_embedder() -> Error {
    err!(Status::NoModel, "no embedder is loaded")
}

// ---------------------------------------------------------------------------------------------
// embed_batch: texts split across the pool

/// One thread's embedding buffers, borrowed by one running chunk at a time.
#[derive(Default)]
struct BatchSlot {
    busy: AtomicU32,
    scratch: UnsafeCell<EmbedScratch>,
    /// The lowest failing text index this slot saw in the current call, and why.
    first_error: UnsafeCell<Option<(usize, Error)>>,
}

struct BatchArgs<'a> {
    embedder: &'a Embedder<'a>,
    texts: &'a [u8],
    /// (n + 1,) byte offsets into `texts`, checked by `embed_batch`.
    offsets: &'a [u32],
    /// (n, dim): text `i` owns row `i`.
    out: Disjoint<'a, f32>,
    dim: usize,
    slots: &'a [BatchSlot],
}

// SAFETY: a slot's cells are used only by the chunk that holds its `busy` flag (see `claim`).
unsafe impl Sync for BatchSlot {}

/// Takes a free slot. At most as many chunks run at once as there are slots, so one is free
/// or about to be.
fn claim(slots: &[BatchSlot]) -> &BatchSlot {
    loop {
        for s in slots {
            if s.busy.load(Ordering::Relaxed) == 0 && s.busy.swap(1, Ordering::Acquire) == 0 {
                return s;
            }
        }
        core::hint::spin_loop();
    }
}

fn embed_batch_kernel(a: &BatchArgs<'_>, items: core::ops::Range<usize>) {
    let slot = claim(a.slots);
    // SAFETY: the slot is ours until `busy` is released below.
    let (scratch, first_error) =
        unsafe { (&mut *slot.scratch.get(), &mut *slot.first_error.get()) };
    for i in items {
        let text = &a.texts[a.offsets[i] as usize..a.offsets[i + 1] as usize];
        // SAFETY: row `i` of `out` belongs to this item only.
        let out = unsafe { a.out.slice(i * a.dim..(i + 1) * a.dim) };
        if let Err(e) = a.embedder.embed_bytes(text, scratch, out) {
            out.fill(0.0);
            if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                *first_error = Some((i, e));
            }
        }
    }
    slot.busy.store(0, Ordering::Release);
}
