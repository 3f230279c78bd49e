// worker.js: wasmind in a Cloudflare Worker (run locally by workerd: see README.md here).
//
//   POST /embed  { "input": "text" | ["text", …] }            -> OpenAI-shaped embeddings
//   POST /chat   { "messages": [{ role, content }], "max_tokens": 64, "temperature": 0, … }
//                                                              -> OpenAI-shaped chat.completion
//   GET  /stats  the module memory of this isolate (and of the chat Worker's, when bound)
//
// A Worker may not compile wasm bytes at run time, so the single-threaded module is imported
// as a compiled module (`import wasm from '….wasm'`: workerd's `wasm` module type, wrangler's
// CompiledWasm rule), instantiated once per isolate and driven through the low-level glue
// (glue/wasmind.js) on the request's thread: no Workers, no shared memory. Models come through
// the MODELS binding (a service that serves files: a disk directory here, another Worker or an
// origin in production), streamed from the response body into the module's memory chunk by
// chunk, never whole in JS; the first request that needs one loads it, later ones reuse it.
//
// Memory: an isolate has 128 MB, wasm memory and JS heap together. The embedder (potion-base-8M,
// 30 MB of rows) needs a 35 MiB module memory; SmolLM2-135M Q4_1 (98 MB) with a 512-token
// context about 113 MiB: each fits alone, not both. So this Worker embeds, and hands /chat to the
// Worker bound as CHAT, the same script in an isolate of its own (config.capnp).
import wasm from '../../../dist/wasmind.wasm';
import { WasmindModule, WasmindError } from '../../wasmind.js';
import { chunks } from '../../source.js';

const MAX_BODY = 1 << 20; // bytes of JSON a request may send

/** The module, one per isolate, and what it holds: { wm, embedder: Promise|null, model: Promise|null }. */
let held = null;
async function module() {
  held ??= { wm: new WasmindModule(wasm, (await WebAssembly.instantiate(wasm)).exports), embedder: null, model: null };
  return held;
}

/** A file of the MODELS binding, as a Response with a body; a missing one is an error naming it. */
async function modelFile(env, path) {
  if (!env.MODELS) throw new HttpError(500, 'no MODELS binding: bind the service that serves the model files (config.capnp)');
  const r = await env.MODELS.fetch(new URL(path, 'http://models/'));
  if (!r.ok) throw new HttpError(502, `MODELS ${path}: HTTP ${r.status}`);
  return r;
}

/** Streams a response body into `write(chunk)`, through one reused 256 KiB buffer (source.js:
 *  a fresh ArrayBuffer per chunk would leave megabytes of garbage beside the module). */
async function pour(response, write) {
  for await (const c of chunks(response.body)) write(c);
}

/** Loads `key` ('embedder' or 'model') once per isolate; a failed load is tried again next time. */
function once(h, key, loader) {
  h[key] ??= loader().catch((e) => { h[key] = null; throw e; });
  return h[key];
}

/** The Model2Vec folder EMBED_MODEL (model.safetensors, tokenizer.json, config.json). */
function loadEmbedder(h, env) {
  return once(h, 'embedder', async () => {
    const dir = env.EMBED_MODEL ?? 'potion-base-8M/';
    const [tokenizer, config] = await Promise.all(['tokenizer.json', 'config.json']
      .map(async (f) => new Uint8Array(await (await modelFile(env, dir + f)).arrayBuffer())));
    const st = await modelFile(env, `${dir}model.safetensors`);
    const total = Number(st.headers.get('content-length'));
    if (!Number.isSafeInteger(total) || total <= 0) throw new HttpError(502, `${dir}model.safetensors: no Content-Length`);
    const ptr = h.wm.exports.alloc(total); // the module's block from load_embedder on
    if (ptr === 0) throw new WasmindError(2, `alloc(${total}) failed: the embedder does not fit in memory`);
    let at = 0;
    try {
      await pour(st, (c) => { if (at + c.byteLength > total) throw new HttpError(502, 'more bytes than announced'); h.wm.copyIn(ptr + at, c); at += c.byteLength; });
      if (at !== total) throw new HttpError(502, `${dir}model.safetensors: ${at} of ${total} bytes arrived`);
    } catch (e) { h.wm.free(ptr, total); throw e; }
    return { dim: h.wm.loadEmbedderBlock(ptr, total, tokenizer, config), name: dir.replace(/\/$/, '') };
  });
}

/** The GGUF file CHAT_MODEL with a CONTEXT-token KV cache. */
function loadModel(h, env) {
  return once(h, 'model', async () => {
    const path = env.CHAT_MODEL ?? 'SmolLM2-135M-Instruct.Q4_1.gguf';
    const r = await modelFile(env, path);
    const total = Number(r.headers.get('content-length'));
    if (!Number.isSafeInteger(total) || total <= 0) throw new HttpError(502, `${path}: no Content-Length`);
    const writer = h.wm.beginLoad(total);
    try { await pour(r, writer.write); } catch (e) { writer.abort(); throw e; }
    return { info: writer.finish({ context: Number(env.CONTEXT ?? 512) }), name: path };
  });
}

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** The request's JSON body (an object), at most MAX_BODY bytes. */
async function body(request) {
  const text = await request.text();
  if (text.length > MAX_BODY) throw new HttpError(413, `the body is over ${MAX_BODY} bytes`);
  let v;
  try { v = JSON.parse(text); } catch (e) { throw new HttpError(400, `the body is not JSON (${e.message})`); }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new HttpError(400, 'the body must be a JSON object');
  return v;
}

async function embed(request, env) {
  const { input } = await body(request);
  const texts = typeof input === 'string' ? [input] : input;
  if (!Array.isArray(texts) || texts.length === 0 || texts.some((t) => typeof t !== 'string')) {
    throw new HttpError(400, '"input" must be a string or a non-empty array of strings');
  }
  const h = await module();
  const { name } = await loadEmbedder(h, env);
  const vectors = h.wm.embed(texts);
  return Response.json({ object: 'list', model: name,
    data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: Array.from(v) })) });
}

/** OpenAI's sampling names -> WasmindModule.setSampler's. */
const SAMPLING = { temperature: 'temperature', top_k: 'topK', top_p: 'topP', min_p: 'minP', repeat_penalty: 'repeatPenalty', seed: 'seed' };

async function chat(request, env) {
  const req = await body(request);
  const { messages, max_tokens: maxTokens = 256 } = req;
  if (!Array.isArray(messages) || messages.length === 0) throw new HttpError(400, '"messages" must be a non-empty array of { role, content }');
  const h = await module();
  const { name } = await loadModel(h, env);
  const wm = h.wm;
  // One reply at a time, start to end without an await: requests are not interleaved.
  wm.resetChat();
  wm.setSampler(Object.fromEntries(Object.entries(SAMPLING).filter(([k]) => req[k] !== undefined).map(([k, v]) => [v, req[k]])));
  messages.forEach((m, i) => {
    if (m === null || typeof m !== 'object') throw new HttpError(400, `message ${i} is not { role, content }`);
    wm.addMessage(m.role === 'developer' ? 'system' : m.role, m.content);
  });
  const content = wm.replyText({ maxTokens });
  const s = wm.chatStats();
  return Response.json({
    object: 'chat.completion', model: name,
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: s.state === 'limit' ? 'length' : 'stop' }],
    usage: { prompt_tokens: s.prompt_tokens, completion_tokens: s.tokens, total_tokens: s.prompt_tokens + s.tokens },
    wasmind: { state: s.state, ...(req.tokens === true ? { ids: wm.chatTokens(), last: wm.exports.chat_last_token() } : {}) },
  });
}

async function stats(env) {
  const here = held ? held.wm.memory.buffer.byteLength : 0;
  const chat = env.CHAT ? await (await env.CHAT.fetch('http://chat/stats')).json() : null;
  return Response.json({ wasm_bytes: here, chat });
}

/** A failure as JSON: the module's status (INVALID_ARGUMENT, CONTEXT_FULL, …) is the client's
 *  fault where it names bad input, else the server's. */
function failure(e) {
  if (e instanceof HttpError) return Response.json({ error: { message: e.message } }, { status: e.status });
  if (e instanceof WasmindError) {
    const client = ['INVALID_ARGUMENT', 'CONTEXT_FULL', 'INVALID_UTF8'].includes(e.status);
    return Response.json({ error: { message: e.message, status: e.status } }, { status: client ? 400 : 500 });
  }
  return Response.json({ error: { message: String(e?.message ?? e) } }, { status: 500 });
}

export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    try {
      if (request.method === 'GET' && pathname === '/stats') return await stats(env);
      if (request.method !== 'POST' || (pathname !== '/embed' && pathname !== '/chat')) {
        return new Response('wasmind: POST /embed { "input": … } or POST /chat { "messages": […] }\n', { status: 404 });
      }
      if (pathname === '/chat' && env.CHAT) return await env.CHAT.fetch(request); // the chat Worker's isolate
      return await (pathname === '/embed' ? embed(request, env) : chat(request, env));
    } catch (e) {
      return failure(e);
    }
  },
};
