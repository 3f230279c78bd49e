//! Tokenizers inside the real module, id for id with llama.cpp: every corpus text under the six
//! vocabulary-only files and the full SmolLM2 file, plain and with special tokens parsed.

mod common;
use common::*;
use wasmind_host::{TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL, Wasmind};

fn check_file(w: &mut Wasmind, texts: &[&str], refs: &[serde_json::Value], what: &str) {
    let mut mismatches = vec![];
    for (i, (text, r)) in texts.iter().zip(refs).enumerate() {
        // llama.cpp's reference: no BOS/EOS (add_bos=False); `special` parses control tokens.
        let plain = w.tokenize(text.as_bytes(), 0).unwrap();
        let special = w.tokenize(text.as_bytes(), TOKENIZE_PARSE_SPECIAL).unwrap();
        if plain != u32s(&r["ids"]) || special != u32s(&r["ids_special"]) {
            mismatches.push(i);
        }
    }
    println!(
        "{what}: {} texts, {} mismatches",
        texts.len(),
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{what}: texts {mismatches:?} differ from llama.cpp"
    );
}

#[test]
fn vocabulary_files_match_llama_cpp() {
    let r = json("reference/vocab-reference.json");
    let texts = strs(&r["texts"]);
    assert_eq!(texts.len(), 631);
    let mut w = Wasmind::single_threaded().unwrap();
    for (file, refs) in r["files"].as_object().unwrap() {
        w.load_model_file(&fixture(&format!("models/vocab/{file}")), 0)
            .unwrap();
        check_file(&mut w, &texts, refs.as_array().unwrap(), file);
    }
}

#[test]
fn smollm2_matches_llama_cpp_and_round_trips() {
    let r = json("reference/smollm2-q4_1.json");
    let refs = r["tokenize"].as_array().unwrap();
    let texts: Vec<&str> = refs.iter().map(|t| t["text"].as_str().unwrap()).collect();
    let mut w = Wasmind::threaded(1).unwrap();
    w.load_model_file(&fixture(SMOLLM2), 256).unwrap();
    check_file(&mut w, &texts, refs, "SmolLM2");
    for text in &texts {
        let ids = w.tokenize(text.as_bytes(), 0).unwrap();
        assert_eq!(
            w.detokenize(&ids, 0).unwrap(),
            text.as_bytes(),
            "round trip of {text:?}"
        );
        // Streaming: pieces concatenate to the text and each is whole UTF-8.
        let mut streamed = Vec::new();
        for &id in &ids {
            let piece = w.detokenize_stream(Some(id), 0).unwrap();
            assert!(
                std::str::from_utf8(&piece).is_ok(),
                "broken UTF-8 piece in {text:?}"
            );
            streamed.extend(piece);
        }
        streamed.extend(w.detokenize_stream(None, 0).unwrap());
        assert_eq!(streamed, text.as_bytes());
    }
}

#[test]
fn bad_text_is_an_error() {
    let mut w = Wasmind::single_threaded().unwrap();
    // No model yet.
    let e = w.tokenize(b"hello", 0).unwrap_err().to_string();
    assert!(e.contains("(-5)"), "{e}");
    w.load_model_file(&fixture("models/vocab/vocab-bpe-smollm.gguf"), 0)
        .unwrap();
    let e = w.tokenize(b"caf\xc3", 0).unwrap_err().to_string();
    assert!(e.contains("(-7)") && e.contains("UTF-8"), "{e}");
    assert_eq!(w.tokenize(b"", 0).unwrap(), Vec::<u32>::new());
    let e = w.detokenize(&[u32::MAX], 0).unwrap_err().to_string();
    assert!(e.contains("outside the vocabulary"), "{e}");
    // A vocabulary-only file has no weights.
    let ids = w.put(&[1, 0, 0, 0, 2, 0, 0, 0]).unwrap();
    assert_eq!(
        w.call::<(u32, u32), i32>("prefill", (ids, 2)).unwrap(),
        -5,
        "prefill without weights"
    );
    assert!(w.last_error().unwrap().contains("no model"));
}

/// WordPiece (BERT vocabularies, `testdata/bert/`, made by `gen_bert.py`): every corpus text
/// and some harder ones under the vocabulary lowercased with accents stripped, cased, and
/// lowercased with accents kept, plain, with control tokens parsed, and with [CLS] ... [SEP].
#[test]
fn wordpiece_files_match_llama_cpp() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bert");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let corpus = json("reference/vocab-reference.json");
    let mut texts = strs(&corpus["texts"]);
    texts.extend(strs(&r["extra_texts"]));
    let mut w = Wasmind::single_threaded().unwrap();
    let files = r["vocab"].as_object().unwrap();
    assert_eq!(files.len(), 3);
    for (file, refs) in files {
        w.load_model_file(&dir.join(file), 0).unwrap();
        let refs = refs.as_array().unwrap();
        check_file(&mut w, &texts, refs, file);
        let mut mismatches = vec![];
        for (i, (text, r)) in texts.iter().zip(refs).enumerate() {
            let ids = w.tokenize(text.as_bytes(), TOKENIZE_ADD_SPECIAL).unwrap();
            if ids != u32s(&r["ids_cls_sep"]) {
                mismatches.push(i);
            }
        }
        assert!(
            mismatches.is_empty(),
            "{file}: [CLS] ... [SEP] of texts {mismatches:?}"
        );
    }
}
