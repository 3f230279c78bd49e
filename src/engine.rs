//! The driver's engine: the loaded model file, its tokenizer and forward pass, the Model2Vec
//! embedder, and the result buffer text-returning exports write into. One static instance
//! (`ENGINE` in abi.rs); only the driver thread touches it.

use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::fmt::Write;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::embed::{Embedder, Scratch as EmbedScratch};
use crate::error::{Error, Result, Status};
use crate::gguf::Gguf;
use crate::model::Model;
use crate::tokenizer::{StreamDecoder, Tokenizer, Work};
use crate::{bail, err, pool};

/// `tokenize` flags.
pub const TOKENIZE_ADD_SPECIAL: u32 = 1;
pub const TOKENIZE_PARSE_SPECIAL: u32 = 2;
/// `detokenize` flag: render control tokens as their text.
pub const DETOKENIZE_SPECIAL: u32 = 1;

#[derive(Default)]
pub struct Engine {
    /// The model file, in linear memory; the engine owns it from `load_model` on.
    pub file: Option<&'static [u8]>,
    pub gguf: Option<Gguf<'static>>,
    pub tokenizer: Option<Tokenizer>,
    work: Work,
    pub model: Option<Model<'static>>,
    /// KV cache length the next `load_model` uses (0: the model's own, capped).
    pub context_request: usize,
    /// Type the next `load_model` quantizes F32/F16/BF16 matrices to (`None`: as stored).
    pub quantize_request: Option<crate::quant::GgmlType>,
    stream: StreamDecoder,
    /// Model2Vec: its safetensors file (owned like `file`) and the embedder over it.
    pub embed_file: Option<&'static [u8]>,
    pub embedder: Option<Embedder<'static>>,
    embed_scratch: Option<EmbedScratch>,
    /// `embed_batch`: one scratch per thread that can run at once (claimed per chunk).
    batch_slots: Vec<BatchSlot>,
    /// Text results (model_info, detokenize, stream pieces): valid until the next call.
    pub result: Vec<u8>,
    ids: Vec<u32>,
    /// The conversation in the KV cache and the sampler that writes the replies (chat section).
    pub chat: crate::chat::Chat,
    pub sampler: crate::sampler::Sampler,
}

impl Engine {
    /// Parses `file` and builds the tokenizer (when the file has a vocabulary) and the model
    /// (when it has tensors). On error nothing of the previous model is kept.
    pub fn load_model(&mut self, file: &'static [u8]) -> Result<()> {
        self.model = None;
        self.tokenizer = None;
        self.gguf = None;
        self.chat = crate::chat::Chat::default();
        self.file = Some(file);
        let g = Gguf::parse(file)?;
        let has_vocab = g
            .get("tokenizer.ggml.model")
            .is_some_and(|m| m.as_str() != Some("none"));
        if has_vocab {
            self.tokenizer = Some(Tokenizer::from_gguf(&g)?);
        }
        if g.tensors().len() > 0 {
            let opts = crate::model::LoadOptions {
                context: self.context_request,
                quantize: self.quantize_request,
            };
            let model = Model::load_with(&g, opts)?;
            if let Some(t) = &self.tokenizer {
                if t.n_vocab() > model.cfg.vocab {
                    bail!(
                        Status::BadFormat,
                        "vocabulary of {} tokens, but the output has {} rows",
                        t.n_vocab(),
                        model.cfg.vocab
                    );
                }
            }
            self.model = Some(model);
        } else if !has_vocab {
            bail!(
                Status::BadFormat,
                "the file has neither tensors nor a vocabulary"
            );
        }
        self.chat = crate::chat::Chat::for_model(chat_template_source(&g), self.tokenizer.as_ref());
        self.gguf = Some(g);
        self.stream = StreamDecoder::new();
        Ok(())
    }

    pub fn model(&mut self) -> Result<&mut Model<'static>> {
        self.model
            .as_mut()
            .ok_or_else(|| err!(Status::NoModel, "no model with weights is loaded"))
    }

    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model with a vocabulary is loaded"))
    }

    /// `text` -> ids in `self.ids` (returned as a slice).
    pub fn tokenize(&mut self, text: &[u8], flags: u32) -> Result<&[u32]> {
        let Ok(text) = core::str::from_utf8(text) else {
            bail!(Status::InvalidUtf8, "text is not valid UTF-8");
        };
        let tok = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model with a vocabulary is loaded"))?;
        self.ids.clear();
        tok.encode_with(
            &mut self.work,
            text,
            flags & TOKENIZE_ADD_SPECIAL != 0,
            flags & TOKENIZE_PARSE_SPECIAL != 0,
            &mut self.ids,
        )?;
        Ok(&self.ids)
    }

    /// ids -> bytes in `self.result`.
    pub fn detokenize(&mut self, ids: &[u32], flags: u32) -> Result<usize> {
        let tok = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model with a vocabulary is loaded"))?;
        self.result.clear();
        tok.decode(ids, flags & DETOKENIZE_SPECIAL != 0, &mut self.result)?;
        Ok(self.result.len())
    }

    /// Streaming detokenization: the complete UTF-8 text `id` brings, in `self.result`.
    /// `id < 0` flushes what is held back and restarts the stream.
    pub fn stream_piece(&mut self, id: i64, flags: u32) -> Result<usize> {
        let tok = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model with a vocabulary is loaded"))?;
        self.result.clear();
        if id < 0 {
            self.stream.finish(&mut self.result);
            self.stream = StreamDecoder::new();
        } else {
            self.stream.push(
                tok,
                id as u32,
                flags & DETOKENIZE_SPECIAL != 0,
                &mut self.result,
            )?;
        }
        Ok(self.result.len())
    }

    /// A JSON description of the loaded model into `self.result`.
    pub fn model_info(&mut self) -> Result<usize> {
        let g = self
            .gguf
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model is loaded"))?;
        let mut s = alloc::string::String::new();
        s.push('{');
        let name = g.get_str_opt("general.name").ok().flatten().unwrap_or("");
        let _ = write!(s, "\"name\":");
        json_string(&mut s, name);
        let _ = write!(
            s,
            ",\"gguf_version\":{},\"file_bytes\":{}",
            g.version(),
            g.bytes().len()
        );
        if let Some(m) = &self.model {
            let c = &m.cfg;
            let _ = write!(
                s,
                ",\"arch\":\"{}\",\"dim\":{},\"layers\":{},\"heads\":{},\"kv_heads\":{},\"head_dim\":{},\"ffn\":{},\"vocab\":{},\"context\":{},\"train_context\":{},\"rope_base\":{},\"rms_eps\":{}",
                c.arch.name(),
                c.dim,
                c.n_layers,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim,
                c.ffn_dim,
                c.vocab,
                m.context,
                c.train_context,
                c.rope_base,
                c.rms_eps
            );
            let _ = write!(s, ",\"kv_cache_bytes\":{}", m.kv_cache_bytes());
            arch_info(&mut s, m);
        }
        // Tensor types and how many tensors of each.
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for t in g.tensors() {
            match counts.iter_mut().find(|(n, _)| *n == t.ty.name()) {
                Some(c) => c.1 += 1,
                None => counts.push((t.ty.name(), 1)),
            }
        }
        s.push_str(",\"tensor_types\":{");
        for (i, (n, c)) in counts.iter().enumerate() {
            let _ = write!(s, "{}\"{}\":{}", if i > 0 { "," } else { "" }, n, c);
        }
        s.push('}');
        if let Some(t) = &self.tokenizer {
            let kind = match t.model() {
                crate::tokenizer::Model::Bpe { .. } => "bpe",
                crate::tokenizer::Model::Spm { .. } => "spm",
            };
            let _ = write!(s, ",\"tokenizer\":\"{}\",\"n_vocab\":{}", kind, t.n_vocab());
            let id = |v: Option<u32>| v.map_or(-1, |v| v as i64);
            let _ = write!(
                s,
                ",\"bos\":{},\"eos\":{},\"add_bos\":{}",
                id(t.bos()),
                id(t.eos()),
                t.add_bos()
            );
            let _ = write!(s, ",\"chat_template\":\"{}\"", self.chat.template.name());
            if let Some(w) = self.chat.warning {
                s.push_str(",\"chat_template_warning\":");
                json_string(&mut s, w);
            }
        }
        s.push('}');
        self.result.clear();
        self.result.extend_from_slice(s.as_bytes());
        Ok(self.result.len())
    }

    /// Loads a Model2Vec model from its three files; returns the vector width.
    pub fn load_embedder(
        &mut self,
        safetensors: &'static [u8],
        tokenizer_json: &[u8],
        config_json: &[u8],
    ) -> Result<usize> {
        self.embedder = None;
        self.embed_file = Some(safetensors);
        let e = Embedder::load(safetensors, tokenizer_json, config_json)?;
        let dim = e.dim();
        self.embedder = Some(e);
        self.embed_scratch = Some(EmbedScratch::new());
        Ok(dim)
    }

    pub fn embed(&mut self, text: &[u8], out: &mut [f32]) -> Result<usize> {
        let e = self
            .embedder
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no embedder is loaded"))?;
        let scratch = self.embed_scratch.get_or_insert_with(EmbedScratch::new);
        e.embed_bytes(text, scratch, out)?;
        Ok(e.dim())
    }

    /// Embeds `n = offsets.len() - 1` texts: text `i` is `texts[offsets[i]..offsets[i + 1]]`,
    /// its vector goes to `out[i * dim..(i + 1) * dim]` (`out`: `(n, dim)`). The texts are split
    /// across the pool in chunks; each running chunk borrows one of the per-thread scratches.
    /// Every vector is the one `embed` gives for that text, for any thread count. A text that
    /// fails (invalid UTF-8) gets a zero vector, the others are still embedded, and the error of
    /// the lowest such index is returned. Returns `n`.
    pub fn embed_batch(&mut self, texts: &[u8], offsets: &[u32], out: &mut [f32]) -> Result<usize> {
        let e = self
            .embedder
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no embedder is loaded"))?;
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
            texts: texts.as_ptr(),
            offsets: offsets.as_ptr(),
            out: out.as_mut_ptr(),
            dim,
            slots: &self.batch_slots[..slots],
        };
        let chunk = (n / (slots * 8)).clamp(1, 32);
        // SAFETY: each item (text) writes only its own row of `out`; a running chunk holds one
        // slot exclusively (claimed with an atomic swap); everything outlives the call.
        unsafe { pool::par_for(embed_batch_kernel, &args as *const _ as *const u8, n, chunk) };
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
            .embedder
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no embedder is loaded"))?;
        let Ok(text) = core::str::from_utf8(text) else {
            bail!(Status::InvalidUtf8, "text is not valid UTF-8");
        };
        let scratch = self.embed_scratch.get_or_insert_with(EmbedScratch::new);
        self.ids.clear();
        e.encode_ids(text, scratch, &mut self.ids)?;
        Ok(&self.ids)
    }
}

/// model_info's architecture fields: the attention of each layer (`"layer_kinds"`, "local" or
/// "global"), the window and local RoPE base where there are local layers, the activation, and
/// the bytes of matrices quantized at load.
fn arch_info(s: &mut alloc::string::String, m: &Model<'_>) {
    use crate::model::{Activation, LayerKind};
    let c = &m.cfg;
    s.push_str(",\"layer_kinds\":[");
    for l in 0..c.n_layers {
        let kind = match c.layer_kind(l) {
            LayerKind::Local => "local",
            LayerKind::Global => "global",
        };
        let _ = write!(s, "{}\"{}\"", if l > 0 { "," } else { "" }, kind);
    }
    s.push(']');
    if c.sliding_window > 0 {
        let _ = write!(
            s,
            ",\"sliding_window\":{},\"rope_base_local\":{}",
            c.sliding_window, c.rope_base_local
        );
    }
    let act = match c.activation {
        Activation::Silu => "silu",
        Activation::GeluTanh => "gelu_tanh",
    };
    let _ = write!(
        s,
        ",\"activation\":\"{}\",\"quantized_at_load_bytes\":{}",
        act, m.quantized_bytes
    );
}

fn json_string(s: &mut alloc::string::String, v: &str) {
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
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
    embedder: &'a Embedder<'static>,
    texts: *const u8,
    /// (n + 1,) byte offsets into `texts`, checked by `embed_batch`.
    offsets: *const u32,
    /// (n, dim)
    out: *mut f32,
    dim: usize,
    slots: &'a [BatchSlot],
}

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

unsafe fn embed_batch_kernel(args: *const u8, start: usize, end: usize) {
    // SAFETY: `embed_batch` passes a live BatchArgs.
    let a = unsafe { &*(args as *const BatchArgs<'_>) };
    let slot = claim(a.slots);
    // SAFETY: the slot is ours until `busy` is released below.
    let (scratch, first_error) =
        unsafe { (&mut *slot.scratch.get(), &mut *slot.first_error.get()) };
    for i in start..end {
        // SAFETY: offsets were checked to lie inside the text bytes and to be ordered; row `i`
        // of `out` belongs to this item only.
        let (text, out) = unsafe {
            let (lo, hi) = (*a.offsets.add(i) as usize, *a.offsets.add(i + 1) as usize);
            (
                core::slice::from_raw_parts(a.texts.add(lo), hi - lo),
                core::slice::from_raw_parts_mut(a.out.add(i * a.dim), a.dim),
            )
        };
        if let Err(e) = a.embedder.embed_bytes(text, scratch, out) {
            out.fill(0.0);
            if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                *first_error = Some((i, e));
            }
        }
    }
    slot.busy.store(0, Ordering::Release);
}

// ---------------------------------------------------------------------------------------------
// Chat: the conversation in the KV cache, the sampler, replies token by token (src/chat.rs,
// src/sampler.rs). Driver only, like the rest.

use crate::chat::{OPTION_DROP_OLDEST, Role};
use crate::sampler::Settings;

/// The file's `tokenizer.chat_template`, when it is a string.
fn chat_template_source<'a>(g: &Gguf<'a>) -> Option<&'a str> {
    g.get_str_opt("tokenizer.chat_template").ok().flatten()
}

/// A JSON number (JSON has no NaN or infinity: those become 0).
fn json_f64(s: &mut alloc::string::String, v: f64) {
    let _ = write!(s, "{}", if v.is_finite() { v } else { 0.0 });
}

impl Engine {
    /// Forgets the conversation and every cached token.
    pub fn chat_reset(&mut self) -> Result<()> {
        self.chat.reset();
        if let Some(m) = self.model.as_mut() {
            m.reset();
        }
        Ok(())
    }

    /// Appends a message (`role`: 0 system, 1 user, 2 assistant, 3 raw); returns the count.
    pub fn chat_add(&mut self, role: u32, text: &[u8]) -> Result<usize> {
        self.chat.add(Role::from_u32(role)?, text)
    }

    /// Runs the new messages and the generation prompt; returns the prompt tokens run.
    pub fn chat_start(&mut self, max_tokens: u32, now_ms: f64) -> Result<usize> {
        let tok = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model with a vocabulary is loaded"))?;
        let m = self
            .model
            .as_mut()
            .ok_or_else(|| err!(Status::NoModel, "no model with weights is loaded"))?;
        self.chat.start(m, tok, &mut self.work, max_tokens, now_ms)
    }

    /// The next piece of the reply in `self.result`; its length, or the end status.
    pub fn chat_next(&mut self, now_ms: f64) -> Result<usize> {
        let tok = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model with a vocabulary is loaded"))?;
        let m = self
            .model
            .as_mut()
            .ok_or_else(|| err!(Status::NoModel, "no model with weights is loaded"))?;
        self.chat
            .next(m, tok, &mut self.sampler, now_ms, &mut self.result)
    }

    pub fn chat_set_options(&mut self, flags: u32) -> Result<()> {
        if flags & !OPTION_DROP_OLDEST != 0 {
            bail!(
                Status::InvalidArgument,
                "chat_set_options: unknown flags {:#x}",
                flags & !OPTION_DROP_OLDEST
            );
        }
        self.chat.drop_oldest = flags & OPTION_DROP_OLDEST != 0;
        Ok(())
    }

    pub fn chat_set_template(&mut self, id: u32) -> Result<()> {
        let source = self.gguf.as_ref().and_then(chat_template_source);
        self.chat.set_template(id, source, self.tokenizer.as_ref())
    }

    /// Where the reply stands, with its timings, as JSON in `self.result`.
    pub fn chat_stats(&mut self) -> Result<usize> {
        let c = &self.chat;
        let t = &c.timings;
        let mut s = alloc::string::String::new();
        let _ = write!(
            s,
            "{{\"state\":\"{}\",\"template\":\"{}\"",
            c.state.name(),
            c.template.name()
        );
        let _ = write!(
            s,
            ",\"prompt_tokens\":{},\"tokens\":{}",
            t.prompt_tokens, t.tokens
        );
        for (k, v) in [
            ("prefill_ms", t.prefill_ms()),
            ("prefill_tps", t.prefill_tps()),
            ("decode_ms", t.decode_ms()),
            ("decode_tps", t.decode_tps()),
        ] {
            let _ = write!(s, ",\"{k}\":");
            json_f64(&mut s, v);
        }
        let context = self.model.as_ref().map_or(0, |m| m.context);
        let _ = write!(
            s,
            ",\"kv_tokens\":{},\"context\":{},\"messages\":{},\"dropped_messages\":{},\"last_token\":{}}}",
            c.ids().len(),
            context,
            c.messages().len(),
            c.dropped_messages,
            c.last_token.map_or(-1, |v| v as i64)
        );
        self.result.clear();
        self.result.extend_from_slice(s.as_bytes());
        Ok(self.result.len())
    }

    /// New sampler settings (the RNG restarts from `settings.seed`).
    pub fn sampler_set(&mut self, settings: Settings) -> Result<()> {
        self.sampler.configure(settings)
    }

    /// Samples a token from the logits of the last token run, with `history` for the
    /// repetition penalty (for hosts that drive `step` themselves).
    pub fn sample(&mut self, history: &[u32]) -> Result<u32> {
        let m = self
            .model
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model with weights is loaded"))?;
        let n = self
            .tokenizer
            .as_ref()
            .map_or(m.logits.len(), |t| t.n_vocab().min(m.logits.len()));
        self.sampler.sample(&m.logits[..n], history)
    }
}
