//! Building the two WebAssembly modules, shared by `cargo xtask dist` and by the host crate's
//! build script (so `cargo run --bin wasmind` works on a fresh clone without a separate step).
//!
//! Both builds compile the root crate for `wasm32-unknown-unknown` with SIMD128; the threaded one
//! adds `atomics,bulk-memory,mutable-globals`. Their linker arguments come from the crate's own
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

pub const MODULES: [Module; 2] = [SINGLE_THREADED, THREADED];

/// The workspace root (the directory holding the root `Cargo.toml`).
///
/// Read at run time: cargo sets `CARGO_MANIFEST_DIR` for `cargo run` (xtask) and for build scripts
/// (host-tests), both packages one level below the root. The compile-time value is only a fallback:
/// a binary reused from a target directory shared by two checkouts would otherwise build the other
/// checkout's sources.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .expect("xtask and host-tests live one level below the root")
        .to_path_buf()
}

/// Fails with what to run when the active toolchain lacks the rustup target `target` (without
/// it cargo stops on "can't find crate for `core`", which says nothing about the fix).
pub fn require_target(target: &str) -> Result<(), String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .current_dir(workspace_root())
        .output()
        .map_err(|e| format!("cannot run {rustc}: {e}"))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if sysroot.join("lib/rustlib").join(target).is_dir() {
        return Ok(());
    }
    Err(format!(
        "the Rust target {target} is not installed for this toolchain; run \
         `rustup target add {target}` (rust-toolchain.toml lists every target the build uses)"
    ))
}

/// Builds `m` in release mode and returns the path of the `.wasm` cargo produced.
pub fn build_module(m: &Module) -> Result<PathBuf, String> {
    require_target("wasm32-unknown-unknown")?;
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
    cmd.env("CARGO_ENCODED_RUSTFLAGS", m.rustflags.replace(' ', "\x1f"));
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

/// Builds both modules and copies them to `dir/`. Returns their paths.
pub fn build_all_into(dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for m in &MODULES {
        let built = build_module(m)?;
        let dest = dir.join(m.file);
        std::fs::copy(&built, &dest)
            .map_err(|e| format!("cannot copy {} to {}: {e}", built.display(), dest.display()))?;
        out.push(dest);
    }
    Ok(out)
}
