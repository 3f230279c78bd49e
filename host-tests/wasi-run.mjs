// Runs a wasm32-wasip1 program (a `cargo test` binary) under Node's WASI, with the whole file
// system visible at its own paths. Used as the cargo runner for `--target wasm32-wasip1`, so the
// crate's unit tests also run inside a wasm engine with SIMD128 (see xtask `test`).
import { readFile } from "node:fs/promises";
import { WASI } from "node:wasi";
import process from "node:process";

const [file, ...args] = process.argv.slice(2);
const wasi = new WASI({
  version: "preview1",
  args: [file, ...args],
  env: process.env,
  preopens: { "/": "/" },
  returnOnExit: true,
});
const module = await WebAssembly.compile(await readFile(file));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
process.exitCode = wasi.start(instance);
