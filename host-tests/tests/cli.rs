//! The command line refuses what it does not understand, before it fetches or loads anything.

mod common;

use common::*;

/// Runs `wasmind args…` with an empty stdin; (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = wasmind_cmd()
        .args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("WASMIND_MODEL")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_on_every_command_prints_the_usage_and_runs_nothing() {
    for cmd in [
        "chat",
        "generate",
        "template",
        "modules",
        "info",
        "tokenize",
        "detokenize",
        "logits",
        "perplexity",
        "embed",
    ] {
        for help in ["--help", "-h"] {
            let (code, out, err) = run(&[cmd, help]);
            assert_eq!(code, 0, "{cmd} {help}: {err}");
            assert!(out.starts_with("usage: wasmind"), "{cmd} {help}: {out}");
        }
    }
}

#[test]
fn unknown_options_missing_values_and_stray_arguments_are_errors() {
    let tiny = fixture("models/tiny/tiny-llama-F32.gguf");
    let tiny = tiny.to_str().unwrap();
    for (args, want) in [
        (vec!["chat", "--bogus"], "unknown option \"--bogus\""),
        (
            vec!["info", "--model", tiny, "--tempp", "1"],
            "unknown option \"--tempp\"",
        ),
        (vec!["info", "--model"], "--model needs a value"),
        (
            vec!["info", "--model", tiny, "extra"],
            "unexpected argument \"extra\"",
        ),
        (vec!["frobnicate"], "unknown command"),
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn out_of_range_sampler_settings_fail_before_any_model_is_loaded() {
    for (flag, value) in [
        ("--temp", "-1"),
        ("--temp", "nan"),
        ("--temp", "inf"),
        ("--top-p", "0"),
        ("--top-p", "1.5"),
        ("--min-p", "-0.1"),
        ("--repeat-penalty", "0"),
        ("--top-k", "-3"),
        ("--seed", "x"),
    ] {
        let start = std::time::Instant::now();
        // No --model: were the settings read after the model, this would fetch the default.
        let (code, _, err) = run(&["chat", flag, value]);
        assert_eq!(code, 1, "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(
            start.elapsed().as_secs() < 5,
            "{flag} {value} took {:?}",
            start.elapsed()
        );
    }
}

/// A command starts from wasmtime's cache of the compiled module instead of compiling it again
/// (about 1 s on the development machine; a cached start takes a few hundredths).
#[test]
fn a_second_start_does_not_compile_the_module_again() {
    let tiny = fixture("models/tiny/tiny-llama-F32.gguf");
    let tiny = tiny.to_str().unwrap();
    for threads in ["0", "2"] {
        let args = ["info", "--threads", threads, "--model", tiny];
        assert_eq!(run(&args).0, 0, "{args:?}");
        let best = (0..3)
            .map(|_| {
                let start = std::time::Instant::now();
                assert_eq!(run(&args).0, 0);
                start.elapsed()
            })
            .min()
            .unwrap();
        println!("wasmind info --threads {threads} on a tiny file: {best:?} (best of 3, cached)");
        assert!(best.as_secs_f64() < 0.5, "threads {threads}: {best:?}");
    }
}

/// A model larger than wasm32's 4 GiB is refused with the sizes, before it is read (the file
/// here is sparse: 5 GB of nothing).
#[test]
fn a_model_larger_than_the_memory_is_refused_before_it_is_read() {
    let path = std::env::temp_dir().join(format!("wasmind-huge-{}.gguf", std::process::id()));
    std::fs::File::create(&path)
        .unwrap()
        .set_len(5_000_000_000)
        .unwrap();
    let start = std::time::Instant::now();
    let (code, _, err) = run(&["info", "--model", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("out of memory") && err.contains("5000000000 bytes") && err.contains("4 GiB"),
        "{err}"
    );
    assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
}

/// `embed --model E.gguf` runs a BERT sentence encoder: llama.cpp's ids and (unit) vectors.
#[test]
fn embed_runs_a_gguf_sentence_encoder() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bert");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let entry = &r["models"]["tiny-bert-F16.gguf"];
    let texts = strs(&entry["texts"]);
    let input: String = texts
        .iter()
        .map(|t| serde_json::to_string(t).unwrap() + "\n")
        .collect();
    let model = dir.join("tiny-bert-F16.gguf");
    let out = wasmind_piped(
        &["embed", "--model", model.to_str().unwrap(), "--json"],
        input.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), texts.len());
    for (line, want) in lines.iter().zip(entry["F16"].as_array().unwrap()) {
        assert_eq!(line["ids"], want["ids"]);
        let v: Vec<f64> = line["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let w: Vec<f64> = want["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let nw = w.iter().map(|y| y * y).sum::<f64>().sqrt();
        let off = v
            .iter()
            .zip(&w)
            .map(|(a, b)| (a - b / nw).abs())
            .fold(0.0, f64::max);
        assert!(off < 5e-4, "{line}");
    }
}
