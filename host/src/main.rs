//! The `wasmind` command line (host/src/cli.rs): `cargo install --path host` installs it.

fn main() -> std::process::ExitCode {
    wasmind_host::cli::main()
}
