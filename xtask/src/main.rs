//! `cargo xtask <task>`: the project's build and test entry points (alias in .cargo/config.toml).
//!
//! - `dist`: builds `dist/wasmind.wasm` (single-threaded) and `dist/wasmind-mt.wasm` (threaded).
//! - `lint`: `cargo fmt --check` and clippy with `-D warnings` on every target the crate builds
//!   for (host, both wasm modules, the wasip1 tests).
//! - `test`: lint, then every test: native unit tests, the same unit tests inside wasm (Node
//!   WASI), the wasmtime host tests, and the Node and Chromium tests of the glue.
//! - `bench`: throughput of the modules beside their peers (wllama, llama.cpp, model2vec-rs,
//!   model2vec), measured in one run; tables and `target/bench/*.json` (src/bench.rs).

mod bench;

use std::path::Path;
use std::process::{Command, ExitCode};

use xtask::{MODULES, build_all_into, require_target, workspace_root};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("dist") => dist(),
        Some("lint") => lint(),
        Some("test") => test(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask dist | lint | test | bench [--only llm,grammar,tokenize,embed] [--no-peers]"
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

fn run(step: &str, cmd: &mut Command) -> Result<(), String> {
    println!("\n==> {step}");
    let status = cmd
        .status()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{step}: failed ({status})"))
    }
}

fn cargo(root: &Path) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root);
    c
}

/// Formatting and clippy (`-D warnings`) for the host crates, both wasm modules (their target
/// features change which code compiles) and the wasip1 unit tests.
fn lint() -> Result<(), String> {
    let root = workspace_root();
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

fn test(extra: &[String]) -> Result<(), String> {
    let root = workspace_root();
    println!("==> cargo xtask lint");
    lint()?;
    println!("==> cargo xtask dist");
    dist()?;
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
    run(
        "host tests (wasmtime)",
        cargo(&root)
            .args(["test", "--release", "--package", "host-tests"])
            .args(extra),
    )?;
    let node_tests = root.join("glue/test");
    if node_tests.is_dir() {
        // The browser test drives Chromium with playwright-core (package.json); install it on a
        // fresh clone. Chromium itself comes from the system (`apt-get install chromium`).
        if !root.join("node_modules/playwright-core").is_dir() {
            run("npm ci", Command::new("npm").current_dir(&root).arg("ci"))?;
        }
        run(
            "glue tests (Node)",
            Command::new("node")
                .current_dir(&root)
                .args(["--test", "glue/test/"]),
        )?;
    }
    println!("\nall tests passed");
    Ok(())
}
