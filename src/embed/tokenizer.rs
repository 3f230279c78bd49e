//! The text-to-ids half of the embedder: Hugging Face `tokenizer.json` read into a streaming
//! tokenizer that behaves like `tokenizers`' `encode(text, add_special_tokens=False)`.
//!
//! Stages, in the order text flows (each one char at a time, no intermediate strings):
//! 1. Added tokens (`added_tokens` with `normalized: false`) are matched in the raw text,
//!    leftmost then longest, and become their ids; the text between them goes on.
//! 2. Normalizer (`BertNormalizer`): clean text (drop controls, U+0000, U+FFFD; white space to
//!    ' '), spaces around CJK ideographs, strip accents (NFD, canonical reordering, drop Mn),
//!    lowercase (full mapping).
//! 3. Pre-tokenizer (`BertPreTokenizer`): split on white space, each punctuation character a
//!    word of its own.
//! 4. HfModel (`WordPiece`): each word to pieces ([`super::wordpiece`]).
//!
//! The normalizer, pre-tokenizer and model are enums so that Unigram + Metaspace can join;
//! anything else in a file is refused with `Status::Unsupported` naming it.

use super::wordpiece::{PieceTable, WORD_PADDING, WordPiece};
use crate::error::{Result, Status};
use crate::json::{Kind, Reader, Str};
use crate::sort::heapsort_by;
use crate::unicode::{self, bert, utf8_len};
use crate::{bail, err};
use alloc::vec::Vec;

/// Most added tokens.
const MAX_ADDED: usize = 1 << 16;
/// Most vocabulary entries.
const MAX_VOCAB: usize = 1 << 24;
/// Cap on `max_input_chars_per_word` (words are buffered up to it).
const MAX_WORD_CHARS: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertNormalizer {
    pub clean_text: bool,
    pub handle_chinese_chars: bool,
    pub strip_accents: bool,
    pub lowercase: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalizer {
    None,
    Bert(BertNormalizer),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HfPreTokenizer {
    /// The whole normalized text is one word.
    None,
    Bert,
}

pub enum HfModel {
    WordPiece(WordPiece),
}

/// What an ASCII byte does in the fast path (decided once at load from the configuration).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum AsciiAction {
    /// Appended to the word as `ascii_out[b]`.
    Word,
    /// Ends the word.
    Space,
    /// Ends the word and is a word of its own.
    Punct,
    /// Removed.
    Drop,
    /// May start an added token (matched inline); otherwise as `ascii_base[b]`.
    Added,
}

/// [`HfTokenizer::word_out`] of a byte that does not continue a word (no ASCII byte maps to it).
const NOT_WORD: u8 = 0xFF;

/// A token matched in the raw text before normalization.
struct AddedToken {
    /// `content` in `arena`.
    off: u32,
    len: u32,
    id: u32,
    lstrip: bool,
    rstrip: bool,
}

pub struct HfTokenizer {
    normalizer: Normalizer,
    pre_tokenizer: HfPreTokenizer,
    model: HfModel,
    /// Sorted by content length, longest first (so the first match at a position is longest).
    added: Vec<AddedToken>,
    added_arena: Vec<u8>,
    /// Bytes that start some added token.
    added_first: [bool; 256],
    pub unk_id: Option<u32>,
    /// One past the largest id any token can have.
    pub id_bound: u32,
    /// Median length of the vocabulary's tokens in code points (model2vec's truncation unit).
    pub median_token_length: usize,
    ascii_action: [AsciiAction; 128],
    /// The action of a byte that starts no added token here (`ascii_action` without `Added`).
    ascii_base: [AsciiAction; 128],
    ascii_out: [u8; 128],
    /// Per byte: `ascii_out[b]` when `b` continues a run of word bytes (ASCII whose action is
    /// `Word`), else [`NOT_WORD`].
    word_out: [u8; 256],
    /// Added tokens are matched inside the main loop (all start with ASCII and neither strip
    /// white space), instead of a separate pass that splits the text first.
    added_inline: bool,
}

/// Reusable buffers for [`HfTokenizer::encode`]; they grow once and are then reused.
#[derive(Default)]
pub struct HfScratch {
    /// The current word, UTF-8, normalized: `word[..word_len]`; the buffer has a fixed length
    /// (the longest word kept, plus padding for 8-byte reads).
    word: Vec<u8>,
    word_len: usize,
    word_chars: usize,
    /// Non-starters waiting for canonical reordering: (code point, combining class).
    run: Vec<(u32, u8)>,
    hashes: Vec<u64>,
    /// Stage 2 of recently seen non-ASCII characters ([`CHAR_MEMO_SLOTS`] entries), for the
    /// normalizer `chars_for`.
    chars: Vec<CharMemo>,
    chars_for: Option<BertNormalizer>,
}

// ---------------------------------------------------------------------------------------------
// Loading

fn expect_kind(r: &mut Reader, want: Kind, what: &str) -> Result<()> {
    let k = r.peek()?;
    if k != want {
        bail!(
            Status::BadFormat,
            "tokenizer.json: {what} should be {want:?}, found {k:?}"
        );
    }
    Ok(())
}

fn read_bool(r: &mut Reader, what: &str) -> Result<bool> {
    expect_kind(r, Kind::Bool, what)?;
    r.read_bool()
}

fn read_string<'a>(r: &mut Reader<'a>, what: &str) -> Result<Str<'a>> {
    expect_kind(r, Kind::String, what)?;
    r.read_str()
}

fn read_id(r: &mut Reader, what: &str) -> Result<u32> {
    expect_kind(r, Kind::Number, what)?;
    let v = r.read_u64()?;
    u32::try_from(v)
        .ok()
        .filter(|&v| v < u32::MAX)
        .ok_or_else(|| {
            err!(
                Status::BadFormat,
                "tokenizer.json: {what} {v} is out of range"
            )
        })
}

/// Fields of `model` as read (zero-copy), before they are built into a model.
#[derive(Default)]
struct ModelSpec<'a> {
    kind: Option<Str<'a>>,
    unk_token: Option<Str<'a>>,
    prefix: Option<Str<'a>>,
    max_chars: Option<u64>,
    vocab: Vec<(Str<'a>, u32)>,
}

struct AddedSpec<'a> {
    content: Str<'a>,
    id: u32,
    lstrip: bool,
    rstrip: bool,
    single_word: bool,
    normalized: bool,
}

fn read_added<'a>(r: &mut Reader<'a>) -> Result<Vec<AddedSpec<'a>>> {
    let mut out = Vec::new();
    expect_kind(r, Kind::Array, "added_tokens")?;
    r.begin_array()?;
    while r.next_item()? {
        if out.len() >= MAX_ADDED {
            bail!(
                Status::BadFormat,
                "tokenizer.json: more than {MAX_ADDED} added tokens"
            );
        }
        expect_kind(r, Kind::Object, "an added token")?;
        r.begin_object()?;
        let (mut content, mut id) = (None, None);
        let mut t = AddedSpec {
            content: Str::default(),
            id: 0,
            lstrip: false,
            rstrip: false,
            single_word: false,
            normalized: true,
        };
        while let Some(k) = r.next_key()? {
            if k.eq_str("content") {
                content = Some(read_string(r, "added token content")?);
            } else if k.eq_str("id") {
                id = Some(read_id(r, "added token id")?);
            } else if k.eq_str("lstrip") {
                t.lstrip = read_bool(r, "added token lstrip")?;
            } else if k.eq_str("rstrip") {
                t.rstrip = read_bool(r, "added token rstrip")?;
            } else if k.eq_str("single_word") {
                t.single_word = read_bool(r, "added token single_word")?;
            } else if k.eq_str("normalized") {
                t.normalized = read_bool(r, "added token normalized")?;
            } else {
                r.skip_value()?;
            }
        }
        let (Some(c), Some(i)) = (content, id) else {
            bail!(
                Status::BadFormat,
                "tokenizer.json: an added token lacks content or id"
            );
        };
        t.content = c;
        t.id = i;
        out.try_reserve(1)
            .map_err(|_| err!(Status::OutOfMemory, "added tokens"))?;
        out.push(t);
    }
    Ok(out)
}

/// Steps into the object of component `what`; false if it is null (absent).
fn open_component(r: &mut Reader, what: &str) -> Result<bool> {
    if r.skip_null()? {
        return Ok(false);
    }
    expect_kind(r, Kind::Object, what)?;
    r.begin_object()?;
    Ok(true)
}

/// Whether component `what` was of the one type supported, `only` (`kind_ok`: `None` when
/// it had no type).
fn check_type(kind_ok: Option<bool>, what: &str, only: &str) -> Result<()> {
    match kind_ok {
        Some(true) => Ok(()),
        Some(false) => bail!(
            Status::Unsupported,
            "tokenizer.json: only the {only} is supported"
        ),
        None => bail!(Status::BadFormat, "tokenizer.json: {what} has no type"),
    }
}

fn read_normalizer(r: &mut Reader) -> Result<Normalizer> {
    if !open_component(r, "normalizer")? {
        return Ok(Normalizer::None);
    }
    let mut kind_ok = None;
    // Hugging Face's defaults; strip_accents None follows lowercase.
    let (mut clean, mut chinese, mut strip, mut lower) = (true, true, None, true);
    while let Some(k) = r.next_key()? {
        if k.eq_str("type") {
            kind_ok = Some(read_string(r, "normalizer type")?.eq_str("BertNormalizer"));
        } else if k.eq_str("clean_text") {
            clean = read_bool(r, "clean_text")?;
        } else if k.eq_str("handle_chinese_chars") {
            chinese = read_bool(r, "handle_chinese_chars")?;
        } else if k.eq_str("strip_accents") {
            strip = if r.skip_null()? {
                None
            } else {
                Some(read_bool(r, "strip_accents")?)
            };
        } else if k.eq_str("lowercase") {
            lower = read_bool(r, "lowercase")?;
        } else {
            r.skip_value()?;
        }
    }
    check_type(kind_ok, "normalizer", "BertNormalizer")?;
    Ok(Normalizer::Bert(BertNormalizer {
        clean_text: clean,
        handle_chinese_chars: chinese,
        strip_accents: strip.unwrap_or(lower),
        lowercase: lower,
    }))
}

fn read_pre_tokenizer(r: &mut Reader) -> Result<HfPreTokenizer> {
    if !open_component(r, "pre_tokenizer")? {
        return Ok(HfPreTokenizer::None);
    }
    let mut kind_ok = None;
    while let Some(k) = r.next_key()? {
        if k.eq_str("type") {
            kind_ok = Some(read_string(r, "pre_tokenizer type")?.eq_str("BertPreTokenizer"));
        } else {
            r.skip_value()?;
        }
    }
    check_type(kind_ok, "pre_tokenizer", "BertPreTokenizer")?;
    Ok(HfPreTokenizer::Bert)
}

fn read_model<'a>(r: &mut Reader<'a>) -> Result<ModelSpec<'a>> {
    let mut m = ModelSpec::default();
    expect_kind(r, Kind::Object, "model")?;
    r.begin_object()?;
    while let Some(k) = r.next_key()? {
        if k.eq_str("type") {
            m.kind = Some(read_string(r, "model type")?);
        } else if k.eq_str("unk_token") {
            if !r.skip_null()? {
                m.unk_token = Some(read_string(r, "unk_token")?);
            }
        } else if k.eq_str("continuing_subword_prefix") {
            m.prefix = Some(read_string(r, "continuing_subword_prefix")?);
        } else if k.eq_str("max_input_chars_per_word") {
            expect_kind(r, Kind::Number, "max_input_chars_per_word")?;
            m.max_chars = Some(r.read_u64()?);
        } else if k.eq_str("vocab") && r.peek()? == Kind::Object {
            r.begin_object()?;
            while let Some(piece) = r.next_key()? {
                if m.vocab.len() >= MAX_VOCAB {
                    bail!(
                        Status::BadFormat,
                        "tokenizer.json: more than {MAX_VOCAB} vocabulary entries"
                    );
                }
                let id = read_id(r, "vocabulary id")?;
                m.vocab
                    .try_reserve(1)
                    .map_err(|_| err!(Status::OutOfMemory, "vocabulary"))?;
                m.vocab.push((piece, id));
            }
        } else {
            r.skip_value()?;
        }
    }
    Ok(m)
}

/// Decodes a JSON string into a reusable buffer (no allocation when it had no escapes).
fn bytes_of<'b>(s: &Str<'b>, buf: &'b mut alloc::string::String) -> Result<&'b [u8]> {
    if let Some(t) = s.as_str() {
        return Ok(t.as_bytes());
    }
    buf.clear();
    s.decode_into(buf)?;
    Ok(buf.as_bytes())
}

/// `int(np.median(lengths))`: the middle value, or the floor of the mean of the two middle ones.
fn median(lengths: &mut [usize]) -> usize {
    if lengths.is_empty() {
        return 0;
    }
    heapsort_by(lengths, &mut |a, b| a < b);
    let n = lengths.len();
    if n % 2 == 1 {
        lengths[n / 2]
    } else {
        (lengths[n / 2 - 1] + lengths[n / 2]) / 2
    }
}

impl HfTokenizer {
    pub fn from_json(bytes: &[u8]) -> Result<HfTokenizer> {
        let mut r = Reader::new(bytes)?;
        expect_kind(&mut r, Kind::Object, "the top level")?;
        r.begin_object()?;
        let mut added = Vec::new();
        let mut normalizer = None;
        let mut pre_tokenizer = None;
        let mut model = None;
        while let Some(k) = r.next_key()? {
            if k.eq_str("added_tokens") {
                if !r.skip_null()? {
                    added = read_added(&mut r)?;
                }
            } else if k.eq_str("normalizer") {
                normalizer = Some(read_normalizer(&mut r)?);
            } else if k.eq_str("pre_tokenizer") {
                pre_tokenizer = Some(read_pre_tokenizer(&mut r)?);
            } else if k.eq_str("model") {
                model = Some(read_model(&mut r)?);
            } else {
                r.skip_value()?;
            }
        }
        r.finish()?;
        let Some(spec) = model else {
            bail!(Status::BadFormat, "tokenizer.json has no model");
        };
        let normalizer = normalizer.unwrap_or(Normalizer::None);
        let pre_tokenizer = pre_tokenizer.unwrap_or(HfPreTokenizer::None);
        HfTokenizer::build(normalizer, pre_tokenizer, spec, &added)
    }

    fn build(
        normalizer: Normalizer,
        pre_tokenizer: HfPreTokenizer,
        spec: ModelSpec,
        added: &[AddedSpec],
    ) -> Result<HfTokenizer> {
        let Some(kind) = spec.kind else {
            bail!(Status::BadFormat, "tokenizer.json: model has no type");
        };
        if !kind.eq_str("WordPiece") {
            bail!(
                Status::Unsupported,
                "tokenizer.json: only the WordPiece model is supported"
            );
        }
        if spec.vocab.is_empty() {
            bail!(
                Status::BadFormat,
                "tokenizer.json: WordPiece model has no vocab"
            );
        }
        let mut buf = alloc::string::String::new();
        let prefix_owned: Vec<u8> = match &spec.prefix {
            Some(p) => bytes_of(p, &mut buf)?.to_vec(),
            None => b"##".to_vec(),
        };
        let prefix = &prefix_owned[..];
        let max_chars = spec.max_chars.unwrap_or(100);
        if max_chars > MAX_WORD_CHARS as u64 {
            bail!(
                Status::Unsupported,
                "tokenizer.json: max_input_chars_per_word {max_chars} exceeds {MAX_WORD_CHARS}"
            );
        }

        // The vocabulary, split into word-initial and continuation pieces. `lengths` collects the
        // length in code points of every distinct token (vocabulary and added tokens, as
        // `get_vocab()` lists them) for the median.
        let mut initial = PieceTable::with_capacity(spec.vocab.len())?;
        // Sized for its own pieces (a fifth of BERT's vocabulary), not the whole vocabulary:
        // 1.2 MB less memory for BERT's (the same speed: wasmtime, corpus and short embed).
        let mut n_continuations = 0;
        for (piece, _) in &spec.vocab {
            n_continuations += bytes_of(piece, &mut buf)?.starts_with(prefix) as usize;
        }
        let mut continuation = PieceTable::with_capacity(n_continuations)?;
        let mut all = PieceTable::with_capacity(spec.vocab.len() + added.len())?;
        // The table skips the empty token; the median still counts it.
        let mut has_empty = false;
        let mut lengths: Vec<usize> = Vec::new();
        lengths
            .try_reserve(spec.vocab.len() + added.len())
            .map_err(|_| err!(Status::OutOfMemory, "token lengths"))?;
        let mut id_bound = 0u32;
        for (piece, id) in &spec.vocab {
            let bytes = bytes_of(piece, &mut buf)?;
            has_empty |= bytes.is_empty();
            initial.insert(bytes, *id)?;
            if let Some(rest) = bytes.strip_prefix(prefix) {
                continuation.insert(rest, *id)?;
            }
            all.insert(bytes, *id)?;
            id_bound = id_bound.max(id + 1);
        }
        let mut added_tokens: Vec<AddedToken> = Vec::new();
        let mut added_arena = Vec::new();
        let mut added_first = [false; 256];
        for t in added {
            let bytes = bytes_of(&t.content, &mut buf)?;
            has_empty |= bytes.is_empty();
            all.insert(bytes, t.id)?;
            id_bound = id_bound.max(t.id + 1);
            if bytes.is_empty() {
                continue;
            }
            if t.normalized {
                bail!(
                    Status::Unsupported,
                    "tokenizer.json: added tokens matched after normalization are not supported yet"
                );
            }
            if t.single_word {
                bail!(
                    Status::Unsupported,
                    "tokenizer.json: single_word added tokens are not supported"
                );
            }
            added_first[bytes[0] as usize] = true;
            added_tokens
                .try_reserve(1)
                .map_err(|_| err!(Status::OutOfMemory, "added tokens"))?;
            added_arena
                .try_reserve(bytes.len())
                .map_err(|_| err!(Status::OutOfMemory, "added tokens"))?;
            added_tokens.push(AddedToken {
                off: added_arena.len() as u32,
                len: bytes.len() as u32,
                id: t.id,
                lstrip: t.lstrip,
                rstrip: t.rstrip,
            });
            added_arena.extend_from_slice(bytes);
        }
        // Longest first; equal lengths in the order they came (`off` grows with it).
        heapsort_by(&mut added_tokens, &mut |a, b| {
            (b.len, a.off) < (a.len, b.off)
        });
        // Every distinct token once (a later duplicate replaced an earlier one in `all`).
        lengths.extend(
            all.keys()
                .map(|k| core::str::from_utf8(&k).map_or(0, |s| s.chars().count())),
        );
        if has_empty {
            lengths.push(0);
        }
        let median_token_length = median(&mut lengths);

        let unk_id = match &spec.unk_token {
            Some(u) => all.get(bytes_of(u, &mut buf)?),
            None => None,
        };
        let Some(unk) = unk_id else {
            bail!(
                Status::BadFormat,
                "tokenizer.json: WordPiece unk_token is missing from the vocabulary"
            );
        };

        let mut t = HfTokenizer {
            normalizer,
            pre_tokenizer,
            model: HfModel::WordPiece(WordPiece::new(
                initial,
                continuation,
                unk,
                max_chars as usize,
            )),
            added: added_tokens,
            added_arena,
            added_first,
            unk_id,
            id_bound,
            median_token_length,
            ascii_action: [AsciiAction::Word; 128],
            ascii_base: [AsciiAction::Word; 128],
            ascii_out: [0; 128],
            word_out: [NOT_WORD; 256],
            added_inline: false,
        };
        t.plan_ascii();
        Ok(t)
    }

    /// Decides once what each ASCII byte does (none decomposes, is CJK or a mark).
    fn plan_ascii(&mut self) {
        for b in 0..128u8 {
            let f = bert::class(b as u32);
            let (clean, lower) = match self.normalizer {
                Normalizer::Bert(n) => (n.clean_text, n.lowercase),
                Normalizer::None => (false, false),
            };
            let split = self.pre_tokenizer == HfPreTokenizer::Bert;
            let action = if clean && f & bert::DROP != 0 {
                AsciiAction::Drop
            } else if split && f & bert::SPACE != 0 {
                AsciiAction::Space
            } else if split && f & bert::PUNCT != 0 {
                AsciiAction::Punct
            } else {
                AsciiAction::Word
            };
            self.ascii_action[b as usize] = action;
            self.ascii_base[b as usize] = action;
            self.ascii_out[b as usize] = if lower { b.to_ascii_lowercase() } else { b };
        }
        self.added_inline = self.added.iter().all(|t| {
            let first = self
                .added_arena
                .get(t.off as usize)
                .copied()
                .unwrap_or(0x80);
            first < 0x80 && !t.lstrip && !t.rstrip
        });
        if self.added_inline {
            for t in &self.added {
                if let Some(&first) = self.added_arena.get(t.off as usize) {
                    self.ascii_action[first as usize] = AsciiAction::Added;
                }
            }
        }
        for (b, o) in self.word_out.iter_mut().enumerate().take(128) {
            *o = match self.ascii_action[b] {
                AsciiAction::Word => self.ascii_out[b],
                _ => NOT_WORD,
            };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Why the encoder stopped early: `limit` ids reached, or memory ran out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Full,
    OutOfMemory,
}

type Flow = core::result::Result<(), Stop>;

fn stopped(r: Flow) -> Result<()> {
    match r {
        Err(Stop::OutOfMemory) => Err(err!(Status::OutOfMemory, "tokenizer buffers")),
        _ => Ok(()),
    }
}

impl HfTokenizer {
    /// Appends the ids of `text` to `ids` (cleared first), as `encode(text,
    /// add_special_tokens=False)` with truncation to `limit` tokens (unknown tokens included).
    pub fn encode(
        &self,
        text: &str,
        limit: usize,
        s: &mut HfScratch,
        ids: &mut Vec<u32>,
    ) -> Result<()> {
        ids.clear();
        let HfModel::WordPiece(wp) = &self.model;
        let max_chars = wp.max_input_chars_per_word;
        // A kept word has at most `max_chars` characters of 4 bytes; one more for a
        // punctuation word, and padding for 8-byte reads.
        let word_cap = (max_chars + 1) * 4 + WORD_PADDING;
        if s.word.len() < word_cap {
            s.word
                .try_reserve_exact(word_cap - s.word.len())
                .map_err(|_| err!(Status::OutOfMemory, "word buffer"))?;
            s.word.resize(word_cap, 0);
        }
        if s.hashes.capacity() < word_cap + 1 {
            s.hashes
                .try_reserve(word_cap + 1)
                .map_err(|_| err!(Status::OutOfMemory, "hash buffer"))?;
        }
        if let Normalizer::Bert(n) = self.normalizer
            && s.chars_for != Some(n)
        {
            if s.chars.len() != CHAR_MEMO_SLOTS {
                s.chars
                    .try_reserve_exact(CHAR_MEMO_SLOTS)
                    .map_err(|_| err!(Status::OutOfMemory, "character memo"))?;
            }
            s.chars.clear();
            s.chars.resize(CHAR_MEMO_SLOTS, CharMemo::EMPTY);
            s.chars_for = Some(n);
        }
        s.word_len = 0;
        s.word_chars = 0;
        s.run.clear();
        let mut pass = Pass {
            tok: self,
            wp,
            limit,
            s,
            ids,
        };
        if self.added_inline {
            stopped(pass.segment(text))?;
            pass.ids.truncate(limit);
            return Ok(());
        }
        let bytes = text.as_bytes();
        let mut seg_start = 0;
        let mut i = 0;
        while i < bytes.len() {
            // Added tokens: leftmost, then longest.
            if self.added_first[bytes[i] as usize]
                && let Some((tok, len)) = self.added_at(bytes, i)
            {
                let mut seg_end = i;
                if tok.lstrip {
                    seg_end = trim_end_ws(text, seg_start, seg_end);
                }
                let r = pass.segment(text_slice(text, seg_start, seg_end));
                stopped(r)?;
                if r.is_err() {
                    break;
                }
                if pass.ids.len() >= limit {
                    break;
                }
                reserve(pass.ids, 1)?;
                pass.ids.push(tok.id);
                i += len;
                if tok.rstrip {
                    i = skip_ws(text, i);
                }
                seg_start = i;
                continue;
            }
            i += 1;
        }
        if pass.ids.len() < limit {
            stopped(pass.segment(text_slice(text, seg_start, bytes.len())))?;
        }
        pass.ids.truncate(limit);
        Ok(())
    }

    fn added_at(&self, bytes: &[u8], i: usize) -> Option<(&AddedToken, usize)> {
        let rest = &bytes[i..];
        self.added.iter().find_map(|t| {
            let c = self
                .added_arena
                .get(t.off as usize..(t.off + t.len) as usize)?;
            rest.starts_with(c).then_some((t, c.len()))
        })
    }
}

/// One `encode` call's pass over its text: the tokenizer's settings, the word being built in
/// the scratch, and the ids it turns into (at most `limit`). Normalization, pre-tokenization and
/// WordPiece run as its methods, character by character.
struct Pass<'a> {
    tok: &'a HfTokenizer,
    wp: &'a WordPiece,
    limit: usize,
    s: &'a mut HfScratch,
    ids: &'a mut Vec<u32>,
}

impl Pass<'_> {
    /// Normalizes, pre-tokenizes and tokenizes one stretch of text without added tokens.
    fn segment(&mut self, seg: &str) -> Flow {
        let bytes = seg.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b < 0x80 {
                // ASCII fast path. An ASCII character is a starter: the pending non-starters
                // go first.
                if !self.s.run.is_empty() {
                    self.flush_run()?;
                }
                let mut action = self.tok.ascii_action[b as usize];
                if action == AsciiAction::Added {
                    if let Some((tok, len)) = self.tok.added_at(bytes, i) {
                        // As the end of a segment, then the token's id.
                        self.end_word()?;
                        if self.ids.len() >= self.limit {
                            return Err(Stop::Full);
                        }
                        if self.ids.try_reserve(1).is_err() {
                            return Err(Stop::OutOfMemory);
                        }
                        self.ids.push(tok.id);
                        i += len;
                        continue;
                    }
                    action = self.tok.ascii_base[b as usize];
                }
                match action {
                    AsciiAction::Word => {
                        // The whole run of ASCII word bytes at once, mapped as they are copied
                        // in one pass: at most `room` are kept, all are counted.
                        let room = self
                            .wp
                            .max_input_chars_per_word
                            .saturating_sub(self.s.word_chars);
                        let at = self.s.word_len;
                        let dst = self.s.word.get_mut(at..).unwrap_or(&mut []);
                        let mut out = dst.iter_mut().take(room);
                        let start = i;
                        let mut kept = 0;
                        if let Some(d) = out.next() {
                            *d = self.tok.ascii_out[b as usize];
                            kept = 1;
                        }
                        for (d, &c) in out.zip(bytes.get(i + 1..).unwrap_or(&[])) {
                            let o = self.tok.word_out[c as usize];
                            if o == NOT_WORD {
                                break;
                            }
                            *d = o;
                            kept += 1;
                        }
                        // Past the room: the rest of the run is counted, not kept.
                        i += kept.max(1);
                        while bytes
                            .get(i)
                            .is_some_and(|&c| self.tok.word_out[c as usize] != NOT_WORD)
                        {
                            i += 1;
                        }
                        self.s.word_len += kept;
                        self.s.word_chars += i - start;
                        continue;
                    }
                    _ => i += 1,
                }
                match action {
                    AsciiAction::Word | AsciiAction::Added => {}
                    AsciiAction::Space => self.end_word()?,
                    AsciiAction::Punct => {
                        self.end_word()?;
                        self.s.push_byte(self.tok.ascii_out[b as usize]);
                        self.s.word_chars = 1;
                        self.end_word()?;
                    }
                    AsciiAction::Drop => {}
                }
                continue;
            }
            // One whole character (the text is valid UTF-8).
            let len = utf8_len(b);
            let cp = decode(&bytes[i..(i + len).min(bytes.len())]);
            i += len;
            self.normalize_char(cp)?;
        }
        self.flush_run()?;
        self.end_word()
    }

    /// Stage 2 for one non-ASCII input character, through the scratch's memo: the first time
    /// a character is seen its effect is recorded ([`Recording`]), later it is replayed.
    #[inline(never)]
    fn normalize_char(&mut self, cp: u32) -> Flow {
        let Normalizer::Bert(n) = self.tok.normalizer else {
            return self.pre_tokenize(cp);
        };
        let slot = CharMemo::slot(cp);
        let memo = match self.s.chars.get(slot) {
            Some(m) if m.cp == cp => *m,
            _ => {
                let mut r = Recording::default();
                // A recording never stops early.
                let _ = normalize_char(n, cp, &mut r);
                if !r.replayable {
                    return normalize_char(n, cp, self);
                }
                let m = CharMemo {
                    cp,
                    len: r.len as u32,
                    events: r.events,
                };
                if let Some(s) = self.s.chars.get_mut(slot) {
                    *s = m;
                }
                m
            }
        };
        for &e in memo.events.get(..memo.len as usize).unwrap_or(&[]) {
            if e == FLUSH {
                self.flush_run()?;
            } else {
                self.pre_tokenize_as(e & 0x1F_FFFF, (e >> 24) as u8)?;
            }
        }
        Ok(())
    }

    /// Emits the waiting non-starters in canonical order (stable by combining class).
    fn flush_run(&mut self) -> Flow {
        if self.s.run.is_empty() {
            return Ok(());
        }
        let Normalizer::Bert(n) = self.tok.normalizer else {
            return Ok(());
        };
        // Insertion sort: stable, and runs are short.
        for k in 1..self.s.run.len() {
            let mut j = k;
            while j > 0 && self.s.run[j - 1].1 > self.s.run[j].1 {
                self.s.run.swap(j - 1, j);
                j -= 1;
            }
        }
        let mut k = 0;
        while k < self.s.run.len() {
            let d = self.s.run[k].0;
            k += 1;
            // Taking the run out would allocate; after_nfd never touches `run`.
            after_nfd(n, d, self)?;
        }
        self.s.run.clear();
        Ok(())
    }

    /// Stage 3 for one normalized character.
    #[inline]
    fn pre_tokenize(&mut self, cp: u32) -> Flow {
        let f = match self.tok.pre_tokenizer {
            HfPreTokenizer::Bert => bert::class(cp),
            HfPreTokenizer::None => 0,
        };
        self.pre_tokenize_as(cp, f)
    }

    /// Stage 3 for one normalized character `cp` whose class ([`bert::class`]) is `f`.
    #[inline]
    fn pre_tokenize_as(&mut self, cp: u32, f: u8) -> Flow {
        if self.tok.pre_tokenizer == HfPreTokenizer::Bert {
            if f & bert::SPACE != 0 {
                return self.end_word();
            }
            if f & bert::PUNCT != 0 {
                self.end_word()?;
                self.s.push_char(cp);
                self.s.word_chars = 1;
                return self.end_word();
            }
        }
        self.s.word_chars += 1;
        if self.s.word_chars <= self.wp.max_input_chars_per_word {
            self.s.push_char(cp);
        }
        Ok(())
    }

    /// Stage 4: the finished word to self.ids.
    #[inline]
    fn end_word(&mut self) -> Flow {
        if self.s.word_chars == 0 {
            return Ok(());
        }
        if self.ids.len() >= self.limit {
            return Err(Stop::Full);
        }
        if !has_room(self.ids, self.s.word_len + 1) {
            return Err(Stop::OutOfMemory);
        }
        self.wp.tokenize(
            &self.s.word,
            self.s.word_len,
            self.s.word_chars,
            &mut self.s.hashes,
            self.ids,
        );
        self.s.word_len = 0;
        self.s.word_chars = 0;
        if self.ids.len() >= self.limit {
            Err(Stop::Full)
        } else {
            Ok(())
        }
    }
}

/// Where stage 2 sends its output: the pass (on to the pre-tokenizer), or a [`Recording`] of
/// one character's effect.
trait Stage2 {
    /// A normalized character.
    fn emit(&mut self, cp: u32) -> Flow;
    /// A starter follows: the waiting non-starters go first.
    fn flush_run(&mut self) -> Flow;
    /// A non-starter waits for canonical reordering (only when accents are stripped).
    fn hold(&mut self, cp: u32, ccc: u8) -> Flow;
}

impl Stage2 for Pass<'_> {
    fn emit(&mut self, cp: u32) -> Flow {
        self.pre_tokenize(cp)
    }

    fn flush_run(&mut self) -> Flow {
        Pass::flush_run(self)
    }

    fn hold(&mut self, cp: u32, ccc: u8) -> Flow {
        if has_room(&mut self.s.run, 1) {
            self.s.run.push((cp, ccc));
            Ok(())
        } else {
            Err(Stop::OutOfMemory)
        }
    }
}

/// Stage 2 for one input character: clean text, CJK spacing, then NFD.
fn normalize_char(n: BertNormalizer, cp: u32, out: &mut impl Stage2) -> Flow {
    let f = bert::class(cp);
    let mut cp = cp;
    if n.clean_text {
        if f & bert::DROP != 0 {
            return Ok(());
        }
        if f & bert::SPACE != 0 {
            cp = ' ' as u32;
        }
    }
    if n.handle_chinese_chars && f & bert::CJK != 0 {
        decompose(n, ' ' as u32, out)?;
        decompose(n, cp, out)?;
        return decompose(n, ' ' as u32, out);
    }
    decompose(n, cp, out)
}

/// NFD with canonical reordering of non-starters, when accents are stripped.
fn decompose(n: BertNormalizer, cp: u32, out: &mut impl Stage2) -> Flow {
    if !n.strip_accents {
        return after_nfd(n, cp, out);
    }
    let mut result = Ok(());
    unicode::nfd(cp, |d| {
        if result.is_err() {
            return;
        }
        let ccc = unicode::canonical_combining_class(d);
        result = if ccc == 0 {
            out.flush_run().and_then(|_| after_nfd(n, d, out))
        } else {
            out.hold(d, ccc)
        };
    });
    result
}

/// Strip Mn (when stripping accents), then lowercase.
fn after_nfd(n: BertNormalizer, cp: u32, out: &mut impl Stage2) -> Flow {
    if n.strip_accents && bert::class(cp) & bert::MN != 0 {
        return Ok(());
    }
    if n.lowercase {
        let l = unicode::to_lowercase(cp);
        for &c in l.as_slice() {
            out.emit(c)?;
        }
        return Ok(());
    }
    out.emit(cp)
}

/// Most events one character's stage 2 may have and still be remembered (a CJK ideograph has
/// six: flush, space, flush, itself, flush, space).
const CHAR_EVENTS: usize = 6;
/// A [`CharMemo`] event: flush the waiting non-starters. Any other event is an emitted code
/// point (bits 0-20) with its [`bert::class`] in bits 24-31.
const FLUSH: u32 = u32::MAX;
/// Characters remembered per scratch (direct-mapped by code point; 128 KiB). The corpus of
/// the tests has 1,206 distinct non-ASCII characters: 512 slots left most of them colliding.
const CHAR_MEMO_SLOTS: usize = 4096;

/// Stage 2's effect on one character, recorded: replaying the events does what
/// [`normalize_char`] does, given the same normalizer.
#[derive(Clone, Copy)]
struct CharMemo {
    /// `u32::MAX`: an empty slot.
    cp: u32,
    len: u32,
    events: [u32; CHAR_EVENTS],
}
const _: () = assert!(core::mem::size_of::<CharMemo>() == 32);

impl CharMemo {
    const EMPTY: CharMemo = CharMemo {
        cp: u32::MAX,
        len: 0,
        events: [0; CHAR_EVENTS],
    };

    #[inline(always)]
    fn slot(cp: u32) -> usize {
        (cp.wrapping_mul(0x9E37_79B1) >> (32 - CHAR_MEMO_SLOTS.trailing_zeros())) as usize
    }
}

/// Records one character's stage 2. Stage 2 depends only on the character and the
/// normalizer, and touches the pass's state only through [`Stage2`]'s three calls, so a
/// recording of flushes and emitted characters replays exactly. A held non-starter is not
/// recorded: when it is Mn (the usual accent) it would be dropped when flushed whatever its
/// place in the canonical order, so leaving it out changes nothing (a stable sort of the others
/// keeps their order); any other non-starter makes the character not replayable.
struct Recording {
    events: [u32; CHAR_EVENTS],
    len: usize,
    replayable: bool,
}

impl Default for Recording {
    fn default() -> Recording {
        Recording {
            events: [0; CHAR_EVENTS],
            len: 0,
            replayable: true,
        }
    }
}

impl Recording {
    fn push(&mut self, e: u32) {
        match self.events.get_mut(self.len) {
            Some(slot) => {
                *slot = e;
                self.len += 1;
            }
            None => self.replayable = false,
        }
    }
}

impl Stage2 for Recording {
    fn emit(&mut self, cp: u32) -> Flow {
        self.push(cp | (bert::class(cp) as u32) << 24);
        Ok(())
    }

    fn flush_run(&mut self) -> Flow {
        self.push(FLUSH);
        Ok(())
    }

    fn hold(&mut self, cp: u32, _ccc: u8) -> Flow {
        self.replayable &= bert::class(cp) & bert::MN != 0;
        Ok(())
    }
}

/// Whether `v` can take `n` more elements, growing it if not: the capacity test inline, the
/// growth out of line. (`Vec::try_reserve` is a call once the modules' low inline threshold
/// leaves it out of line, and `end_word` makes room once per word.)
#[inline(always)]
fn has_room<T>(v: &mut Vec<T>, n: usize) -> bool {
    v.capacity() - v.len() >= n || v.try_reserve(n).is_ok()
}

fn reserve(ids: &mut Vec<u32>, n: usize) -> Result<()> {
    ids.try_reserve(n)
        .map_err(|_| err!(Status::OutOfMemory, "token ids"))
}

fn text_slice(text: &str, a: usize, b: usize) -> &str {
    text.get(a..b).unwrap_or("")
}

/// Moves `end` back over white space (as `char::is_whitespace`) not before `start`.
fn trim_end_ws(text: &str, start: usize, end: usize) -> usize {
    let s = text_slice(text, start, end);
    start + s.trim_end_matches(char::is_whitespace).len()
}

fn skip_ws(text: &str, i: usize) -> usize {
    let s = text_slice(text, i, text.len());
    i + (s.len() - s.trim_start_matches(char::is_whitespace).len())
}

/// Decodes one UTF-8 sequence known to be valid.
#[inline(always)]
fn decode(b: &[u8]) -> u32 {
    let at = |k: usize| b.get(k).map_or(0, |&x| (x & 0x3F) as u32);
    match b.len() {
        2 => ((b[0] & 0x1F) as u32) << 6 | at(1),
        3 => ((b[0] & 0x0F) as u32) << 12 | at(1) << 6 | at(2),
        4 => ((b[0] & 0x07) as u32) << 18 | at(1) << 12 | at(2) << 6 | at(3),
        _ => b.first().map_or(0, |&x| x as u32),
    }
}

impl HfScratch {
    /// Appends one byte to the word (the buffer was sized for the longest kept word).
    #[inline(always)]
    fn push_byte(&mut self, b: u8) {
        if let Some(slot) = self.word.get_mut(self.word_len) {
            *slot = b;
            self.word_len += 1;
        }
    }

    #[inline(always)]
    fn push_char(&mut self, cp: u32) {
        let mut buf = [0u8; 4];
        let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
        for &b in ch.encode_utf8(&mut buf).as_bytes() {
            self.push_byte(b);
        }
    }
}
