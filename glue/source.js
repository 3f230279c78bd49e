// source.js: where model bytes come from, as chunks with a known length (if any), for
// glue/driver.js. A URL is fetched (redirects followed, as Hugging Face's `resolve` URLs need)
// and, with `cache`, kept in the origin private file system (OPFS, folder `wasmind-models`, one
// file per URL named by its SHA-256; where an engine has no OPFS, as WebKitGTK, in the Cache API:
// cacheStore). A cached copy is used when its length equals the server's
// (HEAD: Content-Length, else X-Linked-Size; a HEAD without a length, or no answer as offline,
// keeps the copy), else deleted and fetched again. The download is written to `<name>.part` as it
// streams (a synchronous access handle in a worker: each chunk goes from the one read buffer to
// the file, no copy kept) and renamed to `<name>` only once the whole announced length arrived,
// so an interrupted download leaves nothing behind. Why OPFS and not the Cache API: cache.put
// takes a stream and holds the chunks it was given until it has written them (measured: 5-14 MB
// of ArrayBuffers in the driver during a 98 MB load), where a sync handle writes each chunk before
// the next is read. Blobs stream; bytes are one chunk. In Node a path or file: URL streams from
// the file system (no OPFS there: no cache).

import { within } from './wasmind.js';

export const CACHE_NAME = 'wasmind-models';
const isNode = typeof process === 'object' && !!process.versions?.node;

/** Milliseconds a download may go without a byte (or a server without an answer) before it
 *  fails with NETWORK; `stallTimeout` of load/loadEmbedder sets it per call. */
export const STALL_MS = 60000;

/** A failure that is not the module's: `status` names its kind (NETWORK, HTTP, LENGTH). */
export class SourceError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** Server's length of `response`, or null: Content-Length (unless the body is encoded), else
 *  X-Linked-Size (Hugging Face's header for LFS files). */
function lengthOf(response) {
  const enc = response.headers.get('content-encoding');
  const cl = response.headers.get('content-length');
  if (cl !== null && (!enc || enc === 'identity')) return Number(cl);
  const linked = response.headers.get('x-linked-size');
  return linked !== null ? Number(linked) : null;
}

/** The server's length for `url` by HEAD, or null when unknown, unreachable or silent for
 *  `stallMs`. */
async function serverLength(url, signal, stallMs) {
  try {
    const quiet = AbortSignal.timeout(stallMs);
    const r = await fetch(url, { method: 'HEAD', signal: signal ? AbortSignal.any([signal, quiet]) : quiet, cache: 'no-store' });
    return r.ok ? lengthOf(r) : null;
  } catch (e) {
    if (signal?.aborted) throw e;
    return null; // offline: the cached copy is all there is
  }
}

/** The model cache, or null where there is none (Node, an opaque origin, …): the origin private
 *  file system where the engine gives it, else the Cache API (WebKitGTK 2.50 has no
 *  navigator.storage; Firefox and Chromium have both). Either is { kind: 'opfs' | 'cache-api',
 *  get(name) -> { size, body(stallMs) } or null, writer(name, total) -> { write, commit, drop }
 *  or null, remove(name), clear() }; a file is kept only once `commit` ran. */
export async function cacheStore() {
  return (await opfsStore()) ?? (await cacheApiStore());
}

/** The cache folder `wasmind-models` in OPFS, or null where there is none (or it fails: WebKit
 *  with its StorageAPI feature on but no data folder throws UnknownError). */
async function opfsStore() {
  let root, dir;
  try {
    root = await globalThis.navigator?.storage?.getDirectory?.();
    dir = root && await root.getDirectoryHandle(CACHE_NAME, { create: true });
  } catch { return null; }
  if (!dir) return null;
  return {
    kind: 'opfs',
    get: async (name) => { const file = await fileIn(dir, name); return file && { size: file.size, body: (ms) => cachedBody(dir, name, file, ms) }; },
    writer: (name) => partFile(dir, name),
    remove: async (name) => { await remove(dir, name); await remove(dir, `${name}.part`); },
    clear: () => root.removeEntry(CACHE_NAME, { recursive: true }).catch(() => {}),
  };
}

/** The Cache API as the model cache (cache `wasmind-models`, one entry per file, keyed by a URL
 *  that is never fetched). A download is put as a streamed Response whose chunks are copies (the
 *  reader reuses its buffer); `cache.put` adds the entry only once that stream closes, so a cut
 *  download (the stream errored) leaves nothing. Unlike a sync access handle it may hold chunks
 *  not yet written: the reason OPFS comes first. */
async function cacheApiStore() {
  let cache;
  try {
    if (typeof globalThis.caches?.open !== 'function') return null;
    cache = await caches.open(CACHE_NAME);
  } catch { return null; }
  const key = (name) => `https://wasmind.invalid/${name}`;
  return {
    kind: 'cache-api',
    get: async (name) => {
      const r = await cache.match(key(name)).catch(() => undefined);
      const size = Number(r?.headers.get('X-Wasmind-Size'));
      if (!r || !Number.isInteger(size)) return null;
      return { size, body: (ms) => {
        const stream = r.body;
        return { [Symbol.asyncIterator]: () => chunks(stream, ms)[Symbol.asyncIterator](), cancel: () => stream.cancel().catch(() => {}) };
      } };
    },
    writer: (name, total) => {
      let ctl;
      const stream = new ReadableStream({ start: (c) => { ctl = c; } });
      const put = cache.put(key(name), new Response(stream, { headers: { 'X-Wasmind-Size': String(total), 'Content-Type': 'application/octet-stream' } }));
      put.catch(() => {});
      return {
        write: async (view) => ctl.enqueue(view.slice()),
        commit: async () => { ctl.close(); await put; },
        drop: async () => { try { ctl.error(new Error('download dropped')); } catch { /* closed */ } await put.catch(() => {}); await cache.delete(key(name)).catch(() => {}); },
      };
    },
    remove: (name) => cache.delete(key(name)).then(() => {}, () => {}),
    clear: () => caches.delete(CACHE_NAME).then(() => {}, () => {}),
  };
}

/** The file name a URL is cached under: the hex SHA-256 of the URL. */
export async function cacheName(url) {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(String(url)));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

async function fileIn(dir, name) {
  try { return await (await dir.getFileHandle(name)).getFile(); } catch { return null; }
}
const remove = (dir, name) => dir.removeEntry(name).catch(() => {});

/** The cached copy of `url` ({ size }), or null. */
export async function cached(url) {
  const store = await cacheStore();
  return store ? store.get(await cacheName(url)) : null;
}

/**
 * Opens `url`. Returns { total (bytes or null), body (an async iterable of Uint8Array, each valid
 * until the next is asked for), fromCache, stored (a promise: true once the cache holds the
 * file), cancel() }. A server that sends no answer, or no bytes, for `stallMs` fails the open or
 * the body's next chunk with NETWORK.
 */
export async function openUrl(url, { cache = true, size, signal, stallMs = STALL_MS } = {}) {
  if (isNode && (url.startsWith('file:') || !/^[a-z][a-z0-9+.-]*:/i.test(url))) return openFile(url);
  const store = cache && /^https?:/.test(url) ? await cacheStore() : null;
  const name = store ? await cacheName(url) : null;
  if (store) {
    const hit = await store.get(name);
    if (hit) {
      const server = size ?? await serverLength(url, signal, stallMs);
      if (server === null || server === hit.size) {
        const body = hit.body(stallMs);
        return { total: hit.size, body, fromCache: true, stored: Promise.resolve(true), url, cancel: () => body.cancel() };
      }
      await store.remove(name); // stale: the server has another length
    }
  }
  const abort = new AbortController();
  const onAbort = () => abort.abort(signal.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  let response;
  const quiet = setTimeout(() => abort.abort(new Error(`no answer in ${stallMs / 1000} s`)), stallMs);
  try {
    response = await fetch(url, { signal: abort.signal });
  } catch (e) {
    if (signal?.aborted) throw signal.reason;
    throw new SourceError('NETWORK', `${url}: ${e?.message ?? e}`);
  } finally { clearTimeout(quiet); }
  if (!response.ok) throw new SourceError('HTTP', `${url}: HTTP ${response.status}`);
  const total = lengthOf(response);
  const opened = { total, fromCache: false, stored: Promise.resolve(false), url,
    cancel: (why) => abort.abort(why ?? new Error('load cancelled')) };
  opened.body = recorded(chunks(response.body, stallMs), total, url, store && total !== null ? { store, name } : null, opened);
  return opened;
}

/** The body of the cached file `name` in `dir` (`file`: its File). In a worker it is read through a
 *  read-only sync access handle, 256 KiB at a time into one reused buffer; elsewhere, or when no
 *  handle can be had (another tab reading it with an exclusive handle), from the File's stream.
 *  Why not the stream always: in Chromium 156 the stream of a file renamed from its `.part` a
 *  moment before sometimes never delivers its first chunk (glue/test/page.test.mjs reads a split
 *  GGUF's parts back right after their download: 4 of 13 runs stalled there for good, and CI's
 *  run timed out; through the handle, 15 of 15 passed). */
function cachedBody(dir, name, file, stallMs) {
  let handle = null, stream = null;
  const close = () => { try { handle?.close(); } catch { /* closed */ } handle = null; };
  return {
    async *[Symbol.asyncIterator]() {
      try {
        const h = await dir.getFileHandle(name);
        if (typeof h.createSyncAccessHandle === 'function') handle = await h.createSyncAccessHandle({ mode: 'read-only' });
      } catch { handle = null; }
      if (!handle) { stream = file.stream(); yield* chunks(stream, stallMs); return; }
      try {
        const buffer = new Uint8Array(READ_BYTES);
        for (let at = 0; at < file.size;) {
          const n = handle.read(buffer.subarray(0, Math.min(READ_BYTES, file.size - at)), { at });
          if (n === 0) throw new SourceError('LENGTH', `the cached copy ends at ${at} of ${file.size} bytes`);
          at += n;
          yield buffer.subarray(0, n);
        }
      } finally { close(); }
    },
    cancel: async () => { close(); await stream?.cancel().catch(() => {}); },
  };
}

/** A writer of `<name>.part` in `dir`: a sync access handle where there is one (workers), else a
 *  writable stream; commit() renames it to `name`, drop() deletes it. Null if it cannot open. */
async function partFile(dir, name) {
  try {
    const handle = await dir.getFileHandle(`${name}.part`, { create: true });
    if (typeof handle.createSyncAccessHandle === 'function') {
      const h = await handle.createSyncAccessHandle();
      h.truncate(0);
      let at = 0, open = true;
      const close = () => { if (open) { open = false; h.flush(); h.close(); } };
      return {
        write: async (view) => { at += h.write(view, { at }); },
        commit: async () => { close(); await handle.move(name); },
        drop: async () => { try { close(); } catch { /* closed */ } await remove(dir, `${name}.part`); },
      };
    }
    const w = await handle.createWritable();
    return {
      write: (view) => w.write(view.slice()),
      commit: async () => { await w.close(); await handle.move(name); },
      drop: async () => { await w.abort().catch(() => {}); await remove(dir, `${name}.part`); },
    };
  } catch { return null; }
}

/**
 * The body of a download (`views`: chunks() of it), chunk by chunk, each also written to
 * `<name>.part` before the next is read; the file becomes `<name>` only when the whole announced
 * length arrived. Any failure (a cut connection, a stall, a short or long body, the reader giving
 * up) deletes the part file.
 */
async function* recorded(views, total, url, cache, opened) {
  const part = cache ? await cache.store.writer(cache.name, total) : null;
  let n = 0, ok = false;
  let settle;
  opened.stored = new Promise((r) => { settle = r; });
  try {
    for await (const view of views) {
      n += view.byteLength;
      if (total !== null && n > total) throw new SourceError('LENGTH', `${url}: more than the ${total} bytes announced`);
      if (part) await part.write(view);
      yield view;
    }
    if (total !== null && n !== total) throw new SourceError('LENGTH', `${url}: ${n} of ${total} bytes arrived`);
    ok = true;
  } finally {
    if (part && ok) settle(await part.commit().then(() => true, async () => { await part.drop(); return false; }));
    else { if (part) await part.drop(); settle(false); }
  }
}

async function openFile(pathOrUrl) {
  const { createReadStream } = await import('node:fs');
  const { stat } = await import('node:fs/promises');
  const path = pathOrUrl.startsWith('file:') ? new URL(pathOrUrl) : pathOrUrl;
  const { size } = await stat(path);
  const stream = createReadStream(path, { highWaterMark: 1 << 20 });
  return { total: size, body: stream, fromCache: false, stored: Promise.resolve(false), cancel: () => stream.destroy() };
}

/** Opens any source: a URL string or URL, a Blob/File, or bytes (ArrayBuffer or a view).
 *  Options: those of openUrl; `stallMs` also bounds each read of a Blob. */
export async function open(source, options = {}) {
  if (typeof source === 'string' || source instanceof URL) return openUrl(String(source), options);
  if (typeof Blob === 'function' && source instanceof Blob) {
    const stream = source.stream();
    return { total: source.size, body: chunks(stream, options.stallMs), fromCache: false, stored: Promise.resolve(false),
      cancel: () => stream.cancel().catch(() => {}) };
  }
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source) || (typeof SharedArrayBuffer === 'function' && source instanceof SharedArrayBuffer)) {
    const bytes = ArrayBuffer.isView(source) ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength) : new Uint8Array(source);
    return { total: bytes.byteLength, body: [bytes], fromCache: false, stored: Promise.resolve(false), cancel: () => {} };
  }
  throw new SourceError('INVALID_ARGUMENT', `cannot load from ${Object.prototype.toString.call(source)}: give a URL, a Blob or bytes`);
}

const READ_BYTES = 256 << 10;

/** Chunks of `body` (a ReadableStream or an async/sync iterable), as Uint8Arrays. A byte stream
 *  (fetch, Cache API and Blob bodies in browsers) is read into one reused 256 KiB buffer (BYOB), so
 *  a chunk is only valid until the next one is asked for. A stream's read that brings nothing for
 *  `stallMs` cancels the stream and throws 'no data for … s'. */
export async function* chunks(body, stallMs = STALL_MS) {
  if (typeof body.getReader === 'function') {
    let reader, buffer = null;
    try { reader = body.getReader({ mode: 'byob' }); buffer = new ArrayBuffer(READ_BYTES); } catch { reader = body.getReader(); }
    try {
      for (;;) {
        const read = buffer ? reader.read(new Uint8Array(buffer)) : reader.read();
        const { done, value } = await within(read, stallMs, () => {
          const e = new Error(`no data for ${stallMs / 1000} s`);
          reader.cancel(e).catch(() => {});
          return e;
        });
        if (done) return;
        if (buffer) buffer = value.buffer;
        yield value;
      }
    } finally { reader.releaseLock(); }
  } else {
    for await (const c of body) yield c instanceof Uint8Array ? c : new Uint8Array(c);
  }
}

/** Reads a whole (small) source into one Uint8Array: tokenizer.json, config.json. */
export async function readAll(source, options) {
  const s = await open(source, options);
  const parts = []; let n = 0;
  for await (const c of chunks(s.body)) { parts.push(c.slice()); n += c.byteLength; }
  await s.stored;
  const out = new Uint8Array(n); let at = 0;
  for (const p of parts) { out.set(p, at); at += p.byteLength; }
  return out;
}

/** Deletes `url` (or every file) from the model cache; true if something was deleted. */
export async function deleteCached(url) {
  const store = await cacheStore();
  if (!store) return false;
  if (url) {
    const name = await cacheName(url);
    const had = !!(await store.get(name));
    await store.remove(name);
    return had;
  }
  await store.clear();
  return true;
}

/** The URLs of the parts of a split GGUF (`name-00001-of-00003.gguf`), or null. */
export function splitParts(url) {
  const m = /-(\d{5})-of-(\d{5})\.gguf(\?.*)?$/.exec(url);
  if (!m || Number(m[1]) !== 1) return null;
  const n = Number(m[2]);
  return Array.from({ length: n }, (_, i) => url.replace(/-\d{5}-of-(\d{5})\.gguf/, `-${String(i + 1).padStart(5, '0')}-of-$1.gguf`));
}
