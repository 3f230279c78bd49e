//! Template values, as Python sees them: `None`, bools, ints, floats, strings, lists, dicts (in
//! insertion order), plus Jinja's own (undefined, `namespace`, `loop`, macros, bound methods).
//! Containers are shared (`Rc`): the sandbox is immutable, so only a `namespace` changes.
//!
//! Text forms: [`Value::write_str`] is Python's `str()` (what `{{ x }}` prints: `None`, `True`,
//! `1.0`, `['a', 1]`, `{'k': 'v'}`), [`write_json`] is `json.dumps` as transformers' `tojson`
//! calls it (`ensure_ascii=False`, `indent`, `separators`, `sort_keys`). [`Value::from_json`]
//! reads the conversation through the crate's JSON reader.

use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::cmp::Ordering;
use core::fmt::Write;

use crate::decimal::Shortest;
use crate::error::{Result, Status};
use crate::json::{Kind, Reader};
use crate::{bail, err};

use super::parse::Macro;

/// Deepest nesting of the JSON input and of values written out (repr, JSON).
pub const MAX_VALUE_DEPTH: u32 = 128;

#[derive(Clone, Debug)]
pub enum Value {
    Undefined,
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    /// A string marked safe (`|safe`, markupsafe's `Markup`): only `+` treats it otherwise,
    /// HTML-escaping the plain string on its other side, as `Markup.__add__` does. Every other
    /// use sees a plain string ([`Value::plain`]).
    Markup(Rc<str>),
    List(Rc<Vec<Value>>),
    /// A tuple: a list that prints with parentheses (`items`, `dictsort`, `(a, b)`).
    Tuple(Rc<Vec<Value>>),
    /// What Python's generators are to Jinja2 (the results of `map`, `select`, `selectattr`,
    /// `unique`, the `items` filter): iterable once turned into a list, always true, with no
    /// length and no JSON form.
    Iter(Rc<Vec<Value>>),
    Dict(Rc<Dict>),
    Namespace(Rc<RefCell<Dict>>),
    Loop(Rc<LoopInfo>),
    Macro(Rc<Macro>),
    /// A global function (`range`, `namespace`, `raise_exception`, ...).
    Func(Func),
    /// `obj.method` looked up but not yet called.
    Method(Rc<(Value, Rc<str>)>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Range,
    Namespace,
    Dict,
    RaiseException,
    StrftimeNow,
    Cycle,
}

/// What `loop` holds in one iteration.
#[derive(Debug)]
pub struct LoopInfo {
    pub index0: usize,
    pub length: usize,
    pub prev: Value,
    pub next: Value,
    pub depth0: usize,
}

/// An insertion-ordered dict (Python's): keys are compared by value, lookups are linear (a
/// message or a tool has a handful of keys; big inputs are deduplicated once, when read).
#[derive(Clone, Debug, Default)]
pub struct Dict(pub Vec<(Value, Value)>);

impl Dict {
    pub fn get(&self, key: &Value) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k.py_eq(key)).map(|(_, v)| v)
    }
    pub fn get_str(&self, key: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
            .map(|(_, v)| v)
    }
    pub fn set(&mut self, key: Value, value: Value) {
        match self.0.iter_mut().find(|(k, _)| k.py_eq(&key)) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(Rc::from(s))
    }
    pub fn string(s: String) -> Value {
        Value::Str(Rc::from(s))
    }
    pub fn list(v: Vec<Value>) -> Value {
        Value::List(Rc::new(v))
    }

    /// Python's type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Undefined => "Undefined",
            Value::None => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Markup(_) => "Markup",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Iter(_) => "generator",
            Value::Dict(_) => "dict",
            Value::Namespace(_) => "Namespace",
            Value::Loop(_) => "LoopContext",
            Value::Macro(_) => "Macro",
            Value::Func(_) | Value::Method(_) => "function",
        }
    }

    /// A `Markup` string as a plain one; anything else as it is.
    pub fn plain(self) -> Value {
        match self {
            Value::Markup(s) => Value::Str(s),
            other => other,
        }
    }

    pub fn is_undefined(&self) -> bool {
        matches!(self, Value::Undefined)
    }

    /// Python truthiness.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Undefined | Value::None => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) | Value::Markup(s) => !s.is_empty(),
            Value::List(v) | Value::Tuple(v) => !v.is_empty(),
            Value::Dict(d) => !d.0.is_empty(),
            _ => true,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Markup(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a list or tuple.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    /// A number as f64 (bools are ints in Python).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Bool(b) => Some(*b as i64 as f64),
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Bool(b) => Some(*b as i64),
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// Python `==`.
    pub fn py_eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Str(a) | Value::Markup(a), Value::Str(b) | Value::Markup(b)) => a == b,
            (Value::Undefined, Value::Undefined) | (Value::None, Value::None) => true,
            (a, b) if a.is_number() && b.is_number() => match (a.as_int(), b.as_int()) {
                (Some(x), Some(y)) => x == y,
                _ => a.as_f64() == b.as_f64(),
            },
            (Value::List(a), Value::List(b)) | (Value::Tuple(a), Value::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.py_eq(y))
            }
            (Value::Dict(a), Value::Dict(b)) => {
                a.0.len() == b.0.len()
                    && a.0
                        .iter()
                        .all(|(k, v)| b.get(k).is_some_and(|w| v.py_eq(w)))
            }
            (Value::Namespace(a), Value::Namespace(b)) => Rc::ptr_eq(a, b),
            (Value::Func(a), Value::Func(b)) => a == b,
            (Value::Macro(a), Value::Macro(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }

    fn is_number(&self) -> bool {
        matches!(self, Value::Bool(_) | Value::Int(_) | Value::Float(_))
    }

    /// Python ordering (`<`): numbers with numbers, strings with strings (by code point), lists
    /// item by item; None for types Python refuses to order.
    pub fn py_cmp(&self, other: &Value) -> Option<Ordering> {
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
            (a, b) if a.is_number() && b.is_number() => match (a.as_int(), b.as_int()) {
                (Some(x), Some(y)) => Some(x.cmp(&y)),
                _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
            },
            (Value::List(a), Value::List(b)) | (Value::Tuple(a), Value::Tuple(b)) => {
                for (x, y) in a.iter().zip(b.iter()) {
                    if !x.py_eq(y) {
                        return x.py_cmp(y);
                    }
                }
                Some(a.len().cmp(&b.len()))
            }
            _ => None,
        }
    }

    /// Python `str(x)`, appended to `out` (strings as they are, containers as their repr).
    pub fn write_str(&self, out: &mut String) -> Result<()> {
        match self {
            Value::Str(s) | Value::Markup(s) => out.push_str(s),
            Value::Undefined => {}
            _ => self.write_repr(out, 0)?,
        }
        Ok(())
    }

    /// Python `repr(x)`.
    pub fn write_repr(&self, out: &mut String, depth: u32) -> Result<()> {
        if depth > MAX_VALUE_DEPTH {
            bail!(
                Status::BadFormat,
                "value nested deeper than {MAX_VALUE_DEPTH}"
            );
        }
        match self {
            Value::Undefined => {}
            Value::None => out.push_str("None"),
            Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) => write_float(out, *f),
            Value::Str(s) | Value::Markup(s) => write_py_string(out, s),
            Value::List(v) | Value::Tuple(v) => {
                let tuple = matches!(self, Value::Tuple(_));
                out.push(if tuple { '(' } else { '[' });
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    x.write_repr(out, depth + 1)?;
                }
                if tuple && v.len() == 1 {
                    out.push(',');
                }
                out.push(if tuple { ')' } else { ']' });
            }
            Value::Dict(d) => write_dict_repr(out, &d.0, depth)?,
            Value::Namespace(ns) => {
                out.push_str("<Namespace ");
                write_dict_repr(out, &ns.borrow().0, depth)?;
                out.push('>');
            }
            Value::Loop(_) => out.push_str("<LoopContext>"),
            Value::Iter(_) => out.push_str("<generator object>"),
            Value::Macro(m) => {
                let _ = write!(out, "<Macro '{}'>", m.name);
            }
            Value::Func(_) | Value::Method(_) => out.push_str("<built-in function>"),
        }
        Ok(())
    }

    /// The value of a JSON document (integers that fit i64 as ints, other numbers as floats).
    pub fn from_json(text: &[u8]) -> Result<Value> {
        let mut r = Reader::new(text)?;
        let v = read_json(&mut r)?;
        r.finish()?;
        Ok(v)
    }
}

fn write_dict_repr(out: &mut String, kv: &[(Value, Value)], depth: u32) -> Result<()> {
    out.push('{');
    for (i, (k, v)) in kv.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        k.write_repr(out, depth + 1)?;
        out.push_str(": ");
        v.write_repr(out, depth + 1)?;
    }
    out.push('}');
    Ok(())
}

fn read_json(r: &mut Reader<'_>) -> Result<Value> {
    Ok(match r.peek()? {
        Kind::Null => {
            r.read_null()?;
            Value::None
        }
        Kind::Bool => Value::Bool(r.read_bool()?),
        Kind::Number => {
            let text = r.read_number_text()?;
            match text.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::Float(crate::decimal::parse_f64(text).ok_or_else(|| {
                    err!(Status::BadFormat, "JSON number {text} is out of range")
                })?),
            }
        }
        Kind::String => Value::string(r.read_str()?.to_cow()?.into_owned()),
        Kind::Array => {
            let mut items = Vec::new();
            r.begin_array()?;
            while r.next_item()? {
                items.push(read_json(r)?);
            }
            Value::list(items)
        }
        Kind::Object => {
            let mut d = Dict::default();
            let mut index = alloc::collections::BTreeMap::new();
            r.begin_object()?;
            while let Some(k) = r.next_key()? {
                let key: Rc<str> = Rc::from(k.to_cow()?.as_ref());
                let v = read_json(r)?;
                // A repeated key keeps its first place and its last value, as Python's json.
                match index.get(&key) {
                    Some(&i) => d.0[i] = (Value::Str(key), v),
                    None => {
                        index.insert(key.clone(), d.0.len());
                        d.0.push((Value::Str(key), v));
                    }
                }
            }
            Value::Dict(Rc::new(d))
        }
    })
}

/// Python's `repr(float)`: the shortest digits that read back, fixed notation for exponents
/// -4..16 (always with a fraction: `1.0`), else `1e+16` / `1.5e-05`.
pub fn write_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f < 0.0 { "-inf" } else { "inf" });
        return;
    }
    let mut text = String::new();
    let _ = write!(text, "{}", Shortest::from(f));
    let (sign, body) = match text.strip_prefix('-') {
        Some(b) => ("-", b),
        None => ("", text.as_str()),
    };
    out.push_str(sign);
    if f == 0.0 {
        out.push_str("0.0");
        return;
    }
    // digits d1 d2 ... with value 0.d1d2... * 10^point
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let all: String = int.chars().chain(frac.chars()).collect();
    let lead = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_start_matches('0').trim_end_matches('0');
    let point = int.len() as i32 - lead as i32;
    let exp = point - 1;
    if (-4..16).contains(&exp) {
        if point <= 0 {
            out.push_str("0.");
            (0..-point).for_each(|_| out.push('0'));
            out.push_str(digits);
        } else {
            let p = point as usize;
            if digits.len() <= p {
                out.push_str(digits);
                (digits.len()..p).for_each(|_| out.push('0'));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..p]);
                out.push('.');
                out.push_str(&digits[p..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    }
}

/// Python's `repr(str)`: single quotes unless the text has a `'` and no `"`.
pub fn write_py_string(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (0x80..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// How `tojson` writes: `json.dumps(x, ensure_ascii, indent, separators, sort_keys)`.
pub struct JsonStyle {
    pub ensure_ascii: bool,
    /// The indent text per level (`indent=2` is two spaces), or None for one line.
    pub indent: Option<String>,
    pub item_sep: String,
    pub key_sep: String,
    pub sort_keys: bool,
}

impl JsonStyle {
    /// transformers' defaults: `ensure_ascii=False`, no indent, `, ` and `: `.
    pub fn new(indent: Option<String>) -> JsonStyle {
        let item_sep = if indent.is_some() { "," } else { ", " };
        JsonStyle {
            ensure_ascii: false,
            indent,
            item_sep: item_sep.into(),
            key_sep: ": ".into(),
            sort_keys: false,
        }
    }
}

/// `json.dumps` of a value; undefined values, macros and functions are errors (as Python's
/// TypeError: not JSON serializable).
pub fn write_json(out: &mut String, v: &Value, style: &JsonStyle, depth: u32) -> Result<()> {
    if depth > MAX_VALUE_DEPTH {
        bail!(
            Status::BadFormat,
            "value nested deeper than {MAX_VALUE_DEPTH}"
        );
    }
    let newline = |out: &mut String, level: u32| {
        if let Some(ind) = &style.indent {
            out.push('\n');
            (0..level).for_each(|_| out.push_str(ind));
        }
    };
    match v {
        Value::None => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) if f.is_infinite() => {
            out.push_str(if *f < 0.0 { "-Infinity" } else { "Infinity" })
        }
        Value::Float(f) => write_float(out, *f),
        Value::Str(s) | Value::Markup(s) => write_json_string(out, s, style.ensure_ascii),
        Value::List(items) | Value::Tuple(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, depth + 1);
                write_json(out, x, style, depth + 1)?;
            }
            newline(out, depth);
            out.push(']');
        }
        Value::Dict(_) | Value::Namespace(_) => {
            let kv: Vec<(Value, Value)> = match v {
                Value::Dict(d) => d.0.clone(),
                Value::Namespace(ns) => ns.borrow().0.clone(),
                _ => Vec::new(),
            };
            if kv.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            let mut keys: Vec<(String, &Value)> = Vec::with_capacity(kv.len());
            for (k, x) in &kv {
                let key = match k {
                    Value::Str(s) => String::from(&**s),
                    Value::None => "null".into(),
                    Value::Bool(_) | Value::Int(_) | Value::Float(_) => {
                        let mut s = String::new();
                        write_json(&mut s, k, style, depth + 1)?;
                        s
                    }
                    _ => bail!(
                        Status::InvalidArgument,
                        "tojson: keys must be str, int, float, bool or None, not {}",
                        k.type_name()
                    ),
                };
                keys.push((key, x));
            }
            if style.sort_keys {
                keys.sort_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (i, (k, x)) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, depth + 1);
                write_json_string(out, k, style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_json(out, x, style, depth + 1)?;
            }
            newline(out, depth);
            out.push('}');
        }
        other => bail!(
            Status::InvalidArgument,
            "tojson: Object of type {} is not JSON serializable",
            other.type_name()
        ),
    }
    Ok(())
}

fn write_json_string(out: &mut String, s: &str, ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
