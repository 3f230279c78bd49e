use super::*;
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
    let e = parse_error("root ::= foo");
    assert!(
        e.contains("undefined rule 'foo'") && e.contains("byte 9"),
        "{e}"
    );
    let e = parse_error(r#"root ::= "abc"#);
    assert!(
        e.contains("unterminated literal") && e.contains("byte 9"),
        "{e}"
    );
    let e = parse_error("root ::= [a-");
    assert!(e.contains("byte"), "{e}");
    let e = parse_error("foo ::= \"a\"");
    assert!(e.contains("no 'root' rule"), "{e}");
    let e = parse_error("root ::= \"a\"\nroot ::= \"b\"");
    assert!(e.contains("defined twice") && e.contains("line 2"), "{e}");
    let e = parse_error("root ::= \"a\" )");
    assert!(e.contains("unexpected ')'") && e.contains("byte 13"), "{e}");
    let e = parse_error("root ::= [z-a]");
    assert!(e.contains("range out of order"), "{e}");
    let e = parse_error("root ::= \"\\q\"");
    assert!(e.contains("unknown escape"), "{e}");
    let e = parse_error("root ::= \"a\"{3,1}");
    assert!(e.contains("max < min"), "{e}");
    let e = parse_error("root ::= \"a\"{99999}");
    assert!(e.contains("exceeds"), "{e}");
    let e = parse_error("root ::= * \"a\"");
    assert!(e.contains("needs an item"), "{e}");
    let e = parse_error("root ::= \"a\"\n  ::= \"b\"");
    assert!(e.contains("expected a rule name"), "{e}");
    let e = parse_error(
        "root ::= (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((\"a\")))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
    );
    assert!(e.contains("nested too deeply"), "{e}");
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
