//! WordPiece: greedy longest-match-first over a vocabulary of pieces, `##`-style continuations.
//!
//! Pieces live in two hash tables: word-initial pieces keyed by their bytes, and continuation
//! pieces keyed by their bytes *without* the continuing prefix, so matching never builds a
//! string. The hash (FNV-1a, 64 bits) is computed byte by byte, so the hashes of all prefixes of
//! the rest of a word come from one pass and the longest match is probed first with no
//! rehashing. A word longer than `max_input_chars_per_word` characters, or with a part no piece
//! matches, becomes the unknown token, as in Hugging Face tokenizers.

use crate::err;
use crate::error::{Result, Status};
use alloc::vec::Vec;

const FNV_SEED: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[inline(always)]
fn fnv_step(h: u64, b: u8) -> u64 {
    (h ^ b as u64).wrapping_mul(FNV_PRIME)
}

/// One slot of a piece table; `len == u32::MAX` marks an empty slot.
#[repr(C)]
#[derive(Clone, Copy)]
struct Slot {
    /// High half of the key's hash (checked before the bytes).
    tag: u32,
    /// Token id.
    id: u32,
    /// The key's bytes: `arena[off..off + len]`.
    off: u32,
    len: u32,
}
const _: () = assert!(core::mem::size_of::<Slot>() == 16);

const EMPTY: Slot = Slot {
    tag: 0,
    id: 0,
    off: 0,
    len: u32::MAX,
};

/// An open-addressing hash table from piece bytes to ids (load factor at most 1/2).
pub struct PieceTable {
    slots: Vec<Slot>,
    /// Hash bits used for the slot index.
    shift: u32,
    arena: Vec<u8>,
    /// Longest key, in bytes: no match is tried beyond it.
    pub max_len: usize,
}

impl PieceTable {
    /// A table with room for `n` keys of `bytes` total bytes.
    pub fn with_capacity(n: usize, bytes: usize) -> Result<PieceTable> {
        let want = n
            .max(4)
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two);
        let Some(size) = want.filter(|&s| s <= 1 << 28) else {
            return Err(err!(
                Status::BadFormat,
                "vocabulary of {n} pieces is too large"
            ));
        };
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(size)
            .map_err(|_| err!(Status::OutOfMemory, "piece table of {size} slots"))?;
        slots.resize(size, EMPTY);
        let mut arena = Vec::new();
        arena
            .try_reserve_exact(bytes)
            .map_err(|_| err!(Status::OutOfMemory, "piece bytes"))?;
        Ok(PieceTable {
            slots,
            shift: 64 - size.trailing_zeros(),
            arena,
            max_len: 0,
        })
    }

    pub fn hash(key: &[u8]) -> u64 {
        key.iter().fold(FNV_SEED, |h, &b| fnv_step(h, b))
    }

    #[inline(always)]
    fn index(&self, h: u64) -> usize {
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Inserts or replaces (a later duplicate wins, as when JSON maps are read into a map).
    pub fn insert(&mut self, key: &[u8], id: u32) -> Result<()> {
        let h = Self::hash(key);
        let tag = (h >> 32) as u32;
        let mask = self.slots.len() - 1;
        let mut i = self.index(h);
        loop {
            let s = self.slots[i];
            if s.len == u32::MAX {
                break;
            }
            if s.tag == tag && self.key(s) == key {
                self.slots[i].id = id;
                return Ok(());
            }
            i = (i + 1) & mask;
        }
        let off = self.arena.len();
        if off + key.len() > u32::MAX as usize / 2 {
            return Err(err!(Status::BadFormat, "vocabulary pieces exceed 2 GiB"));
        }
        self.arena
            .try_reserve(key.len())
            .map_err(|_| err!(Status::OutOfMemory, "piece bytes"))?;
        self.arena.extend_from_slice(key);
        self.slots[i] = Slot {
            tag,
            id,
            off: off as u32,
            len: key.len() as u32,
        };
        self.max_len = self.max_len.max(key.len());
        Ok(())
    }

    #[inline(always)]
    fn key(&self, s: Slot) -> &[u8] {
        self.arena
            .get(s.off as usize..(s.off as usize).wrapping_add(s.len as usize))
            .unwrap_or(&[])
    }

    /// Looks `key` up, given `h == hash(key)`.
    #[inline(always)]
    pub fn get_hashed(&self, key: &[u8], h: u64) -> Option<u32> {
        let tag = (h >> 32) as u32;
        let mask = self.slots.len() - 1;
        let mut i = self.index(h);
        loop {
            let s = *self.slots.get(i)?;
            if s.len == u32::MAX {
                return None;
            }
            if s.tag == tag && s.len as usize == key.len() && self.key(s) == key {
                return Some(s.id);
            }
            i = (i + 1) & mask;
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<u32> {
        self.get_hashed(key, Self::hash(key))
    }

    /// Every key once, in slot order.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.slots
            .iter()
            .filter(|s| s.len != u32::MAX)
            .map(|&s| self.key(s))
    }
}

/// The WordPiece model.
pub struct WordPiece {
    /// Pieces that may start a word.
    pub initial: PieceTable,
    /// Pieces that continue a word, keyed without the continuing prefix.
    pub continuation: PieceTable,
    pub unk_id: u32,
    pub max_input_chars_per_word: usize,
}

impl WordPiece {
    /// Tokenizes one pre-tokenized word (`chars` characters, of which at most
    /// `max_input_chars_per_word` were kept in `word`) and appends its ids; `hashes` is scratch.
    #[inline]
    pub fn tokenize(&self, word: &[u8], chars: usize, hashes: &mut Vec<u64>, ids: &mut Vec<u32>) {
        if chars > self.max_input_chars_per_word {
            ids.push(self.unk_id);
            return;
        }
        let mark = ids.len();
        let mut start = 0;
        while start < word.len() {
            let table = if start == 0 {
                &self.initial
            } else {
                &self.continuation
            };
            let rest = &word[start..];
            let limit = rest.len().min(table.max_len);
            // Hashes of every prefix of `rest` up to `limit` bytes: hashes[k] = hash(rest[..k]).
            hashes.clear();
            let mut h = FNV_SEED;
            hashes.push(h);
            for &b in &rest[..limit] {
                h = fnv_step(h, b);
                hashes.push(h);
            }
            let mut found = None;
            let mut end = limit;
            while end > 0 {
                // Only whole characters: `end` must not split a UTF-8 sequence.
                if end == rest.len() || rest[end] & 0xC0 != 0x80 {
                    if let Some(id) = table.get_hashed(&rest[..end], hashes[end]) {
                        found = Some(id);
                        break;
                    }
                }
                end -= 1;
            }
            match found {
                Some(id) => {
                    ids.push(id);
                    start += end;
                }
                None => {
                    ids.truncate(mark);
                    ids.push(self.unk_id);
                    return;
                }
            }
        }
    }
}
