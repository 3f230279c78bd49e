//! The forward pass against llama.cpp on the tiny random-weight models (every tensor type, and
//! qwen2 with attention biases): `../shared/models/tiny/tiny-reference.json`.

use std::string::String;
use std::vec::Vec;

use super::Model;
use crate::gguf::Gguf;

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared");
/// Positions where llama.cpp's top two logits are this far apart must have the same argmax.
const DECISIVE_MARGIN: f32 = 0.5;
/// Largest |logit - llama.cpp's| over the last 4 positions.
const FLOAT_TOLERANCE: f32 = 0.15;
const QUANT_TOLERANCE: f32 = 0.75;

fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

fn reference() -> serde_json::Value {
    let path = std::format!("{SHARED}/models/tiny/tiny-reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn run(file: &str, ids: &[u32], context: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(std::format!("{SHARED}/models/tiny/{file}")).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let mut model = Model::load(&g, context).unwrap();
    let mut all = Vec::new();
    model
        .forward(ids, Some(&mut |_, l: &[f32]| all.push(l.to_vec())))
        .unwrap();
    all
}

#[test]
fn tiny_models_match_llama_cpp() {
    let r = reference();
    let ids: Vec<u32> = r["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let models = r["models"].as_object().unwrap();
    let mut failures = Vec::new();
    for (file, m) in models {
        let logits = run(file, &ids, 64);
        assert_eq!(logits.len(), ids.len());
        let top5 = m["top5"].as_array().unwrap();
        let top5_logits = m["top5_logits"].as_array().unwrap();
        let mut decisive = 0;
        let mut agree = 0;
        for (p, row) in logits.iter().enumerate() {
            let l = top5_logits[p].as_array().unwrap();
            let margin = l[0].as_f64().unwrap() - l[1].as_f64().unwrap();
            if margin as f32 >= DECISIVE_MARGIN {
                decisive += 1;
                if argmax(row) as u64 == top5[p][0].as_u64().unwrap() {
                    agree += 1;
                }
            }
        }
        let last4 = m["last4_logits"].as_array().unwrap();
        let mut max_diff = 0.0f32;
        for (k, want) in last4.iter().enumerate() {
            let got = &logits[ids.len() - 4 + k];
            for (i, w) in want.as_array().unwrap().iter().enumerate() {
                max_diff = max_diff.max((got[i] - w.as_f64().unwrap() as f32).abs());
            }
        }
        let float = file.contains("F32") || file.contains("F16") || file.contains("BF16");
        let tol = if float {
            FLOAT_TOLERANCE
        } else {
            QUANT_TOLERANCE
        };
        std::println!(
            "{file:24} decisive argmax {agree}/{decisive}  last-4 max |dlogit| {max_diff:.4} (tolerance {tol})"
        );
        if agree != decisive || max_diff > tol {
            failures.push(file.clone());
        }
    }
    assert!(failures.is_empty(), "differ from llama.cpp: {failures:?}");
}

#[test]
fn one_token_at_a_time_equals_the_batch() {
    let r = reference();
    let ids: Vec<u32> = r["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let bytes = std::fs::read(std::format!("{SHARED}/models/tiny/tiny-llama-Q8_0.gguf")).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let batched = run("tiny-llama-Q8_0.gguf", &ids, 64);
    let mut model = Model::load(&g, 64).unwrap();
    for (p, &id) in ids.iter().enumerate() {
        model.forward(&[id], None).unwrap();
        let d = model
            .logits
            .iter()
            .zip(&batched[p])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(d < 1e-4, "position {p}: step and batch differ by {d}");
    }
}

#[test]
fn a_full_context_is_an_error_not_a_write_past_the_end() {
    let bytes = std::fs::read(std::format!("{SHARED}/models/tiny/tiny-llama-Q4_0.gguf")).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let mut model = Model::load(&g, 8).unwrap();
    model.forward(&[1, 2, 3, 4, 5, 6, 7], None).unwrap();
    let e = model.forward(&[1, 2], None).unwrap_err();
    assert_eq!(e.status, crate::error::Status::ContextFull);
    model.forward(&[1], None).unwrap();
    assert_eq!(model.pos, 8);
    assert_eq!(
        model.forward(&[1], None).unwrap_err().status,
        crate::error::Status::ContextFull
    );
    let e = model.forward(&[100_000], None);
    assert!(e.is_err());
}

/// qwen3, gemma3 (16-token window: the 48 positions cross it) and phi3 against llama.cpp:
/// `../shared/models/tiny/tiny-arch-reference.json` (top-5 ids, top-two margins, last-4 logits).
fn check_arch_file(r: &serde_json::Value, file: &str, logits: &[Vec<f32>]) -> Option<String> {
    let m = &r["models"][file];
    let n = logits.len();
    let top5 = m["top5"].as_array().unwrap();
    let margins = m["margins"].as_array().unwrap();
    let (mut decisive, mut agree) = (0, 0);
    for (p, row) in logits.iter().enumerate() {
        if margins[p].as_f64().unwrap() as f32 >= DECISIVE_MARGIN {
            decisive += 1;
            if argmax(row) as u64 == top5[p][0].as_u64().unwrap() {
                agree += 1;
            }
        }
    }
    let mut max_diff = 0.0f32;
    for (k, want) in m["last4_logits"].as_array().unwrap().iter().enumerate() {
        let got = &logits[n - 4 + k];
        for (i, w) in want.as_array().unwrap().iter().enumerate() {
            max_diff = max_diff.max((got[i] - w.as_f64().unwrap() as f32).abs());
        }
    }
    let tol = if file.contains("F32") {
        FLOAT_TOLERANCE
    } else {
        QUANT_TOLERANCE
    };
    std::println!(
        "{file:24} decisive argmax {agree}/{decisive}  last-4 max |dlogit| {max_diff:.4} (tolerance {tol})"
    );
    (agree != decisive || max_diff > tol).then(|| file.into())
}

fn arch_reference() -> (serde_json::Value, Vec<u32>) {
    let path = std::format!("{SHARED}/models/tiny/tiny-arch-reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = r["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    (r, ids)
}

#[test]
fn qwen3_gemma3_phi3_match_llama_cpp() {
    let (r, ids) = arch_reference();
    let mut failures = Vec::new();
    for file in r["models"].as_object().unwrap().keys() {
        let logits = run(file, &ids, 64);
        failures.extend(check_arch_file(&r, file, &logits));
    }
    assert!(failures.is_empty(), "differ from llama.cpp: {failures:?}");
}
