//! Test helpers shared by the unit tests (compiled for `cargo test` only).
//!
//! The fixtures are the project's shared material in `../shared` beside the checkout (models,
//! llama.cpp's and model2vec's reference outputs); tests never copy them into the repository.
//! A missing file fails the test with its path and where it comes from.

use std::path::PathBuf;
use std::string::String;
use std::vec::Vec;

/// `../shared` beside the checkout. Taken at run time from `CARGO_MANIFEST_DIR` when cargo sets
/// it (so a binary reused from another checkout's target dir reads this checkout's fixtures).
pub fn shared_dir() -> PathBuf {
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    root.join("../shared")
}

/// The path of `rel` inside `../shared` (e.g. `models/tiny/tiny-llama-F32.gguf`).
pub fn shared(rel: &str) -> PathBuf {
    shared_dir().join(rel)
}

/// The bytes of `../shared/<rel>`, or a panic that says what is missing and where it comes from.
pub fn read_shared(rel: &str) -> Vec<u8> {
    let path = shared(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}", missing(&path, &e)))
}

/// The message for a missing fixture.
pub fn missing(path: &std::path::Path, e: &std::io::Error) -> String {
    std::format!(
        "test fixture {}: {e}. The unit tests read the project's shared models and references \
         from ../shared beside the checkout (see ../shared/README.md and the README's 'Tests' \
         section).",
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
