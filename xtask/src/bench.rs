//! `cargo xtask bench`: throughput of the real modules beside their peers, all measured in the
//! same run on the same machine, so every speed claim is a ratio against a peer.
//!
//! ```text
//! cargo xtask bench [--only llm,grammar,tokenize,embed,encoder] [--models smollm2,0.5b,1b,3b]
//!                    [--no-peers] [--gen N] [--reps N] [--threads 0,1,2,4,8]
//! ```
//!
//! Runs, one after another (never two at once: they would share the cores):
//! - `llm`: SmolLM2-135M Q4_1, one ChatML prompt, batched prefill then greedy decode of `--gen`
//!   tokens, and the time to the first token of a ~1,000-token prompt. wasmind in wasmtime
//!   (`host-tests` bin `bench`), in Node (glue/bench/bench.mjs) and in wazero (the Go package's
//!   test binary with WASMIND_BENCH=1, go/bench_test.go, where Go is installed; the three hosts
//!   run `tokenize`, `embed` and `encoder` too) for each thread count (0 = the
//!   single-threaded module); in headless Chromium (glue/bench/chromium.mjs) wasmind beside its
//!   peer wllama 2.4.0 and 3.13.0 (llama.cpp compiled to wasm, npm `@wllama/wllama`) at 0, 1, 2
//!   threads, interleaved, with the renderer's peak memory; and native llama.cpp (the prebuilt
//!   x64 binary in npm `node-llama-cpp`). `--models` runs the same measurement on each model
//!   named (default `smollm2`): `0.5b`, `1b`, `3b` are shape-real models of Qwen2.5-0.5B,
//!   Llama-3.2-1B and Llama-3.2-3B in llama.cpp's Q4_K_M mix (`1b:q4_0`, `1b:q8_0` the other
//!   types), random weights written once into target/bench-models/ by
//!   host-tests/fixtures/gen/bench_models.py; their rows go to `llm-<name>.json`, with no long
//!   prompt (wllama would take many minutes over 1,000 tokens of a 3B model).
//! - `grammar`: the same model, greedy chat replies of up to `--gen` tokens with no grammar,
//!   the JSON-object grammar and a nested JSON schema (wasmtime, 2 threads): what the grammar
//!   check and the masked draws cost (the target is >= 0.8x unconstrained decode).
//! - `tokenize`: the 631 corpus texts through the SmolLM2 tokenizer, single thread; peer: native
//!   llama.cpp's tokenizer.
//! - `embed`: Model2Vec (potion-base-8M) on the corpus and on short sentences, single thread
//!   (`embed` per text) and `embed_batch` per thread count; peers: the Rust crate `model2vec-rs`
//!   (bench-peers/m2v-rs, `RAYON_NUM_THREADS=1`) and the Python package `model2vec`.
//! - `encoder`: the sentence encoder all-MiniLM-L6-v2 (F16 GGUF, `models/fetch.py --model
//!   all-minilm-l6-v2`; skipped without it) on the first 40 corpus texts and the first 100 short
//!   sentences, `embed` per text at each thread count; peer: native llama.cpp's embedding context.
//!
//! wasmind runs from `dist/` (built first by `cargo xtask dist`) in both wasmtime and Node, so
//! both measure the same files. Every program prints one JSON object per result; they are collected into
//! `target/bench/<group>.json` and glue/bench/report.mjs prints the tables (also written to
//! `target/bench/report.md`). Peers are installed on demand: `npm ci` in glue/bench (wllama,
//! node-llama-cpp), cargo for bench-peers/m2v-rs, and `pip install model2vec` if missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cargo, go_command, status};
use xtask::workspace_root;

const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const M2V: &str = "models/potion-base-8M";
const CORPUS: &str = "reference/corpus.json";

/// The prompt every LLM engine gets (ChatML, as SmolLM2-Instruct expects; 148 tokens).
const PROMPT: &str = "<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
<|im_start|>user
Here is a short passage. The river town woke slowly: bakers lit their ovens before dawn, fishermen checked nets by lantern light, and the first ferry sounded its horn across the fog. By noon the market square was full of voices, carts and the smell of bread. Children ran between stalls while traders argued over the price of apples, wool and copper pots. In the evening the lamps came on one by one along the quay. Write a long, detailed story that continues this passage, describing the people of the town, their work, and what happens to them over one year.<|im_end|>
<|im_start|>assistant
";

/// The prompt for the time to the first token: PROMPT with its passage eleven times (about
/// 1,000 tokens with SmolLM2's vocabulary).
fn long_prompt_text() -> String {
    let passage = PROMPT
        .split_once("Here is a short passage. ")
        .and_then(|(_, rest)| rest.split_once(" Write a long"))
        .map_or("", |(p, _)| p);
    PROMPT.replacen(passage, &[passage; 11].join(" "), 1)
}

struct Options {
    groups: Vec<String>,
    models: Vec<String>,
    peers: bool,
    gen_tokens: String,
    reps: String,
    threads: String,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        groups: vec![
            "llm".into(),
            "grammar".into(),
            "tokenize".into(),
            "embed".into(),
            "encoder".into(),
        ],
        models: vec!["smollm2".into()],
        peers: true,
        gen_tokens: "128".into(),
        reps: "3".into(),
        threads: "0,1,2,4,8".into(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--only" => o.groups = value()?.split(',').map(str::to_string).collect(),
            "--models" => o.models = value()?.split(',').map(str::to_string).collect(),
            "--no-peers" => o.peers = false,
            "--gen" => o.gen_tokens = value()?,
            "--reps" => o.reps = value()?,
            "--threads" => o.threads = value()?,
            other => return Err(format!("bench: unknown option {other:?}")),
        }
    }
    Ok(o)
}

/// A test fixture (target/fixtures or $WASMIND_FIXTURES, made by `cargo xtask fixtures`, which
/// the bench runs first).
fn fixture(path: &str) -> PathBuf {
    std::env::var_os("WASMIND_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/fixtures"))
        .join(path)
}

/// A model of `--models`: SmolLM2 (the fixture), or a shape-real bench model `SIZE[:TYPE]`
/// (bench_models.py's `MODEL-TYPE`). Returns (its name in bench_models.py, or None for SmolLM2;
/// the results' file stem).
fn bench_model(spec: &str) -> Result<(Option<String>, String), String> {
    if spec == "smollm2" {
        return Ok((None, "llm".into()));
    }
    let (size, kind) = spec.split_once(':').unwrap_or((spec, "q4_k_m"));
    let model = match size {
        "0.5b" => "qwen2.5-0.5b",
        "1b" => "llama-3.2-1b",
        "3b" => "llama-3.2-3b",
        _ => "",
    };
    let kind = match kind.to_ascii_lowercase().as_str() {
        "q4_k_m" => "Q4_K_M",
        "q4_0" => "Q4_0",
        "q8_0" => "Q8_0",
        _ => "",
    };
    if model.is_empty() || kind.is_empty() {
        return Err(format!(
            "bench: unknown model {spec:?} (smollm2, or 0.5b, 1b, 3b with an optional \
             :q4_k_m, :q4_0 or :q8_0)"
        ));
    }
    let name = format!("{model}-{kind}");
    Ok((Some(name.clone()), format!("llm-{name}")))
}

/// Runs a bench program; its stdout lines that are JSON objects are results. A failing peer is
/// reported and recorded, not fatal (the table then says it is missing).
fn collect(label: &str, cmd: &mut Command, results: &mut Vec<String>) {
    println!("--> {label}");
    let out = match cmd.stderr(std::process::Stdio::inherit()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("    cannot start: {e}");
            results.push(format!(
                "{{\"engine\":{label:?},\"error\":\"cannot start\"}}"
            ));
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut got = 0;
    for line in text.lines().map(str::trim).filter(|l| l.starts_with('{')) {
        println!(
            "    {}",
            if line.len() > 200 {
                &line[..line.floor_char_boundary(200)]
            } else {
                line
            }
        );
        results.push(line.to_string());
        got += 1;
    }
    if !out.status.success() || got == 0 {
        eprintln!("    {label}: exit {} with {got} results", out.status);
        results.push(format!(
            "{{\"engine\":{label:?},\"error\":\"exit {}\"}}",
            out.status
        ));
    }
}

/// What every LLM measurement shares: the options, the programs and the prompt.
struct LlmRun<'a> {
    o: &'a Options,
    root: &'a Path,
    bench_bin: &'a Path,
    dist: &'a Path,
    prompt: &'a Path,
}

impl LlmRun<'_> {
    /// One model: wasmind in wasmtime and Node, wasmind and wllama in Chromium, native llama.cpp;
    /// the time to the first token of `long_prompt` where one is given.
    fn measure(&self, model: &Path, long_prompt: Option<&Path>, results: &mut Vec<String>) {
        let o = self.o;
        let node = |script: &str| {
            let mut c = Command::new("node");
            c.current_dir(self.root).arg(format!("glue/bench/{script}"));
            c
        };
        // wllama is slow enough that 2 timed rounds per setting keep the run short.
        let wllama_reps = o
            .reps
            .parse::<u32>()
            .map_or(o.reps.clone(), |r| r.min(2).to_string());
        let common = |c: &mut Command, reps: &str| {
            c.arg("--model")
                .arg(model)
                .arg("--prompt-file")
                .arg(self.prompt);
            c.args(["--gen", &o.gen_tokens, "--reps", reps]);
        };
        let long = |c: &mut Command| {
            if let Some(l) = long_prompt {
                c.arg("--long-prompt-file").arg(l);
            }
        };
        // wasmind's two hosts take the same arguments.
        for (label, mut c) in [
            ("wasmind in wasmtime", Command::new(self.bench_bin)),
            ("wasmind in Node", node("bench.mjs")),
        ] {
            c.arg("llm")
                .args(["--threads", &o.threads])
                .arg("--dist")
                .arg(self.dist);
            long(&mut c);
            common(&mut c, &o.reps);
            collect(label, &mut c, results);
        }
        // Where users run it: wasmind and wllama side by side in Chromium, interleaved.
        let mut c = node("chromium.mjs");
        // wasmind twice: the build the glue picks (relaxed SIMD) and the SIMD128 one.
        let engines = if o.peers {
            "wasmind,wasmind-simd128,wllama2,wllama3"
        } else {
            "wasmind,wasmind-simd128"
        };
        c.args(["--threads", "0,1,2", "--engines", engines]);
        long(&mut c);
        common(&mut c, &wllama_reps);
        collect("Chromium", &mut c, results);
        if o.peers {
            let mut c = node("native.mjs");
            // Not past the cores: llama.cpp's spinning thread pool collapses when
            // oversubscribed (measured here: 4 threads on 2 cores, one rep of 148 + 32
            // tokens took 2 min 14 s), and 8 threads did not finish in 15 minutes.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let native_threads: Vec<String> = [1, 2, 4, 8]
                .iter()
                .filter(|&&t| t <= cores.max(1))
                .map(|t| t.to_string())
                .collect();
            c.arg("llm").args(["--threads", &native_threads.join(",")]);
            common(&mut c, &o.reps);
            collect("native llama.cpp", &mut c, results);
        }
    }
}

/// all-MiniLM-L6-v2 as `models/fetch.py --model all-minilm-l6-v2` writes it (a fixture).
fn minilm() -> Option<PathBuf> {
    Some(fixture("models/all-MiniLM-L6-v2-F16.gguf")).filter(|p| p.is_file())
}

fn write_json(path: &Path, results: &[String]) -> Result<(), String> {
    let body = format!("[\n{}\n]\n", results.join(",\n"));
    std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let models = o
        .models
        .iter()
        .map(|m| bench_model(m))
        .collect::<Result<Vec<_>, _>>()?;
    let root = workspace_root();
    let out_dir = root.join("target/bench");
    let inputs = out_dir.join("inputs");
    std::fs::create_dir_all(&inputs).map_err(|e| format!("{}: {e}", inputs.display()))?;
    super::fixtures()?;
    let model = fixture(SMOLLM2);
    // The shape-real bench models, written once (a second run only checks their stamps).
    let bench_models = root.join("target/bench-models");
    let generate: Vec<&String> = models.iter().filter_map(|(n, _)| n.as_ref()).collect();
    if o.groups.iter().any(|g| g == "llm") && !generate.is_empty() {
        status(
            "bench models (host-tests/fixtures/gen/bench_models.py)",
            Command::new("python3")
                .current_dir(&root)
                .arg("host-tests/fixtures/gen/bench_models.py")
                .arg(&bench_models)
                .arg(fixture("models/vocab/vocab-bpe-smollm.gguf"))
                .args(generate),
        )?;
    }
    let m2v = fixture(M2V);
    let corpus = fixture(CORPUS);

    // The modules (dist/ for Node) and the wasmtime bench program.
    super::dist()?;
    status(
        "build host-tests bench",
        cargo(&root).args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "host-tests",
            "--bin",
            "bench",
        ]),
    )?;
    // Where cargo put it: CARGO_TARGET_DIR when set (e.g. a target dir shared with other trees).
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bench_bin = target.join("release/bench");
    let dist = root.join("dist");

    // Inputs every engine reads: the prompt, the corpus, short sentences cut from the corpus.
    let prompt = inputs.join("prompt.txt");
    std::fs::write(&prompt, PROMPT).map_err(|e| e.to_string())?;
    let long_prompt = inputs.join("long-prompt.txt");
    std::fs::write(&long_prompt, long_prompt_text()).map_err(|e| e.to_string())?;
    let short = inputs.join("short.json");
    status(
        "bench inputs",
        Command::new("node")
            .current_dir(&root)
            .args(["glue/bench/report.mjs", "inputs"])
            .arg(&corpus)
            .arg(&short),
    )?;

    let bench_dir = root.join("glue/bench");
    if o.peers && !bench_dir.join("node_modules/@wllama/wllama").exists() {
        status(
            "npm ci (glue/bench: wllama, node-llama-cpp)",
            Command::new("npm")
                .current_dir(&bench_dir)
                .args(["ci", "--no-audit", "--no-fund"]),
        )?;
    }
    let m2v_peer = root.join("target/bench-peers/release/m2v-rs-peer");
    if o.peers && o.groups.iter().any(|g| g == "embed") {
        status(
            "build bench-peers/m2v-rs (model2vec-rs)",
            cargo(&root.join("bench-peers/m2v-rs"))
                .args(["build", "--release", "--quiet", "--target-dir"])
                .arg(root.join("target/bench-peers")),
        )?;
        let have_py = Command::new("python3")
            .args(["-c", "import model2vec"])
            .status()
            .is_ok_and(|s| s.success());
        if !have_py {
            let _ = Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "model2vec==0.10.0"])
                .status();
        }
    }
    let node = |script: &str| {
        let mut c = Command::new("node");
        c.current_dir(&root).arg(format!("glue/bench/{script}"));
        c
    };

    // The Go package's test binary in its bench mode (go/bench_test.go), where Go is installed.
    let go_bench = out_dir.join("wasmind-go.test");
    let go = go_command().filter(|go| {
        status(
            "build the Go bench (go test -c in go/)",
            Command::new(go)
                .current_dir(root.join("go"))
                .args(["test", "-c", "-o"])
                .arg(&go_bench),
        )
        .is_ok()
    });
    if go.is_none() {
        println!("--> wasmind in wazero (Go): SKIPPED, `go` is not installed (Go >= 1.25)");
    }

    // wasmind's hosts take the same arguments: the wasmtime bench binary, glue/bench/bench.mjs
    // and the Go bench (wazero).
    let wasmind_hosts = || {
        let mut hosts = vec![
            ("wasmind in wasmtime", Command::new(&bench_bin)),
            ("wasmind in Node", node("bench.mjs")),
        ];
        if go.is_some() {
            let mut c = Command::new(&go_bench);
            c.env("WASMIND_BENCH", "1");
            hosts.push(("wasmind in wazero (Go)", c));
        }
        hosts
    };

    for group in &o.groups {
        let mut results = Vec::new();
        match group.as_str() {
            "llm" => {
                for (name, stem) in &models {
                    let (model, long_prompt) = match name {
                        None => (model.clone(), Some(&long_prompt)),
                        Some(n) => (bench_models.join(format!("{n}.gguf")), None),
                    };
                    println!("--> llm: {}", model.display());
                    let mut results = Vec::new();
                    let run = LlmRun {
                        o: &o,
                        root: &root,
                        bench_bin: &bench_bin,
                        dist: &dist,
                        prompt: &prompt,
                    };
                    run.measure(&model, long_prompt.map(PathBuf::as_path), &mut results);
                    write_json(&out_dir.join(format!("{stem}.json")), &results)?;
                }
                continue;
            }
            "grammar" => {
                // Decode with and without grammars (wasmtime only: the check is in the module).
                let mut c = Command::new(&bench_bin);
                c.arg("grammar")
                    .arg("--model")
                    .arg(&model)
                    .args(["--gen", &o.gen_tokens, "--reps", &o.reps, "--threads", "2"])
                    .arg("--dist")
                    .arg(&dist);
                collect("wasmind in wasmtime", &mut c, &mut results);
            }
            "tokenize" => {
                for (label, mut c) in wasmind_hosts() {
                    c.arg("tokenize")
                        .arg("--model")
                        .arg(&model)
                        .arg("--texts")
                        .arg(&corpus)
                        .arg("--dist")
                        .arg(&dist);
                    collect(label, &mut c, &mut results);
                }
                if o.peers {
                    let mut c = node("native.mjs");
                    c.arg("tokenize")
                        .arg("--model")
                        .arg(&model)
                        .arg("--texts")
                        .arg(&corpus);
                    collect("native llama.cpp", &mut c, &mut results);
                }
            }
            "embed" => {
                for (set, texts) in [("corpus", &corpus), ("short", &short)] {
                    for (label, mut c) in wasmind_hosts() {
                        c.arg("embed")
                            .arg("--model")
                            .arg(&m2v)
                            .arg("--texts")
                            .arg(texts)
                            .args(["--set", set, "--threads", "0,1,2"])
                            .arg("--dist")
                            .arg(&dist);
                        collect(label, &mut c, &mut results);
                    }
                    if o.peers {
                        let mut c = Command::new(&m2v_peer);
                        c.env("RAYON_NUM_THREADS", "1")
                            .arg("--model")
                            .arg(&m2v)
                            .arg("--texts")
                            .arg(texts)
                            .args(["--set", set]);
                        collect("model2vec-rs", &mut c, &mut results);
                        let mut c = Command::new("python3");
                        c.current_dir(&root).arg("bench-peers/model2vec_py.py");
                        c.envs([
                            ("RAYON_NUM_THREADS", "1"),
                            ("TOKENIZERS_PARALLELISM", "false"),
                            ("OMP_NUM_THREADS", "1"),
                        ]);
                        c.arg("--model")
                            .arg(&m2v)
                            .arg("--texts")
                            .arg(texts)
                            .args(["--set", set]);
                        collect("model2vec (Python)", &mut c, &mut results);
                    }
                }
            }
            "encoder" => {
                let Some(minilm) = minilm() else {
                    println!(
                        "--> encoder: SKIPPED, no all-MiniLM-L6-v2-F16.gguf in the fixtures \
                         (cargo xtask fixtures)"
                    );
                    continue;
                };
                // Subsets: the encoder embeds tens of short sentences a second where Model2Vec
                // embeds hundreds of thousands (measured), and every setting runs at least four
                // passes.
                let subsets = [("corpus", &corpus, 40), ("short", &short, 100)];
                for (set, texts, n) in subsets {
                    let subset = inputs.join(format!("encoder-{set}.json"));
                    status(
                        "bench inputs",
                        node("report.mjs")
                            .arg("first")
                            .arg(texts)
                            .arg(n.to_string())
                            .arg(&subset),
                    )?;
                    for (label, mut c) in wasmind_hosts() {
                        c.arg("embed")
                            .arg("--model")
                            .arg(&minilm)
                            .arg("--texts")
                            .arg(&subset)
                            .args(["--set", set, "--threads", "0,1,2"])
                            .arg("--dist")
                            .arg(&dist);
                        collect(label, &mut c, &mut results);
                    }
                    if o.peers {
                        let mut c = node("native.mjs");
                        c.arg("embed")
                            .arg("--model")
                            .arg(&minilm)
                            .arg("--texts")
                            .arg(&subset)
                            .args(["--set", set, "--threads", "1,2"]);
                        collect("native llama.cpp", &mut c, &mut results);
                    }
                }
            }
            other => {
                return Err(format!(
                    "bench: unknown group {other:?} (llm, grammar, tokenize, embed, encoder)"
                ));
            }
        }
        write_json(&out_dir.join(format!("{group}.json")), &results)?;
    }
    println!();
    // The tables, after the modules' sizes (raw and gzipped) of the dist/ just measured.
    status(
        "report",
        node("report.mjs").arg("report").arg(&out_dir).arg(&dist),
    )
}
