//! The interpreter: runs the tree over the variables with Jinja2's semantics (scopes: a `for`
//! body and a macro get their own, an `if` does not; `namespace` for what must outlive a loop;
//! undefined values print as nothing and fail when used), Python's operators, and the filters,
//! tests and methods chat templates call. Limits ([`Limits`]) bound the output, the steps
//! (statements, loop iterations, calls) and the macro call depth, so a hostile template fails
//! with an error instead of running for ever or exhausting memory.

use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cell::RefCell;
use core::cmp::Ordering;
use core::fmt::Write;

use super::parse::{Arg, BinOp, CmpOp, Expr, For, Macro, Node, Target, error_at};
use super::value::{Dict, Func, JsonStyle, LoopInfo, Value, write_json};
use crate::error::{Error, Result, Status};

/// What one rendering may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest output (and longest string built on the way), in bytes.
    pub max_output: usize,
    /// Most statements, loop iterations and calls.
    pub max_steps: u64,
    /// Deepest macro recursion.
    pub max_call_depth: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_output: 4 << 20,
            max_steps: 1_000_000,
            max_call_depth: 40,
        }
    }
}

/// A civil date and time (what `strftime_now` formats): the caller's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateTime {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl DateTime {
    /// The UTC date and time of `secs` seconds since 1970-01-01.
    pub fn from_unix(secs: i64) -> DateTime {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = (yoe + era * 400 + (month <= 2) as i64) as i32;
        DateTime {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
        }
    }

    fn days_from_civil(&self) -> i64 {
        let y = self.year as i64 - (self.month <= 2) as i64;
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let m = self.month as i64;
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + self.day as i64 - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    /// Python's `strftime` (C locale) for the directives templates use.
    pub fn strftime(&self, fmt: &str, out: &mut String) {
        const DAYS: [&str; 7] = [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ];
        const MONTHS: [&str; 12] = [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ];
        let weekday = (self.days_from_civil() + 3).rem_euclid(7) as usize; // 0 = Monday
        let month = MONTHS[(self.month.clamp(1, 12) - 1) as usize];
        let yday = self.days_from_civil()
            - DateTime {
                month: 1,
                day: 1,
                ..*self
            }
            .days_from_civil()
            + 1;
        let mut it = fmt.chars();
        while let Some(c) = it.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let mut d = it.next();
            let no_pad = d == Some('-');
            if no_pad {
                d = it.next();
            }
            let num = |out: &mut String, v: i64, w: usize| {
                if no_pad {
                    let _ = write!(out, "{v}");
                } else {
                    let _ = write!(out, "{v:0w$}");
                }
            };
            match d {
                Some('Y') => {
                    let _ = write!(out, "{}", self.year);
                }
                Some('y') => num(out, self.year.rem_euclid(100) as i64, 2),
                Some('m') => num(out, self.month as i64, 2),
                Some('d') => num(out, self.day as i64, 2),
                Some('e') => {
                    let _ = write!(out, "{:2}", self.day);
                }
                Some('H') => num(out, self.hour as i64, 2),
                Some('I') => num(out, ((self.hour + 11) % 12 + 1) as i64, 2),
                Some('M') => num(out, self.minute as i64, 2),
                Some('S') => num(out, self.second as i64, 2),
                Some('j') => num(out, yday, 3),
                Some('p') => out.push_str(if self.hour < 12 { "AM" } else { "PM" }),
                Some('B') => out.push_str(month),
                Some('b') | Some('h') => out.push_str(&month[..3]),
                Some('A') => out.push_str(DAYS[weekday]),
                Some('a') => out.push_str(&DAYS[weekday][..3]),
                Some('u') => num(out, weekday as i64 + 1, 1),
                Some('w') => num(out, (weekday as i64 + 1) % 7, 1),
                Some('F') => {
                    let _ = write!(out, "{}-{:02}-{:02}", self.year, self.month, self.day);
                }
                Some('T') => {
                    let _ = write!(
                        out,
                        "{:02}:{:02}:{:02}",
                        self.hour, self.minute, self.second
                    );
                }
                Some('Z') | Some('z') => {}
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
    }
}

enum Flow {
    Normal,
    Break,
    Continue,
}

type Frame = Vec<(Rc<str>, Value)>;

/// Positional and keyword arguments of a call.
struct Args {
    pos: Vec<Value>,
    kw: Vec<(Rc<str>, Value)>,
}

impl Args {
    /// Argument `i` by position, else by `name`.
    fn get(&self, i: usize, name: &str) -> Option<&Value> {
        self.pos
            .get(i)
            .or_else(|| self.kw.iter().find(|(k, _)| &**k == name).map(|(_, v)| v))
    }
    fn or(&self, i: usize, name: &str, default: Value) -> Value {
        self.get(i, name).cloned().unwrap_or(default)
    }
    fn flag(&self, i: usize, name: &str) -> bool {
        self.get(i, name).is_some_and(Value::truthy)
    }
}

pub struct Renderer<'a> {
    src: &'a str,
    limits: Limits,
    now: Option<DateTime>,
    frames: Vec<Frame>,
    /// The first frame a lookup may read (a macro's own), besides the root frame 0.
    base: usize,
    out: String,
    steps: u64,
    calls: u32,
    /// The `caller` of the next macro call (a `{% call %}` block).
    caller: Option<Value>,
}

const DICT_METHODS: [&str; 10] = [
    "items",
    "keys",
    "values",
    "get",
    "pop",
    "update",
    "setdefault",
    "clear",
    "popitem",
    "copy",
];
const LIST_METHODS: [&str; 11] = [
    "append", "pop", "extend", "insert", "remove", "reverse", "sort", "clear", "index", "count",
    "copy",
];
const MUTATORS: [&str; 11] = [
    "append",
    "pop",
    "extend",
    "insert",
    "remove",
    "reverse",
    "sort",
    "clear",
    "update",
    "setdefault",
    "popitem",
];
const STR_METHODS: [&str; 34] = [
    "strip",
    "lstrip",
    "rstrip",
    "split",
    "rsplit",
    "splitlines",
    "startswith",
    "endswith",
    "replace",
    "upper",
    "lower",
    "title",
    "capitalize",
    "swapcase",
    "find",
    "rfind",
    "index",
    "rindex",
    "count",
    "join",
    "format",
    "isdigit",
    "isalpha",
    "isalnum",
    "isspace",
    "isupper",
    "islower",
    "isnumeric",
    "removeprefix",
    "removesuffix",
    "partition",
    "rpartition",
    "zfill",
    "center",
];

/// Python's `str.isspace` for one character (Rust's White_Space plus the four separators
/// U+001C..U+001F that Python counts as whitespace).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

impl<'a> Renderer<'a> {
    pub fn new(src: &'a str, vars: Frame, limits: Limits, now: Option<DateTime>) -> Self {
        Renderer {
            src,
            limits,
            now,
            frames: Vec::from([vars]),
            base: 0,
            out: String::new(),
            steps: 0,
            calls: 0,
            caller: None,
        }
    }

    pub fn render(mut self, nodes: &[Node]) -> Result<String> {
        match self.exec(nodes)? {
            Flow::Normal => Ok(self.out),
            _ => Err(self.fail(0, format_args!("'break' or 'continue' outside a loop"))),
        }
    }

    fn fail(&self, pos: u32, msg: core::fmt::Arguments<'_>) -> Error {
        error_at(self.src, pos as usize, Status::InvalidArgument, msg)
    }

    fn step(&mut self, pos: u32) -> Result<()> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            return Err(self.fail(
                pos,
                format_args!(
                    "the template ran past {} steps (a loop that does not end?)",
                    self.limits.max_steps
                ),
            ));
        }
        Ok(())
    }

    fn check_len(&self, len: usize, pos: u32) -> Result<()> {
        if len > self.limits.max_output {
            return Err(self.fail(
                pos,
                format_args!("output grew past {} bytes", self.limits.max_output),
            ));
        }
        Ok(())
    }

    fn emit(&mut self, s: &str, pos: u32) -> Result<()> {
        self.check_len(self.out.len() + s.len(), pos)?;
        self.out
            .try_reserve(s.len())
            .map_err(|_| self.fail(pos, format_args!("out of memory writing the output")))?;
        self.out.push_str(s);
        Ok(())
    }

    fn lookup(&self, name: &str) -> Option<Value> {
        let scan = |f: &Frame| {
            f.iter()
                .rev()
                .find(|(k, _)| &**k == name)
                .map(|(_, v)| v.clone())
        };
        for f in self.frames[self.base.max(1).min(self.frames.len())..]
            .iter()
            .rev()
        {
            if let Some(v) = scan(f) {
                return Some(v);
            }
        }
        if let Some(v) = scan(&self.frames[0]) {
            return Some(v);
        }
        Some(Value::Func(match name {
            "range" => Func::Range,
            "namespace" => Func::Namespace,
            "dict" => Func::Dict,
            "raise_exception" => Func::RaiseException,
            "strftime_now" => Func::StrftimeNow,
            _ => return None,
        }))
    }

    fn assign(&mut self, name: &Rc<str>, v: Value) {
        let frame = self.frames.last_mut().expect("the root frame");
        match frame.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = v,
            None => frame.push((name.clone(), v)),
        }
    }

    fn bind(&mut self, target: &Target, v: Value, pos: u32) -> Result<()> {
        match target {
            Target::Name(n) => self.assign(n, v),
            Target::Tuple(names) => {
                let items = self.iterate(&v, pos)?;
                if items.len() != names.len() {
                    return Err(self.fail(
                        pos,
                        format_args!(
                            "cannot unpack {} values into {} names",
                            items.len(),
                            names.len()
                        ),
                    ));
                }
                for (n, x) in names.iter().zip(items) {
                    self.assign(n, x);
                }
            }
            Target::Attr(obj, attr) => match self.lookup(obj) {
                Some(Value::Namespace(ns)) => {
                    ns.borrow_mut().set(Value::Str(attr.clone()), v);
                }
                _ => {
                    return Err(self.fail(
                        pos,
                        format_args!("cannot assign attribute on non-namespace object '{obj}'"),
                    ));
                }
            },
        }
        Ok(())
    }

    fn exec(&mut self, nodes: &[Node]) -> Result<Flow> {
        for node in nodes {
            match node {
                Node::Text(t) => self.emit(t, 0)?,
                Node::Output(e) => {
                    let v = self.eval(e)?;
                    let pos = expr_pos(e);
                    match &v {
                        Value::Str(s) | Value::Markup(s) => self.emit(s, pos)?,
                        Value::Undefined => {}
                        other => {
                            let mut s = String::new();
                            other.write_str(&mut s)?;
                            self.emit(&s, pos)?;
                        }
                    }
                }
                Node::If(arms, els) => {
                    let mut taken = None;
                    for (cond, body) in arms {
                        if self.eval(cond)?.truthy() {
                            taken = Some(body);
                            break;
                        }
                    }
                    let flow = self.exec(taken.unwrap_or(els))?;
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::For(f) => self.run_for(f)?,
                Node::Set(target, e, pos) => {
                    self.step(*pos)?;
                    let v = self.eval(e)?;
                    self.bind(target, v, *pos)?;
                }
                Node::SetBlock(target, body, pos) => {
                    let text = self.capture(body, *pos)?;
                    self.bind(target, Value::string(text), *pos)?;
                }
                Node::Macro(m) => {
                    let name = m.name.clone();
                    self.assign(&name, Value::Macro(m.clone()));
                }
                Node::CallBlock(caller, call) => {
                    self.caller = Some(Value::Macro(caller.clone()));
                    let v = self.eval(call)?;
                    self.caller = None;
                    let mut s = String::new();
                    v.write_str(&mut s)?;
                    self.emit(&s, expr_pos(call))?;
                }
                Node::FilterBlock(name, args, body, pos) => {
                    let text = self.capture(body, *pos)?;
                    let args = self.eval_args(args)?;
                    let v = self.filter(Value::string(text), name, &args, *pos)?;
                    let mut s = String::new();
                    v.write_str(&mut s)?;
                    self.emit(&s, *pos)?;
                }
                Node::Break(_) => return Ok(Flow::Break),
                Node::Continue(_) => return Ok(Flow::Continue),
            }
        }
        Ok(Flow::Normal)
    }

    /// Renders `body` into a string of its own (set blocks, macros, filter blocks).
    fn capture(&mut self, body: &[Node], pos: u32) -> Result<String> {
        let saved = core::mem::take(&mut self.out);
        let r = self.exec(body);
        let text = core::mem::replace(&mut self.out, saved);
        match r? {
            Flow::Normal => Ok(text),
            _ => Err(self.fail(pos, format_args!("'break' or 'continue' outside a loop"))),
        }
    }

    fn run_for(&mut self, f: &For) -> Result<()> {
        let seq = self.eval(&f.iter)?;
        let mut items = self.iterate(&seq, f.pos)?;
        if f.recursive {
            return Err(self.fail(f.pos, format_args!("recursive loops are not supported")));
        }
        if let Some(cond) = &f.cond {
            let mut kept = Vec::new();
            for x in items {
                self.step(f.pos)?;
                self.frames.push(Frame::new());
                let r = self
                    .bind(&f.target, x.clone(), f.pos)
                    .and_then(|()| self.eval(cond));
                self.frames.pop();
                if r?.truthy() {
                    kept.push(x);
                }
            }
            items = kept;
        }
        if items.is_empty() {
            self.exec(&f.else_body)?;
            return Ok(());
        }
        let n = items.len();
        let loop_name: Rc<str> = Rc::from("loop");
        for i in 0..n {
            self.step(f.pos)?;
            let info = LoopInfo {
                index0: i,
                length: n,
                prev: if i > 0 {
                    items[i - 1].clone()
                } else {
                    Value::Undefined
                },
                next: items.get(i + 1).cloned().unwrap_or(Value::Undefined),
                depth0: 0,
            };
            self.frames
                .push(Vec::from([(loop_name.clone(), Value::Loop(Rc::new(info)))]));
            let r = self
                .bind(&f.target, items[i].clone(), f.pos)
                .and_then(|()| self.exec(&f.body));
            self.frames.pop();
            if let Flow::Break = r? {
                break;
            }
        }
        Ok(())
    }

    /// The items a `for` (or a filter) walks: a list's items, a dict's keys, a string's
    /// characters; nothing for an undefined value.
    fn iterate(&self, v: &Value, pos: u32) -> Result<Vec<Value>> {
        Ok(match v {
            Value::List(x) | Value::Tuple(x) | Value::Iter(x) => x.to_vec(),
            Value::Dict(d) => d.0.iter().map(|(k, _)| k.clone()).collect(),
            Value::Str(s) => s.chars().map(|c| Value::string(c.into())).collect(),
            Value::Undefined => Vec::new(),
            other => {
                return Err(self.fail(
                    pos,
                    format_args!("'{}' object is not iterable", other.type_name()),
                ));
            }
        })
    }

    fn eval_args(&mut self, args: &[Arg]) -> Result<Args> {
        let mut out = Args {
            pos: Vec::new(),
            kw: Vec::new(),
        };
        for a in args {
            let v = self.eval(&a.value)?;
            match &a.name {
                Some(n) => out.kw.push((n.clone(), v)),
                None => out.pos.push(v),
            }
        }
        Ok(out)
    }

    fn eval(&mut self, e: &Expr) -> Result<Value> {
        Ok(match e {
            Expr::Lit(v) => v.clone(),
            Expr::Name(n, _) => self.lookup(n).unwrap_or(Value::Undefined),
            Expr::List(items) => {
                let mut v = Vec::with_capacity(items.len());
                for x in items {
                    v.push(self.eval(x)?);
                }
                Value::list(v)
            }
            Expr::Tuple(items) => {
                let mut v = Vec::with_capacity(items.len());
                for x in items {
                    v.push(self.eval(x)?);
                }
                Value::Tuple(Rc::new(v))
            }
            Expr::Dict(items) => {
                let mut d = Dict::default();
                for (k, x) in items {
                    let k = self.eval(k)?;
                    let x = self.eval(x)?;
                    d.set(k, x);
                }
                Value::Dict(Rc::new(d))
            }
            Expr::Attr(obj, name, pos) => {
                let o = self.eval(obj)?.plain();
                self.get_attr(&o, name, *pos)?
            }
            Expr::Item(obj, key, pos) => {
                let o = self.eval(obj)?.plain();
                let k = self.eval(key)?.plain();
                self.get_item(&o, &k, *pos)?
            }
            Expr::Slice(obj, parts, pos) => {
                let o = self.eval(obj)?.plain();
                let mut p = [None, None, None];
                for (slot, x) in p.iter_mut().zip(parts.iter()) {
                    if let Some(x) = x {
                        let v = self.eval(x)?;
                        if !matches!(v, Value::None) {
                            *slot = Some(v.as_int().ok_or_else(|| {
                                self.fail(*pos, format_args!("slice indices must be integers"))
                            })?);
                        }
                    }
                }
                self.slice(&o, p, *pos)?
            }
            Expr::Call(callee, args, pos) => {
                self.step(*pos)?;
                if let Expr::Attr(obj, name, apos) = &**callee {
                    let o = self.eval(obj)?.plain();
                    let args = self.eval_args(args)?;
                    return self.call_method(&o, name, &args, *apos);
                }
                let f = self.eval(callee)?;
                let args = self.eval_args(args)?;
                self.call(&f, &args, *pos)?
            }
            Expr::Filter(v, name, args, pos) => {
                let x = self.eval(v)?.plain();
                let args = self.eval_args(args)?;
                self.filter(x, name, &args, *pos)?
            }
            Expr::Test(v, name, args, pos) => {
                let x = self.eval(v)?.plain();
                let args = self.eval_args(args)?;
                Value::Bool(self.test(&x, name, &args, *pos)?)
            }
            Expr::Not(x) => Value::Bool(!self.eval(x)?.truthy()),
            Expr::Neg(x, pos) => match self.eval(x)? {
                Value::Int(i) => Value::Int(
                    i.checked_neg()
                        .ok_or_else(|| self.fail(*pos, format_args!("integer overflow")))?,
                ),
                Value::Bool(b) => Value::Int(-(b as i64)),
                Value::Float(f) => Value::Float(-f),
                other => {
                    return Err(self.fail(
                        *pos,
                        format_args!("bad operand type for unary -: '{}'", other.type_name()),
                    ));
                }
            },
            Expr::Bin(op, a, b, pos) => {
                let a = self.eval(a)?;
                let b = self.eval(b)?;
                self.binary(*op, &a, &b, *pos)?
            }
            Expr::Concat(parts, pos) => {
                let mut s = String::new();
                for p in parts {
                    self.eval(p)?.write_str(&mut s)?;
                    self.check_len(s.len(), *pos)?;
                }
                Value::string(s)
            }
            Expr::And(a, b) => {
                let a = self.eval(a)?;
                if !a.truthy() { a } else { self.eval(b)? }
            }
            Expr::Or(a, b) => {
                let a = self.eval(a)?;
                if a.truthy() { a } else { self.eval(b)? }
            }
            Expr::Compare(first, ops, pos) => {
                let mut left = self.eval(first)?;
                for (op, e) in ops {
                    let right = self.eval(e)?;
                    if !self.compare(*op, &left, &right, *pos)? {
                        return Ok(Value::Bool(false));
                    }
                    left = right;
                }
                Value::Bool(true)
            }
            Expr::Cond(cond, then, other) => {
                if self.eval(cond)?.truthy() {
                    self.eval(then)?
                } else if let Some(o) = other {
                    self.eval(o)?
                } else {
                    Value::Undefined
                }
            }
        })
    }

    fn undefined_use(&self, pos: u32, what: &str) -> Error {
        self.fail(pos, format_args!("{what} of an undefined value"))
    }

    fn get_attr(&self, o: &Value, name: &Rc<str>, pos: u32) -> Result<Value> {
        let method = |o: &Value| Value::Method(Rc::new((o.clone(), name.clone())));
        Ok(match o {
            Value::Undefined => {
                return Err(self.fail(
                    pos,
                    format_args!("'{name}' looked up on an undefined value"),
                ));
            }
            Value::Dict(d) => {
                if DICT_METHODS.contains(&&**name) {
                    method(o)
                } else {
                    d.get_str(name).cloned().unwrap_or(Value::Undefined)
                }
            }
            Value::Namespace(ns) => ns
                .borrow()
                .get_str(name)
                .cloned()
                .unwrap_or(Value::Undefined),
            Value::Loop(l) => loop_attr(l, name).unwrap_or_else(|| {
                if &**name == "cycle" {
                    method(o)
                } else {
                    Value::Undefined
                }
            }),
            Value::Str(_) if STR_METHODS.contains(&&**name) => method(o),
            Value::List(_) if LIST_METHODS.contains(&&**name) => method(o),
            _ => Value::Undefined,
        })
    }

    fn get_item(&self, o: &Value, k: &Value, pos: u32) -> Result<Value> {
        Ok(match (o, k) {
            (Value::Undefined, _) => return Err(self.undefined_use(pos, "subscript")),
            (Value::Dict(d), k) => d.get(k).cloned().unwrap_or(Value::Undefined),
            (Value::List(v) | Value::Tuple(v), k) if k.as_int().is_some() => {
                let i = k.as_int().unwrap_or(0);
                let i = if i < 0 { i + v.len() as i64 } else { i };
                usize::try_from(i)
                    .ok()
                    .and_then(|i| v.get(i))
                    .cloned()
                    .unwrap_or(Value::Undefined)
            }
            (Value::Str(s), k) if k.as_int().is_some() => {
                let i = k.as_int().unwrap_or(0);
                let n = s.chars().count() as i64;
                let i = if i < 0 { i + n } else { i };
                if (0..n).contains(&i) {
                    s.chars()
                        .nth(i as usize)
                        .map_or(Value::Undefined, |c| Value::string(c.into()))
                } else {
                    Value::Undefined
                }
            }
            (Value::Namespace(_) | Value::Loop(_), Value::Str(name)) => {
                self.get_attr(o, name, pos)?
            }
            _ => Value::Undefined,
        })
    }

    /// Python slicing `o[start:stop:step]` of lists, tuples and strings.
    fn slice(&self, o: &Value, p: [Option<i64>; 3], pos: u32) -> Result<Value> {
        let step = p[2].unwrap_or(1);
        if step == 0 {
            return Err(self.fail(pos, format_args!("slice step cannot be zero")));
        }
        let pick = |n: usize| -> Vec<usize> {
            let n = n as i64;
            let clamp = |i: Option<i64>, default: i64| -> i64 {
                match i {
                    None => default,
                    Some(i) => {
                        let i = if i < 0 { i + n } else { i };
                        if step > 0 {
                            i.clamp(0, n)
                        } else {
                            i.clamp(-1, n - 1)
                        }
                    }
                }
            };
            let (start, stop) = if step > 0 {
                (clamp(p[0], 0), clamp(p[1], n))
            } else {
                (clamp(p[0], n - 1), clamp(p[1], -1))
            };
            let mut idx = Vec::new();
            let mut i = start;
            while (step > 0 && i < stop) || (step < 0 && i > stop) {
                idx.push(i as usize);
                i += step;
            }
            idx
        };
        Ok(match o {
            Value::List(v) | Value::Tuple(v) => {
                let items: Vec<Value> = pick(v.len()).into_iter().map(|i| v[i].clone()).collect();
                if matches!(o, Value::Tuple(_)) {
                    Value::Tuple(Rc::new(items))
                } else {
                    Value::list(items)
                }
            }
            Value::Str(s) => {
                let chars: Vec<char> = s.chars().collect();
                Value::string(pick(chars.len()).into_iter().map(|i| chars[i]).collect())
            }
            Value::Undefined => return Err(self.undefined_use(pos, "slice")),
            other => {
                return Err(self.fail(
                    pos,
                    format_args!("'{}' object is not subscriptable", other.type_name()),
                ));
            }
        })
    }

    fn call(&mut self, f: &Value, args: &Args, pos: u32) -> Result<Value> {
        match f {
            Value::Macro(m) => self.call_macro(m, args, pos),
            Value::Method(m) => {
                let (o, name) = &**m;
                self.call_method(o, name, args, pos)
            }
            Value::Func(func) => self.call_func(*func, args, pos),
            Value::Undefined => Err(self.fail(pos, format_args!("call of an undefined value"))),
            other => Err(self.fail(
                pos,
                format_args!("'{}' object is not callable", other.type_name()),
            )),
        }
    }

    fn call_macro(&mut self, m: &Rc<Macro>, args: &Args, pos: u32) -> Result<Value> {
        if args.pos.len() > m.params.len() {
            return Err(self.fail(
                pos,
                format_args!(
                    "macro '{}' takes not more than {} argument(s)",
                    m.name,
                    m.params.len()
                ),
            ));
        }
        self.calls += 1;
        if self.calls > self.limits.max_call_depth {
            return Err(self.fail(
                pos,
                format_args!(
                    "macro calls nested deeper than {}",
                    self.limits.max_call_depth
                ),
            ));
        }
        let saved_base = self.base;
        let caller = self.caller.take();
        self.frames.push(Frame::new());
        self.base = self.frames.len() - 1;
        let mut r = Ok(());
        for (i, (name, default)) in m.params.iter().enumerate() {
            let v = match args.get(i, name) {
                Some(v) => v.clone(),
                None => match default {
                    Some(d) => match self.eval(d) {
                        Ok(v) => v,
                        Err(e) => {
                            r = Err(e);
                            break;
                        }
                    },
                    None => Value::Undefined,
                },
            };
            self.assign(name, v);
        }
        if let Some(c) = caller {
            self.assign(&Rc::from("caller"), c);
        }
        let text = r.and_then(|()| self.capture(&m.body, pos));
        self.frames.pop();
        self.base = saved_base;
        self.calls -= 1;
        Ok(Value::string(text?))
    }

    fn call_func(&mut self, f: Func, args: &Args, pos: u32) -> Result<Value> {
        match f {
            Func::Range => {
                let ints: Vec<i64> = args.pos.iter().filter_map(Value::as_int).collect();
                if ints.len() != args.pos.len() || ints.is_empty() || ints.len() > 3 {
                    return Err(self.fail(pos, format_args!("range() takes 1-3 integers")));
                }
                let (start, stop, step) = match ints[..] {
                    [stop] => (0, stop, 1),
                    [start, stop] => (start, stop, 1),
                    [start, stop, step] => (start, stop, step),
                    _ => (0, 0, 1),
                };
                if step == 0 {
                    return Err(self.fail(pos, format_args!("range() arg 3 must not be zero")));
                }
                let n = if step > 0 {
                    (stop.saturating_sub(start).max(0) as u64).div_ceil(step as u64)
                } else {
                    (start.saturating_sub(stop).max(0) as u64).div_ceil(step.unsigned_abs())
                };
                if n > self.limits.max_steps {
                    return Err(self.fail(
                        pos,
                        format_args!("range of {n} items is past the step limit"),
                    ));
                }
                Ok(Value::list(
                    (0..n as i64)
                        .map(|i| Value::Int(start.saturating_add(i.saturating_mul(step))))
                        .collect(),
                ))
            }
            Func::Namespace | Func::Dict => {
                let mut d = Dict::default();
                if let Some(Value::Dict(init)) = args.pos.first() {
                    d = (**init).clone();
                }
                for (k, v) in &args.kw {
                    d.set(Value::Str(k.clone()), v.clone());
                }
                Ok(if f == Func::Namespace {
                    Value::Namespace(Rc::new(RefCell::new(d)))
                } else {
                    Value::Dict(Rc::new(d))
                })
            }
            Func::RaiseException => {
                let mut msg = String::new();
                args.or(0, "message", Value::None).write_str(&mut msg)?;
                Err(self.fail(pos, format_args!("raise_exception: {msg}")))
            }
            Func::StrftimeNow => {
                let Some(now) = self.now else {
                    return Err(self.fail(pos, format_args!("strftime_now: no clock was given")));
                };
                let fmt = args.or(0, "format", Value::str(""));
                let mut s = String::new();
                now.strftime(fmt.as_str().unwrap_or(""), &mut s);
                Ok(Value::string(s))
            }
            Func::Cycle => Err(self.fail(pos, format_args!("cycle() outside a loop"))),
        }
    }

    fn call_method(&mut self, o: &Value, name: &str, args: &Args, pos: u32) -> Result<Value> {
        let arg_str = |i: usize, n: &str| -> Option<String> {
            args.get(i, n).and_then(|v| v.as_str().map(String::from))
        };
        match o {
            Value::Str(s) if STR_METHODS.contains(&name) => {
                return self.str_method(s, name, args, pos);
            }
            Value::Dict(d) if DICT_METHODS.contains(&name) => {
                return Ok(match name {
                    "get" => {
                        let k = args.or(0, "key", Value::None);
                        d.get(&k)
                            .cloned()
                            .unwrap_or(args.or(1, "default", Value::None))
                    }
                    "items" => Value::list(
                        d.0.iter()
                            .map(|(k, v)| Value::Tuple(Rc::new(Vec::from([k.clone(), v.clone()]))))
                            .collect(),
                    ),
                    "keys" => Value::list(d.0.iter().map(|(k, _)| k.clone()).collect()),
                    "values" => Value::list(d.0.iter().map(|(_, v)| v.clone()).collect()),
                    "copy" => Value::Dict(d.clone()),
                    _ => return Err(self.unsafe_method(name, "dict", pos)),
                });
            }
            Value::List(v) if LIST_METHODS.contains(&name) => {
                if MUTATORS.contains(&name) {
                    return Err(self.unsafe_method(name, "list", pos));
                }
                let x = args.or(0, "x", Value::Undefined);
                return Ok(match name {
                    "count" => Value::Int(v.iter().filter(|y| y.py_eq(&x)).count() as i64),
                    "copy" => Value::List(v.clone()),
                    _ => match v.iter().position(|y| y.py_eq(&x)) {
                        Some(i) => Value::Int(i as i64),
                        None => {
                            return Err(self.fail(pos, format_args!("value is not in list")));
                        }
                    },
                });
            }
            Value::Loop(l) if name == "cycle" => {
                if args.pos.is_empty() {
                    return Err(self.fail(pos, format_args!("no items for cycling given")));
                }
                return Ok(args.pos[l.index0 % args.pos.len()].clone());
            }
            Value::Undefined => {
                return Err(self.fail(pos, format_args!("'{name}' called on an undefined value")));
            }
            _ => {}
        }
        let _ = arg_str;
        // Not a method: maybe an attribute holding a callable (a macro in a namespace).
        let f = self.get_attr(o, &Rc::from(name), pos)?;
        match f {
            Value::Undefined => Err(self.fail(
                pos,
                format_args!("'{}' object has no attribute '{name}'", o.type_name()),
            )),
            f => self.call(&f, args, pos),
        }
    }

    fn unsafe_method(&self, name: &str, ty: &str, pos: u32) -> Error {
        self.fail(
            pos,
            format_args!("access to attribute '{name}' of '{ty}' object is unsafe"),
        )
    }

    fn str_method(&self, s: &str, name: &str, args: &Args, pos: u32) -> Result<Value> {
        let sarg = |i: usize, n: &str| -> Result<Option<String>> {
            match args.get(i, n) {
                None | Some(Value::None) => Ok(None),
                Some(Value::Str(x)) => Ok(Some(String::from(&**x))),
                Some(other) => Err(self.fail(
                    pos,
                    format_args!("{name}() argument must be str, not {}", other.type_name()),
                )),
            }
        };
        let strip_set = |chars: &Option<String>| {
            let chars = chars.clone();
            move |c: char| match &chars {
                Some(set) => set.contains(c),
                None => py_space(c),
            }
        };
        Ok(match name {
            "strip" => Value::str(s.trim_matches(strip_set(&sarg(0, "chars")?))),
            "lstrip" => Value::str(s.trim_start_matches(strip_set(&sarg(0, "chars")?))),
            "rstrip" => Value::str(s.trim_end_matches(strip_set(&sarg(0, "chars")?))),
            "upper" => Value::string(s.to_uppercase()),
            "lower" => Value::string(s.to_lowercase()),
            "title" => Value::string(title(s)),
            "capitalize" => Value::string(capitalize(s)),
            "swapcase" => Value::string(
                s.chars()
                    .flat_map(|c| {
                        let v: Vec<char> = if c.is_uppercase() {
                            c.to_lowercase().collect()
                        } else {
                            c.to_uppercase().collect()
                        };
                        v
                    })
                    .collect(),
            ),
            "split" | "rsplit" => {
                let sep = sarg(0, "sep")?;
                let max = args
                    .get(1, "maxsplit")
                    .and_then(Value::as_int)
                    .unwrap_or(-1);
                Value::list(
                    py_split(s, sep.as_deref(), max, name == "rsplit")
                        .ok_or_else(|| self.fail(pos, format_args!("empty separator")))?
                        .into_iter()
                        .map(Value::string)
                        .collect(),
                )
            }
            "splitlines" => Value::list(s.lines().map(Value::str).collect()),
            "startswith" | "endswith" => {
                let pats: Vec<String> = match args.get(0, "prefix") {
                    Some(Value::Str(p)) => Vec::from([String::from(&**p)]),
                    Some(Value::Tuple(t)) | Some(Value::List(t)) => t
                        .iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect(),
                    _ => {
                        return Err(self.fail(
                            pos,
                            format_args!("{name} first arg must be str or a tuple of str"),
                        ));
                    }
                };
                Value::Bool(pats.iter().any(|p| {
                    if name == "startswith" {
                        s.starts_with(p.as_str())
                    } else {
                        s.ends_with(p.as_str())
                    }
                }))
            }
            "replace" => {
                let (Some(old), Some(new)) = (sarg(0, "old")?, sarg(1, "new")?) else {
                    return Err(self.fail(pos, format_args!("replace() takes two strings")));
                };
                let count = args.get(2, "count").and_then(Value::as_int).unwrap_or(-1);
                let r = py_replace(s, &old, &new, count);
                self.check_len(r.len(), pos)?;
                Value::string(r)
            }
            "find" | "rfind" | "index" | "rindex" | "count" => {
                let sub = sarg(0, "sub")?.unwrap_or_default();
                if name == "count" {
                    return Ok(Value::Int(if sub.is_empty() {
                        s.chars().count() as i64 + 1
                    } else {
                        s.matches(sub.as_str()).count() as i64
                    }));
                }
                let at = if name.starts_with('r') {
                    s.rfind(sub.as_str())
                } else {
                    s.find(sub.as_str())
                };
                match at {
                    Some(b) => Value::Int(s[..b].chars().count() as i64),
                    None if name.ends_with("find") => Value::Int(-1),
                    None => return Err(self.fail(pos, format_args!("substring not found"))),
                }
            }
            "join" => {
                let items = self.iterate(&args.or(0, "iterable", Value::Undefined), pos)?;
                let mut out = String::new();
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(s);
                    }
                    match x {
                        Value::Str(t) => out.push_str(t),
                        other => {
                            return Err(self.fail(
                                pos,
                                format_args!(
                                    "sequence item {i}: expected str instance, {} found",
                                    other.type_name()
                                ),
                            ));
                        }
                    }
                    self.check_len(out.len(), pos)?;
                }
                Value::string(out)
            }
            "format" => Value::string(self.py_format(s, args, pos)?),
            "isdigit" | "isnumeric" => {
                Value::Bool(!s.is_empty() && s.chars().all(|c| c.is_numeric()))
            }
            "isalpha" => Value::Bool(!s.is_empty() && s.chars().all(char::is_alphabetic)),
            "isalnum" => Value::Bool(!s.is_empty() && s.chars().all(char::is_alphanumeric)),
            "isspace" => Value::Bool(!s.is_empty() && s.chars().all(py_space)),
            "isupper" => {
                Value::Bool(s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase))
            }
            "islower" => {
                Value::Bool(s.chars().any(char::is_lowercase) && !s.chars().any(char::is_uppercase))
            }
            "removeprefix" => {
                let p = sarg(0, "prefix")?.unwrap_or_default();
                Value::str(s.strip_prefix(p.as_str()).unwrap_or(s))
            }
            "removesuffix" => {
                let p = sarg(0, "suffix")?.unwrap_or_default();
                Value::str(s.strip_suffix(p.as_str()).unwrap_or(s))
            }
            "partition" | "rpartition" => {
                let sep = sarg(0, "sep")?.unwrap_or_default();
                if sep.is_empty() {
                    return Err(self.fail(pos, format_args!("empty separator")));
                }
                let at = if name == "partition" {
                    s.find(sep.as_str())
                } else {
                    s.rfind(sep.as_str())
                };
                let parts = match at {
                    Some(i) => [&s[..i], sep.as_str(), &s[i + sep.len()..]],
                    None if name == "partition" => [s, "", ""],
                    None => ["", "", s],
                };
                Value::Tuple(Rc::new(parts.iter().map(|p| Value::str(p)).collect()))
            }
            "zfill" | "center" => {
                let width = args
                    .get(0, "width")
                    .and_then(Value::as_int)
                    .unwrap_or(0)
                    .max(0) as usize;
                self.check_len(width, pos)?;
                let n = s.chars().count();
                if width <= n {
                    Value::str(s)
                } else if name == "zfill" {
                    let (sign, rest) = match s.chars().next() {
                        Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
                        _ => (None, s),
                    };
                    let mut out = String::new();
                    out.extend(sign);
                    (0..width - n).for_each(|_| out.push('0'));
                    out.push_str(rest);
                    Value::string(out)
                } else {
                    let total = width - n;
                    let left = total / 2 + (total & width & 1);
                    let mut out = String::new();
                    (0..left).for_each(|_| out.push(' '));
                    out.push_str(s);
                    (0..total - left).for_each(|_| out.push(' '));
                    Value::string(out)
                }
            }
            _ => return Err(self.fail(pos, format_args!("str has no method '{name}'"))),
        })
    }

    /// `str.format`: `{}`, `{0}`, `{name}`, `{{`/`}}` (no format specs beyond an empty one).
    fn py_format(&self, s: &str, args: &Args, pos: u32) -> Result<String> {
        let mut out = String::new();
        let mut auto = 0usize;
        let mut it = s.chars().peekable();
        while let Some(c) = it.next() {
            match c {
                '{' if it.peek() == Some(&'{') => {
                    it.next();
                    out.push('{');
                }
                '}' if it.peek() == Some(&'}') => {
                    it.next();
                    out.push('}');
                }
                '{' => {
                    let mut field = String::new();
                    for d in it.by_ref() {
                        if d == '}' {
                            break;
                        }
                        field.push(d);
                    }
                    let key = field.split(':').next().unwrap_or("");
                    let v = if key.is_empty() {
                        auto += 1;
                        args.pos.get(auto - 1)
                    } else if let Ok(i) = key.parse::<usize>() {
                        args.pos.get(i)
                    } else {
                        args.kw.iter().find(|(k, _)| &**k == key).map(|(_, v)| v)
                    };
                    let v = v.ok_or_else(|| {
                        self.fail(pos, format_args!("format: no argument for {{{field}}}"))
                    })?;
                    v.write_str(&mut out)?;
                }
                c => out.push(c),
            }
            self.check_len(out.len(), pos)?;
        }
        Ok(out)
    }

    fn binary(&self, op: BinOp, a: &Value, b: &Value, pos: u32) -> Result<Value> {
        // Markup + str escapes the str (markupsafe's Markup.__add__ / __radd__).
        if op == BinOp::Add {
            match (a, b) {
                (Value::Markup(x), Value::Str(y) | Value::Markup(y)) => {
                    let y = if matches!(b, Value::Str(_)) {
                        html_escape(y)
                    } else {
                        String::from(&**y)
                    };
                    self.check_len(x.len() + y.len(), pos)?;
                    return Ok(Value::Markup(Rc::from([&**x, y.as_str()].concat())));
                }
                (Value::Str(x), Value::Markup(y)) => {
                    let x = html_escape(x);
                    self.check_len(x.len() + y.len(), pos)?;
                    return Ok(Value::Markup(Rc::from([x.as_str(), &**y].concat())));
                }
                _ => {}
            }
        }
        let (a, b) = (&a.clone().plain(), &b.clone().plain());
        let type_err = || {
            self.fail(
                pos,
                format_args!(
                    "unsupported operand type(s) for {}: '{}' and '{}'",
                    match op {
                        BinOp::Add => "+",
                        BinOp::Sub => "-",
                        BinOp::Mul => "*",
                        BinOp::Div => "/",
                        BinOp::FloorDiv => "//",
                        BinOp::Mod => "%",
                        BinOp::Pow => "**",
                    },
                    a.type_name(),
                    b.type_name()
                ),
            )
        };
        let overflow = || self.fail(pos, format_args!("integer overflow"));
        let zero = || self.fail(pos, format_args!("division by zero"));
        if let (Some(x), Some(y)) = (a.as_int(), b.as_int()) {
            return Ok(match op {
                BinOp::Add => Value::Int(x.checked_add(y).ok_or_else(overflow)?),
                BinOp::Sub => Value::Int(x.checked_sub(y).ok_or_else(overflow)?),
                BinOp::Mul => Value::Int(x.checked_mul(y).ok_or_else(overflow)?),
                BinOp::Div => {
                    if y == 0 {
                        return Err(zero());
                    }
                    Value::Float(x as f64 / y as f64)
                }
                BinOp::FloorDiv => {
                    if y == 0 {
                        return Err(zero());
                    }
                    Value::Int(
                        x.checked_div_euclid(y).ok_or_else(overflow)?
                            - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 },
                    )
                }
                BinOp::Mod => {
                    if y == 0 {
                        return Err(zero());
                    }
                    let r = x.checked_rem(y).ok_or_else(overflow)?;
                    Value::Int(if r != 0 && (r < 0) != (y < 0) {
                        r + y
                    } else {
                        r
                    })
                }
                BinOp::Pow => {
                    if y < 0 {
                        Value::Float(libm::pow(x as f64, y as f64))
                    } else {
                        Value::Int(
                            u32::try_from(y)
                                .ok()
                                .and_then(|y| x.checked_pow(y))
                                .ok_or_else(overflow)?,
                        )
                    }
                }
            });
        }
        if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) {
            return Ok(Value::Float(match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div | BinOp::FloorDiv | BinOp::Mod if y == 0.0 => return Err(zero()),
                BinOp::Div => x / y,
                BinOp::FloorDiv => libm::floor(x / y),
                BinOp::Mod => {
                    let r = libm::fmod(x, y);
                    if r != 0.0 && (r < 0.0) != (y < 0.0) {
                        r + y
                    } else {
                        r
                    }
                }
                BinOp::Pow => libm::pow(x, y),
            }));
        }
        match (op, a, b) {
            (BinOp::Add, Value::Str(x), Value::Str(y)) => {
                self.check_len(x.len() + y.len(), pos)?;
                let mut s = String::with_capacity(x.len() + y.len());
                s.push_str(x);
                s.push_str(y);
                Ok(Value::string(s))
            }
            (BinOp::Add, Value::List(x), Value::List(y)) => {
                Ok(Value::list(x.iter().chain(y.iter()).cloned().collect()))
            }
            (BinOp::Add, Value::Tuple(x), Value::Tuple(y)) => Ok(Value::Tuple(Rc::new(
                x.iter().chain(y.iter()).cloned().collect(),
            ))),
            (BinOp::Mul, Value::Str(s), n) | (BinOp::Mul, n, Value::Str(s))
                if n.as_int().is_some() =>
            {
                let n = n.as_int().unwrap_or(0).max(0) as usize;
                self.check_len(s.len().saturating_mul(n), pos)?;
                Ok(Value::string(s.repeat(n)))
            }
            (BinOp::Mul, Value::List(v), n) | (BinOp::Mul, n, Value::List(v))
                if n.as_int().is_some() =>
            {
                let n = n.as_int().unwrap_or(0).max(0) as usize;
                if v.len().saturating_mul(n) as u64 > self.limits.max_steps {
                    return Err(self.fail(pos, format_args!("list repeated past the step limit")));
                }
                let mut out = Vec::with_capacity(v.len() * n);
                for _ in 0..n {
                    out.extend(v.iter().cloned());
                }
                Ok(Value::list(out))
            }
            (BinOp::Mod, Value::Str(f), args) => {
                let items: Vec<Value> = match args {
                    Value::Tuple(t) => t.to_vec(),
                    other => Vec::from([other.clone()]),
                };
                Ok(Value::string(self.percent_format(f, &items, pos)?))
            }
            _ if a.is_undefined() || b.is_undefined() => {
                Err(self.fail(pos, format_args!("arithmetic on an undefined value")))
            }
            _ => Err(type_err()),
        }
    }

    /// `"%s %d" % args` (the conversions `s`, `d`, `i`, `r`, `%%`).
    fn percent_format(&self, f: &str, items: &[Value], pos: u32) -> Result<String> {
        let mut out = String::new();
        let mut it = f.chars();
        let mut next = items.iter();
        while let Some(c) = it.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let d = it.next();
            if d == Some('%') {
                out.push('%');
                continue;
            }
            let v = next.next().ok_or_else(|| {
                self.fail(pos, format_args!("not enough arguments for format string"))
            })?;
            match d {
                Some('s') => v.write_str(&mut out)?,
                Some('r') => v.write_repr(&mut out, 0)?,
                Some('d') | Some('i') => {
                    let n = v.as_f64().ok_or_else(|| {
                        self.fail(pos, format_args!("%d format: a number is required"))
                    })?;
                    let _ = write!(out, "{}", n as i64);
                }
                _ => return Err(self.fail(pos, format_args!("unsupported format character"))),
            }
            self.check_len(out.len(), pos)?;
        }
        Ok(out)
    }

    fn compare(&self, op: CmpOp, a: &Value, b: &Value, pos: u32) -> Result<bool> {
        Ok(match op {
            CmpOp::Eq => a.py_eq(b),
            CmpOp::Ne => !a.py_eq(b),
            CmpOp::In => self.contains(&b.clone().plain(), &a.clone().plain(), pos)?,
            CmpOp::NotIn => !self.contains(&b.clone().plain(), &a.clone().plain(), pos)?,
            _ => {
                let (a, b) = (&a.clone().plain(), &b.clone().plain());
                let ord = a.py_cmp(b).ok_or_else(|| {
                    self.fail(
                        pos,
                        format_args!(
                            "comparison not supported between instances of '{}' and '{}'",
                            a.type_name(),
                            b.type_name()
                        ),
                    )
                })?;
                match op {
                    CmpOp::Lt => ord == Ordering::Less,
                    CmpOp::Le => ord != Ordering::Greater,
                    CmpOp::Gt => ord == Ordering::Greater,
                    _ => ord != Ordering::Less,
                }
            }
        })
    }

    fn contains(&self, container: &Value, x: &Value, pos: u32) -> Result<bool> {
        Ok(match container {
            Value::Str(s) => match x {
                Value::Str(n) => s.contains(&**n),
                _ => {
                    return Err(self.fail(
                        pos,
                        format_args!(
                            "'in <string>' requires string as left operand, not {}",
                            x.type_name()
                        ),
                    ));
                }
            },
            Value::List(v) | Value::Tuple(v) | Value::Iter(v) => v.iter().any(|y| y.py_eq(x)),
            Value::Dict(d) => d.get(x).is_some(),
            Value::Namespace(ns) => ns.borrow().get(x).is_some(),
            Value::Undefined => false,
            other => {
                return Err(self.fail(
                    pos,
                    format_args!("argument of type '{}' is not iterable", other.type_name()),
                ));
            }
        })
    }

    /// `x.a.b` (a dotted attribute path, as `map(attribute=)` and `selectattr` take), or an
    /// integer index.
    fn attr_path(&self, x: &Value, path: &Value, pos: u32) -> Result<Value> {
        match path {
            Value::Int(_) => self.get_item(x, path, pos),
            Value::Str(p) => {
                let mut v = x.clone();
                for part in p.split('.') {
                    v = match part.parse::<i64>() {
                        Ok(i) => self.get_item(&v, &Value::Int(i), pos)?,
                        Err(_) => match &v {
                            Value::Dict(d) => d.get_str(part).cloned().unwrap_or(Value::Undefined),
                            Value::Undefined => Value::Undefined,
                            _ => self.get_attr(&v, &Rc::from(part), pos)?,
                        },
                    };
                }
                Ok(v)
            }
            _ => Err(self.fail(pos, format_args!("attribute name must be a string"))),
        }
    }

    fn filter(&mut self, v: Value, name: &str, args: &Args, pos: u32) -> Result<Value> {
        let s = |v: &Value| -> Result<String> {
            let mut s = String::new();
            v.write_str(&mut s)?;
            Ok(s)
        };
        Ok(match name {
            "safe" | "string" | "e" | "escape" | "forceescape" => match name {
                "e" | "escape" | "forceescape" => Value::Markup(Rc::from(html_escape(&s(&v)?))),
                "safe" => match v {
                    Value::Str(x) => Value::Markup(x),
                    other => other,
                },
                _ => Value::string(s(&v)?),
            },
            "length" | "count" => Value::Int(match &v {
                Value::Str(x) => x.chars().count(),
                Value::List(x) | Value::Tuple(x) => x.len(),
                Value::Dict(d) => d.0.len(),
                Value::Undefined => 0,
                other => {
                    return Err(self.fail(
                        pos,
                        format_args!("object of type '{}' has no len()", other.type_name()),
                    ));
                }
            } as i64),
            "trim" => {
                let text = s(&v)?;
                let chars = args
                    .get(0, "chars")
                    .and_then(|c| c.as_str().map(String::from));
                Value::str(text.trim_matches(|c: char| match &chars {
                    Some(set) => set.contains(c),
                    None => py_space(c),
                }))
            }
            "upper" => Value::string(s(&v)?.to_uppercase()),
            "lower" => Value::string(s(&v)?.to_lowercase()),
            "capitalize" => Value::string(capitalize(&s(&v)?)),
            "title" => Value::string(title(&s(&v)?)),
            "default" | "d" => {
                let fallback = args.or(0, "default_value", Value::str(""));
                if v.is_undefined() || (args.flag(1, "boolean") && !v.truthy()) {
                    fallback
                } else {
                    v
                }
            }
            "join" => {
                let sep = args.or(0, "d", Value::str(""));
                let sep = s(&sep)?;
                let attr = args.get(1, "attribute").cloned();
                let mut out = String::new();
                for (i, x) in self.iterate(&v, pos)?.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&sep);
                    }
                    let x = match &attr {
                        Some(a) => self.attr_path(x, a, pos)?,
                        None => x.clone(),
                    };
                    x.write_str(&mut out)?;
                    self.check_len(out.len(), pos)?;
                }
                Value::string(out)
            }
            "replace" => {
                let text = s(&v)?;
                let old = s(&args.or(0, "old", Value::str("")))?;
                let new = s(&args.or(1, "new", Value::str("")))?;
                let count = args.get(2, "count").and_then(Value::as_int).unwrap_or(-1);
                let r = py_replace(&text, &old, &new, count);
                self.check_len(r.len(), pos)?;
                Value::string(r)
            }
            "first" | "last" => {
                if name == "last" && matches!(v, Value::Iter(_)) {
                    return Err(
                        self.fail(pos, format_args!("'generator' object is not reversible"))
                    );
                }
                let items = self.iterate(&v, pos)?;
                let x = if name == "first" {
                    items.first()
                } else {
                    items.last()
                };
                x.cloned().unwrap_or(Value::Undefined)
            }
            "list" => Value::list(self.iterate(&v, pos)?),
            "reverse" => match &v {
                Value::Str(x) => Value::string(x.chars().rev().collect()),
                Value::List(_) | Value::Tuple(_) => {
                    let mut items = self.iterate(&v, pos)?;
                    items.reverse();
                    Value::Iter(Rc::new(items))
                }
                other => {
                    return Err(self.fail(
                        pos,
                        format_args!("'{}' object is not reversible", other.type_name()),
                    ));
                }
            },
            "items" => match &v {
                Value::Undefined => Value::Iter(Rc::new(Vec::new())),
                Value::Dict(_) => match self.call_method(&v, "items", args, pos)? {
                    Value::List(x) => Value::Iter(x),
                    other => other,
                },
                other => {
                    return Err(self.fail(
                        pos,
                        format_args!(
                            "can only get item pairs from a mapping, not {}",
                            other.type_name()
                        ),
                    ));
                }
            },
            "dictsort" => {
                let Value::Dict(d) = &v else {
                    return Err(self.fail(pos, format_args!("dictsort: a dict is required")));
                };
                let case = args.flag(0, "case_sensitive");
                let by_value = args.get(1, "by").and_then(Value::as_str) == Some("value");
                let reverse = args.flag(2, "reverse");
                let mut items = d.0.clone();
                let mut err = None;
                items.sort_by(|a, b| {
                    let (x, y) = if by_value { (&a.1, &b.1) } else { (&a.0, &b.0) };
                    sort_key(x, case)
                        .py_cmp(&sort_key(y, case))
                        .unwrap_or_else(|| {
                            err = Some(());
                            Ordering::Equal
                        })
                });
                if err.is_some() {
                    return Err(self.fail(pos, format_args!("dictsort: keys cannot be ordered")));
                }
                if reverse {
                    items.reverse();
                }
                Value::list(
                    items
                        .into_iter()
                        .map(|(k, x)| Value::Tuple(Rc::new(Vec::from([k, x]))))
                        .collect(),
                )
            }
            "sort" => {
                let reverse = args.flag(0, "reverse");
                let case = args.flag(1, "case_sensitive");
                let attr = args.get(2, "attribute").cloned();
                let mut keyed = Vec::new();
                for x in self.iterate(&v, pos)? {
                    let k = match &attr {
                        Some(a) => self.attr_path(&x, a, pos)?,
                        None => x.clone(),
                    };
                    keyed.push((sort_key(&k, case), x));
                }
                let mut bad = false;
                keyed.sort_by(|a, b| {
                    a.0.py_cmp(&b.0).unwrap_or_else(|| {
                        bad = true;
                        Ordering::Equal
                    })
                });
                if bad {
                    return Err(self.fail(pos, format_args!("sort: items cannot be ordered")));
                }
                if reverse {
                    keyed.reverse();
                }
                Value::list(keyed.into_iter().map(|(_, x)| x).collect())
            }
            "unique" => {
                let case = args.flag(0, "case_sensitive");
                let attr = args.get(1, "attribute").cloned();
                let mut seen: Vec<Value> = Vec::new();
                let mut out = Vec::new();
                for x in self.iterate(&v, pos)? {
                    let k = match &attr {
                        Some(a) => self.attr_path(&x, a, pos)?,
                        None => x.clone(),
                    };
                    let k = sort_key(&k, case);
                    if !seen.iter().any(|y| y.py_eq(&k)) {
                        seen.push(k);
                        out.push(x);
                    }
                }
                Value::Iter(Rc::new(out))
            }
            "min" | "max" | "sum" => {
                let items = self.iterate(&v, pos)?;
                if name == "sum" {
                    let attr = args.get(0, "attribute").cloned();
                    let mut total = args.or(1, "start", Value::Int(0));
                    for x in items {
                        let x = match &attr {
                            Some(a) => self.attr_path(&x, a, pos)?,
                            None => x,
                        };
                        total = self.binary(BinOp::Add, &total, &x, pos)?;
                    }
                    return Ok(total);
                }
                let mut best: Option<Value> = None;
                for x in items {
                    best = Some(match best {
                        None => x,
                        Some(b) => {
                            let ord = x.py_cmp(&b).ok_or_else(|| {
                                self.fail(pos, format_args!("{name}: items cannot be ordered"))
                            })?;
                            if (name == "min" && ord == Ordering::Less)
                                || (name == "max" && ord == Ordering::Greater)
                            {
                                x
                            } else {
                                b
                            }
                        }
                    });
                }
                best.unwrap_or(Value::Undefined)
            }
            "map" => {
                // Jinja2 walks a false value (None, empty) as nothing.
                let items = if v.truthy() {
                    self.iterate(&v, pos)?
                } else {
                    Vec::new()
                };
                let mut out = Vec::with_capacity(items.len());
                if let Some(attr) = args.kw.iter().find(|(k, _)| &**k == "attribute") {
                    let default = args.kw.iter().find(|(k, _)| &**k == "default");
                    for x in items {
                        let y = self.attr_path(&x, &attr.1, pos)?;
                        out.push(match (y, default) {
                            (Value::Undefined, Some((_, d))) => d.clone(),
                            (y, _) => y,
                        });
                    }
                } else {
                    let Some(Value::Str(f)) = args.pos.first() else {
                        return Err(self.fail(pos, format_args!("map: a filter name is required")));
                    };
                    let rest = Args {
                        pos: args.pos[1..].to_vec(),
                        kw: args.kw.clone(),
                    };
                    for x in items {
                        out.push(self.filter(x, f, &rest, pos)?);
                    }
                }
                Value::Iter(Rc::new(out))
            }
            "select" | "reject" | "selectattr" | "rejectattr" => {
                let by_attr = name.ends_with("attr");
                let keep = name.starts_with("select");
                let skip = by_attr as usize;
                let attr = if by_attr {
                    args.pos.first().cloned()
                } else {
                    None
                };
                let test = args
                    .pos
                    .get(skip)
                    .and_then(|t| t.as_str().map(String::from));
                let rest = Args {
                    pos: args
                        .pos
                        .get(skip + 1..)
                        .map(<[Value]>::to_vec)
                        .unwrap_or_default(),
                    kw: Vec::new(),
                };
                let mut out = Vec::new();
                let items = if v.truthy() {
                    self.iterate(&v, pos)?
                } else {
                    Vec::new()
                };
                for x in items {
                    let y = match &attr {
                        Some(a) => self.attr_path(&x, a, pos)?,
                        None => x.clone(),
                    };
                    let ok = match &test {
                        Some(t) => self.test(&y, t, &rest, pos)?,
                        None => y.truthy(),
                    };
                    if ok == keep {
                        out.push(x);
                    }
                }
                Value::Iter(Rc::new(out))
            }
            "tojson" => {
                let indent = match args.get(0, "indent") {
                    None | Some(Value::None) => None,
                    Some(Value::Int(n)) => Some(" ".repeat((*n).clamp(0, 64) as usize)),
                    Some(Value::Str(t)) => Some(String::from(&**t)),
                    Some(_) => return Err(self.fail(pos, format_args!("tojson: bad indent"))),
                };
                let mut style = JsonStyle::new(indent);
                style.ensure_ascii = args.flag(usize::MAX, "ensure_ascii");
                if let Some(Value::Tuple(sep) | Value::List(sep)) =
                    args.get(usize::MAX, "separators")
                    && let [Value::Str(a), Value::Str(b)] = &sep[..]
                {
                    style.item_sep = String::from(&**a);
                    style.key_sep = String::from(&**b);
                }
                style.sort_keys = args.flag(usize::MAX, "sort_keys");
                let mut out = String::new();
                write_json(&mut out, &v, &style, 0).map_err(|e| self.wrap(e, pos))?;
                self.check_len(out.len(), pos)?;
                Value::string(out)
            }
            "int" => {
                let default = args.or(0, "default", Value::Int(0));
                match &v {
                    Value::Int(_) => v,
                    Value::Bool(b) => Value::Int(*b as i64),
                    Value::Float(f) if f.is_finite() => Value::Int(*f as i64),
                    Value::Str(t) => {
                        let t = t.trim();
                        match t.replace('_', "").parse::<i64>() {
                            Ok(i) => Value::Int(i),
                            Err(_) => match crate::decimal::parse_f64(t) {
                                Some(f) if f.is_finite() => Value::Int(f as i64),
                                _ => default,
                            },
                        }
                    }
                    _ => default,
                }
            }
            "float" => {
                let default = args.or(0, "default", Value::Float(0.0));
                match &v {
                    Value::Str(t) => crate::decimal::parse_f64(t.trim())
                        .map(Value::Float)
                        .unwrap_or(default),
                    other => other.as_f64().map(Value::Float).unwrap_or(default),
                }
            }
            "abs" => match v {
                Value::Int(i) => Value::Int(
                    i.checked_abs()
                        .ok_or_else(|| self.fail(pos, format_args!("integer overflow")))?,
                ),
                Value::Float(f) => Value::Float(libm::fabs(f)),
                Value::Bool(b) => Value::Int(b as i64),
                other => {
                    return Err(self.fail(
                        pos,
                        format_args!("bad operand type for abs(): '{}'", other.type_name()),
                    ));
                }
            },
            "round" => {
                let x = v
                    .as_f64()
                    .ok_or_else(|| self.fail(pos, format_args!("round: a number is required")))?;
                let digits = args
                    .get(0, "precision")
                    .and_then(Value::as_int)
                    .unwrap_or(0)
                    .clamp(0, 15);
                let method = args
                    .get(1, "method")
                    .and_then(Value::as_str)
                    .unwrap_or("common");
                let m = libm::pow(10.0, digits as f64);
                let y = x * m;
                let r = match method {
                    "floor" => libm::floor(y),
                    "ceil" => libm::ceil(y),
                    _ => libm::round(y),
                };
                Value::Float(r / m)
            }
            "indent" => {
                let width = match args.get(0, "width") {
                    Some(Value::Str(w)) => String::from(&**w),
                    Some(w) => " ".repeat(w.as_int().unwrap_or(4).clamp(0, 256) as usize),
                    None => "    ".into(),
                };
                let first = args.flag(1, "first");
                let blank = args.flag(2, "blank");
                let text = s(&v)?;
                let mut out = String::new();
                for (i, line) in text.split('\n').enumerate() {
                    if i > 0 {
                        out.push('\n');
                    }
                    if (i > 0 || first) && (blank || !line.is_empty()) {
                        out.push_str(&width);
                    }
                    out.push_str(line);
                    self.check_len(out.len(), pos)?;
                }
                Value::string(out)
            }
            "format" => {
                let text = s(&v)?;
                Value::string(self.percent_format(&text, &args.pos, pos)?)
            }
            "attr" => {
                let n = args.get(0, "name").and_then(|n| n.as_str().map(Rc::from));
                match n {
                    Some(n) => self.get_attr(&v, &n, pos)?,
                    None => Value::Undefined,
                }
            }
            "wordcount" => Value::Int(s(&v)?.split_whitespace().count() as i64),
            "batch" | "slice" | "groupby" | "pprint" | "urlencode" | "xmlattr"
            | "filesizeformat" | "truncate" | "wordwrap" | "striptags" | "center" | "random"
            | "urlize" => {
                return Err(self.fail(pos, format_args!("filter '{name}' is not supported")));
            }
            _ => return Err(self.fail(pos, format_args!("no filter named '{name}'"))),
        })
    }

    /// An error from a helper (JSON writing), placed at `pos`.
    fn wrap(&self, e: Error, pos: u32) -> Error {
        let msg = e.to_string();
        self.fail(pos, format_args!("{msg}"))
    }

    fn test(&mut self, v: &Value, name: &str, args: &Args, pos: u32) -> Result<bool> {
        let arg = || args.get(0, "other").cloned().unwrap_or(Value::Undefined);
        Ok(match name {
            "defined" => !v.is_undefined(),
            "undefined" => v.is_undefined(),
            "none" => matches!(v, Value::None),
            "boolean" => matches!(v, Value::Bool(_)),
            "true" => matches!(v, Value::Bool(true)),
            "false" => matches!(v, Value::Bool(false)),
            "integer" => matches!(v, Value::Int(_)),
            "float" => matches!(v, Value::Float(_)),
            "number" => matches!(v, Value::Int(_) | Value::Float(_) | Value::Bool(_)),
            "string" => matches!(v, Value::Str(_)),
            "mapping" => matches!(v, Value::Dict(_)),
            "iterable" => matches!(
                v,
                Value::Str(_)
                    | Value::List(_)
                    | Value::Tuple(_)
                    | Value::Iter(_)
                    | Value::Dict(_)
                    | Value::Undefined
            ),
            "sequence" => matches!(
                v,
                Value::Str(_)
                    | Value::List(_)
                    | Value::Tuple(_)
                    | Value::Dict(_)
                    | Value::Undefined
            ),
            "callable" => matches!(v, Value::Macro(_) | Value::Func(_) | Value::Method(_)),
            "sameas" => match (v, &arg()) {
                (Value::None, Value::None) => true,
                (Value::Bool(a), Value::Bool(b)) => a == b,
                (a, b) => {
                    a.py_eq(b) && !matches!(a, Value::Str(_) | Value::List(_) | Value::Dict(_))
                }
            },
            "eq" | "equalto" | "==" => v.py_eq(&arg()),
            "ne" | "!=" => !v.py_eq(&arg()),
            "lt" | "lessthan" | "<" => self.compare(CmpOp::Lt, v, &arg(), pos)?,
            "le" | "<=" => self.compare(CmpOp::Le, v, &arg(), pos)?,
            "gt" | "greaterthan" | ">" => self.compare(CmpOp::Gt, v, &arg(), pos)?,
            "ge" | ">=" => self.compare(CmpOp::Ge, v, &arg(), pos)?,
            "in" => self.contains(&args.or(0, "seq", Value::Undefined), v, pos)?,
            "odd" | "even" | "divisibleby" => {
                let x = v.as_int().ok_or_else(|| {
                    self.fail(pos, format_args!("test '{name}' needs an integer"))
                })?;
                match name {
                    "odd" => x.rem_euclid(2) == 1,
                    "even" => x.rem_euclid(2) == 0,
                    _ => {
                        let n = args.get(0, "num").and_then(Value::as_int).unwrap_or(0);
                        if n == 0 {
                            return Err(self.fail(pos, format_args!("division by zero")));
                        }
                        x.rem_euclid(n) == 0
                    }
                }
            }
            "lower" => v.as_str().is_some_and(|s| {
                s.chars().any(char::is_lowercase) && !s.chars().any(char::is_uppercase)
            }),
            "upper" => v.as_str().is_some_and(|s| {
                s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase)
            }),
            "escaped" => false,
            _ => return Err(self.fail(pos, format_args!("no test named '{name}'"))),
        })
    }
}

fn loop_attr(l: &LoopInfo, name: &str) -> Option<Value> {
    let n = l.length;
    let i = l.index0;
    Some(match name {
        "index" => Value::Int(i as i64 + 1),
        "index0" => Value::Int(i as i64),
        "revindex" => Value::Int((n - i) as i64),
        "revindex0" => Value::Int((n - i - 1) as i64),
        "first" => Value::Bool(i == 0),
        "last" => Value::Bool(i + 1 == n),
        "length" => Value::Int(n as i64),
        "previtem" => l.prev.clone(),
        "nextitem" => l.next.clone(),
        "depth" => Value::Int(l.depth0 as i64 + 1),
        "depth0" => Value::Int(l.depth0 as i64),
        _ => return None,
    })
}

/// What sort/unique/dictsort compare: strings lowercased unless case-sensitive.
fn sort_key(v: &Value, case_sensitive: bool) -> Value {
    match v {
        Value::Str(s) if !case_sensitive => Value::string(s.to_lowercase()),
        other => other.clone(),
    }
}

fn expr_pos(e: &Expr) -> u32 {
    match e {
        Expr::Name(_, p)
        | Expr::Attr(_, _, p)
        | Expr::Item(_, _, p)
        | Expr::Slice(_, _, p)
        | Expr::Call(_, _, p)
        | Expr::Filter(_, _, _, p)
        | Expr::Test(_, _, _, p)
        | Expr::Neg(_, p)
        | Expr::Bin(_, _, _, p)
        | Expr::Concat(_, p)
        | Expr::Compare(_, _, p) => *p,
        Expr::Not(x) | Expr::And(x, _) | Expr::Or(x, _) | Expr::Cond(_, x, _) => expr_pos(x),
        _ => 0,
    }
}

/// Python's `str.split` / `rsplit`: on runs of whitespace (trimmed) without `sep`; None for an
/// empty separator.
fn py_split(s: &str, sep: Option<&str>, max: i64, from_right: bool) -> Option<Vec<String>> {
    let max = if max < 0 { usize::MAX } else { max as usize };
    match sep {
        Some("") => None,
        Some(sep) => {
            let parts: Vec<String> = if from_right {
                let mut v: Vec<String> = s
                    .rsplitn(max.saturating_add(1), sep)
                    .map(String::from)
                    .collect();
                v.reverse();
                v
            } else {
                s.splitn(max.saturating_add(1), sep)
                    .map(String::from)
                    .collect()
            };
            Some(parts)
        }
        None => {
            let mut parts = Vec::new();
            if from_right {
                let mut rest = s.trim_end_matches(py_space);
                while !rest.is_empty() {
                    if parts.len() == max {
                        parts.push(String::from(rest));
                        break;
                    }
                    let start = rest.rfind(py_space).map_or(0, |i| {
                        i + rest[i..].chars().next().map_or(1, char::len_utf8)
                    });
                    parts.push(String::from(&rest[start..]));
                    rest = rest[..start].trim_end_matches(py_space);
                }
                parts.reverse();
            } else {
                let mut rest = s.trim_start_matches(py_space);
                while !rest.is_empty() {
                    if parts.len() == max {
                        parts.push(String::from(rest));
                        break;
                    }
                    let end = rest.find(py_space).unwrap_or(rest.len());
                    parts.push(String::from(&rest[..end]));
                    rest = rest[end..].trim_start_matches(py_space);
                }
            }
            Some(parts)
        }
    }
}

/// Python's `str.replace(old, new, count)` (an empty `old` inserts `new` between characters).
fn py_replace(s: &str, old: &str, new: &str, count: i64) -> String {
    let max = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    if old.is_empty() {
        let mut out = String::new();
        let mut n = 0;
        for c in s.chars() {
            if n < max {
                out.push_str(new);
                n += 1;
            }
            out.push(c);
        }
        if n < max {
            out.push_str(new);
        }
        return out;
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut n = 0;
    while n < max {
        match rest.find(old) {
            Some(i) => {
                out.push_str(&rest[..i]);
                out.push_str(new);
                rest = &rest[i + old.len()..];
                n += 1;
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// Python's `str.capitalize`: the first character upper-cased, the rest lower-cased.
fn capitalize(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    if let Some(c) = it.next() {
        out.extend(c.to_uppercase());
    }
    for c in it {
        out.extend(c.to_lowercase());
    }
    out
}

/// Python's `str.title`: each run of letters starts upper-case, the rest lower-case.
fn title(s: &str) -> String {
    let mut out = String::new();
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = c.is_alphabetic();
    }
    out
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
