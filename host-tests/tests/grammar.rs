//! Constrained replies inside the real module: schema-constrained replies of SmolLM2 and the
//! tiny models parse and validate against their schema (the `jsonschema` crate, formats on) at
//! temperature 0 and 0.8 and end at the grammar's end, never cut by it; GBNF grammars; errors
//! with positions through the ABI; the grammar is used up by one reply; the command line's
//! `--json-schema`, `--grammar` and `--json`; decode speed with the JSON grammar.

mod common;
use common::*;
use serde_json::{Value, json};
use wasmind_host::{
    GRAMMAR_GBNF, GRAMMAR_JSON_OBJECT, GRAMMAR_JSON_SCHEMA, GRAMMAR_NONE, ROLE_SYSTEM, ROLE_USER,
    Reply, Sampling, Wasmind,
};

/// Ten schemas: nested objects, arrays, enums, optional properties, `$ref`, `anyOf`, formats,
/// patterns, integer and number bounds. Every string has a `maxLength` and every array a `maxItems`, so each reply is
/// bounded and ends inside `MAX_TOKENS` even for the random-weight tiny models.
fn schemas() -> Vec<Value> {
    let s = |n: u32| json!({"type": "string", "maxLength": n});
    vec![
        json!({"type": "object", "properties": {
            "name": s(40), "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": s(60)}, "required": ["name", "age"]}),
        json!({"type": "object", "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
            "required": ["sentiment", "confidence"]}),
        json!({"type": "object", "properties": {
            "items": {"type": "array", "items": s(30), "minItems": 1, "maxItems": 5}},
            "required": ["items"]}),
        json!({"type": "object", "properties": {
            "name": s(40),
            "address": {"type": "object", "properties": {
                "street": s(50), "city": s(30),
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "city", "zip"]}},
            "required": ["name", "address"]}),
        json!({"type": "object", "properties": {
            "tool": {"enum": ["search", "calculator", "weather"]},
            "arguments": {"type": "object", "properties": {"query": s(60)}, "required": ["query"]}},
            "required": ["tool", "arguments"]}),
        json!({"type": "object", "properties": {
            "answer": {"type": "boolean"},
            "reason": {"anyOf": [s(80), {"type": "null"}]}},
            "required": ["answer", "reason"]}),
        json!({"type": "object", "properties": {
            "people": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
                "name": s(30), "role": {"enum": ["admin", "user", "guest"]}},
                "required": ["name", "role"]}}},
            "required": ["people"]}),
        json!({"$defs": {"point": {"type": "object", "properties": {
                "x": {"type": "integer", "minimum": -1000, "maximum": 1000},
                "y": {"type": "number", "exclusiveMinimum": -1000, "exclusiveMaximum": 1000}},
                "required": ["x", "y"]}},
            "type": "object", "properties": {
                "from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
            "required": ["from", "to"]}),
        json!({"type": "object", "properties": {
            "version": {"const": 1}, "date": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"enum": ["home", "work", "urgent"]}, "maxItems": 4}},
            "required": ["version", "date", "tags"]}),
        json!({"type": "object", "properties": {
            "title": s(50), "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "done": {"type": "boolean"}}}),
    ]
}

const PROMPTS: [&str; 5] = [
    "Extract the details: John Smith, 34 years old, lives at 12 Oak Street, Springfield 12345.",
    "Classify this review: the food was great but the service was slow.",
    "What will the weather be like in Paris tomorrow?",
    "List three fruits.",
    "Make a task: call the dentist on 2024-05-03, high priority.",
];

const MAX_TOKENS: u32 = 768;

/// One schema-constrained reply; checks that it ended at the grammar's end, parses and
/// validates. Returns the reply.
fn constrained(w: &mut Wasmind, schema: &Value, prompt: &str, what: &str) -> Reply {
    w.chat_reset().unwrap();
    w.chat_add(ROLE_SYSTEM, "Answer with JSON only.").unwrap();
    w.chat_add(ROLE_USER, prompt).unwrap();
    w.chat_set_grammar(GRAMMAR_JSON_SCHEMA, &schema.to_string())
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: schema refused: {e}"));
    let r = w
        .chat_reply(MAX_TOKENS, |_| {})
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = String::from_utf8_lossy(&r.text).into_owned();
    assert_eq!(
        r.stats["state"], "eog",
        "{what}: the reply did not end at the grammar's end (state {}, {} tokens): {text:?}",
        r.stats["state"], r.stats["tokens"]
    );
    assert_eq!(r.stats["grammar"], true, "{what}");
    let value: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text:?}"));
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: {text} does not validate: {errors:?}"
    );
    r
}

fn sampling(temperature: f32, seed: u32) -> Sampling {
    if temperature == 0.0 {
        Sampling::GREEDY
    } else {
        Sampling {
            temperature,
            seed: seed.into(),
            ..Sampling::default()
        }
    }
}

#[test]
fn smollm2_schema_replies_parse_and_validate() {
    let mut w = Wasmind::with_threads(2).unwrap();
    w.load_model_file(&fixture(SMOLLM2), 2048).unwrap();
    let schemas = schemas();
    for temperature in [0.0, 0.8] {
        let (mut n, mut tokens, mut masks) = (0, 0, 0);
        for (i, schema) in schemas.iter().enumerate() {
            for (j, prompt) in PROMPTS.iter().enumerate() {
                w.sampler_set(&sampling(temperature, (i * 5 + j) as u32))
                    .unwrap();
                let what = format!("SmolLM2, T {temperature}, schema {i}, prompt {j}");
                let r = constrained(&mut w, schema, prompt, &what);
                if j == 0 {
                    println!("{what}: {}", String::from_utf8_lossy(&r.text));
                }
                n += 1;
                tokens += r.stats["tokens"].as_u64().unwrap();
                masks += r.stats["grammar_masks"].as_u64().unwrap();
            }
        }
        println!(
            "SmolLM2 T {temperature}: {n}/50 replies parse and validate, {tokens} tokens, {masks} draws masked"
        );
        assert_eq!(n, 50);
    }
}

/// A tiny random-weight model file (vocabulary type `none`, 512 output rows) with a made-up
/// SentencePiece vocabulary of 512 tokens added: the 256 byte tokens (so the model writes
/// partial UTF-8 characters too), printable ASCII, `▁` words, and the ChatML control tokens.
fn tiny_with_vocab(file: &str) -> Vec<u8> {
    let src = read(file);
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut types = vec![2i32, 3, 3, 3, 3]; // unknown, control
    for b in 0..256 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6); // byte
    }
    for c in ' '..='~' {
        tokens.push(if c == ' ' {
            "▁".into()
        } else {
            c.to_string()
        });
        types.push(1);
    }
    let words = [
        "name",
        "age",
        "items",
        "true",
        "false",
        "null",
        "John",
        "city",
        "street",
        "tool",
        "search",
        "weather",
        "query",
        "answer",
        "reason",
        "people",
        "role",
        "admin",
        "user",
        "guest",
        "from",
        "to",
        "date",
        "tags",
        "home",
        "work",
        "urgent",
        "title",
        "done",
        "priority",
        "version",
        "positive",
        "negative",
        "neutral",
        "confidence",
        "address",
        "zip",
        "calculator",
        "arguments",
        "email",
        "é",
        "ü",
        "😀",
        "→",
        "Zoë",
        "Paris",
    ];
    let mut k = 0;
    while tokens.len() < 512 {
        let w = words[k % words.len()];
        let t = match k / words.len() {
            0 => format!("▁{w}"),
            1 => w.to_string(),
            2 => format!("\"{w}\""),
            3 => format!("{w}\":"),
            _ => format!("▁{w}{k}"),
        };
        if !tokens.contains(&t) {
            tokens.push(t);
            types.push(1);
        }
        k += 1;
    }
    let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();

    // Copy the file, dropping its tokenizer.* keys and adding ours.
    let mut at = 4 + 4;
    let u32_at = |at: usize| u32::from_le_bytes(src[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(src[at..at + 8].try_into().unwrap());
    let n_tensors = u64_at(at);
    let n_kv = u64_at(at + 8);
    at += 16;
    fn skip(src: &[u8], at: &mut usize, ty: u32) {
        let u64_at = |at: usize| u64::from_le_bytes(src[at..at + 8].try_into().unwrap());
        match ty {
            0 | 1 | 7 => *at += 1,
            2 | 3 => *at += 2,
            4..=6 => *at += 4,
            10..=12 => *at += 8,
            8 => *at += 8 + u64_at(*at) as usize,
            9 => {
                let inner = u32::from_le_bytes(src[*at..*at + 4].try_into().unwrap());
                let n = u64_at(*at + 4);
                *at += 12;
                for _ in 0..n {
                    skip(src, at, inner);
                }
            }
            _ => panic!("GGUF value type {ty}"),
        }
    }
    let mut kv = Vec::new();
    let mut kept = 0u64;
    for _ in 0..n_kv {
        let start = at;
        let klen = u64_at(at) as usize;
        let key = String::from_utf8_lossy(&src[at + 8..at + 8 + klen]).into_owned();
        at += 8 + klen;
        let ty = u32_at(at);
        at += 4;
        skip(&src, &mut at, ty);
        assert_ne!(key, "general.alignment");
        if !key.starts_with("tokenizer.") {
            kv.extend_from_slice(&src[start..at]);
            kept += 1;
        }
    }
    let tensor_infos_start = at;
    for _ in 0..n_tensors {
        at += 8 + u64_at(at) as usize;
        let dims = u32_at(at) as usize;
        at += 4 + 8 * dims + 4 + 8;
    }
    let infos = &src[tensor_infos_start..at];
    let data = &src[at.next_multiple_of(32)..];

    let key = |out: &mut Vec<u8>, k: &str, ty: u32| {
        out.extend_from_slice(&(k.len() as u64).to_le_bytes());
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&ty.to_le_bytes());
    };
    let string = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    key(&mut kv, "tokenizer.ggml.model", 8);
    string(&mut kv, "llama");
    key(&mut kv, "tokenizer.ggml.tokens", 9);
    kv.extend_from_slice(&8u32.to_le_bytes());
    kv.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    for t in &tokens {
        string(&mut kv, t);
    }
    key(&mut kv, "tokenizer.ggml.scores", 9);
    kv.extend_from_slice(&6u32.to_le_bytes());
    kv.extend_from_slice(&(scores.len() as u64).to_le_bytes());
    for x in &scores {
        kv.extend_from_slice(&x.to_le_bytes());
    }
    key(&mut kv, "tokenizer.ggml.token_type", 9);
    kv.extend_from_slice(&5u32.to_le_bytes());
    kv.extend_from_slice(&(types.len() as u64).to_le_bytes());
    for x in &types {
        kv.extend_from_slice(&x.to_le_bytes());
    }
    for (k, id) in [
        ("tokenizer.ggml.unknown_token_id", 0u32),
        ("tokenizer.ggml.bos_token_id", 1),
        ("tokenizer.ggml.eos_token_id", 4),
    ] {
        key(&mut kv, k, 4);
        kv.extend_from_slice(&id.to_le_bytes());
    }
    key(&mut kv, "tokenizer.chat_template", 8);
    string(&mut kv, "{{'<|im_start|>' + message['role'] + '\\n'}}");
    let added = 8;

    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&n_tensors.to_le_bytes());
    out.extend_from_slice(&(kept + added).to_le_bytes());
    out.extend_from_slice(&kv);
    out.extend_from_slice(infos);
    out.resize(out.len().next_multiple_of(32), 0);
    out.extend_from_slice(data);
    out
}

#[test]
fn tiny_models_schema_replies_parse_and_validate() {
    let schemas = schemas();
    for file in [
        "models/tiny/tiny-llama-Q8_0.gguf",
        "models/tiny/tiny-llama-Q4_K.gguf",
        "models/tiny/tiny-qwen2-Q8_0.gguf",
    ] {
        let mut w = Wasmind::with_threads(1).unwrap();
        w.load_model_bytes(&tiny_with_vocab(file), 1024).unwrap();
        let info: Value = serde_json::from_str(&w.model_info().unwrap()).unwrap();
        assert_eq!(info["n_vocab"], 512, "{info}");
        let mut n = 0;
        let mut masks = 0;
        for temperature in [0.0, 0.8] {
            for (i, schema) in schemas.iter().enumerate() {
                // The random models repeat themselves; a penalty keeps the replies short.
                let mut s = sampling(temperature, i as u32);
                s.repeat_penalty = 1.3;
                s.repeat_window = 64;
                w.sampler_set(&s).unwrap();
                let what = format!("{file}, T {temperature}, schema {i}");
                let r = constrained(&mut w, schema, "Hi", &what);
                if i < 2 {
                    println!("{what}: {}", String::from_utf8_lossy(&r.text));
                }
                masks += r.stats["grammar_masks"].as_u64().unwrap();
                n += 1;
            }
        }
        println!("{file}: {n}/20 replies parse and validate, {masks} draws masked");
    }
}

#[test]
fn gbnf_grammars_json_object_mode_and_errors_through_the_abi() {
    let mut w = Wasmind::with_threads(1).unwrap();
    w.load_model_file(&fixture(SMOLLM2), 1024).unwrap();
    w.sampler_set(&Sampling::GREEDY).unwrap();
    // A reply under grammar `g` of `kind`, and its text.
    let ask = |w: &mut Wasmind, kind: u32, g: &str, prompt: &str| -> (Reply, String) {
        w.chat_reset().unwrap();
        w.chat_add(ROLE_USER, prompt).unwrap();
        w.chat_set_grammar(kind, g).unwrap().unwrap();
        let r = w.chat_reply(256, |_| {}).unwrap().unwrap();
        let text = String::from_utf8(r.text.clone()).unwrap();
        (r, text)
    };
    // A GBNF grammar.
    let (r, text) = ask(
        &mut w,
        GRAMMAR_GBNF,
        "root ::= (\"yes\" | \"no\") \", because \" [a-z ]{1,40} \".\"",
        "Is the sky blue?",
    );
    assert_eq!(r.stats["state"], "eog", "{text}");
    assert!(
        (text.starts_with("yes, because ") || text.starts_with("no, because "))
            && text.ends_with('.'),
        "{text}"
    );
    // Multi-byte characters from the grammar.
    let (_, text) = ask(
        &mut w,
        GRAMMAR_GBNF,
        "root ::= \"→ \" [é-ë] \" 😀\"",
        "Say something.",
    );
    assert!(text.starts_with("→ ") && text.ends_with(" 😀"), "{text}");
    // json_object mode. (The prompt asks for a short object: to "Describe a cat as JSON." the
    // 135M model's greedy reply in the relaxed build loops inside one string past 256 tokens.)
    let (r, text) = ask(
        &mut w,
        GRAMMAR_JSON_OBJECT,
        "",
        "Describe a cat as a short JSON object.",
    );
    assert_eq!(r.stats["state"], "eog", "{text}");
    assert!(
        serde_json::from_str::<Value>(&text).unwrap().is_object(),
        "{text}"
    );
    // The grammar is used up by one reply.
    w.chat_add(ROLE_USER, "And a dog?").unwrap();
    let r = w.chat_reply(8, |_| {}).unwrap().unwrap();
    assert_eq!(r.stats["grammar"], false);
    // Kind 0 clears a grammar set before.
    w.chat_set_grammar(GRAMMAR_JSON_OBJECT, "")
        .unwrap()
        .unwrap();
    w.chat_set_grammar(GRAMMAR_NONE, "").unwrap().unwrap();
    w.chat_add(ROLE_USER, "And a bird?").unwrap();
    let r = w.chat_reply(4, |_| {}).unwrap().unwrap();
    assert_eq!(r.stats["grammar"], false);

    // Errors: position and reason, the status code, and nothing set.
    let e = w
        .chat_set_grammar(GRAMMAR_GBNF, "root ::= \"a\" | foo")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, 3);
    assert!(
        e.message.contains("undefined rule 'foo'") && e.message.contains("byte 15"),
        "{e}"
    );
    let e = w
        .chat_set_grammar(GRAMMAR_GBNF, "root ::= root \"a\"")
        .unwrap()
        .unwrap_err();
    assert!(e.message.contains("left-recursive"), "{e}");
    let e = w
        .chat_set_grammar(GRAMMAR_JSON_SCHEMA, "{\"type\": ")
        .unwrap()
        .unwrap_err();
    assert!(e.message.contains("byte"), "{e}");
    let e = w
        .chat_set_grammar(
            GRAMMAR_JSON_SCHEMA,
            r#"{"type":"string","pattern":"^(a)\\1$"}"#,
        )
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, 4, "{e}");
    let e = w.chat_set_grammar(9, "").unwrap().unwrap_err();
    assert_eq!(e.code, 1);
    // Hostile: an exponentially ambiguous grammar is an error, not a hang or a trap.
    let evil = "root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\"? \"a\"? \"a\"?";
    match w.chat_set_grammar(GRAMMAR_GBNF, evil).unwrap() {
        Err(e) => assert!(e.code == 3 || e.code == 4, "{e}"),
        Ok(()) => {
            w.chat_add(ROLE_USER, "a").unwrap();
            let _ = w.chat_reply(16, |_| {}).unwrap();
        }
    }
}

#[test]
fn command_line_json_schema_grammar_and_json() {
    let schema = schemas()[1].to_string();
    let v = generate_json(&[
        "--chat",
        PROMPTS[1],
        "--temp",
        "0",
        "--threads",
        "2",
        "-n",
        "256",
        "--json-schema",
        &schema,
    ]);
    let reply: Value = serde_json::from_str(v["text"].as_str().unwrap()).unwrap();
    assert!(
        ["positive", "negative", "neutral"].contains(&reply["sentiment"].as_str().unwrap()),
        "{reply}"
    );
    assert_eq!(v["end"], "eog");

    let dir = std::env::temp_dir().join(format!("wasmind-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = dir.join("yesno.gbnf");
    std::fs::write(&g, "root ::= \"yes\" | \"no\"\n").unwrap();
    let out = wasmind_cmd()
        .args([
            "generate",
            "--chat",
            "Is water wet?",
            "--temp",
            "0",
            "--grammar",
            g.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        ["yes", "no"].contains(&text.trim()),
        "{text:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // chat --json: the reply is a JSON object (json_object mode is unbounded: with a small -n
    // it may be cut, so only its start is checked); chat --json-schema: each reply validates.
    let chat = |extra: &[&str], input: &[u8]| -> String {
        use std::io::Write;
        let mut child = wasmind_cmd()
            .args(["chat", "--temp", "0", "--threads", "2"])
            .args(extra)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let stdout = chat(&["--json", "-n", "24"], b"Describe Paris.\n");
    assert!(stdout.trim_start().starts_with('{'), "{stdout:?}");
    let schema = schemas()[4].to_string();
    let stdout = chat(
        &["--json-schema", &schema, "-n", "400"],
        b"Search for the weather in Rome.\nNow find a cheap hotel.\n",
    );
    let objects: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}: {stdout:?}"));
    assert_eq!(objects.len(), 2, "{stdout:?}");
    let validator = jsonschema::validator_for(&schemas()[4]).unwrap();
    assert!(objects.iter().all(|o| validator.is_valid(o)), "{stdout:?}");
    // An invalid grammar is refused before anything runs.
    std::fs::write(&g, "root ::= [z-a]\n").unwrap();
    let out = wasmind_cmd()
        .args(["generate", "--chat", "x", "--grammar", g.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("range out of order") && err.contains("byte"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Decode speed with the JSON grammar against unconstrained decode, same prompt, greedy, two
/// threads, 200 tokens each (printed for the notes; the assertion is loose because the
/// development machine is shared and noisy). Also a schema whose replies need many masked
/// draws (the nested `people` array): its tokens/s against the unconstrained reply's.
#[test]
fn json_grammar_decode_speed() {
    let mut w = Wasmind::with_threads(2).unwrap();
    w.load_model_file(&fixture(SMOLLM2), 2048).unwrap();
    w.sampler_set(&Sampling::GREEDY).unwrap();
    let prompt =
        "Write a JSON object describing three books with title, author, year and a list of themes.";
    let people = schemas()[6].to_string();
    // (kind, text, max tokens) -> tok/s per round.
    let runs = [
        (GRAMMAR_NONE, String::new(), 200),
        (GRAMMAR_JSON_OBJECT, String::new(), 200),
        (GRAMMAR_JSON_SCHEMA, people, 200),
    ];
    let mut tps = vec![Vec::new(); runs.len()];
    for round in 0..5 {
        // Rotate which goes first (the machine is shared and noisy).
        for k in 0..runs.len() {
            let i = (k + round) % runs.len();
            let (kind, text, max) = &runs[i];
            w.chat_reset().unwrap();
            w.chat_add(ROLE_USER, prompt).unwrap();
            w.chat_set_grammar(*kind, text).unwrap().unwrap();
            let r = w.chat_reply(*max, |_| {}).unwrap().unwrap();
            let t = r.stats["decode_tps"].as_f64().unwrap();
            println!(
                "round {round}, grammar kind {kind}: {} tokens, {t:.1} tok/s, {} masked draws",
                r.stats["tokens"], r.stats["grammar_masks"]
            );
            tps[i].push(t);
        }
    }
    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, name) in ["unconstrained", "JSON grammar", "people schema"]
        .iter()
        .enumerate()
    {
        println!(
            "decode tok/s, best / median of 5: {name} {:.1} / {:.1}, ratio of bests {:.2}",
            best(&tps[i]),
            median(&tps[i]),
            best(&tps[i]) / best(&tps[0])
        );
    }
    assert!(best(&tps[1]) > 0.5 * best(&tps[0]));
}
