//! Any text through SmolLM2's tokenizer, with and without special tokens: the ids decode back
//! to the text, less the bytes the vocabulary cannot spell (SmolLM2 has no token for 21 of the
//! 256 bytes, e.g. 0x04 and 0xF2; llama.cpp drops those too): what each character gives alone,
//! end to end. Decoding never fails.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    wasmind_fuzz::assert_round_trip(wasmind_fuzz::smollm2(), &text, "SmolLM2's tokenizer");
});
