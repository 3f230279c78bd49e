//! Any text through SmolLM2's tokenizer, with and without special tokens: the ids decode back
//! to the text, less the bytes the vocabulary cannot spell (SmolLM2 has no token for 21 of the
//! 256 bytes, e.g. 0x04 and 0xF2; llama.cpp drops those too): what each character gives alone,
//! end to end. Decoding never fails.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::tokenizer::Work;

fuzz_target!(|data: &[u8]| {
    let tok = wasmind_fuzz::smollm2();
    let text = String::from_utf8_lossy(data);
    let mut work = Work::default();
    let mut round_trip = |s: &str, parse_special: bool| {
        let mut ids = Vec::new();
        tok.encode_with(&mut work, s, false, parse_special, &mut ids)
            .expect("encode");
        let mut back = Vec::new();
        tok.decode(&ids, parse_special, &mut back).expect("decode");
        back
    };
    // What can be spelled: each character alone (byte-level BPE spells bytes independently).
    let mut spelled = Vec::new();
    for c in text.chars() {
        let mut buf = [0u8; 4];
        spelled.extend(round_trip(c.encode_utf8(&mut buf), false));
    }
    assert_eq!(round_trip(&text, false), spelled, "round trip");
    let _ = round_trip(&text, true);
});
