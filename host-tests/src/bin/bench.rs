//! `bench`: throughput of the real `.wasm` modules in wasmtime, one JSON object per line on
//! stdout. `cargo xtask bench` runs it beside the Node bench and the peers and makes the tables.
//!
//! ```text
//! bench llm      --model M.gguf --prompt-file P.txt [--long-prompt-file L.txt] [--gen 128] [--threads 0,1,2,4,8] [--reps 3]
//! bench tokenize --model M.gguf --texts T.json [--min-secs 1]
//! bench embed    --model DIR|E.gguf --texts T.json --set NAME [--threads 0,1,2] [--min-secs 1]
//! bench grammar  --model M.gguf [--gen 128] [--threads 2] [--reps 3]
//! ```
//! `--threads 0` is the single-threaded module; `N >= 1` the threaded one with `N - 1` helpers.
//! `--dist DIR` runs the modules in `DIR` (what Node runs) instead of the ones embedded at build
//! time. `WASMIND_BUILD=simd128` runs the SIMD128 build (`wasmind.wasm`, `wasmind-mt.wasm`); the
//! default is the relaxed-SIMD one (`wasmind-relaxed*.wasm`), as in the `wasmind` command.
//!
//! What is timed is the module's work seen from the host: inputs are copied into linear memory
//! once, then only export calls are in the timed loops (plus, for decode, reading the logits and
//! taking their argmax on the host, as any host must to pick the next token).

use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};
use wasmind_host::{Build, Wasmind, pack_texts};

struct Args(Vec<String>);

impl Args {
    fn value(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .map(String::as_str)
    }
    fn required(&self, name: &str) -> Result<&str, String> {
        self.value(name).ok_or_else(|| format!("missing {name}"))
    }
    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        self.value(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| format!("{name} {v:?} is not a number"))
        })
    }
    fn threads(&self, default: &str) -> Result<Vec<u32>, String> {
        let list = self.value("--threads").unwrap_or(default);
        list.split(',')
            .map(|t| {
                t.trim()
                    .parse()
                    .map_err(|_| format!("bad thread count {t:?}"))
            })
            .collect()
    }
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The module for `threads` (0: single-threaded) of the build `WASMIND_BUILD` names (relaxed
/// by default), from `--dist` or embedded.
fn open(args: &Args, threads: u32) -> Result<Wasmind, String> {
    let Some(dir) = args.value("--dist") else {
        return Wasmind::with_threads(threads).map_err(s);
    };
    let file = PathBuf::from(dir).join(module_name(threads));
    let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    if threads == 0 {
        Wasmind::single_threaded_from(&bytes)
    } else {
        Wasmind::threaded_from(&bytes, threads)
    }
    .map_err(s)
}

fn main() {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() {
        eprintln!(
            "usage: bench (llm | tokenize | embed | grammar) [options]; see the source's header"
        );
        std::process::exit(2);
    }
    let cmd = argv.remove(0);
    let args = Args(argv);
    let r = match cmd.as_str() {
        "llm" => llm(&args),
        "tokenize" => tokenize(&args),
        "embed" => embed(&args),
        "grammar" => grammar(&args),
        other => Err(format!("unknown command {other:?}")),
    };
    if let Err(e) = r {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

/// The 1-minute load average when a result was taken (other work on the machine skews it).
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(-1.0)
}

fn emit(mut v: Value) {
    v["engine"] = json!("wasmtime");
    v["loadavg"] = json!(load_average());
    println!("{v}");
}

/// The file name of the module `open` runs.
fn module_name(threads: u32) -> &'static str {
    let relaxed = Build::current().unwrap_or(Build::Relaxed) == Build::Relaxed;
    match (relaxed, threads) {
        (false, 0) => "wasmind.wasm",
        (false, _) => "wasmind-mt.wasm",
        (true, 0) => "wasmind-relaxed.wasm",
        (true, _) => "wasmind-relaxed-mt.wasm",
    }
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// FNV-1a of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn argmax_at(w: &mut Wasmind, ptr: u32, vocab: usize) -> u32 {
    let bytes = w.read(ptr, vocab * 4);
    let mut best = (0u32, f32::NEG_INFINITY);
    for (i, c) in bytes.chunks_exact(4).enumerate() {
        let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if x > best.1 {
            best = (i as u32, x);
        }
    }
    best.0
}

/// Prefill of the prompt (batched) and greedy decode of `--gen` tokens after it, per thread count.
fn llm(args: &Args) -> Result<(), String> {
    let model = PathBuf::from(args.required("--model")?);
    let prompt = std::fs::read(args.required("--prompt-file")?).map_err(s)?;
    let long_prompt = match args.value("--long-prompt-file") {
        Some(path) => Some(std::fs::read(path).map_err(s)?),
        None => None,
    };
    let gen_tokens: usize = args.number("--gen", 128)?;
    let reps: usize = args.number("--reps", 3)?;
    for threads in args.threads("0,1,2,4,8")? {
        let mut w = open(args, threads)?;
        // Before the model, so the probe's buffer is reused for it (as measure.mjs does).
        let bandwidth = stream_bandwidth(&mut w)?;
        w.load_model_file(&model, 2048).map_err(s)?;
        let vocab = w.vocab().map_err(s)?;
        let info: Value = serde_json::from_str(&w.model_info().map_err(s)?).map_err(s)?;
        let put_ids = |w: &mut Wasmind, text: &[u8]| -> Result<(u32, usize), String> {
            let ids = w
                .tokenize(
                    text,
                    wasmind_host::TOKENIZE_ADD_SPECIAL | wasmind_host::TOKENIZE_PARSE_SPECIAL,
                )
                .map_err(s)?;
            let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
            Ok((w.put(&bytes).map_err(s)?, ids.len()))
        };
        let (ids_ptr, n_ids) = put_ids(&mut w, &prompt)?;
        let long = match &long_prompt {
            Some(text) => Some(put_ids(&mut w, text)?),
            None => None,
        };
        let prefill = w.func::<(u32, u32), i32>("prefill").map_err(s)?;
        let step = w.func::<u32, u32>("step").map_err(s)?;
        let logits = w.func::<(), u32>("logits").map_err(s)?;
        let reset = w.func::<(), i32>("reset").map_err(s)?;
        let (mut pre, mut dec, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
        let mut generated = Vec::new();
        let mut logits_fnv = 0;
        // From an empty cache: prefill `n` ids at `ptr`; the logits' address after it.
        let fresh_prefill = |w: &mut Wasmind, (ptr, n): (u32, usize)| -> Result<u32, String> {
            reset.call(&mut w.store, ()).map_err(s)?;
            let r = prefill.call(&mut w.store, (ptr, n as u32)).map_err(s)?;
            w.check("prefill", r).map_err(s)?;
            logits.call(&mut w.store, ()).map_err(s)
        };
        // One warm-up round (first touches of the weights and caches), then `reps` timed ones.
        for rep in 0..=reps {
            let t0 = Instant::now();
            let mut ptr = fresh_prefill(&mut w, (ids_ptr, n_ids))?;
            let prefill_s = t0.elapsed().as_secs_f64();
            let gen_now = if rep == 0 { 8 } else { gen_tokens };
            let mut out = Vec::with_capacity(gen_now);
            let t1 = Instant::now();
            for _ in 0..gen_now {
                let next = argmax_at(&mut w, ptr, vocab);
                out.push(next);
                ptr = step.call(&mut w.store, next).map_err(s)?;
                if ptr == 0 {
                    return Err(format!("step failed: {}", w.last_error().map_err(s)?));
                }
            }
            let decode_s = t1.elapsed().as_secs_f64();
            if rep > 0 {
                pre.push(n_ids as f64 / prefill_s);
                dec.push(gen_now as f64 / decode_s);
                generated = out;
                // The last step's logits (which every earlier step's bits feed), hashed
                // outside the timed loop so rows of different thread counts can be compared
                // bit for bit.
                logits_fnv = fnv1a(&w.read(ptr, vocab * 4));
            }
            // The time to the first token of the long prompt: its prefill and the pick.
            if let (Some(long), true) = (long, rep > 0) {
                let t0 = Instant::now();
                let ptr = fresh_prefill(&mut w, long)?;
                argmax_at(&mut w, ptr, vocab);
                ttft.push(t0.elapsed().as_secs_f64() * 1000.0);
            }
        }
        let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let mut row = json!({
            "bench": "llm", "module": module_name(threads), "threads": threads,
            "prompt_tokens": n_ids, "gen_tokens": gen_tokens, "reps": reps,
            "prefill_tok_s": best(&pre), "prefill_tok_s_median": median(&mut pre.clone()),
            "decode_tok_s": best(&dec), "decode_tok_s_median": median(&mut dec.clone()),
            "prefill_all": pre, "decode_all": dec,
            "generated_head": &generated[..generated.len().min(16)],
            "logits_fnv": format!("{logits_fnv:016x}"),
        });
        if let Some((_, n_long)) = long {
            row["long_prompt_tokens"] = json!(n_long);
            row["ttft_ms"] = json!(ttft.iter().copied().fold(f64::INFINITY, f64::min));
            row["ttft_all"] = json!(ttft);
        }
        // Decode reads every weight once a token: its ceiling is bandwidth ÷ bytes per token.
        if let Some(per_token) = info["weight_bytes_per_token"].as_f64() {
            row["stream_gb_s"] = json!(bandwidth / 1e9);
            row["weight_bytes_per_token"] = json!(per_token);
            row["decode_ceiling_tok_s"] = json!(bandwidth / per_token);
            row["decode_of_ceiling"] = json!(best(&dec) / (bandwidth / per_token));
        }
        emit(row);
        w.shutdown().map_err(s)?;
    }
    Ok(())
}

/// Streaming read bandwidth inside the module on its pool's threads (`stream_read` over a
/// 128 MiB buffer written first, so no page is untouched): bytes/s, best of 5 rounds of 4 reads.
fn stream_bandwidth(w: &mut Wasmind) -> Result<f64, String> {
    const LEN: u32 = 128 << 20;
    const PASSES: u32 = 4;
    let ptr = w.put(&vec![0x5a; LEN as usize]).map_err(s)?;
    let read = w.func::<(u32, u32, u32), i32>("stream_read").map_err(s)?;
    checked(
        "stream_read",
        read.call(&mut w.store, (ptr, LEN, 1)).map_err(s)?,
    )?;
    let mut best = 0f64;
    for _ in 0..5 {
        let t = Instant::now();
        checked(
            "stream_read",
            read.call(&mut w.store, (ptr, LEN, PASSES)).map_err(s)?,
        )?;
        best = best.max(LEN as f64 * PASSES as f64 / t.elapsed().as_secs_f64());
    }
    w.call::<(u32, u32), ()>("free", (ptr, LEN)).map_err(s)?;
    Ok(best)
}

fn read_texts(path: &str) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{path}: not a JSON array of strings: {e}"))
}

/// Runs `pass` (one pass over all texts) until `min_secs` have gone by, at least 3 times; returns
/// the passes' durations, after one untimed warm-up pass.
fn timed_passes(
    min_secs: f64,
    mut pass: impl FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    pass()?;
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < 3 || start.elapsed().as_secs_f64() < min_secs {
        let t = Instant::now();
        pass()?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok(times)
}

/// Copies `texts` into linear memory once; returns each text's (ptr, len).
fn place(w: &mut Wasmind, texts: &[String]) -> Result<Vec<(u32, u32)>, String> {
    texts
        .iter()
        .map(|t| Ok((w.put(t.as_bytes()).map_err(s)?, t.len() as u32)))
        .collect()
}

/// `r`, the return of the export `name`, or its failure.
fn checked(name: &str, r: i32) -> Result<i32, String> {
    if r < 0 {
        Err(format!("{name} failed ({r})"))
    } else {
        Ok(r)
    }
}

fn rates(times: &mut [f64], texts: usize, bytes: usize) -> Value {
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let med = median(times);
    json!({
        "texts": texts, "bytes": bytes, "passes": times.len(),
        "texts_per_s": texts as f64 / best, "mb_per_s": bytes as f64 / best / 1e6,
        "texts_per_s_median": texts as f64 / med, "mb_per_s_median": bytes as f64 / med / 1e6,
    })
}

/// Tokenizer throughput: every text through `tokenize` (no special tokens), single-threaded module.
fn tokenize(args: &Args) -> Result<(), String> {
    let model = PathBuf::from(args.required("--model")?);
    let texts = read_texts(args.required("--texts")?)?;
    let min_secs: f64 = args.number("--min-secs", 1.0)?;
    let mut w = open(args, 0)?;
    w.load_model_file(&model, 0).map_err(s)?;
    let placed = place(&mut w, &texts)?;
    let cap = texts.iter().map(|t| t.len()).max().unwrap_or(0) + 8;
    let out = w.put(&vec![0u8; cap * 4]).map_err(s)?;
    let f = w
        .func::<(u32, u32, u32, u32, u32), i32>("tokenize")
        .map_err(s)?;
    let mut ids = 0usize;
    let mut times = timed_passes(min_secs, || {
        ids = 0;
        for &(p, n) in &placed {
            let r = f
                .call(&mut w.store, (p, n, 0, out, cap as u32))
                .map_err(s)?;
            ids += checked("tokenize", r)? as usize;
        }
        Ok(())
    })?;
    let bytes = texts.iter().map(String::len).sum();
    let mut v = rates(&mut times, texts.len(), bytes);
    v["bench"] = json!("tokenize");
    v["module"] = json!(module_name(0));
    v["ids"] = json!(ids);
    emit(v);
    Ok(())
}

/// An embedder: a Model2Vec folder, `embed` one text at a time (single thread) and `embed_batch`
/// per thread count; or an encoder GGUF, `embed` one text at a time per thread count.
fn embed(args: &Args) -> Result<(), String> {
    let path = PathBuf::from(args.required("--model")?);
    let encoder = !path.is_dir();
    let texts = read_texts(args.required("--texts")?)?;
    let set = args.value("--set").unwrap_or("texts").to_string();
    let min_secs: f64 = args.number("--min-secs", 1.0)?;
    let bytes: usize = texts.iter().map(String::len).sum();
    for threads in args.threads("0,1,2")? {
        let mut w = open(args, threads)?;
        let dim = w.load_embedder_path(&path).map_err(s)?;
        let placed = place(&mut w, &texts)?;
        let out = w.put(&vec![0u8; texts.len() * dim * 4]).map_err(s)?;
        let emit_embed = |api: &str, times: &mut [f64]| {
            let mut v = rates(times, texts.len(), bytes);
            v["bench"] = json!("embed");
            v["api"] = json!(api);
            v["set"] = json!(set);
            v["module"] = json!(module_name(threads));
            v["threads"] = json!(threads.max(1));
            emit(v);
        };
        // One text per call: Model2Vec's embed does not use the pool (only single-threaded is
        // meaningful); an encoder's does, and its embed_batch runs the same texts one by one.
        if threads <= 1 || encoder {
            let f = w.func::<(u32, u32, u32), i32>("embed").map_err(s)?;
            let mut times = timed_passes(min_secs, || {
                for &(p, n) in &placed {
                    checked("embed", f.call(&mut w.store, (p, n, out)).map_err(s)?)?;
                }
                Ok(())
            })?;
            emit_embed("embed", &mut times);
        }
        if encoder {
            w.shutdown().map_err(s)?;
            continue;
        }
        let refs: Vec<&[u8]> = texts.iter().map(|t| t.as_bytes()).collect();
        let (joined, offsets) = pack_texts(&refs);
        let t = w.put(&joined).map_err(s)?;
        let o = w
            .put(
                &offsets
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>(),
            )
            .map_err(s)?;
        let f = w
            .func::<(u32, u32, u32, u32), i32>("embed_batch")
            .map_err(s)?;
        let mut times = timed_passes(min_secs, || {
            let r = f
                .call(&mut w.store, (t, o, texts.len() as u32, out))
                .map_err(s)?;
            checked("embed_batch", r).map(drop)
        })?;
        emit_embed("embed_batch", &mut times);
        w.shutdown().map_err(s)?;
    }
    Ok(())
}

/// Greedy chat decode (`chat_next`, the path constrained replies take) with no grammar, the
/// JSON-object grammar and a nested schema, per thread count: the cost of the grammar check
/// and of the masked draws. One warm-up reply, then `reps` timed ones; tokens/s from the
/// module's `chat_stats` (host timestamps).
fn grammar(args: &Args) -> Result<(), String> {
    use wasmind_host::{GRAMMAR_JSON_OBJECT, GRAMMAR_JSON_SCHEMA, GRAMMAR_NONE, ROLE_USER};
    let model = PathBuf::from(args.required("--model")?);
    let gen_tokens: u32 = args.number("--gen", 128)?;
    let reps: usize = args.number("--reps", 3)?;
    let prompt = "Write a JSON object describing three books with title, author, year and themes.";
    let schema = r#"{"type":"object","properties":{"books":{"type":"array","maxItems":3,"items":{"type":"object","properties":{"title":{"type":"string"},"author":{"type":"string"},"year":{"type":"integer"},"themes":{"type":"array","items":{"enum":["love","war","magic","family","power"]}}},"required":["title","author","year","themes"]}}},"required":["books"]}"#;
    let kinds = [
        ("none", GRAMMAR_NONE, ""),
        ("json_object", GRAMMAR_JSON_OBJECT, ""),
        ("json_schema", GRAMMAR_JSON_SCHEMA, schema),
    ];
    for threads in args.threads("2")? {
        let mut w = open(args, threads)?;
        w.load_model_file(&model, 2048).map_err(s)?;
        w.sampler_set(&wasmind_host::Sampling::GREEDY).map_err(s)?;
        for (name, kind, text) in kinds {
            let (mut dec, mut tokens, mut masks) = (Vec::new(), 0, 0);
            for rep in 0..=reps {
                w.chat_reset().map_err(s)?;
                w.chat_add(ROLE_USER, prompt).map_err(s)?;
                w.chat_set_grammar(kind, text)
                    .map_err(s)?
                    .map_err(|e| e.to_string())?;
                let r = w
                    .chat_reply(gen_tokens, |_| {})
                    .map_err(s)?
                    .map_err(|e| e.to_string())?;
                if rep > 0 {
                    dec.push(r.stats["decode_tps"].as_f64().unwrap_or(0.0));
                    tokens = r.stats["tokens"].as_u64().unwrap_or(0);
                    masks = r.stats["grammar_masks"].as_u64().unwrap_or(0);
                }
            }
            let best = dec.iter().copied().fold(0.0, f64::max);
            emit(json!({
                "bench": "grammar", "module": module_name(threads), "threads": threads,
                "grammar": name, "gen_tokens": gen_tokens, "reps": reps, "tokens": tokens,
                "masked_draws": masks, "decode_tok_s": best,
                "decode_tok_s_median": median(&mut dec.clone()), "decode_all": dec,
            }));
        }
        w.shutdown().map_err(s)?;
    }
    Ok(())
}
