//! A wasmtime host for wasmind: the modules (embedded at build time), a driver instance on a
//! shared memory, and helper instances on OS threads, each with its own stack.
//!
//! The `wasmind` command line ([`cli`], with its OpenAI-compatible server [`serve`]) and the
//! integration tests (host-tests/) use this.

pub mod cli;
pub mod serve;

use std::thread::JoinHandle;

use wasmind::chat::Role;
use wasmind::error::Status;

use wasmtime::{
    Config, Engine, Instance, Memory, Module, SharedMemory, Store, TypedFunc, Val, WasmParams,
    WasmResults,
};

pub use wasmtime::Result;

/// The single-threaded module: no imports, exports its memory.
pub const WASM_ST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/wasmind.wasm"));
/// The threaded module: imports a shared `env.memory`.
pub const WASM_MT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/wasmind-mt.wasm"));
/// [`WASM_ST`] built with relaxed SIMD.
pub const WASM_RELAXED_ST: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/wasmind-relaxed.wasm"));
/// [`WASM_MT`] built with relaxed SIMD.
pub const WASM_RELAXED_MT: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/wasmind-relaxed-mt.wasm"));

/// The function names of each module (`dist/*.symbols.txt`: index, code offset, name), by file.
pub const SYMBOLS: [(&str, &str); 4] = [
    (
        "wasmind.wasm",
        include_str!(concat!(env!("OUT_DIR"), "/wasmind.symbols.txt")),
    ),
    (
        "wasmind-mt.wasm",
        include_str!(concat!(env!("OUT_DIR"), "/wasmind-mt.symbols.txt")),
    ),
    (
        "wasmind-relaxed.wasm",
        include_str!(concat!(env!("OUT_DIR"), "/wasmind-relaxed.symbols.txt")),
    ),
    (
        "wasmind-relaxed-mt.wasm",
        include_str!(concat!(env!("OUT_DIR"), "/wasmind-relaxed-mt.symbols.txt")),
    ),
];

/// Which instruction set a module was built for: SIMD128 only, or with relaxed SIMD (the i8 dot
/// product; faster, same results up to the f32 rounding of the kernels that differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    Simd128,
    Relaxed,
}

impl Build {
    pub const ALL: [Build; 2] = [Build::Simd128, Build::Relaxed];

    pub fn name(self) -> &'static str {
        match self {
            Build::Simd128 => "simd128",
            Build::Relaxed => "relaxed",
        }
    }

    /// The module's bytes: `(single-threaded, threaded)`.
    pub fn modules(self) -> (&'static [u8], &'static [u8]) {
        match self {
            Build::Simd128 => (WASM_ST, WASM_MT),
            Build::Relaxed => (WASM_RELAXED_ST, WASM_RELAXED_MT),
        }
    }

    /// The build this process runs: `WASMIND_BUILD=simd128` or `relaxed`; relaxed when unset
    /// (wasmtime runs relaxed SIMD on every host it supports). Any other value is an error.
    pub fn current() -> Result<Build> {
        match std::env::var("WASMIND_BUILD").as_deref() {
            Err(_) | Ok("") | Ok("relaxed") => Ok(Build::Relaxed),
            Ok("simd128") => Ok(Build::Simd128),
            Ok(other) => Err(wasmtime::format_err!(
                "WASMIND_BUILD={other:?}: use simd128 or relaxed"
            )),
        }
    }
}

/// How Cranelift lowers the relaxed-SIMD instructions whose results the spec leaves to the
/// engine, and the x86 features it may use. The relaxed build keeps every integer dot exact on
/// any lowering (`src/quant/simd128/dot_i8.rs`), so what can move its logits is
/// `f32x4.relaxed_madd`: fused where the engine has a fused multiply-add, a multiply then an
/// add where not. The tests run the decisive checks under each (host-tests/tests/lowerings.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lowering {
    /// The host's own features (x86 with SSSE3, SSE4.1, AVX and FMA3: the i8 dots as
    /// `pmaddubsw` then `pmaddwd`-like widening adds, `relaxed_madd` fused, laneselect as
    /// `blendv`; no engine here uses AVX-VNNI's `vpdpbusd` for it).
    Native,
    /// `Config::relaxed_simd_deterministic`: the i8 dots widened to exact i16/i32 products,
    /// `relaxed_madd` always fused (a call where the CPU has no FMA), laneselect a bitselect.
    Deterministic,
    /// x86 without FMA3 (Cranelift's `has_fma` off): `relaxed_madd` unfused, as on CPUs
    /// before Haswell and in V8 with `--no-enable-fma3`.
    NoFma,
    /// x86 at SSE4.1 (no AVX, AVX2, FMA3 or AVX-512): the legacy SSE encodings, unfused madd.
    Sse41,
}

impl Lowering {
    pub const ALL: [Lowering; 4] = [
        Lowering::Native,
        Lowering::Deterministic,
        Lowering::NoFma,
        Lowering::Sse41,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Lowering::Native => "native",
            Lowering::Deterministic => "deterministic",
            Lowering::NoFma => "no-fma",
            Lowering::Sse41 => "sse41",
        }
    }

    /// The lowering this process uses: `WASMIND_LOWERING=native|deterministic|no-fma|sse41`
    /// (native when unset). Any other value is an error.
    pub fn current() -> Result<Lowering> {
        match std::env::var("WASMIND_LOWERING").as_deref() {
            Err(_) | Ok("") => Ok(Lowering::Native),
            Ok(name) => Lowering::ALL
                .into_iter()
                .find(|l| l.name() == name)
                .ok_or_else(|| {
                    wasmtime::format_err!(
                        "WASMIND_LOWERING={name:?}: use native, deterministic, no-fma or sse41"
                    )
                }),
        }
    }

    /// Cranelift's x86 feature flags this lowering turns off.
    fn x86_flags_off(self) -> &'static [&'static str] {
        const AVX512: [&str; 6] = [
            "has_avx512bitalg",
            "has_avx512dq",
            "has_avx512vl",
            "has_avx512vbmi",
            "has_avx512f",
            "has_avx512vnni",
        ];
        const SSE41: [&str; 9] = [
            "has_avx", "has_avx2", "has_fma", AVX512[0], AVX512[1], AVX512[2], AVX512[3],
            AVX512[4], AVX512[5],
        ];
        match self {
            Lowering::Native | Lowering::Deterministic => &[],
            Lowering::NoFma => &["has_fma"],
            Lowering::Sse41 => &SSE41,
        }
    }
}

/// Bytes of each helper's stack.
pub const HELPER_STACK_BYTES: u32 = 1 << 20;
/// Largest shared memory the host creates, in 64 KiB pages (4 GiB, the wasm32 limit).
pub const MAX_PAGES: u32 = 65_536;

/// The process's wasmtime engine for [`Lowering::current`] (one per lowering, shared: its
/// compiled-module cache and worker with it).
pub fn engine() -> Result<Engine> {
    engine_for(Lowering::current()?)
}

/// The process's wasmtime engine that lowers relaxed SIMD as `lowering` says.
pub fn engine_for(lowering: Lowering) -> Result<Engine> {
    static ENGINES: std::sync::Mutex<Vec<(Lowering, Engine)>> = std::sync::Mutex::new(Vec::new());
    let mut engines = ENGINES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, e)) = engines.iter().find(|(l, _)| *l == lowering) {
        return Ok(e.clone());
    }
    let e = new_engine(lowering)?;
    engines.push((lowering, e.clone()));
    Ok(e)
}

fn new_engine(lowering: Lowering) -> Result<Engine> {
    let mut config = Config::new();
    config
        .wasm_threads(true)
        .shared_memory(true)
        .wasm_simd(true)
        .relaxed_simd_deterministic(lowering == Lowering::Deterministic);
    let flags = lowering.x86_flags_off();
    if !flags.is_empty() && !cfg!(target_arch = "x86_64") {
        wasmtime::bail!("lowering {} is for x86-64 hosts only", lowering.name());
    }
    for flag in flags {
        // SAFETY: turning a CPU feature off only narrows the instructions Cranelift may
        // emit; the engine still checks the flags it keeps against the host.
        unsafe {
            config.cranelift_flag_set(flag, "false");
        }
    }
    // Compiled modules are kept in wasmtime's cache (its default directory, ~/.cache/wasmtime),
    // so a command starts without compiling the module again. `WASMIND_NO_CACHE=1` turns it off.
    if std::env::var_os("WASMIND_NO_CACHE").is_none_or(|v| v != "1") {
        match wasmtime::Cache::new(wasmtime::CacheConfig::new()) {
            Ok(cache) => {
                config.cache(Some(cache));
            }
            Err(e) => eprintln!("wasmind: compiling without wasmtime's cache ({e})"),
        }
    }
    // `WASMIND_PERFMAP=1`: write /tmp/perf-PID.map so `perf report` names the module's functions.
    if std::env::var_os("WASMIND_PERFMAP").is_some_and(|v| v == "1") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    Engine::new(&config)
}

/// Where the module's memory lives: its own (single-threaded) or a shared one.
#[derive(Clone)]
enum Mem {
    Own(Memory),
    Shared(SharedMemory),
}

/// One running wasmind: the driver instance plus any helpers.
pub struct Wasmind {
    pub engine: Engine,
    pub module: Module,
    pub store: Store<()>,
    pub instance: Instance,
    mem: Mem,
    helpers: Vec<JoinHandle<Result<i32>>>,
}

impl Wasmind {
    /// The single-threaded module of [`Build::current`], on its own memory.
    pub fn single_threaded() -> Result<Wasmind> {
        Wasmind::single_threaded_from(Build::current()?.modules().0)
    }

    /// The single-threaded module from `bytes` (e.g. `dist/wasmind.wasm`) instead of the embedded one.
    pub fn single_threaded_from(bytes: &[u8]) -> Result<Wasmind> {
        Wasmind::single_threaded_on(engine()?, bytes)
    }

    /// [`Wasmind::single_threaded_from`] compiled by `engine` (e.g. [`engine_for`] a lowering).
    pub fn single_threaded_on(engine: Engine, bytes: &[u8]) -> Result<Wasmind> {
        let module = Module::new(&engine, bytes)?;
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[])?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| wasmtime::format_err!("module exports no memory"))?;
        Ok(Wasmind {
            engine,
            module,
            store,
            instance,
            mem: Mem::Own(memory),
            helpers: Vec::new(),
        })
    }

    /// The threaded module of [`Build::current`] on a new shared memory, with `threads - 1`
    /// helpers on OS threads.
    pub fn threaded(threads: u32) -> Result<Wasmind> {
        Wasmind::threaded_from(Build::current()?.modules().1, threads)
    }

    /// The threaded module from `bytes` (e.g. `dist/wasmind-mt.wasm`) instead of the embedded one.
    pub fn threaded_from(bytes: &[u8], threads: u32) -> Result<Wasmind> {
        Wasmind::threaded_on(engine()?, bytes, threads)
    }

    /// [`Wasmind::threaded_from`] compiled by `engine` (e.g. [`engine_for`] a lowering).
    pub fn threaded_on(engine: Engine, bytes: &[u8], threads: u32) -> Result<Wasmind> {
        let module = Module::new(&engine, bytes)?;
        let min_pages = module
            .imports()
            .find_map(|i| i.ty().memory().map(|m| m.minimum()))
            .ok_or_else(|| wasmtime::format_err!("module imports no memory"))?;
        let memory = SharedMemory::new(
            &engine,
            wasmtime::MemoryType::shared(min_pages as u32, MAX_PAGES),
        )?;
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[memory.clone().into()])?;
        let mut w = Wasmind {
            engine,
            module,
            store,
            instance,
            mem: Mem::Shared(memory),
            helpers: Vec::new(),
        };
        w.start_helpers(threads.saturating_sub(1))?;
        w.call::<u32, i32>("pool_set_threads", threads.max(1))?;
        Ok(w)
    }

    /// A second instance of the threaded module on this memory, with its own stack of
    /// `stack_bytes` (allocated through the driver). Used by helpers and by tests.
    pub fn instance_on_shared_memory(&mut self, stack_bytes: u32) -> Result<(Store<()>, Instance)> {
        let Mem::Shared(memory) = &self.mem else {
            wasmtime::bail!("the single-threaded module cannot share its memory");
        };
        let memory = memory.clone();
        let stack = self.call::<u32, u32>("alloc", stack_bytes)?;
        if stack == 0 {
            wasmtime::bail!("cannot allocate a helper stack");
        }
        let mut store = Store::new(&self.engine, ());
        let instance = Instance::new(&mut store, &self.module, &[memory.into()])?;
        let sp = instance
            .get_global(&mut store, "__stack_pointer")
            .ok_or_else(|| wasmtime::format_err!("module does not export __stack_pointer"))?;
        // The stack grows down from the top of its block; keep 16-byte alignment.
        sp.set(&mut store, Val::I32(((stack + stack_bytes) & !15) as i32))?;
        Ok((store, instance))
    }

    fn start_helpers(&mut self, n: u32) -> Result<()> {
        for id in 0..n {
            let (mut store, instance) = self.instance_on_shared_memory(HELPER_STACK_BYTES)?;
            let run = instance.get_typed_func::<u32, i32>(&mut store, "helper_loop")?;
            self.helpers
                .push(std::thread::spawn(move || run.call(&mut store, id)));
        }
        // Wait until every helper is listening, so the first job uses them all.
        let start = std::time::Instant::now();
        while (self.call::<(), i32>("pool_helpers_ready", ())? as u32) < n {
            if start.elapsed().as_secs() > 30 {
                wasmtime::bail!("helpers did not start");
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    pub fn func<P: WasmParams, R: WasmResults>(&mut self, name: &str) -> Result<TypedFunc<P, R>> {
        self.instance.get_typed_func::<P, R>(&mut self.store, name)
    }

    pub fn call<P: WasmParams, R: WasmResults>(&mut self, name: &str, args: P) -> Result<R> {
        let f = self.func::<P, R>(name)?;
        f.call(&mut self.store, args)
    }

    /// Calls a status-returning export and [`check`](Self::check)s what it returns.
    pub fn call_checked<P: WasmParams>(&mut self, name: &str, args: P) -> Result<i32> {
        let value = self.call::<P, i32>(name, args)?;
        self.check(name, value)
    }

    /// A status-returning call: `Ok(value)` if `>= 0`, else the module's error message.
    pub fn check(&mut self, name: &str, value: i32) -> Result<i32> {
        if value >= 0 {
            return Ok(value);
        }
        let msg = self.last_error()?;
        wasmtime::bail!("{name} failed ({value}): {msg}")
    }

    pub fn last_error(&mut self) -> Result<String> {
        let ptr = self.call::<(), u32>("last_error", ())?;
        let len = self.call::<(), u32>("last_error_len", ())?;
        Ok(String::from_utf8_lossy(&self.read(ptr, len as usize)).into_owned())
    }

    /// Base pointer and current length of linear memory.
    fn raw(&mut self) -> (*mut u8, usize) {
        match &self.mem {
            Mem::Own(m) => (m.data_ptr(&self.store), m.data_size(&self.store)),
            Mem::Shared(m) => {
                let d = m.data();
                (d.as_ptr() as *mut u8, d.len())
            }
        }
    }

    /// Copies `len` bytes out of linear memory (zero-filled past the end).
    pub fn read(&mut self, ptr: u32, len: usize) -> Vec<u8> {
        let (base, size) = self.raw();
        let mut out = vec![0u8; len];
        let start = (ptr as usize).min(size);
        let n = len.min(size - start);
        // SAFETY: the range is inside linear memory; the module is not running (we hold the
        // store), and helpers only write memory while a driver call is in progress.
        unsafe { std::ptr::copy_nonoverlapping(base.add(start), out.as_mut_ptr(), n) };
        out
    }

    /// Copies `bytes` into linear memory at `ptr`. Panics if out of range (a host bug).
    pub fn write(&mut self, ptr: u32, bytes: &[u8]) {
        let (base, size) = self.raw();
        assert!(
            ptr as usize + bytes.len() <= size,
            "write past the end of linear memory"
        );
        // SAFETY: in range, and no wasm code runs during the copy (see `read`).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(ptr as usize), bytes.len())
        };
    }

    /// Allocates `bytes.len()` bytes in the module and copies `bytes` there.
    pub fn put(&mut self, bytes: &[u8]) -> Result<u32> {
        let Ok(len) = u32::try_from(bytes.len()) else {
            wasmtime::bail!(
                "out of memory: {} bytes cannot fit in a wasm32 module's memory (4 GiB at most)",
                bytes.len()
            );
        };
        let ptr = self.call::<u32, u32>("alloc", len)?;
        if ptr == 0 && len > 0 {
            wasmtime::bail!(
                "out of memory: alloc({len}) failed (the memory holds {} bytes and can grow to 4 GiB at most)",
                self.memory_bytes()
            );
        }
        self.write(ptr, bytes);
        Ok(ptr)
    }

    pub fn memory_bytes(&mut self) -> usize {
        self.raw().1
    }

    /// Releases the helpers and waits for their threads to end.
    /// Releases the helpers and joins their threads; the first helper's trap (if any) is the
    /// error. A helper still inside `helper_loop` 5 s after `pool_shutdown` (one that stalled
    /// holding a chunk: wasmtime cannot end a thread asleep in `memory.atomic.wait32`) is left
    /// behind, detached, and named in the error.
    pub fn shutdown(&mut self) -> Result<()> {
        self.call::<(), ()>("pool_shutdown", ())?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut first_error = None;
        for (id, h) in self.helpers.drain(..).enumerate() {
            while !h.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let r = if h.is_finished() {
                h.join()
                    .unwrap_or_else(|_| Err(wasmtime::format_err!("a helper thread panicked")))
            } else {
                Err(wasmtime::format_err!(
                    "helper {id} did not leave helper_loop"
                ))
            };
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Wasmind {
    fn drop(&mut self) {
        if !self.helpers.is_empty() {
            let _ = self.shutdown();
        }
    }
}

/// An import: module, name, kind.
pub type ImportName = (String, String, String);
/// An export: name, kind.
pub type ExportName = (String, String);

/// Names of a module's imports and exports, for the command line and the tests.
pub fn describe(bytes: &[u8]) -> Result<(Vec<ImportName>, Vec<ExportName>)> {
    let engine = engine()?;
    let module = Module::new(&engine, bytes)?;
    let imports = module
        .imports()
        .map(|i| {
            (
                i.module().to_string(),
                i.name().to_string(),
                format!("{:?}", i.ty()),
            )
        })
        .collect();
    let exports = module
        .exports()
        .map(|e| (e.name().to_string(), format!("{:?}", e.ty())))
        .collect();
    Ok((imports, exports))
}

/// `tokenize` flags (wasmind.h).
pub use wasmind::engine::llm::{TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL};

/// Typed calls over the engine exports: load a model or embedder from files, tokenize, run.
impl Wasmind {
    /// Either the threaded module with `threads - 1` helpers, or (threads == 0) the
    /// single-threaded module.
    pub fn with_threads(threads: u32) -> Result<Wasmind> {
        Wasmind::with_build(Build::current()?, threads)
    }

    /// [`Wasmind::with_threads`] with the modules of `build`.
    pub fn with_build(build: Build, threads: u32) -> Result<Wasmind> {
        Wasmind::with_lowering(build, Lowering::current()?, threads)
    }

    /// [`Wasmind::with_build`] compiled with `lowering`'s engine.
    pub fn with_lowering(build: Build, lowering: Lowering, threads: u32) -> Result<Wasmind> {
        let engine = engine_for(lowering)?;
        let (single, threaded) = build.modules();
        if threads == 0 {
            Wasmind::single_threaded_on(engine, single)
        } else {
            Wasmind::threaded_on(engine, threaded, threads)
        }
    }

    /// Copies a GGUF file into the module and loads it (`context` 0: the model's own, capped).
    pub fn load_model_bytes(&mut self, bytes: &[u8], context: u32) -> Result<()> {
        self.call::<u32, i32>("set_context", context)?;
        let ptr = self.put(bytes)?;
        self.call_checked::<(u32, u32)>("load_model", (ptr, bytes.len() as u32))?;
        Ok(())
    }

    /// The type the next model load turns F32/F16/BF16 matrices into: 0 = as stored, 8 = Q8_0.
    pub fn set_quantize(&mut self, ggml_type: u32) -> Result<()> {
        self.call_checked::<u32>("set_quantize", ggml_type)?;
        Ok(())
    }

    /// Reads and loads a model file; one that cannot fit in a wasm32 memory is refused before
    /// anything is read.
    pub fn load_model_file(&mut self, path: &std::path::Path, context: u32) -> Result<()> {
        let len = std::fs::metadata(path)
            .map_err(|e| wasmtime::format_err!("{}: {e}", path.display()))?
            .len();
        let max = MAX_PAGES as u64 * 65_536;
        if len >= max {
            wasmtime::bail!(
                "out of memory: {} is {len} bytes, and a wasm32 module's memory holds at most {max} bytes (4 GiB) with the model's cache beside it",
                path.display()
            );
        }
        let bytes =
            std::fs::read(path).map_err(|e| wasmtime::format_err!("{}: {e}", path.display()))?;
        self.load_model_bytes(&bytes, context)
    }

    /// The bytes of the result buffer after a text-returning call that returned `len`.
    pub fn result(&mut self, len: i32) -> Result<Vec<u8>> {
        let ptr = self.call::<(), u32>("result_ptr", ())?;
        Ok(self.read(ptr, len as usize))
    }

    pub fn model_info(&mut self) -> Result<String> {
        let n = self.call_checked::<()>("model_info", ())?;
        Ok(String::from_utf8_lossy(&self.result(n)?).into_owned())
    }

    /// Allocates, runs `f(ptr)`, frees.
    fn with_buffer<T>(
        &mut self,
        bytes: &[u8],
        f: impl FnOnce(&mut Self, u32) -> Result<T>,
    ) -> Result<T> {
        let ptr = self.put(bytes)?;
        let r = f(self, ptr);
        self.call::<(u32, u32), ()>("free", (ptr, bytes.len().max(1) as u32))?;
        r
    }

    fn ids_bytes(ids: &[u32]) -> Vec<u8> {
        ids.iter().flat_map(|i| i.to_le_bytes()).collect()
    }

    fn read_u32s(&mut self, ptr: u32, n: usize) -> Vec<u32> {
        self.read(ptr, n * 4)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn read_f32s(&mut self, ptr: u32, n: usize) -> Vec<f32> {
        self.read(ptr, n * 4)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Text (any bytes: invalid UTF-8 is the module's to reject) -> ids.
    pub fn tokenize(&mut self, text: &[u8], flags: u32) -> Result<Vec<u32>> {
        let cap = text.len() + 8;
        let out = self.put(&vec![0u8; cap * 4])?;
        let r = self.with_buffer(text, |w, t| {
            let n = w.call_checked::<(u32, u32, u32, u32, u32)>(
                "tokenize",
                (t, text.len() as u32, flags, out, cap as u32),
            )? as usize;
            assert!(n <= cap, "more ids than bytes");
            Ok(w.read_u32s(out, n))
        });
        self.call::<(u32, u32), ()>("free", (out, (cap * 4) as u32))?;
        r
    }

    pub fn detokenize(&mut self, ids: &[u32], flags: u32) -> Result<Vec<u8>> {
        let bytes = Self::ids_bytes(ids);
        self.with_buffer(&bytes, |w, p| {
            let n =
                w.call_checked::<(u32, u32, u32)>("detokenize", (p, ids.len() as u32, flags))?;
            w.result(n)
        })
    }

    /// One more token's complete text (streaming); `None` flushes.
    pub fn detokenize_stream(&mut self, id: Option<u32>, flags: u32) -> Result<Vec<u8>> {
        let n = self
            .call::<(i32, u32), i32>("detokenize_stream", (id.map_or(-1, |i| i as i32), flags))?;
        let n = self.check("detokenize_stream", n)?;
        self.result(n)
    }

    pub fn vocab(&mut self) -> Result<usize> {
        let info = self.model_info()?;
        let v: serde_json::Value = serde_json::from_str(&info)?;
        v["vocab"]
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| wasmtime::format_err!("model has no weights"))
    }

    /// Runs `ids` and returns the logits after each of them (`(n, vocab)`), in chunks of 32.
    pub fn prefill_logits(&mut self, ids: &[u32]) -> Result<Vec<Vec<f32>>> {
        let vocab = self.vocab()?;
        const CHUNK: usize = 32;
        let out = self.put(&vec![0u8; CHUNK * vocab * 4])?;
        let mut all = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            let bytes = Self::ids_bytes(chunk);
            let flat = self.with_buffer(&bytes, |w, p| {
                let r =
                    w.call::<(u32, u32, u32), i32>("prefill_logits", (p, chunk.len() as u32, out))?;
                w.check("prefill_logits", r)?;
                Ok(w.read_f32s(out, chunk.len() * vocab))
            })?;
            all.extend(flat.chunks_exact(vocab).map(|r| r.to_vec()));
        }
        self.call::<(u32, u32), ()>("free", (out, (CHUNK * vocab * 4) as u32))?;
        Ok(all)
    }

    /// Runs `ids` (batched) and returns the last logits.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        let vocab = self.vocab()?;
        let bytes = Self::ids_bytes(ids);
        self.with_buffer(&bytes, |w, p| {
            w.call_checked::<(u32, u32)>("prefill", (p, ids.len() as u32))?;
            let l = w.call::<(), u32>("logits", ())?;
            Ok(w.read_f32s(l, vocab))
        })
    }

    /// Runs one token; returns its logits.
    pub fn step(&mut self, id: u32, vocab: usize) -> Result<Vec<f32>> {
        let p = self.call::<u32, u32>("step", id)?;
        if p == 0 {
            let code = self.call::<(), i32>("last_error_code", ())?;
            self.check("step", code)?;
        }
        Ok(self.read_f32s(p, vocab))
    }

    pub fn reset(&mut self) -> Result<()> {
        self.call_checked::<()>("reset", ())?;
        Ok(())
    }

    /// Drops the model and frees its file (`unload_model`).
    pub fn unload_model(&mut self) -> Result<()> {
        self.call::<(), ()>("unload_model", ())
    }

    /// Drops the embedder and frees its file (`unload_embedder`).
    pub fn unload_embedder(&mut self) -> Result<()> {
        self.call::<(), ()>("unload_embedder", ())
    }

    /// Bytes in live heap blocks (`heap_in_use`).
    pub fn heap_in_use(&mut self) -> Result<u32> {
        self.call::<(), u32>("heap_in_use", ())
    }

    /// Loads a Model2Vec directory (model.safetensors, tokenizer.json, config.json).
    pub fn load_embedder_dir(&mut self, dir: &std::path::Path) -> Result<usize> {
        let read = |f: &str| {
            std::fs::read(dir.join(f))
                .map_err(|e| wasmtime::format_err!("{}/{f}: {e}", dir.display()))
        };
        let (st, tok, cfg) = (
            read("model.safetensors")?,
            read("tokenizer.json")?,
            read("config.json")?,
        );
        self.load_embedder_bytes(&st, &tok, &cfg)
    }

    /// The embedder at `path`: a Model2Vec folder, or a GGUF sentence encoder file; returns
    /// its vector width.
    pub fn load_embedder_path(&mut self, path: &std::path::Path) -> Result<usize> {
        if path.is_dir() {
            self.load_embedder_dir(path)
        } else {
            self.load_embedder_gguf(path)
        }
    }

    /// A BERT sentence encoder in one GGUF file as the embedder; returns its vector width.
    pub fn load_embedder_gguf(&mut self, path: &std::path::Path) -> Result<usize> {
        let bytes =
            std::fs::read(path).map_err(|e| wasmtime::format_err!("{}: {e}", path.display()))?;
        self.load_embedder_bytes(&bytes, &[], &[])
    }

    /// `embedder_info`'s JSON.
    pub fn embedder_info(&mut self) -> Result<String> {
        let n = self.call_checked::<()>("embedder_info", ())?;
        Ok(String::from_utf8_lossy(&self.result(n)?).into_owned())
    }

    pub fn load_embedder_bytes(&mut self, st: &[u8], tok: &[u8], cfg: &[u8]) -> Result<usize> {
        let st_ptr = self.put(st)?;
        let tok_ptr = self.put(tok)?;
        let cfg_ptr = self.put(cfg)?;
        let r = self.call::<(u32, u32, u32, u32, u32, u32), i32>(
            "load_embedder",
            (
                st_ptr,
                st.len() as u32,
                tok_ptr,
                tok.len() as u32,
                cfg_ptr,
                cfg.len() as u32,
            ),
        )?;
        self.call::<(u32, u32), ()>("free", (tok_ptr, tok.len().max(1) as u32))?;
        self.call::<(u32, u32), ()>("free", (cfg_ptr, cfg.len().max(1) as u32))?;
        Ok(self.check("load_embedder", r)? as usize)
    }

    pub fn embed(&mut self, text: &[u8], dim: usize) -> Result<Vec<f32>> {
        let out = self.put(&vec![0u8; dim * 4])?;
        let r = self.with_buffer(text, |w, t| {
            w.call_checked::<(u32, u32, u32)>("embed", (t, text.len() as u32, out))?;
            Ok(w.read_f32s(out, dim))
        });
        self.call::<(u32, u32), ()>("free", (out, (dim * 4) as u32))?;
        r
    }

    /// `embed_batch`: all `texts` in one call; returns `(texts.len(), dim)` vectors.
    pub fn embed_batch(&mut self, texts: &[&[u8]], dim: usize) -> Result<Vec<Vec<f32>>> {
        let (joined, offsets) = pack_texts(texts);
        let out_bytes = texts.len() * dim * 4;
        let out = self.put(&vec![0u8; out_bytes.max(1)])?;
        let offs = self.put(&Self::ids_bytes(&offsets))?;
        let r = self.with_buffer(&joined, |w, t| {
            w.call_checked::<(u32, u32, u32, u32)>(
                "embed_batch",
                (t, offs, texts.len() as u32, out),
            )?;
            Ok(w.read_f32s(out, texts.len() * dim)
                .chunks_exact(dim.max(1))
                .map(|r| r.to_vec())
                .collect())
        });
        self.call::<(u32, u32), ()>("free", (offs, (offsets.len() * 4) as u32))?;
        self.call::<(u32, u32), ()>("free", (out, out_bytes.max(1) as u32))?;
        r
    }

    pub fn embed_ids(&mut self, text: &[u8]) -> Result<Vec<u32>> {
        let cap = text.len() + 8;
        let out = self.put(&vec![0u8; cap * 4])?;
        let r = self.with_buffer(text, |w, t| {
            let n = w.call_checked::<(u32, u32, u32, u32)>(
                "embed_ids",
                (t, text.len() as u32, out, cap as u32),
            )? as usize;
            Ok(w.read_u32s(out, n.min(cap)))
        });
        self.call::<(u32, u32), ()>("free", (out, (cap * 4) as u32))?;
        r
    }
}

/// Texts back to back and their `n + 1` byte offsets (the layout `embed_batch` takes).
pub fn pack_texts(texts: &[&[u8]]) -> (Vec<u8>, Vec<u32>) {
    let mut joined = Vec::with_capacity(texts.iter().map(|t| t.len()).sum());
    let mut offsets = Vec::with_capacity(texts.len() + 1);
    offsets.push(0u32);
    for t in texts {
        joined.extend_from_slice(t);
        offsets.push(joined.len() as u32);
    }
    (joined, offsets)
}

// ---------------------------------------------------------------------------------------------
// Chat: messages in, a reply token by token (wasmind.h "Chat")

// The ABI's numbers, from the crate that defines them (abi/wasmind.h mirrors them for C).

/// `chat_add` roles.
pub const ROLE_SYSTEM: u32 = Role::System as u32;
pub const ROLE_USER: u32 = Role::User as u32;
pub const ROLE_ASSISTANT: u32 = Role::Assistant as u32;
pub const ROLE_RAW: u32 = Role::Raw as u32;
/// `chat_set_options`: drop the oldest turns when the context is full.
pub use wasmind::chat::OPTION_DROP_OLDEST as CHAT_DROP_OLDEST;
/// `chat_set_options`: let a model that can reason think (Qwen3: no empty `<think>` block).
pub use wasmind::chat::OPTION_THINK as CHAT_THINK;
/// `chat_set_grammar` kinds.
pub use wasmind::grammar::{
    KIND_GBNF as GRAMMAR_GBNF, KIND_JSON_OBJECT as GRAMMAR_JSON_OBJECT,
    KIND_JSON_SCHEMA as GRAMMAR_JSON_SCHEMA, KIND_NONE as GRAMMAR_NONE,
};
/// Status codes (positive) a reply ends with.
pub const E_CONTEXT_FULL: i32 = Status::ContextFull as i32;
pub const E_STOPPED: i32 = Status::Stopped as i32;
pub const E_END: i32 = Status::End as i32;
pub const E_HELPER_LOST: i32 = Status::HelperLost as i32;

/// Milliseconds on a monotonic clock: the timestamps the chat exports take.
pub fn now_ms() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
        * 1000.0
}

/// `sampler_set`'s arguments: the module's own type, so `Sampling::default()` is the module's
/// chat default and `Sampling::GREEDY` (argmax, no penalty) what llama.cpp's reference runs did.
/// The ABI takes the low 32 bits of the seed.
pub use wasmind::sampler::Settings as Sampling;

/// A failure the module reported (not a trap): its status code (positive) and message.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleError {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for ModuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status {}: {}", self.code, self.message)
    }
}

impl std::error::Error for ModuleError {}

/// One `chat_next`.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// The next text of the reply (complete UTF-8; may be empty).
    Text(Vec<u8>),
    /// The reply is over: E_END, E_STOPPED or E_CONTEXT_FULL (or another failure).
    End(ModuleError),
}

/// A whole reply.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Every id in the cache when the reply began (the conversation so far).
    pub prompt_ids: Vec<u32>,
    /// The ids generated, the end-of-generation token included when there was one.
    pub ids: Vec<u32>,
    pub text: Vec<u8>,
    /// How it ended (E_END, E_STOPPED, E_CONTEXT_FULL).
    pub end: ModuleError,
    /// `chat_stats()` after the reply.
    pub stats: serde_json::Value,
}

impl Wasmind {
    fn module_result(&mut self, value: i32) -> Result<std::result::Result<i32, ModuleError>> {
        if value >= 0 {
            return Ok(Ok(value));
        }
        Ok(Err(ModuleError {
            code: -value,
            message: self.last_error()?,
        }))
    }

    pub fn sampler_set(&mut self, s: &Sampling) -> Result<()> {
        self.call_checked::<(f32, u32, f32, f32, f32, u32, u32)>(
            "sampler_set",
            (
                s.temperature,
                s.top_k,
                s.top_p,
                s.min_p,
                s.repeat_penalty,
                s.repeat_window,
                s.seed as u32,
            ),
        )?;
        Ok(())
    }

    pub fn chat_reset(&mut self) -> Result<()> {
        self.call_checked::<()>("chat_reset", ())?;
        Ok(())
    }

    /// Appends a message; returns the message count.
    pub fn chat_add(&mut self, role: u32, text: &str) -> Result<usize> {
        let bytes = text.as_bytes();
        self.with_buffer(bytes, |w, p| {
            let r = w.call::<(u32, u32, u32), i32>("chat_add", (role, p, bytes.len() as u32))?;
            Ok(w.check("chat_add", r)? as usize)
        })
    }

    /// Runs the new messages; `Ok(Ok(prompt tokens run))`, or the module's refusal
    /// (E_CONTEXT_FULL, E_STOPPED, ...).
    pub fn chat_start(
        &mut self,
        max_tokens: u32,
    ) -> Result<std::result::Result<usize, ModuleError>> {
        let r = self.call::<(u32, f64), i32>("chat_start", (max_tokens, now_ms()))?;
        Ok(self.module_result(r)?.map(|n| n as usize))
    }

    pub fn chat_next(&mut self) -> Result<Piece> {
        let r = self.call::<f64, i32>("chat_next", now_ms())?;
        Ok(match self.module_result(r)? {
            Ok(n) => Piece::Text(self.result(n)?),
            Err(e) => Piece::End(e),
        })
    }

    pub fn chat_last_token(&mut self) -> Result<Option<u32>> {
        let r = self.call::<(), i32>("chat_last_token", ())?;
        Ok((r >= 0).then_some(r as u32))
    }

    /// The ids in the KV cache.
    pub fn chat_tokens(&mut self) -> Result<Vec<u32>> {
        let n = self.call_checked::<(u32, u32)>("chat_tokens", (0, 0))? as usize;
        let out = self.put(&vec![0u8; n.max(1) * 4])?;
        self.call_checked::<(u32, u32)>("chat_tokens", (out, n as u32))?;
        let ids = self.read_u32s(out, n);
        self.call::<(u32, u32), ()>("free", (out, (n.max(1) * 4) as u32))?;
        Ok(ids)
    }

    pub fn chat_stats(&mut self) -> Result<serde_json::Value> {
        let n = self.call_checked::<()>("chat_stats", ())?;
        Ok(serde_json::from_slice(&self.result(n)?)?)
    }

    /// The module's sampler defaults (`sampler_defaults`).
    pub fn sampler_defaults(&mut self) -> Result<serde_json::Value> {
        let n = self.call_checked::<()>("sampler_defaults", ())?;
        Ok(serde_json::from_slice(&self.result(n)?)?)
    }

    pub fn chat_set_options(&mut self, flags: u32) -> Result<()> {
        self.call_checked::<u32>("chat_set_options", flags)?;
        Ok(())
    }

    pub fn chat_set_template(&mut self, id: u32) -> Result<()> {
        self.call_checked::<u32>("chat_set_template", id)?;
        Ok(())
    }

    /// The template by name (llama.cpp's names, `qwen3`; empty: the model's).
    pub fn chat_set_template_name(&mut self, name: &str) -> Result<()> {
        self.with_buffer(name.as_bytes(), |w, p| {
            w.call_checked::<(u32, u32)>("chat_set_template_name", (p, name.len() as u32))?;
            Ok(())
        })
    }

    /// Renders a conversation (`{"messages": [{"role", "content"}..], "add_assistant": bool,
    /// "think": bool}`) with the template `name` (empty: the loaded model's), in the module.
    pub fn template_render(&mut self, name: &str, request_json: &[u8]) -> Result<Vec<u8>> {
        self.with_buffer(name.as_bytes(), |w, np| {
            w.with_buffer(request_json, |w, jp| {
                let n = w.call_checked::<(u32, u32, u32, u32)>(
                    "template_render",
                    (np, name.len() as u32, jp, request_json.len() as u32),
                )?;
                w.result(n)
            })
        })
    }

    /// Constrains the next reply (`GRAMMAR_*` kind); `Ok(Err(..))` is the module's refusal
    /// (an invalid grammar or schema, with its position and reason).
    pub fn chat_set_grammar(
        &mut self,
        kind: u32,
        text: &str,
    ) -> Result<std::result::Result<(), ModuleError>> {
        let bytes = text.as_bytes();
        self.with_buffer(bytes, |w, p| {
            let r =
                w.call::<(u32, u32, u32), i32>("chat_set_grammar", (kind, p, bytes.len() as u32))?;
            Ok(w.module_result(r)?.map(|_| ()))
        })
    }

    pub fn request_stop(&mut self) -> Result<()> {
        self.call::<(), ()>("request_stop", ())
    }

    /// Starts a reply and runs it to its end, handing each piece to `on_piece` as it comes.
    pub fn chat_reply(
        &mut self,
        max_tokens: u32,
        on_piece: impl FnMut(&[u8]),
    ) -> Result<std::result::Result<Reply, ModuleError>> {
        self.chat_reply_stoppable(
            max_tokens,
            &std::sync::atomic::AtomicBool::new(false),
            on_piece,
        )
    }

    /// As [`Wasmind::chat_reply`]; when another thread (a Ctrl-C handler) sets `stop`, the
    /// module's stop flag is raised (`request_stop`) and the reply ends with state "stopped".
    pub fn chat_reply_stoppable(
        &mut self,
        max_tokens: u32,
        stop: &std::sync::atomic::AtomicBool,
        mut on_piece: impl FnMut(&[u8]),
    ) -> Result<std::result::Result<Reply, ModuleError>> {
        if let Err(e) = self.chat_start(max_tokens)? {
            return Ok(Err(e));
        }
        let prompt_ids = self.chat_tokens()?;
        let mut text = Vec::new();
        let end = loop {
            if stop.swap(false, std::sync::atomic::Ordering::Relaxed) {
                self.request_stop()?;
            }
            match self.chat_next()? {
                Piece::Text(t) => {
                    on_piece(&t);
                    text.extend_from_slice(&t);
                }
                Piece::End(e) => break e,
            }
        };
        let stats = self.chat_stats()?;
        let mut ids = self
            .chat_tokens()?
            .get(prompt_ids.len()..)
            .unwrap_or_default()
            .to_vec();
        if stats["state"] == "eog" {
            ids.extend(self.chat_last_token()?);
        }
        Ok(Ok(Reply {
            prompt_ids,
            ids,
            text,
            end,
            stats,
        }))
    }
}
