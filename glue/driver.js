// driver.js: the wasmind driver behind glue/index.js. It runs in a module Worker (browser: the
// driver blocks in memory.atomic.wait32 while helpers work, which a page's main thread may not)
// or a worker_threads Worker (Node), owns the module (glue/wasmind.js) and its helpers, and
// answers index.js's requests one at a time: { id, op, ...args } -> { id, value } or
// { id, error }, with { id, event } messages (progress, pieces) in between.
//
// Memory: the threaded module's shared memory has a fixed maximum, sized from what it must hold
// (memoryFor(model + embedder bytes)). The driver starts with memoryFor(0); when a load needs
// more, it shuts the pool down and starts the module again on a larger memory (reloading an
// embedder it held), before the first byte is written. Model bytes are streamed into one alloc'd
// block (beginLoad), never assembled in JS, except when the length is unknown (no
// Content-Length): then the chunks are gathered first (one JS copy), documented in docs/page-api.md.
//
// Between tokens the reply loop yields to the event loop, so a `stop` message is seen within one
// token in the single-threaded build too (the threaded one can also be stopped by a store to
// the stop flag in the shared memory, which index.js does).
import { load, memoryFor, WasmindError, STATUS } from './wasmind.js';
import { open, chunks, readAll, splitParts, deleteCached, cacheStore, SourceError } from './source.js';
import { readHeader, joinHeaders } from './gguf-split.js';

const isNode = typeof process === 'object' && !!process.versions?.node;
const port = isNode ? (await import('node:worker_threads')).parentPort : globalThis;
const post = (m, transfer) => port.postMessage(m, transfer ?? []);
const E_CONTEXT_FULL = 6, E_STOPPED = 10, E_END = 11;

let wm = null;            // the WasmindModule
let config = null;        // Wasmind.create's options
let capacity = 0;         // bytes the current memory was sized for (threaded)
let modelBytes = 0;       // the loaded model's size
let model = null;         // { source, options } of the loaded model when it can be read again (URL, Blob)
let embedder = null;      // { files: { safetensors, tokenizer, config } sources, size } to reload
const stopped = new Set(); // ids of chat requests asked to stop
let active = null;        // id of the reply being generated
const SPARE = 64 << 20;   // room sized in for an embedder loaded after a model

// A macrotask boundary (not clamped like setTimeout): messages queued meanwhile are handled.
// Deno's node:worker_threads hands a port's messages over only on a timer's turn (after
// setImmediate alone a stop landed 15-30 tokens late there; measured with Deno 2.9.6), so Deno takes
// setTimeout's turn (about 1 ms a token).
const yieldNow = isNode ? (typeof globalThis.Deno === 'object' ? () => new Promise((r) => setTimeout(r, 0))
  : () => new Promise((r) => setImmediate(r))) : (() => {
  const ch = new MessageChannel(), waiting = [];
  ch.port1.onmessage = () => waiting.shift()?.();
  return () => new Promise((r) => { waiting.push(r); ch.port2.postMessage(0); });
})();

// The stopper (threaded module): a tiny worker that holds the shared memory and stores 1 at the
// stop flag when index.js posts to its port, so a stop lands even while this thread is blocked
// in a prompt (the module checks the flag between prompt chunks and before every token). The
// page itself never holds the memory: a page keeps what it was sent until its own garbage
// collection, which can be long after unload() (measured: 120 MB kept per load/unload cycle).
// A stop names its reply: the stopper stores the flag only while `slot` holds that reply's id,
// claiming the slot (id -> -id) around the store, and the driver takes the slot back (id -> 0)
// before the next reply can start, waiting out a claim. So a late stop never ends the next reply.
// A browser stopper is started by the page, joined to this driver by a MessagePort (spawnByPage).
const STOPPER = `const go = ({ memory, index, port, slot }) => { const flag = new Int32Array(memory.buffer), s = new Int32Array(slot);
  port.onmessage = (e) => { const id = e.data; if (Atomics.compareExchange(s, 0, id, -id) === id) { Atomics.store(flag, index, 1); Atomics.store(s, 0, id); Atomics.notify(s, 0); } };
  port.start?.(); };
const on = (e) => { if (e.data?.wasmindRelay) e.data.wasmindRelay.onmessage = on; else if (e.data === 'close') self.close(); else if (!e.data?.wasmindPort) go(e.data); };
if (typeof self === 'object' && typeof self.postMessage === 'function' && typeof require !== 'function') self.onmessage = on;
else require('node:worker_threads').parentPort.once('message', go);`;
let stopper = null, slot = null;

async function startStopper() {
  stopper?.terminate(); stopper = null; slot = null;
  if (!wm.threaded) return null;
  slot = new Int32Array(new SharedArrayBuffer(4));
  const { port1, port2 } = isNode ? new (await import('node:worker_threads')).MessageChannel() : new MessageChannel();
  if (isNode) {
    const w = new (await import('node:worker_threads')).Worker(STOPPER, { eval: true });
    w.unref(); port2.unref?.();
    w.postMessage({ ...wm.stopFlag(), port: port2, slot: slot.buffer }, [port2]);
    stopper = { terminate: () => w.postMessage('close') }; // it ends itself (see close)
  } else {
    const w = await spawnByPage({ script: STOPPER, name: 'wasmind-stopper' });
    w.post({ ...wm.stopFlag(), port: port2, slot: slot.buffer }, [port2]);
    stopper = { terminate: () => { w.post('close'); w.terminate(); } };
  }
  return port1;
}

// Browser: the helpers and the stopper are started by the page (index.js), not here, and joined
// to this driver by a MessagePort. Firefox (ESR 153) can block a worker's `new Worker()` for ever
// while its devtools hold worker-debugger listeners (WebDriver BiDi automation, an open DevTools):
// the parent thread waits on the new worker's condition variable for the main thread to register
// the worker's debugger, but the main thread's single notify can wake the new worker's own thread,
// which waits on the same condition variable for its first event, instead (WorkerPrivate::
// SetIsDebuggerRegistered: mCondVar.Notify(); WaitForIsDebuggerRegistered). A Worker made on the
// main thread registers its debugger there synchronously, so it cannot hang this way
// (glue/repro/firefox-restart.mjs). What this driver sends a worker (the module, the memory) is
// queued on a MessageChannel of its own whose other end the page hands on unread, so the page
// never holds the memory; what a worker answers comes over a MessagePort from the page.
// spawnByPage({ url } or { script, name }) -> { post, terminate, on(onMessage, onFail) }.
const spawns = new Map(); // sid -> { answer, fail, error }
let nextSpawn = 1;
function spawnByPage(what) {
  const sid = nextSpawn++;
  return new Promise((answer) => {
    spawns.set(sid, { answer });
    post({ event: 'spawn', sid, ...what });
  }).then((port) => {
    const s = spawns.get(sid);
    return { post: (m, transfer) => {
      // A page keeps what it read until its garbage collection, so it gets only the port. Not
      // closed here: Firefox dropped the message when port1 was closed right after posting it.
      const c = new MessageChannel();
      c.port1.postMessage(m, transfer ?? []);
      post({ event: 'relay', sid, port: c.port2 }, [c.port2]);
    },
      terminate: () => { port.close(); spawns.delete(sid); post({ event: 'end', sid }); },
      on: (onMessage, onFail) => {
        port.onmessage = (e) => onMessage(e.data);
        if (s.error) onFail(s.error); else s.fail = onFail;
      } };
  });
}
/** The page's answer to a spawn: { sid, port } once the worker exists, { sid, error } if it failed. */
function spawned({ sid, port, error }) {
  const s = spawns.get(sid);
  if (!s) return;
  if (port) return s.answer(port);
  const e = new Error(error || 'a worker failed to start');
  if (s.fail) s.fail(e); else s.error = e;
}

async function start(bytes) {
  capacity = bytes;
  wm = await load({ threads: config.threads, threaded: config.threaded, relaxed: config.relaxed, dist: config.dist,
    maxMemory: memoryFor(bytes), spawn: isNode ? undefined : spawnByPage });
  cacheKind ??= (await cacheStore())?.kind ?? null;
  const stopPort = await startStopper();
  post({ event: 'module', ...describe(), stopPort }, stopPort ? [stopPort] : []);
}
/** The paths this engine took: threads, relaxed SIMD, how the module compiled, where URLs are cached. */
function describe() {
  return { threaded: wm.threaded, threads: wm.threaded ? wm.exports.pool_threads() : 1, relaxed: wm.relaxed,
    compiled: wm.compiled, cache: cacheKind };
}
let cacheKind;  // 'opfs', 'cache-api' or null (source.js cacheStore), found once

/** Makes sure the memory can hold `bytes` more than what it holds now (threaded: a new, larger
 *  shared memory, i.e. a new module; what it held is loaded again from its sources). */
async function ensureRoom(bytes, { keepModel, keepEmbedder }) {
  if (!wm.threaded) return;
  const held = (keepModel ? modelBytes : 0) + (keepEmbedder && embedder ? embedder.size : 0);
  if (held + bytes <= capacity) return;
  if (keepModel && modelBytes && !model) {
    throw new WasmindError(2, 'the memory cannot grow while this model is loaded: load the embedder before the model, or load the model from a URL or Blob');
  }
  const reload = keepModel && modelBytes ? model : null;
  await wm.close();
  wm = null; modelBytes = 0;
  await start(held + bytes + SPARE);
  if (keepEmbedder && embedder) await loadEmbedder({ files: embedder.files, reload: true });
  if (reload) await loadModel({ source: reload.source, options: reload.options, reload: true });
}

/** The JS heap of this worker where the engine reports it (Node: heap + ArrayBuffers; Chromium:
 *  performance.memory, without ArrayBuffers), or null. */
function jsHeap() {
  if (isNode) { const m = process.memoryUsage(); return m.heapUsed + m.arrayBuffers; }
  return globalThis.performance?.memory?.usedJSHeapSize ?? null;
}
let peakLoadHeap = null, loadHeapBase = null, chunkMax = 0;

/** The whole body of a source without a length, as chunks (the documented fallback). */
async function gather(opened) {
  const got = []; let total = 0;
  try {
    for await (const c of chunks(opened.body)) { got.push(c.slice()); total += c.byteLength; }
  } catch (e) { throw downloadFailed(opened, e); }
  return { chunks: got, total };
}
const downloadFailed = (opened, e) => (e?.name === 'AbortError' || e instanceof SourceError || e instanceof WasmindError ? e
  : new SourceError('NETWORK', `${opened.url ?? 'the source'}: the download failed (${e?.message ?? e})`));

/** Streams `opened` (source.js) into a block from beginLoad (the writer), sampling the heap. */
async function pump(opened, writer, onChunk, gathered) {
  loadHeapBase = peakLoadHeap = jsHeap(); chunkMax = 0;
  try {
    for await (const c of gathered ?? chunks(opened.body)) {
      writer.write(c); onChunk(c.byteLength);
      chunkMax = Math.max(chunkMax, c.byteLength);
      const h = jsHeap();
      if (h !== null && h > peakLoadHeap) peakLoadHeap = h;
    }
  } catch (e) {
    writer.abort(); opened.cancel?.(e); throw downloadFailed(opened, e);
  }
}

/** Progress events, at most one per 50 ms (and the last one always). */
function progress(id, total) {
  let loaded = 0, last = 0;
  return (n) => {
    loaded += n;
    const now = Date.now();
    if (now - last >= 50 || loaded === total) { last = now; post({ id, event: 'progress', loaded, total }); }
  };
}

/** After a lost helper (HELPER_LOST) the module computes nothing more: a load starts a new one
 *  (fresh memory, fresh helpers); what the old one held is gone. */
async function renewIfLost() {
  if (!wm.poolLost()) return;
  await wm.close();
  wm = null; modelBytes = 0; model = null; embedder = null;
  await start(capacity);
}

async function loadModel({ id, source, options = {}, reload = false }) {
  const { cache = true, context = 0, size, quantize, template, stallTimeout: stallMs } = options;
  if (!reload) await renewIfLost();
  wm.exports.unload_model(); modelBytes = 0; model = null; // frees the old file before the new one is allocated
  const parts = typeof source === 'string' ? splitParts(source) : null;
  if (parts) return loadSplit({ id, source, parts, options, reload });
  const opened = await open(source, { cache, size, stallMs });
  if (opened.total !== null) {
    try { wm.assertFits(opened.total); } catch (e) { opened.cancel?.(e); throw e; }
  }
  let total = opened.total, gathered = null;
  if (total === null) gathered = await gather(opened); // no length announced: one JS copy
  else if (!reload) await ensureRoom(total, { keepModel: false, keepEmbedder: true }); // before the body is read
  if (gathered) { total = gathered.total; if (!reload) await ensureRoom(total, { keepModel: false, keepEmbedder: true }); }
  const writer = wm.beginLoad(total);
  await pump(opened, writer, progress(id, total), gathered?.chunks);
  const stored = await opened.stored;
  applyQuantize(quantize);
  writer.finish({ context });
  modelBytes = total;
  if (typeof source === 'string' || (typeof Blob === 'function' && source instanceof Blob)) model = { source, options };
  if (template !== undefined) wm.setTemplate(template);
  return { ...wm.modelInfo(), bytes: total, fromCache: opened.fromCache, cached: stored || opened.fromCache };
}

/** A split GGUF from its first part's URL: every part opened (and cached) as its own file, their
 *  headers read first, then one block holding the joined file (gguf-split.js), the parts' data
 *  streamed into place in order. */
async function loadSplit({ id, source, parts, options, reload }) {
  const { cache = true, context = 0, template, stallTimeout: stallMs } = options;
  const opened = await Promise.all(parts.map((url) => open(url, { cache, stallMs })));
  try {
    if (opened.some((o) => o.total === null)) throw new WasmindError(4, 'split GGUF parts need a Content-Length');
    const iters = opened.map((o) => chunks(o.body)[Symbol.asyncIterator]());
    const heads = [];
    for (const it of iters) heads.push(await readHeader(it));
    const joined = joinHeaders(heads.map((h) => h.header), opened.map((o) => o.total));
    wm.assertFits(joined.total);
    if (!reload) await ensureRoom(joined.total, { keepModel: false, keepEmbedder: true });
    const writer = wm.beginLoad(joined.total);
    const tick = progress(id, opened.reduce((n, o) => n + o.total, 0));
    try {
      writer.write(joined.bytes);
      for (let i = 0; i < parts.length; i++) {
        const pad = joined.bases[i] - writer.loaded;
        if (pad > 0) writer.write(new Uint8Array(pad));
        tick(heads[i].header.dataStart);
        writer.write(heads[i].rest); tick(heads[i].rest.byteLength);
        for (let r = await iters[i].next(); !r.done; r = await iters[i].next()) { writer.write(r.value); tick(r.value.byteLength); }
      }
    } catch (e) { writer.abort(); throw downloadFailed(opened[0], e); }
    const stored = (await Promise.all(opened.map((o) => o.stored))).every(Boolean);
    applyQuantize(options.quantize);
    writer.finish({ context });
    modelBytes = joined.total;
    model = { source, options };
    if (template !== undefined) wm.setTemplate(template);
    return { ...wm.modelInfo(), bytes: joined.total, parts: parts.length, fromCache: opened.every((o) => o.fromCache),
      cached: stored || opened.every((o) => o.fromCache) };
  } catch (e) {
    for (const o of opened) o.cancel?.(e);
    throw e;
  }
}

/** Weights as they are (0, 'keep') or re-quantized on load (8, 'q8_0'), where the module has
 *  set_quantize; set before every load (it stays set in the module). */
function applyQuantize(quantize) {
  if (typeof wm.exports.set_quantize === 'function') {
    const names = { keep: 0, q8_0: 8 }, name = String(quantize).toLowerCase();
    const q = quantize === undefined ? 0 : Number.isInteger(quantize) ? quantize : Object.hasOwn(names, name) ? names[name] : undefined;
    if (q === undefined) throw new WasmindError(1, `unknown quantize type ${quantize} ('keep', 'q8_0' or a ggml type id)`);
    wm.check(wm.exports.set_quantize(q));
  } else if (quantize !== undefined && quantize !== 0 && quantize !== 'keep') {
    throw new WasmindError(4, 'this module cannot quantize on load (no set_quantize export)');
  }
}

async function loadEmbedder({ id, files, options = {}, reload = false }) {
  const { cache = true, stallTimeout: stallMs } = options;
  if (!reload) await renewIfLost();
  if (typeof files === 'string') {
    const dir = files.endsWith('/') ? files : `${files}/`;
    files = { safetensors: `${dir}model.safetensors`, tokenizer: `${dir}tokenizer.json`, config: `${dir}config.json` };
  }
  // A GGUF sentence encoder is one file; a Model2Vec model is three.
  const none = new Uint8Array(0);
  const [tokenizer, cfg] = files.gguf !== undefined ? [none, none]
    : await Promise.all([readAll(files.tokenizer, { cache, stallMs }), readAll(files.config, { cache, stallMs })]);
  const opened = await open(files.gguf ?? files.safetensors, { cache, stallMs });
  const gathered = opened.total === null ? await gather(opened) : null;
  const total = gathered?.total ?? opened.total;
  if (!reload) { embedder = null; await ensureRoom(total + tokenizer.byteLength, { keepModel: true, keepEmbedder: false }); }
  // The safetensors (or GGUF) block is the module's from load_embedder on (as load_model's).
  const ptr = wm.exports.alloc(total);
  if (ptr === 0) throw new WasmindError(2, `alloc(${total}) failed: the embedder does not fit in memory`);
  let at = 0;
  const writer = { write: (c) => { wm.copyIn(ptr + at, c); at += c.byteLength; }, abort: () => wm.free(ptr, total) };
  await pump(opened, writer, id !== undefined ? progress(id, total) : () => {}, gathered?.chunks);
  await opened.stored;
  wm.loadEmbedderBlock(ptr, total, tokenizer, cfg);
  embedder = { files, size: total + tokenizer.byteLength };
  return { dim: wm.embedDim };
}

/** The reply's constraint from the chat options: `grammar` (GBNF text) or an OpenAI-shaped
 *  `responseFormat` ({ type: 'json_object' } or { type: 'json_schema', json_schema: { schema } }
 *  or { type: 'json_schema', schema }). The module uses it up with this reply. */
function setConstraint({ grammar, responseFormat: rf } = {}) {
  if (grammar != null) return wm.setGrammar({ grammar });
  if (rf == null || rf.type === 'text') return;
  if (rf.type === 'json_object') return wm.setGrammar({ json: true });
  const schema = rf.json_schema?.schema ?? rf.schema;
  if (rf.type === 'json_schema' && schema != null) return wm.setGrammar({ schema });
  throw new WasmindError(1, `responseFormat ${JSON.stringify(rf)}: expected { type: 'text' | 'json_object' } or { type: 'json_schema', json_schema: { schema } }`);
}

async function chat({ id, messages, reset, options = {} }) {
  // Settings not given are the module's defaults (WasmindModule.setSampler).
  const { maxTokens = 0, temperature, topK, topP, minP, repeatPenalty, repeatWindow, seed, dropOldest, think } = options;
  if (reset) wm.resetChat();
  wm.setSampler({ temperature, topK, topP, minP, repeatPenalty, repeatWindow, seed });
  wm.setChatOptions({ dropOldest, think });
  setConstraint(options);
  for (const m of messages) wm.addMessage(m.role, m.content); // index.js chatMessages: strings
  const x = wm.exports;
  const mine = slot; // this reply's stop slot (the module may be replaced later)
  if (mine) Atomics.store(mine, 0, id);
  active = id;
  try {
    wm.startReply(maxTokens);
    for (;;) {
      if (stopped.has(id)) x.request_stop();
      const n = x.chat_next(performance.now());
      if (n === -E_END || n === -E_STOPPED || n === -E_CONTEXT_FULL) break;
      if (wm.check(n) > 0) post({ id, event: 'piece', text: wm.resultText(n) });
      await yieldNow(); // let a stop (or anything else) in
    }
  } finally {
    stopped.delete(id); active = null;
    // Take the slot back, waiting out a stopper inside its store (a stop for this reply set
    // the flag before this, and the next chat_start clears it).
    while (mine && Atomics.compareExchange(mine, 0, id, 0) === -id) Atomics.wait(mine, 0, -id, 5);
  }
  return wm.chatStats();
}

function embed({ texts }) {
  const vectors = wm.embed(texts);
  return { value: vectors, transfer: vectors.map((v) => v.buffer) };
}

const ops = {
  async init({ options }) { config = options; await start(0); return describe(); },
  load: loadModel,
  loadEmbedder,
  chat,
  embed,
  stats: () => wm.chatStats(),
  usage: () => ({ wasm: wm ? wm.memory.buffer.byteLength : 0, heap: jsHeap(), peakLoadHeap, loadHeapBase, chunkMax }),
  info: () => wm.modelInfo(),
  tokens: () => ({ ids: wm.chatTokens(), last: wm.exports.chat_last_token() }),
  reset: () => { wm.resetChat(); return true; },
  deleteCached: ({ url }) => deleteCached(url),
  injectFault: ({ helper, kind }) => wm.injectFault(helper, kind),
  async close() {
    stopper?.terminate(); stopper = null;
    if (wm) await wm.close();
    wm = null;
    // Chromium: a driver terminated right after the workers that shared its memory were
    // terminated sometimes never ended (and kept the memory). Let them end by themselves first.
    if (!isNode) await new Promise((r) => setTimeout(r, 100));
    return true;
  },
};

function serialize(e) {
  if (e instanceof WasmindError) return { name: 'WasmindError', message: e.message, code: e.code, status: e.status };
  if (e instanceof SourceError) return { name: 'WasmindError', message: e.message, status: e.status };
  if (e?.name === 'AbortError') return { name: 'AbortError', message: e.message };
  return { name: e?.name ?? 'Error', message: String(e?.message ?? e), status: 'ERROR', stack: e?.stack };
}

let queue = Promise.resolve();
const onMessage = (m) => {
  if (m.op === 'spawned') return spawned(m);
  if (m.op === 'stop') { stopped.add(m.target); if (wm && active === m.target) wm.exports.request_stop(); return; }
  queue = queue.then(async () => {
    try {
      const r = await ops[m.op](m);
      if (r && typeof r === 'object' && 'transfer' in r) post({ id: m.id, value: r.value }, r.transfer);
      else post({ id: m.id, value: r });
      if (m.op === 'close' && !isNode) self.close(); // end now, do not wait for terminate()
    } catch (e) {
      post({ id: m.id, error: serialize(e) });
    }
  });
};
if (isNode) port.on('message', onMessage); else port.onmessage = (e) => onMessage(e.data);
post({ event: 'listening' });
