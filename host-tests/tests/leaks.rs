//! Memory comes back: load -> chat -> embed -> unload cycles return the module's heap to where
//! it started (within 1 MiB), in the single-threaded module and with helpers. The short version
//! runs in the suite; `cargo xtask soak` runs it with `WASMIND_SOAK_CYCLES=100`.

mod common;

use common::*;
use host_tests::{ROLE_USER, Sampling, Wasmind};

/// Most a cycle may leave behind.
const LEAK_TOLERANCE: u32 = 1 << 20;

fn cycles() -> usize {
    std::env::var("WASMIND_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

#[test]
fn load_chat_embed_unload_cycles_give_the_memory_back() {
    let texts: Vec<&[u8]> = vec![
        b"a sentence to embed",
        b"another one",
        "déjà vu 😀".as_bytes(),
    ];
    for threads in [0, 2] {
        let mut w = Wasmind::with_threads(threads).unwrap();
        let start = w.heap_in_use().unwrap();
        let mut after = Vec::new();
        for cycle in 0..cycles() {
            w.load_model_file(&shared(SMOLLM2), 256).unwrap();
            w.sampler_set(&Sampling {
                seed: cycle as u64,
                ..Sampling::default()
            })
            .unwrap();
            w.chat_add(ROLE_USER, "What is the capital of France?")
                .unwrap();
            let reply = w.chat_reply(8, |_| {}).unwrap().unwrap();
            assert!(!reply.ids.is_empty());
            let dim = w
                .load_embedder_dir(&shared("models/m2v-minilm-256"))
                .unwrap();
            w.embed(texts[0], dim).unwrap();
            w.embed_batch(&texts, dim).unwrap();
            assert!(
                w.heap_in_use().unwrap() > start + 90_000_000,
                "the model is in use"
            );
            w.unload_model().unwrap();
            w.unload_embedder().unwrap();
            let now = w.heap_in_use().unwrap();
            assert!(
                now <= start + LEAK_TOLERANCE,
                "threads {threads}, cycle {cycle}: {now} bytes in use after unloading, {start} before the first load"
            );
            after.push(now);
        }
        // What the first cycle leaves (buffers kept for the next call, sized by what it did) is
        // all that stays: later cycles stay within 64 KiB of it, so a leak of a few hundred
        // bytes a cycle shows in a long soak.
        assert!(
            after.iter().all(|&a| a.abs_diff(after[0]) <= 64 << 10),
            "threads {threads}: the heap grows from cycle to cycle: {after:?}"
        );
        println!(
            "threads {threads}: heap in use {start} bytes at the start, after each cycle {after:?}"
        );
    }
}
