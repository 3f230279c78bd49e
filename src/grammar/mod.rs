//! Constrained sampling: a grammar decides which tokens may come next.
//!
//! ```text
//! GBNF text ──parse.rs──> Grammar (rules as flat element arrays, checked: every rule defined,
//!    ^                    no left recursion, sizes capped)
//!    │                         │
//! JSON schema ──schema.rs──┘   └──matcher.rs──> Matcher: the set of grammar stacks after the
//!                                               bytes so far; accepts bytes (UTF-8 split across
//!                                               tokens), says which tokens may come next and
//!                                               whether the grammar may end here
//! ```
//!
//! The dialect is llama.cpp's GBNF (`grammars/README.md` there): `name ::= alternatives`,
//! `|`, `( )`, `* + ? {m} {m,} {m,n}`, `"literals"`, `[classes]` (`^` negation, ranges,
//! escapes), `.`, `\xHH \uHHHH \UHHHHHHHH`, `#` comments; `root` is where matching starts.
//! Repetitions are rewritten into helper rules when parsing, so the matcher only knows
//! sequences, alternatives, rule references and character classes.
//!
//! Grammars and schemas are hostile input: their size, nesting, repetition counts, the number
//! of stacks the matcher tracks and the work of one step are all capped, and going over a cap
//! is an error (`Status::BadFormat` / `Unsupported`), never a hang or a trap.

use alloc::string::String;
use alloc::vec::Vec;

mod matcher;
mod parse;
pub mod schema;
mod schema_pattern;
#[cfg(test)]
mod tests;

pub use matcher::{Matcher, TokenTable};

// The caps: on the text, its nesting and repetitions, then on what it expands to.
/// Largest grammar text accepted (bytes).
pub const MAX_GRAMMAR_BYTES: usize = 1 << 20;
/// Deepest nesting of parentheses.
pub const MAX_NESTING: u32 = 64;
/// Largest count in a `{m,n}` repetition (llama.cpp has the same limit).
pub const MAX_REPETITION: u32 = 2000;
/// Most elements of all rules together (after repetitions are expanded).
pub const MAX_ELEMENTS: usize = 1 << 20;
/// Most rules (helper rules included).
pub const MAX_RULES: usize = 1 << 16;

/// One element of a rule. A rule is its alternatives back to back, each ending in `Alt`
/// except the last, which ends in `End`. A character class is a `Char`/`CharNot` followed by
/// optional `RangeTo` (making it a range) and further `CharAlt` (+ `RangeTo`) members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// End of the rule.
    End,
    /// End of an alternative; another follows.
    Alt,
    /// A reference to rule `n`.
    Ref(u32),
    /// The first member of a class (a code point, or a range's low end).
    Char(u32),
    /// The first member of a negated class.
    CharNot(u32),
    /// The high end of a range whose low end is the element before.
    RangeTo(u32),
    /// A further member of a class.
    CharAlt(u32),
    /// `.`: any code point.
    Any,
}

impl Elem {
    fn ends_alternative(self) -> bool {
        matches!(self, Elem::End | Elem::Alt)
    }
    fn starts_class(self) -> bool {
        matches!(self, Elem::Char(_) | Elem::CharNot(_) | Elem::Any)
    }
}

/// A compiled grammar: every rule's elements in one array.
#[derive(Clone, Debug, Default)]
pub struct Grammar {
    /// All rules, back to back.
    elems: Vec<Elem>,
    /// Where rule `r` starts in `elems`.
    rule_start: Vec<u32>,
    /// Rule names (helper rules get generated names), for messages.
    names: Vec<String>,
    /// The `root` rule.
    root: u32,
}

impl Grammar {
    /// Compiles GBNF text; errors carry the byte position and the reason.
    pub fn parse(text: &str) -> crate::error::Result<Grammar> {
        parse::parse(text)
    }

    /// The rule count (helper rules included).
    pub fn rules(&self) -> usize {
        self.rule_start.len()
    }

    /// The start of each alternative of rule `r`.
    fn alternatives(&self, r: u32) -> impl Iterator<Item = u32> + '_ {
        let start = self.rule_start[r as usize];
        let mut pos = start;
        let mut first = true;
        core::iter::from_fn(move || {
            if first {
                first = false;
                return Some(start);
            }
            // Skip to after the next Alt; stop at End.
            loop {
                match self.elems[pos as usize] {
                    Elem::End => return None,
                    Elem::Alt => {
                        pos += 1;
                        return Some(pos);
                    }
                    _ => pos += 1,
                }
            }
        })
    }

    /// Whether code point `c` is in the class starting at `pos`; also where the class ends.
    fn class_matches(&self, pos: u32, lo: u32, hi: u32) -> (bool, u32) {
        let e = &self.elems;
        let mut p = pos as usize;
        let negated = match e[p] {
            Elem::Any => return (true, pos + 1),
            Elem::CharNot(_) => true,
            _ => false,
        };
        // A class member [a, b] intersects the candidate range [lo, hi]; for a negated class
        // the candidate is accepted if some code point of [lo, hi] is outside every member:
        // exact for single code points, and for a partial UTF-8 range when one member does
        // not cover it (close enough: a partial character only has to be possible).
        let mut found = false;
        let mut covered = false;
        loop {
            let a = match e[p] {
                Elem::Char(a) | Elem::CharNot(a) | Elem::CharAlt(a) if p == pos as usize => a,
                Elem::CharAlt(a) => a,
                _ => break,
            };
            let b = match e.get(p + 1) {
                Some(Elem::RangeTo(b)) => {
                    p += 2;
                    *b
                }
                _ => {
                    p += 1;
                    a
                }
            };
            if a <= hi && lo <= b {
                found = true;
            }
            if a <= lo && hi <= b {
                covered = true;
            }
        }
        let ok = if negated { !covered } else { found };
        (ok, p as u32)
    }
}

/// `chat_set_grammar` kinds: no constraint, GBNF text, a JSON schema, any JSON object.
pub const KIND_NONE: u32 = 0;
pub const KIND_GBNF: u32 = 1;
pub const KIND_JSON_SCHEMA: u32 = 2;
pub const KIND_JSON_OBJECT: u32 = 3;

/// Compiles what `chat_set_grammar(kind, text)` names; `None` for [`KIND_NONE`].
pub fn compile(kind: u32, text: &[u8]) -> crate::error::Result<Option<Grammar>> {
    use crate::error::Status;
    let g = match kind {
        KIND_NONE => return Ok(None),
        KIND_GBNF => {
            let Ok(text) = core::str::from_utf8(text) else {
                crate::bail!(Status::InvalidUtf8, "grammar: the text is not UTF-8");
            };
            Grammar::parse(text)?
        }
        KIND_JSON_SCHEMA => Grammar::parse(&schema::to_gbnf(text)?)?,
        KIND_JSON_OBJECT => Grammar::parse(&schema::json_object())?,
        _ => crate::bail!(
            Status::InvalidArgument,
            "chat_set_grammar: unknown kind {} (0 none, 1 GBNF, 2 JSON schema, 3 JSON object)",
            kind
        ),
    };
    // The start state must be reachable within the caps too.
    Matcher::new(g.clone())?;
    Ok(Some(g))
}

/// A reply under a grammar: the matcher, and the scratch of a masked draw.
pub struct Constraint {
    pub matcher: Matcher,
    /// (vocab,) which tokens may come next, after a rejection.
    allowed: Vec<bool>,
    /// (vocab,) the logits with the disallowed ones at -inf.
    masked: Vec<f32>,
    /// Draws whose first pick the grammar rejected (so the whole vocabulary was checked).
    pub masks: usize,
}

impl Constraint {
    pub fn new(g: Grammar) -> crate::error::Result<Constraint> {
        Ok(Constraint {
            matcher: Matcher::new(g)?,
            allowed: Vec::new(),
            masked: Vec::new(),
            masks: 0,
        })
    }

    /// The next token under the grammar: the sampler's pick if the grammar allows it (the
    /// common case, one token checked), else a draw from the logits with every token the
    /// grammar rejects masked out (the whole vocabulary checked). An end-of-generation token
    /// comes only where the grammar may end.
    pub fn sample(
        &mut self,
        sampler: &mut crate::sampler::Sampler,
        table: &TokenTable,
        logits: &[f32],
        history: &[u32],
    ) -> crate::error::Result<u32> {
        use crate::error::Status;
        let id = sampler.sample(logits, history)?;
        if self.matcher.allows(table, id)? {
            return Ok(id);
        }
        self.masks += 1;
        let oom = |_| {
            crate::err!(
                Status::OutOfMemory,
                "grammar: mask of {} tokens",
                logits.len()
            )
        };
        self.allowed.clear();
        self.allowed.try_reserve(logits.len()).map_err(oom)?;
        self.allowed.resize(logits.len(), false);
        self.matcher.allowed_tokens(table, &mut self.allowed)?;
        if !self.allowed.iter().any(|&a| a) {
            crate::bail!(
                Status::Unsupported,
                "grammar: no token of the vocabulary can continue the reply here"
            );
        }
        self.masked.clear();
        self.masked.try_reserve(logits.len()).map_err(oom)?;
        self.masked.extend(
            logits
                .iter()
                .zip(&self.allowed)
                .map(|(&l, &ok)| if ok { l } else { f32::NEG_INFINITY }),
        );
        let id = sampler.sample(&self.masked, history)?;
        if !self.allowed.get(id as usize).copied().unwrap_or(false) {
            // Every allowed logit was -inf or NaN: take the first allowed token.
            return self
                .allowed
                .iter()
                .position(|&a| a)
                .map(|i| i as u32)
                .ok_or_else(|| crate::err!(Status::Unsupported, "grammar: no token allowed"));
        }
        Ok(id)
    }
}
