//! Byte-level BPE (`tokenizer.ggml.model = gpt2`): the GPT-2 byte <-> unicode map and the
//! merge loop.
//!
//! Vocabulary texts spell every byte as a printable character (GPT-2's `bytes_to_unicode`):
//! bytes `!`..`~`, `¡`..`¬` and `®`..`ÿ` stand for themselves, the 68 others map in order to
//! U+0100.. . A pre-tokenized word therefore starts as one symbol per byte (the token of that
//! byte's character), and adjacent symbols are merged by rank — lowest rank first, the
//! leftmost of equal ranks first — until no adjacent pair is a merge. llama.cpp does this
//! with a priority queue; short words here use a scan of a rank array (no heap, no
//! allocation), long ones a heap, with the same order of merges.

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Reverse;

use super::reserve;
use super::table::{PairTable, hash_bytes};
use crate::err;
use crate::error::{Result, Status};

/// A symbol that is no token of the vocabulary (never merges, emits nothing).
pub const NONE: u32 = u32::MAX;

/// The character GPT-2 uses for each byte, as a code point.
pub const BYTE_TO_CHAR: [u16; 256] = {
    let mut map = [0u16; 256];
    let mut next = 256u16;
    let mut b = 0;
    while b < 256 {
        let printable =
            (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if printable {
            map[b] = b as u16;
        } else {
            map[b] = next;
            next += 1;
        }
        b += 1;
    }
    map
};

/// The byte each GPT-2 character stands for, indexed by code point (`-1`: not a byte char).
const CHAR_TO_BYTE: [i16; 324] = {
    let mut t = [-1i16; 324];
    let mut b = 0;
    while b < 256 {
        t[BYTE_TO_CHAR[b] as usize] = b as i16;
        b += 1;
    }
    t
};

/// The byte a GPT-2 character stands for (`None` for characters outside the byte alphabet).
#[inline]
pub fn char_to_byte(cp: u32) -> Option<u8> {
    match CHAR_TO_BYTE.get(cp as usize) {
        Some(&b) if b >= 0 => Some(b as u8),
        _ => None,
    }
}

/// Appends the GPT-2 spelling (UTF-8) of `byte`.
#[inline]
pub fn push_byte_char(byte: u8, out: &mut Vec<u8>) {
    let c = BYTE_TO_CHAR[byte as usize];
    if c < 0x80 {
        out.push(c as u8);
    } else {
        out.push(0xC0 | (c >> 6) as u8);
        out.push(0x80 | (c & 0x3F) as u8);
    }
}

/// Words up to this many bytes merge by scanning a rank array; longer ones use a heap.
const SCAN_MAX: usize = 48;

/// Reusable buffers of the merge loop.
#[derive(Default)]
pub struct Merger {
    syms: Vec<u32>,
    ranks: Vec<u32>,
    // Heap path: a linked list over the initial symbols.
    next: Vec<u32>,
    prev: Vec<u32>,
    heap: BinaryHeap<Reverse<(u64, u32, u32, u32)>>,
}

impl Merger {
    /// Merges the symbols of one word (`initial` = one token id per byte, [`NONE`] where the
    /// byte's character is no token) and appends the resulting ids to `out`.
    pub fn merge(
        &mut self,
        merges: &PairTable,
        initial: impl ExactSizeIterator<Item = u32>,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        self.syms.clear();
        let n = initial.len();
        reserve(&mut self.syms, n, "word symbols")?;
        self.syms.extend(initial);
        if n <= SCAN_MAX {
            self.merge_scan(merges);
            out.extend(self.syms.iter().copied().filter(|&s| s != NONE));
        } else {
            self.next.clear();
            self.prev.clear();
            self.heap.clear();
            reserve(&mut self.next, n, "word symbols")?;
            reserve(&mut self.prev, n, "word symbols")?;
            // Each merge pushes at most two pairs: 3n bounds the heap.
            self.heap.try_reserve(3 * n).map_err(|_| {
                err!(
                    Status::OutOfMemory,
                    "tokenize: no memory for a {}-byte word",
                    n
                )
            })?;
            self.merge_heap(merges, out);
        }
        Ok(())
    }

    #[inline]
    fn rank(merges: &PairTable, a: u32, b: u32) -> (u32, u32) {
        if a == NONE || b == NONE {
            return (u32::MAX, NONE);
        }
        match merges.get(a, b) {
            Some((rank, merged)) if merged != NONE => (rank, merged),
            _ => (u32::MAX, NONE),
        }
    }

    /// `ranks[i]` is the rank of the pair `(syms[i], syms[i + 1])`; each step merges the first
    /// lowest and updates only the two neighbouring ranks.
    fn merge_scan(&mut self, merges: &PairTable) {
        let syms = &mut self.syms;
        let ranks = &mut self.ranks;
        ranks.clear();
        for w in syms.windows(2) {
            ranks.push(Self::rank(merges, w[0], w[1]).0);
        }
        loop {
            let mut best = u32::MAX;
            let mut at = 0;
            for (i, &r) in ranks.iter().enumerate() {
                if r < best {
                    best = r;
                    at = i;
                }
            }
            if best == u32::MAX {
                return;
            }
            let merged = Self::rank(merges, syms[at], syms[at + 1]).1;
            syms[at] = merged;
            syms.remove(at + 1);
            ranks.remove(at);
            if at > 0 {
                ranks[at - 1] = Self::rank(merges, syms[at - 1], syms[at]).0;
            }
            if at + 1 < syms.len() {
                ranks[at] = Self::rank(merges, syms[at], syms[at + 1]).0;
            }
        }
    }

    /// The same order of merges with a min-heap of `(rank, left position)`; stale entries
    /// (a side already merged away or changed) are skipped when popped.
    fn merge_heap(&mut self, merges: &PairTable, out: &mut Vec<u32>) {
        let n = self.syms.len();
        self.next
            .extend((1..=n as u32).map(|i| if i as usize == n { NONE } else { i }));
        self.prev
            .extend((0..n as u32).map(|i| if i == 0 { NONE } else { i - 1 }));
        let push = |heap: &mut BinaryHeap<_>, syms: &[u32], l: u32, r: u32| {
            let (a, b) = (syms[l as usize], syms[r as usize]);
            let (rank, _) = Self::rank(merges, a, b);
            if rank != u32::MAX {
                heap.push(Reverse((((rank as u64) << 32) | l as u64, r, a, b)));
            }
        };
        for i in 0..n as u32 - 1 {
            push(&mut self.heap, &self.syms, i, i + 1);
        }
        while let Some(Reverse((key, r, a, b))) = self.heap.pop() {
            let l = key as u32;
            let (li, ri) = (l as usize, r as usize);
            if self.next[li] != r || self.syms[li] != a || self.syms[ri] != b {
                continue;
            }
            self.syms[li] = Self::rank(merges, a, b).1;
            let after = self.next[ri];
            self.next[li] = after;
            if after != NONE {
                self.prev[after as usize] = l;
            }
            self.syms[ri] = NONE;
            self.next[ri] = NONE;
            if self.prev[li] != NONE {
                push(&mut self.heap, &self.syms, self.prev[li], l);
            }
            if after != NONE {
                push(&mut self.heap, &self.syms, l, after);
            }
        }
        let mut i = 0u32;
        while i != NONE {
            let s = self.syms[i as usize];
            if s != NONE {
                out.push(s);
            }
            i = self.next[i as usize];
        }
    }
}

/// Remembers the ids of words already merged (text repeats its words: " the", " of", ...).
/// Bounded: when full it starts over. Tied to one tokenizer through `owner`.
#[derive(Default)]
pub struct WordCache {
    owner: u32,
    /// Index + 1 into `entries`, 0 = empty; a power of two in length.
    slots: Vec<u32>,
    /// `(hash, key start, key end, ids start, ids end)` into `keys` / `ids`.
    entries: Vec<(u64, u32, u32, u32, u32)>,
    keys: Vec<u8>,
    ids: Vec<u32>,
}

/// Most words remembered before the cache starts over.
const CACHE_WORDS: usize = 1 << 13;
/// Slots of a fresh cache (it doubles as it fills, up to `2 * CACHE_WORDS`), so that a
/// short text does not pay for clearing a large table.
const CACHE_FIRST_SLOTS: usize = 64;
/// Longest word remembered, in bytes.
pub const CACHE_MAX_WORD: usize = 64;

impl WordCache {
    /// Forgets everything unless the cache already belongs to tokenizer `owner`.
    pub fn bind(&mut self, owner: u32) {
        if self.owner != owner {
            self.owner = owner;
            self.clear();
        }
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.entries.clear();
        self.keys.clear();
        self.ids.clear();
    }

    /// The ids of `word`, if remembered.
    #[inline]
    pub fn get(&self, word: &[u8]) -> Option<&[u32]> {
        let mask = self.slots.len().checked_sub(1)?;
        let h = hash_bytes(word);
        let mut i = h as usize & mask;
        loop {
            let e = *self.slots.get(i)?;
            if e == 0 {
                return None;
            }
            let (eh, ka, kb, ia, ib) = self.entries[e as usize - 1];
            if eh == h && self.keys.get(ka as usize..kb as usize) == Some(word) {
                return self.ids.get(ia as usize..ib as usize);
            }
            i = (i + 1) & mask;
        }
    }

    /// Remembers `ids` for `word` (not already present).
    pub fn put(&mut self, word: &[u8], ids: &[u32]) {
        if self.entries.len() >= CACHE_WORDS {
            self.clear();
        }
        // Keep the load factor at most 1/2.
        if (self.entries.len() + 1) * 2 > self.slots.len() {
            let size = (self.slots.len() * 2).max(CACHE_FIRST_SLOTS);
            self.slots.clear();
            self.slots.resize(size, 0);
            for e in 0..self.entries.len() {
                let h = self.entries[e].0;
                self.place(h, e as u32 + 1);
            }
        }
        let h = hash_bytes(word);
        let (ka, ia) = (self.keys.len() as u32, self.ids.len() as u32);
        self.keys.extend_from_slice(word);
        self.ids.extend_from_slice(ids);
        self.entries
            .push((h, ka, self.keys.len() as u32, ia, self.ids.len() as u32));
        self.place(h, self.entries.len() as u32);
    }

    #[inline]
    fn place(&mut self, h: u64, entry: u32) {
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = entry;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::Gguf;

    /// The heap (long words) and the scan (short words) merge in the same order.
    #[test]
    fn heap_and_scan_agree() {
        let bytes = crate::testutil::read_fixture("models/vocab/vocab-bpe-smollm.gguf");
        let g = Gguf::parse(&bytes).unwrap();
        let tok = crate::tokenizer::Tokenizer::from_gguf(&g).unwrap();
        let mut rng = crate::testutil::Rng(0x2545_F491_4F6C_DD1D);
        let letters = b"etaoinshrdlucmfwyp ";
        let mut m = Merger::default();
        for round in 0..400 {
            let len = 2 + round % 200;
            let word: Vec<u8> = (0..len)
                .map(|_| letters[(rng.next() % letters.len() as u64) as usize])
                .collect();
            let initial: Vec<u32> = word.iter().map(|&c| tok.byte_token[c as usize]).collect();
            m.syms.clear();
            m.syms.extend_from_slice(&initial);
            m.merge_scan(&tok.merges);
            let scanned: Vec<u32> = m.syms.iter().copied().filter(|&s| s != NONE).collect();
            m.syms.clear();
            m.syms.extend_from_slice(&initial);
            m.next.clear();
            m.prev.clear();
            m.heap.clear();
            let mut heaped = Vec::new();
            m.merge_heap(&tok.merges, &mut heaped);
            assert_eq!(
                scanned,
                heaped,
                "{}",
                alloc::string::String::from_utf8_lossy(&word)
            );
        }
    }
}
