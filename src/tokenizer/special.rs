//! Special tokens found in text before any other processing (llama.cpp's
//! `tokenizer_st_partition`).
//!
//! Candidates are the control, user-defined and unknown tokens; control and unknown ones only
//! when the caller parses special tokens, user-defined ones always. llama.cpp takes them
//! longest first and, for each, cuts every remaining stretch of plain text at its leftmost
//! non-overlapping occurrences. The same result, in one pass over the text: find every
//! occurrence of every candidate (walking a sorted list of their texts from each position
//! whose byte can start one), then accept occurrences in that priority order — by token,
//! left to right — when none of their bytes is already taken. A token marked `rstrip` also
//! takes the white space after it (C's `isspace`) up to the next byte already taken, as
//! llama.cpp trims the text to its right before it looks for the next token.

use alloc::vec::Vec;

use super::reserve;
use super::table::Texts;
use crate::error::Result;
use crate::sort::heapsort_by;
use crate::unicode::is_c_space;

/// A special token as the matcher takes it.
#[derive(Clone, Copy)]
pub struct Special {
    pub id: u32,
    /// Matched even when special tokens are not parsed (user-defined tokens).
    pub always: bool,
    /// White space after it is dropped.
    pub rstrip: bool,
}

/// The special tokens of a vocabulary, sorted by text for prefix search.
pub struct SpecialTokens {
    /// Ids sorted by their text (bytewise).
    by_text: Vec<u32>,
    /// Priority of each entry of `by_text`: 0 is tried first (longest text, then lowest id).
    priority: Vec<u32>,
    /// `(id, text length, rstrip)` by priority.
    by_priority: Vec<(u32, u32, bool)>,
    /// Whether each entry of `by_text` is matched even when special tokens are not parsed.
    always: Vec<bool>,
    /// Bytes that start some special token's text.
    first_byte: [bool; 256],
    any_always: bool,
}

/// A piece of the input: plain text (a byte range) or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment {
    Text(usize, usize),
    Token(u32),
}

/// Reusable buffers of the partition.
#[derive(Default)]
pub struct Partitioner {
    /// `(priority, position)` of every occurrence.
    found: Vec<(u32, u32)>,
    taken: Vec<bool>,
    /// Accepted `(position, id, end)`: `end` past the token and the white space it strips.
    accepted: Vec<(u32, u32, u32)>,
}

impl SpecialTokens {
    /// `specials`: their texts must be non-empty.
    pub fn new(texts: &Texts, specials: &[Special]) -> SpecialTokens {
        let mut order: Vec<Special> = specials.to_vec();
        // Priority: longest text first, then lowest id.
        heapsort_by(&mut order, &mut |a, b| {
            (texts.get(b.id).len(), a.id) < (texts.get(a.id).len(), b.id)
        });
        let mut by_text: Vec<(u32, u32, bool)> = order
            .iter()
            .enumerate()
            .map(|(p, s)| (s.id, p as u32, s.always))
            .collect();
        // Equal texts (two ids spelled alike) keep their priority order.
        heapsort_by(&mut by_text, &mut |a, b| {
            (texts.get(a.0), a.1) < (texts.get(b.0), b.1)
        });
        let mut first_byte = [false; 256];
        for &(id, _, _) in &by_text {
            if let Some(&b) = texts.get(id).first() {
                first_byte[b as usize] = true;
            }
        }
        SpecialTokens {
            any_always: by_text.iter().any(|t| t.2),
            by_priority: order
                .iter()
                .map(|s| (s.id, texts.get(s.id).len() as u32, s.rstrip))
                .collect(),
            by_text: by_text.iter().map(|t| t.0).collect(),
            priority: by_text.iter().map(|t| t.1).collect(),
            always: by_text.iter().map(|t| t.2).collect(),
            first_byte,
        }
    }

    /// Splits `text` into fragments (appended to `out`, in order). Fails only when memory for
    /// the occurrences runs out.
    pub fn partition(
        &self,
        texts: &Texts,
        text: &[u8],
        parse_special: bool,
        work: &mut Partitioner,
        out: &mut Vec<Fragment>,
    ) -> Result<()> {
        if self.by_text.is_empty() || !(parse_special || self.any_always) {
            if !text.is_empty() {
                out.push(Fragment::Text(0, text.len()));
            }
            return Ok(());
        }
        // 1. Every occurrence of every eligible token.
        work.found.clear();
        for (pos, &b) in text.iter().enumerate() {
            if self.first_byte[b as usize] {
                self.occurrences_at(texts, text, pos, parse_special, &mut work.found)?;
            }
        }
        if work.found.is_empty() {
            if !text.is_empty() {
                out.push(Fragment::Text(0, text.len()));
            }
            return Ok(());
        }
        // 2. Accept them by priority, then position, where the bytes are still free.
        heapsort_by(&mut work.found, &mut |a, b| a < b);
        work.taken.clear();
        reserve(&mut work.taken, text.len(), "special-token scan")?;
        work.taken.resize(text.len(), false);
        work.accepted.clear();
        for &(priority, pos) in &work.found {
            let Some(&(id, len, rstrip)) = self.by_priority.get(priority as usize) else {
                continue;
            };
            let span = pos as usize..(pos + len) as usize;
            if work.taken[span.clone()].iter().any(|&t| t) {
                continue;
            }
            let mut end = span.end;
            if rstrip {
                while end < text.len() && !work.taken[end] && is_c_space(text[end] as u32) {
                    end += 1;
                }
            }
            work.taken[span.start..end]
                .iter_mut()
                .for_each(|t| *t = true);
            work.accepted.push((pos, id, end as u32));
        }
        // 3. Fragments in text order.
        heapsort_by(&mut work.accepted, &mut |a, b| a < b);
        let mut at = 0usize;
        for &(pos, id, end) in &work.accepted {
            if pos as usize > at {
                out.push(Fragment::Text(at, pos as usize));
            }
            out.push(Fragment::Token(id));
            at = end as usize;
        }
        if at < text.len() {
            out.push(Fragment::Text(at, text.len()));
        }
        Ok(())
    }

    /// Adds every special token whose text starts at `pos`: narrows the sorted texts one byte
    /// at a time (a trie walk over a sorted array).
    fn occurrences_at(
        &self,
        texts: &Texts,
        text: &[u8],
        pos: usize,
        parse_special: bool,
        found: &mut Vec<(u32, u32)>,
    ) -> Result<()> {
        let (mut lo, mut hi) = (0usize, self.by_text.len());
        let mut k = 0usize;
        while lo < hi && pos + k < text.len() {
            let byte = text[pos + k];
            // Within [lo, hi) all texts share text[pos..pos + k]; texts of length k sort first,
            // then by byte k.
            let range = &self.by_text[lo..hi];
            let key = |id: &u32| texts.get(*id).get(k).copied();
            let a = lo + range.partition_point(|id| key(id).is_none_or(|c| c < byte));
            let b = lo + range.partition_point(|id| key(id).is_none_or(|c| c <= byte));
            lo = a;
            hi = b;
            k += 1;
            if lo < hi
                && texts.get(self.by_text[lo]).len() == k
                && (parse_special || self.always[lo])
            {
                if found.len() == found.capacity() {
                    reserve(found, found.len().max(64), "special-token occurrences")?;
                }
                found.push((self.priority[lo], pos as u32));
            }
        }
        Ok(())
    }
}
