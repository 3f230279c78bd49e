//! WordPiece: greedy longest-match-first over a vocabulary of pieces, `##`-style continuations.
//!
//! Pieces live in two hash tables: word-initial pieces keyed by their bytes, and continuation
//! pieces keyed by their bytes *without* the continuing prefix, so matching never builds a
//! string. The hash (FNV-1a, 64 bits) is computed byte by byte, so the hashes of all prefixes of
//! the rest of a word come from one pass and the longest match is probed first with no
//! rehashing. A word longer than `max_input_chars_per_word` characters, or with a part no piece
//! matches, becomes the unknown token, as in Hugging Face tokenizers.
//!
//! Speed comes from touching little memory per lookup: a slot holds the first 8 bytes of its
//! key, so most keys are compared without visiting the byte arena, and a blocked Bloom filter
//! turns away most of the misses of greedy matching before they reach the table.

use crate::err;
use crate::error::{Result, Status};
use alloc::vec::Vec;

const FNV_SEED: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[inline(always)]
fn fnv_step(h: u64, b: u8) -> u64 {
    (h ^ b as u64).wrapping_mul(FNV_PRIME)
}

/// Bytes of zero padding a word buffer needs after its last byte (see [`head8`]).
pub const WORD_PADDING: usize = 8;

/// The first `min(len, 8)` bytes of `buf[at..]` as a little-endian u64, zero-filled.
/// `buf` must have [`WORD_PADDING`] readable bytes past `at + min(len, 8)`... in practice the
/// word buffer is zero-padded, and a short read falls back to a byte loop.
#[inline(always)]
fn head8(buf: &[u8], at: usize, len: usize) -> u64 {
    let n = len.min(8);
    let v = match buf.get(at..at + 8) {
        Some(b) => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        None => {
            let mut v = 0u64;
            for (k, &b) in buf.iter().skip(at).take(n).enumerate() {
                v |= (b as u64) << (8 * k);
            }
            v
        }
    };
    if n == 8 {
        v
    } else {
        v & ((1u64 << (8 * n)) - 1)
    }
}

/// One slot of a piece table. `meta == 0` marks an empty slot (keys are never empty).
#[repr(C)]
#[derive(Clone, Copy)]
struct Slot {
    /// High 24 bits of the key's hash, then the key length (255 for 255 and longer).
    meta: u32,
    /// Token id.
    id: u32,
    /// The key's first 8 bytes, little-endian, zero-filled.
    head: u64,
}
const _: () = assert!(core::mem::size_of::<Slot>() == 16);

const EMPTY: Slot = Slot {
    meta: 0,
    id: 0,
    head: 0,
};

#[inline(always)]
fn meta_of(h: u64, len: usize) -> u32 {
    ((h >> 40) as u32) << 8 | len.min(255) as u32
}

/// An open-addressing hash table from piece bytes to ids (load factor at most 1/2), with a
/// blocked Bloom filter in front (16 bits per key, about 2% false positives).
pub struct PieceTable {
    slots: Vec<Slot>,
    /// For keys longer than 8 bytes: (offset, length) of the whole key in `arena`, per slot.
    long: Vec<(u32, u32)>,
    /// Hash bits used for the slot index.
    shift: u32,
    /// Bloom filter words; two bits of one word per key.
    filter: Vec<u64>,
    filter_shift: u32,
    arena: Vec<u8>,
    /// Longest key, in bytes: no match is tried beyond it.
    pub max_len: usize,
}

fn zeroed<T: Clone>(n: usize, fill: T, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| err!(Status::OutOfMemory, "{what} of {n} entries"))?;
    v.resize(n, fill);
    Ok(v)
}

impl PieceTable {
    /// A table with room for `n` keys.
    pub fn with_capacity(n: usize) -> Result<PieceTable> {
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
        let words = (size / 8).max(2);
        Ok(PieceTable {
            slots: zeroed(size, EMPTY, "piece table")?,
            long: zeroed(size, (0, 0), "piece table")?,
            shift: 64 - size.trailing_zeros(),
            filter: zeroed(words, 0u64, "piece filter")?,
            filter_shift: 64 - words.trailing_zeros(),
            arena: Vec::new(),
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

    /// The filter word and its two bits for hash `h`.
    #[inline(always)]
    fn filter_bits(&self, h: u64) -> (usize, u64) {
        let b = (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let word = (b >> self.filter_shift) as usize;
        (word, 1u64 << (b & 63) | 1u64 << ((b >> 6) & 63))
    }

    /// Inserts or replaces (a later duplicate wins, as when a JSON map is read into a map).
    /// Empty keys are ignored: matching never looks one up.
    pub fn insert(&mut self, key: &[u8], id: u32) -> Result<()> {
        if key.is_empty() {
            return Ok(());
        }
        let h = Self::hash(key);
        let mask = self.slots.len() - 1;
        let mut i = self.index(h);
        loop {
            let s = self.slots[i];
            if s.meta == 0 {
                break;
            }
            if self.matches(i, key, 0, key.len(), h) {
                self.slots[i].id = id;
                return Ok(());
            }
            i = (i + 1) & mask;
        }
        if key.len() > 8 {
            let off = self.arena.len();
            if off + key.len() > u32::MAX as usize / 2 {
                return Err(err!(Status::BadFormat, "vocabulary pieces exceed 2 GiB"));
            }
            self.arena
                .try_reserve(key.len())
                .map_err(|_| err!(Status::OutOfMemory, "piece bytes"))?;
            self.arena.extend_from_slice(key);
            self.long[i] = (off as u32, key.len() as u32);
        }
        self.slots[i] = Slot {
            meta: meta_of(h, key.len()),
            id,
            head: head8(key, 0, key.len()),
        };
        let (w, bits) = self.filter_bits(h);
        if let Some(f) = self.filter.get_mut(w) {
            *f |= bits;
        }
        self.max_len = self.max_len.max(key.len());
        Ok(())
    }

    /// Whether slot `i` holds the key `buf[at..at + len]` (whose hash is `h`).
    #[inline(always)]
    fn matches(&self, i: usize, buf: &[u8], at: usize, len: usize, h: u64) -> bool {
        let Some(s) = self.slots.get(i) else {
            return false;
        };
        if s.meta != meta_of(h, len) || s.head != head8(buf, at, len) {
            return false;
        }
        if len <= 8 {
            return true;
        }
        let (off, n) = self.long[i];
        let stored = self.arena.get(off as usize..off as usize + n as usize);
        let key = buf.get(at..at + len);
        match (stored, key) {
            (Some(a), Some(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y),
            _ => false,
        }
    }

    /// Looks up `buf[at..at + len]`, given its hash `h`. With `filter`, the Bloom filter is
    /// asked first (worth it where misses are likely).
    #[inline(always)]
    pub fn get_hashed(
        &self,
        buf: &[u8],
        at: usize,
        len: usize,
        h: u64,
        filter: bool,
    ) -> Option<u32> {
        if filter {
            let (w, bits) = self.filter_bits(h);
            if self.filter.get(w).is_none_or(|&f| f & bits != bits) {
                return None;
            }
        }
        let mask = self.slots.len() - 1;
        let mut i = self.index(h);
        loop {
            let s = self.slots.get(i)?;
            if s.meta == 0 {
                return None;
            }
            if self.matches(i, buf, at, len, h) {
                return Some(s.id);
            }
            i = (i + 1) & mask;
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<u32> {
        self.get_hashed(key, 0, key.len(), Self::hash(key), false)
    }

    /// Every key's length in bytes and its id, once each (for statistics over the vocabulary).
    pub fn entries(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.meta != 0)
            .map(|(i, s)| {
                let len = if s.meta & 0xFF < 9 {
                    s.meta & 0xFF
                } else {
                    self.long[i].1
                };
                (len as u64, s.id)
            })
    }

    /// Every key's bytes (test and statistics use).
    pub fn keys(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.meta != 0)
            .map(|(i, s)| {
                let len = (s.meta & 0xFF) as usize;
                if len <= 8 {
                    s.head.to_le_bytes()[..len].to_vec()
                } else {
                    let (off, n) = self.long[i];
                    self.arena
                        .get(off as usize..(off + n) as usize)
                        .unwrap_or(&[])
                        .to_vec()
                }
            })
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
    /// The id of each one-byte (ASCII) word: its initial piece, or the unknown token. Words of
    /// one punctuation character are a large share of all words.
    single: [u32; 128],
}

impl WordPiece {
    pub fn new(
        initial: PieceTable,
        continuation: PieceTable,
        unk_id: u32,
        max_input_chars_per_word: usize,
    ) -> WordPiece {
        let mut single = [unk_id; 128];
        for (b, id) in (0u8..).zip(single.iter_mut()) {
            if let Some(found) = initial.get(&[b]) {
                *id = found;
            }
        }
        WordPiece {
            initial,
            continuation,
            unk_id,
            max_input_chars_per_word,
            single,
        }
    }

    /// Tokenizes one pre-tokenized word, `buf[..len]` (`chars` characters; `buf` is zero-padded
    /// by [`WORD_PADDING`] bytes), and appends its ids; `hashes` is scratch.
    #[inline]
    pub fn tokenize(
        &self,
        buf: &[u8],
        len: usize,
        chars: usize,
        hashes: &mut Vec<u64>,
        ids: &mut Vec<u32>,
    ) {
        if chars > self.max_input_chars_per_word {
            ids.push(self.unk_id);
            return;
        }
        let word = buf.get(..len).unwrap_or(&[]);
        if let &[b] = word
            && let Some(&id) = self.single.get(b as usize)
        {
            ids.push(id);
            return;
        }
        // Most words are whole pieces: one hash, one probe, no prefix hashes.
        if word.len() <= self.initial.max_len {
            let h = PieceTable::hash(word);
            if let Some(id) = self.initial.get_hashed(buf, 0, word.len(), h, false) {
                ids.push(id);
                return;
            }
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
            if start == 0 && limit == rest.len() {
                // The whole word was tried above.
                end -= 1;
            }
            // The first probe of a continuation (its whole rest) usually hits: no filter.
            let mut filter = start == 0 || limit != rest.len();
            while end > 0 {
                // Only whole characters: `end` must not split a UTF-8 sequence.
                if end == rest.len() || rest[end] & 0xC0 != 0x80 {
                    if let Some(id) = table.get_hashed(buf, start, end, hashes[end], filter) {
                        found = Some(id);
                        break;
                    }
                    filter = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_finds_short_and_long_keys() {
        let mut t = PieceTable::with_capacity(8).unwrap();
        let keys: [&[u8]; 6] = [
            b"a",
            b"ab",
            b"abcdefgh",
            b"abcdefghi",
            b"\xe4\xb8\xad",
            b"a much longer key than eight",
        ];
        for (i, k) in keys.iter().enumerate() {
            t.insert(k, i as u32).unwrap();
        }
        t.insert(b"ab", 9).unwrap();
        t.insert(b"", 7).unwrap();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), Some(if i == 1 { 9 } else { i as u32 }));
        }
        for k in [&b"abc"[..], b"abcdefgi", b"abcdefghj", b"", b"b"] {
            assert_eq!(t.get(k), None);
        }
        assert_eq!(t.max_len, 28);
        assert_eq!(t.keys().count(), 6);
        // Lookups inside a padded buffer.
        let buf = b"xxabcdefghi\0\0\0\0\0\0\0\0";
        let h = PieceTable::hash(b"abcdefghi");
        assert_eq!(t.get_hashed(buf, 2, 9, h, true), Some(3));
        let h = PieceTable::hash(b"ab");
        assert_eq!(t.get_hashed(buf, 2, 2, h, true), Some(9));
    }
}
