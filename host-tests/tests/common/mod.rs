//! Shared helpers of the integration tests: fixture paths and reference files.
#![allow(dead_code)]

use std::path::PathBuf;

/// The fixtures folder: `$WASMIND_FIXTURES`, else this checkout's `target/fixtures`, made and
/// sha256-checked by `cargo xtask fixtures` (which `cargo xtask test` runs first).
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("WASMIND_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/fixtures"))
        })
}

/// The path of fixture `path` (e.g. `models/tiny/tiny-llama-Q8_0.gguf`).
pub fn fixture(path: &str) -> PathBuf {
    fixtures_dir().join(path)
}

/// The bytes of fixture `path`, or a panic that names the file and how to make it.
pub fn read(path: &str) -> Vec<u8> {
    let p = fixture(path);
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "test fixture {}: {e}. Run `cargo xtask fixtures` (`cargo xtask test` runs it \
             first): it makes every file the tests read, sha256-checked \
             (host-tests/fixtures/manifest.tsv).",
            p.display()
        )
    })
}

/// Reports a test (or part of one) that could not run: a SKIPPED line in its output and in
/// `$WASMIND_SKIP_LOG`, which `cargo xtask test` sets and prints in its summary, so a skip is
/// never a silent `ok`.
pub fn skipped(what: &str, why: &str) {
    println!("SKIPPED {what}: {why}");
    if let Some(log) = std::env::var_os("WASMIND_SKIP_LOG") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("the skip log opens");
        writeln!(f, "{what}: {why}").expect("the skip log takes a line");
    }
}

pub fn json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&read(path)).unwrap()
}

/// A JSON array of strings.
pub fn strs(v: &serde_json::Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
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

/// llama.cpp's batched and one-token runs differ at near-ties: compare argmaxes only where its
/// top-two logit margin is at least this.
pub const DECISIVE_MARGIN: f64 = 0.5;

/// llama.cpp's top-two logit margin at a reference step (`{"ids": top-5, "logits": top-5}`).
pub fn margin(step: &serde_json::Value) -> f64 {
    let l = step["logits"].as_array().unwrap();
    l[0].as_f64().unwrap() - l[1].as_f64().unwrap()
}

/// Runs `prompt + reply` (teacher-forced along llama.cpp's reply) and checks our argmax
/// against llama.cpp's at every decisive step (`steps[i]` is the reply's position `i`).
/// Returns the decisive steps checked, all of which agree (else it panics, naming `what`).
pub fn teacher_forced_argmax(
    w: &mut wasmind_host::Wasmind,
    prompt: &[u32],
    reply: &[u32],
    steps: &[serde_json::Value],
    what: &serde_json::Value,
) -> usize {
    w.reset().unwrap();
    let seq: Vec<u32> = prompt.iter().chain(reply).copied().collect();
    let rows = w.prefill_logits(&seq).unwrap();
    let mut decisive = 0;
    for (i, step) in steps.iter().enumerate() {
        if margin(step) >= DECISIVE_MARGIN {
            decisive += 1;
            let got = argmax(&rows[prompt.len() - 1 + i]) as u64;
            assert_eq!(got, step["ids"][0].as_u64().unwrap(), "{what:?} step {i}");
        }
    }
    decisive
}

/// `wasmind generate --model SmolLM2 ARGS… --json`: its JSON output.
pub fn generate_json(args: &[&str]) -> serde_json::Value {
    let out = wasmind_cmd()
        .args(["generate", "--model", fixture(SMOLLM2).to_str().unwrap()])
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    println!("{v}");
    v
}

/// Twenty short questions: a conversation that outgrows a small context (chat, leaks).
pub const QUESTIONS: [&str; 20] = [
    "Hi! Who are you?",
    "What is the capital of France?",
    "Name three fruits.",
    "What is 2 + 2?",
    "Tell me a fun fact about cats.",
    "What color is the sky?",
    "Write one sentence about the ocean.",
    "What is the opposite of hot?",
    "Name a planet.",
    "How many days are in a week?",
    "What do bees make?",
    "Say hello in Spanish.",
    "What is water made of?",
    "Name a musical instrument.",
    "What is the largest animal?",
    "Give me a word that rhymes with cat.",
    "What season comes after winter?",
    "Name a famous painter.",
    "What is the boiling point of water?",
    "Thank you, goodbye!",
];
/// The system message the long conversations start with.
pub const SYSTEM: &str = "You are a helpful assistant. Keep answers short.";

pub const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The `wasmind` command line (without $WASMIND_MODEL: tests never download).
pub fn wasmind_cmd() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_wasmind-under-test"));
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

/// xorshift64 (shifts 13, 7, 17): the tests' source of pseudo-random inputs. The seed must not
/// be 0.
pub struct XorShift64(pub u64);

impl XorShift64 {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// Ends the test process with a message if the test that holds it is still running after
/// `limit`: a hang in a long test (a soak, a lost helper) must fail, not stall the suite.
/// Dropping the guard disarms it.
pub struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    pub fn new(what: &'static str, limit: std::time::Duration) -> Watchdog {
        use std::sync::atomic::Ordering;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = done.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < limit {
                if seen.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            eprintln!("{what}: still running after {limit:?}; a hang fails the run");
            std::process::exit(101);
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}
