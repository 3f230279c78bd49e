//! Long runs: load -> chat -> embed -> unload cycles return the module's heap to where it
//! started (within 1 MiB), in the single-threaded module and with helpers; and replies with
//! random seeds, thread counts and stop requests are the single-threaded module's reply with
//! the same seed (or a prefix of it, when stopped); and a small context filled and refilled:
//! with turn dropping the conversation goes on, each reply after a refill the one a fresh
//! engine gives for the conversation kept, and without it every fill is reported as
//! CONTEXT_FULL and a reset recovers. The short versions run in the suite; `cargo xtask soak`
//! runs them long (`WASMIND_SOAK_CYCLES=100`, `WASMIND_SOAK_REPLIES=500`,
//! `WASMIND_SOAK_REFILLS=50`).

mod common;

use common::*;
use wasmind_host::{
    CHAT_DROP_OLDEST, E_CONTEXT_FULL, E_END, E_STOPPED, ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_USER,
    Sampling, Wasmind,
};

/// Most a cycle may leave behind.
const LEAK_TOLERANCE: u32 = 1 << 20;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How long a test of `units` cycles, replies or turns may run before it counts as a hang:
/// generous (a loaded 2-core machine ran 500 replies in 26 minutes), 2 minutes + 10 s a unit.
fn limit(units: usize) -> std::time::Duration {
    std::time::Duration::from_secs(120 + 10 * units as u64)
}

fn cycles() -> usize {
    setting("WASMIND_SOAK_CYCLES", 3)
}

#[test]
fn load_chat_embed_unload_cycles_give_the_memory_back() {
    let _hang = Watchdog::new("load/unload cycles", limit(2 * cycles()));
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
            w.load_model_file(&fixture(SMOLLM2), 256).unwrap();
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
                .load_embedder_dir(&fixture("models/potion-base-8M"))
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
    let _hang = Watchdog::new("replies", limit(2 * setting("WASMIND_SOAK_REPLIES", 12)));
    const PROMPTS: [&str; 4] = [
        "Write a short poem about the sea.",
        "What is the capital of France?",
        "List three fruits.",
        "Tell me a story about a dragon.",
    ];
    let replies = setting("WASMIND_SOAK_REPLIES", 12);
    let open = |threads| {
        let mut w = Wasmind::with_threads(threads).unwrap();
        w.load_model_file(&fixture(SMOLLM2), 512).unwrap();
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

/// The small context the refill tests fill, and how often (`WASMIND_SOAK_REFILLS`).
const REFILL_CONTEXT: u32 = 256;

/// A request for a reply longer than the room the context has left.
const LONG: &str = "Write a long story about a dragon who learns to sail.";

fn refills() -> usize {
    setting("WASMIND_SOAK_REFILLS", 5)
}

fn smollm2(threads: u32) -> Wasmind {
    let mut w = Wasmind::with_threads(threads).unwrap();
    w.load_model_file(&fixture(SMOLLM2), REFILL_CONTEXT)
        .unwrap();
    w
}

/// The heap stays within `tolerance` of where the first figure put it.
fn assert_flat(what: &str, heap: &[u32], tolerance: u32) {
    let (lo, hi) = (heap.iter().min().unwrap(), heap.iter().max().unwrap());
    assert!(hi - lo <= tolerance, "{what}: the heap moves: {heap:?}");
}

#[test]
fn a_context_refilled_by_dropping_turns_replies_as_a_fresh_engine_would() {
    let _hang = Watchdog::new("refills with dropping", limit(6 * refills()));
    let mut w = smollm2(2);
    w.chat_set_options(CHAT_DROP_OLDEST).unwrap();
    w.chat_add(ROLE_SYSTEM, SYSTEM).unwrap();
    let mut fresh = smollm2(0);
    // The conversation after the system message, as the module should hold it.
    let mut kept: Vec<(u32, String)> = Vec::new();
    let (mut dropped, mut refilled, mut full_replies, mut heap) = (0, 0, 0, Vec::new());
    let mut turn = 0;
    while refilled < refills() {
        // Now and then a long reply without a limit: it may fill the cache itself.
        let (question, max_tokens) = match turn % 5 {
            4 => (LONG, 0),
            _ => (QUESTIONS[turn % QUESTIONS.len()], 32),
        };
        let sampling = Sampling {
            seed: turn as u64,
            ..Sampling::default()
        };
        w.sampler_set(&sampling).unwrap();
        w.chat_add(ROLE_USER, question).unwrap();
        kept.push((ROLE_USER, question.into()));
        let what = format!("turn {turn} (refill {refilled}, {question:?})");
        let r = w
            .chat_reply(max_tokens, |_| {})
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!r.ids.is_empty(), "{what}: no reply");
        assert!(
            r.end.code == E_END || r.end.code == E_CONTEXT_FULL,
            "{what}: {:?}",
            r.end
        );
        full_replies += usize::from(r.end.code == E_CONTEXT_FULL);
        assert!(r.stats["kv_tokens"].as_u64().unwrap() <= u64::from(REFILL_CONTEXT));
        let now = r.stats["dropped_messages"].as_u64().unwrap() as usize;
        if now > dropped {
            // Whole turns went, oldest first: a fresh engine given what is left reads the same
            // ids and, with the same seed, writes the same reply.
            kept.drain(..now - dropped);
            assert_eq!(kept[0].0, ROLE_USER, "{what}: a turn was cut in the middle");
            dropped = now;
            refilled += 1;
            fresh.chat_reset().unwrap();
            fresh.sampler_set(&sampling).unwrap();
            fresh.chat_add(ROLE_SYSTEM, SYSTEM).unwrap();
            for (role, text) in &kept {
                fresh.chat_add(*role, text).unwrap();
            }
            let want = fresh.chat_reply(max_tokens, |_| {}).unwrap().unwrap();
            assert_eq!(r.prompt_ids, want.prompt_ids, "{what}: the ids kept");
            assert_eq!(r.ids, want.ids, "{what}: the reply");
            assert_eq!(r.end.code, want.end.code, "{what}");
            heap.push(w.heap_in_use().unwrap());
        }
        kept.push((ROLE_ASSISTANT, String::from_utf8(r.text).unwrap()));
        turn += 1;
    }
    // Dropping re-reads the kept conversation, replies included, and the tokenizer remembers
    // the words it meets (a cache bounded at 8,192 words, well under 1 MiB): the heap grows
    // by a few KiB per refill while the cache fills, and never past that bound.
    assert_flat("dropping turns", &heap, LEAK_TOLERANCE);
    println!(
        "dropping turns: {refilled} refills in {turn} turns ({dropped} messages dropped, {full_replies} replies ended by a full cache), each reply after a refill equal to a fresh engine's; heap at each refill {heap:?}"
    );
}

#[test]
fn a_full_context_is_reported_every_time_and_a_reset_recovers() {
    let _hang = Watchdog::new("fills without dropping", limit(6 * refills()));
    let mut w = smollm2(2);
    let context = REFILL_CONTEXT.to_string();
    let (mut at_start, mut in_reply, mut heap) = (0, 0, Vec::new());
    let mut first_reply = None;
    for fill in 0..refills() {
        w.chat_reset().unwrap();
        w.chat_add(ROLE_SYSTEM, SYSTEM).unwrap();
        for turn in 0.. {
            let what = format!("fill {fill}, turn {turn}");
            // The first turn after a reset is the one a freshly loaded engine answered first;
            // later ones vary, and in odd fills run without a limit (a reply fills the cache).
            w.sampler_set(&Sampling {
                seed: if turn == 0 {
                    0
                } else {
                    (fill * 1000 + turn) as u64
                },
                ..Sampling::default()
            })
            .unwrap();
            let (question, max_tokens) = match turn {
                0 => (QUESTIONS[0], 48),
                _ if fill % 2 == 1 => (LONG, 0),
                _ => (QUESTIONS[(fill + turn) % QUESTIONS.len()], 48),
            };
            w.chat_add(ROLE_USER, question).unwrap();
            match w.chat_reply(max_tokens, |_| {}).unwrap() {
                Err(e) => {
                    assert_eq!(e.code, E_CONTEXT_FULL, "{what}: {e}");
                    assert!(e.message.contains(&context), "{what}: {e}");
                    at_start += 1;
                    break;
                }
                Ok(r) if r.end.code == E_CONTEXT_FULL => {
                    assert_eq!(r.stats["state"], "context_full", "{what}");
                    assert_eq!(r.stats["kv_tokens"], REFILL_CONTEXT, "{what}");
                    in_reply += 1;
                    // The next turn is refused the same way: the messages stay, unrun.
                    w.chat_add(ROLE_USER, "One more?").unwrap();
                    assert_eq!(
                        w.chat_start(8).unwrap().unwrap_err().code,
                        E_CONTEXT_FULL,
                        "{what}"
                    );
                    break;
                }
                Ok(r) => {
                    assert_eq!(r.end.code, E_END, "{what}: {:?}", r.end);
                    if turn == 0 {
                        let first = first_reply.get_or_insert_with(|| r.ids.clone());
                        assert_eq!(&r.ids, first, "{what}: the reply after a reset");
                    }
                }
            }
            assert!(turn < 40, "{what}: {REFILL_CONTEXT} tokens never filled");
        }
        heap.push(w.heap_in_use().unwrap());
    }
    // The same questions every fill (no new words to remember): flat within 64 KiB.
    assert_flat("without dropping", &heap, 64 << 10);
    println!(
        "without dropping: {} fills, each reported as CONTEXT_FULL ({at_start} by chat_start, {in_reply} by a reply), each reset replying as a fresh engine; heap at each fill {heap:?}",
        refills()
    );
}

/// Text of `words` random lowercase words of 40 letters (each a new word to a tokenizer).
fn random_words(words: usize) -> String {
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut text = String::new();
    for _ in 0..words {
        text.push(' ');
        for _ in 0..40 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            text.push(char::from(b'a' + (rng % 26) as u8));
        }
    }
    text
}

/// Regression: `unload_model` kept the tokenizer's scratch and word cache (12 MB after one
/// 330 KB text), sized by the longest text it had read, for a tokenizer that was gone. The
/// embedder's buffers (also kept, for warm calls) stay small: a load and unload after long
/// texts through both leave the heap within 64 KiB of one after a short text.
#[test]
fn unloading_frees_what_the_tokenizers_read() {
    let text = random_words(8000);
    let texts: Vec<&[u8]> = text.as_bytes().chunks(4096).collect();
    let mut w = Wasmind::single_threaded().unwrap();
    let dir = fixture("models/potion-base-8M");
    // A cycle with a short text first: what a load and unload leave by themselves.
    let cycle = |w: &mut Wasmind, texts: &[&[u8]]| {
        w.load_model_file(&fixture(SMOLLM2), 256).unwrap();
        let ids = w.tokenize(texts.concat().as_slice(), 0).unwrap();
        let dim = w.load_embedder_dir(&dir).unwrap();
        w.embed_batch(texts, dim).unwrap();
        w.embed(&texts.concat(), dim).unwrap();
        let full = w.heap_in_use().unwrap();
        w.unload_model().unwrap();
        w.unload_embedder().unwrap();
        (ids.len(), full, w.heap_in_use().unwrap())
    };
    let (_, _, before) = cycle(&mut w, &[b"a short text"]);
    let (ids, full, after) = cycle(&mut w, &texts);
    println!(
        "heap after a short cycle {before}; with {ids} ids and {} texts read {full}; after unloading {after}",
        texts.len()
    );
    assert!(
        after <= before + (64 << 10),
        "unloading kept {} bytes",
        after - before
    );
}

/// Regression: after a reply, `unload_model` kept the sampler's candidates (12 bytes per
/// vocabulary entry: 0.6 MB for SmolLM2, 3 MB for a 262,144-token vocabulary), so a load ->
/// chat -> unload cycle left 600 KB behind in a fresh module.
#[test]
fn unloading_after_a_reply_frees_the_samplers_buffers() {
    let mut w = Wasmind::single_threaded().unwrap();
    let start = w.heap_in_use().unwrap();
    w.load_model_file(&fixture(SMOLLM2), 256).unwrap();
    w.sampler_set(&Sampling::default()).unwrap();
    w.chat_add(ROLE_USER, "What is the capital of France?")
        .unwrap();
    assert!(!w.chat_reply(8, |_| {}).unwrap().unwrap().ids.is_empty());
    w.unload_model().unwrap();
    let after = w.heap_in_use().unwrap();
    println!("heap {start} before the load, {after} after the reply and the unload");
    assert!(
        after <= start + (64 << 10),
        "a load, a reply and an unload left {} bytes",
        after - start
    );
}
