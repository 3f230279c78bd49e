//! Test helpers shared by the unit tests (compiled for `cargo test` only).
//!
//! The fixtures (tiny models, vocabularies, Model2Vec folders, llama.cpp's and model2vec's
//! reference outputs) are in `target/fixtures/`, made and checked by sha256 by
//! `cargo xtask fixtures` (`host-tests/fixtures/fixtures.py`, which `cargo xtask test` runs
//! first); `WASMIND_FIXTURES` names another folder. A missing file fails the test with its path
//! and the command that makes it.

use std::path::PathBuf;
use std::string::String;
use std::vec::Vec;

/// The fixtures folder: `$WASMIND_FIXTURES`, else `target/fixtures` of this checkout. The
/// checkout is taken at run time from `CARGO_MANIFEST_DIR` when cargo sets it (so a binary reused
/// from another checkout's target dir reads this checkout's fixtures).
pub fn fixtures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WASMIND_FIXTURES") {
        return PathBuf::from(dir);
    }
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    root.join("target/fixtures")
}

/// The path of fixture `rel` (e.g. `models/tiny/tiny-llama-F32.gguf`).
pub fn fixture(rel: &str) -> PathBuf {
    fixtures_dir().join(rel)
}

/// The bytes of fixture `rel`, or a panic that names the file and how to make it.
pub fn read_fixture(rel: &str) -> Vec<u8> {
    let path = fixture(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}", missing(&path, &e)))
}

/// The message for a missing fixture.
pub fn missing(path: &std::path::Path, e: &std::io::Error) -> String {
    std::format!(
        "test fixture {}: {e}. Run `cargo xtask fixtures` (`cargo xtask test` runs it first): it \
         makes every file the tests read, sha256-checked (host-tests/fixtures/manifest.tsv).",
        path.display()
    )
}

/// CPU time of this thread in seconds (`/proc/thread-self/schedstat`, also readable from
/// inside Node's WASI with `/` preopened), so that a busy machine does not skew the
/// throughput figures of the `--ignored` benches; 0 where it cannot be read.
pub fn cpu_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace()
        .next()
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1e9
}

/// A JSON array of ids (reference files) as `u32`s.
pub fn u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// xorshift64*: the unit tests' source of pseudo-random inputs (hostile bytes, random blocks).
/// The seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}
