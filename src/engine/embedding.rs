//! The Model2Vec owner: a safetensors file handed over by the host, the [`Embedder`] over it,
//! and the scratch its embeddings use (one per thread for `embed_batch`).

use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::embed::{EmbedScratch, Embedder};
use crate::error::{Error, Result, Status};
use crate::pool::{self, Disjoint};
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

/// A safetensors file and the embedder that borrows it. Fields drop in declaration order: the
/// embedder before the block it reads.
struct LoadedEmbedder {
    embedder: Embedder<'static>,
    /// Held for the embedder's borrow; freed when this drops.
    _file: Block,
}

impl LoadedEmbedder {
    fn new(file: Block, tokenizer_json: &[u8], config_json: &[u8]) -> Result<LoadedEmbedder> {
        // SAFETY: the embedder lives in the same `LoadedEmbedder` as the block, declared before it, so
        // it is dropped first and never outlives the bytes.
        let bytes = unsafe { file.bytes_unbound() };
        let embedder = Embedder::load(bytes, tokenizer_json, config_json)?;
        Ok(LoadedEmbedder {
            embedder,
            _file: file,
        })
    }
}

impl EmbedEngine {
    /// Loads a Model2Vec model from its three files (the safetensors block is ours from now on;
    /// the JSON files are read during the call); returns the vector width. On error nothing is
    /// loaded and the block is freed.
    pub fn load(
        &mut self,
        safetensors: Block,
        tokenizer_json: &[u8],
        config_json: &[u8],
    ) -> Result<usize> {
        self.loaded = None;
        let loaded = LoadedEmbedder::new(safetensors, tokenizer_json, config_json)?;
        let dim = loaded.embedder.dim();
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

    /// The loaded embedder.
    pub fn embedder(&self) -> Result<&Embedder<'static>> {
        loaded_embedder(&self.loaded)
    }

    pub fn embed(&mut self, text: &[u8], out: &mut [f32]) -> Result<usize> {
        pool::check()?;
        let e = loaded_embedder(&self.loaded)?;
        e.embed_bytes(text, &mut self.scratch, out)?;
        Ok(e.dim())
    }

    /// Embeds `n = offsets.len() - 1` texts: text `i` is `texts[offsets[i]..offsets[i + 1]]`,
    /// its vector goes to `out[i * dim..(i + 1) * dim]` (`out`: `(n, dim)`). The texts are split
    /// across the pool in chunks; each running chunk borrows one of the per-thread scratches.
    /// Every vector is the one `embed` gives for that text, for any thread count. A text that
    /// fails (invalid UTF-8) gets a zero vector, the others are still embedded, and the error of
    /// the lowest such index is returned. Returns `n`.
    pub fn embed_batch(&mut self, texts: &[u8], offsets: &[u32], out: &mut [f32]) -> Result<usize> {
        pool::check()?;
        let e = loaded_embedder(&self.loaded)?;
        let dim = e.dim();
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

    /// The ids `embed` pools for `text` (after dropping [UNK] and truncating).
    pub fn embed_ids(&mut self, text: &[u8]) -> Result<&[u32]> {
        let e = self
            .loaded
            .as_ref()
            .map(|l| &l.embedder)
            .ok_or_else(no_embedder)?;
        let Ok(text) = core::str::from_utf8(text) else {
            bail!(Status::InvalidUtf8, "text is not valid UTF-8");
        };
        self.ids.clear();
        e.encode_ids(text, &mut self.scratch, &mut self.ids)?;
        Ok(&self.ids)
    }
}

/// The embedder in `loaded` (a field, so callers can borrow the engine's scratch beside it).
fn loaded_embedder(loaded: &Option<LoadedEmbedder>) -> Result<&Embedder<'static>> {
    loaded.as_ref().map(|l| &l.embedder).ok_or_else(no_embedder)
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
