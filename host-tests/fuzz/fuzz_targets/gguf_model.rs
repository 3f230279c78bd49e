//! Any bytes as a GGUF file: parse (grouping the legacy blocks in place, as the engine does);
//! build the tokenizer when there is a vocabulary (and encode and decode a text with it); load
//! the model when there are tensors (as stored, and quantized to Q8_0 at load) and run two
//! tokens; load it as a sentence encoder the same two ways and encode three tokens. Errors are
//! fine; a panic, hang or runaway allocation is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::gguf::Gguf;
use wasmind::model::encoder::Encoder;
use wasmind::model::{LoadOptions, Model};
use wasmind::quant::GgmlType;
use wasmind::tokenizer::{Tokenizer, Work};

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    let Ok(g) = Gguf::parse_for_model(&mut bytes) else {
        return;
    };
    if let Ok(tok) = Tokenizer::from_gguf(&g) {
        let mut ids = Vec::new();
        let mut work = Work::default();
        if tok
            .encode_with(
                &mut work,
                "Hello, world! <|im_start|> 123 déjà",
                true,
                true,
                &mut ids,
            )
            .is_ok()
        {
            let mut out = Vec::new();
            let _ = tok.decode(&ids, true, &mut out);
        }
    }
    for quantize in [None, Some(GgmlType::Q8_0)] {
        if let Ok(mut m) = Model::load_with(
            &g,
            LoadOptions {
                context: 8,
                quantize,
            },
        ) {
            let vocab = m.cfg.vocab as u32;
            let _ = m.forward(&[1 % vocab, 2 % vocab], None);
        }
        if let Ok(mut e) = Encoder::load(&g, quantize) {
            let vocab = e.cfg.vocab as u32;
            let mut out = vec![0.0; e.cfg.dim];
            let _ = e.encode(&[1 % vocab, 2 % vocab, 3 % vocab], &mut out);
        }
    }
});
