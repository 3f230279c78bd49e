//! Template text -> tokens -> a tree, with Jinja2's whitespace rules as transformers sets them:
//! `trim_blocks` (the first newline after a block or comment tag is dropped), `lstrip_blocks`
//! (spaces and tabs from the start of a line to a block or comment tag are dropped), `-` at a
//! tag's edge strips all whitespace on that side, `+` turns `lstrip_blocks` off for a tag, and
//! one trailing newline of the template is dropped (`keep_trailing_newline=False`).
//!
//! Every token and node keeps its byte offset, so errors name the line and column. Nesting is
//! capped ([`MAX_NESTING`]): a hostile template cannot overflow the parser's stack.

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use super::value::Value;
use crate::err;
use crate::error::{Error, Result, Status};

/// Deepest nesting of blocks and expressions the parser accepts.
pub const MAX_NESTING: u32 = 100;
/// Largest template accepted, in bytes.
pub const MAX_TEMPLATE: usize = 1 << 20;

/// "line L, column C" of byte offset `pos` in `src` (1-based, columns in characters).
pub fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let before = src.get(..pos.min(src.len())).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

pub fn error_at(src: &str, pos: usize, status: Status, msg: core::fmt::Arguments<'_>) -> Error {
    let (l, c) = line_col(src, pos);
    err!(status, "template line {l}, column {c}: {msg}")
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Data(String),
    VarBegin,
    VarEnd,
    BlockBegin,
    BlockEnd,
    Name(Rc<str>),
    Str(String),
    Int(i64),
    Float(f64),
    Op(&'static str),
    Eof,
}

const OPS: [&str; 26] = [
    "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[",
    "]", "{", "}", ",", ".", ":", "|", ";",
];

struct Lexer<'a> {
    src: &'a str,
    toks: Vec<(Tok, u32)>,
}

impl<'a> Lexer<'a> {
    fn fail(&self, pos: usize, msg: core::fmt::Arguments<'_>) -> Error {
        error_at(self.src, pos, Status::BadFormat, msg)
    }

    fn run(mut self) -> Result<Vec<(Tok, u32)>> {
        let full = self.src;
        // keep_trailing_newline=False: one trailing newline is not part of the template.
        let src = full.strip_suffix('\n').unwrap_or(full);
        let b = src.as_bytes();
        let mut pos = 0usize;
        // Whether the text so far ends at a line start (lstrip_blocks needs it when the data
        // before a tag has no newline of its own).
        let mut line_starting = true;
        let mut strip_next = false;
        loop {
            let next = find_tag(b, pos);
            let end = next.unwrap_or(b.len());
            let mut data = &src[pos..end];
            if strip_next {
                data = data.trim_start();
            }
            let (kind, tag_pos) = match next {
                None => {
                    if !data.is_empty() {
                        self.toks.push((Tok::Data(data.into()), pos as u32));
                    }
                    break;
                }
                Some(i) => (b[i + 1], i),
            };
            let modifier = b.get(tag_pos + 2).copied();
            if modifier == Some(b'-') {
                data = data.trim_end();
            } else if kind != b'{' && modifier != Some(b'+') {
                // lstrip_blocks: only spaces/tabs back to the start of the line.
                let l_pos = data.rfind('\n').map(|i| i + 1);
                if l_pos.is_some() || line_starting {
                    let from = l_pos.unwrap_or(0);
                    if data[from..].chars().all(|c| c.is_whitespace()) {
                        data = &data[..from];
                    }
                }
            }
            if !data.is_empty() {
                self.toks.push((Tok::Data(data.into()), pos as u32));
            }
            let mut p = tag_pos + 2;
            if matches!(modifier, Some(b'-') | Some(b'+')) {
                p += 1;
            }
            let close = match kind {
                b'{' => "}}",
                b'%' => "%}",
                _ => "#}",
            };
            if kind == b'#' {
                let Some(rel) = src[p..].find("#}") else {
                    return Err(self.fail(tag_pos, format_args!("unclosed comment")));
                };
                let close_at = p + rel;
                strip_next = src[..close_at].ends_with('-');
                pos = close_at + 2;
            } else {
                self.toks.push((
                    if kind == b'{' {
                        Tok::VarBegin
                    } else {
                        Tok::BlockBegin
                    },
                    tag_pos as u32,
                ));
                let (after, stripped) = self.lex_tag(src, p, close, tag_pos)?;
                strip_next = stripped;
                pos = after;
                // `{% raw %}`: the text up to `{% endraw %}` is data.
                let n = self.toks.len();
                if kind == b'%'
                    && n >= 2
                    && matches!(&self.toks[n - 2].0, Tok::Name(s) if &**s == "raw")
                {
                    self.toks.truncate(n - 3);
                    let (text, after_end) = raw_body(src, pos).ok_or_else(|| {
                        self.fail(tag_pos, format_args!("raw block without endraw"))
                    })?;
                    self.toks.push((Tok::Data(text.into()), pos as u32));
                    pos = after_end;
                    strip_next = false;
                }
            }
            let mut trimmed = false;
            if !strip_next && kind != b'{' && src[pos..].starts_with('\n') {
                // trim_blocks
                pos += 1;
                trimmed = true;
            }
            line_starting = trimmed || src[..pos].ends_with('\n');
        }
        self.toks.push((Tok::Eof, src.len() as u32));
        Ok(self.toks)
    }

    /// Tokens of one `{{ }}` / `{% %}` from `p` to its closing marker; returns the offset after
    /// the marker and whether it was `-}}`/`-%}`.
    fn lex_tag(
        &mut self,
        src: &str,
        mut p: usize,
        close: &str,
        open: usize,
    ) -> Result<(usize, bool)> {
        let b = src.as_bytes();
        loop {
            while p < b.len() && (b[p] as char).is_ascii_whitespace() {
                p += 1;
            }
            if p >= b.len() {
                return Err(self.fail(open, format_args!("tag not closed (expected {close})")));
            }
            if src[p..].starts_with(close) {
                self.end_tok(close, p);
                return Ok((p + 2, false));
            }
            if b[p] == b'-' && src[p + 1..].starts_with(close) {
                self.end_tok(close, p);
                return Ok((p + 3, true));
            }
            if b[p] == b'+' && src[p + 1..].starts_with(close) && close == "%}" {
                self.end_tok(close, p);
                return Ok((p + 3, false));
            }
            let start = p;
            let c = b[p];
            if c.is_ascii_alphabetic() || c == b'_' {
                while p < b.len() && (b[p].is_ascii_alphanumeric() || b[p] == b'_') {
                    p += 1;
                }
                self.toks
                    .push((Tok::Name(Rc::from(&src[start..p])), start as u32));
            } else if c.is_ascii_digit() {
                while p < b.len() && (b[p].is_ascii_digit() || b[p] == b'_') {
                    p += 1;
                }
                let mut float = false;
                if p + 1 < b.len() && b[p] == b'.' && b[p + 1].is_ascii_digit() {
                    float = true;
                    p += 1;
                    while p < b.len() && (b[p].is_ascii_digit() || b[p] == b'_') {
                        p += 1;
                    }
                }
                if p < b.len() && (b[p] == b'e' || b[p] == b'E') {
                    let mut q = p + 1;
                    if q < b.len() && (b[q] == b'+' || b[q] == b'-') {
                        q += 1;
                    }
                    if q < b.len() && b[q].is_ascii_digit() {
                        float = true;
                        p = q;
                        while p < b.len() && b[p].is_ascii_digit() {
                            p += 1;
                        }
                    }
                }
                let text: String = src[start..p].chars().filter(|&c| c != '_').collect();
                let tok = if float {
                    Tok::Float(crate::decimal::parse_f64(&text).unwrap_or(f64::INFINITY))
                } else {
                    Tok::Int(text.parse().map_err(|_| {
                        self.fail(start, format_args!("integer {text} is too large"))
                    })?)
                };
                self.toks.push((tok, start as u32));
            } else if c == b'\'' || c == b'"' {
                let (s, after) = self.string(src, p)?;
                self.toks.push((Tok::Str(s), start as u32));
                p = after;
            } else if let Some(op) = OPS.iter().find(|op| src[p..].starts_with(**op)) {
                self.toks.push((Tok::Op(op), start as u32));
                p += op.len();
            } else {
                let ch = src[p..].chars().next().unwrap_or('?');
                return Err(self.fail(p, format_args!("unexpected character {ch:?}")));
            }
        }
    }

    fn end_tok(&mut self, close: &str, p: usize) {
        let t = if close == "}}" {
            Tok::VarEnd
        } else {
            Tok::BlockEnd
        };
        self.toks.push((t, p as u32));
    }

    /// A string literal with Python's escapes (`\n`, `\t`, `\\`, `\'`, `\"`, `\xNN`, `\uNNNN`,
    /// `\UNNNNNNNN`; an unknown escape stays as written).
    fn string(&self, src: &str, start: usize) -> Result<(String, usize)> {
        let quote = src.as_bytes()[start] as char;
        let mut out = String::new();
        let mut it = src[start + 1..].char_indices();
        while let Some((i, c)) = it.next() {
            if c == quote {
                return Ok((out, start + 1 + i + 1));
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some((_, e)) = it.next() else { break };
            let hex = |n: usize, it: &mut core::str::CharIndices<'_>| -> Option<char> {
                let mut v = 0u32;
                for _ in 0..n {
                    v = v * 16 + it.next()?.1.to_digit(16)?;
                }
                char::from_u32(v)
            };
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'a' => out.push('\u{7}'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'v' => out.push('\u{b}'),
                '\\' | '\'' | '"' => out.push(e),
                '\n' => {}
                'x' | 'u' | 'U' => {
                    let n = match e {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let c = hex(n, &mut it).ok_or_else(|| {
                        self.fail(start + 1 + i, format_args!("bad \\{e} escape in a string"))
                    })?;
                    out.push(c);
                }
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
        }
        Err(self.fail(start, format_args!("unterminated string")))
    }
}

/// The next `{{`, `{%` or `{#` at or after `from`.
fn find_tag(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < b.len() {
        if b[i] == b'{' && matches!(b[i + 1], b'{' | b'%' | b'#') {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The text of a raw block from `pos` to its `{% endraw %}`, and the offset after that tag.
fn raw_body(src: &str, pos: usize) -> Option<(&str, usize)> {
    let mut from = pos;
    loop {
        let i = from + src[from..].find("{%")?;
        let mut p = i + 2;
        let b = src.as_bytes();
        if matches!(b.get(p), Some(b'-') | Some(b'+')) {
            p += 1;
        }
        let rest = src[p..].trim_start();
        if let Some(after) = rest.strip_prefix("endraw") {
            let after = after.trim_start();
            let close = after.find("%}")?;
            let end = src.len() - after.len() + close + 2;
            let mut text = &src[pos..i];
            if b.get(i + 2) == Some(&b'-') {
                text = text.trim_end();
            }
            return Some((text, end));
        }
        from = i + 2;
    }
}

// ---- the tree ----

#[derive(Debug)]
pub enum Node {
    Text(Rc<str>),
    Output(Expr),
    If(Vec<(Expr, Vec<Node>)>, Vec<Node>),
    For(Box<For>),
    Set(Target, Expr, u32),
    SetBlock(Target, Vec<Node>, u32),
    Macro(Rc<Macro>),
    /// `{% call(args) name(...) %}body{% endcall %}`: `caller` is a macro of the body.
    CallBlock(Rc<Macro>, Expr),
    FilterBlock(Rc<str>, Vec<Arg>, Vec<Node>, u32),
    Break(u32),
    Continue(u32),
}

#[derive(Debug)]
pub struct For {
    pub target: Target,
    pub iter: Expr,
    pub cond: Option<Expr>,
    pub body: Vec<Node>,
    pub else_body: Vec<Node>,
    pub recursive: bool,
    pub pos: u32,
}

#[derive(Debug, Clone)]
pub enum Target {
    Name(Rc<str>),
    Tuple(Vec<Rc<str>>),
    Attr(Rc<str>, Rc<str>),
}

#[derive(Debug)]
pub struct Macro {
    pub name: Rc<str>,
    pub params: Vec<(Rc<str>, Option<Expr>)>,
    pub body: Vec<Node>,
}

#[derive(Debug)]
pub struct Arg {
    pub name: Option<Rc<str>>,
    pub value: Expr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
}

#[derive(Debug)]
pub enum Expr {
    Lit(Value),
    Name(Rc<str>, u32),
    List(Vec<Expr>),
    Tuple(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    Attr(Box<Expr>, Rc<str>, u32),
    Item(Box<Expr>, Box<Expr>, u32),
    Slice(Box<Expr>, Box<[Option<Expr>; 3]>, u32),
    Call(Box<Expr>, Vec<Arg>, u32),
    Filter(Box<Expr>, Rc<str>, Vec<Arg>, u32),
    Test(Box<Expr>, Rc<str>, Vec<Arg>, u32),
    Not(Box<Expr>),
    Neg(Box<Expr>, u32),
    Bin(BinOp, Box<Expr>, Box<Expr>, u32),
    Concat(Vec<Expr>, u32),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare(Box<Expr>, Vec<(CmpOp, Expr)>, u32),
    Cond(Box<Expr>, Box<Expr>, Option<Box<Expr>>),
}

/// Parses a template into its nodes.
pub fn parse(src: &str) -> Result<Vec<Node>> {
    if src.len() > MAX_TEMPLATE {
        return Err(err!(
            Status::BadFormat,
            "template of {} bytes exceeds the cap of {MAX_TEMPLATE}",
            src.len()
        ));
    }
    let toks = Lexer {
        src,
        toks: Vec::new(),
    }
    .run()?;
    let mut p = Parser {
        src,
        toks,
        i: 0,
        depth: 0,
    };
    let (body, end) = p.block(&[])?;
    debug_assert!(end.is_none());
    Ok(body)
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<(Tok, u32)>,
    i: usize,
    depth: u32,
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.i.min(self.toks.len() - 1)].0
    }
    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.i + k).min(self.toks.len() - 1)].0
    }
    fn pos(&self) -> u32 {
        self.toks[self.i.min(self.toks.len() - 1)].1
    }
    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }
    fn fail(&self, msg: core::fmt::Arguments<'_>) -> Error {
        error_at(self.src, self.pos() as usize, Status::BadFormat, msg)
    }
    fn describe(&self) -> String {
        match self.peek() {
            Tok::Name(n) => alloc::format!("'{n}'"),
            Tok::Op(o) => alloc::format!("'{o}'"),
            Tok::Str(_) => "a string".into(),
            Tok::Int(_) | Tok::Float(_) => "a number".into(),
            Tok::VarEnd => "'}}'".into(),
            Tok::BlockEnd => "'%}'".into(),
            Tok::Eof => "the end of the template".into(),
            _ => "a tag".into(),
        }
    }
    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }
    fn is_name(&self, name: &str) -> bool {
        matches!(self.peek(), Tok::Name(n) if &**n == name)
    }
    fn eat_op(&mut self, op: &str) -> bool {
        let yes = self.is_op(op);
        if yes {
            self.bump();
        }
        yes
    }
    fn eat_name(&mut self, name: &str) -> bool {
        let yes = self.is_name(name);
        if yes {
            self.bump();
        }
        yes
    }
    fn expect_op(&mut self, op: &str) -> Result<()> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(self.fail(format_args!("expected '{op}', found {}", self.describe())))
        }
    }
    fn name(&mut self) -> Result<Rc<str>> {
        match self.peek().clone() {
            Tok::Name(n) => {
                self.bump();
                Ok(n)
            }
            _ => Err(self.fail(format_args!("expected a name, found {}", self.describe()))),
        }
    }
    fn block_end(&mut self) -> Result<()> {
        if matches!(self.peek(), Tok::BlockEnd) {
            self.bump();
            Ok(())
        } else {
            Err(self.fail(format_args!("expected '%}}', found {}", self.describe())))
        }
    }
    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.fail(format_args!("nested deeper than {MAX_NESTING}")));
        }
        Ok(())
    }

    /// Nodes until one of the `ends` block tags (`{% endfor %}` ...) or the end; returns the
    /// nodes and the end tag's name (its `{%` and name consumed, the rest of the tag not).
    fn block(&mut self, ends: &[&str]) -> Result<(Vec<Node>, Option<Rc<str>>)> {
        self.enter()?;
        let mut nodes = Vec::new();
        loop {
            match self.bump() {
                Tok::Eof => {
                    if let Some(first) = ends.first() {
                        return Err(self.fail(format_args!(
                            "unexpected end of template, expected '{first}'"
                        )));
                    }
                    break;
                }
                Tok::Data(s) => nodes.push(Node::Text(Rc::from(s.as_str()))),
                Tok::VarBegin => {
                    let e = self.tuple_expr()?;
                    if !matches!(self.bump(), Tok::VarEnd) {
                        self.i -= 1;
                        return Err(
                            self.fail(format_args!("expected '}}}}', found {}", self.describe()))
                        );
                    }
                    nodes.push(Node::Output(e));
                }
                Tok::BlockBegin => {
                    let pos = self.pos();
                    let word = self.name()?;
                    if ends.contains(&&*word) {
                        self.depth -= 1;
                        return Ok((nodes, Some(word)));
                    }
                    nodes.push(self.statement(&word, pos)?);
                }
                _ => return Err(self.fail(format_args!("unexpected token"))),
            }
        }
        self.depth -= 1;
        Ok((nodes, None))
    }

    fn statement(&mut self, word: &str, pos: u32) -> Result<Node> {
        Ok(match word {
            "if" => {
                let mut arms = Vec::new();
                let mut cond = self.tuple_expr()?;
                self.block_end()?;
                loop {
                    let (body, end) = self.block(&["elif", "else", "endif"])?;
                    arms.push((cond, body));
                    match end.as_deref() {
                        Some("elif") => {
                            cond = self.tuple_expr()?;
                            self.block_end()?;
                        }
                        Some("else") => {
                            self.block_end()?;
                            let (els, _) = self.block(&["endif"])?;
                            self.block_end()?;
                            return Ok(Node::If(arms, els));
                        }
                        _ => {
                            self.block_end()?;
                            return Ok(Node::If(arms, Vec::new()));
                        }
                    }
                }
            }
            "for" => {
                let target = self.target(false)?;
                if !self.eat_name("in") {
                    return Err(self.fail(format_args!("expected 'in', found {}", self.describe())));
                }
                let iter = self.tuple_expr_no_cond()?;
                let cond = if self.eat_name("if") {
                    Some(self.expr()?)
                } else {
                    None
                };
                let recursive = self.eat_name("recursive");
                self.block_end()?;
                let (body, end) = self.block(&["else", "endfor"])?;
                let mut else_body = Vec::new();
                self.block_end()?;
                if end.as_deref() == Some("else") {
                    else_body = self.block(&["endfor"])?.0;
                    self.block_end()?;
                }
                Node::For(Box::new(For {
                    target,
                    iter,
                    cond,
                    body,
                    else_body,
                    recursive,
                    pos,
                }))
            }
            "set" => {
                let target = self.target(true)?;
                if self.eat_op("=") {
                    let value = self.tuple_expr()?;
                    self.block_end()?;
                    Node::Set(target, value, pos)
                } else {
                    self.block_end()?;
                    let (body, _) = self.block(&["endset"])?;
                    self.block_end()?;
                    Node::SetBlock(target, body, pos)
                }
            }
            "macro" => {
                let name = self.name()?;
                let params = self.params()?;
                self.block_end()?;
                let (body, _) = self.block(&["endmacro"])?;
                if !matches!(self.peek(), Tok::BlockEnd) {
                    self.name()?; // {% endmacro name %}
                }
                self.block_end()?;
                Node::Macro(Rc::new(Macro { name, params, body }))
            }
            "call" => {
                let params = if self.is_op("(") {
                    self.params()?
                } else {
                    Vec::new()
                };
                let call = self.expr()?;
                if !matches!(call, Expr::Call(..)) {
                    return Err(self.fail(format_args!("expected a call after 'call'")));
                }
                self.block_end()?;
                let (body, _) = self.block(&["endcall"])?;
                self.block_end()?;
                let caller = Rc::new(Macro {
                    name: Rc::from("caller"),
                    params,
                    body,
                });
                Node::CallBlock(caller, call)
            }
            "filter" => {
                let name = self.name()?;
                let args = if self.is_op("(") {
                    self.bump();
                    self.args()?
                } else {
                    Vec::new()
                };
                self.block_end()?;
                let (body, _) = self.block(&["endfilter"])?;
                self.block_end()?;
                Node::FilterBlock(name, args, body, pos)
            }
            "generation" => {
                // transformers' AssistantTracker tag: renders its body as it is.
                self.block_end()?;
                let (body, _) = self.block(&["endgeneration"])?;
                self.block_end()?;
                Node::If(
                    Vec::from([(Expr::Lit(Value::Bool(true)), body)]),
                    Vec::new(),
                )
            }
            "break" | "continue" => {
                self.block_end()?;
                if word == "break" {
                    Node::Break(pos)
                } else {
                    Node::Continue(pos)
                }
            }
            "do" => {
                return Err(error_at(
                    self.src,
                    pos as usize,
                    Status::BadFormat,
                    format_args!("encountered unknown tag 'do'"),
                ));
            }
            other => {
                return Err(error_at(
                    self.src,
                    pos as usize,
                    Status::BadFormat,
                    format_args!("encountered unknown tag '{other}'"),
                ));
            }
        })
    }

    fn params(&mut self) -> Result<Vec<(Rc<str>, Option<Expr>)>> {
        self.expect_op("(")?;
        let mut params = Vec::new();
        while !self.eat_op(")") {
            if !params.is_empty() {
                self.expect_op(",")?;
                if self.eat_op(")") {
                    break;
                }
            }
            let n = self.name()?;
            let default = if self.eat_op("=") {
                Some(self.expr()?)
            } else {
                None
            };
            params.push((n, default));
        }
        Ok(params)
    }

    fn target(&mut self, allow_attr: bool) -> Result<Target> {
        let first = self.name()?;
        if allow_attr && self.eat_op(".") {
            return Ok(Target::Attr(first, self.name()?));
        }
        if !self.is_op(",") {
            return Ok(Target::Name(first));
        }
        let mut names = Vec::from([first]);
        while self.eat_op(",") {
            if !matches!(self.peek(), Tok::Name(_)) || self.is_name("in") {
                break;
            }
            names.push(self.name()?);
        }
        Ok(Target::Tuple(names))
    }

    /// An expression, or several separated by commas (a tuple).
    fn tuple_expr(&mut self) -> Result<Expr> {
        let first = self.expr()?;
        if !self.is_op(",") {
            return Ok(first);
        }
        let mut items = Vec::from([first]);
        while self.eat_op(",") {
            if self.tuple_ends() {
                break;
            }
            items.push(self.expr()?);
        }
        Ok(Expr::Tuple(items))
    }

    /// The iterable of a `for`: no conditional expression (its `if` filters the loop).
    fn tuple_expr_no_cond(&mut self) -> Result<Expr> {
        let first = self.or()?;
        if !self.is_op(",") {
            return Ok(first);
        }
        let mut items = Vec::from([first]);
        while self.eat_op(",") {
            if self.tuple_ends() || self.is_name("if") {
                break;
            }
            items.push(self.or()?);
        }
        Ok(Expr::Tuple(items))
    }

    fn tuple_ends(&self) -> bool {
        matches!(self.peek(), Tok::VarEnd | Tok::BlockEnd | Tok::Eof) || self.is_op(")")
    }

    fn expr(&mut self) -> Result<Expr> {
        self.enter()?;
        let e = self.cond_expr();
        self.depth -= 1;
        e
    }

    fn cond_expr(&mut self) -> Result<Expr> {
        let mut e = self.or()?;
        while self.eat_name("if") {
            let cond = self.or()?;
            let other = if self.eat_name("else") {
                Some(Box::new(self.cond_expr()?))
            } else {
                None
            };
            e = Expr::Cond(Box::new(cond), Box::new(e), other);
        }
        Ok(e)
    }

    fn or(&mut self) -> Result<Expr> {
        let mut e = self.and()?;
        let mark = self.depth;
        while self.eat_name("or") {
            self.enter()?;
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        self.depth = mark;
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr> {
        let mut e = self.not()?;
        let mark = self.depth;
        while self.eat_name("and") {
            self.enter()?;
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        self.depth = mark;
        Ok(e)
    }

    fn not(&mut self) -> Result<Expr> {
        if self.eat_name("not") {
            self.enter()?;
            let e = self.not();
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(e?)));
        }
        self.compare()
    }

    fn compare(&mut self) -> Result<Expr> {
        let pos = self.pos();
        let first = self.math1()?;
        let mut ops = Vec::new();
        loop {
            let op = match self.peek() {
                Tok::Op("==") => CmpOp::Eq,
                Tok::Op("!=") => CmpOp::Ne,
                Tok::Op("<") => CmpOp::Lt,
                Tok::Op("<=") => CmpOp::Le,
                Tok::Op(">") => CmpOp::Gt,
                Tok::Op(">=") => CmpOp::Ge,
                Tok::Name(n) if &**n == "in" => CmpOp::In,
                Tok::Name(n)
                    if &**n == "not" && matches!(self.peek_at(1), Tok::Name(m) if &**m == "in") =>
                {
                    self.bump();
                    CmpOp::NotIn
                }
                _ => break,
            };
            self.bump();
            ops.push((op, self.math1()?));
        }
        Ok(if ops.is_empty() {
            first
        } else {
            Expr::Compare(Box::new(first), ops, pos)
        })
    }

    fn math1(&mut self) -> Result<Expr> {
        let mut e = self.concat()?;
        let mark = self.depth;
        loop {
            let pos = self.pos();
            let op = if self.eat_op("+") {
                BinOp::Add
            } else if self.eat_op("-") {
                BinOp::Sub
            } else {
                break;
            };
            self.enter()?;
            e = Expr::Bin(op, Box::new(e), Box::new(self.concat()?), pos);
        }
        self.depth = mark;
        Ok(e)
    }

    fn concat(&mut self) -> Result<Expr> {
        let pos = self.pos();
        let first = self.math2()?;
        if !self.is_op("~") {
            return Ok(first);
        }
        let mut parts = Vec::from([first]);
        while self.eat_op("~") {
            parts.push(self.math2()?);
        }
        Ok(Expr::Concat(parts, pos))
    }

    fn math2(&mut self) -> Result<Expr> {
        let mut e = self.pow()?;
        let mark = self.depth;
        loop {
            let pos = self.pos();
            let op = match self.peek() {
                Tok::Op("*") => BinOp::Mul,
                Tok::Op("/") => BinOp::Div,
                Tok::Op("//") => BinOp::FloorDiv,
                Tok::Op("%") => BinOp::Mod,
                _ => break,
            };
            self.bump();
            self.enter()?;
            e = Expr::Bin(op, Box::new(e), Box::new(self.pow()?), pos);
        }
        self.depth = mark;
        Ok(e)
    }

    fn pow(&mut self) -> Result<Expr> {
        let mut e = self.unary(true)?;
        let mark = self.depth;
        while self.is_op("**") {
            let pos = self.pos();
            self.bump();
            self.enter()?;
            e = Expr::Bin(BinOp::Pow, Box::new(e), Box::new(self.unary(true)?), pos);
        }
        self.depth = mark;
        Ok(e)
    }

    fn unary(&mut self, with_filter: bool) -> Result<Expr> {
        let pos = self.pos();
        self.enter()?;
        let mut e = if self.eat_op("-") {
            Expr::Neg(Box::new(self.unary(false)?), pos)
        } else if self.eat_op("+") {
            self.unary(false)?
        } else {
            self.primary()?
        };
        e = self.postfix(e)?;
        if with_filter {
            e = self.filters(e)?;
        }
        self.depth -= 1;
        Ok(e)
    }

    fn primary(&mut self) -> Result<Expr> {
        let pos = self.pos();
        Ok(match self.bump() {
            Tok::Name(n) => match &*n {
                "true" | "True" => Expr::Lit(Value::Bool(true)),
                "false" | "False" => Expr::Lit(Value::Bool(false)),
                "none" | "None" => Expr::Lit(Value::None),
                _ => Expr::Name(n, pos),
            },
            Tok::Str(mut s) => {
                // Adjacent literals join, as in Python.
                while let Tok::Str(more) = self.peek().clone() {
                    self.bump();
                    s.push_str(&more);
                }
                Expr::Lit(Value::string(s))
            }
            Tok::Int(i) => Expr::Lit(Value::Int(i)),
            Tok::Float(f) => Expr::Lit(Value::Float(f)),
            Tok::Op("(") => {
                if self.eat_op(")") {
                    return Ok(Expr::Tuple(Vec::new()));
                }
                let first = self.expr()?;
                if self.eat_op(")") {
                    return Ok(first);
                }
                let mut items = Vec::from([first]);
                while self.eat_op(",") {
                    if self.is_op(")") {
                        break;
                    }
                    items.push(self.expr()?);
                }
                self.expect_op(")")?;
                Expr::Tuple(items)
            }
            Tok::Op("[") => {
                let mut items = Vec::new();
                while !self.eat_op("]") {
                    if !items.is_empty() {
                        self.expect_op(",")?;
                        if self.eat_op("]") {
                            break;
                        }
                    }
                    items.push(self.expr()?);
                }
                Expr::List(items)
            }
            Tok::Op("{") => {
                let mut items = Vec::new();
                while !self.eat_op("}") {
                    if !items.is_empty() {
                        self.expect_op(",")?;
                        if self.eat_op("}") {
                            break;
                        }
                    }
                    let k = self.expr()?;
                    self.expect_op(":")?;
                    items.push((k, self.expr()?));
                }
                Expr::Dict(items)
            }
            _ => {
                self.i -= 1;
                return Err(self.fail(format_args!("unexpected {}", self.describe())));
            }
        })
    }

    fn postfix(&mut self, mut e: Expr) -> Result<Expr> {
        let mark = self.depth;
        let r = self.postfix_chain(&mut e);
        self.depth = mark;
        r.map(|()| e)
    }

    fn postfix_chain(&mut self, e: &mut Expr) -> Result<()> {
        loop {
            let pos = self.pos();
            if matches!(self.peek(), Tok::Op(".") | Tok::Op("[") | Tok::Op("(")) {
                self.enter()?;
            }
            let prev = core::mem::replace(e, Expr::Lit(Value::Undefined));
            if self.eat_op(".") {
                let attr = match self.bump() {
                    Tok::Name(n) => n,
                    Tok::Int(i) => Rc::from(alloc::format!("{i}").as_str()),
                    _ => {
                        self.i -= 1;
                        return Err(self.fail(format_args!(
                            "expected an attribute name, found {}",
                            self.describe()
                        )));
                    }
                };
                *e = Expr::Attr(Box::new(prev), attr, pos);
            } else if self.eat_op("[") {
                *e = self.subscript(prev, pos)?;
            } else if self.eat_op("(") {
                *e = Expr::Call(Box::new(prev), self.args()?, pos);
            } else {
                *e = prev;
                return Ok(());
            }
        }
    }

    fn subscript(&mut self, e: Expr, pos: u32) -> Result<Expr> {
        let mut parts: [Option<Expr>; 3] = [None, None, None];
        let mut colons = 0;
        loop {
            if self.eat_op("]") {
                break;
            }
            if self.eat_op(":") {
                colons += 1;
                if colons > 2 {
                    return Err(self.fail(format_args!("too many ':' in a slice")));
                }
                continue;
            }
            if parts[colons].is_some() {
                return Err(self.fail(format_args!("expected ']', found {}", self.describe())));
            }
            parts[colons] = Some(self.tuple_expr()?);
        }
        if colons == 0 {
            let index = parts[0]
                .take()
                .ok_or_else(|| self.fail(format_args!("empty subscript")))?;
            return Ok(Expr::Item(Box::new(e), Box::new(index), pos));
        }
        Ok(Expr::Slice(Box::new(e), Box::new(parts), pos))
    }

    /// Call arguments after `(`, through `)`.
    fn args(&mut self) -> Result<Vec<Arg>> {
        let mut args = Vec::new();
        while !self.eat_op(")") {
            if !args.is_empty() {
                self.expect_op(",")?;
                if self.eat_op(")") {
                    break;
                }
            }
            let name = match (self.peek().clone(), self.peek_at(1)) {
                (Tok::Name(n), Tok::Op("=")) => {
                    self.bump();
                    self.bump();
                    Some(n)
                }
                _ => None,
            };
            args.push(Arg {
                name,
                value: self.expr()?,
            });
        }
        Ok(args)
    }

    fn filters(&mut self, mut e: Expr) -> Result<Expr> {
        let mark = self.depth;
        let r = self.filter_chain(&mut e);
        self.depth = mark;
        r.map(|()| e)
    }

    fn filter_chain(&mut self, e: &mut Expr) -> Result<()> {
        loop {
            let pos = self.pos();
            if matches!(self.peek(), Tok::Op("|") | Tok::Op("(")) || self.is_name("is") {
                self.enter()?;
            }
            let prev = core::mem::replace(e, Expr::Lit(Value::Undefined));
            if self.eat_op("|") {
                let mut name = String::from(&*self.name()?);
                while self.is_op(".") {
                    self.bump();
                    name.push('.');
                    name.push_str(&self.name()?);
                }
                let args = if self.eat_op("(") {
                    self.args()?
                } else {
                    Vec::new()
                };
                *e = Expr::Filter(Box::new(prev), Rc::from(name.as_str()), args, pos);
            } else if self.is_name("is") {
                self.bump();
                let negated = self.eat_name("not");
                let name = self.name()?;
                let args = if self.eat_op("(") {
                    self.args()?
                } else if self.test_arg_follows() {
                    let arg = self.primary()?;
                    Vec::from([Arg {
                        name: None,
                        value: self.postfix(arg)?,
                    }])
                } else {
                    Vec::new()
                };
                *e = Expr::Test(Box::new(prev), name, args, pos);
                if negated {
                    let t = core::mem::replace(e, Expr::Lit(Value::Undefined));
                    *e = Expr::Not(Box::new(t));
                }
            } else if self.eat_op("(") {
                *e = Expr::Call(Box::new(prev), self.args()?, pos);
            } else {
                *e = prev;
                return Ok(());
            }
        }
    }

    /// Whether a test's single argument follows without parentheses (`is sameas none`,
    /// `is divisibleby 3`), as Jinja2 decides it.
    fn test_arg_follows(&self) -> bool {
        match self.peek() {
            Tok::Name(n) => !matches!(&**n, "else" | "or" | "and"),
            Tok::Str(_) | Tok::Int(_) | Tok::Float(_) => true,
            Tok::Op(o) => matches!(*o, "(" | "[" | "{"),
            _ => false,
        }
    }
}
