// wasmind.js: loads wasmind into Node (worker_threads) or a browser (Web Workers); no dependencies.
//
//   const wm = await load({ threads: 4, maxMemory: memoryFor(model.byteLength) });
//   wm.loadModel(model);                          // GGUF bytes; wm.modelInfo() describes it
//   wm.addMessage('user', 'What is the capital of France?');
//   for (const piece of wm.reply()) print(piece); // wm.stop() (or stopFlag()) ends it early
//   await wm.close();
//
// The threaded module (dist/wasmind-mt.wasm) is used when SharedArrayBuffer and cross-origin
// isolation are available, else the single-threaded one; each in its relaxed-SIMD build
// (wasmind-relaxed*.wasm) where the engine runs relaxed SIMD (hasRelaxedSimd()). Threaded: one shared memory, this
// instance is the driver, and threads - 1 helper workers (worker.js) each instantiate the module
// on the same memory with their own stack and sit in helper_loop (abi/ABI.md, "Starting helpers").
// The driver blocks in memory.atomic.wait32 while helpers work, so in a BROWSER call load() inside
// a module Worker, never on the page's main thread (see demo/driver.js); Node may drive from its
// main thread. Views over memory go stale when it grows: bytes()/put() build fresh ones each call.

const isNode = typeof process === 'object' && !!process.versions?.node;
// import.meta.url is undefined where modules have no URL (a Cloudflare Worker): no default dist/
// there, and a Worker cannot compile wasm bytes anyway (it imports the module: examples/worker/).
const DIST = import.meta.url ? new URL('../dist/', import.meta.url) : undefined;
const PAGE = 65536, MAX_PAGES = 65536, MiB = 1 << 20;
const HELPER_STACK = MiB, MAX_HELPERS = 255; // stack ≥ WASMIND_HELPER_STACK_MIN (256 KiB)
export const STATUS = ['OK', 'INVALID_ARGUMENT', 'OUT_OF_MEMORY', 'BAD_FORMAT', 'UNSUPPORTED',
  'NO_MODEL', 'CONTEXT_FULL', 'INVALID_UTF8', 'BUFFER_TOO_SMALL', 'WRONG_THREAD', 'STOPPED', 'END',
  'HELPER_LOST'];
export const ROLE = { system: 0, user: 1, assistant: 2, raw: 3 };
/** `chat_set_options` flags (wasmind.h). */
const CHAT_DROP_OLDEST = 1, CHAT_THINK = 2;
const E_CONTEXT_FULL = 6, E_STOPPED = 10, E_END = 11, STOP_FLAG_OFFSET = 64, POOL_LOST_OFFSET = 460;
/** `pool_inject_fault` kinds (diagnostics): the helper traps, or sleeps for ever holding a chunk. */
export const FAULT = { none: 0, trap: 1, stall: 2 };
export const MATH = { exp: 0, log: 1, sin: 2, cos: 3, expf4: 4 };

/** A value for an error message: its type, and the value when short. */
export const describe = (v) => (v == null ? String(v) : typeof v === 'object' ? `an ${Array.isArray(v) ? 'array' : 'object'}`
  : `${typeof v} ${String(v).slice(0, 40)}`);

/** A failed call: `code` is the positive WASMIND_E_* status, `status` its name. */
export class WasmindError extends Error {
  constructor(code, message) {
    super(message); this.code = code; this.status = STATUS[code] ?? 'UNKNOWN';
  }
}

/** Shared memory needs SharedArrayBuffer and (in a browser) a cross-origin isolated context,
 *  and the engine must make a shared WebAssembly.Memory (WebKitGTK 2.50 has no
 *  SharedArrayBuffer even when isolated; the probe also covers an engine that has the one
 *  without the other). */
export function canUseThreads() {
  if (typeof SharedArrayBuffer !== 'function' || !(isNode || globalThis.crossOriginIsolated === true)) return false;
  try { return new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true }).buffer instanceof SharedArrayBuffer; } catch { return false; }
}

/** A module computing `i32x4.relaxed_dot_i8x16_i7x16_add_s` of the 16 bytes at 0 and at 16,
 *  plus the i32x4 at 48, into 32: `(func (export "f") (v128.store (i32.const 32)
 *  (i32x4.relaxed_dot_i8x16_i7x16_add_s (v128.load 0) (v128.load 16) (v128.load 48))))`. */
const RELAXED_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0,
  5, 3, 1, 0, 1, 7, 9, 2, 1, 109, 2, 0, 1, 102, 0, 0, 10, 31, 1, 29, 0, 65, 32, 65, 0, 253, 0, 4,
  0, 65, 16, 253, 0, 4, 0, 65, 48, 253, 0, 4, 0, 253, 147, 2, 253, 11, 4, 0, 11]);
let relaxedSimd;

/** Whether this engine runs relaxed SIMD, and runs it right: the probe must validate *and*
 *  compute a known dot product (Node 20 with --experimental-wasm-relaxed-simd validates it, but
 *  its baseline compiler drops the accumulator). The relaxed modules need it; without it the
 *  SIMD128 ones run. */
export function hasRelaxedSimd() {
  if (relaxedSimd !== undefined) return relaxedSimd;
  relaxedSimd = false;
  try {
    if (WebAssembly.validate(RELAXED_PROBE)) {
      const { exports } = new WebAssembly.Instance(new WebAssembly.Module(RELAXED_PROBE));
      const m = new Int8Array(exports.m.buffer);
      for (let i = 0; i < 16; i++) { m[i] = i % 2 ? -3 : 2; m[16 + i] = i < 8 ? 5 : 100; }
      new Int32Array(exports.m.buffer, 48, 4).set([1000, 0, 0, 0]);
      exports.f();
      relaxedSimd = String(new Int32Array(exports.m.buffer, 32, 4)) === '990,-10,-200,-200';
    }
  } catch { /* no relaxed SIMD */ }
  return relaxedSimd;
}

/** The module file for a build: threaded or not, relaxed SIMD or SIMD128 only. */
export const moduleFile = (threaded, relaxed) =>
  `wasmind${relaxed ? '-relaxed' : ''}${threaded ? '-mt' : ''}.wasm`;

/** A memory maximum for a model of `modelBytes` bytes: × 1.3 + 256 MiB. */
export const memoryFor = (modelBytes) => Math.ceil(modelBytes * 1.3) + 256 * MiB;

/** Three quarters of the cores, at most 16: one descheduled helper stalls a whole job. */
async function defaultThreads() {
  const cores = isNode ? (await import('node:os')).availableParallelism()
    : globalThis.navigator?.hardwareConcurrency ?? 1;
  return Math.max(1, Math.min(16, Math.floor(cores * 3 / 4)));
}

/** A module file from `dist/`; a missing one is an error that says how to build it. */
/** The compiled module at `url` and its bytes (the import section gives the memory's minimum).
 *  A browser compiles the response as it streams in (`compileStreaming`), which also lets it
 *  reuse its cached machine code for a cacheable response on later visits. */
async function compileModule(url) {
  const missing = (why) => new Error(`wasmind: cannot read the module ${url} (${why}); ` +
    'build dist/ with `cargo xtask dist`, or pass `dist` (the URL of a folder with wasmind.wasm, wasmind-mt.wasm and their -relaxed twins)');
  if (isNode) {
    let bytes;
    try { bytes = await (await import('node:fs/promises')).readFile(url); }
    catch (e) { throw missing(e.code ?? e.message); }
    return { module: await WebAssembly.compile(bytes), bytes, compiled: 'bytes' };
  }
  const r = await fetch(url);
  if (!r.ok) throw missing(`HTTP ${r.status}`);
  if (typeof WebAssembly.compileStreaming === 'function' && r.headers.get('Content-Type')?.startsWith('application/wasm')) {
    const [module, bytes] = await Promise.all([WebAssembly.compileStreaming(r.clone()), r.arrayBuffer()]);
    return { module, bytes: new Uint8Array(bytes), compiled: 'streaming' };
  }
  const bytes = new Uint8Array(await r.arrayBuffer()); // a server without the wasm MIME type, or no compileStreaming
  return { module: await WebAssembly.compile(bytes), bytes, compiled: 'bytes' };
}

/** Minimum pages of the module's imported memory, read from its import section (id 2). */
export function importedMemoryMinimum(bytes) {
  const b = new Uint8Array(bytes); let at = 8;
  const leb = () => { let v = 0, s = 0, x; do { x = b[at++]; v += (x & 127) * 2 ** s; s += 7; } while (x & 128); return v; };
  while (at < b.length) {
    const id = b[at++], size = leb(), end = at + size;
    if (id === 2) {
      for (let n = leb(); n > 0; n--) {
        for (let name = 0; name < 2; name++) { const len = leb(); at += len; } // module, field
        const kind = b[at++];
        if (kind === 2) { leb(); return leb(); } // memory: flags, minimum
        if (kind === 0) leb(); else if (kind === 1) { at++; if (leb() & 1) leb(); leb(); } else at += 2; // func, table, global
      }
    }
    at = end;
  }
  throw new Error('module imports no memory');
}

/** Spawns one helper worker (Node worker_threads or a browser module Worker), event-normalised;
 *  `spawn` (load's option), where given, starts it instead. */
async function spawnHelper(spawn) {
  const url = new URL('./worker.js', import.meta.url);
  if (spawn) return spawn({ url: url.href, name: 'wasmind-helper' });
  if (!isNode) {
    // A blob: module importing worker.js, so the page's service worker serves it (offline pages).
    const boot = URL.createObjectURL(new Blob([`import ${JSON.stringify(url.href)};`], { type: 'text/javascript' }));
    const w = new Worker(boot, { type: 'module', name: 'wasmind-helper' });
    return { post: (m) => w.postMessage(m), terminate: () => w.terminate(),
      on: (f, fail) => { w.onmessage = (e) => f(e.data); w.onerror = (e) => fail(new Error(e.message || 'a helper worker failed to start')); } };
  }
  const w = new (await import('node:worker_threads')).Worker(url);
  return { post: (m) => w.postMessage(m), terminate: () => w.terminate(),
    on: (f, fail) => { w.on('message', f); w.on('error', fail); w.on('exit', (c) => fail(new Error(`helper exited (${c})`))); } };
}

/** `promise`, or a rejection after `ms` with the error `late()` returns (the timer does not
 *  outlive it). */
export function within(promise, ms, late) {
  let timer;
  const over = new Promise((_, fail) => { timer = setTimeout(() => fail(late()), ms); });
  return Promise.race([promise, over]).finally(() => clearTimeout(timer));
}
const noAnswer = (what, ms) => () => new Error(`${what}: no answer in ${ms} ms`);

/**
 * Loads the module. Options: `threads` (driver included; default ¾ of the cores, ≤ 16; 1 = no
 * helpers), `threaded` (default canUseThreads()), `relaxed` (the relaxed-SIMD build; default
 * hasRelaxedSimd()), `maxMemory` bytes (threaded: the shared memory's maximum, default 256 MiB;
 * use memoryFor(modelBytes)), `dist` (URL of the folder with the .wasm files), `spawn` (starts
 * a helper instead of `new Worker` here: `spawn({ url, name })` resolves with { post(message),
 * terminate(), on(onMessage, onFail) }; index.js has the page start them, see driver.js). Resolves
 * once every helper is listening.
 */
export async function load({ threads, threaded = canUseThreads(), relaxed = hasRelaxedSimd(), maxMemory = 256 * MiB, dist = DIST, spawn } = {}) {
  if (dist === undefined) throw new Error('wasmind: this host gives modules no URL (import.meta.url): pass `dist`, or instantiate an imported module yourself (new WasmindModule; see glue/examples/worker/)');
  threads = threaded ? Math.max(1, Math.min(MAX_HELPERS + 1, threads ?? await defaultThreads())) : 1;
  const { module, bytes, compiled } = await compileModule(new URL(moduleFile(threaded, relaxed), dist));
  if (!threaded) return new WasmindModule(module, (await WebAssembly.instantiate(module)).exports, null, [], relaxed, compiled);
  const minimum = importedMemoryMinimum(bytes);
  const maximum = Math.min(MAX_PAGES, Math.max(minimum, Math.ceil(maxMemory / PAGE)));
  const memory = new WebAssembly.Memory({ initial: minimum, maximum, shared: true });
  const driver = (await WebAssembly.instantiate(module, { env: { memory } })).exports;
  const wm = new WasmindModule(module, driver, memory, [], relaxed, compiled);
  wm.spawn = spawn;
  try {
    for (let id = 0; id < threads - 1; id++) await wm.startHelper(id);
    await wm.untilReady(threads - 1);
  } catch (e) {
    // Let the helpers that did start register first: one that enters helper_loop after
    // pool_shutdown would wait for a job forever (close() would then end it after a timeout).
    await wm.untilReady(wm.helpers.length, 5000).catch(() => {});
    await wm.close(); throw e;
  }
  driver.pool_set_threads(threads);
  return wm;
}

/** One loaded module (the driver) and its helpers. Only call it from the thread that loaded it. */
export class WasmindModule {
  /** `relaxed`: whether `module` is the relaxed-SIMD build; `compiled`: how the browser compiled
   *  it ('streaming': WebAssembly.compileStreaming, 'bytes': from its bytes, the fallback). */
  constructor(module, exports, memory, helpers, relaxed = false, compiled = 'bytes') {
    this.module = module; this.exports = exports; this.helpers = helpers;
    this.memory = memory ?? exports.memory; this.threaded = exports.is_threaded() === 1;
    this.relaxed = relaxed; this.compiled = compiled;
  }

  async startHelper(id) {
    const stack = this.exports.alloc(HELPER_STACK);
    if (stack === 0) throw new WasmindError(2, 'no memory for a helper stack');
    const w = await spawnHelper(this.spawn);
    const h = { worker: w, stack };
    h.done = new Promise((exit) => { // resolves with helper_loop's result, or -1 if the worker failed
      h.started = new Promise((ok, fail) => {
        const failed = (e) => { fail(e); exit(-1); };
        w.on((m) => (m.running ? ok() : m.error ? failed(new Error(m.error)) : exit(m.rc)), failed);
      });
      h.started.catch(() => {}); // handled by untilReady; a late failure must not crash Node
    });
    w.post({ module: this.module, memory: this.memory, id, stackTop: (stack + HELPER_STACK) & ~15 });
    this.helpers.push(h);
  }

  async untilReady(n, timeoutMs = 30000) {
    const t0 = Date.now();
    await within(Promise.all(this.helpers.map((h) => h.started)), timeoutMs, noAnswer('starting helpers', timeoutMs));
    while (this.exports.pool_helpers_ready() < n) {
      if (Date.now() - t0 > timeoutMs) throw new Error(`only ${this.exports.pool_helpers_ready()} of ${n} helpers started`);
      await new Promise((r) => setTimeout(r, 1));
    }
  }

  /** A copy of `len` bytes at `ptr` (a fresh view each time: memory may have grown). */
  bytes(ptr, len) { return new Uint8Array(this.memory.buffer, ptr, len).slice(); }
  /** Copies `data` (bytes or a typed array) into a new `alloc` block; free with free(ptr, byteLength). */
  put(data) {
    const ptr = this.exports.alloc(data.byteLength);
    if (ptr === 0) throw new WasmindError(2, `alloc(${data.byteLength}) failed`);
    this.copyIn(ptr, data);
    return ptr;
  }
  /** Refuses a file of `total` bytes that a wasm32 memory (4 GiB at most) cannot hold, before
   *  any byte of it is read (`size`: the file's size, when `total` stands for "failed"). */
  assertFits(total, size = total) {
    if (total >= 2 ** 32) {
      throw new WasmindError(2, `the model (${size} bytes) does not fit in the module's memory ` +
        `(${this.memory.buffer.byteLength} bytes now; a wasm32 memory grows to 4 GiB at most)`);
    }
  }
  /** Copies `data` (bytes or a typed array) to `ptr` (a fresh view: memory may have grown). */
  copyIn(ptr, data) {
    const src = new Uint8Array(data.buffer ?? data, data.byteOffset ?? 0, data.byteLength);
    new Uint8Array(this.memory.buffer, ptr, src.length).set(src);
  }
  free(ptr, len) { this.exports.free(ptr, len); }
  /** Text of the last failure (copied first: TextDecoder refuses views of shared memory). */
  lastError() { return new TextDecoder().decode(this.bytes(this.exports.last_error(), this.exports.last_error_len())); }
  /** Returns `rc` if ≥ 0, else throws a WasmindError with the module's message. */
  check(rc) { if (rc < 0) throw new WasmindError(-rc, this.lastError()); return rc; }

  /** `fn(ptr)` with a block of `size` bytes (at least 1) from the module, freed after. */
  withBlock(size, fn) {
    const ptr = this.exports.alloc(Math.max(1, size));
    if (ptr === 0) throw new WasmindError(2, `alloc(${size}) failed`);
    try { return fn(ptr); } finally { this.free(ptr, Math.max(1, size)); }
  }
  /** `fn(ptr)` with `bytes` copied into the module, freed after. */
  withBytes(bytes, fn) {
    return this.withBlock(bytes.byteLength, (ptr) => { this.copyIn(ptr, bytes); return fn(ptr); });
  }
  /** The result buffer's `len` bytes (after model_info, chat_stats, …) as text; throws if len < 0. */
  resultText(len) { return new TextDecoder().decode(this.bytes(this.exports.result_ptr(), this.check(len))); }

  /** Loads GGUF bytes (the module keeps its own copy); `context` tokens of KV cache, 0 = the
   *  model's own (at most 4096); `quantize: 'q8_0'` turns F32/F16/BF16 matrices into Q8_0 as
   *  they load. Returns modelInfo(). */
  loadModel(gguf, { context = 0, quantize = null } = {}) {
    const types = { null: 0, none: 0, q8_0: 8 };
    const type = types[quantize == null ? null : String(quantize).toLowerCase()];
    if (type === undefined) throw new Error(`wasmind: quantize ${quantize}: supported are 'q8_0' and null`);
    this.check(this.exports.set_quantize(type));
    this.check(this.exports.set_context(context));
    this.check(this.exports.load_model(this.put(gguf), gguf.byteLength)); // the module owns the block
    return this.modelInfo();
  }
  /** Loads a GGUF of `total` bytes without a copy of it in JS: one alloc(total) up front (the
   *  memory grows once), `write(chunk)` puts each chunk at its offset (a fresh view each time),
   *  `finish(options)` hands the block to load_model (as loadModel; returns modelInfo()),
   *  `abort()` frees it. Threaded: the shared memory's maximum must hold it (memoryFor(total)). */
  beginLoad(total) {
    this.assertFits(total);
    const ptr = this.exports.alloc(total);
    if (ptr === 0) this.assertFits(Infinity, total);
    let at = 0, open = true;
    const end = () => { if (!open) throw new Error('this load is over'); open = false; };
    return {
      ptr, total, get loaded() { return at; },
      write: (chunk) => {
        if (!open) throw new Error('this load is over');
        if (at + chunk.byteLength > total) throw new WasmindError(1, `more than the ${total} bytes announced`);
        this.copyIn(ptr + at, chunk); at += chunk.byteLength;
      },
      finish: ({ context = 0 } = {}) => {
        if (at !== total) { this.free(ptr, total); end(); throw new WasmindError(3, `truncated: ${at} of ${total} bytes`); }
        end();
        this.check(this.exports.set_context(context));
        this.check(this.exports.load_model(ptr, total)); // the module owns the block
        return this.modelInfo();
      },
      abort: () => { if (open) { end(); this.free(ptr, total); } },
    };
  }
  modelInfo() { return JSON.parse(this.resultText(this.exports.model_info())); }
  /** The module's sampler defaults: { temperature, top_k, top_p, min_p, repeat_penalty,
   *  repeat_window, seed } (what a fresh module uses; the one place they are written is the module). */
  samplerDefaults() {
    this.samplerDefaultsJson ??= JSON.parse(this.resultText(this.exports.sampler_defaults()));
    return this.samplerDefaultsJson;
  }
  /** Sampling for the next replies; what is not given is the module's default
   *  (samplerDefaults()). temperature 0 is greedy. A setting of the wrong kind (a string, a
   *  fraction where a count goes, a seed outside 0..2^32 - 1) throws INVALID_ARGUMENT instead of
   *  being converted; the module checks the ranges of the rest. */
  setSampler({ temperature, topK, topP, minP, repeatPenalty, repeatWindow, seed } = {}) {
    for (const [name, v] of Object.entries({ temperature, topP, minP, repeatPenalty })) {
      if (v != null && typeof v !== 'number') throw new WasmindError(1, `sampler: ${name} must be a number, not ${JSON.stringify(v)}`);
    }
    for (const [name, v, max] of [['topK', topK, 2 ** 31 - 1], ['repeatWindow', repeatWindow, 2 ** 31 - 1], ['seed', seed, 2 ** 32 - 1]]) {
      if (v != null && !(Number.isInteger(v) && v >= 0 && v <= max)) {
        throw new WasmindError(1, `sampler: ${name} must be an integer from 0 to ${max}, not ${JSON.stringify(v)}`);
      }
    }
    const d = this.samplerDefaults();
    this.check(this.exports.sampler_set(temperature ?? d.temperature, topK ?? d.top_k, topP ?? d.top_p,
      minP ?? d.min_p, repeatPenalty ?? d.repeat_penalty, repeatWindow ?? d.repeat_window, (seed ?? d.seed) >>> 0));
  }
  /** Appends a message ('system', 'user', 'assistant' or 'raw', or the module's role number);
   *  returns the message count. Another role, or a text that is not a string, throws
   *  INVALID_ARGUMENT. */
  addMessage(role, text) {
    if (!Object.hasOwn(ROLE, role) && !Object.values(ROLE).includes(role)) {
      throw new WasmindError(1, `addMessage: role ${JSON.stringify(role)} is not one of ${Object.keys(ROLE).join(', ')}`);
    }
    if (typeof text !== 'string') throw new WasmindError(1, `addMessage: the text is ${describe(text)}, not a string`);
    const b = new TextEncoder().encode(text);
    return this.withBytes(b, (p) => this.check(this.exports.chat_add(ROLE[role] ?? role, p, b.length)));
  }
  /** Constrains the next reply (only that one): `{ grammar }` GBNF text (llama.cpp's dialect),
   *  `{ schema }` a JSON schema (object or text), `{ json: true }` any JSON object; `{}` or no
   *  argument clears it. Throws a WasmindError naming the position and reason if invalid. */
  setGrammar({ grammar, schema, json } = {}) {
    const [kind, text] = grammar != null ? [1, grammar]
      : schema != null ? [2, typeof schema === 'string' ? schema : JSON.stringify(schema)]
        : json ? [3, ''] : [0, ''];
    const b = new TextEncoder().encode(text);
    this.withBytes(b, (p) => this.check(this.exports.chat_set_grammar(kind, p, b.length)));
  }
  /** Forgets the conversation and the KV cache. */
  resetChat() { this.check(this.exports.chat_reset()); }
  /** The chat template by name (llama.cpp's names, or 'qwen3'; '' = the model's own); throws,
   *  listing the names, on an unknown one. The next reply re-reads the conversation. */
  setTemplate(name) {
    const b = new TextEncoder().encode(name);
    this.withBytes(b, (p) => this.check(this.exports.chat_set_template_name(p, b.length)));
  }
  /** Chat options for the next replies: `dropOldest` drops the oldest turns (keeping the system
   *  messages) instead of failing with CONTEXT_FULL when a new turn does not fit the context;
   *  `think` lets a model that can reason think (Qwen3: no empty <think> block). Both default off. */
  setChatOptions({ dropOldest = false, think = false } = {}) {
    this.check(this.exports.chat_set_options((dropOldest ? CHAT_DROP_OLDEST : 0) | (think ? CHAT_THINK : 0)));
  }
  /** Starts a reply of at most `maxTokens` tokens (0: up to the context) to the messages added
   *  so far; chat_next then gives its pieces (reply() does both). A `maxTokens` that is not an
   *  integer from 0 to 2^31 - 1 throws INVALID_ARGUMENT, as does a turn that cannot start. */
  startReply(maxTokens = 0) {
    if (!(Number.isInteger(maxTokens) && maxTokens >= 0 && maxTokens <= 2 ** 31 - 1)) {
      throw new WasmindError(1, `maxTokens must be an integer from 0 (up to the context) to 2^31 - 1, not ${JSON.stringify(maxTokens)}`);
    }
    this.check(this.exports.chat_start(maxTokens, performance.now()));
  }
  /** Generates the reply to the messages added so far, yielding its text piece by piece (whole
   *  UTF-8 each); returns chatStats() (state: 'eog', 'limit', 'stopped' or 'context_full').
   *  Only the tokens new since the last reply are read. Throws if the turn cannot start. */
  *reply({ maxTokens = 0 } = {}) {
    this.startReply(maxTokens);
    for (;;) {
      const n = this.exports.chat_next(performance.now());
      if (n === -E_END || n === -E_STOPPED || n === -E_CONTEXT_FULL) break;
      if (this.check(n) > 0) yield this.resultText(n);
    }
    return this.chatStats();
  }
  /** The whole reply as one string (see reply()). */
  replyText(options) { let text = ''; for (const piece of this.reply(options)) text += piece; return text; }
  /** The ids in the KV cache: the conversation as read so far (the last end token is not run). */
  chatTokens() {
    const n = this.check(this.exports.chat_tokens(0, 0));
    return this.withBlock(4 * n, (p) => {
      this.check(this.exports.chat_tokens(p, n));
      return [...new Uint32Array(this.bytes(p, 4 * n).buffer)];
    });
  }
  chatStats() { return JSON.parse(this.resultText(this.exports.chat_stats())); }
  /** Asks the reply in progress to end after the current token (the driver's thread). */
  stop() { this.exports.request_stop(); }
  /** Where any thread may end a reply: Atomics.store(new Int32Array(memory.buffer), index, 1).
   *  Shared only in the threaded build (send `memory` to the thread that should stop it). */
  stopFlag() { return { memory: this.memory, index: (this.exports.shared_state() + STOP_FLAG_OFFSET) / 4 }; }

  /** Loads a Model2Vec directory's three files (bytes), or a BERT sentence encoder's GGUF file
   *  ({ gguf: bytes }); returns the vector dimension. */
  loadEmbedder({ safetensors, tokenizer, config, gguf }) {
    const none = new Uint8Array(0);
    if (gguf !== undefined) return this.loadEmbedderBlock(this.put(gguf), gguf.byteLength, none, none);
    return this.loadEmbedderBlock(this.put(safetensors), safetensors.byteLength, tokenizer, config);
  }
  /** load_embedder with a block already in the module's memory (`ptr`, `len` bytes: the
   *  module's from now on) and the JSON files (copied; both empty for a GGUF file). */
  loadEmbedderBlock(ptr, len, tokenizer, config) {
    const tok = tokenizer.byteLength ? this.put(tokenizer) : 0, cfg = config.byteLength ? this.put(config) : 0;
    try {
      return this.embedDim = this.check(this.exports.load_embedder(ptr, len, tok, tokenizer.byteLength, cfg, config.byteLength));
    } finally { if (tok) this.free(tok, tokenizer.byteLength); if (cfg) this.free(cfg, config.byteLength); }
  }
  /** Drops the model and frees its file (the module's memory stays as large as it grew). */
  unloadModel() { this.exports.unload_model(); }
  /** Drops the embedder and frees its files. */
  unloadEmbedder() { this.exports.unload_embedder(); this.embedDim = 0; }
  /** Bytes in the module's live heap blocks: back where it was after the unloads (leak checks). */
  heapInUse() { return this.exports.heap_in_use() >>> 0; }
  /** Sentence vectors for `texts` (strings), one Float32Array each; split across the pool. */
  embed(texts) {
    if (!Array.isArray(texts)) throw new WasmindError(1, `embed takes an array of strings, not ${describe(texts)}`);
    const bad = texts.findIndex((t) => typeof t !== 'string');
    if (bad >= 0) throw new WasmindError(1, `embed takes a string or an array of strings: item ${bad} is ${describe(texts[bad])}`);
    const enc = new TextEncoder(), parts = texts.map((t) => enc.encode(t));
    const offsets = new Uint32Array(parts.length + 1);
    parts.forEach((b, i) => { offsets[i + 1] = offsets[i] + b.length; });
    const joined = new Uint8Array(offsets[parts.length]);
    parts.forEach((b, i) => joined.set(b, offsets[i]));
    const dim = this.embedDim;
    if (!dim) throw new WasmindError(5, 'no embedder is loaded (loadEmbedder)');
    return this.withBytes(joined, (t) => this.withBytes(offsets, (o) => {
      const outBytes = parts.length * dim * 4;
      return this.withBlock(outBytes, (out) => {
        this.check(this.exports.embed_batch(t, o, parts.length, out));
        const all = new Float32Array(this.bytes(out, outBytes).buffer);
        return parts.map((_, i) => all.slice(i * dim, (i + 1) * dim));
      });
    }));
  }

  setThreads(n) { return this.check(this.exports.pool_set_threads(n)); }
  /** True once a helper was lost mid-job (HELPER_LOST: see abi/ABI.md, "A lost helper"): nothing
   *  more is computed on this module; unload, close() and load a new one. */
  poolLost() {
    return this.threaded && Atomics.load(new Int32Array(this.memory.buffer), (this.exports.shared_state() + POOL_LOST_OFFSET) / 4) !== 0;
  }
  /** Diagnostics: helper `id` fails in the next chunk it claims (FAULT.trap or FAULT.stall). */
  injectFault(id, kind) { return this.check(this.exports.pool_inject_fault(id, FAULT[kind] ?? kind)); }
  poolSelftest(jobs, seed, maxThreads) { return this.check(this.exports.pool_selftest(jobs, seed, maxThreads)); }
  /** Applies MATH[fn] to a Float64Array (exp/log/sin/cos) or Float32Array (expf4); returns a new array. */
  mathApply(fn, values) {
    const ptr = this.put(values);
    try {
      this.check(this.exports.math_apply(MATH[fn], ptr, ptr, values.length));
      return new values.constructor(this.bytes(ptr, values.byteLength).buffer);
    } finally { this.free(ptr, values.byteLength); }
  }

  /** Releases the helpers (pool_shutdown), waits for them to leave helper_loop, ends their
   *  workers and frees their stacks. The module stays usable on this thread alone. After a lost
   *  helper (poolLost()) it waits only briefly: the lost one never leaves, its worker is ended. */
  async close() {
    const wait = this.poolLost() ? 250 : 10000;
    this.exports.pool_shutdown();
    for (const h of this.helpers.splice(0)) {
      const left = await within(h.done, wait, noAnswer('helper shutdown', wait)).then(() => true, () => false);
      await h.worker.terminate();
      if (left) this.exports.free(h.stack, HELPER_STACK); // else a stuck helper may still use it
    }
  }
}
