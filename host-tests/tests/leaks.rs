//! Long runs: load -> chat -> embed -> unload cycles return the module's heap to where it
//! started (within 1 MiB), in the single-threaded module and with helpers; and replies with
//! random seeds, thread counts and stop requests are the single-threaded module's reply with
//! the same seed (or a prefix of it, when stopped). The short versions run in the suite;
//! `cargo xtask soak` runs them long (`WASMIND_SOAK_CYCLES=100`, `WASMIND_SOAK_REPLIES=1000`).

mod common;

use common::*;
use host_tests::{E_END, E_STOPPED, ROLE_USER, Sampling, Wasmind};

/// Most a cycle may leave behind.
const LEAK_TOLERANCE: u32 = 1 << 20;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cycles() -> usize {
    setting("WASMIND_SOAK_CYCLES", 3)
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

#[test]
fn replies_are_the_same_for_any_thread_count_seed_and_stop() {
    const PROMPTS: [&str; 4] = [
        "Write a short poem about the sea.",
        "What is the capital of France?",
        "List three fruits.",
        "Tell me a story about a dragon.",
    ];
    let replies = setting("WASMIND_SOAK_REPLIES", 12);
    let open = |threads| {
        let mut w = Wasmind::with_threads(threads).unwrap();
        w.load_model_file(&shared(SMOLLM2), 512).unwrap();
        w
    };
    let mut reference = open(0);
    let mut threaded: Vec<Wasmind> = (1..=4).map(open).collect();
    let mut rng = XorShift64(0x9E37_79B9_7F4A_7C15);
    let mut next = move || rng.next();
    let (mut stopped, mut whole) = (0, 0);
    for i in 0..replies {
        let (seed, threads) = (next() % 1_000_000, 1 + next() % 4);
        let stop_after = match next() % 3 {
            0 => Some(1 + next() % 6),
            _ => None,
        };
        let prompt = PROMPTS[i % PROMPTS.len()];
        let reply = |w: &mut Wasmind, stop_after: Option<u64>| {
            w.chat_reset().unwrap();
            w.sampler_set(&Sampling {
                temperature: 0.8,
                seed,
                ..Sampling::default()
            })
            .unwrap();
            w.chat_add(ROLE_USER, prompt).unwrap();
            let stop = std::sync::atomic::AtomicBool::new(false);
            let mut pieces = 0;
            w.chat_reply_stoppable(24, &stop, |_| {
                pieces += 1;
                if Some(pieces) == stop_after {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            })
            .unwrap()
            .unwrap()
        };
        let want = reply(&mut reference, None);
        let got = reply(&mut threaded[threads as usize - 1], stop_after);
        let what =
            format!("reply {i}: seed {seed}, {threads} threads, stop after {stop_after:?} pieces");
        if got.end.code == E_STOPPED {
            stopped += 1;
            assert!(
                want.ids.starts_with(&got.ids),
                "{what}: {:?} is not a prefix of {:?}",
                got.ids,
                want.ids
            );
        } else {
            whole += 1;
            assert_eq!(got.end.code, want.end.code, "{what}");
            assert!(got.end.code == E_END || got.ids.len() == 24, "{what}");
            assert_eq!(got.ids, want.ids, "{what}");
        }
    }
    println!(
        "{replies} replies: {whole} whole and equal to the single-threaded module's, {stopped} stopped and a prefix of it"
    );
}
