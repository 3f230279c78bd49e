//! Chat inside the real module against llama.cpp: ChatML prompt ids, greedy replies judged
//! where llama.cpp is decisive, seeded sampling reproducible across runs and thread counts,
//! multi-turn prefill of only the new tokens, a 20-turn conversation past a 512-token context
//! (refused, then kept going by dropping the oldest turns), the stop flag, hostile calls, and
//! the `wasmind chat` / `wasmind generate` commands.

mod common;
use common::*;
use wasmind_host::{
    CHAT_DROP_OLDEST, CHAT_THINK, E_CONTEXT_FULL, E_END, E_STOPPED, Piece, ROLE_ASSISTANT,
    ROLE_SYSTEM, ROLE_USER, Reply, Sampling, TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL, Wasmind,
};

fn smollm2(threads: u32, context: u32) -> Wasmind {
    let mut w = Wasmind::with_threads(threads).unwrap();
    w.load_model_file(&fixture(SMOLLM2), context).unwrap();
    w
}

fn reply(w: &mut Wasmind, max_tokens: u32) -> Reply {
    w.chat_reply(max_tokens, |_| {})
        .unwrap()
        .unwrap_or_else(|e| panic!("chat_start refused: {e}"))
}

#[test]
fn greedy_replies_match_llama_cpp_where_it_is_decisive() {
    let r = json("reference/smollm2-q4_1.json");
    let greedy = r["greedy"].as_array().unwrap();
    assert_eq!(greedy.len(), 12);
    let mut w = smollm2(2, 1024);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&w.model_info().unwrap()).unwrap()["chat_template"],
        "chatml"
    );
    w.sampler_set(&Sampling::GREEDY).unwrap();
    let (mut decisive, mut agree, mut first_checked, mut same_prefix) = (0, 0, 0, 0);
    for g in greedy {
        let (want_prompt, want_ids) = (u32s(&g["prompt_ids"]), u32s(&g["ids"]));
        let steps = g["steps"].as_array().unwrap();
        // Free-running greedy reply through the chat exports.
        w.chat_reset().unwrap();
        if let Some(s) = g["system"].as_str() {
            w.chat_add(ROLE_SYSTEM, s).unwrap();
        }
        w.chat_add(ROLE_USER, g["user"].as_str().unwrap()).unwrap();
        let got = reply(&mut w, want_ids.len() as u32);
        assert_eq!(
            got.prompt_ids, want_prompt,
            "prompt ids of {:?}",
            g["prompt"]
        );
        if margin(&steps[0]) >= DECISIVE_MARGIN {
            first_checked += 1;
            assert_eq!(
                got.ids.first(),
                want_ids.first(),
                "first reply token of {:?}",
                g["user"]
            );
        }
        // Our reply follows llama.cpp's up to its first near-tie.
        let n = steps
            .iter()
            .position(|s| margin(s) < DECISIVE_MARGIN)
            .unwrap_or(want_ids.len());
        assert_eq!(
            &got.ids[..n.min(got.ids.len())],
            &want_ids[..n.min(got.ids.len())],
            "reply of {:?}",
            g["user"]
        );
        same_prefix += n.min(got.ids.len());

        // Teacher-forced along llama.cpp's reply.
        let n = teacher_forced_argmax(&mut w, &want_prompt, &want_ids, steps, &g["user"]);
        (decisive, agree) = (decisive + n, agree + n);
    }
    println!(
        "prompt ids 12/12 equal; teacher-forced decisive argmax {agree}/{decisive}; first token checked on \
         {first_checked} decisive prompts; {same_prefix} reply tokens equal up to llama.cpp's first near-tie"
    );
}

fn sampled_reply(threads: u32, seed: u32) -> (Vec<u32>, String) {
    let mut w = smollm2(threads, 256);
    let s = Sampling {
        temperature: 1.0,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.1,
        repeat_window: 64,
        seed: seed.into(),
    };
    w.sampler_set(&s).unwrap();
    w.chat_add(ROLE_USER, "Write a haiku about the sea.")
        .unwrap();
    let r = reply(&mut w, 32);
    (r.ids, String::from_utf8_lossy(&r.text).into_owned())
}

#[test]
fn a_seed_reproduces_a_reply_across_runs_and_thread_counts() {
    let base = sampled_reply(1, 1234);
    println!("seed 1234: {:?}", base.1);
    assert!(base.0.len() >= 4, "a reply of only {} tokens", base.0.len());
    for threads in [1, 2, 0] {
        assert_eq!(sampled_reply(threads, 1234), base, "threads {threads}");
    }
    let other = sampled_reply(2, 1235);
    println!("seed 1235: {:?}", other.1);
    assert_ne!(other.0, base.0, "different seeds gave the same reply");

    // In one instance: the same settings again give the same reply.
    let mut w = smollm2(2, 256);
    let s = Sampling {
        temperature: 1.0,
        seed: 77,
        ..Sampling::default()
    };
    let mut replies = vec![];
    for _ in 0..2 {
        w.chat_reset().unwrap();
        w.sampler_set(&s).unwrap();
        w.chat_add(ROLE_USER, "Name a color.").unwrap();
        replies.push(reply(&mut w, 16).ids);
    }
    assert_eq!(replies[0], replies[1]);
}

#[test]
fn a_follow_up_prefills_only_its_own_tokens() {
    let mut w = smollm2(2, 1024);
    w.sampler_set(&Sampling::GREEDY).unwrap();
    w.chat_add(ROLE_USER, "What is the capital of France?")
        .unwrap();
    let first = reply(&mut w, 48);
    assert_eq!(first.end.code, E_END);
    let cached = w.chat_tokens().unwrap();
    assert_eq!(
        cached.len(),
        first.prompt_ids.len() + first.ids.len() - 1,
        "the end token is not run"
    );

    let follow = "And of Germany?";
    w.chat_add(ROLE_USER, follow).unwrap();
    let second = reply(&mut w, 48);
    let new_text =
        format!("<|im_end|>\n<|im_start|>user\n{follow}<|im_end|>\n<|im_start|>assistant\n");
    let new_ids = w
        .tokenize(new_text.as_bytes(), TOKENIZE_PARSE_SPECIAL)
        .unwrap();
    assert_eq!(
        second.stats["prompt_tokens"].as_u64().unwrap() as usize,
        new_ids.len(),
        "prompt tokens run"
    );
    assert_eq!(
        second.prompt_ids[..cached.len()],
        cached[..],
        "the history stays in the cache"
    );
    assert_eq!(second.prompt_ids[cached.len()..], new_ids[..]);
    println!(
        "follow-up ran {} tokens over {} cached: {:?}",
        new_ids.len(),
        cached.len(),
        String::from_utf8_lossy(&second.text)
    );

    // The same conversation read in one piece gives the same ids.
    let whole = format!(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n{}<|im_end|>\n<|im_start|>user\n{follow}<|im_end|>\n<|im_start|>assistant\n",
        String::from_utf8_lossy(&first.text)
    );
    assert_eq!(
        w.tokenize(whole.as_bytes(), TOKENIZE_PARSE_SPECIAL)
            .unwrap(),
        second.prompt_ids
    );

    // After low-level calls changed the cache, the next turn re-reads the conversation.
    w.reset().unwrap();
    w.chat_add(ROLE_USER, "Thanks.").unwrap();
    let third = reply(&mut w, 8);
    assert_eq!(
        third.prompt_ids[..second.prompt_ids.len()],
        second.prompt_ids[..]
    );
    assert_eq!(
        third.stats["prompt_tokens"].as_u64().unwrap() as usize,
        third.prompt_ids.len()
    );
}

/// A template chosen by name renders the conversation (llama.cpp's text, tokenized with control
/// tokens parsed) and a follow-up appends only the reply's closing markup and the new turn;
/// Qwen3's empty think block goes in front of the reply unless thinking is on.
#[test]
fn a_template_chosen_by_name_carries_a_conversation() {
    let mut w = smollm2(0, 1024);
    w.sampler_set(&Sampling::GREEDY).unwrap();
    w.chat_set_template_name("llama3").unwrap();
    let info: serde_json::Value = serde_json::from_str(&w.model_info().unwrap()).unwrap();
    assert_eq!(info["chat_template"], "llama3");
    let render = |w: &mut Wasmind, name: &str, msgs: serde_json::Value, think: bool| {
        let req = serde_json::json!({"messages": msgs, "add_assistant": true, "think": think});
        w.template_render(name, &serde_json::to_vec(&req).unwrap())
            .unwrap()
    };
    w.chat_add(ROLE_SYSTEM, "Be brief.").unwrap();
    w.chat_add(ROLE_USER, "Hi").unwrap();
    let first = reply(&mut w, 6);
    let text = render(
        &mut w,
        "llama3",
        serde_json::json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]),
        false,
    );
    let flags = TOKENIZE_ADD_SPECIAL | TOKENIZE_PARSE_SPECIAL;
    assert_eq!(first.prompt_ids, w.tokenize(&text, flags).unwrap());
    let cached = w.chat_tokens().unwrap();
    w.chat_add(ROLE_USER, "Bye").unwrap();
    let second = reply(&mut w, 4);
    let next = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    assert_eq!(second.prompt_ids[..cached.len()], cached[..]);
    assert_eq!(
        second.prompt_ids[cached.len()..],
        w.tokenize(next.as_bytes(), TOKENIZE_PARSE_SPECIAL).unwrap()[..]
    );

    // Qwen3, without and with thinking, on the whole conversation read anew.
    let (a1, a2) = (
        String::from_utf8_lossy(&first.text).into_owned(),
        String::from_utf8_lossy(&second.text).into_owned(),
    );
    let history = [
        (ROLE_SYSTEM, "system", "Be brief."),
        (ROLE_USER, "user", "Hi"),
        (ROLE_ASSISTANT, "assistant", &a1),
        (ROLE_USER, "user", "Bye"),
        (ROLE_ASSISTANT, "assistant", &a2),
        (ROLE_USER, "user", "Again"),
    ];
    let msgs: Vec<_> = history
        .iter()
        .map(|(_, role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    w.chat_set_template_name("qwen3").unwrap();
    for think in [false, true] {
        w.chat_reset().unwrap();
        w.chat_set_options(if think { CHAT_THINK } else { 0 })
            .unwrap();
        for (role, _, content) in history {
            w.chat_add(role, content).unwrap();
        }
        let r = reply(&mut w, 2);
        let want = render(&mut w, "qwen3", serde_json::json!(msgs), think);
        assert_eq!(
            r.prompt_ids,
            w.tokenize(&want, flags).unwrap(),
            "think {think}"
        );
        assert_eq!(
            want.ends_with(b"<think>\n\n</think>\n\n"),
            !think,
            "{}",
            String::from_utf8_lossy(&want)
        );
    }
}

#[test]
fn twenty_turns_past_a_512_token_context() {
    let mut w = smollm2(2, 512);
    w.sampler_set(&Sampling {
        seed: 5,
        ..Sampling::default()
    })
    .unwrap();
    w.chat_add(ROLE_SYSTEM, SYSTEM).unwrap();

    // Without dropping: the conversation runs until the context refuses a turn or a reply.
    let mut full_at = None;
    for (turn, q) in QUESTIONS.iter().enumerate() {
        w.chat_add(ROLE_USER, q).unwrap();
        match w.chat_reply(64, |_| {}).unwrap() {
            Err(e) => {
                assert_eq!(e.code, E_CONTEXT_FULL, "turn {turn}: {e}");
                full_at = Some((turn, e.message));
                break;
            }
            Ok(r) => {
                assert!(r.stats["kv_tokens"].as_u64().unwrap() <= 512);
                if r.end.code == E_CONTEXT_FULL {
                    full_at = Some((turn, r.end.message));
                    break;
                }
            }
        }
    }
    let (turn, message) = full_at.expect("20 turns never filled 512 tokens");
    println!("without dropping: context full at turn {turn}: {message}");
    assert!(turn < 19);
    // The refusal is stable: one more message is refused the same way, no trap.
    w.chat_add(ROLE_USER, "One more?").unwrap();
    assert_eq!(w.chat_start(64).unwrap().unwrap_err().code, E_CONTEXT_FULL);

    // With dropping: all 20 turns get a reply, the system message stays first.
    let mut w = smollm2(2, 512);
    w.sampler_set(&Sampling {
        seed: 5,
        ..Sampling::default()
    })
    .unwrap();
    w.chat_set_options(CHAT_DROP_OLDEST).unwrap();
    w.chat_add(ROLE_SYSTEM, SYSTEM).unwrap();
    let system_ids = w
        .tokenize(
            format!("<|im_start|>system\n{SYSTEM}<|im_end|>\n").as_bytes(),
            TOKENIZE_PARSE_SPECIAL,
        )
        .unwrap();
    let mut last_stats = serde_json::Value::Null;
    for (turn, q) in QUESTIONS.iter().enumerate() {
        w.chat_add(ROLE_USER, q).unwrap();
        let r = w
            .chat_reply(64, |_| {})
            .unwrap()
            .unwrap_or_else(|e| panic!("turn {turn}: {e}"));
        assert!(!r.ids.is_empty(), "turn {turn}: empty reply");
        assert!(r.stats["kv_tokens"].as_u64().unwrap() <= 512);
        assert_eq!(
            r.prompt_ids[..system_ids.len()],
            system_ids[..],
            "turn {turn}: the system message was dropped"
        );
        assert!(
            r.prompt_ids.ends_with(
                &w.tokenize(
                    format!("{q}<|im_end|>\n<|im_start|>assistant\n").as_bytes(),
                    TOKENIZE_PARSE_SPECIAL
                )
                .unwrap()
            )
        );
        if turn == QUESTIONS.len() - 1 {
            println!("turn {turn}: {:?}", String::from_utf8_lossy(&r.text));
        }
        last_stats = r.stats;
    }
    println!("with dropping: {last_stats}");
    assert!(last_stats["dropped_messages"].as_u64().unwrap() >= 2);
}

#[test]
fn the_stop_flag_ends_a_reply_and_chat_start_clears_it() {
    let mut w = smollm2(2, 256);
    w.sampler_set(&Sampling::GREEDY).unwrap();
    // A stop requested before the reply does not stop it (chat_start clears the flag).
    w.request_stop().unwrap();
    w.chat_add(ROLE_USER, "Why is the sky blue?").unwrap();
    w.chat_start(100).unwrap().unwrap();
    let mut pieces = 0;
    let end = loop {
        match w.chat_next().unwrap() {
            Piece::Text(_) => {
                pieces += 1;
                if pieces == 3 {
                    // Any thread may store to shared_state() + 64; this is the export.
                    w.request_stop().unwrap();
                }
            }
            Piece::End(e) => break e,
        }
    };
    assert_eq!(end.code, E_STOPPED);
    let stats = w.chat_stats().unwrap();
    assert_eq!(stats["state"], "stopped");
    assert_eq!(stats["tokens"], 3, "{stats}");
    // Still over on later calls, and the conversation goes on.
    assert!(matches!(w.chat_next().unwrap(), Piece::End(e) if e.code == E_STOPPED));
    w.chat_add(ROLE_USER, "Thanks.").unwrap();
    let r = reply(&mut w, 4);
    assert!(r.end.code == E_END && r.ids.len() <= 4 + 1);
}

/// The module reports the defaults it uses, and they are the crate's `Settings::default()`.
#[test]
fn the_module_reports_its_sampler_defaults() {
    for threads in [0, 2] {
        let mut w = Wasmind::with_threads(threads).unwrap();
        let got = w.sampler_defaults().unwrap();
        let d = Sampling::default();
        let f = |k: &str| got[k].as_f64().unwrap_or_else(|| panic!("{k} in {got}"));
        assert_eq!(f("temperature") as f32, d.temperature);
        assert_eq!(f("top_k") as u32, d.top_k);
        assert_eq!(f("top_p") as f32, d.top_p);
        assert_eq!(f("min_p") as f32, d.min_p);
        assert_eq!(f("repeat_penalty") as f32, d.repeat_penalty);
        assert_eq!(f("repeat_window") as u32, d.repeat_window);
        assert_eq!(f("seed") as u64, d.seed);
    }
}

#[test]
fn hostile_chat_calls_fail_cleanly() {
    let mut w = Wasmind::single_threaded().unwrap();
    // No model.
    assert!(w.chat_start(8).unwrap().is_err());
    assert!(matches!(w.chat_next().unwrap(), Piece::End(_)));
    // A vocabulary without weights.
    w.load_model_file(&fixture("models/vocab/vocab-bpe-smollm.gguf"), 0)
        .unwrap();
    w.chat_add(ROLE_USER, "hi").unwrap();
    assert_eq!(w.chat_start(8).unwrap().unwrap_err().code, 5);

    let mut w = smollm2(0, 64);
    for (name, r) in [
        (
            "role",
            w.call::<(u32, u32, u32), i32>("chat_add", (9, 0, 0))
                .unwrap(),
        ),
        (
            "template",
            w.call::<u32, i32>("chat_set_template", 99).unwrap(),
        ),
        (
            "options",
            w.call::<u32, i32>("chat_set_options", 6).unwrap(),
        ),
        (
            "nan",
            w.call::<(f32, u32, f32, f32, f32, u32, u32), i32>(
                "sampler_set",
                (f32::NAN, 0, 1.0, 0.0, 1.0, 0, 0),
            )
            .unwrap(),
        ),
        (
            "top_p",
            w.call::<(f32, u32, f32, f32, f32, u32, u32), i32>(
                "sampler_set",
                (1.0, 0, 0.0, 0.0, 1.0, 0, 0),
            )
            .unwrap(),
        ),
        (
            "buffer",
            w.call::<(u32, u32, u32), i32>("chat_add", (1, 0xFFFF_FFF0, 100))
                .unwrap(),
        ),
        ("ids", w.call::<(u32, u32), i32>("sample", (3, 10)).unwrap()),
    ] {
        assert!(r < 0, "{name}: {r}");
    }
    let bad = w.put(&[0xC3, 0x28]).unwrap();
    let r = w
        .call::<(u32, u32, u32), i32>("chat_add", (ROLE_USER, bad, 2))
        .unwrap();
    assert_eq!(r, -7, "invalid UTF-8");
    // Nothing new to answer.
    assert!(w.chat_start(8).unwrap().is_err());
    // A message longer than the context.
    w.chat_add(ROLE_USER, &"word ".repeat(200)).unwrap();
    assert_eq!(w.chat_start(8).unwrap().unwrap_err().code, E_CONTEXT_FULL);
    w.chat_set_options(CHAT_DROP_OLDEST).unwrap();
    assert_eq!(w.chat_start(8).unwrap().unwrap_err().code, E_CONTEXT_FULL);
    // Reset, and a short exchange still works in 64 tokens.
    w.chat_reset().unwrap();
    w.sampler_set(&Sampling::GREEDY).unwrap();
    w.chat_add(ROLE_USER, "Hi").unwrap();
    let r = reply(&mut w, 0);
    assert!(r.end.code == E_END || r.end.code == E_CONTEXT_FULL);
    assert!(r.stats["kv_tokens"].as_u64().unwrap() <= 64);
}

#[test]
fn echo_into_wasmind_chat_answers() {
    // No --model: the default model in models/ (`cargo xtask fixtures` put it there).
    let out = wasmind_piped(
        &["chat", "--seed", "1", "--threads", "2"],
        b"What is the capital of France?\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!(
        "stdout: {stdout:?}\nstderr: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    assert!(stdout.contains("Paris"), "{stdout:?}");
}

#[test]
fn generate_json_gives_llama_cpps_prompt_and_reply() {
    let r = json("reference/smollm2-q4_1.json");
    let g = &r["greedy"][5]; // the one with a system message
    let (user, system) = (g["user"].as_str().unwrap(), g["system"].as_str().unwrap());
    let v = generate_json(&[
        "--threads",
        "2",
        "--temp",
        "0",
        "-n",
        "48",
        "--chat",
        user,
        "--system",
        system,
    ]);
    assert_eq!(u32s(&v["prompt_ids"]), u32s(&g["prompt_ids"]));
    assert_eq!(u32s(&v["ids"])[0], u32s(&g["ids"])[0]);
    assert!(v["prefill_tps"].as_f64().unwrap() > 0.0 && v["decode_tps"].as_f64().unwrap() > 0.0);
    // Raw completion mode.
    let v = generate_json(&[
        "--prompt",
        "The capital of France is",
        "--temp",
        "0",
        "-n",
        "4",
    ]);
    assert_eq!(v["ids"].as_array().unwrap().len(), 4);
}

/// The same 20 turns through `wasmind chat --ctx 512`: without `--drop-oldest` it says the
/// context is full and exits cleanly; with it, every turn gets a reply.
#[test]
fn wasmind_chat_twenty_turns_in_512_tokens() {
    let script: String = QUESTIONS.iter().map(|q| format!("{q}\n")).collect();
    for drop in [false, true] {
        let mut args = vec!["--ctx", "512", "-n", "40", "--seed", "3", "--stats"];
        if drop {
            args.push("--drop-oldest");
        }
        let out = wasmind_chat(&args, script.as_bytes());
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("--drop-oldest {drop}: stderr:\n{stderr}");
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("[context full"), "{stderr}");
        let replies = stderr
            .lines()
            .filter(|l| l.contains("reply tokens at"))
            .count();
        if drop {
            assert_eq!(replies, 20, "{stderr}");
            assert!(stderr.contains("dropped the"), "{stderr}");
        } else {
            assert!(replies < 20);
        }
    }
}

/// A line that is not UTF-8 is reported and skipped; the chat goes on with the next one.
#[test]
fn wasmind_chat_skips_a_line_that_is_not_utf8() {
    let out = wasmind_chat(
        &["--ctx", "256", "-n", "12", "--temp", "0"],
        b"hi \xff there\nWhat is the capital of France?\n",
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("line 1 is not valid UTF-8 (byte 4): not sent"),
        "{stderr}"
    );
    assert!(stdout.contains("Paris"), "{stdout}");
}

/// `wasmind chat --model SmolLM2 args…` with `stdin` as its input, to the end.
fn wasmind_chat(args: &[&str], stdin: &[u8]) -> std::process::Output {
    let model = fixture(SMOLLM2);
    let mut all = vec!["chat", "--model", model.to_str().unwrap()];
    all.extend_from_slice(args);
    wasmind_piped(&all, stdin)
}
