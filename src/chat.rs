//! Chat: the conversation held in the KV cache, and the reply loop (the templates that render
//! it are in `template.rs`).
//!
//! One turn, in the order data flows:
//! ```text
//! chat_add(user, "Hi")            messages: [.., user "Hi"]                 (text, not yet run)
//! chat_start(max_tokens)          close the last reply + render the new messages + the
//!                                 generation prompt -> ids -> prefill ONLY those ids
//!                                 (the KV cache keeps everything before them)
//! chat_next() * n                 sample(logits, history) -> id; its text piece (complete
//!                                 UTF-8) to the result buffer; run the id -> logits
//! ... until an end-of-generation token, the token limit, the stop flag or a full context
//! ```
//! The cache holds exactly `ids` (what was prefilled and generated, in order); the sampled
//! end-of-generation token is not run, so the next `chat_start` begins with the template's
//! closing markup (`<|im_end|>\n` for ChatML) before the new messages.
//!
//! The template is recognised by its markers in `tokenizer.chat_template` as llama.cpp does
//! (`template.rs`; ChatML with a warning when it is not). Like llama.cpp's built-in templates,
//! no default system prompt is inserted, and the rendered text is tokenized with control
//! tokens parsed (so SmolLM2's prompt ids equal llama.cpp's). Each `chat_start` renders only
//! the new messages, as they follow the ones in the cache.
//!
//! When the context cannot hold a new turn, `chat_start` fails with CONTEXT_FULL, or (option
//! `drop_oldest`) drops the oldest turns after any leading system messages, keeps the cached
//! prefix the new rendering shares with the old one, and prefills the rest. Writes past the
//! cache are impossible: `Model::forward` refuses them and every path checks room first.

pub mod jinja;

use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{Result, Status};
use crate::grammar::{Constraint, TokenTable};
use crate::model::Model;
use crate::sampler::Sampler;
use crate::state::{clear_stop, stop_requested};
use crate::template::Template;
use crate::tokenizer::{StreamDecoder, Tokenizer, Work};
use crate::{bail, err};

/// Prompt tokens run between two looks at the stop flag.
const PREFILL_CHUNK: usize = 64;
/// Most messages a conversation holds (older ones must be dropped or the chat reset).
pub const MAX_MESSAGES: usize = 1 << 16;

pub use crate::template::{Message, Role};

/// `text` -> ids, control tokens parsed; BOS first when `first` and the vocabulary adds it.
pub fn encode_prompt(
    tok: &Tokenizer,
    work: &mut Work,
    text: &str,
    first: bool,
    out: &mut Vec<u32>,
) -> Result<()> {
    if let Some(bos) = tok.bos().filter(|_| first && tok.add_bos()) {
        out.try_reserve(1)
            .map_err(|_| err!(Status::OutOfMemory, "prompt ids"))?;
        out.push(bos);
    }
    tok.encode_with(work, text, false, true, out)
}

// ---- the conversation ------------------------------------------------------------------------

/// Where the current reply stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplyState {
    /// No reply started since the conversation began.
    #[default]
    Idle,
    Generating,
    /// The model wrote an end-of-generation token.
    EndOfText,
    /// `max_tokens` reached.
    Limit,
    /// The stop flag was set.
    Stopped,
    /// The KV cache is full.
    ContextFull,
}

impl ReplyState {
    pub fn name(self) -> &'static str {
        match self {
            ReplyState::Idle => "idle",
            ReplyState::Generating => "generating",
            ReplyState::EndOfText => "eog",
            ReplyState::Limit => "limit",
            ReplyState::Stopped => "stopped",
            ReplyState::ContextFull => "context_full",
        }
    }

    /// The status `chat_next` returns once the reply is over.
    pub fn status(self) -> Status {
        match self {
            ReplyState::EndOfText | ReplyState::Limit => Status::End,
            ReplyState::Stopped => Status::Stopped,
            ReplyState::ContextFull => Status::ContextFull,
            ReplyState::Idle | ReplyState::Generating => Status::InvalidArgument,
        }
    }
}

/// Host-supplied timestamps (ms) of the reply's calls, for tokens/s without a clock import.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Prompt tokens the last `chat_start` ran.
    pub prompt_tokens: usize,
    /// `chat_start`'s timestamp.
    pub start_ms: f64,
    /// The first `chat_next`'s (the prefill ended before it).
    pub first_next_ms: Option<f64>,
    /// The latest `chat_next`'s while generating.
    pub last_ms: f64,
    /// Tokens generated and run.
    pub tokens: usize,
}

impl Timings {
    pub fn prefill_ms(&self) -> f64 {
        self.first_next_ms
            .map_or(0.0, |t| (t - self.start_ms).max(0.0))
    }
    pub fn decode_ms(&self) -> f64 {
        self.first_next_ms
            .map_or(0.0, |t| (self.last_ms - t).max(0.0))
    }
    fn rate(tokens: usize, ms: f64) -> f64 {
        if ms > 0.0 {
            tokens as f64 * 1000.0 / ms
        } else {
            0.0
        }
    }
    pub fn prefill_tps(&self) -> f64 {
        Timings::rate(self.prompt_tokens, self.prefill_ms())
    }
    pub fn decode_tps(&self) -> f64 {
        Timings::rate(self.tokens, self.decode_ms())
    }
}

/// `chat_set_options` flags: drop the oldest turns when the context is full.
pub const OPTION_DROP_OLDEST: u32 = 1;
/// Let a model that can reason think before it answers (Qwen3: no empty `<think>` block in
/// front of the reply).
pub const OPTION_THINK: u32 = 2;

#[derive(Default)]
pub struct Chat {
    pub template: Template,
    /// Why the template was guessed (shown in `model_info`).
    pub warning: Option<String>,
    /// The conversation, oldest first; the last one may be the reply being written.
    messages: Vec<Message>,
    /// `messages[..in_cache]` are in the KV cache.
    in_cache: usize,
    /// The ids in the KV cache, in order (`ids.len() == model.pos` while the chat owns it).
    ids: Vec<u32>,
    /// The cache ends in an assistant reply whose closing markup is not written yet.
    open_reply: bool,
    pub state: ReplyState,
    max_tokens: u32,
    /// The id the last `chat_next` sampled (an end token included).
    pub last_token: Option<u32>,
    stream: StreamDecoder,
    pub drop_oldest: bool,
    /// `OPTION_THINK`.
    pub think: bool,
    /// Messages dropped to make room, since the conversation began.
    pub dropped_messages: usize,
    pub timings: Timings,
    /// The grammar the current reply follows, if any (`chat_set_grammar`).
    pub constraint: Option<Constraint>,
    text: String,
    new_ids: Vec<u32>,
}

impl Chat {
    /// A new conversation for a loaded file: the template its metadata names.
    pub fn for_model(template_source: Option<&str>, tok: Option<&Tokenizer>) -> Chat {
        let (template, mut warning) = match (template_source, tok) {
            (None, Some(t)) => {
                let (template, warning) = Template::for_vocabulary(|s| t.token_id(s).is_some());
                (template, Some(warning))
            }
            _ => Template::detect(template_source),
        };
        if warning.is_none() && tok.is_some_and(|t| t.token_id(template.marker()).is_none()) {
            warning = Some("the chat template's control tokens are not in the vocabulary".into());
        }
        Chat {
            template,
            warning,
            ..Chat::default()
        }
    }

    /// Chooses the template (`None`: the file's). The cached text was rendered with the old
    /// one, so the next `chat_start` re-reads the conversation.
    pub fn set_template(
        &mut self,
        template: Option<Template>,
        source: Option<&str>,
        tok: Option<&Tokenizer>,
    ) {
        let (template, warning) = match template {
            None => {
                let fresh = Chat::for_model(source, tok);
                (fresh.template, fresh.warning)
            }
            Some(t) => (t, None),
        };
        self.template = template;
        self.warning = warning;
        self.forget_cache();
    }

    /// Let a model that can reason think (Qwen3). Like a new template, the next `chat_start`
    /// re-reads the conversation.
    pub fn set_think(&mut self, think: bool) {
        if think != self.think {
            self.think = think;
            self.forget_cache();
        }
    }

    /// The next `chat_start` re-reads the whole conversation (the caller's model cache is
    /// reset there, as its length no longer matches).
    fn forget_cache(&mut self) {
        self.ids.clear();
        self.in_cache = 0;
        self.open_reply = false;
        if self.state == ReplyState::Generating {
            self.state = ReplyState::Stopped;
        }
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The ids in the KV cache (the prompt so far and every reply).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Forgets the conversation (the caller resets the model's cache).
    pub fn reset(&mut self) {
        *self = Chat {
            template: self.template,
            warning: self.warning.take(),
            drop_oldest: self.drop_oldest,
            think: self.think,
            ..Chat::default()
        };
    }

    pub fn add(&mut self, role: Role, text: &[u8]) -> Result<usize> {
        let Ok(text) = core::str::from_utf8(text) else {
            bail!(Status::InvalidUtf8, "chat message is not valid UTF-8");
        };
        if self.messages.len() >= MAX_MESSAGES {
            bail!(
                Status::InvalidArgument,
                "the conversation holds {} messages; reset it",
                MAX_MESSAGES
            );
        }
        let mut owned = String::new();
        owned
            .try_reserve(text.len())
            .map_err(|_| err!(Status::OutOfMemory, "chat message of {} bytes", text.len()))?;
        owned.push_str(text);
        self.messages
            .try_reserve(1)
            .map_err(|_| err!(Status::OutOfMemory, "chat messages"))?;
        self.messages.push(Message { role, text: owned });
        Ok(self.messages.len())
    }

    /// Runs the messages added since the last reply (and the generation prompt) and prepares
    /// the reply. Returns the prompt tokens run.
    pub fn start(
        &mut self,
        m: &mut Model<'_>,
        tok: &Tokenizer,
        work: &mut Work,
        max_tokens: u32,
        now_ms: f64,
    ) -> Result<usize> {
        clear_stop();
        if self.state == ReplyState::Generating {
            self.state = ReplyState::Stopped;
        }
        // Someone ran other tokens (step, prefill, reset) since: re-read the conversation.
        if m.pos != self.ids.len() {
            m.reset();
            self.ids.clear();
            self.in_cache = 0;
            self.open_reply = false;
        }
        let pending = self.in_cache;
        if pending >= self.messages.len() {
            bail!(
                Status::InvalidArgument,
                "chat_start: no new message since the last reply (chat_add first)"
            );
        }
        let continuation = self.messages.last().is_some_and(|m| m.role == Role::Raw);

        self.text.clear();
        if self.open_reply {
            self.text.push_str(self.template.close());
        }
        self.template
            .render(&self.messages, pending, &mut self.text);
        if !continuation {
            self.template.open_reply(self.think, &mut self.text);
        }
        self.new_ids.clear();
        encode_prompt(
            tok,
            work,
            &self.text,
            self.ids.is_empty(),
            &mut self.new_ids,
        )?;

        // Room for the prompt, and with dropping also for a useful reply.
        let reserve = match (self.drop_oldest, max_tokens) {
            (false, _) => 0,
            (true, 0) => m.context / 4,
            (true, n) => (n as usize).min(m.context / 4),
        };
        let mut from = self.ids.len();
        let mut dropped = false;
        if from + self.new_ids.len() + reserve > m.context {
            if !self.drop_oldest {
                bail!(
                    Status::ContextFull,
                    "the conversation needs {} tokens, the context holds {}: reset the chat or let it drop the oldest turns",
                    from + self.new_ids.len(),
                    m.context
                );
            }
            self.make_room(tok, work, pending, reserve, m.context, continuation)?;
            // Keep the cached prefix the new rendering shares; run the rest.
            let common = self
                .ids
                .iter()
                .zip(&self.new_ids)
                .take_while(|(a, b)| a == b)
                .count();
            let common = common.min(self.new_ids.len().saturating_sub(1));
            m.truncate(common)?;
            self.ids.truncate(common);
            self.new_ids.drain(..common);
            self.in_cache = 0;
            self.open_reply = false;
            from = common;
            dropped = true;
        }
        if from + self.new_ids.len() == 0 {
            bail!(Status::InvalidArgument, "chat_start: the prompt is empty");
        }

        for chunk in self.new_ids.chunks(PREFILL_CHUNK) {
            let r = if stop_requested() {
                Err(err!(Status::Stopped, "stopped while reading the prompt"))
            } else {
                m.forward(chunk, None)
            };
            if let Err(e) = r {
                // Back to a consistent state: the cache as it was, or after dropping turns an
                // empty one (the next start re-reads the conversation).
                if dropped {
                    m.reset();
                    self.ids.clear();
                } else {
                    let _ = m.truncate(from);
                    self.ids.truncate(from);
                }
                return Err(e);
            }
            self.ids.extend_from_slice(chunk);
        }

        // The reply is the newest message, already "in the cache" as it grows.
        self.messages
            .try_reserve(1)
            .map_err(|_| err!(Status::OutOfMemory, "chat messages"))?;
        let role = if continuation {
            Role::Raw
        } else {
            Role::Assistant
        };
        self.messages.push(Message {
            role,
            text: String::new(),
        });
        self.in_cache = self.messages.len();
        self.open_reply = !continuation;
        self.state = ReplyState::Generating;
        self.max_tokens = max_tokens;
        self.last_token = None;
        self.stream = StreamDecoder::new();
        self.timings = Timings {
            prompt_tokens: self.new_ids.len(),
            start_ms: now_ms,
            last_ms: now_ms,
            ..Timings::default()
        };
        Ok(self.new_ids.len())
    }

    /// Drops the oldest turns (after leading system messages, never the new ones from
    /// `pending` on) until the whole conversation and `reserve` fit in half the context, or
    /// failing that in all of it; leaves its ids in `new_ids`. Dropping down to half leaves
    /// room for the next turns to append without re-reading the conversation each time.
    fn make_room(
        &mut self,
        tok: &Tokenizer,
        work: &mut Work,
        mut pending: usize,
        reserve: usize,
        context: usize,
        continuation: bool,
    ) -> Result<()> {
        loop {
            self.text.clear();
            self.template.render(&self.messages, 0, &mut self.text);
            if !continuation {
                self.template.open_reply(self.think, &mut self.text);
            }
            self.new_ids.clear();
            encode_prompt(tok, work, &self.text, true, &mut self.new_ids)?;
            if self.new_ids.len() + reserve <= context / 2 {
                return Ok(());
            }
            let Some(first) = self.messages[..pending]
                .iter()
                .position(|m| m.role != Role::System)
            else {
                if self.new_ids.len() + reserve <= context {
                    return Ok(());
                }
                bail!(
                    Status::ContextFull,
                    "the conversation needs {} tokens with room to reply even after dropping every older turn; the context holds {}",
                    self.new_ids.len() + reserve,
                    context
                );
            };
            // A turn: this message up to the next user message.
            let end = self.messages[first + 1..pending]
                .iter()
                .position(|m| m.role == Role::User)
                .map_or(pending, |i| first + 1 + i);
            self.messages.drain(first..end);
            self.dropped_messages += end - first;
            pending -= end - first;
        }
    }

    /// One step of the reply: the text piece of the next token in `out` (may be empty while
    /// a character is incomplete). Once the reply is over, returns its state's status.
    pub fn next(
        &mut self,
        m: &mut Model<'_>,
        tok: &Tokenizer,
        sampler: &mut Sampler,
        table: Option<&TokenTable>,
        now_ms: f64,
        out: &mut Vec<u8>,
    ) -> Result<usize> {
        out.clear();
        match self.state {
            ReplyState::Generating => {}
            ReplyState::Idle => bail!(
                Status::InvalidArgument,
                "no reply in progress: call chat_start"
            ),
            ReplyState::EndOfText => bail!(
                Status::End,
                "the reply is complete (end-of-generation token)"
            ),
            ReplyState::Limit => bail!(
                Status::End,
                "the reply is complete ({} tokens, its max_tokens)",
                self.max_tokens
            ),
            ReplyState::Stopped => bail!(Status::Stopped, "the reply was stopped (stop flag)"),
            ReplyState::ContextFull => bail!(
                Status::ContextFull,
                "the context is full ({} of {} tokens): reset the chat, or let it drop the oldest turns",
                m.pos,
                m.context
            ),
        }
        if self.timings.first_next_ms.is_none() {
            self.timings.first_next_ms = Some(now_ms);
        }
        self.timings.last_ms = now_ms;
        if m.pos != self.ids.len() {
            bail!(
                Status::InvalidArgument,
                "the KV cache changed under the reply (step/prefill/reset); call chat_start"
            );
        }
        if stop_requested() {
            return self.finish(ReplyState::Stopped, out);
        }
        if self.max_tokens > 0 && self.timings.tokens >= self.max_tokens as usize {
            return self.finish(ReplyState::Limit, out);
        }
        if m.pos >= m.context {
            return self.finish(ReplyState::ContextFull, out);
        }
        // Only ids the tokenizer knows (a model may pad its output rows).
        let n = tok.n_vocab().min(m.logits.len());
        let logits = &m.logits[..n];
        let id = match (&mut self.constraint, table) {
            (Some(c), Some(t)) => c.sample(sampler, t, logits, &self.ids)?,
            _ => sampler.sample(logits, &self.ids)?,
        };
        self.last_token = Some(id);
        if tok.is_eog(id) {
            return self.finish(ReplyState::EndOfText, out);
        }
        if let (Some(c), Some(t)) = (&mut self.constraint, table) {
            c.matcher.accept_token(t, id)?;
        }
        self.stream.push(tok, id, false, out)?;
        self.ids
            .try_reserve(1)
            .map_err(|_| err!(Status::OutOfMemory, "chat ids"))?;
        if let Err(e) = m.forward(&[id], None) {
            self.state = ReplyState::Stopped;
            out.clear();
            return Err(e);
        }
        self.ids.push(id);
        self.timings.tokens += 1;
        self.append_reply(out);
        Ok(out.len())
    }

    /// Ends the reply: what the stream still holds goes to `out`.
    fn finish(&mut self, state: ReplyState, out: &mut Vec<u8>) -> Result<usize> {
        self.state = state;
        self.stream.finish(out);
        self.append_reply(out);
        Ok(out.len())
    }

    fn append_reply(&mut self, piece: &[u8]) {
        // A reply that cannot grow its text keeps its tokens (the cache is what counts).
        let Some(msg) = self.messages.last_mut() else {
            return;
        };
        if msg.text.try_reserve(piece.len()).is_ok() {
            msg.text.push_str(&String::from_utf8_lossy(piece));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::Gguf;
    use crate::testutil::read_fixture as read;
    use alloc::vec;

    fn tokenizer(p: &str) -> Tokenizer {
        let bytes = read(p);
        Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap()
    }

    fn json(p: &str) -> serde_json::Value {
        serde_json::from_slice(&read(p)).unwrap()
    }

    fn g_array(r: &serde_json::Value) -> &Vec<serde_json::Value> {
        r["greedy"].as_array().unwrap()
    }

    /// A file without a chat template gets its family's template from its vocabulary's turn
    /// markers (Gemma 3's vocabulary: `<start_of_turn>`), or ChatML, with a warning either way.
    #[test]
    fn a_file_without_a_template_is_read_by_its_vocabulary() {
        let gemma = Chat::for_model(None, Some(&tokenizer("models/vocab/vocab-spm-gemma3.gguf")));
        assert_eq!(gemma.template.name(), "gemma");
        assert!(
            gemma
                .warning
                .as_deref()
                .unwrap()
                .contains("<start_of_turn>")
        );
        let smollm = Chat::for_model(None, Some(&tokenizer("models/vocab/vocab-bpe-smollm.gguf")));
        assert_eq!(smollm.template.name(), "chatml");
        let none = Chat::for_model(None, None);
        assert_eq!(none.template.name(), "chatml");
        assert!(none.warning.is_some());
    }

    fn msgs(list: &[(Role, &str)]) -> Vec<Message> {
        list.iter()
            .map(|&(role, t)| Message {
                role,
                text: t.into(),
            })
            .collect()
    }

    fn prompt(t: Template, list: &[(Role, &str)]) -> String {
        let mut s = String::new();
        t.render(&msgs(list), 0, &mut s);
        t.open_reply(false, &mut s);
        s
    }

    /// Every reference conversation rendered with `template` gives llama.cpp's prompt text
    /// and, tokenized, its prompt ids.
    fn prompt_ids_equal_llama_cpp(vocab: &str, reference: &str, template: Template) {
        let tok = tokenizer(vocab);
        let r = json(reference);
        let greedy = g_array(&r);
        assert_eq!(greedy.len(), 12);
        let mut work = Work::default();
        for g in greedy {
            let mut list = vec![];
            if let Some(s) = g["system"].as_str() {
                list.push((Role::System, s));
            }
            list.push((Role::User, g["user"].as_str().unwrap()));
            let text = prompt(template, &list);
            assert_eq!(text, g["prompt"].as_str().unwrap());
            let mut ids = vec![];
            encode_prompt(&tok, &mut work, &text, true, &mut ids).unwrap();
            let want: Vec<u32> = g["prompt_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(ids, want, "{text:?}");
        }
    }

    #[test]
    fn smollm2_prompt_ids_equal_llama_cpp() {
        prompt_ids_equal_llama_cpp(
            "models/vocab/vocab-bpe-smollm.gguf",
            "reference/smollm2-q4_1.json",
            Template::CHATML,
        );
    }

    #[test]
    fn gemma3_prompt_ids_equal_llama_cpp() {
        prompt_ids_equal_llama_cpp(
            "models/vocab/vocab-spm-gemma3.gguf",
            "reference/gemma3-270m-q4_k_m.json",
            Template::GEMMA,
        );
    }
}
