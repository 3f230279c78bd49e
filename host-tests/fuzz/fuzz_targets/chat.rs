//! Chat rendering and sampling from arbitrary settings: messages with any roles and texts under
//! every template (rendering in two pieces equals the whole), and sampler settings from any
//! bits (NaN, infinities, negatives, huge) either refused or sampling an id in range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::sampler::{Sampler, Settings};
use wasmind::template::{Message, Role, Template};

fuzz_target!(|data: &[u8]| {
    let [head, texts, _] = wasmind_fuzz::three_parts(data);
    let messages: Vec<Message> = String::from_utf8_lossy(texts)
        .split('\u{1}')
        .enumerate()
        .map(|(i, t)| Message {
            role: Role::from_u32(head.get(i).copied().unwrap_or(1) as u32 % 4).unwrap(),
            text: t.into(),
        })
        .collect();
    for t in Template::all() {
        let mut whole = String::new();
        t.render(&messages, 0, &mut whole);
        // A first piece holds at least one message (the chat renders a conversation's start
        // whole; with none, llama2's templates still open "[INST] ", as llama.cpp's do).
        let split = 1 + head.first().map_or(0, |&b| b as usize % messages.len());
        let mut pieces = String::new();
        t.render(&messages[..split], 0, &mut pieces);
        t.render(&messages, split, &mut pieces);
        assert_eq!(pieces, whole, "{}: rendering in two pieces", t.name());
    }
    let f = |k: usize| {
        head.get(k * 4..k * 4 + 4)
            .map_or(0.5, |b| f32::from_le_bytes(b.try_into().unwrap()))
    };
    let u = |k: usize| {
        head.get(k * 4..k * 4 + 4)
            .map_or(8, |b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let settings = Settings {
        temperature: f(0),
        top_k: u(1),
        top_p: f(2),
        min_p: f(3),
        repeat_penalty: f(4),
        repeat_window: u(5) % 4096,
        seed: u(6) as u64,
    };
    let mut s = Sampler::default();
    if s.configure(settings).is_ok() {
        let logits: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 32.0) / 4.0)
            .collect();
        let id = s
            .sample(&logits, &[1, 2, 3])
            .expect("sample with accepted settings");
        assert!(id < 64);
    }
});
