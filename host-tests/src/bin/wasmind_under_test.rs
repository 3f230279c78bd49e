//! The `wasmind` command line, built inside this package so its tests can run it
//! (`env!("CARGO_BIN_EXE_wasmind-under-test")`): the same `wasmind_host::cli::main` as
//! host/src/main.rs.

fn main() -> std::process::ExitCode {
    wasmind_host::cli::main()
}
