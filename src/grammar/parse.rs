//! GBNF text -> [`Grammar`]. A recursive-descent parser over the bytes of the text:
//!
//! ```text
//! grammar     = space* (rule (newline space*)*)*
//! rule        = name "::=" alternatives
//! alternatives= sequence ("|" sequence)*          newlines allowed after "|" and inside ( )
//! sequence    = (item repetition?)*
//! item        = "\"" char* "\"" | "[" "^"? (char ("-" char)?)+ "]" | name | "(" alternatives ")" | "."
//! repetition  = "*" | "+" | "?" | "{" m "}" | "{" m ",}" | "{" m "," n "}"
//! char        = any UTF-8 character but the delimiter, or \n \r \t \\ \" \[ \] \- \^ \/ \'
//!               \xHH \uHHHH \UHHHHHHHH
//! ```
//! Groups become helper rules; repetitions are unrolled (`x{2,4}` = `x x x? ...` as nested
//! optional helper rules, `x*` a right-recursive helper), so the matcher sees only sequences,
//! alternatives, references and classes. After parsing: every referenced rule must be defined,
//! `root` must exist, and no rule may be left-recursive (the matcher could not expand it).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::{
    Elem, Grammar, MAX_ELEMENTS, MAX_GRAMMAR_BYTES, MAX_NESTING, MAX_REPETITION, MAX_RULES,
};
use crate::err;
use crate::error::{Error, Result, Status};

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    by_name: BTreeMap<String, u32>,
    names: Vec<String>,
    /// Each rule's elements once defined.
    rules: Vec<Option<Vec<Elem>>>,
    /// Where each rule was first mentioned (for "undefined rule").
    first_use: Vec<usize>,
    /// Elements of all rules so far (the cap).
    elements: usize,
}

pub fn parse(text: &str) -> Result<Grammar> {
    if text.len() > MAX_GRAMMAR_BYTES {
        return Err(err!(
            Status::BadFormat,
            "grammar: {} bytes exceed the cap of {MAX_GRAMMAR_BYTES}",
            text.len()
        ));
    }
    let mut p = Parser {
        src: text.as_bytes(),
        pos: 0,
        by_name: BTreeMap::new(),
        names: Vec::new(),
        rules: Vec::new(),
        first_use: Vec::new(),
        elements: 0,
    };
    p.grammar()?;
    p.finish()
}

impl Parser<'_> {
    fn fail(&self, at: usize, why: &str) -> Error {
        let before = &self.src[..at.min(self.src.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let col = at
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        err!(
            Status::BadFormat,
            "grammar: {why} at byte {at} (line {line}, column {col})"
        )
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    /// Spaces, tabs and `#` comments; newlines too when `newlines`.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' => self.pos += 1,
                b'#' => {
                    while self.peek().is_some_and(|b| b != b'\n' && b != b'\r') {
                        self.pos += 1;
                    }
                }
                b'\n' | b'\r' if newlines => self.pos += 1,
                _ => break,
            }
        }
    }

    fn is_name_byte(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
    }

    fn name(&mut self) -> Result<&str> {
        let start = self.pos;
        while self.peek().is_some_and(Parser::is_name_byte) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.fail(start, "expected a rule name"));
        }
        // Only ASCII name bytes were taken.
        core::str::from_utf8(&self.src[start..self.pos])
            .map_err(|_| self.fail(start, "bad rule name"))
    }

    /// The id of rule `name`, created on first mention.
    fn symbol(&mut self, name: &str, at: usize) -> Result<u32> {
        if let Some(&id) = self.by_name.get(name) {
            return Ok(id);
        }
        self.new_rule(name.to_string(), at)
    }

    fn new_rule(&mut self, name: String, at: usize) -> Result<u32> {
        if self.rules.len() >= MAX_RULES {
            return Err(self.fail(at, "too many rules"));
        }
        let id = self.rules.len() as u32;
        self.by_name.insert(name.clone(), id);
        self.names.push(name);
        self.rules.push(None);
        self.first_use.push(at);
        Ok(id)
    }

    /// A helper rule for a group or a repetition of rule `parent`.
    fn helper(&mut self, parent: u32, at: usize) -> Result<u32> {
        let name = format!("{}_{}", self.names[parent as usize], self.rules.len());
        self.new_rule(name, at)
    }

    fn define(&mut self, id: u32, elems: Vec<Elem>, at: usize) -> Result<()> {
        self.elements += elems.len();
        if self.elements > MAX_ELEMENTS {
            return Err(self.fail(at, "the grammar is too large once repetitions are expanded"));
        }
        self.rules[id as usize] = Some(elems);
        Ok(())
    }

    fn grammar(&mut self) -> Result<()> {
        self.skip_space(true);
        while self.pos < self.src.len() {
            let at = self.pos;
            let name = self.name()?.to_string();
            self.skip_space(false);
            if !self.src[self.pos..].starts_with(b"::=") {
                return Err(self.fail(self.pos, "expected '::='"));
            }
            self.pos += 3;
            self.skip_space(true);
            let id = self.symbol(&name, at)?;
            if self.rules[id as usize].is_some() {
                return Err(self.fail(at, &format!("rule '{name}' is defined twice")));
            }
            // Mark it defined before its body (a body may refer to it).
            self.rules[id as usize] = Some(Vec::new());
            let elems = self.alternatives(id, 0)?;
            self.define(id, elems, at)?;
            match self.peek() {
                None | Some(b'\n' | b'\r') => {}
                Some(b) => {
                    return Err(self.fail(
                        self.pos,
                        &format!("unexpected '{}'", char::from(b).escape_default()),
                    ));
                }
            }
            self.skip_space(true);
        }
        Ok(())
    }

    /// `sequence ("|" sequence)*` for rule `rule`, ending in `End`.
    fn alternatives(&mut self, rule: u32, depth: u32) -> Result<Vec<Elem>> {
        let mut out = Vec::new();
        self.sequence(rule, depth, &mut out)?;
        while self.peek() == Some(b'|') {
            self.pos += 1;
            out.push(Elem::Alt);
            self.skip_space(true);
            self.sequence(rule, depth, &mut out)?;
        }
        out.push(Elem::End);
        Ok(out)
    }

    fn sequence(&mut self, rule: u32, depth: u32, out: &mut Vec<Elem>) -> Result<()> {
        let nested = depth > 0;
        // Where the last item started (a repetition applies to it).
        let mut last: Option<usize> = None;
        while let Some(b) = self.peek() {
            let at = self.pos;
            match b {
                b'"' => {
                    last = Some(out.len());
                    self.pos += 1;
                    loop {
                        match self.peek() {
                            None => return Err(self.fail(at, "unterminated literal")),
                            Some(b'"') => break,
                            _ => {
                                let c = self.char()?;
                                out.push(Elem::Char(c));
                            }
                        }
                    }
                    self.pos += 1;
                }
                b'[' => {
                    last = Some(out.len());
                    self.pos += 1;
                    let negated = self.peek() == Some(b'^');
                    if negated {
                        self.pos += 1;
                    }
                    let first = out.len();
                    loop {
                        match self.peek() {
                            None => {
                                return Err(self.fail(at, "unterminated character class"));
                            }
                            Some(b']') if out.len() > first => break,
                            Some(b']') if negated => {
                                // `[^]`: anything.
                                out.push(Elem::Any);
                                break;
                            }
                            Some(b']') => {
                                return Err(self.fail(at, "empty character class"));
                            }
                            _ => {}
                        }
                        let c = self.char()?;
                        out.push(match (out.len() == first, negated) {
                            (true, true) => Elem::CharNot(c),
                            (true, false) => Elem::Char(c),
                            (false, _) => Elem::CharAlt(c),
                        });
                        if self.peek() == Some(b'-') && self.src.get(self.pos + 1) != Some(&b']') {
                            let dash = self.pos;
                            self.pos += 1;
                            let hi = self.char()?;
                            if hi < c {
                                return Err(self.fail(dash, "range out of order"));
                            }
                            out.push(Elem::RangeTo(hi));
                        }
                    }
                    self.pos += 1;
                }
                b'(' => {
                    last = Some(out.len());
                    if depth >= MAX_NESTING {
                        return Err(self.fail(at, "parentheses nested too deeply"));
                    }
                    self.pos += 1;
                    self.skip_space(true);
                    let sub = self.helper(rule, at)?;
                    let elems = self.alternatives(rule, depth + 1)?;
                    if self.peek() != Some(b')') {
                        return Err(self.fail(self.pos, "expected ')'"));
                    }
                    self.pos += 1;
                    self.define(sub, elems, at)?;
                    out.push(Elem::Ref(sub));
                }
                b'.' => {
                    last = Some(out.len());
                    self.pos += 1;
                    out.push(Elem::Any);
                }
                b'*' | b'+' | b'?' => {
                    self.pos += 1;
                    let (min, max) = match b {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(rule, at, last.take(), out, min, max)?;
                }
                b'{' => {
                    self.pos += 1;
                    self.skip_space(nested);
                    let min = self.count()?;
                    self.skip_space(nested);
                    let max = if self.peek() == Some(b',') {
                        self.pos += 1;
                        self.skip_space(nested);
                        if self.peek() == Some(b'}') {
                            None
                        } else {
                            Some(self.count()?)
                        }
                    } else {
                        Some(min)
                    };
                    self.skip_space(nested);
                    if self.peek() != Some(b'}') {
                        return Err(self.fail(self.pos, "expected '}'"));
                    }
                    self.pos += 1;
                    self.repeat(rule, at, last.take(), out, min, max)?;
                }
                b if Parser::is_name_byte(b) => {
                    last = Some(out.len());
                    let name = self.name()?.to_string();
                    let id = self.symbol(&name, at)?;
                    out.push(Elem::Ref(id));
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        Ok(())
    }

    fn count(&mut self) -> Result<u32> {
        let start = self.pos;
        let mut v: u32 = 0;
        while let Some(d) = self.peek().filter(u8::is_ascii_digit) {
            v = v.saturating_mul(10).saturating_add((d - b'0') as u32);
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.fail(start, "expected a number"));
        }
        if v > MAX_REPETITION {
            return Err(self.fail(
                start,
                &format!("repetition count {v} exceeds {MAX_REPETITION}"),
            ));
        }
        Ok(v)
    }

    /// Applies `{min,max}` to the item that starts at `last` in `out`.
    fn repeat(
        &mut self,
        rule: u32,
        at: usize,
        last: Option<usize>,
        out: &mut Vec<Elem>,
        min: u32,
        max: Option<u32>,
    ) -> Result<()> {
        let Some(last) = last else {
            return Err(self.fail(at, "a repetition needs an item before it"));
        };
        if max.is_some_and(|m| m < min) {
            return Err(self.fail(at, "repetition with max < min"));
        }
        let item = out.split_off(last);
        if item.is_empty() {
            return Ok(()); // `""*` is nothing
        }
        let copies = item.len().saturating_mul(min as usize);
        if self.elements.saturating_add(copies) > MAX_ELEMENTS {
            return Err(self.fail(at, "the grammar is too large once repetitions are expanded"));
        }
        for _ in 0..min {
            out.extend_from_slice(&item);
        }
        match max {
            Some(max) if max == min => {}
            None => {
                // rec ::= item rec |
                let rec = self.helper(rule, at)?;
                let mut body = item.clone();
                body.extend_from_slice(&[Elem::Ref(rec), Elem::Alt, Elem::End]);
                self.define(rec, body, at)?;
                out.push(Elem::Ref(rec));
            }
            Some(max) => {
                // opt_k ::= item opt_{k-1} | ; innermost first.
                let mut inner: Option<u32> = None;
                for _ in min..max {
                    let r = self.helper(rule, at)?;
                    let mut body = item.clone();
                    if let Some(i) = inner {
                        body.push(Elem::Ref(i));
                    }
                    body.extend_from_slice(&[Elem::Alt, Elem::End]);
                    self.define(r, body, at)?;
                    inner = Some(r);
                }
                if let Some(i) = inner {
                    out.push(Elem::Ref(i));
                }
            }
        }
        Ok(())
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<u32> {
        let at = self.pos;
        let Some(b) = self.peek() else {
            return Err(self.fail(at, "unexpected end of input"));
        };
        if b != b'\\' {
            let len = crate::unicode::utf8_len(b);
            let c = self
                .src
                .get(at..at + len)
                .and_then(|s| core::str::from_utf8(s).ok())
                .and_then(|s| s.chars().next())
                .ok_or_else(|| self.fail(at, "invalid UTF-8"))?;
            self.pos += len;
            return Ok(c as u32);
        }
        let Some(&e) = self.src.get(at + 1) else {
            return Err(self.fail(at, "unexpected end of input after '\\'"));
        };
        self.pos += 2;
        let digits = match e {
            b'x' => 2,
            b'u' => 4,
            b'U' => 8,
            _ => {
                return match e {
                    b'n' => Ok(10),
                    b'r' => Ok(13),
                    b't' => Ok(9),
                    b'\\' | b'"' | b'[' | b']' | b'-' | b'^' | b'/' | b'\'' | b'.' => Ok(e as u32),
                    _ => Err(self.fail(
                        at,
                        &format!("unknown escape '\\{}'", char::from(e).escape_default()),
                    )),
                };
            }
        };
        let mut v: u32 = 0;
        for _ in 0..digits {
            let d = self
                .peek()
                .and_then(|d| (d as char).to_digit(16))
                .ok_or_else(|| self.fail(self.pos, "expected a hex digit"))?;
            v = v << 4 | d;
            self.pos += 1;
        }
        if v > 0x10FFFF {
            return Err(self.fail(at, "code point above U+10FFFF"));
        }
        Ok(v)
    }

    fn finish(self) -> Result<Grammar> {
        let Some(&root) = self.by_name.get("root") else {
            return Err(self.fail(0, "the grammar has no 'root' rule"));
        };
        let mut elems = Vec::new();
        let mut rule_start = Vec::new();
        for (id, r) in self.rules.iter().enumerate() {
            let Some(r) = r else {
                let name = &self.names[id];
                return Err(self.fail(self.first_use[id], &format!("undefined rule '{name}'")));
            };
            rule_start.push(elems.len() as u32);
            elems
                .try_reserve(r.len())
                .map_err(|_| err!(Status::OutOfMemory, "grammar of {} elements", r.len()))?;
            elems.extend_from_slice(r);
        }
        let g = Grammar {
            elems,
            rule_start,
            names: self.names,
            root,
        };
        if let Some(r) = left_recursive(&g) {
            let name = &g.names[r as usize];
            let at = self.first_use[r as usize];
            let before = &self.src[..at.min(self.src.len())];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            return Err(err!(
                Status::BadFormat,
                "grammar: rule '{name}' is left-recursive (it can reach itself before any character), at byte {at} (line {line})"
            ));
        }
        Ok(g)
    }
}

/// A rule that can reach itself without consuming a character, if any.
fn left_recursive(g: &Grammar) -> Option<u32> {
    let n = g.rules();
    // Which rules can match the empty string (a fixed point).
    let mut nullable = vec![false; n];
    loop {
        let mut changed = false;
        for r in 0..n as u32 {
            if nullable[r as usize] {
                continue;
            }
            let empty_alt = g.alternatives(r).any(|start| {
                let mut p = start as usize;
                loop {
                    match g.elems[p] {
                        Elem::End | Elem::Alt => return true,
                        Elem::Ref(s) if nullable[s as usize] => p += 1,
                        _ => return false,
                    }
                }
            });
            if empty_alt {
                nullable[r as usize] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // Rules reachable at the left edge, then a depth-first search for a cycle (iterative:
    // grammars are hostile, the call stack is small).
    let mut edges: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (r, out) in edges.iter_mut().enumerate() {
        for start in g.alternatives(r as u32) {
            let mut p = start as usize;
            while let Elem::Ref(s) = g.elems[p] {
                out.push(s);
                if !nullable[s as usize] {
                    break;
                }
                p += 1;
            }
        }
    }
    // 0 unvisited, 1 on the path, 2 done.
    let mut color = vec![0u8; n];
    for start in 0..n {
        if color[start] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        color[start] = 1;
        while let Some(&mut (r, ref mut i)) = path.last_mut() {
            if let Some(&s) = edges[r].get(*i) {
                *i += 1;
                match color[s as usize] {
                    1 => return Some(s),
                    0 => {
                        color[s as usize] = 1;
                        path.push((s as usize, 0));
                    }
                    _ => {}
                }
            } else {
                color[r] = 2;
                path.pop();
            }
        }
    }
    None
}
