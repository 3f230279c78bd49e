// source.js: where model bytes come from, as a stream of chunks with a known length (if any),
// for glue/driver.js. A URL is fetched (redirects followed, as Hugging Face's `resolve` URLs need)
// and, with `cache`, kept in the Cache API: a cached copy is used when its length equals the
// server's (HEAD: Content-Length, else X-Linked-Size; no answer, as offline, keeps the copy), else
// deleted and fetched again. The download is written to the cache as it streams (one tee), and
// the entry is committed only if the whole body arrived with the announced length: a cut
// download rejects cache.put and leaves nothing behind. Blobs stream; bytes are one chunk. In Node
// a path or file: URL streams from the file system (no Cache API there).

export const CACHE_NAME = 'wasmind-models';
const isNode = typeof process === 'object' && !!process.versions?.node;

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

/** The server's length for `url` by HEAD, or null when unknown or unreachable. */
async function serverLength(url, signal) {
  try {
    const r = await fetch(url, { method: 'HEAD', signal, cache: 'no-store' });
    return r.ok ? lengthOf(r) : null;
  } catch (e) {
    if (signal?.aborted) throw e;
    return null; // offline: the cached copy is all there is
  }
}

/** Passes chunks through and errors at the end if their total is not `total` (when known). */
function checkedLength(total, url) {
  let n = 0;
  return new TransformStream({
    transform(chunk, c) { n += chunk.byteLength; c.enqueue(chunk); },
    flush(c) { if (total !== null && n !== total) c.error(new SourceError('LENGTH', `${url}: ${n} of ${total} bytes arrived`)); },
  });
}

async function openCache(enabled) {
  if (!enabled || typeof globalThis.caches?.open !== 'function') return null;
  try { return await globalThis.caches.open(CACHE_NAME); } catch { return null; } // e.g. an opaque origin
}

/**
 * Opens `url`. Returns { total (bytes or null), body (ReadableStream or async iterable of
 * Uint8Array), fromCache, stored (a promise: true once the cache holds the file, false if not
 * cached), cancel() }.
 */
export async function openUrl(url, { cache = true, size, signal } = {}) {
  if (isNode && (url.startsWith('file:') || !/^[a-z][a-z0-9+.-]*:/i.test(url))) return openFile(url);
  const store = /^https?:/.test(url) ? await openCache(cache) : null;
  if (store) {
    const hit = await store.match(url);
    if (hit) {
      const cached = Number(hit.headers.get('content-length'));
      const server = size ?? await serverLength(url, signal);
      if (server === null || server === cached) {
        return { total: cached, body: hit.body, fromCache: true, stored: Promise.resolve(true), cancel: () => hit.body?.cancel().catch(() => {}) };
      }
      await store.delete(url); // stale: another length on the server
    }
  }
  const abort = new AbortController();
  const onAbort = () => abort.abort(signal.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  let response;
  try {
    response = await fetch(url, { signal: abort.signal });
  } catch (e) {
    signal?.removeEventListener('abort', onAbort);
    if (signal?.aborted) throw signal.reason;
    throw new SourceError('NETWORK', `${url}: ${e?.message ?? e}`);
  }
  if (!response.ok) {
    signal?.removeEventListener('abort', onAbort);
    throw new SourceError('HTTP', `${url}: HTTP ${response.status}`);
  }
  const total = lengthOf(response);
  let body = response.body.pipeThrough(checkedLength(total, url));
  let stored = Promise.resolve(false);
  if (store && total !== null) {
    const [mine, theirs] = body.tee();
    body = mine;
    const copy = new Response(theirs, { headers: { 'content-length': String(total), 'content-type': 'application/octet-stream' } });
    stored = store.put(url, copy).then(() => true, async () => { await store.delete(url).catch(() => {}); return false; });
  }
  stored.finally(() => signal?.removeEventListener('abort', onAbort));
  return { total, body, fromCache: false, stored, cancel: (why) => abort.abort(why ?? new Error('load cancelled')) };
}

async function openFile(pathOrUrl) {
  const { createReadStream } = await import('node:fs');
  const { stat } = await import('node:fs/promises');
  const path = pathOrUrl.startsWith('file:') ? new URL(pathOrUrl) : pathOrUrl;
  const { size } = await stat(path);
  const stream = createReadStream(path, { highWaterMark: 1 << 20 });
  return { total: size, body: stream, fromCache: false, stored: Promise.resolve(false), cancel: () => stream.destroy() };
}

/** Opens any source: a URL string or URL, a Blob/File, or bytes (ArrayBuffer or a view). */
export async function open(source, options = {}) {
  if (typeof source === 'string' || source instanceof URL) return openUrl(String(source), options);
  if (typeof Blob === 'function' && source instanceof Blob) {
    const body = source.stream();
    return { total: source.size, body, fromCache: false, stored: Promise.resolve(false), cancel: () => body.cancel().catch(() => {}) };
  }
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source) || (typeof SharedArrayBuffer === 'function' && source instanceof SharedArrayBuffer)) {
    const bytes = ArrayBuffer.isView(source) ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength) : new Uint8Array(source);
    return { total: bytes.byteLength, body: [bytes], fromCache: false, stored: Promise.resolve(false), cancel: () => {} };
  }
  throw new SourceError('INVALID_ARGUMENT', `cannot load from ${Object.prototype.toString.call(source)}: give a URL, a Blob or bytes`);
}

/** Chunks of `body` (a ReadableStream or an async/sync iterable), as Uint8Arrays. */
export async function* chunks(body) {
  if (typeof body.getReader === 'function') {
    const reader = body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
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
  for await (const c of chunks(s.body)) { parts.push(c); n += c.byteLength; }
  await s.stored;
  const out = new Uint8Array(n); let at = 0;
  for (const p of parts) { out.set(p, at); at += p.byteLength; }
  return out;
}

/** Deletes `url` (or every file) from the model cache; true if something was deleted. */
export async function deleteCached(url) {
  const store = await openCache(true);
  if (!store) return false;
  if (url) return store.delete(String(url));
  return globalThis.caches.delete(CACHE_NAME);
}

/** The URLs of the parts of a split GGUF (`name-00001-of-00003.gguf`), or null. */
export function splitParts(url) {
  const m = /-(\d{5})-of-(\d{5})\.gguf(\?.*)?$/.exec(url);
  if (!m || Number(m[1]) !== 1) return null;
  const n = Number(m[2]);
  return Array.from({ length: n }, (_, i) => url.replace(/-\d{5}-of-(\d{5})\.gguf/, `-${String(i + 1).padStart(5, '0')}-of-$1.gguf`));
}
