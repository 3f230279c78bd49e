//! What the fuzz targets share: the test fixtures (`target/fixtures`, made by `cargo xtask
//! fixtures`; read once per process).

use std::path::PathBuf;
use std::sync::OnceLock;

/// Fixture `rel` from `target/fixtures` of the checkout (`WASMIND_FIXTURES` overrides the folder).
pub fn fixture(rel: &str) -> Vec<u8> {
    let dir = std::env::var_os("WASMIND_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/fixtures")));
    let path = dir.join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fuzz fixture {}: {e}", path.display()))
}

/// SmolLM2's byte-level BPE vocabulary, built once.
pub fn smollm2() -> &'static wasmind::tokenizer::Tokenizer {
    static TOK: OnceLock<wasmind::tokenizer::Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let bytes = fixture("models/vocab/vocab-bpe-smollm.gguf");
        let g = wasmind::gguf::Gguf::parse(&bytes).expect("the SmolLM2 vocabulary parses");
        wasmind::tokenizer::Tokenizer::from_gguf(&g).expect("the SmolLM2 vocabulary loads")
    })
}

/// `text` through `tok` and back: the ids decode to what each character gives alone (a
/// byte-level BPE vocabulary spells bytes independently, and drops the ones it has no token
/// for, as llama.cpp does), so no split drops, repeats or reorders a byte; with special tokens
/// parsed too, nothing panics. `what` names the tokenizer in a failure.
pub fn assert_round_trip(tok: &wasmind::tokenizer::Tokenizer, text: &str, what: &str) {
    let mut work = wasmind::tokenizer::Work::default();
    let mut round_trip = |s: &str, parse_special: bool| {
        let mut ids = Vec::new();
        tok.encode_with(&mut work, s, false, parse_special, &mut ids)
            .expect("encode");
        let mut back = Vec::new();
        tok.decode(&ids, parse_special, &mut back).expect("decode");
        back
    };
    let mut spelled = Vec::new();
    for c in text.chars() {
        let mut buf = [0u8; 4];
        spelled.extend(round_trip(c.encode_utf8(&mut buf), false));
    }
    assert_eq!(
        round_trip(text, false),
        spelled,
        "round trip through {what}"
    );
    let _ = round_trip(text, true);
}

/// Splits `data` at the first two `\0\xFF\0` separators (missing parts are empty).
pub fn three_parts(data: &[u8]) -> [&[u8]; 3] {
    const SEP: &[u8] = b"\0\xFF\0";
    let mut parts = [&data[..0]; 3];
    let mut rest = data;
    for (k, part) in parts.iter_mut().enumerate() {
        match rest
            .windows(SEP.len())
            .position(|w| w == SEP)
            .filter(|_| k < 2)
        {
            Some(at) => {
                *part = &rest[..at];
                rest = &rest[at + SEP.len()..];
            }
            None => {
                *part = rest;
                break;
            }
        }
    }
    parts
}

/// The pre-tokenizer names the `pretokenize` target puts on the `llama-bpe` test vocabulary,
/// one of each pattern `tokenizer.ggml.pre` selects.
pub const PRE_NAMES: [&str; 8] = [
    "gpt-2",
    "smollm",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gpt-4o",
    "default",
    "deepseek-coder",
];

/// llama.cpp's `llama-bpe` test vocabulary (byte-level BPE) with `tokenizer.ggml.pre`
/// rewritten to each of [`PRE_NAMES`], built once.
pub fn llama3_with_pre() -> &'static [wasmind::tokenizer::Tokenizer] {
    static TOKS: OnceLock<Vec<wasmind::tokenizer::Tokenizer>> = OnceLock::new();
    TOKS.get_or_init(|| {
        let base = fixture("models/vocab/vocab-bpe-llama-bpe.gguf");
        let string = |s: &str| [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat();
        let key = string("tokenizer.ggml.pre");
        // the key, its value's type (u32), then the string
        let at = base
            .windows(key.len())
            .position(|w| w == key)
            .expect("a pre key")
            + key.len()
            + 4;
        let was = string("llama-bpe");
        assert_eq!(
            &base[at..at + was.len()],
            was,
            "the llama-bpe pre-tokenizer"
        );
        PRE_NAMES
            .iter()
            .map(|name| {
                let mut bytes = base.clone();
                bytes.splice(at..at + was.len(), string(name));
                // a shorter name moves the header's end: zeros keep the (empty) data inside
                bytes.resize(bytes.len() + was.len().saturating_sub(name.len()), 0);
                let g = wasmind::gguf::Gguf::parse(&bytes).expect("the patched vocabulary parses");
                wasmind::tokenizer::Tokenizer::from_gguf(&g).expect("the patched vocabulary loads")
            })
            .collect()
    })
}
