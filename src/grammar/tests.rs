use super::*;
use crate::testutil::Rng;
use alloc::string::ToString;

/// Whether `text` is in the language of `grammar` (complete match).
fn matches(grammar: &str, text: &str) -> bool {
    let g = Grammar::parse(grammar).unwrap_or_else(|e| panic!("{grammar}: {e}"));
    let mut m = Matcher::new(g).unwrap();
    m.accept_bytes(text.as_bytes()).is_ok() && m.can_end()
}

/// Whether `text` is a prefix of some string of the language.
fn prefix(grammar: &str, text: &str) -> bool {
    let mut m = Matcher::new(Grammar::parse(grammar).unwrap()).unwrap();
    m.accept_bytes(text.as_bytes()).is_ok()
}

fn parse_error(grammar: &str) -> alloc::string::String {
    Grammar::parse(grammar)
        .unwrap_err()
        .message
        .as_str()
        .to_string()
}

#[test]
fn literals_sequences_and_alternatives() {
    let g = r#"root ::= "ab" "c" | "x""#;
    assert!(matches(g, "abc"));
    assert!(matches(g, "x"));
    assert!(!matches(g, "ab"));
    assert!(prefix(g, "ab"));
    assert!(!matches(g, "abcx"));
    assert!(!prefix(g, "y"));
    assert!(matches(r#"root ::= "" | "a""#, ""));
}

#[test]
fn escapes_and_unicode() {
    let g = r#"root ::= "\x41\u00e9\U0001F600\n\t\\\"" "é""#;
    assert!(matches(g, "Aé😀\n\t\\\"é"));
    assert!(!matches(g, "Ae😀\n\t\\\"é"));
    // Multi-byte characters split anywhere.
    let mut m = Matcher::new(Grammar::parse(r#"root ::= "😀é""#).unwrap()).unwrap();
    let bytes = "😀é".as_bytes();
    for b in bytes {
        m.accept_bytes(core::slice::from_ref(b)).unwrap();
        if b != bytes.last().unwrap() {
            assert!(!m.can_end());
        }
    }
    assert!(m.can_end());
    let mut m = Matcher::new(Grammar::parse(r#"root ::= "é""#).unwrap()).unwrap();
    assert!(m.accept_bytes(&"è".as_bytes()[..1]).is_ok()); // same lead byte
    assert!(m.accept_bytes(&"è".as_bytes()[1..]).is_err());
    assert!(m.accept_bytes(&[0xFF]).is_err());
    // A lone lead byte of a 3- or 4-byte character cannot start an ASCII character.
    for lead in [0xE0u8, 0xF0] {
        let mut m = Matcher::new(Grammar::parse(r#"root ::= "t""#).unwrap()).unwrap();
        assert!(m.accept_bytes(&[lead]).is_err(), "{lead:x}");
    }
}

#[test]
fn character_classes() {
    let g = r#"root ::= [a-cx] [^0-9\]] [\-] [é-ë] ."#;
    assert!(matches(g, "a)-ê!"));
    assert!(matches(r#"root ::= [a-cx]"#, "x"));
    assert!(matches(r#"root ::= [^0-9\]]"#, "y"));
    assert!(matches(r#"root ::= [é-ë]"#, "ë"));
    assert!(matches(r#"root ::= ."#, "😀"));
    assert!(matches(g, "xy-ë😀"));
    assert!(!matches(g, "d]-ê!"));
    assert!(!matches(g, "a5-ê!"));
    assert!(!matches(g, "a]]ê!"));
    assert!(!matches(g, "a]-ì!"));
    assert!(matches(r#"root ::= [^]"#, "q"));
    assert!(matches(r#"root ::= [\x00-\x1F]"#, "\n"));
}

#[test]
fn repetitions() {
    let g = r#"root ::= "a"* "b"+ "c"? "#;
    for ok in ["b", "aab", "bbbc", "abc"] {
        assert!(matches(g, ok), "{ok}");
    }
    for bad in ["", "a", "cc", "abcc", "ba"] {
        assert!(!matches(g, bad), "{bad}");
    }
    let g = r#"root ::= [0-9]{2} "-" [a-z]{1,3} "-" "x"{2,} "-" ("ab" | "c"){0,2}"#;
    for ok in ["12-a-xx-", "12-abc-xxxx-abc", "99-zz-xxx-cc"] {
        assert!(matches(g, ok), "{ok}");
    }
    for bad in [
        "1-a-xx-",
        "12--xx-",
        "12-abcd-xx-",
        "12-a-x-",
        "12-a-xx-ccc",
    ] {
        assert!(!matches(g, bad), "{bad}");
    }
    // A repeated literal repeats as a whole.
    assert!(matches(r#"root ::= "ab"{2}"#, "abab"));
    assert!(!matches(r#"root ::= "ab"{2}"#, "abb"));
}

#[test]
fn rules_grouping_comments_and_recursion() {
    let g = r#"
# a list of numbers
root  ::= "[" ws ( num ( "," ws num )* )? "]"   # trailing comment
num   ::= "-"? [0-9]+
ws    ::= [ \t\n]*
"#;
    assert!(matches(g, "[]"));
    assert!(matches(g, "[ 1, -22,\n3]"));
    assert!(!matches(g, "[1,]"));
    assert!(!matches(g, "[1 2]"));
    // Right and middle recursion.
    let g = r#"root ::= "(" root ")" | """#;
    assert!(matches(g, "((()))"));
    assert!(!matches(g, "(()"));
    // Alternatives across lines after '|' and inside parentheses.
    let g = "root ::= (\n  \"a\"\n  | \"b\"\n) |\n \"c\"";
    assert!(matches(g, "a") && matches(g, "b") && matches(g, "c"));
}

#[test]
fn errors_name_position_and_reason() {
    // Each grammar, and what its error must say.
    let cases: &[(&str, &[&str])] = &[
        ("root ::= foo", &["undefined rule 'foo'", "byte 9"]),
        (r#"root ::= "abc"#, &["unterminated literal", "byte 9"]),
        ("root ::= [a-", &["byte"]),
        ("foo ::= \"a\"", &["no 'root' rule"]),
        (
            "root ::= \"a\"\nroot ::= \"b\"",
            &["defined twice", "line 2"],
        ),
        ("root ::= \"a\" )", &["unexpected ')'", "byte 13"]),
        ("root ::= [z-a]", &["range out of order"]),
        ("root ::= \"\\q\"", &["unknown escape"]),
        ("root ::= \"a\"{3,1}", &["max < min"]),
        ("root ::= \"a\"{99999}", &["exceeds"]),
        ("root ::= * \"a\"", &["needs an item"]),
        ("root ::= \"a\"\n  ::= \"b\"", &["expected a rule name"]),
        (
            "root ::= (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((\"a\")))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
            &["nested too deeply"],
        ),
    ];
    for &(grammar, wants) in cases {
        let e = parse_error(grammar);
        assert!(wants.iter().all(|w| e.contains(w)), "{grammar:?}: {e}");
    }
}

#[test]
fn left_recursion_is_an_error() {
    let e = parse_error(r#"root ::= root "a" | "b""#);
    assert!(e.contains("left-recursive"), "{e}");
    let e = parse_error("root ::= x\nx ::= y? root \"a\"\ny ::= \"b\"");
    assert!(e.contains("left-recursive"), "{e}");
    // A nullable item repeated.
    let e = parse_error(r#"root ::= ("a"?)*"#);
    assert!(e.contains("left-recursive"), "{e}");
    // Recursion after a character is fine.
    assert!(Grammar::parse(r#"root ::= "a" root | "b""#).is_ok());
}

#[test]
fn hostile_grammars_give_errors_not_hangs() {
    // Exponentially ambiguous: every split of "aaaa..." is a path.
    let g = r#"root ::= x*
x ::= "a" | "a" "a" | "a" "a" "a" | "a" "a" "a" "a""#;
    let mut m = Matcher::new(Grammar::parse(g).unwrap()).unwrap();
    let mut failed = false;
    for _ in 0..200 {
        if m.accept_bytes(b"a").is_err() {
            failed = true;
            break;
        }
    }
    // Either it dedups the paths (they converge) or it says the grammar is too ambiguous.
    let _ = failed;
    // Huge repetitions are capped.
    let big = alloc::format!("root ::= \"{}\"{{2000}}", "a".repeat(1000));
    assert!(
        Grammar::parse(&big)
            .unwrap_err()
            .message
            .as_str()
            .contains("too large")
    );
    let text = alloc::format!("root ::= \"{}\"", "a".repeat(MAX_GRAMMAR_BYTES));
    assert!(Grammar::parse(&text).is_err());
}

/// The grammar of `schema` accepts every text of `ok` and none of `bad`.
fn check_schema(schema: &str, ok: &[&str], bad: &[&str]) {
    let gbnf = schema::to_gbnf(schema.as_bytes()).unwrap_or_else(|e| panic!("{schema}: {e}"));
    for t in ok {
        assert!(matches(&gbnf, t), "{schema}\n{gbnf}\nshould accept {t}");
    }
    for t in bad {
        assert!(!matches(&gbnf, t), "{schema}\n{gbnf}\nshould reject {t}");
    }
}

#[test]
fn schema_primitives() {
    check_schema(
        r#"{"type":"string"}"#,
        &[r#""""#, r#""a\"b\\c\u00e9 ü""#],
        &[r#""a"#, r#""a"b""#, "1", "\"\n\""],
    );
    check_schema(
        r#"{"type":"number"}"#,
        &["0", "-1.5", "3e10", "12.25E-3"],
        &["01", "1.", "+1", "\"1\"", "1e999"],
    );
    check_schema(r#"{"type":"integer"}"#, &["0", "-12"], &["1.5", "00"]);
    check_schema(r#"{"type":"boolean"}"#, &["true", "false"], &["null"]);
    check_schema(r#"{"type":"null"}"#, &["null"], &["nul"]);
    check_schema(r#"{}"#, &["{}", r#"{"a": [1, {"b": null}]}"#], &["[]", "1"]);
    check_schema(
        r#"{"description": "anything"}"#,
        &["{}", "[1]", "\"s\"", "-2"],
        &["nope"],
    );
}

#[test]
fn schema_objects_required_optional_and_additional() {
    // Required properties first (in their order), then the optional ones, as llama.cpp.
    let s = r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]}"#;
    check_schema(
        s,
        &[
            r#"{"b":"x"}"#,
            r#"{"b":"x","a":1}"#,
            r#"{ "b": "x", "a": 1, "c": true }"#,
            r#"{"b":"x","c":false}"#,
        ],
        &[
            r#"{}"#,
            r#"{"a":1}"#,
            r#"{"a":1,"b":"x"}"#,
            r#"{"b":"x","d":1}"#,
            r#"{"b":1}"#,
        ],
    );
    // No required property: any ordered subset.
    let s = r#"{"properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}"#;
    check_schema(
        s,
        &["{}", r#"{"a":1}"#, r#"{"b":2}"#, r#"{"a":1,"b":2}"#],
        &[r#"{"b":2,"a":1}"#, r#"{,"b":2}"#, r#"{"a":1,}"#],
    );
    // additionalProperties: a schema.
    let s = r#"{"properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":{"type":"number"}}"#;
    check_schema(
        s,
        &[r#"{"a":1}"#, r#"{"a":1,"x":2.5,"y":3}"#],
        &[r#"{"a":1,"x":"s"}"#],
    );
    check_schema(
        r#"{"type":"object","additionalProperties":false}"#,
        &["{}"],
        &[r#"{"a":1}"#],
    );
    // A required name without a schema in properties takes any value; it is still required.
    check_schema(
        r#"{"type":"object","required":["b","b"]}"#,
        &[r#"{"b":1}"#, r#"{"b":{"c":[]}}"#],
        &["{}", r#"{"a":1}"#, r#"{"b":1,"b":2}"#],
    );
    check_schema(
        r#"{"properties":{"a":{"type":"integer"}},"required":["b"],"additionalProperties":true}"#,
        &[r#"{"b":"x","a":1}"#, r#"{"b":null,"c":2}"#],
        &[r#"{"a":1}"#, r#"{"b":1,"b":2}"#],
    );
    // ... or additionalProperties' value when that is a schema; none with false.
    check_schema(
        r#"{"required":["n"],"additionalProperties":{"type":"integer"}}"#,
        &[r#"{"n":1}"#, r#"{"n":1,"m":2}"#],
        &["{}", r#"{"n":"x"}"#],
    );
    let e = schema::to_gbnf(br#"{"required":["n"],"additionalProperties":false}"#).unwrap_err();
    assert!(
        e.message
            .as_str()
            .contains("but additionalProperties is false"),
        "{e}"
    );
    // An additional key is never a declared one (a parser would keep the second value), nor
    // written with escapes (which could spell one); keys that only start like one are fine.
    let s = r#"{"properties":{"a":{"type":"integer"},"ab":{"type":"integer"},"été":{"type":"integer"},"q\"":{"type":"integer"}},"additionalProperties":true}"#;
    check_schema(
        s,
        &[
            r#"{"a":1,"b":"x"}"#,
            r#"{"a":1,"abc":[],"":0,"ét":1,"étéx":2,"q":3}"#,
            r#"{"q\"":1}"#,
        ],
        &[
            r#"{"a":1,"a":"x"}"#,
            r#"{"a":1,"ab":"x"}"#,
            r#"{"été":"x"}"#,
            r#"{"\u0061":"x"}"#,
            r#"{"q\"":1,"q\"":"x"}"#,
        ],
    );
}

#[test]
fn schema_arrays_enums_consts_anyof_refs() {
    check_schema(
        r#"{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}"#,
        &["[1]", "[1, 2, 3]"],
        &["[]", "[1,2,3,4]", "[1,]"],
    );
    check_schema(
        r#"{"type":"array","items":{"type":"string"}}"#,
        &["[]", r#"["a","b"]"#],
        &["[1]"],
    );
    check_schema(
        r#"{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}]}"#,
        &[r#"[1,"a"]"#],
        &["[1]", r#"["a",1]"#],
    );
    check_schema(
        r#"{"enum":["red","green",3,null,{"a":[1]}]}"#,
        &[r#""red""#, "3", "null", r#"{"a":[1]}"#],
        &[r#""blue""#, "4"],
    );
    check_schema(r#"{"const":"x\ny"}"#, &[r#""x\ny""#], &[r#""xy""#]);
    check_schema(
        r#"{"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]}"#,
        &["1", r#""ab""#],
        &[r#""abc""#, "true"],
    );
    check_schema(r#"{"type":["string","null"]}"#, &["null", r#""s""#], &["1"]);
    // Item counts without an item schema still count (any values).
    check_schema(
        r#"{"type":"array","minItems":1,"maxItems":2}"#,
        &[r#"[1]"#, r#"["a", {"b": null}]"#],
        &["[]", "[1, 2, 3]"],
    );
    let tree = r##"{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"}"##;
    check_schema(
        tree,
        &[
            r#"{"v":1}"#,
            r#"{"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]}"#,
        ],
        &[r#"{"v":1,"kids":[{}]}"#],
    );
    let defs = r##"{"definitions":{"c":{"enum":["a","b"]}},"type":"object","properties":{"x":{"$ref":"#/definitions/c"}},"required":["x"]}"##;
    check_schema(defs, &[r#"{"x":"a"}"#], &[r#"{"x":"c"}"#]);
    check_schema(
        r#"{"prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":2,"maxItems":2}"#,
        &[r#"[1, "x"]"#],
        &["[1]", r#"[1, 2, 3]"#],
    );
}

#[test]
fn schema_strings_formats_patterns_and_integer_ranges() {
    check_schema(
        r#"{"type":"string","minLength":2,"maxLength":3}"#,
        &[r#""ab""#, r#""a\"c""#],
        &[r#""a""#, r#""abcd""#],
    );
    // \u escapes of surrogates are not written (alone they are not characters; a pair is one
    // character, which minLength would count as two); the character itself is.
    check_schema(
        r#"{"type":"string","minLength":2}"#,
        &[r#""\u00e9\uD7FF\uE000\uffff""#, "\"😀😀\""],
        &[r#""\ud83d\ude00""#, r#""\uD800x""#, r#""x\udfff""#],
    );
    check_schema(
        r#"{"type":"string","format":"date"}"#,
        &[r#""2024-02-29""#],
        &[r#""2024-13-01""#],
    );
    check_schema(
        r#"{"type":"string","format":"date-time"}"#,
        &[r#""2024-02-29T12:30:00Z""#],
        &[r#""2024-02-29 12:30""#],
    );
    check_schema(
        r#"{"type":"string","format":"uuid"}"#,
        &[r#""123e4567-e89b-12d3-a456-426614174000""#],
        &[r#""123""#],
    );
    check_schema(
        r#"{"type":"string","pattern":"^[A-Z]{2}-\\d{3}(x|yz)?$"}"#,
        &[r#""AB-123""#, r#""QQ-000yz""#],
        &[r#""A-123""#, r#""AB-12""#, r#""AB-123y""#],
    );
    check_schema(
        r#"{"type":"string","pattern":"^a.\"[^b]$"}"#,
        &[r#""ax\"c""#],
        &[r#""ax\"b""#, r#""a\"\"\"""#],
    );
    for bad in [r#"^(a)\1$"#, "abc", r#"^(?=a)$"#] {
        let s = alloc::format!(
            r#"{{"type":"string","pattern":"{}"}}"#,
            bad.replace('\\', "\\\\")
        );
        let e = schema::to_gbnf(s.as_bytes()).unwrap_err();
        assert_eq!(e.status, crate::error::Status::Unsupported, "{bad}: {e}");
    }
    check_schema(
        r#"{"type":"integer","minimum":-2,"maximum":11}"#,
        &["-2", "0", "11"],
        &["-3", "12", "1.0"],
    );
    check_schema(r#"{"type":"integer","minimum":0}"#, &["0", "123"], &["-1"]);
    // An inclusive and an exclusive bound together: the tighter of each pair holds.
    check_schema(
        r#"{"type":"integer","minimum":2,"exclusiveMinimum":3,"maximum":9,"exclusiveMaximum":6}"#,
        &["4", "5"],
        &["2", "3", "6", "9"],
    );
    check_schema(
        r#"{"type":"integer","minimum":4,"exclusiveMinimum":0,"maximum":5,"exclusiveMaximum":60}"#,
        &["4", "5"],
        &["1", "3", "6"],
    );
}

/// Numeric bounds against their meaning: for integer and number schemas with random bounds
/// (inclusive, exclusive, both kinds, one side or two), literals near every bound and far off
/// (integers, and for numbers with fractions: zeros, halves, tiny, near one) are matched
/// exactly when their value is in range; literals with leading zeros never are.
#[test]
fn schema_numeric_bounds_match_their_range() {
    const BOUNDS: [i64; 12] = [-1001, -100, -10, -9, -1, 0, 1, 9, 10, 99, 100, 4567];
    const FRACTIONS: [(&str, f64); 7] = [
        ("", 0.0),
        (".0", 0.0),
        (".00", 0.0),
        (".5", 0.5),
        (".05", 0.05),
        (".999", 0.999),
        (".0001", 0.0001),
    ];
    let mut rng = Rng(0x5EED_B0DE);
    for case in 0..80 {
        let integer = case % 2 == 0;
        let pick = |rng: &mut Rng| (rng.below(3) > 0).then(|| BOUNDS[rng.below(BOUNDS.len())]);
        let (min, xmin, max, xmax) = (
            pick(&mut rng),
            pick(&mut rng),
            pick(&mut rng),
            pick(&mut rng),
        );
        if [min, xmin, max, xmax].iter().all(Option::is_none) {
            continue;
        }
        let mut schema = alloc::format!(
            r#"{{"type":"{}""#,
            if integer { "integer" } else { "number" }
        );
        for (key, v) in [
            ("minimum", min),
            ("exclusiveMinimum", xmin),
            ("maximum", max),
            ("exclusiveMaximum", xmax),
        ] {
            if let Some(v) = v {
                schema.push_str(&alloc::format!(r#","{key}":{v}"#));
            }
        }
        schema.push('}');
        let in_range = |x: f64| {
            min.is_none_or(|m| x >= m as f64)
                && xmin.is_none_or(|m| x > m as f64)
                && max.is_none_or(|m| x <= m as f64)
                && xmax.is_none_or(|m| x < m as f64)
        };
        let gbnf = match schema::to_gbnf(schema.as_bytes()) {
            Ok(g) => g,
            Err(e) => {
                // Refused only when nothing is in range.
                assert!(e.message.as_str().contains("empty"), "{schema}: {e}");
                let step = if integer { 1.0 } else { 0.5 };
                let near = BOUNDS
                    .iter()
                    .flat_map(|&b| [b as f64 - step, b as f64, b as f64 + step]);
                assert!(
                    !near.into_iter().any(in_range),
                    "{schema}: refused but not empty"
                );
                continue;
            }
        };
        let start = Matcher::new(Grammar::parse(&gbnf).unwrap()).unwrap();
        let accepts = |text: &str| {
            let mut m = start.clone();
            m.accept_bytes(text.as_bytes()).is_ok() && m.can_end()
        };
        let mut magnitudes: Vec<u64> = alloc::vec![0, 1, 2, 15, 99_999, 999_999_999_999_999];
        for b in [min, xmin, max, xmax].into_iter().flatten() {
            let m = b.unsigned_abs();
            magnitudes.extend(m.saturating_sub(3)..=m + 3);
        }
        let fractions = if integer {
            &FRACTIONS[..1]
        } else {
            &FRACTIONS[..]
        };
        for &m in &magnitudes {
            for (sign, signum) in [("", 1.0), ("-", -1.0)] {
                for &(frac, f) in fractions {
                    let (text, x) = (alloc::format!("{sign}{m}{frac}"), signum * (m as f64 + f));
                    if signum < 0.0 && x == 0.0 {
                        continue; // "-0" may go either way
                    }
                    assert_eq!(accepts(&text), in_range(x), "{schema}: {text}\n{gbnf}");
                    if m > 0 {
                        let zero_led = alloc::format!("{sign}0{m}{frac}");
                        assert!(!accepts(&zero_led), "{schema}: {zero_led}");
                    }
                }
            }
        }
    }
    // Beyond the integer part's 16 digits nothing can be written.
    let e = schema::to_gbnf(br#"{"type":"integer","minimum":100000000000000000}"#).unwrap_err();
    assert!(e.message.as_str().contains("empty integer range"), "{e}");
}

/// Asserts that the grammar of `schema` accepts each of `yes` and none of `no`.
fn schema_accepts_exactly(schema: &str, yes: &[&str], no: &[&str]) {
    let gbnf = schema::to_gbnf(schema.as_bytes()).unwrap_or_else(|e| panic!("{schema}: {e}"));
    let start = Matcher::new(Grammar::parse(&gbnf).unwrap()).unwrap();
    let accepts = |t: &str| {
        let mut m = start.clone();
        m.accept_bytes(t.as_bytes()).is_ok() && m.can_end()
    };
    for t in yes {
        assert!(accepts(t), "{schema}: {t} refused\n{gbnf}");
    }
    for t in no {
        assert!(!accepts(t), "{schema}: {t} accepted\n{gbnf}");
    }
}

#[test]
fn schema_fractional_bounds_match_their_range() {
    // Bounds as written, with their values in millionths (the oracle: no parsing here).
    const BOUNDS: [(&str, i64); 18] = [
        ("-10.5", -10_500_000),
        ("-1.25", -1_250_000),
        ("-0.75e0", -750_000),
        ("-0.5", -500_000),
        ("-0.001", -1_000),
        ("0", 0),
        ("0.0", 0),
        ("1e-3", 1_000),
        ("0.1", 100_000),
        ("0.5", 500_000),
        ("0.99", 990_000),
        ("1.5", 1_500_000),
        ("2.25", 2_250_000),
        ("3", 3_000_000),
        ("10.05", 10_050_000),
        ("2.5E1", 25_000_000),
        ("-2", -2_000_000),
        ("25.5", 25_500_000),
    ];
    const INTS: [i64; 10] = [0, 1, 2, 3, 9, 10, 11, 24, 25, 26];
    const FRACS: [(&str, i64); 14] = [
        ("", 0),
        (".0", 0),
        (".05", 50_000),
        (".1", 100_000),
        (".25", 250_000),
        (".5", 500_000),
        (".50", 500_000),
        (".75", 750_000),
        (".99", 990_000),
        (".999", 999_000),
        (".001", 1_000),
        (".0009", 900),
        (".00101", 1_010),
        (".9999", 999_900),
    ];
    let mut rng = Rng(0xF4AC_7105);
    for case in 0..120 {
        let integer = case % 3 == 0;
        let pick = |rng: &mut Rng| (rng.below(2) > 0).then(|| BOUNDS[rng.below(BOUNDS.len())]);
        let bounds = [
            ("minimum", pick(&mut rng)),
            ("exclusiveMinimum", pick(&mut rng)),
            ("maximum", pick(&mut rng)),
            ("exclusiveMaximum", pick(&mut rng)),
        ];
        if bounds.iter().all(|(_, b)| b.is_none()) {
            continue;
        }
        let mut schema = alloc::format!(
            r#"{{"type":"{}""#,
            if integer { "integer" } else { "number" }
        );
        for (key, b) in bounds {
            if let Some((text, _)) = b {
                schema.push_str(&alloc::format!(r#","{key}":{text}"#));
            }
        }
        schema.push('}');
        let value = |i: usize| bounds[i].1.map(|(_, v)| v);
        let in_range = |x: i64| {
            value(0).is_none_or(|m| x >= m)
                && value(1).is_none_or(|m| x > m)
                && value(2).is_none_or(|m| x <= m)
                && value(3).is_none_or(|m| x < m)
        };
        let literals: Vec<(String, i64)> = INTS
            .iter()
            .flat_map(|&i| FRACS.iter().map(move |&(f, v)| (i, f, v)))
            .filter(|(_, f, _)| !integer || f.is_empty())
            .flat_map(|(i, f, v)| {
                let x = i * 1_000_000 + v;
                [
                    (alloc::format!("{i}{f}"), x),
                    (alloc::format!("-{i}{f}"), -x),
                ]
            })
            .filter(|(text, x)| !(text.starts_with('-') && *x == 0)) // "-0" may go either way
            .collect();
        let gbnf = match schema::to_gbnf(schema.as_bytes()) {
            Ok(g) => g,
            Err(e) => {
                assert!(e.message.as_str().contains("empty"), "{schema}: {e}");
                let hit = literals.iter().find(|(_, x)| in_range(*x));
                assert!(hit.is_none(), "{schema}: refused, but {hit:?} is in range");
                continue;
            }
        };
        let start = Matcher::new(Grammar::parse(&gbnf).unwrap()).unwrap();
        for (text, x) in &literals {
            let mut m = start.clone();
            let accepted = m.accept_bytes(text.as_bytes()).is_ok() && m.can_end();
            assert_eq!(accepted, in_range(*x), "{schema}: {text}\n{gbnf}");
        }
    }
    // Past the 16 fraction digits a literal can have, and past the 16 integer digits.
    for (schema, yes, no) in [
        (
            r#"{"type":"number","minimum":0.12345678901234567891}"#,
            &["0.1234567890123457", "0.2", "1"][..],
            &["0.1234567890123456", "0.12345678901234567", "0"][..],
        ),
        (
            r#"{"type":"number","maximum":-0.12345678901234567891}"#,
            &["-0.1234567890123457", "-1"][..],
            &["-0.1234567890123456", "0"][..],
        ),
        (
            r#"{"type":"number","exclusiveMaximum":1e-20,"minimum":-1e-20}"#,
            &["0", "0.0000000000000000"][..],
            &["0.0000000000000001", "-0.0000000000000001"][..],
        ),
        (
            r#"{"type":"number","maximum":1e300,"exclusiveMinimum":-1E+300}"#,
            &["9999999999999999.5", "-9999999999999999", "0"][..],
            &["10000000000000000"][..],
        ),
        (
            r#"{"type":"integer","minimum":-2.5,"maximum":2.5}"#,
            &["-2", "0", "2"][..],
            &["-3", "3", "2.5", "-2.5"][..],
        ),
    ] {
        schema_accepts_exactly(schema, yes, no);
    }
    for schema in [
        r#"{"type":"number","minimum":1e300}"#,
        r#"{"type":"integer","minimum":0.5,"maximum":0.9}"#,
        r#"{"type":"number","minimum":0.5,"exclusiveMaximum":0.5}"#,
    ] {
        let e = schema::to_gbnf(schema.as_bytes()).unwrap_err();
        assert!(e.message.as_str().contains("empty"), "{schema}: {e}");
    }
}

#[test]
fn schema_keywords_without_type_and_values_with_siblings() {
    for (schema, yes, no) in [
        // No type: the kinds the keywords constrain (found by the grammar fuzz target:
        // {"maximum":1} let 68 through).
        (
            r#"{"maximum":1}"#,
            &["1", "-5", "0.5"][..],
            &["68", "1.5", r#""x""#][..],
        ),
        (r#"{"minLength":2}"#, &[r#""ab""#][..], &[r#""a""#, "5"][..]),
        (
            r#"{"minimum":0,"maxLength":1}"#,
            &["3", r#""a""#][..],
            &["-1", r#""ab""#][..],
        ),
        (r#"{"minItems":1}"#, &["[1]"][..], &["[]", "1"][..]),
        // Values filtered by the type ("integer": whole numbers, 1.0 too).
        (
            r#"{"type":["string","null"],"enum":["a",null,3]}"#,
            &[r#""a""#, "null"][..],
            &["3"][..],
        ),
        (
            r#"{"type":"integer","enum":[1,1.0,2.5,"x",1e2]}"#,
            &["1", "1.0", "1e2"][..],
            &["2.5", r#""x""#][..],
        ),
        (
            r#"{"const":"k","title":"t"}"#,
            &[r#""k""#][..],
            &[r#""j""#][..],
        ),
    ] {
        schema_accepts_exactly(schema, yes, no);
    }
    for (schema, want) in [
        (r#"{"enum":[1,5],"minimum":2}"#, "'minimum' beside enum"),
        (r#"{"const":"a","maxLength":0}"#, "'maxLength' beside const"),
        (
            r#"{"type":"string","anyOf":[{"minLength":1}]}"#,
            "'type' beside anyOf",
        ),
        (
            r#"{"anyOf":[{"type":"string"}],"oneOf":[{"type":"null"}]}"#,
            "'oneOf' beside anyOf",
        ),
        (
            r#"{"type":"string","enum":[1,2]}"#,
            "no enum value of type string",
        ),
        (
            r#"{"type":"null","const":0}"#,
            "no const value of type null",
        ),
        (r#"{"type":"frob","enum":[1]}"#, "unknown type 'frob'"),
        (r#"{"enum":[]}"#, "empty enum at root"),
    ] {
        let e = schema::to_gbnf(schema.as_bytes()).unwrap_err();
        assert!(e.message.as_str().contains(want), "{schema}: {e}");
    }
}

#[test]
fn schema_errors() {
    for (s, want) in [
        (r#"{"type":"object""#, "JSON"),
        (r#"{"type":"frob"}"#, "unknown type"),
        (r##"{"$ref":"#/$defs/missing"}"##, "not found"),
        (
            r#"{"$ref":"https://example.com/s.json"}"#,
            "within the schema",
        ),
        (r##"{"$ref":"#"}"##, "left-recursive"),
        (r#"{"allOf":[{"type":"string"},{"minLength":2}]}"#, "allOf"),
        (r#"{"type":"string","allOf":[{"minLength":2}]}"#, "allOf"),
        // Keywords a grammar cannot enforce are refused, not ignored.
        (
            r#"{"type":"array","items":{"type":"integer"},"uniqueItems":true}"#,
            "'uniqueItems'",
        ),
        (r#"{"type":"number","multipleOf":0.01}"#, "'multipleOf'"),
        (r#"{"not":{"type":"string"}}"#, "'not'"),
        (
            r#"{"type":"object","properties":{"a":{}},"minProperties":1}"#,
            "'minProperties'",
        ),
        (
            r#"{"type":"object","patternProperties":{"^x":{"type":"string"}}}"#,
            "'patternProperties'",
        ),
        (
            r##"{"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":3}"##,
            "'maxLength' beside $ref",
        ),
        (
            r#"{"type":"array","items":{},"maxItems":99999}"#,
            "maxItems",
        ),
        // Bounds no value meets are refused by the converter, not left to the GBNF parser.
        (
            r#"{"type":"string","minLength":5,"maxLength":2}"#,
            "maxLength < minLength",
        ),
        (
            r#"{"type":"array","minItems":3,"maxItems":1}"#,
            "maxItems < minItems",
        ),
        (
            r#"{"prefixItems":[{},{}],"minItems":3}"#,
            "rule out its 2 prefixItems",
        ),
        (
            r#"{"items":[{}],"maxItems":0}"#,
            "rule out its 1 prefixItems",
        ),
        (
            r#"{"type":"integer","minimum":3,"exclusiveMaximum":3}"#,
            "empty integer range",
        ),
    ] {
        let e = schema::to_gbnf(s.as_bytes())
            .and_then(|g| Grammar::parse(&g).map(|_| ()))
            .unwrap_err();
        assert!(e.message.as_str().contains(want), "{s}: {e}");
    }
    // What restricts nothing passes: annotations, a lone allOf schema, $ref with a description.
    check_schema(
        r#"{"title":"T","description":"d","allOf":[{"type":"integer","minimum":1000,"maximum":2026}]}"#,
        &["1999", "2026"],
        &["999", "2027"],
    );
    check_schema(
        r##"{"$defs":{"c":{"enum":["red","blue"]}},"type":"object","properties":{"c":{"$ref":"#/$defs/c","description":"colour","default":"red"}},"required":["c"]}"##,
        &[r#"{"c": "red"}"#],
        &[r#"{"c": "green"}"#],
    );
    check_schema(
        r#"{"type":"array","items":{"type":"integer","multipleOf":1},"uniqueItems":false}"#,
        &["[1, 1]"],
        &["[1.5]"],
    );
    check_schema(
        r#"{"type":"object","properties":{"a":{"type":"string","format":"email"}},"required":["a"],"minProperties":1}"#,
        &[r#"{"a": "x@y"}"#],
        &["{}"],
    );
    // Deep nesting is refused, not a stack overflow.
    let deep = alloc::format!("{}{}", r#"{"items":"#.repeat(100), "}".repeat(100));
    assert!(schema::to_gbnf(deep.as_bytes()).is_err());
}

#[test]
fn json_object_mode() {
    let g = schema::json_object();
    assert!(matches(
        &g,
        r#"{"a": [1, 2.5, "x", true, null, {"b": {}}]}"#
    ));
    assert!(matches(&g, "{}"));
    assert!(!matches(&g, "[]"));
    assert!(!matches(&g, r#"{"a" 1}"#));
}

/// The whole-vocabulary check agrees with checking each token alone, along a JSON text written
/// in the model's own tokens (SmolLM2's byte-level BPE, and Gemma 3's SentencePiece with byte
/// tokens for split characters); a token that ends inside a character is allowed only when it
/// can continue.
#[test]
fn vocabulary_mask_agrees_with_single_checks() {
    use crate::gguf::Gguf;
    use crate::tokenizer::{Tokenizer, Work};
    for rel in [
        "models/vocab/vocab-bpe-smollm.gguf",
        "models/vocab/vocab-spm-gemma3.gguf",
    ] {
        let bytes = crate::testutil::read_fixture(rel);
        let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
        let table = TokenTable::new(&tok).unwrap();
        let schema = r#"{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"enum":["a","b"]}},"n":{"type":"integer"}},"required":["name","tags","n"]}"#;
        let g = Grammar::parse(&schema::to_gbnf(schema.as_bytes()).unwrap()).unwrap();
        let text = r#"{"name": "Zoë 😀 \"q\"", "tags": ["a", "b"], "n": -12}"#;
        let mut ids = Vec::new();
        tok.encode_with(&mut Work::default(), text, false, false, &mut ids)
            .unwrap();
        let mut m = Matcher::new(g).unwrap();
        let mut allowed = alloc::vec![false; table.len()];
        let mut total_allowed = 0;
        for (step, &id) in ids.iter().enumerate() {
            m.allowed_tokens(&table, &mut allowed).unwrap();
            assert!(
                allowed[id as usize],
                "{rel}: step {step}: token {id} masked"
            );
            // Every 3rd step: compare with single checks over the whole vocabulary.
            if step % 3 == 0 {
                for t in 0..table.len() as u32 {
                    assert_eq!(
                        m.allows(&table, t).unwrap(),
                        allowed[t as usize],
                        "{rel}: step {step}: token {t} {:?}",
                        alloc::string::String::from_utf8_lossy(tok.piece(t))
                    );
                }
            }
            total_allowed += allowed.iter().filter(|&&a| a).count();
            let eog = (0..table.len() as u32).find(|&t| tok.is_eog(t)).unwrap();
            assert!(!m.allows(&table, eog).unwrap());
            m.accept_token(&table, id).unwrap();
        }
        assert!(m.can_end());
        let eog = (0..table.len() as u32).find(|&t| tok.is_eog(t)).unwrap();
        assert!(m.allows(&table, eog).unwrap());
        assert!(total_allowed > 0);
    }
}

/// How long a whole-vocabulary check takes (run with --ignored --nocapture).
#[test]
#[ignore]
fn vocabulary_mask_timing() {
    use crate::gguf::Gguf;
    use crate::tokenizer::Tokenizer;
    let bytes = crate::testutil::read_fixture("models/vocab/vocab-bpe-smollm.gguf");
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let t0 = std::time::Instant::now();
    let table = TokenTable::new(&tok).unwrap();
    std::println!("table: {:?}, {} bytes", t0.elapsed(), table.heap_bytes());
    let g = Grammar::parse(&schema::json_object()).unwrap();
    for prefix in ["", "{", "{\"", "{\"abc", "{\"a\": 1", "{\"a\": [tr"] {
        let mut m = Matcher::new(g.clone()).unwrap();
        m.accept_bytes(prefix.as_bytes()).unwrap();
        let mut allowed = alloc::vec![false; table.len()];
        let t0 = std::time::Instant::now();
        for _ in 0..10 {
            m.allowed_tokens(&table, &mut allowed).unwrap();
        }
        std::println!(
            "{prefix:12} {:?} per mask, {} allowed",
            t0.elapsed() / 10,
            allowed.iter().filter(|&&a| a).count()
        );
    }
}

/// Per-token cost of checking and accepting a sampled token (run with --ignored --nocapture).
#[test]
#[ignore]
fn per_token_check_timing() {
    use crate::gguf::Gguf;
    use crate::tokenizer::{Tokenizer, Work};
    let bytes = crate::testutil::read_fixture("models/vocab/vocab-bpe-smollm.gguf");
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let table = TokenTable::new(&tok).unwrap();
    let text = r#"{"books": [{"title": "The Name of the Wind", "author": "Patrick Rothfuss", "year": 2007, "themes": ["magic", "music", "coming of age"]}, {"title": "Dune", "author": "Frank Herbert", "year": 1965, "themes": ["ecology", "politics", {"deep": [[[1, 2], {"x": null}]]}]}]}"#;
    let mut ids = Vec::new();
    tok.encode_with(&mut Work::default(), text, false, false, &mut ids)
        .unwrap();
    let g = Grammar::parse(&schema::json_object()).unwrap();
    let t0 = std::time::Instant::now();
    let rounds = 20;
    let mut max_stacks = 0;
    for _ in 0..rounds {
        let mut m = Matcher::new(g.clone()).unwrap();
        for &id in &ids {
            assert!(m.allows(&table, id).unwrap());
            m.accept_token(&table, id).unwrap();
            max_stacks = max_stacks.max(m.paths());
        }
    }
    std::println!(
        "{} tokens: {:?} per token (check + accept), at most {max_stacks} stacks",
        ids.len(),
        t0.elapsed() / (rounds * ids.len() as u32)
    );
}

/// Random grammars and schemas from pieces of valid ones: every outcome is a grammar or an
/// error, never a panic (in wasm a panic is a trap), and matching random text stays in its caps.
#[test]
fn random_grammars_and_schemas_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def0);
    let mut next = move || rng.next();
    let pieces = [
        "root",
        " ::= ",
        "x",
        " ::= ",
        "\"a\"",
        "\"é😀\"",
        "[a-z]",
        "[^\"\\\\]",
        "[\\x00-\\x1F]",
        "(",
        ")",
        "|",
        "*",
        "+",
        "?",
        "{2}",
        "{1,3}",
        "{0,}",
        ".",
        "\n",
        " ",
        "# c\n",
        "\\",
        "\"",
        "[",
        "]",
        "-",
        "{",
        "}",
        ",",
        "x?",
        "root",
        "\\u00e9",
        "\\U0001F600",
    ];
    let (mut grammars, mut schemas) = (0, 0);
    for _ in 0..4000 {
        let mut g = alloc::string::String::from("root ::= ");
        for _ in 0..(next() % 24) {
            g.push_str(pieces[(next() % pieces.len() as u64) as usize]);
        }
        if let Ok(grammar) = Grammar::parse(&g)
            && let Ok(mut m) = Matcher::new(grammar)
        {
            grammars += 1;
            for _ in 0..8 {
                let b = [b'a', 0xC3, 0xA9, b'"', b'z', 0xF0][(next() % 6) as usize];
                let _ = m.accept_bytes(&[b]);
                let _ = m.can_end();
            }
        }
    }
    let parts = [
        r#"{"type":"object","properties":{"a":"#,
        r#"{"type":"string","maxLength":3}"#,
        "}",
        ",",
        r#""required":["a"]"#,
        r##"{"$ref":"#/$defs/x"}"##,
        r#""$defs":{"x":"#,
        r#"{"enum":[1,"b",null]}"#,
        r#"{"anyOf":["#,
        "]",
        r#"{"type":"array","items":"#,
        r#""minItems":2"#,
        r#""maxItems":1"#,
        r#"{"pattern":"^(a|b)*$"}"#,
        r#"{"const":{"k":[1,2]}}"#,
        "true",
        "false",
        r#"{"type":["string","null"]}"#,
        r#"{"additionalProperties":"#,
        r#"{"type":"integer","minimum":3,"maximum":2}"#,
    ];
    for _ in 0..4000 {
        let mut s = alloc::string::String::new();
        for _ in 0..(1 + next() % 10) {
            s.push_str(parts[(next() % parts.len() as u64) as usize]);
        }
        if let Ok(g) = schema::to_gbnf(s.as_bytes()) {
            schemas += Grammar::parse(&g).and_then(Matcher::new).is_ok() as usize;
        }
    }
    // Enough of them were valid for the matcher to be exercised.
    assert!(
        grammars > 100 && schemas > 30,
        "{grammars} grammars, {schemas} schemas"
    );
}
