//! Shared helpers of the integration tests: paths to ../shared and reference files.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn shared(path: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared")).join(path)
}

pub fn json(path: &str) -> serde_json::Value {
    let p = shared(path);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

pub fn u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

pub const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The `wasmind` command line (without $WASMIND_MODEL: tests never download).
pub fn wasmind_cmd() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_wasmind"));
    c.env_remove("WASMIND_MODEL");
    c
}

/// Runs `wasmind ARGS` with `input` on stdin; its status and output.
pub fn wasmind_piped(args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = wasmind_cmd()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}
