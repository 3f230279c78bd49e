//! The forward pass inside the real modules, against llama.cpp: the tiny models of every
//! tensor type, SmolLM2's teacher-forced perplexity and argmaxes, bit-identical results across
//! thread counts, and hostile files through the ABI.

mod common;
use common::*;
use wasmind_host::{Build, Wasmind};

const FLOAT_TOLERANCE: f32 = 0.15;
const QUANT_TOLERANCE: f32 = 0.75;
const PERPLEXITY_TOLERANCE: f64 = 0.02;

#[test]
fn tiny_models_match_llama_cpp_inside_the_module() {
    let r = json("models/tiny/tiny-reference.json");
    let ids = u32s(&r["tokens"]);
    let mut failures = vec![];
    for (build, threads) in Build::ALL.into_iter().flat_map(|b| [(b, 0u32), (b, 2)]) {
        for (file, m) in r["models"].as_object().unwrap() {
            let mut w = Wasmind::with_build(build, threads).unwrap();
            w.load_model_file(&fixture(&format!("models/tiny/{file}")), 64)
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
            let build = build.name();
            println!(
                "{build} threads {threads} {file:24} decisive argmax {agree}/{decisive}, last-4 max |dlogit| {max_diff:.4}"
            );
            if agree != decisive || max_diff > tol {
                failures.push(format!("{file} ({build}, threads {threads})"));
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
    for build in Build::ALL {
        let mut w = Wasmind::with_build(build, 2).unwrap();
        w.load_model_file(&fixture(SMOLLM2), 1024).unwrap();
        for forced in r["forced"].as_array().unwrap() {
            check_forced(&mut w, forced, &format!("smollm2 ({})", build.name()));
        }
    }
}

/// One `forced` entry of a reference: the text tokenized as the model's metadata says (the ids
/// llama.cpp fed, at most 512), teacher-forced perplexity within 2 % of llama.cpp's and its
/// argmax at every decisive position.
fn check_forced(w: &mut Wasmind, forced: &serde_json::Value, what: &str) {
    let text = forced["text"].as_str().unwrap();
    let mut ids = w
        .tokenize(text.as_bytes(), wasmind_host::TOKENIZE_ADD_SPECIAL)
        .unwrap();
    ids.truncate(512);
    assert_eq!(ids, u32s(&forced["ids"]), "tokenization differs");
    w.reset().unwrap();
    let rows = w.prefill_logits(&ids).unwrap();
    let nll: f64 = (0..ids.len() - 1)
        .map(|i| -log_softmax_at(&rows[i], ids[i + 1] as usize))
        .sum::<f64>()
        / (ids.len() - 1) as f64;
    let (ppl, want) = (nll.exp(), forced["perplexity"].as_f64().unwrap());
    let (mut decisive, mut agree) = (0, 0);
    for (p, t) in forced["top5"].as_array().unwrap().iter().enumerate() {
        if margin(t) >= DECISIVE_MARGIN {
            decisive += 1;
            agree += (argmax(&rows[p]) as u64 == t["ids"][0].as_u64().unwrap()) as usize;
        }
    }
    println!(
        "{what}, {} tokens: perplexity {ppl:.4} (llama.cpp {want:.4}, {:+.2}%), decisive argmax {agree}/{decisive}",
        ids.len(),
        (ppl / want - 1.0) * 100.0
    );
    assert!((ppl / want - 1.0).abs() <= PERPLEXITY_TOLERANCE);
    assert_eq!(agree, decisive);
}

/// Thread counts never change a bit, in either build. (The builds compute the same exact integer
/// sums but add some of their f32 products in another order, `quant::simd128::legacy_group`, and
/// 30 layers carry that difference to whole logit units: each build is held to llama.cpp on its
/// own, by the parity tests here.)
#[test]
fn logits_are_bit_identical_across_thread_counts() {
    let ids: Vec<u32> = vec![
        1, 504, 3158, 314, 260, 2767, 28, 7045, 24, 9266, 30, 378, 1780, 42, 351, 17, 25, 198,
    ];
    let run = |build: Build, threads: u32| {
        let mut w = Wasmind::with_build(build, threads).unwrap();
        w.load_model_file(&fixture(SMOLLM2), 256).unwrap();
        let mut rows = w.prefill_logits(&ids).unwrap();
        // And one decode step after the batch.
        let vocab = rows[0].len();
        rows.push(w.step(42, vocab).unwrap());
        rows
    };
    let ones = Build::ALL.map(|build| run(build, 1));
    for (build, one) in Build::ALL.into_iter().zip(&ones) {
        for threads in [0, 2, 3, 4] {
            let name = build.name();
            assert!(
                *one == run(build, threads),
                "{name}: threads {threads} differ from 1"
            );
        }
    }
    let mut max_diff = 0.0f32;
    for (a, b) in ones[0].iter().flatten().zip(ones[1].iter().flatten()) {
        max_diff = max_diff.max((a - b).abs());
    }
    println!("simd128 vs relaxed: max |dlogit| {max_diff}");
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
    let file = read("models/tiny/tiny-llama-Q4_K.gguf");
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
    let mut rng = XorShift64(0x9e37_79b9_7f4a_7c15);
    let mut next = move || rng.next();
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
    let mut file = read("models/tiny/tiny-llama-Q8_0.gguf");
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

/// A damaged tensor is refused at load with BAD_FORMAT naming it and the place: an infinite or
/// NaN F16 weight, a NaN or infinite legacy block scale (the kernels convert both assuming they
/// are finite), through the real module.
#[test]
fn non_finite_weights_and_scales_are_refused_naming_the_tensor() {
    let cases = [
        (
            "tiny-llama-F16.gguf",
            2,
            0x7c00u16,
            "weight 1 is not finite (f16 bits 0x7c00)",
        ),
        (
            "tiny-llama-F16.gguf",
            6,
            0xfe00,
            "weight 3 is not finite (f16 bits 0xfe00)",
        ),
        (
            "tiny-llama-Q4_1.gguf",
            0,
            0x7e00,
            "block 0 has a non-finite scale",
        ),
        (
            "tiny-llama-Q8_0.gguf",
            34,
            0xfc00,
            "block 1 has a non-finite scale",
        ),
    ];
    let mut w = Wasmind::single_threaded().unwrap();
    for (name, byte, bits, message) in cases {
        let file = read(&format!("models/tiny/{name}"));
        let tensor = "blk.1.ffn_down.weight";
        let at = wasmind::gguf::Gguf::parse(&file)
            .unwrap()
            .tensor(tensor)
            .unwrap()
            .file_offset
            + byte;
        let mut bad = file.clone();
        bad[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        let e = w.load_model_bytes(&bad, 64).unwrap_err().to_string();
        assert!(
            e.contains("(-3)") && e.contains(tensor) && e.contains(message),
            "{name}: {e}"
        );
        // the same file undamaged loads
        w.load_model_bytes(&file, 64).unwrap();
    }
}

/// A key or value past the f16 cache's range fails the batch with BAD_FORMAT naming the
/// layer and the batch's first such position, however many threads store the cache rows
/// (`model::qkv_kernel`), and the module goes on: the same file undamaged runs after it.
#[test]
fn a_key_past_the_f16_cache_range_is_named_on_every_thread_count() {
    let file = read("models/tiny/tiny-llama-Q4_0.gguf");
    let g = wasmind::gguf::Gguf::parse(&file).unwrap();
    let t = g.tensor("blk.0.attn_k.weight").unwrap();
    let (at, len) = (t.file_offset, t.data.len());
    let mut bad = file.clone();
    // every Q4_0 block's scale the largest f16: the keys overflow at every position
    for block in bad[at..at + len].chunks_exact_mut(18) {
        block[..2].copy_from_slice(&0x7bffu16.to_le_bytes());
    }
    for threads in [0, 2, 3] {
        let mut w = Wasmind::with_build(Build::current().unwrap(), threads).unwrap();
        w.load_model_bytes(&bad, 64).unwrap();
        let e = w
            .prefill(&[1, 2, 3, 4, 5, 6, 7, 8])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(-3)") && e.contains("layer 0: a key or value of position 0 is"),
            "threads {threads}: {e}"
        );
        w.load_model_bytes(&file, 64).unwrap();
        w.prefill(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    }
}

#[test]
fn full_context_is_a_clear_status() {
    let mut w = Wasmind::single_threaded().unwrap();
    w.load_model_file(&fixture("models/tiny/tiny-llama-Q4_0.gguf"), 16)
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
        let file = read(SMOLLM2);
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

/// llama.cpp's argmax where its margin is decisive and the last-4 max |dlogit| of `logits`
/// against `tiny-arch-reference.json`'s entry for `file`: `(agree, decisive, max_diff)`.
fn arch_agreement(m: &serde_json::Value, logits: &[Vec<f32>]) -> (usize, usize, f32) {
    let (mut decisive, mut agree) = (0, 0);
    for (p, row) in logits.iter().enumerate() {
        if m["margins"][p].as_f64().unwrap() >= DECISIVE_MARGIN {
            decisive += 1;
            agree += (argmax(row) as u64 == m["top5"][p][0].as_u64().unwrap()) as usize;
        }
    }
    let mut max_diff = 0.0f32;
    let n = logits.len();
    for (k, want) in m["last4_logits"].as_array().unwrap().iter().enumerate() {
        for (i, w) in want.as_array().unwrap().iter().enumerate() {
            max_diff = max_diff.max((logits[n - 4 + k][i] - w.as_f64().unwrap() as f32).abs());
        }
    }
    (agree, decisive, max_diff)
}

/// qwen3, gemma3 (sliding window crossed) and phi3 in the real modules: llama.cpp's argmaxes
/// and last-4 logits; the same bits for 1, 2 and 4 threads; and quantized at load, an F32 file
/// gives exactly the logits of llama-quantize's Q8_0 file.
#[test]
fn qwen3_gemma3_phi3_match_llama_cpp_inside_the_module() {
    let r = json("models/tiny/tiny-arch-reference.json");
    let ids = u32s(&r["tokens"]);
    let run_build = |build: Build, file: &str, threads: u32, quantize: u32| {
        let mut w = Wasmind::with_build(build, threads).unwrap();
        w.set_quantize(quantize).unwrap();
        w.load_model_file(&fixture(&format!("models/tiny/{file}")), 64)
            .unwrap();
        let mut rows = w.prefill_logits(&ids[..ids.len() - 1]).unwrap();
        let vocab = rows[0].len();
        rows.push(w.step(ids[ids.len() - 1], vocab).unwrap()); // the last one as a decode step
        rows
    };
    let run = |file: &str, threads: u32, quantize: u32| {
        run_build(Build::current().unwrap(), file, threads, quantize)
    };
    let mut failures = vec![];
    for (file, m) in r["models"].as_object().unwrap() {
        let tol = if file.contains("F32") {
            FLOAT_TOLERANCE
        } else {
            QUANT_TOLERANCE
        };
        let one = run(file, 0, 0);
        let (agree, decisive, max_diff) = arch_agreement(m, &one);
        println!(
            "{file:24} decisive argmax {agree}/{decisive}, last-4 max |dlogit| {max_diff:.4} (tolerance {tol})"
        );
        if agree != decisive || max_diff > tol {
            failures.push(file.clone());
        }
        for threads in [1, 2, 4] {
            assert!(
                run(file, threads, 0) == one,
                "{file}: {threads} threads differ from the single-threaded module"
            );
        }
        for build in Build::ALL {
            let (agree, decisive, max_diff) = arch_agreement(m, &run_build(build, file, 2, 0));
            if agree != decisive || max_diff > tol {
                failures.push(format!("{file} ({})", build.name()));
            }
        }
        if file.contains("F32") {
            let q8 = file.replace("F32", "Q8_0");
            let quantized = run(file, 2, 8);
            assert!(
                quantized == run(&q8, 2, 0),
                "{file} quantized at load differs from {q8}"
            );
            let (agree, decisive, max_diff) = arch_agreement(&r["models"][&q8], &quantized);
            println!(
                "{file:24} quantized at load: decisive argmax {agree}/{decisive}, last-4 max |dlogit| {max_diff:.4} (= {q8})"
            );
        }
    }
    assert!(failures.is_empty(), "differ from llama.cpp: {failures:?}");
}

/// This repository's tiny models (`testdata/arch/`): their folder, llama.cpp's logits for them
/// (`reference.json`) and the ids those are for.
fn arch_fixtures() -> (std::path::PathBuf, serde_json::Value, Vec<u32>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/arch");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let ids = u32s(&r["tokens"]);
    (dir, r, ids)
}

/// gemma2, granite, smollm3, lfm2, exaone4, qwen35, phi3 with LongRoPE, and qwen3 and gemma2
/// with YaRN (this repository's tiny models, `testdata/arch/`) in the real modules: llama.cpp's argmaxes and last-4 logits
/// with every build, F16 as committed and quantized to Q8_0 at load, the last position as a
/// decode step; the same bits on 0, 1 and 2 threads.
#[test]
fn newer_architectures_match_llama_cpp_inside_the_module() {
    let (dir, r, ids) = arch_fixtures();
    let mut failures = vec![];
    for (file, m) in r["models"].as_object().unwrap() {
        let quantize = if file.contains("Q8_0") { 8 } else { 0 };
        let path = dir.join(file.replace("Q8_0", "F16"));
        let run = |build: Build, threads: u32| {
            let mut w = Wasmind::with_build(build, threads).unwrap();
            w.set_quantize(quantize).unwrap();
            w.load_model_file(&path, 64).unwrap();
            let mut rows = w.prefill_logits(&ids[..ids.len() - 1]).unwrap();
            let vocab = rows[0].len();
            rows.push(w.step(ids[ids.len() - 1], vocab).unwrap());
            rows
        };
        let tol = if quantize == 0 {
            FLOAT_TOLERANCE
        } else {
            QUANT_TOLERANCE
        };
        for build in Build::ALL {
            let one = run(build, 0);
            let (agree, decisive, max_diff) = arch_agreement(m, &one);
            println!(
                "{} {file:24} decisive argmax {agree}/{decisive}, last-4 max |dlogit| {max_diff:.4} (tolerance {tol})",
                build.name()
            );
            if agree != decisive || max_diff > tol {
                failures.push(format!("{file} ({})", build.name()));
            }
            for threads in [1, 2] {
                assert!(
                    run(build, threads) == one,
                    "{file} ({}): {threads} threads differ from the single-threaded module",
                    build.name()
                );
            }
        }
    }
    assert!(failures.is_empty(), "differ from llama.cpp: {failures:?}");
}

/// Qwen 3.5 in the real modules: `model_info` names its delta-net layers and their heads, and
/// truncating the cache back (`kv_truncate`: a delta net's state cannot go back, so it is
/// rebuilt from the ids) gives the logits of one straight run, bit for bit, in each build on
/// 0 and 2 threads.
#[test]
fn qwen35_truncation_rebuilds_inside_the_module() {
    let (dir, _, ids) = arch_fixtures();
    for build in Build::ALL {
        for threads in [0, 2] {
            let mut w = Wasmind::with_build(build, threads).unwrap();
            w.load_model_file(&dir.join("tiny-qwen35-tiled-F16.gguf"), 64)
                .unwrap();
            let info: serde_json::Value = serde_json::from_str(&w.model_info().unwrap()).unwrap();
            let kinds = ["delta_net", "delta_net", "global", "delta_net", "delta_net"];
            assert_eq!(info["layer_kinds"], serde_json::json!(kinds));
            let heads = (&info["delta_net_key_heads"], &info["delta_net_value_heads"]);
            assert_eq!(heads, (&serde_json::json!(2), &serde_json::json!(6)));
            let all = w.prefill_logits(&ids).unwrap();
            for back in [48u32, 40, 7, 0] {
                let n = w.call::<u32, i32>("kv_truncate", back).unwrap();
                assert_eq!(n, back as i32, "kv_truncate({back})");
                let rest = w.prefill_logits(&ids[back as usize..]).unwrap();
                assert!(
                    rest[..] == all[back as usize..],
                    "{} on {threads} threads: truncated to {back}, the logits differ",
                    build.name()
                );
            }
        }
    }
}

/// `model_info` says how RoPE is stretched: YaRN with its factor and original context, linear
/// with its factor, and nothing for a file that is not stretched.
#[test]
fn model_info_names_the_rope_scaling() {
    let (dir, _, _) = arch_fixtures();
    let mut w = Wasmind::single_threaded().unwrap();
    let mut info = |file: &str| -> serde_json::Value {
        w.load_model_file(&dir.join(file), 64).unwrap();
        serde_json::from_str(&w.model_info().unwrap()).unwrap()
    };
    let i = info("tiny-qwen3-yarn-F16.gguf");
    let got = (&i["rope_scaling"], i["rope_factor"].as_f64());
    assert_eq!(
        (got, &i["rope_original_context"]),
        ((&"yarn".into(), Some(4.0)), &256.into())
    );
    let i = info("tiny-granite-F16.gguf");
    assert!(i.get("rope_scaling").is_none(), "{i}");
}

#[test]
fn set_quantize_refuses_types_it_cannot_write() {
    let mut w = Wasmind::single_threaded().unwrap();
    let e = w.set_quantize(2).unwrap_err().to_string(); // Q4_0
    assert!(e.contains("supported: 0"), "{e}");
    w.set_quantize(8).unwrap();
    w.set_quantize(0).unwrap();
}

/// The Gemma 3 270M file: `$WASMIND_GEMMA`, else the fixture (`cargo xtask fixtures` fetches it
/// into `models/` with `python3 models/fetch.py --model gemma3-270m`).
fn gemma_file() -> std::path::PathBuf {
    std::env::var_os("WASMIND_GEMMA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| fixture("models/gemma-3-270m-Q4_K_M.gguf"))
}

/// Gemma 3 270M Q4_K_M against llama.cpp (`reference/gemma3-270m-q4_k_m.json`): teacher-forced
/// perplexity within 2 % and its argmax at every decisive position; for the 12 chat prompts
/// (Gemma template, BOS) the same prompt ids, its argmax at every decisive teacher-forced reply
/// step, and a greedy reply equal to its own up to its first near-tie.
#[test]
fn gemma3_270m_matches_llama_cpp() {
    let path = gemma_file();
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask fixtures`",
        path.display()
    );
    let r = json("reference/gemma3-270m-q4_k_m.json");
    let mut w = Wasmind::with_threads(2).unwrap();
    w.load_model_file(&path, 1024).unwrap();
    let info: serde_json::Value = serde_json::from_str(&w.model_info().unwrap()).unwrap();
    println!(
        "{}: arch {}, layers {}, window {}, template {}",
        path.display(),
        info["arch"],
        info["layer_kinds"],
        info["sliding_window"],
        info["chat_template"]
    );
    assert_eq!(info["arch"], "gemma3");
    for forced in r["forced"].as_array().unwrap() {
        check_forced(&mut w, forced, "gemma3 270M");
    }
    w.sampler_set(&wasmind_host::Sampling::GREEDY).unwrap();
    // The base model's file has no `tokenizer.chat_template`; llama.cpp was told "gemma".
    assert_eq!(r["template"], "gemma");
    w.chat_set_template(3).unwrap(); // WASMIND_TEMPLATE 3: Gemma
    let (mut decisive, mut agree, mut same_prefix, mut prompts) = (0, 0, 0, 0);
    for g in r["greedy"].as_array().unwrap() {
        let (want_prompt, want_ids) = (u32s(&g["prompt_ids"]), u32s(&g["ids"]));
        let steps = g["steps"].as_array().unwrap();
        w.chat_reset().unwrap();
        if let Some(s) = g["system"].as_str() {
            w.chat_add(wasmind_host::ROLE_SYSTEM, s).unwrap();
        }
        w.chat_add(wasmind_host::ROLE_USER, g["user"].as_str().unwrap())
            .unwrap();
        let got = w
            .chat_reply(want_ids.len() as u32, |_| {})
            .unwrap()
            .unwrap_or_else(|e| panic!("chat_start refused: {e}"));
        assert_eq!(
            got.prompt_ids, want_prompt,
            "prompt ids of {:?}",
            g["prompt"]
        );
        prompts += 1;
        // Greedy: llama.cpp's reply up to its first near-tie.
        let n = steps
            .iter()
            .position(|s| margin(s) < DECISIVE_MARGIN)
            .unwrap_or(want_ids.len())
            .min(got.ids.len());
        assert_eq!(&got.ids[..n], &want_ids[..n], "reply of {:?}", g["user"]);
        same_prefix += n;
        // Teacher-forced along llama.cpp's reply.
        let n = teacher_forced_argmax(&mut w, &want_prompt, &want_ids, steps, &g["user"]);
        (decisive, agree) = (decisive + n, agree + n);
    }
    println!(
        "gemma3 270M: prompt ids {prompts}/{prompts} equal; teacher-forced decisive argmax {agree}/{decisive}; \
         {same_prefix} greedy reply tokens equal up to llama.cpp's first near-tie"
    );
}

/// The relaxed build under every way wasmtime can be made to lower relaxed SIMD on this host
/// (`wasmind_host::Lowering`: relaxed_simd_deterministic's widened dots and bitselects, no FMA3,
/// SSE4.1 only): llama.cpp's decisive argmaxes and tolerances on the tiny models of every
/// tensor type and of qwen3, gemma3 and phi3 (a batch and a decode step), SmolLM2's and Gemma 3
/// 270M's teacher-forced perplexity and decisive argmaxes. And which bits move: the integer
/// dots are exact however they are lowered (`src/quant/simd128/dot_i8.rs`), so the
/// deterministic lowering gives the native one's logits bit for bit where both fuse
/// `relaxed_madd` (an x86 CPU with FMA3), and SSE4.1 gives no-FMA's (both unfused).
#[test]
fn relaxed_build_matches_llama_cpp_under_every_lowering() {
    use wasmind_host::Lowering;
    if !cfg!(target_arch = "x86_64") {
        skipped(
            "relaxed_build_matches_llama_cpp_under_every_lowering",
            "the lowerings it forces are x86-64's",
        );
        return;
    }
    let tiny = json("models/tiny/tiny-reference.json");
    let arch = json("models/tiny/tiny-arch-reference.json");
    // Every tiny file's logits (all ids but the last as a batch, the last as a decode step) in
    // the single-threaded module, with the tolerance its type gets.
    let files: Vec<(&serde_json::Value, String, Vec<u32>)> = [&tiny, &arch]
        .into_iter()
        .flat_map(|r| {
            let ids = u32s(&r["tokens"]);
            r["models"]
                .as_object()
                .unwrap()
                .iter()
                .map(move |(f, m)| (m, f.clone(), ids.clone()))
        })
        .collect();
    let logits_of = |lowering: Lowering, file: &str, ids: &[u32]| {
        let mut w = Wasmind::with_lowering(Build::Relaxed, lowering, 0).unwrap();
        w.load_model_file(&fixture(&format!("models/tiny/{file}")), 64)
            .unwrap();
        let mut rows = w.prefill_logits(&ids[..ids.len() - 1]).unwrap();
        let vocab = rows[0].len();
        rows.push(w.step(ids[ids.len() - 1], vocab).unwrap());
        rows
    };
    let native: Vec<_> = files
        .iter()
        .map(|(_, f, ids)| logits_of(Lowering::Native, f, ids))
        .collect();
    let has_fma = std::arch::is_x86_feature_detected!("fma");
    let mut failures = vec![];
    let mut no_fma: Vec<Vec<Vec<f32>>> = vec![];
    for lowering in Lowering::ALL.into_iter().skip(1) {
        let mut same_as_native = 0;
        for (i, (m, file, ids)) in files.iter().enumerate() {
            let rows = logits_of(lowering, file, ids);
            let margins: Vec<f64> = match m.get("margins") {
                Some(ms) => ms
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect(),
                None => (0..ids.len())
                    .map(|p| {
                        let l = &m["top5_logits"][p];
                        l[0].as_f64().unwrap() - l[1].as_f64().unwrap()
                    })
                    .collect(),
            };
            let (mut decisive, mut agree) = (0, 0);
            for (p, row) in rows.iter().enumerate() {
                if margins[p] >= DECISIVE_MARGIN {
                    decisive += 1;
                    agree += (argmax(row) as u64 == m["top5"][p][0].as_u64().unwrap()) as usize;
                }
            }
            let mut max_diff = 0.0f32;
            for (k, want) in m["last4_logits"].as_array().unwrap().iter().enumerate() {
                for (j, x) in want.as_array().unwrap().iter().enumerate() {
                    max_diff = max_diff
                        .max((rows[ids.len() - 4 + k][j] - x.as_f64().unwrap() as f32).abs());
                }
            }
            let float = ["F32", "F16", "BF16"].iter().any(|t| file.contains(t));
            let tol = if float {
                FLOAT_TOLERANCE
            } else {
                QUANT_TOLERANCE
            };
            if agree != decisive || max_diff > tol {
                failures.push(format!(
                    "{file} ({}): decisive argmax {agree}/{decisive}, last-4 max |dlogit| {max_diff:.4}",
                    lowering.name()
                ));
            }
            same_as_native += (rows == native[i]) as usize;
            match lowering {
                Lowering::Deterministic if has_fma => assert!(
                    rows == native[i],
                    "{file}: the deterministic lowering changed bits (an integer dot that is not exact?)"
                ),
                Lowering::NoFma => no_fma.push(rows),
                Lowering::Sse41 => assert!(
                    rows == no_fma[i],
                    "{file}: SSE4.1 and no-FMA lowerings differ (both leave relaxed_madd unfused)"
                ),
                _ => {}
            }
        }
        println!(
            "lowering {}: {} tiny files within llama.cpp's tolerances, {same_as_native} of them bit for bit the native lowering's",
            lowering.name(),
            files.len()
        );
        let mut w = Wasmind::with_lowering(Build::Relaxed, lowering, 2).unwrap();
        w.load_model_file(&fixture(SMOLLM2), 1024).unwrap();
        for forced in json("reference/smollm2-q4_1.json")["forced"]
            .as_array()
            .unwrap()
        {
            check_forced(
                &mut w,
                forced,
                &format!("smollm2 (relaxed, {})", lowering.name()),
            );
        }
        let gemma = gemma_file();
        assert!(
            gemma.is_file(),
            "{} is missing: run `cargo xtask fixtures`",
            gemma.display()
        );
        w.load_model_file(&gemma, 1024).unwrap();
        for forced in json("reference/gemma3-270m-q4_k_m.json")["forced"]
            .as_array()
            .unwrap()
        {
            check_forced(
                &mut w,
                forced,
                &format!("gemma3 270M (relaxed, {})", lowering.name()),
            );
        }
    }
    assert!(failures.is_empty(), "differ from llama.cpp: {failures:#?}");
}
