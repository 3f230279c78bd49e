//! Open-addressing hash tables for the tokenizers (no_std has no `HashMap`).
//!
//! - [`TokenTable`]: token text -> id. Slots hold `(tag, id + 1)`; the text itself lives in the
//!   vocabulary's arena ([`Texts`]), so the table is 8 bytes a slot and compares a 32-bit tag
//!   before touching the text.
//! - [`PairTable`]: BPE merge `(left id, right id) -> (rank, merged id)`.
//!
//! Both use linear probing at a load factor of at most 1/2 and are built once, then read-only.

use alloc::vec::Vec;

use crate::err;
use crate::error::{Result, Status};

/// Hash of a byte string: 8 bytes at a time, multiply-xorshift, with a final avalanche.
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = K ^ (bytes.len() as u64).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
        h ^= h >> 32;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    mix64(h)
}

/// The murmur3 64-bit finalizer.
#[inline]
pub fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^= h >> 33;
    h
}

/// Byte strings stored back to back: string `i` is `bytes[offsets[i]..offsets[i + 1]]`.
#[derive(Default)]
pub struct Texts {
    bytes: Vec<u8>,
    /// `len() + 1` entries.
    offsets: Vec<u32>,
}

impl Texts {
    pub fn with_capacity(n: usize, bytes: usize) -> Result<Texts> {
        let mut t = Texts::default();
        t.bytes.try_reserve_exact(bytes).map_err(|_| {
            err!(
                Status::OutOfMemory,
                "tokenizer: {} bytes of token text",
                bytes
            )
        })?;
        t.offsets
            .try_reserve_exact(n + 1)
            .map_err(|_| err!(Status::OutOfMemory, "tokenizer: {} token offsets", n))?;
        t.offsets.push(0);
        Ok(t)
    }

    /// Appends one string (its bytes are pushed by `fill`); fails if the arena would pass
    /// 4 GiB.
    pub fn push_with(&mut self, fill: impl FnOnce(&mut Vec<u8>)) -> Result<()> {
        fill(&mut self.bytes);
        let end = u32::try_from(self.bytes.len())
            .map_err(|_| err!(Status::Unsupported, "tokenizer: token text exceeds 4 GiB"))?;
        self.offsets.push(end);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    #[inline]
    pub fn get(&self, i: u32) -> &[u8] {
        let i = i as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => self.bytes.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.offsets.capacity() * 4
    }
}

const EMPTY: u32 = 0;

/// The slots of an open-addressing table for `n` entries: a power of two at least twice `n`
/// (so probes stay short), all `empty`.
fn open_slots<T: Clone>(n: usize, empty: T, what: &str) -> Result<Vec<T>> {
    let cap = (n.max(4) * 2).next_power_of_two();
    let mut slots = Vec::new();
    slots
        .try_reserve_exact(cap)
        .map_err(|_| err!(Status::OutOfMemory, "tokenizer: {} of {} slots", what, cap))?;
    slots.resize(cap, empty);
    Ok(slots)
}

/// Token text -> id over the strings of a [`Texts`].
pub struct TokenTable {
    /// `(tag, id + 1)`; `id + 1 == 0` marks an empty slot.
    slots: Vec<(u32, u32)>,
    mask: usize,
}

impl TokenTable {
    /// Indexes every string of `texts`. Returns the first duplicate pair `(earlier, later)` as
    /// an error value if two ids have the same text.
    pub fn build(texts: &Texts) -> Result<core::result::Result<TokenTable, (u32, u32)>> {
        let n = texts.len();
        let slots = open_slots(n, (0u32, EMPTY), "token table")?;
        let mut table = TokenTable {
            mask: slots.len() - 1,
            slots,
        };
        for id in 0..n as u32 {
            if let Some(earlier) = table.insert(texts, id) {
                return Ok(Err((earlier, id)));
            }
        }
        Ok(Ok(table))
    }

    /// Inserts `id`; returns the id already holding the same text, if any.
    fn insert(&mut self, texts: &Texts, id: u32) -> Option<u32> {
        let key = texts.get(id);
        match self.probe(texts, key) {
            Ok(found) => Some(found),
            Err((slot, tag)) => {
                self.slots[slot] = (tag, id + 1);
                None
            }
        }
    }

    /// The id whose text is `key`.
    #[inline]
    pub fn get(&self, texts: &Texts, key: &[u8]) -> Option<u32> {
        self.probe(texts, key).ok()
    }

    /// Linear probing from `key`'s hash: `Ok(id)` where its text is, else `Err((empty slot,
    /// tag))` where it would go.
    #[inline]
    fn probe(&self, texts: &Texts, key: &[u8]) -> core::result::Result<u32, (usize, u32)> {
        let h = hash_bytes(key);
        let tag = (h >> 32) as u32;
        let mut i = h as usize & self.mask;
        loop {
            let (t, v) = self.slots[i];
            if v == EMPTY {
                return Err((i, tag));
            }
            if t == tag && texts.get(v - 1) == key {
                return Ok(v - 1);
            }
            i = (i + 1) & self.mask;
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 8
    }
}

/// One BPE merge: `left right -> merged` at priority `rank` (lower merges first).
#[derive(Clone, Copy)]
struct PairSlot {
    left: u32,
    right: u32,
    rank: u32,
    merged: u32,
}

const NO_PAIR: u32 = u32::MAX;

/// `(left id, right id) -> (rank, merged id)`.
pub struct PairTable {
    slots: Vec<PairSlot>,
    mask: usize,
}

impl PairTable {
    pub fn with_capacity(n: usize) -> Result<PairTable> {
        let empty = PairSlot {
            left: NO_PAIR,
            right: 0,
            rank: 0,
            merged: 0,
        };
        let slots = open_slots(n, empty, "merge table")?;
        let cap = slots.len();
        Ok(PairTable {
            slots,
            mask: cap - 1,
        })
    }

    #[inline]
    fn slot_of(&self, left: u32, right: u32) -> usize {
        mix64(((left as u64) << 32) | right as u64) as usize & self.mask
    }

    /// Inserts a merge unless the pair is already present (the first, lowest rank, wins, as a
    /// map `emplace` does). Capacity must have been reserved for it.
    pub fn insert(&mut self, left: u32, right: u32, rank: u32, merged: u32) {
        let mut i = self.slot_of(left, right);
        loop {
            let s = self.slots[i];
            if s.left == NO_PAIR {
                self.slots[i] = PairSlot {
                    left,
                    right,
                    rank,
                    merged,
                };
                return;
            }
            if s.left == left && s.right == right {
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// `(rank, merged id)` of the merge `left right`.
    #[inline]
    pub fn get(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        let mut i = self.slot_of(left, right);
        loop {
            let s = self.slots[i];
            if s.left == NO_PAIR {
                return None;
            }
            if s.left == left && s.right == right {
                return Some((s.rank, s.merged));
            }
            i = (i + 1) & self.mask;
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<PairSlot>()
    }
}
