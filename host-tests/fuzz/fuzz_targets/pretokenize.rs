//! Any text through every pre-tokenizer (`tokenizer.ggml.pre` rewritten on the `llama-bpe`
//! test vocabulary): the first byte picks the pattern, the rest is the text. The ids decode
//! back to the text less the bytes the vocabulary cannot spell (21 of the 256; llama.cpp drops
//! them too), i.e. to what each character gives alone, so no split drops, repeats or reorders
//! a byte; with special tokens parsed too, nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let toks = wasmind_fuzz::llama3_with_pre();
    let which = pick as usize % toks.len();
    let text = String::from_utf8_lossy(rest);
    wasmind_fuzz::assert_round_trip(&toks[which], &text, wasmind_fuzz::PRE_NAMES[which]);
});
