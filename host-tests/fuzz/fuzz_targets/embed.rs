//! Model2Vec from hostile files: `safetensors \0\xFF\0 tokenizer.json \0\xFF\0 text`, loaded
//! with the shared model's config; then the text embedded. A valid load gives a finite vector.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::embed::{EmbedScratch, Embedder};

fuzz_target!(|data: &[u8]| {
    let [st, tok, text] = wasmind_fuzz::three_parts(data);
    let Ok(e) = Embedder::load(st, tok, br#"{"normalize": true}"#) else {
        return;
    };
    let mut scratch = EmbedScratch::default();
    let mut out = vec![0f32; e.dim()];
    if e.embed_bytes(text, &mut scratch, &mut out).is_ok() {
        assert!(
            out.iter().all(|x| x.is_finite()),
            "a vector with NaN or infinity"
        );
    }
});
