//! WordPiece as llama.cpp runs it on a BERT vocabulary (`tokenizer.ggml.model = "bert"`).
//!
//! The vocabulary is stored with llama.cpp's phantom spaces: a word-initial piece is `▁word`
//! and a continuation (`##ing` in the Hugging Face file) is plain `ing`. A text is encoded in
//! two steps, each as `llm_tokenizer_wpm_session` does it:
//!
//! 1. [`Words`]: with accents stripped (the default whenever lowercasing is), each code point
//!    becomes the first code point of its canonical decomposition, and marks (`\p{M}`) are
//!    dropped; NUL, U+FFFD and controls are dropped; white space ends a word; punctuation,
//!    ASCII symbols and CJK ideographs are words of their own; the rest is lowercased (simple
//!    mapping) when asked and appended to the current word.
//! 2. [`WordPiece::encode_word`]: `▁` + the word is cut greedily, longest token first at each
//!    byte offset; if some offset starts no token, the word's pieces so far are dropped and the
//!    word is the unknown token.
//!
//! The longest-match search tries only the token lengths the vocabulary has, each in O(1) by a
//! rolling hash over the word's prefixes, so a hostile vocabulary with very long tokens costs
//! `word bytes × distinct lengths` probes, not their product with the token length.

use alloc::vec::Vec;

use super::table::{Texts, mix64};
use super::{MAX_TOKEN_BYTES, reserve};
use crate::err;
use crate::error::{Result, Status};
use crate::unicode::{self, Group};

/// `▁`, the phantom space before each word.
const PHANTOM: &[u8] = "▁".as_bytes();

/// The lookup side of a WordPiece vocabulary: token texts by (length, rolling hash).
pub struct WordPiece {
    /// Every distinct token length in bytes, longest first, with [`BASE`]^length.
    lengths: Vec<(u32, u64)>,
    /// Open addressing: `(key, id + 1)`, 0 when empty; key = [`slot_key`] of the text.
    slots: Vec<(u64, u32)>,
    lowercase: bool,
    strip_accents: bool,
}

/// Base of the polynomial hash (odd, so every power is invertible mod 2^64).
const BASE: u64 = 0x100_0000_01B3;

/// Polynomial hash of `bytes`: `Σ b[k] · BASE^(len - 1 - k)` mod 2^64 (bytes + 1, so that
/// leading zeros count).
fn poly(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |h, &b| {
        h.wrapping_mul(BASE).wrapping_add(b as u64 + 1)
    })
}

/// The table key of a text of `len` bytes with polynomial hash `h`.
#[inline]
fn slot_key(h: u64, len: u32) -> u64 {
    mix64(h ^ (len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

impl WordPiece {
    /// Indexes the token texts. `lowercase` / `strip_accents`: the BERT normalizer's options.
    pub fn new(texts: &Texts, lowercase: bool, strip_accents: bool) -> Result<WordPiece> {
        let n = texts.len();
        let cap = (2 * n).next_power_of_two().max(2);
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(cap)
            .map_err(|_| err!(Status::OutOfMemory, "WordPiece table of {} slots", cap))?;
        slots.resize(cap, (0u64, 0u32));
        // Which lengths occur (a bit per length up to the longest a token may be).
        let mut seen: Vec<u64> = Vec::new();
        reserve(&mut seen, MAX_TOKEN_BYTES / 64 + 1, "WordPiece lengths")?;
        seen.resize(MAX_TOKEN_BYTES / 64 + 1, 0);
        for id in 0..n as u32 {
            let t = texts.get(id);
            let (len, key) = (t.len(), slot_key(poly(t), t.len() as u32));
            let mut i = key as usize & (cap - 1);
            while slots[i].1 != 0 {
                i = (i + 1) & (cap - 1);
            }
            slots[i] = (key, id + 1);
            if let Some(w) = seen.get_mut(len / 64) {
                *w |= 1 << (len % 64);
            }
        }
        let mut lengths: Vec<(u32, u64)> = Vec::new();
        for len in (1..=MAX_TOKEN_BYTES).rev() {
            if seen[len / 64] & 1 << (len % 64) != 0 {
                reserve(&mut lengths, 1, "WordPiece lengths")?;
                let pow = (0..len).fold(1u64, |p, _| p.wrapping_mul(BASE));
                lengths.push((len as u32, pow));
            }
        }
        Ok(WordPiece {
            lengths,
            slots,
            lowercase,
            strip_accents,
        })
    }

    /// The token whose text is `word[a..b]`, given the word's prefix hashes (`prefix[i]` is
    /// [`poly`] of `word[..i]`) and `pow` = BASE^(b - a).
    #[inline]
    fn find(
        &self,
        texts: &Texts,
        word: &[u8],
        prefix: &[u64],
        a: usize,
        b: usize,
        pow: u64,
    ) -> Option<u32> {
        let h = prefix[b].wrapping_sub(prefix[a].wrapping_mul(pow));
        let key = slot_key(h, (b - a) as u32);
        let mask = self.slots.len() - 1;
        let mut i = key as usize & mask;
        loop {
            let (k, id1) = self.slots[i];
            if id1 == 0 {
                return None;
            }
            if k == key && *texts.get(id1 - 1) == word[a..b] {
                return Some(id1 - 1);
            }
            i = (i + 1) & mask;
        }
    }

    /// Appends the ids of one word (without its phantom space; never empty) to `out`: the
    /// greedy longest-first pieces of `▁` + word, or `unk` if some byte offset starts no token.
    pub fn encode_word(
        &self,
        texts: &Texts,
        (spelled, prefix): (&mut Vec<u8>, &mut Vec<u64>),
        word: &[u8],
        unk: u32,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        spelled.clear();
        reserve(spelled, word.len() + PHANTOM.len(), "WordPiece word")?;
        spelled.extend_from_slice(PHANTOM);
        spelled.extend_from_slice(word);
        let n = spelled.len();
        prefix.clear();
        reserve(prefix, n + 1, "WordPiece prefix hashes")?;
        prefix.push(0);
        for &b in spelled.iter() {
            let h = prefix[prefix.len() - 1];
            prefix.push(h.wrapping_mul(BASE).wrapping_add(b as u64 + 1));
        }
        let start = out.len();
        let mut i = 0;
        while i < n {
            let found = self
                .lengths
                .iter()
                .filter(|&&(len, _)| len as usize <= n - i)
                .find_map(|&(len, pow)| {
                    let b = i + len as usize;
                    self.find(texts, spelled, prefix, i, b, pow)
                        .map(|id| (id, b))
                });
            match found {
                Some((id, b)) => {
                    reserve(out, 1, "token ids")?;
                    out.push(id);
                    i = b;
                }
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            reserve(out, 1, "token ids")?;
            out.push(unk);
        }
        Ok(())
    }

    /// Splits `text` into words (step 1 of the module docs) and calls `word` with each,
    /// normalized, as UTF-8 (never empty).
    pub fn words(
        &self,
        text: &str,
        buf: &mut Vec<u8>,
        mut word: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        buf.clear();
        for ch in text.chars() {
            let mut cp = ch as u32;
            if self.strip_accents {
                let mut first = None;
                unicode::nfd(cp, |c| {
                    first.get_or_insert(c);
                });
                cp = first.unwrap_or(cp);
            }
            if unicode::is_white_space(cp) {
                if !buf.is_empty() {
                    word(buf)?;
                    buf.clear();
                }
                continue;
            }
            if cp == 0 || cp == 0xFFFD || unicode::is_control(cp) {
                continue;
            }
            let group = unicode::group(cp);
            if self.strip_accents && group == Group::Mark {
                continue;
            }
            let out = if self.lowercase && group != Group::Other {
                unicode::to_lowercase(cp).as_slice()[0]
            } else {
                cp
            };
            let alone = group == Group::Punctuation
                || (cp < 0x7F && group == Group::Symbol)
                || is_chinese_char(cp);
            if alone && !buf.is_empty() {
                word(buf)?;
                buf.clear();
            }
            reserve(buf, 4, "WordPiece word")?;
            let mut utf8 = [0u8; 4];
            let c = char::from_u32(out).unwrap_or(char::REPLACEMENT_CHARACTER);
            buf.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            if alone {
                word(buf)?;
                buf.clear();
            }
        }
        if !buf.is_empty() {
            word(buf)?;
            buf.clear();
        }
        Ok(())
    }

    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 16 + self.lengths.capacity() * 16
    }
}

/// llama.cpp's CJK ideograph ranges (`is_chinese_char`, Hugging Face's, with its 0x2B920).
fn is_chinese_char(cp: u32) -> bool {
    matches!(cp,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// Scratch buffers of the WordPiece encoder.
#[derive(Default)]
pub struct WpmWork {
    /// The current word, normalized.
    pub word: Vec<u8>,
    /// `▁` + the word.
    pub spelled: Vec<u8>,
    /// Polynomial hashes of `spelled`'s prefixes.
    pub prefix: Vec<u64>,
}
