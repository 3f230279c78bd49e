//! `wasmind`: the command line over the wasm module, run in wasmtime.
//!
//! Every command runs the real `.wasm` (embedded at build time); `--threads N` starts N-1 helper
//! instances on OS threads over one shared memory.

use std::process::ExitCode;

use host_tests::{WASM_MT, WASM_ST, describe};

const USAGE: &str = "\
usage: wasmind <command> [options]

commands:
  modules               describe the two modules: size, imports, exports
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("modules") => modules(),
        Some("-h") | Some("--help") | None => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmind: {e}");
            ExitCode::FAILURE
        }
    }
}

fn modules() -> Result<(), String> {
    for (name, bytes) in [("wasmind.wasm", WASM_ST), ("wasmind-mt.wasm", WASM_MT)] {
        let (imports, exports) = describe(bytes).map_err(|e| e.to_string())?;
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
