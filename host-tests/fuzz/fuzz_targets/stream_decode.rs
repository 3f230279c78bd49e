//! Any id sequence through the streaming decoder: the pieces plus the final flush are exactly
//! what `decode` gives, and no piece boundary falls inside a character of that text (bytes that
//! can never form a character pass through on their own, as documented).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::tokenizer::StreamDecoder;

fuzz_target!(|data: &[u8]| {
    let tok = wasmind_fuzz::smollm2();
    let n = tok.n_vocab() as u32;
    let ids: Vec<u32> = data
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32 * 3 % n)
        .collect();
    let mut stream = StreamDecoder::new();
    let mut all = Vec::new();
    let mut cuts = Vec::new();
    for &id in &ids {
        let mut piece = Vec::new();
        stream.push(tok, id, false, &mut piece).expect("push");
        all.extend_from_slice(&piece);
        cuts.push(all.len());
    }
    let mut rest = Vec::new();
    stream.finish(&mut rest);
    all.extend_from_slice(&rest);
    let mut whole = Vec::new();
    tok.decode(&ids, false, &mut whole).expect("decode");
    assert_eq!(all, whole, "streamed pieces differ from decode");
    let mut at = 0;
    for chunk in all.utf8_chunks() {
        for c in chunk.valid().chars() {
            let end = at + c.len_utf8();
            assert!(
                !cuts.iter().any(|&k| at < k && k < end),
                "a piece boundary inside {c:?}"
            );
            at = end;
        }
        at += chunk.invalid().len();
    }
});
