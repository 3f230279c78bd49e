//! The forward pass inside the real modules, against llama.cpp: the tiny models of every
//! tensor type, SmolLM2's teacher-forced perplexity and argmaxes, bit-identical results across
//! thread counts, and hostile files through the ABI.

mod common;
use common::*;
use host_tests::Wasmind;

const DECISIVE_MARGIN: f64 = 0.5;
const FLOAT_TOLERANCE: f32 = 0.15;
const QUANT_TOLERANCE: f32 = 0.75;
const PERPLEXITY_TOLERANCE: f64 = 0.02;

#[test]
fn tiny_models_match_llama_cpp_inside_the_module() {
    let r = json("models/tiny/tiny-reference.json");
    let ids = u32s(&r["tokens"]);
    let mut failures = vec![];
    for threads in [0u32, 2] {
        for (file, m) in r["models"].as_object().unwrap() {
            let mut w = Wasmind::with_threads(threads).unwrap();
            w.load_model_file(&shared(&format!("models/tiny/{file}")), 64)
                .unwrap();
            let logits = w.prefill_logits(&ids).unwrap();
            let (mut decisive, mut agree) = (0, 0);
            for (p, row) in logits.iter().enumerate() {
                let l = m["top5_logits"][p].as_array().unwrap();
                if l[0].as_f64().unwrap() - l[1].as_f64().unwrap() >= DECISIVE_MARGIN {
                    decisive += 1;
                    agree += (argmax(row) as u64 == m["top5"][p][0].as_u64().unwrap()) as usize;
                }
            }
            let mut max_diff = 0.0f32;
            for (k, want) in m["last4_logits"].as_array().unwrap().iter().enumerate() {
                let got = &logits[ids.len() - 4 + k];
                for (i, w) in want.as_array().unwrap().iter().enumerate() {
                    max_diff = max_diff.max((got[i] - w.as_f64().unwrap() as f32).abs());
                }
            }
            let float = ["F32", "F16", "BF16"].iter().any(|t| file.contains(t));
            let tol = if float {
                FLOAT_TOLERANCE
            } else {
                QUANT_TOLERANCE
            };
            println!(
                "threads {threads} {file:24} decisive argmax {agree}/{decisive}, last-4 max |dlogit| {max_diff:.4}"
            );
            if agree != decisive || max_diff > tol {
                failures.push(format!("{file} (threads {threads})"));
            }
        }
    }
    assert!(failures.is_empty(), "differ from llama.cpp: {failures:?}");
}

fn log_softmax_at(row: &[f32], i: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&x| ((x as f64) - max).exp()).sum();
    row[i] as f64 - max - sum.ln()
}

#[test]
fn smollm2_perplexity_and_argmax_match_llama_cpp() {
    let r = json("reference/smollm2-q4_1.json");
    let mut w = Wasmind::with_threads(2).unwrap();
    w.load_model_file(&shared(SMOLLM2), 1024).unwrap();
    for forced in r["forced"].as_array().unwrap() {
        let text = forced["text"].as_str().unwrap();
        // The text tokenized as the model's metadata says, the same ids llama.cpp fed.
        let mut ids = w
            .tokenize(text.as_bytes(), host_tests::TOKENIZE_ADD_SPECIAL)
            .unwrap();
        ids.truncate(512);
        assert_eq!(ids, u32s(&forced["ids"]), "tokenization differs");
        w.reset().unwrap();
        let rows = w.prefill_logits(&ids).unwrap();
        let nll: f64 = (0..ids.len() - 1)
            .map(|i| -log_softmax_at(&rows[i], ids[i + 1] as usize))
            .sum::<f64>()
            / (ids.len() - 1) as f64;
        let ppl = nll.exp();
        let want = forced["perplexity"].as_f64().unwrap();
        let (mut decisive, mut agree) = (0, 0);
        for (p, t) in forced["top5"].as_array().unwrap().iter().enumerate() {
            let l = t["logits"].as_array().unwrap();
            if l[0].as_f64().unwrap() - l[1].as_f64().unwrap() >= DECISIVE_MARGIN {
                decisive += 1;
                agree += (argmax(&rows[p]) as u64 == t["ids"][0].as_u64().unwrap()) as usize;
            }
        }
        println!(
            "{} tokens: perplexity {ppl:.4} (llama.cpp {want:.4}, {:+.2}%), decisive argmax {agree}/{decisive}",
            ids.len(),
            (ppl / want - 1.0) * 100.0
        );
        assert!((ppl / want - 1.0).abs() <= PERPLEXITY_TOLERANCE);
        assert_eq!(agree, decisive);
    }
}

#[test]
fn logits_are_bit_identical_across_thread_counts() {
    let ids: Vec<u32> = vec![
        1, 504, 3158, 314, 260, 2767, 28, 7045, 24, 9266, 30, 378, 1780, 42, 351, 17, 25, 198,
    ];
    let run = |threads: u32| {
        let mut w = Wasmind::with_threads(threads).unwrap();
        w.load_model_file(&shared(SMOLLM2), 256).unwrap();
        let mut rows = w.prefill_logits(&ids).unwrap();
        // And one decode step after the batch.
        let vocab = rows[0].len();
        rows.push(w.step(42, vocab).unwrap());
        rows
    };
    let one = run(1);
    for threads in [0, 2, 3, 4] {
        let other = run(threads);
        assert!(one == other, "threads {threads} differ from 1");
    }
}

/// Every load of a hostile file must return an error status (and never trap: a trap is an
/// `Err` from the call itself, which `unwrap` turns into a failure).
fn load_is_refused(w: &mut Wasmind, bytes: &[u8], what: &str) {
    let ptr = w.put(bytes).unwrap();
    let r = w
        .call::<(u32, u32), i32>("load_model", (ptr, bytes.len() as u32))
        .unwrap_or_else(|e| panic!("{what}: trapped: {e}"));
    assert!(r < 0, "{what}: accepted");
    // The module owns the block; the next load frees it.
}

#[test]
fn hostile_files_are_errors_not_traps() {
    let file = std::fs::read(shared("models/tiny/tiny-llama-Q4_K.gguf")).unwrap();
    let mut w = Wasmind::single_threaded().unwrap();
    // Metadata and tensor table: everything before the data section (a few KiB here).
    let header_end = 4096.min(file.len());
    // Truncated at every KiB of the whole file (so of the header too) and at a few odd places.
    for cut in (0..file.len())
        .step_by(1024)
        .chain([file.len() - 1, 1, 3, 4, 8, 23])
    {
        load_is_refused(&mut w, &file[..cut], &format!("truncated at {cut}"));
    }
    // Random bytes, and random bytes after a valid magic.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..200 {
        let n = 16 + (next() % 4096) as usize;
        let mut junk: Vec<u8> = (0..n).map(|_| next() as u8).collect();
        if i % 2 == 0 {
            junk[..4].copy_from_slice(b"GGUF");
            junk[4..8].copy_from_slice(&3u32.to_le_bytes());
        }
        load_is_refused(&mut w, &junk, "random bytes");
    }
    // Absurd counts: tensor count and kv count set to huge values.
    for (offset, what) in [(8usize, "tensor count"), (16, "kv count")] {
        let mut bad = file.clone();
        bad[offset..offset + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        load_is_refused(&mut w, &bad, what);
        bad[offset..offset + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        load_is_refused(&mut w, &bad, what);
    }
    // Corrupt bytes all over the header: each load must not trap (some corruptions are still
    // valid files, e.g. a changed letter in a token).
    for _ in 0..300 {
        let mut bad = file.clone();
        for _ in 0..4 {
            let at = (next() as usize) % header_end;
            bad[at] = next() as u8;
        }
        let ptr = w.put(&bad).unwrap();
        w.call::<(u32, u32), i32>("load_model", (ptr, bad.len() as u32))
            .expect("corrupted header: trapped");
    }
    // And the module still works afterwards.
    w.load_model_bytes(&file, 64).unwrap();
    let vocab = w.vocab().unwrap();
    assert_eq!(w.step(1, vocab).unwrap().len(), vocab);
}

#[test]
fn unsupported_tensor_types_name_the_tensor_and_type() {
    // Rewrite the type id of the first tensor of a tiny file to IQ2_XXS (16).
    let mut file = std::fs::read(shared("models/tiny/tiny-llama-Q8_0.gguf")).unwrap();
    let name = b"token_embd.weight";
    let at = file
        .windows(name.len())
        .position(|w| w == name)
        .expect("tensor name");
    // name, n_dims u32, dims u64 * n_dims, type u32
    let n_dims = u32::from_le_bytes(
        file[at + name.len()..at + name.len() + 4]
            .try_into()
            .unwrap(),
    ) as usize;
    let ty_at = at + name.len() + 4 + 8 * n_dims;
    file[ty_at..ty_at + 4].copy_from_slice(&16u32.to_le_bytes());
    let mut w = Wasmind::single_threaded().unwrap();
    let e = w.load_model_bytes(&file, 64).unwrap_err().to_string();
    assert!(
        e.contains("token_embd.weight") && e.contains("IQ2_XXS"),
        "{e}"
    );
    assert!(e.contains("(-4)"), "not UNSUPPORTED: {e}");
}

#[test]
fn full_context_is_a_clear_status() {
    let mut w = Wasmind::single_threaded().unwrap();
    w.load_model_file(&shared("models/tiny/tiny-llama-Q4_0.gguf"), 16)
        .unwrap();
    let vocab = w.vocab().unwrap();
    w.prefill(&(1..=16).collect::<Vec<u32>>()).unwrap();
    let e = w.step(5, vocab).unwrap_err().to_string();
    assert!(
        e.contains("(-6)") && e.contains("do not fit"),
        "not CONTEXT_FULL: {e}"
    );
    // Out-of-vocabulary ids and empty files too.
    w.reset().unwrap();
    let e = w.step(vocab as u32, vocab).unwrap_err().to_string();
    assert!(e.contains("outside the vocabulary"), "{e}");
    assert!(w.load_model_bytes(&[], 16).is_err());
}

#[test]
fn peak_memory_is_within_file_plus_kv_cache_plus_32_mib() {
    // The file is copied into linear memory once and the weights are used where they lie.
    for ctx in [512u32, 4096] {
        let mut w = Wasmind::single_threaded().unwrap();
        let file = std::fs::read(shared(SMOLLM2)).unwrap();
        w.load_model_bytes(&file, ctx).unwrap();
        let info: serde_json::Value = serde_json::from_str(&w.model_info().unwrap()).unwrap();
        let kv = info["kv_cache_bytes"].as_u64().unwrap() as usize;
        let ids: Vec<u32> = (0..200).map(|i| 100 + i * 7).collect();
        w.prefill(&ids).unwrap();
        let vocab = w.vocab().unwrap();
        for i in 0..20 {
            w.step(i, vocab).unwrap();
        }
        let peak = w.memory_bytes();
        let budget = file.len() + kv + (32 << 20);
        println!(
            "ctx {ctx}: linear memory {:.1} MiB = file {:.1} MiB + KV {:.1} MiB + {:.1} MiB (budget +32 MiB)",
            peak as f64 / 1048576.0,
            file.len() as f64 / 1048576.0,
            kv as f64 / 1048576.0,
            (peak as f64 - file.len() as f64 - kv as f64) / 1048576.0
        );
        assert!(
            peak <= budget,
            "memory {peak} exceeds file + KV + 32 MiB = {budget}"
        );
    }
}
