// Runs a wasm32-wasip1 program (a `cargo test` binary) under Node's WASI, with the whole file
// system visible at its own paths. Used as the cargo runner for `--target wasm32-wasip1`, so the
// crate's unit tests also run inside a wasm engine with SIMD128 (see xtask `test`).
//
// The program runs in a child process that reports its exit code over IPC and is then killed:
// Node 20 has crashed (SIGSEGV) while tearing down a process whose wasm heap had grown to
// hundreds of MiB, after the program itself had finished and passed.
import { readFile } from "node:fs/promises";
import { fork } from "node:child_process";
import { WASI } from "node:wasi";
import process from "node:process";

if (process.send && process.env.WASI_RUN_CHILD) {
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
  const code = wasi.start(instance);
  process.send({ code }, () => process.exit(code));
} else {
  const child = fork(new URL(import.meta.url).pathname, process.argv.slice(2), {
    stdio: "inherit",
    env: { ...process.env, WASI_RUN_CHILD: "1" },
    // The relaxed-SIMD build of the tests (xtask sets WASI_RUN_RELAXED=1): relaxed SIMD is
    // behind a flag in Node 20, and Node 20's baseline compiler (Liftoff) gets
    // `i32x4.relaxed_dot_i8x16_i7x16_add_s` wrong (it drops the accumulator), so everything is
    // compiled by the optimizing tier.
    execArgv: [
      "--no-warnings",
      "--single-threaded-gc",
      ...(process.env.WASI_RUN_RELAXED === "1" ? ["--experimental-wasm-relaxed-simd", "--no-liftoff"] : []),
    ],
  });
  let reported = null;
  child.on("message", (m) => {
    reported = m.code;
    child.kill("SIGKILL");
  });
  child.on("exit", (code, signal) => {
    if (reported !== null) process.exit(reported);
    console.error(`wasi-run: the program ended without reporting (code ${code}, signal ${signal})`);
    process.exit(code || 1);
  });
}
