//! The language-model owner: a GGUF file handed over by the host and everything built over it
//! (tokenizer, forward pass), the conversation in its KV cache, the sampler, and streaming
//! detokenization. Text results go to the caller's buffer (`Driver::result`).

use alloc::vec::Vec;

use crate::chat::{Chat, OPTION_DROP_OLDEST, OPTION_THINK, Role};
use crate::error::{Result, Status};
use crate::gguf::Gguf;
use crate::grammar::{Constraint, Grammar, TokenTable};
use crate::json::ObjectWriter;
use crate::model::{Activation, LayerKind, LoadOptions, Model, RopeScaling};
use crate::quant::GgmlType;
use crate::sampler::{Sampler, Settings};
use crate::template::Template;
use crate::tokenizer::{StreamDecoder, Tokenizer, Work};
use crate::wasm_alloc::Block;
use crate::{bail, err};

/// `tokenize` flags.
pub const TOKENIZE_ADD_SPECIAL: u32 = 1;
pub const TOKENIZE_PARSE_SPECIAL: u32 = 2;
/// `detokenize` flag: render control tokens as their text.
pub const DETOKENIZE_SPECIAL: u32 = 1;

#[derive(Default)]
pub struct LlmEngine {
    loaded: Option<LoadedModel>,
    /// KV cache length the next `load` uses (0: the model's own, capped).
    pub context_request: usize,
    /// Type the next `load` quantizes F32/F16/BF16 matrices to (`None`: as stored).
    pub quantize_request: Option<GgmlType>,
    work: Work,
    stream: StreamDecoder,
    ids: Vec<u32>,
    /// The conversation in the KV cache and the sampler that writes the replies.
    pub chat: Chat,
    pub sampler: Sampler,
    /// The grammar the next reply follows (`chat_set_grammar`), taken by `chat_start`.
    grammar_next: Option<Grammar>,
    /// Every token's code points for grammar checks, built on the first constrained reply of
    /// a model.
    token_table: Option<TokenTable>,
}

/// A model file and everything that borrows it. Fields drop in declaration order: the borrowers
/// (`model`, `gguf`) before the block they read.
struct LoadedModel {
    /// The forward pass, when the file has tensors.
    model: Option<Model<'static>>,
    /// When the file has a vocabulary.
    tokenizer: Option<Tokenizer>,
    gguf: Gguf<'static>,
    file: Block,
}

impl LoadedModel {
    /// Parses `file` and builds the tokenizer (when the file has a vocabulary) and the model
    /// (when it has tensors).
    fn new(mut file: Block, options: LoadOptions) -> Result<LoadedModel> {
        if file.bytes().is_empty() {
            bail!(Status::BadFormat, "the model file is empty");
        }
        // SAFETY: `gguf` and `model` live in the same `LoadedModel` as the block, declared before
        // it, so they are dropped first and never outlive the bytes; nothing else holds a view.
        let bytes = unsafe { file.bytes_mut_unbound() };
        let gguf = Gguf::parse_for_model(bytes)?;
        let has_vocab = gguf
            .get("tokenizer.ggml.model")
            .is_some_and(|m| m.as_str() != Some("none"));
        let tokenizer = if has_vocab {
            Some(Tokenizer::from_gguf(&gguf)?)
        } else {
            None
        };
        let model = if !gguf.tensors().is_empty() {
            let model = Model::load_with(&gguf, options)?;
            if let Some(t) = tokenizer.as_ref().filter(|t| t.n_vocab() > model.cfg.vocab) {
                bail!(
                    Status::BadFormat,
                    "vocabulary of {} tokens, but the output has {} rows",
                    t.n_vocab(),
                    model.cfg.vocab
                );
            }
            Some(model)
        } else if !has_vocab {
            bail!(
                Status::BadFormat,
                "the file has neither tensors nor a vocabulary"
            );
        } else {
            None
        };
        Ok(LoadedModel {
            model,
            tokenizer,
            gguf,
            file,
        })
    }

    /// The file's `tokenizer.chat_template`, when it is a string.
    fn chat_template_source(&self) -> Option<&str> {
        self.gguf
            .get_str_opt("tokenizer.chat_template")
            .ok()
            .flatten()
    }
}

impl LlmEngine {
    /// Loads the GGUF file in `file` (ours from now on). On error nothing is loaded (the previous
    /// model is gone too) and the block is freed.
    pub fn load(&mut self, file: Block) -> Result<()> {
        self.unload();
        let options = LoadOptions {
            context: self.context_request,
            quantize: self.quantize_request,
        };
        let loaded = LoadedModel::new(file, options)?;
        self.chat = Chat::for_model(loaded.chat_template_source(), loaded.tokenizer.as_ref());
        self.stream = StreamDecoder::new();
        self.token_table = None;
        self.loaded = Some(loaded);
        Ok(())
    }

    /// Drops the model and the conversation, and frees the file and the buffers sized by it:
    /// what its tokenizer read (the word cache and scratch of `work`, the last `tokenize` ids)
    /// and the sampler's vocabulary-sized ones. Kept, they held megabytes for a model that was
    /// gone. The sampler's settings and RNG stay.
    pub fn unload(&mut self) {
        self.loaded = None;
        self.chat = Chat::default();
        self.stream = StreamDecoder::new();
        self.token_table = None;
        self.work = Work::default();
        self.ids = Vec::new();
        self.sampler.free_buffers();
    }

    fn loaded(&self) -> Result<&LoadedModel> {
        self.loaded
            .as_ref()
            .ok_or_else(|| err!(Status::NoModel, "no model is loaded"))
    }

    pub fn model(&mut self) -> Result<&mut Model<'static>> {
        self.loaded
            .as_mut()
            .and_then(|l| l.model.as_mut())
            .ok_or_else(no_weights)
    }

    /// The model, if one with weights is loaded.
    pub fn model_ref(&self) -> Option<&Model<'static>> {
        self.loaded.as_ref().and_then(|l| l.model.as_ref())
    }

    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        tokenizer_of(&self.loaded)
    }

    /// `text` -> ids (returned as a slice of an engine buffer).
    pub fn tokenize(&mut self, text: &[u8], flags: u32) -> Result<&[u32]> {
        let Ok(text) = core::str::from_utf8(text) else {
            bail!(Status::InvalidUtf8, "text is not valid UTF-8");
        };
        let tok = tokenizer_of(&self.loaded)?;
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

    /// ids -> bytes in `out`; returns their length.
    pub fn detokenize(&self, ids: &[u32], flags: u32, out: &mut Vec<u8>) -> Result<usize> {
        out.clear();
        self.tokenizer()?
            .decode(ids, flags & DETOKENIZE_SPECIAL != 0, out)?;
        Ok(out.len())
    }

    /// Streaming detokenization: the complete UTF-8 text `id` brings, in `out`. `id < 0`
    /// flushes what is held back and restarts the stream.
    pub fn stream_piece(&mut self, id: i64, flags: u32, out: &mut Vec<u8>) -> Result<usize> {
        let tok = tokenizer_of(&self.loaded)?;
        out.clear();
        if id < 0 {
            self.stream.finish(out);
            self.stream = StreamDecoder::new();
        } else {
            self.stream
                .push(tok, id as u32, flags & DETOKENIZE_SPECIAL != 0, out)?;
        }
        Ok(out.len())
    }

    /// A JSON description of the loaded model into `out`; returns its length.
    pub fn model_info(&self, out: &mut Vec<u8>) -> Result<usize> {
        let l = self.loaded()?;
        let g = &l.gguf;
        out.clear();
        let mut o = ObjectWriter::new(out);
        o.string(
            "name",
            g.get_str_opt("general.name").ok().flatten().unwrap_or(""),
        )
        .uint("gguf_version", g.version() as u64)
        .uint("file_bytes", l.file.bytes().len() as u64);
        if let Some(m) = &l.model {
            let c = &m.cfg;
            o.string("arch", c.arch.name())
                .uint("dim", c.dim as u64)
                .uint("layers", c.n_layers as u64)
                .uint("heads", c.n_heads as u64)
                .uint("kv_heads", c.n_kv_heads as u64)
                .uint("head_dim", c.head_dim as u64)
                .uint("ffn", c.ffn_dim as u64)
                .uint("vocab", c.vocab as u64)
                .uint("context", m.context as u64)
                .uint("train_context", c.train_context as u64)
                .float32("rope_base", c.rope_base)
                .float32("rms_eps", c.rms_eps)
                .uint("kv_cache_bytes", m.kv_cache_bytes() as u64)
                .uint("weight_bytes_per_token", m.weight_bytes_per_token() as u64);
            // The attention of each layer, the window and local RoPE base where there are
            // local layers, the activation, and the bytes of matrices quantized at load.
            o.strings(
                "layer_kinds",
                (0..c.n_layers).map(|l| match c.layer_kind(l) {
                    LayerKind::Local => "local",
                    LayerKind::Global => "global",
                    LayerKind::Conv => "conv",
                    LayerKind::DeltaNet => "delta_net",
                }),
            );
            if c.sliding_window > 0 {
                o.uint("sliding_window", c.sliding_window as u64)
                    .float32("rope_base_local", c.rope_base_local);
            }
            // RoPE stretched past the trained context: by how much, and how
            match (c.rope_scaling, c.rope_factor) {
                (RopeScaling::Linear, 1.0) => {}
                (RopeScaling::Linear, f) => {
                    o.string("rope_scaling", "linear").float32("rope_factor", f);
                }
                (RopeScaling::Yarn, f) => {
                    o.string("rope_scaling", "yarn")
                        .float32("rope_factor", f)
                        .uint("rope_original_context", c.rope_original_context as u64);
                }
            }
            // What sets the architecture apart, where it applies: Gemma 2's soft caps,
            // Granite's scales, SmolLM3's layers without RoPE (every n-th).
            for (key, v, unset) in [
                ("attn_softcap", c.attn_softcap, 0.0),
                ("final_softcap", c.final_softcap, 0.0),
                ("embed_scale", c.embed_scale, 1.0),
                ("residual_scale", c.residual_scale, 1.0),
                ("logit_scale", c.logit_scale, 1.0),
            ] {
                if v != unset {
                    o.float32(key, v);
                }
            }
            if c.no_rope_step > 0 {
                o.uint("no_rope_every", c.no_rope_step as u64);
            }
            if c.conv_taps > 0 {
                o.uint("conv_taps", c.conv_taps as u64);
            }
            if let Some(d) = c.delta_net {
                o.uint("delta_net_key_heads", d.k_heads as u64)
                    .uint("delta_net_value_heads", d.v_heads as u64)
                    .uint("delta_net_head_dim", d.head_dim as u64);
            }
            if let Some(s) = c.rope_sections {
                let mut sections = o.object("rope_sections");
                for (name, n) in ["t", "h", "w", "e"].into_iter().zip(s) {
                    sections.uint(name, n as u64);
                }
            }
            o.string(
                "activation",
                match c.activation {
                    Activation::Silu => "silu",
                    Activation::GeluTanh => "gelu_tanh",
                },
            )
            .uint("quantized_at_load_bytes", m.quantized_bytes as u64);
        }
        // Tensor types and how many tensors of each.
        let mut counts: Vec<(&str, u64)> = Vec::new();
        for t in g.tensors() {
            match counts.iter_mut().find(|(n, _)| *n == t.ty.name()) {
                Some(c) => c.1 += 1,
                None => counts.push((t.ty.name(), 1)),
            }
        }
        {
            let mut types = o.object("tensor_types");
            for (name, count) in counts {
                types.uint(name, count);
            }
        }
        if let Some(t) = &l.tokenizer {
            let kind = match t.algorithm() {
                crate::tokenizer::Algorithm::Bpe { .. } => "bpe",
                crate::tokenizer::Algorithm::Spm { .. } => "spm",
                crate::tokenizer::Algorithm::Wpm { .. } => "wpm",
            };
            let id = |v: Option<u32>| v.map_or(-1, |v| v as i64);
            o.string("tokenizer", kind)
                .uint("n_vocab", t.n_vocab() as u64)
                .int("bos", id(t.bos()))
                .int("eos", id(t.eos()))
                .boolean("add_bos", t.add_bos())
                .string("chat_template", self.chat.template.name());
            if let Some(w) = &self.chat.warning {
                o.string("chat_template_warning", w);
            }
        }
        drop(o);
        Ok(out.len())
    }

    // -----------------------------------------------------------------------------------------
    // Chat: the conversation in the KV cache, the sampler, replies token by token (src/chat.rs,
    // src/sampler.rs).

    /// Forgets the conversation and every cached token.
    pub fn chat_reset(&mut self) -> Result<()> {
        self.chat.reset();
        if let Ok(m) = self.model() {
            m.reset();
        }
        Ok(())
    }

    /// Appends a message (`role`: 0 system, 1 user, 2 assistant, 3 raw); returns the count.
    pub fn chat_add(&mut self, role: u32, text: &[u8]) -> Result<usize> {
        self.chat.add(Role::from_u32(role)?, text)
    }

    /// Runs the new messages and the generation prompt; returns the prompt tokens run. A
    /// grammar set with `chat_set_grammar` applies to this reply (and is used up by it).
    pub fn chat_start(&mut self, max_tokens: u32, now_ms: f64) -> Result<usize> {
        let (model, tok) = generator_of(&mut self.loaded)?;
        let constraint = match &self.grammar_next {
            Some(g) => {
                if self.token_table.is_none() {
                    self.token_table = Some(TokenTable::new(tok)?);
                }
                Some(Constraint::new(g.clone())?)
            }
            None => None,
        };
        let n = self
            .chat
            .start(model, tok, &mut self.work, max_tokens, now_ms)?;
        self.chat.constraint = constraint;
        self.grammar_next = None;
        Ok(n)
    }

    /// Sets the grammar of the next reply: `kind` 0 none, 1 GBNF text, 2 JSON schema text,
    /// 3 any JSON object. Errors name the byte position and the reason.
    pub fn chat_set_grammar(&mut self, kind: u32, text: &[u8]) -> Result<()> {
        self.grammar_next = crate::grammar::compile(kind, text)?;
        Ok(())
    }

    /// The next piece of the reply in `out`; its length, or the end status.
    pub fn chat_next(&mut self, now_ms: f64, out: &mut Vec<u8>) -> Result<usize> {
        let (model, tok) = generator_of(&mut self.loaded)?;
        let table = self.token_table.as_ref();
        self.chat
            .next(model, tok, &mut self.sampler, table, now_ms, out)
    }

    pub fn chat_set_options(&mut self, flags: u32) -> Result<()> {
        let known = OPTION_DROP_OLDEST | OPTION_THINK;
        if flags & !known != 0 {
            bail!(
                Status::InvalidArgument,
                "chat_set_options: unknown flags {:#x}",
                flags & !known
            );
        }
        self.chat.drop_oldest = flags & OPTION_DROP_OLDEST != 0;
        self.chat.set_think(flags & OPTION_THINK != 0);
        Ok(())
    }

    /// `id` 0: the file's template; 1..: [`Template::from_id`].
    pub fn chat_set_template(&mut self, id: u32) -> Result<()> {
        let t = match id {
            0 => None,
            _ => Some(Template::from_id(id).ok_or_else(|| {
                err!(
                    Status::InvalidArgument,
                    "chat template id {} is not 0..={}",
                    id,
                    Template::all().count()
                )
            })?),
        };
        self.set_template(t);
        Ok(())
    }

    /// The template named `name` (llama.cpp's names, `qwen3`; empty: the file's).
    pub fn chat_set_template_name(&mut self, name: &[u8]) -> Result<()> {
        self.set_template(template_by_name(name)?);
        Ok(())
    }

    /// `Some(t)`, or the loaded file's own template.
    fn set_template(&mut self, t: Option<Template>) {
        let l = self.loaded.as_ref();
        let source = l.and_then(LoadedModel::chat_template_source);
        self.chat
            .set_template(t, source, l.and_then(|l| l.tokenizer.as_ref()));
    }

    /// Renders a conversation given as JSON (`{"messages": [{"role", "content"}..],
    /// "add_assistant": bool, "think": bool}`) with the template named `name` (empty: the
    /// loaded model's) into `out`, without running anything; returns its length.
    pub fn template_render(&self, name: &[u8], request: &[u8], out: &mut Vec<u8>) -> Result<usize> {
        let t = template_by_name(name)?.unwrap_or(self.chat.template);
        let req = crate::template::Request::parse(request)?;
        let mut text = alloc::string::String::new();
        t.render(&req.messages, 0, &mut text);
        if req.add_assistant {
            t.open_reply(req.think, &mut text);
        }
        out.clear();
        out.try_reserve(text.len())
            .map_err(|_| err!(Status::OutOfMemory, "rendering of {} bytes", text.len()))?;
        out.extend_from_slice(text.as_bytes());
        Ok(out.len())
    }

    /// Where the reply stands, with its timings, as JSON in `out`; returns its length.
    pub fn chat_stats(&self, out: &mut Vec<u8>) -> Result<usize> {
        let c = &self.chat;
        let t = &c.timings;
        out.clear();
        let mut o = ObjectWriter::new(out);
        o.string("state", c.state.name())
            .string("template", c.template.name())
            .uint("prompt_tokens", t.prompt_tokens as u64)
            .uint("tokens", t.tokens as u64)
            .float("prefill_ms", t.prefill_ms())
            .float("prefill_tps", t.prefill_tps())
            .float("decode_ms", t.decode_ms())
            .float("decode_tps", t.decode_tps())
            .uint("kv_tokens", c.ids().len() as u64)
            .uint("context", self.model_ref().map_or(0, |m| m.context) as u64)
            .uint("messages", c.messages().len() as u64)
            .uint("dropped_messages", c.dropped_messages as u64)
            .int("last_token", c.last_token.map_or(-1, |v| v as i64))
            .boolean("grammar", c.constraint.is_some())
            .uint(
                "grammar_masks",
                c.constraint.as_ref().map_or(0, |g| g.masks) as u64,
            );
        drop(o);
        Ok(out.len())
    }

    /// New sampler settings (the RNG restarts from `settings.seed`).
    pub fn sampler_set(&mut self, settings: Settings) -> Result<()> {
        self.sampler.configure(settings)
    }

    /// Samples a token from the logits of the last token run, with `history` for the
    /// repetition penalty (for hosts that drive `step` themselves).
    pub fn sample(&mut self, history: &[u32]) -> Result<u32> {
        let l = self.loaded.as_ref();
        let m = l.and_then(|l| l.model.as_ref()).ok_or_else(no_weights)?;
        let n = l
            .and_then(|l| l.tokenizer.as_ref())
            .map_or(m.logits.len(), |t| t.n_vocab().min(m.logits.len()));
        self.sampler.sample(&m.logits[..n], history)
    }
}

/// A template name from the ABI: `None` for an empty one (the model's own).
fn template_by_name(name: &[u8]) -> Result<Option<Template>> {
    if name.is_empty() {
        return Ok(None);
    }
    let found = core::str::from_utf8(name)
        .ok()
        .and_then(Template::from_name);
    if found.is_none() {
        let mut known = alloc::string::String::new();
        Template::names(&mut known);
        bail!(
            Status::InvalidArgument,
            "unknown chat template \"{}\" (known: {})",
            alloc::string::String::from_utf8_lossy(name),
            known
        );
    }
    Ok(found)
}

/// The tokenizer of what is loaded. (Free functions over the `loaded` field, so that callers can
/// use the engine's other fields beside what they return.)
fn tokenizer_of(loaded: &Option<LoadedModel>) -> Result<&Tokenizer> {
    loaded
        .as_ref()
        .and_then(|l| l.tokenizer.as_ref())
        .ok_or_else(no_vocabulary)
}

/// The model with weights and its tokenizer: what a reply needs.
fn generator_of(loaded: &mut Option<LoadedModel>) -> Result<(&mut Model<'static>, &Tokenizer)> {
    let l = loaded.as_mut().ok_or_else(no_vocabulary)?;
    let tok = l.tokenizer.as_ref().ok_or_else(no_vocabulary)?;
    let model = l.model.as_mut().ok_or_else(no_weights)?;
    Ok((model, tok))
}

fn no_vocabulary() -> crate::error::Error {
    err!(Status::NoModel, "no model with a vocabulary is loaded")
}

fn no_weights() -> crate::error::Error {
    err!(Status::NoModel, "no model with weights is loaded")
}
