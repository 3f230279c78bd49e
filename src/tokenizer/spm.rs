//! SentencePiece BPE (`tokenizer.ggml.model = llama`), as llama.cpp runs it for Llama 2,
//! TinyLlama and Gemma vocabularies.
//!
//! The text (spaces already escaped to `▁`) starts as one symbol per UTF-8 character. Any two
//! adjacent symbols whose concatenation is a token of the vocabulary may merge; the pair whose
//! token has the highest score merges first (the leftmost of equal scores first), until no
//! adjacent pair forms a token. Each final symbol is its token, or — a single character
//! outside the vocabulary — one byte token `<0xNN>` per byte (byte fallback).
//!
//! Symbols are spans of the text, so a candidate pair is looked up by hashing the bytes from
//! the left symbol's start to the right symbol's end: no string is built.

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;

use super::reserve;
use crate::error::{Result, Status};
use crate::unicode::utf8_len;

/// Reusable buffers of the merge loop.
#[derive(Default)]
pub struct SpmMerger {
    /// Per initial character: byte start, byte length (0 once merged away), and links.
    start: Vec<u32>,
    len: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    /// `(score key, !left, right, merged length)`: a max-heap pops the highest score, then the
    /// smallest left position.
    heap: BinaryHeap<(u32, u32, u32, u32)>,
}

const END: u32 = u32::MAX;

/// Orders f32 scores as u32 keys (total order; finite scores keep their order).
#[inline]
fn score_key(score: f32) -> u32 {
    let bits = score.to_bits();
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

impl SpmMerger {
    /// Tokenizes `text` (one fragment, whitespace already escaped). `lookup` finds the token
    /// of a byte string and its score, `fallback` appends the tokens of one character that is
    /// no token (its bytes).
    pub fn tokenize(
        &mut self,
        text: &[u8],
        lookup: impl Fn(&[u8]) -> Option<(u32, f32)>,
        mut fallback: impl FnMut(&[u8], &mut Vec<u32>),
        out: &mut Vec<u32>,
    ) -> Result<()> {
        self.start.clear();
        self.len.clear();
        self.next.clear();
        self.prev.clear();
        self.heap.clear();
        // At most one symbol per byte; each merge pushes at most two pairs.
        for v in [
            &mut self.start,
            &mut self.len,
            &mut self.next,
            &mut self.prev,
        ] {
            reserve(v, text.len(), "SentencePiece symbols")?;
        }
        self.heap.try_reserve(3 * text.len()).map_err(|_| {
            crate::err!(
                Status::OutOfMemory,
                "tokenize: no memory for a {}-byte fragment",
                text.len()
            )
        })?;
        let mut at = 0usize;
        while at < text.len() {
            let n = utf8_len(text[at]).min(text.len() - at);
            self.start.push(at as u32);
            self.len.push(n as u32);
            at += n;
        }
        let n = self.start.len();
        if n == 0 {
            return Ok(());
        }
        self.next
            .extend((1..=n as u32).map(|i| if i as usize == n { END } else { i }));
        self.prev
            .extend((0..n as u32).map(|i| if i == 0 { END } else { i - 1 }));

        let try_pair = |heap: &mut BinaryHeap<_>, start: &[u32], len: &[u32], l: u32, r: u32| {
            let a = start[l as usize] as usize;
            let b = (start[r as usize] + len[r as usize]) as usize;
            if let Some((_, score)) = text.get(a..b).and_then(&lookup) {
                heap.push((score_key(score), !l, r, (b - a) as u32));
            }
        };
        for i in 0..n as u32 - 1 {
            try_pair(&mut self.heap, &self.start, &self.len, i, i + 1);
        }
        while let Some((_, not_l, r, size)) = self.heap.pop() {
            let (l, ri) = (!not_l, r as usize);
            let li = l as usize;
            if self.len[li] == 0 || self.len[ri] == 0 || self.len[li] + self.len[ri] != size {
                continue;
            }
            self.len[li] = size;
            self.len[ri] = 0;
            let after = self.next[ri];
            self.next[li] = after;
            if after != END {
                self.prev[after as usize] = l;
            }
            if self.prev[li] != END {
                try_pair(&mut self.heap, &self.start, &self.len, self.prev[li], l);
            }
            if after != END {
                try_pair(&mut self.heap, &self.start, &self.len, l, after);
            }
        }

        let mut i = 0u32;
        while i != END {
            let a = self.start[i as usize] as usize;
            let b = a + self.len[i as usize] as usize;
            let piece = text.get(a..b).unwrap_or(&[]);
            match lookup(piece) {
                Some((id, _)) => out.push(id),
                None => fallback(piece, out),
            }
            i = self.next[i as usize];
        }
        Ok(())
    }
}
