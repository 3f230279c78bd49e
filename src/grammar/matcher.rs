//! The matcher: where in the grammar the text so far can be, as a set of stacks.
//!
//! A stack is a list of element positions; its top is the character class the next code point
//! must match, the positions below it are where to continue once the rule above ends (llama.cpp's
//! `llama_grammar_accept` works the same way). An empty stack means the grammar is complete
//! along that path. Accepting a code point keeps the stacks whose top matches it, moves each
//! past its class and expands rule references until every top is a class again.
//!
//! Tokens are checked against the stacks without accepting them: all candidates step through
//! one code point at a time together, and because moving past a class does not depend on which
//! code point matched, each stack is advanced once per step for every candidate that matched it
//! (llama.cpp's `reject_candidates_for_stack`). A token that ends inside a UTF-8 sequence is
//! allowed when its partial character can still match; bytes of such a character carry over to
//! the next token.
//!
//! Per model, [`TokenTable`] holds every token's code points once (end-of-generation tokens
//! and tokens with no text are marked instead), so checking a token costs no decoding.

use alloc::vec;
use alloc::vec::Vec;

use super::{Elem, Grammar};
use crate::error::{Result, Status};
use crate::sort::heapsort_by;
use crate::tokenizer::Tokenizer;
use crate::{bail, err};

/// Most stacks tracked at once.
pub const MAX_STACKS: usize = 1024;
/// Deepest stack (nesting of rules in the text so far).
pub const MAX_STACK_DEPTH: usize = 4096;
/// Most stack expansions for one accepted code point.
const MAX_EXPANSIONS: usize = 1 << 16;
/// Most stack expansions for one check of the whole vocabulary.
const MAX_MASK_WORK: usize = 1 << 24;

type Stack = Vec<u32>;

/// A partial UTF-8 character: its bytes so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Partial {
    bytes: [u8; 4],
    len: u8,
}

impl Partial {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The code points this prefix can still become, as a range.
    fn range(&self) -> (u32, u32) {
        let b = self.as_slice();
        let total = utf8_total(b[0]).unwrap_or(1);
        let mut v = (b[0] & (0x7F >> total)) as u32;
        for &c in &b[1..] {
            v = v << 6 | (c & 0x3F) as u32;
        }
        let missing = 6 * (total - b.len()) as u32;
        // The shortest encoding of each length starts here (no overlong forms).
        let least = [0, 0, 0x80, 0x800, 0x10000][total];
        (
            (v << missing).max(least),
            (v << missing) | ((1 << missing) - 1),
        )
    }
}

/// The byte count of the sequence a lead byte starts; `None` for a continuation or bad byte.
fn utf8_total(lead: u8) -> Option<usize> {
    match lead {
        0x00..=0x7F => Some(1),
        0xC2..=0xDF => Some(2),
        0xE0..=0xEF => Some(3),
        0xF0..=0xF4 => Some(4),
        _ => None,
    }
}

/// Decodes `pending` then `bytes` into `out`; returns the trailing partial character, or
/// `None` when the bytes cannot be UTF-8.
fn decode(pending: Partial, bytes: &[u8], out: &mut Vec<u32>) -> Option<Partial> {
    let mut cur = pending;
    for &b in bytes {
        if cur.len == 0 {
            let total = utf8_total(b)?;
            if total == 1 {
                out.push(b as u32);
                continue;
            }
            cur.bytes[0] = b;
            cur.len = 1;
        } else {
            if b & 0xC0 != 0x80 {
                return None;
            }
            cur.bytes[cur.len as usize] = b;
            cur.len += 1;
        }
        let total = utf8_total(cur.bytes[0])?;
        if cur.len as usize == total {
            let c = core::str::from_utf8(cur.as_slice()).ok()?.chars().next()?;
            out.push(c as u32);
            cur = Partial::default();
        }
    }
    Some(cur)
}

/// What a token is to the grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Text: its code points (and maybe a partial character at the end).
    Text,
    /// An end-of-generation token: allowed only where the grammar may end.
    End,
    /// Never allowed under a grammar: control tokens, empty pieces, bytes that cannot be UTF-8
    /// on their own (a continuation byte is checked against a pending partial character).
    Never,
}

/// Every token's code points, computed once per model.
#[derive(Debug, Default)]
pub struct TokenTable {
    kind: Vec<Kind>,
    /// (tokens + 1,) token `i`'s code points are `cps[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    cps: Vec<u32>,
    /// A token's trailing partial character (len 0: none).
    tails: Vec<Partial>,
    /// (tokens + 1,) the raw bytes, for decoding after a pending partial character.
    byte_starts: Vec<u32>,
    bytes: Vec<u8>,
}

impl TokenTable {
    pub fn new(tok: &Tokenizer) -> Result<TokenTable> {
        let n = tok.n_vocab();
        let oom = |what: &str| err!(Status::OutOfMemory, "grammar token table: {}", what);
        let mut t = TokenTable::default();
        t.kind.try_reserve(n).map_err(|_| oom("kinds"))?;
        t.starts.try_reserve(n + 1).map_err(|_| oom("starts"))?;
        t.tails.try_reserve(n).map_err(|_| oom("tails"))?;
        t.byte_starts
            .try_reserve(n + 1)
            .map_err(|_| oom("starts"))?;
        t.starts.push(0);
        t.byte_starts.push(0);
        for id in 0..n as u32 {
            let piece = tok.piece(id);
            let mut kind = Kind::Text;
            let mut tail = Partial::default();
            if tok.is_eog(id) {
                kind = Kind::End;
            } else if tok.is_control(id) || piece.is_empty() {
                kind = Kind::Never;
            } else {
                let mark = t.cps.len();
                t.cps
                    .try_reserve(piece.len())
                    .map_err(|_| oom("code points"))?;
                match decode(Partial::default(), piece, &mut t.cps) {
                    Some(p) => tail = p,
                    None => {
                        t.cps.truncate(mark);
                        kind = Kind::Never;
                    }
                }
            }
            // Bytes for text and for pieces that may continue a split character.
            if kind == Kind::Text || (kind == Kind::Never && !tok.is_control(id)) {
                t.bytes.try_reserve(piece.len()).map_err(|_| oom("bytes"))?;
                t.bytes.extend_from_slice(piece);
            }
            t.kind.push(kind);
            t.tails.push(tail);
            t.starts.push(t.cps.len() as u32);
            t.byte_starts.push(t.bytes.len() as u32);
        }
        Ok(t)
    }

    pub fn len(&self) -> usize {
        self.kind.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kind.is_empty()
    }

    fn bytes_of(&self, id: u32) -> &[u8] {
        let i = id as usize;
        &self.bytes[self.byte_starts[i] as usize..self.byte_starts[i + 1] as usize]
    }

    /// Approximate heap use.
    pub fn heap_bytes(&self) -> usize {
        self.kind.len()
            + 4 * (self.starts.len() + self.cps.len() + self.byte_starts.len())
            + 5 * self.tails.len()
            + self.bytes.len()
    }
}

/// A token under test: its code points `cps[at..end]` then maybe a partial character.
#[derive(Clone, Copy, Debug)]
struct Cand {
    id: u32,
    at: u32,
    end: u32,
    tail: Partial,
}

/// The matcher state of one reply.
#[derive(Clone, Debug)]
pub struct Matcher {
    grammar: Grammar,
    stacks: Vec<Stack>,
    /// Bytes of a character split across tokens.
    pending: Partial,
    /// Candidate code points when tokens are decoded after a pending partial character.
    scratch: Vec<u32>,
}

impl Matcher {
    /// The matcher at the start of `grammar`'s root.
    pub fn new(grammar: Grammar) -> Result<Matcher> {
        let mut m = Matcher {
            grammar,
            stacks: Vec::new(),
            pending: Partial::default(),
            scratch: Vec::new(),
        };
        let mut budget = MAX_EXPANSIONS;
        let mut stacks = Vec::new();
        let root = m.grammar.root;
        for alt in m.grammar.alternatives(root) {
            let s = if m.grammar.elems[alt as usize].ends_alternative() {
                Vec::new()
            } else {
                vec![alt]
            };
            m.expand(s, &mut stacks, &mut budget)?;
        }
        m.stacks = dedup(stacks)?;
        Ok(m)
    }

    /// Whether the grammar may end here (some path is complete, no character is half-written).
    pub fn can_end(&self) -> bool {
        self.pending.len == 0 && self.stacks.iter().any(Vec::is_empty)
    }

    /// How many paths (stacks) the matcher tracks now.
    pub fn paths(&self) -> usize {
        self.stacks.len()
    }

    /// Whether the text so far is still a prefix of the grammar's language (false once a
    /// rejected text was forced in with [`Matcher::accept_bytes`]).
    pub fn is_alive(&self) -> bool {
        !self.stacks.is_empty()
    }

    /// Accepts `bytes` (any split of UTF-8). Errors if they do not continue the grammar; the
    /// state is then unchanged.
    pub fn accept_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let mut cps = Vec::new();
        let Some(tail) = decode(self.pending, bytes, &mut cps) else {
            bail!(Status::InvalidUtf8, "grammar: the text is not UTF-8");
        };
        let mut stacks = self.stacks.clone();
        for (i, &c) in cps.iter().enumerate() {
            let mut next = Vec::new();
            let mut budget = MAX_EXPANSIONS;
            for s in &stacks {
                if let Some(&top) = s.last()
                    && self.grammar.class_matches(top, c, c).0
                {
                    self.advance(s, top, &mut next, &mut budget)?;
                }
            }
            if next.is_empty() {
                bail!(
                    Status::InvalidArgument,
                    "grammar: the text does not match at character {} ({:?})",
                    i,
                    char::from_u32(c).unwrap_or('?')
                );
            }
            stacks = dedup(next)?;
        }
        if tail.len > 0 {
            let (lo, hi) = tail.range();
            let ok = stacks.iter().any(|s| {
                s.last()
                    .is_some_and(|&t| self.grammar.class_matches(t, lo, hi).0)
            });
            if !ok {
                bail!(
                    Status::InvalidArgument,
                    "grammar: a partial character does not match"
                );
            }
        }
        self.stacks = stacks;
        self.pending = tail;
        Ok(())
    }

    /// Accepts token `id` (which [`Matcher::allows`] said may come).
    pub fn accept_token(&mut self, table: &TokenTable, id: u32) -> Result<()> {
        match table.kind.get(id as usize) {
            // A lone continuation byte (kind Never) may complete a pending character.
            Some(Kind::Text | Kind::Never) if !table.bytes_of(id).is_empty() => {
                self.accept_bytes(table.bytes_of(id))
            }
            Some(Kind::End) if self.can_end() => Ok(()),
            _ => bail!(
                Status::InvalidArgument,
                "grammar: token {} cannot come here",
                id
            ),
        }
    }

    /// Whether token `id` may come next.
    pub fn allows(&mut self, table: &TokenTable, id: u32) -> Result<bool> {
        let i = id as usize;
        match table.kind.get(i) {
            None | Some(Kind::Never) if self.pending.len == 0 => return Ok(false),
            None => return Ok(false),
            Some(Kind::End) => return Ok(self.can_end()),
            _ if table.bytes_of(id).is_empty() => return Ok(false),
            _ => {}
        }
        let mut work = 0;
        let (cps, cand) = if self.pending.len == 0 {
            let c = Cand {
                id,
                at: table.starts[i],
                end: table.starts[i + 1],
                tail: table.tails[i],
            };
            (&table.cps[..], c)
        } else {
            self.scratch.clear();
            let Some(tail) = decode(self.pending, table.bytes_of(id), &mut self.scratch) else {
                return Ok(false);
            };
            let c = Cand {
                id,
                at: 0,
                end: self.scratch.len() as u32,
                tail,
            };
            (&self.scratch[..], c)
        };
        let rejected = self.reject(cps, &self.stacks, vec![cand], &mut work)?;
        Ok(rejected.is_empty())
    }

    /// Sets `allowed[id]` for every token that may come next (`allowed`: (tokens,)).
    pub fn allowed_tokens(&mut self, table: &TokenTable, allowed: &mut [bool]) -> Result<()> {
        let n = table.len().min(allowed.len());
        allowed.fill(false);
        let mut cands = Vec::new();
        cands
            .try_reserve(n)
            .map_err(|_| err!(Status::OutOfMemory, "grammar: {} candidates", n))?;
        let can_end = self.can_end();
        self.scratch.clear();
        for (i, ok) in allowed.iter_mut().enumerate().take(n) {
            match table.kind[i] {
                Kind::End => *ok = can_end,
                Kind::Never if self.pending.len == 0 => {}
                _ if self.pending.len == 0 => {
                    *ok = true;
                    cands.push(Cand {
                        id: i as u32,
                        at: table.starts[i],
                        end: table.starts[i + 1],
                        tail: table.tails[i],
                    });
                }
                _ if table.bytes_of(i as u32).is_empty() => {}
                _ => {
                    let at = self.scratch.len();
                    match decode(self.pending, table.bytes_of(i as u32), &mut self.scratch) {
                        Some(tail) => {
                            *ok = true;
                            cands.push(Cand {
                                id: i as u32,
                                at: at as u32,
                                end: self.scratch.len() as u32,
                                tail,
                            });
                        }
                        None => self.scratch.truncate(at),
                    }
                }
            }
        }
        let mut work = 0;
        let scratch = core::mem::take(&mut self.scratch);
        let cps = if self.pending.len == 0 {
            &table.cps[..]
        } else {
            &scratch[..]
        };
        let rejected = self.reject(cps, &self.stacks, cands, &mut work);
        self.scratch = scratch;
        for c in rejected? {
            allowed[c.id as usize] = false;
        }
        Ok(())
    }

    /// The candidates that no stack of `stacks` accepts.
    fn reject(
        &self,
        cps: &[u32],
        stacks: &[Stack],
        cands: Vec<Cand>,
        work: &mut usize,
    ) -> Result<Vec<Cand>> {
        let mut rejected = cands;
        for s in stacks {
            if rejected.is_empty() {
                break;
            }
            rejected = self.reject_one(cps, s, rejected, work)?;
        }
        Ok(rejected)
    }

    /// The candidates that stack `s` does not accept.
    fn reject_one(
        &self,
        cps: &[u32],
        s: &Stack,
        cands: Vec<Cand>,
        work: &mut usize,
    ) -> Result<Vec<Cand>> {
        let Some(&top) = s.last() else {
            // The grammar is complete on this path: only a token with nothing left passes.
            return Ok(cands
                .into_iter()
                .filter(|c| c.at < c.end || c.tail.len > 0)
                .collect());
        };
        let g = &self.grammar;
        let mut rejected = Vec::new();
        let mut next = Vec::new();
        for c in cands {
            if c.at == c.end {
                if c.tail.len > 0 {
                    let (lo, hi) = c.tail.range();
                    if !g.class_matches(top, lo, hi).0 {
                        rejected.push(c);
                    }
                }
            } else {
                let cp = cps[c.at as usize];
                if g.class_matches(top, cp, cp).0 {
                    next.push(Cand { at: c.at + 1, ..c });
                } else {
                    rejected.push(c);
                }
            }
        }
        if next.is_empty() {
            return Ok(rejected);
        }
        let mut stacks = Vec::new();
        let mut budget = MAX_EXPANSIONS;
        self.advance(s, top, &mut stacks, &mut budget)?;
        *work += MAX_EXPANSIONS - budget + 1;
        if *work > MAX_MASK_WORK {
            bail!(
                Status::Unsupported,
                "grammar: checking the vocabulary takes too many steps (too ambiguous)"
            );
        }
        let stacks = dedup(stacks)?;
        let back = self.reject(cps, &stacks, next, work)?;
        rejected.extend(back.into_iter().map(|c| Cand { at: c.at - 1, ..c }));
        Ok(rejected)
    }

    /// Moves stack `s` past the class at its top `top` and expands it into `out`.
    fn advance(&self, s: &Stack, top: u32, out: &mut Vec<Stack>, budget: &mut usize) -> Result<()> {
        let after = self.grammar.class_matches(top, u32::MAX, 0).1;
        let mut t = s.clone();
        t.pop();
        if !self.grammar.elems[after as usize].ends_alternative() {
            t.push(after);
        }
        self.expand(t, out, budget)
    }

    /// Expands rule references at the top of `s` until every top is a class (or the stack is
    /// empty), pushing the results to `out`.
    fn expand(&self, s: Stack, out: &mut Vec<Stack>, budget: &mut usize) -> Result<()> {
        let g = &self.grammar;
        let mut todo = vec![s];
        while let Some(mut s) = todo.pop() {
            if *budget == 0 {
                bail!(
                    Status::Unsupported,
                    "grammar: too many expansions for one character (too ambiguous)"
                );
            }
            *budget -= 1;
            if s.len() > MAX_STACK_DEPTH {
                bail!(
                    Status::Unsupported,
                    "grammar: nested deeper than {} rules",
                    MAX_STACK_DEPTH
                );
            }
            let Some(&top) = s.last() else {
                out.push(s);
                continue;
            };
            match g.elems[top as usize] {
                Elem::Ref(r) => {
                    s.pop();
                    if !g.elems[top as usize + 1].ends_alternative() {
                        s.push(top + 1);
                    }
                    for alt in g.alternatives(r) {
                        let mut t = s.clone();
                        if !g.elems[alt as usize].ends_alternative() {
                            t.push(alt);
                        }
                        todo.push(t);
                    }
                }
                e if e.starts_class() => {
                    if out.len() >= MAX_STACKS * 4 {
                        bail!(
                            Status::Unsupported,
                            "grammar: more than {} paths at once (too ambiguous)",
                            MAX_STACKS
                        );
                    }
                    out.push(s);
                }
                _ => {
                    // Not reached: positions on a stack never point at End/Alt/RangeTo/CharAlt.
                    s.pop();
                    todo.push(s);
                }
            }
        }
        Ok(())
    }
}

fn dedup(mut stacks: Vec<Stack>) -> Result<Vec<Stack>> {
    heapsort_by(&mut stacks, &mut |a, b| a < b);
    stacks.dedup();
    if stacks.len() > MAX_STACKS {
        bail!(
            Status::Unsupported,
            "grammar: more than {} paths at once (too ambiguous)",
            MAX_STACKS
        );
    }
    Ok(stacks)
}
