//! Tokenizers of GGUF vocabularies, id for id with llama.cpp.
//!
//! Text to ids, in the order data flows through [`Tokenizer::encode`]:
//!
//! 1. [`special`]: control / user-defined tokens written in the text are cut out first
//!    (control ones only when the caller parses special tokens).
//! 2. Each remaining stretch of plain text is tokenized by the vocabulary's model:
//!    - byte-level BPE (`gpt2`): [`pretokenize`] splits it into words with the patterns named
//!      by `tokenizer.ggml.pre`, each word is spelled in GPT-2's byte alphabet and [`bpe`]
//!      merges its bytes by rank;
//!    - SentencePiece BPE (`llama`): spaces become `▁` (after an optional leading space) and
//!      [`spm`] merges characters by token score, with `<0xNN>` byte fallback.
//! 3. BOS / EOS are added when the caller asks for special tokens and the file says so
//!    (`tokenizer.ggml.add_bos_token` / `add_eos_token`).
//!
//! Ids to text: [`Tokenizer::piece`] is the bytes a token stands for (precomputed);
//! [`Tokenizer::decode`] concatenates them; [`StreamDecoder`] holds back a piece that ends
//! inside a UTF-8 sequence until the sequence completes.
//!
//! Everything comes from the GGUF metadata, including vocabulary-only files with no tensors.
//! The file is hostile input: array lengths are checked against each other, ids against the
//! vocabulary, and nothing here panics on any file.

mod bpe;
mod pretokenize;
mod special;
mod spm;
mod table;
mod wpm;

use alloc::vec::Vec;

use crate::error::{Result, Status};
use crate::gguf::{Array, Gguf, ValueType};
use crate::sort::quicksort_by;
use crate::{bail, err};

pub use pretokenize::PreTokenizer;
use special::{Fragment, Partitioner, Special, SpecialTokens};
use table::{PairTable, Texts, TokenTable};

/// Token attributes (llama.cpp's `llama_token_attr` bits), from `tokenizer.ggml.token_type`.
pub mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    /// White space after the token is dropped where the token is found in text (llama.cpp's
    /// `LLAMA_TOKEN_ATTR_RSTRIP`; files do not carry it: see `mark_stripping_tokens`).
    pub const RSTRIP: u16 = 1 << 6;
}

/// Which model turns plain text into ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Byte-level BPE (`tokenizer.ggml.model = gpt2`).
    Bpe {
        pre: PreTokenizer,
        ignore_merges: bool,
    },
    /// SentencePiece BPE (`tokenizer.ggml.model = llama`).
    Spm { add_space_prefix: bool },
    /// WordPiece (`tokenizer.ggml.model = bert`), with the BERT normalizer's options
    /// (`tokenizer.ggml.normalizer.lowercase`, default true; `...strip_accents`, default as
    /// lowercase).
    Wpm {
        lowercase: bool,
        strip_accents: bool,
    },
}

/// Token texts that mark the end of a turn (llama.cpp's list, in its order of preference).
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
/// Token texts that end generation; llama.cpp also makes them control tokens.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// Further texts llama.cpp promotes to control tokens (fill-in-the-middle markers).
const FIM_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
];

/// A vocabulary and everything needed to encode and decode with it. Owns its data (a few MB;
/// the GGUF bytes may be dropped after [`Tokenizer::from_gguf`]).
pub struct Tokenizer {
    algorithm: Algorithm,
    /// Token texts as stored in the file (GPT-2 spelling or `▁` for spaces).
    texts: Texts,
    by_text: TokenTable,
    /// What each token stands for, as bytes (see [`Tokenizer::piece`]).
    pieces: Texts,
    attrs: Vec<u16>,
    /// SentencePiece scores (empty for BPE).
    scores: Vec<f32>,
    /// BPE merges (empty table for SentencePiece).
    merges: PairTable,
    /// WordPiece: the tokens by length and hash (`None` for the other algorithms).
    wordpiece: Option<wpm::WordPiece>,
    /// SentencePiece: `(id, score)` of every two-character string over ASCII and `▁`,
    /// indexed by [`short_pair_index`] (id [`bpe::NONE`] when it is no token).
    short_pairs: Vec<(u32, f32)>,
    /// BPE: the token of each byte's GPT-2 character. SPM: the byte-fallback token
    /// `<0xNN>` (or the one-byte token). [`bpe::NONE`] when there is none.
    byte_token: [u32; 256],
    special: SpecialTokens,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    /// The separator WordPiece ends a text with (`[SEP]`).
    sep: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    /// Tokens that end generation, sorted.
    eog: Vec<u32>,
    /// Distinguishes tokenizers, so that a [`Work`]'s word cache is never used with another.
    instance: u32,
}

/// Source of [`Tokenizer::instance`] numbers (0 is never handed out).
static INSTANCES: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(1);

impl core::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("algorithm", &self.algorithm)
            .field("n_vocab", &self.n_vocab())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eot", &self.eot)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish()
    }
}

/// Most tokens in a vocabulary (the largest in use have ~260k).
pub const MAX_VOCAB: usize = 1 << 22;
/// Longest token text, in bytes.
pub const MAX_TOKEN_BYTES: usize = 1 << 16;

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.*` keys).
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Tokenizer> {
        let (algorithm, defaults) = algorithm_from_gguf(g)?;
        let (texts, by_text) = read_token_texts(g)?;
        let n = texts.len();
        let scores = read_scores(g, n)?;
        let mut attrs = read_token_types(g, n)?;
        let ids = SpecialIds::from_gguf(g, n, defaults)?;
        let find = |t: &str| by_text.get(&texts, t.as_bytes());
        let (eot, eog) = mark_recognised_tokens(&mut attrs, ids, find);
        mark_stripping_tokens(g, &mut attrs, find);
        let special = special_matcher(&texts, &attrs);
        let (byte_token, merges) = byte_tokens_and_merges(g, algorithm, &texts, &by_text)?;
        let short_pairs = short_pair_table(algorithm, &texts, &by_text, &scores)?;
        let wordpiece = match algorithm {
            Algorithm::Wpm {
                lowercase,
                strip_accents,
            } => Some(wpm::WordPiece::new(&texts, lowercase, strip_accents)?),
            _ => None,
        };
        // Pieces: the bytes each token stands for.
        let pieces = build_pieces(&algorithm, &texts, &attrs)?;
        Ok(Tokenizer {
            algorithm,
            texts,
            by_text,
            pieces,
            attrs,
            scores,
            merges,
            short_pairs,
            wordpiece,
            byte_token,
            special,
            bos: ids.bos,
            eos: ids.eos,
            eot,
            unk: ids.unk,
            pad: ids.pad,
            sep: ids.sep,
            add_bos: ids.add_bos,
            add_eos: ids.add_eos,
            eog,
            instance: INSTANCES.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
        })
    }

    // ---- encode -----------------------------------------------------------------------------

    /// Appends the ids of `text` to `out`. `add_special`: add BOS/EOS as the vocabulary says
    /// (`add_bos_token` / `add_eos_token`; WordPiece: always `[CLS]` and `[SEP]`, as llama.cpp
    /// does). `parse_special`: control tokens written in the
    /// text (`<|im_start|>`) become their ids; user-defined tokens always do.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut work = Work::default();
        self.encode_with(&mut work, text, add_special, parse_special, out)
    }

    /// [`Tokenizer::encode`] with caller-held scratch buffers (no allocation once they have
    /// grown to the largest text seen).
    pub fn encode_with(
        &self,
        work: &mut Work,
        text: &str,
        add_special: bool,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        // At most one id per byte, plus BOS and EOS.
        out.try_reserve(text.len() + 2).map_err(|_| {
            err!(
                Status::OutOfMemory,
                "tokenize: room for {} ids",
                text.len() + 2
            )
        })?;
        let bytes = text.as_bytes();
        work.fragments.clear();
        self.special.partition(
            &self.texts,
            bytes,
            parse_special,
            &mut work.partition,
            &mut work.fragments,
        )?;

        let (open, close) = match self.algorithm {
            Algorithm::Wpm { .. } => (self.bos, self.sep),
            _ => (
                self.bos.filter(|_| self.add_bos),
                self.eos.filter(|_| self.add_eos),
            ),
        };
        if add_special {
            out.extend(open);
        }
        let fragments = core::mem::take(&mut work.fragments);
        match self.algorithm {
            Algorithm::Bpe { pre, ignore_merges } => {
                for f in &fragments {
                    match *f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(a, b) => {
                            // Special tokens are UTF-8, so fragments end on char boundaries.
                            let s = text.get(a..b).unwrap_or("");
                            self.encode_bpe(work, pre, ignore_merges, s, out)?;
                        }
                    }
                }
            }
            Algorithm::Spm { add_space_prefix } => {
                let mut prev_special = true;
                for f in &fragments {
                    match *f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(a, b) => {
                            self.encode_spm(
                                work,
                                &bytes[a..b],
                                add_space_prefix && prev_special,
                                out,
                            )?;
                            prev_special = false;
                        }
                    }
                }
            }
            Algorithm::Wpm { .. } => {
                for f in &fragments {
                    match *f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(a, b) => {
                            let s = text.get(a..b).unwrap_or("");
                            self.encode_wpm(work, s, out)?;
                        }
                    }
                }
            }
        }
        work.fragments = fragments;
        if add_special {
            out.extend(close);
        }
        Ok(())
    }

    fn encode_bpe(
        &self,
        work: &mut Work,
        pre: PreTokenizer,
        ignore_merges: bool,
        text: &str,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let Work {
            splitter,
            merger,
            spelled,
            cache,
            ..
        } = work;
        cache.bind(self.instance);
        let bytes = text.as_bytes();
        splitter.split(pre, text, |a, b| {
            let word = &bytes[a..b];
            if let [c] = word {
                // One byte: its token if there is one (also what a whole-word lookup finds).
                out.extend(Some(self.byte_token[*c as usize]).filter(|&id| id != bpe::NONE));
                return Ok(());
            }
            let cacheable = word.len() <= bpe::CACHE_MAX_WORD;
            if cacheable && let Some(ids) = cache.get(word) {
                out.extend_from_slice(ids);
                return Ok(());
            }
            let start = out.len();
            let whole = if ignore_merges {
                spelled.clear();
                for &c in word {
                    bpe::push_byte_char(c, spelled);
                }
                self.by_text.get(&self.texts, spelled)
            } else {
                None
            };
            match whole {
                Some(id) => out.push(id),
                None => merger.merge(
                    &self.merges,
                    word.iter().map(|&c| self.byte_token[c as usize]),
                    out,
                )?,
            }
            if cacheable {
                cache.put(word, &out[start..]);
            }
            Ok(())
        })
    }

    fn encode_spm(
        &self,
        work: &mut Work,
        text: &[u8],
        space_prefix: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let Work { spelled, spm, .. } = work;
        spelled.clear();
        reserve(spelled, text.len() * 3 + 3, "escaped text")?;
        if space_prefix {
            spelled.extend_from_slice("▁".as_bytes());
        }
        for &c in text {
            if c == b' ' {
                spelled.extend_from_slice("▁".as_bytes());
            } else {
                spelled.push(c);
            }
        }
        spm.tokenize(
            spelled,
            |s| self.spm_lookup(s),
            |piece, out| {
                for &b in piece {
                    match self.byte_token[b as usize] {
                        bpe::NONE => out.extend(self.unk),
                        id => out.push(id),
                    }
                }
            },
            out,
        )
    }

    fn encode_wpm(&self, work: &mut Work, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let (Some(wp), Some(unk)) = (&self.wordpiece, self.unk) else {
            return Ok(()); // not WordPiece (`from_gguf` gives WordPiece both)
        };
        let wpm::WpmWork {
            word,
            spelled,
            prefix,
        } = &mut work.wpm;
        wp.words(text, word, |w| {
            wp.encode_word(&self.texts, (&mut *spelled, &mut *prefix), w, unk, out)
        })
    }

    /// The token of a byte string and its score. Two-character strings of ASCII and `▁` —
    /// most of SentencePiece's first merges — come from a small table instead of the hash.
    #[inline]
    fn spm_lookup(&self, s: &[u8]) -> Option<(u32, f32)> {
        if let Some(i) = short_pair_index(s)
            && let Some(&(id, score)) = self.short_pairs.get(i)
        {
            return (id != bpe::NONE).then_some((id, score));
        }
        let id = self.by_text.get(&self.texts, s)?;
        Some((id, self.scores.get(id as usize).copied().unwrap_or(0.0)))
    }

    // ---- decode -----------------------------------------------------------------------------

    /// The bytes token `id` stands for (control tokens give their text); empty for an id
    /// outside the vocabulary. May be a partial UTF-8 sequence (byte tokens, split characters).
    #[inline]
    pub fn piece(&self, id: u32) -> &[u8] {
        self.pieces.get(id)
    }

    /// Appends the text of `ids`. `special`: render control and unknown tokens as their text
    /// (otherwise they are skipped, as llama.cpp does without `unparse_special`). With a
    /// SentencePiece space prefix, the first token's leading space is dropped. The bytes are
    /// exactly the concatenated pieces: they may be invalid UTF-8 if the ids are arbitrary.
    pub fn decode(&self, ids: &[u32], special: bool, out: &mut Vec<u8>) -> Result<()> {
        let mut total = 0usize;
        for &id in ids {
            self.check_id(id)?;
            total = total.saturating_add(self.piece(id).len());
        }
        reserve(out, total, "decoded text")?;
        let mut stream = StreamDecoder::new();
        for &id in ids {
            out.extend_from_slice(stream.piece_for(self, id, special));
        }
        Ok(())
    }

    fn check_id(&self, id: u32) -> Result<()> {
        if (id as usize) < self.n_vocab() {
            Ok(())
        } else {
            Err(err!(
                Status::InvalidArgument,
                "token id {} is outside the vocabulary of {}",
                id,
                self.n_vocab()
            ))
        }
    }

    // ---- vocabulary facts ---------------------------------------------------------------------

    pub fn n_vocab(&self) -> usize {
        self.attrs.len()
    }
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// The token's text as stored in the vocabulary (GPT-2 spelling / `▁`).
    pub fn token_text(&self, id: u32) -> &[u8] {
        self.texts.get(id)
    }
    /// The id of a token given its vocabulary text (e.g. `<|im_start|>`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.by_text.get(&self.texts, text.as_bytes())
    }
    /// [`attr`] bits of a token (0 outside the vocabulary).
    pub fn attrs(&self, id: u32) -> u16 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }
    pub fn is_control(&self, id: u32) -> bool {
        self.attrs(id) & attr::CONTROL != 0
    }
    pub fn is_user_defined(&self, id: u32) -> bool {
        self.attrs(id) & attr::USER_DEFINED != 0
    }
    /// Whether generation should stop at this token (EOS, EOT and llama.cpp's end markers).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
    /// End of turn (`tokenizer.ggml.eot_token_id`, else a token named like `<|im_end|>`).
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }
    /// Whether `encode(.., add_special = true, ..)` adds BOS / EOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    /// Bytes held on the heap (for memory reports).
    pub fn heap_bytes(&self) -> usize {
        self.texts.heap_bytes()
            + self.by_text.heap_bytes()
            + self.pieces.heap_bytes()
            + self.attrs.capacity() * 2
            + self.scores.capacity() * 4
            + self.merges.heap_bytes()
            + self.wordpiece.as_ref().map_or(0, |w| w.heap_bytes())
    }
}

/// Scratch buffers of [`Tokenizer::encode_with`], reusable across calls.
#[derive(Default)]
pub struct Work {
    fragments: Vec<Fragment>,
    partition: Partitioner,
    splitter: pretokenize::Splitter,
    merger: bpe::Merger,
    spm: spm::SpmMerger,
    /// A word in GPT-2 spelling, or a fragment with `▁` for spaces.
    spelled: Vec<u8>,
    /// BPE: ids of words seen before (bounded).
    cache: bpe::WordCache,
    wpm: wpm::WpmWork,
}

/// Turns ids into text one at a time, never emitting an incomplete UTF-8 sequence: bytes
/// that may still complete a character wait for the next piece.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    started: bool,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Appends to `out` the complete text `id` brings (see [`Tokenizer::decode`] for
    /// `special`). Bytes that can never form a character are passed through as they are.
    pub fn push(
        &mut self,
        tok: &Tokenizer,
        id: u32,
        special: bool,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        tok.check_id(id)?;
        let piece = self.piece_for(tok, id, special);
        self.pending.extend_from_slice(piece);
        let emit = self.pending.len() - incomplete_tail(&self.pending);
        out.extend_from_slice(&self.pending[..emit]);
        self.pending.drain(..emit);
        Ok(())
    }

    /// Appends whatever is still held back (at the end of a stream).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.pending);
        self.pending.clear();
    }

    /// Whether bytes are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The piece of `id` as decoding renders it: control tokens only with `special`, and
    /// without the SentencePiece space prefix on the first token.
    fn piece_for<'t>(&mut self, tok: &'t Tokenizer, id: u32, special: bool) -> &'t [u8] {
        let mut piece = tok.piece(id);
        if !special && tok.attrs(id) & (attr::CONTROL | attr::UNKNOWN) != 0 {
            piece = &[];
        }
        if !self.started {
            self.started = true;
            if let Algorithm::Spm {
                add_space_prefix: true,
            }
            | Algorithm::Wpm { .. } = tok.algorithm
            {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
        }
        piece
    }
}

/// How many bytes at the end of `b` are the start of a UTF-8 sequence that is not complete
/// yet (and could still complete): 0..=3.
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let lead = b[b.len() - back];
        if lead & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead
        }
        let need = match lead {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0, // ASCII or a byte that never leads: nothing to wait for
        };
        return if back < need && valid_prefix(&b[b.len() - back..]) {
            back
        } else {
            0
        };
    }
    0
}

/// Whether `s` (a lead byte and some continuation bytes) can begin a valid UTF-8 sequence.
fn valid_prefix(s: &[u8]) -> bool {
    let second_ok = match (s.first(), s.get(1)) {
        (Some(0xE0), Some(&c)) => (0xA0..=0xBF).contains(&c),
        (Some(0xED), Some(&c)) => (0x80..=0x9F).contains(&c),
        (Some(0xF0), Some(&c)) => (0x90..=0xBF).contains(&c),
        (Some(0xF4), Some(&c)) => (0x80..=0x8F).contains(&c),
        _ => true,
    };
    second_ok && s.iter().skip(1).all(|&c| c & 0xC0 == 0x80)
}

/// Characters of the SentencePiece short-pair table: ASCII (0..128) and `▁` (128).
const SHORT: usize = 129;
const ESCAPED_SPACE: &[u8] = "▁".as_bytes();

// ---------------------------------------------------------------------------------------------
// Building a tokenizer from GGUF metadata, step by step (llama.cpp's `llama_vocab::impl::load`)

/// The special ids and the BOS/EOS rule: the algorithm's defaults, then the file's keys.
#[derive(Clone, Copy)]
struct SpecialIds {
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    pad: Option<u32>,
    sep: Option<u32>,
    add_bos: bool,
    add_eos: bool,
}

/// Step 1: the algorithm and its defaults.
fn algorithm_from_gguf(g: &Gguf<'_>) -> Result<(Algorithm, SpecialIds)> {
    let model_name = g.get_str("tokenizer.ggml.model")?;
    let pre_name = g.get_str_opt("tokenizer.ggml.pre")?;
    let none = SpecialIds {
        bos: None,
        eos: None,
        unk: None,
        eot: None,
        eom: None,
        pad: None,
        sep: None,
        add_bos: false,
        add_eos: false,
    };
    let (mut algorithm, defaults) = match model_name {
        "gpt2" => {
            let name = pre_name.unwrap_or("default");
            let (pre, llama3_family) = PreTokenizer::from_name(name).ok_or_else(|| {
                err!(
                    Status::Unsupported,
                    "tokenizer.ggml.pre '{}' is not supported",
                    name
                )
            })?;
            let algorithm = Algorithm::Bpe {
                pre,
                ignore_merges: llama3_family,
            };
            let ids = SpecialIds {
                bos: Some(11),
                eos: Some(11),
                add_bos: llama3_family,
                ..none
            };
            (algorithm, ids)
        }
        "llama" => {
            let algorithm = Algorithm::Spm {
                add_space_prefix: true,
            };
            let ids = SpecialIds {
                bos: Some(1),
                eos: Some(2),
                unk: Some(0),
                add_bos: true,
                ..none
            };
            (algorithm, ids)
        }
        "bert" => {
            let lowercase = g
                .get_bool_opt("tokenizer.ggml.normalizer.lowercase")?
                .unwrap_or(true);
            let strip_accents = g
                .get_bool_opt("tokenizer.ggml.normalizer.strip_accents")?
                .unwrap_or(lowercase);
            let algorithm = Algorithm::Wpm {
                lowercase,
                strip_accents,
            };
            // [CLS] is the BOS token; every text is [CLS] ... [SEP] whatever add_bos says.
            let ids = SpecialIds {
                bos: Some(101),
                unk: Some(100),
                sep: Some(102),
                pad: Some(0),
                add_bos: true,
                ..none
            };
            (algorithm, ids)
        }
        "none" | "no_vocab" => bail!(
            Status::Unsupported,
            "the file has no vocabulary (tokenizer.ggml.model = '{}')",
            model_name
        ),
        other => bail!(
            Status::Unsupported,
            "tokenizer.ggml.model '{}' is not supported (gpt2, llama and bert are)",
            other
        ),
    };
    if let Some(v) = g.get_bool_opt("tokenizer.ggml.add_space_prefix")?
        && let Algorithm::Spm { add_space_prefix } = &mut algorithm
    {
        *add_space_prefix = v;
    }
    Ok((algorithm, defaults))
}

/// The elements of array key `key` as read by `items` (`None`: they are not `want`), or an
/// error naming what they are.
fn elements<T>(array: &Array<'_>, key: &str, want: &str, items: Option<T>) -> Result<T> {
    items.ok_or_else(|| {
        err!(
            Status::BadFormat,
            "{key} is an array of {}, expected {want}",
            array.elem_type().name()
        )
    })
}

/// Step 2: the token texts (an empty one gets llama.cpp's name for it, so it never matches
/// text) and the index by text (duplicates refused).
fn read_token_texts(g: &Gguf<'_>) -> Result<(Texts, TokenTable)> {
    let key = "tokenizer.ggml.tokens";
    let tokens = g.get_array(key)?;
    let strings = elements(&tokens, key, "strings", tokens.strings())?;
    let n = tokens.len();
    if n == 0 || n > MAX_VOCAB {
        bail!(
            Status::BadFormat,
            "tokenizer.ggml.tokens has {} tokens (expected 1..={})",
            n,
            MAX_VOCAB
        );
    }
    let mut texts = Texts::with_capacity(n, tokens.raw_bytes().len())?;
    for (i, s) in strings.enumerate() {
        if s.len() > MAX_TOKEN_BYTES {
            bail!(
                Status::BadFormat,
                "tokenizer.ggml.tokens[{}] is {} bytes long",
                i,
                s.len()
            );
        }
        texts.push_with(|buf| {
            if s.is_empty() {
                // llama.cpp's name for an empty token, so that it can never match text.
                buf.extend_from_slice(b"[EMPTY_");
                push_decimal(buf, i as u32);
                buf.push(b']');
            } else {
                buf.extend_from_slice(s);
            }
        })?;
    }
    let by_text = match TokenTable::build(&texts)? {
        Ok(t) => t,
        Err((a, b)) => bail!(
            Status::BadFormat,
            "duplicate token in vocabulary: ids {} and {} have the same text",
            a,
            b
        ),
    };
    Ok((texts, by_text))
}

/// Step 2: SentencePiece scores (empty when the file has none).
fn read_scores(g: &Gguf<'_>, n: usize) -> Result<Vec<f32>> {
    Ok(match g.get_array_opt("tokenizer.ggml.scores")? {
        None => Vec::new(),
        Some(a) => {
            if a.len() < n {
                bail!(
                    Status::BadFormat,
                    "tokenizer.ggml.scores has {} entries for {} tokens",
                    a.len(),
                    n
                );
            }
            let mut v = Vec::new();
            v.try_reserve_exact(n)
                .map_err(|_| err!(Status::OutOfMemory, "tokenizer scores"))?;
            match a.elem_type() {
                ValueType::F32 => v.extend(a.f32s().into_iter().flatten().take(n)),
                ValueType::I32 => {
                    v.extend(a.i32s().into_iter().flatten().take(n).map(|s| s as f32))
                }
                t => bail!(
                    Status::BadFormat,
                    "tokenizer.ggml.scores is an array of {}, expected f32",
                    t.name()
                ),
            }
            v
        }
    })
}

/// Step 2: token types as attribute bits (normal when the file has none).
fn read_token_types(g: &Gguf<'_>, n: usize) -> Result<Vec<u16>> {
    let mut attrs = Vec::new();
    attrs
        .try_reserve_exact(n)
        .map_err(|_| err!(Status::OutOfMemory, "tokenizer attributes"))?;
    match g.get_array_opt("tokenizer.ggml.token_type")? {
        None => attrs.resize(n, attr::NORMAL),
        Some(a) => {
            if a.len() < n {
                bail!(
                    Status::BadFormat,
                    "tokenizer.ggml.token_type has {} entries for {} tokens",
                    a.len(),
                    n
                );
            }
            let types = elements(&a, "tokenizer.ggml.token_type", "i32", a.i32s())?;
            attrs.extend(types.take(n).map(|t| match t {
                1 => attr::NORMAL,
                2 => attr::UNKNOWN,
                3 => attr::CONTROL,
                4 => attr::USER_DEFINED,
                5 => attr::UNUSED,
                6 => attr::BYTE,
                _ => 0,
            }));
        }
    }
    Ok(attrs)
}

impl SpecialIds {
    /// Step 3: the file's special ids over the defaults (ids outside the vocabulary are
    /// ignored), and the BOS/EOS rule, which needs those tokens.
    fn from_gguf(g: &Gguf<'_>, n: usize, defaults: SpecialIds) -> Result<SpecialIds> {
        let in_vocab = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        let key_id = |key: &str, default: Option<u32>| -> Result<Option<u32>> {
            Ok(match g.get_u32_opt(key)? {
                Some(id) if (id as usize) < n => Some(id),
                _ => default,
            })
        };
        let bos = key_id("tokenizer.ggml.bos_token_id", in_vocab(defaults.bos))?;
        let eos = key_id("tokenizer.ggml.eos_token_id", in_vocab(defaults.eos))?;
        let unk = key_id("tokenizer.ggml.unknown_token_id", in_vocab(defaults.unk))?;
        let eot = key_id("tokenizer.ggml.eot_token_id", None)?;
        let eom = key_id("tokenizer.ggml.eom_token_id", None)?;
        let pad = key_id("tokenizer.ggml.padding_token_id", in_vocab(defaults.pad))?;
        let sep = key_id("tokenizer.ggml.seperator_token_id", in_vocab(defaults.sep))?;
        let mut add_bos = g
            .get_bool_opt("tokenizer.ggml.add_bos_token")?
            .unwrap_or(defaults.add_bos);
        let mut add_eos = g
            .get_bool_opt("tokenizer.ggml.add_eos_token")?
            .unwrap_or(defaults.add_eos);
        if defaults.sep.is_some() {
            // WordPiece: [CLS] ... [SEP] always (llama.cpp reads the keys and ignores them)
            (add_bos, add_eos) = (true, false);
            for (name, id) in [("[CLS] (BOS)", bos), ("[SEP]", sep), ("unknown", unk)] {
                if id.is_none() {
                    bail!(
                        Status::BadFormat,
                        "the WordPiece vocabulary has no {} token",
                        name
                    );
                }
            }
        }
        if add_bos && bos.is_none() {
            bail!(
                Status::BadFormat,
                "tokenizer.ggml.add_bos_token is true but there is no BOS token"
            );
        }
        if add_eos && eos.is_none() {
            bail!(
                Status::BadFormat,
                "tokenizer.ggml.add_eos_token is true but there is no EOS token"
            );
        }
        Ok(SpecialIds {
            bos,
            eos,
            unk,
            eot,
            eom,
            pad,
            sep,
            add_bos,
            add_eos,
        })
    }
}

/// Step 4: tokens llama.cpp recognises by their text: end-of-turn, end-of-generation and
/// fill-in-the-middle markers become control tokens. Returns the end-of-turn token and the
/// sorted end-of-generation set.
fn mark_recognised_tokens(
    attrs: &mut [u16],
    ids: SpecialIds,
    find: impl Fn(&str) -> Option<u32>,
) -> (Option<u32>, Vec<u32>) {
    let mut eot = ids.eot;
    for t in EOG_TEXTS.iter().chain(FIM_TEXTS).chain(EOT_TEXTS) {
        if let Some(id) = find(t) {
            attrs[id as usize] |= attr::CONTROL;
        }
    }
    for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = find(t) {
            attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    if eot.is_none() {
        eot = EOT_TEXTS.iter().find_map(|t| find(t));
    }
    let mut eog: Vec<u32> = EOG_TEXTS.iter().filter_map(|t| find(t)).collect();
    eog.extend([ids.eos, eot, ids.eom].into_iter().flatten());
    quicksort_by(&mut eog, |a, b| a < b);
    eog.dedup();
    (eot, eog)
}

/// Step 4b: llama.cpp's per-model token attributes, chosen by `general.name`: in a model named
/// Phi-3 (`phi-3` or `phi3` in the lowercased name) white space after every special token but
/// `<unk>`, `<s>` and `<|endoftext|>` is dropped, so `<|user|>\nHi` is `<|user|>` `▁Hi`. (Its
/// other rules are for BERT vocabularies, which are not read here.)
fn mark_stripping_tokens(g: &Gguf<'_>, attrs: &mut [u16], find: impl Fn(&str) -> Option<u32>) {
    let name = g.get_str_opt("general.name").ok().flatten().unwrap_or("");
    let lower = |b: &u8| b.to_ascii_lowercase();
    let named = |what: &str| {
        name.as_bytes()
            .windows(what.len())
            .any(|w| w.iter().map(lower).eq(what.bytes()))
    };
    if !(named("phi-3") || named("phi3")) {
        return;
    }
    for a in attrs.iter_mut() {
        if *a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
            *a |= attr::RSTRIP;
        }
    }
    if let Some(id) = find("</s>") {
        attrs[id as usize] |= attr::RSTRIP;
    }
    for t in ["<unk>", "<s>", "<|endoftext|>"] {
        if let Some(id) = find(t) {
            attrs[id as usize] &= !attr::RSTRIP;
        }
    }
}

/// Step 5: the special-token matcher: control, user-defined and unknown tokens.
fn special_matcher(texts: &Texts, attrs: &[u16]) -> SpecialTokens {
    let mut specials: Vec<Special> = Vec::new();
    for (id, &a) in attrs.iter().enumerate() {
        // Texts that are not UTF-8 are left out (never in a real vocabulary): UTF-8 texts
        // found in UTF-8 input start and end on character boundaries, so the plain text
        // between them stays valid `str`.
        if a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            && core::str::from_utf8(texts.get(id as u32)).is_ok()
        {
            specials.push(Special {
                id: id as u32,
                always: a & (attr::CONTROL | attr::UNKNOWN) == 0,
                rstrip: a & attr::RSTRIP != 0,
            });
        }
    }
    SpecialTokens::new(texts, &specials)
}

/// Step 6: each byte's token, and the BPE merges (an empty table for SentencePiece).
fn byte_tokens_and_merges(
    g: &Gguf<'_>,
    algorithm: Algorithm,
    texts: &Texts,
    by_text: &TokenTable,
) -> Result<([u32; 256], PairTable)> {
    let mut byte_token = [bpe::NONE; 256];
    let merges = match algorithm {
        Algorithm::Bpe { .. } => {
            let mut ch = Vec::new();
            for (b, slot) in byte_token.iter_mut().enumerate() {
                ch.clear();
                bpe::push_byte_char(b as u8, &mut ch);
                *slot = by_text.get(texts, &ch).unwrap_or(bpe::NONE);
            }
            build_merges(g, texts, by_text)?
        }
        Algorithm::Wpm { .. } => PairTable::with_capacity(0)?,
        Algorithm::Spm { .. } => {
            for (b, slot) in byte_token.iter_mut().enumerate() {
                let hex = byte_token_text(b as u8);
                *slot = by_text
                    .get(texts, &hex)
                    .or_else(|| by_text.get(texts, &[b as u8]))
                    .unwrap_or(bpe::NONE);
            }
            PairTable::with_capacity(0)?
        }
    };
    Ok((byte_token, merges))
}

/// Step 6: SentencePiece's `(id, score)` of every two-character string over ASCII and `▁`
/// (empty for BPE).
fn short_pair_table(
    algorithm: Algorithm,
    texts: &Texts,
    by_text: &TokenTable,
    scores: &[f32],
) -> Result<Vec<(u32, f32)>> {
    let mut short_pairs = Vec::new();
    if let Algorithm::Spm { .. } = algorithm {
        short_pairs
            .try_reserve_exact(SHORT * SHORT)
            .map_err(|_| err!(Status::OutOfMemory, "tokenizer pair table"))?;
        let mut s = Vec::new();
        for i in 0..SHORT * SHORT {
            s.clear();
            push_short_char(i / SHORT, &mut s);
            push_short_char(i % SHORT, &mut s);
            short_pairs.push(match by_text.get(texts, &s) {
                Some(id) => (id, scores.get(id as usize).copied().unwrap_or(0.0)),
                None => (bpe::NONE, 0.0),
            });
        }
    }
    Ok(short_pairs)
}

/// Appends short character `i` (see [`SHORT`]).
fn push_short_char(i: usize, out: &mut Vec<u8>) {
    if i < 128 {
        out.push(i as u8);
    } else {
        out.extend_from_slice(ESCAPED_SPACE);
    }
}

/// The short-pair table index of `s` if it is exactly two characters from ASCII and `▁`.
#[inline]
fn short_pair_index(s: &[u8]) -> Option<usize> {
    let one = |s: &[u8]| -> Option<(usize, usize)> {
        match s.first()? {
            &c if c < 0x80 => Some((c as usize, 1)),
            _ if s.starts_with(ESCAPED_SPACE) => Some((128, 3)),
            _ => None,
        }
    };
    let (a, la) = one(s)?;
    let (b, lb) = one(s.get(la..)?)?;
    (la + lb == s.len()).then_some(a * SHORT + b)
}

/// Makes room for `additional` more elements, or fails with [`Status::OutOfMemory`] naming
/// `what` (scratch buffers grow with the input text, which may be huge). The capacity test is
/// inlined into the loops that call this per word; the growth is not.
#[inline(always)]
pub(crate) fn reserve<T>(v: &mut Vec<T>, additional: usize, what: &str) -> Result<()> {
    if v.capacity() - v.len() >= additional {
        return Ok(());
    }
    grow(v, additional, what)
}

#[inline(never)]
fn grow<T>(v: &mut Vec<T>, additional: usize, what: &str) -> Result<()> {
    v.try_reserve(additional).map_err(|_| {
        err!(
            Status::OutOfMemory,
            "tokenize: no memory for {} ({} more entries)",
            what,
            additional
        )
    })
}

// ---- building helpers ---------------------------------------------------------------------------

fn push_decimal(buf: &mut Vec<u8>, mut v: u32) {
    let mut digits = [0u8; 10];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend(digits[..n].iter().rev());
}

/// `<0xNN>` with upper-case hex, the SentencePiece byte token text.
fn byte_token_text(b: u8) -> [u8; 6] {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    [
        b'<',
        b'0',
        b'x',
        HEX[(b >> 4) as usize],
        HEX[(b & 15) as usize],
        b'>',
    ]
}

/// The byte a `<0xNN>` token stands for.
fn parse_byte_token(t: &[u8]) -> Option<u8> {
    let hex = |c: u8| (c as char).to_digit(16);
    match t {
        [b'<', b'0', b'x', h, l, b'>'] => Some((hex(*h)? * 16 + hex(*l)?) as u8),
        _ => None,
    }
}

/// `tokenizer.ggml.merges`: `"left right"` strings, rank = position. Both sides and the
/// result must be tokens (true of every real vocabulary; a merge that is not is ignored).
fn build_merges(g: &Gguf<'_>, texts: &Texts, by_text: &TokenTable) -> Result<PairTable> {
    let key = "tokenizer.ggml.merges";
    let merges = g.get_array(key)?;
    let strings = elements(&merges, key, "strings", merges.strings())?;
    let mut table = PairTable::with_capacity(merges.len())?;
    let mut joined = Vec::new();
    for (rank, m) in strings.enumerate() {
        // Split at the first space after the first byte (a side may itself be a space).
        let Some(sp) = m.iter().skip(1).position(|&c| c == b' ').map(|p| p + 1) else {
            continue;
        };
        let (left, right) = (&m[..sp], &m[sp + 1..]);
        let (Some(l), Some(r)) = (by_text.get(texts, left), by_text.get(texts, right)) else {
            continue;
        };
        joined.clear();
        joined.extend_from_slice(left);
        joined.extend_from_slice(right);
        let merged = by_text.get(texts, &joined).unwrap_or(bpe::NONE);
        table.insert(l, r, rank as u32, merged);
    }
    Ok(table)
}

/// What each token stands for, as llama.cpp's `token_to_piece(.., special = true)`:
/// control / user-defined / unknown tokens are their text; normal tokens are decoded from
/// GPT-2 spelling (BPE) or have `▁` turned into spaces (SentencePiece); byte tokens are
/// their byte; unused and undefined tokens are empty.
fn build_pieces(model: &Algorithm, texts: &Texts, attrs: &[u16]) -> Result<Texts> {
    let n = texts.len();
    let mut pieces = Texts::with_capacity(n, texts.heap_bytes().min(1 << 28) / 2)?;
    for id in 0..n as u32 {
        let t = texts.get(id);
        let a = attrs[id as usize];
        pieces.push_with(|buf| {
            if a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
                buf.extend_from_slice(t);
            } else if a & attr::NORMAL != 0 {
                match model {
                    Algorithm::Bpe { .. } => decode_gpt2_spelling(t, buf),
                    Algorithm::Spm { .. } | Algorithm::Wpm { .. } => unescape_spaces(t, buf),
                }
            } else if a & attr::BYTE != 0 {
                buf.extend(parse_byte_token(t));
            }
        })?;
    }
    Ok(pieces)
}

/// GPT-2 spelling back to bytes. A character outside the byte alphabet (never in a real
/// vocabulary) is kept as its UTF-8.
fn decode_gpt2_spelling(t: &[u8], out: &mut Vec<u8>) {
    let s = core::str::from_utf8(t);
    match s {
        Ok(s) => {
            for ch in s.chars() {
                match bpe::char_to_byte(ch as u32) {
                    Some(b) => out.push(b),
                    None => {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
        }
        Err(_) => out.extend_from_slice(t),
    }
}

fn unescape_spaces(t: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < t.len() {
        if t[i..].starts_with("▁".as_bytes()) {
            out.push(b' ');
            i += 3;
        } else {
            out.push(t[i]);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests;
