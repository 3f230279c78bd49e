//! JSON schema -> GBNF text (then compiled like any grammar), after llama.cpp's
//! `json-schema-to-grammar`: the same primitive rules (`space`, `string`, `number`, ...), and
//! the same reading of the schema:
//!
//! - `$ref` to `#`, `#/definitions/..`, `#/$defs/..` (any JSON pointer within the schema;
//!   recursive references become recursive rules);
//! - `anyOf` / `oneOf` (alternatives), `type` arrays, `const`, `enum` (the values as
//!   compact JSON);
//! - objects: `properties` in their order, the `required` ones always, the others optional
//!   (each may be left out, the order kept), `additionalProperties` false (the default here, as
//!   in llama.cpp when `properties` are given), true or a schema (further keys after the
//!   declared ones); `{"type": "object"}` alone is any object;
//! - arrays: `items` (any values without it) with `minItems` / `maxItems`, tuples
//!   (`prefixItems` or an `items` array); bounds no value meets (`maxItems < minItems`,
//!   `maxLength < minLength`, an empty integer range) are UNSUPPORTED errors;
//! - strings: `minLength` / `maxLength`, `format` `date`, `time`, `date-time`, `uuid`,
//!   `pattern` (a regular expression anchored with `^...$`: literals, `.`, classes, groups,
//!   `|`, `* + ? {m,n}`, `\d \w \s` and escapes; backreferences and lookarounds are
//!   UNSUPPORTED errors);
//! - integers with `minimum` / `maximum` (`exclusive*` too; with both kinds the tighter bound)
//!   when the range is small (at most [`MAX_INT_RANGE`] values, listed) or only bounded below
//!   by 0 or 1; numbers' bounds are ignored, as in llama.cpp;
//! - `number`, `integer`, `boolean`, `null`, `string`, and no type at all (any value).
//!
//! [`json_object`] is `{"type": "json_object"}` mode: any JSON object.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::error::{Result, Status};
use crate::json::{Kind, Reader};
use crate::{bail, err};

/// Largest schema text accepted (bytes).
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// Deepest nesting of sub-schemas visited.
const MAX_VISIT_DEPTH: u32 = 64;
/// Most rules one schema may produce.
const MAX_SCHEMA_RULES: usize = 8192;
/// The largest integer range written out value by value.
pub const MAX_INT_RANGE: i64 = 256;

const SPACE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// llama.cpp's primitive rules: (name, body, rules it uses).
const PRIMITIVES: &[(&str, &str, &[&str])] = &[
    ("boolean", r#"("true" | "false") space"#, &[]),
    ("decimal-part", "[0-9]{1,16}", &[]),
    ("integral-part", "[0] | [1-9] [0-9]{0,15}", &[]),
    (
        "number",
        // llama.cpp allows 16 exponent digits; two keep every number inside f64's range, so
        // parsers that read numbers as doubles (serde_json, JSON.parse) take every reply.
        r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})? space"#,
        &["integral-part", "decimal-part"],
    ),
    (
        "integer",
        r#"("-"? integral-part) space"#,
        &["integral-part"],
    ),
    (
        "value",
        "object | array | string | number | boolean | null",
        &["object", "array", "string", "number", "boolean", "null"],
    ),
    (
        "object",
        r#""{" space ( string ":" space value ("," space string ":" space value)* )? "}" space"#,
        &["string", "value"],
    ),
    (
        "array",
        r#""[" space ( value ("," space value)* )? "]" space"#,
        &["value"],
    ),
    (
        "uuid",
        r#""\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space"#,
        &[],
    ),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#,
        &[],
    ),
    ("string", r#""\"" char* "\"" space"#, &["char"]),
    ("null", r#""null" space"#, &[]),
    (
        "date",
        r#"[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )"#,
        &[],
    ),
    (
        "time",
        r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#,
        &[],
    ),
    ("date-time", r#"date "T" time"#, &["date", "time"]),
    ("date-string", r#""\"" date "\"" space"#, &["date"]),
    ("time-string", r#""\"" time "\"" space"#, &["time"]),
    (
        "date-time-string",
        r#""\"" date-time "\"" space"#,
        &["date-time"],
    ),
];

/// A parsed JSON value (schemas are small; a tree makes `$ref` resolution simple).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// The literal as written.
    Number(String),
    String(String),
    Array(Vec<Value>),
    /// Keys in document order.
    Object(Vec<(String, Value)>),
}

impl Value {
    pub fn parse(text: &[u8]) -> Result<Value> {
        if text.len() > MAX_SCHEMA_BYTES {
            bail!(
                Status::BadFormat,
                "schema: {} bytes exceed the cap of {MAX_SCHEMA_BYTES}",
                text.len()
            );
        }
        let mut r = Reader::new(text)?;
        let v = read_value(&mut r)?;
        r.finish()?;
        Ok(v)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => n.parse::<i64>().ok().or_else(|| {
                let f = crate::decimal::parse_f64(n)?;
                let i = f as i64;
                (i as f64 == f && i.unsigned_abs() < 1 << 53).then_some(i)
            }),
            _ => None,
        }
    }

    /// Compact JSON.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::Number(n) => out.extend_from_slice(n.as_bytes()),
            Value::String(s) => crate::json::write_string(out, s),
            Value::Array(items) => {
                out.push(b'[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    v.write(out);
                }
                out.push(b']');
            }
            Value::Object(kv) => {
                out.push(b'{');
                for (i, (k, v)) in kv.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    crate::json::write_string(out, k);
                    out.push(b':');
                    v.write(out);
                }
                out.push(b'}');
            }
        }
    }
}

/// One value from the reader (its depth cap bounds the recursion).
fn read_value(r: &mut Reader<'_>) -> Result<Value> {
    Ok(match r.peek()? {
        Kind::Null => {
            r.read_null()?;
            Value::Null
        }
        Kind::Bool => Value::Bool(r.read_bool()?),
        Kind::Number => Value::Number(r.read_number_text()?.to_string()),
        Kind::String => Value::String(r.read_str()?.to_cow()?.into_owned()),
        Kind::Array => {
            r.begin_array()?;
            let mut items = Vec::new();
            while r.next_item()? {
                items.push(read_value(r)?);
            }
            Value::Array(items)
        }
        Kind::Object => {
            r.begin_object()?;
            let mut kv = Vec::new();
            while let Some(k) = r.next_key()? {
                let k = k.to_cow()?.into_owned();
                kv.push((k, read_value(r)?));
            }
            Value::Object(kv)
        }
    })
}

/// `{"type": "json_object"}`: any JSON object, as GBNF.
pub fn json_object() -> String {
    let mut c = Converter::new(&Value::Null);
    let name = c.primitive("object");
    c.rules.push(("root".to_string(), name));
    c.text()
}

/// A JSON schema (text) -> GBNF text whose `root` matches exactly the JSON texts the
/// converter can guarantee valid (see the module docs for what is covered).
pub fn to_gbnf(schema: &[u8]) -> Result<String> {
    let v = Value::parse(schema)?;
    let mut c = Converter::new(&v);
    let name = c.visit(&v, "root", 0)?;
    if name != "root" {
        c.rules.push(("root".to_string(), name));
    }
    Ok(c.text())
}

/// `literal` as a GBNF string literal.
fn gbnf_literal(literal: &str) -> String {
    let mut s = String::with_capacity(literal.len() + 2);
    s.push('"');
    for ch in literal.chars() {
        match ch {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                s.push_str(&format!("\\x{:02X}", c as u32));
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// `v` as compact JSON, as a GBNF literal.
fn json_literal(v: &Value) -> String {
    let mut out = Vec::new();
    v.write(&mut out);
    gbnf_literal(&String::from_utf8_lossy(&out))
}

/// `item` repeated `min..=max` times (`max` None: unbounded) with `sep` between, as GBNF.
fn repetition(item: &str, min: u32, max: Option<u32>, sep: &str) -> String {
    if max == Some(0) {
        return String::new();
    }
    let rest_min = min.saturating_sub(1);
    let rest_max = max.map(|m| m - 1);
    let rest = match rest_max {
        Some(0) => String::new(),
        Some(m) if m == rest_min => format!("({sep} {item}){{{m}}}"),
        Some(m) => format!("({sep} {item}){{{rest_min},{m}}}"),
        None => format!("({sep} {item}){{{rest_min},}}"),
    };
    let one_or_more = format!("{item} {rest}");
    if min == 0 {
        format!("({one_or_more})?")
    } else {
        one_or_more
    }
}

struct Converter<'s> {
    root: &'s Value,
    /// (name, body) in the order added.
    rules: Vec<(String, String)>,
    /// Name -> index in `rules`. (Both maps have the GBNF parser's `u32` values: one copy of
    /// `BTreeMap`'s code in the module.)
    by_name: BTreeMap<String, u32>,
    /// `$ref` -> the index of its rule.
    refs: BTreeMap<String, u32>,
}

impl<'s> Converter<'s> {
    fn new(root: &'s Value) -> Converter<'s> {
        let mut c = Converter {
            root,
            rules: Vec::new(),
            by_name: BTreeMap::new(),
            refs: BTreeMap::new(),
        };
        c.rules.push(("space".to_string(), SPACE.to_string()));
        c.by_name.insert("space".to_string(), 0);
        c
    }

    fn text(&self) -> String {
        let mut s = String::new();
        for (name, body) in &self.rules {
            s.push_str(name);
            s.push_str(" ::= ");
            s.push_str(body);
            s.push('\n');
        }
        s
    }

    /// Adds `name ::= body` (the name made safe and unique) and returns the name used.
    fn add_rule(&mut self, name: &str, body: String) -> Result<String> {
        let mut base: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        if base.is_empty() {
            base.push('r');
        }
        if base != "root" && PRIMITIVES.iter().any(|p| p.0 == base) || base == "space" {
            base.push('-');
        }
        let mut candidate = base.clone();
        let mut i = 0;
        loop {
            match self.by_name.get(&candidate) {
                Some(&at) if self.rules[at as usize].1 == body => return Ok(candidate),
                Some(_) => {
                    candidate = format!("{base}{i}");
                    i += 1;
                }
                None => break,
            }
        }
        if self.rules.len() >= MAX_SCHEMA_RULES {
            bail!(
                Status::Unsupported,
                "schema: more than {MAX_SCHEMA_RULES} rules"
            );
        }
        self.by_name
            .insert(candidate.clone(), self.rules.len() as u32);
        self.rules.push((candidate.clone(), body));
        Ok(candidate)
    }

    /// Adds primitive `name` and what it uses; returns its name.
    fn primitive(&mut self, name: &str) -> String {
        if self.by_name.contains_key(name) {
            return name.to_string();
        }
        if let Some(&(n, body, deps)) = PRIMITIVES.iter().find(|p| p.0 == name) {
            self.by_name.insert(n.to_string(), self.rules.len() as u32);
            self.rules.push((n.to_string(), body.to_string()));
            for d in deps {
                self.primitive(d);
            }
        }
        name.to_string()
    }

    /// The rule for schema `s`; `name` is a hint for the rule's name.
    fn visit(&mut self, s: &Value, name: &str, depth: u32) -> Result<String> {
        if depth > MAX_VISIT_DEPTH {
            bail!(
                Status::Unsupported,
                "schema: nested deeper than {MAX_VISIT_DEPTH} levels at {name}"
            );
        }
        let d = depth + 1;
        let obj = match s {
            Value::Bool(true) => return Ok(self.primitive("value")),
            Value::Object(kv) => kv,
            _ => bail!(Status::Unsupported, "schema: {name} is not a schema object"),
        };
        let ty = s.get("type");
        let ty_str = ty.and_then(Value::as_str);
        let is = |t: &str| ty.is_none() || ty_str == Some(t);

        if let Some(r) = s.get("$ref") {
            let Some(r) = r.as_str() else {
                bail!(Status::BadFormat, "schema: $ref at {name} is not a string");
            };
            return self.reference(r, d);
        }
        if let Some(alts) = s.get("oneOf").or_else(|| s.get("anyOf")) {
            let Value::Array(alts) = alts else {
                bail!(
                    Status::BadFormat,
                    "schema: anyOf/oneOf at {name} is not an array"
                );
            };
            if alts.is_empty() {
                bail!(Status::Unsupported, "schema: empty anyOf/oneOf at {name}");
            }
            let mut parts = Vec::new();
            for (i, alt) in alts.iter().enumerate() {
                parts.push(self.visit(alt, &format!("{name}-{i}"), d)?);
            }
            return self.add_rule(name, parts.join(" | "));
        }
        if let Some(Value::Array(types)) = ty {
            let mut parts = Vec::new();
            for (i, t) in types.iter().enumerate() {
                let mut copy = obj.clone();
                for kv in copy.iter_mut() {
                    if kv.0 == "type" {
                        kv.1 = t.clone();
                    }
                }
                parts.push(self.visit(&Value::Object(copy), &format!("{name}-{i}"), d)?);
            }
            if parts.is_empty() {
                bail!(Status::Unsupported, "schema: empty type list at {name}");
            }
            return self.add_rule(name, parts.join(" | "));
        }
        if let Some(c) = s.get("const") {
            return self.add_rule(name, format!("{} space", json_literal(c)));
        }
        if let Some(e) = s.get("enum") {
            let Value::Array(values) = e else {
                bail!(Status::BadFormat, "schema: enum at {name} is not an array");
            };
            if values.is_empty() {
                bail!(Status::Unsupported, "schema: empty enum at {name}");
            }
            let alts: Vec<String> = values.iter().map(json_literal).collect();
            return self.add_rule(name, format!("({}) space", alts.join(" | ")));
        }
        if s.get("allOf").is_some() {
            bail!(
                Status::Unsupported,
                "schema: allOf (at {name}) is not supported"
            );
        }
        let additional = s.get("additionalProperties");
        if is("object")
            && (s.get("properties").is_some()
                || additional.is_some_and(|a| *a != Value::Bool(true)))
        {
            return self.object(s, name, d);
        }
        let array_keys = ["items", "prefixItems", "minItems", "maxItems"];
        if is("array") && array_keys.iter().any(|k| s.get(k).is_some()) {
            return self.array(s, name, d);
        }
        if is("string") {
            if let Some(p) = s.get("pattern") {
                let Some(p) = p.as_str() else {
                    bail!(
                        Status::BadFormat,
                        "schema: pattern at {name} is not a string"
                    );
                };
                let body = super::schema_pattern::to_gbnf(p).map_err(|e| {
                    err!(
                        e.status,
                        "schema: pattern at {name}: {}",
                        e.message.as_str()
                    )
                })?;
                self.primitive("space");
                return self.add_rule(name, format!(r#""\"" ({body}) "\"" space"#));
            }
            match s.get("format").and_then(Value::as_str) {
                Some("uuid") => return Ok(self.primitive("uuid")),
                Some(f @ ("date" | "time" | "date-time")) => {
                    let prim = self.primitive(&format!("{f}-string"));
                    return self.add_rule(name, prim);
                }
                _ => {}
            }
        }
        if ty_str == Some("string")
            && (s.get("minLength").is_some() || s.get("maxLength").is_some())
        {
            let min = self.count(s, "minLength", name)?.unwrap_or(0);
            let max = self.count(s, "maxLength", name)?;
            if max.is_some_and(|m| m < min) {
                bail!(
                    Status::Unsupported,
                    "schema: maxLength < minLength at {name}"
                );
            }
            let ch = self.primitive("char");
            let reps = match max {
                Some(m) if m == min => format!("{ch}{{{m}}}"),
                Some(m) => format!("{ch}{{{min},{m}}}"),
                None => format!("{ch}{{{min},}}"),
            };
            return self.add_rule(name, format!(r#""\"" {reps} "\"" space"#));
        }
        if ty_str == Some("integer")
            && let Some(body) = self.integer_range(s, name)?
        {
            return self.add_rule(name, body);
        }
        if obj.is_empty() || ty_str == Some("object") {
            let o = self.primitive("object");
            return if name == "root" {
                self.add_rule(name, o)
            } else {
                Ok(o)
            };
        }
        let Some(t) = ty_str else {
            if ty.is_none() {
                return Ok(self.primitive("value"));
            }
            bail!(Status::BadFormat, "schema: type at {name} is not a string");
        };
        match t {
            "string" | "number" | "integer" | "boolean" | "null" | "array" => Ok(self.primitive(t)),
            _ => bail!(Status::Unsupported, "schema: unknown type '{t}' at {name}"),
        }
    }

    /// A non-negative count keyword (`minItems`, `maxLength`, ...), capped.
    fn count(&self, s: &Value, key: &str, name: &str) -> Result<Option<u32>> {
        let Some(v) = s.get(key) else {
            return Ok(None);
        };
        match v.as_i64() {
            Some(n) if (0..=super::MAX_REPETITION as i64).contains(&n) => Ok(Some(n as u32)),
            _ => bail!(
                Status::Unsupported,
                "schema: {key} at {name} must be an integer in 0..={}",
                super::MAX_REPETITION
            ),
        }
    }

    fn reference(&mut self, r: &str, depth: u32) -> Result<String> {
        if let Some(&at) = self.refs.get(r) {
            return Ok(self.rules[at as usize].0.clone());
        }
        let Some(pointer) = r.strip_prefix('#') else {
            bail!(
                Status::Unsupported,
                "schema: $ref '{r}' is not within the schema (only '#...' references)"
            );
        };
        let mut target = self.root;
        for token in pointer.split('/').skip(1) {
            let key = token.replace("~1", "/").replace("~0", "~");
            target = match target {
                Value::Object(_) => target.get(&key),
                Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            }
            .ok_or_else(|| err!(Status::BadFormat, "schema: $ref '{r}': '{key}' not found"))?;
        }
        // Reserve the name first: the target may refer back to it.
        let last = pointer.rsplit('/').next().unwrap_or("");
        let name = self.add_rule(&format!("ref-{last}"), format!("\u{0}{r}"))?;
        let at = self.by_name.get(&name).copied();
        if let Some(at) = at {
            self.refs.insert(r.to_string(), at);
        }
        let body = self.visit(target, &format!("{name}-body"), depth)?;
        if let Some(at) = at {
            self.rules[at as usize].1 = body;
        }
        Ok(name)
    }

    fn object(&mut self, s: &Value, name: &str, depth: u32) -> Result<String> {
        let required: Vec<&str> = match s.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let props: &[(String, Value)] = match s.get("properties") {
            Some(Value::Object(p)) => p,
            Some(_) => bail!(
                Status::BadFormat,
                "schema: properties at {name} is not an object"
            ),
            None => &[],
        };
        for r in &required {
            if !props.iter().any(|(k, _)| k == r) {
                bail!(
                    Status::Unsupported,
                    "schema: required property '{r}' at {name} is not in properties"
                );
            }
        }
        let mut req = Vec::new();
        let mut opt = Vec::new();
        for (k, v) in props {
            let value = self.visit(v, &format!("{name}-{k}"), depth)?;
            let mut key = Vec::new();
            crate::json::write_string(&mut key, k);
            let kv = self.add_rule(
                &format!("{name}-{k}-kv"),
                format!(
                    r#"{} space ":" space {value}"#,
                    gbnf_literal(&String::from_utf8_lossy(&key))
                ),
            )?;
            if required.contains(&k.as_str()) {
                req.push(kv);
            } else {
                opt.push(kv);
            }
        }
        match s.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(a) => {
                let value = self.visit(a, &format!("{name}-additional-value"), depth)?;
                let string = self.primitive("string");
                let kv = self.add_rule(
                    &format!("{name}-additional-kv"),
                    format!(r#"{string} ":" space {value}"#),
                )?;
                let rest = self.add_rule(
                    &format!("{name}-additional"),
                    format!(r#"{kv} ( "," space {kv} )*"#),
                )?;
                opt.push(rest);
            }
        }
        // Optional members: chain[k] = opt[k] ("," space any[k + 1])?, any[k] = chain[k] | any[k + 1].
        let mut any_from: Option<String> = None;
        for (k, kv) in opt.iter().enumerate().rev() {
            let chain = match &any_from {
                Some(next) => format!(r#"{kv} ( "," space {next} )?"#),
                None => kv.clone(),
            };
            let chain = self.add_rule(&format!("{name}-opt-{k}"), chain)?;
            let any = match &any_from {
                Some(next) => {
                    self.add_rule(&format!("{name}-any-{k}"), format!("{chain} | {next}"))?
                }
                None => chain,
            };
            any_from = Some(any);
        }
        let mut body = String::from(r#""{" space "#);
        for (i, kv) in req.iter().enumerate() {
            if i > 0 {
                body.push_str(r#" "," space "#);
            }
            body.push_str(kv);
        }
        match (&any_from, req.is_empty()) {
            (Some(any), true) => body.push_str(&format!("( {any} )?")),
            (Some(any), false) => body.push_str(&format!(r#" ( "," space {any} )?"#)),
            (None, _) => {}
        }
        body.push_str(r#" "}" space"#);
        self.add_rule(name, body)
    }

    fn array(&mut self, s: &Value, name: &str, depth: u32) -> Result<String> {
        let tuple = match (s.get("prefixItems"), s.get("items")) {
            (Some(Value::Array(items)), _) | (None, Some(Value::Array(items))) => Some(items),
            _ => None,
        };
        if let Some(items) = tuple {
            let mut body = String::from(r#""[" space "#);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    body.push_str(r#" "," space "#);
                }
                body.push_str(&self.visit(item, &format!("{name}-tuple-{i}"), depth)?);
            }
            body.push_str(r#" "]" space"#);
            return self.add_rule(name, body);
        }
        let item = match s.get("items") {
            Some(items) => self.visit(items, &format!("{name}-item"), depth)?,
            None => self.primitive("value"),
        };
        let min = self.count(s, "minItems", name)?.unwrap_or(0);
        let max = self.count(s, "maxItems", name)?;
        if max.is_some_and(|m| m < min) {
            bail!(Status::Unsupported, "schema: maxItems < minItems at {name}");
        }
        let reps = repetition(&item, min, max, r#""," space"#);
        self.add_rule(name, format!(r#""[" space {reps} "]" space"#))
    }

    /// An integer with bounds: the values listed when the range is small, else the
    /// non-negative integers for a lower bound of 0 or 1; `None` when there are no bounds.
    fn integer_range(&mut self, s: &Value, name: &str) -> Result<Option<String>> {
        let bound = |k: &str| -> Result<Option<i64>> {
            match s.get(k) {
                None => Ok(None),
                Some(v) => v.as_i64().map(Some).ok_or_else(|| {
                    err!(
                        Status::Unsupported,
                        "schema: {k} at {name} is not an integer"
                    )
                }),
            }
        };
        // Both an inclusive and an exclusive bound: a value must meet both (the tighter one).
        let min = match (bound("minimum")?, bound("exclusiveMinimum")?) {
            (Some(m), Some(x)) => Some(m.max(x.saturating_add(1))),
            (m, x) => m.or(x.map(|x| x.saturating_add(1))),
        };
        let max = match (bound("maximum")?, bound("exclusiveMaximum")?) {
            (Some(m), Some(x)) => Some(m.min(x.saturating_sub(1))),
            (m, x) => m.or(x.map(|x| x.saturating_sub(1))),
        };
        if min.is_none() && max.is_none() {
            return Ok(None);
        }
        if let (Some(lo), Some(hi)) = (min, max) {
            if hi < lo {
                bail!(Status::Unsupported, "schema: empty integer range at {name}");
            }
            if hi.saturating_sub(lo) < MAX_INT_RANGE {
                let alts: Vec<String> = (lo..=hi).map(|v| format!("\"{v}\"")).collect();
                return Ok(Some(format!("({}) space", alts.join(" | "))));
            }
        }
        if max.is_none() {
            match min {
                Some(0) => {
                    self.primitive("integral-part");
                    return Ok(Some("integral-part space".to_string()));
                }
                Some(1) => return Ok(Some("[1-9] [0-9]{0,15} space".to_string())),
                _ => {}
            }
        }
        bail!(
            Status::Unsupported,
            "schema: integer bounds at {name} (only ranges of at most {MAX_INT_RANGE} values, or minimum 0 or 1)"
        )
    }
}
