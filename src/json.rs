//! JSON (RFC 8259): a small pull reader for hostile input (`tokenizer.json`, `config.json`,
//! safetensors headers), and [`ObjectWriter`] for what the module reports (`model_info`,
//! `chat_stats`).
//!
//! The caller walks the document in order (`begin_object` / `next_key`, `begin_array` /
//! `next_item`, `read_*`, `skip_value`); nothing is built that the caller does not ask for, so
//! a 30,000-entry vocabulary costs no tree. Strings are returned as [`Str`]: the raw bytes
//! between the quotes, already validated (UTF-8, escapes, surrogate pairs), borrowed from the
//! input; they are unescaped only on request ([`Str::as_str`] is free when there was no escape).
//!
//! Bounds: input length ([`MAX_INPUT`]), nesting depth ([`MAX_DEPTH`]), string length
//! ([`MAX_STRING`]), number length ([`MAX_NUMBER`]). Every error names what was expected and
//! the byte offset where it went wrong.

use crate::decimal::{Shortest, parse_f64};
use crate::error::{Result, Status};
use crate::unicode::utf8_len;
use crate::{bail, err};
use alloc::borrow::Cow;
use alloc::string::String;

/// Largest document accepted (tokenizer.json files of big vocabularies are tens of MB).
pub const MAX_INPUT: usize = 1 << 30;
/// Deepest nesting of arrays and objects.
pub const MAX_DEPTH: u32 = 128;
/// Longest number literal, in bytes.
pub const MAX_NUMBER: usize = 64;
/// Longest string, in bytes as written (escapes included).
pub const MAX_STRING: usize = 16 << 20;

/// What the next value is, from its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

/// A validated JSON string: the bytes between the quotes, escapes still in place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Str<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> Str<'a> {
    /// The text without escapes, borrowed when there were none.
    pub fn as_str(&self) -> Option<&'a str> {
        if self.escaped {
            None
        } else {
            core::str::from_utf8(self.raw).ok()
        }
    }

    /// Length in bytes as written (escapes included): an upper bound of the decoded length.
    pub fn raw_len(&self) -> usize {
        self.raw.len()
    }

    /// The unescaped text (allocates only when the string had escapes).
    pub fn to_cow(&self) -> Result<Cow<'a, str>> {
        if let Some(s) = self.as_str() {
            return Ok(Cow::Borrowed(s));
        }
        let mut s = String::new();
        self.decode_into(&mut s)?;
        Ok(Cow::Owned(s))
    }

    /// Appends the unescaped text to `out`.
    pub fn decode_into(&self, out: &mut String) -> Result<()> {
        out.try_reserve(self.raw.len()).map_err(|_| {
            err!(
                Status::OutOfMemory,
                "JSON string of {} bytes",
                self.raw.len()
            )
        })?;
        for ch in self.chars() {
            out.push(ch);
        }
        Ok(())
    }

    /// Unescaped characters, one by one (the string was validated when read).
    pub fn chars(&self) -> StrChars<'a> {
        StrChars {
            raw: self.raw,
            pos: 0,
        }
    }

    /// Compares with `s` without unescaping into memory.
    pub fn eq_str(&self, s: &str) -> bool {
        if !self.escaped {
            return self.raw == s.as_bytes();
        }
        self.chars().eq(s.chars())
    }
}

/// Iterator over the characters of a validated [`Str`].
pub struct StrChars<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl Iterator for StrChars<'_> {
    type Item = char;
    fn next(&mut self) -> Option<char> {
        let rest = self.raw.get(self.pos..)?;
        let &b = rest.first()?;
        if b != b'\\' {
            // Validated UTF-8: decode one scalar from the raw bytes.
            let len = utf8_len(b);
            let ch = core::str::from_utf8(rest.get(..len)?)
                .ok()?
                .chars()
                .next()?;
            self.pos += len;
            return Some(ch);
        }
        let e = *rest.get(1)?;
        self.pos += 2;
        let simple = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => {
                let hi = hex4(rest.get(2..6)?)?;
                self.pos += 4;
                if (0xD800..0xDC00).contains(&hi) {
                    let lo = hex4(rest.get(8..12)?)?;
                    self.pos += 6;
                    return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
                }
                return char::from_u32(hi);
            }
        };
        Some(simple)
    }
}

fn hex4(b: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in b.get(..4)? {
        v = v << 4 | (c as char).to_digit(16)?;
    }
    Some(v)
}

/// The pull reader: a position in the input and the current nesting depth.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: u32,
    /// Per open container (bit `depth - 1`): whether it has produced its first element.
    started: Bits,
    /// Per open container (bit `depth - 1`): whether it is an object (else an array).
    objects: Bits,
}

/// One bit per nesting level.
#[derive(Clone, Copy)]
struct Bits([u64; (MAX_DEPTH as usize).div_ceil(64)]);

impl Bits {
    fn get(&self, depth: u32) -> bool {
        let i = depth.wrapping_sub(1) as usize;
        self.0.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    fn set(&mut self, depth: u32, on: bool) {
        let i = depth.wrapping_sub(1) as usize;
        if let Some(w) = self.0.get_mut(i / 64) {
            *w = (*w & !(1 << (i % 64))) | (on as u64) << (i % 64);
        }
    }
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<Reader<'a>> {
        if bytes.len() > MAX_INPUT {
            bail!(
                Status::BadFormat,
                "JSON of {} bytes exceeds the cap of {MAX_INPUT}",
                bytes.len()
            );
        }
        // A UTF-8 byte order mark is tolerated, as many writers emit one.
        let pos = if bytes.starts_with(b"\xEF\xBB\xBF") {
            3
        } else {
            0
        };
        Ok(Reader {
            bytes,
            pos,
            depth: 0,
            started: Bits([0; 2]),
            objects: Bits([0; 2]),
        })
    }

    /// Byte offset of the next unread byte (for messages).
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn skip_ws(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.pos += 1;
        }
    }

    fn peek_byte(&mut self) -> Result<u8> {
        self.skip_ws();
        match self.bytes.get(self.pos) {
            Some(&b) => Ok(b),
            None => Err(err!(
                Status::BadFormat,
                "JSON ends early at byte {}",
                self.pos
            )),
        }
    }

    fn expect_byte(&mut self, want: u8) -> Result<()> {
        let b = self.peek_byte()?;
        if b != want {
            bail!(
                Status::BadFormat,
                "JSON: expected '{}' at byte {}, found '{}'",
                want as char,
                self.pos,
                b.escape_ascii()
            );
        }
        self.pos += 1;
        Ok(())
    }

    /// The kind of the next value, without consuming it.
    pub fn peek(&mut self) -> Result<Kind> {
        Ok(match self.peek_byte()? {
            b'n' => Kind::Null,
            b't' | b'f' => Kind::Bool,
            b'"' => Kind::String,
            b'[' => Kind::Array,
            b'{' => Kind::Object,
            b'-' | b'0'..=b'9' => Kind::Number,
            b => bail!(
                Status::BadFormat,
                "JSON: unexpected '{}' at byte {}",
                b.escape_ascii(),
                self.pos
            ),
        })
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        self.skip_ws();
        if self.bytes.get(self.pos..self.pos + word.len()) == Some(word) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    pub fn read_null(&mut self) -> Result<()> {
        if self.literal(b"null") {
            Ok(())
        } else {
            Err(err!(
                Status::BadFormat,
                "JSON: expected null at byte {}",
                self.pos
            ))
        }
    }

    /// `null` is consumed and gives `true`; anything else is left in place.
    pub fn skip_null(&mut self) -> Result<bool> {
        Ok(self.peek()? == Kind::Null && self.literal(b"null"))
    }

    pub fn read_bool(&mut self) -> Result<bool> {
        if self.literal(b"true") {
            Ok(true)
        } else if self.literal(b"false") {
            Ok(false)
        } else {
            Err(err!(
                Status::BadFormat,
                "JSON: expected true or false at byte {}",
                self.pos
            ))
        }
    }

    /// The text of a number literal, checked against the JSON grammar.
    pub fn read_number_text(&mut self) -> Result<&'a str> {
        self.skip_ws();
        let start = self.pos;
        let b = self.bytes;
        let mut p = start;
        let digit = |p: usize| b.get(p).is_some_and(u8::is_ascii_digit);
        // A run of one or more digits from `p` (`what` names them when there is none); its end.
        let digits = |mut p: usize, what: &str| -> Result<usize> {
            if !digit(p) {
                bail!(Status::BadFormat, "JSON: expected {what} at byte {p}");
            }
            while digit(p) {
                p += 1;
            }
            Ok(p)
        };
        if b.get(p) == Some(&b'-') {
            p += 1;
        }
        if b.get(p) == Some(&b'0') {
            p += 1;
        } else if digit(p) {
            p = digits(p, "a digit")?;
        } else {
            bail!(Status::BadFormat, "JSON: expected a number at byte {start}");
        }
        if b.get(p) == Some(&b'.') {
            p = digits(p + 1, "a digit after '.'")?;
        }
        if matches!(b.get(p), Some(b'e' | b'E')) {
            p += 1;
            if matches!(b.get(p), Some(b'+' | b'-')) {
                p += 1;
            }
            p = digits(p, "an exponent digit")?;
        }
        if p - start > MAX_NUMBER {
            bail!(
                Status::BadFormat,
                "JSON: number at byte {start} is longer than {MAX_NUMBER} bytes"
            );
        }
        self.pos = p;
        // Only ASCII was accepted above.
        core::str::from_utf8(&b[start..p])
            .map_err(|_| err!(Status::BadFormat, "JSON: bad number at byte {start}"))
    }

    pub fn read_f64(&mut self) -> Result<f64> {
        let at = self.pos;
        let text = self.read_number_text()?;
        parse_f64(text)
            .ok_or_else(|| err!(Status::BadFormat, "JSON: bad number '{text}' at byte {at}"))
    }

    /// An integer that fits `i64` (no fraction or exponent).
    pub fn read_i64(&mut self) -> Result<i64> {
        self.read_integer("an integer")
    }

    /// A non-negative integer that fits `u64`.
    pub fn read_u64(&mut self) -> Result<u64> {
        self.read_integer("a non-negative integer")
    }

    /// A number literal parsed as the integer type `T` (`what` names it in the error).
    fn read_integer<T: core::str::FromStr>(&mut self, what: &str) -> Result<T> {
        let at = self.pos;
        let text = self.read_number_text()?;
        text.parse::<T>().map_err(|_| {
            err!(
                Status::BadFormat,
                "JSON: expected {what} at byte {at}, found '{text}'"
            )
        })
    }

    /// A string, validated (UTF-8, escapes, surrogate pairs, no raw control characters).
    pub fn read_str(&mut self) -> Result<Str<'a>> {
        self.expect_byte(b'"')?;
        let start = self.pos;
        let b = self.bytes;
        let mut p = start;
        let mut escaped = false;
        loop {
            // Fast scan over plain ASCII.
            while let Some(&c) = b.get(p) {
                if c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c) {
                    break;
                }
                p += 1;
            }
            let Some(&c) = b.get(p) else {
                bail!(
                    Status::BadFormat,
                    "JSON: string at byte {start} is not closed"
                );
            };
            match c {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    p = self.check_escape(p)?;
                }
                0..0x20 => bail!(
                    Status::BadFormat,
                    "JSON: control character 0x{c:02x} inside a string at byte {p}"
                ),
                _ => {
                    let len = utf8_len(c);
                    let ok = b
                        .get(p..p + len)
                        .is_some_and(|s| core::str::from_utf8(s).is_ok());
                    if !ok {
                        bail!(
                            Status::InvalidUtf8,
                            "JSON: invalid UTF-8 in a string at byte {p}"
                        );
                    }
                    p += len;
                }
            }
            if p - start > MAX_STRING {
                bail!(
                    Status::BadFormat,
                    "JSON: string at byte {start} is longer than {MAX_STRING} bytes"
                );
            }
        }
        self.pos = p + 1;
        Ok(Str {
            raw: &b[start..p],
            escaped,
        })
    }

    /// Checks the escape at `p` (a backslash); returns the position after it.
    fn check_escape(&self, p: usize) -> Result<usize> {
        let b = self.bytes;
        match b.get(p + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(p + 2),
            Some(b'u') => {
                let unit = |at: usize| b.get(at..at + 4).and_then(hex4);
                let Some(hi) = unit(p + 2) else {
                    bail!(Status::BadFormat, "JSON: bad \\u escape at byte {p}");
                };
                match hi {
                    0xD800..=0xDBFF => {
                        let lo = if b.get(p + 6..p + 8) == Some(b"\\u") {
                            unit(p + 8)
                        } else {
                            None
                        };
                        match lo {
                            Some(0xDC00..=0xDFFF) => Ok(p + 12),
                            _ => bail!(
                                Status::BadFormat,
                                "JSON: lone high surrogate \\u{hi:04x} at byte {p}"
                            ),
                        }
                    }
                    0xDC00..=0xDFFF => {
                        bail!(
                            Status::BadFormat,
                            "JSON: lone low surrogate \\u{hi:04x} at byte {p}"
                        )
                    }
                    _ => Ok(p + 6),
                }
            }
            _ => bail!(Status::BadFormat, "JSON: bad escape at byte {p}"),
        }
    }

    fn open(&mut self, what: u8) -> Result<()> {
        if self.depth >= MAX_DEPTH {
            bail!(
                Status::BadFormat,
                "JSON nests deeper than {MAX_DEPTH} at byte {}",
                self.pos
            );
        }
        self.expect_byte(what)?;
        self.depth += 1;
        self.started.set(self.depth, false);
        self.objects.set(self.depth, what == b'{');
        Ok(())
    }

    /// Before the next element of the open container: true if there is one (after its comma),
    /// false if the container closed (consumed).
    fn next_element(&mut self, close: u8) -> Result<bool> {
        if self.depth == 0 {
            bail!(
                Status::BadFormat,
                "JSON: no open container at byte {}",
                self.pos
            );
        }
        let first = !self.started.get(self.depth);
        let b = self.peek_byte()?;
        if b == close {
            self.pos += 1;
            self.depth -= 1;
            return Ok(false);
        }
        if !first {
            if b != b',' {
                bail!(
                    Status::BadFormat,
                    "JSON: expected ',' or '{}' at byte {}, found '{}'",
                    close as char,
                    self.pos,
                    b.escape_ascii()
                );
            }
            self.pos += 1;
            // No trailing comma.
            if self.peek_byte()? == close {
                bail!(
                    Status::BadFormat,
                    "JSON: trailing comma at byte {}",
                    self.pos
                );
            }
        }
        self.started.set(self.depth, true);
        Ok(true)
    }

    pub fn begin_object(&mut self) -> Result<()> {
        self.open(b'{')
    }

    /// The next key of the open object (then read or skip its value), or `None` at its end.
    pub fn next_key(&mut self) -> Result<Option<Str<'a>>> {
        if !self.container_is_object() {
            bail!(
                Status::BadFormat,
                "JSON: reading a key outside an object at byte {}",
                self.pos
            );
        }
        if !self.next_element(b'}')? {
            return Ok(None);
        }
        if self.peek_byte()? != b'"' {
            bail!(
                Status::BadFormat,
                "JSON: expected a key string at byte {}",
                self.pos
            );
        }
        let key = self.read_str()?;
        self.expect_byte(b':')?;
        Ok(Some(key))
    }

    pub fn begin_array(&mut self) -> Result<()> {
        self.open(b'[')
    }

    /// True if the open array has another item (read it next), false at its end.
    pub fn next_item(&mut self) -> Result<bool> {
        if self.depth == 0 || self.container_is_object() {
            bail!(
                Status::BadFormat,
                "JSON: reading an item outside an array at byte {}",
                self.pos
            );
        }
        self.next_element(b']')
    }

    /// Skips one value of any kind, iteratively (depth-capped like everything else).
    pub fn skip_value(&mut self) -> Result<()> {
        let base = self.depth;
        loop {
            // Read one value start, or close containers.
            match self.peek()? {
                Kind::Null => self.read_null()?,
                Kind::Bool => {
                    self.read_bool()?;
                }
                Kind::Number => {
                    self.read_number_text()?;
                }
                Kind::String => {
                    self.read_str()?;
                }
                Kind::Array => self.begin_array()?,
                Kind::Object => self.begin_object()?,
            }
            // Advance to the next value to read, closing finished containers.
            loop {
                if self.depth == base {
                    return Ok(());
                }
                let in_object = self.container_is_object();
                if in_object {
                    if self.next_key()?.is_some() {
                        break;
                    }
                } else if self.next_item()? {
                    break;
                }
            }
        }
    }

    /// Whether the innermost open container is an object.
    fn container_is_object(&self) -> bool {
        self.objects.get(self.depth)
    }

    /// After the top-level value: only white space may follow.
    pub fn finish(&mut self) -> Result<()> {
        self.skip_ws();
        if self.pos != self.bytes.len() {
            bail!(
                Status::BadFormat,
                "JSON: unexpected data after the value at byte {}",
                self.pos
            );
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Writes one JSON object into a byte buffer, keys in call order; the closing brace is written
/// when the writer drops (so a nested [`ObjectWriter::object`] closes at the end of its scope).
/// Strings are escaped; a non-finite number is written as 0 (JSON has no NaN or infinity).
pub struct ObjectWriter<'a> {
    out: &'a mut alloc::vec::Vec<u8>,
    empty: bool,
}

impl<'a> ObjectWriter<'a> {
    pub fn new(out: &'a mut alloc::vec::Vec<u8>) -> ObjectWriter<'a> {
        out.push(b'{');
        ObjectWriter { out, empty: true }
    }

    fn key(&mut self, k: &str) -> &mut alloc::vec::Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        write_string(self.out, k);
        self.out.push(b':');
        self.out
    }

    pub fn string(&mut self, k: &str, v: &str) -> &mut Self {
        write_string(self.key(k), v);
        self
    }

    pub fn uint(&mut self, k: &str, v: u64) -> &mut Self {
        write_display(self.key(k), v);
        self
    }

    pub fn int(&mut self, k: &str, v: i64) -> &mut Self {
        write_display(self.key(k), v);
        self
    }

    pub fn float(&mut self, k: &str, v: f64) -> &mut Self {
        write_display(
            self.key(k),
            Shortest::from(if v.is_finite() { v } else { 0.0 }),
        );
        self
    }

    /// An f32 in its own shortest form (`1e-5` stays `0.00001`, not its f64 widening).
    pub fn float32(&mut self, k: &str, v: f32) -> &mut Self {
        write_display(
            self.key(k),
            Shortest::from(if v.is_finite() { v } else { 0.0 }),
        );
        self
    }

    pub fn boolean(&mut self, k: &str, v: bool) -> &mut Self {
        self.key(k)
            .extend_from_slice(if v { b"true" } else { b"false" });
        self
    }

    /// An array of strings under `k`.
    pub fn strings<'s>(&mut self, k: &str, items: impl IntoIterator<Item = &'s str>) -> &mut Self {
        let out = self.key(k);
        out.push(b'[');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(out, item);
        }
        out.push(b']');
        self
    }

    /// A nested object under `k`, closed when the returned writer drops.
    pub fn object(&mut self, k: &str) -> ObjectWriter<'_> {
        ObjectWriter::new(self.key(k))
    }
}

impl Drop for ObjectWriter<'_> {
    fn drop(&mut self) {
        self.out.push(b'}');
    }
}

/// `v` as a JSON string: quotes, `"` and `\` escaped, `\n \r \t` short (as models write
/// them, which the grammar of a schema `const` relies on), other control characters as
/// `\u00XX`.
pub fn write_string(out: &mut alloc::vec::Vec<u8>, v: &str) {
    out.push(b'"');
    for &b in v.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

fn write_display(out: &mut alloc::vec::Vec<u8>, v: impl core::fmt::Display) {
    use core::fmt::Write;
    struct Bytes<'a>(&'a mut alloc::vec::Vec<u8>);
    impl Write for Bytes<'_> {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            self.0.extend_from_slice(s.as_bytes());
            Ok(())
        }
    }
    let _ = write!(Bytes(out), "{v}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    /// Reads any document back into a compact canonical text (test helper).
    fn canon(r: &mut Reader, out: &mut String) -> Result<()> {
        match r.peek()? {
            Kind::Null => {
                r.read_null()?;
                out.push_str("null")
            }
            Kind::Bool => out.push_str(if r.read_bool()? { "true" } else { "false" }),
            Kind::Number => out.push_str(&alloc::format!("{}", r.read_f64()?)),
            Kind::String => {
                out.push('<');
                r.read_str()?.decode_into(out)?;
                out.push('>');
            }
            Kind::Array => {
                r.begin_array()?;
                out.push('[');
                while r.next_item()? {
                    canon(r, out)?;
                    out.push(',');
                }
                out.push(']');
            }
            Kind::Object => {
                r.begin_object()?;
                out.push('{');
                while let Some(k) = r.next_key()? {
                    k.decode_into(out)?;
                    out.push(':');
                    canon(r, out)?;
                    out.push(',');
                }
                out.push('}');
            }
        }
        Ok(())
    }

    fn parse(text: &[u8]) -> Result<String> {
        let mut r = Reader::new(text)?;
        let mut s = String::new();
        canon(&mut r, &mut s)?;
        r.finish()?;
        Ok(s)
    }

    #[test]
    fn reads_documents() {
        let doc =
            br#" { "a" : [1, -2.5e3, 0, true, false, null, "x\"\\\/\b\f\n\r\t"], "b": {}, "c": [],
            "\u00e9\ud83d\ude00": "caf\u00e9 \ud83d\ude00 \u4e2d" } "#;
        assert_eq!(
            parse(doc).unwrap(),
            "{a:[1,-2500,0,true,false,null,<x\"\\/\u{8}\u{c}\n\r\t>,],b:{},c:[],é😀:<café 😀 中>,}"
        );
        assert_eq!(parse(b"\xEF\xBB\xBF 7 ").unwrap(), "7");
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        let mut r = Reader::new(br#"["plain", "esc\n"]"#).unwrap();
        r.begin_array().unwrap();
        assert!(r.next_item().unwrap());
        let a = r.read_str().unwrap();
        assert_eq!(a.as_str(), Some("plain"));
        assert!(matches!(a.to_cow().unwrap(), Cow::Borrowed("plain")));
        assert!(r.next_item().unwrap());
        let b = r.read_str().unwrap();
        assert_eq!(b.as_str(), None);
        assert!(b.eq_str("esc\n") && !b.eq_str("esc"));
        assert_eq!(b.to_cow().unwrap(), "esc\n");
        assert!(!r.next_item().unwrap());
        r.finish().unwrap();
    }

    #[test]
    fn skips_values() {
        let doc = br#"{"skip": {"x": [1, {"y": [[], "z"]}, null]}, "keep": 5}"#;
        let mut r = Reader::new(doc).unwrap();
        r.begin_object().unwrap();
        let mut seen = Vec::new();
        while let Some(k) = r.next_key().unwrap() {
            if k.eq_str("keep") {
                seen.push(r.read_u64().unwrap());
            } else {
                r.skip_value().unwrap();
            }
        }
        r.finish().unwrap();
        assert_eq!(seen, [5]);
    }

    #[test]
    fn integers() {
        let mut r =
            Reader::new(b"[18446744073709551615, -9223372036854775808, 1.5, 1e2, 01]").unwrap();
        r.begin_array().unwrap();
        r.next_item().unwrap();
        assert_eq!(r.read_u64().unwrap(), u64::MAX);
        r.next_item().unwrap();
        assert_eq!(r.read_i64().unwrap(), i64::MIN);
        r.next_item().unwrap();
        assert!(r.read_u64().is_err());
        r.next_item().unwrap();
        assert!(r.read_i64().is_err());
        // "01": the number ends after "0", then '1' is not a comma.
        r.next_item().unwrap();
        assert_eq!(r.read_u64().unwrap(), 0);
        assert!(r.next_item().is_err());
    }

    #[test]
    fn rejects_malformed_input() {
        let bad: &[&[u8]] = &[
            b"",
            b"   ",
            b"{",
            b"[1,]",
            b"{\"a\":1,}",
            b"[1 2]",
            b"{\"a\" 1}",
            b"{1:2}",
            b"\"abc",
            b"\"a\x01b\"",
            b"\"\\x\"",
            b"\"\\u12\"",
            b"\"\\ud800\"",
            b"\"\\ud800\\u0041\"",
            b"\"\\udc00\"",
            b"\"\xff\"",
            b"\"\xe2\x82\"",
            b"\"\xed\xa0\x80\"",
            b"-",
            b"1.",
            b"1e",
            b".5",
            b"+1",
            b"tru",
            b"nul",
            b"[1] x",
            b"[1]]",
            b"NaN",
        ];
        for text in bad {
            assert!(
                parse(text).is_err(),
                "accepted {:?}",
                text.escape_ascii().to_string()
            );
        }
        let long = alloc::format!("1{}", "0".repeat(MAX_NUMBER));
        assert!(parse(long.as_bytes()).is_err());
    }

    #[test]
    fn depth_is_capped() {
        let ok = alloc::format!(
            "{}{}",
            "[".repeat(MAX_DEPTH as usize),
            "]".repeat(MAX_DEPTH as usize)
        );
        let mut r = Reader::new(ok.as_bytes()).unwrap();
        r.skip_value().unwrap();
        r.finish().unwrap();
        let deep = "[".repeat(MAX_DEPTH as usize + 1);
        let mut r = Reader::new(deep.as_bytes()).unwrap();
        assert!(r.skip_value().is_err());
        let objs = "{\"a\":".repeat(100_000);
        assert!(Reader::new(objs.as_bytes()).unwrap().skip_value().is_err());
    }

    #[test]
    fn fuzzed_prefixes_never_panic() {
        let doc = br#"{"a": [1, -2.5e3, "x\u00e9\ud83d\ude00", {"b": null}], "c": true}"#;
        for cut in 0..doc.len() {
            let _ = parse(&doc[..cut]);
            let mut mutated = doc.to_vec();
            for b in [b'"', b'\\', b'{', b'[', b',', 0xFF] {
                mutated[cut] = b;
                let _ = parse(&mutated);
            }
        }
    }

    #[test]
    fn writer_output_reads_back() {
        let mut out = alloc::vec::Vec::new();
        {
            let mut o = ObjectWriter::new(&mut out);
            o.string("s", "q\"b\\c\n\u{1}é")
                .uint("u", 7)
                .int("i", -3)
                .float("f", 2.5)
                .float("nan", f64::NAN)
                .float32("eps", 1e-5)
                .boolean("t", true);
            o.object("empty");
            o.strings("list", ["a", "b\""]).strings("none", []);
            o.object("nested").uint("k", 1);
        }
        assert_eq!(
            core::str::from_utf8(&out).unwrap(),
            "{\"s\":\"q\\\"b\\\\c\\n\\u0001é\",\"u\":7,\"i\":-3,\"f\":2.5,\"nan\":0,\"eps\":0.00001,\"t\":true,\"empty\":{},\"list\":[\"a\",\"b\\\"\"],\"none\":[],\"nested\":{\"k\":1}}"
        );
        assert_eq!(
            parse(&out).unwrap(),
            "{s:<q\"b\\c\n\u{1}é>,u:7,i:-3,f:2.5,nan:0,eps:0.00001,t:true,empty:{},list:[<a>,<b\">,],none:[],nested:{k:1,},}"
        );
    }
}
