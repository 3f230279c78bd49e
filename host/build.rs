//! Builds the wasm modules (through the xtask library, the same code as `cargo xtask dist`) and
//! puts them in OUT_DIR, where the host library embeds them. So `cargo run --bin wasmind` and
//! `cargo test -p host-tests` (through this crate) work from a fresh clone with no separate build step.

use std::path::PathBuf;

fn main() {
    let root = xtask::workspace_root();
    for p in [
        "src",
        "build.rs",
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    if let Err(e) = xtask::build_all_into(&out) {
        panic!("building the wasm modules failed: {e}");
    }
}
