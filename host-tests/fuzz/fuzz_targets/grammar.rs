//! Grammars and JSON schemas from any bytes (what `--grammar`, `--json-schema`,
//! `response_format` and `setGrammar` hand the module), then a reply matched against them.
//!
//! Input: `kind byte + grammar text \0\xFF\0 reply text \0\xFF\0 token bytes`. Checks, beyond
//! "no panic, no hang":
//! - a schema the converter accepts becomes GBNF the parser accepts, or is refused for a cap
//!   (size, rules, nesting, repetition count) or left recursion, never for a syntax error;
//! - a reply the schema's grammar accepts whole is JSON that validates against the schema
//!   (the `jsonschema` crate): the reply is the text bytes, and a walk through the grammar
//!   whose every byte the matcher allows, chosen by the text bytes;
//! - the reply accepted in two pieces is accepted whole, and the other way round; a refused
//!   piece leaves the matcher as it was;
//! - for tokens of SmolLM2's vocabulary, `allows` (the trie walk), `allowed_tokens` (the whole
//!   vocabulary's mask) and `accept_token` (advancing the stacks) agree, before and after a
//!   few accepted tokens.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use wasmind::error::{Error, Status};
use wasmind::grammar::{self, Grammar, Matcher, TokenTable, schema};

/// Why a converted schema may still be refused by the parser.
const CAP_ERRORS: [&str; 5] = [
    "too many rules",
    "too large once repetitions are expanded",
    "nested too deeply",
    "exceeds",
    "left-recursive",
];

/// An error that says the input did not match (rather than a cap).
fn is_mismatch(e: &Error) -> bool {
    matches!(e.status, Status::InvalidArgument | Status::InvalidUtf8)
}

/// Bytes a walk through a grammar may pick from: JSON's printable ASCII and a newline.
const WALK_BYTES: &[u8] =
    b"\n !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";

/// A text the grammar accepts whole, if the walk finds one: each step picks (by the next
/// choice byte) among the [`WALK_BYTES`] the matcher allows, and stops where the grammar may
/// end when the choice byte's top bit is set.
fn walk(start: &Matcher, choices: &[u8]) -> Option<Vec<u8>> {
    let mut m = start.clone();
    let mut text = Vec::new();
    for &c in choices.iter().take(400) {
        if m.can_end() && c & 0x80 != 0 {
            return Some(text);
        }
        let mut next: Vec<(u8, Matcher)> = WALK_BYTES
            .iter()
            .filter_map(|&b| {
                let mut n = m.clone();
                n.accept_bytes(&[b]).ok().map(|()| (b, n))
            })
            .collect();
        if next.is_empty() {
            break;
        }
        let (b, n) = next.swap_remove((c & 0x7f) as usize % next.len());
        text.push(b);
        m = n;
    }
    m.can_end().then_some(text)
}

/// `reply` validates against `schema` when both are JSON the validator reads (a schema it
/// cannot compile, or one our reader takes and serde_json does not, is skipped).
fn check_valid(schema: &[u8], reply: &[u8], gbnf: &str) {
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(schema) else {
        return;
    };
    let Ok(validator) = jsonschema::validator_for(&schema) else {
        return;
    };
    let text = String::from_utf8_lossy(reply);
    let value: serde_json::Value = serde_json::from_slice(reply).unwrap_or_else(|e| {
        panic!("the grammar accepted {text:?}, which is not JSON: {e}\n{gbnf}")
    });
    if let Err(e) = validator.validate(&value) {
        panic!("the grammar accepted {text:?}, which breaks the schema {schema}: {e}\n{gbnf}");
    }
}

fn table() -> &'static TokenTable {
    static TABLE: OnceLock<TokenTable> = OnceLock::new();
    TABLE.get_or_init(|| TokenTable::new(wasmind_fuzz::smollm2()).expect("token table"))
}

/// `allows` and `accept_token` agree on `ids` in the matcher's current state, and with the
/// vocabulary's mask when one is given (it costs a walk over all 49,152 tokens).
fn tokens_agree(m: &mut Matcher, ids: &[u32], mask: Option<&mut Vec<bool>>) {
    // None: no mask asked for, or a cap (too many paths or too much work).
    let mask = mask.and_then(|mask| m.allowed_tokens(table(), mask).is_ok().then_some(&**mask));
    for &id in ids {
        let Ok(allows) = m.allows(table(), id) else {
            continue;
        };
        if let Some(mask) = mask {
            assert_eq!(
                allows, mask[id as usize],
                "allows vs allowed_tokens, token {id}"
            );
        }
        let mut next = m.clone();
        match next.accept_token(table(), id) {
            Ok(()) => assert!(allows, "token {id} was accepted but not allowed"),
            Err(e) if is_mismatch(&e) => assert!(!allows, "token {id} allowed but refused: {e}"),
            Err(_) => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [spec, reply, tokens] = wasmind_fuzz::three_parts(data);
    let Some((&k, spec)) = spec.split_first() else {
        return;
    };
    let kind = match k % 3 {
        0 => grammar::KIND_GBNF,
        1 => grammar::KIND_JSON_SCHEMA,
        _ => grammar::KIND_JSON_OBJECT,
    };
    let gbnf = (kind == grammar::KIND_JSON_SCHEMA)
        .then(|| schema::to_gbnf(spec).ok())
        .flatten();
    if let Some(gbnf) = &gbnf
        && let Err(e) = Grammar::parse(gbnf)
    {
        let why = e.message.as_str();
        assert!(
            CAP_ERRORS.iter().any(|c| why.contains(c)),
            "the schema's GBNF does not parse: {why}\n{gbnf}"
        );
    }
    let Ok(Some(g)) = grammar::compile(kind, spec) else {
        return;
    };
    let Ok(start) = Matcher::new(g) else {
        return;
    };

    // The reply in two pieces, split where the first token byte says, against it whole.
    let cut = tokens
        .first()
        .map_or(0, |&b| b as usize % (reply.len() + 1));
    let mut whole = start.clone();
    let whole_ok = match whole.accept_bytes(reply) {
        Ok(()) => Some(true),
        Err(e) if is_mismatch(&e) => Some(false),
        Err(_) => None,
    };
    let mut pieces = start.clone();
    let mut pieces_ok = Some(true);
    for piece in [&reply[..cut], &reply[cut..]] {
        let before = (pieces.paths(), pieces.can_end(), pieces.is_alive());
        match pieces.accept_bytes(piece) {
            Ok(()) => {}
            Err(e) => {
                let after = (pieces.paths(), pieces.can_end(), pieces.is_alive());
                assert_eq!(before, after, "a refused piece changed the matcher: {e}");
                pieces_ok = if is_mismatch(&e) { Some(false) } else { None };
                break;
            }
        }
    }
    if let Some(gbnf) = &gbnf {
        if whole_ok == Some(true) && whole.can_end() {
            check_valid(spec, reply, gbnf);
        }
        if let Some(text) = walk(&start, reply) {
            check_valid(spec, &text, gbnf);
        }
    }
    if let (Some(w), Some(p)) = (whole_ok, pieces_ok) {
        assert_eq!(w, p, "reply accepted whole: {w}, in pieces at {cut}: {p}");
        if w {
            assert_eq!(
                whole.can_end(),
                pieces.can_end(),
                "can_end whole vs in pieces"
            );
        }
    }

    // Tokens: ids from pairs of bytes; the first few are accepted in turn where allowed.
    let n = table().len() as u32;
    let ids: Vec<u32> = tokens
        .chunks_exact(2)
        .take(16)
        .map(|p| u16::from_le_bytes([p[0], p[1]]) as u32 % n)
        .collect();
    let mut mask = vec![false; n as usize];
    let mut m = if whole_ok == Some(true) { whole } else { start };
    for step in 0..3 {
        tokens_agree(&mut m, &ids, (step == 0).then_some(&mut mask));
        let allowed = |&&id: &&u32| m.clone().allows(table(), id).unwrap_or(false);
        let Some(&id) = ids.iter().skip(step).find(allowed) else {
            break;
        };
        if m.accept_token(table(), id).is_err() {
            break;
        }
    }
});
