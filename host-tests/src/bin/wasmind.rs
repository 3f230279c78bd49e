//! `wasmind`: the command line over the wasm module, run in wasmtime.
//!
//! Every command runs the real `.wasm` (embedded at build time). `--threads N` runs the threaded
//! module with N-1 helper instances on OS threads over one shared memory (`--threads 0`: the
//! single-threaded module).

use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use host_tests::{TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL, WASM_MT, WASM_ST, Wasmind, describe};
use serde_json::json;

const USAGE: &str = "\
usage: wasmind <command> [options]

commands:
  modules                                  the two modules: size, imports, exports
  info       --model M.gguf                JSON description of a model
  tokenize   --model M.gguf [--special] [--no-add-special] (--json | --jsonl)
                                           text on stdin -> id array (--jsonl: a JSON string per
                                           line in, an id array per line out)
  detokenize --model M.gguf [--special]    id array (JSON) on stdin -> text
  logits     --model M.gguf --ids 1,2,3 --json
                                           top-5 ids per position and the last 4 logit rows
  perplexity --model M.gguf (--text-file F | --ids-file F) [--limit N] --json
  embed      --model DIR --json            JSON string lines on stdin -> {\"ids\", \"embedding\"} lines

options: --threads N (default 1; 0 = the single-threaded module), --ctx N (KV cache length)
";

struct Args {
    command: String,
    rest: Vec<String>,
}

impl Args {
    fn flag(&self, name: &str) -> bool {
        self.rest.iter().any(|a| a == name)
    }
    fn value(&self, name: &str) -> Option<&str> {
        self.rest.iter().position(|a| a == name).and_then(|i| self.rest.get(i + 1)).map(String::as_str)
    }
    fn required(&self, name: &str) -> Result<&str, String> {
        self.value(name).ok_or_else(|| format!("{} needs {name}", self.command))
    }
    fn number(&self, name: &str, default: u32) -> Result<u32, String> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("{name} {v:?} is not a number")),
        }
    }
}

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv[0] == "-h" || argv[0] == "--help" {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let command = argv.remove(0);
    let args = Args { command, rest: argv };
    let result = match args.command.as_str() {
        "modules" => modules(),
        "info" => info(&args),
        "tokenize" => tokenize(&args),
        "detokenize" => detokenize(&args),
        "logits" => logits(&args),
        "perplexity" => perplexity(&args),
        "embed" => embed(&args),
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
    w.load_model_file(&model, args.number("--ctx", 0)?).map_err(s)?;
    Ok(w)
}

fn modules() -> Result<(), String> {
    for (name, bytes) in [("wasmind.wasm", WASM_ST), ("wasmind-mt.wasm", WASM_MT)] {
        let (imports, exports) = describe(bytes).map_err(s)?;
        println!("{name}: {} bytes ({:.1} KiB)", bytes.len(), bytes.len() as f64 / 1024.0);
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
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(s)?;
            if line.trim().is_empty() {
                continue;
            }
            let text: String = serde_json::from_str(&line).map_err(|e| format!("not a JSON string: {e}"))?;
            let ids = w.tokenize(text.as_bytes(), flags).map_err(s)?;
            writeln!(out, "{}", json!(ids)).map_err(s)?;
        }
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
    let ids: Vec<u32> = serde_json::from_str(&input).map_err(|e| format!("not an id array: {e}"))?;
    let text = w.detokenize(&ids, args.flag("--special") as u32).map_err(s)?;
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
    let nll: Vec<f64> = (0..ids.len() - 1).map(|i| -log_softmax_at(&rows[i], ids[i + 1] as usize)).collect();
    let mean = nll.iter().sum::<f64>() / nll.len() as f64;
    let top1: Vec<usize> = rows.iter().map(|r| top_k(r, 1)[0]).collect();
    println!("{}", json!({ "tokens": ids.len(), "mean_nll": mean, "perplexity": mean.exp(), "top1": top1 }));
    Ok(())
}

fn embed(args: &Args) -> Result<(), String> {
    let threads = args.number("--threads", 1)?;
    let mut w = Wasmind::with_threads(threads).map_err(s)?;
    let dim = w.load_embedder_dir(&PathBuf::from(args.required("--model")?)).map_err(s)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(s)?;
        if line.trim().is_empty() {
            continue;
        }
        let text: String = serde_json::from_str(&line).map_err(|e| format!("not a JSON string: {e}"))?;
        let ids = w.embed_ids(text.as_bytes()).map_err(s)?;
        let v = w.embed(text.as_bytes(), dim).map_err(s)?;
        writeln!(out, "{}", json!({ "ids": ids, "embedding": v })).map_err(s)?;
    }
    Ok(())
}
