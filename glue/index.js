// index.js: wasmind for a web page, a Worker or Node, in a few lines (no dependencies).
//
//   import { Wasmind } from 'wasmind';
//   const ai = await Wasmind.create();
//   await ai.load('https://huggingface.co/…/resolve/main/model.gguf', { onProgress: console.log });
//   for await (const piece of ai.chat([{ role: 'user', content: 'Hi!' }])) out.textContent += piece;
//
// Every call goes to a driver Worker (driver.js; worker_threads in Node) that owns the module
// (glue/wasmind.js, the low-level glue) and, on a cross-origin isolated page, its helper workers
// on one shared memory; without isolation it runs the single-threaded module. Nothing here blocks,
// so the page's main thread is a fine place to call it from. A URL is streamed by the driver
// straight into the module's memory and kept in the origin private file system (source.js).

import { WasmindError, describe, ROLE, within } from './wasmind.js';
import { deleteCached, cached, CACHE_NAME } from './source.js';

const isNode = typeof process === 'object' && !!process.versions?.node;
const DIST = new URL('../dist/', import.meta.url).href;

export { WasmindError, CACHE_NAME };

/** Rebuilds a driver's error: a WasmindError with the module's status name and message, or the
 *  AbortError of a cancelled call. */
function revive(e) {
  if (e.name === 'AbortError') return new DOMException(e.message, 'AbortError');
  const err = new WasmindError(e.code ?? 0, e.message);
  err.name = 'WasmindError';
  if (e.status) err.status = e.status;
  if (e.stack && e.status === 'ERROR') err.driverStack = e.stack;
  return err;
}

/** A blob: module that imports `url`: a blob worker gets the page's service worker (Chromium
 *  fetches a Worker's own script past it, so a page served offline could not start one). */
export function bootstrap(url) {
  return URL.createObjectURL(new Blob([`import ${JSON.stringify(String(url))};`], { type: 'text/javascript' }));
}

async function spawnDriver() {
  const url = new URL('./driver.js', import.meta.url);
  if (isNode) {
    const w = new (await import('node:worker_threads')).Worker(url);
    w.unref?.(); // an idle driver does not keep Node alive
    return { post: (m) => w.postMessage(m), terminate: () => w.terminate(),
      listen: (f, fail) => { w.on('message', f); w.on('error', fail); w.on('exit', (c) => fail(new Error(`the wasmind driver exited (${c})`))); },
      ref: (on) => (on ? w.ref() : w.unref()) };
  }
  const w = new Worker(bootstrap(url), { type: 'module', name: 'wasmind-driver' });
  const kids = new Map(); // the driver's helpers and stopper, started here (spawnFor)
  return { post: (m) => w.postMessage(m),
    terminate: () => { for (const k of kids.values()) k.terminate(); kids.clear(); w.terminate(); },
    listen: (f, fail) => {
      w.onmessage = (e) => (e.data.event === 'spawn' || e.data.event === 'end' || e.data.event === 'relay' ? spawnFor(w, kids, e) : f(e.data));
      w.onerror = (e) => { e.preventDefault?.(); fail(new Error(e.message ?? 'the wasmind driver failed')); };
    },
    ref: () => {} };
}

/** A Worker the driver asked for (driver.js, spawnByPage: { sid, url } a module that the page's
 *  service worker serves, or { sid, script } a classic one), started here on the page and
 *  answering the driver over a MessagePort, so Firefox never makes it inside the driver (which can
 *  hang there: see driver.js). { event: 'relay', sid, message } is forwarded to it at once (with
 *  the ports the driver transferred), { event: 'end', sid } ends it. */
function spawnFor(driver, kids, { data: { event, sid, url, script, name, port } }) {
  if (event === 'relay') { kids.get(sid)?.postMessage({ wasmindRelay: port }, [port]); return; }
  if (event === 'end') { kids.get(sid)?.terminate(); kids.delete(sid); return; }
  let w;
  try {
    if (url) w = new Worker(bootstrap(url), { type: 'module', name });
    else {
      const src = URL.createObjectURL(new Blob([script], { type: 'text/javascript' }));
      w = new Worker(src, { name });
      URL.revokeObjectURL(src);
    }
  } catch (e) {
    driver.postMessage({ op: 'spawned', sid, error: `${name}: ${e?.message ?? e}` });
    return;
  }
  kids.set(sid, w);
  const { port1, port2 } = new MessageChannel();
  w.onerror = (e) => { e.preventDefault?.(); driver.postMessage({ op: 'spawned', sid, error: e.message || `${name} failed to start` }); };
  w.postMessage({ wasmindPort: port2 }, [port2]);
  driver.postMessage({ op: 'spawned', sid, port: port1 }, [port1]);
}

/** A URL string or URL as an absolute URL (against the page); other values as they are. */
/** Whether a URL's path names a GGUF file (`….gguf`, before any query). */
const ggufPath = (s) => /\.gguf$/i.test(String(s instanceof URL ? s.pathname : s).replace(/[?#].*$/, ''));
const absolute = (s) => (s instanceof URL ? s.href : typeof s === 'string' && !isNode ? new URL(s, globalThis.location?.href).href : s);
const same = (a, b) => a && b && a.role === b.role && a.content === b.content;
/** `chat`'s messages as the module takes them, `{ role, content }` with a string content, from
 *  OpenAI's shape (and 'raw': text added as it is): 'developer' is 'system', text parts
 *  (`[{ type: 'text', text }]`) are joined, a null content is empty. Anything else (another
 *  role, a number, an image part) throws INVALID_ARGUMENT naming the message, rather than
 *  reaching the model as some other text. */
function chatMessages(messages) {
  const fail = (m) => { throw new WasmindError(1, m); };
  if (!Array.isArray(messages)) fail(`chat takes an array of messages ({ role, content }), not ${describe(messages)}`);
  return messages.map((m, i) => {
    if (m === null || typeof m !== 'object') fail(`message ${i} is ${describe(m)}, not { role, content }`);
    const role = m.role === 'developer' ? 'system' : m.role;
    if (typeof role !== 'string' || !Object.hasOwn(ROLE, role)) {
      fail(`message ${i}: role ${JSON.stringify(m.role)} is not one of developer, ${Object.keys(ROLE).join(', ')}`);
    }
    let content = m.content ?? '';
    if (Array.isArray(content)) {
      const part = content.findIndex((p) => p?.type !== 'text' || typeof p.text !== 'string');
      if (part >= 0) fail(`message ${i}: content part ${part} is not { type: 'text', text } (only text is read)`);
      content = content.map((p) => p.text).join('');
    }
    if (typeof content !== 'string') fail(`message ${i}: content is ${describe(content)}, not a string or text parts`);
    return { role, content };
  });
}

/** Checks the options of `what` against `kinds` ({ name: kind }): a name not there, or a value of
 *  another kind, throws INVALID_ARGUMENT (a typo or a '4' is not silently dropped or converted).
 *  Kinds: 'count' (an integer >= 0), 'positive' (an integer >= 1), 'boolean', 'string',
 *  'function', 'object', or 'checked' (checked where it is used: the sampler settings in
 *  WasmindModule.setSampler, quantize in the driver). `undefined` is the default. */
function checkOptions(what, options, kinds) {
  if (options === null || typeof options !== 'object') throw new WasmindError(1, `${what}: the options are ${describe(options)}, not an object`);
  for (const [name, v] of Object.entries(options)) {
    const kind = Object.hasOwn(kinds, name) ? kinds[name] : undefined;
    if (kind === undefined) throw new WasmindError(1, `${what}: unknown option '${name}' (the options: ${Object.keys(kinds).join(', ')})`);
    const ok = v === undefined || kind === 'checked'
      || (kind === 'count' ? Number.isInteger(v) && v >= 0 : kind === 'positive' ? Number.isInteger(v) && v >= 1
        : kind === 'object' ? v !== null && typeof v === 'object' : typeof v === kind);
    if (!ok) {
      const want = { count: 'an integer >= 0', positive: 'an integer >= 1', object: 'an object' }[kind] ?? `a ${kind}`;
      throw new WasmindError(1, `${what}: ${name} must be ${want}, not ${describe(v)}`);
    }
  }
}

/** What `chat` takes (index.d.ts, ChatOptions). */
const CHAT_OPTIONS = { maxTokens: 'checked', temperature: 'checked', topK: 'checked', topP: 'checked', minP: 'checked',
  repeatPenalty: 'checked', repeatWindow: 'checked', seed: 'checked', signal: 'object', responseFormat: 'object', grammar: 'string',
  dropOldest: 'boolean', think: 'boolean' };

export class Wasmind {
  /**
   * Starts the driver (and helpers on a cross-origin isolated page). Options: `threads` (driver
   * included; default ¾ of the cores, at most 16), `dist` (URL of the folder with the .wasm
   * files; default the package's dist/), `threaded` (default: when shared memory is allowed),
   * `relaxed` (the relaxed-SIMD build; default: when the engine runs relaxed SIMD),
   * `startTimeout` (ms the driver may take to start and load the module before the call rejects
   * with TIMEOUT and the workers are ended; default 60000).
   */
  static async create(options = {}) {
    checkOptions('Wasmind.create', options, { threads: 'positive', dist: 'checked', threaded: 'boolean', relaxed: 'boolean',
      startTimeout: 'positive' });
    const ai = new Wasmind(options);
    await ai.#start();
    return ai;
  }

  /** Deletes a cached file (a URL given to load/loadEmbedder), or every cached file. */
  static deleteCached(url) { return deleteCached(url === undefined ? undefined : absolute(url)); }

  /** The cached copy of a URL as { size }, or null. */
  static async cached(url) { const f = await cached(absolute(url)); return f && { size: f.size }; }

  #options; #startMs; #driver = null; #starting = null; #next = 1; #pending = new Map();
  #history = [];      // the messages the module holds, its replies included; null: unknown
  #chatting = null;   // id of the reply in progress
  #stats = null;
  #stopPort = null;   // threaded: a port to the driver's stopper worker, which stores the stop flag

  constructor(options) {
    this.#options = { threads: options.threads, threaded: options.threaded, relaxed: options.relaxed,
      dist: new URL(options.dist ?? DIST, globalThis.location?.href ?? import.meta.url).href };
    this.#startMs = options.startTimeout ?? 60000;
    this.threaded = false; this.threads = 1; this.relaxed = false; this.compiled = null; this.cache = null;
    this.model = null; this.embedDim = 0;
  }

  async #start() {
    if (this.#driver) return;
    if (this.#starting) return this.#starting;
    this.#starting = (async () => {
      const d = await spawnDriver();
      let listening, waiting = 'the driver worker (driver.js) did not start';
      const up = new Promise((ok, fail) => { listening = { ok, fail }; });
      d.listen((m) => this.#receive(m, listening), (e) => this.#fail(d, e, listening));
      const started = (async () => {
        await up;
        this.#driver = d;
        waiting = `the module did not load from ${this.#options.dist}`;
        this.#module(await this.#call('init', { options: this.#options }));
      })();
      const late = () => Object.assign(new WasmindError(0, `wasmind: ${waiting} within ${this.#startMs} ms (startTimeout)`),
        { status: 'TIMEOUT' });
      try {
        await within(started, this.#startMs, late);
      } catch (e) {
        // A driver that failed or is late is ended, so the next call starts a fresh one.
        started.catch(() => {});
        if (this.#driver === d) this.#driver = null;
        for (const p of this.#pending.values()) p.reject(e);
        this.#pending.clear();
        d.terminate();
        throw e;
      }
    })();
    try { await this.#starting; } finally { this.#starting = null; }
  }

  #module(m) {
    this.threaded = m.threaded; this.threads = m.threads; this.relaxed = m.relaxed;
    this.compiled = m.compiled; this.cache = m.cache;
    if (m.stopPort !== undefined) { this.#stopPort?.close(); this.#stopPort = m.stopPort; this.#stopPort?.unref?.(); }
  }

  #receive(m, listening) {
    if (m.event === 'listening') return listening.ok();
    if (m.event === 'module') return this.#module(m);
    const p = this.#pending.get(m.id);
    if (!p) return;
    if (m.event) return p.onEvent?.(m);
    this.#pending.delete(m.id);
    if (this.#pending.size === 0) this.#driver?.ref(false);
    if (m.error) p.reject(revive(m.error)); else p.resolve(m.value);
  }

  #fail(d, e, listening) {
    listening.fail(e);
    if (this.#driver !== d) return; // an old driver ending after unload()
    for (const p of this.#pending.values()) p.reject(e);
    this.#pending.clear();
    d.terminate(); this.#driver = null;
  }

  #call(op, args = {}, onEvent) {
    const id = this.#next++;
    const done = new Promise((resolve, reject) => this.#pending.set(id, { resolve, reject, onEvent }));
    this.#driver.ref(true);
    this.#driver.post({ id, op, ...args });
    return Object.assign(done, { id });
  }

  /**
   * Loads a GGUF model: `source` is a URL (a Hugging Face `resolve` URL too), a Blob/File, or
   * bytes. Options: `onProgress({ loaded, total })`, `cache` (URLs; default true: kept in the
   * origin private file system and reused while the server reports the same length), `context` (KV tokens; 0 =
   * the model's, at most 4096), `size` (the expected length: a cached copy is checked against it
   * without a HEAD request), `stallTimeout` (ms a server may send no answer or no bytes before
   * the load rejects with NETWORK; default 60000), `quantize`, `template`. Resolves with the
   * model info.
   */
  async load(source, options = {}) {
    checkOptions('load', options, { onProgress: 'function', cache: 'boolean', context: 'count', size: 'count', quantize: 'checked',
      template: 'string', stallTimeout: 'positive' });
    const { onProgress, cache = true, context = 0, size, quantize, template, stallTimeout } = options;
    await this.#start();
    source = absolute(source);
    this.#history = [];
    this.model = null;
    const info = await this.#call('load', { source, options: { cache, context, size, quantize, template, stallTimeout } },
      (m) => m.event === 'progress' && onProgress?.({ loaded: m.loaded, total: m.total }));
    return this.model = info;
  }

  /**
   * A reply to OpenAI-shaped `messages` ([{ role, content }]), piece by piece. Options:
   * `maxTokens` (0: up to the context), `temperature` (0: greedy), `topK`, `topP`, `minP`,
   * `repeatPenalty`, `seed`, `signal` (an AbortSignal: the reply stops and the iteration throws
   * its reason), `dropOldest` (when a new turn does not fit the context, drop the oldest turns,
   * keeping system messages, instead of rejecting with CONTEXT_FULL), `think` (let a model that
   * can reason think: Qwen3). When the messages extend the conversation the module holds (its
   * own replies included), only the new ones are read and the KV cache is reused. An option not
   * listed here, or a setting of the wrong kind (`topK: 'all'`, `maxTokens: -1`), rejects with
   * INVALID_ARGUMENT.
   */
  async *chat(messages, options = {}) {
    messages = chatMessages(messages);
    checkOptions('chat', options, CHAT_OPTIONS);
    const { signal, ...sampling } = options;
    signal?.throwIfAborted();
    if (!this.#driver) throw new WasmindError(5, 'no model is loaded (load)');
    const held = this.#history;
    const extends_ = held !== null && held.length <= messages.length && held.every((m, i) => same(m, messages[i]));
    const fresh = extends_ ? messages.slice(held.length) : messages;
    const queue = []; let wake = null, over = false, failure = null, all = '';
    this.#history = null; // unknown until the reply is over
    const req = this.#call('chat', { messages: fresh, reset: !extends_, options: sampling }, (m) => {
      if (m.event === 'piece') { all += m.text; queue.push(m.text); wake?.(); }
    });
    this.#chatting = req.id;
    req.then((stats) => {
      this.#history = [...messages, { role: 'assistant', content: all }];
      this.#stats = stats;
    }, (e) => { failure = e; }).finally(() => {
      over = true; if (this.#chatting === req.id) this.#chatting = null; wake?.();
    });
    const onAbort = () => this.stop();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      for (;;) {
        while (queue.length) yield queue.shift();
        if (over) break;
        await new Promise((r) => { wake = r; });
        wake = null;
      }
      if (failure) throw failure;
      signal?.throwIfAborted();
    } finally {
      signal?.removeEventListener('abort', onAbort);
      if (!over) this.stop(); // the loop was left early: end the reply
    }
  }

  /** Ends the reply in progress within one token (both modules). */
  stop() {
    const id = this.#chatting;
    if (id === null || !this.#driver) return;
    this.#stopPort?.postMessage(id); // threaded: lands even inside a prompt (only in reply `id`)
    this.#driver.post({ op: 'stop', target: id });
  }

  /** The last reply's { promptTokens, tokens, prefillTps, decodeTps, state, droppedMessages }, or null. */
  stats() {
    const s = this.#stats;
    return s && { promptTokens: s.prompt_tokens, tokens: s.tokens, prefillTps: s.prefill_tps,
      decodeTps: s.decode_tps, state: s.state, droppedMessages: s.dropped_messages ?? 0 };
  }

  /** The token ids the KV cache holds (the conversation so far; the end token of the last reply
   *  is not run) and `last`, the id sampled last. For tests and debugging. */
  async tokens() { return this.#call('tokens'); }

  /** Forgets the conversation (the next chat reads all its messages). */
  async reset() { this.#history = []; if (this.#driver) await this.#call('reset'); }

  /** Loads an embedder: a Model2Vec folder URL (model.safetensors, tokenizer.json, config.json)
   *  or { safetensors, tokenizer, config }, each a URL, Blob or bytes; or a BERT sentence
   *  encoder in one GGUF file: a URL whose path ends in .gguf, a Blob, bytes, or { gguf }.
   *  Options: `cache`, `onProgress`, `stallTimeout` (as load's). Resolves with { dim }. */
  async loadEmbedder(source, options = {}) {
    checkOptions('loadEmbedder', options, { cache: 'boolean', onProgress: 'function', stallTimeout: 'positive' });
    const { cache = true, onProgress, stallTimeout } = options;
    const url = typeof source === 'string' || source instanceof URL;
    const bytes = source instanceof Blob || source instanceof ArrayBuffer || ArrayBuffer.isView(source);
    const gguf = bytes ? source : url && ggufPath(source) ? source : source?.gguf;
    if (!url && gguf == null) {
      const missing = source !== null && typeof source === 'object' && !Array.isArray(source)
        ? ['safetensors', 'tokenizer', 'config'].filter((k) => source[k] == null) : null;
      if (missing === null) throw new WasmindError(1, `loadEmbedder takes a folder URL, { safetensors, tokenizer, config } or a GGUF file, not ${describe(source)}`);
      if (missing.length) throw new WasmindError(1, `loadEmbedder: ${missing.join(', ')} missing (give { safetensors, tokenizer, config }, or { gguf })`);
    }
    await this.#start();
    const files = gguf != null ? { gguf: absolute(gguf) } : url ? absolute(source)
      : { safetensors: absolute(source.safetensors), tokenizer: absolute(source.tokenizer), config: absolute(source.config) };
    const r = await this.#call('loadEmbedder', { files, options: { cache, stallTimeout } },
      (m) => m.event === 'progress' && onProgress?.({ loaded: m.loaded, total: m.total }));
    this.embedDim = r.dim;
    return r;
  }

  /** A sentence vector (Float32Array) for a string, or one per string for an array. Anything
   *  else (a number, null, an array holding one) rejects with INVALID_ARGUMENT. */
  async embed(text) {
    if (!this.#driver) throw new WasmindError(5, 'no embedder is loaded (loadEmbedder)');
    if (!Array.isArray(text) && typeof text !== 'string') {
      throw new WasmindError(1, `embed takes a string or an array of strings, not ${describe(text)}`);
    }
    const texts = Array.isArray(text) ? text : [text]; // the items are checked by WasmindModule.embed
    const vectors = await this.#call('embed', { texts });
    return Array.isArray(text) ? vectors : vectors[0];
  }

  /** Memory figures from the driver: { wasm: bytes of the module's memory, heap: the driver's
   *  JS heap (where the engine reports it), arrayBuffers (Node), peakLoadHeap }. */
  async usage() { return this.#driver ? this.#call('usage') : { wasm: 0 }; }

  /** Diagnostics: helper worker `helper` fails in the next chunk it claims ('trap' or 'stall',
   *  the latter as a worker terminated mid-job), so a page can test its handling of HELPER_LOST:
   *  the call then in progress rejects with it within 5 s, later calls fail at once, `load` or
   *  `loadEmbedder` starts a new module, `unload` ends the workers. */
  async injectFault(helper, kind) { return this.#call('injectFault', { helper, kind }); }

  /** Ends every worker and releases the memory; `load` starts them again. */
  async unload() {
    const d = this.#driver;
    if (!d) return;
    try { await this.#call('close'); } catch { /* ending anyway */ }
    this.#driver = null; this.#stopPort?.close(); this.#stopPort = null; this.#history = []; this.model = null; this.embedDim = 0;
    for (const p of this.#pending.values()) p.reject(new WasmindError(5, 'unloaded'));
    this.#pending.clear();
    await d.terminate();
  }
}

export default Wasmind;
