// What the browser tests of the page API share: the engines (engines.mjs: Chromium, Firefox ESR,
// WebKitGTK, one driver each with the same page API), a server (glue/demo/serve.js) that counts model requests, answers a Hugging Face-shaped
// `/<org>/<repo>/resolve/main/<file>` with a 302 to a "CDN" path (with X-Linked-Size, as HF does),
// can cut a download in the middle, and can swap the file behind a URL; and a sampler of a
// worker's V8 heap through Chromium's DevTools protocol (Runtime.getHeapUsage: heap + ArrayBuffer
// backing stores), since a Worker has no performance.memory.
import { existsSync, statSync, createReadStream } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { serve } from '../demo/serve.js';
import { MODEL_PATH, fixture } from './reference.mjs';

export { ENGINES, record, CHROMIUM, FLAGS } from './engines.mjs';

export const MODEL_FILE = fileURLToPath(MODEL_PATH);
export const MODEL_SIZE = existsSync(MODEL_FILE) ? statSync(MODEL_FILE).size : 0;
export const HF_URL = '/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/resolve/main/smollm2-135m-instruct-q4_1.gguf';
export const CDN_URL = '/cdn-lfs/3f/5c1d0e/smollm2-135m-instruct-q4_1.gguf';
export const TEST_PAGE = `<!doctype html><meta charset="utf-8"><title>wasmind page API test</title>
<script type="module">import { Wasmind } from '/glue/index.js'; window.Wasmind = Wasmind; window.pageReady = true;</script>`;

/** A server for the tests: `counts['GET /path']`, `cut.add(path)` (the next GETs of path send
 *  half the file and drop the connection), `swap[path] = file` (serve another file there). */
export async function testServer(extra = {}) {
  const counts = {}, cut = new Set(), swap = {};
  const m2v = fileURLToPath(fixture('models/potion-base-8M/'));
  const tiny = fileURLToPath(fixture('models/tiny/'));
  const bert = fileURLToPath(new URL('../../host-tests/testdata/bert/', import.meta.url));
  const sendFile = (req, res, headers, file, { half = false, length = true } = {}) => {
    const size = statSync(file).size;
    res.writeHead(200, { ...headers, 'Content-Type': 'application/octet-stream', ...(length ? { 'Content-Length': size } : {}),
      'Access-Control-Allow-Origin': '*', 'Access-Control-Expose-Headers': 'Content-Length, X-Linked-Size' });
    if (req.method === 'HEAD') return res.end();
    const stream = createReadStream(file, half ? { end: Math.floor(size / 2) } : {});
    if (half) stream.on('end', () => setTimeout(() => res.socket.destroy(), 50));
    stream.pipe(res, { end: !half });
  };
  const intercept = (req, res, url, headers) => {
    const path = url.pathname;
    if (path.startsWith('/models/') || path.startsWith('/cdn-lfs/') || path.includes('/resolve/') || path.startsWith('/cut/') || path.startsWith('/swap/')) {
      const key = `${req.method} ${path}`;
      counts[key] = (counts[key] ?? 0) + 1;
    }
    if (path === HF_URL) { // HF: 302 to the CDN, with the file's size in X-Linked-Size
      res.writeHead(302, { ...headers, Location: CDN_URL, 'X-Linked-Size': MODEL_SIZE, 'Access-Control-Allow-Origin': '*' }).end();
      return true;
    }
    if (path === CDN_URL) { sendFile(req, res, headers, MODEL_FILE, { length: req.method !== 'HEAD' }); return true; } // a HEAD without Content-Length
    if (path.startsWith('/cut/')) { sendFile(req, res, headers, MODEL_FILE, { half: cut.has(path) }); return true; }
    if (path.startsWith('/swap/')) { sendFile(req, res, headers, swap[path]); return true; }
    return false;
  };
  const server = await serve({ port: 0, files: { '/models/SmolLM2-135M-Instruct.Q4_1.gguf': MODEL_FILE },
    mounts: { '/models/potion-base-8M/': m2v, '/models/tiny/': tiny, '/models/bert/': bert }, pages: { '/test.html': TEST_PAGE }, intercept, ...extra });
  const origin = `http://127.0.0.1:${server.address().port}`;
  return { server, origin, counts, cut, swap, tiny };
}

/** Samples the V8 heap of the worker named `name` (usedSize + backingStorageSize, i.e. JS objects
 *  and ArrayBuffer backing stores) every few ms until stop(), after a full GC when `gc` (so it is
 *  what the worker holds, not garbage waiting for a collection); returns { peak, samples, first }. */
export async function heapSampler(page, name, { gc = true } = {}) {
  const cdp = await page.raw.context().newCDPSession(page.raw);
  const workers = new Map();
  cdp.on('Target.attachedToTarget', (e) => { if (e.targetInfo.type === 'worker') workers.set(e.targetInfo.title, e.sessionId); });
  await cdp.send('Target.setAutoAttach', { autoAttach: true, waitForDebuggerOnStart: false, flatten: false });
  for (let i = 0; i < 100 && !workers.has(name); i++) await new Promise((r) => setTimeout(r, 50));
  const sessionId = workers.get(name);
  if (!sessionId) throw new Error(`no worker named ${name}`);
  let n = 0; const waiting = new Map();
  cdp.on('Target.receivedMessageFromTarget', (e) => { if (e.sessionId !== sessionId) return; const m = JSON.parse(e.message); waiting.get(m.id)?.(m.result); waiting.delete(m.id); });
  const ask = (method) => new Promise((ok) => {
    const id = ++n; waiting.set(id, ok);
    cdp.send('Target.sendMessageToTarget', { sessionId, message: JSON.stringify({ id, method, params: {} }) }).catch(() => ok(null));
  });
  // Garbage first: what is measured is what the worker still holds (chunks already copied into
  // the module and dropped are not).
  const usage = async () => {
    if (gc) { await ask('HeapProfiler.collectGarbage'); if (gc === 2) await ask('HeapProfiler.collectGarbage'); }
    const r = await ask('Runtime.getHeapUsage');
    return r ? { heap: r.usedSize, backing: r.backingStorageSize } : null;
  };
  const first = await usage();
  let running = true, peak = { heap: 0, backing: 0, sum: 0 }, samples = 0;
  const loop = (async () => {
    while (running) {
      const u = await usage();
      if (u) { samples++; if (u.heap + u.backing > peak.sum) peak = { ...u, sum: u.heap + u.backing }; }
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  return { first, usage, stop: async () => { running = false; await loop; await cdp.detach().catch(() => {}); return { peak, samples, first }; } };
}

/** Runs `body({ page, origin, server, browser })` on a fresh test server and a fresh browser of
 *  `engine` (engines.mjs), and closes both after. */
export async function inBrowser(engine, body) {
  const { server, origin } = await testServer();
  let browser;
  try {
    browser = await engine.launch();
    const page = await browser.newPage();
    await body({ page, origin, server, browser });
  } finally {
    await browser?.close();
    server.close();
  }
}
