//! JSON schema -> GBNF text (then compiled like any grammar), after llama.cpp's
//! `json-schema-to-grammar`: the same primitive rules (`space`, `string`, `number`, ...), and
//! the same reading of the schema:
//!
//! - `$ref` to `#`, `#/definitions/..`, `#/$defs/..` (any JSON pointer within the schema;
//!   recursive references become recursive rules), with only annotations beside it;
//! - `anyOf` / `oneOf` (alternatives), `type` arrays, `const`, `enum` (the values as
//!   compact JSON, those of the `type` beside them), `allOf` of one schema;
//! - no `type`: the kinds that the keywords present constrain (`{"maximum": 1}` is a number up
//!   to 1; JSON Schema would let a string through too), any value when there are none;
//! - objects: `properties` in their order, the `required` ones always (first; a required name
//!   not in `properties` as an additional property), the others optional
//!   (each may be left out, the order kept), `additionalProperties` false (the default here, as
//!   in llama.cpp when `properties` are given), true or a schema (further keys after the
//!   declared ones); `{"type": "object"}` alone is any object;
//! - arrays: `items` (any values without it) with `minItems` / `maxItems`, tuples
//!   (`prefixItems` or an `items` array);
//! - strings: `minLength` / `maxLength`, `format` `date`, `time`, `date-time`, `uuid` (other
//!   formats are annotations, as JSON Schema has them by default), `pattern` (a regular
//!   expression anchored with `^...$`: literals, `.`, classes, groups, `|`, `* + ? {m,n}`,
//!   `\d \w \s` and escapes; backreferences and lookarounds are UNSUPPORTED errors);
//! - integers and numbers with `minimum` / `maximum` / `exclusive*` (any JSON number: whole,
//!   fractional, with an exponent; with both kinds on one side the tighter), any range: the
//!   literals in range digit by digit, integer part and fraction (numbers then without an
//!   exponent);
//! - `number`, `integer`, `boolean`, `null`, `string`, and no type at all (any value).
//!
//! The grammar never lets through a value the schema forbids: bounds no value meets
//! (`maxItems < minItems`, `maxLength < minLength`, an empty range), keywords beside
//! `anyOf`/`oneOf`/`const`/`enum` that would have to hold too (`type` beside the values
//! excepted), and keywords a grammar here cannot enforce (`uniqueItems`, `not`, `if`,
//! `multipleOf`, `patternProperties`, `minProperties`, ...: [`UNENFORCED`]) are UNSUPPORTED
//! errors, where llama.cpp ignores them.
//!
//! [`json_object`] is `{"type": "json_object"}` mode: any JSON object.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;

use crate::error::{Result, Status};
use crate::json::{Kind, Reader};
use crate::{bail, err};

/// Largest schema text accepted (bytes).
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// Deepest nesting of sub-schemas visited.
const MAX_VISIT_DEPTH: u32 = 64;
/// Most rules one schema may produce.
const MAX_SCHEMA_RULES: usize = 8192;

/// Keywords that only describe a schema (or hold definitions): allowed anywhere, even beside
/// `$ref` or a lone `allOf` schema.
const ANNOTATIONS: [&str; 14] = [
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "$anchor",
    "$defs",
    "definitions",
    "format",
];

/// Keywords that restrict values in ways a grammar here does not: a schema using one is
/// refused, not turned into a grammar that lets through values the schema forbids. (Keywords
/// whose absence only makes the grammar stricter, such as `additionalItems`, are ignored.)
const UNENFORCED: [&str; 17] = [
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "dependencies",
    "patternProperties",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "multipleOf",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "unevaluatedProperties",
];

/// Refuses `s` if it uses an [`UNENFORCED`] keyword in a way that restricts something:
/// `uniqueItems: false`, `multipleOf: 1` on integers, `minProperties` up to the required
/// properties' count and `unevaluatedProperties: true` restrict nothing and pass.
fn check_enforced(s: &Value, name: &str) -> Result<()> {
    let Value::Object(kv) = s else {
        return Ok(());
    };
    let required = match s.get("required") {
        Some(Value::Array(r)) => r.len() as i64,
        _ => 0,
    };
    for (k, v) in kv {
        if !UNENFORCED.contains(&k.as_str()) {
            continue;
        }
        let harmless = match k.as_str() {
            "uniqueItems" => *v == Value::Bool(false),
            "multipleOf" => {
                s.get("type").and_then(Value::as_str) == Some("integer") && v.as_i64() == Some(1)
            }
            "minProperties" => v.as_i64().is_some_and(|n| n <= required),
            "unevaluatedProperties" => *v == Value::Bool(true),
            _ => false,
        };
        if !harmless {
            bail!(
                Status::Unsupported,
                "schema: '{k}' at {name} is not supported (a grammar here cannot enforce it)"
            );
        }
    }
    Ok(())
}

/// Refuses a keyword other than `key` and [`ANNOTATIONS`] beside `key` in `kv` (their
/// intersection is not written).
fn check_alone(kv: &[(String, Value)], key: &str, name: &str) -> Result<()> {
    let mut keys = kv.iter().map(|(k, _)| k.as_str());
    match keys.find(|k| *k != key && !ANNOTATIONS.contains(k)) {
        Some(k) => bail!(
            Status::Unsupported,
            "schema: '{k}' beside {key} at {name} is not supported"
        ),
        None => Ok(()),
    }
}

/// JSON Schema's types.
const TYPES: [&str; 7] = [
    "null", "boolean", "number", "integer", "string", "array", "object",
];

/// Whether JSON value `v` is of type `t` (one of [`TYPES`]; "integer": a whole number, `1.0`
/// included).
fn kind_of(v: &Value, t: &str) -> bool {
    match (t, v) {
        ("integer", Value::Number(n)) => Decimal::of(n).is_whole(),
        ("null", Value::Null)
        | ("boolean", Value::Bool(_))
        | ("number", Value::Number(_))
        | ("string", Value::String(_))
        | ("array", Value::Array(_))
        | ("object", Value::Object(_)) => true,
        _ => false,
    }
}

/// Whether `additionalProperties` lets any further key through (absent or `true`).
fn additional_open(s: &Value) -> bool {
    s.get("additionalProperties")
        .is_none_or(|a| *a == Value::Bool(true))
}

/// A character of a JSON string written as itself (not escaped).
const PLAIN_CHAR: &str = r#"[^"\\\x7F\x00-\x1F]"#;

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
        // A \u escape of a surrogate (D800-DFFF) is left out: alone it is not a character
        // (serde_json refuses it) and a pair would be one character counted as two.
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))"#,
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
        check_enforced(s, name)?;

        // allOf of one schema, or $ref, with only annotations beside it: that schema.
        if let Some(all) = s.get("allOf") {
            let Value::Array(all) = all else {
                bail!(Status::BadFormat, "schema: allOf at {name} is not an array");
            };
            if all.len() != 1 {
                bail!(
                    Status::Unsupported,
                    "schema: allOf at {name} with {} schemas is not supported (one only)",
                    all.len()
                );
            }
            check_alone(obj, "allOf", name)?;
            return self.visit(&all[0], name, d);
        }
        if let Some(r) = s.get("$ref") {
            check_alone(obj, "$ref", name)?;
            let Some(r) = r.as_str() else {
                bail!(Status::BadFormat, "schema: $ref at {name} is not a string");
            };
            return self.reference(r, d);
        }
        if let Some((key, alts)) = ["anyOf", "oneOf"]
            .into_iter()
            .find_map(|k| s.get(k).map(|a| (k, a)))
        {
            // A sibling would have to hold as well ("type", "minimum", ...): not enforced here.
            check_alone(obj, key, name)?;
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
        if let Some((key, v)) = ["const", "enum"]
            .into_iter()
            .find_map(|k| s.get(k).map(|v| (k, v)))
        {
            // The values of `type` (a name or a list); other keywords beside them would have to
            // hold as well: not enforced here.
            if let Some((k, _)) = obj
                .iter()
                .find(|(k, _)| k != key && k != "type" && !ANNOTATIONS.contains(&k.as_str()))
            {
                bail!(
                    Status::Unsupported,
                    "schema: '{k}' beside {key} at {name} is not supported"
                );
            }
            let types: Vec<&str> = match ty {
                None => TYPES.to_vec(),
                Some(Value::String(t)) => alloc::vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                Some(_) => bail!(Status::BadFormat, "schema: type at {name} is not a string"),
            };
            if let Some(t) = types.iter().find(|t| !TYPES.contains(t)) {
                bail!(Status::Unsupported, "schema: unknown type '{t}' at {name}");
            }
            let of_type = |v: &Value| types.iter().any(|t| kind_of(v, t));
            let values: Vec<&Value> = match (key, v) {
                ("const", v) => alloc::vec![v],
                (_, Value::Array(values)) => values.iter().collect(),
                _ => bail!(Status::BadFormat, "schema: enum at {name} is not an array"),
            };
            if values.is_empty() {
                bail!(Status::Unsupported, "schema: empty enum at {name}");
            }
            let values: Vec<&Value> = values.into_iter().filter(|v| of_type(v)).collect();
            if values.is_empty() {
                let of = types.join(" or ");
                bail!(
                    Status::Unsupported,
                    "schema: no {key} value of type {of} at {name}"
                );
            }
            let alts: Vec<String> = values.into_iter().map(json_literal).collect();
            return self.add_rule(name, format!("({}) space", alts.join(" | ")));
        }
        // No type: the types the keywords constrain (JSON Schema lets any other kind of value
        // through them; a reply of the constrained kinds always meets them).
        if ty.is_none() {
            let has = |keys: &[&str]| keys.iter().any(|k| s.get(k).is_some());
            let format = s.get("format").and_then(Value::as_str);
            let open = additional_open(s);
            let kinds = [
                (
                    "number",
                    has(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
                ),
                (
                    "string",
                    has(&["minLength", "maxLength", "pattern"])
                        || matches!(format, Some("date" | "time" | "date-time" | "uuid")),
                ),
                (
                    "array",
                    has(&["items", "prefixItems", "minItems", "maxItems"]),
                ),
                ("object", has(&["properties", "required"]) || !open),
            ];
            let types: Vec<Value> = kinds
                .iter()
                .filter(|(_, present)| *present)
                .map(|(t, _)| Value::String((*t).to_string()))
                .collect();
            if !types.is_empty() {
                let mut copy = obj.clone();
                copy.push((
                    "type".to_string(),
                    match types.len() {
                        1 => types[0].clone(),
                        _ => Value::Array(types),
                    },
                ));
                return self.visit(&Value::Object(copy), name, d);
            }
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
        if is("object")
            && (s.get("properties").is_some() || s.get("required").is_some() || !additional_open(s))
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
        if let Some(t @ ("integer" | "number")) = ty_str
            && let Some(body) = self.numeric_bounds(s, name, t == "integer")?
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
        // A required name without a schema in properties is an additional property: any value
        // when those are allowed (the default), else additionalProperties' schema; with
        // additionalProperties false no object has it.
        const ANY: &Value = &Value::Bool(true);
        let mut members: Vec<(&str, &Value)> = props.iter().map(|(k, v)| (k.as_str(), v)).collect();
        for &r in &required {
            if !members.iter().any(|(k, _)| *k == r) {
                let value = match s.get("additionalProperties") {
                    None => ANY,
                    Some(Value::Bool(false)) => bail!(
                        Status::Unsupported,
                        "schema: '{r}' is required at {name} but additionalProperties is false"
                    ),
                    Some(a) => a,
                };
                members.push((r, value));
            }
        }
        let mut req = Vec::new();
        let mut opt = Vec::new();
        for &(k, v) in &members {
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
            if required.contains(&k) {
                req.push(kv);
            } else {
                opt.push(kv);
            }
        }
        match s.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(a) => {
                let value = self.visit(a, &format!("{name}-additional-value"), depth)?;
                let declared: Vec<&str> = members.iter().map(|&(k, _)| k).collect();
                let key = self.key_not_in(name, &declared)?;
                let kv = self.add_rule(
                    &format!("{name}-additional-kv"),
                    format!(r#"{key} ":" space {value}"#),
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
            // Exactly one value per schema of the tuple: counts that rule that out are refused.
            let n = items.len() as u32;
            let (min, max) = (
                self.count(s, "minItems", name)?,
                self.count(s, "maxItems", name)?,
            );
            if min.is_some_and(|m| m > n) || max.is_some_and(|m| m < n) {
                bail!(
                    Status::Unsupported,
                    "schema: minItems/maxItems at {name} rule out its {n} prefixItems"
                );
            }
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

    /// A key of an additional property: any JSON string but the declared `names`, written
    /// without escapes (with them a key could spell a name another way; parsers keep the last
    /// of two equal keys, so a repeated name would replace its checked value). One rule per
    /// node of the names' trie.
    fn key_not_in(&mut self, name: &str, names: &[&str]) -> Result<String> {
        const MAX_NAME: usize = 256;
        let plain = |c: char| c != '"' && c != '\\' && c >= ' ' && c != '\x7f';
        let mut trie_names: Vec<Vec<char>> = Vec::new();
        for n in names {
            // A name with a character JSON escapes cannot be written without escapes anyway.
            if n.chars().all(plain) {
                if n.len() > MAX_NAME {
                    bail!(
                        Status::Unsupported,
                        "schema: a property name over {MAX_NAME} bytes with additionalProperties at {name}"
                    );
                }
                trie_names.push(n.chars().collect());
            }
        }
        // Sorted once: below any node its names are one run, a name ending there first.
        crate::sort::heapsort_by(&mut trie_names, &mut |a, b| a < b);
        trie_names.dedup();
        let rest = self.add_rule(&format!("{name}-key-rest"), format!("{PLAIN_CHAR}*"))?;
        let body = self.key_node(name, &trie_names, 0, &rest)?;
        self.add_rule(&format!("{name}-key"), format!(r#""\"" {body} "\"" space"#))
    }

    /// The rest of a key whose first `depth` characters every name of `names` (sorted, no
    /// two equal) starts with.
    fn key_node(
        &mut self,
        name: &str,
        names: &[Vec<char>],
        depth: usize,
        rest: &str,
    ) -> Result<String> {
        let ends_here = names.first().is_some_and(|n| n.len() == depth);
        let mut longer = &names[ends_here as usize..];
        let mut alts = Vec::new();
        // PLAIN_CHAR's class left open, to exclude the characters that continue a name.
        let mut others = String::from(PLAIN_CHAR.strip_suffix(']').unwrap_or(PLAIN_CHAR));
        while let Some(first) = longer.first() {
            let c = first[depth];
            let run = longer.iter().take_while(|n| n[depth] == c).count();
            let then = self.key_node(name, &longer[..run], depth + 1, rest)?;
            longer = &longer[run..];
            alts.push(format!(
                "{} {then}",
                gbnf_literal(c.encode_utf8(&mut [0; 4]))
            ));
            others.push_str(&super::schema_pattern::member(c));
        }
        // A character no name has here: then any key.
        alts.push(format!("{others}] {rest}"));
        // The key may end here unless a name does.
        let ends = if ends_here { "" } else { "?" };
        self.add_rule(
            &format!("{name}-key-{depth}"),
            format!("({}){ends}", alts.join(" | ")),
        )
    }

    /// A number or integer with bounds (`minimum`, `maximum`, `exclusive*`, any JSON number;
    /// with both kinds on one side, the tighter), as the decimal literals in range (see
    /// [`numeric_range`]); `None` when there are no bounds.
    fn numeric_bounds(&mut self, s: &Value, name: &str, integer: bool) -> Result<Option<String>> {
        let bound = |k: &str, excluded: bool, lower: bool| -> Result<Option<Bound>> {
            match s.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => Ok(Some(Bound::parse(n, excluded, lower))),
                Some(_) => bail!(Status::BadFormat, "schema: {k} at {name} is not a number"),
            }
        };
        // Of an inclusive and an exclusive bound on one side, the tighter one.
        let tighter = |incl: Option<Bound>, excl: Option<Bound>, low: bool| match (incl, excl) {
            (Some(i), Some(x)) => {
                let x_tighter = match x.cmp_value(&i) {
                    Ordering::Equal => true,
                    o => (o == Ordering::Greater) == low,
                };
                Some(if x_tighter { x } else { i })
            }
            (i, x) => i.or(x),
        };
        let lo = tighter(
            bound("minimum", false, true)?,
            bound("exclusiveMinimum", true, true)?,
            true,
        );
        let hi = tighter(
            bound("maximum", false, false)?,
            bound("exclusiveMaximum", true, false)?,
            false,
        );
        if lo.is_none() && hi.is_none() {
            return Ok(None);
        }
        let body = numeric_range(lo.as_ref(), hi.as_ref(), integer);
        if body.is_empty() {
            let kind = if integer { "integer" } else { "number" };
            bail!(Status::Unsupported, "schema: empty {kind} range at {name}");
        }
        if !integer {
            self.primitive("decimal-part");
        }
        Ok(Some(format!("{body} space")))
    }
}

/// The most digits of an integer part, as in the `integral-part` primitive.
const MAX_INT_DIGITS: u32 = 16;
/// The most digits of a fraction, as in the `decimal-part` primitive.
const MAX_FRAC_DIGITS: u32 = 16;

/// The absolute value of a bound, exactly: its integer part (`u64::MAX` for any of more than
/// 19 digits: beyond every literal written here) and its fraction digits (ASCII, no trailing
/// zeros; cut after `MAX_FRAC_DIGITS + 1` digits, see [`Bound::parse`]).
#[derive(Clone, Debug, PartialEq)]
struct Magnitude {
    int: u64,
    frac: Vec<u8>,
}

/// A JSON number literal (valid: the schema's reader checked it) as its sign and digits, the
/// decimal point before `digits[point]` (`point` may be negative or past the end).
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    point: i64,
}

impl Decimal {
    fn of(literal: &str) -> Decimal {
        let (negative, rest) = match literal.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, literal),
        };
        let (mantissa, exp) = match rest.find(['e', 'E']) {
            Some(i) => {
                let e = &rest[i + 1..];
                let e = e.strip_prefix('+').unwrap_or(e);
                // Past ±100000 every digit is far beyond both caps either way.
                let far = if e.starts_with('-') {
                    -100_000
                } else {
                    100_000
                };
                (
                    &rest[..i],
                    e.parse::<i64>().unwrap_or(far).clamp(-100_000, 100_000),
                )
            }
            None => (rest, 0),
        };
        let (int_digits, frac_digits) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        Decimal {
            negative,
            digits: int_digits.bytes().chain(frac_digits.bytes()).collect(),
            point: int_digits.len() as i64 + exp,
        }
    }

    /// Whether the value is a whole number (JSON Schema's "integer": `1.0` and `1e2` are).
    fn is_whole(&self) -> bool {
        let from = usize::try_from(self.point.max(0)).unwrap_or(usize::MAX);
        self.digits.iter().skip(from).all(|&d| d == b'0')
    }
}

/// A numeric bound: its sign, magnitude and whether the bound itself is excluded.
#[derive(Clone, Debug, PartialEq)]
struct Bound {
    negative: bool,
    mag: Magnitude,
    excluded: bool,
}

impl Bound {
    /// A JSON number literal (`-12.5e-1`, valid: the schema's reader checked it) as a lower
    /// (`lower`) or upper bound. A fraction longer than `MAX_FRAC_DIGITS + 1` digits is cut
    /// there, which keeps every comparison with a literal of at most `MAX_FRAC_DIGITS` digits
    /// when the cut digits are not all zero: the cut moves the value toward zero, so a bound it
    /// moves inward (a positive lower one, a negative upper one) becomes excluded (no literal
    /// lies between the cut value and the bound), one it moves outward included.
    fn parse(literal: &str, excluded: bool, lower: bool) -> Bound {
        let Decimal {
            negative,
            digits,
            point,
        } = Decimal::of(literal);
        let digit = |i: i64| match usize::try_from(i) {
            Ok(i) if i < digits.len() => digits[i],
            _ => b'0',
        };
        let mut int = 0u64;
        // (Past the written digits all are zeros: the search stays within them.)
        let written = point.min(digits.len() as i64);
        if let Some(first) = (0..written).find(|&i| digit(i) != b'0') {
            if point - first > 19 {
                int = u64::MAX;
            } else {
                for i in first..point {
                    int = int * 10 + u64::from(digit(i) - b'0');
                }
            }
        }
        let keep = i64::from(MAX_FRAC_DIGITS) + 1;
        let mut frac: Vec<u8> = (point..point + keep).map(digit).collect();
        while frac.last() == Some(&b'0') {
            frac.pop();
        }
        let cut = (point + keep..digits.len() as i64).any(|i| digit(i) != b'0');
        let excluded = if cut { lower != negative } else { excluded };
        let zero = int == 0 && frac.is_empty();
        Bound {
            negative: negative && !zero,
            mag: Magnitude { int, frac },
            excluded,
        }
    }

    /// Compares the values (not the exclusions).
    fn cmp_value(&self, other: &Bound) -> Ordering {
        let mags = (self.mag.int, &self.mag.frac).cmp(&(other.mag.int, &other.mag.frac));
        match (self.negative, other.negative) {
            (false, false) => mags,
            (true, true) => mags.reverse(),
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
        }
    }
}
/// GBNF for the decimal literals `x` (no exponent, no leading zeros, up to [`MAX_INT_DIGITS`]
/// integer digits and [`MAX_FRAC_DIGITS`] fraction digits; with `integer` no fraction) with
/// `lo <= x` (`<` when excluded) and likewise `hi`; empty when none is. A literal's sign,
/// integer part and fraction are matched separately: on each side of zero the integer parts
/// strictly inside the bounds take any fraction, a bound's own integer part only the fractions
/// that keep it in range.
fn numeric_range(lo: Option<&Bound>, hi: Option<&Bound>, integer: bool) -> String {
    let zero = Magnitude {
        int: 0,
        frac: Vec::new(),
    };
    let is_zero = |b: &Bound| b.mag == zero;
    let mut alts = Vec::new();
    // x >= 0: magnitudes from max(lo, 0) up to hi.
    let below_zero = hi.is_some_and(|h| h.negative || (is_zero(h) && h.excluded));
    if !below_zero {
        let from = match lo {
            Some(l) if !l.negative => (&l.mag, l.excluded),
            _ => (&zero, false),
        };
        let to = hi.map(|h| (&h.mag, h.excluded));
        magnitudes(from, to, integer, &mut alts);
    }
    // x < 0: magnitudes above max(-hi, 0) (above 0: no "-0") up to -lo.
    let above_zero = lo.is_some_and(|l| !l.negative);
    if !above_zero {
        let from = match hi {
            Some(h) if h.negative => (&h.mag, h.excluded),
            _ => (&zero, true),
        };
        let to = lo.map(|l| (&l.mag, l.excluded));
        let mut neg = Vec::new();
        magnitudes(from, to, integer, &mut neg);
        if !neg.is_empty() {
            alts.push(format!(r#""-" ({})"#, neg.join(" | ")));
        }
    }
    match alts.len() {
        0 => String::new(),
        _ => format!("({})", alts.join(" | ")),
    }
}

/// Alternatives for the unsigned decimal literals `m` with `from.0 <= m` (`<` when `from.1`)
/// and `m <= to.0` (`<` when `to.1`; no `to`: any up to [`MAX_INT_DIGITS`] digits).
fn magnitudes(
    from: (&Magnitude, bool),
    to: Option<(&Magnitude, bool)>,
    integer: bool,
    alts: &mut Vec<String>,
) {
    let cap = 10u64.pow(MAX_INT_DIGITS);
    // A bound past every literal: as the lower one nothing is left, as the upper one none.
    if from.0.int >= cap {
        return;
    }
    let to = to.filter(|(b, _)| b.int < cap);
    let ((a, a_excl), b) = (from, to);
    if integer {
        // The integer parts from the lowest whole number in range to the highest.
        let lo = a.int + u64::from(a_excl || !a.frac.is_empty());
        match b {
            Some((b, excl)) if b.frac.is_empty() && excl => {
                if let Some(hi) = b.int.checked_sub(1) {
                    integer_parts(lo, Some(hi), alts)
                }
            }
            Some((b, _)) => integer_parts(lo, Some(b.int), alts),
            None => integer_parts(lo, None, alts),
        }
        return;
    }
    // One integer part: only the fractions between the bounds'.
    let own = |int: u64, lo: Option<(&[u8], bool)>, hi: Option<(&[u8], bool)>| match fractions(
        lo,
        hi,
        MAX_FRAC_DIGITS,
    ) {
        (Some(f), true) => Some(format!(r#""{int}" ("." {f})?"#)),
        (Some(f), false) => Some(format!(r#""{int}" "." {f}"#)),
        (None, true) => Some(format!(r#""{int}""#)),
        (None, false) => None,
    };
    if let Some((b, b_excl)) = b
        && a.int >= b.int
    {
        if a.int == b.int {
            alts.extend(own(a.int, Some((&a.frac, a_excl)), Some((&b.frac, b_excl))));
        }
        return;
    }
    // Integer parts strictly between the bounds' own: any fraction (or none); the lower
    // bound's own too when it is a whole number and included.
    let a_free = a.frac.is_empty() && !a_excl;
    let first = a.int + u64::from(!a_free);
    let mut any = Vec::new();
    match b {
        Some((b, _)) => {
            if let Some(last) = b.int.checked_sub(1) {
                integer_parts(first, Some(last), &mut any)
            }
        }
        None => integer_parts(first, None, &mut any),
    }
    if !any.is_empty() {
        alts.push(format!(r#"({}) ("." decimal-part)?"#, any.join(" | ")));
    }
    if !a_free {
        alts.extend(own(a.int, Some((&a.frac, a_excl)), None));
    }
    if let Some((b, b_excl)) = b {
        alts.extend(own(b.int, None, Some((&b.frac, b_excl))));
    }
}

/// The fractions `d` (digit strings of 1 to `n` digits, read as `0.d`) with `lo <= 0.d` (`<`
/// when lo's flag; `None`: no lower bound) and `0.d <= hi` (likewise), as GBNF (`None`: no such
/// string), and whether the value 0 (no fraction at all) is in range. `lo` and `hi` are digit
/// strings without trailing zeros. Digit by digit: a first digit strictly between the bounds'
/// first digits takes any rest; one equal to a bound's, a rest bounded by that bound's rest.
fn fractions(
    lo: Option<(&[u8], bool)>,
    hi: Option<(&[u8], bool)>,
    n: u32,
) -> (Option<String>, bool) {
    // A lower bound of 0, included, bounds nothing.
    let lo = lo.filter(|&(d, excl)| !d.is_empty() || excl);
    let zero_ok = lo.is_none() && !matches!(hi, Some(([], true)));
    if n == 0 {
        return (None, zero_ok);
    }
    let first = |b: Option<(&[u8], bool)>, none: u8| {
        b.map_or(none, |(d, _)| d.first().copied().unwrap_or(b'0'))
    };
    fn rest(b: Option<(&[u8], bool)>) -> Option<(&[u8], bool)> {
        b.map(|(d, excl)| (d.get(1..).unwrap_or(&[]), excl))
    }
    let (l1, h1) = (first(lo, b'0'), first(hi, b'9'));
    if l1 > h1 {
        return (None, zero_ok);
    }
    // The digit `c`, then a rest within `lo`..`hi` (or none, when 0 is within them).
    let then = |c: u8, lo: Option<(&[u8], bool)>, hi: Option<(&[u8], bool)>| {
        let c = c as char;
        match fractions(lo, hi, n - 1) {
            (Some(r), true) => Some(format!(r#""{c}" ({r})?"#)),
            (Some(r), false) => Some(format!(r#""{c}" {r}"#)),
            (None, true) => Some(format!(r#""{c}""#)),
            (None, false) => None,
        }
    };
    let mut alts = Vec::new();
    if l1 == h1 {
        alts.extend(then(l1, rest(lo), rest(hi)));
    } else {
        if lo.is_some() {
            alts.extend(then(l1, rest(lo), None));
        }
        let (a, b) = (l1 + u8::from(lo.is_some()), h1 - u8::from(hi.is_some()));
        if a <= b {
            let any = if n > 1 {
                format!(" [0-9]{{0,{}}}", n - 1)
            } else {
                String::new()
            };
            alts.push(format!("[{}-{}]{any}", a as char, b as char));
        }
        if hi.is_some() {
            alts.extend(then(h1, None, rest(hi)));
        }
    }
    let body = match alts.len() {
        0 => None,
        1 => alts.pop(),
        _ => Some(format!("({})", alts.join(" | "))),
    };
    (body, zero_ok)
}

/// Alternatives for the integer parts `lo..=hi` (no `hi`: up to [`MAX_INT_DIGITS`] digits),
/// written without leading zeros; none when the range is empty.
fn integer_parts(lo: u64, hi: Option<u64>, alts: &mut Vec<String>) {
    let cap = 10u64.pow(MAX_INT_DIGITS) - 1;
    let hi_capped = hi.unwrap_or(cap).min(cap);
    if lo > hi_capped {
        return;
    }
    let digits = |v: u64| v.checked_ilog10().unwrap_or(0) + 1;
    for len in digits(lo)..=digits(hi_capped) {
        if hi.is_none() && len > digits(lo) {
            // Every longer literal, whole: one alternative.
            alts.push(format!("[1-9] [0-9]{{{},{}}}", len - 1, MAX_INT_DIGITS - 1));
            break;
        }
        let first = if len == 1 { 0 } else { 10u64.pow(len - 1) };
        let from = lo.max(first).to_string();
        let to = hi_capped.min(10u64.pow(len) - 1).to_string();
        alts.push(same_length(from.as_bytes(), to.as_bytes()));
    }
}

/// GBNF for the digit strings of one length from `lo` to `hi` (`lo <= hi`, ASCII digits): the
/// common prefix, then the first differing digit's three cases (the low digit followed by
/// anything from `lo`'s rest up, the digits between followed by anything, the high digit
/// followed by anything up to `hi`'s rest).
fn same_length(lo: &[u8], hi: &[u8]) -> String {
    let text = |d: &[u8]| String::from_utf8_lossy(d).into_owned();
    let Some(i) = lo.iter().zip(hi).position(|(a, b)| a != b) else {
        return format!("\"{}\"", text(lo));
    };
    let prefix = if i > 0 {
        format!("\"{}\" ", text(&lo[..i]))
    } else {
        String::new()
    };
    let (dl, dh) = (lo[i] as char, hi[i] as char);
    let (rest_lo, rest_hi) = (&lo[i + 1..], &hi[i + 1..]);
    let k = rest_lo.len();
    let any = if k == 0 {
        String::new()
    } else {
        format!(" [0-9]{{{k}}}")
    };
    if rest_lo.iter().all(|&c| c == b'0') && rest_hi.iter().all(|&c| c == b'9') {
        return format!("{prefix}[{dl}-{dh}]{any}");
    }
    let mut alts = vec![format!("\"{dl}\" {}", same_length(rest_lo, &vec![b'9'; k]))];
    if (dl as u8) + 1 < dh as u8 {
        let (a, b) = ((dl as u8 + 1) as char, (dh as u8 - 1) as char);
        alts.push(format!("[{a}-{b}]{any}"));
    }
    alts.push(format!("\"{dh}\" {}", same_length(&vec![b'0'; k], rest_hi)));
    format!("{prefix}({})", alts.join(" | "))
}
