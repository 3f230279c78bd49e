//! Building the two WebAssembly modules, shared by `cargo xtask dist` and by the host crate's
//! build script (so `cargo run --bin wasmind` works on a fresh clone without a separate step).
//!
//! Every build compiles the root crate for `wasm32-unknown-unknown` with SIMD128; the threaded
//! ones add `atomics,bulk-memory,mutable-globals`, the relaxed ones `relaxed-simd` (a second pair
//! of modules for hosts that have it: see `src/quant/simd128.rs`). Their linker arguments come from the crate's own
//! `build.rs`. Each build has its own target directory, so switching between them never
//! recompiles the other.
//!
//! Toolchain: stable Rust (pinned in `rust-toolchain.toml`). The threaded build needs one unstable
//! library feature, `stdarch_wasm_atomic_wait` (the `memory.atomic.wait32`/`notify` intrinsics),
//! so it alone is compiled with `RUSTC_BOOTSTRAP=1`; everything else is plain stable.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Module {
    /// File name under `dist/`.
    pub file: &'static str,
    /// Target directory under the workspace `target/`.
    pub target_dir: &'static str,
    pub rustflags: &'static str,
    pub needs_unstable_intrinsics: bool,
}

pub const SINGLE_THREADED: Module = Module {
    file: "wasmind.wasm",
    target_dir: "wasm-st",
    rustflags: "-Ctarget-feature=+simd128",
    needs_unstable_intrinsics: false,
};

pub const THREADED: Module = Module {
    file: "wasmind-mt.wasm",
    target_dir: "wasm-mt",
    rustflags: "-Ctarget-feature=+atomics,+bulk-memory,+simd128,+mutable-globals",
    needs_unstable_intrinsics: true,
};

/// The single-threaded module with relaxed SIMD (the i8 dot product): hosts that validate it
/// run it instead of `wasmind.wasm` (glue/wasmind.js, the wasmtime host).
///
/// The relaxed builds turn off LLVM's loop strength reduction (`-disable-lsr`): it rewrites the
/// kernels' addresses (`p.add(16)`, `p.add(32)`, ...) as plain i32 arithmetic, so the constant
/// offsets stay `i32.add`s (one `lea` each in V8) instead of becoming the loads' offset fields.
/// Chromium 148, SmolLM2-135M Q4_1, one thread: prefill 357-365 tok/s against 337-350, the
/// first token of a long prompt 3.8 s against 4.0, decode the same. (The SIMD128 build: no
/// difference beyond noise, so it keeps LLVM's default.)
pub const RELAXED: Module = Module {
    file: "wasmind-relaxed.wasm",
    target_dir: "wasm-relaxed-st",
    rustflags: "-Ctarget-feature=+simd128,+relaxed-simd -Cllvm-args=-disable-lsr",
    needs_unstable_intrinsics: false,
};

/// The threaded module with relaxed SIMD (and without loop strength reduction, as [`RELAXED`]).
pub const RELAXED_THREADED: Module = Module {
    file: "wasmind-relaxed-mt.wasm",
    target_dir: "wasm-relaxed-mt",
    rustflags: "-Ctarget-feature=+atomics,+bulk-memory,+simd128,+relaxed-simd,+mutable-globals -Cllvm-args=-disable-lsr",
    needs_unstable_intrinsics: true,
};

pub const MODULES: [Module; 4] = [SINGLE_THREADED, THREADED, RELAXED, RELAXED_THREADED];

/// Code-generation flags every module is built with, on top of its target features.
///
/// `-inline-threshold=50` (LLVM's default at `-O3` is 250): the hot kernels are
/// `#[inline(always)]` down to their helpers, so the general inliner mostly decides for the cold
/// code (loading, parsing, tokenizer set-up, JSON, grammars), where copying a callee into each
/// caller buys nothing measurable; the few per-word or per-value helpers of the hot loops are
/// marked `#[inline]` themselves. Each module is ~110 KiB smaller (the relaxed one 638 KiB
/// instead of 747 when measured, before the prepared-row kernels). Against the default in the
/// same session (best of 2, ±3 %):
/// Chromium, SmolLM2 Q4_1, prefill / decode tok/s, relaxed 262-264 / 103-104 vs 261-263 /
/// 101-105 single-threaded and 450-469 / 177-184 vs 462-465 / 176-177 on 2 threads, SIMD128
/// 169-172 / 92-94 vs 161-172 / 86-93; long-prompt prefill in Node equal (130.7 vs 130.8);
/// tokenizer 104-105 vs 106-108 MB/s; `embed` per text in wasmtime 415-416 k vs 410-415 k.
/// (Below 50 the tokenizer lost 3 %; lowering LLVM's unroll or inline-hint thresholds as well
/// shrinks the modules further but costs prefill 12-38 %: the kernels' constant-count loops
/// rely on full unrolling.)
pub const CODEGEN_FLAGS: &str = "-Cllvm-args=-inline-threshold=50";

/// The workspace root (the directory holding the root `Cargo.toml`).
///
/// Read at run time: cargo sets `CARGO_MANIFEST_DIR` for `cargo run` (xtask) and for build scripts
/// (host), both packages one level below the root. The compile-time value is only a fallback:
/// a binary reused from a target directory shared by two checkouts would otherwise build the other
/// checkout's sources.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .expect("xtask and host live one level below the root")
        .to_path_buf()
}

/// Fails with what to run when the active toolchain lacks the rustup target `target` (without
/// it cargo stops on "can't find crate for `core`", which says nothing about the fix); returns
/// the toolchain's sysroot.
pub fn require_target(target: &str) -> Result<PathBuf, String> {
    let sysroot = sysroot()?;
    if sysroot.join("lib/rustlib").join(target).is_dir() {
        return Ok(sysroot);
    }
    Err(format!(
        "the Rust target {target} is not installed for this toolchain; run \
         `rustup target add {target}` (rust-toolchain.toml lists every target the build uses)"
    ))
}

/// The active toolchain's sysroot (`rustc --print sysroot`, in the workspace so that
/// rust-toolchain.toml applies).
fn sysroot() -> Result<PathBuf, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .current_dir(workspace_root())
        .output()
        .map_err(|e| format!("cannot run {rustc}: {e}"))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Builds `m` in release mode and returns the path of the `.wasm` cargo produced.
pub fn build_module(m: &Module) -> Result<PathBuf, String> {
    let sysroot = require_target("wasm32-unknown-unknown")?;
    let root = workspace_root();
    let target_dir = root.join("target").join(m.target_dir);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        // Only the cdylib: with the rlib beside it cargo would not run LTO, and LTO is what
        // recompiles `core` with the threaded build's target features.
        .args([
            "rustc",
            "--release",
            "--lib",
            "--package",
            "wasmind",
            "--crate-type",
            "cdylib",
        ])
        .args(["--target", "wasm32-unknown-unknown"])
        .arg("--target-dir")
        .arg(&target_dir);
    // A build script's environment describes the outer build; none of it applies here.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let outer = key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_MAKEFLAGS";
        if outer
            || key.starts_with("RUSTC")
            || key == "RUSTFLAGS"
            || key == "TARGET"
            || key == "HOST"
            || key == "OUT_DIR"
            || key == "OPT_LEVEL"
            || key == "PROFILE"
            || key == "DEBUG"
        {
            cmd.env_remove(&key);
        }
    }
    let mut flags: Vec<String> = format!("{} {CODEGEN_FLAGS}", m.rustflags)
        .split(' ')
        .map(String::from)
        .collect();
    flags.extend(remap_source_paths(&sysroot));
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"));
    cmd.env("CARGO_PROFILE_RELEASE_LTO", "fat");
    cmd.env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    cmd.env("CARGO_PROFILE_RELEASE_PANIC", "abort");
    if m.needs_unstable_intrinsics {
        cmd.env("RUSTC_BOOTSTRAP", "1");
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building {} failed ({status})", m.file));
    }
    Ok(target_dir.join("wasm32-unknown-unknown/release/wasmind.wasm"))
}

/// `--remap-path-prefix` flags that write the source paths a module keeps (its panic
/// locations name their files) the same on every machine: the standard library's sources
/// (`<sysroot>/lib/rustlib/src/rust`, under the rustup home) as `/rust`, the crates from the
/// registry (`$CARGO_HOME/registry/src`) as `/crates`. Without them the bytes of a module
/// depended on where rustup and cargo keep their files (and the paths were ~1 KB longer).
fn remap_source_paths(sysroot: &Path) -> Vec<String> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let mut remaps = vec![(sysroot.join("lib/rustlib/src/rust"), "/rust")];
    if let Some(home) = cargo_home {
        remaps.push((home.join("registry/src"), "/crates"));
    }
    remaps
        .into_iter()
        .map(|(from, to)| format!("--remap-path-prefix={}={to}", from.display()))
        .collect()
}

/// Builds every module and writes them to `dir/` without their custom sections, each with its
/// symbols file beside it (`wasmind.symbols.txt` for `wasmind.wasm`, see [`strip`]). Returns the
/// paths of the modules.
pub fn build_all_into(dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for m in &MODULES {
        let built = build_module(m)?;
        let bytes =
            std::fs::read(&built).map_err(|e| format!("cannot read {}: {e}", built.display()))?;
        let (module, symbols) = strip(&bytes).map_err(|e| format!("{}: {e}", built.display()))?;
        let dest = dir.join(m.file);
        let symbols_path = dir.join(m.file.replace(".wasm", ".symbols.txt"));
        for (path, data) in [(&dest, &module[..]), (&symbols_path, symbols.as_bytes())] {
            std::fs::write(path, data)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        out.push(dest);
    }
    Ok(out)
}

/// Splits a module built by rustc into the module without its custom sections (`name`,
/// `producers`, `target_features`: no host reads them, and the name section alone was ~40 KB)
/// and a symbols file made from the name section, one line per defined function:
/// `index offset name`, the index as wasmtime (`<wasm function N>`) and V8 (`wasm-function[N]`)
/// print it in a trap's backtrace, the offset (hex) where the function's body starts in the
/// module (backtraces print `0x...` offsets in the same file), and the name demangled. The
/// custom sections follow the code, so offsets are the same in both.
pub fn strip(wasm: &[u8]) -> Result<(Vec<u8>, String), String> {
    use wasmparser::{KnownCustom, Name, Parser, Payload, TypeRef};
    let mut module = wasm.get(..8).ok_or("not a wasm module")?.to_vec();
    let (mut names, mut bodies, mut imported_funcs) = (Vec::new(), Vec::new(), 0u32);
    // A section's bytes run from the end of the one before it (its id and size first) to the
    // end of its contents.
    let mut section_start = 8;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| e.to_string())?;
        match &payload {
            Payload::ImportSection(r) => {
                for import in r.clone() {
                    let import = import.map_err(|e| e.to_string())?;
                    imported_funcs += matches!(import.ty, TypeRef::Func(_)) as u32;
                }
            }
            Payload::CodeSectionEntry(body) => bodies.push(body.range().start),
            Payload::CustomSection(c) => {
                if let KnownCustom::Name(reader) = c.as_known() {
                    for name in reader {
                        if let Name::Function(map) = name.map_err(|e| e.to_string())? {
                            for naming in map {
                                let naming = naming.map_err(|e| e.to_string())?;
                                names.push((naming.index, naming.name.to_string()));
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        if let Some((id, range)) = payload.as_section() {
            if id != 0 {
                module.extend_from_slice(&wasm[section_start..range.end]);
            }
            section_start = range.end;
        }
    }
    let mut symbols =
        String::from("# index offset name (functions of the module beside this file)\n");
    for (index, name) in names {
        let Some(&offset) = index
            .checked_sub(imported_funcs)
            .and_then(|i| bodies.get(i as usize))
        else {
            continue; // an imported function: not in this module's code
        };
        let name = rustc_demangle::demangle(&name);
        symbols.push_str(&format!("{index} {offset:#x} {name:#}\n"));
    }
    Ok((module, symbols))
}
