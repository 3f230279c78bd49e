//! Pre-tokenizers of byte-level BPE vocabularies: hand-written matchers for the split regexes
//! llama.cpp applies (`tokenizer.ggml.pre`), no regex engine.
//!
//! A fragment of text is decoded once into code points with a [`Class`] each; every stage
//! then cuts the current segments further, the way llama.cpp's `unicode_regex_split` does:
//! each match of a stage's pattern becomes a segment, and so does each run of text between
//! matches. Stages see one segment at a time, so nothing matches across a cut.
//!
//! | `tokenizer.ggml.pre`            | stages |
//! | ------------------------------- | ------ |
//! | `gpt-2` (and aliases)           | GPT-2 |
//! | `smollm`, `starcoder`, ...      | `\p{N}`; GPT-2 |
//! | `llama-bpe` (Llama 3), ...      | Llama 3 (digits in runs of up to 3) |
//! | `qwen2`, ...                    | Llama 3 with single digits |
//! | `qwen35`                        | Qwen2's, marks (`\p{M}`) counted as letters |
//! | `gpt-4o`, `llama4`, ...         | GPT-4o (letter runs cut at case changes) |
//! | `default`, missing              | `[\p{P}$+<=>^~|]+`; GPT-2; `\p{N}+`; `[0-9]{3}` |
//! | `deepseek-coder`                | `[\r\n]`; `\s?\p{L}+`; `\s?\p{P}+`; `[一-龥ࠀ-一가-퟿]+`; `\p{N}` |
//!
//! GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//! Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//! ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
//! GPT-4o: `[^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}|
//! ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`, where U is a letter other than `a-z`,
//! L a letter other than `A-Z` and C a contraction (any case), as llama.cpp rewrites
//! tiktoken's `\p{Lu}`/`\p{Ll}` classes: a non-ASCII letter is both upper and lower case.
//! Alternatives are tried in order at each position (first match wins), as a backtracking
//! engine does.
//!
//! Classes follow llama.cpp's tables: `\s` is Unicode White_Space (checked before the general
//! category), `\p{L}`/`\p{N}`/`\p{P}` are the general-category groups of llama.cpp's
//! Unicode version (`unicode::ASSIGNED_UNICODE_VERSION`; code points added later are
//! unassigned there); marks, symbols,
//! separators, controls, private use and unassigned code points are all "other" for these
//! patterns. The `qwen2`, `gpt-4o`, `default` and `deepseek-coder` patterns are not special-cased by
//! llama.cpp but run
//! through `std::regex` over a text in which each non-ASCII code point is collapsed to one
//! byte standing for its class; the matchers here reproduce that engine's result.

use alloc::vec::Vec;

use super::reserve;
use crate::error::Result;
use crate::unicode::{self, Group};

/// What a code point is, for the split patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// Unicode White_Space (`\s`).
    Space,
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\p{P}`.
    Punct,
    /// `\p{S}`.
    Symbol,
    /// `\p{M}`.
    Mark,
    /// Anything else: controls, format, private use, surrogates, unassigned.
    Other,
}

impl Class {
    /// Not whitespace, letter or number: what `[^\s\p{L}\p{N}]` matches.
    #[inline]
    fn is_other(self) -> bool {
        !matches!(self, Class::Space | Class::Letter | Class::Number)
    }
}

/// Classes of ASCII, from the general category of each character.
const ASCII_CLASS: [Class; 128] = {
    let mut t = [Class::Other; 128];
    let mut c = 0;
    while c < 128 {
        let b = c as u8;
        t[c] = match b {
            b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ' => Class::Space,
            b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
            b'0'..=b'9' => Class::Number,
            b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~' => Class::Symbol,
            0x21..=0x7E => Class::Punct,
            _ => Class::Other,
        };
        c += 1;
    }
    t
};

/// The class of a code point.
#[inline]
pub fn class_of(cp: u32) -> Class {
    if cp < 128 {
        return ASCII_CLASS[cp as usize];
    }
    if unicode::is_white_space(cp) {
        return Class::Space;
    }
    match unicode::group(cp) {
        Group::Letter => Class::Letter,
        Group::Number => Class::Number,
        Group::Punctuation => Class::Punct,
        Group::Symbol => Class::Symbol,
        Group::Mark => Class::Mark,
        Group::Separator | Group::Other => Class::Other,
    }
}

/// One code point of the fragment being split.
#[derive(Clone, Copy, Debug)]
pub struct Cp {
    pub cp: u32,
    pub class: Class,
    /// Byte offset of the code point in the fragment.
    pub at: u32,
}

/// The split patterns, chosen by `tokenizer.ggml.pre`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2's pattern alone.
    Gpt2,
    /// Every digit alone, then GPT-2 (SmolLM, StarCoder).
    Smollm,
    /// Llama 3's pattern, digits in runs of up to 3.
    Llama3,
    /// Llama 3's pattern with single digits (Qwen2).
    Qwen2,
    /// Qwen2's, with `[\p{L}\p{M}]+` for letter runs and `[^\s\p{L}\p{M}\p{N}]` for the rest
    /// (Qwen 3.5): a mark is a letter for every alternative, so a mark reads as one.
    Qwen35,
    /// GPT-4o's pattern (Phi-4-mini, Llama 4): letter runs cut where lower case turns upper.
    Gpt4o,
    /// llama.cpp's fallback: punctuation runs, GPT-2, number runs, ASCII digit triples.
    Default,
    /// DeepSeek Coder: line breaks, letter runs and punctuation runs (each with one white space
    /// before it), runs of CJK and Hangul, then each number alone.
    DeepseekCoder,
}

impl PreTokenizer {
    /// The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` name, and whether that
    /// name also turns on `ignore_merges` and `add_bos` (Llama 3 family). `None` for names
    /// whose patterns are not implemented here.
    pub fn from_name(name: &str) -> Option<(PreTokenizer, bool)> {
        Some(match name {
            "default" => (PreTokenizer::Default, false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais"
            | "trillion" | "granite-docling" | "exaone4" | "jina-v1-en" | "jina-v2-code"
            | "roberta-bpe" => (PreTokenizer::Gpt2, false),
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva-7b" | "mellum2" => (PreTokenizer::Smollm, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => (PreTokenizer::Llama3, true),
            "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => (PreTokenizer::Llama3, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "megrez"
            | "hunyuan" | "solar-open" => (PreTokenizer::Qwen2, false),
            "qwen35" => (PreTokenizer::Qwen35, false),
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
                (PreTokenizer::Gpt4o, false)
            }
            "deepseek-coder" => (PreTokenizer::DeepseekCoder, false),
            _ => return None,
        })
    }
}

/// Reusable buffers for splitting (kept across fragments of one `encode` call).
#[derive(Default)]
pub struct Splitter {
    pub cps: Vec<Cp>,
    /// Current segments as code point ranges `[start, end)`.
    segs: Vec<(u32, u32)>,
    next: Vec<(u32, u32)>,
}

impl Splitter {
    /// Splits `text` into words and calls `word(start_byte, end_byte)` for each, in order.
    pub fn split(
        &mut self,
        pre: PreTokenizer,
        text: &str,
        mut word: impl FnMut(usize, usize) -> Result<()>,
    ) -> Result<()> {
        self.cps.clear();
        // At most one code point, and one segment per stage, per byte.
        reserve(&mut self.cps, text.len(), "code points")?;
        self.segs.clear();
        self.next.clear();
        reserve(&mut self.segs, text.len(), "word boundaries")?;
        reserve(&mut self.next, text.len(), "word boundaries")?;
        for (at, ch) in text.char_indices() {
            let cp = ch as u32;
            let class = match (pre, class_of(cp)) {
                (PreTokenizer::Qwen35, Class::Mark) => Class::Letter,
                (_, class) => class,
            };
            self.cps.push(Cp {
                cp,
                class,
                at: at as u32,
            });
        }
        let n = self.cps.len() as u32;
        if n == 0 {
            return Ok(());
        }
        self.segs.push((0, n));
        match pre {
            PreTokenizer::Gpt2 => self.stage(gpt2),
            PreTokenizer::Smollm => {
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, each_number));
                self.stage(gpt2);
            }
            PreTokenizer::Llama3 => self.stage(|c, s, e, o| llama3(c, s, e, 3, o)),
            PreTokenizer::Qwen2 | PreTokenizer::Qwen35 => {
                self.stage(|c, s, e, o| llama3(c, s, e, 1, o))
            }
            PreTokenizer::Gpt4o => self.stage(gpt4o),
            PreTokenizer::Default => {
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, punct_run));
                self.stage(gpt2);
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, number_run));
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, ascii_digit_triple));
            }
            PreTokenizer::DeepseekCoder => {
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, line_break));
                let letters = |seg: &Seg, pos| space_then_run(seg, pos, Class::Letter);
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, letters));
                let puncts = |seg: &Seg, pos| space_then_run(seg, pos, Class::Punct);
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, puncts));
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, cjk_run));
                self.stage(|c, s, e, o| matches_and_gaps(c, s, e, o, each_number));
            }
        }
        for &(s, e) in &self.segs {
            let a = self.cps[s as usize].at as usize;
            let b = match self.cps.get(e as usize) {
                Some(c) => c.at as usize,
                None => text.len(),
            };
            word(a, b)?;
        }
        Ok(())
    }

    /// Runs one stage over every current segment.
    fn stage(&mut self, f: impl Fn(&[Cp], usize, usize, &mut Vec<(u32, u32)>)) {
        self.next.clear();
        for &(s, e) in &self.segs {
            f(&self.cps, s as usize, e as usize, &mut self.next);
        }
        core::mem::swap(&mut self.segs, &mut self.next);
    }
}

/// Emits segments that end at given positions, each starting where the previous ended.
struct Cuts<'o> {
    out: &'o mut Vec<(u32, u32)>,
    prev: usize,
}

impl Cuts<'_> {
    #[inline]
    fn cut(&mut self, end: usize) {
        if end > self.prev {
            self.out.push((self.prev as u32, end as u32));
        }
        self.prev = end;
    }
}

/// A segment-bounded view: classes and code points past `end` read as "nothing".
struct Seg<'c> {
    cps: &'c [Cp],
    end: usize,
}

impl Seg<'_> {
    /// The code point at `i`, if `i` is inside the segment.
    #[inline]
    fn at(&self, i: usize) -> Option<&Cp> {
        if i < self.end { self.cps.get(i) } else { None }
    }
    #[inline]
    fn class(&self, i: usize) -> Option<Class> {
        self.at(i).map(|c| c.class)
    }
    #[inline]
    fn cp(&self, i: usize) -> Option<u32> {
        self.at(i).map(|c| c.cp)
    }
    #[inline]
    fn is(&self, i: usize, class: Class) -> bool {
        self.class(i) == Some(class)
    }
    /// `[^\s\p{L}\p{N}]` at `i`.
    #[inline]
    fn is_other(&self, i: usize) -> bool {
        matches!(self.class(i), Some(c) if c.is_other())
    }
}

/// `'s|'t|'re|'ve|'m|'ll|'d` at `pos` (optionally case-insensitive): the length matched.
#[inline]
fn contraction(seg: &Seg, pos: usize, any_case: bool) -> Option<usize> {
    if seg.cp(pos) != Some('\'' as u32) {
        return None;
    }
    let low = |c: Option<u32>| match c {
        Some(c) if any_case => Some(unicode_ascii_lower(c)),
        c => c,
    };
    let a = low(seg.cp(pos + 1))?;
    if matches!(char::from_u32(a), Some('s' | 't' | 'm' | 'd')) {
        return Some(2);
    }
    let b = low(seg.cp(pos + 2))?;
    match (char::from_u32(a), char::from_u32(b)) {
        (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => Some(3),
        _ => None,
    }
}

/// Lowercase for the contraction letters. llama.cpp lowercases with full Unicode tables, but
/// no non-ASCII code point lowercases to one of `s t m d r e v l`, so ASCII is enough.
#[inline]
fn unicode_ascii_lower(c: u32) -> u32 {
    if (b'A' as u32..=b'Z' as u32).contains(&c) {
        c + 32
    } else {
        c
    }
}

/// GPT-2's pattern over `cps[start..end]`. (`gpt2` and `llama3` open the same way on purpose:
/// each is one regex written out as a loop, and they part at the first alternative.)
fn gpt2(cps: &[Cp], start: usize, end: usize, out: &mut Vec<(u32, u32)>) {
    let seg = Seg { cps, end };
    let mut cuts = Cuts { out, prev: start };
    let mut pos = start;
    while pos < end {
        if let Some(n) = contraction(&seg, pos, false) {
            pos += n;
            cuts.cut(pos);
            continue;
        }
        let space = cps[pos].cp == ' ' as u32;
        // ` ?X+`: with a leading space, X is judged from the next code point.
        let lead = if space { pos + 1 } else { pos };
        match seg.class(lead) {
            Some(Class::Letter) => {
                pos = lead;
                while seg.is(pos, Class::Letter) {
                    pos += 1;
                }
                cuts.cut(pos);
                continue;
            }
            Some(Class::Number) => {
                pos = lead;
                while seg.is(pos, Class::Number) {
                    pos += 1;
                }
                cuts.cut(pos);
                continue;
            }
            Some(c) if c.is_other() => {
                pos = lead;
                while seg.is_other(pos) {
                    pos += 1;
                }
                cuts.cut(pos);
                continue;
            }
            _ => {}
        }
        let mut n = 0;
        while seg.is(pos + n, Class::Space) {
            n += 1;
        }
        if n > 1 && pos + n < end {
            // `\s+(?!\S)`: leave the last space to lead the next word.
            pos += n - 1;
        } else if n > 0 {
            pos += n;
        } else {
            pos += 1;
        }
        cuts.cut(pos);
    }
}

/// Llama 3's pattern over `cps[start..end]`, digits in runs of up to `max_digits`. (It opens
/// as [`gpt2`] does, on purpose: one regex each, written out as a loop.)
fn llama3(cps: &[Cp], start: usize, end: usize, max_digits: usize, out: &mut Vec<(u32, u32)>) {
    let seg = Seg { cps, end };
    let mut cuts = Cuts { out, prev: start };
    let mut pos = start;
    while pos < end {
        if let Some(n) = contraction(&seg, pos, true) {
            pos += n;
            cuts.cut(pos);
            continue;
        }
        let c = cps[pos];
        let newline = c.cp == '\r' as u32 || c.cp == '\n' as u32;
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if !newline
            && c.class != Class::Number
            && (c.class == Class::Letter || seg.is(pos + 1, Class::Letter))
        {
            pos += 1;
            while seg.is(pos, Class::Letter) {
                pos += 1;
            }
            cuts.cut(pos);
            continue;
        }
        // `\p{N}{1,max}`
        if c.class == Class::Number {
            let mut run = 0;
            while seg.is(pos, Class::Number) {
                pos += 1;
                run += 1;
                if run == max_digits {
                    cuts.cut(pos);
                    run = 0;
                }
            }
            cuts.cut(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        if let Some(e) = punct_then(&seg, pos, b"\r\n") {
            pos = e;
            cuts.cut(pos);
            continue;
        }
        // `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`
        pos = spaces(&seg, pos);
        cuts.cut(pos);
    }
}

/// GPT-4o's pattern over `cps[start..end]` (it shares Llama 3's digits and white space, and
/// adds `/` to the line breaks that may follow punctuation).
fn gpt4o(cps: &[Cp], start: usize, end: usize, out: &mut Vec<(u32, u32)>) {
    let seg = Seg { cps, end };
    let mut cuts = Cuts { out, prev: start };
    let ascii = |i: usize, range: core::ops::RangeInclusive<u8>| {
        seg.cp(i)
            .is_some_and(|c| range.contains(&(c as u8)) && c < 128)
    };
    let mut pos = start;
    while pos < end {
        let c = cps[pos];
        let newline = c.cp == '\r' as u32 || c.cp == '\n' as u32;
        // `[^\r\n\p{L}\p{N}]?` before the letters of either letter alternative
        let letters = if c.class == Class::Letter {
            Some(pos)
        } else if !newline && c.class != Class::Number && seg.is(pos + 1, Class::Letter) {
            Some(pos + 1)
        } else {
            None
        };
        if let Some(first) = letters {
            // `U*`, greedy; where it stops decides the rest
            let mut e = first;
            let mut last_wide = None;
            while seg.is(e, Class::Letter) && !ascii(e, b'a'..=b'z') {
                if cps[e].cp >= 128 {
                    last_wide = Some(e);
                }
                e += 1;
            }
            pos = if ascii(e, b'a'..=b'z') {
                // `U*L+`: the lower-case run after it
                while seg.is(e, Class::Letter) && !ascii(e, b'A'..=b'Z') {
                    e += 1;
                }
                e
            } else if let Some(w) = last_wide {
                // `U*L+` backtracks `U*` to its last letter that is also lower case
                w + 1
            } else {
                // `U+L*`: upper case alone
                e
            };
            pos += contraction(&seg, pos, true).unwrap_or(0);
            cuts.cut(pos);
            continue;
        }
        // `\p{N}{1,3}`
        if c.class == Class::Number {
            let mut run = 0;
            while seg.is(pos, Class::Number) && run < 3 {
                pos += 1;
                run += 1;
            }
            cuts.cut(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        if let Some(e) = punct_then(&seg, pos, b"\r\n/") {
            pos = e;
            cuts.cut(pos);
            continue;
        }
        // `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`
        pos = spaces(&seg, pos);
        cuts.cut(pos);
    }
}

/// ` ?[^\s\p{L}\p{N}]+[after]*` at `pos`, `after` a set of ASCII characters: where it ends.
#[inline]
fn punct_then(seg: &Seg, pos: usize, after: &[u8]) -> Option<usize> {
    let mut e = if seg.cp(pos) == Some(' ' as u32) {
        pos + 1
    } else {
        pos
    };
    if !seg.is_other(e) {
        return None;
    }
    while seg.is_other(e) {
        e += 1;
    }
    while seg
        .cp(e)
        .is_some_and(|c| after.iter().any(|&a| a as u32 == c))
    {
        e += 1;
    }
    Some(e)
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+` at `pos` (or the one code point there, if none matches):
/// where the match ends.
#[inline]
fn spaces(seg: &Seg, pos: usize) -> usize {
    let mut n = 0;
    let mut after_last_newline = None;
    while seg.is(pos + n, Class::Space) {
        if matches!(seg.cp(pos + n), Some(0x0A | 0x0D)) {
            after_last_newline = Some(pos + n + 1);
        }
        n += 1;
    }
    if let Some(e) = after_last_newline {
        e
    } else if n > 1 && pos + n < seg.end {
        pos + n - 1
    } else {
        pos + n.max(1)
    }
}

/// A pattern that either matches at `pos` (returning the end) or not: a regex searched
/// leftmost-first, matches and the gaps between them both becoming segments. Always inlined,
/// so that each `matcher` is inlined into its own loop (it runs once per code point).
#[inline(always)]
fn matches_and_gaps(
    cps: &[Cp],
    start: usize,
    end: usize,
    out: &mut Vec<(u32, u32)>,
    matcher: impl Fn(&Seg, usize) -> Option<usize>,
) {
    let seg = Seg { cps, end };
    let mut cuts = Cuts { out, prev: start };
    let mut pos = start;
    while pos < end {
        match matcher(&seg, pos) {
            Some(e) => {
                cuts.cut(pos);
                cuts.cut(e);
                pos = e;
            }
            None => pos += 1,
        }
    }
    cuts.cut(end);
}

/// `\p{N}`: one number.
#[inline]
fn each_number(seg: &Seg, pos: usize) -> Option<usize> {
    seg.is(pos, Class::Number).then_some(pos + 1)
}

/// `\p{N}+`.
#[inline]
fn number_run(seg: &Seg, pos: usize) -> Option<usize> {
    let mut e = pos;
    while seg.is(e, Class::Number) {
        e += 1;
    }
    (e > pos).then_some(e)
}

/// `[\p{P}\$\+<=>\^~\|]+` as llama.cpp's collapsed regex sees it: ASCII punctuation and
/// symbols except the backtick, and non-ASCII punctuation.
#[inline]
fn punct_run(seg: &Seg, pos: usize) -> Option<usize> {
    let is = |i: usize| match seg.cp(i) {
        Some(c) if c < 128 => {
            (0x21..=0x7E).contains(&c) && !(c as u8).is_ascii_alphanumeric() && c != '`' as u32
        }
        Some(_) => seg.is(i, Class::Punct),
        None => false,
    };
    let mut e = pos;
    while is(e) {
        e += 1;
    }
    (e > pos).then_some(e)
}

/// `[\r\n]`.
#[inline]
fn line_break(seg: &Seg, pos: usize) -> Option<usize> {
    matches!(seg.cp(pos), Some(0x0A | 0x0D)).then_some(pos + 1)
}

/// `\s?X+` for the class X (`\p{L}` or `\p{P}`): a white space joins the run after it.
#[inline]
fn space_then_run(seg: &Seg, pos: usize, class: Class) -> Option<usize> {
    let first = if seg.is(pos, Class::Space) && seg.is(pos + 1, class) {
        pos + 1
    } else {
        pos
    };
    let mut e = first;
    while seg.is(e, class) {
        e += 1;
    }
    (e > first).then_some(e)
}

/// `[一-龥ࠀ-一가-퟿]+` (U+0800..U+9FA5 and U+AC00..U+D7FF) as llama.cpp's `std::wregex` sees
/// it: non-ASCII white space is replaced by U+000B first, so U+3000 and its kin never match.
#[inline]
fn cjk_run(seg: &Seg, pos: usize) -> Option<usize> {
    let is = |i: usize| {
        seg.at(i).is_some_and(|c| {
            (matches!(c.cp, 0x0800..=0x9FA5) || matches!(c.cp, 0xAC00..=0xD7FF))
                && c.class != Class::Space
        })
    };
    let mut e = pos;
    while is(e) {
        e += 1;
    }
    (e > pos).then_some(e)
}

/// `[0-9][0-9][0-9]`.
#[inline]
fn ascii_digit_triple(seg: &Seg, pos: usize) -> Option<usize> {
    let d = |i: usize| matches!(seg.cp(i), Some(c) if (b'0' as u32..=b'9' as u32).contains(&c));
    (d(pos) && d(pos + 1) && d(pos + 2)).then_some(pos + 3)
}
