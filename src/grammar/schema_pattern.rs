//! A JSON schema `pattern` (a regular expression) -> a GBNF expression for the string's
//! contents, as they appear between the quotes of a JSON string.
//!
//! Covered: `^...$` anchoring (required, as in llama.cpp: an unanchored pattern would allow any
//! text around it), literals, `.`, classes (`[a-z]`, `[^...]`, `\d \w \s \D \W \S`, escapes),
//! groups (`( )`, `(?: )`), `|`, `* + ? {m} {m,} {m,n}` (a lazy `?` after them is ignored).
//! Characters that JSON must escape are written escaped; `.` and negated classes never produce
//! a quote, a backslash or a control character (a subset of what the regex allows, but every
//! string generated matches it). Backreferences, lookarounds, and anchors inside the pattern
//! are UNSUPPORTED errors.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::bail;
use crate::error::{Result, Status};

const MAX_DEPTH: u32 = 32;

/// What a negated class or `.` must never produce inside a JSON string.
const JSON_UNSAFE: &str = r#""\\\x00-\x1F\x7F"#;

pub fn to_gbnf(pattern: &str) -> Result<String> {
    let Some(inner) = pattern.strip_prefix('^').and_then(|p| p.strip_suffix('$')) else {
        bail!(
            Status::Unsupported,
            "a pattern must start with '^' and end with '$'"
        );
    };
    let chars: Vec<char> = inner.chars().collect();
    let mut p = Pattern { chars, pos: 0 };
    let out = p.alternatives(0)?;
    if p.pos < p.chars.len() {
        bail!(
            Status::BadFormat,
            "unexpected '{}' at character {}",
            p.chars[p.pos],
            p.pos + 1
        );
    }
    Ok(out)
}

struct Pattern {
    chars: Vec<char>,
    pos: usize,
}

/// `c` as it is written inside a JSON string, as a GBNF literal.
fn literal(c: char) -> String {
    let mut json = Vec::new();
    let mut buf = [0u8; 4];
    crate::json::write_string(&mut json, c.encode_utf8(&mut buf));
    // Drop the quotes write_string adds.
    let inner = String::from_utf8_lossy(&json[1..json.len() - 1]).into_owned();
    let mut s = String::from("\"");
    for ch in inner.chars() {
        match ch {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            ch => s.push(ch),
        }
    }
    s.push('"');
    s
}

/// One class member as GBNF (hex escapes for anything but letters and digits).
pub(super) fn member(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        format!("{c}")
    } else if (c as u32) < 0x10000 {
        format!("\\u{:04X}", c as u32)
    } else {
        format!("\\U{:08X}", c as u32)
    }
}

/// A class's members: single characters and ranges.
type Members = Vec<(char, char)>;

fn class_gbnf(members: &Members, negated: bool) -> String {
    let mut safe = String::new();
    let mut quote = false;
    let mut backslash = false;
    for &(a, b) in members {
        if negated {
            safe.push_str(&member(a));
            if b != a {
                safe.push('-');
                safe.push_str(&member(b));
            }
            continue;
        }
        // Split off what JSON must escape; those come as escaped literals instead.
        let mut lo = a;
        while lo <= b {
            let c = lo;
            if c == '"' {
                quote = true;
            } else if c == '\\' {
                backslash = true;
            } else if (c as u32) >= 0x20 && c as u32 != 0x7F {
                // A run of safe characters up to b or the next unsafe one.
                let mut hi = c;
                while hi < b {
                    let n = char::from_u32(hi as u32 + 1).unwrap_or(hi);
                    if n == hi || n == '"' || n == '\\' || n as u32 == 0x7F {
                        break;
                    }
                    hi = n;
                }
                safe.push_str(&member(c));
                if hi != c {
                    safe.push('-');
                    safe.push_str(&member(hi));
                }
                lo = hi;
            }
            match char::from_u32(lo as u32 + 1) {
                Some(n) if lo < b => lo = n,
                _ => break,
            }
        }
    }
    if negated {
        return format!("[^{safe}{JSON_UNSAFE}]");
    }
    let mut alts = Vec::new();
    if !safe.is_empty() {
        alts.push(format!("[{safe}]"));
    }
    if quote {
        alts.push(literal('"'));
    }
    if backslash {
        alts.push(literal('\\'));
    }
    if alts.is_empty() {
        // Only control characters: JSON writes them as \u00XX; not worth it.
        return "[^\\x00-\\U0010FFFF]".into();
    }
    if alts.len() == 1 {
        alts.remove(0)
    } else {
        format!("({})", alts.join(" | "))
    }
}

impl Pattern {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn alternatives(&mut self, depth: u32) -> Result<String> {
        if depth > MAX_DEPTH {
            bail!(Status::Unsupported, "groups nested too deeply");
        }
        let mut alts = Vec::from([self.sequence(depth)?]);
        while self.peek() == Some('|') {
            self.pos += 1;
            alts.push(self.sequence(depth)?);
        }
        Ok(alts.join(" | "))
    }

    fn sequence(&mut self, depth: u32) -> Result<String> {
        let mut items: Vec<String> = Vec::new();
        while let Some(c) = self.peek() {
            let at = self.pos + 1;
            let atom = match c {
                '|' | ')' => break,
                '(' => {
                    self.pos += 1;
                    if self.peek() == Some('?') {
                        if self.chars.get(self.pos + 1) == Some(&':') {
                            self.pos += 2;
                        } else {
                            bail!(
                                Status::Unsupported,
                                "lookarounds and named groups (at character {at})"
                            );
                        }
                    }
                    let inner = self.alternatives(depth + 1)?;
                    if self.peek() != Some(')') {
                        bail!(Status::BadFormat, "unclosed group at character {at}");
                    }
                    self.pos += 1;
                    format!("({inner})")
                }
                '[' => {
                    self.pos += 1;
                    self.class()?
                }
                '.' => {
                    self.pos += 1;
                    format!("[^{JSON_UNSAFE}]")
                }
                '^' | '$' => bail!(
                    Status::Unsupported,
                    "anchors inside the pattern (at character {at})"
                ),
                '*' | '+' | '?' | '{' => {
                    bail!(Status::BadFormat, "nothing to repeat at character {at}")
                }
                '\\' => {
                    self.pos += 1;
                    match self.escape(false)? {
                        Esc::Char(c) => literal(c),
                        Esc::Class(m, neg) => class_gbnf(&m, neg),
                    }
                }
                c => {
                    self.pos += 1;
                    literal(c)
                }
            };
            let atom = self.quantifier(atom)?;
            items.push(atom);
        }
        Ok(if items.is_empty() {
            "\"\"".into()
        } else {
            items.join(" ")
        })
    }

    fn quantifier(&mut self, atom: String) -> Result<String> {
        let q = match self.peek() {
            Some(c @ ('*' | '+' | '?')) => {
                self.pos += 1;
                format!("({atom}){c}")
            }
            Some('{') => {
                let start = self.pos;
                self.pos += 1;
                let min = self.number();
                let (min, max) = match (min, self.peek()) {
                    (Some(m), Some('}')) => (m, Some(m)),
                    (Some(m), Some(',')) => {
                        self.pos += 1;
                        (m, self.number())
                    }
                    _ => {
                        // A literal '{', as most regex engines read it.
                        self.pos = start + 1;
                        return Ok(format!("{atom} {}", literal('{')));
                    }
                };
                if self.peek() != Some('}') {
                    bail!(
                        Status::BadFormat,
                        "bad repetition at character {}",
                        start + 1
                    );
                }
                self.pos += 1;
                if min > super::MAX_REPETITION || max.is_some_and(|m| m > super::MAX_REPETITION) {
                    bail!(
                        Status::Unsupported,
                        "repetition count above {}",
                        super::MAX_REPETITION
                    );
                }
                match max {
                    Some(m) if m == min => format!("({atom}){{{m}}}"),
                    Some(m) if m < min => bail!(Status::BadFormat, "repetition with max < min"),
                    Some(m) => format!("({atom}){{{min},{m}}}"),
                    None => format!("({atom}){{{min},}}"),
                }
            }
            _ => return Ok(atom),
        };
        // Lazy and possessive markers change nothing here.
        if matches!(self.peek(), Some('?' | '+')) {
            self.pos += 1;
        }
        Ok(q)
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.pos;
        let mut v: u32 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            v = v.saturating_mul(10).saturating_add(d);
            self.pos += 1;
        }
        (self.pos > start).then_some(v)
    }

    /// After a backslash.
    fn escape(&mut self, in_class: bool) -> Result<Esc> {
        let at = self.pos;
        let Some(c) = self.peek() else {
            bail!(Status::BadFormat, "pattern ends after '\\'");
        };
        self.pos += 1;
        let digit: Members = Vec::from([('0', '9')]);
        let word: Members = Vec::from([('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_')]);
        let space: Members = Vec::from([(' ', ' '), ('\t', '\t'), ('\n', '\n'), ('\r', '\r')]);
        Ok(match c {
            'd' => Esc::Class(digit, false),
            'D' => Esc::Class(digit, true),
            'w' => Esc::Class(word, false),
            'W' => Esc::Class(word, true),
            's' => Esc::Class(space, false),
            'S' => Esc::Class(space, true),
            'n' => Esc::Char('\n'),
            'r' => Esc::Char('\r'),
            't' => Esc::Char('\t'),
            'f' => Esc::Char('\u{c}'),
            'v' => Esc::Char('\u{b}'),
            '0' => Esc::Char('\0'),
            'b' if in_class => Esc::Char('\u{8}'),
            'x' | 'u' => {
                let n = if c == 'x' { 2 } else { 4 };
                let mut v = 0u32;
                for _ in 0..n {
                    let Some(d) = self.peek().and_then(|c| c.to_digit(16)) else {
                        bail!(Status::BadFormat, "bad \\{c} escape at character {at}");
                    };
                    v = v << 4 | d;
                    self.pos += 1;
                }
                Esc::Char(char::from_u32(v).unwrap_or('\u{FFFD}'))
            }
            '1'..='9' => bail!(Status::Unsupported, "backreferences (at character {at})"),
            'b' | 'B' | 'A' | 'z' | 'Z' => {
                bail!(
                    Status::Unsupported,
                    "word boundaries and anchors (at character {at})"
                )
            }
            c if c.is_ascii_alphanumeric() => {
                bail!(Status::Unsupported, "escape '\\{c}' (at character {at})")
            }
            c => Esc::Char(c),
        })
    }

    /// After '['.
    fn class(&mut self) -> Result<String> {
        let at = self.pos;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut members: Members = Vec::new();
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                bail!(Status::BadFormat, "unclosed class at character {at}");
            };
            if c == ']' && !first {
                self.pos += 1;
                break;
            }
            first = false;
            self.pos += 1;
            let lo = if c == '\\' {
                match self.escape(true)? {
                    Esc::Char(c) => c,
                    Esc::Class(m, false) => {
                        members.extend(m);
                        continue;
                    }
                    Esc::Class(..) => {
                        bail!(Status::Unsupported, "negated escapes inside a class")
                    }
                }
            } else {
                c
            };
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|&n| n != ']') {
                self.pos += 1;
                let h = self.peek().unwrap_or(lo);
                self.pos += 1;
                let hi = if h == '\\' {
                    match self.escape(true)? {
                        Esc::Char(c) => c,
                        Esc::Class(..) => bail!(Status::BadFormat, "bad range in a class"),
                    }
                } else {
                    h
                };
                if hi < lo {
                    bail!(Status::BadFormat, "range out of order in a class");
                }
                members.push((lo, hi));
            } else {
                members.push((lo, lo));
            }
        }
        Ok(class_gbnf(&members, negated))
    }
}

enum Esc {
    Char(char),
    Class(Members, bool),
}
