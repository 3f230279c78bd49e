//! Any text through every pre-tokenizer (`tokenizer.ggml.pre` rewritten on the `llama-bpe`
//! test vocabulary): the first byte picks the pattern, the rest is the text. The ids decode
//! back to the text less the bytes the vocabulary cannot spell (21 of the 256; llama.cpp drops
//! them too), i.e. to what each character gives alone, so no split drops, repeats or reorders
//! a byte; with special tokens parsed too, nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::tokenizer::Work;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let toks = wasmind_fuzz::llama3_with_pre();
    let which = pick as usize % toks.len();
    let tok = &toks[which];
    let text = String::from_utf8_lossy(rest);
    let mut work = Work::default();
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
    let name = wasmind_fuzz::PRE_NAMES[which];
    assert_eq!(
        round_trip(&text, false),
        spelled,
        "round trip through {name}"
    );
    let _ = round_trip(&text, true);
});
